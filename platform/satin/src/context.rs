//! The view a running task has of the runtime: spawn, sync, speculative results and abort.

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::panic;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

pub(crate) use ipl::error::panic_message;

use crate::arena::{self, Mark};
use crate::handle::{Handle, Peek};
use crate::job::{Frame, JobRef, ABORTED, DONE, FAILED, PENDING, RECORD, SHALLOW, TAGS};
use crate::root::RootState;
use crate::scheduler::{FLAGS, PUBLISH, REUSE};
use crate::stats::bump;
use crate::worker::{signal_changed, Mode, Worker};
use crate::{Error, Task};

/// Unwinds an aborted task out of user code; caught by the task's executor. Never printed:
/// `resume_unwind` does not run the panic hook.
pub(crate) struct AbortUnwind;

/// Handed to [`Task::run`]: spawns children, syncs on them, and cancels them.
///
/// Each running task sees the runtime through a context. The lifetime `'scope` is the task's
/// run: the [`Handle`]s the context gives out carry it, so that no handle can be kept beyond the
/// task that spawned its child (see [`Handle`]). A context is not `Send`, because the task runs
/// start to end on one worker thread. Write it as `&mut satin::Context` in a task's `run`; the
/// lifetime is elided.
pub struct Context<'scope> {
    /// The worker running the task, as [`Worker::as_ptr`] gives it, which reaches the worker's
    /// signal word too (see [`signal_changed`]).
    worker: *const Worker,
    /// The task's own frame (an [`Own`]), written when it first queues a child, aborts, or
    /// waits for completions; null until then, so that a task that needs no frame (a leaf, or
    /// a task whose spawns all run their child at once) costs none. Frames lie in the worker's
    /// arena, outside the context: other threads update a frame (children finished elsewhere)
    /// while the task holds its context by `&mut`, which must not cover it.
    own: Cell<*const Own>,
    /// Where the task stands, as a pointer with tags in its low bits (records and frames are
    /// aligned to 64 bytes, so they are free):
    /// - no [`RECORD`] tag: the frame the task's frame would hang under. For a child popped
    ///   by its parent's sync, the parent's frame: the parent is suspended in that sync, so it
    ///   cannot abort meanwhile and its epoch is the one the child was spawned at. For a task
    ///   run within a spawn or call, the caller's frame or, while the caller has none, where
    ///   the caller stands: the caller is suspended too, so the callee is cancelled exactly
    ///   when the caller is, and should the callee write a frame, it takes the place the
    ///   caller's frame would have had.
    /// - [`RECORD`]: the record of a job taken from elsewhere (stolen, a root, or run while a
    ///   frame waits), which the task stands on, or, for a task run within a spawn or call of
    ///   such a task while that has no frame, stands in for. Depth 0: a large piece, whose
    ///   top levels thieves should be able to split.
    /// - [`SHALLOW`]: the task is less than the inlining depth below the nearest job taken
    ///   from elsewhere, so its spawns queue their child (see [`Inlining`](crate::Inlining)).
    up: *const u8,
    /// The abort generation (see [`Signal`](crate::scheduler::Signal)) at which this task was
    /// last found not aborted.
    seen: Cell<u64>,
    /// Makes `'scope` invariant, as `std::thread::Scope` does: a context of one task cannot
    /// pass for a context of another.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A frame, at the top of the worker's arena when it was written: the frame and its children's
/// records are released when the task ends, back to where the frame starts.
#[repr(C)]
pub(crate) struct Own {
    frame: Frame,
    /// The end of the arena chunk the frame is in (see [`Mark`]).
    chunk_end: *mut u8,
    /// [`Context::up`] of the children this frame pops: the frame, tagged shallow unless they
    /// are deep enough to run their own children at once.
    children_up: *const u8,
}

/// What an [`Own`] takes in the arena.
const OWN_SIZE: usize = match arena::footprint(size_of::<Own>(), align_of::<Own>()) {
    Some(size) => size,
    None => panic!("a frame fits the arena's alignment"),
};

