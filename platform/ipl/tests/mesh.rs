//! The mesh: every member reaches every other on both lanes, large data crossing in both
//! directions never blocks, departures are reported per member and in order, and members come
//! and go in an open pool.

mod common;

use common::{Net, DRIVERS, LIMIT};
use crossbeam_channel::{Receiver, Sender};
use ipl::{Config, Departure, Driver, Ibis, Lane, Mesh, MeshError, NodeId, PoolEvent};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A data message: its sender's rank and its numbers.
type Arrival = (u32, Vec<u64>);

/// A mesh whose data handler forwards (sender rank, payload) into a channel.
fn mesh_with_inbox(ibis: &Ibis, name: &str) -> Res<(Mesh, Receiver<Arrival>)> {
    let (tx, rx): (Sender<Arrival>, _) = crossbeam_channel::unbounded();
    let mesh = Mesh::builder(ibis, name)
        .data_upcall(move |mut m| {
            let from = m.origin().rank();
            let v = m.read_slice::<u64>()?;
            let _ = tx.send((from, v));
            Ok(())
        })
        .build()
        .map_err(s)?;
    Ok((mesh, rx))
}

/// Waits until the pool reports that `node` left or died.
fn await_departure(events: &Receiver<PoolEvent>, node: &NodeId) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(PoolEvent::Left(n) | PoolEvent::Died(n)) if n == *node => return,
            Ok(_) => {}
            Err(_) => panic!("the pool did not report {node} gone within 20 s"),
        }
    }
}

/// Runs `f` for ranks 0..n of a closed pool over `driver`, each on its own thread.
fn run<T: Send + 'static>(
    driver: Driver,
    n: u32,
    f: impl Fn(Ibis, &Barrier) -> Res<T> + Send + Sync + 'static,
) -> Vec<T> {
    let net = Net::new(driver, n);
    let f = Arc::new(f);
    // Every node holds its `Ibis` until all have passed it (leaving is a departure).
    let done = Arc::new(Barrier::new(n as usize));
    let (tx, rx) = crossbeam_channel::unbounded();
    for rank in 0..n {
        let mut cfg = net.config();
        cfg.rank = Some(rank);
        let (f, tx, done) = (f.clone(), tx.clone(), done.clone());
        std::thread::spawn(move || {
            let r = Ibis::join(cfg).map_err(s).and_then(|ibis| f(ibis, &done));
            let _ = tx.send((rank, r));
        });
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (rank, r) = rx
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("{n} nodes over {driver:?} took over {LIMIT:?}"));
        out[rank as usize] = Some(r.unwrap_or_else(|e| panic!("node {rank} over {driver:?}: {e}")));
    }
    out.into_iter().map(Option::unwrap).collect()
}

#[test]
fn every_member_reaches_every_other_on_both_lanes_and_large_data_crosses() {
    // Also: `Mesh::linked` tells connected lanes from those not used yet.
    for driver in DRIVERS {
        let sums = run(driver, 3, move |ibis, done| {
            let me = ibis.id().rank();
            let (mesh, inbox) = mesh_with_inbox(&ibis, "m")?;
            let members = mesh.members();
            assert_eq!(
                members.iter().map(NodeId::rank).collect::<Vec<_>>(),
                [0, 1, 2]
            );
            let others: Vec<NodeId> = members
                .iter()
                .filter(|n| **n != ibis.id())
                .cloned()
                .collect();
            // Nothing is connected before first use; a connected lane is seen as such.
            for to in &others {
                assert!(!mesh.linked(to, Lane::Data) && !mesh.linked(to, Lane::Control));
            }
            mesh.link(&others[0], Lane::Control).map_err(s)?;
            assert!(mesh.linked(&others[0], Lane::Control));
            assert!(!mesh.linked(&others[0], Lane::Data));
            mesh.connect_all().map_err(s)?;
            for to in &others {
                assert!(mesh.linked(to, Lane::Data) && mesh.linked(to, Lane::Control));
            }
            // 1 MiB to each other member on the data lane at the same time as they send theirs:
            // nobody reads in between, so only the drained data port lets this finish.
            let big: Vec<u64> = (0..(1 << 17)).map(|i| i * u64::from(me + 1)).collect();
            for to in members.iter().filter(|n| **n != ibis.id()) {
                let link = mesh.link(to, Lane::Data).map_err(s)?;
                assert_eq!((link.to(), link.lane()), (to, Lane::Data));
                let mut w = link.message();
                w.write_slice(&big[..]);
                w.finish()
                    .map_err(|e| s(mesh.send_error(to, "sending", e)))?;
                let link = mesh.link(to, Lane::Control).map_err(s)?;
                let mut w = link.message();
                w.write_u32(me);
                w.finish()
                    .map_err(|e| s(mesh.send_error(to, "sending", e)))?;
            }
            let port = mesh.control_port().expect("explicit control port");
            let mut ranks = 0;
            for _ in 0..2 {
                let mut m = port.receive_timeout(LIMIT).map_err(s)?;
                let r = m.read_u32().map_err(s)?;
                assert_eq!(r, m.origin().rank());
                ranks += r;
            }
            for _ in 0..2 {
                let (from, v) = inbox.recv_timeout(LIMIT).map_err(s)?;
                assert_eq!(v.len(), 1 << 17);
                assert!(v
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x == i as u64 * u64::from(from + 1)));
            }
            mesh.check().map_err(s)?;
            assert!(mesh.departed().is_empty());
            done.wait();
            Ok(ranks)
        });
        assert_eq!(sums, vec![3, 2, 1], "{driver:?}");
    }
}

