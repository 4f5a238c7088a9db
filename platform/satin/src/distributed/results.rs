//! Recovering from a member that is gone: the jobs it had stolen run again at their owners,
//! and the results of its own jobs that others were computing (orphans) are kept in every
//! node's result table, where the jobs run again find them (see `satin::remote`).
//!
//! When a node learns that member D is gone, it
//! 1. marks the jobs of D that run here as orphans (they go on running) and tells every other
//!    node which they are (`ORPHANS`, possibly empty);
//! 2. takes back the jobs it had given to D, but does not run them yet: first every other live
//!    node must have listed its orphans of D, and every orphan listed must have finished (or
//!    its holder be gone), so that the jobs, when they run again, find the orphans' results
//!    instead of computing them a second time. They wait a quarter of the time the run has
//!    taken so far at most (50 ms to 2 s; `SATIN_ORPHAN_PATIENCE` sets a fixed time), then
//!    run anyway: an orphan can be held up behind other work on its holder's stack, possibly
//!    behind the very job waiting for it, and one that needs longer is a large piece of work
//!    whose computing again costs less than waiting without bound;
//! 3. when an orphan finishes, keeps its result and sends it to every node
//!    (`ORPHAN_RESULT`), which keeps it too, with the name of the node that sent it: a kept
//!    result that does not decode, or that its task refuses, is logged naming that node and
//!    computed again (see `satin::remote`, "Reusing results").
//!
//! A result of a job is its output for its task bytes, whoever computed it, so a result kept
//! this way is right wherever an equal job is spawned (see `satin::remote`). No worker waits
//! for a result: the jobs that will ask for them are held back instead.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ipl::Lane;

use super::node::{Given, Node};
use super::proto::{self, JobKey};
use crate::remote::Event;

/// Bounds of how long jobs taken back from a member that is gone wait for its orphans: a
/// quarter of the time the run has taken so far, within these, unless `SATIN_ORPHAN_PATIENCE`
/// gives a fixed time. An orphan is a part of the work done so far, so most finish within
/// that; one that does not is computed again, which costs no more than the wait saved.
const PATIENCE_MIN: Duration = Duration::from_millis(50);
const PATIENCE_MAX: Duration = Duration::from_secs(2);

fn orphan_patience(fixed: Option<Duration>, run_so_far: Duration) -> Duration {
    fixed.unwrap_or_else(|| (run_so_far / 4).clamp(PATIENCE_MIN, PATIENCE_MAX))
}

/// Jobs taken back from a member that is gone, waiting for its orphans.
struct Round {
    dead: u32,
    /// Nodes that have not listed their orphans of `dead` yet.
    waiting: HashSet<u32>,
    /// Orphans of `dead` still running, with their holders.
    pending: HashSet<(u32, JobKey)>,
    jobs: Vec<Given>,
    deadline: Instant,
}

#[derive(Default)]
pub(crate) struct Recovery {
    rounds: Vec<Round>,
    /// For each member that is gone, the nodes that have listed their orphans of it, and the
    /// orphans they listed.
    heard: HashMap<u32, HashSet<u32>>,
    listed: HashMap<u32, Vec<(u32, JobKey)>>,
    /// Orphans of this run whose results have come.
    finished: HashSet<JobKey>,
}

impl Recovery {
    /// An orphan's result is known: nobody waits for it any more.
    fn finished(&mut self, job: JobKey) {
        for r in &mut self.rounds {
            r.pending.retain(|(_, j)| *j != job);
        }
        self.finished.insert(job);
    }
}

impl Node {
    /// Member `dead` is gone during a run: starts the recovery described in the module
    /// documentation. Called on the watcher, once per member, after it is marked gone.
    pub(crate) fn recover_from(&self, dead: u32, epoch: u64) {
        // 1. Orphans here.
        let orphans: Vec<JobKey> = {
            let mut running = self.running.lock();
            running
                .iter_mut()
                .filter(|((owner, _), r)| *owner == dead && !r.cancelled)
                .map(|(_, r)| {
                    r.orphan = true;
                    r.key.clone()
                })
                .collect()
        };
        if !orphans.is_empty() {
            tracing::debug!(node = %self.me, dead, orphans = orphans.len(), "orphans kept running");
        }
        self.broadcast(Lane::Control, "listing orphans", |l| {
            proto::orphans(l, epoch, dead, &orphans)
        });
        // 2. Jobs it had stolen from this node.
        let jobs: Vec<Given> = {
            let mut given = self.given.lock();
            let ids: Vec<u64> = given
                .iter()
                .filter(|(_, g)| g.thief == dead)
                .map(|(&id, _)| id)
                .collect();
            ids.into_iter().filter_map(|id| given.remove(&id)).collect()
        };
        self.given_count.fetch_sub(jobs.len(), Ordering::AcqRel);
        if jobs.is_empty() {
            return;
        }
        let others: HashSet<u32> = self.members.read().others.iter().copied().collect();
        let me = self.me.rank();
        let mut rec = self.recovery.lock();
        let heard = rec.heard.get(&dead).cloned().unwrap_or_default();
        let waiting: HashSet<u32> = others.difference(&heard).copied().collect();
        let pending: HashSet<(u32, JobKey)> = orphans
            .into_iter()
            .map(|j| (me, j))
            .chain(rec.listed.get(&dead).into_iter().flatten().cloned())
            .filter(|(_, j)| !rec.finished.contains(j))
            .collect();
        tracing::debug!(node = %self.me, dead, jobs = jobs.len(), waiting = waiting.len(), orphans = pending.len(), "jobs taken back");
        rec.rounds.push(Round {
            dead,
            waiting,
            pending,
            jobs,
            deadline: Instant::now() + orphan_patience(self.patience.orphans, self.run_so_far()),
        });
        let ready = take_ready(&mut rec, Instant::now());
        drop(rec);
        self.run_again(ready);
    }