impl Own {
    /// Where the arena's top goes back to when the task ends.
    fn mark(&self) -> Mark {
        Mark::at(ptr::from_ref(self).cast(), self.chunk_end)
    }
}

impl<'scope> Context<'scope> {
    /// The context of the children that `frame` pops from this worker's deque and runs, one
    /// after the other, after finding itself not aborted at generation `seen`: each child
    /// leaves it as it found it (see [`end`](Context::end)), so one serves them all.
    ///
    /// # Safety
    /// `worker` must come from [`Worker::as_ptr`] of this thread's worker, which runs the
    /// children.
    #[inline(always)]
    pub(crate) unsafe fn child_of(worker: *const Worker, frame: &Frame, seen: u64) -> Self {
        // SAFETY: every frame starts an `Own` (see `write_frame_at`).
        let own = unsafe { &*ptr::from_ref(frame).cast::<Own>() };
        Context {
            worker,
            own: Cell::new(ptr::null()),
            up: own.children_up,
            seen: Cell::new(seen),
            _scope: PhantomData,
        }
    }

    /// The context of a job taken from another worker (or an outer frame), or a root, found
    /// not aborted at generation `seen`.
    #[inline(always)]
    pub(crate) fn for_taken(worker: &Worker, job: JobRef, seen: u64) -> Self {
        let shallow = if worker.inline_depth() > 0 {
            SHALLOW
        } else {
            0
        };
        Context {
            worker: worker.as_ptr(),
            own: Cell::new(ptr::null()),
            up: job.as_ptr().cast::<u8>().wrapping_add(RECORD | shallow),
            seen: Cell::new(seen),
            _scope: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn worker(&self) -> &Worker {
        // SAFETY: the worker outlives every task it runs.
        unsafe { &*self.worker }
    }

    /// True if the worker's signal word differs from the generation this task last saw: the
    /// check of every spawn and sync (see [`signal_changed`]).
    #[inline(always)]
    pub(crate) fn signal_changed(&self) -> bool {
        // SAFETY: the context's worker pointer comes from `Worker::as_ptr`, and the worker
        // outlives every task it runs.
        unsafe { signal_changed(self.worker, self.seen.get()) }
    }

    /// The abort generation at which this task was last found not aborted.
    #[inline(always)]
    pub(crate) fn seen(&self) -> u64 {
        self.seen.get()
    }

    /// Notes that this task was found not aborted at generation `gen`.
    #[inline(always)]
    pub(crate) fn set_seen(&self, gen: u64) {
        self.seen.set(gen);
    }

    /// [`Context::up`] without its tags.
    #[inline(always)]
    fn untagged(&self) -> *const u8 {
        self.up.wrapping_sub(self.up as usize & TAGS)
    }

    /// The record this task stands on, if it stands on one (see [`Context::up`]).
    #[inline(always)]
    fn record(&self) -> Option<JobRef> {
        if self.up as usize & RECORD != 0 {
            // SAFETY: tagged as a record, which outlives this task's run.
            Some(unsafe { JobRef::from_ptr(self.untagged().cast()) })
        } else {
            None
        }
    }

    /// The frame this task hangs under, if it does not stand on a record.
    #[inline(always)]
    fn frame_above(&self) -> Option<&Frame> {
        if self.up as usize & RECORD == 0 {
            // SAFETY: the frame above is live while this task runs.
            Some(unsafe { &*self.untagged().cast::<Frame>() })
        } else {
            None
        }
    }

    /// The frame and its mark, if the task has a frame yet.
    #[inline(always)]
    fn own_if_any(&self) -> Option<&Own> {
        // SAFETY: a frame is written before it is published here, lives until the task ends,
        // and is only ever used through shared references (its mutable parts are cells).
        unsafe { self.own.get().as_ref() }
    }

    /// The frame, if the task has one yet.
    #[inline(always)]
    fn frame_if_any(&self) -> Option<&Frame> {
        self.own_if_any().map(|own| &own.frame)
    }

    /// The task's frame, written now if it has none yet.
    #[inline(always)]
    fn frame(&self) -> &Frame {
        match self.frame_if_any() {
            Some(f) => f,
            // SAFETY: no room is asked for.
            None => unsafe { &(*self.write_frame(0).as_ptr()).frame },
        }
    }

    /// Frames between this task and the nearest job taken from elsewhere (see
    /// [`Frame::depth`]). A task without a frame counts one more than the frame it hangs
    /// under, and 0 when it stands on a record.
    fn depth(&self) -> u32 {
        match (self.frame_if_any(), self.frame_above()) {
            (Some(frame), _) => frame.depth,
            (None, Some(above)) => above.depth.wrapping_add(1),
            (None, None) => 0,
        }
    }

    /// Writes the task's frame, at the top of the worker's arena, with `room` more bytes (a
    /// multiple of the arena's alignment) right after it for its first child's record, and
    /// returns it. Inline: a task that queues children writes one, so this is on the path of
    /// every such task's first spawn; the arena's next chunk is fetched out of line.
    #[inline(always)]
    fn write_frame(&self, room: usize) -> NonNull<Own> {
        match self.worker().arena.try_alloc(OWN_SIZE + room) {
            // SAFETY: fresh arena memory, large and aligned enough.
            Some(own) => unsafe { self.write_frame_at(own.cast()) },
            None => self.write_frame_in_new_chunk(room),
        }
    }

    #[cold]
    #[inline(never)]
    fn write_frame_in_new_chunk(&self, room: usize) -> NonNull<Own> {
        let own = self.worker().arena.alloc(OWN_SIZE + room);
        // SAFETY: fresh arena memory, large and aligned enough.
        unsafe { self.write_frame_at(own.cast()) }
    }

    /// # Safety
    /// `own` must be memory just allocated at the top of the worker's arena, large and
    /// aligned enough for an `Own`; it stays until the task ends and releases it.
    #[inline(always)]
    unsafe fn write_frame_at(&self, own: NonNull<Own>) -> NonNull<Own> {
        let w = self.worker();
        let chunk_end = w.arena.chunk_end();
        // The depth matters only to inlining, and so does the tag of the children's contexts.
        let (depth, shallow) = if w.inline_depth() == u32::MAX {
            (0, SHALLOW)
        } else {
            let depth = self.depth();
            let shallow = if depth.wrapping_add(1) < w.inline_depth() {
                SHALLOW
            } else {
                0
            };
            (depth, shallow)
        };
        let children_up = own.as_ptr().cast::<u8>().cast_const().wrapping_add(shallow);
        // SAFETY: as the caller vouches.
        unsafe {
            own.as_ptr().write(Own {
                frame: Frame {
                    up: self.up,
                    away: Cell::new(0),
                    orphans: Cell::new(0),
                    abort_epoch: 0.into(),
                    stolen_done: 0.into(),
                    depth,
                },
                chunk_end,
                children_up,
            })
        };
        self.own.set(own.as_ptr());
        own
    }

    /// Handles what the worker's signal word says when it differs from what this task last
    /// saw: serves a publish request, and looks whether a new abort generation cancelled this
    /// task. Returns true if it did.
    #[cold]
    #[inline(never)]
    fn attend(&self) -> bool {
        let w = self.worker();
        let word = w.signal();
        if word & PUBLISH != 0 {
            w.publish();
        }
        let gen = word & !FLAGS;
        if gen == self.seen.get() {
            return false;
        }
        let aborted = match (self.frame_if_any(), self.record(), self.frame_above()) {
            (Some(frame), _, _) => frame.is_aborted(),
            (None, Some(job), _) => job.is_aborted(),
            (None, None, Some(above)) => above.is_aborted(),
            (None, None, None) => unreachable!("a context stands on a record or a frame"),
        };
        if !aborted {
            self.seen.set(gen);
        }
        aborted
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
    pub fn spawn<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        // One comparison covers a publish request, an abort and kept results (see `Signal`).
        if self.signal_changed() {
            return self.spawn_signalled(task);
        }
        self.spawn_unsignalled(task)
    }

    /// The part of `spawn` after the signal word: runs the child at once or queues it.
    #[inline(always)]
    fn spawn_unsignalled<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        if self.runs_at_once() {
            return self.spawn_at_once(task);
        }
        self.spawn_queued(task)
    }

    /// Whether a spawn now runs its child at once rather than queue it (see
    /// [`Inlining`](crate::Inlining)): deep in the tree, while enough jobs are queued.
    #[inline(always)]
    fn runs_at_once(&self) -> bool {
        let w = self.worker();
        w.has_queued_enough() && self.up as usize & SHALLOW == 0
    }

    /// `spawn` when the signal word changed: the job queued by the previous spawn is published
    /// if a thief asked for work, an aborted task unwinds, and while results are kept (see
    /// [Reusing results](crate::remote#reusing-results)) a child that would be queued takes
    /// its result from the table if it is there.
    #[cold]
    #[inline(never)]
    fn spawn_signalled<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        let word = self.worker().signal();
        if self.attend() {
            drop(task);
            abort_unwind();
        }
        if word & REUSE != 0 && !self.runs_at_once() {
            if let Some(handle) = self.spawn_reused(&task) {
                return handle;
            }
        }
        let handle = self.spawn_unsignalled(task);
        // A request that `attend` could not serve (nothing was queued) waits for this very
        // job: publish it now rather than at the next spawn or sync, which a task splitting
        // on demand (see `work_wanted`) may not reach for a long while.
        self.worker().serve_publish_request();
        handle
    }

