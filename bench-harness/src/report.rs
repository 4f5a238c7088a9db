//! What is derived from a result set's records: the summary (`summary.csv`, `summary.json`,
//! `phases.csv`, `latency.csv`), the list of commands, the set's `README.md`, the charts, and
//! the table printed on the terminal. Everything here depends on the stored files only, so
//! `bench-harness plot` redraws exactly what the sweep drew.

use crate::analysis::{self, LatencySeries, PointSummary};
use crate::chart::{self, LatencyChart, Metric, PhaseChart, ScalingChart};
use crate::error::{Error, Result};
use crate::store::{self, csv_field, csv_num, files, ResultSet, Status, Version};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The derived outputs of a set.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The points.
    pub summary: Vec<PointSummary>,
    /// Latency percentiles from ipl-bench.
    pub latency: Vec<LatencySeries>,
    /// The summary table for the terminal.
    pub table: String,
    /// Every chart file written.
    pub charts: Vec<PathBuf>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

/// Why a point's speedup is flagged: it exceeds P x T, or the machine's cores.
pub fn above_ideal_note(p: &PointSummary, cores: usize) -> String {
    let cpus = p.nodes as u64 * p.threads as u64;
    if cpus <= cores as u64 {
        format!("speedup above P × T = {cpus}: suspect the baseline or the timing")
    } else {
        format!("speedup above the {cores} cores: suspect the baseline or the timing")
    }
}

/// Short notes of a point for tables: oversubscription, a speedup above the ideal, wrong
/// answers and other problems.
fn point_note(p: &PointSummary, cores: usize) -> String {
    let mut n: Vec<String> = Vec::new();
    if p.oversubscribed {
        n.push("oversubscribed".into());
    }
    if p.above_ideal {
        n.push(above_ideal_note(p, cores));
    }
    if let Some(x) = &p.note {
        n.push(x.clone());
    }
    n.join("; ")
}

fn vs_reference(p: &PointSummary) -> String {
    match (&p.reference, p.vs_reference) {
        (Some(r), Some(v)) => format!("{v:.2} of {:.2}", r.speedup),
        (Some(r), None) => format!("- of {:.2}", r.speedup),
        _ => "-".into(),
    }
}

struct Row {
    cells: Vec<String>,
}

const HEADER: [&str; 11] = [
    "app",
    "P",
    "T",
    "runs",
    "time s (median)",
    "min-max s",
    "speedup",
    "efficiency",
    "CPU/seq",
    "vs reference",
    "note",
];

/// A speedup or efficiency for tables, marked with `!` where it exceeds the ideal.
fn flagged(v: Option<f64>, above_ideal: bool) -> String {
    match v {
        Some(x) if above_ideal => format!("{x:.2}!"),
        other => opt(other, 2),
    }
}

fn rows(summary: &[PointSummary], cores: usize) -> Vec<Row> {
    summary
        .iter()
        .map(|p| {
            let (pp, tt) = match p.version {
                Version::Sequential => ("seq".to_string(), "1".to_string()),
                Version::Parallel => (p.nodes.to_string(), p.threads.to_string()),
            };
            Row {
                cells: vec![
                    p.app.clone(),
                    pp,
                    tt,
                    if p.wrong > 0 {
                        format!("{}/{} ({} wrong)", p.ok, p.runs, p.wrong)
                    } else {
                        format!("{}/{}", p.ok, p.runs)
                    },
                    opt(p.median, 4),
                    match (p.min, p.max) {
                        (Some(a), Some(b)) => format!("{a:.4}-{b:.4}"),
                        _ => "-".into(),
                    },
                    flagged(p.speedup, p.above_ideal),
                    flagged(p.efficiency, p.above_ideal),
                    opt(p.cpu_ratio, 2),
                    vs_reference(p),
                    point_note(p, cores),
                ],
            }
        })
        .collect()
}

