//! A single-producer, single-consumer byte ring in memory shared by two processes, with a queue
//! of descriptors of parts that the consumer copies straight out of the producer's memory.
//!
//! Layout: a control block of one page, then the ring (a power of two of bytes). The bytes go
//! in chunks, each an 8-byte header (a chunk number and the length) in front of its payload,
//! padded to 8 bytes. The producer writes a chunk's payload, then its header; the consumer
//! waits on the header of the next chunk, whose line also brings the start of the payload (one
//! cache miss per small message, not two), and advances `head` (bytes ever read) past each
//! chunk it has read, which tells the producer the room it has. It tells the head after each
//! chunk of the general path, but after small chunks only once an eighth of the ring has been
//! read or the producer waits (see [`Consumer::read_small`]): then the line of the head does
//! not change hands with every small message. Small frames, the latency-bound ones, are
//! written and read whole, a word at a time ([`Producer::write_small`] and
//! [`Consumer::read_small`]); everything else takes the general path. A byte becomes visible only
//! with its chunk's header, so a producer that dies half-way leaves nothing torn behind, only a
//! message that stops. The line where the consumer looks for the next header may hold payload
//! of an earlier lap, which could read as that header: the producer overwrites it before it
//! publishes the chunk that ends there (see [`Producer::close_chunk`]). Each side keeps its
//! own indices privately and reads the other's from shared memory, where the other (or a
//! misbehaving process in its place) may write anything: every value read from there is
//! checked before it is used, and the shared bytes are touched only through atomics and
//! volatile copies (the small paths' words are atomics too).
//!
//! Where the consumer can read the producer's memory ([`super::remote`]), parts of a message
//! may travel by reference: the producer posts a descriptor (ring position, length, address in
//! its own memory); when the consumer's reading reaches that position it reads the bytes from
//! there and marks the descriptor done. With offers on (single copy), a large part is offered
//! from the caller's memory (one copy in all) and the send waits for the consumer to read it.
//! A consumer that is not receiving does not take the offer within [`PATIENCE`]: then the part
//! is taken back and copied into a buffer of the producer's, offered in its place, and the send
//! returns, as a socket's buffers let a tcp send return; so does whatever does not fit the
//! ring's room. Without offers every part streams through the ring, and only what has waited
//! [`PATIENCE`] for room goes to such a buffer. Buffers take at most [`BUFFERED`] bytes per
//! connection; beyond that a send waits.

use super::memory::{copy_in, copy_out, Mapping};
use super::remote::Remote;
use crate::transport::Frame;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes of the control block in front of the ring.
pub(crate) const CONTROL: usize = 4096;
/// Smallest and largest ring.
pub(crate) const MIN_RING: usize = 4096;
pub(crate) const MAX_RING: usize = 1 << 30;
/// Parts at least this large are offered from the caller's memory.
const REMOTE_MIN: usize = 32 * 1024;
/// Most bytes a producer keeps in buffers for its consumer to read: what the buffers of a
/// loopback tcp socket hold.
pub(crate) const BUFFERED: usize = 4 << 20;
/// How long an offered part waits for the consumer to start reading it before the producer
/// copies it into a buffer and lets the send return, so that sides that both send before they
/// receive never wait for each other.
const PATIENCE: Duration = Duration::from_micros(100);
/// After a part was taken back, this many large parts are buffered at once before the next is
/// offered again, doubling (up to [`MAX_EAGER`]) while offers keep failing: a consumer that is
/// busy elsewhere when data comes costs one wait of [`PATIENCE`] now and then, while one that
/// is receiving gets every large part in one copy.
const FIRST_EAGER: u32 = 4;
const MAX_EAGER: u32 = 256;

// Offsets of the control words, each on a cache line of its own where both sides write.
/// The consumer is parked and wants a wake-up (consumer sets, producer clears).
const CONSUMER_PARKED: usize = 64;
/// Bytes ever read (consumer).
const HEAD: usize = 128;
/// The producer waits for room or for a descriptor (producer sets, consumer clears).
const PRODUCER_WAITING: usize = 192;
/// The consumer stopped reading (its port closed).
const CONSUMER_CLOSED: usize = 256;
/// The last descriptor the consumer is done with (read, or skipped when taken back).
const SEEN: usize = 320;
/// The descriptor slots, [`SLOTS`] of [`SLOT`] bytes: `sequence << 2 | state`, then ring
/// position, length and address. Descriptor `k` lives in slot `k % SLOTS`.
const SLOT0: usize = 512;
const SLOT: usize = 32;
const SLOTS: u64 = 64;

const WITHDRAWN: u64 = 0;
const OFFERED: u64 = 1;
const TAKEN: u64 = 2;
const DONE: u64 = 3;

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the peer corrupted the shared ring: {what}"),
    )
}

/// The shared memory of one connection.
pub(crate) struct Ring {
    map: Mapping,
    cap: u64,
}

impl Ring {
    /// The ring in `map`, whose length must be [`CONTROL`] plus a power of two between
    /// [`MIN_RING`] and [`MAX_RING`].
    pub(crate) fn new(map: Mapping) -> io::Result<Ring> {
        let cap = map.len().saturating_sub(CONTROL);
        if !cap.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&cap) {
            return Err(corrupt("a ring that is not a power of two in size"));
        }
        Ok(Ring {
            map,
            cap: cap as u64,
        })
    }

    /// The size of the mapping for a ring of `cap` bytes.
    pub(crate) fn mapping_len(cap: usize) -> usize {
        CONTROL + cap
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= CONTROL);
        // SAFETY: `off` is one of the offsets above: 8-aligned (the mapping is page-aligned)
        // and inside the control block, which lies inside the mapping that `self` keeps alive.
        // The other process writes these words only as whole aligned words (or, misbehaving,
        // however it likes, which changes values we check, not their type: every bit pattern
        // is a valid u64).
        unsafe { &*(self.map.ptr().add(off) as *const AtomicU64) }
    }

    /// The ring's word at position `pos` (8-aligned): a chunk header, or a word of a small
    /// chunk's payload (see [`Producer::write_small`]).
    fn header(&self, pos: u64) -> &AtomicU64 {
        debug_assert!(pos % 8 == 0);
        let at = (pos & (self.cap - 1)) as usize;
        // SAFETY: `at` is 8-aligned and `at + 8 <= cap` (the ring's size is a power of two of
        // at least 4096), so the word lies inside the ring, inside the mapping that `self` keeps
        // alive; the other process writes it only as a whole aligned word (or, misbehaving,
        // however it likes: every bit pattern is a valid u64).
        unsafe { &*(self.map.ptr().add(CONTROL + at) as *const AtomicU64) }
    }

    /// Word `field` (0: state, 1: position, 2: length, 3: address) of descriptor `seq`.
    fn slot(&self, seq: u64, field: usize) -> &AtomicU64 {
        self.word(SLOT0 + (seq % SLOTS) as usize * SLOT + field * 8)
    }

    /// Copies ring bytes from position `pos` into `dst` (at most the ring's size).
    fn copy_from(&self, pos: u64, dst: &mut [u8]) {
        debug_assert!(dst.len() as u64 <= self.cap);
        let at = (pos & (self.cap - 1)) as usize;
        let first = dst.len().min(self.cap as usize - at);
        let (a, b) = dst.split_at_mut(first);
        // SAFETY: `at + first <= cap` and `b.len() <= cap` (callers copy at most `cap` bytes),
        // so both ranges lie inside the ring, which starts and ends on 8-byte boundaries inside
        // the live mapping: so do the aligned words that overlap them.
        unsafe {
            let ring = self.map.ptr().add(CONTROL);
            copy_in(a, ring.add(at));
            copy_in(b, ring);
        }
    }

    /// Copies `src` into the ring at position `pos` (at most the ring's size).
    fn copy_to(&self, pos: u64, src: &[u8]) {
        debug_assert!(src.len() as u64 <= self.cap);
        let at = (pos & (self.cap - 1)) as usize;
        let first = src.len().min(self.cap as usize - at);
        // SAFETY: as in `copy_from`; and the ring starts and ends on 8-byte boundaries, so the
        // aligned words that overlap the ranges lie inside it too. Only the producer writes
        // the ring's bytes.
        unsafe {
            let ring = self.map.ptr().add(CONTROL);
            copy_out(ring.add(at), &src[..first]);
            copy_out(ring, &src[first..]);
        }
    }
}

