//! Benchmarks of work stealing between processes.
//!
//! `cargo build --release -p satin --bins --examples -p ipl --bin ipl-run`, then:
//!
//! * `satin-dist-bench [--rounds N] [--quick]`: fib(40) with a sequential threshold of 20 on 2
//!   processes of 1 thread against plain sequential fib(40) in this process: the speedup.
//! * `satin-dist-bench overhead --baseline DIR`: the cost of the fault-tolerance bookkeeping
//!   when nothing fails: fib on 4 processes with this build's `examples/fib` and `ipl-run`
//!   against those of another build in `DIR` (the code before the change), alternating.
//! * `satin-dist-bench crash`: the time fib on 4 processes takes when one non-master process
//!   dies (SIGKILL) at half of the crash-free time, against the crash-free time.
//! * `satin-dist-bench study`: the wide-area experiment at the scale of Satin's papers, by
//!   simulation: 64 processes whose leaves sleep instead of computing, in 1, 2 and 4 locations
//!   with 10, 30 and 100 ms of one-way latency between them (the `wan` driver), random against
//!   cluster-aware stealing, as speedups over one process running the same tree; then 16 of
//!   the 64 processes killed during a run. `--csv FILE` keeps the figures for
//!   `bench-harness study-chart`. The default tree takes about 10 minutes in all.
//!
//! Every configuration of a round runs once per round, interleaved, so that changing load on
//! the machine affects all alike; ratios are medians of the ratios within rounds.
//!
//! Inside a pool (`IPL_SERVER` set) the program is one process of such a run, configured by
//! `SATIN_BENCH_*` variables: it runs what `SATIN_BENCH_MODE` says and the master appends its
//! times, and every process its steal and recovery counts, to the file `SATIN_BENCH_OUT`.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

// Both benchmarks measure the same task.
#[path = "shared/fib_threshold.rs"]
mod fib_threshold;
use fib_threshold::{fib, FibThreshold};

#[path = "shared/cli.rs"]
mod cli;

const THRESHOLD: u32 = 20;

#[derive(clap::Parser)]
#[command(
    name = "satin-dist-bench",
    version,
    about = "Work stealing between processes: fib(40) on 2 processes; `overhead`, `crash` and `study` for fault tolerance and the 64-process wide-area simulation",
    allow_negative_numbers = true,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    what: Option<What>,
    /// Rounds; each runs every configuration once, and medians over rounds are printed.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(i64).range(1..=100))]
    rounds: i64,
    /// One round of one timed run per configuration: a quick look, not figures to quote.
    #[arg(long, conflicts_with = "rounds")]
    quick: bool,
}

#[derive(clap::Subcommand)]
enum What {
    /// Crash-free fib on 4 processes, this build against the build in --baseline (the code
    /// before the fault-tolerance bookkeeping): the overhead.
    Overhead(Overhead),
    /// fib on 4 processes with one non-master process killed at a point of the run, against
    /// the crash-free run.
    Crash(Crash),
    /// The 64-process wide-area simulation study (leaves that sleep their cost).
    Study(Study),
}

#[derive(clap::Args)]
struct Overhead {
    /// Directory of the other build, holding `ipl-run` and `examples/fib` (e.g. the release
    /// directory of a checkout of the code before the change).
    #[arg(long, value_name = "DIR")]
    baseline: PathBuf,
    /// Rounds; each runs both builds on every workload, in alternating order.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(i64).range(1..=1000))]
    rounds: i64,
    /// Processes.
    #[arg(long, value_name = "P", default_value_t = 4,
          value_parser = clap::value_parser!(i64).range(2..=64))]
    nodes: i64,
    /// Workloads, N:THRESHOLD for fib(N) spawning above THRESHOLD (repeatable).
    #[arg(long = "fib", value_name = "N:T", value_parser = parse_fib,
          default_values = ["42:20", "37:0"])]
    fibs: Vec<(u32, u32)>,
}

