//! The TCP driver: one event-loop thread per node accepts connections and runs their handshakes
//! without blocking; established connections go to their receive port's poller.

use super::conn::{InConn, InStream, OutStream};
use super::links::{dup, Links};
use super::Outcome;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::node::NodeId;
use crate::receive_port::PortTable;
use crate::wire::{self, ConnectReply, ConnectRequest};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
const STOP: Token = Token(1);
/// Time a connecting peer has to finish its handshake and connect request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections in their handshake at once; beyond this new ones are dropped.
const MAX_PENDING: usize = 1024;
/// Most bytes a connection may send before its connect request is complete.
const MAX_PENDING_BYTES: usize = wire::HELLO_LEN + wire::RESPONSE_LEN + wire::MAX_SETUP_FRAME + 4;

/// The node's listening side.
pub(crate) struct NodeServer {
    addr: SocketAddr,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

enum Stage {
    Hello,
    Response([u8; 32]),
    Request,
    Replying(Option<(Arc<crate::receive_port::PortShared>, ConnectRequest)>),
}

struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    stage: Stage,
    deadline: Instant,
}

impl NodeServer {
    /// Listens on `host` (any free port) and serves connection requests for `ports`.
    pub(crate) fn start(
        host: &str,
        secret: &str,
        ports: Arc<PortTable>,
        links: Arc<Links>,
    ) -> Result<NodeServer> {
        let bind: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&(host, 0))
            .map_err(|e| Error::io(format!("resolve {host}"), e))?
            .next()
            .ok_or_else(|| Error::config("IPL_HOST", format!("'{host}' has no address")))?;
        let mut listener =
            TcpListener::bind(bind).map_err(|e| Error::io(format!("listen on {bind}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("listener address", e))?;
        let poll = Poll::new().map_err(|e| Error::io("create poller", e))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| Error::io("watch listener", e))?;
        let waker =
            Arc::new(Waker::new(poll.registry(), STOP).map_err(|e| Error::io("create waker", e))?);
        let stop = Arc::new(AtomicBool::new(false));
        let secret = secret.as_bytes().to_vec();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ipl-event-loop".into())
            .spawn(move || event_loop(poll, listener, secret, ports, links, stop2))
            .map_err(|e| Error::io("spawn event loop", e))?;
        Ok(NodeServer {
            addr,
            waker,
            stop,
            thread: Some(thread),
        })
    }

    /// The address the node's ports are reached at.
    pub(crate) fn address(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for NodeServer {
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

fn event_loop(
    mut poll: Poll,
    listener: TcpListener,
    secret: Vec<u8>,
    ports: Arc<PortTable>,
    links: Arc<Links>,
    stop: Arc<AtomicBool>,
) {
    let mut events = Events::with_capacity(256);
    let mut pending: HashMap<Token, Pending> = HashMap::new();
    let mut next = 2usize;
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
                LISTENER => loop {
                    match listener.accept() {
                        Ok((mut stream, peer)) => {
                            if pending.len() >= MAX_PENDING {
                                tracing::warn!(%peer, "too many connections in their handshake; dropped");
                                continue;
                            }
                            let _ = stream.set_nodelay(true);
                            let token = Token(next);
                            next += 1;
                            if poll
                                .registry()
                                .register(
                                    &mut stream,
                                    token,
                                    Interest::READABLE | Interest::WRITABLE,
                                )
                                .is_ok()
                            {
                                pending.insert(
                                    token,
                                    Pending {
                                        stream,
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
                },
                token => {
                    let Some(p) = pending.get_mut(&token) else {
                        continue;
                    };
                    match advance(p, &secret, &ports, &links) {
                        Ok(false) => {}
                        Ok(true) => {
                            let mut p = pending.remove(&token).expect("present");
                            let _ = poll.registry().deregister(&mut p.stream);
                            if let Stage::Replying(Some((port, req))) = p.stage {
                                let link = dup(&p.stream).ok().map(|d| {
                                    links.add_accepted(req.from.address(), p.peer.port(), d)
                                });
                                let mut conn = InConn::new(
                                    InStream::Tcp(p.stream),
                                    req.from,
                                    req.send_port,
                                    &p.inbuf,
                                );
                                conn.link = link;
                                port.attach(conn);
                            }
                        }
                        Err(why) => {
                            let mut p = pending.remove(&token).expect("present");
                            let _ = poll.registry().deregister(&mut p.stream);
                            tracing::warn!(peer = %p.peer, "dropping connection: {why}");
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        pending.retain(|_, p| {
            let keep = p.deadline > now;
            if !keep {
                tracing::warn!(peer = %p.peer, "dropping connection: handshake timed out");
            }
            keep
        });
    }
}

/// Moves a connection through its handshake. Ok(true) when it is finished (handed over or to be
/// closed after a refusal was sent), Err with a reason to drop it.
fn advance(
    p: &mut Pending,
    secret: &[u8],
    ports: &Arc<PortTable>,
    links: &Links,
) -> std::result::Result<bool, String> {
    // Read everything available.
    let mut tmp = [0u8; 4096];
    loop {
        match p.stream.read(&mut tmp) {
            Ok(0) => {
                if matches!(p.stage, Stage::Replying(_)) {
                    break;
                }
                return Err("peer closed during the handshake".into());
            }
            Ok(n) => {
                p.inbuf.extend_from_slice(&tmp[..n]);
                if p.inbuf.len() > MAX_PENDING_BYTES && !matches!(p.stage, Stage::Replying(_)) {
                    return Err("too many bytes before the connect request".into());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
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
                p.stage = Stage::Request;
            }
            Stage::Request => match wire::decode_setup::<ConnectRequest>(&p.inbuf)? {
                None => break,
                Some((req, used)) => {
                    p.inbuf.drain(..used);
                    let port = ports.lock().get(&req.port).cloned();
                    let (reply, handoff) = match port {
                        None => (ConnectReply::NoSuchPort, None),
                        Some(port) => match port.admit(&req) {
                            ConnectReply::Accepted => {
                                let paired = req
                                    .back_link
                                    .and_then(|bl| links.claim_connected(bl, req.from.address()));
                                match paired {
                                    // The channel arrives on our own socket's reverse direction;
                                    // reading starts before the sender hears the answer.
                                    Some(read) => {
                                        port.attach(InConn::new(
                                            InStream::Tcp(TcpStream::from_std(read)),
                                            req.from.clone(),
                                            req.send_port,
                                            &[],
                                        ));
                                        (ConnectReply::AcceptedOnBackLink, None)
                                    }
                                    None => (ConnectReply::Accepted, Some((port, req))),
                                }
                            }
                            other => (other, None),
                        },
                    };
                    p.out.extend_from_slice(&wire::encode_setup(&reply));
                    p.stage = Stage::Replying(handoff);
                }
            },
            _ => break,
        }
    }
    while !p.out.is_empty() {
        match p.stream.write(&p.out) {
            Ok(n) => {
                p.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(matches!(p.stage, Stage::Replying(_)))
}

/// Connects, authenticates and sends the connect request; blocking, with timeouts. Offers the
/// reverse direction of a socket `node` connected to us, if there is one (channel pairing).
pub(crate) fn connect_once(
    cfg: &Config,
    links: &Arc<Links>,
    node: &NodeId,
    req: &ConnectRequest,
) -> Result<Outcome> {
    let offer = links.take_accepted(node.address());
    let mut req = req.clone();
    req.back_link = offer.as_ref().map(|(port, _)| *port);
    let r = connect_offering(cfg, node, &req);
    match (r, offer) {
        (Ok((s, ConnectReply::Accepted)), offer) => {
            if let Some((port, back)) = offer {
                links.restore_accepted(node.address(), port, back);
            }
            s.set_nonblocking(true)
                .map_err(|e| Error::io(format!("configure socket to {node}"), e))?;
            let link = links.add_connected(node.address(), &s);
            Ok(Outcome::Connected(OutStream::Tcp(s), link))
        }
        (Ok((_, ConnectReply::AcceptedOnBackLink)), Some((_, back))) => {
            tracing::debug!(to = %node, port = req.port, "channel paired with a back link");
            Ok(Outcome::Connected(OutStream::Tcp(back), None))
        }
        (Ok((_, ConnectReply::AcceptedOnBackLink)), None) => Err(Error::Decode {
            origin: node.to_string(),
            reason: "accepted on a back link that was not offered".into(),
        }),
        (Ok((_, other)), offer) => {
            if let Some((port, back)) = offer {
                links.restore_accepted(node.address(), port, back);
            }
            Ok(Outcome::Reply(other))
        }
        (Err(e), _) => Err(e),
    }
}

fn connect_offering(
    cfg: &Config,
    node: &NodeId,
    req: &ConnectRequest,
) -> Result<(std::net::TcpStream, ConnectReply)> {
    let addr: SocketAddr = node.address().parse().map_err(|_| Error::ConnectionLost {
        peer: node.to_string(),
        reason: format!("'{}' is not a socket address", node.address()),
    })?;
    let io_err = |what: &str, e: io::Error| Error::io(format!("{what} {node}"), e);
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| io_err("connect to", e))?;
    s.set_nodelay(true)
        .map_err(|e| io_err("configure socket to", e))?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| io_err("configure socket to", e))?;
    let (hello, nonce) = wire::hello(wire::Purpose::Port);
    s.write_all(&hello)
        .map_err(|e| io_err("handshake with", e))?;
    let mut ch = [0u8; wire::CHALLENGE_LEN];
    s.read_exact(&mut ch).map_err(|e| Error::Auth {
        peer: node.to_string(),
        reason: format!("no challenge ({e}); does the node use another secret?"),
    })?;
    let resp = wire::answer_challenge(cfg.secret.as_bytes(), &nonce, &ch).map_err(|reason| {
        Error::Auth {
            peer: node.to_string(),
            reason,
        }
    })?;
    let mut out = resp.to_vec();
    out.extend_from_slice(&wire::encode_setup(req));
    s.write_all(&out)
        .map_err(|e| io_err("connect request to", e))?;
    let mut buf = Vec::new();
    let reply: ConnectReply = loop {
        let mut tmp = [0u8; 1024];
        let n = s.read(&mut tmp).map_err(|e| Error::Auth {
            peer: node.to_string(),
            reason: format!(
                "no reply to the connect request ({e}); does the node use another secret?"
            ),
        })?;
        if n == 0 {
            return Err(Error::Auth {
                peer: node.to_string(),
                reason: "connection closed before the reply; does the node use another secret?"
                    .into(),
            });
        }
        buf.extend_from_slice(&tmp[..n]);
        match wire::decode_setup::<ConnectReply>(&buf) {
            Ok(Some((r, _))) => break r,
            Ok(None) => continue,
            Err(e) => {
                return Err(Error::Decode {
                    origin: node.to_string(),
                    reason: e,
                })
            }
        }
    };
    s.set_read_timeout(None)
        .map_err(|e| io_err("configure socket to", e))?;
    Ok((s, reply))
}
