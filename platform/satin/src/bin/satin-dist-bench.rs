//! Benchmarks of work stealing between processes.
//!
//! `cargo build --release -p satin --bin satin-dist-bench && target/release/satin-dist-bench [--rounds N] [--quick] [--wan-n N]`
//!
//! Launches itself as pools of local processes (through `ipl::launch`, as `ipl-run` does) and
//! prints, as medians over rounds in which every configuration runs once (interleaved, so
//! that changing load on the machine affects all alike):
//! 1. fib(40) with a sequential threshold of 20 on 2 processes of 1 thread against plain
//!    sequential fib(40) in this process: the speedup;
//! 2. the wide-area experiment: fib(`--wan-n`, default 42) with threshold 20 on 4 processes
//!    of 1 thread in 2 locations, with cluster-aware stealing and 20 ms of one-way latency
//!    between the locations against the same without added latency (the ratio), and random
//!    stealing with and without the latency next to it.
//!
//! Inside a pool (`IPL_SERVER` set) the program is one process of such a run: it does one
//! warm-up run and `SATIN_BENCH_REPS` timed runs; the master appends the times, and every
//! process its steal counts, to the file `SATIN_BENCH_OUT`.

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

// Both benchmarks measure the same task.
#[path = "shared/fib_threshold.rs"]
mod fib_threshold;
use fib_threshold::{fib, FibThreshold};

const THRESHOLD: u32 = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// One process of a benchmark pool.
fn pool_member() -> Result<(), Box<dyn std::error::Error>> {
    let n: u32 = env("SATIN_BENCH_N")?.parse()?;
    let reps: usize = env("SATIN_BENCH_REPS")?.parse()?;
    let out = env("SATIN_BENCH_OUT")?;
    let config = env("SATIN_BENCH_CONFIG")?;
    let policy = match env("SATIN_BENCH_STEAL")?.as_str() {
        "random" => satin::Steal::Random,
        _ => satin::Steal::ClusterAware,
    };
    let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
    let rank = ibis.id().rank();
    let rt = satin::Runtime::in_pool(ibis).threads(1).steal(policy);
    let expect = fib(n);
    let task = || FibThreshold {
        n,
        threshold: THRESHOLD,
    };
    if let Some(v) = rt.run(task())? {
        assert_eq!(v, expect);
    }
    let before = rt.stats();
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let v = rt.run(task())?;
        let secs = t.elapsed().as_secs_f64();
        if let Some(v) = v {
            assert_eq!(v, expect);
            times.push(secs);
        }
    }
    let s = rt.stats().since(&before);
    let mut lines = format!(
        "steals {config} {rank} {} {} {} {} {}\n",
        s.remote_steal_attempts,
        s.remote_steals,
        s.wide_steal_attempts,
        s.wide_steals,
        s.bytes_moved
    );
    if !times.is_empty() {
        lines.push_str(&format!("times {config} {}\n", median(times)));
    }
    // One write per process, appended: lines of different processes do not interleave.
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&out)?
        .write_all(lines.as_bytes())?;
    Ok(())
}

struct Config {
    name: &'static str,
    nodes: u32,
    clusters: u32,
    latency: Option<Duration>,
    steal: &'static str,
    n: u32,
}

#[derive(Default)]
struct Measured {
    times: Vec<f64>,
    /// Summed over processes and rounds: attempts, steals, wide attempts, wide steals, bytes.
    steals: [u64; 5],
}

