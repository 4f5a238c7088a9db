//! The host board: the whole machine's syncs and small all-reduces through shared memory when
//! every process shares the host (here: threads of this process over the shm driver), with the
//! same results and the same errors as messages.

mod common;

use bsp::{Error, Op, Options};
use common::{run, try_run_each, Net};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn opts() -> Options {
    Options {
        departure_grace: Duration::from_millis(200),
        wait_slice: Duration::from_millis(20),
        ..common::opts()
    }
}

/// Every result of a run that must fail: at least one a mismatch naming both operations, and
/// none a success.
fn assert_mismatch<T: std::fmt::Debug>(each: Vec<bsp::Result<T>>, a: &str, b: &str) {
    assert!(each.iter().all(|r| r.is_err()), "{each:?}");
    let named = each.iter().any(|r| {
        matches!(r, Err(Error::CollectiveMismatch { .. }))
            && r.as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains(a) && e.to_string().contains(b))
    });
    assert!(named, "no mismatch naming {a} and {b}: {each:?}");
}

#[test]
fn supersteps_and_reductions_on_the_board_match_a_sequential_run() {
    for p in [2, 3, 5] {
        let out = run(Net::Shm, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            let mut got = Vec::new();
            for step in 0..50u64 {
                // Packets to a different subset of processes every superstep: the counts
                // the board carries must say exactly how many messages come.
                for d in (0..p).filter(|d| (d + step as usize) % 3 != 0) {
                    bsp.send(d, &(me as u64 * 1000 + step))?;
                }
                bsp.sync()?;
                let mut sum = 0u64;
                while let Some((_, v)) = bsp.recv::<u64>()? {
                    sum += v;
                }
                let total = bsp.all_reduce(sum, Op::Sum)?;
                let mut v = [me as i32, -(me as i32), step as i32];
                bsp.all_reduce_slice(&mut v, Op::Max)?;
                got.push((sum, total, v));
            }
            Ok(got)
        });
        for (me, got) in out.iter().enumerate() {
            for (step, &(sum, total, v)) in got.iter().enumerate() {
                let step = step as u64;
                let want: u64 = if (me + step as usize) % 3 == 0 {
                    0
                } else {
                    (0..p as u64).map(|s| s * 1000 + step).sum()
                };
                assert_eq!(sum, want, "pid {me}, superstep {step}, P = {p}");
                let want_total: u64 = (0..p)
                    .filter(|d| (d + step as usize) % 3 != 0)
                    .map(|_| (0..p as u64).map(|s| s * 1000 + step).sum::<u64>())
                    .sum();
                assert_eq!(total, want_total, "P = {p}");
                assert_eq!(v, [p as i32 - 1, 0, step as i32]);
            }
        }
    }
}

#[test]
fn different_operations_on_the_board_are_a_mismatch() {
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        bsp.sync()?;
        if bsp.pid() == 0 {
            bsp.all_reduce(1u32, Op::Sum)?;
        } else {
            bsp.sync()?;
        }
        Ok(())
    });
    assert_mismatch(each, "all_reduce", "sync");
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        let op = if bsp.pid() == 0 { Op::Sum } else { Op::Max };
        bsp.all_reduce(1.0f64, op)?;
        Ok(())
    });
    assert_mismatch(each, "sum", "max");
}

#[test]
fn an_operation_on_the_board_against_one_with_messages_is_a_mismatch() {
    // Pid 0 syncs on the board while pid 1 waits for a broadcast's message: pid 1 sees pid
    // 0's row at the broadcast's sequence number.
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        bsp.sync()?;
        if bsp.pid() == 0 {
            bsp.sync()?;
        } else {
            let _: u64 = bsp.broadcast(0, None)?;
        }
        Ok(())
    });
    assert_mismatch(each, "broadcast", "sync");
    // A large all-reduce takes messages, a small one the board: different arguments.
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        bsp.sync()?;
        let mut v = vec![1u64; if bsp.pid() == 0 { 1 } else { 100 }];
        bsp.all_reduce_slice(&mut v, Op::Sum)?;
        Ok(())
    });
    assert_mismatch(each, "all_reduce", "all_reduce");
}

