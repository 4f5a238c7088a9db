//! A mesh: two receive ports on every member and send ports to every other member, for layers
//! that talk all-to-all (bulk-synchronous supersteps, work stealing).
//!
//! Each member of a mesh named `NAME` has two receive ports:
//! - `NAME/control`, for small messages: read by the owner's own thread
//!   ([`Mesh::control_port`]), which then waits with no hand-off between threads, or by a
//!   handler ([`MeshBuilder::control_upcall`]);
//! - `NAME/data`, for messages of any size: always read by a handler
//!   ([`MeshBuilder::data_upcall`]) as they arrive, whatever the owner does. A send on it
//!   therefore always completes, and two members sending each other large messages cannot block
//!   each other, as they could if each waited to be read by a thread that is itself sending.
//!
//! Send ports are made on first use ([`Mesh::link`]) or all at once ([`Mesh::connect_all`]),
//! one per member and lane, and kept.
//!
//! # Members and departures
//!
//! The members are the closed pool by default, or any set of nodes
//! ([`MeshBuilder::members`]); in an open pool, members are added and removed while the mesh
//! runs ([`Mesh::add`], [`Mesh::remove`]). The mesh follows the pool's events from the moment
//! it is built and keeps every departure of a member, in the order the pool reported them
//! ([`Mesh::departed`]). Errors say who is gone in two ways ([`MeshError::Departed`]): `peer`
//! is the member the failed call needed, and `first` the member of the mesh that went first,
//! which closed-pool programs name because the others may only have followed it (a process
//! that fails because its peer died often ends too). A connection can break before the pool
//! reports the departure behind it; a failed connect or send then waits up to
//! [`MeshBuilder::patience`] for that report, so the error names the departure rather than
//! the broken connection.
//!
//! A member that gives up on another ([`Mesh::remove`]) closes only its own send ports to it.
//! The other learns of it through [`MeshBuilder::on_disconnect`], which reports every end of a
//! member's connection to this node: a layer that keeps state for a member (satin waits for
//! results of jobs it gave away) uses it to stop waiting for one that no longer counts on it.
//!
//! ```
//! use ipl::{Config, Ibis, Lane, Mesh};
//! use std::sync::{mpsc, Arc, Barrier};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // Three nodes as threads of this process; each sends its rank to every other member, small
//! // on the control lane and large on the data lane.
//! let pool = format!("mesh-doc-{}", std::process::id());
//! let done = Arc::new(Barrier::new(3));
//! let nodes: Vec<_> = (0..3u32)
//!     .map(|rank| {
//!         let (pool, done) = (pool.clone(), done.clone());
//!         std::thread::spawn(move || -> Result<(u32, usize), ipl::MeshError> {
//!             let mut cfg = Config::inproc(pool, 3);
//!             cfg.rank = Some(rank);
//!             let ibis = Ibis::join(cfg).expect("join");
//!             let (tx, rx) = mpsc::channel();
//!             let mesh = Mesh::builder(&ibis, "doc")
//!                 .data_upcall(move |mut m| {
//!                     let _ = tx.send(m.read_slice::<u8>()?.len());
//!                     Ok(())
//!                 })
//!                 .build()?;
//!             let others: Vec<_> = mesh.members().into_iter().filter(|n| *n != ibis.id()).collect();
//!             let big = vec![7u8; 1 << 20];
//!             for to in &others {
//!                 let control = mesh.link(to, Lane::Control)?;
//!                 let mut w = control.message();
//!                 w.write_u32(rank);
//!                 w.finish().map_err(|e| mesh.send_error(to, "sending", e))?;
//!                 let data = mesh.link(to, Lane::Data)?;
//!                 let mut w = data.message();
//!                 w.write_slice(&big[..]);
//!                 w.finish().map_err(|e| mesh.send_error(to, "sending", e))?;
//!             }
//!             let port = mesh.control_port().expect("an explicit control port");
//!             let mut ranks = 0;
//!             for _ in &others {
//!                 let mut m = port.receive().expect("a control message");
//!                 ranks += m.read_u32().expect("a rank");
//!             }
//!             let bytes: usize = rx.iter().take(others.len()).sum();
//!             mesh.check()?; // every member is still here
//!             done.wait(); // nobody leaves before everyone has read: leaving is a departure
//!             Ok((ranks, bytes))
//!         })
//!     })
//!     .collect();
//! for (rank, t) in nodes.into_iter().enumerate() {
//!     let (ranks, bytes) = t.join().unwrap()?;
//!     assert_eq!(ranks, 3 - rank as u32); // the sum of the other ranks
//!     assert_eq!(bytes, 2 << 20);
//! }
//! # Ok(())
//! # }
//! ```

