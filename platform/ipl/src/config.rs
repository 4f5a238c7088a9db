//! Configuration of a node, from `IPL_*` environment variables or built in code.

use crate::error::{Error, Result};
use crate::from_launcher::{self, Launcher};
use std::time::Duration;

/// Which driver carries port connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Nodes are threads of one process; no sockets at all.
    Inproc,
    /// TCP sockets, registry over TCP.
    Tcp,
    /// TCP with emulated wide-area latency and bandwidth between nodes of different locations.
    Wan,
    /// Shared memory between processes of the same host, TCP to the others (both at once in a
    /// pool that spans hosts); the default for pools of processes.
    Shm,
    /// MPI point-to-point (the `mpi` feature), for programs started by `mpirun` or `srun`:
    /// the MPI library's transports (shared memory, InfiniBand, ...) carry the connections;
    /// the registry stays on tcp in rank 0.
    Mpi,
}

impl Driver {
    /// The name `IPL_DRIVER` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Inproc => "inproc",
            Driver::Tcp => "tcp",
            Driver::Wan => "wan",
            Driver::Shm => "shm",
            Driver::Mpi => "mpi",
        }
    }
}

/// Byte order of the data a node writes. `Native` is the normal case; the others force a specific
/// order so that the receiver's swapping path can be exercised on any machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// The machine's own order.
    Native,
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

impl ByteOrder {
    /// Whether data written in this order must be swapped by a reader on this machine.
    pub(crate) fn is_swapped(self) -> bool {
        match self {
            ByteOrder::Native => false,
            ByteOrder::Little => cfg!(target_endian = "big"),
            ByteOrder::Big => cfg!(target_endian = "little"),
        }
    }
}

/// The longest location name, in bytes: every node's id carries it to every peer.
pub const MAX_LOCATION: usize = 128;

/// Emulated wide-area link between locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WanLink {
    /// One-way latency added to every message between different locations.
    pub latency: Duration,
    /// Bandwidth limit in bytes per second between different locations (None: unlimited).
    pub bandwidth: Option<u64>,
}

/// How the mpi driver sends large parts that a message borrows from the caller (`write_bytes`,
/// `write_slice`; parts of 64 KiB and more), set by `IPL_MPI_SENDS`. A part sent from the
/// caller's memory costs no copy, but its send returns only once MPI is done with it: once the
/// receiver has taken it, or, where the receiver does not read, once its process has taken it
/// into memory of its own when asked (the receiving process's progress thread may sleep up to
/// 2 ms). A copied part lets the send return at once, up to a window of 4 MiB per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MpiSends {
    /// From the caller's memory while the connection is in step: once its receiver, waiting in
    /// a read of a large part, has said so in time, until the receiving process had to take two
    /// sends in a row; copied otherwise (`auto`, the default).
    #[default]
    Auto,
    /// As `Auto`, but every connection starts in step, and is tried in step again after a while
    /// of copies: for programs whose receivers read large messages as they come, where the
    /// first messages may then go without a copy too (`direct`).
    Direct,
    /// Always copied: a send never waits for its receiving process (`copied`). What every
    /// connection does where the job outlives ranks that die (`mpirun --enable-recovery`),
    /// whatever this says: a send to a dead rank would never complete.
    Copied,
}

/// Everything a node needs to join a pool. Its `Debug` form shows every field but the secret.
#[derive(Clone)]
pub struct Config {
    /// Pool name; nodes with the same name (and registry) form one pool.
    pub pool: String,
    /// Size of a closed pool (`wait_closed` returns when this many have joined); None: open pool.
    pub size: Option<u32>,
    /// Requested rank (launchers assign ranks); None: the registry picks the lowest free rank.
    pub rank: Option<u32>,
    /// Registry address `host:port` (tcp and wan drivers); several candidates may be given
    /// separated by commas (`10.0.0.1:7777,192.168.1.5:7777`), tried in turn.
    pub server: Option<String>,
    /// When set, this node runs the registry itself, listening here (e.g. `0.0.0.0:17777`),
    /// before it joins: rank 0 of a pool started by `mpirun` or `srun`.
    pub registry_bind: Option<String>,
    /// How long a node that runs the registry keeps it up after leaving, until every other
    /// member has left (so that the others can finish), at most.
    pub registry_linger: Duration,
    /// The rank whose process runs the registry, where a member does (rank 0 under `mpirun`
    /// and `srun`): losing the registry then means that member died.
    pub registry_rank: Option<u32>,
    /// Shared secret every connection must prove knowledge of.
    pub secret: String,
    /// This node's location (cluster name).
    pub location: String,
    /// Host name or address this node listens on and advertises. Empty: the local address of
    /// this host's route toward the registry (never loopback unless the registry is on
    /// loopback), found when the node joins.
    pub host: String,
    /// The driver.
    pub driver: Driver,
    /// Wide-area emulation between different locations (wan driver).
    pub wan: WanLink,
    /// Interval between heartbeats to the registry.
    pub heartbeat: Duration,
    /// A node silent for this long is declared dead; a registry that answers none of a
    /// node's heartbeats for this long cuts the node off from its pool.
    pub death_timeout: Duration,
    /// How long `connect` retries a missing port, and how long joining may take.
    pub connect_timeout: Duration,
    /// How long `wait_closed` waits for the pool to fill.
    pub join_timeout: Duration,
    /// How long a receiver spins before parking.
    pub spin: Duration,
    /// Byte order of written data (tests force the swapped path with this).
    pub byte_order: ByteOrder,
    /// Largest message, in bytes, this node sends or accepts (default [`DEFAULT_MAX_MESSAGE`]).
    /// A receive port tells every sender its limit when they connect, so a message over either
    /// side's limit fails its `finish` with [`Error::MessageTooLarge`]; a peer that sends one
    /// anyway loses that connection.
    pub max_message: u64,
    /// Size in bytes of the ring of each shared-memory connection (a power of two from 4 KiB
    /// to 1 GiB; default 256 KiB): what a sender may write ahead of its receiver, as a socket's
    /// buffers do for tcp. Larger parts wait for the receiver, which copies them straight from
    /// the sender's memory where the system allows it ([`Config::shm_single_copy`]), or stream
    /// through it as the receiver reads.
    pub shm_ring: usize,
    /// Whether receivers of shared-memory connections read parts of at least 32 KiB straight from
    /// the sender's memory (one copy, where the system allows reading another process's memory)
    /// instead of through the ring (two copies, made by both sides at once; what waits too long for
    /// room there is buffered either way); default true (`IPL_SHM_SINGLE_COPY`), and a receive port
    /// may still refuse it
    /// ([`ReceivePortBuilder::single_copy`](crate::ReceivePortBuilder::single_copy)). Which way
    /// streams faster depends on where the two processes run: on the 2-core virtual machines this
    /// was measured on, 100 KB messages streamed through the ring at 27 GB/s or at 6.6 GB/s, run by
    /// run, and by single copy at 11 to 12 GB/s either way (`results/ipl-bench-20261124-2056` and
    /// `results/ipl-bench-20261124-2028` against
    /// `results/ipl-bench-throughput-single-copy-20261124-2029`), although the kernel's copy itself
    /// takes 4 to 8 times a plain one there (`results/copy-cost-20261124-2029`).
    pub shm_single_copy: bool,
    /// How the mpi driver sends large parts a message borrows (`IPL_MPI_SENDS`: `auto`,
    /// `direct` or `copied`; see [`MpiSends`]).
    pub mpi_sends: MpiSends,
    /// The parallel launcher (`mpirun`, `srun`) the pool was read from, if any.
    pub launcher: Option<Launcher>,
    /// Join a closed pool that is already full and running, growing it, rather than a pool of
    /// `size` (which must then be None): the join waits, within the join timeout, until the
    /// pool has filled (`IPL_JOIN_RUNNING=1`; what `ipl-run --join` sets).
    pub join_running: bool,
}

