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

/// Time a connecting client has to complete the handshake and join.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most clients in the middle of their handshake at once.
const MAX_HANDSHAKES: usize = 256;

struct Shared {
    secret: Vec<u8>,
    state: Mutex<RegistryState>,
    /// Notified whenever a member is removed.
    removed: parking_lot::Condvar,
    sockets: Mutex<HashMap<(String, u32), TcpStream>>,
    stop: AtomicBool,
    handshaking: std::sync::atomic::AtomicUsize,
}

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
            handshaking: 0.into(),
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
                            shared.state.lock().remove(&pool, rank, true);
                            shared.removed.notify_all();
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
    /// `timeout`. Returns whether it emptied.
    pub fn wait_until_empty(&self, pool: &str, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut st = self.shared.state.lock();
        while st.member_count(pool) > 0 {
            if self
                .shared
                .removed
                .wait_until(&mut st, deadline)
                .timed_out()
            {
                return st.member_count(pool) == 0;
            }
        }
        true
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
        if shared.handshaking.load(Ordering::SeqCst) >= MAX_HANDSHAKES {
            tracing::warn!("registry: too many pending handshakes, dropping a connection");
            continue;
        }
        shared.handshaking.fetch_add(1, Ordering::SeqCst);
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ipl-registry-client".into())
            .spawn(move || serve_client(stream, shared2));
        if spawned.is_err() {
            shared.handshaking.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn handshake(stream: &mut TcpStream, secret: &[u8]) -> std::result::Result<(), String> {
    let mut hello = [0u8; wire::HELLO_LEN];
    stream.read_exact(&mut hello).map_err(|e| e.to_string())?;
    let (purpose, challenge, expected) = wire::accept_hello(secret, &hello)?;
    if purpose != wire::Purpose::Registry {
        return Err("a port connection reached the registry".into());
    }
    stream.write_all(&challenge).map_err(|e| e.to_string())?;
    let mut resp = [0u8; wire::RESPONSE_LEN];
    stream.read_exact(&mut resp).map_err(|e| e.to_string())?;
    wire::check_response(&expected, &resp)
}

fn serve_client(mut stream: TcpStream, shared: Arc<Shared>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let joined = handshake(&mut stream, &shared.secret)
        .and_then(|_| read_frame::<ToRegistry>(&mut stream).map_err(|e| e.to_string()));
    shared.handshaking.fetch_sub(1, Ordering::SeqCst);
    let req = match joined {
        Ok(ToRegistry::Join {
            pool,
            size,
            rank,
            host,
            location,
            address,
            death_timeout_ms,
        }) => JoinRequest {
            pool,
            size,
            rank,
            host,
            location,
            address,
            death_timeout: Duration::from_millis(death_timeout_ms.clamp(100, 3_600_000)),
        },
        Ok(other) => {
            tracing::warn!(%peer, "registry: expected a join, got {other:?}");
            return;
        }
        Err(e) => {
            if !shared.stop.load(Ordering::SeqCst) {
                tracing::warn!(%peer, "registry: dropping connection: {e}");
            }
            return;
        }
    };
    let pool = req.pool.clone();
    let (tx, rx) = crossbeam_channel::bounded(MEMBER_QUEUE);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let _ = writer.set_write_timeout(Some(Duration::from_secs(30)));
    let joined = shared.state.lock().join(req, tx);
    let me = match joined {
        Ok(me) => me,
        Err(why) => {
            tracing::warn!(%peer, "registry: join refused: {why}");
            let _ = write_frame(&mut stream, &FromRegistry::Refused(why));
            return;
        }
    };
    let rank = me.rank();
    if let Ok(s) = stream.try_clone() {
        shared.sockets.lock().insert((pool.clone(), rank), s);
    }
    let writer_thread = std::thread::Builder::new()
        .name("ipl-registry-writer".into())
        .spawn(move || {
            for msg in rx {
                if write_frame(&mut writer, &msg).is_err() {
                    break;
                }
            }
        });
    let _ = stream.set_read_timeout(None);
    let mut died = true;
    loop {
        match read_frame::<ToRegistry>(&mut stream) {
            Ok(ToRegistry::Heartbeat) => shared.state.lock().heartbeat(&pool, rank),
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
            Ok(ToRegistry::Join { .. }) => {
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
    shared.state.lock().remove(&pool, rank, died);
    shared.removed.notify_all();
    shared.sockets.lock().remove(&(pool, rank));
    let _ = stream.shutdown(std::net::Shutdown::Both);
    if let Ok(t) = writer_thread {
        let _ = t.join();
    }
}
