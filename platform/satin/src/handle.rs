//! Handles to the outputs of spawned children.

use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::atomic::Ordering;

use crate::context::abort_unwind;
use crate::job::{output_of, JobHeader, JobRef, DONE, PENDING};
use crate::worker::Worker;

/// The future output of a spawned child, returned by [`Context::spawn`](crate::Context::spawn).
///
/// Take the output with [`take`](Handle::take), normally after
/// [`Context::sync`](crate::Context::sync). Dropping a handle without taking the output is
/// allowed; the child still runs (unless aborted) and its output is dropped: right there, in
/// the spawning task, if the child has finished (or ran within its spawn), and otherwise by the
/// runtime when the child finishes. Should the output's `Drop` panic, the run fails with
/// [`Error::TaskPanicked`](crate::Error::TaskPanicked), naming the spawning task in the first
/// case and the child in the second.
///
/// A handle cannot outlive the task that spawned its child: it carries the lifetime of that
/// task's [`Context`](crate::Context), it is neither `Send` nor `Sync`, and it is not
/// `'static`, so it cannot be returned from `run`, stored in a `static` or a `thread_local!`,
/// or moved to another thread. The child's record, which holds its output, lives only as long
/// as that task runs. This compiles:
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Leaf(u64);
/// # impl satin::Task for Leaf {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { self.0 }
/// # }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Sum(u64);
///
/// impl satin::Task for Sum {
///     type Output = u64;
///     fn run(self, cx: &mut satin::Context) -> u64 {
///         let handles: Vec<_> = (0..self.0).map(|i| cx.spawn(Leaf(i))).collect();
///         cx.sync();
///         handles.into_iter().map(|h| h.take()).sum()
///     }
/// }
/// assert_eq!(satin::Runtime::local().threads(2).run(Sum(10))?, 45);
/// # Ok::<(), satin::Error>(())
/// ```
///
/// Keeping a handle beyond its task does not:
///
/// ```compile_fail,E0521
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Leaf;
/// # impl satin::Task for Leaf {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { 1 }
/// # }
/// thread_local! {
///     static KEPT: std::cell::RefCell<Option<satin::Handle<'static, u64>>> =
///         const { std::cell::RefCell::new(None) };
/// }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Keeper;
/// impl satin::Task for Keeper {
///     type Output = ();
///     fn run(self, cx: &mut satin::Context) {
///         let h = cx.spawn(Leaf);
///         KEPT.with(|k| *k.borrow_mut() = Some(h)); // error: the handle does not live long enough
///     }
/// }
/// ```
///
/// ```compile_fail,E0277
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Leaf;
/// # impl satin::Task for Leaf {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { 1 }
/// # }
/// static KEPT: std::sync::Mutex<Option<satin::Handle<'static, u64>>> =
///     std::sync::Mutex::new(None); // error: a handle cannot be shared between threads
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Keeper;
/// impl satin::Task for Keeper {
///     type Output = ();
///     fn run(self, cx: &mut satin::Context) {
///         *KEPT.lock().unwrap() = Some(cx.spawn(Leaf));
///     }
/// }
/// ```
///
/// Returning one from `run` (here inside the output) does not either: an output is `'static`.
///
/// ```compile_fail,E0521
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Leaf;
/// # impl satin::Task for Leaf {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { 1 }
/// # }
/// struct Escaped(satin::Handle<'static, u64>);
/// # impl serde::Serialize for Escaped {
/// #     fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> { s.serialize_unit() }
/// # }
/// # impl<'de> serde::Deserialize<'de> for Escaped {
/// #     fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> { unimplemented!() }
/// # }
/// # unsafe impl Send for Escaped {}
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Leaker;
/// impl satin::Task for Leaker {
///     type Output = Escaped;
///     fn run(self, cx: &mut satin::Context) -> Escaped {
///         Escaped(cx.spawn(Leaf)) // error: lifetime may not live long enough
///     }
/// }
/// ```
///
/// Nor does moving one to another thread, even a scoped one that ends within the task:
///
/// ```compile_fail,E0277
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Leaf;
/// # impl satin::Task for Leaf {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { 1 }
/// # }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Mover;
/// impl satin::Task for Mover {
///     type Output = u64;
///     fn run(self, cx: &mut satin::Context) -> u64 {
///         let h = cx.spawn(Leaf);
///         std::thread::scope(|s| s.spawn(move || h.take()).join().unwrap()) // error: not Send
///     }
/// }
/// ```
pub struct Handle<'scope, O> {
    /// The record of a queued child, which will hold the output (see [`output_of`]); for a
    /// child that ran within its spawn (see [`Inlining`](crate::Inlining)), whose output is
    /// in `ready`, null if the parent's abort epoch at the spawn was 0 and [`READY`] if it is
    /// in `spawn_epoch`; [`TAKEN`] once the output was taken by `Context::next_completed`.
    job: *const JobHeader,
    /// See `job`: the epoch tells `Context::next_completed` whether an abort since the spawn
    /// cancelled the child. Set only with [`READY`].
    spawn_epoch: MaybeUninit<u32>,
    /// For a child that ran within its spawn: its output.
    ready: MaybeUninit<O>,
    /// Ties the handle to the spawning task's context, invariantly (see `Context`).
    _scope: PhantomData<&'scope mut &'scope ()>,
    /// Keeps the handle on the spawning task's thread: neither `Send` nor `Sync`.
    _not_send: PhantomData<*const O>,
}

