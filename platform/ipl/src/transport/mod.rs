//! Drivers: what carries the bytes of port connections between nodes.
//!
//! Drivers know nothing of ports, messages or the node that uses them. The seam between them and
//! the ports is small (after the transports of timely-dataflow's communication crate, which sit
//! behind a few traits, and mio's one mechanism per file):
//!
//! - A [`Driver`] opens a connection to a peer: it proves knowledge of the pool secret, carries
//!   the caller's connect request (opaque bytes to the driver) to the peer's [`Acceptor`], and
//!   brings back its reply and, when the peer accepted, a [`Sink`] for frames.
//! - An [`Acceptor`] is what the node's receive ports show the drivers: it decides on a request
//!   and, when it accepts, hands out an [`Inbox`], into which the driver delivers the
//!   connection's [`Stream`], and whose [`Waker`] wakes the receiver.
//! - A [`Stream`] is read by the receiving thread itself (no hand-off to another thread on the
//!   hot path): it spins over its streams, then parks in poll(2) on what the streams name. A
//!   driver whose bytes are pushed by another thread (in-process pipes, or a transport with a
//!   progress thread of its own) delivers them into a [`pipe::Pipe`] and wakes the waker.
//! - A [`Sink`] is written by the sending thread, from the caller's memory ([`Frame`] holds the
//!   parts of a message, which a multicast shares among its connections).
//!
//! Drivers: [`inproc`] (threads of one process), [`tcp`] (sockets, with channel pairing),
//! [`shm`] (rings in shared memory between processes of one host), and with the `mpi` feature
//! `mpi` (MPI point-to-point, for programs started by `mpirun` or `srun`). Filters wrap any driver:
//! [`wan`] delays frames between locations. [`select`] puts shm and tcp together: shared memory
//! for peers on this host, tcp for the others.

pub(crate) mod dial;
pub(crate) mod inproc;
pub(crate) mod listen;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub(crate) mod pairing;
pub(crate) mod pipe;
pub(crate) mod poll;
pub(crate) mod reader;
pub(crate) mod select;
pub(crate) mod shm;
pub(crate) mod tcp;
pub(crate) mod waker;
pub(crate) mod wan;
pub(crate) mod writer;

use crate::error::Result;
use crate::node::NodeId;
use crate::wire::HEADER_LEN;
use bytes::Bytes;
use std::cell::OnceCell;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};
pub(crate) use waker::Waker;

/// Longest single wait before a waiting reader or writer re-checks for failures.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Opens connections to peers.
pub(crate) trait Driver: Send + Sync {
    /// Tries once to connect to `peer`, carrying `request` to its acceptor. An error means the
    /// peer could not be reached or failed the handshake; a refusal is a reply without a sink.
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed>;
}

/// What one connection attempt brought back.
pub(crate) struct Dialed {
    /// The acceptor's reply.
    pub reply: Vec<u8>,
    /// Where frames go, when the acceptor accepted.
    pub sink: Option<Box<dyn Sink>>,
    /// The driver that carries the connection (`tcp`, `shm`, `inproc`).
    pub driver: &'static str,
}

/// What the node's receive ports show the drivers.
pub(crate) trait Acceptor: Send + Sync {
    /// Decides on a connect request (opaque bytes to the driver).
    fn admit(&self, request: &[u8]) -> Admission;
}

/// An acceptor's decision.
pub(crate) struct Admission {
    /// The reply the driver carries back to the connecting side.
    pub reply: Vec<u8>,
    /// Where the connection's stream goes, when accepted.
    pub inbox: Option<Box<dyn Inbox>>,
    /// Whether the receiver may read large parts straight from the sender's memory, where the
    /// driver can (see
    /// [`ReceivePortBuilder::single_copy`](crate::ReceivePortBuilder::single_copy)).
    pub single_copy: bool,
}

/// Where an accepted connection is delivered.
pub(crate) trait Inbox: Send {
    /// Wakes the receiver that will read the connection (for drivers that push bytes).
    fn waker(&self) -> Arc<Waker>;
    /// Hands over the connection's stream; the receiver reads it from now on.
    fn attach(self: Box<Self>, stream: Box<dyn Stream>);
}

