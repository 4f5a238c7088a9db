//! Traces of real runs on three processes (bsp: `sor`; satin: `raytracer`), checked file by
//! file against the documented events, then merged and drawn by `bench-harness timeline`; and
//! the errors `timeline` gives for files it cannot use.
//!
//! The binaries come from the target directory this test runs from, built with
//! `cargo build -p sor -p raytracer -p ipl --bins` for that profile if needed.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use testkit::Reaped;

const HARNESS: &str = env!("CARGO_BIN_EXE_bench-harness");
const LIMIT: Duration = Duration::from_secs(120);

/// The directory holding the app binaries, built if needed.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        testkit::build_binaries(env!("CARGO_MANIFEST_DIR"), &["sor", "raytracer", "ipl"])
    })
}

fn scratch(name: &str) -> testkit::TempDir {
    testkit::scratch_dir(&format!("timeline-test-{name}"))
}

/// Runs `program ARGS --trace DIR` on three processes under ipl-run; returns DIR's trace files.
fn traced_run(program: &str, args: &[&str], dir: &Path) -> Vec<PathBuf> {
    let bin = bin_dir();
    let mut cmd = Command::new(bin.join("ipl-run"));
    cmd.args(["-n", "3", "--"])
        .arg(bin.join(program))
        .args(args)
        .arg("--trace")
        .arg(dir)
        .env("RUST_LOG", "warn");
    let (status, out, err) = Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
    assert!(status.success(), "{program}: {status}\n{out}\n{err}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".trace.json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "one trace file per process: {files:?}");
    files
}

fn timeline(args: &[&Path]) -> (bool, String, String) {
    let mut cmd = Command::new(HARNESS);
    cmd.arg("timeline").args(args).env("RUST_LOG", "warn");
    let (status, out, err) = Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
    assert!(
        !err.contains("panicked"),
        "timeline panicked on {args:?}: {err}"
    );
    (status.success(), out, err)
}

/// The writer stores args as strings: the number in one.
fn num(ev: &Value, key: &str) -> f64 {
    let v = &ev["args"][key];
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{} has no number {key}: {ev}", ev["name"]))
}

fn text<'a>(ev: &'a Value, key: &str) -> &'a str {
    ev["args"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no {key}: {ev}", ev["name"]))
}

/// A parsed per-process trace: its events, and its spans as (name, tid, begin, end, args of
/// the end) in the order of their ends, checked to nest per thread.
struct Trace {
    events: Vec<Value>,
    spans: Vec<(String, u64, f64, f64, Value)>,
}

impl Trace {
    fn read(path: &Path) -> Trace {
        let text = std::fs::read_to_string(path).unwrap();
        let doc: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        let events = doc.as_array().expect("an array of events").clone();
        let mut open: BTreeMap<u64, Vec<(String, f64)>> = BTreeMap::new();
        let mut spans = Vec::new();
        let mut last_ts: BTreeMap<u64, f64> = BTreeMap::new();
        for ev in &events {
            let ph = ev["ph"].as_str().expect("a phase");
            let tid = ev["tid"].as_u64().expect("a thread");
            if ph == "M" {
                continue;
            }
            let name = ev["name"].as_str().expect("a name").to_string();
            let ts = ev["ts"].as_f64().expect("a time");
            let last = last_ts.entry(tid).or_insert(0.0);
            assert!(
                ts >= *last,
                "{}: time runs backwards at {ev}",
                path.display()
            );
            *last = ts;
            match ph {
                "B" => open.entry(tid).or_default().push((name, ts)),
                "E" => {
                    let (begun, start) = open
                        .get_mut(&tid)
                        .and_then(Vec::pop)
                        .unwrap_or_else(|| panic!("an end without a beginning: {ev}"));
                    assert_eq!(begun, name, "spans nest on thread {tid}");
                    spans.push((name, tid, start, ts, ev["args"].clone()));
                }
                "i" => {}
                other => panic!("unexpected phase {other}: {ev}"),
            }
        }
        Trace { events, spans }
    }

    fn named(&self, name: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["name"] == name).collect()
    }

    fn spans(&self, name: &str) -> Vec<&(String, u64, f64, f64, Value)> {
        self.spans.iter().filter(|s| s.0 == name).collect()
    }
}

