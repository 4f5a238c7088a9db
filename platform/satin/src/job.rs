//! Job records and frames.
//!
//! A *record* is what a queued spawn creates: the child's task, later its output, and what the
//! deques and the child's handle need. A *frame* is the bookkeeping of a running task that
//! queued children: what its children link to, its abort epoch, and the count of its children
//! that other threads run. Both live in the arena of the worker that runs the task (see
//! `arena`), a frame right below its children's records, from the task's first queued spawn
//! until it ends; roots, which are created and collected outside the workers, are boxed.
//!
//! Both stay valid for as long as anything refers to them, because everything that does is
//! strictly nested inside the task that owns them: a frame cannot end before all its children
//! have finished (its sync waits for the stolen ones too), and a handle cannot outlive the task
//! that spawned its child (its lifetime is the task's, see [`Handle`](crate::Handle)).

use std::any::TypeId;
use std::cell::{Cell, UnsafeCell};
use std::mem::{align_of, offset_of, size_of, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::root::RootState;
use crate::worker::Worker;
use crate::{Context, Error, Task};

/// The job waits to run, or runs.
pub(crate) const PENDING: u8 = 0;
/// The output is in the record.
pub(crate) const DONE: u8 = 1;
/// The job was dropped unstarted or unwound because it was aborted; no output.
pub(crate) const ABORTED: u8 = 2;
/// The job panicked or failed remotely; the run it belongs to is failing; no output.
pub(crate) const FAILED: u8 = 3;

/// The tag of a [`Frame::up`] (and of `Context::up`) that marks a record; frames and
/// records are aligned to 64 bytes, so the low bits are free.
pub(crate) const RECORD: usize = 1;
/// The tag of `Context::up` that marks a shallow task (see `Context::up`).
pub(crate) const SHALLOW: usize = 2;
/// All tags.
pub(crate) const TAGS: usize = RECORD | SHALLOW;

/// The bookkeeping of a running task that queued children, aborted, or waited for
/// completions. Children link to it; it lives in the worker's arena, below the children's
/// records, for as long as the task runs.
///
/// A new frame writes only what its own spawns and syncs need; what the slow paths want to
/// know about its ancestors (aborts, the run's state) they find through `up`.
#[repr(C)]
pub(crate) struct Frame {
    /// Where the task stands (`Context::up`, whose tags are ignored here but [`RECORD`]): the
    /// frame it hangs under, or, tagged [`RECORD`], the record of a job taken from elsewhere
    /// (stolen, a root) that it stands on. A task hangs under a frame only while that frame's
    /// task is suspended in the sync, spawn, call or wait that runs it, so it cannot be
    /// aborted by that frame's own abort, only from further up; a job taken from elsewhere
    /// can be, which its record's spawn epoch shows.
    pub(crate) up: *const u8,
    /// Children of this task that left this thread's private stack other than by this task's
    /// own pops: published where thieves can take them, or run by an outer frame's wait. The
    /// task waits for exactly these at its sync. Only the thread running the task touches it.
    pub(crate) away: Cell<u32>,
    /// Children of this task in the worker's list of orphans (see
    /// [`Worker::orphan`](crate::worker::Worker::orphan)), whose outputs the frame drops when
    /// it ends. Next to `away`, so that asking whether either is non-zero, as the end of every
    /// frame does, may take one comparison.
    pub(crate) orphans: Cell<u32>,
    /// Bumped by `Context::abort`, which cancels every child spawned before.
    pub(crate) abort_epoch: AtomicU32,
    /// Of the children `away`, those finished by other threads or by outer frames (always
    /// through [`finish_elsewhere`](crate::worker::finish_elsewhere)).
    pub(crate) stolen_done: AtomicU32,
    /// Frames between this one and the nearest job taken from a deque by another frame or
    /// thread (a root, a stolen job): 0 for those, one more than the frame above otherwise.
    /// Spawns of deep frames may run their child at once (see [`Inlining`](crate::Inlining));
    /// with inlining off it is not kept (0).
    pub(crate) depth: u32,
}

/// `away` and `orphans` fill an aligned word of a frame, which `Frame::is_settled` reads.
const AWAY_AND_ORPHANS: () = {
    assert!(offset_of!(Frame, away) % 8 == 0);
    assert!(offset_of!(Frame, orphans) == offset_of!(Frame, away) + 4);
    assert!(align_of::<Frame>() >= 8);
};

/// What a frame hangs under (see [`Frame::up`]).
pub(crate) enum Above<'a> {
    Frame(&'a Frame),
    Record(JobRef),
}

impl Frame {
    /// True if no child is away and none was orphaned: nothing keeps the frame from ending
    /// at once but children left on the private stack.
    #[inline(always)]
    pub(crate) fn is_settled(&self) -> bool {
        let () = AWAY_AND_ORPHANS;
        // One load and one comparison for both counts, which the compiler does not merge.
        // SAFETY: `away` and `orphans` are the halves of an aligned word of the frame (see
        // `AWAY_AND_ORPHANS`), cells that only this thread reads or writes.
        unsafe {
            ptr::from_ref(self)
                .cast::<u8>()
                .add(offset_of!(Frame, away))
                .cast::<u64>()
                .read()
                == 0
        }
    }

    /// What this frame hangs under.
    #[inline]
    pub(crate) fn above(&self) -> Above<'_> {
        let up = self.up as usize;
        let untagged = self.up.wrapping_sub(up & TAGS);
        if up & RECORD != 0 {
            // SAFETY: a record a task stands on outlives the task's frame.
            Above::Record(unsafe { JobRef::from_ptr(untagged.cast()) })
        } else {
            // SAFETY: the frame above outlives this one.
            Above::Frame(unsafe { &*untagged.cast::<Frame>() })
        }
    }

    /// True if this frame, or any ancestor, has been aborted, or its run was cancelled.
    pub(crate) fn is_aborted(&self) -> bool {
        self.record_below().is_aborted()
    }

    /// The shared state of the run this frame belongs to.
    pub(crate) fn root_state<'a>(&self) -> &'a RootState {
        self.record_below().root_state()
    }

    /// The record of the job taken from elsewhere that this frame's task runs within: what
    /// decides whether it is aborted (see [`Frame::up`]).
    fn record_below(&self) -> JobRef {
        let mut frame = self;
        loop {
            match frame.above() {
                Above::Frame(f) => frame = f,
                Above::Record(job) => return job,
            }
        }
    }
}

