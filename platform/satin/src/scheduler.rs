//! State shared by the workers of one runtime: their stealers, the injector for new roots,
//! the sleep bookkeeping, the abort generation and the counters.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use crossbeam_deque::{Injector, Stealer, Worker as Public};
use crossbeam_utils::CachePadded;
use parking_lot::RwLock;

use crate::inlining::Inlining;
use crate::job::JobRef;
use crate::stats::{SharedCounters, Stats, WorkerCounters};
use crate::worker::Worker;
use crate::Error;

/// How long a sleeping worker waits before looking again while runs are active. Wake-ups are
/// sent when work appears, so this only bounds the damage of a wake-up lost to a race.
const PARK_ACTIVE: Duration = Duration::from_millis(1);
/// The same while no run is active: every new root wakes the workers explicitly.
const PARK_IDLE: Duration = Duration::from_millis(100);

/// What other threads may see of one worker.
pub(crate) struct WorkerShared {
    pub(crate) stealer: Stealer<JobRef>,
    /// Set by thieves that found the public deque empty; the owner then publishes private jobs.
    pub(crate) publish_request: CachePadded<AtomicBool>,
    /// True while the worker is parked (or about to park).
    pub(crate) sleeping: CachePadded<AtomicBool>,
    pub(crate) thread: OnceLock<Thread>,
    pub(crate) counters: CachePadded<WorkerCounters>,
}

/// Bumped by every abort and every failing run, in any runtime of the process. A running task
/// compares it with the value at which it last found itself not aborted, so that the check on
/// every spawn and sync is one load from a fixed address; only after a bump does a task walk up
/// its ancestors to see whether the abort concerns it. Sharing it between runtimes costs an
/// unrelated runtime one such walk per task that is running at an abort, and nothing else.
pub(crate) static ABORT_GEN: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

pub(crate) struct Scheduler {
    pub(crate) workers: Box<[WorkerShared]>,
    pub(crate) inlining: Inlining,
    /// Roots, and jobs put back by the remote hooks, that any worker may take.
    pub(crate) injector: Injector<JobRef>,
    /// Number of workers marked sleeping; spawns look at it to decide whether to wake one.
    pub(crate) sleepers: CachePadded<AtomicUsize>,
    pub(crate) active_roots: AtomicUsize,
    pub(crate) shutdown: AtomicBool,
    pub(crate) shared_counters: SharedCounters,
    pub(crate) next_remote_id: AtomicU64,
    /// Round-robin start for the remote hook's search of a job to give away.
    pub(crate) remote_cursor: AtomicUsize,
    /// Told when a worker finds no local work; see `Remote::set_idle_hook`.
    pub(crate) idle_hook: RwLock<Option<IdleHook>>,
    /// True while an idle hook is installed: sleeping workers then wake often to call it.
    pub(crate) idle_hook_set: AtomicBool,
    /// Told after every abort; see `Remote::set_abort_hook`.
    pub(crate) abort_hook: RwLock<Option<AbortHook>>,
    pub(crate) abort_hook_set: AtomicBool,
}

/// See `Remote::set_idle_hook`.
pub(crate) type IdleHook = Arc<dyn Fn(usize) + Send + Sync>;
/// See `Remote::set_abort_hook`.
pub(crate) type AbortHook = Arc<dyn Fn() + Send + Sync>;