/// The summary as a plain-text table (what the terminal shows) for a machine of `cores`
/// cores. Speedups above the ideal carry a `!` and a note.
pub fn text_table(summary: &[PointSummary], cores: usize) -> String {
    let rows = rows(summary, cores);
    let mut widths: Vec<usize> = HEADER.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(&r.cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            let last = i + 1 == cells.len();
            // Names and notes left, figures right.
            if i == 0 || last {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "{c:>w$}");
            }
            if !last {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADER.map(String::from));
    out += &line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>());
    for r in &rows {
        out += &line(&r.cells);
    }
    out
}

/// The summary as a Markdown table (the set's README).
pub fn markdown_table(summary: &[PointSummary], cores: usize) -> String {
    let mut out = format!("| {} |\n", HEADER.join(" | "));
    out += &format!("|{}\n", "---|".repeat(HEADER.len()));
    for r in rows(summary, cores) {
        let cells: Vec<String> = r.cells.iter().map(|c| c.replace('|', "\\|")).collect();
        out += &format!("| {} |\n", cells.join(" | "));
    }
    out
}

/// `summary.csv`.
pub fn summary_csv(summary: &[PointSummary]) -> String {
    let mut out = String::from(
        "app,version,nodes,threads,cpus,runs,ok,wrong,median_seconds,min_seconds,max_seconds,\
         speedup,speedup_min,speedup_max,efficiency,above_ideal,oversubscribed,\
         reference_speedup,reference_source,vs_reference,checksum_matches,cpu_ratio,note\n",
    );
    for p in summary {
        let fields = [
            csv_field(&p.app),
            p.version.name().into(),
            p.nodes.to_string(),
            p.threads.to_string(),
            (p.nodes * p.threads).to_string(),
            p.runs.to_string(),
            p.ok.to_string(),
            p.wrong.to_string(),
            csv_num(p.median),
            csv_num(p.min),
            csv_num(p.max),
            csv_num(p.speedup),
            csv_num(p.speedup_min),
            csv_num(p.speedup_max),
            csv_num(p.efficiency),
            p.above_ideal.to_string(),
            p.oversubscribed.to_string(),
            csv_num(p.reference.as_ref().map(|r| r.speedup)),
            csv_field(p.reference.as_ref().map_or("", |r| r.source.as_str())),
            csv_num(p.vs_reference),
            p.checksum_matches
                .map(|b| b.to_string())
                .unwrap_or_default(),
            csv_num(p.cpu_ratio),
            csv_field(p.note.as_deref().unwrap_or("")),
        ];
        out += &fields.join(",");
        out.push('\n');
    }
    out
}

/// `phases.csv`.
pub fn phases_csv(summary: &[PointSummary]) -> String {
    let mut out = String::from("app,version,nodes,threads,phase,median_seconds\n");
    for p in summary {
        for (k, v) in &p.phases {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{v}",
                csv_field(&p.app),
                p.version.name(),
                p.nodes,
                p.threads,
                csv_field(k)
            );
        }
    }
    out
}

/// `latency.csv`.
pub fn latency_csv(series: &[LatencySeries]) -> String {
    let mut out = String::from("transport,percentile,median_us,min_us,max_us\n");
    for s in series {
        for (p, med, lo, hi) in &s.points {
            let _ = writeln!(out, "{},{p},{med},{lo},{hi}", csv_field(&s.name));
        }
    }
    out
}