#[test]
fn departures_are_reported_per_member_in_order_and_the_first_is_named() {
    for driver in DRIVERS {
        let net = Net::new(driver, 3);
        let join = |rank: u32| {
            let mut cfg = net.config();
            cfg.rank = Some(rank);
            cfg
        };
        // Ranks 1 and 2 build their side and then leave when told, in turn.
        let (go, wait) = crossbeam_channel::unbounded::<()>();
        let mut others = Vec::new();
        for rank in [1u32, 2] {
            let (cfg, wait) = (join(rank), wait.clone());
            others.push(std::thread::spawn(move || -> Res<()> {
                let ibis = Ibis::join(cfg).map_err(s)?;
                let _mesh = mesh_with_inbox(&ibis, "gone")?;
                wait.recv_timeout(LIMIT).map_err(s)?;
                ibis.end().map_err(s)
            }));
        }
        let ibis = Ibis::join(join(0)).expect("join");
        let events = ibis.pool().subscribe();
        let (mesh, _inbox) = mesh_with_inbox(&ibis, "gone").expect("mesh");
        let all = mesh.members();
        mesh.connect_all().expect("connect");
        mesh.check().expect("everyone is here");

        // Whoever leaves first is rank 1 or 2; find out by letting one go.
        go.send(()).unwrap();
        let first = loop {
            match events.recv_timeout(LIMIT).expect("a departure") {
                PoolEvent::Left(n) | PoolEvent::Died(n) => break n,
                _ => {}
            }
        };
        let second = all[1..].iter().find(|n| **n != first).unwrap().clone();
        match mesh.check() {
            Err(MeshError::Departed { peer, first: f }) => {
                assert_eq!(
                    (peer.node.clone(), f.node.clone()),
                    (first.clone(), first.clone())
                );
                assert!(!peer.died, "it left on its own");
            }
            r => panic!("{driver:?}: {r:?}"),
        }
        // The one still here is fine; a send to the one that left names it.
        mesh.check_peer(&second).expect("still here");
        let link = mesh.link(&first, Lane::Control).expect("the link exists");
        let mut w = link.message();
        w.write_u32(1);
        if let Err(e) = w.finish() {
            let e = mesh.send_error(&first, "sending", e);
            assert!(
                matches!(&e, MeshError::Departed { peer, .. } if peer.node == first),
                "{e}"
            );
        }

        go.send(()).unwrap();
        await_departure(&events, &second);
        let want = vec![
            Departure {
                node: first.clone(),
                died: false,
            },
            Departure {
                node: second.clone(),
                died: false,
            },
        ];
        assert_eq!(mesh.departed(), want, "{driver:?}");
        // Per member: the second names itself as the peer and the first as the first.
        match mesh.check_peer(&second) {
            Err(e @ MeshError::Departed { .. }) => {
                let MeshError::Departed { peer, first: f } = &e else {
                    unreachable!()
                };
                assert_eq!((&peer.node, &f.node), (&second, &first));
                let text = e.to_string();
                assert!(
                    text.contains(&second.to_string()) && text.contains(&first.to_string()),
                    "{text}"
                );
            }
            r => panic!("{driver:?}: {r:?}"),
        }
        for t in others {
            t.join().unwrap().unwrap();
        }
        drop(net);
    }
}

