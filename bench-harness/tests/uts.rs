//! The harness on the `uts` binary at the tiny size: sequential and parallel runs are recorded
//! as ok with the process count the app reports in `processes` (its `nodes` are tree nodes),
//! every checksum equals the sequential one, and the set gets its speedup chart.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const HARNESS: &str = env!("CARGO_BIN_EXE_bench-harness");

/// The directory of this build's binaries, with `uts` and `ipl-run` built in it.
fn bin_dir() -> PathBuf {
    let dir = testkit::build_binaries(env!("CARGO_MANIFEST_DIR"), &["uts", "ipl"]);
    for b in ["uts", "ipl-run"] {
        assert!(dir.join(b).is_file(), "{b} missing in {}", dir.display());
    }
    dir
}

/// The harness's output and status, before 300 s are up (then the test fails and kills it).
fn harness(args: &[&str]) -> Output {
    let mut cmd = Command::new(HARNESS);
    cmd.args(args).env("RUST_LOG", "warn").stdin(Stdio::null());
    let (status, stdout, stderr) =
        testkit::Reaped::start(&mut cmd).output(Instant::now() + Duration::from_secs(300));
    Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

#[test]
fn a_uts_sweep_records_process_counts_and_matching_checksums() {
    let bins = bin_dir();
    let tmp = testkit::scratch_dir("bench-harness-uts");
    let out = tmp.path();
    let o = harness(&[
        "run",
        "--apps",
        "uts",
        "--size",
        "tiny",
        "--nodes",
        "1,2",
        "--threads",
        "1,2",
        "--repeat",
        "1",
        "--timeout",
        "60",
        "--no-progress",
        "--bin-dir",
        bins.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
        "--name",
        "uts",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let set = out.join("uts");
    let runs: Vec<serde_json::Value> = std::fs::read_to_string(set.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The sequential baseline and P = 1, 2 with T = 1, 2.
    assert_eq!(runs.len(), 5, "{runs:?}");
    for r in &runs {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["checksum"], "1732/1050/6", "{r}");
        assert_eq!(r["result"]["nodes"], 1732, "{r}");
    }
    assert!(runs
        .iter()
        .any(|r| r["nodes"] == 2 && r["result"]["processes"] == 2));
    let summary = std::fs::read_to_string(set.join("summary.csv")).unwrap();
    let mut rows = summary.lines().map(|l| l.split(',').collect::<Vec<_>>());
    let header = rows.next().unwrap();
    let col = header
        .iter()
        .position(|h| *h == "checksum_matches")
        .unwrap();
    for row in rows.filter(|r| r[1] == "parallel") {
        assert_eq!(row[col], "true", "a checksum differs: {summary}");
    }
    assert!(set.join("charts").join("speedup-uts.png").is_file());
}
