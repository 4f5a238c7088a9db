//! Parallel results equal sequential ones on 1 to 4 threads.

mod common;

use common::tasks::{queens, Fib, RandomTree};
use common::{bounded, fib, queens_seq, sized, THREADS};
use satin::{Context, Runtime, Task};
use serde::{Deserialize, Serialize};

/// Spawns one child and computes the other with `call`.
#[derive(Serialize, Deserialize)]
struct FibCall(u32);

impl Task for FibCall {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let a = cx.spawn(FibCall(self.0 - 1));
        let b = cx.call(FibCall(self.0 - 2));
        cx.sync();
        a.take() + b
    }
}
satin::register!(FibCall);

#[test]
fn fib_matches_sequential() {
    let n = sized(22, 12);
    for threads in THREADS {
        let v = bounded("fib", move || Runtime::local().threads(threads).run(Fib(n)));
        assert_eq!(v.unwrap(), fib(n), "{threads} threads");
    }
}

#[test]
fn fib_with_call_matches_sequential() {
    let n = sized(23, 13);
    for threads in THREADS {
        let v = bounded("fib with call", move || {
            Runtime::local().threads(threads).run(FibCall(n))
        });
        assert_eq!(v.unwrap(), fib(n), "{threads} threads");
    }
}

#[test]
fn nqueens_matches_known_counts() {
    assert_eq!(queens_seq(8, 0, 0, 0), 92);
    for threads in THREADS {
        let counts = bounded("nqueens", move || {
            let rt = Runtime::local().threads(threads);
            let sizes = if cfg!(miri) {
                [(5, 10), (6, 4), (7, 40)]
            } else {
                [(8, 92), (10, 724), (11, 2680)]
            };
            sizes.map(|(n, expect)| (rt.run(queens(n, 4)).unwrap(), expect))
        });
        for (got, expect) in counts {
            assert_eq!(got, expect, "{threads} threads");
        }
    }
}

#[test]
fn random_trees_match_sequential() {
    for seed in [1u64, 7, 42, 2024] {
        let root = RandomTree {
            seed,
            depth: sized(9, 4),
        };
        let expect = root.sequential();
        for threads in THREADS {
            let got = bounded("random tree", move || {
                Runtime::local().threads(threads).run(root)
            });
            assert_eq!(got.unwrap(), expect, "seed {seed}, {threads} threads");
        }
    }
}

#[test]
fn statistics_count_spawns_and_jobs() {
    let n = sized(15, 9);
    let stats = bounded("stats", move || {
        let rt = Runtime::local().threads(2);
        assert_eq!(rt.run(Fib(n)).unwrap(), fib(n));
        rt.stats()
    });
    // fib(n) makes 2 * fib(n + 1) - 1 calls; all but the root are spawns.
    let calls = 2 * fib(n + 1) - 1;
    assert_eq!(stats.spawns, calls - 1);
    assert_eq!(stats.jobs_executed, calls);
    assert_eq!(stats.jobs_discarded, 0);
    assert!(
        stats.syncs >= fib(n + 1) - 1,
        "one sync per inner node: {stats:?}"
    );
    assert!(stats.local_steals <= stats.local_steal_attempts);
    assert_eq!(stats.remote_steals, 0);
    assert_eq!(stats.bytes_moved, 0);
}

#[test]
fn zero_threads_is_an_error() {
    let err = bounded("threads(0)", || Runtime::local().threads(0).run(Fib(3))).unwrap_err();
    assert!(matches!(err, satin::Error::NoThreads));
    assert!(err.to_string().contains("threads(0)"), "{err}");
}

/// An absurd thread count is an error naming the limit, where it used to allocate a worker
/// record for each thread first (`usize::MAX`: a capacity overflow, a panic).
#[test]
fn absurd_thread_counts_are_an_error() {
    for n in [satin::MAX_THREADS + 1, usize::MAX] {
        let err = bounded("threads(absurd)", move || {
            Runtime::local().threads(n).run(Fib(3))
        })
        .unwrap_err();
        assert!(matches!(err, satin::Error::Config(_)), "{err}");
        assert!(err.to_string().contains("at most 4096"), "{err}");
    }
}