/// The default largest message: 128 MiB. That is more than the apps send in one message at
/// their reference sizes (a whole 4096 x 4096 raytracer image is 48 MiB, SOR rows of 65536
/// points 512 KiB, Barnes-Hut exchanges about 100 bytes per body) and twice the 64 MiB that
/// bsp buffers before it sends early (so an early send, the budget plus one packet, fits).
pub const DEFAULT_MAX_MESSAGE: u64 = 128 << 20;

/// The longest duration a setting accepts: a year. Deadlines are computed by adding durations
/// to the clock, which must not overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Config {
            pool,
            size,
            rank,
            server,
            registry_bind,
            registry_linger,
            registry_rank,
            secret,
            location,
            host,
            driver,
            wan,
            heartbeat,
            death_timeout,
            connect_timeout,
            join_timeout,
            spin,
            byte_order,
            max_message,
            shm_ring,
            shm_single_copy,
            mpi_sends,
            launcher,
            join_running,
        } = self;
        f.debug_struct("Config")
            .field("pool", pool)
            .field("size", size)
            .field("rank", rank)
            .field("server", server)
            .field("registry_bind", registry_bind)
            .field("registry_linger", registry_linger)
            .field("registry_rank", registry_rank)
            .field("secret", &if secret.is_empty() { "" } else { "<hidden>" })
            .field("location", location)
            .field("host", host)
            .field("driver", driver)
            .field("wan", wan)
            .field("heartbeat", heartbeat)
            .field("death_timeout", death_timeout)
            .field("connect_timeout", connect_timeout)
            .field("join_timeout", join_timeout)
            .field("spin", spin)
            .field("byte_order", byte_order)
            .field("max_message", max_message)
            .field("shm_ring", shm_ring)
            .field("shm_single_copy", shm_single_copy)
            .field("mpi_sends", mpi_sends)
            .field("launcher", launcher)
            .field("join_running", join_running)
            .finish()
    }
}

impl Config {
    /// An in-process pool of `size` nodes called `pool`: the embedded default, no network.
    pub fn inproc(pool: impl Into<String>, size: u32) -> Config {
        Config {
            pool: pool.into(),
            size: Some(size),
            rank: None,
            server: None,
            registry_bind: None,
            registry_linger: Duration::from_secs(60),
            registry_rank: None,
            secret: String::new(),
            location: "local".into(),
            host: "localhost".into(),
            driver: Driver::Inproc,
            wan: WanLink::default(),
            heartbeat: Duration::from_secs(2),
            death_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            join_timeout: Duration::from_secs(120),
            spin: Duration::from_micros(200),
            byte_order: ByteOrder::Native,
            max_message: DEFAULT_MAX_MESSAGE,
            shm_ring: 256 * 1024,
            shm_single_copy: true,
            mpi_sends: MpiSends::Auto,
            launcher: None,
            join_running: false,
        }
    }

    /// A tcp pool of `size` nodes called `pool` whose registry listens at `server`.
    pub fn tcp(
        pool: impl Into<String>,
        size: u32,
        server: impl Into<String>,
        secret: impl Into<String>,
    ) -> Config {
        Config {
            server: Some(server.into()),
            secret: secret.into(),
            host: "127.0.0.1".into(),
            driver: Driver::Tcp,
            ..Config::inproc(pool, size)
        }
    }

    /// Like [`Config::tcp`], but processes on the same host talk through shared memory.
    pub fn shm(
        pool: impl Into<String>,
        size: u32,
        server: impl Into<String>,
        secret: impl Into<String>,
    ) -> Config {
        Config {
            driver: Driver::Shm,
            ..Config::tcp(pool, size, server, secret)
        }
    }

