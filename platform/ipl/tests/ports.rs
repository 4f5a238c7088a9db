//! Port semantics over both drivers: patterns, receive modes, upcalls, elections, errors.

mod common;

use common::{run_pool, run_pool_with, DRIVERS};
use ipl::{ByteOrder, Connection, Error, PortType, Receive};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn ty(c: Connection) -> PortType {
    PortType::builder().connection(c).build()
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Payload {
    name: String,
    values: Vec<i64>,
    nested: Option<Box<Payload>>,
}

#[test]
fn one_to_one_carries_every_kind_of_item() {
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = ty(Connection::OneToOne);
            let rp = ibis.receive_port(&t, "in")?;
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "in")?;
                // Each driver carries its own connections: threads of one process share a host.
                let want = match d {
                    ipl::Driver::Inproc => "inproc",
                    ipl::Driver::Shm => "shm",
                    _ => "tcp",
                };
                assert_eq!(sp.connection_drivers()[0].2, want);
                let big: Vec<f64> = (0..100_000).map(|i| i as f64 / 3.0).collect();
                let obj = Payload {
                    name: "tree".into(),
                    values: vec![-1, 2, -3],
                    nested: Some(Box::new(Payload {
                        name: "leaf".into(),
                        values: vec![],
                        nested: None,
                    })),
                };
                let mut w = sp.message();
                w.write_u32(7);
                w.write_f64(0.5);
                w.write_i8(-8);
                w.write_bool(true);
                w.write_slice(&big[..]);
                w.write(&obj)?;
                w.finish()?;
            } else {
                let mut r = rp.receive()?;
                assert_eq!(r.origin(), &all[0]);
                assert_eq!(r.read_u32()?, 7);
                assert_eq!(r.read_f64()?, 0.5);
                assert_eq!(r.read_i8()?, -8);
                assert!(r.read_bool()?);
                let mut big = vec![0f64; 100_000];
                r.read_slice_into(&mut big)?;
                assert!(big.iter().enumerate().all(|(i, v)| *v == i as f64 / 3.0));
                let p: Payload = r.read()?;
                assert_eq!(p.nested.unwrap().name, "leaf");
                assert_eq!(r.remaining(), 0);
                r.finish();
            }
            Ok(())
        });
    }
}

#[test]
fn byte_strings_and_slices_arrive_whole_small_or_large() {
    // Small items come from the connection's buffer at once, large ones as they arrive: both
    // paths of `read_bytes`, `read_bytes_to` and `read_slice`.
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = ty(Connection::OneToOne);
            let rp = ibis.receive_port(&t, "in")?;
            let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            let wide: Vec<u16> = (0..200_000u32).map(|i| (i % 65_521) as u16).collect();
            // Read into the vector that held `big`: shorter (overwritten in place) and longer
            // (in place, then grown).
            let shorter: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8 ^ 0x5a).collect();
            let longer: Vec<u8> = (0..450_000u32).map(|i| (i % 239) as u8).collect();
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "in")?;
                let mut w = sp.message();
                w.write_bytes(b"abc");
                w.write_bytes(&big);
                w.write_bytes(&shorter);
                w.write_bytes(&longer);
                w.write_slice(&[1i32, -2, 3][..]);
                w.write_slice(&wide[..]);
                w.write_bytes(b"");
                w.write_bytes(b"last");
                w.finish()?;
            } else {
                let mut r = rp.receive()?;
                let mut buf = Vec::new();
                r.read_bytes_to(&mut buf)?;
                assert_eq!(buf, b"abc");
                r.read_bytes_to(&mut buf)?;
                assert!(buf == big, "the large byte string differs");
                r.read_bytes_to(&mut buf)?;
                assert!(
                    buf == shorter,
                    "a shorter byte string read over a longer one differs"
                );
                r.read_bytes_to(&mut buf)?;
                assert!(
                    buf == longer,
                    "a longer byte string read over a shorter one differs"
                );
                assert_eq!(r.read_slice::<i32>()?, [1, -2, 3]);
                assert!(r.read_slice::<u16>()? == wide, "the large slice differs");
                assert_eq!(r.read_bytes()?, b"");
                r.read_bytes_to(&mut buf)?;
                assert_eq!(buf, b"last");
                assert_eq!(r.remaining(), 0);
                r.finish();
            }
            Ok(())
        });
    }
}

