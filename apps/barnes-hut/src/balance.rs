//! Load checking: when and where the ORB decomposition must be rebalanced.
//!
//! A process's load is the summed cost (interaction count of the last force computation) of
//! its bodies. The decomposition is rebalanced when the most loaded process carries more
//! than `threshold` times the mean load. Only the subtrees that must be re-split are, as in
//! the reference code, which finds the minimum ORB level that needs balancing.

use crate::orb::Orb;

/// The imbalance `max / mean` of `loads`; 1 for no processes or no load at all.
pub fn imbalance(loads: &[u64]) -> f64 {
    let total: u64 = loads.iter().sum();
    if loads.is_empty() || total == 0 {
        return 1.0;
    }
    let max = *loads.iter().max().expect("loads is not empty") as f64;
    max * loads.len() as f64 / total as f64
}

/// True when the imbalance of `loads` exceeds `threshold` (for example 1.1 for 10%).
pub fn needs_rebalance(loads: &[u64], threshold: f64) -> bool {
    imbalance(loads) > threshold
}

/// The ORB subtrees to re-split (node indices, for [`crate::orb::OrbBuilder::rebalance`]) so
/// that no process ends up above `threshold` times the mean load, given per-process `loads`
/// measured with the current decomposition. Empty when no process is above it.
///
/// Re-splitting a subtree evens the loads inside it but cannot move load across its
/// boundary, so a subtree is chosen only where one of its two halves carries more than
/// `threshold` times the global mean per process; otherwise the search goes down into both
/// halves. Everything chosen is as deep in the tree, and so as cheap to rebalance, as it can be.
///
/// # Panics
/// When `loads` does not have one entry per process of `orb`.
pub fn subtrees_to_rebalance(orb: &Orb, loads: &[u64], threshold: f64) -> Vec<usize> {
    assert_eq!(loads.len(), orb.nprocs(), "one load per process");
    let total: u64 = loads.iter().sum();
    if total == 0 {
        return Vec::new();
    }
    let limit = threshold * total as f64 / loads.len() as f64;
    let nodes = orb.nodes();
    let mean_of = |i: usize| -> f64 {
        let n = &nodes[i];
        let sum: u64 = loads[n.first_proc..n.first_proc + n.nprocs].iter().sum();
        sum as f64 / n.nprocs as f64
    };
    let mut chosen = Vec::new();
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let Some(s) = nodes[i].split else { continue };
        if mean_of(s.lower) > limit || mean_of(s.upper) > limit {
            chosen.push(i);
        } else {
            stack.push(s.upper);
            stack.push(s.lower);
        }
    }
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orb::{bounding_box, decompose, OrbBuilder, DEFAULT_BINS};
    use crate::plummer;

    #[test]
    fn imbalance_is_max_over_mean() {
        assert_eq!(imbalance(&[10, 10, 10, 10]), 1.0);
        assert_eq!(imbalance(&[20, 10, 5, 5]), 2.0);
        assert_eq!(imbalance(&[]), 1.0);
        assert_eq!(imbalance(&[0, 0]), 1.0);
        assert!(needs_rebalance(&[12, 8], 1.1));
        assert!(!needs_rebalance(&[105, 95], 1.1));
    }

    #[test]
    fn chooses_the_deepest_sufficient_subtrees() {
        let bodies = plummer::generate(4000, 3);
        let orb = decompose(&bodies, bounding_box(&bodies), 8).unwrap();
        // Balanced: nothing to do.
        assert!(subtrees_to_rebalance(&orb, &[100; 8], 1.1).is_empty());
        // One process heavy, its sibling light: the pair's node suffices.
        let loads = [150, 50, 100, 100, 100, 100, 100, 100];
        let chosen = subtrees_to_rebalance(&orb, &loads, 1.1);
        assert_eq!(chosen.len(), 1);
        let n = orb.nodes()[chosen[0]];
        assert_eq!((n.first_proc, n.nprocs), (0, 2));
        // The whole lower half heavy: only the root can move load across.
        let loads = [150, 150, 150, 150, 50, 50, 50, 50];
        assert_eq!(subtrees_to_rebalance(&orb, &loads, 1.1), vec![0]);
    }

    #[test]
    fn rebalancing_the_chosen_subtrees_brings_loads_under_the_threshold() {
        let mut bodies = plummer::generate(4000, 4);
        for b in &mut bodies {
            b.cost = 100;
        }
        let orb = decompose(&bodies, bounding_box(&bodies), 6).unwrap();
        // Bodies of process 4 become four times as expensive.
        for b in &mut bodies {
            if orb.owner(b.pos) == 4 {
                b.cost = 400;
            }
        }
        let loads = orb.loads(&bodies);
        assert!(needs_rebalance(&loads, 1.2));
        let chosen = subtrees_to_rebalance(&orb, &loads, 1.2);
        assert!(!chosen.is_empty());
        let rebuilt = OrbBuilder::rebalance(&orb, &chosen, DEFAULT_BINS)
            .unwrap()
            .run_local(bodies.iter().map(|b| (b.pos, b.weight())));
        let after = rebuilt.loads(&bodies);
        assert!(!needs_rebalance(&after, 1.2), "loads after: {after:?}");
    }
}
