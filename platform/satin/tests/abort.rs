//! Speculative search: results as they arrive, and abort of the outstanding children.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{bounded, sized, THREADS};
use satin::{Context, Runtime, Task};
use serde::{Deserialize, Serialize};

/// A binary tree of busy work, 2^depth leaves.
#[derive(Serialize, Deserialize)]
struct Work(u32);

fn leaf_value() -> u64 {
    (0..200u64).fold(1, |a, i| a.wrapping_mul(31).wrapping_add(i))
}

impl Task for Work {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.0 == 0 {
            return leaf_value();
        }
        let a = cx.spawn(Work(self.0 - 1));
        let b = cx.spawn(Work(self.0 - 1));
        cx.sync();
        a.take().wrapping_add(b.take())
    }
}
satin::register!(Work);

// Counters of the abort test only; its own task type keeps other tests, which run
// concurrently in this process, out of them.
static STARTED: AtomicU64 = AtomicU64::new(0);
static STARTED_AFTER_ABORT: AtomicU64 = AtomicU64::new(0);
static ABORTED: AtomicBool = AtomicBool::new(false);

/// `Work` that counts the jobs started, and those started after the abort.
#[derive(Serialize, Deserialize)]
struct CountedWork(u32);

impl Task for CountedWork {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        STARTED.fetch_add(1, Ordering::SeqCst);
        if ABORTED.load(Ordering::SeqCst) {
            STARTED_AFTER_ABORT.fetch_add(1, Ordering::SeqCst);
        }
        if self.0 == 0 {
            return leaf_value();
        }
        let a = cx.spawn(CountedWork(self.0 - 1));
        let b = cx.spawn(CountedWork(self.0 - 1));
        cx.sync();
        a.take().wrapping_add(b.take())
    }
}
satin::register!(CountedWork);

/// Spawns many large subtrees and aborts the rest as soon as the first result arrives.
#[derive(Serialize, Deserialize)]
struct FirstOf {
    subtrees: u32,
    depth: u32,
}

impl Task for FirstOf {
    type Output = (usize, u64);
    fn run(self, cx: &mut Context) -> (usize, u64) {
        let mut handles: Vec<_> = (0..self.subtrees)
            .map(|_| cx.spawn(CountedWork(self.depth)))
            .collect();
        let (index, value) = cx.next_completed(&mut handles).expect("a child finishes");
        cx.abort();
        // Raised once the abort is in force: a job counted after this began after the
        // abort (raising it before would count the jobs of a worker that runs while this
        // one is preempted between the two lines, which on an oversubscribed machine is
        // a whole time slice of them).
        ABORTED.store(true, Ordering::SeqCst);
        // Everything left was cancelled: there is nothing more to take.
        assert!(cx.next_completed(&mut handles).is_none());
        cx.sync();
        (index, value)
    }
}
satin::register!(FirstOf);

/// Subtrees of the abort test, and their depth.
const SUBTREES: u32 = sized(64, 8);
const DEPTH: u32 = sized(12, 4);

#[test]
fn abort_cancels_outstanding_work() {
    for threads in THREADS {
        STARTED.store(0, Ordering::SeqCst);
        STARTED_AFTER_ABORT.store(0, Ordering::SeqCst);
        ABORTED.store(false, Ordering::SeqCst);
        let (result, stats) = bounded("abort", move || {
            let rt = Runtime::local().threads(threads);
            let r = rt.run(FirstOf {
                subtrees: SUBTREES,
                depth: DEPTH,
            });
            (r, rt.stats())
        });
        let (index, value) = result.unwrap();
        assert!(index < SUBTREES as usize);
        // One subtree: 2^(DEPTH + 1) - 1 jobs whose 2^DEPTH leaves all give the same value.
        assert_eq!(value, leaf_value().wrapping_mul(1 << DEPTH));
        let started = STARTED.load(Ordering::SeqCst);
        let after = STARTED_AFTER_ABORT.load(Ordering::SeqCst);
        let full = u64::from(SUBTREES) * ((1u64 << (DEPTH + 1)) - 1);
        assert!(stats.aborts >= 1);
        if threads == 1 {
            // Every job started is counted, the root too, and every spawned job was either
            // started or dropped unrun. (With more threads, a thief may count a job it dropped
            // only after the run's end is reported.)
            assert_eq!(stats.jobs_executed, started + 1, "{stats:?}");
            assert_eq!(
                stats.spawns + 1,
                stats.jobs_executed + stats.jobs_discarded,
                "{stats:?}"
            );
        }
        if std::env::var_os("SATIN_UNDER_MEMCHECK").is_some() || cfg!(miri) {
            // One thread at a time, for slices of thousands of jobs (memcheck), or a few
            // subtrees small enough to finish before the first result (Miri): no bound on
            // the others.
            continue;
        }
        assert!(
            started < full / 4,
            "{threads} threads: {started} of {full} jobs ran despite the abort"
        );
        // Only jobs that were being started at the moment of the abort may still begin.
        assert!(
            after <= 4 * threads as u64,
            "{threads} threads: {after} jobs started after the abort"
        );
        assert!(stats.jobs_discarded >= 1, "{stats:?}");
    }
}

