//! Starting a pool of processes: what `ipl-run` does, callable from code.
//!
//! The launcher runs the registry itself and starts every rank with the `IPL_*` variables that
//! make `Config::from_env` join the pool: as local processes, or with a host file on the hosts
//! it lists through a remote shell (`ssh`), which does not forward the environment, so the
//! variables travel on the remote command line: `RSH HOST env IPL_SERVER=... PROGRAM ARGS`.

use crate::error::{Error, Result};
use crate::registry::RegistryServer;
use std::io::{BufRead, BufReader, Write};
use std::net::{ToSocketAddrs, UdpSocket};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the launcher waits for the output of processes that have ended (or whose remote
/// shell has ended) before it stops forwarding it.
const OUTPUT_LINGER: Duration = Duration::from_secs(10);
/// Most processes one launch may start.
const MAX_NODES: u32 = 4096;

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

/// How [`run_with`] places and stops the processes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Start the ranks on other hosts through a remote shell; None: local processes.
    pub remote: Option<Remote>,
    /// After one process failed, how long the others get to end on their own (they normally
    /// see the failure and stop with an error naming the failed rank) before they are killed.
    pub grace: Duration,
}

impl Default for RunOptions {
    /// Local processes, killed 3 s after the first failure.
    fn default() -> Self {
        RunOptions {
            remote: None,
            grace: Duration::from_secs(3),
        }
    }
}

/// Ranks on the hosts of a host file, started through a remote shell.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The hosts, in file order.
    pub hosts: Vec<Host>,
    /// The remote-shell command and its options (`ssh -o BatchMode=yes`, `ip netns exec`),
    /// run as `RSH... HOST env VARS... PROGRAM ARGS...`.
    pub rsh: Vec<String>,
    /// Address the registry listens on (`host` or `host:port`); None: this host's address on
    /// the route toward the first host.
    pub registry_addr: Option<String>,
}

/// One line of a host file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Host name or address, passed to the remote shell.
    pub name: String,
    /// Ranks placed on the host per round (`slots=N`, default 1).
    pub slots: u32,
}

/// Parses a host file: one host per line, optionally followed by `slots=N`; `#` starts a
/// comment; blank lines are skipped. `origin` names the file in errors, which name the line.
///
/// ```
/// let hosts = ipl::launch::parse_hostfile("# two nodes\nnode1 slots=2\nnode2  # spare\n", "h").unwrap();
/// assert_eq!(hosts.len(), 2);
/// assert_eq!((hosts[0].name.as_str(), hosts[0].slots), ("node1", 2));
/// assert_eq!((hosts[1].name.as_str(), hosts[1].slots), ("node2", 1));
/// let e = ipl::launch::parse_hostfile("node1\nnode2 slots=x\n", "h").unwrap_err();
/// assert!(e.to_string().contains("h line 2"), "{e}");
/// ```
pub fn parse_hostfile(text: &str, origin: &str) -> Result<Vec<Host>> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let bad = |why: String| Error::config(format!("{origin} line {}", i + 1), why);
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@[]".contains(&b))
        {
            return Err(bad(format!("'{name}' is not a host name")));
        }
        let mut slots = None;
        for w in words {
            let Some(v) = w.strip_prefix("slots=") else {
                return Err(bad(format!(
                    "'{w}' is not slots=N (a line is: HOST [slots=N])"
                )));
            };
            if slots.is_some() {
                return Err(bad("slots given twice".into()));
            }
            match v.parse::<u32>() {
                Ok(n) if (1..=MAX_NODES).contains(&n) => slots = Some(n),
                _ => {
                    return Err(bad(format!(
                        "'{v}' is not a number of slots from 1 to {MAX_NODES}"
                    )))
                }
            }
        }
        hosts.push(Host {
            name: name.to_owned(),
            slots: slots.unwrap_or(1),
        });
    }
    if hosts.is_empty() {
        return Err(Error::config(origin, "the host file lists no hosts"));
    }
    Ok(hosts)
}

