//! `bsp-bench` refuses every value it cannot serve with one line on standard error and exit
//! status 2, before measuring anything.

use std::process::Command;
use std::time::Duration;

/// Runs the built `bsp-bench` with `args`; its exit status and standard error.
fn bench(args: &[&str]) -> (Option<i32>, String) {
    bench_with(args, &[])
}

/// [`bench`] with `env` added to the environment.
fn bench_with(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bsp-bench"))
        .args(args)
        .env_remove("BSP_BENCH_ROLE")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bsp-bench starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bsp-bench {args:?} ran for 30 s instead of refusing its arguments");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn values_it_cannot_serve_get_one_line_and_status_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--reps", "0"], "--reps"),
        (&["--reps", "-1"], "-1"),
        (&["--iters", "-0"], "-0"),
        (&["--big-iters", "0"], "--big-iters"),
        (&["--coll-iters", "-3"], "--coll-iters"),
        (&["--rounds", "0"], "--rounds"),
        (&["--procs", "0"], "--procs"),
        (&["--procs", "2,-4"], "-4"),
        (&["--procs", "100000"], "--procs"),
        (&["--packets", "0"], "--packets"),
        (&["--packets", "99999999999"], "--packets"),
        (&["--combining-reps", "0"], "--combining-reps"),
        (&["--single-messages", "x"], "--single-messages"),
        (&["--probe", "--max-h", "0"], "--max-h"),
        (&["--probe", "--probe-iters", "-5"], "--probe-iters"),
        (&["--no-such-option"], "--no-such-option"),
        (
            &["--json", "/nonexistent-directory/figures.json"],
            "/nonexistent-directory/figures.json",
        ),
    ];
    for (args, named) in cases {
        let (code, err) = bench(args);
        assert_eq!(code, Some(2), "{args:?}: status {code:?}, stderr {err:?}");
        let lines: Vec<&str> = err.trim().lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {err:?}");
        assert!(
            lines[0].contains(named),
            "{args:?}: {err:?} does not name {named}"
        );
        assert!(
            !lines[0].contains("unexpected argument") || args[0] == "--no-such-option",
            "{args:?}: {err:?}"
        );
        assert!(!lines[0].contains("panicked"), "{args:?}: {err:?}");
    }
}

#[test]
fn help_is_not_an_error() {
    let (code, _) = bench(&["--help"]);
    assert_eq!(code, Some(0));
    // Whatever RUST_LOG holds: the arguments are read before the log filter.
    let (code, err) = bench_with(&["--help"], &[("RUST_LOG", "bsp=degub")]);
    assert_eq!(code, Some(0), "{err}");
    // A run, though, refuses the filter, naming it.
    let (code, err) = bench_with(&["--quick"], &[("RUST_LOG", "bsp=degub")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RUST_LOG"), "{err}");
}
