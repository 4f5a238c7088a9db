//! From runs to points: medians with min and max over the repetitions, speedup against the
//! sequential baseline of the same set, efficiency, per-phase medians, the reference
//! comparison, and the latency percentiles of `ipl-bench`.

use crate::reference::{self, Reference};
use crate::store::{MicroRecord, RunRecord, Status, Version};
use crate::verify::{self, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
///
/// ```
/// use bench_harness::analysis::median;
/// assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
/// assert_eq!(median(&[]), None);
/// ```
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// The phases of the Barnes-Hut profile tables of seed 003 (appendix A), in their order.
pub const BARNES_HUT_PHASES: [&str; 8] = [
    "load_balancing",
    "tree_construction",
    "center_of_mass",
    "essential_tree_exchange",
    "center_of_mass_update",
    "force_computation",
    "position_update",
    "garbage_collection",
];

/// Sorts phase names for display: Barnes-Hut phases in the order of the seed's profile
/// tables, everything else after them in alphabetical order.
///
/// ```
/// let mut p = vec!["position_update".to_string(), "force_computation".into(), "zeta".into(), "load_balancing".into()];
/// bench_harness::analysis::order_phases(&mut p);
/// assert_eq!(p, ["load_balancing", "force_computation", "position_update", "zeta"]);
/// ```
pub fn order_phases(names: &mut [String]) {
    let rank = |n: &str| {
        BARNES_HUT_PHASES
            .iter()
            .position(|p| *p == n)
            .unwrap_or(BARNES_HUT_PHASES.len())
    };
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
}

/// One point of a sweep: an app's version at P processes of T threads, over its repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointSummary {
    /// The app.
    pub app: String,
    /// Sequential baseline or parallel version.
    pub version: Version,
    /// Processes P.
    pub nodes: u32,
    /// Threads per process T.
    pub threads: u32,
    /// Runs recorded for the point.
    pub runs: usize,
    /// Runs with status ok and the sequential baseline's answer (the ones the figures are
    /// over).
    pub ok: usize,
    /// Runs that ended well but with another answer than the sequential baseline: errors,
    /// left out of every figure.
    #[serde(default)]
    pub wrong: usize,
    /// Median seconds.
    pub median: Option<f64>,
    /// Fastest run.
    pub min: Option<f64>,
    /// Slowest run.
    pub max: Option<f64>,
    /// Sequential median / this median.
    pub speedup: Option<f64>,
    /// Speedup of the slowest run.
    pub speedup_min: Option<f64>,
    /// Speedup of the fastest run.
    pub speedup_max: Option<f64>,
    /// Speedup / (P x T).
    pub efficiency: Option<f64>,
    /// The speedup exceeds what the point's processors can give: P x T, or the machine's
    /// cores where P x T outnumbers them. Such a figure says more about the baseline or the
    /// timing (caches, load during the sequential runs) than about the parallel version.
    #[serde(default)]
    pub above_ideal: bool,
    /// Median CPU seconds of the point over the sequential median, for apps that report
    /// `cpu_seconds` (summed over processes): the cost of parallel execution in work, which
    /// stays meaningful when processes outnumber cores.
    #[serde(default)]
    pub cpu_ratio: Option<f64>,
    /// P x T exceeds the machine's cores.
    pub oversubscribed: bool,
    /// A published speedup for the same problem and processor count.
    pub reference: Option<Reference>,
    /// Speedup / reference speedup.
    pub vs_reference: Option<f64>,
    /// Every ok run gave the sequential baseline's answer: the same checksum, or for apps
    /// that are not bit-identical beyond one process the same figures within the app's
    /// bounds (`None`: nothing compared).
    pub checksum_matches: Option<bool>,
    /// Median seconds per phase.
    pub phases: BTreeMap<String, f64>,
    /// Problems with the point's runs, for people.
    pub note: Option<String>,
}

impl PointSummary {
    /// The most speedup the point's processors can give: P x T, or the machine's cores where
    /// P x T outnumbers them.
    pub fn ideal(&self, cores: usize) -> f64 {
        (self.nodes as u64 * self.threads as u64).min(cores.max(1) as u64) as f64
    }

