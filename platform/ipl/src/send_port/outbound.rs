//! A send port's outbound connections ([`SendState`]), and the hold on them that a message
//! keeps while it is written and sent ([`SendGuard`]): what a
//! [`WriteMessage`](crate::WriteMessage) sends through, below the port that hands messages
//! out.

use crate::error::{Error, Result};
use crate::node::NodeId;
use crate::node_state::IbisInner;
use crate::port_type::PortType;
use crate::quick_lock::{QuickMutex, QuickMutexGuard};
use crate::transport::{writer, Sink};
use crate::wire::{FrameKind, Header};
use std::sync::Arc;

/// One outbound connection of a send port.
pub(super) struct OutConn {
    pub(super) target: NodeId,
    pub(super) port: String,
    pub(super) sink: Box<dyn Sink>,
    /// The largest message the receiving node accepts.
    pub(super) max_message: u64,
    /// The driver that carries it.
    pub(super) driver: &'static str,
}

impl OutConn {
    /// Sends a close frame and releases the connection.
    pub(super) fn close(self) {
        let h = Header {
            kind: FrameKind::Close,
            big_endian: false,
            len: 0,
            deliver_at_ns: 0,
        }
        .encode();
        self.sink.close(&h);
    }
}

/// A send port's connections, and the buffer its next message is written into.
pub(crate) struct SendState {
    pub(super) conns: Vec<OutConn>,
    pub(super) scratch: Vec<u8>,
}

/// What a send port's handle and the message being written share.
pub(crate) struct SendShared {
    pub(super) id: u64,
    pub(super) ty: PortType,
    pub(super) ibis: Arc<IbisInner>,
    pub(super) state: QuickMutex<SendState>,
}

/// Exclusive use of a send port while one message is written.
pub(crate) struct SendGuard<'a> {
    pub(super) guard: QuickMutexGuard<'a, SendState>,
    pub(super) port: &'a SendShared,
}

impl SendGuard<'_> {
    pub(crate) fn send(
        &mut self,
        parts: &[&[u8]],
        owned: &[Option<bytes::Bytes>],
        len: u64,
        big_endian: bool,
    ) -> Result<()> {
        if self.guard.conns.is_empty() {
            return Err(Error::NotConnected(self.port.id));
        }
        // Refused here rather than dropped by the receiver, which would leave both sides
        // waiting: the receiver for a message that never comes, the sender for an answer.
        let ibis = &self.port.ibis;
        if len > ibis.cfg.max_message {
            return Err(Error::MessageTooLarge {
                len,
                limit: ibis.cfg.max_message,
                whose: format!("this node, {}", ibis.id),
            });
        }
        if let Some(c) = self.guard.conns.iter().find(|c| len > c.max_message) {
            return Err(Error::MessageTooLarge {
                len,
                limit: c.max_message,
                whose: format!("receive port '{}' on {}", c.port, c.target),
            });
        }
        let pool = &self.port.ibis.pool;
        let conns = &mut self.guard.conns;
        let sent = if let [c] = &mut conns[..] {
            let rank = c.target.rank();
            writer::send(&mut [&mut *c.sink], parts, owned, len, big_endian, &|_| {
                pool.inner.is_gone_rank(rank)
            })
        } else {
            let ranks: smallvec::SmallVec<[u32; 4]> =
                conns.iter().map(|c| c.target.rank()).collect();
            let mut sinks: smallvec::SmallVec<[&mut (dyn Sink + 'static); 4]> =
                conns.iter_mut().map(|c| &mut *c.sink).collect();
            writer::send(&mut sinks, parts, owned, len, big_endian, &|i| {
                pool.inner.is_gone_rank(ranks[i])
            })
        };
        let failed = match sent {
            Ok(()) => return Ok(()),
            Err(f) => f,
        };
        // A broken connection stays broken; drop it so later messages reach the others. The
        // others received the whole message.
        let (first, reason) = failed[0].clone();
        let peer = conns[first].target.clone();
        let mut i = 0;
        conns.retain(|_| {
            let keep = !failed.iter().any(|(f, _)| *f == i);
            i += 1;
            keep
        });
        if !pool.is_alive(&peer) {
            return Err(pool.check_alive(&[peer]).expect_err("peer is gone"));
        }
        Err(Error::ConnectionLost {
            peer: peer.to_string(),
            reason,
        })
    }

    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        // Keep a moderate buffer for the next message; let a huge one go.
        if buf.capacity() <= 1 << 20 {
            buf.clear();
            self.guard.scratch = buf;
        }
    }
}
