//! A channel of small word messages between the ranks of a pool on the mpi driver, beside its
//! ports, for a layer above that synchronises the whole pool often (bsp's superstep): a message
//! of a few words goes straight to MPI point-to-point, on a tag of its own, without a port's
//! framing, connection or receiving thread. On one host a superstep's exchange of counts then
//! costs what an `MPI_Barrier` does, where through a port it costs a round trip and more.
//!
//! A process has at most one channel at a time ([`WordChannel::take`]); messages between two
//! ranks arrive in the order they were sent (MPI does not let messages of one sender on one
//! communicator overtake each other when the receive takes any tag). Receives are posted ahead
//! of their message, into the channel's own buffer, and tested: nothing here blocks, so the
//! caller's wait can look at failures between tests.
//!
//! The channel has a communicator of its own, a duplicate of the world's, so that its receives
//! may take any tag, and a tag can carry data. A message of one word below `MPI_TAG_UB` goes
//! with no payload, the word in its tag (the word plus 1); any other goes with its words as
//! its payload, on tag [`TAG_BODY`]. MPI's shared-memory transport exchanges a message with no
//! payload quicker than one of a word: an exchange of two processes (`MPI_Irecv` of any tag,
//! `MPI_Send`, `MPI_Test` until done) took 0.41 to 0.46 us with no payload and 0.46 to 0.50
//! with one word, where `MPI_Barrier` took 0.45 to 0.48 (C, OpenMPI 4.1, 5 rounds of 200,000
//! calls). The superstep of a bsp machine of two processes that sent nothing exchanges such a
//! word.

use super::raw::{self, Live};
use super::World;
use crate::error::{Error, Result};
use crate::node::NodeId;
use std::collections::VecDeque;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether this process's channel is taken.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The tag of a message whose payload is its words; a tag above carries one word, in the tag.
pub(super) const TAG_BODY: c_int = 0;

/// The tag that carries `words` on its own, if they are one word that a tag can hold.
#[inline]
fn tag_of(words: &[u64], tag_ub: c_int) -> Option<c_int> {
    match *words {
        [w] if w < tag_ub as u64 => Some(w as c_int + 1),
        _ => None,
    }
}

/// The number of words of the message that came with `got` into `buf` from `source`: its
/// payload's, or the one its tag carries (which is then put in `buf`).
fn decode(source: c_int, got: raw::Received, buf: &mut [u64]) -> Result<usize> {
    match (got.tag, got.len) {
        (TAG_BODY, len) if len % 8 == 0 => Ok(len / 8),
        (tag, 0) if tag > TAG_BODY => {
            buf[0] = (tag - 1) as u64;
            Ok(1)
        }
        (tag, len) => Err(Error::Decode {
            origin: format!("mpi:{source}"),
            reason: if tag == TAG_BODY {
                format!("a word message of {len} bytes")
            } else {
                format!("a word message of {len} bytes with a word in its tag ({tag})")
            },
        }),
    }
}

/// Small messages of `u64` words between the ranks of a pool on the mpi driver, straight over
/// MPI point-to-point on a communicator of the channel's own, for a layer that synchronises
/// the whole pool often. A message of one word below `MPI_TAG_UB` (2^31 - 1 in OpenMPI) goes
/// with no payload, the word in the message's tag, which MPI exchanges quicker than a payload
/// of one word. Obtained from [`Ibis::word_channel`](crate::Ibis::word_channel).
pub struct WordChannel {
    world: Arc<World>,
    /// The posted receive's buffer: a heap block that stays where it is while MPI may write it.
    buf: Box<[u64]>,
    /// The posted receive and the rank it takes from.
    posted: Posted,
    /// Messages [`peek`](WordChannel::peek) took before a receive was posted for them, oldest
    /// first.
    early: VecDeque<(c_int, Vec<u64>)>,
    /// The early message that `post` made the posted one, which `test` hands out.
    given: Vec<u64>,
    /// Whether `given` is the posted message (not yet handed out).
    early_posted: bool,
}

impl std::fmt::Debug for WordChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordChannel")
            .field("size", &self.world.size)
            .field("posted_from", &self.posted.as_ref().map(|p| p.1))
            .field("early", &self.early.len())
            .finish()
    }
}

impl WordChannel {
    /// The most words a message may have: 4 KiB, within the eager limit of MPI's transports,
    /// so that a send returns once MPI has copied it, whatever the receiver does.
    pub const MAX_WORDS: usize = 512;

    /// The process's channel, unless it is taken or MPI is not running.
    pub(crate) fn take() -> Option<WordChannel> {
        let world = super::world()?;
        if TAKEN.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(WordChannel {
            world,
            buf: vec![0; Self::MAX_WORDS].into_boxed_slice(),
            posted: None,
            early: VecDeque::new(),
            given: Vec::new(),
            early_posted: false,
        })
    }

