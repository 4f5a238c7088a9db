//! A node: its membership in a pool and the factory of its ports.

use crate::config::{Config, Driver};
use crate::error::{Error, Result};
use crate::message::ReadMessage;
use crate::node::NodeId;
use crate::node_state::IbisInner;
use crate::pool::Pool;
use crate::port_type::PortType;
use crate::receive_port::{PortTable, PortsAcceptor, ReceivePort, ReceivePortBuilder};
use crate::registry::RegistryServer;
use crate::send_port::SendPort;
use crate::transport::select;
use std::net::{IpAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::Arc;

/// A member of a pool. Cheap to clone; the node leaves the pool when the last clone (and every
/// port made from it) is dropped, or at [`Ibis::end`].
#[derive(Clone)]
pub struct Ibis {
    pub(crate) inner: Arc<IbisInner>,
    /// The node's receive ports by name, which the drivers' acceptor finds them in.
    pub(crate) ports: Arc<PortTable>,
}

impl Ibis {
    /// Joins the pool described by `cfg` (see [`Config::from_env`]), after checking its
    /// settings ([`Config::validate`]).
    ///
    /// A node with [`Config::registry_bind`] first starts the registry there. A tcp or wan node
    /// with an empty [`Config::host`] listens on, and advertises, the local address of its
    /// connection to the registry.
    pub fn join(mut cfg: Config) -> Result<Ibis> {
        cfg.validate()?;
        if cfg.driver != Driver::Inproc && cfg.secret.is_empty() {
            return Err(Error::config(
                "IPL_SECRET",
                "the tcp and wan drivers need a non-empty pool secret: every connection proves \
                 it knows the secret, and an empty one admits anybody",
            ));
        }
        crate::trace::init_for_join()?;
        select::precheck(&cfg)?;
        let registry = match (&cfg.registry_bind, cfg.driver) {
            (None, _) => None,
            (Some(_), Driver::Inproc) => {
                return Err(Error::config(
                    "IPL_DRIVER",
                    "a node that runs the registry needs the tcp or wan driver",
                ))
            }
            (Some(bind), _) => Some(start_registry(&cfg, bind)?),
        };
        let ports: Arc<PortTable> = Arc::default();
        let stream = match cfg.driver {
            Driver::Inproc => None,
            _ => {
                let stream = crate::pool::connect_registry(&cfg)?;
                if cfg.host.is_empty() {
                    cfg.host = advertised_host(&stream, &cfg)?;
                }
                Some(stream)
            }
        };
        let endpoint = select::start(&cfg, Arc::new(PortsAcceptor(ports.clone())))?;
        let pool = Pool::join(&cfg, &endpoint.address, endpoint.reach.clone(), stream)?;
        // The transport frees what a dead peer was lent; the pool knows nothing of transports.
        pool.on_death(Box::new(select::peer_died));
        let id = pool.me().clone();
        crate::trace::joined(&id, cfg.size, pool.clock());
        endpoint.joined(&id);
        tracing::debug!(node = %id, "joined pool '{}'", cfg.pool);
        Ok(Ibis {
            inner: Arc::new(IbisInner::new(id, cfg, pool, endpoint, registry)),
            ports,
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
    /// connection). The port type must have `Receive::Upcall`. An error the upcall returns, or
    /// a panic, is logged, and the next message is delivered.
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
        let id = self.inner.next_send_port();
        Ok(SendPort::new(self.inner.clone(), *ty, id))
    }

    /// The process's [`WordChannel`](crate::WordChannel): small messages to the pool's other
    /// ranks straight over MPI, beside the ports, for a layer that synchronises the whole pool
    /// often. `None` unless the node runs on the mpi driver, or while another user of the
    /// process holds the channel (there is one per process).
    #[cfg(feature = "mpi")]
    pub fn word_channel(&self) -> Option<crate::WordChannel> {
        if self.inner.cfg.driver != Driver::Mpi {
            return None;
        }
        crate::transport::mpi::WordChannel::take()
    }

    /// Leaves the pool now. Other clones and ports stay usable for local work, but peers see
    /// this node as gone.
    pub fn end(self) -> Result<()> {
        self.inner.end(false);
        Ok(())
    }
}

/// Starts the registry a node runs for its pool, after checking that the registry address the
/// others use is one of this host's.
fn start_registry(cfg: &Config, bind: &str) -> Result<RegistryServer> {
    let server = cfg.server.as_deref().unwrap_or_default();
    let mut unresolved = Vec::new();
    let mut local = false;
    for candidate in server.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        match candidate.to_socket_addrs() {
            Ok(addrs) => {
                for a in addrs {
                    local |= is_local(a.ip());
                }
            }
            Err(e) => unresolved.push(format!("{candidate} ({e})")),
        }
    }
    let whose = match &cfg.launcher {
        Some(l) => format!(
            "rank {} of the {} job{}",
            l.rank,
            l.kind.name(),
            l.this_host
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default()
        ),
        None => "this node".into(),
    };
    let source = cfg
        .launcher
        .as_ref()
        .map(|l| format!(" (from {})", l.registry_source))
        .unwrap_or_default();
    if !local {
        return Err(Error::Registry(format!(
            "{whose} runs the registry, but the others look for it at {server}{source}, \
             which is not an address of this host{}; start rank 0 there, or set \
             IPL_SERVER=host:port with this host's name for every rank",
            if unresolved.is_empty() {
                String::new()
            } else {
                format!(" (unresolved: {})", unresolved.join(", "))
            }
        )));
    }
    RegistryServer::start(bind, &cfg.secret).map_err(|e| {
        Error::Registry(format!(
            "{whose} cannot run the registry at {bind}: {e}; another job on this host may hold \
             the port derived from its job id: set IPL_SERVER=host:port with a free port"
        ))
    })
}

/// Whether `ip` is an address of this host.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok()
}

/// The address a node advertises: the local end of its connection to the registry. When that is
/// a loopback address but the launcher runs the job on several hosts (a host name that
/// resolves to 127.0.1.1 on its own host, say), the first non-loopback address of this host.
fn advertised_host(registry: &TcpStream, cfg: &Config) -> Result<String> {
    let local = registry
        .local_addr()
        .map_err(|e| Error::io("local address of the registry connection", e))?
        .ip();
    let several_hosts = cfg
        .launcher
        .as_ref()
        .and_then(|l| l.hosts)
        .is_some_and(|h| h > 1);
    if local.is_loopback() && several_hosts {
        match first_interface_address() {
            Some(ip) => {
                tracing::info!(
                    %ip,
                    "the registry is reached over loopback but the job spans several hosts; \
                     advertising this host's first other address (IPL_HOST chooses another)"
                );
                return Ok(ip.to_string());
            }
            None => tracing::warn!(
                "the job spans several hosts but this host has no address besides loopback"
            ),
        }
    }
    Ok(local.to_string())
}

/// The first IPv4 address of an interface that is up and not loopback.
fn first_interface_address() -> Option<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list that we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let flags = ifa.ifa_flags as libc::c_int;
        if ifa.ifa_addr.is_null() || flags & libc::IFF_UP == 0 || flags & libc::IFF_LOOPBACK != 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family we check first.
        if unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int == libc::AF_INET {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(IpAddr::from(
                u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
            ));
            break;
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}
