//! Force computation: the Barnes-Hut tree walk and direct summation.
//!
//! Gravity is Plummer-softened: a source of mass `m` at separation `d` contributes the
//! acceleration `m d / (|d|² + eps²)^{3/2}` and the potential `-m / (|d|² + eps²)^{1/2}`
//! (G = 1). The number of interactions computed for a body is its cost for load balancing.
//!
//! [`compute_forces`] walks the tree once per group of nearby bodies (see there);
//! [`walk`] evaluates the field at a single point.

use crate::body::{Body, PointMass};
use crate::geom::{Aabb, Vec3};
use crate::tree::Tree;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Parameters of the force computation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForceParams {
    /// Opening angle: a cell of edge `l` is used as one mass by a body at distance `d`
    /// from its centre of mass when `d > l / theta + delta`. Smaller is more accurate.
    pub theta: f64,
    /// Softening length.
    pub eps: f64,
}

/// The result of one force evaluation at a point.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Interaction {
    /// Acceleration.
    pub acc: Vec3,
    /// Potential per unit mass.
    pub phi: f64,
    /// Number of body-body and body-cell interactions used.
    pub cost: u64,
}

/// Walks `tree` for a point at `pos`, skipping the point stored in slot `skip` (the body
/// itself; pass `u32::MAX` for a point that is not in the tree).
///
/// The tree's centres of mass must be computed.
#[inline]
pub fn walk(tree: &Tree, pos: Vec3, skip: u32, params: &ForceParams) -> Interaction {
    let nodes = tree.nodes();
    let points = tree.points();
    let inv_theta = 1.0 / params.theta;
    let eps2 = params.eps * params.eps;
    let (mut ax, mut ay, mut az, mut phi) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut cost = 0u64;
    let mut i = 0usize;
    while i < nodes.len() {
        let n = &nodes[i];
        let dx = n.com.x - pos.x;
        let dy = n.com.y - pos.y;
        let dz = n.com.z - pos.z;
        let d2 = dx * dx + dy * dy + dz * dz;
        let crit = n.size * inv_theta + n.delta;
        if d2 > crit * crit {
            let r2 = d2 + eps2;
            let inv = 1.0 / r2.sqrt();
            let m_inv = n.mass * inv;
            let f = m_inv * inv * inv;
            ax += f * dx;
            ay += f * dy;
            az += f * dz;
            phi -= m_inv;
            cost += 1;
            i = n.next as usize;
        } else if n.leaf {
            let first = n.first as usize;
            for (k, p) in points[n.slots()].iter().enumerate() {
                if (first + k) as u32 == skip {
                    continue;
                }
                let dx = p.pos.x - pos.x;
                let dy = p.pos.y - pos.y;
                let dz = p.pos.z - pos.z;
                let r2 = dx * dx + dy * dy + dz * dz + eps2;
                // Coincident points without softening exert no finite force; skip them
                // rather than poison the sum with NaN.
                if r2 == 0.0 {
                    continue;
                }
                let inv = 1.0 / r2.sqrt();
                let m_inv = p.mass * inv;
                let f = m_inv * inv * inv;
                ax += f * dx;
                ay += f * dy;
                az += f * dz;
                phi -= m_inv;
                cost += 1;
            }
            i = n.next as usize;
        } else {
            i += 1;
        }
    }
    Interaction {
        acc: Vec3::new(ax, ay, az),
        phi,
        cost,
    }
}

