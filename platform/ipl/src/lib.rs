//! The port library: pools of nodes exchanging typed messages over send and receive ports.
//!
//! A process joins a pool with [`Ibis::join`] and gets a [`NodeId`]. Receive ports have names;
//! send ports connect to `(node, name)` and send [`WriteMessage`]s, which the receiver reads as
//! [`ReadMessage`]s in the same order: primitives, slices of primitives (sent from the caller's
//! memory without a copy), byte buffers and serde objects. Port types state the connection
//! pattern, the receive mode (explicit or upcalls) and the serialization level, and are checked
//! when ports connect.
//!
//! Drivers carry the bytes and know nothing of ports: `inproc` (nodes are threads, the embedded
//! default, no network), `tcp` (one event-loop thread per node accepts connections; receivers
//! read their sockets themselves, spinning briefly before they park), and `shm` (processes of
//! one host talk through rings in shared memory, and large parts go from the sender's memory to
//! the receiver's in one copy; the default for pools of processes, with tcp to other hosts). A
//! filter wraps any driver: `wan` emulates latency and bandwidth between locations. Every
//! connection proves knowledge of the pool secret before any traffic.
//!
//! ```
//! use ipl::{Config, Connection, Ibis, PortType, Receive};
//!
//! # fn main() -> ipl::Result<()> {
//! // Two nodes as threads of this process (the in-process driver).
//! let pool = format!("doc-{}", std::process::id());
//! let worker = {
//!     let pool = pool.clone();
//!     std::thread::spawn(move || -> ipl::Result<f64> {
//!         let ibis = Ibis::join(Config::inproc(pool, 2))?;
//!         let ty = PortType::builder().connection(Connection::ManyToOne).build();
//!         let rp = ibis.receive_port(&ty, "results")?;
//!         ibis.pool().wait_closed()?;
//!         let mut m = rp.receive()?;
//!         let n = m.read_u32()?;
//!         let mut v = vec![0.0; n as usize];
//!         m.read_slice_into(&mut v)?;
//!         m.finish();
//!         Ok(v.iter().sum())
//!     })
//! };
//! let ibis = Ibis::join(Config::inproc(pool, 2))?;
//! let all = ibis.pool().wait_closed()?;
//! let ty = PortType::builder().connection(Connection::ManyToOne).receive(Receive::Explicit).build();
//! let sp = ibis.send_port(&ty)?;
//! let other = all.iter().find(|n| **n != ibis.id()).unwrap();
//! sp.connect(other, "results")?;
//! let data = vec![0.5f64; 1000];
//! let mut w = sp.message();
//! w.write_u32(data.len() as u32);
//! w.write_slice(&data[..]);
//! w.finish()?;
//! assert_eq!(worker.join().unwrap()?, 500.0);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod cli;
pub mod config;
mod connect;
pub mod error;
pub mod from_launcher;
mod ibis;
mod lifeline;
mod mesh;
mod message;
mod node;
mod node_state;
mod pool;
mod port_type;
mod primitive;
mod processors;
pub mod quick_lock;
mod receive_port;
pub mod registry;
pub mod run_pool;
mod send_port;
pub mod serial;
pub mod shared_memory;
#[doc(hidden)]
pub mod testing;
mod throttle;
pub mod trace;
mod transport;
mod wire;

/// The shared, immutable byte buffers of [`WriteMessage::write_shared_bytes`].
pub use bytes::Bytes;
pub use config::{ByteOrder, Config, Driver, MpiSends, WanLink};
pub use error::{Error, Result};
pub use from_launcher::{Launcher, LauncherKind};
pub use ibis::Ibis;
pub use mesh::{Departure, Lane, Link, Mesh, MeshBuilder, MeshError};
pub use message::{ReadMessage, WriteMessage};
pub use node::NodeId;
pub use pool::Pool;
pub use port_type::{Connection, PortType, PortTypeBuilder, Receive, Serialization};
pub use primitive::{primitive_by_tag, Primitive};
pub use receive_port::{
    ConnectUpcall, DisconnectUpcall, ReceivePort, ReceivePortBuilder, MAX_PORT_NAME,
};
pub use registry::{PoolEvent, RegistryServer};
pub use send_port::SendPort;
#[cfg(feature = "mpi")]
pub use transport::mpi::WordChannel;

// The modules' names before they were named for their roles, kept so that programs written
// against them still build.
#[doc(hidden)]
pub use from_launcher as launcher;
#[doc(hidden)]
pub use run_pool as launch;