/// What the consumer should tell the producer.
#[derive(Default, Clone, Copy)]
pub(crate) struct Signal {
    /// Write a wake-up byte: the producer waits.
    pub wake: bool,
}

/// Bytes a chunk of `len` payload bytes takes in the ring.
fn chunk_size(len: u64) -> u64 {
    (8 + len).div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN
}

/// Frames up to this many bytes (header included) take [`Producer::write_small`]: a multiple
/// of 8, and one chunk even in the smallest ring.
const SMALL_FRAME: usize = 256;
const _: () = assert!(SMALL_FRAME % 8 == 0 && SMALL_FRAME as u64 <= (MIN_RING as u64 / 8) - 8);

/// Chunks start on cache lines: the consumer waits on the line of the next header, which the
/// producer then has to itself while it writes the chunk.
const CHUNK_ALIGN: u64 = 64;

/// A chunk header: its number and its length.
fn header_word(number: u32, len: u64) -> u64 {
    u64::from(number) << 32 | len
}

/// Packs bytes into the ring's words from position `at` on, each word stored once and whole,
/// in the byte order in which the consumer copies words out (see [`Ring::copy_from`]): byte
/// `i` of a word at bits `8 i` of its little-endian value. Relaxed stores: the chunk header's
/// store in `publish` makes them visible.
struct WordPacker<'r> {
    ring: &'r Ring,
    /// Where the next whole word goes.
    at: u64,
    /// Bytes not yet stored, at the low end, and how many there are (0 to 7).
    pending: u64,
    pending_len: u32,
}

impl<'r> WordPacker<'r> {
    fn new(ring: &'r Ring, at: u64) -> Self {
        WordPacker {
            ring,
            at,
            pending: 0,
            pending_len: 0,
        }
    }

    #[inline(always)]
    fn store(&mut self, v: u64) {
        self.ring
            .header(self.at)
            .store(v.to_le(), Ordering::Relaxed);
        self.at += 8;
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        let shift = 8 * self.pending_len;
        for w in &mut words {
            let v = u64::from_le_bytes(w.try_into().expect("chunks of 8 bytes"));
            if shift == 0 {
                self.store(v);
            } else {
                self.store(self.pending | v << shift);
                self.pending = v >> (64 - shift);
            }
        }
        let tail = words.remainder();
        if tail.is_empty() {
            return;
        }
        // The last 1 to 7 bytes as one number.
        let mut v = 0u64;
        for (k, &b) in tail.iter().enumerate() {
            v |= u64::from(b) << (8 * k);
        }
        let filled = self.pending_len + tail.len() as u32;
        if filled >= 8 {
            // `pending_len` is at least 1 here, so the shifts stay below 64.
            self.store(self.pending | v << shift);
            self.pending = v >> (64 - shift);
            self.pending_len = filled - 8;
        } else {
            self.pending |= v << shift;
            self.pending_len = filled;
        }
    }

    /// Stores the last, partial word, its unused bytes zero.
    #[inline(always)]
    fn flush(&mut self) {
        if self.pending_len > 0 {
            let v = self.pending;
            self.store(v);
        }
    }
}

/// The reading side of a ring.
pub(crate) struct Consumer {
    ring: Ring,
    /// Where the next chunk's header is.
    head: u64,
    /// The head as last told the producer (see [`Consumer::read_small`]).
    told: u64,
    /// The number of the next chunk.
    number: u32,
    /// The chunk being read: the position of its next byte, the bytes left, and where it ends.
    chunk: Option<(u64, u64, u64)>,
    /// Sequence number of the next descriptor.
    next_seq: u64,
    /// A part being read from the producer's memory: address and bytes left.
    taken: Option<(u64, u64)>,
}

impl Consumer {
    pub(crate) fn new(ring: Ring) -> Consumer {
        Consumer {
            ring,
            head: 0,
            told: 0,
            number: 1,
            chunk: None,
            next_seq: 1,
            taken: None,
        }
    }

    /// Finishes with descriptor `next_seq` (read, or taken back) and moves on.
    fn next_descriptor(&mut self) {
        self.ring.word(SEEN).store(self.next_seq, Ordering::Relaxed);
        self.next_seq += 1;
    }

    /// The ring position of the next descriptor, if it has been offered (descriptors taken
    /// back before we got to them are skipped: their bytes come by another descriptor or
    /// through the ring).
    fn offered(&mut self) -> io::Result<Option<u64>> {
        loop {
            let s = self.ring.slot(self.next_seq, 0).load(Ordering::Acquire);
            let (seq, state) = (s >> 2, s & 3);
            if seq != self.next_seq {
                // The slot still holds the descriptor before (or none): nothing posted yet.
                if seq != 0 && seq + SLOTS != self.next_seq {
                    return Err(corrupt("a descriptor out of sequence"));
                }
                return Ok(None);
            }
            match state {
                WITHDRAWN => self.next_descriptor(),
                OFFERED => {
                    let pos = self.ring.slot(seq, 1).load(Ordering::Relaxed);
                    if pos < self.head || pos % CHUNK_ALIGN != 0 {
                        return Err(corrupt("a descriptor behind the reader"));
                    }
                    return Ok(Some(pos));
                }
                _ => return Err(corrupt("a descriptor in a state only the reader sets")),
            }
        }
    }

    /// Whether anything is there to read.
    pub(crate) fn has_data(&self) -> bool {
        self.taken.is_some()
            || self.chunk.is_some()
            || (self.ring.header(self.head).load(Ordering::SeqCst) >> 32) as u32 == self.number
            || self.ring.slot(self.next_seq, 0).load(Ordering::SeqCst) >> 2 == self.next_seq
    }

