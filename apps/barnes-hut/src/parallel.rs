//! The parallel Barnes-Hut method of Suel and Blackston on the bulk-synchronous layer `bsp`.
//!
//! Every process holds the bodies of one region of an ORB decomposition ([`crate::orb`])
//! that all processes hold identically. A force computation ([`Process::compute_forces`])
//! runs the phases 1 to 7 of the parallel method, a step ([`Process::step`]) adds phase 8
//! around it:
//!
//! 1. **ORB update**: one all-reduce gives every process, for every process, the bounding
//!    box and the load (the summed [`Body::weight`], the interaction counts of the last
//!    force computation) of the bodies it will hold: a body's owner depends on the planes
//!    only, so each process sorts its bodies by owner before any moves. The union of the
//!    boxes becomes the outer boundary ([`Orb::set_bounds`]), and the bodies that crossed a
//!    plane migrate (one superstep).
//! 2. **Load checking and balancing**: when the most loaded process is above the threshold
//!    times the mean, the ORB subtrees chosen by [`balance::subtrees_to_rebalance`] are split
//!    anew with the parallel median finder (rounds of partial cost histograms summed with
//!    `all_reduce_slice`, [`OrbBuilder`]) over the bodies where they are, and then the
//!    bodies migrate once, to their final owners (instead of in phase 1), and the boxes of
//!    the processes' bodies are all-gathered again.
//! 3. **Tree construction** over the local bodies ([`build_body_tree`]).
//! 4. **Centre-of-mass computation** of the local tree.
//! 5. **Essential-tree exchange**: send each other process the [`essential_tree`] of the
//!    local tree for the bounding box of its bodies (one superstep).
//! 6. **Centre-of-mass update**: the tree over local bodies and received items
//!    ([`LocalEssentialTree`]) and its centres of mass.
//! 7. **Force computation** on the local bodies, on a thread pool when asked.
//! 8. **Update**: the leapfrog kicks and drift of [`crate::integrate`].
//!
//! A step without rebalancing thus costs three exchanges: the all-reduce of phase 1 and
//! the supersteps of the migration and of the essential trees.
//!
//! Bodies travel as two slices of numbers per destination and superstep (ids and costs as
//! `u64`, the rest as `f64`), essential trees as two `f64` slices (cells, bodies), so
//! that nothing is serialized field by field. Each phase is timed on every process
//! ([`ParallelTimes`]); waiting for slower processes falls into the phase whose collective
//! waits.
//!
//! With one process the method does exactly the work of the sequential [`Simulation`]
//! and gives the same bodies bit for bit.
//!
//! [`Simulation`]: crate::integrate::Simulation

use crate::balance;
use crate::body::{Body, PointMass};
use crate::essential::{essential_tree, EssentialTree, LocalEssentialTree};
use crate::geom::{Aabb, Vec3};
use crate::integrate::{
    drift, kick, kinetic_energy, tree_potential_energy, Energy, EnergyMethod, ParamError, SimParams,
};
use crate::orb::{bounding_box, Histogram, Orb, OrbBuilder, OrbError, DEFAULT_BINS, MAX_BINS};
use crate::tree::build_body_tree;
use bsp::{Bsp, Op};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use thiserror::Error;

/// Parameters of a parallel run: those of the sequential method plus load balancing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParallelParams {
    /// Leaf size, opening angle, softening, time step, end time, threads per process.
    pub sim: SimParams,
    /// Rebalance when the most loaded process carries more than this many times the mean
    /// load (default 1.02: 2% above the mean). Rebalancing is cheap (a few all-reduces of
    /// 4 KiB histograms per ORB level, and a migration), an imbalance costs its share of
    /// every force phase.
    pub imbalance_threshold: f64,
    /// Histogram bins per round of the parallel median finder.
    pub bins: usize,
}

impl Default for ParallelParams {
    fn default() -> Self {
        ParallelParams {
            sim: SimParams::default(),
            imbalance_threshold: 1.02,
            bins: DEFAULT_BINS,
        }
    }
}

impl ParallelParams {
    /// Checks that the parameters describe a run that can be carried out.
    pub fn validate(&self) -> Result<(), ParamError> {
        self.sim.validate()?;
        if !(self.imbalance_threshold >= 1.0 && self.imbalance_threshold.is_finite()) {
            return Err(ParamError::Imbalance(self.imbalance_threshold));
        }
        if !(2..=MAX_BINS).contains(&self.bins) {
            return Err(ParamError::Bins(self.bins));
        }
        Ok(())
    }
}