/// Launches `c` once; returns the master's median time and adds the steal counts to `m`.
fn launch(c: &Config, reps: usize, m: &mut Measured) -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::temp_dir().join(format!(
        "satin-dist-bench-{}-{}",
        std::process::id(),
        c.name
    ));
    let _ = std::fs::remove_file(&out);
    let launch = ipl::launch::Launch {
        nodes: c.nodes,
        clusters: c.clusters,
        wan_latency: c.latency,
        wan_bandwidth: None,
        command: vec![std::env::current_exe()?.to_string_lossy().into_owned()],
        env: vec![
            ("SATIN_BENCH_N".into(), c.n.to_string()),
            ("SATIN_BENCH_REPS".into(), reps.to_string()),
            ("SATIN_BENCH_OUT".into(), out.to_string_lossy().into_owned()),
            ("SATIN_BENCH_CONFIG".into(), c.name.into()),
            ("SATIN_BENCH_STEAL".into(), c.steal.into()),
        ],
        prefix_output: true,
    };
    let code = ipl::launch::run(&launch)?;
    if code != 0 {
        return Err(format!("{}: a process exited with status {code}", c.name).into());
    }
    let text = std::fs::read_to_string(&out)?;
    let _ = std::fs::remove_file(&out);
    let mut timed = false;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["times", _, t] => {
                m.times.push(t.parse()?);
                timed = true;
            }
            ["steals", _, _, rest @ ..] if rest.len() == 5 => {
                for (acc, v) in m.steals.iter_mut().zip(rest) {
                    *acc += v.parse::<u64>()?;
                }
            }
            _ => return Err(format!("{}: unexpected line {line:?}", c.name).into()),
        }
    }
    if !timed {
        return Err(format!("{}: the master reported no time", c.name).into());
    }
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("IPL_SERVER").is_some() {
        return pool_member();
    }
    let mut rounds = 5;
    let mut reps = 3;
    let mut wan_n = 42;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds needs a number")?.parse()?,
            "--wan-n" => wan_n = args.next().ok_or("--wan-n needs a number")?.parse()?,
            "--quick" => {
                rounds = 1;
                reps = 1;
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "satin-dist-bench: {cores} cores, load average {} at the start; medians of {rounds} rounds \
         (each round runs every configuration once; a launch times {reps} runs after a warm-up; \
         ratios are medians of the ratios within rounds)",
        load_average()
    );
    let lat = Some(Duration::from_millis(20));
    let configs = [
        Config {
            name: "two",
            nodes: 2,
            clusters: 1,
            latency: None,
            steal: "cluster-aware",
            n: 40,
        },
        Config {
            name: "crs",
            nodes: 4,
            clusters: 2,
            latency: None,
            steal: "cluster-aware",
            n: wan_n,
        },
        Config {
            name: "crs-wan",
            nodes: 4,
            clusters: 2,
            latency: lat,
            steal: "cluster-aware",
            n: wan_n,
        },
        Config {
            name: "rs",
            nodes: 4,
            clusters: 2,
            latency: None,
            steal: "random",
            n: wan_n,
        },
        Config {
            name: "rs-wan",
            nodes: 4,
            clusters: 2,
            latency: lat,
            steal: "random",
            n: wan_n,
        },
    ];
    let mut measured: Vec<Measured> = configs.iter().map(|_| Measured::default()).collect();
    let mut sequential = Vec::new();
    for round in 0..rounds {
        // Timed like a launch: the median of `reps` runs after a warm-up, right before the
        // 2-process configuration it is compared with.
        let mut runs: Vec<f64> = (0..=reps)
            .map(|_| {
                let t = Instant::now();
                assert_eq!(black_box(fib(black_box(40))), 102_334_155);
                t.elapsed().as_secs_f64()
            })
            .skip(1)
            .collect();
        runs.sort_by(f64::total_cmp);
        sequential.push(runs[runs.len() / 2]);
        for (c, m) in configs.iter().zip(&mut measured) {
            launch(c, reps, m)?;
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let ms = |s: f64| s * 1e3;
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{:.1}-{:.1} ms", ms(lo), ms(hi))
    };
    // Ratios are taken within each round, then their median: the machine's speed drifting
    // between rounds cancels out.
    let ratio_median =
        |num: &[f64], den: &[f64]| median(num.iter().zip(den).map(|(a, b)| a / b).collect());
    let seq = median(sequential.clone());
    let two = median(measured[0].times.clone());
    println!(
        "fib(40), threshold {THRESHOLD}: sequential {:.1} ms ({}), 2 processes x 1 thread {:.1} ms ({}): speedup {:.2}",
        ms(seq),
        range(&sequential),
        ms(two),
        range(&measured[0].times),
        ratio_median(&sequential, &measured[0].times)
    );
    println!(
        "fib({wan_n}), threshold {THRESHOLD}, 4 processes x 1 thread in 2 locations (ipl-run -n 4 --clusters 2):"
    );
    for (i, label) in [
        (1, "cluster-aware, no added latency  "),
        (2, "cluster-aware, 20 ms wide-area   "),
        (3, "random,        no added latency  "),
        (4, "random,        20 ms wide-area   "),
    ] {
        let m = &measured[i];
        let t = median(m.times.clone());
        let relative = ratio_median(&m.times, &measured[1].times);
        let [attempts, steals, wide_attempts, wide_steals, bytes] = m.steals;
        let per = (rounds * (reps + 1)) as u64;
        println!(
            "  {label} {:7.1} ms ({}), {:.2}x cluster-aware without latency; per run: {} of {} steal requests succeeded, {} of {} to the other location, {} bytes moved",
            ms(t),
            range(&m.times),
            relative,
            steals / per,
            attempts / per,
            wide_steals / per,
            wide_attempts / per,
            bytes / per
        );
    }
    println!(
        "caveat: {cores} cores shared by every process (4 processes oversubscribe them) and by other work on the machine (load average {} at the end)",
        load_average()
    );
    Ok(())
}
