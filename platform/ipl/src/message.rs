//! Messages: typed writes gathered without copies, typed reads with receiver-makes-right.
//!
//! A message is a sequence of tagged items: primitives, slices of primitives (with their length),
//! byte buffers and serde objects. Tags cost one byte per item and let a reader that asks for the
//! wrong thing get an error naming both types instead of garbage. Slices of 4 KiB and more are
//! not copied: the message keeps a reference to the caller's memory and the driver writes it
//! with a gather write at `finish`.

use crate::error::{Error, Result};
use crate::node::NodeId;
use crate::port_type::Serialization;
use crate::primitive::{slice_tag, tag_name, Primitive, TAG_BOOL, TAG_BYTES, TAG_OBJECT};
use crate::receive_port::inbound::RxGuard;
use crate::send_port::outbound::SendGuard;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::Range;
use std::time::Duration;

/// Slices at least this large are sent from the caller's memory instead of being copied.
const ZERO_COPY_MIN: usize = 4096;
/// A vector read from a connection starts this large and doubles as its bytes arrive, so that
/// what a reader allocates follows what the peer actually sent, not the length it claimed.
const GROW_FIRST: usize = 64 * 1024;

enum Seg<'a> {
    Own(Range<usize>),
    Borrowed(&'a [u8]),
    /// A buffer the message holds a reference to (see [`WriteMessage::write_shared_bytes`]).
    Shared(Bytes),
}

enum Sink<'a> {
    Port(SendGuard<'a>),
    Detached,
}

/// A message being written. Obtained from `SendPort::message`; nothing is sent until
/// [`WriteMessage::finish`]. Slices written with [`WriteMessage::write_slice`] are borrowed until
/// then, which is how they travel without an intermediate copy.
pub struct WriteMessage<'a> {
    sink: Sink<'a>,
    buf: Vec<u8>,
    segs: Vec<Seg<'a>>,
    run_start: usize,
    swap: bool,
    level: Serialization,
    /// The first misuse, kept until `finish` reports it; boxed, as a message is moved on every
    /// send and its error is almost never there.
    error: Option<Box<Error>>,
}

macro_rules! write_prim {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("Writes one `", stringify!($t), "`.")]
        pub fn $name(&mut self, v: $t) {
            self.write_primitive(v)
        }
    )*};
}

impl<'a> WriteMessage<'a> {
    pub(crate) fn for_port(
        guard: SendGuard<'a>,
        buf: Vec<u8>,
        swap: bool,
        level: Serialization,
    ) -> Self {
        WriteMessage {
            sink: Sink::Port(guard),
            buf,
            segs: Vec::new(),
            run_start: 0,
            swap,
            level,
            error: None,
        }
    }