impl Scheduler {
    /// Starts `threads` workers.
    pub(crate) fn start(
        threads: usize,
        stack_size: usize,
        inlining: Inlining,
    ) -> Result<(Arc<Scheduler>, Vec<JoinHandle<()>>), Error> {
        let publics: Vec<Public<JobRef>> = (0..threads).map(|_| Public::new_lifo()).collect();
        let workers = publics
            .iter()
            .map(|p| WorkerShared {
                stealer: p.stealer(),
                publish_request: CachePadded::new(AtomicBool::new(false)),
                sleeping: CachePadded::new(AtomicBool::new(false)),
                thread: OnceLock::new(),
                counters: CachePadded::new(WorkerCounters::default()),
            })
            .collect();
        let sched = Arc::new(Scheduler {
            workers,
            inlining,
            injector: Injector::new(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            active_roots: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            shared_counters: SharedCounters::default(),
            next_remote_id: AtomicU64::new(1),
            remote_cursor: AtomicUsize::new(0),
            idle_hook: RwLock::new(None),
            idle_hook_set: AtomicBool::new(false),
            abort_hook: RwLock::new(None),
            abort_hook_set: AtomicBool::new(false),
        });
        let mut handles = Vec::with_capacity(threads);
        for (index, public) in publics.into_iter().enumerate() {
            let s = Arc::clone(&sched);
            let spawned = thread::Builder::new()
                .name(format!("satin-worker-{index}"))
                .stack_size(stack_size)
                .spawn(move || Worker::new(index, s, public).main_loop());
            match spawned {
                Ok(h) => {
                    let _ = sched.workers[index].thread.set(h.thread().clone());
                    handles.push(h);
                }
                Err(source) => {
                    sched.stop(handles);
                    return Err(Error::ThreadStart {
                        index,
                        source: Arc::new(source),
                    });
                }
            }
        }
        tracing::debug!(threads, "satin runtime started");
        Ok((sched, handles))
    }

    /// Asks the workers to exit once idle and waits for them.
    pub(crate) fn stop(&self, handles: Vec<JoinHandle<()>>) {
        self.shutdown.store(true, Ordering::SeqCst);
        for w in self.workers.iter() {
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
        }
        for h in handles {
            let _ = h.join();
        }
        tracing::debug!("satin runtime stopped");
    }

    pub(crate) fn num_workers(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn park_timeout(&self) -> Duration {
        // With an idle hook, a sleeping worker is also the one that asks other processes for
        // work, so it must come back soon even when this process has nothing running.
        if self.active_roots.load(Ordering::Relaxed) > 0
            || self.idle_hook_set.load(Ordering::Relaxed)
        {
            PARK_ACTIVE
        } else {
            PARK_IDLE
        }
    }

    /// Wakes one sleeping worker, if any.
    #[cold]
    pub(crate) fn wake_one(&self) {
        for w in self.workers.iter() {
            if self.wake(w) {
                return;
            }
        }
    }

    /// Wakes every sleeping worker.
    pub(crate) fn wake_all(&self) {
        for w in self.workers.iter() {
            self.wake(w);
        }
    }

    /// Wakes worker `index` if it sleeps. Called after publishing something that worker waits
    /// for; the sequentially consistent load pairs with the sleeper's store of its flag before it
    /// looks at what it waits for, so one of the two always sees the other.
    #[inline]
    pub(crate) fn wake_worker(&self, index: usize) {
        let w = &self.workers[index];
        if w.sleeping.load(Ordering::SeqCst) {
            self.wake(w);
        }
    }

    fn wake(&self, w: &WorkerShared) -> bool {
        // Whoever flips the flag back accounts for it, so each sleep is counted out once.
        if w.sleeping.load(Ordering::Relaxed) && w.sleeping.swap(false, Ordering::AcqRel) {
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
            true
        } else {
            false
        }
    }

    /// Asks every worker to move private jobs where thieves can see them.
    pub(crate) fn request_publish_all(&self, except: usize) {
        for (i, w) in self.workers.iter().enumerate() {
            if i != except && !w.publish_request.load(Ordering::Relaxed) {
                w.publish_request.store(true, Ordering::Relaxed);
            }
        }
    }

    /// True if some job can be taken without help from its owner.
    pub(crate) fn has_visible_work(&self) -> bool {
        !self.injector.is_empty() || self.workers.iter().any(|w| !w.stealer.is_empty())
    }

    /// Marks every run as cancelled for frames that compare generations.
    pub(crate) fn bump_abort_gen(&self) {
        ABORT_GEN.fetch_add(1, Ordering::AcqRel);
        if self.abort_hook_set.load(Ordering::Acquire) {
            self.call_abort_hook();
        }
    }

    #[cold]
    fn call_abort_hook(&self) {
        let hook = self.abort_hook.read().clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for w in self.workers.iter() {
            w.counters.add_to(&mut s);
        }
        self.shared_counters.add_to(&mut s);
        s
    }

    /// Tells the distributed layer, if one listens, that worker `index` found no local work.
    #[cold]
    pub(crate) fn call_idle_hook(&self, index: usize) {
        let hook = self.idle_hook.read().clone();
        if let Some(hook) = hook {
            hook(index);
        }
    }

    /// Queues a job for any worker and wakes one.
    pub(crate) fn inject(&self, job: JobRef) {
        self.injector.push(job);
        self.wake_one();
    }
}