/// A stack too small for a worker is an error naming the setting and the least it takes;
/// `stack_size(0)` (or any size up to about 128 KiB in a debug build) used to start the
/// workers, and the first of them to run a task overflowed its stack, which aborts the whole
/// process. The smallest stack accepted runs a tree of tasks.
#[test]
fn a_stack_too_small_for_a_worker_is_an_error() {
    for bytes in [0, 1, 64 << 10, satin::MIN_STACK_SIZE - 1] {
        let err = bounded("stack_size(too small)", move || {
            Runtime::local().threads(2).stack_size(bytes).run(Fib(12))
        })
        .unwrap_err();
        assert!(matches!(err, satin::Error::Config(_)), "{bytes}: {err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("stack_size({bytes})"))
                && text.contains(&satin::MIN_STACK_SIZE.to_string()),
            "{text}"
        );
    }
    let least = bounded("stack_size(MIN_STACK_SIZE)", || {
        Runtime::local()
            .threads(2)
            .stack_size(satin::MIN_STACK_SIZE)
            .run(Fib(12))
    });
    assert_eq!(least.unwrap(), fib(12));
    // Too large a stack: an error naming the setting, where the operating system's refusal
    // ("Invalid argument" for usize::MAX) named nothing.
    for bytes in [satin::MAX_STACK_SIZE + 1, usize::MAX] {
        let err = bounded("stack_size(too large)", move || {
            Runtime::local().threads(2).stack_size(bytes).run(Fib(12))
        })
        .unwrap_err();
        assert!(
            err.to_string().contains(&format!("stack_size({bytes})")),
            "{err}"
        );
    }
}

#[test]
fn a_runtime_runs_many_roots() {
    let m = sized(15, 8);
    let sums = bounded("many roots", move || {
        let rt = Runtime::local().threads(3);
        (0..50).map(|i| rt.run(Fib(i % m)).unwrap()).sum::<u64>()
    });
    assert_eq!(sums, (0..50).map(|i| fib(i % m)).sum::<u64>());
}

#[test]
fn roots_from_several_threads_share_a_runtime() {
    let base = sized(16, 8);
    let total = bounded("concurrent roots", move || {
        let rt = std::sync::Arc::new(Runtime::local().threads(2));
        let callers: Vec<_> = (0..4)
            .map(|i| {
                let rt = std::sync::Arc::clone(&rt);
                std::thread::spawn(move || rt.run(Fib(base + i)).unwrap())
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total, (base..base + 4).map(fib).sum::<u64>());
}

/// A task whose output counts its drops, to check that unread outputs are dropped once.
#[derive(Serialize, Deserialize)]
struct Dropper(u32);

#[derive(Serialize, Deserialize)]
struct Counted(u32);

static DROPPED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Task for Dropper {
    type Output = Counted;
    fn run(self, cx: &mut Context) -> Counted {
        if self.0 == 0 {
            return Counted(0);
        }
        // Handles dropped unread, before and after their child ran.
        drop(cx.spawn(Dropper(0)));
        let kept = cx.spawn(Dropper(0));
        let late = cx.spawn(Dropper(self.0 - 1));
        cx.sync();
        drop(late);
        let _ = kept.take();
        Counted(self.0)
    }
}
satin::register!(Dropper);

#[test]
fn unread_outputs_are_dropped_once() {
    // With every spawn queued, every level but the root ends as a child popped by its
    // parent's sync; with inlining, the deep ones run within their spawn.
    for inlining in [satin::Inlining::OFF, satin::Inlining::DEFAULT] {
        for threads in THREADS {
            DROPPED.store(0, std::sync::atomic::Ordering::SeqCst);
            let out = bounded("drops", move || {
                Runtime::local()
                    .threads(threads)
                    .inlining(inlining)
                    .run(Dropper(30))
                    .map(|c| c.0)
            });
            assert_eq!(out.unwrap(), 30);
            // 30 levels of 3 children each, plus the root's output.
            assert_eq!(
                DROPPED.load(std::sync::atomic::Ordering::SeqCst),
                91,
                "{inlining:?}, {threads} threads"
            );
        }
    }
}