#[derive(clap::Args)]
struct Crash {
    /// Rounds; each runs the crash-free and the crashing run once.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(i64).range(1..=100))]
    rounds: i64,
    /// Processes; the last rank is killed.
    #[arg(long, value_name = "P", default_value_t = 4,
          value_parser = clap::value_parser!(i64).range(2..=64))]
    nodes: i64,
    /// The workload, N:THRESHOLD for fib(N) spawning above THRESHOLD.
    #[arg(long = "fib", value_name = "N:T", value_parser = parse_fib, default_value = "42:20")]
    fib: (u32, u32),
    /// When the process dies, as a fraction of the crash-free time of the same round.
    #[arg(long, value_name = "F", default_value_t = 0.5, value_parser = parse_fraction)]
    at: f64,
}

#[derive(clap::Args)]
struct Study {
    /// Processes.
    #[arg(long, value_name = "P", default_value_t = 64,
          value_parser = clap::value_parser!(i64).range(2..=1024))]
    nodes: i64,
    /// Depth of the binary tree: 2^DEPTH leaves (the default, 2^18 leaves of 3 ms on
    /// average, takes about 13 minutes on one processor and 12 s on 64, long enough next to a
    /// wide-area round trip of 200 ms for the comparison Satin's papers make).
    #[arg(long, value_name = "D", default_value_t = 18,
          value_parser = clap::value_parser!(i64).range(4..=24))]
    depth: i64,
    /// What a leaf sleeps, MIN-MAX milliseconds (each leaf its own, from a hash of its
    /// place in the tree).
    #[arg(long, value_name = "MIN-MAX", default_value = "1-5", value_parser = parse_leaf)]
    leaf_ms: (u32, u32),
    /// Numbers of locations, comma-separated.
    #[arg(long, value_name = "L,...", default_value = "1,2,4", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=64))]
    locations: Vec<u32>,
    /// One-way latencies between locations in milliseconds, comma-separated.
    #[arg(long, value_name = "MS,...", default_value = "10,30,100", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    latencies: Vec<u32>,
    /// Processes killed during the crash run (0: no crash run).
    #[arg(long, value_name = "K", default_value_t = 16,
          value_parser = clap::value_parser!(i64).range(0..=1023))]
    kill: i64,
    /// Measure the one-process time on the whole tree (as long as the tree's sum of leaves)
    /// instead of taking the sum of the leaves times the one-process overhead measured on a
    /// tree of 2^12 leaves.
    #[arg(long)]
    t1_measured: bool,
    /// Also write the figures as CSV to FILE (for `bench-harness study-chart`).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Seed of the leaf costs and of the crash run's victims and moments.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
}

fn parse_fib(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("'{s}' is not N:THRESHOLD with 2 <= N <= 50 and THRESHOLD <= N");
    let (n, t) = s.split_once(':').ok_or_else(bad)?;
    let (n, t): (u32, u32) = (n.parse().map_err(|_| bad())?, t.parse().map_err(|_| bad())?);
    if !(2..=50).contains(&n) || t > n {
        return Err(bad());
    }
    Ok((n, t))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err(format!("'{s}' is not a fraction between 0 and 1")),
    }
}

fn parse_leaf(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("'{s}' is not MIN-MAX milliseconds with 0 <= MIN <= MAX <= 1000");
    let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
    let (lo, hi): (u32, u32) = (
        lo.parse().map_err(|_| bad())?,
        hi.parse().map_err(|_| bad())?,
    );
    if lo > hi || hi > 1000 {
        return Err(bad());
    }
    Ok((lo, hi))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

type Failure = Box<dyn std::error::Error>;

// ------------------------------------------------------------------ the simulated workload

/// A binary tree whose leaves sleep their cost: with one worker per process, a process is busy
/// exactly as long as its leaves take, and many processes on few cores behave like as many
/// processors as far as scheduling and latency go. The output counts the leaves, so a wrong
/// result shows.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Sleepy {
    depth: u32,
    /// Where the node sits: the path from the root, one bit per level.
    path: u64,
    min_us: u32,
    max_us: u32,
    seed: u64,
}

