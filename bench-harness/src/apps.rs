//! The bundled workloads the harness knows: their binaries, size presets, how their sequential
//! and parallel versions are selected, and what their `--help` says they support.

use crate::error::{Error, Result};
use crate::exec::{self, CommandLine, Exit};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Problem-size presets; each app maps them to its own parameters (see [`AppSpec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// Fractions of a second even in a debug build: for tests and trying the harness out.
    Tiny,
    /// About a second per sequential run in a release build: the quick demonstration.
    Small,
    /// Several seconds per sequential run: the default sweep.
    Medium,
    /// The sizes of the reference papers (SOR 4096, Barnes-Hut 30000 bodies, ...).
    Large,
}

impl Size {
    /// The preset's name as typed on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Size::Tiny => "tiny",
            Size::Small => "small",
            Size::Medium => "medium",
            Size::Large => "large",
        }
    }
}

/// A workload binary and how to drive it (see `apps/README.md` for the conventions).
#[derive(Debug, Clone, Copy)]
pub struct AppSpec {
    /// The app's name, as on the command line and in its JSON result line.
    pub name: &'static str,
    /// The binary's file name in the binary directory.
    pub binary: &'static str,
    /// One line on what it computes.
    pub description: &'static str,
    /// Arguments for each size preset.
    pub sizes: fn(Size) -> &'static [&'static str],
    /// Arguments that select the sequential version when the binary does not accept `--seq`.
    pub seq_fallback: &'static [&'static str],
    /// Arguments that select the parallel version (most apps need none).
    pub parallel_args: &'static [&'static str],
    /// The fewest processes a parallel run needs (a master/worker run needs a worker).
    pub min_nodes: u32,
    /// Parallel runs on any number of processes give the sequential checksum. Barnes-Hut's
    /// processes build other trees than the sequential code, so its final positions differ
    /// slightly beyond one process; its checksums are compared at P = 1, and beyond within
    /// the bounds of [`crate::verify`].
    pub exact_across_processes: bool,
}

fn sor_sizes(s: Size) -> &'static [&'static str] {
    match s {
        Size::Tiny => &["-n", "32"],
        Size::Small => &["-n", "400"],
        Size::Medium => &["-n", "1024"],
        Size::Large => &["-n", "4096"],
    }
}

fn raytracer_sizes(s: Size) -> &'static [&'static str] {
    match s {
        Size::Tiny => &["--width", "48", "--height", "48", "--no-png"],
        Size::Small => &["--width", "1024", "--height", "1024", "--no-png"],
        Size::Medium => &["--width", "2048", "--height", "2048", "--no-png"],
        Size::Large => &["--width", "4096", "--height", "4096", "--no-png"],
    }
}

fn barnes_hut_sizes(s: Size) -> &'static [&'static str] {
    match s {
        Size::Tiny => &["--bodies", "128", "--tstop", "0.05"],
        Size::Small => &["--bodies", "3000"],
        Size::Medium => &["--bodies", "10000"],
        Size::Large => &["--bodies", "30000"],
    }
}

fn master_worker_sizes(s: Size) -> &'static [&'static str] {
    match s {
        Size::Tiny => &["-n", "20000", "--chunk", "2000", "--quiet"],
        Size::Small => &["-n", "6000000", "--chunk", "20000", "--quiet"],
        Size::Medium => &["-n", "20000000", "--chunk", "100000", "--quiet"],
        Size::Large => &["-n", "100000000", "--chunk", "200000", "--quiet"],
    }
}

fn uts_sizes(s: Size) -> &'static [&'static str] {
    match s {
        // The published UTS trees: the default tree (1732 nodes), T1 (4.1 million nodes,
        // geometric, depth 10), T3 (4.1 million nodes, binomial, depth 1572: the hard case for
        // work stealing) and T3L (111 million nodes, depth 17844).
        Size::Tiny => &["--sample", "default"],
        Size::Small => &["--sample", "T1"],
        Size::Medium => &["--sample", "T3"],
        Size::Large => &["--sample", "T3L"],
    }
}

const KNOWN: [AppSpec; 5] = [
    AppSpec {
        name: "sor",
        binary: "sor",
        description: "red/black successive over-relaxation (Ibis SOR reference setup)",
        sizes: sor_sizes,
        seq_fallback: &[],
        parallel_args: &[],
        min_nodes: 1,
        exact_across_processes: true,
    },
    AppSpec {
        name: "raytracer",
        binary: "raytracer",
        description: "SPD balls2 sphereflake, divide-and-conquer rendering",
        sizes: raytracer_sizes,
        seq_fallback: &[],
        parallel_args: &[],
        min_nodes: 1,
        exact_across_processes: true,
    },
    AppSpec {
        name: "barnes-hut",
        binary: "barnes-hut",
        description: "Suel/Blackston Barnes-Hut N-body (Plummer model)",
        sizes: barnes_hut_sizes,
        seq_fallback: &[],
        parallel_args: &[],
        min_nodes: 1,
        exact_across_processes: false,
    },
    AppSpec {
        name: "master-worker",
        binary: "master-worker",
        description: "task farm over ipl: count primes, one master and P-1 workers",
        sizes: master_worker_sizes,
        seq_fallback: &["--mode", "sequential"],
        parallel_args: &["--mode", "farm"],
        min_nodes: 2,
        exact_across_processes: true,
    },
    AppSpec {
        name: "uts",
        binary: "uts",
        description: "Unbalanced Tree Search on satin: count the nodes of a published UTS tree",
        sizes: uts_sizes,
        seq_fallback: &[],
        parallel_args: &[],
        min_nodes: 1,
        exact_across_processes: true,
    },
];

/// Every app the harness knows, in the order it runs them.
pub fn known() -> &'static [AppSpec] {
    &KNOWN
}

/// The app called `name`, or [`Error::UnknownApp`] listing the known ones.
pub fn find(name: &str) -> Result<&'static AppSpec> {
    KNOWN
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| Error::UnknownApp {
            name: name.to_string(),
            known: KNOWN.iter().map(|a| a.name).collect::<Vec<_>>().join(", "),
        })
}

/// What an app binary on this machine supports, read from its `--help` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppProbe {
    /// The app's name.
    pub name: String,
    /// Full path of the binary.
    pub path: PathBuf,
    /// The binary accepts `--seq` (the sequential version).
    pub seq_flag: bool,
    /// The binary accepts `--threads T`.
    pub threads_flag: bool,
    /// The binary accepts `--trace DIR`.
    #[serde(default)]
    pub trace_flag: bool,
}

/// Whether `help` mentions the option `flag` (as a whole word: `--seq` is not `--seed`).
pub fn help_mentions(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
        !word(before) && !word(after)
    })
}

/// Finds `binary` in `bin_dir`.
pub fn locate(bin_dir: &Path, binary: &str) -> Result<PathBuf> {
    let p = bin_dir.join(binary);
    if p.is_file() {
        Ok(p)
    } else {
        Err(Error::BinaryNotFound {
            program: binary.to_string(),
            dir: bin_dir.to_path_buf(),
        })
    }
}

/// Runs `BINARY --help` (bounded by `timeout`) and returns its standard output.
pub fn help_text(path: &Path, timeout: Duration) -> Result<String> {
    let cmd = CommandLine::new(path.display().to_string(), ["--help".to_string()]);
    let out = exec::run_captured(&cmd, timeout)?;
    match out.exit {
        Exit::Code(0) => Ok(out.stdout),
        other => Err(Error::io(
            format!("{} --help", path.display()),
            std::io::Error::other(format!("{other}: {}", out.stderr.trim())),
        )),
    }
}

/// Locates the app's binary in `bin_dir` and reads what it supports from `--help`.
pub fn probe(spec: &AppSpec, bin_dir: &Path) -> Result<AppProbe> {
    let path = locate(bin_dir, spec.binary)?;
    let help = help_text(&path, Duration::from_secs(30))?;
    Ok(AppProbe {
        name: spec.name.to_string(),
        seq_flag: help_mentions(&help, "--seq"),
        threads_flag: help_mentions(&help, "--threads"),
        trace_flag: help_mentions(&help, "--trace"),
        path,
    })
}

impl AppSpec {
    /// The arguments of the sequential baseline: `--seq` where the binary accepts it, else
    /// the app's fallback (for apps whose plain binary is the sequential version today, none).
    pub fn sequential_args(&self, probe: &AppProbe, params: &[String]) -> Vec<String> {
        let mut v: Vec<String> = if probe.seq_flag {
            vec!["--seq".into()]
        } else {
            self.seq_fallback.iter().map(|s| s.to_string()).collect()
        };
        v.extend(params.iter().cloned());
        v
    }

    /// The arguments of one process of a parallel run with `threads` threads per process.
    pub fn parallel_args(&self, probe: &AppProbe, params: &[String], threads: u32) -> Vec<String> {
        let mut v: Vec<String> = self.parallel_args.iter().map(|s| s.to_string()).collect();
        v.extend(params.iter().cloned());
        if probe.threads_flag {
            v.push("--threads".into());
            v.push(threads.to_string());
        }
        v
    }

    /// The preset's arguments.
    pub fn size_args(&self, size: Size) -> Vec<String> {
        (self.sizes)(size).iter().map(|s| s.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_found_as_whole_words() {
        let help = "Options:\n  --seed <SEED>\n      --threads <THREADS>\n  --sequential\n";
        assert!(!help_mentions(help, "--seq"));
        assert!(help_mentions(help, "--threads"));
        assert!(help_mentions(
            "  --seq  run the sequential version",
            "--seq"
        ));
        assert!(help_mentions("[--seq]", "--seq"));
    }

    #[test]
    fn argument_lists() {
        let spec = find("sor").unwrap();
        let mut probe = AppProbe {
            name: "sor".into(),
            path: "/x/sor".into(),
            seq_flag: true,
            threads_flag: true,
            trace_flag: true,
        };
        let p = spec.size_args(Size::Tiny);
        assert_eq!(spec.sequential_args(&probe, &p)[0], "--seq");
        assert_eq!(
            spec.parallel_args(&probe, &p, 2)[p.len()..],
            ["--threads", "2"]
        );
        probe.seq_flag = false;
        probe.threads_flag = false;
        assert_eq!(spec.sequential_args(&probe, &p), p);
        assert_eq!(spec.parallel_args(&probe, &p, 2), p);
        let mw = find("master-worker").unwrap();
        assert_eq!(
            mw.sequential_args(&probe, &[])[..],
            ["--mode", "sequential"]
        );
        assert!(find("nbody").is_err());
    }
}
