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

/// Free lists of one thread, one intrusive singly linked list per class: taking and returning
/// a block is two loads and a store, with no length to keep. A list grows to the largest number
/// of records that were alive at once on this thread, and no further.
pub(crate) struct Recycler {
    heads: [*mut FreeBlock; CLASS_SIZES.len()],
}

/// A free block's first word links to the next free block of its class.
struct FreeBlock {
    next: *mut FreeBlock,
}

thread_local! {
    /// The recycler of the worker running on this thread, or null on other threads.
    /// A raw pointer keeps the access a single load: no lazy initialisation, no destructor.
    static CURRENT: Cell<*mut Recycler> = const { Cell::new(ptr::null_mut()) };
}

impl Recycler {
    pub(crate) fn new() -> Self {
        Recycler {
            heads: [ptr::null_mut(); CLASS_SIZES.len()],
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

    /// A block of `class` (allocated with `layout` if the list is empty).
    #[inline(always)]
    pub(crate) fn alloc(&mut self, class: u8, layout: Layout) -> NonNull<u8> {
        if let Some(head) = self.heads.get_mut(class as usize) {
            if let Some(block) = NonNull::new(*head) {
                // SAFETY: blocks on the list are free and start with their link.
                *head = unsafe { block.as_ref().next };
                return block.cast();
            }
        }
        fresh(layout)
    }

    /// # Safety
    /// `block` must be a free block of the pooled `class`.
    #[inline(always)]
    unsafe fn put(&mut self, block: NonNull<u8>, class: u8) {
        let head = self.heads.get_unchecked_mut(class as usize);
        let block = block.cast::<FreeBlock>().as_ptr();
        (*block).next = *head;
        *head = block;
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        for (class, head) in self.heads.iter().enumerate() {
            let layout = class_layout(class as u8);
            let mut block = *head;
            while !block.is_null() {
                // SAFETY: every block on list `class` is free and was allocated with its layout.
                unsafe {
                    let next = (*block).next;
                    dealloc(block.cast(), layout);
                    block = next;
                }
            }
        }
    }
}

fn class_layout(class: u8) -> Layout {
    block_for(CLASS_SIZES[class as usize], BLOCK_ALIGN).1
}

/// A block from the global allocator.
pub(crate) fn fresh(layout: Layout) -> NonNull<u8> {
    // SAFETY: every record layout has a non-zero size (the record header alone is not empty).
    let p = unsafe { alloc(layout) };
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Returns a block of a pooled class to this thread's recycler, or to the global allocator on
/// a thread without one.
///
/// # Safety
/// `block` must have been allocated for the pooled `class` and must not be used afterwards.
#[inline(always)]
pub(crate) unsafe fn release(block: NonNull<u8>, class: u8) {
    let current = CURRENT.with(|c| c.get());
    if current.is_null() {
        dealloc(block.as_ptr(), class_layout(class));
    } else {
        (*current).put(block, class);
    }
}
