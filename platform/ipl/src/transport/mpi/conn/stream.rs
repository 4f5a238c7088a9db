//! The receiving side of a connection over MPI ([`MpiStream`]); [the parent module](super)
//! describes the protocol.

use super::{Backoff, Outbox, ACK_EVERY, ASK_AFTER, DIRECT_PIECE, MAX_PIECE, SMALL_FRAME, WINDOW};
use crate::transport::mpi::raw::{self, Live};
use crate::transport::mpi::{tags, Watch, World, TAG_NOTICE};
use crate::transport::Stream;
use crate::wire::HEADER_LEN;
use bytes::Bytes;
use std::collections::VecDeque;
use std::io;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The receive a stream keeps posted for the next message on its data tag, shared with the
/// progress thread, which looks at it (without using it up) for a parked receiver.
pub(in crate::transport::mpi) type Posted = parking_lot::Mutex<Option<raw::Recv>>;

/// What a stream shares with the progress thread: the pieces of its large frames that the
/// progress thread took for it, when a sender asked (see [`complete_direct`]), and the bytes
/// taken from its bulk tag so far, by either.
///
/// [`complete_direct`]: super::sink::complete_direct
pub(in crate::transport::mpi) struct Taken {
    inner: parking_lot::Mutex<TakenPieces>,
    pub(in crate::transport::mpi) waker: Arc<crate::transport::Waker>,
}

#[derive(Default)]
struct TakenPieces {
    pieces: VecDeque<Vec<u8>>,
    /// Bytes in `pieces`.
    held: usize,
    /// A piece of this impossible length came, and was discarded.
    bad: Option<usize>,
    /// Bytes taken from the bulk tag, by the stream or for it.
    received: u64,
}

/// The most a progress thread holds for one stream: twice the window, which a sender keeps to.
const TAKEN_MAX: usize = 2 * WINDOW as usize;

impl Taken {
    pub(in crate::transport::mpi) fn new(waker: Arc<crate::transport::Waker>) -> Self {
        Taken {
            inner: parking_lot::Mutex::new(TakenPieces::default()),
            waker,
        }
    }

    /// Whether pieces were taken for the stream (a read finds them).
    pub(in crate::transport::mpi) fn any(&self) -> bool {
        let t = self.inner.lock();
        !t.pieces.is_empty() || t.bad.is_some()
    }

    /// Takes the stream's pieces from `source` on `bulk_tag` into memory of its own, up to bulk
    /// byte `until`; returns whether it got that far (or gave up), and whether it took
    /// something.
    pub(in crate::transport::mpi) fn take_until(
        &self,
        live: &Live<'_>,
        source: c_int,
        bulk_tag: c_int,
        until: u64,
    ) -> (bool, bool) {
        let mut t = self.inner.lock();
        let mut took = false;
        while t.received < until {
            if t.held > TAKEN_MAX || t.bad.is_some() {
                tracing::warn!(
                    source,
                    until,
                    held = t.held,
                    "mpi: a sender asked to take more than its window; not taken"
                );
                return (true, took);
            }
            let m = match raw::improbe(live, source, bulk_tag) {
                Ok(Some(m)) => m,
                Ok(None) => return (false, took),
                Err(e) => {
                    tracing::warn!(source, "mpi: taking pieces for a stream: {e}");
                    return (true, took);
                }
            };
            let len = m.len;
            took = true;
            if len == 0 || len > MAX_PIECE {
                m.discard(live);
                t.bad = Some(len);
                continue;
            }
            match m.receive_vec(live) {
                Ok(v) => {
                    t.received += len as u64;
                    t.held += len;
                    t.pieces.push_back(v);
                }
                Err(e) => {
                    tracing::warn!(source, "mpi: taking pieces for a stream: {e}");
                    t.bad = Some(len);
                }
            }
        }
        (true, took)
    }
}

/// The next piece of a large frame: one the progress thread took, or one MPI holds.
enum NextPiece {
    Taken(Vec<u8>),
    Matched(raw::Matched),
}

