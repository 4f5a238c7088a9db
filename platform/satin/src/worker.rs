//! A worker thread: runs its own jobs depth-first, steals the oldest jobs of others when it
//! has none, and never blocks while work exists anywhere.

use std::cell::{Cell, UnsafeCell};
use std::hint;
use std::mem::ManuallyDrop;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crossbeam_deque::{Steal, Worker as Public};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::context::{Context, UnwindGuard};
use crate::deque::Deque;
use crate::job::{Job, JobHeader, JobRef, DONE, ORPHANED, PENDING};
use crate::recycle::Recycler;
use crate::root;
use crate::scheduler::{Scheduler, WorkerShared, ABORT_GEN};
use crate::stats::{add, bump, LocalCounters, WorkerCounters};
use crate::Task;

/// Who runs a job, which decides how its completion is published.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Popped by the thread that spawned it, which also holds its handle: plain stores suffice.
    Inline,
    /// Run by any other thread, or by the owner outside the frame that spawned it.
    Stolen,
    /// A root: its completion is delivered to whoever submitted it.
    Root,
    /// Run by `Context::call`, with a frame header on the caller's stack and no record.
    Called,
}

/// Rounds of pure spinning before yielding, then rounds of yielding before parking.
const SPIN_ROUNDS: u32 = 6;
const YIELD_ROUNDS: u32 = 10;

thread_local! {
    static CURRENT: Cell<*const Worker> = const { Cell::new(ptr::null()) };
}

pub(crate) struct Worker {
    // Fields of the spawn and sync paths first, reachable from the context in one step.
    deque: Deque,
    recycler: UnsafeCell<Recycler>,
    pub(crate) local: LocalCounters,
    /// This worker's publish-request flag in `sched.workers`.
    publish_request: *const AtomicBool,
    /// The scheduler's [`Inlining`](crate::Inlining) thresholds, at hand for every spawn.
    inline_depth: u16,
    inline_queued: u32,
    pub(crate) index: usize,
    pub(crate) sched: Arc<Scheduler>,
    rng: UnsafeCell<SmallRng>,
}

impl Worker {
    pub(crate) fn new(index: usize, sched: Arc<Scheduler>, public: Public<JobRef>) -> Self {
        // The pointer stays valid as long as `sched`, which the worker owns a reference to.
        let publish_request: *const AtomicBool = &*sched.workers[index].publish_request;
        Worker {
            deque: Deque::new(public),
            recycler: UnsafeCell::new(Recycler::new()),
            local: LocalCounters::default(),
            publish_request,
            inline_depth: sched.inlining.min_depth,
            inline_queued: sched.inlining.min_queued,
            index,
            sched,
            rng: UnsafeCell::new(SmallRng::seed_from_u64(0x5a71_9e37 ^ index as u64)),
        }
    }

