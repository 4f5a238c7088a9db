//! Running child processes with a time bound: each child leads its own process group, so a
//! timeout or an interruption ends it and everything it started (the ranks under `ipl-run`).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A command to run: program, arguments and extra environment variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLine {
    /// The program (a path, or a name looked up on `PATH`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for it, on top of the harness's own environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
}

impl CommandLine {
    /// A command without extra environment.
    pub fn new(program: impl Into<String>, args: impl IntoIterator<Item = String>) -> Self {
        CommandLine {
            program: program.into(),
            args: args.into_iter().collect(),
            env: Vec::new(),
        }
    }

    /// The program followed by its arguments.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The command as one shell line (words quoted where needed), environment first.
    pub fn display(&self) -> String {
        let env = self.env.iter().map(|(k, v)| format!("{k}={}", quote(v)));
        env.chain(self.argv().iter().map(|w| quote(w)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl fmt::Display for CommandLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// Quotes `w` for a POSIX shell when it holds anything but plain word characters.
pub fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal it did not cause us to send ended it.
    Signal(i32),
    /// It ran past its time bound and was killed.
    TimedOut,
    /// The harness was interrupted (Ctrl-C) and killed it.
    Interrupted,
}

impl Exit {
    /// Exited with status 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    fn of(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(s)) => Exit::Signal(s),
            (None, None) => Exit::Code(-1),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
            Exit::TimedOut => f.write_str("timed out"),
            Exit::Interrupted => f.write_str("interrupted"),
        }
    }
}

/// The outcome of a finished child.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub exit: Exit,
    /// Wall-clock seconds from start to end.
    pub wall_seconds: f64,
    /// What it wrote to standard output: all of it, or its last [`KEPT_OUTPUT`] bytes from
    /// a line's start.
    pub stdout: String,
    /// What it wrote to standard error, kept as its standard output is.
    pub stderr: String,
}

/// The most of a child's standard output, and of its standard error, that an [`Outcome`]
/// holds: the end, where result lines and the last error are. A workload run with
/// `RUST_LOG=trace` can write gigabytes; [`run_logged`] leaves all of it in its log files,
/// and [`run_captured`] drops what comes before.
pub const KEPT_OUTPUT: usize = 16 << 20;

/// The last `max` bytes of `bytes`, from the start of a line when that cuts anything off: the
/// byte before them tells whether their first line is whole, and a partial one is dropped.
fn line_tail(mut bytes: Vec<u8>, max: usize) -> Vec<u8> {
    if bytes.len() <= max {
        return bytes;
    }
    let cut = bytes.len() - max;
    let from = if bytes[cut - 1] == b'\n' {
        cut
    } else {
        bytes[cut..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |nl| cut + nl + 1)
    };
    bytes.drain(..from);
    bytes
}

/// The end of the file at `p`, as [`line_tail`] keeps it. Only that much is read, and the
/// byte before it.
fn read_tail(p: &Path, max: usize) -> std::io::Result<String> {
    use std::io::{Seek, SeekFrom};
    let mut f = File::open(p)?;
    let len = f.metadata()?.len();
    let from = len.saturating_sub(max as u64 + 1);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&line_tail(bytes, max)).into_owned())
}

/// Reads `r` to its end, keeping only its end as [`line_tail`] does: a child
/// writing without end is drained (it never blocks on a full pipe) in bounded memory.
fn drain_tail(mut r: impl Read, max: usize) -> String {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n]);
                // Dropping the front only now and then keeps the copying linear.
                if kept.len() > 2 * max {
                    kept.drain(..kept.len() - max - 1);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&line_tail(kept, max)).into_owned()
}

fn spawn(cmd: &CommandLine, stdout: Stdio, stderr: Stdio) -> Result<Child> {
    let mut c = Command::new(&cmd.program);
    c.args(&cmd.args)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        // Its own process group: the terminal's Ctrl-C reaches the harness only, and a kill
        // of the group reaches every process the child started.
        .process_group(0);
    c.spawn()
        .map_err(|e| Error::io(format!("cannot start {}", cmd.display()), e))
}

/// The process group of the child being waited for (0: none).
static CURRENT_GROUP: AtomicU32 = AtomicU32::new(0);

/// Kills the process group of the child the harness is waiting for, if any. For a second
/// interruption, which ends the harness at once instead of waiting for the orderly stop that
/// the first one began.
pub fn kill_current_group() {
    let pgid = CURRENT_GROUP.load(Ordering::SeqCst);
    if pgid != 0 {
        signal_group(pgid, libc::SIGKILL);
    }
}

