//! A BSP program that checks what every process receives against what a sequential
//! computation says it must: delivery, mixed types, empty supersteps, many small packets,
//! every collective, put and get. Run by threads and by real processes alike.

use bsp::{Bsp, Op};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub struct Tagged {
    pub src: usize,
    pub step: u64,
    pub seq: u32,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub enum Other {
    Text(String),
    Pair(i64, f32),
}

fn count(src: usize, dest: usize, step: u64) -> u32 {
    ((src * 5 + dest * 3 + step as usize) % 7) as u32 * 3
}

/// Runs the checks; panics (failing the test or the process) on a wrong result.
pub fn program(bsp: &mut Bsp) -> bsp::Result<()> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    // Delivery: exactly once, in order per source, sources in pid order, mixed types.
    for step in 0..3u64 {
        for dest in 0..p {
            for seq in 0..count(me, dest, step) {
                bsp.send(dest, &Tagged { src: me, step, seq })?;
                if seq % 4 == 0 {
                    bsp.send(dest, &Other::Pair(seq as i64, me as f32))?;
                }
            }
            bsp.send(dest, &Other::Text(format!("{me}->{dest}")))?;
            bsp.send_slice(dest, &[me as u16; 3])?;
        }
        bsp.sync()?;
        for src in 0..p {
            for seq in 0..count(src, me, step) {
                let (s, t) = bsp.recv::<Tagged>()?.expect("a tagged packet");
                assert_eq!((s, t), (src, Tagged { src, step, seq }));
                if seq % 4 == 0 {
                    assert!(bsp.recv::<Tagged>().is_err(), "wrong type must fail");
                    let (s, o) = bsp.recv::<Other>()?.expect("a pair");
                    assert_eq!((s, o), (src, Other::Pair(seq as i64, src as f32)));
                }
            }
            let (s, o) = bsp.recv::<Other>()?.expect("a text");
            assert_eq!((s, o), (src, Other::Text(format!("{src}->{me}"))));
            assert_eq!(bsp.recv_slice::<u16>()?, Some((src, vec![src as u16; 3])));
        }
        assert_eq!(bsp.peek()?, None);
    }
    // Empty supersteps.
    for _ in 0..10 {
        bsp.sync()?;
        assert_eq!(bsp.recv::<u8>()?, None);
    }
    // Many small packets in one superstep.
    let to = (me + 1) % p;
    for i in 0..100_000u32 {
        bsp.send(to, &i)?;
    }
    bsp.sync()?;
    let from = (me + p - 1) % p;
    for i in 0..100_000u32 {
        assert_eq!(bsp.recv::<u32>()?, Some((from, i)));
    }
    assert_eq!(bsp.recv::<u32>()?, None);
    // Collectives against sequential results.
    let x = 0.1 * (me as f64 + 1.0);
    let sum = bsp.all_reduce(x, Op::Sum)?;
    let seq_sum: f64 = (0..p).map(|i| 0.1 * (i as f64 + 1.0)).sum();
    assert!((sum - seq_sum).abs() < 1e-12);
    let all_sums = bsp.gather(0, &sum.to_bits())?;
    if let Some(all) = all_sums {
        assert!(
            all.iter().all(|b| *b == sum.to_bits()),
            "not bit-identical: {all:?}"
        );
    }
    assert_eq!(bsp.all_reduce(me as i32, Op::Max)?, p as i32 - 1);
    assert_eq!(bsp.all_reduce(me as i32 + 5, Op::Min)?, 5);
    let order = bsp.all_reduce_with(me.to_string(), |a, b| format!("{a},{b}"))?;
    let want: Vec<String> = (0..p).map(|i| i.to_string()).collect();
    assert_eq!(order, want.join(","));
    for root in 0..p {
        let v: String = bsp.broadcast(root, (me == root).then(|| format!("root {root}")))?;
        assert_eq!(v, format!("root {root}"));
    }
    let got = bsp.total_exchange(&(0..p).map(|d| (me * p + d) as u32).collect::<Vec<_>>())?;
    assert_eq!(got, (0..p).map(|s| (s * p + me) as u32).collect::<Vec<_>>());
    // Put and get.
    let reg = bsp.register(vec![0u64; p])?;
    let copy = bsp.register(vec![0u64; p])?;
    bsp.registered_mut(reg)?[me] = me as u64 + 1;
    bsp.sync()?;
    for d in 0..p {
        bsp.put(d, reg, me, &[me as u64 + 1])?;
    }
    bsp.get(to, reg, 0, p, copy, 0)?;
    bsp.sync()?;
    let full: Vec<u64> = (1..=p as u64).collect();
    assert_eq!(bsp.registered(reg)?, &full[..]);
    let mut before = vec![0u64; p];
    before[to] = to as u64 + 1;
    assert_eq!(
        bsp.registered(copy)?,
        &before[..],
        "get reads before the puts"
    );
    Ok(())
}

/// Every process gets one word from every other process in each of `rounds` supersteps, and
/// checks what it got. A process that has ended a sync serves the gets of it at once, so its
/// replies reach processes that are still waiting for the sync's last messages: those must
/// keep them for later, and not take them for a peer that called another operation.
pub fn gets_every_superstep(bsp: &mut Bsp, rounds: u64) -> bsp::Result<()> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let reg = bsp.register(vec![0u64; p])?;
    let copy = bsp.register(vec![0u64; p])?;
    bsp.sync()?;
    let value = |round: u64, pid: usize| round * p as u64 + pid as u64 + 1;
    for round in 0..rounds {
        bsp.registered_mut(reg)?[me] = value(round, me);
        for d in (0..p).filter(|&d| d != me) {
            bsp.get(d, reg, d, 1, copy, d)?;
        }
        bsp.sync()?;
        for (d, got) in bsp.registered(copy)?.iter().enumerate() {
            if d != me {
                assert_eq!(*got, value(round, d), "round {round}: pid {me} from {d}");
            }
        }
    }
    Ok(())
}
