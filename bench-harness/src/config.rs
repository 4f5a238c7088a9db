//! What a sweep measures: apps, process and thread counts, repetitions, problem size, launcher,
//! and the parsing and checking of the command-line lists that describe it.

use crate::apps::{self, Size};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The largest process or thread count accepted (the launcher's own limit).
pub const MAX_COUNT: u32 = 4096;

/// The most repetitions of a point (`--repeat`, `--micro-repeat`).
pub const MAX_REPEAT: u32 = 1000;

/// The most runs one sweep may plan: every run is a record and a log file, and the plan is
/// held in memory (`--repeat 4294967295` once took all of it).
pub const MAX_RUNS: u64 = 100_000;

/// The longest per-run timeout: 30 days.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest wide-area latency to emulate.
pub const MAX_LATENCY: Duration = Duration::from_secs(60);

/// How the processes of a parallel run are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// `ipl-run -n P -- APP ...`: local processes with the registry inside the launcher.
    Local,
    /// `mpirun -n P APP ...`: the ranks form a pool from MPI's environment variables.
    Mpirun,
    /// `srun -n P APP ...`: the ranks form a pool from Slurm's environment variables.
    Srun,
    /// `ipl-run --hostfile F -n P -- APP ...`: processes on the hosts listed in F.
    Hostfile,
}

impl LauncherKind {
    /// The launcher's name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LauncherKind::Local => "local",
            LauncherKind::Mpirun => "mpirun",
            LauncherKind::Srun => "srun",
            LauncherKind::Hostfile => "hostfile",
        }
    }
}

/// The micro-benchmarks the harness can run next to the apps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Micro {
    /// `ipl-bench`: round-trip latency, throughput and serialization of the port library.
    IplBench,
    /// `satin-bench`: spawn/sync overhead of the divide-and-conquer runtime.
    SatinBench,
    /// `bsp-bench`: superstep and collective costs of the bulk-synchronous layer.
    BspBench,
}

impl Micro {
    /// Every micro-benchmark, in the order they run.
    pub const ALL: [Micro; 3] = [Micro::IplBench, Micro::SatinBench, Micro::BspBench];

    /// The benchmark's binary name (also its name on the command line).
    pub fn binary(self) -> &'static str {
        match self {
            Micro::IplBench => "ipl-bench",
            Micro::SatinBench => "satin-bench",
            Micro::BspBench => "bsp-bench",
        }
    }

    /// Parses a benchmark name (`ipl-bench`, or the short `ipl`, `satin`, `bsp`).
    pub fn parse(s: &str) -> Result<Micro> {
        match s.trim() {
            "ipl-bench" | "ipl" => Ok(Micro::IplBench),
            "satin-bench" | "satin" => Ok(Micro::SatinBench),
            "bsp-bench" | "bsp" => Ok(Micro::BspBench),
            other => Err(Error::invalid(
                "--micro",
                other,
                "known micro-benchmarks: ipl-bench, satin-bench, bsp-bench",
            )),
        }
    }
}

/// Settings of the micro-benchmarks: how hard `ipl-bench` and `satin-bench` work.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MicroSettings {
    /// `ipl-bench --round-trips`.
    pub round_trips: u32,
    /// `ipl-bench --messages`.
    pub messages: u32,
    /// `ipl-bench --repeat` and `satin-bench --reps`.
    pub inner_repeat: u32,
}

impl MicroSettings {
    /// Short settings for the quick demonstration and tests.
    pub const SHORT: MicroSettings = MicroSettings {
        round_trips: 3000,
        messages: 20,
        inner_repeat: 3,
    };
    /// The benchmarks' own defaults.
    pub const FULL: MicroSettings = MicroSettings {
        round_trips: 20_000,
        messages: 200,
        inner_repeat: 7,
    };
}

