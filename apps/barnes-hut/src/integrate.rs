//! Time integration and the sequential simulation.
//!
//! Leapfrog in kick-drift-kick form: `v += a dt/2; x += v dt; a = F(x); v += a dt/2`.
//! It is the same scheme as the Barnes/SPLASH-2 code (which keeps velocities half a step
//! ahead and corrects them after the force phase), written so that positions and velocities
//! are synchronous at the end of every step and the energy can be measured there.
//!
//! Each step runs the four phases of the sequential Barnes-Hut method, timed separately:
//! tree construction, centre-of-mass computation, force computation and position update.
//! The force at the starting positions is computed once before the first step, so a run of
//! `k` steps evaluates forces `k + 1` times.

use crate::body::Body;
use crate::force::{self, ForceParams};
use crate::tree::build_body_tree;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use thiserror::Error;

/// Parameters of a run.
///
/// The defaults follow the reference runs of the Suel/Blackston code, `-M10 -tstop 1.0
/// -dtime 0.025` (40 steps), with opening angle 0.5 (the reference does not state its own),
/// except for the softening: the reference runs used `-eps 0.000000625`, next to none, with
/// which close encounters of unsoftened bodies make the energy drift by several percent at
/// this time step (7% for 1,000 bodies). The default 0.025 is the usual softening of
/// Barnes' treecode for these units and keeps the drift near 1e-4; pass the reference value
/// to reproduce its workload (the cost per step is the same).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimParams {
    /// Largest number of bodies in a leaf cell (`-M`).
    pub max_leaf: usize,
    /// Opening angle and softening.
    pub force: ForceParams,
    /// Time step.
    pub dtime: f64,
    /// End time; the run takes `round(tstop / dtime)` steps.
    pub tstop: f64,
    /// Threads for the force phase (1: no thread pool).
    pub threads: usize,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            max_leaf: 10,
            force: ForceParams {
                theta: 0.5,
                eps: 0.025,
            },
            dtime: 0.025,
            tstop: 1.0,
            threads: 1,
        }
    }
}

/// The most steps a run may take: ten million, days of work for even a few bodies, so that
/// an absurd `tstop` is refused instead of running practically forever.
pub const MAX_STEPS: usize = 10_000_000;

/// The most threads the force phase may use.
pub const MAX_THREADS: usize = 1024;

impl SimParams {
    /// Number of steps of a run.
    pub fn steps(&self) -> usize {
        (self.tstop / self.dtime).round() as usize
    }

    /// Checks that the parameters describe a run that can be carried out.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.max_leaf == 0 {
            return Err(ParamError::MaxLeaf);
        }
        if !(self.force.theta > 0.0 && self.force.theta.is_finite()) {
            return Err(ParamError::Theta(self.force.theta));
        }
        if !(self.force.eps >= 0.0 && self.force.eps.is_finite()) {
            return Err(ParamError::Eps(self.force.eps));
        }
        if !(self.dtime > 0.0 && self.dtime.is_finite()) {
            return Err(ParamError::Dtime(self.dtime));
        }
        if !(self.tstop >= 0.0 && self.tstop.is_finite()) {
            return Err(ParamError::Tstop(self.tstop));
        }
        if (self.tstop / self.dtime).round() > MAX_STEPS as f64 {
            return Err(ParamError::Steps {
                tstop: self.tstop,
                dtime: self.dtime,
            });
        }
        if self.threads == 0 {
            return Err(ParamError::Threads);
        }
        if self.threads > MAX_THREADS {
            return Err(ParamError::TooManyThreads(self.threads));
        }
        Ok(())
    }
}

/// A parameter out of range.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ParamError {
    /// `-M` was zero.
    #[error("the largest number of bodies per leaf (-M) must be at least 1")]
    MaxLeaf,
    /// The opening angle was not positive and finite.
    #[error("the opening angle theta must be positive and finite, got {0}")]
    Theta(f64),
    /// The softening was negative or not finite.
    #[error("the softening eps must be zero or positive and finite, got {0}")]
    Eps(f64),
    /// The time step was not positive and finite.
    #[error("the time step dtime must be positive and finite, got {0}")]
    Dtime(f64),
    /// The end time was negative or not finite.
    #[error("the end time tstop must be zero or positive and finite, got {0}")]
    Tstop(f64),
    /// `tstop / dtime` gives more than [`MAX_STEPS`] steps.
    #[error(
        "tstop {tstop:e} / dtime {dtime:e} gives more than {MAX_STEPS} steps (round(tstop / dtime))"
    )]
    Steps {
        /// The end time.
        tstop: f64,
        /// The time step.
        dtime: f64,
    },
    /// Zero threads were asked for.
    #[error("at least one thread is needed")]
    Threads,
    /// More than [`MAX_THREADS`] threads were asked for.
    #[error("at most {MAX_THREADS} threads, got {0}")]
    TooManyThreads(usize),
    /// The thread pool could not be started.
    #[error("could not start the thread pool: {0}")]
    Pool(String),
    /// The load-imbalance threshold of the parallel method was below 1 or not finite.
    #[error("the load-imbalance threshold must be at least 1 and finite, got {0}")]
    Imbalance(f64),
    /// Fewer than two or more than [`MAX_BINS`](crate::orb::MAX_BINS) histogram bins
    /// were asked for the parallel median finder.
    #[error(
        "the median finder needs 2 to {max} histogram bins, got {0}",
        max = crate::orb::MAX_BINS
    )]
    Bins(usize),
}

