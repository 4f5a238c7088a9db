//! Reductions: all-reduce, reduce to a root, scans and reduce-scatter. Each combines values in
//! pid order, `combine(lower pids, higher pids)`, so that an associative operation need not be
//! commutative.
//!
//! - All-reduce (and the barrier of `sync`) uses recursive doubling: with P' = 2^floor(log2 P)
//!   and r = P - P', the first 2r processes pair up (2i, 2i+1) and the odd one of each pair
//!   combines both values; the resulting P' participants, each holding a contiguous block of
//!   pids, exchange values with partners at distance 1, 2, 4, ... and combine `lower block ⊕
//!   higher block`. Both partners compute the same expression, so every process ends with a
//!   bit-identical result; the odd processes then hand it back to their even partners. log2(P)
//!   rounds for a power of two, floor(log2 P) + 2 otherwise.
//! - Reduce to a root uses a binomial tree over pids 0..P: the process at pid q gathers the
//!   block q..q+2^k in round k, so blocks stay contiguous and in order; pid 0 ends with the
//!   result and passes it to the root when that is another process. ceil(log2 P) rounds, one
//!   more for a root other than 0.
//! - Scans use recursive doubling (as MPICH's): in round k a process exchanges the combination
//!   of its aligned block of 2^k pids with the process whose pid differs in bit k, and adds a
//!   lower block to its prefix. ceil(log2 P) rounds. A block goes down only to a process that
//!   passes it on again later, so pid 0 never waits for the others. Up to
//!   [`SMALL_GROUP`](super::tree::SMALL_GROUP) processes a chain (each passes its prefix to
//!   the next) is faster: P - 1 messages in all, where recursive doubling sends more (5
//!   against 3 at P = 4) for the same mean latency over the processes; measured at 8 bytes
//!   with 4 processes on 2 cores, 42 us against OpenMPI's 22 us with its own chain.
//! - Reduce-scatter uses recursive halving in pid order: in round k a process keeps the parts
//!   of the processes that agree with it in bit k (of the folded pids, as in all-reduce) and
//!   sends the rest to its partner, so the data halves every round: log2(P') rounds (+2 when
//!   P is not a power of two), and each process sends about n(P'-1)/P' values instead of
//!   n log2 P.

use super::{numbers_from, type_sig, Call};
use crate::error::Result;
use crate::net::Net;
use crate::number::{Number, Op};
use crate::op;
use crate::superstep::Bsp;
use serde::de::DeserializeOwned;
use serde::Serialize;
use smallvec::SmallVec;
use std::ops::Range;

type Res<T> = std::result::Result<T, String>;

/// Round number of the hand-over from pid 0 to the root of a reduce.
const TO_ROOT: u32 = 1 << 16;

/// The signature of a reduction of `n` numbers of `T` with `op`.
fn number_sig<T: Number>(op: &Op<T>, n: usize) -> u64 {
    u64::from(T::TAG) | u64::from(op.code()) << 8 | ((n as u64) & 0xffff_ffff_ffff) << 16
}

/// How the values of one reduction travel and combine.
pub(crate) trait Reduction {
    /// What each process contributes and ends with.
    type V;
    /// The bytes that carry `v`: its own memory where that is its encoding (numbers in this
    /// machine's byte order, sent from there without a copy), else its encoding written into
    /// `buf`.
    fn wire<'a>(&self, v: &'a Self::V, buf: &'a mut Vec<u8>) -> Res<&'a [u8]>;
    fn decode(&self, b: &[u8], swap: bool) -> Res<Self::V>;
    /// Combines a received value with `mine` in pid order: the received one first when it
    /// comes from lower pids.
    fn absorb(&self, mine: Self::V, b: &[u8], swap: bool, theirs_lower: bool) -> Res<Self::V>;
    /// Combines two values held here, `lower` first.
    fn combine(&self, lower: Self::V, higher: Self::V) -> Self::V;
}

/// Calls `f` with the numbers of a payload: straight from its memory when they are aligned
/// and in this machine's byte order, from a converted copy otherwise.
fn with_numbers<T: Number, R>(b: &[u8], swap: bool, n: usize, f: impl FnOnce(&[T]) -> R) -> Res<R> {
    if b.len() != n * std::mem::size_of::<T>() {
        return Err(format!("{} bytes for {n} {}", b.len(), T::NAME));
    }
    match bytemuck::try_cast_slice::<u8, T>(b) {
        Ok(theirs) if !swap => Ok(f(theirs)),
        _ => Ok(f(&numbers_from::<T>(b, swap, Some(n))?)),
    }
}

/// Combines `theirs` into `mine` element by element, in pid order: `theirs` first when it
/// comes from lower pids.
///
/// The operation is chosen once, not per element, so that the loops over the elements
/// vectorize: with the choice inside them, a sum of 8192 `f64` took several microseconds.
fn combine_into<T: Number>(mine: &mut [T], theirs: &[T], theirs_lower: bool, op: &Op<T>) {
    #[inline(always)]
    fn each<T: Copy>(mine: &mut [T], theirs: &[T], theirs_lower: bool, f: impl Fn(T, T) -> T) {
        if theirs_lower {
            for (x, &y) in mine.iter_mut().zip(theirs) {
                *x = f(y, *x);
            }
        } else {
            for (x, &y) in mine.iter_mut().zip(theirs) {
                *x = f(*x, y);
            }
        }
    }
    match op {
        Op::Sum => each(mine, theirs, theirs_lower, T::add),
        Op::Prod => each(mine, theirs, theirs_lower, T::mul),
        Op::Min => each(mine, theirs, theirs_lower, crate::number::min_of),
        Op::Max => each(mine, theirs, theirs_lower, crate::number::max_of),
        Op::Custom(f) => each(mine, theirs, theirs_lower, f),
    }
}

/// An element-wise reduction of `n` numbers with a built-in or user operator, in place.
pub(crate) struct Numbers<T> {
    pub op: Op<T>,
    pub n: usize,
}

impl<T: Number> Reduction for Numbers<T> {
    type V = Vec<T>;
    fn wire<'a>(&self, v: &'a Vec<T>, _buf: &'a mut Vec<u8>) -> Res<&'a [u8]> {
        Ok(bytemuck::cast_slice(v))
    }
    fn decode(&self, b: &[u8], swap: bool) -> Res<Vec<T>> {
        numbers_from(b, swap, Some(self.n))
    }
    fn absorb(&self, mut mine: Vec<T>, b: &[u8], swap: bool, lower: bool) -> Res<Vec<T>> {
        with_numbers(b, swap, self.n, |theirs| {
            combine_into(&mut mine, theirs, lower, &self.op)
        })?;
        Ok(mine)
    }
    fn combine(&self, mut lower: Vec<T>, higher: Vec<T>) -> Vec<T> {
        combine_into(&mut lower, &higher, false, &self.op);
        lower
    }
}

/// A reduction of one number.
struct One<T>(Op<T>);

impl<T: Number> Reduction for One<T> {
    type V = T;
    fn wire<'a>(&self, v: &'a T, _buf: &'a mut Vec<u8>) -> Res<&'a [u8]> {
        Ok(bytemuck::bytes_of(v))
    }
    fn decode(&self, b: &[u8], swap: bool) -> Res<T> {
        Ok(numbers_from::<T>(b, swap, Some(1))?[0])
    }
    fn absorb(&self, mine: T, b: &[u8], swap: bool, lower: bool) -> Res<T> {
        let theirs = self.decode(b, swap)?;
        Ok(if lower {
            self.0.apply(theirs, mine)
        } else {
            self.0.apply(mine, theirs)
        })
    }
    fn combine(&self, lower: T, higher: T) -> T {
        self.0.apply(lower, higher)
    }
}

/// A reduction of values of any serde type with an associative function.
struct With<T, F>(F, std::marker::PhantomData<fn(T, T) -> T>);

impl<T, F> With<T, F> {
    fn new(f: F) -> Self {
        With(f, std::marker::PhantomData)
    }
}

