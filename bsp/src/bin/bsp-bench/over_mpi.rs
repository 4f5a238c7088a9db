//! Built with the `mpi` feature and started by `mpirun` with `IPL_DRIVER=mpi`, bsp-bench
//! measures an empty superstep of bsp over ipl's mpi driver next to `MPI_Barrier` in the same
//! processes: the same MPI library, transport and thread level (`MPI_THREAD_MULTIPLE`, which
//! ipl needs), the barrier on a duplicate of the world communicator. After an untimed warm-up of
//! as many calls of each as one measurement makes, each round times `--iters` back-to-back
//! supersteps and as many barriers, `--reps` times each (median), the superstep first in even
//! rounds and the barrier first in odd ones; the ratio is the median of per-round ratios. Pid 0
//! prints.
//!
//! `mpirun -n 2 --mca btl vader,self -x IPL_DRIVER=mpi target/release/bsp-bench`

use crate::{median, Args};
use ::mpi::traits::*;
use std::time::Instant;

/// Microseconds per call of `f` over `iters` calls, the median of `reps` timings.
fn per_call(
    iters: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        v.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    Ok(median(v))
}

/// A message with no payload each way with `partner`, its word in its tag, as the empty
/// superstep of two processes exchanges its count over ipl's word channel: the receive of any
/// tag posted (into room for the channel's largest message), the message sent, the receive
/// tested until done.
fn exchange_word(partner: &::mpi::topology::Process<'_>) {
    let mut got = [0u64; ipl::WordChannel::MAX_WORDS];
    let none: [u64; 0] = [];
    ::mpi::request::scope(|scope| {
        let mut req = partner.immediate_receive_into(scope, &mut got[..]);
        partner.send_with_tag(&none[..], 1);
        while let Err(pending) = req.test() {
            req = pending;
        }
    });
}

pub fn run(args: &Args) -> Result<(), String> {
    let cfg = ipl::Config::from_env().map_err(|e| e.to_string())?;
    let ibis = ipl::Ibis::join(cfg).map_err(|e| format!("join over MPI: {e}"))?;
    let mut bsp = bsp::Bsp::new(ibis).map_err(|e| e.to_string())?;
    let comm = ::mpi::topology::SimpleCommunicator::world().duplicate();
    let p = bsp.nprocs();
    let (mut sup, mut bar, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut exchanges, mut over_exchange) = (Vec::new(), Vec::new());
    // With two processes, the exchange of one word as the superstep makes it over MPI (see
    // `exchange_word`); with more, the superstep's butterfly has rounds of its own.
    let partner = (p == 2).then(|| comm.process_at_rank(1 - comm.rank()));
    // Untimed, as many calls of each as one measurement makes: connections are set up, caches
    // and the scheduler's placement of the processes settle before anything is timed (the
    // first of several measurements was up to a third slower than the ones after it).
    for _ in 0..args.iters as usize * args.reps {
        bsp.sync().map_err(|e| e.to_string())?;
    }
    for _ in 0..args.iters as usize * args.reps {
        comm.barrier();
    }
    for round in 0..args.rounds {
        let mut superstep = || {
            comm.barrier();
            per_call(args.iters as usize, args.reps, || {
                bsp.sync().map_err(|e| e.to_string())
            })
        };
        let barrier = || {
            comm.barrier();
            per_call(args.iters as usize, args.reps, || {
                comm.barrier();
                Ok(())
            })
        };
        // Each goes first in every other round, so that neither always meets the machine as
        // the other left it.
        let (s, b) = if round % 2 == 0 {
            let s = superstep()?;
            (s, barrier()?)
        } else {
            let b = barrier()?;
            (superstep()?, b)
        };
        sup.push(s);
        bar.push(b);
        ratios.push(s / b);
        if let Some(partner) = &partner {
            comm.barrier();
            let e = per_call(args.iters as usize, args.reps, || {
                exchange_word(partner);
                Ok(())
            })?;
            exchanges.push(e);
            over_exchange.push(s / e);
        }
    }
    if bsp.pid() == 0 {
        println!(
            "bsp over ipl's mpi driver next to MPI in the same {p} processes \
             (MPI_THREAD_MULTIPLE), {} rounds of {} repetitions of {} calls",
            args.rounds, args.reps, args.iters
        );
        println!(
            "empty superstep {:.2} us   MPI_Barrier {:.2} us   superstep/barrier {:.2}  (target <= 1.2)",
            median(sup),
            median(bar),
            median(ratios)
        );
        if !exchanges.is_empty() {
            // Not the reference of the target: what the superstep's MPI calls cost without
            // bsp and ipl around them, so that the rest of the superstep is theirs.
            println!(
                "  raw MPI exchanging a word in the tag as the superstep does (MPI_Irecv of any tag posted, MPI_Send of no payload, MPI_Test until done): {:.2} us, superstep/that {:.2}",
                median(exchanges),
                median(over_exchange)
            );
        }
    }
    // The duplicate is freed before ipl finalises MPI as the node leaves.
    drop(comm);
    bsp.ibis().clone().end().map_err(|e| e.to_string())
}
