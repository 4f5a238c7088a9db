//! The whole machine's `sync` on ipl's mpi driver (feature `mpi`): its barrier, the all-reduce
//! of every process's per-destination message counts, goes over the process's
//! [`WordChannel`](ipl::WordChannel), straight to MPI point-to-point, rather than through
//! round messages on the control connections. Each round of the butterfly is then one MPI
//! message each way, as in an `MPI_Allreduce` of the counts, where a round message costs a
//! port's framing, its connection's window and a receiving thread's look; the superstep's data
//! still travels through the ports. This is the mpi driver's counterpart of the host board
//! (see [`board`](crate::board)), and like it serves the whole machine only: groups keep their
//! messages.
//!
//! Every process agrees to use it when the machine is set up (with the host board's rounds),
//! so that all or none do: it takes the mpi driver, a machine of at most
//! [`WordChannel::MAX_WORDS`](ipl::WordChannel::MAX_WORDS) - 3 processes, the process's
//! channel free, and `BSP_MPI_SYNC` not `0`.
//!
//! A message is the operation's sequence number, operation and round, and signature, then the
//! counts. A round is one call to the channel ([`WordChannel::exchange`](ipl::WordChannel)):
//! the receive of the partner's message posted, this process's sent, and the first looks at the
//! receive, under one hold of MPI's state; the wait below takes over only if the partner's
//! message has not come by then. A process waiting for a peer's counts looks at failures and its control port as a
//! wait on the board does, so that a peer that called another operation is reported (it sends
//! a round message that this process finds there); a process waiting for round messages looks
//! at the channel after each wait slice, so that a peer waiting in `sync` is reported too
//! ([`Net::on_channel_instead`](crate::net::Net)).

use crate::collective::{Call, Folded};
use crate::error::{Error, Result};
use crate::mpi_words::{pair_word, stamp, MpiSync, Words, HEAD, STAMP_BITS, STAMP_MASK};
use crate::op;
use crate::superstep::Bsp;

/// Looks at the channel that an exchange of two processes makes before its wait, which polls
/// the control port between looks, takes over.
const EXCHANGE_LOOKS: u32 = 256;

/// The error of a sync over MPI without the channel, which the machine's setup gave every
/// process or none.
fn no_channel(pid: usize) -> Error {
    Error::Usage {
        pid,
        what: "a sync over MPI without the process's word channel".into(),
    }
}

/// The header of a message of operation `call` in round `round`.
fn head(call: &Call, round: u32) -> [u64; HEAD] {
    [
        call.seq,
        u64::from(call.op) | u64::from(round) << 8,
        call.sig,
    ]
}

impl Bsp {
    /// The element-wise sum of every process's `counts` (one per pid), over the word channel,
    /// along the same butterfly as the round messages' (recursive doubling, the first
    /// processes of a P that is not a power of two folded in pairs).
    pub(crate) fn sum_over_channel(&mut self, call: &Call, counts: &mut [u64]) -> Result<()> {
        let (p, r) = (self.nprocs, self.pid);
        if p == 1 {
            return Ok(());
        }
        if p == 2 {
            return self.pair_over_channel(call, counts);
        }
        let f = Folded::new(p);
        let rounds = f.pof2.trailing_zeros();
        if r < 2 * f.rem {
            if r % 2 == 0 {
                self.channel_send(call, r + 1, &head(call, 0), counts)?;
            } else {
                self.channel_post(call, r - 1)?;
                self.channel_receive(call, r - 1, 0, counts, true)?;
            }
        }
        if let Some(nr) = f.rank(r) {
            for k in 0..rounds {
                let peer = f.pid(nr ^ (1 << k));
                let msg = self.channel_exchange(call, peer, &head(call, k + 1), counts)?;
                add_counts(self.pid, call, peer, k + 1, &msg, counts, true)?;
            }
        }
        if r < 2 * f.rem {
            if r % 2 == 1 {
                self.channel_send(call, r - 1, &head(call, rounds + 1), counts)?;
            } else {
                self.channel_post(call, r + 1)?;
                self.channel_receive(call, r + 1, rounds + 1, counts, false)?;
            }
        }
        Ok(())
    }