fn signal_group(pgid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the process group we created for the child; an empty group gives
    // ESRCH, which is harmless.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

/// Waits for `child` until it exits, `timeout` passes or `stop` is set; in the latter cases
/// its process group gets SIGTERM, then SIGKILL after a grace period. Whatever is left of the
/// group after the child exits is killed too.
fn wait_bounded(child: &mut Child, timeout: Duration, stop: &AtomicBool) -> Result<(Exit, f64)> {
    let pgid = child.id();
    CURRENT_GROUP.store(pgid, Ordering::SeqCst);
    let result = wait_group(child, pgid, timeout, stop);
    CURRENT_GROUP.store(0, Ordering::SeqCst);
    end_orphans();
    result
}

/// Set by [`adopt_orphans`]: every child of this process other than the current run's is an
/// orphan to end.
static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Makes this process the reaper of its orphaned descendants (Linux's child subreaper), so
/// that what a run leaves behind outside its process group (a rank's own group under
/// `ipl-run`, a process that started a session of its own) comes back to the harness when
/// its parent ends, and is killed after the run. Only for a process that runs one child at a
/// time, as the harness does: after each run, every child of the process is taken for an
/// orphan. Returns whether the kernel agreed.
pub fn adopt_orphans() -> bool {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes an integer flag and touches no memory.
    let ok = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 };
    ADOPTING.store(ok, Ordering::SeqCst);
    ok
}

/// The processes whose parent is this process, from `/proc`.
fn children_of_self() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| {
            // The parent is the second field after the command name, which is in
            // parentheses and may hold spaces.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<libc::pid_t>().ok()
                })
                == Some(me)
        })
        .collect()
}

