//! The master side: one many-to-one request port, one send port per worker, and the two modes
//! (request-rate benchmark and task farm).

use crate::error::{Context, Error, Result};
use crate::protocol::{
    reply_port_type, request_port_type, Job, JobResult, Primitives, Reply, Request, Task,
    REQUEST_PORT,
};
use crate::sequential::{job, job_count};
use ipl::{Ibis, NodeId, PoolEvent, SendPort};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Longest the master waits for a message before it looks at pool events and clocks again.
const TICK: Duration = Duration::from_millis(50);

/// What the master hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The request-rate benchmark: every reply says "ask again" until `duration` has passed.
    Bench {
        /// How long workers keep sending requests.
        duration: Duration,
    },
    /// The task farm: count the primes below `n` in jobs of `chunk` numbers.
    Farm {
        /// Upper end (exclusive) of the range searched for primes.
        n: u64,
        /// Numbers per job.
        chunk: u64,
    },
}

/// How the master runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterOptions {
    /// What to hand out.
    pub mode: Mode,
    /// Interval of the progress reports (requests per second).
    pub report_every: Duration,
    /// The farm fails with [`Error::NoWorkers`] when, with jobs unfinished and none handed out,
    /// no request arrives for this long.
    pub worker_timeout: Duration,
    /// After the work is done, how long the master waits for pool members it has not told to
    /// stop yet (workers that have not asked since); after that it finishes without them.
    pub stop_timeout: Duration,
}

impl MasterOptions {
    /// Options for `mode` with a report every second, a 60 s worker timeout and a 30 s stop
    /// timeout.
    pub fn new(mode: Mode) -> MasterOptions {
        MasterOptions {
            mode,
            report_every: Duration::from_secs(1),
            worker_timeout: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(30),
        }
    }