#[test]
fn members_join_and_leave_an_open_pool() {
    let pool = common::unique("open-mesh");
    let open = |pool: &str| {
        let mut cfg = Config::inproc(pool, 1);
        cfg.size = None;
        cfg
    };
    let a = Ibis::join(open(&pool)).expect("a joins");
    let b = Ibis::join(open(&pool)).expect("b joins");
    let events = a.pool().subscribe();
    // A node knows the others from the pool's events, which arrive in their own time; here
    // each side is told its members.
    let side = |ibis: &Ibis, members: Vec<NodeId>| {
        Mesh::builder(ibis, "open")
            .members(members)
            .data_upcall(|_| Ok(()))
            .build()
            .expect("mesh")
    };
    let ma = side(&a, vec![a.id(), b.id()]);
    let mb = side(&b, vec![b.id(), a.id()]);
    assert_eq!(ma.members(), vec![a.id(), b.id()]);

    // A third node joins; A takes it in and reaches it.
    let c = Ibis::join(open(&pool)).expect("c joins");
    let mc = side(&c, vec![]);
    assert!(matches!(
        ma.link(&c.id(), Lane::Control),
        Err(MeshError::NotMember { .. })
    ));
    assert!(ma.add(c.id()));
    assert!(!ma.add(c.id()), "added twice");
    let link = ma
        .link(&c.id(), Lane::Control)
        .expect("link to the newcomer");
    let mut w = link.message();
    w.write_u64(42);
    w.finish().expect("send");
    let mut m = mc
        .control_port()
        .unwrap()
        .receive_timeout(LIMIT)
        .expect("receive");
    assert_eq!(
        (m.read_u64().unwrap(), m.origin().rank()),
        (42, a.id().rank())
    );
    drop(m);

    // C leaves: A sees it, takes it out, and is whole again.
    let c_id = c.id();
    drop(mc);
    c.end().unwrap();
    await_departure(&events, &c_id);
    assert!(matches!(ma.check(), Err(MeshError::Departed { .. })));
    assert!(ma.remove(&c_id));
    assert!(!ma.remove(&c_id));
    ma.check().expect("whole again after the removal");
    assert_eq!(ma.departed().len(), 1, "the history keeps the departure");
    assert!(matches!(
        ma.link(&c_id, Lane::Data),
        Err(MeshError::NotMember { .. })
    ));

    // A closed mesh refuses links and has no members.
    ma.close();
    assert!(ma.members().is_empty());
    assert!(ma.link(&b.id(), Lane::Control).is_err());
    drop(mb);
}

#[test]
fn a_mesh_needs_a_data_handler_and_a_free_name() {
    let pool = common::unique("mesh-build");
    let ibis = Ibis::join(Config::inproc(&pool, 1)).unwrap();
    let e = Mesh::builder(&ibis, "x").build().unwrap_err();
    assert!(e.to_string().contains("handler"), "{e}");
    let _first = Mesh::builder(&ibis, "x")
        .data_upcall(|_| Ok(()))
        .build()
        .unwrap();
    let e = Mesh::builder(&ibis, "x")
        .data_upcall(|_| Ok(()))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("x/control"), "{e}");
    let e = Mesh::builder(&ibis, "")
        .data_upcall(|_| Ok(()))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("name"), "{e}");
}

#[test]
fn a_patience_past_the_longest_duration_is_refused() {
    let pool = common::unique("mesh-patience");
    let ibis = Ibis::join(Config::inproc(&pool, 1)).unwrap();
    match Mesh::builder(&ibis, "m")
        .data_upcall(|_| Ok(()))
        .patience(Duration::MAX)
        .build()
    {
        Err(e) => assert!(e.to_string().contains("patience"), "{e}"),
        // The deadline of the first failed send is the clock plus the patience.
        Ok(mesh) => {
            let e = mesh.send_error(&ibis.id(), "a send", ipl::Error::Closed("port".into()));
            panic!("accepted; a failed send gave: {e}");
        }
    }
    let year = Mesh::builder(&ibis, "y")
        .data_upcall(|_| Ok(()))
        .patience(ipl::config::MAX_DURATION)
        .build();
    assert!(year.is_ok());
}

