//! `bsp-bench`: the bulk-synchronous layer next to OpenMPI over shared memory, in one run.
//!
//! For each process count P it starts P processes of itself the way `ipl-run -n P` does (a
//! registry in this process, `IPL_*` in the environment), once talking through shared memory
//! (the shm driver) and once over tcp, and
//! measures an empty superstep and an 8-byte `all_reduce` (back to back, timed at pid 0), and
//! the collectives scatter, all-gather, scan, exscan, reduce, reduce-scatter and all-to-all at
//! 8 bytes and 64 KiB per process (see [`SIZES`]), each call timed on its own between barriers
//! and averaged over the processes, as the OSU micro-benchmarks do; at P = 2 also message combining: one million 16-byte packets per
//! superstep, next to the same traffic sent as one `ipl` message per packet. When `mpicc` is on
//! the PATH it compiles a small C program and runs it with `mpirun --allow-run-as-root
//! --oversubscribe --mca btl vader,self -n P` to measure `MPI_Barrier`, `MPI_Allreduce` and each
//! collective's MPI equivalent the same way; otherwise it says it skipped MPI. Every figure is
//! the median over repetitions within a run and then over rounds. Each round measures bsp over
//! shm and OpenMPI right after each other, in an order that alternates by round, and then bsp
//! over tcp, so that bsp and MPI see the machine in the same state; a ratio is the median over
//! the rounds of each round's bsp figure over its MPI figure, printed with their range (a
//! round in which the machine changed speed between the two shows as an outlier there).
//! Both sides send the same values, written before the first call: a buffer that was zeroed
//! and never written is the kernel's one shared zero page, which a single copy out of it
//! reads from cache, faster than any real data.
//!
//! Over shm the processes of a run share this host, so their syncs and small all-reduces go
//! through bsp's host board (shared memory, see the crate's documentation) rather than
//! messages. Each round therefore also measures the superstep and the all-reduce with
//! `BSP_HOST_BOARD=0`, every sync and all-reduce carried by messages as between hosts, and
//! prints both next to MPI.
//!
//! `--supersteps-only` measures the empty superstep and the 8-byte `all_reduce` alone: a run
//! of a second or so, for comparisons that repeat it many times (`scripts/bench-trace`).
//!
//! `--probe` measures the machine's BSP parameters instead, as Bisseling's `bspbench` does:
//! the computing rate `r`, and `g` and `l` of `T(h) = g h + l` for h-relations of single-word
//! puts, next to the same h-relations done with `MPI_Alltoallv`.
//!
//! Built with the `mpi` feature and run under `mpirun` with `IPL_DRIVER=mpi`, it measures an
//! empty superstep over ipl's mpi driver next to `MPI_Barrier` in the same processes instead
//! (see `over_mpi.rs`).
//!
//! Values the command line cannot serve are refused with a one-line error and exit status 2;
//! a failed measurement ends with a one-line error and exit status 1.

mod mpi;
#[cfg(feature = "mpi")]
mod over_mpi;
mod probe;
mod worker;

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

/// Bytes per process of each collective measurement: 8 bytes (latency) and 64 KiB
/// (bandwidth). Per process means: what each process receives (scatter, reduce-scatter),
/// contributes (all-gather, scan, exscan, reduce) or sends to each other process (all-to-all).
pub const SIZES: [usize; 2] = [8, 64 << 10];

/// Each measured collective and its MPI equivalent, in the order the MPI program numbers them.
/// `all_to_all_into` refills vectors the caller keeps, as `MPI_Alltoallv` fills the caller's
/// buffer; `all_to_all` returns new vectors at every call.
pub const COLLECTIVES: [(&str, &str); 8] = [
    ("scatter", "MPI_Scatter"),
    ("all_gather", "MPI_Allgather"),
    ("scan", "MPI_Scan"),
    ("exscan", "MPI_Exscan"),
    ("reduce", "MPI_Reduce"),
    ("reduce_scatter", "MPI_Reduce_scatter_block"),
    ("all_to_all", "MPI_Alltoallv"),
    ("all_to_all_into", "MPI_Alltoallv"),
];

/// A parser of whole numbers from `lo` to `hi`, with a message that says so.
fn ranged<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |s: &str| match s.trim().parse::<T>() {
        Ok(v) if v >= lo && v <= hi => Ok(v),
        _ => Err(format!("must be a whole number from {lo} to {hi}")),
    }
}

