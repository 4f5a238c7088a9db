//! The row-distributed solver on the bulk-synchronous layer (`bsp`).
//!
//! Process `k` of `P` owns block `k` of [`row_blocks`]`(n, P)` as a
//! [`Block`]. Each half-iteration is one superstep: the process sends its
//! first row to process `k - 1` and its last row to `k + 1` (as raw slices),
//! `sync`s, stores the rows that arrived as its ghost rows and relaxes its
//! own rows (on `threads` rayon threads if asked). After both colours the
//! processes all-reduce the maximum of their changes, so every process sees
//! the same global change and [`try_iterate`] stops all of them after the
//! same iteration. Red/black ordering makes the result bit-identical to
//! [`solve()`](crate::solve()) for every `P` and thread count.
//!
//! ```
//! use sor::{gather_grid, solve, solve_distributed, Grid, Params, Stop};
//!
//! let params = Params::reference(11);
//! let mut grid = Grid::new(11);
//! let sequential = solve(&mut grid, &params, Stop::Converged);
//!
//! // Three processes as threads of this process.
//! let results = bsp::run_local(3, |bsp| {
//!     Ok(solve_distributed(bsp, &params, Stop::Converged, 1).and_then(|run| {
//!         assert_eq!(run.outcome.iterations, sequential.iterations);
//!         gather_grid(bsp, &run.block)
//!     }))
//! })?;
//! let gathered: Vec<Option<Grid>> = results.into_iter().collect::<Result<_, _>>()?;
//! assert_eq!(gathered[0].as_ref(), Some(&grid));
//! assert!(gathered[1].is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Instant;

use bsp::{Bsp, Op};
use thiserror::Error;

use crate::block::Block;
use crate::grid::{checksum, combine_rows, Grid};
use crate::params::{initial_value, Params};
use crate::partition::{row_blocks, PartitionError};
use crate::solve::{try_iterate, Outcome, Stop};
use crate::sweep::{Colour, SplitSweep};

/// Why a row-distributed solve, or gathering its result, failed.
#[derive(Debug, Error)]
pub enum DistributedError {
    /// The interior is larger than a grid may be.
    #[error("an interior of {n} rows is more than the {max} a grid may have", max = crate::params::MAX_N)]
    Size {
        /// Interior rows asked for.
        n: usize,
    },
    /// The interior rows cannot be split over the processes.
    #[error("cannot distribute the {n} interior rows over {p} processes: {source}")]
    Partition {
        /// Interior rows.
        n: usize,
        /// Processes.
        p: usize,
        /// Why.
        #[source]
        source: PartitionError,
    },
    /// The process's sweep threads could not be started.
    #[error("process {pid}: cannot start {threads} sweep threads: {source}")]
    ThreadPool {
        /// The process.
        pid: usize,
        /// Threads asked for.
        threads: usize,
        /// What rayon reported.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
    /// The bulk-synchronous layer failed (a peer died, a message was lost).
    #[error("process {pid}: {what}: {source}")]
    Bsp {
        /// The process.
        pid: usize,
        /// What this solver was doing.
        what: String,
        /// The layer's error, which names the superstep and the peer.
        #[source]
        source: bsp::Error,
    },
    /// A row arrived that is not a neighbour's boundary row of the right length.
    #[error(
        "process {pid}, iteration {iteration}: unexpected row of {len} values from process {src} \
         (expected rows of {width} values from the neighbours only)"
    )]
    UnexpectedRow {
        /// The receiving process.
        pid: usize,
        /// The iteration (from 1).
        iteration: u64,
        /// The sender.
        src: usize,
        /// Values in the row that arrived.
        len: usize,
        /// Values per row.
        width: usize,
    },
    /// A neighbour's boundary row did not arrive.
    #[error(
        "process {pid}, iteration {iteration}: no boundary row arrived from neighbour {neighbour}"
    )]
    MissingRow {
        /// The receiving process.
        pid: usize,
        /// The iteration (from 1).
        iteration: u64,
        /// The neighbour whose row is missing.
        neighbour: usize,
    },
    /// The gathered parts do not fit the grid.
    #[error("process {pid}: gathering the grid: {what}")]
    Gather {
        /// The gathering process.
        pid: usize,
        /// What did not fit.
        what: String,
    },
}

