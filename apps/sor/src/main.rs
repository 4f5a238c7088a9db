//! Sequential (optionally multi-threaded) red/black SOR with the Ibis
//! reference setup; prints one JSON result line.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use sor::{solve, solve_threaded, Grid, Params, Stop};

/// Red/black successive over-relaxation on an (N+2) x (N+2) grid with fixed
/// borders (top 4.56, bottom 9.85, left 7.32, right 6.88, interior starting
/// at 0) and the Ibis SOR relaxation factor and stopping rule. Prints one
/// JSON line: parameters, seconds per phase, iterations and an FNV-1a
/// checksum of the final grid's bits.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Interior size N: the grid has N + 2 rows and columns.
    #[arg(long, short, default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    n: u64,

    /// Run exactly this many iterations instead of iterating until the
    /// largest change of an iteration is at most the stopping tolerance.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,

    /// Threads relaxing row blocks in parallel (1 = plain sequential loop);
    /// the result is bit-identical for every thread count.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: u64,
}

fn run(args: Args) -> Result<(), String> {
    let total_start = Instant::now();
    let n = args.n as usize;
    let threads = args.threads as usize;
    let params = Params::reference(n);
    let stop = args.iterations.map_or(Stop::Converged, Stop::Iterations);

    let init_start = Instant::now();
    let mut grid = Grid::new(n);
    let init_seconds = init_start.elapsed().as_secs_f64();
    tracing::info!(
        n,
        omega = params.omega,
        stop_tolerance = params.stop_tolerance,
        "grid ready"
    );

    let solve_start = Instant::now();
    let outcome = if threads == 1 {
        solve(&mut grid, &params, stop)
    } else {
        solve_threaded(&mut grid, &params, stop, threads).map_err(|e| e.to_string())?
    };
    let solve_seconds = solve_start.elapsed().as_secs_f64();

    let checksum_start = Instant::now();
    let checksum = grid.checksum();
    let checksum_seconds = checksum_start.elapsed().as_secs_f64();

    let line = json!({
        "version": "sequential",
        "app": "sor",
        "parameters": {
            "n": n,
            "omega": params.omega,
            "stop_tolerance": params.stop_tolerance,
            "iterations": args.iterations,
        },
        "nodes": 1,
        "threads": threads,
        "seconds": {
            "init": init_seconds,
            "solve": solve_seconds,
            "checksum": checksum_seconds,
        },
        "total_seconds": total_start.elapsed().as_secs_f64(),
        "iterations": outcome.iterations,
        "max_change": outcome.max_change,
        "checksum": format!("{checksum:016x}"),
    });
    println!("{line}");
    Ok(())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}
