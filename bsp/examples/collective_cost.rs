//! What a collective costs, timed per call, back to back. Each process moves 64 KiB (8192
//! `f64`, or as many as a third argument says) as `bsp-bench` does: `all_to_all` (the
//! default) sends that much to every other process; it is what each process receives in
//! `scatter` and contributes in `all_reduce`, `all_gather`, `scan`, `exscan` and `reduce`.
//!
//! ```text
//! cargo build --release -p bsp --example collective_cost -p ipl --bin ipl-run
//! target/release/ipl-run -n 2 -- target/release/examples/collective_cost 2000
//! target/release/ipl-run -n 2 -- target/release/examples/collective_cost 2000 exscan
//! target/release/ipl-run -n 4 -- target/release/examples/collective_cost 2000 scan 1
//! ```
//!
//! Small enough to count the instructions of a call under callgrind
//! (`--toggle-collect='bsp::collective::exchange::<impl bsp::core::Bsp>::all_to_all'`);
//! `bsp-bench` measures the same collectives next to their OpenMPI equivalents.

use bsp::Op;

/// The collectives this example can time.
const NAMES: [&str; 8] = [
    "all_to_all",
    "all_reduce",
    "all_gather",
    "scatter",
    "scan",
    "exscan",
    "reduce",
    "reduce_scatter",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = match args.next() {
        Some(a) => a
            .parse()
            .map_err(|_| format!("'{a}' is not a number of calls"))?,
        None => 1000,
    };
    let name = args.next().unwrap_or_else(|| NAMES[0].to_string());
    if !NAMES.contains(&name.as_str()) {
        return Err(format!("'{name}' is not one of {}", NAMES.join(", ")).into());
    }
    let each: usize = match args.next() {
        Some(a) => a
            .parse()
            .ok()
            .filter(|&k| (1..=1 << 24).contains(&k))
            .ok_or(format!("'{a}' is not a number of f64 from 1 to 2^24"))?,
        None => 8192,
    };
    let mut bsp = bsp::Bsp::new(ipl::Ibis::join(ipl::Config::from_env()?)?)?;
    let (p, me) = (bsp.nprocs(), bsp.pid());
    let send: Vec<Vec<f64>> = (0..p).map(|_| vec![0.0; each]).collect();
    let all = vec![0.0f64; each * p];
    let mine = vec![0.0f64; each];
    let mut v = vec![0.0f64; each];
    let counts = vec![each; p];
    let mut call = |bsp: &mut bsp::Bsp| -> bsp::Result<()> {
        match name.as_str() {
            "all_to_all" => drop(bsp.all_to_all(&send)?),
            "all_reduce" => bsp.all_reduce_slice(&mut v, Op::Sum)?,
            "all_gather" => drop(bsp.all_gather_slice(&mine)?),
            "scatter" => drop(bsp.scatter_slice(0, (me == 0).then_some(&all[..]))?),
            "scan" => bsp.scan_slice(&mut v, Op::Sum)?,
            "exscan" => drop(bsp.exscan_slice(&mut v, Op::Sum)?),
            "reduce" => drop(bsp.reduce_slice(0, &mine, Op::Sum)?),
            _ => drop(bsp.reduce_scatter(&all, &counts, Op::Sum)?),
        }
        Ok(())
    };
    // Connections and buffers settle during the first calls.
    for _ in 0..n.min(100) {
        call(&mut bsp)?;
    }
    let start = std::time::Instant::now();
    for _ in 0..n {
        call(&mut bsp)?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
    if me == 0 {
        let bytes = each * 8;
        println!(
            "{n} {name} calls of {bytes} bytes per process on {p} processes: {us:.3} us per call"
        );
    }
    Ok(())
}