    /// Reads available bytes (from the ring, or from the producer's memory through `remote`)
    /// into `dst`; `Ok(0)` when there are none now.
    pub(crate) fn read(
        &mut self,
        dst: &mut [u8],
        remote: Option<&Remote>,
        signal: &mut Signal,
    ) -> io::Result<usize> {
        // Bytes of chunks copied so far: a read goes on to the next chunk while it is there and
        // `dst` has room.
        let mut got = 0;
        if self.chunk.is_none() && self.taken.is_none() {
            let rest;
            (got, rest) = self.read_small(dst, signal);
            if got == dst.len() || !rest {
                return Ok(got);
            }
        }
        loop {
            if let Some((pos, left, end)) = self.chunk {
                let n = ((dst.len() - got) as u64).min(left) as usize;
                self.ring.copy_from(pos, &mut dst[got..got + n]);
                got += n;
                if left > n as u64 {
                    self.chunk = Some((pos + n as u64, left - n as u64, end));
                    return Ok(got);
                }
                self.chunk = None;
                self.head = end;
                self.tell_head(signal);
                if got == dst.len() {
                    return Ok(got);
                }
                continue;
            }
            if got > 0 && self.taken.is_none() {
                // Only more chunks: a part read from the producer's memory starts a read of
                // its own.
                match self.next_chunk()? {
                    true => continue,
                    false => return Ok(got),
                }
            }
            if let Some((addr, left)) = self.taken {
                let remote = remote.ok_or_else(|| corrupt("a descriptor nobody can read"))?;
                let n = (dst.len() as u64).min(left) as usize;
                let got = remote.read(&mut dst[..n], addr)?;
                if got == 0 && n > 0 {
                    return Err(corrupt("a descriptor of memory that cannot be read"));
                }
                let left = left - got as u64;
                if left == 0 {
                    self.taken = None;
                    self.ring
                        .slot(self.next_seq, 0)
                        .store(self.next_seq << 2 | DONE, Ordering::SeqCst);
                    self.next_descriptor();
                    self.signal_producer(signal);
                } else {
                    self.taken = Some((addr.wrapping_add(got as u64), left));
                }
                return Ok(got);
            }
            // Between chunks: a descriptor offered here comes first.
            let before = self.offered()?;
            if before == Some(self.head) {
                let seq = self.next_seq;
                match self.ring.slot(seq, 0).compare_exchange(
                    seq << 2 | OFFERED,
                    seq << 2 | TAKEN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        let len = self.ring.slot(seq, 2).load(Ordering::Relaxed);
                        let addr = self.ring.slot(seq, 3).load(Ordering::Relaxed);
                        if len == 0 {
                            return Err(corrupt("an empty descriptor"));
                        }
                        self.taken = Some((addr, len));
                    }
                    // Taken back just now: the next descriptor or the ring has its bytes.
                    Err(now) if now == seq << 2 | WITHDRAWN => self.next_descriptor(),
                    Err(_) => return Err(corrupt("a descriptor changed while taken")),
                }
                continue;
            }
            if !self.next_chunk_before(before)? {
                return Ok(0);
            }
        }
    }

    /// Reads whole small chunks (see [`Producer::write_small`]) while the next one is there,
    /// fits what is left of `dst`, and no descriptor is posted: the way of most latency-bound
    /// messages, a word at a time and without the general path's bookkeeping. Anything else
    /// (a descriptor, a large chunk, a value out of range) is left to the general path, which
    /// reads it or names what is wrong with it. Returns the bytes read, and whether anything
    /// may be left for the general path (false: no chunk and no descriptor was there).
    fn read_small(&mut self, dst: &mut [u8], signal: &mut Signal) -> (usize, bool) {
        let mut got = 0;
        let rest = loop {
            // The slot of the next descriptor holds none, or the one `SLOTS` before: nothing
            // posted (anything else is the general path's to read or report).
            let seq = self.ring.slot(self.next_seq, 0).load(Ordering::Acquire) >> 2;
            if seq != 0 && seq + SLOTS != self.next_seq {
                break true;
            }
            let h = self.ring.header(self.head).load(Ordering::Acquire);
            if (h >> 32) as u32 != self.number {
                break false;
            }
            let len = (h & 0xffff_ffff) as usize;
            if len == 0 || len > SMALL_FRAME.min(dst.len() - got) {
                break true;
            }
            // Word by word straight into `dst`. Acquired with the header above: the producer
            // wrote these words before it.
            let word = |i: usize| {
                self.ring
                    .header(self.head + 8 + 8 * i as u64)
                    .load(Ordering::Relaxed)
                    .to_ne_bytes()
            };
            let mut whole = dst[got..got + len].chunks_exact_mut(8);
            let mut i = 0;
            for to in &mut whole {
                to.copy_from_slice(&word(i));
                i += 1;
            }
            let tail = whole.into_remainder();
            if !tail.is_empty() {
                tail.copy_from_slice(&word(i)[..tail.len()]);
            }
            got += len;
            self.number = self.number.wrapping_add(1);
            self.head += chunk_size(len as u64);
        };
        // The head is told the producer once an eighth of the ring has been read since it was
        // last told, or at once when the producer waits: not for every small chunk, which
        // would make the line of the head change hands for each message. A producer that waits
        // for room and is not seen waiting (the two sides' stores crossed) still gets it: it
        // waits only with the ring full as far as it knows, which leaves more than an eighth
        // of the ring for this side to read before it must tell the head.
        if got > 0
            && (self.head - self.told >= self.ring.cap / 8
                || self.ring.word(PRODUCER_WAITING).load(Ordering::Relaxed) != 0)
        {
            self.tell_head(signal);
        }
        (got, rest)
    }

    /// Tells the producer the head: the room it has.
    fn tell_head(&mut self, signal: &mut Signal) {
        // Sequentially consistent, as is the producer's announcement that it waits and its
        // look at the head after it: one of the two sides sees the other.
        self.ring.word(HEAD).store(self.head, Ordering::SeqCst);
        self.told = self.head;
        self.signal_producer(signal);
    }

    /// Starts the next chunk if it is there and no descriptor comes first.
    fn next_chunk(&mut self) -> io::Result<bool> {
        match self.offered()? {
            Some(p) if p == self.head => Ok(false),
            before => self.next_chunk_before(before),
        }
    }

    /// Starts the next chunk if it is there; `before` is the position of the next descriptor,
    /// past the head, which no chunk may cross.
    fn next_chunk_before(&mut self, before: Option<u64>) -> io::Result<bool> {
        let h = self.ring.header(self.head).load(Ordering::Acquire);
        if (h >> 32) as u32 != self.number {
            // The producer publishes every chunk in front of a descriptor before the
            // descriptor, which was acquired: one ahead of a chunk that is not there names
            // bytes never written, which no wait would bring (and while the descriptor is
            // there, `has_data` says there is data, so the receiver would never park).
            if before.is_some() {
                return Err(corrupt("a descriptor ahead of bytes never written"));
            }
            return Ok(false);
        }
        let len = h & 0xffff_ffff;
        let end = self.head + chunk_size(len);
        if len == 0 || end - self.head > self.ring.cap || before.is_some_and(|p| end > p) {
            return Err(corrupt("a chunk header out of range"));
        }
        self.number = self.number.wrapping_add(1);
        self.chunk = Some((self.head + 8, len, end));
        Ok(true)
    }

    /// After a sequentially consistent store that may give the producer what it waits for:
    /// whether it waits and must be woken.
    fn signal_producer(&self, signal: &mut Signal) {
        let w = self.ring.word(PRODUCER_WAITING);
        if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::AcqRel) != 0 {
            signal.wake = true;
        }
    }

    /// Announces that the consumer is about to park; false when data arrived meanwhile.
    pub(crate) fn prepare_park(&self) -> bool {
        // Sequentially consistent, as are the producer's publication and its look at this
        // flag after it: one of the two sides sees the other.
        self.ring.word(CONSUMER_PARKED).store(1, Ordering::SeqCst);
        !self.has_data()
    }

    /// Tells the producer that nobody reads any more.
    pub(crate) fn close(&self) {
        self.ring.word(CONSUMER_CLOSED).store(1, Ordering::SeqCst);
    }
}

/// The producer's record of which line starts of the ring hold payload (a chunk covered them)
/// rather than a header: private memory, one bit a line, so that only a chunk that ends where
/// payload lies costs a store to shared memory (see [`Producer::close_chunk`]).
struct PayloadLines {
    bits: Vec<u64>,
    /// Lines of the ring: a power of two, and a multiple of 64.
    lines: u64,
}

impl PayloadLines {
    fn new(cap: u64) -> PayloadLines {
        let lines = cap / CHUNK_ALIGN;
        PayloadLines {
            bits: vec![0; lines.div_ceil(64) as usize],
            lines,
        }
    }

    /// Notes a chunk written from ring position `at` up to `end` (line-aligned): a header at
    /// its first line, payload at the others.
    fn chunk(&mut self, at: u64, end: u64) {
        self.take(at);
        let (mut line, last) = (at / CHUNK_ALIGN + 1, end / CHUNK_ALIGN);
        // Whole words of bits at a time: a chunk of 32 KiB covers 511 lines.
        while line < last {
            let i = line & (self.lines - 1);
            let bit = i % 64;
            let n = (64 - bit).min(last - line);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1 << n) - 1) << bit
            };
            self.bits[(i / 64) as usize] |= mask;
            line += n;
        }
    }

    /// Whether the line at ring position `pos` holds payload; from now on it does not.
    fn take(&mut self, pos: u64) -> bool {
        let i = (pos / CHUNK_ALIGN) & (self.lines - 1);
        let (word, bit) = (&mut self.bits[(i / 64) as usize], 1 << (i % 64));
        let was = *word & bit != 0;
        *word &= !bit;
        was
    }
}

/// A descriptor the producer posted and the consumer has not finished.
struct Lent {
    seq: u64,
    /// The bytes, when they are a copy of the producer's (the caller's own memory otherwise).
    copy: Option<Vec<u8>>,
}

/// A part of the current frame offered from the caller's memory, waiting for the consumer.
#[derive(Clone, Copy)]
struct Offer {
    seq: u64,
    /// Frame offset and length of the part.
    at: u64,
    len: u64,
    since: Instant,
    /// Taken back and buffered when not taken within [`PATIENCE`].
    patient: bool,
}

