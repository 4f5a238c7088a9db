//! Memory for job records, recycled per worker thread.
//!
//! Every spawn needs one record. Going to the global allocator for each costs more than the
//! rest of a spawn together, so each worker keeps free lists of blocks in a few size classes.
//! A block of a class always has the same layout, so any thread may return it to its own list
//! or to the global allocator.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::ptr::{self, NonNull};

/// Block sizes of the pooled classes; records larger than the last go to the global allocator.
const CLASS_SIZES: [usize; 6] = [64, 128, 256, 512, 1024, 2048];
/// Blocks are cache-line aligned so that records written by different workers never share a line.
const BLOCK_ALIGN: usize = 64;
/// Marks a record that is not pooled.
pub(crate) const UNPOOLED: u8 = u8::MAX;
/// Free blocks kept per class per thread; more are returned to the global allocator, so a thread
/// that frees many records allocated elsewhere does not hoard memory.
const MAX_FREE: usize = 4096;

/// The class and allocation layout for a record of the given size and alignment.
pub(crate) const fn block_for(size: usize, align: usize) -> (u8, Layout) {
    if align <= BLOCK_ALIGN {
        let mut class = 0;
        while class < CLASS_SIZES.len() {
            if size <= CLASS_SIZES[class] {
                return match Layout::from_size_align(CLASS_SIZES[class], BLOCK_ALIGN) {
                    Ok(layout) => (class as u8, layout),
                    Err(_) => panic!("invalid block layout"),
                };
            }
            class += 1;
        }
    }
    match Layout::from_size_align(size, align) {
        Ok(layout) => (UNPOOLED, layout),
        Err(_) => panic!("invalid record layout"),
    }
}

/// Free lists of one thread.
pub(crate) struct Recycler {
    free: [Vec<NonNull<u8>>; CLASS_SIZES.len()],
}

thread_local! {
    /// The recycler of the worker running on this thread, or null on other threads.
    /// A raw pointer keeps the access a single load: no lazy initialisation, no destructor.
    static CURRENT: Cell<*mut Recycler> = const { Cell::new(ptr::null_mut()) };
}

impl Recycler {
    pub(crate) fn new() -> Self {
        Recycler {
            free: Default::default(),
        }
    }

    /// Makes `self` the recycler that [`release`] uses on this thread until [`Recycler::uninstall`].
    ///
    /// # Safety
    /// `self` must stay in place and alive until `uninstall` is called on this thread.
    pub(crate) unsafe fn install(&mut self) {
        CURRENT.with(|c| c.set(self));
    }

    pub(crate) fn uninstall() {
        CURRENT.with(|c| c.set(ptr::null_mut()));
    }

    #[inline]
    pub(crate) fn alloc(&mut self, class: u8, layout: Layout) -> NonNull<u8> {
        if let Some(list) = self.free.get_mut(class as usize) {
            if let Some(block) = list.pop() {
                return block;
            }
        }
        fresh(layout)
    }

    #[inline]
    fn put(&mut self, block: NonNull<u8>, class: u8, layout: Layout) {
        match self.free.get_mut(class as usize) {
            Some(list) if list.len() < MAX_FREE => list.push(block),
            // SAFETY: blocks of a class (and unpooled records) were allocated with `layout`.
            _ => unsafe { dealloc(block.as_ptr(), layout) },
        }
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        for (class, list) in self.free.iter_mut().enumerate() {
            let (_, layout) = block_for(CLASS_SIZES[class], BLOCK_ALIGN);
            for block in list.drain(..) {
                // SAFETY: every block in list `class` was allocated with that class's layout.
                unsafe { dealloc(block.as_ptr(), layout) };
            }
        }
    }
}

/// A block from the global allocator.
pub(crate) fn fresh(layout: Layout) -> NonNull<u8> {
    // SAFETY: every record layout has a non-zero size (the record header alone is not empty).
    let p = unsafe { alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Returns a block to this thread's recycler, or to the global allocator on a thread without one.
///
/// # Safety
/// `block` must have been allocated for `class` with `layout` and must not be used afterwards.
#[inline]
pub(crate) unsafe fn release(block: NonNull<u8>, class: u8, layout: Layout) {
    let current = CURRENT.with(|c| c.get());
    if current.is_null() {
        dealloc(block.as_ptr(), layout);
    } else {
        (*current).put(block, class, layout);
    }
}
