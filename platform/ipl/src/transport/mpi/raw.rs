//! The few MPI calls the driver makes, over the C interface of the system's MPI library (through
//! the `mpi` crate's bindings): blocking and non-blocking sends, posted receives, matched probes
//! and receives, plain probes. Every call returns an [`io::Error`] naming the call when MPI
//! reports an error (the driver sets `MPI_ERRORS_RETURN` on the world communicator, and on the
//! word channel's duplicate of it, so that errors come back instead of aborting the job).
//! Calls without a communicator use the world's; the `_on` forms take one.
//!
//! Every call after the start takes a [`Live`], the proof that MPI still runs in this process:
//! a call that could come after `MPI_Finalize` does not compile.

use mpi::ffi;
use std::io;
use std::os::raw::c_int;

/// `MPI_SUCCESS`.
const SUCCESS: c_int = 0;

#[inline]
fn check(call: &str, rc: c_int) -> io::Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(failed(call, rc))
    }
}

/// The error of `call`, which returned `rc`, with MPI's words for it.
#[cold]
#[inline(never)]
fn failed(call: &str, rc: c_int) -> io::Error {
    // Longer than any implementation's MPI_MAX_ERROR_STRING (256 in OpenMPI and MPICH).
    let mut text = [0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: `text` has room for MPI_MAX_ERROR_STRING characters, and `len` is a valid
    // out-pointer; MPI_Error_string may be called at any time.
    let got = unsafe { ffi::MPI_Error_string(rc, text.as_mut_ptr().cast(), &mut len) };
    let len = usize::try_from(len).unwrap_or(0).min(text.len());
    let words = String::from_utf8_lossy(&text[..len]);
    if got == SUCCESS && !words.trim().is_empty() {
        io::Error::other(format!(
            "{call} failed with MPI error {rc} ({})",
            words.trim()
        ))
    } else {
        io::Error::other(format!("{call} failed with MPI error {rc}"))
    }
}

/// Proof that MPI runs in this process, which every call of this module after the start takes.
/// Only [`Live::check`] makes one, under the world's liveness lock, which it holds for as long
/// as it lives: `MPI_Finalize` is called under that lock taken to write, so it waits until no
/// call is in flight, and no call can follow it.
pub(super) struct Live<'a> {
    _held: parking_lot::RwLockReadGuard<'a, bool>,
}

impl<'a> Live<'a> {
    /// A proof that MPI runs, as `lock` (the world's liveness: true until MPI is finalised)
    /// says, or the error of a finalised MPI. A thread that holds one may take another.
    #[inline]
    pub(super) fn check(lock: &'a parking_lot::RwLock<bool>) -> io::Result<Live<'a>> {
        let guard = lock.read_recursive();
        if *guard {
            Ok(Live { _held: guard })
        } else {
            Err(finalised())
        }
    }
}

/// The error of a call after MPI was finalised.
#[cold]
pub(super) fn finalised() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "MPI has been finalised")
}

fn world() -> ffi::MPI_Comm {
    // SAFETY: reads an initialised constant of the bindings' support library.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// A communicator: the world's, or one of the driver's own, a duplicate of the world's whose
/// tags mean what its user decides (see [`dup_world`]).
pub(super) struct Comm(ffi::MPI_Comm);

impl Comm {
    fn world() -> Comm {
        Comm(world())
    }
}

// SAFETY: a communicator handle may be used from any thread of a process that initialised MPI
// with MPI_THREAD_MULTIPLE, which the driver requires; it is never freed while MPI runs.
unsafe impl Send for Comm {}
// SAFETY: as for `Send`: MPI synchronises concurrent calls on one communicator itself.
unsafe impl Sync for Comm {}

/// A duplicate of the world communicator, with errors returned. Collective: every rank calls
/// it, at the same point of its start.
pub(super) fn dup_world() -> io::Result<Comm> {
    // SAFETY: a null communicator is a valid initial value for an out-parameter.
    let mut comm: ffi::MPI_Comm = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: MPI is initialised (the caller holds the universe); the out-pointer is valid.
    unsafe {
        check("MPI_Comm_dup", ffi::MPI_Comm_dup(world(), &mut comm))?;
        check(
            "MPI_Comm_set_errhandler",
            ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN),
        )?;
    }
    Ok(Comm(comm))
}

/// `MPI_ANY_TAG`.
pub(super) fn any_tag() -> c_int {
    // SAFETY: reads an initialised constant of the bindings' support library.
    unsafe { ffi::RSMPI_ANY_TAG }
}

