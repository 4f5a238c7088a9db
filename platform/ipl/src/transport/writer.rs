//! Sending one frame to every connection of a send port.
//!
//! Every sink is written from the calling thread, straight from the caller's memory (gather
//! writes for sockets), and all of them progress together, so that one slow receiver does not
//! hold the others back. A sink that fails is reported and the others are still finished, so
//! that no connection is left in the middle of a frame.

use super::{poll, Frame, Sink, WAIT_SLICE};
use crate::wire::{FrameKind, Header, HEADER_LEN};
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// How long a writer whose sinks are all full yields before it parks.
const FULL_SPIN: Duration = Duration::from_micros(50);
/// A receiver that reads nothing for this long while a frame waits for it is given up.
const WRITE_STALL: Duration = Duration::from_secs(3600);

/// Sinks that failed, by index, with the reason.
pub(crate) type Failures = SmallVec<[(usize, String); 1]>;

/// Sends one message (`parts`, `len` bytes in all, written in big-endian order if `big_endian`)
/// to every sink. `dead(i)` is asked while waiting, so that a receiver that died does not hold
/// the sender.
pub(crate) fn send(
    sinks: &mut [&mut (dyn Sink + 'static)],
    parts: &[&[u8]],
    owned: &[Option<bytes::Bytes>],
    len: u64,
    big_endian: bool,
    dead: &dyn Fn(usize) -> bool,
) -> Result<(), Failures> {
    let chunks = std::cell::OnceCell::new();
    let sent = send_frames(sinks, parts, owned, len, big_endian, dead, &chunks);
    // Only sinks that need owned bytes make the chunks, and most frames never do: the check
    // stays here and the freeing out of line, whatever the compiler makes of the rest.
    if let Some(made) = chunks.into_inner() {
        release_chunks(made);
    }
    sent
}

#[cold]
#[inline(never)]
fn release_chunks(chunks: Vec<bytes::Bytes>) {
    drop(chunks);
}

/// [`send`] with the frame's shared chunks in `chunks`.
#[inline(always)]
fn send_frames(
    sinks: &mut [&mut (dyn Sink + 'static)],
    parts: &[&[u8]],
    owned: &[Option<bytes::Bytes>],
    len: u64,
    big_endian: bool,
    dead: &dyn Fn(usize) -> bool,
    chunks: &std::cell::OnceCell<Vec<bytes::Bytes>>,
) -> Result<(), Failures> {
    let total = len + HEADER_LEN as u64;
    let frame = |s: &mut (dyn Sink + 'static)| Frame {
        header: Header {
            kind: FrameKind::Message,
            big_endian,
            len,
            deliver_at_ns: s.stamp(len),
        }
        .encode(),
        parts,
        owned,
        len: total,
        chunks,
    };
    if let [one] = sinks {
        // The common case, without the bookkeeping of many: one frame, written at once when
        // there is room.
        let f = [frame(&mut **one)];
        match one.write(&f[0], 0) {
            Ok(n) if n == total => return Ok(()),
            Ok(n) => return progress(sinks, &f, smallvec::smallvec![(0, n)], dead),
            Err(e) => return Err(smallvec::smallvec![(0, e.to_string())]),
        }
    }
    let frames: SmallVec<[Frame<'_>; 4]> = sinks.iter_mut().map(|s| frame(&mut **s)).collect();
    progress(
        sinks,
        &frames,
        (0..sinks.len()).map(|i| (i, 0)).collect(),
        dead,
    )
}

/// Writes `frames[i]` to `sinks[i]` until every pending sink (index, bytes taken) has taken
/// its whole frame or failed.
fn progress(
    sinks: &mut [&mut (dyn Sink + 'static)],
    frames: &[Frame<'_>],
    mut pending: SmallVec<[(usize, u64); 4]>,
    dead: &dyn Fn(usize) -> bool,
) -> Result<(), Failures> {
    let mut failed = Failures::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut last_progress: Option<Instant> = None;
    loop {
        let mut progressed = false;
        let mut k = 0;
        while k < pending.len() {
            let (i, written) = &mut pending[k];
            match sinks[*i].write(&frames[*i], *written) {
                Ok(n) => {
                    *written += n;
                    progressed |= n > 0;
                }
                Err(e) => {
                    failed.push((*i, e.to_string()));
                    pending.swap_remove(k);
                    continue;
                }
            }
            if pending[k].1 == frames[pending[k].0].len {
                pending.swap_remove(k);
            } else {
                k += 1;
            }
        }
        if pending.is_empty() {
            break;
        }
        let now = Instant::now();
        if progressed || last_progress.is_none() {
            last_progress = Some(now);
            continue;
        }
        let since = last_progress.map_or(Duration::ZERO, |t| now - t);
        if since < FULL_SPIN {
            std::thread::yield_now();
            continue;
        }
        pending.retain(|(i, written)| {
            if !dead(*i) {
                return true;
            }
            // A receiver may take the rest of the frame and then go (read it, and leave the
            // pool): one more write counts what it took before it went.
            if let Ok(n) = sinks[*i].write(&frames[*i], *written) {
                *written += n;
                if *written == frames[*i].len {
                    return false;
                }
            }
            failed.push((*i, "receiver died".into()));
            false
        });
        if since > WRITE_STALL {
            failed.extend(
                pending
                    .drain(..)
                    .map(|(i, _)| (i, "receiver has not read for an hour".to_string())),
            );
        }
        if pending.is_empty() {
            break;
        }
        park(sinks, &pending, &mut fds);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

/// Waits until a pending sink may take more bytes, or a slice of time passes.
fn park(
    sinks: &mut [&mut (dyn Sink + 'static)],
    pending: &[(usize, u64)],
    fds: &mut Vec<libc::pollfd>,
) {
    fds.clear();
    // Per pending sink: its index and the range of its descriptors in `fds`.
    let mut spans: SmallVec<[(usize, usize, usize); 4]> = SmallVec::new();
    let mut without_fds = None;
    let mut wait = WAIT_SLICE;
    let now = Instant::now();
    for &(i, _) in pending {
        if !sinks[i].prepare_wait() {
            return;
        }
        if let Some(t) = sinks[i].wake_at() {
            wait = wait.min(t.saturating_duration_since(now));
        }
        let from = fds.len();
        if sinks[i].wait_fds(fds) {
            spans.push((i, from, fds.len()));
        } else {
            without_fds.get_or_insert(i);
        }
    }
    match without_fds {
        // Sinks without descriptors (in-process pipes) come alone, never mixed with sockets.
        Some(i) => sinks[i].wait(wait),
        None => {
            if poll::wait(fds, wait).unwrap_or(0) > 0 {
                for &(i, from, to) in &spans {
                    if fds[from..to].iter().any(|f| f.revents != 0) {
                        sinks[i].woken();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A connection whose receiver takes the frame's header at once and the rest only once
    /// `taken` is set, as a receiver that reads a large part from the sender's memory does.
    struct Lending {
        taken: Arc<AtomicBool>,
    }

    impl Sink for Lending {
        fn write(&mut self, frame: &Frame<'_>, offset: u64) -> std::io::Result<u64> {
            if offset == 0 {
                return Ok(HEADER_LEN as u64);
            }
            Ok(if self.taken.load(Ordering::SeqCst) {
                frame.len - offset
            } else {
                0
            })
        }
        fn wait_fds(&self, _fds: &mut Vec<libc::pollfd>) -> bool {
            false
        }
        fn wait(&mut self, _d: Duration) {}
        fn close(self: Box<Self>, _close: &[u8]) {}
    }

    /// Sends 1,000 bytes to a `Lending` sink whose receiver is gone from the start; `took`
    /// says whether it read the rest of the frame before it went (seen once the writer asks).
    fn send_to_a_receiver_that_went(took: bool) -> Result<(), Failures> {
        let taken = Arc::new(AtomicBool::new(false));
        let mut sink = Lending {
            taken: taken.clone(),
        };
        let payload = vec![7u8; 1000];
        let dead = move |_: usize| {
            taken.store(took, Ordering::SeqCst);
            true
        };
        send(&mut [&mut sink], &[&payload[..]], &[], 1000, false, &dead)
    }

    #[test]
    fn a_frame_the_receiver_took_before_it_went_is_sent() {
        assert!(send_to_a_receiver_that_went(true).is_ok());
    }

    #[test]
    fn a_frame_the_receiver_did_not_take_before_it_went_fails() {
        let failed = send_to_a_receiver_that_went(false).expect_err("the receiver went");
        assert_eq!(&failed[..], &[(0, "receiver died".to_string())]);
    }
}
