//! One node of a distributed run: what it knows and holds, and how it reaches the others.
//!
//! The work on a node is done by these threads, each in the module named:
//! * the mesh's **upcall threads** (`messages`), one per port, handle incoming messages in
//!   order: they answer steal requests with the oldest local job, start jobs they receive,
//!   complete jobs whose results come back, cancel jobs their owner no longer needs, and take
//!   note of joins, orphans and the end of a run;
//! * **idle workers** (`stealing`, through the runtime's idle hook) send steal requests;
//! * any thread that **aborts** a frame or a run tells the thieves of jobs this node gave away
//!   and no longer needs to cancel them (`messages`, through the runtime's abort hook);
//! * the **watcher** (`failures`) follows the pool: members that join, leave or die, the
//!   recovery after a death (`results`: orphans kept, jobs run again), and unwanted jobs;
//! * the thread that calls `run` (`lifecycle`) starts and ends runs, and leaves the pool.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ipl::{Ibis, Lane, Link, Mesh, MeshError, NodeId};
use parking_lot::{Condvar, Mutex, RwLock};

use super::lifecycle::RunState;
use super::proto::JobKey;
use super::results::Recovery;
use super::stealing::Stealing;
use super::Steal;
use crate::remote::{Remote, RemoteJob, RemoteRoot};
use crate::Error;

/// How long an incoming message waits for this node's mesh to be set up.
const SETUP_PATIENCE: Duration = Duration::from_secs(120);

/// Turns an error of the port library into the runtime's, naming the node that failed when it
/// is a peer that is gone.
pub(crate) fn ipl_error(me: &NodeId, what: &str, e: ipl::Error) -> Error {
    match e {
        ipl::Error::NodeDied(n) => died(&n),
        ipl::Error::NodeLeft(n) => left(&n),
        e => Error::Pool {
            node: me.to_string(),
            what: what.to_string(),
            source: Arc::new(e),
        },
    }
}

pub(crate) fn mesh_error(me: &NodeId, what: &str, e: MeshError) -> Error {
    match e {
        MeshError::Departed { peer, .. } if peer.died => died(&peer.node),
        MeshError::Departed { peer, .. } => left(&peer.node),
        other => Error::Pool {
            node: me.to_string(),
            what: what.to_string(),
            source: Arc::new(ipl::Error::Registry(other.to_string())),
        },
    }
}

pub(crate) fn died(n: &NodeId) -> Error {
    Error::NodeFailed {
        node: n.to_string(),
        reason: "it died (its process ended or stopped sending heartbeats)".into(),
    }
}

pub(crate) fn left(n: &NodeId) -> Error {
    Error::NodeFailed {
        node: n.to_string(),
        reason: "it left the pool before the run ended".into(),
    }
}

/// The members of the run as this node sees them, by rank, and whom to steal from.
#[derive(Default)]
pub(crate) struct Members {
    /// Live members, this node included.
    pub(super) live: BTreeMap<u32, NodeId>,
    /// Members that are gone: true if they died, false if they left.
    pub(super) gone: HashMap<u32, bool>,
    /// Members that announced that they are leaving.
    pub(super) leaving: HashSet<u32>,
    /// Leaving members whose last message (`LEFT`) came.
    pub(super) goodbyes: HashSet<u32>,
    /// Leaving members the pool reports gone before their `LEFT` came, with how long this
    /// node waits for it: their results may still be on the way. They stay live (their
    /// messages are read) but are nobody's victims.
    pub(super) departing: HashMap<u32, Instant>,
    /// Victims of random stealing: every other live member.
    pub(super) others: Vec<u32>,
    /// Other live members of this node's location, and live members of other locations.
    pub(super) near: Vec<u32>,
    pub(super) far: Vec<u32>,
}

impl Members {
    /// Adds `n` if it is not known yet; true if it was added.
    pub(crate) fn add(&mut self, n: NodeId, me: &NodeId) -> bool {
        let rank = n.rank();
        if self.live.contains_key(&rank) || self.gone.contains_key(&rank) {
            return false;
        }
        self.live.insert(rank, n);
        self.refresh_victims(me);
        true
    }

