//! `barnes-hut`: runs the Barnes-Hut simulation, sequential (`--seq`) or parallel on the
//! pool of the `IPL_*` environment, and prints one JSON result line.

use barnes_hut::body::{position_checksum, positions, Body, RunSummary};
use barnes_hut::force::ForceParams;
use barnes_hut::integrate::{Energy, EnergyMethod, ParamError, SimParams, Simulation};
use barnes_hut::io::{self, ReadError, WriteError};
use barnes_hut::orb::DEFAULT_BINS;
use barnes_hut::parallel::{
    self, process_cpu_seconds, ParallelError, ParallelParams, ParallelTimes, Process,
};
use barnes_hut::plummer;
use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use thiserror::Error;

/// Systems up to this size get their energy by exact pair summation under `--energy auto`.
const DIRECT_ENERGY_LIMIT: usize = 10_000;

/// Barnes-Hut N-body simulation.
///
/// Simulates a Plummer-model star cluster (or bodies read from a file) with the Barnes-Hut
/// oct-tree method and leapfrog time steps, then prints one JSON line: parameters, seconds
/// per phase summed over all steps, energy at start and end, CPU seconds, and a checksum of
/// the final positions. With --seq the sequential version runs; otherwise the parallel
/// version (ORB decomposition, load balancing, essential-tree exchange) runs on the pool
/// that the IPL_* environment describes: `ipl-run -n P -- barnes-hut ...` gives P
/// processes, no IPL_* variables a one-node in-process pool, IPL_POOL_SIZE=P alone P
/// threads of this process. Only rank 0 prints. The single-dash spellings of the reference
/// code (`-tstop 1.0 -dtime 0.025 -eps 0.000000625 -theta 0.5`) are accepted too. Set
/// RUST_LOG=debug for a log line per step.
#[derive(Debug, Parser)]
#[command(name = "barnes-hut", version, allow_negative_numbers = true)]
struct Cli {
    /// Run the sequential version (no platform code): the oracle and speedup baseline.
    #[arg(long)]
    seq: bool,

    /// Number of bodies to generate (ignored with --input).
    #[arg(short = 'n', long = "bodies", default_value_t = 10_000)]
    bodies: usize,

    /// Seed of the Plummer-model generator; a seed and a body count always give the same bodies.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Largest number of bodies in a leaf cell of the oct-tree.
    #[arg(short = 'M', long = "max-leaf", default_value_t = SimParams::default().max_leaf)]
    max_leaf: usize,

    /// Opening angle: a cell of edge l is used as one mass by a body farther than
    /// l/theta + (offset of its centre of mass) from that centre of mass. Smaller is more accurate and slower.
    #[arg(long, default_value_t = SimParams::default().force.theta)]
    theta: f64,

    /// Softening length of the gravitational force. The reference runs used 0.000000625
    /// (next to no softening), with which close encounters make the energy drift by several
    /// percent at this time step; 0.025 keeps it within 1e-4 over the default run.
    #[arg(long, default_value_t = SimParams::default().force.eps)]
    eps: f64,

    /// Time step.
    #[arg(long, default_value_t = SimParams::default().dtime)]
    dtime: f64,

    /// End time; the run takes round(tstop / dtime) steps.
    #[arg(long, default_value_t = SimParams::default().tstop)]
    tstop: f64,

    /// Threads for the force computation (per process in the parallel version), at most 1024.
    #[arg(long, default_value_t = 1)]
    threads: usize,

    /// Parallel version: rebalance the decomposition when the most loaded process carries
    /// more than this many times the mean load (interactions of the last force phase).
    #[arg(long, default_value_t = ParallelParams::default().imbalance_threshold)]
    imbalance: f64,

    /// Parallel version: histogram bins per round of the parallel median finder.
    #[arg(long, default_value_t = DEFAULT_BINS)]
    bins: usize,

