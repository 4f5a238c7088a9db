//! Micro-benchmarks of the runtime's scheduling overhead.
//!
//! `cargo build --release -p satin --bin satin-bench && target/release/satin-bench [--reps N]`
//!
//! Prints, each as the median of `--reps` rounds:
//! 1. fib(32) where every call spawns, on 2 threads, against the same computation with
//!    `rayon::join` on a 2-thread rayon pool. Four variants: every call spawns both children
//!    with every spawn queued where thieves can take it (`Inlining::OFF`, the headline), the
//!    same with the default spawn inlining (deep spawns run their child at once while this
//!    worker has queued work, so those children cannot be stolen), and both again with one
//!    child spawned and the other run by `Context::call`, the shape of `rayon::join`. All five
//!    alternate within every round, and each ratio is the median of the ratios within rounds;
//! 2. the cost of a spawn on 1 thread, in ns over the plain recursive function, with every
//!    spawn queued and with the default inlining, next to the cost of a `rayon::join`;
//! 3. fib(40) with a sequential threshold of 20 on 2 threads against plain sequential fib(40),
//!    next to the same computation with `rayon::join` on 2 threads, in the same rounds: on a
//!    shared host the speedup either reaches varies from run to run with what the other
//!    tenants do, and rayon's says what this machine gave at the time.
//!
//! `--once VARIANT` runs one variant once instead, to count its instructions under
//! `valgrind --tool=callgrind` (repeatable on a loaded machine, unlike times).

use std::error::Error;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Every call spawns both children: the Fib of the runtime's documentation.
#[derive(Serialize, Deserialize)]
struct Fib(u32);

impl satin::Task for Fib {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let a = cx.spawn(Fib(self.0 - 1));
        let b = cx.spawn(Fib(self.0 - 2));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Fib);

/// Spawns one child and runs the other in place, as `rayon::join` does.
#[derive(Serialize, Deserialize)]
struct FibCall(u32);

impl satin::Task for FibCall {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let a = cx.spawn(FibCall(self.0 - 1));
        let b = cx.call(FibCall(self.0 - 2));
        cx.sync();
        a.take() + b
    }
}
satin::register!(FibCall);

// Both benchmarks measure the same task.
#[path = "shared/fib_threshold.rs"]
mod fib_threshold;
use fib_threshold::{fib, FibThreshold};

#[path = "shared/cli.rs"]
mod cli;

#[derive(clap::Parser)]
#[command(
    name = "satin-bench",
    version,
    about = "Scheduling overhead of satin's local runtime, against rayon::join",
    allow_negative_numbers = true
)]
struct Args {
    /// Timed rounds of each measurement; medians are printed.
    #[arg(long, value_name = "N", default_value_t = 11,
          value_parser = clap::value_parser!(i64).range(1..=1000))]
    reps: i64,
    /// Three rounds: a quick look, not figures to quote.
    #[arg(long, conflicts_with = "reps")]
    quick: bool,
    /// Runs one variant once and prints its time, for counting instructions under callgrind.
    #[arg(long, value_enum, value_name = "VARIANT")]
    once: Option<Variant>,
    /// fib(N) for --once.
    #[arg(long, value_name = "N", default_value_t = 25, requires = "once",
          value_parser = clap::value_parser!(i64).range(2..=45))]
    n: i64,
    /// Worker threads for --once.
    #[arg(long, value_name = "T", default_value_t = 1, requires = "once",
          value_parser = clap::value_parser!(i64).range(1..=1024))]
    threads: i64,
}

/// What `--once` runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Variant {
    /// The plain recursive function.
    Sequential,
    /// `rayon::join` for every call.
    Rayon,
    /// Every call spawns both children, every spawn queued (`Inlining::OFF`).
    Queued,
    /// Every call spawns both children, default inlining.
    Inlined,
    /// One child spawned, the other called, every spawn queued.
    CallQueued,
    /// One child spawned, the other called, default inlining.
    CallInlined,
}

fn rayon_fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| rayon_fib(n - 1), || rayon_fib(n - 2));
    a + b
}

