//! Fibonacci with a spawn for every call above a threshold.
//!
//! `cargo run --release -p satin --example fib -- [N] [THRESHOLD] [THREADS]`
//! (defaults 35, 0, all cores). Below the threshold the plain recursive function is used.
//!
//! Launched under `ipl-run` (or `mpirun`, `srun`), every process joins the pool and the work is
//! spread over all of them; the master prints the result. `SATIN_STEAL=random` selects random
//! stealing instead of cluster-aware stealing (`cluster-aware`, the default):
//!
//! `target/release/ipl-run -n 4 --clusters 2 --wan-latency 20ms -- target/release/examples/fib 42 20 1`

use std::time::Instant;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Fib {
    n: u32,
    threshold: u32,
}

fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

impl satin::Task for Fib {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        let Fib { n, threshold } = self;
        if n < 2 || n < threshold {
            return fib_seq(n);
        }
        let a = cx.spawn(Fib {
            n: n - 1,
            threshold,
        });
        let b = cx.spawn(Fib {
            n: n - 2,
            threshold,
        });
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Fib);

/// Argument `i`, if given: a number, or else an error naming it (`fib [N [THRESHOLD [THREADS]]]`).
fn arg(i: usize) -> Result<Option<usize>, String> {
    std::env::args()
        .nth(i)
        .map(|s| {
            s.parse().map_err(|_| {
                format!("usage: fib [N [THRESHOLD [THREADS]]]: argument {i} must be a number, got {s:?}")
            })
        })
        .transpose()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=satin=debug` shows what the runtime does.
    tracing_subscriber::fmt()
        .with_env_filter(ipl::trace::log_filter("error")?)
        .with_writer(std::io::stderr)
        .init();
    let n = arg(1)?.unwrap_or(35) as u32;
    let threshold = arg(2)?.unwrap_or(0) as u32;
    let policy = satin::Steal::from_env()?;
    // A pool of processes (under `ipl-run`, `mpirun` or `srun`), or else this process alone.
    let config = ipl::Config::from_env()?;
    if config.server.is_some() || config.launcher.is_some() {
        return distributed(config, n, threshold, policy);
    }
    let mut rt = satin::Runtime::local();
    if let Some(t) = arg(3)? {
        rt = rt.threads(t);
    }
    let start = Instant::now();
    let v = rt.run(Fib { n, threshold })?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fib({n}) = {v}  threshold {threshold}, {} threads, {secs:.3} s",
        rt.num_threads()
    );
    Ok(())
}

/// Every process of the pool runs this; the master prints.
fn distributed(
    config: ipl::Config,
    n: u32,
    threshold: u32,
    policy: satin::Steal,
) -> Result<(), Box<dyn std::error::Error>> {
    let ibis = ipl::Ibis::join(config)?;
    // Processes at the start: the pool's size, or for a process joining a running pool
    // (`ipl-run --join`), the members so far.
    let nodes = ibis
        .pool()
        .size()
        .map_or_else(|| ibis.pool().members().len(), |n| n as usize);
    let mut rt = satin::Runtime::in_pool(ibis).steal(policy);
    if let Some(t) = arg(3)? {
        rt = rt.threads(t);
    }
    let start = Instant::now();
    if let Some(v) = rt.run(Fib { n, threshold })? {
        let secs = start.elapsed().as_secs_f64();
        println!(
            "fib({n}) = {v}  threshold {threshold}, {nodes} processes of {} threads, {policy:?} stealing, {secs:.3} s",
            rt.num_threads()
        );
    }
    Ok(())
}