/// Seconds one process spent in each phase of a distributed solve.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phases {
    /// Setting up the block (and the sweep threads).
    pub init: f64,
    /// Relaxing its own rows.
    pub relax: f64,
    /// Exchanging ghost rows: sending, `sync`, storing what arrived.
    pub exchange: f64,
    /// All-reducing the largest change of each iteration.
    pub reduce: f64,
}

/// One process's result of [`solve_distributed`].
#[derive(Clone, Debug)]
pub struct Distributed {
    /// The process's rows after the last iteration.
    pub block: Block,
    /// Iterations run and the global largest change of the last one: equal
    /// on every process.
    pub outcome: Outcome,
    /// Where this process's time went.
    pub phases: Phases,
}

/// Solves the reference problem `params` with rows distributed over the
/// processes of `bsp`, on `threads` threads per process (1: no extra
/// threads). Every process calls it with the same arguments; each gets its
/// own block back (see [`gather_checksum`] and [`gather_grid`]).
///
/// # Errors
/// [`DistributedError::Size`] if `params.n` is more than
/// [`MAX_N`](crate::params::MAX_N); [`DistributedError::Partition`] if there are more
/// processes than rows; otherwise whatever failed, naming the process.
pub fn solve_distributed(
    bsp: &mut Bsp,
    params: &Params,
    stop: Stop,
    threads: usize,
) -> Result<Distributed, DistributedError> {
    let init_start = Instant::now();
    let (pid, p, n) = (bsp.pid(), bsp.nprocs(), params.n);
    // Parameters are plain data: their size is checked here, before any grid is made.
    if n > crate::params::MAX_N {
        return Err(DistributedError::Size { n });
    }
    let rows = row_blocks(n, p)
        .map_err(|source| DistributedError::Partition { n, p, source })?
        .swap_remove(pid);
    let mut block = Block::new(n, rows.clone());
    let width = block.width();
    let threads = threads.max(1);
    let mut split = if threads > 1 {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|source| DistributedError::ThreadPool {
                pid,
                threads,
                source,
            })?;
        let sweep = SplitSweep::new(rows.len(), width, threads).map_err(|source| {
            DistributedError::Partition {
                n: rows.len(),
                p: threads,
                source,
            }
        })?;
        Some((pool, sweep))
    } else {
        None
    };
    let above = pid.checked_sub(1);
    let below = (pid + 1 < p).then_some(pid + 1);
    tracing::debug!(pid, ?rows, threads, "block ready");
    let mut phases = Phases {
        init: init_start.elapsed().as_secs_f64(),
        ..Phases::default()
    };

    let mut iteration = 0u64;
    let outcome = try_iterate(stop, params.stop_tolerance, || {
        iteration += 1;
        let mut local = 0.0f64;
        for colour in Colour::BOTH {
            let t = Instant::now();
            exchange(bsp, &mut block, above, below, iteration)?;
            let t_relaxed = Instant::now();
            phases.exchange += (t_relaxed - t).as_secs_f64();
            let change = match &mut split {
                None => block.relax(colour, params.omega),
                Some((pool, sweep)) => {
                    pool.install(|| block.relax_split(colour, params.omega, sweep))
                }
            };
            phases.relax += t_relaxed.elapsed().as_secs_f64();
            local = local.max(change);
        }
        let t = Instant::now();
        let global = bsp
            .all_reduce(local, Op::Max)
            .map_err(|source| DistributedError::Bsp {
                pid,
                what: format!("all-reducing the change of iteration {iteration}"),
                source,
            })?;
        phases.reduce += t.elapsed().as_secs_f64();
        Ok(global)
    })?;
    tracing::debug!(
        pid,
        iterations = outcome.iterations,
        relax = phases.relax,
        exchange = phases.exchange,
        reduce = phases.reduce,
        "solved"
    );
    Ok(Distributed {
        block,
        outcome,
        phases,
    })
}

