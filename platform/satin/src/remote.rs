//! Hooks for a distributed layer that moves work between processes.
//!
//! A runtime on its own only steals between its threads. A layer that connects several
//! processes drives these hooks; [`Runtime::in_pool`](crate::Runtime::in_pool) is such a
//! layer, over the port library:
//!
//! * **Giving work away.** When another process asks for work, [`Remote::steal_oldest`] takes
//!   the oldest job of this runtime, serialized as a registered type name plus bytes. The job is
//!   then *stolen remotely*: the task that spawned it waits for it at its next sync, running
//!   other work meanwhile. The layer later reports the outcome with [`RemoteJob::complete`]
//!   (serialized output) or [`RemoteJob::fail`], which fails the whole run with that error.
//! * **Running received work.** [`Remote::submit`] decodes a task by its registered name, runs
//!   it on the local workers as a new root, and hands back its serialized output.
//! * **Speculative search.** A job given away may be aborted by its parent afterwards;
//!   [`RemoteJob::is_aborted`] tells the layer so it can cancel the remote copy with
//!   [`RemoteRoot::abort`] on the other side. [`Remote::set_abort_hook`] says when to look.
//! * **Asking for work.** [`Remote::set_idle_hook`] is called by workers that found nothing
//!   to do in this process.
//!
//! Task types must be registered with [`register!`](crate::register) in both processes.

use std::hint;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_deque::Steal;

use crate::codec::{self, OnOutput};
use crate::job::{JobRef, ABORTED, DONE, FAILED};
use crate::root::{Latch, RootState};
use crate::scheduler::Scheduler;
use crate::worker::finish_elsewhere;
use crate::Error;

pub use crate::codec::registered_name;

/// Entry point to the hooks of one runtime; from [`Runtime::remote`](crate::Runtime::remote).
/// Cheap to clone, and usable from any thread.
#[derive(Clone)]
pub struct Remote {
    pub(crate) sched: Arc<Scheduler>,
}

