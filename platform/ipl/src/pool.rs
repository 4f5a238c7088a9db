//! A node's view of its pool: members, deaths, elections, and the link to the registry.

use crate::config::{Config, Driver};
use crate::error::{Error, Result};
use crate::node::{NodeId, Reach};
use crate::registry::proto::{
    read_frame, write_frame, FromRegistry, PoolEvent, ToRegistry, MAX_ELECTION_NAME,
};
use crate::registry::state::{JoinRequest, RegistryState, MEMBER_QUEUE};
use crate::wire;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Events a subscriber may leave unread before newer ones are dropped.
const SUBSCRIBER_QUEUE: usize = 4096;

pub(crate) trait Link: Send + Sync {
    fn send(&self, m: ToRegistry) -> Result<()>;
    fn close(&self, died: bool);
}

/// Refusals kept for candidates that have not read theirs yet.
const MAX_PENDING_REFUSALS: usize = 1024;

#[derive(Default)]
struct View {
    members: BTreeMap<u32, NodeId>,
    dead: BTreeMap<u32, NodeId>,
    left: BTreeMap<u32, NodeId>,
    closed: Option<Vec<NodeId>>,
    elections: HashMap<String, NodeId>,
    /// Elections a lookup found without a winner, until the next lookup.
    vacant: std::collections::HashSet<String>,
    /// Elections the registry refused to hold, with why, until the candidate reads it.
    refused: HashMap<String, String>,
    subscribers: Vec<Sender<PoolEvent>>,
    registry_lost: Option<String>,
}

/// What the node has done when the pool declares a member dead.
pub(crate) type DeathHook = Box<dyn Fn(&NodeId) + Send + Sync>;

pub(crate) struct PoolInner {
    me: NodeId,
    /// The member whose process runs the registry, if one does.
    registry_rank: Option<u32>,
    /// Set when the connection to the registry broke while this node was a member: the node is
    /// cut off from its pool (failures can no longer be seen), and its receives fail.
    lost: AtomicBool,
    /// More members run on this node's host than it has processors: receivers then yield at
    /// once instead of spinning, so that the peer they wait for gets a processor.
    crowded: AtomicBool,
    /// Set when this node leaves, so that the end of its registry connection is not a loss.
    left: AtomicBool,
    size: Option<u32>,
    join_timeout: Duration,
    request_timeout: Duration,
    view: Mutex<View>,
    changed: Condvar,
    link: OnceLock<Box<dyn Link>>,
    /// Told of every death, before the subscribers; set by the node (see [`Pool::on_death`]).
    on_death: OnceLock<DeathHook>,
    /// This node's clock against the registry's, measured at join by traced tcp nodes.
    clock: crate::trace::ClockOffset,
}

/// The pool a node belongs to: membership, failures and elections.
#[derive(Clone)]
pub struct Pool {
    pub(crate) inner: Arc<PoolInner>,
}

