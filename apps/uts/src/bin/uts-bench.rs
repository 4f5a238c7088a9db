//! The UTS benchmark: node rates and speedups on the published trees, every contender measured
//! in the same rounds.
//!
//! `uts-bench [--rounds N] [--trees T1,T3] [--threads T] [--processes P] [--reference PATH]`
//!
//! Each round runs, for every tree and in this order: the reference C code (`--reference`,
//! the UTS distribution's depth-first `uts-dfs`; see the crate's README for where it comes
//! from and how it is compiled), the sequential search, then on T threads, in turns: satin
//! splitting work on demand (its default), satin with rayon's policy (a hand-out at fixed
//! intervals: the same walk and policy as rayon's), and rayon; last P processes of one
//! thread under `ipl-run`
//! (the `uts` binary next to this one; its own timer excludes starting the pool). Every run's
//! counts are checked against the published ones. The summary gives medians over the rounds:
//! node rates, and speedups and time ratios as medians of the per-round ratios.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use uts::parallel::{search_rayon, search_satin_shared, SharedSearch, SplitPolicy};
use uts::{search_sequential, Budget, Counts, SampleTree, Tree};

/// Node rates of the sequential search next to the reference C code, and speedups of satin
/// (threads and processes) and rayon over the sequential search, on the published trees.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Rounds; every contender runs once per tree in each.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,

    /// Published trees to run, comma-separated.
    #[arg(long, default_value = "T1,T3", value_delimiter = ',')]
    trees: Vec<String>,

    /// Threads of the satin and rayon runs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,

    /// Processes (of one thread each) of the multi-process run; 0 skips it.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    processes: u32,

    /// The reference code's depth-first binary (`uts-dfs`), run with the tree's flags.
    #[arg(long, value_name = "PATH")]
    reference: Option<PathBuf>,

    /// Longest a run in another process (reference, processes) may take, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
}

/// Runs `cmd` to its end within `limit` (killing it after that): status and both outputs.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish within {limit:?}"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The parallel contenders on one process, run in turns in each round: satin splitting on
/// demand (its default), satin with rayon's policy, and rayon, which cannot split on demand.
const CONTENDERS: [(&str, SplitPolicy); 3] = [
    ("satin", SplitPolicy::ON_DEMAND),
    ("satin with rayon's policy", SplitPolicy::FIXED),
    ("rayon", SplitPolicy::FIXED),
];
/// rayon's index in [`CONTENDERS`].
const RAYON: usize = 2;

/// Seconds of every contender in every round, for one tree.
#[derive(Default)]
struct Times {
    reference: Vec<f64>,
    sequential: Vec<f64>,
    /// satin splitting on demand.
    satin: Vec<f64>,
    /// satin with the policy rayon uses.
    satin_fixed: Vec<f64>,
    rayon: Vec<f64>,
    processes: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// `a[i] / b[i]` for every round.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// The median over rounds of `a[i] / b[i]`.
fn ratio(a: &[f64], b: &[f64]) -> Option<f64> {
    median(ratios(a, b))
}

/// A distribution-free 95% confidence interval for the median of `a[i] / b[i]` over the
/// rounds, from the order statistics: the ratios ranked n/2 - 0.98 sqrt(n) and
/// 1 + n/2 + 0.98 sqrt(n) (the binomial interval; the whole range below 6 rounds).
fn ratio_interval(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    let mut v = ratios(a, b);
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n < 6 {
        return Some((v[0], v[n - 1]));
    }
    let h = 0.98 * (n as f64).sqrt();
    let low = ((n as f64 / 2.0 - h).floor() as usize).max(1);
    let high = ((1.0 + n as f64 / 2.0 + h).ceil() as usize).min(n);
    Some((v[low - 1], v[high - 1]))
}

fn check(what: &str, tree: &SampleTree, got: Counts) -> Result<(), String> {
    if got.nodes == tree.expected.nodes
        && (tree.expected.leaves == 0 || got.leaves == tree.expected.leaves)
    {
        Ok(())
    } else {
        Err(format!(
            "{what} on {}: {} instead of the published {}",
            tree.name,
            got.checksum(),
            tree.expected.checksum()
        ))
    }
}

/// Runs the reference binary on `tree`: its search time, after checking its counts.
fn run_reference(path: &Path, tree: &SampleTree, limit: Duration) -> Result<f64, String> {
    let out = run_bounded(Command::new(path).args(tree.args.split_whitespace()), limit)?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} {}: {}\n{text}",
            path.display(),
            tree.args,
            out.status
        ));
    }
    let number_after = |label: &str| -> Option<f64> {
        let at = text.find(label)? + label.len();
        let digits: String = text[at..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        digits.parse().ok()
    };
    let nodes = number_after("Tree size =").ok_or_else(|| format!("no tree size in: {text}"))?;
    let leaves = number_after("num leaves =").unwrap_or(0.0);
    let depth = number_after("tree depth =").unwrap_or(0.0);
    check(
        "the reference code",
        tree,
        Counts {
            nodes: nodes as u64,
            leaves: leaves as u64,
            max_depth: depth as u32,
        },
    )?;
    number_after("Wallclock time =").ok_or_else(|| format!("no wallclock time in: {text}"))
}

