//! The sequential, threaded and row-distributed solvers agree bit for bit,
//! and the first iteration matches a hand computation.

use sor::{iterate, row_blocks, solve, solve_threaded, Block, Colour, Grid, Outcome, Params, Stop};

/// A row-distributed run simulated in one process: `parts` blocks that copy
/// ghost rows to each other before every half-iteration and reduce the
/// largest change after each iteration, then gather into one grid.
fn distributed(n: usize, parts: usize, params: &Params, stop: Stop) -> (Grid, Outcome) {
    let mut blocks: Vec<Block> = row_blocks(n, parts)
        .unwrap()
        .into_iter()
        .map(|rows| Block::new(n, rows))
        .collect();
    let outcome = iterate(stop, params.stop_tolerance, || {
        let mut local = vec![0.0f64; blocks.len()];
        for colour in Colour::BOTH {
            // Every block sends before any block computes.
            let firsts: Vec<Vec<f64>> = blocks.iter().map(|b| b.first_row().to_vec()).collect();
            let lasts: Vec<Vec<f64>> = blocks.iter().map(|b| b.last_row().to_vec()).collect();
            for k in 0..blocks.len() {
                if k > 0 {
                    blocks[k].set_ghost_above(&lasts[k - 1]);
                }
                if k + 1 < blocks.len() {
                    blocks[k].set_ghost_below(&firsts[k + 1]);
                }
            }
            for (b, m) in blocks.iter_mut().zip(local.iter_mut()) {
                *m = m.max(b.relax(colour, params.omega));
            }
        }
        local.into_iter().fold(0.0, f64::max)
    });
    let mut grid = Grid::new(n);
    for b in &blocks {
        grid.rows_mut(b.range()).copy_from_slice(b.rows());
    }
    (grid, outcome)
}

fn sequential(n: usize, params: &Params, stop: Stop) -> (Grid, Outcome) {
    let mut grid = Grid::new(n);
    let outcome = solve(&mut grid, params, stop);
    (grid, outcome)
}

#[test]
fn row_blocks_match_the_sequential_grid_bit_for_bit() {
    // 37 rows split over 2, 3 and 4 blocks leaves a remainder each time.
    let n = 37;
    let params = Params::reference(n);
    for stop in [Stop::Converged, Stop::Iterations(25)] {
        let (seq_grid, seq_outcome) = sequential(n, &params, stop);
        for parts in 1..=4 {
            let (grid, outcome) = distributed(n, parts, &params, stop);
            assert_eq!(outcome.iterations, seq_outcome.iterations, "P = {parts}");
            assert_eq!(
                outcome.max_change.to_bits(),
                seq_outcome.max_change.to_bits()
            );
            assert_eq!(grid, seq_grid, "P = {parts}, {stop:?}");
            assert_eq!(grid.checksum(), seq_grid.checksum());
        }
    }
}

#[test]
fn converged_run_stops_at_the_first_iteration_under_the_tolerance() {
    let n = 37;
    let params = Params::reference(n);
    let (_, outcome) = sequential(n, &params, Stop::Converged);
    assert!(outcome.iterations > 1);
    assert!(outcome.max_change <= params.stop_tolerance);
    let (_, before) = sequential(n, &params, Stop::Iterations(outcome.iterations - 1));
    assert!(before.max_change > params.stop_tolerance);
}

#[test]
fn threads_match_the_sequential_grid_bit_for_bit() {
    let n = 23;
    let params = Params::reference(n);
    for stop in [Stop::Converged, Stop::Iterations(7)] {
        let (seq_grid, seq_outcome) = sequential(n, &params, stop);
        for threads in [1, 2, 3, 5, 64] {
            let mut grid = Grid::new(n);
            let outcome = solve_threaded(&mut grid, &params, stop, threads).unwrap();
            assert_eq!(outcome.iterations, seq_outcome.iterations);
            assert_eq!(grid, seq_grid, "{threads} threads, {stop:?}");
        }
    }
}

#[test]
fn first_iteration_matches_a_hand_computation() {
    // 4 x 4 grid, interior cells (1,1) (1,2) (2,1) (2,2), all starting at 0.
    let params = Params::reference(2);
    let w = params.omega;
    let (top, bottom, left, right) = (4.56, 9.85, 7.32, 6.88);
    // Red (i + j odd) first, reading the initial zeros.
    let mean12 = (top + 0.0 + 0.0 + right) / 4.0;
    let mean21 = (0.0 + bottom + left + 0.0) / 4.0;
    let g12 = w * mean12;
    let g21 = w * mean21;
    // Black (i + j even) then reads the new red values.
    let mean11 = (top + g21 + left + g12) / 4.0;
    let mean22 = (g12 + bottom + g21 + right) / 4.0;
    let g11 = w * mean11;
    let g22 = w * mean22;

    let mut grid = Grid::new(2);
    let outcome = solve(&mut grid, &params, Stop::Iterations(1));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-14;
    assert!(close(mean12, 2.86) && close(mean21, 4.2925));
    assert!(close(grid.get(1, 2), g12) && close(grid.get(2, 1), g21));
    assert!(close(grid.get(1, 1), g11) && close(grid.get(2, 2), g22));
    let biggest = [mean12, mean21, mean11, mean22]
        .into_iter()
        .fold(0.0, f64::max);
    assert!(close(outcome.max_change, biggest));
    // Borders never move.
    assert_eq!(grid.row(0), &[top; 4]);
    assert_eq!(grid.row(3), &[bottom; 4]);
    assert_eq!((grid.get(1, 0), grid.get(2, 3)), (left, right));
}

#[test]
fn many_iterations_solve_the_discrete_laplace_equation() {
    let n = 8;
    let params = Params::reference(n);
    let (grid, _) = sequential(n, &params, Stop::Iterations(500));
    for i in 1..=n {
        for j in 1..=n {
            let mean =
                (grid.get(i - 1, j) + grid.get(i + 1, j) + grid.get(i, j - 1) + grid.get(i, j + 1))
                    / 4.0;
            assert!((grid.get(i, j) - mean).abs() < 1e-12, "cell ({i}, {j})");
        }
    }
}