/// Measure the bulk-synchronous layer (over shm and tcp) against OpenMPI over shared memory.
#[derive(Parser, Debug, Clone)]
#[command(name = "bsp-bench", version, allow_negative_numbers = true)]
pub struct Args {
    /// Process counts to measure (1 to 256 each).
    #[arg(long, value_delimiter = ',', default_value = "2,4", value_parser = ranged(1u32, 256))]
    procs: Vec<u32>,
    /// Operations per latency repetition (8-byte collectives, supersteps).
    #[arg(long, default_value_t = 2000, value_parser = ranged(1u32, 10_000_000))]
    iters: u32,
    /// Calls per repetition of the 8-byte collectives (each timed between barriers).
    #[arg(long, default_value_t = 500, value_parser = ranged(1u32, 10_000_000))]
    coll_iters: u32,
    /// Calls per repetition of the 64 KiB collectives (each timed between barriers).
    #[arg(long, default_value_t = 100, value_parser = ranged(1u32, 10_000_000))]
    big_iters: u32,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 15, value_parser = ranged(1usize, 10_000))]
    reps: usize,
    /// Packets per superstep in the combining measurement (P = 2).
    #[arg(long, default_value_t = 1_000_000, value_parser = ranged(1u32, 50_000_000))]
    packets: u32,
    /// Supersteps measured in the combining measurement.
    #[arg(long, default_value_t = 7, value_parser = ranged(1usize, 10_000))]
    combining_reps: usize,
    /// Packets sent as one ipl message each, for comparison.
    #[arg(long, default_value_t = 200_000, value_parser = ranged(1u32, 50_000_000))]
    single_messages: u32,
    /// Rounds: each round runs every measurement of bsp and then of OpenMPI, so that both see
    /// the same machine load; the median over rounds is reported, with the range.
    #[arg(long, default_value_t = 3, value_parser = ranged(1usize, 1000))]
    rounds: usize,
    /// Skip OpenMPI even when mpicc is present.
    #[arg(long)]
    no_mpi: bool,
    /// A short run for demonstrations: one round of 5 repetitions, 3 combining supersteps
    /// (overrides --rounds, --reps and --combining-reps).
    #[arg(long)]
    quick: bool,
    /// Measure the machine's BSP parameters r, g and l (Bisseling's bspbench) instead.
    #[arg(long)]
    probe: bool,
    /// Measure only the empty superstep and the 8-byte all_reduce, not the other collectives
    /// and combining: a short run for comparisons that repeat it many times.
    #[arg(long, conflicts_with = "probe")]
    supersteps_only: bool,
    /// h-relations (and DAXPY pairs) timed per h in the probe.
    #[arg(long, default_value_t = 100, value_parser = ranged(1u32, 1_000_000))]
    probe_iters: u32,
    /// Largest h of the probe.
    #[arg(long, default_value_t = 256, value_parser = ranged(1usize, 65_536))]
    max_h: usize,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One collective's time.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
pub struct Timing {
    /// Its name (the bsp call).
    pub name: String,
    /// Bytes per process (see [`SIZES`]).
    pub bytes: usize,
    /// Microseconds per call.
    pub us: f64,
}

/// What rank 0 of a latency run reports.
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
pub struct Figures {
    procs: u32,
    /// Empty superstep, microseconds.
    sync_us: f64,
    /// 8-byte all_reduce, microseconds.
    all_reduce_us: f64,
    /// The collectives at both sizes.
    collectives: Vec<Timing>,
    /// Combined packets per second per process (P = 2).
    combined_pps: Option<f64>,
    /// Packets per second per process, one ipl message each (P = 2).
    single_pps: Option<f64>,
}

/// What rank 0 of a probe run reports: the rate in flop/s, and the seconds of an h-relation
/// for h = 0, 1, ...
#[derive(Serialize, Deserialize, Debug, Default, Clone)]
pub struct ProbeFigures {
    procs: u32,
    r: f64,
    t: Vec<f64>,
}

/// The median; NaN for no values.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median, minimum and maximum, when there are values.
fn stat(v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((median(v), lo, hi))
}

fn show(v: Option<(f64, f64, f64)>) -> String {
    v.map_or("skipped".to_string(), |(m, lo, hi)| {
        format!("{m:.2} ({lo:.1}-{hi:.1})")
    })
}

