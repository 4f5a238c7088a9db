//! Crashes and changing pools on real processes over tcp: processes killed with SIGKILL at
//! random moments (the master's result stays exact and nothing hangs), orphans of a killed
//! process reused, a killed master ending the run everywhere, a process leaving on SIGTERM
//! with nothing run again, processes joining a running pool and taking work, all of these in
//! one run, a member wrongly taken for dead (a link broken one way, by a failpoint), and a
//! job run again for a killed thief that its parent then aborts.
//!
//! The children are this test binary re-run with `SATIN_TEST_ROLE=member`; what they run is
//! in `SATIN_TEST_TASK`. Kill moments are random: each test prints its seed, and
//! `SATIN_TEST_SEED` repeats a run.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::processes::{role, secs, Processes};
use common::tasks::{queens, wait_in_steps, Sleepy};
use common::{fib, queens_seq};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use satin::{Context, Runtime, Steal, Task};
use serde::{Deserialize, Serialize};

/// This process's rank, for tasks that say where they run.
static RANK: AtomicU32 = AtomicU32::new(u32::MAX);

/// Fibonacci spawning above a threshold, plain recursion below it.
#[derive(Serialize, Deserialize)]
struct FibT {
    n: u32,
    threshold: u32,
}

impl Task for FibT {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.n < self.threshold || self.n < 2 {
            return fib(self.n);
        }
        let a = cx.spawn(FibT {
            n: self.n - 1,
            threshold: self.threshold,
        });
        let b = cx.spawn(FibT {
            n: self.n - 2,
            threshold: self.threshold,
        });
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(FibT);

/// The orphan scenario's root: one middle job, which another process steals while the
/// master's only worker holds for a while, so that the middle job's children spread from
/// its thief to the third process.
#[derive(Serialize, Deserialize)]
struct OrphanRoot {
    leaves: u32,
    leaf_ms: u64,
    hold_ms: u64,
}

impl Task for OrphanRoot {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let middle = cx.spawn(Middle {
            leaves: self.leaves,
            leaf_ms: self.leaf_ms,
        });
        cx.call(Hold(self.hold_ms));
        cx.sync();
        middle.take()
    }
}
satin::register!(OrphanRoot);

/// Keeps its worker busy for some milliseconds.
#[derive(Serialize, Deserialize)]
struct Hold(u64);

impl Task for Hold {
    type Output = ();
    fn run(self, cx: &mut Context) {
        wait_in_steps(cx, self.0);
    }
}
satin::register!(Hold);

#[derive(Serialize, Deserialize)]
struct Middle {
    leaves: u32,
    leaf_ms: u64,
}

impl Task for Middle {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        println!("middle on {}", RANK.load(Ordering::Relaxed));
        let leaves: Vec<_> = (0..self.leaves)
            .map(|i| {
                cx.spawn(Slow {
                    i,
                    ms: self.leaf_ms,
                })
            })
            .collect();
        cx.sync();
        leaves.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(Middle);

/// A leaf that takes its time and says where it runs.
#[derive(Serialize, Deserialize)]
struct Slow {
    i: u32,
    ms: u64,
}

impl Task for Slow {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        println!("slow {} on {}", self.i, RANK.load(Ordering::Relaxed));
        wait_in_steps(cx, self.ms);
        u64::from(self.i) * u64::from(self.i) + 1
    }
}
satin::register!(Slow);

/// The churn scenario's root: rounds of `parts` fib(n) subtrees, each round's sum printed,
/// until the gate file exists. The test opens the gate only after its last event, so the
/// run spans every event however fast or loaded the machine is, and every round has an
/// exact answer.
#[derive(Serialize, Deserialize)]
struct Rounds {
    parts: u32,
    n: u32,
    threshold: u32,
    gate: String,
}

