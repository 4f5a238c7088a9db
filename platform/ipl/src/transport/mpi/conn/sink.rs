//! The sending side of a connection over MPI ([`MpiSink`]); [the parent module](super) describes
//! the protocol.

use super::{
    Backoff, Buf, Outbox, CATCH_UP_BYTES_PER_NS, CATCH_UP_WAIT, CLOSE_WAIT, DIRECT_PIECE,
    EAGER_FRAME, LARGE_PART, LOOKS_ONLY, MISSED_IN_A_ROW, PIECE, READY_WAIT, SMALL_FRAME,
    TAKEN_IN_A_ROW, TAKEN_WAIT, TAKE_WAIT, WINDOW,
};
use crate::transport::mpi::raw::{self, Live, Request};
use crate::transport::mpi::{tags, World, TAG_NOTICE};
use crate::transport::shm::memory::copy_streaming;
use crate::transport::{Frame, Sink};
use crate::wire::HEADER_LEN;
use bytes::Bytes;
use std::io;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the world shares with a sink: whether its receiver has stopped reading.
#[derive(Default)]
pub(in crate::transport::mpi) struct SinkShared {
    pub(in crate::transport::mpi) receiver_gone: AtomicBool,
}

/// The sending side of one connection.
pub(in crate::transport::mpi) struct MpiSink {
    world: Arc<World>,
    dest: c_int,
    tag: c_int,
    back_tag: c_int,
    /// Where the bodies of large frames go, in pieces after their header on `tag`.
    bulk_tag: c_int,
    id: u32,
    shared: Arc<SinkShared>,
    outbox: Outbox,
    /// Bytes sent, and bytes the receiver confirmed reading.
    sent: u64,
    confirmed: u64,
    /// How far the frame being written has come.
    frame: Progress,
    /// Where frames sent with a blocking send are put together.
    eager: Vec<u8>,
    /// How the pieces of large parts are copied into the piece buffers.
    copying: PieceCopy,
    /// The receiver's last word that it waits in a read straight into its memory: the bulk byte
    /// it waits for (see [`MpiSink::bulk_sent`]), and how many bytes that read takes.
    waiting: Option<(u64, u64)>,
    /// How long the sink waits for that word before it copies a large piece.
    patience: Patience,
    /// Sends from the caller's memory in flight (empty between calls).
    direct: Vec<Request>,
    /// The receiver took the last large pieces as they came (or the connection starts so, with
    /// `MpiSends::Direct`): the next ones go from the caller's memory at once, without waiting
    /// for its word (see [`MpiSink::send_direct`]).
    in_step: bool,
    /// Sends from the caller's memory that the receiving process had to take, in a row.
    taken_in_a_row: u32,
    /// Bytes sent on the bulk tag (the receiving process counts what it took from there).
    bulk_sent: u64,
    /// How large pieces went (logged when the connection closes).
    counts: PieceCounts,
}

/// How a sink's large pieces went.
#[derive(Default)]
struct PieceCounts {
    /// Pieces sent from the caller's memory.
    direct: u64,
    /// Pieces copied.
    copied: u64,
    /// Sends from the caller's memory the receiving process was asked to take.
    taken: u64,
}

/// How far a large frame has come.
#[derive(Default)]
struct Progress {
    /// Bytes of the frame handed to MPI.
    posted: u64,
    /// The next part to send, and how much of it was sent.
    part: usize,
    part_at: usize,
}

impl Progress {
    /// Notes that `k` more bytes of the current part of `parts` were handed to MPI.
    fn advance(&mut self, parts: &[&[u8]], k: usize) {
        self.part_at += k;
        if self.part_at == parts[self.part].len() {
            self.part += 1;
            self.part_at = 0;
        }
    }
}

impl MpiSink {
    /// The sending side of connection `id` to `dest`, whose receiver accepted it: `shared` is
    /// what the world tells the sink, `outbox` holds the connection's sends still in flight.
    pub(in crate::transport::mpi) fn new(
        world: Arc<World>,
        dest: c_int,
        id: u32,
        shared: Arc<SinkShared>,
        outbox: Outbox,
    ) -> MpiSink {
        let (tag, back_tag, bulk_tag) = tags(id);
        MpiSink {
            patience: Patience::new(world.start_in_step),
            in_step: world.send_from_caller && world.start_in_step,
            world,
            dest,
            tag,
            back_tag,
            bulk_tag,
            id,
            shared,
            outbox,
            sent: 0,
            confirmed: 0,
            frame: Progress::default(),
            eager: Vec::new(),
            copying: PieceCopy::default(),
            waiting: None,
            direct: Vec::new(),
            taken_in_a_row: 0,
            bulk_sent: 0,
            counts: PieceCounts::default(),
        }
    }

