//! Result sets on disk: `results/<name>/` with the machine and configuration (`meta.json`),
//! one record per measured run (`runs.jsonl`, `runs.csv`, appended as each run completes),
//! the micro-benchmarks (`micro.jsonl`, `micro/`), the runs' output (`logs/`), and what
//! [`crate::report`] and [`crate::chart`] derive from them.

use crate::apps::AppProbe;
use crate::config::{SweepConfig, MAX_COUNT};
use crate::error::{Error, Result};
use crate::exec::Exit;
use crate::machine::{GitInfo, Machine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version of the on-disk layout, stored in `meta.json`.
pub const FORMAT: u32 = 1;

/// File names inside a result set.
pub mod files {
    /// Machine, configuration, commands, revision.
    pub const META: &str = "meta.json";
    /// One JSON record per app run.
    pub const RUNS: &str = "runs.jsonl";
    /// The same runs as CSV.
    pub const RUNS_CSV: &str = "runs.csv";
    /// One JSON record per micro-benchmark run.
    pub const MICRO: &str = "micro.jsonl";
    /// The micro-benchmarks' own output files.
    pub const MICRO_DIR: &str = "micro";
    /// Standard output and error of every run.
    pub const LOGS: &str = "logs";
    /// Per-point medians, speedup and efficiency (derived).
    pub const SUMMARY_CSV: &str = "summary.csv";
    /// The same summary as JSON (derived).
    pub const SUMMARY_JSON: &str = "summary.json";
    /// Per-point median seconds of every phase (derived).
    pub const PHASES_CSV: &str = "phases.csv";
    /// Latency percentiles from ipl-bench (derived).
    pub const LATENCY_CSV: &str = "latency.csv";
    /// The exact commands, one per line (derived).
    pub const COMMANDS: &str = "commands.txt";
    /// A readable account of the set (derived).
    pub const README: &str = "README.md";
    /// Charts, PNG and SVG (derived).
    pub const CHARTS: &str = "charts";
    /// Traced runs (`run --trace`): a directory per point with the processes' traces, the
    /// merged timeline and its charts, the run's record and output.
    pub const TRACES: &str = "traces";
}

/// Which version of an app a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    /// The sequential baseline (`APP --seq`).
    Sequential,
    /// The parallel version under a launcher.
    Parallel,
}

impl Version {
    /// `sequential` or `parallel`.
    pub fn name(self) -> &'static str {
        match self {
            Version::Sequential => "sequential",
            Version::Parallel => "parallel",
        }
    }
}

/// What became of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Exited 0 and printed a result line that matches the point.
    Ok,
    /// Exited with a non-zero status or was killed by a signal.
    Failed,
    /// Ran past the per-point timeout and was killed.
    TimedOut,
    /// Stopped by Ctrl-C.
    Interrupted,
    /// Exited 0 but printed no JSON result line.
    NoResult,
    /// The app reported a different process count than was launched: the binary has no
    /// parallel version yet and every process computed the whole problem on its own.
    NotParallel,
}

impl Status {
    /// The status as written in the files.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::TimedOut => "timed-out",
            Status::Interrupted => "interrupted",
            Status::NoResult => "no-result",
            Status::NotParallel => "not-parallel",
        }
    }
}

/// What the app said about itself in its result line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reported {
    /// `version` (sequential or parallel).
    pub version: Option<String>,
    /// `nodes`.
    pub nodes: Option<u32>,
    /// `threads`.
    pub threads: Option<u32>,
}

/// One measured run of an app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The app.
    pub app: String,
    /// Sequential baseline or parallel version.
    pub version: Version,
    /// Processes launched (1 for the sequential baseline).
    pub nodes: u32,
    /// Threads per process.
    pub threads: u32,
    /// Repetition index, from 0.
    pub repeat: u32,
    /// What became of it.
    pub status: Status,
    /// How the process ended.
    pub exit: Exit,
    /// The exact command line.
    pub command: String,
    /// Wall-clock seconds of the whole command, as the harness measured it.
    pub wall_seconds: f64,
    /// `total_seconds` from the app's result line: the measured part.
    pub total_seconds: Option<f64>,
    /// `seconds` from the app's result line: seconds per phase.
    pub seconds: BTreeMap<String, f64>,
    /// `checksum` from the app's result line, as text.
    pub checksum: Option<String>,
    /// What the app reported about its version, nodes and threads.
    pub reported: Option<Reported>,
    /// More processes x threads than cores.
    pub oversubscribed: bool,
    /// Why the status is what it is, where that needs saying.
    pub note: Option<String>,
    /// The output files of the run, relative to the result set.
    pub log: String,
    /// The app's whole result line.
    pub result: Option<serde_json::Value>,
}

