//! Runs: starting one, ending it (the master announces the end and collects confirmations),
//! failing it, nodes that join a running pool, and leaving the pool.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipl::Lane;

use super::node::{died, left, Node, OnFailure};
use super::proto;
use super::stealing::{REPLY_PATIENCE, WAIT_SLICE};
use crate::remote::{Event, LocalRoot};
use crate::{Error, Task};

/// How long the master waits for the other nodes to confirm the end of a run.
const ACK_PATIENCE: Duration = Duration::from_secs(10);
/// How long a node waits before closing its mesh for the others to see the end of the last
/// run: a little longer than the master waits for their confirmations, after which it tells
/// them not to wait any longer.
const CLOSE_PATIENCE: Duration = Duration::from_secs(12);
/// How long a leaving node waits for the jobs it runs for others to finish before it leaves
/// anyway (their owners then run them again), unless `SATIN_LEAVE_PATIENCE` says otherwise.
const LEAVE_PATIENCE: Duration = Duration::from_secs(60);

/// How many announced ends of runs a node remembers.
const RECENT_ENDS: usize = 16;

#[derive(Default)]
pub(crate) struct RunState {
    /// The current run, or the last one.
    pub(super) epoch: u64,
    pub(super) active: bool,
    /// Why the current run fails, as detected on this node.
    pub(super) failure: Option<Error>,
    /// The root of the current run, on the master.
    pub(super) root: Option<Arc<LocalRoot>>,
    /// How the latest runs ended, as the master announced them, oldest first (at most
    /// [`RECENT_ENDS`]): their epochs, and their errors if they failed. A node may learn of the
    /// end of a later run before it looks at the end of its own.
    pub(super) ended: std::collections::VecDeque<(u64, Option<String>)>,
    /// Nodes that confirmed the end of the current run (on the master).
    pub(super) acks: HashSet<u32>,
    /// On a node that joined a running pool: the master's run it joins (from `WELCOME`).
    pub(super) welcome: Option<(u64, bool)>,
    /// When this node's part in the current run began.
    pub(super) started: Option<Instant>,
    /// Messages about the end of a run that are being sent (confirmations, and on the master
    /// `ALL_DONE`): the mesh must stay open until they are out (see
    /// [`Node::wait_before_closing`]).
    pub(super) ending_messages: u32,
    /// The latest run that every node confirmed the end of, as the master announced it
    /// (`ALL_DONE`); on the master, the latest it announced.
    pub(super) all_done: u64,
}

impl RunState {
    /// The epoch of the latest run whose end the master announced.
    fn latest_end(&self) -> Option<u64> {
        self.ended.back().map(|(epoch, _)| *epoch)
    }

    /// True once the master announced the end of run `epoch` (or of a later one).
    fn has_ended(&self, epoch: u64) -> bool {
        self.latest_end().is_some_and(|e| e >= epoch)
    }
}

impl Node {
    /// Runs `task` as the next run of the pool: on the master as the root, elsewhere by
    /// serving steals until the master announces the end. Every node calls it once per run.
    pub(crate) fn run<T: Task>(self: &Arc<Self>, task: T) -> Result<Option<T::Output>, Error> {
        if self.left.load(Ordering::Acquire) {
            return Err(Error::Left {
                node: self.me.to_string(),
            });
        }
        let epoch = self.begin()?;
        let weak = Arc::downgrade(self);
        self.remote.set_idle_hook(move |_worker| {
            if let Some(node) = weak.upgrade() {
                node.on_idle();
            }
        });
        let result = if self.is_master() {
            self.run_master(epoch, task).map(Some)
        } else {
            // Every node is handed the root; only the master runs it.
            drop(task);
            self.run_other(epoch).map(|()| None)
        };
        self.remote.clear_idle_hook();
        result
    }

