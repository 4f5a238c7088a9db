//! The workloads on clusters. Ranks spread over network namespaces joined by a bridge (each
//! namespace a "host" with an address of its own, 10.77.0.x), started directly with the
//! environment `srun` gives them and through `ipl-run --hostfile` with a remote shell that
//! enters a namespace; and under a real `mpirun` and a real `srun` (`scripts/slurm-local`).
//! Every parallel result must carry the sequential run's checksum. A rank killed with SIGKILL
//! must be named by the others within 15 s, the launcher must end with a non-zero status, and
//! no process may be left behind.
//!
//! Namespaces need root and `ip`; the `mpirun` and `srun` tests need those launchers. Where a
//! facility is missing a test says why and does nothing on a developer's machine, but fails
//! under `CI=true` (`.ci/run` installs every facility and runs as root): CI cannot pass by
//! skipping. Every wait is bounded; namespaces and processes are removed when a test ends,
//! however it ends.
//!
//! The binaries come from the target directory this test runs from; the first test to need
//! them runs `cargo build -p sor -p master-worker -p raytracer -p ipl --bins` there.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest one test may take, all its runs together.
const LIMIT: Duration = Duration::from_secs(120);
/// How soon the other ranks must name a killed one.
const NOTICE: Duration = Duration::from_secs(15);
/// Address prefix of the namespace hosts: host i is 10.77.0.(i+1).
const SUBNET: &str = "10.77.0";

/// The directory holding the binaries, built if needed.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        testkit::build_binaries(
            env!("CARGO_MANIFEST_DIR"),
            &["sor", "master-worker", "raytracer", "ipl"],
        )
    })
}

fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.is_file(), "{} missing", p.display());
    p
}

/// A process started by a test, leading a process group of its own; killed with its group
/// when dropped before it was waited for.
struct Proc {
    child: Child,
    reaped: bool,
}

impl Proc {
    fn start(cmd: &mut Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Proc {
            child,
            reaped: false,
        }
    }

    /// Standard output and error to their end, and the exit status, before `deadline`.
    fn finish(mut self, deadline: Instant) -> (ExitStatus, String, String) {
        let out = read_all(self.child.stdout.take().expect("piped stdout"));
        let err = read_all(self.child.stderr.take().expect("piped stderr"));
        let get = |rx: Receiver<String>| {
            rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("a run did not finish within the test's {LIMIT:?}"))
        };
        let (out, err) = (get(out), get(err));
        (self.wait(deadline), out, err)
    }

    /// The exit status, before `deadline`.
    fn wait(&mut self, deadline: Instant) -> ExitStatus {
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                self.reaped = true;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "process {} still running at the deadline",
                self.child.id()
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: kill(2) of the group our unreaped child leads.
            unsafe {
                libc::kill(-(self.child.id() as i32), libc::SIGKILL);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    rx
}

/// Lines of `pipe` as they come, with the time each arrived.
fn lines(pipe: impl Read + Send + 'static) -> Receiver<(String, Instant)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(pipe);
        let mut line = String::new();
        while let Ok(n) = std::io::BufRead::read_line(&mut r, &mut line) {
            if n == 0
                || tx
                    .send((line.trim_end().to_string(), Instant::now()))
                    .is_err()
            {
                break;
            }
            line.clear();
        }
    });
    rx
}

/// The JSON result lines in `out` (after an optional `[rank] ` prefix), with that rank.
fn results(out: &str) -> Vec<(Option<u32>, serde_json::Value)> {
    out.lines()
        .filter_map(|l| {
            let (rank, rest) = match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
                Some((r, rest)) => (r.parse().ok(), rest),
                None => (None, l),
            };
            rest.starts_with('{')
                .then(|| serde_json::from_str(rest).ok().map(|v| (rank, v)))
                .flatten()
        })
        .collect()
}

/// A workload: its binary, the arguments of a tiny parallel run, and of the sequential run.
struct Workload {
    app: &'static str,
    args: &'static [&'static str],
    seq: &'static [&'static str],
}

