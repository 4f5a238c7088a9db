//! The oct-tree: construction and the centre-of-mass pass.
//!
//! The tree is a flat arena of [`Node`]s in depth-first pre-order. A node's first child
//! is the next node in the arena and every node knows the index just past its subtree
//! ([`Node::next`]), so a force walk is a single forward scan that either descends
//! (`i + 1`) or skips a subtree (`next`), with no stack and no pointers.
//!
//! Construction sorts the points along the Morton (Z-order) curve of the root cube and
//! then splits sorted ranges by octant: every cell owns a contiguous range of the sorted
//! points, leaves hold at most `max_leaf` points, and consecutive points are close in
//! space, which is what makes the force phase cache-friendly. The result is the same
//! oct-tree as inserting the bodies one by one and subdividing every cell that holds
//! more than `max_leaf` of them (the method of the sequential code), except that cells
//! cannot be split beyond [`MAX_DEPTH`] levels: a leaf there can hold more points when
//! more than `max_leaf` of them (nearly) coincide.

use crate::body::{Body, PointMass};
use crate::geom::{Aabb, Vec3};

/// Subdivision levels below the root that the 63-bit Morton keys can express (21 bits per axis).
pub const MAX_DEPTH: u32 = 21;

/// One cell of the oct-tree.
///
/// The fields read by the force walk come first and the node fills exactly one 64-byte
/// cache line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    /// Centre of mass of the points below (valid after [`Tree::compute_centres_of_mass`]).
    pub com: Vec3,
    /// Total mass of the points below (valid after [`Tree::compute_centres_of_mass`]).
    pub mass: f64,
    /// Edge length of the cubic cell.
    pub size: f64,
    /// Distance from the geometric centre of the cell to its centre of mass (valid after
    /// [`Tree::compute_centres_of_mass`]); it enters the opening criterion so that a cell
    /// whose mass sits in one corner is not accepted too early.
    pub delta: f64,
    /// Index of the first node after this node's subtree.
    pub next: u32,
    /// First slot (index into [`Tree::points`]) of the points below this node.
    pub first: u32,
    /// Number of points below this node.
    pub count: u32,
    /// Whether this node is a leaf (its points are interacted with one by one).
    pub leaf: bool,
}

impl Node {
    /// The range of slots of the points below this node.
    pub fn slots(&self) -> std::ops::Range<usize> {
        self.first as usize..(self.first + self.count) as usize
    }

    /// The radius beyond which a point may take this cell as a single mass: the cell is
    /// well separated from a point at distance `d` from its centre of mass when
    /// `d > size / theta + delta` (Barnes' modified opening criterion).
    #[inline]
    pub fn critical_radius(&self, theta: f64) -> f64 {
        self.size / theta + self.delta
    }
}

/// A Barnes-Hut oct-tree over a set of point masses.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    nodes: Vec<Node>,
    centres: Vec<Vec3>,
    points: Vec<PointMass>,
    order: Vec<u32>,
    max_leaf: usize,
}

impl Tree {
    /// Builds the tree over `points` with at most `max_leaf` points per leaf (see the module
    /// documentation for the one exception). Masses and centres of mass are not computed
    /// here but by [`Tree::compute_centres_of_mass`], the next phase.
    ///
    /// # Panics
    /// When `max_leaf` is zero or there are `u32::MAX` points or more.
    pub fn build(input: &[PointMass], max_leaf: usize) -> Tree {
        assert!(max_leaf > 0, "a leaf must be allowed at least one point");
        assert!(
            input.len() < u32::MAX as usize,
            "too many points for 32-bit slots"
        );
        let mut tree = Tree {
            max_leaf,
            ..Tree::default()
        };
        if input.is_empty() {
            return tree;
        }
        let (corner, size) = root_cube(input);
        let scale = (1u64 << MAX_DEPTH) as f64 / size;
        let mut keyed: Vec<(u64, u32)> = input
            .iter()
            .enumerate()
            .map(|(i, p)| (morton_key(p.pos, corner, scale), i as u32))
            .collect();
        // Ties broken by input index keep the result independent of the sort algorithm.
        keyed.sort_unstable();
        tree.order = keyed.iter().map(|&(_, i)| i).collect();
        tree.points = tree.order.iter().map(|&i| input[i as usize]).collect();
        let keys: Vec<u64> = keyed.iter().map(|&(k, _)| k).collect();
        // An oct-tree over n points with at most max_leaf per leaf has few more than 2n/max_leaf nodes.
        let estimate = 2 * input.len() / max_leaf + 16;
        tree.nodes.reserve(estimate);
        tree.centres.reserve(estimate);
        let half = size / 2.0;
        let centre = corner + Vec3::new(half, half, half);
        tree.build_cell(&keys, 0, input.len(), 0, centre, size);
        tree
    }

