//! The harness facing what should not happen: a run with a wrong answer, runs that all fail,
//! SIGTERM and SIGHUP in the middle of a run, damaged or incomplete result sets, and speedups
//! above what the processors can give.
//!
//! The apps here are stand-ins: a shell script named `sor` that answers `--help` like the real
//! binary and prints a result line whose timing and checksum the test chooses (through
//! `FAKE_*` variables, which the harness passes on), and an `ipl-run` that starts it with the
//! process count in its environment. So every case is exact and takes a fraction of a second.
//! Every child is bounded in time and killed when its test ends.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use testkit::Reaped;

const HARNESS: &str = env!("CARGO_BIN_EXE_bench-harness");
const LIMIT: Duration = Duration::from_secs(60);

/// The stand-in app. `FAKE_MODE`: `good`; `wrong` (P = 2 reports another checksum); `fast`
/// (P = 2 takes 0.4 s against the baseline's 1 s, a speedup above P x T); `fail`; `hang`
/// (writes its pid and those of two children to `FAKE_DIR`, one of them in a session of its
/// own, then waits for them, long sleeps).
const FAKE_APP: &str = r#"#!/bin/sh
for a in "$@"; do
    if [ "$a" = --help ]; then
        echo "Options:"
        echo "      --seq                run the sequential version"
        echo "      --threads <THREADS>  threads per process"
        exit 0
    fi
done
seq=0
threads=1
prev=
for a in "$@"; do
    [ "$a" = --seq ] && seq=1
    [ "$prev" = --threads ] && threads=$a
    prev=$a
done
nodes=${FAKE_NODES:-1}
version=parallel
if [ $seq = 1 ]; then nodes=1; version=sequential; fi
mode=${FAKE_MODE:-good}
case "$mode" in
    fail) echo "error: the stand-in fails" >&2; exit 3 ;;
    hang)
        echo $$ > "$FAKE_DIR/app.pid"
        sleep 300 &
        echo $! > "$FAKE_DIR/child.pid"
        # One that leaves the process group, as a rank of its own group under ipl-run does.
        setsid sleep 300 &
        echo $! > "$FAKE_DIR/escaped.pid"
        wait
        exit 0 ;;
esac
checksum=00ab
seconds=1.0
if [ $seq = 0 ] && [ "$nodes" = 2 ]; then
    seconds=0.6
    [ "$mode" = wrong ] && checksum=00cd && seconds=0.1
    [ "$mode" = fast ] && seconds=0.4
fi
echo "{\"app\":\"sor\",\"version\":\"$version\",\"nodes\":$nodes,\"threads\":$threads,\"seconds\":{\"solve\":$seconds},\"total_seconds\":$seconds,\"checksum\":\"$checksum\"}"
"#;

/// The stand-in launcher: `ipl-run -n P [options] -- PROGRAM ARGS`.
const FAKE_IPL_RUN: &str = r#"#!/bin/sh
nodes=1
while [ $# -gt 0 ]; do
    case "$1" in
        -n) nodes=$2; shift 2 ;;
        --) shift; break ;;
        *) shift ;;
    esac
done
FAKE_NODES=$nodes exec "$@"
"#;

