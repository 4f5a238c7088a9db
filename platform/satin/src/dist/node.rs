//! One node of a distributed run: its connections, the handling of every message, stealing
//! from other nodes when the local workers are idle, and watching the pool for failures.
//!
//! These threads act on a node:
//! * the port library's **upcall threads**, one per receive port (see [`Links`]), handle the
//!   incoming messages in order: they answer steal requests with the oldest local job, start
//!   jobs they receive, complete jobs whose results come back, cancel jobs their owner no
//!   longer needs, and take note of the end of a run;
//! * **idle workers** (through the runtime's idle hook) send steal requests;
//! * any thread that **aborts** a frame or a run (through the runtime's abort hook) tells the
//!   thieves of jobs this node gave away and no longer needs to cancel them;
//! * the **watcher** thread follows pool events (a node that dies or leaves fails the run) and
//!   looks for unwanted jobs given away, in case one was aborted before it was recorded.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use ipl::{Ibis, NodeId, PoolEvent, ReadMessage, SendPort};
use parking_lot::{Condvar, Mutex};
use rand::Rng;

use super::proto::{self, Msg, Shipped};
use super::Steal;
use crate::remote::{Remote, RemoteJob, RemoteRoot};
use crate::root::{self, Latch, RootState};
use crate::scheduler::Scheduler;
use crate::{Error, Task};

/// How long a victim keeps looking for a job to give when its workers have work but have not
/// made any of it visible yet (they do at their next spawn or sync).
const VICTIM_PATIENCE: Duration = Duration::from_micros(500);
/// Wait after the first failed steal; it doubles with every further failure up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_micros(100);
/// The longest wait between steal requests of an idle node.
const BACKOFF_MAX: Duration = Duration::from_millis(20);
/// A reply that has not come after this long is taken as lost, and the steal as failed.
const REPLY_PATIENCE: Duration = Duration::from_secs(5);
/// How often a thread that waits looks at whether it should stop waiting.
const WAIT_SLICE: Duration = Duration::from_millis(5);
/// How often the watcher looks at the pool and at the jobs given away.
const SCAN_EVERY: Duration = Duration::from_millis(20);
/// A node that leaves while this node's run goes on may just have finished first: the run
/// fails only if its end has not been announced within this time.
const LEAVE_GRACE: Duration = Duration::from_secs(3);
/// How long the master waits for the other nodes to confirm the end of a run.
const ACK_PATIENCE: Duration = Duration::from_secs(10);
/// How long an incoming message waits for this node's connections to be set up.
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

fn died(n: &NodeId) -> Error {
    Error::NodeFailed {
        node: n.to_string(),
        reason: "it died (its process ended or stopped sending heartbeats)".into(),
    }
}

fn left(n: &NodeId) -> Error {
    Error::NodeFailed {
        node: n.to_string(),
        reason: "it left the pool before the run ended".into(),
    }
}

