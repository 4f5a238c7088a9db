//! Memory shared by two processes: a sealed memfd, mapped by both.
//!
//! The receiving side creates the memory and seals its size before it hands the descriptor to
//! the sender, so that neither side can shrink it under the other (touching a page past the end
//! of a shrunk file would kill the process with SIGBUS); the sender checks the seals before it
//! maps anything.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Seals that fix the size of a memfd for good.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd named `name` of `len` zero bytes, its size sealed for good, closed on exec.
pub(crate) fn sealed_memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::other(format!("no memory file of {len} bytes")))?;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate and fcntl on a descriptor we own, with plain integer arguments.
    unsafe {
        if libc::ftruncate(fd.as_raw_fd(), len) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SIZE_SEALS) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// Whether `fd` is a memfd whose size is sealed for good (false for any other file).
pub(crate) fn size_sealed(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: fcntl(F_GET_SEALS) on a descriptor borrowed for the call; returns the seals or
    // -1 (for a file that takes no seals).
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SIZE_SEALS == SIZE_SEALS
}

/// A shared mapping of a sealed memfd; unmapped when dropped.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// Under Miri, which cannot map a memfd, the tests' two sides share a heap block instead
    /// (see [`Mapping::private_pair`]); it is freed with the last of them.
    #[cfg(miri)]
    heap: Option<std::sync::Arc<HeapBlock>>,
}

/// Page-aligned zeroed heap memory, freed on drop (Miri only).
#[cfg(miri)]
pub(crate) struct HeapBlock {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: plain memory reached only through raw pointers (atomics and volatile copies), as a
// mapping is.
#[cfg(miri)]
unsafe impl Send for HeapBlock {}
// SAFETY: as above.
#[cfg(miri)]
unsafe impl Sync for HeapBlock {}

#[cfg(miri)]
impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `private_pair` with this layout, and freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: the mapping is plain memory; all access goes through raw pointers into it (atomics
// and volatile copies), which any thread may use.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` hands out only raw pointers and atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates `len` bytes of zeroed shared memory with its size sealed; returns the mapping
    /// and the descriptor to hand to the other side.
    pub(crate) fn create(len: usize) -> io::Result<(Mapping, OwnedFd)> {
        let fd = sealed_memfd(c"ipl-shm", len)?;
        let m = Mapping::map(&fd, len)?;
        Ok((m, fd))
    }

    /// Maps memory the other side created, after checking that it is a memfd of exactly `len`
    /// bytes whose size is sealed.
    pub(crate) fn open(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        if !size_sealed(fd.as_fd()) {
            return Err(bad("the shared memory's size is not sealed".into()));
        }
        // SAFETY: fstat fills the zeroed stat we pass.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_size as u64 != len as u64 {
            return Err(bad(format!(
                "the shared memory has {} bytes, not {len}",
                st.st_size
            )));
        }
        Mapping::map(fd, len)
    }

    fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a new shared mapping of `len` bytes of a file of at least that size (created
        // or checked by the callers); the kernel picks the address. MAP_POPULATE faults the
        // pages in now rather than on the hot path.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            #[cfg(miri)]
            heap: None,
        })
    }

    /// Two views of `len` bytes of zeroed memory shared by the two sides of a test, for Miri,
    /// which cannot map a memfd: the same layout and alignment, on the heap.
    #[cfg(miri)]
    // Only the unit tests make pairs; a Miri build of another crate's tests compiles this
    // library without them.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn private_pair(len: usize) -> (Mapping, Mapping) {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a page-aligned layout");
        // SAFETY: the layout's size is not zero (rings are at least a page).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        let heap = std::sync::Arc::new(HeapBlock { ptr, layout });
        let view = || Mapping {
            ptr,
            len,
            heap: Some(heap.clone()),
        };
        (view(), view())
    }

    /// The start of the mapping (page-aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(miri)]
        if self.heap.is_some() {
            return;
        }
        // SAFETY: unmaps exactly the region `map` mapped; nothing refers to it any more (the
        // atomics and pointers handed out borrow `self`).
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// What the bulk of a copy moves per volatile access: a vector register where every CPU of
/// the target has one (SSE2 on x86-64), a word elsewhere. Four go per loop turn; volatile
/// accesses are neither merged nor widened by the compiler, and word by word a copy of 64 KiB
/// took several times as long as a plain one.
#[cfg(target_arch = "x86_64")]
type Block = std::arch::x86_64::__m128i;
#[cfg(not(target_arch = "x86_64"))]
type Block = u64;
const BLOCK: usize = std::mem::size_of::<Block>();

