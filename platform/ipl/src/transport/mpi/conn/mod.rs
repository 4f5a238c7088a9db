//! One connection over MPI: the sending side ([`MpiSink`]) and the receiving side
//! ([`MpiStream`]).
//!
//! A connection is a source rank and three tags. Frames travel as MPI messages on the data tag,
//! so MPI's non-overtaking order keeps them in order: a frame up to [`SMALL_FRAME`] bytes as one
//! message (one MPI message per small ipl message, as a raw MPI program would send it; up to
//! 4000 bytes with a blocking send, within the transports' eager limit), a larger one as its
//! header with the small parts in front of its first large part (a slice's length field, say).
//! The rest of a large frame's body follows on the bulk tag, in pieces that follow its
//! parts (small items together, a large part in pieces of at most 256 KiB of its own), which
//! the receiver, knowing from the header how much is to come, probes for and receives straight
//! into the caller's memory when the caller reads a whole piece. The receiver keeps a receive
//! posted for the next message of the data tag, so that a small message lands in it at once
//! (no probe and no second copy out of MPI's queue of unexpected messages). An empty message on
//! the data tag ends the stream.
//!
//! Small frames and small pieces are sent as copies (small frames in buffers of their own,
//! pieces in buffers the sink reuses), so that a send port never waits for a receiver that is
//! not reading, up to a window of [`WINDOW`] bytes that the receiver has not confirmed: it
//! confirms what it has read every [`ACK_EVERY`] bytes, on the connection's back tag. That
//! bounds what a receiver that does not read holds in MPI's queue of unexpected messages, as a
//! socket's buffers bound a tcp connection.
//!
//! Large pieces of parts the caller lends ([`DIRECT_PIECE`] and more) go from the caller's
//! memory, as MPI's own rendezvous sends them, while the connection is *in step*: the send
//! returns once MPI is done with the memory. A connection gets in step when its receiver, in a
//! read straight into its memory, says that it waits for the next piece (a 16-byte word on the
//! back tag) while the sender waits for that word, briefly, before it would copy (see
//! [`MpiSink::receiver_waits`]); with `MpiSends::Direct` it starts in step. In step, a receiver
//! doing something else (sending to this rank, say) is asked to take the pieces anyway: its
//! process's progress thread, or a thread of it that waits for its own sends, receives them
//! into memory of its own, where the stream reads them later ([`Taken`]), so a sender waits for
//! the receiving process, never for a receiver that does not read. After two such sends in a
//! row the connection is out of step: large pieces are copied again. Where the job outlives
//! ranks that die (`mpirun --enable-recovery`), or with `MpiSends::Copied`, every piece is
//! copied: a send to a dead rank would never complete.

use super::raw::{self, Request};
use super::World;
use crate::wire::HEADER_LEN;
use bytes::Bytes;
use std::collections::VecDeque;
use std::io;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

/// Frames up to this size go as one MPI message.
pub(super) const SMALL_FRAME: u64 = 16 * 1024;
/// Frames up to this size are sent with a blocking send from a buffer the sink keeps: within
/// the eager limit of MPI's transports (4 KiB for OpenMPI's shared memory), such a send
/// returns once MPI has copied the message, without waiting for the receiver, and costs less
/// than a non-blocking send and its completion.
const EAGER_FRAME: u64 = 4000;
/// Bytes a sender may have sent that its receiver has not confirmed reading.
const WINDOW: u64 = 4 << 20;
/// A receiver confirms what it has read every this many bytes.
const ACK_EVERY: u64 = 1 << 20;
/// The largest piece of a body.
const PIECE: usize = 256 * 1024;
/// Parts at least this large go in pieces of their own (as large as a reader reads straight
/// into its caller's memory).
const LARGE_PART: usize = 16 * 1024;
/// The largest MPI message a receiver takes: a piece of a body, or a small frame.
pub(super) const MAX_PIECE: usize = 256 * 1024 + HEADER_LEN;
/// Pieces at least this long are sent from the caller's memory, without a copy, when the
/// receiver has said that it waits for them in a read straight into its own memory (see
/// [`MpiSink::receiver_waits`]); shorter ones cost less to copy than the wait for that word.
const DIRECT_PIECE: usize = 64 * 1024;
/// How long a sink looks for the receiver's word that it waits for a large piece before it
/// copies the piece: a few one-way trips of the transport (the frame's header there, the word
/// back), less than the copy of such a piece costs.
const READY_WAIT: Duration = Duration::from_micros(6);
/// How long a sink waits for a send from its caller's memory to complete before it asks the
/// receiving process to take the bytes into memory of its own (see [`complete_direct`]), on
/// top of the time the bytes take at [`CATCH_UP_BYTES_PER_NS`]: time for a receiver parked in
/// a receive to be woken and to make room for the bytes (a fresh buffer's page faults), which
/// is less than what asking the receiving process costs (its progress thread may sleep up to
/// 2 ms).
///
/// [`complete_direct`]: sink::complete_direct
const TAKE_WAIT: Duration = Duration::from_micros(250);
/// How many sends in a row the receiving process had to take before a sink is out of step
/// (one may be chance: the receiver was still busy with something else).
const TAKEN_IN_A_ROW: u32 = 2;
/// How long a sink waits for a send from its caller's memory once it has asked the receiving
/// process to take it, before it takes that process for broken (see [`complete_direct`]).
///
/// [`complete_direct`]: sink::complete_direct
const TAKEN_WAIT: Duration = Duration::from_secs(30);
/// The rate at which a sink expects a receiver that is behind to catch up, reading straight
/// into its memory, in bytes per nanosecond (a third to a fifth of what a copy between
/// processors of one host goes at).
const CATCH_UP_BYTES_PER_NS: u64 = 4;
/// The longest a sink waits for a receiver that is behind to catch up: a receiver that said it
/// waited may not read the next large part straight into its memory (Barnes-Hut's exchanges
/// spent 200 us on such waits at a time with 1 ms here).
const CATCH_UP_WAIT: Duration = Duration::from_micros(50);
/// How long a stream waits for the next piece of a large frame before it tells the sender that
/// it waits for it (see `MpiStream::ask`); well within [`READY_WAIT`].
const ASK_AFTER: Duration = Duration::from_micros(2);
/// How many waits in a row that end without the word make the sink only look (not wait) for
/// the next [`LOOKS_ONLY`] large pieces: a receiver that reads late does not cost each piece a
/// wait.
const MISSED_IN_A_ROW: u32 = 3;
/// See [`MISSED_IN_A_ROW`].
const LOOKS_ONLY: u32 = 63;
/// How long closing a connection waits for its last sends.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Sends a sink or stream keeps in flight before it waits for the oldest (small messages
/// complete at once on every transport; this bounds the handles of a receiver that never
/// reads).
const MAX_IN_FLIGHT: usize = 1024;