impl Remote {
    /// Takes the oldest job of one worker (trying the workers in turn) and serializes its task.
    ///
    /// Returns `Ok(None)` if no worker has a job that others may take right now; the workers
    /// are then asked to expose some, so asking again shortly may succeed. A job whose task
    /// type is not registered, or does not encode, is left to the local workers and the error
    /// is returned.
    pub fn steal_oldest(&self) -> Result<Option<RemoteJob>, Error> {
        let table = codec::table()?;
        let sched = &self.sched;
        let n = sched.workers.len();
        let start = sched.remote_cursor.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let index = (start + k) % n;
            let victim = &sched.workers[index];
            let job = loop {
                match victim.stealer.steal() {
                    Steal::Success(job) => break Some(job),
                    Steal::Empty => break None,
                    Steal::Retry => hint::spin_loop(),
                }
            };
            let Some(job) = job else {
                victim.publish_request.store(true, Ordering::Relaxed);
                continue;
            };
            // The victim waits for the job, so it is the one to wake when the job is done.
            job.header().owner.set(index as u32);
            if job.is_aborted() {
                // SAFETY: the job is ours now and never ran; nobody else will execute it.
                unsafe {
                    (job.header().vtable.discard)(job);
                    finish_elsewhere(job, ABORTED, sched);
                }
                continue;
            }
            let vt = job.header().vtable;
            let Some(type_name) = table.name_of((vt.type_id)()) else {
                sched.inject(job);
                return Err(Error::Unregistered((vt.task_name)()));
            };
            // SAFETY: the job is ours and still holds its task.
            match unsafe { (vt.encode_task)(job) } {
                Ok(task) => {
                    let c = &sched.shared_counters;
                    c.jobs_sent.fetch_add(1, Ordering::Relaxed);
                    c.bytes_moved
                        .fetch_add(task.len() as u64, Ordering::Relaxed);
                    let id = sched.next_remote_id.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(id, type_name, bytes = task.len(), "job given away");
                    return Ok(Some(RemoteJob {
                        id,
                        job: Some(job),
                        type_name,
                        task,
                        sched: Arc::clone(sched),
                    }));
                }
                Err(e) => {
                    sched.inject(job);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Decodes a task of the type registered as `type_name` from `task` and runs it as a new
    /// root on the local workers. `on_done` receives the serialized output, or the error the
    /// run ended with; it is called on a worker thread and should return quickly.
    pub fn submit<F>(&self, type_name: &str, task: &[u8], on_done: F) -> Result<RemoteRoot, Error>
    where
        F: FnOnce(Result<Vec<u8>, Error>) + Send + 'static,
    {
        let registration = codec::table()?.by_name(type_name)?;
        let sched = Arc::clone(&self.sched);
        let counted = Arc::clone(&self.sched);
        counted
            .shared_counters
            .bytes_moved
            .fetch_add(task.len() as u64, Ordering::Relaxed);
        let on_output: OnOutput = Box::new(move |result: Result<Vec<u8>, Error>| {
            if let Ok(bytes) = &result {
                counted
                    .shared_counters
                    .bytes_moved
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            on_done(result)
        });
        let state = registration.submit(&sched, task, on_output)?;
        Ok(RemoteRoot { state, sched })
    }

    /// Like [`submit`](Remote::submit), but waits for the output.
    pub fn run_serialized(&self, type_name: &str, task: &[u8]) -> Result<Vec<u8>, Error> {
        let latch = Arc::new(Latch::new());
        let setter = Arc::clone(&latch);
        self.submit(type_name, task, move |r| setter.set(r))?;
        latch.wait()
    }

    /// Installs `hook`, called by a worker (with its index) when it has found no job in this
    /// process for a while: once when it starts to back off and again before each time it
    /// parks, so the layer can send a steal request elsewhere. While a hook is installed,
    /// sleeping workers wake at least every millisecond to call it. Work obtained that way is
    /// run with [`submit`](Remote::submit). The hook runs on the idle worker, which may block
    /// in it (a synchronous steal), but is then unavailable for local work. Replaces any
    /// earlier hook.
    pub fn set_idle_hook<F>(&self, hook: F)
    where
        F: Fn(usize) + Send + Sync + 'static,
    {
        *self.sched.idle_hook.write() = Some(Arc::new(hook));
        self.sched.idle_hook_set.store(true, Ordering::Release);
        // Sleepers may be in a long park; let them call the hook now.
        self.sched.wake_all();
    }

    /// Removes the hook installed by [`set_idle_hook`](Remote::set_idle_hook).
    pub fn clear_idle_hook(&self) {
        self.sched.idle_hook_set.store(false, Ordering::Release);
        *self.sched.idle_hook.write() = None;
    }

    /// Installs `hook`, called right after any frame of this runtime aborts its children and
    /// after any run is cancelled, on the thread that did it. Jobs given away may have become
    /// unwanted then: the layer can look at [`RemoteJob::is_aborted`] at once instead of
    /// polling. The hook must return quickly and must not block. Replaces any earlier hook.
    pub fn set_abort_hook<F>(&self, hook: F)
    where
        F: Fn() + Send + Sync + 'static,
    {
        *self.sched.abort_hook.write() = Some(Arc::new(hook));
        self.sched.abort_hook_set.store(true, Ordering::Release);
    }

    /// Removes the hook installed by [`set_abort_hook`](Remote::set_abort_hook).
    pub fn clear_abort_hook(&self) {
        self.sched.abort_hook_set.store(false, Ordering::Release);
        *self.sched.abort_hook.write() = None;
    }

    /// Number of workers currently parked for lack of work: a hint to ask other processes.
    pub fn idle_workers(&self) -> usize {
        self.sched.sleepers.load(Ordering::Relaxed)
    }

    /// Records, for [`Stats`](crate::Stats), a steal request this process sent to another.
    pub fn note_steal_attempt(&self, succeeded: bool) {
        let c = &self.sched.shared_counters;
        c.remote_steal_attempts.fetch_add(1, Ordering::Relaxed);
        if succeeded {
            c.remote_steals.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A job taken from this runtime to run elsewhere. Its parent waits until it is completed or
/// failed; dropping it without either fails the run, so a lost job cannot hang it.
pub struct RemoteJob {
    id: u64,
    job: Option<JobRef>,
    type_name: &'static str,
    task: Vec<u8>,
    sched: Arc<Scheduler>,
}

impl RemoteJob {
    /// Identifier, unique within this runtime, for matching the reply.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The registered name of the task type.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The serialized task.
    pub fn task(&self) -> &[u8] {
        &self.task
    }

    /// True once the job's result is no longer wanted (an ancestor aborted it, or the run is
    /// failing): the remote copy may be cancelled, and the job completed or failed at once.
    pub fn is_aborted(&self) -> bool {
        self.job.is_some_and(|j| j.is_aborted())
    }

    /// Delivers the serialized output to the waiting parent. If the bytes do not decode, the
    /// run fails with that error, which is also returned.
    pub fn complete(mut self, output: &[u8]) -> Result<(), Error> {
        let job = self.job.take().expect("a RemoteJob completes once");
        self.sched
            .shared_counters
            .bytes_moved
            .fetch_add(output.len() as u64, Ordering::Relaxed);
        if job.is_aborted() {
            // SAFETY: the job's slot is empty (its task was encoded) and we are its executor.
            unsafe { finish_elsewhere(job, ABORTED, &self.sched) };
            return Ok(());
        }
        // SAFETY: the slot is empty since the task was encoded.
        match unsafe { (job.header().vtable.decode_output)(job, output) } {
            Ok(()) => {
                // SAFETY: the output is in place and we are the job's executor.
                unsafe { finish_elsewhere(job, DONE, &self.sched) };
                Ok(())
            }
            Err(e) => {
                fail_job(job, e.clone(), &self.sched);
                Err(e)
            }
        }
    }

    /// Reports that the job failed remotely; the whole run fails with `error`.
    pub fn fail(mut self, error: Error) {
        let job = self.job.take().expect("a RemoteJob completes once");
        fail_job(job, error, &self.sched);
    }
}

impl Drop for RemoteJob {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            let error = Error::Remote(format!(
                "job {} (`{}`) was given away and never completed",
                self.id, self.type_name
            ));
            fail_job(job, error, &self.sched);
        }
    }
}

fn fail_job(job: JobRef, error: Error, sched: &Scheduler) {
    tracing::debug!(%error, "remote job failed");
    job.root_state().fail(sched, error);
    // SAFETY: the slot is empty (the task was encoded) and we are the job's executor.
    unsafe { finish_elsewhere(job, FAILED, sched) };
}

/// A root started from serialized input by [`Remote::submit`].
pub struct RemoteRoot {
    state: Arc<RootState>,
    sched: Arc<Scheduler>,
}

impl RemoteRoot {
    /// Cancels the whole tree of this root; its callback then receives [`Error::Aborted`]
    /// (or the output, if the root had already finished).
    pub fn abort(&self) {
        self.state.kill(&self.sched);
    }

    /// True once the root's callback has been called (or is being called).
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }
}
