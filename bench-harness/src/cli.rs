//! The command line: `bench-harness quick`, `run` and `plot`.

use crate::apps::Size;
use crate::config::{self, LauncherKind, Micro, MicroSettings, SweepConfig};
use crate::report::Rendered;
use crate::runner::{self, Options, SweepOutcome};
use crate::store;
use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Measure the platform's workloads and micro-benchmarks over process and thread counts,
/// store the runs as a result set, and draw speedup, efficiency, phase and latency charts.
#[derive(Debug, Parser)]
#[command(name = "bench-harness", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every app at a small size, sequentially and on 1 and 2 local processes (and threads
    /// where the app has them), plus the micro-benchmarks: a few minutes on a laptop.
    Quick(QuickArgs),
    /// A sweep over apps, process and thread counts, with repetitions.
    Run(Box<RunArgs>),
    /// Redraw the charts and tables of a stored result set without running anything.
    Plot(PlotArgs),
    /// Chart the wide-area simulation study written by `satin-dist-bench study --csv FILE`:
    /// speedup against one-way latency, a line per number of locations and stealing policy.
    StudyChart(StudyChartArgs),
    /// Merge the per-process traces of a run (IPL_TRACE=DIR or --trace DIR) into one trace,
    /// timeline.json, to open at <https://ui.perfetto.dev>, and draw its timeline, superstep
    /// breakdown and steal matrix.
    Timeline(TimelineArgs),
}

/// `study-chart`.
#[derive(Debug, Args)]
pub struct StudyChartArgs {
    /// The study's CSV file.
    pub csv: PathBuf,
    /// Directory for `study-speedup.png` and `.svg` [default: the file's directory].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `timeline`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// A directory of one run's trace files (every *.trace.json in it), or trace files.
    #[arg(required = true, value_name = "DIR|FILE")]
    pub inputs: Vec<PathBuf>,
    /// Where the merged trace and the charts go [default: the first directory given, or the
    /// directory of the first file].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Where results go and binaries come from.
#[derive(Debug, Args)]
pub struct Common {
    /// Name of the result set (a new directory under --results-dir)
    /// [default: quick-YYYYMMDD-HHMMSS or run-YYYYMMDD-HHMMSS, UTC].
    #[arg(long)]
    pub name: Option<String>,
    /// Directory the result set is created in [default: results/ at the workspace root].
    #[arg(long)]
    pub results_dir: Option<PathBuf>,
    /// Directory holding the app, ipl-run and benchmark binaries [default: the directory of
    /// this executable, e.g. target/release].
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Upper bound on each run, in seconds or with a unit (90s, 10m); a run past it is killed
    /// with everything it started [default: 600 s for run, 120 s for quick].
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// No progress bar (one line per run on standard error instead).
    #[arg(long)]
    pub no_progress: bool,
}

/// `quick`.
#[derive(Debug, Args)]
pub struct QuickArgs {
    /// Where results go and binaries come from.
    #[command(flatten)]
    pub common: Common,
}

/// A comma-separated list of counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(pub Vec<u32>);

/// A comma-separated list of app names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppList(pub Vec<String>);

/// A comma-separated list of micro-benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicroList(pub Vec<Micro>);

/// The message for clap, which names the option and the whole value itself: just the
/// reason, with the offending element where it is part of a list.
fn reason(s: &str, e: crate::Error) -> String {
    match e {
        crate::Error::InvalidArgument { value, reason, .. } if value == s => reason,
        crate::Error::InvalidArgument { value, reason, .. } => format!("'{value}': {reason}"),
        other => other.to_string(),
    }
}

fn parse_nodes(s: &str) -> Result<Counts, String> {
    config::parse_counts("--nodes", s)
        .map(Counts)
        .map_err(|e| reason(s, e))
}

fn parse_threads(s: &str) -> Result<Counts, String> {
    config::parse_counts("--threads", s)
        .map(Counts)
        .map_err(|e| reason(s, e))
}

fn parse_apps(s: &str) -> Result<AppList, String> {
    config::parse_apps(s)
        .map(AppList)
        .map_err(|e| e.to_string())
}

fn parse_micro(s: &str) -> Result<MicroList, String> {
    if s.trim() == "all" {
        return Ok(MicroList(Micro::ALL.to_vec()));
    }
    if s.trim() == "none" {
        return Ok(MicroList(Vec::new()));
    }
    let mut v = Vec::new();
    for item in s.split(',') {
        let m = Micro::parse(item).map_err(|e| reason(s, e))?;
        if !v.contains(&m) {
            v.push(m);
        }
    }
    Ok(MicroList(v))
}

fn parse_app_args(s: &str) -> Result<(String, Vec<String>), String> {
    config::parse_app_args(s).map_err(|e| reason(s, e))
}

fn parse_micro_args(s: &str) -> Result<(String, Vec<String>), String> {
    config::parse_micro_args(s).map_err(|e| reason(s, e))
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    config::parse_timeout(s).map_err(|e| reason(s, e))
}

fn parse_latency(s: &str) -> Result<String, String> {
    config::parse_latency(s)
        .map(|_| s.trim().to_string())
        .map_err(|e| reason(s, e))
}

/// A count of at least 1 (clusters); clap names the option in its message.
fn parse_positive(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("not a whole number".into()),
    }
}

