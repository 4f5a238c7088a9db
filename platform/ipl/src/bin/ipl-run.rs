//! `ipl-run`: starts a registry and N processes that form one pool, locally or on the hosts of
//! a host file.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// Start a pool of N processes running PROGRAM, with the registry inside this launcher.
///
/// Each process gets IPL_SERVER, IPL_POOL, IPL_POOL_SIZE, IPL_RANK, IPL_SECRET and IPL_LOCATION,
/// so `ipl::Config::from_env()` joins the pool. Output lines are prefixed with the rank. The exit
/// status is the first non-zero status of any process; the others then get --grace to end on
/// their own (they see the failure) and are killed. SIGINT, SIGTERM and SIGHUP kill every
/// process of every rank's process group; the status is then 128 + the signal.
///
/// With --join HOST:PORT the processes join the running pool whose registry listens there,
/// instead of forming a new one: they name no size or rank (the registry gives them ranks
/// above every rank given out), and programs that can take new members (satin) put them to
/// work at once. The pool's name and secret come from IPL_POOL and IPL_SECRET, which the
/// launch that started the pool must have had too (a launch takes them from its environment
/// when set, and otherwise makes up a name and a secret); --registry-addr fixes where that
/// launch's registry listens.
///
/// A rank that stops answering the registry (stopped with SIGSTOP, or hung) is dead to its
/// pool after its death timeout (IPL_DEATH_TIMEOUT); the launcher then kills it and judges its
/// end as any other death. A joining launcher hears of such ranks by watching the pool's
/// registry; one it cannot watch (an older version) is reported, and such a rank is not killed.
///
/// With --hostfile the processes run on the listed hosts, started as
/// `RSH HOST env IPL_...=... PROGRAM ARGS` (the remote shell does not pass the environment on;
/// this launcher's own IPL_* settings and RUST_LOG travel on the command line too). The secret
/// never does: it travels on the remote command's standard input, which the remote shell must
/// pass on (ssh does, unless given -n), and which stays open for as long as the rank's remote
/// shell runs (IPL_STDIN_LIFELINE=1): when this launcher kills the remote shell, or its
/// connection goes, the rank's host sees it close and kills the rank there, even a rank
/// stopped with SIGSTOP. PROGRAM must exist at the same path on every host. The
/// registry listens on --registry-addr, or on this host's address on the route toward the first
/// host.
#[derive(Parser, Debug)]
#[command(name = "ipl-run", version, allow_negative_numbers = true)]
struct Args {
    /// Number of processes (with --hostfile: default the total of its slots).
    #[arg(short = 'n', long = "nodes", env = "IPL_POOL_SIZE")]
    nodes: Option<u32>,
    /// Host file: one host per line, optionally `slots=N` (ranks per host per round, default 1);
    /// `#` starts a comment. Ranks fill the hosts in file order and wrap around.
    #[arg(long, value_name = "FILE")]
    hostfile: Option<PathBuf>,
    /// Remote shell command that runs a command on a host: `CMD HOST COMMAND...` (split on
    /// white space). Examples: "ssh -o BatchMode=yes", "ip netns exec".
    #[arg(long, value_name = "CMD", default_value = "ssh -o BatchMode=yes")]
    rsh: String,
    /// Address (HOST or HOST:PORT) the registry listens on and the hosts reach it at; default:
    /// this host's address on the route toward the first host of the host file, or a free
    /// port on 127.0.0.1 without one.
    #[arg(long, value_name = "ADDR")]
    registry_addr: Option<String>,
    /// Add the processes to the running pool whose registry listens at HOST:PORT (see above).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["hostfile", "clusters"])]
    join: Option<String>,
    /// With --join: the location (cluster) the new processes are in.
    #[arg(
        long,
        value_name = "NAME",
        requires = "join",
        default_value = "cluster0"
    )]
    location: String,
    /// Extra environment for every process, NAME=VALUE, or NAME to pass this launcher's value on
    /// (repeatable).
    #[arg(short = 'x', long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// After the first failure, how long the other processes get to end on their own before
    /// they are killed.
    #[arg(long, default_value = "3s", value_parser = parse_grace)]
    grace: Duration,
    /// Number of locations (clusters); ranks are spread over them in contiguous blocks.
    #[arg(long, default_value_t = 1)]
    clusters: u32,
    /// One-way latency added between processes of different locations (e.g. 20ms).
    #[arg(long, value_parser = parse_duration)]
    wan_latency: Option<Duration>,
    /// Bandwidth between locations: bytes/s with K/M/G suffix, or bits/s like 100Mbit.
    #[arg(long, value_parser = parse_bandwidth)]
    wan_bandwidth: Option<u64>,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// For programs that survive the death of processes (a master/worker farm): a process
    /// that dies leaves the others going. The status is 0 when at least one rank exited with 0
    /// and none failed (exited with a non-zero status of its own); a rank killed by a signal
    /// (under a remote shell: a status above 128) counts as died, not failed.
    #[arg(long)]
    tolerate_failures: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    ipl::config::parse_duration("--wan-latency", s).map_err(|e| e.to_string())
}