    /// Reads the receiver's confirmations; true when some arrived.
    fn read_confirmations(&mut self) -> io::Result<bool> {
        let live = self.world.mpi()?;
        let mut got = false;
        while let Some(m) = raw::improbe(&live, self.dest, self.back_tag)? {
            let len = m.len;
            let mut b = [0u8; 16];
            if len != 8 && len != 16 {
                m.discard(&live);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a word of {len} bytes from the receiver, where a read confirmation \
                         has 8 and a wait for a piece 16"
                    ),
                ));
            }
            m.receive(&live, &mut b[..len])?;
            let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            // A confirmation counts every byte sent, a wait for a piece the bulk bytes.
            let (what, sent) = if len == 8 {
                ("confirmed byte", self.sent)
            } else {
                ("waits for bulk byte", self.bulk_sent)
            };
            if n > sent {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("receiver {what} {n} of {sent} sent"),
                ));
            }
            if len == 16 {
                let want = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
                self.waiting = Some((n, want));
                continue;
            }
            self.confirmed = self.confirmed.max(n);
            got = true;
        }
        Ok(got)
    }

    /// Whether `n` more bytes fit the window (a piece always fits when nothing is unconfirmed).
    fn room(&mut self, n: u64) -> io::Result<bool> {
        let fits = |s: &Self| s.sent == s.confirmed || s.sent - s.confirmed + n <= WINDOW;
        if fits(self) && !self.outbox.full() {
            return Ok(true);
        }
        self.read_confirmations()?;
        self.outbox.reap(&self.world)?;
        Ok(fits(self) && !self.outbox.full())
    }

    fn send(&mut self, data: Bytes) -> io::Result<()> {
        self.sent += data.len() as u64;
        self.outbox.push(&self.world, self.dest, self.tag, data)
    }

    /// The length of the next piece of a large frame's body: a large part alone (in pieces of
    /// at most [`PIECE`]), or small parts together up to the next large one. A reader takes a
    /// large part straight into its own memory only when the part comes as pieces of its own,
    /// not behind the small items written before it.
    fn next_piece(&self, parts: &[&[u8]]) -> usize {
        let (mut i, mut at, mut len) = (self.frame.part, self.frame.part_at, 0);
        while let Some(p) = parts.get(i) {
            let rest = p.len() - at;
            if rest >= LARGE_PART {
                return if len == 0 { rest.min(PIECE) } else { len };
            }
            if len + rest >= PIECE {
                return PIECE;
            }
            len += rest;
            i += 1;
            at = 0;
        }
        len
    }

    /// Sends `header` and `parts` as one message on the data tag with a blocking send from
    /// the sink's own buffer: at most [`EAGER_FRAME`] bytes, within the eager limit, so the
    /// send returns once MPI has copied them.
    fn send_eager(&mut self, header: &[u8], parts: &[&[u8]]) -> io::Result<()> {
        self.eager.clear();
        self.eager.extend_from_slice(header);
        for p in parts {
            self.eager.extend_from_slice(p);
        }
        let live = self.world.mpi()?;
        raw::send(&live, self.dest, self.tag, &self.eager)?;
        self.sent += self.eager.len() as u64;
        Ok(())
    }

    /// The next piece, of `len` bytes, as a slice of a shared buffer, when it lies within one
    /// (see `WriteMessage::write_shared_bytes`).
    fn shared_piece(&self, frame: &Frame<'_>, len: usize) -> Option<Bytes> {
        let shared = frame.owned.get(self.frame.part)?.as_ref()?;
        let at = self.frame.part_at;
        (at + len <= shared.len()).then(|| shared.slice(at..at + len))
    }

    fn write_frame(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        self.check_receiver()?;
        self.outbox.reap(&self.world)?;
        if offset == 0 {
            // A new frame (one given up on in the middle is forgotten).
            self.frame = Progress::default();
            if frame.len <= EAGER_FRAME && self.room(frame.len)? {
                self.send_eager(&frame.header, frame.parts)?;
                return Ok(frame.len);
            }
            if frame.len <= SMALL_FRAME {
                if !self.room(frame.len)? {
                    return Ok(0);
                }
                let mut v = Vec::with_capacity(frame.len as usize);
                v.extend_from_slice(&frame.header);
                for p in frame.parts {
                    v.extend_from_slice(p);
                }
                self.send(Bytes::from(v))?;
                return Ok(frame.len);
            }
            // The header takes the small parts in front of the first large one along (the
            // length field of a slice, say): one MPI message fewer per frame, and the reader
            // takes the large part straight into its caller's memory as before.
            let mut first = HEADER_LEN;
            let mut part = 0;
            while let Some(p) = frame.parts.get(part) {
                if p.len() >= LARGE_PART || first + p.len() > EAGER_FRAME as usize {
                    break;
                }
                first += p.len();
                part += 1;
            }
            if !self.room(first as u64)? {
                return Ok(0);
            }
            self.send_eager(&frame.header, &frame.parts[..part])?;
            self.frame = Progress {
                posted: first as u64,
                part,
                part_at: 0,
            };
        } else if offset != self.frame.posted {
            return Err(io::Error::other(format!(
                "write resumed at byte {offset} of a frame, but the last stopped at {}",
                self.frame.posted
            )));
        }
        while self.frame.posted < frame.len {
            let len = self.next_piece(frame.parts) as u64;
            if len == 0 {
                return Err(io::Error::other("a frame longer than its parts"));
            }
            if !self.room(len)? {
                break;
            }
            if let Some(piece) = self.shared_piece(frame, len as usize) {
                // A piece of a shared buffer: MPI reads it where it is, and the outbox keeps
                // a reference to it until the send completes.
                self.frame.advance(frame.parts, piece.len());
                self.piece_posted(len);
                self.outbox
                    .start(&self.world, self.dest, self.bulk_tag, Buf::Shared(piece))?;
                continue;
            }
            if len as usize >= DIRECT_PIECE
                && self.world.send_from_caller
                && self.in_one_part(frame.parts, len as usize)
                && (self.in_step || self.receiver_waits()?)
            {
                self.send_direct(frame)?;
                continue;
            }
            let mut buf = self.outbox.buffer();
            buf.reserve(len as usize);
            let streaming = self.copying.streams(len as usize);
            let started = (!streaming && len as usize >= TIMED_COPY).then(Instant::now);
            while buf.len() < len as usize {
                let part = frame.parts[self.frame.part];
                let rest = &part[self.frame.part_at..];
                let k = rest.len().min(len as usize - buf.len());
                if streaming && k >= LARGE_PART {
                    extend_streaming(&mut buf, &rest[..k]);
                } else {
                    buf.extend_from_slice(&rest[..k]);
                }
                self.frame.advance(frame.parts, k);
            }
            if let Some(started) = started {
                self.copying.copied(buf.len(), started.elapsed());
            }
            self.piece_posted(len);
            if len as usize >= DIRECT_PIECE {
                self.counts.copied += 1;
            }
            self.outbox
                .start(&self.world, self.dest, self.bulk_tag, Buf::Pooled(buf))?;
        }
        let n = self.frame.posted - offset;
        if self.frame.posted == frame.len {
            self.frame = Progress::default();
        }
        Ok(n)
    }

    /// Counts a piece of `len` bytes of the frame as handed to MPI, on the bulk tag.
    fn piece_posted(&mut self, len: u64) {
        self.sent += len;
        self.bulk_sent += len;
        self.frame.posted += len;
    }

    /// Whether the next `len` bytes of the frame lie in one part.
    fn in_one_part(&self, parts: &[&[u8]], len: usize) -> bool {
        parts
            .get(self.frame.part)
            .is_some_and(|p| p.len() - self.frame.part_at >= len)
    }

    /// Whether the receiver waits for the next byte of the connection in a read straight into
    /// its memory: it said so (see `MpiStream::ask`), or says so within [`READY_WAIT`] (less
    /// while it has kept not saying so, see [`Patience`]).
    ///
    /// Such a receiver takes the bytes as soon as they come, so a send from the caller's memory
    /// completes at once: the copy into a piece buffer, which lets a send return before its
    /// receiver reads, is not needed. A receiver that does not say so may not read for a long
    /// time (it may be parked, or sending to this rank), and then a send from memory would wait
    /// for it, or for its process to take the bytes, where a copy lets the sender go on.
    fn receiver_waits(&mut self) -> io::Result<bool> {
        let asked = |s: &Self| s.waiting.is_some_and(|(at, _)| at == s.bulk_sent);
        if asked(self) {
            return Ok(true);
        }
        // A word for bytes this sink has sent since (copied, as the word came late) tells of a
        // receiver that reads large pieces straight into its memory and is behind: it gets
        // the time to catch up at the rate such reads go, after which sends go from the
        // caller's memory in step with its reads. A word is used once.
        let patience = match self.waiting.take() {
            Some((at, _)) if at < self.bulk_sent => {
                let lag = self.bulk_sent - at;
                READY_WAIT + Duration::from_nanos(lag / CATCH_UP_BYTES_PER_NS).min(CATCH_UP_WAIT)
            }
            _ => match self.patience.next() {
                Some(p) => p,
                None => {
                    // Long enough out of step: the next pieces go as if in step again.
                    self.in_step = true;
                    return Ok(true);
                }
            },
        };
        let mut looks = Looks::new();
        loop {
            self.read_confirmations()?;
            if asked(self) {
                self.patience.answered();
                self.in_step = true;
                return Ok(true);
            }
            if looks.waited() >= patience {
                self.patience.unanswered(patience);
                return Ok(false);
            }
            looks.pause();
        }
    }

    /// Sends pieces of the current part from the caller's memory, and returns once MPI is done
    /// with all of them: the pieces the waiting receiver's read takes, or, while the receiver
    /// is in step (it took the last large pieces as they came), the rest of the part, without
    /// waiting for its word, as MPI's own rendezvous does.
    ///
    /// A receiver in step may have stopped reading meanwhile (it may be sending to this rank,
    /// say). Then the receiving process takes the bytes into memory of its own when asked
    /// (see [`complete_direct`]): a send never waits for a receiver to read, only for its
    /// process to answer, and the connection is out of step until the receiver's word comes
    /// again.
    fn send_direct(&mut self, frame: &Frame<'_>) -> io::Result<()> {
        let want = match self.waiting.take() {
            Some((at, want)) if at == self.bulk_sent => want,
            _ => u64::MAX,
        };
        // Held until every send has completed: MPI is not finalised under them.
        let world = self.world.clone();
        let live = world.mpi()?;
        let mut reqs = std::mem::take(&mut self.direct);
        let mut taken = 0u64;
        let mut failed = None;
        while self.frame.posted < frame.len {
            let len = self.next_piece(frame.parts);
            // The first piece goes whatever the receiver's read takes: it takes the rest of
            // a longer piece into a buffer of its own.
            if len == 0
                || (taken > 0 && taken + len as u64 > want)
                || !self.in_one_part(frame.parts, len)
                || frame
                    .owned
                    .get(self.frame.part)
                    .is_some_and(Option::is_some)
            {
                break;
            }
            match self.room(len as u64) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            let at = self.frame.part_at;
            let piece = &frame.parts[self.frame.part][at..at + len];
            // SAFETY: `piece` is borrowed from the caller for this call, and this function
            // returns only once every send it started has completed (`complete_direct`), so
            // MPI reads it only while the borrow lasts.
            match unsafe { raw::isend(&live, self.dest, self.bulk_tag, piece) } {
                Ok(r) => reqs.push(r),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            self.frame.advance(frame.parts, len);
            self.piece_posted(len as u64);
            self.counts.direct += 1;
            taken += len as u64;
        }
        let take = Take {
            world: &world,
            live: &live,
            dest: self.dest,
            id: self.id,
            until: self.bulk_sent,
            bytes: taken,
        };
        if complete_direct(&mut reqs, &take) {
            self.counts.taken += 1;
            self.taken_in_a_row += 1;
            if self.taken_in_a_row >= TAKEN_IN_A_ROW {
                // Out of step: the next large piece waits for the receiver's word, briefly.
                self.in_step = false;
                self.taken_in_a_row = 0;
            }
        } else {
            self.taken_in_a_row = 0;
        }
        self.direct = reqs;
        failed.map_or(Ok(()), Err)
    }

    fn check_receiver(&self) -> io::Result<()> {
        if self.shared.receiver_gone.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "receive port closed",
            ));
        }
        Ok(())
    }
}