/// Exponential, bounded, jittered wait between failed steals.
#[derive(Default)]
struct Backoff {
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
struct SyncSteal {
    /// Request being waited for (0: none).
    req: u64,
    /// Its outcome once the reply came: whether it brought a job.
    outcome: Option<bool>,
    backoff: Backoff,
}

/// The asynchronous wide-area steal of cluster-aware stealing: at most one in flight.
#[derive(Default)]
struct WideSteal {
    in_flight: Option<(u64, Instant)>,
    backoff: Backoff,
}

/// A job of this node that runs elsewhere.
struct Given {
    job: RemoteJob,
    thief: usize,
    epoch: u64,
}

/// A job of another node that runs here.
struct Running {
    /// None until `submit` returned.
    root: Option<RemoteRoot>,
    /// The owner cancelled it (or the run ended): its result is not sent.
    cancelled: bool,
}

#[derive(Default)]
struct RunState {
    /// The current run, or the last one.
    epoch: u64,
    active: bool,
    /// Why the current run fails, as detected on this node.
    failure: Option<Error>,
    /// The root of the current run, on the master.
    root: Option<Arc<RootState>>,
    /// The latest end of a run announced by the master: its epoch, and its error if it failed.
    done: Option<(u64, Option<String>)>,
    /// Nodes that confirmed the end of the current run (on the master).
    acks: HashSet<usize>,
    /// Nodes that left during the current run, and when that was noticed.
    left: HashMap<usize, Instant>,
}

pub(crate) struct Node {
    ibis: Ibis,
    pub(crate) me: NodeId,
    /// Every member, in rank order.
    pub(crate) all: Vec<NodeId>,
    my_index: usize,
    pub(crate) master: usize,
    index_of: HashMap<u32, usize>,
    policy: Steal,
    /// Victims of random stealing: every other node.
    others: Vec<usize>,
    /// Other nodes of this node's location, and nodes of other locations.
    near: Vec<usize>,
    far: Vec<usize>,
    /// Send ports to every other node, connected once setup is complete.
    out: OnceLock<Links>,
    out_lock: Mutex<()>,
    out_ready: Condvar,
    pub(crate) remote: Remote,
    run: Mutex<RunState>,
    changed: Condvar,
    /// Mirrors of `run.active` and `run.epoch` for the fast paths.
    active: AtomicBool,
    epoch: AtomicU64,
    given: Mutex<HashMap<u64, Given>>,
    given_count: Arc<AtomicUsize>,
    running: Mutex<HashMap<(usize, u64), Running>>,
    /// Cancellations that arrived before their job (they travel on different connections).
    early_cancels: Mutex<HashSet<(usize, u64)>>,
    sync: Mutex<SyncSteal>,
    sync_ready: Condvar,
    sync_busy: AtomicBool,
    wide: Mutex<WideSteal>,
    next_req: AtomicU64,
}

/// Send ports to the other nodes, by index (none for this node).
///
/// Each pair of nodes has two connections. The *control* connection carries small messages
/// only: steal requests, replies without a job, cancellations, the end of a run. The *data*
/// connection carries jobs and results, which may be large. A send blocks until the receiver
/// reads, and the upcall thread of the data port only hands what it reads to the local
/// runtime, never waiting for a send of its own on the normal path: data always drains, so
/// two nodes sending each other large messages cannot block each other.
struct Links {
    control: Vec<Option<SendPort>>,
    data: Vec<Option<SendPort>>,
}

/// What `Node::start` leaves to its caller to own: dropping the ports stops the upcalls,
/// dropping `stop` ends the watcher.
pub(crate) struct Started {
    pub(crate) node: Arc<Node>,
    pub(crate) ports: Vec<ipl::ReceivePort>,
    pub(crate) stop: Sender<()>,
    pub(crate) watcher: std::thread::JoinHandle<()>,
}

fn port_type() -> ipl::PortType {
    ipl::PortType::builder()
        .connection(ipl::Connection::ManyToOne)
        .receive(ipl::Receive::Upcall)
        .serialization(ipl::Serialization::Data)
        .build()
}

struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Node {
    /// Joins the distributed runtime of the pool: waits for every member, elects the master,
    /// opens this node's port, connects to every other node and starts the watcher.
    pub(crate) fn start(ibis: &Ibis, remote: Remote, policy: Steal) -> Result<Started, Error> {
        let me = ibis.id();
        let pool = ibis.pool();
        let events = pool.subscribe();
        let all = pool
            .wait_closed()
            .map_err(|e| ipl_error(&me, "waiting for the pool to fill", e))?;
        let my_index = all
            .iter()
            .position(|n| *n == me)
            .ok_or_else(|| Error::Pool {
                node: me.to_string(),
                what: "finding this node among the members".into(),
                source: Arc::new(ipl::Error::Registry(format!(
                    "{me} is not a member of its pool"
                ))),
            })?;
        let master_id = pool
            .elect(proto::MASTER_ELECTION)
            .map_err(|e| ipl_error(&me, "electing the master", e))?;
        let master = all
            .iter()
            .position(|n| *n == master_id)
            .ok_or_else(|| left(&master_id))?;
        let others: Vec<usize> = (0..all.len()).filter(|&i| i != my_index).collect();
        let (near, far) = others
            .iter()
            .partition(|&&i| all[i].location() == me.location());
        let node = Arc::new(Node {
            ibis: ibis.clone(),
            me: me.clone(),
            index_of: all.iter().enumerate().map(|(i, n)| (n.rank(), i)).collect(),
            all,
            my_index,
            master,
            policy,
            others,
            near,
            far,
            out: OnceLock::new(),
            out_lock: Mutex::new(()),
            out_ready: Condvar::new(),
            remote,
            run: Mutex::new(RunState::default()),
            changed: Condvar::new(),
            active: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            given: Mutex::new(HashMap::new()),
            given_count: Arc::new(AtomicUsize::new(0)),
            running: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(HashSet::new()),
            sync: Mutex::new(SyncSteal::default()),
            sync_ready: Condvar::new(),
            sync_busy: AtomicBool::new(false),
            wide: Mutex::new(WideSteal::default()),
            next_req: AtomicU64::new(1),
        });
        tracing::debug!(node = %me, master = %node.all[master], ?policy, "joining the distributed runtime");

        let ty = port_type();
        let mut ports = Vec::new();
        for name in [proto::CONTROL_PORT, proto::DATA_PORT] {
            let handler = Arc::clone(&node);
            let port = ibis
                .receive_port_with_upcall(&ty, name, move |mut m: ReadMessage| {
                    handler.handle(&mut m);
                    Ok(())
                })
                .map_err(|e| ipl_error(&me, &format!("opening the port '{name}'"), e))?;
            ports.push(port);
        }
        let connected = node.connect_all(&ty);
        if connected.is_err() {
            // Incoming messages wait for the connections; let them go on.
            let none = || (0..node.all.len()).map(|_| None).collect();
            let _ = node.out.set(Links {
                control: none(),
                data: none(),
            });
        }
        {
            let _g = node.out_lock.lock();
            node.out_ready.notify_all();
        }
        connected?;

        // Cancel jobs given away as soon as an abort makes them unwanted, on the thread that
        // aborts: waking the watcher instead costs a scheduling delay, milliseconds on busy
        // cores, during which the thief goes on working for nothing.
        let count = Arc::clone(&node.given_count);
        let weak = Arc::downgrade(&node);
        node.remote.set_abort_hook(move || {
            if count.load(Ordering::Acquire) > 0 {
                if let Some(node) = weak.upgrade() {
                    node.cancel_unwanted();
                }
            }
        });
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let watched = Arc::clone(&node);
        let watcher = std::thread::Builder::new()
            .name(format!("satin-watch-{}", me.rank()))
            .spawn(move || watched.watch(events, stop_rx))
            .map_err(|e| Error::Pool {
                node: me.to_string(),
                what: "starting the watcher thread".into(),
                source: Arc::new(ipl::Error::io("spawn", e)),
            })?;
        Ok(Started {
            node,
            ports,
            stop,
            watcher,
        })
    }

    /// Connects send ports to both ports of every other node (waiting for the ports to exist)
    /// and stores them. Stores nothing on failure.
    fn connect_all(&self, ty: &ipl::PortType) -> Result<(), Error> {
        let mut links = Links {
            control: Vec::with_capacity(self.all.len()),
            data: Vec::with_capacity(self.all.len()),
        };
        for (i, n) in self.all.iter().enumerate() {
            for (list, name) in [
                (&mut links.control, proto::CONTROL_PORT),
                (&mut links.data, proto::DATA_PORT),
            ] {
                if i == self.my_index {
                    list.push(None);
                    continue;
                }
                let sp = self
                    .ibis
                    .send_port(ty)
                    .map_err(|e| ipl_error(&self.me, "creating a send port", e))?;
                sp.connect(n, name).map_err(|e| {
                    ipl_error(&self.me, &format!("connecting to '{name}' on {n}"), e)
                })?;
                list.push(Some(sp));
            }
        }
        self.out
            .set(links)
            .map_err(|_| unreachable!("connections are stored once"))
    }

    /// The connections; waits while setup is still connecting.
    fn links(&self) -> Option<&Links> {
        if let Some(links) = self.out.get() {
            return Some(links);
        }
        let deadline = Instant::now() + SETUP_PATIENCE;
        let mut g = self.out_lock.lock();
        loop {
            if let Some(links) = self.out.get() {
                return Some(links);
            }
            if self.out_ready.wait_until(&mut g, deadline).timed_out() {
                return None;
            }
        }
    }

    /// The control connection to node `i`.
    fn control(&self, i: usize) -> Option<&SendPort> {
        self.links()?.control.get(i).and_then(Option::as_ref)
    }

    /// The data connection to node `i`.
    fn data(&self, i: usize) -> Option<&SendPort> {
        self.links()?.data.get(i).and_then(Option::as_ref)
    }

    fn sched(&self) -> &Arc<Scheduler> {
        &self.remote.sched
    }

    pub(crate) fn is_master(&self) -> bool {
        self.master == self.my_index
    }

    /// True while this node takes part in run `epoch`.
    fn serving(&self, epoch: u64) -> bool {
        self.active.load(Ordering::Acquire) && self.epoch.load(Ordering::Acquire) == epoch
    }

    /// Logs a failed send; a send to a node that is gone is expected once a run fails.
    fn send_failed(&self, to: usize, what: &str, e: ipl::Error) {
        if self.ibis.pool().is_alive(&self.all[to]) {
            tracing::warn!(node = %self.me, to = %self.all[to], "{what} failed: {e}");
        } else {
            tracing::debug!(node = %self.me, to = %self.all[to], "{what} failed: {e}");
        }
    }

    // ---------------------------------------------------------------- incoming messages

    fn handle(self: &Arc<Self>, m: &mut ReadMessage) {
        let Some(&from) = self.index_of.get(&m.origin().rank()) else {
            tracing::warn!(node = %self.me, origin = %m.origin(), "message from outside the pool ignored");
            return;
        };
        let decoded = proto::decode(m);
        let (epoch, msg) = match decoded {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(node = %self.me, from = %self.all[from], "undecodable message: {e}");
                return;
            }
        };
        match msg {
            Msg::Steal { req, wide } => self.on_steal(from, epoch, req, wide),
            Msg::Reply { req, wide, job } => self.on_reply(from, epoch, req, wide, job),
            Msg::Result { job, output } => self.on_result(from, job, output),
            Msg::Cancel { job } => self.on_cancel(from, job),
            Msg::Done { failure } => self.on_done(from, epoch, failure),
            Msg::DoneAck => {
                let mut st = self.run.lock();
                if st.epoch == epoch {
                    st.acks.insert(from);
                    self.changed.notify_all();
                }
            }
            Msg::Failed { reason } => self.fail_run(
                Some(epoch),
                Error::Remote(format!("on {}: {reason}", self.all[from])),
            ),
        }
    }