fn show_ratio(r: Option<(f64, f64, f64)>) -> String {
    r.map_or("-".to_string(), |(m, lo, hi)| {
        format!("{m:.2}x ({lo:.2}-{hi:.2})")
    })
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1024 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// Starts P processes of this program (what `ipl-run -n P` does) over `driver` (`shm` or
/// `tcp`) and returns rank 0's figures.
fn run_bsp<F: for<'de> Deserialize<'de>>(p: u32, driver: &str, dir: &Path) -> Result<F, String> {
    run_bsp_with(p, driver, dir, Variant::Default)
}

/// What a run of the bsp processes measures.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// Everything, as a program runs by default.
    Default,
    /// Supersteps and all-reduces only, with every sync and all-reduce carried by messages
    /// (`BSP_HOST_BOARD=0`: no host board).
    MessagesOnly,
}

fn run_bsp_with<F: for<'de> Deserialize<'de>>(
    p: u32,
    driver: &str,
    dir: &Path,
    variant: Variant,
) -> Result<F, String> {
    let out = dir.join(format!("bsp-{p}.json"));
    let _ = std::fs::remove_file(&out);
    let mut command: Vec<String> = std::env::args().collect();
    let mut env = Vec::new();
    if variant == Variant::MessagesOnly {
        if !command.iter().any(|a| a == "--supersteps-only") {
            command.push("--supersteps-only".into());
        }
        env.push(("BSP_HOST_BOARD".to_string(), "0".to_string()));
    }
    command[0] = std::env::current_exe()
        .map_err(|e| format!("cannot find this program: {e}"))?
        .to_string_lossy()
        .into_owned();
    let launch = ipl::run_pool::Launch {
        nodes: p,
        clusters: 1,
        wan_latency: None,
        wan_bandwidth: None,
        command,
        env: vec![
            ("BSP_BENCH_ROLE".into(), "worker".into()),
            ("BSP_BENCH_OUT".into(), out.to_string_lossy().into_owned()),
            ("IPL_DRIVER".into(), driver.into()),
        ]
        .into_iter()
        .chain(env)
        .collect(),
        prefix_output: true,
    };
    let code = ipl::run_pool::run(&launch).map_err(|e| format!("starting {p} processes: {e}"))?;
    if code != 0 {
        return Err(format!("the bsp run at P = {p} exited with status {code}"));
    }
    let bytes = std::fs::read(&out)
        .map_err(|e| format!("reading the figures of P = {p} ({}): {e}", out.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the figures of P = {p} do not parse: {e}"))
}

fn header(args: &Args, what: &str) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "bsp-bench: {cores} cores; {what}; processes on this host{}",
        if args.procs.iter().any(|&p| p as usize > cores) {
            " (runs with more processes than cores are oversubscribed)"
        } else {
            ""
        }
    );
}

