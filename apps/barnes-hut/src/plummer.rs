//! Plummer-model initial conditions.
//!
//! The method of Aarseth, Hénon and Wielen (1974) as coded in the SPLASH-2 `barnes` program
//! and in the Suel/Blackston code: radii from the inverse of the Plummer cumulative mass
//! profile (truncated at 99.9% of the mass so that no body lands far away), speeds by von
//! Neumann rejection from the isotropic distribution function, directions uniform on the
//! sphere. Units are the standard N-body units (G = 1, total mass 1, total energy -1/4),
//! obtained with the length scale 3π/16. The centre of mass is moved to the origin and
//! brought to rest.

use crate::body::Body;
use crate::geom::Vec3;
use crate::rng::SplitMix64;

/// Fraction of the Plummer mass profile sampled; the remaining tail reaches to infinity.
const MASS_FRACTION: f64 = 0.999;

/// `n` bodies of a Plummer sphere of total mass 1, numbered 0..n, from `seed`.
///
/// The same `(n, seed)` gives the same bodies bit for bit on every platform: the generator
/// is a fixed SplitMix64 stream and bodies are drawn one after the other from it.
///
/// ```
/// let bodies = barnes_hut::plummer::generate(100, 7);
/// let total: f64 = bodies.iter().map(|b| b.mass).sum();
/// assert!((total - 1.0).abs() < 1e-12);
/// ```
pub fn generate(n: usize, seed: u64) -> Vec<Body> {
    let rsc = 3.0 * std::f64::consts::PI / 16.0;
    let vsc = (1.0 / rsc).sqrt();
    let mass = if n == 0 { 0.0 } else { 1.0 / n as f64 };
    let mut rng = SplitMix64::new(seed);
    let mut bodies = Vec::with_capacity(n);
    for id in 0..n {
        let r = 1.0 / (rng.uniform(0.0, MASS_FRACTION).powf(-2.0 / 3.0) - 1.0).sqrt();
        let pos = pick_shell(&mut rng, rsc * r);
        // Rejection sampling of q = v / v_escape from g(q) = q^2 (1 - q^2)^3.5, whose maximum is below 0.1.
        let q = loop {
            let x = rng.uniform(0.0, 1.0);
            let y = rng.uniform(0.0, 0.1);
            if y <= x * x * (1.0 - x * x).powf(3.5) {
                break x;
            }
        };
        let v = std::f64::consts::SQRT_2 * q / (1.0 + r * r).powf(0.25);
        let vel = pick_shell(&mut rng, vsc * v);
        bodies.push(Body::new(id as u64, mass, pos, vel));
    }
    to_centre_of_mass_frame(&mut bodies);
    bodies
}

/// A point uniformly distributed on the sphere of radius `radius`.
fn pick_shell(rng: &mut SplitMix64, radius: f64) -> Vec3 {
    loop {
        let v = Vec3::new(
            rng.uniform(-1.0, 1.0),
            rng.uniform(-1.0, 1.0),
            rng.uniform(-1.0, 1.0),
        );
        let r2 = v.norm2();
        // Reject outside the unit ball (and the centre, which has no direction).
        if r2 <= 1.0 && r2 > 0.0 {
            return v * (radius / r2.sqrt());
        }
    }
}

/// Moves the centre of mass to the origin and brings it to rest.
pub fn to_centre_of_mass_frame(bodies: &mut [Body]) {
    let total: f64 = bodies.iter().map(|b| b.mass).sum();
    if total <= 0.0 {
        return;
    }
    let mut cmr = Vec3::ZERO;
    let mut cmv = Vec3::ZERO;
    for b in bodies.iter() {
        cmr += b.pos * b.mass;
        cmv += b.vel * b.mass;
    }
    cmr = cmr * (1.0 / total);
    cmv = cmv * (1.0 / total);
    for b in bodies.iter_mut() {
        b.pos -= cmr;
        b.vel -= cmv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed_and_different_across_seeds() {
        let a = generate(500, 3);
        let b = generate(500, 3);
        assert_eq!(a, b);
        let c = generate(500, 4);
        assert_ne!(a[0].pos, c[0].pos);
    }

    #[test]
    fn prefix_does_not_depend_on_n_before_recentring() {
        // Bodies are drawn in sequence, so the first bodies of a larger system differ from
        // those of a smaller one only by the centre-of-mass shift.
        let small = generate(100, 11);
        let large = generate(200, 11);
        let d0 = small[0].pos - large[0].pos;
        let d5 = small[5].pos - large[5].pos;
        assert!((d0 - d5).norm() < 1e-12);
    }

    #[test]
    fn centre_of_mass_at_rest_at_origin() {
        let bodies = generate(2000, 1);
        let mut cmr = Vec3::ZERO;
        let mut cmv = Vec3::ZERO;
        for b in &bodies {
            cmr += b.pos * b.mass;
            cmv += b.vel * b.mass;
        }
        assert!(cmr.norm() < 1e-12, "centre of mass at {cmr:?}");
        assert!(cmv.norm() < 1e-12, "centre of mass moves with {cmv:?}");
    }

    #[test]
    fn virial_units_kinetic_energy_near_one_quarter() {
        // In N-body units E = -1/4 and, in virial equilibrium (2K + W = 0), K = -E = 1/4.
        let bodies = generate(4000, 5);
        let k: f64 = bodies.iter().map(|b| 0.5 * b.mass * b.vel.norm2()).sum();
        assert!((k - 0.25).abs() < 0.02, "kinetic energy {k}");
        // Half-mass radius of a Plummer sphere in these units is about 0.77.
        let mut r: Vec<f64> = bodies.iter().map(|b| b.pos.norm()).collect();
        r.sort_by(f64::total_cmp);
        let half = r[r.len() / 2];
        assert!((half - 0.77).abs() < 0.06, "half-mass radius {half}");
    }
}
