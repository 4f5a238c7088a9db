//! A worker thread: runs its own jobs depth-first, and steals the oldest jobs of others when
//! it has none. It parks only when no job is visible to it (the injector and the public
//! deques; jobs other workers keep private are published when it asks), and then for at most
//! a millisecond while a run is active.

use std::cell::{Cell, UnsafeCell};
use std::hint;
use std::mem::{align_of, offset_of, size_of};
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_deque::Worker as Public;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::arena::{self, Arena};
use crate::context::{Context, RecordGuard};
use crate::deque::Deque;
use crate::job::{Frame, Job, JobRef, DONE, PENDING};
use crate::root;
use crate::scheduler::{
    steal_settled, Scheduler, Signal, WorkerShared, WorkerSlot, FLAGS, PUBLISH,
};
use crate::stats::{add, bump, unbump, LocalCounters, WorkerCounters};
use crate::{Error, Task};

/// Who runs a job, which decides how its completion is published.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Popped by the thread that spawned it, which also holds its handle: plain stores suffice.
    Inline,
    /// Run by any other thread, or by the owner outside the frame that spawned it.
    Stolen,
    /// A root: its completion is delivered to whoever submitted it.
    Root,
}

/// Rounds of pure spinning before yielding, then rounds of yielding before parking.
const SPIN_ROUNDS: u32 = 6;
const YIELD_ROUNDS: u32 = 10;
/// While a run is active, an idle worker keeps yielding (rather than parking) until it has
/// been idle this long. Waking a parked thread can take milliseconds where the kernel queues
/// the woken thread behind a busy one (virtual machines that pack vCPUs do), while the next
/// job of a running computation usually appears within microseconds; a yielding worker gives
/// its core to any other runnable thread, so it costs only a core nobody else wanted.
const YIELD_WHILE_ACTIVE: Duration = Duration::from_millis(2);

thread_local! {
    static CURRENT: Cell<*const Worker> = const { Cell::new(ptr::null()) };
}

pub(crate) struct Worker {
    // Fields of the spawn and sync paths first, reachable from the context in one step.
    deque: Deque,
    /// Where this worker's spawns put their records.
    pub(crate) arena: Arena,
    pub(crate) local: LocalCounters,
    /// Where this worker lives: in the slot of its [`WorkerShared`] (see [`run`](Worker::run)),
    /// as a pointer that reaches the whole of that, the signal word too. Contexts hold it (see
    /// [`Context::signal_changed`]).
    me: *const Worker,
    /// The scheduler's [`Inlining`](crate::Inlining) depth, at hand for every spawn; the
    /// deque keeps the threshold of queued jobs.
    inline_depth: u32,
    /// Records of children whose handles were dropped before the child finished, newest
    /// last: the frame that spawned them drops their outputs when it ends. Frames nest, so a
    /// frame's are the last ones.
    orphans: UnsafeCell<Vec<JobRef>>,
    pub(crate) index: usize,
    pub(crate) sched: Arc<Scheduler>,
    rng: UnsafeCell<SmallRng>,
}

impl Worker {
    /// Runs worker `index` on this thread until the scheduler shuts down: the worker lives in
    /// its slot (see [`WorkerSlot`]) meanwhile, and nowhere else, which [`signal_changed`]
    /// relies on.
    pub(crate) fn run(index: usize, sched: Arc<Scheduler>, public: Public<JobRef>) {
        // A pointer to the whole `WorkerShared`, not to its slot alone, so that the worker's
        // address in contexts reaches the signal word too.
        // SAFETY: `sched` keeps the scheduler, and so the `WorkerShared`, alive.
        let slot = unsafe { WorkerSlot::of(&sched.workers[index]) };
        // SAFETY: only this thread, the worker's, uses the slot, which is empty: each worker
        // runs once. The scheduler, which `sched` keeps alive, holds the slot.
        let worker = unsafe {
            slot.write(Worker::new(index, Arc::clone(&sched), public, slot));
            &*slot
        };
        /// Empties the slot when the worker is done, even by unwinding.
        struct Vacate(*mut Worker);
        impl Drop for Vacate {
            fn drop(&mut self) {
                // SAFETY: the worker was written in the slot above, and nothing uses it after
                // its main loop.
                unsafe { self.0.drop_in_place() }
            }
        }
        let _vacate = Vacate(slot);
        worker.main_loop();
    }