/// Copies `dst.len()` bytes from shared memory at `src` into private memory.
///
/// The other side may write the same bytes at any time (a peer that misbehaves, or one that crashed
/// half-way): volatile reads make that change only the bytes we get, never the meaning of our
/// program. Memory is read in whole aligned words or blocks of them; the bytes of the first and
/// last word outside the range are read and dropped.
///
/// # Safety
/// Every aligned 8-byte word that overlaps `src..src + dst.len()` must lie inside a live
/// mapping.
pub(crate) unsafe fn copy_in(dst: &mut [u8], src: *const u8) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let off = src as usize % 8;
    let mut i = 0;
    // SAFETY: every read is of an aligned word overlapping the range, which the caller vouches
    // for; every write is within `dst`.
    unsafe {
        if off != 0 {
            let w = std::ptr::read_volatile(src.sub(off) as *const u64).to_ne_bytes();
            let k = (8 - off).min(n);
            dst[..k].copy_from_slice(&w[off..off + k]);
            i = k;
        }
        let d = dst.as_mut_ptr();
        while i + 8 <= n && (src as usize + i) % BLOCK != 0 {
            let w = std::ptr::read_volatile(src.add(i) as *const u64);
            std::ptr::write_unaligned(d.add(i) as *mut u64, w);
            i += 8;
        }
        while i + 4 * BLOCK <= n {
            let s = src.add(i) as *const Block;
            let w = [
                std::ptr::read_volatile(s),
                std::ptr::read_volatile(s.add(1)),
                std::ptr::read_volatile(s.add(2)),
                std::ptr::read_volatile(s.add(3)),
            ];
            std::ptr::write_unaligned(d.add(i) as *mut [Block; 4], w);
            i += 4 * BLOCK;
        }
        while i + 8 <= n {
            let w = std::ptr::read_volatile(src.add(i) as *const u64);
            std::ptr::write_unaligned(d.add(i) as *mut u64, w);
            i += 8;
        }
        if i < n {
            let w = std::ptr::read_volatile(src.add(i) as *const u64).to_ne_bytes();
            dst[i..].copy_from_slice(&w[..n - i]);
        }
    }
}

/// Copies `src` into shared memory at `dst` with volatile writes of whole aligned words (see
/// [`copy_in`]): few stores, so that a reader waiting on the same line takes it away as
/// seldom as may be. The bytes of the first and last word outside the range are written back
/// as they were read: only the writer writes this memory, and a reader finds them unchanged.
///
/// # Safety
/// Every aligned 8-byte word that overlaps `dst..dst + src.len()` must lie inside a live
/// mapping that only this side writes.
pub(crate) unsafe fn copy_out(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    if n == 0 {
        return;
    }
    let off = dst as usize % 8;
    let mut i = 0;
    // SAFETY: every access is of an aligned word overlapping the range, which the caller
    // vouches for; every read of `src` is within its length.
    unsafe {
        if off != 0 {
            let p = dst.sub(off) as *mut u64;
            let mut w = std::ptr::read_volatile(p).to_ne_bytes();
            let k = (8 - off).min(n);
            w[off..off + k].copy_from_slice(&src[..k]);
            std::ptr::write_volatile(p, u64::from_ne_bytes(w));
            i = k;
        }
        let s = src.as_ptr();
        while i + 8 <= n && (dst as usize + i) % BLOCK != 0 {
            let w = std::ptr::read_unaligned(s.add(i) as *const u64);
            std::ptr::write_volatile(dst.add(i) as *mut u64, w);
            i += 8;
        }
        while i + 4 * BLOCK <= n {
            let w = std::ptr::read_unaligned(s.add(i) as *const [Block; 4]);
            let d = dst.add(i) as *mut Block;
            std::ptr::write_volatile(d, w[0]);
            std::ptr::write_volatile(d.add(1), w[1]);
            std::ptr::write_volatile(d.add(2), w[2]);
            std::ptr::write_volatile(d.add(3), w[3]);
            i += 4 * BLOCK;
        }
        while i + 8 <= n {
            let w = std::ptr::read_unaligned(s.add(i) as *const u64);
            std::ptr::write_volatile(dst.add(i) as *mut u64, w);
            i += 8;
        }
        if i < n {
            let p = dst.add(i) as *mut u64;
            let mut w = std::ptr::read_volatile(p).to_ne_bytes();
            w[..n - i].copy_from_slice(&src[i..]);
            std::ptr::write_volatile(p, u64::from_ne_bytes(w));
        }
    }
}

