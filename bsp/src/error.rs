//! The error type of every fallible call of the bulk-synchronous layer.

use std::time::Duration;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, always with the process (`pid`) that reports it and, where one applies, the
/// superstep it happened in and the peer involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The port library failed (joining, creating ports, connecting, sending).
    #[error("pid {pid}, superstep {superstep}: {what}: {source}")]
    Ipl {
        /// The process reporting the error.
        pid: usize,
        /// The superstep it was in.
        superstep: u64,
        /// What the layer was doing.
        what: String,
        /// The port library's error.
        #[source]
        source: Box<ipl::Error>,
    },
    /// Another process died or left while this one still needed it.
    #[error("pid {pid}, superstep {superstep}: process {peer} ({node}) {} during {during}", if *.died { "died" } else { "left the pool" })]
    PeerGone {
        /// The process reporting the error.
        pid: usize,
        /// The superstep it was in.
        superstep: u64,
        /// The process that is gone.
        peer: usize,
        /// The gone process's node, as the port library names it.
        node: String,
        /// True when it died (crashed, killed, or stopped answering); false when it left.
        died: bool,
        /// The operation that was waiting.
        during: String,
    },
    /// A process id out of range was given.
    #[error("pid {pid}: {what} names pid {bad}, but there are only {nprocs} processes")]
    BadPid {
        /// The process reporting the error.
        pid: usize,
        /// The call and argument at fault.
        what: &'static str,
        /// The pid that was given.
        bad: usize,
        /// The number of processes.
        nprocs: usize,
    },
    /// `recv` asked for a different type than the next packet has. The packet stays unread.
    #[error("pid {pid}, superstep {superstep}: the next packet from pid {src} is {sent}, but {asked} was asked for")]
    TypeMismatch {
        /// The process reporting the error.
        pid: usize,
        /// The superstep the packet is read in.
        superstep: u64,
        /// The sender of the packet.
        src: usize,
        /// What the sender sent (a type name, or a slice of a number type).
        sent: String,
        /// What the reader asked for.
        asked: String,
    },
    /// A packet or payload could not be serialized.
    #[error("pid {pid}, superstep {superstep}: cannot serialize {type_name}: {reason}")]
    Encode {
        /// The process reporting the error.
        pid: usize,
        /// The superstep.
        superstep: u64,
        /// The type being serialized.
        type_name: &'static str,
        /// Why.
        reason: String,
    },
    /// Received bytes could not be decoded (a corrupt message, or a type that serializes
    /// differently on the sender, e.g. another program version).
    #[error("pid {pid}, superstep {superstep}: bad data from pid {src}: {reason}")]
    Decode {
        /// The process reporting the error.
        pid: usize,
        /// The superstep.
        superstep: u64,
        /// Who sent the data.
        src: usize,
        /// What did not decode.
        reason: String,
    },
    /// Processes called different collective operations (or `sync`) at the same point, or with
    /// inconsistent arguments.
    #[error("pid {pid}, operation #{seq}: this process called {mine}, but pid {peer} {theirs}")]
    CollectiveMismatch {
        /// The process reporting the error.
        pid: usize,
        /// The sequence number of the operation (every `sync` and collective counts one).
        seq: u64,
        /// What this process called.
        mine: String,
        /// The peer whose message did not match.
        peer: usize,
        /// What the peer did.
        theirs: String,
    },
    /// A put or get on a registered array failed (unknown registration, element type, bounds).
    #[error("pid {pid}, superstep {superstep}: {what}")]
    Drma {
        /// The process reporting the error.
        pid: usize,
        /// The superstep of the put or get.
        superstep: u64,
        /// What failed, naming the processes, registration and range.
        what: String,
    },
    /// A call was used wrongly (bad root, bad lengths, a handle of another registration).
    #[error("pid {pid}: {what}")]
    Usage {
        /// The process reporting the error.
        pid: usize,
        /// What was wrong.
        what: String,
    },
    /// A wait ran past the configured [`Options::sync_timeout`](crate::Options::sync_timeout).
    #[error("pid {pid}, superstep {superstep}: {during} did not complete within {waited:?}")]
    Timeout {
        /// The process reporting the error.
        pid: usize,
        /// The superstep.
        superstep: u64,
        /// The operation that was waiting.
        during: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The closure of one process of [`run_local`](crate::run_local) panicked.
    #[error("pid {pid} panicked: {message}")]
    Panicked {
        /// The process whose closure panicked.
        pid: usize,
        /// The panic message.
        message: String,
    },
    /// Invalid options or pool.
    #[error("bsp configuration: {0}")]
    Config(String),
}

impl Error {
    /// True when the error only reports that another process is gone; [`run_local`] prefers the
    /// error that caused the departure.
    ///
    /// [`run_local`]: crate::run_local
    pub fn is_peer_failure(&self) -> bool {
        match self {
            Error::PeerGone { .. } => true,
            Error::Ipl { source, .. } => source.is_peer_failure(),
            _ => false,
        }
    }

    /// The process that reported the error, where known.
    pub fn pid(&self) -> Option<usize> {
        match self {
            Error::Ipl { pid, .. }
            | Error::PeerGone { pid, .. }
            | Error::BadPid { pid, .. }
            | Error::TypeMismatch { pid, .. }
            | Error::Encode { pid, .. }
            | Error::Decode { pid, .. }
            | Error::CollectiveMismatch { pid, .. }
            | Error::Drma { pid, .. }
            | Error::Usage { pid, .. }
            | Error::Timeout { pid, .. }
            | Error::Panicked { pid, .. } => Some(*pid),
            Error::Config(_) => None,
        }
    }
}
