//! What a `sync` costs one process in software alone: a machine of one process (no
//! communication) runs empty supersteps and prints the time per `sync`.
//!
//! ```text
//! cargo run --release -p bsp --example sync_cost -- 1000000
//! valgrind --tool=callgrind target/release/examples/sync_cost 100000   # instructions
//! ```
//!
//! The figure bounds from below what every superstep of a program spends outside its
//! messages and barrier; the empty superstep between processes (`bsp-bench
//! --supersteps-only`) adds the barrier's messages to it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of supersteps"))?,
        None => 1_000_000,
    };
    let mut bsp = bsp::Bsp::local(1)?.pop().ok_or("no handle")?;
    let start = std::time::Instant::now();
    for _ in 0..n {
        bsp.sync()?;
    }
    let ns = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!("{n} empty supersteps on one process: {ns:.1} ns per sync");
    Ok(())
}
