//! The sweep: probes the binaries, plans every run (repetitions interleaved, so that a change
//! of load on the machine touches every point alike), runs each with a time bound and writes
//! its record as soon as it completes, shows progress, and at the end derives the summary and
//! charts.

use crate::apps::{self, AppSpec};
use crate::config::SweepConfig;
use crate::error::{Error, Result};
use crate::exec::{self, CommandLine, Exit, Outcome};
use crate::launch::Launcher;
use crate::machine::{GitInfo, Machine};
use crate::micro::{self, MicroProbe};
use crate::report::{self, Rendered};
use crate::store::{
    self, AppEntry, Meta, MicroRecord, Reported, ResultSet, RunRecord, SetWriter, Status, Version,
};
use crate::verify::{self, Verdict};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The largest figures file a micro-benchmark may write (they hold a few kilobytes).
const MAX_MICRO_JSON: u64 = 16 << 20;

/// How and where a sweep runs, besides what it measures.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory holding the app, launcher and benchmark binaries.
    pub bin_dir: PathBuf,
    /// Directory the result set is created in (`results/`).
    pub results_dir: PathBuf,
    /// The set's name (a new directory under `results_dir`).
    pub name: String,
    /// `quick` or `run`, recorded in the set.
    pub kind: String,
    /// The harness's command line, recorded in the set.
    pub invocation: Vec<String>,
    /// Print the planned commands instead of running them.
    pub dry_run: bool,
    /// Draw a progress bar on standard error (when it is a terminal).
    pub progress: bool,
    /// Skip apps whose binary is missing (with a note) instead of failing.
    pub skip_missing_apps: bool,
    /// Set by Ctrl-C: the current run is killed and the sweep stops, keeping what it has.
    pub stop: Arc<AtomicBool>,
}

/// What a finished (or interrupted) sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The result set's directory (`None` for a dry run).
    pub dir: Option<PathBuf>,
    /// Ctrl-C stopped it before every run was measured.
    pub interrupted: bool,
    /// Runs measured, of those planned.
    pub measured: usize,
    /// Runs (apps and micro-benchmarks) that failed, timed out, printed no result or were
    /// not parallel.
    pub failed: usize,
    /// App runs that ended well with another answer than their sequential baseline.
    pub wrong: usize,
    /// Runs planned.
    pub planned: usize,
    /// The summary and charts (`None` for a dry run).
    pub rendered: Option<Rendered>,
    /// For a dry run: every command that would run, in order.
    pub commands: Vec<String>,
    /// Notes for the user (fallbacks, skipped benchmarks).
    pub notes: Vec<String>,
}

/// One planned run.
#[derive(Debug, Clone)]
enum Task {
    App {
        app: usize,
        version: Version,
        nodes: u32,
        threads: u32,
        repeat: u32,
        cmd: CommandLine,
        /// The extra run of a point that writes a trace (`run --trace`), kept out of the
        /// figures.
        traced: bool,
    },
    Micro {
        micro: usize,
        repeat: u32,
    },
}

struct PreparedApp {
    spec: &'static AppSpec,
    entry: AppEntry,
}

/// The JSON result line of a run, and how many ranks printed one: the line of rank 0
/// (`[0] {...}` under `ipl-run`) or an unprefixed line (other launchers); failing those, the
/// line of the lowest rank (an app whose elected master is not rank 0, such as
/// master-worker, prints its result there).
pub fn find_result_line(stdout: &str) -> (Option<serde_json::Value>, usize) {
    let mut best: Option<(u32, serde_json::Value)> = None;
    let mut count = 0;
    for line in stdout.lines() {
        let line = line.trim();
        let (rank, rest) = match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
            Some((r, rest)) if r.parse::<u32>().is_ok() => (r.parse::<u32>().ok(), rest),
            _ => (None, line),
        };
        if !rest.starts_with('{') {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(rest) else {
            continue;
        };
        if v.get("app").is_none() {
            continue;
        }
        count += 1;
        let r = rank.unwrap_or(0);
        if best.as_ref().map_or(true, |(b, _)| r < *b) {
            best = Some((r, v));
        }
    }
    (best.map(|(_, v)| v), count)
}

/// Writes a line to standard error, ignoring a closed one: after SIGHUP the terminal may be
/// gone, and the sweep must still close its set.
fn err_line(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn last_line(s: &str) -> Option<String> {
    s.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(240).collect())
}

