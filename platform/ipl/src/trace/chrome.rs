//! The layer that writes a process's trace: Chrome trace events (JSON), rendered on the thread
//! that records them into a buffer of that thread's own, and written to the file by that thread
//! in batches.
//!
//! A traced thread pays for rendering its event and appending it to a buffer no other thread
//! touches until the trace ends: no allocation, no queue, no other thread to wake. Handing every
//! event to a writer thread (the `tracing-chrome` crate's way) cost a few microseconds per
//! event on a machine whose cores the program keeps busy, for the wake-up of that thread, which
//! SOR's 50-microsecond supersteps felt.
//!
//! The file is one JSON array. It opens with a `process_name` metadata event, so that every
//! later event can be written with the comma that goes before it; each thread's events appear
//! in the order the thread recorded them, the threads' batches interleaved. A thread's buffer
//! goes to the file when it holds [`BATCH`] bytes, when the thread ends, and when the trace
//! is finished; so memory stays within a batch per living thread.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span;
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Bytes a thread gathers before it writes them to the file.
pub(crate) const BATCH: usize = 32 << 10;

/// Locks `m`, also after a panic of another holder: a buffer or file cut by a panic mid-event
/// is still better than no trace.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One thread's rendered events, not yet in the file.
struct ThreadBuf {
    text: String,
}

/// What the layer, the threads and the finishing of the trace share.
struct Shared {
    /// The file, until the trace is finished.
    file: Mutex<Option<File>>,
    /// The buffer of every thread that recorded something and has not ended.
    threads: Mutex<Vec<Arc<Mutex<ThreadBuf>>>>,
    /// Set once the trace is finished: later events are dropped.
    finished: AtomicBool,
    next_tid: AtomicU64,
    start: Instant,
}

/// This thread's place in the trace: its track number and its buffer.
struct Local {
    shared: Arc<Shared>,
    tid: u64,
    buf: Arc<Mutex<ThreadBuf>>,
}

impl Drop for Local {
    /// A thread that ends takes its buffer out of the trace and writes what it holds.
    fn drop(&mut self) {
        self.write_out();
        lock(&self.shared.threads).retain(|b| !Arc::ptr_eq(b, &self.buf));
    }
}

impl Local {
    /// Writes this thread's buffer to the file and empties it. Takes the file's lock before
    /// the buffer's, as finishing the trace does, so that the two never wait for each other
    /// and a thread's events reach the file in the order it recorded them.
    fn write_out(&self) {
        let mut file = lock(&self.shared.file);
        let mut buf = lock(&self.buf);
        if let Some(f) = file.as_mut() {
            // A failed write drops the events: tracing must never fail the program it watches.
            let _ = f.write_all(buf.text.as_bytes());
        }
        buf.text.clear();
    }
}

thread_local! {
    static LOCAL: std::cell::RefCell<Option<Local>> = const { std::cell::RefCell::new(None) };
}

/// The `tracing` layer writing Chrome trace events to one file (see the module documentation).
pub(crate) struct ChromeLayer {
    shared: Arc<Shared>,
}

/// Finishes the trace of a [`ChromeLayer`] when dropped.
pub(crate) struct Finish {
    shared: Arc<Shared>,
}

impl Drop for Finish {
    /// Writes out every thread's buffer and closes the array; events recorded later are
    /// dropped.
    fn drop(&mut self) {
        let shared = &self.shared;
        if shared.finished.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut file = lock(&shared.file);
        let Some(f) = file.as_mut() else { return };
        for buf in lock(&shared.threads).iter() {
            let text = std::mem::take(&mut lock(buf).text);
            let _ = f.write_all(text.as_bytes());
        }
        let _ = f.write_all(b"\n]\n");
        let _ = f.flush();
        *file = None;
    }
}

