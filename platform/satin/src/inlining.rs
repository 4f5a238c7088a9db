//! When a spawn runs its child at once instead of queueing it.
//!
//! A queued child costs a record, a push, a pop and an indirect call; a child run at once costs
//! about as much as a plain call. Running children at once is always allowed: a Satin program
//! means the same with every spawn replaced by a call, so it is one more legal order. The
//! price is that such a child cannot be stolen. So a spawn inlines only where that loses
//! nothing: deep in the tree (children of shallow frames are the large pieces thieves want, and
//! a loop of spawns in a shallow frame stays parallel) and while this worker already has enough
//! queued jobs that nobody has asked for (thieves take the oldest of those, which are larger than
//! anything spawned this deep). A thief that finds nothing to take asks the worker to publish
//! its queued jobs; that empties the queue, so the following spawns are queued again until
//! enough work is waiting. This is the runtime adaptation of Tzannes et al.'s lazy scheduling.

/// The thresholds of spawn inlining; set with [`Runtime::inlining`](crate::Runtime::inlining)
/// or [`PoolRuntime::inlining`](crate::PoolRuntime::inlining).
///
/// A spawn runs its child at once when the spawning task is at least `min_depth` frames below
/// the nearest root or stolen job and at least `min_queued` jobs wait unpublished on the
/// worker's own deque. [`Inlining::OFF`] queues every child.
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Fib(u32);
/// # impl satin::Task for Fib {
/// #     type Output = u64;
/// #     fn run(self, cx: &mut satin::Context) -> u64 {
/// #         if self.0 < 2 { return self.0 as u64; }
/// #         let a = cx.spawn(Fib(self.0 - 1));
/// #         let b = cx.spawn(Fib(self.0 - 2));
/// #         cx.sync();
/// #         a.take() + b.take()
/// #     }
/// # }
/// # satin::register!(Fib);
/// let every_spawn_queued = satin::Runtime::local().threads(2).inlining(satin::Inlining::OFF);
/// let stats_before = every_spawn_queued.stats();
/// assert_eq!(every_spawn_queued.run(Fib(20))?, 6765);
/// assert_eq!(every_spawn_queued.stats().since(&stats_before).spawns_inlined, 0);
/// # Ok::<(), satin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inlining {
    /// Spawns of frames shallower than this always queue their child.
    pub min_depth: u16,
    /// Spawns queue their child while fewer jobs than this wait on the worker's private stack.
    pub min_queued: u32,
}

impl Inlining {
    /// Every spawn queues its child: the behaviour of Satin itself.
    pub const OFF: Inlining = Inlining {
        min_depth: u16::MAX,
        min_queued: u32::MAX,
    };

    /// The default: inline from 12 frames down while 2 jobs are queued. Twelve levels of
    /// splitting leave pieces of all sizes queued for thieves down to about 1/4096 of the
    /// tree, and a thief in another location (cluster-aware stealing over a slow link) needs
    /// the middle-sized ones: with 6 levels, the wide-area experiment of `satin-dist-bench`
    /// ran 1.2 times slower than with no inlining, with 12 as fast. The queue is kept short
    /// on purpose: a job is queued whenever fewer wait, and every job queued while more wait
    /// is a job run at once that no thief asked for (with 4, a deep binary tree queues about
    /// 50 times as many as with 2, and runs no faster).
    pub const DEFAULT: Inlining = Inlining {
        min_depth: 12,
        min_queued: 2,
    };

    /// The setting named by `SATIN_INLINING`: `off`, `default`, or `DEPTH,QUEUED` (for example
    /// `8,4`). `None` when the variable is unset.
    ///
    /// # Errors
    /// A message naming the variable and the value when it cannot be read.
    pub fn from_env() -> Result<Option<Inlining>, String> {
        match std::env::var("SATIN_INLINING") {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(v)) => {
                Err(format!("SATIN_INLINING={v:?} is not valid text"))
            }
            Ok(v) => Inlining::parse(&v).map(Some).ok_or_else(|| {
                format!("SATIN_INLINING={v:?}: expected off, default, or DEPTH,QUEUED such as 6,2")
            }),
        }
    }

    fn parse(text: &str) -> Option<Inlining> {
        match text.trim() {
            "off" => Some(Inlining::OFF),
            "default" => Some(Inlining::DEFAULT),
            other => {
                let (depth, queued) = other.split_once(',')?;
                Some(Inlining {
                    min_depth: depth.trim().parse().ok()?,
                    min_queued: queued.trim().parse().ok()?,
                })
            }
        }
    }
}

impl Default for Inlining {
    fn default() -> Self {
        Inlining::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::Inlining;

    #[test]
    fn settings_are_read_from_text() {
        assert_eq!(Inlining::parse("off"), Some(Inlining::OFF));
        assert_eq!(Inlining::parse(" default "), Some(Inlining::DEFAULT));
        assert_eq!(
            Inlining::parse("8, 2"),
            Some(Inlining {
                min_depth: 8,
                min_queued: 2
            })
        );
        for bad in ["", "8", "8,", "x,2", "70000,1", "1,2,3", "-1,2"] {
            assert_eq!(Inlining::parse(bad), None, "{bad:?}");
        }
    }
}
