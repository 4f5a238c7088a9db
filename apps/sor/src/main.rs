//! Red/black SOR with the Ibis reference setup: `sor --seq` runs the
//! sequential solver, `sor` the row-distributed one on the pool of the
//! `IPL_*` environment; prints one JSON result line (from process 0).

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use sor::{
    gather_checksum, solve, solve_distributed, solve_threaded, DistributedError, Grid, Params,
    SolveError, Stop,
};
use thiserror::Error;

/// Red/black successive over-relaxation on an (N+2) x (N+2) grid with fixed
/// borders (top 4.56, bottom 9.85, left 7.32, right 6.88, interior starting
/// at 0) and the Ibis SOR relaxation factor and stopping rule.
///
/// Without --seq the rows are distributed over the processes of the pool
/// that the IPL_* environment describes (`ipl-run -n P -- sor ...` starts P
/// of them; with no IPL_* variables the pool is this one process), which
/// exchange boundary rows every half-iteration. Prints one JSON line:
/// parameters, seconds per phase, iterations and a checksum of the final
/// grid's bits, equal for the sequential and every parallel run.
#[derive(Parser, Debug)]
#[command(version, allow_negative_numbers = true)]
struct Args {
    /// Run the sequential solver (the correctness oracle and speedup
    /// baseline) instead of the row-distributed one.
    #[arg(long)]
    seq: bool,

    /// Interior size N: the grid has N + 2 rows and columns.
    #[arg(long, short, default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=sor::params::MAX_N as u64))]
    n: u64,

    /// Run exactly this many iterations instead of iterating until the
    /// largest change of an iteration is at most the stopping tolerance.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,

    /// Threads relaxing row blocks in parallel within each process (1 = a
    /// plain loop); the result is bit-identical for every thread count.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    threads: u64,

    /// Write a trace of each process (supersteps split into compute, send
    /// and wait) to a file of its own in DIR, as IPL_TRACE=DIR does;
    /// `bench-harness timeline DIR` merges and draws them.
    #[arg(long, value_name = "DIR")]
    trace: Option<std::path::PathBuf>,
}

/// What stopped a run.
#[derive(Debug, Error)]
enum AppError {
    /// The threaded sequential solver could not start.
    #[error("sequential solve: {0}")]
    Solve(#[from] SolveError),
    /// The `IPL_*` environment does not describe a pool.
    #[error("cannot read the pool configuration from the IPL_* environment: {0}")]
    Config(#[source] ipl::Error),
    /// Joining the pool failed.
    #[error("cannot join the pool: {0}")]
    Join(#[source] ipl::Error),
    /// The bulk-synchronous layer failed outside the solver.
    #[error("bulk-synchronous layer: {what}: {source}")]
    Bsp {
        /// What was being done.
        what: &'static str,
        /// The layer's error.
        #[source]
        source: bsp::Error,
    },
    /// The row-distributed solver failed.
    #[error("distributed solve: {0}")]
    Distributed(#[from] DistributedError),
}

/// This machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`), where known.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Refuses a grid that cannot fit in this machine's memory, before allocating it: each
/// process holds `rows` rows of `n + 2` values (the sequential solver all `n + 2`).
fn check_memory(n: u64, rows: u64, processes: u64) -> Result<(), String> {
    let bytes = rows
        .checked_mul(n + 2)
        .and_then(|v| v.checked_mul(8))
        .unwrap_or(u64::MAX);
    match physical_memory() {
        Some(total) if bytes > total => Err(format!(
            "-n {n}: the grid needs {:.1} GiB per process ({rows} rows of {} values{}), more \
             than this machine's {:.1} GiB of memory",
            gib(bytes),
            n + 2,
            if processes > 1 {
                format!(", {processes} processes")
            } else {
                String::new()
            },
            gib(total)
        )),
        _ => Ok(()),
    }
}

/// Checks the arguments against what this machine can serve, before any work: the grid
/// must fit in memory, per process of the pool the environment describes.
fn preflight(args: &Args) -> Result<(), String> {
    if args.seq {
        return check_memory(args.n, args.n + 2, 1);
    }
    // A malformed pool environment is reported by the join, with its own message.
    let processes = ipl::Config::from_env()
        .ok()
        .and_then(|c| c.size)
        .unwrap_or(1)
        .max(1) as u64;
    check_memory(args.n, args.n.div_ceil(processes) + 2, processes)
}

fn parameters(args: &Args, params: &Params) -> serde_json::Value {
    json!({
        "n": params.n,
        "omega": params.omega,
        "stop_tolerance": params.stop_tolerance,
        "iterations": args.iterations,
    })
}

fn stop(args: &Args) -> Stop {
    args.iterations.map_or(Stop::Converged, Stop::Iterations)
}

fn run_sequential(args: &Args) -> Result<(), AppError> {
    let total_start = Instant::now();
    let n = args.n as usize;
    let threads = args.threads as usize;
    let params = Params::reference(n);

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
        solve(&mut grid, &params, stop(args))
    } else {
        solve_threaded(&mut grid, &params, stop(args), threads)?
    };
    let solve_seconds = solve_start.elapsed().as_secs_f64();

    let checksum_start = Instant::now();
    let checksum = grid.checksum();
    let checksum_seconds = checksum_start.elapsed().as_secs_f64();

    let line = json!({
        "version": "sequential",
        "app": "sor",
        "parameters": parameters(args, &params),
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

fn run_parallel(args: &Args) -> Result<(), AppError> {
    let join_start = Instant::now();
    let config = ipl::Config::from_env().map_err(AppError::Config)?;
    let ibis = ipl::Ibis::join(config).map_err(AppError::Join)?;
    let bsp_err = |what| move |source| AppError::Bsp { what, source };
    let mut bsp = bsp::Bsp::new(ibis).map_err(bsp_err("starting"))?;
    // Every process starts the clock at the end of the same superstep.
    bsp.sync().map_err(bsp_err("the starting barrier"))?;
    let join_seconds = join_start.elapsed().as_secs_f64();

    let total_start = Instant::now();
    let n = args.n as usize;
    let threads = args.threads as usize;
    let params = Params::reference(n);
    tracing::info!(
        pid = bsp.pid(),
        nprocs = bsp.nprocs(),
        n,
        threads,
        "starting the distributed solve"
    );
    let run = solve_distributed(&mut bsp, &params, stop(args), threads)?;
    let checksum_start = Instant::now();
    let checksum = gather_checksum(&mut bsp, &run.block)?;
    let checksum_seconds = checksum_start.elapsed().as_secs_f64();
    let total_seconds = total_start.elapsed().as_secs_f64();

    if let Some(checksum) = checksum {
        let line = json!({
            "version": "parallel",
            "app": "sor",
            "parameters": parameters(args, &params),
            "nodes": bsp.nprocs(),
            "threads": threads,
            "seconds": {
                "init": run.phases.init,
                "relax": run.phases.relax,
                "exchange": run.phases.exchange,
                "reduce": run.phases.reduce,
                "checksum": checksum_seconds,
            },
            "total_seconds": total_seconds,
            "join_seconds": join_seconds,
            "iterations": run.outcome.iterations,
            "max_change": run.outcome.max_change,
            "checksum": format!("{checksum:016x}"),
        });
        println!("{line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Logs as RUST_LOG says; the trace, if asked for, is complete when this guard drops.
    let _trace = match ipl::trace::init("warn", args.trace.as_deref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = preflight(&args) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = if args.seq {
        run_sequential(&args)
    } else {
        run_parallel(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Printed whatever RUST_LOG filters: a fatal error is never silent.
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
