//! Reading one process's trace file: checks that it is a whole trace written under
//! `IPL_TRACE`, pairs the beginnings and ends of spans per thread, turns the args (which the
//! writer stores as strings) back into numbers, and each `bsp.superstep` event (written once
//! per sync, at its end, with the lengths of its parts) into the spans of its phases:
//! `bsp.compute`, `bsp.sync`, and inside it `bsp.send` and `bsp.wait`.

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The ending of the per-process files' names (as `ipl::trace` writes them).
pub const FILE_SUFFIX: &str = ".trace.json";
/// The largest trace file read: a bound on memory, far above what a run writes (a trace grows
/// with supersteps and steals: a few hundred bytes each).
pub const MAX_FILE: u64 = 1 << 30;

/// The largest superstep number read: past 2^53 an `f64` no longer holds every whole number,
/// and the superstep chart counts its bars from the number.
pub const MAX_STEP: u64 = 1 << 53;

/// The largest time, wall clock or clock offset read, in microseconds either way from its
/// zero (2^53, 285 years): sums of a few of them stay finite and exact to the microsecond.
pub const MAX_TIME_US: f64 = (1u64 << 53) as f64;

/// The args of an event, numbers as numbers.
pub type Args = Map<String, Value>;

/// A span: a beginning and an end on one thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Its name (e.g. `bsp.sync`).
    pub name: String,
    /// The thread, as numbered in the file.
    pub tid: u64,
    /// Microseconds since the process started tracing.
    pub start: f64,
    /// Its end; for a span the process never ended, the last time in the file.
    pub end: f64,
    /// Whether the file holds its end.
    pub ended: bool,
    /// The args of its beginning, updated by those of its end.
    pub args: Args,
}

/// An instant event.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Its name (e.g. `satin.steal`).
    pub name: String,
    /// The thread.
    pub tid: u64,
    /// Microseconds since the process started tracing.
    pub ts: f64,
    /// Its args.
    pub args: Args,
}

/// How the process's clock stood against the registry's at join (`ipl.join`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Clock {
    /// Registry clock minus this process's, in microseconds.
    pub offset_us: f64,
    /// The round trip the offset comes from.
    pub rtt_us: f64,
    /// Whether the process shared the registry's clock (same host).
    pub same_host: bool,
}

/// One process's trace.
#[derive(Debug, Clone)]
pub struct ProcessTrace {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its rank in the pool, from its `ipl.join` (none: it never joined a pool).
    pub rank: Option<u32>,
    /// The pool it joined.
    pub pool: Option<String>,
    /// Its host and operating-system process id, from `trace.start`.
    pub host: String,
    /// The operating-system process id.
    pub os_pid: u64,
    /// The wall clock (registry's clock where measured) at time 0 of the file, in
    /// microseconds since the Unix epoch.
    pub origin_unix_us: f64,
    /// Its clock against the registry's.
    pub clock: Clock,
    /// Thread names by thread number.
    pub threads: BTreeMap<u64, String>,
    /// Spans, in order of their beginnings.
    pub spans: Vec<Span>,
    /// Instant events, in file order.
    pub marks: Vec<Mark>,
    /// The last time in the file.
    pub end: f64,
}

impl ProcessTrace {
    /// A label for charts: `rank R`, or the host and process id of a process without one.
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r}"),
            None => format!("{} pid {}", self.host, self.os_pid),
        }
    }
}

/// The number in `v`: a JSON number, or a string holding one (as the writer stores args).
pub fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

/// Arg `key` of `args` as a number.
pub fn arg(args: &Args, key: &str) -> Option<f64> {
    args.get(key).and_then(number)
}

/// `v` as a whole number from 0 to `max`, as the writer stores ranks, counts and superstep
/// numbers; `None` for a fraction, a negative or a larger number, which a cast would turn
/// into another, valid-looking one.
pub fn whole(v: f64, max: u64) -> Option<u64> {
    (v >= 0.0 && v.fract() == 0.0 && v <= max as f64).then_some(v as u64)
}

