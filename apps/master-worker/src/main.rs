//! The `master-worker` command: the request-rate benchmark, the task farm, its sequential
//! version, and a sweep over worker counts. Prints one JSON result line.

use clap::{Parser, ValueEnum};
use master_worker::sweep::{find_ipl_run, sweep};
use master_worker::{
    run, run_in_process, Error, MasterOptions, MasterReport, Mode, Outcome, Progress,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Master/worker on the port library: workers send requests identifying themselves, the master
/// (the winner of the election "master") answers each with an object holding one value of every
/// primitive type.
///
/// Started by a launcher (`ipl-run -n N -- master-worker ...`, `mpirun`, `srun`, or any
/// environment with IPL_SERVER set) this process is one node of that pool; started on its own
/// it runs a whole
/// pool of --workers worker threads plus the master in this process. Only the master prints its
/// JSON result line (app, mode, parameters, nodes, threads, seconds per phase, total seconds,
/// requests per second, checksum).
#[derive(Parser, Debug)]
#[command(version, allow_negative_numbers = true)]
struct Args {
    /// bench: workers loop request/reply for --seconds and the master reports requests per
    /// second. farm: the replies carry jobs (count the primes in a range of --chunk numbers
    /// below --n) and the next request carries the result; the checksum is the number of
    /// primes. sequential: the farm's jobs run one after another in this process, no pool.
    #[arg(long, value_enum, default_value_t = ModeArg::Bench)]
    mode: ModeArg,

    /// How long the workers keep sending requests in bench mode, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,

    /// Farm: count the primes in [0, N).
    #[arg(long, short, default_value_t = 2_000_000)]
    n: u64,

    /// Farm: numbers per job.
    #[arg(long, default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    chunk: u64,

    /// Worker threads of the in-process pool used when no launcher started this process
    /// (ignored under a launcher, where every other process of the pool is a worker).
    #[arg(long, short, default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    workers: u32,

    /// How long a receiver spins before it parks (e.g. 0, 20us, 200us). Overrides IPL_SPIN.
    /// Without either: 0 when the pool has more nodes than this machine has cores (spinning
    /// workers would take the cores the master needs), else the port library's default.
    #[arg(long, value_parser = parse_duration)]
    spin: Option<Duration>,

    /// Interval of the master's progress reports (requests per second), in seconds.
    #[arg(long, default_value_t = 1.0)]
    report_every: f64,

    /// Farm: fail when, with jobs left and none handed out, no worker asks for this many
    /// seconds.
    #[arg(long, default_value_t = 60.0)]
    worker_timeout: f64,

    /// Do not print progress reports to stderr.
    #[arg(long, short)]
    quiet: bool,

    /// Measure the bench request rate for each of these worker counts (e.g. 1,2,4,8,16): one
    /// `ipl-run -n W+1 -- master-worker --mode bench` per count, workers as processes on tcp.
    /// --seconds, --spin and --report-every are passed on.
    #[arg(long, value_delimiter = ',', num_args = 1..,
          value_parser = clap::value_parser!(u32).range(1..=4095))]
    sweep: Option<Vec<u32>>,

    /// --sweep: measure every worker count this many times, in interleaved rounds (so that
    /// changing load on the machine affects every count alike), and report the medians.
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,

    /// The ipl-run launcher for --sweep (default: $IPL_RUN, or ipl-run next to this binary;
    /// build it with `cargo build -p ipl --bin ipl-run`).
    #[arg(long)]
    ipl_run: Option<PathBuf>,

    /// Write a trace of each process (joins, leaves, and with IPL_TRACE_MESSAGES=BYTES the
    /// messages of at least BYTES) to a file of its own in DIR, as IPL_TRACE=DIR does.
    #[arg(long, value_name = "DIR")]
    trace: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Bench,
    Farm,
    Sequential,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    ipl::config::parse_duration("--spin", s).map_err(|e| e.to_string())
}

/// The receivers' spin for a pool of `nodes`: --spin, else IPL_SPIN (already in `configured`),
/// else 0 when the pool has more nodes than this machine has cores, else `configured` (the
/// port library's default).
fn choose_spin(a: &Args, nodes: Option<u32>, configured: Duration) -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match (a.spin, nodes) {
        (Some(s), _) => s,
        _ if std::env::var_os("IPL_SPIN").is_some() => configured,
        (None, Some(n)) if n as usize > cores => Duration::ZERO,
        _ => configured,
    }
}

fn seconds(name: &'static str, v: f64) -> Result<Duration, Error> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero() && *d <= ipl::config::MAX_DURATION)
        .ok_or(Error::Param {
            name,
            reason: format!(
                "{v:?} is not a positive number of seconds up to a year ({} s)",
                ipl::config::MAX_DURATION.as_secs()
            ),
        })
}