impl Task for Rounds {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let mut total = 0;
        for round in 1.. {
            let parts: Vec<_> = (0..self.parts)
                .map(|_| {
                    cx.spawn(Part(FibT {
                        n: self.n,
                        threshold: self.threshold,
                    }))
                })
                .collect();
            cx.sync();
            let sum: u64 = parts.into_iter().map(|h| h.take()).sum();
            println!("round {round} {sum}");
            total += sum;
            if std::path::Path::new(&self.gate).exists() {
                break;
            }
        }
        total
    }
}
satin::register!(Rounds);

/// A fib subtree that says where it runs: the test's view of which processes hold work.
#[derive(Serialize, Deserialize)]
struct Part(FibT);

impl Task for Part {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        println!("part on {}", RANK.load(Ordering::Relaxed));
        cx.call(self.0)
    }
}
satin::register!(Part);

/// Spawns two trees of `2^depth` leaves of `ms` milliseconds, works `abort_ms` itself, then
/// aborts them: the run's time is `abort_ms` and however long the aborted trees take to stop.
#[derive(Serialize, Deserialize)]
struct Speculate {
    depth: u32,
    ms: u64,
    abort_ms: u64,
}

impl Task for Speculate {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let tree = || Sleepy {
            depth: self.depth,
            ms: self.ms,
        };
        let _a = cx.spawn(tree());
        let _b = cx.spawn(tree());
        cx.call(Hold(self.abort_ms));
        cx.abort();
        cx.sync();
        0
    }
}
satin::register!(Speculate);

fn orphan_answer(leaves: u32) -> u64 {
    (0..leaves).map(|i| u64::from(i) * u64::from(i) + 1).sum()
}

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
fn member() {
    if role().as_deref() != Some("member") {
        return;
    }
    // The test harness has printed `test member ... ` without a line end.
    println!();
    common::log_from_env();
    // Fault injection points that `FAILPOINTS` names, for this process only.
    let _failpoints = fail::FailScenario::setup();
    let ibis = ipl::Ibis::join(ipl::Config::from_env().expect("IPL_* environment")).expect("join");
    let rank = ibis.id().rank();
    RANK.store(rank, Ordering::Relaxed);
    println!("ready {rank}");
    let policy = match std::env::var("SATIN_TEST_STEAL").as_deref() {
        Ok("cluster-aware") => Steal::ClusterAware,
        _ => Steal::Random,
    };
    let rt = Runtime::in_pool(ibis).threads(1).steal(policy);
    let task = std::env::var("SATIN_TEST_TASK").expect("SATIN_TEST_TASK");
    let words: Vec<&str> = task.split_whitespace().collect();
    let num = |i: usize| -> u32 { words[i].parse().expect("a number") };
    let started = Instant::now();
    let result = match words[0] {
        "fib" => rt.run(FibT {
            n: num(1),
            threshold: num(2),
        }),
        "queens" => rt.run(queens(num(1), num(2))),
        "sleepy" => rt.run(Sleepy {
            depth: num(1),
            ms: u64::from(num(2)),
        }),
        "speculate" => rt.run(Speculate {
            depth: num(1),
            ms: u64::from(num(2)),
            abort_ms: u64::from(num(3)),
        }),
        "orphans" => rt.run(OrphanRoot {
            leaves: num(1),
            leaf_ms: u64::from(num(2)),
            hold_ms: u64::from(num(3)),
        }),
        "rounds" => rt.run(Rounds {
            parts: num(1),
            n: num(2),
            threshold: num(3),
            gate: words[4].to_string(),
        }),
        other => panic!("unknown task {other}"),
    };
    match result {
        Ok(Some(v)) => println!("result {rank} {v} {:.3}", started.elapsed().as_secs_f64()),
        Ok(None) if rt.has_left() => println!("none {rank} left"),
        Ok(None) => println!("none {rank}"),
        Err(e) => println!("error {rank}: {e}"),
    }
    let s = rt.stats();
    println!(
        "stats {rank} reexecuted={} reused={} salvaged={} returned={} received={} sent={} joined={} left={} died={}",
        s.jobs_reexecuted,
        s.orphan_results_reused,
        s.results_salvaged,
        s.jobs_returned,
        s.jobs_received,
        s.jobs_sent,
        s.nodes_joined,
        s.nodes_left,
        s.nodes_died
    );
}

