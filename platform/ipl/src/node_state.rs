//! What a node's handle ([`Ibis`](crate::Ibis)) and its ports share: the node's identity,
//! configuration, pool and drivers, and its leaving of the pool.

use crate::config::Config;
use crate::node::NodeId;
use crate::pool::Pool;
use crate::registry::RegistryServer;
use crate::transport::select::Endpoint;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A node, shared by its [`Ibis`](crate::Ibis) handles and its ports: the node leaves its pool
/// when the last of them is dropped (or at [`Ibis::end`](crate::Ibis::end)).
pub(crate) struct IbisInner {
    pub(crate) id: NodeId,
    pub(crate) cfg: Config,
    pub(crate) pool: Pool,
    /// The node's drivers and listeners.
    pub(crate) endpoint: Endpoint,
    next_send_port: AtomicU64,
    /// The registry this node runs for its pool (rank 0 under `mpirun` and `srun`).
    registry: Option<RegistryServer>,
    ended: AtomicBool,
}

impl IbisInner {
    /// The node `id`, a member of `pool` with its drivers in `endpoint`, running the pool's
    /// `registry` where it does.
    pub(crate) fn new(
        id: NodeId,
        cfg: Config,
        pool: Pool,
        endpoint: Endpoint,
        registry: Option<RegistryServer>,
    ) -> IbisInner {
        IbisInner {
            id,
            cfg,
            pool,
            endpoint,
            next_send_port: AtomicU64::new(0),
            registry,
            ended: AtomicBool::new(false),
        }
    }

    /// A number for the node's next send port, never given before.
    pub(crate) fn next_send_port(&self) -> u64 {
        self.next_send_port.fetch_add(1, Ordering::Relaxed)
    }

    /// Leaves the pool (reported dead where `died`), once: the drivers first tell the peers,
    /// then the pool, then the drivers finish.
    pub(crate) fn end(&self, died: bool) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            crate::trace::leaving(&self.id, died);
            self.endpoint.leave(&self.id);
            self.pool.leave(died);
            self.endpoint.finish();
            if let Some(r) = &self.registry {
                // The others still need the registry to finish: keep it until they have gone.
                if !r.wait_until_empty(&self.cfg.pool, self.cfg.registry_linger) {
                    tracing::warn!(
                        "stopping the registry of pool '{}' while members remain, after {:?}",
                        self.cfg.pool,
                        self.cfg.registry_linger
                    );
                }
            }
        }
    }
}

impl Drop for IbisInner {
    fn drop(&mut self) {
        // A node torn down by a panic counts as dead, so its peers see a failure, not a leave.
        self.end(std::thread::panicking());
    }
}
