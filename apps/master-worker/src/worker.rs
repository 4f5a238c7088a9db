//! The worker side: a [`Client`] that talks to the master, and the worker loop on top of it.

use crate::error::{Context, Error, Result};
use crate::protocol::{
    reply_port_type, request_port_type, JobResult, Primitives, Reply, Request, Task, REPLY_PORT,
    REQUEST_PORT,
};
use ipl::{Ibis, NodeId, ReceivePort, SendPort};
use std::time::Duration;

/// How often a worker waiting for a reply checks that its master is still alive.
const MASTER_CHECK: Duration = Duration::from_millis(100);

/// A worker's connection to the master: a reply port of its own and a send port to the master's
/// request port. Each [`Client::request`] is one round trip.
pub struct Client {
    ibis: Ibis,
    master: NodeId,
    rank: u32,
    requests: SendPort,
    replies: ReceivePort,
    seq: u64,
}

impl Client {
    /// Creates the reply port ([`REPLY_PORT`]) and connects to the master's request port. The
    /// master's port may appear later: the connection is retried for the pool's connect timeout.
    pub fn connect(ibis: &Ibis, master: &NodeId) -> Result<Client> {
        let rank = ibis.id().rank();
        let replies = ibis
            .receive_port(&reply_port_type(), REPLY_PORT)
            .context(|| format!("worker {rank}: create reply port '{REPLY_PORT}'"))?;
        let requests = ibis
            .send_port(&request_port_type())
            .context(|| format!("worker {rank}: create request send port"))?;
        requests
            .connect(master, REQUEST_PORT)
            .context(|| format!("worker {rank}: connect to '{REQUEST_PORT}' on {master}"))?;
        tracing::debug!(worker = rank, %master, "connected to the master");
        Ok(Client {
            ibis: ibis.clone(),
            master: master.clone(),
            rank,
            requests,
            replies,
            seq: 0,
        })
    }

    /// The master this client talks to.
    pub fn master(&self) -> &NodeId {
        &self.master
    }

    /// Requests sent so far.
    pub fn requests(&self) -> u64 {
        self.seq
    }

    fn send(&mut self, result: Option<JobResult>, leaving: bool) -> Result<()> {
        let req = Request {
            worker: self.rank,
            reply_port: REPLY_PORT.to_owned(),
            seq: self.seq,
            result,
            leaving,
        };
        let mut w = self.requests.message();
        w.write(&req)
            .context(|| format!("worker {}: encode request {}", self.rank, self.seq))?;
        w.finish()
            .map_err(|e| self.lost_master(e, "send request"))?;
        Ok(())
    }

    fn lost_master(&self, e: ipl::Error, what: &str) -> Error {
        if e.is_peer_failure() || !self.ibis.pool().is_alive(&self.master) {
            Error::MasterGone {
                worker: self.rank,
                master: self.master.clone(),
                source: e,
            }
        } else {
            Error::Ipl {
                context: format!("worker {}: {what} {}", self.rank, self.seq),
                source: e,
            }
        }
    }

    /// Sends a request carrying `result` (the result of the job the previous reply carried) and
    /// waits for the reply, whose data object is checked against
    /// [`Primitives::for_request`]. Fails with [`Error::MasterGone`] when the master dies or
    /// leaves meanwhile.
    pub fn request(&mut self, result: Option<JobResult>) -> Result<Reply> {
        self.send(result, false)?;
        let mut m = loop {
            match self.replies.receive_timeout(MASTER_CHECK) {
                Ok(m) => break m,
                Err(ipl::Error::Timeout { .. }) => {
                    if let Err(e) = self
                        .ibis
                        .pool()
                        .check_alive(std::slice::from_ref(&self.master))
                    {
                        return Err(Error::MasterGone {
                            worker: self.rank,
                            master: self.master.clone(),
                            source: e,
                        });
                    }
                }
                Err(e) => return Err(self.lost_master(e, "receive reply to request")),
            }
        };
        let reply: Reply = m
            .read()
            .map_err(|e| self.lost_master(e, "read reply to request"))?;
        m.finish();
        let expected = Primitives::for_request(self.rank, self.seq);
        if reply.data != expected {
            return Err(Error::BadReply {
                worker: self.rank,
                seq: self.seq,
                got: Box::new(reply.data),
                expected: Box::new(expected),
            });
        }
        self.seq += 1;
        Ok(reply)
    }

    /// Tells the master that this worker stops, handing in `result` (the result of the job it
    /// holds, if any), and closes the connection. A job it holds without handing in its result
    /// goes to another worker.
    pub fn leave(mut self, result: Option<JobResult>) -> Result<()> {
        self.send(result, true)
    }
}

/// What one worker did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// The worker's rank.
    pub rank: u32,
    /// Replies that said "ask again" (benchmark round trips).
    pub round_trips: u64,
    /// Jobs run.
    pub jobs: u64,
    /// Primes found by this worker's jobs.
    pub primes: u64,
    /// Requests sent, the last one (answered with stop) included.
    pub requests: u64,
}

/// Runs a worker until the master says stop: sends requests, runs the jobs the replies carry,
/// and hands in their results with the next request.
pub fn run_worker(ibis: &Ibis, master: &NodeId) -> Result<WorkerReport> {
    let mut client = Client::connect(ibis, master)?;
    let mut report = WorkerReport {
        rank: ibis.id().rank(),
        ..WorkerReport::default()
    };
    let mut result = None;
    loop {
        match client.request(result.take())?.task {
            Task::Again => report.round_trips += 1,
            Task::Job(job) => {
                let r = job.run();
                report.jobs += 1;
                report.primes += r.value;
                result = Some(r);
            }
            Task::Stop => break,
        }
    }
    report.requests = client.requests();
    tracing::debug!(worker = report.rank, ?report, "stopped");
    Ok(report)
}