impl RunRecord {
    /// The record of a successful run with the given time and nothing else: for analysing
    /// figures measured elsewhere, and for examples.
    pub fn ok(app: &str, version: Version, nodes: u32, threads: u32, seconds: f64) -> RunRecord {
        RunRecord {
            app: app.to_string(),
            version,
            nodes,
            threads,
            repeat: 0,
            status: Status::Ok,
            exit: Exit::Code(0),
            command: String::new(),
            wall_seconds: seconds,
            total_seconds: Some(seconds),
            seconds: BTreeMap::new(),
            checksum: None,
            reported: None,
            oversubscribed: false,
            note: None,
            log: String::new(),
            result: None,
        }
    }

    /// The time used for speedups: the app's own `total_seconds`, else the wall time.
    pub fn seconds_measured(&self) -> f64 {
        self.total_seconds.unwrap_or(self.wall_seconds)
    }
}

/// One run of a micro-benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroRecord {
    /// The benchmark's binary name (`ipl-bench`, ...).
    pub bench: String,
    /// Repetition index, from 0.
    pub repeat: u32,
    /// What became of it.
    pub status: Status,
    /// How the process ended.
    pub exit: Exit,
    /// The exact command line.
    pub command: String,
    /// Wall-clock seconds.
    pub wall_seconds: f64,
    /// Its standard output, relative to the result set.
    pub output: String,
    /// Its JSON figures, where it writes them (`ipl-bench --json`).
    pub json: Option<serde_json::Value>,
    /// Anything worth saying about the run.
    pub note: Option<String>,
}

/// An app as measured in a set: what its binary supports and the parameters it ran with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppEntry {
    /// The binary and what its `--help` says it supports.
    pub probe: AppProbe,
    /// The problem parameters passed to every run.
    pub params: Vec<String>,
    /// Thread counts run (only 1 where the app has no `--threads`).
    pub threads: Vec<u32>,
    /// Process counts run (counts below the app's minimum are left out).
    pub nodes: Vec<u32>,
}

/// The description of a result set: `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Layout version ([`FORMAT`]).
    pub format: u32,
    /// The set's name (its directory name).
    pub name: String,
    /// `quick` or `run`.
    pub kind: String,
    /// When the sweep started (UTC, RFC 3339).
    pub created: String,
    /// When it ended, if it did.
    pub finished: Option<String>,
    /// It was stopped by Ctrl-C before all points were measured.
    pub interrupted: bool,
    /// Version of the harness that measured it.
    pub harness_version: String,
    /// The harness's own command line.
    pub invocation: Vec<String>,
    /// What was swept.
    pub config: SweepConfig,
    /// The machine.
    pub machine: Machine,
    /// The source revision.
    pub git: GitInfo,
    /// Where the binaries came from.
    pub bin_dir: PathBuf,
    /// The apps measured.
    pub apps: Vec<AppEntry>,
    /// Things the user should know (fallbacks taken, benchmarks skipped).
    pub notes: Vec<String>,
}

/// A result set read back from disk.
#[derive(Debug, Clone)]
pub struct ResultSet {
    /// Its directory.
    pub dir: PathBuf,
    /// `meta.json`.
    pub meta: Meta,
    /// `runs.jsonl`.
    pub runs: Vec<RunRecord>,
    /// `micro.jsonl`.
    pub micro: Vec<MicroRecord>,
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Json {
        context: format!("encoding {}", path.display()),
        source: e,
    })?;
    write_text(path, &(text + "\n"))
}

/// Writes `text` to `path`, naming the file in the error.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// The largest file of a result set read: a bound on memory far above what a sweep writes
/// (its most runs, [`crate::config::MAX_RUNS`], take a few hundred bytes each).
pub const MAX_SET_FILE: u64 = 1 << 30;