fn options(a: &Args) -> Result<MasterOptions, Error> {
    let mode = match a.mode {
        ModeArg::Bench => Mode::Bench {
            duration: seconds("--seconds", a.seconds)?,
        },
        _ => Mode::Farm {
            n: a.n,
            chunk: a.chunk,
        },
    };
    let mut o = MasterOptions::new(mode);
    o.report_every = seconds("--report-every", a.report_every)?;
    o.worker_timeout = seconds("--worker-timeout", a.worker_timeout)?;
    Ok(o)
}

fn mode_name(m: ModeArg) -> &'static str {
    match m {
        ModeArg::Bench => "bench",
        ModeArg::Farm => "farm",
        ModeArg::Sequential => "sequential",
    }
}

fn parameters(a: &Args, driver: &str, spin: Duration) -> Value {
    json!({
        "seconds": (a.mode == ModeArg::Bench).then_some(a.seconds),
        "n": (a.mode != ModeArg::Bench).then_some(a.n),
        "chunk": (a.mode != ModeArg::Bench).then_some(a.chunk),
        "driver": driver,
        "spin_us": spin.as_micros() as u64,
        "report_every": a.report_every,
    })
}

fn print_progress(quiet: bool) -> impl FnMut(&Progress) {
    move |p: &Progress| {
        if quiet {
            return;
        }
        let jobs = p
            .jobs_done
            .map(|j| format!(", {j} jobs done"))
            .unwrap_or_default();
        eprintln!(
            "master-worker: {:7.2} s: {:10.0} requests/s ({} workers{jobs})",
            p.elapsed_seconds, p.requests_per_second, p.workers
        );
    }
}

fn result_line(
    a: &Args,
    params: Value,
    nodes: u64,
    phases: Value,
    total: f64,
    r: &MasterReport,
) -> Value {
    let checksum = r.farm.as_ref().map_or(r.requests, |f| f.primes);
    json!({
        "app": "master-worker",
        "mode": mode_name(a.mode),
        "parameters": params,
        "nodes": nodes,
        "workers": nodes - 1,
        "threads": 1,
        "seconds": phases,
        "total_seconds": total,
        "requests": r.requests,
        "requests_per_second": r.requests_per_second,
        "rates": r.rates,
        "requests_per_worker": r.requests_per_worker,
        "farm": r.farm,
        "unstopped": r.unstopped,
        "checksum": checksum,
    })
}

fn run_sequential(a: &Args, started: Instant) -> Value {
    let t = Instant::now();
    let primes = master_worker::sequential::farm(a.n, a.chunk);
    let farm_seconds = t.elapsed().as_secs_f64();
    json!({
        "app": "master-worker",
        "mode": "sequential",
        "parameters": { "n": a.n, "chunk": a.chunk },
        "nodes": 1,
        "threads": 1,
        "seconds": { "farm": farm_seconds },
        "total_seconds": started.elapsed().as_secs_f64(),
        "checksum": primes,
    })
}

fn run_sweep(a: &Args, counts: &[u32], started: Instant) -> Result<Value, Error> {
    let launcher = a
        .ipl_run
        .clone()
        .or_else(find_ipl_run)
        .ok_or(Error::Launch {
            context: "find ipl-run".into(),
            reason: "not next to this binary and IPL_RUN is unset; build it with \
                 `cargo build -p ipl --bin ipl-run` or pass --ipl-run"
                .into(),
        })?;
    let program = std::env::current_exe().map_err(|e| Error::Launch {
        context: "find this binary".into(),
        reason: e.to_string(),
    })?;
    let mut args = vec![
        "--seconds".to_string(),
        a.seconds.to_string(),
        "--report-every".to_string(),
        a.report_every.to_string(),
    ];
    if let Some(s) = a.spin {
        args.extend(["--spin".to_string(), format!("{}ns", s.as_nanos())]);
    }
    let limit = seconds("--seconds", a.seconds)? + Duration::from_secs(120);
    let quiet = a.quiet;
    let rounds: Vec<u32> = (0..a.repeat).flat_map(|_| counts.iter().copied()).collect();
    let points = sweep(&launcher, &program, &rounds, &args, &[], limit, |p| {
        if !quiet {
            eprintln!(
                "master-worker sweep: {:3} workers: {:10.0} requests/s",
                p.workers, p.requests_per_second
            );
        }
    })?;
    let mut medians = serde_json::Map::new();
    for &w in counts {
        let mut r: Vec<f64> = points
            .iter()
            .filter(|p| p.workers == w)
            .map(|p| p.requests_per_second)
            .collect();
        r.sort_by(f64::total_cmp);
        let median = if r.len() % 2 == 1 {
            r[r.len() / 2]
        } else {
            (r[r.len() / 2 - 1] + r[r.len() / 2]) / 2.0
        };
        medians.insert(w.to_string(), json!(median));
    }
    let rate_at = |w: u32| medians.get(&w.to_string()).and_then(Value::as_f64);
    let ratio_16_8 = rate_at(16).zip(rate_at(8)).map(|(a, b)| a / b);
    Ok(json!({
        "app": "master-worker",
        "mode": "sweep",
        "parameters": {
            "seconds": a.seconds,
            "workers": counts,
            "repeat": a.repeat,
            "driver": "tcp",
            "spin_us": a.spin.map_or(Value::from("default"), |s| Value::from(s.as_micros() as u64)),
            "launcher": launcher.display().to_string(),
        },
        "nodes": counts.iter().max().map(|w| w + 1),
        "threads": 1,
        "points": points,
        "median_requests_per_second": medians,
        "ratio_16_to_8": ratio_16_8,
        "seconds": { "sweep": started.elapsed().as_secs_f64() },
        "total_seconds": started.elapsed().as_secs_f64(),
        "checksum": points.iter().map(|p| p.requests).sum::<u64>(),
    }))
}

