//! The `uts` binary: searches one UTS tree sequentially (`--seq`), on satin (threads, or the
//! processes of a pool under `ipl-run`) or on rayon (`--rayon`), and prints one JSON line with
//! the tree's counts and the node rate.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use serde_json::json;
use thiserror::Error;
use uts::cli::TreeArgs;
use uts::parallel::{self, ParallelError, SharedSearch, SplitPolicy};
use uts::{Budget, Counts, ParamError, SampleTree, SearchError, Tree, TreeParams};

/// The node limit when `--max-nodes` is not given: 2^32, above every published tree up to
/// T1XXL (4.23 billion nodes), reached by a runaway tree after a few minutes.
const DEFAULT_NODE_LIMIT: u64 = 1 << 32;

/// Count the nodes of an Unbalanced Tree Search tree (Olivier et al., LCPC 2006) and print
/// one JSON result line: nodes, leaves, depth, seconds and nodes per second.
///
/// The tree flags are the UTS reference code's, with its defaults (a geometric tree of 1732
/// nodes); --sample names a published tree instead (T1, T2, T3, T4, T5, T1L, T2L, T3L, ...).
/// Without --seq or --rayon the search runs on satin: on --threads worker threads, and under
/// `ipl-run -n P` (or any IPL_* pool of P > 1 nodes) over the P processes, which steal from
/// each other (--steal); the master prints the result line.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    tree: TreeArgs,

    /// A published sample tree (T1, T3, T3L, ...; `default`) instead of the tree flags.
    #[arg(long, value_name = "NAME", conflicts_with_all = TREE_FLAGS)]
    sample: Option<String>,

    /// Search sequentially, without any runtime (the correctness oracle and speedup baseline).
    #[arg(long, conflicts_with = "rayon")]
    seq: bool,

    /// Search with rayon on --threads threads of this process, for comparison with satin.
    #[arg(long)]
    rayon: bool,

    /// Worker threads (per process).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,

    /// How idle processes of a multi-process run look for work: `random` or `cluster-aware`.
    #[arg(long, default_value = "cluster-aware", value_parser = parse_steal)]
    steal: satin::Steal,

    /// Stop with an error once a search has generated more than this many nodes (in any one
    /// process), so that a tree that never ends does not run forever.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_NODE_LIMIT,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_nodes: u64,

    /// Stop with an error once a search holds more than this many nodes pending at once (in
    /// any one process), generated but not yet expanded, 28 bytes each: a tree whose nodes
    /// nearly all have children keeps nearly every node it generates pending. The default,
    /// 4194304 (112 MiB), is far above what the sample trees hold.
    #[arg(long, value_name = "N", default_value_t = uts::walk::DEFAULT_MAX_PENDING,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_pending: u64,

    /// Parallel searches: hand out work every N nodes a worker expands (128). The default
    /// of satin on one process is --split-on-demand instead.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    split_every: Option<u32>,

    /// Parallel searches: the most pending nodes handed out at once (at most half of the
    /// stack goes); 4 at fixed intervals, half the stack with --split-on-demand.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    chunk: Option<u32>,

    /// satin: hand out work only when an idle worker asks for it, instead of every
    /// --split-every nodes. The default on one process; between processes, where asking
    /// takes a message, work is handed out every 128 nodes unless this is given.
    #[arg(long, conflicts_with_all = ["rayon", "split_every"])]
    split_on_demand: bool,

    /// Write a trace of each process (steals, idle periods, spawn and sync counts) to a file of
    /// its own in DIR, as IPL_TRACE=DIR does; `bench-harness timeline DIR` merges and draws them.
    #[arg(long, value_name = "DIR")]
    trace: Option<std::path::PathBuf>,
}

/// The ids of the tree flags, which `--sample` replaces.
const TREE_FLAGS: [&str; 9] = [
    "tree_type",
    "root_branching",
    "root_seed",
    "shape",
    "depth",
    "nonleaf_prob",
    "nonleaf_children",
    "shift_depth",
    "granularity",
];

