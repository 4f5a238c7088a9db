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
    let members = ibis.pool().wait_closed().expect("the pool closes");
    let mesh = Mesh::builder(&ibis, "satin")
        .members(members.clone())
        .serialization(Serialization::Data)
        .control_upcall(|_m: ipl::ReadMessage| -> ipl::Result<()> { Ok(()) })
        .data_upcall(|_m: ipl::ReadMessage| -> ipl::Result<()> { Ok(()) })
        .build()
        .expect("the rogue's mesh");
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