    /// [`sum_over_channel`](Bsp::sum_over_channel) of two processes, which need only each
    /// other's count for themselves: one word, the low 16 bits of the sequence number in its
    /// low bits and the count above (the count of messages on the control connection, in the
    /// count's high half, fits 16 bits but for a superstep of 65,536 packed messages or more,
    /// which sends a whole message instead). MPI's shared-memory transport carries a word with
    /// its headers in one cache line, which two words overflow: an exchange of one word took
    /// 0.39 to 0.40 us where two took 0.44 (C, `MPI_Irecv`, `MPI_Send`, `MPI_Test`, 40,000
    /// calls, 3 runs). The word of a superstep that sent nothing is the stamp alone, below
    /// 2^16, which the channel carries in the message's tag with no payload, quicker still
    /// (see [`ipl::WordChannel`]). Only `counts[pid]` is the sum afterwards.
    fn pair_over_channel(&mut self, call: &Call, counts: &mut [u64]) -> Result<()> {
        let (me, peer) = (self.pid, 1 - self.pid);
        let count = counts[peer];
        let stamp = stamp(call.seq);
        let msg = match pair_word(call.seq, count) {
            Some(word) => self.channel_exchange(call, peer, &[], &[word])?,
            None => self.channel_exchange(call, peer, &head(call, 1), &[count])?,
        };
        let theirs = match msg[..] {
            [word] if word & STAMP_MASK == stamp => word >> STAMP_BITS,
            [word] => {
                return Err(Error::CollectiveMismatch {
                    pid: me,
                    seq: call.seq,
                    mine: op::describe_call(call.op, call.sig),
                    peer,
                    theirs: format!(
                        "called {} (an operation whose number ends in {:#06x})",
                        op::name(call.op),
                        word & STAMP_MASK
                    ),
                })
            }
            _ => check_message(me, call, peer, &head(call, 1), &msg, 1)?[0],
        };
        counts[me] = counts[me].wrapping_add(theirs);
        Ok(())
    }

    /// Runs `f` on the process's channel and the rank of `pid`, under the connections' lock;
    /// an error of the channel's becomes one of `what` with `pid`.
    fn on_channel<R>(
        &self,
        call: &Call,
        pid: usize,
        what: &str,
        f: impl FnOnce(&mut MpiSync, usize) -> ipl::Result<R>,
    ) -> Result<R> {
        let mut net = self.net();
        let Some(m) = net.words.as_mut() else {
            return Err(no_channel(self.pid));
        };
        let rank = m.ranks[pid];
        f(m, rank).map_err(|e| net.ipl_error(&call.ctx, format!("{what} pid {pid}"), e))
    }

    fn channel_post(&mut self, call: &Call, pid: usize) -> Result<()> {
        self.on_channel(call, pid, "posting a receive from", |m, rank| {
            m.chan.post(rank)
        })
    }

    /// Sends `head` (empty, or a header from [`head`]) and then `counts` to `pid`.
    fn channel_send(
        &mut self,
        call: &Call,
        pid: usize,
        head: &[u64],
        counts: &[u64],
    ) -> Result<()> {
        self.on_channel(call, pid, "sending counts to", |m, rank| {
            m.send(rank, head, counts)
        })
    }

    /// Waits for the next message from `pid`, whose receive is posted: looks at the channel,
    /// and, as a wait on the host board does, polls the control port and looks at failures
    /// between looks; MPI gives nothing to sleep on, so a long wait naps between looks.
    fn channel_wait(&mut self, call: &Call, pid: usize) -> Result<Words> {
        let mut wait = crate::net::BoardWait::new();
        let look = |this: &Self| {
            this.on_channel(call, pid, "receiving counts from", |m, _| {
                Ok(m.chan.test()?.map(Words::from_slice))
            })
        };
        let nap = || std::thread::sleep(std::time::Duration::from_micros(50));
        // Only `pid` tells whether this wait can end: a peer that is not this round's partner
        // may have finished the sync and gone on to a group's operation with this process.
        let got = self.wait_looking(call, &mut wait, Some(pid), look, nap);
        if got.is_err() {
            if let Some(m) = self.net().words.as_mut() {
                m.chan.cancel();
            }
        }
        got
    }

