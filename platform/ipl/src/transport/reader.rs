//! The receive loop of one inbound connection, generic over its [`Stream`].
//!
//! A connection is read by the receiving application thread itself, through a fixed 64 KiB
//! buffer; large reads go straight from the stream into the caller's memory. The reader knows
//! nothing of frames: the port above it looks for headers in [`Reader::buffered`].

use super::{Stream, WAIT_SLICE};
use std::io;
use std::time::{Duration, Instant};

/// Size of an inbound connection's buffer.
pub(crate) const BUF_CAP: usize = 64 * 1024;
/// Reads at least this large go straight into the caller's memory.
const DIRECT_MIN: usize = 16 * 1024;
/// How long a reader in the middle of a message yields before it parks.
const MID_MESSAGE_SPIN: Duration = Duration::from_micros(50);
/// Size of a header read after a large message: a header and a small message fit.
const SMALL_READ: usize = 4096;

/// Outcome of a non-blocking refill.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Got this many new bytes.
    Got(usize),
    /// Nothing available right now.
    Empty,
    /// The buffer is full.
    Full,
    /// The peer closed the stream.
    Eof,
}

/// A buffered reader of one inbound stream.
pub(crate) struct Reader {
    pub(crate) stream: Box<dyn Stream>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The stream ended (or the connection is to be dropped).
    pub(crate) eof: bool,
    /// Set after a large message: the next header is looked for with a small read, so that the
    /// bulk of a large payload goes from the stream straight into the reader's memory instead
    /// of through this buffer. Streams of small messages keep reading in large batches.
    pub(crate) small_reads: bool,
}

impl Reader {
    pub(crate) fn new(stream: Box<dyn Stream>) -> Self {
        Reader {
            stream,
            buf: vec![0u8; BUF_CAP].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            small_reads: false,
        }
    }

    /// Bytes read from the stream and not consumed yet.
    #[inline]
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Consumes `n` buffered bytes.
    #[inline]
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
        if !self.stream.ready() {
            return Ok(Fill::Empty);
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
        since: &mut Option<Instant>,
        stall: Duration,
        dead: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        if self.eof {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection in the middle of a message",
            ));
        }
        // The clock is read only once waiting starts: reads that find their bytes at once
        // (most of them) never look at it.
        let idle = since.get_or_insert_with(Instant::now).elapsed();
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
        self.stream.wait(WAIT_SLICE.min(stall));
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
        let mut since: Option<Instant> = None;
        while self.end - self.start < n {
            match self.fill()? {
                Fill::Got(_) => since = None,
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
        let mut since: Option<Instant> = None;
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
                        since = None;
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
                        since = None;
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
        let mut since: Option<Instant> = None;
        loop {
            let k = ((self.end - self.start) as u64).min(n) as usize;
            self.consume(k);
            n -= k as u64;
            if n == 0 {
                return Ok(());
            }
            match self.fill()? {
                Fill::Got(_) | Fill::Full => since = None,
                Fill::Empty | Fill::Eof => self.wait(&mut since, stall, dead)?,
            }
        }
    }

    /// Stops reading (this direction only).
    pub(crate) fn shutdown(&mut self) {
        self.stream.shutdown();
    }
}