    /// The MPI rank of `node`, a member of this pool.
    pub fn rank_of(&self, node: &NodeId) -> Option<usize> {
        node.address()
            .strip_prefix("mpi:")
            .and_then(|r| r.parse::<c_int>().ok())
            .filter(|r| (0..self.world.size).contains(r))
            .map(|r| r as usize)
    }

    fn rank(&self, rank: usize) -> Result<c_int> {
        c_int::try_from(rank)
            .ok()
            .filter(|r| *r < self.world.size)
            .ok_or_else(|| {
                misuse(format!(
                    "rank {rank} is not one of the {} MPI ranks",
                    self.world.size
                ))
            })
    }

    /// The proof that MPI runs, or the error of a finalised MPI.
    fn mpi(world: &World) -> Result<Live<'_>> {
        world.mpi().map_err(|e| Error::io("mpi word channel", e))
    }

    /// Sends `words` to `rank`; returns once MPI has taken them.
    pub fn send(&self, rank: usize, words: &[u64]) -> Result<()> {
        let dest = self.rank(rank)?;
        fits(words)?;
        let live = Self::mpi(&self.world)?;
        send(&live, &self.world, dest, words)
            .map_err(|e| Error::io(format!("mpi word channel: sending to rank {rank}"), e))
    }

    /// Posts the receive of the next message from `rank`, which [`test`](WordChannel::test)
    /// then completes. One receive at a time.
    pub fn post(&mut self, rank: usize) -> Result<()> {
        let source = self.rank(rank)?;
        if self.posted.is_some() || self.early_posted {
            return Err(misuse("a receive is posted already".into()));
        }
        if let Some(i) = self.early.iter().position(|(s, _)| *s == source) {
            // Its next message is here already: `test` hands it out.
            let (_, words) = self.early.remove(i).expect("an index just found");
            self.given = words;
            self.early_posted = true;
            return Ok(());
        }
        let live = Self::mpi(&self.world)?;
        // SAFETY: `buf` is a heap block of this channel that nothing else uses while the
        // receive is pending; the receive completes (`test`) or is cancelled and waited for
        // (`cancel`) before the channel lets go of the block, which is leaked should MPI be
        // finalised with the receive pending.
        let r = unsafe {
            raw::irecv_on(
                &live,
                &self.world.words,
                source,
                raw::any_tag(),
                bytemuck::cast_slice_mut(&mut self.buf[..]),
            )
        }
        .map_err(|e| Error::io(format!("mpi word channel: receiving from rank {rank}"), e))?;
        self.posted = Some((r, source));
        Ok(())
    }

    /// Posts the receive of the next message from `rank`, sends `words` to `rank` and tests the
    /// receive up to `looks` times, all under one hold of MPI's state: the message if it came
    /// meanwhile (the receive is then used up), `None` while it has not (the receive stays
    /// posted, for [`test`](WordChannel::test)). For an exchange with one peer, one call where
    /// `post`, `send` and `test` make three. Should the send fail, the receive is cancelled.
    pub fn exchange(&mut self, rank: usize, words: &[u64], looks: u32) -> Result<Option<&[u64]>> {
        let source = self.rank(rank)?;
        if self.posted.is_some()
            || self.early_posted
            || self.early.iter().any(|(s, _)| *s == source)
        {
            // A message taken early, or a misuse that `post` reports: the separate calls.
            self.post(rank)?;
            self.send(rank, words)?;
            return self.test();
        }
        fits(words)?;
        let WordChannel {
            world, buf, posted, ..
        } = self;
        let live = Self::mpi(world)?;
        let failed = |what: &str, e| Error::io(format!("mpi word channel: {what} rank {rank}"), e);
        // SAFETY: as in `post`: `buf` is this channel's own heap block, which nothing else uses
        // while the receive is pending, and which outlives it.
        let r = unsafe {
            raw::irecv_on(
                &live,
                &world.words,
                source,
                raw::any_tag(),
                bytemuck::cast_slice_mut(&mut buf[..]),
            )
        }
        .map_err(|e| failed("receiving from", e))?;
        *posted = Some((r, source));
        if let Err(e) = send(&live, world, source, words) {
            cancel_posted(&live, posted, buf);
            return Err(failed("sending to", e));
        }
        for _ in 0..looks {
            if let Some(n) = completed(&live, posted, buf)? {
                return Ok(Some(&buf[..n]));
            }
            std::hint::spin_loop();
        }
        Ok(None)
    }

    /// The message the posted receive took, once it has come; `None` while it has not. The
    /// receive is then used up.
    pub fn test(&mut self) -> Result<Option<&[u64]>> {
        if std::mem::take(&mut self.early_posted) {
            return Ok(Some(&self.given));
        }
        if self.posted.is_none() {
            return Err(misuse("no receive is posted".into()));
        }
        let live = Self::mpi(&self.world)?;
        let n = completed(&live, &mut self.posted, &mut self.buf)?;
        Ok(n.map(|n| &self.buf[..n]))
    }

    /// The next message from `rank` if it has come, while no receive is posted for it: for a
    /// caller that waits for something else and wants to know whether `rank` is already on the
    /// channel. The message stays the next one [`post`](WordChannel::post) and
    /// [`test`](WordChannel::test) take from `rank`.
    pub fn peek(&mut self, rank: usize) -> Result<Option<&[u64]>> {
        let source = self.rank(rank)?;
        if let Some(i) = self.early.iter().position(|(s, _)| *s == source) {
            return Ok(Some(&self.early[i].1));
        }
        if self.posted.as_ref().is_some_and(|(_, s)| *s == source) {
            return Ok(None);
        }
        let live = Self::mpi(&self.world)?;
        let ctx = || format!("mpi word channel: looking for a message from rank {rank}");
        let found = raw::improbe_on(&live, &self.world.words, source, raw::any_tag())
            .map_err(|e| Error::io(ctx(), e))?;
        let Some(m) = found else {
            return Ok(None);
        };
        let got = raw::Received {
            len: m.len,
            tag: m.tag,
        };
        if m.len > Self::MAX_WORDS * 8 {
            m.discard(&live);
            return Err(Error::Decode {
                origin: format!("mpi:{source}"),
                reason: format!("a word message of {} bytes", got.len),
            });
        }
        // Room for a length that is not whole words, which `decode` refuses, and for the word
        // that a tag carries.
        let mut words = vec![0u64; m.len.div_ceil(8).max(1)];
        m.receive(&live, &mut bytemuck::cast_slice_mut(&mut words)[..got.len])
            .map_err(|e| Error::io(ctx(), e))?;
        let n = decode(source, got, &mut words)?;
        words.truncate(n);
        self.early.push_back((source, words));
        Ok(self.early.back().map(|(_, w)| &w[..]))
    }

    /// Cancels the posted receive, if any: MPI no longer writes the channel's buffer. A message
    /// that completed it first is lost.
    pub fn cancel(&mut self) {
        self.early_posted = false;
        if self.posted.is_none() {
            return;
        }
        let Ok(live) = self.world.mpi() else {
            // MPI may still own the block: it is never freed.
            self.posted = None;
            std::mem::forget(std::mem::take(&mut self.buf));
            return;
        };
        cancel_posted(&live, &mut self.posted, &mut self.buf);
    }
}