    /// A thief asks for work: give it the oldest local job, or nothing.
    fn on_steal(&self, thief: usize, epoch: u64, req: u64, wide: bool) {
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
                self.run_here(job);
                None
            }
            job => job,
        };
        tracing::trace!(node = %self.me, thief = %self.all[thief], req, wide, found = job.is_some(), "steal request answered");
        let Some(job) = job else {
            let Some(sp) = self.control(thief) else {
                return;
            };
            if let Err(e) = proto::reply(sp, epoch, req, wide, None) {
                self.send_failed(thief, "answering a steal request", e);
            }
            return;
        };
        let Some(sp) = self.data(thief) else {
            job.fail(Error::Pool {
                node: self.me.to_string(),
                what: format!("sending a job to {}", self.all[thief]),
                source: Arc::new(ipl::Error::Closed("the connections".into())),
            });
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
        let sent = proto::reply(
            sp,
            epoch,
            req,
            wide,
            Some((id, g.job.type_name(), g.job.task())),
        );
        match sent {
            Ok(_) => {
                tracing::debug!(node = %self.me, thief = %self.all[thief], id, "job given away");
            }
            Err(e) => {
                let g = given.remove(&id).expect("recorded above");
                drop(given);
                self.given_count.fetch_sub(1, Ordering::AcqRel);
                let error = ipl_error(&self.me, "sending a job to a thief", e);
                tracing::debug!(node = %self.me, %error, "job lost on its way");
                g.job.fail(error);
            }
        }
    }

    /// Runs a job taken for giving away on this node after all, as a new local root whose
    /// output completes it.
    fn run_here(&self, job: RemoteJob) {
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
                        tracing::warn!("the output of a job taken back does not decode: {e}");
                    }
                }
                Err(e) => job.fail(e),
            }
        });
        match submitted {
            Ok(_root) => tracing::debug!(node = %self.me, type_name, "job taken back"),
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
            if self.sched().active_roots.load(Ordering::Acquire) == 0
                || start.elapsed() >= VICTIM_PATIENCE
            {
                return None;
            }
            std::thread::yield_now();
        }
    }

    fn on_reply(
        self: &Arc<Self>,
        victim: usize,
        epoch: u64,
        req: u64,
        wide: bool,
        job: Option<Shipped>,
    ) {
        let got = match job {
            Some(s) if self.serving(epoch) => self.start_stolen(victim, epoch, s),
            // This node's part in that run is over, so the run is: the owner no longer wants
            // the job and completes it on its own.
            // Answer anyway, so that an owner that still waits for it fails instead of
            // hanging.
            Some(s) => {
                tracing::debug!(node = %self.me, id = s.id, "job of a finished run returned");
                if let Some(sp) = self.data(victim) {
                    let why = format!("it reached {} after its part in run {epoch} ended", self.me);
                    if let Err(e) = proto::result(sp, epoch, s.id, Err(&why)) {
                        self.send_failed(victim, "returning a job", e);
                    }
                }
                false
            }
            None => false,
        };
        tracing::trace!(node = %self.me, victim = %self.all[victim], req, got, "steal reply");
        let c = &self.sched().shared_counters;
        if got {
            c.remote_steals.fetch_add(1, Ordering::Relaxed);
            if self.is_far(victim) {
                c.wide_steals.fetch_add(1, Ordering::Relaxed);
            }
        }
        if wide {
            let mut w = self.wide.lock();
            if w.in_flight.is_some_and(|(r, _)| r == req) {
                w.in_flight = None;
                if got {
                    w.backoff.succeeded();
                } else {
                    w.backoff.failed(Instant::now());
                }
            }
        } else {
            let mut s = self.sync.lock();
            if s.req == req {
                s.outcome = Some(got);
                self.sync_ready.notify_all();
            }
        }
    }

    /// Runs a job received from `owner` as a new local root; its result goes back to `owner`.
    fn start_stolen(self: &Arc<Self>, owner: usize, epoch: u64, s: Shipped) -> bool {
        let key = (owner, s.id);
        if self.early_cancels.lock().remove(&key) {
            tracing::debug!(node = %self.me, id = s.id, "job cancelled before it arrived");
            return false;
        }
        self.running.lock().insert(
            key,
            Running {
                root: None,
                cancelled: false,
            },
        );
        let weak = Arc::downgrade(self);
        let on_done = move |result: Result<Vec<u8>, Error>| {
            if let Some(node) = weak.upgrade() {
                node.stolen_done(key, epoch, result);
            }
        };
        match self.remote.submit(&s.type_name, &s.task, on_done) {
            Ok(root) => {
                self.sched()
                    .shared_counters
                    .jobs_received
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = %self.me, owner = %self.all[owner], id = s.id, "stolen job started");
                // Absent if it has already finished.
                if let Some(r) = self.running.lock().get_mut(&key) {
                    r.root = Some(root);
                }
                true
            }
            Err(e) => {
                self.running.lock().remove(&key);
                tracing::warn!(node = %self.me, "a stolen job cannot run here: {e}");
                if let Some(sp) = self.data(owner) {
                    let why = format!("it cannot run on {}: {e}", self.me);
                    if let Err(e) = proto::result(sp, epoch, s.id, Err(&why)) {
                        self.send_failed(owner, "returning a job", e);
                    }
                }
                false
            }
        }
    }

    /// The root of a stolen job finished: send its output (or error) to the owner.
    fn stolen_done(&self, key: (usize, u64), epoch: u64, result: Result<Vec<u8>, Error>) {
        let entry = self.running.lock().remove(&key);
        if matches!(result, Err(Error::Aborted)) || entry.is_some_and(|r| r.cancelled) {
            return;
        }
        let (owner, id) = key;
        let Some(sp) = self.data(owner) else { return };
        let why;
        let output = match &result {
            Ok(bytes) => Ok(&bytes[..]),
            Err(e) => {
                why = e.to_string();
                Err(&why[..])
            }
        };
        if let Err(e) = proto::result(sp, epoch, id, output) {
            // The owner waits for this result; if it is alive, make the run fail rather
            // than hang.
            if self.ibis.pool().is_alive(&self.all[owner]) {
                let reason = format!(
                    "the result of job {id} could not be sent to {}: {e}",
                    self.all[owner]
                );
                tracing::error!(node = %self.me, "{reason}");
                self.report_failure(epoch, &reason);
            }
        }
    }

    /// Tells the master that this node made the run fail.
    fn report_failure(&self, epoch: u64, reason: &str) {
        if self.is_master() {
            self.fail_run(Some(epoch), Error::Remote(reason.to_string()));
        } else if let Some(sp) = self.control(self.master) {
            if let Err(e) = proto::failed(sp, epoch, reason) {
                self.send_failed(self.master, "reporting a failure", e);
            }
        }
    }

    /// A thief sends back the output of a job this node gave it.
    fn on_result(&self, thief: usize, id: u64, output: Result<Vec<u8>, String>) {
        let Some(given) = self.given.lock().remove(&id) else {
            tracing::debug!(node = %self.me, id, "result of a cancelled job ignored");
            return;
        };
        self.given_count.fetch_sub(1, Ordering::AcqRel);
        if given.thief != thief {
            tracing::warn!(node = %self.me, id, "result from {} for a job given to {}", self.all[thief], self.all[given.thief]);
        }
        match output {
            Ok(bytes) => {
                if let Err(e) = given.job.complete(&bytes) {
                    tracing::warn!(node = %self.me, id, "the output of a remote job does not decode: {e}");
                }
            }
            Err(why) => {
                let error = Error::Remote(format!(
                    "job {id} (`{}`) failed on {}: {why}",
                    given.job.type_name(),
                    self.all[thief]
                ));
                given.job.fail(error);
            }
        }
    }

    /// The owner of a job running here no longer wants it.
    fn on_cancel(&self, owner: usize, id: u64) {
        let mut running = self.running.lock();
        match running.get_mut(&(owner, id)) {
            Some(r) => {
                r.cancelled = true;
                if let Some(root) = &r.root {
                    root.abort();
                }
                self.sched()
                    .shared_counters
                    .cancels_received
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = %self.me, id, "stolen job cancelled by its owner");
            }
            // Either the job is still on its way, or it has finished here; in the second
            // case the entry stays until the end of the run.
            None => {
                self.early_cancels.lock().insert((owner, id));
            }
        }
    }

    /// The master announces the end of run `epoch`.
    fn on_done(&self, master: usize, epoch: u64, failure: Option<String>) {
        if let Some(sp) = self.control(master) {
            if let Err(e) = proto::done_ack(sp, epoch) {
                self.send_failed(master, "confirming the end of the run", e);
            }
        }
        let mut st = self.run.lock();
        if st.done.as_ref().map_or(true, |(e, _)| *e < epoch) {
            st.done = Some((epoch, failure));
        }
        self.changed.notify_all();
    }

    // ---------------------------------------------------------------- stealing

    /// The idle hook: a worker of this node found no local work.
    pub(crate) fn on_idle(&self) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        match self.policy {
            Steal::Random => self.steal_sync(epoch, &self.others),
            Steal::ClusterAware => {
                self.steal_wide(epoch);
                self.steal_sync(epoch, &self.near);
            }
        }
    }

    /// Whether node `i` is in another location than this one.
    fn is_far(&self, i: usize) -> bool {
        self.all[i].location() != self.me.location()
    }

    fn note_attempt(&self, victim: usize) {
        let c = &self.sched().shared_counters;
        c.remote_steal_attempts.fetch_add(1, Ordering::Relaxed);
        if self.is_far(victim) {
            c.wide_steal_attempts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks one random node of `victims` for work and waits for the answer. At most one such
    /// steal per node is under way; other idle workers of the node return at once.
    fn steal_sync(&self, epoch: u64, victims: &[usize]) {
        if victims.is_empty() || self.sync_busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let _busy = ClearOnDrop(&self.sync_busy);
        let req = {
            let mut s = self.sync.lock();
            if !s.backoff.ready(Instant::now()) {
                return;
            }
            s.req = self.next_req.fetch_add(1, Ordering::Relaxed);
            s.outcome = None;
            s.req
        };
        let victim = victims[rand::thread_rng().gen_range(0..victims.len())];
        let Some(sp) = self.control(victim) else {
            return;
        };
        self.note_attempt(victim);
        tracing::trace!(node = %self.me, victim = %self.all[victim], req, "steal request");
        if let Err(e) = proto::steal(sp, epoch, req, false) {
            self.sync.lock().backoff.failed(Instant::now());
            self.send_failed(victim, "sending a steal request", e);
            return;
        }
        let deadline = Instant::now() + REPLY_PATIENCE;
        let mut s = self.sync.lock();
        let got = loop {
            if s.req == req {
                if let Some(got) = s.outcome {
                    break got;
                }
            }
            if !self.serving(epoch)
                || Instant::now() >= deadline
                || !self.ibis.pool().is_alive(&self.all[victim])
            {
                break false;
            }
            self.sync_ready.wait_for(&mut s, WAIT_SLICE);
        };
        s.req = 0;
        if got {
            s.backoff.succeeded();
        } else {
            s.backoff.failed(Instant::now());
        }
    }

    /// Sends an asynchronous steal request to a random node of another location, unless one
    /// is in flight; the reply is handled when it comes.
    fn steal_wide(&self, epoch: u64) {
        if self.far.is_empty() {
            return;
        }
        let req = {
            let mut w = self.wide.lock();
            let now = Instant::now();
            if let Some((_, sent)) = w.in_flight {
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
            let req = self.next_req.fetch_add(1, Ordering::Relaxed);
            w.in_flight = Some((req, now));
            req
        };
        let victim = self.far[rand::thread_rng().gen_range(0..self.far.len())];
        let Some(sp) = self.control(victim) else {
            return;
        };
        self.note_attempt(victim);
        if let Err(e) = proto::steal(sp, epoch, req, true) {
            let mut w = self.wide.lock();
            w.in_flight = None;
            w.backoff.failed(Instant::now());
            drop(w);
            self.send_failed(victim, "sending a wide-area steal request", e);
        }
    }

    // ---------------------------------------------------------------- runs

    /// Runs `task` as the next run of the pool: on the master as the root, elsewhere by
    /// serving steals until the master announces the end. Every node calls it once per run.
    pub(crate) fn run<T: Task>(self: &Arc<Self>, task: T) -> Result<Option<T::Output>, Error> {
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

    /// Starts a run: fails at once if a member is already gone.
    fn begin(&self) -> Result<u64, Error> {
        let pool = self.ibis.pool();
        pool.check_alive(&[])
            .map_err(|e| ipl_error(&self.me, "checking the pool", e))?;
        let dead = pool.dead();
        for n in &self.all {
            if !pool.is_alive(n) {
                return Err(if dead.contains(n) { died(n) } else { left(n) });
            }
        }
        *self.sync.lock() = SyncSteal::default();
        *self.wide.lock() = WideSteal::default();
        self.early_cancels.lock().clear();
        let mut st = self.run.lock();
        st.epoch += 1;
        st.active = true;
        st.failure = None;
        st.root = None;
        st.acks.clear();
        st.left.clear();
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
    }

    /// Aborts every job received from other nodes that still runs here.
    fn cancel_running(&self) {
        for r in self.running.lock().values_mut() {
            r.cancelled = true;
            if let Some(root) = &r.root {
                root.abort();
            }
        }
    }

    fn run_master<T: Task>(&self, epoch: u64, task: T) -> Result<T::Output, Error> {
        let latch = Arc::new(Latch::new());
        let setter = Arc::clone(&latch);
        let state = root::submit(self.sched(), task, move |r| setter.set(r));
        let failed = {
            let mut st = self.run.lock();
            st.root = Some(Arc::clone(&state));
            st.failure.clone()
        };
        if let Some(e) = failed {
            state.fail(self.sched(), e);
        }
        let result = latch.wait();
        self.end();
        let failure = result.as_ref().err().map(|e| e.to_string());
        let pool = self.ibis.pool();
        for &i in &self.others {
            if !pool.is_alive(&self.all[i]) {
                continue;
            }
            if let Some(sp) = self.control(i) {
                if let Err(e) = proto::done(sp, epoch, failure.as_deref()) {
                    self.send_failed(i, "announcing the end of the run", e);
                }
            }
        }
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
        let pool = self.ibis.pool();
        let deadline = Instant::now() + ACK_PATIENCE;
        let mut st = self.run.lock();
        if st.epoch == 0 || st.active {
            return;
        }
        loop {
            let missing = self
                .others
                .iter()
                .find(|&&i| !st.acks.contains(&i) && pool.is_alive(&self.all[i]));
            let Some(&i) = missing else { break };
            if Instant::now() >= deadline {
                tracing::warn!(node = %self.me, "{} did not confirm the end of the run", self.all[i]);
                break;
            }
            self.changed.wait_for(&mut st, WAIT_SLICE);
        }
    }

    fn run_other(&self, epoch: u64) -> Result<(), Error> {
        let outcome = {
            let mut st = self.run.lock();
            loop {
                if let Some(e) = st.failure.clone() {
                    break Err(e);
                }
                if let Some((e, failure)) = &st.done {
                    if *e >= epoch {
                        break match failure {
                            None => Ok(()),
                            Some(why) => Err(Error::RunFailed {
                                master: self.all[self.master].to_string(),
                                reason: why.clone(),
                            }),
                        };
                    }
                }
                self.changed.wait_for(&mut st, Duration::from_millis(100));
            }
        };
        self.end();
        tracing::debug!(node = %self.me, epoch, ok = outcome.is_ok(), "run ended");
        outcome
    }

    /// Makes the current run (or run `epoch`, if given) fail with `error` on this node.
    fn fail_run(&self, epoch: Option<u64>, error: Error) {
        let root = {
            let mut st = self.run.lock();
            if !st.active || epoch.is_some_and(|e| e != st.epoch) || st.failure.is_some() {
                return;
            }
            tracing::warn!(node = %self.me, epoch = st.epoch, "the run fails: {error}");
            st.failure = Some(error.clone());
            st.root.clone()
        };
        if let Some(root) = root {
            root.fail(self.sched(), error);
        }
        self.cancel_running();
        self.changed.notify_all();
    }

    // ---------------------------------------------------------------- the watcher

    fn watch(&self, events: Receiver<PoolEvent>, stop: Receiver<()>) {
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
            self.cancel_unwanted();
            self.check_members();
        }
    }

    fn on_pool_event(&self, ev: PoolEvent) {
        match ev {
            PoolEvent::Died(n) if self.index_of.contains_key(&n.rank()) => {
                self.fail_run(None, died(&n));
            }
            PoolEvent::Left(n) => {
                if let Some(&i) = self.index_of.get(&n.rank()) {
                    let mut st = self.run.lock();
                    if st.active {
                        st.left.entry(i).or_insert_with(Instant::now);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fails the run if a member is gone: at once if it died, after a grace period if it
    /// left (it may have seen the end of the run before this node did). Also catches deaths
    /// whose events were missed, and the loss of the registry.
    fn check_members(&self) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let pool = self.ibis.pool();
        if let Err(e) = pool.check_alive(&[]) {
            self.fail_run(None, ipl_error(&self.me, "watching the pool", e));
            return;
        }
        let dead = pool.dead();
        let mut expired = None;
        {
            let mut st = self.run.lock();
            for (i, n) in self.all.iter().enumerate() {
                if dead.contains(n) {
                    expired = Some(died(n));
                    break;
                }
                if !pool.is_alive(n) {
                    let since = *st.left.entry(i).or_insert_with(Instant::now);
                    if since.elapsed() >= LEAVE_GRACE {
                        expired = Some(left(n));
                        break;
                    }
                }
            }
        }
        if let Some(e) = expired {
            self.fail_run(None, e);
        }
    }

    /// Tells the thieves of jobs this node no longer needs (an ancestor aborted them, or the
    /// run is failing) to cancel them, and completes those jobs here at once. Runs on the
    /// watcher and, through the abort hook, on any thread that aborts; locks `given` and then
    /// send ports, in the same order as `on_steal`, and is called with `running` held by
    /// `on_cancel` and `cancel_running`, which nothing takes while holding `given`.
    fn cancel_unwanted(&self) {
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
            if let Some(sp) = self.control(g.thief) {
                match proto::cancel(sp, g.epoch, id) {
                    Ok(_) => {
                        self.sched()
                            .shared_counters
                            .cancels_sent
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(node = %self.me, id, thief = %self.all[g.thief], "remote job cancelled");
                    }
                    Err(e) => self.send_failed(g.thief, "cancelling a job", e),
                }
            }
            // The job is aborted, so this finishes it as such whatever the bytes.
            let _ = g.job.complete(&[]);
        }
    }
}
