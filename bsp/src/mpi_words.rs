//! The words a sync over MPI sends (see [`mpi_sync`](crate::mpi_sync)), and the process's
//! [`WordChannel`](ipl::WordChannel) that carries them: what the connections, below the
//! supersteps, need to know of them (the channel, and what a peer's word says it called).

use crate::op;
use smallvec::SmallVec;

/// A message as received, inline up to a machine of 13 processes.
pub(crate) type Words = SmallVec<[u64; 16]>;

/// Words in front of the counts in a message.
pub(crate) const HEAD: usize = 3;

/// A one-word message between two processes keeps the low 16 bits of its operation's number
/// in its low bits (see `Bsp::pair_over_channel`), and the count in the bits above.
pub(crate) const STAMP_BITS: u32 = 16;
pub(crate) const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

/// The stamp of operation `seq` in a one-word message.
pub(crate) fn stamp(seq: u64) -> u64 {
    seq & STAMP_MASK
}

/// The one-word message of operation `seq` with `count`, if the count fits it.
pub(crate) fn pair_word(seq: u64, count: u64) -> Option<u64> {
    (count >> (64 - STAMP_BITS) == 0).then(|| count << STAMP_BITS | stamp(seq))
}

/// What a message on the channel says its sender called, if that is operation `seq`: for a
/// process that waits for messages of operation `seq` and finds a peer in a sync over MPI
/// instead. A whole message names its operation; a word alone is a sync of two processes.
pub(crate) fn called_at(msg: &[u64], seq: u64) -> Option<String> {
    match *msg {
        [s, op_round, sig, ..] if s == seq => Some(op::describe_call(op_round as u8, sig)),
        [word] if word & STAMP_MASK == stamp(seq) => Some(op::name(op::SYNC).to_string()),
        _ => None,
    }
}

/// The process's word channel and the MPI rank of each pid of the whole machine.
pub(crate) struct MpiSync {
    pub(crate) chan: ipl::WordChannel,
    pub(crate) ranks: Vec<usize>,
    /// The message being sent, reused.
    out: Vec<u64>,
}

impl MpiSync {
    /// The channel for a machine of `nodes` (by pid), if this process can take it: every node
    /// has an MPI rank, and the messages fit it.
    pub(crate) fn new(ibis: &ipl::Ibis, nodes: &[ipl::NodeId]) -> Option<MpiSync> {
        if nodes.len() + HEAD > ipl::WordChannel::MAX_WORDS {
            return None;
        }
        let chan = ibis.word_channel()?;
        let ranks = nodes
            .iter()
            .map(|n| chan.rank_of(n))
            .collect::<Option<Vec<_>>>()?;
        Some(MpiSync {
            chan,
            ranks,
            out: Vec::new(),
        })
    }

    /// Puts the message of `head` (empty, or a header) and then `counts` in the reused buffer.
    fn write_out(&mut self, head: &[u64], counts: &[u64]) {
        self.out.clear();
        self.out.extend_from_slice(head);
        self.out.extend_from_slice(counts);
    }

    /// Sends `head` and then `counts` to MPI rank `rank`.
    pub(crate) fn send(&mut self, rank: usize, head: &[u64], counts: &[u64]) -> ipl::Result<()> {
        self.write_out(head, counts);
        self.chan.send(rank, &self.out)
    }

    /// Sends `head` and then `counts` to MPI rank `rank`, with the receive of its message
    /// posted first and looked at `looks` times (see [`ipl::WordChannel::exchange`]): its
    /// message, if it came meanwhile.
    pub(crate) fn exchange(
        &mut self,
        rank: usize,
        head: &[u64],
        counts: &[u64],
        looks: u32,
    ) -> ipl::Result<Option<Words>> {
        self.write_out(head, counts);
        Ok(self
            .chan
            .exchange(rank, &self.out, looks)?
            .map(Words::from_slice))
    }
}