fn run_pool(a: &Args, started: Instant) -> Result<Option<Value>, Error> {
    let opts = options(a)?;
    let mut progress = print_progress(a.quiet);
    let mut cfg = ipl::Config::from_env().map_err(|source| Error::Ipl {
        context: "read the pool configuration (IPL_* or the launcher's environment)".into(),
        source,
    })?;
    if cfg.driver == ipl::Driver::Inproc {
        let spin = choose_spin(a, Some(a.workers + 1), cfg.spin);
        let r = run_in_process(a.workers, spin, &opts, &mut progress)?;
        let phases = json!({ "join": r.join_seconds, "run": r.master.seconds });
        let total = started.elapsed().as_secs_f64();
        let params = parameters(a, "inproc", spin);
        let nodes = u64::from(a.workers) + 1;
        return Ok(Some(result_line(
            a, params, nodes, phases, total, &r.master,
        )));
    }
    cfg.spin = choose_spin(a, cfg.size, cfg.spin);
    let driver = format!("{:?}", cfg.driver).to_lowercase();
    let spin = cfg.spin;
    let ibis = ipl::Ibis::join(cfg).map_err(|source| Error::Ipl {
        context: "join the pool".into(),
        source,
    })?;
    let joined = started.elapsed().as_secs_f64();
    let run_start = Instant::now();
    let outcome = run(&ibis, &opts, &mut progress)?;
    let run_seconds = run_start.elapsed().as_secs_f64();
    match outcome {
        Outcome::Master(r) => {
            let nodes = ibis
                .pool()
                .size()
                .map_or(r.requests_per_worker.len() as u64 + 1, u64::from);
            let phases = json!({ "join": joined, "run": run_seconds });
            let total = started.elapsed().as_secs_f64();
            let params = parameters(a, &driver, spin);
            Ok(Some(result_line(a, params, nodes, phases, total, &r)))
        }
        Outcome::Worker(w) => {
            tracing::debug!(?w, "worker done");
            Ok(None)
        }
    }
}

fn main() -> ExitCode {
    let a: Args = ipl::cli::parse("master-worker");
    // Logs as RUST_LOG says; the trace, if asked for, is complete when this guard drops (or at
    // exit).
    let _trace = match ipl::trace::init("warn", a.trace.as_deref()) {
        Ok(guard) => guard,
        Err(e) => ipl::cli::refuse("master-worker", e),
    };
    let started = Instant::now();
    // Values the run cannot serve are refused before any work, with status 2.
    let checked = match (&a.sweep, a.mode) {
        (None, ModeArg::Sequential) => Ok(()),
        _ => options(&a).map(|_| ()),
    };
    if let Err(e) = checked {
        ipl::cli::refuse("master-worker", e);
    }
    let result = match (&a.sweep, a.mode) {
        (Some(counts), _) => run_sweep(&a, counts, started).map(Some),
        (None, ModeArg::Sequential) => Ok(Some(run_sequential(&a, started))),
        (None, _) => run_pool(&a, started),
    };
    match result {
        Ok(Some(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        // Printed whatever RUST_LOG selects: a run must never fail silently.
        Err(
            e @ (Error::Param { .. }
            | Error::Ipl {
                source: ipl::Error::Config { .. },
                ..
            }),
        ) => ipl::cli::refuse("master-worker", e),
        Err(e) => {
            eprintln!("master-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