    /// How the potential energy is measured: `direct` sums all pairs exactly (O(n²)),
    /// `tree` uses the potentials from the tree walk, `auto` is direct up to 10000 bodies.
    #[arg(long, value_enum, default_value_t = EnergyChoice::Auto)]
    energy: EnergyChoice,

    /// Read the initial bodies from this file (format: see the `io` module documentation:
    /// a count line, then `id mass x y z vx vy vz` per line; `#` starts a comment).
    #[arg(long)]
    input: Option<PathBuf>,

    /// Write the final bodies to this file, in the same format, ordered by id.
    #[arg(long)]
    output: Option<PathBuf>,

    /// Write a trace of each process (supersteps split into compute, send and wait) to a file
    /// of its own in DIR, as IPL_TRACE=DIR does; `bench-harness timeline DIR` merges and draws
    /// them.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum EnergyChoice {
    Auto,
    Tree,
    Direct,
}

#[derive(Debug, Error)]
enum AppError {
    #[error("--output {path}: cannot write the bodies there: {source}")]
    Output {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("invalid parameters: {0}")]
    Params(#[from] ParamError),
    #[error("cannot encode the result: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Parallel(#[from] ParallelError),
    #[error("cannot {what}: {source}")]
    Ipl {
        what: &'static str,
        #[source]
        source: ipl::Error,
    },
    #[error("cannot start the BSP layer: {0}")]
    Bsp(#[from] bsp::Error),
    #[error("process 0 could not start: {0}")]
    Input(String),
    #[error("cannot start the thread of in-process node {rank}: {source}")]
    Thread {
        rank: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("the thread of in-process node {0} panicked")]
    Panicked(u32),
    #[error(
        "the simulation diverged: after {steps} steps {bodies} bodies have positions or \
         velocities that are no longer finite numbers (a smaller --dtime may help; it was {dtime:?})"
    )]
    Diverged {
        steps: usize,
        bodies: usize,
        dtime: f64,
    },
}

/// Fails a run whose bodies left the finite numbers (a time step far too large for them): its
/// result line would hold nulls, and its output file could not be read back.
fn check_finite(bodies: &[Body], steps: usize, dtime: f64) -> Result<(), AppError> {
    let finite = |v: barnes_hut::geom::Vec3| v.x.is_finite() && v.y.is_finite() && v.z.is_finite();
    let bad = bodies
        .iter()
        .filter(|b| !finite(b.pos) || !finite(b.vel))
        .count();
    if bad == 0 {
        return Ok(());
    }
    Err(AppError::Diverged {
        steps,
        bodies: bad,
        dtime,
    })
}

/// Peak memory per body of a sequential run, measured: 379 MB for 1,000,000 bodies (the bodies,
/// their initial positions, the tree, the sorted copies of the result). The parallel version's
/// process 0 holds about as much: every body before the scatter and after the gather.
const BYTES_PER_BODY: u64 = 380;

/// This machine's physical memory in bytes (`MemTotal` of `/proc/meminfo`), where known.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Checks the arguments against what this run can serve, before any work: parameters in
/// range (steps, threads, angle, ...), and generated bodies that fit in memory.
fn preflight(cli: &Cli) -> Result<(), String> {
    if cli.seq {
        cli.sim_params().validate()
    } else {
        ParallelParams {
            sim: cli.sim_params(),
            imbalance_threshold: cli.imbalance,
            bins: cli.bins,
        }
        .validate()
    }
    .map_err(|e| e.to_string())?;
    if cli.input.is_none() {
        if cli.bodies == 0 {
            return Err("--bodies 0: a simulation needs at least one body".into());
        }
        let need = (cli.bodies as u64).saturating_mul(BYTES_PER_BODY);
        if let Some(total) = physical_memory().filter(|&t| need > t) {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            return Err(format!(
                "--bodies {}: a run needs about {:.1} GiB ({BYTES_PER_BODY} bytes per body), \
                 more than this machine's {:.1} GiB of memory",
                cli.bodies,
                gib(need),
                gib(total)
            ));
        }
    }
    Ok(())
}