    /// The part of `spawn` that runs the child at once.
    #[inline(always)]
    fn spawn_at_once<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        // Counted once, as spawned and executed alike (see `LocalCounters`).
        bump(&self.worker().local.inlined);
        if self.own.get().is_null() {
            // A task without a frame has not aborted: its epoch is 0. The child's context
            // would be this one (no frame, standing where this task stands, deep as it is, the
            // same abort generation seen), so the child runs in this very context; it leaves it
            // without a frame again (see `run_in_place`).
            let output = self.run_in_place(task);
            Handle::ready(output)
        } else {
            self.spawn_at_once_framed(task)
        }
    }

    /// [`spawn_at_once`](Context::spawn_at_once) for a task with a frame, under which the
    /// child hangs. Out of line: a task takes this path at most once per task it was given
    /// that queued children, and keeping it out keeps every task's code small.
    #[inline(never)]
    fn spawn_at_once_framed<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        let frame = self.frame();
        let spawn_epoch = frame.abort_epoch.load(Ordering::Relaxed);
        let up = ptr::from_ref(frame).cast();
        let output = self.run_here(task, up);
        Handle::ready_at(output, spawn_epoch)
    }

    /// The part of `spawn` that queues the child.
    #[inline(always)]
    fn spawn_queued<T: Task>(&mut self, task: T) -> Handle<'scope, T::Output> {
        let w = self.worker();
        // Counted by the deque's push (see `LocalCounters`).
        let room = const { Worker::room_for::<T>() };
        let (frame, room) = match self.own_if_any() {
            Some(own) => (&own.frame, w.arena.alloc(room)),
            None => {
                // The first queued child: its record goes right after the new frame.
                let own = self.write_frame(room);
                // SAFETY: just written, with the room after it.
                unsafe { (&(*own.as_ptr()).frame, own.cast::<u8>().add(OWN_SIZE)) }
            }
        };
        // SAFETY: fresh arena memory of the record's room, released when this task ends.
        let job =
            unsafe { w.push_new(room, task, frame, frame.abort_epoch.load(Ordering::Relaxed)) };
        // SAFETY: `job` was just created as a record of `T`, and lives until this task ends.
        unsafe { Handle::queued(job) }
    }

    /// A handle to the output of `task` taken from the result table, after a crash (see
    /// [Reusing results](crate::remote#reusing-results)); `None` if the child must run.
    fn spawn_reused<T: Task>(&mut self, task: &T) -> Option<Handle<'scope, T::Output>> {
        let output = crate::remote::reuse(self.worker(), task)?;
        let spawn_epoch = self.frame().abort_epoch.load(Ordering::Relaxed);
        Some(Handle::ready_at(output, spawn_epoch))
    }

    /// Waits until every child spawned so far has finished.
    ///
    /// Children still on this worker's deque are run here, newest first; while children that
    /// other workers stole are still running, this worker runs other jobs. If the running task
    /// has been aborted, its children are cancelled and the task unwinds instead of returning.
    #[inline(always)]
    pub fn sync(&mut self) {
        // Read once: the children's contexts and checks use the very pointer.
        let worker = self.worker;
        let w = self.worker();
        bump(&w.local.syncs);
        if self.signal_changed() && self.attend() {
            abort_unwind();
        }
        // Without a frame, no child was queued: all ran within their spawn.
        let Some(frame) = self.frame_if_any() else {
            return;
        };
        // Each step is written out separately for the first children: with one branch per
        // step, a task that always spawns the same number of children exits with no
        // mispredicted branch, where a single loop branch would mispredict at every exit.
        if let Some(child) = w.pop_child_in_sync(frame) {
            // SAFETY: the pointer of this context, which came from `as_ptr`.
            let mut cx = unsafe { Context::child_of(worker, frame, self.seen.get()) };
            // The check above is still fresh for the first child.
            // SAFETY: popped by its parent's frame, which found itself not aborted at the
            // generation the context holds, with nothing run since.
            unsafe { w.run_popped(child, &mut cx) };
            if let Some(child) = w.pop_child_in_sync(frame) {
                // SAFETY: as for the context.
                unsafe { Worker::run_child(worker, child, frame, &mut cx) };
                while let Some(child) = w.pop_child_in_sync(frame) {
                    // SAFETY: as for the context.
                    unsafe { Worker::run_child(worker, child, frame, &mut cx) };
                }
            }
        }
        // Children that left the private stack: wait for those still running elsewhere.
        if frame.away.get() != 0 {
            self.sync_away();
        }
    }

    /// The part of `sync` for children that left the private stack: those published but not
    /// stolen come back and run here as the others did, newest first; then it waits for the
    /// rest, running other work meanwhile.
    #[cold]
    #[inline(never)]
    fn sync_away(&mut self) {
        let w = self.worker();
        let Some(frame) = self.frame_if_any() else {
            return;
        };
        // SAFETY: the pointer of this context, which came from `as_ptr`.
        let mut cx = unsafe { Context::child_of(self.worker, frame, self.seen.get()) };
        while let Some(child) = w.pop_child(frame) {
            // SAFETY: as for the context.
            unsafe { Worker::run_child(self.worker, child, frame, &mut cx) };
        }
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
        let w = self.worker();
        if self.signal_changed() && self.attend() {
            drop(task);
            abort_unwind();
        }
        bump(&w.local.executed);
        let own = self.own.get();
        if own.is_null() && self.up as usize & SHALLOW == 0 {
            // The callee's context would be this one, as for a child run within a spawn.
            return self.run_in_place(task);
        }
        let up = match self.own_if_any() {
            // Under the frame, where the children its sync pops stand: the frame worked out
            // when it was written whether they are shallow, as it would for the callee.
            Some(own) => {
                debug_assert_eq!(own.children_up, self.callee_up(w));
                own.children_up
            }
            None => self.callee_up(w),
        };
        self.run_here(task, up)
    }

    /// [`Context::up`] of a task called by this one: under this task's frame, or while it has
    /// none, where this task stands; deep if this task is deep, and shallow if this task is
    /// shallow and the callee not yet at the inlining depth.
    #[inline(always)]
    fn callee_up(&self, w: &Worker) -> *const u8 {
        let own = self.own.get();
        let up = if own.is_null() {
            self.up.wrapping_sub(self.up as usize & SHALLOW)
        } else {
            own.cast()
        };
        if self.up as usize & SHALLOW != 0 && self.depth().wrapping_add(1) < w.inline_depth() {
            up.wrapping_add(SHALLOW)
        } else {
            up
        }
    }

    /// Runs `task` on this stack as a child of the running task, which has no frame and is
    /// deep, in the running task's own context: the child hangs where the running task would,
    /// is deep as it is, and has seen what it has; the frame it may write is ended before this
    /// returns, which leaves the context as it was. The child cannot keep anything of the
    /// context: what its `run` gets is branded with a lifetime of that call only, and its
    /// output is `'static`.
    #[inline(always)]
    fn run_in_place<T: Task>(&mut self, task: T) -> T::Output {
        debug_assert!(self.own.get().is_null());
        // A panic or abort unwinds on into this task, the guard ending the child's frame.
        let guard = UnwindGuard::<T>::new(self);
        let output = task.run(self);
        self.end();
        std::mem::forget(guard);
        output
    }

    /// Runs `task` on this stack as a child of the running task, at `up` (see
    /// [`Context::up`]), with a frame of its own that is written only when needed.
    #[inline(always)]
    fn run_here<T: Task>(&mut self, task: T, up: *const u8) -> T::Output {
        let mut cx = Context {
            worker: self.worker,
            own: Cell::new(ptr::null()),
            up,
            seen: Cell::new(self.seen.get()),
            _scope: PhantomData,
        };
        // A panic or abort unwinds on into this task, the guard ending the callee's frame.
        let guard = UnwindGuard::<T>::new(&cx);
        let output = task.run(&mut cx);
        cx.end();
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
    pub fn next_completed<O>(&mut self, handles: &mut [Handle<'scope, O>]) -> Option<(usize, O)> {
        let mut idle_rounds = 0u32;
        loop {
            let frame = self.frame();
            let epoch = frame.abort_epoch.load(Ordering::Relaxed);
            let mut waiting = false;
            for (i, h) in handles.iter_mut().enumerate() {
                let (spawn_epoch, state) = match h.peek() {
                    Peek::Taken => continue,
                    Peek::Ready { spawn_epoch } => (spawn_epoch, DONE),
                    Peek::Queued(job) => {
                        let header = job.header();
                        // The handles' lifetime is this context's: they are its children.
                        debug_assert!(std::ptr::eq(header.parent, frame));
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
                // SAFETY: the pointer of this context, which came from `as_ptr`.
                let mut cx = unsafe { Context::child_of(self.worker, frame, self.seen.get()) };
                // SAFETY: as for the context.
                unsafe { Worker::run_child(self.worker, child, frame, &mut cx) };
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
        self.signal_changed() && self.attend()
    }

    /// True when an idle worker asked this one for work and nothing it has queued can serve
    /// the request: a task holding work it can divide (a stack of pending nodes, a range)
    /// should split a piece off and [`spawn`](Context::spawn) it now. Such a spawn is
    /// published for thieves before it returns.
    ///
    /// This lets a task split on demand instead of at fixed intervals: while every worker is
    /// busy, it spawns nothing and pays nothing. The thief may be a worker of this process or,
    /// in a pool, a steal request from another process. Jobs already queued on this worker are
    /// published by this call if a request is up, and it then returns false. Costs one load
    /// while no request is up.
    #[inline(always)]
    pub fn work_wanted(&self) -> bool {
        self.worker().signal() & PUBLISH != 0 && self.work_wanted_raised()
    }

    /// [`work_wanted`](Context::work_wanted) once a request is up: publishes what is queued,
    /// and says whether the request is still unserved.
    #[cold]
    #[inline(never)]
    fn work_wanted_raised(&self) -> bool {
        let w = self.worker();
        w.publish();
        w.signal() & PUBLISH != 0
    }

    /// Index of the worker thread running this task, in `0..num_workers()`.
    pub fn worker_index(&self) -> usize {
        self.worker().index
    }

    /// Number of worker threads of the runtime.
    pub fn num_workers(&self) -> usize {
        self.worker().sched.num_workers()
    }

    /// Ends the task after `run` returned: syncs children left outstanding and releases
    /// their records.
    #[inline(always)]
    pub(crate) fn end(&mut self) {
        if !self.own.get().is_null() {
            self.end_framed();
        }
    }

    #[inline(always)]
    fn end_framed(&mut self) {
        let Some(own) = self.own_if_any() else {
            return;
        };
        let mark = own.mark();
        if own.frame.away.get() != 0 || self.worker().has_private_child(&own.frame) {
            self.implicit_sync();
        }
        let w = self.worker();
        // SAFETY: the frame lives until released below.
        let frame = unsafe { &(*self.own.get()).frame };
        if frame.orphans.get() != 0 {
            w.drop_orphans_of(frame);
        }
        w.arena.release(mark);
        // The context may serve a sibling next (see `child_of`).
        self.own.set(ptr::null());
    }

    /// True if the task has written a frame.
    #[inline(always)]
    pub(crate) fn has_frame(&self) -> bool {
        !self.own.get().is_null()
    }

    /// Ends the frame of a child popped and run by its parent (see
    /// [`Worker::run_popped`](crate::worker::Worker::run_popped)), whose record is already
    /// finished: should the implicit sync unwind, the child's children are cancelled on the
    /// way, as the guard of its executor would have done.
    ///
    /// `w` is the context's worker, as the caller holds it, and `job` the child's record,
    /// popped by the caller: the deque's top is then what it was below the record unless the
    /// child left something on the deque, which costs one comparison to ask.
    #[inline(always)]
    pub(crate) fn end_child(&mut self, w: &Worker, job: JobRef) {
        debug_assert!(ptr::eq(w, self.worker));
        // SAFETY: the caller found a frame.
        let own = unsafe { &*self.own.get() };
        // The top below the child's record was there before the child's frame, so it is no
        // child of it: the frame has none on the private stack (others count in `away`).
        if own.frame.is_settled() && w.top_was_below(job) {
            debug_assert!(!w.has_private_child(&own.frame));
            // The common case: every child was synced and taken. Nothing here can unwind.
            w.arena.release(own.mark());
            self.own.set(ptr::null());
        } else {
            self.end_child_slow();
        }
    }

    #[inline(never)]
    fn end_child_slow(&mut self) {
        let guard = DrainGuard(ptr::from_ref(self));
        self.end_framed();
        std::mem::forget(guard);
    }

    /// Kept out of line so that the executor of every job stays small.
    #[inline(never)]
    fn implicit_sync(&mut self) {
        self.sync();
    }

    /// Cancels this task's children after it unwound: drops the ones still on this worker's
    /// deque, waits for the stolen ones, which point at this frame, and releases the records.
    fn drain(&self) {
        let w = self.worker();
        let Some(own) = self.own_if_any() else {
            return;
        };
        while let Some(child) = w.pop_child(&own.frame) {
            w.discard(child, Mode::Inline);
        }
        w.sync_away(&own.frame);
        if own.frame.orphans.get() != 0 {
            w.drop_orphans_of(&own.frame);
        }
        w.arena.release(own.mark());
        self.own.set(ptr::null());
    }

    /// The shared state of the run this task belongs to.
    fn root_state(&self) -> &RootState {
        match (self.frame_if_any(), self.record(), self.frame_above()) {
            (Some(frame), _, _) => frame.root_state(),
            (None, Some(job), _) => job.root_state(),
            (None, None, Some(above)) => above.root_state(),
            (None, None, None) => unreachable!("a context stands on a frame or a record"),
        }
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

/// Ends the task of a context that runs without `catch_unwind` (a task run within a spawn or
/// call) when it unwinds; forgotten on the normal path, so it costs nothing there. The
/// unwinding goes on to the nearest executor of a stolen job or root. `T` is the task's type.
pub(crate) struct UnwindGuard<'c, T> {
    cx: *const Context<'c>,
    _task: PhantomData<T>,
}

impl<'c, T> UnwindGuard<'c, T> {
    #[inline(always)]
    pub(crate) fn new(cx: &Context<'c>) -> Self {
        UnwindGuard {
            cx,
            _task: PhantomData,
        }
    }
}

impl<T> Drop for UnwindGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard is declared after the context it points to, so it is dropped first.
        unwound(unsafe { &*self.cx }, std::any::type_name::<T>);
    }
}

/// Cancels the children of a context's task when dropped: what an unwinding
/// [`Context::end_child`] leaves to do. Forgotten on the normal path.
struct DrainGuard<'c>(*const Context<'c>);

impl Drop for DrainGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard lives within the call that borrows the context.
        unsafe { (*self.0).drain() };
    }
}

/// [`UnwindGuard`] for a queued child run by its parent's sync, which also finishes the
/// child's record. Not generic: it sits in the caller of the child's executor (see
/// [`Worker::run_popped`](crate::worker::Worker::run_popped)), which does not know the
/// child's type, and finds the task's name through the record.
pub(crate) struct RecordGuard<'c> {
    cx: *const Context<'c>,
    job: JobRef,
}