/// What a child's `stats` line says.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    reexecuted: u64,
    reused: u64,
    salvaged: u64,
    returned: u64,
    received: u64,
    sent: u64,
    joined: u64,
    left: u64,
    died: u64,
}

fn parse_stats(line: &str) -> Option<(u32, Counts)> {
    let mut words = line.split_whitespace();
    if words.next() != Some("stats") {
        return None;
    }
    let rank = words.next()?.parse().ok()?;
    let mut c = Counts::default();
    for w in words {
        let (k, v) = w.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "reexecuted" => c.reexecuted = v,
            "reused" => c.reused = v,
            "salvaged" => c.salvaged = v,
            "returned" => c.returned = v,
            "received" => c.received = v,
            "sent" => c.sent = v,
            "joined" => c.joined = v,
            "left" => c.left = v,
            "died" => c.died = v,
            _ => {}
        }
    }
    Some((rank, c))
}

/// The outcome of one pool run: the master's result and time, and every survivor's counts.
#[derive(Debug, Default)]
struct Outcome {
    result: Option<u64>,
    seconds: f64,
    stats: Vec<(u32, Counts)>,
}

impl Outcome {
    /// What rank `rank` counted, if it printed its statistics.
    fn counts(&self, rank: u32) -> Option<Counts> {
        self.stats.iter().find(|s| s.0 == rank).map(|s| s.1)
    }
}

/// Reads lines until the master has printed its result and at least `expect` processes
/// (the master among them) their statistics; fails the test on an `error` line.
fn collect(p: &mut Processes, expect: usize, deadline: Instant) -> Outcome {
    let mut out = Outcome::default();
    while out.result.is_none()
        || out.stats.len() < expect
        || out.stats.iter().all(|(rank, _)| *rank != 0)
    {
        let (_, line) = p.next_line(deadline, "the results");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["result", _, v, t] => {
                out.result = Some(v.parse().unwrap());
                out.seconds = t.parse().unwrap();
            }
            ["error", ..] => panic!("{line}; lines: {:#?}", p.seen),
            _ => {
                if let Some(s) = parse_stats(&line) {
                    out.stats.push(s);
                }
            }
        }
    }
    out
}

fn seed() -> u64 {
    let seed = std::env::var("SATIN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (SATIN_TEST_SEED={seed} repeats this run)");
    seed
}

fn env(task: &str) -> Vec<(&'static str, String)> {
    vec![
        ("SATIN_TEST_ROLE", "member".to_string()),
        ("SATIN_TEST_TASK", task.to_string()),
    ]
}

/// Starts a closed pool of `size` members running `task`; waits until all are ready.
fn start_pool(what: &str, size: u32, task: &str, deadline: Instant) -> Processes {
    let mut p = Processes::new(what);
    for rank in 0..size {
        p.start("member", Some(size), Some(rank), &env(task));
    }
    let mut ready = 0;
    // A short run can end on the members that were ready first before the last is: their
    // results and statistics stay for `collect`.
    let mut early = Vec::new();
    p.until(deadline, "every member to be ready", |slot, line| {
        if line.starts_with("ready ") {
            ready += 1;
        } else {
            early.push((slot, line.to_string()));
        }
        (ready == size).then_some(())
    });
    p.put_back(early);
    p
}

/// One pool of `size` processes running `task` with the members of `victims` killed after the
/// given delays; checks the master's result against `want` and that every survivor exits 0.
fn run_with_kills(size: u32, task: &str, want: u64, victims: &[(u32, Duration)]) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut p = start_pool("kill", size, task, deadline);
    let start = Instant::now();
    let mut kills: Vec<(u32, Duration)> = victims.to_vec();
    kills.sort_by_key(|k| k.1);
    for (rank, at) in &kills {
        let wait = at.saturating_sub(start.elapsed());
        // Lines that come meanwhile stay queued for `collect`.
        std::thread::sleep(wait);
        p.children[*rank as usize].signal(libc::SIGKILL);
    }
    let survivors = size as usize - kills.len();
    let out = collect(&mut p, survivors, deadline);
    assert_eq!(
        out.result,
        Some(want),
        "{task} on {size} processes, killed {kills:?}: lines {:#?}",
        p.seen
    );
    for rank in 0..size {
        if kills.iter().all(|k| k.0 != rank) {
            assert_eq!(p.children[rank as usize].wait_exit(deadline), 0);
        }
    }
    out
}