#[test]
fn a_process_that_leaves_ends_the_others_wait_on_the_board() {
    let each = try_run_each(Net::Shm, 3, opts(), |bsp| {
        bsp.sync()?;
        if bsp.pid() == 2 {
            // Leaves the machine without its part of the next sync.
            return Ok(());
        }
        bsp.sync()?;
        Ok(())
    });
    assert!(each[2].is_ok());
    for (pid, r) in each.iter().enumerate().take(2) {
        let e = r.as_ref().expect_err("a sync without pid 2 cannot end");
        assert!(
            e.to_string().contains("node2") || e.to_string().contains("pid 2"),
            "pid {pid}: {e}"
        );
    }
}

/// A machine of more processes than this host's processors, so that pid 0 releases each sync
/// (see `bsp::board`, "Waiting"): at least 3, at most 17.
fn crowding() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 16)
        + 1
}

/// Fails under `CI=true` (a 2-core host, which 3 processes crowd) when pid 0 did not find the
/// host crowded; elsewhere says that the run did not test what it means to.
fn expect_crowded(crowded: bool, test: &str) {
    if !crowded {
        assert!(
            !testkit::netns::required(),
            "{test}: CI's host must be crowded by {} processes",
            crowding()
        );
        eprintln!("{test}: this host's processors are not crowded; the release is not tested");
    }
}

#[test]
fn where_processes_crowd_the_host_pid_0_releases_each_sync_with_the_same_results() {
    let p = crowding();
    let out = run(Net::Shm, p, |bsp| {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let crowded = bsp.ibis().pool().crowded();
        let mut got = Vec::new();
        for step in 0..40u64 {
            for d in (0..p).filter(|d| (d + step as usize) % 2 == 0) {
                bsp.send(d, &(me as u64 + step))?;
            }
            bsp.sync()?;
            let mut sum = 0u64;
            while let Some((_, v)) = bsp.recv::<u64>()? {
                sum += v;
            }
            if step % 3 == 2 {
                // No collective: pid 0 does not hold the next sync.
                got.push((sum, vec![0], 0));
                continue;
            }
            // A scatter and a scan from pid 0 right after the sync, which pid 0 leaves first
            // (after the first one of a run of supersteps with collectives).
            let all: Vec<u64> = (0..p as u64).map(|i| i * step).collect();
            let part = bsp.scatter_slice(0, (me == 0).then_some(&all[..]))?;
            let mut v = [sum];
            bsp.scan_slice(&mut v, Op::Sum)?;
            got.push((sum, part, v[0]));
        }
        Ok((crowded, got))
    });
    expect_crowded(out[0].0, "release");
    let sums: Vec<Vec<u64>> = (0..40u64)
        .map(|step| {
            (0..p)
                .map(|d| {
                    if (d + step as usize) % 2 == 0 {
                        (0..p as u64).map(|s| s + step).sum()
                    } else {
                        0
                    }
                })
                .collect()
        })
        .collect();
    for (me, (_, got)) in out.iter().enumerate() {
        for (step, (sum, part, scan)) in got.iter().enumerate() {
            let want = &sums[step];
            assert_eq!(*sum, want[me], "pid {me}, superstep {step}");
            if step % 3 == 2 {
                continue;
            }
            assert_eq!(
                part,
                &[me as u64 * step as u64],
                "pid {me}, superstep {step}"
            );
            assert_eq!(
                *scan,
                want[..=me].iter().sum::<u64>(),
                "pid {me}, step {step}"
            );
        }
    }
}

