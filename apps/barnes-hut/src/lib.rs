//! Barnes-Hut N-body simulation: the sequential method and the parallel method of Suel and
//! Blackston on the bulk-synchronous layer `bsp`.
//!
//! A step of the sequential method has four phases: build the oct-tree ([`tree`]), compute
//! the centres of mass, compute forces by walking the tree with an opening criterion
//! ([`force`]), and update positions and velocities ([`integrate`]). Initial conditions come
//! from a seeded Plummer-model generator ([`plummer`]) or a text file ([`io`]).
//!
//! The parallel method ([`parallel`]) gives each process a region of space and the bodies in
//! it, and runs eight phases per step. Its pieces that need no communication are modules of
//! their own, each callable by one process on its own data:
//! - [`orb`]: orthogonal recursive bisection for any number of processes, with cost-weighted
//!   planes found from histograms that processes compute locally and sum;
//! - [`migrate`]: which bodies leave for which process;
//! - [`balance`]: when the loads call for rebalancing, and which ORB subtrees to re-split;
//! - [`tree::build_body_tree`]: the local tree over a region's bodies;
//! - [`essential`]: the essential tree one process sends another, and the tree over local
//!   bodies plus received items on which local forces are computed.
//!
//! A parallel step is then: exchange bounding boxes and [`orb::Orb::set_bounds`]; migrate;
//! check loads and, if needed, rebuild the ORB with [`orb::OrbBuilder`]; build the local
//! tree; send [`essential::essential_tree`] to every other process; build a
//! [`essential::LocalEssentialTree`]; compute forces; update. [`parallel::Process`] does
//! this with `bsp` supersteps and collectives.
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
//!
//! The same on three processes (threads of this process here; processes of an `ipl` pool
//! with `bsp::Bsp::new`), with the energy summed over processes:
//!
//! ```
//! use barnes_hut::integrate::{EnergyMethod, SimParams};
//! use barnes_hut::parallel::{scatter, ParallelParams, Process};
//!
//! let params = ParallelParams {
//!     sim: SimParams { tstop: 0.1, ..SimParams::default() },
//!     ..ParallelParams::default()
//! };
//! let drifts = bsp::run_local(3, |bsp| {
//!     let all = (bsp.pid() == 0).then(|| barnes_hut::plummer::generate(500, 42));
//!     let mine = scatter(bsp, 0, all).expect("scatter");
//!     let mut proc = Process::new(bsp, mine, params).expect("decomposition");
//!     let e0 = proc.energy(EnergyMethod::Direct).expect("energy").total();
//!     proc.run().expect("run");
//!     let e1 = proc.energy(EnergyMethod::Direct).expect("energy").total();
//!     assert_eq!(proc.steps_done(), 4);
//!     Ok((e1 - e0) / e0)
//! })?;
//! assert!(drifts.iter().all(|d| d.abs() < 1e-3 && *d == drifts[0]));
//! # Ok::<(), bsp::Error>(())
//! ```

#![warn(missing_docs)]

pub mod balance;
pub mod body;
pub mod essential;
pub mod force;
pub mod geom;
pub mod integrate;
pub mod io;
pub mod migrate;
pub mod orb;
pub mod parallel;
pub mod plummer;
mod rng;
pub mod tree;

pub use body::Body;
pub use geom::{Aabb, Vec3};