/// Seconds one process spent in each phase, summed over force computations and steps. The
/// names follow the profile tables of the parallel code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ParallelTimes {
    /// Phase 1: global bounds, [`Orb::set_bounds`], migration (and, before the first force
    /// computation, the initial decomposition).
    pub orb_update: f64,
    /// Phase 2: load check and, when needed, the rebalancing rounds and their migration.
    pub load_balancing: f64,
    /// Phase 3: the tree over the local bodies.
    pub tree_construction: f64,
    /// Phase 4: centres of mass of the local tree.
    pub center_of_mass: f64,
    /// Phase 5: bounding-box all-gather, essential trees, their exchange.
    pub essential_tree_exchange: f64,
    /// Phase 6: the tree over local bodies and received items, and its centres of mass.
    pub center_of_mass_update: f64,
    /// Phase 7: forces on the local bodies.
    pub force_computation: f64,
    /// Phase 8: kicks and drift.
    pub position_update: f64,
}

impl ParallelTimes {
    /// Sum of all phases.
    pub fn total(&self) -> f64 {
        self.as_array().iter().sum()
    }

    /// The phases in order, as `(name, seconds)`.
    pub fn named(&self) -> [(&'static str, f64); 8] {
        let a = self.as_array();
        [
            ("orb_update", a[0]),
            ("load_balancing", a[1]),
            ("tree_construction", a[2]),
            ("center_of_mass", a[3]),
            ("essential_tree_exchange", a[4]),
            ("center_of_mass_update", a[5]),
            ("force_computation", a[6]),
            ("position_update", a[7]),
        ]
    }

    /// The phases in order.
    pub fn as_array(&self) -> [f64; 8] {
        [
            self.orb_update,
            self.load_balancing,
            self.tree_construction,
            self.center_of_mass,
            self.essential_tree_exchange,
            self.center_of_mass_update,
            self.force_computation,
            self.position_update,
        ]
    }

    /// The times from an array in the order of [`ParallelTimes::as_array`].
    pub fn from_array(a: [f64; 8]) -> ParallelTimes {
        ParallelTimes {
            orb_update: a[0],
            load_balancing: a[1],
            tree_construction: a[2],
            center_of_mass: a[3],
            essential_tree_exchange: a[4],
            center_of_mass_update: a[5],
            force_computation: a[6],
            position_update: a[7],
        }
    }
}

/// Counts of one process's communication and balancing work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelStats {
    /// Rebalancings of the decomposition (the same on every process).
    pub rebalances: u64,
    /// Histogram rounds of the parallel median finder, initial decomposition included.
    pub median_rounds: u64,
    /// Bodies this process received from others (initial distribution not counted).
    pub bodies_received: u64,
    /// Essential-tree items (cells and bodies) this process received.
    pub essential_items_received: u64,
    /// Interactions of this process's last force computation.
    pub interactions: u64,
}