#[test]
fn where_pid_0_releases_the_sync_another_operation_is_still_a_mismatch() {
    // Pid 0 writes its row of the sync held (the superstep called a collective); the others,
    // in a broadcast whose messages never come, see that row and fail, naming both
    // operations, rather than wait.
    let crowded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = crowded.clone();
    let each = try_run_each(Net::Shm, crowding(), opts(), move |bsp| {
        bsp.sync()?;
        bsp.all_reduce(1u32, Op::Sum)?;
        if bsp.pid() == 0 {
            seen.store(
                bsp.ibis().pool().crowded(),
                std::sync::atomic::Ordering::Relaxed,
            );
            bsp.sync()?;
        } else {
            let _: u64 = bsp.broadcast(0, None)?;
        }
        Ok(())
    });
    expect_crowded(
        crowded.load(std::sync::atomic::Ordering::Relaxed),
        "mismatch",
    );
    assert_mismatch(each, "broadcast", "sync");
    // And against an operation on the board.
    let each = try_run_each(Net::Shm, crowding(), opts(), |bsp| {
        bsp.sync()?;
        bsp.all_reduce(1u32, Op::Sum)?;
        if bsp.pid() == 0 {
            bsp.sync()?;
        } else {
            bsp.all_reduce(1u32, Op::Sum)?;
        }
        Ok(())
    });
    assert_mismatch(each, "all_reduce", "sync");
}

#[test]
fn the_board_carries_what_messages_carry_between_hosts() {
    // Over shm the syncs and the small all-reduce take the board; over tcp, messages. The
    // results are the same, bit for bit.
    let board = run(Net::Shm, 3, program);
    let messages = run(Net::Tcp, 3, program);
    for (b, m) in board.iter().zip(&messages) {
        assert_eq!(b.0, m.0);
        // Two supersteps and an all-reduce; the setup takes messages.
        assert_eq!((b.1, m.1), (3, 0));
        assert!(b.2 < m.2, "board {} round messages, messages {}", b.2, m.2);
    }

    fn program(bsp: &mut bsp::Bsp) -> bsp::Result<((u64, u64, f64), u64, u64)> {
        let me = bsp.pid();
        bsp.send((me + 1) % bsp.nprocs(), &(me as u64))?;
        bsp.sync()?;
        let got = bsp.recv::<u64>()?.map_or(0, |(_, v)| v);
        let x = bsp.all_reduce(0.1 * (me as f64 + 1.0) + 1e-17 * me as f64, Op::Sum)?;
        bsp.sync()?;
        let s = bsp.stats();
        Ok(((got, s.supersteps, x), s.board_operations, s.round_messages))
    }
}