/// Copies `src` into shared memory at `dst` as [`copy_out`] does, but writes the whole
/// 64-byte lines of the range with non-temporal stores, which go to memory without first
/// taking the lines into this processor's cache. For large copies into memory that another
/// processor reads, and has read before: an ordinary store must first take each line back
/// from that processor's cache, one round trip between them per line, which made a copy of
/// 64 KiB into lines a reader held take five times as long as the same copy by non-temporal
/// stores (and the reader then takes the lines from memory). Ends with a store fence, so that
/// a release store after it (the count a reader waits for) is seen after the bytes. Small
/// copies, whose reader wants them in a cache, should use [`copy_out`].
///
/// # Safety
/// As [`copy_out`]: every aligned 8-byte word that overlaps `dst..dst + src.len()` must lie
/// inside a live mapping that only this side writes.
pub(crate) unsafe fn copy_out_streaming(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's promise, which `copy_out` needs for the edges and `copy_streaming`
    // for the whole range.
    unsafe { copy_streaming(dst, src, copy_out) }
}

/// Copies `src` to `dst`, writing the whole 64-byte lines of the range with non-temporal
/// stores (on x86-64) and the bytes before and after them, or the whole of a copy too short to
/// hold a line, with `edges`; ends with a store fence, so that a release store after it is seen
/// after the bytes. Elsewhere it is `edges` for the whole range. [`copy_out_streaming`] copies
/// into shared memory with it; the mpi driver's sink into its own piece buffers.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes that nothing else makes or reads meanwhile
/// in this process, and `edges` must be safe to call for every part of the range with the
/// matching part of `src`.
pub(crate) unsafe fn copy_streaming(dst: *mut u8, src: &[u8], edges: unsafe fn(*mut u8, &[u8])) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::_mm_sfence;
        let n = src.len();
        let head = (LINE - dst as usize % LINE) % LINE;
        if n < head + LINE {
            // SAFETY: the caller's promise, passed on.
            unsafe { edges(dst, src) };
            return;
        }
        let lines = (n - head) / LINE;
        let body = head + lines * LINE;
        // SAFETY: the head and the tail are parts of the caller's range, for which it vouches
        // `edges`; the body is whole, 64-byte aligned lines of that range, which nothing else
        // writes or reads meanwhile.
        unsafe {
            edges(dst, &src[..head]);
            stream_lines(dst.add(head), &src[head..body]);
            _mm_sfence();
            edges(dst.add(body), &src[body..]);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's promise, passed on.
    unsafe {
        edges(dst, src)
    }
}

/// A cache line, the unit of [`stream_lines`].
#[cfg(all(target_arch = "x86_64", not(miri)))]
const LINE: usize = 64;