/// Reads and parses the host file at `path` (see [`parse_hostfile`]).
pub fn read_hostfile(path: &Path) -> Result<Vec<Host>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("read host file {}", path.display()), e))?;
    parse_hostfile(&text, &path.display().to_string())
}

/// The host of each of `nodes` ranks: the hosts in file order, each taking as many consecutive
/// ranks as it has slots, starting again at the first host when every slot is taken.
pub fn placement(hosts: &[Host], nodes: u32) -> Vec<&str> {
    hosts
        .iter()
        .flat_map(|h| std::iter::repeat(h.name.as_str()).take(h.slots as usize))
        .cycle()
        .take(nodes as usize)
        .collect()
}

/// The total number of slots in `hosts`: the default number of processes with a host file.
pub fn total_slots(hosts: &[Host]) -> u32 {
    hosts.iter().map(|h| h.slots).sum::<u32>().min(MAX_NODES)
}

/// Quotes `w` for a POSIX shell where it holds anything a shell would interpret (`ssh` hands
/// the remote command to the remote user's shell); plain words stay as they are, so a remote
/// shell command that runs its arguments directly (`ip netns exec`) sees them unchanged.
pub fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b))
    {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// The location of `rank` when `nodes` ranks are spread over `clusters` locations.
pub fn location_of(rank: u32, nodes: u32, clusters: u32) -> String {
    format!("cluster{}", (rank as u64 * clusters as u64 / nodes as u64))
}

/// The address the registry listens on for ranks on `remote`'s hosts: `--registry-addr`, or
/// the local address of this host's route toward the first host.
fn registry_bind(remote: &Remote) -> Result<String> {
    if let Some(a) = &remote.registry_addr {
        let a = a.trim();
        return Ok(if a.contains(':') {
            a.to_owned()
        } else {
            format!("{a}:0")
        });
    }
    let first = &remote.hosts[0].name;
    let route = || -> std::io::Result<std::net::IpAddr> {
        let target = (first.as_str(), 9)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))?;
        let any = if target.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let s = UdpSocket::bind(any)?;
        s.connect(target)?;
        Ok(s.local_addr()?.ip())
    };
    match route() {
        Ok(ip) if ip.is_ipv6() => Ok(format!("[{ip}]:0")),
        Ok(ip) => Ok(format!("{ip}:0")),
        Err(e) => Err(Error::config(
            "--registry-addr",
            format!(
                "cannot find this host's route toward {first} ({e}); give the address the \
                 hosts reach this host at with --registry-addr"
            ),
        )),
    }
}

fn forward(
    src: impl std::io::Read + Send + 'static,
    rank: u32,
    to_err: bool,
    prefix: bool,
    done: crossbeam_channel::Sender<()>,
) {
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
        let _ = done.send(());
    });
}