#[test]
fn small_collectives_on_the_board_give_the_bits_messages_give() {
    // Values whose float sums depend on the order of combination: the board must combine
    // along the messages' trees. Local (threads, messages) against shm (the board).
    /// The bits of each collective's result, and the operations the board carried.
    type Bits = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<Option<Vec<u64>>>, u64);
    fn program(bsp: &mut bsp::Bsp) -> bsp::Result<Bits> {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let big = [1e16, 1.0, -1e16, 1.0, 3.0, -2.5, 1e-3, 7.0][me % 8];
        let before = bsp.stats().board_operations;
        let mut v = [big, -big, big * 0.5];
        bsp.all_reduce_slice(&mut v, Op::Sum)?;
        let gathered = bsp.all_gather_slice(&[big, me as f64])?;
        // Every process gets one value of p (8 values at most, 64 bytes).
        let values: Vec<f64> = (0..p).map(|d| big * (d as f64 + 1.0)).collect();
        let mine = bsp.reduce_scatter(&values, &vec![1; p], Op::Sum)?;
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        // The collectives that need not wait for everyone: the binomial tree of a reduce
        // (to pid 0 and to the last pid), the chain (P <= 4) or recursive doubling of the
        // scans, a scatter's parts.
        let mut rooted = Vec::new();
        let r = bsp.reduce_slice(p - 1, &[big, -big, big * 0.25], Op::Sum)?;
        rooted.push(r.as_deref().map(bits));
        let r = bsp.reduce(0, big, Op::Sum)?;
        rooted.push(r.map(|x| bits(&[x])));
        let mut v = [big, big * -0.5];
        bsp.scan_slice(&mut v, Op::Sum)?;
        rooted.push(Some(bits(&v)));
        let x = bsp.scan(big, Op::Sum)?;
        rooted.push(Some(bits(&[x])));
        let mut v = [big, 1.0 - big];
        let below = bsp.exscan_slice(&mut v, Op::Sum)?;
        rooted.push(below.then(|| bits(&v)));
        let x = bsp.exscan(big, Op::Sum)?;
        rooted.push(x.map(|x| bits(&[x])));
        let root = 1 % p;
        let parts: Vec<f64> = (0..p).map(|d| big * d as f64).collect();
        let part = bsp.scatter_slice(root, (me == root).then_some(&parts[..]))?;
        rooted.push(Some(bits(&part)));
        let used = bsp.stats().board_operations - before;
        Ok((bits(&v), bits(&gathered), bits(&mine), rooted, used))
    }
    for p in [2, 3, 4, 5, 8] {
        let messages = run(Net::Local, p, program);
        let board = run(Net::Shm, p, program);
        for (pid, (m, b)) in messages.iter().zip(&board).enumerate() {
            assert_eq!(
                (&m.0, &m.1, &m.2, &m.3),
                (&b.0, &b.1, &b.2, &b.3),
                "pid {pid} of {p}"
            );
            assert_eq!(
                (m.4, b.4),
                (0, 10),
                "pid {pid} of {p}: operations on the board"
            );
        }
    }
    // The sums depend on the order: a reduce and a scan at P = 8 would give other bits in
    // pid order from left to right.
    let board = run(Net::Shm, 8, program);
    let left_to_right = (0..8).fold(0.0, |a: f64, j| {
        a + [1e16, 1.0, -1e16, 1.0, 3.0, -2.5, 1e-3, 7.0][j]
    });
    assert_ne!(board[0].3[1], Some(vec![left_to_right.to_bits()]));
}

/// Whether this system lets a process read another's memory directly (the board's single
/// copy): a facility CI must have.
fn single_copy_here() -> bool {
    use ipl::shared_memory::PeerMemory;
    let (addr, probe) = PeerMemory::probe();
    let here = PeerMemory::open(std::process::id() as i32, addr, &probe).is_some();
    assert!(
        here || !testkit::netns::required(),
        "CI needs process_vm_readv (cross-memory attach) for the host board's single copy"
    );
    here
}

#[test]
fn large_collectives_on_the_board_give_the_bits_messages_give() {
    // 5000 numbers per process (40 KB): more than a row holds. Read straight from each other's
    // memory (shm), or through the bulk halves in several pieces, the last one partial (shm
    // with the single copy off). Local (threads, messages) against both.
    type Bits = (Vec<Option<Vec<u64>>>, u64);
    fn program(bsp: &mut bsp::Bsp) -> bsp::Result<Bits> {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let n = 5000;
        let x: Vec<f64> = (0..n)
            .map(|i| [1e16, 1.0, -1e16, 1.0, 3.0, -2.5, 1e-3, 7.0][(me + i) % 8] * (i as f64 + 1.0))
            .collect();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let before = bsp.stats().board_operations;
        let mut got = Vec::new();
        let r = bsp.reduce_slice(p - 1, &x, Op::Sum)?;
        got.push(r.as_deref().map(bits));
        let r = bsp.reduce_slice(0, &x, Op::Sum)?;
        got.push(r.as_deref().map(bits));
        let mut v = x.clone();
        bsp.scan_slice(&mut v, Op::Sum)?;
        got.push(Some(bits(&v)));
        let mut v = x.clone();
        let below = bsp.exscan_slice(&mut v, Op::Sum)?;
        got.push(below.then(|| bits(&v)));
        got.push(Some(bits(&bsp.all_gather_slice(&x)?)));
        let root = 1 % p;
        let part = bsp.scatter_slice(root, (me == root).then(|| &x[..n / p * p]))?;
        got.push(Some(bits(&part)));
        // Back to back, so that the processes that need not wait run ahead and write their
        // bulk halves again: every call's values differ.
        for k in 0..20 {
            let y: Vec<f64> = x.iter().map(|v| v + k as f64).collect();
            let r = bsp.reduce_slice(0, &y, Op::Max)?;
            got.push(r.as_deref().map(bits));
            let part = bsp.scatter_slice(p - 1, (me == p - 1).then(|| &y[..n / p * p]))?;
            got.push(Some(bits(&part)));
        }
        Ok((got, bsp.stats().board_operations - before))
    }
    single_copy_here();
    same_as_messages(&[2, 3, 5, 8], program, |_| 46);
}

