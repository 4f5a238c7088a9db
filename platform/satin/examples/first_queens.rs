//! Speculative search: finds one placement of N queens and aborts the rest of the search.
//!
//! `cargo run --release -p satin --example first_queens -- [N] [THREADS]` (defaults 26, all
//! cores). Each task tries every column of its row in parallel, takes the children's answers
//! as they arrive, and aborts the remaining children once one has found a placement. Prints
//! the placement and how many jobs ran.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Remaining rows at which the search goes on sequentially.
const SEQUENTIAL_ROWS: usize = 16;

/// Jobs that started to run; the abort keeps this far below the size of the search tree.
static JOBS: AtomicU64 = AtomicU64::new(0);

#[derive(Serialize, Deserialize)]
struct Search {
    n: usize,
    /// Column of the queen in each row placed so far.
    placed: Vec<u8>,
}

impl Search {
    fn fits(placed: &[u8], col: usize) -> bool {
        let row = placed.len();
        placed.iter().enumerate().all(|(r, &c)| {
            let c = c as usize;
            c != col && row - r != c.abs_diff(col)
        })
    }

    /// Depth-first search for one completion of `placed`; stops early once aborted.
    fn sequential(n: usize, placed: &mut Vec<u8>, cx: &satin::Context, steps: &mut u64) -> bool {
        if placed.len() == n {
            return true;
        }
        *steps += 1;
        // Checking for the abort now and then keeps a cancelled search short.
        if *steps % 4096 == 0 && cx.is_aborted() {
            return false;
        }
        for col in 0..n {
            if Self::fits(placed, col) {
                placed.push(col as u8);
                if Self::sequential(n, placed, cx, steps) {
                    return true;
                }
                placed.pop();
            }
        }
        false
    }
}

impl satin::Task for Search {
    type Output = Option<Vec<u8>>;
    fn run(self, cx: &mut satin::Context) -> Option<Vec<u8>> {
        JOBS.fetch_add(1, Ordering::Relaxed);
        let Search { n, mut placed } = self;
        if n - placed.len() <= SEQUENTIAL_ROWS {
            let mut steps = 0;
            return Self::sequential(n, &mut placed, cx, &mut steps).then_some(placed);
        }
        let mut children: Vec<_> = (0..n)
            .filter(|&col| Self::fits(&placed, col))
            .map(|col| {
                let mut next = placed.clone();
                next.push(col as u8);
                cx.spawn(Search { n, placed: next })
            })
            .collect();
        while let Some((_, answer)) = cx.next_completed(&mut children) {
            if answer.is_some() {
                cx.abort();
                return answer;
            }
        }
        None
    }
}
satin::register!(Search);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(26), |s| s.parse())?;
    if !(1..=255).contains(&n) {
        return Err(format!("N must be between 1 and 255, got {n}").into());
    }
    let mut rt = satin::Runtime::local();
    if let Some(t) = args.next() {
        rt = rt.threads(t.parse()?);
    }
    let start = Instant::now();
    let answer = rt.run(Search {
        n,
        placed: Vec::new(),
    })?;
    let secs = start.elapsed().as_secs_f64();
    let stats = rt.stats();
    match answer {
        Some(placed) => {
            assert!(placed
                .iter()
                .enumerate()
                .all(|(r, &c)| Search::fits(&placed[..r], c as usize)));
            println!("{n}-queens placement (column per row): {placed:?}");
        }
        None => println!("{n}-queens: no placement exists"),
    }
    println!(
        "{} jobs ran, {} were dropped unstarted by the abort ({} threads, {secs:.3} s)",
        JOBS.load(Ordering::Relaxed),
        stats.jobs_discarded,
        rt.num_threads()
    );
    Ok(())
}
