//! A pool member that is not a satin node sends hand-made control messages: an end of run, an
//! all-done and a welcome with the largest epoch, which only the master may send. They are
//! refused, counted, and the pool's runs go on with exact results.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::tasks::{Fib, Nop};
use common::{fib, on_nodes, Layout, LIMIT};
use ipl::{Driver, Lane, Mesh, Serialization};
use satin::Runtime;

/// The wire numbers of the messages (see `distributed/proto.rs`).
const DONE: u8 = 5;
const WELCOME: u8 = 9;
const ALL_DONE: u8 = 14;

/// The nodes that have refused the rogue's message: the rogue stays in the pool until both
/// have.
static REFUSING: AtomicU32 = AtomicU32::new(0);

/// Rank 2: sends an end of run and an all-done to rank 1 and a welcome to the master (rank 0),
/// all for epoch `u64::MAX`, over a mesh of its own under satin's name, and leaves the pool once both have
/// refused them (see [`REFUSING`]): the
/// master's runs wait for every member to confirm their ends, which this one never does, and
/// the nodes would keep trying to reach satin's ports on it, which it does not have, while it
/// is a member.
fn rogue(ibis: ipl::Ibis) {
    let (members, mesh) = satin_mesh(&ibis);
    // DONE: the run succeeded (no error text follows); WELCOME: no run is active.
    for (to, kind, flag) in [
        (1, DONE, Some(true)),
        (1, ALL_DONE, None),
        (0, WELCOME, Some(false)),
    ] {
        let target = members.iter().find(|n| n.rank() == to).expect("member");
        let link = mesh.link(target, Lane::Control).expect("link");
        let mut w = link.message();
        w.write_u8(kind);
        w.write_u64(u64::MAX);
        if let Some(flag) = flag {
            w.write_bool(flag);
        }
        w.finish().expect("send");
    }
    // Leaving first could make a node drop the message of a member that has gone.
    let deadline = Instant::now() + LIMIT;
    while REFUSING.load(Ordering::Acquire) < 2 {
        assert!(
            Instant::now() < deadline,
            "the nodes did not refuse in time"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(mesh);
    ibis.end().expect("the rogue leaves");
}

/// The pool's members once it has closed, and a mesh among them under satin's name that
/// ignores what it receives: how a member that is not a satin node reaches satin's ports.
fn satin_mesh(ibis: &ipl::Ibis) -> (Vec<ipl::NodeId>, Mesh) {
    let members = ibis.pool().wait_closed().expect("the pool closes");
    let mesh = Mesh::builder(ibis, "satin")
        .members(members.clone())
        .serialization(Serialization::Data)
        .control_upcall(|_m: ipl::ReadMessage| -> ipl::Result<()> { Ok(()) })
        .data_upcall(|_m: ipl::ReadMessage| -> ipl::Result<()> { Ok(()) })
        .build()
        .expect("a mesh under satin's name");
    (members, mesh)
}

#[test]
fn ends_and_welcomes_from_a_member_that_is_not_the_master_are_refused() {
    let out = on_nodes(Layout::new(Driver::Inproc, 3, 1), |ibis| {
        if ibis.id().rank() == 2 {
            rogue(ibis);
            return None;
        }
        // The master gets the welcome; the worker the end of run and the all-done.
        let refusals = if ibis.id().rank() == 0 { 1 } else { 2 };
        let rt = Runtime::in_pool(ibis).threads(1);
        // The first run sets up satin's mesh, to which the rogue's messages come.
        rt.run(Nop).expect("the first run");
        let deadline = Instant::now() + LIMIT;
        while rt.stats().messages_refused < refusals {
            assert!(
                Instant::now() < deadline,
                "the rogue's message was not refused"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        REFUSING.fetch_add(1, Ordering::Release);
        let results: Vec<_> = (0..3)
            .map(|_| rt.run(Fib(18)).expect("a run after the rogue's message"))
            .collect();
        Some((results, rt.stats().messages_refused))
    });
    let want = fib(18);
    assert_eq!(out[0], Some((vec![Some(want); 3], 1)), "master: {out:?}");
    assert_eq!(out[1], Some((vec![None; 3], 2)), "worker: {out:?}");
}

/// The wire number of a job's result (see `distributed/proto.rs`).
const RESULT: u8 = 3;

/// [`Held`] children that have started.
static HELD_STARTED: AtomicU32 = AtomicU32::new(0);
/// Lets the [`Held`] children end.
static HELD_RELEASED: AtomicU32 = AtomicU32::new(0);
/// The master has refused the rogue's result: the rogue may leave.
static FORGERY_REFUSED: AtomicU32 = AtomicU32::new(0);

/// Returns 1 once [`HELD_RELEASED`] is set.
#[derive(serde::Serialize, serde::Deserialize)]
struct Held;

impl satin::Task for Held {
    type Output = u64;
    fn run(self, _cx: &mut satin::Context) -> u64 {
        HELD_STARTED.fetch_add(1, Ordering::AcqRel);
        let deadline = Instant::now() + LIMIT;
        while HELD_RELEASED.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        1
    }
}
satin::register!(Held);

/// Spawns a [`Held`] child and keeps spawning (in calls, so that its own child stays queued)
/// until a thief has started it: the child then runs on the other node for sure.
#[derive(serde::Serialize, serde::Deserialize)]
struct GiveAway;

impl satin::Task for GiveAway {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        let held = cx.spawn(Held);
        let deadline = Instant::now() + LIMIT;
        while HELD_STARTED.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
            // A spawn is where a worker hands queued jobs over to thieves that asked.
            cx.call(Poke);
            std::thread::sleep(Duration::from_millis(1));
        }
        cx.sync();
        held.take()
    }
}
satin::register!(GiveAway);

#[derive(serde::Serialize, serde::Deserialize)]
struct Poke;

impl satin::Task for Poke {
    type Output = ();
    fn run(self, cx: &mut satin::Context) {
        cx.spawn(Nop);
        cx.sync();
    }
}
satin::register!(Poke);

/// Rank 2: once rank 1 runs the job it stole from the master, claims to be the thief of every
/// job number up to 1024 and sends the master a result of 999 for each; leaves once the
/// master has refused it, and then lets the job end.
fn forger(ibis: ipl::Ibis) {
    let (members, mesh) = satin_mesh(&ibis);
    let deadline = Instant::now() + LIMIT;
    while HELD_STARTED.load(Ordering::Acquire) == 0 {
        assert!(Instant::now() < deadline, "the job was not stolen in time");
        std::thread::sleep(Duration::from_millis(1));
    }
    let master = members.iter().find(|n| n.rank() == 0).expect("master");
    let link = mesh.link(master, Lane::Data).expect("link");
    let forged = postcard::to_allocvec(&999u64).expect("encode");
    for job in 0..1024u64 {
        let mut w = link.message();
        w.write_u8(RESULT);
        w.write_u64(1); // the epoch, which a result does not look at
        w.write_u64(job);
        w.write_bool(true);
        w.write_bytes(&forged);
        w.finish().expect("send");
    }
    while FORGERY_REFUSED.load(Ordering::Acquire) == 0 {
        assert!(
            Instant::now() < deadline,
            "the master did not answer in time"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(mesh);
    ibis.end().expect("the forger leaves");
    HELD_RELEASED.store(1, Ordering::Release);
}

#[test]
fn a_result_from_a_member_that_is_not_the_jobs_thief_is_refused() {
    let out = on_nodes(Layout::new(Driver::Inproc, 3, 1), |ibis| {
        if ibis.id().rank() == 2 {
            forger(ibis);
            return None;
        }
        let master = ibis.id().rank() == 0;
        let rt = Runtime::in_pool(ibis).threads(1);
        rt.run(Nop).expect("the first run");
        if master {
            std::thread::scope(|s| {
                let run = s.spawn(|| rt.run(GiveAway).expect("the run"));
                // Before the forged result is refused, or the run ends on it.
                let deadline = Instant::now() + LIMIT;
                while rt.stats().messages_refused == 0 && !run.is_finished() {
                    assert!(Instant::now() < deadline, "nothing refused in time");
                    std::thread::sleep(Duration::from_millis(1));
                }
                FORGERY_REFUSED.store(1, Ordering::Release);
                let result = run.join().expect("the master's run");
                Some((result, rt.stats().messages_refused))
            })
        } else {
            Some((rt.run(GiveAway).expect("the run"), 0))
        }
    });
    assert_eq!(out[0], Some((Some(1), 1)), "master: {out:?}");
    assert_eq!(out[1], Some((None, 0)), "worker: {out:?}");
}