/// A scratch directory with the stand-in binaries in `bin/` and result sets in `results/`;
/// removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "bench-harness-faults-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::create_dir_all(d.join("results")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for (file, text) in [("sor", FAKE_APP), ("ipl-run", FAKE_IPL_RUN)] {
            let p = d.join("bin").join(file);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Scratch(d)
    }

    fn set(&self, name: &str) -> PathBuf {
        self.0.join("results").join(name)
    }

    /// `bench-harness run` of the stand-in sor at P = 1, 2, with `mode`.
    fn sweep(&self, name: &str, mode: &str, repeat: u32) -> Command {
        let mut cmd = Command::new(HARNESS);
        cmd.args(["run", "--apps", "sor", "--nodes", "1,2", "--no-progress"])
            .args(["--repeat", &repeat.to_string(), "--timeout", "30"])
            .arg("--bin-dir")
            .arg(self.0.join("bin"))
            .arg("--results-dir")
            .arg(self.0.join("results"))
            .args(["--name", name])
            .env("FAKE_MODE", mode)
            .env("FAKE_DIR", &self.0)
            .env("RUST_LOG", "warn");
        cmd
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> (Option<i32>, String, String) {
    let (status, out, err) = Reaped::start(cmd).output(Instant::now() + LIMIT);
    (status.code(), out, err)
}

fn plot(set: &Path) -> (Option<i32>, String, String) {
    run(Command::new(HARNESS).arg("plot").arg(set))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The rows of a derived CSV file as maps from column name to field (the fields tested here
/// hold no commas).
fn csv(p: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = read(p);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn row<'a>(
    rows: &'a [std::collections::HashMap<String, String>],
    version: &str,
    nodes: &str,
) -> &'a std::collections::HashMap<String, String> {
    rows.iter()
        .find(|r| r["version"] == version && r["nodes"] == nodes)
        .unwrap_or_else(|| panic!("no {version} P={nodes} row"))
}

#[test]
fn a_run_with_another_checksum_is_an_error_left_out_of_the_figures() {
    let s = Scratch::new("wrong");
    let (code, out, err) = run(&mut s.sweep("wrong", "wrong", 2));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("error: 2 runs gave another answer than the sequential baseline"),
        "{err}"
    );
    // Said as it happened, too.
    assert!(
        err.contains(
            "another answer than the sequential baseline (checksum 00cd, sequential 00ab)"
        ),
        "{err}"
    );
    let set = s.set("wrong");
    let rows = csv(&set.join("summary.csv"));
    let p2 = row(&rows, "parallel", "2");
    assert_eq!(
        (p2["ok"].as_str(), p2["wrong"].as_str()),
        ("0", "2"),
        "{p2:?}"
    );
    // Ten times faster, and no speedup at all.
    assert_eq!(p2["speedup"], "", "{p2:?}");
    assert_eq!(p2["median_seconds"], "", "{p2:?}");
    assert_eq!(p2["checksum_matches"], "false");
    let p1 = row(&rows, "parallel", "1");
    assert_eq!((p1["ok"].as_str(), p1["wrong"].as_str()), ("2", "0"));
    assert_eq!(p1["checksum_matches"], "true");
    assert!(out.contains("0/2 (2 wrong)"), "{out}");
    let readme = read(&set.join("README.md"));
    assert!(
        readme.contains("**2 runs gave another answer than the sequential baseline**"),
        "{readme}"
    );
    assert!(readme.contains("2 of 2 wrong result"), "{readme}");
    // The chart marks the point as having no figure, and why.
    let svg = read(&set.join("charts").join("speedup-sor.svg"));
    assert!(svg.contains("P=2 T=1: 2 of 2 wrong result"), "{svg}");
    // Redrawn from the records, the same verdict.
    let (code, out, err) = plot(&set);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("0/2 (2 wrong)"), "{out}");
}

#[test]
fn a_sweep_whose_runs_all_fail_exits_non_zero() {
    let s = Scratch::new("fail");
    let (code, out, err) = run(&mut s.sweep("fail", "fail", 1));
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("error: all 3 of 3 runs failed or timed out"),
        "{err}"
    );
    assert!(err.contains("the result set is kept in"), "{err}");
    // The set records why.
    assert!(read(&s.set("fail").join("summary.csv")).contains("the stand-in fails"));
    // And one good sweep exits 0.
    let (code, _, err) = run(&mut s.sweep("good", "good", 1));
    assert_eq!(code, Some(0), "{err}");
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.contains(") Z "))
        .unwrap_or(false);
    exists && !zombie
}

/// Kills the pids in the files of `dir` when dropped: nothing outlives the test, whatever the
/// harness did.
struct KillPids(PathBuf);