impl Sleepy {
    fn root(depth: u32, (min_ms, max_ms): (u32, u32), seed: u64) -> Sleepy {
        Sleepy {
            depth,
            path: 1,
            min_us: min_ms * 1000,
            max_us: max_ms * 1000,
            seed,
        }
    }

    /// The leaf's cost, from a hash of its place and the seed.
    fn cost(&self) -> Duration {
        let mut h = self.path ^ self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        let span = u64::from(self.max_us - self.min_us) + 1;
        Duration::from_micros(u64::from(self.min_us) + h % span)
    }

    fn children(&self) -> [Sleepy; 2] {
        [0, 1].map(|bit| Sleepy {
            depth: self.depth - 1,
            path: self.path << 1 | bit,
            ..*self
        })
    }

    /// The sum of the leaves' costs: the time of the tree on one processor, less overhead.
    fn total(&self) -> Duration {
        if self.depth == 0 {
            return self.cost();
        }
        let [a, b] = self.children();
        a.total() + b.total()
    }
}

impl satin::Task for Sleepy {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        if self.depth == 0 {
            std::thread::sleep(self.cost());
            return 1;
        }
        let [a, b] = self.children();
        let a = cx.spawn(a);
        let b = cx.spawn(b);
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Sleepy);

// ------------------------------------------------------------------ one process of a pool

/// Kills this process with SIGKILL `after` from now, if `SATIN_BENCH_DIE` lists its rank
/// (`RANK:SECONDS,...`): a crash with no goodbye, as a machine that fails.
fn die_if_listed(rank: u32) -> Result<(), Failure> {
    let Ok(list) = std::env::var("SATIN_BENCH_DIE") else {
        return Ok(());
    };
    for item in list.split(',').filter(|s| !s.is_empty()) {
        let (r, secs) = item
            .split_once(':')
            .ok_or_else(|| format!("SATIN_BENCH_DIE: '{item}' is not RANK:SECONDS"))?;
        if r.parse::<u32>()? != rank {
            continue;
        }
        let after = Duration::from_secs_f64(secs.parse::<f64>()?);
        std::thread::spawn(move || {
            std::thread::sleep(after);
            let pid = std::process::id().to_string();
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        });
    }
    Ok(())
}

