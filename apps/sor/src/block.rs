//! A process's share of the grid in a row-distributed run: its rows plus
//! one ghost row above and below.
//!
//! Per half-iteration, process `k` sends [`Block::first_row`] to process
//! `k - 1` and [`Block::last_row`] to `k + 1`, stores what arrives with
//! [`Block::set_ghost_above`] / [`Block::set_ghost_below`], and calls
//! [`Block::relax`]; after both colours the processes all-reduce the maximum
//! of their changes. The first block's upper ghost and the last block's lower
//! ghost are the fixed border rows and are never exchanged.

use std::ops::Range;

use crate::grid::row_checksums;
use crate::params::initial_value;
use crate::sweep::{relax_rows, Colour, SplitSweep};

/// Rows `range` of an `n x n` problem with their ghost rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    range: Range<usize>,
    width: usize,
    /// `range.len() + 2` rows: ghost above, owned rows, ghost below.
    data: Vec<f64>,
}

impl Block {
    /// The block of rows `range` (a sub-range of `1..=n`) in its initial
    /// state; the ghost rows hold the initial values of the rows they mirror.
    ///
    /// # Panics
    /// If `n` is more than [`MAX_N`](crate::params::MAX_N), or `range` is empty or leaves
    /// `1..=n`.
    pub fn new(n: usize, range: Range<usize>) -> Block {
        assert!(
            n <= crate::params::MAX_N,
            "an interior of {n} is more than the {} a grid may have",
            crate::params::MAX_N
        );
        assert!(
            !range.is_empty() && range.start >= 1 && range.end <= n + 1,
            "block rows {range:?} are not a non-empty part of 1..={n}"
        );
        let width = n + 2;
        let mut data = Vec::with_capacity((range.len() + 2) * width);
        for i in range.start - 1..range.end + 1 {
            data.extend((0..width).map(|j| initial_value(n, i, j)));
        }
        Block { range, width, data }
    }

    /// The global rows this block owns.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Values per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The owned rows, contiguous and row-major.
    pub fn rows(&self) -> &[f64] {
        &self.data[self.width..self.data.len() - self.width]
    }

    /// The first owned row: the upper neighbour's lower ghost row.
    pub fn first_row(&self) -> &[f64] {
        &self.data[self.width..2 * self.width]
    }

    /// The last owned row: the lower neighbour's upper ghost row.
    pub fn last_row(&self) -> &[f64] {
        let end = self.data.len() - self.width;
        &self.data[end - self.width..end]
    }

    /// Stores the upper neighbour's last row.
    ///
    /// # Panics
    /// If `row` is not one grid row long.
    pub fn set_ghost_above(&mut self, row: &[f64]) {
        self.data[..self.width].copy_from_slice(row);
    }

    /// Stores the lower neighbour's first row.
    ///
    /// # Panics
    /// If `row` is not one grid row long.
    pub fn set_ghost_below(&mut self, row: &[f64]) {
        let start = self.data.len() - self.width;
        self.data[start..].copy_from_slice(row);
    }

    /// One half-iteration on the owned rows; returns their largest change.
    pub fn relax(&mut self, colour: Colour, omega: f64) -> f64 {
        let w = self.width;
        let (above, rest) = self.data.split_at_mut(w);
        let (rows, below) = rest.split_at_mut(rest.len() - w);
        relax_rows(colour, omega, above, rows, below, self.range.start)
    }

    /// [`relax`](Block::relax) with the owned rows cut into the parts of
    /// `sweep` and relaxed by the threads of the current rayon pool;
    /// bit-identical to [`relax`](Block::relax).
    ///
    /// # Panics
    /// If `sweep` was not made for this block's rows and width.
    pub fn relax_split(&mut self, colour: Colour, omega: f64, sweep: &mut SplitSweep) -> f64 {
        let w = self.width;
        let (above, rest) = self.data.split_at_mut(w);
        let (rows, below) = rest.split_at_mut(rest.len() - w);
        sweep.relax(colour, omega, above, rows, below, self.range.start)
    }

    /// The [`checksum`](crate::checksum) of each owned row, in order: this
    /// block's part of [`Grid::checksum`](crate::Grid::checksum).
    pub fn row_checksums(&self) -> Vec<u64> {
        row_checksums(self.rows(), self.width)
    }
}
