//! The two ends of a port connection: buffered inbound streams and outbound writers.
//!
//! An inbound connection is read by the receiving application thread itself (no hand-off to
//! another thread on the hot path), through a fixed 64 KiB buffer; large slices are read straight
//! from the socket into the caller's memory. Outbound messages are written with one gather write
//! of the caller's memory per connection, so a multicast shares the same buffers among all its
//! connections and nothing is copied. Flow control is the transport's own: a socket's kernel
//! buffers, or a bounded in-process pipe.

use crate::config::WanLink;
use crate::node::NodeId;
use crate::wire::{FrameKind, Header};
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of an inbound connection's buffer.
pub(crate) const BUF_CAP: usize = 64 * 1024;
/// Reads at least this large go straight into the caller's memory.
const DIRECT_MIN: usize = 16 * 1024;
/// How long a reader in the middle of a message, or a writer whose socket is full, yields
/// before it parks in poll(2).
const MID_MESSAGE_SPIN: Duration = Duration::from_micros(50);
/// Messages at least this large switch their connection to small header reads.
pub(crate) const LARGE_MESSAGE: u64 = 32 * 1024;
/// Size of a header read after a large message: a header and a small message fit.
const SMALL_READ: usize = 4096;
/// Bytes an in-process pipe buffers before its sender waits.
const PIPE_CAP: usize = 4 << 20;
/// Chunk size of in-process transfers.
const PIPE_CHUNK: usize = 256 * 1024;
/// Longest single wait before re-checking for failures.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Wakes a receiver parked in `poll(2)` (an eventfd in its poll set), but only when it is
/// actually parked, so that in-process senders pay no system call while the receiver spins.
pub(crate) struct PortWaker {
    fd: std::os::fd::OwnedFd,
    parked: AtomicBool,
}

impl PortWaker {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(PortWaker {
            fd,
            parked: AtomicBool::new(false),
        })
    }

    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub(crate) fn set_parked(&self, parked: bool) {
        self.parked.store(parked, Ordering::SeqCst);
    }

    /// Wakes the receiver if it is parked (or about to park).
    pub(crate) fn notify(&self) {
        if self.parked.load(Ordering::SeqCst) {
            self.force();
        }
    }

    /// Wakes the receiver unconditionally (port closing, new connection).
    pub(crate) fn force(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Clears pending wake-ups after the receiver woke.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; the fd is non-blocking.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }
}

#[derive(Default)]
struct PipeState {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    sender_closed: bool,
    receiver_closed: bool,
}

/// A bounded in-process byte stream standing in for a socket.
pub(crate) struct Pipe {
    state: Mutex<PipeState>,
    readable: Condvar,
    writable: Condvar,
    waker: Arc<PortWaker>,
}

impl Pipe {
    pub(crate) fn new(waker: Arc<PortWaker>) -> Arc<Self> {
        Arc::new(Pipe {
            state: Mutex::new(PipeState::default()),
            readable: Condvar::new(),
            writable: Condvar::new(),
            waker,
        })
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

    fn wait_readable(&self, d: Duration) {
        let mut st = self.state.lock();
        if st.chunks.is_empty() && !st.sender_closed && !st.receiver_closed {
            self.readable.wait_for(&mut st, d);
        }
    }

    /// Appends `chunks`, waiting while the pipe is full. Fails when the receiver is gone, or when
    /// `dead` says so while waiting.
    fn write(&self, chunks: &[Bytes], dead: &dyn Fn() -> Option<String>) -> Result<(), String> {
        for c in chunks {
            let mut st = self.state.lock();
            loop {
                if st.receiver_closed {
                    return Err("receive port closed".into());
                }
                if st.bytes == 0 || st.bytes + c.len() <= PIPE_CAP {
                    break;
                }
                if let Some(why) = dead() {
                    return Err(why);
                }
                self.writable.wait_for(&mut st, WAIT_SLICE);
            }
            st.bytes += c.len();
            st.chunks.push_back(c.clone());
            drop(st);
            self.readable.notify_one();
            self.waker.notify();
        }
        Ok(())
    }

    pub(crate) fn close_sender(&self) {
        self.state.lock().sender_closed = true;
        self.readable.notify_all();
        self.waker.force();
    }

    pub(crate) fn close_receiver(&self) {
        let mut st = self.state.lock();
        st.receiver_closed = true;
        st.chunks.clear();
        st.bytes = 0;
        drop(st);
        self.writable.notify_all();
        self.readable.notify_all();
    }
}

/// The byte source of an inbound connection.
pub(crate) enum InStream {
    Tcp(mio::net::TcpStream),
    Pipe(Arc<Pipe>),
}

impl InStream {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        match self {
            InStream::Tcp(s) => s.read(dst),
            InStream::Pipe(p) => p.read(dst),
        }
    }

