//! The iteration loop and its sequential and multi-threaded drivers.

use std::ops::Range;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::grid::Grid;
use crate::params::Params;
use crate::partition::{row_blocks, PartitionError};
use crate::sweep::{relax_rows, Colour};

/// When to stop iterating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stop {
    /// Until an iteration's largest change is at most the tolerance.
    Converged,
    /// After exactly this many iterations.
    Iterations(u64),
}

/// What a solve did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Iterations run (each one red and one black half-iteration).
    pub iterations: u64,
    /// Largest change of the last iteration (infinite if none ran).
    pub max_change: f64,
}

/// Why a threaded solve could not run.
#[derive(Debug, Error)]
pub enum SolveError {
    /// The rows could not be split over the threads.
    #[error("cannot split rows over threads: {0}")]
    Partition(#[from] PartitionError),
    /// The thread pool could not be started.
    #[error("cannot start the thread pool: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
}

/// Runs whole iterations until `stop` says so. `iteration` performs one
/// iteration (both colours, including any exchange and reduction) and
/// returns its largest change over the whole grid and both colours; every
/// version of the solver uses this loop, so all stop after the same
/// iteration. (The Ibis code's synchronous mode tested only the second
/// colour's change; taking both is what "the largest change of an
/// iteration" says.)
pub fn iterate(stop: Stop, tolerance: f64, mut iteration: impl FnMut() -> f64) -> Outcome {
    let mut outcome = Outcome {
        iterations: 0,
        max_change: f64::INFINITY,
    };
    loop {
        let done = match stop {
            Stop::Converged => outcome.max_change <= tolerance,
            Stop::Iterations(k) => outcome.iterations >= k,
        };
        if done {
            return outcome;
        }
        outcome.max_change = iteration();
        outcome.iterations += 1;
        tracing::trace!(
            iteration = outcome.iterations,
            max_change = outcome.max_change,
            "iteration done"
        );
    }
}

/// Solves sequentially, in place.
pub fn solve(grid: &mut Grid, params: &Params, stop: Stop) -> Outcome {
    iterate(stop, params.stop_tolerance, || {
        let red = grid.relax(Colour::Red, params.omega);
        let black = grid.relax(Colour::Black, params.omega);
        red.max(black)
    })
}

/// Solves with `threads` threads, each relaxing one block of rows per
/// half-iteration; bit-identical to [`solve`].
pub fn solve_threaded(
    grid: &mut Grid,
    params: &Params,
    stop: Stop,
    threads: usize,
) -> Result<Outcome, SolveError> {
    let blocks = row_blocks(grid.n(), threads.min(grid.n()).max(1))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()?;
    let width = grid.width();
    let mut ghosts = vec![(vec![0.0; width], vec![0.0; width]); blocks.len()];
    Ok(pool.install(|| {
        iterate(stop, params.stop_tolerance, || {
            let red = relax_blocks(grid, &blocks, &mut ghosts, Colour::Red, params.omega);
            let black = relax_blocks(grid, &blocks, &mut ghosts, Colour::Black, params.omega);
            red.max(black)
        })
    }))
}

/// One half-iteration with the blocks relaxed in parallel. Each block reads
/// copies of the rows bordering it, taken before the sweep; the cells it
/// reads there have the other colour and do not change during the sweep.
fn relax_blocks(
    grid: &mut Grid,
    blocks: &[Range<usize>],
    ghosts: &mut [(Vec<f64>, Vec<f64>)],
    colour: Colour,
    omega: f64,
) -> f64 {
    for (b, (above, below)) in blocks.iter().zip(ghosts.iter_mut()) {
        above.copy_from_slice(grid.row(b.start - 1));
        below.copy_from_slice(grid.row(b.end));
    }
    let width = grid.width();
    let (_, mut rest, _) = grid.split_interior();
    let mut parts = Vec::with_capacity(blocks.len());
    for b in blocks {
        let (head, tail) = rest.split_at_mut(b.len() * width);
        parts.push((head, b.start));
        rest = tail;
    }
    parts
        .into_par_iter()
        .zip(ghosts.par_iter())
        .map(|((rows, first), (above, below))| relax_rows(colour, omega, above, rows, below, first))
        .reduce(|| 0.0, f64::max)
}