/// Arg `key` of `args` as text.
pub fn arg_str<'a>(args: &'a Args, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// `args` with numbers and booleans stored as strings turned back into JSON numbers and
/// booleans.
pub fn typed(args: &Args) -> Args {
    args.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => match s.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    _ => match (s.parse::<i64>(), s.parse::<f64>()) {
                        (Ok(i), _) => Value::from(i),
                        (_, Ok(f)) if f.is_finite() => Value::from(f),
                        _ => v.clone(),
                    },
                },
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::BadTrace {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The trace files in `dir` (every `*.trace.json`), sorted by name.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| bad(dir, format!("cannot list: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(FILE_SUFFIX))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad(
            dir,
            format!(
                "no trace files (*{FILE_SUFFIX}) in it: run the program with IPL_TRACE={} or \
                 --trace {}",
                dir.display(),
                dir.display()
            ),
        ));
    }
    Ok(files)
}

/// Reads and checks the trace file at `path`.
pub fn read(path: &Path) -> Result<ProcessTrace> {
    // A device or a pipe has no size to check first, and may never end (/dev/zero) or, for a
    // pipe without a writer, never open.
    let bytes = crate::input::read_bounded(path, MAX_FILE).map_err(|why| {
        if why.starts_with("not a regular file") {
            bad(
                path,
                "not a regular file: give the trace file itself, or the directory holding it",
            )
        } else {
            bad(path, format!("{why} (a trace file)"))
        }
    })?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
        if e.is_eof() {
            bad(
                path,
                format!(
                    "cut short ({e}): the process ended before it finished its trace (killed, \
                     or still running)"
                ),
            )
        } else {
            bad(path, format!("not JSON: {e}"))
        }
    })?;
    parse(path, &doc)
}

