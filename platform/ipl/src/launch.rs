//! Starting a pool of local processes: what `ipl-run` does, callable from code.

use crate::error::{Error, Result};
use crate::registry::RegistryServer;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to launch.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Number of processes.
    pub nodes: u32,
    /// Number of locations (clusters) the ranks are spread over, in contiguous blocks.
    pub clusters: u32,
    /// Wide-area latency between locations.
    pub wan_latency: Option<Duration>,
    /// Wide-area bandwidth between locations, bytes per second.
    pub wan_bandwidth: Option<u64>,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Extra environment for every process.
    pub env: Vec<(String, String)>,
    /// Prefix every output line with the rank.
    pub prefix_output: bool,
}

/// The location of `rank` when `nodes` ranks are spread over `clusters` locations.
pub fn location_of(rank: u32, nodes: u32, clusters: u32) -> String {
    format!("cluster{}", (rank as u64 * clusters as u64 / nodes as u64))
}

fn forward(
    src: impl std::io::Read + Send + 'static,
    rank: u32,
    to_err: bool,
    prefix: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let mut out: Box<dyn Write> = if to_err {
                        Box::new(std::io::stderr().lock())
                    } else {
                        Box::new(std::io::stdout().lock())
                    };
                    if prefix {
                        let _ = write!(out, "[{rank}] ");
                    }
                    let _ = out.write_all(&line);
                    if !line.ends_with(b"\n") {
                        let _ = out.write_all(b"\n");
                    }
                    let _ = out.flush();
                }
            }
        }
    })
}

fn code_of(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Starts the registry and the processes, forwards their output, and returns the exit status:
/// the first non-zero status of any process (the others are then killed), or 0.
pub fn run(l: &Launch) -> Result<i32> {
    if l.nodes == 0 || l.nodes > 4096 {
        return Err(Error::config(
            "-n",
            "the number of processes must be 1 to 4096",
        ));
    }
    if l.clusters == 0 || l.clusters > l.nodes {
        return Err(Error::config(
            "--clusters",
            format!(
                "must be between 1 and the number of processes ({})",
                l.nodes
            ),
        ));
    }
    let Some((program, args)) = l.command.split_first() else {
        return Err(Error::config("PROGRAM", "no program given after --"));
    };
    let secret: String = (0..16)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let registry = RegistryServer::start("127.0.0.1:0", &secret)?;
    let pool = format!("run-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let wan = l.wan_latency.is_some() || l.wan_bandwidth.is_some();
    let pids: Arc<Mutex<Vec<i32>>> = Arc::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut forwarders = Vec::new();
    for rank in 0..l.nodes {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("IPL_SERVER", registry.address().to_string())
            .env("IPL_POOL", &pool)
            .env("IPL_POOL_SIZE", l.nodes.to_string())
            .env("IPL_RANK", rank.to_string())
            .env("IPL_SECRET", &secret)
            .env("IPL_LOCATION", location_of(rank, l.nodes, l.clusters))
            .env("IPL_DRIVER", if wan { "wan" } else { "tcp" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(d) = l.wan_latency {
            cmd.env("IPL_WAN_LATENCY", format!("{}us", d.as_micros()));
        }
        if let Some(b) = l.wan_bandwidth {
            cmd.env("IPL_WAN_BANDWIDTH", b.to_string());
        }
        for (k, v) in &l.env {
            cmd.env(k, v);
        }
        // SAFETY: prctl is async-signal-safe; it makes the child die with the launcher, so a
        // killed launcher never leaves ranks behind.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                kill_all(&pids);
                return Err(Error::io(format!("start '{program}' as rank {rank}"), e));
            }
        };
        pids.lock().expect("pid list").push(child.id() as i32);
        if let Some(o) = child.stdout.take() {
            forwarders.push(forward(o, rank, false, l.prefix_output));
        }
        if let Some(e) = child.stderr.take() {
            forwarders.push(forward(e, rank, true, l.prefix_output));
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send((rank, status));
        });
    }
    drop(tx);
    {
        let pids = pids.clone();
        let _ = ctrlc::set_handler(move || {
            kill_all(&pids);
            std::process::exit(130);
        });
    }
    let mut result = 0;
    for (rank, status) in rx.iter() {
        let code = match status {
            Ok(s) => code_of(s),
            Err(_) => 1,
        };
        if code != 0 && result == 0 {
            result = code;
            eprintln!("ipl-run: rank {rank} exited with status {code}; stopping the others");
            kill_all(&pids);
        }
    }
    for f in forwarders {
        let _ = f.join();
    }
    drop(registry);
    Ok(result)
}

fn kill_all(pids: &Mutex<Vec<i32>>) {
    for &pid in pids.lock().expect("pid list").iter() {
        // SAFETY: plain kill(2) on a pid we started; a pid already reaped is harmless here
        // because the waiter threads reap only after exit and the launcher exits soon after.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}
