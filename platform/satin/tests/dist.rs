//! Distributed runs on pools of nodes that are threads of the test process, over the
//! in-process driver, tcp, shared memory and the wide-area emulation: results equal the sequential ones
//! with both stealing policies, work really moves between nodes, a panic anywhere
//! fails the run on every node with an error that says where, and steal requests from another
//! node make `Context::work_wanted` true.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::tasks::{queens, Fib, Nop, RandomTree, Sleepy, SplitOnDemand};
use common::{fib, offer_until, on_nodes, on_nodes_until, Layout, LIMIT};
use ipl::Driver;
use satin::{Context, Error, Runtime, Stats, Steal, Task};
use serde::{Deserialize, Serialize};

/// What one node saw of a series of runs: the outputs (None off the master) and its stats.
struct NodeReport {
    outputs: Vec<Option<u64>>,
    stats: Stats,
    master: String,
    me: String,
}

const TREE_SEEDS: [u64; 2] = [7, 2024];

/// Runs fib, nqueens and two random trees, one after the other, in one pool.
fn series(ibis: ipl::Ibis, threads: usize, policy: Steal) -> NodeReport {
    let rt = Runtime::in_pool(ibis).threads(threads).steal(policy);
    let mut outputs = vec![
        rt.run(Fib(24)).expect("fib"),
        rt.run(queens(10, 4)).expect("queens"),
    ];
    for seed in TREE_SEEDS {
        outputs.push(rt.run(RandomTree { seed, depth: 8 }).expect("tree"));
    }
    report(&rt, outputs)
}

fn report(rt: &satin::PoolRuntime, outputs: Vec<Option<u64>>) -> NodeReport {
    NodeReport {
        outputs,
        stats: rt.stats(),
        master: rt.master().expect("elected").name(),
        me: rt.node().name(),
    }
}

fn expected() -> Vec<u64> {
    let mut v = vec![fib(24), 724];
    for seed in TREE_SEEDS {
        v.push(RandomTree { seed, depth: 8 }.sequential());
    }
    v
}

/// Checks one pool's reports: every run has its output on the master only, and the steal
/// counters agree with each other.
fn check(layout: Layout, policy: Steal, reports: &[NodeReport]) {
    let expect = expected();
    let master = &reports[0].master;
    assert!(reports.iter().all(|r| &r.master == master));
    for (run, want) in expect.iter().enumerate() {
        for r in reports {
            let got = r.outputs[run];
            if &r.me == master {
                assert_eq!(
                    got,
                    Some(*want),
                    "{layout:?} {policy:?}: run {run} on {}",
                    r.me
                );
            } else {
                assert_eq!(got, None, "{layout:?} {policy:?}: run {run} on {}", r.me);
            }
        }
    }
    let stolen = jobs_moved(reports);
    let received: u64 = reports.iter().map(|r| r.stats.jobs_received).sum();
    let sent: u64 = reports.iter().map(|r| r.stats.jobs_sent).sum();
    let attempts: u64 = reports.iter().map(|r| r.stats.remote_steal_attempts).sum();
    assert_eq!(stolen, received, "{layout:?} {policy:?}");
    assert!(
        received <= sent && stolen <= attempts,
        "{layout:?} {policy:?}"
    );
    for r in reports {
        assert!(r.stats.bytes_moved > 0 || r.stats.jobs_received + r.stats.jobs_sent == 0);
    }
    if policy == Steal::Random {
        assert!(reports.iter().all(|r| r.stats.wide_steal_attempts == 0));
    }
}

/// Jobs that ran on another node than their owner's, over a pool's reports.
fn jobs_moved(reports: &[NodeReport]) -> u64 {
    reports.iter().map(|r| r.stats.remote_steals).sum()
}

/// Runs the series on pools of 2, 3 and 4 nodes and checks every run. Whether a job moves
/// in a given series depends on scheduling (a busy machine may let the master finish alone),
/// so a pool where none moved runs the series again, until the test's deadline.
fn all_sizes(driver: Driver, policy: Steal) {
    let deadline = Instant::now() + LIMIT;
    for nodes in 2..=4 {
        let clusters = if policy == Steal::ClusterAware { 2 } else { 1 };
        let layout = Layout::new(driver, nodes, clusters);
        let threads = if nodes == 2 { 2 } else { 1 };
        loop {
            let reports =
                on_nodes_until(layout, deadline, move |ibis| series(ibis, threads, policy));
            check(layout, policy, &reports);
            if jobs_moved(&reports) >= 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{layout:?} {policy:?}: no job moved between nodes in any series"
            );
        }
    }
}