/// An error of the parallel method, naming what failed.
#[derive(Debug, Error)]
pub enum ParallelError {
    /// A communication step failed (another process gone, a transport error, ...).
    #[error("{during}: {source}")]
    Bsp {
        /// The step of the method that was communicating.
        during: &'static str,
        /// The error of the BSP layer (it names the processes involved).
        #[source]
        source: bsp::Error,
    },
    /// A message did not have the layout this module sends.
    #[error("process {pid}: malformed {what} from process {src}: {detail}")]
    Malformed {
        /// The receiving process.
        pid: usize,
        /// The sender.
        src: usize,
        /// What was being received.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Invalid parameters.
    #[error("invalid parameters: {0}")]
    Params(#[from] ParamError),
    /// The ORB construction protocol failed.
    #[error("ORB decomposition: {0}")]
    Orb(#[from] OrbError),
}

/// Result of the parallel method.
pub type Result<T, E = ParallelError> = std::result::Result<T, E>;

fn comm(during: &'static str) -> impl FnOnce(bsp::Error) -> ParallelError {
    move |source| ParallelError::Bsp { during, source }
}

/// `f64` values per body on the wire: mass, position, velocity, acceleration, potential.
const BODY_F64S: usize = 11;
/// `f64` values per point mass on the wire: position, mass.
const POINT_F64S: usize = 4;

/// Bodies as raw numbers: `[id, cost]` per body, and [`BODY_F64S`] floats per body.
fn pack_bodies(bodies: &[Body]) -> (Vec<u64>, Vec<f64>) {
    let mut ints = Vec::with_capacity(2 * bodies.len());
    let mut floats = Vec::with_capacity(BODY_F64S * bodies.len());
    for b in bodies {
        ints.extend([b.id, b.cost]);
        floats.extend([
            b.mass, b.pos.x, b.pos.y, b.pos.z, b.vel.x, b.vel.y, b.vel.z, b.acc.x, b.acc.y,
            b.acc.z, b.phi,
        ]);
    }
    (ints, floats)
}

/// The inverse of [`pack_bodies`], appending to `out`.
fn unpack_bodies(
    ints: &[u64],
    floats: &[f64],
    out: &mut Vec<Body>,
) -> std::result::Result<usize, String> {
    if ints.len() % 2 != 0 || floats.len() != ints.len() / 2 * BODY_F64S {
        return Err(format!(
            "{} integers and {} floats do not describe whole bodies",
            ints.len(),
            floats.len()
        ));
    }
    let n = ints.len() / 2;
    out.reserve(n);
    for (i, f) in ints.chunks_exact(2).zip(floats.chunks_exact(BODY_F64S)) {
        out.push(Body {
            id: i[0],
            cost: i[1],
            mass: f[0],
            pos: Vec3::new(f[1], f[2], f[3]),
            vel: Vec3::new(f[4], f[5], f[6]),
            acc: Vec3::new(f[7], f[8], f[9]),
            phi: f[10],
        });
    }
    Ok(n)
}

fn pack_points(points: &[PointMass]) -> Vec<f64> {
    let mut v = Vec::with_capacity(POINT_F64S * points.len());
    for p in points {
        v.extend([p.pos.x, p.pos.y, p.pos.z, p.mass]);
    }
    v
}

fn unpack_points(v: &[f64]) -> std::result::Result<Vec<PointMass>, String> {
    if v.len() % POINT_F64S != 0 {
        return Err(format!("{} floats are not whole point masses", v.len()));
    }
    Ok(v.chunks_exact(POINT_F64S)
        .map(|c| PointMass {
            pos: Vec3::new(c[0], c[1], c[2]),
            mass: c[3],
        })
        .collect())
}

/// Sends each group of `outgoing` bodies to its destination, ends the superstep, and
/// appends the bodies that arrive to `bodies`. Returns the number of bodies received.
fn exchange_bodies(
    bsp: &mut Bsp,
    outgoing: Vec<(usize, Vec<Body>)>,
    bodies: &mut Vec<Body>,
    during: &'static str,
) -> Result<u64> {
    for (dest, group) in outgoing {
        let (ints, floats) = pack_bodies(&group);
        bsp.send_vec(dest, ints).map_err(comm(during))?;
        bsp.send_vec(dest, floats).map_err(comm(during))?;
    }
    bsp.sync().map_err(comm(during))?;
    let mut received = 0;
    let pid = bsp.pid();
    while let Some((src, ints)) = bsp.recv_slice::<u64>().map_err(comm(during))? {
        let malformed = |detail: String| ParallelError::Malformed {
            pid,
            src,
            what: "bodies",
            detail,
        };
        let Some((src2, floats)) = bsp.recv_slice::<f64>().map_err(comm(during))? else {
            return Err(malformed("the floats of the bodies are missing".into()));
        };
        if src2 != src {
            return Err(malformed(format!(
                "the floats of the bodies came from process {src2}"
            )));
        }
        received += unpack_bodies(&ints, &floats, bodies).map_err(malformed)? as u64;
    }
    Ok(received)
}

/// Distributes the bodies that process `root` holds (`Some` there, ignored elsewhere)
/// round robin over all processes, as the initial scatter of the reference code does, and
/// returns this process's share. One superstep; every process must call it.
pub fn scatter(bsp: &mut Bsp, root: usize, all: Option<Vec<Body>>) -> Result<Vec<Body>> {
    let p = bsp.nprocs();
    let mut mine = Vec::new();
    let mut outgoing = Vec::new();
    if bsp.pid() == root {
        let all = all.unwrap_or_default();
        let mut groups: Vec<Vec<Body>> = (0..p)
            .map(|_| Vec::with_capacity(all.len() / p + 1))
            .collect();
        for (i, b) in all.into_iter().enumerate() {
            groups[i % p].push(b);
        }
        for (dest, g) in groups.into_iter().enumerate() {
            if dest == root {
                mine = g;
            } else if !g.is_empty() {
                outgoing.push((dest, g));
            }
        }
    }
    exchange_bodies(bsp, outgoing, &mut mine, "distributing the initial bodies")?;
    Ok(mine)
}

/// Seconds since `t`, and restarts `t`.
fn lap(t: &mut Instant) -> f64 {
    let now = Instant::now();
    let s = (now - *t).as_secs_f64();
    *t = now;
    s
}

/// One process of the parallel Barnes-Hut method.
///
/// Every process of the BSP pool creates one with its share of the bodies and then calls
/// the same methods in the same order: all of them except the accessors communicate.
///
/// ```
/// use barnes_hut::parallel::{ParallelParams, Process};
///
/// let params = ParallelParams::default();
/// let sums = bsp::run_local(2, |bsp| {
///     // Process 0 generates the bodies; they are spread round robin, then by region.
///     let all = (bsp.pid() == 0).then(|| barnes_hut::plummer::generate(300, 1));
///     let mine = barnes_hut::parallel::scatter(bsp, 0, all).expect("scatter");
///     let mut proc = Process::new(bsp, mine, params).expect("decompose");
///     proc.step().expect("step");
///     Ok(proc.bodies().len())
/// })?;
/// assert_eq!(sums.iter().sum::<usize>(), 300);
/// # Ok::<(), bsp::Error>(())
/// ```
pub struct Process<'b> {
    bsp: &'b mut Bsp,
    bodies: Vec<Body>,
    orb: Orb,
    params: ParallelParams,
    pool: Option<rayon::ThreadPool>,
    times: ParallelTimes,
    stats: ParallelStats,
    forces_current: bool,
    steps_done: usize,
}

impl std::fmt::Debug for Process<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.bsp.pid())
            .field("nprocs", &self.bsp.nprocs())
            .field("bodies", &self.bodies.len())
            .field("steps_done", &self.steps_done)
            .finish()
    }
}

