//! Roots: the task a run starts with, and how its result gets back to whoever asked.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::job::{Job, JobRef, DONE};
use crate::scheduler::Scheduler;
use crate::{Error, Task};

type Deliver = Box<dyn FnOnce(JobRef, Option<Error>) + Send>;

/// A root's record, aligned like the records in the workers' arenas, so that a context can tag
/// a pointer to it in the same low bits (see `Context::up`).
#[repr(C, align(64))]
struct Root<T: Task>(Job<T>);

/// What all jobs of one run share.
pub(crate) struct RootState {
    killed: AtomicBool,
    /// The first failure of the run; it becomes the run's result.
    error: Mutex<Option<Error>>,
    deliver: Mutex<Option<Deliver>>,
    finished: AtomicBool,
}

impl RootState {
    #[inline]
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Fails the run with `error` (unless it already failed) and cancels all its jobs.
    pub(crate) fn fail(&self, sched: &Scheduler, error: Error) {
        {
            let mut slot = self.error.lock();
            if slot.is_none() {
                *slot = Some(error);
            }
        }
        self.kill(sched);
    }

    /// Cancels all jobs of the run.
    pub(crate) fn kill(&self, sched: &Scheduler) {
        if !self.killed.swap(true, Ordering::AcqRel) {
            sched.shared_counters.aborts.fetch_add(1, Ordering::Relaxed);
        }
        sched.bump_abort_gen();
    }
}

/// Starts `task` as a new root on the workers of `sched`; `deliver` gets its result, on the
/// worker that finishes it.
pub(crate) fn submit<T, F>(sched: &Arc<Scheduler>, task: T, deliver: F) -> Arc<RootState>
where
    T: Task,
    F: FnOnce(Result<T::Output, Error>) + Send + 'static,
{
    let state = Arc::new(RootState {
        killed: AtomicBool::new(false),
        error: Mutex::new(None),
        deliver: Mutex::new(Some(Box::new(move |job, error| {
            // SAFETY: `job` is this root's finished record, handed over by `finish`.
            deliver(unsafe { collect::<T>(job, error) })
        }))),
        finished: AtomicBool::new(false),
    });
    // The record keeps the state alive for all jobs of the tree; `finish` releases it.
    let raw = Arc::into_raw(Arc::clone(&state));
    // A root never sits on a private stack, so its link holds the state for good. It is
    // boxed: it is created and collected outside the workers, whose arenas hold the rest.
    let record = Box::into_raw(Box::new(Root(Job::root(task, raw))));
    // SAFETY: just allocated.
    let job = unsafe { JobRef::from_ptr(record.cast()) };
    sched.active_roots.fetch_add(1, Ordering::SeqCst);
    tracing::debug!(task = std::any::type_name::<T>(), "root submitted");
    sched.inject_root(job);
    state
}

/// Takes the output (or error) out of a finished root record and frees the record.
///
/// # Safety
/// `job` must be a finished root of type `T`, made by [`submit`], that nothing uses afterwards.
unsafe fn collect<T: Task>(job: JobRef, error: Option<Error>) -> Result<T::Output, Error> {
    // SAFETY: as the caller vouches: boxed by `submit`, and no longer used elsewhere.
    let mut record = unsafe { Box::from_raw(job.as_ptr() as *mut Root<T>) };
    let output = if record.0.header.state.load(Ordering::Acquire) == DONE {
        // SAFETY: DONE, seen with Acquire: the record holds the output. The box drops neither
        // task nor output, so the output is moved out once.
        Some(unsafe { record.0.output.get_mut().assume_init_read() })
    } else {
        None
    };
    drop(record);
    match (error, output) {
        (Some(e), _) => Err(e),
        (None, Some(out)) => Ok(out),
        (None, None) => Err(Error::Aborted),
    }
}

/// Completes a root: publishes its state and delivers the result.
///
/// # Safety
/// `job` must be a root that the calling thread executed and is done with.
pub(crate) unsafe fn finish(job: JobRef, state: u8, sched: &Scheduler) {
    // SAFETY: a root's link holds the reference `submit` made for the record.
    let root = unsafe { Arc::from_raw(job.header().link.get().root) };
    job.header().state.store(state, Ordering::Release);
    let error = root.error.lock().take();
    let deliver = root.deliver.lock().take();
    root.finished.store(true, Ordering::Release);
    sched.active_roots.fetch_sub(1, Ordering::SeqCst);
    tracing::debug!(state, "root finished");
    if let Some(deliver) = deliver {
        // A panicking callback must not take the worker thread down with it.
        if panic::catch_unwind(AssertUnwindSafe(|| deliver(job, error))).is_err() {
            tracing::error!("the callback receiving a root's result panicked");
        }
    }
}

/// Completes a root that no worker will run, because the runtime has shut down: drops its
/// task and delivers [`Error::ShutDown`].
///
/// # Safety
/// `job` must be a root made by [`submit`] that never ran, taken off the injector by the
/// calling thread, and used by nothing else afterwards.
pub(crate) unsafe fn fail_unrun(job: JobRef, sched: &Scheduler) {
    debug_assert!(job.parent().is_none(), "only roots are failed unrun");
    // SAFETY: it never ran, so its slot holds the task. A panic in the task's `Drop` leaves
    // the run failing with `ShutDown` all the same.
    let _ = unsafe { crate::worker::discard_task(job) };
    job.root_state().fail(sched, Error::ShutDown);
    // SAFETY: as the caller vouches; its slot is empty now.
    unsafe { finish(job, crate::job::ABORTED, sched) };
}

/// A one-shot slot a thread can wait on.
pub(crate) struct Latch<T> {
    value: Mutex<Option<T>>,
    ready: Condvar,
}

impl<T> Latch<T> {
    pub(crate) fn new() -> Self {
        Latch {
            value: Mutex::new(None),
            ready: Condvar::new(),
        }
    }

    pub(crate) fn set(&self, v: T) {
        *self.value.lock() = Some(v);
        self.ready.notify_all();
    }

    pub(crate) fn wait(&self) -> T {
        let mut guard = self.value.lock();
        loop {
            if let Some(v) = guard.take() {
                return v;
            }
            self.ready.wait(&mut guard);
        }
    }
}