fn commands(set: &ResultSet) -> String {
    let mut out = format!(
        "# result set {}: every command run, in order (repetitions of a command listed once)\n\
         # harness: {}\n",
        set.meta.name,
        set.meta
            .invocation
            .iter()
            .map(|w| crate::exec::quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut seen = std::collections::HashSet::new();
    for c in set
        .runs
        .iter()
        .map(|r| r.command.as_str())
        .chain(set.micro.iter().map(|m| m.command.as_str()))
    {
        if seen.insert(c) {
            out += c;
            out.push('\n');
        }
    }
    out
}

fn subtitle(set: &ResultSet, app: Option<&str>, bars: bool) -> String {
    let m = &set.meta;
    let params = app
        .and_then(|a| m.apps.iter().find(|e| e.probe.name == a))
        .map(|e| format!("{} {} · ", e.probe.name, e.params.join(" ")))
        .unwrap_or_default();
    format!(
        "{params}{} cores, {} · median of {} runs{} · set {}",
        m.machine.cores,
        m.machine.cpu,
        m.config.repeat,
        if bars { ", bars min-max" } else { "" },
        m.name
    )
}

/// Per-app tables of median milliseconds per phase, one column per point (like the profile
/// tables of the Barnes-Hut report).
fn phase_tables(set: &ResultSet, summary: &[PointSummary]) -> String {
    let mut s = String::new();
    for entry in &set.meta.apps {
        let app = entry.probe.name.as_str();
        let points: Vec<&PointSummary> = summary
            .iter()
            .filter(|p| p.app == app && !p.phases.is_empty())
            .collect();
        if points.is_empty() {
            continue;
        }
        let c = PhaseChart {
            app,
            subtitle: String::new(),
            points: points.clone(),
            cores: set.meta.machine.cores,
        };
        let _ = write!(
            s,
            "\n### {app}: median milliseconds per phase\n\n| phase | {} |\n|---|{}\n",
            points
                .iter()
                .map(|p| p.label())
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(points.len())
        );
        for phase in c.phases() {
            let cells: Vec<String> = points
                .iter()
                .map(|p| format!("{:.3}", c.value(p, &phase) * 1e3))
                .collect();
            let _ = writeln!(s, "| {} | {} |", phase.replace('_', " "), cells.join(" | "));
        }
        let totals: Vec<String> = points
            .iter()
            .map(|p| opt(p.median.map(|m| m * 1e3), 3))
            .collect();
        let _ = writeln!(s, "| total | {} |", totals.join(" | "));
    }
    s
}

/// The most of a micro-benchmark's output the README shows (the benchmarks print a few
/// kilobytes).
const MAX_OUTPUT_SHOWN: u64 = 64 << 10;

/// The start of the output file at `path` (named `name` in the set) for the README: empty
/// where it is missing or no regular file (a device or a pipe could block or never end), cut
/// at [`MAX_OUTPUT_SHOWN`] bytes.
fn output_text(path: &std::path::Path, name: &str) -> String {
    use std::io::Read as _;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return String::new();
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path)
        .and_then(|f| f.take(MAX_OUTPUT_SHOWN + 1).read_to_end(&mut bytes));
    if read.is_err() {
        return String::new();
    }
    let cut = bytes.len() as u64 > MAX_OUTPUT_SHOWN;
    bytes.truncate(MAX_OUTPUT_SHOWN as usize);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        let _ = write!(
            text,
            "\n[cut at {} KiB: the whole output is in {name}]",
            MAX_OUTPUT_SHOWN >> 10
        );
    }
    text
}