impl KillPids {
    fn pid(&self, file: &str) -> Option<i32> {
        std::fs::read_to_string(self.0.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for KillPids {
    fn drop(&mut self) {
        for f in ["app.pid", "child.pid", "escaped.pid"] {
            if let Some(pid) = self.pid(f) {
                // SAFETY: kill(2) of a process this test's stand-in started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

#[test]
fn sigterm_and_sighup_end_the_current_run_with_its_children_and_mark_the_set() {
    for (sig, name) in [(libc::SIGTERM, "sigterm"), (libc::SIGHUP, "sighup")] {
        let s = Scratch::new(name);
        let pids = KillPids(s.0.clone());
        let mut harness = Reaped::start(&mut s.sweep(name, "hang", 1));
        let deadline = Instant::now() + LIMIT;
        let (app, child, escaped) = loop {
            if let (Some(a), Some(c), Some(e)) = (
                pids.pid("app.pid"),
                pids.pid("child.pid"),
                pids.pid("escaped.pid"),
            ) {
                break (a, c, e);
            }
            assert!(Instant::now() < deadline, "{name}: the app never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(alive(app) && alive(child) && alive(escaped));
        // SAFETY: a signal to the harness this test started.
        unsafe {
            libc::kill(harness.0.id() as libc::pid_t, sig);
        }
        let status = loop {
            if let Some(st) = harness.0.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: the harness did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = testkit::read_all(harness.0.stderr.take().unwrap())
            .recv_timeout(LIMIT)
            .unwrap();
        assert_eq!(status.code(), Some(130), "{name}: {status}\n{out}");
        assert!(!alive(app), "{name}: the app {app} was left running");
        assert!(
            !alive(child),
            "{name}: the app's child {child} was left running"
        );
        assert!(
            !alive(escaped),
            "{name}: the app's child {escaped} in a session of its own was left running"
        );
        let meta: serde_json::Value =
            serde_json::from_str(&read(&s.set(name).join("meta.json"))).unwrap();
        assert_eq!(meta["interrupted"], true, "{name}");
        assert!(meta["finished"].is_string(), "{name}");
        let runs = read(&s.set(name).join("runs.jsonl"));
        assert!(
            runs.contains("\"status\":\"interrupted\""),
            "{name}: {runs}"
        );
    }
}

/// A good sweep's set, to damage.
fn good_set(s: &Scratch) -> PathBuf {
    let (code, _, err) = run(&mut s.sweep("good", "good", 2));
    assert_eq!(code, Some(0), "{err}");
    s.set("good")
}

/// The derived files of a set, to check that a refused plot leaves them alone.
fn derived(set: &Path) -> Vec<(String, Vec<u8>)> {
    ["README.md", "summary.csv", "summary.json", "phases.csv"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(set.join(f)).unwrap()))
        .collect()
}

#[test]
fn plot_refuses_a_set_that_lost_its_runs_and_keeps_what_was_derived() {
    let s = Scratch::new("lost");
    let set = good_set(&s);
    let before = derived(&set);
    let runs = set.join("runs.jsonl");
    let text = read(&runs);

    std::fs::remove_file(&runs).unwrap();
    let (code, _, err) = plot(&set);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("runs.jsonl") && err.contains("missing"),
        "{err}"
    );
    assert_eq!(
        derived(&set),
        before,
        "a refused plot rewrote derived files"
    );

    // Lines lost at the end: fewer runs than the stored summary was derived from.
    let kept: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    std::fs::write(&runs, kept).unwrap();
    let (code, _, err) = plot(&set);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("holds 2 runs, but the stored summary") && err.contains("derived from 6"),
        "{err}"
    );
    assert_eq!(derived(&set), before);

    // Restored, it plots again.
    std::fs::write(&runs, text).unwrap();
    let (code, _, err) = plot(&set);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn plot_refuses_damaged_records_instead_of_drawing_them() {
    let s = Scratch::new("damaged");
    let set = good_set(&s);
    let runs = set.join("runs.jsonl");
    let text = read(&runs);
    let damage = |line: usize, key: &str, value: serde_json::Value| {
        let lines: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i + 1 == line {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v[key] = value.clone();
                    v.to_string()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&runs, lines.join("\n") + "\n").unwrap();
    };
    let before = derived(&set);
    // Line 3 is the first run at P = 2. Its efficiency divided by P x T = 0 drew forever.
    for (key, value, want) in [
        (
            "nodes",
            serde_json::json!(0),
            "line 3: nodes 0 (must be 1 to 4096)",
        ),
        ("threads", serde_json::json!(0), "line 3: threads 0"),
        (
            "total_seconds",
            serde_json::json!(1e300),
            "line 3: total_seconds 1e300",
        ),
        (
            "wall_seconds",
            serde_json::json!(-1.0),
            "line 3: wall_seconds -1",
        ),
    ] {
        damage(3, key, value);
        let (code, _, err) = plot(&set);
        assert_eq!(code, Some(1), "{key}: {err}");
        assert!(err.contains(want), "{key}: {err}");
        assert_eq!(derived(&set), before, "{key}");
    }
    std::fs::write(&runs, &text).unwrap();
    let meta_path = set.join("meta.json");
    let meta = read(&meta_path);
    let mut m: serde_json::Value = serde_json::from_str(&meta).unwrap();
    m["machine"]["cores"] = serde_json::json!(0);
    std::fs::write(&meta_path, m.to_string()).unwrap();
    let (code, _, err) = plot(&set);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("machine.cores 0"), "{err}");
}

#[test]
fn speedups_above_p_times_t_are_flagged_in_tables_and_charts() {
    let s = Scratch::new("fast");
    let (code, out, err) = run(&mut s.sweep("fast", "fast", 1));
    assert_eq!(code, Some(0), "{err}");
    // 1 s / 0.4 s = 2.5 on two processes of one thread.
    assert!(out.contains("2.50!"), "{out}");
    assert!(out.contains("speedup above"), "{out}");
    let rows = csv(&s.set("fast").join("summary.csv"));
    assert_eq!(row(&rows, "parallel", "2")["above_ideal"], "true");
    assert_eq!(row(&rows, "parallel", "1")["above_ideal"], "false");
    let svg = read(&s.set("fast").join("charts").join("speedup-sor.svg"));
    assert!(svg.contains("speedup above P × T or the cores"), "{svg}");
    assert!(svg.contains("above P × T = 2") || svg.contains("above 1 cores"));
}

#[test]
fn plot_refuses_a_micro_benchmark_output_outside_the_set() {
    let s = Scratch::new("outside");
    let set = good_set(&s);
    // README.md copied the file a record names into itself, wherever it was (and a device
    // such as /dev/zero until memory ran out).
    let secret = s.0.join("secret.txt");
    std::fs::write(&secret, "not for the readme").unwrap();
    let before = derived(&set);
    for output in ["../../secret.txt".to_string(), secret.display().to_string()] {
        let record = serde_json::json!({
            "bench": "ipl-bench", "repeat": 0, "status": "ok", "exit": {"code": 0},
            "command": "ipl-bench", "wall_seconds": 1.0, "output": output, "json": null,
            "note": null,
        });
        std::fs::write(set.join("micro.jsonl"), format!("{record}\n")).unwrap();
        let (code, _, err) = plot(&set);
        assert_eq!(code, Some(1), "{output}: {err}");
        assert!(
            err.contains("micro.jsonl")
                && err.contains(&format!("line 1: output '{output}' is not a path inside")),
            "{output}: {err}"
        );
        assert_eq!(derived(&set), before, "{output}");
    }
}

/// A result set's files are read only as regular files: `runs.jsonl` or `micro.jsonl` linked to
/// a device used to be read until memory ran out (`/dev/zero` has no lines), and one linked to
/// a pipe without a writer never opened.
#[test]
fn plot_refuses_a_set_whose_files_are_not_regular_files() {
    let s = Scratch::new("devices");
    let set = good_set(&s);
    let before = derived(&set);
    for name in ["runs.jsonl", "micro.jsonl"] {
        let file = set.join(name);
        let kept = s.0.join(format!("{name}.kept"));
        std::fs::rename(&file, &kept).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
        let (code, _, err) = plot(&set);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert!(
            err.contains(name) && err.contains("not a regular file"),
            "{name}: {err}"
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::rename(&kept, &file).unwrap();
    }
    assert_eq!(derived(&set), before);
}