    fn check(&self) -> Result<()> {
        if self.report_every.is_zero() {
            return Err(Error::Param {
                name: "report_every",
                reason: "must be positive".into(),
            });
        }
        match self.mode {
            Mode::Farm { chunk: 0, .. } => Err(Error::Param {
                name: "chunk",
                reason: "jobs must hold at least one number".into(),
            }),
            Mode::Bench { duration } if duration.is_zero() => Err(Error::Param {
                name: "seconds",
                reason: "the benchmark must run for a positive time".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// One progress report of the master, given to the progress callback.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// Time since the master started serving.
    pub elapsed_seconds: f64,
    /// Requests answered in this report's interval, per second.
    pub requests_per_second: f64,
    /// Requests answered so far.
    pub requests: u64,
    /// Workers known to the master now (connected and not stopped).
    pub workers: usize,
    /// Farm jobs finished so far (farm mode only).
    pub jobs_done: Option<u64>,
}

/// What the task farm produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FarmReport {
    /// Upper end of the range searched.
    pub n: u64,
    /// Numbers per job.
    pub chunk: u64,
    /// Number of jobs.
    pub jobs: u64,
    /// Primes below `n`: every job's result counted exactly once.
    pub primes: u64,
    /// Jobs handed to another worker because their worker died, left or disconnected.
    pub reassigned: u64,
    /// Results of jobs already counted (from a job that ran twice after a reassignment).
    pub duplicates: u64,
    /// Counted results per worker rank.
    pub jobs_per_worker: BTreeMap<u32, u64>,
}

/// What the master measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MasterReport {
    /// `bench` or `farm`.
    pub mode: &'static str,
    /// Requests answered with work (benchmark: "ask again" before the deadline; farm: a job).
    pub requests: u64,
    /// Time from the start of serving until the benchmark deadline or the last farm result.
    pub seconds: f64,
    /// `requests / seconds`.
    pub requests_per_second: f64,
    /// Requests per second in each report interval (and in the last, partial interval when it
    /// lasted at least half an interval).
    pub rates: Vec<f64>,
    /// Requests answered with work, per worker rank.
    pub requests_per_worker: BTreeMap<u32, u64>,
    /// The farm's outcome (farm mode only).
    pub farm: Option<FarmReport>,
    /// Pool members that were never told to stop because they did not ask before the stop
    /// timeout (normally empty).
    pub unstopped: Vec<u32>,
}

struct Served {
    port: SendPort,
    job: Option<u64>,
    parked: Option<u64>,
}

/// The farm's bookkeeping, in memory that grows with the jobs out at once, not with the
/// number of jobs: jobs are made when handed out (in order), and a job is done unless it is
/// fresh (never handed out) or open (handed out, no result yet).
struct Farm {
    n: u64,
    chunk: u64,
    total: u64,
    /// Jobs `next_fresh..total` were never handed out.
    next_fresh: u64,
    /// Handed out without a result yet.
    open: HashSet<u64>,
    /// Open jobs whose worker went, to be handed out again first.
    queue: VecDeque<u64>,
    left: u64,
    primes: u64,
    reassigned: u64,
    duplicates: u64,
    per_worker: BTreeMap<u32, u64>,
}

impl Farm {
    fn new(n: u64, chunk: u64) -> Farm {
        let total = job_count(n, chunk);
        Farm {
            n,
            chunk,
            total,
            next_fresh: 0,
            open: HashSet::new(),
            queue: VecDeque::new(),
            left: total,
            primes: 0,
            reassigned: 0,
            duplicates: 0,
            per_worker: BTreeMap::new(),
        }
    }

    fn is_done(&self, j: u64) -> bool {
        j < self.next_fresh && !self.open.contains(&j)
    }

    fn next_job(&mut self) -> Option<Job> {
        while let Some(j) = self.queue.pop_front() {
            if !self.is_done(j) {
                return Some(job(j, self.n, self.chunk));
            }
        }
        if self.next_fresh < self.total {
            let j = self.next_fresh;
            self.next_fresh += 1;
            self.open.insert(j);
            return Some(job(j, self.n, self.chunk));
        }
        None
    }

    /// Puts an unfinished job back at the head of the queue.
    fn requeue(&mut self, j: u64) {
        if !self.is_done(j) && !self.queue.contains(&j) {
            self.reassigned += 1;
            self.queue.push_front(j);
        }
    }
}

struct Master {
    ibis: Ibis,
    me: NodeId,
    workers: HashMap<NodeId, Served>,
    stopped: HashSet<NodeId>,
    farm: Option<Farm>,
    work_over: bool,
    requests: u64,
    window: u64,
    per_worker: BTreeMap<u32, u64>,
    last_request: Instant,
    /// A reply the port library refused for what it is (larger than the message limit, say):
    /// no worker can be served, so the master stops with this error.
    fatal: Option<Error>,
}

/// Runs the master on `ibis` until the work is done and every pool member has been told to stop
/// (or has gone). `progress` is called every [`MasterOptions::report_every`] while the work
/// lasts. In a closed pool the master first waits for every member to join.
pub fn run_master(
    ibis: &Ibis,
    opts: &MasterOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<MasterReport> {
    opts.check()?;
    let (gone_tx, gone_rx) = crossbeam_channel::unbounded::<(NodeId, Option<String>)>();
    let rp = ibis
        .receive_port_builder(&request_port_type(), REQUEST_PORT)
        .on_disconnect(move |n, e| {
            let _ = gone_tx.send((n.clone(), e.map(|e| e.to_string())));
        })
        .create()
        .context(|| format!("master: create request port '{REQUEST_PORT}'"))?;
    let events = ibis.pool().subscribe();
    if ibis.pool().size().is_some() {
        ibis.pool()
            .wait_closed()
            .context(|| "master: wait for the pool to fill".into())?;
    }
    let mut m = Master {
        ibis: ibis.clone(),
        me: ibis.id(),
        workers: HashMap::new(),
        stopped: HashSet::new(),
        farm: match opts.mode {
            Mode::Farm { n, chunk } => Some(Farm::new(n, chunk)),
            Mode::Bench { .. } => None,
        },
        work_over: false,
        requests: 0,
        window: 0,
        per_worker: BTreeMap::new(),
        last_request: Instant::now(),
        fatal: None,
    };
    let start = Instant::now();
    let mut rates = Vec::new();
    let mut window_start = start;
    let mut next_report = start + opts.report_every;
    let mut work_end = None;
    tracing::info!(master = %m.me, mode = ?opts.mode, "serving");
    let unstopped = loop {
        if let Some(e) = m.fatal.take() {
            return Err(e);
        }
        while let Ok(ev) = events.try_recv() {
            match ev {
                PoolEvent::Died(n) => m.drop_worker(&n, "died"),
                PoolEvent::Left(n) => m.drop_worker(&n, "left the pool"),
                PoolEvent::Joined(n) => tracing::debug!(node = %n, "joined"),
                PoolEvent::Closed(_) => {}
            }
        }
        while let Ok((n, why)) = gone_rx.try_recv() {
            let why = match why {
                Some(e) => format!("lost its connection ({e})"),
                None => "disconnected".into(),
            };
            m.drop_worker(&n, &why);
        }
        let now = Instant::now();
        if !m.work_over {
            if now >= next_report {
                let secs = now.duration_since(window_start).as_secs_f64();
                let rate = m.window as f64 / secs;
                rates.push(rate);
                progress(&Progress {
                    elapsed_seconds: now.duration_since(start).as_secs_f64(),
                    requests_per_second: rate,
                    requests: m.requests,
                    workers: m.workers.len(),
                    jobs_done: m.farm.as_ref().map(|f| f.total - f.left),
                });
                m.window = 0;
                window_start = now;
                // On a fixed schedule (no drift), skipping intervals that were missed.
                while next_report <= now {
                    next_report += opts.report_every;
                }
            }
            let over = match (&m.farm, opts.mode) {
                (Some(f), _) => f.left == 0,
                (None, Mode::Bench { duration }) => now.duration_since(start) >= duration,
                (None, Mode::Farm { .. }) => unreachable!("a farm has its state"),
            };
            if over {
                let tail = now.duration_since(window_start);
                if tail >= opts.report_every / 2 {
                    rates.push(m.window as f64 / tail.as_secs_f64());
                }
                m.work_over = true;
                work_end = Some(now);
                m.stop_parked();
                tracing::info!(requests = m.requests, "work done; stopping the workers");
            } else if let Some(f) = &m.farm {
                let idle = now.duration_since(m.last_request);
                let handed_out = m.workers.values().any(|w| w.job.is_some());
                if !handed_out && idle >= opts.worker_timeout {
                    return Err(Error::NoWorkers {
                        waited: idle,
                        left: f.left,
                        total: f.total,
                    });
                }
            }
        }
        if let Some(end) = work_end {
            let waiting = m.unstopped_members();
            if waiting.is_empty() {
                break waiting;
            }
            if now.duration_since(end) >= opts.stop_timeout {
                tracing::warn!(
                    ?waiting,
                    "members never asked to be stopped within {:?}; finishing without them",
                    opts.stop_timeout
                );
                break waiting;
            }
        }
        let mut wait = TICK;
        if !m.work_over {
            wait = wait.min(next_report.saturating_duration_since(now));
            if let Mode::Bench { duration } = opts.mode {
                wait = wait.min((start + duration).saturating_duration_since(now));
            }
        }
        match rp.receive_timeout(wait) {
            Ok(msg) => m.handle(msg)?,
            Err(ipl::Error::Timeout { .. }) => {}
            Err(e) => {
                return Err(Error::Ipl {
                    context: format!("master: receive on '{REQUEST_PORT}'"),
                    source: e,
                })
            }
        }
    };
    let end = work_end.expect("the loop ends after the work");
    let seconds = match opts.mode {
        Mode::Bench { duration } => duration.as_secs_f64(),
        Mode::Farm { .. } => end.duration_since(start).as_secs_f64(),
    };
    let farm = m.farm.take().map(|f| {
        let (n, chunk) = match opts.mode {
            Mode::Farm { n, chunk } => (n, chunk),
            Mode::Bench { .. } => unreachable!("only a farm has farm state"),
        };
        FarmReport {
            n,
            chunk,
            jobs: f.total,
            primes: f.primes,
            reassigned: f.reassigned,
            duplicates: f.duplicates,
            jobs_per_worker: f.per_worker,
        }
    });
    Ok(MasterReport {
        mode: match opts.mode {
            Mode::Bench { .. } => "bench",
            Mode::Farm { .. } => "farm",
        },
        requests: m.requests,
        seconds,
        requests_per_second: if seconds > 0.0 {
            m.requests as f64 / seconds
        } else {
            0.0
        },
        rates,
        requests_per_worker: m.per_worker,
        farm,
        unstopped: unstopped.iter().map(NodeId::rank).collect(),
    })
}

fn send_reply(port: &SendPort, data: Primitives, task: Task) -> ipl::Result<()> {
    let mut w = port.message();
    w.write(&Reply { data, task })?;
    w.finish()?;
    Ok(())
}

impl Master {
    /// Whether a reply to worker `n` that failed with `e` means the worker cannot be reached
    /// (it is then dropped and its job handed on). A reply refused for what it is (over the
    /// message limit, not encodable) fails every worker alike: that is kept as the master's
    /// fatal error.
    fn unreachable(&mut self, n: &NodeId, e: ipl::Error) -> bool {
        if matches!(
            e,
            ipl::Error::MessageTooLarge { .. }
                | ipl::Error::Serialize(_)
                | ipl::Error::NotAllowed { .. }
        ) {
            self.fatal.get_or_insert(Error::Ipl {
                context: format!("master: reply to worker {n}"),
                source: e,
            });
            false
        } else {
            tracing::warn!(worker = %n, "cannot reply: {e}");
            true
        }
    }

    /// Members of the pool (this node aside) that have not been told to stop.
    fn unstopped_members(&self) -> Vec<NodeId> {
        self.ibis
            .pool()
            .members()
            .into_iter()
            .filter(|n| *n != self.me && !self.stopped.contains(n))
            .collect()
    }

    /// Forgets a worker that died, left or disconnected; its unfinished job goes back to the
    /// queue and to a waiting worker.
    fn drop_worker(&mut self, n: &NodeId, why: &str) {
        let Some(w) = self.workers.remove(n) else {
            return;
        };
        if self.stopped.contains(n) {
            tracing::debug!(worker = %n, "{why} after stopping");
        } else {
            tracing::info!(worker = %n, "{why}");
        }
        if let (Some(j), Some(f)) = (w.job, self.farm.as_mut()) {
            if !f.is_done(j) {
                tracing::info!(worker = %n, job = j, "handing its job to another worker");
                f.requeue(j);
                self.dispatch_parked();
            }
        }
    }

    /// Gives queued jobs to workers waiting for one.
    fn dispatch_parked(&mut self) {
        let Some(f) = self.farm.as_mut() else { return };
        let parked: Vec<NodeId> = self
            .workers
            .iter()
            .filter(|(_, w)| w.parked.is_some())
            .map(|(n, _)| n.clone())
            .collect();
        let mut failed = Vec::new();
        for n in parked {
            let Some(job) = f.next_job() else { break };
            let w = self.workers.get_mut(&n).expect("parked worker is known");
            let seq = w.parked.take().expect("worker is parked");
            w.job = Some(job.id);
            if let Err(e) = send_reply(
                &w.port,
                Primitives::for_request(n.rank(), seq),
                Task::Job(job),
            ) {
                failed.push((n, e));
            } else {
                self.requests += 1;
                self.window += 1;
                *self.per_worker.entry(n.rank()).or_default() += 1;
            }
        }
        for (n, e) in failed {
            if self.unreachable(&n, e) {
                self.drop_worker(&n, "cannot be reached");
            }
        }
    }

    /// Tells every worker waiting for a job that the farm is over.
    fn stop_parked(&mut self) {
        let parked: Vec<(NodeId, u64)> = self
            .workers
            .iter()
            .filter_map(|(n, w)| w.parked.map(|s| (n.clone(), s)))
            .collect();
        for (n, seq) in parked {
            let w = self.workers.get_mut(&n).expect("parked worker is known");
            w.parked = None;
            if let Err(e) = send_reply(&w.port, Primitives::for_request(n.rank(), seq), Task::Stop)
            {
                self.unreachable(&n, e);
            }
            self.stopped.insert(n);
        }
    }

    /// Counts a job result once; later results of the same job are duplicates.
    fn record(&mut self, from: &NodeId, r: JobResult) {
        let Some(f) = self.farm.as_mut() else {
            tracing::warn!(worker = %from, "job result in benchmark mode ignored");
            return;
        };
        if r.job >= f.next_fresh {
            tracing::warn!(worker = %from, job = r.job, "result of a job never handed out ignored");
            return;
        }
        let range = job(r.job, f.n, f.chunk);
        if r.value > range.end - range.start {
            // A worker that misbehaves, or that another program version runs: the count would
            // be wrong, and could overflow the total. The job stays with the worker, which
            // gives it up (to be handed out again) with its next request.
            tracing::warn!(
                worker = %from,
                job = r.job,
                value = r.value,
                "result of more primes than the job's {} numbers ignored",
                range.end - range.start
            );
            return;
        }
        if let Some(w) = self.workers.get_mut(from) {
            if w.job == Some(r.job) {
                w.job = None;
            }
        }
        if !f.open.remove(&r.job) {
            f.duplicates += 1;
            return;
        }
        f.left -= 1;
        f.primes += r.value;
        *f.per_worker.entry(from.rank()).or_default() += 1;
    }

    fn handle(&mut self, mut msg: ipl::ReadMessage) -> Result<()> {
        let origin = msg.origin().clone();
        let req: Request = match msg.read() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(from = %origin, "undecodable request ignored: {e}");
                return Ok(());
            }
        };
        msg.finish();
        if req.worker != origin.rank() {
            tracing::warn!(
                from = %origin,
                "request claims to come from worker {}; ignored",
                req.worker
            );
            return Ok(());
        }
        self.last_request = Instant::now();
        if let Some(r) = req.result {
            self.record(&origin, r);
        }
        if req.leaving {
            self.stopped.insert(origin.clone());
            self.drop_worker(&origin, "left the farm");
            return Ok(());
        }
        if !self.ibis.pool().is_alive(&origin) {
            // A request still buffered when its sender died or left: the result counts, but
            // nobody is there to answer.
            self.drop_worker(&origin, "is gone");
            return Ok(());
        }
        if !self.workers.contains_key(&origin) {
            let port = self
                .ibis
                .send_port(&reply_port_type())
                .context(|| format!("master: create send port for worker {origin}"))?;
            if let Err(e) = port.connect(&origin, &req.reply_port) {
                tracing::warn!(worker = %origin, "cannot connect to its reply port: {e}");
                return Ok(());
            }
            tracing::debug!(worker = %origin, "new worker");
            self.stopped.remove(&origin);
            self.workers.insert(
                origin.clone(),
                Served {
                    port,
                    job: None,
                    parked: None,
                },
            );
        }
        let task = match (&mut self.farm, self.work_over) {
            (_, true) => Task::Stop,
            (None, false) => Task::Again,
            (Some(f), false) => {
                let w = self.workers.get_mut(&origin).expect("worker is known");
                if let Some(held) = w.job.take() {
                    // It asks for work without handing in the job it holds.
                    f.requeue(held);
                }
                match f.next_job() {
                    Some(job) => {
                        w.job = Some(job.id);
                        Task::Job(job)
                    }
                    None => {
                        // Jobs are out with other workers; one of them may yet fail.
                        w.parked = Some(req.seq);
                        return Ok(());
                    }
                }
            }
        };
        let stop = task == Task::Stop;
        let w = self.workers.get(&origin).expect("worker is known");
        let data = Primitives::for_request(origin.rank(), req.seq);
        if let Err(e) = send_reply(&w.port, data, task) {
            if self.unreachable(&origin, e) {
                self.drop_worker(&origin, "cannot be reached");
            }
            return Ok(());
        }
        if stop {
            self.stopped.insert(origin);
        } else {
            self.requests += 1;
            self.window += 1;
            *self.per_worker.entry(origin.rank()).or_default() += 1;
        }
        Ok(())
    }
}
