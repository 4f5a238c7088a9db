//! Bodies: point masses with their dynamical state and their force-computation cost.

use crate::geom::Vec3;
use serde::{Deserialize, Serialize};

/// A point mass: what the tree is built from and what essential trees carry.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointMass {
    /// Position.
    pub pos: Vec3,
    /// Mass.
    pub mass: f64,
}

/// One body of the system.
///
/// `acc`, `phi` and `cost` are outputs of the last force computation. `cost` (the number
/// of interactions that computation needed) is the weight used by the cost-based load
/// balancing of the ORB decomposition; it travels with the body when it migrates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Body {
    /// Identity, stable across reordering and migration (the generator numbers bodies 0..n).
    pub id: u64,
    /// Mass.
    pub mass: f64,
    /// Position.
    pub pos: Vec3,
    /// Velocity.
    pub vel: Vec3,
    /// Acceleration from the last force computation.
    pub acc: Vec3,
    /// Gravitational potential at the body from the last force computation (per unit mass).
    pub phi: f64,
    /// Interactions (body-body plus body-cell) of the last force computation on this body.
    pub cost: u64,
}

impl Body {
    /// A body at rest state as far as forces go: zero acceleration, potential and cost.
    pub fn new(id: u64, mass: f64, pos: Vec3, vel: Vec3) -> Body {
        Body {
            id,
            mass,
            pos,
            vel,
            acc: Vec3::ZERO,
            phi: 0.0,
            cost: 0,
        }
    }

    /// The body as a source of gravity.
    #[inline]
    pub fn point_mass(&self) -> PointMass {
        PointMass {
            pos: self.pos,
            mass: self.mass,
        }
    }

    /// The load-balancing weight of the body: its last cost, but at least one so that
    /// bodies that have not been through a force computation yet still count.
    #[inline]
    pub fn weight(&self) -> u64 {
        self.cost.max(1)
    }
}

/// A checksum of positions that does not depend on the order bodies are stored in:
/// the sum over bodies of `(x + 2y + 3z) * (1 + id mod 1000)`.
///
/// Sequential and parallel runs (whose bodies are spread over processes in other orders)
/// can be compared with it; equal runs give equal values up to floating-point summation order.
pub fn position_checksum(bodies: &[Body]) -> f64 {
    let mut sorted: Vec<(u64, Vec3)> = bodies.iter().map(|b| (b.id, b.pos)).collect();
    // Summing in id order makes the value independent of storage order bit for bit.
    sorted.sort_unstable_by_key(|&(id, _)| id);
    sorted
        .iter()
        .map(|&(id, p)| (p.x + 2.0 * p.y + 3.0 * p.z) * (1 + id % 1000) as f64)
        .sum()
}

/// What a run did to its bodies, in quantities that runs building different trees share: the
/// bodies that remain, their total mass, their centre of mass, and how far they moved.
///
/// Runs on different numbers of processes build other trees, so their forces differ within
/// the method's approximation and their final positions differ slightly; the
/// [`position_checksum`] then differs too. These figures let a run be checked against the
/// sequential one within bounds its physics gives (the bench harness does so beyond one
/// process): both the centre of mass and the displacement differ by at most the mass-weighted
/// rms distance between the two runs' final positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunSummary {
    /// Bodies at the end.
    pub bodies: usize,
    /// Their total mass.
    pub total_mass: f64,
    /// Their centre of mass (summed in id order, so independent of storage order).
    pub center_of_mass: Vec3,
    /// The mass-weighted rms distance between each body's final and initial position:
    /// `sqrt(sum m |p_end - p_start|^2 / sum m)` over the bodies present at both ends.
    pub displacement_rms: f64,
}

impl RunSummary {
    /// Summarizes a run from its initial positions (`(id, position)`, any order) and its
    /// final bodies (any order).
    pub fn of(start: &[(u64, Vec3)], end: &[Body]) -> RunSummary {
        let mut start: Vec<(u64, Vec3)> = start.to_vec();
        start.sort_unstable_by_key(|&(id, _)| id);
        let mut end: Vec<&Body> = end.iter().collect();
        end.sort_unstable_by_key(|b| b.id);
        let total_mass = end.iter().fold(0.0, |m, b| m + b.mass);
        let weighted = end.iter().fold(Vec3::ZERO, |acc, b| acc + b.pos * b.mass);
        let center_of_mass = if total_mass > 0.0 {
            weighted * (1.0 / total_mass)
        } else {
            Vec3::ZERO
        };
        // Both lists are in id order: walk them together.
        let (mut moved, mut mass) = (0.0, 0.0);
        let mut s = start.iter().peekable();
        for b in &end {
            while s.next_if(|&&(id, _)| id < b.id).is_some() {}
            if let Some(&&(id, p)) = s.peek() {
                if id == b.id {
                    moved += b.mass * (b.pos - p).norm2();
                    mass += b.mass;
                }
            }
        }
        RunSummary {
            bodies: end.len(),
            total_mass,
            center_of_mass,
            displacement_rms: if mass > 0.0 {
                (moved / mass).sqrt()
            } else {
                0.0
            },
        }
    }
}

/// The `(id, position)` pairs of `bodies`: what [`RunSummary::of`] needs of the start.
pub fn positions(bodies: &[Body]) -> Vec<(u64, Vec3)> {
    bodies.iter().map(|b| (b.id, b.pos)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_ignores_storage_order_but_sees_positions() {
        let a = Body::new(0, 1.0, Vec3::new(1.0, 2.0, 3.0), Vec3::ZERO);
        let b = Body::new(1, 1.0, Vec3::new(-1.0, 0.5, 0.0), Vec3::ZERO);
        let c1 = position_checksum(&[a, b]);
        let c2 = position_checksum(&[b, a]);
        assert_eq!(c1, c2);
        let mut moved = b;
        moved.pos.z += 1e-3;
        assert_ne!(position_checksum(&[a, moved]), c1);
    }

    #[test]
    fn run_summary_measures_mass_centre_and_displacement() {
        let start = [
            Body::new(3, 1.0, Vec3::new(0.0, 0.0, 0.0), Vec3::ZERO),
            Body::new(1, 3.0, Vec3::new(1.0, 0.0, 0.0), Vec3::ZERO),
        ];
        let mut end = start;
        end[0].pos = Vec3::new(0.0, 2.0, 0.0);
        let s = RunSummary::of(&positions(&start), &[end[1], end[0]]);
        assert_eq!(s.bodies, 2);
        assert_eq!(s.total_mass, 4.0);
        assert_eq!(s.center_of_mass, Vec3::new(0.75, 0.5, 0.0));
        // Only body 3 (mass 1 of 4) moved, by 2: sqrt(1 * 4 / 4).
        assert_eq!(s.displacement_rms, 1.0);
        // A body lost on the way shows in the count and the mass.
        let lost = RunSummary::of(&positions(&start), &end[..1]);
        assert_eq!((lost.bodies, lost.total_mass), (1, 1.0));
        assert_eq!(lost.displacement_rms, 2.0);
    }

    #[test]
    fn weight_is_at_least_one() {
        let mut a = Body::new(0, 1.0, Vec3::ZERO, Vec3::ZERO);
        assert_eq!(a.weight(), 1);
        a.cost = 57;
        assert_eq!(a.weight(), 57);
    }
}
