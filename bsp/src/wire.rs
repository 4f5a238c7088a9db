//! What the layer's messages look like.
//!
//! Every message starts with one byte-buffer item holding a 32-byte [`Header`] (in the sender's
//! byte order, marked by its first byte) and, for small control messages, the payload. Data
//! messages (the combined packets of one superstep for one destination) list the number types
//! of their large slices after the header and follow with two byte buffers, the packet stream
//! and the remote-memory stream, and then the large slices as the port library's own slice
//! items, which are written from and read into their vectors without copies.
//!
//! The packet stream is a sequence of entries:
//! - `0x80 | t`, length (varint), bytes: a serialized packet of the `t`-th type of this message;
//! - [`WIDE_PACKET`], type (varint), length (varint), bytes: the same for types from 127 on;
//! - [`TYPE_DEF`], length (varint), name: defines the next type index (first use in a message);
//! - [`SLICE_INLINE`], number code, count (varint), raw numbers: a small slice;
//! - [`SLICE_OOL`], number code: a large slice, the next slice item of the message.
//!
//! The remote-memory stream holds [`PUT`] and [`GET`] entries.

/// Bytes of a header.
pub(crate) const HEADER_LEN: usize = 32;

/// Byte-order marker of this machine.
const MARK: u8 = if cfg!(target_endian = "big") {
    b'B'
} else {
    b'L'
};

/// Message kinds.
pub(crate) const KIND_ROUND: u8 = 1;
pub(crate) const KIND_DATA: u8 = 2;
pub(crate) const KIND_BULK: u8 = 3;

/// The payload of this round message travels as a bulk message on the data connection.
pub(crate) const FLAG_NOTICE: u8 = 1;
/// The payload was produced on a big-endian machine.
pub(crate) const FLAG_BIG: u8 = 2;
/// The operation failed at its source (e.g. a root without values): no payload follows.
pub(crate) const FLAG_FAILED: u8 = 4;

/// Packet stream entries.
pub(crate) const WIDE_PACKET: u8 = 0x01;
pub(crate) const TYPE_DEF: u8 = 0x02;
pub(crate) const SLICE_INLINE: u8 = 0x03;
pub(crate) const SLICE_OOL: u8 = 0x04;
/// Remote-memory stream entries.
pub(crate) const PUT: u8 = 0x10;
pub(crate) const GET: u8 = 0x11;

/// Slices of at least this many bytes travel as separate slice items, without copies.
pub(crate) const OOL_MIN: usize = 4096;

/// The payload order flag of data produced here.
pub(crate) fn native_flag() -> u8 {
    if cfg!(target_endian = "big") {
        FLAG_BIG
    } else {
        0
    }
}

/// Whether a payload marked with `flags` must be swapped here.
pub(crate) fn payload_swapped(flags: u8) -> bool {
    (flags & FLAG_BIG != 0) != cfg!(target_endian = "big")
}

/// The fixed part of every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: u8,
    pub flags: u8,
    /// Operation code (round messages): which collective, or sync.
    pub op: u8,
    /// Round within the operation; for data messages the part number.
    pub round: u32,
    /// Operation sequence number (round and bulk messages) or superstep (data messages).
    pub epoch: u64,
    /// Kind-specific: for data messages the length of the packet stream; for round messages a
    /// signature of the operation's arguments.
    pub aux: u64,
    /// The group the message belongs to (0: the whole machine; see `Bsp::split`).
    pub comm: u64,
}

impl Header {
    /// The header's [`HEADER_LEN`] bytes, put together in place: one append of them costs less
    /// than an append per field, each of which checks the vector's room.
    pub(crate) fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(&[MARK, self.kind, self.flags, self.op]);
        b[4..8].copy_from_slice(&self.round.to_ne_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_ne_bytes());
        b[16..24].copy_from_slice(&self.aux.to_ne_bytes());
        b[24..].copy_from_slice(&self.comm.to_ne_bytes());
        b
    }

    #[inline]
    pub(crate) fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HEADER_LEN {
            return Err(format!("message of {} bytes has no header", b.len()));
        }
        let swap = match b[0] {
            m if m == MARK => false,
            b'L' | b'B' => true,
            m => return Err(format!("bad byte-order mark {m:#x}")),
        };
        let u32_at = |i: usize| {
            let v = u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        };
        let u64_at = |i: usize| {
            let v = u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            if swap {
                v.swap_bytes()
            } else {
                v
            }
        };
        Ok(Header {
            kind: b[1],
            flags: b[2],
            op: b[3],
            round: u32_at(4),
            epoch: u64_at(8),
            aux: u64_at(16),
            comm: u64_at(24),
        })
    }
}

/// Appends `v` as LEB128.
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `v` takes as LEB128.
#[inline]
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a stream of entries.
pub(crate) struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| format!("stream ends at byte {}", self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err("varint longer than 10 bytes".into());
            }
        }
    }

    #[inline]
    pub(crate) fn usize(&mut self) -> Result<usize, String> {
        usize::try_from(self.varint()?).map_err(|_| "length does not fit in memory".to_string())
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "entry of {n} bytes at byte {} overruns the {}-byte stream",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_swaps() {
        let h = Header {
            kind: KIND_DATA,
            flags: FLAG_NOTICE,
            op: 7,
            round: 0x0102_0304,
            epoch: 0x1122_3344_5566_7788,
            aux: 42,
            comm: 0x0a0b_0c0d_0e0f_1011,
        };
        let mut b = h.to_bytes().to_vec();
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(Header::decode(&b).unwrap(), h);
        // The same header written by a machine of the other byte order.
        let mut other = b.clone();
        other[0] = if MARK == b'L' { b'B' } else { b'L' };
        other[4..8].reverse();
        other[8..16].reverse();
        other[16..24].reverse();
        other[24..32].reverse();
        assert_eq!(Header::decode(&other).unwrap(), h);
        assert!(Header::decode(&b[..10]).is_err());
        b[0] = 0;
        assert!(Header::decode(&b).is_err());
    }

    #[test]
    fn varints_round_trip_with_the_predicted_length() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
            let mut c = Cursor::new(&b, 0);
            assert_eq!(c.varint().unwrap(), v);
            assert!(c.at_end());
        }
        let mut c = Cursor::new(&[0x80, 0x80], 0);
        assert!(c.varint().is_err());
        let mut c = Cursor::new(&[1, 2, 3], 0);
        assert!(c.bytes(4).is_err());
        assert_eq!(c.bytes(3).unwrap(), &[1, 2, 3]);
    }
}