/// Checks what every process's trace starts with; returns (rank, trace) in rank order.
fn common_checks(files: &[PathBuf]) -> Vec<(u32, Trace)> {
    let mut out = Vec::new();
    let mut pools = BTreeSet::new();
    for f in files {
        let t = Trace::read(f);
        let start = t.named("trace.start");
        assert_eq!(start.len(), 1, "{}", f.display());
        assert!(
            num(start[0], "unix_us") > 1.6e15,
            "a wall clock in microseconds"
        );
        let join = t.named("ipl.join");
        assert_eq!(join.len(), 1, "{}", f.display());
        assert_eq!(num(join[0], "size"), 3.0);
        assert_eq!(text(join[0], "same_host"), "true");
        assert_eq!(
            num(join[0], "clock_offset_us"),
            0.0,
            "one host shares one clock"
        );
        assert!(num(join[0], "clock_rtt_us") >= 0.0);
        pools.insert(text(join[0], "pool").to_string());
        let closed = t
            .named("ipl.pool")
            .into_iter()
            .filter(|e| text(e, "change") == "closed")
            .count();
        assert_eq!(closed, 1, "the pool closed once: {}", f.display());
        assert_eq!(t.named("ipl.leave").len(), 1);
        out.push((num(join[0], "rank") as u32, t));
    }
    assert_eq!(pools.len(), 1, "one pool: {pools:?}");
    out.sort_by_key(|(r, _)| *r);
    let ranks: Vec<u32> = out.iter().map(|(r, _)| *r).collect();
    assert_eq!(ranks, [0, 1, 2]);
    out
}

/// Decodes a PNG: the harness's chart size, several colours, a share of ink.
fn check_png(p: &Path) {
    let decoder = png::Decoder::new(std::fs::File::open(p).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1000, 700), "{}", p.display());
    let channels = info.color_type.samples();
    let px = &buf[..info.buffer_size()];
    let mut colours = BTreeSet::new();
    let mut ink = 0usize;
    for c in px.chunks(channels) {
        colours.insert((c[0], c[1], c[2]));
        if c[..3] != [255, 255, 255] {
            ink += 1;
        }
    }
    let share = ink as f64 / f64::from(info.width * info.height);
    assert!(
        colours.len() > 10,
        "{}: {} colours",
        p.display(),
        colours.len()
    );
    assert!(
        (0.02..0.95).contains(&share),
        "{}: {share} ink",
        p.display()
    );
}

/// Runs `timeline` on `dir` and checks the merged trace and the charts `charts` (by base name).
fn check_timeline(dir: &Path, charts: &[&str]) -> Value {
    let (ok, out, err) = timeline(&[dir]);
    assert!(ok, "timeline failed: {out}\n{err}");
    assert!(out.contains("timeline.json"), "{out}");
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("timeline.json")).unwrap())
            .expect("the merged trace is valid JSON");
    let events = merged["traceEvents"].as_array().expect("traceEvents");
    let names: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for (rank, name) in names.iter().enumerate() {
        assert!(name.starts_with(&format!("rank {rank} ")), "{name}");
    }
    for e in events.iter().filter(|e| e["ph"] == "X") {
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
        assert!(e["pid"].as_u64().unwrap() < 3);
    }
    for c in charts {
        check_png(&dir.join(format!("{c}.png")));
        let svg = std::fs::read_to_string(dir.join(format!("{c}.svg"))).unwrap();
        for rank in 0..3 {
            assert!(
                svg.contains(&format!("rank {rank}")),
                "{c}.svg lacks rank {rank}"
            );
        }
    }
    merged
}

#[test]
fn a_traced_bsp_run_on_three_processes() {
    let dir_tmp = scratch("bsp");
    let dir = dir_tmp.path();
    let iterations = 12;
    let files = traced_run(
        "sor",
        &["-n", "60", "--iterations", &iterations.to_string()],
        dir,
    );
    for (rank, t) in common_checks(&files) {
        let steps: Vec<&Value> = t
            .named("bsp.superstep")
            .into_iter()
            .filter(|e| num(e, "comm") == 0.0)
            .collect();
        assert!(
            steps.len() > iterations,
            "rank {rank}: {} supersteps",
            steps.len()
        );
        // Complete and in order: supersteps 0, 1, 2, ..., each with every part, none
        // reaching back into the one before.
        let mut previous_end = 0.0;
        for (k, e) in steps.iter().enumerate() {
            assert_eq!(num(e, "step"), k as f64, "rank {rank}: superstep order");
            assert_eq!(num(e, "pid"), f64::from(rank));
            for key in [
                "compute_us",
                "send_us",
                "collectives",
                "collective_us",
                "packets",
                "bytes",
                "messages",
            ] {
                assert!(num(e, key) >= 0.0, "rank {rank} superstep {k}: {key}");
            }
            let end = e["ts"].as_f64().unwrap();
            let sync = num(e, "sync_us");
            assert!(
                num(e, "send_us") <= sync,
                "rank {rank}: sending within the sync"
            );
            assert!(
                end - sync >= previous_end,
                "rank {rank}: superstep {k} begins before the one before it ended"
            );
            previous_end = end;
        }
        // Neighbours exchange rows: some supersteps carry data.
        assert!(steps.iter().any(|e| num(e, "bytes") > 0.0));
    }
    check_timeline(dir, &["timeline", "supersteps"]);
}

