//! Counters of what the runtime did, and their public summary.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What a runtime has done since it started (or, from [`Stats::since`], between two snapshots).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Children spawned with [`Context::spawn`](crate::Context::spawn).
    pub spawns: u64,
    /// Of those, the ones run at once by the spawn instead of being queued (see
    /// [`Inlining`](crate::Inlining)).
    pub spawns_inlined: u64,
    /// Explicit and implicit syncs that had children to wait for, plus explicit syncs without.
    pub syncs: u64,
    /// Attempts to steal a job from another worker of this process (one per victim tried).
    pub local_steal_attempts: u64,
    /// Attempts that brought back a job.
    pub local_steals: u64,
    /// Calls to [`Context::abort`](crate::Context::abort), plus runs cancelled by a failure.
    pub aborts: u64,
    /// Tasks whose `run` was started.
    pub jobs_executed: u64,
    /// Jobs dropped without running because they had been aborted.
    pub jobs_discarded: u64,
    /// Time workers spent looking for work without finding any, summed over workers.
    pub idle: Duration,
    /// Steal requests this process sent to other processes (reported by the distributed layer).
    pub remote_steal_attempts: u64,
    /// Of those, the ones that brought back a job.
    pub remote_steals: u64,
    /// Of the remote steal attempts, those sent to a node of another location (with
    /// cluster-aware stealing, the asynchronous wide-area requests).
    pub wide_steal_attempts: u64,
    /// Of those, the ones that brought back a job.
    pub wide_steals: u64,
    /// Jobs other processes gave this one, run here as new roots.
    pub jobs_received: u64,
    /// Cancellations this process sent for jobs it had given away and no longer needed.
    pub cancels_sent: u64,
    /// Jobs received from other processes that their owner cancelled while they ran here.
    pub cancels_received: u64,
    /// Jobs of this process handed to other processes through [`remote`](crate::remote).
    pub jobs_sent: u64,
    /// Bytes of tasks and outputs that passed through the [`remote`](crate::remote) hooks.
    pub bytes_moved: u64,
    /// Jobs this process gave to another that died (or left without finishing them), run
    /// again here.
    pub jobs_reexecuted: u64,
    /// Results computed elsewhere for a process that died (orphans), used here instead of
    /// computing their jobs again (see [`remote`](crate::remote#reusing-results)).
    pub orphan_results_reused: u64,
    /// Results of jobs this process had given away that came back from a process that was
    /// leaving the pool.
    pub results_salvaged: u64,
    /// Jobs this process had given away that a leaving process handed back unstarted.
    pub jobs_returned: u64,
    /// Processes that joined the pool during runs, as seen by this one.
    pub nodes_joined: u64,
    /// Processes that left the pool during runs, as seen by this one.
    pub nodes_left: u64,
    /// Processes that died during runs, as seen by this one.
    pub nodes_died: u64,
    /// Messages from other processes that this one refused: undecodable, or sent by a member
    /// that may not send them (only the master ends a run or welcomes a joining process).
    pub messages_refused: u64,
}