/// Computes acceleration, potential and cost of every body in `bodies` from `tree`, and
/// returns the total number of interactions.
///
/// `slot(i)` names the tree slot holding body `i` itself (so that it does not attract
/// itself), or `u32::MAX` when the body is not in the tree.
///
/// Bodies in the tree are processed a leaf at a time: one walk per leaf, testing cells
/// against the bounding box of the leaf's bodies instead of each body, yields an
/// interaction list that every body of the leaf then sums over in a tight loop. A cell
/// accepted for the box is accepted for each body in it, so this is at least as accurate as
/// walking per body; it does more interactions but far less walking, and the summation
/// vectorises. Bodies of the same leaf interact directly. Bodies not in the tree get a walk
/// of their own ([`walk`]).
///
/// With a thread pool, leaves are processed in parallel; the result is the same bit for bit,
/// since each body's sums are formed by one thread in a fixed order.
pub fn compute_forces<F>(
    tree: &Tree,
    bodies: &mut [Body],
    slot: F,
    params: &ForceParams,
    pool: Option<&rayon::ThreadPool>,
) -> u64
where
    F: Fn(usize) -> u32 + Sync,
{
    const NONE: u32 = u32::MAX;
    let mut target_of_slot = vec![NONE; tree.len()];
    let mut outside = Vec::new();
    for i in 0..bodies.len() {
        match slot(i) {
            NONE => outside.push(i),
            s => target_of_slot[s as usize] = i as u32,
        }
    }
    let groups = groups(tree, &target_of_slot);
    let positions: &[Body] = bodies;
    let per_group = |lists: &mut (InteractionList, InteractionList), group: &u32| {
        group_forces(
            tree,
            *group as usize,
            &target_of_slot,
            positions,
            params,
            lists,
        )
    };
    let results: Vec<Vec<(u32, Interaction)>> = match pool {
        Some(pool) => pool.install(|| {
            groups
                .par_iter()
                .map_init(Default::default, per_group)
                .collect()
        }),
        None => {
            let mut lists = Default::default();
            groups.iter().map(|g| per_group(&mut lists, g)).collect()
        }
    };
    let mut total = 0;
    for (i, r) in results.into_iter().flatten() {
        total += r.cost;
        store(&mut bodies[i as usize], r);
    }
    for i in outside {
        let r = walk(tree, bodies[i].pos, NONE, params);
        total += r.cost;
        store(&mut bodies[i], r);
    }
    total
}

/// Largest number of points in a group that shares one tree walk. Larger groups walk less
/// but take more interactions each (their box is larger); 32 is near the optimum in
/// measurements with the default parameters.
const GROUP_SIZE: u32 = 32;

/// The groups: the highest cells with at most [`GROUP_SIZE`] points (or leaves) that hold
/// at least one target. Their slot ranges partition the tree's points.
fn groups(tree: &Tree, target_of_slot: &[u32]) -> Vec<u32> {
    let nodes = tree.nodes();
    let mut groups = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let n = &nodes[i];
        if n.leaf || n.count <= GROUP_SIZE.max(tree.max_leaf() as u32) {
            if n.slots().any(|s| target_of_slot[s] != u32::MAX) {
                groups.push(i as u32);
            }
            i = n.next as usize;
        } else {
            i += 1;
        }
    }
    groups
}

#[inline]
fn store(b: &mut Body, r: Interaction) {
    b.acc = r.acc;
    b.phi = r.phi;
    b.cost = r.cost;
}

/// Sources of one group's interaction list, structure-of-arrays for the summation loop.
#[derive(Default)]
struct InteractionList {
    x: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
    m: Vec<f64>,
}

impl InteractionList {
    fn clear(&mut self) {
        self.x.clear();
        self.y.clear();
        self.z.clear();
        self.m.clear();
    }

    #[inline]
    fn push(&mut self, p: Vec3, m: f64) {
        self.x.push(p.x);
        self.y.push(p.y);
        self.z.push(p.z);
        self.m.push(m);
    }

    fn len(&self) -> usize {
        self.m.len()
    }
}

