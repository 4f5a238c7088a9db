//! Waking a receiver that is parked in poll(2).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Wakes a receiver parked in `poll(2)` (an eventfd in its poll set), but only when it is
/// actually parked, so that in-process senders pay no system call while the receiver spins.
pub(crate) struct Waker {
    fd: OwnedFd,
    parked: AtomicBool,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd(2) returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker {
            fd,
            parked: AtomicBool::new(false),
        })
    }

    /// The descriptor a parked receiver polls.
    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Says whether the receiver is parked (or about to park).
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
