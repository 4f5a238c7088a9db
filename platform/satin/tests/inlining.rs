//! Spawns that run their child at once ([`Inlining`]) compute the same results as queued ones,
//! keep the abort and panic rules, and are counted.

mod common;

use common::tasks::{queens, Fib, RandomTree};
use common::{bounded, fib, sized, THREADS};
use satin::{Context, Error, Inlining, Runtime, Task};
use serde::{Deserialize, Serialize};

/// Settings from "never" to "always", and mixes in between that make deep frames switch
/// between running children at once and queueing them (which gives a frame that ran within
/// a spawn a frame of its own).
const SETTINGS: [Inlining; 5] = [
    Inlining::OFF,
    Inlining::DEFAULT,
    Inlining {
        min_depth: 0,
        min_queued: 0,
    },
    Inlining {
        min_depth: 1,
        min_queued: 1,
    },
    Inlining {
        min_depth: 3,
        min_queued: 2,
    },
];

#[test]
fn every_setting_computes_the_sequential_results() {
    // Deep enough for the default to inline (12 frames), also under Miri.
    let n = sized(20, 14);
    let (board, solutions) = if cfg!(miri) { (6, 4) } else { (9, 352) };
    for inlining in SETTINGS {
        for threads in THREADS {
            let (f, q, trees) = bounded("inlining", move || {
                let rt = Runtime::local().threads(threads).inlining(inlining);
                let f = rt.run(Fib(n)).unwrap();
                let q = rt.run(queens(board, 5)).unwrap();
                let trees: Vec<(u64, u64)> = [3u64, 11, 99]
                    .map(|seed| {
                        let root = RandomTree {
                            seed,
                            depth: sized(8, 4),
                        };
                        (rt.run(root).unwrap(), root.sequential())
                    })
                    .into();
                (f, q, trees)
            });
            assert_eq!(f, fib(n), "{inlining:?}, {threads} threads");
            assert_eq!(q, solutions, "{inlining:?}, {threads} threads");
            for (got, expect) in trees {
                assert_eq!(got, expect, "{inlining:?}, {threads} threads");
            }
        }
    }
}

#[test]
fn inlined_spawns_are_counted_as_spawns_and_jobs() {
    // Deep enough for the default to inline (12 frames, 2 jobs queued), also under Miri.
    let n = sized(18, 16);
    let calls = 2 * fib(n + 1) - 1; // calls of fib(n); all but the root are spawns
    for (inlining, expect_inlined) in [
        (Inlining::OFF, false),
        (Inlining::DEFAULT, true),
        (
            Inlining {
                min_depth: 0,
                min_queued: 0,
            },
            true,
        ),
    ] {
        let stats = bounded("stats", move || {
            let rt = Runtime::local().threads(1).inlining(inlining);
            assert_eq!(rt.run(Fib(n)).unwrap(), fib(n));
            rt.stats()
        });
        assert_eq!(stats.spawns, calls - 1, "{inlining:?}");
        assert_eq!(stats.jobs_executed, calls, "{inlining:?}");
        assert_eq!(stats.spawns_inlined > 0, expect_inlined, "{stats:?}");
        if inlining.min_queued == 0 {
            assert_eq!(stats.spawns_inlined, stats.spawns, "{stats:?}");
        }
    }
}

/// Leaves of a search: child `i` answers `i * 10`.
#[derive(Serialize, Deserialize)]
struct Answer(u64);

impl Task for Answer {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        self.0 * 10
    }
}
satin::register!(Answer);

/// At `depth` frames below the root (so that its children run within their spawns under an
/// eager setting), takes the first completed child, aborts, and checks what the rules promise:
/// `next_completed` ignores the children spawned before the abort, `take` still returns the
/// outputs of those that had finished, and children spawned afterwards count again.
#[derive(Serialize, Deserialize)]
struct SearchAt {
    depth: u32,
}

