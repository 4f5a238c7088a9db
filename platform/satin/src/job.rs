//! Job records: one block per spawn (recycled per worker, see `recycle`) holding the task,
//! later its output, the bookkeeping of the task's own children while it runs, and the link
//! of the worker's private stack while the job waits there.

use std::alloc::Layout;
use std::any::TypeId;
use std::cell::{Cell, UnsafeCell};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::recycle;
use crate::root::RootState;
use crate::worker::Worker;
use crate::{Error, Task};

/// The job waits to run, or runs.
pub(crate) const PENDING: u8 = 0;
/// The output is in the record.
pub(crate) const DONE: u8 = 1;
/// The job was dropped unstarted or unwound because it was aborted; no output.
pub(crate) const ABORTED: u8 = 2;
/// The job panicked or failed remotely; the run it belongs to is failing; no output.
pub(crate) const FAILED: u8 = 3;
/// The handle was dropped while the job was pending; whoever finishes the job frees the record.
pub(crate) const ORPHANED: u8 = 4;

/// The type-independent part of every record. `#[repr(C)]` keeps it at offset 0 so a pointer
/// to the header is a pointer to the record.
#[repr(C)]
pub(crate) struct JobHeader {
    pub(crate) vtable: &'static JobVTable,
    /// Record of the task that spawned this one; null for a root. The parent cannot finish
    /// before all its children have, so the pointer stays valid while this job exists.
    pub(crate) parent: *const JobHeader,
    pub(crate) state: AtomicU8,
    /// Size class of the record's block, for freeing it.
    pub(crate) class: u8,
    /// Frames between this one and the nearest job taken from a deque by another frame or
    /// thread (a root, a stolen job): 0 for those, one more than the parent otherwise. Spawns
    /// of deep frames may run their child at once (see [`Inlining`](crate::Inlining)).
    pub(crate) depth: Cell<u16>,
    /// The parent's `abort_epoch` when this job was spawned; the job is aborted once they differ.
    pub(crate) spawn_epoch: u32,
    /// Worker the job was taken from, written by whoever takes it from another worker (or the
    /// injector) before running it: that worker waits for the job, so it is the one to wake.
    pub(crate) owner: Cell<u32>,
    /// Children of this task that left this thread's private stack other than by this task's
    /// own pops: published where thieves can take them, or run by an outer frame's wait. The
    /// task waits for exactly these at its sync. Only the thread running the task touches it.
    pub(crate) away: Cell<u32>,
    /// Of the children `away`, those finished by other threads or by outer frames (always
    /// through [`finish_elsewhere`](crate::worker::finish_elsewhere)).
    pub(crate) stolen_done: AtomicU32,
    /// Bumped by `Context::abort`, which cancels every child spawned before.
    pub(crate) abort_epoch: AtomicU32,
    /// The job below this one on its worker's private stack, while it is there; in a root,
    /// which never is, the run's shared state (the others find it through their root).
    pub(crate) link: Cell<Link>,
}

/// See [`JobHeader::link`].
#[derive(Clone, Copy)]
pub(crate) union Link {
    pub(crate) below: *const JobHeader,
    pub(crate) root: *const RootState,
}

impl Link {
    pub(crate) const NONE: Link = Link {
        below: std::ptr::null(),
    };
}

impl JobHeader {
    /// The header of a frame without a record, for a task run on its parent's stack (by
    /// `Context::call`, or by a spawn that runs its child at once; `vtable` is its type's):
    /// it carries the frame's bookkeeping and links to the caller's frame like any other.
    #[inline(always)]
    pub(crate) fn for_call(
        vtable: &'static JobVTable,
        parent: &JobHeader,
        spawn_epoch: u32,
    ) -> JobHeader {
        JobHeader {
            vtable,
            parent,
            state: AtomicU8::new(PENDING),
            class: recycle::UNPOOLED,
            depth: Cell::new(parent.depth.get().saturating_add(1)),
            spawn_epoch,
            owner: Cell::new(0),
            away: Cell::new(0),
            stolen_done: AtomicU32::new(0),
            abort_epoch: AtomicU32::new(0),
            link: Cell::new(Link::NONE),
        }
    }
}

