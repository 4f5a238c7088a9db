//! What a `sync` costs: empty supersteps, timed per `sync`.
//!
//! On its own it runs a machine of one process (no communication): the figure bounds from
//! below what every superstep of a program spends outside its messages and barrier. Started by
//! `ipl-run` it runs on the pool's processes, where each `sync` adds the barrier: on the host
//! board when they share the host over shm (the default), with messages otherwise or with
//! `BSP_HOST_BOARD=0`.
//!
//! ```text
//! cargo run --release -p bsp --example sync_cost -- 1000000
//! valgrind --tool=callgrind target/release/examples/sync_cost 100000   # instructions
//! cargo build --release -p bsp --example sync_cost -p ipl --bin ipl-run
//! target/release/ipl-run -n 2 -- target/release/examples/sync_cost 200000
//! ```
//!
//! Under `ipl-run`, `callgrind --toggle-collect=bsp::core::Bsp::sync
//! --toggle-collect=ipl::receive_port::PortShared::receive_until` counts a sync's instructions
//! without the spinning of its wait (`scripts/count-instructions` does this). `bsp-bench
//! --supersteps-only` measures the same next to OpenMPI's barrier.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of supersteps"))?,
        None => 1_000_000,
    };
    let in_pool = std::env::var_os("IPL_POOL_SIZE").is_some();
    let mut bsp = if in_pool {
        bsp::Bsp::new(ipl::Ibis::join(ipl::Config::from_env()?)?)?
    } else {
        bsp::Bsp::local(1)?.pop().ok_or("no handle")?
    };
    // Connections and buffers settle during the first supersteps.
    for _ in 0..n.min(1000) {
        bsp.sync()?;
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        bsp.sync()?;
    }
    let ns = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    if bsp.pid() == 0 {
        println!(
            "{n} empty supersteps on {} process{}: {ns:.1} ns per sync",
            bsp.nprocs(),
            if bsp.nprocs() == 1 { "" } else { "es" }
        );
    }
    Ok(())
}
