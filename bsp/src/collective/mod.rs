//! Collective operations with a number of rounds that grows like log2(P), or the best known
//! algorithm for what they move.
//!
//! Every process calls the same collectives in the same order. A collective is one operation
//! (one sequence number, see [`Call`]); its messages carry the operation's code and a
//! signature of its arguments, so that processes that called different operations, or the
//! same with different arguments, get [`Error::CollectiveMismatch`] instead of garbage.
//! Payloads carry the byte order of the process that produced them; values forwarded through
//! other processes keep theirs (serde values are framed items, see [`put_item`]).
//!
//! - [`reduce`]: all-reduce, reduce to a root, scans and reduce-scatter, in pid order;
//! - [`tree`]: broadcast, gather and scatter along binomial trees;
//! - [`exchange`]: total exchange, all-to-all and all-gather.

mod exchange;
mod reduce;
mod tree;

#[cfg(feature = "mpi")]
pub(crate) use reduce::Folded;
pub(crate) use reduce::Numbers;

use crate::error::{Error, Result};
use crate::net::{Ctx, Msg};
use crate::number::{vec_from_bytes, Number};
use crate::op;
use crate::superstep::Bsp;
use crate::wire::{self, put_varint, Cursor, Header};
use serde::Serialize;

pub(crate) type Enc<'a, V> = &'a dyn Fn(&V, &mut Vec<u8>) -> std::result::Result<(), String>;
pub(crate) type Dec<'a, V> = &'a dyn Fn(&[u8], bool) -> std::result::Result<V, String>;

/// A stable hash (FNV-1a) of a type name, or of any bytes, for signatures: mismatched types
/// or arguments are caught.
pub(crate) fn name_hash(name: &str) -> u64 {
    bytes_hash(name.as_bytes())
}

pub(crate) fn bytes_hash(bytes: &[u8]) -> u64 {
    fnv_bytes(FNV_START, bytes)
}

/// Where an FNV-1a hash starts.
pub(crate) const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The items of `it` in a [`SmallVec`](smallvec::SmallVec), pushed one at a time: collecting through
/// `SmallVec`'s `Extend` costs several times as much for the few items of a small group, and
/// the collectives do it at every call.
pub(crate) fn small_vec<A: smallvec::Array>(
    it: impl Iterator<Item = A::Item>,
) -> smallvec::SmallVec<A> {
    let mut v = smallvec::SmallVec::new();
    for x in it {
        v.push(x);
    }
    v
}