impl ChromeLayer {
    /// A layer writing to `file`, whose trace names the process `process`, and what finishes
    /// it.
    ///
    /// # Errors
    /// If the start of the file cannot be written.
    pub(crate) fn new(mut file: File, process: &str) -> std::io::Result<(ChromeLayer, Finish)> {
        let mut head = String::from("[\n");
        head.push_str(r#"{"ph":"M","pid":1,"tid":0,"name":"process_name","args":{"name":"#);
        push_json_str(&mut head, process);
        head.push_str("}}");
        file.write_all(head.as_bytes())?;
        let shared = Arc::new(Shared {
            file: Mutex::new(Some(file)),
            threads: Mutex::new(Vec::new()),
            finished: AtomicBool::new(false),
            next_tid: AtomicU64::new(0),
            start: Instant::now(),
        });
        Ok((
            ChromeLayer {
                shared: shared.clone(),
            },
            Finish { shared },
        ))
    }

    /// Renders one event with `render` into this thread's buffer (its first event also names
    /// the thread), and writes the buffer out once it holds a batch.
    fn record(&self, render: impl FnOnce(&mut String, u64, u64)) {
        let shared = &self.shared;
        if shared.finished.load(Ordering::Relaxed) {
            return;
        }
        let ts = shared.start.elapsed().as_nanos() as u64;
        // A thread being torn down has no buffer any more: its late events are dropped.
        let _ = LOCAL.try_with(|local| {
            // Busy: an event recorded while this thread renders another (a value whose Debug
            // records one); it is dropped.
            let Ok(mut local) = local.try_borrow_mut() else {
                return;
            };
            if !local
                .as_ref()
                .is_some_and(|l| Arc::ptr_eq(&l.shared, shared))
            {
                *local = Some(self.register());
            }
            let Some(l) = local.as_ref() else { return };
            let full = {
                let mut buf = lock(&l.buf);
                render(&mut buf.text, l.tid, ts);
                buf.text.len() >= BATCH
            };
            if full {
                l.write_out();
            }
        });
    }

    /// A place in the trace for the calling thread, named after the thread.
    fn register(&self) -> Local {
        let shared = &self.shared;
        let tid = shared.next_tid.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current()
            .name()
            .map_or_else(|| tid.to_string(), str::to_owned);
        let mut text = String::with_capacity(BATCH + 1024);
        let _ = write!(
            text,
            r#",{}{{"ph":"M","pid":1,"tid":{tid},"name":"thread_name","args":{{"name":"#,
            '\n'
        );
        push_json_str(&mut text, &name);
        text.push_str("}}");
        let buf = Arc::new(Mutex::new(ThreadBuf { text }));
        lock(&shared.threads).push(buf.clone());
        Local {
            shared: shared.clone(),
            tid,
            buf,
        }
    }
}

/// Writes the start of an event: phase, thread, time (`ts_ns` nanoseconds since the trace
/// began, written as microseconds with three decimals), name and category.
fn event_head(out: &mut String, ph: &str, tid: u64, ts_ns: u64, meta: &tracing::Metadata<'_>) {
    out.push_str(",\n{\"ph\":\"");
    out.push_str(ph);
    out.push_str("\",\"pid\":1,\"tid\":");
    out.push_str(itoa::Buffer::new().format(tid));
    out.push_str(",\"ts\":");
    out.push_str(itoa::Buffer::new().format(ts_ns / 1000));
    let frac = ts_ns % 1000;
    out.push('.');
    out.push(char::from(b'0' + (frac / 100) as u8));
    out.push(char::from(b'0' + (frac / 10 % 10) as u8));
    out.push(char::from(b'0' + (frac % 10) as u8));
    out.push_str(",\"name\":");
    push_json_str(out, meta.name());
    out.push_str(",\"cat\":");
    push_json_str(out, meta.target());
}

/// The arguments of a span, rendered once when it is created: `"k":"v"` pairs.
struct SpanArgs(String);

impl<S> Layer<S> for ChromeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        self.record(|out, tid, ts| {
            event_head(out, "i", tid, ts, event.metadata());
            out.push_str(",\"s\":\"t\",\"args\":{");
            let mut args = Args { out, first: true };
            event.record(&mut args);
            out.push_str("}}");
        });
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut text = String::new();
        attrs.record(&mut Args {
            out: &mut text,
            first: true,
        });
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanArgs(text));
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(SpanArgs(text)) = ext.get_mut::<SpanArgs>() {
                let first = text.is_empty();
                values.record(&mut Args { out: text, first });
            }
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.span_edge("B", id, &ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.span_edge("E", id, &ctx);
    }
}

impl ChromeLayer {
    /// Records entering (`B`) or leaving (`E`) span `id`, with its arguments.
    fn span_edge<S>(&self, ph: &str, id: &span::Id, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        let args = ext.get::<SpanArgs>().map_or("", |a| a.0.as_str());
        self.record(|out, tid, ts| {
            event_head(out, ph, tid, ts, span.metadata());
            out.push_str(",\"args\":{");
            out.push_str(args);
            out.push_str("}}");
        });
    }
}

/// Renders the fields of an event or span as `"name":"value"` pairs, every value as a string
/// (what `bench-harness timeline` reads back as numbers and booleans).
struct Args<'a> {
    out: &'a mut String,
    first: bool,
}