/// The type-independent part of every record. `#[repr(C)]` keeps it at offset 0 so a pointer
/// to the header is a pointer to the record.
///
/// A spawn writes the first five fields only (`spawn_epoch` and `state` in one store); `owner`
/// is written by whoever takes the job from another worker, before anything reads it.
#[repr(C)]
pub(crate) struct JobHeader {
    pub(crate) vtable: &'static JobVTable,
    /// The frame of the task that spawned this one; null for a root. The parent cannot finish
    /// before all its children have, so the pointer stays valid while this job exists.
    pub(crate) parent: *const Frame,
    /// The job below this one on its worker's private stack, while it is there; in a root,
    /// which never is, the run's shared state.
    pub(crate) link: Cell<Link>,
    /// The parent's `abort_epoch` when this job was spawned; the job is aborted once they differ.
    pub(crate) spawn_epoch: u32,
    pub(crate) state: AtomicU8,
    /// Worker the job was taken from, written by whoever takes it from another worker's deque
    /// before running it (a thief, or `Remote::steal_oldest` before the job leaves or comes back
    /// through the injector): that worker waits for the job, so it is the one to wake. Roots
    /// never read it.
    pub(crate) owner: Owner,
}

/// The state of a header of no job (see [`JobHeader::mark`]), which no job ever has.
const NO_JOB: u8 = u8::MAX;