impl Stats {
    /// The counts accumulated between `earlier` and `self`.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            spawns: self.spawns.saturating_sub(earlier.spawns),
            spawns_inlined: self.spawns_inlined.saturating_sub(earlier.spawns_inlined),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            local_steal_attempts: self
                .local_steal_attempts
                .saturating_sub(earlier.local_steal_attempts),
            local_steals: self.local_steals.saturating_sub(earlier.local_steals),
            aborts: self.aborts.saturating_sub(earlier.aborts),
            jobs_executed: self.jobs_executed.saturating_sub(earlier.jobs_executed),
            jobs_discarded: self.jobs_discarded.saturating_sub(earlier.jobs_discarded),
            idle: self.idle.saturating_sub(earlier.idle),
            remote_steal_attempts: self
                .remote_steal_attempts
                .saturating_sub(earlier.remote_steal_attempts),
            remote_steals: self.remote_steals.saturating_sub(earlier.remote_steals),
            wide_steal_attempts: self
                .wide_steal_attempts
                .saturating_sub(earlier.wide_steal_attempts),
            wide_steals: self.wide_steals.saturating_sub(earlier.wide_steals),
            jobs_received: self.jobs_received.saturating_sub(earlier.jobs_received),
            cancels_sent: self.cancels_sent.saturating_sub(earlier.cancels_sent),
            cancels_received: self
                .cancels_received
                .saturating_sub(earlier.cancels_received),
            jobs_sent: self.jobs_sent.saturating_sub(earlier.jobs_sent),
            bytes_moved: self.bytes_moved.saturating_sub(earlier.bytes_moved),
            jobs_reexecuted: self.jobs_reexecuted.saturating_sub(earlier.jobs_reexecuted),
            orphan_results_reused: self
                .orphan_results_reused
                .saturating_sub(earlier.orphan_results_reused),
            results_salvaged: self
                .results_salvaged
                .saturating_sub(earlier.results_salvaged),
            jobs_returned: self.jobs_returned.saturating_sub(earlier.jobs_returned),
            nodes_joined: self.nodes_joined.saturating_sub(earlier.nodes_joined),
            nodes_left: self.nodes_left.saturating_sub(earlier.nodes_left),
            nodes_died: self.nodes_died.saturating_sub(earlier.nodes_died),
            messages_refused: self
                .messages_refused
                .saturating_sub(earlier.messages_refused),
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "satin statistics")?;
        writeln!(
            f,
            "  spawns                {} ({} run at once)",
            self.spawns, self.spawns_inlined
        )?;
        writeln!(f, "  syncs                 {}", self.syncs)?;
        writeln!(f, "  jobs executed         {}", self.jobs_executed)?;
        writeln!(f, "  jobs discarded        {}", self.jobs_discarded)?;
        writeln!(f, "  aborts                {}", self.aborts)?;
        writeln!(
            f,
            "  local steals          {} of {} attempts",
            self.local_steals, self.local_steal_attempts
        )?;
        writeln!(
            f,
            "  remote steals         {} of {} attempts",
            self.remote_steals, self.remote_steal_attempts
        )?;
        writeln!(
            f,
            "    to other locations  {} of {} attempts",
            self.wide_steals, self.wide_steal_attempts
        )?;
        writeln!(f, "  jobs sent away        {}", self.jobs_sent)?;
        writeln!(f, "  jobs received         {}", self.jobs_received)?;
        writeln!(
            f,
            "  remote cancellations  {} sent, {} received",
            self.cancels_sent, self.cancels_received
        )?;
        writeln!(f, "  bytes moved           {}", self.bytes_moved)?;
        writeln!(
            f,
            "  nodes                 {} joined, {} left, {} died",
            self.nodes_joined, self.nodes_left, self.nodes_died
        )?;
        writeln!(
            f,
            "  recovery              {} jobs re-executed, {} orphan results reused",
            self.jobs_reexecuted, self.orphan_results_reused
        )?;
        writeln!(
            f,
            "  leavers               {} results salvaged, {} jobs handed back",
            self.results_salvaged, self.jobs_returned
        )?;
        writeln!(f, "  messages refused      {}", self.messages_refused)?;
        write!(
            f,
            "  idle time             {:.3} s",
            self.idle.as_secs_f64()
        )
    }
}

/// Counters of one worker. Only that worker writes them, so a plain load and store is enough
/// and no read-modify-write instruction sits on the spawn path; readers see a recent value.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    spawns: AtomicU64,
    inlined: AtomicU64,
    syncs: AtomicU64,
    steal_attempts: AtomicU64,
    steals: AtomicU64,
    aborts: AtomicU64,
    executed: AtomicU64,
    discarded: AtomicU64,
    pub(crate) idle_ns: AtomicU64,
}

/// Adds `n` to a counter that only the calling thread writes.
#[inline(always)]
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Counts a worker keeps in its own memory, next to its deque, so that bumping one on the spawn
/// path is a single increment. A spawn that runs its child at once bumps `inlined` alone, which
/// counts as a spawn and an executed job both: spawns and `executed` leave those out.
///
/// Two counts cost the spawn and sync paths nothing of their own, because the deque keeps them
/// anyway: a queued spawn is a push, and a child that its parent pops is executed right then,
/// unless it is dropped unrun, which [`Worker::discard`](crate::worker::Worker::discard) takes
/// back out of `executed`. The counts are added to the worker's [`WorkerCounters`] whenever the
/// worker finishes a job it did not spawn itself (before the completion is published, so a
/// finished run's counts are all visible) and while it idles; between a pop and its run or
/// drop nothing adds them.
#[derive(Default)]
pub(crate) struct LocalCounters {
    pub(crate) inlined: Cell<u64>,
    pub(crate) syncs: Cell<u64>,
    /// Jobs executed other than by their parent's pop: taken from elsewhere, less those popped
    /// by their parent and dropped unrun (wrapping below zero until the pops are added).
    pub(crate) executed: Cell<u64>,
    pub(crate) discarded: Cell<u64>,
    pub(crate) aborts: Cell<u64>,
    pub(crate) steal_attempts: Cell<u64>,
    pub(crate) steals: Cell<u64>,
    /// The deque's pushes and pops by parents at the last flush.
    flushed_pushed: Cell<u64>,
    flushed_popped: Cell<u64>,
}