/// A number of repetitions: 1 to [`config::MAX_REPEAT`].
fn parse_repeat(s: &str) -> Result<u32, String> {
    match parse_positive(s)? {
        n if n > config::MAX_REPEAT => Err(format!("at most {}", config::MAX_REPEAT)),
        n => Ok(n),
    }
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Apps to run, comma-separated (sor, raytracer, barnes-hut, master-worker, uts).
    #[arg(long, value_parser = parse_apps, default_value = "sor,raytracer,barnes-hut")]
    pub apps: AppList,
    /// Process counts P, comma-separated.
    #[arg(long, value_parser = parse_nodes, default_value = "1,2,4")]
    pub nodes: Counts,
    /// Threads per process T, comma-separated (apps without --threads run T=1 only).
    #[arg(long, value_parser = parse_threads, default_value = "1")]
    pub threads: Counts,
    /// Repetitions of every point, the sequential baseline included (medians are reported,
    /// min and max kept).
    #[arg(long, value_parser = parse_repeat, default_value = "5")]
    pub repeat: u32,
    /// Problem-size preset.
    #[arg(long, value_enum, default_value = "medium")]
    pub size: Size,
    /// Exact arguments for one app instead of the size preset, as APP=ARGS
    /// (e.g. --args 'sor=-n 2048'); repeatable.
    #[arg(long = "args", value_parser = parse_app_args)]
    pub app_args: Vec<(String, Vec<String>)>,
    /// How parallel runs start: local (ipl-run), mpirun, srun, or hostfile (ipl-run --hostfile).
    #[arg(long, value_enum, default_value = "local")]
    pub launcher: LauncherKind,
    /// Host file for --launcher hostfile.
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    /// Remote shell for --launcher hostfile (ipl-run --rsh), e.g. "ssh -o BatchMode=yes"
    /// [default: ipl-run's, ssh].
    #[arg(long, value_name = "CMD")]
    pub rsh: Option<String>,
    /// Emulated clusters: ranks are spread over this many locations (ipl-run --clusters).
    #[arg(long, value_parser = parse_positive)]
    pub clusters: Option<u32>,
    /// Latency added between clusters, e.g. 20ms (ipl-run --wan-latency).
    #[arg(long, value_parser = parse_latency)]
    pub wan_latency: Option<String>,
    /// Extra arguments for the launcher, split at spaces and put before the program, e.g.
    /// "--oversubscribe --allow-run-as-root" for mpirun or "--overcommit" for srun.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub launcher_args: Option<String>,
    /// Micro-benchmarks to run after the apps: ipl-bench, satin-bench, bsp-bench, all or none.
    #[arg(long, value_parser = parse_micro, default_value = "none")]
    pub micro: MicroList,
    /// Repetitions of every micro-benchmark [default: --repeat].
    #[arg(long, value_parser = parse_repeat)]
    pub micro_repeat: Option<u32>,
    /// Run the micro-benchmarks with their own (long) default settings instead of short ones.
    #[arg(long)]
    pub micro_full: bool,
    /// Exact arguments for one micro-benchmark, as BENCH=ARGS
    /// (e.g. --micro-args 'ipl-bench=--only latency --round-trips 5000'); repeatable.
    #[arg(long = "micro-args", value_parser = parse_micro_args)]
    pub micro_args: Vec<(String, Vec<String>)>,
    /// Also run every parallel point once with a trace of each process (--trace DIR, or
    /// IPL_TRACE for apps without the option), kept in traces/APP-pP-tT/ of the set with its
    /// merged timeline and charts (see `bench-harness timeline`); those runs are left out of
    /// the figures.
    #[arg(long)]
    pub trace: bool,
    /// Print every command the sweep would run, and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where results go and binaries come from.
    #[command(flatten)]
    pub common: Common,
}

/// `plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The result set's directory (e.g. results/quick-20250101-120000).
    pub set: PathBuf,
}