impl JobHeader {
    /// The header of no job: its parent is no frame, its state no job's, and its functions are
    /// never called. The bottom of a worker's private stack is one, and so are the marks
    /// handles use.
    pub(crate) const fn mark() -> JobHeader {
        JobHeader {
            vtable: &MARK_VTABLE,
            parent: std::ptr::null(),
            link: Cell::new(Link {
                below: std::ptr::null(),
            }),
            spawn_epoch: 0,
            state: AtomicU8::new(NO_JOB),
            owner: Owner(Cell::new(MaybeUninit::uninit())),
        }
    }
}

/// The functions of [`JobHeader::mark`], which nothing runs.
static MARK_VTABLE: JobVTable = {
    fn never(_: JobRef) {
        unreachable!("a mark is no job")
    }
    fn never_inline(_: JobRef, _: &mut Context<'_>) {
        unreachable!("a mark is no job")
    }
    fn never_taken(_: JobRef, _: &Worker, _: u64) {
        unreachable!("a mark is no job")
    }
    fn never_encode(_: JobRef) -> Result<Vec<u8>, Error> {
        unreachable!("a mark is no job")
    }
    fn never_decode(_: JobRef, _: &[u8], _: &[u8]) -> Result<(), Error> {
        unreachable!("a mark is no job")
    }
    JobVTable {
        run_inline: never_inline,
        run_taken: never_taken,
        discard: never,
        drop_output: never,
        encode_task: never_encode,
        decode_output: never_decode,
        type_id: TypeId::of::<()>,
        task_name: || "(no job)",
    }
};

/// `spawn_epoch` and `state` fill the aligned word at offset 24 of a header, with padding
/// after them, so that `Job::write` writes both (and the padding) with one store.
const EPOCH_AND_STATE: () = {
    assert!(std::mem::offset_of!(JobHeader, spawn_epoch) == 24);
    assert!(std::mem::offset_of!(JobHeader, state) == 28);
    assert!(std::mem::offset_of!(JobHeader, owner) == 32);
};

/// See [`JobHeader::owner`]: unset until the job is taken.
pub(crate) struct Owner(Cell<MaybeUninit<u32>>);

impl Owner {
    pub(crate) fn set(&self, index: u32) {
        self.0.set(MaybeUninit::new(index));
    }

    /// # Safety
    /// The owner must have been [`set`](Owner::set).
    pub(crate) unsafe fn get(&self) -> u32 {
        // SAFETY: as the caller vouches.
        unsafe { self.0.get().assume_init() }
    }
}

/// See [`JobHeader::link`].
#[derive(Clone, Copy)]
pub(crate) union Link {
    pub(crate) below: *const JobHeader,
    pub(crate) root: *const RootState,
}

/// Decodes an output (the first bytes) into a record, given its task as encoded.
pub(crate) type DecodeOutput = unsafe fn(JobRef, &[u8], &[u8]) -> Result<(), Error>;