    fn new(index: usize, sched: Arc<Scheduler>, public: Public<JobRef>, me: *const Worker) -> Self {
        Worker {
            me,
            deque: Deque::new(public, sched.inlining.min_queued),
            arena: Arena::new(),
            local: LocalCounters::default(),
            // `Inlining::OFF` never inlines, however deep a frame.
            inline_depth: match sched.inlining.min_depth {
                u16::MAX => u32::MAX,
                d => u32::from(d),
            },
            orphans: UnsafeCell::new(Vec::new()),
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
        self.local.flush_into(
            self.counters(),
            self.deque.pushed(),
            self.deque.popped_by_parents(),
        );
    }

    fn main_loop(&self) {
        CURRENT.with(|c| c.set(self));
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
            if idle.rounds == SPIN_ROUNDS + YIELD_ROUNDS {
                // About to sleep with no frame on this stack: nothing is in the arena.
                self.arena.trim();
            }
            idle.step(self, || self.sched.shutdown.load(Ordering::SeqCst));
        }
        idle.reset(self.counters());
        self.flush_counters();

        CURRENT.with(|c| c.set(ptr::null()));
        tracing::trace!(worker = self.index, "worker stopped");
    }

    /// The room a record of `T` takes in the arena, aligned as the arena aligns.
    #[inline(always)]
    pub(crate) const fn room_for<T: Task>() -> usize {
        match arena::footprint(size_of::<Job<T>>(), align_of::<Job<T>>()) {
            Some(size) => size,
            // Aligned more strictly than the arena aligns: room to align it within.
            None => {
                (size_of::<Job<T>>() + align_of::<Job<T>>()).div_ceil(arena::ALIGN) * arena::ALIGN
            }
        }
    }

    /// Writes a record of `task`, a child of `parent` spawned at its epoch `spawn_epoch`, in
    /// `room`, fresh arena memory of [`room_for::<T>`](Worker::room_for), and pushes it on the
    /// deque.
    ///
    /// # Safety
    /// `room` must be as said, and stay allocated until `parent`'s task ends.
    #[inline(always)]
    pub(crate) unsafe fn push_new<T: Task>(
        &self,
        room: NonNull<u8>,
        task: T,
        parent: &Frame,
        spawn_epoch: u32,
    ) -> JobRef {
        let record = match arena::footprint(size_of::<Job<T>>(), align_of::<Job<T>>()) {
            Some(_) => room.cast::<Job<T>>(),
            None => {
                let offset = room.as_ptr().align_offset(align_of::<Job<T>>());
                // SAFETY: the room holds the record at the aligned offset.
                unsafe { room.add(offset) }.cast::<Job<T>>()
            }
        };
        // SAFETY: the memory is large and aligned enough for a Job<T> and not in use.
        unsafe {
            Job::write(
                record.as_ptr(),
                task,
                parent,
                spawn_epoch,
                self.deque.link_for_push(),
            )
        };
        // SAFETY: just written.
        let job = unsafe { JobRef::from_ptr(record.as_ptr().cast()) };
        self.deque.push(job);
        job
    }

    /// Frames at least this deep may run spawned children at once (see
    /// [`Inlining`](crate::Inlining)).
    #[inline(always)]
    pub(crate) fn inline_depth(&self) -> u32 {
        self.inline_depth
    }

    /// True while enough jobs wait unpublished on this worker's deque for spawns deep enough
    /// to run their child at once (see [`Inlining`](crate::Inlining)).
    #[inline(always)]
    pub(crate) fn has_queued_enough(&self) -> bool {
        self.deque.has_queued_enough()
    }

