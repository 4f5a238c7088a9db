//! Essential trees: the parts of a process's oct-tree that another process needs.
//!
//! The sender walks its local tree (centres of mass computed) once per receiving process, as
//! the force walk does for one body, but testing a cell against the receiver's whole region:
//! a cell whose centre of mass is farther from every point of the region than the cell's
//! critical radius (`size / theta + delta`, the opening criterion of [`crate::force`]) is
//! sent as one point mass; otherwise its children are visited, and the bodies of a leaf that
//! cannot be accepted are sent one by one. Every body of the receiver would accept each sent
//! cell in its own walk, so the receiver loses nothing it would not approximate anyway.
//!
//! The receiver builds one tree over its local bodies and all received items
//! ([`LocalEssentialTree`]) and computes forces on its local bodies only; received items are
//! sources, never targets.

use crate::body::{Body, PointMass};
use crate::force::{self, ForceParams};
use crate::geom::Aabb;
use crate::tree::Tree;
use serde::{Deserialize, Serialize};

/// What one process sends another: accepted cells as point masses (centre of mass and total
/// mass), and the bodies of leaves that had to be opened.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EssentialTree {
    /// Cells well separated from the receiver's region.
    pub cells: Vec<PointMass>,
    /// Bodies of opened leaves.
    pub bodies: Vec<PointMass>,
}

impl EssentialTree {
    /// Number of items (cells plus bodies).
    pub fn len(&self) -> usize {
        self.cells.len() + self.bodies.len()
    }

    /// True when nothing is to be sent.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.bodies.is_empty()
    }

    /// Total mass of the items: the mass of every body of the sender, once.
    pub fn mass(&self) -> f64 {
        self.cells.iter().chain(&self.bodies).map(|p| p.mass).sum()
    }

    /// All items, cells first.
    pub fn items(&self) -> impl Iterator<Item = &PointMass> {
        self.cells.iter().chain(&self.bodies)
    }
}

/// The essential tree of `tree` for a process whose bodies lie in `remote` (its ORB region,
/// or better the tighter bounding box of its bodies), with opening angle `theta`.
///
/// The tree's centres of mass must be computed. An empty `remote` box needs nothing.
pub fn essential_tree(tree: &Tree, remote: &Aabb, theta: f64) -> EssentialTree {
    let mut out = EssentialTree::default();
    if remote.is_empty() {
        return out;
    }
    let nodes = tree.nodes();
    let mut i = 0;
    while i < nodes.len() {
        let n = &nodes[i];
        let crit = n.critical_radius(theta);
        if remote.distance2_to(n.com) > crit * crit {
            out.cells.push(PointMass {
                pos: n.com,
                mass: n.mass,
            });
            i = n.next as usize;
        } else if n.leaf {
            out.bodies.extend_from_slice(&tree.points()[n.slots()]);
            i = n.next as usize;
        } else {
            i += 1;
        }
    }
    out
}

/// A tree over a process's local bodies plus the essential trees it received: its view of
/// the global tree.
#[derive(Clone, Debug)]
pub struct LocalEssentialTree {
    tree: Tree,
    local_slots: Vec<u32>,
}

impl LocalEssentialTree {
    /// Builds the tree over `local` bodies and `received` items, at most `max_leaf` points
    /// per leaf. Centres of mass are computed by [`LocalEssentialTree::compute_centres_of_mass`].
    pub fn build(
        local: &[Body],
        received: &[EssentialTree],
        max_leaf: usize,
    ) -> LocalEssentialTree {
        let mut points: Vec<PointMass> = Vec::with_capacity(
            local.len() + received.iter().map(EssentialTree::len).sum::<usize>(),
        );
        points.extend(local.iter().map(Body::point_mass));
        for e in received {
            points.extend(e.items().copied());
        }
        let tree = Tree::build(&points, max_leaf);
        let mut local_slots = tree.slots_of_inputs();
        local_slots.truncate(local.len());
        LocalEssentialTree { tree, local_slots }
    }

    /// The tree of a process that received nothing: its local tree itself, built by
    /// [`crate::tree::build_body_tree`] (which put the local bodies in tree order, so local
    /// body `i` is slot `i`), with its centres of mass computed. The same tree as
    /// [`LocalEssentialTree::build`] with no received items would give, without building it
    /// again.
    pub fn from_body_tree(tree: Tree) -> LocalEssentialTree {
        let local_slots = (0..tree.len() as u32).collect();
        LocalEssentialTree { tree, local_slots }
    }

    /// The centre-of-mass phase over local and received points.
    pub fn compute_centres_of_mass(&mut self) {
        self.tree.compute_centres_of_mass();
    }