fn readme(set: &ResultSet, r: &Rendered) -> String {
    let m = &set.meta;
    let mut s = format!("# Result set `{}`\n\n", m.name);
    let status = if m.interrupted {
        "interrupted (Ctrl-C) before every run was measured; the runs below are the ones completed"
    } else if m.finished.is_some() {
        "complete"
    } else {
        "not finished (the harness stopped without closing the set)"
    };
    let _ = writeln!(s, "- kind: `{}`; status: {status}", m.kind);
    let _ = writeln!(
        s,
        "- started {}, finished {}",
        m.created,
        m.finished.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        s,
        "- machine: {} cores, {}, {:.1} GiB, {} (kernel {}), {}; host {}; load average at start {}",
        m.machine.cores,
        m.machine.cpu,
        m.machine.memory_gib(),
        m.machine.os,
        m.machine.kernel,
        m.machine.rustc,
        m.machine.hostname,
        m.machine.load_average
    );
    let _ = writeln!(
        s,
        "- revision: {}{}",
        m.git.revision,
        if m.git.modified {
            " (with uncommitted changes)"
        } else {
            ""
        }
    );
    let _ = writeln!(s, "- binaries: {}", m.bin_dir.display());
    let _ = writeln!(
        s,
        "- sweep: P = {:?}, T = {:?}, {} repetitions, size {}, launcher {}{}{}, timeout {} s per run",
        m.config.nodes,
        m.config.threads,
        m.config.repeat,
        m.config.size.name(),
        m.config.launcher.name(),
        m.config.clusters.map(|c| format!(", {c} clusters")).unwrap_or_default(),
        m.config
            .wan_latency
            .as_ref()
            .map(|w| format!(", wide-area latency {w}"))
            .unwrap_or_default(),
        m.config.timeout.as_secs_f64()
    );
    for a in &m.apps {
        let _ = writeln!(
            s,
            "- {}: `{}` with `{}` (--seq accepted: {}, --threads accepted: {})",
            a.probe.name,
            a.probe.path.display(),
            a.params.join(" "),
            a.probe.seq_flag,
            a.probe.threads_flag
        );
    }
    let _ = writeln!(
        s,
        "\nReproduce (at the revision above, after `cargo build --release --workspace --bins`):\n\n\
         ```sh\n{}\n```\n\nRedraw the charts and tables from the stored runs: \
         `bench-harness plot {}`. Every command the sweep ran is in `{}`.\n",
        m.invocation
            .iter()
            .map(|w| crate::exec::quote(w))
            .collect::<Vec<_>>()
            .join(" "),
        // Committed sets live in results/; others are named by where they are.
        if set.dir.parent().and_then(|p| p.file_name()) == Some("results".as_ref()) {
            format!("results/{}", m.name)
        } else {
            set.dir.display().to_string()
        },
        files::COMMANDS
    );
    if !m.notes.is_empty() {
        s += "## Notes\n\n";
        for n in &m.notes {
            let _ = writeln!(s, "- {n}");
        }
        s.push('\n');
    }
    s += "## Summary\n\nTimes are the apps' own `total_seconds` (the measured part); speedup is \
          the sequential median over the point's median, efficiency the speedup over P × T; \
          a speedup above P × T (or above the cores) is marked `!`: more than the processors \
          can give, it points at the baseline or the timing. A run whose answer differs from the \
          sequential baseline's is an error: counted as wrong in the runs column, named in the \
          note, and left out of every figure. \
          CPU/seq is the CPU seconds of all the point's processes over the sequential CPU \
          seconds, for apps that report them (Barnes-Hut). \
          \"vs reference\" compares with the published speedup for the same problem and \
          processor count where there is one (Barnes-Hut: Suel C code, seed 003 appendix A).\n\n";
    let wrong: usize = r.summary.iter().map(|p| p.wrong).sum();
    if wrong > 0 {
        let _ = writeln!(
            s,
            "**{wrong} run{} gave another answer than the sequential baseline** (see the notes); \
             they are left out of the figures.\n",
            if wrong == 1 { "" } else { "s" }
        );
    }
    s += &markdown_table(&r.summary, m.machine.cores);
    s += &phase_tables(set, &r.summary);
    if !r.charts.is_empty() {
        s += "\n## Charts\n\n";
        for c in r
            .charts
            .iter()
            .filter(|c| c.extension().is_some_and(|e| e == "svg"))
        {
            if let Ok(rel) = c.strip_prefix(&set.dir) {
                let _ = writeln!(s, "![{}]({})", rel.display(), rel.display());
            }
        }
    }
    let micro_text: Vec<_> = set
        .micro
        .iter()
        .filter(|x| x.repeat == 0 && x.status == Status::Ok)
        .collect();
    if !micro_text.is_empty() {
        s += "\n## Micro-benchmarks (first run)\n";
        for x in micro_text {
            let text = output_text(&set.dir.join(&x.output), &x.output);
            let _ = write!(s, "\n`{}`\n\n```\n{}\n```\n", x.command, text.trim_end());
        }
        if !r.latency.is_empty() && r.latency.iter().all(|l| l.points.len() <= 2) {
            s += "\nipl-bench reports the median and the 99th percentile of the round trips only, \
                  so the latency chart shows those two percentiles.\n";
        }
    }
    s
}

