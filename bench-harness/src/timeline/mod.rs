//! `bench-harness timeline DIR`: the per-process traces of one run (written under
//! `IPL_TRACE=DIR`, or `--trace DIR`, see `ipl::trace`) merged into one trace with a process
//! per rank, and drawn as charts.
//!
//! Writes, in `DIR` (or `--out`):
//! - `timeline.json`: the merged trace, in Chrome's JSON object format: open it at
//!   <https://ui.perfetto.dev> (or `chrome://tracing`). Times are on the registry's clock:
//!   processes on other hosts are shifted by the offset they measured at join.
//! - `timeline.png`/`.svg`: a row per process (and per satin worker) coloured by what it was
//!   doing: computing, sending or waiting in a bsp superstep, running jobs or idle in satin.
//! - `supersteps.png`/`.svg` (bsp runs): per process and superstep, time computing,
//!   communicating and waiting; a process that computes longer than the others makes them wait,
//!   which shows as red in their panels.
//! - `steals.png`/`.svg` (satin runs): who stole from whom, jobs and bytes; the diagonal holds
//!   the steals between workers of one process.
//!
//! A file that is missing, cut short (its process was killed before it finished its trace),
//! not JSON, or not such a trace is an error naming it.

pub mod charts;
pub mod model;
pub mod read;

use crate::error::{Error, Result};
use model::Run;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The file names written.
pub mod files {
    /// The merged trace.
    pub const MERGED: &str = "timeline.json";
    /// The timeline chart (`.png`, `.svg`).
    pub const TIMELINE: &str = "timeline";
    /// The superstep breakdown.
    pub const SUPERSTEPS: &str = "supersteps";
    /// The steal matrix.
    pub const STEALS: &str = "steals";
}

/// What [`draw`] wrote.
#[derive(Debug, Clone)]
pub struct Drawn {
    /// The merged trace.
    pub merged: PathBuf,
    /// The charts, PNG and SVG of each.
    pub charts: Vec<PathBuf>,
    /// Processes merged.
    pub processes: usize,
    /// Supersteps of the whole machine, per process (the most of any).
    pub supersteps: usize,
    /// Successful steals, local and remote.
    pub steals: u64,
}

/// The trace files `inputs` name: every `*.trace.json` of a directory, or a file itself.
pub fn trace_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in inputs {
        if p.is_dir() {
            files.extend(read::files_in(p)?);
        } else {
            files.push(p.clone());
        }
    }
    if files.len() > MAX_PROCESSES {
        return Err(Error::InvalidArgument {
            what: "trace files".into(),
            value: files.len().to_string(),
            reason: format!(
                "one timeline merges at most {MAX_PROCESSES} processes (the most a launch \
                 starts): the steal matrix grows with their square"
            ),
        });
    }
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if total > MAX_TOTAL {
        return Err(Error::InvalidArgument {
            what: "trace files".into(),
            value: format!("{} files of {total} bytes", files.len()),
            reason: format!("one timeline reads at most {MAX_TOTAL} bytes of traces"),
        });
    }
    Ok(files)
}

/// The most processes one timeline merges: as many as one launch starts.
pub const MAX_PROCESSES: usize = 4096;

/// The most bytes of traces one timeline reads, all held in memory while they are merged.
pub const MAX_TOTAL: u64 = 4 << 30;

/// Reads the traces `inputs` name and puts them on one clock.
pub fn load(inputs: &[PathBuf]) -> Result<Run> {
    let processes = trace_files(inputs)?
        .iter()
        .map(|f| read::read(f))
        .collect::<Result<Vec<_>>>()?;
    Run::new(processes)
}

/// Merges the traces `inputs` name and draws their charts into `out` (default: the first
/// directory given, else the first file's directory).
pub fn draw(inputs: &[PathBuf], out: Option<&Path>) -> Result<Drawn> {
    let run = load(inputs)?;
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => match inputs.first() {
            Some(p) if p.is_dir() => p.clone(),
            Some(p) => p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf(),
            None => PathBuf::from("."),
        },
    };
    std::fs::create_dir_all(&out)
        .map_err(|e| Error::io(format!("cannot create {}", out.display()), e))?;
    let merged = out.join(files::MERGED);
    write_json(&merged, &run.merged())?;

    let subtitle = subtitle(&run);
    let mut charts = Vec::new();
    let rows = run.rows();
    if !rows.is_empty() {
        charts.extend(charts::timeline(
            &charts::TimelineChart {
                subtitle: subtitle.clone(),
                rows: &rows,
                end_us: run.end(),
            },
            &out.join(files::TIMELINE),
        )?);
    }
    let steps = run.supersteps();
    if !steps.is_empty() {
        charts.extend(charts::supersteps(
            &charts::SuperstepChart {
                subtitle: subtitle.clone(),
                processes: &steps,
            },
            &out.join(files::SUPERSTEPS),
        )?);
    }
    let steals = run.steals();
    if let Some(s) = &steals {
        charts.extend(charts::steals(
            &charts::StealChart {
                subtitle: subtitle.clone(),
                steals: s,
            },
            &out.join(files::STEALS),
        )?);
    }
    Ok(Drawn {
        merged,
        charts,
        processes: run.processes.len(),
        supersteps: steps.iter().map(|(_, s)| s.len()).max().unwrap_or(0),
        steals: steals.map_or(0, |s| s.count.iter().flatten().sum()),
    })
}

