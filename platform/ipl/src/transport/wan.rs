//! The wide-area filter: wraps any driver and delays frames between nodes of different
//! locations by a configured latency and bandwidth, so that multi-cluster behaviour can be
//! studied on one machine (the driver stacks of NetIbis).
//!
//! The sending side stamps each frame with the time before which it must not be delivered: the
//! link is busy with earlier frames until some time, then this one takes `len / bandwidth`,
//! then it travels for `latency`. The receiving side holds a frame back until its time.

use super::{Acceptor, Admission, Dialed, Driver, Frame, Inbox, Sink, Stream, Waker};
use crate::config::WanLink;
use crate::error::Result;
use crate::node::NodeId;
use crate::wire::{now_ns, HEADER_LEN};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A driver whose connections to other locations are shaped.
pub(crate) struct WanDriver {
    pub(crate) inner: Arc<dyn Driver>,
    pub(crate) link: WanLink,
    /// This node's location.
    pub(crate) location: String,
}

impl Driver for WanDriver {
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        let mut d = self.inner.connect(peer, request)?;
        if peer.location() != self.location {
            d.sink = d.sink.map(|inner| {
                Box::new(Shaped {
                    inner,
                    link: self.link,
                    next_free_ns: 0,
                }) as Box<dyn Sink>
            });
        }
        Ok(d)
    }
}

/// An acceptor whose connections hold frames back until their time.
pub(crate) struct WanAcceptor(pub(crate) Arc<dyn Acceptor>);

impl Acceptor for WanAcceptor {
    fn admit(&self, request: &[u8]) -> Admission {
        let a = self.0.admit(request);
        Admission {
            reply: a.reply,
            inbox: a
                .inbox
                .map(|inner| Box::new(DelayingInbox(inner)) as Box<dyn Inbox>),
            single_copy: a.single_copy,
        }
    }
}

struct DelayingInbox(Box<dyn Inbox>);

impl Inbox for DelayingInbox {
    fn waker(&self) -> Arc<Waker> {
        self.0.waker()
    }
    fn attach(self: Box<Self>, stream: Box<dyn Stream>) {
        self.0.attach(Box::new(Delayed {
            inner: stream,
            head: [0; HEADER_LEN],
            have: 0,
            given: 0,
            left: 0,
        }))
    }
}

/// The sending side: stamps frames.
struct Shaped {
    inner: Box<dyn Sink>,
    link: WanLink,
    next_free_ns: u64,
}

impl Shaped {
    /// The time before which a frame of `len` bytes sent at `now` must not be delivered. The
    /// arithmetic saturates: a link configured slow enough (one byte a second, a latency of
    /// centuries) holds its frames for ever rather than overflowing into the past.
    fn stamp_at(&mut self, now: u64, len: u64) -> u64 {
        let start = self.next_free_ns.max(now);
        let transmit = self.link.bandwidth.map_or(0, |bw| {
            let ns = (len as u128 + HEADER_LEN as u128) * 1_000_000_000 / bw.max(1) as u128;
            u64::try_from(ns).unwrap_or(u64::MAX)
        });
        self.next_free_ns = start.saturating_add(transmit);
        let latency = u64::try_from(self.link.latency.as_nanos()).unwrap_or(u64::MAX);
        self.next_free_ns.saturating_add(latency)
    }
}

impl Sink for Shaped {
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        self.inner.write(frame, offset)
    }
    fn stamp(&mut self, len: u64) -> u64 {
        self.stamp_at(now_ns(), len)
    }
    fn prepare_wait(&mut self) -> bool {
        self.inner.prepare_wait()
    }
    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) -> bool {
        self.inner.wait_fds(fds)
    }
    fn woken(&mut self) {
        self.inner.woken()
    }
    fn wait(&mut self, d: Duration) {
        self.inner.wait(d)
    }
    fn wake_at(&self) -> Option<Instant> {
        self.inner.wake_at()
    }
    fn unread_capacity(&self) -> u64 {
        self.inner.unread_capacity()
    }
    fn close(mut self: Box<Self>, close: &[u8]) {
        // The close frame must not overtake the frames before it.
        let mut c = close.to_vec();
        let at = self.stamp_at(now_ns(), 0);
        if c.len() >= HEADER_LEN {
            c[16..24].copy_from_slice(&at.to_le_bytes());
        }
        self.inner.close(&c)
    }
}

