//! Configuration of a node, from `IPL_*` environment variables or built in code.

use crate::error::{Error, Result};
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
    /// Registry address `host:port` (tcp and wan drivers).
    pub server: Option<String>,
    /// Shared secret every connection must prove knowledge of.
    pub secret: String,
    /// This node's location (cluster name).
    pub location: String,
    /// Host name or address this node listens on and advertises.
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
}

impl Config {
    /// An in-process pool of `size` nodes called `pool`: the embedded default, no network.
    pub fn inproc(pool: impl Into<String>, size: u32) -> Config {
        Config {
            pool: pool.into(),
            size: Some(size),
            rank: None,
            server: None,
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

    /// Reads the configuration from `IPL_*` environment variables.
    ///
    /// `IPL_POOL` (name, default `default`), `IPL_POOL_SIZE` (closed-pool size), `IPL_RANK`,
    /// `IPL_SERVER` (registry `host:port`), `IPL_SECRET`, `IPL_LOCATION`, `IPL_HOST`,
    /// `IPL_DRIVER` (`inproc`, `tcp`, `wan`), `IPL_WAN_LATENCY` (e.g. `20ms`), `IPL_WAN_BANDWIDTH`
    /// (bytes/s, with K/M/G suffix, or `100Mbit`), `IPL_HEARTBEAT`, `IPL_DEATH_TIMEOUT`,
    /// `IPL_CONNECT_TIMEOUT`, `IPL_JOIN_TIMEOUT`, `IPL_SPIN` (durations), `IPL_BYTE_ORDER`
    /// (`native`, `little`, `big`), `IPL_MAX_MESSAGE` (bytes).
    ///
    /// With no variables set this is a one-node in-process pool. With `IPL_SERVER` set the driver
    /// defaults to tcp (wan when a wan latency or bandwidth is given).
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`Config::from_env`] but reading variables through `get` (for tests and launchers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let pool = get("IPL_POOL").unwrap_or_else(|| "default".into());
        let size = match get("IPL_POOL_SIZE") {
            Some(s) => Some(parse_count("IPL_POOL_SIZE", &s)?),
            None => None,
        };
        let server = get("IPL_SERVER").filter(|s| !s.is_empty());
        let mut c = Config::inproc(pool, size.unwrap_or(1));
        c.size = if server.is_some() {
            size
        } else {
            Some(size.unwrap_or(1))
        };
        if let Some(r) = get("IPL_RANK") {
            c.rank = Some(
                r.trim()
                    .parse()
                    .map_err(|_| Error::config("IPL_RANK", format!("'{r}' is not a rank")))?,
            );
        }
        if let Some(s) = get("IPL_SECRET") {
            c.secret = s;
        }
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
        if c.driver != Driver::Inproc {
            c.host = "127.0.0.1".into();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = vars
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
    }

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
}
