//! Collective operations with a number of rounds that grows like log2(P).
//!
//! - Reductions (and the barrier of `sync`) use recursive doubling in pid order: with
//!   P' = 2^floor(log2 P) and r = P - P', the first 2r processes pair up (2i, 2i+1) and the odd
//!   one of each pair combines both values; the resulting P' participants, each holding a
//!   contiguous block of pids, exchange values with partners at distance 1, 2, 4, ... and
//!   combine `lower block ⊕ higher block`. Both partners compute the same expression, so
//!   every process ends with a bit-identical result; the odd processes then hand it back to
//!   their even partners. log2(P) rounds for a power of two, floor(log2 P) + 2 otherwise.
//! - Broadcast and gather use binomial trees rooted at the root: ceil(log2 P) rounds.
//! - Total exchange uses Bruck's algorithm: in round k every process sends the items whose
//!   destination distance has bit k set to the process 2^k ahead: ceil(log2 P) rounds.

use crate::core::{op, Bsp};
use crate::error::{Error, Result};
use crate::net::{Ctx, Msg};
use crate::number::{code_name, vec_from_bytes, Number, Op};
use crate::wire::{self, put_varint, Cursor, Header};
use serde::de::DeserializeOwned;
use serde::Serialize;

type Enc<'a, V> = &'a dyn Fn(&V, &mut Vec<u8>) -> std::result::Result<(), String>;
type Dec<'a, V> = &'a dyn Fn(&[u8], bool) -> std::result::Result<V, String>;

/// Describes a collective's arguments, as encoded in its signature, for mismatch errors.
fn describe(op: u8, sig: u64) -> String {
    match op {
        op::SYNC => format!("{sig} processes"),
        op::ALL_REDUCE => {
            let reduction = match (sig >> 8) & 0xff {
                1 => "sum",
                2 => "product",
                3 => "min",
                4 => "max",
                _ => "a user function",
            };
            format!(
                "{} {} values and {reduction}",
                sig >> 16,
                code_name((sig & 0xff) as u8)
            )
        }
        op::ALL_REDUCE_WITH => format!("a value of type hash {sig:#x}"),
        op::BROADCAST | op::GATHER => format!("root {sig}"),
        op::TOTAL_EXCHANGE => format!("{} {} values", sig >> 8, code_name((sig & 0xff) as u8)),
        _ => format!("signature {sig:#x}"),
    }
}

/// A stable hash of a type name (FNV-1a), so mismatched `all_reduce_with` types are caught.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn number_bytes<T: Number>(v: &[T], out: &mut Vec<u8>) -> std::result::Result<(), String> {
    out.extend_from_slice(bytemuck::cast_slice(v));
    Ok(())
}

impl Bsp {
    fn round_header(seq: u64, op: u8, sig: u64, round: u32, flags: u8) -> Header {
        Header {
            kind: 0,
            flags,
            op,
            round,
            epoch: seq,
            aux: sig,
        }
    }

    /// Sends a payload this process produced.
    #[allow(clippy::too_many_arguments)]
    fn send_value<V>(
        &mut self,
        to: usize,
        seq: u64,
        op: u8,
        sig: u64,
        round: u32,
        v: &V,
        enc: Enc<'_, V>,
        buf: &mut Vec<u8>,
        ctx: &Ctx,
    ) -> Result<()> {
        buf.clear();
        enc(v, buf).map_err(|reason| Error::Encode {
            pid: self.pid,
            superstep: self.superstep,
            type_name: std::any::type_name::<V>(),
            reason,
        })?;
        let hdr = Self::round_header(seq, op, sig, round, wire::native_flag());
        self.net.send_round(to, hdr, buf, ctx)
    }