/// The latency and bandwidth comparison (the default).
fn compare(args: &Args, dir: &Path, mpi: Option<&Path>) -> Result<serde_json::Value, String> {
    header(
        args,
        &format!(
            "{} rounds, each the median of {} repetitions of {} back-to-back supersteps or \
             all-reduces, and of {} (8 B) or {} (64 KiB) collective calls, each timed between \
             barriers and averaged over the processes",
            args.rounds, args.reps, args.iters, args.coll_iters, args.big_iters
        ),
    );
    // results[i]: every round's figures for args.procs[i]: bsp over shm, over tcp, and MPI
    // (`None` in a round where MPI gave no figures).
    // And every round's supersteps and all-reduces over shm with messages only (no host board).
    type Rounds = (
        Vec<Figures>,
        Vec<Figures>,
        Vec<Option<mpi::MpiFigures>>,
        Vec<Figures>,
    );
    let mut results: Vec<Rounds> = args
        .procs
        .iter()
        .map(|_| (Vec::new(), Vec::new(), Vec::new(), Vec::new()))
        .collect();
    for round in 0..args.rounds {
        for (i, &p) in args.procs.iter().enumerate() {
            // bsp over shm and MPI right after each other, in an order that alternates by
            // round, so that both see the machine in the same state (it switches between a
            // faster and a slower mode every few minutes); tcp after them.
            let (fig, m) = if round % 2 == 0 {
                let fig: Figures = run_bsp(p, "shm", dir)?;
                (fig, mpi.and_then(|exe| mpi::latency(exe, p, args)))
            } else {
                let m = mpi.and_then(|exe| mpi::latency(exe, p, args));
                let fig: Figures = run_bsp(p, "shm", dir)?;
                (fig, m)
            };
            let tcp: Figures = run_bsp(p, "tcp", dir)?;
            let msgs: Figures = run_bsp_with(p, "shm", dir, Variant::MessagesOnly)?;
            println!(
                "round {}, P = {p}: bsp superstep {:.2} us (messages only {:.2}, tcp {:.2}), all_reduce {:.2} us (messages only {:.2}, tcp {:.2}){}{}",
                round + 1,
                fig.sync_us,
                msgs.sync_us,
                tcp.sync_us,
                fig.all_reduce_us,
                msgs.all_reduce_us,
                tcp.all_reduce_us,
                m.as_ref().map_or(String::new(), |m| format!(
                    "; MPI barrier {:.2} us, allreduce {:.2} us",
                    m.barrier_us, m.allreduce_us
                )),
                fig.combined_pps.map_or(String::new(), |c| format!(
                    "; combining {:.1} M packets/s",
                    c / 1e6
                )),
            );
            results[i].0.push(fig);
            results[i].1.push(tcp);
            results[i].2.push(m);
            results[i].3.push(msgs);
        }
    }
    println!();
    println!(
        "{:<44} {:>3} {:>20} {:>20} {:>20} {:>7}",
        "operation (median of rounds, range)",
        "P",
        "bsp/shm (us)",
        "bsp/tcp (us)",
        "OpenMPI/shm (us)",
        "shm/MPI (median of the rounds' ratios, range)"
    );
    let mut summary = Vec::new();
    let mut combining = Vec::new();
    for (i, (figs, tcps, mpis, msgs)) in results.iter().enumerate() {
        let p = args.procs[i];
        let bs = stat(figs.iter().map(|f| f.sync_us).collect());
        let ba = stat(figs.iter().map(|f| f.all_reduce_us).collect());
        let ts = stat(tcps.iter().map(|f| f.sync_us).collect());
        let ta = stat(tcps.iter().map(|f| f.all_reduce_us).collect());
        let mb = stat(mpis.iter().flatten().map(|m| m.barrier_us).collect());
        let ma = stat(mpis.iter().flatten().map(|m| m.allreduce_us).collect());
        // The ratio of each round's bsp figure to the MPI figure measured right after (or
        // before) it, where both are there.
        let per_round =
            |bsp: &dyn Fn(&Figures) -> Option<f64>,
             reference: &dyn Fn(&mpi::MpiFigures) -> Option<f64>| {
                stat(
                    figs.iter()
                        .zip(mpis)
                        .filter_map(|(f, m)| Some(bsp(f)? / reference(m.as_ref()?)?))
                        .filter(|r| r.is_finite())
                        .collect(),
                )
            };
        let rs = per_round(&|f| Some(f.sync_us), &|m| Some(m.barrier_us));
        let ra = per_round(&|f| Some(f.all_reduce_us), &|m| Some(m.allreduce_us));
        // The same with messages only, against the same MPI figures of each round.
        let ms = stat(msgs.iter().map(|f| f.sync_us).collect());
        let ma_b = stat(msgs.iter().map(|f| f.all_reduce_us).collect());
        let ratio_msgs = |f: &dyn Fn(&Figures) -> f64, r: &dyn Fn(&mpi::MpiFigures) -> f64| {
            stat(
                msgs.iter()
                    .zip(mpis)
                    .filter_map(|(x, m)| Some(f(x) / r(m.as_ref()?)))
                    .filter(|r| r.is_finite())
                    .collect(),
            )
        };
        let rms = ratio_msgs(&|f| f.sync_us, &|m| m.barrier_us);
        let rma = ratio_msgs(&|f| f.all_reduce_us, &|m| m.allreduce_us);
        let mut rows = vec![
            ("empty superstep vs MPI_Barrier".to_string(), bs, ts, mb, rs),
            (
                "8-byte all_reduce vs MPI_Allreduce".to_string(),
                ba,
                ta,
                ma,
                ra,
            ),
            (
                "  the same superstep, messages only".to_string(),
                ms,
                None,
                mb,
                rms,
            ),
            (
                "  the same all_reduce, messages only".to_string(),
                ma_b,
                None,
                ma,
                rma,
            ),
        ];
        let mut collectives = Vec::new();
        let sizes: &[usize] = if args.supersteps_only { &[] } else { &SIZES };
        for &bytes in sizes {
            for (name, mpi_name) in COLLECTIVES {
                let pick = |v: &[Timing]| {
                    v.iter()
                        .find(|t| t.name == name && t.bytes == bytes)
                        .map(|t| t.us)
                };
                let b = stat(figs.iter().filter_map(|f| pick(&f.collectives)).collect());
                let t = stat(tcps.iter().filter_map(|f| pick(&f.collectives)).collect());
                let m = stat(
                    mpis.iter()
                        .flatten()
                        .filter_map(|m| pick(&m.collectives))
                        .collect(),
                );
                let r = per_round(&|f| pick(&f.collectives), &|m| pick(&m.collectives));
                rows.push((
                    format!("{name} {} vs {mpi_name}", size_label(bytes)),
                    b,
                    t,
                    m,
                    r,
                ));
                collectives.push(serde_json::json!({
                    "name": name, "mpi": mpi_name, "bytes_per_process": bytes,
                    "bsp_us": b.map(|s| s.0), "bsp_tcp_us": t.map(|s| s.0),
                    "mpi_us": m.map(|s| s.0), "ratio": r.map(|s| s.0),
                }));
            }
        }
        for (name, b, t, m, r) in rows {
            // The messages-only rows have no tcp figure of their own (tcp has no host board).
            let tcp = if name.starts_with("  ") {
                "-".to_string()
            } else {
                show(t)
            };
            println!(
                "{name:<44} {p:>3} {:>20} {:>20} {:>20} {:>20}",
                show(b),
                tcp,
                show(m),
                show_ratio(r)
            );
        }
        let combined = stat(figs.iter().filter_map(|f| f.combined_pps).collect());
        let single = stat(figs.iter().filter_map(|f| f.single_pps).collect());
        summary.push(serde_json::json!({
            "procs": p,
            "bsp_superstep_us": bs.map(|s| s.0),
            "bsp_all_reduce_us": ba.map(|s| s.0),
            "bsp_tcp_superstep_us": ts.map(|s| s.0),
            "bsp_tcp_all_reduce_us": ta.map(|s| s.0),
            "mpi_barrier_us": mb.map(|s| s.0),
            "mpi_allreduce_us": ma.map(|s| s.0),
            "superstep_ratio": rs.map(|s| s.0),
            "all_reduce_ratio": ra.map(|s| s.0),
            "messages_only_superstep_us": ms.map(|s| s.0),
            "messages_only_all_reduce_us": ma_b.map(|s| s.0),
            "messages_only_superstep_ratio": rms.map(|s| s.0),
            "messages_only_all_reduce_ratio": rma.map(|s| s.0),
            "collectives": collectives,
            "combined_packets_per_s": combined.map(|s| s.0),
            "single_message_packets_per_s": single.map(|s| s.0),
            "rounds": figs,
            "tcp_rounds": tcps,
            "mpi_rounds": mpis,
        }));
        if let (Some(c), Some(s)) = (combined, single) {
            combining.push((p, c, s));
        }
    }
    if !args.supersteps_only {
        println!(
            "(sizes are per process: what each receives in scatter and reduce_scatter, \
             contributes in all_gather, scan, exscan and reduce, sends each other process in \
             all_to_all and all_to_all_into)"
        );
    }
    for (p, c, s) in combining {
        println!();
        println!(
            "combining at P = {p}, {} 16-byte packets per superstep: {:.1} M packets/s per \
             process (rounds {:.1}-{:.1}; target >= 20 M)",
            args.packets,
            c.0 / 1e6,
            c.1 / 1e6,
            c.2 / 1e6
        );
        println!(
            "the same traffic as one ipl message per packet ({} packets each way): {:.2} M \
             packets/s per process; combining is {:.0}x faster",
            args.single_messages,
            s.0 / 1e6,
            c.0 / s.0
        );
    }
    Ok(serde_json::Value::Array(summary))
}

