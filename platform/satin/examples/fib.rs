//! Fibonacci with a spawn for every call above a threshold.
//!
//! `cargo run --release -p satin --example fib -- [N] [THRESHOLD] [THREADS]`
//! (defaults 35, 0, all cores). Below the threshold the plain recursive function is used.
//!
//! Launched under `ipl-run` (`IPL_SERVER` set), every process joins the pool and the work is
//! spread over all of them; the master prints the result. `SATIN_STEAL=random` selects random
//! stealing instead of cluster-aware stealing:
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

fn arg(i: usize) -> Option<usize> {
    std::env::args().nth(i).map(|s| {
        s.parse()
            .unwrap_or_else(|_| panic!("argument {i} must be a number, got {s:?}"))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=satin=debug` shows what the runtime does.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let n = arg(1).unwrap_or(35) as u32;
    let threshold = arg(2).unwrap_or(0) as u32;
    if std::env::var_os("IPL_SERVER").is_some() {
        return distributed(n, threshold);
    }
    let mut rt = satin::Runtime::local();
    if let Some(t) = arg(3) {
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
fn distributed(n: u32, threshold: u32) -> Result<(), Box<dyn std::error::Error>> {
    let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
    let nodes = ibis.pool().wait_closed()?.len();
    let policy = match std::env::var("SATIN_STEAL").as_deref() {
        Ok("random") => satin::Steal::Random,
        _ => satin::Steal::ClusterAware,
    };
    let mut rt = satin::Runtime::in_pool(ibis).steal(policy);
    if let Some(t) = arg(3) {
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
