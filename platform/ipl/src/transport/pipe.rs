//! A bounded in-process byte queue: the inbox of drivers that push bytes from another thread.
//!
//! The sending side appends shared chunks (a multicast appends the same chunks to every pipe,
//! so the message is copied once however many receivers there are) and wakes the receiver's
//! [`Waker`] if it is parked; the receiving thread reads the chunks as a byte stream.

use super::{Frame, Sink, Stream, Waker};
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes a pipe buffers before its sender waits.
const PIPE_CAP: usize = 4 << 20;
/// Chunk size of in-process transfers.
const PIPE_CHUNK: usize = 256 * 1024;

#[derive(Default)]
struct State {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    sender_closed: bool,
    receiver_closed: bool,
}

/// A bounded byte queue between two threads.
pub(crate) struct Pipe {
    state: Mutex<State>,
    readable: Condvar,
    writable: Condvar,
    waker: Arc<Waker>,
}

impl Pipe {
    /// A pipe whose receiver is woken through `waker`.
    pub(crate) fn new(waker: Arc<Waker>) -> Arc<Self> {
        Arc::new(Pipe {
            state: Mutex::new(State::default()),
            readable: Condvar::new(),
            writable: Condvar::new(),
            waker,
        })
    }

    /// The receiving end.
    pub(crate) fn reader(self: &Arc<Self>) -> PipeReader {
        PipeReader(self.clone())
    }

    /// The sending end.
    pub(crate) fn writer(self: &Arc<Self>) -> PipeWriter {
        PipeWriter {
            pipe: self.clone(),
            at: (0, 0),
        }
    }

    fn read(&self, dst: &mut [u8]) -> io::Result<usize> {
        let mut st = self.state.lock();
        let mut n = 0;
        while n < dst.len() {
            let Some(front) = st.chunks.front_mut() else {
                break;
            };
            let k = front.len().min(dst.len() - n);
            dst[n..n + k].copy_from_slice(&front[..k]);
            if k == front.len() {
                st.chunks.pop_front();
            } else {
                let _ = front.split_to(k);
            }
            n += k;
        }
        st.bytes -= n;
        if n > 0 {
            drop(st);
            self.writable.notify_one();
            Ok(n)
        } else if st.sender_closed || st.receiver_closed {
            Ok(0)
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }

    /// Appends `c` unless the pipe is full; fails when the receiver is gone.
    fn push(&self, c: &Bytes) -> io::Result<bool> {
        let mut st = self.state.lock();
        if st.receiver_closed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "receive port closed",
            ));
        }
        if st.bytes != 0 && st.bytes + c.len() > PIPE_CAP {
            return Ok(false);
        }
        st.bytes += c.len();
        st.chunks.push_back(c.clone());
        drop(st);
        self.readable.notify_one();
        self.waker.notify();
        Ok(true)
    }
}

/// The receiving end of a [`Pipe`].
pub(crate) struct PipeReader(Arc<Pipe>);

impl Stream for PipeReader {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        self.0.read(dst)
    }

    fn wait(&mut self, d: Duration) {
        let mut st = self.0.state.lock();
        if st.chunks.is_empty() && !st.sender_closed && !st.receiver_closed {
            self.0.readable.wait_for(&mut st, d);
        }
    }

    fn shutdown(&mut self) {
        let mut st = self.0.state.lock();
        st.receiver_closed = true;
        st.chunks.clear();
        st.bytes = 0;
        drop(st);
        self.0.writable.notify_all();
        self.0.readable.notify_all();
    }
}

/// The sending end of a [`Pipe`].
pub(crate) struct PipeWriter {
    pipe: Arc<Pipe>,
    /// Where the last write stopped: (frame offset, index of the next body chunk).
    at: (u64, usize),
}

/// A message's parts as chunks of at most [`PIPE_CHUNK`] bytes. A shared buffer among them
/// (`owned`, see `WriteMessage::write_shared_bytes`) is not copied: its chunks are slices of it.
fn to_chunks(parts: &[&[u8]], owned: &[Option<Bytes>]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(Some(shared)) = owned.get(i) {
            if !cur.is_empty() {
                out.push(Bytes::from(std::mem::take(&mut cur)));
            }
            let mut at = 0;
            while at < shared.len() {
                let end = (at + PIPE_CHUNK).min(shared.len());
                out.push(shared.slice(at..end));
                at = end;
            }
            continue;
        }
        for piece in p.chunks(PIPE_CHUNK) {
            if cur.len() + piece.len() > PIPE_CHUNK && !cur.is_empty() {
                out.push(Bytes::from(std::mem::take(&mut cur)));
            }
            cur.extend_from_slice(piece);
        }
    }
    if !cur.is_empty() {
        out.push(Bytes::from(cur));
    }
    out
}

impl Sink for PipeWriter {
    fn write(&mut self, frame: &Frame<'_>, offset: u64) -> io::Result<u64> {
        let chunks = frame
            .chunks
            .get_or_init(|| to_chunks(frame.parts, frame.owned));
        let mut at = offset;
        let mut next = if offset == self.at.0 { self.at.1 } else { 0 };
        if at == 0 {
            if !self.pipe.push(&Bytes::copy_from_slice(&frame.header))? {
                return Ok(0);
            }
            at = frame.header.len() as u64;
            next = 0;
        }
        while at < frame.len {
            let c = &chunks[next];
            if !self.pipe.push(c)? {
                break;
            }
            at += c.len() as u64;
            next += 1;
        }
        self.at = (at, next);
        Ok(at - offset)
    }

    fn wait_fds(&self, _fds: &mut Vec<libc::pollfd>) -> bool {
        false
    }

    fn wait(&mut self, d: Duration) {
        let mut st = self.pipe.state.lock();
        if !st.receiver_closed && st.bytes >= PIPE_CAP {
            self.pipe.writable.wait_for(&mut st, d);
        }
    }

    fn close(self: Box<Self>, close: &[u8]) {
        // A receiver that reads nothing for this long loses the clean close, and sees the
        // connection end without one.
        let deadline = Instant::now() + Duration::from_secs(10);
        let c = Bytes::copy_from_slice(close);
        while let Ok(false) = self.pipe.push(&c) {
            if Instant::now() > deadline {
                break;
            }
            let mut st = self.pipe.state.lock();
            self.pipe
                .writable
                .wait_for(&mut st, Duration::from_millis(10));
        }
        self.pipe.state.lock().sender_closed = true;
        self.pipe.readable.notify_all();
        self.pipe.waker.force();
    }
}
