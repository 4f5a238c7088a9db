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
#[cfg(not(miri))]
pub(crate) fn wait(fds: &mut [libc::pollfd], d: Duration) -> std::io::Result<usize> {
    let ms = timeout_ms(d);
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

/// [`wait`] under Miri, which interprets epoll but not poll(2): the same level-triggered wait,
/// over an epoll set made for the call, so that the in-process driver's tests can run there.
#[cfg(miri)]
pub(crate) fn wait(fds: &mut [libc::pollfd], d: Duration) -> std::io::Result<usize> {
    use std::os::fd::{FromRawFd, OwnedFd};
    const MAP: [(i16, u32); 4] = [
        (libc::POLLIN, libc::EPOLLIN as u32),
        (libc::POLLOUT, libc::EPOLLOUT as u32),
        (libc::POLLERR, libc::EPOLLERR as u32),
        (libc::POLLHUP, libc::EPOLLHUP as u32),
    ];
    // SAFETY: epoll_create1 returns a new descriptor or -1.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns; closed when this returns.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&ep);
    for f in fds.iter_mut() {
        f.revents = 0;
        let events = MAP
            .iter()
            .filter(|(p, _)| f.events & p != 0)
            .fold(0, |a, (_, e)| a | e);
        // Edge-triggered, as Miri requires: in a set made for this call, a descriptor that is
        // ready when it is added counts as an edge, so the wait is level-triggered all the same.
        let mut ev = libc::epoll_event {
            events: events | libc::EPOLLET as u32,
            u64: f.fd as u64,
        };
        // SAFETY: `ev` is a valid event for the call; a descriptor listed twice fails with
        // EEXIST and is served by its first entry's registration.
        unsafe { libc::epoll_ctl(raw, libc::EPOLL_CTL_ADD, f.fd, &mut ev) };
    }
    let mut out = vec![libc::epoll_event { events: 0, u64: 0 }; fds.len().max(1)];
    let ms = timeout_ms(d);
    // SAFETY: `out` has room for `out.len()` events.
    let n = unsafe { libc::epoll_wait(raw, out.as_mut_ptr(), out.len() as i32, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    let mut ready = 0;
    for f in fds.iter_mut() {
        for e in &out[..n as usize] {
            if e.u64 == f.fd as u64 {
                f.revents = MAP
                    .iter()
                    .filter(|(_, m)| e.events & m != 0)
                    .fold(0, |a, (p, _)| a | p);
            }
        }
        ready += usize::from(f.revents != 0);
    }
    Ok(ready)
}

/// `d` in whole milliseconds, rounded up (a wait never ends early), at most what poll(2) and
/// epoll_wait(2) take.
fn timeout_ms(d: Duration) -> i32 {
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

/// Waits until `fd` is ready for `events` or `d` passes.
pub(crate) fn wait_one(fd: i32, events: i16, d: Duration) {
    let _ = wait(&mut [entry(fd, events)], d);
}
