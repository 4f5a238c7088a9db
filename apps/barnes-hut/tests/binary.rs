//! The `barnes-hut` binary: the parallel version on two real processes started by
//! `ipl-run`, on an in-process pool, and against the sequential version. Every child is
//! killed when its test ends, however it ends, and every wait is bounded.

use barnes_hut::io;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use testkit::Reaped;

const LIMIT: Duration = Duration::from_secs(60);
const BIN: &str = env!("CARGO_BIN_EXE_barnes-hut");
/// A small run: 1500 bodies, two steps.
const RUN: [&str; 6] = ["-n", "1500", "--tstop", "0.05", "--seed", "9"];

/// Runs `cmd` and returns its single JSON result line.
fn result_line(cmd: &mut Command) -> Value {
    let (status, out, err) = Reaped::start(cmd).output(Instant::now() + LIMIT);
    assert!(status.success(), "{cmd:?}: {status}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "one result line from rank 0 only: {out}");
    serde_json::from_str(lines[0]).expect("the result line is JSON")
}

/// A command for the binary without any `IPL_*` variables of the test's environment.
fn barnes_hut() -> Command {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("IPL_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The `ipl-run` launcher next to the binary, built there if missing.
fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(BIN))
}

/// A scratch directory of the test's own, removed when dropped.
fn scratch() -> testkit::TempDir {
    testkit::scratch_dir("barnes-hut")
}

/// Largest distance between the positions of equal ids in two bodies files.
fn max_position_difference(a: &Path, b: &Path) -> f64 {
    let a = io::read_file(a).expect("read output");
    let b = io::read_file(b).expect("read output");
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| {
            assert_eq!(x.id, y.id, "outputs are ordered by id");
            (x.pos - y.pos).norm()
        })
        .fold(0.0, f64::max)
}

