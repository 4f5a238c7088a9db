//! Watching the pool: members that join, leave or die, and what a node does about them.
//!
//! A member that dies (the registry declares it dead, its connection to the registry breaks,
//! or this node's connection to it breaks and the pool does not explain why) is recovered from
//! (see `results`), unless it is the master, which runs the root: then the run fails on every
//! node with an error naming the master. A member that leaves is treated the same way; one that
//! left properly (see `lifecycle`) has nothing outstanding, so nothing runs again. Its last
//! results and hand-backs travel on its connections, which the pool's news of its leave may
//! overtake, so a member that announced its leave counts as gone only once its `LEFT` came
//! after them (or [`GOODBYE_PATIENCE`] passed without it).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use ipl::{NodeId, PoolEvent};

use super::node::{ipl_error, Node};
use crate::remote::Event;
use crate::Error;

/// How often the watcher looks at the pool, at jobs given away and at recoveries.
const SCAN_EVERY: Duration = Duration::from_millis(20);
/// How long a member that announced its leave and is reported gone may take to send its last
/// message (`LEFT`) before its stolen jobs run again: it sent that before leaving the pool, so
/// only a lost connection keeps it this long.
const GOODBYE_PATIENCE: Duration = Duration::from_secs(2);

impl Node {
    /// The watcher thread's loop, until `stop` closes.
    pub(crate) fn watch(&self, events: Receiver<PoolEvent>, stop: Receiver<()>) {
        let mut events = events;
        loop {
            crossbeam_channel::select! {
                recv(stop) -> _ => return,
                recv(events) -> ev => match ev {
                    Ok(ev) => self.on_pool_event(ev),
                    Err(_) => events = crossbeam_channel::never(),
                },
                default(SCAN_EVERY) => {}
            }
            self.check_suspects();
            self.check_pool();
            self.check_departing();
            self.cancel_unwanted();
            self.abort_unwanted_here(true);
            self.recovery_tick();
        }
    }

    fn on_pool_event(&self, ev: PoolEvent) {
        match ev {
            PoolEvent::Joined(n) if n.pool() == self.me.pool() && n != self.me => {
                self.member_joined(n);
            }
            PoolEvent::Died(n) => self.member_gone(n.rank(), true),
            PoolEvent::Left(n) => self.member_gone(n.rank(), false),
            _ => {}
        }
    }

    /// A node joined the pool: it becomes a member, and others may steal from it.
    pub(crate) fn member_joined(&self, n: NodeId) {
        let added = self.members.write().add(n.clone(), &self.me);
        if !added {
            return;
        }
        if let Some(mesh) = self.mesh() {
            mesh.add(n.clone());
        }
        if self.active.load(Ordering::Acquire) {
            self.note_joined();
            tracing::info!(node = %self.me, member = %n, "a node joined");
        } else {
            tracing::debug!(node = %self.me, member = %n, "a node joined between runs");
        }
    }

    /// Member `rank` is gone.
    pub(crate) fn member_gone(&self, rank: u32, died: bool) {
        if !died && self.awaits_goodbye(rank) {
            return;
        }
        let Some(n) = self.members.write().remove(rank, died, &self.me) else {
            return;
        };
        if let Some(mesh) = self.mesh() {
            mesh.remove(&n);
        }
        self.victim_gone(rank);
        let active = self.active.load(Ordering::Acquire);
        if active {
            self.remote.note(if died {
                Event::NodeDied
            } else {
                Event::NodeLeft
            });
        }
        match (died, active) {
            (true, true) => tracing::warn!(node = %self.me, member = %n, "a member died"),
            (false, true) => tracing::info!(node = %self.me, member = %n, "a member left"),
            (true, false) => {
                tracing::debug!(node = %self.me, member = %n, "a member died between runs")
            }
            (false, false) => {
                tracing::debug!(node = %self.me, member = %n, "a member left between runs")
            }
        }
        if n == self.master && !self.is_master() {
            let reason = if died {
                "the master died (its process ended or stopped sending heartbeats); a run \
                 cannot go on without the master, which runs its root"
            } else {
                "the master left the pool; a run cannot go on without the master, which runs \
                 its root"
            };
            self.fail_run(
                None,
                Error::NodeFailed {
                    node: n.to_string(),
                    reason: reason.into(),
                },
            );
            return;
        }
        self.forget_orphans_of(rank);
        if active {
            self.recover_from(rank, self.epoch.load(Ordering::Acquire));
        } else {
            // It may have been the last one whose confirmation of the end was missing.
            self.announce_if_all_confirmed();
        }
    }

