//! Handling incoming messages: steal requests and replies, jobs and their results,
//! cancellations, and the messages of joins, recoveries and leaves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl::{Lane, ReadMessage};
use parking_lot::Mutex;

use super::node::{Given, Node, RunHere, Running};
use super::proto::{self, JobKey, Msg, Shipped};
use crate::remote::{Event, RemoteJob};
use crate::Error;

/// How long a victim keeps looking for a job to give when its workers have work but have not
/// made any of it visible yet (they do at their next spawn or sync).
const VICTIM_PATIENCE: Duration = Duration::from_micros(500);

impl Node {
    pub(crate) fn handle(self: &Arc<Self>, m: &mut ReadMessage) {
        let Some(from) = self.sender_of(m) else {
            return;
        };
        let decoded = proto::decode(m);
        let (epoch, msg) = match decoded {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(node = %self.me, from, "undecodable message: {e}");
                self.remote.note(Event::MessageRefused);
                return;
            }
        };
        match msg {
            Msg::Steal { req, wide } => self.on_steal(from, epoch, req, wide),
            Msg::Reply { req, wide, job } => self.on_reply(from, epoch, req, wide, job),
            Msg::Result { job, output } => self.on_result(from, job, output),
            Msg::Cancel { job } => self.on_cancel(from, job),
            Msg::Done { failure } => self.on_done(from, epoch, failure),
            Msg::DoneAck => self.on_done_ack(from, epoch),
            Msg::Failed { reason } => self.fail_run(
                Some(epoch),
                Error::Remote(format!("on {}: {reason}", self.name_of(from))),
            ),
            Msg::Hello => self.on_hello(from),
            Msg::Welcome { active } => self.on_welcome(from, epoch, active),
            Msg::Orphans { dead, jobs } => self.on_orphans(from, epoch, dead, jobs),
            Msg::OrphanResult { job, output } => self.on_orphan_result(from, epoch, job, output),
            Msg::Returned { job } => self.on_returned(from, job),
            Msg::Leaving => self.on_leaving(from),
            Msg::AllDone => self.on_all_done(from, epoch),
            Msg::Left => self.on_left(from),
        }
    }

    /// The rank of the sender of `m`: a member, or a node of this pool that joined and is not
    /// known here yet (its message may overtake the pool's news of it).
    fn sender_of(&self, m: &ReadMessage) -> Option<u32> {
        let origin = m.origin();
        let rank = origin.rank();
        {
            let members = self.members.read();
            if members.live.contains_key(&rank) {
                return Some(rank);
            }
            if members.gone.contains_key(&rank) {
                tracing::debug!(node = %self.me, %origin, "message from a member that is gone ignored");
                return None;
            }
        }
        if origin.pool() == self.me.pool() && self.ibis.pool().is_alive(origin) {
            self.member_joined(origin.clone());
            return Some(rank);
        }
        tracing::warn!(node = %self.me, %origin, "message from outside the pool ignored");
        None
    }

    /// A thief asks for work: give it the oldest local job, or nothing.
    fn on_steal(&self, thief: u32, epoch: u64, req: u64, wide: bool) {
        if wide && wide_steal_unanswered() {
            tracing::warn!(node = %self.me, thief, req, "the failpoint satin::wide-steal-unanswered drops a wide-area steal request");
            return;
        }
        let job = if self.serving(epoch) {
            self.take_job()
        } else {
            None
        };
        // `take_job` may wait, and the run may end meanwhile and the next one start: a job
        // taken then belongs to a later run than the thief asked for, and the thief would
        // drop it. While this node still serves `epoch`, the job cannot be of a later run
        // (that run cannot start before this unfinished job's run ends).
        let job = match job {
            Some(job) if !self.serving(epoch) => {
                self.run_here(job, "taken back");
                None
            }
            job => job,
        };
        tracing::trace!(node = %self.me, thief, req, wide, found = job.is_some(), "steal request answered");
        let Some(job) = job else {
            // No answer for a run that is over: the master tells every node of its end, and
            // the thief stops waiting then; it may have closed its mesh already. A thief in a
            // run that has not started here gets its empty answer.
            if !self.has_ended(epoch) {
                let _ = self.send(thief, Lane::Control, "answering a steal request", |l| {
                    proto::reply(l, epoch, req, wide, None)
                });
            }
            return;
        };
        // Counted before the job is visible to the watcher, so that no abort is missed, and
        // recorded before it is sent, under the lock: the watcher then sees the job as soon
        // as the thief can have started it. A cancellation may still reach the thief before
        // the job does (another connection); the thief remembers it.
        self.given_count.fetch_add(1, Ordering::AcqRel);
        let id = job.id();
        let mut given = self.given.lock();
        let g = given.entry(id).or_insert(Given { job, thief, epoch });
        let sent = self.send(thief, Lane::Data, "sending a job to a thief", |l| {
            proto::reply(
                l,
                epoch,
                req,
                wide,
                Some((id, g.job.type_name(), g.job.task())),
            )
        });
        match sent {
            Ok(()) => {
                tracing::debug!(node = %self.me, thief, id, "job given away");
            }
            Err(e) => {
                let g = given.remove(&id).expect("recorded above");
                drop(given);
                self.given_count.fetch_sub(1, Ordering::AcqRel);
                // The thief is gone before it could have the job, or the link to it broke:
                // then `send` made it a suspect, which the watcher takes for dead (closing
                // the connections, so that the thief learns it too), and whatever it sends
                // from now on is ignored. Either way the job runs here, and only here.
                let why = if e.gone {
                    "kept: its thief is gone"
                } else {
                    tracing::debug!(node = %self.me, thief, id, error = %e.error, "a job could not be sent to its thief");
                    "kept: the link to its thief broke"
                };
                self.run_here(g.job, why);
            }
        }
    }

    /// Runs a job taken for giving away (or given away and lost) on this node after all, as a
    /// new local root whose output completes it.
    pub(crate) fn run_here(&self, job: RemoteJob, why: &str) {
        if job.is_aborted() {
            // Nobody wants it any more: completing it (as aborted) releases its parent.
            let _ = job.complete(&[]);
            return;
        }
        // A kept result that is refused is logged, naming its sender, and the job runs.
        let Some(job) = self.remote.complete_kept(job) else {
            return;
        };
        let (type_name, task) = (job.type_name(), job.task().to_vec());
        let slot = Arc::new(Mutex::new(Some(job)));
        let done = Arc::clone(&slot);
        let submitted = self.remote.submit(type_name, &task, move |result| {
            let Some(job) = done.lock().take() else {
                return;
            };
            match result {
                Ok(bytes) => {
                    if let Err(e) = job.complete(&bytes) {
                        tracing::warn!(
                            "the output of a job run here after all does not decode: {e}"
                        );
                    }
                }
                // Aborted because nobody wants it (`abort_unwanted_here`): finished as such.
                Err(_) if job.is_aborted() => {
                    let _ = job.complete(&[]);
                }
                Err(e) => job.fail(e),
            }
        });
        match submitted {
            Ok(root) => {
                tracing::debug!(node = %self.me, type_name, "job {why}; it runs here");
                self.here.lock().push(RunHere { job: slot, root });
            }
            Err(e) => {
                if let Some(job) = slot.lock().take() {
                    job.fail(e);
                }
            }
        }
    }

    /// The oldest job of a local worker, waiting a little for workers that have work but have
    /// not exposed any yet.
    fn take_job(&self) -> Option<RemoteJob> {
        let start = Instant::now();
        loop {
            match self.remote.steal_oldest() {
                Ok(Some(job)) => return Some(job),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(node = %self.me, "a job cannot be given away: {e}");
                    return None;
                }
            }
            if !self.remote.has_active_roots() || start.elapsed() >= VICTIM_PATIENCE {
                return None;
            }
            std::thread::yield_now();
        }
    }

    fn on_reply(
        self: &Arc<Self>,
        victim: u32,
        epoch: u64,
        req: u64,
        wide: bool,
        job: Option<Shipped>,
    ) {
        let bytes = job.as_ref().map_or(0, |s| s.task.len() as u64);
        let got = match job {
            Some(s) if self.leaving.load(Ordering::Acquire) => {
                // This node is leaving: the job goes back unstarted.
                tracing::debug!(node = %self.me, id = s.id, "job handed back: this node is leaving");
                // On the data lane, so that it comes before this node's `LEFT`.
                let _ = self.send(victim, Lane::Data, "handing a job back", |l| {
                    proto::returned(l, epoch, s.id)
                });
                false
            }
            Some(s) if self.serving(epoch) => self.start_stolen(victim, epoch, s),
            // This node's part in that run is over, so the run is: the owner no longer wants
            // the job and completes it on its own.
            // Answer anyway, so that an owner that still waits for it fails instead of
            // hanging.
            Some(s) => {
                tracing::debug!(node = %self.me, id = s.id, "job of a finished run returned");
                let why = format!("it reached {} after its part in run {epoch} ended", self.me);
                let _ = self.send(victim, Lane::Data, "returning a job", |l| {
                    proto::result(l, epoch, s.id, Err(&why))
                });
                false
            }
            None => false,
        };
        tracing::trace!(node = %self.me, victim, req, got, "steal reply");
        if crate::trace::enabled() {
            crate::trace::stole_remotely(self.me.rank(), victim, got, bytes);
        }
        self.steal_answered(victim, req, wide, got);
    }

    /// Runs a job received from `owner` as a new local root; its result goes back to `owner`.
    fn start_stolen(self: &Arc<Self>, owner: u32, epoch: u64, s: Shipped) -> bool {
        let key = (owner, s.id);
        if self.early_cancels.lock().remove(&key) {
            tracing::debug!(node = %self.me, id = s.id, "job cancelled before it arrived");
            return false;
        }
        if let Some(output) = self.remote.take_result(&s.type_name, &s.task) {
            // Computed before, for a node that died: answer with that.
            let _ = self.send(owner, Lane::Data, "sending a kept result", |l| {
                proto::result(l, epoch, s.id, Ok(&output))
            });
            return true;
        }
        let job = JobKey {
            type_name: s.type_name,
            task: s.task,
        };
        self.running.lock().insert(
            key,
            Running {
                root: None,
                cancelled: false,
                key: job.clone(),
                orphan: false,
            },
        );
        let weak = Arc::downgrade(self);
        let on_done = move |result: Result<Vec<u8>, Error>| {
            if let Some(node) = weak.upgrade() {
                node.stolen_done(key, epoch, result);
            }
        };
        match self.remote.submit(&job.type_name, &job.task, on_done) {
            Ok(root) => {
                self.remote.note(Event::JobReceived);
                tracing::debug!(node = %self.me, owner, id = s.id, "stolen job started");
                // Absent if it has already finished.
                if let Some(r) = self.running.lock().get_mut(&key) {
                    r.root = Some(root);
                }
                true
            }
            Err(e) => {
                self.running.lock().remove(&key);
                tracing::warn!(node = %self.me, "a stolen job cannot run here: {e}");
                let why = format!("it cannot run on {}: {e}", self.me);
                let _ = self.send(owner, Lane::Data, "returning a job", |l| {
                    proto::result(l, epoch, s.id, Err(&why))
                });
                false
            }
        }
    }

    /// The root of a stolen job finished: send its output (or error) to the owner, or, if
    /// the owner is gone, keep it for whoever runs the owner's work again.
    fn stolen_done(&self, key: (u32, u64), epoch: u64, result: Result<Vec<u8>, Error>) {
        let Some(entry) = ({
            let mut running = self.running.lock();
            let entry = running.remove(&key);
            // Counted under the lock, so that a leaving node that finds nothing running
            // also finds this result sent (see `may_leave`).
            if entry.is_some() {
                self.results_sending.fetch_add(1, Ordering::AcqRel);
            }
            entry
        }) else {
            return;
        };
        let _sent = Sending(&self.results_sending);
        if matches!(result, Err(Error::Aborted)) || entry.cancelled {
            return;
        }
        let (owner, id) = key;
        let why;
        let output = match &result {
            Ok(bytes) => Ok(&bytes[..]),
            Err(e) => {
                why = e.to_string();
                Err(&why[..])
            }
        };
        if !entry.orphan {
            let sent = self.send(owner, Lane::Data, "sending a result", |l| {
                proto::result(l, epoch, id, output)
            });
            match sent {
                Ok(()) => return,
                // The owner is gone, or the link to it broke: then `send` made it a suspect,
                // which the watcher takes for dead, closing the connections to it; the owner
                // learns it from their end (`connection_ended`) and runs the job again. The
                // result is an orphan's after all, kept for whoever runs the job again.
                Err(e) => {
                    if !e.gone {
                        tracing::warn!(node = %self.me, id, owner, "the result of a job could not be sent to its owner: {}", e.error);
                    }
                }
            }
        }
        match result {
            Ok(bytes) => self.orphan_finished(epoch, owner, entry.key, bytes),
            Err(e) => {
                let reason = format!(
                    "job {id} of {} (which is gone, or out of reach) failed: {e}",
                    self.name_of(owner)
                );
                self.report_failure(epoch, &reason);
            }
        }
    }

    /// Tells the master that this node made the run fail.
    pub(crate) fn report_failure(&self, epoch: u64, reason: &str) {
        if self.is_master() {
            self.fail_run(Some(epoch), Error::Remote(reason.to_string()));
        } else {
            let _ = self.send(
                self.master.rank(),
                Lane::Control,
                "reporting a failure",
                |l| proto::failed(l, epoch, reason),
            );
        }
    }

    /// A thief sends back the output of a job this node gave it.
    fn on_result(&self, thief: u32, id: u64, output: Result<Vec<u8>, String>) {
        let Some(given) = self.take_given(thief, id, "a result") else {
            return;
        };
        if self.members.read().leaving.contains(&thief) {
            self.remote.note(Event::ResultSalvaged);
        }
        match output {
            Ok(bytes) => {
                if let Err(e) = given.job.complete_from(&bytes, &self.name_of(thief)) {
                    tracing::warn!(node = %self.me, id, "the output of a remote job is refused: {e}");
                }
            }
            Err(why) => {
                let error = Error::Remote(format!(
                    "job {id} (`{}`) failed on {}: {why}",
                    given.job.type_name(),
                    self.name_of(thief)
                ));
                given.job.fail(error);
            }
        }
    }

    /// Takes job `id` off the jobs given away, for `what` that member `from` sent about it.
    /// Only the thief the job was given to may answer for it: anything another member sends
    /// (job numbers are sequential, so easily guessed) is refused, and the job stays given, so
    /// that its thief's answer still counts.
    fn take_given(&self, from: u32, id: u64, what: &str) -> Option<Given> {
        let mut given = self.given.lock();
        let thief = match given.get(&id) {
            None => {
                tracing::debug!(node = %self.me, id, from, "{what} for a cancelled or recovered job ignored");
                return None;
            }
            Some(g) => g.thief,
        };
        if thief != from {
            drop(given);
            tracing::warn!(
                node = %self.me, id,
                "{what} from {} for a job given to {}, refused",
                self.name_of(from),
                self.name_of(thief)
            );
            self.remote.note(Event::MessageRefused);
            return None;
        }
        let taken = given.remove(&id);
        drop(given);
        self.given_count.fetch_sub(1, Ordering::AcqRel);
        taken
    }

    /// The owner of a job running here no longer wants it.
    fn on_cancel(&self, owner: u32, id: u64) {
        let mut running = self.running.lock();
        match running.get_mut(&(owner, id)) {
            Some(r) => {
                r.cancelled = true;
                if let Some(root) = &r.root {
                    root.abort();
                }
                self.remote.note(Event::CancelReceived);
                tracing::debug!(node = %self.me, id, "stolen job cancelled by its owner");
            }
            // Either the job is still on its way, or it has finished here; in the second
            // case the entry stays until the end of the run.
            None => {
                self.early_cancels.lock().insert((owner, id));
            }
        }
    }

    /// A leaving node hands back a job it received after it began to leave.
    fn on_returned(&self, from: u32, id: u64) {
        let Some(given) = self.take_given(from, id, "a handed-back job") else {
            return;
        };
        self.remote.note(Event::JobReturned);
        tracing::debug!(node = %self.me, id, from, "job handed back by a leaving node");
        self.run_here(given.job, "handed back");
    }

    /// Member `from` announced that it is leaving.
    fn on_leaving(&self, from: u32) {
        tracing::debug!(node = %self.me, from, "member is leaving");
        self.members.write().leaving.insert(from);
    }

    /// Member `from`, which is leaving, sent its last result: the watcher may now take it
    /// for gone (see `Node::member_gone`).
    fn on_left(&self, from: u32) {
        tracing::debug!(node = %self.me, from, "member sent its last message");
        self.members.write().goodbyes.insert(from);
    }

    /// Tells the thieves of jobs this node no longer needs (an ancestor aborted them, or the
    /// run is failing) to cancel them, and completes those jobs here at once. Runs on the
    /// watcher and, through the abort hook, on any thread that aborts; locks `given` and then
    /// sends, in the same order as `on_steal`, and is called with `running` held by
    /// `on_cancel` and `cancel_running`, which nothing takes while holding `given`.
    pub(crate) fn cancel_unwanted(&self) {
        if self.given_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let unwanted: Vec<(u64, Given)> = {
            let mut given = self.given.lock();
            let ids: Vec<u64> = given
                .iter()
                .filter(|(_, g)| g.job.is_aborted())
                .map(|(&id, _)| id)
                .collect();
            ids.into_iter()
                .filter_map(|id| given.remove(&id).map(|g| (id, g)))
                .collect()
        };
        for (id, g) in unwanted {
            self.given_count.fetch_sub(1, Ordering::AcqRel);
            let sent = self.send(g.thief, Lane::Control, "cancelling a job", |l| {
                proto::cancel(l, g.epoch, id)
            });
            if sent.is_ok() {
                self.remote.note(Event::CancelSent);
                tracing::debug!(node = %self.me, id, thief = g.thief, "remote job cancelled");
            }
            // The job is aborted, so this finishes it as such whatever the bytes.
            let _ = g.job.complete(&[]);
        }
    }

    /// Aborts the roots of jobs run here (`run_here`) that nobody wants any more (an ancestor
    /// aborted them, or the run failed), whose parents would otherwise wait for them to run to
    /// their end, and forgets the finished ones. The watcher calls it at every scan (`wait`);
    /// the abort hook, which must not block, only when no other thread holds the list.
    pub(crate) fn abort_unwanted_here(&self, wait: bool) {
        let mut here = if wait {
            self.here.lock()
        } else {
            match self.here.try_lock() {
                Some(here) => here,
                None => return,
            }
        };
        here.retain(|h| {
            let aborted = match h.job.lock().as_ref() {
                Some(job) => job.is_aborted(),
                None => return false,
            };
            if aborted {
                // Its callback completes the job as aborted; the root is not needed after.
                h.root.abort();
                tracing::debug!(node = %self.me, "a job run here is aborted");
            }
            !aborted
        });
    }
}

/// Counts a result being sent until it is out.
struct Sending<'a>(&'a AtomicUsize);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a wide-area steal request goes unanswered, for tests: with the `failpoints` feature,
/// the failpoint `satin::wide-steal-unanswered` makes a victim drop it as it drops a request of
/// a run it has seen end (see `on_steal`). Never otherwise.
#[cfg(feature = "failpoints")]
fn wide_steal_unanswered() -> bool {
    fail::fail_point!("satin::wide-steal-unanswered", |_| true);
    false
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn wide_steal_unanswered() -> bool {
    false
}