use crate::error::Error;
use crate::ibis::Ibis;
use crate::message::{ReadMessage, WriteMessage};
use crate::node::NodeId;
use crate::port_type::{Connection, PortType, Receive, Serialization};
use crate::receive_port::ReceivePort;
use crate::registry::PoolEvent;
use crate::send_port::SendPort;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a failed connect or send waits by default for the pool to report the departure
/// behind it.
const DEFAULT_PATIENCE: Duration = Duration::from_millis(200);

/// Longest one wait for a pool event while a failed send waits for its explanation.
const EVENT_SLICE: Duration = Duration::from_millis(10);

/// A message handler of an upcall port.
type Handler = Box<dyn FnMut(ReadMessage) -> crate::Result<()> + Send + 'static>;
/// What a mesh calls when a member's connection to this node ends (see
/// [`MeshBuilder::on_disconnect`]).
type Disconnected = Arc<dyn Fn(&NodeId, Option<&Error>) + Send + Sync + 'static>;

/// Which of a member's two receive ports a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The control port: small messages, read by the owner's thread or a handler. Read by the
    /// owner's thread, it takes large parts over shared memory through the ring, never from the
    /// sender's memory (see
    /// [`ReceivePortBuilder::single_copy`](crate::ReceivePortBuilder::single_copy)).
    Control,
    /// The data port: messages of any size, drained by a handler as they arrive.
    Data,
}

impl Lane {
    fn index(self) -> usize {
        match self {
            Lane::Control => 0,
            Lane::Data => 1,
        }
    }
}

/// A member that died or left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    /// The member.
    pub node: NodeId,
    /// True when it died (its process ended or it stopped sending heartbeats); false when it
    /// left the pool on its own.
    pub died: bool,
}

impl fmt::Display for Departure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.died {
            write!(f, "{} died", self.node)
        } else {
            write!(f, "{} left the pool", self.node)
        }
    }
}

fn departed_text(peer: &Departure, first: &Departure) -> String {
    if peer.node == first.node {
        peer.to_string()
    } else {
        format!("{peer}, after {first}")
    }
}

/// What went wrong in a mesh.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeshError {
    /// A member is gone. `peer` is the member the failed call needed; `first` is the member of
    /// the mesh that went first of all (the same as `peer` when it did).
    #[error("{}", departed_text(peer, first))]
    Departed {
        /// The member the call needed.
        peer: Departure,
        /// The first member of the mesh to go.
        first: Departure,
    },
    /// A node that is not a member (never added, or removed) was addressed.
    #[error("{node} is not a member of mesh '{mesh}'")]
    NotMember {
        /// The mesh.
        mesh: String,
        /// The node addressed.
        node: NodeId,
    },
    /// The port library failed (creating ports, connecting, sending, watching the pool).
    #[error("mesh '{mesh}': {what}: {source}")]
    Ipl {
        /// The mesh.
        mesh: String,
        /// What the mesh was doing.
        what: String,
        /// The port library's error.
        #[source]
        source: Box<Error>,
    },
}

impl MeshError {
    /// True when the error reports a member that is gone.
    pub fn is_departure(&self) -> bool {
        matches!(self, MeshError::Departed { .. })
    }
}

