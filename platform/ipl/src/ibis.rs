//! A node: its membership in a pool and the factory of its ports.

use crate::config::{Config, Driver};
use crate::error::{Error, Result};
use crate::message::ReadMessage;
use crate::node::NodeId;
use crate::pool::Pool;
use crate::port_type::PortType;
use crate::receive_port::{PortTable, ReceivePort, ReceivePortBuilder};
use crate::send_port::SendPort;
use crate::transport::{inproc, tcp::NodeServer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) struct IbisInner {
    pub(crate) id: NodeId,
    pub(crate) cfg: Config,
    pub(crate) pool: Pool,
    pub(crate) ports: Arc<PortTable>,
    pub(crate) links: Arc<crate::transport::links::Links>,
    next_send_port: AtomicU64,
    _server: Option<NodeServer>,
    ended: AtomicBool,
}

impl IbisInner {
    fn end(&self, died: bool) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            if self.cfg.driver == Driver::Inproc {
                inproc::unregister(&self.id);
            }
            self.pool.leave(died);
        }
    }
}

impl Drop for IbisInner {
    fn drop(&mut self) {
        // A node torn down by a panic counts as dead, so its peers see a failure, not a leave.
        self.end(std::thread::panicking());
    }
}

/// A member of a pool. Cheap to clone; the node leaves the pool when the last clone (and every
/// port made from it) is dropped, or at [`Ibis::end`].
#[derive(Clone)]
pub struct Ibis {
    pub(crate) inner: Arc<IbisInner>,
}

impl Ibis {
    /// Joins the pool described by `cfg` (see [`Config::from_env`]).
    pub fn join(cfg: Config) -> Result<Ibis> {
        if cfg.pool.is_empty() || cfg.pool.len() > 256 {
            return Err(Error::config(
                "IPL_POOL",
                "pool name must be 1 to 256 bytes",
            ));
        }
        let ports: Arc<PortTable> = Arc::default();
        let links: Arc<crate::transport::links::Links> = Arc::default();
        let (server, address) = match cfg.driver {
            Driver::Inproc => (None, "inproc".to_string()),
            Driver::Tcp | Driver::Wan => {
                let s = NodeServer::start(&cfg.host, &cfg.secret, ports.clone(), links.clone())?;
                let a = s.address().to_string();
                (Some(s), a)
            }
        };
        let pool = Pool::join(&cfg, &address)?;
        let id = pool.me().clone();
        if cfg.driver == Driver::Inproc {
            inproc::register(&id, &ports);
        }
        tracing::debug!(node = %id, "joined pool '{}'", cfg.pool);
        Ok(Ibis {
            inner: Arc::new(IbisInner {
                id,
                cfg,
                pool,
                ports,
                links,
                next_send_port: AtomicU64::new(0),
                _server: server,
                ended: AtomicBool::new(false),
            }),
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.id.clone()
    }

    /// The pool: members, failures, elections.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The configuration the node joined with.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Creates a receive port for explicit receipt.
    pub fn receive_port(&self, ty: &PortType, name: &str) -> Result<ReceivePort> {
        ReceivePortBuilder::new(self, ty, name).create()
    }

    /// Creates a receive port that runs `upcall` for every message (one at a time, in order per
    /// connection). The port type must have `Receive::Upcall`.
    pub fn receive_port_with_upcall<F>(
        &self,
        ty: &PortType,
        name: &str,
        upcall: F,
    ) -> Result<ReceivePort>
    where
        F: FnMut(ReadMessage) -> Result<()> + Send + 'static,
    {
        ReceivePortBuilder::new(self, ty, name)
            .upcall(upcall)
            .create()
    }

    /// A builder for receive ports with connection and disconnection upcalls.
    pub fn receive_port_builder(&self, ty: &PortType, name: &str) -> ReceivePortBuilder<'_> {
        ReceivePortBuilder::new(self, ty, name)
    }

    /// Creates a send port.
    pub fn send_port(&self, ty: &PortType) -> Result<SendPort> {
        let id = self.inner.next_send_port.fetch_add(1, Ordering::Relaxed);
        Ok(SendPort::new(self.inner.clone(), *ty, id))
    }

    /// Leaves the pool now. Other clones and ports stay usable for local work, but peers see
    /// this node as gone.
    pub fn end(self) -> Result<()> {
        self.inner.end(false);
        Ok(())
    }
}