/// Runs `processes` processes of the `uts` binary under `ipl-run`: the search time the
/// master reports, after checking its counts.
fn run_processes(
    bin_dir: &Path,
    tree: &SampleTree,
    processes: u32,
    limit: Duration,
) -> Result<f64, String> {
    let launcher = bin_dir.join("ipl-run");
    let app = bin_dir.join("uts");
    let out = run_bounded(
        Command::new(&launcher)
            .args(["-n", &processes.to_string(), "--no-prefix", "--"])
            .arg(&app)
            .args(["--sample", tree.name, "--threads", "1"]),
        limit,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} processes on {}: {}\n{stdout}\n{}",
            processes,
            tree.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find(|l| l.starts_with("{\"app\""))
        .ok_or_else(|| format!("no result line from {processes} processes: {stdout}"))?;
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("bad result line ({e}): {line}"))?;
    let field = |k: &str| v[k].as_u64().unwrap_or(0);
    check(
        &format!("{processes} processes"),
        tree,
        Counts {
            nodes: field("nodes"),
            leaves: field("leaves"),
            max_depth: field("max_depth") as u32,
        },
    )?;
    v["total_seconds"]
        .as_f64()
        .ok_or_else(|| format!("no total_seconds in {line}"))
}

fn timed(f: impl FnOnce() -> Result<Counts, String>) -> Result<(Counts, f64), String> {
    let start = Instant::now();
    let c = f()?;
    Ok((c, start.elapsed().as_secs_f64()))
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

fn run(args: Args) -> Result<(), String> {
    let trees: Vec<&SampleTree> = args
        .trees
        .iter()
        .map(|n| SampleTree::find(n).ok_or_else(|| format!("unknown sample tree {n}")))
        .collect::<Result<_, _>>()?;
    let bin_dir = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable: {e}"))?
        .parent()
        .map(Path::to_path_buf)
        .ok_or("this executable has no directory")?;
    let threads = args.threads as usize;
    let limit = Duration::from_secs(args.timeout);
    let satin = uts::parallel::satin_runtime(threads);
    satin.start().map_err(|e| format!("satin: {e}"))?;
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("rayon: {e}"))?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "uts-bench: {} rounds, {} threads, {} processes, {cores} cores; reference: {}",
        args.rounds,
        args.threads,
        args.processes,
        args.reference
            .as_ref()
            .map_or("not given".into(), |p| p.display().to_string())
    );
    let mut times: Vec<Times> = trees.iter().map(|_| Times::default()).collect();
    for round in 1..=args.rounds {
        for (tree, t) in trees.iter().zip(&mut times) {
            let params = tree.params();
            let mut line = format!("round {round} {:<3}", tree.name);
            if let Some(path) = &args.reference {
                let s = run_reference(path, tree, limit)?;
                line += &format!("  reference {s:.4}s");
                t.reference.push(s);
            }
            let table = Tree::new(params).map_err(|e| e.to_string())?;
            let (c, s) = timed(|| {
                search_sequential(&table, &Budget::new(u64::MAX)).map_err(|e| e.to_string())
            })?;
            check("the sequential search", tree, c)?;
            line += &format!("  sequential {s:.4}s");
            t.sequential.push(s);
            let search = |split: SplitPolicy| {
                SharedSearch::new(params, u64::MAX, split).map_err(|e| e.to_string())
            };
            let run_one = |contender: usize| -> Result<f64, String> {
                let (what, split) = CONTENDERS[contender];
                let s = search(split)?;
                let (c, secs) = timed(|| {
                    if contender == RAYON {
                        search_rayon(&rayon, &s).map_err(|e| e.to_string())
                    } else {
                        search_satin_shared(&satin, &s).map_err(|e| e.to_string())
                    }
                })?;
                check(what, tree, c)?;
                Ok(secs)
            };
            // Each contender runs first in every third round, so that none always meets the
            // caches and the cores' state another left behind.
            let mut secs = [0.0; CONTENDERS.len()];
            for k in 0..CONTENDERS.len() {
                let contender = (round as usize + k) % CONTENDERS.len();
                secs[contender] = run_one(contender)?;
            }
            let [s_satin, s_satin_fixed, s_rayon] = secs;
            line += &format!(
                "  satin {s_satin:.4}s  satin-fixed {s_satin_fixed:.4}s  rayon {s_rayon:.4}s"
            );
            t.satin.push(s_satin);
            t.satin_fixed.push(s_satin_fixed);
            t.rayon.push(s_rayon);
            if args.processes > 0 {
                let s = run_processes(&bin_dir, tree, args.processes, limit)?;
                line += &format!("  {}x1 processes {s:.4}s", args.processes);
                t.processes.push(s);
            }
            println!("{line}");
        }
    }
    println!();
    println!(
        "tree  seq Mnodes/s  ref Mnodes/s  seq/ref  satin {0}t speedup  rayon {0}t speedup  satin/rayon time  fixed/rayon time  {1}x1 processes speedup",
        args.threads, args.processes
    );
    for (tree, t) in trees.iter().zip(&times) {
        let rate = |v: &[f64]| {
            median(
                v.iter()
                    .map(|s| tree.expected.nodes as f64 / s / 1e6)
                    .collect(),
            )
        };
        let seq_rate = rate(&t.sequential);
        let ref_rate = rate(&t.reference);
        println!(
            "{:<5} {:>12} {:>13} {:>8} {:>18} {:>18} {:>17} {:>17} {:>23}",
            tree.name,
            fmt(seq_rate, 2),
            fmt(ref_rate, 2),
            fmt(ratio(&t.reference, &t.sequential), 2),
            fmt(ratio(&t.sequential, &t.satin), 2),
            fmt(ratio(&t.sequential, &t.rayon), 2),
            fmt(ratio(&t.satin, &t.rayon), 3),
            fmt(ratio(&t.satin_fixed, &t.rayon), 3),
            fmt(ratio(&t.sequential, &t.processes), 2),
        );
    }
    for (tree, t) in trees.iter().zip(&times) {
        for (what, satin) in [
            ("satin/rayon time", &t.satin),
            ("satin with rayon's policy/rayon time", &t.satin_fixed),
        ] {
            if let Some((low, high)) = ratio_interval(satin, &t.rayon) {
                println!(
                    "{}: {what} {}, 95% confidence interval of the median [{low:.3}, {high:.3}] over {} rounds",
                    tree.name,
                    fmt(ratio(satin, &t.rayon), 3),
                    satin.len()
                );
            }
        }
    }
    println!(
        "targets: seq/ref >= 1.0; satin speedup >= 1.9 on 2 threads; processes >= 1.8 on 2 processes; satin/rayon <= 1.0"
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uts-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_of_the_median_is_the_binomial_one() {
        // Ratios 1..=n over denominators of 1: the interval's ends are the ranks themselves,
        // as the binomial tables give them (n = 21: 6 and 16; n = 100: 40 and 61).
        let ones = vec![1.0; 100];
        let ranks: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(ratio_interval(&ranks[..21], &ones[..21]), Some((6.0, 16.0)));
        assert_eq!(ratio_interval(&ranks, &ones), Some((40.0, 61.0)));
        assert_eq!(ratio_interval(&ranks[..3], &ones[..3]), Some((1.0, 3.0)));
        assert_eq!(ratio_interval(&[], &[]), None);
    }
}