fn check_parallel_line(v: &Value, nodes: u64) {
    assert_eq!(v["app"], "barnes-hut");
    assert_eq!(v["version"], "parallel");
    assert_eq!(v["nodes"], nodes);
    assert_eq!(v["threads"], 1);
    assert_eq!(v["parameters"]["n"], 1500);
    assert_eq!(v["parameters"]["steps"], 2);
    for phase in [
        "orb_update",
        "load_balancing",
        "tree_construction",
        "center_of_mass",
        "essential_tree_exchange",
        "center_of_mass_update",
        "force_computation",
        "position_update",
    ] {
        let s = v["seconds"][phase].as_f64();
        assert!(s.is_some_and(|s| s >= 0.0), "phase {phase}: {v}");
    }
    assert!(v["seconds"]["force_computation"].as_f64().unwrap() > 0.0);
    assert!(v["total_seconds"].as_f64().unwrap() > 0.0);
    assert!(v["cpu_seconds"].as_f64().unwrap() > 0.0);
    let drift = v["energy_relative_drift"].as_f64().unwrap();
    assert!(drift.abs() < 1e-3, "energy drift {drift}");
    assert!(v["checksum"].as_f64().unwrap().is_finite());
    // What the bench harness compares with the sequential run beyond one process.
    assert_eq!(v["bodies"], 1500);
    assert!(
        (v["total_mass"].as_f64().unwrap() - 1.0).abs() < 1e-12,
        "{v}"
    );
    assert_eq!(v["center_of_mass"].as_array().map(Vec::len), Some(3));
    assert!(v["displacement_rms"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_parallel_binary_on_two_processes_follows_the_sequential_one() {
    let tmp = scratch();
    let seq_out = tmp.path().join("seq.txt");
    let par_out = tmp.path().join("par2.txt");
    let seq = result_line(
        barnes_hut()
            .arg("--seq")
            .args(RUN)
            .arg("--output")
            .arg(&seq_out),
    );
    assert_eq!(seq["version"], "sequential");
    assert!(seq["cpu_seconds"].as_f64().unwrap() > 0.0);
    let par = result_line(
        Command::new(ipl_run())
            .args(["-n", "2", "--no-prefix", "--"])
            .arg(BIN)
            .args(RUN)
            .arg("--output")
            .arg(&par_out),
    );
    check_parallel_line(&par, 2);
    assert_eq!(
        par["cpu_seconds_per_process"].as_array().map(Vec::len),
        Some(2),
        "two processes: {par}"
    );
    assert!(par["essential_items_received"].as_u64().unwrap() > 0);
    let diff = max_position_difference(&seq_out, &par_out);
    assert!(diff < 1e-5, "positions differ by up to {diff}");
}

#[test]
fn without_a_launcher_the_parallel_binary_runs_an_in_process_pool() {
    // No IPL_* variables: one node, which computes exactly what the sequential code does.
    let seq = result_line(barnes_hut().arg("--seq").args(RUN));
    let one = result_line(barnes_hut().args(RUN));
    check_parallel_line(&one, 1);
    assert_eq!(one["checksum"], seq["checksum"]);
    // The exact potential is summed in another order (by body rather than by pair).
    let (e_seq, e_one) = (
        seq["energy_start"].as_f64().unwrap(),
        one["energy_start"].as_f64().unwrap(),
    );
    assert!((e_seq - e_one).abs() < 1e-12, "energies {e_seq} {e_one}");
    // IPL_POOL_SIZE alone: that many nodes as threads of one process, one CPU figure.
    let tmp = scratch();
    let seq_out = tmp.path().join("seq-inproc.txt");
    let par_out = tmp.path().join("par3.txt");
    result_line(
        barnes_hut()
            .arg("--seq")
            .args(RUN)
            .arg("--output")
            .arg(&seq_out),
    );
    let three = result_line(
        barnes_hut()
            .args(RUN)
            .arg("--output")
            .arg(&par_out)
            .env("IPL_POOL_SIZE", "3"),
    );
    check_parallel_line(&three, 3);
    assert_eq!(
        three["cpu_seconds_per_process"].as_array().map(Vec::len),
        Some(1)
    );
    let diff = max_position_difference(&seq_out, &par_out);
    assert!(diff < 1e-5, "positions differ by up to {diff}");
}

#[test]
fn a_missing_input_file_fails_every_node_with_its_name() {
    let tmp = scratch();
    let missing = tmp.path().join("no-such-bodies.txt");
    let (status, out, err) = Reaped::start(
        barnes_hut()
            .arg("--input")
            .arg(&missing)
            .env("IPL_POOL_SIZE", "2"),
    )
    .output(Instant::now() + LIMIT);
    assert!(!status.success());
    assert!(out.is_empty(), "no result line: {out}");
    assert!(
        err.contains("no-such-bodies.txt"),
        "the error names the file: {err}"
    );
}

#[test]
fn bodies_too_large_to_compute_with_are_refused_by_body_and_field() {
    // Finite, but the squares and sums of the force computation overflow: the run used to go
    // on with NaN positions (and panic on a debug assertion in a debug build).
    let tmp = scratch();
    let input = tmp.path().join("huge-bodies.txt");
    std::fs::write(
        &input,
        "3\n0 1 0 0 0 0 0 0\n1 1 1 0 0 0 0 0\n5 1e308 1e308 -1e308 1e308 0 0 0\n",
    )
    .unwrap();
    for pool in ["1", "2"] {
        let (status, out, err) = Reaped::start(
            barnes_hut()
                .args(["--tstop", "0.05", "--input"])
                .arg(&input)
                .env("IPL_POOL_SIZE", pool),
        )
        .output(Instant::now() + LIMIT);
        assert!(!status.success(), "{pool}: {status}\n{out}");
        assert!(out.is_empty(), "{pool}: no result line: {out}");
        assert!(
            err.contains(
                "line 4: body 2 (id 5): mass is 1e308, but its magnitude must be at most 1e75"
            ),
            "{pool}: {err}"
        );
        assert!(!err.contains("panicked"), "{pool}: {err}");
    }
    // At the bound the run's figures are all finite (its bodies move past the bound, so its
    // output would not read back as input).
    let at = "2\n0 1e75 1e75 -1e75 1e75 1e75 0 -1e75\n1 1e75 -1e75 1e75 -1e75 -1e75 0 1e75\n";
    std::fs::write(&input, at).unwrap();
    let v = result_line(
        barnes_hut()
            .args(["--tstop", "0.05", "--input"])
            .arg(&input),
    );
    for key in [
        "checksum",
        "displacement_rms",
        "energy_start",
        "energy_end",
        "total_mass",
    ] {
        assert!(v[key].as_f64().is_some_and(f64::is_finite), "{key}: {v}");
    }
    let com = v["center_of_mass"].as_array().expect("the centre of mass");
    assert!(
        com.iter().all(|c| c.as_f64().is_some_and(f64::is_finite)),
        "{v}"
    );
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
/// containing `want`, no panic. Returns standard error.
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
    for mode in [&["--seq"][..], &[][..]] {
        // 100,000 threads hung starting them; 1e300 / 0.025 steps ran for ever.
        refused(
            barnes_hut().args(mode).args(["--threads", "100000"]),
            "at most 1024 threads",
        );
        refused(
            barnes_hut().args(mode).args(["--threads", "0"]),
            "at least one thread",
        );
        refused(barnes_hut().args(mode).args(["--tstop", "1e300"]), "steps");
        refused(barnes_hut().args(mode).args(["--dtime", "0"]), "time step");
        // Negative numbers are values out of range, also in the reference's spelling.
        let err = refused(
            barnes_hut().args(mode).args(["--theta", "-1"]),
            "opening angle",
        );
        assert!(!err.contains("unexpected argument"), "{err}");
        refused(barnes_hut().args(mode).args(["-tstop", "-1"]), "end time");
        // No bodies ran to a result of zeros, as if a simulation had taken place.
        refused(
            barnes_hut().args(mode).args(["-n", "0"]),
            "at least one body",
        );
        // 999,999,999 bodies aborted on allocation.
        if 999_999_999u64 * 380 > memory() {
            refused(
                barnes_hut().args(mode).args(["-n", "999999999"]),
                "more than this machine's",
            );
        }
    }
    refused(barnes_hut().args(["--bins", "1"]), "histogram bins");
    // A trillion bins aborted on allocating the histograms.
    refused(
        barnes_hut()
            .args(["--bins", "1000000000000"])
            .env("IPL_POOL_SIZE", "2"),
        "2 to 65536 histogram bins",
    );
    refused(barnes_hut().args(["--imbalance", "0.5"]), "load-imbalance");
}

#[test]
fn an_input_of_no_bodies_is_an_error() {
    let tmp = scratch();
    let path = tmp.path().join("no-bodies.txt");
    std::fs::write(&path, "0\n").unwrap();
    let (status, out, err) = Reaped::start(barnes_hut().arg("--seq").arg("--input").arg(&path))
        .output(Instant::now() + LIMIT);
    assert!(!status.success(), "{status}: {out}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("holds no bodies"), "{err}");
}

#[test]
fn an_unwritable_output_is_found_before_the_run() {
    let tmp = scratch();
    let dir = tmp.path();
    // Runs that take minutes in a debug build: the refusal must come first.
    let long = ["-n", "100000", "--tstop", "10"];
    let started = Instant::now();
    refused(
        barnes_hut()
            .arg("--seq")
            .args(long)
            .arg("--output")
            .arg(dir.join("missing/bodies.txt")),
        "--output",
    );
    refused(
        barnes_hut().args(long).arg("--output").arg(dir),
        "it is a directory",
    );
    refused(
        barnes_hut()
            .args(long)
            .arg("--output")
            .arg(dir.join("missing/bodies.txt"))
            .env("IPL_POOL_SIZE", "2"),
        "--output",
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // A good path gets the bodies, and nothing else is left beside it.
    let out = dir.join("bodies.txt");
    result_line(
        barnes_hut()
            .args(["--seq", "-n", "50", "--tstop", "0.05", "--output"])
            .arg(&out),
    );
    assert_eq!(io::read_file(&out).expect("bodies").len(), 50);
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["bodies.txt"]);
}

#[test]
fn an_input_that_is_not_a_regular_file_is_refused_rather_than_read_for_ever() {
    let tmp = scratch();
    let fifo = tmp.path().join("bodies.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // /dev/zero was read until memory ran out; a FIFO without a writer never opened.
    for input in [Path::new("/dev/zero"), fifo.as_path(), tmp.path()] {
        let (status, out, err) = Reaped::start(barnes_hut().arg("--seq").arg("--input").arg(input))
            .output(Instant::now() + LIMIT);
        assert!(!status.success(), "{input:?}: {status}");
        assert!(out.is_empty(), "{input:?}: no result line: {out}");
        assert!(
            err.contains(&*input.to_string_lossy()) && err.contains("not a regular file"),
            "{input:?}: the error names the file and why: {err}"
        );
    }
}

#[test]
fn a_run_whose_bodies_leave_the_finite_numbers_fails_rather_than_print_nulls() {
    // A time step far too large sends every body to infinity in one step; the result line
    // used to carry a null checksum and energy, with status 0.
    for parallel in [false, true] {
        let mut cmd = barnes_hut();
        cmd.args(["-n", "50", "--dtime", "1e308", "--tstop", "1e308"]);
        if !parallel {
            cmd.arg("--seq");
        }
        let (status, out, err) = Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
        assert_eq!(status.code(), Some(1), "parallel {parallel}: {err}");
        assert!(out.is_empty(), "parallel {parallel}: no result line: {out}");
        assert!(
            err.contains("the simulation diverged: after 1 steps 50 bodies")
                && err.contains("1e308"),
            "parallel {parallel}: {err}"
        );
    }
}