    /// Reads the configuration from `IPL_*` environment variables, or from the environment of
    /// a parallel launcher (`mpirun`, `srun`; see [`crate::launcher`]) when no `IPL_POOL`,
    /// `IPL_POOL_SIZE` or `IPL_RANK` is set.
    ///
    /// `IPL_POOL` (name, default `default`), `IPL_POOL_SIZE` (closed-pool size), `IPL_RANK`,
    /// `IPL_SERVER` (registry `host:port`, or several separated by commas), `IPL_SECRET`,
    /// `IPL_LOCATION`, `IPL_HOST` (the address to listen on and advertise; default: the local
    /// address of the route toward the registry), `IPL_DRIVER` (`inproc`, `tcp`, `wan`, `shm`,
    /// and `mpi` under `mpirun` or `srun` in builds with the `mpi` feature),
    /// `IPL_WAN_LATENCY` (e.g. `20ms`), `IPL_WAN_BANDWIDTH` (bytes/s, with K/M/G suffix, or
    /// `100Mbit`), `IPL_HEARTBEAT`, `IPL_DEATH_TIMEOUT`, `IPL_CONNECT_TIMEOUT`,
    /// `IPL_JOIN_TIMEOUT`, `IPL_SPIN`, `IPL_REGISTRY_LINGER` (durations), `IPL_BYTE_ORDER`
    /// (`native`, `little`, `big`), `IPL_MAX_MESSAGE` (bytes), `IPL_SHM_RING` (bytes),
    /// `IPL_SHM_SINGLE_COPY` (`0` or `1`), `IPL_MPI_SENDS` (`auto`, `direct` or `copied`, see
    /// [`MpiSends`]), `IPL_JOIN_RUNNING` (`1`: grow a running pool, see
    /// [`Config::join_running`]).
    ///
    /// Under a launcher: the pool is the launcher's job, with its size and ranks; rank 0 runs the
    /// registry (unless `IPL_REGISTRY=external`: a registry started otherwise, at `IPL_SERVER`);
    /// the others find it at `IPL_SERVER`, or else where the launcher's environment says rank 0
    /// runs, at a port derived from the job id; the secret is `IPL_SECRET` or derived from the
    /// job id.
    ///
    /// With no variables set this is a one-node in-process pool. With `IPL_SERVER` set the driver
    /// defaults to shm: shared memory between processes of one host, tcp between hosts (wan
    /// when a wan latency or bandwidth is given). `IPL_DRIVER=tcp` keeps every connection on
    /// tcp.
    ///
    /// `IPL_SECRET_STDIN=1` takes the secret from the first line of standard input instead of
    /// `IPL_SECRET` (how `ipl-run --hostfile` passes it, so that it never appears on a command
    /// line); the line is read once per process. `IPL_STDIN_LIFELINE=1` (which `ipl-run
    /// --hostfile` sets too) hands standard input, which then stays open for as long as the
    /// remote shell that started the process, to a guardian process that kills this one with
    /// SIGKILL once it closes, stopped or not; the process gets /dev/null instead.
    pub fn from_env() -> Result<Config> {
        let stdin_secret = match std::env::var(SECRET_STDIN).ok().as_deref().map(str::trim) {
            None | Some("") | Some("0") => None,
            Some("1") => Some(secret_from_stdin()?),
            Some(other) => {
                return Err(Error::config(
                    SECRET_STDIN,
                    format!("'{other}' is not 0 or 1"),
                ))
            }
        };
        // After the secret, which is read from the same standard input.
        if switch_from_env(crate::lifeline::STDIN_LIFELINE)? == Some(true) {
            crate::lifeline::hold()?;
        }
        Config::from_lookup(|k| match (k, &stdin_secret) {
            ("IPL_SECRET", Some(s)) => Some(s.clone()),
            _ => std::env::var(k).ok(),
        })
    }