    /// Waits for the message of round `round` from `pid`, whose receive is posted, and adds its
    /// counts to `counts` (or, with `add` false, takes them).
    fn channel_receive(
        &mut self,
        call: &Call,
        pid: usize,
        round: u32,
        counts: &mut [u64],
        add: bool,
    ) -> Result<()> {
        let msg = self.channel_wait(call, pid)?;
        add_counts(self.pid, call, pid, round, &msg, counts, add)
    }

    /// Sends `head` (empty, or a header from [`head`]) and then `counts` to `pid`, and waits for
    /// `pid`'s message: the receive posted, the message sent and the first looks at the
    /// channel in one call, which is all an exchange needs when the peer's message comes
    /// meanwhile; the wait of [`channel_wait`](Bsp::channel_wait) takes over if it does not.
    fn channel_exchange(
        &mut self,
        call: &Call,
        pid: usize,
        head: &[u64],
        counts: &[u64],
    ) -> Result<Words> {
        let looks = if self.ibis().pool().crowded() {
            1
        } else {
            EXCHANGE_LOOKS
        };
        let got = self.on_channel(call, pid, "exchanging counts with", |m, rank| {
            m.exchange(rank, head, counts, looks)
        });
        match got {
            Ok(Some(msg)) => Ok(msg),
            Ok(None) => self.channel_wait(call, pid),
            Err(e) => {
                if let Some(m) = self.net().words.as_mut() {
                    m.chan.cancel();
                }
                Err(e)
            }
        }
    }
}

/// Adds the counts of `msg`, the message of round `round` from `src` for this process's
/// operation `call`, to `counts` (or, with `add` false, takes them).
fn add_counts(
    me: usize,
    call: &Call,
    src: usize,
    round: u32,
    msg: &[u64],
    counts: &mut [u64],
    add: bool,
) -> Result<()> {
    let theirs = check_message(me, call, src, &head(call, round), msg, counts.len())?;
    if add {
        for (c, t) in counts.iter_mut().zip(theirs) {
            *c = c.wrapping_add(*t);
        }
    } else {
        counts.copy_from_slice(theirs);
    }
    Ok(())
}

/// The counts of `msg`, which `src` sent for this process's operation `call` (whose header
/// is `want`), or the error of a message that is not that.
fn check_message<'a>(
    me: usize,
    call: &Call,
    src: usize,
    want: &[u64; HEAD],
    msg: &'a [u64],
    n: usize,
) -> Result<&'a [u64]> {
    let (h, counts) = msg.split_at(msg.len().min(HEAD));
    if h.len() < HEAD || (h[0], h[1] & 0xff, h[2]) != (want[0], want[1] & 0xff, want[2]) {
        let theirs = match h {
            [seq, op_round, sig] => format!(
                "called {} (operation #{seq})",
                op::describe_call(*op_round as u8, *sig)
            ),
            _ => format!("sent {} words over MPI", msg.len()),
        };
        return Err(Error::CollectiveMismatch {
            pid: me,
            seq: call.seq,
            mine: op::describe_call(call.op, call.sig),
            peer: src,
            theirs,
        });
    }
    if h[1] != want[1] || counts.len() != n {
        return Err(Error::Decode {
            pid: me,
            superstep: call.ctx.superstep,
            src,
            reason: format!(
                "a {} message over MPI of round {} with {} counts, where round {} with {n} \
                 was due",
                op::name(call.op),
                h[1] >> 8,
                counts.len(),
                want[1] >> 8
            ),
        });
    }
    Ok(counts)
}