/// A leaf that runs until it is aborted, polling as long-running leaves should.
#[derive(Serialize, Deserialize)]
struct Spinner;

impl Task for Spinner {
    type Output = bool;
    fn run(self, cx: &mut Context) -> bool {
        let start = Instant::now();
        while !cx.is_aborted() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "a spinner was never aborted"
            );
            std::hint::spin_loop();
        }
        false
    }
}
satin::register!(Spinner);

#[derive(Serialize, Deserialize)]
struct Quick;

impl Task for Quick {
    type Output = bool;
    fn run(self, _cx: &mut Context) -> bool {
        true
    }
}
satin::register!(Quick);

/// Spawns spinners, then one quick child, and aborts the spinners once the quick one is in.
#[derive(Serialize, Deserialize)]
struct Race(u32);

impl Task for Race {
    type Output = bool;
    fn run(self, cx: &mut Context) -> bool {
        let mut spinners: Vec<_> = (0..self.0).map(|_| cx.spawn(Spinner)).collect();
        let quick = cx.spawn(Quick);
        let won = quick.take();
        cx.abort();
        cx.sync();
        assert!(cx.next_completed(&mut spinners).is_none());
        won
    }
}
satin::register!(Race);

#[test]
fn running_children_see_the_abort_and_sync_returns() {
    for threads in THREADS {
        let won = bounded("race", move || {
            Runtime::local().threads(threads).run(Race(8))
        });
        assert!(won.unwrap(), "{threads} threads");
    }
}

/// Aborts its first batch of children, then spawns a second batch that must run normally.
#[derive(Serialize, Deserialize)]
struct AbortThenContinue;

impl Task for AbortThenContinue {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let first: Vec<_> = (0..8).map(|_| cx.spawn(Work(6))).collect();
        cx.abort();
        cx.sync();
        drop(first);
        let second: Vec<_> = (0..4).map(|i| cx.spawn(Work(i))).collect();
        cx.sync();
        second
            .into_iter()
            .map(|h| h.take())
            .fold(0, u64::wrapping_add)
    }
}
satin::register!(AbortThenContinue);

#[test]
fn children_spawned_after_an_abort_run() {
    let leaf = leaf_value();
    let expect = (0..4).fold(0u64, |acc, i| acc.wrapping_add(leaf.wrapping_mul(1 << i)));
    for threads in THREADS {
        let v = bounded("abort then continue", move || {
            Runtime::local().threads(threads).run(AbortThenContinue)
        });
        assert_eq!(v.unwrap(), expect, "{threads} threads");
    }
}

/// Takes results in completion order and sums them: the same as a plain sync.
#[derive(Serialize, Deserialize)]
struct SumAsTheyCome(u32);

impl Task for SumAsTheyCome {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let mut handles: Vec<_> = (0..self.0).map(|i| cx.spawn(Work(i % 7))).collect();
        let mut seen = vec![false; handles.len()];
        let mut sum = 0u64;
        while let Some((i, v)) = cx.next_completed(&mut handles) {
            assert!(!seen[i], "index {i} delivered twice");
            seen[i] = true;
            sum = sum.wrapping_add(v);
        }
        assert!(seen.iter().all(|&s| s));
        sum
    }
}
satin::register!(SumAsTheyCome);

#[test]
fn next_completed_delivers_every_result_once() {
    let leaf = leaf_value();
    let expect = (0..20u32).fold(0u64, |acc, i| {
        acc.wrapping_add(leaf.wrapping_mul(1 << (i % 7)))
    });
    for threads in THREADS {
        let v = bounded("next_completed", move || {
            Runtime::local().threads(threads).run(SumAsTheyCome(20))
        });
        assert_eq!(v.unwrap(), expect, "{threads} threads");
    }
}
