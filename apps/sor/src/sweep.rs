//! One half-iteration of red/black SOR on a block of rows: the kernel every
//! version (sequential, threaded, distributed) runs.
//!
//! In a half-iteration only cells of one colour change, and each of them
//! reads only its four neighbours, which all have the other colour. So the
//! cells of a half-iteration are independent: updating them in any order, in
//! any split into row blocks, gives bit-identical results, provided each
//! block sees its neighbours' boundary rows (ghost rows) as they were at the
//! start of the half-iteration.

use std::ops::Range;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::partition::{row_blocks, PartitionError};

/// The two colours of the checkerboard, in the order an iteration updates
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Colour {
    /// Cells `(i, j)` with `i + j` odd; updated first.
    Red,
    /// Cells `(i, j)` with `i + j` even; updated second.
    Black,
}

impl Colour {
    /// Both colours in update order.
    pub const BOTH: [Colour; 2] = [Colour::Red, Colour::Black];

    /// First interior column of this colour in global row `row`.
    pub fn first_column(self, row: usize) -> usize {
        let parity = match self {
            Colour::Red => 0,
            Colour::Black => 1,
        };
        // Red starts at column 1 on even rows and 2 on odd rows.
        1 + ((row + parity) & 1)
    }
}

/// Relaxes the cells of `colour` in `rows` and returns the largest change.
///
/// `rows` holds whole grid rows (border columns included) of length
/// `above.len()`, the first being global row `first_row`; `above` and
/// `below` are the rows just outside the block (fixed border rows or ghost
/// copies of a neighbour's rows). Each cell moves towards the mean of its
/// four neighbours: `g += omega * (mean - g)`. The change reported is
/// `|mean - g|`, the Ibis code's measure (the step divided by omega).
///
/// # Panics
/// If `rows` is not a whole number of rows of `above`'s length, `below` has
/// another length, or rows are narrower than 3 columns.
pub fn relax_rows(
    colour: Colour,
    omega: f64,
    above: &[f64],
    rows: &mut [f64],
    below: &[f64],
    first_row: usize,
) -> f64 {
    let width = above.len();
    assert!(width >= 3, "rows need at least 3 columns, got {width}");
    assert_eq!(below.len(), width, "ghost rows differ in length");
    assert_eq!(rows.len() % width, 0, "block is not a whole number of rows");
    let count = rows.len() / width;
    let mut max_change = 0.0f64;
    for k in 0..count {
        let (before, rest) = rows.split_at_mut(k * width);
        let (row, after) = rest.split_at_mut(width);
        let up = if k == 0 {
            above
        } else {
            &before[(k - 1) * width..]
        };
        let down = if k + 1 == count {
            below
        } else {
            &after[..width]
        };
        let change = relax_row(colour.first_column(first_row + k), omega, up, row, down);
        if change > max_change {
            max_change = change;
        }
    }
    max_change
}

/// [`relax_rows`] on a block of rows cut into consecutive parts that the
/// threads of the current rayon pool relax at once.
///
/// Each part reads copies of the rows bordering it, taken before the
/// sweep; the cells it reads there have the other colour and do not change
/// during the half-iteration, so the result is bit-identical to
/// [`relax_rows`] on the whole block, for any number of parts. The copies
/// are kept between calls.
#[derive(Clone, Debug)]
pub struct SplitSweep {
    /// Row ranges relative to the block's first row.
    parts: Vec<Range<usize>>,
    width: usize,
    /// Per part: copies of the row above and the row below it.
    ghosts: Vec<(Vec<f64>, Vec<f64>)>,
}

impl SplitSweep {
    /// A sweep of `rows` rows of `width` values in `parts` parts (fewer if
    /// there are fewer rows), balanced as [`row_blocks`] balances them.
    ///
    /// # Errors
    /// [`PartitionError`] if `rows` or `parts` is zero.
    pub fn new(rows: usize, width: usize, parts: usize) -> Result<SplitSweep, PartitionError> {
        let parts: Vec<Range<usize>> = row_blocks(rows, parts.min(rows))?
            .into_iter()
            .map(|r| r.start - 1..r.end - 1)
            .collect();
        let ghosts = vec![(vec![0.0; width], vec![0.0; width]); parts.len()];
        Ok(SplitSweep {
            parts,
            width,
            ghosts,
        })
    }

