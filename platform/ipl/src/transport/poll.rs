//! Waiting on descriptors with poll(2).

use std::time::Duration;

/// A poll(2) entry waiting for `events` on `fd`.
pub(crate) fn entry(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Waits until one of `fds` is ready or `d` passes; returns the number ready (0 on timeout or
/// interruption). Level-triggered poll(2) rather than an epoll set: it adds no work to every
/// arriving packet while the waiter is spinning instead of waiting.
pub(crate) fn wait(fds: &mut [libc::pollfd], d: Duration) -> std::io::Result<usize> {
    let ms = d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: `fds` is a valid array of pollfd of the given length for the duration of the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// Waits until `fd` is ready for `events` or `d` passes.
pub(crate) fn wait_one(fd: i32, events: i16, d: Duration) {
    let _ = wait(&mut [entry(fd, events)], d);
}