impl<'b> Process<'b> {
    /// The process of `bsp` holding `local` bodies (any share: each process may hold any
    /// bodies, as long as every body is held by exactly one). Computes the initial ORB
    /// decomposition (all bodies weighing at least one) and migrates the bodies to their
    /// regions; the time counts as [`ParallelTimes::orb_update`].
    pub fn new(bsp: &'b mut Bsp, local: Vec<Body>, params: ParallelParams) -> Result<Process<'b>> {
        params.validate()?;
        let pool = if params.sim.threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(params.sim.threads)
                    .build()
                    .map_err(|e| ParamError::Pool(e.to_string()))?,
            )
        } else {
            None
        };
        let mut t = Instant::now();
        let mut bodies = local;
        let bounds = global_bounds(bsp, &bodies)?;
        let builder = OrbBuilder::with_bins(bounds, bsp.nprocs(), params.bins)?;
        let (orb, rounds) = run_median_finder(bsp, &bodies, builder, "the initial decomposition")?;
        let received = migrate(
            bsp,
            &orb,
            &mut bodies,
            "migrating bodies to their initial regions",
        )?;
        let mut times = ParallelTimes::default();
        times.orb_update += lap(&mut t);
        tracing::debug!(
            pid = bsp.pid(),
            bodies = bodies.len(),
            rounds,
            received,
            "initial decomposition"
        );
        Ok(Process {
            bsp,
            bodies,
            orb,
            params,
            pool,
            times,
            stats: ParallelStats {
                median_rounds: rounds,
                ..ParallelStats::default()
            },
            forces_current: false,
            steps_done: 0,
        })
    }

    /// This process's number.
    pub fn pid(&self) -> usize {
        self.bsp.pid()
    }

    /// Number of processes.
    pub fn nprocs(&self) -> usize {
        self.bsp.nprocs()
    }

    /// The local bodies (after a force computation: in the order of the local tree).
    pub fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// The decomposition, identical on every process.
    pub fn orb(&self) -> &Orb {
        &self.orb
    }

    /// The parameters.
    pub fn params(&self) -> &ParallelParams {
        &self.params
    }

    /// This process's seconds per phase so far.
    pub fn times(&self) -> &ParallelTimes {
        &self.times
    }

    /// This process's counts so far.
    pub fn stats(&self) -> &ParallelStats {
        &self.stats
    }

    /// Steps taken so far.
    pub fn steps_done(&self) -> usize {
        self.steps_done
    }

    /// The BSP process (for the caller's own collectives between steps).
    pub fn bsp(&mut self) -> &mut Bsp {
        self.bsp
    }

    /// Phases 1 to 7 at the current positions: afterwards every local body has its
    /// acceleration, potential and cost, and the local bodies are those of this process's
    /// region. Collective.
    pub fn compute_forces(&mut self) -> Result<()> {
        let me = self.bsp.pid();
        let p = self.bsp.nprocs();
        let sim = self.params.sim;
        let mut t = Instant::now();

        // 1. ORB update. One all-reduce tells every process, for every process, the box
        // and the load of the bodies it holds once the bodies that crossed planes have
        // moved (a body's owner depends on the planes only, not on the outer bounds); the
        // union of the boxes is the new outer boundary.
        let survey = Survey::of(&self.orb, &self.bodies);
        let survey = self
            .bsp
            .all_reduce_with(survey, Survey::combine)
            .map_err(comm("exchanging bounding boxes and loads"))?;
        let mut boxes = survey.boxes();
        self.orb.set_bounds(or_unit_box(
            boxes.iter().copied().fold(Aabb::EMPTY, Aabb::union),
        ));
        let threshold = self.params.imbalance_threshold;
        let rebalance = balance::needs_rebalance(&survey.loads, threshold);
        if !rebalance {
            self.stats.bodies_received += migrate(
                self.bsp,
                &self.orb,
                &mut self.bodies,
                "migrating bodies after the bounds update",
            )?;
        }
        self.times.orb_update += lap(&mut t);

        // 2. Load checking and balancing: the chosen subtrees are split anew over the bodies
        // where they are now, then bodies move once, to their final owners.
        if rebalance {
            let loads = &survey.loads;
            let subtrees = balance::subtrees_to_rebalance(&self.orb, loads, threshold);
            tracing::debug!(
                pid = me,
                imbalance = balance::imbalance(loads),
                ?subtrees,
                "rebalancing"
            );
            let builder = OrbBuilder::rebalance(&self.orb, &subtrees, self.params.bins)?;
            let (orb, rounds) = run_median_finder(
                self.bsp,
                &self.bodies,
                builder,
                "finding the rebalanced planes",
            )?;
            self.orb = orb;
            self.stats.median_rounds += rounds;
            self.stats.bodies_received += migrate(
                self.bsp,
                &self.orb,
                &mut self.bodies,
                "migrating bodies after rebalancing",
            )?;
            self.stats.rebalances += 1;
            if p > 1 {
                boxes = all_gather_boxes(self.bsp, bounding_box(&self.bodies))?;
            }
        }
        self.times.load_balancing += lap(&mut t);

        // 3. The tree over the local bodies (which it puts in tree order).
        let mut tree = build_body_tree(&mut self.bodies, sim.max_leaf);
        self.times.tree_construction += lap(&mut t);

        // 4. Its centres of mass.
        tree.compute_centres_of_mass();
        self.times.center_of_mass += lap(&mut t);

        // 5. Essential trees for the bounding boxes of the other processes' bodies.
        let mut received: Vec<EssentialTree> = Vec::new();
        if p > 1 {
            let theta = sim.force.theta;
            let make = |dest: usize| -> Option<EssentialTree> {
                (dest != me).then(|| essential_tree(&tree, &boxes[dest], theta))
            };
            let outgoing: Vec<Option<EssentialTree>> = match &self.pool {
                Some(pool) => pool.install(|| (0..p).into_par_iter().map(make).collect()),
                None => (0..p).map(make).collect(),
            };
            const DURING: &str = "exchanging essential trees";
            for (dest, e) in outgoing.into_iter().enumerate() {
                if let Some(e) = e.filter(|e| !e.is_empty()) {
                    self.bsp
                        .send_vec(dest, pack_points(&e.cells))
                        .map_err(comm(DURING))?;
                    self.bsp
                        .send_vec(dest, pack_points(&e.bodies))
                        .map_err(comm(DURING))?;
                }
            }
            self.bsp.sync().map_err(comm(DURING))?;
            while let Some((src, cells)) = self.bsp.recv_slice::<f64>().map_err(comm(DURING))? {
                let malformed = |detail: String| ParallelError::Malformed {
                    pid: me,
                    src,
                    what: "essential tree",
                    detail,
                };
                let Some((src2, bodies)) = self.bsp.recv_slice::<f64>().map_err(comm(DURING))?
                else {
                    return Err(malformed("the bodies part is missing".into()));
                };
                if src2 != src {
                    return Err(malformed(format!(
                        "the bodies part came from process {src2}"
                    )));
                }
                let e = EssentialTree {
                    cells: unpack_points(&cells).map_err(malformed)?,
                    bodies: unpack_points(&bodies).map_err(malformed)?,
                };
                self.stats.essential_items_received += e.len() as u64;
                received.push(e);
            }
        }
        self.times.essential_tree_exchange += lap(&mut t);

        // 6. The tree over local bodies and received items, and its centres of mass. With
        // nothing received that is the local tree itself.
        let let_tree = if received.is_empty() {
            LocalEssentialTree::from_body_tree(tree)
        } else {
            drop(tree);
            let mut let_tree = LocalEssentialTree::build(&self.bodies, &received, sim.max_leaf);
            let_tree.compute_centres_of_mass();
            let_tree
        };
        self.times.center_of_mass_update += lap(&mut t);

        // 7. Forces on the local bodies.
        self.stats.interactions =
            let_tree.compute_forces(&mut self.bodies, &sim.force, self.pool.as_ref());
        self.times.force_computation += lap(&mut t);
        self.forces_current = true;
        Ok(())
    }

    /// One leapfrog step of `dtime` (kick, drift, phases 1 to 7, kick). Collective.
    pub fn step(&mut self) -> Result<()> {
        if !self.forces_current {
            self.compute_forces()?;
        }
        let half = 0.5 * self.params.sim.dtime;
        let t0 = Instant::now();
        kick(&mut self.bodies, half);
        drift(&mut self.bodies, self.params.sim.dtime);
        self.times.position_update += t0.elapsed().as_secs_f64();
        self.forces_current = false;
        self.compute_forces()?;
        let t1 = Instant::now();
        kick(&mut self.bodies, half);
        self.times.position_update += t1.elapsed().as_secs_f64();
        self.steps_done += 1;
        tracing::debug!(
            pid = self.bsp.pid(),
            step = self.steps_done,
            bodies = self.bodies.len(),
            interactions = self.stats.interactions,
            rebalances = self.stats.rebalances,
            "step done"
        );
        Ok(())
    }

    /// Runs the remaining steps up to `tstop`. Collective.
    pub fn run(&mut self) -> Result<()> {
        while self.steps_done < self.params.sim.steps() {
            self.step()?;
        }
        Ok(())
    }

    /// The energy of the whole system at the current state, on every process; computes
    /// forces first if they are stale. With [`EnergyMethod::Direct`] every process sums
    /// the exact potential of its bodies against all bodies (which it gets from all
    /// processes). Collective.
    pub fn energy(&mut self, method: EnergyMethod) -> Result<Energy> {
        if !self.forces_current {
            self.compute_forces()?;
        }
        let potential = match method {
            EnergyMethod::Tree => tree_potential_energy(&self.bodies),
            EnergyMethod::Direct => {
                let all = self.all_gather_sources()?;
                direct_potential_share(
                    &self.bodies,
                    &all,
                    self.params.sim.force.eps,
                    self.pool.as_ref(),
                )
            }
        };
        let mut sums = [kinetic_energy(&self.bodies), potential];
        self.bsp
            .all_reduce_slice(&mut sums, Op::Sum)
            .map_err(comm("summing the energy"))?;
        Ok(Energy {
            kinetic: sums[0],
            potential: sums[1],
        })
    }

    /// Every body's id, position and mass, on every process (gathered at process 0 and
    /// broadcast).
    fn all_gather_sources(&mut self) -> Result<Vec<(u64, PointMass)>> {
        let ids: Vec<u64> = self.bodies.iter().map(|b| b.id).collect();
        let points: Vec<f64> =
            pack_points(&self.bodies.iter().map(Body::point_mass).collect::<Vec<_>>());
        const DURING: &str = "collecting all bodies for the direct energy";
        let gathered = self.bsp.gather(0, &(ids, points)).map_err(comm(DURING))?;
        let all: Vec<(Vec<u64>, Vec<f64>)> =
            self.bsp.broadcast(0, gathered).map_err(comm(DURING))?;
        let mut out = Vec::new();
        for (src, (ids, points)) in all.into_iter().enumerate() {
            let points = unpack_points(&points)
                .ok()
                .filter(|p| p.len() == ids.len())
                .ok_or_else(|| ParallelError::Malformed {
                    pid: self.bsp.pid(),
                    src,
                    what: "bodies for the direct energy",
                    detail: format!("{} ids and {} floats", ids.len(), points.len()),
                })?;
            out.extend(ids.into_iter().zip(points));
        }
        Ok(out)
    }

    /// All bodies at process `root`, ordered by id (`Some` there, `None` elsewhere); every
    /// process keeps its own. One superstep; collective.
    pub fn gather_bodies(&mut self, root: usize) -> Result<Option<Vec<Body>>> {
        const DURING: &str = "gathering the bodies";
        let mut all = Vec::new();
        if self.bsp.pid() == root {
            all.extend_from_slice(&self.bodies);
            self.bsp.sync().map_err(comm(DURING))?;
        } else {
            exchange_bodies(
                self.bsp,
                vec![(root, self.bodies.clone())],
                &mut Vec::new(),
                DURING,
            )?;
            return Ok(None);
        }
        while let Some((src, ints)) = self.bsp.recv_slice::<u64>().map_err(comm(DURING))? {
            let malformed = |detail: String| ParallelError::Malformed {
                pid: root,
                src,
                what: "bodies",
                detail,
            };
            let Some((_, floats)) = self.bsp.recv_slice::<f64>().map_err(comm(DURING))? else {
                return Err(malformed("the floats of the bodies are missing".into()));
            };
            unpack_bodies(&ints, &floats, &mut all).map_err(malformed)?;
        }
        all.sort_unstable_by_key(|b| b.id);
        Ok(Some(all))
    }
}

