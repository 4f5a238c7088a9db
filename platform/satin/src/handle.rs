//! Handles to the outputs of spawned children.

use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop};
use std::ptr;
use std::sync::atomic::Ordering;

use crate::context::abort_unwind;
use crate::job::{JobRef, DONE, ORPHANED, PENDING};
use crate::worker::Worker;

/// The future output of a spawned child, returned by [`Context::spawn`](crate::Context::spawn).
///
/// Take the output with [`take`](Handle::take), normally after
/// [`Context::sync`](crate::Context::sync). A handle stays on the worker thread of the task that
/// spawned the child (it is not `Send`). Dropping it without taking the output is allowed; the
/// child still runs (unless aborted) and its output is dropped.
pub struct Handle<O> {
    state: Slot<O>,
    _not_send: PhantomData<*const O>,
}

enum Slot<O> {
    /// The child was queued: its record will hold the output.
    Queued { job: JobRef, out: *mut O },
    /// The child ran within the spawn (see [`Inlining`](crate::Inlining)); its output is here.
    /// The parent's abort epoch at the spawn tells `Context::next_completed` whether an abort
    /// since then cancelled it.
    Ready { output: O, spawn_epoch: u32 },
    /// The output was taken by `Context::next_completed`.
    Taken,
}

/// What `Context::next_completed` finds in a handle.
pub(crate) enum Peek {
    Queued(JobRef),
    Ready { spawn_epoch: u32 },
    Taken,
}

impl<O> Handle<O> {
    #[inline(always)]
    pub(crate) fn queued(job: JobRef, out: *mut O) -> Self {
        Handle {
            state: Slot::Queued { job, out },
            _not_send: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn ready(output: O, spawn_epoch: u32) -> Self {
        Handle {
            state: Slot::Ready {
                output,
                spawn_epoch,
            },
            _not_send: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn peek(&self) -> Peek {
        match &self.state {
            Slot::Queued { job, .. } => Peek::Queued(*job),
            Slot::Ready { spawn_epoch, .. } => Peek::Ready {
                spawn_epoch: *spawn_epoch,
            },
            Slot::Taken => Peek::Taken,
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
        // Fields are read one by one, never the whole handle at once: a handle is written
        // field by field, and a wider read of it would wait for those stores to drain.
        let this = ManuallyDrop::new(self);
        match &this.state {
            // SAFETY: the handle is consumed and never dropped, so the output is moved once.
            Slot::Ready { output, .. } => unsafe { ptr::read(output) },
            &Slot::Queued { job, out } => {
                if job.header().state.load(Ordering::Acquire) == DONE {
                    // SAFETY: the state is DONE, seen with Acquire: the output is written and
                    // the record belongs to this handle alone.
                    unsafe { take_done(job, out) }
                } else {
                    take_slow(job, out)
                }
            }
            Slot::Taken => {
                panic!("Handle::take: the output was already taken by Context::next_completed")
            }
        }
    }

    /// True once the child has finished with an output that can be taken without waiting.
    pub fn is_ready(&self) -> bool {
        match &self.state {
            Slot::Ready { .. } => true,
            Slot::Queued { job, .. } => job.header().state.load(Ordering::Acquire) == DONE,
            Slot::Taken => false,
        }
    }

    /// True once the output has been taken through [`Context::next_completed`](crate::Context::next_completed).
    pub fn is_taken(&self) -> bool {
        matches!(self.state, Slot::Taken)
    }

    /// Moves the output out of a finished child (its state DONE for a queued one) and leaves
    /// the handle empty.
    #[inline(always)]
    pub(crate) fn take_finished(&mut self) -> O {
        match mem::replace(&mut self.state, Slot::Taken) {
            Slot::Ready { output, .. } => output,
            // SAFETY: the caller saw the state DONE with Acquire.
            Slot::Queued { job, out } => unsafe { take_done(job, out) },
            Slot::Taken => unreachable!("take_finished on an empty handle"),
        }
    }
}

/// Moves the output out of a finished child's record and frees the record.
///
/// # Safety
/// The record's state must be DONE, seen with Acquire, and the record must belong to the
/// caller's handle alone.
#[inline(always)]
unsafe fn take_done<O>(job: JobRef, out: *mut O) -> O {
    let output = ptr::read(out);
    job.free();
    output
}

/// `take` of a queued child that has not finished, or has no output.
#[inline(never)]
fn take_slow<O>(job: JobRef, out: *mut O) -> O {
    let mut state = job.header().state.load(Ordering::Acquire);
    if state == PENDING {
        // Should the wait unwind (an abort from further up), the handle's drop orphans the
        // record so that its executor frees it.
        let unclaimed = Handle::queued(job, out);
        state = wait(job);
        mem::forget(unclaimed);
    }
    if state == DONE {
        // SAFETY: DONE was seen with Acquire, and the handle was consumed by `take`.
        return unsafe { take_done(job, out) };
    }
    // SAFETY: the child finished, and its handle was still here, so the record is ours.
    let parent_aborted = unsafe { JobRef::from_ptr(job.header().parent) }.is_aborted();
    // SAFETY: nothing refers to the record any more; it holds no task and no output.
    unsafe { job.free() };
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

impl<O> Drop for Handle<O> {
    fn drop(&mut self) {
        // A ready output is dropped with the handle's fields.
        let Slot::Queued { job, out } = self.state else {
            return;
        };
        match job.header().state.compare_exchange(
            PENDING,
            ORPHANED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // The executor will free the record when it finishes.
            Ok(_) => {}
            Err(state) => {
                // SAFETY: the child has finished and this handle is the record's last user.
                unsafe {
                    if state == DONE {
                        ptr::drop_in_place(out);
                    }
                    job.free();
                }
            }
        }
    }
}