/// Pieces at least this long have their copy timed (a shorter copy takes too little time for
/// the clock to tell its speed).
const TIMED_COPY: usize = 64 * 1024;
/// An ordinary copy of a piece slower than this (bytes per microsecond) took its lines back
/// from another processor's cache one by one: see [`PieceCopy`].
const SLOW_COPY: f64 = 4000.0;
/// How many slow ordinary copies in a row switch to non-temporal stores: one now and then is
/// slow anyway (a page fault, the process descheduled).
const SLOW_IN_A_ROW: u32 = 3;
/// How many pieces are copied with non-temporal stores after slow ordinary copies, before an
/// ordinary copy is timed again.
const STREAMED_PIECES: u32 = 63;

/// How a sink copies the pieces of large parts into its piece buffers: with ordinary stores,
/// or, while they are slow, with non-temporal ones.
///
/// A piece buffer is reused once MPI has sent it, and the receiver's single copy out of it
/// left its lines in the receiver's cache. Where sender and receiver share a last-level cache,
/// ordinary stores take the lines back from there quickly, and the receiver then finds the
/// next piece in that cache: the best case. Where they share none (two sockets, or two core
/// complexes of one), each store first fetches its line from the other side, one round trip per
/// line: 100 KB messages went at 0.22x raw MPI on such a placement, against 0.74x to 0.77x with a
/// shared cache. Non-temporal stores send the bytes to memory without fetching the lines, and
/// the receiver reads them from there: 0.56x on the placement without a shared cache, but about
/// 0.5x with one, where the receiver's reads from memory cost more than the stores saved.
/// Which case holds is found by timing: [`SLOW_IN_A_ROW`] ordinary copies of large pieces
/// slower than [`SLOW_COPY`] switch the next [`STREAMED_PIECES`] pieces to non-temporal stores.
/// Then an ordinary copy is timed again, since a process may be moved: if it is slow too, the
/// next pieces are streamed again; if not, ordinary stores stay.
#[derive(Default)]
struct PieceCopy {
    /// Pieces still to copy with non-temporal stores.
    streamed_left: u32,
    /// Timed ordinary copies that were slow, in a row.
    slow: u32,
}