    /// Forces on the `local` bodies given to [`LocalEssentialTree::build`] (same order);
    /// returns the total number of interactions.
    ///
    /// # Panics
    /// When `local` has a different length than at build time.
    pub fn compute_forces(
        &self,
        local: &mut [Body],
        params: &ForceParams,
        pool: Option<&rayon::ThreadPool>,
    ) -> u64 {
        assert_eq!(
            local.len(),
            self.local_slots.len(),
            "local bodies changed since build"
        );
        force::compute_forces(&self.tree, local, |i| self.local_slots[i], params, pool)
    }

    /// The underlying tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::Vec3;
    use crate::plummer;
    use crate::tree::build_body_tree;

    fn local_tree(n: usize, seed: u64) -> (Vec<Body>, Tree) {
        let mut bodies = plummer::generate(n, seed);
        let mut tree = build_body_tree(&mut bodies, 10);
        tree.compute_centres_of_mass();
        (bodies, tree)
    }

    #[test]
    fn every_body_is_accounted_for_exactly_once() {
        let (bodies, tree) = local_tree(1000, 1);
        let total: f64 = bodies.iter().map(|b| b.mass).sum();
        for remote in [
            Aabb::new(Vec3::new(0.5, 0.5, 0.5), Vec3::new(1.0, 1.0, 1.0)),
            Aabb::new(Vec3::new(5.0, -1.0, -1.0), Vec3::new(6.0, 1.0, 1.0)),
            Aabb::new(Vec3::new(-0.1, -0.1, -0.1), Vec3::new(0.1, 0.1, 0.1)),
        ] {
            let e = essential_tree(&tree, &remote, 0.5);
            assert!(
                (e.mass() - total).abs() < 1e-12,
                "mass {} vs {total}",
                e.mass()
            );
            assert!(e.len() < bodies.len());
        }
    }

    #[test]
    fn far_region_gets_the_root_and_covering_region_gets_all_bodies() {
        let (bodies, tree) = local_tree(500, 2);
        let far = Aabb::new(
            Vec3::new(1e3, 1e3, 1e3),
            Vec3::new(1e3 + 1.0, 1e3 + 1.0, 1e3 + 1.0),
        );
        let e = essential_tree(&tree, &far, 0.5);
        assert_eq!((e.cells.len(), e.bodies.len()), (1, 0));
        let all = Aabb::new(Vec3::new(-1e3, -1e3, -1e3), Vec3::new(1e3, 1e3, 1e3));
        let e = essential_tree(&tree, &all, 0.5);
        assert_eq!((e.cells.len(), e.bodies.len()), (0, bodies.len()));
        assert!(essential_tree(&tree, &Aabb::EMPTY, 0.5).is_empty());
    }

    #[test]
    fn sent_cells_are_accepted_by_every_point_of_the_region() {
        let (_, tree) = local_tree(2000, 3);
        let remote = Aabb::new(Vec3::new(0.3, -0.2, -0.2), Vec3::new(0.8, 0.4, 0.3));
        let theta = 0.6;
        let e = essential_tree(&tree, &remote, theta);
        assert!(!e.cells.is_empty());
        // A grid over the region, faces included, stands for the receiver's bodies.
        let k = 6;
        let mut probes = Vec::new();
        for i in 0..=k {
            for j in 0..=k {
                for l in 0..=k {
                    let f = |t: usize| t as f64 / k as f64;
                    let e = remote.extent();
                    probes.push(remote.min + Vec3::new(e.x * f(i), e.y * f(j), e.z * f(l)));
                }
            }
        }
        for n in tree.nodes() {
            let sent = e.cells.iter().any(|c| c.pos == n.com && c.mass == n.mass);
            if sent {
                for &p in &probes {
                    assert!((n.com - p).norm() > n.critical_radius(theta));
                }
            }
        }
    }

    #[test]
    fn a_body_tree_without_received_items_is_the_same_tree() {
        let (mut bodies, tree) = local_tree(700, 5);
        let mut built = LocalEssentialTree::build(&bodies, &[], 10);
        built.compute_centres_of_mass();
        let reused = LocalEssentialTree::from_body_tree(tree);
        assert_eq!(built.tree().nodes(), reused.tree().nodes());
        assert_eq!(built.tree().points(), reused.tree().points());
        let mut again = bodies.clone();
        let params = ForceParams {
            theta: 0.5,
            eps: 0.01,
        };
        built.compute_forces(&mut bodies, &params, None);
        reused.compute_forces(&mut again, &params, None);
        assert_eq!(bodies, again);
    }

    #[test]
    fn serde_form_round_trips() {
        let (_, tree) = local_tree(300, 4);
        let remote = Aabb::new(Vec3::new(0.2, 0.2, 0.2), Vec3::new(0.6, 0.6, 0.6));
        let e = essential_tree(&tree, &remote, 0.5);
        let text = serde_json::to_string(&e).unwrap();
        let back: EssentialTree = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e);
    }
}