fn code_of(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The processes started so far, by rank: each leads a process group of its own; `None` once
/// it has exited (checked under the lock before killing, so that a reaped process's group id,
/// which the system may reuse, is never signalled).
type Groups = Arc<Mutex<Vec<Option<i32>>>>;

/// Starts the registry and local processes, forwards their output, and returns the exit status:
/// the first non-zero status of any process (the others are then killed), or 0.
pub fn run(l: &Launch) -> Result<i32> {
    run_with(l, &RunOptions::default())
}

/// Like [`run`], with the processes placed and stopped as `o` says: on the hosts of a host
/// file through a remote shell, and given [`RunOptions::grace`] to end on their own after the
/// first failure.
pub fn run_with(l: &Launch, o: &RunOptions) -> Result<i32> {
    if l.nodes == 0 || l.nodes > MAX_NODES {
        return Err(Error::config(
            "-n",
            format!("the number of processes must be 1 to {MAX_NODES}"),
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
    let (bind, hosts) = match &o.remote {
        None => ("127.0.0.1:0".to_string(), None),
        Some(r) => {
            if r.hosts.is_empty() {
                return Err(Error::config("--hostfile", "no hosts"));
            }
            if r.rsh.is_empty() {
                return Err(Error::config("--rsh", "empty remote shell command"));
            }
            (registry_bind(r)?, Some(placement(&r.hosts, l.nodes)))
        }
    };
    let secret: String = (0..16)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let registry = RegistryServer::start(&bind, &secret)?;
    let pool = format!("run-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let wan = l.wan_latency.is_some() || l.wan_bandwidth.is_some();
    tracing::info!(registry = %registry.address(), %pool, nodes = l.nodes, "starting");
    // What remote ranks get besides the pool variables: this launcher's own IPL_* settings
    // (ssh does not pass the environment on) and the log filter.
    let inherited: Vec<(String, String)> = if hosts.is_some() {
        std::env::vars()
            .filter(|(k, _)| {
                (k.starts_with("IPL_") || k == "RUST_LOG" || k == "RUST_BACKTRACE")
                    && !PER_RANK.contains(&k.as_str())
            })
            .collect()
    } else {
        Vec::new()
    };
    let groups: Groups = Arc::default();
    let (tx, rx) = crossbeam_channel::unbounded();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut streams = 0;
    for rank in 0..l.nodes {
        let mut vars: Vec<(String, String)> = vec![
            ("IPL_SERVER".into(), registry.address().to_string()),
            ("IPL_POOL".into(), pool.clone()),
            ("IPL_POOL_SIZE".into(), l.nodes.to_string()),
            ("IPL_RANK".into(), rank.to_string()),
            ("IPL_SECRET".into(), secret.clone()),
            (
                "IPL_LOCATION".into(),
                location_of(rank, l.nodes, l.clusters),
            ),
            ("IPL_DRIVER".into(), if wan { "wan" } else { "tcp" }.into()),
        ];
        if let Some(d) = l.wan_latency {
            vars.push(("IPL_WAN_LATENCY".into(), format!("{}us", d.as_micros())));
        }
        if let Some(b) = l.wan_bandwidth {
            vars.push(("IPL_WAN_BANDWIDTH".into(), b.to_string()));
        }
        let mut cmd = match (&o.remote, &hosts) {
            (Some(r), Some(hosts)) => {
                let host = hosts[rank as usize];
                let mut cmd = Command::new(&r.rsh[0]);
                cmd.args(&r.rsh[1..]).arg(host).arg("env");
                for (k, v) in inherited.iter().chain(&vars).chain(&l.env) {
                    cmd.arg(shell_word(&format!("{k}={v}")));
                }
                cmd.arg(shell_word(program));
                cmd.args(args.iter().map(|a| shell_word(a)));
                tracing::debug!(rank, host, "{cmd:?}");
                cmd
            }
            _ => {
                let mut cmd = Command::new(program);
                cmd.args(args).envs(vars).envs(l.env.iter().cloned());
                cmd
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it makes the child die with the launcher, so a
        // killed launcher never leaves ranks (or remote shells) behind.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let what = match &hosts {
            Some(h) => format!(
                "start rank {rank} on {} with '{}'",
                h[rank as usize],
                cmd_name(&cmd)
            ),
            None => format!("start '{program}' as rank {rank}"),
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                kill_all(&groups);
                return Err(Error::io(what, e));
            }
        };
        groups
            .lock()
            .expect("group list")
            .push(Some(child.id() as i32));
        if let Some(o) = child.stdout.take() {
            forward(o, rank, false, l.prefix_output, done_tx.clone());
            streams += 1;
        }
        if let Some(e) = child.stderr.take() {
            forward(e, rank, true, l.prefix_output, done_tx.clone());
            streams += 1;
        }
        let tx = tx.clone();
        let groups = groups.clone();
        std::thread::spawn(move || {
            let status = wait_child(child, rank, &groups);
            let _ = tx.send((rank, status));
        });
    }
    drop(tx);
    drop(done_tx);
    {
        let groups = groups.clone();
        let _ = ctrlc::set_handler(move || {
            kill_all(&groups);
            std::process::exit(130);
        });
    }
    let mut result = 0;
    let mut kill_at: Option<Instant> = None;
    loop {
        let next = match kill_at {
            None => rx.recv().map_err(|_| ()),
            Some(t) => match rx.recv_deadline(t) {
                Ok(v) => Ok(v),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    kill_all(&groups);
                    kill_at = None;
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(()),
            },
        };
        let Ok((rank, status)) = next else { break };
        let code = match status {
            Ok(s) => code_of(s),
            Err(_) => 1,
        };
        if code != 0 && result == 0 {
            result = code;
            let host = hosts
                .as_ref()
                .map(|h| format!(" on {}", h[rank as usize]))
                .unwrap_or_default();
            eprintln!(
                "ipl-run: rank {rank}{host} exited with status {code}; stopping the others \
                 (killed after {:?})",
                o.grace
            );
            kill_at = Some(Instant::now() + o.grace);
        }
    }
    // Remote ranks whose shell has gone end when they lose the registry.
    drop(registry);
    let deadline = Instant::now() + OUTPUT_LINGER;
    for _ in 0..streams {
        if done_rx.recv_deadline(deadline).is_err() {
            eprintln!(
                "ipl-run: some output was still open {OUTPUT_LINGER:?} after the processes \
                 ended; not waiting for it"
            );
            break;
        }
    }
    Ok(result)
}

/// Variables the launcher sets per rank, never passed on from its own environment.
const PER_RANK: &[&str] = &[
    "IPL_SERVER",
    "IPL_POOL",
    "IPL_POOL_SIZE",
    "IPL_RANK",
    "IPL_SECRET",
    "IPL_LOCATION",
    "IPL_DRIVER",
    "IPL_HOST",
    "IPL_WAN_LATENCY",
    "IPL_WAN_BANDWIDTH",
];

fn cmd_name(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// Waits for `child` to exit, takes it off the list of groups to kill, then reaps it.
fn wait_child(
    mut child: Child,
    rank: u32,
    groups: &Groups,
) -> std::io::Result<std::process::ExitStatus> {
    let pid = child.id();
    loop {
        // SAFETY: waitid with WNOWAIT only observes that our own child has exited; the zombie
        // stays, so its pid and group id cannot be reused until `child.wait()` below.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    if let Some(slot) = groups.lock().expect("group list").get_mut(rank as usize) {
        *slot = None;
    }
    child.wait()
}

fn kill_all(groups: &Mutex<Vec<Option<i32>>>) {
    for pgid in groups.lock().expect("group list").iter().flatten() {
        // SAFETY: kill(2) of the process group our child leads; the child has not been reaped
        // (its slot is cleared under this lock first), so the group id is still ours.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_files() {
        let h = parse_hostfile(
            "\n# cluster\nn1 slots=2   # two cores\n  n2\n10.0.0.3 slots=1\n",
            "hosts",
        )
        .unwrap();
        assert_eq!(
            h,
            [
                Host {
                    name: "n1".into(),
                    slots: 2
                },
                Host {
                    name: "n2".into(),
                    slots: 1
                },
                Host {
                    name: "10.0.0.3".into(),
                    slots: 1
                },
            ]
        );
        assert_eq!(total_slots(&h), 4);
        assert_eq!(placement(&h, 6), ["n1", "n1", "n2", "10.0.0.3", "n1", "n1"]);
        for (text, line, what) in [
            ("n1\nn2 slots=0\n", 2, "slots"),
            ("n1 slots=2 slots=3\n", 1, "twice"),
            ("# only\n\nn1 cpus=4\n", 3, "cpus=4"),
            ("n1\nn$2\n", 2, "host name"),
            ("n1 slots=99999999999\n", 1, "slots"),
        ] {
            let e = parse_hostfile(text, "hf").unwrap_err().to_string();
            assert!(e.contains(&format!("hf line {line}")), "{text:?}: {e}");
            assert!(e.contains(what), "{text:?}: {e}");
        }
        let e = parse_hostfile("# nothing\n", "hf").unwrap_err().to_string();
        assert!(e.contains("no hosts"), "{e}");
    }

    #[test]
    fn words_are_quoted_only_where_a_shell_would_interpret_them() {
        assert_eq!(
            shell_word("IPL_SERVER=10.0.0.1:5000"),
            "IPL_SERVER=10.0.0.1:5000"
        );
        assert_eq!(shell_word("/bin/sor"), "/bin/sor");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
    }
}