/// The inbound bytes of one connection, read by the receiving thread.
pub(crate) trait Stream: Send {
    /// Reads available bytes into `dst` without waiting: `Ok(0)` at the end of the stream,
    /// `WouldBlock` when nothing is available now.
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize>;
    /// Whether a `read` may find something: false only when it certainly finds nothing (a
    /// cheap look for receivers that spin).
    fn ready(&self) -> bool {
        true
    }
    /// Called before the receiver parks: arranges to be woken by the sender; false when bytes
    /// arrived meanwhile, so the receiver must not park.
    fn prepare_park(&mut self) -> bool {
        true
    }
    /// Adds the descriptors a parked receiver polls for this stream (streams whose bytes are
    /// pushed wake the receiver's [`Waker`] instead and add none).
    fn wait_fds(&self, _fds: &mut Vec<libc::pollfd>) {}
    /// Called after the receiver woke with one of this stream's descriptors ready.
    fn woken(&mut self) {}
    /// Waits at most `d` for more bytes (in the middle of a message).
    fn wait(&mut self, d: Duration);
    /// Nanoseconds since the Unix epoch at which a held-back frame becomes readable (filters
    /// that delay frames).
    fn ready_at_ns(&self) -> Option<u64> {
        None
    }
    /// Stops reading this direction; the sender learns that nobody reads.
    fn shutdown(&mut self);
}

/// One frame (header and message parts) on its way out.
pub(crate) struct Frame<'a> {
    /// The frame header, per connection (filters stamp it).
    pub header: [u8; HEADER_LEN],
    /// The message, in parts borrowed from the caller until the send returns.
    pub parts: &'a [&'a [u8]],
    /// Empty, or for each part whether it is a shared buffer, which a sink may keep a
    /// reference to rather than copy (see `WriteMessage::write_shared_bytes`).
    pub owned: &'a [Option<Bytes>],
    /// Header and parts together, in bytes.
    pub len: u64,
    /// The parts as shared chunks, made once for all connections that need owned bytes (a
    /// frame is written by one thread: a cell, with nothing to synchronise).
    pub chunks: &'a OnceCell<Vec<Bytes>>,
}

impl Frame<'_> {
    /// The frame's bytes from `offset` on, as at most `slices.len()` slices; returns how many.
    pub(crate) fn gather<'s>(&'s self, slices: &mut [io::IoSlice<'s>], mut offset: u64) -> usize {
        let mut n = 0;
        for part in std::iter::once(&self.header[..]).chain(self.parts.iter().copied()) {
            if n == slices.len() {
                break;
            }
            let l = part.len() as u64;
            if offset >= l {
                offset -= l;
                continue;
            }
            slices[n] = io::IoSlice::new(&part[offset as usize..]);
            offset = 0;
            n += 1;
        }
        n
    }
}

/// The outbound side of one connection, written by the sending thread.
pub(crate) trait Sink: Send {
    /// Writes bytes of `frame` from `offset` on without waiting; returns how many it took (0:
    /// no room now).
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64>;
    /// The time before which a frame of `len` payload bytes sent now must not be delivered, in
    /// nanoseconds since the Unix epoch; 0 for at once (filters that delay frames).
    fn stamp(&mut self, _len: u64) -> u64 {
        0
    }
    /// Called before the writer waits: arranges to be woken when room appears; false when
    /// room appeared meanwhile, so the writer must not wait.
    fn prepare_wait(&mut self) -> bool {
        true
    }
    /// Adds the descriptors a waiting writer polls for this sink; false when it has none (then
    /// the writer waits with [`Sink::wait`]).
    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) -> bool;
    /// Called after the writer woke with one of this sink's descriptors ready.
    fn woken(&mut self) {}
    /// Waits at most `d` for room (sinks without descriptors).
    fn wait(&mut self, d: Duration);
    /// When the sink wants another `write` call even if nothing wakes the writer.
    fn wake_at(&self) -> Option<Instant> {
        None
    }
    /// Bytes of messages the connection is sure to hold for a receiver that does not read
    /// before a send waits for it; 0 where that is up to the system (a socket's buffers).
    fn unread_capacity(&self) -> u64 {
        0
    }
    /// Writes `close` (a close frame) if it fits within a short wait, and ends the connection.
    fn close(self: Box<Self>, close: &[u8]);
}
