//! The `sor` binary facing values it cannot serve: each is refused with one error line and
//! exit status 2 before any work, and a fatal error is printed whatever `RUST_LOG` says.

use std::process::Command;
use std::time::{Duration, Instant};

use testkit::Reaped;

const LIMIT: Duration = Duration::from_secs(60);

fn sor() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sor"));
    for (k, _) in std::env::vars() {
        if k.starts_with("IPL_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// This machine's physical memory in bytes.
fn memory() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let kib: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    kib * 1024
}

/// Runs `cmd` and checks that it refused its arguments: status 2, no output, an error line
/// containing `want`, no panic.
fn refused(cmd: &mut Command, want: &str) -> String {
    let (status, out, err) = Reaped::start(cmd).output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(2), "{cmd:?}: {status}\n{err}");
    assert!(out.is_empty(), "{cmd:?}: {out}");
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && first.contains(want),
        "{cmd:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn values_it_cannot_serve_are_refused_with_one_line_and_status_2() {
    let err = refused(sor().args(["--seq", "-n", "-5"]), "'-5'");
    assert!(!err.contains("unexpected argument"), "{err}");
    refused(sor().args(["--seq", "-n", "0"]), "'0'");
    refused(sor().args(["--seq", "-n", "65537"]), "'65537'");
    refused(sor().args(["--seq", "--threads", "0"]), "'0'");
    refused(sor().args(["--seq", "--iterations", "0"]), "'0'");
    // A grid of 65538^2 values (32 GiB) aborted on allocation where it does not fit.
    let grid = 65538u64 * 65538 * 8;
    if grid > memory() {
        refused(
            sor().args(["--seq", "-n", "65536"]),
            "more than this machine's",
        );
        // Spread over the processes of the pool, it is checked per process.
        refused(
            sor().args(["-n", "65536"]).env("IPL_POOL_SIZE", "1"),
            "per process",
        );
    }
}

#[test]
fn a_fatal_error_is_printed_whatever_rust_log_says() {
    // The README's recipe for debugging the port library filtered the error out.
    let (status, out, err) = Reaped::start(
        sor()
            .args(["-n", "8"])
            .env("IPL_DRIVER", "carrier-pigeon")
            .env("RUST_LOG", "ipl=debug"),
    )
    .output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("error: cannot read the pool configuration") && err.contains("IPL_DRIVER"),
        "{err}"
    );
}