fn bytes() -> ffi::MPI_Datatype {
    // SAFETY: reads an initialised constant of the bindings' support library.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// `MPI_ANY_SOURCE`.
pub(super) fn any_source() -> c_int {
    // SAFETY: reads an initialised constant of the bindings' support library.
    unsafe { ffi::RSMPI_ANY_SOURCE }
}

fn empty_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct of integers, for which all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Makes errors on the world communicator come back as return codes, and reads its rank, size
/// and largest tag.
pub(super) fn setup_world() -> io::Result<(c_int, c_int, c_int)> {
    let comm = world();
    let (mut rank, mut size) = (0, 0);
    // SAFETY: MPI is initialised (the caller holds the universe); the out-pointers are valid.
    unsafe {
        check(
            "MPI_Comm_set_errhandler",
            ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN),
        )?;
        check("MPI_Comm_rank", ffi::MPI_Comm_rank(comm, &mut rank))?;
        check("MPI_Comm_size", ffi::MPI_Comm_size(comm, &mut size))?;
    }
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI_TAG_UB's attribute value is a pointer to an int, written into `value`.
    let rc = unsafe {
        ffi::MPI_Comm_get_attr(
            comm,
            ffi::MPI_TAG_UB as c_int,
            (&mut value as *mut *mut c_int).cast(),
            &mut flag,
        )
    };
    check("MPI_Comm_get_attr(MPI_TAG_UB)", rc)?;
    // The standard guarantees at least 32767.
    let tag_ub = if flag != 0 && !value.is_null() {
        // SAFETY: MPI set the flag, so `value` points at the attribute's int, which lives as
        // long as the communicator.
        unsafe { *value }
    } else {
        32767
    };
    Ok((rank, size, tag_ub))
}

/// A send in flight (MPI reads its buffer until the request completes), or a barrier.
pub(super) struct Request(ffi::MPI_Request);

// SAFETY: an MPI request handle may be tested and freed from any thread of a process that
// initialised MPI with MPI_THREAD_MULTIPLE, which the driver requires.
unsafe impl Send for Request {}

/// Starts sending `buf` to `dest` with `tag`.
///
/// # Safety
///
/// `buf` must stay valid and unchanged until [`test()`] reports the request complete, or for
/// ever after [`release`].
pub(super) unsafe fn isend(
    _: &Live<'_>,
    dest: c_int,
    tag: c_int,
    buf: &[u8],
) -> io::Result<Request> {
    let len = c_int::try_from(buf.len())
        .map_err(|_| io::Error::other("a piece longer than MPI can count"))?;
    // SAFETY: a null request handle is a valid initial value for an out-parameter.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `buf` is valid for `len` bytes for as long as the caller promises; `req` is a
    // valid out-pointer.
    let rc = unsafe {
        ffi::MPI_Isend(
            buf.as_ptr().cast(),
            len,
            bytes(),
            dest,
            tag,
            world(),
            &mut req,
        )
    };
    check("MPI_Isend", rc)?;
    Ok(Request(req))
}

/// Sends `buf` to `dest` with `tag`, returning once MPI has taken it (for messages within the
/// transport's eager limit: at once, without waiting for the receiver).
pub(super) fn send(live: &Live<'_>, dest: c_int, tag: c_int, buf: &[u8]) -> io::Result<()> {
    send_on(live, &Comm::world(), dest, tag, buf)
}

/// [`send`] on `comm`.
#[inline]
pub(super) fn send_on(
    _: &Live<'_>,
    comm: &Comm,
    dest: c_int,
    tag: c_int,
    buf: &[u8],
) -> io::Result<()> {
    let len = c_int::try_from(buf.len())
        .map_err(|_| io::Error::other("a piece longer than MPI can count"))?;
    // SAFETY: `buf` is valid for `len` bytes for the duration of the call.
    let rc = unsafe { ffi::MPI_Send(buf.as_ptr().cast(), len, bytes(), dest, tag, comm.0) };
    check("MPI_Send", rc)
}

/// Starts a barrier of every rank on `comm`, which [`test()`] then completes. A collective
/// matches no point-to-point message on the communicator.
pub(super) fn ibarrier_on(_: &Live<'_>, comm: &Comm) -> io::Result<Request> {
    // SAFETY: a null request handle is a valid initial value for an out-parameter.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `comm` is a live communicator of this process; `req` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Ibarrier(comm.0, &mut req) };
    check("MPI_Ibarrier", rc)?;
    Ok(Request(req))
}

