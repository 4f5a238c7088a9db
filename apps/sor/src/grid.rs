//! The whole `(n + 2) x (n + 2)` grid, row-major, borders included.

use std::ops::Range;

use crate::params::initial_value;
use crate::sweep::{relax_rows, Colour};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a over the little-endian bytes of the values' bit patterns:
/// equal only for bit-identical data.
pub fn checksum(values: &[f64]) -> u64 {
    values
        .iter()
        .fold(FNV_OFFSET, |h, v| fnv_bytes(h, &v.to_bits().to_le_bytes()))
}

/// [`checksum`] of each row of `rows`, which holds whole rows of `width`
/// values.
///
/// # Panics
/// If `width` is zero.
pub fn row_checksums(rows: &[f64], width: usize) -> Vec<u64> {
    rows.chunks(width).map(checksum).collect()
}

/// The checksum of consecutive rows from the [`checksum`]s of the rows, in
/// row order: 64-bit FNV-1a over their little-endian bytes.
///
/// This is how [`Grid::checksum`] sums a grid, so that row-distributed
/// processes can each hash their own rows in parallel and one of them
/// combine the results in row order.
pub fn combine_rows(row_sums: impl IntoIterator<Item = u64>) -> u64 {
    row_sums
        .into_iter()
        .fold(FNV_OFFSET, |h, s| fnv_bytes(h, &s.to_le_bytes()))
}

fn fnv_bytes(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
}

/// The grid of one SOR problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    n: usize,
    data: Vec<f64>,
}

impl Grid {
    /// The initial grid for an `n x n` interior: fixed borders, interior
    /// at [`INTERIOR`](crate::params::INTERIOR).
    ///
    /// # Panics
    /// If `n` is more than [`MAX_N`](crate::params::MAX_N).
    pub fn new(n: usize) -> Grid {
        assert!(
            n <= crate::params::MAX_N,
            "an interior of {n} is more than the {} a grid may have",
            crate::params::MAX_N
        );
        let w = n + 2;
        let mut data = Vec::with_capacity(w * w);
        for i in 0..w {
            data.extend((0..w).map(|j| initial_value(n, i, j)));
        }
        Grid { n, data }
    }

    /// Interior size.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Values per row, border columns included (`n + 2`).
    pub fn width(&self) -> usize {
        self.n + 2
    }

    /// All values, row-major.
    pub fn values(&self) -> &[f64] {
        &self.data
    }

    /// Row `i` (0 and `n + 1` are the fixed borders).
    pub fn row(&self, i: usize) -> &[f64] {
        let w = self.width();
        &self.data[i * w..(i + 1) * w]
    }

    /// Value at row `i`, column `j`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.width() + j]
    }

    /// Rows `range`, contiguous, for gathering a block's result.
    pub fn rows_mut(&mut self, range: Range<usize>) -> &mut [f64] {
        let w = self.width();
        &mut self.data[range.start * w..range.end * w]
    }

    /// The border row above the interior, the interior rows, and the border
    /// row below, borrowed at once.
    pub fn split_interior(&mut self) -> (&[f64], &mut [f64], &[f64]) {
        let w = self.width();
        let (top, rest) = self.data.split_at_mut(w);
        let (interior, bottom) = rest.split_at_mut(self.n * w);
        (top, interior, bottom)
    }

    /// One half-iteration over the whole interior; returns the largest
    /// change. The same kernel as a row block's, with the fixed border rows
    /// as its ghost rows.
    pub fn relax(&mut self, colour: Colour, omega: f64) -> f64 {
        let (above, interior, below) = self.split_interior();
        relax_rows(colour, omega, above, interior, below, 1)
    }

    /// Checksum of the whole grid, borders included: [`combine_rows`] over
    /// the [`checksum`] of every row. Equal only for bit-identical grids
    /// (up to hash collisions).
    pub fn checksum(&self) -> u64 {
        combine_rows(row_checksums(&self.data, self.width()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{BOTTOM, LEFT, RIGHT, TOP};

    #[test]
    fn new_grid_has_borders_and_zero_interior() {
        let g = Grid::new(2);
        assert_eq!(g.row(0), &[TOP; 4]);
        assert_eq!(g.row(3), &[BOTTOM; 4]);
        assert_eq!(g.row(1), &[LEFT, 0.0, 0.0, RIGHT]);
    }

    #[test]
    fn checksum_sees_every_bit() {
        let a = Grid::new(3);
        let mut b = a.clone();
        b.rows_mut(2..3)[1] = f64::from_bits(1); // smallest subnormal
        assert_ne!(a.checksum(), b.checksum());
        b.rows_mut(2..3)[1] = -0.0;
        assert_ne!(a.checksum(), b.checksum());
        assert_eq!(checksum(&[]), FNV_OFFSET);
    }

    #[test]
    fn checksum_is_fnv1a_of_bytes_and_of_row_sums() {
        // FNV-1a of the single byte "a" is the published test vector.
        assert_eq!(fnv_bytes(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        let v = [1.5f64, -2.25];
        let mut bytes = Vec::new();
        for x in v {
            bytes.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        assert_eq!(checksum(&v), fnv_bytes(FNV_OFFSET, &bytes));

        let g = Grid::new(3);
        let rows: Vec<u64> = (0..5).map(|i| checksum(g.row(i))).collect();
        assert_eq!(row_checksums(g.values(), 5), rows);
        assert_eq!(g.checksum(), combine_rows(rows.iter().copied()));
        // Rows in another order sum differently.
        assert_ne!(g.checksum(), combine_rows(rows.iter().rev().copied()));
    }
}
