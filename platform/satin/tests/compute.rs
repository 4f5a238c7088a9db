//! Parallel results equal sequential ones on 1 to 4 threads.

mod common;

use common::{bounded, fib, queens_seq, THREADS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use satin::{Context, Runtime, Task};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Fib(u32);

impl Task for Fib {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let a = cx.spawn(Fib(self.0 - 1));
        let b = cx.spawn(Fib(self.0 - 2));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Fib);

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

#[derive(Serialize, Deserialize)]
struct Queens {
    n: u32,
    cols: u32,
    d1: u32,
    d2: u32,
    /// Rows placed; below `cutoff` every placement is a spawn.
    row: u32,
    cutoff: u32,
}

impl Task for Queens {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let all = (1u32 << self.n) - 1;
        if self.row >= self.cutoff || self.cols == all {
            return queens_seq(self.n, self.cols, self.d1, self.d2);
        }
        let mut free = all & !(self.cols | self.d1 | self.d2);
        let mut handles = Vec::new();
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free &= free - 1;
            handles.push(cx.spawn(Queens {
                cols: self.cols | bit,
                d1: (self.d1 | bit) << 1,
                d2: (self.d2 | bit) >> 1,
                row: self.row + 1,
                ..self
            }));
        }
        cx.sync();
        handles.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(Queens);

fn queens(n: u32, cutoff: u32) -> Queens {
    Queens {
        n,
        cols: 0,
        d1: 0,
        d2: 0,
        row: 0,
        cutoff,
    }
}

/// A tree with seeded random fan-out (0 to 5) and depth; every node contributes to a checksum.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct RandomTree {
    seed: u64,
    depth: u32,
}

impl RandomTree {
    fn value(self) -> u64 {
        self.seed.rotate_left(17) ^ u64::from(self.depth)
    }

    fn children(self) -> Vec<RandomTree> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let limit = if self.depth == 0 {
            0
        } else {
            rng.gen_range(0..=5)
        };
        (0..limit)
            .map(|_| RandomTree {
                seed: rng.gen(),
                depth: self.depth - rng.gen_range(1..=self.depth.min(2)),
            })
            .collect()
    }

    /// Combines children in order, so a result taken from the wrong child shows.
    fn combine(self, children: impl Iterator<Item = u64>) -> u64 {
        children.fold(self.value(), |acc, c| {
            acc.wrapping_mul(0x100_0000_01b3).wrapping_add(c)
        })
    }

    fn sequential(self) -> u64 {
        self.combine(self.children().into_iter().map(|c| c.sequential()))
    }
}

impl Task for RandomTree {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let handles: Vec<_> = self.children().into_iter().map(|c| cx.spawn(c)).collect();
        // Some nodes take results before syncing, which must also work.
        if self.seed % 3 == 0 {
            let v: Vec<u64> = handles.into_iter().map(|h| h.take()).collect();
            cx.sync();
            return self.combine(v.into_iter());
        }
        cx.sync();
        self.combine(handles.into_iter().map(|h| h.take()))
    }
}
satin::register!(RandomTree);

#[test]
fn fib_matches_sequential() {
    for threads in THREADS {
        let v = bounded("fib", move || {
            Runtime::local().threads(threads).run(Fib(22))
        });
        assert_eq!(v.unwrap(), fib(22), "{threads} threads");
    }
}

#[test]
fn fib_with_call_matches_sequential() {
    for threads in THREADS {
        let v = bounded("fib with call", move || {
            Runtime::local().threads(threads).run(FibCall(23))
        });
        assert_eq!(v.unwrap(), fib(23), "{threads} threads");
    }
}

#[test]
fn nqueens_matches_known_counts() {
    assert_eq!(queens_seq(8, 0, 0, 0), 92);
    for threads in THREADS {
        let counts = bounded("nqueens", move || {
            let rt = Runtime::local().threads(threads);
            [(8, 92), (10, 724), (11, 2680)]
                .map(|(n, expect)| (rt.run(queens(n, 4)).unwrap(), expect))
        });
        for (got, expect) in counts {
            assert_eq!(got, expect, "{threads} threads");
        }
    }
}

#[test]
fn random_trees_match_sequential() {
    for seed in [1u64, 7, 42, 2024] {
        let root = RandomTree { seed, depth: 9 };
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
    let stats = bounded("stats", || {
        let rt = Runtime::local().threads(2);
        assert_eq!(rt.run(Fib(15)).unwrap(), fib(15));
        rt.stats()
    });
    // fib(15) makes 2 * fib(16) - 1 calls; all but the root are spawns.
    let calls = 2 * fib(16) - 1;
    assert_eq!(stats.spawns, calls - 1);
    assert_eq!(stats.jobs_executed, calls);
    assert_eq!(stats.jobs_discarded, 0);
    assert!(
        stats.syncs >= fib(16) - 1,
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

#[test]
fn a_runtime_runs_many_roots() {
    let sums = bounded("many roots", || {
        let rt = Runtime::local().threads(3);
        (0..50).map(|i| rt.run(Fib(i % 15)).unwrap()).sum::<u64>()
    });
    assert_eq!(sums, (0..50).map(|i| fib(i % 15)).sum::<u64>());
}

#[test]
fn roots_from_several_threads_share_a_runtime() {
    let total = bounded("concurrent roots", || {
        let rt = std::sync::Arc::new(Runtime::local().threads(2));
        let callers: Vec<_> = (0..4)
            .map(|i| {
                let rt = std::sync::Arc::clone(&rt);
                std::thread::spawn(move || rt.run(Fib(16 + i)).unwrap())
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total, (16..20).map(fib).sum::<u64>());
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
    for threads in THREADS {
        DROPPED.store(0, std::sync::atomic::Ordering::SeqCst);
        let out = bounded("drops", move || {
            Runtime::local()
                .threads(threads)
                .run(Dropper(30))
                .map(|c| c.0)
        });
        assert_eq!(out.unwrap(), 30);
        // 30 levels of 3 children each, plus the root's output.
        assert_eq!(
            DROPPED.load(std::sync::atomic::Ordering::SeqCst),
            91,
            "{threads} threads"
        );
    }
}