/// Writes every derived file of `set` and returns the summary, table and chart paths.
pub fn render(set: &ResultSet) -> Result<Rendered> {
    let cores = set.meta.machine.cores;
    let summary = analysis::summarize(&set.runs, cores);
    let latency = analysis::latency_series(&set.micro);
    let dir = &set.dir;
    store::write_text(&dir.join(files::SUMMARY_CSV), &summary_csv(&summary))?;
    let json = serde_json::to_string_pretty(&summary).map_err(|e| Error::Json {
        context: "encoding the summary".into(),
        source: e,
    })?;
    store::write_text(&dir.join(files::SUMMARY_JSON), &(json + "\n"))?;
    store::write_text(&dir.join(files::PHASES_CSV), &phases_csv(&summary))?;
    store::write_text(&dir.join(files::LATENCY_CSV), &latency_csv(&latency))?;
    store::write_text(&dir.join(files::COMMANDS), &commands(set))?;

    let charts_dir = dir.join(files::CHARTS);
    std::fs::create_dir_all(&charts_dir)
        .map_err(|e| Error::io(format!("cannot create {}", charts_dir.display()), e))?;
    let mut charts = Vec::new();
    for entry in &set.meta.apps {
        let app = entry.probe.name.as_str();
        let points: Vec<&PointSummary> = summary.iter().filter(|p| p.app == app).collect();
        if points.is_empty() {
            continue;
        }
        let parallel: Vec<&PointSummary> = points
            .iter()
            .copied()
            .filter(|p| p.version == Version::Parallel)
            .collect();
        if !entry.nodes.is_empty() {
            let seq_ok = points
                .iter()
                .any(|p| p.version == Version::Sequential && p.ok > 0);
            let empty_reason = if !seq_ok {
                "no speedup: the sequential baseline has no successful run".to_string()
            } else if parallel.iter().all(|p| p.ok == 0) {
                let why = parallel
                    .iter()
                    .find_map(|p| p.note.clone())
                    .unwrap_or_else(|| "no parallel run completed".into());
                format!("no speedup: {}", why.chars().take(90).collect::<String>())
            } else {
                "no speedup figures".to_string()
            };
            for metric in [Metric::Speedup, Metric::Efficiency] {
                let name = match metric {
                    Metric::Speedup => "speedup",
                    Metric::Efficiency => "efficiency",
                };
                let c = ScalingChart {
                    app,
                    subtitle: subtitle(set, Some(app), true),
                    points: parallel.clone(),
                    threads: entry.threads.clone(),
                    max_nodes: entry.nodes.iter().copied().max().unwrap_or(1),
                    cores,
                    metric,
                    empty_reason: empty_reason.clone(),
                };
                charts.extend(chart::scaling(
                    &c,
                    &charts_dir.join(format!("{name}-{app}")),
                )?);
            }
        }
        let with_phases: Vec<&PointSummary> = points
            .iter()
            .copied()
            .filter(|p| !p.phases.is_empty())
            .collect();
        if !with_phases.is_empty() {
            let c = PhaseChart {
                app,
                subtitle: subtitle(set, Some(app), false),
                points: with_phases,
                cores,
            };
            charts.extend(chart::phases(
                &c,
                &charts_dir.join(format!("phases-{app}")),
            )?);
        }
    }
    if !latency.is_empty() {
        let runs = set
            .micro
            .iter()
            .filter(|m| m.bench == "ipl-bench" && m.status == Status::Ok)
            .count();
        let only_two = latency.iter().all(|l| l.points.len() <= 2);
        let c = LatencyChart {
            series: &latency,
            subtitle: format!(
                "ipl-bench, median of {runs} runs (bars min-max){} · {} cores · set {}",
                if only_two {
                    "; it reports the median and p99 only"
                } else {
                    ""
                },
                cores,
                set.meta.name
            ),
        };
        charts.extend(chart::latency(&c, &charts_dir.join("latency-ipl"))?);
    }
    let mut rendered = Rendered {
        table: text_table(&summary, cores),
        summary,
        latency,
        charts,
    };
    rendered.charts.sort();
    store::write_text(&dir.join(files::README), &readme(set, &rendered))?;
    Ok(rendered)
}