    /// Member `rank`, if it is live and not departing: one this node still counts on (a
    /// departing member is read from, but nobody waits on it any more).
    pub(crate) fn present(&self, rank: u32) -> Option<&NodeId> {
        self.live
            .get(&rank)
            .filter(|_| !self.departing.contains_key(&rank))
    }

    /// Marks member `rank` gone; returns it if it was live.
    pub(crate) fn remove(&mut self, rank: u32, died: bool, me: &NodeId) -> Option<NodeId> {
        let n = self.live.remove(&rank)?;
        self.gone.insert(rank, died);
        self.leaving.remove(&rank);
        self.goodbyes.remove(&rank);
        self.departing.remove(&rank);
        self.refresh_victims(me);
        Some(n)
    }

    /// Recomputes the victims of stealing from the live members.
    pub(crate) fn refresh_victims(&mut self, me: &NodeId) {
        self.others.clear();
        self.near.clear();
        self.far.clear();
        for (&rank, n) in &self.live {
            if rank == me.rank() || self.departing.contains_key(&rank) {
                continue;
            }
            self.others.push(rank);
            if n.location() == me.location() {
                self.near.push(rank);
            } else {
                self.far.push(rank);
            }
        }
    }
}

/// A job of this node that runs elsewhere.
pub(crate) struct Given {
    pub(super) job: RemoteJob,
    pub(super) thief: u32,
    pub(super) epoch: u64,
}

/// A job of another node that runs here.
pub(crate) struct Running {
    /// None until `submit` returned.
    pub(super) root: Option<RemoteRoot>,
    /// The owner cancelled it (or the run ended): its result is not sent.
    pub(super) cancelled: bool,
    /// The job, kept in case its owner dies and its result must be kept for whoever runs the
    /// owner's work again.
    pub(super) key: JobKey,
    /// Its owner is gone: the result is announced to every node instead of sent home.
    pub(super) orphan: bool,
}

/// A job this node runs after all (`Node::run_here`): the job, until its root's callback
/// completes it, and the root, which the watcher aborts once nobody wants the job.
pub(crate) struct RunHere {
    pub(super) job: Arc<Mutex<Option<RemoteJob>>>,
    pub(super) root: RemoteRoot,
}

/// A message that could not be sent.
#[derive(Debug)]
pub(crate) struct Unsent {
    /// The receiver is gone (it died or left).
    pub(super) gone: bool,
    pub(super) error: MeshError,
}

impl Unsent {
    /// The runtime's error for this failure while doing `what`.
    pub(crate) fn into_error(self, me: &NodeId, what: &str) -> Error {
        mesh_error(me, what, self.error)
    }
}

/// Send failures to members that the pool has not reported gone; the watcher decides.
#[derive(Default)]
pub(crate) struct Suspects {
    pub(super) ranks: Vec<u32>,
}

impl Suspects {
    /// Notes `rank` once until the watcher takes the list, however many sends to it fail (a
    /// broadcast may fail at every message meanwhile).
    pub(crate) fn note(&mut self, rank: u32) {
        if !self.ranks.contains(&rank) {
            self.ranks.push(rank);
        }
    }
}

