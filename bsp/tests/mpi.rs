//! BSP over ipl's mpi driver under a real `mpirun` (feature `mpi`): the supersteps program and
//! the collectives and groups checks of the other drivers, on 2 to 4 ranks, exact.
//!
//! The ranks are this test binary re-run by `mpirun` with a role in `BSP_TEST_ROLE`; `mpirun`
//! is bounded in time and takes its ranks with it. Without `mpirun` the tests skip, except
//! under `CI=true`, where that is a failure.
#![cfg(feature = "mpi")]

mod common;

use bsp::{Bsp, Options};
use ipl::{Config, Driver, Ibis};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Longest one mpirun may take.
const LIMIT: Duration = Duration::from_secs(120);

/// Entry point of the ranks; does nothing in a normal test run.
#[test]
fn child_process_entry() {
    let Ok(role) = std::env::var("BSP_TEST_ROLE") else {
        return;
    };
    let cfg = Config::from_env().expect("IPL_* environment");
    assert_eq!(cfg.driver, Driver::Mpi);
    let ibis = Ibis::join(cfg).expect("join");
    let opts = Options {
        sync_timeout: Some(Duration::from_secs(60)),
        // What a rank that leaves sent arrives long before; the "leaves" role waits this long.
        departure_grace: Duration::from_millis(500),
        ..Options::default()
    };
    let mut bsp = Bsp::with_options(ibis, opts).expect("bsp");
    match role.as_str() {
        "program" => common::program::program(&mut bsp).expect("the program"),
        "checks" => {
            common::checks::collectives(&mut bsp, 3).expect("small collectives");
            common::checks::collectives(&mut bsp, 1 << 17).expect("1 MB collectives");
            common::checks::groups(&mut bsp).expect("groups");
        }
        "gets" => common::program::gets_every_superstep(&mut bsp, 2000).expect("the gets"),
        "leaves" => {
            // The last pid leaves after three supersteps, as a program that failed would; the
            // others' next sync must say so, long before the sync's time limit.
            for _ in 0..3 {
                bsp.sync().expect("a sync");
            }
            if bsp.pid() + 1 == bsp.nprocs() {
                drop(bsp);
                println!(
                    "\nprogram-ok {}",
                    std::env::var("OMPI_COMM_WORLD_RANK").unwrap()
                );
                return;
            }
            let start = Instant::now();
            match bsp.sync() {
                Err(bsp::Error::PeerGone { died: false, .. }) => {}
                other => panic!("pid {}: no leave but {other:?}", bsp.pid()),
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the leave took {:?} to tell",
                start.elapsed()
            );
        }
        "mismatch" => {
            // Pid 0 ends a superstep (over MPI) where pid 1 all-reduces (with messages): each
            // must report the other's operation, and neither may hang, also after syncs that
            // went through.
            for _ in 0..3 {
                bsp.sync().expect("a sync");
            }
            let got = if bsp.pid() == 0 {
                bsp.sync().map(|()| 0)
            } else {
                bsp.all_reduce(1u64, bsp::Op::Sum)
            };
            match got {
                Err(e @ bsp::Error::CollectiveMismatch { .. }) => {
                    let text = e.to_string();
                    assert!(
                        text.contains("sync") && text.contains("all_reduce"),
                        "a mismatch that does not name both operations: {text}"
                    );
                }
                other => panic!("pid {}: no mismatch but {other:?}", bsp.pid()),
            }
        }
        r => panic!("unknown role {r}"),
    }
    println!("\nprogram-ok {}", bsp.pid());
}

fn run(test: &str, role: &str, n: u32) {
    run_with(test, role, n, &[]);
}

/// [`run`] with more environment for the ranks.
fn run_with(test: &str, role: &str, n: u32, env: &[(&str, &str)]) {
    let mut pass = vec!["BSP_TEST_ROLE", "IPL_DRIVER"];
    pass.extend(env.iter().map(|(k, _)| *k));
    let Some((mut cmd, _ranks)) = testkit::mpirun(test, n, &pass) else {
        return;
    };
    cmd.envs(env.iter().copied());
    cmd.arg(std::env::current_exe().expect("test executable"))
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("BSP_TEST_ROLE", role)
        .env("IPL_DRIVER", "mpi")
        .env_remove("IPL_POOL")
        .env_remove("IPL_POOL_SIZE")
        .env_remove("IPL_RANK")
        .env_remove("IPL_SERVER")
        .stdin(Stdio::null());
    let (status, out, err) = testkit::Reaped::start(&mut cmd).output(Instant::now() + LIMIT);
    assert!(
        status.success(),
        "mpirun -n {n} {role}: {status}\n{out}\n{err}"
    );
    for pid in 0..n {
        assert!(
            out.lines().any(|l| l == format!("program-ok {pid}")),
            "pid {pid} of {n} did not finish {role}:\n{out}\n{err}"
        );
    }
}

#[test]
fn supersteps_on_2_3_and_4_ranks() {
    for n in [2, 3, 4] {
        run("supersteps_on_2_3_and_4_ranks", "program", n);
    }
}

#[test]
fn gets_served_by_ranks_that_ended_the_sync_first_on_4_ranks() {
    run(
        "gets_served_by_ranks_that_ended_the_sync_first_on_4_ranks",
        "gets",
        4,
    );
}

#[test]
fn a_rank_that_leaves_ends_the_sync_of_the_others() {
    for n in [2, 3] {
        run(
            "a_rank_that_leaves_ends_the_sync_of_the_others",
            "leaves",
            n,
        );
    }
}

#[test]
fn collectives_and_groups_on_2_and_4_ranks() {
    for n in [2, 4] {
        run("collectives_and_groups_on_2_and_4_ranks", "checks", n);
    }
}

#[test]
fn supersteps_with_messages_only_on_3_ranks() {
    // The whole machine's sync goes over MPI by default (bsp's `mpi_sync`); this keeps the
    // round messages' sync tested on this driver too.
    run_with(
        "supersteps_with_messages_only_on_3_ranks",
        "program",
        3,
        &[("BSP_MPI_SYNC", "0")],
    );
}

#[test]
fn a_sync_over_mpi_against_an_all_reduce_is_a_mismatch_on_both_sides() {
    run(
        "a_sync_over_mpi_against_an_all_reduce_is_a_mismatch_on_both_sides",
        "mismatch",
        2,
    );
}