#[test]
fn both_lanes_may_be_read_by_handlers() {
    let got = run(Driver::Inproc, 2, |ibis, done| {
        let (tx, rx) = crossbeam_channel::unbounded();
        let tx2 = tx.clone();
        let mesh = Mesh::builder(&ibis, "up")
            .control_upcall(move |mut m| {
                let _ = tx.send(("control", m.read_u32()?));
                Ok(())
            })
            .data_upcall(move |mut m| {
                let _ = tx2.send(("data", m.read_u32()?));
                Ok(())
            })
            .build()
            .map_err(s)?;
        assert!(mesh.control_port().is_none());
        let other = mesh
            .members()
            .into_iter()
            .find(|n| *n != ibis.id())
            .unwrap();
        for lane in [Lane::Control, Lane::Data] {
            let link = mesh.link(&other, lane).map_err(s)?;
            let mut w = link.message();
            w.write_u32(ibis.id().rank());
            w.finish().map_err(s)?;
        }
        let mut got: Vec<_> = (0..2).map(|_| rx.recv_timeout(LIMIT).unwrap()).collect();
        got.sort();
        done.wait();
        mesh.close();
        Ok(got)
    });
    assert_eq!(got[0], vec![("control", 1), ("data", 1)]);
    assert_eq!(got[1], vec![("control", 0), ("data", 0)]);
}

#[test]
fn a_mesh_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Mesh>();
    shared::<ipl::Link>();
}

/// A member that removes another closes its connections to it, and the other's
/// `on_disconnect` hears of it on both lanes, naming the member, after the messages that member
/// sent before; a member that stays is not reported; a member that does not ask for
/// disconnections is a member like the others.
#[test]
fn a_member_that_removes_another_is_reported_to_it_on_both_lanes() {
    for driver in DRIVERS {
        run(driver, 3, move |ibis, done| {
            let me = ibis.id().rank();
            let (data_tx, data_rx) = crossbeam_channel::unbounded();
            let (gone_tx, gone_rx) = crossbeam_channel::unbounded();
            let gone_data = data_tx.clone();
            // An explicit port hears of a disconnection only inside a receive: both lanes are
            // read by handlers here, as satin reads them.
            let builder = Mesh::builder(&ibis, "d")
                .control_upcall(|mut m| m.read_u32().map(drop))
                .data_upcall(move |mut m| {
                    let _ = data_tx.send((m.origin().rank(), m.read_u32()?));
                    Ok(())
                });
            // Rank 0 does not ask: members that differ here still connect.
            let builder = if me == 0 {
                builder
            } else {
                builder.on_disconnect(move |from, why| {
                    // In the order of the data handler's arrivals: a marker on its channel.
                    let _ = gone_data.send((from.rank(), u32::MAX));
                    let _ = gone_tx.send((from.rank(), why.map(ToString::to_string)));
                })
            };
            let mesh = builder.build().map_err(s)?;
            mesh.connect_all().map_err(s)?;
            let members = mesh.members();
            for to in members.iter().filter(|n| **n != ibis.id()) {
                for lane in [Lane::Control, Lane::Data] {
                    let link = mesh.link(to, lane).map_err(s)?;
                    let mut w = link.message();
                    w.write_u32(me);
                    w.finish().map_err(s)?;
                }
            }
            if me == 2 {
                // Rank 2 gives up on rank 1, after one more data message to it.
                let link = mesh.link(&members[1], Lane::Data).map_err(s)?;
                let mut w = link.message();
                w.write_u32(7);
                w.finish().map_err(s)?;
                drop(link);
                assert!(mesh.remove(&members[1]));
            }
            let mut seen = Vec::new();
            if me == 1 {
                // Both lanes of rank 2 end, and nothing of rank 0.
                for _ in 0..2 {
                    let (from, why) = gone_rx.recv_timeout(LIMIT).map_err(s)?;
                    assert_eq!((from, why), (2, None), "{driver:?}");
                }
                // Rank 2's data messages came before its data lane ended (one of the two
                // markers; the other lane's may come first).
                let mut markers = 0;
                while markers < 2 {
                    let (from, v) = data_rx.recv_timeout(LIMIT).map_err(s)?;
                    seen.push((from, v));
                    markers += usize::from((from, v) == (2, u32::MAX));
                }
                assert!(
                    seen.contains(&(2, 2)) && seen.contains(&(2, 7)),
                    "{driver:?}: {seen:?}"
                );
            }
            // Before the barrier: past it, the others leave, and their connections end.
            assert!(
                gone_rx.try_iter().all(|(from, _)| from == 2 && me == 1),
                "rank {me} heard of a disconnection that did not happen"
            );
            done.wait();
            Ok(())
        });
    }
}
