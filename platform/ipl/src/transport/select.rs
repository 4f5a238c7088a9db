//! A node's drivers put together: which driver carries a connection to which peer, and the
//! listeners that take connections in.

use super::inproc::{self, InprocDriver};
use super::listen::{self, Listening};
use super::shm::{self, ShmDriver};
use super::tcp::{self, TcpDriver};
use super::wan::{WanAcceptor, WanDriver};
use super::{Acceptor, Dialed, Driver};
use crate::config::{Config, Driver as Kind};
use crate::error::Result;
use crate::node::{NodeId, Reach};
use std::sync::Arc;
use std::time::Duration;

/// Longest a leaving node waits for its receivers to read what it lent them.
const LINGER: Duration = Duration::from_secs(10);

/// The drivers of one node.
pub(crate) struct Endpoint {
    /// Opens connections to peers.
    pub(crate) driver: Arc<dyn Driver>,
    /// Where peers reach this node's listener (`inproc` for in-process nodes).
    pub(crate) address: String,
    /// How peers on this host reach it.
    pub(crate) reach: Reach,
    acceptor: Arc<dyn Acceptor>,
    inproc: bool,
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    mpi: bool,
    _listening: Option<Listening>,
}

/// The pool declared `peer` dead: what this process lent it over shared memory and it has
/// not read is freed (see `shm::orphans::forget`). The node calls this on every death it
/// learns of.
pub(crate) fn peer_died(peer: &NodeId) {
    shm::orphans::forget(peer);
}

/// Refuses at once a configuration whose driver cannot start here (before a node starts its
/// registry or joins).
pub(crate) fn precheck(cfg: &Config) -> Result<()> {
    match cfg.driver {
        #[cfg(feature = "mpi")]
        Kind::Mpi => super::mpi::precheck(cfg),
        #[cfg(not(feature = "mpi"))]
        Kind::Mpi => Err(crate::config::no_mpi()),
        _ => Ok(()),
    }
}

/// Starts the drivers `cfg` asks for; connections that come in go to `acceptor`.
pub(crate) fn start(cfg: &Config, acceptor: Arc<dyn Acceptor>) -> Result<Endpoint> {
    let shaped = cfg.wan.latency > Duration::ZERO || cfg.wan.bandwidth.is_some();
    let acceptor: Arc<dyn Acceptor> = if shaped {
        Arc::new(WanAcceptor(acceptor))
    } else {
        acceptor
    };
    let mut reach = Reach {
        host_key: shm::host_key().to_owned(),
        shm: String::new(),
    };
    let (driver, address, listening): (Arc<dyn Driver>, String, Option<Listening>) =
        match cfg.driver {
            Kind::Inproc => {
                reach.host_key.clear();
                (Arc::new(InprocDriver), "inproc".into(), None)
            }
            Kind::Tcp | Kind::Wan => {
                let (d, address, l) = tcp::listener(&cfg.host, &cfg.secret, acceptor.clone())?;
                let listening = listen::start(vec![l], &cfg.secret)?;
                (Arc::new(d), address, Some(listening))
            }
            #[cfg(feature = "mpi")]
            Kind::Mpi => {
                let (d, address) = super::mpi::start(cfg, acceptor.clone())?;
                (Arc::new(d), address, None)
            }
            #[cfg(not(feature = "mpi"))]
            Kind::Mpi => return Err(crate::config::no_mpi()),
            Kind::Shm => {
                let (t, address, tl) = tcp::listener(&cfg.host, &cfg.secret, acceptor.clone())?;
                let mut listeners = vec![tl];
                let shm = if reach.host_key.is_empty() {
                    tracing::info!("this host cannot be told from others: tcp only");
                    None
                } else {
                    let (d, name, sl) = shm::listener(
                        &cfg.secret,
                        cfg.shm_ring,
                        cfg.shm_single_copy,
                        acceptor.clone(),
                    )?;
                    listeners.push(sl);
                    reach.shm = name;
                    Some(d)
                };
                let listening = listen::start(listeners, &cfg.secret)?;
                let select = Select {
                    tcp: t,
                    shm,
                    host_key: reach.host_key.clone(),
                };
                (Arc::new(select), address, Some(listening))
            }
        };
    let driver: Arc<dyn Driver> = if shaped {
        Arc::new(WanDriver {
            inner: driver,
            link: cfg.wan,
            location: cfg.location.clone(),
        })
    } else {
        driver
    };
    Ok(Endpoint {
        driver,
        address,
        reach,
        acceptor,
        inproc: cfg.driver == Kind::Inproc,
        mpi: cfg.driver == Kind::Mpi,
        _listening: listening,
    })
}

impl Endpoint {
    /// Called once the node has its id: in-process nodes become reachable.
    pub(crate) fn joined(&self, me: &NodeId) {
        if self.inproc {
            inproc::register(me, &self.acceptor);
        }
    }

    /// Called when the node leaves, before the pool is told: in-process nodes become
    /// unreachable, and the receivers of buffers this process lent them over shared memory get
    /// up to [`LINGER`] to read them.
    pub(crate) fn leave(&self, me: &NodeId) {
        if self.inproc {
            inproc::unregister(me);
        }
        if !self.reach.shm.is_empty() {
            shm::orphans::linger(std::time::Instant::now() + LINGER);
        }
    }

    /// Called when the node has left, after the pool was told: finalises MPI. Not before,
    /// because `MPI_Finalize` waits for every rank to call it, and the others would then
    /// learn of this leave only when they leave too: a peer waiting for this node would wait
    /// for ever (or for its time limit) instead of being told. Meanwhile MPI's progress goes
    /// on, so what this node sent still arrives within the others' grace for a departed peer.
    pub(crate) fn finish(&self) {
        #[cfg(feature = "mpi")]
        if self.mpi {
            super::mpi::finish();
        }
    }

    /// Tries once to connect to `peer`.
    pub(crate) fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        self.driver.connect(peer, request)
    }
}

/// Shared memory for peers on this host, tcp for the others.
struct Select {
    tcp: TcpDriver,
    shm: Option<ShmDriver>,
    host_key: String,
}

impl Driver for Select {
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        match &self.shm {
            Some(shm) if !peer.shm().is_empty() && peer.reach().host_key == self.host_key => {
                shm.connect(peer, request)
            }
            _ => self.tcp.connect(peer, request),
        }
    }
}