fn num_of(args: &Value, key: &str) -> f64 {
    num(&serde_json::json!({"name": "span", "args": args}), key)
}

#[test]
fn a_traced_satin_run_on_three_processes() {
    let dir_tmp = scratch("satin");
    let dir = dir_tmp.path();
    let files = traced_run(
        "raytracer",
        &[
            "--threads",
            "2",
            "--width",
            "256",
            "--height",
            "256",
            "--tile",
            "16",
            "--no-png",
        ],
        dir,
    );
    let mut steals = 0;
    for (rank, t) in common_checks(&files) {
        let start = t.named("satin.start");
        assert_eq!(start.len(), 1, "rank {rank}");
        let workers = num(start[0], "workers");
        assert_eq!(workers, 2.0);
        for s in t.named("satin.steal") {
            let (thief, victim) = (num(s, "thief"), num(s, "victim"));
            assert!(num(s, "bytes") >= 0.0);
            let success = text(s, "success");
            assert!(success == "true" || success == "false");
            match text(s, "kind") {
                // Workers of this process.
                "local" => {
                    assert!(
                        victim < workers && thief < workers && victim != thief,
                        "{s}"
                    );
                    assert_eq!(success, "true", "only successful local steals are recorded");
                }
                // Processes of the run.
                "remote" => {
                    assert_eq!(thief, f64::from(rank), "{s}");
                    assert!(victim < 3.0 && victim != thief, "{s}");
                }
                other => panic!("unknown kind of steal {other}"),
            }
            steals += usize::from(success == "true");
        }
        for c in t.named("satin.counts") {
            for key in [
                "interval_us",
                "spawns",
                "syncs",
                "executed",
                "local_steals",
                "local_steal_attempts",
                "remote_steals",
                "remote_steal_attempts",
                "aborts",
                "idle_us",
            ] {
                assert!(num(c, key) >= 0.0, "{key}");
            }
        }
        for idle in t.spans("satin.idle") {
            assert!(num_of(&idle.4, "worker") < workers);
        }
    }
    assert!(
        steals > 0,
        "no steal in a run of 3 processes with 2 workers each"
    );
    let merged = check_timeline(dir, &["timeline", "steals"]);
    let counters = merged["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .count();
    assert!(counters > 0, "the satin counts become counter tracks");
}

#[test]
fn unusable_traces_get_an_error_naming_the_file() {
    let dir_tmp = scratch("bad");
    let dir = dir_tmp.path();
    // A real trace to cut short.
    let good_tmp = scratch("bad-source");
    let good = good_tmp.path();
    let files = traced_run("sor", &["-n", "30", "--iterations", "2"], good);
    let whole = std::fs::read(&files[0]).unwrap();

    let missing = dir.join("gone.trace.json");
    let cut = dir.join("cut.trace.json");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let foreign = dir.join("foreign.json");
    std::fs::write(
        &foreign,
        r#"{"traceEvents": [{"ph": "X", "name": "f", "ts": 1}]}"#,
    )
    .unwrap();
    let other_tool = dir.join("other.json");
    std::fs::write(
        &other_tool,
        r#"[{"ph": "X", "name": "f", "ts": 1, "dur": 2}]"#,
    )
    .unwrap();
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, b"\x00\x01 not json").unwrap();
    let empty_tmp = scratch("bad-empty");
    let empty = empty_tmp.path();
    let cases: [(&Path, &str); 6] = [
        (&missing, "cannot read"),
        (&cut, "cut short"),
        (&foreign, "not a per-process trace"),
        (&other_tool, "no trace.start"),
        (&garbage, "not JSON"),
        (empty, "no trace files"),
    ];
    for (path, why) in cases {
        let (ok, out, err) = timeline(&[path]);
        assert!(!ok, "{} was accepted: {out}", path.display());
        assert!(
            err.contains(&path.display().to_string()) && err.contains(why),
            "{}: {err}",
            path.display()
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // A good file among bad ones does not hide them.
    let (ok, _, err) = timeline(&[&files[0], &cut]);
    assert!(!ok && err.contains("cut.trace.json"), "{err}");
}