/// One process of a benchmark pool.
fn pool_member() -> Result<(), Failure> {
    let out = env("SATIN_BENCH_OUT")?;
    let config = env("SATIN_BENCH_CONFIG")?;
    let mode = env("SATIN_BENCH_MODE")?;
    let policy = match env("SATIN_BENCH_STEAL")?.as_str() {
        "random" => satin::Steal::Random,
        _ => satin::Steal::ClusterAware,
    };
    let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
    // Every process starts its clock once all have joined: a process that started late would
    // otherwise count its kill moment (SATIN_BENCH_DIE) from a later start than the master's.
    ibis.pool().wait_closed()?;
    let rank = ibis.id().rank();
    let rt = satin::Runtime::in_pool(ibis).threads(1).steal(policy);
    let mut lines = String::new();
    let before = rt.stats();
    match mode.as_str() {
        // Warm-up, then SATIN_BENCH_REPS timed runs; the median time.
        "fib" => {
            let n: u32 = env("SATIN_BENCH_N")?.parse()?;
            let reps: usize = env("SATIN_BENCH_REPS")?.parse()?;
            let task = || FibThreshold {
                n,
                threshold: THRESHOLD,
            };
            if let Some(v) = rt.run(task())? {
                check(v, fib(n))?;
            }
            let mut times = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                let v = rt.run(task())?;
                let secs = t.elapsed().as_secs_f64();
                if let Some(v) = v {
                    check(v, fib(n))?;
                    times.push(secs);
                }
            }
            if !times.is_empty() {
                lines.push_str(&format!("times {config} {}\n", median(times)));
            }
        }
        // One timed run, during which listed ranks die.
        "once" => {
            let n: u32 = env("SATIN_BENCH_N")?.parse()?;
            let threshold: u32 = env("SATIN_BENCH_THRESHOLD")?.parse()?;
            die_if_listed(rank)?;
            let t = Instant::now();
            let v = rt.run(FibThreshold { n, threshold })?;
            // Timed before the check, which computes fib(n) once more, sequentially.
            let secs = t.elapsed().as_secs_f64();
            if let Some(v) = v {
                check(v, fib(n))?;
                lines.push_str(&format!("times {config} {secs}\n"));
            }
        }
        // A small tree to connect the processes, then the timed tree.
        "study" => {
            let depth: u32 = env("SATIN_BENCH_DEPTH")?.parse()?;
            let leaf = parse_leaf(&env("SATIN_BENCH_LEAF")?)?;
            let seed: u64 = env("SATIN_BENCH_SEED")?.parse()?;
            let warm = Sleepy::root(depth.min(10), (1, 1), seed);
            rt.run(warm)?;
            let root = Sleepy::root(depth, leaf, seed);
            die_if_listed(rank)?;
            let t = Instant::now();
            let v = rt.run(root)?;
            let secs = t.elapsed().as_secs_f64();
            if let Some(v) = v {
                check(v, 1 << depth)?;
                lines.push_str(&format!("times {config} {secs}\n"));
            }
        }
        other => return Err(format!("SATIN_BENCH_MODE: unknown mode '{other}'").into()),
    }
    let s = rt.stats().since(&before);
    lines.push_str(&format!(
        "steals {config} {rank} {} {} {} {} {}\nrecovery {config} {rank} {} {}\n",
        s.remote_steal_attempts,
        s.remote_steals,
        s.wide_steal_attempts,
        s.wide_steals,
        s.bytes_moved,
        s.jobs_reexecuted,
        s.orphan_results_reused
    ));
    // One write per process, appended: lines of different processes do not interleave.
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&out)?
        .write_all(lines.as_bytes())?;
    Ok(())
}

fn check(got: u64, want: u64) -> Result<(), Failure> {
    if got != want {
        return Err(format!("wrong result {got}, expected {want}").into());
    }
    Ok(())
}

// ------------------------------------------------------------------ launching pools

/// A pool to launch.
struct Config {
    name: String,
    nodes: u32,
    clusters: u32,
    latency: Option<Duration>,
    steal: &'static str,
    mode: &'static str,
    env: Vec<(String, String)>,
    /// Processes may die (they are killed on purpose): the survivors' success is what counts.
    crashes: bool,
}

/// What the processes of a launch reported.
#[derive(Default)]
struct Measured {
    times: Vec<f64>,
    /// Summed over processes: attempts, steals, wide attempts, wide steals, bytes.
    steals: [u64; 5],
    /// Summed over the survivors: jobs run again, orphan results reused.
    recovery: [u64; 2],
}