impl<T, F> Reduction for With<T, F>
where
    T: Serialize + DeserializeOwned,
    F: Fn(T, T) -> T,
{
    type V = T;
    fn wire<'a>(&self, v: &'a T, buf: &'a mut Vec<u8>) -> Res<&'a [u8]> {
        buf.clear();
        crate::codec::encode_into(v, buf).map_err(|e| e.0)?;
        Ok(buf)
    }
    fn decode(&self, b: &[u8], swap: bool) -> Res<T> {
        crate::codec::decode::<T>(b, swap).map_err(|e| e.0)
    }
    fn absorb(&self, mine: T, b: &[u8], swap: bool, lower: bool) -> Res<T> {
        let theirs = self.decode(b, swap)?;
        Ok(if lower {
            (self.0)(theirs, mine)
        } else {
            (self.0)(mine, theirs)
        })
    }
    fn combine(&self, lower: T, higher: T) -> T {
        (self.0)(lower, higher)
    }
}

/// How the elements of a reduce-scatter travel and combine.
trait Elements {
    type E: Clone;
    /// Writes the elements of `parts`, one part after another.
    fn encode(&self, parts: &[&[Self::E]], out: &mut Vec<u8>) -> Res<()>;
    /// The encoding of one part where it is its memory as it stands (numbers), so that it can
    /// be sent without a copy.
    fn as_encoded<'a>(&self, part: &'a [Self::E]) -> Option<&'a [u8]>;
    fn decode(&self, b: &[u8], swap: bool) -> Res<Vec<Self::E>>;
    /// Combines `other` into `into` element by element, `into` first when it comes from lower
    /// pids.
    fn combine_into(&self, into: &mut [Self::E], other: &[Self::E], into_lower: bool);
}

impl<T: Number> Elements for Op<T> {
    type E = T;
    fn encode(&self, parts: &[&[T]], out: &mut Vec<u8>) -> Res<()> {
        for p in parts {
            out.extend_from_slice(bytemuck::cast_slice(p));
        }
        Ok(())
    }
    fn as_encoded<'a>(&self, part: &'a [T]) -> Option<&'a [u8]> {
        Some(bytemuck::cast_slice(part))
    }
    fn decode(&self, b: &[u8], swap: bool) -> Res<Vec<T>> {
        numbers_from(b, swap, None)
    }
    fn combine_into(&self, into: &mut [T], other: &[T], into_lower: bool) {
        combine_into(into, other, !into_lower, self);
    }
}

impl<T, F> Elements for With<T, F>
where
    T: Serialize + DeserializeOwned + Clone,
    F: Fn(T, T) -> T,
{
    type E = T;
    fn encode(&self, parts: &[&[T]], out: &mut Vec<u8>) -> Res<()> {
        let items: Vec<&T> = parts.iter().flat_map(|p| p.iter()).collect();
        crate::codec::encode_into(&items, out).map_err(|e| e.0)
    }
    fn as_encoded<'a>(&self, _part: &'a [T]) -> Option<&'a [u8]> {
        None
    }
    fn decode(&self, b: &[u8], swap: bool) -> Res<Vec<T>> {
        crate::codec::decode::<Vec<T>>(b, swap).map_err(|e| e.0)
    }
    fn combine_into(&self, into: &mut [T], other: &[T], into_lower: bool) {
        for (x, y) in into.iter_mut().zip(other) {
            *x = if into_lower {
                (self.0)(x.clone(), y.clone())
            } else {
                (self.0)(y.clone(), x.clone())
            };
        }
    }
}

/// Ranges of elements, one per process or participant: inline up to 8 (no allocation for a
/// collective of a few processes).
type Ranges = SmallVec<[Range<usize>; 8]>;

/// What a reduce-scatter's signature says of its counts: a hash of the counts as 64-bit
/// numbers, the same whatever the host (processes of both byte orders agree on it). A word
/// at a time (FxHash's step) rather than a byte at a time: a signature is made at every call.
fn counts_hash(counts: &[usize]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    counts.iter().fold(super::FNV_START, |h, &c| {
        (h.rotate_left(5) ^ c as u64).wrapping_mul(K)
    })
}

/// Combines the `p` blocks of `n` numbers in `all` (pid order) into its first block along the
/// butterfly's tree: the folded pairs first, then neighbouring participants, lower first, level
/// by level. The same operations in the same order as [`Bsp::butterfly_slice`], so the same
/// bits.
fn board_tree<T: Number>(all: &mut [T], p: usize, n: usize, op: &Op<T>) {
    let f = Folded::new(p);
    // Participant `r` stands for one pid or for a folded pair: its block goes to place `r`.
    for r in 0..f.pof2 {
        let pids = f.pids(r);
        let (to, from) = (r * n, pids.start * n);
        if to != from {
            all.copy_within(from..from + n, to);
        }
        if pids.len() == 2 {
            let (lo, hi) = all.split_at_mut(pids.end * n - n);
            combine_into(&mut lo[to..to + n], &hi[..n], false, op);
        }
    }
    let mut len = f.pof2;
    while len > 1 {
        for i in 0..len / 2 {
            let (a, b) = (2 * i * n, (2 * i + 1) * n);
            if i != 0 {
                all.copy_within(a..a + n, i * n);
            }
            let (lo, hi) = all.split_at_mut(b);
            combine_into(&mut lo[i * n..i * n + n], &hi[..n], false, op);
        }
        len /= 2;
    }
}

/// Numbers of `T` a reduction on the host board's bulk combines at a time: each process's
/// piece of them, read as its writer announces it, fits the first-level cache with the
/// others'.
fn bulk_piece<T>() -> usize {
    (4 << 10) / std::mem::size_of::<T>().max(1)
}

/// The combination of the values of the pids below `r` (of `p`), from their blocks of `n`
/// numbers in `all` (pids `0..r` in order), into `below`, in the order of the messages: the
/// chain's when `chain`, the aligned blocks of recursive doubling otherwise, nearest first,
/// each taken in front of the rest (see [`Bsp::prefix`]). `r` is at least 1. Combines the
/// blocks in place: `all` holds partial combinations afterwards.
fn prefix_below<T: Number>(
    all: &mut [T],
    n: usize,
    (p, r): (usize, usize),
    chain: bool,
    op: &Op<T>,
    below: &mut [T],
) {
    if chain {
        below.copy_from_slice(&all[..n]);
        for j in 1..r {
            combine_into(below, &all[j * n..j * n + n], false, op);
        }
        return;
    }
    // The aligned blocks below `r` do not overlap: each is combined where it lies.
    let mut first = true;
    let mut k = 0;
    while 1usize << k < p {
        if r & 1 << k != 0 {
            let start = r >> (k + 1) << (k + 1);
            aligned_block(all, n, p, start, 1 << k, op);
            let block = &all[start * n..start * n + n];
            if first {
                below.copy_from_slice(block);
                first = false;
            } else {
                combine_into(below, block, true, op);
            }
        }
        k += 1;
    }
}

/// Ends a scan (`inclusive`) or exscan of `values` from the blocks of the pids below this one
/// (`r` of `p`, at least 1) in `all`, as many numbers each as `values` has: pid 0's block
/// itself where it is the only one, else their combination (see [`prefix_below`]) in
/// `scratch`, combined in front of `values` or put in their place.
fn end_prefix<T: Number>(
    all: &mut [T],
    (p, r): (usize, usize),
    (chain, inclusive): (bool, bool),
    op: &Op<T>,
    values: &mut [T],
    scratch: &mut SmallVec<[T; 64]>,
) {
    let n = values.len();
    let below: &[T] = if r == 1 {
        &all[..n]
    } else {
        scratch.clear();
        scratch.resize(n, T::default());
        prefix_below(all, n, (p, r), chain, op, scratch);
        scratch
    };
    if inclusive {
        combine_into(values, below, true, op);
    } else {
        values.copy_from_slice(below);
    }
}

