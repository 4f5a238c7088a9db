//! The view a running task has of the runtime: spawn, sync, speculative results and abort.

use std::any::Any;
use std::cell::Cell;
use std::panic;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::handle::Handle;
use crate::job::{Job, JobHeader, JobRef, ABORTED, DONE, FAILED, PENDING};
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
    frame: JobRef,
    /// The scheduler's abort generation, kept here to make the check one load shorter.
    abort_gen: *const AtomicU64,
    /// Abort generation at which this frame was last found not aborted.
    seen_gen: Cell<u64>,
}

impl Context {
    pub(crate) fn new(worker: &Worker, frame: JobRef, seen_gen: u64) -> Self {
        Context {
            worker,
            frame,
            abort_gen: worker.abort_gen(),
            seen_gen: Cell::new(seen_gen),
        }
    }

    #[inline(always)]
    fn worker(&self) -> &Worker {
        // SAFETY: the worker outlives every task it runs.
        unsafe { &*self.worker }
    }

    #[inline(always)]
    fn frame(&self) -> &JobHeader {
        self.frame.header()
    }

    /// Spawns `task` as a child of the running task and returns a handle to its output.
    ///
    /// The child is pushed on this worker's deque; usually this worker runs it itself at
    /// [`sync`](Context::sync), but an idle worker may steal it first. If the running task has
    /// been aborted, the child is dropped and the running task unwinds (see [`Context::abort`]).
    #[inline(always)]
    pub fn spawn<T: Task>(&mut self, task: T) -> Handle<T::Output> {
        if self.is_aborted() {
            drop(task);
            abort_unwind();
        }
        let w = self.worker();
        let frame = self.frame();
        let job = Job::<T>::create(
            Some(w.recycler()),
            task,
            frame,
            frame.abort_epoch.load(Ordering::Relaxed),
            w.link_for_push(),
        );
        bump(&w.local.spawns);
        w.push(job);
        Handle::new(job, Job::<T>::output_ptr(job))
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
        let frame = self.frame();
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
        let frame = self.frame();
        // The task needs a frame of its own for its children, but no record: it is neither
        // queued nor stolen, and its output goes straight back. The header lives on this stack
        // frame, which outlasts the task's children, the only ones that refer to it.
        let header = JobHeader::for_call::<T>(frame, frame.abort_epoch.load(Ordering::Relaxed));
        let mut cx = Context::new(w, JobRef::from_header(&header), self.seen_gen.get());
        bump(&w.local.executed);
        // A panic or abort unwinds on into this task, the guard finishing the callee's frame.
        let guard = UnwindGuard::<true> { cx: &cx };
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
            let frame = self.frame();
            let epoch = frame.abort_epoch.load(Ordering::Relaxed);
            let mut waiting = false;
            for (i, h) in handles.iter_mut().enumerate() {
                let Some(job) = h.job() else { continue };
                let header = job.header();
                assert!(
                    std::ptr::eq(header.parent, frame),
                    "Context::next_completed was given a handle of another task's child"
                );
                if header.spawn_epoch != epoch {
                    continue;
                }
                match header.state.load(Ordering::Acquire) {
                    DONE => return Some((i, h.take_done())),
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
        let frame = self.frame();
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
        // SAFETY: the generation lives in the scheduler, which outlives every task.
        let gen = unsafe { (*self.abort_gen).load(Ordering::Acquire) };
        if gen == self.seen_gen.get() {
            return false;
        }
        self.is_aborted_slow(gen)
    }

    #[cold]
    fn is_aborted_slow(&self, gen: u64) -> bool {
        if self.frame.is_aborted() {
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
        let frame = self.frame();
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
        let frame = self.frame();
        while let Some(child) = w.pop_child(frame) {
            w.discard(child, Mode::Inline);
        }
        w.sync_away(frame);
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
            self.frame.root_state().fail(
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
/// `CALLED` tells a job of `Context::call` from a child run inline.
pub(crate) struct UnwindGuard<const CALLED: bool> {
    pub(crate) cx: *const Context,
}

impl<const CALLED: bool> Drop for UnwindGuard<CALLED> {
    fn drop(&mut self) {
        // SAFETY: the guard is declared after the context it points to, so it is dropped first.
        let cx = unsafe { &*self.cx };
        let w = cx.worker();
        let state = if ABORT_UNWINDING.with(|a| a.get()) {
            ABORTED
        } else {
            PANICKED_TASK.with(|p| {
                if p.get().is_none() {
                    p.set(Some((cx.frame().vtable.task_name)()));
                }
            });
            // Cancel the run now, so that the stolen children waited for below stop soon.
            cx.frame.root_state().kill(&w.sched);
            FAILED
        };
        cx.drain();
        let mode = if CALLED { Mode::Called } else { Mode::Inline };
        // SAFETY: this thread runs the job, and its task is gone.
        unsafe { w.finish(cx.frame, state, mode) };
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