/// What a program of [`same_as_messages`] returns: its calls' results, and how many
/// operations went on the board.
type Calls<X> = (Vec<X>, u64);

/// Runs `program` on each number of processes of `ps` as threads with messages, and over shm
/// with the single copy on and off; checks that each of its calls gives on the board what it
/// gives with messages, and that each process did `on_board(net)` operations on the board
/// (none with messages). `program` returns its calls' results and its board operations.
fn same_as_messages<X: PartialEq + Send + 'static>(
    ps: &[usize],
    program: fn(&mut bsp::Bsp) -> bsp::Result<Calls<X>>,
    on_board: impl Fn(Net) -> u64,
) {
    for &p in ps {
        let messages = run(Net::Local, p, program);
        for net in [Net::Shm, Net::ShmTwoCopies] {
            let board = run(net, p, program);
            for (pid, (m, b)) in messages.iter().zip(&board).enumerate() {
                assert_eq!(
                    m.0.len(),
                    b.0.len(),
                    "calls at pid {pid} of {p} over {net:?}"
                );
                for (k, (m, b)) in m.0.iter().zip(&b.0).enumerate() {
                    assert!(m == b, "call {k} at pid {pid} of {p} over {net:?}");
                }
                assert_eq!(
                    (m.1, b.1),
                    (0, on_board(net)),
                    "pid {pid} of {p} over {net:?}: operations on the board"
                );
            }
        }
    }
}

#[test]
fn processes_that_need_not_wait_run_ahead_on_the_board_without_overwriting_a_row() {
    // Back-to-back reduces to one root, scans and scatters: the processes that wait for
    // nobody run ahead of those that wait, by up to a row's slots, and then wait for room.
    // Every call's values differ, so a row written again before it was read shows.
    for p in [2, 3, 5] {
        let out = run(Net::Shm, p, |bsp| {
            let (me, p) = (bsp.pid(), bsp.nprocs());
            // One kind of call at a time, so that nothing holds back the processes that
            // need not wait.
            let x = |i: u64| i * 1000 + me as u64;
            let mut reduced = Vec::new();
            for i in 0..100 {
                reduced.push(bsp.reduce(0, x(i), Op::Sum)?);
            }
            let mut scanned = Vec::new();
            for i in 0..100 {
                scanned.push(bsp.scan(x(i), Op::Sum)?);
            }
            let mut scattered = Vec::new();
            for i in 0..100 {
                let parts: Vec<u64> = (0..p as u64).map(|d| i * 10 + d).collect();
                scattered.push(bsp.scatter_slice(p - 1, (me == p - 1).then_some(&parts[..]))?);
            }
            Ok(reduced
                .into_iter()
                .zip(scanned)
                .zip(scattered)
                .map(|((r, s), part)| (r, s, part))
                .collect::<Vec<_>>())
        });
        for (me, got) in out.iter().enumerate() {
            for (i, (r, s, part)) in got.iter().enumerate() {
                let i = i as u64;
                let want = (me == 0).then(|| (0..p as u64).map(|j| i * 1000 + j).sum());
                assert_eq!(*r, want, "reduce {i} at pid {me} of {p}");
                let want: u64 = (0..=me as u64).map(|j| i * 1000 + j).sum();
                assert_eq!(*s, want, "scan {i} at pid {me} of {p}");
                assert_eq!(*part, vec![i * 10 + me as u64], "scatter {i} at pid {me}");
            }
        }
    }
}