fn parse_steal(s: &str) -> Result<satin::Steal, String> {
    match s {
        "random" => Ok(satin::Steal::Random),
        "cluster-aware" => Ok(satin::Steal::ClusterAware),
        _ => Err(format!(
            "unknown stealing policy '{s}': expected 'random' or 'cluster-aware'"
        )),
    }
}

/// What stopped a run.
#[derive(Debug, Error)]
enum AppError {
    /// The tree does not end within the node limit.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// The `IPL_*` environment does not describe a pool.
    #[error("cannot read the pool configuration from the IPL_* environment: {0}")]
    Config(#[source] ipl::Error),
    /// Joining the pool failed.
    #[error("cannot join the pool: {0}")]
    Join(#[source] ipl::Error),
    /// The runtime failed.
    #[error(transparent)]
    Parallel(#[from] ParallelError),
}

impl AppError {
    /// 2 for what the command line asked for (a tree past the node limit), 1 otherwise.
    fn exit_code(&self) -> u8 {
        match self {
            AppError::Search(_) | AppError::Parallel(ParallelError::Search(_)) => 2,
            _ => 1,
        }
    }
}

/// How the search ran.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sequential,
    Satin,
    Rayon,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Satin => "satin",
            Mode::Rayon => "rayon",
        }
    }
}

/// A finished search.
struct Outcome {
    counts: Counts,
    search_seconds: f64,
    /// Seconds to start the runtime (threads; for a pool, the first run that connects it).
    start_seconds: Option<f64>,
    stats: Option<satin::Stats>,
}

/// Prints `searched N nodes` lines on a terminal every few seconds while a search runs.
struct Progress {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(counted: impl Fn() -> u64 + Send + 'static) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress {
                stop: None,
                thread: None,
            };
        }
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(5))
            {
                let n = counted();
                eprintln!(
                    "uts: {n} nodes so far, {:.1} M nodes/s",
                    n as f64 / start.elapsed().as_secs_f64() / 1e6
                );
            }
        });
        Progress {
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn sequential(params: TreeParams, limit: u64, max_pending: u64) -> Result<Outcome, AppError> {
    let tree = Tree::new(params).map_err(ParallelError::from)?;
    let budget = std::sync::Arc::new(Budget::with_max_pending(limit, max_pending));
    let _progress = Progress::start({
        let budget = budget.clone();
        move || budget.counted()
    });
    let start = Instant::now();
    let counts = uts::search_sequential(&tree, &budget)?;
    Ok(Outcome {
        counts,
        search_seconds: start.elapsed().as_secs_f64(),
        start_seconds: None,
        stats: None,
    })
}

fn progress_of(search: &SharedSearch) -> Progress {
    let search = search.clone();
    Progress::start(move || search.budget().counted())
}

fn with_rayon(search: SharedSearch, threads: u32) -> Result<Outcome, AppError> {
    let start = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads as usize)
        // The walk does not recurse, but the satin runs have this much stack: same footing.
        .stack_size(16 << 20)
        .build()
        .map_err(ParallelError::from)?;
    // Every thread up before the clock starts, as for satin.
    pool.broadcast(|_| ());
    let start_seconds = start.elapsed().as_secs_f64();
    let _progress = progress_of(&search);
    let start = Instant::now();
    let counts = parallel::search_rayon(&pool, &search)?;
    Ok(Outcome {
        counts,
        search_seconds: start.elapsed().as_secs_f64(),
        start_seconds: Some(start_seconds),
        stats: None,
    })
}

fn with_satin(search: SharedSearch, threads: u32) -> Result<Outcome, AppError> {
    let start = Instant::now();
    let runtime = parallel::satin_runtime(threads as usize);
    runtime.start().map_err(ParallelError::from)?;
    let start_seconds = start.elapsed().as_secs_f64();
    let _progress = progress_of(&search);
    let start = Instant::now();
    let counts = parallel::search_satin_shared(&runtime, &search)?;
    Ok(Outcome {
        counts,
        search_seconds: start.elapsed().as_secs_f64(),
        start_seconds: Some(start_seconds),
        stats: Some(runtime.stats()),
    })
}

