//! Location-independent node identifiers.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Identifies one member of a pool. Cheap to clone; equal ids name the same node of the same pool.
///
/// Besides its rank, a node has a host name, a *location* (the cluster it sits in, used by
/// cluster-aware algorithms and by the wide-area emulation) and the address its ports listen on.
#[derive(Clone, Serialize, Deserialize)]
pub struct NodeId(Arc<NodeInfo>);

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
struct NodeInfo {
    pool: String,
    rank: u32,
    host: String,
    location: String,
    address: String,
    /// Where peers on the same host reach the node (see [`Reach`]).
    local: Reach,
}

/// How peers on the node's own host reach it, besides its address.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct Reach {
    /// Identifies the host (and network namespace) the node runs in; empty when unknown.
    pub host_key: String,
    /// The name of its shared-memory driver's Unix socket; empty when it has none.
    pub shm: String,
}

impl NodeId {
    pub(crate) fn new(
        pool: &str,
        rank: u32,
        host: &str,
        location: &str,
        address: &str,
        local: Reach,
    ) -> Self {
        NodeId(Arc::new(NodeInfo {
            pool: pool.to_owned(),
            rank,
            host: host.to_owned(),
            location: location.to_owned(),
            address: address.to_owned(),
            local,
        }))
    }

    /// Whether `other` runs on the same host (and network namespace) as this node, as far as
    /// their drivers know: then they may talk through shared memory.
    pub fn same_host(&self, other: &NodeId) -> bool {
        !self.0.local.host_key.is_empty() && self.0.local.host_key == other.0.local.host_key
    }

    /// How peers on the node's host reach it.
    #[doc(hidden)]
    pub fn reach(&self) -> &Reach {
        &self.0.local
    }

    /// The name of the node's shared-memory socket (empty when it has none).
    pub(crate) fn shm(&self) -> &str {
        &self.0.local.shm
    }

    /// The node's rank: 0..size for a closed pool, in order of joining otherwise.
    pub fn rank(&self) -> u32 {
        self.0.rank
    }

    /// The pool this node belongs to.
    pub fn pool(&self) -> &str {
        &self.0.pool
    }

    /// The host the node runs on.
    pub fn host(&self) -> &str {
        &self.0.host
    }

    /// The node's location (its cluster), e.g. `clusterA`.
    pub fn location(&self) -> &str {
        &self.0.location
    }

    /// The address its receive ports are reached at (`inproc` for the in-process driver).
    pub fn address(&self) -> &str {
        &self.0.address
    }

    /// The location-qualified name used in logs and errors, e.g. `node3@clusterA`.
    pub fn name(&self) -> String {
        format!("node{}@{}", self.0.rank, self.0.location)
    }
}

impl PartialEq for NodeId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.rank == other.0.rank
                && self.0.pool == other.0.pool
                && self.0.address == other.0.address)
    }
}

impl Eq for NodeId {}

impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.rank.hash(state);
        self.0.pool.hash(state);
    }
}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for NodeId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0.rank, &self.0.pool, &self.0.address).cmp(&(
            other.0.rank,
            &other.0.pool,
            &other.0.address,
        ))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node{}@{} ({})",
            self.0.rank, self.0.location, self.0.address
        )
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
