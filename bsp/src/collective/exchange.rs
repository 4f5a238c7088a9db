//! Collectives in which every process has something for every other: total exchange,
//! all-to-all and all-gather.
//!
//! - Total exchange of one number per destination uses Bruck's algorithm: in round k every
//!   process sends the items whose destination distance has bit k set to the process 2^k
//!   ahead: ceil(log2 P) rounds.
//! - All-to-all with a vector per destination sends each vector straight to its destination
//!   (one round of P - 1 messages per process, as MPI's `Alltoallv` does): the vectors differ
//!   in size, so forwarding them through other processes, as Bruck's algorithm does, would
//!   move the large ones several times, and a log P algorithm would need every process to
//!   know every size first. Small vectors travel on the control connection and large ones on
//!   the data connection, so the messages of all processes never block each other.
//! - All-gather uses Bruck's concatenation: in round k every process sends the first
//!   min(2^k, P - 2^k) values it holds to the process 2^k behind it and appends what the
//!   process 2^k ahead sends. ceil(log2 P) rounds for any P, and every process sends each
//!   value once (P - 1 values in all), as a ring does, but with log P latencies instead of P.

use super::{extend_numbers, next_item, number_bytes, numbers_from, put_item, type_sig, Call};
use crate::error::Result;
use crate::net::Msg;
use crate::number::Number;
use crate::op;
use crate::superstep::Bsp;
use crate::wire::{self, Cursor};
use serde::de::DeserializeOwned;
use serde::Serialize;
use smallvec::SmallVec;

/// The first word of an all-to-all's row on the host board whose vectors are to be read from
/// the process's memory: the lengths and the addresses follow (no row of lengths starts with
/// it, which would be a vector of 2^64 - 1 numbers).
const IN_MEMORY: u64 = u64::MAX;
/// The first word of an all-to-all's row whose vectors are in the process's bulk area, one
/// after another in the order of their destinations, its own left out: the lengths follow.
const IN_BULK: u64 = u64::MAX - 1;

/// What another process's row of an all-to-all on the host board holds for this one (see
/// `Bsp::all_to_all_on_board`), its empty row (the messages) aside.
enum AllToAllRow<'r, T> {
    /// The vector itself, in the row.
    Inline(&'r [T]),
    /// The vector's length, and where it starts in the writer's bulk area, in bytes.
    Bulk { n: usize, at: usize },
    /// The vector's length and its address in the writer's memory.
    Memory { n: usize, addr: u64 },
}

impl<'r, T: Number> AllToAllRow<'r, T> {
    /// Process `j`'s non-empty `row`, for process `me` of `p`; the error says what is wrong
    /// with it.
    fn parse(
        row: &'r [u64],
        (j, me, p): (usize, usize, usize),
        bulk_capacity: usize,
    ) -> std::result::Result<Self, String> {
        let size = std::mem::size_of::<T>();
        if row.first() == Some(&IN_BULK) {
            let lens = row
                .get(1..)
                .filter(|l| l.len() == p)
                .ok_or_else(|| format!("a row of {} words for {p} vectors", row.len()))?;
            // The vectors for the pids below this one come first, the writer's own left out.
            let mut at = 0usize;
            for (d, &n) in lens[..me].iter().enumerate() {
                if d != j {
                    at = at.saturating_add((n as usize).saturating_mul(size));
                }
            }
            let n = usize::try_from(lens[me]).unwrap_or(usize::MAX);
            let end = n.saturating_mul(size).saturating_add(at);
            if end > bulk_capacity {
                return Err(format!("{n} {} at byte {at} of its bulk area", T::NAME));
            }
            return Ok(AllToAllRow::Bulk { n, at });
        }
        if row.first() == Some(&IN_MEMORY) {
            if row.len() != 1 + 2 * p {
                return Err(format!("a row of {} words for {p} vectors", row.len()));
            }
            let n = usize::try_from(row[1 + me]).unwrap_or(usize::MAX);
            return Ok(AllToAllRow::Memory {
                n,
                addr: row[1 + p + me],
            });
        }
        let (lens, rest) = row
            .split_at_checked(p)
            .ok_or_else(|| format!("a row of {} words for {p} processes", row.len()))?;
        let bytes: &[u8] = bytemuck::cast_slice(rest);
        let mut from = 0usize;
        for &n in &lens[..me] {
            from = from.saturating_add((n as usize).saturating_mul(size));
        }
        let n = lens[me] as usize;
        let end = from.saturating_add(n.saturating_mul(size));
        let mine = bytes
            .get(from..end)
            .ok_or_else(|| format!("{n} {} past the end of its row", T::NAME))?;
        let mine: &[T] = bytemuck::try_cast_slice(mine)
            .map_err(|e| format!("{n} {} in its row: {e}", T::NAME))?;
        Ok(AllToAllRow::Inline(mine))
    }
}