    /// Like [`Config::from_env`] but reading variables through `get` (for tests and launchers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let pool_vars = ["IPL_POOL", "IPL_POOL_SIZE", "IPL_RANK"]
            .iter()
            .any(|k| get(k).is_some());
        let launcher = if pool_vars {
            None
        } else {
            Launcher::detect(&get)?
        };
        let mut server = get("IPL_SERVER").filter(|s| !s.trim().is_empty());
        // Read under mpirun or srun only, but checked everywhere: a bad value is refused
        // rather than ignored.
        let external = match get("IPL_REGISTRY").as_deref().map(str::trim) {
            None | Some("") | Some("rank0") => false,
            Some("external") => true,
            Some(other) => {
                return Err(Error::config(
                    "IPL_REGISTRY",
                    format!("'{other}' is not one of rank0, external"),
                ))
            }
        };
        let mut c = match &launcher {
            None => {
                let pool = get("IPL_POOL").unwrap_or_else(|| "default".into());
                let size = match get("IPL_POOL_SIZE") {
                    Some(s) => Some(parse_count("IPL_POOL_SIZE", &s)?),
                    None => None,
                };
                let mut c = Config::inproc(pool, size.unwrap_or(1));
                c.size = if server.is_some() {
                    size
                } else {
                    Some(size.unwrap_or(1))
                };
                if let Some(r) = get("IPL_RANK") {
                    c.rank =
                        Some(r.trim().parse().map_err(|_| {
                            Error::config("IPL_RANK", format!("'{r}' is not a rank"))
                        })?);
                }
                if let Some(s) = get("IPL_SECRET") {
                    c.secret = s;
                }
                c
            }
            Some(l) => {
                let key = l.job_key(server.as_deref())?;
                let port = from_launcher::job_port(&key);
                let addr = match server.take() {
                    Some(s) => s,
                    None if l.registry_hosts.is_empty() => {
                        return Err(Error::config(
                            "IPL_SERVER",
                            format!(
                                "rank {} of {} started by {}: the environment does not say where \
                                 rank 0 runs ({}); set IPL_SERVER=host:port (rank 0's host and a \
                                 free port) for every rank",
                                l.rank,
                                l.size,
                                l.kind.name(),
                                l.registry_source
                            ),
                        ))
                    }
                    None => l
                        .registry_hosts
                        .iter()
                        .map(|h| format!("{h}:{port}"))
                        .collect::<Vec<_>>()
                        .join(","),
                };
                let mut c = Config::inproc(key.clone(), l.size);
                c.rank = Some(l.rank);
                if !external {
                    c.registry_rank = Some(0);
                    if l.rank == 0 {
                        c.registry_bind = Some(format!("0.0.0.0:{}", server_port(&addr)?));
                    }
                }
                c.secret = get("IPL_SECRET").unwrap_or_else(|| from_launcher::job_secret(&key));
                server = Some(addr);
                c
            }
        };
        c.launcher = launcher;
        // Its length is checked with the rest, by `validate` below.
        if let Some(l) = get("IPL_LOCATION") {
            c.location = l;
        }
        if let Some(d) = get("IPL_WAN_LATENCY") {
            c.wan.latency = parse_duration("IPL_WAN_LATENCY", &d)?;
        }
        if let Some(b) = get("IPL_WAN_BANDWIDTH") {
            c.wan.bandwidth = Some(parse_bandwidth(&b)?);
        }
        let wan_requested = c.wan.latency > Duration::ZERO || c.wan.bandwidth.is_some();
        c.driver = match get("IPL_DRIVER").as_deref() {
            Some("inproc") => Driver::Inproc,
            Some("tcp") => Driver::Tcp,
            Some("wan") => Driver::Wan,
            Some("shm") => Driver::Shm,
            Some("mpi") if !cfg!(feature = "mpi") => return Err(no_mpi()),
            Some("mpi") if c.launcher.is_none() => {
                return Err(Error::config(
                    "IPL_DRIVER",
                    "mpi needs a program started by mpirun or srun, which set the rank and \
                     size of every process (OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...); none is \
                     set here, or IPL_POOL, IPL_POOL_SIZE or IPL_RANK overrides it: run \
                     `mpirun -n N program` or `srun -n N program`, or choose another driver",
                ))
            }
            Some("mpi") => Driver::Mpi,
            Some(other) => {
                return Err(Error::config(
                    "IPL_DRIVER",
                    format!("'{other}' is not one of inproc, tcp, wan, shm, mpi"),
                ))
            }
            None if server.is_some() && wan_requested => Driver::Wan,
            None if server.is_some() => Driver::Shm,
            None => Driver::Inproc,
        };
        if let (Driver::Inproc, Some(l)) = (c.driver, &c.launcher) {
            return Err(Error::config(
                "IPL_DRIVER",
                format!(
                    "inproc cannot make one pool of the {} processes started by {}",
                    l.size,
                    l.kind.name()
                ),
            ));
        }
        if let (Driver::Inproc, Some(server)) = (c.driver, &server) {
            return Err(Error::config(
                "IPL_DRIVER",
                format!(
                    "inproc makes a pool of threads of one process, but IPL_SERVER={server} \
                     names a registry for a pool of processes: use tcp or wan (or leave \
                     IPL_DRIVER unset)"
                ),
            ));
        }
        if c.driver != Driver::Inproc {
            // Found when joining: the route toward the registry.
            c.host = String::new();
            if server.is_none() {
                return Err(Error::config(
                    "IPL_SERVER",
                    "the tcp, wan and shm drivers need the registry address (host:port)",
                ));
            }
        }
        c.server = server;
        if let Some(h) = get("IPL_HOST") {
            c.host = h;
        }
        for (key, field) in [
            ("IPL_HEARTBEAT", &mut c.heartbeat),
            ("IPL_DEATH_TIMEOUT", &mut c.death_timeout),
            ("IPL_CONNECT_TIMEOUT", &mut c.connect_timeout),
            ("IPL_JOIN_TIMEOUT", &mut c.join_timeout),
            ("IPL_SPIN", &mut c.spin),
            ("IPL_REGISTRY_LINGER", &mut c.registry_linger),
        ] {
            if let Some(v) = get(key) {
                *field = parse_duration(key, &v)?;
            }
        }
        if let Some(o) = get("IPL_BYTE_ORDER") {
            c.byte_order = match o.as_str() {
                "native" => ByteOrder::Native,
                "little" => ByteOrder::Little,
                "big" => ByteOrder::Big,
                _ => {
                    return Err(Error::config(
                        "IPL_BYTE_ORDER",
                        format!("'{o}' is not one of native, little, big"),
                    ))
                }
            };
        }
        if let Some(m) = get("IPL_MAX_MESSAGE") {
            c.max_message = parse_bytes("IPL_MAX_MESSAGE", &m)?;
        }
        match get("IPL_JOIN_RUNNING").as_deref().map(str::trim) {
            None | Some("") | Some("0") => {}
            Some("1") if c.size.is_none() && c.rank.is_none() => c.join_running = true,
            Some("1") => {
                return Err(Error::config(
                    "IPL_JOIN_RUNNING",
                    "a node joining a running pool gets its rank from the registry and names no \
                     pool size: unset IPL_POOL_SIZE and IPL_RANK",
                ))
            }
            Some(other) => {
                return Err(Error::config(
                    "IPL_JOIN_RUNNING",
                    format!("'{other}' is not 0 or 1"),
                ))
            }
        }
        if let Some(r) = get("IPL_SHM_RING") {
            // Its bounds are checked with the rest, by `validate` below; a count past what
            // `usize` holds stays past them.
            c.shm_ring = usize::try_from(parse_bytes("IPL_SHM_RING", &r)?).unwrap_or(usize::MAX);
        }
        if let Some(v) = get("IPL_SHM_SINGLE_COPY") {
            c.shm_single_copy = match v.trim() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                other => {
                    return Err(Error::config(
                        "IPL_SHM_SINGLE_COPY",
                        format!("'{other}' is not 0 or 1"),
                    ))
                }
            };
        }
        if let Some(v) = get("IPL_MPI_SENDS") {
            c.mpi_sends = match v.trim() {
                "auto" => MpiSends::Auto,
                "direct" => MpiSends::Direct,
                "copied" => MpiSends::Copied,
                other => {
                    return Err(Error::config(
                        "IPL_MPI_SENDS",
                        format!("'{other}' is not auto, direct or copied"),
                    ))
                }
            };
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks the settings a node cannot run with, as [`Ibis::join`](crate::Ibis::join) does
    /// before anything starts, so that a configuration built in code gets the errors
    /// [`Config::from_env`] gives for the same values: each names the variable that sets the
    /// field. Durations are at most [`MAX_DURATION`] (deadlines are the clock plus them), the
    /// heartbeat is non-zero and shorter than the death timeout, a closed pool has 1 to
    /// 1,000,000 members, a message may hold at least 1 byte, and the shared-memory ring is a
    /// power of two from 4 KiB to 1 GiB.
    pub fn validate(&self) -> Result<()> {
        if self.pool.is_empty() || self.pool.len() > 256 {
            return Err(Error::config(
                "IPL_POOL",
                "pool name must be 1 to 256 bytes",
            ));
        }
        if let Some(n) = self.size {
            if !(1..=MAX_POOL_SIZE).contains(&n) {
                return Err(Error::config(
                    "IPL_POOL_SIZE",
                    format!("{n} is not a pool size between 1 and {MAX_POOL_SIZE}"),
                ));
            }
        }
        check_location("IPL_LOCATION", &self.location)?;
        // A host name is at most 253 characters (DNS); the node advertises it to every peer.
        if self.host.len() > 255 {
            return Err(Error::config(
                "IPL_HOST",
                format!(
                    "{} bytes: a host name or address is at most 255",
                    self.host.len()
                ),
            ));
        }
        for (key, d) in [
            ("IPL_HEARTBEAT", self.heartbeat),
            ("IPL_DEATH_TIMEOUT", self.death_timeout),
            ("IPL_CONNECT_TIMEOUT", self.connect_timeout),
            ("IPL_JOIN_TIMEOUT", self.join_timeout),
            ("IPL_SPIN", self.spin),
            ("IPL_REGISTRY_LINGER", self.registry_linger),
            ("IPL_WAN_LATENCY", self.wan.latency),
        ] {
            check_duration(key, d)?;
        }
        if self.heartbeat.is_zero() || self.heartbeat >= self.death_timeout {
            return Err(Error::config(
                "IPL_HEARTBEAT",
                format!(
                    "heartbeat {:?} must be non-zero and shorter than the death timeout {:?}",
                    self.heartbeat, self.death_timeout
                ),
            ));
        }
        check_bandwidth("IPL_WAN_BANDWIDTH", self.wan.bandwidth)?;
        if self.max_message == 0 {
            return Err(Error::config(
                "IPL_MAX_MESSAGE",
                "a largest message of 0 bytes refuses every message but an empty one",
            ));
        }
        if !self.shm_ring.is_power_of_two() || !(4096..=1 << 30).contains(&self.shm_ring) {
            return Err(Error::config(
                "IPL_SHM_RING",
                format!(
                    "{} bytes is not a power of two from 4 KiB to 1 GiB",
                    self.shm_ring
                ),
            ));
        }
        Ok(())
    }
}