/// g and l of the fit over h = p..=H, in seconds; None when there are too few points.
fn fit(t: &[f64], p: usize) -> Option<(f64, f64)> {
    probe::least_squares(t, p.min(t.len().saturating_sub(2)), t.len() - 1)
}

/// The BSP parameters, bsp next to MPI (`--probe`).
fn parameters(args: &Args, dir: &Path, mpi: Option<&Path>) -> Result<serde_json::Value, String> {
    header(
        args,
        &format!(
            "BSP parameters as Bisseling's bspbench measures them: r from {} DAXPY pairs of \
             length {}, g and l from a least-squares fit of T(h) = g h + l over h = P..{}, \
             each h-relation timed {} times; {} rounds",
            args.probe_iters,
            probe::DAXPY_LEN,
            args.max_h,
            args.probe_iters,
            args.rounds
        ),
    );
    println!(
        "{:<40} {:>3} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "h-relations by", "P", "r (Mflop/s)", "g (flop/wd)", "g (us/wd)", "l (flop)", "l (us)"
    );
    let row = |what: &str, p: u32, r: f64, g: f64, l: f64| {
        println!(
            "{what:<40} {p:>3} {:>12.1} {:>12.1} {:>10.4} {:>12.0} {:>10.2}",
            r / 1e6,
            g * r,
            g * 1e6,
            l * r,
            l * 1e6
        );
    };
    let mut summary = Vec::new();
    for &p in &args.procs {
        // Medians over rounds of r, g and l.
        let (mut rs, mut gs, mut ls) = (Vec::new(), Vec::new(), Vec::new());
        let mut m_rs = Vec::new();
        let mut m_fits: [(Vec<f64>, Vec<f64>); 2] = Default::default();
        for _ in 0..args.rounds {
            let fig: ProbeFigures = run_bsp(p, "shm", dir)?;
            if let Some((g, l)) = fit(&fig.t, p as usize) {
                rs.push(fig.r);
                gs.push(g);
                ls.push(l);
            }
            if let Some(m) = mpi.and_then(|exe| mpi::probe(exe, p, args.probe_iters, args.max_h)) {
                m_rs.push(m.r);
                for (k, t) in [&m.t_counts, &m.t_known].into_iter().enumerate() {
                    if let Some((g, l)) = fit(t, p as usize) {
                        m_fits[k].0.push(g);
                        m_fits[k].1.push(l);
                    }
                }
            }
        }
        let (r, g, l) = (median(rs), median(gs), median(ls));
        row("bsp: single-word puts, sync", p, r, g, l);
        let mut entry = serde_json::json!({
            "procs": p, "bsp": {"r_flops": r, "g_s_per_word": g, "l_s": l},
        });
        if !m_rs.is_empty() {
            let mr = median(m_rs);
            for (k, what) in [
                "MPI_Alltoall of counts + MPI_Alltoallv",
                "MPI_Alltoallv, counts known in advance",
            ]
            .into_iter()
            .enumerate()
            {
                let (g, l) = (median(m_fits[k].0.clone()), median(m_fits[k].1.clone()));
                row(what, p, mr, g, l);
                entry[if k == 0 {
                    "mpi_counts_first"
                } else {
                    "mpi_counts_known"
                }] = serde_json::json!({"r_flops": mr, "g_s_per_word": g, "l_s": l});
            }
        }
        summary.push(entry);
    }
    println!(
        "(flop figures use each program's own r; the first MPI row does what a superstep does, \
         learn the counts and then move the data; the second knows them, an easier target)"
    );
    Ok(serde_json::Value::Array(summary))
}