/// Combines the blocks of `n` numbers of pids `start..start + size` (cut at `p`) in `all`
/// (blocks in pid order) into the first of them, in place: each half of a block (of 2, 4, ...
/// pids) combined with the other, the lower half first. The binomial tree of a reduce
/// ([`Bsp::tree_reduce`], for `start` 0 and `size` P rounded up to a power of two) and an
/// aligned block of a scan's recursive doubling ([`Bsp::prefix`]): the same operations in the
/// same order as those messages, so the same bits.
fn aligned_block<T: Number>(
    all: &mut [T],
    n: usize,
    p: usize,
    start: usize,
    size: usize,
    op: &Op<T>,
) {
    let end = (start + size).min(p);
    let mut half = 1;
    while half < size {
        let mut q = start;
        while q + half < end {
            let (lower, higher) = all.split_at_mut((q + half) * n);
            combine_into(&mut lower[q * n..q * n + n], &higher[..n], false, op);
            q += 2 * half;
        }
        half *= 2;
    }
}

/// The binomial tree of a reduce ([`aligned_block`] from pid 0 over every pid) over the
/// blocks of `n` numbers in `others` (every pid's but `own_pid`'s, in pid order) and `own`,
/// which is read where it lies and never written: where its block would take a combination,
/// the block it is combined with takes it instead. Returns which block of `others` holds the
/// result. The same operations in the same order as [`aligned_block`], so the same bits.
fn tree_beside<T: Number>(
    others: &mut [T],
    n: usize,
    own_pid: usize,
    own: &[T],
    op: &Op<T>,
) -> usize {
    let p = others.len() / n + 1;
    // Where each pid's partial combination lies: `None` for `own`, else a block of `others`.
    let mut at: SmallVec<[Option<usize>; 8]> = (0..p)
        .map(|j| match j.cmp(&own_pid) {
            std::cmp::Ordering::Less => Some(j),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(j - 1),
        })
        .collect();
    let block = |k: usize| k * n..k * n + n;
    let mut half = 1;
    while half < p {
        let mut q = 0;
        while q + half < p {
            match (at[q], at[q + half]) {
                (Some(lo), Some(hi)) => {
                    // The lower pids' combination first, into its block.
                    let (a, b) = (block(lo), block(hi));
                    let (first, second) = others.split_at_mut(a.end.max(b.end) - n);
                    if lo < hi {
                        combine_into(&mut first[a], &second[..n], false, op);
                    } else {
                        combine_into(&mut second[..n], &first[b], false, op);
                    }
                }
                (None, Some(hi)) => {
                    combine_into(&mut others[block(hi)], own, true, op);
                    at[q] = Some(hi);
                }
                (Some(lo), None) => combine_into(&mut others[block(lo)], own, false, op),
                (None, None) => unreachable!("one pid's block is its own"),
            }
            q += 2 * half;
        }
        half *= 2;
    }
    at[0].expect("two or more pids: the result lies in a block of the others'")
}

/// The processes of recursive doubling and halving when P is not a power of two: the first
/// 2 * `rem` pair up and the odd one of each pair takes part for both.
pub(crate) struct Folded {
    pub(crate) pof2: usize,
    pub(crate) rem: usize,
}

impl Folded {
    pub(crate) fn new(p: usize) -> Folded {
        let pof2 = 1usize << (usize::BITS - 1 - p.leading_zeros());
        Folded {
            pof2,
            rem: p - pof2,
        }
    }

    /// The participant number of `pid`, if it takes part.
    pub(crate) fn rank(&self, pid: usize) -> Option<usize> {
        if pid < 2 * self.rem {
            (pid % 2 == 1).then_some(pid / 2)
        } else {
            Some(pid - self.rem)
        }
    }

    /// The pid of participant `rank`.
    pub(crate) fn pid(&self, rank: usize) -> usize {
        if rank < self.rem {
            2 * rank + 1
        } else {
            rank + self.rem
        }
    }

    /// The pids participant `rank` stands for.
    fn pids(&self, rank: usize) -> Range<usize> {
        if rank < self.rem {
            2 * rank..2 * rank + 2
        } else {
            rank + self.rem..rank + self.rem + 1
        }
    }
}

/// Whether pid `r` of `p` passes its block on in a round after `round` of a scan: up, to a
/// partner whose prefix needs it, or down, to a partner that passes it on in turn. Only then
/// does it need its partner's block of `round`.
fn passes_on_later(r: usize, round: u32, p: usize) -> bool {
    (round as usize + 1..usize::BITS as usize)
        .map(|k| (k as u32, 1usize << k))
        .take_while(|&(_, bit)| bit < p)
        .any(|(k, bit)| {
            let peer = r ^ bit;
            peer < p && (peer > r || passes_on_later(peer, k, p))
        })
}

impl Bsp {
    /// Sends `v` as round `round` of `call` to `to`.
    fn send_reduced<R: Reduction>(
        &self,
        call: &Call,
        to: usize,
        round: u32,
        red: &R,
        v: &R::V,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let bytes = red
            .wire(v, buf)
            .map_err(|why| self.encode_error::<R::V>(why))?;
        self.send_bytes(call, to, round, bytes, crate::wire::native_flag())
    }

    /// Whether prefixes take the chain rather than recursive doubling: in small groups (see
    /// [`prefix`](Bsp::prefix)). The in-place forms on slices must choose as `prefix` does.
    fn prefix_chains(&self) -> bool {
        self.nprocs <= super::tree::SMALL_GROUP
    }

    /// Receives round `round` of `call` from `from` and combines it with `mine`.
    fn absorb<R: Reduction>(
        &self,
        call: &Call,
        from: usize,
        round: u32,
        red: &R,
        mine: R::V,
        theirs_lower: bool,
    ) -> Result<R::V> {
        let msg = self.recv_msg(call, from, round)?;
        red.absorb(mine, msg.payload(), msg.swapped(), theirs_lower)
            .map_err(|why| self.payload_error(call, from, why))
    }

    /// Receives round `round` of `call` from `from`.
    fn receive<R: Reduction>(&self, call: &Call, from: usize, round: u32, red: &R) -> Result<R::V> {
        let msg = self.recv_msg(call, from, round)?;
        red.decode(msg.payload(), msg.swapped())
            .map_err(|why| self.payload_error(call, from, why))
    }

    /// Rank-ordered all-reduce by recursive doubling (see the module documentation).
    pub(crate) fn butterfly<R: Reduction>(
        &mut self,
        call: &Call,
        mine: R::V,
        red: &R,
        sent_first: bool,
    ) -> Result<R::V> {
        let (p, r) = (self.nprocs, self.pid);
        if p == 1 {
            return Ok(mine);
        }
        debug_assert!(!sent_first || self.butterfly_first_send().is_some());
        let f = Folded::new(p);
        let rounds = f.pof2.trailing_zeros();
        let mut buf = Vec::new();
        let mut v = mine;
        if r < 2 * f.rem {
            if r % 2 == 0 {
                if !sent_first {
                    self.send_reduced(call, r + 1, 0, red, &v, &mut buf)?;
                }
            } else {
                v = self.absorb(call, r - 1, 0, red, v, true)?;
            }
        }
        if let Some(nr) = f.rank(r) {
            for k in 0..rounds {
                let pn = nr ^ (1 << k);
                let peer = f.pid(pn);
                // A participant's first round is its first step only if it has no partner
                // to hear from before.
                if !(sent_first && k == 0 && r >= 2 * f.rem) {
                    self.send_reduced(call, peer, k + 1, red, &v, &mut buf)?;
                }
                v = self.absorb(call, peer, k + 1, red, v, pn < nr)?;
            }
        }
        if r < 2 * f.rem {
            if r % 2 == 1 {
                self.send_reduced(call, r - 1, rounds + 1, red, &v, &mut buf)?;
            } else {
                v = self.receive(call, r + 1, rounds + 1, red)?;
            }
        }
        Ok(v)
    }

    /// Where this process's first message of [`butterfly`](Bsp::butterfly) goes, as (pid,
    /// round), when its first step sends its own value unchanged rather than receives.
    fn butterfly_first_send(&self) -> Option<(usize, u32)> {
        let (p, r) = (self.nprocs, self.pid);
        if p == 1 {
            return None;
        }
        let f = Folded::new(p);
        if r < 2 * f.rem {
            return (r % 2 == 0).then_some((r + 1, 0));
        }
        let nr = f.rank(r)?;
        Some((f.pid(nr ^ 1), 1))
    }

