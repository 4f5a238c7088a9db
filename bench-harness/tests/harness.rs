//! End-to-end tests of the harness on the real app binaries at tiny sizes.
//!
//! The binaries come from the target directory this test runs from (`target/<profile>/`, the
//! parent of the test executable's `deps/`). The first test to need them runs
//! `cargo build -p sor -p raytracer -p barnes-hut -p ipl --bins` in that profile, which is a
//! no-op when they are up to date (`cargo build --workspace --bins` beforehand makes the
//! first run quick).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const HARNESS: &str = env!("CARGO_BIN_EXE_bench-harness");

/// The directory holding the app binaries, built if needed.
fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = testkit::build_binaries(
            env!("CARGO_MANIFEST_DIR"),
            &["sor", "raytracer", "barnes-hut", "ipl"],
        );
        for b in ["sor", "raytracer", "barnes-hut", "ipl-run", "ipl-bench"] {
            assert!(dir.join(b).is_file(), "{b} missing in {}", dir.display());
        }
        dir
    })
}

fn scratch(name: &str) -> testkit::TempDir {
    testkit::scratch_dir(&format!("bench-harness-test-{name}"))
}

/// Longest one run of the harness may take before the test fails (and kills it).
const LIMIT: Duration = Duration::from_secs(300);

/// What `cmd` printed and its status, like [`Command::output`] but bounded by [`LIMIT`].
fn output(cmd: &mut Command) -> Output {
    let child = testkit::Reaped::start(cmd.stdin(Stdio::null()));
    let (status, stdout, stderr) = child.output(Instant::now() + LIMIT);
    Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.into_bytes(),
    }
}

fn harness(args: &[&str]) -> Output {
    output(Command::new(HARNESS).args(args).env("RUST_LOG", "warn"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn jsonl(p: &Path) -> Vec<serde_json::Value> {
    read(p)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Decodes a PNG and checks its size and that it is a chart, not a blank page: several
/// colours and a share of non-white pixels that lines, bars and text give.
fn check_png(p: &Path) {
    let decoder = png::Decoder::new(std::fs::File::open(p).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1000, 700), "{}", p.display());
    let channels = info.color_type.samples();
    assert!(
        channels >= 3,
        "{}: colour type {:?}",
        p.display(),
        info.color_type
    );
    let px = &buf[..info.buffer_size()];
    let mut colours = std::collections::HashSet::new();
    let mut non_white = 0usize;
    for c in px.chunks(channels) {
        colours.insert((c[0], c[1], c[2]));
        if c[..3] != [255, 255, 255] {
            non_white += 1;
        }
    }
    let share = non_white as f64 / (info.width * info.height) as f64;
    assert!(
        colours.len() > 20,
        "{}: {} colours",
        p.display(),
        colours.len()
    );
    assert!(
        (0.01..0.8).contains(&share),
        "{}: {share} non-white",
        p.display()
    );
}

fn csv_rows(p: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    // The files quote only the last fields (commands, notes); a split that respects quotes.
    let mut lines = read(p)
        .lines()
        .map(str::to_string)
        .collect::<Vec<_>>()
        .into_iter();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| {
            let mut out = Vec::new();
            let mut cur = String::new();
            let mut quoted = false;
            let mut chars = l.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, quoted) {
                    ('"', true) if chars.peek() == Some(&'"') => {
                        cur.push('"');
                        chars.next();
                    }
                    ('"', _) => quoted = !quoted,
                    (',', false) => out.push(std::mem::take(&mut cur)),
                    _ => cur.push(c),
                }
            }
            out.push(cur);
            out
        })
        .collect();
    (header, rows)
}

