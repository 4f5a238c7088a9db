//! A worker's deque of spawned jobs, split in two.
//!
//! The older jobs sit in a crossbeam-deque `Worker` where thieves can take them from the old
//! end. The newest jobs sit in a private stack that only the owner touches, so a spawn and the
//! pop that runs the child at sync need no atomic instruction and no fence; this is what keeps
//! a spawn much cheaper than a crossbeam pop. The private stack is intrusive: each record links
//! to the one below it, so a push is two stores and needs no capacity check. Thieves that find
//! the public part empty raise a flag, and the owner then moves its private jobs, oldest first,
//! to the public part at its next spawn or pop. Every public job is older than every private
//! one, so thieves still always get the oldest job, the root of the largest untouched subtree.
//!
//! A frame counts its children that leave the private stack other than through its own pops
//! (in [`Frame::away`](crate::job::Frame::away)): those it must wait for at sync. A child that
//! never leaves costs no counting at all.
//!
//! The price: a job spawned just before a long stretch of work without spawns or syncs becomes
//! visible to thieves only when that stretch ends.

use std::cell::{Cell, UnsafeCell};
use std::ptr::{self, NonNull};

use crossbeam_deque::Worker as Public;

use crate::job::{Frame, JobHeader, JobRef, Link};

pub(crate) struct Deque {
    /// The newest private job; each links to the next older one, the oldest to `bottom`.
    top: Cell<*const JobHeader>,
    /// Jobs pushed since the deque was made. Every queued spawn of the worker pushes one, so
    /// this is also the worker's count of queued spawns (see `LocalCounters`).
    pushed: Cell<u64>,
    /// Jobs that left the private stack since the deque was made, by any way, plus
    /// `inline_queued`: at least that many jobs wait exactly while `pushed` reaches it, which
    /// a spawn asks with one comparison and a pop keeps true with one increment.
    left_plus_queued: Cell<u64>,
    /// The [`Inlining`](crate::Inlining) threshold of queued jobs, in `left_plus_queued`.
    inline_queued: u64,
    /// Of the jobs that left, those that did not leave by their parent frame's pop: published,
    /// or taken by `pop_any`. Counted off the spawn and sync paths, as is `returned`.
    moved: Cell<u64>,
    /// Jobs popped back from the public part by their parent frame.
    returned: Cell<u64>,
    /// What the oldest private job links to: a record that belongs to no frame, so that a
    /// pop compares the top's parent with its frame without first looking for an empty stack.
    /// Owned (freed on drop), but not a `Box`: the stack's links point into it, and moving a
    /// `Box` (the deque moves with its worker) would claim it unaliased.
    bottom: NonNull<JobHeader>,
    public: Public<JobRef>,
    /// Reused by `publish` to reverse the private stack.
    scratch: UnsafeCell<Vec<JobRef>>,
}

impl Deque {
    /// A deque whose [`has_queued_enough`](Deque::has_queued_enough) asks for
    /// `inline_queued` jobs.
    pub(crate) fn new(public: Public<JobRef>, inline_queued: u32) -> Self {
        let bottom = NonNull::from(Box::leak(Box::new(JobHeader::mark())));
        Deque {
            top: Cell::new(bottom.as_ptr()),
            pushed: Cell::new(0),
            left_plus_queued: Cell::new(u64::from(inline_queued)),
            inline_queued: u64::from(inline_queued),
            moved: Cell::new(0),
            returned: Cell::new(0),
            bottom,
            public,
            scratch: UnsafeCell::new(Vec::new()),
        }
    }

    /// True if `job` is the bottom of the private stack, no job.
    #[inline(always)]
    fn is_bottom(&self, job: *const JobHeader) -> bool {
        ptr::eq(job, self.bottom.as_ptr())
    }

    /// The link a job about to be pushed must hold: the current top.
    #[inline(always)]
    pub(crate) fn link_for_push(&self) -> Link {
        Link {
            below: self.top.get(),
        }
    }

    /// Pushes `job`, whose link was set to [`link_for_push`](Deque::link_for_push) with no
    /// push or pop since.
    #[inline(always)]
    pub(crate) fn push(&self, job: JobRef) {
        // SAFETY: the link of a job being pushed is a `below` pointer.
        debug_assert!(unsafe { job.header().link.get().below } == self.top.get());
        self.top.set(job.as_ptr());
        self.pushed.set(self.pushed.get() + 1);
    }

    /// Notes that `n` jobs left the private stack.
    #[inline(always)]
    fn left(&self, n: u64) {
        self.left_plus_queued.set(self.left_plus_queued.get() + n);
    }

    /// True while at least the `inline_queued` given to [`new`](Deque::new) jobs wait on
    /// the private stack.
    #[inline(always)]
    pub(crate) fn has_queued_enough(&self) -> bool {
        self.pushed.get() >= self.left_plus_queued.get()
    }