/// Builds a [`Mesh`]; every member builds its own with the same name and settings.
pub struct MeshBuilder<'a> {
    ibis: &'a Ibis,
    name: String,
    members: Option<Vec<NodeId>>,
    control: Option<Handler>,
    data: Option<Handler>,
    disconnected: Option<Disconnected>,
    serialization: Serialization,
    patience: Duration,
}

impl fmt::Debug for MeshBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeshBuilder")
            .field("name", &self.name)
            .field("members", &self.members)
            .field("control_upcall", &self.control.is_some())
            .field("on_disconnect", &self.disconnected.is_some())
            .field("serialization", &self.serialization)
            .field("patience", &self.patience)
            .finish_non_exhaustive()
    }
}

impl<'a> MeshBuilder<'a> {
    /// The members; by default every member of the closed pool (waiting for it to fill). This
    /// node is a member whether listed or not.
    pub fn members(mut self, members: Vec<NodeId>) -> Self {
        self.members = Some(members);
        self
    }

    /// Reads the control port with `handler` instead of the owner's thread (then
    /// [`Mesh::control_port`] is `None`).
    pub fn control_upcall(
        mut self,
        handler: impl FnMut(ReadMessage) -> crate::Result<()> + Send + 'static,
    ) -> Self {
        self.control = Some(Box::new(handler));
        self
    }

    /// The handler of the data port, run for every message as it arrives (required).
    pub fn data_upcall(
        mut self,
        handler: impl FnMut(ReadMessage) -> crate::Result<()> + Send + 'static,
    ) -> Self {
        self.data = Some(Box::new(handler));
        self
    }

    /// Calls `f` when a member's connection to one of this node's two ports ends: with `None`
    /// when the member closed it (it removed this node, or closed its side of the mesh), with
    /// the error when the connection broke. A member that takes this node for gone after a
    /// failed send closes its connections, so this is how a node learns that another no longer
    /// counts on it. `f` runs on the port's upcall thread, between two messages of that
    /// connection, so it comes after every message the member sent on it; it must not block.
    /// A control port that the owner's thread reads (no [`control_upcall`](Self::control_upcall))
    /// reports its disconnections inside that thread's receives. A member that sets it and
    /// one that does not connect to each other as any two members do.
    pub fn on_disconnect(
        mut self,
        f: impl Fn(&NodeId, Option<&Error>) + Send + Sync + 'static,
    ) -> Self {
        self.disconnected = Some(Arc::new(f));
        self
    }

    /// The serialization level of both ports; by default [`Serialization::Object`].
    pub fn serialization(mut self, s: Serialization) -> Self {
        self.serialization = s;
        self
    }

    /// How long a failed connect or send waits for the pool to report the departure behind
    /// it ([`Mesh::send_error`]); 200 ms by default, and at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION) (`build` refuses more).
    pub fn patience(mut self, d: Duration) -> Self {
        self.patience = d;
        self
    }