/// A complete description of one sweep: the input of [`crate::runner::run_sweep`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepConfig {
    /// Apps to run, by name (checked against [`apps::known`]).
    pub apps: Vec<String>,
    /// Process counts P.
    pub nodes: Vec<u32>,
    /// Threads per process T (apps without a `--threads` option run T = 1 only).
    pub threads: Vec<u32>,
    /// Repetitions of every point, the sequential baseline included.
    pub repeat: u32,
    /// Problem-size preset.
    pub size: Size,
    /// Exact app arguments replacing the size preset, per app.
    pub app_args: BTreeMap<String, Vec<String>>,
    /// How parallel runs are launched.
    pub launcher: LauncherKind,
    /// Host file for [`LauncherKind::Hostfile`].
    pub hostfile: Option<PathBuf>,
    /// Remote shell command for [`LauncherKind::Hostfile`] (`ipl-run --rsh`); None: ipl-run's
    /// default (`ssh`).
    #[serde(default)]
    pub rsh: Option<String>,
    /// Number of emulated clusters (`ipl-run --clusters`).
    pub clusters: Option<u32>,
    /// Wide-area latency between clusters (`ipl-run --wan-latency`, e.g. `20ms`).
    pub wan_latency: Option<String>,
    /// Extra arguments for the launcher, put before the program.
    #[serde(default)]
    pub launcher_args: Vec<String>,
    /// Upper bound on the wall-clock time of one run; the run is killed after it.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Micro-benchmarks to run after the apps.
    pub micro: Vec<Micro>,
    /// Repetitions of every micro-benchmark.
    #[serde(default = "one")]
    pub micro_repeat: u32,
    /// Settings of the micro-benchmarks.
    pub micro_settings: MicroSettings,
    /// Exact arguments for a micro-benchmark instead of the settings, by binary name
    /// (`--json FILE` is still added where the benchmark takes it).
    #[serde(default)]
    pub micro_args: BTreeMap<String, Vec<String>>,
    /// Run every parallel point once more with a trace of each process, kept in the set's
    /// `traces/` with its merged timeline and charts; those runs are left out of the figures.
    #[serde(default)]
    pub trace: bool,
}

impl SweepConfig {
    /// The quick demonstration: every known app at the small size, sequentially and at 1 and
    /// 2 processes with 1 and 2 threads, three repetitions, all micro-benchmarks twice with
    /// short settings, local processes only.
    pub fn quick() -> SweepConfig {
        SweepConfig {
            apps: apps::known().iter().map(|a| a.name.to_string()).collect(),
            nodes: vec![1, 2],
            threads: vec![1, 2],
            repeat: 3,
            size: Size::Small,
            app_args: BTreeMap::new(),
            launcher: LauncherKind::Local,
            hostfile: None,
            rsh: None,
            clusters: None,
            wan_latency: None,
            launcher_args: Vec::new(),
            timeout: Duration::from_secs(120),
            micro: Micro::ALL.to_vec(),
            micro_repeat: 2,
            micro_settings: MicroSettings::SHORT,
            micro_args: BTreeMap::new(),
            trace: false,
        }
    }