    /// Starts a run: fails at once if the master is gone, unless it announced the end of this
    /// run before it went (it may run a root alone and leave before this node gets here; the
    /// run then ends here as it did there). Other members that are gone are simply not asked
    /// for work.
    fn begin(&self) -> Result<u64, Error> {
        let pool = self.ibis.pool();
        pool.check_alive(&[])
            .map_err(|e| super::node::ipl_error(&self.me, "checking the pool", e))?;
        self.stealing.reset();
        self.early_cancels.lock().clear();
        let mut st = self.run.lock();
        let epoch = match st.welcome {
            // Joined a running pool: take part in the master's current run, or its next.
            Some((epoch, active)) => epoch.checked_add(u64::from(!active)).ok_or_else(|| {
                Error::Remote(format!(
                    "the master {} named run {epoch} as its current one, past the last a \
                     pool can number",
                    self.master
                ))
            })?,
            None => st.epoch + 1,
        };
        // This node records an end before it confirms it, and the master waits for the
        // confirmations before it leaves: an end it announced is recorded here by the time
        // the pool reports it gone.
        if !pool.is_alive(&self.master) && !st.has_ended(epoch) {
            return Err(if pool.dead().contains(&self.master) {
                died(&self.master)
            } else {
                left(&self.master)
            });
        }
        st.welcome = None;
        st.epoch = epoch;
        st.active = true;
        st.failure = None;
        st.root = None;
        st.acks.clear();
        st.started = Some(Instant::now());
        self.epoch.store(st.epoch, Ordering::Release);
        self.active.store(true, Ordering::Release);
        tracing::debug!(node = %self.me, epoch = st.epoch, "run started");
        Ok(st.epoch)
    }

    /// Ends this node's part in the current run and cancels what still runs here for others.
    fn end(&self) {
        {
            let mut st = self.run.lock();
            st.active = false;
            st.root = None;
            self.active.store(false, Ordering::Release);
        }
        self.cancel_running();
        self.end_recovery();
    }

    /// Aborts every job received from other nodes that still runs here.
    pub(crate) fn cancel_running(&self) {
        for r in self.running.lock().values_mut() {
            r.cancelled = true;
            if let Some(root) = &r.root {
                root.abort();
            }
        }
    }

    fn run_master<T: Task>(&self, epoch: u64, task: T) -> Result<T::Output, Error> {
        let (done, result) = crossbeam_channel::bounded(1);
        let root = Arc::new(self.remote.start(task, move |r| {
            let _ = done.send(r);
        }));
        let failed = {
            let mut st = self.run.lock();
            st.root = Some(Arc::clone(&root));
            st.failure.clone()
        };
        if let Some(e) = failed {
            root.fail(e);
        }
        let result = result.recv().unwrap_or_else(|_| Err(Error::ShutDown));
        self.end();
        let failure = result.as_ref().err().map(|e| e.to_string());
        self.broadcast(Lane::Control, "announcing the end of the run", |l| {
            proto::done(l, epoch, failure.as_deref())
        });
        tracing::debug!(node = %self.me, epoch, ok = result.is_ok(), "run ended");
        result
    }

    /// On the master, waits until every node that is still there has confirmed the end of the
    /// last run (at most `ACK_PATIENCE`), so that this process cannot end before the others
    /// know. Called when the runtime is dropped rather than at the end of every run, which
    /// would add a round trip to the farthest node to each run.
    pub(crate) fn wait_for_acks(&self) {
        if !self.is_master() {
            return;
        }
        let deadline = Instant::now() + ACK_PATIENCE;
        let mut st = self.run.lock();
        if st.epoch == 0 || st.active {
            return;
        }
        loop {
            let missing = self
                .members
                .read()
                .others
                .iter()
                .copied()
                .find(|r| !st.acks.contains(r));
            let Some(rank) = missing else { break };
            if Instant::now() >= deadline {
                tracing::warn!(node = %self.me, "{} did not confirm the end of the run", self.name_of(rank));
                break;
            }
            self.changed.wait_for(&mut st, WAIT_SLICE);
        }
        // Also when some never confirmed: the others need not wait for them any longer.
        let epoch = st.epoch;
        drop(st);
        self.announce_all_done(epoch);
    }