/// The text of a result set's file, read within [`MAX_SET_FILE`].
fn read_set_file(path: &Path) -> Result<String> {
    crate::input::read_text_bounded(path, MAX_SET_FILE).map_err(|reason| Error::BadResultSet {
        path: path.to_path_buf(),
        reason,
    })
}

/// The records of a JSON-lines file with their line numbers (from 1). The file must exist:
/// a sweep creates it before its first run, so a missing one means the set lost it.
fn jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<(usize, T)>> {
    if !path.exists() {
        return Err(Error::BadResultSet {
            path: path.to_path_buf(),
            reason: "missing: every sweep writes it, so the set is incomplete; restore it \
                     (e.g. from version control) before redrawing, since the tables and \
                     charts derived from it would be rewritten with less"
                .into(),
        });
    }
    let text = read_set_file(path)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let last = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push((i + 1, v)),
            // A sweep killed while writing leaves at most a partial last line.
            Err(e) if i + 1 == last => {
                tracing::warn!(file = %path.display(), "skipping a partial last line: {e}")
            }
            Err(e) => {
                return Err(Error::BadResultSet {
                    path: path.to_path_buf(),
                    reason: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(out)
}

/// The longest time a stored figure may claim (a year): anything longer is a damaged record,
/// and would overflow the charts' axes.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Checks a count that analysis divides by and charts iterate over.
fn check_count(what: &str, n: u32) -> std::result::Result<(), String> {
    if (1..=MAX_COUNT).contains(&n) {
        Ok(())
    } else {
        Err(format!("{what} {n} (must be 1 to {MAX_COUNT})"))
    }
}

/// Checks a time that analysis divides by and charts scale their axes to.
fn check_seconds(what: &str, s: f64) -> std::result::Result<(), String> {
    if s.is_finite() && (0.0..=MAX_SECONDS).contains(&s) {
        Ok(())
    } else {
        // Scientific notation for the absurd, so the message stays one line.
        let shown = if s.abs() >= 1e9 {
            format!("{s:e}")
        } else {
            format!("{s}")
        };
        Err(format!(
            "{what} {shown} (must be 0 to {MAX_SECONDS} seconds)"
        ))
    }
}

/// Checks a path a record gives relative to the result set: the set's own files are read
/// through it, so it must not leave the set.
fn check_in_set(what: &str, path: &str) -> std::result::Result<(), String> {
    use std::path::Component;
    if Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        Ok(())
    } else {
        Err(format!(
            "{what} '{path}' is not a path inside the result set"
        ))
    }
}

impl RunRecord {
    /// Checks every field that the analysis divides by or the charts iterate over (process
    /// and thread counts, and times), and that its log is inside the set.
    pub fn validate(&self) -> std::result::Result<(), String> {
        check_count("nodes", self.nodes)?;
        check_count("threads", self.threads)?;
        check_seconds("wall_seconds", self.wall_seconds)?;
        if let Some(t) = self.total_seconds {
            check_seconds("total_seconds", t)?;
        }
        for (phase, t) in &self.seconds {
            check_seconds(&format!("seconds.{phase}"), *t)?;
        }
        // The run's output, relative to the set: a link out of it is a damaged record.
        check_in_set("log", &self.log)
    }
}

impl Meta {
    /// Checks the fields the analysis and charts compute with: the machine's cores and each
    /// app's process and thread counts.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.machine.cores == 0 || self.machine.cores > MAX_COUNT as usize {
            return Err(format!(
                "machine.cores {} (must be 1 to {MAX_COUNT})",
                self.machine.cores
            ));
        }
        for a in &self.apps {
            if a.nodes.len() > MAX_COUNT as usize || a.threads.len() > MAX_COUNT as usize {
                return Err(format!(
                    "{}: too many process or thread counts",
                    a.probe.name
                ));
            }
            for &n in &a.nodes {
                check_count(&format!("{}: nodes", a.probe.name), n)?;
            }
            for &t in &a.threads {
                check_count(&format!("{}: threads", a.probe.name), t)?;
            }
        }
        Ok(())
    }
}

