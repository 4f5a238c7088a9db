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
