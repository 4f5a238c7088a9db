//! The lifeline of a rank that `ipl-run --hostfile` started through a remote shell
//! (`IPL_STDIN_LIFELINE=1`).
//!
//! The launcher kills a rank by killing the remote shell it started, which ends only the local
//! half: on the rank's host the process would stay, cut off from its pool, and a process that
//! is stopped (SIGSTOP) or hung never notices anything. What the host does see is the remote
//! shell's connection going: the standard input it gives the rank, which the launcher keeps
//! open for as long as the rank runs, closes. A guardian process, which is not stopped with
//! the rank, waits for that and kills the rank with SIGKILL, which reaches a stopped process.

use crate::error::{Error, Result};
use std::os::fd::AsRawFd;

/// The variable that asks for a lifeline; the launcher sets it with `IPL_SECRET_STDIN`.
pub(crate) const STDIN_LIFELINE: &str = "IPL_STDIN_LIFELINE";

/// Hands this process's standard input to a guardian process that kills this one when it
/// closes, and gives this process /dev/null as standard input instead (its own reads of
/// standard input end at once, as they would with a launcher that closed it). Once per
/// process; later calls return the first one's answer.
pub(crate) fn hold() -> Result<()> {
    static HELD: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    HELD.get_or_init(|| start().map_err(|e| e.to_string()))
        .clone()
        .map_err(|why| Error::config(STDIN_LIFELINE, format!("cannot hold the lifeline: {why}")))
}

fn start() -> std::io::Result<()> {
    let devnull = std::fs::File::open("/dev/null")?;
    // SAFETY: pidfd_open(2) of this very process, which is alive; the result is checked.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if pidfd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
        // A kernel before 5.3: the rank runs as it did before lifelines, without one.
        tracing::warn!(
            "{STDIN_LIFELINE}: this kernel has no pidfd_open (Linux 5.3 or later); if its \
             launcher gives up on this process, nothing kills it on this host"
        );
        return to_devnull(&devnull);
    }
    let pidfd = pidfd as libc::c_int;
    // SAFETY: the child runs `guard` only, which makes nothing but async-signal-safe system
    // calls and ends with _exit, so it never touches a lock another thread of this process
    // held at the fork, nor returns into code that would.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        guard(pidfd);
    }
    let forked = std::io::Error::last_os_error();
    // SAFETY: closes this process's copy of the pidfd it opened above; only the guardian
    // needs one.
    unsafe {
        libc::close(pidfd);
    }
    if pid < 0 {
        return Err(forked);
    }
    to_devnull(&devnull)?;
    tracing::debug!(
        guardian = pid,
        "lifeline held: standard input closing kills this process"
    );
    Ok(())
}

/// Makes `devnull` this process's standard input, in place of the launcher's pipe.
fn to_devnull(devnull: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: dup2(2) of an open descriptor owned by `devnull` onto standard input.
    if unsafe { libc::dup2(devnull.as_raw_fd(), 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The guardian: waits until standard input closes, then kills the process `pidfd` names; or
/// until that process ends, then ends too.
fn guard(pidfd: libc::c_int) -> ! {
    let errno = || {
        // SAFETY: reads this thread's errno, which __errno_location always points at.
        unsafe { *libc::__errno_location() }
    };
    // SAFETY: async-signal-safe system calls on descriptors this process holds and on a
    // stack buffer, and _exit; no allocation, no lock.
    unsafe {
        // A group of its own: a stop of the rank's whole group leaves the guardian running.
        libc::setpgid(0, 0);
        // Told apart from the rank it is a copy of in `ps` and /proc/PID/comm.
        libc::prctl(libc::PR_SET_NAME, c"ipl-lifeline".as_ptr());
        // Nothing but standard input and the pidfd (moved to 1): a copy of one of the rank's
        // sockets would keep that connection open after the rank closed it.
        if libc::dup2(pidfd, 1) < 0 {
            libc::_exit(1);
        }
        if libc::syscall(
            libc::SYS_close_range,
            2 as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        ) != 0
        {
            for fd in 2..4096 {
                libc::close(fd);
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: 1,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let mut buf = [0u8; 64];
        loop {
            if libc::poll(fds.as_mut_ptr(), 2, -1) < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                libc::_exit(1);
            }
            // The rank has ended.
            if fds[1].revents != 0 {
                libc::_exit(0);
            }
            if fds[0].revents != 0 {
                let n = libc::read(0, buf.as_mut_ptr().cast(), buf.len());
                if n > 0 || (n < 0 && matches!(errno(), libc::EINTR | libc::EAGAIN)) {
                    continue;
                }
                // Closed: the remote shell, and with it the launcher's hold on the rank, is gone.
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    1,
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                );
                libc::_exit(0);
            }
        }
    }
}