#[test]
fn large_collectives_beyond_a_bulk_area_give_the_bits_messages_give() {
    // 140 000 numbers per process (1.12 MB): more than a bulk area (1 MiB) holds, so the
    // reductions, scans and the scatter read each other's memory (shm) or take messages
    // (the single copy off). Local (threads, messages) against both.
    type Bits = (Vec<Option<u64>>, u64);
    fn program(bsp: &mut bsp::Bsp) -> bsp::Result<Bits> {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let n = 140_000;
        let x: Vec<f64> = (0..n)
            .map(|i| [1e16, 1.0, -1e16, 3.0, -2.5, 1e-3][(me + i) % 6] * (i as f64 + 1.0))
            .collect();
        // A digest of the bits, so that the comparison stays small.
        let digest = |v: &[f64]| {
            v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
                (h ^ x.to_bits()).wrapping_mul(0x0100_0000_01b3)
            })
        };
        let before = bsp.stats().board_operations;
        let mut got = Vec::new();
        for root in [0, p - 1] {
            let r = bsp.reduce_slice(root, &x, Op::Sum)?;
            got.push(r.as_deref().map(digest));
        }
        let mut v = x.clone();
        bsp.scan_slice(&mut v, Op::Sum)?;
        got.push(Some(digest(&v)));
        let mut v = x.clone();
        let below = bsp.exscan_slice(&mut v, Op::Sum)?;
        got.push(below.then(|| digest(&v)));
        let whole: Vec<f64> = (0..n * p).map(|i| i as f64).collect();
        let part = bsp.scatter_slice(0, (me == 0).then_some(&whole[..]))?;
        got.push(Some(digest(&part)));
        Ok((got, bsp.stats().board_operations - before))
    }
    let single = single_copy_here();
    // Without the single copy, the scatter's root still writes its row, empty, to say that
    // the parts come as messages.
    same_as_messages(&[2, 3], program, |net| {
        if single && net == Net::Shm {
            5
        } else {
            1
        }
    });
}

#[test]
fn a_scatter_takes_the_roots_row_its_bulk_or_the_messages_by_size() {
    fn program(bsp: &mut bsp::Bsp, n: usize) -> bsp::Result<(Vec<u32>, u64, u64)> {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        bsp.sync()?;
        let (before, messages) = (bsp.stats().board_operations, bsp.stats().round_messages);
        let all: Vec<u32> = (0..(p * n) as u32).collect();
        let mut part = Vec::new();
        // Twice, so that rows are written again after being read.
        for _ in 0..2 {
            part = bsp.scatter_slice(0, (me == 0).then_some(&all[..]))?;
        }
        let s = bsp.stats();
        Ok((
            part,
            s.board_operations - before,
            s.round_messages - messages,
        ))
    }
    // Parts of 8 bytes fit the root's row, of 4 KB its bulk half (1 MiB), of 1.2 MB neither,
    // but every process can read them from the root's memory where the system allows that.
    let single = single_copy_here();
    for p in [2, 3, 5] {
        for (net, n) in [2, 1000, 300_000]
            .into_iter()
            .flat_map(|n| [(Net::Shm, n), (Net::ShmTwoCopies, n)])
        {
            let out = run(net, p, move |bsp| program(bsp, n));
            for (me, (part, used, messages)) in out.iter().enumerate() {
                let want: Vec<u32> = (me * n..(me + 1) * n).map(|x| x as u32).collect();
                assert_eq!(part, &want, "P = {p}, n = {n}: pid {me}");
                // The root's row says whether the parts are there or in messages.
                assert_eq!(*used, 2, "P = {p}, n = {n}");
                let want = match (n, me) {
                    (2 | 1000, _) => 0,
                    _ if single && net == Net::Shm => 0,
                    // Up to 4 processes the root sends every part itself.
                    (_, 0) if p <= 4 => 2 * (p as u64 - 1),
                    _ => u64::MAX,
                };
                if want != u64::MAX {
                    assert_eq!(
                        *messages, want,
                        "P = {p}, n = {n}: pid {me}'s round messages"
                    );
                }
            }
        }
    }
}