    /// Sends this process's first message of [`butterfly`](Bsp::butterfly) of `mine` on the
    /// connections `net` holds locked, when its first step sends rather than receives: for a
    /// caller that holds the lock anyway. Returns whether it did, which `butterfly` is then
    /// told (`sent_first`).
    pub(crate) fn butterfly_send_first<R: Reduction>(
        &self,
        net: &mut Net,
        call: &Call,
        mine: &R::V,
        red: &R,
    ) -> Result<bool> {
        let Some((to, round)) = self.butterfly_first_send() else {
            return Ok(false);
        };
        let mut buf = Vec::new();
        let bytes = red
            .wire(mine, &mut buf)
            .map_err(|why| self.encode_error::<R::V>(why))?;
        let hdr = Self::round_header(
            call.seq,
            call.op,
            call.sig,
            round,
            crate::wire::native_flag(),
        );
        self.send_round_on(net, to, hdr, bytes, &call.ctx)?;
        Ok(true)
    }

    /// Combines one number from every process with `op` and returns the result on every
    /// process: `let m: f64 = bsp.all_reduce(local_max, bsp::Op::Max)?;`.
    ///
    /// Values are combined in pid order along a fixed tree, so every process gets a
    /// bit-identical result. Every process must call it with the same `op`. Does not end the
    /// superstep.
    pub fn all_reduce<T: Number>(&mut self, value: T, op: Op<T>) -> Result<T> {
        let board = self.board_for::<T>(1)?;
        let call = self.begin(op::ALL_REDUCE, number_sig(&op, 1));
        if let Some(board) = board {
            let mut v = [value];
            return self
                .reduce_on_board(&board, &call, &mut v, &op)
                .map(|()| v[0]);
        }
        self.butterfly(&call, value, &One(op), false)
    }

    /// Element-wise [`all_reduce`](Bsp::all_reduce) of a slice, in place. Every process must
    /// give a slice of the same length.
    pub fn all_reduce_slice<T: Number>(&mut self, values: &mut [T], op: Op<T>) -> Result<()> {
        let n = values.len();
        let board = self.board_for::<T>(n)?;
        let call = self.begin(op::ALL_REDUCE, number_sig(&op, n));
        if let Some(board) = board {
            return self.reduce_on_board(&board, &call, values, &op);
        }
        self.butterfly_slice(&call, values, &op)
    }

