//! Connection setup between ports: the request a send port sends and the receive port's reply,
//! which the drivers carry as opaque bytes.

use crate::node::NodeId;
use crate::port_type::PortType;
use serde::{Deserialize, Serialize};

/// Sent by a send port to the receive port it connects to (inside the driver's setup frame).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectRequest {
    /// The sending node.
    pub from: NodeId,
    /// Identifier of the send port, unique on its node.
    pub send_port: u64,
    /// Name of the receive port wanted.
    pub port: String,
    /// The send port's type.
    pub port_type: PortType,
}

/// The receive side's answer to a [`ConnectRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ConnectReply {
    /// Connected; messages may follow. Carries the largest message the receiving node accepts,
    /// so that the sender refuses larger ones instead of sending what would be dropped.
    Accepted {
        /// The receiver's limit in bytes.
        max_message: u64,
    },
    /// No receive port of that name (yet): the sender retries until its timeout.
    NoSuchPort,
    /// The types differ; carries the receive port's type.
    TypeMismatch(PortType),
    /// Refused by the connection upcall or the connection pattern, with the reason.
    Refused(String),
}

impl ConnectRequest {
    /// The request's bytes.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("connect requests always serialize")
    }
}

impl ConnectReply {
    /// The reply's bytes.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("connect replies always serialize")
    }

    /// Reads a reply; `Err` with a reason when the bytes are not one.
    pub fn decode(b: &[u8]) -> Result<ConnectReply, String> {
        postcard::from_bytes(b).map_err(|e| format!("bad connect reply: {e}"))
    }
}
