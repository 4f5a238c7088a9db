//! What a runtime records when the process writes a trace (`IPL_TRACE`, see [`ipl::trace`]):
//! steals, idle periods, aborts, and every interval the counts of what the workers did.
//!
//! Nothing is recorded per spawn or sync, and nothing here runs on the spawn path: counts come
//! from the counters the workers keep anyway ([`Stats`]), read by a sampling thread that runs
//! only in a traced process. Successful local steals, idle periods and aborts are rare next to
//! spawns; each is one event, recorded after a check of one flag.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ipl::trace::SATIN;

use crate::scheduler::Scheduler;
use crate::stats::Stats;

/// How often the sampling thread records the counts.
const INTERVAL: Duration = Duration::from_millis(10);

/// Whether the process writes a trace.
#[inline]
pub(crate) fn enabled() -> bool {
    ipl::trace::enabled()
}

/// Records that worker `thief` took a job from worker `victim` of this process.
#[cold]
pub(crate) fn stole_locally(thief: usize, victim: usize) {
    tracing::trace!(
        name: "satin.steal",
        target: SATIN,
        kind = %"local",
        thief,
        victim,
        success = true,
        bytes = 0u64,
    );
}

/// Records the answer to a steal request this process (rank `thief`) sent to process
/// `victim`: whether it brought a job, and the job's size in bytes.
#[cold]
pub(crate) fn stole_remotely(thief: u32, victim: u32, success: bool, bytes: u64) {
    tracing::trace!(
        name: "satin.steal",
        target: SATIN,
        kind = %"remote",
        thief,
        victim,
        success,
        bytes,
    );
}

/// Records an abort (or a failed run cancelling its jobs), with how many the process has had.
#[cold]
pub(crate) fn aborted() {
    static ABORTS: AtomicU64 = AtomicU64::new(0);
    let generation = ABORTS.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::trace!(name: "satin.abort", target: SATIN, generation);
}

/// The span of an idle period of worker `worker`, entered, if the process writes a trace.
#[cold]
pub(crate) fn idle(worker: usize) -> Option<tracing::span::EnteredSpan> {
    enabled().then(|| tracing::trace_span!(target: SATIN, "satin.idle", worker).entered())
}

/// Starts the thread that records the counts of `sched` every interval until it shuts down,
/// if the process writes a trace.
pub(crate) fn start_sampler(sched: &Arc<Scheduler>) -> Option<JoinHandle<()>> {
    if !enabled() {
        return None;
    }
    tracing::trace!(name: "satin.start", target: SATIN, workers = sched.num_workers());
    let sched = Arc::clone(sched);
    let spawned = thread::Builder::new()
        .name("satin-trace".into())
        .spawn(move || sample(&sched));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("no satin counts in the trace: cannot start the sampling thread: {e}");
            None
        }
    }
}

fn sample(sched: &Scheduler) {
    let mut before = sched.stats();
    let mut at = Instant::now();
    loop {
        // Woken early by the shutdown, to record the last interval at once.
        thread::park_timeout(INTERVAL);
        let stop = sched.shutdown.load(Ordering::Acquire);
        let now = Instant::now();
        if now - at >= INTERVAL || stop {
            let stats = sched.stats();
            record(&stats.since(&before), now - at);
            before = stats;
            at = now;
        }
        if stop {
            break;
        }
    }
}

/// Records the counts of one interval, unless nothing happened in it.
fn record(d: &Stats, interval: Duration) {
    let busy = d.spawns
        + d.syncs
        + d.jobs_executed
        + d.local_steal_attempts
        + d.remote_steal_attempts
        + d.aborts;
    if busy == 0 && d.idle.is_zero() {
        return;
    }
    tracing::trace!(
        name: "satin.counts",
        target: SATIN,
        interval_us = interval.as_micros() as u64,
        spawns = d.spawns,
        syncs = d.syncs,
        executed = d.jobs_executed,
        local_steals = d.local_steals,
        local_steal_attempts = d.local_steal_attempts,
        remote_steals = d.remote_steals,
        remote_steal_attempts = d.remote_steal_attempts,
        aborts = d.aborts,
        idle_us = d.idle.as_micros() as u64,
    );
}
