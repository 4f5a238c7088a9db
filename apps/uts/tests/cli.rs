//! The `uts` binary: one JSON line per run with the counts, equal in every mode; processes
//! under `ipl-run` (tcp) with both stealing policies give the published counts; bad flags and
//! trees past the node limit end with a clear error and exit status 2, never a panic. Every
//! child is killed when its test ends, and every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use testkit::Reaped;

/// Longest the runs of one test may take together.
const LIMIT: Duration = Duration::from_secs(120);

fn output(cmd: &mut Command, deadline: Instant) -> (ExitStatus, String, String) {
    Reaped::start(cmd).output(deadline)
}

/// The one JSON line a successful run printed (after `ipl-run`'s rank prefix, if any).
fn result_line(cmd: &mut Command, deadline: Instant) -> serde_json::Value {
    let (status, out, err) = output(cmd, deadline);
    assert!(status.success(), "{cmd:?}: {status}\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("{\"app\"")).collect();
    assert_eq!(lines.len(), 1, "one result line: {out}");
    let json = &lines[0][lines[0].find('{').expect("a JSON object")..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"))
}

fn uts() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uts"));
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

fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(env!("CARGO_BIN_EXE_uts")))
}

/// (nodes, leaves, max_depth) of a result line.
fn counts(v: &serde_json::Value) -> (u64, u64, u64) {
    let get = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    (get("nodes"), get("leaves"), get("max_depth"))
}

const T3: (u64, u64, u64) = (4_112_897, 3_599_034, 1572);
const T1: (u64, u64, u64) = (4_130_071, 3_305_118, 10);

