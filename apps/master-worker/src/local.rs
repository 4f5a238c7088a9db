//! A whole pool as threads of this process (the in-process driver): the binary's default when
//! it is not started by a launcher.

use crate::error::{Context, Error, Result};
use crate::master::{run_master, MasterOptions, MasterReport, Progress};
use crate::protocol::MASTER_ELECTION;
use crate::worker::{run_worker, WorkerReport};
use ipl::{Config, Ibis};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The outcome of [`run_in_process`].
#[derive(Debug, Clone, PartialEq)]
pub struct InProcessRun {
    /// The master's measurements.
    pub master: MasterReport,
    /// Every worker's tally, in rank order.
    pub workers: Vec<WorkerReport>,
    /// Seconds until every node had joined and the master was elected.
    pub join_seconds: f64,
}

/// Runs a closed in-process pool of one master (this thread) and `workers` worker threads.
/// Receivers spin for `spin` before they park.
pub fn run_in_process(
    workers: u32,
    spin: Duration,
    opts: &MasterOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<InProcessRun> {
    if workers == 0 {
        return Err(Error::Param {
            name: "workers",
            reason: "an in-process pool needs at least one worker".into(),
        });
    }
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let pool = format!(
        "master-worker-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    );
    let size = workers + 1;
    let config = |pool: &str| {
        let mut c = Config::inproc(pool, size);
        c.spin = spin;
        c
    };
    let started = Instant::now();
    let ibis = Ibis::join(config(&pool)).context(|| format!("master: join pool '{pool}'"))?;
    // Elected before any worker exists, so this thread is the master.
    let master = ibis
        .pool()
        .elect(MASTER_ELECTION)
        .context(|| "master: elect".into())?;
    let threads: Vec<_> = (0..workers)
        .map(|i| {
            let cfg = config(&pool);
            let master = master.clone();
            std::thread::Builder::new()
                .name(format!("mw-worker-{i}"))
                .spawn(move || -> Result<WorkerReport> {
                    let ibis = Ibis::join(cfg).context(|| format!("worker thread {i}: join"))?;
                    run_worker(&ibis, &master)
                })
                .map_err(|e| Error::Launch {
                    context: format!("start worker thread {i}"),
                    reason: e.to_string(),
                })
        })
        .collect::<Result<_>>()?;
    ibis.pool()
        .wait_closed()
        .context(|| "master: wait for the workers to join".into())?;
    let join_seconds = started.elapsed().as_secs_f64();
    let report = run_master(&ibis, opts, progress);
    // Leave before waiting for the workers, so that after a failure they see the master gone.
    drop(ibis);
    let mut reports = Vec::with_capacity(threads.len());
    let mut first_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(Error::Launch {
                    context: "worker thread".into(),
                    reason: "panicked".into(),
                });
            }
        }
    }
    let master = report?;
    if let Some(e) = first_error {
        return Err(e);
    }
    reports.sort_by_key(|r| r.rank);
    Ok(InProcessRun {
        master,
        workers: reports,
        join_seconds,
    })
}