/// A crash-free run to measure the run's length, then 20 runs with one non-master process of
/// four killed at a random moment within it.
fn kill_one_at_random_moments(task: &str, want: u64) {
    let mut rng = StdRng::seed_from_u64(seed());
    let clean = run_with_kills(4, task, want, &[]);
    let length = Duration::from_secs_f64(clean.seconds.max(0.05));
    eprintln!("{task}: crash-free {}", secs(length));
    for round in 0..20 {
        let rank = rng.gen_range(1..4);
        let at = length.mul_f64(rng.gen_range(0.0..1.0));
        let out = run_with_kills(4, task, want, &[(rank, at)]);
        let redone: u64 = out.stats.iter().map(|s| s.1.reexecuted).sum();
        eprintln!(
            "{task}: round {round}: rank {rank} killed at {}: exact in {:.3} s, {redone} jobs run again",
            secs(at),
            out.seconds
        );
    }
}

#[test]
fn killing_one_of_four_processes_at_random_moments_keeps_fib_exact() {
    if role().is_some() {
        return;
    }
    kill_one_at_random_moments("fib 38 20", fib(38));
}

#[test]
fn killing_one_of_four_processes_at_random_moments_keeps_nqueens_exact() {
    if role().is_some() {
        return;
    }
    kill_one_at_random_moments("queens 11 3", queens_seq(11, 0, 0, 0));
}

#[test]
fn two_of_five_processes_killed_at_different_moments_leave_the_result_exact() {
    if role().is_some() {
        return;
    }
    let mut rng = StdRng::seed_from_u64(seed());
    let task = "fib 31 18";
    let clean = run_with_kills(5, task, fib(31), &[]);
    let length = Duration::from_secs_f64(clean.seconds.max(0.05));
    let first = rng.gen_range(1..5);
    let second = (first + rng.gen_range(1..4) - 1) % 4 + 1;
    let kills = [
        (first, length.mul_f64(rng.gen_range(0.1..0.4))),
        (second, length.mul_f64(rng.gen_range(0.5..0.8))),
    ];
    let out = run_with_kills(5, task, fib(31), &kills);
    let died: u64 = out.stats.iter().map(|s| s.1.died).max().unwrap_or(0);
    eprintln!(
        "killed {kills:?}: exact in {:.3} s (crash-free {:.3} s); {died} deaths seen",
        out.seconds, clean.seconds
    );
}

#[test]
fn orphans_of_a_killed_process_are_reused_when_its_work_runs_again() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (leaves, leaf_ms, hold_ms) = (6, 600, 1500);
    let task = format!("orphans {leaves} {leaf_ms} {hold_ms}");
    let mut p = start_pool("orphans", 3, &task, deadline);
    // The middle job goes to one of the two others; a leaf of it then goes to the third.
    let thief = p.until(deadline, "the middle job to be stolen", |_, line| {
        line.strip_prefix("middle on ")
            .map(|r| r.parse::<u32>().unwrap())
    });
    assert_ne!(thief, 0, "the master holds; the middle job must be stolen");
    let other = 3 - thief;
    p.until(deadline, "a leaf to reach the third process", |_, line| {
        (line.starts_with("slow ") && line.ends_with(&format!(" on {other}"))).then_some(())
    });
    p.children[thief as usize].signal(libc::SIGKILL);
    let out = collect(&mut p, 2, deadline);
    assert_eq!(out.result, Some(orphan_answer(leaves)), "{:#?}", p.seen);
    let total = |f: fn(&Counts) -> u64| out.stats.iter().map(|s| f(&s.1)).sum::<u64>();
    assert!(
        total(|c| c.reexecuted) >= 1,
        "the middle job ran again: {:?}",
        out.stats
    );
    assert!(
        total(|c| c.reused) >= 1,
        "the leaf that finished on {other} was reused: {:?}",
        out.stats
    );
    eprintln!("orphans: {:?}", out.stats);
    for slot in [0, other as usize] {
        assert_eq!(p.children[slot].wait_exit(deadline), 0);
    }
}