/// The most members a closed pool may have.
const MAX_POOL_SIZE: u32 = 1_000_000;

/// The error for `IPL_DRIVER=mpi` in a build without the `mpi` feature.
pub(crate) fn no_mpi() -> Error {
    Error::config(
        "IPL_DRIVER",
        "mpi: this program was built without the mpi driver; build it with the `mpi` feature \
         of ipl (e.g. `cargo build --release --features ipl/mpi`, which needs an MPI library \
         and libclang)",
    )
}

/// The variable that makes [`Config::from_env`] read the secret from standard input.
pub const SECRET_STDIN: &str = "IPL_SECRET_STDIN";

/// How long [`Config::from_env`] waits for the secret on standard input.
const SECRET_STDIN_WAIT: Duration = Duration::from_secs(30);

/// The secret on the first line of standard input, read once per process (later calls get the
/// same answer): the line must arrive within [`SECRET_STDIN_WAIT`] and hold 1 to 4096 bytes.
fn secret_from_stdin() -> Result<String> {
    static SECRET: std::sync::OnceLock<std::result::Result<String, String>> =
        std::sync::OnceLock::new();
    SECRET
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            // A thread of its own, so that a standard input that never delivers cannot hold
            // the node up beyond the wait; such a thread stays blocked, which costs nothing.
            std::thread::Builder::new()
                .name("ipl-secret-stdin".into())
                .spawn(move || {
                    use std::io::{BufRead, Read};
                    let mut line = Vec::new();
                    let r = std::io::stdin()
                        .lock()
                        .take(4097)
                        .read_until(b'\n', &mut line);
                    let _ = tx.send(r.map(|_| line));
                })
                .map_err(|e| format!("cannot start a thread to read standard input: {e}"))?;
            let line = match rx.recv_timeout(SECRET_STDIN_WAIT) {
                Ok(Ok(line)) => line,
                Ok(Err(e)) => return Err(format!("cannot read standard input: {e}")),
                Err(_) => {
                    return Err(format!(
                        "no secret arrived on standard input within {SECRET_STDIN_WAIT:?}"
                    ))
                }
            };
            let line = line.strip_suffix(b"\n").unwrap_or(&line);
            match std::str::from_utf8(line) {
                Ok("") => Err("standard input held no secret (a remote shell must pass \
                               standard input on, as ssh does without -n)"
                    .into()),
                Ok(s) if s.len() <= 4096 => Ok(s.to_owned()),
                Ok(_) => Err("the secret on standard input is longer than 4096 bytes".into()),
                Err(_) => Err("the secret on standard input is not UTF-8".into()),
            }
        })
        .clone()
        .map_err(|why| Error::config(SECRET_STDIN, why))
}

/// The port of the first `host:port` of a registry address list.
fn server_port(server: &str) -> Result<u16> {
    let first = server.split(',').next().unwrap_or("").trim();
    match first.rsplit_once(':').map(|(_, p)| p.parse::<u16>()) {
        Some(Ok(p)) if p != 0 => Ok(p),
        _ => Err(Error::config(
            "IPL_SERVER",
            format!("'{first}' is not host:port with a port from 1 to 65535"),
        )),
    }
}