#[test]
fn inproc_random_stealing_matches_sequential() {
    all_sizes(Driver::Inproc, Steal::Random);
}

#[test]
fn inproc_cluster_aware_stealing_matches_sequential() {
    all_sizes(Driver::Inproc, Steal::ClusterAware);
}

#[test]
fn tcp_random_stealing_matches_sequential() {
    all_sizes(Driver::Tcp, Steal::Random);
}

#[test]
fn tcp_cluster_aware_stealing_matches_sequential() {
    all_sizes(Driver::Tcp, Steal::ClusterAware);
}

/// Work must cross: a wide-area steal that brought back a job, run in the other location.
/// Whether one does in a given series depends on timing (the other location may ask while the
/// first has nothing to give), so the series runs again until one has, within the limit.
#[test]
fn shm_random_stealing_matches_sequential() {
    all_sizes(Driver::Shm, Steal::Random);
}

#[test]
fn shm_cluster_aware_stealing_matches_sequential() {
    all_sizes(Driver::Shm, Steal::ClusterAware);
}

/// Four nodes in two locations, 5 ms apart over the wide-area emulation.
fn two_locations() -> Layout {
    Layout {
        wan_latency: Duration::from_millis(5),
        ..Layout::new(Driver::Wan, 4, 2)
    }
}

#[test]
fn cluster_aware_stealing_crosses_a_wide_area_link() {
    let deadline = Instant::now() + LIMIT;
    let layout = two_locations();
    let reports = on_nodes_until(layout, deadline, |ibis| {
        series(ibis, 1, Steal::ClusterAware)
    });
    check(layout, Steal::ClusterAware, &reports);
    // Work that lasts as long in every build, and long against the link's latency: 32
    // leaves of 20 ms, which the master's location alone would take 320 ms for.
    let naps = Sleepy { depth: 5, ms: 20 };
    loop {
        let reports = on_nodes_until(layout, deadline, move |ibis| {
            let rt = Runtime::in_pool(ibis).steal(Steal::ClusterAware);
            let leaves = rt.run(naps).expect("sleepy");
            report(&rt, vec![leaves])
        });
        for r in &reports {
            let want = (r.me == r.master).then_some(1u64 << naps.depth);
            assert_eq!(r.outputs, vec![want], "on {}", r.me);
        }
        let crossed: u64 = reports.iter().map(|r| r.stats.wide_steals).sum();
        let asked: u64 = reports.iter().map(|r| r.stats.wide_steal_attempts).sum();
        assert!(crossed <= asked);
        if crossed >= 1 {
            // The jobs that crossed ran where they arrived.
            let received: u64 = reports.iter().map(|r| r.stats.jobs_received).sum();
            assert!(
                received >= crossed,
                "{crossed} crossed, {received} received"
            );
            eprintln!("{crossed} of {asked} wide-area steal requests brought back a job");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no job crossed the wide-area link in any run ({asked} requests in the last)"
        );
    }
}

/// Nodes learn of the end of a run at different times (here 5 ms apart across the link) and
/// drop their runtimes at once: none may take another's closing for a death, and none may
/// wait out a timeout (the master's 10 s for confirmations, a 30 s connect) before it is done.
#[test]
fn nodes_that_end_at_different_times_close_promptly_and_count_no_deaths() {
    let deadline = Instant::now() + LIMIT;
    let layout = two_locations();
    for _ in 0..5 {
        let started = Instant::now();
        let reports = on_nodes_until(layout, deadline, |ibis| {
            series(ibis, 1, Steal::ClusterAware)
        });
        check(layout, Steal::ClusterAware, &reports);
        for r in &reports {
            assert_eq!(r.stats.nodes_died, 0, "{} counted a death", r.me);
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(8),
            "a pool of four took {took:?} to run and close"
        );
    }
}

/// Set once a `Boom` has started; per test binary, so only one test uses it.
static BOOM_STARTED: AtomicBool = AtomicBool::new(false);

/// Panics wherever it runs.
#[derive(Serialize, Deserialize)]
struct Boom;

impl Task for Boom {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        BOOM_STARTED.store(true, Ordering::SeqCst);
        panic!("boom");
    }
}
satin::register!(Boom);

/// Keeps its worker busy (spawning, so that waiting jobs stay visible to thieves) until a
/// `Boom` has started, which on a one-thread master can only happen on another node.
#[derive(Serialize, Deserialize)]
struct WaitForBoom;