    /// Creates this member's ports. Departures are followed from now on.
    pub fn build(self) -> Result<Mesh, MeshError> {
        let ibis = self.ibis.clone();
        let name = self.name;
        let err = |what: &str, source: Error| MeshError::Ipl {
            mesh: name.clone(),
            what: what.to_string(),
            source: Box::new(source),
        };
        if name.is_empty() || name.len() > 512 {
            return Err(err(
                "naming the mesh",
                Error::config("mesh name", "must be 1 to 512 bytes"),
            ));
        }
        if let Err(e) = crate::config::check_duration("mesh patience", self.patience) {
            return Err(err("setting the patience", e));
        }
        let Some(data_handler) = self.data else {
            return Err(err(
                "creating the data port",
                Error::config(
                    "data_upcall",
                    "the data port needs a handler (it is always drained)",
                ),
            ));
        };
        // Subscribed before the members are known, so that no departure goes unseen.
        let events = ibis.pool().subscribe();
        let me = ibis.id();
        let mut members = match self.members {
            Some(m) => m,
            None => ibis
                .pool()
                .wait_closed()
                .map_err(|e| err("waiting for the pool to fill", e))?,
        };
        if !members.contains(&me) {
            members.push(me.clone());
        }
        let disconnected = self.disconnected;
        let ty = |receive| {
            PortType::builder()
                .connection(Connection::ManyToOne)
                .receive(receive)
                .serialization(self.serialization)
                // Always, whether this member asks for disconnections or not: the type is
                // part of what two ports agree on, so members that differ here still connect.
                .connection_upcalls(true)
                .build()
        };
        let data_ty = ty(Receive::Upcall);
        let control_ty = ty(if self.control.is_some() {
            Receive::Upcall
        } else {
            Receive::Explicit
        });
        let names = [format!("{name}/control"), format!("{name}/data")];
        // A port builder that passes disconnections on, when asked to.
        let port = |ty: &PortType, name: &str| {
            let b = ibis.receive_port_builder(ty, name);
            match &disconnected {
                Some(f) => {
                    let f = f.clone();
                    b.on_disconnect(move |n, e| f(n, e))
                }
                None => b,
            }
        };
        let mut upcall_ports = Vec::new();
        let control_rx = match self.control {
            Some(h) => {
                let p = port(&control_ty, &names[0])
                    .upcall(h)
                    .create()
                    .map_err(|e| err("creating the control port", e))?;
                upcall_ports.push(p);
                None
            }
            // The explicit control port is read by the application's thread, which may be
            // sending to the very node that sends to it: large parts come through the ring,
            // so that neither send waits for the other side to take an offer.
            None => Some(
                port(&control_ty, &names[0])
                    .single_copy(false)
                    .create()
                    .map_err(|e| err("creating the control port", e))?,
            ),
        };
        upcall_ports.push(
            port(&data_ty, &names[1])
                .upcall(data_handler)
                .create()
                .map_err(|e| err("creating the data port", e))?,
        );
        let peers = members
            .into_iter()
            .map(|n| (n.clone(), Arc::new(Peer::new(n))))
            .collect();
        tracing::debug!(node = %me, mesh = %name, "mesh ready");
        Ok(Mesh {
            ibis,
            me,
            name,
            names,
            types: [control_ty, data_ty],
            control_rx,
            upcall_ports: Mutex::new(upcall_ports),
            peers: RwLock::new(peers),
            track: Mutex::new(Track {
                events: events.clone(),
                departed: Vec::new(),
            }),
            wake: events,
            patience: self.patience,
            closed: AtomicBool::new(false),
        })
    }
}

/// Send ports to one member, made on first use.
struct Peer {
    node: NodeId,
    lanes: [OnceLock<SendPort>; 2],
    connecting: Mutex<()>,
}

impl Peer {
    fn new(node: NodeId) -> Peer {
        Peer {
            node,
            lanes: [OnceLock::new(), OnceLock::new()],
            connecting: Mutex::new(()),
        }
    }
}

/// A connected send port to one lane of one member; see [`Mesh::link`]. Cheap to clone; it
/// stays usable after the member is removed from the mesh (sends then fail if it is gone).
#[derive(Clone)]
pub struct Link {
    peer: Arc<Peer>,
    lane: Lane,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Link({} {:?})", self.peer.node, self.lane)
    }
}

impl Link {
    /// The member at the other end.
    pub fn to(&self) -> &NodeId {
        &self.peer.node
    }

    /// The lane.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// Bytes of messages the connection is sure to hold for the member while it does not read
    /// before a send waits (see [`SendPort::unread_capacity`](crate::SendPort::unread_capacity)).
    pub fn unread_capacity(&self) -> u64 {
        self.peer.lanes[self.lane.index()]
            .get()
            .and_then(|port| port.unread_capacity().first().map(|c| c.2))
            .unwrap_or(0)
    }

    /// A new message; [`WriteMessage::finish`] sends it. On an error, [`Mesh::send_error`]
    /// says whether the member is gone.
    #[inline]
    pub fn message(&self) -> WriteMessage<'_> {
        self.peer.lanes[self.lane.index()]
            .get()
            .expect("a link exists only once its port is connected")
            .message()
    }
}

/// Departures of members, in the order the pool reported them.
struct Track {
    events: Receiver<PoolEvent>,
    departed: Vec<Departure>,
}