/// Runs the ORB median finder `builder` to the end over the local `bodies`: per round, the
/// partial cost histograms of the local bodies, summed over all processes with one
/// all-reduce. Returns the decomposition and the number of rounds. Collective.
fn run_median_finder(
    bsp: &mut Bsp,
    bodies: &[Body],
    mut builder: OrbBuilder,
    during: &'static str,
) -> Result<(Orb, u64)> {
    let mut rounds = 0;
    while !builder.is_done() {
        let partial = builder.partial_histograms(bodies.iter().map(|b| (b.pos, b.weight())));
        let slots = partial.first().map_or(0, |h| h.cost.len());
        let mut flat = Vec::with_capacity(2 * slots * partial.len());
        for h in &partial {
            flat.extend_from_slice(&h.cost);
            flat.extend_from_slice(&h.count);
        }
        bsp.all_reduce_slice(&mut flat, Op::Sum)
            .map_err(comm(during))?;
        let summed: Vec<Histogram> = flat
            .chunks_exact(2 * slots)
            .map(|c| Histogram {
                cost: c[..slots].to_vec(),
                count: c[slots..].to_vec(),
            })
            .collect();
        builder.advance(&summed)?;
        rounds += 1;
    }
    Ok((builder.finish()?, rounds))
}

/// Sends every local body that `orb` assigns elsewhere to its owner and takes in the bodies
/// others send here (one superstep). Returns the number of bodies received.
fn migrate(bsp: &mut Bsp, orb: &Orb, bodies: &mut Vec<Body>, during: &'static str) -> Result<u64> {
    let outgoing = crate::migrate::depart(orb, bsp.pid(), bodies)
        .into_iter()
        .map(|d| (d.dest, d.bodies))
        .collect();
    exchange_bodies(bsp, outgoing, bodies, during)
}