impl Task for WaitForBoom {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let start = Instant::now();
        while !BOOM_STARTED.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "Boom never started"
            );
            cx.spawn(Nop);
            cx.sync();
        }
        0
    }
}
satin::register!(WaitForBoom);

#[derive(Serialize, Deserialize)]
struct BoomElsewhere;

impl Task for BoomElsewhere {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let boom = cx.spawn(Boom);
        let wait = cx.spawn(WaitForBoom);
        cx.sync();
        boom.take() + wait.take()
    }
}
satin::register!(BoomElsewhere);

#[test]
fn a_panic_on_another_node_fails_the_run_everywhere_and_the_pool_goes_on() {
    let reports = on_nodes(Layout::new(Driver::Tcp, 2, 1), |ibis| {
        let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
        let failed = rt.run(BoomElsewhere);
        let next = rt.run(Fib(15));
        (failed, next, rt.node().name(), rt.master().unwrap().name())
    });
    for (failed, next, me, master) in reports {
        let err = failed.expect_err("the run fails");
        if me == master {
            // Named after the node the job ran on, which is not the master.
            assert!(matches!(err, Error::Remote(_)), "{err:?}");
            let text = err.to_string();
            assert!(text.contains("panicked: boom"), "{text}");
            assert!(text.contains("Boom"), "{text}");
            assert!(!text.contains(&format!("on {master}")), "{text}");
            assert_eq!(next.unwrap(), Some(fib(15)));
        } else {
            match &err {
                Error::RunFailed { master: m, reason } => {
                    assert!(m.contains(&master), "{err}");
                    assert!(reason.contains(&format!("on {me}")), "{err}");
                }
                other => panic!("expected RunFailed, got {other:?}"),
            }
            assert_eq!(next.unwrap(), None);
        }
    }
}

/// A tree whose every output is a megabyte. Both nodes steal, so results usually travel both
/// ways at once; that must never leave two nodes each waiting for the other to read.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Wide {
    depth: u32,
    seed: u64,
}

const WIDE_WORDS: usize = 1 << 17;

impl Wide {
    fn children(self) -> [Wide; 2] {
        [1, 2].map(|k| Wide {
            depth: self.depth - 1,
            seed: self.seed.wrapping_mul(6364136223846793005).wrapping_add(k),
        })
    }

