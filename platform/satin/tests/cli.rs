//! The benchmark binaries refuse what they cannot serve with one line and exit status 2, and
//! report failures as one line of text, never a panic or a debug dump.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn run(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary);
    // A pool member's configuration comes from these; none may leak in from outside.
    for var in [
        "IPL_SERVER",
        "SATIN_BENCH_N",
        "SATIN_BENCH_REPS",
        "SATIN_BENCH_OUT",
    ] {
        command.env_remove(var);
    }
    command
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let (status, stdout, stderr) =
        testkit::Reaped::start(&mut command).output(Instant::now() + Duration::from_secs(120));
    Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

/// Checks that `args` are refused with status 2 and one line on stderr that names `mentions`.
fn refused(binary: &str, name: &str, args: &[&str], mentions: &str) {
    let out = run(binary, args, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{name} {args:?} printed to stdout");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{name} {args:?}: not one line: {stderr}");
    assert!(lines[0].starts_with(&format!("{name}: ")), "{stderr}");
    assert!(lines[0].contains(mentions), "{name} {args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

const BENCH: &str = env!("CARGO_BIN_EXE_satin-bench");
const DIST_BENCH: &str = env!("CARGO_BIN_EXE_satin-dist-bench");

#[test]
fn satin_bench_refuses_what_it_cannot_serve() {
    let name = "satin-bench";
    refused(BENCH, name, &["--reps", "0"], "--reps");
    refused(BENCH, name, &["--reps", "-0"], "--reps");
    refused(BENCH, name, &["--reps", "-3"], "--reps");
    refused(BENCH, name, &["--reps", "1000000"], "--reps");
    refused(BENCH, name, &["--reps", "many"], "--reps");
    refused(BENCH, name, &["--reps"], "--reps");
    refused(BENCH, name, &["--quick", "--reps", "3"], "--quick");
    refused(BENCH, name, &["--frobnicate"], "--frobnicate");
    refused(BENCH, name, &["--once", "nonsense"], "--once");
    refused(BENCH, name, &["--n", "20"], "--once");
    refused(BENCH, name, &["--once", "queued", "--n", "1"], "--n");
    refused(BENCH, name, &["--once", "queued", "--n", "90"], "--n");
    refused(
        BENCH,
        name,
        &["--once", "queued", "--threads", "0"],
        "--threads",
    );
}

#[test]
fn satin_dist_bench_refuses_what_it_cannot_serve() {
    let name = "satin-dist-bench";
    refused(DIST_BENCH, name, &["--rounds", "0"], "--rounds");
    refused(DIST_BENCH, name, &["--rounds", "-0"], "--rounds");
    refused(DIST_BENCH, name, &["--rounds", "x"], "--rounds");
    refused(DIST_BENCH, name, &["overhead"], "--baseline");
    refused(
        DIST_BENCH,
        name,
        &["overhead", "--baseline", "x", "--fib", "90:3"],
        "--fib",
    );
    refused(DIST_BENCH, name, &["crash", "--at", "1.5"], "--at");
    refused(DIST_BENCH, name, &["crash", "--fib", "30:31"], "--fib");
    refused(DIST_BENCH, name, &["study", "--nodes", "1"], "--nodes");
    refused(
        DIST_BENCH,
        name,
        &["study", "--leaf-ms", "5-1"],
        "--leaf-ms",
    );
    refused(
        DIST_BENCH,
        name,
        &["study", "--latencies", "0"],
        "--latencies",
    );
    refused(DIST_BENCH, name, &["--rounds", "2", "study"], "study");
    refused(DIST_BENCH, name, &["--quick", "--rounds", "2"], "--quick");
    refused(DIST_BENCH, name, &["--frobnicate"], "--frobnicate");
}

#[test]
fn help_is_help() {
    for (binary, name) in [(BENCH, "satin-bench"), (DIST_BENCH, "satin-dist-bench")] {
        let out = run(binary, &["--help"], &[]);
        assert_eq!(out.status.code(), Some(0), "{name} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("Usage: {name}")), "{text}");
    }
}

#[test]
fn version_is_the_crate_version() {
    for (binary, name) in [(BENCH, "satin-bench"), (DIST_BENCH, "satin-dist-bench")] {
        let out = run(binary, &["--version"], &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name} --version: {text}");
        assert_eq!(
            text,
            format!("{name} {}\n", env!("CARGO_PKG_VERSION")),
            "{name} --version"
        );
        assert!(out.stderr.is_empty(), "{name} --version wrote to stderr");
    }
}

#[test]
fn a_single_variant_runs_for_instruction_counts() {
    let out = run(
        BENCH,
        &["--once", "queued", "--n", "12", "--threads", "2"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.starts_with("Queued: fib(12) on 2 threads"), "{text}");
}

#[test]
fn a_failure_is_one_line_of_text() {
    // A pool member (IPL_SERVER set) missing its configuration.
    let out = run(DIST_BENCH, &[], &[("IPL_SERVER", "127.0.0.1:9")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is not set"), "{stderr}");
    assert!(
        !stderr.contains("Error {") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