impl PoolInner {
    fn apply(&self, msg: FromRegistry) {
        let mut v = self.view.lock();
        let ev = match msg {
            FromRegistry::Welcome { .. }
            | FromRegistry::Refused(_)
            | FromRegistry::Clock { .. }
            | FromRegistry::Alive
            | FromRegistry::Watching
            | FromRegistry::Silent { .. } => return,
            FromRegistry::NoWinner(name) => {
                v.vacant.insert(name);
                drop(v);
                self.changed.notify_all();
                return;
            }
            FromRegistry::ElectionRefused { name, why } => {
                // The registry refuses only names this node stood in, and each candidate takes
                // its entry out; the cap keeps a misbehaving registry from growing the map.
                if v.refused.len() < MAX_PENDING_REFUSALS {
                    v.refused.insert(name, why);
                }
                drop(v);
                self.changed.notify_all();
                return;
            }
            FromRegistry::Elected { name, winner } => {
                v.vacant.remove(&name);
                v.elections.insert(name, winner);
                drop(v);
                self.changed.notify_all();
                return;
            }
            FromRegistry::Event(ev) => ev,
        };
        match &ev {
            PoolEvent::Joined(n) => {
                v.members.insert(n.rank(), n.clone());
                v.dead.remove(&n.rank());
                v.left.remove(&n.rank());
            }
            PoolEvent::Left(n) | PoolEvent::Died(n) => {
                v.members.remove(&n.rank());
                v.elections.retain(|_, w| w != n);
                if matches!(ev, PoolEvent::Died(_)) {
                    v.dead.insert(n.rank(), n.clone());
                    self.died(n);
                } else {
                    v.left.insert(n.rank(), n.clone());
                }
            }
            PoolEvent::Closed(all) => v.closed = Some(all.clone()),
        }
        crate::trace::pool_event(&ev);
        self.count_neighbours(&v);
        v.subscribers.retain(|s| match s.try_send(ev.clone()) {
            Ok(()) => true,
            Err(crossbeam_channel::TrySendError::Full(_)) => {
                tracing::warn!("pool event subscriber is not reading; event dropped");
                true
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => false,
        });
        drop(v);
        self.changed.notify_all();
    }

    /// Tells the node's death hook that `n` died; called before the subscribers hear of it,
    /// so that what the hook frees is gone by the time they do.
    fn died(&self, n: &NodeId) {
        if let Some(f) = self.on_death.get() {
            f(n);
        }
    }

    /// Updates [`PoolInner::crowded`] from the members in `v`.
    fn count_neighbours(&self, v: &View) {
        // The host's processors, not this process's: a launcher that binds each process to a
        // core of its own does not crowd them (see `processors`).
        static CORES: OnceLock<usize> = OnceLock::new();
        let cores = *CORES.get_or_init(crate::processors::shared_by_host);
        let key = &self.me.reach().host_key;
        let here = v
            .members
            .values()
            .filter(|m| &m.reach().host_key == key)
            .count();
        self.crowded.store(here > cores, Ordering::Relaxed);
    }

    /// Whether more members run on this host than it has processors.
    pub(crate) fn crowded(&self) -> bool {
        self.crowded.load(Ordering::Relaxed)
    }

    /// Why this node is cut off from its pool, once it has lost the registry while a member.
    /// Cheap while all is well (one atomic load), as receivers ask before every message.
    #[inline]
    pub(crate) fn cut_off(&self) -> Option<String> {
        if !self.lost.load(Ordering::Relaxed) {
            return None;
        }
        self.why_cut_off()
    }

    #[cold]
    #[inline(never)]
    fn why_cut_off(&self) -> Option<String> {
        let v = self.view.lock();
        let why = v.registry_lost.clone().unwrap_or_default();
        Some(format!("{} is cut off from its pool: {why}", self.me))
    }

    fn lost_registry(&self, why: String) {
        if self.left.load(Ordering::SeqCst) {
            return;
        }
        let mut v = self.view.lock();
        match self.registry_rank.filter(|r| *r != self.me.rank()) {
            // The registry ran inside a member: that member is gone, and not by leaving (a
            // member running the registry leaves before it stops it, and stops it only once
            // the others have left).
            Some(r) if v.members.contains_key(&r) => {
                let n = v.members.remove(&r).expect("member is present");
                tracing::warn!(node = %n, "lost the registry that ran in this member: {why}");
                v.registry_lost = Some(format!("the registry ran in {n}, which is gone: {why}"));
                v.dead.insert(r, n.clone());
                self.died(&n);
                let ev = PoolEvent::Died(n);
                crate::trace::pool_event(&ev);
                v.subscribers.retain(|s| {
                    !matches!(
                        s.try_send(ev.clone()),
                        Err(crossbeam_channel::TrySendError::Disconnected(_))
                    )
                });
            }
            _ => v.registry_lost = Some(why),
        }
        // No event can come any more: ending the streams ends their readers' loops at once,
        // rather than at their own deadlines (see [`Pool::subscribe`]).
        v.subscribers.clear();
        self.lost.store(true, Ordering::SeqCst);
        drop(v);
        self.changed.notify_all();
    }

    pub(crate) fn is_gone(&self, n: &NodeId) -> bool {
        self.is_gone_rank(n.rank())
    }

    pub(crate) fn is_gone_rank(&self, rank: u32) -> bool {
        let v = self.view.lock();
        v.dead.contains_key(&rank) || v.left.contains_key(&rank)
    }
}

impl Pool {
    /// Joins the pool described by `cfg`, advertising `address` for this node's ports; tcp and
    /// wan nodes pass their authenticated connection to the registry (from [`connect_registry`]).
    pub(crate) fn join(
        cfg: &Config,
        address: &str,
        local: Reach,
        registry: Option<TcpStream>,
    ) -> Result<Pool> {
        let req = JoinRequest {
            pool: cfg.pool.clone(),
            size: cfg.size,
            rank: cfg.rank,
            host: cfg.host.clone(),
            location: cfg.location.clone(),
            address: address.to_owned(),
            local,
            death_timeout: cfg.death_timeout,
            running: cfg.join_running,
        };
        // A node that joins a running pool waits, within the join timeout, for it to fill.
        let deadline = Instant::now() + cfg.join_timeout;
        let mut registry = registry;
        let mut backoff = Duration::from_millis(10);
        loop {
            let joined = match (cfg.driver, registry.take()) {
                (Driver::Inproc, _) => join_inproc(cfg, req.clone()),
                (_, Some(s)) => join_tcp(cfg, req.clone(), s),
                (_, None) => join_tcp(cfg, req.clone(), connect_registry(cfg)?),
            };
            match joined {
                Err(Error::Registry(why))
                    if cfg.join_running
                        && why.contains(crate::registry::state::NOT_RUNNING_YET)
                        && Instant::now() < deadline =>
                {
                    tracing::debug!(pool = %cfg.pool, "waiting for the pool to run: {why}");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    fn make_inner(
        me: NodeId,
        members: Vec<NodeId>,
        cfg: &Config,
        clock: crate::trace::ClockOffset,
    ) -> Arc<PoolInner> {
        let view = View {
            members: members.into_iter().map(|m| (m.rank(), m)).collect(),
            ..View::default()
        };
        let inner = Arc::new(PoolInner {
            me,
            registry_rank: cfg.registry_rank,
            lost: AtomicBool::new(false),
            crowded: AtomicBool::new(false),
            left: AtomicBool::new(false),
            size: cfg.size,
            join_timeout: cfg.join_timeout,
            request_timeout: cfg.connect_timeout,
            view: Mutex::new(view),
            changed: Condvar::new(),
            link: OnceLock::new(),
            on_death: OnceLock::new(),
            clock,
        });
        inner.count_neighbours(&inner.view.lock());
        inner
    }

    /// This node's clock against the registry's: measured at join by a tcp node that writes a
    /// trace, shared otherwise (see [`trace`](crate::trace)).
    pub fn clock(&self) -> crate::trace::ClockOffset {
        self.inner.clock
    }

    /// This node.
    pub fn me(&self) -> &NodeId {
        &self.inner.me
    }

    /// Whether more members of the pool run on this node's host than the host has processors
    /// (for all the processes of the host, whatever each one is bound to). A member that
    /// waits for others should then give its processor away rather than spin.
    pub fn crowded(&self) -> bool {
        self.inner.crowded()
    }

    /// Size of a closed pool.
    pub fn size(&self) -> Option<u32> {
        self.inner.size
    }

    /// Members alive now, in rank order.
    pub fn members(&self) -> Vec<NodeId> {
        self.inner.view.lock().members.values().cloned().collect()
    }

    /// Waits until a closed pool has all its members and returns them in rank order.
    pub fn wait_closed(&self) -> Result<Vec<NodeId>> {
        let Some(size) = self.inner.size else {
            return Err(Error::config(
                "IPL_POOL_SIZE",
                "wait_closed needs a closed pool (a pool size)",
            ));
        };
        let deadline = Instant::now() + self.inner.join_timeout;
        let mut v = self.inner.view.lock();
        loop {
            if let Some(all) = &v.closed {
                return Ok(all.clone());
            }
            if let Some(why) = &v.registry_lost {
                return Err(Error::Registry(why.clone()));
            }
            if let Some(d) = v.dead.values().next() {
                return Err(Error::NodeDied(d.clone()));
            }
            if self.inner.changed.wait_until(&mut v, deadline).timed_out() {
                return Err(Error::Timeout {
                    what: format!(
                        "pool '{}' to fill: {} of {size} joined",
                        self.inner.me.pool(),
                        v.members.len()
                    ),
                    waited: self.inner.join_timeout,
                });
            }
        }
    }

    /// Runs the election `name`: the first caller wins; everyone gets the same winner, and a new
    /// winner is chosen once the winner leaves or dies.
    ///
    /// Names are 1 to [`MAX_ELECTION_NAME`] bytes, and a pool
    /// holds at most [`MAX_ELECTIONS`](crate::registry::MAX_ELECTIONS) elections whose winners
    /// are present; past that the registry refuses new names ([`Error::Registry`]).
    pub fn elect(&self, name: &str) -> Result<NodeId> {
        if name.is_empty() || name.len() > MAX_ELECTION_NAME {
            return Err(Error::config(
                "election",
                format!("name must be 1 to {MAX_ELECTION_NAME} bytes"),
            ));
        }
        if let Some(w) = self.inner.view.lock().elections.get(name) {
            return Ok(w.clone());
        }
        self.link()?.send(ToRegistry::Elect(name.to_owned()))?;
        let deadline = Instant::now() + self.inner.request_timeout;
        let mut v = self.inner.view.lock();
        loop {
            if let Some(w) = v.elections.get(name) {
                return Ok(w.clone());
            }
            if let Some(why) = v.refused.remove(name) {
                return Err(Error::Registry(format!("election '{name}' refused: {why}")));
            }
            if let Some(why) = &v.registry_lost {
                return Err(Error::Registry(why.clone()));
            }
            if self.inner.changed.wait_until(&mut v, deadline).timed_out() {
                return Err(Error::Timeout {
                    what: format!("election '{name}'"),
                    waited: self.inner.request_timeout,
                });
            }
        }
    }

    /// The current winner of election `name`, without standing as a candidate; `None` when
    /// nobody holds it (never elected, or the winner has gone).
    pub fn election(&self, name: &str) -> Result<Option<NodeId>> {
        {
            let mut v = self.inner.view.lock();
            if let Some(w) = v.elections.get(name) {
                return Ok(Some(w.clone()));
            }
            v.vacant.remove(name);
        }
        self.link()?.send(ToRegistry::Lookup(name.to_owned()))?;
        let deadline = Instant::now() + self.inner.request_timeout;
        let mut v = self.inner.view.lock();
        loop {
            if let Some(w) = v.elections.get(name) {
                return Ok(Some(w.clone()));
            }
            if v.vacant.remove(name) {
                return Ok(None);
            }
            if let Some(why) = &v.registry_lost {
                return Err(Error::Registry(why.clone()));
            }
            if self.inner.changed.wait_until(&mut v, deadline).timed_out() {
                return Err(Error::Timeout {
                    what: format!("looking up election '{name}'"),
                    waited: self.inner.request_timeout,
                });
            }
        }
    }

    fn link(&self) -> Result<&dyn Link> {
        self.inner
            .link
            .get()
            .map(|b| &**b)
            .ok_or_else(|| Error::Registry("not connected".into()))
    }

    /// Whether `n` is a member that has neither died nor left.
    pub fn is_alive(&self, n: &NodeId) -> bool {
        !self.inner.is_gone(n)
    }

    /// Members that died so far.
    pub fn dead(&self) -> Vec<NodeId> {
        self.inner.view.lock().dead.values().cloned().collect()
    }

    /// Ok when every node of `nodes` is alive; otherwise the error names the first that died or
    /// left. Also fails when the registry connection is lost, since failures can no longer be seen.
    pub fn check_alive(&self, nodes: &[NodeId]) -> Result<()> {
        let v = self.inner.view.lock();
        for n in nodes {
            if let Some(d) = v.dead.get(&n.rank()) {
                return Err(Error::NodeDied(d.clone()));
            }
            if let Some(l) = v.left.get(&n.rank()) {
                return Err(Error::NodeLeft(l.clone()));
            }
        }
        if let Some(why) = &v.registry_lost {
            return Err(Error::Registry(why.clone()));
        }
        Ok(())
    }

    /// A stream of membership events from now on (bounded; a subscriber that stops reading
    /// loses events rather than growing memory).
    ///
    /// The stream ends when this node loses its pool's registry: no event can reach it any
    /// more, so a loop over the events (`for ev in events`, or `recv` returning `Err`) ends
    /// once it has read those that came before, rather than waiting for one that never comes.
    /// When the registry ran in a member, that member's [`PoolEvent::Died`] is the last event.
    /// [`Pool::check_alive`] then says why, as an [`Error::Registry`]. A stream taken after the
    /// loss is ended from the start.
    pub fn subscribe(&self) -> Receiver<PoolEvent> {
        let (tx, rx) = crossbeam_channel::bounded(SUBSCRIBER_QUEUE);
        let mut v = self.inner.view.lock();
        // The loss and the clearing of the subscribers happen under this lock: a stream is
        // either ended by it or taken after it, never left open.
        if v.registry_lost.is_none() {
            v.subscribers.push(tx);
        }
        rx
    }

    /// Sets what is called with each member the pool declares dead, from then on (once per
    /// pool; a second hook is ignored). It runs with the pool's view locked, so it must not
    /// call back into the pool.
    pub(crate) fn on_death(&self, f: DeathHook) {
        let _ = self.inner.on_death.set(f);
    }

    /// Leaves the pool (or reports this node dead, when it is ending by a failure).
    pub(crate) fn leave(&self, died: bool) {
        self.inner.left.store(true, Ordering::SeqCst);
        if let Some(l) = self.inner.link.get() {
            l.close(died);
        }
    }
}

fn inproc_registry() -> &'static Arc<Mutex<RegistryState>> {
    static R: OnceLock<Arc<Mutex<RegistryState>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

struct InprocLink {
    pool: String,
    rank: u32,
    state: Arc<Mutex<RegistryState>>,
}

impl Link for InprocLink {
    fn send(&self, m: ToRegistry) -> Result<()> {
        let mut s = self.state.lock();
        match m {
            ToRegistry::Elect(name) => s.elect(&self.pool, self.rank, &name),
            ToRegistry::Lookup(name) => s.lookup(&self.pool, self.rank, &name),
            ToRegistry::Leave => s.remove(&self.pool, self.rank, false),
            ToRegistry::Heartbeat
            | ToRegistry::Join { .. }
            | ToRegistry::Clock
            | ToRegistry::Pid(_)
            | ToRegistry::Watch { .. } => {}
        }
        Ok(())
    }
    fn close(&self, died: bool) {
        self.state.lock().remove(&self.pool, self.rank, died);
    }
}

fn join_inproc(cfg: &Config, req: JoinRequest) -> Result<Pool> {
    let state = inproc_registry().clone();
    let (tx, rx) = crossbeam_channel::bounded(MEMBER_QUEUE);
    let pool_name = req.pool.clone();
    let me = state.lock().join(req, tx).map_err(Error::Registry)?;
    let members = match rx.recv() {
        Ok(FromRegistry::Welcome { members, .. }) => members,
        _ => {
            return Err(Error::Registry(
                "no welcome from the in-process registry".into(),
            ))
        }
    };
    let inner = Pool::make_inner(me.clone(), members, cfg, crate::trace::ClockOffset::SHARED);
    let _ = inner.link.set(Box::new(InprocLink {
        pool: pool_name,
        rank: me.rank(),
        state,
    }));
    let weak = Arc::downgrade(&inner);
    std::thread::Builder::new()
        .name(format!("ipl-pool-{}", me.rank()))
        .spawn(move || {
            for msg in rx {
                match weak.upgrade() {
                    Some(p) => p.apply(msg),
                    None => break,
                }
            }
        })
        .map_err(|e| Error::io("spawn pool thread", e))?;
    Ok(Pool { inner })
}

struct TcpLink {
    stream: Mutex<TcpStream>,
    stop: Mutex<Option<Sender<()>>>,
}

impl Link for TcpLink {
    fn send(&self, m: ToRegistry) -> Result<()> {
        write_frame(&mut *self.stream.lock(), &m).map_err(|e| Error::io("registry send", e))
    }
    fn close(&self, died: bool) {
        self.stop.lock().take();
        let mut s = self.stream.lock();
        if !died {
            let _ = write_frame(&mut *s, &ToRegistry::Leave);
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Connects and authenticates to the registry, retrying while it is not up yet, for at most the
/// connect timeout. With several candidate addresses (comma-separated), each round tries them
/// in order and the first that answers wins.
pub(crate) fn connect_registry(cfg: &Config) -> Result<TcpStream> {
    let server = cfg
        .server
        .clone()
        .ok_or_else(|| Error::config("IPL_SERVER", "no registry address"))?;
    let candidates: Vec<&str> = server
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if candidates.is_empty() {
        return Err(Error::config("IPL_SERVER", "no registry address"));
    }
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut backoff = Duration::from_millis(10);
    loop {
        let mut last = String::new();
        for candidate in &candidates {
            let left = deadline.saturating_duration_since(Instant::now());
            match try_registry(
                cfg,
                candidate,
                left.clamp(Duration::from_millis(100), Duration::from_secs(5)),
            ) {
                Ok(s) => return Ok(s),
                Err(Attempt::Fatal(e)) => {
                    return Err(Error::Auth {
                        peer: format!("registry {candidate}"),
                        reason: e,
                    })
                }
                Err(Attempt::Retry(e)) => last = format!("{candidate}: {e}"),
            }
        }
        if Instant::now() >= deadline {
            let hint = match (&cfg.launcher, cfg.registry_rank) {
                (Some(l), Some(r)) => format!(
                    " (rank {r} of this {} job runs the registry; its address came from {}: \
                     is rank {r} running there? IPL_SERVER=host:port names it explicitly)",
                    l.kind.name(),
                    l.registry_source
                ),
                _ => String::new(),
            };
            return Err(Error::Registry(format!(
                "cannot reach the registry at {server} within {:?}: {last}{hint}",
                cfg.connect_timeout
            )));
        }
        std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// Why an attempt at reaching the registry failed.
enum Attempt {
    /// Trying again cannot help: the peer is not a registry of this pool.
    Fatal(String),
    /// The registry is not up yet, busy, or the network failed: worth another try.
    Retry(String),
}

/// One attempt at connecting to the registry at `server` and passing its handshake.
fn try_registry(
    cfg: &Config,
    server: &str,
    timeout: Duration,
) -> std::result::Result<TcpStream, Attempt> {
    let retry = |e: std::io::Error| Attempt::Retry(e.to_string());
    let addr = std::net::ToSocketAddrs::to_socket_addrs(server)
        .map_err(|e| Attempt::Retry(format!("cannot resolve: {e}")))?
        .next()
        .ok_or(Attempt::Retry("no address".into()))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(retry)?;
    s.set_nodelay(true).map_err(retry)?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(retry)?;
    let (hello, nonce) = wire::hello(wire::Purpose::Registry);
    s.write_all(&hello).map_err(retry)?;
    let mut ch = [0u8; wire::CHALLENGE_LEN];
    // The registry answers at once unless it is overloaded (it then drops its oldest pending
    // handshakes) or is no registry at all; it cannot know yet whether our secret is right.
    wire::ByDeadline {
        stream: &s,
        deadline: Instant::now() + Duration::from_secs(10),
    }
    .read_exact(&mut ch)
    .map_err(|e| {
        Attempt::Retry(format!(
            "no answer to the handshake ({e}): the registry may be overloaded, or this is not \
             an ipl registry of a compatible version"
        ))
    })?;
    // Its answer proves whether it knows our secret.
    let resp =
        wire::answer_challenge(cfg.secret.as_bytes(), &nonce, &ch).map_err(Attempt::Fatal)?;
    s.write_all(&resp).map_err(retry)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(retry)?;
    Ok(s)
}

fn join_tcp(cfg: &Config, req: JoinRequest, mut s: TcpStream) -> Result<Pool> {
    let running = req.running;
    write_frame(
        &mut s,
        &ToRegistry::Join {
            pool: req.pool,
            size: req.size,
            rank: req.rank,
            host: req.host,
            location: req.location,
            address: req.address,
            local: req.local,
            death_timeout_ms: cfg.death_timeout.as_millis() as u64,
            running: req.running,
        },
    )
    .map_err(|e| Error::io("registry join", e))?;
    let (me, members) = match read_frame::<FromRegistry>(&mut s) {
        Ok(FromRegistry::Welcome { me, members }) => (me, members),
        Ok(FromRegistry::Refused(why)) => return Err(Error::Registry(why)),
        Ok(other) => return Err(Error::Registry(format!("unexpected answer {other:?}"))),
        Err(e) => {
            return Err(Error::Registry(format!(
                "no answer to the join: {e} (the registry proved it knows the secret, so the \
                 connection was lost or the registry stopped)"
            )))
        }
    };
    // A node joining a running pool was started by a launcher without the pool's registry
    // (`ipl-run --join`), which can kill this process only if the registry can say which
    // process a member declared dead for its silence is.
    if running {
        write_frame(&mut s, &ToRegistry::Pid(std::process::id()))
            .map_err(|e| Error::io("registry join", e))?;
    }
    // Membership changes that arrive while the clock is read are applied after the welcome.
    let mut early = Vec::new();
    let clock = if crate::trace::enabled() {
        read_clock(&mut s, &mut early)?
    } else {
        crate::trace::ClockOffset::SHARED
    };
    // The registry answers every heartbeat: silence for as long as it gives this node before
    // declaring it dead means the registry is stopped or hung, and can tell this node of no
    // failure any more.
    let silence = cfg.death_timeout;
    s.set_read_timeout(Some(silence))
        .map_err(|e| Error::io("registry socket", e))?;
    let inner = Pool::make_inner(me.clone(), members, cfg, clock);
    for msg in early {
        inner.apply(msg);
    }
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let reader = s.try_clone().map_err(|e| Error::io("registry socket", e))?;
    let _ = inner.link.set(Box::new(TcpLink {
        stream: Mutex::new(s),
        stop: Mutex::new(Some(stop_tx)),
    }));
    let weak = Arc::downgrade(&inner);
    let server = reader
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    std::thread::Builder::new()
        .name(format!("ipl-pool-{}", me.rank()))
        .spawn(move || {
            let mut reader = reader;
            loop {
                let msg = read_frame::<FromRegistry>(&mut reader);
                let Some(p) = weak.upgrade() else { break };
                match msg {
                    Ok(m) => p.apply(m),
                    Err(e) => {
                        let e = match e.kind() {
                            std::io::ErrorKind::UnexpectedEof => {
                                "closed by the other side".to_string()
                            }
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                                format!(
                                    "no answer to heartbeats for {silence:?} (the registry \
                                     is stopped or hung)"
                                )
                            }
                            _ => e.to_string(),
                        };
                        p.lost_registry(format!(
                            "connection to the registry at {server} lost: {e}"
                        ));
                        break;
                    }
                }
            }
        })
        .map_err(|e| Error::io("spawn pool thread", e))?;
    let weak = Arc::downgrade(&inner);
    let every = cfg.heartbeat;
    std::thread::Builder::new()
        .name(format!("ipl-heartbeat-{}", me.rank()))
        .spawn(move || {
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(every)
            {
                let Some(p) = weak.upgrade() else { break };
                let Some(l) = p.link.get() else { break };
                if l.send(ToRegistry::Heartbeat).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| Error::io("spawn heartbeat thread", e))?;
    Ok(Pool { inner })
}

/// Round trips of the clock measurement: the fastest one gives the estimate.
const CLOCK_ROUNDS: usize = 5;

/// Measures this node's clock against the registry's over the registry connection, keeping
/// other messages that arrive meanwhile in `early`.
fn read_clock(
    s: &mut TcpStream,
    early: &mut Vec<FromRegistry>,
) -> Result<crate::trace::ClockOffset> {
    let here = crate::trace::host_name();
    let mut best: Option<crate::trace::ClockOffset> = None;
    for _ in 0..CLOCK_ROUNDS {
        let sent = crate::trace::unix_us();
        write_frame(s, &ToRegistry::Clock).map_err(|e| Error::io("registry clock", e))?;
        let estimate = loop {
            match read_frame::<FromRegistry>(s) {
                Ok(FromRegistry::Clock { unix_us, host }) => {
                    let received = crate::trace::unix_us();
                    break crate::trace::ClockOffset::from_round_trip(
                        sent,
                        unix_us,
                        received,
                        host == here,
                    );
                }
                Ok(other) => early.push(other),
                Err(e) => {
                    return Err(Error::Registry(format!(
                        "no answer to a clock reading of a traced join: {e}"
                    )))
                }
            }
        };
        if best.map_or(true, |b| estimate.rtt_us < b.rtt_us) {
            best = Some(estimate);
        }
    }
    Ok(best.unwrap_or(crate::trace::ClockOffset::SHARED))
}
