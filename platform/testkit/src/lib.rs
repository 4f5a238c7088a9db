//! Test support for the workspace's integration tests that start processes.
//!
//! Every test that starts a process must bound its time and leave nothing behind: a
//! [`Reaped`] child is killed and reaped when it goes out of scope (also when the test panics),
//! and [`Reaped::output`] reads its output within a deadline or fails the test.
//!
//! ```
//! use std::process::Command;
//! use std::time::{Duration, Instant};
//!
//! let child = testkit::Reaped::start(Command::new("echo").arg("hello"));
//! let (status, out, err) = child.output(Instant::now() + Duration::from_secs(10));
//! assert!(status.success());
//! assert_eq!((out.as_str(), err.as_str()), ("hello\n", ""));
//! ```

#![warn(missing_docs)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Instant;

/// A child process that is killed and reaped when dropped (`ipl-run` takes its ranks with it).
/// The child is public for tests that read its pipes or kill it themselves.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Reaped {
    /// Starts `cmd` with its standard output and error piped.
    ///
    /// # Panics
    /// If the program cannot be started.
    pub fn start(cmd: &mut Command) -> Reaped {
        Reaped(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
        )
    }

    /// Standard output and error to their end (the child's exit) before `deadline`, and the
    /// exit status. A stream that is not piped reads as empty.
    ///
    /// # Panics
    /// If the child has not closed its output by `deadline` (it is then killed on drop).
    pub fn output(mut self, deadline: Instant) -> (ExitStatus, String, String) {
        let out = self.0.stdout.take().map(read_all);
        let err = self.0.stderr.take().map(read_all);
        let finished = |rx: Option<Receiver<String>>| {
            rx.map_or_else(String::new, |rx| {
                rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .unwrap_or_else(|_| panic!("a child process did not finish in time"))
            })
        };
        let (out, err) = (finished(out), finished(err));
        let status = self.0.wait().expect("wait for the child");
        (status, out, err)
    }
}

/// A scratch directory that goes away with what it holds when dropped.
pub use tempfile::TempDir;

/// A new, empty directory of its own under the system's temporary directory, its name starting
/// with `tag`, that is removed with everything in it when the guard is dropped: also when the
/// test fails half-way (an assertion's panic unwinds through it), which a removal at the end of
/// the test would skip, leaving the directory behind.
///
/// # Panics
/// If the directory cannot be made, naming `tag` and why.
pub fn scratch_dir(tag: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{tag}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot make a scratch directory for {tag}: {e}"))
}

/// Reads `pipe` to its end on a thread of its own.
pub fn read_all(mut pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// The `ipl-run` launcher in the directory of `bin` (a binary of this build, e.g.
/// `env!("CARGO_BIN_EXE_sor")`), built there with cargo if it is missing.
///
/// # Panics
/// If the build fails.
pub fn ipl_run_beside(bin: &Path) -> PathBuf {
    let launcher = bin.with_file_name("ipl-run");
    if !launcher.is_file() {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "ipl", "--bin", "ipl-run"]);
        if bin.parent().and_then(Path::file_name) == Some("release".as_ref()) {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build for ipl-run");
        assert!(
            status.success(),
            "cargo build -p ipl --bin ipl-run: {status}"
        );
    }
    assert!(launcher.is_file(), "no ipl-run at {}", launcher.display());
    launcher
}

/// Builds the binaries of `packages` (`cargo build -p P... --bins`, from `manifest_dir`) in the
/// profile of the running test executable, and returns that profile's directory, which holds
/// them. The build is bounded to 15 minutes (cargo is killed past that).
///
/// # Panics
/// If the build fails or takes longer, with cargo's error output.
pub fn build_binaries(manifest_dir: &str, packages: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("profile directory")
        .to_path_buf();
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(manifest_dir).args(["build", "-q"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    cmd.arg("--bins");
    if profile != "debug" {
        cmd.args(["--profile", profile]);
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(900);
    let (status, _, err) = Reaped::start(&mut cmd).output(deadline);
    assert!(status.success(), "building {packages:?} failed: {err}");
    dir
}

/// Lines of `pipe` as they come, each with the time it arrived, read on a thread of its own.
pub fn lines(pipe: impl Read + Send + 'static) -> Receiver<(String, Instant)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send((line, Instant::now())).is_err() {
                break;
            }
        }
    });
    rx
}

/// A `NAME=VALUE` environment entry no other test run uses, to find a test's processes (and
/// their children, which inherit it) with [`marked`].
pub fn marker(tag: &str) -> (String, String) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (
        "TESTKIT_MARK".to_string(),
        format!(
            "{tag}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            t.subsec_nanos()
        ),
    )
}