/// Operations that depend on the task type, one static table per type.
pub(crate) struct JobVTable {
    /// Runs a child popped by its parent, in a context set up for it.
    pub(crate) run_inline: unsafe fn(JobRef, &mut Context<'_>),
    pub(crate) run_taken: unsafe fn(JobRef, &Worker, u64),
    /// Drops a task that never ran.
    pub(crate) discard: unsafe fn(JobRef),
    pub(crate) drop_output: unsafe fn(JobRef),
    /// Serializes the task, which stays in the record.
    pub(crate) encode_task: unsafe fn(JobRef) -> Result<Vec<u8>, Error>,
    /// Decodes an output into the record, which holds none; the second bytes are the job's
    /// task as it was encoded, for the type's [`Task::check_output`].
    pub(crate) decode_output: DecodeOutput,
    pub(crate) type_id: fn() -> TypeId,
    pub(crate) task_name: fn() -> &'static str,
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

    /// # Safety
    /// `p` must point to a live record.
    #[inline(always)]
    pub(crate) unsafe fn from_ptr(p: *const JobHeader) -> JobRef {
        // SAFETY: a live record is not at address zero.
        JobRef(unsafe { NonNull::new_unchecked(p as *mut JobHeader) })
    }

    /// The frame of the task that spawned this job, if it is not a root.
    #[inline(always)]
    pub(crate) fn parent(&self) -> Option<&Frame> {
        // SAFETY: the parent outlives its children (see `JobHeader::parent`).
        unsafe { self.header().parent.as_ref() }
    }

    /// True if this job, or any ancestor, has been aborted, or its run was cancelled.
    pub(crate) fn is_aborted(&self) -> bool {
        let h = self.header();
        match self.parent() {
            Some(parent) => {
                h.spawn_epoch != parent.abort_epoch.load(Ordering::Acquire) || parent.is_aborted()
            }
            None => self.root_state().is_killed(),
        }
    }

    /// The shared state of the run this job belongs to.
    pub(crate) fn root_state<'a>(&self) -> &'a RootState {
        match self.parent() {
            Some(parent) => parent.root_state(),
            // SAFETY: a root's link always holds its state, which outlives the tree.
            None => unsafe { &*self.header().link.get().root },
        }
    }

    /// The Rust type name of the job's task.
    pub(crate) fn task_name(&self) -> &'static str {
        (self.header().vtable.task_name)()
    }
}

/// The record of a task of type `T`.
///
/// The output comes right after the header, at an offset that depends on the output type
/// alone ([`output_offset`]), so that a handle, which knows only that type, finds it from the
/// record's address; the task follows.
#[repr(C)]
pub(crate) struct Job<T: Task> {
    pub(crate) header: JobHeader,
    /// The output, once the job has finished with one.
    pub(crate) output: UnsafeCell<MaybeUninit<T::Output>>,
    /// The task, until it runs (or is dropped unrun, or given away).
    task: UnsafeCell<MaybeUninit<T>>,
}

/// Where the output of type `O` lies in a record (see [`Job`]).
pub(crate) const fn output_offset<O>() -> usize {
    size_of::<JobHeader>().next_multiple_of(align_of::<O>())
}

/// The output of type `O` of the record `job`.
#[inline(always)]
pub(crate) fn output_of<O>(job: JobRef) -> *mut O {
    job.as_ptr()
        .cast::<u8>()
        .cast_mut()
        .wrapping_add(output_offset::<O>())
        .cast()
}

impl<T: Task> Job<T> {
    pub(crate) const VTABLE: JobVTable = JobVTable {
        run_inline: crate::worker::run_inline::<T>,
        run_taken: crate::worker::run_taken::<T>,
        discard: discard::<T>,
        drop_output: drop_output::<T>,
        encode_task: encode_task::<T>,
        decode_output: decode_output::<T>,
        type_id: TypeId::of::<T>,
        task_name: std::any::type_name::<T>,
    };

    /// Checked when a record type is first used: handles rely on it.
    const OUTPUT_AT_ITS_OFFSET: () = assert!(
        std::mem::offset_of!(Job<T>, output) == output_offset::<T::Output>(),
        "a record's output lies where handles look for it"
    );

    /// A pending root record, not yet placed anywhere, whose link holds the run's state.
    pub(crate) fn root(task: T, root: *const RootState) -> Self {
        let () = Self::OUTPUT_AT_ITS_OFFSET;
        Job {
            header: JobHeader {
                vtable: &Self::VTABLE,
                parent: std::ptr::null(),
                link: Cell::new(Link { root }),
                spawn_epoch: 0,
                state: AtomicU8::new(PENDING),
                owner: Owner(Cell::new(MaybeUninit::uninit())),
            },
            output: UnsafeCell::new(MaybeUninit::uninit()),
            task: UnsafeCell::new(MaybeUninit::new(task)),
        }
    }