/// Searches over the processes of `ibis`'s pool; `None` on the processes other than the
/// master.
fn in_pool(
    ibis: ipl::Ibis,
    search: SharedSearch,
    threads: u32,
    steal: satin::Steal,
) -> Result<Option<Outcome>, AppError> {
    let runtime = parallel::pool_runtime(ibis, threads as usize, steal);
    // The first run elects the master and connects every pair of nodes: time it apart, with
    // a search of nothing.
    let start = Instant::now();
    let empty = parallel::Subtrees::new(search.clone(), Vec::new());
    runtime.run(empty).map_err(ParallelError::from)?;
    let start_seconds = start.elapsed().as_secs_f64();
    let before = runtime.stats();
    let _progress = progress_of(&search);
    let start = Instant::now();
    let counts = parallel::search_in_pool(&runtime, &search)?;
    Ok(counts.map(|counts| Outcome {
        counts,
        search_seconds: start.elapsed().as_secs_f64(),
        start_seconds: Some(start_seconds),
        stats: Some(runtime.stats().since(&before)),
    }))
}

/// The split policy the flags ask for: satin on one process splits on demand unless told
/// otherwise; searches over processes and rayon's hand out work at fixed intervals (see the
/// README for the measurements behind the choice).
fn split_policy(args: &Args, mode: Mode, processes: usize) -> SplitPolicy {
    let on_demand = match (args.split_on_demand, args.split_every) {
        (true, _) => true,
        (false, Some(_)) => false,
        (false, None) => mode == Mode::Satin && processes == 1,
    };
    let base = if on_demand {
        SplitPolicy::ON_DEMAND
    } else {
        SplitPolicy::FIXED
    };
    SplitPolicy {
        every: args.split_every.unwrap_or(base.every),
        chunk: args.chunk.unwrap_or(base.chunk),
        ..base
    }
}

fn run(args: Args, params: TreeParams) -> Result<(), AppError> {
    let mode = if args.seq {
        Mode::Sequential
    } else if args.rayon {
        Mode::Rayon
    } else {
        Mode::Satin
    };
    let threads = if mode == Mode::Sequential {
        1
    } else {
        args.threads
    };
    // Only satin runs join a pool; the sequential and rayon searches run in this process alone.
    let pool = if mode == Mode::Satin {
        let config = ipl::Config::from_env().map_err(AppError::Config)?;
        Some(ipl::Ibis::join(config).map_err(AppError::Join)?)
    } else {
        None
    };
    let processes = pool.as_ref().map_or(1, |ibis| {
        let p = ibis.pool();
        p.size().map_or_else(|| p.members().len(), |n| n as usize)
    });
    let split = split_policy(&args, mode, processes);
    let outcome = match (mode, pool.clone()) {
        (Mode::Sequential, _) => sequential(params, args.max_nodes, args.max_pending)?,
        (Mode::Rayon, _) => {
            let search =
                SharedSearch::with_max_pending(params, args.max_nodes, args.max_pending, split)
                    .map_err(ParallelError::from)?;
            with_rayon(search, threads)?
        }
        (Mode::Satin, Some(ibis)) if processes > 1 => {
            let search =
                SharedSearch::with_max_pending(params, args.max_nodes, args.max_pending, split)
                    .map_err(ParallelError::from)?;
            match in_pool(ibis, search, threads, args.steal)? {
                Some(outcome) => outcome,
                // The master reports; the other processes only helped.
                None => return Ok(()),
            }
        }
        (Mode::Satin, _) => {
            let search =
                SharedSearch::with_max_pending(params, args.max_nodes, args.max_pending, split)
                    .map_err(ParallelError::from)?;
            with_satin(search, threads)?
        }
    };
    print_result(&args, &params, mode, processes, threads, split, &outcome);
    drop(pool);
    Ok(())
}