impl Task for SearchAt {
    type Output = (u64, u64, u64);
    fn run(self, cx: &mut Context) -> (u64, u64, u64) {
        if self.depth > 0 {
            return cx
                .spawn(SearchAt {
                    depth: self.depth - 1,
                })
                .take();
        }
        let mut handles: Vec<_> = (1..=5).map(|i| cx.spawn(Answer(i))).collect();
        let (_, first) = cx.next_completed(&mut handles).expect("children finish");
        cx.abort();
        assert!(cx.next_completed(&mut handles).is_none());
        cx.sync();
        let mut rest = 0;
        for h in handles {
            if h.is_ready() {
                rest += h.take();
            }
        }
        let mut after = vec![cx.spawn(Answer(7))];
        let (_, seven) = cx
            .next_completed(&mut after)
            .expect("spawned after the abort");
        (first, rest, seven)
    }
}
satin::register!(SearchAt);

#[test]
fn abort_and_next_completed_treat_inlined_children_like_queued_ones() {
    for inlining in SETTINGS {
        for threads in [1, 2] {
            let (first, rest, seven) = bounded("search", move || {
                Runtime::local()
                    .threads(threads)
                    .inlining(inlining)
                    .run(SearchAt { depth: 8 })
            })
            .unwrap();
            assert!((10..=50).contains(&first), "{inlining:?}: {first}");
            assert_eq!(seven, 70, "{inlining:?}");
            // Finished children keep their outputs; with every child run within its spawn,
            // all had finished before the abort.
            if inlining.min_queued == 0 {
                assert_eq!(first + rest, 150, "{inlining:?}");
            }
        }
    }
}

/// Panics at the bottom of a deep chain of spawns.
#[derive(Serialize, Deserialize)]
struct PanicsDeep(u32);

impl Task for PanicsDeep {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.0 == 0 {
            panic!("deep trouble");
        }
        let a = cx.spawn(Fib(10));
        let b = cx.spawn(PanicsDeep(self.0 - 1));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(PanicsDeep);

#[test]
fn a_panic_in_an_inlined_child_fails_the_run_naming_it() {
    for inlining in SETTINGS {
        for threads in [1, 3] {
            let err = bounded("panic", move || {
                let rt = Runtime::local().threads(threads).inlining(inlining);
                let err = rt.run(PanicsDeep(12)).unwrap_err();
                // The runtime is still usable afterwards.
                assert_eq!(rt.run(Fib(12)).unwrap(), fib(12));
                err
            });
            match err {
                Error::TaskPanicked { task, message } => {
                    assert!(task.ends_with("PanicsDeep"), "{inlining:?}: {task}");
                    assert_eq!(message, "deep trouble");
                }
                other => panic!("{inlining:?}: unexpected {other:?}"),
            }
        }
    }
}

/// Spawns `Answer`s in a loop, as a search or a tiling does near the root.
#[derive(Serialize, Deserialize)]
struct Spawner(u64);

impl Task for Spawner {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let handles: Vec<_> = (0..self.0).map(|i| cx.spawn(Answer(i))).collect();
        cx.sync();
        handles.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(Spawner);

/// Spawns two children, then calls a `Spawner`, which is one frame below the root and finds
/// the two waiting on the worker's queue.
#[derive(Serialize, Deserialize)]
struct CallsSpawner(u64);

impl Task for CallsSpawner {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let first = [cx.spawn(Answer(0)), cx.spawn(Answer(0))];
        let v = cx.call(Spawner(self.0));
        cx.sync();
        v + first.into_iter().map(|h| h.take()).sum::<u64>()
    }
}
satin::register!(CallsSpawner);

#[test]
fn shallow_frames_queue_every_child_even_when_called() {
    let stats = bounded("shallow", || {
        let rt = Runtime::local().threads(1);
        assert_eq!(rt.run(CallsSpawner(20)).unwrap(), 10 * (0..20).sum::<u64>());
        rt.stats()
    });
    // The loop runs 2 frames below the root, far above `Inlining::DEFAULT.min_depth`: all
    // 22 children stay stealable.
    assert_eq!(stats.spawns, 22, "{stats:?}");
    assert_eq!(stats.spawns_inlined, 0, "{stats:?}");
}
