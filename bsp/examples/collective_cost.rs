//! What a bandwidth-bound collective costs: `all_to_all` with 64 KiB (8192 `f64`) for every
//! pair of processes, timed per call.
//!
//! ```text
//! cargo build --release -p bsp --example collective_cost -p ipl --bin ipl-run
//! target/release/ipl-run -n 2 -- target/release/examples/collective_cost 2000
//! ```
//!
//! Small enough to count the instructions of a call under callgrind
//! (`--toggle-collect='bsp::collective::exchange::<impl bsp::core::Bsp>::all_to_all'`);
//! `bsp-bench` measures the same collective next to OpenMPI's `MPI_Alltoallv`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of calls"))?,
        None => 1000,
    };
    let mut bsp = bsp::Bsp::new(ipl::Ibis::join(ipl::Config::from_env()?)?)?;
    let p = bsp.nprocs();
    let send: Vec<Vec<f64>> = (0..p).map(|_| vec![0.0; 8192]).collect();
    // Connections and buffers settle during the first calls.
    for _ in 0..n.min(100) {
        bsp.all_to_all(&send)?;
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        bsp.all_to_all(&send)?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    if bsp.pid() == 0 {
        println!("{n} all_to_all calls of 64 KiB per pair on {p} processes: {us:.2} us per call");
    }
    Ok(())
}