/// The processes whose environment holds every one of `entries` (`NAME=VALUE` lines).
pub fn marked(entries: &[&str]) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
        if entries.iter().all(|want| vars.contains(&want.as_bytes())) {
            found.push(pid);
        }
    }
    found
}

/// Kills (SIGKILL) every process whose environment holds all of `entries`.
pub fn kill_marked(entries: &[&str]) {
    for pid in marked(entries) {
        // SAFETY: kill(2) has no memory effects; the pid is one of this test's processes.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Waits until no process whose environment holds all of `entries` is left, before `deadline`;
/// the ones left then (killed on the way out, so that a failed test leaves nothing behind).
pub fn wait_unmarked(entries: &[&str], deadline: Instant) -> Result<(), Vec<i32>> {
    loop {
        let left = marked(entries);
        // Zombies of processes whose parent has not reaped them yet have an empty environment
        // and are not counted.
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            kill_marked(entries);
            return Err(left);
        }
        std::thread::park_timeout(std::time::Duration::from_millis(20));
    }
}

/// Kills every process whose environment holds all of its entries when dropped, so that a
/// test that fails half-way leaves none of the processes it marked behind; and removes the
/// directory it was given, if any, after them.
pub struct KillMarked {
    entries: Vec<String>,
    dir: Option<std::path::PathBuf>,
}

impl KillMarked {
    /// A guard of the processes whose environment holds all of `entries`.
    pub fn new(entries: Vec<String>) -> Self {
        KillMarked { entries, dir: None }
    }

    /// The entries that mark the guarded processes.
    pub fn entries(&self) -> Vec<&str> {
        self.entries.iter().map(String::as_str).collect()
    }
}

impl Drop for KillMarked {
    fn drop(&mut self) {
        kill_marked(&self.entries());
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Hosts made of network namespaces, for tests of programs that start processes on other
/// hosts through a remote shell. Needs root and `ip` (iproute2).
/// `mpirun -n N` on this host as root may run it (`--allow-run-as-root --oversubscribe`,
/// more ranks than cores), passing on the named variables (`-x`) and a [`marker`], with a
/// guard that kills every marked process (the ranks: `mpirun` killed by a test's time bound
/// leaves them running) when the test ends; None where `mpirun` is not on the PATH, which is
/// a skip outside CI and a failure (a panic naming `test`) under `CI=true`.
pub fn mpirun(test: &str, n: u32, pass: &[&str]) -> Option<(Command, KillMarked)> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mpirun"))
            .find(|p| p.is_file())
    });
    let Some(mpirun) = found else {
        assert!(
            !netns::required(),
            "{test}: CI=true but no mpirun on the PATH (.ci/run installs openmpi-bin)"
        );
        eprintln!("{test}: skipped: no mpirun on the PATH");
        return None;
    };
    let (mark, value) = marker("mpirun");
    // A session directory of its own: OpenMPI 4's runs that start at the same moment (tests
    // run in parallel) race to make the one they share, and the loser fails with "File
    // exists" (orte/util/session_dir.c).
    let dir = std::env::temp_dir().join(format!("testkit-{value}"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("{test}: making {}: {e}", dir.display());
    }
    let mut cmd = Command::new(mpirun);
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--mca",
        "orte_tmpdir_base",
    ])
    .arg(&dir)
    .arg("-n")
    .arg(n.to_string())
    .args(["-x", &mark])
    .env(&mark, &value);
    for var in pass {
        cmd.args(["-x", var]);
    }
    let guard = KillMarked {
        entries: vec![format!("{mark}={value}")],
        dir: Some(dir),
    };
    Some((cmd, guard))
}

/// Hosts in network namespaces of their own, joined by a bridge, for tests of programs that
/// span hosts (needs root and `ip`).
pub mod netns {
    use super::Reaped;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    /// Prefix of every namespace made here; the making process's id follows.
    const PREFIX: &str = "tkns";

    /// `h0..hN` with addresses 10.79.0.1..N on one bridge that lives in a namespace of its
    /// own. Dropping it kills every process left in its namespaces and deletes them.
    pub struct Hosts {
        /// Namespace names of the hosts, in order.
        pub names: Vec<String>,
        bridge: Option<String>,
        /// Scratch directory of the remote-shell script and other files of the test.
        pub dir: PathBuf,
    }

    /// The `ip` command.
    pub fn ip_binary() -> Option<PathBuf> {
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    }

    fn ip(args: &[&str]) -> Result<String, String> {
        let ip = ip_binary().ok_or("no 'ip' command (iproute2)")?;
        let (status, out, err) = Reaped::start(Command::new(ip).args(args))
            .output(Instant::now() + Duration::from_secs(20));
        if status.success() {
            Ok(out)
        } else {
            Err(format!("ip {}: {}", args.join(" "), err.trim()))
        }
    }

