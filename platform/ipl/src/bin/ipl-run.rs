//! `ipl-run`: starts a registry and N local processes that form one pool.

use clap::Parser;
use std::time::Duration;

/// Start a pool of N local processes running PROGRAM, with the registry inside this launcher.
///
/// Each process gets IPL_SERVER, IPL_POOL, IPL_POOL_SIZE, IPL_RANK, IPL_SECRET and IPL_LOCATION,
/// so `ipl::Config::from_env()` joins the pool. Output lines are prefixed with the rank. The exit
/// status is the first non-zero status of any process; the others are then killed.
#[derive(Parser, Debug)]
#[command(name = "ipl-run", version)]
struct Args {
    /// Number of processes.
    #[arg(short = 'n', long = "nodes", env = "IPL_POOL_SIZE")]
    nodes: u32,
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

fn parse_bandwidth(s: &str) -> Result<u64, String> {
    ipl::config::parse_bandwidth(s).map_err(|e| e.to_string())
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    let launch = ipl::launch::Launch {
        nodes: a.nodes,
        clusters: a.clusters,
        wan_latency: a.wan_latency,
        wan_bandwidth: a.wan_bandwidth,
        command: a.command,
        env: Vec::new(),
        prefix_output: !a.no_prefix,
    };
    match ipl::launch::run(&launch) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ipl-run: {e}");
            std::process::exit(2);
        }
    }
}