/// Whether the request has completed (a send's buffer is then free again).
pub(super) fn test(_: &Live<'_>, req: &mut Request) -> io::Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: `req` holds a request from MPI_Isend or MPI_Ibarrier (or the null request after
    // completion, which MPI_Test accepts); the status is ignored.
    let rc = unsafe { ffi::MPI_Test(&mut req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    check("MPI_Test", rc)?;
    Ok(flag != 0)
}

/// Lets the send complete on its own; its buffer must then stay valid for ever.
pub(super) fn release(_: &Live<'_>, mut req: Request) {
    // SAFETY: `req` holds an active or completed send request; freeing one lets MPI complete
    // it in the background (the caller keeps the buffer alive).
    unsafe {
        ffi::MPI_Request_free(&mut req.0);
    }
}

/// A receive posted ahead of its message.
pub(super) struct Recv(ffi::MPI_Request);

// SAFETY: as for `Request`: a request handle may be used from any thread under
// MPI_THREAD_MULTIPLE (the driver keeps each one behind a lock).
unsafe impl Send for Recv {}

/// Posts a receive of a message of at most `buf.len()` bytes from `source` with `tag`.
///
/// # Safety
///
/// `buf` must stay valid, and nothing else may use it, until [`test_recv`] reports the
/// receive complete, or [`cancel_recv`] returned.
pub(super) unsafe fn irecv(
    live: &Live<'_>,
    source: c_int,
    tag: c_int,
    buf: &mut [u8],
) -> io::Result<Recv> {
    // SAFETY: as the caller promises.
    unsafe { irecv_on(live, &Comm::world(), source, tag, buf) }
}

/// [`irecv`] on `comm`.
///
/// # Safety
///
/// As for [`irecv`].
#[inline]
pub(super) unsafe fn irecv_on(
    _: &Live<'_>,
    comm: &Comm,
    source: c_int,
    tag: c_int,
    buf: &mut [u8],
) -> io::Result<Recv> {
    let len = c_int::try_from(buf.len())
        .map_err(|_| io::Error::other("a receive buffer longer than MPI can count"))?;
    // SAFETY: a null request handle is a valid initial value for an out-parameter.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `buf` is valid for `len` bytes for as long as the caller promises.
    let rc = unsafe {
        ffi::MPI_Irecv(
            buf.as_mut_ptr().cast(),
            len,
            bytes(),
            source,
            tag,
            comm.0,
            &mut req,
        )
    };
    check("MPI_Irecv", rc)?;
    Ok(Recv(req))
}

/// What a completed receive took.
#[derive(Debug, Clone, Copy)]
pub(super) struct Received {
    /// Its length in bytes.
    pub(super) len: usize,
    /// Its tag (what the receive asked for, or the message's under `MPI_ANY_TAG`).
    pub(super) tag: c_int,
}

/// What the receive took, once it has completed (the request is then used up).
pub(super) fn test_recv(_: &Live<'_>, req: &mut Recv) -> io::Result<Option<Received>> {
    let mut flag: c_int = 0;
    let mut status = empty_status();
    // SAFETY: `req` holds a receive from MPI_Irecv; the out-pointers are valid.
    let rc = unsafe { ffi::MPI_Test(&mut req.0, &mut flag, &mut status) };
    check("MPI_Test", rc)?;
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: `status` was filled by the completed receive.
    let rc = unsafe { ffi::MPI_Get_count(&status, bytes(), &mut count) };
    check("MPI_Get_count", rc)?;
    Ok(Some(Received {
        len: usize::try_from(count).unwrap_or(0),
        tag: status.MPI_TAG,
    }))
}

/// Whether the receive has completed, without using the request up.
pub(super) fn peek_recv(_: &Live<'_>, req: &Recv) -> io::Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: `req` holds a receive from MPI_Irecv; the status is ignored.
    let rc = unsafe { ffi::MPI_Request_get_status(req.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    check("MPI_Request_get_status", rc)?;
    Ok(flag != 0)
}

/// Cancels the receive and waits until MPI is done with its buffer; the message's length if it
/// had completed before it could be cancelled.
pub(super) fn cancel_recv(_: &Live<'_>, mut req: Recv) -> io::Result<Option<usize>> {
    let mut status = empty_status();
    let mut cancelled: c_int = 0;
    let mut count: c_int = 0;
    // SAFETY: `req` holds a receive from MPI_Irecv, cancelled and then completed (a cancelled
    // receive completes at once); the out-pointers are valid.
    unsafe {
        check("MPI_Cancel", ffi::MPI_Cancel(&mut req.0))?;
        check("MPI_Wait", ffi::MPI_Wait(&mut req.0, &mut status))?;
        check(
            "MPI_Test_cancelled",
            ffi::MPI_Test_cancelled(&status, &mut cancelled),
        )?;
        if cancelled != 0 {
            return Ok(None);
        }
        check(
            "MPI_Get_count",
            ffi::MPI_Get_count(&status, bytes(), &mut count),
        )?;
    }
    Ok(Some(usize::try_from(count).unwrap_or(0)))
}

/// A message that a matched probe took out of MPI's queue for this thread alone.
pub(super) struct Matched {
    msg: ffi::MPI_Message,
    /// Its length in bytes.
    pub(super) len: usize,
    /// The rank that sent it.
    pub(super) source: c_int,
    /// Its tag.
    pub(super) tag: c_int,
}

/// Takes the next message from `source` with `tag`, if one is there.
pub(super) fn improbe(live: &Live<'_>, source: c_int, tag: c_int) -> io::Result<Option<Matched>> {
    improbe_on(live, &Comm::world(), source, tag)
}

/// [`improbe`] on `comm`.
pub(super) fn improbe_on(
    _: &Live<'_>,
    comm: &Comm,
    source: c_int,
    tag: c_int,
) -> io::Result<Option<Matched>> {
    let mut flag: c_int = 0;
    // SAFETY: a null message handle is a valid initial value for an out-parameter.
    let mut msg: ffi::MPI_Message = unsafe { ffi::RSMPI_MESSAGE_NULL };
    let mut status = empty_status();
    // SAFETY: all out-pointers are valid.
    let rc = unsafe { ffi::MPI_Improbe(source, tag, comm.0, &mut flag, &mut msg, &mut status) };
    check("MPI_Improbe", rc)?;
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: `status` was filled by the probe that found the message.
    let rc = unsafe { ffi::MPI_Get_count(&status, bytes(), &mut count) };
    check("MPI_Get_count", rc)?;
    Ok(Some(Matched {
        msg,
        len: usize::try_from(count).unwrap_or(0),
        source: status.MPI_SOURCE,
        tag: status.MPI_TAG,
    }))
}

impl Matched {
    /// Receives the message into `dst`, which must hold at least its length.
    pub(super) fn receive(mut self, _: &Live<'_>, dst: &mut [u8]) -> io::Result<()> {
        assert!(dst.len() >= self.len, "receive buffer too short");
        // The length came from MPI_Get_count, so it fits a c_int.
        let len = self.len as c_int;
        let mut status = empty_status();
        // SAFETY: `dst` is valid for `len` bytes; `msg` came from MPI_Improbe and is received
        // exactly once (this consumes `self`).
        let rc = unsafe {
            ffi::MPI_Mrecv(
                dst.as_mut_ptr().cast(),
                len,
                bytes(),
                &mut self.msg,
                &mut status,
            )
        };
        check("MPI_Mrecv", rc)
    }

    /// Receives the message into nothing (MPI reports it truncated): it is gone, whatever its
    /// length, without memory for it.
    pub(super) fn discard(mut self, _: &Live<'_>) {
        let mut status = empty_status();
        // SAFETY: a receive of 0 bytes writes nothing through the (dangling, never
        // dereferenced) buffer pointer; `msg` came from MPI_Improbe and is received exactly
        // once (this consumes `self`). The truncation error is the point.
        let _ = unsafe {
            ffi::MPI_Mrecv(
                std::ptr::NonNull::<u8>::dangling().as_ptr().cast(),
                0,
                bytes(),
                &mut self.msg,
                &mut status,
            )
        };
    }

    /// Receives the message into a new buffer.
    pub(super) fn receive_vec(self, live: &Live<'_>) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; self.len];
        self.receive(live, &mut v)?;
        Ok(v)
    }
}

/// Whether a message from `source` with `tag` is there (without taking it).
pub(super) fn iprobe(_: &Live<'_>, source: c_int, tag: c_int) -> io::Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: the out-pointer is valid; the status is ignored.
    let rc = unsafe { ffi::MPI_Iprobe(source, tag, world(), &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    check("MPI_Iprobe", rc)?;
    Ok(flag != 0)
}
