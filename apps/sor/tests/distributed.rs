//! The row-distributed solver on the bulk-synchronous layer, with processes
//! as threads of this process: bit-identical to the sequential solver for
//! every process count, with and without threads per process.

use std::time::Duration;

use bsp::Options;
use sor::{
    gather_checksum, gather_grid, solve, solve_distributed, DistributedError, Grid, Outcome,
    Params, PartitionError, Stop,
};

/// Longest one distributed run of a test may take.
const LIMIT: Duration = Duration::from_secs(60);

/// What one process reports back.
struct Report {
    outcome: Outcome,
    grid: Option<Grid>,
    checksum: Option<u64>,
}

/// Runs `test` on a thread, failing if it takes longer than [`LIMIT`].
fn within(test: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        test();
        let _ = tx.send(());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the test did not finish within {LIMIT:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the test failed"),
    }
}

/// Runs the distributed solver on `p` local processes with `threads`
/// threads each, gathering the grid and the checksum to process 0.
fn distributed(
    n: usize,
    p: usize,
    threads: usize,
    stop: Stop,
) -> Vec<Result<Report, DistributedError>> {
    let opts = Options {
        sync_timeout: Some(Duration::from_secs(40)),
        ..Options::default()
    };
    let params = Params::reference(n);
    bsp::run_local_with(p, opts, |bsp| {
        let run = (|| {
            let run = solve_distributed(bsp, &params, stop, threads)?;
            let grid = gather_grid(bsp, &run.block)?;
            let checksum = gather_checksum(bsp, &run.block)?;
            Ok(Report {
                outcome: run.outcome,
                grid,
                checksum,
            })
        })();
        Ok(run)
    })
    .unwrap_or_else(|e| panic!("{p} processes: {e}"))
}

fn sequential(n: usize, stop: Stop) -> (Grid, Outcome) {
    let mut grid = Grid::new(n);
    let outcome = solve(&mut grid, &Params::reference(n), stop);
    (grid, outcome)
}

#[test]
fn one_to_four_processes_match_the_sequential_grid_bit_for_bit() {
    within(|| {
        // 23 and 37 rows leave a remainder over 2, 3 and 4 processes.
        for (n, stop) in [(23, Stop::Converged), (37, Stop::Iterations(25))] {
            let (seq_grid, seq_outcome) = sequential(n, stop);
            for (p, threads) in [(1, 1), (2, 1), (3, 1), (4, 1), (1, 3), (3, 2)] {
                let reports: Vec<Report> = distributed(n, p, threads, stop)
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|e| panic!("P = {p}: {e}")))
                    .collect();
                assert_eq!(reports.len(), p);
                for (pid, r) in reports.iter().enumerate() {
                    assert_eq!(
                        r.outcome.iterations, seq_outcome.iterations,
                        "P = {p}, pid {pid}, {stop:?}"
                    );
                    assert_eq!(
                        r.outcome.max_change.to_bits(),
                        seq_outcome.max_change.to_bits()
                    );
                    if pid > 0 {
                        assert!(r.grid.is_none() && r.checksum.is_none());
                    }
                }
                let grid = reports[0].grid.as_ref().expect("process 0 gathers");
                assert_eq!(grid, &seq_grid, "P = {p}, {threads} threads, {stop:?}");
                assert_eq!(reports[0].checksum, Some(seq_grid.checksum()));
            }
        }
    });
}

#[test]
fn a_converged_run_stops_where_the_sequential_one_does() {
    within(|| {
        let n = 30;
        let (_, seq) = sequential(n, Stop::Converged);
        assert!(seq.iterations > 1);
        let reports = distributed(n, 3, 1, Stop::Iterations(seq.iterations - 1));
        let before = reports[0].as_ref().expect("process 0").outcome;
        assert!(before.max_change > Params::reference(n).stop_tolerance);
    });
}

#[test]
fn more_processes_than_rows_fail_on_every_process() {
    within(|| {
        for r in distributed(3, 4, 1, Stop::Iterations(2)) {
            match r {
                Err(DistributedError::Partition { n: 3, p: 4, source }) => {
                    assert_eq!(source, PartitionError::TooManyParts { rows: 3, parts: 4 });
                }
                Err(e) => panic!("unexpected error {e}"),
                Ok(_) => panic!("4 processes cannot share 3 rows"),
            }
        }
    });
}

#[test]
fn gathered_checksums_tell_grids_apart() {
    within(|| {
        // Different iteration counts give different grids, and their gathered
        // checksums differ too.
        let a = distributed(12, 2, 1, Stop::Iterations(3));
        let b = distributed(12, 2, 1, Stop::Iterations(4));
        let (a, b) = (a[0].as_ref().unwrap(), b[0].as_ref().unwrap());
        assert_ne!(a.grid, b.grid);
        assert_ne!(a.checksum, b.checksum);
        assert_eq!(a.checksum, a.grid.as_ref().map(Grid::checksum));
    });
}

/// Parameters are plain data: an interior larger than a grid may have is an error naming it,
/// where the solver overflowed working out the grid's size.
#[test]
fn an_interior_larger_than_a_grid_may_have_is_an_error() {
    let params = Params {
        n: usize::MAX,
        ..Params::reference(4)
    };
    let each = bsp::run_local(2, move |bsp| {
        Ok(solve_distributed(bsp, &params, Stop::Iterations(1), 1).map(|_| ()))
    })
    .expect("the processes end");
    for r in each {
        match r {
            Err(e @ DistributedError::Size { .. }) => {
                assert!(e.to_string().contains(&usize::MAX.to_string()), "{e}")
            }
            other => panic!("expected a size error, got {other:?}"),
        }
    }
}
