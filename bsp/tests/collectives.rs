//! Every collective against a sequential computation, for power-of-two and other process
//! counts, over the in-process driver, tcp and shm (where the host board carries what it can:
//! large inputs read from each other's memory, or through its bulk halves).

mod common;

use bsp::{Error, Op, Options};
use common::{run, try_run, Net};

/// Each process's input: deterministic, different per pid, not exactly summable in floating
/// point (so that the reduction order shows in the result).
fn input(pid: usize) -> f64 {
    0.1 * (pid as f64 + 1.0) + 1e-17 * pid as f64
}

const SHAPES: [(Net, usize); 8] = [
    (Net::Local, 1),
    (Net::Local, 2),
    (Net::Local, 3),
    (Net::Local, 5),
    (Net::Local, 8),
    (Net::Tcp, 3),
    (Net::Shm, 3),
    (Net::ShmTwoCopies, 3),
];

#[test]
fn all_reduce_matches_a_sequential_reduction_and_is_bit_identical() {
    for (net, p) in SHAPES {
        let out = run(net, p, |bsp| {
            let me = bsp.pid();
            let x = input(me);
            let sum = bsp.all_reduce(x, Op::Sum)?;
            let min = bsp.all_reduce(x, Op::Min)?;
            let max = bsp.all_reduce(x, Op::Max)?;
            let isum = bsp.all_reduce(me as i64 * 1000 - 7, Op::Sum)?;
            let prod = bsp.all_reduce(me as u64 + 1, Op::Prod)?;
            // Not commutative: digits in pid order.
            let digits = bsp.all_reduce(
                me as u64 + 1,
                Op::Custom(|a, b| {
                    let mut shift = 1;
                    while shift <= b {
                        shift *= 10;
                    }
                    a * shift + b
                }),
            )?;
            let mut v = [me as f32, -(me as f32), 1.0];
            bsp.all_reduce_slice(&mut v, Op::Max)?;
            let words = bsp.all_reduce_with(vec![format!("p{me}")], |mut a, b| {
                a.extend(b);
                a
            })?;
            Ok((sum.to_bits(), min, max, isum, prod, digits, v, words))
        });
        let seq_isum: i64 = (0..p as i64).map(|i| i * 1000 - 7).sum();
        let seq_prod: u64 = (1..=p as u64).product();
        let seq_digits: u64 = (1..=p as u64).fold(0, |a, b| a * 10 + b);
        let seq_words: Vec<String> = (0..p).map(|i| format!("p{i}")).collect();
        let seq_sum: f64 = (0..p).map(input).sum();
        for (pid, r) in out.iter().enumerate() {
            // Bit-identical on every process.
            assert_eq!(
                r.0, out[0].0,
                "sum differs between pid 0 and {pid} at P = {p}"
            );
            assert!((f64::from_bits(r.0) - seq_sum).abs() < 1e-12, "P = {p}");
            assert_eq!((r.1, r.2), (input(0), input(p - 1)));
            assert_eq!((r.3, r.4, r.5), (seq_isum, seq_prod, seq_digits), "P = {p}");
            assert_eq!(r.6, [p as f32 - 1.0, 0.0, 1.0]);
            assert_eq!(r.7, seq_words);
        }
    }
}

#[test]
fn the_float_sum_follows_the_documented_tree() {
    // The same tree whether messages carry the reduction or the host board does (threads of
    // one process over shm share the host).
    for net in [Net::Local, Net::Shm] {
        // With P = 3 processes 0 and 1 pair up first, then meet 2: (x0 + x1) + x2.
        let out = run(net, 3, |bsp| {
            let x = [1e16, 1.0, -1e16][bsp.pid()];
            bsp.all_reduce(x, Op::Sum)
        });
        assert_eq!(out, vec![(1e16 + 1.0) - 1e16; 3], "{net:?}");
        // With P = 4: (x0 + x1) + (x2 + x3).
        let out = run(net, 4, |bsp| {
            let x = [1e16, 1.0, -1e16, 1.0][bsp.pid()];
            bsp.all_reduce(x, Op::Sum)
        });
        assert_eq!(out, vec![(1e16 + 1.0) + (-1e16 + 1.0); 4], "{net:?}");
        // With P = 5: 0 and 1 fold first: ((x0 + x1) + x2) + (x3 + x4).
        let out = run(net, 5, |bsp| {
            let x = [1e16, 1.0, 1.0, -1e16, 1.0][bsp.pid()];
            bsp.all_reduce(x, Op::Sum)
        });
        assert_eq!(
            out,
            vec![((1e16 + 1.0) + 1.0) + (-1e16 + 1.0); 5],
            "{net:?}"
        );
    }
}