/// Turns a finished run into its record.
#[allow(clippy::too_many_arguments)]
fn record(
    app: &str,
    version: Version,
    nodes: u32,
    threads: u32,
    repeat: u32,
    cmd: &CommandLine,
    out: &Outcome,
    cores: usize,
    log: String,
) -> RunRecord {
    let (line, lines) = find_result_line(&out.stdout);
    let get_u32 =
        |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64()).map(|x| x as u32);
    let reported = line.as_ref().map(|v| Reported {
        version: v
            .get("version")
            .and_then(|x| x.as_str())
            .map(str::to_string),
        // uts counts tree nodes in `nodes` and its processes in `processes`.
        nodes: get_u32(v, "processes").or_else(|| get_u32(v, "nodes")),
        threads: get_u32(v, "threads"),
    });
    let (status, note) = match out.exit {
        Exit::TimedOut => (
            Status::TimedOut,
            Some("killed at the per-run timeout".to_string()),
        ),
        Exit::Interrupted => (Status::Interrupted, None),
        Exit::Code(0) => match &reported {
            None => (
                Status::NoResult,
                Some("no JSON result line on standard output".to_string()),
            ),
            Some(r) if version == Version::Parallel && r.nodes != Some(nodes) => (
                Status::NotParallel,
                Some(format!(
                    "reported nodes={} for P={nodes}, {lines} result lines: no parallel \
                     version in this binary",
                    r.nodes.map_or("?".to_string(), |n| n.to_string())
                )),
            ),
            Some(_) => (Status::Ok, None),
        },
        other => (
            Status::Failed,
            Some(match last_line(&out.stderr) {
                Some(l) => format!("{other}: {l}"),
                None => other.to_string(),
            }),
        ),
    };
    let seconds = line
        .as_ref()
        .and_then(|v| v.get("seconds"))
        .and_then(|s| s.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
                .collect()
        })
        .unwrap_or_default();
    let checksum = line
        .as_ref()
        .and_then(|v| v.get("checksum"))
        .map(|c| match c {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    RunRecord {
        app: app.to_string(),
        version,
        nodes,
        threads,
        repeat,
        status,
        exit: out.exit,
        command: cmd.display(),
        wall_seconds: out.wall_seconds,
        total_seconds: line
            .as_ref()
            .and_then(|v| v.get("total_seconds"))
            .and_then(|x| x.as_f64()),
        seconds,
        checksum,
        reported,
        oversubscribed: nodes as u64 * threads as u64 > cores as u64,
        note,
        log,
        result: line,
    }
}

/// Finds the directory a result set goes in by default: `results/` at the root of the Cargo
/// workspace holding `start`, else `results/` under `start`.
pub fn default_results_dir(start: &Path) -> PathBuf {
    let mut dir = Some(start);
    while let Some(d) = dir {
        let manifest = d.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|t| t.contains("[workspace]")) {
            return d.join("results");
        }
        dir = d.parent();
    }
    start.join("results")
}

fn fmt_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Estimates of how long each kind of run takes, from the runs so far.
#[derive(Default)]
struct Estimator {
    by_key: HashMap<String, f64>,
    by_app: HashMap<String, (f64, usize)>,
    all: (f64, usize),
}

impl Estimator {
    fn add(&mut self, key: &str, app: &str, secs: f64) {
        self.by_key.insert(key.to_string(), secs);
        let e = self.by_app.entry(app.to_string()).or_insert((0.0, 0));
        e.0 += secs;
        e.1 += 1;
        self.all.0 += secs;
        self.all.1 += 1;
    }

    fn guess(&self, key: &str, app: &str) -> Option<f64> {
        self.by_key
            .get(key)
            .copied()
            .or_else(|| self.by_app.get(app).map(|(s, n)| s / *n as f64))
            .or_else(|| (self.all.1 > 0).then(|| self.all.0 / self.all.1 as f64))
    }
}

fn task_key(t: &Task, apps: &[PreparedApp], micros: &[MicroProbe]) -> (String, String) {
    match t {
        Task::App {
            app,
            version,
            nodes,
            threads,
            ..
        } => {
            let name = apps[*app].spec.name.to_string();
            (format!("{name}/{}/{nodes}/{threads}", version.name()), name)
        }
        Task::Micro { micro, .. } => {
            let name = micros[*micro].micro.binary().to_string();
            (name.clone(), name)
        }
    }
}

