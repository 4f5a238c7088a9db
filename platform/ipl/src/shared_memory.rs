//! Copies between private memory and memory shared with other processes, for layers above
//! that keep shared mappings of their own (bsp's host board): the same copies the
//! shared-memory driver's rings use.
//!
//! The other process may write the shared bytes at any time, if it misbehaves or crashed
//! half-way: these copies use volatile accesses of whole aligned words, so that such writes
//! change only the bytes a copy gets, never the meaning of this program (which a plain
//! `memcpy` from memory another process writes would not promise).
//!
//! ```
//! let mut shared = vec![0u64; 4]; // stands for a shared mapping
//! let base = shared.as_mut_ptr().cast::<u8>();
//! // SAFETY: the 32 bytes at `base` are live, aligned and written by nobody else here.
//! unsafe { ipl::shared_memory::copy_to_shared(base.add(3), b"hello") };
//! let mut out = [0u8; 5];
//! // SAFETY: as above.
//! unsafe { ipl::shared_memory::copy_from_shared(&mut out, base.add(3)) };
//! assert_eq!(&out, b"hello");
//! ```

/// A new anonymous memory file (`memfd_create`, listed under `name`) of `len` zero bytes, its
/// size sealed for good (`F_SEAL_SHRINK`, `F_SEAL_GROW`, `F_SEAL_SEAL`) and closed on exec:
/// memory to share whose size no process can change under another's mapping (a store to a
/// page past the end of a shrunk file kills the process with SIGBUS). The memory the shared
/// memory driver's rings live in.
pub fn sealed_memory_file(
    name: &std::ffi::CStr,
    len: usize,
) -> std::io::Result<std::os::fd::OwnedFd> {
    crate::transport::shm::memory::sealed_memfd(name, len)
}