/// Forces on the targets of group cell `group`: (body index, result) pairs. `lists` are
/// scratch space: the far list (cells and bodies outside the group) and the group's own points.
fn group_forces(
    tree: &Tree,
    group: usize,
    target_of_slot: &[u32],
    bodies: &[Body],
    params: &ForceParams,
    lists: &mut (InteractionList, InteractionList),
) -> Vec<(u32, Interaction)> {
    let (far, near) = lists;
    let nodes = tree.nodes();
    let points = tree.points();
    let own = nodes[group].slots();
    let targets: Vec<(usize, u32)> = own
        .clone()
        .filter_map(|s| match target_of_slot[s] {
            u32::MAX => None,
            i => Some((s - own.start, i)),
        })
        .collect();
    let bounds = Aabb::around(targets.iter().map(|&(k, _)| points[own.start + k].pos));

    // One walk for the whole group: cells well separated from its box are taken whole.
    far.clear();
    let inv_theta = 1.0 / params.theta;
    let mut i = 0;
    while i < nodes.len() {
        let n = &nodes[i];
        if i == group {
            i = n.next as usize;
            continue;
        }
        let crit = n.size * inv_theta + n.delta;
        if bounds.distance2_to(n.com) > crit * crit {
            far.push(n.com, n.mass);
            i = n.next as usize;
        } else if n.leaf {
            for p in &points[n.slots()] {
                far.push(p.pos, p.mass);
            }
            i = n.next as usize;
        } else {
            i += 1;
        }
    }
    near.clear();
    for p in &points[own.clone()] {
        near.push(p.pos, p.mass);
    }

    let eps2 = params.eps * params.eps;
    targets
        .iter()
        .map(|&(k, body)| {
            let pos = points[own.start + k].pos;
            debug_assert_eq!(pos, bodies[body as usize].pos);
            let (a0, p0) = sum_list(far, 0..far.len(), pos, eps2);
            // The group's own points, all but the body itself.
            let (a1, p1) = sum_list(near, 0..k, pos, eps2);
            let (a2, p2) = sum_list(near, k + 1..near.len(), pos, eps2);
            let cost = (far.len() + near.len() - 1) as u64;
            let acc = a0 + a1 + a2;
            (
                body,
                Interaction {
                    acc,
                    phi: p0 + p1 + p2,
                    cost,
                },
            )
        })
        .collect()
}

/// Lanes of the summation: independent partial sums that the compiler can keep in one
/// vector register each, in a fixed order so results do not depend on the instruction set.
const LANES: usize = 4;

/// Acceleration and potential at `pos` from the sources `range` of `list`.
///
/// On x86-64 processors with AVX the same code runs compiled for 4-wide vectors; the
/// arithmetic is the same operations in the same order (no fused multiply-add), so results
/// do not depend on which version runs.
#[inline]
fn sum_list(
    list: &InteractionList,
    range: std::ops::Range<usize>,
    pos: Vec3,
    eps2: f64,
) -> (Vec3, f64) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        // SAFETY: the processor supports AVX, checked just above.
        return unsafe { sum_list_avx(list, range, pos, eps2) };
    }
    sum_list_portable(list, range, pos, eps2)
}

/// [`sum_list_portable`] compiled for AVX.
///
/// # Safety
/// The processor must support AVX (`is_x86_feature_detected!("avx")`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn sum_list_avx(
    list: &InteractionList,
    range: std::ops::Range<usize>,
    pos: Vec3,
    eps2: f64,
) -> (Vec3, f64) {
    sum_list_portable(list, range, pos, eps2)
}