/// Operations that depend on the task type, one static table per type.
pub(crate) struct JobVTable {
    pub(crate) run_inline: unsafe fn(JobRef, &Worker, u64),
    pub(crate) run_taken: unsafe fn(JobRef, &Worker, u64),
    /// Drops a task that never ran.
    pub(crate) discard: unsafe fn(JobRef),
    pub(crate) drop_output: unsafe fn(JobRef),
    /// Serializes the task; on success the task is dropped and the slot is empty.
    pub(crate) encode_task: unsafe fn(JobRef) -> Result<Vec<u8>, Error>,
    /// Decodes an output into the (empty) slot.
    pub(crate) decode_output: unsafe fn(JobRef, &[u8]) -> Result<(), Error>,
    pub(crate) type_id: fn() -> TypeId,
    pub(crate) task_name: fn() -> &'static str,
    /// Layout of the record's block.
    pub(crate) layout: Layout,
}

/// The table of a frame written lazily for a task run on its parent's stack (see
/// `Context::own_frame`). Such a frame is never queued, stolen, encoded or freed, and the guard
/// that reports a panic of its task names the type itself, so none of these entries is used.
pub(crate) static LAZY_FRAME_VTABLE: JobVTable = JobVTable {
    run_inline: lazy_frame_unused,
    run_taken: lazy_frame_unused,
    discard: lazy_frame_never_queued,
    drop_output: lazy_frame_never_queued,
    encode_task: lazy_frame_never_encoded,
    decode_output: lazy_frame_never_decoded,
    type_id: TypeId::of::<JobHeader>,
    task_name: || "(a task run within a spawn or call)",
    layout: Layout::new::<JobHeader>(),
};

unsafe fn lazy_frame_unused(_: JobRef, _: &Worker, _: u64) {
    unreachable!("a frame run on its parent's stack is never run from a deque")
}

unsafe fn lazy_frame_never_queued(_: JobRef) {
    unreachable!("a frame run on its parent's stack never holds a task or an output")
}

unsafe fn lazy_frame_never_encoded(_: JobRef) -> Result<Vec<u8>, Error> {
    unreachable!("a frame run on its parent's stack is never stolen")
}

unsafe fn lazy_frame_never_decoded(_: JobRef, _: &[u8]) -> Result<(), Error> {
    unreachable!("a frame run on its parent's stack is never stolen")
}

/// A pointer to a record, as stored in deques.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct JobRef(NonNull<JobHeader>);

// SAFETY: a record is handed between threads through deques; the protocol around `state`
// and the parent's counters decides which thread may touch which part when.
unsafe impl Send for JobRef {}

impl JobRef {
    #[inline(always)]
    pub(crate) fn header(&self) -> &JobHeader {
        // SAFETY: a JobRef only exists for a live record.
        unsafe { self.0.as_ref() }
    }

    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const JobHeader {
        self.0.as_ptr()
    }

    /// A reference to a header that stays in place while the reference is used.
    #[inline(always)]
    pub(crate) fn from_header(header: &JobHeader) -> JobRef {
        JobRef(NonNull::from(header))
    }

    /// # Safety
    /// `p` must point to a live record.
    #[inline(always)]
    pub(crate) unsafe fn from_ptr(p: *const JobHeader) -> JobRef {
        JobRef(NonNull::new_unchecked(p as *mut JobHeader))
    }

    /// Returns the record's memory.
    ///
    /// # Safety
    /// Nothing may use the record afterwards; its task and output must already be gone.
    #[inline(always)]
    pub(crate) unsafe fn free(self) {
        let class = self.header().class;
        if class == recycle::UNPOOLED {
            std::alloc::dealloc(self.0.as_ptr().cast(), self.header().vtable.layout);
        } else {
            recycle::release(self.0.cast(), class);
        }
    }

    /// True if this job, or any ancestor, has been aborted, or its run was cancelled.
    pub(crate) fn is_aborted(&self) -> bool {
        let mut node = self.as_ptr();
        // SAFETY: ancestors outlive their descendants, and the root state outlives the tree.
        unsafe {
            loop {
                let parent = (*node).parent;
                if parent.is_null() {
                    return (*(*node).link.get().root).is_killed();
                }
                if (*node).spawn_epoch != (*parent).abort_epoch.load(Ordering::Acquire) {
                    return true;
                }
                node = parent;
            }
        }
    }

    /// The shared state of the run this job belongs to.
    pub(crate) fn root_state<'a>(&self) -> &'a RootState {
        let mut node = self.as_ptr();
        // SAFETY: ancestors outlive their descendants; a root's link always holds its state,
        // and the root state outlives the tree.
        unsafe {
            while !(*node).parent.is_null() {
                node = (*node).parent;
            }
            &*(*node).link.get().root
        }
    }
}

