//! Packets and supersteps, on threads over the in-process driver and over tcp.

mod common;

use bsp::{Error, Options};
use common::{run, try_run, try_run_each, Net, NETS};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Numbered {
    src: usize,
    dest: usize,
    step: u64,
    seq: u32,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Body {
    pos: [f64; 3],
    mass: f64,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
enum Cell {
    Leaf(u32),
    Mass { centre: [f64; 3], total: f64 },
}

/// How many packets `src` sends `dest` in superstep `step`: differs per pair and step, and is
/// zero for some pairs, so that sparse supersteps are exercised too.
fn count(src: usize, dest: usize, step: u64) -> u32 {
    let c = (src * 7 + dest * 3 + step as usize * 5) % 11;
    if c == 10 {
        0
    } else {
        c as u32 * 9 + 1
    }
}

#[test]
fn the_checking_program_passes_on_threads_over_both_drivers() {
    for (net, p) in [
        (Net::Local, 1),
        (Net::Local, 2),
        (Net::Local, 4),
        (Net::Tcp, 3),
        (Net::Shm, 3),
    ] {
        run(net, p, common::program::program);
    }
}

#[test]
fn packets_arrive_exactly_once_and_in_order_per_source() {
    for (net, p) in [
        (Net::Local, 4),
        (Net::Local, 3),
        (Net::Tcp, 3),
        (Net::Shm, 3),
    ] {
        run(net, p, move |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            for step in 0..4u64 {
                let before = bsp.stats().clone();
                let mut dests = 0;
                for dest in 0..p {
                    let n = count(me, dest, step);
                    if n > 0 && dest != me {
                        dests += 1;
                    }
                    for seq in 0..n {
                        bsp.send(
                            dest,
                            &Numbered {
                                src: me,
                                dest,
                                step,
                                seq,
                            },
                        )?;
                    }
                }
                bsp.sync()?;
                // Combining: one message per destination with packets, none to itself.
                assert_eq!(bsp.stats().data_messages - before.data_messages, dests);
                let mut next = vec![0u32; p];
                let mut last_src = 0;
                while let Some((src, pkt)) = bsp.recv::<Numbered>()? {
                    assert!(
                        src >= last_src,
                        "sources out of order: {src} after {last_src}"
                    );
                    last_src = src;
                    assert_eq!(pkt.src, src);
                    assert_eq!(pkt.dest, me);
                    assert_eq!(pkt.step, step);
                    assert_eq!(pkt.seq, next[src], "from {src}");
                    next[src] += 1;
                }
                for (src, n) in next.iter().enumerate() {
                    assert_eq!(
                        *n,
                        count(src, me, step),
                        "packets from {src} in step {step}"
                    );
                }
                assert_eq!(bsp.recv::<Numbered>()?, None);
            }
            Ok(())
        });
    }
}

fn big_of(pid: usize) -> Vec<f64> {
    (0..5000).map(|i| i as f64 + pid as f64 / 8.0).collect()
}

#[test]
fn supersteps_mix_packet_types_and_slices() {
    for net in NETS {
        run(net, 3, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            let big = big_of(me);
            for dest in 0..p {
                bsp.send(
                    dest,
                    &Body {
                        pos: [me as f64; 3],
                        mass: 1.0,
                    },
                )?;
                bsp.send(dest, &Cell::Leaf(me as u32))?;
                bsp.send_slice(dest, &[me as i32, -1, 2])?;
                bsp.send_vec(dest, big.clone())?;
                bsp.send(
                    dest,
                    &Cell::Mass {
                        centre: [0.5; 3],
                        total: dest as f64,
                    },
                )?;
                bsp.send(dest, "a str is read as a String")?;
                bsp.send(dest, &[1u16, 2, 3][..])?;
                bsp.send_slice(dest, &big[..10])?;
            }
            bsp.sync()?;
            for src in 0..p {
                // The wrong type is an error naming both types, and the packet stays unread.
                let e = bsp.recv::<Cell>().unwrap_err();
                let text = e.to_string();
                assert!(
                    matches!(e, Error::TypeMismatch { src: s, .. } if s == src),
                    "{text}"
                );
                assert!(text.contains("Body") && text.contains("Cell"), "{text}");
                let peek = bsp.peek()?.expect("a packet");
                assert_eq!(peek.src, src);
                assert!(
                    !peek.is_slice && peek.type_name.ends_with("Body"),
                    "{peek:?}"
                );
                assert!(bsp.next_is::<Body>()?);
                let (s, b) = bsp.recv::<Body>()?.unwrap();
                assert_eq!((s, b.pos[0]), (src, src as f64));
                assert_eq!(bsp.recv::<Cell>()?, Some((src, Cell::Leaf(src as u32))));
                assert!(bsp.recv::<i32>().is_err());
                assert!(bsp.recv_slice::<u32>().is_err());
                assert_eq!(
                    bsp.recv_slice::<i32>()?,
                    Some((src, vec![src as i32, -1, 2]))
                );
                assert_eq!(bsp.recv_slice::<f64>()?, Some((src, big_of(src))));
                assert_eq!(
                    bsp.recv::<Cell>()?,
                    Some((
                        src,
                        Cell::Mass {
                            centre: [0.5; 3],
                            total: me as f64
                        }
                    ))
                );
                assert!(bsp.next_is::<String>()?);
                assert!(bsp.recv::<Vec<u8>>().is_err());
                let (_, text) = bsp.recv::<String>()?.unwrap();
                assert_eq!(text, "a str is read as a String");
                assert_eq!(bsp.recv::<Vec<u16>>()?, Some((src, vec![1, 2, 3])));
                assert_eq!(
                    bsp.recv_slice::<f64>()?,
                    Some((src, big_of(src)[..10].to_vec()))
                );
            }
            Ok(())
        });
    }
}

