//! Memory for job records: a stack per worker, released a frame at a time.
//!
//! The records a task's spawns create are needed until the task ends and no longer: its sync
//! waits for every child, wherever it runs, and a handle cannot outlive the task (see
//! [`Handle`](crate::Handle)). Tasks on one thread nest like calls, so the records of all
//! frames on a worker form a stack: a spawn takes the next bytes (a bump of the top), and a
//! frame, when it ends, sets the top back to where it was when the frame began (its *mark*).
//! No record is freed one by one, and a spawn touches no free list.
//!
//! The stack is made of chunks, so that it can grow without moving records that other threads
//! may be reading (a stolen job's record stays in its owner's arena while a thief runs it).
//! Chunks double in size from 64 KiB and are kept for reuse, so the memory held is at most
//! about twice the largest number of records that were alive at once on this worker; it is
//! returned when the worker has been idle for a while.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::{Cell, UnsafeCell};
use std::ptr::{self, NonNull};

/// Alignment of every record: a cache line, so that records written by different workers
/// (an owner spawning, a thief finishing a stolen job) never share one.
pub(crate) const ALIGN: usize = 64;
/// Size of the first chunk; each further chunk is twice as large as the one before.
const FIRST_CHUNK: usize = 64 << 10;
/// Chunks stop doubling at this size (records larger than it get a chunk of their own size).
const MAX_CHUNK: usize = 64 << 20;
/// Chunks kept when the worker idles.
const KEEP_WHEN_IDLE: usize = 2;

/// The size a record of `size` bytes and alignment `align` takes in the arena, and whether it
/// fits the arena's alignment (records aligned more strictly are boxed instead).
pub(crate) const fn footprint(size: usize, align: usize) -> Option<usize> {
    if align > ALIGN {
        return None;
    }
    Some(size.div_ceil(ALIGN) * ALIGN)
}

/// Where the top of an arena was: the address `top` in the chunk that ends at `end`.
///
/// The top is kept as an address and given back the chunk's provenance (that of `end`) on
/// release: marks are made from frames, through shared references, and a pointer derived
/// from one must never be written through, as the arena writes the next records at its top.
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    top: usize,
    end: *mut u8,
}

pub(crate) struct Arena {
    top: Cell<*mut u8>,
    /// End of the chunk `top` is in.
    end: Cell<*mut u8>,
    /// Every chunk, in the order they are used.
    chunks: UnsafeCell<Vec<Chunk>>,
}

struct Chunk {
    start: NonNull<u8>,
    size: usize,
}

impl Chunk {
    fn end(&self) -> *mut u8 {
        self.start.as_ptr().wrapping_add(self.size)
    }

    fn layout(size: usize) -> Layout {
        match Layout::from_size_align(size, ALIGN) {
            Ok(l) => l,
            Err(_) => panic!("a record of {size} bytes is larger than any allocation can be"),
        }
    }
}

impl Mark {
    /// The mark of the address of `top` in the chunk that ends at `end` (a pointer the arena
    /// handed out, with the chunk's provenance).
    pub(crate) fn at(top: *const u8, end: *mut u8) -> Mark {
        Mark {
            top: top as usize,
            end,
        }
    }
}

impl Arena {
    pub(crate) fn new() -> Self {
        Arena {
            top: Cell::new(ptr::null_mut()),
            end: Cell::new(ptr::null_mut()),
            chunks: UnsafeCell::new(Vec::new()),
        }
    }

    /// The current top, to release back to with [`release`](Arena::release).
    #[cfg(test)]
    pub(crate) fn mark(&self) -> Mark {
        Mark::at(self.top.get(), self.end.get())
    }

    /// The end of the chunk the top is in: with the address of something allocated in that
    /// chunk, the mark of the top just before it.
    #[inline(always)]
    pub(crate) fn chunk_end(&self) -> *mut u8 {
        self.end.get()
    }

    /// Releases everything allocated since `mark` was taken. Marks are released in the
    /// reverse order of taking them (frames nest).
    #[inline(always)]
    pub(crate) fn release(&self, mark: Mark) {
        // The chunk's provenance at the mark's address, which lies in the chunk (or both are
        // null, before the first chunk).
        self.top.set(
            mark.end
                .wrapping_sub((mark.end as usize).wrapping_sub(mark.top)),
        );
        self.end.set(mark.end);
    }

    /// `size` bytes (a multiple of [`ALIGN`], from [`footprint`]) aligned to [`ALIGN`], valid
    /// until the arena is released to a mark taken before this call.
    #[inline(always)]
    pub(crate) fn alloc(&self, size: usize) -> NonNull<u8> {
        let top = self.top.get();
        if (self.end.get() as usize).wrapping_sub(top as usize) >= size {
            self.top.set(top.wrapping_add(size));
            // SAFETY: `top` and `end` are null together (no chunk yet), and `size` is not zero,
            // so there is room only in a chunk, whose addresses are not null.
            return unsafe { NonNull::new_unchecked(top) };
        }
        self.alloc_in_next_chunk(size)
    }