#[test]
fn shared_buffers_arrive_as_byte_strings_and_stay_the_senders() {
    // A shared buffer is sent from where it is by the drivers that can (the inproc pipe's
    // chunks are slices of it); it reads as write_bytes of the same bytes would, and the
    // sender's buffer is unchanged and still its own afterwards.
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = ty(Connection::OneToOne);
            let rp = ibis.receive_port(&t, "in")?;
            let big: Vec<u8> = (0..700_001u32).map(|i| (i % 253) as u8).collect();
            let shared = ipl::Bytes::from(big.clone());
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "in")?;
                for round in 0..3u32 {
                    let mut w = sp.message();
                    w.write_u32(round);
                    w.write_shared_bytes(shared.slice(1..));
                    w.write_shared_bytes(ipl::Bytes::from_static(b"tiny"));
                    w.write_bytes(b"after");
                    w.write_shared_bytes(shared.clone());
                    w.finish()?;
                }
                assert!(shared[..] == big[..], "the sender's buffer changed");
            } else {
                for round in 0..3u32 {
                    let mut r = rp.receive()?;
                    assert_eq!(r.read_u32()?, round);
                    assert!(r.read_bytes()? == big[1..], "a shared slice differs");
                    assert_eq!(r.read_bytes()?, b"tiny");
                    assert_eq!(r.read_bytes()?, b"after");
                    let mut buf = vec![0u8; big.len()];
                    r.read_bytes_into(&mut buf)?;
                    assert!(buf == big, "a shared buffer differs");
                    assert_eq!(r.remaining(), 0);
                    r.finish();
                }
            }
            Ok(())
        });
    }
}

#[test]
fn multicast_reaches_three_receivers() {
    for d in DRIVERS {
        let got = run_pool(d, 4, |ibis, all| {
            let t = ty(Connection::OneToMany);
            let rp = ibis.receive_port(&t, "mc")?;
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                for n in &all[1..] {
                    sp.connect(n, "mc")?;
                }
                let data: Vec<i32> = (0..50_000).collect();
                for round in 0..10u32 {
                    let mut w = sp.message();
                    w.write_u32(round);
                    w.write_slice(&data[..]);
                    w.finish()?;
                }
                Ok(0)
            } else {
                let mut sum = 0u64;
                for round in 0..10u32 {
                    let mut r = rp.receive()?;
                    assert_eq!(r.read_u32()?, round);
                    let v: Vec<i32> = r.read_slice()?;
                    assert_eq!(v.len(), 50_000);
                    sum += v.iter().map(|x| *x as u64).sum::<u64>();
                }
                Ok(sum)
            }
        });
        let expect = 10 * (0..50_000u64).sum::<u64>();
        assert_eq!(got, vec![0, expect, expect, expect], "{d:?}");
    }
}

#[test]
fn many_to_one_keeps_order_per_sender() {
    for d in DRIVERS {
        run_pool(d, 4, |ibis, all| {
            let t = ty(Connection::ManyToOne);
            if ibis.id().rank() == 0 {
                let rp = ibis.receive_port(&t, "sink")?;
                let mut next: HashMap<u32, u32> = HashMap::new();
                for _ in 0..3 * 200 {
                    let mut r = rp.receive()?;
                    let from = r.read_u32()?;
                    let seq = r.read_u32()?;
                    assert_eq!(r.origin().rank(), from);
                    let e = next.entry(from).or_default();
                    assert_eq!(seq, *e, "out of order from {from}");
                    *e += 1;
                }
                assert_eq!(next.len(), 3);
            } else {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[0], "sink")?;
                for seq in 0..200 {
                    let mut w = sp.message();
                    w.write_u32(ibis.id().rank());
                    w.write_u32(seq);
                    w.finish()?;
                }
            }
            Ok(())
        });
    }
}

