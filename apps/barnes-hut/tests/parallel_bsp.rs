//! The parallel method on `bsp` with P processes as threads (`bsp::run_local`), checked
//! against direct summation and the sequential simulation.

use barnes_hut::body::Body;
use barnes_hut::force::direct_forces;
use barnes_hut::integrate::{EnergyMethod, SimParams, Simulation};
use barnes_hut::parallel::{scatter, ParallelParams, ParallelStats, Process};
use barnes_hut::plummer;
use barnes_hut::Vec3;
use std::collections::HashMap;

/// Median of `|a - b| / |b|` over bodies matched by id.
fn median_relative_error(a: &HashMap<u64, Vec3>, b: &HashMap<u64, Vec3>) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut e: Vec<f64> = a
        .iter()
        .map(|(id, x)| (*x - b[id]).norm() / b[id].norm())
        .collect();
    e.sort_by(f64::total_cmp);
    e[e.len() / 2]
}

fn by_id(bodies: &[Body], f: impl Fn(&Body) -> Vec3) -> HashMap<u64, Vec3> {
    bodies.iter().map(|b| (b.id, f(b))).collect()
}

/// Runs `steps` steps of the parallel method on `p` threads from `initial` (held by
/// process 0 and scattered) and returns all bodies, ordered by id, with every process's
/// counts.
fn parallel(
    initial: &[Body],
    p: usize,
    params: ParallelParams,
    steps: usize,
) -> (Vec<Body>, Vec<ParallelStats>) {
    let results = bsp::run_local(p, |bsp| {
        let all = (bsp.pid() == 0).then(|| initial.to_vec());
        let mine = scatter(bsp, 0, all).expect("scatter");
        let mut proc = Process::new(bsp, mine, params).expect("decomposition");
        proc.compute_forces().expect("forces");
        for _ in 0..steps {
            proc.step().expect("step");
        }
        let stats = *proc.stats();
        Ok((proc.gather_bodies(0).expect("gather"), stats))
    })
    .expect("parallel run");
    let stats = results.iter().map(|(_, s)| *s).collect();
    let bodies = results
        .into_iter()
        .next()
        .and_then(|(b, _)| b)
        .expect("process 0 has the bodies");
    (bodies, stats)
}

#[test]
fn parallel_accelerations_match_direct_summation_and_the_sequential_code() {
    const N: usize = 2000;
    let initial = plummer::generate(N, 2024);
    let sim_params = SimParams::default();
    assert_eq!(sim_params.force.theta, 0.5);
    let mut sim = Simulation::new(initial.clone(), sim_params).unwrap();
    sim.compute_forces();
    let seq = sim.into_bodies();
    let seq_acc = by_id(&seq, |b| b.acc);
    let exact: HashMap<u64, Vec3> = seq
        .iter()
        .zip(direct_forces(&seq, sim_params.force.eps))
        .map(|(b, (a, _))| (b.id, a))
        .collect();
    let params = ParallelParams {
        sim: sim_params,
        ..ParallelParams::default()
    };
    for p in 1..=4 {
        let (par, stats) = parallel(&initial, p, params, 0);
        assert_eq!(par.len(), N);
        let par_acc = by_id(&par, |b| b.acc);
        let vs_seq = median_relative_error(&par_acc, &seq_acc);
        let vs_direct = median_relative_error(&par_acc, &exact);
        let items: Vec<u64> = stats.iter().map(|s| s.essential_items_received).collect();
        println!(
            "p = {p}: median relative error vs sequential {vs_seq:.2e}, vs direct \
             {vs_direct:.2e}; essential items received {items:?}"
        );
        assert!(vs_direct < 0.01, "p = {p}: parallel vs direct {vs_direct}");
        assert!(vs_seq < 0.01, "p = {p}: parallel vs sequential {vs_seq}");
        if p == 1 {
            // One process builds the sequential tree: the same numbers bit for bit.
            assert_eq!(vs_seq, 0.0);
        } else {
            // Every process needs something from the others, but far less than everything.
            assert!(
                items.iter().all(|&i| i > 0 && i < N as u64),
                "items: {items:?}"
            );
        }
    }
}