#[test]
fn empty_supersteps_cost_log_p_round_messages_and_nothing_else() {
    for (net, p, rounds) in [
        (Net::Local, 4, 2),
        (Net::Local, 8, 3),
        (Net::Tcp, 2, 1),
        (Net::Shm, 2, 1),
    ] {
        let stats = run(net, p, move |bsp| {
            for s in 0..25 {
                assert_eq!(bsp.superstep(), s);
                assert_eq!(bsp.recv::<u64>()?, None);
                bsp.sync()?;
            }
            Ok(bsp.stats().clone())
        });
        for (pid, s) in stats.iter().enumerate() {
            assert_eq!(s.supersteps, 25);
            assert_eq!(s.data_messages, 0);
            // A pool of processes looks for a host board at its first sync, with messages: a
            // name (empty over tcp) to every process, an answer back, and the verdict. The
            // local form, threads of one process, does not.
            let setup = match (net, pid) {
                (Net::Local, _) => 0,
                (_, 0) => 2 * (p as u64 - 1),
                _ => 1,
            };
            if net == Net::Shm {
                // Processes of one host then sync on the board.
                assert_eq!(s.board_operations, 25, "{p} processes over shm");
                assert_eq!(s.round_messages, setup, "{p} processes over shm");
            } else {
                assert_eq!(s.board_operations, 0);
                assert_eq!(
                    s.round_messages,
                    25 * rounds + setup,
                    "{p} processes over {net:?}"
                );
            }
        }
    }
    // Not a power of two: the extra processes fold in and get the result back.
    let stats = run(Net::Local, 3, |bsp| {
        bsp.sync()?;
        Ok(bsp.stats().round_messages)
    });
    assert_eq!(stats, vec![1, 2, 1]);
}

#[test]
fn a_hundred_thousand_small_packets_in_one_superstep() {
    for net in NETS {
        run(net, 2, |bsp| {
            let other = 1 - bsp.pid();
            for i in 0..100_000u32 {
                bsp.send(other, &(i, i as f32))?;
            }
            bsp.send(bsp.pid(), &(7u32, 7.0f32))?;
            bsp.sync()?;
            assert_eq!(bsp.stats().data_messages, 1, "combined into one message");
            assert_eq!(bsp.unread(), 100_001);
            let mut expect = 0u32;
            let mut own = 0;
            while let Some((src, (i, f))) = bsp.recv::<(u32, f32)>()? {
                if src == bsp.pid() {
                    own += 1;
                    continue;
                }
                assert_eq!((i, f), (expect, expect as f32));
                expect += 1;
            }
            assert_eq!((expect, own), (100_000, 1));
            Ok(())
        });
    }
}