#[test]
fn upcalls_run_one_at_a_time_in_order_per_connection() {
    for d in DRIVERS {
        run_pool(d, 4, |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .receive(Receive::Upcall)
                .build();
            if ibis.id().rank() == 0 {
                let busy = Arc::new(AtomicBool::new(false));
                let overlaps = Arc::new(AtomicUsize::new(0));
                let (tx, rx) = crossbeam_channel::unbounded();
                let mut next: HashMap<u32, u32> = HashMap::new();
                let (b, o) = (busy.clone(), overlaps.clone());
                let _rp = ibis.receive_port_with_upcall(&t, "up", move |mut m| {
                    if b.swap(true, Ordering::SeqCst) {
                        o.fetch_add(1, Ordering::SeqCst);
                    }
                    let from = m.origin().rank();
                    let seq = m.read_u32()?;
                    let e = next.entry(from).or_default();
                    let in_order = seq == *e;
                    *e += 1;
                    std::thread::yield_now();
                    b.store(false, Ordering::SeqCst);
                    let _ = tx.send(in_order);
                    Ok(())
                })?;
                for _ in 0..150 {
                    let ok = rx.recv_timeout(Duration::from_secs(30)).expect("upcall");
                    assert!(ok, "message out of order");
                }
                assert_eq!(overlaps.load(Ordering::SeqCst), 0);
            } else {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[0], "up")?;
                for seq in 0..50 {
                    let mut w = sp.message();
                    w.write_u32(seq);
                    w.finish()?;
                }
            }
            Ok(())
        });
    }
}

#[test]
fn receive_timeout_and_poll() {
    for d in DRIVERS {
        run_pool(d, 2, |ibis, all| {
            let t = ty(Connection::OneToOne);
            let rp = ibis.receive_port(&t, "p")?;
            let gate = ibis.receive_port(&t, "gate")?;
            let peer = &all[1 - ibis.id().rank() as usize];
            let sp = ibis.send_port(&t)?;
            if ibis.id().rank() == 1 {
                assert!(rp.poll()?.is_none());
                let started = std::time::Instant::now();
                match rp.receive_timeout(Duration::from_millis(100)) {
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => panic!("wrong error {e}"),
                    Ok(_) => panic!("nothing was sent"),
                }
                assert!(started.elapsed() >= Duration::from_millis(100));
                // Tell the peer to send now.
                sp.connect(peer, "gate")?;
                let mut w = sp.message();
                w.write_u8(1);
                w.finish()?;
                let mut m = loop {
                    if let Some(m) = rp.poll()? {
                        break m;
                    }
                    std::thread::yield_now();
                };
                assert_eq!(m.read_u64()?, 42);
                drop(m);
                // A timeout beyond what the clock can count waits, rather than failing.
                let mut w = sp.message();
                w.write_u8(2);
                w.finish()?;
                assert_eq!(rp.receive_timeout(Duration::MAX)?.read_u64()?, 43);
            } else {
                gate.receive()?.finish();
                sp.connect(peer, "p")?;
                let mut w = sp.message();
                w.write_u64(42);
                w.finish()?;
                gate.receive()?.finish();
                let mut w = sp.message();
                w.write_u64(43);
                w.finish()?;
            }
            Ok(())
        });
    }
}

#[test]
fn elections_and_closed_pools_agree_everywhere() {
    for d in DRIVERS {
        let views = run_pool(d, 4, |ibis, all| {
            let a = ibis.pool().elect("master")?;
            let b = ibis.pool().elect("other")?;
            assert_eq!(all.len(), 4);
            assert!(all.windows(2).all(|w| w[0].rank() < w[1].rank()));
            assert!(all.contains(&ibis.id()));
            Ok((a, b, all))
        });
        for v in &views {
            assert_eq!(v, &views[0]);
        }
    }
}

/// A pool holding the most elections a registry keeps gets a prompt refusal for one more name,
/// never a wait for the request timeout, while the names it holds still answer.
#[test]
fn an_election_past_the_pools_limit_is_refused() {
    for d in DRIVERS {
        run_pool(d, 1, |ibis, _| {
            let pool = ibis.pool();
            for i in 0..ipl::registry::MAX_ELECTIONS {
                pool.elect(&format!("e{i}"))?;
            }
            let started = std::time::Instant::now();
            let e = pool.elect("one more").unwrap_err();
            assert!(matches!(e, Error::Registry(_)), "{e}");
            assert!(e.to_string().contains("one more"), "{e}");
            assert!(started.elapsed() < Duration::from_secs(5), "{e}");
            assert_eq!(pool.elect("e7")?, ibis.id());
            let long = "x".repeat(ipl::registry::MAX_ELECTION_NAME + 1);
            assert!(matches!(pool.elect(&long), Err(Error::Config { .. })));
            Ok(())
        });
    }
}

