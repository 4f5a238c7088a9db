//! The error type of the master, the workers and the command line.

use ipl::NodeId;
use std::time::Duration;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What failed, and while doing what.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call into the port library failed.
    #[error("{context}: {source}")]
    Ipl {
        /// What this crate was doing.
        context: String,
        /// The port library's error.
        #[source]
        source: ipl::Error,
    },
    /// A worker lost its master: the master died or left before telling the worker to stop.
    #[error("worker {worker}: the master {master} is gone: {source}")]
    MasterGone {
        /// The worker's rank.
        worker: u32,
        /// The master it was talking to.
        master: NodeId,
        /// How the loss was noticed.
        #[source]
        source: ipl::Error,
    },
    /// A reply did not hold the values that belong to the request it answers.
    #[error("worker {worker}: reply to request {seq} holds {got:?}, expected {expected:?}")]
    BadReply {
        /// The worker's rank.
        worker: u32,
        /// The request number.
        seq: u64,
        /// What arrived.
        got: Box<crate::protocol::Primitives>,
        /// What the master should have sent.
        expected: Box<crate::protocol::Primitives>,
    },
    /// The farm had jobs left but no worker asked for one for too long.
    #[error(
        "no worker asked for work for {waited:?} while {left} of {total} jobs were unfinished"
    )]
    NoWorkers {
        /// How long the master waited.
        waited: Duration,
        /// Unfinished jobs.
        left: u64,
        /// All jobs.
        total: u64,
    },
    /// A parameter is out of range.
    #[error("invalid parameter {name}: {reason}")]
    Param {
        /// The parameter (a command-line flag or option field).
        name: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// Starting or running a child process (the launcher of a sweep) failed.
    #[error("{context}: {reason}")]
    Launch {
        /// What was being started.
        context: String,
        /// What went wrong.
        reason: String,
    },
}

/// Adds what this crate was doing to a port-library error.
pub(crate) trait Context<T> {
    /// Wraps the error with `what`.
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for ipl::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Ipl {
            context: what(),
            source,
        })
    }
}