    /// The worker running on this thread, if any.
    pub(crate) fn current<'a>() -> Option<&'a Worker> {
        let p = CURRENT.with(|c| c.get());
        // SAFETY: the pointer is set only while `main_loop` keeps the worker alive on this thread.
        unsafe { p.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn shared(&self) -> &WorkerShared {
        // SAFETY: `index` is in range by construction.
        unsafe { self.sched.workers.get_unchecked(self.index) }
    }

    #[inline(always)]
    pub(crate) fn counters(&self) -> &WorkerCounters {
        &self.shared().counters
    }

    /// Makes the worker-local counts visible to `Runtime::stats`.
    pub(crate) fn flush_counters(&self) {
        self.local.flush_into(self.counters());
    }

    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn recycler(&self) -> &mut Recycler {
        // SAFETY: only this thread uses the recycler, and no caller keeps the reference across
        // a call that could reach the recycler again.
        unsafe { &mut *self.recycler.get() }
    }

    pub(crate) fn main_loop(self) {
        CURRENT.with(|c| c.set(&self));
        // SAFETY: `self` lives until the end of this function, after `uninstall`.
        unsafe { (*self.recycler.get()).install() };
        tracing::trace!(worker = self.index, "worker started");

        let mut idle = Idle::new();
        loop {
            if let Some(job) = self.find_work() {
                idle.reset(self.counters());
                self.run_taken(job);
                continue;
            }
            if self.sched.shutdown.load(Ordering::Acquire) {
                break;
            }
            idle.step(&self, || self.sched.shutdown.load(Ordering::SeqCst));
        }
        idle.reset(self.counters());
        self.flush_counters();

        Recycler::uninstall();
        CURRENT.with(|c| c.set(ptr::null()));
        tracing::trace!(worker = self.index, "worker stopped");
    }

    /// The link a job about to be spawned must be created with.
    #[inline(always)]
    pub(crate) fn link_for_push(&self) -> crate::job::Link {
        self.deque.link_for_push()
    }

    /// Puts a freshly spawned job, created with [`link_for_push`](Worker::link_for_push), on
    /// the deque.
    #[inline(always)]
    pub(crate) fn push(&self, job: JobRef) {
        self.deque.push(job);
        // Sleeping workers raise every publish request before they park, and publishing wakes
        // one, so this single check also covers waking sleepers.
        self.serve_publish_request();
    }

    /// Frames at least this deep may run spawned children at once (see
    /// [`Inlining`](crate::Inlining)).
    #[inline(always)]
    pub(crate) fn inline_depth(&self) -> u16 {
        self.inline_depth
    }

    /// True if enough jobs wait unpublished here that a spawn deep in the tree may run its
    /// child at once. Serves a pending publish request first, so that a thief's request turns
    /// the following spawns back into queued ones.
    #[inline(always)]
    pub(crate) fn has_queued_work(&self) -> bool {
        self.serve_publish_request();
        self.deque.private_len() >= self.inline_queued
    }

    /// Pops the newest job if it is a child of `frame`.
    #[inline(always)]
    pub(crate) fn pop_child(&self, frame: &JobHeader) -> Option<JobRef> {
        self.serve_publish_request();
        self.deque.pop_child(frame)
    }

    #[inline(always)]
    fn serve_publish_request(&self) {
        // SAFETY: points into the scheduler, which `self.sched` keeps alive.
        if unsafe { (*self.publish_request).load(Ordering::Relaxed) } {
            self.publish();
        }
    }

    #[cold]
    fn publish(&self) {
        // With nothing to publish the request stays up, so the next spawn is published at once.
        if self.deque.publish() > 0 {
            self.shared()
                .publish_request
                .store(false, Ordering::Relaxed);
            if self.sched.sleepers.load(Ordering::Relaxed) != 0 {
                self.sched.wake_one();
            }
        }
    }

    /// Runs a child popped from this worker's deque by its parent's frame, which has checked
    /// that it was not aborted as of generation `seen_gen`.
    #[inline(always)]
    pub(crate) fn run_child(&self, job: JobRef, seen_gen: u64) {
        let h = job.header();
        let gen = ABORT_GEN.load(Ordering::Acquire);
        // `Context::abort` drops the frame's children from this deque at once, so a child
        // popped here can only be aborted from further up, which shows in the generation.
        if gen == seen_gen {
            // SAFETY: the job was just taken off the deque, so this thread is its only executor.
            unsafe { (h.vtable.run_inline)(job, self, seen_gen) }
        } else {
            self.run_checked(job, Mode::Inline, gen);
        }
    }

    /// Runs a child popped by its parent's frame right after that frame found itself not
    /// aborted at generation `seen_gen`, with nothing run in between: no check is needed.
    #[inline(always)]
    pub(crate) fn run_child_fresh(&self, job: JobRef, seen_gen: u64) {
        // SAFETY: the job was just taken off the deque, so this thread is its only executor.
        unsafe { (job.header().vtable.run_inline)(job, self, seen_gen) }
    }

    /// Runs a job taken from the injector, from another worker, or from an outer frame.
    pub(crate) fn run_taken(&self, job: JobRef) {
        let gen = ABORT_GEN.load(Ordering::Acquire);
        if gen == 0 {
            // SAFETY: taking the job off a deque made this thread its only executor.
            unsafe { (job.header().vtable.run_taken)(job, self, gen) }
        } else {
            let mode = if job.header().parent.is_null() {
                Mode::Root
            } else {
                Mode::Stolen
            };
            self.run_checked(job, mode, gen);
        }
    }

    #[cold]
    fn run_checked(&self, job: JobRef, mode: Mode, gen: u64) {
        if job.is_aborted() {
            self.discard(job, mode);
            return;
        }
        let vt = job.header().vtable;
        // SAFETY: as in the callers, this thread is the job's only executor.
        unsafe {
            match mode {
                Mode::Inline => (vt.run_inline)(job, self, gen),
                _ => (vt.run_taken)(job, self, gen),
            }
        }
    }

    /// Drops a job that will never run and reports it finished as aborted.
    pub(crate) fn discard(&self, job: JobRef, mode: Mode) {
        // SAFETY: the job never ran, so its slot still holds the task.
        unsafe { (job.header().vtable.discard)(job) };
        bump(&self.local.discarded);
        // SAFETY: the job is finished and this thread is its executor.
        unsafe { self.finish(job, crate::job::ABORTED, mode) };
    }

    /// Publishes the final state of a job this thread executed.
    ///
    /// # Safety
    /// This thread must be the job's executor, and be done with its task and output slot.
    #[inline(always)]
    pub(crate) unsafe fn finish(&self, job: JobRef, state: u8, mode: Mode) {
        match mode {
            Mode::Inline => {
                let h = job.header();
                // The handle lives on this thread too, so nobody races with this load.
                if h.state.load(Ordering::Relaxed) == ORPHANED {
                    free_unclaimed(job, state);
                } else {
                    h.state.store(state, Ordering::Release);
                }
            }
            Mode::Stolen => finish_elsewhere(job, state, &self.sched),
            Mode::Root => root::finish(job, state, &self.sched),
            Mode::Called => job.header().state.store(state, Ordering::Relaxed),
        }
    }

    /// True if the newest job of the private stack is a child of `frame`.
    #[inline(always)]
    pub(crate) fn has_private_child(&self, frame: &JobHeader) -> bool {
        self.deque.has_private_child(frame)
    }

    /// Waits until every child of `frame` that left this thread's private stack (its `away`
    /// children) has finished, running other work meanwhile, and resets the count. The frame
    /// must have no child left on the private stack.
    #[cold]
    pub(crate) fn sync_away(&self, frame: &JobHeader) {
        let done = || frame.away.get() == frame.stolen_done.load(Ordering::SeqCst);
        if !done() {
            let mut idle = Idle::new();
            while !done() {
                if let Some(job) = self.find_help() {
                    // The clock stops before the job runs: its time is work, not idling.
                    idle.reset(self.counters());
                    self.run_taken(job);
                } else {
                    idle.step(self, done);
                }
            }
            idle.reset(self.counters());
        }
        // No child of the frame is left anywhere, so nothing else touches the counts now.
        frame.away.set(0);
        frame.stolen_done.store(0, Ordering::Relaxed);
    }

    /// Waits until `job`, a child spawned on this thread, is finished; returns its state.
    pub(crate) fn wait_for(&self, job: JobRef) -> u8 {
        // SAFETY: the parent is alive: its task holds the handle that asked.
        let frame = unsafe { &*job.header().parent };
        let state = || job.header().state.load(Ordering::Acquire);
        let mut idle = Idle::new();
        loop {
            let s = state();
            if s != PENDING {
                idle.reset(self.counters());
                return s;
            }
            if let Some(child) = self.pop_child(frame) {
                idle.reset(self.counters());
                // No generation was verified here, so the check walks ancestors if any abort happened.
                self.run_child(child, u64::MAX);
            } else if let Some(job) = self.find_help() {
                idle.reset(self.counters());
                self.run_taken(job);
            } else {
                idle.step(self, || state() != PENDING);
            }
        }
    }

    /// Runs one job from anywhere but the waiting frame's own children. Returns false if
    /// there was none.
    pub(crate) fn help_once(&self) -> bool {
        match self.find_help() {
            Some(job) => {
                self.run_taken(job);
                true
            }
            None => false,
        }
    }

    /// A job for a thread waiting at a frame: from anywhere but the frame's own children.
    fn find_help(&self) -> Option<JobRef> {
        // The newest job left here belongs to an outer frame and is what this thread would run
        // next anyway once the waiting frame returns; running it now keeps the thread busy
        // without taking work a thief could use better (thieves take the oldest).
        if let Some(job) = self.deque.pop_any() {
            job.header().owner.set(self.index as u32);
            return Some(job);
        }
        self.find_work()
    }

    fn find_work(&self) -> Option<JobRef> {
        loop {
            match self.sched.injector.steal() {
                Steal::Success(job) => return Some(job),
                Steal::Empty => break,
                Steal::Retry => hint::spin_loop(),
            }
        }
        self.steal_from_others()
    }

    /// Tries every other worker once, starting at a random one, and takes the oldest job of
    /// the first that has one.
    fn steal_from_others(&self) -> Option<JobRef> {
        let workers = &self.sched.workers;
        let n = workers.len();
        if n < 2 {
            return None;
        }
        // SAFETY: only this thread uses the generator.
        let start = unsafe { (*self.rng.get()).gen_range(0..n) };
        let counters = &self.local;
        for k in 0..n {
            let v = (start + k) % n;
            if v == self.index {
                continue;
            }
            let victim = &workers[v];
            bump(&counters.steal_attempts);
            loop {
                match victim.stealer.steal() {
                    Steal::Success(job) => {
                        bump(&counters.steals);
                        job.header().owner.set(v as u32);
                        return Some(job);
                    }
                    Steal::Empty => {
                        // Its private jobs are invisible: ask it to publish some.
                        if !victim.publish_request.load(Ordering::Relaxed) {
                            victim.publish_request.store(true, Ordering::Relaxed);
                        }
                        break;
                    }
                    Steal::Retry => hint::spin_loop(),
                }
            }
        }
        None
    }

    /// Parks this worker until woken, or a short timeout, unless `ready` says there is no need.
    fn sleep(&self, ready: impl Fn() -> bool) {
        let shared = self.shared();
        let sched = &self.sched;
        shared.sleeping.store(true, Ordering::SeqCst);
        sched.sleepers.fetch_add(1, Ordering::SeqCst);
        sched.request_publish_all(self.index);
        if !ready() && !sched.has_visible_work() && self.deque.is_empty() {
            thread::park_timeout(sched.park_timeout());
        }
        if shared.sleeping.swap(false, Ordering::AcqRel) {
            sched.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Completion by a thread that is not the job's owner (a thief, or the distributed layer).
///
/// # Safety
/// The caller must be the job's executor and be done with its task and output slot.
pub(crate) unsafe fn finish_elsewhere(job: JobRef, state: u8, sched: &Scheduler) {
    let h = job.header();
    // Read before the swap: once it is published the owner may free the record.
    let parent = &*h.parent;
    let owner = h.owner.get() as usize;
    if h.state.swap(state, Ordering::AcqRel) == ORPHANED {
        free_unclaimed(job, state);
    }
    parent.stolen_done.fetch_add(1, Ordering::SeqCst);
    sched.wake_worker(owner);
}

/// Frees a finished job whose handle was dropped unread.
unsafe fn free_unclaimed(job: JobRef, state: u8) {
    if state == DONE {
        (job.header().vtable.drop_output)(job);
    }
    job.free();
}

/// Runs a child popped by the frame that spawned it: `run_inline` of `Job<T>`'s vtable.
///
/// # Safety
/// `job` must be a pending `Job<T>` whose only executor is the calling thread on `worker`.
pub(crate) unsafe fn run_inline<T: Task>(job: JobRef, worker: &Worker, seen_gen: u64) {
    execute::<T>(job, worker, Mode::Inline, seen_gen)
}

/// Runs a stolen job or a root: `run_taken` of `Job<T>`'s vtable.
///
/// # Safety
/// As for [`run_inline`].
pub(crate) unsafe fn run_taken<T: Task>(job: JobRef, worker: &Worker, seen_gen: u64) {
    let mode = if job.header().parent.is_null() {
        Mode::Root
    } else {
        Mode::Stolen
    };
    execute::<T>(job, worker, mode, seen_gen)
}

/// Runs a job of type `T` and publishes its completion. Inlined into one entry point per mode
/// so that the mode is a constant there and costs no branch.
///
/// # Safety
/// As for [`run_inline`].
#[inline(always)]
unsafe fn execute<T: Task>(job: JobRef, worker: &Worker, mode: Mode, seen_gen: u64) {
    let slot = Job::<T>::slot(job);
    let task = ManuallyDrop::take(&mut (*slot).task);
    if mode != Mode::Inline {
        // Taken from elsewhere: a large piece, whose top levels thieves should be able to split.
        job.header().depth.set(0);
    }
    bump(&worker.local.executed);
    let mut cx = Context::new(worker, job, seen_gen);
    let state = if mode == Mode::Inline {
        // A panic here unwinds on into the parent's frame, which runs on this thread too;
        // the guard finishes this job on the way.
        let guard = UnwindGuard::<T, false>::new(&cx);
        let output = task.run(&mut cx);
        cx.implicit_sync();
        std::mem::forget(guard);
        (*slot).output = ManuallyDrop::new(output);
        DONE
    } else {
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            let output = task.run(&mut cx);
            cx.implicit_sync();
            output
        }));
        match result {
            Ok(output) => {
                (*slot).output = ManuallyDrop::new(output);
                DONE
            }
            Err(payload) => cx.recover(payload, std::any::type_name::<T>()),
        }
    };
    if matches!(mode, Mode::Stolen | Mode::Root) {
        worker.flush_counters();
    }
    worker.finish(job, state, mode);
}

/// Backoff of a worker that found nothing to do: spin, then yield, then park.
struct Idle {
    rounds: u32,
    since: Option<Instant>,
}

impl Idle {
    fn new() -> Self {
        Idle {
            rounds: 0,
            since: None,
        }
    }

    fn step(&mut self, worker: &Worker, ready: impl Fn() -> bool) {
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        if self.rounds < SPIN_ROUNDS {
            for _ in 0..(1u32 << self.rounds) {
                hint::spin_loop();
            }
        } else {
            // Account as we go, so an idle stretch shows up in statistics read meanwhile.
            self.flush(worker.counters());
            worker.flush_counters();
            // Local stealing has failed for a while: let a distributed layer look elsewhere,
            // once when the worker starts yielding and again before every sleep.
            if self.rounds == SPIN_ROUNDS || self.rounds >= SPIN_ROUNDS + YIELD_ROUNDS {
                worker.sched.call_idle_hook(worker.index);
            }
            if self.rounds < SPIN_ROUNDS + YIELD_ROUNDS {
                thread::yield_now();
            } else {
                worker.sleep(ready);
            }
        }
        self.rounds = self.rounds.saturating_add(1);
    }

    fn flush(&mut self, counters: &WorkerCounters) {
        if let Some(t) = self.since {
            let now = Instant::now();
            add(&counters.idle_ns, (now - t).as_nanos() as u64);
            self.since = Some(now);
        }
    }

    fn reset(&mut self, counters: &WorkerCounters) {
        self.flush(counters);
        self.since = None;
        self.rounds = 0;
    }
}
