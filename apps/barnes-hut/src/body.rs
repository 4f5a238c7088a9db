//! Bodies: point masses with their dynamical state and their force-computation cost.

use crate::geom::Vec3;
use crate::tree::PointMass;
use serde::{Deserialize, Serialize};

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
    fn weight_is_at_least_one() {
        let mut a = Body::new(0, 1.0, Vec3::ZERO, Vec3::ZERO);
        assert_eq!(a.weight(), 1);
        a.cost = 57;
        assert_eq!(a.weight(), 57);
    }
}