    /// An all-reduce on the host board (see [`board`](crate::board)), of values that fit a
    /// slot: every process reads every row and combines them along the same tree as the
    /// messages' butterfly (and the reduce-scatter's halving), so all get the bits those give.
    fn reduce_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &mut [T],
        op: &Op<T>,
    ) -> Result<()> {
        let all = self.combined_on_board(board, call, values, op)?;
        values.copy_from_slice(&all);
        Ok(())
    }

    /// Every process's `values` from the host board, combined element by element along the
    /// butterfly's tree (see [`board_tree`]).
    fn combined_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &[T],
        op: &Op<T>,
    ) -> Result<SmallVec<[T; 64]>> {
        let mut all: SmallVec<[T; 64]> = SmallVec::new();
        self.gather_on_board(board, call, values, |v| all.extend_from_slice(v))?;
        board_tree(&mut all, self.nprocs, values.len(), op);
        all.truncate(values.len());
        Ok(all)
    }

    /// Operation `call` on the host board with `values` (which fit a slot, see
    /// [`board_for`](Bsp::board_for)) as this process's part: gives `each` every process's
    /// values in pid order, this process's own included. Every process must give as many.
    pub(crate) fn gather_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &[T],
        each: impl FnMut(&[T]),
    ) -> Result<()> {
        let p = self.nprocs;
        self.gather_on_board_rows(board, call, values, 0..p, each)
    }

    /// [`gather_on_board`](Bsp::gather_on_board) that reads only the rows of the pids in
    /// `rows`.
    fn gather_on_board_rows<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &[T],
        rows: Range<usize>,
        mut each: impl FnMut(&[T]),
    ) -> Result<()> {
        let (bytes, n) = (std::mem::size_of_val(values), values.len());
        let mut words = [0u64; crate::board::VALUE_WORDS];
        let nw = bytes.div_ceil(8);
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes]
            .copy_from_slice(bytemuck::cast_slice(values));
        self.on_board_rows(board, call, &words[..nw], rows, |_, row| {
            if row.len() != nw {
                return Err(format!("{} words for {n} {}", row.len(), T::NAME));
            }
            each(&bytemuck::cast_slice::<u64, T>(row)[..n]);
            Ok(())
        })
    }

    /// The host board for an all-reduce of `n` numbers of type `T`, if they fit its slots and
    /// the handle has one (set up now if this is the first use, see
    /// [`host_board`](Bsp::host_board)). The same answer on every process for the same call.
    pub(crate) fn board_for<T: Number>(
        &mut self,
        n: usize,
    ) -> Result<Option<std::sync::Arc<crate::board::Board>>> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        if n == 0 || bytes > crate::board::VALUE_WORDS * 8 {
            return Ok(None);
        }
        self.host_board()
    }

    /// The host board for `n` numbers of type `T` too many for a row but few enough for the
    /// bulk halves (see [`Board::fill`](crate::board::Board::fill)): up to 1 MiB per process
    /// up to 16 processes. The same answer on every process for the same call.
    pub(crate) fn bulk_for<T: Number>(
        &mut self,
        n: usize,
    ) -> Result<Option<std::sync::Arc<crate::board::Board>>> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        if bytes <= crate::board::VALUE_WORDS * 8 {
            return Ok(None);
        }
        let board = self.host_board()?;
        let single = self.single_copy();
        Ok(board.filter(|board| single || bytes <= board.bulk_capacity()))
    }

    /// Whether large operations on the host board read every process's data straight from
    /// its memory, in one copy (see [`Bsp::meet_peers`]), rather than through the bulk halves.
    pub(crate) fn single_copy(&self) -> bool {
        !self.board_peers.is_empty() && self.peers_everywhere
    }

    /// [`single_copy`](Bsp::single_copy) for an operation whose readers do not wait for one
    /// another (an all-to-all, a scatter): also where the processes crowd the host. There,
    /// at P = 4 on 2 processors, 64 KiB took 0.49x (all_to_all) and 0.63x (scatter) of their
    /// time through the bulk halves, where a scan took 1.77x and an exscan 1.95x.
    pub(crate) fn single_copy_fanning(&self) -> bool {
        !self.board_peers.is_empty()
    }

    /// Whether a large reduce, scan, exscan or scatter, whose writers put `bytes` each on the
    /// board, reads them straight from the writers' memory rather than through the bulk
    /// halves: from [`READ_PEERS_FROM`] bytes on, and beyond what a half holds, where the
    /// single copy is allowed at all. Below that, the read's fixed cost (a system call, and
    /// the writer waiting for its readers) outweighs a second copy.
    pub(crate) fn reads_peers(&self, board: &crate::board::Board, bytes: usize) -> bool {
        self.single_copy() && worth_reading_peers(board, bytes)
    }

    /// [`reads_peers`](Bsp::reads_peers) for a scatter, whose readers do not wait for one
    /// another (see [`single_copy_fanning`](Bsp::single_copy_fanning)).
    pub(crate) fn scatter_reads_peers(&self, board: &crate::board::Board, bytes: usize) -> bool {
        self.single_copy_fanning() && worth_reading_peers(board, bytes)
    }

    /// Writes this process's row of `call` with the length and address of `data`, which stays
    /// where it is for the processes that read it ([`Bsp::pull`]) until they have
    /// ([`Bsp::wait_acks`]), and reads the rows of `rows`, which must give the same length.
    /// Returns the operation's number on the board and the addresses the rows gave, in order.
    pub(crate) fn expose_on_board(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        data: &[u8],
        rows: Range<usize>,
    ) -> Result<(u64, SmallVec<[u64; 8]>)> {
        let len = data.len() as u64;
        let row = [len, data.as_ptr() as u64];
        // The number `on_board_rows` publishes under; the count of readers starts at none.
        let b = board.begin_acks();
        let mut addrs = SmallVec::new();
        self.on_board_rows(board, call, &row, rows, |_, r| match r {
            [l, a] if *l == len => {
                addrs.push(*a);
                Ok(())
            }
            _ => Err(format!(
                "a row of {r:?} where this process exposes {len} bytes"
            )),
        })?;
        Ok((b, addrs))
    }

    /// Writes `values` as this process's bulk of operation `call` on the host board, with
    /// their length in bytes in its row, and reads the rows of `rows`, which must say the
    /// same length. Returns the operation's number on the board, for
    /// [`bulk_from`](Bsp::bulk_from). Where no other process reads them (`read` false: a
    /// reduce's root, a scan's last pid) the values are not copied, only their length
    /// written.
    pub(crate) fn numbers_on_bulk<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        (values, read): (&[T], bool),
        rows: Range<usize>,
    ) -> Result<u64> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let len = bytes.len() as u64;
        let bulk: &[&[u8]] = if read { &[bytes] } else { &[] };
        self.on_board_bulk(board, call, &[len], bulk, rows, |_, row| {
            if row != [len] {
                return Err(format!("a row of {row:?} where this process has [{len}]"));
            }
            Ok(())
        })
    }

    /// Copies the numbers `at..at + out.len()` of the bulk of each pid in `rows` (of board
    /// operation `b`) into `out`, one block of `out.len() / rows.len()` numbers each, in pid
    /// order; this process's own from `mine`.
    #[allow(clippy::too_many_arguments)]
    fn bulk_pieces<T: Number>(
        &self,
        board: &crate::board::Board,
        call: &Call,
        b: u64,
        rows: Range<usize>,
        mine: &[T],
        at: usize,
        out: &mut [T],
    ) -> Result<()> {
        let m = out.len() / rows.len().max(1);
        let size = std::mem::size_of::<T>();
        for (k, j) in rows.enumerate() {
            let block = &mut out[k * m..k * m + m];
            if j == self.pid {
                block.copy_from_slice(&mine[at..at + m]);
            } else {
                self.bulk_from(
                    board,
                    call,
                    (j, b),
                    at * size,
                    bytemuck::cast_slice_mut(block),
                )?;
            }
        }
        Ok(())
    }

    /// [`butterfly`](Bsp::butterfly) on a slice of numbers, in place: the same messages and the
    /// same order of combination (so the same bits), without copying the slice in and out.
    /// Each round sends the slice from where it lies and combines the partner's numbers into
    /// it straight from the received payload.
    fn butterfly_slice<T: Number>(
        &mut self,
        call: &Call,
        values: &mut [T],
        op: &Op<T>,
    ) -> Result<()> {
        let (p, r, n) = (self.nprocs, self.pid, values.len());
        if p == 1 {
            return Ok(());
        }
        let f = Folded::new(p);
        let rounds = f.pof2.trailing_zeros();
        let absorb = |this: &Self, from: usize, round: u32, values: &mut [T], lower: bool| {
            let msg = this.recv_msg(call, from, round)?;
            with_numbers(msg.payload(), msg.swapped(), n, |theirs: &[T]| {
                combine_into(values, theirs, lower, op)
            })
            .map_err(|why| this.payload_error(call, from, why))
        };
        if r < 2 * f.rem {
            if r % 2 == 0 {
                self.send_numbers(call, r + 1, 0, values)?;
            } else {
                absorb(self, r - 1, 0, values, true)?;
            }
        }
        if let Some(nr) = f.rank(r) {
            for k in 0..rounds {
                let pn = nr ^ (1 << k);
                let peer = f.pid(pn);
                self.send_numbers(call, peer, k + 1, values)?;
                absorb(self, peer, k + 1, values, pn < nr)?;
            }
        }
        if r < 2 * f.rem {
            if r % 2 == 1 {
                self.send_numbers(call, r - 1, rounds + 1, values)?;
            } else {
                let msg = self.recv_msg(call, r + 1, rounds + 1)?;
                with_numbers(msg.payload(), msg.swapped(), n, |result: &[T]| {
                    values.copy_from_slice(result)
                })
                .map_err(|why| self.payload_error(call, r + 1, why))?;
            }
        }
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
        let call = self.begin(op::ALL_REDUCE_WITH, type_sig::<T>(0));
        self.butterfly(&call, value, &With::new(f), false)
    }

    /// Reduction to `root` along the binomial tree over pids (see the module documentation):
    /// the result at the root, `None` elsewhere.
    fn tree_reduce<R: Reduction>(
        &mut self,
        call: &Call,
        root: usize,
        mine: R::V,
        red: &R,
    ) -> Result<Option<R::V>> {
        let (p, r) = (self.nprocs, self.pid);
        let mut buf = Vec::new();
        let mut v = mine;
        let mut mask = 1;
        let mut round = 0;
        while mask < p {
            if r & mask != 0 {
                self.send_reduced(call, r - mask, round, red, &v, &mut buf)?;
                return Ok(None);
            }
            if r + mask < p {
                v = self.absorb(call, r + mask, round, red, v, false)?;
            }
            mask <<= 1;
            round += 1;
        }
        // Only pid 0 gets here, with the result.
        if root == 0 {
            return Ok(Some(v));
        }
        self.send_reduced(call, root, TO_ROOT, red, &v, &mut buf)?;
        Ok(None)
    }

    /// The root's side of [`tree_reduce`](Bsp::tree_reduce) when it is not pid 0.
    fn reduced_at<R: Reduction>(
        &mut self,
        call: &Call,
        root: usize,
        mine: R::V,
        red: &R,
    ) -> Result<Option<R::V>> {
        if root != 0 && self.pid == root {
            // The root takes part in the tree like every process, then gets the result.
            self.tree_reduce(call, root, mine, red)?;
            return Ok(Some(self.receive(call, 0, TO_ROOT, red)?));
        }
        self.tree_reduce(call, root, mine, red)
    }

    fn check_root(&self, what: &'static str, root: usize) -> Result<()> {
        if root >= self.nprocs {
            return Err(self.bad_pid(what, root));
        }
        Ok(())
    }

    /// Combines one number from every process with `op` at `root`: `Some(result)` there,
    /// `None` elsewhere. Values are combined in pid order (see [`Op`]).
    pub fn reduce<T: Number>(&mut self, root: usize, value: T, op: Op<T>) -> Result<Option<T>> {
        self.check_root("reduce root", root)?;
        let board = self.board_for::<T>(1)?;
        let sig = number_sig(&op, 1) | (root as u64) << 48;
        let call = self.begin(op::REDUCE, sig);
        if let Some(board) = board {
            let mut v = [value];
            let at_root = self.root_reduce_on_board(&board, &call, root, &mut v, &op)?;
            return Ok(at_root.then_some(v[0]));
        }
        self.reduced_at(&call, root, value, &One(op))
    }

    /// A reduce on the host board (see [`board`](crate::board)), of values that fit a slot:
    /// every process writes its row, the root reads them all and combines them along the
    /// binomial tree of the messages (see [`aligned_block`]), so it gets the bits those give;
    /// the others go on at once. Returns true at the root, whose `values` then hold the
    /// result.
    fn root_reduce_on_bulk<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        root: usize,
        values: &[T],
        op: &Op<T>,
    ) -> Result<Option<Vec<T>>> {
        let (p, n) = (self.nprocs, values.len());
        let rows = if self.pid == root { 0..p } else { 0..0 };
        if self.reads_peers(board, std::mem::size_of_val(values)) {
            // Every process's values read at the root, straight from where they lie.
            let data = bytemuck::cast_slice(values);
            let (b, addrs) = self.expose_on_board(board, call, data, rows)?;
            if self.pid != root {
                self.wait_acks(board, call, b, 1)?;
                return Ok(None);
            }
            // The others' values one after another, then the binomial tree over every
            // process's block, the root's read where it lies.
            let mut others: Vec<T> = Vec::with_capacity((p - 1) * n);
            for j in (0..p).filter(|&j| j != root) {
                self.pull_append(board, (j, b), addrs[j], n, &mut others)?;
            }
            self.confirm_reads(board, call, b, (0..p).filter(|&j| j != root))?;
            let at = tree_beside(&mut others, n, root, values, op);
            if at == 0 && others.len() == n {
                return Ok(Some(others));
            }
            return Ok(Some(others[at * n..at * n + n].to_vec()));
        }
        let b = self.numbers_on_bulk(board, call, (values, self.pid != root), rows)?;
        if self.pid != root {
            return Ok(None);
        }
        let mut out = vec![T::default(); n];
        let c = bulk_piece::<T>();
        let mut all = vec![T::default(); p * c.min(n)];
        for at in (0..n).step_by(c) {
            let m = c.min(n - at);
            self.bulk_pieces(board, call, b, 0..p, values, at, &mut all[..p * m])?;
            aligned_block(&mut all[..p * m], m, p, 0, p.next_power_of_two(), op);
            out[at..at + m].copy_from_slice(&all[..m]);
        }
        Ok(Some(out))
    }

    /// [`prefix_on_board`](Bsp::prefix_on_board) for values too many for a row: through the
    /// bulk halves, piece by piece as the pids below write them.
    fn prefix_on_bulk<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &mut [T],
        inclusive: bool,
        op: &Op<T>,
    ) -> Result<bool> {
        let (p, r, n) = (self.nprocs, self.pid, values.len());
        if self.reads_peers(board, std::mem::size_of_val(values)) {
            return self.prefix_on_peers(board, call, values, inclusive, op);
        }
        let b = self.numbers_on_bulk(board, call, (values, r + 1 < p), 0..r)?;
        if r == 0 {
            return Ok(inclusive);
        }
        if r == 1 && !inclusive {
            // Pid 0's values as they are: straight into place.
            self.bulk_from(board, call, (0, b), 0, bytemuck::cast_slice_mut(values))?;
            return Ok(true);
        }
        let c = bulk_piece::<T>();
        let mut all = vec![T::default(); r * c.min(n)];
        let mut scratch = SmallVec::new();
        let how = (self.prefix_chains(), inclusive);
        for at in (0..n).step_by(c) {
            let m = c.min(n - at);
            self.bulk_pieces(board, call, b, 0..r, values, at, &mut all[..r * m])?;
            let (all, mine) = (&mut all[..r * m], &mut values[at..at + m]);
            end_prefix(all, (p, r), how, op, mine, &mut scratch);
        }
        Ok(true)
    }

    /// [`prefix_on_bulk`](Bsp::prefix_on_bulk) reading the values of the pids below straight
    /// from their memory: each process exposes its values to the pids above it, and changes
    /// them only once those have read them.
    fn prefix_on_peers<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &mut [T],
        inclusive: bool,
        op: &Op<T>,
    ) -> Result<bool> {
        let (p, r, n) = (self.nprocs, self.pid, values.len());
        let data = bytemuck::cast_slice(values);
        let (b, addrs) = self.expose_on_board(board, call, data, 0..r)?;
        let readers = (p - 1 - r) as u64;
        if r == 0 {
            self.wait_acks(board, call, b, readers)?;
            return Ok(inclusive);
        }
        if r == 1 && !inclusive && readers == 0 {
            // Pid 0's values as they are, straight into place.
            self.pull(board, (0, b), addrs[0], bytemuck::cast_slice_mut(values))?;
            self.confirm_reads(board, call, b, [0])?;
            return Ok(true);
        }
        // All the room at once, as for `all_gather_slice`.
        let mut all: Vec<T> = Vec::with_capacity(addrs.len() * n);
        for (j, &addr) in addrs.iter().enumerate() {
            self.pull_append(board, (j, b), addr, n, &mut all)?;
        }
        // The pids above read this process's values as they were.
        self.wait_acks(board, call, b, readers)?;
        self.confirm_reads(board, call, b, 0..addrs.len())?;
        let how = (self.prefix_chains(), inclusive);
        end_prefix(&mut all, (p, r), how, op, values, &mut SmallVec::new());
        Ok(true)
    }

    fn root_reduce_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        root: usize,
        values: &mut [T],
        op: &Op<T>,
    ) -> Result<bool> {
        let (p, n) = (self.nprocs, values.len());
        let rows = if self.pid == root { 0..p } else { 0..0 };
        let mut all: SmallVec<[T; 64]> = SmallVec::new();
        self.gather_on_board_rows(board, call, values, rows, |v| all.extend_from_slice(v))?;
        if self.pid != root {
            return Ok(false);
        }
        aligned_block(&mut all, n, p, 0, p.next_power_of_two(), op);
        values.copy_from_slice(&all[..n]);
        Ok(true)
    }

    /// A scan (`inclusive`) or exscan on the host board, of values that fit a slot: every
    /// process writes its row and reads those of the pids below it, and combines them in the
    /// order of the messages: the chain's up to [`SMALL_GROUP`](super::tree::SMALL_GROUP)
    /// processes, the aligned blocks of recursive doubling beyond (see [`Bsp::prefix`]). So
    /// it gets the bits those give, and no process waits for a higher pid. Returns false on
    /// pid 0 of an exscan, whose values stay as they are.
    fn prefix_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        values: &mut [T],
        inclusive: bool,
        op: &Op<T>,
    ) -> Result<bool> {
        let (p, r) = (self.nprocs, self.pid);
        let mut all: SmallVec<[T; 64]> = SmallVec::new();
        self.gather_on_board_rows(board, call, values, 0..r, |v| all.extend_from_slice(v))?;
        if r == 0 {
            return Ok(inclusive);
        }
        let how = (self.prefix_chains(), inclusive);
        end_prefix(&mut all, (p, r), how, op, values, &mut SmallVec::new());
        Ok(true)
    }

    /// Element-wise [`reduce`](Bsp::reduce) of a slice: `Some(result)` at `root`. Every
    /// process must give a slice of the same length.
    pub fn reduce_slice<T: Number>(
        &mut self,
        root: usize,
        values: &[T],
        op: Op<T>,
    ) -> Result<Option<Vec<T>>> {
        self.check_root("reduce_slice root", root)?;
        let n = values.len();
        let board = self.board_for::<T>(n)?;
        let bulk = self.bulk_for::<T>(n)?;
        let sig = number_sig(&op, n & 0xffff_ffff) | (root as u64) << 48;
        let call = self.begin(op::REDUCE, sig);
        if let Some(board) = board {
            let mut v: SmallVec<[T; 64]> = SmallVec::from_slice(values);
            let at_root = self.root_reduce_on_board(&board, &call, root, &mut v, &op)?;
            return Ok(at_root.then(|| v.to_vec()));
        }
        if let Some(board) = bulk {
            return self.root_reduce_on_bulk(&board, &call, root, values, &op);
        }
        let r = self.pid;
        if r % 2 == 1 && r != root {
            // A leaf of the tree (see `tree_reduce`): its numbers go to the pid below as they
            // are, sent from where they lie.
            self.send_numbers(&call, r - 1, 0, values)?;
            return Ok(None);
        }
        self.reduced_at(&call, root, values.to_vec(), &Numbers { op, n })
    }

    /// Combines a value of any serde type from every process at `root` with `f(lower pids,
    /// higher pids)`, which must be associative: `Some(result)` there, `None` elsewhere.
    pub fn reduce_with<T, F>(&mut self, root: usize, value: T, f: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T,
    {
        self.check_root("reduce_with root", root)?;
        let call = self.begin(op::REDUCE_WITH, type_sig::<T>(root as u64));
        self.reduced_at(&call, root, value, &With::new(f))
    }

    /// Prefix combination by recursive doubling (see the module documentation): the
    /// combination of the values of pids 0..=pid (`inclusive`) or 0..pid (`None` on pid 0).
    fn prefix<R: Reduction>(
        &mut self,
        call: &Call,
        mine: R::V,
        inclusive: bool,
        red: &R,
    ) -> Result<Option<R::V>>
    where
        R::V: Clone,
    {
        let (p, r) = (self.nprocs, self.pid);
        let mut buf = Vec::new();
        if self.prefix_chains() {
            // A chain: each process gets the prefix of the pids below it from its
            // predecessor and passes its own on.
            let below = if r > 0 {
                Some(self.receive(call, r - 1, 0, red)?)
            } else {
                None
            };
            let last = r + 1 == p;
            if inclusive {
                let upto = match below {
                    Some(b) => red.combine(b, mine),
                    None => mine,
                };
                if !last {
                    self.send_reduced(call, r + 1, 0, red, &upto, &mut buf)?;
                }
                return Ok(Some(upto));
            }
            if !last {
                let upto = match &below {
                    Some(b) => red.combine(b.clone(), mine),
                    None => mine,
                };
                self.send_reduced(call, r + 1, 0, red, &upto, &mut buf)?;
            }
            return Ok(below);
        }
        // The combination of this process's aligned block so far (`None` while that is its
        // own value), and of the pids below it.
        let mut block: Option<R::V> = None;
        let mut below: Option<R::V> = None;
        let mut mask = 1;
        let mut round = 0;
        while mask < p {
            let peer = r ^ mask;
            if peer < p {
                // A process needs its partner's block only to pass it on in a later round;
                // otherwise the message is left out, so that, e.g., pid 0 never waits.
                if peer > r || passes_on_later(peer, round, p) {
                    let b = block.as_ref().unwrap_or(&mine);
                    self.send_reduced(call, peer, round, red, b, &mut buf)?;
                }
                let keep = passes_on_later(r, round, p);
                if peer < r || keep {
                    let msg = self.recv_msg(call, peer, round)?;
                    let bad = |why| self.payload_error(call, peer, why);
                    let (bytes, swap) = (msg.payload(), msg.swapped());
                    if peer < r {
                        below = Some(match below {
                            Some(b) => red.absorb(b, bytes, swap, true).map_err(bad)?,
                            None => red.decode(bytes, swap).map_err(bad)?,
                        });
                    }
                    if keep {
                        let b = block.take().unwrap_or_else(|| mine.clone());
                        block = Some(red.absorb(b, bytes, swap, peer < r).map_err(bad)?);
                    }
                }
            }
            mask <<= 1;
            round += 1;
        }
        Ok(match (inclusive, below) {
            (false, below) => below,
            (true, None) => Some(mine),
            (true, Some(b)) => Some(red.combine(b, mine)),
        })
    }

    /// [`prefix`](Bsp::prefix)'s chain on a slice of numbers, in place: the same messages,
    /// without the copies of the general form. The slice is sent from where it lies and the
    /// predecessor's numbers are combined into it straight from the received payload; an
    /// exclusive prefix sends the combination first and then takes the predecessor's numbers
    /// as its own. Returns false on pid 0 of an exclusive prefix, whose values stay as they
    /// are.
    fn chain_slice<T: Number>(
        &mut self,
        call: &Call,
        values: &mut [T],
        inclusive: bool,
        op: &Op<T>,
    ) -> Result<bool> {
        let (p, r, n) = (self.nprocs, self.pid, values.len());
        let last = r + 1 == p;
        if r == 0 {
            if !last {
                self.send_numbers(call, r + 1, 0, values)?;
            }
            return Ok(inclusive);
        }
        let msg = self.recv_msg(call, r - 1, 0)?;
        let bad = |why| self.payload_error(call, r - 1, why);
        let (bytes, swap) = (msg.payload(), msg.swapped());
        if inclusive || !last {
            // Everything below, then this process's own numbers.
            with_numbers(bytes, swap, n, |below: &[T]| {
                combine_into(values, below, true, op)
            })
            .map_err(bad)?;
            if !last {
                self.send_numbers(call, r + 1, 0, values)?;
            }
            if inclusive {
                return Ok(true);
            }
        }
        // An exclusive prefix ends with what came from below.
        with_numbers(bytes, swap, n, |below: &[T]| values.copy_from_slice(below)).map_err(bad)?;
        Ok(true)
    }

    /// The inclusive prefix of `op` over pids: the combination of the values of pids 0 to
    /// this one, in pid order. `scan(1, Op::Sum)` is `pid + 1`.
    pub fn scan<T: Number>(&mut self, value: T, op: Op<T>) -> Result<T> {
        let board = self.board_for::<T>(1)?;
        let call = self.begin(op::SCAN, number_sig(&op, 1));
        if let Some(board) = board {
            let mut v = [value];
            self.prefix_on_board(&board, &call, &mut v, true, &op)?;
            return Ok(v[0]);
        }
        let r = self.prefix(&call, value, true, &One(op))?;
        Ok(r.expect("an inclusive prefix is never empty"))
    }

    /// Element-wise [`scan`](Bsp::scan) of a slice, in place. Every process must give a slice
    /// of the same length.
    pub fn scan_slice<T: Number>(&mut self, values: &mut [T], op: Op<T>) -> Result<()> {
        let n = values.len();
        let board = self.board_for::<T>(n)?;
        let bulk = self.bulk_for::<T>(n)?;
        let call = self.begin(op::SCAN, number_sig(&op, n));
        if let Some(board) = board {
            return self
                .prefix_on_board(&board, &call, values, true, &op)
                .map(drop);
        }
        if let Some(board) = bulk {
            return self
                .prefix_on_bulk(&board, &call, values, true, &op)
                .map(drop);
        }
        if self.prefix_chains() {
            return self.chain_slice(&call, values, true, &op).map(drop);
        }
        let r = self.prefix(&call, values.to_vec(), true, &Numbers { op, n })?;
        values.copy_from_slice(&r.expect("an inclusive prefix is never empty"));
        Ok(())
    }

    /// The inclusive prefix of a value of any serde type with `f(lower pids, higher pids)`,
    /// which must be associative.
    pub fn scan_with<T, F>(&mut self, value: T, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned + Clone,
        F: Fn(T, T) -> T,
    {
        let call = self.begin(op::SCAN_WITH, type_sig::<T>(1));
        let r = self.prefix(&call, value, true, &With::new(f))?;
        Ok(r.expect("an inclusive prefix is never empty"))
    }

    /// The exclusive prefix of `op` over pids: the combination of the values of the pids
    /// below this one; `None` on pid 0. `exscan(1, Op::Sum)` is `pid` (and `None` on pid 0).
    pub fn exscan<T: Number>(&mut self, value: T, op: Op<T>) -> Result<Option<T>> {
        let board = self.board_for::<T>(1)?;
        let call = self.begin(op::EXSCAN, number_sig(&op, 1));
        if let Some(board) = board {
            let mut v = [value];
            let below = self.prefix_on_board(&board, &call, &mut v, false, &op)?;
            return Ok(below.then_some(v[0]));
        }
        self.prefix(&call, value, false, &One(op))
    }

    /// Element-wise [`exscan`](Bsp::exscan) of a slice, in place. Returns false on pid 0,
    /// whose values stay as they are (no pid lies below it).
    pub fn exscan_slice<T: Number>(&mut self, values: &mut [T], op: Op<T>) -> Result<bool> {
        let n = values.len();
        let board = self.board_for::<T>(n)?;
        let bulk = self.bulk_for::<T>(n)?;
        let call = self.begin(op::EXSCAN, number_sig(&op, n));
        if let Some(board) = board {
            return self.prefix_on_board(&board, &call, values, false, &op);
        }
        if let Some(board) = bulk {
            return self.prefix_on_bulk(&board, &call, values, false, &op);
        }
        if self.prefix_chains() {
            return self.chain_slice(&call, values, false, &op);
        }
        let r = self.prefix(&call, values.to_vec(), false, &Numbers { op, n })?;
        Ok(match r {
            Some(r) => {
                values.copy_from_slice(&r);
                true
            }
            None => false,
        })
    }

    /// The exclusive prefix of a value of any serde type with `f(lower pids, higher pids)`;
    /// `None` on pid 0.
    pub fn exscan_with<T, F>(&mut self, value: T, f: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned + Clone,
        F: Fn(T, T) -> T,
    {
        let call = self.begin(op::EXSCAN_WITH, type_sig::<T>(2));
        self.prefix(&call, value, false, &With::new(f))
    }

    /// Reduce-scatter by recursive halving (see the module documentation): `values` holds one
    /// part per process, part `d` at `parts[d]`; returns the combination over all processes of
    /// this process's part.
    ///
    /// What a process holds shrinks every round; it is kept compact, the ranges of the
    /// participants it holds one after another, and the combination of a round is written
    /// into the buffer just received, so the input is read but never copied whole.
    fn halving<L: Elements>(
        &mut self,
        call: &Call,
        values: &[L::E],
        parts: &[Range<usize>],
        how: &L,
    ) -> Result<Vec<L::E>> {
        let (p, r) = (self.nprocs, self.pid);
        if p == 1 {
            return Ok(values[parts[r].clone()].to_vec());
        }
        let f = Folded::new(p);
        let rounds = f.pof2.trailing_zeros();
        let last = rounds + 1;
        let mut buf = Vec::new();
        let mut send = |this: &Self, to: usize, round: u32, parts: &[&[L::E]]| {
            if let [part] = parts {
                if let Some(bytes) = how.as_encoded(part) {
                    return this.send_bytes(call, to, round, bytes, crate::wire::native_flag());
                }
            }
            buf.clear();
            how.encode(parts, &mut buf)
                .map_err(|why| this.encode_error::<L::E>(why))?;
            this.send_bytes(call, to, round, &buf, crate::wire::native_flag())
        };
        let receive = |this: &Self, from: usize, round: u32, want: usize| -> Result<Vec<L::E>> {
            let msg = this.recv_msg(call, from, round)?;
            let got = how
                .decode(msg.payload(), msg.swapped())
                .map_err(|why| this.payload_error(call, from, why))?;
            if got.len() != want {
                return Err(this.payload_error(
                    call,
                    from,
                    format!("{} values where {want} were expected", got.len()),
                ));
            }
            Ok(got)
        };
        if r < 2 * f.rem && r % 2 == 0 {
            send(self, r + 1, 0, &[values])?;
            return receive(self, r + 1, last, parts[r].len());
        }
        // The elements participant `g` ends with: the parts of the pids it stands for.
        let span = |g: usize| {
            let pids = f.pids(g);
            parts[pids.start].start..parts[pids.end - 1].end
        };
        let nr = f.rank(r).expect("an even pid of a pair has returned");
        // This process holds the elements of the participants that agree with it in the bits
        // below the round's (all of them at first), in participant order.
        let mut data: std::borrow::Cow<'_, [L::E]> = if r < 2 * f.rem {
            let mut lower = receive(self, r - 1, 0, values.len())?;
            how.combine_into(&mut lower, values, true);
            lower.into()
        } else {
            values.into()
        };
        for k in 0..rounds {
            let bit = 1usize << k;
            let pn = nr ^ bit;
            let peer = f.pid(pn);
            // The participants this process holds the elements of, in order, each with where
            // its elements lie in `data` and whether this process keeps them: those that
            // agree with it in the bits below the round's are held, and of those, the ones
            // that agree in the round's bit too are kept.
            let held = || {
                let mut at = 0;
                (nr & (bit - 1)..f.pof2).step_by(bit).map(move |g| {
                    let n = span(g).len();
                    at += n;
                    (at - n..at, g & bit == nr & bit)
                })
            };
            {
                let give: SmallVec<[&[L::E]; 8]> =
                    super::small_vec(held().filter(|(_, keep)| !keep).map(|(g, _)| &data[g]));
                send(self, peer, k + 1, &give)?;
            }
            let want: usize = held().filter(|(_, keep)| *keep).map(|(g, _)| g.len()).sum();
            let mut theirs = receive(self, peer, k + 1, want)?;
            let mut at = 0;
            for (g, _) in held().filter(|(_, keep)| *keep) {
                let n = g.len();
                how.combine_into(&mut theirs[at..at + n], &data[g], pn < nr);
                at += n;
            }
            data = theirs.into();
        }
        let mut data = data.into_owned();
        if r < 2 * f.rem {
            // This process holds its even partner's part and its own: hand the partner its.
            let theirs = parts[r - 1].len();
            send(self, r - 1, last, &[&data[..theirs]])?;
            data.drain(..theirs);
        }
        Ok(data)
    }

    fn parts(&self, what: &str, len: usize, counts: &[usize]) -> Result<Ranges> {
        if counts.len() != self.nprocs {
            return Err(self.usage(format!(
                "{what} needs a count per process ({}), got {}",
                self.nprocs,
                counts.len()
            )));
        }
        let total = counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c))
            .filter(|&t| t == len);
        if total.is_none() {
            return Err(self.usage(format!(
                "{what}: the counts add up to {}, but {len} values were given",
                counts.iter().fold(0u128, |a, &c| a + c as u128)
            )));
        }
        let mut at = 0;
        Ok(super::small_vec(counts.iter().map(|&c| {
            at += c;
            at - c..at
        })))
    }

    /// Element-wise reduction with `op` of every process's `values`, scattered: process `d`
    /// gets the `counts[d]` values of its part (parts follow each other in pid order). Every
    /// process gives the same `counts`, and `values` of their sum. Values are combined in pid
    /// order (see [`Op`]).
    pub fn reduce_scatter<T: Number>(
        &mut self,
        values: &[T],
        counts: &[usize],
        op: Op<T>,
    ) -> Result<Vec<T>> {
        let parts = self.parts("reduce_scatter", values.len(), counts)?;
        let board = self.board_for::<T>(values.len())?;
        let counts_hash = counts_hash(counts);
        let sig = u64::from(T::TAG) | u64::from(op.code()) << 8 | counts_hash << 16;
        let call = self.begin(op::REDUCE_SCATTER, sig);
        if let Some(board) = board {
            // Up to 64 bytes in all, every process on this host: the halving below combines
            // along the same tree (neighbouring participants first, lower first), so the
            // board's combination of everything gives the same bits.
            let all = self.combined_on_board(&board, &call, values, &op)?;
            return Ok(all[parts[self.pid].clone()].to_vec());
        }
        self.halving(&call, values, &parts, &op)
    }

    /// [`reduce_scatter`](Bsp::reduce_scatter) of values of any serde type with `f(lower pids,
    /// higher pids)`, element by element; `f` must be associative.
    pub fn reduce_scatter_with<T, F>(
        &mut self,
        values: Vec<T>,
        counts: &[usize],
        f: F,
    ) -> Result<Vec<T>>
    where
        T: Serialize + DeserializeOwned + Clone,
        F: Fn(T, T) -> T,
    {
        let parts = self.parts("reduce_scatter_with", values.len(), counts)?;
        let counts_hash = counts_hash(counts);
        let call = self.begin(op::REDUCE_SCATTER, type_sig::<T>(counts_hash));
        self.halving(&call, &values, &parts, &With::new(f))
    }
}

