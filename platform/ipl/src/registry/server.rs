//! The registry as a TCP service.

use super::proto::{read_frame, write_frame, FromRegistry, ToRegistry};
use super::state::{JoinRequest, RegistryState, MEMBER_QUEUE};
use crate::error::{Error, Result};
use crate::wire;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Time a connecting client has, in all, to complete the handshake and its join (a real node
/// needs a few round trips).
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Most clients in the middle of their handshake at once. When all are taken, the oldest is
/// dropped for the newcomer: clients that never finish cannot keep real nodes, which finish
/// within milliseconds, from joining.
const MAX_HANDSHAKES: usize = 256;

/// Warnings about clients that fail their handshake, which anybody can cause.
static WARNINGS: crate::throttle::Throttle = crate::throttle::Throttle::new();

/// Clients in their handshake, oldest first (ids grow with time).
#[derive(Default)]
struct Handshakes {
    next: u64,
    open: std::collections::BTreeMap<u64, (std::time::Instant, SocketAddr, TcpStream)>,
}

struct Shared {
    secret: Vec<u8>,
    state: Mutex<RegistryState>,
    /// Notified whenever a member is removed.
    removed: parking_lot::Condvar,
    sockets: Mutex<HashMap<(String, u32), TcpStream>>,
    stop: AtomicBool,
    handshakes: Mutex<Handshakes>,
    /// Who hears of members declared dead for their silence, by pool (see
    /// [`RegistryServer::watch_silent`] and [`ToRegistry::Watch`]).
    silent: Mutex<Vec<(String, SilentWatcher)>>,
    /// The last [`SILENT_QUEUE`] members declared dead for their silence, of any pool, with
    /// their process ids: a watcher that connects later hears of those of its pool first, so
    /// that a member which stops before its launcher's watch is in place is not missed.
    /// Locked after `silent`, never before.
    silenced: Mutex<std::collections::VecDeque<(String, u32, Option<u32>)>>,
    /// The process id each member that sent one ([`ToRegistry::Pid`]) runs as.
    pids: Mutex<HashMap<(String, u32), u32>>,
    /// The connections of watchers, by connection id, to close when the registry stops.
    watchers: Mutex<HashMap<u64, TcpStream>>,
}

/// Who hears of members declared dead for their silence.
enum SilentWatcher {
    /// In this process ([`RegistryServer::watch_silent`]): their ranks.
    Local(crossbeam_channel::Sender<u32>),
    /// Over a connection ([`ToRegistry::Watch`]): the queue of its messages.
    Remote(crossbeam_channel::Sender<FromRegistry>),
}

impl SilentWatcher {
    /// Tells of `rank` (process `pid`); false once the watcher is gone.
    fn tell(&self, rank: u32, pid: Option<u32>) -> bool {
        use crossbeam_channel::TrySendError::Disconnected;
        match self {
            SilentWatcher::Local(tx) => !matches!(tx.try_send(rank), Err(Disconnected(_))),
            SilentWatcher::Remote(tx) => !matches!(
                tx.try_send(FromRegistry::Silent { rank, pid }),
                Err(Disconnected(_))
            ),
        }
    }
}

/// Most watcher connections served at once: each holds two threads.
const MAX_WATCHERS: usize = 64;

/// Silent members a watcher may leave unread before newer ones are dropped.
const SILENT_QUEUE: usize = 1024;

/// A running registry service. Dropping it stops the service and disconnects every node.
pub struct RegistryServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop_tx: Option<crossbeam_channel::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl RegistryServer {
    /// Starts a registry listening on `bind` (e.g. `127.0.0.1:0`) that admits only nodes that
    /// know `secret`.
    pub fn start(bind: &str, secret: &str) -> Result<RegistryServer> {
        if secret.is_empty() {
            return Err(Error::config(
                "IPL_SECRET",
                "the registry needs a non-empty pool secret: it admits only nodes that know it",
            ));
        }
        let listener =
            TcpListener::bind(bind).map_err(|e| Error::io(format!("registry bind {bind}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("registry address", e))?;
        let shared = Arc::new(Shared {
            secret: secret.as_bytes().to_vec(),
            state: Mutex::new(RegistryState::default()),
            removed: parking_lot::Condvar::new(),
            sockets: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            handshakes: Mutex::new(Handshakes::default()),
            silent: Mutex::new(Vec::new()),
            silenced: Mutex::new(std::collections::VecDeque::new()),
            pids: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
        });
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ipl-registry-accept".into())
                .spawn(move || accept_loop(listener, shared))
                .map_err(|e| Error::io("spawn registry thread", e))?
        };
        let reaper = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ipl-registry-reaper".into())
                .spawn(move || {
                    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                        stop_rx.recv_timeout(Duration::from_millis(200))
                    {
                        let expired = shared.state.lock().expired();
                        for (pool, rank) in expired {
                            let pid = shared.pids.lock().get(&(pool.clone(), rank)).copied();
                            shared.state.lock().remove(&pool, rank, true);
                            shared.removed.notify_all();
                            {
                                let mut watchers = shared.silent.lock();
                                let mut silenced = shared.silenced.lock();
                                if silenced.len() == SILENT_QUEUE {
                                    silenced.pop_front();
                                }
                                silenced.push_back((pool.clone(), rank, pid));
                                drop(silenced);
                                watchers.retain(|(p, w)| *p != pool || w.tell(rank, pid));
                            }
                            if let Some(s) = shared.sockets.lock().remove(&(pool, rank)) {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                        }
                    }
                })
                .map_err(|e| Error::io("spawn registry thread", e))?
        };
        tracing::info!(%addr, "registry listening");
        Ok(RegistryServer {
            addr,
            shared,
            stop_tx: Some(stop_tx),
            threads: vec![acceptor, reaper],
        })
    }

    /// The address nodes reach the registry at.
    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until pool `pool` has no members left (every node left or died), for at most
    /// `timeout` (a timeout beyond what the clock can count waits as long as it takes).
    /// Returns whether it emptied.
    pub fn wait_until_empty(&self, pool: &str, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut st = self.shared.state.lock();
        while st.member_count(pool) > 0 {
            match deadline {
                Some(deadline) => {
                    if self
                        .shared
                        .removed
                        .wait_until(&mut st, deadline)
                        .timed_out()
                    {
                        return st.member_count(pool) == 0;
                    }
                }
                None => self.shared.removed.wait(&mut st),
            }
        }
        true
    }

    /// The ranks of `pool` declared dead from now on because their heartbeats stopped for
    /// their death timeout (not those whose connection closed): processes that are stopped
    /// or hung, which the pool has given up on. Bounded; a watcher that stops reading loses
    /// ranks rather than growing memory.
    pub fn watch_silent(&self, pool: &str) -> crossbeam_channel::Receiver<u32> {
        let (tx, rx) = crossbeam_channel::bounded(SILENT_QUEUE);
        self.shared
            .silent
            .lock()
            .push((pool.to_owned(), SilentWatcher::Local(tx)));
        rx
    }

    /// Runs until the process is killed (for the stand-alone server).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.stop_tx.take();
        // Wake the blocking accept so the acceptor sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        for (_, s) in self.shared.sockets.lock().drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, s) in self.shared.watchers.lock().drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, (_, _, s)) in std::mem::take(&mut self.shared.handshakes.lock().open) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let Ok(watch) = stream.try_clone() else {
            continue;
        };
        let id = {
            let mut h = shared.handshakes.lock();
            if h.open.len() >= MAX_HANDSHAKES {
                if let Some((_, (since, old, s))) = h.open.pop_first() {
                    WARNINGS.warn(|| {
                        format!(
                            "registry: {MAX_HANDSHAKES} handshakes pending; dropping the \
                             oldest, from {old} ({:.1?} ago), for a new one from {peer}",
                            since.elapsed()
                        )
                    });
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
            let id = h.next;
            h.next += 1;
            h.open.insert(id, (std::time::Instant::now(), peer, watch));
            id
        };
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ipl-registry-client".into())
            .spawn(move || serve_client(stream, peer, id, shared2));
        if let Err(e) = spawned {
            tracing::warn!(%peer, "registry: cannot start a thread for a client: {e}");
            shared.handshakes.lock().open.remove(&id);
        }
    }
}

/// Proves the secret both ways and reads the join, all before `deadline`.
fn handshake(
    stream: &TcpStream,
    secret: &[u8],
    deadline: std::time::Instant,
) -> std::result::Result<ToRegistry, String> {
    let mut r = wire::ByDeadline { stream, deadline };
    let mut w = stream;
    let mut hello = [0u8; wire::HELLO_LEN];
    r.read_exact(&mut hello)
        .map_err(|e| format!("no hello: {e}"))?;
    let (purpose, challenge, expected) = wire::accept_hello(secret, &hello)?;
    if purpose != wire::Purpose::Registry {
        return Err("a port connection reached the registry".into());
    }
    w.write_all(&challenge)
        .map_err(|e| format!("cannot send the challenge: {e}"))?;
    let mut resp = [0u8; wire::RESPONSE_LEN];
    r.read_exact(&mut resp)
        .map_err(|e| format!("no answer to the challenge: {e}"))?;
    wire::check_response(&expected, &resp)?;
    read_frame::<ToRegistry>(&mut r).map_err(|e| format!("no join: {e}"))
}

fn serve_client(mut stream: TcpStream, peer: SocketAddr, id: u64, shared: Arc<Shared>) {
    let _ = stream.set_write_timeout(Some(HANDSHAKE_DEADLINE));
    let _ = stream.set_nodelay(true);
    let joined = handshake(
        &stream,
        &shared.secret,
        std::time::Instant::now() + HANDSHAKE_DEADLINE,
    );
    // Gone from the table: evicted for a newer handshake while it waited.
    let evicted = shared.handshakes.lock().open.remove(&id).is_none();
    let joined = match joined {
        Err(e) if evicted => Err(format!(
            "{e} (dropped for a newer handshake while {MAX_HANDSHAKES} were pending)"
        )),
        other => other,
    };
    let req = match joined {
        Ok(ToRegistry::Join {
            pool,
            size,
            rank,
            host,
            location,
            address,
            local,
            death_timeout_ms,
            running,
        }) => JoinRequest {
            pool,
            size,
            rank,
            host,
            location,
            address,
            local,
            death_timeout: Duration::from_millis(death_timeout_ms.clamp(100, 3_600_000)),
            running,
        },
        Ok(ToRegistry::Watch { pool }) => {
            serve_watcher(stream, peer, id, pool, &shared);
            return;
        }
        Ok(other) => {
            tracing::warn!(%peer, "registry: expected a join, got {other:?}");
            return;
        }
        Err(e) => {
            if !shared.stop.load(Ordering::SeqCst) {
                WARNINGS.warn(|| format!("registry: dropping the connection from {peer}: {e}"));
            }
            return;
        }
    };
    let pool = req.pool.clone();
    let (tx, rx) = crossbeam_channel::bounded(MEMBER_QUEUE);
    let replies = tx.clone();
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let _ = writer.set_write_timeout(Some(Duration::from_secs(30)));
    let admitted = shared.state.lock().admit(req, tx);
    let admitted = match admitted {
        Ok(a) => a,
        Err(why) => {
            tracing::warn!(%peer, "registry: join refused: {why}");
            let _ = write_frame(&mut stream, &FromRegistry::Refused(why));
            return;
        }
    };
    // The node's answer is written before the others hear of it: a member that sees the join
    // may end at once, and with it the process this registry runs in, which must not leave
    // the node without its answer. What the pool sends the node meanwhile waits in its queue,
    // which the writer below starts on once the answer is out.
    let answered = write_frame(&mut writer, &admitted.welcome).is_ok();
    shared.state.lock().announce(&admitted);
    if !answered {
        // A node that cannot be answered is gone: its read below fails at once, and it is
        // removed as a node that died.
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let me = admitted.id;
    let rank = me.rank();
    if let Ok(s) = stream.try_clone() {
        shared.sockets.lock().insert((pool.clone(), rank), s);
    }
    let writer_thread = spawn_writer("ipl-registry-writer", writer, rx);
    let _ = stream.set_read_timeout(None);
    let mut died = true;
    loop {
        match read_frame::<ToRegistry>(&mut stream) {
            Ok(ToRegistry::Heartbeat) => {
                shared.state.lock().heartbeat(&pool, rank);
                // A full queue means the node is not reading: it is removed as unresponsive
                // when the next event finds the queue full.
                let _ = replies.try_send(FromRegistry::Alive);
            }
            Ok(ToRegistry::Elect(name)) => {
                let mut st = shared.state.lock();
                st.heartbeat(&pool, rank);
                st.elect(&pool, rank, &name);
            }
            Ok(ToRegistry::Lookup(name)) => {
                let mut st = shared.state.lock();
                st.heartbeat(&pool, rank);
                st.lookup(&pool, rank, &name);
            }
            Ok(ToRegistry::Leave) => {
                died = false;
                break;
            }
            Ok(ToRegistry::Clock) => {
                let _ = replies.try_send(FromRegistry::Clock {
                    unix_us: crate::trace::unix_us(),
                    host: crate::trace::host_name(),
                });
            }
            Ok(ToRegistry::Pid(pid)) => {
                shared.pids.lock().insert((pool.clone(), rank), pid);
            }
            Ok(ToRegistry::Join { .. } | ToRegistry::Watch { .. }) => {
                tracing::warn!(node = %me, "registry: second join on one connection");
                break;
            }
            Err(e) => {
                if !shared.stop.load(Ordering::SeqCst) {
                    tracing::debug!(node = %me, "registry connection ended: {e}");
                }
                break;
            }
        }
    }
    // The writer ends once every sender of its queue is gone.
    drop(replies);
    shared.state.lock().remove(&pool, rank, died);
    shared.removed.notify_all();
    shared.pids.lock().remove(&(pool.clone(), rank));
    shared.sockets.lock().remove(&(pool, rank));
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(t) = writer_thread {
        let _ = t.join();
    }
}

/// Starts the thread that writes `rx`'s messages to `stream` in order, until the queue's
/// senders are all gone or a write fails (the client is gone; its reader notices).
fn spawn_writer(
    name: &str,
    mut stream: TcpStream,
    rx: crossbeam_channel::Receiver<FromRegistry>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for msg in rx {
                if write_frame(&mut stream, &msg).is_err() {
                    break;
                }
            }
        })
}

/// Serves a launcher watching `pool` for members declared dead for their silence
/// ([`ToRegistry::Watch`]) until it goes or the registry stops.
fn serve_watcher(mut stream: TcpStream, peer: SocketAddr, id: u64, pool: String, shared: &Shared) {
    {
        let mut watchers = shared.watchers.lock();
        if watchers.len() >= MAX_WATCHERS {
            drop(watchers);
            let why = format!("the registry serves {MAX_WATCHERS} watchers already");
            tracing::warn!(%peer, %pool, "registry: watch refused: {why}");
            let _ = write_frame(&mut stream, &FromRegistry::Refused(why));
            return;
        }
        let Ok(s) = stream.try_clone() else { return };
        watchers.insert(id, s);
    }
    // Listed after the registry's drop closed every watcher: nobody would close this one.
    if shared.stop.load(Ordering::SeqCst) {
        shared.watchers.lock().remove(&id);
        return;
    }
    // Room for the answer and every member of the history.
    let (tx, rx) = crossbeam_channel::bounded(SILENT_QUEUE + 1);
    {
        // Queued before the watcher is listed, so the answer goes out before any member, and
        // the members declared silent so far, so that none is missed or told twice: under
        // the lock the reaper tells the listed watchers and extends the history with.
        let mut watchers = shared.silent.lock();
        let _ = tx.try_send(FromRegistry::Watching);
        for (_, rank, pid) in shared.silenced.lock().iter().filter(|(p, ..)| *p == pool) {
            let _ = tx.try_send(FromRegistry::Silent {
                rank: *rank,
                pid: *pid,
            });
        }
        watchers.push((pool.clone(), SilentWatcher::Remote(tx.clone())));
    }
    let writer = stream.try_clone().map(|w| {
        let _ = w.set_write_timeout(Some(Duration::from_secs(30)));
        spawn_writer("ipl-registry-watch", w, rx)
    });
    let _ = stream.set_read_timeout(None);
    tracing::debug!(%peer, %pool, "registry: watcher connected");
    loop {
        match read_frame::<ToRegistry>(&mut stream) {
            Ok(ToRegistry::Heartbeat) => {
                let _ = tx.try_send(FromRegistry::Alive);
            }
            Ok(other) => {
                tracing::warn!(%peer, %pool, "registry: a watcher sent {other:?}");
                break;
            }
            Err(_) => break,
        }
    }
    // The writer ends once every sender of its queue is gone: ours and the listed one.
    shared.silent.lock().retain(|(_, w)| match w {
        SilentWatcher::Remote(t) => !t.same_channel(&tx),
        SilentWatcher::Local(_) => true,
    });
    drop(tx);
    shared.watchers.lock().remove(&id);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(Ok(t)) = writer {
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to `server` past its handshake, as a node of `pool` makes one.
    fn connect(server: &RegistryServer, pool: &str) -> TcpStream {
        let cfg = crate::Config::tcp(pool, 1, server.address().to_string(), "s");
        crate::pool::connect_registry(&cfg).unwrap()
    }

    fn join(s: &mut TcpStream, pool: &str) {
        let join = ToRegistry::Join {
            pool: pool.into(),
            size: Some(1),
            rank: Some(0),
            host: "h".into(),
            location: "l".into(),
            address: "127.0.0.1:1".into(),
            local: crate::node::Reach::default(),
            death_timeout_ms: 100,
            running: false,
        };
        write_frame(s, &join).unwrap();
        assert!(matches!(
            read_frame::<FromRegistry>(s).unwrap(),
            FromRegistry::Welcome { .. }
        ));
    }

    #[test]
    fn a_watcher_hears_of_a_silent_member_with_its_process() {
        let server = RegistryServer::start("127.0.0.1:0", "s").unwrap();
        let mut watcher = connect(&server, "p");
        write_frame(&mut watcher, &ToRegistry::Watch { pool: "p".into() }).unwrap();
        assert!(matches!(
            read_frame::<FromRegistry>(&mut watcher).unwrap(),
            FromRegistry::Watching
        ));
        // A member of another pool is none of the watcher's business.
        let mut other = connect(&server, "q");
        join(&mut other, "q");
        let mut member = connect(&server, "p");
        join(&mut member, "p");
        write_frame(&mut member, &ToRegistry::Pid(4242)).unwrap();
        // No heartbeat: silent after its death timeout (100 ms), noticed within the reaper's
        // round (200 ms); the read times out after 10 s.
        watcher
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        match read_frame::<FromRegistry>(&mut watcher).unwrap() {
            FromRegistry::Silent { rank, pid } => assert_eq!((rank, pid), (0, Some(4242))),
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn a_watcher_that_comes_later_hears_first_of_its_pools_members_silent_so_far() {
        let server = RegistryServer::start("127.0.0.1:0", "s").unwrap();
        let (in_p, in_q) = (server.watch_silent("p"), server.watch_silent("q"));
        // Silent in turn (no heartbeat: dead after 100 ms): q's member first, so that a
        // history not sorted by pool would name it first.
        let mut other = connect(&server, "q");
        join(&mut other, "q");
        assert_eq!(in_q.recv_timeout(Duration::from_secs(10)), Ok(0));
        let mut member = connect(&server, "p");
        join(&mut member, "p");
        write_frame(&mut member, &ToRegistry::Pid(4242)).unwrap();
        assert_eq!(in_p.recv_timeout(Duration::from_secs(10)), Ok(0));
        let mut watcher = connect(&server, "p");
        write_frame(&mut watcher, &ToRegistry::Watch { pool: "p".into() }).unwrap();
        watcher
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert!(matches!(
            read_frame::<FromRegistry>(&mut watcher).unwrap(),
            FromRegistry::Watching
        ));
        match read_frame::<FromRegistry>(&mut watcher).unwrap() {
            FromRegistry::Silent { rank, pid } => assert_eq!((rank, pid), (0, Some(4242))),
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn watchers_past_the_limit_are_refused_naming_it() {
        let server = RegistryServer::start("127.0.0.1:0", "s").unwrap();
        let mut kept = Vec::new();
        for i in 0..=MAX_WATCHERS {
            let mut w = connect(&server, "p");
            write_frame(&mut w, &ToRegistry::Watch { pool: "p".into() }).unwrap();
            match read_frame::<FromRegistry>(&mut w).unwrap() {
                FromRegistry::Watching if i < MAX_WATCHERS => kept.push(w),
                FromRegistry::Refused(why) if i == MAX_WATCHERS => {
                    assert!(why.contains(&format!("{MAX_WATCHERS} watchers")), "{why}")
                }
                m => panic!("watcher {i}: {m:?}"),
            }
        }
        // One that goes makes room for another.
        drop(kept.pop());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut w = connect(&server, "p");
            write_frame(&mut w, &ToRegistry::Watch { pool: "p".into() }).unwrap();
            match read_frame::<FromRegistry>(&mut w).unwrap() {
                FromRegistry::Watching => break,
                // The registry may not have seen the other go yet.
                FromRegistry::Refused(_) if std::time::Instant::now() < deadline => continue,
                m => panic!("{m:?}"),
            }
        }
    }

    #[test]
    fn waiting_beyond_what_the_clock_can_count_for_an_empty_pool_returns_at_once() {
        let server = RegistryServer::start("127.0.0.1:0", "s").unwrap();
        // The deadline used to be the clock plus the timeout, which overflowed.
        assert!(server.wait_until_empty("nobody", Duration::MAX));
        assert!(server.wait_until_empty("nobody", Duration::ZERO));
    }
}