    /// A message that is not bound to a port; [`WriteMessage::into_bytes`] gives its payload,
    /// which [`ReadMessage::from_bytes`] reads back. Useful for storing messages and for tests.
    pub fn detached() -> WriteMessage<'a> {
        WriteMessage {
            sink: Sink::Detached,
            buf: Vec::new(),
            segs: Vec::new(),
            run_start: 0,
            swap: false,
            level: Serialization::Object,
            error: None,
        }
    }

    /// A detached message written in the opposite of the native byte order, to exercise the
    /// reader's swapping path.
    pub fn detached_swapped() -> WriteMessage<'a> {
        WriteMessage {
            swap: true,
            ..Self::detached()
        }
    }

    /// Whether the port's serialization level allows writing `what`; records the refusal as
    /// the message's error when it does not.
    #[inline]
    fn allow(&mut self, needed: Serialization, what: &str) -> bool {
        self.level >= needed || self.refuse(needed, what)
    }

    #[cold]
    #[inline(never)]
    fn refuse(&mut self, needed: Serialization, what: &str) -> bool {
        if self.error.is_none() {
            self.error = Some(Box::new(Error::NotAllowed {
                port_type: format!("with serialization {:?}", self.level),
                what: format!("writing {what} needs {needed:?}"),
            }));
        }
        false
    }

    #[inline]
    fn write_primitive<T: Primitive>(&mut self, v: T) {
        if !self.allow(Serialization::Data, T::NAME) {
            return;
        }
        let v = if self.swap { v.swap() } else { v };
        self.buf.push(T::TAG);
        self.buf.extend_from_slice(bytemuck::bytes_of(&v));
    }

    write_prim!(write_u8: u8, write_i8: i8, write_u16: u16, write_i16: i16, write_u32: u32,
        write_i32: i32, write_u64: u64, write_i64: i64, write_f32: f32, write_f64: f64);

    /// Writes a bool.
    pub fn write_bool(&mut self, v: bool) {
        if self.allow(Serialization::Data, "bool") {
            self.buf.extend_from_slice(&[TAG_BOOL, v as u8]);
        }
    }

    #[inline]
    fn len_prefix(&mut self, tag: u8, n: u64) {
        let n = if self.swap { n.swap_bytes() } else { n };
        self.buf.push(tag);
        self.buf.extend_from_slice(&n.to_ne_bytes());
    }

    #[inline]
    fn borrow_or_copy(&mut self, bytes: &'a [u8]) {
        if bytes.len() >= ZERO_COPY_MIN {
            self.push_seg(Seg::Borrowed(bytes));
        } else {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Ends the run of bytes in the buffer and puts `seg` after it.
    fn push_seg(&mut self, seg: Seg<'a>) {
        if self.run_start < self.buf.len() {
            self.segs.push(Seg::Own(self.run_start..self.buf.len()));
        }
        self.segs.push(seg);
        self.run_start = self.buf.len();
    }

    /// Writes a slice of primitives (with its length). In native byte order, slices of 4 KiB or
    /// more are not copied: they are sent straight from `s` when the message is finished.
    pub fn write_slice<T: Primitive>(&mut self, s: &'a [T]) {
        if !self.allow(Serialization::Data, T::NAME) {
            return;
        }
        self.len_prefix(slice_tag(T::TAG), s.len() as u64);
        if self.swap && std::mem::size_of::<T>() > 1 {
            self.buf.reserve(std::mem::size_of_val(s));
            for v in s {
                self.buf.extend_from_slice(bytemuck::bytes_of(&v.swap()));
            }
        } else {
            self.borrow_or_copy(bytemuck::cast_slice(s));
        }
    }

    /// Writes a byte buffer (with its length); allowed at every serialization level.
    #[inline]
    pub fn write_bytes(&mut self, b: &'a [u8]) {
        self.len_prefix(TAG_BYTES, b.len() as u64);
        self.borrow_or_copy(b);
    }

    /// Writes a byte buffer (with its length) that the message keeps a reference to rather
    /// than borrows or copies: what [`write_bytes`](WriteMessage::write_bytes) of the same
    /// bytes writes, read back the same way. A driver that sends from memory of its own, and
    /// so copies a borrowed buffer before `finish` returns (the mpi driver: MPI reads a large
    /// message while the receiver takes it in, after `finish`), sends a shared buffer of 4 KiB
    /// or more straight from it instead, and keeps its reference until the transfer is over
    /// (for ever, should the transfer never end); the others treat it as a borrowed one.
    pub fn write_shared_bytes(&mut self, b: Bytes) {
        self.len_prefix(TAG_BYTES, b.len() as u64);
        if b.len() >= ZERO_COPY_MIN {
            self.push_seg(Seg::Shared(b));
        } else {
            self.buf.extend_from_slice(&b);
        }
    }

    /// Writes a byte buffer of `n` bytes that `fill` appends to the vector it is given, straight
    /// into the message: what `write_bytes` of those bytes writes (a reader reads them with
    /// `read_bytes` or `read_bytes_to`), without putting them together somewhere else first.
    /// If `fill` appends other than `n` bytes, they are taken back and `finish` fails.
    #[inline]
    pub fn write_bytes_from(&mut self, n: usize, fill: impl FnOnce(&mut Vec<u8>)) {
        self.len_prefix(TAG_BYTES, n as u64);
        let at = self.buf.len();
        fill(&mut self.buf);
        if self.buf.len() != at + n {
            self.wrong_fill(at, n);
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong_fill(&mut self, at: usize, n: usize) {
        let wrote = self.buf.len().saturating_sub(at);
        // The prefix stays and says `n`: the message must not go out at all.
        self.buf.truncate(at);
        if self.error.is_none() {
            self.error = Some(Box::new(Error::Serialize(format!(
                "a byte buffer announced as {n} bytes got {wrote}"
            ))));
        }
    }

    /// Writes a serde object.
    pub fn write<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<()> {
        if !self.allow(Serialization::Object, "an object") {
            return Err(*self.error.take().expect("allow sets the error"));
        }
        self.buf.push(TAG_OBJECT);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 8]);
        if let Err(e) = crate::serial::encode_into(v, &mut self.buf, self.swap) {
            self.buf.truncate(at - 1);
            return Err(Error::Serialize(e.message().to_owned()));
        }
        let n = (self.buf.len() - at - 8) as u64;
        let n = if self.swap { n.swap_bytes() } else { n };
        self.buf[at..at + 8].copy_from_slice(&n.to_ne_bytes());
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        let borrowed: usize = self
            .segs
            .iter()
            .map(|s| match s {
                Seg::Borrowed(b) => b.len(),
                Seg::Shared(b) => b.len(),
                Seg::Own(_) => 0,
            })
            .sum();
        (self.buf.len() + borrowed) as u64
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn parts(&self) -> smallvec::SmallVec<[&[u8]; 8]> {
        let mut parts = smallvec::SmallVec::new();
        for s in &self.segs {
            parts.push(match s {
                Seg::Own(r) => &self.buf[r.clone()],
                Seg::Borrowed(b) => b,
                Seg::Shared(b) => &b[..],
            });
        }
        if self.run_start < self.buf.len() {
            parts.push(&self.buf[self.run_start..]);
        }
        parts
    }

    /// The shared buffers among the parts, one entry per part of [`parts`](Self::parts);
    /// empty when there are none.
    fn owners(&self) -> smallvec::SmallVec<[Option<Bytes>; 8]> {
        if !self.segs.iter().any(|s| matches!(s, Seg::Shared(_))) {
            return smallvec::SmallVec::new();
        }
        let mut owners: smallvec::SmallVec<[Option<Bytes>; 8]> = self
            .segs
            .iter()
            .map(|s| match s {
                Seg::Shared(b) => Some(b.clone()),
                _ => None,
            })
            .collect();
        if self.run_start < self.buf.len() {
            owners.push(None);
        }
        owners
    }

    /// Sends the message to every connection of the port; returns the payload size in bytes.
    pub fn finish(mut self) -> Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(*e);
        }
        let len = self.len();
        let big = cfg!(target_endian = "big") != self.swap;
        let sink = std::mem::replace(&mut self.sink, Sink::Detached);
        match sink {
            Sink::Port(mut guard) => {
                let r = if self.segs.is_empty() {
                    // Nothing borrowed: the message is the buffer.
                    guard.send(&[&self.buf[..]], &[], len, big)
                } else {
                    let parts = self.parts();
                    guard.send(&parts, &self.owners(), len, big)
                };
                guard.recycle(std::mem::take(&mut self.buf));
                crate::trace::message_sent(len);
                r.map(|_| len)
            }
            Sink::Detached => Err(Error::NotConnected(u64::MAX)),
        }
    }

    /// The payload of a detached message (every part concatenated).
    pub fn into_bytes(self) -> Result<Vec<u8>> {
        if let Some(e) = self.error {
            return Err(*e);
        }
        if self.segs.is_empty() {
            return Ok(self.buf);
        }
        let mut out = Vec::with_capacity(self.len() as usize);
        for p in self.parts() {
            out.extend_from_slice(p);
        }
        Ok(out)
    }
}

