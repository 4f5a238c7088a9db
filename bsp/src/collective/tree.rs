//! Collectives along binomial trees rooted at one process: broadcast, gather and scatter, in
//! ceil(log2 P) rounds. Pids are taken relative to the root; the process at relative pid q
//! serves the relative pids q..q+2^k below its lowest set bit k (the root all of them). Up to
//! [`SMALL_GROUP`] processes, scatter's root sends every part itself.
//!
//! Scatter sends each child the values of its subtree in one message, largest subtree first,
//! each a slice of the message its parent got. A root without values sends messages marked
//! failed instead, so that every process fails with an error rather than waits.

use super::{next_item, numbers_from, put_item, rooted_sig, Call};
use crate::error::{Error, Result};
use crate::number::Number;
use crate::op;
use crate::superstep::Bsp;
use crate::wire::{self, put_varint, Cursor};
use serde::de::DeserializeOwned;
use serde::Serialize;
use smallvec::SmallVec;

/// Marks the part size in a scatter's row on the host board when the parts are in the root's
/// bulk half.
const IN_BULK: u64 = 1 << 63;
/// Marks the part size in a scatter's row on the host board when the parts are to be read
/// from the root's memory, whose address follows.
const IN_PEER: u64 = 1 << 62;

/// Where each part of a scatter's block ends, given the block and its number of parts.
type PartEnds<'a> = &'a dyn Fn(&[u8], usize) -> std::result::Result<Ends, String>;
/// The ends of a scatter's parts: inline up to 8, so that a small scatter does not allocate
/// for them.
type Ends = SmallVec<[usize; 8]>;
/// Decodes this process's part of a scatter from its bytes and their order flags.
type PartDecode<'a, V> = &'a dyn Fn(&[u8], u8) -> std::result::Result<V, String>;

/// Up to this many processes a scatter's root sends every part itself: one message per
/// process, each a single hop away, instead of a binomial tree whose deepest process is
/// ceil(log2 P) hops away. Measured at 8 bytes with 4 processes on 2 cores (bsp-bench, calls
/// timed between barriers): 41 us through the tree, against 19 us for OpenMPI's direct sends.
pub(crate) const SMALL_GROUP: usize = 4;

/// The relative pids a scatter's process at relative pid `rel` passes parts on to, each with
/// the relative pids whose parts it gets (`child..end`), largest subtree first.
fn scatter_children(rel: usize, p: usize) -> SmallVec<[(usize, usize); 8]> {
    if p <= SMALL_GROUP {
        return if rel == 0 {
            super::small_vec((1..p).map(|c| (c, c + 1)))
        } else {
            SmallVec::new()
        };
    }
    let mut out = SmallVec::new();
    let mut mask = span(rel, p) >> 1;
    while mask > 0 {
        if rel + mask < p {
            out.push((rel + mask, (rel + 2 * mask).min(p)));
        }
        mask >>= 1;
    }
    out
}

/// The relative pid a scatter's process at relative pid `rel` (not 0) gets its parts from,
/// and how many parts it gets (its own and those it passes on).
fn scatter_parent(rel: usize, p: usize) -> (usize, usize) {
    if p <= SMALL_GROUP {
        (0, 1)
    } else {
        (rel - span(rel, p), span(rel, p).min(p - rel))
    }
}

/// The subtree span of relative pid `rel` among `p`: the relative pids rel..rel+span it
/// serves (clipped to p by the caller).
fn span(rel: usize, p: usize) -> usize {
    if rel == 0 {
        p.next_power_of_two()
    } else {
        1 << rel.trailing_zeros()
    }
}