    /// The descriptor to wait on, for socket streams.
    pub(crate) fn raw_fd(&self) -> Option<i32> {
        match self {
            InStream::Tcp(s) => Some(s.as_raw_fd()),
            InStream::Pipe(_) => None,
        }
    }

    fn wait_readable(&self, d: Duration) {
        match self {
            InStream::Tcp(s) => {
                poll_fds(&[s.as_raw_fd()], libc::POLLIN, d);
            }
            InStream::Pipe(p) => p.wait_readable(d),
        }
    }
}

/// Outcome of a non-blocking refill.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Got this many new bytes.
    Got(usize),
    /// Nothing available right now.
    Empty,
    /// The buffer is full (a frame header is certainly present).
    Full,
    /// The peer closed the stream.
    Eof,
}

/// One inbound connection of a receive port.
pub(crate) struct InConn {
    pub stream: InStream,
    pub origin: NodeId,
    pub send_port: u64,
    /// Keeps the socket offerable for channel pairing while this channel lives.
    pub link: Option<super::links::LinkHandle>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    pub eof: bool,
    /// Set after a large message: the next header is looked for with a small read, so that the
    /// bulk of a large payload goes from the socket straight into the reader's memory instead
    /// of through this buffer. Streams of small messages keep reading in large batches.
    pub small_reads: bool,
}

impl InConn {
    pub(crate) fn new(stream: InStream, origin: NodeId, send_port: u64, leftover: &[u8]) -> Self {
        let mut buf = vec![0u8; BUF_CAP.max(leftover.len())].into_boxed_slice();
        buf[..leftover.len()].copy_from_slice(leftover);
        InConn {
            stream,
            origin,
            send_port,
            link: None,
            buf,
            start: 0,
            end: leftover.len(),
            eof: false,
            small_reads: false,
        }
    }

    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads whatever is available without blocking.
    pub(crate) fn fill(&mut self) -> io::Result<Fill> {
        if self.eof {
            return Ok(Fill::Eof);
        }
        if self.end == self.buf.len() {
            if self.start == 0 {
                return Ok(Fill::Full);
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let limit = if self.small_reads {
            (self.end + SMALL_READ).min(self.buf.len())
        } else {
            self.buf.len()
        };
        match self.stream.read(&mut self.buf[self.end..limit]) {
            Ok(0) => {
                self.eof = true;
                Ok(Fill::Eof)
            }
            Ok(n) => {
                self.end += n;
                Ok(Fill::Got(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Fill::Empty),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Fill::Empty),
            Err(e) => Err(e),
        }
    }

    /// Waits for more bytes, giving up after `stall` without progress or when `dead` reports the
    /// peer gone.
    fn wait(
        &mut self,
        since: &mut Instant,
        stall: Duration,
        dead: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        if self.eof {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection in the middle of a message",
            ));
        }
        let idle = since.elapsed();
        if idle < MID_MESSAGE_SPIN {
            // The rest of a message is usually microseconds away: yield rather than park.
            std::thread::yield_now();
            return Ok(());
        }
        if idle > stall {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no data for {stall:?} in the middle of a message"),
            ));
        }
        if dead() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "peer died in the middle of a message",
            ));
        }
        self.stream.wait_readable(WAIT_SLICE.min(stall));
        Ok(())
    }

    /// Makes at least `n` (at most [`BUF_CAP`]) bytes available in the buffer.
    pub(crate) fn ensure(
        &mut self,
        n: usize,
        stall: Duration,
        dead: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        debug_assert!(n <= self.buf.len());
        if self.buf.len() - self.start < n {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let mut since = Instant::now();
        while self.end - self.start < n {
            match self.fill()? {
                Fill::Got(_) => since = Instant::now(),
                Fill::Empty | Fill::Eof => self.wait(&mut since, stall, dead)?,
                Fill::Full => unreachable!("buffer cannot be full below n <= capacity"),
            }
        }
        Ok(())
    }

    /// Fills `dst` completely, reading large remainders straight into it.
    pub(crate) fn read_exact(
        &mut self,
        dst: &mut [u8],
        stall: Duration,
        dead: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let have = (self.end - self.start).min(dst.len());
        dst[..have].copy_from_slice(&self.buf[self.start..self.start + have]);
        self.consume(have);
        let mut done = have;
        let mut since = Instant::now();
        while done < dst.len() {
            let left = dst.len() - done;
            if left >= DIRECT_MIN {
                if self.eof {
                    self.wait(&mut since, stall, dead)?;
                }
                match self.stream.read(&mut dst[done..]) {
                    Ok(0) => {
                        self.eof = true;
                        self.wait(&mut since, stall, dead)?;
                    }
                    Ok(k) => {
                        done += k;
                        since = Instant::now();
                    }
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::Interrupted =>
                    {
                        self.wait(&mut since, stall, dead)?
                    }
                    Err(e) => return Err(e),
                }
            } else {
                match self.fill()? {
                    Fill::Got(_) | Fill::Full => {
                        let k = (self.end - self.start).min(left);
                        dst[done..done + k].copy_from_slice(&self.buf[self.start..self.start + k]);
                        self.consume(k);
                        done += k;
                        since = Instant::now();
                    }
                    Fill::Empty | Fill::Eof => self.wait(&mut since, stall, dead)?,
                }
            }
        }
        Ok(())
    }

    /// Discards `n` bytes of the stream.
    pub(crate) fn skip(
        &mut self,
        mut n: u64,
        stall: Duration,
        dead: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let mut since = Instant::now();
        loop {
            let k = ((self.end - self.start) as u64).min(n) as usize;
            self.consume(k);
            n -= k as u64;
            if n == 0 {
                return Ok(());
            }
            match self.fill()? {
                Fill::Got(_) | Fill::Full => since = Instant::now(),
                Fill::Empty | Fill::Eof => self.wait(&mut since, stall, dead)?,
            }
        }
    }

    /// Stops reading. Only this direction: the other may carry a paired channel. The sender
    /// learns that nobody reads once the socket's last handle closes.
    pub(crate) fn shutdown(&self) {
        match &self.stream {
            InStream::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
            InStream::Pipe(p) => p.close_receiver(),
        }
    }
}