impl Args<'_> {
    fn key(&mut self, field: &Field) {
        if !std::mem::replace(&mut self.first, false) {
            self.out.push(',');
        }
        push_json_str(self.out, field.name());
        self.out.push(':');
    }
}

impl Args<'_> {
    /// A value whose text needs no escaping (a number or a boolean).
    fn plain(&mut self, field: &Field, text: &str) {
        self.key(field);
        self.out.push('"');
        self.out.push_str(text);
        self.out.push('"');
    }
}

impl Visit for Args<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.plain(field, itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.plain(field, itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.plain(field, if value { "true" } else { "false" });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // The shortest text that reads back as the same number; not-a-number and infinities
        // as Rust writes them.
        if let Some(text) = Thousandths::of(value) {
            self.plain(field, text.as_str());
        } else if value.is_finite() {
            self.plain(field, ryu::Buffer::new().format_finite(value));
        } else {
            self.plain(field, &format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        push_json_str(self.out, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        self.out.push('"');
        let _ = write!(Escaped(self.out), "{value:?}");
        self.out.push('"');
    }
}

/// The text of a number that is a whole count of thousandths, such as the microseconds of a
/// duration measured in nanoseconds (what the platform's events carry): the same text as
/// `ryu` writes (the shortest that reads back as the same number), made with integer
/// arithmetic, which costs a fraction of ryu's general search (a bsp superstep's event has
/// five such numbers).
struct Thousandths {
    buf: [u8; 32],
    len: usize,
}

impl Thousandths {
    /// Below this, every multiple of a thousandth has an `f64` of its own, so no shorter text
    /// than the thousandths' reads back as the same number, and ryu writes no exponent.
    const LIMIT: f64 = 1e12;

    /// The text of `value`, when it is the `f64` nearest to a whole count of thousandths in
    /// `[0, LIMIT)`; `None` for any other number.
    fn of(value: f64) -> Option<Thousandths> {
        if !(0.0..Self::LIMIT).contains(&value) || value.is_sign_negative() {
            return None;
        }
        let k = (value * 1000.0).round();
        // Exact: the quotient is correctly rounded, so it equals `value` only when `value` is
        // the `f64` nearest to k / 1000.
        if k / 1000.0 != value {
            return None;
        }
        let k = k as u64;
        let (whole, mut frac) = (k / 1000, k % 1000);
        let mut t = Thousandths {
            buf: [0; 32],
            len: 0,
        };
        let mut whole_text = itoa::Buffer::new();
        t.push(whole_text.format(whole).as_bytes());
        t.push(b".");
        if frac == 0 {
            t.push(b"0");
            return Some(t);
        }
        let mut places = 3;
        while frac % 10 == 0 {
            frac /= 10;
            places -= 1;
        }
        let mut digits = [b'0'; 3];
        for d in digits[..places].iter_mut().rev() {
            *d = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        t.push(&digits[..places]);
        Some(t)
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn as_str(&self) -> &str {
        // The buffer holds ASCII digits and a dot only.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

/// `s` as a JSON string, quotes included.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if s.bytes().any(needs_escape) {
        let _ = Escaped(out).write_str(s);
    } else {
        out.push_str(s);
    }
    out.push('"');
}

/// Whether a byte must be escaped in a JSON string.
fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < b' '
}

/// Writes text into a JSON string: quotes, backslashes and control characters escaped.
struct Escaped<'a>(&'a mut String);

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        // The bytes escaped are ASCII, so `i` is always at a character boundary.
        while let Some(i) = rest.bytes().position(needs_escape) {
            self.0.push_str(&rest[..i]);
            let c = rest.as_bytes()[i];
            match c {
                b'"' => self.0.push_str("\\\""),
                b'\\' => self.0.push_str("\\\\"),
                b'\n' => self.0.push_str("\\n"),
                b'\t' => self.0.push_str("\\t"),
                b'\r' => self.0.push_str("\\r"),
                _ => {
                    let _ = write!(self.0, "\\u{c:04x}");
                }
            }
            rest = &rest[i + 1..];
        }
        self.0.push_str(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Runs `f` with a layer writing the trace of process `process` as the default
    /// subscriber (`f` may finish the trace itself), finishes it, and returns its events.
    fn traced(process: &str, f: impl FnOnce(Finish)) -> Vec<serde_json::Value> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.trace.json");
        let (layer, finish) = ChromeLayer::new(File::create(&path).unwrap(), process).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || f(finish));
        let text = std::fs::read_to_string(&path).unwrap();
        serde_json::from_str::<Vec<serde_json::Value>>(&text)
            .unwrap_or_else(|e| panic!("not a JSON array ({e}):\n{text}"))
    }

    #[test]
    fn thousandths_are_written_as_ryu_writes_them() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut fast = 0;
        for i in 0..200_000u64 {
            // Durations in nanoseconds as microseconds, of every magnitude, and other numbers.
            let ns = match i % 4 {
                0 => i,
                1 => next() % 10_000_000,
                _ => next() >> (next() % 64),
            };
            let values = [
                ns as f64 / 1000.0,
                f64::from_bits(next()),
                (next() % 1_000_000) as f64 / 7.0,
            ];
            for v in values {
                let Some(t) = Thousandths::of(v) else {
                    continue;
                };
                fast += 1;
                assert_eq!(t.as_str(), ryu::Buffer::new().format_finite(v), "{v:e}");
            }
        }
        assert!(fast > 100_000, "the fast path wrote only {fast} numbers");
        for (v, text) in [(0.0, "0.0"), (0.18, "0.18"), (5.0, "5.0"), (0.005, "0.005")] {
            assert_eq!(Thousandths::of(v).unwrap().as_str(), text);
        }
        for v in [
            -1.0,
            1e12,
            0.0001,
            1.0 / 3.0,
            f64::NAN,
            f64::INFINITY,
            -0.0,
            -1e-9,
        ] {
            assert!(Thousandths::of(v).is_none(), "{v}");
        }
    }

    #[test]
    fn events_spans_and_threads_make_one_valid_array() {
        let events = traced("host-1", |_finish| {
            tracing::trace!(name: "a.event", target: "ibis::t", n = 42u64, x = 1.5f64,
                            word = %"say \"hi\"\n", flag = true);
            {
                let _s = tracing::trace_span!(target: "ibis::t", "a.span", worker = 3u64).entered();
            }
            let dispatch = tracing::dispatcher::Dispatch::default();
            std::thread::Builder::new()
                .name("other".into())
                .spawn(move || {
                    tracing::dispatcher::with_default(&dispatch, || {
                        for i in 0..2000u64 {
                            tracing::trace!(name: "many", target: "ibis::t", i);
                        }
                    })
                })
                .unwrap()
                .join()
                .unwrap();
        });
        let named = |n: &'static str| events.iter().filter(move |e| e["name"] == n);
        let ev = named("a.event").next().expect("the event");
        assert_eq!(ev["ph"], "i");
        assert_eq!(ev["cat"], "ibis::t");
        assert_eq!(ev["args"]["n"], "42");
        assert_eq!(ev["args"]["x"], "1.5");
        assert_eq!(ev["args"]["word"], "say \"hi\"\n");
        assert_eq!(ev["args"]["flag"], "true");
        let edges: Vec<_> = named("a.span").map(|e| e["ph"].as_str().unwrap()).collect();
        assert_eq!(edges, ["B", "E"]);
        assert!(named("a.span").all(|e| e["args"]["worker"] == "3"));
        // The other thread: named, every event there once and in order, past several batches.
        let other = named("thread_name")
            .find(|e| e["args"]["name"] == "other")
            .expect("the thread's name");
        let many: Vec<u64> = named("many")
            .inspect(|e| assert_eq!(e["tid"], other["tid"]))
            .map(|e| e["args"]["i"].as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(many, (0..2000).collect::<Vec<_>>());
        assert_eq!(
            named("process_name").next().unwrap()["args"]["name"],
            "host-1"
        );
    }

    /// A value whose Debug form records an event of its own.
    struct Chatty;

    impl fmt::Debug for Chatty {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            tracing::trace!(name: "inner", target: "ibis::t", n = 1u64);
            f.write_str("chatty")
        }
    }

    #[test]
    fn an_event_recorded_while_one_renders_is_dropped_not_a_panic() {
        let events = traced("host-3", |_finish| {
            tracing::trace!(name: "outer", target: "ibis::t", v = ?Chatty);
        });
        let outer = events.iter().find(|e| e["name"] == "outer").unwrap();
        assert_eq!(outer["args"]["v"], "chatty");
        assert!(!events.iter().any(|e| e["name"] == "inner"));
    }

    #[test]
    fn events_after_the_finish_are_dropped_and_the_file_stays_valid() {
        let events = traced("host-2", |finish| {
            tracing::trace!(name: "before", target: "ibis::t", n = 1u64);
            drop(finish);
            tracing::trace!(name: "after", target: "ibis::t", n = 2u64);
        });
        assert!(events.iter().any(|e| e["name"] == "before"));
        assert!(!events.iter().any(|e| e["name"] == "after"));
    }
}