#[test]
fn every_mode_prints_the_same_counts() {
    let d = Instant::now() + LIMIT;
    let default = result_line(uts().arg("--seq"), d);
    assert_eq!(counts(&default), (1732, 1050, 6));
    assert_eq!(default["parameters"]["tree"], "default");
    let seq = result_line(uts().args(["--seq", "--sample", "T3"]), d);
    assert_eq!(counts(&seq), T3);
    assert_eq!(seq["app"], "uts");
    assert_eq!(seq["version"], "sequential");
    assert_eq!(seq["mode"], "sequential");
    assert_eq!(
        (seq["processes"].as_u64(), seq["threads"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(seq["checksum"], "4112897/3599034/1572");
    let rate = seq["nodes_per_second"].as_f64().unwrap();
    let secs = seq["total_seconds"].as_f64().unwrap();
    assert!(
        (rate * secs - 4_112_897.0).abs() < 1.0,
        "{rate} nodes/s over {secs} s"
    );
    // The same tree from its flags.
    let flags = [
        "-t", "0", "-b", "2000", "-q", "0.124875", "-m", "8", "-r", "42",
    ];
    for (mode, extra) in [
        ("satin", &["--threads", "2"][..]),
        ("satin", &["--threads", "3"][..]),
        ("rayon", &["--rayon", "--threads", "2"][..]),
    ] {
        let v = result_line(uts().args(flags).args(extra), d);
        assert_eq!(counts(&v), T3, "{extra:?}");
        assert_eq!(v["mode"], mode);
        assert_eq!(v["version"], "parallel");
        assert_eq!(v["parameters"]["tree"], "T3");
        assert_eq!(v["threads"].to_string(), extra[extra.len() - 1]);
        assert_eq!(v["checksum"], seq["checksum"]);
    }
    let t1 = result_line(uts().args(["--sample", "T1", "--threads", "2"]), d);
    assert_eq!(counts(&t1), T1);
    // On one process satin hands out work when a worker asks, half the stack at a time.
    assert_eq!(t1["parameters"]["split"], "on demand", "{t1}");
    assert_eq!(t1["parameters"]["chunk"], "half", "{t1}");
    assert!(t1["satin"]["spawns"].as_u64() >= Some(1), "{t1}");
    let fixed = result_line(
        uts().args(["--sample", "T1", "--threads", "2", "--split-every", "128"]),
        d,
    );
    assert_eq!(counts(&fixed), T1);
    assert_eq!(fixed["parameters"]["split_every"], 128, "{fixed}");
    assert_eq!(fixed["parameters"]["chunk"], 4, "{fixed}");
    assert!(fixed["satin"]["spawns"].as_u64() > Some(100), "{fixed}");
}

#[test]
fn processes_under_ipl_run_give_the_published_counts() {
    let launcher = ipl_run();
    let d = Instant::now() + LIMIT;
    for (nodes, clusters, steal, tree, want) in [
        ("1", "1", "random", "T3", T3),
        ("2", "1", "random", "T3", T3),
        ("2", "1", "cluster-aware", "T3", T3),
        ("3", "2", "cluster-aware", "T3", T3),
        ("4", "1", "random", "T3", T3),
        ("2", "1", "random", "T1", T1),
        ("4", "2", "cluster-aware", "T1", T1),
        ("2", "1", "on-demand", "T3", T3),
        ("3", "1", "on-demand", "T1", T1),
    ] {
        // "on-demand": cluster-aware stealing, work handed out only when asked.
        let (steal, split) = match steal {
            "on-demand" => ("cluster-aware", &["--split-on-demand"][..]),
            s => (s, &[][..]),
        };
        let v = result_line(
            Command::new(&launcher)
                .args(["-n", nodes, "--clusters", clusters, "--"])
                .arg(env!("CARGO_BIN_EXE_uts"))
                .args(["--sample", tree, "--steal", steal])
                .args(split),
            d,
        );
        assert_eq!(
            counts(&v),
            want,
            "{tree} on {nodes} processes in {clusters} locations, {steal}"
        );
        assert_eq!(v["processes"].to_string(), nodes);
        if nodes != "1" {
            assert_eq!(v["parameters"]["steal"], steal);
            // Between processes work goes out at fixed intervals unless asked otherwise.
            let want_split = if split.is_empty() {
                "every"
            } else {
                "on demand"
            };
            let got_split = v["parameters"]["split"].as_str().unwrap_or("every");
            assert_eq!(got_split, want_split, "{v}");
        }
    }
}

#[test]
fn bad_flags_are_refused_with_status_2() {
    let d = Instant::now() + LIMIT;
    for (args, want) in [
        (&["-t", "7"][..], "unknown tree type 7"),
        (
            &["-b", "-1"][..],
            "-b -1: the root branching factor must be a positive number",
        ),
        // Not its 301 digits.
        (
            &["-b", "1e300"][..],
            "-b 1e300: the root branching factor must be at most",
        ),
        (
            &["-q", "2"][..],
            "-q 2: a probability must be between 0 and 1",
        ),
        (&["-m", "200"][..], "-m 200"),
        (&["-a", "9"][..], "unknown geometric shape 9"),
        (&["-g", "0"][..], "-g 0"),
        (&["--threads", "0"][..], "--threads"),
        (
            &["--steal", "greedy"][..],
            "unknown stealing policy 'greedy'",
        ),
        (&["--sample", "T9"][..], "unknown sample tree 'T9'"),
        (&["--sample", "T1", "-t", "0"][..], "cannot be used with"),
        (&["--seq", "--rayon"][..], "cannot be used with"),
        (&["--rayon", "--split-on-demand"][..], "cannot be used with"),
        (
            &["--split-on-demand", "--split-every", "64"][..],
            "cannot be used with",
        ),
        (&["--chunk", "0"][..], "--chunk"),
        (&["--max-nodes", "0"][..], "--max-nodes"),
    ] {
        let (status, out, err) = output(uts().args(args), d);
        assert_eq!(status.code(), Some(2), "{args:?}: {status}\n{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_tree_that_never_ends_stops_at_the_node_limit_with_status_2() {
    let d = Instant::now() + LIMIT;
    let endless = [
        "-t",
        "1",
        "-a",
        "3",
        "-d",
        "100000",
        "--max-nodes",
        "2000000",
    ];
    for extra in [
        &["--seq"][..],
        &["--threads", "2"][..],
        &["--rayon", "--threads", "2"][..],
    ] {
        let (status, out, err) = output(uts().args(endless).args(extra), d);
        assert_eq!(status.code(), Some(2), "{extra:?}: {status}\n{err}");
        assert!(out.is_empty(), "{extra:?}: {out}");
        assert!(
            err.contains("the tree has more than 2000000 nodes"),
            "{extra:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
    let (status, out, err) = output(
        Command::new(ipl_run())
            .args(["-n", "2", "--"])
            .arg(env!("CARGO_BIN_EXE_uts"))
            .args(endless),
        d,
    );
    assert_eq!(status.code(), Some(2), "{out}\n{err}");
    assert!(
        err.contains("the tree has more than 2000000 nodes"),
        "{err}"
    );
    assert!(!out.contains("{\"app\""), "{out}");
}

/// Runs `cmd` with at most `bytes` of address space, so that a search that outgrows its limits
/// fails at once instead of taking the machine's memory.
fn within_address_space(cmd: &mut Command, bytes: u64) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes as libc::rlim_t,
                rlim_max: bytes as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    }
}

#[test]
fn a_tree_that_keeps_its_nodes_pending_stops_at_the_pending_limit() {
    // Every node but the root has 100 children: nearly every node generated stays pending,
    // and long before the default node limit (2^32) the stack would need 112 GiB. The
    // default pending limit stops it at 112 MiB; 1 GiB of address space shows that it does.
    let d = Instant::now() + LIMIT;
    let runaway = ["-t", "0", "-b", "2000", "-q", "1", "-m", "100"];
    let want = "the search held more than 4194304 nodes pending at once (the pending limit";
    for extra in [
        &["--seq"][..],
        &["--threads", "2"][..],
        &["--rayon", "--threads", "2"][..],
        // Handing out work at every node leaves the stack small and piles the nodes up in
        // tasks instead, which count as well.
        &["--threads", "2", "--split-every", "1", "--chunk", "1000000"][..],
        &[
            "--rayon",
            "--threads",
            "2",
            "--split-every",
            "1",
            "--chunk",
            "1000000",
        ][..],
    ] {
        let (status, out, err) = output(
            within_address_space(uts().args(runaway).args(extra), 1 << 30),
            d,
        );
        assert_eq!(status.code(), Some(2), "{extra:?}: {status}\n{err}");
        assert!(out.is_empty(), "{extra:?}: {out}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let (status, out, err) = output(
        within_address_space(
            Command::new(ipl_run())
                .args(["-n", "2", "--"])
                .arg(env!("CARGO_BIN_EXE_uts"))
                .args(runaway),
            1 << 30,
        ),
        d,
    );
    assert_eq!(status.code(), Some(2), "{out}\n{err}");
    assert!(err.contains(want), "{err}");
    assert!(!out.contains("{\"app\""), "{out}");
}

#[test]
fn a_traced_run_writes_its_steals_and_idle_periods() {
    let d = Instant::now() + LIMIT;
    let tmp = testkit::scratch_dir("uts-trace-test");
    let dir = tmp.path();
    let run = result_line(
        uts()
            .args(["--sample", "T1", "--threads", "2", "--trace"])
            .arg(dir),
        d,
    );
    assert_eq!(counts(&run), T1);
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one trace file for one process: {files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let events: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e})", files[0].display()));
    let names: Vec<&str> = events
        .as_array()
        .expect("an array of events")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for want in ["satin.start", "satin.counts"] {
        assert!(names.contains(&want), "no {want} in {names:?}");
    }
    // A run on two workers of four million nodes hands out work: the idle worker steals.
    assert!(names.contains(&"satin.steal"), "no steal in {names:?}");

    // A trace that cannot be written is refused before the run, with status 2.
    let (status, out, err) = output(uts().args(["--trace", "/proc/version/not-a-directory"]), d);
    assert_eq!(status.code(), Some(2), "{status}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("trace directory"), "{err}");
}
