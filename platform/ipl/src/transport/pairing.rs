//! Channel pairing: the free reverse direction of a TCP connection carries a channel the other
//! way.
//!
//! A port connection uses its socket in one direction only. Then TCP cannot piggyback its
//! acknowledgements on reply data and sends them as packets of their own, which costs a request
//! and reply pair several microseconds. So when node B connects a send port to node A and A
//! already has a connection to B, B offers that socket's free direction; A accepts the offer by
//! reading the new channel from its own side of that socket. Each direction still belongs to
//! exactly one channel, so streaming and flow control are unchanged. Directions are closed
//! independently (shutdown of one half), and the socket closes with its last user.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};

/// Sockets of one node whose reverse direction may carry a channel.
#[derive(Default)]
pub(crate) struct Links {
    /// Sockets other nodes connected to us, keyed by (their node address, their local port):
    /// their reverse direction can carry one of our send ports to that node.
    accepted: Mutex<HashMap<(String, u16), TcpStream>>,
    /// Sockets we connected, keyed by our local port: (the node address we connected to, our
    /// own handle of the socket for reading its reverse direction).
    connected: Mutex<HashMap<u16, (String, TcpStream)>>,
}

/// What a [`LinkHandle`] removes when the channel that registered it ends.
enum Key {
    Accepted(String, u16),
    Connected(u16),
}

/// Keeps a socket offerable while the channel that owns its forward direction lives.
pub(crate) struct LinkHandle {
    links: Weak<Links>,
    key: Key,
}

impl Drop for LinkHandle {
    fn drop(&mut self) {
        let Some(links) = self.links.upgrade() else {
            return;
        };
        match &self.key {
            Key::Accepted(peer, port) => {
                links.accepted.lock().remove(&(peer.clone(), *port));
            }
            Key::Connected(port) => {
                links.connected.lock().remove(port);
            }
        }
    }
}

/// A second handle of the same socket.
pub(crate) fn dup(fd: &impl AsFd) -> std::io::Result<TcpStream> {
    Ok(TcpStream::from(fd.as_fd().try_clone_to_owned()?))
}

impl Links {
    /// Records a socket `peer` connected to us (its local port is `peer_port`).
    pub(crate) fn add_accepted(
        self: &Arc<Self>,
        peer: &str,
        peer_port: u16,
        s: TcpStream,
    ) -> LinkHandle {
        self.accepted.lock().insert((peer.to_owned(), peer_port), s);
        LinkHandle {
            links: Arc::downgrade(self),
            key: Key::Accepted(peer.to_owned(), peer_port),
        }
    }

    /// Records a socket we connected to `peer`.
    pub(crate) fn add_connected(self: &Arc<Self>, peer: &str, s: &TcpStream) -> Option<LinkHandle> {
        let port = s.local_addr().ok()?.port();
        let read = dup(s).ok()?;
        self.connected.lock().insert(port, (peer.to_owned(), read));
        Some(LinkHandle {
            links: Arc::downgrade(self),
            key: Key::Connected(port),
        })
    }

    /// Takes a socket `peer` connected to us, to offer its reverse direction; returns the
    /// peer's local port (the offer) and our handle of the socket.
    pub(crate) fn take_accepted(&self, peer: &str) -> Option<(u16, TcpStream)> {
        let mut a = self.accepted.lock();
        let key = a.keys().find(|(p, _)| p == peer).cloned()?;
        a.remove(&key).map(|s| (key.1, s))
    }

    /// Puts back an offer the peer did not take.
    pub(crate) fn restore_accepted(&self, peer: &str, peer_port: u16, s: TcpStream) {
        self.accepted.lock().insert((peer.to_owned(), peer_port), s);
    }

    /// Claims the reverse direction of the socket we connected from local port `port`, if it
    /// still exists and leads to `peer`.
    pub(crate) fn claim_connected(&self, port: u16, peer: &str) -> Option<TcpStream> {
        let mut c = self.connected.lock();
        match c.get(&port) {
            Some((p, _)) if p == peer => c.remove(&port).map(|(_, s)| s),
            _ => None,
        }
    }
}