#[test]
fn a_killed_master_ends_the_run_on_every_other_process_within_15_s_naming_it() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rng = StdRng::seed_from_u64(seed());
    // Far more work than the test waits for, in any build: 512 leaves of 20 ms.
    let mut p = start_pool("master", 4, "sleepy 9 20", deadline);
    std::thread::sleep(Duration::from_millis(rng.gen_range(100..400)));
    p.children[0].signal(libc::SIGKILL);
    let killed = Instant::now();
    let mut ended = Vec::new();
    while ended.len() < 3 {
        let (slot, line) = p.next_line(killed + Duration::from_secs(15), "the others to end");
        if let Some(text) = line.strip_prefix("error ") {
            assert!(
                text.contains("node0@") && text.contains("master"),
                "slot {slot} ended without naming the master: {line}"
            );
            ended.push(slot);
        } else {
            assert!(
                !line.starts_with("none") && !line.starts_with("result"),
                "slot {slot}: {line}"
            );
        }
    }
    eprintln!(
        "every other process ended {} after the kill",
        secs(killed.elapsed())
    );
    for slot in 1..4 {
        assert_eq!(p.children[slot].wait_exit(deadline), 0);
    }
}

#[test]
fn a_process_leaving_on_sigterm_mid_run_costs_no_recomputation() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rng = StdRng::seed_from_u64(seed());
    // Work that lasts as long in every build (128 leaves of 20 ms, about a second on
    // three processes), so that the leave comes mid-run.
    let task = "sleepy 7 20";
    let mut p = start_pool("leave", 3, task, deadline);
    let leaver = rng.gen_range(1..3);
    std::thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
    p.children[leaver].signal(libc::SIGTERM);
    let out = collect(&mut p, 3, deadline);
    assert_eq!(out.result, Some(1 << 7), "{:#?}", p.seen);
    for (rank, c) in &out.stats {
        assert_eq!(
            c.reexecuted, 0,
            "rank {rank} ran jobs again: {:?}",
            out.stats
        );
    }
    let gone = format!("none {leaver} left");
    assert!(
        p.seen.iter().any(|(_, l)| *l == gone),
        "rank {leaver} did not leave the pool: {:#?}",
        p.seen
    );
    // A node that left waits for nobody: not for the end of the run it left, whose `ALL_DONE`
    // the master no longer sends it (it once waited 12 s for it).
    let prompt = Instant::now() + Duration::from_secs(8);
    assert_eq!(
        p.children[leaver].wait_exit(prompt.min(deadline)),
        0,
        "the leaver"
    );
    for slot in (0..3).filter(|&s| s != leaver) {
        assert_eq!(p.children[slot].wait_exit(deadline), 0, "slot {slot}");
    }
    eprintln!("leave of rank {leaver}: {:?}", out.stats);
}