enum Source {
    Port { rx: RxGuard, conn: usize },
    Memory { data: Vec<u8>, pos: usize },
}

/// A received message. Read items in the order they were written; [`ReadMessage::finish`] (or
/// dropping it) releases the port for the next message, skipping whatever was not read. Until
/// then a receive on the same port from another thread waits, and one from this thread returns
/// [`Error::HeldByCaller`].
pub struct ReadMessage {
    src: Source,
    remaining: u64,
    swap: bool,
    stall: Duration,
}

macro_rules! read_prim {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("Reads one `", stringify!($t), "`.")]
        pub fn $name(&mut self) -> Result<$t> {
            self.read_primitive()
        }
    )*};
}

/// The origin of messages read from memory, shared so that reading one allocates nothing.
fn memory_origin() -> &'static NodeId {
    static ORIGIN: std::sync::OnceLock<NodeId> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(|| {
        NodeId::new(
            "",
            u32::MAX,
            "memory",
            "memory",
            "memory",
            Default::default(),
        )
    })
}

impl ReadMessage {
    pub(crate) fn from_port(
        rx: RxGuard,
        conn: usize,
        len: u64,
        big_endian: bool,
        stall: Duration,
    ) -> Self {
        ReadMessage {
            src: Source::Port { rx, conn },
            remaining: len,
            swap: big_endian != cfg!(target_endian = "big"),
            stall,
        }
    }

