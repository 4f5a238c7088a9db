//! Configuration of a node, from `IPL_*` environment variables or built in code.

use crate::error::{Error, Result};
use crate::launcher::{self, Launcher};
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

/// Emulated wide-area link between locations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WanLink {
    /// One-way latency added to every message between different locations.
    pub latency: Duration,
    /// Bandwidth limit in bytes per second between different locations (None: unlimited).
    pub bandwidth: Option<u64>,
}

/// Everything a node needs to join a pool.
#[derive(Debug, Clone)]
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
    /// A node silent for this long is declared dead.
    pub death_timeout: Duration,
    /// How long `connect` retries a missing port, and how long joining may take.
    pub connect_timeout: Duration,
    /// How long `wait_closed` waits for the pool to fill.
    pub join_timeout: Duration,
    /// How long a receiver spins before parking.
    pub spin: Duration,
    /// Byte order of written data (tests force the swapped path with this).
    pub byte_order: ByteOrder,
    /// Largest message accepted from the network, in bytes.
    pub max_message: u64,
    /// The parallel launcher (`mpirun`, `srun`) the pool was read from, if any.
    pub launcher: Option<Launcher>,
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
            max_message: 1 << 40,
            launcher: None,
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

    /// Reads the configuration from `IPL_*` environment variables, or from the environment of
    /// a parallel launcher (`mpirun`, `srun`; see [`crate::launcher`]) when no `IPL_POOL`,
    /// `IPL_POOL_SIZE` or `IPL_RANK` is set.
    ///
    /// `IPL_POOL` (name, default `default`), `IPL_POOL_SIZE` (closed-pool size), `IPL_RANK`,
    /// `IPL_SERVER` (registry `host:port`, or several separated by commas), `IPL_SECRET`,
    /// `IPL_LOCATION`, `IPL_HOST` (the address to listen on and advertise; default: the local
    /// address of the route toward the registry), `IPL_DRIVER` (`inproc`, `tcp`, `wan`),
    /// `IPL_WAN_LATENCY` (e.g. `20ms`), `IPL_WAN_BANDWIDTH` (bytes/s, with K/M/G suffix, or
    /// `100Mbit`), `IPL_HEARTBEAT`, `IPL_DEATH_TIMEOUT`, `IPL_CONNECT_TIMEOUT`,
    /// `IPL_JOIN_TIMEOUT`, `IPL_SPIN`, `IPL_REGISTRY_LINGER` (durations), `IPL_BYTE_ORDER`
    /// (`native`, `little`, `big`), `IPL_MAX_MESSAGE` (bytes).
    ///
    /// Under a launcher: the pool is the launcher's job, with its size and ranks; rank 0 runs the
    /// registry (unless `IPL_REGISTRY=external`: a registry started otherwise, at `IPL_SERVER`);
    /// the others find it at `IPL_SERVER`, or else where the launcher's environment says rank 0
    /// runs, at a port derived from the job id; the secret is `IPL_SECRET` or derived from the
    /// job id.
    ///
    /// With no variables set this is a one-node in-process pool. With `IPL_SERVER` set the driver
    /// defaults to tcp (wan when a wan latency or bandwidth is given).
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
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
                let port = launcher::job_port(&key);
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
                let mut c = Config::inproc(key.clone(), l.size);
                c.rank = Some(l.rank);
                if !external {
                    c.registry_rank = Some(0);
                    if l.rank == 0 {
                        c.registry_bind = Some(format!("0.0.0.0:{}", server_port(&addr)?));
                    }
                }
                c.secret = get("IPL_SECRET").unwrap_or_else(|| launcher::job_secret(&key));
                server = Some(addr);
                c
            }
        };
        c.launcher = launcher;
        if let Some(l) = get("IPL_LOCATION") {
            if l.is_empty() || l.len() > 128 {
                return Err(Error::config("IPL_LOCATION", "must be 1 to 128 characters"));
            }
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
            Some(other) => {
                return Err(Error::config(
                    "IPL_DRIVER",
                    format!("'{other}' is not one of inproc, tcp, wan"),
                ))
            }
            None if server.is_some() && wan_requested => Driver::Wan,
            None if server.is_some() => Driver::Tcp,
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
        if c.driver != Driver::Inproc {
            // Found when joining: the route toward the registry.
            c.host = String::new();
            if server.is_none() {
                return Err(Error::config(
                    "IPL_SERVER",
                    "the tcp and wan drivers need the registry address (host:port)",
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
        if c.heartbeat.is_zero() || c.heartbeat >= c.death_timeout {
            return Err(Error::config(
                "IPL_HEARTBEAT",
                format!(
                    "heartbeat {:?} must be non-zero and shorter than the death timeout {:?}",
                    c.heartbeat, c.death_timeout
                ),
            ));
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
        Ok(c)
    }
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
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
        _ => Err(Error::config(
            key,
            format!("'{s}' is not a count between 1 and 1000000"),
        )),
    }
}

/// Parses `20ms`, `1.5s`, `10s`, `250us`.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration> {
    humantime::parse_duration(s.trim())
        .map_err(|e| Error::config(key, format!("'{s}' is not a duration ({e})")))
}

/// Parses a byte count with an optional K/M/G (powers of 1000) or Ki/Mi/Gi suffix.
pub fn parse_bytes(key: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| Error::config(key, format!("'{s}' is not a number of bytes")))?;
    let mult = match unit.trim().trim_end_matches('B').trim_end_matches("/s") {
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

    #[test]
    fn server_selects_tcp_and_latency_selects_wan() {
        let c = Config::from_lookup(lookup(&[("IPL_SERVER", "127.0.0.1:5000")])).unwrap();
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
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("IPL_POOL_SIZE", "zero"),
            ("IPL_POOL_SIZE", "0"),
            ("IPL_DRIVER", "udp"),
            ("IPL_WAN_LATENCY", "soon"),
            ("IPL_BYTE_ORDER", "middle"),
            ("IPL_RANK", "-1"),
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
        assert_eq!(zero.driver, Driver::Tcp);
        assert_eq!(zero.secret, two.secret);
        assert!(!zero.secret.is_empty());
        let port = crate::launcher::job_port("slurm-4711.2");
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