impl<'c> RecordGuard<'c> {
    #[inline(always)]
    pub(crate) fn new(cx: &Context<'c>, job: JobRef) -> Self {
        RecordGuard { cx, job }
    }
}

impl Drop for RecordGuard<'_> {
    /// Inline, so that the landing pad gets the context and the record as values, not the
    /// guard in memory: the caller then stores nothing of it on the normal path.
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: as for `UnwindGuard`.
        unsafe { finish_unwound(self.cx, self.job) };
    }
}

/// What a [`RecordGuard`] does.
///
/// # Safety
/// `cx` must point to the live context of the unwinding task of `job`, a child popped by its
/// parent on this thread.
#[cold]
#[inline(never)]
unsafe fn finish_unwound(cx: *const Context<'_>, job: JobRef) {
    // SAFETY: as the caller vouches.
    let cx = unsafe { &*cx };
    let state = unwound(cx, || job.task_name());
    // SAFETY: this thread runs the job, popped by its parent, and its task is gone.
    unsafe { cx.worker().finish(job, state, Mode::Inline) };
}

/// Ends the task of `cx`, named by `task`, that is unwinding: notes a panic (and cancels the
/// run) or an abort, and cancels the task's children. Returns the task's final state.
fn unwound(cx: &Context<'_>, task: impl FnOnce() -> &'static str) -> u8 {
    let w = cx.worker();
    let state = if ABORT_UNWINDING.with(|a| a.get()) {
        ABORTED
    } else {
        PANICKED_TASK.with(|p| {
            if p.get().is_none() {
                p.set(Some(task()));
            }
        });
        // Cancel the run now, so that the stolen children waited for below stop soon.
        cx.root_state().kill(&w.sched);
        FAILED
    };
    cx.drain();
    state
}

/// Leaves an aborted task by unwinding to its executor.
pub(crate) fn abort_unwind() -> ! {
    ABORT_UNWINDING.with(|a| a.set(true));
    panic::resume_unwind(Box::new(AbortUnwind))
}