/// The bodies file of `--output`, claimed before the run: an empty temporary file beside it is
/// created up front, so that an unwritable path fails before any work; the bodies are written
/// to it and it is renamed over the output at the end (removed if the run fails).
struct PendingOutput(ipl::cli::ClaimedFile);

impl PendingOutput {
    fn claim(path: &Path) -> Result<PendingOutput, AppError> {
        ipl::cli::ClaimedFile::claim(path)
            .map(PendingOutput)
            .map_err(|source| AppError::Output {
                path: path.display().to_string(),
                source,
            })
    }

    fn claim_if(path: Option<&Path>) -> Result<Option<PendingOutput>, AppError> {
        path.map(PendingOutput::claim).transpose()
    }

    fn write(self, bodies: &[Body]) -> Result<(), AppError> {
        io::write_file(self.0.temp(), bodies)?;
        let path = self.0.path().display().to_string();
        self.0
            .commit()
            .map_err(|source| AppError::Output { path, source })
    }
}

/// Rewrites the reference code's single-dash long options to clap's double-dash form.
fn normalize_args<I: IntoIterator<Item = String>>(args: I) -> Vec<String> {
    const LONG: [&str; 4] = ["tstop", "dtime", "eps", "theta"];
    args.into_iter()
        .map(|a| {
            let single_dash_long = a.strip_prefix('-').filter(|rest| {
                !rest.starts_with('-')
                    && LONG.iter().any(|name| {
                        *rest == *name
                            || rest.strip_prefix(name).is_some_and(|v| v.starts_with('='))
                    })
            });
            match single_dash_long {
                Some(_) => format!("-{a}"),
                None => a,
            }
        })
        .collect()
}

impl Cli {
    fn sim_params(&self) -> SimParams {
        SimParams {
            max_leaf: self.max_leaf,
            force: ForceParams {
                theta: self.theta,
                eps: self.eps,
            },
            dtime: self.dtime,
            tstop: self.tstop,
            threads: self.threads,
        }
    }

    fn energy_method(&self, n: usize) -> EnergyMethod {
        match self.energy {
            EnergyChoice::Tree => EnergyMethod::Tree,
            EnergyChoice::Direct => EnergyMethod::Direct,
            EnergyChoice::Auto if n <= DIRECT_ENERGY_LIMIT => EnergyMethod::Direct,
            EnergyChoice::Auto => EnergyMethod::Tree,
        }
    }

    fn initial_bodies(&self) -> Result<Vec<Body>, ReadError> {
        match &self.input {
            Some(path) => match io::read_file(path)? {
                b if b.is_empty() => Err(ReadError::NoBodies(path.clone())),
                b => Ok(b),
            },
            None => Ok(plummer::generate(self.bodies, self.seed)),
        }
    }

    /// The `parameters` object of the result line.
    fn parameters(&self, n: usize, steps: usize) -> Value {
        let mut v = json!({
            "n": n,
            "seed": if self.input.is_some() { None } else { Some(self.seed) },
            "input": self.input.as_ref().map(|p| p.display().to_string()),
            "M": self.max_leaf,
            "theta": self.theta,
            "eps": self.eps,
            "dtime": self.dtime,
            "tstop": self.tstop,
            "steps": steps,
        });
        if !self.seq {
            v["imbalance"] = json!(self.imbalance);
            v["bins"] = json!(self.bins);
        }
        v
    }
}

fn method_name(m: EnergyMethod) -> &'static str {
    match m {
        EnergyMethod::Tree => "tree",
        EnergyMethod::Direct => "direct",
    }
}

fn relative_drift(e0: &Energy, e1: &Energy) -> f64 {
    if e0.total() != 0.0 {
        (e1.total() - e0.total()) / e0.total().abs()
    } else {
        0.0
    }
}

