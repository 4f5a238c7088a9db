//! What a process records of its supersteps when the run is traced (`IPL_TRACE`, see
//! [`ipl::trace`]): one `bsp.superstep` event at the end of every `sync`, with how long the
//! superstep computed (from the end of the previous `sync`), sent, and waited in the sync (the
//! barrier and the others' data), and what it sent. `bench-harness timeline` turns each into
//! compute, send and wait slices.
//!
//! One event per superstep, timed with the clock the process reads anyway, rather than a span
//! per phase: each event costs the traced process its rendering (about a microsecond for this
//! one's twelve fields), and a superstep of a fine-grained program such as SOR at its quick
//! size lasts about fifty, so four spans (eight events) per superstep would cost more than the
//! 5% a trace may.
//!
//! Collectives do not end supersteps; the event counts those called in the compute phase and
//! the time they spent sending and receiving, so that a chart can tell computation from
//! communication.

use ipl::trace::BSP;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The trace state of one handle; absent when the process writes no trace.
#[derive(Debug)]
pub(crate) struct StepTrace {
    /// When the current compute phase began: the end of the last sync, or the start.
    computing_since: Instant,
    /// Collectives started in the current compute phase.
    collectives: AtomicU64,
    /// Nanoseconds spent in sends and receives of rounds since the compute phase began.
    round_ns: AtomicU64,
    /// Bytes and messages sent early (memory budget) in the current superstep.
    pub(crate) early_bytes: u64,
    pub(crate) early_messages: u64,
}

/// What a sync sent, and when its parts ended, for its event.
pub(crate) struct SyncTrace {
    /// When the sync was called.
    pub(crate) begun: Instant,
    /// How long the compute phase before it lasted, in microseconds.
    pub(crate) compute_us: f64,
    /// Collectives called in the compute phase, and their time in rounds.
    pub(crate) collectives: u64,
    pub(crate) collective_us: f64,
    /// What the superstep sent to other processes.
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    pub(crate) messages: u64,
    /// When the combined packets were out.
    pub(crate) sent: Option<Instant>,
}

impl StepTrace {
    /// The trace state of a new handle, or none when nothing is traced.
    pub(crate) fn new() -> Option<Box<StepTrace>> {
        ipl::trace::enabled().then(|| {
            Box::new(StepTrace {
                computing_since: Instant::now(),
                collectives: AtomicU64::new(0),
                round_ns: AtomicU64::new(0),
                early_bytes: 0,
                early_messages: 0,
            })
        })
    }

    /// Starts a compute phase now.
    pub(crate) fn begin_compute(&mut self) {
        self.computing_since = Instant::now();
        self.collectives.store(0, Relaxed);
        self.round_ns.store(0, Relaxed);
    }

    /// A sync starts: ends the compute phase and takes what the superstep sent early.
    pub(crate) fn sync_begins(&mut self) -> SyncTrace {
        let begun = Instant::now();
        SyncTrace {
            begun,
            compute_us: micros(begun - self.computing_since),
            collectives: self.collectives.load(Relaxed),
            collective_us: self.round_ns.load(Relaxed) as f64 / 1000.0,
            packets: 0,
            bytes: std::mem::take(&mut self.early_bytes),
            messages: std::mem::take(&mut self.early_messages),
            sent: None,
        }
    }

    /// Counts a collective that starts.
    pub(crate) fn collective(&self) {
        self.collectives.fetch_add(1, Relaxed);
    }

    /// Adds the time since `since` to the time spent in rounds.
    pub(crate) fn round(&self, since: Instant) {
        self.round_ns
            .fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
    }
}

fn micros(d: std::time::Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

impl SyncTrace {
    /// Records superstep `step` of process `pid` in group `comm` (0: the whole machine), whose
    /// sync ends now.
    pub(crate) fn record(&self, step: u64, pid: usize, comm: u64) {
        let end = Instant::now();
        let sent = self.sent.unwrap_or(end);
        tracing::trace!(
            name: "bsp.superstep",
            target: BSP,
            step,
            pid,
            comm,
            compute_us = self.compute_us,
            sync_us = micros(end - self.begun),
            send_us = micros(sent - self.begun),
            collectives = self.collectives,
            collective_us = self.collective_us,
            packets = self.packets,
            bytes = self.bytes,
            messages = self.messages,
        );
    }
}
