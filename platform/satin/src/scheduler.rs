#![doc = include_str!("scheduler.md")]

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use crossbeam_deque::{Injector, Steal, Stealer, Worker as Public};
use crossbeam_utils::CachePadded;
use parking_lot::RwLock;

use crate::inlining::Inlining;
use crate::job::JobRef;
use crate::stats::{SharedCounters, Stats, WorkerCounters};
use crate::worker::Worker;
use crate::Error;

/// How long a sleeping worker waits before looking again while runs are active. Wake-ups are
/// sent when work appears, so this only bounds the damage of a wake-up lost to a race.
const PARK_ACTIVE: Duration = Duration::from_millis(1);
/// The same while no run is active: every new root wakes the workers explicitly.
const PARK_IDLE: Duration = Duration::from_millis(100);

/// What other threads may see of one worker.
///
/// `repr(C)` keeps the fields in the order written: the checks of every spawn and sync find
/// the signal word (`publish_request`) at a fixed distance *before* the worker in `slot` (see
/// [`signal_changed`](crate::worker::signal_changed)), which the default representation,
/// free to reorder fields, would not promise.
#[repr(C)]
pub(crate) struct WorkerShared {
    pub(crate) stealer: Stealer<JobRef>,
    /// The worker's signal word: the publish request, which thieves that found the public
    /// deque empty raise so that the owner publishes its private jobs, and the abort
    /// generation (see [`Signal`]).
    pub(crate) publish_request: Signal,
    /// True while the worker is parked (or about to park).
    pub(crate) sleeping: CachePadded<AtomicBool>,
    thread: OnceLock<Thread>,
    pub(crate) counters: CachePadded<WorkerCounters>,
    /// The worker itself, while its thread runs (see [`WorkerSlot`]).
    pub(crate) slot: WorkerSlot,
}

// The distance `signal_changed` steps back from the worker to its signal word is positive.
const _: () = assert!(
    std::mem::offset_of!(WorkerShared, publish_request) < std::mem::offset_of!(WorkerShared, slot)
);

/// Where a worker's thread keeps its [`Worker`]: next to the worker's signal word, so that
/// the checks of every spawn and sync find the word at a fixed distance from the worker, with
/// no pointer to load first (see [`signal_changed`](crate::worker::signal_changed)). Only the
/// worker's own thread touches it.
pub(crate) struct WorkerSlot(UnsafeCell<MaybeUninit<Worker>>);

// SAFETY: only the thread of the slot's worker reaches the worker in it (see `Worker::run`),
// and the slot is empty again before that thread lets go of the scheduler that holds it, so
// the slot is never sent anywhere with a worker in it.
unsafe impl Sync for WorkerSlot {}
// SAFETY: as for `Sync`.
unsafe impl Send for WorkerSlot {}