/// Checks and reads a trace already parsed as JSON.
pub fn parse(path: &Path, doc: &Value) -> Result<ProcessTrace> {
    let foreign = |why: &str| {
        bad(
            path,
            format!(
                "not a per-process trace written under IPL_TRACE ({why}); give the directory \
                 the processes wrote their *{FILE_SUFFIX} files to"
            ),
        )
    };
    let events = doc
        .as_array()
        .ok_or_else(|| foreign("it is no JSON array of trace events"))?;
    let mut out = ProcessTrace {
        path: path.to_path_buf(),
        rank: None,
        pool: None,
        host: String::new(),
        os_pid: 0,
        origin_unix_us: f64::NAN,
        clock: Clock {
            same_host: true,
            ..Clock::default()
        },
        threads: BTreeMap::new(),
        spans: Vec::new(),
        marks: Vec::new(),
        end: 0.0,
    };
    // Open spans per thread, innermost last: (index in `out.spans`).
    let mut open: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    // When the join that names the process happened.
    let mut first_join = f64::INFINITY;
    // The end of the last superstep of the whole machine per thread.
    let mut last_step: BTreeMap<u64, f64> = BTreeMap::new();
    for (i, ev) in events.iter().enumerate() {
        let at = |why: String| bad(path, format!("event {i}: {why}"));
        let obj = ev
            .as_object()
            .ok_or_else(|| foreign(&format!("event {i} is not an object")))?;
        let ph = obj
            .get("ph")
            .and_then(Value::as_str)
            .ok_or_else(|| foreign(&format!("event {i} has no phase (\"ph\")")))?;
        let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
        let tid = obj.get("tid").and_then(Value::as_u64).unwrap_or(0);
        let args = obj
            .get("args")
            .and_then(Value::as_object)
            .map(typed)
            .unwrap_or_default();
        if let Some(step) = args.get("step") {
            if number(step).and_then(|v| whole(v, MAX_STEP)).is_none() {
                return Err(at(format!(
                    "'{name}' has step {step}, not a superstep number (a whole number up to \
                     {MAX_STEP})"
                )));
            }
        }
        if ph == "M" {
            if name == "thread_name" {
                if let Some(n) = arg_str(&args, "name") {
                    out.threads.insert(tid, n.to_string());
                }
            }
            continue;
        }
        let ts = obj
            .get("ts")
            .and_then(number)
            .ok_or_else(|| at(format!("'{name}' has no time (\"ts\")")))?;
        if ts < 0.0 {
            return Err(at(format!("'{name}' has a negative time {ts}")));
        }
        if ts > MAX_TIME_US {
            return Err(at(format!(
                "'{name}' has the time {ts:e} (at most {MAX_TIME_US} µs)"
            )));
        }
        out.end = out.end.max(ts);
        match ph {
            "B" => {
                open.entry(tid).or_default().push(out.spans.len());
                out.spans.push(Span {
                    name: name.to_string(),
                    tid,
                    start: ts,
                    end: ts,
                    ended: false,
                    args,
                });
            }
            "E" => {
                let stack = open.entry(tid).or_default();
                let Some(j) = stack.pop() else {
                    return Err(at(format!(
                        "the end of '{name}' on thread {tid} has no beginning"
                    )));
                };
                let span = &mut out.spans[j];
                if span.name != name {
                    return Err(at(format!(
                        "the end of '{name}' on thread {tid} comes while '{}' is open",
                        span.name
                    )));
                }
                // One thread's clock never runs backwards in a file the writer finished.
                if ts < span.start {
                    return Err(at(format!(
                        "the end of '{name}' on thread {tid} at {ts} comes before its beginning \
                         at {}",
                        span.start
                    )));
                }
                span.end = ts;
                span.ended = true;
                span.args.extend(args);
            }
            "i" | "I" => {
                match name {
                    "trace.start" => {
                        let unix = arg(&args, "unix_us").ok_or_else(|| {
                            at("trace.start without the wall clock (unix_us)".into())
                        })?;
                        if unix.abs() > MAX_TIME_US {
                            return Err(at(format!(
                                "trace.start with the wall clock unix_us {unix:e} (at most \
                                 {MAX_TIME_US} µs either side of 1970)"
                            )));
                        }
                        out.origin_unix_us = unix - ts;
                        out.host = arg_str(&args, "host").unwrap_or("?").to_string();
                        out.os_pid = arg(&args, "os_pid").unwrap_or(0.0) as u64;
                    }
                    // The earliest join names the process (nodes of one process as threads
                    // join more than once, and threads' events come in batches, not in time
                    // order).
                    "ipl.join" if out.rank.is_none() || ts < first_join => {
                        first_join = ts;
                        let rank = arg(&args, "rank")
                            .and_then(|r| whole(r, u32::MAX.into()))
                            .ok_or_else(|| at("ipl.join without a rank".into()))?;
                        out.rank = Some(rank as u32);
                        out.pool = arg_str(&args, "pool").map(str::to_string);
                        out.clock = Clock {
                            offset_us: arg(&args, "clock_offset_us").unwrap_or(0.0),
                            rtt_us: arg(&args, "clock_rtt_us").unwrap_or(0.0),
                            same_host: args.get("same_host") != Some(&Value::Bool(false)),
                        };
                        for (key, v) in [
                            ("clock_offset_us", out.clock.offset_us),
                            ("clock_rtt_us", out.clock.rtt_us),
                        ] {
                            if v.abs() > MAX_TIME_US {
                                return Err(at(format!(
                                    "ipl.join with {key} {v:e} (at most {MAX_TIME_US} µs)"
                                )));
                            }
                        }
                    }
                    "bsp.superstep" => {
                        let phases = superstep_spans(tid, ts, &args, last_step.get(&tid))
                            .map_err(|why| at(format!("bsp.superstep {why}")))?;
                        if arg(&args, "comm") == Some(0.0) {
                            last_step.insert(tid, ts);
                        }
                        out.spans.extend(phases);
                        continue;
                    }
                    _ => {}
                }
                out.marks.push(Mark {
                    name: name.to_string(),
                    tid,
                    ts,
                    args,
                });
            }
            // Kinds this writer never produces are kept out of the model, not refused.
            _ => {}
        }
    }
    if out.origin_unix_us.is_nan() {
        return Err(foreign("it has no trace.start event"));
    }
    // Spans the process never ended (it exited within them) last to its last event.
    for stack in open.values() {
        for &j in stack {
            out.spans[j].end = out.end;
        }
    }
    // In order of their beginnings, an outer span before the spans it holds.
    out.spans
        .sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
    Ok(out)
}