/// One member's side of an all-to-all set of connections: two receive ports (control and
/// data, see the module documentation), send ports to every member, and the departures of
/// members. `Send + Sync`: any thread may send.
pub struct Mesh {
    ibis: Ibis,
    me: NodeId,
    name: String,
    names: [String; 2],
    types: [PortType; 2],
    control_rx: Option<ReceivePort>,
    upcall_ports: Mutex<Vec<ReceivePort>>,
    peers: RwLock<BTreeMap<NodeId, Arc<Peer>>>,
    track: Mutex<Track>,
    /// Another handle on the event stream, for waiting without holding `track`.
    wake: Receiver<PoolEvent>,
    patience: Duration,
    closed: AtomicBool,
}

impl fmt::Debug for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mesh")
            .field("name", &self.name)
            .field("me", &self.me)
            .field("members", &self.members().len())
            .finish_non_exhaustive()
    }
}

impl Mesh {
    /// A builder for this node's side of the mesh `name` (its ports are `name/control` and
    /// `name/data`).
    pub fn builder<'a>(ibis: &'a Ibis, name: &str) -> MeshBuilder<'a> {
        MeshBuilder {
            ibis,
            name: name.to_string(),
            members: None,
            control: None,
            data: None,
            disconnected: None,
            serialization: Serialization::Object,
            patience: DEFAULT_PATIENCE,
        }
    }

    /// The node this side belongs to.
    pub fn ibis(&self) -> &Ibis {
        &self.ibis
    }

    /// This node.
    pub fn me(&self) -> &NodeId {
        &self.me
    }

    /// The mesh's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The members now (this node included), in rank order.
    pub fn members(&self) -> Vec<NodeId> {
        self.peers.read().keys().cloned().collect()
    }

    /// Whether `node` is a member now.
    pub fn is_member(&self, node: &NodeId) -> bool {
        self.peers.read().contains_key(node)
    }

    /// The control port, when this node reads it itself (no [`MeshBuilder::control_upcall`]).
    #[inline]
    pub fn control_port(&self) -> Option<&ReceivePort> {
        self.control_rx.as_ref()
    }

    /// Adds a member (a node that joined an open pool); false when it already was one.
    /// Nothing is connected until it is used.
    pub fn add(&self, node: NodeId) -> bool {
        let mut peers = self.peers.write();
        if peers.contains_key(&node) {
            return false;
        }
        tracing::debug!(node = %self.me, mesh = %self.name, member = %node, "member added");
        peers.insert(node.clone(), Arc::new(Peer::new(node)));
        true
    }

    /// Removes a member: its send ports close once no [`Link`] to it is held, later departures
    /// of it are not recorded, and an earlier one no longer fails [`Mesh::check`]. False when
    /// it was not a member.
    pub fn remove(&self, node: &NodeId) -> bool {
        let removed = self.peers.write().remove(node).is_some();
        if removed {
            tracing::debug!(node = %self.me, mesh = %self.name, member = %node, "member removed");
        }
        removed
    }

    fn peer(&self, node: &NodeId) -> Result<Arc<Peer>, MeshError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.ipl_error(
                format!("reaching {node}"),
                Error::Closed(format!("mesh '{}'", self.name)),
            ));
        }
        self.peers
            .read()
            .get(node)
            .cloned()
            .ok_or_else(|| MeshError::NotMember {
                mesh: self.name.clone(),
                node: node.clone(),
            })
    }

    fn ipl_error(&self, what: String, source: Error) -> MeshError {
        MeshError::Ipl {
            mesh: self.name.clone(),
            what,
            source: Box::new(source),
        }
    }

    /// The send port to `lane` of member `to`, connected on first use.
    pub fn link(&self, to: &NodeId, lane: Lane) -> Result<Link, MeshError> {
        let peer = self.peer(to)?;
        let slot = &peer.lanes[lane.index()];
        if slot.get().is_none() {
            let _connecting = peer.connecting.lock();
            if slot.get().is_none() {
                let name = &self.names[lane.index()];
                let what = || format!("connecting to '{name}' on {to}");
                let sp = self
                    .ibis
                    .send_port(&self.types[lane.index()])
                    .map_err(|e| self.ipl_error(what(), e))?;
                sp.connect(to, name)
                    .map_err(|e| self.send_error(to, what(), e))?;
                tracing::trace!(node = %self.me, to = %to, port = %name, "connected");
                let _ = slot.set(sp);
            }
        }
        Ok(Link { peer, lane })
    }

    /// Whether this node's send port to `lane` of member `to` is connected (by an earlier
    /// [`link`](Mesh::link) or [`connect_all`](Mesh::connect_all)), without connecting it:
    /// false for a lane never used, and for a node that is not a member. A layer that orders
    /// a last message behind what it sent on a lane needs no such message where it sent
    /// nothing, and the first connect to a member that has closed its mesh but is still in
    /// the pool waits out the connect timeout.
    pub fn linked(&self, to: &NodeId, lane: Lane) -> bool {
        self.peer(to)
            .is_ok_and(|p| p.lanes[lane.index()].get().is_some())
    }

    /// Connects both lanes to every member but this node now, instead of on first use.
    pub fn connect_all(&self) -> Result<(), MeshError> {
        for n in self.members() {
            if n != self.me {
                self.link(&n, Lane::Control)?;
                self.link(&n, Lane::Data)?;
            }
        }
        Ok(())
    }

    /// Records the departures the pool has reported so far. Returns the record, locked.
    fn note(&self) -> MutexGuard<'_, Track> {
        let mut t = self.track.lock();
        while let Ok(ev) = t.events.try_recv() {
            self.record(&mut t, ev);
        }
        t
    }

    fn record(&self, t: &mut Track, ev: PoolEvent) {
        let (node, died) = match ev {
            PoolEvent::Died(n) => (n, true),
            PoolEvent::Left(n) => (n, false),
            _ => return,
        };
        if self.is_member(&node) && !t.departed.iter().any(|d| d.node == node) {
            tracing::debug!(node = %self.me, mesh = %self.name, member = %node, died, "member gone");
            t.departed.push(Departure { node, died });
        }
    }

    /// Also asks the pool directly whether `nodes` live: it knows of departures that happened
    /// before this mesh subscribed to its events.
    fn ask_pool(&self, t: &mut Track, nodes: &[NodeId]) -> Result<(), MeshError> {
        let mut rest: Vec<NodeId> = nodes
            .iter()
            .filter(|n| !t.departed.iter().any(|d| d.node == **n))
            .cloned()
            .collect();
        loop {
            match self.ibis.pool().check_alive(&rest) {
                Ok(()) => return Ok(()),
                Err(Error::NodeDied(n)) => self.record(t, PoolEvent::Died(n.clone())),
                Err(Error::NodeLeft(n)) => self.record(t, PoolEvent::Left(n.clone())),
                Err(e) => return Err(self.ipl_error("watching the pool".into(), e)),
            }
            // The node answered for is recorded (or not a member): look at the others.
            let before = rest.len();
            rest.retain(|n| !t.departed.iter().any(|d| d.node == *n) && self.is_member(n));
            if rest.len() == before {
                return Ok(());
            }
        }
    }

    fn first_of_members(&self, t: &Track) -> Option<Departure> {
        t.departed.iter().find(|d| self.is_member(&d.node)).cloned()
    }

    /// Every departure of a member so far, in the order the pool reported them (removed
    /// members included).
    pub fn departed(&self) -> Vec<Departure> {
        let mut t = self.note();
        let members = self.members();
        let _ = self.ask_pool(&mut t, &members);
        t.departed.clone()
    }

    /// Ok while every member lives; otherwise [`MeshError::Departed`] naming the member that
    /// went first (as `peer` and `first`). Also fails when this node has lost its pool's
    /// registry, since departures can then no longer be seen.
    pub fn check(&self) -> Result<(), MeshError> {
        let mut t = self.note();
        let members = self.members();
        self.ask_pool(&mut t, &members)?;
        match self.first_of_members(&t) {
            None => Ok(()),
            Some(first) => Err(MeshError::Departed {
                peer: first.clone(),
                first,
            }),
        }
    }

    /// Ok while `node` lives; otherwise [`MeshError::Departed`] naming it as `peer`.
    pub fn check_peer(&self, node: &NodeId) -> Result<(), MeshError> {
        let mut t = self.note();
        self.ask_pool(&mut t, std::slice::from_ref(node))?;
        self.departure_error(&t, node).map_or(Ok(()), Err)
    }

    fn departure_error(&self, t: &Track, node: &NodeId) -> Option<MeshError> {
        let peer = t.departed.iter().find(|d| d.node == *node)?.clone();
        let first = self.first_of_members(t).unwrap_or_else(|| peer.clone());
        Some(MeshError::Departed { peer, first })
    }

    /// The error for a failed connect or send (`what`) to member `to`: when `to` is gone (the
    /// pool reports it within the patience), [`MeshError::Departed`]; otherwise the port
    /// library's error.
    pub fn send_error(&self, to: &NodeId, what: impl Into<String>, e: Error) -> MeshError {
        self.send_error_within(to, what, e, self.patience)
    }

    /// [`send_error`](Mesh::send_error) with a patience of its own: `Duration::ZERO` names a
    /// departure only if the pool has reported it already, for a caller that does not care
    /// why the send failed (a node's goodbye to members that may be leaving too) and would
    /// otherwise wait the mesh's patience for each of them.
    pub fn send_error_within(
        &self,
        to: &NodeId,
        what: impl Into<String>,
        e: Error,
        patience: Duration,
    ) -> MeshError {
        let deadline = Instant::now() + patience;
        let mut t = self.note();
        match &e {
            Error::NodeDied(n) => self.record(&mut t, PoolEvent::Died(n.clone())),
            Error::NodeLeft(n) => self.record(&mut t, PoolEvent::Left(n.clone())),
            _ => {}
        }
        // Set once the pool can report nothing more: its event stream has ended.
        let mut ended = false;
        loop {
            let asked = self.ask_pool(&mut t, std::slice::from_ref(to));
            if let Some(err) = self.departure_error(&t, to) {
                return err;
            }
            if let Error::NodeDied(n) | Error::NodeLeft(n) = &e {
                if let Some(err) = self.departure_error(&t, n) {
                    return err;
                }
            }
            // A node cut off from its pool's registry will hear of no departure any more:
            // waiting out the patience would only delay the error.
            if let Err(lost) = asked {
                let why = match lost {
                    MeshError::Ipl { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                return self.ipl_error(
                    format!(
                        "{} (the pool can no longer tell whether {to} is gone: {why})",
                        what.into()
                    ),
                    e,
                );
            }
            if ended {
                return self.ipl_error(
                    format!(
                        "{} (the pool's events have ended, so whether {to} is gone cannot be \
                         known)",
                        what.into()
                    ),
                    e,
                );
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.ipl_error(what.into(), e);
            }
            drop(t);
            let ev = self.wake.recv_timeout(left.min(EVENT_SLICE));
            t = self.note();
            match ev {
                Ok(ev) => self.record(&mut t, ev),
                Err(RecvTimeoutError::Timeout) => {}
                // The events that came before are recorded (by `note`); one more look at the
                // pool decides.
                Err(RecvTimeoutError::Disconnected) => ended = true,
            }
        }
    }

    /// Closes the mesh: the upcall ports stop (their handlers finish the current message), the
    /// send ports close once no [`Link`] holds them, and the mesh has no members any more, so
    /// that later links fail. For owners whose handlers hold the mesh itself, which would
    /// otherwise keep it alive.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let ports = std::mem::take(&mut *self.upcall_ports.lock());
        drop(ports);
        let peers = std::mem::take(&mut *self.peers.write());
        drop(peers);
        tracing::debug!(node = %self.me, mesh = %self.name, "mesh closed");
    }
}
