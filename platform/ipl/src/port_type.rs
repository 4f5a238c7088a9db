//! Port types: the capabilities two ports must agree on before they connect.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How many send ports and receive ports a connection pattern allows on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Connection {
    /// One send port to one receive port.
    OneToOne,
    /// A send port may connect to several receive ports (multicast); each receiver has one sender.
    OneToMany,
    /// Several send ports may connect to one receive port; each send port has one receiver.
    ManyToOne,
    /// Both sides may have several connections.
    ManyToMany,
}

impl Connection {
    /// Whether a send port of this pattern may be connected to more than one receive port.
    pub fn multicast(self) -> bool {
        matches!(self, Connection::OneToMany | Connection::ManyToMany)
    }

    /// Whether a receive port of this pattern may accept more than one send port.
    pub fn many_senders(self) -> bool {
        matches!(self, Connection::ManyToOne | Connection::ManyToMany)
    }
}

/// How a receive port delivers messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Receive {
    /// The application calls `receive`, `receive_timeout` or `poll`.
    Explicit,
    /// A handler runs for each message, at most one at a time per port, in order per connection.
    Upcall,
}

/// What a message on this port may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Serialization {
    /// Byte buffers only.
    Bytes,
    /// Bytes, primitives and slices of primitives.
    Data,
    /// Everything of `Data` plus serde objects.
    Object,
}

/// A set of capabilities, compared when a send port connects to a receive port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortType {
    /// The connection pattern.
    pub connection: Connection,
    /// The receive mode.
    pub receive: Receive,
    /// The serialization level.
    pub serialization: Serialization,
    /// Whether the receiver observes connections and disconnections (and may refuse connections).
    pub connection_upcalls: bool,
}

impl PortType {
    /// A builder with the defaults: many-to-one, explicit receive, object serialization.
    pub fn builder() -> PortTypeBuilder {
        PortTypeBuilder {
            ty: PortType {
                connection: Connection::ManyToOne,
                receive: Receive::Explicit,
                serialization: Serialization::Object,
                connection_upcalls: false,
            },
        }
    }
}

impl fmt::Display for PortType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}/{:?}/{:?}{}",
            self.connection,
            self.receive,
            self.serialization,
            if self.connection_upcalls {
                "/ConnectionUpcalls"
            } else {
                ""
            }
        )
    }
}

/// Builds a [`PortType`].
#[derive(Debug, Clone)]
pub struct PortTypeBuilder {
    ty: PortType,
}

impl PortTypeBuilder {
    /// Sets the connection pattern.
    pub fn connection(mut self, c: Connection) -> Self {
        self.ty.connection = c;
        self
    }

    /// Sets the receive mode.
    pub fn receive(mut self, r: Receive) -> Self {
        self.ty.receive = r;
        self
    }

    /// Sets the serialization level.
    pub fn serialization(mut self, s: Serialization) -> Self {
        self.ty.serialization = s;
        self
    }

    /// Enables connection and disconnection upcalls on receive ports of this type.
    pub fn connection_upcalls(mut self, on: bool) -> Self {
        self.ty.connection_upcalls = on;
        self
    }

    /// The finished type.
    pub fn build(self) -> PortType {
        self.ty
    }
}