#[test]
fn type_mismatch_and_unknown_port_are_named() {
    for d in DRIVERS {
        run_pool_with(
            d,
            2,
            |mut c| {
                c.connect_timeout = Duration::from_millis(500);
                c
            },
            |ibis, all| {
                let here = ty(Connection::ManyToOne);
                let _rp = ibis.receive_port(&here, "typed")?;
                let peer = &all[1 - ibis.id().rank() as usize];
                let sp = ibis.send_port(&ty(Connection::OneToOne))?;
                let e = sp.connect(peer, "typed").unwrap_err();
                let s = e.to_string();
                assert!(matches!(e, Error::TypeMismatch { .. }), "{s}");
                assert!(
                    s.contains("OneToOne") && s.contains("ManyToOne") && s.contains("typed"),
                    "{s}"
                );
                let sp = ibis.send_port(&here)?;
                let e = sp.connect(peer, "missing").unwrap_err();
                let s = e.to_string();
                assert!(matches!(e, Error::UnknownPort { .. }), "{s}");
                assert!(
                    s.contains("missing") && s.contains(&format!("node{}", peer.rank())),
                    "{s}"
                );
                Ok(())
            },
        );
    }
}

#[test]
fn a_name_no_receive_port_can_have_is_refused_at_once() {
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = ty(Connection::ManyToOne);
            let peer = &all[1 - ibis.id().rank() as usize];
            let sp = ibis.send_port(&t)?;
            let long = "n".repeat(1 << 20);
            for name in ["", &"n".repeat(ipl::MAX_PORT_NAME + 1), &long] {
                // Retried until the connect timeout (20 s here) as a port not made yet, or as
                // a connection cut short where the name overflowed the setup frame.
                let started = std::time::Instant::now();
                let e = sp.connect(peer, name).unwrap_err();
                let s = e.to_string();
                assert!(matches!(e, Error::Config { .. }), "{d:?}: {s:.200}");
                assert!(s.contains("port name") && s.len() < 200, "{d:?}: {s:.200}");
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "{d:?}: {:?}",
                    started.elapsed()
                );
            }
            assert!(ibis.receive_port(&t, "").is_err());
            assert!(ibis.receive_port(&t, &long).is_err());
            Ok(())
        });
    }
}

#[test]
fn patterns_refuse_extra_connections_and_upcalls_can_refuse() {
    for d in DRIVERS {
        let ports_up = Arc::new(std::sync::Barrier::new(3));
        let tried = Arc::new(std::sync::Barrier::new(3));
        run_pool(d, 3, move |ibis, all| {
            let one = PortType::builder()
                .connection(Connection::OneToOne)
                .connection_upcalls(true)
                .build();
            let _rp = ibis
                .receive_port_builder(&one, "solo")
                .on_connect(|from| {
                    if from.rank() == 2 {
                        Err("rank 2 is not welcome".into())
                    } else {
                        Ok(())
                    }
                })
                .create()?;
            ports_up.wait();
            if ibis.id().rank() == 1 {
                let sp = ibis.send_port(&one)?;
                sp.connect(&all[0], "solo")?;
                let e = sp.connect(&all[2], "solo").unwrap_err();
                assert!(matches!(e, Error::NotAllowed { .. }), "{e}");
            }
            if ibis.id().rank() == 2 {
                let sp = ibis.send_port(&one)?;
                let e = sp.connect(&all[1], "solo").unwrap_err();
                assert!(e.to_string().contains("not welcome"), "{e}");
            }
            tried.wait();
            Ok(())
        });
    }
}

