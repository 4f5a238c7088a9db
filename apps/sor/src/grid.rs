//! The whole `(n + 2) x (n + 2)` grid, row-major, borders included.

use std::ops::Range;

use crate::params::initial_value;
use crate::sweep::{relax_rows, Colour};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a over the little-endian bytes of the values' bit patterns:
/// equal only for bit-identical data.
pub fn checksum(values: &[f64]) -> u64 {
    values.iter().fold(FNV_OFFSET, |h, v| {
        v.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
    })
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
    pub fn new(n: usize) -> Grid {
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

    /// [`checksum`] of the whole grid.
    pub fn checksum(&self) -> u64 {
        checksum(&self.data)
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
}