pub(crate) struct Node {
    pub(super) ibis: Ibis,
    pub(super) me: NodeId,
    pub(super) master: NodeId,
    pub(super) policy: Steal,
    pub(super) remote: Remote,
    mesh: OnceLock<Mesh>,
    mesh_lock: Mutex<()>,
    mesh_ready: Condvar,
    pub(super) members: RwLock<Members>,
    pub(super) run: Mutex<RunState>,
    pub(super) changed: Condvar,
    /// Mirrors of `run.active` and `run.epoch` for the fast paths.
    pub(super) active: AtomicBool,
    pub(super) epoch: AtomicU64,
    pub(super) given: Mutex<HashMap<u64, Given>>,
    pub(super) given_count: Arc<AtomicUsize>,
    pub(super) running: Mutex<HashMap<(u32, u64), Running>>,
    /// Jobs of this node's own runs that it runs after all (taken back, handed back, or run
    /// again for a thief that is gone or unreachable), until they finish or are aborted.
    pub(super) here: Mutex<Vec<RunHere>>,
    /// The ranks whose links the failpoint broke (see `link_broken`).
    #[cfg(feature = "failpoints")]
    broken_links: Mutex<Vec<u32>>,
    /// Cancellations that arrived before their job (they travel on different connections).
    pub(super) early_cancels: Mutex<HashSet<(u32, u64)>>,
    pub(super) stealing: Stealing,
    pub(super) recovery: Mutex<Recovery>,
    pub(super) suspects: Mutex<Suspects>,
    /// Results of stolen jobs no longer in `running` and not yet sent.
    pub(super) results_sending: AtomicUsize,
    /// Set once this node has been asked to leave the pool.
    pub(super) leaving: AtomicBool,
    /// Set once this node has left: it takes part in no further run.
    pub(super) left: AtomicBool,
    pub(super) leave_requested_at: Mutex<Option<Instant>>,
    /// The waits the environment sets, read once when the node starts.
    pub(super) patience: Patience,
}

/// Waits of a node that the environment may set: `SATIN_ORPHAN_PATIENCE` and
/// `SATIN_LEAVE_PATIENCE` (durations such as `500ms` or `2min`, up to 365 days).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Patience {
    /// How long jobs taken back from a member that is gone wait for its orphans; `None`:
    /// a share of the run so far (see `results`).
    pub(super) orphans: Option<Duration>,
    /// How long a leaving node waits for the jobs it runs for others; `None`: 60 s.
    pub(super) leave: Option<Duration>,
}

impl Patience {
    /// The settings of the environment. A variable that is set must hold a duration: read
    /// when a run needs it, a bad value would otherwise be replaced by the default without
    /// a word, in the middle of the run it was meant for.
    pub(crate) fn from_env() -> Result<Patience, Error> {
        Ok(Patience {
            orphans: duration_from_env("SATIN_ORPHAN_PATIENCE")?,
            leave: duration_from_env("SATIN_LEAVE_PATIENCE")?,
        })
    }
}

/// The duration the environment variable `key` holds; `None` when it is unset.
fn duration_from_env(key: &str) -> Result<Option<Duration>, Error> {
    match std::env::var(key) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(Error::Config(format!("{key}={v:?} is not valid text")))
        }
        Ok(v) => ipl::config::parse_duration(key, &v)
            .map(Some)
            .map_err(|e| Error::Config(e.to_string())),
    }
}

/// What a failed send makes of a member that the pool has not reported gone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnFailure {
    /// Waits the mesh's patience for the pool to report the member gone, and takes one it
    /// does not report for a suspect: what a node that counts on the member does.
    Judge,
    /// Neither waits nor judges: the goodbyes of a leaving node, which counts on nobody any
    /// more, to members that may be leaving or closing at the same time (the patience, 200 ms
    /// by default, for each of them would add up). A lane not yet connected is connected as
    /// for any send, with its waits: these goodbyes go over connected lanes only.
    LetGo,
}

impl Node {
    pub(crate) fn new(
        ibis: &Ibis,
        master: NodeId,
        members: Members,
        remote: Remote,
        policy: Steal,
        patience: Patience,
    ) -> Node {
        Node {
            ibis: ibis.clone(),
            me: ibis.id(),
            master,
            policy,
            remote,
            mesh: OnceLock::new(),
            mesh_lock: Mutex::new(()),
            mesh_ready: Condvar::new(),
            members: RwLock::new(members),
            run: Mutex::new(RunState::default()),
            changed: Condvar::new(),
            active: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            given: Mutex::new(HashMap::new()),
            given_count: Arc::new(AtomicUsize::new(0)),
            running: Mutex::new(HashMap::new()),
            here: Mutex::new(Vec::new()),
            #[cfg(feature = "failpoints")]
            broken_links: Mutex::new(Vec::new()),
            early_cancels: Mutex::new(HashSet::new()),
            stealing: Stealing::default(),
            recovery: Mutex::new(Recovery::default()),
            suspects: Mutex::new(Suspects::default()),
            results_sending: AtomicUsize::new(0),
            leaving: AtomicBool::new(false),
            left: AtomicBool::new(false),
            leave_requested_at: Mutex::new(None),
            patience,
        }
    }

