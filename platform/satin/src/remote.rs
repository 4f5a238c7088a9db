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
//!   (serialized output; [`RemoteJob::complete_from`] for an output another node sent, which
//!   names that node if the output is refused) or [`RemoteJob::fail`], which fails the whole
//!   run with that error.
//! * **Running received work.** [`Remote::submit`] decodes a task by its registered name, runs
//!   it on the local workers as a new root, and hands back its serialized output.
//! * **Speculative search.** A job given away may be aborted by its parent afterwards;
//!   [`RemoteJob::is_aborted`] tells the layer so it can cancel the remote copy with
//!   [`RemoteRoot::abort`] on the other side. [`Remote::set_abort_hook`] says when to look.
//! * **Asking for work.** [`Remote::set_idle_hook`] is called by workers that found nothing
//!   to do in this process.
//! * **Results kept for later.** After a crash, jobs run again; results that were computed
//!   elsewhere for the crashed node (orphans), and that a job run again will ask for, can be
//!   kept in this runtime's result table ([`Remote::keep_result`]). While the table holds
//!   anything, every queued spawn of this process looks its task up there first and takes a
//!   kept result instead of running the child (see [Reusing results](#reusing-results)).
//!
//! Task types must be registered with [`register!`](crate::register) in both processes.
//!
//! User code runs inside these hooks: a task's `Serialize` when it is given away, its
//! `Deserialize` when it is received, an output's `Serialize`, `Deserialize` and `Drop`. A
//! panic there never unwinds into the layer's threads: the run the job belongs to fails with
//! [`Error::TaskPanicked`] naming the task type (on the receiving side, the submitted root's
//! callback gets that error), and the job's parent stops waiting for it.
//!
//! # Reusing results
//!
//! A job that travels between processes is known by its registered type name and the bytes of
//! its task: a thief computes the job's output from those bytes alone, so any job with the same
//! type and bytes has the same output, wherever in the tree it sits. The result table is keyed
//! that way. A spawn looks a task up only while the table is not empty (a bit of the
//! worker's signal word says so, which every spawn compares anyway) and only when it queues
//! its child; a spawn that runs its child at once (see [`Inlining`](crate::Inlining)) does
//! not look. A result is used once and then removed; [`Remote::clear_results`] empties the
//! table. Nothing waits for a result that is not there yet: a layer that expects one holds
//! back the job that will ask for it instead (as the distributed runtime does; a worker
//! blocked in a spawn could hold up, further down its stack, the very job computing the
//! result).
//!
//! A kept result came from another node (or was computed here for a node that died), and
//! may be wrong: its bytes may not decode as the task's output, its type's `Deserialize` may
//! refuse them, or the task type's [`check_output`](Task::check_output) may (a panic of
//! either counts as a refusal, since only that result sets it off). Such a result is
//! never used, and never fails the run: the job it was kept for can always be computed
//! again, so it is, as if nothing had been kept. Every way a kept result is taken follows
//! that policy: a spawn computes its child, a job a remote thief asks for is given to the
//! thief ([`Remote::steal_oldest`]), and [`Remote::take_result`] answers `None`. The
//! result is dropped with a warning naming the node that sent it, as given to
//! [`Remote::keep_result_from`] ("an unnamed sender" for [`Remote::keep_result`]). This
//! differs from a result a thief sends for a job it was given
//! ([`RemoteJob::complete_from`]), which fails the run with [`Error::BadResult`]: only that
//! thief was computing the job, so its wrong answer cannot be told from a broken run.