const SOR: Workload = Workload {
    app: "sor",
    args: &["-n", "64"],
    seq: &["--seq", "-n", "64"],
};
const MASTER_WORKER: Workload = Workload {
    app: "master-worker",
    args: &["--mode", "farm", "--n", "100000", "--chunk", "5000", "-q"],
    seq: &[
        "--mode",
        "sequential",
        "--n",
        "100000",
        "--chunk",
        "5000",
        "-q",
    ],
};
const RAYTRACER: Workload = Workload {
    app: "raytracer",
    args: &["--width", "64", "--height", "48", "--tile", "8", "--no-png"],
    seq: &[
        "--seq", "--width", "64", "--height", "48", "--tile", "8", "--no-png",
    ],
};

impl Workload {
    /// The sequential run's checksum.
    fn expected(&self, deadline: Instant) -> serde_json::Value {
        let mut cmd = Command::new(bin(self.app));
        cmd.args(self.seq).env_clear();
        let (status, out, err) = Proc::start(&mut cmd).finish(deadline);
        assert!(status.success(), "{} --seq: {status}\n{err}", self.app);
        let r = results(&out);
        assert_eq!(r.len(), 1, "{out}");
        r[0].1["checksum"].clone()
    }

    /// Checks that `out` holds exactly one result line, of a `nodes`-process parallel run
    /// with the sequential checksum; returns the rank that printed it, where prefixed.
    fn check(&self, out: &str, err: &str, nodes: u64, expected: &serde_json::Value) -> Option<u32> {
        let r = results(out);
        assert_eq!(r.len(), 1, "{}: one result line:\n{out}\n{err}", self.app);
        let (rank, v) = &r[0];
        assert_eq!(v["app"], self.app, "{v}");
        assert_eq!(v["nodes"], nodes, "{}: {v}", self.app);
        assert_eq!(&v["checksum"], expected, "{}: {v}", self.app);
        *rank
    }
}

/// Runs an `ip` command, failing with its error output.
fn ip(args: &[&str]) -> Result<String, String> {
    let ip = ip_binary().ok_or("no 'ip' command")?;
    let mut cmd = Command::new(ip);
    cmd.args(args);
    let (status, out, err) = Proc::start(&mut cmd).finish(Instant::now() + Duration::from_secs(20));
    if status.success() {
        Ok(out)
    } else {
        Err(format!("ip {}: {}", args.join(" "), err.trim()))
    }
}