fn task_label(t: &Task, apps: &[PreparedApp], micros: &[MicroProbe], c: &SweepConfig) -> String {
    match t {
        Task::App {
            app,
            version,
            nodes,
            threads,
            repeat: r,
            traced,
            ..
        } => {
            let point = match version {
                Version::Sequential => "sequential".to_string(),
                Version::Parallel => format!("P={nodes} T={threads}"),
            };
            if *traced {
                return format!("{} {point} (traced run)", apps[*app].spec.name);
            }
            format!(
                "{} {point} (run {}/{})",
                apps[*app].spec.name,
                r + 1,
                c.repeat
            )
        }
        Task::Micro { micro, repeat: r } => {
            format!(
                "{} (run {}/{})",
                micros[*micro].micro.binary(),
                r + 1,
                c.micro_repeat
            )
        }
    }
}

/// Runs the sweep `config` as `opts` says; see the module documentation.
pub fn run_sweep(config: &SweepConfig, opts: &Options) -> Result<SweepOutcome> {
    config.validate()?;
    store::check_name(&opts.name)?;
    let mut notes: Vec<String> = Vec::new();
    let machine = Machine::current();
    let cores = machine.cores;

    let prepared = prepare_apps(config, opts, &mut notes)?;
    let launcher = Launcher::from_config(config, &opts.bin_dir);
    let micros = probe_micros(config, opts, &mut notes)?;

    if prepared.is_empty() && micros.is_empty() {
        let wanted: Vec<&str> = config
            .apps
            .iter()
            .map(String::as_str)
            .chain(config.micro.iter().map(|m| m.binary()))
            .collect();
        return Err(Error::BinaryNotFound {
            program: wanted.join(", "),
            dir: opts.bin_dir.clone(),
        });
    }

    let dir = opts.results_dir.join(&opts.name);
    let tasks = plan(config, &prepared, micros.len(), &launcher, &dir);

    let micro_cmd = |m: &MicroProbe, repeat: u32| {
        micro::command(
            m,
            &config.micro_settings,
            config.micro_args.get(m.micro.binary()).map(Vec::as_slice),
            &micro_file(&dir, m, repeat, "json"),
        )
    };
    if opts.dry_run {
        let commands = tasks
            .iter()
            .map(|t| match t {
                Task::App { cmd, .. } => cmd.display(),
                Task::Micro { micro, repeat } => micro_cmd(&micros[*micro], *repeat).display(),
            })
            .collect();
        return Ok(SweepOutcome {
            dir: None,
            interrupted: false,
            measured: 0,
            failed: 0,
            wrong: 0,
            planned: tasks.len(),
            rendered: None,
            commands,
            notes,
        });
    }
    if let Some(Task::App { cmd, .. }) = tasks.iter().find(|t| {
        matches!(
            t,
            Task::App {
                version: Version::Parallel,
                ..
            }
        )
    }) {
        launcher.check_available(cmd)?;
    }

    let mut meta = Meta {
        format: store::FORMAT,
        name: opts.name.clone(),
        kind: opts.kind.clone(),
        created: store::now_rfc3339(),
        finished: None,
        interrupted: false,
        harness_version: env!("CARGO_PKG_VERSION").to_string(),
        invocation: opts.invocation.clone(),
        config: config.clone(),
        // The binaries' repository; failing that (binaries copied elsewhere), the one the
        // harness runs in.
        git: match GitInfo::of(&opts.bin_dir) {
            g if g.revision == "unknown" => std::env::current_dir()
                .map(|d| GitInfo::of(&d))
                .unwrap_or(g),
            g => g,
        },
        machine,
        bin_dir: opts.bin_dir.clone(),
        apps: prepared.iter().map(|a| a.entry.clone()).collect(),
        notes: notes.clone(),
    };
    let mut writer = SetWriter::create(&dir, &meta)?;
    let env = RunEnv {
        set: &dir,
        timeout: config.timeout,
        stop: &opts.stop,
        cores,
    };
    tracing::info!(dir = %dir.display(), runs = tasks.len(), "sweep starts");

    let bar = progress_bar(tasks.len(), opts.progress);
    let plain = bar.is_hidden();
    let say = |line: String| {
        if plain {
            err_line(&line);
        } else {
            bar.println(line);
        }
    };
    for n in &notes {
        say(format!("note: {n}"));
    }

    let mut estimator = Estimator::default();
    let mut warned: HashSet<(String, &str)> = HashSet::new();
    // Warns of a run that did not end well once per point and kind of problem, not for every
    // repetition.
    let mut warn_once = |key: &str, label: &str, status: Status, note: Option<&str>| {
        if status != Status::Ok
            && status != Status::Interrupted
            && warned.insert((key.to_string(), status.name()))
        {
            say(problem_line(label, status.name(), note));
        }
    };
    // The first successful sequential run of each app: what the others must agree with.
    let mut baselines: HashMap<&str, RunRecord> = HashMap::new();
    let mut measured = 0;
    // Traced runs that failed or gave another answer (they are not in the set's records).
    let mut traced_failed = 0;
    let mut interrupted = false;
    let total = tasks.len();
    for (i, task) in tasks.iter().enumerate() {
        if opts.stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let label = task_label(task, &prepared, &micros, config);
        let left: f64 = tasks[i..]
            .iter()
            .map(|t| {
                let (k, a) = task_key(t, &prepared, &micros);
                estimator.guess(&k, &a).unwrap_or(0.0)
            })
            .sum();
        let eta = if i == 0 {
            "estimating time left".to_string()
        } else {
            format!("about {} left", fmt_duration(left))
        };
        bar.set_message(format!("{label} · {eta}"));
        let (key, app_name) = task_key(task, &prepared, &micros);
        let (status, wall, shown, verdict) = match task {
            Task::App {
                app,
                nodes,
                threads,
                cmd,
                traced: true,
                ..
            } => {
                let name = prepared[*app].spec.name;
                let (rec, wall) = run_traced(name, *nodes, *threads, cmd, &env, &say)?;
                let verdict = baselines
                    .get(name)
                    .filter(|_| rec.status == Status::Ok)
                    .map(|base| verify::verdict(base, &rec));
                let wrong = matches!(verdict, Some(Verdict::Differs(_)));
                if wrong || (rec.status != Status::Ok && rec.status != Status::Interrupted) {
                    traced_failed += 1;
                    let what = if wrong {
                        "another answer"
                    } else {
                        rec.status.name()
                    };
                    say(problem_line(&label, what, rec.note.as_deref()));
                }
                (rec.status, wall, rec.seconds_measured(), verdict)
            }
            Task::App {
                app,
                version,
                nodes,
                threads,
                repeat,
                cmd,
                traced: false,
            } => {
                let name = prepared[*app].spec.name;
                let (rec, wall) = run_app(name, *version, (*nodes, *threads, *repeat), cmd, &env)?;
                writer.append_run(&rec)?;
                let shown = rec.seconds_measured();
                let verdict = match baselines.get(name) {
                    _ if rec.status != Status::Ok => None,
                    Some(base) => Some(verify::verdict(base, &rec)),
                    None if rec.version == Version::Sequential => {
                        baselines.insert(name, rec.clone());
                        None
                    }
                    None => None,
                };
                if let Some(Verdict::Differs(why)) = &verdict {
                    say(format!(
                        "error: {label}: another answer than the sequential baseline ({why}); \
                         left out of the figures"
                    ));
                }
                warn_once(&key, &label, rec.status, rec.note.as_deref());
                (rec.status, wall, shown, verdict)
            }
            Task::Micro { micro, repeat } => {
                let m = &micros[*micro];
                let rec = run_micro(m, *repeat, &micro_cmd(m, *repeat), &env)?;
                warn_once(&key, &label, rec.status, rec.note.as_deref());
                writer.append_micro(&rec)?;
                (rec.status, rec.wall_seconds, rec.wall_seconds, None)
            }
        };
        if status == Status::Interrupted {
            interrupted = true;
            break;
        }
        measured += 1;
        estimator.add(&key, &app_name, wall);
        bar.inc(1);
        if plain {
            let what = match verdict {
                Some(Verdict::Differs(_)) => "wrong result",
                _ => status.name(),
            };
            err_line(&format!(
                "[{}/{total}] {label}: {shown:.3} s ({what})",
                i + 1
            ));
        }
    }
    bar.finish_and_clear();
    meta.finished = Some(store::now_rfc3339());
    meta.interrupted = interrupted;
    writer.update_meta(&meta)?;
    drop(writer);
    if interrupted {
        err_line(&format!(
            "interrupted: {measured} of {total} runs measured; they are kept in {}",
            dir.display()
        ));
    }

    let set = ResultSet::load(&dir)?;
    let rendered = report::render(&set)?;
    let (failed, wrong) = problems(&set);
    let failed = failed + traced_failed;
    Ok(SweepOutcome {
        dir: Some(dir),
        interrupted,
        measured,
        failed,
        wrong,
        planned: total,
        rendered: Some(rendered),
        commands: Vec::new(),
        notes,
    })
}