#[test]
fn every_body_is_owned_by_exactly_one_process_after_each_step() {
    const N: u64 = 1000;
    let initial = plummer::generate(N as usize, 31);
    let params = ParallelParams {
        // A tight threshold, so that the run rebalances.
        imbalance_threshold: 1.01,
        ..ParallelParams::default()
    };
    for p in [3, 4] {
        let per_process = bsp::run_local(p, |bsp| {
            let me = bsp.pid();
            let all = (me == 0).then(|| initial.clone());
            let mine = scatter(bsp, 0, all).expect("scatter");
            let mut proc = Process::new(bsp, mine, params).expect("decomposition");
            let mut held_per_step = Vec::new();
            for _ in 0..5 {
                proc.step().expect("step");
                let orb = proc.orb();
                // Every local body lies in this process's region.
                assert!(proc.bodies().iter().all(|b| orb.owner(b.pos) == me));
                held_per_step.push(proc.bodies().iter().map(|b| b.id).collect::<Vec<_>>());
            }
            Ok((held_per_step, proc.stats().rebalances))
        })
        .expect("parallel run");
        for step in 0..5 {
            let mut ids: Vec<u64> = per_process
                .iter()
                .flat_map(|(held, _)| held[step].iter().copied())
                .collect();
            ids.sort_unstable();
            assert_eq!(
                ids,
                (0..N).collect::<Vec<_>>(),
                "p = {p}, step {step}: bodies lost or held twice"
            );
        }
        let rebalances: Vec<u64> = per_process.iter().map(|(_, r)| *r).collect();
        assert!(rebalances[0] > 0, "p = {p}: never rebalanced");
        assert!(rebalances.iter().all(|&r| r == rebalances[0]));
    }
}

#[test]
fn a_short_parallel_run_follows_the_sequential_run() {
    let initial = plummer::generate(600, 5);
    let sim_params = SimParams {
        tstop: 0.15,
        ..SimParams::default()
    };
    let steps = sim_params.steps();
    assert_eq!(steps, 6);
    let mut sim = Simulation::new(initial.clone(), sim_params).unwrap();
    sim.run();
    let seq_energy = sim.energy(EnergyMethod::Direct);
    let seq = by_id(sim.bodies(), |b| b.pos);
    let params = ParallelParams {
        sim: sim_params,
        imbalance_threshold: 1.02,
        ..ParallelParams::default()
    };
    for p in 1..=4 {
        let (par, stats) = parallel(&initial, p, params, steps);
        assert_eq!(par.len(), initial.len());
        let max_diff = par
            .iter()
            .map(|b| (b.pos - seq[&b.id]).norm())
            .fold(0.0, f64::max);
        println!(
            "p = {p}: largest position difference {max_diff:.2e} after {steps} steps, {} rebalances",
            stats[0].rebalances
        );
        if p == 1 {
            assert_eq!(max_diff, 0.0, "one process is the sequential code");
        } else {
            // Forces agree to about 1e-4, so after six steps positions agree far better
            // than the typical distance between bodies (about 0.1).
            assert!(
                max_diff < 1e-4,
                "p = {p}: positions differ by up to {max_diff}"
            );
        }
    }
    // The energy collective sums the exact potential over processes.
    let energies = bsp::run_local(3, |bsp| {
        let all = (bsp.pid() == 0).then(|| initial.clone());
        let mine = scatter(bsp, 0, all).expect("scatter");
        let mut proc = Process::new(bsp, mine, params).expect("decomposition");
        proc.run().expect("run");
        Ok(proc.energy(EnergyMethod::Direct).expect("energy"))
    })
    .expect("parallel run");
    for e in &energies {
        assert_eq!(e, &energies[0], "every process gets the same energy");
    }
    let rel = ((energies[0].total() - seq_energy.total()) / seq_energy.total()).abs();
    assert!(rel < 1e-6, "energy {:?} vs {:?}", energies[0], seq_energy);
}

#[test]
fn threads_per_process_change_nothing_but_speed() {
    let initial = plummer::generate(800, 8);
    let one = ParallelParams::default();
    let two = ParallelParams {
        sim: SimParams {
            threads: 2,
            ..one.sim
        },
        ..one
    };
    let (a, _) = parallel(&initial, 2, one, 2);
    let (b, _) = parallel(&initial, 2, two, 2);
    assert_eq!(a, b);
}