/// The union of all processes' bounding boxes (a unit cube around the origin when no
/// process holds a body). Collective.
fn global_bounds(bsp: &mut Bsp, bodies: &[Body]) -> Result<Aabb> {
    let b = bounding_box(bodies);
    // Minima are negated so that one maximum-reduction finds both corners.
    let mut v = [-b.min.x, -b.min.y, -b.min.z, b.max.x, b.max.y, b.max.z];
    bsp.all_reduce_slice(&mut v, Op::Max)
        .map_err(comm("exchanging the bounding boxes"))?;
    let global = Aabb::new(Vec3::new(-v[0], -v[1], -v[2]), Vec3::new(v[3], v[4], v[5]));
    Ok(or_unit_box(global))
}

/// `b`, or a unit cube around the origin when `b` is empty (no bodies anywhere).
fn or_unit_box(b: Aabb) -> Aabb {
    if b.is_empty() {
        Aabb::new(Vec3::new(-1.0, -1.0, -1.0), Vec3::new(1.0, 1.0, 1.0))
    } else {
        b
    }
}

/// What the ORB update all-reduces: per process, the bounding box (minima negated, so that
/// the element-wise maximum merges boxes) and the load of the bodies that the current
/// planes assign it, contributed by whichever process holds them now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Survey {
    /// Six values per process: `-min.x, -min.y, -min.z, max.x, max.y, max.z`.
    boxes: Vec<f64>,
    /// Summed [`Body::weight`] per process.
    loads: Vec<u64>,
}