fn write_json(path: &Path, v: &serde_json::Value) -> Result<()> {
    let fail = |e: std::io::Error| Error::io(format!("cannot write {}", path.display()), e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(fail)?);
    serde_json::to_writer(&mut w, v).map_err(|e| fail(e.into()))?;
    w.flush().map_err(fail)
}

/// The line under every chart's title: processes, hosts, length, and how well the clocks of
/// other hosts are lined up.
fn subtitle(run: &Run) -> String {
    let mut hosts: Vec<&str> = run.processes.iter().map(|p| p.host.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let n = run.processes.len();
    let mut s = format!(
        "{n} process{} on {} host{} · {:.3} s",
        if n == 1 { "" } else { "es" },
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        run.end() / 1e6
    );
    let worst = run
        .processes
        .iter()
        .filter(|p| !p.clock.same_host)
        .map(|p| p.clock.rtt_us / 2.0)
        .fold(f64::NAN, f64::max);
    if worst.is_finite() {
        s += &format!(" · clocks lined up within ±{worst:.0} µs");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More trace files than a launch starts are refused before any is read: the steal
    /// matrix is square in their number.
    #[test]
    fn more_processes_than_a_launch_starts_are_refused_before_reading() {
        let tmp = testkit::scratch_dir("bh-timeline-many");
        let dir = tmp.path();
        for i in 0..=MAX_PROCESSES {
            std::fs::write(dir.join(format!("{i:05}{}", read::FILE_SUFFIX)), b"").unwrap();
        }
        let e = trace_files(&[dir.to_path_buf()]).map(|f| f.len());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("4097") && e.contains("at most 4096"), "{e}");
    }

    #[test]
    fn clocks_no_run_reaches_are_refused_with_the_file_not_drawn() {
        let tmp = testkit::scratch_dir("bh-timeline-clock");
        let dir = tmp.path();
        // Each far from the other: the run's clock ran to infinity, which the chart refused
        // without naming a file, after the merged trace was written with null times.
        for (file, rank, unix) in [("a", 0, "1e308"), ("b", 1, "-1e308")] {
            std::fs::write(
                dir.join(format!("{file}.trace.json")),
                format!(
                    r#"[{{"ph": "i", "name": "trace.start", "ts": 0, "args": {{"unix_us": "{unix}"}}}},
                        {{"ph": "i", "name": "ipl.join", "ts": 1, "args": {{"rank": "{rank}"}}}},
                        {{"ph": "i", "name": "bsp.superstep", "ts": 100, "args": {{"step": "0",
                          "comm": "0", "compute_us": "10", "sync_us": "10", "send_us": "1"}}}}]"#
                ),
            )
            .unwrap();
        }
        let e = draw(&[dir.to_path_buf()], None)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        let merged = dir.join(files::MERGED).exists();
        assert!(
            e.contains("a.trace.json")
                && e.contains("event 0: trace.start")
                && e.contains("unix_us"),
            "{e}"
        );
        assert!(!merged, "a merged trace was written");
    }

    #[test]
    fn a_superstep_number_no_run_reaches_is_refused_not_drawn() {
        let tmp = testkit::scratch_dir("bh-timeline-step");
        let dir = tmp.path();
        let file = dir.join("a.trace.json");
        std::fs::write(
            &file,
            r#"[{"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}},
                {"ph": "i", "name": "bsp.superstep", "ts": 100, "args": {"step": "1e20",
                 "pid": "0", "comm": "0", "compute_us": "10", "sync_us": "10", "send_us": "1"}}]"#,
        )
        .unwrap();
        // Its bar's position overflowed in the superstep chart.
        let e = draw(&[file], Some(dir))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.trace.json")
                && e.contains("event 1")
                && e.contains("step 1e+20, not a superstep number"),
            "{e}"
        );
    }
}
