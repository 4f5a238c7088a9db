//! A node's listening side: one event-loop thread accepts connections on every listener of the
//! node's drivers (a TCP socket, a Unix socket) and runs their handshakes without blocking,
//! then hands each connection that proved the pool secret, with its setup frame, to the driver
//! it came in through.

use crate::error::{Error, Result};
use crate::throttle::Throttle;
use crate::wire;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const STOP: Token = Token(0);
/// Tokens below this name listeners; connections count up from it.
const FIRST_CONN: usize = 1 << 16;
/// Time a connecting peer has, in all, to finish its handshake and setup frame.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections in their handshake at once. When all are taken, the oldest is dropped for
/// the newcomer: connections that never finish cannot keep real peers, which finish within
/// milliseconds, from connecting.
const MAX_PENDING: usize = 1024;
/// Most bytes a connection may send before its setup frame is complete.
const MAX_PENDING_BYTES: usize = wire::HELLO_LEN + wire::RESPONSE_LEN + wire::MAX_SETUP_FRAME + 4;

/// Warnings about connections that fail their handshake, which anybody can cause.
pub(crate) static WARNINGS: Throttle = Throttle::new();

/// A listening socket.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// An accepted connection.
pub(crate) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Conn::Tcp(s) => s,
            Conn::Unix(s) => s,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(b),
            Conn::Unix(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(b),
            Conn::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A listener with the driver that takes its connections.
pub(crate) type Inlet = (Listener, Arc<dyn Handoff>);

/// What a driver does with a connection that passed the handshake.
pub(crate) trait Handoff: Send + Sync {
    /// Takes `conn` (non-blocking), whose setup frame body is `setup` and which sent `rest`
    /// after it; writes the reply. `Err(reason)` drops the connection (and logs the reason).
    fn accepted(&self, conn: Conn, peer: &str, setup: &[u8], rest: &[u8]) -> Result<(), String>;
}

/// The node's listening thread; stops when dropped.
pub(crate) struct Listening {
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

enum Stage {
    Hello,
    Response([u8; 32]),
    Setup,
}

struct Pending {
    conn: Conn,
    listener: usize,
    peer: String,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    stage: Stage,
    deadline: Instant,
}

/// Starts the event loop over `listeners`, each with the driver that takes its connections.
pub(crate) fn start(listeners: Vec<Inlet>, secret: &str) -> Result<Listening> {
    let poll = Poll::new().map_err(|e| Error::io("create poller", e))?;
    let mut all = Vec::new();
    for (i, (mut l, h)) in listeners.into_iter().enumerate() {
        let token = Token(i + 1);
        let r = match &mut l {
            Listener::Tcp(l) => poll.registry().register(l, token, Interest::READABLE),
            Listener::Unix(l) => poll.registry().register(l, token, Interest::READABLE),
        };
        r.map_err(|e| Error::io("watch listener", e))?;
        all.push((l, h));
    }
    let waker =
        Arc::new(Waker::new(poll.registry(), STOP).map_err(|e| Error::io("create waker", e))?);
    let stop = Arc::new(AtomicBool::new(false));
    let secret = secret.as_bytes().to_vec();
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ipl-event-loop".into())
        .spawn(move || event_loop(poll, all, secret, stop2))
        .map_err(|e| Error::io("spawn event loop", e))?;
    Ok(Listening {
        waker,
        stop,
        thread: Some(thread),
    })
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

fn accept(l: &Listener) -> io::Result<(Conn, String)> {
    match l {
        Listener::Tcp(l) => l.accept().map(|(s, a)| {
            let _ = s.set_nodelay(true);
            (Conn::Tcp(s), a.to_string())
        }),
        Listener::Unix(l) => l
            .accept()
            .map(|(s, _)| (Conn::Unix(s), "a process of this host".to_string())),
    }
}

fn event_loop(mut poll: Poll, listeners: Vec<Inlet>, secret: Vec<u8>, stop: Arc<AtomicBool>) {
    let mut events = Events::with_capacity(256);
    let mut pending: HashMap<Token, Pending> = HashMap::new();
    let mut next = FIRST_CONN;
    while !stop.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_secs(1))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("event loop poll failed: {e}");
                return;
            }
        }
        for ev in events.iter() {
            match ev.token() {
                STOP => {}
                Token(t) if t < FIRST_CONN => {
                    let i = t - 1;
                    loop {
                        match accept(&listeners[i].0) {
                            Ok((mut conn, peer)) => {
                                if pending.len() >= MAX_PENDING {
                                    // The oldest has the earliest deadline.
                                    let oldest = pending
                                        .iter()
                                        .min_by_key(|(_, p)| p.deadline)
                                        .map(|(t, _)| *t);
                                    if let Some(mut old) = oldest.and_then(|t| pending.remove(&t)) {
                                        let _ = poll.registry().deregister(old.conn.source());
                                        WARNINGS.warn(|| {
                                            format!(
                                                "{MAX_PENDING} connections in their handshake; \
                                                 dropping the oldest, from {}, for a new one \
                                                 from {peer}",
                                                old.peer
                                            )
                                        });
                                    }
                                }
                                let token = Token(next);
                                next += 1;
                                if poll
                                    .registry()
                                    .register(
                                        conn.source(),
                                        token,
                                        Interest::READABLE | Interest::WRITABLE,
                                    )
                                    .is_ok()
                                {
                                    pending.insert(
                                        token,
                                        Pending {
                                            conn,
                                            listener: i,
                                            peer,
                                            inbuf: Vec::new(),
                                            out: Vec::new(),
                                            stage: Stage::Hello,
                                            deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                                        },
                                    );
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) => {
                                tracing::warn!("accept failed: {e}");
                                break;
                            }
                        }
                    }
                }
                token => {
                    let Some(p) = pending.get_mut(&token) else {
                        continue;
                    };
                    match advance(p, &secret) {
                        Ok(None) => {}
                        Ok(Some(used)) => {
                            let mut p = pending.remove(&token).expect("present");
                            let _ = poll.registry().deregister(p.conn.source());
                            let handoff = &listeners[p.listener].1;
                            let setup = &p.inbuf[4..used];
                            let rest = &p.inbuf[used..];
                            if let Err(why) = handoff.accepted(p.conn, &p.peer, setup, rest) {
                                WARNINGS.warn(|| {
                                    format!("dropping the connection from {}: {why}", p.peer)
                                });
                            }
                        }
                        Err(why) => {
                            let mut p = pending.remove(&token).expect("present");
                            let _ = poll.registry().deregister(p.conn.source());
                            WARNINGS
                                .warn(|| format!("dropping the connection from {}: {why}", p.peer));
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        pending.retain(|_, p| {
            let keep = p.deadline > now;
            if !keep {
                WARNINGS.warn(|| {
                    format!(
                        "dropping the connection from {}: no handshake within {HANDSHAKE_TIMEOUT:?}",
                        p.peer
                    )
                });
            }
            keep
        });
    }
}

/// Moves a connection through its handshake. `Ok(Some(n))` once its setup frame is complete:
/// the frame (with its length prefix) is `inbuf[..n]`. `Err` with a reason to drop it.
fn advance(p: &mut Pending, secret: &[u8]) -> std::result::Result<Option<usize>, String> {
    let mut tmp = [0u8; 4096];
    loop {
        match p.conn.read(&mut tmp) {
            Ok(0) => return Err("peer closed during the handshake".into()),
            Ok(n) => {
                p.inbuf.extend_from_slice(&tmp[..n]);
                if p.inbuf.len() > MAX_PENDING_BYTES {
                    return Err("too many bytes before the setup frame".into());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut done = None;
    loop {
        match &p.stage {
            Stage::Hello if p.inbuf.len() >= wire::HELLO_LEN => {
                let (purpose, challenge, expected) =
                    wire::accept_hello(secret, &p.inbuf[..wire::HELLO_LEN])?;
                if purpose != wire::Purpose::Port {
                    return Err("a registry client reached a node".into());
                }
                p.inbuf.drain(..wire::HELLO_LEN);
                p.out.extend_from_slice(&challenge);
                p.stage = Stage::Response(expected);
            }
            Stage::Response(expected) if p.inbuf.len() >= wire::RESPONSE_LEN => {
                wire::check_response(expected, &p.inbuf[..wire::RESPONSE_LEN])?;
                p.inbuf.drain(..wire::RESPONSE_LEN);
                p.stage = Stage::Setup;
            }
            Stage::Setup => {
                done = wire::setup_frame(&p.inbuf)?.map(|(_, used)| used);
                break;
            }
            _ => break,
        }
    }
    while !p.out.is_empty() {
        match p.conn.write(&p.out) {
            Ok(n) => {
                p.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(done)
}
