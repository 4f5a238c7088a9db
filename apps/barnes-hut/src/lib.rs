//! Barnes-Hut N-body simulation, sequential, with the building blocks of the parallel
//! algorithm of Suel and Blackston.
//!
//! A step of the sequential method has four phases: build the oct-tree ([`tree`]), compute
//! the centres of mass, compute forces by walking the tree with an opening criterion
//! ([`force`]), and update positions and velocities ([`integrate`]). Initial conditions come
//! from a seeded Plummer-model generator ([`plummer`]) or a text file ([`io`]).
//!
//! # Example
//!
//! Simulate 500 Plummer bodies for four steps and check that energy is conserved:
//!
//! ```
//! use barnes_hut::integrate::{EnergyMethod, SimParams, Simulation};
//!
//! let bodies = barnes_hut::plummer::generate(500, 42);
//! let params = SimParams { tstop: 0.1, ..SimParams::default() };
//! let mut sim = Simulation::new(bodies, params)?;
//! let e0 = sim.energy(EnergyMethod::Direct).total();
//! sim.run();
//! let e1 = sim.energy(EnergyMethod::Direct).total();
//! assert_eq!(sim.steps_done(), 4);
//! assert!(((e1 - e0) / e0).abs() < 1e-3);
//! # Ok::<(), barnes_hut::integrate::ParamError>(())
//! ```

pub mod body;
pub mod force;
pub mod geom;
pub mod integrate;
pub mod io;
pub mod plummer;
mod rng;
pub mod tree;

pub use body::Body;
pub use geom::{Aabb, Vec3};
