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

/// Runs the binary with `args` and checks that it refused them: exit status 2, nothing on
/// standard output, an error line containing `want` and no panic. Returns standard error.
fn refused(cmd: &mut Command, want: &str) -> String {
    let (status, out, err) = output(cmd, Instant::now() + LIMIT);
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
    // The design's limit is 4096 x 4096.
    refused(
        raytracer().args(["--seq", "--width", "65536", "--no-png"]),
        "65536 is not in 1..=4096",
    );
    refused(
        raytracer().args(["--seq", "--height", "4097", "--no-png"]),
        "4097 is not in 1..=4096",
    );
    // A negative number is a value out of range, not an unknown option.
    let err = refused(
        raytracer().args(["--seq", "--tile", "-1", "--no-png"]),
        "'-1'",
    );
    assert!(!err.contains("unexpected argument"), "{err}");
    refused(raytracer().args(["--threads", "0", "--no-png"]), "'0'");
    // An NFF resolution above the limit is the file's error.
    let tmp = testkit::scratch_dir("raytracer-cli");
    let dir = tmp.path();
    let nff = dir.join("huge.nff");
    std::fs::write(
        &nff,
        "v\nfrom 0 0 -10\nat 0 0 0\nup 0 1 0\nangle 45\nhither 1\nresolution 65536 65536\n",
    )
    .unwrap();
    let (status, _, err) = output(
        raytracer()
            .arg("--seq")
            .arg("--nff")
            .arg(&nff)
            .arg("--no-png"),
        Instant::now() + LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("between 1 and 4096"), "{err}");
}

#[test]
fn an_unwritable_output_is_found_before_the_render() {
    let tmp = testkit::scratch_dir("raytracer-out");
    let dir = tmp.path();
    // A render that takes minutes in a debug build: the refusal must come first.
    let big = ["--width", "4096", "--height", "4096", "--aa", "4"];
    let started = Instant::now();
    for (threads, mode) in [("1", "--seq"), ("2", "--threads")] {
        let mut cmd = raytracer();
        cmd.arg(mode);
        if mode == "--threads" {
            cmd.arg(threads);
        }
        refused(
            cmd.args(big)
                .arg("--output")
                .arg(dir.join("missing/image.png")),
            "--output",
        );
    }
    refused(
        raytracer().arg("--seq").args(big).arg("-o").arg(dir),
        "it is a directory",
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // A good path gets the image, and nothing else is left beside it.
    let png = dir.join("small.png");
    result_line(
        raytracer()
            .arg("--seq")
            .args(&SMALL[..6])
            .arg("-o")
            .arg(&png),
        Instant::now() + LIMIT,
    );
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["small.png"]);
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
}

#[test]
fn a_scene_without_objects_renders_the_background() {
    let tmp = testkit::scratch_dir("raytracer-empty");
    let dir = tmp.path();
    let nff = dir.join("empty.nff");
    std::fs::write(
        &nff,
        "v\nfrom 0 0 -10\nat 0 0 0\nup 0 1 0\nangle 45\nhither 1\nresolution 16 12\nl 1 1 -5\n",
    )
    .unwrap();
    let d = Instant::now() + LIMIT;
    let seq = result_line(
        raytracer()
            .arg("--seq")
            .arg("--nff")
            .arg(&nff)
            .arg("--no-png"),
        d,
    );
    assert_eq!(seq["parameters"]["spheres"], 0);
    let par = result_line(raytracer().arg("--nff").arg(&nff).arg("--no-png"), d);
    assert_eq!(par["checksum"], seq["checksum"]);
}

#[test]
fn a_fatal_error_is_printed_whatever_rust_log_says() {
    // The README's recipe for debugging the port library.
    let (status, out, err) = output(
        raytracer()
            .args(["--seq", "--nff", "/nonexistent/scene.nff"])
            .env("RUST_LOG", "ipl=debug"),
        Instant::now() + LIMIT,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("error: cannot read NFF file /nonexistent/scene.nff"),
        "{err}"
    );
}

#[test]
fn a_scene_that_is_not_a_regular_file_is_refused_rather_than_read_for_ever() {
    let dir = testkit::scratch_dir("raytracer-nff-special");
    let fifo = dir.path().join("scene.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // /dev/zero was read until memory ran out; a FIFO without a writer never opened.
    for nff in [Path::new("/dev/zero"), fifo.as_path()] {
        let (status, out, err) = output(
            raytracer().args(["--seq", "--no-png", "--nff"]).arg(nff),
            Instant::now() + LIMIT,
        );
        assert_eq!(status.code(), Some(1), "{nff:?}: {err}");
        assert!(out.is_empty(), "{nff:?}: {out}");
        assert!(
            err.contains(&format!("cannot read NFF file {}", nff.display()))
                && err.contains("not a regular file"),
            "{nff:?}: {err}"
        );
    }
}