impl ResultSet {
    /// Reads the result set in `dir` and checks every stored figure the summary and charts
    /// use, so that a damaged record is named instead of drawn.
    pub fn load(dir: &Path) -> Result<ResultSet> {
        let meta_path = dir.join(files::META);
        if !meta_path.is_file() {
            return Err(Error::MissingResultSet {
                path: dir.to_path_buf(),
            });
        }
        let text = read_set_file(&meta_path)?;
        let meta: Meta = serde_json::from_str(&text).map_err(|e| Error::BadResultSet {
            path: meta_path.clone(),
            reason: e.to_string(),
        })?;
        if meta.format != FORMAT {
            return Err(Error::BadResultSet {
                path: meta_path,
                reason: format!(
                    "layout version {} (this harness reads version {FORMAT})",
                    meta.format
                ),
            });
        }
        meta.validate().map_err(|reason| Error::BadResultSet {
            path: meta_path.clone(),
            reason,
        })?;
        let runs_path = dir.join(files::RUNS);
        let mut runs = Vec::new();
        for (line, r) in jsonl::<RunRecord>(&runs_path)? {
            r.validate().map_err(|reason| Error::BadResultSet {
                path: runs_path.clone(),
                reason: format!("line {line}: {reason}"),
            })?;
            runs.push(r);
        }
        let micro_path = dir.join(files::MICRO);
        let mut micro = Vec::new();
        for (line, m) in jsonl::<MicroRecord>(&micro_path)? {
            check_seconds("wall_seconds", m.wall_seconds)
                .and_then(|()| check_in_set("output", &m.output))
                .map_err(|reason| Error::BadResultSet {
                    path: micro_path.clone(),
                    reason: format!("line {line}: {reason}"),
                })?;
            micro.push(m);
        }
        Ok(ResultSet {
            dir: dir.to_path_buf(),
            runs,
            micro,
            meta,
        })
    }

    /// Refuses to derive tables from fewer runs than the stored summary was derived from: a
    /// `runs.jsonl` that lost lines must not overwrite what was measured with less.
    pub fn check_not_less_than_derived(&self) -> Result<()> {
        let path = self.dir.join(files::SUMMARY_JSON);
        if !path.exists() {
            return Ok(());
        }
        let text = read_set_file(&path)?;
        let Ok(points) = serde_json::from_str::<Vec<serde_json::Value>>(&text) else {
            return Ok(());
        };
        let derived: u64 = points
            .iter()
            .filter_map(|p| p.get("runs").and_then(|r| r.as_u64()))
            .sum();
        if derived > self.runs.len() as u64 {
            return Err(Error::BadResultSet {
                path: self.dir.join(files::RUNS),
                reason: format!(
                    "holds {} runs, but the stored summary ({}) was derived from {derived}: \
                     refusing to overwrite it with less; restore runs.jsonl",
                    self.runs.len(),
                    files::SUMMARY_JSON
                ),
            });
        }
        Ok(())
    }
}

/// Quotes a CSV field where needed (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Formats an optional number for CSV (empty when absent).
pub fn csv_num(v: Option<f64>) -> String {
    v.map(|x| format!("{x}")).unwrap_or_default()
}

/// The header of `runs.csv`.
pub const RUNS_CSV_HEADER: &str = "app,version,nodes,threads,repeat,status,exit,total_seconds,\
wall_seconds,checksum,oversubscribed,command";

fn run_csv_line(r: &RunRecord) -> String {
    [
        csv_field(&r.app),
        r.version.name().into(),
        r.nodes.to_string(),
        r.threads.to_string(),
        r.repeat.to_string(),
        r.status.name().into(),
        csv_field(&r.exit.to_string()),
        csv_num(r.total_seconds),
        format!("{}", r.wall_seconds),
        csv_field(r.checksum.as_deref().unwrap_or("")),
        r.oversubscribed.to_string(),
        csv_field(&r.command),
    ]
    .join(",")
}

/// Writes a result set as its sweep goes: every record is on disk (flushed) when
/// [`SetWriter::append_run`] returns, so an interrupted sweep keeps what it measured.
#[derive(Debug)]
pub struct SetWriter {
    dir: PathBuf,
    runs: File,
    runs_csv: File,
    micro: File,
}

fn append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))
}

