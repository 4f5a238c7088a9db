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
        r => panic!("unknown role {r}"),
    }
    println!("\nprogram-ok {}", bsp.pid());
}

fn run(test: &str, role: &str, n: u32) {
    let Some((mut cmd, _ranks)) = testkit::mpirun(test, n, &["BSP_TEST_ROLE", "IPL_DRIVER"]) else {
        return;
    };
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
fn collectives_and_groups_on_2_and_4_ranks() {
    for n in [2, 4] {
        run("collectives_and_groups_on_2_and_4_ranks", "checks", n);
    }
}