/// The writing side of a ring.
pub(crate) struct Producer {
    ring: Ring,
    /// The end of what is written (unpadded while a chunk is open).
    tail: u64,
    /// The chunk being written: where its header goes, and its length so far.
    open: Option<(u64, u64)>,
    /// The number of the next chunk.
    number: u32,
    /// The consumer's head as last read.
    head: u64,
    /// The last descriptor posted.
    seq: u64,
    /// Descriptors posted and not known to be done, oldest first.
    lent: VecDeque<Lent>,
    /// Bytes in the copies of `lent`.
    buffered: usize,
    offer: Option<Offer>,
    /// The consumer can read our memory: buffers may hold what the ring has no room for.
    remote: bool,
    /// Large parts are offered from the caller's memory (single copy); otherwise every part
    /// streams through the ring.
    offers: bool,
    /// Since when a part has waited for room in the ring, while parts stream through it: after
    /// [`PATIENCE`] the rest goes to a buffer, so that a consumer that is not reading does not
    /// hold the send.
    full_since: Option<Instant>,
    /// A part that is due to be buffered found no buffer room (or descriptor slot) left at the
    /// last write: nothing is due before the consumer frees some, and it says so when it does.
    buffers_full: bool,
    /// Large parts still to buffer at once before offering one again.
    eager_left: u32,
    /// The next value of `eager_left` after a failed offer.
    eager_next: u32,
    /// Which line starts of the ring hold payload of a chunk that covered them, rather than a
    /// header (see [`PayloadLines`]).
    payload_lines: PayloadLines,
}

/// What the producer should tell the consumer.
#[derive(Default, Clone, Copy)]
pub(crate) struct Wake {
    /// Write a wake-up byte: the consumer is parked.
    pub consumer: bool,
}

impl Producer {
    /// A producer whose consumer can read our memory if `remote`, and which offers large parts
    /// from the caller's memory if `offers` as well.
    pub(crate) fn new(ring: Ring, remote: bool, offers: bool) -> Producer {
        let payload_lines = PayloadLines::new(ring.cap);
        Producer {
            ring,
            tail: 0,
            open: None,
            number: 1,
            head: 0,
            seq: 0,
            lent: VecDeque::new(),
            buffered: 0,
            offer: None,
            remote,
            offers: offers && remote,
            full_since: None,
            buffers_full: false,
            eager_left: 0,
            eager_next: FIRST_EAGER,
            payload_lines,
        }
    }

    /// Free room, reading the consumer's head again when the known room is less than `want`.
    fn room(&mut self, want: u64) -> io::Result<u64> {
        let known = self.ring.cap - (self.tail - self.head);
        if known >= want {
            return Ok(known);
        }
        let head = self.ring.word(HEAD).load(Ordering::Acquire);
        // The consumer's head is a chunk boundary (line-aligned) between the last one it was
        // and the tail: anything else would let the padding of a chunk overrun it.
        if head < self.head || head > self.tail || head % CHUNK_ALIGN != 0 {
            return Err(corrupt("a reader position out of range"));
        }
        self.head = head;
        Ok(self.ring.cap - (self.tail - self.head))
    }

    /// Drops the copies the consumer has read.
    fn reap(&mut self) {
        let ring = &self.ring;
        let mut freed = 0;
        self.lent.retain(|l| {
            let done = ring.slot(l.seq, 0).load(Ordering::Acquire) == l.seq << 2 | DONE;
            if done {
                freed += l.copy.as_ref().map_or(0, Vec::len);
            }
            !done
        });
        self.buffered -= freed;
    }

    /// Whether a descriptor of a copy of `len` bytes may be posted now.
    fn can_buffer(&self, len: u64) -> bool {
        let seen = self.ring.word(SEEN).load(Ordering::Relaxed);
        self.remote
            && self.buffered as u64 + len <= BUFFERED as u64
            && self.seq + 1 - seen.min(self.seq) <= SLOTS
            && self.lent.len() < SLOTS as usize
    }

    /// Appends what fits of `bytes` to the open chunk, opening one if there is none; returns
    /// how many it took.
    fn append(&mut self, bytes: &[u8]) -> io::Result<u64> {
        if self.open.is_some_and(|(_, len)| len == self.max_chunk()) {
            self.close_chunk();
        }
        if self.open.is_none() {
            // A header and at least one byte (padded to a line).
            if self.room(CHUNK_ALIGN)? < CHUNK_ALIGN {
                return Ok(0);
            }
            self.open = Some((self.tail, 0));
            self.tail += 8;
        }
        let (at, len) = self.open.expect("opened above");
        let want = (bytes.len() as u64).min(self.max_chunk() - len);
        let n = self.room(want)?.min(want);
        // One copy at most the ring's size, as `copy_to` requires.
        self.ring.copy_to(self.tail, &bytes[..n as usize]);
        self.tail += n;
        self.open = Some((at, len + n));
        Ok(n)
    }

    /// The longest chunk: short enough that the consumer, which frees a chunk's room once it
    /// has read all of it, frees room often while the producer fills the rest.
    fn max_chunk(&self) -> u64 {
        (self.ring.cap / 8).min(32 * 1024) - 8
    }

    /// Publishes the open chunk, if it has bytes.
    fn close_chunk(&mut self) {
        if let Some((at, len)) = self.open.take() {
            if len == 0 {
                self.tail = at;
                return;
            }
            let end = at + chunk_size(len);
            // The consumer looks for the next header at `end` once it has read this chunk.
            // Where a chunk of an earlier lap covered that line, its word is payload, which
            // may read as the header the consumer waits for (bytes never sent, taken as a
            // chunk): it gets this chunk's number first, which the next chunk's never is,
            // made visible with this header. Only then, so small chunks one after another
            // store nothing more, and the line is the next chunk's anyway. The line is
            // behind the head: a chunk that fills the ring ends at the head's line, which
            // holds a header.
            self.payload_lines.chunk(at, end);
            if self.payload_lines.take(end) {
                self.ring
                    .header(end)
                    .store(header_word(self.number, 0), Ordering::Relaxed);
            }
            // Sequentially consistent, as are the consumer's announcement that it parks and
            // its look at this header after it: one of the two sides sees the other.
            self.ring
                .header(at)
                .store(header_word(self.number, len), Ordering::SeqCst);
            self.number = self.number.wrapping_add(1);
            self.tail = end;
        }
    }

    /// Posts descriptor `seq + 1` for `len` bytes at `addr`, read after what is written.
    fn post(&mut self, addr: u64, len: u64, copy: Option<Vec<u8>>) -> u64 {
        self.close_chunk();
        self.seq += 1;
        let seq = self.seq;
        let d = |field: usize, v: u64| self.ring.slot(seq, field).store(v, Ordering::Relaxed);
        d(1, self.tail);
        d(2, len);
        d(3, addr);
        self.ring
            .slot(seq, 0)
            .store(seq << 2 | OFFERED, Ordering::SeqCst);
        self.buffered += copy.as_ref().map_or(0, Vec::len);
        self.lent.push_back(Lent { seq, copy });
        seq
    }

    /// Posts a copy of `bytes`.
    fn post_copy(&mut self, bytes: &[u8]) {
        let copy = bytes.to_vec();
        let (addr, len) = (copy.as_ptr() as u64, copy.len() as u64);
        self.post(addr, len, Some(copy));
    }

    /// Whether `slice` may be posted as a copy, with no descriptors of the caller's memory
    /// outstanding.
    fn may_copy(&self, len: u64) -> bool {
        self.offer.is_none() && self.can_buffer(len)
    }