#[test]
fn the_memory_budget_sends_early_without_changing_what_is_read() {
    let opts = Options {
        memory_budget: 64 << 10,
        ..common::opts()
    };
    for net in NETS {
        let flushes = try_run(net, 3, opts.clone(), |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            for step in 0..2u64 {
                for seq in 0..20_000u32 {
                    for dest in 0..p {
                        bsp.send(
                            dest,
                            &Numbered {
                                src: me,
                                dest,
                                step,
                                seq,
                            },
                        )?;
                    }
                }
                bsp.send_vec((me + 1) % p, vec![step; 100_000])?;
                bsp.sync()?;
                let mut next = vec![0u32; p];
                let mut slices = 0;
                for _ in 0..p * 20_000 + 1 {
                    if bsp.next_is::<Numbered>()? {
                        let (src, pkt) = bsp.recv::<Numbered>()?.unwrap();
                        assert_eq!((pkt.seq, pkt.step, pkt.dest), (next[src], step, me));
                        next[src] += 1;
                    } else {
                        let (src, v) = bsp.recv_slice::<u64>()?.unwrap();
                        assert_eq!(src, (me + p - 1) % p);
                        assert_eq!(v, vec![step; 100_000]);
                        slices += 1;
                    }
                }
                assert_eq!(next, vec![20_000; p]);
                assert_eq!(slices, 1);
                assert_eq!(bsp.peek()?, None);
            }
            Ok(bsp.stats().early_flushes)
        })
        .unwrap();
        assert!(flushes.iter().all(|f| *f > 10), "{flushes:?}");
    }
}

#[test]
fn large_transfers_both_ways_do_not_block_each_other() {
    // Well over what socket buffers (and shared-memory rings) hold, sent by both sides at once.
    for net in [Net::Tcp, Net::Shm] {
        run(net, 2, |bsp| {
            let other = 1 - bsp.pid();
            let v: Vec<f64> = (0..3_000_000).map(|i| i as f64).collect();
            bsp.send_vec(other, v)?;
            bsp.send_slice(other, &[1.0f64; 100_000])?;
            bsp.sync()?;
            let (_, got) = bsp.recv_slice::<f64>()?.unwrap();
            assert_eq!(got.len(), 3_000_000);
            assert_eq!(got[2_999_999], 2_999_999.0);
            assert_eq!(bsp.recv_slice::<f64>()?.unwrap().1.len(), 100_000);
            Ok(())
        });
    }
}

#[test]
fn superstep_data_up_to_256_kib_goes_on_the_control_connection_over_shared_memory_only() {
    // 100 KB to every other process, above the 16 KiB of a small message: over shared memory,
    // which holds its ring and 4 MiB for a receiver that does not read, it goes on the control
    // connection, read by the waiting thread; over tcp, which promises nothing, on the data
    // connection. Either way every process gets exactly what was sent.
    for (net, p) in [(Net::Shm, 2), (Net::Shm, 3), (Net::Tcp, 2)] {
        let on_data = run(net, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            for step in 0..4u64 {
                for d in (0..p).filter(|&d| d != me) {
                    let v: Vec<u64> = (0..12_500).map(|i| i * 31 + step * 7 + me as u64).collect();
                    bsp.send_slice(d, &v)?;
                }
                bsp.sync()?;
                let mut from = Vec::new();
                while let Some((src, got)) = bsp.recv_slice::<u64>()? {
                    let want: Vec<u64> = (0..12_500)
                        .map(|i| i * 31 + step * 7 + src as u64)
                        .collect();
                    assert_eq!(got, want, "step {step}, from pid {src}");
                    from.push(src);
                }
                from.sort_unstable();
                assert_eq!(from, (0..p).filter(|&s| s != me).collect::<Vec<_>>());
            }
            Ok(bsp.stats().data_on_data_connection)
        });
        match net {
            Net::Shm => assert_eq!(on_data, vec![0; p], "{net:?} at P = {p}"),
            _ => assert!(on_data.iter().all(|&n| n >= 4), "{net:?}: {on_data:?}"),
        }
    }
}

