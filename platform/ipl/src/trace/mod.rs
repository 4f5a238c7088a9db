//! Traces of a run: with `IPL_TRACE=DIR` every process writes a file of its own in `DIR`, in
//! Chrome's trace event format (JSON; open it at <https://ui.perfetto.dev> or in
//! `chrome://tracing`), with one track per thread: bsp supersteps split into compute, send and
//! wait, satin steals, idle periods, aborts and per-interval counts, the pool's membership
//! changes as this node saw them, and optionally large messages. `bench-harness timeline DIR`
//! merges the files of a run into one trace with a process per rank and draws charts of it.
//!
//! A program turns tracing on by installing its subscriber with [`init`] (every binary of the
//! platform does, and takes `--trace DIR` as well as `IPL_TRACE`); a program that installs no
//! subscriber of its own gets one at [`Ibis::join`](crate::Ibis::join) when `IPL_TRACE` is set.
//! The events are ordinary `tracing` spans and events with the targets [`IPL`], [`BSP`] and
//! [`SATIN`]. Each thread renders its events into a buffer of its own and writes them to the
//! file in batches of 32 KiB, so that a traced thread pays for rendering an event and nothing
//! else most of the time: no queue, no allocation, no writer thread to wake (see `chrome.rs`).
//!
//! Tracing is compiled in by ipl's `trace` feature, on by default (satin and bsp forward it as
//! their own `trace` feature). Compiled in but not asked for, it costs a load of a flag where
//! a trace records something; a build without the feature refuses `IPL_TRACE` and `--trace`
//! with an error, and is what the overhead of tracing is measured against
//! (`scripts/bench-trace`).
//!
//! # What a trace holds
//!
//! Values of `args` are written as strings (`"42"`, `"true"`); `bench-harness timeline` reads
//! them back as numbers. Spans are `B`/`E` pairs on the thread that ran them; the others are
//! instant events (`i`). A superstep is one event with the lengths of its phases, not a span
//! per phase, because every event costs its rendering (about a microsecond for a superstep's);
//! the merged trace draws its phases as slices.
//!
//! | name | kind | args |
//! |---|---|---|
//! | `trace.start` | instant | `unix_us`: the wall clock at this event, `host`, `os_pid` |
//! | `ipl.join` | instant | `rank`, `pool`, `size` (0: open pool), `location`, `clock_offset_us`, `clock_rtt_us`, `same_host` |
//! | `ipl.pool` | instant | `change` (`joined`, `left`, `died`, `closed`), `rank` (for `closed`: the size) |
//! | `ipl.leave` | instant | `rank`, `died` |
//! | `ipl.message` | instant | `bytes`: a message of at least `IPL_TRACE_MESSAGES` bytes was sent |
//! | `bsp.superstep` | instant, at the end of each `sync` | `step`, `pid`, `comm` (0: the whole machine), `compute_us` (since the previous sync ended), `sync_us`, `send_us` (of it, sending the combined packets; the rest is the barrier and the wait for data), `collectives` called in the compute phase and `collective_us` they spent in rounds, `packets`, `bytes` and `messages` sent |
//! | `satin.start` | instant | `workers` of the runtime |
//! | `satin.steal` | instant | `kind` (`local`: `thief` and `victim` are workers of this process; `remote`: ranks), `success`, `bytes` |
//! | `satin.idle` | span | `worker`: it found no work for longer than its spinning lasts |
//! | `satin.abort` | instant | `generation`: an abort, or a failed run cancelling its jobs (the count in the process) |
//! | `satin.counts` | instant | per interval: `interval_us`, `spawns`, `syncs`, `executed`, `local_steals`, `local_steal_attempts`, `remote_steals`, `remote_steal_attempts`, `aborts`, `idle_us` |
//!
//! A trace grows with supersteps, steals, idle periods and time (one `satin.counts` per
//! interval while a runtime works), never with spawns or packets: nothing is recorded per spawn
//! or per packet, and with tracing off the spawn path does exactly what it does without it.
//!
//! # Clocks
//!
//! Timestamps are microseconds since the process started tracing; `trace.start` ties them to
//! the wall clock. Processes of one host share that clock. For others, a tcp node measures at
//! join the offset of the registry's clock from its own (the midpoint of the fastest of a few
//! round trips) and records it in `ipl.join`, with the round trip, which bounds its error;
//! merging adds it.
//!
//! ```no_run
//! fn main() -> ipl::Result<()> {
//!     // Logs as RUST_LOG says (warnings by default), a trace where IPL_TRACE says.
//!     let _trace = ipl::trace::init("warn", None)?;
//!     let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
//!     // ... the file is complete once `_trace` is dropped (or the process exits).
//!     drop(ibis);
//!     Ok(())
//! }
//! ```