fn ip_binary() -> Option<PathBuf> {
    bench_harness::exec::which("ip").or_else(|| {
        ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// Prefix of every namespace these tests create; the creating process's id follows.
const NS_PREFIX: &str = "iplt";

/// Hosts made of network namespaces: `h0..hN` with addresses 10.77.0.1..N on one bridge,
/// which lives in a namespace of its own. Dropping it kills every process left in its
/// namespaces and deletes them.
struct Cluster {
    /// Namespace names of the hosts, in order.
    hosts: Vec<String>,
    /// The bridge's namespace.
    bridge: Option<String>,
    /// Scratch directory (remote-shell scripts, host files).
    dir: PathBuf,
}

impl Cluster {
    /// `n` hosts, or why they cannot be made here (then the test is skipped).
    fn new(n: usize) -> Result<Cluster, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        if ip_binary().is_none() {
            return Err("no 'ip' command (iproute2)".into());
        }
        remove_stale_namespaces();
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{NS_PREFIX}{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("ipl-cluster-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("scratch directory: {e}"))?;
        let mut c = Cluster {
            hosts: Vec::new(),
            bridge: None,
            dir,
        };
        let b = format!("{tag}b");
        ip(&["netns", "add", &b])?;
        c.bridge = Some(b.clone());
        ip(&["-n", &b, "link", "set", "lo", "up"])?;
        ip(&["-n", &b, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &b, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let h = format!("{tag}h{i}");
            ip(&["netns", "add", &h])?;
            c.hosts.push(h.clone());
            let v = format!("v{i}");
            ip(&[
                "-n", &b, "link", "add", &v, "type", "veth", "peer", "name", "eth0", "netns", &h,
            ])?;
            ip(&["-n", &b, "link", "set", &v, "master", "br0"])?;
            ip(&["-n", &b, "link", "set", &v, "up"])?;
            ip(&[
                "-n",
                &h,
                "addr",
                "add",
                &format!("{}/24", addr(i)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &h, "link", "set", "eth0", "up"])?;
            ip(&["-n", &h, "link", "set", "lo", "up"])?;
        }
        Ok(c)
    }

    /// `program` as a process of host `i`.
    fn exec(&self, i: usize, program: &Path) -> Command {
        let mut cmd = Command::new(ip_binary().expect("ip"));
        cmd.args(["netns", "exec", &self.hosts[i]]).arg(program);
        cmd
    }

    /// Processes running in host `i`.
    fn pids(&self, i: usize) -> Vec<i32> {
        ns_pids(&self.hosts[i])
    }

    /// The processes on host `i` but the guardians ipl starts beside each rank that ipl-run
    /// started through a remote shell (named `ipl-lifeline`; they end with their rank).
    fn ranks(&self, i: usize) -> Vec<i32> {
        self.pids(i)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .map_or(true, |c| c.trim() != "ipl-lifeline")
            })
            .collect()
    }

    /// A remote shell `SCRIPT HOST COMMAND...` that runs COMMAND in the namespace of the host
    /// with that address. `detached`: like `ssh`, the command does not die with the remote
    /// shell (it runs in a session of its own), so only losing the pool can end it.
    fn rsh(&self, detached: bool) -> PathBuf {
        let mut s = String::from("#!/bin/sh\nhost=$1\nshift\ncase \"$host\" in\n");
        for (i, h) in self.hosts.iter().enumerate() {
            s += &format!("    {}) ns={h} ;;\n", addr(i));
        }
        s += "    *) echo \"rsh: no host $host\" >&2; exit 255 ;;\nesac\n";
        let ip = ip_binary().expect("ip");
        if detached {
            s += &format!(
                // A background job's standard input is /dev/null; keep the shell's, which
                // carries the pool secret (ipl-run writes it there, as for ssh).
                "exec 3<&0\nsetsid {} netns exec \"$ns\" \"$@\" <&3 3<&- &\nexec 3<&-\nwait $!\n",
                ip.display()
            );
        } else {
            s += &format!("exec {} netns exec \"$ns\" \"$@\"\n", ip.display());
        }
        let p = self.dir.join(if detached { "rsh-detached" } else { "rsh" });
        std::fs::write(&p, s).expect("write rsh");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A host file with `text`.
    fn hostfile(&self, text: &str) -> PathBuf {
        let p = self.dir.join("hosts");
        std::fs::write(&p, text).expect("write host file");
        p
    }

    /// Waits until no process is left in any host, before `deadline`.
    fn wait_empty(&self, deadline: Instant) {
        loop {
            let left: Vec<(usize, Vec<i32>)> = (0..self.hosts.len())
                .map(|i| (i, self.pids(i)))
                .filter(|(_, p)| !p.is_empty())
                .collect();
            if left.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "processes left behind (host, pids): {left:?}"
            );
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain(&self.bridge) {
            remove_namespace(ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn addr(i: usize) -> String {
    format!("{SUBNET}.{}", i + 1)
}

fn ns_pids(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|o| {
            o.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn kill(pid: i32) {
    // SAFETY: kill(2) of a process found in a namespace this test created.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn remove_namespace(ns: &str) {
    for pid in ns_pids(ns) {
        kill(pid);
    }
    let _ = ip(&["netns", "del", ns]);
}

/// Deletes namespaces of earlier test processes that no longer run (killed before their
/// clean-up).
fn remove_stale_namespaces() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(NS_PREFIX)
            .and_then(|r| r.split('x').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_namespace(name);
        }
    }
}

/// Whether the tests run under CI (`CI=true`, as CI services and `.ci/run` set it), where a
/// missing facility is a failure.
fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Reports a facility `test` needs and this machine lacks: a skip that says why, or under
/// CI a failure (panics), since `.ci/run` installs every facility.
fn missing_facility(test: &str, why: &str) {
    assert!(
        !under_ci(),
        "{test}: missing facility under CI=true: {why} (.ci/run installs iproute2, OpenMPI, \
         Slurm and valgrind and runs as root)"
    );
    println!("skipping {test}: {why}");
    eprintln!("skipping {test}: {why}");
}

/// `tool` on the `PATH` of this process, or `None` after [`missing_facility`] said why
/// `test` cannot run without it.
fn need_tool(test: &str, tool: &str, install: &str) -> Option<PathBuf> {
    let found = bench_harness::exec::which(tool);
    if found.is_none() {
        missing_facility(test, &format!("no {tool} on PATH ({install})"));
    }
    found
}

/// `n` namespace hosts, or `None` after [`missing_facility`] said why the test does nothing.
fn cluster(test: &str, n: usize) -> Option<Cluster> {
    match Cluster::new(n) {
        Ok(c) => Some(c),
        Err(why) => {
            missing_facility(test, &format!("cannot make namespace hosts: {why}"));
            None
        }
    }
}

/// A job id no other run uses.
fn job_id() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// What `srun` gives rank `rank` of a 4-task step spread one task per host over `c`.
fn srun_env(c: &Cluster, job: &str, rank: usize) -> Vec<(String, String)> {
    let n = c.hosts.len();
    [
        ("SLURM_JOB_ID", job.to_string()),
        ("SLURM_STEP_ID", "0".into()),
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_NTASKS", n.to_string()),
        ("SLURM_STEP_NUM_TASKS", n.to_string()),
        ("SLURM_STEP_NUM_NODES", n.to_string()),
        ("SLURM_STEP_NODELIST", format!("{SUBNET}.[1-{n}]")),
        ("SLURMD_NODENAME", addr(rank)),
        ("PATH", "/usr/bin:/bin".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[test]
fn workloads_on_four_hosts_started_with_an_srun_environment() {
    let Some(c) = cluster(
        "workloads_on_four_hosts_started_with_an_srun_environment",
        4,
    ) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    for w in [SOR, MASTER_WORKER, RAYTRACER] {
        let expected = w.expected(deadline);
        let job = job_id();
        // One rank per host, with nothing but the launcher's variables: rank 0 on 10.77.0.1
        // runs the registry, the others find it there.
        let ranks: Vec<Proc> = (0..c.hosts.len())
            .map(|r| {
                let mut cmd = c.exec(r, &bin(w.app));
                cmd.args(w.args).env_clear().envs(srun_env(&c, &job, r));
                Proc::start(&mut cmd)
            })
            .collect();
        let runs: Vec<_> = ranks.into_iter().map(|p| p.finish(deadline)).collect();
        let mut printed = Vec::new();
        for (rank, (status, out, err)) in runs.iter().enumerate() {
            assert!(
                status.success(),
                "{} rank {rank}: {status}\n{out}\n{err}",
                w.app
            );
            if !out.trim().is_empty() {
                printed.push(rank);
            }
        }
        let all: String = runs.iter().map(|r| r.1.as_str()).collect();
        let errs: String = runs.iter().map(|r| r.2.as_str()).collect();
        w.check(&all, &errs, c.hosts.len() as u64, &expected);
        if w.app == "sor" {
            assert_eq!(printed, [0], "the pool's rank 0 is the launcher's rank 0");
        }
    }
    c.wait_empty(deadline);
}

#[test]
fn workloads_on_hosts_of_a_hostfile_through_ipl_run() {
    let Some(c) = cluster("workloads_on_hosts_of_a_hostfile_through_ipl_run", 4) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    let rsh = c.rsh(false);
    // ipl-run (and the registry) on host 0; four ranks on the other three hosts.
    let hosts = c.hostfile(&format!(
        "# test hosts\n{} slots=2\n{}\n{}   # last\n",
        addr(1),
        addr(2),
        addr(3)
    ));
    for w in [SOR, MASTER_WORKER, RAYTRACER] {
        let expected = w.expected(deadline);
        let mut cmd = c.exec(0, &bin("ipl-run"));
        cmd.arg("--hostfile")
            .arg(&hosts)
            .arg("--rsh")
            .arg(&rsh)
            .arg("--")
            .arg(bin(w.app))
            .args(w.args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        let (status, out, err) = Proc::start(&mut cmd).finish(deadline);
        assert!(status.success(), "{}: {status}\n{out}\n{err}", w.app);
        let rank = w.check(&out, &err, 4, &expected);
        if w.app == "sor" {
            assert_eq!(rank, Some(0), "{out}");
        }
    }
    c.wait_empty(deadline);
}

/// A line reporting an error of a rank: the app's fatal error (`error: ...`, printed whatever
/// the log filter, after `ipl-run`'s `[rank] ` prefix where there is one) or a log record at
/// level ERROR. A launcher's own lines (`srun: error: ...`) are not the ranks'.
fn is_error(line: &str) -> bool {
    let unprefixed = match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((rank, rest)) if rank.parse::<u32>().is_ok() => rest,
        _ => line,
    };
    line.contains("ERROR") || unprefixed.starts_with("error: ")
}

/// Which of `ranks` printed a line naming the killed rank `victim` (as a node that died),
/// with the time it came, until `rx` ends or `deadline`; also returns every line seen.
fn namings(
    rx: &Receiver<(String, Instant)>,
    victim: &str,
    deadline: Instant,
    prefixed: bool,
) -> (Vec<(String, Instant)>, Vec<String>) {
    let mut named = Vec::new();
    let mut all = Vec::new();
    while let Ok((line, at)) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if is_error(&line) && line.contains(victim) && line.contains("died") {
            let who = if prefixed {
                line.split(']')
                    .next()
                    .unwrap_or("")
                    .trim_start_matches('[')
                    .to_string()
            } else {
                line.clone()
            };
            named.push((who, at));
        }
        all.push(line);
    }
    (named, all)
}

/// Waits until `rx` has given lines containing `what` from `n` different sources (the prefix
/// `[rank]`, or the whole line), before `deadline`.
fn wait_for_lines(rx: &Receiver<(String, Instant)>, what: &str, n: usize, deadline: Instant) {
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < n {
        let (line, _) = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("only {} of {n} ranks said '{what}'", seen.len()));
        if line.contains(what) {
            seen.insert(line.split(']').next().unwrap_or(&line).to_string());
        }
    }
}

/// A long SOR run, logging when each rank starts solving.
const LONG_SOR: &[&str] = &["-n", "64", "--iterations", "100000000"];
const STARTED: &str = "starting the distributed solve";

#[test]
fn a_rank_killed_on_one_host_is_named_by_the_others_and_nothing_is_left() {
    let Some(c) = cluster(
        "a_rank_killed_on_one_host_is_named_by_the_others_and_nothing_is_left",
        4,
    ) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    // Ranks that, as under ssh, do not die with their remote shell.
    let rsh = c.rsh(true);
    let hosts = c.hostfile(&format!(
        "{}\n{}\n{}\n{}\n",
        addr(0),
        addr(1),
        addr(2),
        addr(3)
    ));
    let mut cmd = c.exec(0, &bin("ipl-run"));
    cmd.arg("--hostfile")
        .arg(&hosts)
        .arg("--rsh")
        .arg(&rsh)
        .arg("--")
        .arg(bin("sor"))
        .args(LONG_SOR)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        // Passed on to the remote ranks by ipl-run.
        .env("RUST_LOG", "sor=info");
    let mut run = Proc::start(&mut cmd);
    let out = read_all(run.child.stdout.take().expect("piped"));
    let err = lines(run.child.stderr.take().expect("piped"));
    wait_for_lines(&err, STARTED, 4, deadline);
    // Rank 2 is the one process on host 2.
    let victims = c.ranks(2);
    assert_eq!(victims.len(), 1, "{victims:?}");
    kill(victims[0]);
    let killed = Instant::now();
    let status = run.wait(killed + NOTICE + Duration::from_secs(10));
    assert!(!status.success(), "ipl-run must fail: {status}");
    let (named, all) = namings(&err, "node2@", deadline, true);
    let text = all.join("\n");
    for rank in ["0", "1", "3"] {
        let (_, at) = named
            .iter()
            .find(|(who, _)| who == rank)
            .unwrap_or_else(|| panic!("rank {rank} did not name node2:\n{text}"));
        assert!(
            at.duration_since(killed) < NOTICE,
            "rank {rank} took {:?}",
            at.duration_since(killed)
        );
    }
    // The launcher reports the first rank it saw end badly: the killed one, or one of those
    // that stopped because of it, whichever remote shell returned first.
    assert!(text.contains("stopping the others"), "{text}");
    let out = out
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("stdout");
    assert!(results(&out).is_empty(), "no result after a failure: {out}");
    c.wait_empty(killed + NOTICE);
}

/// Processes (pid, environment) whose environment holds `marker`.
fn marked(marker: &str) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            let env = String::from_utf8_lossy(&env).replace('\0', "\n");
            if env.lines().any(|l| l == marker) {
                v.push((pid, env));
            }
        }
    }
    v
}

/// The processes holding `marker` and `var=value` in their environment.
fn marked_with(marker: &str, var: &str, value: &str) -> Vec<i32> {
    let want = format!("{var}={value}");
    marked(marker)
        .into_iter()
        .filter(|(_, env)| env.lines().any(|l| l == want))
        .map(|(p, _)| p)
        .collect()
}

fn wait_unmarked(marker: &str, deadline: Instant) {
    loop {
        let left = marked(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {:?}",
            left.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// A command for `launcher` with no pool variables of the test's own environment.
fn launcher_command(launcher: &Path) -> Command {
    let mut cmd = Command::new(launcher);
    for (k, _) in std::env::vars() {
        if k.starts_with("IPL_")
            || k.starts_with("OMPI_")
            || k.starts_with("SLURM_")
            || k.starts_with("PMI")
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Starts `cmd` (a launcher of a long SOR run with `marker` in its environment), kills the
/// rank whose `rank_var` is 2 once all four are solving, and checks how the job ends: the
/// launcher fails naming rank 2, the errors of the others that name node2 come within
/// 15 s, and no process is left. Where `all_report` (the launcher lets the others end on their
/// own) each of them reports, naming node2 and nothing else.
fn kill_rank_2(
    mut cmd: Command,
    marker: &str,
    rank_var: &str,
    launcher_names: &str,
    all_report: bool,
) {
    let deadline = Instant::now() + LIMIT;
    let mut run = Proc::start(&mut cmd);
    let out = read_all(run.child.stdout.take().expect("piped"));
    let err = lines(run.child.stderr.take().expect("piped"));
    // Unprefixed output: count four start lines.
    let mut started = 0;
    while started < 4 {
        let (line, _) = err
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("only {started} of 4 ranks started"));
        started += usize::from(line.contains(STARTED));
    }
    let victims = marked_with(marker, rank_var, "2");
    assert_eq!(
        victims.len(),
        1,
        "one process with {rank_var}=2: {victims:?}"
    );
    kill(victims[0]);
    let killed = Instant::now();
    let status = run.wait(killed + NOTICE);
    assert!(!status.success(), "the launcher must fail: {status}");
    let (named, all) = namings(&err, "node2@", deadline, false);
    let text = all.join("\n");
    assert!(text.contains(launcher_names), "{text}");
    if all_report {
        for line in all.iter().filter(|l| is_error(l)) {
            assert!(
                line.contains("node2@"),
                "an error that does not name node2: {line}"
            );
        }
    }
    for (line, at) in &named {
        assert!(at.duration_since(killed) < NOTICE, "{line}");
    }
    if all_report {
        assert_eq!(named.len(), 3, "ranks 0, 1 and 3 each name node2:\n{text}");
    }
    let out = out
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("stdout");
    assert!(results(&out).is_empty(), "no result after a failure: {out}");
    wait_unmarked(marker, killed + NOTICE);
}

#[test]
fn mpirun_runs_the_workloads_and_a_killed_rank_fails_the_job() {
    let Some(mpirun) = need_tool(
        "mpirun_runs_the_workloads_and_a_killed_rank_fails_the_job",
        "mpirun",
        "apt-get install openmpi-bin",
    ) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    let mpirun_cmd = || {
        let mut cmd = launcher_command(&mpirun);
        cmd.args(["-n", "4", "--oversubscribe"]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("--allow-run-as-root");
        }
        cmd
    };
    for w in [SOR, RAYTRACER] {
        let expected = w.expected(deadline);
        let mut cmd = mpirun_cmd();
        cmd.arg(bin(w.app)).args(w.args);
        let (status, out, err) = Proc::start(&mut cmd).finish(deadline);
        assert!(status.success(), "mpirun {}: {status}\n{out}\n{err}", w.app);
        w.check(&out, &err, 4, &expected);
    }
    let marker = format!("IPL_TEST_MARK=mpirun-{}", job_id());
    let mut cmd = mpirun_cmd();
    let (k, v) = marker.split_once('=').unwrap();
    cmd.env(k, v)
        .env("RUST_LOG", "sor=info")
        .args(["-x", k, "-x", "RUST_LOG"])
        .arg(bin("sor"))
        .args(LONG_SOR);
    // mpirun aborts the job as soon as a rank dies: the others may be gone before they report.
    kill_rank_2(cmd, &marker, "OMPI_COMM_WORLD_RANK", "rank 2", false);
}

#[test]
fn srun_runs_sor_and_a_killed_rank_fails_the_step() {
    let Some(srun) = need_tool(
        "srun_runs_sor_and_a_killed_rank_fails_the_step",
        "srun",
        "scripts/slurm-local installs and starts a one-node Slurm",
    ) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    let srun_cmd = || {
        let mut cmd = launcher_command(&srun);
        // Four tasks on however few cores; give up rather than queue when the node is busy.
        cmd.args([
            "--overcommit",
            "-n",
            "4",
            "--immediate=30",
            "--kill-on-bad-exit=0",
        ]);
        cmd
    };
    let expected = SOR.expected(deadline);
    let mut cmd = srun_cmd();
    cmd.arg(bin("sor")).args(SOR.args);
    let (status, out, err) = Proc::start(&mut cmd).finish(deadline);
    assert!(status.success(), "srun sor: {status}\n{out}\n{err}");
    SOR.check(&out, &err, 4, &expected);
    let marker = format!("IPL_TEST_MARK=srun-{}", job_id());
    let mut cmd = srun_cmd();
    let (k, v) = marker.split_once('=').unwrap();
    cmd.env(k, v)
        .env("RUST_LOG", "sor=info")
        .arg(bin("sor"))
        .args(LONG_SOR);
    kill_rank_2(cmd, &marker, "SLURM_PROCID", "task 2", true);
}

/// satin's `fib` example, built in this profile.
fn fib_example() -> PathBuf {
    let dir = bin_dir();
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "-q",
        "-p",
        "satin",
        "--example",
        "fib",
    ]);
    if profile != "debug" {
        cmd.args(["--profile", profile]);
    }
    let (status, _, err) = Proc::start(&mut cmd).finish(Instant::now() + Duration::from_secs(900));
    assert!(status.success(), "building the fib example failed: {err}");
    let p = dir.join("examples").join("fib");
    assert!(p.is_file(), "{} missing", p.display());
    p
}

#[test]
fn srun_no_kill_keeps_a_satin_step_going_when_a_task_dies() {
    let Some(srun) = need_tool(
        "srun_no_kill_keeps_a_satin_step_going_when_a_task_dies",
        "srun",
        "scripts/slurm-local installs and starts a one-node Slurm",
    ) else {
        return;
    };
    let deadline = Instant::now() + LIMIT;
    let fib = fib_example();
    let marker = format!("IPL_TEST_MARK=srun-no-kill-{}", job_id());
    let (k, v) = marker.split_once('=').unwrap();
    let mut cmd = launcher_command(&srun);
    // --no-kill: the step goes on when a task dies, and the program deals with it.
    cmd.args(["--no-kill", "--overcommit", "-n", "4", "--immediate=30"])
        .env(k, v)
        .env("RUST_LOG", "satin::distributed=debug")
        .arg(&fib)
        // Seconds of work on four single-threaded tasks.
        .args(["40", "20", "1"]);
    let mut run = Proc::start(&mut cmd);
    let out = read_all(run.child.stdout.take().expect("piped"));
    let err = lines(run.child.stderr.take().expect("piped"));
    let mut started = 0;
    let mut seen = Vec::new();
    while started < 4 {
        let (line, _) = err
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("only {started} of 4 tasks started: {seen:#?}"));
        started += usize::from(line.contains("run started"));
        seen.push(line);
    }
    let victims = marked_with(&marker, "SLURM_PROCID", "2");
    assert_eq!(
        victims.len(),
        1,
        "one process with SLURM_PROCID=2: {victims:?}"
    );
    kill(victims[0]);
    let status = run.wait(deadline);
    let out = out
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("stdout");
    let mut rest = Vec::new();
    while let Ok((line, _)) = err.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        rest.push(line);
    }
    let text = rest.join("\n");
    // Task 0, the master, prints the exact result although task 2 died mid-run.
    assert!(
        out.contains("fib(40) = 102334155"),
        "no exact result after the death of task 2 (srun {status}):\n{out}\n{text}"
    );
    assert!(
        text.contains("a member died") && text.contains("node2@"),
        "the others did not see task 2 die:\n{text}"
    );
    wait_unmarked(&marker, deadline);
}

/// Runs the test `name` of this test binary alone, with `PATH` holding only an empty
/// directory (so that no launcher is found) and `CI` as given; returns whether it passed and
/// its output.
fn rerun_without_tools(name: &str, ci: Option<&str>) -> (bool, String) {
    let empty = testkit::scratch_dir("ipl-cluster-empty-path");
    let mut cmd = Command::new(std::env::current_exe().expect("test executable"));
    cmd.args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("PATH", empty.path())
        .env_remove("CI");
    if let Some(v) = ci {
        cmd.env("CI", v);
    }
    let (status, out, err) = Proc::start(&mut cmd).finish(Instant::now() + Duration::from_secs(60));
    (status.success(), format!("{out}\n{err}"))
}

#[test]
fn a_missing_launcher_fails_the_cluster_tests_under_ci_and_skips_them_elsewhere() {
    // A rerun of this binary must not come back here.
    if std::env::var_os("PATH")
        .is_some_and(|p| p.to_string_lossy().contains("ipl-cluster-empty-path-"))
    {
        return;
    }
    for test in [
        "mpirun_runs_the_workloads_and_a_killed_rank_fails_the_job",
        "srun_runs_sor_and_a_killed_rank_fails_the_step",
        "srun_no_kill_keeps_a_satin_step_going_when_a_task_dies",
    ] {
        let (passed, out) = rerun_without_tools(test, Some("true"));
        assert!(
            !passed,
            "{test} passed under CI=true without its launcher:\n{out}"
        );
        assert!(
            out.contains("missing facility under CI=true") && out.contains("on PATH"),
            "{test}: {out}"
        );
        let (passed, out) = rerun_without_tools(test, None);
        assert!(
            passed,
            "{test} failed outside CI without its launcher:\n{out}"
        );
        assert!(out.contains(&format!("skipping {test}")), "{test}: {out}");
    }
}

#[test]
fn the_ci_script_refuses_to_run_without_root_under_ci() {
    const TEST: &str = "the_ci_script_refuses_to_run_without_root_under_ci";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/run");
    // As root, the script runs as nobody; otherwise as this user.
    // SAFETY: geteuid has no preconditions.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let Some(setpriv) = need_tool(TEST, "setpriv", "apt-get install util-linux") else {
            return;
        };
        let mut c = Command::new(setpriv);
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "bash"]);
        c
    } else {
        Command::new("bash")
    };
    // No cargo on this PATH: a script that went on past its check fails at once instead of
    // running the whole suite again. CI unset: the script sets it.
    cmd.arg(&script)
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CI");
    let (status, out, err) = Proc::start(&mut cmd).finish(Instant::now() + Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "{status}\n{out}\n{err}");
    assert!(
        err.contains("ci: must run as root under CI=true"),
        "{out}\n{err}"
    );
}