use std::any::TypeId;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::codec::{self, OnOutput};
use crate::job::{JobRef, ABORTED, DONE, FAILED};
use crate::root::{Latch, RootState};
use crate::scheduler::{steal_settled, Scheduler, WorkerShared};
use crate::worker::{discard_task, fail_for_panic, finish_elsewhere, Worker};
use crate::{Error, Task};

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
    /// is returned. If the task's `Serialize` (or its `Drop`, once serialized) panics, the run
    /// the job belongs to fails with [`Error::TaskPanicked`], which is returned; the job ends
    /// as failed, so its parent does not wait for it.
    pub fn steal_oldest(&self) -> Result<Option<RemoteJob>, Error> {
        let table = codec::table()?;
        let sched = &self.sched;
        let n = sched.workers.len();
        let start = sched.remote_cursor.fetch_add(1, Ordering::Relaxed);
        for k in 0..n {
            let index = (start + k) % n;
            let victim = &sched.workers[index];
            let Some(job) = steal_settled(|| victim.stealer.steal()) else {
                victim.publish_request.store(true, Ordering::Relaxed);
                continue;
            };
            // The victim waits for the job, so it is the one to wake when the job is done.
            job.header().owner.set(index as u32);
            if job.is_aborted() {
                // SAFETY: the job is ours now and never ran; nobody else will execute it.
                if let Err(payload) = unsafe { discard_task(job) } {
                    let _ = fail_for_panic(job, sched, "dropping it unrun", payload);
                }
                // SAFETY: as above; its slot is empty now.
                unsafe { finish_elsewhere(job, ABORTED, sched) };
                continue;
            }
            let vt = job.header().vtable;
            let Some(type_name) = table.name_of((vt.type_id)()) else {
                sched.inject(job);
                return Err(Error::Unregistered((vt.task_name)()));
            };
            // SAFETY: the job is ours and holds its task.
            let encoded =
                panic::catch_unwind(AssertUnwindSafe(|| unsafe { (vt.encode_task)(job) }));
            let panicked = match encoded {
                Ok(Ok(task)) => {
                    // The task travels as bytes from here on.
                    // SAFETY: the job is ours, and its task was only borrowed for encoding.
                    match unsafe { discard_task(job) } {
                        Ok(()) => {
                            let kept = sched.results.take(&sched.workers, (vt.type_id)(), &task);
                            let Some(kept) = kept else {
                                return Ok(Some(self.give_away(job, type_name, task)));
                            };
                            // Its result is known: complete it here and look for another,
                            // unless the result is refused; then the job is given away as
                            // asked, to be computed by the thief.
                            let id = sched.next_remote_id.fetch_add(1, Ordering::Relaxed);
                            let done = RemoteJob::new(id, job, type_name, task, sched);
                            let Some(job) = done.complete_kept(kept) else {
                                continue;
                            };
                            return Ok(Some(self.sent(job)));
                        }
                        Err(payload) => {
                            (payload, "dropping it once serialized for another process")
                        }
                    }
                }
                Ok(Err(e)) => {
                    sched.inject(job);
                    return Err(e);
                }
                Err(payload) => {
                    // The task is still there: drop it, whatever its `Drop` does.
                    // SAFETY: as above.
                    let _ = unsafe { discard_task(job) };
                    (payload, "serializing it for another process")
                }
            };
            // User code of the task type panicked: the run fails, and the job ends as failed so
            // that its parent stops waiting for it.
            let error = fail_for_panic(job, sched, panicked.1, panicked.0);
            // SAFETY: the job is ours, and its slot is empty.
            unsafe { finish_elsewhere(job, FAILED, sched) };
            return Err(error);
        }
        Ok(None)
    }

    /// Records a job taken and encoded as given away.
    fn give_away(&self, job: JobRef, type_name: &'static str, task: Vec<u8>) -> RemoteJob {
        let id = self.sched.next_remote_id.fetch_add(1, Ordering::Relaxed);
        self.sent(RemoteJob::new(id, job, type_name, task, &self.sched))
    }

    /// Counts `job` as sent to another process, its task's bytes as moved.
    fn sent(&self, job: RemoteJob) -> RemoteJob {
        let c = &self.sched.shared_counters;
        c.jobs_sent.fetch_add(1, Ordering::Relaxed);
        c.bytes_moved
            .fetch_add(job.task.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            id = job.id,
            type_name = job.type_name,
            bytes = job.task.len(),
            "job given away"
        );
        job
    }

    /// Decodes a task of the type registered as `type_name` from `task` and runs it as a new
    /// root on the local workers. `on_done` receives the serialized output, or the error the
    /// run ended with; it is called on a worker thread and should return quickly. A panic in
    /// the task's `Deserialize` is returned as [`Error::TaskPanicked`]; one in the output's
    /// `Serialize` or `Drop` reaches `on_done` as that error.
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
    /// process for a while: once when it starts to back off, every 10 rounds of yielding after
    /// that, and before each time it parks, so the layer can send a steal request elsewhere. While a hook is installed,
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

    /// Records, for [`Stats`](crate::Stats), something a distributed layer did.
    pub fn note(&self, event: Event) {
        let c = &self.sched.shared_counters;
        let counter = match event {
            Event::StealSent { wide } => {
                if wide {
                    c.wide_steal_attempts.fetch_add(1, Ordering::Relaxed);
                }
                &c.remote_steal_attempts
            }
            Event::StealSucceeded { wide } => {
                if wide {
                    c.wide_steals.fetch_add(1, Ordering::Relaxed);
                }
                &c.remote_steals
            }
            Event::JobReceived => &c.jobs_received,
            Event::CancelSent => &c.cancels_sent,
            Event::CancelReceived => &c.cancels_received,
            Event::JobReexecuted => &c.jobs_reexecuted,
            Event::ResultReused => &c.results_reused,
            Event::ResultSalvaged => &c.results_salvaged,
            Event::JobReturned => &c.jobs_returned,
            Event::NodeJoined => &c.nodes_joined,
            Event::NodeLeft => &c.nodes_left,
            Event::NodeDied => &c.nodes_died,
            Event::MessageRefused => &c.messages_refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// True when called from one of this runtime's worker threads (where waiting for a run of
    /// the same runtime would block a worker on itself).
    pub fn on_own_worker(&self) -> bool {
        Worker::current().is_some_and(|w| Arc::ptr_eq(&w.sched, &self.sched))
    }

    /// True while any root (submitted here, or started by [`submit`](Remote::submit)) runs.
    pub fn has_active_roots(&self) -> bool {
        self.sched.active_roots.load(Ordering::Acquire) > 0
    }

    /// Starts `task` as a new root on the local workers; `on_done` receives its output, or the
    /// error the run ended with, on the worker that finishes it. The returned handle fails or
    /// cancels the whole tree.
    pub fn start<T, F>(&self, task: T, on_done: F) -> LocalRoot
    where
        T: Task,
        F: FnOnce(Result<T::Output, Error>) + Send + 'static,
    {
        LocalRoot {
            state: crate::root::submit(&self.sched, task, on_done),
            sched: Arc::clone(&self.sched),
        }
    }

    /// Keeps `output`, the serialized result of the task of type `type_name` serialized as
    /// `task`, for the next spawn (or remote steal) of an equal task in this process. Its
    /// sender is not known; [`keep_result_from`](Remote::keep_result_from) names it. Fails if
    /// `type_name` is not registered.
    pub fn keep_result(&self, type_name: &str, task: &[u8], output: Vec<u8>) -> Result<(), Error> {
        self.keep(type_name, task, output, None)
    }

    /// Like [`keep_result`](Remote::keep_result), for a result that the node `sender` sent
    /// (or computed): if the result turns out not to decode, or its task refuses it, the
    /// warning that says so names `sender` (see [Reusing results](self#reusing-results)).
    pub fn keep_result_from(
        &self,
        type_name: &str,
        task: &[u8],
        output: Vec<u8>,
        sender: &str,
    ) -> Result<(), Error> {
        self.keep(type_name, task, output, Some(sender.into()))
    }

    fn keep(
        &self,
        type_name: &str,
        task: &[u8],
        output: Vec<u8>,
        sender: Option<Box<str>>,
    ) -> Result<(), Error> {
        let id = type_id_of(type_name)?;
        let kept = Kept { output, sender };
        self.sched.results.keep(&self.sched.workers, id, task, kept);
        Ok(())
    }

    /// Takes the kept result of the task of type `type_name` serialized as `task`, if there
    /// is one (a result still expected does not count), and counts it as reused. A kept
    /// result that does not decode, or that the task type's
    /// [`check_output`](Task::check_output) refuses, is dropped with a warning naming its
    /// sender, and `None` returned: the job is to be computed (see
    /// [Reusing results](self#reusing-results)). A panic of the task type's code while
    /// decoding or checking it counts as a refusal, as it does wherever a kept result is
    /// taken.
    pub fn take_result(&self, type_name: &str, task: &[u8]) -> Option<Vec<u8>> {
        let reg = codec::table().ok()?.by_name(type_name).ok()?;
        let kept = self
            .sched
            .results
            .take(&self.sched.workers, reg.type_id(), task)?;
        if let Err(e) = reg.check_output(task, &kept.output) {
            kept.refused(type_name, &e);
            return None;
        }
        self.note(Event::ResultReused);
        Some(kept.output)
    }

    /// Completes `job` with the kept result of its task, if there is one that decodes and
    /// that its task takes; otherwise hands the job back, to be computed.
    pub(crate) fn complete_kept(&self, job: RemoteJob) -> Option<RemoteJob> {
        let Ok(id) = type_id_of(job.type_name) else {
            return Some(job);
        };
        match self.sched.results.take(&self.sched.workers, id, &job.task) {
            Some(kept) => job.complete_kept(kept),
            None => Some(job),
        }
    }

    /// Empties the result table.
    pub fn clear_results(&self) {
        self.sched.results.clear(&self.sched.workers);
    }

    /// Number of results kept.
    pub fn results_held(&self) -> usize {
        self.sched.results.len()
    }
}

/// Something a distributed layer did, counted in [`Stats`](crate::Stats) by
/// [`Remote::note`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A steal request went to another process (`wide`: of another location).
    StealSent {
        /// Sent to another location.
        wide: bool,
    },
    /// A steal request brought back a job.
    StealSucceeded {
        /// From another location.
        wide: bool,
    },
    /// A job of another process started here.
    JobReceived,
    /// A cancellation was sent for a job given away.
    CancelSent,
    /// A job received from another process was cancelled by its owner.
    CancelReceived,
    /// A job given to a process that died runs again here.
    JobReexecuted,
    /// A kept result was used instead of computing a job.
    ResultReused,
    /// A result arrived from a process that was leaving.
    ResultSalvaged,
    /// A job given away came back unstarted from a process that was leaving.
    JobReturned,
    /// A process joined a running pool.
    NodeJoined,
    /// A process left the pool.
    NodeLeft,
    /// A process died.
    NodeDied,
    /// A message from another process was refused: undecodable, or from a member that may
    /// not send it.
    MessageRefused,
}