    fn build_cell(
        &mut self,
        keys: &[u64],
        start: usize,
        end: usize,
        depth: u32,
        centre: Vec3,
        size: f64,
    ) {
        let index = self.nodes.len();
        let leaf = end - start <= self.max_leaf || depth == MAX_DEPTH;
        self.nodes.push(Node {
            com: centre,
            mass: 0.0,
            size,
            delta: 0.0,
            next: 0,
            first: start as u32,
            count: (end - start) as u32,
            leaf,
        });
        self.centres.push(centre);
        if !leaf {
            let shift = 3 * (MAX_DEPTH - 1 - depth);
            let quarter = size / 4.0;
            let mut lo = start;
            while lo < end {
                // Keys are sorted and share all bits above `shift` inside this cell, so each
                // octant is one contiguous run.
                let octant = (keys[lo] >> shift) & 7;
                let hi = lo + keys[lo..end].partition_point(|&k| (k >> shift) & 7 <= octant);
                let offset = Vec3::new(
                    if octant & 4 != 0 { quarter } else { -quarter },
                    if octant & 2 != 0 { quarter } else { -quarter },
                    if octant & 1 != 0 { quarter } else { -quarter },
                );
                self.build_cell(keys, lo, hi, depth + 1, centre + offset, size / 2.0);
                lo = hi;
            }
        }
        self.nodes[index].next = self.nodes.len() as u32;
    }

    /// Computes mass, centre of mass and centre offset of every cell, bottom-up.
    ///
    /// Children follow their parent in the pre-order arena, so one backward scan sees every
    /// child before its parent.
    pub fn compute_centres_of_mass(&mut self) {
        for i in (0..self.nodes.len()).rev() {
            let node = self.nodes[i];
            let mut mass = 0.0;
            let mut moment = Vec3::ZERO;
            if node.leaf {
                for p in &self.points[node.slots()] {
                    mass += p.mass;
                    moment += p.pos * p.mass;
                }
            } else {
                let mut c = i + 1;
                while c < node.next as usize {
                    let child = &self.nodes[c];
                    mass += child.mass;
                    moment += child.com * child.mass;
                    c = child.next as usize;
                }
            }
            let centre = self.centres[i];
            // A massless cell has no centre of mass; its geometric centre stands in.
            let com = if mass > 0.0 {
                moment * (1.0 / mass)
            } else {
                centre
            };
            let n = &mut self.nodes[i];
            n.mass = mass;
            n.com = com;
            n.delta = (com - centre).norm();
        }
    }

    /// The cells in depth-first pre-order; the root is at index 0 (when there are points).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The points in tree order: the points of a cell are `points()[node.slots()]`.
    pub fn points(&self) -> &[PointMass] {
        &self.points
    }

    /// For each slot of [`Tree::points`], the index of that point in the input of [`Tree::build`].
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// For each input index, its slot in [`Tree::points`] (the inverse of [`Tree::order`]).
    pub fn slots_of_inputs(&self) -> Vec<u32> {
        let mut slots = vec![0u32; self.order.len()];
        for (slot, &i) in self.order.iter().enumerate() {
            slots[i as usize] = slot as u32;
        }
        slots
    }

    /// Geometric centre of cell `i`.
    pub fn centre(&self, i: usize) -> Vec3 {
        self.centres[i]
    }

    /// The cube of cell `i`.
    pub fn cell_box(&self, i: usize) -> Aabb {
        let h = self.nodes[i].size / 2.0;
        let c = self.centres[i];
        Aabb::new(c - Vec3::new(h, h, h), c + Vec3::new(h, h, h))
    }

    /// Number of points in the tree.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when the tree holds no point.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The largest number of points per leaf the tree was built with.
    pub fn max_leaf(&self) -> usize {
        self.max_leaf
    }
}

/// Builds the tree over `bodies` and reorders `bodies` into tree order, so that body `i`
/// sits in slot `i` of the tree and bodies that are close in space are close in memory.
///
/// This is the tree-construction phase of both the sequential code and each process of the
/// parallel one (over its local bodies).
pub fn build_body_tree(bodies: &mut Vec<Body>, max_leaf: usize) -> Tree {
    let points: Vec<PointMass> = bodies.iter().map(Body::point_mass).collect();
    let tree = Tree::build(&points, max_leaf);
    *bodies = tree.order().iter().map(|&i| bodies[i as usize]).collect();
    tree
}

/// The root cube: the bounding box of the points, made cubic and slightly enlarged so that
/// the largest coordinates still quantize inside it.
fn root_cube(points: &[PointMass]) -> (Vec3, f64) {
    let bounds = Aabb::around(points.iter().map(|p| p.pos));
    let e = bounds.extent();
    let mut size = e.x.max(e.y).max(e.z);
    let magnitude = bounds.min.norm().max(bounds.max.norm());
    // A cube of zero size (one point, or all points in one place) still needs a scale.
    size = size.max(magnitude * 1e-12).max(f64::MIN_POSITIVE.sqrt());
    size *= 1.0 + 1e-9;
    let mid = (bounds.min + bounds.max) * 0.5;
    let half = size / 2.0;
    (mid - Vec3::new(half, half, half), size)
}

