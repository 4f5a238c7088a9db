//! One half-iteration of red/black SOR on a block of rows: the kernel every
//! version (sequential, threaded, distributed) runs.
//!
//! In a half-iteration only cells of one colour change, and each of them
//! reads only its four neighbours, which all have the other colour. So the
//! cells of a half-iteration are independent: updating them in any order, in
//! any split into row blocks, gives bit-identical results, provided each
//! block sees its neighbours' boundary rows (ghost rows) as they were at the
//! start of the half-iteration.

use serde::{Deserialize, Serialize};

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
}
