//! The parallel algorithm with P processes simulated as P slices in one process: ORB
//! decomposition, migration, local trees, essential-tree exchange (through the serde form)
//! and forces on local bodies, checked against the sequential tree code and direct summation.

use barnes_hut::body::Body;
use barnes_hut::essential::{essential_tree, EssentialTree, LocalEssentialTree};
use barnes_hut::force::{direct_forces, ForceParams};
use barnes_hut::integrate::{SimParams, Simulation};
use barnes_hut::migrate::{arrive, depart};
use barnes_hut::orb::{bounding_box, decompose};
use barnes_hut::tree::build_body_tree;
use barnes_hut::Vec3;
use std::collections::HashMap;

const N: usize = 2000;
const MAX_LEAF: usize = 10;

fn params() -> ForceParams {
    SimParams::default().force
}

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

fn accelerations(bodies: &[Body]) -> HashMap<u64, Vec3> {
    bodies.iter().map(|b| (b.id, b.acc)).collect()
}

/// Sequential tree forces; the bodies come back with their costs.
fn sequential(bodies: Vec<Body>) -> Vec<Body> {
    let p = SimParams::default();
    let mut sim = Simulation::new(bodies, p).unwrap();
    sim.compute_forces();
    sim.into_bodies()
}

/// One force phase of the parallel algorithm on `p` simulated processes.
fn parallel(bodies: &[Body], p: usize) -> (Vec<Body>, Vec<usize>) {
    let orb = decompose(bodies, bounding_box(bodies), p).unwrap();
    // Bodies start scattered round-robin and migrate to the owners of their regions.
    let mut held: Vec<Vec<Body>> = vec![Vec::new(); p];
    for (i, b) in bodies.iter().enumerate() {
        held[i % p].push(*b);
    }
    let mut mail: Vec<Vec<Body>> = vec![Vec::new(); p];
    for (me, local) in held.iter_mut().enumerate() {
        for d in depart(&orb, me, local) {
            mail[d.dest].extend(d.bodies);
        }
    }
    for (me, local) in held.iter_mut().enumerate() {
        arrive(local, mail[me].drain(..));
    }
    // Local trees, then essential trees for every other process's region.
    let regions = orb.regions();
    let mut inbox: Vec<Vec<EssentialTree>> = vec![Vec::new(); p];
    for (me, local) in held.iter_mut().enumerate() {
        let mut tree = build_body_tree(local, MAX_LEAF);
        tree.compute_centres_of_mass();
        for (dest, region) in regions.iter().enumerate() {
            if dest != me {
                let e = essential_tree(&tree, region, params().theta);
                // Items travel in their serialized form.
                let wire = serde_json::to_vec(&e).unwrap();
                inbox[dest].push(serde_json::from_slice(&wire).unwrap());
            }
        }
    }
    let mut sent = vec![0usize; p];
    let mut out = Vec::new();
    for (me, mut local) in held.into_iter().enumerate() {
        sent[me] = inbox[me].iter().map(EssentialTree::len).sum();
        let mut let_tree = LocalEssentialTree::build(&local, &inbox[me], MAX_LEAF);
        let_tree.compute_centres_of_mass();
        let_tree.compute_forces(&mut local, &params(), None);
        assert!(local.iter().all(|b| orb.owner(b.pos) == me));
        out.extend(local);
    }
    (out, sent)
}

#[test]
fn essential_tree_forces_match_sequential_and_direct_for_one_to_four_processes() {
    let initial = barnes_hut::plummer::generate(N, 2024);
    let seq = sequential(initial.clone());
    let seq_acc = accelerations(&seq);
    let exact: HashMap<u64, Vec3> = seq
        .iter()
        .zip(direct_forces(&seq, params().eps))
        .map(|(b, (a, _))| (b.id, a))
        .collect();
    let seq_err = median_relative_error(&seq_acc, &exact);
    assert!(seq_err < 0.01, "sequential vs direct: {seq_err}");
    for p in 1..=4 {
        // Costs of the sequential pass weight the decomposition, as in a running simulation.
        let (par, sent) = parallel(&seq, p);
        assert_eq!(par.len(), N);
        let par_acc = accelerations(&par);
        let vs_seq = median_relative_error(&par_acc, &seq_acc);
        let vs_direct = median_relative_error(&par_acc, &exact);
        println!(
            "p = {p}: median relative error vs sequential {vs_seq:.2e}, vs direct {vs_direct:.2e}, \
             sequential vs direct {seq_err:.2e}, essential items received {sent:?}"
        );
        assert!(vs_seq < 0.01, "p = {p}: essential vs sequential {vs_seq}");
        assert!(vs_direct < 0.01, "p = {p}: essential vs direct {vs_direct}");
        if p == 1 {
            // One process has the whole tree: the same walk, the same numbers.
            assert_eq!(vs_seq, 0.0);
        } else {
            // Essential trees are much smaller than sending every body to every process.
            assert!(
                sent.iter().all(|&s| s > 0 && s < N),
                "items received: {sent:?}"
            );
        }
    }
}

#[test]
fn orb_assigns_every_body_once_with_balanced_costs() {
    let bodies = sequential(barnes_hut::plummer::generate(N, 77));
    for p in 1..=4 {
        let orb = decompose(&bodies, bounding_box(&bodies), p).unwrap();
        let owners = orb.assign(&bodies);
        let mut count = vec![0usize; p];
        for &o in &owners {
            count[o] += 1;
        }
        assert_eq!(count.iter().sum::<usize>(), N);
        let loads = orb.loads(&bodies);
        let imbalance = barnes_hut::balance::imbalance(&loads);
        assert!(imbalance < 1.01, "p = {p}: loads {loads:?}");
    }
}