impl WorkerSlot {
    fn new() -> Self {
        WorkerSlot(UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// Where the worker of `home` goes, as a pointer that reaches the whole of `home` (see
    /// [`Worker::as_ptr`]).
    ///
    /// # Safety
    /// `home` must point to a live `WorkerShared`.
    pub(crate) unsafe fn of(home: *const WorkerShared) -> *mut Worker {
        // SAFETY: as the caller vouches; the place is only named, not read. The memory is in a
        // cell, so it may be written through a pointer from a shared reference.
        unsafe { std::ptr::addr_of!((*home).slot.0) }
            .cast::<Worker>()
            .cast_mut()
    }
}

/// What other threads tell a worker, in one word that its tasks compare with the value they
/// last saw on every spawn and sync, so that both checks cost one load and one comparison:
///
/// - bit 0, the publish request: raised by a thief that found the worker's public deque
///   empty; the worker then publishes its private jobs and lowers it.
/// - bit 1, results kept: raised while the runtime's result table holds results that spawns
///   may reuse (see [`ResultTable`](crate::remote)); a spawn looks the task up only then, so
///   a runtime that keeps none pays nothing for the lookup.
/// - the other bits, the abort generation: bumped (by 4) by every abort and every failing run
///   of the runtime. A task compares it with the generation at which it last found itself not
///   aborted; only after a bump does it walk up its ancestors to see whether the abort
///   concerns it.
///
/// `load` and `store` concern the publish request, as for the flag it once was.
pub(crate) struct Signal(CachePadded<AtomicU64>);

/// The publish request's bit of a [`Signal`].
pub(crate) const PUBLISH: u64 = 1;
/// The bit of a [`Signal`] that says results are kept for reuse.
pub(crate) const REUSE: u64 = 2;
/// The bits of a [`Signal`] that are not the abort generation.
pub(crate) const FLAGS: u64 = PUBLISH | REUSE;
/// One step of the abort generation in a [`Signal`].
const ABORT_STEP: u64 = 4;

impl Signal {
    fn new() -> Self {
        Signal(CachePadded::new(AtomicU64::new(0)))
    }

    /// The whole word.
    #[inline(always)]
    pub(crate) fn word(&self) -> &AtomicU64 {
        &self.0
    }

    /// True while the publish request is raised.
    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> bool {
        self.0.load(order) & PUBLISH != 0
    }

    /// Raises (`true`) or lowers the publish request, leaving the generation alone.
    pub(crate) fn store(&self, raised: bool, order: Ordering) {
        // Read-modify-write, so that a concurrent bump of the generation is never lost; the
        // load first keeps thieves that ask again from writing the worker's line.
        if raised {
            if self.0.load(Ordering::Relaxed) & PUBLISH == 0 {
                self.0.fetch_or(PUBLISH, order);
            }
        } else {
            self.0.fetch_and(!PUBLISH, order);
        }
    }

    /// Raises (`true`) or lowers the bit that says results are kept for reuse.
    pub(crate) fn set_reuse(&self, kept: bool) {
        if kept {
            self.0.fetch_or(REUSE, Ordering::AcqRel);
        } else {
            self.0.fetch_and(!REUSE, Ordering::AcqRel);
        }
    }

    /// Starts a new abort generation.
    fn bump_abort(&self) {
        self.0.fetch_add(ABORT_STEP, Ordering::AcqRel);
    }
}

pub(crate) struct Scheduler {
    pub(crate) workers: Box<[WorkerShared]>,
    pub(crate) inlining: Inlining,
    /// Roots, and jobs put back by the remote hooks, that any worker may take.
    pub(crate) injector: Injector<JobRef>,
    /// Number of workers marked sleeping: a worker that publishes jobs (`Worker::publish`)
    /// looks at it to decide whether to wake one, and the distributed layer to count idle ones.
    pub(crate) sleepers: CachePadded<AtomicUsize>,
    pub(crate) active_roots: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    /// Set once the workers are gone: a root submitted from then on (through a
    /// [`Remote`](crate::remote::Remote) that outlived its runtime) fails at once.
    stopped: AtomicBool,
    pub(crate) shared_counters: SharedCounters,
    pub(crate) next_remote_id: AtomicU64,
    /// Round-robin start for the remote hook's search of a job to give away.
    pub(crate) remote_cursor: AtomicUsize,
    /// Told when a worker finds no local work; see `Remote::set_idle_hook`.
    pub(crate) idle_hook: RwLock<Option<IdleHook>>,
    /// True while an idle hook is installed: sleeping workers then wake often to call it.
    pub(crate) idle_hook_set: AtomicBool,
    /// Told after every abort; see `Remote::set_abort_hook`.
    pub(crate) abort_hook: RwLock<Option<AbortHook>>,
    pub(crate) abort_hook_set: AtomicBool,
    /// Results kept for spawns to reuse; see `remote::ResultTable`.
    pub(crate) results: crate::remote::ResultTable,
}

/// See `Remote::set_idle_hook`.
pub(crate) type IdleHook = Arc<dyn Fn(usize) + Send + Sync>;
/// See `Remote::set_abort_hook`.
pub(crate) type AbortHook = Arc<dyn Fn() + Send + Sync>;

impl Scheduler {
    /// Starts `threads` workers.
    pub(crate) fn start(
        threads: usize,
        stack_size: usize,
        inlining: Inlining,
    ) -> Result<(Arc<Scheduler>, Vec<JoinHandle<()>>), Error> {
        let publics: Vec<Public<JobRef>> = (0..threads).map(|_| Public::new_lifo()).collect();
        let workers = publics
            .iter()
            .map(|p| WorkerShared {
                stealer: p.stealer(),
                publish_request: Signal::new(),
                sleeping: CachePadded::new(AtomicBool::new(false)),
                thread: OnceLock::new(),
                counters: CachePadded::new(WorkerCounters::default()),
                slot: WorkerSlot::new(),
            })
            .collect();
        let sched = Arc::new(Scheduler {
            workers,
            inlining,
            injector: Injector::new(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            active_roots: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            shared_counters: SharedCounters::default(),
            next_remote_id: AtomicU64::new(1),
            remote_cursor: AtomicUsize::new(0),
            idle_hook: RwLock::new(None),
            idle_hook_set: AtomicBool::new(false),
            abort_hook: RwLock::new(None),
            abort_hook_set: AtomicBool::new(false),
            results: Default::default(),
        });
        let mut handles = Vec::with_capacity(threads);
        for (index, public) in publics.into_iter().enumerate() {
            let s = Arc::clone(&sched);
            let spawned = thread::Builder::new()
                .name(format!("satin-worker-{index}"))
                .stack_size(stack_size)
                .spawn(move || Worker::run(index, s, public));
            match spawned {
                Ok(h) => {
                    let _ = sched.workers[index].thread.set(h.thread().clone());
                    handles.push(h);
                }
                Err(source) => {
                    sched.stop(handles);
                    return Err(Error::ThreadStart {
                        index,
                        source: Arc::new(source),
                    });
                }
            }
        }
        handles.extend(crate::trace::start_sampler(&sched));
        tracing::debug!(threads, "satin runtime started");
        Ok((sched, handles))
    }

    /// Asks the workers to exit once idle and waits for them.
    pub(crate) fn stop(&self, handles: Vec<JoinHandle<()>>) {
        self.shutdown.store(true, Ordering::SeqCst);
        for w in self.workers.iter() {
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
        }
        // The trace's sampling thread, if there is one, records its last interval at once.
        for h in &handles {
            h.thread().unpark();
        }
        for h in handles {
            let _ = h.join();
        }
        self.stopped.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.fail_stranded();
        tracing::debug!("satin runtime stopped");
    }

    /// Fails the roots left in the injector once no worker will take them.
    fn fail_stranded(&self) {
        while let Some(job) = steal_settled(|| self.injector.steal()) {
            // SAFETY: taken off the injector by this thread, and never run: no worker is left
            // to have run it. Only roots remain there once the workers are gone: a child goes
            // there only while its parent's frame, and so its worker, waits.
            unsafe { crate::root::fail_unrun(job, self) }
        }
    }

    pub(crate) fn num_workers(&self) -> usize {
        self.workers.len()
    }

    /// True while some root of this runtime runs: more jobs are likely to appear soon.
    #[inline]
    pub(crate) fn runs_active(&self) -> bool {
        self.active_roots.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn park_timeout(&self) -> Duration {
        // With an idle hook, a sleeping worker is also the one that asks other processes for
        // work, so it must come back soon even when this process has nothing running.
        if self.active_roots.load(Ordering::Relaxed) > 0
            || self.idle_hook_set.load(Ordering::Relaxed)
        {
            PARK_ACTIVE
        } else {
            PARK_IDLE
        }
    }

    /// Wakes one sleeping worker, if any.
    #[cold]
    pub(crate) fn wake_one(&self) {
        for w in self.workers.iter() {
            if self.wake(w) {
                return;
            }
        }
    }

    /// Wakes every sleeping worker.
    pub(crate) fn wake_all(&self) {
        for w in self.workers.iter() {
            self.wake(w);
        }
    }

    /// Wakes worker `index` if it sleeps. Called after publishing something that worker waits
    /// for; the sequentially consistent load pairs with the sleeper's store of its flag before it
    /// looks at what it waits for, so one of the two always sees the other.
    #[inline]
    pub(crate) fn wake_worker(&self, index: usize) {
        let w = &self.workers[index];
        if w.sleeping.load(Ordering::SeqCst) {
            self.wake(w);
        }
    }

    fn wake(&self, w: &WorkerShared) -> bool {
        // Whoever flips the flag back accounts for it, so each sleep is counted out once.
        if w.sleeping.load(Ordering::Relaxed) && w.sleeping.swap(false, Ordering::AcqRel) {
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
            true
        } else {
            false
        }
    }

    /// Asks every worker to move private jobs where thieves can see them.
    pub(crate) fn request_publish_all(&self, except: usize) {
        for (i, w) in self.workers.iter().enumerate() {
            if i != except && !w.publish_request.load(Ordering::Relaxed) {
                w.publish_request.store(true, Ordering::Relaxed);
            }
        }
    }

    /// True if some job can be taken without help from its owner.
    pub(crate) fn has_visible_work(&self) -> bool {
        !self.injector.is_empty() || self.workers.iter().any(|w| !w.stealer.is_empty())
    }

    /// Tells every worker's tasks to look whether they have been cancelled: starts a new
    /// abort generation. Called after the abort is recorded (a frame's epoch, a run's kill
    /// flag), so that a task that sees the new generation also sees what changed.
    pub(crate) fn bump_abort_gen(&self) {
        if crate::trace::enabled() {
            crate::trace::aborted();
        }
        for w in self.workers.iter() {
            w.publish_request.bump_abort();
        }
        if self.abort_hook_set.load(Ordering::Acquire) {
            self.call_abort_hook();
        }
    }

    #[cold]
    fn call_abort_hook(&self) {
        let hook = self.abort_hook.read().clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for w in self.workers.iter() {
            w.counters.add_to(&mut s);
        }
        self.shared_counters.add_to(&mut s);
        s
    }

    /// Tells the distributed layer, if one listens, that worker `index` found no local work.
    #[cold]
    pub(crate) fn call_idle_hook(&self, index: usize) {
        let hook = self.idle_hook.read().clone();
        if let Some(hook) = hook {
            hook(index);
        }
    }

    /// Queues a job for any worker and wakes one.
    pub(crate) fn inject(&self, job: JobRef) {
        if self.push_injected(job) {
            self.wake_one();
        }
    }

    /// Queues a new root and wakes every worker: one takes the root, and the others are up
    /// by the time it spawns its first children, rather than starting to wake only then
    /// (waking a thread can take milliseconds, see [`Worker`]'s idle loop).
    pub(crate) fn inject_root(&self, job: JobRef) {
        if self.push_injected(job) {
            self.wake_all();
        }
    }

    /// Pushes `job` on the injector; false if the workers are gone, the job then failed.
    fn push_injected(&self, job: JobRef) -> bool {
        self.injector.push(job);
        // A root that comes after the workers left would wait forever. `stop` sets its flag
        // and then empties the injector; with a fence on both sides, either it finds this job
        // or this thread finds the flag (and empties the injector itself).
        fence(Ordering::SeqCst);
        if self.stopped.load(Ordering::SeqCst) {
            self.fail_stranded();
            return false;
        }
        true
    }
}

/// Steals with `steal` until the attempt settles: the job taken, or `None` where there was
/// none. A `Retry` (the attempt lost a race with the owner or another thief) is tried again at
/// once, after a pause for the processor.
#[inline]
pub(crate) fn steal_settled<T>(mut steal: impl FnMut() -> Steal<T>) -> Option<T> {
    loop {
        match steal() {
            Steal::Success(t) => return Some(t),
            Steal::Empty => return None,
            Steal::Retry => std::hint::spin_loop(),
        }
    }
}