/// The fields of the result line by which a run is checked against the sequential one when
/// their trees differ (see [`RunSummary`]).
fn add_summary(line: &mut Value, s: &RunSummary) {
    line["bodies"] = json!(s.bodies);
    line["total_mass"] = json!(s.total_mass);
    line["center_of_mass"] = json!(s.center_of_mass.to_array());
    line["displacement_rms"] = json!(s.displacement_rms);
}

/// CPU seconds of this process since `since` (a reading of [`process_cpu_seconds`]).
fn cpu_since(since: Option<f64>) -> Option<f64> {
    Some(process_cpu_seconds()? - since?)
}

fn run(cli: Cli) -> Result<Option<Value>, AppError> {
    if cli.seq {
        run_sequential(cli).map(Some)
    } else {
        run_parallel(cli)
    }
}

fn run_sequential(cli: Cli) -> Result<Value, AppError> {
    let output = PendingOutput::claim_if(cli.output.as_deref())?;
    let bodies = cli.initial_bodies()?;
    let n = bodies.len();
    let start = positions(&bodies);
    let params = cli.sim_params();
    let method = cli.energy_method(n);
    tracing::info!(n, steps = params.steps(), ?method, "starting");
    let mut sim = Simulation::new(bodies, params)?;

    // The energy measurements are not part of the timed simulation.
    let t0 = Instant::now();
    let c0 = process_cpu_seconds();
    sim.compute_forces();
    let mut seconds = t0.elapsed().as_secs_f64();
    let mut cpu = cpu_since(c0);
    let e0 = sim.energy(method);
    let t1 = Instant::now();
    let c1 = process_cpu_seconds();
    sim.run();
    seconds += t1.elapsed().as_secs_f64();
    cpu = cpu.zip(cpu_since(c1)).map(|(a, b)| a + b);
    let e1 = sim.energy(method);

    let times = *sim.times();
    let steps = sim.steps_done();
    let mut bodies = sim.into_bodies();
    bodies.sort_unstable_by_key(|b| b.id);
    check_finite(&bodies, steps, params.dtime)?;
    if let Some(output) = output {
        output.write(&bodies)?;
    }
    let mut line = json!({
        "app": "barnes-hut",
        "version": "sequential",
        "parameters": cli.parameters(n, steps),
        "nodes": 1,
        "threads": params.threads,
        "seconds": {
            "tree_construction": times.tree_construction,
            "center_of_mass": times.center_of_mass,
            "force_computation": times.force_computation,
            "position_update": times.position_update,
        },
        "total_seconds": seconds,
        "seconds_per_step": if steps > 0 { seconds / steps as f64 } else { 0.0 },
        "cpu_seconds": cpu,
        "energy_method": method_name(method),
        "energy_start": e0.total(),
        "energy_end": e1.total(),
        "energy_relative_drift": relative_drift(&e0, &e1),
        "checksum": position_checksum(&bodies),
    });
    add_summary(&mut line, &RunSummary::of(&start, &bodies));
    Ok(line)
}

/// The parallel version on the pool of the `IPL_*` environment. An in-process pool of more
/// than one node with no rank given runs all its nodes as threads of this process.
fn run_parallel(cli: Cli) -> Result<Option<Value>, AppError> {
    let cfg = ipl::Config::from_env().map_err(|source| AppError::Ipl {
        what: "read the pool configuration (IPL_*)",
        source,
    })?;
    let size = cfg.size.unwrap_or(1);
    if cfg.driver != ipl::Driver::Inproc || cfg.rank.is_some() || size <= 1 {
        return parallel_node(&cli, cfg);
    }
    let results: Vec<Result<Option<Value>, AppError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let mut cfg = cfg.clone();
                cfg.rank = Some(rank);
                let cli = &cli;
                std::thread::Builder::new()
                    .name(format!("node-{rank}"))
                    .spawn_scoped(s, move || parallel_node(cli, cfg))
                    .map_err(|source| AppError::Thread { rank, source })
            })
            .collect();
        handles
            .into_iter()
            .zip(0..)
            .map(|(h, rank)| h?.join().unwrap_or(Err(AppError::Panicked(rank))))
            .collect()
    });
    let mut line = None;
    for r in results {
        if let Some(v) = r? {
            line = Some(v);
        }
    }
    Ok(line)
}