    /// Checks everything that can be checked without starting a process: app names, counts,
    /// launcher options. Returns the first problem as a clear error.
    pub fn validate(&self) -> Result<()> {
        if self.apps.is_empty() && self.micro.is_empty() {
            return Err(Error::invalid(
                "--apps",
                "",
                "nothing to run: give at least one app or micro-benchmark",
            ));
        }
        for a in &self.apps {
            apps::find(a)?;
        }
        for a in self.app_args.keys() {
            apps::find(a)?;
        }
        check_counts("--nodes", &self.nodes)?;
        check_counts("--threads", &self.threads)?;
        for (what, n) in [
            ("--repeat", self.repeat),
            ("--micro-repeat", self.micro_repeat),
        ] {
            if n == 0 {
                return Err(Error::invalid(what, "0", "must be at least 1"));
            }
            if n > MAX_REPEAT {
                return Err(Error::invalid(
                    what,
                    n.to_string(),
                    format!("at most {MAX_REPEAT}"),
                ));
            }
        }
        let points =
            self.apps.len() as u64 * (1 + self.nodes.len() as u64 * self.threads.len() as u64);
        let runs = points * self.repeat as u64 + self.micro.len() as u64 * self.micro_repeat as u64;
        if runs > MAX_RUNS {
            return Err(Error::invalid(
                "--repeat",
                self.repeat.to_string(),
                format!(
                    "the sweep would plan {runs} runs, at most {MAX_RUNS}: fewer points or \
                     repetitions"
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid(
                "--timeout",
                "0",
                "must be more than 0 seconds",
            ));
        }
        if self.timeout > MAX_TIMEOUT {
            return Err(Error::invalid(
                "--timeout",
                format!("{} s", self.timeout.as_secs()),
                "at most 30 days",
            ));
        }
        if let Some(c) = self.clusters {
            if c == 0 {
                return Err(Error::invalid("--clusters", "0", "must be at least 1"));
            }
            if let Some(&p) = self.nodes.iter().find(|&&p| p < c) {
                return Err(Error::invalid(
                    "--clusters",
                    c.to_string(),
                    format!("more clusters than processes in the point P = {p}"),
                ));
            }
        }
        let wide_area = self.clusters.is_some() || self.wan_latency.is_some();
        match self.launcher {
            LauncherKind::Mpirun | LauncherKind::Srun if wide_area => {
                return Err(Error::LauncherUnsupported {
                    launcher: self.launcher.name().into(),
                    reason: "--clusters and --wan-latency need the local or hostfile launcher \
                             (ipl-run assigns the locations); under mpirun or srun set \
                             IPL_LOCATION per rank in the job script"
                        .into(),
                })
            }
            LauncherKind::Hostfile if self.hostfile.is_none() => {
                return Err(Error::invalid(
                    "--launcher",
                    "hostfile",
                    "needs --hostfile FILE",
                ))
            }
            _ => {}
        }
        if let Some(r) = &self.rsh {
            if self.launcher != LauncherKind::Hostfile {
                return Err(Error::invalid(
                    "--rsh",
                    r.clone(),
                    "only used with --launcher hostfile",
                ));
            }
            if r.trim().is_empty() {
                return Err(Error::invalid("--rsh", r.clone(), "empty command"));
            }
        }
        if let Some(h) = &self.hostfile {
            if self.launcher != LauncherKind::Hostfile {
                return Err(Error::invalid(
                    "--hostfile",
                    h.display().to_string(),
                    "only used with --launcher hostfile",
                ));
            }
        }
        if let Some(w) = &self.wan_latency {
            parse_latency(w)?;
        }
        Ok(())
    }
}

fn one() -> u32 {
    1
}

fn check_counts(what: &str, v: &[u32]) -> Result<()> {
    if v.is_empty() {
        return Err(Error::invalid(what, "", "the list is empty"));
    }
    for &n in v {
        check_count(what, n)?;
    }
    Ok(())
}

fn check_count(what: &str, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(what, "0", "counts start at 1"));
    }
    if n > MAX_COUNT {
        return Err(Error::invalid(
            what,
            n.to_string(),
            format!("at most {MAX_COUNT}"),
        ));
    }
    Ok(())
}

/// Parses a comma-separated list of process or thread counts such as `1,2,4,8`. Counts must
/// be 1 to [`MAX_COUNT`], listed once each; the result is sorted.
///
/// ```
/// use bench_harness::config::parse_counts;
/// assert_eq!(parse_counts("--nodes", "4, 1,2").unwrap(), vec![1, 2, 4]);
/// assert!(parse_counts("--nodes", "0").unwrap_err().to_string().contains("counts start at 1"));
/// assert!(parse_counts("--nodes", "1,,2").is_err());
/// ```
pub fn parse_counts(what: &str, s: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Err(Error::invalid(what, s, "the list is empty"));
    }
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(Error::invalid(
                what,
                s,
                "empty element in the list (write counts like 1,2,4)",
            ));
        }
        let n: u32 = item.parse().map_err(|_| {
            Error::invalid(what, item, "not a whole number (write counts like 1,2,4)")
        })?;
        check_count(what, n)?;
        if out.contains(&n) {
            return Err(Error::invalid(what, s, format!("{n} is listed twice")));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// Parses a comma-separated list of app names, checking each against [`apps::known`].
pub fn parse_apps(s: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(Error::invalid(
                "--apps",
                s,
                "empty element in the list (write apps like sor,raytracer)",
            ));
        }
        let spec = apps::find(item)?;
        if !out.iter().any(|a| a == spec.name) {
            out.push(spec.name.to_string());
        }
    }
    Ok(out)
}

/// Parses `APP=ARGS` (arguments split at white space) for `--args`.
pub fn parse_app_args(s: &str) -> Result<(String, Vec<String>)> {
    let Some((app, args)) = s.split_once('=') else {
        return Err(Error::invalid(
            "--args",
            s,
            "write APP=ARGUMENTS, e.g. --args 'sor=-n 2048 --iterations 100'",
        ));
    };
    let spec = apps::find(app.trim())?;
    Ok((
        spec.name.to_string(),
        args.split_whitespace().map(str::to_string).collect(),
    ))
}