    /// Receives round `round` of operation `seq` from `from`, checking that it is the same
    /// operation with the same arguments.
    pub(crate) fn recv_checked(
        &mut self,
        from: usize,
        seq: u64,
        op: u8,
        sig: u64,
        round: u32,
        ctx: &Ctx,
    ) -> Result<Msg> {
        let msg = self.net.recv_round(from, seq, round, op, ctx)?;
        if msg.hdr.op != op {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: op::name(op).to_string(),
                peer: from,
                theirs: format!("called {}", op::name(msg.hdr.op)),
            });
        }
        if msg.hdr.aux != sig {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: format!("{} with {}", op::name(op), describe(op, sig)),
                peer: from,
                theirs: format!("called it with {}", describe(op, msg.hdr.aux)),
            });
        }
        Ok(msg)
    }

    #[allow(clippy::too_many_arguments)]
    fn recv_value<V>(
        &mut self,
        from: usize,
        seq: u64,
        op: u8,
        sig: u64,
        round: u32,
        dec: Dec<'_, V>,
        ctx: &Ctx,
    ) -> Result<V> {
        let msg = self.recv_checked(from, seq, op, sig, round, ctx)?;
        dec(msg.payload(), msg.swapped()).map_err(|reason| Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src: from,
            reason: format!("{} payload: {reason}", op::name(op)),
        })
    }

    /// Rank-ordered all-reduce by recursive doubling (see the module documentation).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn butterfly<V>(
        &mut self,
        seq: u64,
        op: u8,
        sig: u64,
        ctx: &Ctx,
        mine: V,
        enc: Enc<'_, V>,
        dec: Dec<'_, V>,
        comb: &mut dyn FnMut(V, V) -> V,
    ) -> Result<V> {
        let (p, r) = (self.nprocs, self.pid);
        if p == 1 {
            return Ok(mine);
        }
        let pof2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
        let rem = p - pof2;
        let rounds = pof2.trailing_zeros();
        let mut buf = Vec::new();
        let mut v = mine;
        let newrank = if r < 2 * rem {
            if r % 2 == 0 {
                self.send_value(r + 1, seq, op, sig, 0, &v, enc, &mut buf, ctx)?;
                None
            } else {
                let lower = self.recv_value(r - 1, seq, op, sig, 0, dec, ctx)?;
                v = comb(lower, v);
                Some(r / 2)
            }
        } else {
            Some(r - rem)
        };
        if let Some(nr) = newrank {
            for k in 0..rounds {
                let pn = nr ^ (1 << k);
                let peer = if pn < rem { 2 * pn + 1 } else { pn + rem };
                self.send_value(peer, seq, op, sig, k + 1, &v, enc, &mut buf, ctx)?;
                let theirs = self.recv_value(peer, seq, op, sig, k + 1, dec, ctx)?;
                v = if pn < nr {
                    comb(theirs, v)
                } else {
                    comb(v, theirs)
                };
            }
        }
        if r < 2 * rem {
            if r % 2 == 1 {
                self.send_value(r - 1, seq, op, sig, rounds + 1, &v, enc, &mut buf, ctx)?;
            } else {
                v = self.recv_value(r + 1, seq, op, sig, rounds + 1, dec, ctx)?;
            }
        }
        Ok(v)
    }

    /// Combines one number from every process with `op` and returns the result on every
    /// process: `let m: f64 = bsp.all_reduce(local_max, bsp::Op::Max)?;`.
    ///
    /// Values are combined in pid order along a fixed tree, so every process gets a
    /// bit-identical result. Every process must call it with the same `op`. Does not end the
    /// superstep.
    pub fn all_reduce<T: Number>(&mut self, value: T, op: Op<T>) -> Result<T> {
        let (seq, ctx) = self.next_seq(op::ALL_REDUCE);
        let sig = u64::from(T::TAG) | u64::from(op.code()) << 8 | 1 << 16;
        tracing::trace!(pid = self.pid, seq, "all_reduce {}", op.name());
        self.butterfly(
            seq,
            op::ALL_REDUCE,
            sig,
            &ctx,
            value,
            &|v: &T, out: &mut Vec<u8>| number_bytes(std::slice::from_ref(v), out),
            &|b: &[u8], swap: bool| {
                if b.len() != std::mem::size_of::<T>() {
                    return Err(format!("{} bytes for one {}", b.len(), T::NAME));
                }
                Ok(vec_from_bytes::<T>(b, swap)[0])
            },
            &mut |a: T, b: T| op.apply(a, b),
        )
    }

    /// Element-wise [`all_reduce`](Bsp::all_reduce) of a slice, in place. Every process must
    /// give a slice of the same length.
    pub fn all_reduce_slice<T: Number>(&mut self, values: &mut [T], op: Op<T>) -> Result<()> {
        let (seq, ctx) = self.next_seq(op::ALL_REDUCE);
        let n = values.len();
        let bytes = std::mem::size_of_val(values);
        let sig = u64::from(T::TAG) | u64::from(op.code()) << 8 | (n as u64) << 16;
        let r = self.butterfly(
            seq,
            op::ALL_REDUCE,
            sig,
            &ctx,
            values.to_vec(),
            &|v: &Vec<T>, out: &mut Vec<u8>| number_bytes(v, out),
            &|b: &[u8], swap: bool| {
                if b.len() != bytes {
                    return Err(format!("{} bytes for {n} {}", b.len(), T::NAME));
                }
                Ok(vec_from_bytes::<T>(b, swap))
            },
            &mut |mut a: Vec<T>, b: Vec<T>| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x = op.apply(*x, y);
                }
                a
            },
        )?;
        values.copy_from_slice(&r);
        Ok(())
    }

    /// Combines a value of any serde type from every process with `f(lower pids, higher
    /// pids)`, which must be associative (it need not be commutative); every process gets the
    /// same result.
    pub fn all_reduce_with<T, F>(&mut self, value: T, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T,
    {
        let (seq, ctx) = self.next_seq(op::ALL_REDUCE_WITH);
        let sig = name_hash(std::any::type_name::<T>());
        self.butterfly(
            seq,
            op::ALL_REDUCE_WITH,
            sig,
            &ctx,
            value,
            &|v: &T, out: &mut Vec<u8>| crate::codec::encode_into(v, out).map_err(|e| e.0),
            &|b: &[u8], swap: bool| crate::codec::decode::<T>(b, swap).map_err(|e| e.0),
            &mut |a: T, b: T| f(a, b),
        )
    }

    /// Sends `value` from `root` to every process along a binomial tree; returns it on every
    /// process. The root passes `Some(value)`, the others `None`.
    pub fn broadcast<T>(&mut self, root: usize, value: Option<T>) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
    {
        let (seq, ctx) = self.next_seq(op::BROADCAST);
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("broadcast root", root));
        }
        let sig = root as u64;
        let rel = (self.pid + p - root) % p;
        let (payload, flags, mine) = if rel == 0 {
            let v = value.ok_or_else(|| Error::Usage {
                pid: self.pid,
                what: "the root of broadcast must pass Some(value)".into(),
            })?;
            let bytes = crate::codec::to_vec(&v).map_err(|e| Error::Encode {
                pid: self.pid,
                superstep: self.superstep,
                type_name: std::any::type_name::<T>(),
                reason: e.0,
            })?;
            (bytes, wire::native_flag(), Some(v))
        } else {
            let mut mask = 1;
            while rel & mask == 0 {
                mask <<= 1;
            }
            let parent = (rel - mask + root) % p;
            let msg = self.recv_checked(parent, seq, op::BROADCAST, sig, 0, &ctx)?;
            let flags = msg.hdr.flags & wire::FLAG_BIG;
            (msg.payload().to_vec(), flags, None)
        };
        // Children: relative ranks rel + 2^k for every 2^k below rel's lowest set bit.
        let low = if rel == 0 {
            p.next_power_of_two()
        } else {
            1 << rel.trailing_zeros()
        };
        let mut mask = low >> 1;
        while mask > 0 {
            if rel + mask < p {
                let child = (rel + mask + root) % p;
                let hdr = Self::round_header(seq, op::BROADCAST, sig, 0, flags);
                self.net.send_round(child, hdr, &payload, &ctx)?;
            }
            mask >>= 1;
        }
        match mine {
            Some(v) => Ok(v),
            None => {
                crate::codec::decode::<T>(&payload, wire::payload_swapped(flags)).map_err(|e| {
                    Error::Decode {
                        pid: self.pid,
                        superstep: self.superstep,
                        src: root,
                        reason: format!("broadcast value: {}", e.0),
                    }
                })
            }
        }
    }

    /// Collects one value from every process at `root` along a binomial tree: `Some(values)`
    /// in pid order at the root, `None` elsewhere.
    pub fn gather<T>(&mut self, root: usize, value: &T) -> Result<Option<Vec<T>>>
    where
        T: Serialize + DeserializeOwned,
    {
        let (seq, ctx) = self.next_seq(op::GATHER);
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("gather root", root));
        }
        let sig = root as u64;
        let rel = (self.pid + p - root) % p;
        // The items of relative ranks rel.. in order, each: order flag, length, bytes.
        let mut block = Vec::new();
        block.push(wire::native_flag());
        let own = crate::codec::to_vec(value).map_err(|e| Error::Encode {
            pid: self.pid,
            superstep: self.superstep,
            type_name: std::any::type_name::<T>(),
            reason: e.0,
        })?;
        put_varint(&mut block, own.len() as u64);
        block.extend_from_slice(&own);
        let mut mask = 1;
        while mask < p {
            if rel & mask != 0 {
                let parent = (rel - mask + root) % p;
                let hdr = Self::round_header(seq, op::GATHER, sig, 0, wire::native_flag());
                self.net.send_round(parent, hdr, &block, &ctx)?;
                return Ok(None);
            }
            if rel + mask < p {
                let child = (rel + mask + root) % p;
                let msg = self.recv_checked(child, seq, op::GATHER, sig, 0, &ctx)?;
                block.extend_from_slice(msg.payload());
            }
            mask <<= 1;
        }
        let decode_err = |src: usize, reason: String| Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src,
            reason: format!("gathered value: {reason}"),
        };
        let mut out: Vec<Option<T>> = (0..p).map(|_| None).collect();
        let mut c = Cursor::new(&block, 0);
        for i in 0..p {
            let src = (i + root) % p;
            let item = (|| -> std::result::Result<T, String> {
                let flags = c.u8()?;
                let n = c.usize()?;
                let bytes = c.bytes(n)?;
                crate::codec::decode::<T>(bytes, wire::payload_swapped(flags)).map_err(|e| e.0)
            })()
            .map_err(|why| decode_err(src, why))?;
            out[src] = Some(item);
        }
        if !c.at_end() {
            return Err(decode_err(root, "more values than processes".into()));
        }
        Ok(Some(
            out.into_iter().map(|v| v.expect("one per pid")).collect(),
        ))
    }

    /// Every process sends `send[d]` to process `d` and gets back, at index `s`, what process
    /// `s` sent it (the seed's TotalExchangeInt, for any number type), with Bruck's algorithm.
    pub fn total_exchange<T: Number>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let (seq, ctx) = self.next_seq(op::TOTAL_EXCHANGE);
        let p = self.nprocs;
        if send.len() != p {
            return Err(Error::Usage {
                pid: self.pid,
                what: format!(
                    "total_exchange needs one value per process ({p}), got {}",
                    send.len()
                ),
            });
        }
        let sig = u64::from(T::TAG) | (p as u64) << 8;
        let me = self.pid;
        // tmp[i]: the item that travels distance i (from me to me + i at first).
        let mut tmp: Vec<T> = (0..p).map(|i| send[(me + i) % p]).collect();
        let mut buf = Vec::new();
        let mut dist = 1;
        let mut round = 0;
        while dist < p {
            let idx: Vec<usize> = (1..p).filter(|i| i & dist != 0).collect();
            let items: Vec<T> = idx.iter().map(|&i| tmp[i]).collect();
            let to = (me + dist) % p;
            let from = (me + p - dist) % p;
            let n = idx.len();
            self.send_value(
                to,
                seq,
                op::TOTAL_EXCHANGE,
                sig,
                round,
                &items,
                &|v: &Vec<T>, out: &mut Vec<u8>| number_bytes(v, out),
                &mut buf,
                &ctx,
            )?;
            let got = self.recv_value(
                from,
                seq,
                op::TOTAL_EXCHANGE,
                sig,
                round,
                &|b: &[u8], swap: bool| {
                    if b.len() != n * std::mem::size_of::<T>() {
                        return Err(format!("{} bytes for {n} {}", b.len(), T::NAME));
                    }
                    Ok(vec_from_bytes::<T>(b, swap))
                },
                &ctx,
            )?;
            for (j, &i) in idx.iter().enumerate() {
                tmp[i] = got[j];
            }
            dist <<= 1;
            round += 1;
        }
        Ok((0..p).map(|s| tmp[(me + p - s) % p]).collect())
    }

    /// TotalExchangeInt of the Green BSP Barnes-Hut code, in place: `values[d]` goes to process
    /// `d`; afterwards `values[s]` holds what process `s` sent here. By the code's convention
    /// -1 means "nothing for you" and comes back as -1 where nothing was sent.
    pub fn total_exchange_int(&mut self, values: &mut [i32]) -> Result<()> {
        let r = self.total_exchange(values)?;
        values.copy_from_slice(&r);
        Ok(())
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

    #[test]
    fn signatures_describe_arguments() {
        let s = describe(op::ALL_REDUCE, 10 | 4 << 8 | 3 << 16);
        assert_eq!(s, "3 f64 values and max");
        assert_eq!(describe(op::BROADCAST, 2), "root 2");
    }
}