/// fib with `rayon::join` above `threshold`, plain recursion below: [`FibThreshold`] in rayon.
fn rayon_fib_threshold(n: u32, threshold: u32) -> u64 {
    if n < threshold || n < 2 {
        return fib(n);
    }
    let (a, b) = rayon::join(
        || rayon_fib_threshold(n - 1, threshold),
        || rayon_fib_threshold(n - 2, threshold),
    );
    a + b
}

/// Number of calls of the recursive fib(n): every call but the root's is a spawn.
fn calls(n: u32) -> u64 {
    2 * fib(n + 1) - 1
}

type Outcome = Result<(), Box<dyn Error>>;

/// A named computation timed in every round.
type Contender<'a> = (&'static str, Box<dyn FnMut() -> Outcome + 'a>);

/// Fails with a message naming the computation if it gave the wrong number.
fn check(what: &str, got: u64, expect: u64) -> Outcome {
    if got == expect {
        Ok(())
    } else {
        Err(format!("{what} gave {got}, expected {expect}").into())
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Times every contender once per round, alternating, after a warm-up round (thread start,
/// caches); returns each one's times.
fn rounds(reps: usize, contenders: &mut [Contender]) -> Result<Vec<Vec<Duration>>, Box<dyn Error>> {
    let mut times = vec![Vec::new(); contenders.len()];
    for round in 0..=reps {
        for (i, (_, f)) in contenders.iter_mut().enumerate() {
            let t = Instant::now();
            f()?;
            if round > 0 {
                times[i].push(t.elapsed());
            }
        }
    }
    Ok(times)
}

/// The median over rounds of `times[i] / times[base]`: changes of the machine's speed between
/// rounds (other tenants of a shared host) cancel out.
fn ratio(times: &[Vec<Duration>], i: usize, base: usize) -> f64 {
    median_f64(
        times[i]
            .iter()
            .zip(&times[base])
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect(),
    )
}

fn main() -> ExitCode {
    let args: Args = cli::parse_or_exit();
    cli::report(match args.once {
        Some(variant) => once(variant, args.n as u32, args.threads as usize),
        None => all(if args.quick { 3 } else { args.reps as usize }),
    })
}

fn once(variant: Variant, n: u32, threads: usize) -> Outcome {
    let expect = fib(n);
    let satin = |inlining| satin::Runtime::local().threads(threads).inlining(inlining);
    let t = Instant::now();
    let got = match variant {
        Variant::Sequential => fib(black_box(n)),
        Variant::Rayon => rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?
            .install(|| rayon_fib(n)),
        Variant::Queued => satin(satin::Inlining::OFF).run(Fib(n))?,
        Variant::Inlined => satin(satin::Inlining::DEFAULT).run(Fib(n))?,
        Variant::CallQueued => satin(satin::Inlining::OFF).run(FibCall(n))?,
        Variant::CallInlined => satin(satin::Inlining::DEFAULT).run(FibCall(n))?,
    };
    check(&format!("{variant:?} fib({n})"), got, expect)?;
    println!(
        "{variant:?}: fib({n}) on {threads} threads in {:.2} ms, runtime start included",
        ms(t.elapsed())
    );
    Ok(())
}

fn all(reps: usize) -> Outcome {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "satin-bench: medians of {reps} rounds (each round runs every variant once; ratios are medians of the ratios within rounds), {cores} cores available, load average {} at the start",
        load_average()
    );

    let n = 32;
    let expect = fib(n);
    let queued2 = satin::Runtime::local()
        .threads(2)
        .inlining(satin::Inlining::OFF);
    let inlined2 = satin::Runtime::local()
        .threads(2)
        .inlining(satin::Inlining::DEFAULT);
    let pool2 = rayon::ThreadPoolBuilder::new().num_threads(2).build()?;
    let mut contenders: [Contender; 5] = [
        (
            "rayon::join",
            Box::new(|| check("rayon fib", pool2.install(|| rayon_fib(n)), expect)),
        ),
        (
            "every call spawns both children, every spawn queued and stealable (Inlining::OFF)",
            Box::new(|| check("satin fib", queued2.run(Fib(n))?, expect)),
        ),
        (
            "every call spawns both children, default inlining (deep spawns run their child at once, unstealable)",
            Box::new(|| check("satin fib", inlined2.run(Fib(n))?, expect)),
        ),
        (
            "every call spawns one child and calls the other (the shape of rayon::join), every spawn queued and stealable",
            Box::new(|| check("satin fib", queued2.run(FibCall(n))?, expect)),
        ),
        (
            "every call spawns one child and calls the other, default inlining",
            Box::new(|| check("satin fib", inlined2.run(FibCall(n))?, expect)),
        ),
    ];
    let times = rounds(reps, &mut contenders)?;
    println!(
        "fib({n}) on 2 threads, rayon::join {:.1} ms:",
        ms(median(times[0].clone()))
    );
    for (i, (label, _)) in contenders.iter().enumerate().skip(1) {
        println!(
            "  {label}: satin {:.1} ms, satin/rayon = {:.2}",
            ms(median(times[i].clone())),
            ratio(&times, i, 0)
        );
    }
    drop(contenders);
    drop((queued2, inlined2, pool2));

    // The cost of one spawn on 1 thread: the time over the plain recursion, per spawn.
    let queued1 = satin::Runtime::local()
        .threads(1)
        .inlining(satin::Inlining::OFF);
    let inlined1 = satin::Runtime::local()
        .threads(1)
        .inlining(satin::Inlining::DEFAULT);
    let pool1 = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let mut contenders: [Contender; 4] = [
        (
            "plain recursion",
            Box::new(|| check("fib", fib(black_box(n)), expect)),
        ),
        (
            "queued",
            Box::new(|| check("satin fib", queued1.run(Fib(n))?, expect)),
        ),
        (
            "inlined",
            Box::new(|| check("satin fib", inlined1.run(Fib(n))?, expect)),
        ),
        (
            "rayon",
            Box::new(|| check("rayon fib", pool1.install(|| rayon_fib(n)), expect)),
        ),
    ];
    let times = rounds(reps, &mut contenders)?;
    drop(contenders);
    let spawns = calls(n) - 1;
    let joins = (calls(n) - 1) / 2;
    let t_seq = median(times[0].clone()).as_secs_f64();
    let over = |i: usize, count: u64| {
        (median(times[i].clone()).as_secs_f64() - t_seq) * 1e9 / count as f64
    };
    println!(
        "cost of a spawn on 1 thread, fib({n}) over the plain recursion ({:.1} ms, {spawns} spawns): every spawn queued {:.1} ns per spawn ({:.1} ms), default inlining {:.1} ns per spawn ({:.1} ms); rayon::join {:.1} ns per join ({joins} joins, {:.1} ms)",
        t_seq * 1e3,
        over(1, spawns),
        ms(median(times[1].clone())),
        over(2, spawns),
        ms(median(times[2].clone())),
        over(3, joins),
        ms(median(times[3].clone())),
    );
    drop((queued1, inlined1, pool1));

    let n = 40;
    let expect = fib(n);
    let satin2 = satin::Runtime::local().threads(2);
    let pool2 = rayon::ThreadPoolBuilder::new().num_threads(2).build()?;
    let mut contenders: [Contender; 3] = [
        (
            "sequential",
            Box::new(|| check("fib", fib(black_box(n)), expect)),
        ),
        (
            "satin",
            Box::new(|| {
                let v = satin2.run(FibThreshold { n, threshold: 20 })?;
                check("satin fib", v, expect)
            }),
        ),
        (
            "rayon",
            Box::new(|| {
                check(
                    "rayon fib",
                    pool2.install(|| rayon_fib_threshold(n, 20)),
                    expect,
                )
            }),
        ),
    ];
    let times = rounds(reps.min(7), &mut contenders)?;
    drop(contenders);
    println!(
        "fib({n}), threshold 20, 2 threads: satin {:.1} ms vs sequential {:.1} ms: speedup {:.2} \
         (rayon::join, same threshold: {:.1} ms, speedup {:.2})",
        ms(median(times[1].clone())),
        ms(median(times[0].clone())),
        1.0 / ratio(&times, 1, 0),
        ms(median(times[2].clone())),
        1.0 / ratio(&times, 2, 0),
    );
    println!("load average {} at the end", load_average());
    Ok(())
}
