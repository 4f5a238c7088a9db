//! A master/worker application on the port library: a request-rate benchmark and a task farm.
//!
//! Every node joins the pool; the node that wins the election `"master"` becomes the master
//! and owns one many-to-one receive port ([`protocol::REQUEST_PORT`]). Every other node is a
//! worker: it sends a small [`Request`] identifying itself (its rank and the name of its reply
//! port) and the master answers over a send port of its own for that worker, created when the
//! worker is first seen, with a [`Reply`] holding one value of every primitive type
//! ([`Primitives`]) and a [`Task`]:
//!
//! - [`Mode::Bench`]: workers loop request/reply for a fixed time; the master reports the
//!   requests it handles per second (the master/worker benchmark of the NioIbis study, where
//!   the old TcpIbis halved its request rate going from 8 to 16 workers).
//! - [`Mode::Farm`]: the reply carries a [`Job`] (count the primes in a range), the next
//!   request carries its result. Workers may join late and may leave or die mid-job: a job whose
//!   worker disappears goes to another worker, and every job's result is counted exactly once,
//!   so the answer equals [`sequential::farm`] and [`primes::sieve_count`].
//!
//! Three nodes as threads of this process (the in-process driver), running a small farm:
//!
//! ```
//! use ipl::{Config, Ibis};
//! use master_worker::{run, MasterOptions, Mode, Outcome};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let pool = format!("doc-{}", std::process::id());
//! let opts = MasterOptions::new(Mode::Farm { n: 10_000, chunk: 1_000 });
//!
//! // This thread joins first and wins the election, so it will be the master.
//! let ibis = Ibis::join(Config::inproc(&pool, 3))?;
//! assert_eq!(ibis.pool().elect("master")?, ibis.id());
//!
//! let workers: Vec<_> = (0..2)
//!     .map(|_| {
//!         let (pool, opts) = (pool.clone(), opts);
//!         std::thread::spawn(move || -> Result<_, master_worker::Error> {
//!             let ibis = Ibis::join(Config::inproc(pool, 3)).expect("join");
//!             run(&ibis, &opts, &mut |_| {})
//!         })
//!     })
//!     .collect();
//!
//! let Outcome::Master(report) = run(&ibis, &opts, &mut |_| {})? else {
//!     unreachable!("this node won the election")
//! };
//! let farm = report.farm.expect("farm mode");
//! assert_eq!(farm.primes, 1229); // primes below 10 000
//! assert_eq!(farm.primes, master_worker::sequential::farm(10_000, 1_000));
//!
//! let mut jobs = 0;
//! for w in workers {
//!     let Outcome::Worker(w) = w.join().unwrap()? else { unreachable!() };
//!     jobs += w.jobs;
//! }
//! assert!(jobs >= farm.jobs); // every job ran at least once
//! # Ok(())
//! # }
//! ```
//!
//! The `master-worker` binary runs the same code as one process of a pool started by
//! `ipl-run -n N -- master-worker ...`, or, when started on its own, as an in-process pool of
//! threads; `--sweep 1,2,4,8,16` measures the request rate over worker counts with `ipl-run`.

#![warn(missing_docs)]

pub mod error;
pub mod local;
mod master;
pub mod primes;
pub mod protocol;
pub mod sequential;
pub mod sweep;
mod worker;

pub use error::{Error, Result};
pub use local::{run_in_process, InProcessRun};
pub use master::{run_master, FarmReport, MasterOptions, MasterReport, Mode, Progress};
pub use protocol::{Job, JobResult, Primitives, Reply, Request, Task};
pub use worker::{run_worker, Client, WorkerReport};

use error::Context;
use ipl::Ibis;

/// What one node did: the master's measurements or a worker's tally.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// This node won the election and ran the master.
    Master(MasterReport),
    /// This node ran a worker.
    Worker(WorkerReport),
}

/// Runs this node's part: the winner of the election [`protocol::MASTER_ELECTION`] runs
/// [`run_master`] with `opts` and `progress`, every other node runs [`run_worker`] (the master
/// decides the mode, so workers ignore `opts`).
pub fn run(
    ibis: &Ibis,
    opts: &MasterOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Outcome> {
    let master = ibis
        .pool()
        .elect(protocol::MASTER_ELECTION)
        .context(|| format!("node {}: elect the master", ibis.id()))?;
    if master == ibis.id() {
        run_master(ibis, opts, progress).map(Outcome::Master)
    } else {
        run_worker(ibis, &master).map(Outcome::Worker)
    }
}