/// One node of the parallel version: joins the pool, runs, and returns the result line on
/// rank 0.
fn parallel_node(cli: &Cli, cfg: ipl::Config) -> Result<Option<Value>, AppError> {
    let ibis = ipl::Ibis::join(cfg).map_err(|source| AppError::Ipl {
        what: "join the pool",
        source,
    })?;
    let mut bsp = bsp::Bsp::new(ibis)?;
    parallel_process(cli, &mut bsp)
}

fn parallel_process(cli: &Cli, bsp: &mut bsp::Bsp) -> Result<Option<Value>, AppError> {
    let params = ParallelParams {
        sim: cli.sim_params(),
        imbalance_threshold: cli.imbalance,
        bins: cli.bins,
    };
    params.validate()?;
    let (pid, nodes) = (bsp.pid(), bsp.nprocs());
    // Process 0 claims the output file, provides the bodies, and tells everyone whether it
    // could.
    let (mut all, mut status, mut first_error, mut output) = (None, Ok(0u64), None, None);
    if pid == 0 {
        let prepared = PendingOutput::claim_if(cli.output.as_deref()).and_then(|o| {
            output = o;
            cli.initial_bodies().map_err(AppError::from)
        });
        match prepared {
            Ok(b) => {
                status = Ok(b.len() as u64);
                all = Some(b);
            }
            Err(e) => {
                status = Err(e.to_string());
                first_error = Some(e);
            }
        }
    }
    let status: Result<u64, String> = bsp.broadcast(0, (pid == 0).then_some(status))?;
    if let Some(e) = first_error {
        return Err(e);
    }
    let n = status.map_err(AppError::Input)? as usize;
    // Process 0 keeps where the bodies started, to report how far they moved.
    let start = all.as_deref().map(positions);
    let method = cli.energy_method(n);
    if pid == 0 {
        tracing::info!(n, nodes, steps = params.sim.steps(), ?method, "starting");
    }
    let mine = parallel::scatter(bsp, 0, all)?;
    // Everyone starts the clocks together.
    bsp.sync()?;

    let t0 = Instant::now();
    let c0 = process_cpu_seconds();
    let mut proc = Process::new(bsp, mine, params)?;
    proc.compute_forces()?;
    let mut seconds = t0.elapsed().as_secs_f64();
    let mut cpu = cpu_since(c0);
    let e0 = proc.energy(method)?;
    proc.bsp().sync()?;
    let t1 = Instant::now();
    let c1 = process_cpu_seconds();
    proc.run()?;
    // The run ends when the slowest process ends.
    proc.bsp().sync()?;
    seconds += t1.elapsed().as_secs_f64();
    cpu = cpu.zip(cpu_since(c1)).map(|(a, b)| a + b);
    let e1 = proc.energy(method)?;

    let times = *proc.times();
    let stats = *proc.stats();
    let steps = proc.steps_done();
    let mut max_times = times.as_array();
    let bsp = proc.bsp();
    bsp.all_reduce_slice(&mut max_times, bsp::Op::Max)?;
    let mut counts = [
        stats.bodies_received,
        stats.essential_items_received,
        stats.interactions,
    ];
    bsp.all_reduce_slice(&mut counts, bsp::Op::Sum)?;
    // CPU time per OS process: nodes that are threads of one process share its figure.
    let cpus = bsp.gather(0, &(std::process::id(), cpu))?;
    let Some(bodies) = proc.gather_bodies(0)? else {
        return Ok(None);
    };
    let cpus = cpus.expect("process 0 gathers");
    let start = start.expect("process 0 provided the bodies");
    let mut per_os_process: Vec<(u32, Option<f64>)> = Vec::new();
    for (os_pid, c) in cpus.iter().copied() {
        match per_os_process.iter_mut().find(|(p, _)| *p == os_pid) {
            Some((_, seen)) => *seen = seen.zip(c).map(|(a, b)| a.max(b)),
            None => per_os_process.push((os_pid, c)),
        }
    }
    let cpu_total: Option<f64> = per_os_process.iter().map(|(_, c)| *c).sum();
    check_finite(&bodies, steps, params.sim.dtime)?;
    if let Some(output) = output {
        output.write(&bodies)?;
    }
    let phases = |t: &ParallelTimes| -> Value {
        t.named()
            .iter()
            .map(|&(name, s)| (name.to_string(), json!(s)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut line = json!({
        "app": "barnes-hut",
        "version": "parallel",
        "parameters": cli.parameters(n, steps),
        "nodes": nodes,
        "threads": params.sim.threads,
        "seconds": phases(&times),
        "seconds_max_over_processes": phases(&ParallelTimes::from_array(max_times)),
        "total_seconds": seconds,
        "seconds_per_step": if steps > 0 { seconds / steps as f64 } else { 0.0 },
        "cpu_seconds": cpu_total,
        "cpu_seconds_per_process": per_os_process.iter().map(|(_, c)| *c).collect::<Vec<_>>(),
        "rebalances": stats.rebalances,
        "median_rounds": stats.median_rounds,
        "bodies_migrated": counts[0],
        "essential_items_received": counts[1],
        "interactions_last_step": counts[2],
        "energy_method": method_name(method),
        "energy_start": e0.total(),
        "energy_end": e1.total(),
        "energy_relative_drift": relative_drift(&e0, &e1),
        "checksum": position_checksum(&bodies),
    });
    add_summary(&mut line, &RunSummary::of(&start, &bodies));
    Ok(Some(line))
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(normalize_args(std::env::args()));
    // Logs as RUST_LOG says; the trace, if asked for, is complete when this guard drops.
    let _trace = match ipl::trace::init("warn", cli.trace.as_deref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = preflight(&cli) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(line) => {
            if let Some(line) = line {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e @ AppError::Output { .. }) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_dash_reference_options_are_accepted() {
        let args = [
            "bh",
            "-M10",
            "-tstop",
            "0.05",
            "-dtime=0.025",
            "-eps",
            "1e-3",
            "--theta",
            "0.7",
        ];
        let cli = Cli::parse_from(normalize_args(args.iter().map(|s| s.to_string())));
        assert_eq!(cli.max_leaf, 10);
        assert_eq!(cli.tstop, 0.05);
        assert_eq!(cli.dtime, 0.025);
        assert_eq!(cli.eps, 1e-3);
        assert_eq!(cli.theta, 0.7);
        // Other arguments pass untouched, including values that look like options.
        assert_eq!(
            normalize_args(["-n".to_string(), "-epsilon".to_string()]),
            ["-n", "-epsilon"]
        );
    }

    #[test]
    fn small_run_reports_phases_and_energy() {
        let cli = Cli::parse_from([
            "bh", "--seq", "-n", "200", "--tstop", "0.05", "--eps", "0.01",
        ]);
        let v = run(cli).unwrap().unwrap();
        assert_eq!(v["parameters"]["steps"], 2);
        assert_eq!(v["energy_method"], "direct");
        let e0 = v["energy_start"].as_f64().unwrap();
        assert!((e0 + 0.25).abs() < 0.05, "energy {e0}");
        assert!(v["seconds"]["force_computation"].as_f64().unwrap() > 0.0);
        assert!(v["checksum"].as_f64().unwrap().is_finite());
    }
}