/// The Morton key of `p`: 21 bits of each quantized coordinate, interleaved x, y, z from
/// the most significant bit down, so that the top three bits name the octant of the root.
#[inline]
fn morton_key(p: Vec3, corner: Vec3, scale: f64) -> u64 {
    let max = (1u64 << MAX_DEPTH) - 1;
    let q = |v: f64, c: f64| -> u64 {
        let x = ((v - c) * scale).floor();
        // `as` saturates NaN to 0 and clamps negatives; the min guards the top edge.
        (x.max(0.0) as u64).min(max)
    };
    (spread(q(p.x, corner.x)) << 2) | (spread(q(p.y, corner.y)) << 1) | spread(q(p.z, corner.z))
}

/// Spreads the low 21 bits of `v` so that bit i moves to bit 3i.
#[inline]
fn spread(v: u64) -> u64 {
    let mut x = v & 0x1f_ffff;
    x = (x | (x << 32)) & 0x001f_0000_0000_ffff;
    x = (x | (x << 16)) & 0x001f_0000_ff00_00ff;
    x = (x | (x << 8)) & 0x100f_00f0_0f00_f00f;
    x = (x | (x << 4)) & 0x10c3_0c30_c30c_30c3;
    x = (x | (x << 2)) & 0x1249_2492_4924_9249;
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer;

    fn points(n: usize, seed: u64) -> Vec<PointMass> {
        plummer::generate(n, seed)
            .iter()
            .map(|b| PointMass {
                pos: b.pos,
                mass: b.mass,
            })
            .collect()
    }

    #[test]
    fn spread_moves_bits_apart() {
        assert_eq!(spread(0b1), 0b1);
        assert_eq!(spread(0b11), 0b1001);
        assert_eq!(spread(0x1f_ffff), 0x1249_2492_4924_9249);
    }

    #[test]
    fn leaves_partition_points_and_respect_max_leaf() {
        let pts = points(3000, 9);
        for max_leaf in [1, 4, 10] {
            let tree = Tree::build(&pts, max_leaf);
            let mut covered = vec![0u32; pts.len()];
            for n in tree.nodes().iter().filter(|n| n.leaf) {
                assert!(n.count as usize <= max_leaf);
                for s in n.slots() {
                    covered[s] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c == 1));
            let mut order = tree.order().to_vec();
            order.sort_unstable();
            assert!(order.iter().enumerate().all(|(i, &o)| i as u32 == o));
        }
    }

    #[test]
    fn points_lie_in_their_cells() {
        let pts = points(2000, 2);
        let tree = Tree::build(&pts, 8);
        for (i, n) in tree.nodes().iter().enumerate() {
            let b = tree.cell_box(i);
            let slack = n.size * 1e-9;
            for p in &tree.points()[n.slots()] {
                assert!(
                    b.distance2_to(p.pos) <= slack * slack,
                    "point outside its cell"
                );
            }
            // Internal cells split into children that cover their range exactly.
            if !n.leaf {
                let mut c = i + 1;
                let mut next_slot = n.first;
                while c < n.next as usize {
                    let child = &tree.nodes()[c];
                    assert_eq!(child.first, next_slot);
                    assert!((child.size - n.size / 2.0).abs() < 1e-15 * n.size);
                    next_slot += child.count;
                    c = child.next as usize;
                }
                assert_eq!(next_slot, n.first + n.count);
            }
        }
    }

    #[test]
    fn centre_of_mass_of_root_matches_direct_sum() {
        let pts = points(1000, 4);
        let mut tree = Tree::build(&pts, 10);
        tree.compute_centres_of_mass();
        let m: f64 = pts.iter().map(|p| p.mass).sum();
        let mut c = Vec3::ZERO;
        for p in &pts {
            c += p.pos * (p.mass / m);
        }
        let root = tree.nodes()[0];
        assert!((root.mass - m).abs() < 1e-12);
        assert!((root.com - c).norm() < 1e-12);
        for n in tree.nodes() {
            assert!(n.delta <= n.size * 0.5 * 3f64.sqrt() * (1.0 + 1e-9));
        }
    }

    #[test]
    fn coincident_points_end_in_one_deep_leaf() {
        let pts = vec![
            PointMass {
                pos: Vec3::new(0.5, 0.5, 0.5),
                mass: 1.0
            };
            20
        ];
        let mut tree = Tree::build(&pts, 4);
        tree.compute_centres_of_mass();
        assert_eq!(tree.nodes()[0].mass, 20.0);
        assert_eq!(tree.nodes().iter().filter(|n| n.leaf).count(), 1);
    }

    #[test]
    fn empty_and_single_point_trees() {
        let mut t = Tree::build(&[], 10);
        t.compute_centres_of_mass();
        assert!(t.is_empty() && t.nodes().is_empty());
        let mut t = Tree::build(
            &[PointMass {
                pos: Vec3::new(1.0, 2.0, 3.0),
                mass: 2.0,
            }],
            10,
        );
        t.compute_centres_of_mass();
        assert_eq!(t.nodes().len(), 1);
        assert_eq!(t.nodes()[0].com, Vec3::new(1.0, 2.0, 3.0));
    }
}