/// Seconds spent in each phase, summed over steps. Names follow the profile tables of the
/// parallel code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    /// Root cell and tree construction (including reordering bodies into tree order).
    pub tree_construction: f64,
    /// Centre-of-mass computation.
    pub center_of_mass: f64,
    /// Force computation.
    pub force_computation: f64,
    /// Update of positions and velocities.
    pub position_update: f64,
}

impl PhaseTimes {
    /// Sum of all phases.
    pub fn total(&self) -> f64 {
        self.tree_construction + self.center_of_mass + self.force_computation + self.position_update
    }
}

/// How the potential energy is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnergyMethod {
    /// `½ Σ m_i φ_i` with the potentials of the last tree force computation: free, but
    /// carries the tree's approximation error (about as large as its force error).
    Tree,
    /// Exact O(n²) summation over pairs: for checks and small systems.
    Direct,
}

/// Kinetic and potential energy of the system.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// `Σ ½ m v²`.
    pub kinetic: f64,
    /// Gravitational potential energy (softened).
    pub potential: f64,
}

impl Energy {
    /// Kinetic plus potential.
    pub fn total(&self) -> f64 {
        self.kinetic + self.potential
    }
}

/// Kinetic energy `Σ ½ m v²`.
pub fn kinetic_energy(bodies: &[Body]) -> f64 {
    bodies.iter().map(|b| 0.5 * b.mass * b.vel.norm2()).sum()
}

/// Potential energy `½ Σ m φ` from the potentials of the last force computation.
pub fn tree_potential_energy(bodies: &[Body]) -> f64 {
    0.5 * bodies.iter().map(|b| b.mass * b.phi).sum::<f64>()
}

/// Velocity update by `dt` with the current accelerations.
pub fn kick(bodies: &mut [Body], dt: f64) {
    for b in bodies {
        b.vel += b.acc * dt;
    }
}

/// Position update by `dt` with the current velocities.
pub fn drift(bodies: &mut [Body], dt: f64) {
    for b in bodies {
        b.pos += b.vel * dt;
    }
}

/// The sequential Barnes-Hut simulation.
pub struct Simulation {
    bodies: Vec<Body>,
    params: SimParams,
    pool: Option<rayon::ThreadPool>,
    times: PhaseTimes,
    forces_current: bool,
    steps_done: usize,
    interactions: u64,
}