impl Bsp {
    /// Every process sends `send[d]` to process `d` and gets back, at index `s`, what process
    /// `s` sent it (the seed's TotalExchangeInt, for any number type), with Bruck's algorithm.
    pub fn total_exchange<T: Number>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let p = self.nprocs;
        if send.len() != p {
            return Err(self.usage(format!(
                "total_exchange needs one value per process ({p}), got {}",
                send.len()
            )));
        }
        let call = self.begin(op::TOTAL_EXCHANGE, u64::from(T::TAG) | (p as u64) << 8);
        let me = self.pid;
        // tmp[i]: the item that travels distance i (from me to me + i at first).
        let mut tmp: Vec<T> = (0..p).map(|i| send[(me + i) % p]).collect();
        let mut buf = Vec::new();
        let mut dist = 1;
        let mut round = 0;
        while dist < p {
            let idx: Vec<usize> = (1..p).filter(|i| i & dist != 0).collect();
            let items: Vec<T> = idx.iter().map(|&i| tmp[i]).collect();
            let n = idx.len();
            let enc = |v: &Vec<T>, out: &mut Vec<u8>| number_bytes(v, out);
            self.send_value(&call, (me + dist) % p, round, &items, &enc, &mut buf)?;
            let dec = |b: &[u8], swap: bool| numbers_from::<T>(b, swap, Some(n));
            let got = self.recv_value(&call, (me + p - dist) % p, round, &dec)?;
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

    /// Sends `send[d]` straight to every other process `d`, then hands each message that
    /// comes back to `got`, with its sender (see the module documentation).
    fn direct_exchange(
        &mut self,
        call: &Call,
        send: &[&[u8]],
        mut got: impl FnMut(&Self, usize, Msg) -> Result<()>,
    ) -> Result<()> {
        let (p, me) = (self.nprocs, self.pid);
        // Start with the next process up, so that the processes do not all send to the
        // same one first.
        for i in 1..p {
            let d = (me + i) % p;
            self.send_bytes(call, d, 0, send[d], wire::native_flag())?;
        }
        for i in 1..p {
            let s = (me + p - i) % p;
            let msg = self.recv_msg(call, s, 0)?;
            got(self, s, msg)?;
        }
        Ok(())
    }

    /// All-to-all with a vector per destination (MPI's `Alltoallv`): `send[d]` goes to process
    /// `d`, of any length; returns, at index `s`, the vector process `s` sent here.
    pub fn all_to_all<T: Number>(&mut self, send: &[Vec<T>]) -> Result<Vec<Vec<T>>> {
        let mut out = Vec::new();
        self.all_to_all_into(send, &mut out)?;
        Ok(out)
    }

    /// [`all_to_all`](Bsp::all_to_all) into vectors the caller keeps: afterwards `recv` has
    /// one vector per process, `recv[s]` what process `s` sent here. The vectors already in
    /// `recv` are cleared and refilled, so a loop that exchanges every iteration allocates
    /// only while its vectors grow, as MPI's `Alltoallv` into the caller's buffer does. On an
    /// error, `recv` holds what had arrived.
    pub fn all_to_all_into<T: Number>(
        &mut self,
        send: &[Vec<T>],
        recv: &mut Vec<Vec<T>>,
    ) -> Result<()> {
        let p = self.nprocs;
        if send.len() != p {
            return Err(self.usage(format!(
                "all_to_all needs one vector per process ({p}), got {}",
                send.len()
            )));
        }
        let board = self.host_board()?;
        let call = self.begin(op::ALL_TO_ALL, u64::from(T::TAG));
        recv.resize_with(p, Vec::new);
        if let Some(board) = board {
            if self.all_to_all_on_board(&board, &call, send, recv)? {
                return Ok(());
            }
        }
        let me = self.pid;
        recv[me].clear();
        recv[me].extend_from_slice(&send[me]);
        let bytes: SmallVec<[&[u8]; 8]> =
            super::small_vec(send.iter().map(|v| bytemuck::cast_slice(&v[..])));
        self.direct_exchange(&call, &bytes, |this, s, m| {
            let payload = m.payload();
            let n = payload.len() / std::mem::size_of::<T>();
            recv[s].clear();
            extend_numbers(&mut recv[s], payload, m.swapped(), n)
                .map_err(|why| this.payload_error(&call, s, why))
        })
    }

    /// [`all_to_all_into`](Bsp::all_to_all_into) on the host board. Each process writes to
    /// its row, by size:
    /// - the lengths, then the numbers of every destination one after another, when they fit
    ///   the row;
    /// - otherwise, where every process can read every other's memory, where its vectors lie,
    ///   for the others to read them from there ([`IN_MEMORY`]);
    /// - otherwise the lengths, with the vectors for the others in its bulk area when they fit
    ///   it ([`IN_BULK`]).
    ///
    /// No process knows the others' sizes, so a process whose vectors fit none of these
    /// writes an empty row, which tells every process to take the messages instead; a
    /// process that wrote an empty row goes to the messages at once, whose exchange waits for
    /// every process anyway (so that every row has been read before it is written again).
    /// The others take the rows in the order they come ([`Bsp::read_rows_as_they_come`]),
    /// each writer's vector at once. Returns whether the board carried it.
    fn all_to_all_on_board<T: Number>(
        &mut self,
        board: &crate::board::Board,
        call: &Call,
        send: &[Vec<T>],
        recv: &mut [Vec<T>],
    ) -> Result<bool> {
        let (p, me, size) = (self.nprocs, self.pid, std::mem::size_of::<T>());
        let data: usize = send.iter().map(|v| v.len() * size).sum();
        let in_row = p + data.div_ceil(8) <= board.capacity();
        let in_memory = !in_row && self.single_copy_fanning() && 2 * p < board.capacity();
        let for_others = data - send[me].len() * size;
        let in_bulk =
            !in_row && !in_memory && p < board.capacity() && for_others <= board.bulk_capacity();
        if !in_row && !in_memory && !in_bulk {
            self.post_on_board(board, call, &[])?;
            return Ok(false);
        }
        let mut words: SmallVec<[u64; 16]>;
        if in_bulk {
            words = SmallVec::from_elem(IN_BULK, 1 + p);
            for (w, v) in words[1..].iter_mut().zip(send) {
                *w = v.len() as u64;
            }
        } else if in_memory {
            // Where each vector lies, for the others to read (see `Bsp::pull_append`).
            words = SmallVec::from_elem(IN_MEMORY, 1 + 2 * p);
            for (d, v) in send.iter().enumerate() {
                words[1 + d] = v.len() as u64;
                words[1 + p + d] = v.as_ptr() as u64;
            }
            board.begin_acks();
        } else {
            words = SmallVec::from_elem(0, p + data.div_ceil(8));
            for (w, v) in words.iter_mut().zip(send) {
                *w = v.len() as u64;
            }
            let mut at = 0;
            for v in send {
                let b: &[u8] = bytemuck::cast_slice(&v[..]);
                bytemuck::cast_slice_mut::<u64, u8>(&mut words[p..])[at..at + b.len()]
                    .copy_from_slice(b);
                at += b.len();
            }
        }
        let b = if in_bulk {
            let parts: SmallVec<[&[u8]; 8]> = super::small_vec(
                send.iter()
                    .enumerate()
                    .filter(|&(d, _)| d != me)
                    .map(|(_, v)| bytemuck::cast_slice(&v[..])),
            );
            self.publish_bulk(board, call, &words, &parts)?
        } else {
            self.post_on_board(board, call, &words)?
        };
        // This process's own vector, copied once its row is out: the others read the row (and
        // from its bulk or memory) meanwhile.
        recv[me].clear();
        recv[me].extend_from_slice(&send[me]);
        let mut everyone = true;
        // The processes whose memory this process read.
        let mut read: SmallVec<[usize; 8]> = SmallVec::new();
        // Each writer's vector for this process is taken as its row comes, whatever the
        // order: where the processes crowd the host, the writers that run early are served
        // (and acknowledged) early, rather than after every pid before theirs.
        self.read_rows_as_they_come(board, call, b, |this, j, row| {
            if row.is_empty() {
                // Process j's vectors did not fit: messages for everyone. What was taken
                // already is taken again from them (see `all_to_all_into`).
                everyone = false;
            }
            if !everyone {
                return Ok(());
            }
            let parsed = AllToAllRow::<T>::parse(row, (j, me, p), board.bulk_capacity())
                .map_err(|why| this.board_error(j, why))?;
            recv[j].clear();
            match parsed {
                AllToAllRow::Inline(mine) => recv[j].extend_from_slice(mine),
                AllToAllRow::Bulk { n, at } => {
                    recv[j].resize(n, T::default());
                    let dst = bytemuck::cast_slice_mut(&mut recv[j][..]);
                    this.bulk_from(board, call, (j, b), at, dst)?;
                }
                AllToAllRow::Memory { n, addr } => {
                    this.pull_append(board, (j, b), addr, n, &mut recv[j])?;
                    read.push(j);
                }
            }
            Ok(())
        })?;
        if !everyone {
            return Ok(false);
        }
        if in_memory {
            // Every other process reads its vector from this one's memory.
            self.wait_acks(board, call, b, p as u64 - 1)?;
        }
        self.confirm_reads(board, call, b, read)?;
        Ok(true)
    }

    /// All-to-all of values of any serde type: `send[d]` goes to process `d`; returns, at
    /// index `s`, the value process `s` sent here.
    pub fn all_to_all_with<T>(&mut self, send: Vec<T>) -> Result<Vec<T>>
    where
        T: Serialize + DeserializeOwned,
    {
        let p = self.nprocs;
        if send.len() != p {
            return Err(self.usage(format!(
                "all_to_all_with needs one value per process ({p}), got {}",
                send.len()
            )));
        }
        let me = self.pid;
        let mut bytes = Vec::with_capacity(p);
        for (d, v) in send.iter().enumerate() {
            bytes.push(if d == me {
                Vec::new()
            } else {
                crate::codec::to_vec(v).map_err(|e| self.encode_error::<T>(e.0))?
            });
        }
        let call = self.begin(op::ALL_TO_ALL_WITH, type_sig::<T>(0));
        let refs: SmallVec<[&[u8]; 8]> = super::small_vec(bytes.iter().map(Vec::as_slice));
        let mut out: Vec<Option<T>> = (0..p).map(|_| None).collect();
        self.direct_exchange(&call, &refs, |this, s, m| {
            let v = crate::codec::decode::<T>(m.payload(), m.swapped())
                .map_err(|e| this.payload_error(&call, s, e.0))?;
            out[s] = Some(v);
            Ok(())
        })?;
        out[me] = send.into_iter().nth(me);
        Ok(out
            .into_iter()
            .map(|v| v.expect("a value from every process"))
            .collect())
    }

    /// Bruck's all-gather of one framed item per process (see the module documentation).
    /// Returns every process's item, by pid, as (order flags, bytes).
    pub(crate) fn bruck_gather(
        &mut self,
        call: &Call,
        mine: Vec<u8>,
    ) -> Result<Vec<(u8, Vec<u8>)>> {
        let (p, me) = (self.nprocs, self.pid);
        // held: the items of pids me, me + 1, ... (mod p), framed, one after another; ends[i]
        // is where item i ends.
        let mut held = mine;
        let mut ends = vec![held.len()];
        let mut dist = 1;
        let mut round = 0;
        while dist < p {
            let n = dist.min(p - dist);
            let to = (me + p - dist) % p;
            let from = (me + dist) % p;
            self.send_bytes(call, to, round, &held[..ends[n - 1]], wire::native_flag())?;
            let msg = self.recv_msg(call, from, round)?;
            let base = held.len();
            let mut c = Cursor::new(msg.payload(), 0);
            for _ in 0..n {
                next_item(&mut c).map_err(|why| self.payload_error(call, from, why))?;
                ends.push(base + c.pos);
            }
            if !c.at_end() {
                return Err(self.payload_error(call, from, format!("more than {n} values")));
            }
            held.extend_from_slice(msg.payload());
            dist <<= 1;
            round += 1;
        }
        let mut out: Vec<(u8, Vec<u8>)> = vec![(0, Vec::new()); p];
        let mut c = Cursor::new(&held, 0);
        for i in 0..p {
            let (flags, bytes) = next_item(&mut c).expect("checked when received");
            out[(me + i) % p] = (flags, bytes.to_vec());
        }
        Ok(out)
    }

    /// Every process's value, in pid order, on every process (MPI's `Allgather`, for any serde
    /// type; values may differ in size).
    pub fn all_gather<T>(&mut self, value: &T) -> Result<Vec<T>>
    where
        T: Serialize + DeserializeOwned,
    {
        let mut mine = Vec::new();
        put_item(value, &mut mine).map_err(|why| self.encode_error::<T>(why))?;
        let call = self.begin(op::ALL_GATHER, type_sig::<T>(0));
        let items = self.bruck_gather(&call, mine)?;
        items
            .into_iter()
            .enumerate()
            .map(|(s, (flags, b))| {
                crate::codec::decode::<T>(&b, wire::payload_swapped(flags))
                    .map_err(|e| self.payload_error(&call, s, e.0))
            })
            .collect()
    }

    /// Every process's numbers, concatenated in pid order, on every process (MPI's
    /// `Allgather`). Every process must give a slice of the same length.
    pub fn all_gather_slice<T: Number>(&mut self, values: &[T]) -> Result<Vec<T>> {
        let (p, me, n) = (self.nprocs, self.pid, values.len());
        let board = self.board_for::<T>(n)?;
        let bulk = self.bulk_for::<T>(n)?;
        // The length in the signature, so that processes giving different lengths are a
        // mismatch that names both.
        let call = self.begin(op::ALL_GATHER_SLICE, u64::from(T::TAG) | (n as u64) << 8);
        if let Some(board) = board {
            // Up to 64 bytes each, every process on this host: every row of the host board.
            let mut out = Vec::with_capacity(n * p);
            self.gather_on_board(&board, &call, values, |v| out.extend_from_slice(v))?;
            return Ok(out);
        }
        if let (Some(board), true) = (&bulk, self.single_copy()) {
            // Every process's values read straight from its memory into their place.
            let data = bytemuck::cast_slice(values);
            let (b, addrs) = self.expose_on_board(board, &call, data, 0..p)?;
            // All the room at once: grown block by block, the vector would be moved (copied)
            // as it grows.
            let mut out = Vec::with_capacity(n * p);
            for (j, &addr) in addrs.iter().enumerate() {
                if j == me {
                    out.extend_from_slice(values);
                } else {
                    self.pull_append(board, (j, b), addr, n, &mut out)?;
                }
            }
            self.wait_acks(board, &call, b, p as u64 - 1)?;
            self.confirm_reads(board, &call, b, (0..p).filter(|&j| j != me))?;
            return Ok(out);
        }
        if let Some(board) = bulk {
            // Up to a bulk half each: every process's bulk, straight into its place.
            let b = self.numbers_on_bulk(&board, &call, (values, true), 0..p)?;
            let mut out = vec![T::default(); n * p];
            for (j, block) in out.chunks_exact_mut(n).enumerate() {
                if j == me {
                    block.copy_from_slice(values);
                } else {
                    let dst = bytemuck::cast_slice_mut(block);
                    self.bulk_from(&board, &call, (j, b), 0, dst)?;
                }
            }
            return Ok(out);
        }
        // Bruck's concatenation on numbers: block k of the rounds is the values of pid
        // (me + k) % p. Every process converts what it receives to its own byte order, so the
        // values it passes on are all in one order, and are written straight from the blocks
        // held. The last round's blocks go straight to their places in the result, in pid
        // order, instead of being appended and the whole rotated.
        let mut held: Vec<T> = Vec::new();
        let mut dist = 1;
        let mut round = 0;
        while dist < p {
            let m = dist.min(p - dist);
            let (to, from) = ((me + p - dist) % p, (me + dist) % p);
            // Until a round has received, the only block held is this process's own.
            let blocks = if dist == 1 { values } else { &held[..] };
            self.send_numbers(&call, to, round, &blocks[..m * n])?;
            let msg = self.recv_msg(&call, from, round)?;
            if dist + m == p {
                return in_pid_order(blocks, msg.payload(), msg.swapped(), n, p, me)
                    .map_err(|why| self.payload_error(&call, from, why));
            }
            if dist == 1 {
                held.reserve_exact(n * p.next_power_of_two() / 2);
                held.extend_from_slice(values);
            }
            extend_numbers(&mut held, msg.payload(), msg.swapped(), m * n)
                .map_err(|why| self.payload_error(&call, from, why))?;
            dist <<= 1;
            round += 1;
        }
        Ok(values.to_vec())
    }
}

/// The result of Bruck's concatenation in pid order, from the last round: `held`, the blocks
/// 0 to d - 1 this process had, and `payload`, the blocks d to p - 1 it received (`n` numbers
/// each, block k being pid (me + k) % p's).
fn in_pid_order<T: Number>(
    held: &[T],
    payload: &[u8],
    swapped: bool,
    n: usize,
    p: usize,
    me: usize,
) -> std::result::Result<Vec<T>, String> {
    let d = held.len() / n.max(1);
    let size = std::mem::size_of::<T>();
    let block = n * size;
    let received = if n == 0 { 0 } else { p - d };
    if payload.len() != received * block {
        return Err(format!(
            "{} bytes for {} {}",
            payload.len(),
            received * n,
            T::NAME
        ));
    }
    let mut out = Vec::with_capacity(n * p);
    // Pid 0 is block p - me: blocks p - me to p - 1 come first, then 0 to p - me - 1.
    let first = (p - me) % p;
    for (a, b) in [(first, p), (0, first)] {
        if a < d.min(b) {
            out.extend_from_slice(&held[a * n..d.min(b) * n]);
        }
        if b > d.max(a) {
            let from = (d.max(a) - d) * block;
            crate::number::extend_from_bytes(&mut out, &payload[from..(b - d) * block], swapped);
        }
    }
    Ok(out)
}