    /// Number of parts.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Like [`relax_rows`] with the same arguments, the parts relaxed in
    /// parallel on the current rayon pool (see `rayon::ThreadPool::install`).
    ///
    /// # Panics
    /// If `rows` does not hold exactly the rows and width this sweep was made
    /// for, or as [`relax_rows`] does.
    pub fn relax(
        &mut self,
        colour: Colour,
        omega: f64,
        above: &[f64],
        rows: &mut [f64],
        below: &[f64],
        first_row: usize,
    ) -> f64 {
        let w = self.width;
        let count = self.parts.last().map_or(0, |p| p.end);
        assert_eq!(
            rows.len(),
            count * w,
            "the sweep was made for {count} rows of {w} values"
        );
        for (part, (up, down)) in self.parts.iter().zip(self.ghosts.iter_mut()) {
            up.copy_from_slice(if part.start == 0 {
                above
            } else {
                &rows[(part.start - 1) * w..part.start * w]
            });
            down.copy_from_slice(if part.end == count {
                below
            } else {
                &rows[part.end * w..(part.end + 1) * w]
            });
        }
        let mut pieces = Vec::with_capacity(self.parts.len());
        let mut rest = rows;
        for part in &self.parts {
            let (head, tail) = rest.split_at_mut(part.len() * w);
            pieces.push((head, first_row + part.start));
            rest = tail;
        }
        pieces
            .into_par_iter()
            .zip(self.ghosts.par_iter())
            .map(|((rows, first), (up, down))| relax_rows(colour, omega, up, rows, down, first))
            .reduce(|| 0.0, f64::max)
    }
}

/// Relaxes every second cell of `row` starting at column `start`.
#[inline]
fn relax_row(start: usize, omega: f64, up: &[f64], row: &mut [f64], down: &[f64]) -> f64 {
    let mut left = row[start - 1];
    let mut max_change = 0.0f64;
    // Pairs (cell, its right neighbour): the neighbour has the other colour,
    // so it is unchanged here and becomes the next cell's left neighbour.
    // Iterating this way avoids per-cell bounds checks; a trailing single
    // value is the right border column.
    let cells = row[start..].chunks_exact_mut(2);
    let verticals = up[start..]
        .iter()
        .step_by(2)
        .zip(down[start..].iter().step_by(2));
    for (pair, (&u, &d)) in cells.zip(verticals) {
        let right = pair[1];
        let mean = (u + d + left + right) / 4.0;
        let diff = mean - pair[0];
        let change = diff.abs();
        if change > max_change {
            max_change = change;
        }
        pair[0] += omega * diff;
        left = right;
    }
    max_change
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_alternate_like_a_checkerboard() {
        for row in 1..5 {
            let red = Colour::Red.first_column(row);
            let black = Colour::Black.first_column(row);
            assert_eq!((row + red) % 2, 1);
            assert_eq!((row + black) % 2, 0);
            assert!(red == 1 || black == 1);
        }
    }

    #[test]
    fn one_cell_moves_towards_its_neighbour_mean() {
        // 3 x 3 block: only the centre (1, 1) is interior, colour black.
        let above = [0.0, 4.0, 0.0];
        let mut rows = [8.0, 1.0, 2.0];
        let below = [0.0, 6.0, 0.0];
        let change = relax_rows(Colour::Black, 0.5, &above, &mut rows, &below, 1);
        // mean = (4 + 6 + 8 + 2) / 4 = 5; g = 1 + 0.5 * (5 - 1) = 3.
        assert_eq!(change, 4.0);
        assert_eq!(rows, [8.0, 3.0, 2.0]);
        // Red has no cell in this row.
        assert_eq!(
            relax_rows(Colour::Red, 0.5, &above, &mut rows, &below, 1),
            0.0
        );
        assert_eq!(rows, [8.0, 3.0, 2.0]);
    }

    #[test]
    fn split_sweep_matches_one_sweep_bit_for_bit() {
        // 7 rows of 9 values with distinct, irregular values.
        let (width, count) = (9, 7);
        let cell = |i: usize, j: usize| ((i * 31 + j * 17) % 13) as f64 * 0.37 + i as f64;
        let above: Vec<f64> = (0..width).map(|j| cell(0, j)).collect();
        let below: Vec<f64> = (0..width).map(|j| cell(count + 1, j)).collect();
        let block: Vec<f64> = (1..=count)
            .flat_map(|i| (0..width).map(move |j| cell(i, j)))
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for colour in Colour::BOTH {
            let mut whole = block.clone();
            let expected = relax_rows(colour, 1.3, &above, &mut whole, &below, 5);
            assert_ne!(whole, block);
            for parts in [1, 2, 3, 7, 20] {
                let mut sweep = SplitSweep::new(count, width, parts).unwrap();
                assert_eq!(sweep.parts(), parts.min(count));
                let mut split = block.clone();
                let change =
                    pool.install(|| sweep.relax(colour, 1.3, &above, &mut split, &below, 5));
                assert_eq!(change.to_bits(), expected.to_bits(), "{parts} parts");
                assert_eq!(split, whole, "{parts} parts, {colour:?}");
            }
        }
        assert!(SplitSweep::new(0, width, 2).is_err());
    }
}
