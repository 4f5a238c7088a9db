//! The `sor` binary: `--seq` and the row-distributed version in one process
//! and in two real processes started by `ipl-run`, all printing the same
//! checksum and iteration count as the library's sequential solver. Every
//! child is killed when its test ends, and every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use testkit::Reaped;

use sor::{solve, Grid, Params, Stop};

/// Longest the runs of one test may take together.
const LIMIT: Duration = Duration::from_secs(60);

/// The `ipl-run` launcher next to the `sor` binary, built there if missing.
fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(env!("CARGO_BIN_EXE_sor")))
}

/// The one JSON line a run printed, before `deadline`.
fn result_line(cmd: &mut Command, deadline: Instant) -> serde_json::Value {
    let (status, out, err) = Reaped::start(cmd).output(deadline);
    assert!(status.success(), "{cmd:?}: {status}\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one result line from rank 0 only: {out}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

fn sor() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sor"));
    // No pool from the environment the tests run in.
    for var in [
        "IPL_SERVER",
        "IPL_POOL",
        "IPL_POOL_SIZE",
        "IPL_RANK",
        "IPL_DRIVER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The sequential library solve's checksum and iteration count.
fn expected(n: usize, stop: Stop) -> (String, u64) {
    let mut grid = Grid::new(n);
    let outcome = solve(&mut grid, &Params::reference(n), stop);
    (format!("{:016x}", grid.checksum()), outcome.iterations)
}

fn check(v: &serde_json::Value, version: &str, nodes: u64, threads: u64, n: usize, stop: Stop) {
    let (checksum, iterations) = expected(n, stop);
    assert_eq!(v["app"], "sor");
    assert_eq!(v["version"], version);
    assert_eq!(v["nodes"], nodes, "{v}");
    assert_eq!(v["threads"], threads);
    assert_eq!(v["parameters"]["n"], n);
    assert_eq!(v["checksum"], checksum.as_str(), "{v}");
    assert_eq!(v["iterations"], iterations, "{v}");
    assert!(v["total_seconds"].as_f64().is_some_and(|s| s >= 0.0));
    assert!(v["seconds"]["init"].as_f64().is_some());
}

#[test]
fn seq_and_one_process_print_the_library_result() {
    let n = 33;
    let deadline = Instant::now() + LIMIT;
    let v = result_line(sor().args(["--seq", "-n", "33"]), deadline);
    check(&v, "sequential", 1, 1, n, Stop::Converged);
    let v = result_line(sor().args(["-n", "33", "--threads", "2"]), deadline);
    check(&v, "parallel", 1, 2, n, Stop::Converged);
    assert!(v["seconds"]["exchange"].as_f64().is_some());
}

#[test]
fn two_processes_under_ipl_run_match_the_sequential_grid() {
    // 37 rows over 2 processes: blocks of 19 and 18.
    let n = 37;
    let launcher = ipl_run();
    let deadline = Instant::now() + LIMIT;
    for (args, stop, threads) in [
        (vec![], Stop::Converged, 1),
        (
            vec!["--iterations", "25", "--threads", "2"],
            Stop::Iterations(25),
            2,
        ),
    ] {
        let v = result_line(
            Command::new(&launcher)
                .args(["-n", "2", "--no-prefix", "--"])
                .arg(env!("CARGO_BIN_EXE_sor"))
                .args(["-n", "37"])
                .args(&args)
                .env("IPL_SPIN", "20us"),
            deadline,
        );
        check(&v, "parallel", 2, threads, n, stop);
    }
}

#[test]
fn a_pool_larger_than_the_grid_fails_with_a_message() {
    let launcher = ipl_run();
    let (status, out, err) = Reaped::start(
        Command::new(launcher)
            .args(["-n", "3", "--no-prefix", "--"])
            .arg(env!("CARGO_BIN_EXE_sor"))
            .args(["-n", "2"]),
    )
    .output(Instant::now() + LIMIT);
    assert!(!status.success());
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("cannot distribute the 2 interior rows over 3 processes"),
        "{err}"
    );
}