/// A member that takes another for dead while that one lives (a send to it failed: the link
/// broke one way, or the receiver stalled past the send's patience) closes its connections to
/// it and sends the results of the other's jobs to the rest as orphans. The other must learn
/// it, or it waits for those results for ever: it takes the first for dead in turn when their
/// connection ends, runs its jobs again, and the run ends exact.
///
/// Rank 2's sends to rank 1 fail while a job of rank 1 runs on rank 2 (the failpoint
/// `satin::link-to-owner-broken`, armed on rank 2 only); ranks 0 and 1 are left alone. Whether
/// rank 2 ever holds a job of rank 1 depends on the steals, so pools run until one did (at
/// most 40; about one in three does).
#[test]
fn a_member_wrongly_taken_for_dead_learns_it_and_the_run_stays_exact() {
    if role().is_some() {
        return;
    }
    let task = "sleepy 6 40";
    for pool in 1..=40 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut p = Processes::new("one-way break");
        for rank in 0..3u32 {
            let mut e = env(task);
            if rank == 2 {
                e.push((
                    "FAILPOINTS",
                    "satin::link-to-owner-broken=return(1)".to_string(),
                ));
            }
            p.start("member", Some(3), Some(rank), &e);
        }
        let out = collect(&mut p, 3, deadline);
        assert_eq!(out.result, Some(1 << 6), "{:#?}", p.seen);
        // Nobody waits out a patience for the other (the end of a run once waited 10 s for
        // rank 1, which rank 2 no longer answered).
        let prompt = Instant::now() + Duration::from_secs(8);
        for slot in 0..3 {
            assert_eq!(
                p.children[slot].wait_exit(prompt.min(deadline)),
                0,
                "slot {slot}"
            );
        }
        let died = |rank: u32| out.counts(rank).map_or(0, |c| c.died);
        if died(2) == 0 {
            eprintln!("pool {pool}: rank 2 ran no job of rank 1 while sending to it; again");
            continue;
        }
        assert!(
            died(1) >= 1,
            "rank 2 took rank 1 for dead, but rank 1 never learnt it: {:?}",
            out.stats
        );
        assert_eq!(died(0), 0, "the master lost nobody: {:?}", out.stats);
        eprintln!(
            "pool {pool}: rank 2 took rank 1 for dead, rank 1 took rank 2 for dead in turn; \
             exact in {:.3} s: {:?}",
            out.seconds, out.stats
        );
        return;
    }
    panic!("in 40 pools rank 2 never sent to rank 1 while running a job of rank 1");
}

/// A job that a node runs again for a thief that died is aborted when its parent aborts it,
/// as a job on its way or running elsewhere is: the parent does not wait for it to run to its
/// end.
///
/// Three processes of one worker each; the master spawns two trees of 4 leaves of 3 s, which
/// the two others steal, works 1.5 s itself and aborts both. Rank 2 is killed after 0.5 s, so
/// the master runs its tree again. The run then ends within 4 s, where the tree run again
/// would have kept it up to 12 s longer. Pools run until rank 2 took its tree from the master
/// (at most ten; it takes it from rank 1 otherwise, which then runs it again instead).
#[test]
fn an_aborted_job_that_runs_again_for_a_dead_thief_stops() {
    if role().is_some() {
        return;
    }
    for pool in 1..=10 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut p = start_pool("speculate", 3, "speculate 2 3000 1500", deadline);
        std::thread::sleep(Duration::from_millis(500));
        p.children[2].signal(libc::SIGKILL);
        let out = collect(&mut p, 2, deadline);
        assert_eq!(out.result, Some(0), "{:#?}", p.seen);
        for slot in 0..2 {
            assert_eq!(p.children[slot].wait_exit(deadline), 0, "slot {slot}");
        }
        let again = out.counts(0).map_or(0, |c| c.reexecuted);
        if again == 0 {
            eprintln!(
                "pool {pool}: the master ran nothing again ({:?}); again",
                out.stats
            );
            continue;
        }
        assert!(
            out.seconds < 4.0,
            "the run took {:.3} s: the aborted job run again went on; {:#?}",
            out.seconds,
            p.seen
        );
        eprintln!(
            "pool {pool}: the master ran {again} job(s) again and aborted them; the run took {:.3} s",
            out.seconds
        );
        return;
    }
    panic!("in ten pools rank 2 never took its tree from the master");
}

