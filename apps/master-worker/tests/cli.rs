//! The command line refuses values it cannot serve with one line and exit status 2, before any
//! work; a fatal error is printed whatever the log filter says.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn master_worker(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_master-worker"));
    cmd.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("IPL_") || k == "RUST_LOG") {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let started = Instant::now();
    let (status, _, err) =
        testkit::Reaped::start(&mut cmd).output(started + Duration::from_secs(60));
    (status.code(), err, started.elapsed())
}

#[test]
fn values_it_cannot_serve_are_refused_in_one_line() {
    for (args, names) in [
        (&["--spin", "500000000000y"][..], "--spin"),
        (&["--seconds", "-1"], "--seconds"),
        (&["--seconds", "0"], "--seconds"),
        (&["--seconds", "1e15"], "--seconds"),
        (&["--seconds", "nan"], "--seconds"),
        (&["--report-every", "1e300"], "--report-every"),
        (&["--worker-timeout", "-3"], "--worker-timeout"),
        (&["--workers", "0"], "--workers"),
        (&["--workers", "-2"], "--workers"),
        (&["--mode", "farm", "--chunk", "0"], "--chunk"),
        (&["--mode", "farm", "-n", "-5"], "-n"),
        (&["--sweep", "0"], "--sweep"),
        (&["--sweep", "1,5000"], "--sweep"),
        (&["--repeat", "0", "--sweep", "1"], "--repeat"),
    ] {
        let (code, err, _) = master_worker(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("master-worker: "), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
    }
}

#[test]
fn settings_it_cannot_serve_are_refused_in_one_line() {
    for (key, value) in [
        ("IPL_SPIN", "500000000000y"),
        ("IPL_CONNECT_TIMEOUT", "500000000000y"),
        ("IPL_DEATH_TIMEOUT", "500000000000y"),
        ("IPL_MAX_MESSAGE", "-1"),
        ("IPL_DRIVER", "inproc"),
    ] {
        let env = [
            ("IPL_SERVER", "127.0.0.1:9"),
            ("IPL_SECRET", "s"),
            ("IPL_POOL_SIZE", "2"),
            (key, value),
        ];
        let (code, err, took) = master_worker(&["-q"], &env);
        assert_eq!(code, Some(2), "{key}={value}: {err}");
        assert_eq!(err.lines().count(), 1, "{key}: not one line: {err}");
        assert!(
            err.starts_with("master-worker: ") && err.contains(key),
            "{err}"
        );
        assert!(took < Duration::from_secs(20), "{key}: {took:?}");
    }
}

#[test]
fn a_huge_farm_runs_in_little_memory() {
    // Two billion jobs: a list of them would take tens of gigabytes.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_master-worker"));
    cmd.args([
        "--mode",
        "farm",
        "-n",
        "2000000000",
        "--chunk",
        "1",
        "--workers",
        "1",
        "--report-every",
        "0.1",
    ])
    .env("IPL_SPIN", "0")
    .stdin(Stdio::null());
    let mut run = testkit::Reaped::start(&mut cmd);
    let progress = testkit::lines(run.0.stderr.take().expect("piped"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        match progress.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((line, _)) if line.contains(" jobs done)") && !line.contains(" 0 jobs done") => {
                break
            }
            Ok((line, _)) => seen.push(line),
            Err(_) => panic!("the farm did not get going: {seen:?}"),
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", run.0.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    assert!(rss_kib < 200 << 10, "the farm holds {} MiB", rss_kib >> 10);
}

#[test]
fn a_fatal_error_is_printed_whatever_the_log_filter() {
    // A pool whose registry is not there: joining fails after the connect timeout.
    let (code, err, _) = master_worker(
        &["-q"],
        &[
            ("RUST_LOG", "ipl=debug"),
            ("IPL_SERVER", "127.0.0.1:9"),
            ("IPL_SECRET", "s"),
            ("IPL_POOL_SIZE", "2"),
            ("IPL_CONNECT_TIMEOUT", "1s"),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("master-worker: join the pool: ") && last.contains("127.0.0.1:9"),
        "{err}"
    );
}