/// The spans of the superstep whose `bsp.superstep` event came at `ts` on thread `tid`: the
/// sync before `ts`, its send and wait, and (for the whole machine) the compute phase before
/// it, from no earlier than the end of the thread's previous superstep `previous`.
fn superstep_spans(
    tid: u64,
    ts: f64,
    args: &Args,
    previous: Option<&f64>,
) -> std::result::Result<Vec<Span>, String> {
    let get = |k: &str| {
        arg(args, k)
            .filter(|v| *v >= 0.0)
            .ok_or_else(|| format!("without {k}"))
    };
    get("step")?;
    let (sync_us, send_us, compute_us) = (get("sync_us")?, get("send_us")?, get("compute_us")?);
    let sync_start = (ts - sync_us).max(0.0);
    let send_end = (sync_start + send_us).min(ts);
    let span = |name: &str, start: f64, end: f64, args: Args| Span {
        name: name.to_string(),
        tid,
        start,
        end,
        ended: true,
        args,
    };
    let only = |keys: &[&str]| -> Args {
        keys.iter()
            .filter_map(|k| args.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect()
    };
    let mut out = vec![
        span(
            "bsp.sync",
            sync_start,
            ts,
            only(&[
                "step", "pid", "comm", "packets", "bytes", "messages", "sync_us",
            ]),
        ),
        span("bsp.send", sync_start, send_end, only(&["step", "send_us"])),
        span("bsp.wait", send_end, ts, only(&["step"])),
    ];
    if arg(args, "comm") == Some(0.0) {
        let floor = previous.copied().unwrap_or(0.0);
        let compute_start = (sync_start - compute_us).max(floor).min(sync_start);
        out.insert(
            0,
            span(
                "bsp.compute",
                compute_start,
                sync_start,
                only(&["step", "pid", "compute_us", "collectives", "collective_us"]),
            ),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(events: Value) -> Result<ProcessTrace> {
        parse(Path::new("t.trace.json"), &events)
    }

    #[test]
    fn spans_pair_up_per_thread_and_args_become_numbers() {
        let t = doc(json!([
            {"ph": "M", "name": "thread_name", "tid": 0, "args": {"name": "main"}},
            {"ph": "i", "name": "trace.start", "tid": 0, "ts": 5.0,
             "args": {"unix_us": "1000005", "host": "h", "os_pid": "42"}},
            {"ph": "i", "name": "ipl.join", "tid": 0, "ts": 6.0,
             "args": {"rank": "2", "pool": "p", "clock_offset_us": "-7", "same_host": "false"}},
            {"ph": "B", "name": "bsp.sync", "tid": 0, "ts": 10.0, "args": {"step": "0"}},
            {"ph": "B", "name": "bsp.send", "tid": 0, "ts": 11.0},
            {"ph": "B", "name": "satin.idle", "tid": 1, "ts": 11.5},
            {"ph": "E", "name": "bsp.send", "tid": 0, "ts": 12.0},
            {"ph": "E", "name": "bsp.sync", "tid": 0, "ts": 20.0, "args": {"bytes": "64"}},
        ]))
        .unwrap();
        assert_eq!(t.rank, Some(2));
        assert_eq!(t.origin_unix_us, 1_000_000.0);
        assert_eq!(t.clock.offset_us, -7.0);
        assert!(!t.clock.same_host);
        assert_eq!(t.threads[&0], "main");
        let sync = &t.spans[0];
        assert_eq!((sync.start, sync.end, sync.ended), (10.0, 20.0, true));
        assert_eq!(arg(&sync.args, "step"), Some(0.0));
        assert_eq!(sync.args["bytes"], json!(64));
        // Never ended: it lasts to the end of the file.
        assert_eq!((t.spans[2].end, t.spans[2].ended), (20.0, false));
    }

    #[test]
    fn a_superstep_event_becomes_the_spans_of_its_phases() {
        let t = doc(json!([
            {"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}},
            {"ph": "i", "name": "bsp.superstep", "tid": 0, "ts": 100.0, "args": {
                "step": "0", "pid": "1", "comm": "0", "compute_us": "60", "sync_us": "30",
                "send_us": "10", "collectives": "1", "collective_us": "5", "packets": "2",
                "bytes": "64", "messages": "1"}},
            // A group's superstep: no compute phase of its own.
            {"ph": "i", "name": "bsp.superstep", "tid": 0, "ts": 120.0, "args": {
                "step": "0", "pid": "0", "comm": "7", "compute_us": "5", "sync_us": "4",
                "send_us": "1"}},
            // Its compute phase would reach back before the previous superstep ended.
            {"ph": "i", "name": "bsp.superstep", "tid": 0, "ts": 200.0, "args": {
                "step": "1", "pid": "1", "comm": "0", "compute_us": "500", "sync_us": "50",
                "send_us": "50"}},
        ]))
        .unwrap();
        let got: Vec<(&str, f64, f64)> = t
            .spans
            .iter()
            .map(|s| (s.name.as_str(), s.start, s.end))
            .collect();
        assert_eq!(
            got,
            [
                ("bsp.compute", 10.0, 70.0),
                ("bsp.sync", 70.0, 100.0),
                ("bsp.send", 70.0, 80.0),
                ("bsp.wait", 80.0, 100.0),
                ("bsp.compute", 100.0, 150.0),
                ("bsp.sync", 116.0, 120.0),
                ("bsp.send", 116.0, 117.0),
                ("bsp.wait", 117.0, 120.0),
                ("bsp.sync", 150.0, 200.0),
                ("bsp.send", 150.0, 200.0),
                ("bsp.wait", 200.0, 200.0),
            ]
        );
        assert_eq!(t.spans[0].args["collective_us"], json!(5));
        assert_eq!(t.spans[1].args["bytes"], json!(64));
        assert!(t.marks.iter().all(|m| m.name != "bsp.superstep"));
        let e = doc(json!([
            {"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}},
            {"ph": "i", "name": "bsp.superstep", "ts": 1, "args": {"step": "0"}},
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("bsp.superstep without sync_us"), "{e}");
    }

    /// Runs the test `name` of this module again in a child process whose address space is
    /// bounded by `limit` bytes, with `CHILD` set; whether it passed, and its output.
    fn passes_in_a_bounded_child(name: &str, limit: u64) -> (bool, String) {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", &format!("timeline::read::tests::{name}")])
            .args(["--test-threads", "1"])
            .env(CHILD, "1");
        // SAFETY: the closure only calls setrlimit, which is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success() && text.contains("1 passed"), text)
    }

    const CHILD: &str = "BENCH_HARNESS_READ_CHILD";

    #[test]
    fn a_file_without_an_end_is_refused_within_the_bound() {
        if std::env::var_os(CHILD).is_some() {
            // /dev/zero has no size to look at first: it was read on, and on.
            let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(
                e.contains("/dev/zero") && e.contains("not a regular file"),
                "{e}"
            );
            return;
        }
        let (passed, output) =
            passes_in_a_bounded_child("a_file_without_an_end_is_refused_within_the_bound", 1 << 30);
        assert!(passed, "{output}");
    }

    #[test]
    fn a_span_that_ends_before_it_begins_is_refused() {
        // It became a slice of negative length in the merged trace, and a compute phase of
        // negative length took its collectives' time off the communication of its superstep.
        let e = doc(json!([
            {"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}},
            {"ph": "B", "name": "bsp.compute", "tid": 3, "ts": 50.0,
             "args": {"step": "0", "collective_us": "5"}},
            {"ph": "E", "name": "bsp.compute", "tid": 3, "ts": 10.0},
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "event 2: the end of 'bsp.compute' on thread 3 at 10 comes before its \
                 beginning at 50"
            ),
            "{e}"
        );
    }

    #[test]
    fn foreign_and_broken_traces_are_refused() {
        let e = doc(json!({"traceEvents": []})).unwrap_err().to_string();
        assert!(
            e.contains("t.trace.json") && e.contains("no JSON array"),
            "{e}"
        );
        let e = doc(json!([{"ph": "i", "name": "x", "ts": 1}]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no trace.start"), "{e}");
        let e = doc(json!([{"name": "x"}])).unwrap_err().to_string();
        assert!(e.contains("no phase"), "{e}");
        let start = json!({"ph": "i", "name": "trace.start", "ts": 0, "args": {"unix_us": "1"}});
        let e = doc(json!([start, {"ph": "E", "name": "bsp.sync", "ts": 1}]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no beginning"), "{e}");
        let e = doc(
            json!([start, {"ph": "B", "name": "a", "ts": 1}, {"ph": "E", "name": "b", "ts": 2}]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("while 'a' is open"), "{e}");
        let e = doc(json!([start, {"ph": "i", "name": "x", "ts": -1}]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("negative time"), "{e}");
        let e = doc(json!([start, {"ph": "i", "name": "x", "ts": 1e300}]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("event 1: 'x' has the time 1e300"), "{e}");
        let join = json!({"ph": "i", "name": "ipl.join", "ts": 1,
                          "args": {"rank": "0", "clock_offset_us": "-1e20"}});
        let e = doc(json!([start, join])).unwrap_err().to_string();
        assert!(
            e.contains("event 1: ipl.join with clock_offset_us -1e20"),
            "{e}"
        );
        let e =
            doc(json!([start, {"ph": "i", "name": "ipl.join", "ts": 1, "args": {"rank": "2.5"}}]))
                .unwrap_err()
                .to_string();
        assert!(e.contains("event 1: ipl.join without a rank"), "{e}");
        let e =
            doc(json!([start, {"ph": "B", "name": "bsp.sync", "ts": 1, "args": {"step": "-1"}}]))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("'bsp.sync' has step -1, not a superstep number"),
            "{e}"
        );
    }
}