#[test]
fn broadcast_and_gather_from_every_root() {
    for (net, p) in SHAPES {
        run(net, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            for root in 0..p {
                let value = (me == root).then(|| vec![format!("from {root}"); root + 1]);
                let got: Vec<String> = bsp.broadcast(root, value)?;
                assert_eq!(got, vec![format!("from {root}"); root + 1]);
                let all = bsp.gather(root, &(me, me as f64 * 0.5))?;
                if me == root {
                    let want: Vec<(usize, f64)> = (0..p).map(|i| (i, i as f64 * 0.5)).collect();
                    assert_eq!(all, Some(want));
                } else {
                    assert_eq!(all, None);
                }
            }
            Ok(())
        });
    }
}

#[test]
fn total_exchange_transposes_and_keeps_the_minus_one_convention() {
    for (net, p) in SHAPES {
        run(net, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            let send: Vec<u64> = (0..p).map(|d| (me * 100 + d) as u64).collect();
            let got = bsp.total_exchange(&send)?;
            let want: Vec<u64> = (0..p).map(|s| (s * 100 + me) as u64).collect();
            assert_eq!(got, want);
            // TotalExchangeInt: only even pids send, and only to odd pids.
            let mut v: Vec<i32> = (0..p)
                .map(|d| {
                    if me % 2 == 0 && d % 2 == 1 {
                        (me * 10 + d) as i32
                    } else {
                        -1
                    }
                })
                .collect();
            bsp.total_exchange_int(&mut v)?;
            for (s, x) in v.iter().enumerate() {
                let want = if s % 2 == 0 && me % 2 == 1 {
                    (s * 10 + me) as i32
                } else {
                    -1
                };
                assert_eq!(*x, want, "pid {me} from {s}");
            }
            Ok(())
        });
    }
}

#[test]
fn collectives_do_not_end_the_superstep() {
    run(Net::Local, 4, |bsp| {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        bsp.send((me + 1) % p, &me)?;
        let s = bsp.all_reduce(1u32, Op::Sum)?;
        let b: u8 = bsp.broadcast(2, (me == 2).then_some(9))?;
        assert_eq!((s, b, bsp.superstep()), (4, 9, 0));
        // Nothing readable before the sync, the packet after it.
        assert_eq!(bsp.recv::<usize>()?, None);
        bsp.sync()?;
        assert_eq!(
            bsp.recv::<usize>()?,
            Some(((me + p - 1) % p, (me + p - 1) % p))
        );
        // Packets of the previous superstep stay readable across a collective.
        bsp.send(me, &7u16)?;
        bsp.sync()?;
        bsp.gather(0, &me)?;
        assert_eq!(bsp.recv::<u16>()?, Some((me, 7)));
        Ok(())
    });
}

#[test]
fn large_collective_payloads_take_the_data_connection() {
    for net in [Net::Local, Net::Tcp, Net::Shm] {
        run(net, 3, |bsp| {
            let me = bsp.pid();
            let mut v: Vec<f64> = (0..200_000).map(|i| (i % 7) as f64 + me as f64).collect();
            bsp.all_reduce_slice(&mut v, Op::Sum)?;
            assert!(v
                .iter()
                .enumerate()
                .all(|(i, x)| *x == 3.0 * (i % 7) as f64 + 3.0));
            let big = (me == 1).then(|| vec![me as u32; 100_000]);
            let got: Vec<u32> = bsp.broadcast(1, big)?;
            assert_eq!(got, vec![1; 100_000]);
            let all = bsp.gather(0, &vec![me as u8; 50_000])?;
            if me == 0 {
                let all = all.unwrap();
                assert!(all
                    .iter()
                    .enumerate()
                    .all(|(i, v)| v == &vec![i as u8; 50_000]));
            }
            assert!(bsp.stats().bulk_payloads >= 1, "{:?}", bsp.stats());
            Ok(())
        });
    }
}