impl Simulation {
    /// A simulation of `bodies` with `params`; fails on invalid parameters.
    pub fn new(bodies: Vec<Body>, params: SimParams) -> Result<Simulation, ParamError> {
        params.validate()?;
        let pool = if params.threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(params.threads)
                    .build()
                    .map_err(|e| ParamError::Pool(e.to_string()))?,
            )
        } else {
            None
        };
        Ok(Simulation {
            bodies,
            params,
            pool,
            times: PhaseTimes::default(),
            forces_current: false,
            steps_done: 0,
            interactions: 0,
        })
    }

    /// Tree construction, centre of mass and force computation at the current positions.
    /// Bodies end up in tree order.
    pub fn compute_forces(&mut self) {
        let t0 = Instant::now();
        let mut tree = build_body_tree(&mut self.bodies, self.params.max_leaf);
        let t1 = Instant::now();
        tree.compute_centres_of_mass();
        let t2 = Instant::now();
        // Bodies are in tree order, so body i is slot i.
        self.interactions = force::compute_forces(
            &tree,
            &mut self.bodies,
            |i| i as u32,
            &self.params.force,
            self.pool.as_ref(),
        );
        let t3 = Instant::now();
        self.times.tree_construction += (t1 - t0).as_secs_f64();
        self.times.center_of_mass += (t2 - t1).as_secs_f64();
        self.times.force_computation += (t3 - t2).as_secs_f64();
        self.forces_current = true;
    }

    /// One leapfrog step of `dtime`.
    pub fn step(&mut self) {
        if !self.forces_current {
            self.compute_forces();
        }
        let half = 0.5 * self.params.dtime;
        let t0 = Instant::now();
        kick(&mut self.bodies, half);
        drift(&mut self.bodies, self.params.dtime);
        self.times.position_update += t0.elapsed().as_secs_f64();
        self.compute_forces();
        let t1 = Instant::now();
        kick(&mut self.bodies, half);
        self.times.position_update += t1.elapsed().as_secs_f64();
        self.steps_done += 1;
        tracing::debug!(
            step = self.steps_done,
            interactions = self.interactions,
            "step done"
        );
    }

    /// Runs the remaining steps up to `tstop`.
    pub fn run(&mut self) {
        while self.steps_done < self.params.steps() {
            self.step();
        }
    }

    /// The energy at the current state; computes forces first if they are stale.
    pub fn energy(&mut self, method: EnergyMethod) -> Energy {
        if !self.forces_current {
            self.compute_forces();
        }
        let potential = match method {
            EnergyMethod::Tree => tree_potential_energy(&self.bodies),
            EnergyMethod::Direct => force::direct_potential_energy(
                &self.bodies,
                self.params.force.eps,
                self.pool.as_ref(),
            ),
        };
        Energy {
            kinetic: kinetic_energy(&self.bodies),
            potential,
        }
    }

    /// The bodies, in tree order of the last force computation.
    pub fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// The bodies, giving up the simulation.
    pub fn into_bodies(self) -> Vec<Body> {
        self.bodies
    }

    /// The parameters.
    pub fn params(&self) -> &SimParams {
        &self.params
    }

    /// Seconds per phase so far.
    pub fn times(&self) -> &PhaseTimes {
        &self.times
    }

    /// Steps taken so far.
    pub fn steps_done(&self) -> usize {
        self.steps_done
    }

    /// Interactions of the last force computation (the total cost).
    pub fn interactions(&self) -> u64 {
        self.interactions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::Vec3;
    use crate::plummer;

    #[test]
    fn default_run_has_forty_steps() {
        assert_eq!(SimParams::default().steps(), 40);
        assert!(SimParams::default().validate().is_ok());
    }

    #[test]
    fn invalid_parameters_are_refused() {
        let mut p = SimParams::default();
        p.force.theta = 0.0;
        assert_eq!(p.validate(), Err(ParamError::Theta(0.0)));
        let p = SimParams {
            dtime: f64::NAN,
            ..SimParams::default()
        };
        assert!(matches!(p.validate(), Err(ParamError::Dtime(_))));
        let p = SimParams {
            max_leaf: 0,
            ..SimParams::default()
        };
        assert!(Simulation::new(Vec::new(), p).is_err());
        // Absurd lengths and thread counts are refused, not run for ever.
        let p = SimParams {
            tstop: 1e300,
            ..SimParams::default()
        };
        assert!(matches!(p.validate(), Err(ParamError::Steps { .. })));
        let p = SimParams {
            tstop: MAX_STEPS as f64 * 0.025,
            ..SimParams::default()
        };
        assert_eq!(p.validate(), Ok(()));
        let p = SimParams {
            threads: MAX_THREADS + 1,
            ..SimParams::default()
        };
        assert_eq!(
            p.validate(),
            Err(ParamError::TooManyThreads(MAX_THREADS + 1))
        );
    }

    #[test]
    fn circular_binary_keeps_its_orbit() {
        // Two equal masses m a distance 1 apart, each at r = 1/2 from the centre of mass:
        // m v² / r = m² / 1² gives v = sqrt(m / 2).
        let m = 1.0;
        let v = (m / 2.0f64).sqrt();
        let bodies = vec![
            Body::new(0, m, Vec3::new(0.5, 0.0, 0.0), Vec3::new(0.0, v, 0.0)),
            Body::new(1, m, Vec3::new(-0.5, 0.0, 0.0), Vec3::new(0.0, -v, 0.0)),
        ];
        let params = SimParams {
            dtime: 0.01,
            tstop: 2.0,
            force: ForceParams {
                theta: 0.5,
                eps: 0.0,
            },
            ..SimParams::default()
        };
        let mut sim = Simulation::new(bodies, params).unwrap();
        let e0 = sim.energy(EnergyMethod::Direct).total();
        sim.run();
        let e1 = sim.energy(EnergyMethod::Direct).total();
        assert_eq!(sim.steps_done(), 200);
        assert!(((e1 - e0) / e0).abs() < 1e-6, "energy {e0} -> {e1}");
        for b in sim.bodies() {
            assert!((b.pos.norm() - 0.5).abs() < 1e-3, "radius {}", b.pos.norm());
        }
    }

    #[test]
    fn plummer_energy_is_conserved_over_the_default_run() {
        let bodies = plummer::generate(1000, 1);
        let mut sim = Simulation::new(bodies, SimParams::default()).unwrap();
        let e0 = sim.energy(EnergyMethod::Direct).total();
        sim.run();
        let e1 = sim.energy(EnergyMethod::Direct).total();
        assert_eq!(sim.steps_done(), 40);
        let drift = ((e1 - e0) / e0).abs();
        assert!(drift < 0.005, "energy {e0} -> {e1}, drift {drift}");
        // The system starts near virial equilibrium in N-body units (E = -1/4).
        assert!((e0 + 0.25).abs() < 0.02, "initial energy {e0}");
        let t = sim.times();
        assert!(t.force_computation > 0.0 && t.tree_construction > 0.0);
    }
}