/// A root started by [`Remote::start`].
pub struct LocalRoot {
    state: Arc<RootState>,
    sched: Arc<Scheduler>,
}

impl LocalRoot {
    /// Fails the whole tree with `error`, which the root's callback then receives.
    pub fn fail(&self, error: Error) {
        self.state.fail(&self.sched, error);
    }

    /// True once the root's callback has been called (or is being called).
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }
}

fn type_id_of(type_name: &str) -> Result<TypeId, Error> {
    Ok(codec::table()?.by_name(type_name)?.type_id())
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
    fn new(
        id: u64,
        job: JobRef,
        type_name: &'static str,
        task: Vec<u8>,
        sched: &Arc<Scheduler>,
    ) -> RemoteJob {
        RemoteJob {
            id,
            job: Some(job),
            type_name,
            task,
            sched: Arc::clone(sched),
        }
    }

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

    /// Delivers the serialized output to the waiting parent. If the bytes do not decode, or
    /// the task type's [`check_output`](Task::check_output) refuses them (or either panics),
    /// the run fails with that error, which is also returned.
    pub fn complete(self, output: &[u8]) -> Result<(), Error> {
        self.deliver(output, None)
    }

    /// Like [`complete`](RemoteJob::complete), for an output that the node `sender` sent: if
    /// the bytes do not decode, or the output type's `Deserialize` refuses them, or the task
    /// type's [`check_output`](Task::check_output) does, the run fails with
    /// [`Error::BadResult`] naming `sender`, which is also returned. An output type that
    /// checks what it decodes (with `#[serde(try_from = ...)]`, say) so has inconsistent
    /// results from another node blamed on that node rather than on the task that would trip
    /// over them.
    pub fn complete_from(self, output: &[u8], sender: &str) -> Result<(), Error> {
        self.deliver(output, Some(sender))
    }

    /// Completes the job with a kept result, if it decodes and its task takes it; otherwise
    /// (a panic while decoding or checking it included) logs that, naming the result's
    /// sender, and hands the job back to be computed. An aborted job is completed as such.
    fn complete_kept(mut self, kept: Kept) -> Option<RemoteJob> {
        let job = self.job.expect("a RemoteJob completes once");
        if job.is_aborted() {
            self.job = None;
            // SAFETY: the job's slot is empty (its task was encoded) and we are its executor.
            unsafe { finish_elsewhere(job, ABORTED, &self.sched) };
            return None;
        }
        match self.decode_into(job, &kept.output) {
            Ok(()) => {
                self.job = None;
                let c = &self.sched.shared_counters;
                c.bytes_moved
                    .fetch_add(kept.output.len() as u64, Ordering::Relaxed);
                c.results_reused.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the output is in place and we are the job's executor.
                unsafe { finish_elsewhere(job, DONE, &self.sched) };
                None
            }
            // Nothing was written into the job, whose task is still at hand as bytes. A panic
            // of the task type's code over the result is the result's refusal too: the job can
            // be computed instead, as for `take_result` and a spawn.
            Err(e @ (Error::Decode { what: "output", .. } | Error::TaskPanicked { .. })) => {
                kept.refused(self.type_name, &e);
                Some(self)
            }
            Err(e) => {
                self.job = None;
                fail_job(job, e, &self.sched);
                None
            }
        }
    }

    /// Decodes `output` into the job, which holds none, and checks it against the task. A
    /// panic of the task type's code (or of its payload's `Drop`) is returned as
    /// [`Error::TaskPanicked`]; nothing is written into the job then.
    fn decode_into(&self, job: JobRef, output: &[u8]) -> Result<(), Error> {
        let decode_output = job.header().vtable.decode_output;
        let task = &self.task;
        codec::contain(
            job.task_name(),
            "deserializing or checking its output",
            || {
                // SAFETY: the slot is empty since the task was encoded.
                unsafe { decode_output(job, output, task) }
            },
        )
    }

    fn deliver(mut self, output: &[u8], sender: Option<&str>) -> Result<(), Error> {
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
        match self.decode_into(job, output) {
            Ok(()) => {
                // SAFETY: the output is in place and we are the job's executor.
                unsafe { finish_elsewhere(job, DONE, &self.sched) };
                Ok(())
            }
            Err(e) => {
                let e = match (e, sender) {
                    (
                        Error::Decode {
                            task,
                            what: "output",
                            reason,
                        },
                        Some(node),
                    ) => Error::BadResult {
                        node: node.to_string(),
                        task,
                        reason,
                    },
                    (e, _) => e,
                };
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

/// A kept result: a serialized output, and the node that sent it, if known.
pub(crate) struct Kept {
    output: Vec<u8>,
    sender: Option<Box<str>>,
}

impl Kept {
    /// Logs that this result of a task of type `type_name` is refused (`why`), naming its
    /// sender; the job is computed instead.
    fn refused(&self, type_name: &str, why: &Error) {
        let sender = self.sender.as_deref().unwrap_or("an unnamed sender");
        tracing::warn!(
            sender,
            type_name,
            "a result kept from {sender} does not decode or is refused ({why}); computing it"
        );
    }
}

/// The results of one task type, by task bytes.
type OfType = HashMap<Box<[u8]>, Kept>;

/// Results of jobs, by task type and task bytes (see [Reusing results](self#reusing-results)).
#[derive(Default)]
pub(crate) struct ResultTable {
    results: Mutex<HashMap<TypeId, OfType>>,
    /// Number of results; whether it is 0 is mirrored in the workers' signal words.
    len: AtomicUsize,
}

impl ResultTable {
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Updates the count after the results changed, and tells the `workers` of the
    /// runtime when the table starts or stops holding results (their spawns look tasks up
    /// only while it does); called with the lock held, so that the workers learn the
    /// changes in the order they happen.
    fn recount(&self, results: &HashMap<TypeId, OfType>, workers: &[WorkerShared]) {
        let n: usize = results.values().map(HashMap::len).sum();
        let before = self.len.swap(n, Ordering::AcqRel);
        if (before == 0) != (n == 0) {
            for w in workers {
                w.publish_request.set_reuse(n != 0);
            }
        }
    }

    fn keep(&self, workers: &[WorkerShared], id: TypeId, task: &[u8], kept: Kept) {
        let mut results = self.results.lock();
        results.entry(id).or_default().insert(task.into(), kept);
        self.recount(&results, workers);
    }

    fn clear(&self, workers: &[WorkerShared]) {
        let mut results = self.results.lock();
        results.clear();
        self.recount(&results, workers);
    }

    /// Takes the result of `task`, if there is one.
    fn take(&self, workers: &[WorkerShared], id: TypeId, task: &[u8]) -> Option<Kept> {
        if self.len() == 0 {
            return None;
        }
        let mut results = self.results.lock();
        let of_type = results.get_mut(&id)?;
        let output = of_type.remove(task)?;
        if of_type.is_empty() {
            results.remove(&id);
        }
        self.recount(&results, workers);
        Some(output)
    }
}

/// For a spawn while results are kept (the signal word's reuse bit): the output of `task`
/// from the worker's result table, or `None` if the child must run (also when the result does
/// not decode or [`Task::check_output`] refuses it, or either panics: the kept result is then
/// refused as on every other path, see [Reusing results](self#reusing-results)). A task
/// whose `Serialize` panics unwinds into the spawning task, as any panic of its own code
/// does: that is no fault of a kept result.
#[cold]
#[inline(never)]
pub(crate) fn reuse<T: Task>(worker: &Worker, task: &T) -> Option<T::Output> {
    let sched = &worker.sched;
    if sched.results.len() == 0 {
        return None;
    }
    let bytes = postcard::to_allocvec(task).ok()?;
    let kept = sched
        .results
        .take(&sched.workers, TypeId::of::<T>(), &bytes)?;
    let name = std::any::type_name::<T>();
    // The output's `Drop`, on a refusal, is user code too, so it runs inside.
    let checked = codec::contain(name, "deserializing or checking a kept output", || {
        let out = codec::decode::<T::Output>(&kept.output, "output", name)?;
        codec::check_output(task, &out)?;
        Ok(out)
    });
    match checked {
        Ok(out) => {
            sched
                .shared_counters
                .results_reused
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(task = std::any::type_name::<T>(), "kept result reused");
            Some(out)
        }
        Err(e) => {
            kept.refused(name, &e);
            None
        }
    }
}