#[test]
fn a_scatter_of_numbers_against_one_of_serde_values_is_a_mismatch() {
    // The root's parts on the board; pid 1 waits for the messages of `scatter`.
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        bsp.sync()?;
        if bsp.pid() == 0 {
            bsp.scatter_slice(0, Some(&[1u64, 2][..]))?;
        } else {
            let _: u64 = bsp.scatter(0, None)?;
        }
        // Pid 0 goes on to a sync, which pid 1's error ends.
        bsp.sync()?;
        Ok(())
    });
    assert!(each[1].is_err(), "{each:?}");
    assert!(
        matches!(each[1], Err(Error::CollectiveMismatch { .. })),
        "{each:?}"
    );
    // A reduce against a scan, both on the board.
    let each = try_run_each(Net::Shm, 2, opts(), |bsp| {
        bsp.sync()?;
        if bsp.pid() == 0 {
            bsp.reduce(0, 1u32, Op::Sum)?;
        } else {
            bsp.scan(1u32, Op::Sum)?;
        }
        bsp.sync()?;
        Ok(())
    });
    assert_mismatch(each, "reduce", "scan");
}

#[test]
fn all_to_all_takes_the_board_when_every_row_fits_and_messages_otherwise() {
    // Vectors of varied lengths (some empty); the pids of `big` send a vector of `len`
    // numbers, too long for a row, to the next pid.
    type Big = (&'static [usize], usize);
    fn program(bsp: &mut bsp::Bsp, (big, len): Big) -> bsp::Result<(Vec<Vec<u32>>, u64, u64)> {
        let (me, p) = (bsp.pid(), bsp.nprocs());
        let mut send: Vec<Vec<u32>> = (0..p)
            .map(|d| {
                (0..(me + d) % 3)
                    .map(|i| (me * 100 + d * 10 + i) as u32)
                    .collect()
            })
            .collect();
        if big.iter().any(|&b| b % p == me) {
            send[(me + 1) % p] = (0..len as u32).map(|i| i ^ me as u32).collect();
        }
        // The board is set up at the first sync.
        bsp.sync()?;
        let (before, messages) = (bsp.stats().board_operations, bsp.stats().round_messages);
        let mut recv = Vec::new();
        // Twice, so that rows (and bulk areas) are written again after being read.
        for _ in 0..2 {
            bsp.all_to_all_into(&send, &mut recv)?;
        }
        let s = bsp.stats();
        Ok((
            recv,
            s.board_operations - before,
            s.round_messages - messages,
        ))
    }
    // A vector too long for its row is read from its sender's memory where the system
    // allows that (shm); otherwise (the single copy off) it goes through the sender's bulk
    // area, next to rows that carry their vectors, and only vectors too long for a bulk area
    // (1 MiB) send everyone to the messages.
    let single = single_copy_here();
    let cases: [Big; 5] = [
        (&[], 0),
        (&[0], 1000),
        (&[usize::MAX], 1000),
        (&[0, 1, 2, 3], 5000),
        (&[1], 300_000),
    ];
    for (p, net) in [2, 3, 4]
        .into_iter()
        .flat_map(|p| [(p, Net::Shm), (p, Net::ShmTwoCopies)])
    {
        for (big, len) in cases {
            let out = run(net, p, move |bsp| program(bsp, (big, len)));
            for (me, (recv, used, messages)) in out.iter().enumerate() {
                for (s, v) in recv.iter().enumerate() {
                    let mut want: Vec<u32> = (0..(s + me) % 3)
                        .map(|i| (s * 100 + me * 10 + i) as u32)
                        .collect();
                    if big.iter().any(|&b| b % p == s) && me == (s + 1) % p {
                        want = (0..len as u32).map(|i| i ^ s as u32).collect();
                    }
                    assert_eq!(v, &want, "P = {p}, big {big:?}: pid {me} from {s}");
                }
                // Every call goes through the board: carried there, or agreed there to take
                // the messages.
                assert_eq!(*used, 2, "P = {p}, big {big:?}");
                // Messages to every other process only when some vectors fit neither way.
                let by_messages = len > (1 << 20) / 4 && !(single && net == Net::Shm);
                let want = if by_messages { 2 * (p as u64 - 1) } else { 0 };
                assert_eq!(
                    *messages, want,
                    "P = {p} over {net:?}, big {big:?} of {len}: round messages"
                );
            }
        }
    }
}

/// Marks the child of [`without_memory_for_the_board_the_processes_keep_their_messages`].
const NO_ROOM_CHILD: &str = "BSP_NO_ROOM_CHILD";
const NO_ROOM_TEST: &str = "without_memory_for_the_board_the_processes_keep_their_messages";
/// The largest file the child may make: room for the shared-memory driver's rings (256 KiB
/// each), not for a board of two processes (4 MiB).
const NO_ROOM_FILE_BYTES: u64 = 1 << 20;

/// Where the board's memory cannot be had, the processes keep their messages: pid 0's
/// creation fails, every process hears it, and nobody maps anything (a board whose pages were
/// not all there would kill its processes with SIGBUS at the first store to a missing page).
/// The run happens in a child (this test binary run again) whose files may not grow beyond 1
/// MiB, so that pid 0 cannot size the board's memory file.
#[test]
fn without_memory_for_the_board_the_processes_keep_their_messages() {
    if std::env::var_os(NO_ROOM_CHILD).is_some() {
        return no_room_child();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.args(["--exact", NO_ROOM_TEST, "--nocapture", "--test-threads=1"])
        .env(NO_ROOM_CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, out, err) = testkit::Reaped::start(&mut cmd).output(deadline);
    assert!(
        status.success() && out.contains("1 passed"),
        "the child ({status}):\n{out}\n{err}"
    );
}

/// In the child: supersteps that go round every slot of the rows, which span two pages, and a
/// scan and a reduce through the bulk areas beyond them, on messages.
fn no_room_child() {
    let limit = libc::rlimit {
        rlim_cur: NO_ROOM_FILE_BYTES,
        rlim_max: NO_ROOM_FILE_BYTES,
    };
    // SAFETY: setting a disposition and a limit of this process (one thread runs the test),
    // both with plain values; a file that may not grow then fails to with EFBIG rather than
    // the signal ending the process.
    unsafe {
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
    let out = run(Net::ShmTwoCopies, 2, |bsp| {
        let me = bsp.pid() as u64;
        let mut got = 0;
        for step in 0..40 {
            bsp.send(1 - bsp.pid(), &(me + step))?;
            bsp.sync()?;
            got += bsp.recv::<u64>()?.map_or(0, |(_, v)| v);
        }
        let sum = bsp.all_reduce(got, Op::Sum)?;
        let mut v = vec![me + 1; 10_000];
        bsp.scan_slice(&mut v, Op::Sum)?;
        let r = bsp.reduce_slice(1, &v, Op::Sum)?;
        let reduced = r.map(|r| r.iter().all(|&x| x == 4));
        Ok((got, sum, v[0], reduced, bsp.stats().board_operations))
    });
    // What pid 1 sends pid 0 over the supersteps, and pid 0 pid 1.
    let (to_0, to_1) = ((1..=40).sum::<u64>(), (0..40).sum::<u64>());
    let sum = to_0 + to_1;
    assert_eq!(
        out,
        [(to_0, sum, 1, None, 0), (to_1, sum, 3, Some(true), 0)]
    );
}
