//! Steal policies: whom an idle node asks for work, and how often.
//!
//! Random stealing sends one synchronous request at a time to a random other member and waits
//! for the answer. Cluster-aware stealing keeps at most one asynchronous request in flight to
//! a random member of another location and meanwhile steals synchronously inside its own.
//! Failed steals back off exponentially (100 µs doubling to 20 ms, each wait drawn between
//! half and all of it), per kind of steal, so that once backed off an idle node sends 50 to 100
//! requests per second of each kind rather than one per wake-up.
//! A node that is leaving the pool asks nobody.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ipl::Lane;
use parking_lot::{Condvar, Mutex};
use rand::Rng;

use super::node::Node;
use super::proto;
use super::Steal;
use crate::remote::Event;

/// Wait after the first failed steal; it doubles with every further failure up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_micros(100);
/// The longest wait between steal requests of an idle node.
const BACKOFF_MAX: Duration = Duration::from_millis(20);
/// A reply that has not come after this long is taken as lost, and the steal as failed.
pub(crate) const REPLY_PATIENCE: Duration = Duration::from_secs(5);
/// How often a thread that waits looks at whether it should stop waiting.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(5);

/// Exponential, bounded, jittered wait between failed steals.
#[derive(Default)]
pub(crate) struct Backoff {
    failures: u32,
    next_at: Option<Instant>,
}

impl Backoff {
    fn ready(&self, now: Instant) -> bool {
        self.next_at.map_or(true, |t| now >= t)
    }

    fn failed(&mut self, now: Instant) {
        self.failures = (self.failures + 1).min(20);
        let full = BACKOFF_MIN
            .saturating_mul(1 << (self.failures - 1).min(16))
            .min(BACKOFF_MAX);
        // Between half and all of it, so that idle nodes do not ask in lockstep.
        let wait = full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0));
        self.next_at = Some(now + wait);
    }

    fn succeeded(&mut self) {
        self.failures = 0;
        self.next_at = None;
    }
}

/// The synchronous steal of this node: at most one at a time.
#[derive(Default)]
pub(crate) struct SyncSteal {
    /// Request being waited for (0: none).
    req: u64,
    /// Its outcome once the reply came: whether it brought a job.
    outcome: Option<bool>,
    backoff: Backoff,
}

/// The asynchronous wide-area steal of cluster-aware stealing: at most one in flight.
#[derive(Default)]
pub(crate) struct WideSteal {
    /// The request, its victim, when it was sent, and the run it asked for work of.
    in_flight: Option<(u64, u32, Instant, u64)>,
    backoff: Backoff,
}

/// The steal state of a node.
#[derive(Default)]
pub(crate) struct Stealing {
    sync: Mutex<SyncSteal>,
    sync_ready: Condvar,
    sync_busy: AtomicBool,
    wide: Mutex<WideSteal>,
    next_req: AtomicU64,
}

impl Stealing {
    /// Forgets the steals of an earlier run.
    pub(crate) fn reset(&self) {
        *self.sync.lock() = SyncSteal::default();
        *self.wide.lock() = WideSteal::default();
    }
}

struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Node {
    /// The idle hook: a worker of this node found no local work.
    pub(crate) fn on_idle(&self) {
        if !self.active.load(Ordering::Acquire) || self.leaving.load(Ordering::Acquire) {
            return;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        match self.policy {
            Steal::Random => {
                let victims = self.members.read().others.clone();
                self.steal_sync(epoch, &victims);
            }
            Steal::ClusterAware => {
                self.steal_wide(epoch);
                let victims = self.members.read().near.clone();
                self.steal_sync(epoch, &victims);
            }
        }
    }

    /// Asks one random node of `victims` for work and waits for the answer. At most one such
    /// steal per node is under way; other idle workers of the node return at once.
    fn steal_sync(&self, epoch: u64, victims: &[u32]) {
        let s = &self.stealing;
        if victims.is_empty() || s.sync_busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let _busy = ClearOnDrop(&s.sync_busy);
        let req = {
            let mut st = s.sync.lock();
            // Under the lock a leaving node looks at before it sends its `LEFT`
            // (`wait_for_steals`): either it sees this request, or this sees it leaving.
            if !st.backoff.ready(Instant::now()) || self.leaving.load(Ordering::SeqCst) {
                return;
            }
            st.req = s.next_req.fetch_add(1, Ordering::Relaxed) + 1;
            st.outcome = None;
            st.req
        };
        let victim = victims[rand::thread_rng().gen_range(0..victims.len())];
        self.remote.note(Event::StealSent {
            wide: self.is_far(victim),
        });
        tracing::trace!(node = %self.me, victim, req, "steal request");
        let sent = self.send(victim, Lane::Control, "sending a steal request", |l| {
            proto::steal(l, epoch, req, false)
        });
        if sent.is_err() {
            let mut st = s.sync.lock();
            st.req = 0;
            st.backoff.failed(Instant::now());
            return;
        }
        let deadline = Instant::now() + REPLY_PATIENCE;
        let mut st = s.sync.lock();
        let got = loop {
            if st.req == req {
                if let Some(got) = st.outcome {
                    break got;
                }
            }
            let gone = self.members.read().present(victim).is_none();
            if !self.serving(epoch) || Instant::now() >= deadline || gone {
                break false;
            }
            s.sync_ready.wait_for(&mut st, WAIT_SLICE);
        };
        st.req = 0;
        if got {
            st.backoff.succeeded();
        } else {
            st.backoff.failed(Instant::now());
        }
    }

    /// Sends an asynchronous steal request to a random node of another location, unless one
    /// is in flight; the reply is handled when it comes.
    fn steal_wide(&self, epoch: u64) {
        let far = self.members.read().far.clone();
        if far.is_empty() {
            return;
        }
        let s = &self.stealing;
        let victim = far[rand::thread_rng().gen_range(0..far.len())];
        let req = {
            let mut w = s.wide.lock();
            let now = Instant::now();
            if self.leaving.load(Ordering::SeqCst) {
                return;
            }
            if let Some((_, _, sent, _)) = w.in_flight {
                if now.duration_since(sent) < REPLY_PATIENCE {
                    return;
                }
                // The reply is lost; count it as a failure.
                w.in_flight = None;
                w.backoff.failed(now);
            }
            if !w.backoff.ready(now) {
                return;
            }
            let req = s.next_req.fetch_add(1, Ordering::Relaxed) + 1;
            w.in_flight = Some((req, victim, now, epoch));
            req
        };
        self.remote.note(Event::StealSent { wide: true });
        let sent = self.send(
            victim,
            Lane::Control,
            "sending a wide-area steal request",
            |l| proto::steal(l, epoch, req, true),
        );
        if sent.is_err() {
            let mut w = s.wide.lock();
            w.in_flight = None;
            w.backoff.failed(Instant::now());
        }
    }

    /// The answer to steal request `req` came (`got`: with a job).
    pub(crate) fn steal_answered(&self, victim: u32, req: u64, wide: bool, got: bool) {
        if got {
            self.remote.note(Event::StealSucceeded {
                wide: self.is_far(victim),
            });
        }
        let s = &self.stealing;
        if wide {
            let mut w = s.wide.lock();
            if w.in_flight.is_some_and(|(r, ..)| r == req) {
                w.in_flight = None;
                if got {
                    w.backoff.succeeded();
                } else {
                    w.backoff.failed(Instant::now());
                }
            }
        } else {
            let mut st = s.sync.lock();
            if st.req == req {
                st.outcome = Some(got);
                s.sync_ready.notify_all();
            }
        }
    }

    /// On a leaving node: waits until no steal request of this node awaits its answer (which
    /// hands back any job it brings, see `on_reply`), or until `deadline`. `leaving` is set,
    /// so no new request starts.
    ///
    /// A wide-area request of a run that this node has seen end is not waited for: its victim
    /// answers no request of a run it has seen end (`on_steal`), and across a wide-area link
    /// the victim often learns of the end before the request reaches it. Nor can the answer
    /// bring a job: a run ends only once every job it gave away has come back (aborted jobs
    /// aside, whose late answer the victim handles as a send to a node that left).
    pub(crate) fn wait_for_steals(&self, deadline: Instant) {
        let s = &self.stealing;
        loop {
            // The run's lock is not taken under the steal's.
            let wide = s.wide.lock().in_flight.map(|(.., epoch)| epoch);
            let wide = wide.is_some_and(|epoch| !self.has_ended(epoch));
            let mut st = s.sync.lock();
            let sync = st.req != 0 && st.outcome.is_none();
            if !(wide || sync) || Instant::now() >= deadline {
                return;
            }
            s.sync_ready.wait_for(&mut st, WAIT_SLICE);
        }
    }

    /// Member `rank` is gone: a steal waiting for its answer fails now.
    pub(crate) fn victim_gone(&self, rank: u32) {
        let s = &self.stealing;
        {
            let mut w = s.wide.lock();
            if w.in_flight.is_some_and(|(_, v, ..)| v == rank) {
                w.in_flight = None;
                w.backoff.failed(Instant::now());
            }
        }
        let _st = s.sync.lock();
        s.sync_ready.notify_all();
    }
}