    /// Pops the newest job if it is a child of `frame`.
    #[inline(always)]
    pub(crate) fn pop_child(&self, frame: &Frame) -> Option<JobRef> {
        self.deque.pop_child(frame)
    }

    /// [`pop_child`](Worker::pop_child) for a sync, which looks in the public part only when
    /// its frame counts children away.
    #[inline(always)]
    pub(crate) fn pop_child_in_sync(&self, frame: &Frame) -> Option<JobRef> {
        self.deque.pop_private_child(frame)
    }

    /// The worker's signal word (see [`Signal`]). The checks of every spawn and sync find it
    /// through their context instead (see [`Context::signal_changed`]).
    #[inline(always)]
    pub(crate) fn signal(&self) -> u64 {
        self.shared().publish_request.word().load(Ordering::Acquire)
    }

    /// This worker, as a pointer that reaches its whole [`WorkerShared`], for contexts.
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const Worker {
        self.me
    }

    /// Serves a publish request, if one is raised.
    #[inline(always)]
    pub(crate) fn serve_publish_request(&self) {
        if self.signal() & PUBLISH != 0 {
            self.publish();
        }
    }

    /// Publishes the private jobs for thieves and lowers the publish request.
    #[cold]
    #[inline(never)]
    pub(crate) fn publish(&self) {
        // With nothing to publish the request stays up, so the next spawn is published at once.
        if self.deque.publish() > 0 {
            self.shared()
                .publish_request
                .store(false, Ordering::Relaxed);
            // Pairs with the fence in `sleep`: either that sleeper's count is seen here, or
            // its look for visible work sees these jobs. Without it the deque's store could
            // wait in this processor's store buffer while the count is read (x86 allows that
            // reordering), and a worker that had just asked for work would sleep out its park
            // timeout beside it.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.sched.sleepers.load(Ordering::Relaxed) != 0 {
                self.sched.wake_one();
            }
        }
    }

    /// Runs a child popped from this worker's deque by its parent's `frame`, in `cx`, from
    /// [`Context::child_of`] of that frame.
    ///
    /// `worker` is this thread's worker: the check of the signal word reaches the word through
    /// it, and the caller holds it at hand.
    ///
    /// # Safety
    /// `worker` must come from [`as_ptr`](Worker::as_ptr) of this thread's worker.
    #[inline(always)]
    pub(crate) unsafe fn run_child(
        worker: *const Worker,
        job: JobRef,
        frame: &Frame,
        cx: &mut Context<'_>,
    ) {
        // SAFETY: as the caller vouches; the worker outlives the tasks it runs.
        let (changed, w) = unsafe { (signal_changed(worker, cx.seen()), &*worker) };
        if !changed {
            // SAFETY: popped by its parent's frame, which was found not aborted at the
            // generation that is still current.
            unsafe { w.run_popped(job, cx) }
        } else {
            w.run_child_checked(job, frame, cx);
        }
    }

    /// [`run_child`](Worker::run_child) after the signal word changed: serves a publish
    /// request, and drops the child instead if an abort cancelled its parent. `Context::abort`
    /// drops the frame's children from this deque at once, so a child popped here can only be
    /// aborted from further up, which it shares with its parent.
    #[cold]
    #[inline(never)]
    fn run_child_checked(&self, job: JobRef, frame: &Frame, cx: &mut Context<'_>) {
        let word = self.signal();
        if word & PUBLISH != 0 {
            self.publish();
        }
        let gen = word & !FLAGS;
        if gen != cx.seen() {
            if frame.is_aborted() {
                self.discard(job, Mode::Inline);
                return;
            }
            cx.set_seen(gen);
        }
        // SAFETY: as checked just now.
        unsafe { self.run_popped(job, cx) }
    }

    /// Runs a child popped by its parent's frame, in `cx`.
    ///
    /// # Safety
    /// `job` must have been popped from this worker's deque by its parent's frame, which must
    /// not be aborted at the generation `cx` holds, and `cx` must come from
    /// [`Context::child_of`] of that frame.
    #[inline(always)]
    pub(crate) unsafe fn run_popped(&self, job: JobRef, cx: &mut Context<'_>) {
        // A panic or abort unwinds on into the parent's frame, which runs on this thread too;
        // the guard finishes the job on the way. It sits here rather than in `run_inline`, so
        // that the executor of every job has no landing pad and keeps neither the record nor
        // the context across the task's run but for writing the output.
        let guard = RecordGuard::new(cx, job);
        // SAFETY: the job was just taken off the deque, so this thread is its only executor;
        // the guard finishes it should the task unwind.
        unsafe { (job.header().vtable.run_inline)(job, cx) };
        std::mem::forget(guard);
        // The child's frame, if it wrote one, is ended here rather than in `run_inline`, which
        // keeps the executor of every job small.
        if cx.has_frame() {
            cx.end_child(self, job);
        }
    }

    /// Runs a job taken from the injector, from another worker, or from an outer frame.
    pub(crate) fn run_taken(&self, job: JobRef) {
        let gen = self.signal() & !FLAGS;
        // Generation 0: nothing of this runtime was ever aborted.
        if gen != 0 && job.is_aborted() {
            let mode = if job.header().parent.is_null() {
                Mode::Root
            } else {
                Mode::Stolen
            };
            self.discard(job, mode);
            return;
        }
        // SAFETY: taking the job off a deque made this thread its only executor.
        unsafe { (job.header().vtable.run_taken)(job, self, gen) }
    }

    /// Drops a job that will never run and reports it finished as aborted.
    pub(crate) fn discard(&self, job: JobRef, mode: Mode) {
        // SAFETY: the job never ran, so its slot still holds the task.
        if let Err(payload) = unsafe { discard_task(job) } {
            fail_for_panic(job, &self.sched, "dropping it unrun", payload);
        }
        bump(&self.local.discarded);
        if mode == Mode::Inline {
            // Its parent's pop counted it as executed (see `LocalCounters`).
            unbump(&self.local.executed);
        }
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
            // SAFETY: as the caller vouches.
            Mode::Inline => unsafe { finish_inline(job, state) },
            // SAFETY: as the caller vouches.
            Mode::Stolen => unsafe { finish_elsewhere(job, state, &self.sched) },
            // SAFETY: as the caller vouches.
            Mode::Root => unsafe { root::finish(job, state, &self.sched) },
        }
    }

    /// Notes that the handle of `job`, a child spawned on this thread that has not finished,
    /// was dropped: its frame drops the output when it ends (see `drop_orphans_of`).
    pub(crate) fn orphan(&self, job: JobRef) {
        // SAFETY: only this thread uses the list, and no reference to it outlives a call.
        unsafe { (*self.orphans.get()).push(job) };
        let frame = job
            .parent()
            .expect("a handle belongs to a child, which has a parent");
        frame.orphans.set(frame.orphans.get() + 1);
    }

    /// Drops the outputs of the children of `frame`, which are all finished, whose handles
    /// were dropped before they finished.
    #[cold]
    pub(crate) fn drop_orphans_of(&self, frame: &Frame) {
        frame.orphans.set(0);
        loop {
            // SAFETY: as in `orphan`; the borrow ends before the output's `Drop` (user code)
            // runs.
            let job = match unsafe { (*self.orphans.get()).last() } {
                Some(&job) if ptr::eq(job.header().parent, frame) => job,
                _ => return,
            };
            // SAFETY: as above.
            unsafe { (*self.orphans.get()).pop() };
            let state = job.header().state.load(Ordering::Acquire);
            // SAFETY: the job is finished (its frame is ending), and its handle is gone.
            unsafe { drop_unclaimed(job, state, &self.sched) };
        }
    }

    /// True if the newest job of the private stack is the one that was below `job` when `job`
    /// was pushed.
    #[inline(always)]
    pub(crate) fn top_was_below(&self, job: JobRef) -> bool {
        self.deque.top_was_below(job)
    }

    /// True if the newest job of the private stack is a child of `frame`.
    #[inline(always)]
    pub(crate) fn has_private_child(&self, frame: &Frame) -> bool {
        self.deque.has_private_child(frame)
    }

    /// Waits until every child of `frame` that left this thread's private stack (its `away`
    /// children) has finished, running other work meanwhile, and resets the count. The frame
    /// must have no child left on the private stack.
    #[cold]
    pub(crate) fn sync_away(&self, frame: &Frame) {
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
        let frame = job
            .parent()
            .expect("a handle belongs to a child, which has a parent");
        let state = || job.header().state.load(Ordering::Acquire);
        let mut idle = Idle::new();
        loop {
            self.serve_publish_request();
            let s = state();
            if s != PENDING {
                idle.reset(self.counters());
                return s;
            }
            if let Some(child) = self.pop_child(frame) {
                idle.reset(self.counters());
                // No generation was verified here (`u64::MAX` is none), so the check walks
                // ancestors.
                // SAFETY: this worker, as `as_ptr` gives it; it outlives the context.
                let mut cx = unsafe { Context::child_of(self.as_ptr(), frame, u64::MAX) };
                // SAFETY: this worker, as `as_ptr` gives it.
                unsafe { Worker::run_child(self.as_ptr(), child, frame, &mut cx) };
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
        steal_settled(|| self.sched.injector.steal()).or_else(|| self.steal_from_others())
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
            if let Some(job) = steal_settled(|| victim.stealer.steal()) {
                bump(&counters.steals);
                if crate::trace::enabled() {
                    crate::trace::stole_locally(self.index, v);
                }
                job.header().owner.set(v as u32);
                return Some(job);
            }
            // Its private jobs are invisible: ask it to publish some.
            if !victim.publish_request.load(Ordering::Relaxed) {
                victim.publish_request.store(true, Ordering::Relaxed);
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
        // Pairs with the fences of `publish` and `finish_elsewhere`: whoever publishes work or
        // finishes what `ready` waits for either sees this sleeper (and wakes it) or made its
        // stores visible to the looks below.
        std::sync::atomic::fence(Ordering::SeqCst);
        if !ready() && !sched.has_visible_work() && self.deque.is_empty() {
            thread::park_timeout(sched.park_timeout());
        }
        if shared.sleeping.swap(false, Ordering::AcqRel) {
            sched.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// True if the signal word of the worker at `worker` differs from `seen`, the generation a
/// task last saw: the check of every spawn and sync. The word lies at a fixed distance before
/// the worker, in its [`WorkerShared`], which the pointer reaches: one load, with no pointer to
/// load first.
///
/// Relaxed, because whoever acts on a change loads the word again through
/// [`Worker::signal`], whose acquire then orders what follows after the abort or request that
/// changed it; an acquire here would only keep the compiler from reusing, after the check,
/// what the spawn or sync loaded before it.
///
/// # Safety
/// `worker` must come from [`Worker::as_ptr`] of a live worker.
#[inline(always)]
pub(crate) unsafe fn signal_changed(worker: *const Worker, seen: u64) -> bool {
    let back = offset_of!(WorkerShared, slot) - offset_of!(WorkerShared, publish_request);
    // SAFETY: as the caller vouches: the worker lives in the slot of a `WorkerShared`, whose
    // signal word lies `back` bytes before it, and the pointer reaches all of it.
    let signal = unsafe { &*worker.cast::<u8>().sub(back).cast::<Signal>() };
    signal.word().load(Ordering::Relaxed) != seen
}

/// Completion by a thread that is not the job's owner (a thief, or the distributed layer).
///
/// # Safety
/// The caller must be the job's executor and be done with its task and output slot.
pub(crate) unsafe fn finish_elsewhere(job: JobRef, state: u8, sched: &Scheduler) {
    let h = job.header();
    let parent = job.parent().expect("a job finished elsewhere has a parent");
    // SAFETY: whoever took the job from its owner's deque noted the owner.
    let owner = unsafe { h.owner.get() } as usize;
    // Should the handle be gone already, the parent's frame drops the output when it ends.
    h.state.store(state, Ordering::Release);
    // From here on the parent's sync may return and its task end, releasing the record and
    // the frame: neither is touched again.
    parent.stolen_done.fetch_add(1, Ordering::SeqCst);
    // Pairs with the fence in `Worker::sleep`: a sleeping owner that waits for this job's
    // state (`wait_for`, an acquire load, outside the order of the sequentially consistent
    // operations) is then either seen here or sees the state.
    std::sync::atomic::fence(Ordering::SeqCst);
    sched.wake_worker(owner);
}

/// Drops the output, if any, of a finished job whose handle was dropped unread. The output's
/// `Drop` is user code; should it panic, the run fails with that panic, naming the task.
///
/// # Safety
/// The job must be finished with `state`, its handle gone, and the caller its executor.
unsafe fn drop_unclaimed(job: JobRef, state: u8, sched: &Scheduler) {
    if state != DONE {
        return;
    }
    let drop_output = job.header().vtable.drop_output;
    // SAFETY: the output is in the slot and nothing else will use it.
    let dropped = panic::catch_unwind(AssertUnwindSafe(|| unsafe { drop_output(job) }));
    if let Err(payload) = dropped {
        let _ = fail_for_panic(job, sched, "dropping its unread output", payload);
    }
}

/// Drops the task of a job that will not run here, and returns the panic payload if the
/// task's `Drop` (user code) panicked.
///
/// # Safety
/// The job's slot must hold its task, which nothing uses afterwards.
pub(crate) unsafe fn discard_task(job: JobRef) -> Result<(), Box<dyn std::any::Any + Send>> {
    let discard = job.header().vtable.discard;
    // SAFETY: as the caller vouches.
    panic::catch_unwind(AssertUnwindSafe(|| unsafe { discard(job) }))
}

/// Fails the run of `job` because user code of its task type panicked outside the task's
/// `run` (in a `Drop`, `Serialize` or `Deserialize`) while the runtime was `doing` something;
/// returns the error the run fails with.
pub(crate) fn fail_for_panic(
    job: JobRef,
    sched: &Scheduler,
    doing: &str,
    payload: Box<dyn std::any::Any + Send>,
) -> Error {
    let error = Error::TaskPanicked {
        task: job.task_name(),
        message: format!("{doing}: {}", ipl::error::panic_text(payload)),
    };
    tracing::debug!(%error, "user code panicked outside a task; cancelling the run");
    job.root_state().fail(sched, error.clone());
    error
}

/// Runs a child popped by the frame that spawned it: `run_inline` of `Job<T>`'s vtable.
///
/// # Safety
/// `job` must be a pending `Job<T>` popped by its parent on this thread, which makes the
/// calling thread its only executor; `cx` must come from [`Context::child_of`] of that
/// parent, and the caller must finish the job should the task unwind and end the frame the
/// task may leave in it (as [`Worker::run_popped`] does).
pub(crate) unsafe fn run_inline<T: Task>(job: JobRef, cx: &mut Context<'_>) {
    // SAFETY: as the caller vouches; the job is pending, so it holds the task, which its only
    // executor moves out once.
    let task = unsafe { Job::<T>::task_ptr(job).read() };
    // Counted as executed by its parent's pop (see `LocalCounters`).
    let output = task.run(cx);
    // SAFETY: a record of `T`, which holds no output yet.
    unsafe { Job::<T>::output_ptr(job).write(output) };
    // Finished before its frame, if it wrote one, is ended by the caller (see `run_popped`):
    // only this thread looks at the record until the parent's sync returns, and nothing is
    // kept live across the task's run but the record.
    // SAFETY: this thread executed the job and is done with its slot.
    unsafe { finish_inline(job, DONE) };
}

/// Publishes the final state of a job popped and run by its parent's frame. Should the
/// handle be gone already, the parent's frame drops the output when it ends.
///
/// # Safety
/// This thread must be the job's executor, and be done with its task and output.
#[inline(always)]
pub(crate) unsafe fn finish_inline(job: JobRef, state: u8) {
    job.header().state.store(state, Ordering::Release);
}

/// Runs a stolen job or a root, catching a panic of its task: `run_taken` of `Job<T>`'s
/// vtable.
///
/// # Safety
/// `job` must be a pending `Job<T>` taken off a deque or the injector by the calling thread,
/// which makes that thread its only executor.
pub(crate) unsafe fn run_taken<T: Task>(job: JobRef, worker: &Worker, seen_gen: u64) {
    let mode = if job.header().parent.is_null() {
        Mode::Root
    } else {
        Mode::Stolen
    };
    // SAFETY: the caller vouches for the type; the job is pending, so it holds the task,
    // which its only executor moves out once.
    let task = unsafe { Job::<T>::task_ptr(job).read() };
    bump(&worker.local.executed);
    let mut cx = Context::for_taken(worker, job, seen_gen);
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let output = task.run(&mut cx);
        cx.end();
        output
    }));
    let state = match result {
        Ok(output) => {
            // SAFETY: a record of `T`, which holds no output yet.
            unsafe { Job::<T>::output_ptr(job).write(output) };
            DONE
        }
        Err(payload) => cx.recover(payload, std::any::type_name::<T>()),
    };
    worker.flush_counters();
    // SAFETY: this thread executed the job and is done with its slot.
    unsafe { worker.finish(job, state, mode) };
}

/// Backoff of a worker that found nothing to do: spin, then yield, then park.
struct Idle {
    rounds: u32,
    since: Option<Instant>,
    /// When the idle stretch began.
    began: Option<Instant>,
    /// The traced idle period, from the end of the spinning on.
    span: Option<tracing::span::EnteredSpan>,
}

impl Idle {
    fn new() -> Self {
        Idle {
            rounds: 0,
            since: None,
            began: None,
            span: None,
        }
    }

    fn step(&mut self, worker: &Worker, ready: impl Fn() -> bool) {
        if self.since.is_none() {
            let now = Instant::now();
            self.since = Some(now);
            self.began = Some(now);
        }
        if self.rounds < SPIN_ROUNDS {
            for _ in 0..(1u32 << self.rounds) {
                hint::spin_loop();
            }
        } else {
            // Account as we go, so an idle stretch shows up in statistics read meanwhile.
            self.flush(worker.counters());
            worker.flush_counters();
            if self.rounds == SPIN_ROUNDS {
                self.span = crate::trace::idle(worker.index);
            }
            let sleep = self.rounds >= SPIN_ROUNDS + YIELD_ROUNDS
                && !(worker.sched.runs_active() && self.idle_for() < YIELD_WHILE_ACTIVE);
            // Local stealing has failed for a while: let a distributed layer look elsewhere,
            // when the worker starts yielding, every so many rounds of yielding, and before
            // every sleep.
            if (self.rounds - SPIN_ROUNDS) % YIELD_ROUNDS == 0 || sleep {
                worker.sched.call_idle_hook(worker.index);
            }
            if sleep {
                worker.sleep(ready);
            } else {
                thread::yield_now();
            }
        }
        self.rounds = self.rounds.saturating_add(1);
    }

    /// How long the worker has been idle in this stretch.
    fn idle_for(&self) -> Duration {
        self.began.map_or(Duration::ZERO, |t| t.elapsed())
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
        self.began = None;
        self.rounds = 0;
        self.span = None;
    }
}
