//! The view a running task has of the runtime: spawn, sync, speculative results and abort.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::panic;
use std::ptr;
use std::sync::atomic::Ordering;

use crate::handle::{Handle, Peek};
use crate::job::{Job, JobHeader, JobRef, ABORTED, DONE, FAILED, LAZY_FRAME_VTABLE, PENDING};
use crate::root::RootState;
use crate::scheduler::ABORT_GEN;
use crate::stats::bump;
use crate::worker::{Mode, Worker};
use crate::{Error, Task};

/// Unwinds an aborted task out of user code; caught by the task's executor. Never printed:
/// `resume_unwind` does not run the panic hook.
pub(crate) struct AbortUnwind;

/// Handed to [`Task::run`]: spawns children, syncs on them, and cancels them.
///
/// Each running task has its own context; it is not `Send`, because the task runs start to end
/// on one worker thread.
pub struct Context {
    worker: *const Worker,
    /// The running task's frame, the header its children link to: its record's header, or
    /// `slot` once written. Null while the frame is lazy: a task run within a spawn or call
    /// gets a frame only when it first queues a child, aborts, or waits for completions, so
    /// that a task which only spawns children run at once costs no frame at all.
    frame: Cell<*const JobHeader>,
    /// While the frame is lazy: the nearest ancestor with a frame. The lazy frame's parent
    /// cannot abort it (that parent's task is suspended in the spawn or call that runs this
    /// one), so cancellation is checked from there.
    lazy_parent: *const JobHeader,
    /// Abort generation at which this frame was last found not aborted.
    seen_gen: Cell<u64>,
    /// Room for a lazy frame, written by [`Context::own_frame`].
    slot: UnsafeCell<MaybeUninit<JobHeader>>,
}

