//! What each measured process does: it is one process of a bsp run started by `run_bsp`, and
//! rank 0 writes the figures to the file named in `BSP_BENCH_OUT`.

use crate::probe::{self, DAXPY_LEN};
use crate::{median, Args, Figures, ProbeFigures, Timing, COLLECTIVES, SIZES};
use bsp::{Bsp, Op};
use ipl::{Connection, PortType};
use serde::{Deserialize, Serialize};
use std::time::Instant;

type AnyError = Box<dyn std::error::Error>;

/// The 16-byte packet of the combining measurement.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Pkt {
    key: u64,
    value: f64,
}

/// Median over `reps` of the microseconds per operation of `iters` operations, after a
/// warm-up. Every operation ends with all processes lined up where it synchronizes.
fn latency(reps: usize, iters: u32, mut op: impl FnMut() -> bsp::Result<()>) -> bsp::Result<f64> {
    for _ in 0..iters.min(500) {
        op()?;
    }
    let mut per = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            op()?;
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(iters));
    }
    Ok(median(per))
}

/// The latency of one collective as the OSU micro-benchmarks measure it: each call timed on
/// its own between barriers (empty supersteps, not timed), the median over `reps` of the mean
/// over `iters` calls, averaged over the processes. Timing calls back to back at pid 0 would
/// measure instead how far the other processes can run ahead of it, which for rooted and
/// prefix operations says more about the algorithm's shape than about its cost.
fn per_call(
    bsp: &mut Bsp,
    reps: usize,
    iters: u32,
    mut op: impl FnMut(&mut Bsp) -> bsp::Result<()>,
) -> bsp::Result<f64> {
    for _ in 0..iters.min(50) {
        op(bsp)?;
        bsp.sync()?;
    }
    let mut per = Vec::with_capacity(reps);
    for _ in 0..reps {
        let mut total = 0.0;
        for _ in 0..iters {
            let t = Instant::now();
            op(bsp)?;
            total += t.elapsed().as_secs_f64();
            bsp.sync()?;
        }
        per.push(total * 1e6 / f64::from(iters));
    }
    let p = bsp.nprocs() as f64;
    Ok(bsp.all_reduce(median(per), Op::Sum)? / p)
}

/// One process of a measured run.
pub fn run(args: &Args) -> Result<(), AnyError> {
    let ibis = ipl::Ibis::join(ipl::Config::from_env()?)?;
    let mut bsp = Bsp::new(ibis)?;
    let out = if args.probe {
        serde_json::to_vec(&probe(&mut bsp, args)?)?
    } else {
        serde_json::to_vec(&latencies(&mut bsp, args)?)?
    };
    if bsp.pid() == 0 {
        let path = std::env::var("BSP_BENCH_OUT")?;
        std::fs::write(path, out)?;
    }
    // Nobody leaves while another still measures.
    bsp.sync()?;
    Ok(())
}

fn latencies(bsp: &mut Bsp, args: &Args) -> Result<Figures, AnyError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let mut fig = Figures {
        procs: p as u32,
        ..Figures::default()
    };
    // Untimed, as many supersteps as one measurement makes, before the first timed one (the
    // C reference settles the same way before its barrier): with more processes than cores the
    // first measurement of a run came out up to 70% slower than the same one repeated right
    // after it, while the scheduler was still placing the processes.
    for _ in 0..args.reps as u64 * u64::from(args.iters) {
        bsp.sync()?;
    }
    fig.sync_us = latency(args.reps, args.iters, || bsp.sync())?;
    bsp.sync()?;
    let mut x = me as f64;
    fig.all_reduce_us = latency(args.reps, args.iters, || {
        x = bsp.all_reduce(x, Op::Sum)? * 0.5;
        Ok(())
    })?;
    if args.supersteps_only {
        return Ok(fig);
    }
    fig.collectives = collectives(bsp, args)?;
    if p == 2 {
        let (c, s) = combining(bsp, args)?;
        fig.combined_pps = Some(c);
        fig.single_pps = Some(s);
    }
    Ok(fig)
}

/// Every new collective at both sizes, on zeros (so that sums never overflow into slower
/// numbers), with the same arguments as the MPI program.
fn collectives(bsp: &mut Bsp, args: &Args) -> bsp::Result<Vec<Timing>> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let mut out = Vec::new();
    for bytes in SIZES {
        let n = bytes / 8;
        let iters = if bytes <= 8 {
            args.coll_iters
        } else {
            args.big_iters
        };
        let all = filled(n * p);
        let mine = filled(n);
        let mut v = filled(n);
        let counts = vec![n; p];
        let send: Vec<Vec<f64>> = (0..p).map(|_| filled(n)).collect();
        let mut recv: Vec<Vec<f64>> = Vec::new();
        for (name, _) in COLLECTIVES {
            bsp.sync()?;
            let us = per_call(bsp, args.reps, iters, |bsp| {
                match name {
                    "scatter" => drop(bsp.scatter_slice(0, (me == 0).then_some(&all[..]))?),
                    "all_gather" => drop(bsp.all_gather_slice(&mine)?),
                    "scan" => bsp.scan_slice(&mut v, Op::Sum)?,
                    "exscan" => drop(bsp.exscan_slice(&mut v, Op::Sum)?),
                    "reduce" => drop(bsp.reduce_slice(0, &mine, Op::Sum)?),
                    "reduce_scatter" => drop(bsp.reduce_scatter(&all, &counts, Op::Sum)?),
                    "all_to_all" => drop(bsp.all_to_all(&send)?),
                    "all_to_all_into" => bsp.all_to_all_into(&send, &mut recv)?,
                    other => unreachable!("no measurement for {other}"),
                }
                Ok(())
            })?;
            out.push(Timing {
                name: name.to_string(),
                bytes,
                us,
            });
        }
    }
    bsp.sync()?;
    Ok(out)
}

