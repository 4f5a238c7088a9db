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
/// their own (they see the failure) and are killed.
///
/// With --hostfile the processes run on the listed hosts, started as
/// `RSH HOST env IPL_...=... PROGRAM ARGS` (the remote shell does not pass the environment on;
/// this launcher's own IPL_* settings and RUST_LOG travel on the command line too). PROGRAM
/// must exist at the same path on every host. The registry listens on --registry-addr, or on
/// this host's address on the route toward the first host.
#[derive(Parser, Debug)]
#[command(name = "ipl-run", version)]
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
    /// this host's address on the route toward the first host of the host file.
    #[arg(long, value_name = "ADDR")]
    registry_addr: Option<String>,
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
        Some(path) => Some(ipl::launch::Remote {
            hosts: ipl::launch::read_hostfile(path)?,
            rsh: a.rsh.split_whitespace().map(str::to_string).collect(),
            registry_addr: a.registry_addr.clone(),
        }),
    };
    if remote.is_none() && a.registry_addr.is_some() {
        return Err(ipl::Error::config(
            "--registry-addr",
            "only used with --hostfile (local processes use 127.0.0.1)",
        ));
    }
    let nodes = match (a.nodes, &remote) {
        (Some(n), _) => n,
        (None, Some(r)) => ipl::launch::total_slots(&r.hosts),
        (None, None) => {
            return Err(ipl::Error::config(
                "-n",
                "give the number of processes (or a host file)",
            ))
        }
    };
    let launch = ipl::launch::Launch {
        nodes,
        clusters: a.clusters,
        wan_latency: a.wan_latency,
        wan_bandwidth: a.wan_bandwidth,
        command: a.command,
        env,
        prefix_output: !a.no_prefix,
    };
    let options = ipl::launch::RunOptions {
        remote,
        grace: a.grace,
    };
    ipl::launch::run_with(&launch, &options)
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match launch(Args::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(2);
        }
    }
}