#[cfg(feature = "trace")]
mod chrome;

use crate::error::{Error, Result};
#[cfg(feature = "trace")]
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
#[cfg(feature = "trace")]
use tracing_subscriber::filter::Targets;
use tracing_subscriber::filter::{EnvFilter, FilterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The environment variable naming the directory traces go to.
pub const ENV_DIR: &str = "IPL_TRACE";
/// The environment variable asking for an `ipl.message` event per message of at least this
/// many bytes (unset: none).
pub const ENV_MESSAGES: &str = "IPL_TRACE_MESSAGES";
/// The target (the trace's category) of the port library's events.
pub const IPL: &str = "ibis::ipl";
/// The target of the bulk-synchronous layer's events.
pub const BSP: &str = "ibis::bsp";
/// The target of the divide-and-conquer runtime's events.
pub const SATIN: &str = "ibis::satin";
/// What every target of a trace event starts with.
pub const TARGET_PREFIX: &str = "ibis::";
/// The ending of every per-process trace file's name.
pub const FILE_SUFFIX: &str = ".trace.json";

/// Whether this process writes a trace.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Messages of at least this many bytes get an event.
static MESSAGE_MIN: AtomicU64 = AtomicU64::new(u64::MAX);
/// The writer of this process's trace, until the trace is finished.
#[cfg(feature = "trace")]
static WRITER: Mutex<Option<chrome::Finish>> = Mutex::new(None);

/// Whether this process writes a trace: layers above ask before they do work that only a trace
/// needs (a sampling thread, clock readings).
#[inline]
pub fn enabled() -> bool {
    cfg!(feature = "trace") && ENABLED.load(Ordering::Relaxed)
}

/// Finishes this process's trace when dropped (see [`init`]).
#[must_use = "the trace is finished when the guard is dropped"]
pub struct TraceGuard {
    path: Option<PathBuf>,
}

impl TraceGuard {
    /// The file this process writes its trace to, if it writes one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        finish();
    }
}

/// Installs this process's `tracing` subscriber: log lines on standard error as `RUST_LOG` says
/// (else as `default_filter` says, e.g. `"warn"`), and a trace in `dir`, or where `IPL_TRACE`
/// says when `dir` is `None`, if either names a directory (created if missing).
///
/// The trace goes to `DIR/HOST-PID.trace.json` and is complete once the guard is dropped or the
/// process exits through `exit` (returning from `main` included); a process killed by a signal
/// leaves it cut short.
///
/// # Errors
/// When `RUST_LOG` is not a filter (such as `ipl=debug,warn`), the directory or the file cannot
/// be created, `IPL_TRACE_MESSAGES` is not a byte count, or a global subscriber is installed
/// already.
pub fn init(default_filter: &str, dir: Option<&Path>) -> Result<TraceGuard> {
    let env_dir = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty());
    let dir = dir.map(Path::to_path_buf).or(env_dir.map(PathBuf::from));
    let logs = log_filter(default_filter)?;
    // Checked whether or not a trace is asked for: a bad value is found on the first run, not
    // on the first traced one.
    let message_min = message_min()?;
    // Trace events are for the trace alone, whatever RUST_LOG asks for.
    let not_trace =
        tracing_subscriber::filter::filter_fn(|m| !m.target().starts_with(TARGET_PREFIX));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(logs.and(not_trace));
    let Some(dir) = dir else {
        tracing_subscriber::registry()
            .with(fmt)
            .try_init()
            .map_err(|e| Error::config("tracing", format!("cannot install the subscriber: {e}")))?;
        return Ok(TraceGuard { path: None });
    };
    start_trace(fmt, &dir, message_min)
}

/// The size from which sent messages are traced, as `IPL_TRACE_MESSAGES` says (a byte count
/// such as `4096` or `64Ki`); none when it is unset or empty.
fn message_min() -> Result<u64> {
    match std::env::var(ENV_MESSAGES) {
        Ok(v) if !v.trim().is_empty() => crate::config::parse_bytes(ENV_MESSAGES, &v),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::config(
            ENV_MESSAGES,
            format!("{v:?} is not valid text"),
        )),
        _ => Ok(u64::MAX),
    }
}

