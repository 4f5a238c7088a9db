//! A worker's deque of spawned jobs, split in two.
//!
//! The older jobs sit in a crossbeam-deque `Worker` where thieves can take them from the old
//! end. The newest jobs sit in a private stack that only the owner touches, so a spawn and the
//! pop that runs the child at sync need no atomic instruction and no fence; this is what keeps
//! a spawn much cheaper than a crossbeam pop. Thieves that find the public part empty raise a
//! flag, and the owner then moves its private jobs, oldest first, to the public part at its next
//! spawn or pop. Every public job is older than every private one, so thieves still always get
//! the oldest job, the root of the largest untouched subtree.
//!
//! The price: a job spawned just before a long stretch of work without spawns or syncs becomes
//! visible to thieves only when that stretch ends.

use std::cell::UnsafeCell;

use crossbeam_deque::Worker as Public;

use crate::job::{JobHeader, JobRef};

pub(crate) struct Deque {
    /// Oldest first.
    private: UnsafeCell<Vec<JobRef>>,
    public: Public<JobRef>,
}

impl Deque {
    pub(crate) fn new(public: Public<JobRef>) -> Self {
        Deque {
            private: UnsafeCell::new(Vec::with_capacity(256)),
            public,
        }
    }

    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    fn private(&self) -> &mut Vec<JobRef> {
        // SAFETY: only the owning thread reaches the deque, and no method hands out a reference
        // to the private part or calls back into user code while it holds one.
        unsafe { &mut *self.private.get() }
    }

    #[inline(always)]
    pub(crate) fn push(&self, job: JobRef) {
        self.private().push(job);
    }

    /// Pops the newest job if it is a child of `frame`. Children of the frame running on this
    /// thread are always the newest jobs, so a job of any other frame on top means the frame has
    /// no child left here.
    #[inline(always)]
    pub(crate) fn pop_child(&self, frame: *const JobHeader) -> Option<JobRef> {
        let p = self.private();
        if let Some(&top) = p.last() {
            if top.header().parent != frame {
                return None;
            }
            p.pop();
            return Some(top);
        }
        self.pop_public_child(frame)
    }

    #[inline(never)]
    fn pop_public_child(&self, frame: *const JobHeader) -> Option<JobRef> {
        let job = self.public.pop()?;
        if job.header().parent == frame {
            Some(job)
        } else {
            // Back where it was: it came off the new end and goes back on the new end.
            self.public.push(job);
            None
        }
    }

    /// Pops the newest job, whatever frame it belongs to.
    pub(crate) fn pop_any(&self) -> Option<JobRef> {
        self.private().pop().or_else(|| self.public.pop())
    }

    /// Moves all private jobs to the public part, oldest first; returns how many.
    pub(crate) fn publish(&self) -> usize {
        let p = self.private();
        let n = p.len();
        for job in p.drain(..) {
            self.public.push(job);
        }
        n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.private().is_empty() && self.public.is_empty()
    }
}