fn parse_count(key: &str, s: &str) -> Result<u32> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_POOL_SIZE).contains(&n) => Ok(n),
        _ => Err(Error::config(
            key,
            format!("'{s}' is not a count between 1 and {MAX_POOL_SIZE}"),
        )),
    }
}

/// Parses `20ms`, `1.5s`, `10s`, `250us`, up to [`MAX_DURATION`].
pub fn parse_duration(key: &str, s: &str) -> Result<Duration> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| Error::config(key, format!("'{s}' is not a duration ({e})")))?;
    // The text as given, which names the value better than the duration it reads as.
    if d > MAX_DURATION {
        return Err(Error::config(
            key,
            format!("'{s}' is longer than the longest supported duration, 365 days"),
        ));
    }
    Ok(d)
}

/// The on-off switch that the environment variable `key` holds: `Some(true)` for `1`,
/// `Some(false)` for `0`, `None` where it is unset or empty, for the caller's default.
///
/// # Errors
/// [`Error::Config`] naming `key` and the value for anything else, rather than a default
/// taken without a word.
pub fn switch_from_env(key: &str) -> Result<Option<bool>> {
    match std::env::var_os(key) {
        None => Ok(None),
        Some(v) => match v.to_str().map(str::trim) {
            Some("") => Ok(None),
            Some("1") => Ok(Some(true)),
            Some("0") => Ok(Some(false)),
            _ => Err(Error::config(key, format!("{v:?} is not 0 or 1"))),
        },
    }
}

/// Refuses a duration longer than [`MAX_DURATION`] for the setting `key`: deadlines are the
/// clock plus such durations.
pub(crate) fn check_duration(key: &str, d: Duration) -> Result<()> {
    if d > MAX_DURATION {
        return Err(Error::config(
            key,
            format!("{d:?} is longer than the longest supported duration, 365 days"),
        ));
    }
    Ok(())
}