/// Kills and reaps every child of this process: between runs the harness has none of its
/// own, so any there is an orphan of the last run adopted by [`adopt_orphans`]. Killing one
/// may orphan its own children, which come back too: repeated until none is left (bounded).
fn end_orphans() {
    if !ADOPTING.load(Ordering::SeqCst) {
        return;
    }
    for _ in 0..16 {
        let orphans = children_of_self();
        if orphans.is_empty() {
            return;
        }
        for pid in orphans {
            tracing::debug!(pid, "ending a process the last run left behind");
            // SAFETY: kill(2) and waitpid(2) of our own child, which only we can reap; the
            // status pointer may be null.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn wait_group(
    child: &mut Child,
    pgid: u32,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(Exit, f64)> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    let forced = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Error::io("waiting for a child process", e))?
        {
            let wall = start.elapsed().as_secs_f64();
            signal_group(pgid, libc::SIGKILL);
            return Ok((Exit::of(status), wall));
        }
        if stop.load(Ordering::Relaxed) {
            break Exit::Interrupted;
        }
        if start.elapsed() >= timeout {
            break Exit::TimedOut;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    };
    let wall = start.elapsed().as_secs_f64();
    tracing::debug!(pid = pgid, ?forced, "ending the child's process group");
    signal_group(pgid, libc::SIGTERM);
    let grace = Instant::now();
    while grace.elapsed() < Duration::from_secs(2) {
        if child
            .try_wait()
            .map_err(|e| Error::io("waiting for a child process", e))?
            .is_some()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    signal_group(pgid, libc::SIGKILL);
    child
        .wait()
        .map_err(|e| Error::io("waiting for a killed child process", e))?;
    Ok((forced, wall))
}

/// Runs `cmd` with its output going to the files `stdout` and `stderr`, bounded by `timeout`
/// and by the `stop` flag, and returns the outcome with the files' contents (their ends, past
/// [`KEPT_OUTPUT`] bytes).
pub fn run_logged(
    cmd: &CommandLine,
    timeout: Duration,
    stop: &AtomicBool,
    stdout: &Path,
    stderr: &Path,
) -> Result<Outcome> {
    let create = |p: &Path| {
        File::create(p).map_err(|e| Error::io(format!("cannot create {}", p.display()), e))
    };
    let mut child = spawn(cmd, create(stdout)?.into(), create(stderr)?.into())?;
    let (exit, wall_seconds) = wait_bounded(&mut child, timeout, stop)?;
    let read = |p: &Path| -> Result<String> {
        read_tail(p, KEPT_OUTPUT).map_err(|e| Error::io(format!("cannot read {}", p.display()), e))
    };
    Ok(Outcome {
        exit,
        wall_seconds,
        stdout: read(stdout)?,
        stderr: read(stderr)?,
    })
}

/// Runs `cmd` with its output captured in memory (its end, past [`KEPT_OUTPUT`] bytes),
/// bounded by `timeout`.
pub fn run_captured(cmd: &CommandLine, timeout: Duration) -> Result<Outcome> {
    let mut child = spawn(cmd, Stdio::piped(), Stdio::piped())?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || r.map(|r| drain_tail(r, KEPT_OUTPUT)).unwrap_or_default())
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let never = AtomicBool::new(false);
    let (exit, wall_seconds) = wait_bounded(&mut child, timeout, &never)?;
    Ok(Outcome {
        exit,
        wall_seconds,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The full path of `program` on `PATH`, if it is there.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let p = Path::new(program);
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> CommandLine {
        CommandLine::new("sh", ["-c".to_string(), script.to_string()])
    }

    #[test]
    fn captures_output_and_status() {
        let o = run_captured(
            &sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(o.exit, Exit::Code(3));
        assert_eq!(o.stdout, "out\n");
        assert_eq!(o.stderr, "err\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let tmp = testkit::scratch_dir("bh-exec");
        let dir = tmp.path();
        let pidfile = dir.join("grandchild.pid");
        // The child starts a grandchild that would outlive it, then sleeps itself.
        let script = format!("sleep 30 & echo $! > {}; sleep 30", pidfile.display());
        let stop = AtomicBool::new(false);
        let t = Instant::now();
        let o = run_logged(
            &sh(&script),
            Duration::from_millis(300),
            &stop,
            &dir.join("o"),
            &dir.join("e"),
        )
        .unwrap();
        assert_eq!(o.exit, Exit::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(10));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was in the group and is gone (or a zombie about to be reaped by
        // init): signal 0 fails, or /proc shows state Z. A SIGKILL sent is not yet one
        // delivered, so this waits for it, up to 10 s.
        let gone = || {
            // SAFETY: signal 0 only checks for existence.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
            !alive || zombie
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gone() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !gone() {
            // SAFETY: kill(2) of the grandchild this test's script started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            panic!("grandchild {pid} survived the timeout by 10 s");
        }
    }

    #[test]
    fn stop_flag_interrupts() {
        let tmp = testkit::scratch_dir("bh-exec-stop");
        let dir = tmp.path();
        let stop = AtomicBool::new(true);
        let o = run_logged(
            &sh("sleep 30"),
            Duration::from_secs(60),
            &stop,
            &dir.join("o"),
            &dir.join("e"),
        )
        .unwrap();
        assert_eq!(o.exit, Exit::Interrupted);
    }

    #[test]
    fn quoting_and_lookup() {
        let mut c = CommandLine::new(
            "ipl-run",
            ["-n", "2", "--", "a b", "it's"].map(String::from),
        );
        c.env.push(("IPL_SPIN".into(), "0".into()));
        assert_eq!(c.display(), r"IPL_SPIN=0 ipl-run -n 2 -- 'a b' 'it'\''s'");
        assert!(which("sh").is_some());
        assert!(which("surely-not-a-program-here").is_none());
    }

    #[test]
    fn only_the_end_of_a_long_output_is_kept_from_a_line_start() {
        let tmp = testkit::scratch_dir("bh-exec-tail");
        let f = tmp.path().join("out");
        for (text, max, kept) in [
            ("ab\ncd\n", 10, "ab\ncd\n"),
            ("ab\ncd\n", 6, "ab\ncd\n"),
            ("ab\ncd\n", 5, "cd\n"),
            ("ab\ncd\n", 3, "cd\n"),
            ("ab\ncd\n", 2, ""),
            ("abcdef", 3, ""),
            ("", 3, ""),
        ] {
            std::fs::write(&f, text).unwrap();
            assert_eq!(read_tail(&f, max).unwrap(), kept, "{text:?} within {max}");
            assert_eq!(
                drain_tail(text.as_bytes(), max),
                kept,
                "{text:?} within {max}"
            );
        }
        // Far more than the bound, through a pipe: drained to the end, the end kept.
        let long = "x".repeat(99) + "\n";
        let all = long.repeat(10_000) + "RESULT\n";
        let kept = drain_tail(all.as_bytes(), 1000);
        assert!(
            kept.len() <= 1000 && kept.ends_with("\nRESULT\n"),
            "{}",
            kept.len()
        );
        assert!(kept.starts_with('x'), "from a line's start");
        std::fs::write(&f, &all).unwrap();
        assert_eq!(read_tail(&f, 1000).unwrap(), kept);
    }

    #[test]
    fn a_child_writing_more_than_is_kept_is_drained_to_its_end() {
        // Three times what is kept, then a last line.
        let script = format!(
            "head -c {} /dev/zero | tr '\\0' 'x'; echo; echo last",
            3 * KEPT_OUTPUT
        );
        let o = run_captured(&sh(&script), Duration::from_secs(60)).unwrap();
        assert_eq!(o.exit, Exit::Code(0));
        assert_eq!(o.stdout, "last\n", "the long line is cut off whole");
    }

    #[test]
    fn missing_program_is_an_error() {
        let e = run_captured(
            &CommandLine::new("/nonexistent/x", []),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot start /nonexistent/x"));
    }
}