fn print_result(
    args: &Args,
    params: &TreeParams,
    mode: Mode,
    processes: usize,
    threads: u32,
    split: SplitPolicy,
    outcome: &Outcome,
) {
    let c = outcome.counts;
    let mut line = json!({
        "app": "uts",
        "version": if mode == Mode::Sequential { "sequential" } else { "parallel" },
        "mode": mode.name(),
        "parameters": {
            "tree": params.sample_name(),
            "args": params.to_args().join(" "),
            "t": params.tree_type.code(),
            "b": params.root_branching,
            "r": params.root_seed,
            "a": params.shape.code(),
            "d": params.depth,
            "q": params.nonleaf_prob,
            "m": params.nonleaf_children,
            "f": params.shift_depth,
            "g": params.granularity,
            "max_nodes": args.max_nodes,
            "max_pending": args.max_pending,
        },
        "processes": processes,
        "threads": threads,
        "nodes": c.nodes,
        "leaves": c.leaves,
        "max_depth": c.max_depth,
        "seconds": { "search": outcome.search_seconds },
        "total_seconds": outcome.search_seconds,
        "nodes_per_second": c.nodes as f64 / outcome.search_seconds,
        "checksum": c.checksum(),
    });
    if mode != Mode::Sequential {
        if split.on_demand {
            line["parameters"]["split"] = json!("on demand");
        } else {
            line["parameters"]["split_every"] = json!(split.every);
        }
        line["parameters"]["chunk"] = match split.chunk {
            u32::MAX => json!("half"),
            n => json!(n),
        };
    }
    if processes > 1 {
        line["parameters"]["steal"] = json!(match args.steal {
            satin::Steal::Random => "random",
            satin::Steal::ClusterAware => "cluster-aware",
        });
    }
    if let Some(s) = outcome.start_seconds {
        line["seconds"]["runtime_start"] = json!(s);
    }
    if let Some(stats) = &outcome.stats {
        line["satin"] = json!({
            "spawns": stats.spawns,
            "spawns_inlined": stats.spawns_inlined,
            "jobs_executed": stats.jobs_executed,
            "local_steals": stats.local_steals,
            "remote_steal_attempts": stats.remote_steal_attempts,
            "remote_steals": stats.remote_steals,
            "jobs_sent": stats.jobs_sent,
            "jobs_reexecuted": stats.jobs_reexecuted,
            "orphan_results_reused": stats.orphan_results_reused,
            "results_salvaged": stats.results_salvaged,
            "nodes_joined": stats.nodes_joined,
            "nodes_left": stats.nodes_left,
            "nodes_died": stats.nodes_died,
            "idle_seconds": stats.idle.as_secs_f64(),
            "max_nesting": parallel::nesting_high_water(),
        });
    }
    println!("{line}");
}

/// The tree the arguments describe, or the usage error clap prints (exit status 2).
fn tree_params(args: &Args) -> Result<TreeParams, clap::Error> {
    let usage = |msg: String| Args::command().error(clap::error::ErrorKind::ValueValidation, msg);
    match &args.sample {
        Some(name) => SampleTree::find(name).map(|s| s.params()).ok_or_else(|| {
            let known: Vec<&str> = uts::SAMPLE_TREES.iter().map(|s| s.name).collect();
            usage(format!(
                "unknown sample tree '{name}': known are {}",
                known.join(", ")
            ))
        }),
        None => args
            .tree
            .params()
            .map_err(|e: ParamError| usage(e.to_string())),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Logs as RUST_LOG says; the trace, if asked for, is complete when this guard drops.
    let _trace = match ipl::trace::init("warn", args.trace.as_deref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let params = match tree_params(&args) {
        Ok(p) => p,
        Err(e) => e.exit(),
    };
    match run(args, params) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