/// Goes on with FNV-1a hash `h` over `bytes`.
pub(crate) fn fnv_bytes(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The signature of a serde collective: its value type (and `extra`, e.g. a root).
pub(crate) fn type_sig<T: ?Sized>(extra: u64) -> u64 {
    name_hash(std::any::type_name::<T>()) ^ extra.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The signature of a rooted operation on values of `T` (broadcast, gather, scatter): the root
/// in the low half, which [`op::describe`] prints, and the type in the high half, so that processes
/// passing values of different types are a mismatch, not bytes decoded as the wrong type.
pub(crate) fn rooted_sig<T: ?Sized>(root: usize) -> u64 {
    type_sig::<T>(root as u64) << 32 | root as u64
}

pub(crate) fn number_bytes<T: Number>(
    v: &[T],
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    out.extend_from_slice(bytemuck::cast_slice(v));
    Ok(())
}

/// Numbers from a payload that must hold exactly `n` of them (any number when `None`).
pub(crate) fn numbers_from<T: Number>(
    b: &[u8],
    swap: bool,
    n: Option<usize>,
) -> std::result::Result<Vec<T>, String> {
    let size = std::mem::size_of::<T>();
    match n {
        Some(n) if b.len() != n * size => Err(format!("{} bytes for {n} {}", b.len(), T::NAME)),
        None if b.len() % size != 0 => {
            Err(format!("{} bytes are not a number of {}", b.len(), T::NAME))
        }
        _ => Ok(vec_from_bytes::<T>(b, swap)),
    }
}

/// Appends the numbers of a payload that must hold exactly `n` of them to `dst`, copying
/// them once, straight into its memory.
pub(crate) fn extend_numbers<T: Number>(
    dst: &mut Vec<T>,
    b: &[u8],
    swap: bool,
    n: usize,
) -> std::result::Result<(), String> {
    if b.len() != n * std::mem::size_of::<T>() {
        return Err(format!("{} bytes for {n} {}", b.len(), T::NAME));
    }
    crate::number::extend_from_bytes(dst, b, swap);
    Ok(())
}

/// Appends one serde value as a framed item: the byte order it is written in, its length,
/// its bytes. Items keep their byte order when forwarded, so a payload may mix orders.
pub(crate) fn put_item<T: Serialize + ?Sized>(
    v: &T,
    out: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    let bytes = crate::codec::to_vec(v).map_err(|e| e.0)?;
    put_raw_item(&bytes, wire::native_flag(), out);
    Ok(())
}

/// Appends already encoded bytes as a framed item.
pub(crate) fn put_raw_item(bytes: &[u8], flags: u8, out: &mut Vec<u8>) {
    out.push(flags);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The next framed item of a payload: its order flags and bytes.
pub(crate) fn next_item<'a>(c: &mut Cursor<'a>) -> std::result::Result<(u8, &'a [u8]), String> {
    let flags = c.u8()?;
    let n = c.usize()?;
    Ok((flags, c.bytes(n)?))
}

/// One collective operation in progress: what its messages carry and where it stands.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub seq: u64,
    pub op: u8,
    pub sig: u64,
    pub ctx: Ctx,
}

impl Bsp {
    pub(crate) fn round_header(seq: u64, op: u8, sig: u64, round: u32, flags: u8) -> Header {
        Header {
            kind: 0,
            flags,
            op,
            round,
            epoch: seq,
            aux: sig,
            comm: 0,
        }
    }

    /// Starts collective `op` with signature `sig`.
    pub(crate) fn begin(&mut self, op: u8, sig: u64) -> Call {
        let (seq, ctx) = self.begin_op(op);
        tracing::trace!(pid = self.pid, seq, comm = self.comm, "{}", op::name(op));
        Call { seq, op, sig, ctx }
    }

    /// The error for a value that cannot be serialized.
    pub(crate) fn encode_error<V: ?Sized>(&self, reason: String) -> Error {
        Error::Encode {
            pid: self.pid,
            superstep: self.superstep,
            type_name: std::any::type_name::<V>(),
            reason,
        }
    }

    /// The error for a payload from `src` that does not decode.
    pub(crate) fn payload_error(&self, call: &Call, src: usize, reason: String) -> Error {
        Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src,
            reason: format!("{} payload: {reason}", op::name(call.op)),
        }
    }

    /// Sends a payload of round `round` of `call` to `to`; `flags` give its byte order.
    pub(crate) fn send_bytes(
        &self,
        call: &Call,
        to: usize,
        round: u32,
        payload: &[u8],
        flags: u8,
    ) -> Result<()> {
        let hdr = Self::round_header(call.seq, call.op, call.sig, round, flags);
        self.send_round(to, hdr, payload, &call.ctx)
    }

    /// Sends a value this process produced.
    pub(crate) fn send_value<V>(
        &self,
        call: &Call,
        to: usize,
        round: u32,
        v: &V,
        enc: Enc<'_, V>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        buf.clear();
        enc(v, buf).map_err(|reason| self.encode_error::<V>(reason))?;
        self.send_bytes(call, to, round, buf, wire::native_flag())
    }

    /// Sends a slice of numbers from where it lies: their encoding is their memory, in this
    /// machine's byte order (as [`reduce::Numbers`] sends them).
    pub(crate) fn send_numbers<T: Number>(
        &self,
        call: &Call,
        to: usize,
        round: u32,
        values: &[T],
    ) -> Result<()> {
        self.send_bytes(
            call,
            to,
            round,
            bytemuck::cast_slice(values),
            wire::native_flag(),
        )
    }

    /// Receives round `round` of `call` from `from`, checking that it is the same operation
    /// with the same arguments.
    pub(crate) fn recv_msg(&self, call: &Call, from: usize, round: u32) -> Result<Msg> {
        self.recv_checked(from, call.seq, call.op, call.sig, round, &call.ctx)
    }

    /// Receives and decodes a value.
    pub(crate) fn recv_value<V>(
        &self,
        call: &Call,
        from: usize,
        round: u32,
        dec: Dec<'_, V>,
    ) -> Result<V> {
        let msg = self.recv_msg(call, from, round)?;
        dec(msg.payload(), msg.swapped()).map_err(|reason| self.payload_error(call, from, reason))
    }

    /// Receives round `round` of operation `seq` from `from`, checking that it is the same
    /// operation with the same arguments.
    pub(crate) fn recv_checked(
        &self,
        from: usize,
        seq: u64,
        op: u8,
        sig: u64,
        round: u32,
        ctx: &Ctx,
    ) -> Result<Msg> {
        let msg = self.recv_round(from, seq, round, (op, sig), ctx)?;
        // Pids of the whole machine, as in the mismatches the connections find.
        let (me, peer) = (self.world_pid(self.pid), self.world_pid(from));
        if msg.hdr.op != op {
            return Err(Error::CollectiveMismatch {
                pid: me,
                seq,
                mine: op::name(op).to_string(),
                peer,
                theirs: format!("called {}", op::name(msg.hdr.op)),
            });
        }
        if msg.hdr.aux != sig {
            return Err(Error::CollectiveMismatch {
                pid: me,
                seq,
                mine: op::describe_call(op, sig),
                peer,
                theirs: format!("called it with {}", op::describe(op, msg.hdr.aux)),
            });
        }
        Ok(msg)
    }

    /// The error for an argument that is wrong on this process.
    pub(crate) fn usage(&self, what: String) -> Error {
        Error::Usage {
            pid: self.pid,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_hash_tells_types_apart() {
        assert_ne!(name_hash("u32"), name_hash("u64"));
        assert_eq!(name_hash("x"), name_hash("x"));
    }
}