impl PieceCopy {
    /// Whether the next piece, of `len` bytes, is copied with non-temporal stores.
    fn streams(&mut self, len: usize) -> bool {
        if self.streamed_left == 0 || len < LARGE_PART {
            return false;
        }
        self.streamed_left -= 1;
        true
    }

    /// An ordinary copy of `bytes` took `took`.
    fn copied(&mut self, bytes: usize, took: Duration) {
        let per_us = bytes as f64 / took.as_secs_f64().max(1e-9) / 1e6;
        if per_us >= SLOW_COPY {
            self.slow = 0;
            return;
        }
        self.slow = self.slow.saturating_add(1);
        if self.slow >= SLOW_IN_A_ROW {
            tracing::trace!(per_us, "mpi: slow copies of large pieces; streaming them");
            self.streamed_left = STREAMED_PIECES;
        }
    }
}

/// Sends from the caller's memory on one connection, for the receiving process to take.
pub(super) struct Take<'a> {
    world: &'a World,
    /// Held until every send has completed: MPI is not finalised under them.
    live: &'a Live<'a>,
    dest: c_int,
    /// The connection's number.
    id: u32,
    /// The connection's bulk bytes up to the end of the sends.
    until: u64,
    /// Bytes of the sends.
    bytes: u64,
}