    /// Writes a pending record of `task`, a child of `parent` spawned at its epoch
    /// `spawn_epoch`, at `at`, with `link` as its link. Field by field, so that `owner` and
    /// the output cost no store.
    ///
    /// # Safety
    /// `at` must be valid for writing a `Job<T>` and aligned for it.
    #[inline(always)]
    pub(crate) unsafe fn write(
        at: *mut Job<T>,
        task: T,
        parent: *const Frame,
        spawn_epoch: u32,
        link: Link,
    ) {
        let () = Self::OUTPUT_AT_ITS_OFFSET;
        let () = EPOCH_AND_STATE;
        // SAFETY: as the caller vouches; each field is written through a raw pointer, without
        // a reference to the uninitialised record.
        unsafe {
            let h = std::ptr::addr_of_mut!((*at).header);
            std::ptr::addr_of_mut!((*h).vtable).write(&Self::VTABLE);
            std::ptr::addr_of_mut!((*h).parent).write(parent);
            std::ptr::addr_of_mut!((*h).link).write(Cell::new(link));
            // The epoch and the state share one aligned word (see `EPOCH_AND_STATE`): one store.
            let mut word = [0u8; 8];
            word[..4].copy_from_slice(&spawn_epoch.to_ne_bytes());
            word[4] = PENDING;
            std::ptr::addr_of_mut!((*h).spawn_epoch)
                .cast::<u64>()
                .write(u64::from_ne_bytes(word));
            std::ptr::addr_of_mut!((*at).task).cast::<T>().write(task);
        }
    }

    /// The task of the record `job`.
    ///
    /// # Safety
    /// `job` must be a record of type `Job<T>`.
    #[inline(always)]
    pub(crate) unsafe fn task_ptr(job: JobRef) -> *mut T {
        // SAFETY: the caller vouches for the type; the header starts the record.
        unsafe { (*(job.as_ptr() as *const Job<T>)).task.get().cast() }
    }

    /// The output of the record `job`.
    ///
    /// # Safety
    /// `job` must be a record of type `Job<T>`.
    #[inline(always)]
    pub(crate) unsafe fn output_ptr(job: JobRef) -> *mut T::Output {
        // SAFETY: the caller vouches for the type; the header starts the record.
        unsafe { (*(job.as_ptr() as *const Job<T>)).output.get().cast() }
    }
}

/// # Safety
/// `job` must be a `Job<T>` that holds its task, which nothing uses afterwards.
unsafe fn discard<T: Task>(job: JobRef) {
    // SAFETY: as the caller vouches.
    unsafe { Job::<T>::task_ptr(job).drop_in_place() }
}

/// # Safety
/// `job` must be a `Job<T>` that holds its output, which nothing uses afterwards.
unsafe fn drop_output<T: Task>(job: JobRef) {
    // SAFETY: as the caller vouches.
    unsafe { Job::<T>::output_ptr(job).drop_in_place() }
}

/// # Safety
/// `job` must be a `Job<T>` that holds its task, and the caller its only user.
unsafe fn encode_task<T: Task>(job: JobRef) -> Result<Vec<u8>, Error> {
    // SAFETY: as the caller vouches.
    let task: &T = unsafe { &*Job::<T>::task_ptr(job) };
    postcard::to_allocvec(task).map_err(|e| Error::Encode {
        task: std::any::type_name::<T>(),
        what: "task",
        reason: e.to_string(),
    })
}

/// # Safety
/// `job` must be a `Job<T>` that holds no output, and the caller its only user.
unsafe fn decode_output<T: Task>(job: JobRef, bytes: &[u8], task: &[u8]) -> Result<(), Error> {
    let output: T::Output = crate::codec::decode(bytes, "output", std::any::type_name::<T>())?;
    crate::codec::check_output_of_encoded::<T>(task, &output)?;
    // SAFETY: as the caller vouches; there is no output, so nothing is overwritten unseen.
    unsafe { Job::<T>::output_ptr(job).write(output) };
    Ok(())
}