    /// Writes what it can of `frame` from `offset` on; returns how many bytes of the frame are
    /// done (in the ring, in buffers the consumer will read, or read by the consumer from the
    /// caller's memory).
    pub(crate) fn write(
        &mut self,
        frame: &Frame<'_>,
        offset: u64,
        wake: &mut Wake,
    ) -> io::Result<u64> {
        if offset == 0 && frame.len <= SMALL_FRAME as u64 {
            if let Some(n) = self.write_small(frame, wake)? {
                return Ok(n);
            }
        }
        if !self.lent.is_empty() {
            self.reap();
        }
        let start_number = self.number;
        let start_seq = self.seq;
        self.buffers_full = false;
        // Checked before anything new is written, not before a part the consumer has read is
        // counted: a consumer may close as soon as it has read everything.
        let mut open_checked = false;
        let mut done = offset;
        let mut at = 0u64;
        for part in std::iter::once(&frame.header[..]).chain(frame.parts.iter().copied()) {
            let len = part.len() as u64;
            if done >= at + len {
                at += len;
                continue;
            }
            if let Some(o) = self.offer {
                debug_assert_eq!(o.at, at);
                let slot = self.ring.slot(o.seq, 0);
                let s = slot.load(Ordering::Acquire);
                if s == o.seq << 2 | DONE {
                    self.end_offer(o);
                    done = at + o.len;
                    at += len;
                    continue;
                }
                if s != o.seq << 2 | OFFERED && s != o.seq << 2 | TAKEN {
                    return Err(corrupt("a descriptor in a state nobody set"));
                }
                let late = o.patient && s == o.seq << 2 | OFFERED && o.since.elapsed() > PATIENCE;
                if late && !self.can_buffer(len) {
                    self.buffers_full = true;
                }
                if !late
                    || !self.can_buffer(len)
                    || slot
                        .compare_exchange(
                            s,
                            o.seq << 2 | WITHDRAWN,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_err()
                {
                    // Taken, or not yet late: wait for the consumer.
                    break;
                }
                // Not taken in time: buffered in its place, at the same position.
                self.lent.retain(|l| l.seq != o.seq);
                self.offer = None;
                self.eager_left = self.eager_next;
                self.eager_next = (self.eager_next * 2).min(MAX_EAGER);
                self.post_copy(part);
                done = at + len;
                at += len;
                continue;
            }
            if !open_checked {
                self.check_open()?;
                open_checked = true;
            }
            let from = done - at;
            if from == 0 && self.offers && part.len() >= REMOTE_MIN {
                if self.eager_left > 0 && self.may_copy(len) {
                    self.eager_left -= 1;
                    self.post_copy(part);
                } else if self.can_buffer(0) {
                    // The consumer reads it from the caller's memory when it gets there: at
                    // once when it is receiving.
                    let patient = self.eager_left == 0;
                    let seq = self.post(part.as_ptr() as u64, len, None);
                    self.offer = Some(Offer {
                        seq,
                        at,
                        len,
                        since: Instant::now(),
                        patient,
                    });
                    break;
                } else {
                    // Every descriptor slot is taken: wait.
                    break;
                }
                done = at + len;
                at += len;
                continue;
            }
            let mut n = 0;
            while from + n < len {
                let k = self.append(&part[(from + n) as usize..])?;
                if k == 0 {
                    break;
                }
                n += k;
            }
            done += n;
            if n > 0 {
                self.full_since = None;
            }
            if n < len - from {
                let rest = &part[(from + n) as usize..];
                if !self.overflow_due() {
                    // Full, and not yet for long: wait for room.
                    break;
                }
                if !self.may_copy(rest.len() as u64) {
                    // Full, and no more may be buffered: wait for room or for buffers to free.
                    self.buffers_full = self.remote;
                    break;
                }
                self.post_copy(rest);
                done = at + len;
            }
            at += len;
        }
        self.publish(start_number, start_seq, wake);
        if done == frame.len {
            // The next frame waits for room afresh.
            self.full_since = None;
        }
        Ok(done - offset)
    }

    /// How far the frame written up to `offset` has come, writing nothing: as
    /// [`write`](Producer::write) counts it, where only the part offered at `offset`, once the
    /// consumer has finished reading it from this process's memory, moves it on. For a consumer
    /// that has closed its end: what it read before it went still counts, and nothing more
    /// goes to it.
    pub(crate) fn settled(&mut self, offset: u64) -> u64 {
        let Some(o) = self.offer.filter(|o| o.at == offset) else {
            return offset;
        };
        let s = self.ring.slot(o.seq, 0).load(Ordering::Acquire);
        if s != o.seq << 2 | DONE {
            return offset;
        }
        self.end_offer(o);
        o.at + o.len
    }

    /// Ends offer `o`, which the consumer has finished reading: an offer taken in time lets
    /// the next large parts be offered again.
    fn end_offer(&mut self, o: Offer) {
        if o.patient {
            self.eager_next = FIRST_EAGER;
        }
        self.offer = None;
    }

    /// Whether what the ring has no room for should go to a buffer now: at once when large
    /// parts are offered (a consumer that takes offers reads buffers as fast), and while parts
    /// stream through the ring only once the ring has stayed full for [`PATIENCE`]: a consumer
    /// that is reading frees room sooner, and buffers reach it more slowly than the ring.
    fn overflow_due(&mut self) -> bool {
        if self.offers || !self.remote {
            return true;
        }
        let since = *self.full_since.get_or_insert_with(Instant::now);
        since.elapsed() > PATIENCE
    }

    /// Fails when the consumer has stopped reading.
    fn check_open(&self) -> io::Result<()> {
        if self.ring.word(CONSUMER_CLOSED).load(Ordering::Relaxed) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "receive port closed",
            ));
        }
        Ok(())
    }

    /// Writes a whole small frame as one chunk, when nothing else is under way (no part lent,
    /// offered or in an open chunk) and the ring has room, without the general path's
    /// bookkeeping of parts, offers and buffers: most latency-bound messages take this way.
    /// The frame's bytes are packed into whole words on the way (see [`WordPacker`]), so that
    /// each word of the ring is written once, with no copy through private memory. `None`
    /// when the general path must take the frame.
    fn write_small(&mut self, frame: &Frame<'_>, wake: &mut Wake) -> io::Result<Option<u64>> {
        let len = frame.len;
        if len == 0 || !self.lent.is_empty() || self.offer.is_some() || self.open.is_some() {
            return Ok(None);
        }
        // A frame whose parts do not add up to its length goes the general way, which writes
        // what the parts hold: the words written below must stay within the chunk.
        let parts_len: u64 = frame.parts.iter().map(|p| p.len() as u64).sum();
        if frame.header.len() as u64 + parts_len != len {
            return Ok(None);
        }
        let size = chunk_size(len);
        if self.room(size)? < size {
            return Ok(None);
        }
        self.check_open()?;
        let start = self.tail;
        let mut packer = WordPacker::new(&self.ring, start + 8);
        packer.put(&frame.header);
        for part in frame.parts {
            packer.put(part);
        }
        packer.flush();
        let start_number = self.number;
        self.open = Some((start, len));
        self.tail = start + 8 + len;
        self.publish(start_number, self.seq, wake);
        Ok(Some(len))
    }

    /// Publishes what was written since chunk `start_number` and descriptor `start_seq` and
    /// says whether to wake the consumer.
    #[inline]
    fn publish(&mut self, start_number: u32, start_seq: u64, wake: &mut Wake) {
        self.close_chunk();
        if self.number == start_number && self.seq == start_seq {
            return;
        }
        // After the sequentially consistent store of a header or a descriptor.
        let p = self.ring.word(CONSUMER_PARKED);
        if p.load(Ordering::SeqCst) != 0 && p.swap(0, Ordering::AcqRel) != 0 {
            wake.consumer = true;
        }
    }

    /// Announces that the producer is about to wait; false when there is progress to make.
    pub(crate) fn prepare_wait(&mut self) -> bool {
        self.ring.word(PRODUCER_WAITING).store(1, Ordering::SeqCst);
        if let Some(o) = self.offer {
            return self.ring.slot(o.seq, 0).load(Ordering::SeqCst) != o.seq << 2 | DONE;
        }
        let head = self.ring.word(HEAD).load(Ordering::SeqCst);
        let oldest_done = self
            .lent
            .front()
            .is_some_and(|l| self.ring.slot(l.seq, 0).load(Ordering::SeqCst) == l.seq << 2 | DONE);
        head == self.head && !oldest_done
    }

    /// When an offered part is due to be taken back, or a part that waits for room in the ring
    /// to be buffered, if one is waiting.
    pub(crate) fn wake_at(&self) -> Option<Instant> {
        if self.buffers_full {
            return None;
        }
        let waiting = self.offer.filter(|o| o.patient).map(|o| o.since);
        waiting.or(self.full_since).map(|t| t + PATIENCE)
    }

    /// Bytes the consumer may leave unread before a send waits for it: the ring, and the
    /// buffers where the consumer can read them.
    pub(crate) fn unread_capacity(&self) -> u64 {
        self.ring.cap + if self.remote { BUFFERED as u64 } else { 0 }
    }

    /// Whether the consumer may still read buffers of ours.
    pub(crate) fn lending(&mut self) -> bool {
        self.reap();
        !self.lent.is_empty()
    }

    /// Frees the buffers: the consumer is gone and reads nothing any more.
    pub(crate) fn release(&mut self) {
        self.lent.clear();
        self.buffered = 0;
    }
}