impl Context {
    /// The context of a task run from its record (queued, stolen, or a root).
    pub(crate) fn new(worker: &Worker, frame: JobRef, seen_gen: u64) -> Self {
        Context {
            worker,
            frame: Cell::new(frame.as_ptr()),
            lazy_parent: ptr::null(),
            seen_gen: Cell::new(seen_gen),
            slot: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The context of a task run on the stack of its parent, with a lazy frame.
    #[inline(always)]
    fn lazy(worker: *const Worker, parent: *const JobHeader, seen_gen: u64) -> Self {
        Context {
            worker,
            frame: Cell::new(ptr::null()),
            lazy_parent: parent,
            seen_gen: Cell::new(seen_gen),
            slot: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    #[inline(always)]
    fn worker(&self) -> &Worker {
        // SAFETY: the worker outlives every task it runs.
        unsafe { &*self.worker }
    }

    /// The frame, if the task has one yet.
    #[inline(always)]
    fn frame_if_any(&self) -> Option<&JobHeader> {
        // SAFETY: a frame outlives the task's context.
        unsafe { self.frame.get().as_ref() }
    }

    /// The nearest frame at or above the running task: what children run at once link to.
    #[inline(always)]
    fn nearest_frame(&self) -> *const JobHeader {
        let f = self.frame.get();
        if f.is_null() {
            self.lazy_parent
        } else {
            f
        }
    }

    /// The task's frame, written now if it was lazy.
    #[inline(always)]
    fn own_frame(&self) -> &JobHeader {
        match self.frame_if_any() {
            Some(f) => f,
            None => self.write_frame(),
        }
    }

    #[cold]
    #[inline(never)]
    fn write_frame(&self) -> &JobHeader {
        // SAFETY: the lazy parent is a live frame, as for every task below it.
        let parent = unsafe { &*self.lazy_parent };
        // The parent's epoch now is the one at the spawn: it cannot have aborted since.
        let header = JobHeader::for_call(
            &LAZY_FRAME_VTABLE,
            parent,
            parent.abort_epoch.load(Ordering::Relaxed),
        );
        // SAFETY: the slot is this context's own and unused while the frame is lazy; the
        // context stays in place while the task runs.
        let frame = unsafe { (*self.slot.get()).write(header) as *const JobHeader };
        self.frame.set(frame);
        // SAFETY: just written.
        unsafe { &*frame }
    }

    /// Spawns `task` as a child of the running task and returns a handle to its output.
    ///
    /// The child is pushed on this worker's deque; usually this worker runs it itself at
    /// [`sync`](Context::sync), but an idle worker may steal it first. Deep in the task tree,
    /// while this worker already has enough queued work, the child runs right here instead,
    /// before `spawn` returns (see [`Inlining`](crate::Inlining)): a legal order, since
    /// nothing may rely on a child having run or not before `sync`. If the running task has
    /// been aborted, the child is dropped and the running task unwinds (see
    /// [`Context::abort`]).
    #[inline(always)]
    pub fn spawn<T: Task>(&mut self, task: T) -> Handle<T::Output> {
        if self.is_aborted() {
            drop(task);
            abort_unwind();
        }
        let w = self.worker();
        let frame = self.frame.get();
        // Written out per case, so that the common one (a lazy frame) tests nothing twice.
        if frame.is_null() {
            // A lazy frame belongs to a task run at once by a deep frame (or called by one),
            // so it is deep enough; and it cannot have been aborted by itself: epoch 0.
            if w.has_queued_work() {
                // Counted once, as spawned and executed alike (see `LocalCounters`).
                bump(&w.local.inlined);
                let output = self.run_here(task, self.lazy_parent, false);
                return Handle::ready(output, 0);
            }
        } else {
            // SAFETY: a frame outlives the task's context.
            let f = unsafe { &*frame };
            if f.depth.get() >= w.inline_depth() && w.has_queued_work() {
                bump(&w.local.inlined);
                let spawn_epoch = f.abort_epoch.load(Ordering::Relaxed);
                let output = self.run_here(task, frame, false);
                return Handle::ready(output, spawn_epoch);
            }
        }
        self.spawn_queued(task)
    }

    /// The part of `spawn` that queues the child. Out of line, so that the registers and stack
    /// of every task that spawns are sized for the common, inlined path.
    #[inline(never)]
    fn spawn_queued<T: Task>(&mut self, task: T) -> Handle<T::Output> {
        let w = self.worker();
        bump(&w.local.spawns);
        let frame = self.own_frame();
        let job = Job::<T>::create(
            Some(w.recycler()),
            task,
            frame,
            frame.depth.get().saturating_add(1),
            frame.abort_epoch.load(Ordering::Relaxed),
            w.link_for_push(),
        );
        w.push(job);
        Handle::queued(job, Job::<T>::output_ptr(job))
    }

    /// Waits until every child spawned so far has finished.
    ///
    /// Children still on this worker's deque are run here, newest first; while children that
    /// other workers stole are still running, this worker runs other jobs. If the running task
    /// has been aborted, its children are cancelled and the task unwinds instead of returning.
    #[inline(always)]
    pub fn sync(&mut self) {
        let w = self.worker();
        bump(&w.local.syncs);
        if self.is_aborted() {
            abort_unwind();
        }
        // Without a frame, no child was queued: all ran within their spawn.
        let Some(frame) = self.frame_if_any() else {
            return;
        };
        let seen_gen = self.seen_gen.get();
        // Each step is written out separately for the first children: with one branch per
        // step, a task that always spawns the same number of children exits with no
        // mispredicted branch, where a single loop branch would mispredict at every exit.
        if let Some(child) = w.pop_child(frame) {
            // The check above is still fresh for the first child.
            w.run_child_fresh(child, seen_gen);
            if let Some(child) = w.pop_child(frame) {
                w.run_child(child, seen_gen);
                while let Some(child) = w.pop_child(frame) {
                    w.run_child(child, seen_gen);
                }
            }
        }
        // Children that left the private stack: wait for those still running elsewhere.
        if frame.away.get() != 0 {
            w.sync_away(frame);
        }
    }

    /// Runs `task` right here, as a plain call, and returns its output.
    ///
    /// The task gets a frame of its own: its spawns and syncs concern only its own children,
    /// not the caller's. Use it where one child would be spawned and then immediately synced,
    /// for example for the last of several children: it costs no deque traffic and cannot be
    /// stolen.
    #[inline(always)]
    pub fn call<T: Task>(&mut self, task: T) -> T::Output {
        if self.is_aborted() {
            drop(task);
            abort_unwind();
        }
        let w = self.worker();
        bump(&w.local.executed);
        // A lazy frame counts as deep (see `spawn`); a task called from a shallow frame is
        // not, so it gets its frame, with its true depth, from the start.
        let shallow = self
            .frame_if_any()
            .is_some_and(|f| f.depth.get().saturating_add(1) < w.inline_depth());
        self.run_here(task, self.nearest_frame(), shallow)
    }

    /// Runs `task` on this stack as a child of the running task, with a frame of its own that
    /// is lazy unless `with_frame`; `nearest` is [`nearest_frame`](Context::nearest_frame).
    #[inline(always)]
    fn run_here<T: Task>(
        &mut self,
        task: T,
        nearest: *const JobHeader,
        with_frame: bool,
    ) -> T::Output {
        let mut cx = Context::lazy(self.worker, nearest, self.seen_gen.get());
        if with_frame {
            cx.own_frame();
        }
        // A panic or abort unwinds on into this task, the guard finishing the callee's frame.
        let guard = UnwindGuard::<T, true>::new(&cx);
        let output = task.run(&mut cx);
        cx.implicit_sync();
        std::mem::forget(guard);
        output
    }

    /// Takes the output of one finished child among `handles`, waiting (and working) until one
    /// finishes. Returns the child's index in `handles` and its output; the handle is then
    /// empty. Returns `None` once no handle can deliver any more: all are empty, or belong to
    /// children cancelled by [`abort`](Context::abort).
    ///
    /// This is the speculative-search primitive: look at results as they arrive, and call
    /// `abort` once the answer is known.
    ///
    /// # Panics
    /// If a handle belongs to a child of another task.
    pub fn next_completed<O>(&mut self, handles: &mut [Handle<O>]) -> Option<(usize, O)> {
        let mut idle_rounds = 0u32;
        loop {
            let frame = self.own_frame();
            let epoch = frame.abort_epoch.load(Ordering::Relaxed);
            let mut waiting = false;
            for (i, h) in handles.iter_mut().enumerate() {
                let (spawn_epoch, state) = match h.peek() {
                    Peek::Taken => continue,
                    // Such a child ran within its spawn, so it can only be this task's if it
                    // came from here; its handle does not record the parent.
                    Peek::Ready { spawn_epoch } => (spawn_epoch, DONE),
                    Peek::Queued(job) => {
                        let header = job.header();
                        assert!(
                            std::ptr::eq(header.parent, frame),
                            "Context::next_completed was given a handle of another task's child"
                        );
                        (header.spawn_epoch, header.state.load(Ordering::Acquire))
                    }
                };
                if spawn_epoch != epoch {
                    continue;
                }
                match state {
                    DONE => return Some((i, h.take_finished())),
                    PENDING => waiting = true,
                    // Only an abort above this frame, or a failing run, ends a child this way.
                    _ => abort_unwind(),
                }
            }
            if !waiting {
                return None;
            }
            if self.is_aborted() {
                abort_unwind();
            }
            let w = self.worker();
            if let Some(child) = w.pop_child(frame) {
                w.run_child(child, self.seen_gen.get());
            } else if w.help_once() {
                idle_rounds = 0;
            } else {
                // Finished children are found by polling, so stay responsive: never park.
                idle_rounds += 1;
                if idle_rounds < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Cancels every child spawned so far that has not been synced, and all their
    /// descendants: jobs not yet started are dropped without running, and running ones unwind
    /// at their next `spawn` or `sync` (long-running leaves may poll
    /// [`is_aborted`](Context::is_aborted)). Their outputs are never delivered; a later `sync`
    /// returns as soon as the running ones have stopped. Children spawned after the call are
    /// not affected. A child that had already finished keeps its output, which
    /// [`Handle::take`] still returns, but [`next_completed`](Context::next_completed) ignores
    /// every child spawned before the abort.
    pub fn abort(&mut self) {
        let w = self.worker();
        let frame = self.own_frame();
        frame.abort_epoch.store(
            frame.abort_epoch.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
        w.sched.bump_abort_gen();
        bump(&w.local.aborts);
        // Drop the children still on this deque now rather than leaving them to thieves.
        while let Some(child) = w.pop_child(frame) {
            w.discard(child, Mode::Inline);
        }
    }

    /// True if the running task has been cancelled: by an ancestor's
    /// [`abort`](Context::abort), or because the run is failing. The task's output will be
    /// ignored, so a long computation may stop early.
    #[inline(always)]
    pub fn is_aborted(&self) -> bool {
        let gen = ABORT_GEN.load(Ordering::Acquire);
        if gen == self.seen_gen.get() {
            return false;
        }
        self.is_aborted_slow(gen)
    }

    #[cold]
    fn is_aborted_slow(&self, gen: u64) -> bool {
        // A lazy frame cannot be aborted by its own parent (see `lazy_parent`): start above.
        // SAFETY: the nearest frame is live while this task runs.
        if unsafe { JobRef::from_ptr(self.nearest_frame()) }.is_aborted() {
            true
        } else {
            self.seen_gen.set(gen);
            false
        }
    }

    /// Index of the worker thread running this task, in `0..num_workers()`.
    pub fn worker_index(&self) -> usize {
        self.worker().index
    }

    /// Number of worker threads of the runtime.
    pub fn num_workers(&self) -> usize {
        self.worker().sched.num_workers()
    }

    /// Syncs children left outstanding when `run` returned.
    #[inline(always)]
    pub(crate) fn implicit_sync(&mut self) {
        let Some(frame) = self.frame_if_any() else {
            return;
        };
        if frame.away.get() != 0 || self.worker().has_private_child(frame) {
            self.implicit_sync_slow();
        }
    }

    /// Kept out of line so that the executor of every job stays small.
    #[inline(never)]
    fn implicit_sync_slow(&mut self) {
        self.sync();
    }

    /// Cancels this frame's children after its task unwound: drops the ones still on this
    /// worker's deque, and waits for the stolen ones, which point at this frame.
    fn drain(&self) {
        let w = self.worker();
        let Some(frame) = self.frame_if_any() else {
            return;
        };
        while let Some(child) = w.pop_child(frame) {
            w.discard(child, Mode::Inline);
        }
        w.sync_away(frame);
    }

    /// The shared state of the run this task belongs to.
    fn root_state(&self) -> &RootState {
        // SAFETY: the nearest frame is live while this task runs.
        unsafe { JobRef::from_ptr(self.nearest_frame()) }.root_state()
    }

    /// Cleans up after `run` unwound to the executor of a stolen job or root: records a panic
    /// as the run's failure and cancels the children. Returns the job's final state.
    pub(crate) fn recover(&mut self, payload: Box<dyn Any + Send>, task: &'static str) -> u8 {
        let aborted = payload.is::<AbortUnwind>();
        ABORT_UNWINDING.with(|a| a.set(false));
        // The innermost task the panic passed through, if it ran inline; else this one.
        let culprit = PANICKED_TASK.with(|p| p.take()).unwrap_or(task);
        if !aborted {
            let message = panic_message(&*payload);
            tracing::debug!(task = culprit, %message, "task panicked; cancelling the run");
            self.root_state().fail(
                &self.worker().sched,
                Error::TaskPanicked {
                    task: culprit,
                    message,
                },
            );
        }
        // A payload whose destructor panics would abort the process; contain it.
        let _ = panic::catch_unwind(panic::AssertUnwindSafe(move || drop(payload)));
        self.drain();
        if aborted {
            ABORTED
        } else {
            FAILED
        }
    }
}

thread_local! {
    /// Set while an abort unwinds, so frames it passes through know it is no panic.
    static ABORT_UNWINDING: Cell<bool> = const { Cell::new(false) };
    /// The task a panic started in, noted by the first inline frame it unwinds.
    static PANICKED_TASK: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Finishes the job of a frame that runs without `catch_unwind` (children run inline, and
/// `Context::call`) when its task unwinds; forgotten on the normal path, so it costs nothing
/// there. The unwinding goes on to the nearest executor of a stolen job or root.
/// `T` is the task's type; `CALLED` tells a task run on its parent's stack (by a spawn or
/// `Context::call`) from a queued child run inline.
pub(crate) struct UnwindGuard<T, const CALLED: bool> {
    cx: *const Context,
    _task: PhantomData<T>,
}

impl<T, const CALLED: bool> UnwindGuard<T, CALLED> {
    #[inline(always)]
    pub(crate) fn new(cx: &Context) -> Self {
        UnwindGuard {
            cx,
            _task: PhantomData,
        }
    }
}

impl<T, const CALLED: bool> Drop for UnwindGuard<T, CALLED> {
    fn drop(&mut self) {
        // SAFETY: the guard is declared after the context it points to, so it is dropped first.
        let cx = unsafe { &*self.cx };
        let w = cx.worker();
        let state = if ABORT_UNWINDING.with(|a| a.get()) {
            ABORTED
        } else {
            PANICKED_TASK.with(|p| {
                if p.get().is_none() {
                    p.set(Some(std::any::type_name::<T>()));
                }
            });
            // Cancel the run now, so that the stolen children waited for below stop soon.
            cx.root_state().kill(&w.sched);
            FAILED
        };
        cx.drain();
        let mode = if CALLED { Mode::Called } else { Mode::Inline };
        if let Some(frame) = cx.frame_if_any() {
            // SAFETY: this thread runs the job, and its task is gone.
            unsafe { w.finish(JobRef::from_header(frame), state, mode) };
        }
    }
}

/// Leaves an aborted task by unwinding to its executor.
pub(crate) fn abort_unwind() -> ! {
    ABORT_UNWINDING.with(|a| a.set(true));
    panic::resume_unwind(Box::new(AbortUnwind))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(panic payload is not text)".to_string()
    }
}
