//! The bench harness: runs the platform's workloads (`sor`, `raytracer`, `barnes-hut`,
//! `master-worker`, `uts`) and micro-benchmarks (`ipl-bench`, `satin-bench`, `bsp-bench`) over
//! process and thread counts, records every run in a result set under `results/`, computes
//! speedup against the sequential baseline measured in the same sweep, and draws speedup,
//! efficiency, per-phase and latency charts (PNG and SVG, with a bundled font).
//!
//! # Command line
//!
//! ```text
//! bench-harness quick                      # every app small, seq + P=1,2 x T=1,2, micro-benchmarks
//! bench-harness run --apps sor,raytracer --nodes 1,2,4,8 --threads 1,2 --repeat 5 --size medium \
//!                   [--launcher local|mpirun|srun|hostfile] [--clusters 2 --wan-latency 20ms]
//! bench-harness plot results/<set>          # redraw charts and tables from the stored runs
//! bench-harness study-chart study.csv       # chart of `satin-dist-bench study --csv` (see [`study`])
//! bench-harness timeline DIR                # merge a run's traces (IPL_TRACE=DIR), draw them
//! ```
//!
//! The binaries are taken from the directory of the harness's own executable (so
//! `cargo build --release --workspace --bins && target/release/bench-harness quick` works),
//! or from `--bin-dir`. Apps follow `apps/README.md`: `APP --seq` is the sequential baseline
//! (binaries that do not accept `--seq` yet run their plain, sequential version instead, which
//! the set's notes record), the parallel version runs under the launcher, and rank 0 prints one
//! JSON result line.
//!
//! Every run's answer is checked against the sequential baseline of the same sweep
//! ([`verify`]): a run with another answer is an error, left out of every figure. `run` and
//! `quick` exit with status 0 when every run succeeded with the right answer, 1 when one
//! failed, timed out or gave another answer (the set is kept), 2 for arguments they cannot
//! serve, and 130 when stopped by Ctrl-C, SIGTERM or SIGHUP (the current run is killed with
//! every process it started, and the set is marked interrupted). `plot` checks a set's
//! records before drawing and refuses an incomplete set rather than rewrite it with less.
//!
//! # A result set
//!
//! `results/<name>/` holds `meta.json` (machine, revision, configuration, the harness's command
//! line, the apps' binaries and parameters), `runs.jsonl` and `runs.csv` (one record per run,
//! appended as each run ends, so Ctrl-C keeps what was measured), `micro.jsonl` and `micro/`
//! (micro-benchmark output), `logs/` (every run's standard output and error), and what `plot`
//! derives: `summary.csv`, `summary.json`, `phases.csv`, `latency.csv`, `commands.txt`,
//! `README.md` and `charts/`. See [`store`] and [`report`].
//!
//! # Tests
//!
//! `tests/harness.rs` drives the `bench-harness` binary on the real app binaries at the `tiny`
//! size. It finds them in `target/<profile>/` (the parent of the test executable's `deps/`)
//! and first runs `cargo build -p sor -p raytracer -p barnes-hut -p ipl --bins` for that
//! profile, a no-op when they are up to date. `tests/faults.rs` drives it on stand-in apps
//! (shell scripts) through wrong answers, failing runs, signals and damaged sets;
//! `tests/cluster.rs` runs the workloads over network namespaces, `mpirun` and `srun`, and
//! fails instead of skipping when one is missing under `CI=true`; `tests/results_readme.rs`
//! checks `results/README.md` against the committed sets.
//!
//! # Example
//!
//! Summarizing runs and drawing a speedup chart from the library:
//!
//! ```
//! use bench_harness::analysis::summarize;
//! use bench_harness::chart::{self, Metric, ScalingChart};
//! use bench_harness::store::{RunRecord, Version};
//!
//! let runs = vec![
//!     RunRecord::ok("sor", Version::Sequential, 1, 1, 8.0),
//!     RunRecord::ok("sor", Version::Parallel, 2, 1, 4.4),
//!     RunRecord::ok("sor", Version::Parallel, 4, 1, 2.5),
//! ];
//! let points = summarize(&runs, 4);
//! assert_eq!(points[2].label(), "P=4 T=1");
//! assert!((points[2].speedup.unwrap() - 3.2).abs() < 1e-9);
//! assert!((points[2].efficiency.unwrap() - 0.8).abs() < 1e-9);
//!
//! // A scratch directory, removed with the charts when dropped.
//! let tmp = testkit::scratch_dir("bench-harness-doc");
//! let dir = tmp.path();
//! let speedup = ScalingChart {
//!     app: "sor",
//!     subtitle: "sor -n 1024 · 4 cores".into(),
//!     points: points.iter().filter(|p| p.version == Version::Parallel).collect(),
//!     threads: vec![1],
//!     max_nodes: 4,
//!     cores: 4,
//!     metric: Metric::Speedup,
//!     empty_reason: String::new(),
//! };
//! let files = chart::scaling(&speedup, &dir.join("speedup-sor"))?;
//! assert!(files.iter().all(|f| f.is_file()));
//! let svg = std::fs::read_to_string(&files[1])?;
//! assert!(svg.contains("speedup over the sequential version"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
pub mod apps;
pub mod chart;
pub mod cli;
pub mod config;
pub mod error;
pub mod exec;
pub mod input;
pub mod launch;
pub mod machine;
pub mod micro;
pub mod reference;
pub mod report;
pub mod runner;
pub mod store;
pub mod study;
pub mod timeline;
pub mod verify;

pub use error::{Error, Result};

/// The programs of the repository's README ("Writing your own application"), compiled and
/// run as doctests so that the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;
