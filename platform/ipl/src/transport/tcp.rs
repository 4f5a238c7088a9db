//! The TCP driver: connections are sockets; the receiving thread reads its own sockets and the
//! sending thread writes them with gather writes from the caller's memory. A reply channel may
//! ride the free direction of a request channel's socket ([`super::pairing`]).

use super::listen::{Conn, Handoff, Inlet, Listener, HANDSHAKE_TIMEOUT};
use super::pairing::{dup, LinkHandle, Links};
use super::{dial, poll, Acceptor, Dialed, Driver, Frame, Sink, Stream};
use crate::error::{Error, Result};
use crate::node::NodeId;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The connecting side's setup frame.
#[derive(Serialize, Deserialize)]
pub(crate) struct Dial {
    /// The connecting node's address (channel pairing: whose socket a back link is).
    pub from: String,
    /// Channel pairing: the local port of a socket the accepting node connected to us, whose
    /// free reverse direction may carry this channel instead of the new socket.
    pub back_link: Option<u16>,
    /// The ports' connect request.
    pub request: Vec<u8>,
}

/// The accepting side's setup frame.
#[derive(Serialize, Deserialize)]
pub(crate) struct Reply {
    /// The acceptor took the connection.
    pub accepted: bool,
    /// ... on the offered back link; this socket closes.
    pub paired: bool,
    /// The acceptor's reply.
    pub reply: Vec<u8>,
}

/// Opens TCP connections to peers.
pub(crate) struct TcpDriver {
    secret: Vec<u8>,
    /// This node's address, as its peers know it.
    me: String,
    links: Arc<Links>,
}

/// Binds a listener on `host` (any free port).
pub(crate) fn bind(host: &str) -> Result<(mio::net::TcpListener, SocketAddr)> {
    let bind: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&(host, 0))
        .map_err(|e| Error::io(format!("resolve {host}"), e))?
        .next()
        .ok_or_else(|| Error::config("IPL_HOST", format!("'{host}' has no address")))?;
    let listener =
        mio::net::TcpListener::bind(bind).map_err(|e| Error::io(format!("listen on {bind}"), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("listener address", e))?;
    Ok((listener, addr))
}

/// The driver of a node whose listener is at `me`, and what takes the listener's connections.
pub(crate) fn driver(
    secret: &str,
    me: &str,
    acceptor: Arc<dyn Acceptor>,
) -> (TcpDriver, Arc<dyn Handoff>) {
    let links: Arc<Links> = Arc::default();
    (
        TcpDriver {
            secret: secret.as_bytes().to_vec(),
            me: me.to_owned(),
            links: links.clone(),
        },
        Arc::new(Accepting { acceptor, links }),
    )
}

/// Hands connections that passed the handshake to the acceptor.
struct Accepting {
    acceptor: Arc<dyn Acceptor>,
    links: Arc<Links>,
}

impl Handoff for Accepting {
    fn accepted(&self, conn: Conn, _peer: &str, setup: &[u8], rest: &[u8]) -> Result<(), String> {
        let Conn::Tcp(mut s) = conn else {
            return Err("not a TCP connection".into());
        };
        let dial: Dial =
            postcard::from_bytes(setup).map_err(|e| format!("bad setup frame: {e}"))?;
        let admission = self.acceptor.admit(&dial.request);
        let accepted = admission.inbox.is_some();
        // The channel arrives on our own socket's reverse direction; reading starts before the
        // sender hears the answer.
        let paired = match (&admission.inbox, dial.back_link) {
            (Some(_), Some(bl)) => self.links.claim_connected(bl, &dial.from),
            _ => None,
        };
        let reply = crate::wire::encode_setup(&Reply {
            accepted,
            paired: paired.is_some(),
            reply: admission.reply,
        });
        match (admission.inbox, paired) {
            (Some(inbox), Some(read)) => {
                inbox.attach(Box::new(TcpIn::new(
                    mio::net::TcpStream::from_std(read),
                    &[],
                    None,
                )));
                write_reply(&mut s, &reply)
            }
            (Some(inbox), None) => {
                write_reply(&mut s, &reply)?;
                let link = match (dup(&s), s.peer_addr()) {
                    (Ok(d), Ok(a)) => Some(self.links.add_accepted(&dial.from, a.port(), d)),
                    _ => None,
                };
                inbox.attach(Box::new(TcpIn::new(s, rest, link)));
                Ok(())
            }
            (None, _) => write_reply(&mut s, &reply),
        }
    }
}