impl Bsp {
    /// Sends `value` from `root` to every process along a binomial tree; returns it on every
    /// process. The root passes `Some(value)`, the others `None`. A root that passes `None`, or
    /// whose value does not encode, sends a failure down the tree instead, so that every
    /// process returns an error rather than waits.
    pub fn broadcast<T>(&mut self, root: usize, value: Option<T>) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
    {
        let (seq, ctx) = self.begin_op(op::BROADCAST);
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("broadcast root", root));
        }
        let sig = rooted_sig::<T>(root);
        let rel = (self.pid + p - root) % p;
        // At the root: the value, or why there is none. Elsewhere: what the parent sent, kept
        // in its message, from which it is passed on and decoded without a copy.
        let mut received = None;
        let (encoded, flags, mine) = if rel == 0 {
            let encoded = match value {
                None => Err(self.usage("the root of broadcast must pass Some(value)".into())),
                Some(v) => crate::codec::to_vec(&v)
                    .map(|bytes| (bytes, v))
                    .map_err(|e| Error::Encode {
                        pid: self.pid,
                        superstep: self.superstep,
                        type_name: std::any::type_name::<T>(),
                        reason: e.0,
                    }),
            };
            match encoded {
                Ok((bytes, v)) => (bytes, wire::native_flag(), Ok(Some(v))),
                Err(e) => (Vec::new(), wire::FLAG_FAILED, Err(e)),
            }
        } else {
            let mut mask = 1;
            while rel & mask == 0 {
                mask <<= 1;
            }
            let parent = (rel - mask + root) % p;
            let msg = self.recv_checked(parent, seq, op::BROADCAST, sig, 0, &ctx)?;
            let flags = msg.hdr.flags & (wire::FLAG_BIG | wire::FLAG_FAILED);
            received = Some(msg);
            (Vec::new(), flags, Ok(None))
        };
        let payload = received.as_ref().map_or(&encoded[..], |m| m.payload());
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
                self.send_round(child, hdr, payload, &ctx)?;
            }
            mask >>= 1;
        }
        match mine? {
            Some(v) => Ok(v),
            None if flags & wire::FLAG_FAILED != 0 => Err(self.usage(format!(
                "broadcast: the root (pid {root}) had no value to send"
            ))),
            None => crate::codec::decode::<T>(payload, wire::payload_swapped(flags)).map_err(|e| {
                Error::Decode {
                    pid: self.pid,
                    superstep: self.superstep,
                    src: root,
                    reason: format!("broadcast value: {}", e.0),
                }
            }),
        }
    }

    /// Collects one value from every process at `root` along a binomial tree: `Some(values)`
    /// in pid order at the root, `None` elsewhere.
    pub fn gather<T>(&mut self, root: usize, value: &T) -> Result<Option<Vec<T>>>
    where
        T: Serialize + DeserializeOwned,
    {
        let (seq, ctx) = self.begin_op(op::GATHER);
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("gather root", root));
        }
        let sig = rooted_sig::<T>(root);
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
                self.send_round(parent, hdr, &block, &ctx)?;
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

    /// Binomial scatter from `root` (see the module documentation) of a block of one part
    /// per process, in pid order relative to the root: the root passes the block and a
    /// function that tells where each part ends, or `Err(why)` when it has nothing to scatter,
    /// which fails the scatter everywhere. Every process gets the block of its subtree and
    /// passes its children theirs, straight from the received message (no copy). Returns this
    /// process's part, decoded by `decode` (from its bytes and their order flags).
    fn tree_scatter<V>(
        &mut self,
        call: &Call,
        root: usize,
        block: std::result::Result<&[u8], String>,
        ends: PartEnds<'_>,
        decode: PartDecode<'_, V>,
    ) -> Result<V> {
        let p = self.nprocs;
        let rel = (self.pid + p - root) % p;
        let received;
        let (data, flags, failed, have): (&[u8], u8, bool, usize) = if rel == 0 {
            match &block {
                Ok(b) => (b, wire::native_flag(), false, p),
                Err(_) => (&[], wire::native_flag(), true, p),
            }
        } else {
            let (parent, have) = scatter_parent(rel, p);
            received = self.recv_msg(call, (parent + root) % p, 0)?;
            let failed = received.hdr.flags & wire::FLAG_FAILED != 0;
            (
                received.payload(),
                received.hdr.flags & wire::FLAG_BIG,
                failed,
                have,
            )
        };
        // Where the part of each relative pid rel, rel + 1, ... ends in `data`.
        let ends = if failed {
            Ends::new()
        } else {
            ends(data, have).map_err(|why| self.payload_error(call, root, why))?
        };
        for (child, end) in scatter_children(rel, p) {
            let to = (child + root) % p;
            if failed {
                self.send_bytes(call, to, 0, &[], flags | wire::FLAG_FAILED)?;
            } else {
                let part = &data[ends[child - rel - 1]..ends[end - rel - 1]];
                self.send_bytes(call, to, 0, part, flags)?;
            }
        }
        if let Err(why) = block {
            return Err(self.usage(why));
        }
        if failed {
            return Err(self.usage(format!(
                "{}: the root (pid {root}) had nothing to scatter",
                op::name(call.op)
            )));
        }
        decode(&data[..ends[0]], flags).map_err(|why| self.payload_error(call, root, why))
    }

    /// Sends `values[d]` from `root` to every process `d` along a binomial tree (MPI's
    /// `Scatter`, for any serde type); returns this process's value. The root passes
    /// `Some(values)`, one per process; the others `None`.
    pub fn scatter<T>(&mut self, root: usize, values: Option<Vec<T>>) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
    {
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("scatter root", root));
        }
        // The root's values framed one after another, in pid order relative to the root.
        let mut framed = Vec::new();
        let block = if self.pid != root {
            Ok(&[][..])
        } else {
            match values {
                None => Err("the root of scatter must pass Some(values)".to_string()),
                Some(v) if v.len() != p => Err(format!(
                    "scatter needs one value per process ({p}) at the root, got {}",
                    v.len()
                )),
                Some(v) => {
                    for i in 0..p {
                        put_item(&v[(i + root) % p], &mut framed)
                            .map_err(|why| self.encode_error::<T>(why))?;
                    }
                    Ok(&framed[..])
                }
            }
        };
        let call = self.begin(op::SCATTER, rooted_sig::<T>(root));
        let frames = |data: &[u8], have: usize| {
            let mut c = Cursor::new(data, 0);
            let mut ends = Ends::with_capacity(have);
            while !c.at_end() {
                next_item(&mut c)?;
                ends.push(c.pos);
            }
            if ends.len() != have {
                return Err(format!("{} values for a subtree of {have}", ends.len()));
            }
            Ok(ends)
        };
        let decode = |item: &[u8], _: u8| {
            let (flags, bytes) = next_item(&mut Cursor::new(item, 0))?;
            crate::codec::decode::<T>(bytes, wire::payload_swapped(flags)).map_err(|e| e.0)
        };
        self.tree_scatter(&call, root, block, &frames, &decode)
    }

    /// Splits the root's `values` into `P` equal parts in pid order and sends part `d` to
    /// process `d` (MPI's `Scatter` of numbers); returns this process's part. The root passes
    /// `Some(values)`, of a length that is a multiple of `P`; the others `None`.
    pub fn scatter_slice<T: Number>(
        &mut self,
        root: usize,
        values: Option<&[T]>,
    ) -> Result<Vec<T>> {
        let p = self.nprocs;
        if root >= p {
            return Err(self.bad_pid("scatter_slice root", root));
        }
        // The root's values in pid order relative to the root (a copy only when the root is
        // not pid 0).
        let mut rotated = Vec::new();
        let block = match (self.pid == root, values) {
            (false, _) => Ok(&[][..]),
            (true, None) => Err("the root of scatter_slice must pass Some(values)".to_string()),
            (true, Some(v)) if v.len() % p != 0 => Err(format!(
                "scatter_slice splits the root's values into {p} equal parts, but it has {}",
                v.len()
            )),
            (true, Some(v)) if root == 0 => Ok(bytemuck::cast_slice(v)),
            (true, Some(v)) => {
                let at = root * (v.len() / p);
                rotated.extend_from_slice(&v[at..]);
                rotated.extend_from_slice(&v[..at]);
                Ok(bytemuck::cast_slice(&rotated[..]))
            }
        };
        let board = self.host_board()?;
        let call = self.begin(op::SCATTER, rooted_sig::<[T]>(root));
        if let Some(board) = board {
            let whole = values.filter(|v| self.pid == root && v.len() % p == 0);
            if let Some(part) = self.scatter_on_board(&board, &call, root, whole)? {
                return Ok(part);
            }
        }
        let size = std::mem::size_of::<T>();
        let equal = |data: &[u8], have: usize| {
            let each = data.len() / have;
            if data.len() % have != 0 || each % size != 0 {
                return Err(format!(
                    "{} bytes for {have} equal parts of {}",
                    data.len(),
                    T::NAME
                ));
            }
            Ok(super::small_vec((1..=have).map(|i| i * each)))
        };
        let decode =
            |part: &[u8], flags: u8| numbers_from::<T>(part, wire::payload_swapped(flags), None);
        self.tree_scatter(&call, root, block, &equal, &decode)
    }

    /// [`scatter_slice`](Bsp::scatter_slice) on the host board (see [`board`](crate::board)):
    /// the root writes the size of a part and every part, in pid order, to its row, when they
    /// fit, or to its bulk half, when they fit that (the row then says so), and goes on; the
    /// others read its row and their part. A root whose parts fit neither (or that has no
    /// valid `whole`) writes an empty row, which sends everyone to the messages, and so does
    /// the root itself. Returns this process's part, or `None` for the messages.
    fn scatter_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        root: usize,
        whole: Option<&[T]>,
    ) -> Result<Option<Vec<T>>> {
        let (p, me, size) = (self.nprocs, self.pid, std::mem::size_of::<T>());
        if me == root {
            let Some(v) = whole else {
                self.post_on_board(board, call, &[])?;
                return Ok(None);
            };
            let bytes: &[u8] = bytemuck::cast_slice(v);
            let k = v.len() / p;
            // A word for the size of a part, then the parts.
            if bytes.len().div_ceil(8) >= board.capacity() {
                if self.scatter_reads_peers(board, bytes.len()) {
                    // Every process reads its part straight from the root's memory.
                    let head = [(bytes.len() / p) as u64 | IN_PEER, bytes.as_ptr() as u64];
                    let b = board.begin_acks();
                    self.on_board_rows(board, call, &head, root..root, |_, _| Ok(()))?;
                    // The root's own part is copied while the others read theirs.
                    let mine = v[me * k..me * k + k].to_vec();
                    self.wait_acks(board, call, b, p as u64 - 1)?;
                    return Ok(Some(mine));
                }
                if bytes.len() > board.bulk_capacity() {
                    self.post_on_board(board, call, &[])?;
                    return Ok(None);
                }
                // Every part but the root's own, which stays here.
                let each = bytes.len() / p;
                let parts = [&bytes[..root * each], &bytes[(root + 1) * each..]];
                let head = [each as u64 | IN_BULK];
                self.on_board_bulk(board, call, &head, &parts, root..root, |_, _| Ok(()))?;
                return Ok(Some(v[me * k..me * k + k].to_vec()));
            }
            let mut words: SmallVec<[u64; 16]> =
                SmallVec::from_elem(0, 1 + bytes.len().div_ceil(8));
            words[0] = (bytes.len() / p) as u64;
            bytemuck::cast_slice_mut::<u64, u8>(&mut words[1..])[..bytes.len()]
                .copy_from_slice(bytes);
            self.post_on_board(board, call, &words)?;
            return Ok(Some(v[me * k..me * k + k].to_vec()));
        }
        let mut part = None;
        let mut in_bulk = None;
        let mut in_peer = None;
        self.on_board_rows(board, call, &[], root..root + 1, |_, row| {
            // An empty row: the messages.
            let Some((&each, rest)) = row.split_first() else {
                return Ok(());
            };
            if each & IN_BULK != 0 && rest.is_empty() {
                in_bulk = Some(each & !IN_BULK);
                return Ok(());
            }
            if let (true, &[addr]) = (each & IN_PEER != 0, rest) {
                in_peer = Some((each & !IN_PEER, addr));
                return Ok(());
            }
            let each = usize::try_from(each).unwrap_or(usize::MAX);
            let words = p.checked_mul(each).map(|b| b.div_ceil(8));
            if each % size != 0 || words != Some(rest.len()) {
                return Err(format!(
                    "a row of {} words for {p} parts of {each} bytes of {}",
                    row.len(),
                    T::NAME
                ));
            }
            let bytes: &[u8] = bytemuck::cast_slice(rest);
            let mine = bytemuck::try_cast_slice::<u8, T>(&bytes[me * each..(me + 1) * each])
                .map_err(|e| format!("its part for pid {me}: {e}"))?;
            part = Some(mine.to_vec());
            Ok(())
        })?;
        if let Some((each, addr)) = in_peer {
            let each = usize::try_from(each).unwrap_or(usize::MAX);
            if each % size != 0 || each > isize::MAX as usize / p {
                return Err(self.payload_error(
                    call,
                    root,
                    format!("{p} parts of {each} bytes of {}", T::NAME),
                ));
            }
            // Room reserved fallibly and filled straight from the root's memory: a part size
            // the root does not have the memory for fails the read or the reservation.
            let mut mine: Vec<T> = Vec::new();
            let at = addr.wrapping_add((me * each) as u64);
            let b = board.next_op() - 1;
            self.pull_append(board, (root, b), at, each / size, &mut mine)?;
            self.confirm_reads(board, call, b, [root])?;
            part = Some(mine);
        }
        if let Some(each) = in_bulk {
            let each = usize::try_from(each).unwrap_or(usize::MAX);
            if each % size != 0 || (p - 1).saturating_mul(each) > board.bulk_capacity() {
                return Err(self.payload_error(
                    call,
                    root,
                    format!("a bulk of {p} parts of {each} bytes of {}", T::NAME),
                ));
            }
            let mut mine = vec![T::default(); each / size];
            let b = board.next_op() - 1;
            let dst = bytemuck::cast_slice_mut(&mut mine[..]);
            // The root's bulk holds every part but its own.
            let at = (me - usize::from(me > root)) * each;
            self.bulk_from(board, call, (root, b), at, dst)?;
            part = Some(mine);
        }
        Ok(part)
    }
}