impl Survey {
    /// This process's contribution: its bodies, grouped by owner under `orb`.
    fn of(orb: &Orb, bodies: &[Body]) -> Survey {
        let p = orb.nprocs();
        let mut boxes = vec![Aabb::EMPTY; p];
        let mut loads = vec![0u64; p];
        for b in bodies {
            let o = orb.owner(b.pos);
            boxes[o] = boxes[o].include(b.pos);
            loads[o] += b.weight();
        }
        Survey {
            boxes: boxes
                .iter()
                .flat_map(|b| [-b.min.x, -b.min.y, -b.min.z, b.max.x, b.max.y, b.max.z])
                .collect(),
            loads,
        }
    }

    /// Merges two contributions: element-wise maximum of the boxes, sum of the loads.
    fn combine(mut a: Survey, b: Survey) -> Survey {
        for (x, y) in a.boxes.iter_mut().zip(&b.boxes) {
            *x = x.max(*y);
        }
        for (x, y) in a.loads.iter_mut().zip(&b.loads) {
            *x += y;
        }
        a
    }

    /// The box of every process.
    fn boxes(&self) -> Vec<Aabb> {
        self.boxes
            .chunks_exact(6)
            .map(|c| Aabb::new(Vec3::new(-c[0], -c[1], -c[2]), Vec3::new(c[3], c[4], c[5])))
            .collect()
    }
}

/// Every process's box, by process number. One maximum-reduction over a vector with a slot
/// per process, which holds the owner's (negated-minimum) box and minus infinity elsewhere.
fn all_gather_boxes(bsp: &mut Bsp, mine: Aabb) -> Result<Vec<Aabb>> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let mut v = vec![f64::NEG_INFINITY; 6 * p];
    v[6 * me..6 * me + 6].copy_from_slice(&[
        -mine.min.x,
        -mine.min.y,
        -mine.min.z,
        mine.max.x,
        mine.max.y,
        mine.max.z,
    ]);
    bsp.all_reduce_slice(&mut v, Op::Max)
        .map_err(comm("exchanging the bounding boxes of the bodies"))?;
    Ok(v.chunks_exact(6)
        .map(|c| Aabb::new(Vec3::new(-c[0], -c[1], -c[2]), Vec3::new(c[3], c[4], c[5])))
        .collect())
}