/// `n` values to send, written as the C reference writes its buffers. A zeroed vector never
/// written (`vec![0.0; n]`) can be backed by the kernel's one shared zero page: a single copy
/// out of it reads the same cached 4 KiB over and over, which no program's data allows.
fn filled(n: usize) -> Vec<f64> {
    (0..n).map(|i| (i % 1000) as f64 + 1.0).collect()
}

/// Message combining at P = 2: packets per second per process, combined and as one ipl
/// message each.
fn combining(bsp: &mut Bsp, args: &Args) -> Result<(f64, f64), AnyError> {
    let other = 1 - bsp.pid();
    let n = args.packets;
    let mut rates = Vec::new();
    let want: u64 = (0..n).fold(0u64, |c, i| {
        c.wrapping_add(u64::from(i) ^ f64::from(i).to_bits())
    });
    for rep in 0..=args.combining_reps {
        bsp.sync()?;
        let t = Instant::now();
        for i in 0..n {
            bsp.send(
                other,
                &Pkt {
                    key: u64::from(i),
                    value: f64::from(i),
                },
            )?;
        }
        bsp.sync()?;
        let mut check = 0u64;
        while let Some((_, pkt)) = bsp.recv::<Pkt>()? {
            check = check.wrapping_add(pkt.key ^ pkt.value.to_bits());
        }
        let secs = t.elapsed().as_secs_f64();
        if check != want {
            return Err("combined packets arrived wrong".into());
        }
        if rep > 0 {
            rates.push(f64::from(n) / secs);
        }
    }
    let both = bsp.all_reduce(median(rates), Op::Sum)?;
    let single = single_messages(bsp, args.single_messages, args.reps.min(5))?;
    Ok((both / 2.0, single))
}

/// The same traffic as the combining measurement, one ipl message per packet, both ways at
/// once: packets per second per process (median over `reps`).
fn single_messages(bsp: &mut Bsp, n: u32, reps: usize) -> Result<f64, AnyError> {
    let ibis = bsp.ibis().clone();
    let other_node = ibis.pool().wait_closed()?[1 - bsp.pid()].clone();
    let ty = PortType::builder()
        .connection(Connection::ManyToOne)
        .build();
    let rp = ibis.receive_port(&ty, "bench/one-message-per-packet")?;
    let sp = ibis.send_port(&ty)?;
    sp.connect(&other_node, "bench/one-message-per-packet")?;
    let mut rates = Vec::new();
    for _ in 0..reps {
        bsp.sync()?;
        let t = Instant::now();
        let secs = std::thread::scope(|s| -> Result<f64, AnyError> {
            let reader = s.spawn(|| -> Result<u64, ipl::Error> {
                let mut check = 0u64;
                for _ in 0..n {
                    let mut m = rp.receive()?;
                    let pkt: Pkt = m.read()?;
                    m.finish();
                    check = check.wrapping_add(pkt.key);
                }
                Ok(check)
            });
            for i in 0..n {
                let mut w = sp.message();
                w.write(&Pkt {
                    key: u64::from(i),
                    value: f64::from(i),
                })?;
                w.finish()?;
            }
            let check = reader.join().map_err(|_| "the reader thread panicked")??;
            if check != (0..u64::from(n)).sum::<u64>() {
                return Err("single messages arrived wrong".into());
            }
            Ok(t.elapsed().as_secs_f64())
        })?;
        rates.push(f64::from(n) / secs);
    }
    let mine = median(rates);
    Ok(bsp.all_reduce(mine, Op::Sum)? / 2.0)
}

/// Bisseling's `bspbench`: `r` from DAXPY, then the time of h-relations of single-word puts
/// for h = 0..=H.
fn probe(bsp: &mut Bsp, args: &Args) -> Result<ProbeFigures, AnyError> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let rate = probe::daxpy_rate(DAXPY_LEN, args.probe_iters);
    let rates = bsp.all_gather(&rate)?;
    let r = rates.iter().sum::<f64>() / p as f64;
    let max_h = args.max_h;
    let dest = bsp.register(vec![0.0f64; 2 * max_h + p])?;
    bsp.sync()?;
    let src: Vec<f64> = (0..max_h).map(|i| i as f64).collect();
    let mut t = Vec::with_capacity(max_h + 1);
    for h in 0..=max_h {
        let places: Vec<(usize, usize)> = (0..h).map(|i| probe::destination(me, p, i)).collect();
        // One h-relation untimed, so that every connection and buffer it needs exists.
        for (i, &(to, at)) in places.iter().enumerate() {
            bsp.put(to, dest, at, &src[i..i + 1])?;
        }
        bsp.sync()?;
        let start = Instant::now();
        for _ in 0..args.probe_iters {
            for (i, &(to, at)) in places.iter().enumerate() {
                bsp.put(to, dest, at, &src[i..i + 1])?;
            }
            bsp.sync()?;
        }
        t.push(start.elapsed().as_secs_f64() / f64::from(args.probe_iters));
    }
    Ok(ProbeFigures {
        procs: p as u32,
        r,
        t,
    })
}