#[inline(always)]
fn sum_list_portable(
    list: &InteractionList,
    range: std::ops::Range<usize>,
    pos: Vec3,
    eps2: f64,
) -> (Vec3, f64) {
    let (xs, ys, zs, ms) = (
        &list.x[range.clone()],
        &list.y[range.clone()],
        &list.z[range.clone()],
        &list.m[range],
    );
    let mut ax = [0.0f64; LANES];
    let mut ay = [0.0f64; LANES];
    let mut az = [0.0f64; LANES];
    let mut ph = [0.0f64; LANES];
    let n = ms.len();
    let full = n - n % LANES;
    let chunks = xs[..full]
        .chunks_exact(LANES)
        .zip(ys[..full].chunks_exact(LANES))
        .zip(zs[..full].chunks_exact(LANES))
        .zip(ms[..full].chunks_exact(LANES));
    for (((xs, ys), zs), ms) in chunks {
        for l in 0..LANES {
            let dx = xs[l] - pos.x;
            let dy = ys[l] - pos.y;
            let dz = zs[l] - pos.z;
            let r2 = dx * dx + dy * dy + dz * dz + eps2;
            let inv = 1.0 / r2.sqrt();
            // Sources here are never the body itself, but may coincide with it when eps
            // is zero; such a pair has no finite force and is left out.
            let inv = if r2 > 0.0 { inv } else { 0.0 };
            let m_inv = ms[l] * inv;
            let f = m_inv * inv * inv;
            ax[l] += f * dx;
            ay[l] += f * dy;
            az[l] += f * dz;
            ph[l] -= m_inv;
        }
    }
    for (l, k) in (full..n).enumerate() {
        let dx = xs[k] - pos.x;
        let dy = ys[k] - pos.y;
        let dz = zs[k] - pos.z;
        let r2 = dx * dx + dy * dy + dz * dz + eps2;
        let inv = if r2 > 0.0 { 1.0 / r2.sqrt() } else { 0.0 };
        let m_inv = ms[k] * inv;
        let f = m_inv * inv * inv;
        ax[l] += f * dx;
        ay[l] += f * dy;
        az[l] += f * dz;
        ph[l] -= m_inv;
    }
    let sum = |a: [f64; LANES]| (a[0] + a[1]) + (a[2] + a[3]);
    (Vec3::new(sum(ax), sum(ay), sum(az)), sum(ph))
}

/// Exact acceleration and potential at every body by direct O(n²) summation over all other
/// bodies. The reference against which the tree code is checked.
pub fn direct_forces(bodies: &[Body], eps: f64) -> Vec<(Vec3, f64)> {
    let sources: Vec<PointMass> = bodies
        .iter()
        .map(|b| PointMass {
            pos: b.pos,
            mass: b.mass,
        })
        .collect();
    let eps2 = eps * eps;
    bodies
        .par_iter()
        .enumerate()
        .map(|(i, b)| {
            let mut acc = Vec3::ZERO;
            let mut phi = 0.0;
            for (j, s) in sources.iter().enumerate() {
                if j == i {
                    continue;
                }
                let d = s.pos - b.pos;
                let r2 = d.norm2() + eps2;
                if r2 == 0.0 {
                    continue;
                }
                let inv = 1.0 / r2.sqrt();
                acc += d * (s.mass * inv * inv * inv);
                phi -= s.mass * inv;
            }
            (acc, phi)
        })
        .collect()
}