impl RunArgs {
    /// The sweep these arguments describe (checked with [`SweepConfig::validate`] by the
    /// runner).
    pub fn config(&self) -> SweepConfig {
        SweepConfig {
            apps: self.apps.0.clone(),
            nodes: self.nodes.0.clone(),
            threads: self.threads.0.clone(),
            repeat: self.repeat,
            size: self.size,
            app_args: self.app_args.iter().cloned().collect(),
            launcher: self.launcher,
            hostfile: self.hostfile.clone(),
            rsh: self.rsh.clone(),
            clusters: self.clusters,
            wan_latency: self.wan_latency.clone(),
            launcher_args: self
                .launcher_args
                .as_deref()
                .map(|a| a.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
            timeout: self.common.timeout.unwrap_or(Duration::from_secs(600)),
            micro: self.micro.0.clone(),
            micro_repeat: self.micro_repeat.unwrap_or(self.repeat),
            micro_settings: if self.micro_full {
                MicroSettings::FULL
            } else {
                MicroSettings::SHORT
            },
            micro_args: self.micro_args.iter().cloned().collect(),
            trace: self.trace,
        }
    }
}

fn options(
    common: &Common,
    kind: &str,
    dry_run: bool,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Options> {
    let bin_dir = match &common.bin_dir {
        // Absolute, so that the recorded commands are exact wherever they are read.
        Some(d) => std::fs::canonicalize(d)
            .with_context(|| format!("--bin-dir {}: no such directory", d.display()))?,
        None => runner::default_bin_dir()?,
    };
    let results_dir = match &common.results_dir {
        Some(d) => d.clone(),
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            runner::default_results_dir(&cwd)
        }
    };
    Ok(Options {
        bin_dir,
        results_dir,
        name: common
            .name
            .clone()
            .unwrap_or_else(|| store::default_name(kind)),
        kind: kind.to_string(),
        invocation: std::env::args().collect(),
        dry_run,
        progress: !common.no_progress,
        skip_missing_apps: kind == "quick",
        stop,
    })
}

/// Writes `text` to standard output, ignoring a closed one (after SIGHUP the terminal may be
/// gone; what was measured is on disk by then).
fn out(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Writes a line to standard error, ignoring a closed one.
fn err_line(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn rendered_text(r: &Rendered) -> String {
    use std::fmt::Write as _;
    let mut s = format!("\n{}", r.table);
    if !r.latency.is_empty() {
        s += "\nipl-bench, 1-byte round trip (µs, median over runs):\n";
        for l in &r.latency {
            let cells: Vec<String> = l
                .points
                .iter()
                .map(|(p, med, _, _)| format!("p{p} {med:>9.2}"))
                .collect();
            let _ = writeln!(s, "  {:<28} {}", l.name, cells.join("  "));
        }
    }
    if !r.charts.is_empty() {
        s += "\ncharts:\n";
        for c in &r.charts {
            let _ = writeln!(s, "  {}", c.display());
        }
    }
    s
}

/// The exit status of a finished sweep: 130 when it was interrupted, 1 when a run failed or
/// gave a wrong answer (said on standard error), else 0. The set is kept either way.
pub fn sweep_status(o: &SweepOutcome) -> i32 {
    let mut problems = Vec::new();
    if o.wrong > 0 {
        problems.push(format!(
            "{} run{} gave another answer than the sequential baseline (left out of the figures)",
            o.wrong,
            if o.wrong == 1 { "" } else { "s" }
        ));
    }
    if o.failed > 0 {
        let all = o.failed >= o.measured;
        problems.push(format!(
            "{}{} of {} run{} failed or timed out",
            if all { "all " } else { "" },
            o.failed,
            o.measured,
            if o.measured == 1 { "" } else { "s" }
        ));
    }
    if !problems.is_empty() {
        let kept = o
            .dir
            .as_ref()
            .map(|d| format!("; the result set is kept in {}", d.display()))
            .unwrap_or_default();
        err_line(&format!("error: {}{kept}", problems.join("; ")));
    }
    if o.interrupted {
        130
    } else if problems.is_empty() {
        0
    } else {
        1
    }
}

fn print_outcome(o: &SweepOutcome) {
    use std::fmt::Write as _;
    let mut s = o.rendered.as_ref().map(rendered_text).unwrap_or_default();
    if !o.notes.is_empty() {
        s += "\nnotes:\n";
        for n in &o.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    if let Some(d) = &o.dir {
        let _ = writeln!(
            s,
            "\nresult set: {} ({} of {} runs{})",
            d.display(),
            o.measured,
            o.planned,
            if o.interrupted { ", interrupted" } else { "" }
        );
    }
    out(&s);
}

/// Runs a parsed command line; `stop` is set by Ctrl-C, SIGTERM or SIGHUP. Returns the
/// process exit status: 0; 1 when a run of the sweep failed, timed out or gave a wrong
/// answer; 2 for arguments that cannot be served together; 130 after an interruption.
pub fn run(cli: Cli, stop: Arc<AtomicBool>) -> anyhow::Result<i32> {
    match cli.command {
        Command::Quick(a) => {
            let mut config = SweepConfig::quick();
            if let Some(t) = a.common.timeout {
                config.timeout = t;
            }
            let opts = options(&a.common, "quick", false, stop)?;
            let o = runner::run_sweep(&config, &opts).context("quick run failed")?;
            print_outcome(&o);
            Ok(sweep_status(&o))
        }
        Command::Run(a) => {
            let config = a.config();
            // Arguments that cannot be served together are a usage error, like those clap
            // refuses alone: one line, status 2, before anything starts.
            if let Err(e) = config.validate() {
                err_line(&format!("error: {e}"));
                return Ok(2);
            }
            let opts = options(&a.common, "run", a.dry_run, stop)?;
            let o = runner::run_sweep(&config, &opts).context("sweep failed")?;
            if a.dry_run {
                for n in &o.notes {
                    err_line(&format!("note: {n}"));
                }
                out(&o
                    .commands
                    .iter()
                    .map(|c| format!("{c}\n"))
                    .collect::<String>());
                return Ok(0);
            }
            print_outcome(&o);
            Ok(sweep_status(&o))
        }
        Command::StudyChart(a) => {
            let paths = crate::chart::study_file(&a.csv, a.out.as_deref())?;
            for p in paths {
                out(&format!("{}\n", p.display()));
            }
            Ok(0)
        }
        Command::Plot(a) => {
            let r =
                runner::plot(&a.set).with_context(|| format!("cannot plot {}", a.set.display()))?;
            out(&rendered_text(&r));
            Ok(0)
        }
        Command::Timeline(a) => {
            let d = crate::timeline::draw(&a.inputs, a.out.as_deref())
                .context("cannot draw the timeline")?;
            let mut s = format!(
                "{} process{} merged into {}\n",
                d.processes,
                if d.processes == 1 { "" } else { "es" },
                d.merged.display()
            );
            if d.supersteps > 0 {
                s += &format!("supersteps: {}\n", d.supersteps);
            }
            if d.steals > 0 {
                s += &format!("steals: {}\n", d.steals);
            }
            s += "charts:\n";
            for c in &d.charts {
                s += &format!("  {}\n", c.display());
            }
            s += "open the merged trace at https://ui.perfetto.dev (Open trace file)\n";
            out(&s);
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench-harness").chain(args.iter().copied()))
    }

    #[test]
    fn run_arguments() {
        let cli = parse(&[
            "run",
            "--apps",
            "sor,raytracer",
            "--nodes",
            "1,2,4,8",
            "--threads",
            "1,2",
            "--repeat",
            "5",
            "--size",
            "tiny",
            "--args",
            "sor=-n 64",
            "--micro",
            "ipl",
            "--timeout",
            "30",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        let c = r.config();
        assert_eq!(c.apps, ["sor", "raytracer"]);
        assert_eq!(c.nodes, [1, 2, 4, 8]);
        assert_eq!(c.threads, [1, 2]);
        assert_eq!(c.app_args["sor"], ["-n", "64"]);
        assert_eq!(c.micro, [Micro::IplBench]);
        assert_eq!(c.timeout, Duration::from_secs(30));
        c.validate().unwrap();
    }

    #[test]
    fn bad_arguments_are_clear() {
        let cases: [(&[&str], &str); 13] = [
            (&["run", "--apps", "sor,nbody"], "unknown app 'nbody'"),
            (&["run", "--nodes", "0"], "counts start at 1"),
            (&["run", "--nodes", "1,,2"], "empty element"),
            (&["run", "--threads", "two"], "not a whole number"),
            (&["run", "--repeat", "0"], "must be at least 1"),
            (&["run", "--repeat", "4294967295"], "at most 1000"),
            (&["run", "--micro-repeat", "1001"], "at most 1000"),
            (&["run", "--timeout", "1e300"], "at most 30 days"),
            (&["run", "--timeout", "500000000000y"], "at most 30 days"),
            (&["run", "--wan-latency", "500000000000y"], "at most 1m"),
            (&["run", "--micro", "mpi-bench"], "known micro-benchmarks"),
            (&["run", "--wan-latency", "soon"], "--wan-latency"),
            (&["run", "--launcher", "ssh"], "ssh"),
        ];
        for (args, want) in cases {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        assert!(parse(&["plot"]).is_err());
    }
}
