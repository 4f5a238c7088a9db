//! Reading another process's memory directly (process_vm_readv, "cross-memory attach"): large
//! parts of a message go from the sender's memory to the receiver's in one copy.
//!
//! The process is the one the kernel says is at the other end of the Unix socket, never one the
//! peer names, and it is held by a pidfd: after every read the pidfd says whether the process
//! had exited, in which case the bytes may come from another process that got its pid, and are
//! thrown away. Whether such reads are allowed here (same user, ptrace rules) is found by
//! reading a random probe the peer announced at an address it announced.

use std::io;
#[cfg(not(miri))]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// This process's probe: random bytes a peer reads to find out whether it may read our memory.
pub(crate) fn probe() -> (u64, [u8; 16]) {
    static PROBE: OnceLock<[u8; 16]> = OnceLock::new();
    let p = PROBE.get_or_init(rand::random);
    (p.as_ptr() as u64, *p)
}

/// A process whose memory we read.
#[cfg(not(miri))]
pub(crate) struct Remote {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

#[cfg(not(miri))]
impl Remote {
    /// The process `pid`, if its memory can be read and holds `probe` at `addr`.
    pub(crate) fn open(pid: libc::pid_t, addr: u64, probe: &[u8; 16]) -> Option<Remote> {
        if pid <= 0 {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let r = Remote { pid, pidfd };
        let mut got = [0u8; 16];
        match r.read(&mut got, addr) {
            Ok(16) if &got == probe => Some(r),
            _ => None,
        }
    }

    /// Whether the process has not exited.
    fn alive(&self) -> bool {
        let mut p = crate::transport::poll::entry(self.pidfd.as_raw_fd(), libc::POLLIN);
        // SAFETY: polls one valid pollfd without waiting.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 0
    }

    /// [`read_raw`](Remote::read_raw) without its look at whether the process had exited
    /// when the read ended: the bytes are the process's only if the caller learns that later,
    /// from something the process did after the read.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    pub(crate) unsafe fn read_raw_unconfirmed(
        &self,
        dst: *mut u8,
        len: usize,
        addr: u64,
    ) -> io::Result<usize> {
        let local = libc::iovec {
            iov_base: dst.cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: writes at most `len` bytes at `dst`, which the caller vouches for; the remote
        // address is only read, in the other process, by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the sending process is gone",
                ),
                Some(libc::EFAULT) => io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the sender offered memory it does not have",
                ),
                _ => e,
            });
        }
        Ok(n as usize)
    }
}

/// Under Miri, which cannot read a process's memory through the kernel, the ring's tests read
/// their own process's memory with a plain copy instead: Miri then checks every part a
/// consumer reads from a producer's memory to be live when it is read (a buffer freed too
/// early is a use after free there), which a read through the kernel would not show.
#[cfg(miri)]
pub(crate) struct Remote(());

#[cfg(miri)]
impl Remote {
    /// This process, if `probe` is at `addr`.
    pub(crate) fn open(pid: libc::pid_t, addr: u64, probe: &[u8; 16]) -> Option<Remote> {
        let r = Remote(());
        let mut got = [0u8; 16];
        (pid == std::process::id() as libc::pid_t
            && r.read(&mut got, addr).is_ok()
            && &got == probe)
            .then_some(r)
    }

    /// This process, which cannot exit while it reads.
    fn alive(&self) -> bool {
        true
    }

    /// Copies `len` bytes of this process's memory at `addr` to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    pub(crate) unsafe fn read_raw_unconfirmed(
        &self,
        dst: *mut u8,
        len: usize,
        addr: u64,
    ) -> io::Result<usize> {
        // SAFETY: only the tests' consumers read here, at addresses their producers in this
        // process exposed; whether the bytes are live memory is what Miri checks. `dst` is the
        // caller's to vouch for.
        unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, dst, len) };
        Ok(len)
    }
}

/// The reads, over the system's `process_vm_readv` or, under Miri, a plain copy.
impl Remote {
    /// Reads up to `dst.len()` bytes of the process's memory at `addr`.
    pub(crate) fn read(&self, dst: &mut [u8], addr: u64) -> io::Result<usize> {
        // SAFETY: `dst` is writable for its length.
        unsafe { self.read_raw(dst.as_mut_ptr(), dst.len(), addr) }
    }

    /// Reads up to `len` bytes of the process's memory at `addr` into `dst`, which may be
    /// uninitialized: the bytes up to the count returned are initialized afterwards. An error
    /// when the process had exited by the end of the read (its pid may then name another).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    pub(crate) unsafe fn read_raw(&self, dst: *mut u8, len: usize, addr: u64) -> io::Result<usize> {
        // SAFETY: as the caller vouches.
        let n = unsafe { self.read_raw_unconfirmed(dst, len, addr)? };
        if !self.alive() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the sending process exited while its memory was read",
            ));
        }
        Ok(n)
    }
}