/// Exact potential energy `-Σ_{i<j} m_i m_j / sqrt(r_ij² + eps²)` by direct summation.
pub fn direct_potential_energy(bodies: &[Body], eps: f64, pool: Option<&rayon::ThreadPool>) -> f64 {
    let eps2 = eps * eps;
    let row = |i: usize| -> f64 {
        let bi = &bodies[i];
        let mut s = 0.0;
        for bj in &bodies[i + 1..] {
            let r2 = (bj.pos - bi.pos).norm2() + eps2;
            if r2 > 0.0 {
                s += bj.mass / r2.sqrt();
            }
        }
        -bi.mass * s
    };
    match pool {
        Some(pool) => pool.install(|| (0..bodies.len()).into_par_iter().map(row).sum()),
        None => (0..bodies.len()).map(row).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer;

    fn relative_errors(bodies: &[Body], exact: &[(Vec3, f64)]) -> Vec<f64> {
        let mut e: Vec<f64> = bodies
            .iter()
            .zip(exact)
            .map(|(b, (a, _))| (b.acc - *a).norm() / a.norm())
            .collect();
        e.sort_by(f64::total_cmp);
        e
    }

    fn tree_forces(bodies: &mut [Body], params: &ForceParams, max_leaf: usize) {
        let pts: Vec<PointMass> = bodies
            .iter()
            .map(|b| PointMass {
                pos: b.pos,
                mass: b.mass,
            })
            .collect();
        let mut tree = Tree::build(&pts, max_leaf);
        tree.compute_centres_of_mass();
        let slots = tree.slots_of_inputs();
        compute_forces(&tree, bodies, |i| slots[i], params, None);
    }

    #[test]
    fn tiny_theta_reproduces_direct_summation() {
        let mut bodies = plummer::generate(300, 1);
        let params = ForceParams {
            theta: 1e-3,
            eps: 0.01,
        };
        tree_forces(&mut bodies, &params, 4);
        let exact = direct_forces(&bodies, params.eps);
        for (b, (a, phi)) in bodies.iter().zip(&exact) {
            assert!((b.acc - *a).norm() <= 1e-9 * a.norm());
            assert!((b.phi - phi).abs() <= 1e-9 * phi.abs());
            // Nothing is far enough to be approximated: every other body is one interaction.
            assert_eq!(b.cost, 299);
        }
    }

    #[test]
    fn theta_half_is_accurate_and_cheaper_than_direct() {
        let mut bodies = plummer::generate(2000, 2);
        let params = ForceParams {
            theta: 0.5,
            eps: 1e-4,
        };
        tree_forces(&mut bodies, &params, 10);
        let exact = direct_forces(&bodies, params.eps);
        let e = relative_errors(&bodies, &exact);
        let median = e[e.len() / 2];
        assert!(median < 0.01, "median relative error {median}");
        let mean_cost = bodies.iter().map(|b| b.cost).sum::<u64>() as f64 / 2000.0;
        assert!(mean_cost < 1999.0 * 0.8, "mean cost {mean_cost}");
    }

    #[test]
    fn thread_pool_gives_identical_results() {
        let mut a = plummer::generate(700, 3);
        let mut b = a.clone();
        let params = ForceParams {
            theta: 0.7,
            eps: 0.01,
        };
        let pts: Vec<PointMass> = a
            .iter()
            .map(|b| PointMass {
                pos: b.pos,
                mass: b.mass,
            })
            .collect();
        let mut tree = Tree::build(&pts, 10);
        tree.compute_centres_of_mass();
        let slots = tree.slots_of_inputs();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let ca = compute_forces(&tree, &mut a, |i| slots[i], &params, None);
        let cb = compute_forces(&tree, &mut b, |i| slots[i], &params, Some(&pool));
        assert_eq!(ca, cb);
        assert_eq!(a, b);
    }

    #[test]
    fn bodies_outside_the_tree_feel_all_of_it() {
        // Probes that are not sources: every tree point attracts them, none is skipped.
        let sources = plummer::generate(800, 6);
        let pts: Vec<PointMass> = sources.iter().map(Body::point_mass).collect();
        let mut tree = Tree::build(&pts, 10);
        tree.compute_centres_of_mass();
        let params = ForceParams {
            theta: 0.5,
            eps: 0.01,
        };
        let mut probes: Vec<Body> = plummer::generate(50, 99);
        compute_forces(&tree, &mut probes, |_| u32::MAX, &params, None);
        let eps2 = params.eps * params.eps;
        for p in &probes {
            let mut exact = Vec3::ZERO;
            for s in &sources {
                let d = s.pos - p.pos;
                let r2 = d.norm2() + eps2;
                exact += d * (s.mass / (r2 * r2.sqrt()));
            }
            let err = (p.acc - exact).norm() / exact.norm();
            assert!(err < 0.02, "relative error {err}");
            assert!(p.cost > 0 && p.cost < 800);
            assert_eq!(walk(&tree, p.pos, u32::MAX, &params).acc, p.acc);
        }
    }

    #[test]
    fn direct_potential_energy_of_two_bodies() {
        let bodies = [
            Body::new(0, 2.0, Vec3::new(0.0, 0.0, 0.0), Vec3::ZERO),
            Body::new(1, 3.0, Vec3::new(0.0, 4.0, 0.0), Vec3::ZERO),
        ];
        let w = direct_potential_energy(&bodies, 3.0, None);
        assert!((w - (-6.0 / 5.0)).abs() < 1e-15);
        let f = direct_forces(&bodies, 3.0);
        assert!((f[0].0 - Vec3::new(0.0, 3.0 * 4.0 / 125.0, 0.0)).norm() < 1e-15);
    }
}