    /// The point's label as in tables: `seq`, or `P=2 T=1`.
    pub fn label(&self) -> String {
        match self.version {
            Version::Sequential => "seq".into(),
            Version::Parallel => format!("P={} T={}", self.nodes, self.threads),
        }
    }
}

fn app_order(runs: &[RunRecord]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    runs.iter()
        .filter(|r| seen.insert(r.app.as_str()))
        .map(|r| r.app.clone())
        .collect()
}

fn note_for(rs: &[(&RunRecord, Option<&Verdict>)]) -> Option<String> {
    let mut counts: BTreeMap<&str, (usize, Option<&str>)> = BTreeMap::new();
    for (r, v) in rs {
        let (name, why) = match (r.status, v) {
            (Status::Ok, Some(Verdict::Differs(why))) => ("wrong result", Some(why.as_str())),
            (Status::Ok, _) => continue,
            (status, _) => (status.name(), r.note.as_deref()),
        };
        let e = counts.entry(name).or_insert((0, None));
        e.0 += 1;
        if e.1.is_none() {
            e.1 = why;
        }
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(status, (n, note))| match note {
            Some(note) => format!("{n} of {} {status} ({note})", rs.len()),
            None => format!("{n} of {} {status}", rs.len()),
        })
        .collect();
    if let Some(why) = rs.iter().find_map(|(r, v)| match (r.status, v) {
        (Status::Ok, Some(Verdict::Unverified(why))) => Some(why),
        _ => None,
    }) {
        parts.push(format!("answer not verified: {why}"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The verdict on every run of `runs` (in order): `None` for runs that did not end well,
/// otherwise whether it gave the answer of its app's sequential baseline in the same set (the
/// first successful sequential run; see [`crate::verify`]).
pub fn verdicts(runs: &[RunRecord]) -> Vec<Option<Verdict>> {
    let mut baseline: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        if r.version == Version::Sequential && r.status == Status::Ok {
            baseline.entry(r.app.as_str()).or_insert(i);
        }
    }
    runs.iter()
        .enumerate()
        .map(|(i, r)| {
            if r.status != Status::Ok {
                return None;
            }
            Some(match baseline.get(r.app.as_str()) {
                Some(&b) if b == i => Verdict::Agrees,
                Some(&b) => verify::verdict(&runs[b], r),
                None => Verdict::Unverified("no successful sequential run to compare with".into()),
            })
        })
        .collect()
}

/// Summarizes the runs of a set into points, apps in the order they ran, each app's
/// sequential baseline first and then its parallel points by P and T. `cores` decides which
/// points are oversubscribed.
pub fn summarize(runs: &[RunRecord], cores: usize) -> Vec<PointSummary> {
    let verdicts = verdicts(runs);
    let good = |i: usize| {
        runs[i].status == Status::Ok && !matches!(verdicts[i], Some(Verdict::Differs(_)))
    };
    let mut out = Vec::new();
    // Grouped in one pass each: a set of many apps or points must not take their product.
    let mut by_app: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, r) in runs.iter().enumerate() {
        by_app.entry(r.app.as_str()).or_default().push(i);
    }
    for app in app_order(runs) {
        let mine = by_app.remove(app.as_str()).unwrap_or_default();
        let mut points: BTreeMap<(Version, u32, u32), Vec<usize>> = BTreeMap::new();
        for &i in &mine {
            let r = &runs[i];
            points
                .entry((r.version, r.nodes, r.threads))
                .or_default()
                .push(i);
        }
        let seq_ok: Vec<&RunRecord> = mine
            .iter()
            .copied()
            .filter(|&i| runs[i].version == Version::Sequential && good(i))
            .map(|i| &runs[i])
            .collect();
        let seq_median = median(
            &seq_ok
                .iter()
                .map(|r| r.seconds_measured())
                .collect::<Vec<_>>(),
        );
        let seq_cpu = median(
            &seq_ok
                .iter()
                .filter_map(|r| cpu_seconds(r))
                .collect::<Vec<_>>(),
        );
        let parameters = mine
            .iter()
            .find_map(|&i| {
                runs[i]
                    .result
                    .as_ref()
                    .and_then(|v| v.get("parameters"))
                    .cloned()
            })
            .unwrap_or(serde_json::Value::Null);
        for ((version, nodes, threads), idx) in points {
            let ok: Vec<&RunRecord> = idx
                .iter()
                .copied()
                .filter(|&i| good(i))
                .map(|i| &runs[i])
                .collect();
            let wrong = idx
                .iter()
                .filter(|&&i| matches!(verdicts[i], Some(Verdict::Differs(_))))
                .count();
            let compared = idx
                .iter()
                .filter(|&&i| matches!(verdicts[i], Some(Verdict::Agrees | Verdict::Differs(_))))
                .count();
            let times: Vec<f64> = ok.iter().map(|r| r.seconds_measured()).collect();
            let med = median(&times);
            let min = times.iter().copied().reduce(f64::min);
            let max = times.iter().copied().reduce(f64::max);
            let ratio = |t: Option<f64>| match (seq_median, t) {
                (Some(s), Some(t)) if t > 0.0 => Some(s / t),
                _ => None,
            };
            let speedup = ratio(med);
            let cpus = nodes as u64 * threads as u64;
            let reference = match version {
                Version::Parallel => reference::lookup(&app, &parameters, nodes, threads),
                Version::Sequential => None,
            };
            let vs_reference = match (&reference, speedup) {
                (Some(r), Some(s)) if r.speedup > 0.0 => Some(s / r.speedup),
                _ => None,
            };
            let cpu = median(&ok.iter().filter_map(|r| cpu_seconds(r)).collect::<Vec<_>>());
            let cpu_ratio = match (cpu, seq_cpu) {
                (Some(c), Some(s)) if s > 0.0 => Some(c / s),
                _ => None,
            };
            let mut phase_values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            for r in &ok {
                for (k, v) in &r.seconds {
                    phase_values.entry(k.clone()).or_default().push(*v);
                }
            }
            let rs: Vec<(&RunRecord, Option<&Verdict>)> = idx
                .iter()
                .map(|&i| (&runs[i], verdicts[i].as_ref()))
                .collect();
            let mut point = PointSummary {
                app: app.clone(),
                version,
                nodes,
                threads,
                runs: idx.len(),
                ok: ok.len(),
                wrong,
                median: med,
                min,
                max,
                speedup,
                speedup_min: ratio(max),
                speedup_max: ratio(min),
                efficiency: speedup.map(|s| s / cpus as f64),
                above_ideal: false,
                cpu_ratio,
                oversubscribed: cpus > cores as u64,
                reference,
                vs_reference,
                checksum_matches: (compared > 0).then_some(wrong == 0),
                phases: phase_values
                    .into_iter()
                    .filter_map(|(k, v)| median(&v).map(|m| (k, m)))
                    .collect(),
                note: note_for(&rs),
            };
            point.above_ideal = point.speedup.is_some_and(|s| s > point.ideal(cores));
            out.push(point);
        }
    }
    out
}

/// The CPU seconds an app reported for a run (`cpu_seconds` of its result line), if any.
fn cpu_seconds(r: &RunRecord) -> Option<f64> {
    let c = r.result.as_ref()?.get("cpu_seconds")?.as_f64()?;
    if (0.0..=crate::store::MAX_SECONDS).contains(&c) {
        Some(c)
    } else {
        // A damaged or foreign result line: no figure, rather than a ratio from it.
        tracing::warn!(app = %r.app, cpu_seconds = c, "ignoring an impossible cpu_seconds");
        None
    }
}

/// Latency percentiles of one transport in `ipl-bench`'s figures, over its repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    /// The transport, as `ipl-bench` names it (`ipl over tcp`, `raw tcp, busy polling`, ...).
    pub name: String,
    /// (percentile, median µs, min µs, max µs over the repetitions), by percentile.
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// The percentile a key of `ipl-bench`'s latency objects stands for: `median` is 50, `pNN`
/// is NN (`p99.9` is 99.9); other keys are not percentiles.
pub fn percentile_of(key: &str) -> Option<f64> {
    match key {
        "median" => Some(50.0),
        "min" => Some(0.0),
        k => k
            .strip_prefix('p')
            .and_then(|v| v.replace('_', ".").parse::<f64>().ok())
            .filter(|p| (0.0..=100.0).contains(p)),
    }
}

/// Reads the round-trip latency figures from the `ipl-bench` runs of a set: every
/// `rtt_us_<transport>` object, with every key that names a percentile. Today's `ipl-bench`
/// reports the median and p99 only; more percentiles appear here as soon as it reports them.
pub fn latency_series(micro: &[MicroRecord]) -> Vec<LatencySeries> {
    let mut values: BTreeMap<String, BTreeMap<u64, (f64, Vec<f64>)>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in micro
        .iter()
        .filter(|r| r.bench == "ipl-bench" && r.status == Status::Ok)
    {
        let Some(obj) = r.json.as_ref().and_then(|j| j.as_object()) else {
            continue;
        };
        for (key, v) in obj {
            let Some(transport) = key.strip_prefix("rtt_us_") else {
                continue;
            };
            let name = transport
                .split('_')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            if !order.contains(&name) {
                order.push(name.clone());
            }
            let Some(pcts) = v.as_object() else { continue };
            for (k, x) in pcts {
                let us = x.as_f64().filter(|&us| {
                    // A log axis has no place for 0 or less, nor a round trip beyond a year.
                    let sane = us > 0.0 && us <= crate::store::MAX_SECONDS * 1e6;
                    if !sane {
                        tracing::warn!(key, percentile = %k, us, "ignoring an impossible latency");
                    }
                    sane
                });
                if let (Some(p), Some(us)) = (percentile_of(k), us) {
                    values
                        .entry(name.clone())
                        .or_default()
                        .entry((p * 1000.0).round() as u64)
                        .or_insert((p, Vec::new()))
                        .1
                        .push(us);
                }
            }
        }
    }
    order
        .into_iter()
        .filter_map(|name| {
            let m = values.remove(&name)?;
            let points = m
                .into_values()
                .filter_map(|(p, v)| {
                    let med = median(&v)?;
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    Some((p, med, lo, hi))
                })
                .collect();
            Some(LatencySeries { name, points })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Exit;

    fn run(version: Version, nodes: u32, threads: u32, secs: f64, status: Status) -> RunRecord {
        RunRecord {
            app: "barnes-hut".into(),
            version,
            nodes,
            threads,
            repeat: 0,
            status,
            exit: Exit::Code(0),
            command: String::new(),
            wall_seconds: secs + 0.1,
            total_seconds: Some(secs),
            seconds: [("force".to_string(), secs * 0.9)].into_iter().collect(),
            checksum: Some(if nodes == 4 { "b" } else { "a" }.into()),
            reported: None,
            oversubscribed: false,
            note: (status != Status::Ok).then(|| "why".to_string()),
            log: String::new(),
            result: Some(serde_json::json!({"parameters": {"n": 3000}})),
        }
    }

    #[test]
    fn cpu_ratio_compares_reported_cpu_seconds_with_the_sequential_ones() {
        use Status::Ok as K;
        use Version::*;
        let with_cpu = |version, nodes, secs, cpu: Option<f64>| {
            let mut r = run(version, nodes, 1, secs, K);
            if let Some(c) = cpu {
                r.result = Some(serde_json::json!({"parameters": {"n": 3000}, "cpu_seconds": c}));
            }
            r
        };
        let runs = vec![
            with_cpu(Sequential, 1, 10.0, Some(9.0)),
            with_cpu(Sequential, 1, 11.0, Some(10.0)),
            with_cpu(Sequential, 1, 12.0, Some(11.0)),
            with_cpu(Parallel, 4, 6.0, Some(11.0)),
            with_cpu(Parallel, 4, 6.0, Some(12.0)),
            with_cpu(Parallel, 4, 6.0, Some(13.0)),
            with_cpu(Parallel, 2, 6.0, None),
        ];
        let s = summarize(&runs, 2);
        assert_eq!(s[0].cpu_ratio, Some(1.0));
        let p4 = s.iter().find(|p| p.nodes == 4).unwrap();
        assert!((p4.cpu_ratio.unwrap() - 1.2).abs() < 1e-12);
        // No figure where the app reports none.
        assert_eq!(s.iter().find(|p| p.nodes == 2).unwrap().cpu_ratio, None);
        // Nor from impossible figures: they are left out, not divided.
        let runs = vec![
            with_cpu(Sequential, 1, 10.0, Some(-5.0)),
            with_cpu(Sequential, 1, 10.0, Some(10.0)),
            with_cpu(Parallel, 4, 6.0, Some(1e300)),
            with_cpu(Parallel, 4, 6.0, Some(12.0)),
        ];
        let s = summarize(&runs, 2);
        assert_eq!(s[0].cpu_ratio, Some(1.0));
        let p4 = s.iter().find(|p| p.nodes == 4).unwrap();
        assert!((p4.cpu_ratio.unwrap() - 1.2).abs() < 1e-12, "{p4:?}");
    }

    #[test]
    fn speedup_efficiency_and_bars() {
        use Status::Ok as K;
        use Version::*;
        let runs = vec![
            run(Sequential, 1, 1, 8.0, K),
            run(Sequential, 1, 1, 10.0, K),
            run(Sequential, 1, 1, 12.0, K),
            run(Parallel, 2, 1, 5.0, K),
            run(Parallel, 2, 1, 4.0, K),
            run(Parallel, 2, 1, 100.0, Status::TimedOut),
            run(Parallel, 4, 1, 2.5, K),
            run(Parallel, 2, 2, 4.0, K),
        ];
        let s = summarize(&runs, 2);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].label(), "seq");
        assert_eq!(s[0].median, Some(10.0));
        assert_eq!(s[0].speedup, Some(1.0));
        let p2 = &s[1];
        assert_eq!((p2.nodes, p2.threads, p2.runs, p2.ok), (2, 1, 3, 2));
        assert_eq!(p2.median, Some(4.5));
        assert!((p2.speedup.unwrap() - 10.0 / 4.5).abs() < 1e-12);
        assert_eq!(p2.speedup_min, Some(2.0));
        assert_eq!(p2.speedup_max, Some(2.5));
        assert!((p2.efficiency.unwrap() - 10.0 / 4.5 / 2.0).abs() < 1e-12);
        assert!(!p2.oversubscribed);
        // Barnes-Hut beyond P = 1 is compared within bounds, on figures these lines lack.
        assert_eq!(p2.checksum_matches, None);
        assert_eq!(
            p2.note.as_deref(),
            Some(
                "1 of 3 timed-out (why); answer not verified: the sequential baseline reports \
                 no bodies, total_mass, energy_start/energy_end, center_of_mass/displacement_rms \
                 to compare within bounds"
            )
        );
        assert_eq!(p2.reference.as_ref().unwrap().speedup, 1.91);
        assert!((p2.vs_reference.unwrap() - 10.0 / 4.5 / 1.91).abs() < 1e-12);
        assert_eq!(p2.phases["force"], 4.5 * 0.9);
        assert!(p2.above_ideal, "2.22 on P x T = 2");
        let p22 = &s[2];
        assert_eq!((p22.nodes, p22.threads), (2, 2));
        assert!(p22.oversubscribed);
        assert_eq!(p22.efficiency, Some(10.0 / 4.0 / 4.0));
        // 2.5 is below P x T = 4 but above the machine's 2 cores.
        assert!(p22.above_ideal);
        let p4 = &s[3];
        assert!(p4.oversubscribed);
        assert_eq!(p4.checksum_matches, None);
        assert_eq!(p4.reference.as_ref().unwrap().speedup, 3.55);
        assert!(!s[0].above_ideal, "the baseline's own speedup is 1");

        // An app that is bit-identical on any P: checksums are compared everywhere, and a run
        // with another checksum is an error, left out of every figure.
        let sor: Vec<RunRecord> = runs
            .iter()
            .cloned()
            .map(|mut r| {
                r.app = "sor".into();
                r
            })
            .collect();
        let s = summarize(&sor, 2);
        assert_eq!(s[1].checksum_matches, Some(true));
        assert_eq!(s[1].wrong, 0);
        let p4 = &s[3];
        assert_eq!((p4.nodes, p4.runs, p4.ok, p4.wrong), (4, 1, 0, 1));
        assert_eq!(p4.checksum_matches, Some(false));
        assert_eq!((p4.median, p4.speedup, p4.efficiency), (None, None, None));
        assert_eq!(
            p4.note.as_deref(),
            Some("1 of 1 wrong result (checksum b, sequential a)")
        );
    }

    #[test]
    fn wrong_runs_leave_the_figures_and_right_ones_stay() {
        use Version::*;
        let mut runs: Vec<RunRecord> = [
            (Sequential, 1, 8.0, "a"),
            (Sequential, 1, 8.0, "a"),
            (Parallel, 2, 4.0, "a"),
            (Parallel, 2, 0.5, "corrupt"),
            (Parallel, 2, 4.4, "a"),
        ]
        .into_iter()
        .map(|(v, n, t, c)| {
            let mut r = RunRecord::ok("sor", v, n, 1, t);
            r.checksum = Some(c.into());
            r
        })
        .collect();
        let v = verdicts(&runs);
        assert_eq!(v[0], Some(Verdict::Agrees));
        assert!(matches!(v[3], Some(Verdict::Differs(_))));
        let s = summarize(&runs, 8);
        let p2 = &s[1];
        assert_eq!((p2.runs, p2.ok, p2.wrong), (3, 2, 1));
        // The fast wrong run is not a speedup: the median is over the right ones.
        assert_eq!(p2.median, Some(4.2));
        assert_eq!(p2.min, Some(4.0));
        assert!((p2.speedup.unwrap() - 8.0 / 4.2).abs() < 1e-12);
        assert!(!p2.above_ideal);
        // A failed run has no verdict.
        runs[4].status = Status::Failed;
        assert_eq!(verdicts(&runs)[4], None);
    }

    #[test]
    fn no_baseline_no_speedup() {
        let runs = vec![
            run(Version::Sequential, 1, 1, 8.0, Status::Failed),
            run(Version::Parallel, 2, 1, 4.0, Status::Ok),
        ];
        let s = summarize(&runs, 8);
        assert_eq!(s[0].median, None);
        assert_eq!(s[1].median, Some(4.0));
        assert_eq!(s[1].speedup, None);
        assert_eq!(s[1].efficiency, None);
    }

    #[test]
    fn latency_from_ipl_bench_json() {
        let rec = |median: f64| MicroRecord {
            bench: "ipl-bench".into(),
            repeat: 0,
            status: Status::Ok,
            exit: Exit::Code(0),
            command: String::new(),
            wall_seconds: 1.0,
            output: String::new(),
            json: Some(serde_json::json!({
                "rtt_us_ipl_over_tcp": {"median": median, "p99": median * 2.0},
                "rtt_us_raw_tcp__busy_polling": {"median": 5.0, "p99": 9.0, "p99_9": 20.0},
                "throughput_ratio": 0.9
            })),
            note: None,
        };
        let s = latency_series(&[rec(10.0), rec(14.0), rec(12.0)]);
        assert_eq!(s.len(), 2);
        let ipl = s.iter().find(|x| x.name == "ipl over tcp").unwrap();
        assert_eq!(
            ipl.points,
            vec![(50.0, 12.0, 10.0, 14.0), (99.0, 24.0, 20.0, 28.0)]
        );
        let raw = s.iter().find(|x| x.name == "raw tcp busy polling").unwrap();
        assert_eq!(raw.points.len(), 3);
        assert_eq!(raw.points[2].0, 99.9);
        // Round trips of 0 or less, or of more than a year, have no place on the log axis.
        let mut bad = rec(10.0);
        bad.json = Some(serde_json::json!({
            "rtt_us_ipl_over_tcp": {"median": 0.0, "p99": -3.0, "p99_9": 1e300, "p90": 7.0}
        }));
        let s = latency_series(&[bad]);
        assert_eq!(s[0].points, vec![(90.0, 7.0, 7.0, 7.0)]);
        assert_eq!(percentile_of("p90"), Some(90.0));
        assert_eq!(percentile_of("mean"), None);
    }
}