/// One superstep: the boundary rows go to the neighbours, theirs become the
/// ghost rows.
fn exchange(
    bsp: &mut Bsp,
    block: &mut Block,
    above: Option<usize>,
    below: Option<usize>,
    iteration: u64,
) -> Result<(), DistributedError> {
    let pid = bsp.pid();
    let bsp_err = |what: &str| {
        let what = format!("{what} in iteration {iteration}");
        move |source| DistributedError::Bsp { pid, what, source }
    };
    if let Some(k) = above {
        bsp.send_slice(k, block.first_row())
            .map_err(bsp_err("sending the first row up"))?;
    }
    if let Some(k) = below {
        bsp.send_slice(k, block.last_row())
            .map_err(bsp_err("sending the last row down"))?;
    }
    bsp.sync().map_err(bsp_err("exchanging ghost rows"))?;
    let (mut got_above, mut got_below) = (false, false);
    while let Some((src, row)) = bsp
        .recv_slice::<f64>()
        .map_err(bsp_err("reading ghost rows"))?
    {
        let width = block.width();
        match (Some(src) == above, Some(src) == below) {
            (true, _) if row.len() == width && !got_above => {
                block.set_ghost_above(&row);
                got_above = true;
            }
            (_, true) if row.len() == width && !got_below => {
                block.set_ghost_below(&row);
                got_below = true;
            }
            _ => {
                return Err(DistributedError::UnexpectedRow {
                    pid,
                    iteration,
                    src,
                    len: row.len(),
                    width,
                })
            }
        }
    }
    for (neighbour, got) in [(above, got_above), (below, got_below)] {
        if let (Some(neighbour), false) = (neighbour, got) {
            return Err(DistributedError::MissingRow {
                pid,
                iteration,
                neighbour,
            });
        }
    }
    Ok(())
}

/// The checksum of the whole distributed grid, equal to
/// [`Grid::checksum`] of the gathered grid: every process hashes its own
/// rows, and process 0 combines the row checksums in row order with those
/// of the fixed border rows. `Some` on process 0, `None` elsewhere; every
/// process calls it.
///
/// # Errors
/// If the gather fails or delivers parts that do not fit the grid.
pub fn gather_checksum(bsp: &mut Bsp, block: &Block) -> Result<Option<u64>, DistributedError> {
    let pid = bsp.pid();
    let sums = block.row_checksums();
    let parts = bsp
        .gather(0, &sums)
        .map_err(|source| DistributedError::Bsp {
            pid,
            what: "gathering row checksums".into(),
            source,
        })?;
    let Some(parts) = parts else {
        return Ok(None);
    };
    let n = block.width() - 2;
    let rows: usize = parts.iter().map(Vec::len).sum();
    if rows != n {
        return Err(DistributedError::Gather {
            pid,
            what: format!("{rows} row checksums arrived for {n} interior rows"),
        });
    }
    let border = |i: usize| {
        checksum(
            &(0..n + 2)
                .map(|j| initial_value(n, i, j))
                .collect::<Vec<_>>(),
        )
    };
    let all = std::iter::once(border(0))
        .chain(parts.into_iter().flatten())
        .chain(std::iter::once(border(n + 1)));
    Ok(Some(combine_rows(all)))
}

/// The whole grid at process 0 (`None` elsewhere): every process sends its
/// rows there in one superstep. Meant for checking small grids; every
/// process calls it.
///
/// # Errors
/// If the superstep fails or a part does not fit the grid.
pub fn gather_grid(bsp: &mut Bsp, block: &Block) -> Result<Option<Grid>, DistributedError> {
    let pid = bsp.pid();
    let bsp_err = |what: &'static str| {
        move |source| DistributedError::Bsp {
            pid,
            what: what.into(),
            source,
        }
    };
    bsp.send_slice(0, block.rows())
        .map_err(bsp_err("sending rows to process 0"))?;
    bsp.sync().map_err(bsp_err("gathering the grid"))?;
    if pid != 0 {
        return Ok(None);
    }
    let n = block.width() - 2;
    let blocks = row_blocks(n, bsp.nprocs()).map_err(|source| DistributedError::Partition {
        n,
        p: bsp.nprocs(),
        source,
    })?;
    let mut grid = Grid::new(n);
    let mut arrived = vec![false; blocks.len()];
    while let Some((src, rows)) = bsp
        .recv_slice::<f64>()
        .map_err(bsp_err("reading gathered rows"))?
    {
        let range = blocks[src].clone();
        if rows.len() != range.len() * block.width() || arrived[src] {
            return Err(DistributedError::Gather {
                pid,
                what: format!(
                    "process {src} sent {} values for rows {range:?}",
                    rows.len()
                ),
            });
        }
        grid.rows_mut(range).copy_from_slice(&rows);
        arrived[src] = true;
    }
    if let Some(missing) = arrived.iter().position(|a| !a) {
        return Err(DistributedError::Gather {
            pid,
            what: format!("no rows arrived from process {missing}"),
        });
    }
    Ok(Some(grid))
}
