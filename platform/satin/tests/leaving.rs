//! A node that leaves the pool between runs does not wait for what will not come: the answer to
//! a wide-area steal request of the run that ended (the victim answers no request of a run it
//! has seen end, and across a wide-area link it often learns of the end before the request
//! reaches it), a connection to a member that has closed its runtime but is still in the pool,
//! just to tell it that nothing more comes, nor, when many leave at once, the pool's report of
//! each other leaver that it can no longer reach.
//!
//! A test binary of its own: the failpoint it sets is the whole process's (each test holds
//! the `fail` crate's scenario lock, so they run one at a time).

mod common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::tasks::{Fib, Sleepy};
use common::{on_nodes_until, Layout, LIMIT};
use ipl::Driver;
use satin::{Runtime, Steal};

/// What a node saw: whether it is the master, its wide-area steal requests, and how long its
/// leave took (None on the master, which cannot leave).
struct Seen {
    master: bool,
    wide_asked: u64,
    leave: Option<Duration>,
}

#[test]
fn a_node_leaving_after_a_run_does_not_wait_for_an_unanswered_wide_area_steal() {
    // Every victim drops wide-area requests as it drops those of a run it has seen end, so
    // each idle node's first one stays unanswered, in flight until the run is over.
    let _scenario = fail::FailScenario::setup();
    fail::cfg("satin::wide-steal-unanswered", "return").expect("failpoint");
    let layout = Layout {
        wan_latency: Duration::from_millis(2),
        ..Layout::new(Driver::Wan, 4, 2)
    };
    let naps = Sleepy { depth: 4, ms: 20 };
    let seen = on_nodes_until(layout, Instant::now() + LIMIT, move |ibis| {
        let rt = Runtime::in_pool(ibis).steal(Steal::ClusterAware);
        let out = rt.run(naps).expect("sleepy");
        let master = rt.master().expect("elected").name() == rt.node().name();
        let wide_asked = rt.stats().wide_steal_attempts;
        assert_eq!(out, master.then_some(1 << naps.depth));
        let leave = (!master).then(|| {
            let t = Instant::now();
            rt.leave().expect("leave");
            t.elapsed()
        });
        Seen {
            master,
            wide_asked,
            leave,
        }
    });
    assert_eq!(seen.iter().filter(|s| s.master).count(), 1);
    for s in seen.iter().filter(|s| !s.master) {
        // Each node off the master was idle at the start, with the other location to ask.
        assert!(s.wide_asked >= 1, "a node sent no wide-area steal request");
        let took = s.leave.expect("left");
        // The answer's patience is 5 s; a leave that waited for it took that long.
        assert!(
            took < Duration::from_secs(2),
            "a node's leave took {took:?}: it waited for something that never comes"
        );
    }
}

/// Runs `task` once in a pool of `layout`; then every node but the master leaves, all at
/// once, after the master closed its runtime (`master_first`) or while it keeps it. Returns
/// how long each leave took, slowest last.
fn leave_after_a_run<T, F>(layout: Layout, task: F, master_first: bool) -> Vec<Duration>
where
    T: satin::Task<Output = u64>,
    F: Fn() -> T + Send + Sync + 'static,
{
    let go = Arc::new(Barrier::new(layout.nodes as usize));
    let seen = on_nodes_until(layout, Instant::now() + LIMIT, move |ibis| {
        let rt = Runtime::in_pool(ibis);
        let out = rt.run(task()).expect("the run");
        let master = rt.master().expect("elected").name() == rt.node().name();
        assert_eq!(out.is_some(), master, "the output is the master's");
        if master {
            if master_first {
                drop(rt);
            }
            go.wait();
            return None;
        }
        go.wait();
        let t = Instant::now();
        rt.leave().expect("leave");
        Some(t.elapsed())
    });
    let mut leaves: Vec<Duration> = seen.into_iter().flatten().collect();
    leaves.sort();
    assert_eq!(leaves.len(), layout.nodes as usize - 1);
    leaves
}

#[test]
fn a_node_leaving_after_the_master_closed_its_runtime_does_not_wait_to_connect_to_it() {
    let _scenario = fail::FailScenario::setup();
    // The master closes its runtime after the run and stays in the pool, as a program does
    // that goes on with other work; then the others leave. Nothing is stolen (the task spawns
    // nothing), so no node off the master has sent it anything on the data lane.
    let leaves = leave_after_a_run(
        Layout::new(Driver::Inproc, 3, 1),
        || Sleepy { depth: 0, ms: 10 },
        true,
    );
    for took in leaves {
        // A connect to the master's closed data port would be refused until the connect
        // timeout (20 s here).
        assert!(
            took < Duration::from_secs(2),
            "a node's leave took {took:?}: it waited to connect to a member that closed its runtime"
        );
    }
}

#[test]
fn nodes_leaving_at_once_do_not_wait_for_each_other() {
    let _scenario = fail::FailScenario::setup();
    let leaves = leave_after_a_run(Layout::new(Driver::Inproc, 24, 1), || Fib(20), false);
    // A leaver that waited the mesh's patience (200 ms) for the pool to report another leaver
    // it could not reach took that long, or a multiple of it: most did, before. A few slow
    // ones are left to the machine's load.
    let slow = leaves
        .iter()
        .filter(|d| **d >= Duration::from_millis(150))
        .count();
    assert!(
        slow < leaves.len() / 4,
        "{slow} of {} leaves took 150 ms or more: {leaves:?}",
        leaves.len()
    );
}