    /// Jobs pushed since the deque was made.
    pub(crate) fn pushed(&self) -> u64 {
        self.pushed.get()
    }

    /// Jobs popped by their parent frame since the deque was made, from the private stack or
    /// back from the public part: each is then run or dropped at once by that frame.
    pub(crate) fn popped_by_parents(&self) -> u64 {
        let left = self.left_plus_queued.get() - self.inline_queued;
        left - self.moved.get() + self.returned.get()
    }

    /// True if the newest private job is the one that was below `job` when `job` was pushed:
    /// for a job popped since, nothing pushed after it is left.
    #[inline(always)]
    pub(crate) fn top_was_below(&self, job: JobRef) -> bool {
        // SAFETY: a job that was pushed has a `below` link, which stays as it was written.
        ptr::eq(self.top.get(), unsafe { job.header().link.get().below })
    }

    /// True if the newest private job is a child of `frame`.
    #[inline(always)]
    pub(crate) fn has_private_child(&self, frame: *const Frame) -> bool {
        // SAFETY: the top is a live record, or the bottom, whose parent is no frame.
        unsafe { (*self.top.get()).parent == frame }
    }

    /// Pops the newest job if it is a child of `frame`. Children of the frame running on this
    /// thread are always the newest jobs, so a job of any other frame on top means the frame has
    /// no child left here.
    #[inline(always)]
    pub(crate) fn pop_child(&self, frame: *const Frame) -> Option<JobRef> {
        let top = self.top.get();
        // SAFETY: jobs on the private stack are live records, and their links were written by
        // `push`; the bottom is a record of no frame.
        unsafe {
            if (*top).parent != frame {
                if self.is_bottom(top) {
                    return self.pop_public_child(frame);
                }
                return None;
            }
            self.top.set((*top).link.get().below);
            self.left(1);
            Some(JobRef::from_ptr(top))
        }
    }

    /// [`pop_child`](Deque::pop_child) without looking at the public part: for a sync, which
    /// looks there only when its frame counts children away.
    #[inline(always)]
    pub(crate) fn pop_private_child(&self, frame: *const Frame) -> Option<JobRef> {
        let top = self.top.get();
        // SAFETY: as in `pop_child`.
        unsafe {
            if (*top).parent != frame {
                return None;
            }
            self.top.set((*top).link.get().below);
            self.left(1);
            Some(JobRef::from_ptr(top))
        }
    }

    #[inline(never)]
    fn pop_public_child(&self, frame: *const Frame) -> Option<JobRef> {
        let job = self.public.pop()?;
        if job.header().parent == frame {
            // Back home: its frame runs it and no longer waits for it as a child away.
            let f = job.header();
            // SAFETY: the parent is the frame asking, alive on this thread.
            let parent = unsafe { &*f.parent };
            parent.away.set(parent.away.get() - 1);
            self.returned.set(self.returned.get() + 1);
            Some(job)
        } else {
            // Back where it was: it came off the new end and goes back on the new end.
            self.public.push(job);
            None
        }
    }

    /// Pops the newest job, whatever frame it belongs to. The job will be finished as taken
    /// (through `finish_elsewhere`), so its frame counts it as away.
    pub(crate) fn pop_any(&self) -> Option<JobRef> {
        let top = self.top.get();
        if self.is_bottom(top) {
            // Public jobs were counted when they were published.
            return self.public.pop();
        }
        // SAFETY: as in `pop_child`; private jobs are children of frames running on this thread.
        unsafe {
            self.top.set((*top).link.get().below);
            self.left(1);
            self.moved.set(self.moved.get() + 1);
            let parent = &*(*top).parent;
            parent.away.set(parent.away.get() + 1);
            Some(JobRef::from_ptr(top))
        }
    }

    /// Moves all private jobs to the public part, oldest first; returns how many.
    pub(crate) fn publish(&self) -> usize {
        // SAFETY: only the owning thread reaches the deque, and this is the only user of the
        // scratch vector.
        let scratch = unsafe { &mut *self.scratch.get() };
        let mut node = self.top.replace(self.bottom.as_ptr());
        while !self.is_bottom(node) {
            // SAFETY: as in `pop_child`; the parent frames run on this thread.
            unsafe {
                let parent = &*(*node).parent;
                parent.away.set(parent.away.get() + 1);
                scratch.push(JobRef::from_ptr(node));
                node = (*node).link.get().below;
            }
        }
        let n = scratch.len();
        self.left(n as u64);
        self.moved.set(self.moved.get() + n as u64);
        for job in scratch.drain(..).rev() {
            self.public.push(job);
        }
        n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.is_bottom(self.top.get()) && self.public.is_empty()
    }
}

impl Drop for Deque {
    fn drop(&mut self) {
        // SAFETY: `bottom` came from `Box::leak` in `new` and is freed only here; no job links
        // to it any more (a deque is dropped with its worker, after its last job).
        drop(unsafe { Box::from_raw(self.bottom.as_ptr()) });
    }
}
