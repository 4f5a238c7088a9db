//! Bounding-volume hierarchy over the scene's primitives.
//!
//! A binary tree of axis-aligned boxes built with the surface-area heuristic
//! over 16 bins, flattened into an array in depth-first order so that the
//! left child of node `i` is node `i + 1`. Traversal keeps its stack in a
//! fixed array: tracing a ray allocates nothing.

use crate::ray::Ray;
use crate::vec3::Vec3;

/// A primitive the hierarchy refers to: an index into the scene's spheres or
/// polygons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    /// Index into the scene's spheres.
    Sphere(u32),
    /// Index into the scene's polygons.
    Polygon(u32),
}

/// A primitive with its bounding box, as input to [`Bvh::build`].
#[derive(Clone, Copy, Debug)]
pub struct BuildItem {
    /// The primitive.
    pub prim: Prim,
    /// Lower corner of its bounding box.
    pub min: Vec3,
    /// Upper corner of its bounding box.
    pub max: Vec3,
}

impl BuildItem {
    fn centroid(&self) -> Vec3 {
        (self.min + self.max) * 0.5
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    min: Vec3,
    max: Vec3,
    /// Leaf: first primitive. Interior: index of the right child.
    start: u32,
    /// Number of primitives; 0 marks an interior node.
    count: u32,
    /// Axis of the split, used to visit the nearer child first.
    axis: u8,
}

/// Deepest a traversal stack can grow. The builder falls back to median
/// splits below [`FORCE_MEDIAN_DEPTH`], which halves the primitive count per
/// level, so no tree over fewer than 2^32 primitives gets deeper than this.
/// Kept small because the stack is zeroed for every ray.
const STACK_SIZE: usize = 64;
const FORCE_MEDIAN_DEPTH: usize = 32;
const BINS: usize = 16;
const MAX_LEAF: usize = 4;

/// The hierarchy: flattened nodes and the primitives in leaf order.
#[derive(Clone, Debug)]
pub struct Bvh {
    nodes: Vec<Node>,
    prims: Vec<Prim>,
}

// Plain comparisons compile to single min/max instructions, unlike
// `f64::min`/`max`, whose NaN handling costs several more in the hottest
// loop. A NaN (0 * inf, from a ray lying in a slab's plane) is mostly
// dropped by the operand order below, treating that slab as unbounded; the
// outcome is deterministic either way.
#[inline(always)]
fn min(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn max(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// Result of a box test: whether the ray enters the box within
/// `(tmin, tmax)`.
#[inline(always)]
fn box_hit(min_corner: Vec3, max_corner: Vec3, ray: &Ray, tmin: f64, tmax: f64) -> bool {
    let tx1 = (min_corner.x - ray.origin.x) * ray.inv_dir.x;
    let tx2 = (max_corner.x - ray.origin.x) * ray.inv_dir.x;
    let ty1 = (min_corner.y - ray.origin.y) * ray.inv_dir.y;
    let ty2 = (max_corner.y - ray.origin.y) * ray.inv_dir.y;
    let tz1 = (min_corner.z - ray.origin.z) * ray.inv_dir.z;
    let tz2 = (max_corner.z - ray.origin.z) * ray.inv_dir.z;
    let lo = max(max(max(min(tx1, tx2), tmin), min(ty1, ty2)), min(tz1, tz2));
    let hi = min(min(min(max(tx1, tx2), tmax), max(ty1, ty2)), max(tz1, tz2));
    lo <= hi
}

fn surface_area(min: Vec3, max: Vec3) -> f64 {
    let d = max - min;
    if d.x < 0.0 {
        return 0.0;
    }
    2.0 * (d.x * d.y + d.y * d.z + d.z * d.x)
}

fn bounds_of(items: &[BuildItem]) -> (Vec3, Vec3) {
    let mut min = Vec3::splat(f64::INFINITY);
    let mut max = Vec3::splat(f64::NEG_INFINITY);
    for it in items {
        min = min.min(it.min);
        max = max.max(it.max);
    }
    (min, max)
}

impl Bvh {
    /// Builds the hierarchy. The result depends only on the items and their
    /// order, so every process of a distributed run builds the same tree.
    pub fn build(mut items: Vec<BuildItem>) -> Bvh {
        let mut bvh = Bvh {
            nodes: Vec::with_capacity(2 * items.len().max(1)),
            prims: Vec::with_capacity(items.len()),
        };
        if items.is_empty() {
            bvh.nodes.push(Node {
                min: Vec3::splat(f64::INFINITY),
                max: Vec3::splat(f64::NEG_INFINITY),
                start: 0,
                count: 0,
                axis: 0,
            });
            return bvh;
        }
        bvh.build_node(&mut items, 0);
        bvh
    }

    /// Number of primitives in the hierarchy.
    pub fn len(&self) -> usize {
        self.prims.len()
    }

    /// Whether the hierarchy holds no primitive.
    pub fn is_empty(&self) -> bool {
        self.prims.is_empty()
    }

    fn build_node(&mut self, items: &mut [BuildItem], depth: usize) -> usize {
        let (min, max) = bounds_of(items);
        let index = self.nodes.len();
        self.nodes.push(Node {
            min,
            max,
            start: 0,
            count: 0,
            axis: 0,
        });
        let n = items.len();
        if n <= 1 {
            self.make_leaf(index, items);
            return index;
        }
        let (cmin, cmax) = items.iter().fold(
            (Vec3::splat(f64::INFINITY), Vec3::splat(f64::NEG_INFINITY)),
            |(lo, hi), it| (lo.min(it.centroid()), hi.max(it.centroid())),
        );
        let extent = cmax - cmin;
        let axis = if extent.x >= extent.y && extent.x >= extent.z {
            0
        } else if extent.y >= extent.z {
            1
        } else {
            2
        };
        let mid = if extent[axis] <= 0.0 {
            // All centroids coincide: no plane separates them.
            if n <= MAX_LEAF {
                self.make_leaf(index, items);
                return index;
            }
            n / 2
        } else if depth >= FORCE_MEDIAN_DEPTH {
            median_split(items, axis)
        } else {
            match sah_split(
                items,
                axis,
                cmin[axis],
                extent[axis],
                surface_area(min, max),
            ) {
                Some(mid) => mid,
                None => {
                    self.make_leaf(index, items);
                    return index;
                }
            }
        };
        let (left, right) = items.split_at_mut(mid);
        self.build_node(left, depth + 1);
        let right_index = self.build_node(right, depth + 1);
        let node = &mut self.nodes[index];
        node.start = right_index as u32;
        node.axis = axis as u8;
        index
    }

    fn make_leaf(&mut self, index: usize, items: &[BuildItem]) {
        let node = &mut self.nodes[index];
        node.start = self.prims.len() as u32;
        node.count = items.len() as u32;
        self.prims.extend(items.iter().map(|it| it.prim));
    }

    /// Visits the primitives whose boxes the ray enters within
    /// `(tmin, *tmax)`, nearest subtrees first. `visit` returns the new upper
    /// bound (the distance of a closer hit, or `*tmax` unchanged); returning
    /// `None` stops the traversal early (any-hit queries).
    #[inline]
    pub fn traverse<F>(&self, ray: &Ray, tmin: f64, tmax: f64, mut visit: F)
    where
        F: FnMut(Prim, f64) -> Option<f64>,
    {
        let mut limit = tmax;
        // An empty hierarchy is one childless node whose inverted box the slab test does not
        // reliably miss (a zero direction component gives infinities of both signs).
        if self.prims.is_empty() {
            return;
        }
        let root = &self.nodes[0];
        if !box_hit(root.min, root.max, ray, tmin, limit) {
            return;
        }
        let mut stack = [0u32; STACK_SIZE];
        let mut sp = 0usize;
        let mut current = 0usize;
        loop {
            let node = &self.nodes[current];
            if node.count > 0 {
                let start = node.start as usize;
                for &prim in &self.prims[start..start + node.count as usize] {
                    match visit(prim, limit) {
                        Some(t) => limit = t,
                        None => return,
                    }
                }
            } else {
                let left = current + 1;
                let right = node.start as usize;
                let (first, second) = if ray.dir[node.axis as usize] < 0.0 {
                    (right, left)
                } else {
                    (left, right)
                };
                let a = &self.nodes[first];
                let b = &self.nodes[second];
                let hit_a = box_hit(a.min, a.max, ray, tmin, limit);
                let hit_b = box_hit(b.min, b.max, ray, tmin, limit);
                if hit_a {
                    if hit_b {
                        stack[sp] = second as u32;
                        sp += 1;
                    }
                    current = first;
                    continue;
                }
                if hit_b {
                    current = second;
                    continue;
                }
            }
            if sp == 0 {
                return;
            }
            sp -= 1;
            current = stack[sp] as usize;
        }
    }
}

/// Splits at the median centroid along `axis`; returns the split index.
fn median_split(items: &mut [BuildItem], axis: usize) -> usize {
    let mid = items.len() / 2;
    items.select_nth_unstable_by(mid, |a, b| {
        a.centroid()[axis].total_cmp(&b.centroid()[axis])
    });
    mid
}

/// Chooses a split plane by the surface-area heuristic and partitions the
/// items; returns `None` where a leaf is cheaper than any split.
fn sah_split(
    items: &mut [BuildItem],
    axis: usize,
    cmin: f64,
    extent: f64,
    parent_area: f64,
) -> Option<usize> {
    let n = items.len();
    let bin_of = |it: &BuildItem| -> usize {
        let b = ((it.centroid()[axis] - cmin) / extent * BINS as f64) as usize;
        b.min(BINS - 1)
    };
    let mut counts = [0usize; BINS];
    let mut bmin = [Vec3::splat(f64::INFINITY); BINS];
    let mut bmax = [Vec3::splat(f64::NEG_INFINITY); BINS];
    for it in items.iter() {
        let b = bin_of(it);
        counts[b] += 1;
        bmin[b] = bmin[b].min(it.min);
        bmax[b] = bmax[b].max(it.max);
    }
    // Sweep from the right to get the area and count right of each plane.
    let mut right_area = [0.0; BINS];
    let mut right_count = [0usize; BINS];
    let (mut rmin, mut rmax, mut rc) = (
        Vec3::splat(f64::INFINITY),
        Vec3::splat(f64::NEG_INFINITY),
        0,
    );
    for b in (1..BINS).rev() {
        rmin = rmin.min(bmin[b]);
        rmax = rmax.max(bmax[b]);
        rc += counts[b];
        right_area[b] = surface_area(rmin, rmax);
        right_count[b] = rc;
    }
    let (mut lmin, mut lmax, mut lc) = (
        Vec3::splat(f64::INFINITY),
        Vec3::splat(f64::NEG_INFINITY),
        0,
    );
    let mut best = (f64::INFINITY, 0usize);
    for plane in 1..BINS {
        lmin = lmin.min(bmin[plane - 1]);
        lmax = lmax.max(bmax[plane - 1]);
        lc += counts[plane - 1];
        if lc == 0 || right_count[plane] == 0 {
            continue;
        }
        let cost =
            surface_area(lmin, lmax) * lc as f64 + right_area[plane] * right_count[plane] as f64;
        if cost < best.0 {
            best = (cost, plane);
        }
    }
    // Relative costs: one box test per child versus one primitive test each.
    let leaf_cost = n as f64;
    let split_cost = 1.0 + best.0 / parent_area.max(f64::MIN_POSITIVE);
    if best.1 == 0 || (n <= MAX_LEAF && split_cost >= leaf_cost) {
        if n <= MAX_LEAF {
            return None;
        }
        return Some(median_split(items, axis));
    }
    let plane = best.1;
    let mut i = 0;
    let mut j = n;
    while i < j {
        if bin_of(&items[i]) < plane {
            i += 1;
        } else {
            j -= 1;
            items.swap(i, j);
        }
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_box(c: Vec3, i: u32) -> BuildItem {
        BuildItem {
            prim: Prim::Sphere(i),
            min: c - Vec3::splat(0.5),
            max: c + Vec3::splat(0.5),
        }
    }

    fn hits(bvh: &Bvh, ray: &Ray) -> Vec<Prim> {
        let mut out = Vec::new();
        bvh.traverse(ray, 0.0, f64::INFINITY, |p, limit| {
            out.push(p);
            Some(limit)
        });
        out.sort_by_key(|p| match p {
            Prim::Sphere(i) | Prim::Polygon(i) => *i,
        });
        out
    }

    #[test]
    fn every_primitive_lands_in_one_leaf() {
        let items: Vec<_> = (0..100)
            .map(|i| {
                unit_box(
                    Vec3::new((i % 10) as f64 * 3.0, (i / 10) as f64 * 3.0, 0.0),
                    i,
                )
            })
            .collect();
        let bvh = Bvh::build(items);
        let mut seen: Vec<u32> = bvh
            .prims
            .iter()
            .map(|p| match p {
                Prim::Sphere(i) | Prim::Polygon(i) => *i,
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn traversal_reaches_exactly_the_boxes_on_the_ray() {
        let items: Vec<_> = (0..100)
            .map(|i| {
                unit_box(
                    Vec3::new((i % 10) as f64 * 3.0, (i / 10) as f64 * 3.0, 0.0),
                    i,
                )
            })
            .collect();
        let bvh = Bvh::build(items);
        // Along y = 6 (row 2 of the grid), boxes 20..30 are crossed.
        let ray = Ray::new(Vec3::new(-10.0, 6.0, 0.0), Vec3::new(1.0, 0.0, 0.0));
        let expected: Vec<_> = (20..30).map(Prim::Sphere).collect();
        assert_eq!(hits(&bvh, &ray), expected);
        let miss = Ray::new(Vec3::new(-10.0, 7.5, 0.0), Vec3::new(1.0, 0.0, 0.0));
        assert!(hits(&bvh, &miss).is_empty());
    }

    #[test]
    fn identical_centroids_still_build() {
        let items: Vec<_> = (0..50).map(|i| unit_box(Vec3::ZERO, i)).collect();
        let bvh = Bvh::build(items);
        assert_eq!(bvh.len(), 50);
        let ray = Ray::new(Vec3::new(0.0, 0.0, -5.0), Vec3::new(0.0, 0.0, 1.0));
        assert_eq!(hits(&bvh, &ray).len(), 50);
    }

    #[test]
    fn an_empty_hierarchy_is_missed_by_every_ray() {
        let bvh = Bvh::build(Vec::new());
        assert!(bvh.is_empty());
        // Axis-parallel rays (zero direction components) were taken into the empty root.
        for dir in [
            Vec3::new(0.0, 0.0, 1.0),
            Vec3::new(1.0, 0.0, 0.0),
            Vec3::new(0.3, -0.4, 0.5),
        ] {
            assert!(hits(&bvh, &Ray::new(Vec3::new(0.0, 0.0, -10.0), dir)).is_empty());
        }
    }
}