/// The filter of log lines that `RUST_LOG` names, or `default_filter` where it is unset or
/// empty; a value that is not a filter is refused naming the variable, rather than replaced by
/// the default without a word. For programs that install a subscriber of their own.
///
/// # Errors
/// [`Error::Config`] naming `RUST_LOG` when it is not a filter (such as `ipl=debug,warn`) or
/// not valid text.
pub fn log_filter(default_filter: &str) -> Result<EnvFilter> {
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(&v).map_err(|e| {
            Error::config(
                EnvFilter::DEFAULT_ENV,
                format!("'{v}' is not a log filter such as ipl=debug,warn: {e}"),
            )
        }),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::config(
            EnvFilter::DEFAULT_ENV,
            format!("{v:?} is not valid text"),
        )),
        _ => Ok(EnvFilter::new(default_filter)),
    }
}

/// Installs the subscriber with `fmt` and a trace written in `dir`.
#[cfg(feature = "trace")]
fn start_trace<L>(fmt: L, dir: &Path, message_min: u64) -> Result<TraceGuard>
where
    L: Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating the trace directory {}", dir.display()), e))?;
    let (host, os_pid) = (host_name(), std::process::id());
    let path = dir.join(format!("{}-{os_pid}{FILE_SUFFIX}", file_safe(&host)));
    let file = std::fs::File::create(&path)
        .map_err(|e| Error::io(format!("creating the trace file {}", path.display()), e))?;
    let (chrome, writer) = chrome::ChromeLayer::new(file, &format!("{host}-{os_pid}"))
        .map_err(|e| Error::io(format!("writing the trace file {}", path.display()), e))?;
    let chrome =
        chrome.with_filter(Targets::new().with_target(TARGET_PREFIX, tracing::Level::TRACE));
    tracing_subscriber::registry()
        .with(fmt)
        .with(chrome)
        .try_init()
        .map_err(|e| Error::config("tracing", format!("cannot install the subscriber: {e}")))?;
    *WRITER.lock() = Some(writer);
    finish_at_exit();
    MESSAGE_MIN.store(message_min, Ordering::Relaxed);
    ENABLED.store(true, Ordering::SeqCst);
    tracing::trace!(
        name: "trace.start", target: IPL,
        unix_us = unix_us(),
        host = %host,
        os_pid,
    );
    Ok(TraceGuard { path: Some(path) })
}

/// Without the `trace` feature nothing can write a trace: asking for one is an error rather
/// than a run that silently leaves no file.
#[cfg(not(feature = "trace"))]
fn start_trace<L>(_fmt: L, dir: &Path, _message_min: u64) -> Result<TraceGuard> {
    Err(Error::config(
        ENV_DIR,
        format!(
            "a trace in {} was asked for, but this build of ipl has no tracing: build it with \
             its `trace` feature (on by default)",
            dir.display()
        ),
    ))
}

/// Starts tracing for a node that joins while `IPL_TRACE` is set, in a program that installed
/// no subscriber of its own; warns once if it did (its subscriber cannot be extended from here).
pub(crate) fn init_for_join() -> Result<()> {
    static ASKED: AtomicBool = AtomicBool::new(false);
    if enabled() || std::env::var_os(ENV_DIR).map_or(true, |d| d.is_empty()) {
        return Ok(());
    }
    if ASKED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    if tracing::dispatcher::has_been_set() {
        tracing::warn!(
            "{ENV_DIR} is set, but this program installed its own tracing subscriber: no trace \
             is written (install it with ipl::trace::init instead)"
        );
        return Ok(());
    }
    // The guard goes: the trace is finished at exit.
    std::mem::forget(init("warn", None)?);
    Ok(())
}

/// Finishes the trace: writes every thread's buffered events and the end of the file. Later
/// events are dropped.
fn finish() {
    #[cfg(feature = "trace")]
    {
        let writer = WRITER.lock().take();
        if writer.is_some() {
            ENABLED.store(false, Ordering::SeqCst);
        }
        drop(writer);
    }
}

/// Finishes the trace when the process exits through `exit`, so that a program that ends with
/// `std::process::exit` still leaves a complete file.
#[cfg(feature = "trace")]
fn finish_at_exit() {
    extern "C" fn at_exit() {
        // Unwinding out of a C callback would abort; a failed finish leaves the file cut short.
        let _ = std::panic::catch_unwind(finish);
    }
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Ordering::SeqCst) {
        // SAFETY: `at_exit` is a plain function that never unwinds; registering it has no
        // other effect.
        unsafe {
            libc::atexit(at_exit);
        }
    }
}

