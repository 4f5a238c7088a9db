//! An idle runtime parks its workers instead of spinning.

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

#[test]
fn idle_workers_do_not_burn_cpu() {
    let used = bounded("idle", || {
        let rt = Runtime::local().threads(4);
        assert_eq!(rt.run(Fib(20)).unwrap(), fib(20));
        // Let the workers go through their backoff, then watch them for a second.
        std::thread::sleep(Duration::from_millis(200));
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
