//! An idle runtime parks its workers instead of spinning, and counts as idle only the time
//! its workers found nothing to do.

#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::tasks::Fib;
use common::{bounded, fib};
use satin::Runtime;

/// CPU time (user + system) this process has used, from `/proc/self/stat`.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // The kernel reports clock ticks of 1/100 s on every common Linux configuration.
    Duration::from_millis(ticks * 10)
}

/// Held by each test of this file while it runs: the CPU time measured is the whole
/// process's, which another test computing meanwhile would add to.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`ONE_AT_A_TIME`], whether or not a test that held it failed.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn idle_workers_do_not_burn_cpu() {
    let _alone = alone();
    let used = bounded("idle", || {
        let rt = Runtime::local().threads(4);
        assert_eq!(rt.run(Fib(20)).unwrap(), fib(20));
        // Once every worker is through its backoff (spinning, then yielding) and parks, watch
        // them for a second.
        let remote = rt.remote().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while remote.idle_workers() < rt.num_threads() {
            assert!(
                Instant::now() < deadline,
                "{} of {} workers parked 10 s after the run",
                remote.idle_workers(),
                rt.num_threads()
            );
            std::thread::park_timeout(Duration::from_millis(1));
        }
        let (cpu, wall) = (process_cpu(), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let used = process_cpu() - cpu;
        assert!(wall.elapsed() >= Duration::from_secs(1));
        used
    });
    // Four spinning workers would use close to two seconds of CPU here, on two cores.
    assert!(
        used < Duration::from_millis(150),
        "idle workers used {used:?} of CPU in 1 s"
    );
}

/// Busy work of about `micros` µs that adds its own duration to `WORKED_NS`.
#[derive(serde::Serialize, serde::Deserialize)]
struct TimedLeaf {
    micros: u64,
}

static WORKED_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl satin::Task for TimedLeaf {
    type Output = u64;
    fn run(self, _cx: &mut satin::Context) -> u64 {
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_micros(self.micros) {
            for i in 0..100u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        WORKED_NS.fetch_add(
            start.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        x
    }
}
satin::register!(TimedLeaf);

/// Makes a thread wait at a sync with nothing to steal for a while, and then find a long
/// job to run while it waits: the root's first child is stolen and starts with a stretch of
/// work that spawns nothing, then spawns two long leaves.
#[derive(serde::Serialize, serde::Deserialize)]
enum WaitThenHelp {
    Root,
    Stolen,
}

impl satin::Task for WaitThenHelp {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        match self {
            WaitThenHelp::Root => {
                let stolen = cx.spawn(WaitThenHelp::Stolen);
                // Long enough for the other worker to take the first child.
                let here = cx.spawn(TimedLeaf { micros: 3_000 });
                cx.sync();
                stolen.take() ^ here.take()
            }
            WaitThenHelp::Stolen => {
                let first = cx.call(TimedLeaf { micros: 6_000 });
                let a = cx.spawn(TimedLeaf { micros: 20_000 });
                let b = cx.spawn(TimedLeaf { micros: 20_000 });
                cx.sync();
                first ^ a.take() ^ b.take()
            }
        }
    }
}
satin::register!(WaitThenHelp);

#[test]
fn idle_time_never_includes_work_done_while_waiting() {
    let _alone = alone();
    let threads = 2;
    let (idle, worked, wall) = bounded("idle accounting", move || {
        WORKED_NS.store(0, std::sync::atomic::Ordering::Relaxed);
        // Every worker starts after this instant, so all its idle time falls after it.
        let start = Instant::now();
        let rt = Runtime::local().threads(threads);
        for _ in 0..5 {
            rt.run(WaitThenHelp::Root).unwrap();
        }
        let idle = rt.stats().idle;
        let worked = Duration::from_nanos(WORKED_NS.load(std::sync::atomic::Ordering::Relaxed));
        // Measured last: whatever the counters hold was spent before this.
        let wall = start.elapsed();
        (idle, worked, wall)
    });
    // Each worker's time splits into work, idling and bookkeeping, so the two sums cannot
    // exceed what the workers had in all. Counting the jobs a waiting worker runs as idle
    // (as the accounting once did) breaks this.
    let available = wall * threads as u32;
    assert!(
        idle + worked <= available,
        "idle {idle:?} + work {worked:?} > {threads} workers x {wall:?}"
    );
}
