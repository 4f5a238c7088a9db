//! UTS through crashes: T1 on 4 processes under `ipl-run --tolerate-failures`, one non-master
//! process killed with SIGKILL at a random moment of the search, 20 times with different
//! moments and victims. The master's counts are the published ones every time, no run hangs,
//! and nothing is left running. `UTS_TEST_SEED` repeats a sequence of kills.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::{rngs::StdRng, Rng, SeedableRng};
use testkit::{KillMarked, Reaped};

/// Longest one run may take, from its start to the master's result.
const LIMIT: Duration = Duration::from_secs(60);

const T1: (u64, u64, u64) = (4_130_071, 3_305_118, 10);

fn ipl_run() -> PathBuf {
    testkit::ipl_run_beside(Path::new(env!("CARGO_BIN_EXE_uts")))
}

/// One run of T1 on 4 processes, the process of rank `victim.0` killed `victim.1` after every
/// process has joined the pool: the master's result line, and whether the victim was still
/// there to be killed.
fn run(victim: Option<(u32, Duration)>) -> (serde_json::Value, bool) {
    let (key, value) = testkit::marker("uts-crash");
    let mark = format!("{key}={value}");
    let _cleanup = KillMarked::new(vec![mark.clone()]);
    let mut child = Reaped::start(
        Command::new(ipl_run())
            .args(["-n", "4", "--tolerate-failures", "--"])
            .arg(env!("CARGO_BIN_EXE_uts"))
            .args(["--sample", "T1"])
            .env(&key, &value)
            // Each process says when it has joined the pool, and nothing else.
            .env("RUST_LOG", "ipl::ibis=debug"),
    );
    let deadline = Instant::now() + LIMIT;
    let out = testkit::read_all(child.0.stdout.take().expect("piped"));
    let err = testkit::lines(child.0.stderr.take().expect("piped"));
    let mut seen = Vec::new();
    let mut joined = 0;
    while joined < 4 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (line, _) = err
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the 4 processes did not join in time: {seen:#?}"));
        joined += usize::from(line.contains("joined pool"));
        seen.push(line);
    }
    let mut killed = false;
    if let Some((rank, after)) = victim {
        std::thread::sleep(after);
        let pids = testkit::marked(&[&mark, &format!("IPL_RANK={rank}")]);
        assert!(pids.len() <= 1, "one process per rank: {pids:?}");
        killed = !pids.is_empty();
        for pid in pids {
            // SAFETY: kill(2) has no memory effects; the pid is this run's rank process.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let out = out
        .recv_timeout(left)
        .unwrap_or_else(|_| panic!("the run killed {victim:?} did not end within {LIMIT:?}"));
    let status = child.0.wait().expect("wait for ipl-run");
    seen.extend(err.try_iter().map(|(l, _)| l));
    assert!(
        status.success(),
        "killed {victim:?}: {status}\n{out}\n{seen:#?}"
    );
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("{\"app\"")).collect();
    assert_eq!(lines.len(), 1, "one result line (the master's): {out}");
    assert!(
        lines[0].starts_with("[0]"),
        "rank 0 prints the result: {out}"
    );
    let json = &lines[0][lines[0].find('{').expect("a JSON object")..];
    let v = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    (v, killed)
}

fn counts(v: &serde_json::Value) -> (u64, u64, u64) {
    let get = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    (get("nodes"), get("leaves"), get("max_depth"))
}

#[test]
fn killing_one_of_four_processes_at_random_moments_keeps_the_counts_exact() {
    let seed = std::env::var("UTS_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (UTS_TEST_SEED={seed} repeats this run)");
    let mut rng = StdRng::seed_from_u64(seed);
    let (clean, _) = run(None);
    assert_eq!(counts(&clean), T1, "crash-free: {clean}");
    let length = clean["total_seconds"]
        .as_f64()
        .expect("total_seconds")
        .max(0.05);
    let (mut kills, mut noticed) = (0, 0);
    for round in 0..20 {
        let rank = rng.gen_range(1..4);
        let after = Duration::from_secs_f64(length * rng.gen_range(0.0..1.0));
        let (v, killed) = run(Some((rank, after)));
        kills += usize::from(killed);
        // A death after the master's last need of the victim can go unnoticed.
        noticed += usize::from(v["satin"]["nodes_died"] == 1);
        assert_eq!(
            counts(&v),
            T1,
            "round {round}: rank {rank} killed {after:?} after the join: {v}"
        );
        eprintln!(
            "round {round}: rank {rank} killed {after:?} after the join ({}): exact in {:.3} s, {}",
            if killed { "killed" } else { "already gone" },
            v["total_seconds"].as_f64().unwrap_or_default(),
            v["satin"]
        );
    }
    // A victim may have ended with a run that finished early; most must have been killed.
    assert!(kills >= 10, "only {kills} of 20 victims were still running");
    assert!(
        noticed >= 5,
        "the master noticed only {noticed} of {kills} deaths: the kills came too late"
    );
}
