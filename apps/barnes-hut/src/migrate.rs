//! Body migration: which local bodies leave for which process after the decomposition
//! changed or bodies moved across region boundaries.

use crate::body::Body;
use crate::orb::Orb;

/// Bodies leaving for one process.
#[derive(Clone, Debug, PartialEq)]
pub struct Departure {
    /// The receiving process.
    pub dest: usize,
    /// The bodies it receives.
    pub bodies: Vec<Body>,
}

/// For each of `bodies`, the process that owns it under `orb`.
pub fn destinations(orb: &Orb, bodies: &[Body]) -> Vec<usize> {
    orb.assign(bodies)
}

/// Removes from `bodies` (held by process `me`) every body that `orb` assigns elsewhere and
/// returns them grouped by destination, in increasing order of destination. The bodies that
/// stay keep their relative order.
pub fn depart(orb: &Orb, me: usize, bodies: &mut Vec<Body>) -> Vec<Departure> {
    let mut out: Vec<Vec<Body>> = vec![Vec::new(); orb.nprocs()];
    bodies.retain(|b| {
        let owner = orb.owner(b.pos);
        if owner == me {
            true
        } else {
            out[owner].push(*b);
            false
        }
    });
    out.into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(dest, bodies)| Departure { dest, bodies })
        .collect()
}

/// Adds bodies that arrived from other processes.
pub fn arrive<I: IntoIterator<Item = Body>>(bodies: &mut Vec<Body>, arrivals: I) {
    bodies.extend(arrivals);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orb::{bounding_box, decompose};
    use crate::plummer;

    #[test]
    fn migration_between_simulated_processes_delivers_every_body_once() {
        let bodies = plummer::generate(1500, 12);
        let p = 3;
        let orb = decompose(&bodies, bounding_box(&bodies), p).unwrap();
        // Start from a round-robin distribution, as the initial scatter of the reference code.
        let mut held: Vec<Vec<Body>> = vec![Vec::new(); p];
        for (i, b) in bodies.iter().enumerate() {
            held[i % p].push(*b);
        }
        let mut mail: Vec<Vec<Body>> = vec![Vec::new(); p];
        for (me, local) in held.iter_mut().enumerate() {
            for d in depart(&orb, me, local) {
                assert_ne!(d.dest, me);
                mail[d.dest].extend(d.bodies);
            }
        }
        for (me, local) in held.iter_mut().enumerate() {
            arrive(local, mail[me].drain(..));
            assert!(local.iter().all(|b| orb.owner(b.pos) == me));
        }
        let mut ids: Vec<u64> = held.iter().flatten().map(|b| b.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..1500).collect::<Vec<u64>>());
        // Nothing moves a second time.
        for (me, local) in held.iter_mut().enumerate() {
            assert!(depart(&orb, me, local).is_empty());
        }
        assert_eq!(destinations(&orb, &held[1]), vec![1; held[1].len()]);
    }
}