#[test]
fn two_processes_joining_a_running_run_of_two_take_stolen_work() {
    if role().is_some() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    // 64 leaves of 50 ms: 1.6 s on two processes, so the joiners arrive while it runs.
    let task = "sleepy 6 50";
    let mut p = start_pool("join", 2, task, deadline);
    for _ in 0..2 {
        p.start("member", None, None, &env(task));
    }
    let out = collect(&mut p, 4, deadline);
    assert_eq!(out.result, Some(64), "{:#?}", p.seen);
    let joiners: Vec<&(u32, Counts)> = out.stats.iter().filter(|s| s.0 >= 2).collect();
    assert_eq!(joiners.len(), 2, "{:?}", out.stats);
    for (rank, c) in joiners {
        assert!(
            c.received >= 1,
            "joiner {rank} ran no stolen job: {:?}",
            out.stats
        );
    }
    for slot in 0..4 {
        assert_eq!(p.children[slot].wait_exit(deadline), 0, "slot {slot}");
    }
    eprintln!("join: {:?}", out.stats);
}

/// What the churn test has seen of its pool so far: each slot's rank, how many parts each
/// rank has started, and the lines that `collect` reads later.
#[derive(Default)]
struct Watch {
    rank_of: Vec<Option<u32>>,
    parts: std::collections::HashMap<u32, u32>,
    keep: Vec<(usize, String)>,
}

impl Watch {
    fn parts(&self, rank: u32) -> u32 {
        self.parts.get(&rank).copied().unwrap_or(0)
    }

    fn rank(&self, slot: usize) -> Option<u32> {
        self.rank_of.get(slot).copied().flatten()
    }

    /// Reads lines until `done` holds, before `deadline`. The run cannot end while the gate
    /// is closed, so a result fails the test, as does an `error` line.
    fn until(
        &mut self,
        p: &mut Processes,
        deadline: Instant,
        what: &str,
        done: impl Fn(&Watch) -> bool,
    ) {
        while !done(self) {
            let (slot, line) = p.next_line(deadline, what);
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ready", r] => {
                    if self.rank_of.len() <= slot {
                        self.rank_of.resize(slot + 1, None);
                    }
                    self.rank_of[slot] = Some(r.parse().unwrap());
                }
                ["part", "on", r] => *self.parts.entry(r.parse().unwrap()).or_default() += 1,
                ["result", ..] => panic!(
                    "the run ended with its gate closed, waiting for {what}: {:#?}",
                    p.seen
                ),
                ["error", ..] => panic!("{line}; lines: {:#?}", p.seen),
                ["none", ..] | ["stats", ..] => self.keep.push((slot, line)),
                _ => {}
            }
        }
    }
}