/// The receiving side of one connection.
pub(in crate::transport::mpi) struct MpiStream {
    world: Arc<World>,
    source: c_int,
    tag: c_int,
    back_tag: c_int,
    bulk_tag: c_int,
    /// The sender's number for the connection (it is told when the receiver stops reading).
    id: u32,
    /// Where the posted receive puts the next message of the data tag. Never freed while a
    /// receive into it may be pending.
    small: Box<[u8]>,
    posted: Arc<Posted>,
    /// The posted receive was used up by the last message read, and the next one is posted at
    /// the next read: after the caller has acted on that message, so that in a round trip the
    /// answer leaves before the receive is posted (a message that comes before it waits in
    /// MPI's queue of unexpected messages, where the receive finds it).
    repost: bool,
    /// Bytes of a large frame's body still to come on the bulk tag.
    bulk_left: u64,
    /// Bytes of a message larger than the caller's buffer, and how much of it was read.
    held: Vec<u8>,
    held_at: usize,
    eof: bool,
    shut: bool,
    /// Bytes read, and bytes confirmed to the sender.
    read: u64,
    confirmed: u64,
    /// The bulk byte at which the stream last told the sender that it waits for a piece.
    asked: Option<u64>,
    /// The bulk byte at which the stream first found the next piece missing, and when.
    looking_since: Option<(u64, Instant)>,
    taken: Arc<Taken>,
    watch: Arc<Watch>,
    outbox: Outbox,
}

impl MpiStream {
    /// The receiving side of connection `id` from `source`, with its first receive posted.
    pub(in crate::transport::mpi) fn new(
        world: Arc<World>,
        source: c_int,
        id: u32,
        waker: Arc<crate::transport::Waker>,
    ) -> io::Result<MpiStream> {
        let (tag, back_tag, bulk_tag) = tags(id);
        let posted = Arc::new(Posted::new(None));
        let taken = Arc::new(Taken::new(waker.clone()));
        world.take_for(source, id, &taken);
        let mut s = MpiStream {
            watch: Arc::new(Watch::new(
                source,
                bulk_tag,
                posted.clone(),
                taken.clone(),
                waker,
            )),
            taken,
            world,
            source,
            tag,
            back_tag,
            bulk_tag,
            id,
            small: vec![0u8; SMALL_FRAME as usize].into_boxed_slice(),
            posted,
            repost: false,
            bulk_left: 0,
            held: Vec::new(),
            held_at: 0,
            eof: false,
            shut: false,
            read: 0,
            confirmed: 0,
            asked: None,
            looking_since: None,
            outbox: Outbox::default(),
        };
        s.post()?;
        Ok(s)
    }

    /// Posts the receive of the next message of the data tag.
    fn post(&mut self) -> io::Result<()> {
        let live = self.world.mpi()?;
        // SAFETY: `small` is a heap block owned by this stream, used by nothing else while the
        // receive is pending; the receive completes (it is tested before `small` is read) or is
        // cancelled and waited for (`stop_receiving`) before the stream lets go of the block,
        // and the block is leaked if MPI is finalised with the receive pending.
        let r = unsafe { raw::irecv(&live, self.source, self.tag, &mut self.small)? };
        *self.posted.lock() = Some(r);
        Ok(())
    }

    fn confirm(&mut self) -> io::Result<()> {
        if self.read - self.confirmed >= ACK_EVERY {
            self.confirmed = self.read;
            let b = Bytes::copy_from_slice(&self.read.to_le_bytes());
            self.outbox
                .push(&self.world, self.source, self.back_tag, b)?;
        }
        self.outbox.reap(&self.world)
    }

    fn take_held(&mut self, dst: &mut [u8]) -> usize {
        let k = (self.held.len() - self.held_at).min(dst.len());
        dst[..k].copy_from_slice(&self.held[self.held_at..self.held_at + k]);
        self.held_at += k;
        if self.held_at == self.held.len() {
            self.held.clear();
            self.held_at = 0;
        }
        k
    }

    /// Tells the progress thread that this receiver is reading again (it stops watching).
    #[inline]
    fn disarm(&self) {
        if self.watch.armed.load(Ordering::Relaxed) {
            self.watch.armed.store(false, Ordering::Release);
        }
    }

    /// Whether a read would find something.
    fn ready(&self) -> bool {
        self.world
            .mpi()
            .is_ok_and(|live| self.watch.ready(&live, self.bulk_left > 0))
    }