/// Waits until MPI is done with every send in `reqs`, which read the caller's memory; true
/// when the receiving process was asked to take them.
///
/// A receiver that reads takes them within the time the bytes take ([`TAKE_WAIT`] and the
/// rate [`CATCH_UP_BYTES_PER_NS`]). After that, the receiving process's progress thread is
/// asked to take the connection's pieces up to the end of these sends into memory of its own,
/// where the stream reads them later (a notice on `TAG_NOTICE`): a sender never waits for a
/// receiver that does something else, only for its process. While it waits, this process takes
/// what others asked it to (`World::take_for_others`): two ranks that send to each other before
/// either reads take each other's pieces at once. There is no giving up before the sends
/// complete: MPI reads the caller's memory until then, and the caller may free that memory once
/// the send returns. If the receiving process dies, OpenMPI's runtime ends the job (see the mpi
/// module's documentation), and with it this wait. An error from MPI while it may still read the
/// memory, or sends still pending [`TAKEN_WAIT`] after the receiving process was asked to take
/// them (that process is broken), end this process, as MPI's default error handler would.
pub(super) fn complete_direct(reqs: &mut Vec<Request>, take: &Take<'_>) -> bool {
    let mut backoff = Backoff::default();
    let mut looks = Looks::new();
    let patience = TAKE_WAIT + Duration::from_nanos(take.bytes / CATCH_UP_BYTES_PER_NS);
    let mut asked: Option<Instant> = None;
    while !reqs.is_empty() {
        let mut error = None;
        reqs.retain_mut(|r| match raw::test(take.live, r) {
            Ok(done) => !done,
            Err(e) => {
                error = Some(e);
                true
            }
        });
        if reqs.is_empty() {
            break;
        }
        if let Some(e) = error {
            give_up(take.dest, &format!("it failed ({e})"));
        }
        // Meanwhile this process takes what others asked it to: the receiver may be waiting
        // for its own sends to this one.
        if looks.now_and_then() {
            take.world.take_for_others(take.live);
        }
        match asked {
            None if looks.waited() < patience => looks.pause(),
            None => {
                let mut word = [0u8; 12];
                word[..4].copy_from_slice(&take.id.to_le_bytes());
                word[4..].copy_from_slice(&take.until.to_le_bytes());
                if let Err(e) = raw::send(take.live, take.dest, TAG_NOTICE, &word) {
                    give_up(
                        take.dest,
                        &format!("asking its process to take it failed ({e})"),
                    );
                }
                tracing::trace!(
                    to = take.dest,
                    id = take.id,
                    "mpi: receiver asked to take pieces"
                );
                asked = Some(Instant::now());
            }
            Some(t) if t.elapsed() > TAKEN_WAIT => give_up(
                take.dest,
                &format!("its process did not take it within {TAKEN_WAIT:?} of being asked"),
            ),
            Some(_) => {
                take.world.take_for_others(take.live);
                backoff.pause();
            }
        }
    }
    asked.is_some()
}