/// The receiving side: passes a frame on once its time has come.
struct Delayed {
    inner: Box<dyn Stream>,
    /// The header of the next frame, `have` bytes of it read.
    head: [u8; HEADER_LEN],
    have: usize,
    /// Header bytes handed on.
    given: usize,
    /// Payload bytes of the current frame still to pass on.
    left: u64,
}

impl Delayed {
    fn deliver_at(&self) -> u64 {
        u64::from_le_bytes(self.head[16..24].try_into().expect("sized"))
    }
}

impl Stream for Delayed {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        loop {
            if self.left > 0 {
                let n = (dst.len() as u64).min(self.left) as usize;
                let got = self.inner.read(&mut dst[..n])?;
                self.left -= got as u64;
                return Ok(got);
            }
            if self.have < HEADER_LEN {
                let got = self.inner.read(&mut self.head[self.have..])?;
                if got == 0 {
                    return Ok(0);
                }
                self.have += got;
                continue;
            }
            // A whole header: hand it on once its time has come. Its other fields are the
            // port's to check; only the length matters here.
            if self.given == 0 && self.deliver_at() > now_ns() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = (HEADER_LEN - self.given).min(dst.len());
            dst[..n].copy_from_slice(&self.head[self.given..self.given + n]);
            self.given += n;
            if self.given == HEADER_LEN {
                self.left = u64::from_le_bytes(self.head[8..16].try_into().expect("sized"));
                self.have = 0;
                self.given = 0;
            }
            return Ok(n);
        }
    }
    fn prepare_park(&mut self) -> bool {
        // A frame held back wakes the receiver by its time; bytes behind it do not count.
        self.ready_at_ns().is_some() || self.inner.prepare_park()
    }
    fn wait_fds(&self, fds: &mut Vec<libc::pollfd>) {
        self.inner.wait_fds(fds)
    }
    fn woken(&mut self) {
        self.inner.woken()
    }
    fn wait(&mut self, d: Duration) {
        match self.ready_at_ns() {
            Some(t) => std::thread::sleep(d.min(Duration::from_nanos(t.saturating_sub(now_ns())))),
            None => self.inner.wait(d),
        }
    }
    fn ready_at_ns(&self) -> Option<u64> {
        (self.have == HEADER_LEN && self.given == 0).then(|| self.deliver_at())
    }
    fn shutdown(&mut self) {
        self.inner.shutdown()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NullSink;

    impl Sink for NullSink {
        fn write(&mut self, _: &Frame<'_>, _: u64) -> io::Result<u64> {
            Ok(0)
        }
        fn stamp(&mut self, _: u64) -> u64 {
            0
        }
        fn prepare_wait(&mut self) -> bool {
            false
        }
        fn wait_fds(&self, _: &mut Vec<libc::pollfd>) -> bool {
            false
        }
        fn woken(&mut self) {}
        fn wait(&mut self, _: Duration) {}
        fn wake_at(&self) -> Option<Instant> {
            None
        }
        fn unread_capacity(&self) -> u64 {
            0
        }
        fn close(self: Box<Self>, _: &[u8]) {}
    }

    fn shaped(latency: Duration, bandwidth: Option<u64>) -> Shaped {
        Shaped {
            inner: Box::new(NullSink),
            link: WanLink { latency, bandwidth },
            next_free_ns: 0,
        }
    }

    #[test]
    fn frames_queue_behind_each_other_then_travel() {
        let mut s = shaped(Duration::from_millis(1), Some(1_000_000_000));
        let first = s.stamp_at(1_000, 1_000 - HEADER_LEN as u64);
        assert_eq!(first, 1_000 + 1_000 + 1_000_000);
        let second = s.stamp_at(1_500, 1_000 - HEADER_LEN as u64);
        assert_eq!(second, 3_000 + 1_000_000);
    }

    /// Extreme links saturate at "never" instead of overflowing (a panic in a debug build, and
    /// a time in the past, so no delay at all, in a release build).
    #[test]
    fn the_slowest_links_saturate_rather_than_overflow() {
        let mut s = shaped(Duration::MAX, Some(1));
        assert_eq!(s.stamp_at(u64::MAX - 10, u64::MAX), u64::MAX);
        assert_eq!(s.stamp_at(5, 1), u64::MAX);
        let mut s = shaped(Duration::ZERO, Some(1));
        assert_eq!(s.stamp_at(0, u64::MAX / 2), u64::MAX);
        assert_eq!(s.stamp_at(0, 0), u64::MAX);
    }
}
