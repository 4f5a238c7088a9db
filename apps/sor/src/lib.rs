//! Red/black successive over-relaxation (SOR) for the Laplace equation on
//! an `(n + 2) x (n + 2)` grid with fixed borders, after the Ibis SOR
//! application.
//!
//! The building block is [`relax_rows`]: one half-iteration (one colour) on
//! a block of rows, given the row above and the row below. The sequential
//! solver ([`solve()`]) applies it to the whole interior with the border rows
//! as neighbours; the threaded solver ([`solve_threaded`]) to one block per
//! thread; the row-distributed solver ([`solve_distributed`], on the `bsp`
//! layer) gives each process a [`Block`] from [`row_blocks`], exchanges
//! ghost rows before every half-iteration and all-reduces the largest change
//! after each iteration, driving the loop with [`try_iterate`]. Red/black
//! ordering makes all of them bit-identical. The example below plays the
//! row-distributed algorithm by hand in one thread.
//!
//! ```
//! use sor::{row_blocks, solve, Block, Colour, Grid, Params, Stop};
//!
//! let params = Params::reference(10);
//! let mut grid = Grid::new(10);
//! let outcome = solve(&mut grid, &params, Stop::Converged);
//! assert!(outcome.max_change <= params.stop_tolerance);
//!
//! // The same iterations on three row blocks that trade ghost rows.
//! let mut blocks: Vec<Block> = row_blocks(10, 3).unwrap()
//!     .into_iter().map(|rows| Block::new(10, rows)).collect();
//! for _ in 0..outcome.iterations {
//!     for colour in Colour::BOTH {
//!         for k in 1..blocks.len() {
//!             let above = blocks[k - 1].last_row().to_vec();
//!             let below = blocks[k].first_row().to_vec();
//!             blocks[k].set_ghost_above(&above);
//!             blocks[k - 1].set_ghost_below(&below);
//!         }
//!         for b in &mut blocks {
//!             b.relax(colour, params.omega);
//!         }
//!     }
//! }
//! let mut gathered = Grid::new(10);
//! for b in &blocks {
//!     gathered.rows_mut(b.range()).copy_from_slice(b.rows());
//! }
//! assert_eq!(gathered.checksum(), grid.checksum());
//! ```

#![warn(missing_docs)]

pub mod block;
pub mod distributed;
pub mod grid;
pub mod params;
pub mod partition;
pub mod solve;
pub mod sweep;

pub use block::Block;
pub use distributed::{
    gather_checksum, gather_grid, solve_distributed, Distributed, DistributedError, Phases,
};
pub use grid::{checksum, combine_rows, row_checksums, Grid};
pub use params::Params;
pub use partition::{row_blocks, PartitionError};
pub use solve::{iterate, solve, solve_threaded, try_iterate, Outcome, SolveError, Stop};
pub use sweep::{relax_rows, Colour, SplitSweep};