    /// [`alloc`](Arena::alloc) if the current chunk has room, without ever calling out.
    #[inline(always)]
    pub(crate) fn try_alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let top = self.top.get();
        if (self.end.get() as usize).wrapping_sub(top as usize) >= size {
            self.top.set(top.wrapping_add(size));
            // SAFETY: as in `alloc`.
            return Some(unsafe { NonNull::new_unchecked(top) });
        }
        None
    }

    /// Moves the top to the start of the chunk after the current one (making one that can
    /// hold `size` bytes if needed) and allocates there.
    #[cold]
    #[inline(never)]
    fn alloc_in_next_chunk(&self, size: usize) -> NonNull<u8> {
        // SAFETY: only the owning thread uses the arena, and nothing else borrows the list.
        let chunks = unsafe { &mut *self.chunks.get() };
        let end = self.end.get();
        // The chunk after the current one; the first one if none is in use yet.
        let next = if end.is_null() {
            0
        } else {
            chunks
                .iter()
                .rposition(|c| c.end() == end)
                .map_or(0, |i| i + 1)
        };
        if chunks.get(next).is_some_and(|c| c.size < size) {
            // Too small for this record: chunks after the current one are unused.
            for c in chunks.drain(next..) {
                // SAFETY: allocated with this layout, and unused.
                unsafe { dealloc(c.start.as_ptr(), Chunk::layout(c.size)) };
            }
        }
        if next == chunks.len() {
            let size = (FIRST_CHUNK << next.min(10))
                .clamp(FIRST_CHUNK, MAX_CHUNK)
                .max(size);
            let layout = Chunk::layout(size);
            // SAFETY: the layout's size is not zero.
            let p = unsafe { alloc(layout) };
            let start = NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout));
            chunks.push(Chunk { start, size });
        }
        let chunk = &chunks[next];
        self.top.set(chunk.start.as_ptr().wrapping_add(size));
        self.end.set(chunk.end());
        chunk.start
    }

    /// Returns all chunks but the first few to the allocator. Only for a worker with no frame
    /// on its stack, when nothing is allocated.
    pub(crate) fn trim(&self) {
        // SAFETY: as in `alloc_in_next_chunk`.
        let chunks = unsafe { &mut *self.chunks.get() };
        if chunks.len() <= KEEP_WHEN_IDLE {
            return;
        }
        for c in chunks.drain(KEEP_WHEN_IDLE..) {
            // SAFETY: allocated with this layout; nothing is allocated in it.
            unsafe { dealloc(c.start.as_ptr(), Chunk::layout(c.size)) };
        }
        // Start again at the beginning of the first chunk.
        self.top.set(ptr::null_mut());
        self.end.set(ptr::null_mut());
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for c in self.chunks.get_mut().drain(..) {
            // SAFETY: allocated with this layout; the worker is gone, so nothing is in use.
            unsafe { dealloc(c.start.as_ptr(), Chunk::layout(c.size)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_nest_and_chunks_are_reused() {
        let a = Arena::new();
        let m0 = a.mark();
        let first = a.alloc(64);
        let second = a.alloc(128);
        assert_eq!(second.as_ptr() as usize - first.as_ptr() as usize, 64);
        let m1 = a.mark();
        // Fill past the first chunk: the top moves to a second one.
        let mut last = a.alloc(64);
        for _ in 0..(FIRST_CHUNK / 64) {
            last = a.alloc(64);
        }
        // SAFETY: test-only look at the chunk list.
        assert_eq!(unsafe { (*a.chunks.get()).len() }, 2);
        assert!(last.as_ptr() as usize % ALIGN == 0);
        a.release(m1);
        assert_eq!(
            a.alloc(64).as_ptr() as usize,
            second.as_ptr() as usize + 128
        );
        a.release(m0);
        // The first chunk is used again from its start, and so is the second.
        assert_eq!(a.alloc(64), first);
        for _ in 0..(FIRST_CHUNK / 64) {
            a.alloc(64);
        }
        // SAFETY: as above.
        assert_eq!(unsafe { (*a.chunks.get()).len() }, 2);
    }

    #[test]
    fn a_record_larger_than_a_chunk_gets_its_own() {
        let a = Arena::new();
        let m = a.mark();
        let small = a.alloc(64);
        let big = a.alloc(4 * FIRST_CHUNK);
        // SAFETY: test-only writes to the memory just allocated.
        unsafe { big.as_ptr().write_bytes(7, 4 * FIRST_CHUNK) };
        let after = a.alloc(64);
        assert_ne!(after, small);
        a.release(m);
        assert_eq!(a.alloc(64), small);
    }

    #[test]
    fn trimming_keeps_the_first_chunks() {
        let a = Arena::new();
        let m = a.mark();
        for _ in 0..(8 * FIRST_CHUNK / 64) {
            a.alloc(64);
        }
        a.release(m);
        a.trim();
        // SAFETY: as above.
        assert_eq!(unsafe { (*a.chunks.get()).len() }, KEEP_WHEN_IDLE);
        a.alloc(64);
    }
}