/// [`Handle::job`] of a handle whose output was taken.
const TAKEN: *const JobHeader = &TAKEN_MARK.0;
/// [`Handle::job`] of a handle with a ready output and its epoch in `spawn_epoch`.
const READY: *const JobHeader = &READY_MARK.0;

/// What [`TAKEN`] and [`READY`] point to: headers of no job, whose state is no job's, so
/// that `take` reads a state through any handle but one of a child run within its spawn.
struct Mark(JobHeader);

// SAFETY: nothing ever writes a mark; the state is only loaded.
unsafe impl Sync for Mark {}

static TAKEN_MARK: Mark = Mark(JobHeader::mark());
static READY_MARK: Mark = Mark(JobHeader::mark());

/// What `Context::next_completed` finds in a handle.
pub(crate) enum Peek {
    Queued(JobRef),
    Ready { spawn_epoch: u32 },
    Taken,
}

impl<O> Handle<'_, O> {
    /// # Safety
    /// `job` must be a record, created by the running task's spawn, whose output is of type `O`.
    #[inline(always)]
    pub(crate) unsafe fn queued(job: JobRef) -> Self {
        Handle {
            job: job.as_ptr(),
            spawn_epoch: MaybeUninit::uninit(),
            ready: MaybeUninit::uninit(),
            _scope: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// The handle of a child that ran within its spawn under a task at abort epoch 0.
    #[inline(always)]
    pub(crate) fn ready(output: O) -> Self {
        Handle {
            job: ptr::null(),
            spawn_epoch: MaybeUninit::uninit(),
            ready: MaybeUninit::new(output),
            _scope: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// The handle of a child that ran within its spawn under a task at abort epoch
    /// `spawn_epoch`.
    #[inline(always)]
    pub(crate) fn ready_at(output: O, spawn_epoch: u32) -> Self {
        Handle {
            job: READY,
            spawn_epoch: MaybeUninit::new(spawn_epoch),
            ready: MaybeUninit::new(output),
            _scope: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// True if the handle holds a ready output.
    #[inline(always)]
    fn is_ready_here(&self) -> bool {
        self.job.is_null() || self.job == READY
    }

    /// The record of a queued child.
    #[inline(always)]
    fn record(&self) -> Option<JobRef> {
        if !self.job.is_null() && self.job != READY && self.job != TAKEN {
            // SAFETY: neither null nor TAKEN: the record of the child, which lives as long as
            // the spawning task, and so as long as this handle.
            Some(unsafe { JobRef::from_ptr(self.job) })
        } else {
            None
        }
    }

    #[inline(always)]
    pub(crate) fn peek(&self) -> Peek {
        match self.record() {
            Some(job) => Peek::Queued(job),
            None if self.job.is_null() => Peek::Ready { spawn_epoch: 0 },
            None if self.job == READY => Peek::Ready {
                // SAFETY: set with READY.
                spawn_epoch: unsafe { self.spawn_epoch.assume_init() },
            },
            None => Peek::Taken,
        }
    }

    /// Returns the child's output.
    ///
    /// If the child has not finished yet (no `sync` since the spawn), this worker runs other
    /// jobs, the child itself included if it is still here, until it has.
    ///
    /// # Panics
    /// If the output was already taken by [`Context::next_completed`](crate::Context::next_completed),
    /// or the child was cancelled by its parent's [`abort`](crate::Context::abort). If the child
    /// was cancelled from further up, the calling task is itself aborted and unwinds quietly.
    #[inline(always)]
    pub fn take(self) -> O {
        let this = ManuallyDrop::new(self);
        let job = this.job;
        if job.is_null() {
            // SAFETY: a ready output; the handle is consumed and never dropped, so the output
            // is moved once.
            return unsafe { this.ready.assume_init_read() };
        }
        // SAFETY: a record, or a mark, both of which outlive the handle.
        if unsafe { (*job).state.load(Ordering::Acquire) } == DONE {
            // SAFETY: a record (no mark is DONE), DONE seen with Acquire: the output is
            // written, and the handle, consumed here, is the only way to it.
            return unsafe { output_of::<O>(JobRef::from_ptr(job)).read() };
        }
        take_other(ManuallyDrop::into_inner(this))
    }

    /// True once the child has finished with an output that can be taken without waiting.
    pub fn is_ready(&self) -> bool {
        match self.record() {
            Some(job) => job.header().state.load(Ordering::Acquire) == DONE,
            None => self.is_ready_here(),
        }
    }

    /// True once the output has been taken through [`Context::next_completed`](crate::Context::next_completed).
    pub fn is_taken(&self) -> bool {
        self.job == TAKEN
    }

    /// Moves the output out of a finished child (its state DONE for a queued one) and leaves
    /// the handle empty.
    #[inline(always)]
    pub(crate) fn take_finished(&mut self) -> O {
        let output = match self.record() {
            // SAFETY: the caller saw the state DONE with Acquire.
            Some(job) => unsafe { output_of::<O>(job).read() },
            // SAFETY: the output is moved out once: the handle is marked taken below.
            None if self.is_ready_here() => unsafe { self.ready.assume_init_read() },
            None => unreachable!("take_finished on an empty handle"),
        };
        self.job = TAKEN;
        output
    }
}

/// `take` of all but a ready output without an epoch and a finished child.
#[inline(never)]
fn take_other<O>(handle: Handle<'_, O>) -> O {
    let handle = ManuallyDrop::new(handle);
    match handle.record() {
        Some(job) => take_slow(job),
        // SAFETY: the handle is consumed and never dropped, so the output is moved once.
        None if handle.is_ready_here() => unsafe { handle.ready.assume_init_read() },
        None => panic!("Handle::take: the output was already taken by Context::next_completed"),
    }
}

/// `take` of a queued child that has not finished, or has no output.
fn take_slow<O>(job: JobRef) -> O {
    let mut state = job.header().state.load(Ordering::Acquire);
    if state == PENDING {
        // Should the wait unwind (an abort from further up), the handle's drop orphans the
        // record so that its frame drops the output.
        // SAFETY: the same record the consumed handle had.
        let unclaimed = unsafe { Handle::<'_, O>::queued(job) };
        state = wait(job);
        mem::forget(unclaimed);
    }
    if state == DONE {
        // SAFETY: DONE was seen with Acquire, and the handle was consumed by `take`.
        return unsafe { output_of::<O>(job).read() };
    }
    // The parent's frame is alive: it belongs to the task running this `take`, since a handle
    // cannot leave the task that spawned its child.
    let parent_aborted = job.parent().is_some_and(|p| p.is_aborted());
    if parent_aborted {
        abort_unwind();
    }
    panic!("Handle::take: the child was cancelled by Context::abort and has no output");
}

#[cold]
fn wait(job: JobRef) -> u8 {
    let w = Worker::current().expect("a Handle is used on the worker thread of its parent task");
    w.wait_for(job)
}

impl<O> Drop for Handle<'_, O> {
    fn drop(&mut self) {
        // An output without drop glue needs nothing done with it, wherever it is: the frame
        // outlives the child either way. Known at compile time, so such a handle has no drop
        // code at all, and a task holding only such handles needs no unwinding cleanup.
        if !std::mem::needs_drop::<O>() {
            return;
        }
        let Some(job) = self.record() else {
            if self.is_ready_here() {
                // SAFETY: a ready output, never moved out (that would have marked it taken).
                unsafe { self.ready.assume_init_drop() };
            }
            return;
        };
        match job.header().state.load(Ordering::Acquire) {
            // SAFETY: the child has finished and this handle is the only way to its output.
            DONE => unsafe { output_of::<O>(job).drop_in_place() },
            // Its frame drops the output once the child has finished: the frame outlives the
            // handle, and a pending child finishes before its frame ends.
            PENDING => Worker::current()
                .expect("a Handle is used on the worker thread of its parent task")
                .orphan(job),
            _ => {}
        }
    }
}