    /// Stores the mesh once it is built and lets waiting messages go on.
    pub(crate) fn set_mesh(&self, mesh: Mesh) {
        let _ = self.mesh.set(mesh);
        let _g = self.mesh_lock.lock();
        self.mesh_ready.notify_all();
    }

    /// The mesh; waits while setup is still building it.
    pub(crate) fn mesh(&self) -> Option<&Mesh> {
        if let Some(m) = self.mesh.get() {
            return Some(m);
        }
        let deadline = Instant::now() + SETUP_PATIENCE;
        let mut g = self.mesh_lock.lock();
        loop {
            if let Some(m) = self.mesh.get() {
                return Some(m);
            }
            if self.mesh_ready.wait_until(&mut g, deadline).timed_out() {
                return None;
            }
        }
    }

    /// Gives up waiting for a mesh that will not come (setup failed).
    pub(crate) fn mesh_failed(&self) {
        let _g = self.mesh_lock.lock();
        self.mesh_ready.notify_all();
    }

    /// Closes the mesh, stopping its upcall threads.
    pub(crate) fn close_mesh(&self) {
        if let Some(m) = self.mesh.get() {
            m.close();
        }
    }

    pub(crate) fn is_master(&self) -> bool {
        self.master == self.me
    }

    /// The live member of rank `rank`.
    pub(crate) fn node_of(&self, rank: u32) -> Option<NodeId> {
        self.members.read().live.get(&rank).cloned()
    }

    /// A display name for member `rank`, live or not.
    pub(crate) fn name_of(&self, rank: u32) -> String {
        self.node_of(rank)
            .map_or_else(|| format!("rank {rank}"), |n| n.to_string())
    }

    /// Whether this node's `lane` to member `rank` is connected (it sent something there).
    pub(crate) fn linked(&self, rank: u32, lane: Lane) -> bool {
        let Some(node) = self.node_of(rank) else {
            return false;
        };
        self.mesh.get().is_some_and(|m| m.linked(&node, lane))
    }

    /// Whether member `rank` is of another location than this node.
    pub(crate) fn is_far(&self, rank: u32) -> bool {
        self.members.read().far.contains(&rank)
    }

    /// True while this node takes part in run `epoch`.
    pub(crate) fn serving(&self, epoch: u64) -> bool {
        self.active.load(Ordering::Acquire) && self.epoch.load(Ordering::Acquire) == epoch
    }

    /// Sends on `lane` to live member `to` with `write`. A failure is logged; one that the
    /// pool does not explain by a departure (within the mesh's patience) makes the watcher
    /// treat `to` as gone.
    pub(crate) fn send(
        &self,
        to: u32,
        lane: Lane,
        what: &str,
        write: impl FnOnce(&Link) -> ipl::Result<u64>,
    ) -> Result<(), Unsent> {
        self.send_as(to, lane, what, OnFailure::Judge, write)
    }

