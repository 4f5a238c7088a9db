//! Speculative search across nodes: a frame that aborts children stolen by another node has
//! them cancelled there, and no job of theirs starts once the cancellation is processed.
//!
//! What the design guarantees: `Context::abort` drops the frame's children still on its own
//! deque at once and, through the abort hook, sends the cancellation of every child given to
//! another node before it returns; the thief aborts the child's root as soon as the message
//! is read. From then on a job of that tree that has not started never starts (every executor
//! checks the abort generation before it runs a job), except on a worker that had just passed
//! that check for the next child of a sync: at most one job per worker thread of the thief.
//! How many start between the abort and the cancellation's arrival depends on the message's
//! latency and the machine's load: that figure is printed, not bounded.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{on_nodes_until, Layout, LIMIT};
use ipl::Driver;
use satin::{Context, Runtime, Steal, Task};
use serde::{Deserialize, Serialize};

// The nodes are threads of this process, so these count over all of them. One test only.
static STARTED: AtomicU64 = AtomicU64::new(0);
static STARTED_AFTER_ABORT: AtomicU64 = AtomicU64::new(0);
static STARTED_AFTER_CANCEL: AtomicU64 = AtomicU64::new(0);
static ABORTED: AtomicBool = AtomicBool::new(false);
/// Set once the thief has processed the cancellation of every job it received.
static CANCELLED: AtomicBool = AtomicBool::new(false);
static SUBTREE_STARTED: AtomicBool = AtomicBool::new(false);
/// Worker threads per node.
const THREADS: usize = 1;

/// Time a leaf works: long enough that a stolen subtree runs for a while.
const LEAF: Duration = Duration::from_millis(1);
const DEPTH: u32 = 10;
const SUBTREES: usize = 16;

/// A binary tree of busy leaves that counts the jobs it starts.
#[derive(Serialize, Deserialize)]
struct Heavy {
    depth: u32,
    top: bool,
}

impl Task for Heavy {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        STARTED.fetch_add(1, Ordering::SeqCst);
        if ABORTED.load(Ordering::SeqCst) {
            STARTED_AFTER_ABORT.fetch_add(1, Ordering::SeqCst);
        }
        if CANCELLED.load(Ordering::SeqCst) {
            STARTED_AFTER_CANCEL.fetch_add(1, Ordering::SeqCst);
        }
        if self.top {
            SUBTREE_STARTED.store(true, Ordering::SeqCst);
        }
        if self.depth == 0 {
            let t = Instant::now();
            while t.elapsed() < LEAF {
                std::hint::spin_loop();
            }
            return 1;
        }
        let child = || Heavy {
            depth: self.depth - 1,
            top: false,
        };
        let a = cx.spawn(child());
        let b = cx.spawn(child());
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Heavy);

#[derive(Serialize, Deserialize)]
struct Nop;

impl Task for Nop {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        0
    }
}
satin::register!(Nop);

/// Keeps the master's only worker busy until a subtree has started, which then can only have
/// happened on the other node. It spawns as it waits, which keeps the master's waiting jobs
/// visible to thieves.
#[derive(Serialize, Deserialize)]
struct Gate;

impl Task for Gate {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let start = Instant::now();
        while !SUBTREE_STARTED.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no subtree was stolen"
            );
            let h = cx.spawn(Nop);
            cx.sync();
            h.take();
        }
        u64::MAX
    }
}
satin::register!(Gate);

/// Spawns the subtrees and the gate, takes the first result (the gate's) and aborts the rest.
#[derive(Serialize, Deserialize)]
struct FirstOf;

impl Task for FirstOf {
    type Output = (usize, u64);
    fn run(self, cx: &mut Context) -> (usize, u64) {
        let mut handles: Vec<_> = (0..SUBTREES)
            .map(|_| {
                cx.spawn(Heavy {
                    depth: DEPTH,
                    top: true,
                })
            })
            .collect();
        handles.push(cx.spawn(Gate));
        let first = cx.next_completed(&mut handles).expect("a child finishes");
        ABORTED.store(true, Ordering::SeqCst);
        cx.abort();
        assert!(cx.next_completed(&mut handles).is_none());
        cx.sync();
        first
    }
}
satin::register!(FirstOf);

#[test]
fn an_abort_cancels_children_stolen_by_another_node() {
    let deadline = Instant::now() + LIMIT;
    for driver in [Driver::Inproc, Driver::Tcp, Driver::Shm] {
        STARTED.store(0, Ordering::SeqCst);
        STARTED_AFTER_ABORT.store(0, Ordering::SeqCst);
        STARTED_AFTER_CANCEL.store(0, Ordering::SeqCst);
        ABORTED.store(false, Ordering::SeqCst);
        CANCELLED.store(false, Ordering::SeqCst);
        SUBTREE_STARTED.store(false, Ordering::SeqCst);
        let reports = on_nodes_until(Layout::new(driver, 2, 1), deadline, |ibis| {
            let rt = Runtime::in_pool(ibis).threads(THREADS).steal(Steal::Random);
            let done = AtomicBool::new(false);
            let first = std::thread::scope(|scope| {
                // Notes when this node has processed a cancellation of every job it received
                // (the counts go up right after each job's root is aborted).
                // The counts are looked at once more after the run: it may end between two
                // looks.
                scope.spawn(|| loop {
                    let finished = done.load(Ordering::SeqCst);
                    let s = rt.stats();
                    if s.cancels_received >= 1 && s.cancels_received >= s.jobs_received {
                        CANCELLED.store(true, Ordering::SeqCst);
                        return;
                    }
                    if finished {
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                });
                let first = rt.run(FirstOf).expect("the search");
                done.store(true, Ordering::SeqCst);
                first
            });
            // The pool goes on normally afterwards.
            let after = rt.run(Nop).expect("a later run");
            (first, after, rt.stats())
        });
        let (master, thief): (Vec<_>, Vec<_>) = reports.into_iter().partition(|r| r.0.is_some());
        let (first, after, master_stats) = &master[0];
        let (_, _, thief_stats) = &thief[0];
        assert_eq!(
            *first,
            Some((SUBTREES, u64::MAX)),
            "{driver:?}: the gate wins"
        );
        assert_eq!(*after, Some(0));
        assert!(
            thief_stats.jobs_received >= 1,
            "{driver:?}: {thief_stats:?}"
        );
        assert!(
            master_stats.cancels_sent >= 1,
            "{driver:?}: {master_stats:?}"
        );
        assert!(
            thief_stats.cancels_received >= 1,
            "{driver:?}: {thief_stats:?}"
        );
        let started = STARTED.load(Ordering::SeqCst);
        let after_abort = STARTED_AFTER_ABORT.load(Ordering::SeqCst);
        let subtree = (1u64 << (DEPTH + 1)) - 1;
        // The stolen subtree stopped early, and no other subtree ran anywhere.
        assert!(
            started < subtree,
            "{driver:?}: {started} jobs started; one whole subtree has {subtree}"
        );
        let after_cancel = STARTED_AFTER_CANCEL.load(Ordering::SeqCst);
        assert!(
            CANCELLED.load(Ordering::SeqCst),
            "{driver:?}: the thief never processed the cancellations: {thief_stats:?}"
        );
        assert!(
            after_cancel <= THREADS as u64,
            "{driver:?}: {after_cancel} jobs started after the thief processed the cancellation \
             (at most one per worker may)"
        );
        eprintln!(
            "{driver:?}: {started} jobs started, {after_abort} of them after the abort, \
             {after_cancel} after the thief processed the cancellation"
        );
    }
}
