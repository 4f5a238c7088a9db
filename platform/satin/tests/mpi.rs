//! Distributed satin runs over ipl's mpi driver under a real `mpirun` (feature `mpi`): fib,
//! n-queens and a random tree on 2 to 4 ranks give the sequential results, and jobs move
//! between the ranks.
//!
//! The ranks are this test binary re-run by `mpirun` with a role in `SATIN_TEST_ROLE`;
//! `mpirun` is bounded in time and takes its ranks with it. Without `mpirun` the tests skip,
//! except under `CI=true`, where that is a failure.
#![cfg(feature = "mpi")]

mod common;

use common::fib;
use common::tasks::{queens, Fib, RandomTree, Sleepy};
use ipl::{Config, Driver, Ibis};
use satin::{Runtime, Steal};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Longest one mpirun may take.
const LIMIT: Duration = Duration::from_secs(120);

const TREE: RandomTree = RandomTree { seed: 7, depth: 9 };

/// Work that lasts as long in every build, and long enough that idle ranks steal some of it:
/// 16 leaves of 20 ms, which one rank alone would take 320 ms for. (Eight leaves of fib(27)
/// each, the earlier form, ended on the master before either other rank had stolen in one CI
/// run of an unoptimised build.)
const NAPS: Sleepy = Sleepy { depth: 4, ms: 20 };

/// Entry point of the ranks; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Ok(steal) = std::env::var("SATIN_TEST_STEAL") else {
        return;
    };
    println!();
    let cfg = Config::from_env().expect("IPL_* environment");
    assert_eq!(cfg.driver, Driver::Mpi);
    let ibis = Ibis::join(cfg).expect("join");
    let rank = ibis.id().rank();
    let policy = match steal.as_str() {
        "random" => Steal::Random,
        _ => Steal::ClusterAware,
    };
    let rt = Runtime::in_pool(ibis).threads(1).steal(policy);
    let results = [
        rt.run(Fib(24)),
        rt.run(queens(10, 4)),
        rt.run(TREE),
        rt.run(NAPS),
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

fn compute(test: &str, n: u32, steal: &str) {
    let Some((mut cmd, _ranks)) = testkit::mpirun(test, n, &["SATIN_TEST_STEAL", "IPL_DRIVER"])
    else {
        return;
    };
    cmd.arg(std::env::current_exe().expect("test executable"))
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SATIN_TEST_STEAL", steal)
        .env("IPL_DRIVER", "mpi")
        .env_remove("IPL_POOL")
        .env_remove("IPL_POOL_SIZE")
        .env_remove("IPL_RANK")
        .env_remove("IPL_SERVER")
        .stdin(Stdio::null());
    let (status, out, err) = testkit::Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
    assert!(status.success(), "mpirun -n {n}: {status}\n{out}\n{err}");
    let expect = [
        fib(24),
        common::queens_seq(10, 0, 0, 0),
        TREE.sequential(),
        1 << NAPS.depth,
    ];
    let mut results: Vec<Vec<(u32, u64)>> = vec![Vec::new(); expect.len()];
    let mut nones = vec![0; expect.len()];
    let (mut received, mut sent, mut reported) = (0u64, 0u64, 0);
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["result", r, i, v] => {
                results[i.parse::<usize>().unwrap()].push((r.parse().unwrap(), v.parse().unwrap()))
            }
            ["none", _, i] => nones[i.parse::<usize>().unwrap()] += 1,
            ["error", ..] => panic!("{line}\n{out}\n{err}"),
            ["stats", _, r, s] => {
                received += r.parse::<u64>().unwrap();
                sent += s.parse::<u64>().unwrap();
                reported += 1;
            }
            _ => {}
        }
    }
    assert_eq!(reported, n, "every rank reports:\n{out}\n{err}");
    for (i, want) in expect.iter().enumerate() {
        assert_eq!(
            results[i].len(),
            1,
            "run {i}: one master result: {results:?}"
        );
        assert_eq!(results[i][0].1, *want, "run {i} on {n} ranks");
        assert_eq!(nones[i], n - 1, "run {i}");
    }
    assert!(received >= 1, "no job moved between the ranks:\n{out}");
    assert!(received <= sent);
}

#[test]
fn fib_nqueens_and_a_tree_match_sequential_on_2_and_4_ranks_random_stealing() {
    for n in [2, 4] {
        compute("fib_nqueens_random", n, "random");
    }
}

#[test]
fn fib_nqueens_and_a_tree_match_sequential_on_3_ranks_cluster_aware_stealing() {
    compute("fib_nqueens_cluster_aware", 3, "cluster-aware");
}