impl Drop for Producer {
    /// A consumer may still read buffers it has not finished: they must never be freed under
    /// it, so they are left allocated (at most [`BUFFERED`] bytes, for a consumer that lives
    /// on without reading what it was sent).
    fn drop(&mut self) {
        self.reap();
        for l in self.lent.drain(..) {
            std::mem::forget(l.copy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::OnceCell;

    /// The producer's and the consumer's views of one ring of `cap` bytes; large parts are
    /// offered where the consumer can read the producer's memory.
    fn pair(cap: usize, remote: bool) -> (Producer, Consumer) {
        pair_with(cap, remote, remote)
    }

    /// [`pair`] with offers chosen apart from whether the consumer can read our memory.
    fn pair_with(cap: usize, remote: bool, offers: bool) -> (Producer, Consumer) {
        #[cfg(not(miri))]
        let (a, b) = {
            let (a, fd) = Mapping::create(Ring::mapping_len(cap)).unwrap();
            let b = Mapping::open(&fd, Ring::mapping_len(cap)).unwrap();
            (a, b)
        };
        #[cfg(miri)]
        let (a, b) = Mapping::private_pair(Ring::mapping_len(cap));
        (
            Producer::new(Ring::new(a).unwrap(), remote, offers),
            Consumer::new(Ring::new(b).unwrap()),
        )
    }

    /// A frame of header `h` and `parts`, as long as they are.
    fn frame_of<'a>(
        h: u8,
        parts: &'a [&'a [u8]],
        chunks: &'a OnceCell<Vec<bytes::Bytes>>,
    ) -> Frame<'a> {
        Frame {
            header: [h; 24],
            parts,
            owned: &[],
            len: 24 + parts.iter().map(|x| x.len() as u64).sum::<u64>(),
            chunks,
        }
    }

    /// This process, whose memory the consumer reads as a peer's.
    fn me() -> Remote {
        let (addr, probe) = super::super::remote::probe();
        Remote::open(std::process::id() as i32, addr, &probe).expect("reading own memory")
    }

