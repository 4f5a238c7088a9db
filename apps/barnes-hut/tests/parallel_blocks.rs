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