#[test]
fn the_receiver_swaps_numbers_written_in_the_other_byte_order() {
    // Odd ranks write their port-library items big-endian; slices must still read right.
    let pool = format!("bsp-swap-{}", std::process::id());
    let threads: Vec<_> = (0..2u32)
        .map(|rank| {
            let pool = pool.clone();
            std::thread::spawn(move || -> bsp::Result<()> {
                let mut cfg = ipl::Config::inproc(pool, 2);
                cfg.rank = Some(rank);
                if rank == 1 {
                    cfg.byte_order = ipl::ByteOrder::Big;
                }
                let ibis = ipl::Ibis::join(cfg).unwrap();
                let mut bsp = bsp::Bsp::with_options(ibis, common::opts())?;
                let other = 1 - bsp.pid();
                bsp.send_vec(other, (0..2000u64).collect())?;
                bsp.send(
                    other,
                    &Body {
                        pos: [0.25; 3],
                        mass: 2.0,
                    },
                )?;
                bsp.sync()?;
                assert_eq!(
                    bsp.recv_slice::<u64>()?.unwrap().1,
                    (0..2000).collect::<Vec<_>>()
                );
                assert_eq!(bsp.recv::<Body>()?.unwrap().1.mass, 2.0);
                let s = bsp.all_reduce(bsp.pid() as u64 + 1, bsp::Op::Sum)?;
                assert_eq!(s, 3);
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
}

#[test]
fn bad_pids_and_failures_are_errors_that_say_what_failed() {
    let r = try_run(Net::Local, 2, common::opts(), |bsp| {
        let e = bsp.send(5, &1u8).unwrap_err().to_string();
        assert!(e.contains("pid 5") && e.contains("2 processes"), "{e}");
        assert!(bsp.broadcast::<u8>(3, None).is_err());
        Ok(())
    });
    r.unwrap();
    // One process leaves early: the other's sync fails naming it, instead of hanging.
    let opts = Options {
        departure_grace: std::time::Duration::from_millis(200),
        ..common::opts()
    };
    let leave_early = |bsp: &mut bsp::Bsp| {
        if bsp.pid() == 2 {
            return Ok(());
        }
        bsp.sync()?;
        Ok(())
    };
    let e = try_run(Net::Local, 3, opts.clone(), leave_early).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PeerGone {
                peer: 2,
                died: false,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("process 2"), "{e}");
    // Over a pool each process reports what it saw: the first to notice names process 2, and
    // the other may see that one leave first (it leaves as its sync fails).
    for net in [Net::Tcp, Net::Shm] {
        let each = try_run_each(net, 3, opts.clone(), leave_early);
        assert!(each[2].is_ok(), "{net:?}: {:?}", each[2]);
        for (pid, r) in each[..2].iter().enumerate() {
            match r {
                Err(Error::PeerGone {
                    peer, died: false, ..
                }) if *peer == 2 || *peer == 1 - pid => {}
                other => panic!("{net:?}: process {pid}: {other:?}"),
            }
        }
        assert!(
            each[..2].iter().any(|r| matches!(
                r,
                Err(e @ Error::PeerGone { peer: 2, .. }) if e.to_string().contains("process 2")
            )),
            "{net:?}: neither process names process 2: {each:?}"
        );
    }
    // A panic is reported as such, not as the departures it causes.
    let e = try_run(Net::Local, 3, common::opts(), |bsp| {
        if bsp.pid() == 1 {
            panic!("boom in process one");
        }
        bsp.sync()?;
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(&e, Error::Panicked { pid: 1, message } if message.contains("boom")),
        "{e}"
    );
}
