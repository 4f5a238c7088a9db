//! The traces of one run on one clock, and what the charts show of them: each process's (and
//! each satin worker's) states over time, each process's supersteps split into computation,
//! communication and waiting, and who stole from whom.

use super::read::{arg, arg_str, whole, ProcessTrace, Span};
use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a process (or a worker) was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// bsp: computing between syncs.
    Compute,
    /// bsp: sending the superstep's packets.
    Send,
    /// bsp: in the barrier, or waiting for the others' data.
    Wait,
    /// satin: a worker running jobs.
    Busy,
    /// satin: a worker looking for work.
    Idle,
}

impl State {
    /// Every state, in legend order.
    pub const ALL: [State; 5] = [
        State::Compute,
        State::Send,
        State::Wait,
        State::Busy,
        State::Idle,
    ];

    /// The legend's name.
    pub fn name(self) -> &'static str {
        match self {
            State::Compute => "compute",
            State::Send => "send",
            State::Wait => "wait in sync",
            State::Busy => "running jobs",
            State::Idle => "idle",
        }
    }
}

/// A stretch of one state, in microseconds since the start of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// The state.
    pub state: State,
    /// Its beginning.
    pub start: f64,
    /// Its end.
    pub end: f64,
}

/// One row of the timeline: a process's bsp thread, or a satin worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `rank R`, or `rank R · wI` for worker I.
    pub label: String,
    /// Its states, in time order, not overlapping.
    pub segments: Vec<Segment>,
}

/// One superstep of one process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Step {
    /// The superstep.
    pub step: u64,
    /// Microseconds computing (the compute phase less its collectives' sends and receives).
    pub compute_us: f64,
    /// Microseconds sending at sync, plus the collectives' sends and receives.
    pub comm_us: f64,
    /// Microseconds in the sync but not sending: the barrier and waiting for data.
    pub wait_us: f64,
    /// Bytes the superstep sent to other processes.
    pub bytes: f64,
}

/// Who stole from whom, between the processes of a run (the diagonal: local steals between
/// the workers of one process).
#[derive(Debug, Clone, PartialEq)]
pub struct Steals {
    /// Row and column labels (`rank R`), in rank order.
    pub labels: Vec<String>,
    /// `count[thief][victim]`: jobs stolen.
    pub count: Vec<Vec<u64>>,
    /// `bytes[thief][victim]`: bytes of the stolen jobs.
    pub bytes: Vec<Vec<u64>>,
    /// Remote steal requests that came back empty, per thief.
    pub failed: Vec<u64>,
}

/// The traces of one run, on the clock of its registry.
#[derive(Debug, Clone)]
pub struct Run {
    /// The processes, in rank order (processes without a rank last).
    pub processes: Vec<ProcessTrace>,
    /// The wall clock at time 0 of the merged trace, in microseconds since the Unix epoch.
    pub t0_unix_us: f64,
}

impl Run {
    /// Puts the traces of one run on one clock. Refuses traces of different runs (two
    /// processes with the same rank, or different pools).
    pub fn new(mut processes: Vec<ProcessTrace>) -> Result<Run> {
        processes.sort_by_key(|p| (p.rank.is_none(), p.rank, p.path.clone()));
        for w in processes.windows(2) {
            if w[0].rank.is_some() && w[0].rank == w[1].rank {
                return Err(mixed(
                    &w[1].path,
                    format!(
                        "rank {} is also in {}",
                        w[0].rank.unwrap_or_default(),
                        w[0].path.display()
                    ),
                ));
            }
        }
        let pools: Vec<(&str, &PathBuf)> = processes
            .iter()
            .filter_map(|p| p.pool.as_deref().map(|pool| (pool, &p.path)))
            .collect();
        if let Some((pool, path)) = pools.iter().find(|(pool, _)| *pool != pools[0].0) {
            return Err(mixed(
                path,
                format!(
                    "its pool '{pool}' is not '{}' of {}",
                    pools[0].0,
                    pools[0].1.display()
                ),
            ));
        }
        let t0_unix_us = processes
            .iter()
            .map(|p| p.origin_unix_us + offset(p))
            .fold(f64::INFINITY, f64::min);
        Ok(Run {
            processes,
            t0_unix_us,
        })
    }