fn main() -> ExitCode {
    let mut args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("bsp-bench: {}", line.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    // After the arguments, so that --help works whatever RUST_LOG holds. Logs as RUST_LOG
    // says (errors by default); a trace per process where IPL_TRACE says.
    let _trace = match ipl::trace::init("error", None) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("bsp-bench: {e}");
            return ExitCode::from(2);
        }
    };
    if args.quick {
        args.rounds = 1;
        args.reps = 5;
        args.combining_reps = 3;
    }
    #[cfg(feature = "mpi")]
    if std::env::var("IPL_DRIVER").as_deref() == Ok("mpi") {
        return match over_mpi::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bsp-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::var("BSP_BENCH_ROLE").as_deref() == Ok("worker") {
        return match worker::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bsp-bench worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // Refuse an output file that cannot be written before measuring anything.
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, b"[]") {
            eprintln!("bsp-bench: cannot write --json {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bsp-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("bsp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mpi = if args.no_mpi {
        println!("skipped MPI: --no-mpi");
        None
    } else {
        match mpi::build(&dir) {
            Ok(exe) => Some(exe),
            Err(why) => {
                println!("skipped MPI: {why}");
                None
            }
        }
    };
    let summary = if args.probe {
        parameters(args, &dir, mpi.as_deref())
    } else {
        compare(args, &dir, mpi.as_deref())
    };
    let _ = std::fs::remove_dir_all(&dir);
    let summary = summary?;
    if let Some(path) = &args.json {
        let text = serde_json::to_vec_pretty(&summary).map_err(|e| e.to_string())?;
        std::fs::write(path, text)
            .map_err(|e| format!("cannot write --json {}: {e}", path.display()))?;
    }
    Ok(())
}
