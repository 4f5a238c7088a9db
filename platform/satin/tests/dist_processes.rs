//! Distributed runs on real processes: this test binary re-run with a role in
//! `SATIN_TEST_ROLE`, the processes forming a tcp pool whose registry runs in the test
//! process. Every child is killed when its test ends, however it ends, and every wait is
//! bounded. Crashes, leaves and joins are in `fault_tolerance.rs`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::tasks::{queens, Fib, RandomTree};
use common::{fib, LIMIT};
use ipl::{Config, Ibis, RegistryServer};
use satin::{Context, Runtime, Steal, Task};
use serde::{Deserialize, Serialize};

/// Kills the child when the test ends, unless it was waited for.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn role() -> Option<String> {
    std::env::var("SATIN_TEST_ROLE").ok()
}

const TREE: RandomTree = RandomTree { seed: 42, depth: 9 };

/// Eight children of some milliseconds of plain sequential work each: the other processes,
/// idle meanwhile, ask for work long before the master could finish them alone, so this run
/// moves jobs however quickly the others finish (spawns deep in a tree may run at once, and
/// then a small run can end before any thief asks).
#[derive(Serialize, Deserialize)]
struct Spread;

impl Task for Spread {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let children: Vec<_> = (0..8).map(|_| cx.spawn(SequentialFib(27))).collect();
        cx.sync();
        children.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(Spread);

/// fib(n) by the plain recursive function, in one job, computed again and again for at least
/// 20 ms: long enough, in a release build too (where fib(27) takes about a millisecond), that
/// the other processes ask for work while the master still has some, even when they start
/// the run late on a loaded machine.
#[derive(Serialize, Deserialize)]
struct SequentialFib(u32);

impl Task for SequentialFib {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        let start = Instant::now();
        let mut v = fib(self.0);
        while start.elapsed() < Duration::from_millis(20) {
            v = fib(std::hint::black_box(self.0));
        }
        v
    }
}
satin::register!(SequentialFib);

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Some(role) = role() else { return };
    // The test harness has printed `test child_process_entry ... ` without a line end.
    println!();
    common::log_from_env();
    let ibis = Ibis::join(Config::from_env().expect("IPL_* environment")).expect("join");
    let rank = ibis.id().rank();
    let policy = match std::env::var("SATIN_TEST_STEAL").as_deref() {
        Ok("random") => Steal::Random,
        _ => Steal::ClusterAware,
    };
    let rt = Runtime::in_pool(ibis.clone()).threads(1).steal(policy);
    match role.as_str() {
        "compute" => {
            let results = [
                rt.run(Fib(24)),
                rt.run(queens(10, 4)),
                rt.run(TREE),
                rt.run(Spread),
            ];
            for (i, r) in results.into_iter().enumerate() {
                match r {
                    Ok(Some(v)) => println!("result {rank} {i} {v}"),
                    Ok(None) => println!("none {rank} {i}"),
                    Err(e) => println!("error {rank} {i}: {e}"),
                }
            }
            let s = rt.stats();
            println!("stats {rank} {} {}", s.jobs_received, s.jobs_sent);
        }
        r => panic!("unknown role {r}"),
    }
}

/// Starts rank `rank` of a pool of `size` in `clusters` locations with `role`; its stdout
/// lines go to `lines`.
fn child(
    role: &str,
    policy: &str,
    registry: &RegistryServer,
    pool: &str,
    (size, clusters, rank): (u32, u32, u32),
    lines: mpsc::Sender<(u32, String)>,
) -> Reaped {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("SATIN_TEST_ROLE", role)
    .env("SATIN_TEST_STEAL", policy)
    .env("IPL_SERVER", registry.address().to_string())
    .env("IPL_POOL", pool)
    .env("IPL_POOL_SIZE", size.to_string())
    .env("IPL_RANK", rank.to_string())
    .env("IPL_SECRET", "satin-processes")
    .env(
        "IPL_LOCATION",
        ipl::run_pool::location_of(rank, size, clusters),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    let mut child = c.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send((rank, line));
        }
    });
    Reaped(Some(child))
}

/// Waits for `child` to exit before `deadline`; its exit code. Kills it if it does not exit.
fn wait_exit(child: &mut Reaped, deadline: Instant) -> i32 {
    let limit = deadline.saturating_duration_since(Instant::now());
    let mut c = child.0.take().expect("running");
    let pid = c.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.wait().map(|s| s.code().unwrap_or(-1)));
    });
    match rx.recv_timeout(limit) {
        Ok(code) => code.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on our child, which has not been reaped yet (its waiter waits).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            panic!("child {pid} did not exit within {limit:?}");
        }
    }
}

fn compute_on_processes(size: u32, clusters: u32, policy: &str) {
    let deadline = Instant::now() + LIMIT;
    let registry = RegistryServer::start("127.0.0.1:0", "satin-processes").unwrap();
    let pool = format!("satin-proc-{}-{size}-{policy}", std::process::id());
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Reaped> = (0..size)
        .map(|rank| {
            child(
                "compute",
                policy,
                &registry,
                &pool,
                (size, clusters, rank),
                tx.clone(),
            )
        })
        .collect();
    drop(tx);
    let expect = [fib(24), 724, TREE.sequential(), 8 * fib(27)];
    let mut results: Vec<Vec<(u32, u64)>> = vec![Vec::new(); expect.len()];
    let mut nones = vec![0; expect.len()];
    let (mut received, mut sent, mut reported) = (0u64, 0u64, 0);
    while reported < size {
        let left = deadline.saturating_duration_since(Instant::now());
        let (rank, line) = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{size} processes did not all report within {LIMIT:?}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["result", _, i, v] => {
                results[i.parse::<usize>().unwrap()].push((rank, v.parse().unwrap()))
            }
            ["none", _, i] => nones[i.parse::<usize>().unwrap()] += 1,
            ["error", ..] => panic!("rank {rank}: {line}"),
            ["stats", _, r, s] => {
                received += r.parse::<u64>().unwrap();
                sent += s.parse::<u64>().unwrap();
                reported += 1;
            }
            _ => {}
        }
    }
    for (i, want) in expect.iter().enumerate() {
        assert_eq!(
            results[i].len(),
            1,
            "run {i}: one master result: {results:?}"
        );
        assert_eq!(results[i][0].1, *want, "run {i}");
        assert_eq!(nones[i], size - 1, "run {i}");
    }
    // The same master every time.
    assert!(results.iter().all(|r| r[0].0 == results[0][0].0));
    assert!(received >= 1, "no job moved between the processes");
    assert!(received <= sent);
    for c in &mut children {
        assert_eq!(wait_exit(c, deadline), 0);
    }
}

#[test]
fn two_processes_match_sequential_with_random_stealing() {
    if role().is_some() {
        return;
    }
    compute_on_processes(2, 1, "random");
}

#[test]
fn three_processes_in_two_locations_match_sequential_with_cluster_aware_stealing() {
    if role().is_some() {
        return;
    }
    compute_on_processes(3, 2, "cluster-aware");
}