/// Refuses a location name of no byte or more than [`MAX_LOCATION`] for the setting `key`.
pub(crate) fn check_location(key: &str, location: &str) -> Result<()> {
    if location.is_empty() || location.len() > MAX_LOCATION {
        return Err(Error::config(
            key,
            format!(
                "{} bytes: a location is 1 to {MAX_LOCATION} characters",
                location.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses a wide-area bandwidth of 0 bytes per second for the setting `key`.
pub(crate) fn check_bandwidth(key: &str, bandwidth: Option<u64>) -> Result<()> {
    if bandwidth == Some(0) {
        return Err(Error::config(
            key,
            "a bandwidth of 0 bytes/s carries nothing; the slowest link is 1 byte/s",
        ));
    }
    Ok(())
}

/// Parses a byte count with an optional K/M/G (powers of 1000) or Ki/Mi/Gi suffix, which `B`
/// and `/s` may follow (`256KiB`, `10MB/s`).
pub fn parse_bytes(key: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| Error::config(key, format!("'{s}' is not a number of bytes")))?;
    // `B` and a rate's `/s` may follow the unit: `10MB/s` is `10M`.
    let mult = match unit.trim().trim_end_matches("/s").trim_end_matches('B') {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1048576.0,
        "Gi" => 1073741824.0,
        _ => return Err(Error::config(key, format!("'{s}' has an unknown unit"))),
    };
    let v = n * mult;
    if !(v.is_finite() && (1.0..1.8e19).contains(&v)) {
        return Err(Error::config(key, format!("'{s}' is out of range")));
    }
    Ok(v as u64)
}

/// Parses a bandwidth: bytes/s as in [`parse_bytes`], or bits/s with a `bit` suffix (`100Mbit`).
pub fn parse_bandwidth(s: &str) -> Result<u64> {
    let key = "IPL_WAN_BANDWIDTH";
    let t = s.trim();
    if let Some(bits) = t.strip_suffix("bit").or_else(|| t.strip_suffix("bit/s")) {
        Ok((parse_bytes(key, bits)? / 8).max(1))
    } else {
        parse_bytes(key, t)
    }
}

/// An environment of the given variables only, for [`Config::from_lookup`] in tests.
#[cfg(test)]
pub(crate) fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let v: Vec<(String, String)> = vars
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_environment_is_a_one_node_inproc_pool() {
        let c = Config::from_lookup(lookup(&[])).unwrap();
        assert_eq!(c.driver, Driver::Inproc);
        assert_eq!(c.size, Some(1));
    }

    /// A location out of bounds in the environment is refused naming the variable (by
    /// `validate`, which checks a configuration built in code the same way).
    #[test]
    fn a_location_out_of_bounds_names_the_variable() {
        for l in [String::new(), "x".repeat(MAX_LOCATION + 1)] {
            let e = Config::from_lookup(lookup(&[("IPL_LOCATION", &l)])).unwrap_err();
            assert!(e.to_string().contains("IPL_LOCATION"), "{e}");
        }
        let l = "x".repeat(MAX_LOCATION);
        assert_eq!(
            Config::from_lookup(lookup(&[("IPL_LOCATION", &l)]))
                .unwrap()
                .location,
            l
        );
    }

    /// How the mpi driver sends large borrowed parts: auto by default, each spelling taken,
    /// anything else refused naming the variable.
    #[test]
    fn mpi_sends_are_auto_direct_or_copied() {
        let c = Config::from_lookup(lookup(&[])).unwrap();
        assert_eq!(c.mpi_sends, MpiSends::Auto);
        for (text, want) in [
            ("auto", MpiSends::Auto),
            ("direct", MpiSends::Direct),
            (" copied ", MpiSends::Copied),
        ] {
            let c = Config::from_lookup(lookup(&[("IPL_MPI_SENDS", text)])).unwrap();
            assert_eq!(c.mpi_sends, want, "{text}");
        }
        let e = Config::from_lookup(lookup(&[("IPL_MPI_SENDS", "zero-copy")])).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("IPL_MPI_SENDS") && e.contains("zero-copy"),
            "{e}"
        );
    }

    #[test]
    fn server_selects_shm_and_latency_selects_wan() {
        let c = Config::from_lookup(lookup(&[("IPL_SERVER", "127.0.0.1:5000")])).unwrap();
        assert_eq!(c.driver, Driver::Shm);
        let c = Config::from_lookup(lookup(&[
            ("IPL_SERVER", "127.0.0.1:5000"),
            ("IPL_DRIVER", "tcp"),
        ]))
        .unwrap();
        assert_eq!(c.driver, Driver::Tcp);
        let c = Config::from_lookup(lookup(&[
            ("IPL_SERVER", "127.0.0.1:5000"),
            ("IPL_WAN_LATENCY", "20ms"),
            ("IPL_WAN_BANDWIDTH", "100Mbit"),
        ]))
        .unwrap();
        assert_eq!(c.driver, Driver::Wan);
        assert_eq!(c.wan.latency, Duration::from_millis(20));
        assert_eq!(c.wan.bandwidth, Some(12_500_000));
    }

    #[test]
    fn byte_counts_and_bandwidths_take_their_units() {
        for (text, bytes) in [
            ("4096", 4096),
            ("2Gi", 2 << 30),
            ("256KiB", 256 << 10),
            ("1.5M", 1_500_000),
            ("10MB", 10_000_000),
        ] {
            assert_eq!(
                parse_bytes("IPL_MAX_MESSAGE", text).unwrap(),
                bytes,
                "{text}"
            );
        }
        for (text, bytes_per_second) in [
            ("100MB/s", 100_000_000),
            ("100M/s", 100_000_000),
            ("100Mbit", 12_500_000),
            ("100Mbit/s", 12_500_000),
        ] {
            assert_eq!(parse_bandwidth(text).unwrap(), bytes_per_second, "{text}");
        }
        for bad in ["", "10X", "0", "-1", "5MB/h"] {
            let e = parse_bytes("IPL_MAX_MESSAGE", bad).unwrap_err().to_string();
            assert!(e.contains("IPL_MAX_MESSAGE"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("IPL_POOL_SIZE", "zero"),
            ("IPL_POOL_SIZE", "0"),
            ("IPL_DRIVER", "udp"),
            ("IPL_WAN_LATENCY", "soon"),
            ("IPL_BYTE_ORDER", "middle"),
            ("IPL_RANK", "-1"),
            ("IPL_REGISTRY", "rank1"),
            ("IPL_SHM_RING", "3000"),
            ("IPL_SHM_RING", "2Gi"),
        ] {
            let e = Config::from_lookup(lookup(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(k), "{e}");
        }
        let e = Config::from_lookup(lookup(&[("IPL_DRIVER", "tcp")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("IPL_SERVER"), "{e}");
    }

    #[test]
    fn durations_that_would_overflow_a_deadline_are_refused() {
        for key in [
            "IPL_SPIN",
            "IPL_CONNECT_TIMEOUT",
            "IPL_DEATH_TIMEOUT",
            "IPL_JOIN_TIMEOUT",
            "IPL_HEARTBEAT",
            "IPL_REGISTRY_LINGER",
            "IPL_WAN_LATENCY",
        ] {
            let e = Config::from_lookup(lookup(&[(key, "500000000000y")]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("365 days"), "{e}");
        }
        let c = Config::from_lookup(lookup(&[("IPL_JOIN_TIMEOUT", "365days")])).unwrap();
        assert_eq!(c.join_timeout, MAX_DURATION);
    }

    #[test]
    fn a_node_built_in_code_with_absurd_settings_is_refused_naming_them() {
        type Set = fn(&mut Config);
        let cases: [(&str, Set); 13] = [
            ("IPL_JOIN_TIMEOUT", |c| c.join_timeout = Duration::MAX),
            ("IPL_CONNECT_TIMEOUT", |c| c.connect_timeout = Duration::MAX),
            ("IPL_DEATH_TIMEOUT", |c| c.death_timeout = Duration::MAX),
            ("IPL_SPIN", |c| c.spin = Duration::MAX),
            ("IPL_REGISTRY_LINGER", |c| c.registry_linger = Duration::MAX),
            ("IPL_HEARTBEAT", |c| c.heartbeat = Duration::ZERO),
            ("IPL_MAX_MESSAGE", |c| c.max_message = 0),
            ("IPL_SHM_RING", |c| c.shm_ring = 3),
            ("IPL_SHM_RING", |c| c.shm_ring = usize::MAX),
            ("IPL_POOL_SIZE", |c| c.size = Some(0)),
            ("IPL_POOL_SIZE", |c| c.size = Some(u32::MAX)),
            ("IPL_WAN_BANDWIDTH", |c| c.wan.bandwidth = Some(0)),
            ("IPL_HOST", |c| c.host = "h".repeat(256)),
        ];
        for (i, (key, set)) in cases.into_iter().enumerate() {
            let mut c = Config::inproc(format!("absurd-{}-{i}", std::process::id()), 1);
            set(&mut c);
            assert!(c.validate().is_err(), "{key}: {c:?}");
            // Joined and used, each of these hung, spun or panicked (a deadline past what the
            // clock can count) rather than failing.
            let e = crate::Ibis::join(c)
                .and_then(|ibis| {
                    let ty = crate::PortType::builder().build();
                    let rp = ibis.receive_port(&ty, "p")?;
                    let _ = rp.receive_timeout(Duration::from_millis(1));
                    ibis.pool().wait_closed()?;
                    Ok(ibis)
                })
                .err()
                .unwrap_or_else(|| panic!("{key}: accepted"))
                .to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        let c = Config::inproc(format!("sane-{}", std::process::id()), 1);
        c.validate().unwrap();
        crate::Ibis::join(c).unwrap();
    }

    #[test]
    fn inproc_with_a_registry_address_is_refused_at_once() {
        let e = Config::from_lookup(lookup(&[
            ("IPL_SERVER", "127.0.0.1:5000"),
            ("IPL_POOL_SIZE", "2"),
            ("IPL_DRIVER", "inproc"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("IPL_DRIVER") && e.contains("threads of one process"),
            "{e}"
        );
    }

    #[test]
    fn the_debug_form_hides_the_secret() {
        let c = Config::tcp("p", 2, "127.0.0.1:1", "sw0rdf1sh");
        let shown = format!("{c:?}");
        assert!(!shown.contains("sw0rdf1sh"), "{shown}");
        assert!(shown.contains("secret: \"<hidden>\""), "{shown}");
        assert!(shown.contains("max_message: 134217728"), "{shown}");
    }

    fn srun(rank: &str) -> Vec<(&'static str, String)> {
        vec![
            ("SLURM_PROCID", rank.to_string()),
            ("SLURM_STEP_ID", "2".into()),
            ("SLURM_JOB_ID", "4711".into()),
            ("SLURM_STEP_NUM_TASKS", "4".into()),
            ("SLURM_STEP_NUM_NODES", "2".into()),
            ("SLURM_STEP_NODELIST", "node[07-08]".into()),
        ]
    }

    fn with(base: Vec<(&'static str, String)>, more: &[(&'static str, &str)]) -> Config {
        let mut v = base;
        v.extend(more.iter().map(|(k, x)| (*k, x.to_string())));
        let r: Vec<(&str, &str)> = v.iter().map(|(k, x)| (*k, x.as_str())).collect();
        Config::from_lookup(lookup(&r)).unwrap()
    }

    #[test]
    fn srun_ranks_form_one_pool_with_the_registry_in_rank_0() {
        let zero = with(srun("0"), &[]);
        let two = with(srun("2"), &[]);
        assert_eq!(zero.pool, "slurm-4711.2");
        assert_eq!(zero.pool, two.pool);
        assert_eq!(
            (zero.size, zero.rank, two.rank),
            (Some(4), Some(0), Some(2))
        );
        assert_eq!(zero.driver, Driver::Shm);
        assert_eq!(zero.secret, two.secret);
        assert!(!zero.secret.is_empty());
        let port = crate::from_launcher::job_port("slurm-4711.2");
        assert_eq!(two.server, Some(format!("node07:{port}")));
        assert_eq!(zero.server, two.server);
        assert_eq!(zero.registry_bind, Some(format!("0.0.0.0:{port}")));
        assert_eq!(two.registry_bind, None);
        assert_eq!(
            two.host, "",
            "the route toward the registry, found when joining"
        );
        // IPL_SERVER and IPL_SECRET override what the job id gives.
        let c = with(
            srun("0"),
            &[("IPL_SERVER", "head:9000"), ("IPL_SECRET", "s3cret")],
        );
        assert_eq!(c.server.as_deref(), Some("head:9000"));
        assert_eq!(c.registry_bind.as_deref(), Some("0.0.0.0:9000"));
        assert_eq!(c.secret, "s3cret");
        let c = with(
            srun("0"),
            &[("IPL_SERVER", "head:9000"), ("IPL_REGISTRY", "external")],
        );
        assert_eq!(c.registry_bind, None);
        // Pool variables mean the process was started otherwise: the launcher is ignored.
        let c = with(srun("3"), &[("IPL_POOL_SIZE", "1")]);
        assert_eq!((c.driver, c.rank), (Driver::Inproc, None));
        assert!(c.launcher.is_none());
    }

    #[test]
    fn the_mpi_driver_needs_a_launcher_and_the_feature() {
        let e = Config::from_lookup(lookup(&[("IPL_DRIVER", "mpi")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("IPL_DRIVER"), "{e}");
        let mut v = srun("1");
        v.push(("IPL_DRIVER", "mpi".into()));
        let r: Vec<(&str, &str)> = v.iter().map(|(k, x)| (*k, x.as_str())).collect();
        let under_srun = Config::from_lookup(lookup(&r));
        if cfg!(feature = "mpi") {
            assert!(e.contains("mpirun or srun"), "{e}");
            let c = under_srun.unwrap();
            assert_eq!((c.driver, c.rank, c.size), (Driver::Mpi, Some(1), Some(4)));
        } else {
            assert!(e.contains("built without the mpi driver"), "{e}");
            let e = under_srun.unwrap_err().to_string();
            assert!(e.contains("built without the mpi driver"), "{e}");
            // A configuration made in code fails when the node joins, before anything starts.
            let mut c = Config::tcp("p", 2, "127.0.0.1:1", "s");
            c.driver = Driver::Mpi;
            let e = crate::Ibis::join(c).err().expect("refused").to_string();
            assert!(e.contains("built without the mpi driver"), "{e}");
        }
    }

    #[test]
    fn bad_launcher_settings_name_the_variable() {
        for (more, key) in [
            (vec![("IPL_SERVER", "head")], "IPL_SERVER"),
            (vec![("IPL_SERVER", "head:0")], "IPL_SERVER"),
            (vec![("IPL_DRIVER", "inproc")], "IPL_DRIVER"),
            (vec![("IPL_REGISTRY", "nowhere")], "IPL_REGISTRY"),
        ] {
            let mut v = srun("0");
            v.extend(more.iter().map(|(k, x)| (*k, x.to_string())));
            let r: Vec<(&str, &str)> = v.iter().map(|(k, x)| (*k, x.as_str())).collect();
            let e = Config::from_lookup(lookup(&r)).unwrap_err().to_string();
            assert!(e.contains(key), "{more:?}: {e}");
        }
        // PMI gives no job id and no host of rank 0: IPL_SERVER is needed.
        let e = Config::from_lookup(lookup(&[("PMI_RANK", "1"), ("PMI_SIZE", "3")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("IPL_SERVER"), "{e}");
        let c = Config::from_lookup(lookup(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "3"),
            ("IPL_SERVER", "h:7000"),
        ]))
        .unwrap();
        assert_eq!((c.size, c.rank), (Some(3), Some(1)));
    }
}