/// Writes a setup frame on a fresh non-blocking socket, whose buffer it always fits.
fn write_reply(s: &mut mio::net::TcpStream, reply: &[u8]) -> Result<(), String> {
    match s.write(reply) {
        Ok(n) if n == reply.len() => Ok(()),
        Ok(_) => Err("the reply did not fit the socket's buffer".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Driver for TcpDriver {
    /// Connects, authenticates and sends the request; blocking, with timeouts. Offers the
    /// reverse direction of a socket `peer` connected to us, if there is one.
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        let offer = self.links.take_accepted(peer.address());
        let dial = Dial {
            from: self.me.clone(),
            back_link: offer.as_ref().map(|(port, _)| *port),
            request: request.to_vec(),
        };
        let restore = |offer: Option<(u16, TcpStream)>| {
            if let Some((port, back)) = offer {
                self.links.restore_accepted(peer.address(), port, back);
            }
        };
        let (s, reply) = match self.connect_offering(peer, &dial) {
            Ok(r) => r,
            Err(e) => {
                restore(offer);
                return Err(e);
            }
        };
        let io_err = |e| Error::io(format!("configure socket to {peer}"), e);
        let sink: Option<Box<dyn Sink>> = match (reply.accepted, reply.paired, offer) {
            (true, false, offer) => {
                restore(offer);
                s.set_nonblocking(true).map_err(io_err)?;
                let link = self.links.add_connected(peer.address(), &s);
                Some(Box::new(TcpOut { s, _link: link }))
            }
            (true, true, Some((_, back))) => {
                tracing::debug!(to = %peer, "channel paired with a back link");
                // The node closes this socket after its reply; wait for that, so that a
                // paired channel never leaves a socket open at either end.
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = (&s).read(&mut [0u8; 1]);
                Some(Box::new(TcpOut {
                    s: back,
                    _link: None,
                }))
            }
            (true, true, None) => {
                return Err(Error::Decode {
                    origin: peer.to_string(),
                    reason: "accepted on a back link that was not offered".into(),
                })
            }
            (false, _, offer) => {
                restore(offer);
                None
            }
        };
        Ok(Dialed {
            reply: reply.reply,
            sink,
            driver: "tcp",
        })
    }
}

impl TcpDriver {
    fn connect_offering(&self, peer: &NodeId, dial: &Dial) -> Result<(TcpStream, Reply)> {
        let addr: SocketAddr = peer.address().parse().map_err(|_| Error::ConnectionLost {
            peer: peer.to_string(),
            reason: format!("'{}' is not a socket address", peer.address()),
        })?;
        let io_err = |what: &str, e: io::Error| Error::io(format!("{what} {peer}"), e);
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| io_err("connect to", e))?;
        s.set_nodelay(true)
            .map_err(|e| io_err("configure socket to", e))?;
        s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| io_err("configure socket to", e))?;
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let setup = postcard::to_allocvec(dial).expect("setup frames always serialize");
        dial::prove(&s, &self.secret, &setup, deadline, peer)?;
        let body = dial::reply(&s, deadline, peer)?;
        let reply: Reply = postcard::from_bytes(&body).map_err(|e| Error::Decode {
            origin: peer.to_string(),
            reason: format!("bad setup frame: {e}"),
        })?;
        s.set_read_timeout(None)
            .map_err(|e| io_err("configure socket to", e))?;
        Ok((s, reply))
    }
}

/// The reading direction of a connection's socket.
pub(crate) struct TcpIn {
    s: mio::net::TcpStream,
    /// Bytes that came in with the handshake, read first.
    leftover: Vec<u8>,
    /// Keeps the socket offerable for channel pairing while this channel lives.
    _link: Option<LinkHandle>,
}

impl TcpIn {
    fn new(s: mio::net::TcpStream, leftover: &[u8], link: Option<LinkHandle>) -> Self {
        TcpIn {
            s,
            leftover: leftover.to_vec(),
            _link: link,
        }
    }
}

impl Stream for TcpIn {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if !self.leftover.is_empty() {
            let n = self.leftover.len().min(dst.len());
            dst[..n].copy_from_slice(&self.leftover[..n]);
            self.leftover.drain(..n);
            return Ok(n);
        }
        self.s.read(dst)
    }

    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) {
        fds.push(poll::entry(self.s.as_raw_fd(), libc::POLLIN));
    }

    fn wait(&mut self, d: Duration) {
        poll::wait_one(self.s.as_raw_fd(), libc::POLLIN, d);
    }

    /// Only this direction: the other may carry a paired channel. The sender learns that
    /// nobody reads once the socket's last handle closes.
    fn shutdown(&mut self) {
        let _ = self.s.shutdown(std::net::Shutdown::Read);
    }
}

/// The writing direction of a connection's socket.
struct TcpOut {
    s: TcpStream,
    /// Keeps the socket's reverse direction claimable while this channel lives.
    _link: Option<LinkHandle>,
}

impl Sink for TcpOut {
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        let mut slices = [io::IoSlice::new(&[]); 64];
        let n = frame.gather(&mut slices, offset);
        match self.s.write_vectored(&slices[..n]) {
            Ok(w) => Ok(w as u64),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) -> bool {
        fds.push(poll::entry(self.s.as_raw_fd(), libc::POLLOUT));
        true
    }

    fn wait(&mut self, d: Duration) {
        poll::wait_one(self.s.as_raw_fd(), libc::POLLOUT, d);
    }

    fn close(self: Box<Self>, close: &[u8]) {
        let _ = self.s.set_nonblocking(false);
        let _ = self.s.set_write_timeout(Some(Duration::from_secs(1)));
        let mut s = &self.s;
        let _ = s.write_all(close);
        let _ = self.s.shutdown(std::net::Shutdown::Write);
    }
}

/// Starts listening for a node: the listener and its driver.
pub(crate) fn listener(
    host: &str,
    secret: &str,
    acceptor: Arc<dyn Acceptor>,
) -> Result<(TcpDriver, String, Inlet)> {
    let (l, addr) = bind(host)?;
    let me = addr.to_string();
    let (d, handoff) = driver(secret, &me, acceptor);
    Ok((d, me, (Listener::Tcp(l), handoff)))
}