    fn run_other(&self, epoch: u64) -> Result<(), Error> {
        let outcome = {
            let mut st = self.run.lock();
            loop {
                // The master's word on the end comes first: a failure seen here after the
                // run ended (the master leaving once it is over) does not fail it.
                if st.has_ended(epoch) {
                    let own = st.ended.iter().find(|(e, _)| *e == epoch);
                    break match own.map(|(_, failure)| failure) {
                        Some(None) => Ok(()),
                        Some(Some(why)) => Err(Error::RunFailed {
                            master: self.master.to_string(),
                            reason: why.clone(),
                        }),
                        // Its end is no longer remembered (many later runs ended meanwhile):
                        // what this node saw of it.
                        None => st.failure.clone().map_or(Ok(()), Err),
                    };
                }
                if let Some(e) = st.failure.clone() {
                    break Err(e);
                }
                if self.leaving.load(Ordering::Acquire) && self.may_leave() {
                    break Ok(());
                }
                self.changed.wait_for(&mut st, Duration::from_millis(20));
            }
        };
        self.end();
        if self.leaving.load(Ordering::Acquire) {
            self.complete_leave();
        }
        tracing::debug!(node = %self.me, epoch, ok = outcome.is_ok(), "run ended");
        outcome
    }

    /// Makes the current run (or run `epoch`, if given) fail with `error` on this node.
    pub(crate) fn fail_run(&self, epoch: Option<u64>, error: Error) {
        let root = {
            let mut st = self.run.lock();
            let over = st.has_ended(st.epoch);
            if !st.active || over || epoch.is_some_and(|e| e != st.epoch) || st.failure.is_some() {
                return;
            }
            tracing::warn!(node = %self.me, epoch = st.epoch, "the run fails: {error}");
            st.failure = Some(error.clone());
            st.root.clone()
        };
        if let Some(root) = root {
            root.fail(error);
        }
        self.cancel_running();
        self.changed.notify_all();
    }

    /// Whether `what`, a message only the master may send, came from it; if not, it is
    /// refused: logged and counted (see [`Stats::messages_refused`](crate::Stats)).
    fn sent_by_master(&self, from: u32, epoch: u64, what: &str) -> bool {
        if from == self.master.rank() {
            return true;
        }
        tracing::warn!(node = %self.me, from, epoch, "{what} not from the master, refused");
        self.remote.note(Event::MessageRefused);
        false
    }

    /// The master announces the end of run `epoch`.
    ///
    /// The end is recorded before it is confirmed: once confirmed, the master may leave, and
    /// its departure must not fail a run that is already over here.
    ///
    /// Recording the end lets this node's `run` return, and its program may then drop the
    /// runtime at once; the confirmation still to be sent keeps the mesh open until it is out
    /// (counted in [`RunState::ending_messages`]), or the master would wait for it in vain.
    ///
    /// Only the master ends runs: the same message from another member is dropped, as it
    /// would otherwise end this node's runs, up to the epoch it names, for good.
    pub(crate) fn on_done(&self, master: u32, epoch: u64, failure: Option<String>) {
        if !self.sent_by_master(master, epoch, "an end of run") {
            return;
        }
        {
            let mut st = self.run.lock();
            if !st.has_ended(epoch) {
                if st.ended.len() == RECENT_ENDS {
                    st.ended.pop_front();
                }
                st.ended.push_back((epoch, failure));
            }
            st.ending_messages += 1;
        }
        self.changed.notify_all();
        let _ = self.send(
            master,
            Lane::Control,
            "confirming the end of the run",
            |l| proto::done_ack(l, epoch),
        );
        self.run.lock().ending_messages -= 1;
        self.changed.notify_all();
    }

    /// Waits before this node's mesh closes, so that no node still in the run finds it gone:
    /// until every message about the end of a run has been sent from here and, off the master,
    /// until the master announced that every node has seen the end of the last run
    /// (`ALL_DONE`), or has gone. Nodes learn of the end at different times (a wide-area link
    /// delays the news by its latency); one that closed at once would leave the others, still
    /// asking it for work, with broken connections that look like its death, or with a
    /// connection attempt that waits out the connect timeout for a port that will not come
    /// back. At most `CLOSE_PATIENCE`.
    ///
    /// A node that leaves the pool waits only for its own messages (`for_others` false, and
    /// whenever it has left): it told every member that it leaves, the runs go on without it,
    /// and the master sends it no `ALL_DONE`.
    pub(crate) fn wait_before_closing(&self, for_others: bool) {
        let deadline = Instant::now() + CLOSE_PATIENCE;
        let master = self.master.rank();
        let for_others = for_others && !self.left.load(Ordering::Acquire);
        let mut st = self.run.lock();
        loop {
            let others_running = for_others
                && !self.is_master()
                && st.latest_end().is_some_and(|e| e > st.all_done)
                && self.members.read().live.contains_key(&master);
            if (st.ending_messages == 0 && !others_running) || Instant::now() >= deadline {
                break;
            }
            self.changed.wait_for(&mut st, WAIT_SLICE);
        }
    }