    /// Time `ts` of process `i`'s file on the run's clock (microseconds since its start).
    pub fn time(&self, i: usize, ts: f64) -> f64 {
        let p = &self.processes[i];
        p.origin_unix_us + offset(p) + ts - self.t0_unix_us
    }

    /// The process id of process `i` in the merged trace: its rank, else one past every rank.
    pub fn pid(&self, i: usize) -> u64 {
        match self.processes[i].rank {
            Some(r) => u64::from(r),
            None => 1 << 32 | i as u64,
        }
    }

    /// The end of the run on its clock.
    pub fn end(&self) -> f64 {
        (0..self.processes.len())
            .map(|i| self.time(i, self.processes[i].end))
            .fold(0.0, f64::max)
    }

    /// The rows of the timeline: per process its bsp threads, then its satin workers.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            let bsp_threads: Vec<u64> = {
                let mut t: Vec<u64> = p
                    .spans
                    .iter()
                    .filter(|s| bsp_state(s).is_some())
                    .map(|s| s.tid)
                    .collect();
                t.sort_unstable();
                t.dedup();
                t
            };
            for &tid in &bsp_threads {
                let spans: Vec<&Span> = p
                    .spans
                    .iter()
                    .filter(|s| s.tid == tid && bsp_state(s).is_some())
                    .collect();
                let label = if bsp_threads.len() == 1 {
                    p.label()
                } else {
                    format!("{} · {}", p.label(), thread_name(p, tid))
                };
                rows.push(Row {
                    label,
                    segments: nested_states(&spans)
                        .into_iter()
                        .map(|s| Segment {
                            start: self.time(i, s.start),
                            end: self.time(i, s.end),
                            ..s
                        })
                        .collect(),
                });
            }
            let Some(start) = p.marks.iter().find(|m| m.name == "satin.start") else {
                continue;
            };
            let workers = arg(&start.args, "workers").unwrap_or(0.0) as usize;
            for w in 0..workers.min(MAX_WORKER_ROWS) {
                let name = format!("satin-worker-{w}");
                let tid = p.threads.iter().find(|(_, n)| **n == name).map(|(t, _)| *t);
                let idle: Vec<&Span> = p
                    .spans
                    .iter()
                    .filter(|s| Some(s.tid) == tid && s.name == "satin.idle")
                    .collect();
                rows.push(Row {
                    label: format!("{} · w{w}", p.label()),
                    segments: worker_states(start.ts, p.end, &idle)
                        .into_iter()
                        .map(|s| Segment {
                            start: self.time(i, s.start),
                            end: self.time(i, s.end),
                            ..s
                        })
                        .collect(),
                });
            }
        }
        rows
    }

    /// Each process's supersteps of the whole machine, in order (processes without any are
    /// left out), with its label.
    pub fn supersteps(&self) -> Vec<(String, Vec<Step>)> {
        let mut out = Vec::new();
        for p in &self.processes {
            let mut steps: BTreeMap<u64, Step> = BTreeMap::new();
            let world_syncs: Vec<&Span> = p
                .spans
                .iter()
                .filter(|s| s.name == "bsp.sync" && arg(&s.args, "comm") == Some(0.0))
                .collect();
            for sync in &world_syncs {
                let Some(step) = arg(&sync.args, "step") else {
                    continue;
                };
                let st = steps.entry(step as u64).or_default();
                st.step = step as u64;
                st.bytes = arg(&sync.args, "bytes").unwrap_or(0.0);
                let sending: f64 = p
                    .spans
                    .iter()
                    .filter(|s| {
                        s.name == "bsp.send"
                            && s.tid == sync.tid
                            && s.start >= sync.start
                            && s.end <= sync.end
                    })
                    .map(|s| s.end - s.start)
                    .sum();
                st.comm_us += sending;
                st.wait_us += (sync.end - sync.start - sending).max(0.0);
            }
            for c in p.spans.iter().filter(|s| s.name == "bsp.compute") {
                let Some(step) = arg(&c.args, "step") else {
                    continue;
                };
                // The last compute phase has no sync after it: it is no superstep.
                if let Some(st) = steps.get_mut(&(step as u64)) {
                    let rounds = arg(&c.args, "collective_us").unwrap_or(0.0);
                    let length = c.end - c.start;
                    st.compute_us += (length - rounds).max(0.0);
                    st.comm_us += rounds.min(length);
                }
            }
            if !steps.is_empty() {
                out.push((p.label(), steps.into_values().collect()));
            }
        }
        out
    }

    /// Who stole from whom, if any process ran satin.
    pub fn steals(&self) -> Option<Steals> {
        if !self
            .processes
            .iter()
            .any(|p| p.marks.iter().any(|m| m.name == "satin.start"))
        {
            return None;
        }
        let n = self.processes.len();
        let index: BTreeMap<u32, usize> = self
            .processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.rank.map(|r| (r, i)))
            .collect();
        let mut s = Steals {
            labels: self.processes.iter().map(ProcessTrace::label).collect(),
            count: vec![vec![0; n]; n],
            bytes: vec![vec![0; n]; n],
            failed: vec![0; n],
        };
        for (i, p) in self.processes.iter().enumerate() {
            for m in p.marks.iter().filter(|m| m.name == "satin.steal") {
                let success = m.args.get("success") == Some(&Value::Bool(true));
                let victim = match arg_str(&m.args, "kind") {
                    Some("remote") => arg(&m.args, "victim")
                        .and_then(|v| whole(v, u32::MAX.into()))
                        .and_then(|v| index.get(&(v as u32)).copied()),
                    _ => Some(i),
                };
                match (success, victim) {
                    (true, Some(v)) => {
                        s.count[i][v] += 1;
                        // Figures past a u64 (a damaged trace) saturate the sum rather than
                        // overflow it.
                        let bytes = arg(&m.args, "bytes").unwrap_or(0.0) as u64;
                        s.bytes[i][v] = s.bytes[i][v].saturating_add(bytes);
                    }
                    // A victim whose trace is missing still counts for the thief.
                    (true, None) => {}
                    (false, _) => s.failed[i] += 1,
                }
            }
        }
        Some(s)
    }

    /// The merged trace: Chrome's JSON object format, a process per rank (named and sorted),
    /// complete events for spans, numbers as numbers, and the satin counts also as counter
    /// tracks.
    pub fn merged(&self) -> Value {
        let mut events: Vec<Value> = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            let pid = self.pid(i);
            events.push(json!({
                "ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                "args": {"name": format!("{} ({}, pid {})", p.label(), p.host, p.os_pid)},
            }));
            events.push(json!({
                "ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                "args": {"sort_index": pid},
            }));
            for (tid, name) in &p.threads {
                events.push(json!({
                    "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                    "args": {"name": name},
                }));
            }
            for s in &p.spans {
                events.push(json!({
                    "ph": "X", "name": s.name, "cat": category(&s.name), "pid": pid,
                    "tid": s.tid, "ts": self.time(i, s.start), "dur": s.end - s.start,
                    "args": s.args,
                }));
            }
            for m in &p.marks {
                let ts = self.time(i, m.ts);
                events.push(json!({
                    "ph": "i", "s": "t", "name": m.name, "cat": category(&m.name), "pid": pid,
                    "tid": m.tid, "ts": ts, "args": m.args,
                }));
                if m.name == "satin.counts" {
                    let counts: serde_json::Map<String, Value> = m
                        .args
                        .iter()
                        .filter(|(k, v)| *k != "interval_us" && v.is_number())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    events.push(json!({
                        "ph": "C", "name": "satin counts per interval", "pid": pid,
                        "tid": m.tid, "ts": ts, "args": counts,
                    }));
                }
            }
        }
        let clocks: Vec<Value> = self
            .processes
            .iter()
            .map(|p| {
                json!({
                    "file": p.path.display().to_string(),
                    "rank": p.rank,
                    "host": p.host,
                    "offset_us": p.clock.offset_us,
                    "rtt_us": p.clock.rtt_us,
                    "same_host": p.clock.same_host,
                })
            })
            .collect();
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {
                "merged_by": "bench-harness timeline",
                "t0_unix_us": self.t0_unix_us,
                "processes": clocks,
            },
        })
    }
}