    /// Member `from` lists the orphans of `dead` it holds.
    pub(crate) fn on_orphans(&self, from: u32, epoch: u64, dead: u32, jobs: Vec<JobKey>) {
        if !self.serving(epoch) {
            return;
        }
        let ready = {
            let mut rec = self.recovery.lock();
            rec.heard.entry(dead).or_default().insert(from);
            let new: Vec<(u32, JobKey)> = jobs
                .into_iter()
                .filter(|j| !rec.finished.contains(j))
                .map(|j| (from, j))
                .collect();
            for r in rec.rounds.iter_mut().filter(|r| r.dead == dead) {
                r.waiting.remove(&from);
                r.pending.extend(new.iter().cloned());
            }
            rec.listed.entry(dead).or_default().extend(new);
            take_ready(&mut rec, Instant::now())
        };
        self.run_again(ready);
    }

    /// Member `from` finished an orphan.
    pub(crate) fn on_orphan_result(&self, from: u32, epoch: u64, job: JobKey, output: Vec<u8>) {
        if !self.serving(epoch) {
            return;
        }
        tracing::debug!(node = %self.me, from, "orphan result kept");
        self.orphan_known(job, output, &self.name_of(from));
    }

    /// An orphan that ran here finished: keep its result and send it to every node.
    pub(crate) fn orphan_finished(&self, epoch: u64, owner: u32, job: JobKey, output: Vec<u8>) {
        tracing::debug!(node = %self.me, owner, "orphan finished; its result is kept");
        self.broadcast(Lane::Data, "sending an orphan's result", |l| {
            proto::orphan_result(l, epoch, &job, &output)
        });
        self.orphan_known(job, output, &self.me.to_string());
    }

    /// Keeps an orphan's result, with the node that computed it, and runs the jobs that only
    /// waited for it.
    fn orphan_known(&self, job: JobKey, output: Vec<u8>, sender: &str) {
        let kept = self
            .remote
            .keep_result_from(&job.type_name, &job.task, output, sender);
        if let Err(e) = kept {
            tracing::warn!(node = %self.me, "an orphan's result cannot be kept: {e}");
        }
        let ready = {
            let mut rec = self.recovery.lock();
            rec.finished(job);
            take_ready(&mut rec, Instant::now())
        };
        self.run_again(ready);
    }

    /// A member that is gone will neither list nor finish orphans: stop waiting for it.
    pub(crate) fn forget_orphans_of(&self, gone: u32) {
        let ready = {
            let mut rec = self.recovery.lock();
            for r in &mut rec.rounds {
                r.waiting.remove(&gone);
                r.pending.retain(|(holder, _)| *holder != gone);
            }
            for listed in rec.listed.values_mut() {
                listed.retain(|(holder, _)| *holder != gone);
            }
            take_ready(&mut rec, Instant::now())
        };
        self.run_again(ready);
    }

    /// Runs the jobs of rounds whose wait is over (called by the watcher now and then).
    pub(crate) fn recovery_tick(&self) {
        let ready = {
            let mut rec = self.recovery.lock();
            if rec.rounds.is_empty() {
                return;
            }
            take_ready(&mut rec, Instant::now())
        };
        self.run_again(ready);
    }

    fn run_again(&self, jobs: Vec<Given>) {
        for g in jobs {
            if g.job.is_aborted() {
                let _ = g.job.complete(&[]);
                continue;
            }
            self.remote.note(Event::JobReexecuted);
            tracing::debug!(node = %self.me, thief = g.thief, type_name = g.job.type_name(), "job runs again");
            self.run_here(g.job, "run again: its thief is gone");
        }
    }

    /// At the end of a run: rounds still waiting run their jobs (which are aborted or done by
    /// now, so this only completes them), and the result table is emptied.
    pub(crate) fn end_recovery(&self) {
        let jobs: Vec<Given> = {
            let mut rec = self.recovery.lock();
            rec.heard.clear();
            rec.listed.clear();
            rec.finished.clear();
            rec.rounds.drain(..).flat_map(|r| r.jobs).collect()
        };
        for g in jobs {
            let _ = g.job.complete(&[]);
        }
        self.remote.clear_results();
    }
}

/// Removes the rounds that need wait no longer and returns their jobs.
fn take_ready(rec: &mut Recovery, now: Instant) -> Vec<Given> {
    let mut ready = Vec::new();
    let mut i = 0;
    while i < rec.rounds.len() {
        let r = &rec.rounds[i];
        if (r.waiting.is_empty() && r.pending.is_empty()) || now >= r.deadline {
            ready.extend(rec.rounds.swap_remove(i).jobs);
        } else {
            i += 1;
        }
    }
    ready
}