/// The memory a send in flight reads.
enum Buf {
    /// Shared with other connections or made for this send.
    Shared(Bytes),
    /// A piece buffer of the sink, reused once the send completes.
    Pooled(Vec<u8>),
}

impl Buf {
    fn bytes(&self) -> &[u8] {
        match self {
            Buf::Shared(b) => b,
            Buf::Pooled(v) => v,
        }
    }
}

/// Piece buffers a sink keeps for reuse (reused buffers are warm in the cache and need no
/// page faults, which fresh ones of this size do).
const POOLED: usize = 4;

/// Sends in flight and the buffers they read.
#[derive(Default)]
pub(super) struct Outbox {
    sends: VecDeque<(Request, Buf)>,
    free: Vec<Vec<u8>>,
}

impl Outbox {
    /// Starts sending `data` to `dest` with `tag`.
    pub(super) fn push(
        &mut self,
        world: &World,
        dest: c_int,
        tag: c_int,
        data: Bytes,
    ) -> io::Result<()> {
        self.start(world, dest, tag, Buf::Shared(data))
    }

    fn start(&mut self, world: &World, dest: c_int, tag: c_int, data: Buf) -> io::Result<()> {
        let live = world.mpi()?;
        // SAFETY: `data` is kept in `sends` until the request completes, and leaked if it
        // never does (see `abandon`); neither a Bytes nor a Vec's heap block moves or changes
        // while it is kept there.
        let req = unsafe { raw::isend(&live, dest, tag, data.bytes())? };
        self.sends.push_back((req, data));
        Ok(())
    }

    /// An empty piece buffer.
    fn buffer(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_default()
    }

    /// Frees the buffers of completed sends, oldest first.
    pub(super) fn reap(&mut self, world: &World) -> io::Result<()> {
        if self.sends.is_empty() {
            return Ok(());
        }
        let live = world.mpi()?;
        while let Some((req, _)) = self.sends.front_mut() {
            if !raw::test(&live, req)? {
                break;
            }
            if let Some((_, Buf::Pooled(mut v))) = self.sends.pop_front() {
                if self.free.len() < POOLED {
                    v.clear();
                    self.free.push(v);
                }
            }
        }
        Ok(())
    }

    /// Whether sends are in flight.
    pub(super) fn busy(&self) -> bool {
        !self.sends.is_empty()
    }

    /// Whether so many sends are in flight that no more should start.
    fn full(&self) -> bool {
        self.sends.len() >= MAX_IN_FLIGHT
    }

    /// Waits until every send has completed, or `deadline`; then lets the rest complete on
    /// their own, leaking their buffers, which MPI may still read.
    pub(super) fn finish(&mut self, world: &World, deadline: Instant) {
        let mut backoff = Backoff::default();
        while self.busy() && Instant::now() < deadline {
            if self.reap(world).is_err() {
                break;
            }
            backoff.pause();
        }
        self.abandon(world);
    }

    fn abandon(&mut self, world: &World) {
        if self.sends.is_empty() {
            return;
        }
        let live = world.mpi().ok();
        for (req, data) in self.sends.drain(..) {
            if let Some(live) = &live {
                raw::release(live, req);
            }
            // MPI may still read the buffer (or, once finalised, nothing reads it): it must
            // never be freed.
            std::mem::forget(data);
        }
        self.free.clear();
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if let Some(world) = super::world() {
            self.finish(&world, Instant::now() + CLOSE_WAIT);
        } else {
            for (_, data) in self.sends.drain(..) {
                std::mem::forget(data);
            }
        }
    }
}

/// Waiting without a descriptor to wait on: yield at first, then sleep, longer the longer the
/// wait has lasted (what is usually microseconds away is found within microseconds, a long
/// wait costs little processor time).
#[derive(Default)]
pub(super) struct Backoff(Option<Instant>);

impl Backoff {
    pub(super) fn pause(&mut self) {
        let waited = self.0.get_or_insert_with(Instant::now).elapsed();
        if waited < Duration::from_micros(50) {
            std::thread::yield_now();
        } else if waited < Duration::from_millis(2) {
            std::thread::sleep(Duration::from_micros(20));
        } else {
            // A message to a receiver that has waited long is found within about 0.25 ms.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

mod sink;
mod stream;

pub(super) use sink::{MpiSink, SinkShared};
pub(super) use stream::{MpiStream, Posted, Taken};