#[test]
fn mismatched_collectives_are_errors_not_hangs() {
    let opts = Options {
        departure_grace: std::time::Duration::from_millis(200),
        ..common::opts()
    };
    // Different operations at the same point.
    let e = try_run(Net::Local, 2, opts.clone(), |bsp| {
        if bsp.pid() == 0 {
            bsp.all_reduce(1u32, Op::Sum)?;
        } else {
            bsp.sync()?;
        }
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("all_reduce") && text.contains("sync"),
        "{text}"
    );
    // The same operation with different arguments.
    let e = try_run(Net::Local, 2, opts.clone(), |bsp| {
        let op = if bsp.pid() == 0 { Op::Sum } else { Op::Max };
        bsp.all_reduce(1.0f64, op)?;
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("sum") && text.contains("max"), "{text}");
    // Slices of different lengths to gather: both lengths named, over messages and over the
    // host board alike.
    for net in [Net::Local, Net::Shm] {
        let e = try_run(net, 2, opts.clone(), |bsp| {
            let mine = vec![1.0f64; 2 + bsp.pid()];
            bsp.all_gather_slice(&mine)?;
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(e, Error::CollectiveMismatch { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("2 f64 values") && text.contains("3 f64 values"),
            "{net:?}: {text}"
        );
    }
}

#[test]
fn every_collective_matches_a_sequential_computation_for_small_inputs() {
    for (net, p) in SHAPES {
        run(net, p, |bsp| common::checks::collectives(bsp, 3));
    }
}

#[test]
fn every_collective_matches_a_sequential_computation_for_1_mb_inputs() {
    for (net, p) in SHAPES {
        // 2^17 numbers of 8 bytes per process.
        run(net, p, |bsp| common::checks::collectives(bsp, 1 << 17));
    }
}

#[test]
fn a_root_with_nothing_to_scatter_fails_the_scatter_on_every_process() {
    for bad in [None, Some(vec![7u32; 5])] {
        let errors = run(Net::Local, 3, move |bsp| {
            let mine = if bsp.pid() == 1 { bad.clone() } else { None };
            let e = match bsp.scatter_slice(1, mine.as_deref()) {
                Ok(v) => panic!("pid {} got {v:?}", bsp.pid()),
                Err(e) => e.to_string(),
            };
            // Every process is still in step: the next collective works.
            assert_eq!(bsp.all_reduce(1u8, Op::Sum)?, 3);
            Ok(e)
        });
        assert!(
            errors[1].contains("scatter_slice") && errors[1].contains("pid 1"),
            "{errors:?}"
        );
        for e in [&errors[0], &errors[2]] {
            assert!(
                e.contains("the root (pid 1) had nothing to scatter"),
                "{errors:?}"
            );
        }
    }
}

#[test]
fn a_root_with_nothing_to_broadcast_fails_the_broadcast_on_every_process() {
    for net in [Net::Local, Net::Tcp] {
        let errors = run(net, 5, |bsp| {
            let e = match bsp.broadcast::<u32>(2, None) {
                Ok(v) => panic!("pid {} got {v}", bsp.pid()),
                Err(e) => e.to_string(),
            };
            // Every process is still in step: the next collective works.
            assert_eq!(bsp.all_reduce(1u8, Op::Sum)?, 5);
            Ok(e)
        });
        assert!(errors[2].contains("must pass Some(value)"), "{errors:?}");
        for (pid, e) in errors.iter().enumerate().filter(|(pid, _)| *pid != 2) {
            assert!(
                e.contains("the root (pid 2) had no value to send"),
                "pid {pid}: {errors:?}"
            );
        }
    }
}

#[test]
fn payloads_up_to_256_kib_travel_whole_on_shared_memory_and_as_bulk_over_tcp() {
    // 64 KiB per process, and 200 KB at P = 2, where no message carries more than one
    // process's part: above the 16 KiB of a small message, so over tcp, which promises to hold
    // nothing for a receiver that does not read, they go as a notice and a bulk payload on the
    // data connection, while over shared memory, which holds its ring and 4 MiB, they go whole
    // on the control connection, though both sides of an exchange send before they receive.
    // (At P = 3, 200 KB parts would gather into messages above 256 KiB.)
    let cases = [
        (8 << 10, Net::Shm, 2),
        (8 << 10, Net::Shm, 3),
        (8 << 10, Net::Shm, 4),
        (8 << 10, Net::Tcp, 2),
        (25_000, Net::Shm, 2),
    ];
    for (n, net, p) in cases {
        let bulk = run(net, p, move |bsp| {
            common::checks::collectives(bsp, n)?;
            Ok(bsp.stats().bulk_payloads)
        });
        match net {
            Net::Shm => assert_eq!(bulk, vec![0; p], "{n} numbers over {net:?} at P = {p}"),
            _ => assert!(
                bulk.iter().all(|&b| b > 0),
                "{n} numbers over {net:?} at P = {p}: {bulk:?}"
            ),
        }
    }
}

#[test]
fn all_gather_slice_puts_every_block_in_pid_order_whatever_its_length() {
    // Empty slices, one number each, and a length that is no power of two, on machines whose
    // last round of Bruck's concatenation receives fewer blocks than the ones before (3, 5).
    for (net, p) in SHAPES {
        for n in [0usize, 1, 7] {
            run(net, p, move |bsp| {
                let me = bsp.pid();
                let mine: Vec<u32> = (0..n).map(|j| (me * 100 + j) as u32).collect();
                let all = bsp.all_gather_slice(&mine)?;
                let want: Vec<u32> = (0..p)
                    .flat_map(|i| (0..n).map(move |j| (i * 100 + j) as u32))
                    .collect();
                assert_eq!(all, want, "pid {me} of {p}, {n} each");
                Ok(())
            });
        }
    }
}

/// Processes that name different roots for a broadcast, a gather or a scatter, then sync, with
/// no sync timeout: a mismatch naming both, never a hang. The waiting process finds another
/// process's part of the operation with the other root, or its part of the next operation;
/// a process that ended the operation finds a part of it it never read, in its next one on
/// messages or on the host board.
#[test]
fn collectives_whose_processes_name_different_roots_are_mismatches_not_hangs() {
    for net in common::NETS {
        for (which, name) in ["broadcast", "gather", "scatter"].into_iter().enumerate() {
            for synced_first in [false, true] {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let opts = Options {
                        departure_grace: std::time::Duration::from_millis(200),
                        sync_timeout: None,
                        ..Options::default()
                    };
                    let r = try_run(net, 3, opts, move |bsp| {
                        if synced_first {
                            bsp.sync()?;
                        }
                        let root = if bsp.pid() == 2 { 1 } else { 0 };
                        let me = bsp.pid() == root;
                        match which {
                            0 => drop(bsp.broadcast(root, me.then_some(7u64))?),
                            1 => drop(bsp.gather(root, &7u64)?),
                            _ => drop(bsp.scatter(root, me.then(|| vec![1u64, 2, 3]))?),
                        }
                        bsp.sync()?;
                        Ok(())
                    });
                    let _ = tx.send(r);
                });
                let case = format!("{name} over {net:?}, synced first: {synced_first}");
                match rx.recv_timeout(std::time::Duration::from_secs(60)) {
                    Ok(Err(e @ Error::CollectiveMismatch { .. })) => {
                        let text = e.to_string();
                        assert!(text.contains(name), "{case}: {text}");
                    }
                    Ok(other) => panic!("{case}: expected a mismatch, got {other:?}"),
                    Err(_) => panic!("{case}: hung for 60 s"),
                }
            }
        }
    }
}