/// Where and how the sweep's processes run: the set they write to, their time limit, the flag
/// that stops them (Ctrl-C), and the machine's cores (for the records).
struct RunEnv<'a> {
    set: &'a Path,
    timeout: std::time::Duration,
    stop: &'a AtomicBool,
    cores: usize,
}

impl RunEnv<'_> {
    /// Runs `cmd` within the time limit, its standard output and error kept in `out` and
    /// `err`.
    fn run(&self, cmd: &CommandLine, out: &Path, err: &Path) -> Result<Outcome> {
        exec::run_logged(cmd, self.timeout, self.stop, out, err)
    }
}

/// Runs a measured run of app `name` (`version` at `(nodes, threads)`, repetition
/// `repeat`) as `cmd`, its output kept in the set's logs; its record and wall-clock seconds.
fn run_app(
    name: &str,
    version: Version,
    (nodes, threads, repeat): (u32, u32, u32),
    cmd: &CommandLine,
    env: &RunEnv<'_>,
) -> Result<(RunRecord, f64)> {
    let stem = match version {
        Version::Sequential => format!("{name}-seq-r{repeat}"),
        Version::Parallel => format!("{name}-p{nodes}-t{threads}-r{repeat}"),
    };
    let logs = env.set.join(store::files::LOGS);
    tracing::debug!(command = %cmd.display(), "run");
    let out = env.run(
        cmd,
        &logs.join(format!("{stem}.out")),
        &logs.join(format!("{stem}.err")),
    )?;
    let rec = record(
        name,
        version,
        nodes,
        threads,
        repeat,
        cmd,
        &out,
        env.cores,
        format!("{}/{stem}", store::files::LOGS),
    );
    Ok((rec, out.wall_seconds))
}

