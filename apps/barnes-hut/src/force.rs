//! Force computation: the Barnes-Hut tree walk and direct summation.
//!
//! Gravity is Plummer-softened: a source of mass `m` at separation `d` contributes the
//! acceleration `m d / (|d|² + eps²)^{3/2}` and the potential `-m / (|d|² + eps²)^{1/2}`
//! (G = 1). The walk counts the interactions each body needs; that count is the body's
//! cost for load balancing.

use crate::body::Body;
use crate::geom::Vec3;
use crate::tree::{PointMass, Tree};
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

/// Bodies per parallel work item: large enough to amortise scheduling, small enough to
/// balance the uneven cost of bodies in dense and sparse regions.
const CHUNK: usize = 64;

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
/// itself), or `u32::MAX` when the body is not in the tree. With a thread pool the bodies
/// are processed in parallel; the result is the same bit for bit, since each body's sum is
/// computed by one thread in the same order.
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
    let one = |i: usize, b: &mut Body| -> u64 {
        let r = walk(tree, b.pos, slot(i), params);
        b.acc = r.acc;
        b.phi = r.phi;
        b.cost = r.cost;
        r.cost
    };
    match pool {
        Some(pool) => pool.install(|| {
            bodies
                .par_chunks_mut(CHUNK)
                .enumerate()
                .map(|(c, chunk)| {
                    chunk
                        .iter_mut()
                        .enumerate()
                        .map(|(k, b)| one(c * CHUNK + k, b))
                        .sum::<u64>()
                })
                .sum()
        }),
        None => bodies.iter_mut().enumerate().map(|(i, b)| one(i, b)).sum(),
    }
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