/// The bodies of `p` simulated processes after `steps` leapfrog steps of the parallel
/// algorithm: bounds update, migration, load check with subtree rebalancing, local trees,
/// essential-tree exchange, forces on local bodies, update.
fn parallel_run(
    initial: &[Body],
    p: usize,
    params: &SimParams,
    steps: usize,
) -> (Vec<Body>, usize) {
    use barnes_hut::balance::{needs_rebalance, subtrees_to_rebalance};
    use barnes_hut::integrate::{drift, kick};
    use barnes_hut::orb::{sum_partials, Orb, OrbBuilder, DEFAULT_BINS};
    use barnes_hut::Aabb;

    fn global_bounds(held: &[Vec<Body>]) -> Aabb {
        held.iter()
            .map(|h| bounding_box(h))
            .fold(Aabb::EMPTY, Aabb::union)
    }
    /// Every process runs the same builder; the sum of partial histograms is the exchange.
    fn run_builder(held: &[Vec<Body>], builder: OrbBuilder) -> Orb {
        let mut builders = vec![builder; held.len()];
        while !builders[0].is_done() {
            let partials: Vec<_> = builders
                .iter()
                .zip(held)
                .map(|(b, h)| b.partial_histograms(h.iter().map(|b| (b.pos, b.weight()))))
                .collect();
            let summed = sum_partials(&partials);
            for b in &mut builders {
                b.advance(&summed).unwrap();
            }
        }
        builders.pop().unwrap().finish().unwrap()
    }
    fn migrate(orb: &Orb, held: &mut [Vec<Body>]) {
        let mut mail: Vec<Vec<Body>> = vec![Vec::new(); held.len()];
        for (me, local) in held.iter_mut().enumerate() {
            for d in depart(orb, me, local) {
                mail[d.dest].extend(d.bodies);
            }
        }
        for (local, arrivals) in held.iter_mut().zip(mail) {
            arrive(local, arrivals);
        }
    }
    fn forces(orb: &Orb, held: &mut [Vec<Body>], params: &SimParams) {
        let p = held.len();
        let mut inbox: Vec<Vec<EssentialTree>> = vec![Vec::new(); p];
        // The tight bounding boxes of the receivers' bodies, as exchanged for the bounds update.
        let boxes: Vec<_> = held.iter().map(|h| bounding_box(h)).collect();
        for (me, local) in held.iter_mut().enumerate() {
            let mut tree = build_body_tree(local, params.max_leaf);
            tree.compute_centres_of_mass();
            for (dest, b) in boxes.iter().enumerate() {
                if dest != me {
                    inbox[dest].push(essential_tree(&tree, b, params.force.theta));
                }
            }
        }
        for (me, local) in held.iter_mut().enumerate() {
            assert!(local.iter().all(|b| orb.owner(b.pos) == me));
            let mut t = LocalEssentialTree::build(local, &inbox[me], params.max_leaf);
            t.compute_centres_of_mass();
            t.compute_forces(local, &params.force, None);
        }
    }

    let mut held: Vec<Vec<Body>> = vec![Vec::new(); p];
    for (i, b) in initial.iter().enumerate() {
        held[i % p].push(*b);
    }
    let mut orb = run_builder(&held, OrbBuilder::new(global_bounds(&held), p).unwrap());
    migrate(&orb, &mut held);
    forces(&orb, &mut held, params);
    let mut rebalances = 0;
    for _ in 0..steps {
        for local in held.iter_mut() {
            kick(local, params.dtime / 2.0);
            drift(local, params.dtime);
        }
        orb.set_bounds(global_bounds(&held));
        migrate(&orb, &mut held);
        let loads: Vec<u64> = held
            .iter()
            .map(|h| h.iter().map(Body::weight).sum())
            .collect();
        // A tight threshold, so that the run exercises rebalancing.
        if needs_rebalance(&loads, 1.02) {
            let subtrees = subtrees_to_rebalance(&orb, &loads, 1.02);
            orb = run_builder(
                &held,
                OrbBuilder::rebalance(&orb, &subtrees, DEFAULT_BINS).unwrap(),
            );
            migrate(&orb, &mut held);
            rebalances += 1;
        }
        forces(&orb, &mut held, params);
        for local in held.iter_mut() {
            kick(local, params.dtime / 2.0);
        }
    }
    (held.into_iter().flatten().collect(), rebalances)
}

#[test]
fn simulated_parallel_run_follows_the_sequential_run() {
    let initial = barnes_hut::plummer::generate(600, 5);
    let params = SimParams {
        tstop: 0.15,
        ..SimParams::default()
    };
    let mut sim = Simulation::new(initial.clone(), params).unwrap();
    sim.run();
    let seq: HashMap<u64, Vec3> = sim.bodies().iter().map(|b| (b.id, b.pos)).collect();
    for p in [2, 3] {
        let (par, rebalances) = parallel_run(&initial, p, &params, params.steps());
        assert_eq!(par.len(), initial.len());
        let par: HashMap<u64, Vec3> = par.iter().map(|b| (b.id, b.pos)).collect();
        let mut max_diff: f64 = 0.0;
        for (id, x) in &par {
            max_diff = max_diff.max((*x - seq[id]).norm());
        }
        println!("p = {p}: largest position difference {max_diff:.2e} after {} steps, {rebalances} rebalances", params.steps());
        // Forces agree to about 1e-4, so over six steps positions agree to far better than
        // the typical distance between bodies (about 0.1).
        assert!(
            max_diff < 1e-4,
            "p = {p}: positions differ by up to {max_diff}"
        );
        assert!(
            rebalances > 0,
            "p = {p}: the decomposition was never rebalanced"
        );
    }
}