/// Whether `fd` is a memory file whose size is sealed for good, as [`sealed_memory_file`]
/// makes them: what a process that maps memory another one made checks first (false for any
/// other file).
pub fn size_sealed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    crate::transport::shm::memory::size_sealed(fd)
}

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`.
///
/// # Safety
/// Every aligned 8-byte word that overlaps `src..src + dst.len()` must lie inside a live
/// mapping (or allocation).
pub unsafe fn copy_from_shared(dst: &mut [u8], src: *const u8) {
    // SAFETY: the caller vouches for the words around the range, as `copy_in` needs.
    unsafe { crate::transport::shm::memory::copy_in(dst, src) }
}

/// Copies `src` into shared memory at `dst`. The bytes of the first and last aligned word
/// outside the range are written back as they were read.
///
/// # Safety
/// Every aligned 8-byte word that overlaps `dst..dst + src.len()` must lie inside a live
/// mapping (or allocation) that no other thread or process writes meanwhile.
pub unsafe fn copy_to_shared(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller vouches for the words around the range, as `copy_out` needs.
    unsafe { crate::transport::shm::memory::copy_out(dst, src) }
}

/// Copies `src` into shared memory at `dst` as [`copy_to_shared`] does, writing its whole
/// 64-byte lines with non-temporal stores (on x86-64; elsewhere it is [`copy_to_shared`]):
/// for large copies into memory that another process reads and has read before, whose lines
/// an ordinary store must first take back from the reader's cache one by one. The bytes go
/// to memory rather than to this processor's cache, so a reader that wants them at once in a
/// cache is better served by [`copy_to_shared`]. Ends with a store fence: a release store
/// after it is seen after the bytes.
///
/// # Safety
/// As [`copy_to_shared`].
pub unsafe fn copy_to_shared_streaming(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller vouches for the words around the range, as `copy_out_streaming`
    // needs.
    unsafe { crate::transport::shm::memory::copy_out_streaming(dst, src) }
}

/// Another process of this host whose memory this process reads directly
/// (`process_vm_readv`, "cross-memory attach"), as the shared-memory driver reads large parts
/// of a message: one copy from the other process's buffer into ours, where a copy through
/// shared memory takes two.
///
/// The process is held by a pidfd, and every read fails if it has exited meanwhile (its pid
/// may then belong to another), but for the unconfirmed reads, whose caller learns that
/// otherwise. Whether reads are allowed at all (same user, the system's
/// ptrace rules) and whether the pid is the process meant are found out by reading a random
/// probe it announced ([`PeerMemory::probe`]) at the address it announced.
pub struct PeerMemory(crate::transport::shm::remote::Remote);

impl PeerMemory {
    /// This process's probe: its address and its random bytes, to announce to peers.
    pub fn probe() -> (u64, [u8; 16]) {
        crate::transport::shm::remote::probe()
    }

    /// The process `pid`, if its memory can be read here and holds `probe` at `addr`.
    pub fn open(pid: i32, addr: u64, probe: &[u8; 16]) -> Option<PeerMemory> {
        crate::transport::shm::remote::Remote::open(pid, addr, probe).map(PeerMemory)
    }

    /// Reads up to `dst.len()` bytes of the process's memory at `addr`; returns how many it
    /// read. An error when the process has exited, or `addr` is not memory of it.
    pub fn read(&self, dst: &mut [u8], addr: u64) -> std::io::Result<usize> {
        self.0.read(dst, addr)
    }

    /// Appends `n` numbers read from the process's memory at `addr` to `out`, straight into
    /// its spare room, which is not zeroed first (for large reads that would cost as much as
    /// a good part of the read). The room is reserved fallibly: `n` beyond what this process
    /// can allocate is an error, not an abort.
    pub fn read_append<T: crate::Primitive>(
        &self,
        out: &mut Vec<T>,
        n: usize,
        addr: u64,
    ) -> std::io::Result<()> {
        self.append(out, n, addr, true)
    }

    /// [`read_append`](PeerMemory::read_append) without the look, after the read, at whether
    /// the process had exited meanwhile (a system call, some 0.4 us here). The numbers are
    /// the process's only if the caller learns afterwards, from something the process did
    /// after the read ended (an acknowledgement it wrote once it had seen the caller's), that
    /// it had not exited then: its pid may since name another process.
    pub fn read_append_unconfirmed<T: crate::Primitive>(
        &self,
        out: &mut Vec<T>,
        n: usize,
        addr: u64,
    ) -> std::io::Result<()> {
        self.append(out, n, addr, false)
    }

    fn append<T: crate::Primitive>(
        &self,
        out: &mut Vec<T>,
        n: usize,
        addr: u64,
        confirm: bool,
    ) -> std::io::Result<()> {
        let len = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| std::io::Error::other(format!("{n} numbers overflow a length")))?;
        out.try_reserve_exact(n)
            .map_err(|e| std::io::Error::other(format!("room for {n} numbers: {e}")))?;
        let dst: *mut u8 = out.spare_capacity_mut().as_mut_ptr().cast();
        // SAFETY: the spare room holds at least `n` numbers, `len` bytes, from `dst`.
        unsafe { self.fill(dst, len, addr, confirm)? };
        // SAFETY: the kernel wrote all `len` bytes of the first `n` spare numbers, and every
        // bit pattern is a valid number (`Primitive: Pod`); the room was reserved above.
        unsafe { out.set_len(out.len() + n) };
        Ok(())
    }

    /// Reads exactly `dst.len()` bytes of the process's memory at `addr`.
    pub fn read_exact(&self, dst: &mut [u8], addr: u64) -> std::io::Result<()> {
        // SAFETY: `dst` is writable for its length.
        unsafe { self.fill(dst.as_mut_ptr(), dst.len(), addr, true) }
    }

    /// [`read_exact`](PeerMemory::read_exact) without the look at whether the process had
    /// exited, as [`read_append_unconfirmed`](PeerMemory::read_append_unconfirmed).
    pub fn read_exact_unconfirmed(&self, dst: &mut [u8], addr: u64) -> std::io::Result<()> {
        // SAFETY: `dst` is writable for its length.
        unsafe { self.fill(dst.as_mut_ptr(), dst.len(), addr, false) }
    }

    /// Fills `len` bytes at `dst` from the process's memory at `addr`, looking at whether it
    /// had exited after each read when `confirm` says so.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    unsafe fn fill(
        &self,
        dst: *mut u8,
        len: usize,
        addr: u64,
        confirm: bool,
    ) -> std::io::Result<()> {
        let mut done = 0;
        while done < len {
            let (at, from) = (dst.wrapping_add(done), addr.wrapping_add(done as u64));
            // SAFETY: `at` is within the `len` bytes the caller vouches for, `len - done` of
            // them left.
            let got = unsafe {
                if confirm {
                    self.0.read_raw(at, len - done, from)?
                } else {
                    self.0.read_raw_unconfirmed(at, len - done, from)?
                }
            };
            if got == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{done} of {len} bytes of the peer's memory"),
                ));
            }
            done += got;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::PeerMemory;

    #[test]
    fn a_process_reads_its_own_memory_through_the_kernel_after_its_probe() {
        let (addr, probe) = PeerMemory::probe();
        let Some(me) = PeerMemory::open(std::process::id() as i32, addr, &probe) else {
            // Reading a process's memory is not allowed here (ptrace rules): a facility CI
            // must have.
            assert!(!testkit::netns::required(), "no process_vm_readv");
            return;
        };
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut got = vec![0u8; data.len()];
        me.read_exact(&mut got, data.as_ptr() as u64).expect("read");
        assert_eq!(got, data);
        let mut numbers: Vec<u32> = vec![7];
        me.read_append(&mut numbers, 3, data.as_ptr() as u64)
            .expect("append");
        let want: Vec<u32> = (0..3u8)
            .map(|i| u32::from_ne_bytes([4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3]))
            .collect();
        assert_eq!(numbers[1..], want[..]);
        // The unconfirmed reads give the same bytes.
        let mut again = vec![0u8; data.len()];
        me.read_exact_unconfirmed(&mut again, data.as_ptr() as u64)
            .expect("unconfirmed read");
        assert_eq!(again, data);
        let mut more: Vec<u32> = vec![7];
        me.read_append_unconfirmed(&mut more, 3, data.as_ptr() as u64)
            .expect("unconfirmed append");
        assert_eq!(more, numbers);
        // Memory the process does not have is an error either way.
        assert!(me.read_exact_unconfirmed(&mut again, 8).is_err());
        assert!(me.read_append_unconfirmed(&mut more, 2, 8).is_err());
        assert_eq!(more, numbers, "nothing appended on an error");
        let wrong = [0u8; 16];
        assert!(PeerMemory::open(std::process::id() as i32, addr, &wrong).is_none());
    }
}