/// A channel's posted receive and the rank it takes from.
type Posted = Option<(raw::Recv, c_int)>;

/// The number of words of the message the posted receive put in `buf`, once it has come;
/// `None` while it has not. The receive is used up once it has come or its test failed.
fn completed(live: &Live<'_>, posted: &mut Posted, buf: &mut [u64]) -> Result<Option<usize>> {
    let Some((req, source)) = posted.as_mut() else {
        return Err(misuse("no receive is posted".into()));
    };
    let source = *source;
    match raw::test_recv(live, req) {
        Ok(None) => Ok(None),
        Ok(Some(got)) => {
            *posted = None;
            decode(source, got, buf).map(Some)
        }
        Err(e) => {
            *posted = None;
            Err(Error::io(
                format!("mpi word channel: receiving from rank {source}"),
                e,
            ))
        }
    }
}

/// Cancels the posted receive, if any: MPI no longer writes `buf`, or, where it could not be
/// cancelled, `buf` is let go of for ever (a fresh empty block takes its place).
fn cancel_posted(live: &Live<'_>, posted: &mut Posted, buf: &mut Box<[u64]>) {
    let Some((req, source)) = posted.take() else {
        return;
    };
    if let Err(e) = raw::cancel_recv(live, req) {
        tracing::warn!(source, "mpi word channel: cancelling a receive: {e}");
        // MPI may still own the block: it is never freed.
        std::mem::forget(std::mem::take(buf));
    }
}

/// Sends `words` to `dest` on the channel's communicator: in the tag if they can go there.
#[inline]
fn send(live: &Live<'_>, world: &World, dest: c_int, words: &[u64]) -> std::io::Result<()> {
    match tag_of(words, world.tag_ub) {
        Some(tag) => raw::send_on(live, &world.words, dest, tag, &[]),
        None => raw::send_on(
            live,
            &world.words,
            dest,
            TAG_BODY,
            bytemuck::cast_slice(words),
        ),
    }
}

/// Whether `words` fit a message of the channel.
fn fits(words: &[u64]) -> Result<()> {
    if words.len() > WordChannel::MAX_WORDS {
        return Err(misuse(format!(
            "a message of {} words, more than the {} a channel carries",
            words.len(),
            WordChannel::MAX_WORDS
        )));
    }
    Ok(())
}

/// The error of a call that the channel's state or the pool's ranks do not allow.
fn misuse(what: String) -> Error {
    Error::io("mpi word channel", std::io::Error::other(what))
}

impl Drop for WordChannel {
    fn drop(&mut self) {
        self.cancel();
        TAKEN.store(false, Ordering::Release);
    }
}