    /// [`send`](Node::send), with a failure handled as `on_failure` says.
    pub(crate) fn send_as(
        &self,
        to: u32,
        lane: Lane,
        what: &str,
        on_failure: OnFailure,
        write: impl FnOnce(&Link) -> ipl::Result<u64>,
    ) -> Result<(), Unsent> {
        let gone = |error: MeshError| Unsent { gone: true, error };
        let Some(node) = self.node_of(to) else {
            return Err(gone(MeshError::Ipl {
                mesh: super::proto::MESH.into(),
                what: what.into(),
                source: Box::new(ipl::Error::Closed(format!(
                    "rank {to}, no longer a member,"
                ))),
            }));
        };
        let Some(mesh) = self.mesh() else {
            return Err(Unsent {
                gone: false,
                error: MeshError::Ipl {
                    mesh: super::proto::MESH.into(),
                    what: what.into(),
                    source: Box::new(ipl::Error::Closed("the mesh, never set up,".into())),
                },
            });
        };
        let sent = if self.link_broken(to) {
            Err(MeshError::Ipl {
                mesh: super::proto::MESH.into(),
                what: what.into(),
                source: Box::new(ipl::Error::ConnectionLost {
                    peer: node.to_string(),
                    reason: "the failpoint satin::link-to-owner-broken".into(),
                }),
            })
        } else {
            mesh.link(&node, lane).and_then(|l| {
                write(&l).map_err(|e| match on_failure {
                    OnFailure::Judge => mesh.send_error(&node, what, e),
                    OnFailure::LetGo => mesh.send_error_within(&node, what, e, Duration::ZERO),
                })
            })
        };
        let Err(error) = sent else {
            return Ok(());
        };
        // Gone if the mesh says so, or the port library names it gone, or this node has
        // already seen it go (the mesh no longer follows members it has dropped).
        let departed = error.is_departure()
            || matches!(&error, MeshError::Ipl { source, .. }
                if matches!(**source, ipl::Error::NodeDied(_) | ipl::Error::NodeLeft(_)))
            || !self.members.read().live.contains_key(&to);
        // Between runs (and once this node knows a run is over) a broken connection is most
        // likely a node that closed its runtime after the end, not a death; the pool's own
        // failure detection still catches a real one.
        if departed || !self.active.load(Ordering::Acquire) || on_failure == OnFailure::LetGo {
            tracing::debug!(node = %self.me, to = %node, "{what} failed: {error}");
        } else {
            tracing::warn!(node = %self.me, to = %node, "{what} failed: {error}");
            self.suspects.lock().note(to);
        }
        Err(Unsent {
            gone: departed,
            error,
        })
    }

    /// Whether sends to member `to` fail as if the link to it had broken, for tests: with the
    /// `failpoints` feature, the failpoint `satin::link-to-owner-broken` breaks it while a job
    /// of `to` runs here (this node took it from `to`, which waits for its result); its
    /// argument, if any, is the one rank whose link breaks (`return(1)`). Never otherwise.
    /// A link it broke stays broken.
    #[cfg(feature = "failpoints")]
    fn link_broken(&self, to: u32) -> bool {
        if self.broken_links.lock().contains(&to) {
            return true;
        }
        // `try_lock`: a send made under the lock finds the link whole.
        let holds = self
            .running
            .try_lock()
            .is_some_and(|r| r.keys().any(|&(owner, _)| owner == to));
        let breaks = || -> bool {
            fail::fail_point!("satin::link-to-owner-broken", holds, |rank| {
                rank.map_or(true, |r| r.trim().parse() == Ok(to))
            });
            false
        };
        if !breaks() {
            return false;
        }
        tracing::warn!(node = %self.me, to, "the failpoint satin::link-to-owner-broken breaks the link");
        self.broken_links.lock().push(to);
        true
    }

    #[cfg(not(feature = "failpoints"))]
    #[inline(always)]
    fn link_broken(&self, _to: u32) -> bool {
        false
    }

    /// Sends to every other live member; failures are handled as by [`send`](Node::send).
    pub(crate) fn broadcast(
        &self,
        lane: Lane,
        what: &str,
        write: impl Fn(&Link) -> ipl::Result<u64>,
    ) {
        self.broadcast_as(what, OnFailure::Judge, |_| Some(lane), write);
    }

    /// Sends to every other live member on the lane `lane_of` picks for it, skipping those it
    /// picks none for; failures are handled as `on_failure` says (see [`send_as`](Node::send_as)).
    pub(crate) fn broadcast_as(
        &self,
        what: &str,
        on_failure: OnFailure,
        lane_of: impl Fn(u32) -> Option<Lane>,
        write: impl Fn(&Link) -> ipl::Result<u64>,
    ) {
        let others = self.members.read().others.clone();
        for rank in others {
            if let Some(lane) = lane_of(rank) {
                let _ = self.send_as(rank, lane, what, on_failure, &write);
            }
        }
    }
}
