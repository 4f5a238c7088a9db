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