/// Worker rows drawn per process at most (a runtime of hundreds of threads would make rows
/// thinner than a pixel).
pub const MAX_WORKER_ROWS: usize = 64;

fn mixed(path: &std::path::Path, why: String) -> Error {
    Error::BadTrace {
        path: path.to_path_buf(),
        reason: format!("{why}: the traces are of more than one run; give one run's directory"),
    }
}

/// The offset that puts a process's times on the registry's clock: none on its host.
fn offset(p: &ProcessTrace) -> f64 {
    if p.clock.same_host {
        0.0
    } else {
        p.clock.offset_us
    }
}

fn category(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

fn thread_name(p: &ProcessTrace, tid: u64) -> String {
    p.threads
        .get(&tid)
        .cloned()
        .unwrap_or_else(|| format!("thread {tid}"))
}

/// The state a bsp span stands for: a sync is waiting wherever it is not sending (between its
/// send and wait spans, too: the thread was descheduled there).
fn bsp_state(s: &Span) -> Option<State> {
    match s.name.as_str() {
        "bsp.compute" => Some(State::Compute),
        "bsp.send" => Some(State::Send),
        "bsp.wait" | "bsp.sync" => Some(State::Wait),
        _ => None,
    }
}

/// The states of one thread from its bsp spans, which nest: the innermost one holds.
fn nested_states(spans: &[&Span]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut emit = |state: State, start: f64, end: f64| {
        if end > start {
            out.push(Segment { state, start, end });
        }
    };
    // (state, end) of the open spans, innermost last; the time up to which states are out.
    let mut stack: Vec<(State, f64)> = Vec::new();
    let mut cursor = f64::NEG_INFINITY;
    for s in spans {
        let Some(state) = bsp_state(s) else { continue };
        while let Some(&(top, end)) = stack.last() {
            if end > s.start {
                break;
            }
            emit(top, cursor, end);
            cursor = cursor.max(end);
            stack.pop();
        }
        if let Some(&(top, _)) = stack.last() {
            emit(top, cursor, s.start);
        }
        cursor = s.start;
        stack.push((state, s.end));
    }
    while let Some((top, end)) = stack.pop() {
        emit(top, cursor, end);
        cursor = cursor.max(end);
    }
    out
}

/// A worker's states from `start` to `end`: idle in its idle spans, running jobs between.
fn worker_states(start: f64, end: f64, idle: &[&Span]) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut cursor = start;
    for s in idle {
        let (a, b) = (s.start.max(cursor), s.end.min(end));
        if a > cursor {
            out.push(Segment {
                state: State::Busy,
                start: cursor,
                end: a,
            });
        }
        if b > a {
            out.push(Segment {
                state: State::Idle,
                start: a,
                end: b,
            });
        }
        cursor = cursor.max(b);
    }
    if end > cursor {
        out.push(Segment {
            state: State::Busy,
            start: cursor,
            end,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::read::parse;
    use std::path::Path;

    fn span(name: &str, start: f64, end: f64) -> Span {
        Span {
            name: name.into(),
            tid: 0,
            start,
            end,
            ended: true,
            args: Default::default(),
        }
    }

    #[test]
    fn the_innermost_span_gives_the_state() {
        let spans = [
            span("bsp.compute", 0.0, 10.0),
            // A group's sync inside the compute phase.
            span("bsp.wait", 4.0, 6.0),
            span("bsp.sync", 10.0, 20.0),
            span("bsp.send", 10.0, 12.0),
            span("bsp.wait", 12.0, 20.0),
        ];
        let refs: Vec<&Span> = spans.iter().collect();
        let got: Vec<(State, f64, f64)> = nested_states(&refs)
            .iter()
            .map(|s| (s.state, s.start, s.end))
            .collect();
        assert_eq!(
            got,
            [
                (State::Compute, 0.0, 4.0),
                (State::Wait, 4.0, 6.0),
                (State::Compute, 6.0, 10.0),
                (State::Send, 10.0, 12.0),
                (State::Wait, 12.0, 20.0),
            ]
        );
    }

    #[test]
    fn workers_are_busy_between_idle_periods() {
        let idle = [span("satin.idle", 2.0, 3.0), span("satin.idle", 5.0, 9.0)];
        let refs: Vec<&Span> = idle.iter().collect();
        let got: Vec<(State, f64, f64)> = worker_states(1.0, 8.0, &refs)
            .iter()
            .map(|s| (s.state, s.start, s.end))
            .collect();
        assert_eq!(
            got,
            [
                (State::Busy, 1.0, 2.0),
                (State::Idle, 2.0, 3.0),
                (State::Busy, 3.0, 5.0),
                (State::Idle, 5.0, 8.0),
            ]
        );
    }

    fn process(rank: u32, unix: u64, offset: i64, same_host: bool) -> ProcessTrace {
        parse(
            Path::new(&format!("r{rank}.trace.json")),
            &json!([
                {"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": unix.to_string()}},
                {"ph": "i", "name": "ipl.join", "ts": 1, "args": {
                    "rank": rank.to_string(), "pool": "p",
                    "clock_offset_us": offset.to_string(), "same_host": same_host.to_string()}},
                {"ph": "i", "name": "satin.start", "ts": 2, "args": {"workers": "1"}},
                {"ph": "i", "name": "satin.steal", "ts": 3, "args": {
                    "kind": "remote", "thief": rank.to_string(), "victim": "0",
                    "success": "true", "bytes": "100"}},
                {"ph": "i", "name": "satin.steal", "ts": 4, "args": {
                    "kind": "local", "thief": "0", "victim": "1", "success": "true", "bytes": "0"}},
            ]),
        )
        .unwrap()
    }

    #[test]
    fn clocks_are_lined_up_and_steals_counted() {
        // Rank 1 is on another host whose clock runs 500 us behind the registry's.
        let run = Run::new(vec![
            process(1, 10_000, 500, false),
            process(0, 10_200, 0, true),
        ])
        .unwrap();
        assert_eq!(run.processes[0].rank, Some(0));
        assert_eq!(run.t0_unix_us, 10_200.0);
        assert_eq!(run.time(1, 0.0), 300.0);
        let s = run.steals().unwrap();
        assert_eq!(s.count, [[2, 0], [1, 1]]);
        assert_eq!(s.bytes, [[100, 0], [100, 0]]);
        let merged = run.merged();
        let names: Vec<&str> = merged["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert!(names[0].starts_with("rank 0") && names[1].starts_with("rank 1"));
    }

    #[test]
    fn absurd_steal_figures_saturate_and_count_for_no_other_rank() {
        let p = parse(
            Path::new("r0.trace.json"),
            &json!([
                {"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}},
                {"ph": "i", "name": "ipl.join", "ts": 1, "args": {"rank": "0", "pool": "p"}},
                {"ph": "i", "name": "satin.start", "ts": 2, "args": {"workers": "1"}},
                // Two steals of the most bytes a u64 holds: their sum overflowed.
                {"ph": "i", "name": "satin.steal", "ts": 3, "args": {
                    "kind": "local", "success": "true", "bytes": "18446744073709551615"}},
                {"ph": "i", "name": "satin.steal", "ts": 4, "args": {
                    "kind": "local", "success": "true", "bytes": "18446744073709551615"}},
                // Victims that are no rank: they counted as rank 0 (and u32::MAX).
                {"ph": "i", "name": "satin.steal", "ts": 5, "args": {
                    "kind": "remote", "victim": "-1", "success": "true", "bytes": "1"}},
                {"ph": "i", "name": "satin.steal", "ts": 6, "args": {
                    "kind": "remote", "victim": "0.5", "success": "true", "bytes": "1"}},
            ]),
        )
        .unwrap();
        let s = Run::new(vec![p]).unwrap().steals().unwrap();
        assert_eq!(s.count, [[2]]);
        assert_eq!(s.bytes, [[u64::MAX]]);
    }

    #[test]
    fn traces_of_two_runs_are_refused() {
        let e = Run::new(vec![process(0, 1, 0, true), process(0, 2, 0, true)]).unwrap_err();
        assert!(e.to_string().contains("more than one run"), "{e}");
    }
}
