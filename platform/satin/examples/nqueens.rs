//! Counts all solutions of the N-queens problem.
//!
//! `cargo run --release -p satin --example nqueens -- [N] [THREADS]` (defaults 14, all cores).
//! Known counts: N=8 gives 92, N=10 724, N=12 14200, N=14 365596.
//!
//! Launched under `ipl-run` (or `mpirun`, `srun`), every process joins the pool and the search
//! is spread over all of them; the master prints the count. `SATIN_STEAL=random` selects
//! random stealing instead of cluster-aware stealing (`cluster-aware`, the default).

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Rows above this many remaining are split into spawned children; the rest is searched
/// sequentially, which keeps jobs large enough to be worth their scheduling.
const SEQUENTIAL_ROWS: u32 = 7;

/// A partial placement: occupied columns and the two diagonal directions, as bit masks.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Queens {
    n: u32,
    row: u32,
    cols: u32,
    d1: u32,
    d2: u32,
}

impl Queens {
    fn free(&self) -> u32 {
        ((1u32 << self.n) - 1) & !(self.cols | self.d1 | self.d2)
    }

    fn place(&self, bit: u32) -> Queens {
        Queens {
            row: self.row + 1,
            cols: self.cols | bit,
            d1: (self.d1 | bit) << 1,
            d2: (self.d2 | bit) >> 1,
            ..*self
        }
    }

    fn count_sequential(&self) -> u64 {
        if self.row == self.n {
            return 1;
        }
        let mut free = self.free();
        let mut count = 0;
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free &= free - 1;
            count += self.place(bit).count_sequential();
        }
        count
    }
}

impl satin::Task for Queens {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        if self.n - self.row <= SEQUENTIAL_ROWS {
            return self.count_sequential();
        }
        let mut free = self.free();
        let mut children = Vec::with_capacity(free.count_ones() as usize);
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free &= free - 1;
            children.push(cx.spawn(self.place(bit)));
        }
        cx.sync();
        children.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(Queens);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=satin=debug` shows what the runtime does.
    tracing_subscriber::fmt()
        .with_env_filter(ipl::trace::log_filter("error")?)
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().map_or(Ok(14), |s| s.parse())?;
    if !(1..=30).contains(&n) {
        return Err(format!("N must be between 1 and 30, got {n}").into());
    }
    let threads: Option<usize> = args.next().map(|t| t.parse()).transpose()?;
    let root = Queens {
        n,
        row: 0,
        cols: 0,
        d1: 0,
        d2: 0,
    };
    let policy = satin::Steal::from_env()?;
    // A pool of processes (under `ipl-run`, `mpirun` or `srun`), or else this process alone.
    let config = ipl::Config::from_env()?;
    if config.server.is_some() || config.launcher.is_some() {
        let ibis = ipl::Ibis::join(config)?;
        // Processes at the start: the pool's size, or for a process joining a running pool
        // (`ipl-run --join`), the members so far.
        let nodes = ibis
            .pool()
            .size()
            .map_or_else(|| ibis.pool().members().len(), |n| n as usize);
        let mut rt = satin::Runtime::in_pool(ibis).steal(policy);
        if let Some(t) = threads {
            rt = rt.threads(t);
        }
        let start = Instant::now();
        if let Some(count) = rt.run(root)? {
            println!(
                "{n}-queens: {count} solutions ({nodes} processes of {} threads, {policy:?} stealing, {:.3} s)",
                rt.num_threads(),
                start.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    }
    let mut rt = satin::Runtime::local();
    if let Some(t) = threads {
        rt = rt.threads(t);
    }
    let start = Instant::now();
    let count = rt.run(root)?;
    println!(
        "{n}-queens: {count} solutions ({} threads, {:.3} s)",
        rt.num_threads(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
