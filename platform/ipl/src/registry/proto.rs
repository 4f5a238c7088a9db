//! Messages between nodes and the registry.

use crate::node::{NodeId, Reach};
use serde::{Deserialize, Serialize};

/// A change in pool membership, as seen by every member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolEvent {
    /// A node joined.
    Joined(NodeId),
    /// A node left on its own.
    Left(NodeId),
    /// A node died: its connection to the registry broke or its heartbeats stopped.
    Died(NodeId),
    /// A closed pool reached its size; every member in rank order.
    Closed(Vec<NodeId>),
}

/// Node to registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToRegistry {
    /// First message of a connection.
    Join {
        /// Pool name.
        pool: String,
        /// Closed-pool size.
        size: Option<u32>,
        /// Requested rank.
        rank: Option<u32>,
        /// Host name.
        host: String,
        /// Location.
        location: String,
        /// Address of the node's ports.
        address: String,
        /// How nodes on its host reach it.
        local: Reach,
        /// Silence after which the node counts as dead, in milliseconds.
        death_timeout_ms: u64,
        /// Join only a closed pool that is full already, growing it (see `Config::join_running`).
        running: bool,
    },
    /// Run (or look up) the election `name`; the caller wins if nobody holds it.
    Elect(String),
    /// Look up the winner of election `name` without standing.
    Lookup(String),
    /// Still alive.
    Heartbeat,
    /// Leaving the pool on purpose.
    Leave,
    /// What time is it on the registry's clock? (A traced node asks at join, to line its trace
    /// up with the others'.)
    Clock,
    /// Sent by a member after its join: the id of its process, so that a launcher watching
    /// the pool (`Watch`) can find the process of a member declared dead for its silence.
    /// Members that join a running pool send it (their launcher's registry is elsewhere).
    Pid(u32),
    /// First message of a connection instead of `Join`, from a launcher that is no member:
    /// tell it of `pool`'s members declared dead for their silence (`Silent`). Answered with
    /// `Watching`, or `Refused`.
    Watch {
        /// Pool name.
        pool: String,
    },
}

/// Registry to node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FromRegistry {
    /// Answer to `Join`: the node's id and the members so far (itself included).
    Welcome {
        /// The new node's id.
        me: NodeId,
        /// Current members.
        members: Vec<NodeId>,
    },
    /// Answer to `Join` when it is refused.
    Refused(String),
    /// A membership change.
    Event(PoolEvent),
    /// Answer to `Lookup` when the election has no winner.
    NoWinner(String),
    /// Answer to `Elect` when the registry will not hold the election: its name is empty or
    /// longer than [`MAX_ELECTION_NAME`], or the pool holds [`MAX_ELECTIONS`] already.
    ElectionRefused {
        /// The election.
        name: String,
        /// Why.
        why: String,
    },
    /// Answer to `Elect` and `Lookup`.
    Elected {
        /// The election.
        name: String,
        /// Its winner.
        winner: NodeId,
    },
    /// Answer to `Clock`.
    Clock {
        /// The registry's wall clock, in microseconds since the Unix epoch.
        unix_us: i64,
        /// The registry's host name: nodes on that host share its clock.
        host: String,
    },
    /// Answer to `Heartbeat`: the registry is alive. A node that hears nothing from its
    /// registry for its death timeout is cut off from its pool.
    Alive,
    /// Answer to `Watch`: the watcher hears of silent members from now on.
    Watching,
    /// To a watcher: a member of its pool declared dead because its heartbeats stopped for
    /// its death timeout (a process stopped or hung, which never exits on its own).
    Silent {
        /// The member's rank.
        rank: u32,
        /// Its process id, if it sent one (`Pid`).
        pid: Option<u32>,
    },
}

/// Longest election name, in bytes. The registry keeps each name until its winner goes, so
/// names and their number are bounded rather than trusted.
pub const MAX_ELECTION_NAME: usize = 1024;

/// Most elections one pool holds at a time (with winners present).
pub const MAX_ELECTIONS: usize = 4096;

/// Largest registry frame accepted.
pub const MAX_FRAME: usize = 1 << 20;

/// Writes one frame (u32 little-endian length, postcard body).
pub fn write_frame<T: Serialize>(w: &mut impl std::io::Write, v: &T) -> std::io::Result<()> {
    let body = postcard::to_allocvec(v).map_err(std::io::Error::other)?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    w.write_all(&out)
}

/// Reads one frame; errors on oversized or undecodable frames.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl std::io::Read) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("registry frame of {n} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    postcard::from_bytes(&body).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad registry frame: {e}"),
        )
    })
}