    /// True once the master announced here that run `epoch` is over.
    pub(crate) fn has_ended(&self, epoch: u64) -> bool {
        self.run.lock().has_ended(epoch)
    }

    pub(crate) fn on_done_ack(&self, from: u32, epoch: u64) {
        {
            let mut st = self.run.lock();
            if st.epoch != epoch {
                return;
            }
            st.acks.insert(from);
            self.changed.notify_all();
        }
        self.announce_if_all_confirmed();
    }

    /// On the master, between runs: announces `ALL_DONE` once every member still there has
    /// confirmed the end of the last run (after a confirmation, or a member's departure).
    pub(crate) fn announce_if_all_confirmed(&self) {
        if !self.is_master() {
            return;
        }
        let epoch = {
            let st = self.run.lock();
            let everyone = self
                .members
                .read()
                .others
                .iter()
                .all(|r| st.acks.contains(r));
            if !everyone || st.active || st.epoch == 0 || st.all_done >= st.epoch {
                return;
            }
            st.epoch
        };
        self.announce_all_done(epoch);
    }

    /// On the master: tells every node that all have seen the end of run `epoch`, once.
    fn announce_all_done(&self, epoch: u64) {
        {
            let mut st = self.run.lock();
            if st.all_done >= epoch {
                return;
            }
            st.all_done = epoch;
            st.ending_messages += 1;
        }
        self.broadcast(
            Lane::Control,
            "announcing that every node saw the end",
            |l| proto::all_done(l, epoch),
        );
        self.run.lock().ending_messages -= 1;
        self.changed.notify_all();
    }

    /// The master announced that every node has seen the end of run `epoch`.
    pub(crate) fn on_all_done(&self, from: u32, epoch: u64) {
        if !self.sent_by_master(from, epoch, "an all-done") {
            return;
        }
        let mut st = self.run.lock();
        st.all_done = st.all_done.max(epoch);
        self.changed.notify_all();
    }

    // ---------------------------------------------------------------- joining

    /// On the master: a node that joined the pool asks which run is on.
    pub(crate) fn on_hello(&self, from: u32) {
        if !self.is_master() {
            return;
        }
        let (epoch, active) = {
            let st = self.run.lock();
            (st.epoch, st.active)
        };
        tracing::debug!(node = %self.me, from, epoch, active, "a node joined the run");
        let _ = self.send(from, Lane::Control, "welcoming a node", |l| {
            proto::welcome(l, epoch, active)
        });
    }

    /// On a node that joined a running pool: the master says which run is on. Only the
    /// master's answer counts: another member's would move this node to a run of its choice.
    pub(crate) fn on_welcome(&self, from: u32, epoch: u64, active: bool) {
        if !self.sent_by_master(from, epoch, "a welcome") {
            return;
        }
        let mut st = self.run.lock();
        st.welcome = Some((epoch, active));
        self.changed.notify_all();
    }