    /// Kills the processes in namespace `ns` and deletes it.
    fn remove(ns: &str) {
        if let Ok(pids) = ip(&["netns", "pids", ns]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2) of a process in a namespace a test made.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        let _ = ip(&["netns", "del", ns]);
    }

    /// Namespaces of earlier test processes that no longer run.
    fn remove_stale() {
        let Ok(list) = ip(&["netns", "list"]) else {
            return;
        };
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let owner = name
                .strip_prefix(PREFIX)
                .and_then(|r| r.split('x').next())
                .and_then(|p| p.parse::<u32>().ok());
            if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                remove(name);
            }
        }
    }

    /// Whether tests must not skip for want of a facility: `CI` is `true` in any case, or
    /// `1`, as `.ci/run` reads it.
    pub fn required() -> bool {
        std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
    }

    impl Hosts {
        /// `n` hosts, or why they cannot be made here.
        pub fn new(n: usize) -> Result<Hosts, String> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err("network namespaces need root".into());
            }
            ip_binary().ok_or("no 'ip' command (iproute2)")?;
            remove_stale();
            static N: AtomicU32 = AtomicU32::new(0);
            let tag = format!(
                "{PREFIX}{}x{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            );
            let dir = std::env::temp_dir().join(format!("testkit-{tag}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("scratch directory: {e}"))?;
            let mut h = Hosts {
                names: Vec::new(),
                bridge: None,
                dir,
            };
            let b = format!("{tag}b");
            ip(&["netns", "add", &b])?;
            h.bridge = Some(b.clone());
            ip(&["-n", &b, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &b, "link", "set", "br0", "up"])?;
            for i in 0..n {
                let name = format!("{tag}h{i}");
                ip(&["netns", "add", &name])?;
                h.names.push(name.clone());
                let v = format!("v{i}");
                ip(&[
                    "-n", &b, "link", "add", &v, "type", "veth", "peer", "name", "eth0", "netns",
                    &name,
                ])?;
                ip(&["-n", &b, "link", "set", &v, "master", "br0"])?;
                ip(&["-n", &b, "link", "set", &v, "up"])?;
                let a = format!("{}/24", Hosts::addr(i));
                ip(&["-n", &name, "addr", "add", &a, "dev", "eth0"])?;
                ip(&["-n", &name, "link", "set", "eth0", "up"])?;
                ip(&["-n", &name, "link", "set", "lo", "up"])?;
            }
            Ok(h)
        }

        /// The address of host `i`.
        pub fn addr(i: usize) -> String {
            format!("10.79.0.{}", i + 1)
        }

        /// `program` as a process of host `i`.
        pub fn exec(&self, i: usize, program: &Path) -> Command {
            let mut cmd = Command::new(ip_binary().expect("ip exists: checked when made"));
            cmd.args(["netns", "exec", &self.names[i]]).arg(program);
            cmd
        }

        /// A remote shell `SCRIPT HOST COMMAND...` that, like `ssh`, runs COMMAND in the
        /// namespace of the host with that address in a session of its own, passes its
        /// standard input on, and stays until COMMAND ends.
        pub fn rsh(&self) -> PathBuf {
            let mut s = String::from("#!/bin/sh\nhost=$1\nshift\ncase \"$host\" in\n");
            for (i, h) in self.names.iter().enumerate() {
                s += &format!("    {}) ns={h} ;;\n", Hosts::addr(i));
            }
            s += "    *) echo \"rsh: no host $host\" >&2; exit 255 ;;\nesac\n";
            // A background command's standard input would be /dev/null: hand it on explicitly.
            s += &format!(
                "exec 3<&0\nsetsid {} netns exec \"$ns\" \"$@\" <&3 3<&- &\nexec 3<&-\nwait $!\n",
                ip_binary().expect("ip exists").display()
            );
            let p = self.dir.join("rsh");
            std::fs::write(&p, s).expect("write the remote shell");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
                .expect("make the remote shell executable");
            p
        }
    }

    impl Drop for Hosts {
        fn drop(&mut self) {
            for ns in self.names.iter().chain(&self.bridge) {
                remove(ns);
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    /// A test that fails half-way (its assertion panics) leaves no scratch directory behind.
    #[test]
    fn a_scratch_directory_goes_when_its_test_panics() {
        let mut made = None;
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let dir = super::scratch_dir("testkit-unwind");
            std::fs::write(dir.path().join("file"), "left?").unwrap();
            made = Some(dir.path().to_path_buf());
            panic!("a failed assertion");
        }));
        assert!(failed.is_err());
        let made = made.expect("the directory was made");
        assert!(
            made.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("testkit-unwind-")),
            "{}",
            made.display()
        );
        assert!(!made.exists(), "{} is left", made.display());
    }
}