/// Whether a writer's `bytes` on `board` are read from its memory where that is allowed: from
/// [`READ_PEERS_FROM`] on, and whatever does not fit a bulk half.
fn worth_reading_peers(board: &crate::board::Board, bytes: usize) -> bool {
    bytes >= READ_PEERS_FROM || bytes > board.bulk_capacity()
}

/// Bytes from which a reduce, scan, exscan or scatter on the host board reads its writers'
/// data from their memory, one copy, where the single copy is allowed (see
/// [`Bsp::reads_peers`]); MPI's shared-memory transport changes to its single copy at 4 KiB.
/// Through the bulk halves, the writer's copy and its readers' copies overlap piece by
/// piece and no writer waits; how that compares with one read from memory depends on the
/// machine. `bsp-bench` at P = 2, back-to-back operations, each way measured alternately:
/// - on an AMD EPYC virtual machine, an exscan of 64 KiB took 5.7 to 6.1 us through the
///   halves and 7.0 to 8.7 us from memory;
/// - on an Intel Xeon virtual machine (4 MiB L2 per core, a 260 MiB L3), from memory against
///   through the halves: 1 KiB 1.7 against 0.6 us, 4 KiB 1.8 against 1.3 us, 16 KiB 2.5
///   against 4.1 us, 64 KiB 5.4 against 11.3 us, 256 KiB 15 against 34 us (exscan; reduce,
///   scan and scatter alike).
///
/// The one copy loses a fifth where it loses and wins twofold where it wins, so it is taken
/// from 16 KiB, where it won on the second machine.
pub(crate) const READ_PEERS_FROM: usize = 16 << 10;