/// Runs micro-benchmark `m` (its `repeat`th run, as `cmd`) and reads the figures it wrote.
fn run_micro(
    m: &MicroProbe,
    repeat: u32,
    cmd: &CommandLine,
    env: &RunEnv<'_>,
) -> Result<MicroRecord> {
    let json_path = micro_file(env.set, m, repeat, "json");
    let out = env.run(
        cmd,
        &micro_file(env.set, m, repeat, "txt"),
        &micro_file(env.set, m, repeat, "err"),
    )?;
    // The figures file a micro-benchmark wrote, read within a bound as any file.
    let figures = (m.json && out.exit.success()).then(|| {
        crate::input::read_text_bounded(&json_path, MAX_MICRO_JSON).and_then(|t| {
            serde_json::from_str::<serde_json::Value>(&t).map_err(|e| format!("not JSON: {e}"))
        })
    });
    let unreadable = match &figures {
        Some(Err(why)) => Some(why.clone()),
        _ => None,
    };
    let json = figures.and_then(Result::ok);
    let (status, note) = match out.exit {
        Exit::Code(0) if m.json && json.is_none() => (
            Status::NoResult,
            Some(format!(
                "no readable JSON in {}: {}",
                json_path.display(),
                unreadable.as_deref().unwrap_or("no figures")
            )),
        ),
        Exit::Code(0) => (Status::Ok, None),
        Exit::TimedOut => (Status::TimedOut, Some("killed at the timeout".into())),
        Exit::Interrupted => (Status::Interrupted, None),
        other => (
            Status::Failed,
            Some(match last_line(&out.stderr) {
                Some(l) => format!("{other}: {l}"),
                None => other.to_string(),
            }),
        ),
    };
    Ok(MicroRecord {
        bench: m.micro.binary().to_string(),
        repeat,
        status,
        exit: out.exit,
        command: cmd.display(),
        wall_seconds: out.wall_seconds,
        output: format!("{}/{}.txt", store::files::MICRO_DIR, micro_stem(m, repeat)),
        json,
        note,
    })
}

/// The name, without extension, of the files of the `repeat`th run of micro-benchmark `m`.
fn micro_stem(m: &MicroProbe, repeat: u32) -> String {
    format!("{}-{repeat}", m.micro.binary())
}

/// The file with `extension` of the `repeat`th run of micro-benchmark `m` in the set `set`: the
/// figures it is told to write (`json`), its output (`txt`) and its errors (`err`).
fn micro_file(set: &Path, m: &MicroProbe, repeat: u32, extension: &str) -> PathBuf {
    set.join(store::files::MICRO_DIR)
        .join(format!("{}.{extension}", micro_stem(m, repeat)))
}

