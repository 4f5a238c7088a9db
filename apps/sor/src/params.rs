//! The reference problem: grid size, fixed borders, relaxation factor and
//! stopping tolerance, as the Ibis SOR application sets them up.

use serde::{Deserialize, Serialize};

/// Fixed value of the top border row (row 0, corners included).
pub const TOP: f64 = 4.56;
/// Fixed value of the bottom border row (row `n + 1`, corners included).
pub const BOTTOM: f64 = 9.85;
/// Fixed value of the left border column (column 0, rows `1..=n`).
pub const LEFT: f64 = 7.32;
/// Fixed value of the right border column (column `n + 1`, rows `1..=n`).
pub const RIGHT: f64 = 6.88;
/// Initial value of every interior cell.
pub const INTERIOR: f64 = 0.0;
/// Convergence tolerance before scaling by `1 / (2 - omega_opt)`.
pub const TOLERANCE: f64 = 0.00001;
/// The Ibis code relaxes with 80% of the optimal factor ("magic factor").
pub const OMEGA_FACTOR: f64 = 0.8;

/// Initial value of cell `(i, j)` of the `(n + 2) x (n + 2)` grid.
///
/// Border rows win over border columns at the four corners, as in the Ibis
/// code's `initGrid`. The five-point stencil never reads a corner, so the
/// choice only shows in the grid checksum.
pub fn initial_value(n: usize, i: usize, j: usize) -> f64 {
    if i == 0 {
        TOP
    } else if i == n + 1 {
        BOTTOM
    } else if j == 0 {
        LEFT
    } else if j == n + 1 {
        RIGHT
    } else {
        INTERIOR
    }
}

/// The largest interior size: a grid of `(MAX_N + 2)^2` values takes 32 GiB.
pub const MAX_N: usize = 65_536;

/// Parameters of one SOR problem.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Interior size: the grid has `n + 2` rows and columns.
    pub n: usize,
    /// Relaxation factor used in the updates.
    pub omega: f64,
    /// An iteration whose largest change is at most this ends the solve.
    pub stop_tolerance: f64,
}

impl Params {
    /// The Ibis SOR setup for an `n x n` interior.
    ///
    /// With `r = (cos(pi / ncol) + cos(pi / nrow)) / 2` over the full grid
    /// size `ncol = nrow = n + 2`, the optimal factor is
    /// `omega_opt = 2 / (1 + sqrt(1 - r^2))`; the updates use
    /// `omega = 0.8 * omega_opt`, and the stopping tolerance is
    /// `1e-5 / (2 - omega_opt)`. The Ibis code scales the tolerance with the
    /// optimal factor, before the 0.8 reduction, and so does this.
    ///
    /// # Panics
    /// If `n` is more than [`MAX_N`].
    pub fn reference(n: usize) -> Params {
        assert!(
            n <= MAX_N,
            "an interior of {n} is more than the {MAX_N} a grid may have"
        );
        let size = (n + 2) as f64;
        let r =
            0.5 * (libm::cos(std::f64::consts::PI / size) + libm::cos(std::f64::consts::PI / size));
        let omega_opt = 2.0 / (1.0 + libm::sqrt(1.0 - r * r));
        Params {
            n,
            omega: omega_opt * OMEGA_FACTOR,
            stop_tolerance: TOLERANCE / (2.0 - omega_opt),
        }
    }

    /// Number of values in a full row, border columns included.
    pub fn width(&self) -> usize {
        self.n + 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_parameters_follow_the_formulas() {
        // n = 2: a 4 x 4 grid, r = cos(pi / 4), omega_opt = 2 / (1 + sqrt(1/2)).
        let p = Params::reference(2);
        let omega_opt = 2.0 / (1.0 + 0.5f64.sqrt());
        assert!((p.omega - 0.8 * omega_opt).abs() < 1e-15);
        assert!((p.stop_tolerance - 1e-5 / (2.0 - omega_opt)).abs() < 1e-18);
        // Large grids approach the optimal factor 2.
        let big = Params::reference(4096);
        assert!(big.omega > 1.59 && big.omega < 1.6);
    }

    #[test]
    fn borders_are_fixed_and_rows_win_at_corners() {
        let n = 3;
        assert_eq!(initial_value(n, 0, 0), TOP);
        assert_eq!(initial_value(n, 0, 4), TOP);
        assert_eq!(initial_value(n, 4, 0), BOTTOM);
        assert_eq!(initial_value(n, 4, 4), BOTTOM);
        assert_eq!(initial_value(n, 2, 0), LEFT);
        assert_eq!(initial_value(n, 2, 4), RIGHT);
        assert_eq!(initial_value(n, 2, 2), INTERIOR);
    }
}