    fn leaf(self) -> Vec<u64> {
        (0..WIDE_WORDS as u64)
            .map(|i| (self.seed ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect()
    }

    fn combine(a: Vec<u64>, b: Vec<u64>) -> Vec<u64> {
        a.iter()
            .zip(&b)
            .map(|(x, y)| x.rotate_left(7).wrapping_add(*y))
            .collect()
    }

    fn sequential(self) -> Vec<u64> {
        if self.depth == 0 {
            return self.leaf();
        }
        let [a, b] = self.children();
        Wide::combine(a.sequential(), b.sequential())
    }
}

impl Task for Wide {
    type Output = Vec<u64>;
    fn run(self, cx: &mut Context) -> Vec<u64> {
        if self.depth == 0 {
            return self.leaf();
        }
        let [a, b] = self.children();
        let a = cx.spawn(a);
        let b = cx.spawn(b);
        cx.sync();
        Wide::combine(a.take(), b.take())
    }
}
satin::register!(Wide);

/// The root of a [`Wide`] tree that keeps its two halves on offer, without running either,
/// until one of them has finished: on a master of one thread, only another node can run it,
/// so that a megabyte output surely moves between the nodes, however busy the machine.
#[derive(Serialize, Deserialize)]
struct WideOffered(Wide);

impl Task for WideOffered {
    type Output = Vec<u64>;
    fn run(self, cx: &mut Context) -> Vec<u64> {
        let [a, b] = self.0.children();
        let a = cx.spawn(a);
        let b = cx.spawn(b);
        offer_until(cx, LIMIT, "no other node ran a half", || {
            a.is_ready() || b.is_ready()
        });
        cx.sync();
        Wide::combine(a.take(), b.take())
    }
}
satin::register!(WideOffered);

#[test]
fn megabyte_outputs_move_between_stealing_nodes() {
    let root = Wide { depth: 6, seed: 3 };
    let expect = root.sequential();
    let reports = on_nodes(Layout::new(Driver::Tcp, 2, 1), move |ibis| {
        let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
        let out = rt.run(WideOffered(root)).expect("the run");
        (out, rt.stats())
    });
    let outputs: Vec<_> = reports.iter().filter_map(|r| r.0.as_ref()).collect();
    assert_eq!(outputs.len(), 1);
    assert!(outputs[0] == &expect, "the combined output differs");
    let moved: u64 = reports.iter().map(|r| r.1.bytes_moved).sum();
    assert!(moved >= 8 * WIDE_WORDS as u64, "{moved} bytes moved");
}

/// Works for a while without spawning anything: there is nothing to steal meanwhile.
#[derive(Serialize, Deserialize)]
struct Busy(Duration);

impl Task for Busy {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        let start = Instant::now();
        let mut spins = 0u64;
        while start.elapsed() < self.0 {
            spins += 1;
            std::hint::spin_loop();
        }
        spins
    }
}
satin::register!(Busy);

#[test]
fn idle_nodes_back_off_instead_of_flooding_the_pool() {
    let busy = Duration::from_millis(500);
    let reports = on_nodes(Layout::new(Driver::Inproc, 3, 1), move |ibis| {
        let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
        let out = rt.run(Busy(busy)).expect("the run");
        (out.is_some(), rt.stats())
    });
    for (master, stats) in reports {
        if master {
            continue;
        }
        // Asking once per idle wake-up (every millisecond) would be about 500 requests;
        // backing off to at most 20 ms between failures leaves a few dozen.
        let attempts = stats.remote_steal_attempts;
        assert!(
            (1..=100).contains(&attempts),
            "{attempts} steal requests in {busy:?}"
        );
        assert_eq!(stats.remote_steals, 0);
    }
}

#[test]
fn steal_requests_from_another_node_ask_for_work() {
    let reports = on_nodes(Layout::new(Driver::Inproc, 2, 1), |ibis| {
        // On a master of one thread only another node can run the pieces, so its steal
        // requests must have been seen as requests for work. Only this test of the binary
        // runs pieces.
        let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
        let split = SplitOnDemand {
            pieces: 5,
            ran_before: 0,
        };
        let out = rt.run(split).expect("run");
        (
            out,
            rt.stats(),
            rt.node().name(),
            rt.master().unwrap().name(),
        )
    });
    let mut received = 0;
    for (out, stats, me, master) in reports {
        let sum = out.map(|(_, pieces)| pieces.iter().map(|&(k, _)| k).sum::<u64>());
        let want = (me == master).then_some(1 + 2 + 3 + 4 + 5);
        assert_eq!(sum, want, "{me}");
        received += stats.jobs_received;
    }
    // Each piece ran on the node that did not hand it out.
    assert!(received >= 5, "{received} jobs received");
}

/// A node may call `run` only after the master has run it alone and left the pool: the master
/// announced the run's end before it left, so the late node's run ends as the master's did,
/// rather than failing because the master is gone (a uts sweep met this when its search ran
/// quickly on the master).
#[test]
fn a_node_that_starts_a_run_after_the_master_finished_it_and_left_ends_it_too() {
    let (first_over, wait_first) = crossbeam_channel::bounded::<()>(1);
    let reports = on_nodes(Layout::new(Driver::Tcp, 2, 1), move |ibis| {
        let master = ibis.id().rank() == 0;
        let view = ibis.clone();
        let events = view.pool().subscribe();
        let rt = Runtime::in_pool(ibis).threads(1);
        let first = rt.run(Nop).map(|o| o.is_some());
        if !master {
            first_over.send(()).expect("the master waits");
            // Keeps this node from starting the next run until the master has ended it and
            // left the pool.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = events
                    .recv_deadline(deadline)
                    .expect("the master leaves the pool within 30 s");
                if matches!(left, ipl::PoolEvent::Left(n) if n.rank() == 0) {
                    break;
                }
            }
            drop(view);
            return (first, rt.run(Nop).map(|o| o.is_some()));
        }
        wait_first
            .recv_timeout(Duration::from_secs(30))
            .expect("the other node ends its first run");
        let second = rt.run(Nop).map(|o| o.is_some());
        // Dropping the runtime waits for the other node's confirmation of the end; the test
        // harness holds a clone of the node, so it leaves the pool explicitly.
        drop(rt);
        view.end().expect("leave the pool");
        (first, second)
    });
    for (rank, (first, second)) in reports.into_iter().enumerate() {
        let master = rank == 0;
        assert_eq!(first.expect("the first run"), master, "node {rank}");
        assert_eq!(
            second.unwrap_or_else(|e| panic!("the second run on node {rank}: {e}")),
            master,
            "node {rank}"
        );
    }
}