/// The sweep's progress bar on standard error, for `runs` runs; hidden unless `show`.
fn progress_bar(runs: usize, show: bool) -> ProgressBar {
    let bar = if show {
        ProgressBar::with_draw_target(Some(runs as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

/// The warning for run `label` that ended as `what`, with its note.
fn problem_line(label: &str, what: &str, note: Option<&str>) -> String {
    match note {
        Some(n) => format!("warning: {label}: {what}: {n}"),
        None => format!("warning: {label}: {what}"),
    }
}

/// The apps of the sweep: their binaries, what those support, and the parameters and counts
/// they run with; what had to change is said in `notes`.
fn prepare_apps(
    config: &SweepConfig,
    opts: &Options,
    notes: &mut Vec<String>,
) -> Result<Vec<PreparedApp>> {
    let mut prepared: Vec<PreparedApp> = Vec::new();
    for name in &config.apps {
        let spec = apps::find(name)?;
        let probe = match apps::probe(spec, &opts.bin_dir) {
            Ok(p) => p,
            Err(Error::BinaryNotFound { program, dir }) if opts.skip_missing_apps => {
                notes.push(format!(
                    "{name}: no binary {program} in {}; skipped",
                    dir.display()
                ));
                continue;
            }
            Err(e) => return Err(e),
        };
        if !probe.seq_flag {
            let how = if spec.seq_fallback.is_empty() {
                "its plain version, which is sequential in this build".to_string()
            } else {
                format!("`{}`", spec.seq_fallback.join(" "))
            };
            notes.push(format!(
                "{name}: this binary does not accept --seq; the sequential baseline ran {how}"
            ));
        }
        let threads = if probe.threads_flag {
            config.threads.clone()
        } else {
            if config.threads.iter().any(|&t| t > 1) {
                notes.push(format!(
                    "{name}: this binary has no --threads option; ran T=1 only"
                ));
            }
            vec![1]
        };
        let nodes: Vec<u32> = config
            .nodes
            .iter()
            .copied()
            .filter(|&p| p >= spec.min_nodes)
            .collect();
        if nodes.len() < config.nodes.len() {
            notes.push(format!(
                "{name}: needs at least {} processes; smaller counts left out",
                spec.min_nodes
            ));
        }
        let params = config
            .app_args
            .get(name)
            .cloned()
            .unwrap_or_else(|| spec.size_args(config.size));
        prepared.push(PreparedApp {
            spec,
            entry: AppEntry {
                probe,
                params,
                threads,
                nodes,
            },
        });
    }
    Ok(prepared)
}

/// The micro-benchmarks of the sweep that are there; the others are said in `notes`.
fn probe_micros(
    config: &SweepConfig,
    opts: &Options,
    notes: &mut Vec<String>,
) -> Result<Vec<MicroProbe>> {
    let mut micros: Vec<MicroProbe> = Vec::new();
    for &m in &config.micro {
        match micro::probe(m, &opts.bin_dir)? {
            Some(p) => micros.push(p),
            None => notes.push(format!(
                "{}: not found in {}; skipped",
                m.binary(),
                opts.bin_dir.display()
            )),
        }
    }
    Ok(micros)
}

/// The sweep's runs: every repetition of every point, the sequential baseline first in each
/// round; then the traced runs, one per parallel point; then the `micros` micro-benchmarks'.
fn plan(
    config: &SweepConfig,
    prepared: &[PreparedApp],
    micros: usize,
    launcher: &Launcher,
    dir: &Path,
) -> Vec<Task> {
    let mut tasks: Vec<Task> = Vec::new();
    for repeat in 0..config.repeat {
        for (i, a) in prepared.iter().enumerate() {
            let e = &a.entry;
            tasks.push(Task::App {
                app: i,
                version: Version::Sequential,
                nodes: 1,
                threads: 1,
                repeat,
                cmd: CommandLine::new(
                    e.probe.path.display().to_string(),
                    a.spec.sequential_args(&e.probe, &e.params),
                ),
                traced: false,
            });
            for &p in &e.nodes {
                for &t in &e.threads {
                    let args = a.spec.parallel_args(&e.probe, &e.params, t);
                    tasks.push(Task::App {
                        app: i,
                        version: Version::Parallel,
                        nodes: p,
                        threads: t,
                        repeat,
                        cmd: launcher.command(p, t, &e.probe.path, &args),
                        traced: false,
                    });
                }
            }
        }
    }
    if config.trace {
        // The processes may run elsewhere: they get the set's absolute path.
        let traces = std::path::absolute(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .join(store::files::TRACES);
        for (i, a) in prepared.iter().enumerate() {
            let e = &a.entry;
            for &p in &e.nodes {
                for &t in &e.threads {
                    let out = traces
                        .join(trace_stem(a.spec.name, p, t))
                        .display()
                        .to_string();
                    let mut args = a.spec.parallel_args(&e.probe, &e.params, t);
                    if e.probe.trace_flag {
                        args.extend(["--trace".to_string(), out.clone()]);
                    }
                    let mut cmd = launcher.command(p, t, &e.probe.path, &args);
                    if !e.probe.trace_flag {
                        cmd.env.push(("IPL_TRACE".to_string(), out));
                    }
                    tasks.push(Task::App {
                        app: i,
                        version: Version::Parallel,
                        nodes: p,
                        threads: t,
                        repeat: 0,
                        cmd,
                        traced: true,
                    });
                }
            }
        }
    }
    for repeat in 0..config.micro_repeat {
        for m in 0..micros {
            tasks.push(Task::Micro { micro: m, repeat });
        }
    }
    tasks
}

/// The directory name of the traced run of a point, under the set's `traces/`.
pub fn trace_stem(app: &str, nodes: u32, threads: u32) -> String {
    format!("{app}-p{nodes}-t{threads}")
}

/// Runs the traced run of a point: its output, record (`run.json`) and the processes' traces
/// go to the set's `traces/APP-pP-tT/`, where the merged timeline and its charts are drawn.
/// A timeline that cannot be drawn is a warning: the run's own status tells whether it failed.
fn run_traced(
    name: &str,
    nodes: u32,
    threads: u32,
    cmd: &CommandLine,
    env: &RunEnv<'_>,
    say: &dyn Fn(String),
) -> Result<(RunRecord, f64)> {
    let stem = trace_stem(name, nodes, threads);
    let rel = format!("{}/{stem}", store::files::TRACES);
    let tdir = env.set.join(&rel);
    std::fs::create_dir_all(&tdir)
        .map_err(|e| Error::io(format!("cannot create {}", tdir.display()), e))?;
    tracing::debug!(command = %cmd.display(), "traced run");
    let out = env.run(cmd, &tdir.join("run.out"), &tdir.join("run.err"))?;
    let rec = record(
        name,
        Version::Parallel,
        nodes,
        threads,
        0,
        cmd,
        &out,
        env.cores,
        format!("{rel}/run"),
    );
    let json = serde_json::to_string_pretty(&rec).map_err(|e| Error::BadResultSet {
        path: tdir.clone(),
        reason: format!("cannot encode the run's record: {e}"),
    })?;
    std::fs::write(tdir.join("run.json"), json + "\n").map_err(|e| {
        Error::io(
            format!("cannot write {}", tdir.join("run.json").display()),
            e,
        )
    })?;
    if rec.status == Status::Ok {
        if let Err(e) = crate::timeline::draw(std::slice::from_ref(&tdir), None) {
            say(format!(
                "warning: {name} P={nodes} T={threads}: no timeline: {e}"
            ));
        }
    }
    Ok((rec, out.wall_seconds))
}

/// The runs of a set that did not end well (failed, timed out, no result, not parallel), and
/// the app runs that ended well with another answer than their sequential baseline.
pub fn problems(set: &ResultSet) -> (usize, usize) {
    let bad = |s: Status| !matches!(s, Status::Ok | Status::Interrupted);
    let failed = set.runs.iter().filter(|r| bad(r.status)).count()
        + set.micro.iter().filter(|m| bad(m.status)).count();
    let wrong = crate::analysis::verdicts(&set.runs)
        .iter()
        .filter(|v| matches!(v, Some(Verdict::Differs(_))))
        .count();
    (failed, wrong)
}

/// Re-derives the summary, tables and charts of a stored result set without running
/// anything. Refuses a set whose records are damaged or fewer than its stored summary was
/// derived from, rather than overwrite what was measured with less.
pub fn plot(dir: &Path) -> Result<Rendered> {
    let set = ResultSet::load(dir)?;
    set.check_not_less_than_derived()?;
    report::render(&set)
}

/// The default binary directory: the one holding the running executable (`target/release`
/// when started with `cargo run --release`).
pub fn default_bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("cannot find the harness's own executable", e))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // Test and example executables live one level further down, in deps/ or examples/.
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps") | Some("examples") => Ok(dir.parent().map(Path::to_path_buf).unwrap_or(dir)),
        _ => Ok(dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_line_of_rank_zero() {
        let out =
            "[1] {\"app\":\"sor\",\"nodes\":1}\n[0] progress\n[0] {\"app\":\"sor\",\"nodes\":2}\n";
        let (v, n) = find_result_line(out);
        assert_eq!(v.unwrap()["nodes"], 2);
        assert_eq!(n, 2);
        let (v, n) = find_result_line("warming up\n{\"app\":\"x\",\"total_seconds\":1.5}\n");
        assert_eq!(v.unwrap()["total_seconds"], 1.5);
        assert_eq!(n, 1);
        assert_eq!(find_result_line("{\"no\":1}\n{broken\n").1, 0);
        let (v, n) = find_result_line("[1] x\n[2] {\"app\":\"master-worker\",\"nodes\":3}\n");
        assert_eq!(v.unwrap()["nodes"], 3);
        assert_eq!(n, 1);
    }

    fn outcome(exit: Exit, stdout: &str) -> Outcome {
        Outcome {
            exit,
            wall_seconds: 2.0,
            stdout: stdout.into(),
            stderr: "starting\nerror: it broke\n".into(),
        }
    }

    #[test]
    fn statuses() {
        let cmd = CommandLine::new("x", []);
        let line = r#"{"app":"sor","version":"sequential","nodes":1,"threads":1,"seconds":{"solve":0.5},"total_seconds":0.6,"checksum":"ab"}"#;
        let r = record(
            "sor",
            Version::Sequential,
            1,
            1,
            0,
            &cmd,
            &outcome(Exit::Code(0), line),
            2,
            "l".into(),
        );
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.total_seconds, Some(0.6));
        assert_eq!(r.seconds["solve"], 0.5);
        assert_eq!(r.checksum.as_deref(), Some("ab"));
        assert_eq!(r.seconds_measured(), 0.6);
        let two = format!("[0] {line}\n[1] {line}\n");
        let r = record(
            "sor",
            Version::Parallel,
            2,
            1,
            0,
            &cmd,
            &outcome(Exit::Code(0), &two),
            2,
            "l".into(),
        );
        assert_eq!(r.status, Status::NotParallel);
        assert!(r.note.unwrap().contains("nodes=1 for P=2"));
        let r = record(
            "sor",
            Version::Parallel,
            2,
            2,
            0,
            &cmd,
            &outcome(Exit::Code(1), ""),
            2,
            "l".into(),
        );
        assert_eq!(r.status, Status::Failed);
        assert_eq!(r.note.as_deref(), Some("exit status 1: error: it broke"));
        assert!(r.oversubscribed);
        assert_eq!(r.seconds_measured(), 2.0);
        let r = record(
            "sor",
            Version::Sequential,
            1,
            1,
            0,
            &cmd,
            &outcome(Exit::TimedOut, ""),
            2,
            "l".into(),
        );
        assert_eq!(r.status, Status::TimedOut);
        let r = record(
            "sor",
            Version::Sequential,
            1,
            1,
            0,
            &cmd,
            &outcome(Exit::Code(0), "hello"),
            2,
            "l".into(),
        );
        assert_eq!(r.status, Status::NoResult);
        let bh = r#"{"app":"barnes-hut","nodes":1,"checksum":-17.5}"#;
        let r = record(
            "barnes-hut",
            Version::Sequential,
            1,
            1,
            0,
            &cmd,
            &outcome(Exit::Code(0), bh),
            2,
            "l".into(),
        );
        assert_eq!(r.checksum.as_deref(), Some("-17.5"));
    }

    #[test]
    fn durations_and_dirs() {
        assert_eq!(fmt_duration(42.4), "42s");
        assert_eq!(fmt_duration(125.0), "2m 05s");
        assert_eq!(fmt_duration(7322.0), "2h 02m");
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(
            default_results_dir(here),
            here.parent().unwrap().join("results")
        );
    }

    #[test]
    fn estimates() {
        let mut e = Estimator::default();
        assert_eq!(e.guess("a/seq", "a"), None);
        e.add("a/seq", "a", 2.0);
        e.add("a/p2", "a", 1.0);
        assert_eq!(e.guess("a/seq", "a"), Some(2.0));
        assert_eq!(e.guess("a/p4", "a"), Some(1.5));
        assert_eq!(e.guess("b/seq", "b"), Some(1.5));
    }
}
