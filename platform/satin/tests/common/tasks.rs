//! Task types shared by the tests: each one's output has a sequential oracle.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

use satin::{Context, Task};
use serde::{Deserialize, Serialize};

use super::queens_seq;

#[derive(Serialize, Deserialize)]
pub struct Fib(pub u32);

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

#[derive(Serialize, Deserialize)]
pub struct Queens {
    pub n: u32,
    pub cols: u32,
    pub d1: u32,
    pub d2: u32,
    /// Rows placed; below `cutoff` every placement is a spawn.
    pub row: u32,
    pub cutoff: u32,
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

pub fn queens(n: u32, cutoff: u32) -> Queens {
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
pub struct RandomTree {
    pub seed: u64,
    pub depth: u32,
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

    pub fn sequential(self) -> u64 {
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

#[derive(Serialize, Deserialize)]
pub struct Nop;

impl Task for Nop {
    type Output = ();
    fn run(self, _cx: &mut Context) {}
}
satin::register!(Nop);

/// Sleeps `ms` in steps of 10 ms with a spawn between steps: a worker publishes its queued
/// jobs for thieves at its spawns and syncs, so jobs queued behind a waiting task stay
/// within reach, as they do behind a task that computes in steps.
pub fn wait_in_steps(cx: &mut Context, ms: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(ms) {
        std::thread::sleep(Duration::from_millis(10));
        cx.spawn(Nop);
        cx.sync();
    }
}

/// A binary tree of `2^depth` leaves that each take `ms` milliseconds: work that keeps a
/// pool busy for a known time however loaded the machine is.
#[derive(Serialize, Deserialize, Clone, Copy)]
pub struct Sleepy {
    pub depth: u32,
    pub ms: u64,
}

impl Task for Sleepy {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.depth == 0 {
            wait_in_steps(cx, self.ms);
            return 1;
        }
        let half = || Sleepy {
            depth: self.depth - 1,
            ms: self.ms,
        };
        let a = cx.spawn(half());
        let b = cx.spawn(half());
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Sleepy);

/// Pieces handed out on demand that have run in this test binary.
pub static PIECES_RAN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A piece of work handed out on demand: counts itself in [`PIECES_RAN`] and returns its
/// number and the worker it ran on.
#[derive(Serialize, Deserialize)]
pub struct Piece(pub u64);

impl Task for Piece {
    type Output = (u64, usize);
    fn run(self, cx: &mut Context) -> (u64, usize) {
        PIECES_RAN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (self.0, cx.worker_index())
    }
}
satin::register!(Piece);

/// Spawns pieces 1 to `pieces`, each only once `work_wanted` says an idle worker asked, and
/// waits without syncing until all have run (`ran_before` pieces had run before it began):
/// each ran because a thief took it. Returns its own worker and what the pieces returned.
#[derive(Serialize, Deserialize)]
pub struct SplitOnDemand {
    pub pieces: u64,
    pub ran_before: u32,
}

impl Task for SplitOnDemand {
    type Output = (usize, Vec<(u64, usize)>);
    fn run(self, cx: &mut Context) -> (usize, Vec<(u64, usize)>) {
        use std::sync::atomic::Ordering;
        let deadline = Instant::now() + Duration::from_secs(if cfg!(miri) { 1200 } else { 20 });
        let mut children = Vec::new();
        while (children.len() as u64) < self.pieces {
            assert!(Instant::now() < deadline, "no worker asked for work");
            if cx.work_wanted() {
                children.push(cx.spawn(Piece(children.len() as u64 + 1)));
            }
            std::hint::spin_loop();
        }
        let all = u64::from(self.ran_before) + self.pieces;
        while u64::from(PIECES_RAN.load(Ordering::SeqCst)) < all {
            assert!(
                Instant::now() < deadline,
                "a piece handed out was never taken"
            );
            std::hint::spin_loop();
        }
        cx.sync();
        let me = cx.worker_index();
        (me, children.into_iter().map(|h| h.take()).collect())
    }
}
satin::register!(SplitOnDemand);