fn parse_grace(s: &str) -> Result<Duration, String> {
    ipl::config::parse_duration("--grace", s).map_err(|e| e.to_string())
}

fn parse_bandwidth(s: &str) -> Result<u64, String> {
    ipl::config::parse_bandwidth(s).map_err(|e| e.to_string())
}

fn env_pair(s: &str) -> ipl::Result<(String, String)> {
    let (name, value) = match s.split_once('=') {
        Some((n, v)) => (n.to_string(), v.to_string()),
        None => (s.to_string(), std::env::var(s).unwrap_or_default()),
    };
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(ipl::Error::config(
            "--env",
            format!("'{s}' is not NAME=VALUE or NAME"),
        ));
    }
    Ok((name, value))
}

fn launch(a: Args) -> ipl::Result<i32> {
    let env = a
        .env
        .iter()
        .map(|e| env_pair(e))
        .collect::<ipl::Result<Vec<_>>>()?;
    let remote = match &a.hostfile {
        None => None,
        Some(path) => Some(ipl::run_pool::Remote {
            hosts: ipl::run_pool::read_hostfile(path)?,
            rsh: a.rsh.split_whitespace().map(str::to_string).collect(),
            registry_addr: a.registry_addr.clone(),
        }),
    };
    let from_env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let (pool, secret) = (from_env("IPL_POOL"), from_env("IPL_SECRET"));
    let join = match &a.join {
        None => None,
        Some(addr) => {
            let (Some(pool), Some(secret)) = (pool.clone(), secret.clone()) else {
                return Err(ipl::Error::config(
                    "--join",
                    "needs the running pool's name and secret in IPL_POOL and IPL_SECRET (the \
                     launch that started the pool must have had the same)",
                ));
            };
            if a.registry_addr.is_some() {
                return Err(ipl::Error::config(
                    "--registry-addr",
                    "a launch with --join uses the running pool's registry",
                ));
            }
            Some(ipl::run_pool::Join {
                registry: addr.clone(),
                pool: ipl::run_pool::Named { pool, secret },
                location: a.location.clone(),
            })
        }
    };
    let named = match (pool, secret) {
        (None, None) => None,
        (pool, secret) => Some(ipl::run_pool::Named {
            pool: pool.unwrap_or_else(|| format!("run-{}", std::process::id())),
            secret: secret.unwrap_or_else(|| {
                (0..16)
                    .map(|_| format!("{:02x}", rand::random::<u8>()))
                    .collect()
            }),
        }),
    };
    let registry_bind = match (&remote, &a.registry_addr) {
        (None, Some(addr)) => Some(if addr.contains(':') {
            addr.trim().to_string()
        } else {
            format!("{}:0", addr.trim())
        }),
        _ => None,
    };
    let nodes = match (a.nodes, &remote) {
        (Some(n), _) => n,
        (None, Some(r)) => ipl::run_pool::total_slots(&r.hosts),
        (None, None) => {
            return Err(ipl::Error::config(
                "-n",
                "give the number of processes (or a host file)",
            ))
        }
    };
    let launch = ipl::run_pool::Launch {
        nodes,
        clusters: a.clusters,
        wan_latency: a.wan_latency,
        wan_bandwidth: a.wan_bandwidth,
        command: a.command,
        env,
        prefix_output: !a.no_prefix,
    };
    let options = ipl::run_pool::RunOptions {
        remote,
        grace: a.grace,
        tolerate_failures: a.tolerate_failures,
        pool: named,
        registry_bind,
        join,
    };
    ipl::run_pool::run_with(&launch, &options)
}

fn main() {
    let args = ipl::cli::parse("ipl-run");
    // Log lines as RUST_LOG says (errors by default); one it cannot read is refused, not
    // ignored.
    let logs = ipl::trace::log_filter("error").unwrap_or_else(|e| ipl::cli::refuse("ipl-run", e));
    tracing_subscriber::fmt()
        .with_env_filter(logs)
        .with_writer(std::io::stderr)
        .init();
    match launch(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(2);
        }
    }
}