    /// Whether member `rank`, reported gone, announced its leave and may still send its last
    /// results: then it stays a member, though nobody's victim, until its `LEFT` comes or
    /// [`GOODBYE_PATIENCE`] passes (see `check_departing`).
    fn awaits_goodbye(&self, rank: u32) -> bool {
        let mut members = self.members.write();
        if !members.leaving.contains(&rank)
            || members.goodbyes.contains(&rank)
            || !members.live.contains_key(&rank)
        {
            return false;
        }
        if let Some(&until) = members.departing.get(&rank) {
            return Instant::now() < until;
        }
        members
            .departing
            .insert(rank, Instant::now() + GOODBYE_PATIENCE);
        members.refresh_victims(&self.me);
        drop(members);
        tracing::debug!(node = %self.me, rank, "a leaving member is gone; waiting for its last results");
        self.victim_gone(rank);
        true
    }

    /// Leaving members reported gone whose `LEFT` came, or whose wait for it is over.
    fn check_departing(&self) {
        let ready: Vec<u32> = {
            let members = self.members.read();
            let now = Instant::now();
            members
                .departing
                .iter()
                .filter(|&(rank, &until)| members.goodbyes.contains(rank) || now >= until)
                .map(|(&rank, _)| rank)
                .collect()
        };
        for rank in ready {
            self.member_gone(rank, false);
        }
    }

    /// A member's connection to this node ended (see `Mesh::on_disconnect`). During a run a
    /// live member closes it only when it takes this node for gone, after a send to it failed,
    /// or breaks it by dying. Either way, what it was to send here will not come: the results
    /// of jobs this node gave it go to the others as orphans, and this node would wait for
    /// them for ever. So the member is a suspect, as a failed send makes it, and the watcher
    /// takes it for dead (or, if it announced its leave, for gone once its `LEFT` came).
    pub(crate) fn connection_ended(&self, from: &NodeId, why: Option<&ipl::Error>) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let rank = from.rank();
        if self.members.read().present(rank) != Some(from) {
            return;
        }
        match why {
            Some(e) => {
                tracing::warn!(node = %self.me, member = %from, "the connection from a member broke: {e}")
            }
            None => {
                tracing::debug!(node = %self.me, member = %from, "a member closed its connection")
            }
        }
        self.suspects.lock().note(rank);
    }

    /// Members this node could not reach although the pool says they are there: the
    /// connection broke, so their work is as lost as if they had died. A member that
    /// announced its leave may simply have gone: it counts as having left.
    fn check_suspects(&self) {
        let ranks = std::mem::take(&mut self.suspects.lock().ranks);
        for rank in ranks {
            let (live, leaving) = {
                let members = self.members.read();
                (
                    members.present(rank).is_some(),
                    members.leaving.contains(&rank),
                )
            };
            if live && leaving {
                self.member_gone(rank, false);
            } else if live {
                tracing::warn!(node = %self.me, rank, "the connection to a member broke; it counts as dead");
                self.member_gone(rank, true);
            }
        }
    }

    /// Fails the run if this node has lost its registry (it can no longer see failures), and
    /// catches departures whose events were missed.
    fn check_pool(&self) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let pool = self.ibis.pool();
        if let Err(e) = pool.check_alive(&[]) {
            self.fail_run(None, ipl_error(&self.me, "watching the pool", e));
            return;
        }
        let members: Vec<NodeId> = self.members.read().live.values().cloned().collect();
        let dead = pool.dead();
        for n in members {
            if !pool.is_alive(&n) {
                self.member_gone(n.rank(), dead.contains(&n));
            }
        }
    }
}
