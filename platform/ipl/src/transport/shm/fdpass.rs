//! Descriptors passed over a Unix socket (SCM_RIGHTS), and the credentials of its peer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

/// Room for the control message of one descriptor (CMSG_SPACE of one int, rounded up).
const CMSG_ROOM: usize = 64;

/// Sends `data` with `fd` attached (if any) in one message; fails unless all of it went.
pub(crate) fn send(sock: RawFd, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = [0u64; CMSG_ROOM / 8];
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE and CMSG_LEN compute sizes; `control` is 8-aligned and at least
        // CMSG_SPACE(4) bytes, so CMSG_FIRSTHDR points into it and the int after the header
        // fits.
        unsafe {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        }
    }
    // SAFETY: `msg` points at `iov` (valid for `data.len()` bytes) and `control`, both alive
    // for the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the setup frame did not fit the socket",
        ));
    }
    Ok(())
}

/// Reads into `buf` (waiting until `deadline`), keeping any descriptors that come along in
/// `fds` (at most one per message; more are closed). Returns the bytes read, 0 at the end.
pub(crate) fn recv(
    sock: RawFd,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    deadline: Instant,
) -> io::Result<usize> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake's deadline passed",
            ));
        }
        crate::transport::poll::wait_one(sock, libc::POLLIN, left);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u64; CMSG_ROOM / 8];
        // SAFETY: an all-zero msghdr is valid; we point it at `iov` and `control` below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ROOM as _;
        // SAFETY: `msg` describes `buf` and `control`, alive and writable for the call.
        let n =
            unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                continue;
            }
            return Err(e);
        }
        // SAFETY: the kernel filled `control` with `msg_controllen` bytes of control messages;
        // CMSG_FIRSTHDR/NXTHDR walk them within that length, and each SCM_RIGHTS message's
        // data holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors, now ours.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                    let data = libc::CMSG_DATA(c) as *const RawFd;
                    for k in 0..count {
                        let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k)));
                        // One descriptor is all a reply carries; others close here.
                        if fds.is_empty() {
                            fds.push(fd);
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more descriptors than a setup frame carries",
            ));
        }
        return Ok(n as usize);
    }
}

/// The process id of the peer of a Unix socket, as the kernel recorded it at connect time.
pub(crate) fn peer_pid(sock: &impl AsRawFd) -> io::Result<libc::pid_t> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a valid ucred.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}