/// Emulated wide-area link state of one outbound connection.
pub(crate) struct WanShaper {
    link: WanLink,
    next_free_ns: u64,
}

impl WanShaper {
    pub(crate) fn new(link: WanLink) -> Self {
        WanShaper {
            link,
            next_free_ns: 0,
        }
    }

    /// The time before which a message of `len` bytes sent now must not be delivered: the link
    /// is busy transmitting earlier messages until `next_free`, then this one takes
    /// `len / bandwidth`, then it travels for `latency`.
    fn stamp(&mut self, now: u64, len: u64) -> u64 {
        let start = self.next_free_ns.max(now);
        let transmit = self.link.bandwidth.map_or(0, |bw| {
            ((len + crate::wire::HEADER_LEN as u64) as u128 * 1_000_000_000 / bw as u128) as u64
        });
        self.next_free_ns = start + transmit;
        self.next_free_ns + self.link.latency.as_nanos() as u64
    }
}

/// The byte sink of an outbound connection.
pub(crate) enum OutStream {
    Tcp(std::net::TcpStream),
    Pipe(Arc<Pipe>),
}

/// One outbound connection of a send port.
pub(crate) struct OutConn {
    pub target: NodeId,
    pub port: String,
    pub stream: OutStream,
    pub wan: Option<WanShaper>,
    /// Keeps the socket's reverse direction claimable while this channel lives (held for its
    /// drop).
    pub _link: Option<super::links::LinkHandle>,
}

impl OutConn {
    /// Sends a close frame and releases the stream.
    pub(crate) fn close(mut self) {
        let h = Header {
            kind: FrameKind::Close,
            big_endian: false,
            len: 0,
            deliver_at_ns: self
                .wan
                .as_mut()
                .map_or(0, |w| w.stamp(crate::wire::now_ns(), 0)),
        }
        .encode();
        match &self.stream {
            OutStream::Tcp(s) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                let mut s = s;
                let _ = s.write_all(&h);
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            OutStream::Pipe(p) => {
                let _ = p.write(&[Bytes::copy_from_slice(&h)], &|| None);
                p.close_sender();
            }
        }
    }
}