/// Writes `src`, whole lines of [`LINE`] bytes, to `dst` with non-temporal stores, which go
/// to memory without taking the lines into this processor's cache (see
/// [`copy_out_streaming`]). No fence: the caller ends its copy with `_mm_sfence` before it
/// tells anyone that the bytes are there.
///
/// # Safety
/// `dst` must be aligned to [`LINE`], and its `src.len()` bytes, a multiple of [`LINE`], valid
/// for writes that nothing else makes or reads meanwhile in this process.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
unsafe fn stream_lines(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    debug_assert!(dst as usize % LINE == 0 && src.len() % LINE == 0);
    let s = src.as_ptr();
    let mut i = 0;
    while i < src.len() {
        // SAFETY: `_mm_loadu_si128` reads within `src` (`i + LINE <= src.len()`), and each
        // line written is a whole, aligned line of the caller's range. SSE2, which these
        // intrinsics need, is part of every x86-64 processor.
        unsafe {
            let d = dst.add(i).cast::<__m128i>();
            let at = |k: usize| _mm_loadu_si128(s.add(i + 16 * k).cast::<__m128i>());
            let (a, b, c, e) = (at(0), at(1), at(2), at(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += LINE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared mapping of 4096 bytes, and what keeps it valid.
    fn mapping() -> (Mapping, Box<dyn std::any::Any>) {
        #[cfg(not(miri))]
        {
            let (map, fd) = Mapping::create(4096).expect("shared memory");
            (map, Box::new(fd))
        }
        // Miri cannot map a memfd: a heap page, whose accesses Miri checks one by one.
        #[cfg(miri)]
        {
            let (map, other) = Mapping::private_pair(4096);
            (map, Box::new(other))
        }
    }

    /// Puts `pattern` in the 4096 bytes at `shared`, writes `len` fresh bytes at `off` with
    /// `copy`, and checks that they land there and that the bytes around them keep `pattern`.
    fn check_out(
        shared: *mut u8,
        pattern: &[u8],
        (off, len): (usize, usize),
        copy: unsafe fn(*mut u8, &[u8]),
    ) {
        let src: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0x5a).collect();
        // SAFETY: `shared` is a live mapping of 4096 bytes, written by this side only, and
        // `off + len` stays inside it.
        unsafe {
            copy_out(shared, pattern);
            copy(shared.add(off), &src);
        }
        let mut back = vec![0u8; 4096];
        // SAFETY: the whole mapping, read back.
        unsafe { copy_in(&mut back, shared) };
        assert_eq!(&back[off..off + len], &src[..], "out at {off}, {len}");
        assert_eq!(&back[..off], &pattern[..off], "before {off}, {len}");
        assert_eq!(
            &back[off + len..],
            &pattern[off + len..],
            "after {off}, {len}"
        );
    }

    /// Every start offset within a block and every length up to a few loop turns, both ways,
    /// against a plain copy; the bytes around the range stay as they were.
    #[test]
    fn copies_at_every_alignment_and_length_match_a_plain_copy() {
        let (map, _keep) = mapping();
        let shared = map.ptr();
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        let short = if cfg!(miri) { 0..40 } else { 0..200 };
        for off in 0..2 * BLOCK {
            for len in short.clone().chain([511, 512, 513, 1000, 2048 + 3]) {
                // In: from shared memory holding `pattern` into private memory.
                // SAFETY: `shared` is a live mapping of 4096 bytes, written by this side only.
                unsafe { copy_out(shared, &pattern) };
                let mut dst = vec![0xeeu8; len + 16];
                // SAFETY: `off + len` plus the word around it lies inside the 4096 bytes.
                unsafe { copy_in(&mut dst[8..8 + len], shared.add(off)) };
                assert_eq!(
                    &dst[8..8 + len],
                    &pattern[off..off + len],
                    "in at {off}, {len}"
                );
                assert!(dst[..8].iter().chain(&dst[8 + len..]).all(|&b| b == 0xee));
                // Out: a fresh pattern into shared memory at `off`; the rest keeps `pattern`.
                check_out(shared, &pattern, (off, len), copy_out);
            }
        }
    }

    /// The streaming copy at every start offset within a line and lengths around the lines
    /// it streams: the bytes land as a plain copy puts them, and the bytes around the range
    /// stay as they were.
    #[test]
    fn streaming_copies_at_every_alignment_and_length_match_a_plain_copy() {
        let (map, _keep) = mapping();
        let shared = map.ptr();
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
        let lens: Vec<usize> = if cfg!(miri) {
            vec![0, 1, 63, 64, 65, 130]
        } else {
            (0..260)
                .chain([511, 512, 513, 1000, 2048 + 3, 3000])
                .collect()
        };
        for off in 0..64 + 2 * BLOCK {
            for &len in &lens {
                check_out(shared, &pattern, (off, len), copy_out_streaming);
            }
        }
    }
}