/// Adds one to a worker-local count.
#[inline(always)]
pub(crate) fn bump(c: &Cell<u64>) {
    c.set(c.get().wrapping_add(1));
}

/// Takes one off a worker-local count.
#[inline(always)]
pub(crate) fn unbump(c: &Cell<u64>) {
    c.set(c.get().wrapping_sub(1));
}

impl LocalCounters {
    /// Adds the counts since the last flush to `to`, given the deque's
    /// [`pushed`](crate::deque::Deque::pushed) and
    /// [`popped_by_parents`](crate::deque::Deque::popped_by_parents).
    pub(crate) fn flush_into(&self, to: &WorkerCounters, pushed: u64, popped_by_parents: u64) {
        let spawns = pushed.wrapping_sub(self.flushed_pushed.replace(pushed));
        let popped = popped_by_parents.wrapping_sub(self.flushed_popped.replace(popped_by_parents));
        add(&to.spawns, spawns);
        add(&to.inlined, self.inlined.take());
        add(&to.syncs, self.syncs.take());
        add(&to.executed, self.executed.take().wrapping_add(popped));
        add(&to.discarded, self.discarded.take());
        add(&to.aborts, self.aborts.take());
        add(&to.steal_attempts, self.steal_attempts.take());
        add(&to.steals, self.steals.take());
    }
}

/// Counters that any thread may bump (the remote hooks run on threads of the distributed layer).
#[derive(Default)]
pub(crate) struct SharedCounters {
    pub(crate) aborts: AtomicU64,
    pub(crate) remote_steal_attempts: AtomicU64,
    pub(crate) remote_steals: AtomicU64,
    pub(crate) wide_steal_attempts: AtomicU64,
    pub(crate) wide_steals: AtomicU64,
    pub(crate) jobs_received: AtomicU64,
    pub(crate) cancels_sent: AtomicU64,
    pub(crate) cancels_received: AtomicU64,
    pub(crate) jobs_sent: AtomicU64,
    pub(crate) bytes_moved: AtomicU64,
    pub(crate) jobs_reexecuted: AtomicU64,
    pub(crate) results_reused: AtomicU64,
    pub(crate) results_salvaged: AtomicU64,
    pub(crate) jobs_returned: AtomicU64,
    pub(crate) nodes_joined: AtomicU64,
    pub(crate) nodes_left: AtomicU64,
    pub(crate) nodes_died: AtomicU64,
    pub(crate) messages_refused: AtomicU64,
}

impl WorkerCounters {
    pub(crate) fn add_to(&self, s: &mut Stats) {
        let inlined = self.inlined.load(Relaxed);
        s.spawns += self.spawns.load(Relaxed) + inlined;
        s.spawns_inlined += inlined;
        s.syncs += self.syncs.load(Relaxed);
        s.local_steal_attempts += self.steal_attempts.load(Relaxed);
        s.local_steals += self.steals.load(Relaxed);
        s.aborts += self.aborts.load(Relaxed);
        s.jobs_executed += self.executed.load(Relaxed) + inlined;
        s.jobs_discarded += self.discarded.load(Relaxed);
        s.idle += Duration::from_nanos(self.idle_ns.load(Relaxed));
    }
}

impl SharedCounters {
    pub(crate) fn add_to(&self, s: &mut Stats) {
        s.aborts += self.aborts.load(Relaxed);
        s.remote_steal_attempts += self.remote_steal_attempts.load(Relaxed);
        s.remote_steals += self.remote_steals.load(Relaxed);
        s.wide_steal_attempts += self.wide_steal_attempts.load(Relaxed);
        s.wide_steals += self.wide_steals.load(Relaxed);
        s.jobs_received += self.jobs_received.load(Relaxed);
        s.cancels_sent += self.cancels_sent.load(Relaxed);
        s.cancels_received += self.cancels_received.load(Relaxed);
        s.jobs_sent += self.jobs_sent.load(Relaxed);
        s.bytes_moved += self.bytes_moved.load(Relaxed);
        s.jobs_reexecuted += self.jobs_reexecuted.load(Relaxed);
        s.orphan_results_reused += self.results_reused.load(Relaxed);
        s.results_salvaged += self.results_salvaged.load(Relaxed);
        s.jobs_returned += self.jobs_returned.load(Relaxed);
        s.nodes_joined += self.nodes_joined.load(Relaxed);
        s.nodes_left += self.nodes_left.load(Relaxed);
        s.nodes_died += self.nodes_died.load(Relaxed);
        s.messages_refused += self.messages_refused.load(Relaxed);
    }
}
