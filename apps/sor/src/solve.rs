//! The iteration loop and its sequential and multi-threaded drivers.

use std::convert::Infallible;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::grid::Grid;
use crate::params::Params;
use crate::partition::PartitionError;
use crate::sweep::{Colour, SplitSweep};

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
    match try_iterate(stop, tolerance, || Ok::<f64, Infallible>(iteration())) {
        Ok(outcome) => outcome,
        Err(never) => match never {},
    }
}

/// [`iterate`] for iterations that can fail (a distributed iteration
/// exchanges rows): the first error ends the loop and is returned.
pub fn try_iterate<E>(
    stop: Stop,
    tolerance: f64,
    mut iteration: impl FnMut() -> Result<f64, E>,
) -> Result<Outcome, E> {
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
            return Ok(outcome);
        }
        outcome.max_change = iteration()?;
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
/// half-iteration (a [`SplitSweep`] of the interior); bit-identical to
/// [`solve`].
pub fn solve_threaded(
    grid: &mut Grid,
    params: &Params,
    stop: Stop,
    threads: usize,
) -> Result<Outcome, SolveError> {
    let mut sweep = SplitSweep::new(grid.n(), grid.width(), threads.max(1))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()?;
    Ok(pool.install(|| {
        iterate(stop, params.stop_tolerance, || {
            let mut half = |colour| {
                let (above, interior, below) = grid.split_interior();
                sweep.relax(colour, params.omega, above, interior, below, 1)
            };
            let red = half(Colour::Red);
            let black = half(Colour::Black);
            red.max(black)
        })
    }))
}