    /// Writes a frame of header `h` and `parts`, reading on the consumer side whenever the
    /// producer cannot go on; returns everything read.
    fn send(
        p: &mut Producer,
        c: &mut Consumer,
        r: Option<&Remote>,
        h: u8,
        parts: &[&[u8]],
    ) -> Vec<u8> {
        let chunks = OnceCell::new();
        let frame = frame_of(h, parts, &chunks);
        let (mut done, mut got) = (0, Vec::new());
        let mut buf = vec![0u8; 10_000];
        while done < frame.len {
            done += p.write(&frame, done, &mut Wake::default()).unwrap();
            let n = c.read(&mut buf, r, &mut Signal::default()).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        read_all(c, r, &mut buf, &mut got);
        got
    }

    /// Reads through `buf` until the consumer finds nothing more, appending to `got`.
    fn read_all(c: &mut Consumer, r: Option<&Remote>, buf: &mut [u8], got: &mut Vec<u8>) {
        loop {
            let n = c.read(buf, r, &mut Signal::default()).unwrap();
            if n == 0 {
                return;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }

    fn expected(h: u8, parts: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![h; 24];
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    }

    #[test]
    fn bytes_come_out_as_they_went_in_across_the_wrap() {
        let (mut p, mut c) = pair(4096, false);
        for k in 0..50u8 {
            let a: Vec<u8> = (0..(k as usize * 97) % 5000).map(|i| i as u8 ^ k).collect();
            let b = [k; 7];
            let parts: [&[u8]; 2] = [&a, &b];
            assert_eq!(send(&mut p, &mut c, None, k, &parts), expected(k, &parts));
        }
    }

    #[test]
    fn small_frames_fill_the_ring_and_pass_the_wrap_intact() {
        let (mut p, mut c) = pair(4096, false);
        let chunks = OnceCell::new();
        let (mut sent, mut got) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 10_000];
        let mut k = 0usize;
        while k < 3000 {
            // Frames of 24 to about 250 bytes in up to four parts, written until the ring is
            // full; then the consumer reads everything.
            let data: Vec<u8> = (0..(k * 13) % 230).map(|i| (i ^ k) as u8).collect();
            let cut = [0, data.len() / 3, data.len() / 2, data.len()];
            let parts: Vec<&[u8]> = cut[..=k % 4]
                .windows(2)
                .map(|w| &data[w[0]..w[1]])
                .chain(std::iter::once(&data[cut[k % 4]..]))
                .collect();
            let frame = Frame {
                header: [k as u8; 24],
                parts: &parts,
                owned: &[],
                len: 24 + data.len() as u64,
                chunks: &chunks,
            };
            let mut done = 0;
            while done < frame.len {
                let n = p.write(&frame, done, &mut Wake::default()).unwrap();
                done += n;
                if n == 0 || done < frame.len {
                    read_all(&mut c, None, &mut buf, &mut got);
                }
            }
            sent.extend_from_slice(&[k as u8; 24]);
            sent.extend_from_slice(&data);
            k += 1;
        }
        read_all(&mut c, None, &mut buf, &mut got);
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "the bytes read differ from the bytes written");
    }

    #[test]
    fn small_frames_read_through_a_narrow_buffer_come_out_whole() {
        // Reads smaller than a chunk take the general path part-way through a chunk; reads
        // that span chunks take whole small chunks and then part of the next.
        let (mut p, mut c) = pair(4096, false);
        let chunks = OnceCell::new();
        let (mut sent, mut got) = (Vec::new(), Vec::new());
        for k in 0..400usize {
            let data: Vec<u8> = (0..(k * 7) % 200).map(|i| (i + k) as u8).collect();
            let parts: [&[u8]; 1] = [&data];
            let frame = Frame {
                header: [k as u8; 24],
                parts: &parts,
                owned: &[],
                len: 24 + data.len() as u64,
                chunks: &chunks,
            };
            let mut done = 0;
            while done < frame.len {
                done += p.write(&frame, done, &mut Wake::default()).unwrap();
                let mut buf = vec![0u8; 1 + k % 61];
                let n = c.read(&mut buf, None, &mut Signal::default()).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            sent.extend_from_slice(&[k as u8; 24]);
            sent.extend_from_slice(&data);
        }
        read_all(&mut c, None, &mut [0u8; 13], &mut got);
        assert!(got == sent, "the bytes read differ from the bytes written");
    }

    #[test]
    fn large_parts_are_read_from_the_senders_memory() {
        let r = me();
        let (mut p, mut c) = pair(4096, true);
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        let parts: [&[u8]; 3] = [b"before", &big, b"after"];
        assert_eq!(
            send(&mut p, &mut c, Some(&r), 9, &parts),
            expected(9, &parts)
        );
        if cfg!(miri) {
            // Every step under Miri outlasts an offer's patience, so parts were taken back and
            // lent as copies instead: all of them were read, and none is lent any more.
            assert!(!p.lending() && p.offer.is_none());
        } else {
            assert!(p.lent.is_empty() && p.offer.is_none());
        }
    }

    #[test]
    fn a_part_nobody_takes_is_buffered_and_read_later() {
        let r = me();
        let (mut p, mut c) = pair(4096, true);
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 3) as u8).collect();
        let parts: [&[u8]; 2] = [&big, b"tail"];
        let chunks = OnceCell::new();
        let frame = frame_of(1, &parts, &chunks);
        // Nobody reads: the offer waits, then is taken back and buffered; the send completes.
        let mut done = p.write(&frame, 0, &mut Wake::default()).unwrap();
        assert!(done < frame.len);
        std::thread::sleep(PATIENCE * 2);
        done += p.write(&frame, done, &mut Wake::default()).unwrap();
        assert_eq!(done, frame.len);
        assert_eq!(p.buffered, 100_000);
        // The next large part is buffered at once.
        let parts2: [&[u8]; 1] = [&big];
        let frame2 = frame_of(2, &parts2, &chunks);
        assert_eq!(
            p.write(&frame2, 0, &mut Wake::default()).unwrap(),
            frame2.len
        );
        let mut got = Vec::new();
        read_all(&mut c, Some(&r), &mut vec![0u8; 7000], &mut got);
        let mut want = expected(1, &parts);
        want.extend(expected(2, &parts2));
        assert_eq!(got, want);
        assert!(!p.lending());
        assert_eq!(p.buffered, 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "times the producer's patience (100 us), which every step under Miri outlasts"
    )]
    fn without_offers_large_parts_stream_through_the_ring_and_wait_before_a_buffer() {
        let r = me();
        let (mut p, mut c) = pair_with(4096, true, false);
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 5) as u8).collect();
        // A consumer that reads: everything goes through the ring, nothing is buffered or
        // offered.
        let parts: [&[u8]; 2] = [&big, b"tail"];
        assert_eq!(
            send(&mut p, &mut c, Some(&r), 3, &parts),
            expected(3, &parts)
        );
        assert!(p.lent.is_empty() && p.offer.is_none() && p.buffered == 0);
        // Nobody reads: the part waits for room, then the rest is buffered and the send
        // completes.
        let chunks = OnceCell::new();
        let frame = frame_of(4, &parts, &chunks);
        let mut done = p.write(&frame, 0, &mut Wake::default()).unwrap();
        assert!(done < frame.len && p.buffered == 0);
        let due = p.wake_at().expect("a part waits for room");
        assert!(due > Instant::now());
        std::thread::sleep(due.saturating_duration_since(Instant::now()) + PATIENCE);
        done += p.write(&frame, done, &mut Wake::default()).unwrap();
        assert_eq!(done, frame.len);
        assert!(p.buffered > 90_000 && p.wake_at().is_none());
        let mut got = Vec::new();
        read_all(&mut c, Some(&r), &mut vec![0u8; 7000], &mut got);
        assert_eq!(got, expected(4, &parts));
        assert!(!p.lending());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "times the producer's patience (100 us), which every step under Miri outlasts"
    )]
    fn a_part_too_large_to_buffer_waits_for_the_reader_without_a_deadline() {
        let r = me();
        let (mut p, mut c) = pair_with(4096, true, false);
        let big: Vec<u8> = (0..BUFFERED as u32 + 100_000)
            .map(|i| (i * 11) as u8)
            .collect();
        let parts: [&[u8]; 1] = [&big];
        let chunks = OnceCell::new();
        let frame = frame_of(5, &parts, &chunks);
        let mut done = p.write(&frame, 0, &mut Wake::default()).unwrap();
        let due = p
            .wake_at()
            .expect("the part waits for room, then for a buffer");
        std::thread::sleep(due.saturating_duration_since(Instant::now()) + PATIENCE);
        // Due, but more than the buffers may hold: nothing is due any more, so a waiting
        // writer sleeps until the reader says it made room instead of polling.
        done += p.write(&frame, done, &mut Wake::default()).unwrap();
        assert!(done < frame.len && p.buffered == 0);
        assert!(p.wake_at().is_none());
        // The reader reads; the rest streams through the ring.
        let mut got = Vec::new();
        let mut buf = vec![0u8; 10_000];
        while done < frame.len {
            let n = c.read(&mut buf, Some(&r), &mut Signal::default()).unwrap();
            got.extend_from_slice(&buf[..n]);
            done += p.write(&frame, done, &mut Wake::default()).unwrap();
        }
        read_all(&mut c, Some(&r), &mut buf, &mut got);
        assert_eq!(got, expected(5, &parts));
        assert!(!p.lending() && p.wake_at().is_none());
    }

    #[test]
    fn values_a_misbehaving_peer_writes_are_errors_not_crashes() {
        // Chunks longer than the ring, or empty.
        let mut buf = [0u8; 64];
        for len in [1 << 20, 4096, 0] {
            let (p, mut c) = pair(4096, false);
            p.ring
                .header(0)
                .store(header_word(1, len), Ordering::SeqCst);
            assert!(
                c.read(&mut buf, None, &mut Signal::default()).is_err(),
                "{len}"
            );
        }
        // A chunk of a later number is not there yet.
        let (p, mut c) = pair(4096, false);
        p.ring.header(0).store(header_word(2, 8), Ordering::SeqCst);
        assert_eq!(c.read(&mut buf, None, &mut Signal::default()).unwrap(), 0);
        // A head ahead of the tail.
        let (mut p, c) = pair(4096, false);
        c.ring.word(HEAD).store(99, Ordering::SeqCst);
        let chunks = OnceCell::new();
        let big = [0u8; 5000];
        let parts: [&[u8]; 1] = [&big];
        let frame = Frame {
            header: [0; 24],
            parts: &parts,
            owned: &[],
            len: 5024,
            chunks: &chunks,
        };
        assert!(
            (0..10).any(|_| p.write(&frame, 0, &mut Wake::default()).is_err()),
            "a head ahead of the tail went unnoticed"
        );
        // Descriptors out of sequence, in states only the reader sets, or of memory that is
        // not there.
        for word in [5 << 2 | OFFERED, 1 << 2 | TAKEN, 1 << 2 | DONE] {
            let (p, mut c) = pair(4096, false);
            p.ring.slot(1, 0).store(word, Ordering::SeqCst);
            assert!(
                c.read(&mut buf, None, &mut Signal::default()).is_err(),
                "{word}"
            );
        }
        let (p, mut c) = pair(4096, false);
        p.ring.slot(1, 1).store(0, Ordering::SeqCst);
        p.ring.slot(1, 2).store(100, Ordering::SeqCst);
        p.ring.slot(1, 3).store(8, Ordering::SeqCst);
        p.ring.slot(1, 0).store(1 << 2 | OFFERED, Ordering::SeqCst);
        // Nobody may read this peer's memory; and this process has nothing at address 8.
        assert!(c.read(&mut buf, None, &mut Signal::default()).is_err());
        // Under Miri, which cannot read a process's memory through the kernel, the part
        // above is all.
        if cfg!(miri) {
            return;
        }
        let (p, mut c) = pair(4096, false);
        for (f, v) in [(1, 0), (2, 100), (3, 8), (0, 1 << 2 | OFFERED)] {
            p.ring.slot(1, f).store(v, Ordering::SeqCst);
        }
        assert!(c
            .read(&mut buf, Some(&me()), &mut Signal::default())
            .is_err());
    }

    /// A consumer that has read everything and looks for the next chunk where an earlier lap
    /// left payload, whose word there reads as the header of the chunk it waits for: it must
    /// find nothing there, as the producer has written nothing since.
    #[test]
    fn payload_of_an_earlier_lap_is_not_taken_for_the_next_header() {
        // A frame of six whole chunks of 512 bytes whose payload is `word` throughout, then
        // frames of one line up to the wrap and one past it, each read as it is written: the
        // consumer then looks at ring offset 64, inside the first chunk's payload of the lap
        // before. Returns what was sent, what was read, and where the consumer waits at the
        // end for which chunk.
        let run = |word: u64| {
            let (mut p, mut c) = pair(4096, false);
            let part: Vec<u8> = (0..375).flat_map(|_| word.to_le_bytes()).collect();
            let parts: [&[u8]; 1] = [&part];
            let (mut sent, mut got) = (expected(1, &parts), send(&mut p, &mut c, None, 1, &parts));
            for k in 0..17 {
                sent.extend(expected(k, &[]));
                got.extend(send(&mut p, &mut c, None, k, &[]));
            }
            (sent, got, c.head % 4096, c.number)
        };
        let (_, _, at, waits_for) = run(0);
        assert_eq!(at, 64);
        // The payload of the first lap now reads as the header of a chunk of 8 bytes.
        let (sent, got, _, _) = run(u64::from(waits_for) << 32 | 8);
        assert_eq!(got.len(), sent.len(), "bytes read that were never sent");
        assert!(got == sent, "the bytes read differ from the bytes written");
    }

    /// Frames of many lengths whose payload words all read as headers of chunks soon to come,
    /// so that wherever a chunk of a later lap starts inside them the word there would be
    /// taken for the header the consumer waits for: every byte comes out as it went in.
    #[test]
    fn payload_that_reads_as_headers_to_come_passes_every_lap_intact() {
        let (mut p, mut c) = pair(4096, false);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let (mut sent, mut got) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 10_000];
        let frames = if cfg!(miri) { 60 } else { 2000 };
        for k in 0..frames {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let words = (seed >> 33) as usize % 200;
            let part: Vec<u8> = (0..words)
                .flat_map(|i| header_word(p.number.wrapping_add(i as u32 % 64), 8).to_le_bytes())
                .collect();
            let parts: [&[u8]; 1] = [&part];
            sent.extend(expected(k as u8, &parts));
            // Written and read in turns, a bounded number of them: a consumer that took payload
            // for a header reads past what was written, and then both sides wait for ever.
            let chunks = OnceCell::new();
            let frame = frame_of(k as u8, &parts, &chunks);
            let mut done = 0;
            for _ in 0..100 {
                done += p.write(&frame, done, &mut Wake::default()).unwrap();
                read_all(&mut c, None, &mut buf, &mut got);
                if done == frame.len {
                    break;
                }
            }
            assert_eq!(
                done, frame.len,
                "frame {k} stuck: the sides wait for each other"
            );
        }
        assert_eq!(got.len(), sent.len(), "bytes read that were never sent");
        assert!(got == sent, "the bytes read differ from the bytes written");
    }

    /// A descriptor posted ahead of the reader with no chunk in front of it, as a producer
    /// that misbehaves might leave: an error naming it, where the consumer said it had data
    /// (so its receiver never parked, nor looked at whether the producer had died) and read
    /// none, for ever.
    #[test]
    fn a_descriptor_ahead_of_bytes_never_written_is_an_error() {
        let (p, mut c) = pair(4096, false);
        for (f, v) in [(1, 64), (2, 100), (3, 8), (0, 1 << 2 | OFFERED)] {
            p.ring.slot(1, f).store(v, Ordering::SeqCst);
        }
        assert!(!c.prepare_park(), "the descriptor counts as data");
        let mut buf = [0u8; 64];
        match c.read(&mut buf, None, &mut Signal::default()) {
            Err(e) => assert!(
                e.to_string()
                    .contains("a descriptor ahead of bytes never written"),
                "{e}"
            ),
            Ok(n) => panic!("read {n} bytes of a ring that said it had data"),
        }
    }

    #[test]
    fn a_part_read_before_the_consumer_closed_settles_its_frame_and_nothing_more() {
        let r = me();
        let (mut p, mut c) = pair(4096, true);
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 5) as u8).collect();
        let parts: [&[u8]; 2] = [b"head", &big];
        let chunks = OnceCell::new();
        let frame = frame_of(3, &parts, &chunks);
        let done = p.write(&frame, 0, &mut Wake::default()).unwrap();
        assert!(done < frame.len, "the large part waits for the consumer");
        assert_eq!(p.settled(done), done, "nothing read yet");
        let (mut got, mut buf) = (Vec::new(), vec![0u8; 10_000]);
        read_all(&mut c, Some(&r), &mut buf, &mut got);
        assert_eq!(got, expected(3, &parts));
        c.close();
        assert_eq!(p.settled(done), frame.len);
        // The next frame: none of it settles, and writing it fails.
        let next = frame_of(4, &parts, &chunks);
        assert_eq!(p.settled(0), 0);
        let e = p.write(&next, 0, &mut Wake::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_closed_consumer_fails_the_next_write() {
        let (mut p, c) = pair(4096, false);
        c.close();
        let chunks = OnceCell::new();
        let frame = Frame {
            header: [0; 24],
            parts: &[],
            owned: &[],
            len: 24,
            chunks: &chunks,
        };
        let e = p.write(&frame, 0, &mut Wake::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_parked_consumer_is_woken_and_a_waiting_producer_too() {
        let (mut p, mut c) = pair(4096, false);
        assert!(c.prepare_park(), "nothing to read yet");
        let chunks = OnceCell::new();
        let big = [7u8; 5000];
        let parts: [&[u8]; 1] = [&big];
        let frame = Frame {
            header: [0; 24],
            parts: &parts,
            owned: &[],
            len: 5024,
            chunks: &chunks,
        };
        let mut wake = Wake::default();
        let done = p.write(&frame, 0, &mut wake).unwrap();
        assert!(wake.consumer, "the parked consumer must be woken");
        // Eight chunks of 504 bytes, each with its header: 512 bytes of ring.
        assert_eq!(done, 8 * 504, "the ring is full");
        assert!(p.prepare_wait(), "no room yet");
        let mut signal = Signal::default();
        let mut buf = [0u8; 300];
        c.read(&mut buf, None, &mut signal).unwrap();
        assert!(
            !signal.wake,
            "a chunk's room is freed when all of it is read"
        );
        c.read(&mut buf, None, &mut signal).unwrap();
        assert!(signal.wake, "the waiting producer must be woken");
    }

    /// Fills the ring with frames of 40 bytes; returns how many went in whole.
    fn fill_with_small_frames(p: &mut Producer) -> usize {
        let chunks = OnceCell::new();
        let body = [5u8; 16];
        let parts: [&[u8]; 1] = [&body];
        let frame = Frame {
            header: [9; 24],
            parts: &parts,
            owned: &[],
            len: 40,
            chunks: &chunks,
        };
        let mut whole = 0;
        loop {
            let n = p.write(&frame, 0, &mut Wake::default()).unwrap();
            if n < 40 {
                assert_eq!(
                    n, 0,
                    "a small frame goes whole or not at all into a full ring"
                );
                return whole;
            }
            whole += 1;
        }
    }

    #[test]
    fn a_producer_waiting_behind_small_frames_is_told_the_room() {
        // The producer waits and says so before the consumer reads: the first read tells it.
        let (mut p, mut c) = pair(4096, false);
        let frames = fill_with_small_frames(&mut p);
        assert_eq!(frames, 4096 / 64, "one line per small chunk");
        assert!(p.prepare_wait(), "no room yet");
        let (mut signal, mut buf) = (Signal::default(), [0u8; 40]);
        assert_eq!(c.read(&mut buf, None, &mut signal).unwrap(), 40);
        assert!(signal.wake, "the waiting producer must be woken at once");
        assert_eq!(
            fill_with_small_frames(&mut p),
            1,
            "the room of the chunk read"
        );

        // The consumer reads before the producer says it waits (their stores crossed): the
        // consumer tells the room once an eighth of the ring is read, and wakes the producer.
        let (mut p, mut c) = pair(4096, false);
        fill_with_small_frames(&mut p);
        let mut signal = Signal::default();
        assert_eq!(c.read(&mut buf, None, &mut signal).unwrap(), 40);
        assert!(!signal.wake);
        assert!(p.prepare_wait(), "the room read is not told yet");
        let mut read = 1;
        while !signal.wake {
            assert_eq!(c.read(&mut buf, None, &mut signal).unwrap(), 40);
            read += 1;
            assert!(
                read <= 4096 / 8 / 64,
                "read {read} chunks and the producer still waits"
            );
        }
        assert_eq!(fill_with_small_frames(&mut p), read);
    }
}