/// How long a sink spins before it yields between looks, in a wait for its receiver (a yield
/// is a system call, but lets a receiver that shares this processor run).
const SPIN: Duration = Duration::from_micros(20);
/// Looks between two reads of the clock in such a wait (a read of the clock costs about as
/// much as a look, and waits here are hundreds of looks long).
const LOOKS_PER_CLOCK: u32 = 16;

/// A wait for the receiver that pauses between looks and reads the clock now and then.
struct Looks {
    start: Instant,
    looks: u32,
    waited: Duration,
}

impl Looks {
    fn new() -> Self {
        Looks {
            start: Instant::now(),
            looks: 0,
            waited: Duration::ZERO,
        }
    }

    /// How long the wait has lasted, as of the last read of the clock.
    fn waited(&self) -> Duration {
        self.waited
    }

    /// True at the looks where the clock is read (not before the first pause): for other work
    /// done now and then, which a wait that ends at once never does.
    fn now_and_then(&self) -> bool {
        self.looks > 0 && self.looks % LOOKS_PER_CLOCK == 0
    }

    /// Pauses once: spins at first, then yields.
    fn pause(&mut self) {
        self.looks += 1;
        if self.now_and_then() {
            self.waited = self.start.elapsed();
        }
        if self.waited < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Ends the process: a send from the caller's memory to `dest` cannot complete, and MPI may
/// still read that memory, which the caller would free or change on return.
#[cold]
fn give_up(dest: c_int, why: &str) -> ! {
    let why = format!(
        "ipl mpi driver: a send to rank {dest} from the caller's memory cannot complete: {why}; \
         MPI may still read that memory, so this process cannot go on safely"
    );
    tracing::error!("{why}");
    eprintln!("{why}");
    std::process::abort();
}

/// How long a sink out of step waits for its receiver's word that it waits for a large piece
/// (see [`MpiSink::receiver_waits`]): [`READY_WAIT`], or not at all for the next
/// [`LOOKS_ONLY`] large pieces (it only looks whether the word is there) after
/// [`MISSED_IN_A_ROW`] waits in a row without the word. A receiver that reads its large
/// messages late, or a sender that sends many before its receiver reads one, then pays for the
/// wait once in a while, not at each piece. With `MpiSends::Direct` the sink tries the step
/// again after such a stretch: a receiver that waits in a receive, parked, answers too late for
/// the wait, but takes pieces sent in step as soon as it wakes (while its sender waits for it,
/// which a copy would not: hence not by default).
struct Patience {
    /// Large pieces still to send without waiting, plus one (0: none).
    looks_left: u32,
    missed: u32,
    /// Whether the end of such a stretch tries the step again (`MpiSends::Direct`).
    retry_step: bool,
}

impl Patience {
    fn new(retry_step: bool) -> Self {
        Patience {
            looks_left: 0,
            missed: 0,
            retry_step,
        }
    }

    /// How long to wait for the word before the next large piece; `None` to send it in step
    /// (the end of a stretch without waiting, where the sink tries the step again).
    fn next(&mut self) -> Option<Duration> {
        match self.looks_left {
            0 => Some(READY_WAIT),
            1 => {
                self.looks_left = 0;
                if self.retry_step {
                    None
                } else {
                    Some(READY_WAIT)
                }
            }
            _ => {
                self.looks_left -= 1;
                Some(Duration::ZERO)
            }
        }
    }

    /// The word came.
    fn answered(&mut self) {
        self.missed = 0;
    }

    /// The word did not come within `waited`.
    fn unanswered(&mut self, waited: Duration) {
        if waited.is_zero() {
            return;
        }
        self.missed += 1;
        if self.missed >= MISSED_IN_A_ROW {
            self.missed = 0;
            self.looks_left = LOOKS_ONLY + 1;
        }
    }
}

/// Appends `src` to `buf`, writing its whole cache lines with non-temporal stores (on x86-64),
/// for a piece of a large part while ordinary stores are slow (see [`PieceCopy`]). Ends with a
/// store fence, before MPI tells the receiver that the piece is there.
fn extend_streaming(buf: &mut Vec<u8>, src: &[u8]) {
    /// A plain copy, for the bytes around the whole lines.
    ///
    /// # Safety
    /// As `ptr::copy_nonoverlapping` of `src.len()` bytes from `src` to `dst`.
    unsafe fn plain(dst: *mut u8, src: &[u8]) {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }
    buf.reserve(src.len());
    let at = buf.len();
    let dst: *mut u8 = buf.spare_capacity_mut().as_mut_ptr().cast();
    // SAFETY: the spare room holds `src.len()` bytes from `dst`, which this function alone
    // writes, and `src` is another allocation (a borrowed slice cannot be `buf`'s spare room),
    // so `plain` may copy any part of it; every byte of the room up to `src.len()` is written
    // before the length takes it in.
    unsafe {
        copy_streaming(dst, src, plain);
        buf.set_len(at + src.len());
    }
}

impl Sink for MpiSink {
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        self.write_frame(frame, offset)
    }

    fn prepare_wait(&mut self) -> bool {
        // Confirmations that arrived meanwhile make room: then no waiting.
        !matches!(self.read_confirmations(), Ok(true))
    }

    fn wait_fds(&self, _fds: &mut Vec<libc::pollfd>) -> bool {
        false
    }

    fn wait(&mut self, d: Duration) {
        let until = Instant::now() + d;
        let mut backoff = Backoff::default();
        while Instant::now() < until {
            if self.shared.receiver_gone.load(Ordering::Acquire) {
                return;
            }
            match self.read_confirmations() {
                Ok(false) => {}
                Ok(true) | Err(_) => return,
            }
            if self.outbox.reap(&self.world).is_err() {
                return;
            }
            if !self.outbox.full() && self.sent - self.confirmed < WINDOW {
                return;
            }
            backoff.pause();
        }
    }

    fn close(mut self: Box<Self>, close: &[u8]) {
        let PieceCounts {
            direct,
            copied,
            taken,
        } = self.counts;
        tracing::debug!(
            "mpi: connection {} to rank {} closes: {direct} large pieces sent from the caller's \
             memory, {copied} copied, {taken} times the receiving process asked to take them",
            self.id,
            self.dest
        );
        let deadline = Instant::now() + CLOSE_WAIT;
        let mut backoff = Backoff::default();
        // The close frame needs room in the window like any other; a receiver that reads
        // nothing for this long sees the connection end without one.
        while self.check_receiver().is_ok() && Instant::now() < deadline {
            match self.room(close.len() as u64) {
                Ok(true) => {
                    let _ = self.send(Bytes::copy_from_slice(close));
                    break;
                }
                Ok(false) => backoff.pause(),
                Err(_) => break,
            }
        }
        // The empty message that ends the stream.
        let _ = self
            .outbox
            .push(&self.world, self.dest, self.tag, Bytes::new());
        let world = self.world.clone();
        self.outbox.finish(&world, deadline);
        world.forget_sink(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::{
        extend_streaming, Patience, PieceCopy, LARGE_PART, LOOKS_ONLY, MISSED_IN_A_ROW, READY_WAIT,
        SLOW_IN_A_ROW, STREAMED_PIECES, TIMED_COPY,
    };
    use std::time::Duration;

    /// Out of step, a sink waits for the receiver's word before each large piece; after
    /// three waits in a row without it, it only looks for the next pieces, and after those it
    /// tries the step again (`MpiSends::Direct`; by default it waits again). A word that comes
    /// resets the count of waits without it.
    #[test]
    fn a_sink_out_of_step_waits_looks_only_for_a_while_then_tries_the_step_again() {
        let mut p = Patience::new(true);
        for _ in 1..MISSED_IN_A_ROW {
            assert_eq!(p.next(), Some(READY_WAIT));
            p.unanswered(READY_WAIT);
        }
        assert_eq!(p.next(), Some(READY_WAIT));
        p.answered();
        for _ in 0..MISSED_IN_A_ROW {
            assert_eq!(p.next(), Some(READY_WAIT));
            p.unanswered(READY_WAIT);
        }
        for _ in 0..LOOKS_ONLY {
            let waited = p.next();
            assert_eq!(waited, Some(Duration::ZERO));
            // A look that finds nothing is no miss.
            p.unanswered(Duration::ZERO);
        }
        assert_eq!(p.next(), None, "the step is tried again");
        assert_eq!(p.next(), Some(READY_WAIT));
        // By default the end of the stretch waits for the word again.
        let mut p = Patience::new(false);
        for _ in 0..MISSED_IN_A_ROW {
            p.unanswered(READY_WAIT);
        }
        for _ in 0..LOOKS_ONLY {
            assert_eq!(p.next(), Some(Duration::ZERO));
        }
        assert_eq!(p.next(), Some(READY_WAIT));
    }

    /// Fast ordinary copies keep ordinary stores; three slow ones in a row stream the next
    /// pieces, and after them an ordinary copy is tried again. Small pieces are never streamed.
    #[test]
    fn slow_ordinary_copies_switch_large_pieces_to_streaming_for_a_while() {
        let mut c = PieceCopy::default();
        assert!(!c.streams(TIMED_COPY));
        // 100 KB in 12 us: a copy between processors that share a cache.
        c.copied(100_000, Duration::from_micros(12));
        assert!(!c.streams(TIMED_COPY));
        // 100 KB in 56 us: every line fetched from the other side. One or two such copies
        // in a row are taken for chance.
        let slow = Duration::from_micros(56);
        for _ in 1..SLOW_IN_A_ROW {
            c.copied(100_000, slow);
            assert!(!c.streams(TIMED_COPY));
        }
        c.copied(100_000, Duration::from_micros(12));
        for _ in 1..SLOW_IN_A_ROW {
            c.copied(100_000, slow);
        }
        assert!(!c.streams(TIMED_COPY));
        c.copied(100_000, slow);
        assert!(!c.streams(LARGE_PART - 1));
        for _ in 0..STREAMED_PIECES {
            assert!(c.streams(TIMED_COPY));
        }
        assert!(!c.streams(TIMED_COPY));
        // Slow again after the streamed pieces: streaming goes on at once.
        c.copied(100_000, slow);
        assert!(c.streams(TIMED_COPY));
        let mut c = PieceCopy::default();
        for _ in 0..SLOW_IN_A_ROW {
            c.copied(100_000, slow);
        }
        for _ in 0..STREAMED_PIECES {
            assert!(c.streams(TIMED_COPY));
        }
        // Fast after the streamed pieces: ordinary stores stay.
        c.copied(100_000, Duration::ZERO);
        assert!(!c.streams(TIMED_COPY));
        c.copied(100_000, slow);
        assert!(!c.streams(TIMED_COPY));
    }

    /// Every start within a line, before and after bytes already in the buffer, short copies
    /// (no whole line) and long ones: the bytes land in order, and the buffer's earlier bytes
    /// stay.
    #[test]
    fn streaming_appends_land_where_plain_ones_would() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for before in [0usize, 1, 7, 63, 64, 65, 100] {
            for len in [0usize, 1, 63, 64, 65, 127, 128, 200, 4096, 65_537] {
                for from in [0usize, 1, 13, 64] {
                    let part = &src[from..from + len];
                    let mut buf: Vec<u8> = (0..before).map(|i| i as u8 ^ 0xa5).collect();
                    let mut want = buf.clone();
                    extend_streaming(&mut buf, part);
                    want.extend_from_slice(part);
                    assert!(buf == want, "{before} bytes before, {len} from {from}");
                }
            }
        }
    }
}