/// A run through what a cluster does to it, in one go: two processes join, one leaves on
/// SIGTERM, one is killed, one more joins. Each event waits for progress it can see (a
/// joiner starting a part, the leaver's last line) rather than for time, and the run goes on
/// until the test opens its gate after the last event, so however loaded the machine, every
/// event comes mid-run; each round of the run is checked exactly.
#[test]
fn a_run_through_joins_a_leave_a_kill_and_a_late_join_stays_exact() {
    if role().is_some() {
        return;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(45);
    let mut rng = StdRng::seed_from_u64(seed());
    // A part of fib(31) takes tens of milliseconds in a debug build, so that a kill soon
    // after one starts finds it unfinished; a round is 8 of them.
    let (parts, n, threshold) = (8, 31, 22);
    // In a scratch directory of its own, removed however the test ends.
    let scratch = testkit::scratch_dir("satin-churn-gate");
    let gate = scratch.path().join("gate");
    let task = format!("rounds {parts} {n} {threshold} {}", gate.display());
    let mut p = start_pool("churn", 3, &task, deadline);
    let mut w = Watch {
        rank_of: vec![Some(0), Some(1), Some(2)],
        ..Watch::default()
    };
    w.until(&mut p, deadline, "the run to start", |w| w.parts(0) >= 1);

    // (1) Two processes join and each starts a part it stole.
    let joiners = [
        p.start("member", None, None, &env(&task)),
        p.start("member", None, None, &env(&task)),
    ];
    w.until(&mut p, deadline, "the joiners to take work", |w| {
        joiners
            .iter()
            .all(|&s| w.rank(s).is_some_and(|r| w.parts(r) >= 1))
    });
    let joined: Vec<u32> = joiners.iter().map(|&s| w.rank(s).unwrap()).collect();

    // (2) A non-master process, one of the first three or a joiner, leaves while it runs a
    // part.
    let slot_of = |w: &Watch, rank: u32| {
        (0..w.rank_of.len())
            .find(|&s| w.rank(s) == Some(rank))
            .unwrap()
    };
    let mut others = vec![1, 2, joined[0], joined[1]];
    let leaver = others.swap_remove(rng.gen_range(0..others.len()));
    let leaver_slot = slot_of(&w, leaver);
    let before = w.parts(leaver);
    w.until(&mut p, deadline, "the leaver to take a part", |w| {
        w.parts(leaver) > before
    });
    p.children[leaver_slot].signal(libc::SIGTERM);
    let gone = format!("none {leaver} left");
    w.until(&mut p, deadline, "the leaver to leave", |w| {
        w.keep.iter().any(|(_, l)| *l == gone)
    });
    let left_at = Instant::now();

    // (3) Another non-master process is killed at a random moment within a part it runs.
    let victim = others[rng.gen_range(0..others.len())];
    let victim_slot = slot_of(&w, victim);
    let before = w.parts(victim);
    w.until(&mut p, deadline, "the victim to take a part", |w| {
        w.parts(victim) > before
    });
    let after = Duration::from_millis(rng.gen_range(0..30));
    std::thread::sleep(after);
    p.children[victim_slot].signal(libc::SIGKILL);

    // (4) One more process joins and starts a part it stole.
    let late = p.start("member", None, None, &env(&task));
    w.until(&mut p, deadline, "the late joiner to take work", |w| {
        w.rank(late).is_some_and(|r| w.parts(r) >= 1)
    });
    let late_rank = w.rank(late).unwrap();

    std::fs::write(&gate, b"").expect("open the gate");
    p.put_back(std::mem::take(&mut w.keep));
    // Every process but the victim prints its statistics, the leaver among them.
    let survivors = p.children.len() - 1;
    let out = collect(&mut p, survivors, deadline);

    let round = parts as u64 * fib(n);
    let rounds: Vec<(u64, u64)> = p
        .seen
        .iter()
        .filter(|(slot, _)| *slot == 0)
        .filter_map(|(_, l)| {
            let mut words = l.strip_prefix("round ")?.split_whitespace();
            Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
        })
        .collect();
    for (i, &(r, sum)) in rounds.iter().enumerate() {
        assert_eq!((r, sum), (i as u64 + 1, round), "{:#?}", p.seen);
    }
    assert_eq!(
        out.result,
        Some(rounds.len() as u64 * round),
        "{:#?}",
        p.seen
    );
    let master = out.counts(0).unwrap();
    assert_eq!(
        (master.joined, master.left, master.died),
        (3, 1, 1),
        "the master saw three joins, a leave and a death: {:?}",
        out.stats
    );
    // A joiner that left says what it received too; the killed one said it by its parts.
    for rank in joined.iter().chain([&late_rank]).filter(|&&r| r != victim) {
        let c = out.counts(*rank).unwrap();
        assert!(
            c.received >= 1,
            "joiner {rank} ran no stolen job: {:?}",
            out.stats
        );
    }
    // The leaver ends at once, without waiting for the run it left (as in the leave test).
    let prompt = left_at + Duration::from_secs(8);
    assert_eq!(
        p.children[leaver_slot].wait_exit(prompt.min(deadline)),
        0,
        "the leaver"
    );
    assert_eq!(
        p.children[victim_slot].wait_exit(deadline),
        -1,
        "the victim"
    );
    for slot in (0..p.children.len()).filter(|&s| s != leaver_slot && s != victim_slot) {
        assert_eq!(p.children[slot].wait_exit(deadline), 0, "slot {slot}");
    }
    let redone: u64 = out.stats.iter().map(|s| s.1.reexecuted).sum();
    eprintln!(
        "churn: joined {joined:?} then {late_rank}, rank {leaver} left, rank {victim} killed {after:?} into a part; \
         {} rounds exact in {}, {redone} jobs run again; {:?}",
        rounds.len(),
        secs(started.elapsed()),
        out.stats
    );
}