/// The record of a task of type `T`.
#[repr(C)]
pub(crate) struct Job<T: Task> {
    pub(crate) header: JobHeader,
    /// Holds the task until it runs, then its output: never both, so they share the space.
    pub(crate) slot: UnsafeCell<Slot<T>>,
}

pub(crate) union Slot<T: Task> {
    pub(crate) task: ManuallyDrop<T>,
    pub(crate) output: ManuallyDrop<T::Output>,
}

impl<T: Task> Job<T> {
    const BLOCK: (u8, Layout) = recycle::block_for(
        std::mem::size_of::<Job<T>>(),
        std::mem::align_of::<Job<T>>(),
    );

    pub(crate) const VTABLE: JobVTable = JobVTable {
        run_inline: crate::worker::run_inline::<T>,
        run_taken: crate::worker::run_taken::<T>,
        discard: discard::<T>,
        drop_output: drop_output::<T>,
        encode_task: encode_task::<T>,
        decode_output: decode_output::<T>,
        type_id: TypeId::of::<T>,
        task_name: std::any::type_name::<T>,
        layout: Self::BLOCK.1,
    };

    /// A pending record, not yet placed anywhere.
    #[inline(always)]
    pub(crate) fn new(
        task: T,
        parent: *const JobHeader,
        depth: u16,
        spawn_epoch: u32,
        link: Link,
    ) -> Self {
        Job {
            header: JobHeader {
                vtable: &Self::VTABLE,
                parent,
                state: AtomicU8::new(PENDING),
                class: Self::BLOCK.0,
                depth: Cell::new(depth),
                spawn_epoch,
                owner: Cell::new(0),
                away: Cell::new(0),
                stolen_done: AtomicU32::new(0),
                abort_epoch: AtomicU32::new(0),
                link: Cell::new(link),
            },
            slot: UnsafeCell::new(Slot {
                task: ManuallyDrop::new(task),
            }),
        }
    }

    /// Builds a record in a block from `recycler` (or the global allocator when `None`).
    /// `link` is its first [`JobHeader::link`]: the job below it on the private stack it is
    /// about to be pushed on, or a root's state.
    #[inline(always)]
    pub(crate) fn create(
        recycler: Option<&mut recycle::Recycler>,
        task: T,
        parent: *const JobHeader,
        depth: u16,
        spawn_epoch: u32,
        link: Link,
    ) -> JobRef {
        let (class, layout) = Self::BLOCK;
        let block = match recycler {
            Some(r) => r.alloc(class, layout),
            None => recycle::fresh(layout),
        };
        let record = block.cast::<Job<T>>();
        // SAFETY: the block is large and aligned enough for a Job<T> and not in use.
        unsafe {
            record
                .as_ptr()
                .write(Self::new(task, parent, depth, spawn_epoch, link))
        };
        JobRef(record.cast())
    }

    /// # Safety
    /// `job` must be a record of type `Job<T>`.
    #[inline(always)]
    pub(crate) unsafe fn slot(job: JobRef) -> *mut Slot<T> {
        (*(job.as_ptr() as *const Job<T>)).slot.get()
    }

    /// Where the output will be, for handles that know only the output type.
    #[inline(always)]
    pub(crate) fn output_ptr(job: JobRef) -> *mut T::Output {
        // SAFETY: `job` was created as a Job<T> by the caller; the union field starts the slot.
        unsafe { std::ptr::addr_of_mut!((*Self::slot(job)).output).cast() }
    }
}

unsafe fn discard<T: Task>(job: JobRef) {
    ManuallyDrop::drop(&mut (*Job::<T>::slot(job)).task);
}

unsafe fn drop_output<T: Task>(job: JobRef) {
    ManuallyDrop::drop(&mut (*Job::<T>::slot(job)).output);
}

unsafe fn encode_task<T: Task>(job: JobRef) -> Result<Vec<u8>, Error> {
    let slot = Job::<T>::slot(job);
    let bytes = postcard::to_allocvec(&*(*slot).task).map_err(|e| Error::Encode {
        task: std::any::type_name::<T>(),
        what: "task",
        reason: e.to_string(),
    })?;
    ManuallyDrop::drop(&mut (*slot).task);
    Ok(bytes)
}

unsafe fn decode_output<T: Task>(job: JobRef, bytes: &[u8]) -> Result<(), Error> {
    let output: T::Output = postcard::from_bytes(bytes).map_err(|e| Error::Decode {
        task: std::any::type_name::<T>(),
        what: "output",
        reason: e.to_string(),
    })?;
    (*Job::<T>::slot(job)).output = ManuallyDrop::new(output);
    Ok(())
}
