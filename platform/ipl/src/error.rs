//! The error type of every fallible call in the port library.

use crate::node::NodeId;
use std::time::Duration;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with enough context to act on it: which node, which port, which types.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value (environment variable or builder argument) is invalid.
    #[error("invalid configuration: {key}: {reason}")]
    Config {
        /// The variable or option at fault, e.g. `IPL_POOL_SIZE`.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// An operating-system level I/O error, with what was being done when it happened.
    #[error("{context}: {source}")]
    Io {
        /// What the library was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The registry refused a request or could not be reached.
    #[error("registry: {0}")]
    Registry(String),
    /// The peer failed the shared-secret handshake, or we failed the peer's.
    #[error("authentication with {peer} failed: {reason}")]
    Auth {
        /// Address or node of the peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// Two ports of different types were connected.
    #[error("port type mismatch connecting to port '{port}' on {node}: sender has {sender}, receiver has {receiver}")]
    TypeMismatch {
        /// The receiving node.
        node: String,
        /// The receive port's name.
        port: String,
        /// The send port's type.
        sender: String,
        /// The receive port's type.
        receiver: String,
    },
    /// The named receive port does not exist on the node (after retrying until the connect timeout).
    #[error("no receive port '{port}' on {node} (gave up after {waited:?})")]
    UnknownPort {
        /// The node that was asked.
        node: String,
        /// The missing port's name.
        port: String,
        /// How long the connect retried.
        waited: Duration,
    },
    /// The receiving side refused the connection (connection upcall, or its connection pattern).
    #[error("connection to port '{port}' on {node} refused: {reason}")]
    Refused {
        /// The receiving node.
        node: String,
        /// The receive port's name.
        port: String,
        /// The reason it gave.
        reason: String,
    },
    /// A second receive port with the same name was created on one node.
    #[error("a receive port named '{0}' already exists on this node")]
    DuplicatePort(String),
    /// The operation is not allowed by the port's type (connection pattern or serialization level).
    #[error("not allowed by port type {port_type}: {what}")]
    NotAllowed {
        /// The port type.
        port_type: String,
        /// What was attempted.
        what: String,
    },
    /// A send port with no connections was asked to send.
    #[error("send port {0} has no connections")]
    NotConnected(u64),
    /// A message could not be decoded: the reader asked for something the writer did not write,
    /// or the bytes are corrupt.
    #[error("cannot decode message from {origin}: {reason}")]
    Decode {
        /// Who sent the message.
        origin: String,
        /// What did not match.
        reason: String,
    },
    /// An object could not be serialized.
    #[error("cannot serialize object: {0}")]
    Serialize(String),
    /// A wait ran out of time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// A message is larger than the limit of the sending node or of a receiving node
    /// (`IPL_MAX_MESSAGE`); nothing was sent.
    #[error("a message of {len} bytes exceeds the limit of {limit} bytes of {whose} (IPL_MAX_MESSAGE); nothing was sent")]
    MessageTooLarge {
        /// The message's size in bytes.
        len: u64,
        /// The limit it exceeds.
        limit: u64,
        /// Whose limit: this node, or the receive port and node that announced it.
        whose: String,
    },
    /// A connection was lost while it was in use.
    #[error("connection with {peer} lost: {reason}")]
    ConnectionLost {
        /// The node at the other end.
        peer: String,
        /// What happened.
        reason: String,
    },
    /// A member of the pool died (its process ended or it stopped sending heartbeats).
    #[error("node {0} died")]
    NodeDied(NodeId),
    /// A member of the pool left while it was still needed.
    #[error("node {0} left the pool")]
    NodeLeft(NodeId),
    /// The port or node was closed while the call was waiting.
    #[error("{0} is closed")]
    Closed(String),
    /// A receive on a port whose unfinished message the calling thread itself still holds (or
    /// from a disconnection upcall, which runs inside a receive of that port): the port hands
    /// out one message at a time, so the call would wait for ever.
    #[error("receive on port '{port}' of {node}: this thread still holds an unfinished message of that port (or is inside its disconnection upcall); finish or drop the message first")]
    HeldByCaller {
        /// The receive port's name.
        port: String,
        /// The node that owns the port.
        node: String,
    },
}

impl Error {
    /// Wraps an I/O error with what the library was doing.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A configuration error for `key`.
    pub fn config(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// True when this error means a peer node is gone (died or left), as opposed to a local misuse.
    pub fn is_peer_failure(&self) -> bool {
        matches!(
            self,
            Error::NodeDied(_) | Error::NodeLeft(_) | Error::ConnectionLost { .. }
        )
    }
}

/// The text of a panic's payload (a `&str` or a `String`, as `panic!` makes them), for an
/// error or a log line that reports a panic caught in user code.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(panic payload is not text)".to_string()
    }
}

/// [`panic_message`] of a caught panic's payload, which is then dropped where a payload whose
/// own `Drop` panics cannot unwind further (it would end the thread, or abort the process if
/// it is already unwinding).
pub fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = panic_message(&*payload);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
    message
}