/// Microseconds since the Unix epoch on this host's wall clock.
pub fn unix_us() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

/// This host's name (`gethostname`), or `localhost` where it has none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what we pass.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if rc == 0 && !s.is_empty() => s.to_owned(),
        _ => "localhost".to_owned(),
    }
}

/// `s` with every character a file name should not hold replaced by `_`.
#[cfg_attr(not(feature = "trace"), allow(dead_code))]
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// How this node's clock stands against the registry's, measured at join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    /// The registry's clock minus this node's, in microseconds (0 on the registry's host).
    pub offset_us: i64,
    /// The round trip of the measurement the offset comes from; the offset is off by at most
    /// half of it.
    pub rtt_us: u64,
    /// Whether this node runs on the registry's host, and so shares its clock.
    pub same_host: bool,
}

impl ClockOffset {
    /// The offset for a node that shares the registry's clock.
    pub const SHARED: ClockOffset = ClockOffset {
        offset_us: 0,
        rtt_us: 0,
        same_host: true,
    };

    /// The estimate from one round trip: this node sent at `sent_us` and received at
    /// `received_us` (its own clock) the registry's `registry_us`, read in between.
    pub fn from_round_trip(
        sent_us: i64,
        registry_us: i64,
        received_us: i64,
        same_host: bool,
    ) -> Self {
        let rtt = received_us.saturating_sub(sent_us).max(0);
        ClockOffset {
            offset_us: if same_host {
                0
            } else {
                registry_us.saturating_sub(sent_us.saturating_add(rtt / 2))
            },
            rtt_us: rtt as u64,
            same_host,
        }
    }
}

/// Records this node's join (see the table in the module documentation).
pub(crate) fn joined(me: &crate::NodeId, size: Option<u32>, clock: ClockOffset) {
    tracing::trace!(
        name: "ipl.join", target: IPL,
        rank = me.rank(),
        pool = %me.pool(),
        size = size.unwrap_or(0),
        location = %me.location(),
        clock_offset_us = clock.offset_us,
        clock_rtt_us = clock.rtt_us,
        same_host = clock.same_host,
    );
}

/// Records a membership change this node learnt of.
pub(crate) fn pool_event(ev: &crate::PoolEvent) {
    if !enabled() {
        return;
    }
    let (change, rank) = match ev {
        crate::PoolEvent::Joined(n) => ("joined", n.rank()),
        crate::PoolEvent::Left(n) => ("left", n.rank()),
        crate::PoolEvent::Died(n) => ("died", n.rank()),
        crate::PoolEvent::Closed(all) => ("closed", all.len() as u32),
    };
    tracing::trace!(name: "ipl.pool", target: IPL, change = %change, rank);
}

/// Records that this node leaves its pool, or is ending by a failure.
pub(crate) fn leaving(me: &crate::NodeId, died: bool) {
    tracing::trace!(name: "ipl.leave", target: IPL, rank = me.rank(), died);
}

/// Records a sent message of `bytes` if messages that large are traced: one load and one
/// comparison otherwise.
#[inline]
pub(crate) fn message_sent(bytes: u64) {
    if bytes >= MESSAGE_MIN.load(Ordering::Relaxed) {
        message_event(bytes);
    }
}

#[cold]
fn message_event(bytes: u64) {
    tracing::trace!(name: "ipl.message", target: IPL, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_gives_the_midpoint_offset() {
        // Sent at 1000, received at 1100 (our clock); the registry read 5050 in between.
        let c = ClockOffset::from_round_trip(1000, 5050, 1100, false);
        assert_eq!((c.offset_us, c.rtt_us, c.same_host), (4000, 100, false));
        // A clock behind ours gives a negative offset.
        let c = ClockOffset::from_round_trip(1000, 40, 1020, false);
        assert_eq!(c.offset_us, -970);
        // The same host shares the clock, whatever the measurement says.
        let c = ClockOffset::from_round_trip(1000, 1003, 1010, true);
        assert_eq!((c.offset_us, c.rtt_us), (0, 10));
        // A clock that went backwards during the measurement cannot give a negative trip.
        assert_eq!(ClockOffset::from_round_trip(1000, 0, 990, false).rtt_us, 0);
    }

    #[test]
    fn file_names_hold_only_safe_characters() {
        assert_eq!(file_safe("node-3.cluster_a"), "node-3.cluster_a");
        assert_eq!(file_safe("a/b c:d"), "a_b_c_d");
    }
}