    /// Reads a detached message's payload (from [`WriteMessage::into_bytes`]); `swapped` when it
    /// was written with [`WriteMessage::detached_swapped`]. Any bytes at all are safe to read:
    /// corrupt input gives errors, never a panic.
    pub fn from_bytes(data: Vec<u8>, swapped: bool) -> ReadMessage {
        ReadMessage {
            remaining: data.len() as u64,
            src: Source::Memory { data, pos: 0 },
            swap: swapped,
            stall: Duration::ZERO,
        }
    }

    /// The node that sent the message.
    #[inline]
    pub fn origin(&self) -> &NodeId {
        // The connection's, found through the port the message holds: no copy of the node's
        // id (and of its reference count) per message.
        match &self.src {
            Source::Port { rx, conn } => &rx.conns[*conn].origin,
            Source::Memory { .. } => memory_origin(),
        }
    }

    /// Payload bytes not read yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Whether the sender wrote in the opposite byte order (so reads swap).
    pub fn is_swapped(&self) -> bool {
        self.swap
    }

    fn decode_err(&self, reason: impl Into<String>) -> Error {
        Error::Decode {
            origin: self.origin().to_string(),
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<()> {
        if n > self.remaining {
            return Err(self.decode_err(format!(
                "reading {what} needs {n} bytes but the message has {} left",
                self.remaining
            )));
        }
        self.remaining -= n;
        Ok(())
    }

    fn lost(&mut self, e: std::io::Error) -> Error {
        if let Source::Port { rx, conn } = &mut self.src {
            rx.conns[*conn].reader.eof = true;
        }
        self.remaining = 0;
        Error::ConnectionLost {
            peer: self.origin().to_string(),
            reason: e.to_string(),
        }
    }

    /// Fills `dst` with the next bytes of the message.
    #[inline]
    fn raw(&mut self, dst: &mut [u8], what: &str) -> Result<()> {
        // Most items are small and already buffered (and, inlined into the typed reads, copied
        // with a copy of known size).
        let n = dst.len();
        if self
            .take_buffered(n, |src| {
                dst.copy_from_slice(src);
                Some(())
            })
            .is_some()
        {
            return Ok(());
        }
        self.raw_slow(dst, what)
    }

    /// Calls `f` with the next `n` bytes of a port's message when the message has that many
    /// left and they are buffered already, and consumes them if `f` takes them (returns
    /// `Some`): the fast path of reads, without the general path's bookkeeping.
    #[inline(always)]
    fn take_buffered<R>(&mut self, n: usize, f: impl FnOnce(&[u8]) -> Option<R>) -> Option<R> {
        let Source::Port { rx, conn } = &mut self.src else {
            return None;
        };
        if n as u64 > self.remaining {
            return None;
        }
        let r = &mut rx.conns[*conn].reader;
        let got = f(r.buffered().get(..n)?)?;
        r.consume(n);
        self.remaining -= n as u64;
        Some(got)
    }

    /// A byte buffer's tag, length and bytes at once, when all of them are buffered already (a
    /// small message's usually are) and `f` takes the bytes (returns `Some`); `None` leaves
    /// everything to the general path, which also reports what is wrong.
    #[inline(always)]
    fn take_buffered_bytes<R>(&mut self, f: impl FnOnce(&[u8]) -> Option<R>) -> Option<R> {
        let Source::Port { rx, conn } = &mut self.src else {
            return None;
        };
        let r = &mut rx.conns[*conn].reader;
        let b = r.buffered();
        let &[TAG_BYTES, l0, l1, l2, l3, l4, l5, l6, l7] = b.get(..9)? else {
            return None;
        };
        let n = u64::from_ne_bytes([l0, l1, l2, l3, l4, l5, l6, l7]);
        let n = if self.swap { n.swap_bytes() } else { n };
        if n > self.remaining.saturating_sub(9) {
            return None;
        }
        let end = usize::try_from(n).ok()?.checked_add(9)?;
        let got = f(b.get(9..end)?)?;
        r.consume(end);
        self.remaining -= 9 + n;
        Some(got)
    }

    fn raw_slow(&mut self, dst: &mut [u8], what: &str) -> Result<()> {
        self.take(dst.len() as u64, what)?;
        let r = match &mut self.src {
            Source::Memory { data, pos } => {
                dst.copy_from_slice(&data[*pos..*pos + dst.len()]);
                *pos += dst.len();
                Ok(())
            }
            Source::Port { rx, conn } => {
                let (c, dead) = rx.conn_and_liveness(*conn);
                c.read_exact(dst, self.stall, &dead)
            }
        };
        r.map_err(|e| self.lost(e))
    }

    #[inline]
    fn expect_tag(&mut self, want: u8) -> Result<()> {
        let mut t = [0u8];
        self.raw(&mut t, "an item tag")?;
        if t[0] != want {
            return Err(self.decode_err(format!(
                "expected {} but the message has {}",
                tag_name(want),
                tag_name(t[0])
            )));
        }
        Ok(())
    }

    fn read_len(&mut self, tag: u8) -> Result<u64> {
        // Tag and length together, when both are buffered and the tag is right (a wrong one
        // is left for the general path to report).
        let both = self.take_buffered(9, |b| {
            (b[0] == tag).then(|| u64::from_ne_bytes(b[1..9].try_into().expect("8 bytes")))
        });
        if let Some(n) = both {
            return Ok(if self.swap { n.swap_bytes() } else { n });
        }
        self.expect_tag(tag)?;
        let mut b = [0u8; 8];
        self.raw(&mut b, "a length")?;
        let n = u64::from_ne_bytes(b);
        Ok(if self.swap { n.swap_bytes() } else { n })
    }

    #[inline]
    fn read_primitive<T: Primitive>(&mut self) -> Result<T> {
        self.expect_tag(T::TAG)?;
        let mut v = T::zeroed();
        self.raw(bytemuck::bytes_of_mut(&mut v), T::NAME)?;
        Ok(if self.swap { v.swap() } else { v })
    }

    read_prim!(read_u8: u8, read_i8: i8, read_u16: u16, read_i16: i16, read_u32: u32,
        read_i32: i32, read_u64: u64, read_i64: i64, read_f32: f32, read_f64: f64);

    /// Reads a bool.
    pub fn read_bool(&mut self) -> Result<bool> {
        self.expect_tag(TAG_BOOL)?;
        let mut b = [0u8];
        self.raw(&mut b, "bool")?;
        match b[0] {
            0 => Ok(false),
            1 => Ok(true),
            x => Err(self.decode_err(format!("invalid bool byte {x}"))),
        }
    }

    /// Reads a slice written with `write_slice` straight into `buf`, whose length must match.
    pub fn read_slice_into<T: Primitive>(&mut self, buf: &mut [T]) -> Result<()> {
        let n = self.read_len(slice_tag(T::TAG))?;
        if n != buf.len() as u64 {
            return Err(self.decode_err(format!(
                "the message has a slice of {n} {} but the buffer holds {}",
                T::NAME,
                buf.len()
            )));
        }
        self.raw(bytemuck::cast_slice_mut(buf), T::NAME)?;
        if self.swap {
            for v in buf.iter_mut() {
                *v = v.swap();
            }
        }
        Ok(())
    }

    /// Reads `n` items (whose bytes the message holds: checked by the caller) into a new
    /// vector. From a connection the vector grows as the bytes arrive: a length field is the
    /// peer's claim, and memory is committed only for what it really sends.
    fn raw_vec<T: Primitive>(&mut self, n: usize, what: &str) -> Result<Vec<T>> {
        if let Source::Memory { .. } = self.src {
            let mut v = vec![T::zeroed(); n];
            self.raw(bytemuck::cast_slice_mut(&mut v), what)?;
            return Ok(v);
        }
        // All of it buffered already (most small items): one allocation of the exact size and
        // one copy, without the growing steps below.
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        let whole = self.take_buffered(bytes, |src| {
            let mut v = Vec::with_capacity(n);
            match bytemuck::try_cast_slice::<u8, T>(src) {
                // Bytes, or aligned numbers: one copy into uninitialised memory.
                Ok(items) => v.extend_from_slice(items),
                Err(_) => {
                    v.resize(n, T::zeroed());
                    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(src);
                }
            }
            Some(v)
        });
        if let Some(v) = whole {
            return Ok(v);
        }
        let first = (GROW_FIRST / std::mem::size_of::<T>()).max(1);
        let mut v: Vec<T> = Vec::new();
        while v.len() < n {
            let at = v.len();
            let step = (n - at).min(at.max(first));
            v.resize(at + step, T::zeroed());
            self.raw(bytemuck::cast_slice_mut(&mut v[at..]), what)?;
        }
        Ok(v)
    }

    /// Reads a slice written with `write_slice` into a new vector.
    pub fn read_slice<T: Primitive>(&mut self) -> Result<Vec<T>> {
        let n = self.read_len(slice_tag(T::TAG))?;
        let size = std::mem::size_of::<T>() as u64;
        if n.saturating_mul(size) > self.remaining {
            return Err(self.decode_err(format!(
                "slice of {n} {} exceeds the {} bytes left",
                T::NAME,
                self.remaining
            )));
        }
        let mut v = self.raw_vec::<T>(n as usize, T::NAME)?;
        if self.swap {
            for x in v.iter_mut() {
                *x = x.swap();
            }
        }
        Ok(v)
    }

    /// Reads a buffer written with `write_bytes` into `buf`, replacing what it held and
    /// reusing its memory: a receiver that keeps one vector for its messages allocates only
    /// when a message is larger than any before, and writes no byte twice where the message
    /// is no longer than the vector was.
    pub fn read_bytes_to(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        let done = self.take_buffered_bytes(|bytes| {
            buf.clear();
            buf.extend_from_slice(bytes);
            Some(())
        });
        if done.is_some() {
            return Ok(());
        }
        let n = self.read_len(TAG_BYTES)?;
        if n > self.remaining {
            return Err(self.decode_err(format!("{n} bytes announced but {} left", self.remaining)));
        }
        let n = n as usize;
        let whole = self.take_buffered(n, |src| {
            buf.clear();
            buf.extend_from_slice(src);
            Some(())
        });
        if whole.is_some() {
            return Ok(());
        }
        // The bytes `buf` holds already are overwritten in place: zeroing them first, as a
        // cleared vector's growth would, costs a pass over the memory for nothing.
        buf.truncate(n);
        self.raw(buf, "bytes")?;
        // Grown as the bytes arrive, as `read_bytes` does, so that a length field claiming more
        // than the sender sends costs no more memory than what came.
        while buf.len() < n {
            let at = buf.len();
            let step = (n - at).min(at.max(GROW_FIRST));
            buf.resize(at + step, 0);
            self.raw(&mut buf[at..], "bytes")?;
        }
        Ok(())
    }

    /// Reads a buffer written with `write_bytes` into `buf`, whose length must match.
    pub fn read_bytes_into(&mut self, buf: &mut [u8]) -> Result<()> {
        let done = self.take_buffered_bytes(|bytes| {
            (bytes.len() == buf.len()).then(|| buf.copy_from_slice(bytes))
        });
        if done.is_some() {
            return Ok(());
        }
        let n = self.read_len(TAG_BYTES)?;
        if n != buf.len() as u64 {
            return Err(self.decode_err(format!(
                "the message has {n} bytes but the buffer holds {}",
                buf.len()
            )));
        }
        self.raw(buf, "bytes")
    }

    /// Reads a buffer written with `write_bytes`.
    pub fn read_bytes(&mut self) -> Result<Vec<u8>> {
        if let Some(bytes) = self.take_buffered_bytes(|bytes| Some(bytes.to_vec())) {
            return Ok(bytes);
        }
        let n = self.read_len(TAG_BYTES)?;
        if n > self.remaining {
            return Err(self.decode_err(format!("{n} bytes announced but {} left", self.remaining)));
        }
        self.raw_vec::<u8>(n as usize, "bytes")
    }

    /// Reads a serde object.
    pub fn read<T: DeserializeOwned>(&mut self) -> Result<T> {
        let n = self.read_len(TAG_OBJECT)?;
        if n > self.remaining {
            return Err(self.decode_err(format!(
                "an object of {n} bytes exceeds the {} bytes left",
                self.remaining
            )));
        }
        let swap = self.swap;
        if matches!(self.src, Source::Port { .. }) && n > crate::transport::reader::BUF_CAP as u64 {
            let bytes = self.raw_vec::<u8>(n as usize, "an object")?;
            return crate::serial::decode::<T>(&bytes, swap).map_err(|e| {
                self.decode_err(format!(
                    "object of type {}: {}",
                    std::any::type_name::<T>(),
                    e.message()
                ))
            });
        }
        self.take(n, "an object")?;
        let stall = self.stall;
        let decoded: std::io::Result<_> = match &mut self.src {
            Source::Memory { data, pos } => {
                let r = crate::serial::decode::<T>(&data[*pos..*pos + n as usize], swap);
                *pos += n as usize;
                Ok(r)
            }
            Source::Port { rx, conn } => {
                let (c, dead) = rx.conn_and_liveness(*conn);
                c.ensure(n as usize, stall, &dead).map(|()| {
                    let r = crate::serial::decode::<T>(&c.buffered()[..n as usize], swap);
                    c.consume(n as usize);
                    r
                })
            }
        };
        let decoded = decoded.map_err(|e| self.lost(e))?;
        decoded.map_err(|e| {
            self.decode_err(format!(
                "object of type {}: {}",
                std::any::type_name::<T>(),
                e.message()
            ))
        })
    }

    fn drain(&mut self) -> Result<()> {
        let n = std::mem::take(&mut self.remaining);
        if n == 0 {
            return Ok(());
        }
        let r = match &mut self.src {
            Source::Memory { .. } => Ok(()),
            Source::Port { rx, conn } => {
                let (c, dead) = rx.conn_and_liveness(*conn);
                c.skip(n, self.stall, &dead)
            }
        };
        r.map_err(|e| self.lost(e))
    }

    /// Ends the message, skipping unread bytes, and frees the port for the next one.
    pub fn finish(mut self) {
        if let Err(e) = self.drain() {
            tracing::warn!("finishing message: {e}");
        }
    }

    /// Like [`ReadMessage::finish`], but reports a connection lost while skipping unread bytes.
    pub fn finish_checked(mut self) -> Result<()> {
        self.drain()
    }
}

impl Drop for ReadMessage {
    // Inline where the message is dropped, mostly read to its end: only the check stays there.
    #[inline]
    fn drop(&mut self) {
        if self.remaining > 0 {
            self.drain_on_drop();
        }
    }
}

impl ReadMessage {
    #[cold]
    #[inline(never)]
    fn drain_on_drop(&mut self) {
        if let Err(e) = self.drain() {
            tracing::warn!("dropping message: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(swapped: bool) {
        let big: Vec<f64> = (0..10_000).map(|i| i as f64 * 0.5).collect();
        let small = [1i32, -2, 3];
        let mut w = if swapped {
            WriteMessage::detached_swapped()
        } else {
            WriteMessage::detached()
        };
        w.write_u32(7);
        w.write_f64(0.5);
        w.write_bool(true);
        w.write_slice(&big[..]);
        w.write_slice(&small[..]);
        w.write_bytes(b"raw");
        w.write(&("text".to_string(), vec![1u16, 2])).unwrap();
        let bytes = w.into_bytes().unwrap();
        let mut r = ReadMessage::from_bytes(bytes, swapped);
        assert_eq!(r.read_u32().unwrap(), 7);
        assert_eq!(r.read_f64().unwrap(), 0.5);
        assert!(r.read_bool().unwrap());
        let mut back = vec![0f64; big.len()];
        r.read_slice_into(&mut back).unwrap();
        assert_eq!(back, big);
        assert_eq!(r.read_slice::<i32>().unwrap(), small);
        assert_eq!(r.read_bytes().unwrap(), b"raw");
        let o: (String, Vec<u16>) = r.read().unwrap();
        assert_eq!(o, ("text".to_string(), vec![1, 2]));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn bytes_written_in_place_read_as_one_buffer_and_a_wrong_count_fails_the_message() {
        let mut w = WriteMessage::detached_swapped();
        w.write_bytes_from(7, |b| {
            b.extend_from_slice(b"head");
            b.extend_from_slice(b"er!");
        });
        w.write_u8(9);
        let mut r = ReadMessage::from_bytes(w.into_bytes().unwrap(), true);
        assert_eq!(r.read_bytes().unwrap(), b"header!");
        assert_eq!(r.read_u8().unwrap(), 9);
        assert_eq!(r.remaining(), 0);
        for wrong in [&b"short"[..], &b"far too long"[..]] {
            let mut w = WriteMessage::detached();
            w.write_bytes_from(7, |b| b.extend_from_slice(wrong));
            let e = w.into_bytes().unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("announced as 7 bytes got {}", wrong.len())),
                "{e}"
            );
        }
    }

    #[test]
    fn a_shared_buffer_is_written_as_its_bytes_would_be() {
        let big = Bytes::from((0..10_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let mut a = WriteMessage::detached();
        a.write_u8(7);
        a.write_shared_bytes(big.clone());
        a.write_shared_bytes(Bytes::from_static(b"small"));
        a.write_u8(9);
        let mut b = WriteMessage::detached();
        b.write_u8(7);
        b.write_bytes(&big);
        b.write_bytes(b"small");
        b.write_u8(9);
        assert_eq!(a.len(), b.len());
        assert_eq!(a.owners().iter().filter(|o| o.is_some()).count(), 1);
        assert_eq!(a.owners().len(), a.parts().len());
        assert!(a.into_bytes().unwrap() == b.into_bytes().unwrap());
    }

    #[test]
    fn read_bytes_to_replaces_and_reuses() {
        let big: Vec<u8> = (0..200_000).map(|i| i as u8).collect();
        let mut w = WriteMessage::detached();
        w.write_bytes(b"first");
        w.write_bytes(&big);
        w.write_bytes(b"");
        w.write_bytes(b"last");
        let mut r = ReadMessage::from_bytes(w.into_bytes().unwrap(), false);
        let mut buf = b"old contents".to_vec();
        r.read_bytes_to(&mut buf).unwrap();
        assert_eq!(buf, b"first");
        r.read_bytes_to(&mut buf).unwrap();
        assert_eq!(buf, big);
        let grown = buf.capacity();
        r.read_bytes_to(&mut buf).unwrap();
        assert!(buf.is_empty());
        r.read_bytes_to(&mut buf).unwrap();
        assert_eq!(buf, b"last");
        assert_eq!(buf.capacity(), grown, "the vector's memory is reused");
        assert_eq!(r.remaining(), 0);
        // A length beyond the message is an error, not an allocation.
        let mut bytes = vec![crate::primitive::TAG_BYTES];
        bytes.extend_from_slice(&(1u64 << 40).to_ne_bytes());
        let mut r = ReadMessage::from_bytes(bytes, false);
        assert!(r.read_bytes_to(&mut buf).is_err());
    }

    #[test]
    fn detached_round_trip_native_and_swapped() {
        round_trip(false);
        round_trip(true);
    }

    #[test]
    fn swapped_bytes_really_differ() {
        let mut a = WriteMessage::detached();
        a.write_u32(1);
        let mut b = WriteMessage::detached_swapped();
        b.write_u32(1);
        assert_ne!(a.into_bytes().unwrap(), b.into_bytes().unwrap());
    }

    #[test]
    fn type_mismatch_names_both_types() {
        let mut w = WriteMessage::detached();
        w.write_u32(1);
        let mut r = ReadMessage::from_bytes(w.into_bytes().unwrap(), false);
        let e = r.read_f64().unwrap_err().to_string();
        assert!(e.contains("f64") && e.contains("u32"), "{e}");
    }

    #[test]
    fn wrong_slice_length_is_an_error() {
        let v = [1u64, 2, 3];
        let mut w = WriteMessage::detached();
        w.write_slice(&v[..]);
        let mut r = ReadMessage::from_bytes(w.into_bytes().unwrap(), false);
        let mut buf = [0u64; 2];
        assert!(r.read_slice_into(&mut buf).is_err());
    }

    #[test]
    fn reading_past_the_end_is_an_error() {
        let mut r = ReadMessage::from_bytes(vec![], false);
        assert!(r.read_u8().is_err());
    }
}
