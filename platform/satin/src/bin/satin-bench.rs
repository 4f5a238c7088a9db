//! Micro-benchmarks of the runtime's scheduling overhead.
//!
//! `cargo run --release -p satin --bin satin-bench -- [--reps N] [--quick]`
//!
//! Prints, each as the median of several repetitions:
//! 1. fib(32) where every call spawns both children, on 2 threads, next to the same
//!    computation with `rayon::join` on a 2-thread rayon pool, and their ratio; also the
//!    variant closest to `join`, which spawns one child and runs the other with
//!    `Context::call`, and the first again with every spawn queued (`Inlining::OFF`), which
//!    shows what the runtime's spawn inlining saves. These four alternate within every round,
//!    and each ratio is the median of the ratios within rounds;
//! 2. the spawn overhead on 1 thread, in ns per spawn over the plain recursive function;
//! 3. fib(40) with a sequential threshold of 20 on 2 threads against plain sequential fib(40).

use std::hint::black_box;
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

fn rayon_fib(n: u32) -> u64 {
    if n < 2 {
        return n as u64;
    }
    let (a, b) = rayon::join(|| rayon_fib(n - 1), || rayon_fib(n - 2));
    a + b
}

/// Number of calls of the recursive fib(n): every call but the root's is a spawn.
fn calls(n: u32) -> u64 {
    2 * fib(n + 1) - 1
}

/// A named computation timed in every round.
type Contender<'a> = (&'static str, Box<dyn FnMut() + 'a>);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<R>(reps: usize, mut f: impl FnMut() -> R) -> Duration {
    black_box(f()); // warm-up: thread start, caches, recycled records
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut reps = 11;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reps" => reps = args.next().ok_or("--reps needs a number")?.parse()?,
            "--quick" => reps = 3,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "satin-bench: median of {reps} repetitions (ratios: median of the per-round ratios), {cores} cores available"
    );

    let n = 32;
    let expect = fib(n);
    let satin2 = satin::Runtime::local().threads(2);
    let queued2 = satin::Runtime::local()
        .threads(2)
        .inlining(satin::Inlining::OFF);
    let pool2 = rayon::ThreadPoolBuilder::new().num_threads(2).build()?;
    // The contenders alternate within every round and each ratio is taken within a round, so
    // that the machine's speed drifting between rounds (other tenants of a shared host)
    // cancels out of the ratios.
    let mut contenders: [Contender; 4] = [
        (
            "rayon",
            Box::new(|| assert_eq!(pool2.install(|| rayon_fib(n)), expect)),
        ),
        (
            "satin",
            Box::new(|| assert_eq!(satin2.run(Fib(n)).expect("fib run"), expect)),
        ),
        (
            "call",
            Box::new(|| assert_eq!(satin2.run(FibCall(n)).expect("fib run"), expect)),
        ),
        (
            "queued",
            Box::new(|| assert_eq!(queued2.run(Fib(n)).expect("fib run"), expect)),
        ),
    ];
    let mut times: [Vec<Duration>; 4] = Default::default();
    for round in 0..=reps {
        for (i, (_, f)) in contenders.iter_mut().enumerate() {
            let t = Instant::now();
            f();
            // Round 0 warms up: thread start, caches, recycled records.
            if round > 0 {
                times[i].push(t.elapsed());
            }
        }
    }
    drop(contenders);
    drop(queued2);
    let ratio = |i: usize| {
        let mut r: Vec<f64> = times[i]
            .iter()
            .zip(&times[0])
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let med = |i: usize| median(times[i].clone());
    println!(
        "fib({n}), every call spawns, 2 threads: satin {:.1} ms, rayon::join {:.1} ms, satin/rayon = {:.2}",
        ms(med(1)),
        ms(med(0)),
        ratio(1)
    );
    println!(
        "fib({n}), every call spawns one child and calls the other, 2 threads: satin {:.1} ms, satin/rayon = {:.2}",
        ms(med(2)),
        ratio(2)
    );
    println!(
        "fib({n}), every call spawns, every spawn queued (Inlining::OFF), 2 threads: satin {:.1} ms, satin/rayon = {:.2}",
        ms(med(3)),
        ratio(3)
    );

    let satin1 = satin::Runtime::local().threads(1);
    let t_seq = time(reps, || assert_eq!(fib(black_box(n)), expect));
    let t_one = time(reps, || {
        assert_eq!(satin1.run(Fib(n)).expect("fib run"), expect);
    });
    drop(satin1);
    let queued1 = satin::Runtime::local()
        .threads(1)
        .inlining(satin::Inlining::OFF);
    let t_one_queued = time(reps, || {
        assert_eq!(queued1.run(Fib(n)).expect("fib run"), expect);
    });
    drop(queued1);
    let spawns = calls(n) - 1;
    let per_spawn = |t: Duration| (t.as_secs_f64() - t_seq.as_secs_f64()) * 1e9 / spawns as f64;
    println!(
        "spawn overhead, 1 thread: fib({n}) satin {:.1} ms vs plain recursion {:.1} ms: {:.1} ns per spawn ({spawns} spawns); every spawn queued: {:.1} ms, {:.1} ns per spawn",
        ms(t_one),
        ms(t_seq),
        per_spawn(t_one),
        ms(t_one_queued),
        per_spawn(t_one_queued),
    );

    let n = 40;
    let expect = fib(n);
    // Sequential and parallel alternate, as above; the speedup is the median of the rounds'.
    let (mut seq, mut par) = (Vec::new(), Vec::new());
    for round in 0..=reps.min(7) {
        let t = Instant::now();
        assert_eq!(fib(black_box(n)), expect);
        let t_seq = t.elapsed();
        let t = Instant::now();
        let v = satin2
            .run(FibThreshold { n, threshold: 20 })
            .expect("fib run");
        assert_eq!(v, expect);
        if round > 0 {
            seq.push(t_seq);
            par.push(t.elapsed());
        }
    }
    let mut speedups: Vec<f64> = seq
        .iter()
        .zip(&par)
        .map(|(s, p)| s.as_secs_f64() / p.as_secs_f64())
        .collect();
    speedups.sort_by(f64::total_cmp);
    println!(
        "fib({n}), threshold 20, 2 threads: satin {:.1} ms vs sequential {:.1} ms: speedup {:.2}",
        ms(median(par)),
        ms(median(seq)),
        speedups[speedups.len() / 2]
    );
    Ok(())
}