/// This process's share of the exact potential energy: `-½ Σ_i m_i Σ_{j≠i} m_j / r_ij`
/// over its bodies `i` and all bodies `j` (softened); the shares of all processes sum to
/// the potential energy.
fn direct_potential_share(
    local: &[Body],
    all: &[(u64, PointMass)],
    eps: f64,
    pool: Option<&rayon::ThreadPool>,
) -> f64 {
    let eps2 = eps * eps;
    let row = |b: &Body| -> f64 {
        let mut s = 0.0;
        for (id, q) in all {
            if *id == b.id {
                continue;
            }
            let r2 = (q.pos - b.pos).norm2() + eps2;
            if r2 > 0.0 {
                s += q.mass / r2.sqrt();
            }
        }
        -0.5 * b.mass * s
    };
    match pool {
        Some(pool) => pool.install(|| local.par_iter().map(row).sum()),
        None => local.iter().map(row).sum(),
    }
}

/// Seconds of CPU time (user plus system) this OS process has used so far, all its threads
/// together; `None` where the platform does not say.
pub fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a complete rusage into the buffer it is given.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: getrusage returned success, so the buffer is initialized.
        let u = unsafe { usage.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Some(secs(u.ru_utime) + secs(u.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer;

    #[test]
    fn bodies_round_trip_through_their_wire_form() {
        let mut bodies = plummer::generate(10, 3);
        bodies[2].cost = u64::MAX;
        bodies[3].id = 1 << 60;
        bodies[4].acc = Vec3::new(1.0, -2.0, 3.5);
        bodies[4].phi = -7.25;
        let (ints, floats) = pack_bodies(&bodies);
        let mut back = Vec::new();
        assert_eq!(unpack_bodies(&ints, &floats, &mut back), Ok(10));
        assert_eq!(back, bodies);
        assert!(unpack_bodies(&ints[..3], &floats, &mut back).is_err());
        assert!(unpack_bodies(&ints, &floats[1..], &mut back).is_err());
        let pts: Vec<PointMass> = bodies.iter().map(Body::point_mass).collect();
        assert_eq!(unpack_points(&pack_points(&pts)).unwrap(), pts);
        assert!(unpack_points(&[1.0, 2.0, 3.0]).is_err());
    }

    #[test]
    fn invalid_balancing_parameters_are_refused() {
        let p = ParallelParams {
            imbalance_threshold: 0.9,
            ..ParallelParams::default()
        };
        assert_eq!(p.validate(), Err(ParamError::Imbalance(0.9)));
        let p = ParallelParams {
            bins: 1,
            ..ParallelParams::default()
        };
        assert_eq!(p.validate(), Err(ParamError::Bins(1)));
        assert!(ParallelParams::default().validate().is_ok());
    }

    #[test]
    fn surveys_of_parts_combine_to_the_survey_of_the_whole() {
        let mut bodies = plummer::generate(900, 4);
        for (i, b) in bodies.iter_mut().enumerate() {
            b.cost = 1 + i as u64 % 7;
        }
        let orb = crate::orb::decompose(&bodies, bounding_box(&bodies), 3).unwrap();
        let (a, b) = bodies.split_at(400);
        let whole = Survey::of(&orb, &bodies);
        assert_eq!(
            Survey::combine(Survey::of(&orb, a), Survey::of(&orb, b)),
            whole
        );
        assert_eq!(whole.loads, orb.loads(&bodies));
        for (proc, bx) in whole.boxes().iter().enumerate() {
            let mine: Vec<Body> = bodies
                .iter()
                .filter(|b| orb.owner(b.pos) == proc)
                .copied()
                .collect();
            assert_eq!(*bx, bounding_box(&mine));
        }
        // A process that holds nothing contributes nothing.
        assert_eq!(Survey::combine(whole.clone(), Survey::of(&orb, &[])), whole);
    }

    #[test]
    fn times_name_every_phase_once() {
        let t = ParallelTimes::from_array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(t.total(), 36.0);
        let named = t.named();
        assert_eq!(named[4], ("essential_tree_exchange", 5.0));
        assert_eq!(ParallelTimes::from_array(t.as_array()), t);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let a = process_cpu_seconds().expect("CPU time on this platform");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = process_cpu_seconds().unwrap();
        assert!(b > a, "{a} -> {b}");
    }
}