/// Parses `BENCH=ARGS` for `--micro-args` (e.g. `ipl-bench=--only latency`).
pub fn parse_micro_args(s: &str) -> Result<(String, Vec<String>)> {
    let Some((bench, args)) = s.split_once('=') else {
        return Err(Error::invalid(
            "--micro-args",
            s,
            "write BENCH=ARGUMENTS, e.g. --micro-args 'ipl-bench=--only latency'",
        ));
    };
    let m = Micro::parse(bench)?;
    Ok((
        m.binary().to_string(),
        args.split_whitespace().map(str::to_string).collect(),
    ))
}

/// Parses a latency such as `20ms`, `500us` or `1s` (the forms `ipl-run --wan-latency` takes),
/// at most [`MAX_LATENCY`].
pub fn parse_latency(s: &str) -> Result<Duration> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| Error::invalid("--wan-latency", s, format!("{e} (write e.g. 20ms)")))?;
    if d > MAX_LATENCY {
        return Err(Error::invalid(
            "--wan-latency",
            s,
            format!("at most {}", humantime::format_duration(MAX_LATENCY)),
        ));
    }
    Ok(d)
}

/// Parses a timeout in seconds (fractions allowed) or with a unit (`90s`, `10m`).
pub fn parse_timeout(s: &str) -> Result<Duration> {
    let t = s.trim();
    let d = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > MAX_TIMEOUT.as_secs_f64() => {
            return Err(Error::invalid("--timeout", s, "at most 30 days"))
        }
        Ok(secs) if secs.is_finite() && secs > 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => {
            return Err(Error::invalid(
                "--timeout",
                s,
                "must be more than 0 seconds",
            ))
        }
        Err(_) => humantime::parse_duration(t)
            .map_err(|e| Error::invalid("--timeout", s, format!("{e} (write e.g. 300 or 5m)")))?,
    };
    if d.is_zero() {
        return Err(Error::invalid(
            "--timeout",
            s,
            "must be more than 0 seconds",
        ));
    }
    if d > MAX_TIMEOUT {
        return Err(Error::invalid("--timeout", s, "at most 30 days"));
    }
    Ok(d)
}

mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked() {
        assert_eq!(parse_counts("--nodes", "8,1,2").unwrap(), vec![1, 2, 8]);
        for bad in ["", "0", "1,0", "1,,2", "a", "1.5", "-1", "4097", "2,2"] {
            let e = parse_counts("--nodes", bad).unwrap_err();
            assert!(e.to_string().contains("--nodes"), "{bad}: {e}");
        }
    }

    #[test]
    fn apps_are_checked() {
        assert_eq!(
            parse_apps("sor, raytracer,sor").unwrap(),
            vec!["sor", "raytracer"]
        );
        let e = parse_apps("sor,nbody").unwrap_err().to_string();
        assert!(
            e.contains("unknown app 'nbody'") && e.contains("barnes-hut"),
            "{e}"
        );
        assert!(parse_apps("sor,").is_err());
    }

    #[test]
    fn app_args_and_durations() {
        let (app, args) = parse_app_args("sor=-n 64  --iterations 3").unwrap();
        assert_eq!(app, "sor");
        assert_eq!(args, ["-n", "64", "--iterations", "3"]);
        assert!(parse_app_args("sor").is_err());
        let (bench, args) = parse_micro_args("ipl=--only latency").unwrap();
        assert_eq!(bench, "ipl-bench");
        assert_eq!(args, ["--only", "latency"]);
        assert!(parse_micro_args("mpi-bench=-x").is_err());
        assert_eq!(parse_latency("20ms").unwrap(), Duration::from_millis(20));
        assert!(parse_latency("fast").is_err());
        assert_eq!(parse_timeout("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_timeout("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-3").is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        let mut c = SweepConfig::quick();
        c.validate().unwrap();
        c.nodes = vec![0];
        assert!(c.validate().unwrap_err().to_string().contains("--nodes"));
        let mut c = SweepConfig::quick();
        c.launcher = LauncherKind::Mpirun;
        c.wan_latency = Some("20ms".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("IPL_LOCATION"));
        let mut c = SweepConfig::quick();
        c.launcher = LauncherKind::Hostfile;
        assert!(c.validate().unwrap_err().to_string().contains("--hostfile"));
        let mut c = SweepConfig::quick();
        c.clusters = Some(4);
        assert!(c.validate().unwrap_err().to_string().contains("P = 1"));
        let mut c = SweepConfig::quick();
        c.apps = vec!["nbody".into()];
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("unknown app"));
    }
}