/// Waits until one of `fds` is ready for `events` or `d` passes.
pub(crate) fn poll_fds(fds: &[i32], events: i16, d: Duration) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    let ms = d.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: `p` is a valid array of pollfd of the given length for the duration of the call.
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms);
    }
}

/// Sends one message (`parts` concatenated, `len` bytes) to every connection.
///
/// TCP connections are written from the calling thread with gather writes straight from `parts`;
/// all connections progress together so one slow receiver does not hold the others back. A
/// connection that fails is reported with its peer; `dead` is asked while waiting so that a
/// receiver that died does not block the sender.
pub(crate) fn send_message(
    conns: &mut [OutConn],
    parts: &[&[u8]],
    len: u64,
    big_endian: bool,
    dead: &dyn Fn(&NodeId) -> bool,
) -> Result<(), (NodeId, String)> {
    let wan = conns.iter().any(|c| c.wan.is_some());
    let now = if wan { crate::wire::now_ns() } else { 0 };
    let mut chunks: Option<Vec<Bytes>> = None;
    // Per tcp connection: index, header, bytes written so far.
    let mut pending: smallvec::SmallVec<[(usize, [u8; crate::wire::HEADER_LEN], u64); 4]> =
        smallvec::SmallVec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let header = Header {
            kind: FrameKind::Message,
            big_endian,
            len,
            deliver_at_ns: c.wan.as_mut().map_or(0, |w| w.stamp(now, len)),
        }
        .encode();
        match &c.stream {
            OutStream::Pipe(p) => {
                let body = chunks.get_or_insert_with(|| to_chunks(parts));
                let target = c.target.clone();
                let mut all = Vec::with_capacity(body.len() + 1);
                all.push(Bytes::copy_from_slice(&header));
                all.extend(body.iter().cloned());
                p.write(&all, &|| dead(&target).then(|| "receiver died".to_string()))
                    .map_err(|e| (c.target.clone(), e))?;
            }
            OutStream::Tcp(_) => pending.push((i, header, 0)),
        }
    }
    let total = len + crate::wire::HEADER_LEN as u64;
    let mut last_progress = Instant::now();
    while !pending.is_empty() {
        let mut progressed = false;
        let mut k = 0;
        while k < pending.len() {
            let (i, header, written) = &mut pending[k];
            let OutStream::Tcp(stream) = &mut conns[*i].stream else {
                unreachable!("only tcp connections are pending")
            };
            let mut slices = [IoSlice::new(&[]); 64];
            let n = gather(&mut slices, header, parts, *written);
            match stream.write_vectored(&slices[..n]) {
                Ok(w) => {
                    *written += w as u64;
                    progressed |= w > 0;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((conns[*i].target.clone(), e.to_string())),
            }
            if pending[k].2 == total {
                pending.swap_remove(k);
            } else {
                k += 1;
            }
        }
        if pending.is_empty() {
            break;
        }
        if progressed {
            last_progress = Instant::now();
            continue;
        }
        if last_progress.elapsed() < MID_MESSAGE_SPIN {
            std::thread::yield_now();
            continue;
        }
        for (i, _, _) in &pending {
            if dead(&conns[*i].target) {
                return Err((conns[*i].target.clone(), "receiver died".into()));
            }
        }
        if last_progress.elapsed() > Duration::from_secs(3600) {
            return Err((
                conns[pending[0].0].target.clone(),
                "receiver has not read for an hour".into(),
            ));
        }
        let fds: smallvec::SmallVec<[i32; 4]> = pending
            .iter()
            .map(|(i, _, _)| match &conns[*i].stream {
                OutStream::Tcp(s) => s.as_raw_fd(),
                OutStream::Pipe(_) => unreachable!(),
            })
            .collect();
        poll_fds(&fds, libc::POLLOUT, WAIT_SLICE);
    }
    Ok(())
}

/// Fills `slices` with the not yet written part of header + parts, starting at byte `skip`.
fn gather<'a>(
    slices: &mut [IoSlice<'a>; 64],
    header: &'a [u8],
    parts: &[&'a [u8]],
    mut skip: u64,
) -> usize {
    let mut n = 0;
    for part in std::iter::once(header).chain(parts.iter().copied()) {
        if n == slices.len() {
            break;
        }
        let l = part.len() as u64;
        if skip >= l {
            skip -= l;
            continue;
        }
        slices[n] = IoSlice::new(&part[skip as usize..]);
        skip = 0;
        n += 1;
    }
    n
}

fn to_chunks(parts: &[&[u8]]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for p in parts {
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