#[test]
fn tiny_sweep_writes_results_and_charts_and_replots_identically() {
    let bins = bin_dir();
    let tmp = scratch("sweep");
    let out = tmp.path();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Instant::now();
    let o = harness(&[
        "run",
        "--apps",
        "sor,raytracer,barnes-hut",
        "--nodes",
        "1,2",
        "--threads",
        "1,3",
        "--repeat",
        "2",
        "--size",
        "tiny",
        "--micro",
        "ipl-bench",
        "--micro-args",
        // One round, two processes, no OpenMPI: ipl-bench's default layout (7 rounds, 2 and
        // 4 processes, OpenMPI when installed) busy-polls 4+ processes on CI's 2 cores and
        // ran past the 60 s timeout under load. This layout still gives the threads and
        // 2-process series the charts and tables below are checked with.
        "ipl-bench=--only latency --round-trips 200 --repeat 1 --procs 2 --no-mpi",
        "--micro-repeat",
        "1",
        "--timeout",
        "60",
        "--no-progress",
        "--bin-dir",
        bins.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
        "--name",
        "tiny",
    ]);
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("sweep took {:?}", t.elapsed());
    let set = out.join("tiny");

    // The summary table on the terminal.
    for h in ["app", "speedup", "efficiency", "vs reference"] {
        assert!(stdout.contains(h), "{stdout}");
    }
    assert!(
        stdout.contains(&format!("result set: {}", set.display())),
        "{stdout}"
    );
    // One progress line per run when standard error is not a terminal.
    assert!(stderr.contains("[1/"), "{stderr}");

    // meta.json: machine, revision, commands, apps.
    let meta: serde_json::Value = serde_json::from_str(&read(&set.join("meta.json"))).unwrap();
    assert_eq!(meta["machine"]["cores"].as_u64().unwrap() as usize, cores);
    assert!(meta["machine"]["rustc"]
        .as_str()
        .unwrap()
        .starts_with("rustc"));
    assert!(meta["git"]["revision"].as_str().unwrap().len() >= 7);
    assert!(meta["invocation"][1] == "run");
    assert_eq!(meta["interrupted"], false);
    assert!(meta["finished"].is_string());
    let app_names: Vec<&str> = meta["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["probe"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(app_names, ["sor", "raytracer", "barnes-hut"]);

    // runs.jsonl: every planned run, in order, with its exact command.
    let runs = jsonl(&set.join("runs.jsonl"));
    let threads_of = |app: &str| {
        let a = meta["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["probe"]["name"] == app)
            .unwrap();
        a["threads"].as_array().unwrap().len()
    };
    let planned: usize = ["sor", "raytracer", "barnes-hut"]
        .iter()
        .map(|a| (1 + 2 * threads_of(a)) * 2)
        .sum();
    assert_eq!(runs.len(), planned);
    for r in &runs {
        let status = r["status"].as_str().unwrap();
        let (nodes, threads) = (r["nodes"].as_u64().unwrap(), r["threads"].as_u64().unwrap());
        assert_eq!(
            r["oversubscribed"].as_bool().unwrap(),
            (nodes * threads) as usize > cores
        );
        let cmd = r["command"].as_str().unwrap();
        assert!(cmd.contains(&bins.display().to_string()), "{cmd}");
        if r["version"] == "sequential" {
            assert_eq!(status, "ok", "{r}");
            assert!(!cmd.contains("ipl-run"), "{cmd}");
        } else {
            assert!(cmd.contains(&format!("ipl-run -n {nodes} -- ")), "{cmd}");
            // Until an app has its parallel version, P=2 reports one node: recorded as such.
            match status {
                "ok" => assert_eq!(r["reported"]["nodes"].as_u64(), Some(nodes), "{r}"),
                "not-parallel" => assert_ne!(r["reported"]["nodes"].as_u64(), Some(nodes)),
                other => panic!("unexpected status {other}: {r}"),
            }
        }
        let log = set.join(r["log"].as_str().unwrap());
        assert!(
            Path::new(&format!("{}.out", log.display())).is_file(),
            "{}",
            log.display()
        );
    }

    // runs.csv mirrors runs.jsonl.
    let (header, rows) = csv_rows(&set.join("runs.csv"));
    assert_eq!(
        header.join(","),
        "app,version,nodes,threads,repeat,status,exit,total_seconds,wall_seconds,checksum,\
         oversubscribed,command"
    );
    assert_eq!(rows.len(), runs.len());
    for (row, r) in rows.iter().zip(&runs) {
        assert_eq!(row[0], r["app"].as_str().unwrap());
        assert_eq!(row[11], r["command"].as_str().unwrap());
    }

    // summary.csv: speedup and efficiency recomputed from the runs.
    let (header, rows) = csv_rows(&set.join("summary.csv"));
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let times = |app: &str, version: &str, nodes: u64, threads: u64| {
        runs.iter()
            .filter(|r| {
                r["app"] == app
                    && r["version"] == version
                    && r["nodes"] == nodes
                    && r["threads"] == threads
                    && r["status"] == "ok"
            })
            .map(|r| r["total_seconds"].as_f64().unwrap())
            .collect::<Vec<_>>()
    };
    for app in ["sor", "raytracer", "barnes-hut"] {
        let seq = median(times(app, "sequential", 1, 1));
        let row = rows
            .iter()
            .find(|r| {
                r[col("app")] == app
                    && r[col("version")] == "parallel"
                    && r[col("nodes")] == "1"
                    && r[col("threads")] == "1"
            })
            .unwrap_or_else(|| panic!("no P=1 T=1 row for {app}"));
        let par = median(times(app, "parallel", 1, 1));
        let speedup: f64 = row[col("speedup")].parse().unwrap();
        assert!(
            (speedup - seq / par).abs() < 1e-9 * speedup.max(1.0),
            "{app}: {speedup} vs {}",
            seq / par
        );
        let eff: f64 = row[col("efficiency")].parse().unwrap();
        assert!((eff - speedup).abs() < 1e-12);
        // One process, same problem: the same result as the sequential run.
        assert_eq!(row[col("checksum_matches")], "true", "{app}: {row:?}");
        // Two processes: the same checksum, or for Barnes-Hut the same physics within its
        // bounds; no run is wrong.
        let p2 = rows
            .iter()
            .find(|r| {
                r[col("app")] == app
                    && r[col("version")] == "parallel"
                    && r[col("nodes")] == "2"
                    && r[col("threads")] == "1"
            })
            .unwrap_or_else(|| panic!("no P=2 T=1 row for {app}"));
        assert_eq!(p2[col("checksum_matches")], "true", "{app}: {p2:?}");
        assert_eq!(p2[col("wrong")], "0", "{app}: {p2:?}");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&read(&set.join("summary.json"))).unwrap();
    assert_eq!(summary.as_array().unwrap().len(), rows.len());
    let phases = read(&set.join("phases.csv"));
    assert!(phases.starts_with("app,version,nodes,threads,phase,median_seconds\n"));
    assert!(
        phases.contains("barnes-hut,sequential,1,1,force_computation,"),
        "{phases}"
    );
    let latency = read(&set.join("latency.csv"));
    assert!(latency.contains("ipl over tcp,50,"), "{latency}");
    assert!(latency.contains("ipl over tcp,99,"), "{latency}");
    let commands = read(&set.join("commands.txt"));
    assert!(
        commands.contains(
            "ipl-bench --only latency --round-trips 200 --repeat 1 --procs 2 --no-mpi --json"
        ),
        "{commands}"
    );
    let readme = read(&set.join("README.md"));
    assert!(
        readme.contains("Reproduce") && readme.contains("bench-harness plot"),
        "{readme}"
    );

    // The charts: PNGs decode with content, SVGs carry titles and series names.
    let mut charts = Vec::new();
    for app in ["sor", "raytracer", "barnes-hut"] {
        for kind in ["speedup", "efficiency", "phases"] {
            charts.push(format!("{kind}-{app}"));
        }
    }
    charts.push("latency-ipl".into());
    for c in &charts {
        check_png(&set.join("charts").join(format!("{c}.png")));
    }
    let svg = |c: &str| read(&set.join("charts").join(format!("{c}.svg")));
    let s = svg("speedup-sor");
    for want in [
        "sor: speedup vs processes",
        "processes (P)",
        "speedup over the sequential version",
        "T=1 (one thread per process)",
        "T=3 threads per process",
        "ideal, T=1",
    ] {
        assert!(s.contains(want), "speedup-sor.svg lacks {want:?}");
    }
    let over_point_has_figure = runs
        .iter()
        .any(|r| r["app"] == "sor" && r["status"] == "ok" && r["oversubscribed"] == true);
    if over_point_has_figure {
        assert!(
            s.contains(&format!("oversubscribed: P × T &gt; {cores} cores"))
                || s.contains(&format!("oversubscribed: P × T > {cores} cores"))
        );
    }
    let s = svg("efficiency-barnes-hut");
    assert!(s.contains("parallel efficiency") && s.contains("ideal (efficiency 1)"));
    let s = svg("phases-barnes-hut");
    for want in [
        "time per phase",
        "force computation",
        "tree construction",
        "seq",
        "P=1 T=1",
    ] {
        assert!(s.contains(want), "phases-barnes-hut.svg lacks {want:?}");
    }
    let s = svg("latency-ipl");
    for want in [
        "round-trip time",
        "percentile",
        "ipl over tcp",
        "raw tcp busy polling",
        "50% (median)",
        "99%",
    ] {
        assert!(s.contains(want), "latency-ipl.svg lacks {want:?}");
    }

    // Re-plotting from the stored runs gives the same charts and tables, byte for byte.
    let before: Vec<(String, Vec<u8>)> = charts
        .iter()
        .flat_map(|c| [format!("{c}.png"), format!("{c}.svg")])
        .chain(["summary.csv", "phases.csv", "latency.csv"].map(String::from))
        .map(|f| {
            let p = if f.contains('.') && !f.ends_with(".csv") {
                set.join("charts").join(&f)
            } else {
                set.join(&f)
            };
            let b = std::fs::read(&p).unwrap();
            (f, b)
        })
        .collect();
    for (f, _) in before.iter().filter(|(f, _)| !f.ends_with(".csv")) {
        std::fs::remove_file(set.join("charts").join(f)).unwrap();
    }
    let o = harness(&["plot", set.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("speedup"));
    for (f, b) in &before {
        let p = if f.ends_with(".csv") {
            set.join(f)
        } else {
            set.join("charts").join(f)
        };
        assert!(std::fs::read(&p).unwrap() == *b, "{f} differs after plot");
    }
}

#[test]
fn bad_arguments_give_clear_errors() {
    let cases: [(&[&str], &str); 10] = [
        (
            &["run", "--apps", "sor,nbody"],
            "unknown app 'nbody' (known apps: sor, raytracer, barnes-hut, master-worker, uts)",
        ),
        (
            &["run", "--nodes", "0"],
            "invalid value '0' for '--nodes <NODES>': counts start at 1",
        ),
        (&["run", "--nodes", "1,,4"], "empty element"),
        (&["run", "--threads", "1,x"], "'x': not a whole number"),
        (&["run", "--repeat", "0"], "--repeat"),
        (&["run", "--size", "huge"], "huge"),
        // These panicked or took all memory.
        (&["run", "--timeout", "1e300"], "at most 30 days"),
        (&["run", "--repeat", "4294967295"], "at most 1000"),
        (&["run", "--repeat", "-1"], "'-1'"),
        (&["run", "--wan-latency", "500000000000y"], "at most 1m"),
    ];
    for (args, want) in cases {
        let o = harness(args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // A RUST_LOG it cannot read is refused, not replaced by the default filter.
    let o = output(
        Command::new(HARNESS)
            .args(["plot", "no-such-set"])
            .env("RUST_LOG", "bench_harness=degub"),
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("RUST_LOG") && err.contains("degub"), "{err}");
    let tmp = scratch("bad");
    let out = tmp.path();
    let missing = out.join("no-such-set");
    let o = harness(&["plot", missing.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no result set at") && err.contains("meta.json"),
        "{err}"
    );

    let o = harness(&[
        "run",
        "--bin-dir",
        missing.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--bin-dir") && err.contains("no such directory"),
        "{err}"
    );

    // An empty binary directory: the error says what to build.
    let empty = out.join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let o = harness(&[
        "run",
        "--apps",
        "sor",
        "--bin-dir",
        empty.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("sor not found in")
            && err.contains("cargo build --release --workspace --bins"),
        "{err}"
    );

    // Wide-area options need a launcher that assigns locations.
    let o = harness(&[
        "run",
        "--launcher",
        "srun",
        "--wan-latency",
        "20ms",
        "--bin-dir",
        empty.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("IPL_LOCATION"), "{err}");
    // So is a sweep too large to plan (the plan of --repeat 4294967295 took all memory).
    let o = harness(&[
        "run",
        "--nodes",
        "1,2,3,4,5,6,7,8",
        "--threads",
        "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
        "--repeat",
        "1000",
        "--bin-dir",
        empty.to_str().unwrap(),
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("at most 100000"), "{err}");
    let left: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["empty-bin"], "no result set may be left behind");
}

#[test]
fn cluster_launchers_build_command_lines_and_say_when_missing() {
    let bins = bin_dir();
    let tmp = scratch("launchers");
    let out = tmp.path();
    let b = bins.to_str().unwrap();
    let o = harness(&[
        "run",
        "--dry-run",
        "--apps",
        "sor",
        "--size",
        "tiny",
        "--nodes",
        "2,4",
        "--threads",
        "2",
        "--repeat",
        "1",
        "--launcher",
        "srun",
        "--bin-dir",
        b,
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    let sor = bins.join("sor").display().to_string();
    assert_eq!(
        lines,
        [
            format!("{sor} --seq -n 32"),
            format!("srun -n 2 --cpus-per-task=2 {sor} -n 32 --threads 2"),
            format!("srun -n 4 --cpus-per-task=2 {sor} -n 32 --threads 2"),
        ]
    );
    let o = harness(&[
        "run",
        "--dry-run",
        "--apps",
        "sor",
        "--size",
        "tiny",
        "--nodes",
        "4",
        "--repeat",
        "1",
        "--launcher",
        "mpirun",
        "--bin-dir",
        b,
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    assert!(
        text(&o.stdout).contains(&format!("mpirun -n 4 {sor} -n 32 --threads 1")),
        "{}",
        text(&o.stdout)
    );
    let o = harness(&[
        "run",
        "--dry-run",
        "--apps",
        "sor",
        "--size",
        "tiny",
        "--nodes",
        "4",
        "--repeat",
        "1",
        "--clusters",
        "2",
        "--wan-latency",
        "20ms",
        "--bin-dir",
        b,
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    assert!(
        text(&o.stdout).contains(&format!(
            "{}/ipl-run -n 4 --clusters 2 --wan-latency 20ms -- {sor} -n 32",
            b
        )),
        "{}",
        text(&o.stdout)
    );
    let hosts = out.join("hosts");
    std::fs::write(&hosts, "localhost\n").unwrap();
    let o = harness(&[
        "run",
        "--dry-run",
        "--apps",
        "sor",
        "--size",
        "tiny",
        "--nodes",
        "8",
        "--repeat",
        "1",
        "--launcher",
        "hostfile",
        "--hostfile",
        hosts.to_str().unwrap(),
        "--rsh",
        "ip netns exec",
        "--bin-dir",
        b,
        "--results-dir",
        out.to_str().unwrap(),
    ]);
    assert!(
        text(&o.stdout).contains(&format!(
            "{b}/ipl-run -n 8 --hostfile {} --rsh 'ip netns exec' -- {sor} -n 32",
            hosts.display()
        )),
        "{}",
        text(&o.stdout)
    );
    std::fs::remove_file(&hosts).unwrap();
    // Without --dry-run, a launcher that is not installed is named, with the command: on a
    // PATH without it, whatever this machine has installed.
    let no_tools = out.join("no-tools");
    std::fs::create_dir_all(&no_tools).unwrap();
    for launcher in ["mpirun", "srun"] {
        let o = output(
            Command::new(HARNESS)
                .args([
                    "run",
                    "--apps",
                    "sor",
                    "--size",
                    "tiny",
                    "--nodes",
                    "2",
                    "--repeat",
                    "1",
                    "--launcher",
                    launcher,
                    "--bin-dir",
                    b,
                    "--results-dir",
                    out.to_str().unwrap(),
                ])
                .env("PATH", &no_tools)
                .env("RUST_LOG", "warn"),
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("launcher '{launcher}' is not installed")),
            "{err}"
        );
        assert!(err.contains(&format!("{launcher} -n 2")), "{err}");
    }
    std::fs::remove_dir(&no_tools).unwrap();
    assert_eq!(
        std::fs::read_dir(out).unwrap().count(),
        0,
        "nothing may be written"
    );
}

#[test]
fn timeouts_are_recorded_and_interrupts_keep_measured_runs() {
    let bins = bin_dir().to_str().unwrap().to_string();
    let tmp = scratch("bounded");
    let out = tmp.path();
    // A run far longer than its timeout is killed and recorded as timed out.
    let t = Instant::now();
    let o = harness(&[
        "run",
        "--apps",
        "sor",
        "--args",
        "sor=-n 2000",
        "--nodes",
        "1",
        "--repeat",
        "1",
        "--timeout",
        "0.3",
        "--no-progress",
        "--bin-dir",
        &bins,
        "--results-dir",
        out.to_str().unwrap(),
        "--name",
        "timeout",
    ]);
    // Every run timed out: the set is kept, and the sweep did not succeed.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("error: all 2 of 2 runs failed or timed out"),
        "{}",
        text(&o.stderr)
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    let runs = jsonl(&out.join("timeout").join("runs.jsonl"));
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["status"] == "timed-out"), "{runs:?}");
    assert!(text(&o.stderr).contains("timed-out"));
    // The chart says why it has no points.
    let svg = read(&out.join("timeout").join("charts").join("speedup-sor.svg"));
    assert!(svg.contains("sequential baseline has no successful run"));

    // Ctrl-C: the current run is killed, the runs already measured are kept, exit status 130.
    let child = testkit::Reaped::start(Command::new(HARNESS).args([
        "run",
        "--apps",
        "sor",
        "--size",
        "tiny",
        "--nodes",
        "1",
        "--repeat",
        "200",
        "--no-progress",
        "--bin-dir",
        &bins,
        "--results-dir",
        out.to_str().unwrap(),
        "--name",
        "interrupted",
    ]));
    let runs_file = out.join("interrupted").join("runs.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&runs_file).map_or(0, |s| s.lines().count()) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no runs recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: SIGINT to the child we started.
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGINT);
    }
    let (status, stdout, stderr) = child.output(Instant::now() + LIMIT);
    assert_eq!(status.code(), Some(130), "{stderr}");
    let meta: serde_json::Value =
        serde_json::from_str(&read(&out.join("interrupted").join("meta.json"))).unwrap();
    assert_eq!(meta["interrupted"], true);
    let runs = jsonl(&runs_file);
    assert!(runs.len() >= 2 && runs.len() < 400, "{}", runs.len());
    let ok = runs.iter().filter(|r| r["status"] == "ok").count();
    assert!(ok >= 2, "{runs:?}");
    assert!(runs
        .iter()
        .all(|r| r["status"] == "ok" || r["status"] == "interrupted"));
    let readme = read(&out.join("interrupted").join("README.md"));
    assert!(readme.contains("interrupted"), "{readme}");
    assert!(stdout.contains("interrupted"), "{stdout}");
}

/// Processes whose environment holds the line `marker`, with their command lines.
fn marked(marker: &str) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|l| l == marker.as_bytes()) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
            if !zombie {
                v.push((pid, cmd));
            }
        }
    }
    v
}

#[test]
fn sigterm_during_a_parallel_run_ends_ipl_run_and_its_ranks() {
    let bins = bin_dir().to_str().unwrap().to_string();
    let tmp = scratch("sigterm");
    let out = tmp.path();
    let marker = format!("BENCH_HARNESS_TEST_MARK=sigterm-{}", std::process::id());
    let (k, v) = marker.split_once('=').unwrap();
    // The sequential run cannot finish in time; it is killed at the timeout, and the run on
    // two processes that follows is the one the signal interrupts.
    let mut child = testkit::Reaped::start(
        Command::new(HARNESS)
            .args([
                "run",
                "--apps",
                "sor",
                "--args",
                "sor=-n 64 --iterations 100000000",
                "--nodes",
                "2",
                "--repeat",
                "1",
                "--timeout",
                "2",
                "--no-progress",
                "--bin-dir",
                &bins,
                "--results-dir",
                out.to_str().unwrap(),
                "--name",
                "sigterm",
            ])
            .env(k, v)
            .env("RUST_LOG", "warn"),
    );
    let harness_pid = child.0.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let procs = marked(&marker);
        let launcher = procs.iter().any(|(_, c)| c.contains("ipl-run"));
        let ranks = procs
            .iter()
            .filter(|(_, c)| c.contains("/sor ") && !c.contains("ipl-run") && !c.contains("--seq"))
            .count();
        if launcher && ranks == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no parallel run started: {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: a signal to the harness this test started.
    unsafe {
        libc::kill(harness_pid, libc::SIGTERM);
    }
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the harness did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130), "{status}");
    // Nothing of the run is left: neither ipl-run nor either rank.
    let left = loop {
        let left = marked(&marker);
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for (pid, _) in &left {
        // SAFETY: kill(2) of a process this test's harness started.
        unsafe {
            libc::kill(*pid, libc::SIGKILL);
        }
    }
    assert!(left.is_empty(), "left running after SIGTERM: {left:?}");
    let meta: serde_json::Value =
        serde_json::from_str(&read(&out.join("sigterm").join("meta.json"))).unwrap();
    assert_eq!(meta["interrupted"], true);
    let runs = jsonl(&out.join("sigterm").join("runs.jsonl"));
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0]["status"], "timed-out");
    assert_eq!(runs[1]["status"], "interrupted");
}