    /// A piece of a large frame's body: one the progress thread took for the stream, or the
    /// next one on the bulk tag.
    fn read_bulk(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let live = self.world.mpi()?;
        // Held while MPI is asked, so that the progress thread takes no piece meanwhile.
        let mut taken = self.taken.inner.lock();
        let piece = if let Some(v) = taken.pieces.pop_front() {
            taken.held -= v.len();
            NextPiece::Taken(v)
        } else if let Some(len) = taken.bad.take() {
            return Err(bad_piece(len, self.bulk_left));
        } else if let Some(m) = look_for_piece(
            &live,
            self.source,
            self.bulk_tag,
            dst.len().min(self.bulk_left as usize) >= DIRECT_PIECE,
        )? {
            NextPiece::Matched(m)
        } else {
            let at = taken.received;
            drop(taken);
            drop(live);
            self.ask(at, dst.len())?;
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let len = match &piece {
            NextPiece::Taken(v) => v.len(),
            NextPiece::Matched(m) => m.len,
        };
        if len > MAX_PIECE || len as u64 > self.bulk_left || len == 0 {
            if let NextPiece::Matched(m) = piece {
                m.discard(&live);
            }
            return Err(bad_piece(len, self.bulk_left));
        }
        self.bulk_left -= len as u64;
        match piece {
            NextPiece::Matched(m) => {
                taken.received += len as u64;
                if len <= dst.len() {
                    m.receive(&live, &mut dst[..len])?;
                    return Ok(len);
                }
                self.held.resize(len, 0);
                m.receive(&live, &mut self.held)?;
            }
            NextPiece::Taken(v) => {
                if len <= dst.len() {
                    dst[..len].copy_from_slice(&v);
                    return Ok(len);
                }
                self.held = v;
            }
        }
        self.held_at = 0;
        drop(taken);
        drop(live);
        Ok(self.take_held(dst))
    }

    /// Tells the sender that this stream waits for the next piece of a large frame, at bulk byte
    /// `at`, in a read of `want` bytes straight into the caller's memory: then the sender may
    /// send it from its caller's memory without a copy (see `MpiSink::receiver_waits`). Only
    /// such a read says so: it goes on until the bytes come (or the connection is dropped,
    /// whose drain takes them), so that a sender waiting for the send to complete does not wait
    /// for a receiver that does something else.
    fn ask(&mut self, at: u64, want: usize) -> io::Result<()> {
        if want < DIRECT_PIECE
            || !self.world.send_from_caller
            || self.bulk_left < DIRECT_PIECE as u64
            || self.asked == Some(at)
        {
            return Ok(());
        }
        // A sender in step sends the piece right behind the frame's header: only a piece
        // that has not come for a while is worth a word (which would cost this read a send).
        let now = Instant::now();
        match self.looking_since {
            Some((looked, since)) if looked == at => {
                if now.duration_since(since) < ASK_AFTER {
                    return Ok(());
                }
            }
            _ => {
                self.looking_since = Some((at, now));
                return Ok(());
            }
        }
        let live = self.world.mpi()?;
        self.asked = Some(at);
        let mut word = [0u8; 16];
        word[..8].copy_from_slice(&at.to_le_bytes());
        word[8..].copy_from_slice(&(want as u64).min(self.bulk_left).to_le_bytes());
        raw::send(&live, self.source, self.back_tag, &word)
    }

    /// The next message of the data tag: a small frame, a large frame's header, or the end.
    fn read_small(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        let len = {
            let live = self.world.mpi()?;
            let mut posted = self.posted.lock();
            if self.repost && posted.is_none() {
                // SAFETY: as in `post`: `small` is this stream's own block, which nothing reads
                // until the receive completes, and which outlives the receive.
                *posted =
                    Some(unsafe { raw::irecv(&live, self.source, self.tag, &mut self.small)? });
                self.repost = false;
            }
            let Some(req) = posted.as_mut() else {
                return Err(io::Error::other("no receive posted"));
            };
            match raw::test_recv(&live, req)? {
                None => return Err(io::ErrorKind::WouldBlock.into()),
                Some(got) => {
                    *posted = None;
                    got.len
                }
            }
        };
        if len == 0 {
            self.eof = true;
            return Ok(0);
        }
        let header = crate::wire::Header::decode(&self.small[..len], u64::MAX)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let total = (HEADER_LEN as u64).saturating_add(header.len);
        self.bulk_left = total.saturating_sub(len as u64);
        let k = len.min(dst.len());
        dst[..k].copy_from_slice(&self.small[..k]);
        if k < len {
            self.held.clear();
            self.held.extend_from_slice(&self.small[k..len]);
            self.held_at = 0;
        }
        self.repost = true;
        Ok(k)
    }

    /// Stops the posted receive; MPI no longer writes into `small` once this returns (or, when
    /// MPI is finalised, `small` is leaked).
    fn stop_receiving(&mut self) {
        let Some(req) = self.posted.lock().take() else {
            return;
        };
        let Ok(live) = self.world.mpi() else {
            std::mem::forget(std::mem::take(&mut self.small));
            return;
        };
        match raw::cancel_recv(&live, req) {
            Ok(Some(0)) => self.eof = true,
            Ok(Some(len)) => {
                // A message came before the receive could be cancelled: a large frame's
                // header means pieces follow on the bulk tag, which the drain discards.
                tracing::trace!(len, "mpi: a message came as the receiver stopped");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("mpi: cancelling a receive: {e}");
                std::mem::forget(std::mem::take(&mut self.small));
            }
        }
    }
}

/// How many more times a read of a large piece looks for it before it gives up the processor
/// (about 2 us of matched probes): a sender in step sends the piece right behind the frame's
/// header, and a yield costs more.
const PIECE_LOOKS: u32 = 16;

/// The next piece from `source` on `bulk_tag`, if one is there, or, for a `large` read, comes
/// within [`PIECE_LOOKS`] more looks.
fn look_for_piece(
    live: &Live<'_>,
    source: c_int,
    bulk_tag: c_int,
    large: bool,
) -> io::Result<Option<raw::Matched>> {
    let found = raw::improbe(live, source, bulk_tag)?;
    if found.is_some() || !large {
        return Ok(found);
    }
    for _ in 0..PIECE_LOOKS {
        std::hint::spin_loop();
        if let Some(m) = raw::improbe(live, source, bulk_tag)? {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// The error of a piece of `len` bytes where `left` bytes of a frame were to come.
fn bad_piece(len: usize, left: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "a piece of {len} bytes where {left} bytes of a frame were to come, in pieces of at \
             most {MAX_PIECE}"
        ),
    )
}

impl Stream for MpiStream {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        let n = if self.held_at < self.held.len() {
            self.take_held(dst)
        } else if self.eof || self.shut {
            return Ok(0);
        } else if self.bulk_left > 0 {
            self.read_bulk(dst)?
        } else {
            let n = self.read_small(dst)?;
            if n == 0 {
                return Ok(0);
            }
            n
        };
        self.read += n as u64;
        self.disarm();
        self.confirm()?;
        Ok(n)
    }

    fn prepare_park(&mut self) -> bool {
        if self.held_at < self.held.len() || self.eof {
            return false;
        }
        if self.repost {
            // The progress thread watches the posted receive.
            if self.post().is_err() {
                return false;
            }
            self.repost = false;
        }
        self.watch.bulk.store(self.bulk_left > 0, Ordering::Release);
        self.world.arm(&self.watch);
        if self.ready() {
            self.disarm();
            return false;
        }
        true
    }

    fn wait(&mut self, d: Duration) {
        let until = Instant::now() + d;
        let mut backoff = Backoff::default();
        while Instant::now() < until && !self.ready() {
            backoff.pause();
        }
    }

    fn shutdown(&mut self) {
        if self.shut {
            return;
        }
        self.shut = true;
        self.held = Vec::new();
        self.held_at = 0;
        self.watch.armed.store(false, Ordering::Release);
        self.stop_receiving();
        if !self.eof {
            // Tell the sender, and discard what it sent meanwhile, up to its end of stream.
            let _ = self.outbox.push(
                &self.world,
                self.source,
                TAG_NOTICE,
                Bytes::copy_from_slice(&self.id.to_le_bytes()),
            );
            self.world.drain(self.source, self.tag, self.bulk_tag);
        }
    }
}

impl Drop for MpiStream {
    fn drop(&mut self) {
        self.shutdown();
        self.world.forget_stream(self.source, self.id);
    }
}
