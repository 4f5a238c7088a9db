//! Handles to the outputs of spawned children.

use std::marker::PhantomData;
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
    /// None once the output has been taken.
    job: Option<JobRef>,
    out: *mut O,
    _not_send: PhantomData<*const O>,
}

impl<O> Handle<O> {
    #[inline(always)]
    pub(crate) fn new(job: JobRef, out: *mut O) -> Self {
        Handle {
            job: Some(job),
            out,
            _not_send: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn job(&self) -> Option<JobRef> {
        self.job
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
    pub fn take(mut self) -> O {
        let Some(job) = self.job else {
            panic!("Handle::take: the output was already taken by Context::next_completed");
        };
        if job.header().state.load(Ordering::Acquire) == DONE {
            return self.take_done();
        }
        self.take_slow(job)
    }

    /// `take` of a child that has not finished, or has no output.
    #[inline(never)]
    fn take_slow(mut self, job: JobRef) -> O {
        let mut state = job.header().state.load(Ordering::Acquire);
        if state == PENDING {
            state = wait(job);
        }
        if state == DONE {
            self.take_done()
        } else {
            self.job = None;
            // SAFETY: the child finished, and its handle was still here, so the record is ours.
            let parent_aborted = unsafe { JobRef::from_ptr(job.header().parent) }.is_aborted();
            // SAFETY: nothing refers to the record any more; it holds no task and no output.
            unsafe { job.free() };
            if parent_aborted {
                abort_unwind();
            }
            panic!("Handle::take: the child was cancelled by Context::abort and has no output");
        }
    }

    /// True once the child has finished with an output that can be taken without waiting.
    pub fn is_ready(&self) -> bool {
        self.job
            .is_some_and(|j| j.header().state.load(Ordering::Acquire) == DONE)
    }

    /// True once the output has been taken through [`Context::next_completed`](crate::Context::next_completed).
    pub fn is_taken(&self) -> bool {
        self.job.is_none()
    }

    /// Moves the output out of a finished child's record and frees the record.
    #[inline(always)]
    pub(crate) fn take_done(&mut self) -> O {
        let job = self.job.take().expect("handle holds a job");
        // SAFETY: the state is DONE, seen with Acquire, so the output is written, and the
        // executor has let go of the record: it belongs to this handle alone.
        unsafe {
            let out = ptr::read(self.out);
            job.free();
            out
        }
    }
}

#[cold]
fn wait(job: JobRef) -> u8 {
    let w = Worker::current().expect("a Handle is used on the worker thread of its parent task");
    w.wait_for(job)
}

impl<O> Drop for Handle<O> {
    fn drop(&mut self) {
        let Some(job) = self.job else { return };
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
                        ptr::drop_in_place(self.out);
                    }
                    job.free();
                }
            }
        }
    }
}