impl SetWriter {
    /// Creates the set's directory (which must not exist yet) and writes `meta`.
    pub fn create(dir: &Path, meta: &Meta) -> Result<SetWriter> {
        if dir.exists() {
            return Err(Error::ResultSetExists {
                path: dir.to_path_buf(),
            });
        }
        for d in [
            dir.to_path_buf(),
            dir.join(files::LOGS),
            dir.join(files::MICRO_DIR),
        ] {
            std::fs::create_dir_all(&d)
                .map_err(|e| Error::io(format!("cannot create {}", d.display()), e))?;
        }
        write_json(&dir.join(files::META), meta)?;
        let mut runs_csv = append(&dir.join(files::RUNS_CSV))?;
        writeln!(runs_csv, "{RUNS_CSV_HEADER}")
            .map_err(|e| Error::io("cannot write runs.csv", e))?;
        Ok(SetWriter {
            dir: dir.to_path_buf(),
            runs: append(&dir.join(files::RUNS))?,
            runs_csv,
            micro: append(&dir.join(files::MICRO))?,
        })
    }

    /// The set's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Rewrites `meta.json` (at the end of a sweep: finished time, interruption, notes).
    pub fn update_meta(&self, meta: &Meta) -> Result<()> {
        write_json(&self.dir.join(files::META), meta)
    }

    /// Appends one app run to `runs.jsonl` and `runs.csv`.
    pub fn append_run(&mut self, r: &RunRecord) -> Result<()> {
        let line = serde_json::to_string(r).map_err(|e| Error::Json {
            context: "encoding a run record".into(),
            source: e,
        })?;
        writeln!(self.runs, "{line}")
            .and_then(|_| self.runs.flush())
            .and_then(|_| writeln!(self.runs_csv, "{}", run_csv_line(r)))
            .and_then(|_| self.runs_csv.flush())
            .map_err(|e| Error::io(format!("cannot append to {}", self.dir.display()), e))
    }

    /// Appends one micro-benchmark run to `micro.jsonl`.
    pub fn append_micro(&mut self, r: &MicroRecord) -> Result<()> {
        let line = serde_json::to_string(r).map_err(|e| Error::Json {
            context: "encoding a micro-benchmark record".into(),
            source: e,
        })?;
        writeln!(self.micro, "{line}")
            .and_then(|_| self.micro.flush())
            .map_err(|e| Error::io(format!("cannot append to {}", self.dir.display()), e))
    }
}

/// The current time as UTC RFC 3339 with seconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A default set name: `<kind>-YYYYMMDD-HHMMSS` (UTC).
pub fn default_name(kind: &str) -> String {
    let t: String = now_rfc3339()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    format!("{kind}-{}", t.replace('T', "-"))
}

/// Checks a set name: one path component of letters, digits, `-`, `_` and `.`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "--name",
            name,
            "use letters, digits, '-', '_' and '.' (not first)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_num(None), "");
        assert_eq!(csv_num(Some(0.5)), "0.5");
    }

    #[test]
    fn names() {
        let n = default_name("quick");
        assert!(
            n.starts_with("quick-") && n.len() == "quick-20250101-120000".len(),
            "{n}"
        );
        check_name(&n).unwrap();
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    /// A run's log is a path inside its set, or the record is damaged; runs without a log
    /// (figures measured elsewhere) pass.
    #[test]
    fn a_log_outside_the_set_is_refused() {
        let mut r = RunRecord::ok("sor", Version::Parallel, 2, 1, 1.0);
        r.validate().unwrap();
        r.log = "logs/sor-p2-r0".into();
        r.validate().unwrap();
        for bad in ["../../etc/passwd", "/etc/passwd", "logs/../../x"] {
            r.log = bad.into();
            let e = r.validate().unwrap_err();
            assert!(
                e.contains("log") && e.contains("not a path inside"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn partial_last_line_is_skipped() {
        let tmp = testkit::scratch_dir("bh-store");
        let dir = tmp.path();
        let p = dir.join("x.jsonl");
        std::fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        let v: Vec<(usize, serde_json::Value)> = jsonl(&p).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, 2);
        std::fs::write(&p, "{\"a\":1}\nnot json\n{\"a\":2}\n").unwrap();
        assert!(jsonl::<serde_json::Value>(&p)
            .unwrap_err()
            .to_string()
            .contains("line 2"));
    }
}