#[test]
fn forced_byte_order_is_swapped_by_the_receiver() {
    for d in DRIVERS {
        run_pool_with(
            d,
            2,
            |mut c| {
                if c.rank == Some(0) {
                    c.byte_order = if cfg!(target_endian = "little") {
                        ByteOrder::Big
                    } else {
                        ByteOrder::Little
                    };
                }
                c
            },
            |ibis, all| {
                let t = ty(Connection::OneToOne);
                let rp = ibis.receive_port(&t, "bo")?;
                if ibis.id().rank() == 0 {
                    let sp = ibis.send_port(&t)?;
                    sp.connect(&all[1], "bo")?;
                    let v: Vec<f64> = (0..10_000).map(|i| i as f64 * 1.25).collect();
                    let mut w = sp.message();
                    w.write_u64(0x0102_0304_0506_0708);
                    w.write_slice(&v[..]);
                    w.write(&vec![(1u16, -2i32, 3.5f32)])?;
                    w.finish()?;
                } else {
                    let mut r = rp.receive()?;
                    assert!(r.is_swapped());
                    assert_eq!(r.read_u64()?, 0x0102_0304_0506_0708);
                    let v: Vec<f64> = r.read_slice()?;
                    assert!(v.iter().enumerate().all(|(i, x)| *x == i as f64 * 1.25));
                    let o: Vec<(u16, i32, f32)> = r.read()?;
                    assert_eq!(o, vec![(1, -2, 3.5)]);
                }
                Ok(())
            },
        );
    }
}

#[test]
fn disconnect_is_observed_by_the_receiver() {
    for d in DRIVERS {
        run_pool(d, 2, |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .connection_upcalls(true)
                .build();
            let (tx, rx) = crossbeam_channel::unbounded();
            let rp = ibis
                .receive_port_builder(&t, "obs")
                .on_disconnect(move |n, err| {
                    let _ = tx.send((n.rank(), err.is_none()));
                })
                .create()?;
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "obs")?;
                let mut w = sp.message();
                w.write_u8(9);
                w.finish()?;
                sp.disconnect(&all[1], "obs")?;
            } else {
                assert_eq!(rp.receive()?.read_u8()?, 9);
                // The close frame is seen by the next receive.
                assert!(rp.receive_timeout(Duration::from_millis(300)).is_err());
                assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), (0, true));
            }
            Ok(())
        });
    }
}

#[test]
fn a_new_winner_is_elected_when_the_winner_leaves() {
    for d in DRIVERS {
        let net = common::Net::new(d, 2);
        let join = |rank| {
            let mut c = net.config();
            c.rank = Some(rank);
            ipl::Ibis::join(c).unwrap()
        };
        let (a, b) = std::thread::scope(|s| {
            let h = s.spawn(|| join(1));
            (join(0), h.join().unwrap())
        });
        a.pool().wait_closed().unwrap();
        b.pool().wait_closed().unwrap();
        assert_eq!(b.pool().election("leader").unwrap(), None);
        let first = a.pool().elect("leader").unwrap();
        assert_eq!(b.pool().election("leader").unwrap(), Some(a.id()));
        assert_eq!(first, a.id());
        assert_eq!(b.pool().elect("leader").unwrap(), a.id());
        let events = b.pool().subscribe();
        let gone = a.id();
        a.end().unwrap();
        loop {
            match events
                .recv_timeout(Duration::from_secs(15))
                .expect("leave noticed")
            {
                ipl::PoolEvent::Left(n) if n == gone => break,
                _ => continue,
            }
        }
        assert_eq!(b.pool().election("leader").unwrap(), None, "{d:?}");
        assert_eq!(b.pool().elect("leader").unwrap(), b.id(), "{d:?}");
    }
}

#[test]
fn a_message_over_either_limit_fails_its_send_naming_the_limit() {
    for d in DRIVERS {
        // Rank 1 receives with a limit of 100 bytes; rank 2 sends with its own limit of 100.
        run_pool_with(
            d,
            3,
            |mut c| {
                if c.rank != Some(0) {
                    c.max_message = 100;
                }
                c
            },
            |ibis, all| {
                let t = ty(Connection::ManyToOne);
                let rp = ibis.receive_port(&t, "in")?;
                let big = [7u8; 870];
                let me = ibis.id().rank();
                if me != 1 {
                    let sp = ibis.send_port(&t)?;
                    sp.connect(&all[1], "in")?;
                    let mut w = sp.message();
                    w.write_bytes(&big);
                    let e = w.finish().expect_err("879 bytes exceed a limit of 100");
                    let text = e.to_string();
                    assert!(matches!(
                        e,
                        Error::MessageTooLarge {
                            len: 879,
                            limit: 100,
                            ..
                        }
                    ));
                    assert!(text.contains("limit of 100 bytes"), "{text}");
                    assert!(text.contains("IPL_MAX_MESSAGE"), "{text}");
                    let whose = if me == 0 {
                        "receive port 'in' on"
                    } else {
                        "this node"
                    };
                    assert!(text.contains(whose), "{text}");
                    // Nothing was sent: the connection carries the next message unharmed.
                    let mut w = sp.message();
                    w.write_u32(me);
                    w.finish()?;
                } else {
                    let mut from = Vec::new();
                    for _ in 0..2 {
                        let mut m = rp.receive_timeout(Duration::from_secs(20))?;
                        from.push(m.read_u32()?);
                        assert_eq!(m.remaining(), 0);
                    }
                    from.sort();
                    assert_eq!(from, [0, 2]);
                }
                Ok(())
            },
        );
    }
}