/// Launches `c` once and adds what its processes report to `m`.
fn launch(c: &Config, m: &mut Measured) -> Result<(), Failure> {
    let out = std::env::temp_dir().join(format!(
        "satin-dist-bench-{}-{}",
        std::process::id(),
        c.name
    ));
    let _ = std::fs::remove_file(&out);
    let mut env = vec![
        ("SATIN_BENCH_OUT".into(), out.to_string_lossy().into_owned()),
        ("SATIN_BENCH_CONFIG".into(), c.name.clone()),
        ("SATIN_BENCH_STEAL".into(), c.steal.into()),
        ("SATIN_BENCH_MODE".into(), c.mode.into()),
    ];
    env.extend(c.env.iter().cloned());
    let launch = ipl::run_pool::Launch {
        nodes: c.nodes,
        clusters: c.clusters,
        wan_latency: c.latency,
        wan_bandwidth: None,
        command: vec![std::env::current_exe()?.to_string_lossy().into_owned()],
        env,
        prefix_output: true,
    };
    let options = ipl::run_pool::RunOptions {
        tolerate_failures: c.crashes,
        ..Default::default()
    };
    let code = ipl::run_pool::run_with(&launch, &options)?;
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
            ["recovery", _, _, rest @ ..] if rest.len() == 2 => {
                for (acc, v) in m.recovery.iter_mut().zip(rest) {
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

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn ms(s: f64) -> f64 {
    s * 1e3
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.1}-{:.1} ms", ms(lo), ms(hi))
}

/// The median of the ratios `num[i] / den[i]`: the machine's speed drifting between rounds
/// cancels out.
fn ratio_median(num: &[f64], den: &[f64]) -> f64 {
    median(num.iter().zip(den).map(|(a, b)| a / b).collect())
}

fn main() -> ExitCode {
    if std::env::var_os("IPL_SERVER").is_some() {
        return cli::report(pool_member());
    }
    let args: Args = cli::parse_or_exit();
    let result = match args.what {
        None => {
            let (rounds, reps) = if args.quick {
                (1, 1)
            } else {
                (args.rounds as usize, 3)
            };
            two_processes(rounds, reps)
        }
        Some(What::Overhead(o)) => overhead(&o),
        Some(What::Crash(c)) => crash(&c),
        Some(What::Study(s)) => study(&s),
    };
    cli::report(result)
}

// ------------------------------------------------------------------ fib on two processes

/// fib(40) on 2 processes of 1 thread against sequential fib(40).
fn two_processes(rounds: usize, reps: usize) -> Result<(), Failure> {
    println!(
        "satin-dist-bench: {} cores, load average {} at the start; medians of {rounds} rounds \
         (a launch times {reps} runs after a warm-up; the speedup is the median of the ratios \
         within rounds)",
        cores(),
        load_average()
    );
    let two = Config {
        name: "two".into(),
        nodes: 2,
        clusters: 1,
        latency: None,
        steal: "cluster-aware",
        mode: "fib",
        env: vec![
            ("SATIN_BENCH_N".into(), "40".into()),
            ("SATIN_BENCH_REPS".into(), reps.to_string()),
        ],
        crashes: false,
    };
    let mut measured = Measured::default();
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
        launch(&two, &mut measured)?;
        eprintln!("round {} of {rounds} done", round + 1);
    }
    println!(
        "fib(40), threshold {THRESHOLD}: sequential {:.1} ms ({}), 2 processes x 1 thread {:.1} ms ({}): speedup {:.2}",
        ms(median(sequential.clone())),
        range(&sequential),
        ms(median(measured.times.clone())),
        range(&measured.times),
        ratio_median(&sequential, &measured.times)
    );
    println!(
        "the wide-area experiment is `satin-dist-bench study`: 64 simulated processors in up to \
         4 locations (4 processes on {} cores, as this benchmark once ran it, were too few to \
         show anything: 0 of 8 wide-area steals succeeded)",
        cores()
    );
    println!(
        "caveat: {} cores shared by both processes and by other work on the machine (load \
         average {} at the end)",
        cores(),
        load_average()
    );
    Ok(())
}

// ------------------------------------------------------------------ overhead against a baseline

/// Runs `DIR/ipl-run -n P -- DIR/examples/fib N T 1` and returns the master's time.
fn fib_under(dir: &Path, nodes: u32, (n, t): (u32, u32)) -> Result<f64, Failure> {
    let out = Command::new(dir.join("ipl-run"))
        .args(["-n", &nodes.to_string(), "--"])
        .arg(dir.join("examples").join("fib"))
        .args([n.to_string(), t.to_string(), "1".into()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{}: {}\n{text}", dir.display(), out.status).into());
    }
    // `[0] fib(N) = V  threshold T, P processes of 1 threads, ... stealing, S s`
    let want = format!("fib({n}) = {}", fib(n));
    let line = text
        .lines()
        .find(|l| l.contains(&want))
        .ok_or_else(|| format!("{}: no line with '{want}' in:\n{text}", dir.display()))?;
    let secs = line
        .rsplit(", ")
        .next()
        .and_then(|s| s.trim().strip_suffix(" s"))
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| format!("{}: no time in '{line}'", dir.display()))?;
    Ok(secs)
}

fn overhead(o: &Overhead) -> Result<(), Failure> {
    let this = std::env::current_exe()?
        .parent()
        .ok_or("no directory of this executable")?
        .to_path_buf();
    for dir in [&this, &o.baseline] {
        for needed in [dir.join("ipl-run"), dir.join("examples").join("fib")] {
            if !needed.is_file() {
                return Err(format!(
                    "{} is missing: build it with `cargo build --release -p satin --examples \
                     -p ipl --bin ipl-run` in that checkout",
                    needed.display()
                )
                .into());
            }
        }
    }
    let nodes = o.nodes as u32;
    println!(
        "satin-dist-bench overhead: {} cores, load average {} at the start; {nodes} processes \
         of 1 thread, this build ({}) against {}; {} rounds, the order alternating; the ratio \
         is the median of the ratios within rounds",
        cores(),
        load_average(),
        this.display(),
        o.baseline.display(),
        o.rounds
    );
    for &w in &o.fibs {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..o.rounds {
            if round % 2 == 0 {
                ours.push(fib_under(&this, nodes, w)?);
                theirs.push(fib_under(&o.baseline, nodes, w)?);
            } else {
                theirs.push(fib_under(&o.baseline, nodes, w)?);
                ours.push(fib_under(&this, nodes, w)?);
            }
        }
        let ratio = ratio_median(&ours, &theirs);
        println!(
            "fib({}), threshold {}: this build {:.1} ms ({}), baseline {:.1} ms ({}): ratio {:.3}, overhead {:+.1}%",
            w.0,
            w.1,
            ms(median(ours.clone())),
            range(&ours),
            ms(median(theirs.clone())),
            range(&theirs),
            ratio,
            (ratio - 1.0) * 100.0
        );
    }
    println!(
        "caveat: {} cores shared by every process and by other work on the machine (load \
         average {} at the end)",
        cores(),
        load_average()
    );
    Ok(())
}

// ------------------------------------------------------------------ a crash at a point of the run

fn crash(c: &Crash) -> Result<(), Failure> {
    let nodes = c.nodes as u32;
    let (n, threshold) = c.fib;
    let victim = nodes - 1;
    println!(
        "satin-dist-bench crash: {} cores, load average {} at the start; fib({n}) threshold \
         {threshold} on {nodes} processes of 1 thread; rank {victim} is killed (SIGKILL) at {:.0}% \
         of the crash-free time of the same round; {} rounds",
        cores(),
        load_average(),
        c.at * 100.0,
        c.rounds
    );
    let config = |name: &str, die: Option<String>| Config {
        name: name.into(),
        nodes,
        clusters: 1,
        latency: None,
        steal: "cluster-aware",
        mode: "once",
        env: [
            ("SATIN_BENCH_N".to_string(), n.to_string()),
            ("SATIN_BENCH_THRESHOLD".to_string(), threshold.to_string()),
        ]
        .into_iter()
        .chain(die.map(|d| ("SATIN_BENCH_DIE".to_string(), d)))
        .collect(),
        crashes: true,
    };
    let (mut clean, mut crashed) = (Measured::default(), Measured::default());
    for round in 0..c.rounds {
        launch(&config("crash-free", None), &mut clean)?;
        let t0 = *clean.times.last().expect("a time per launch");
        let die = format!("{victim}:{}", t0 * c.at);
        launch(&config("crash", Some(die)), &mut crashed)?;
        eprintln!("round {} of {} done", round + 1, c.rounds);
    }
    let ratio = ratio_median(&crashed.times, &clean.times);
    println!(
        "crash-free {:.1} ms ({}), with the crash {:.1} ms ({}): ratio {:.2}; per crash run {:.1} jobs run again, {:.1} orphan results reused; every result exact",
        ms(median(clean.times.clone())),
        range(&clean.times),
        ms(median(crashed.times.clone())),
        range(&crashed.times),
        ratio,
        crashed.recovery[0] as f64 / c.rounds as f64,
        crashed.recovery[1] as f64 / c.rounds as f64,
    );
    println!(
        "what the crash costs: the dead process's share of the work after the crash (the \
         survivors do it), its stolen jobs computed again (less the orphans reused), and the \
         wait for orphans before they run again (a quarter of the run so far at most)"
    );
    Ok(())
}

// ------------------------------------------------------------------ the simulation study

/// One row of the study.
struct Row {
    locations: u32,
    latency_ms: u32,
    policy: &'static str,
    seconds: f64,
    speedup: f64,
    steals: [u64; 5],
}

fn study(s: &Study) -> Result<(), Failure> {
    let nodes = s.nodes as u32;
    let depth = s.depth as u32;
    let root = Sleepy::root(depth, s.leaf_ms, s.seed);
    let sum = root.total().as_secs_f64();
    println!(
        "satin-dist-bench study: {} cores, load average {} at the start; {nodes} processes of \
         1 thread; a binary tree of 2^{depth} leaves that sleep {}-{} ms each (sum {:.1} s); \
         one run per configuration after a warm-up run",
        cores(),
        load_average(),
        s.leaf_ms.0,
        s.leaf_ms.1,
        sum
    );
    // One process of one worker runs the same tree.
    let one_process = |tree: Sleepy, depth: u32| -> Result<f64, Failure> {
        let rt = satin::Runtime::local().threads(1);
        let t = Instant::now();
        check(rt.run(tree)?, 1 << depth)?;
        Ok(t.elapsed().as_secs_f64())
    };
    let t1 = if s.t1_measured || depth <= 12 {
        let t1 = one_process(root, depth)?;
        println!(
            "one process: {t1:.1} s measured ({:+.2}% over the sum of the leaves)",
            (t1 / sum - 1.0) * 100.0
        );
        t1
    } else {
        let small = Sleepy::root(12, s.leaf_ms, s.seed);
        let factor = one_process(small, 12)? / small.total().as_secs_f64();
        println!(
            "one process: {:.1} s, the sum of the leaves times the one-process overhead              measured on 2^12 leaves of the same costs ({:+.2}%; --t1-measured runs the whole              tree instead)",
            sum * factor,
            (factor - 1.0) * 100.0
        );
        sum * factor
    };
    let study_env = || {
        vec![
            ("SATIN_BENCH_DEPTH".to_string(), depth.to_string()),
            (
                "SATIN_BENCH_LEAF".to_string(),
                format!("{}-{}", s.leaf_ms.0, s.leaf_ms.1),
            ),
            ("SATIN_BENCH_SEED".to_string(), s.seed.to_string()),
        ]
    };
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    for &locations in &s.locations {
        if locations > nodes {
            return Err(format!("--locations {locations} exceeds --nodes {nodes}").into());
        }
        let latencies: Vec<u32> = if locations == 1 {
            vec![0]
        } else {
            s.latencies.clone()
        };
        for latency in latencies {
            let policies: &[&'static str] = if locations == 1 {
                &["random"]
            } else {
                &["random", "cluster-aware"]
            };
            for &policy in policies {
                configs.push((locations, latency, policy));
            }
        }
    }
    for (i, &(locations, latency_ms, policy)) in configs.iter().enumerate() {
        let c = Config {
            name: format!("study-{locations}-{latency_ms}-{policy}"),
            nodes,
            clusters: locations,
            latency: (latency_ms > 0).then(|| Duration::from_millis(u64::from(latency_ms))),
            steal: policy,
            mode: "study",
            env: study_env(),
            crashes: false,
        };
        let mut m = Measured::default();
        launch(&c, &mut m)?;
        let seconds = m.times[0];
        eprintln!(
            "{} of {}: {locations} location(s), {latency_ms} ms, {policy}: {seconds:.2} s",
            i + 1,
            configs.len()
        );
        rows.push(Row {
            locations,
            latency_ms,
            policy,
            seconds,
            speedup: t1 / seconds,
            steals: m.steals,
        });
    }
    let single = rows.iter().find(|r| r.locations == 1).map(|r| r.seconds);
    println!();
    println!(
        "| locations | one-way latency | stealing | time | speedup over 1 process | vs 1 location | steals (wide-area) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let vs = single.map_or_else(String::new, |t| {
            format!("{:+.1}%", (r.seconds / t - 1.0) * 100.0)
        });
        println!(
            "| {} | {} ms | {} | {:.2} s | {:.1} | {} | {} ({} of {}) |",
            r.locations,
            r.latency_ms,
            r.policy,
            r.seconds,
            r.speedup,
            vs,
            r.steals[1],
            r.steals[3],
            r.steals[2]
        );
    }
    let mut crash_line = None;
    if s.kill > 0 {
        let Some(clean) = single else {
            return Err(
                "the crash run needs a 1-location run to time (add 1 to --locations)".into(),
            );
        };
        let kill = s.kill as u32;
        if kill >= nodes {
            return Err(format!("--kill {kill} must be below --nodes {nodes}").into());
        }
        let mut rng = s.seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut victims: Vec<u32> = (1..nodes).collect();
        for i in 0..victims.len() {
            let j = i + (next() % (victims.len() - i) as u64) as usize;
            victims.swap(i, j);
        }
        victims.truncate(kill as usize);
        let die: Vec<String> = victims
            .iter()
            .map(|v| {
                let at = clean * (0.1 + 0.8 * (next() % 1000) as f64 / 1000.0);
                format!("{v}:{at:.3}")
            })
            .collect();
        let c = Config {
            name: "study-crash".into(),
            nodes,
            clusters: 1,
            latency: None,
            steal: "random",
            mode: "study",
            env: study_env()
                .into_iter()
                .chain([("SATIN_BENCH_DIE".to_string(), die.join(","))])
                .collect(),
            crashes: true,
        };
        let mut m = Measured::default();
        launch(&c, &mut m)?;
        let seconds = m.times[0];
        let line = format!(
            "{kill} of {nodes} processes killed at random moments between 10% and 90% of the \
             crash-free time: exact result in {seconds:.2} s against {clean:.2} s crash-free \
             ({:+.1}%); {} jobs run again, {} orphan results reused",
            (seconds / clean - 1.0) * 100.0,
            m.recovery[0],
            m.recovery[1]
        );
        println!();
        println!("{line}");
        crash_line = Some((kill, seconds, clean));
    }
    println!();
    println!(
        "what this simulates: {nodes} processes with one worker each whose leaves sleep their \
         cost, so that the {} cores here only run the scheduling (spawns, steals, messages), \
         which is little, and {nodes} processes behave like {nodes} processors for scheduling \
         and latency: idle time, steal round trips, wide-area latency (the wan driver delays \
         every message between locations). What it cannot show: contention for the cores and \
         for memory bandwidth of real computation, caches, and the cost of moving large jobs \
         (these jobs are a few bytes); and the {} cores do add some delay to every message \
         when many processes are busy at once (load average {} at the end).",
        cores(),
        cores(),
        load_average()
    );
    if let Some(path) = &s.csv {
        let mut text = String::from(
            "locations,latency_ms,policy,nodes,seconds,speedup,t1_seconds,steal_attempts,steals,wide_attempts,wide_steals\n",
        );
        for r in &rows {
            text.push_str(&format!(
                "{},{},{},{nodes},{:.4},{:.3},{t1:.4},{},{},{},{}\n",
                r.locations,
                r.latency_ms,
                r.policy,
                r.seconds,
                r.speedup,
                r.steals[0],
                r.steals[1],
                r.steals[2],
                r.steals[3]
            ));
        }
        if let Some((kill, seconds, clean)) = crash_line {
            text.push_str(&format!(
                "# crash: {kill} of {nodes} killed, {seconds:.4} s against {clean:.4} s crash-free\n"
            ));
        }
        std::fs::write(path, text)?;
        println!("figures written to {}", path.display());
    }
    Ok(())
}