    /// On a node that joined a running pool: asks the master which run is on and waits for
    /// the answer (at most `patience`).
    pub(crate) fn greet_master(&self, patience: Duration) -> Result<(), Error> {
        let master = self.master.rank();
        self.send(master, Lane::Control, "greeting the master", proto::hello)
            .map_err(|e| e.into_error(&self.me, "greeting the master"))?;
        let deadline = Instant::now() + patience;
        let mut st = self.run.lock();
        while st.welcome.is_none() {
            if !self.ibis.pool().is_alive(&self.master) {
                return Err(died(&self.master));
            }
            if self.changed.wait_until(&mut st, deadline).timed_out() {
                return Err(Error::Pool {
                    node: self.me.to_string(),
                    what: "joining the running pool".into(),
                    source: Arc::new(ipl::Error::Timeout {
                        what: format!("the master {} to answer", self.master),
                        waited: patience,
                    }),
                });
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- leaving

    /// Asks this node to leave the pool: it stops asking for work, hands back jobs that
    /// reach it from now on, finishes the jobs it runs for others (which may steal from it
    /// meanwhile) and sends their results home; then its `run` returns and it leaves, its last
    /// message (`LEFT`, see `complete_leave`) telling every member that nothing more comes.
    pub(crate) fn leave(&self) -> Result<(), Error> {
        if self.is_master() {
            return Err(Error::Config(format!(
                "{} is the master: it runs the root of every run and cannot leave the pool",
                self.me
            )));
        }
        // Sequentially consistent, as are the steals' looks at it (see `wait_for_steals`).
        if self.leaving.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *self.leave_requested_at.lock() = Some(Instant::now());
        tracing::info!(node = %self.me, "leaving the pool");
        let epoch = self.epoch.load(Ordering::Acquire);
        // Between runs this node counts on nobody and nobody on it, so the leave goes only to
        // the members it has talked to (a first connect to one that is leaving or closing too
        // waits until the pool reports it gone, or out the connect timeout), and one it cannot
        // reach is let go at once, not after the mesh's patience. The others learn of it from
        // the pool, as nothing of theirs is here.
        let between_runs = !self.run.lock().active;
        let on_failure = if between_runs {
            OnFailure::LetGo
        } else {
            OnFailure::Judge
        };
        let lane_of =
            |rank| (!between_runs || self.linked(rank, Lane::Control)).then_some(Lane::Control);
        self.broadcast_as("announcing the leave", on_failure, lane_of, |l| {
            proto::leaving(l, epoch)
        });
        let idle = !self.run.lock().active;
        if idle {
            self.complete_leave();
        }
        self.changed.notify_all();
        Ok(())
    }

    /// True once nothing runs here for other nodes (or the leave patience is over).
    fn may_leave(&self) -> bool {
        {
            // A result leaves `running` under this lock before it is sent, and counts in
            // `results_sending` until it is out.
            let running = self.running.lock();
            if running.is_empty() && self.results_sending.load(Ordering::Acquire) == 0 {
                return true;
            }
        }
        let patience = self.patience.leave.unwrap_or(LEAVE_PATIENCE);
        let since = *self.leave_requested_at.lock();
        if since.is_some_and(|t| t.elapsed() >= patience) {
            tracing::warn!(node = %self.me, "leaving with jobs unfinished after {patience:?}: their owners run them again");
            return true;
        }
        false
    }

    /// Sends `LEFT` to every member: on the data lane, behind this node's last results and
    /// hand-backs, where it sent any; otherwise on the control lane, as nothing on the data
    /// lane is to come before it. Never on a lane not yet connected: the first connect to a
    /// member that has closed its runtime but is still in the pool (the master, once its last
    /// run is over) waits out the whole connect timeout (30 s by default), as its ports are
    /// gone. A member this node never sent anything learns of the leave from the pool.
    fn announce_last_message(&self, epoch: u64) {
        let lane_of = |rank| {
            [Lane::Data, Lane::Control]
                .into_iter()
                .find(|&lane| self.linked(rank, lane))
        };
        self.broadcast_as(
            "announcing the last message",
            OnFailure::LetGo,
            lane_of,
            |l| proto::left(l, epoch),
        );
    }

    /// Leaves the pool: from now on this node takes part in no run.
    fn complete_leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        self.remote.clear_idle_hook();
        // Jobs that answers to this node's last steals bring go back first; then every
        // member learns that nothing more comes from here, on the lane its results and
        // hand-backs took, so it takes this node for gone only once it has them all.
        self.wait_for_steals(Instant::now() + REPLY_PATIENCE);
        let epoch = self.epoch.load(Ordering::Acquire);
        self.announce_last_message(epoch);
        self.wait_before_closing(false);
        self.close_mesh();
        if let Err(e) = self.ibis.clone().end() {
            tracing::warn!(node = %self.me, "leaving the pool: {e}");
        }
        tracing::info!(node = %self.me, "left the pool");
    }

    /// How long this node's part in the current run has lasted.
    pub(crate) fn run_so_far(&self) -> Duration {
        self.run
            .lock()
            .started
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Counts a member that joined.
    pub(crate) fn note_joined(&self) {
        self.remote.note(Event::NodeJoined);
    }
}