#[test]
fn a_connection_upcall_that_panics_refuses_that_connection_and_the_node_accepts_others() {
    for d in DRIVERS {
        let ports_up = Arc::new(std::sync::Barrier::new(2));
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .connection_upcalls(true)
                .build();
            let _picky = ibis
                .receive_port_builder(&t, "picky")
                .on_connect(|from| panic!("no one from {from}"))
                .create()?;
            let plain = ibis.receive_port(&t, "plain")?;
            ports_up.wait();
            if ibis.id().rank() == 0 {
                let sp = ibis.send_port(&t)?;
                let e = sp.connect(&all[1], "picky").unwrap_err();
                assert!(matches!(e, Error::Refused { .. }), "{d:?}: {e}");
                assert!(
                    e.to_string().contains("panicked: no one from"),
                    "{d:?}: {e}"
                );
                // The panic took nothing else with it: the node still accepts connections.
                sp.connect(&all[1], "plain")?;
                let mut w = sp.message();
                w.write_u32(5);
                w.finish()?;
            } else {
                let mut m = plain.receive_timeout(Duration::from_secs(30))?;
                assert_eq!(m.read_u32()?, 5);
            }
            Ok(())
        });
    }
}

#[test]
fn a_message_upcall_that_panics_is_a_failed_upcall_and_the_next_message_is_delivered() {
    for d in DRIVERS {
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::OneToOne)
                .receive(Receive::Upcall)
                .build();
            if ibis.id().rank() == 1 {
                let (tx, rx) = crossbeam_channel::unbounded();
                let _rp = ibis.receive_port_with_upcall(&t, "up", move |mut m| {
                    let v = m.read_u32()?;
                    assert_ne!(v, 0, "the first message makes the handler panic");
                    let _ = tx.send(v);
                    Ok(())
                })?;
                let got = rx.recv_timeout(Duration::from_secs(30));
                assert_eq!(got, Ok(1), "{d:?}: the message after the panic");
            } else {
                let sp = ibis.send_port(&t)?;
                sp.connect(&all[1], "up")?;
                for v in [0, 1] {
                    let mut w = sp.message();
                    w.write_u32(v);
                    w.finish()?;
                }
            }
            Ok(())
        });
    }
}

#[test]
fn a_connection_upcall_may_ask_its_own_port_who_is_connected() {
    for d in DRIVERS {
        let ports_up = Arc::new(std::sync::Barrier::new(2));
        run_pool(d, 2, move |ibis, all| {
            let t = PortType::builder()
                .connection(Connection::ManyToOne)
                .connection_upcalls(true)
                .build();
            // A port that takes one sender at a time, asking itself how many it has.
            let me = Arc::new(std::sync::OnceLock::<ipl::ReceivePort>::new());
            let seen = me.clone();
            let rp = ibis
                .receive_port_builder(&t, "one-at-a-time")
                .on_connect(
                    move |_| match seen.get().map_or(0, |rp| rp.connected().len()) {
                        0 => Ok(()),
                        n => Err(format!("{n} sender already")),
                    },
                )
                .create()?;
            assert!(me.set(rp).is_ok());
            ports_up.wait();
            if ibis.id().rank() == 0 {
                let first = ibis.send_port(&t)?;
                first.connect(&all[1], "one-at-a-time")?;
                let second = ibis.send_port(&t)?;
                let e = second.connect(&all[1], "one-at-a-time").unwrap_err();
                assert!(e.to_string().contains("1 sender already"), "{d:?}: {e}");
            }
            ports_up.wait();
            Ok(())
        });
    }
}
