//! The `raytracer` binary: `--seq` and the Satin version print the same
//! checksum; the parallel version runs on a one-node pool (also under
//! `ipl-run -n 1`) and spread over several processes with either stealing
//! policy, always giving the sequential image. Every
//! child is killed when its test ends, and every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use testkit::Reaped;

/// Longest the runs of one test may take together.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end before `deadline`: exit status, stdout, stderr.
fn output(cmd: &mut Command, deadline: Instant) -> (ExitStatus, String, String) {
    Reaped::start(cmd).output(deadline)
}

/// The one JSON line a successful run printed before `deadline`.
fn result_line(cmd: &mut Command, deadline: Instant) -> serde_json::Value {
    let (status, out, err) = output(cmd, deadline);
    assert!(status.success(), "{cmd:?}: {status}\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one result line: {out}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

/// The `ipl-run` launcher next to the `raytracer` binary, built there if
/// missing.
fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(env!("CARGO_BIN_EXE_raytracer")))
}

/// Small-image arguments.
const SMALL: [&str; 7] = ["--width", "48", "--height", "36", "--tile", "8", "--no-png"];

fn raytracer() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_raytracer"));
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

#[test]
fn seq_and_parallel_print_the_same_checksum() {
    let d = Instant::now() + LIMIT;
    let seq = result_line(raytracer().arg("--seq").args(SMALL), d);
    assert_eq!(seq["version"], "sequential");
    assert_eq!(
        (seq["nodes"].as_u64(), seq["threads"].as_u64()),
        (Some(1), Some(1))
    );
    for threads in ["1", "3"] {
        let par = result_line(raytracer().args(SMALL).args(["--threads", threads]), d);
        assert_eq!(par["app"], "raytracer");
        assert_eq!(par["version"], "parallel");
        assert_eq!(par["nodes"], 1);
        assert_eq!(par["threads"].to_string(), threads);
        assert_eq!(par["parameters"], seq["parameters"]);
        assert_eq!(par["checksum"], seq["checksum"], "{threads} threads");
        assert!(par["seconds"]["render"].as_f64().is_some());
        assert!(par["satin"]["jobs_executed"].as_u64() >= Some(36));
    }
    // A different image gives a different checksum.
    let other = result_line(raytracer().arg("--seq").args(SMALL).args(["--aa", "2"]), d);
    assert_ne!(other["checksum"], seq["checksum"]);
}

#[test]
fn parallel_runs_under_ipl_run_with_one_node() {
    let launcher = ipl_run();
    let d = Instant::now() + LIMIT;
    let seq = result_line(raytracer().arg("--seq").args(SMALL), d);
    let par = result_line(
        Command::new(launcher)
            .args(["-n", "1", "--no-prefix", "--"])
            .arg(env!("CARGO_BIN_EXE_raytracer"))
            .args(SMALL)
            .args(["--threads", "2"]),
        d,
    );
    assert_eq!(
        (par["nodes"].as_u64(), par["threads"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(par["checksum"], seq["checksum"]);
}

#[test]
fn processes_render_the_sequential_image_with_both_stealing_policies() {
    let launcher = ipl_run();
    let d = Instant::now() + LIMIT;
    let seq = result_line(raytracer().arg("--seq").args(SMALL), d);
    for (nodes, clusters, steal) in [
        ("2", "1", "random"),
        ("3", "1", "random"),
        ("2", "1", "cluster-aware"),
        ("4", "2", "cluster-aware"),
    ] {
        let (status, out, err) = output(
            Command::new(&launcher)
                .args(["-n", nodes, "--clusters", clusters, "--"])
                .arg(env!("CARGO_BIN_EXE_raytracer"))
                .args(SMALL)
                .args(["--steal", steal]),
            d,
        );
        assert!(status.success(), "{nodes} processes, {steal}: {err}");
        // Only the master reports.
        let lines: Vec<&str> = out.lines().filter(|l| l.contains("{\"app\"")).collect();
        assert_eq!(lines.len(), 1, "{out}");
        let json = &lines[0][lines[0].find('{').expect("a JSON object")..];
        let par: serde_json::Value = serde_json::from_str(json).expect("the result line");
        assert_eq!(par["nodes"].to_string(), nodes);
        assert_eq!(par["parameters"], seq["parameters"]);
        assert_eq!(
            par["checksum"], seq["checksum"],
            "{nodes} processes in {clusters} locations, {steal}"
        );
    }
}

#[test]
fn a_bad_stealing_policy_is_refused() {
    let d = Instant::now() + LIMIT;
    let (status, out, err) = output(raytracer().args(SMALL).args(["--steal", "greedy"]), d);
    assert!(!status.success());
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("unknown stealing policy 'greedy'"), "{err}");
    // --seq needs no pool at all, whatever the environment says.
    let v = result_line(
        raytracer()
            .arg("--seq")
            .args(SMALL)
            .env("IPL_POOL_SIZE", "2"),
        d,
    );
    assert_eq!(v["version"], "sequential");
}
