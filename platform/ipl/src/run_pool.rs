//! Starting a pool of processes: what `ipl-run` does, callable from code.
//!
//! The launcher runs the registry itself and starts every rank with the `IPL_*` variables that
//! make `Config::from_env` join the pool: as local processes, or with a host file on the hosts
//! it lists through a remote shell (`ssh`), which does not forward the environment, so the
//! variables travel on the remote command line: `RSH HOST env IPL_SERVER=... PROGRAM ARGS`;
//! all but the secret, which a command line would show to every user of both hosts (`ps`): it
//! travels on the remote command's standard input (`IPL_SECRET_STDIN=1`). That input stays
//! open for as long as the rank's remote shell runs: when the launcher kills the shell (a rank
//! that failed, or that stopped answering the registry) or its connection goes, the rank's
//! host sees it close, and the rank's lifeline kills the rank there (`IPL_STDIN_LIFELINE=1`,
//! see [`Config::from_env`](crate::Config::from_env)), even a rank stopped with SIGSTOP.
//!
//! SIGINT, SIGTERM and SIGHUP to the launching process kill every process of every rank's
//! process group before it exits with 128 + the signal's number.

use crate::config::{check_bandwidth, check_duration, check_location};
use crate::error::{Error, Result};
use crate::registry::RegistryServer;
use std::io::{BufRead, BufReader, Write};
use std::net::{ToSocketAddrs, UdpSocket};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
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
    /// Wide-area latency between locations, at most [`MAX_DURATION`](crate::config::MAX_DURATION).
    pub wan_latency: Option<Duration>,
    /// Wide-area bandwidth between locations, bytes per second (at least 1).
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
    /// see the failure and stop with an error naming the failed rank) before they are killed;
    /// at most [`MAX_DURATION`](crate::config::MAX_DURATION).
    pub grace: Duration,
    /// For programs that survive crashes: a process that dies leaves the others (and the pool)
    /// going, and the run succeeds when the program succeeded on the survivors (see
    /// [`run_with`]). Default: fail fast.
    pub tolerate_failures: bool,
    /// The pool's name and secret, for a pool that others may join later (see [`Join`]);
    /// None: a fresh random name and secret.
    pub pool: Option<Named>,
    /// Where the registry of local processes listens (`host:port`), so that a later launch can
    /// find it; None: a free port on 127.0.0.1.
    pub registry_bind: Option<String>,
    /// Add the processes to a running pool instead of starting a new one (`ipl-run --join`).
    pub join: Option<Join>,
}

/// A pool's name and secret.
#[derive(Clone)]
pub struct Named {
    /// The pool's name.
    pub pool: String,
    /// The pool's secret.
    pub secret: String,
}

impl std::fmt::Debug for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("pool", &self.pool)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// A running pool that new processes join: they get ranks from its registry, above every
/// rank given out so far, and programs that can (satin's `Runtime::in_pool`) put them to
/// work at once.
#[derive(Debug, Clone)]
pub struct Join {
    /// The registry's address, `host:port`.
    pub registry: String,
    /// The pool's name and secret.
    pub pool: Named,
    /// The location the new processes are in.
    pub location: String,
}

impl Default for RunOptions {
    /// Local processes, killed 3 s after the first failure.
    fn default() -> Self {
        RunOptions {
            remote: None,
            grace: Duration::from_secs(3),
            tolerate_failures: false,
            pool: None,
            registry_bind: None,
            join: None,
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
/// let hosts = ipl::run_pool::parse_hostfile("# two nodes\nnode1 slots=2\nnode2  # spare\n", "h").unwrap();
/// assert_eq!(hosts.len(), 2);
/// assert_eq!((hosts[0].name.as_str(), hosts[0].slots), ("node1", 2));
/// assert_eq!((hosts[1].name.as_str(), hosts[1].slots), ("node2", 1));
/// let e = ipl::run_pool::parse_hostfile("node1\nnode2 slots=x\n", "h").unwrap_err();
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
        // A leading '-' would reach the remote shell as an option of its own (`-Ffile`).
        if name.starts_with('-')
            || !name
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

/// The largest host file read: room for [`MAX_NODES`] hosts with long names and comments.
const MAX_HOSTFILE: u64 = 1 << 20;

/// Reads and parses the host file at `path` (see [`parse_hostfile`]): a regular file of at
/// most 1 MiB.
pub fn read_hostfile(path: &Path) -> Result<Vec<Host>> {
    let text = crate::cli::read_small_file(path, MAX_HOSTFILE)
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
    // Saturating: slots of `Host`s built in code are not bounded as a host file's are.
    hosts
        .iter()
        .fold(0u32, |sum, h| sum.saturating_add(h.slots))
        .min(MAX_NODES)
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
    rank: String,
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

/// The processes of one launch.
#[derive(Default)]
struct Launched {
    /// The processes started so far, by rank: each leads a process group of its own; `None`
    /// once it has exited (checked under the lock before killing, so that a reaped process's
    /// group id, which the system may reuse, is never signalled).
    groups: Vec<Option<i32>>,
    /// Set once everything is being killed: nothing more is started.
    stopping: bool,
}

type Groups = Arc<Mutex<Launched>>;

/// The launches running in this process, for the signal watcher.
fn running() -> &'static Mutex<Vec<Groups>> {
    static RUNNING: std::sync::OnceLock<Mutex<Vec<Groups>>> = std::sync::OnceLock::new();
    RUNNING.get_or_init(Default::default)
}

/// The signal that is ending this process's launches (0: none), set before their processes
/// are killed: a launch that sees its processes die then reports the signal, as the signal
/// watcher's own exit does, rather than the SIGKILL that ended them.
static ENDED_BY: AtomicI32 = AtomicI32::new(0);

/// The signal ending this process's launches, if one is.
fn ended_by() -> Option<i32> {
    Some(ENDED_BY.load(Ordering::SeqCst)).filter(|&sig| sig != 0)
}

/// Starts, once per process, a thread that turns SIGINT, SIGTERM and SIGHUP into killing the
/// process groups of every running launch and exiting with 128 + the signal. With no launch
/// running the signal does what it does by default (ends the process).
fn watch_signals() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static WATCHING: std::sync::OnceLock<std::result::Result<(), String>> =
        std::sync::OnceLock::new();
    WATCHING
        .get_or_init(|| {
            let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
                .map_err(|e| format!("cannot watch for signals: {e}"))?;
            std::thread::Builder::new()
                .name("ipl-run-signals".into())
                .spawn(move || {
                    if let Some(sig) = signals.forever().next() {
                        let launches = std::mem::take(&mut *running().lock().expect("launches"));
                        if launches.is_empty() {
                            let _ = signal_hook::low_level::emulate_default_handler(sig);
                        }
                        ENDED_BY.store(sig, Ordering::SeqCst);
                        for g in &launches {
                            kill_all(g);
                        }
                        let name = match sig {
                            SIGINT => "SIGINT",
                            SIGTERM => "SIGTERM",
                            _ => "SIGHUP",
                        };
                        eprintln!("ipl-run: {name}: killed every process");
                        std::process::exit(128 + sig);
                    }
                })
                .map_err(|e| format!("cannot start the signal watcher: {e}"))?;
            Ok(())
        })
        .clone()
        .map_err(|e| {
            Error::io(
                "watch for SIGINT, SIGTERM and SIGHUP",
                std::io::Error::other(e),
            )
        })
}

/// Starts the registry and local processes, forwards their output, and returns the exit status:
/// the first non-zero status of any process (the others are then killed), or 0; 128 + N when
/// signal N (SIGINT, SIGTERM or SIGHUP) to this process ended the launch.
pub fn run(l: &Launch) -> Result<i32> {
    run_with(l, &RunOptions::default())
}

/// Like [`run`], with the processes placed and stopped as `o` says: on the hosts of a host
/// file through a remote shell, and given [`RunOptions::grace`] to end on their own after the
/// first failure.
///
/// With [`RunOptions::tolerate_failures`] nothing is killed because a process ended, and the
/// status says whether the program succeeded on the surviving ranks: 0 when at least one rank
/// exited with 0 and none failed. A rank *fails* by exiting with a non-zero status of its own;
/// it *dies* (tolerated) by a signal, which under a remote shell shows as a status above 128
/// (the shell's 128 + N, or ssh's 255 for a lost connection). Otherwise the status is that of
/// the first rank that failed, or when every rank died, of the first that died.
///
/// A rank the registry declares dead because its heartbeats stopped (a process stopped or
/// hung, which would never exit) is killed, and its end judged as any other death. A launch
/// that joins a running pool ([`RunOptions::join`]) learns of such ranks by watching that
/// pool's registry, which names the member's process.
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
    // The launcher kills the others at the clock plus the grace once a rank fails.
    // Checked as the ranks check them, but before any starts.
    check_duration("--grace", o.grace)?;
    if let Some(d) = l.wan_latency {
        check_duration("--wan-latency", d)?;
    }
    if let Some(j) = &o.join {
        check_location("--location", &j.location)?;
    }
    check_bandwidth("--wan-bandwidth", l.wan_bandwidth)?;
    if let Some((k, _)) = l
        .env
        .iter()
        .find(|(k, _)| PER_RANK.contains(&k.as_str()) && k != "IPL_DRIVER")
    {
        return Err(Error::config(
            "--env",
            format!("{k} is set by the launcher for each rank and cannot be given"),
        ));
    }
    check_settings(l)?;
    let Some((program, args)) = l.command.split_first() else {
        return Err(Error::config("PROGRAM", "no program given after --"));
    };
    if o.join.is_some() && o.remote.is_some() {
        return Err(Error::config(
            "--join",
            "adds local processes; it cannot be combined with --hostfile",
        ));
    }
    ensure_limits(l.nodes)?;
    let (bind, hosts) = match &o.remote {
        None => (
            o.registry_bind
                .clone()
                .unwrap_or_else(|| "127.0.0.1:0".to_string()),
            None,
        ),
        Some(r) => {
            if r.hosts.is_empty() {
                return Err(Error::config("--hostfile", "no hosts"));
            }
            if r.rsh.is_empty() {
                return Err(Error::config("--rsh", "empty remote shell command"));
            }
            if let Some(h) = r
                .hosts
                .iter()
                .find(|h| h.name.is_empty() || h.name.starts_with('-'))
            {
                return Err(Error::config(
                    "--hostfile",
                    format!("'{}' is not a host name", h.name),
                ));
            }
            (registry_bind(r)?, Some(placement(&r.hosts, l.nodes)))
        }
    };
    watch_signals()?;
    let named = match (&o.join, &o.pool) {
        (Some(j), _) => j.pool.clone(),
        (None, Some(n)) => n.clone(),
        (None, None) => Named {
            pool: format!("run-{}-{:08x}", std::process::id(), rand::random::<u32>()),
            secret: (0..16)
                .map(|_| format!("{:02x}", rand::random::<u8>()))
                .collect(),
        },
    };
    if named.pool.is_empty() || named.secret.is_empty() {
        return Err(Error::config(
            "IPL_POOL, IPL_SECRET",
            "a pool's name and secret must not be empty",
        ));
    }
    let (pool, secret) = (named.pool, named.secret);
    // A launch that joins a running pool uses that pool's registry and starts none.
    let registry = match &o.join {
        Some(_) => None,
        None => Some(RegistryServer::start(&bind, &secret).map_err(|e| {
            if o.registry_bind.is_some() || o.remote.is_some() {
                Error::config("--registry-addr", format!("cannot listen on {bind}: {e}"))
            } else {
                e
            }
        })?),
    };
    let registry_address = match (&registry, &o.join) {
        (Some(r), _) => r.address().to_string(),
        (None, Some(j)) => j.registry.clone(),
        (None, None) => unreachable!("a launch either starts a registry or joins one"),
    };
    let wan = l.wan_latency.is_some() || l.wan_bandwidth.is_some();
    let driver = rank_driver(l, wan)?;
    tracing::info!(registry = %registry_address, %pool, nodes = l.nodes, driver, joining = o.join.is_some(), "starting");
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
    running().lock().expect("launches").push(groups.clone());
    // Taken off the list of running launches however this function returns.
    struct Unlist(Groups);
    impl Drop for Unlist {
        fn drop(&mut self) {
            running()
                .lock()
                .expect("launches")
                .retain(|g| !Arc::ptr_eq(g, &self.0));
        }
    }
    let _unlist = Unlist(groups.clone());
    let (tx, rx) = crossbeam_channel::unbounded();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let mut streams = 0;
    for rank in 0..l.nodes {
        let mut vars: Vec<(String, String)> = vec![
            ("IPL_SERVER".into(), registry_address.clone()),
            ("IPL_POOL".into(), pool.clone()),
            ("IPL_DRIVER".into(), driver.into()),
        ];
        // Processes joining a running pool name no size or rank: the registry gives them
        // ranks above every rank given out so far.
        let label = match &o.join {
            Some(j) => {
                vars.push(("IPL_LOCATION".into(), j.location.clone()));
                vars.push(("IPL_JOIN_RUNNING".into(), "1".into()));
                format!("+{rank}")
            }
            None => {
                vars.push(("IPL_POOL_SIZE".into(), l.nodes.to_string()));
                vars.push(("IPL_RANK".into(), rank.to_string()));
                vars.push((
                    "IPL_LOCATION".into(),
                    location_of(rank, l.nodes, l.clusters),
                ));
                rank.to_string()
            }
        };
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
                vars.push((crate::config::SECRET_STDIN.into(), "1".into()));
                vars.push((crate::lifeline::STDIN_LIFELINE.into(), "1".into()));
                for (k, v) in inherited.iter().chain(&vars).chain(&l.env) {
                    cmd.arg(shell_word(&format!("{k}={v}")));
                }
                cmd.arg(shell_word(program));
                cmd.args(args.iter().map(|a| shell_word(a)));
                tracing::debug!(rank, host, "{cmd:?}");
                cmd.stdin(Stdio::piped());
                cmd
            }
            _ => {
                let mut cmd = Command::new(program);
                vars.push(("IPL_SECRET".into(), secret.clone()));
                cmd.args(args).envs(vars).envs(l.env.iter().cloned());
                cmd.stdin(Stdio::null());
                cmd
            }
        };
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl and sigprocmask are async-signal-safe. The first makes the child die
        // with the launcher, so a killed launcher never leaves ranks (or remote shells)
        // behind; the second makes sure the child starts with no signal blocked.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
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
        // Started and listed under the lock, so that a signal's kill_all sees every process.
        let mut child = {
            let mut launched = groups.lock().expect("group list");
            if launched.stopping {
                return Err(Error::Closed("the launch, stopped by a signal,".into()));
            }
            match cmd.spawn() {
                Ok(c) => {
                    launched.groups.push(Some(c.id() as i32));
                    c
                }
                Err(e) => {
                    drop(launched);
                    kill_all(&groups);
                    return Err(Error::io(what, e));
                }
            }
        };
        // Held open until the remote shell ends: the rank's host sees it close when the shell
        // or its connection goes, and the rank's lifeline then kills it there.
        let mut lifeline = child.stdin.take();
        if let Some(stdin) = &mut lifeline {
            // A pipe takes a line without blocking; a remote shell that has already failed
            // shows as that rank's exit status.
            let _ = stdin.write_all(format!("{secret}\n").as_bytes());
        }
        if let Some(o) = child.stdout.take() {
            forward(o, label.clone(), false, l.prefix_output, done_tx.clone());
            streams += 1;
        }
        if let Some(e) = child.stderr.take() {
            forward(e, label.clone(), true, l.prefix_output, done_tx.clone());
            streams += 1;
        }
        let tx = tx.clone();
        let groups = groups.clone();
        std::thread::spawn(move || {
            let status = wait_child(child, rank, &groups);
            drop(lifeline);
            let _ = tx.send((rank, status));
        });
    }
    drop(tx);
    drop(done_tx);
    let mut first_failure = None;
    let mut first_death = None;
    let mut succeeded = 0;
    let mut kill_at: Option<Instant> = None;
    // A rank whose heartbeats stopped (a process stopped or hung) is dead to its pool but
    // never exits: it is killed, and its end judged as any other death.
    let mut silent = registry
        .as_ref()
        .map_or_else(crossbeam_channel::never, |r| r.watch_silent(&pool));
    // A joining launch has no registry of its own: it watches the pool's, which names the
    // process of a silent member, since the rank it gets is the registry's to choose.
    let remote_watch = o
        .join
        .as_ref()
        .map(|_| RemoteWatch::start(&registry_address, &pool, &secret));
    let mut silent_elsewhere = remote_watch
        .as_ref()
        .map_or_else(crossbeam_channel::never, |w| w.silent.clone());
    loop {
        let timer = kill_at.map_or_else(crossbeam_channel::never, crossbeam_channel::at);
        let next = crossbeam_channel::select! {
            recv(rx) -> next => next,
            recv(timer) -> _ => {
                kill_all(&groups);
                kill_at = None;
                continue;
            }
            recv(silent) -> rank => {
                match rank {
                    Ok(rank) => kill_silent(&groups, rank, hosts.as_deref()),
                    Err(_) => silent = crossbeam_channel::never(),
                }
                continue;
            }
            recv(silent_elsewhere) -> member => {
                match member {
                    Ok((rank, Some(pid))) => kill_silent_process(&groups, rank, pid),
                    // A member that named no process is none of this launch's ranks.
                    Ok((_, None)) => {}
                    Err(_) => silent_elsewhere = crossbeam_channel::never(),
                }
                continue;
            }
        };
        let Ok((rank, status)) = next else { break };
        let (code, signal) = match status {
            Ok(s) => (code_of(s), s.signal()),
            Err(_) => (1, None),
        };
        if code == 0 {
            succeeded += 1;
            continue;
        }
        if ended_by().is_some() {
            // Killed by the launcher's signal watcher, which says so itself.
            continue;
        }
        let host = hosts
            .as_ref()
            .map(|h| format!(" on {}", h[rank as usize]))
            .unwrap_or_default();
        let rank = match &o.join {
            Some(_) => format!("+{rank} (joined)"),
            None => rank.to_string(),
        };
        if o.tolerate_failures {
            let died = signal.is_some() || (hosts.is_some() && code > 128);
            let how = match signal {
                Some(s) => format!("was killed by signal {s}"),
                None => format!("exited with status {code}"),
            };
            if died {
                first_death.get_or_insert(code);
                eprintln!("ipl-run: rank {rank}{host} {how}; the others go on");
            } else {
                first_failure.get_or_insert(code);
                eprintln!("ipl-run: rank {rank}{host} {how}: the program failed");
            }
        } else if first_failure.is_none() {
            first_failure = Some(code);
            eprintln!(
                "ipl-run: rank {rank}{host} exited with status {code}; stopping the others \
                 (killed after {:?})",
                o.grace
            );
            kill_at = Some(Instant::now() + o.grace);
        }
    }
    drop(remote_watch);
    let result = match (ended_by(), first_failure, first_death) {
        // Killed because a signal ends the launcher (which exits with the same status).
        (Some(sig), _, _) => 128 + sig,
        (None, Some(code), _) => code,
        (None, None, Some(code)) if succeeded == 0 => code,
        _ => 0,
    };
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

/// File descriptors one process of a pool of `nodes` may hold: a connection per lane (two)
/// and direction to every other member, plus its registry connection, listener, pipes and
/// files.
fn fds_per_process(nodes: u32) -> u64 {
    4 * u64::from(nodes) + 64
}

/// Raises this process's soft limits, which the processes it starts inherit, where a pool of
/// `nodes` needs more than they allow: open files (see [`fds_per_process`]; this launcher
/// holds three per process too) and, where the user's process count is limited, threads
/// (about 16 per process). Fails with what to do when a hard limit is too low.
fn ensure_limits(nodes: u32) -> Result<()> {
    let files = fds_per_process(nodes).max(3 * u64::from(nodes) + 64);
    raise_limit(libc::RLIMIT_NOFILE, files, "open files", "ulimit -n")?;
    raise_limit(
        libc::RLIMIT_NPROC,
        16 * u64::from(nodes) + 256,
        "processes and threads",
        "ulimit -u",
    )
}

fn raise_limit(
    resource: libc::__rlimit_resource_t,
    need: u64,
    what: &str,
    how: &str,
) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into `lim`, which is valid for writes.
    if unsafe { libc::getrlimit(resource, &mut lim) } != 0 {
        return Err(Error::io(
            format!("read the limit of {what}"),
            std::io::Error::last_os_error(),
        ));
    }
    let unlimited = libc::RLIM_INFINITY;
    if lim.rlim_cur == unlimited || lim.rlim_cur >= need {
        return Ok(());
    }
    if lim.rlim_max != unlimited && lim.rlim_max < need {
        return Err(Error::config(
            "-n",
            format!(
                "each process of this pool needs up to {need} {what}, but the hard limit is {} \
                 (raise it with `{how}` as root, or in /etc/security/limits.conf, or start \
                 fewer processes)",
                lim.rlim_max
            ),
        ));
    }
    let raised = libc::rlimit {
        rlim_cur: need,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads `raised`, a valid rlimit.
    if unsafe { libc::setrlimit(resource, &raised) } != 0 {
        return Err(Error::io(
            format!("raise the limit of {what} to {need}"),
            std::io::Error::last_os_error(),
        ));
    }
    tracing::info!(
        what,
        from = lim.rlim_cur,
        to = need,
        "limit raised for the pool"
    );
    Ok(())
}

/// The driver of the ranks: `IPL_DRIVER` of the launch's environment or else of this process,
/// if it names one that joins processes (`shm`, `tcp`, `wan`); else wan when a wide-area link
/// is emulated and shm (shared memory on each host, tcp between hosts) otherwise.
fn rank_driver(l: &Launch, wan: bool) -> Result<&'static str> {
    let given = l
        .env
        .iter()
        .find(|(k, _)| k == "IPL_DRIVER")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("IPL_DRIVER").ok());
    match given.as_deref().map(str::trim) {
        None | Some("") => Ok(if wan { "wan" } else { "shm" }),
        Some("shm") => Ok("shm"),
        Some("tcp") => Ok("tcp"),
        Some("wan") => Ok("wan"),
        Some(other) => Err(Error::config(
            "IPL_DRIVER",
            format!("'{other}' cannot join processes: use shm, tcp or wan"),
        )),
    }
}

/// Refuses, once and before anything starts, an `IPL_*` setting every rank would refuse: the
/// ranks get `l.env` over this process's own settings, with the pool's variables set per rank.
fn check_settings(l: &Launch) -> Result<()> {
    let own = std::env::vars().filter(|(k, _)| k.starts_with("IPL_"));
    let per_rank = [
        ("IPL_SERVER", "127.0.0.1:1".to_string()),
        ("IPL_POOL", "settings".to_string()),
        ("IPL_POOL_SIZE", l.nodes.to_string()),
        ("IPL_RANK", "0".to_string()),
        ("IPL_SECRET", "settings".to_string()),
        ("IPL_DRIVER", rank_driver(l, false)?.to_string()),
    ];
    let vars: Vec<(String, String)> = per_rank
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(l.env.iter().cloned())
        .chain(own.filter(|(k, _)| !PER_RANK.contains(&k.as_str())))
        .collect();
    crate::Config::from_lookup(|k| {
        vars.iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
    })
    .map(|_| ())
}

/// Variables the launcher sets per rank, never passed on from its own environment.
const PER_RANK: &[&str] = &[
    "IPL_SERVER",
    "IPL_POOL",
    "IPL_POOL_SIZE",
    "IPL_RANK",
    "IPL_SECRET",
    "IPL_SECRET_STDIN",
    "IPL_STDIN_LIFELINE",
    "IPL_LOCATION",
    "IPL_DRIVER",
    "IPL_HOST",
    "IPL_WAN_LATENCY",
    "IPL_WAN_BANDWIDTH",
    "IPL_JOIN_RUNNING",
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
        // SAFETY: `siginfo_t` is plain data, for which all zero bytes are a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid with WNOWAIT only observes that our own child has exited, writing into
        // `info`; the zombie stays, so its pid and group id cannot be reused until
        // `child.wait()` below.
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    if let Some(slot) = groups
        .lock()
        .expect("group list")
        .groups
        .get_mut(rank as usize)
    {
        *slot = None;
    }
    child.wait()
}

/// Kills rank `rank`, which the registry declared dead for its silence, if it still runs.
fn kill_silent(launched: &Mutex<Launched>, rank: u32, hosts: Option<&[&str]>) {
    let l = launched.lock().expect("group list");
    let Some(Some(pgid)) = l.groups.get(rank as usize) else {
        return;
    };
    let host = hosts
        .and_then(|h| h.get(rank as usize))
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    kill_dead_to_pool(*pgid, &format!("rank {rank}{host}"));
}

/// Kills the rank whose process group holds process `pid`, which the registry of the pool this
/// launch joined declared dead for its silence as member `member`; nothing if no rank's does.
fn kill_silent_process(launched: &Mutex<Launched>, member: u32, pid: u32) {
    let l = launched.lock().expect("group list");
    // 0 would ask for this launcher's own group.
    let Some(pid) = i32::try_from(pid).ok().filter(|&p| p > 0) else {
        return;
    };
    // SAFETY: getpgid(2) only reads the process group of `pid`, whichever process that is.
    let pgid = unsafe { libc::getpgid(pid) };
    if pgid <= 0 {
        return;
    }
    // Only a group this launch leads and has not reaped: a pid the system reused since is in
    // another process's group, and left alone.
    let Some(index) = l.groups.iter().position(|g| *g == Some(pgid)) else {
        return;
    };
    kill_dead_to_pool(pgid, &format!("rank +{index} (joined as rank {member})"));
}

/// Says that `rank` (as the launcher names it) stopped answering the registry, and kills the
/// process group `pgid` it leads. Called with the launch's group list locked, `pgid` in it.
fn kill_dead_to_pool(pgid: i32, rank: &str) {
    eprintln!(
        "ipl-run: {rank} stopped answering the registry (no heartbeat for its death timeout) \
         and is dead to its pool; killing it"
    );
    // SAFETY: kill(2) of the process group our child leads; the child has not been reaped
    // (its slot is cleared under the group list's lock, which the caller holds), so the group
    // id is still ours.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// A watch of a pool's registry elsewhere for members declared dead for their silence
/// (the registry protocol's `Watch`), for a launch that joins the pool. A registry that cannot be
/// watched (unreachable, or of a version that has no watchers) is reported, and the launch
/// goes on without.
struct RemoteWatch {
    /// The silent members' ranks and process ids.
    silent: crossbeam_channel::Receiver<(u32, Option<u32>)>,
    /// The connection, once made, closed when the watch is dropped.
    conn: Arc<Mutex<WatchConnection>>,
}

/// The connection of a [`RemoteWatch`].
#[derive(Default)]
struct WatchConnection {
    /// The launch has ended: a connection made from now on is closed at once, and a failure
    /// to connect goes unreported.
    over: bool,
    stream: Option<std::net::TcpStream>,
}

impl RemoteWatch {
    fn start(registry: &str, pool: &str, secret: &str) -> RemoteWatch {
        let (tx, silent) = crossbeam_channel::bounded(1024);
        let conn: Arc<Mutex<WatchConnection>> = Arc::default();
        let cfg = crate::Config::tcp(pool, 1, registry, secret);
        let (registry, pool, slot) = (registry.to_owned(), pool.to_owned(), conn.clone());
        // Connecting takes as long as the registry takes to answer, which the ranks need too:
        // they are started meanwhile.
        let spawned = std::thread::Builder::new()
            .name("ipl-run-watch".into())
            .spawn(move || {
                let watched = watch_registry(&cfg, &pool, &slot, &tx);
                if let (Err(e), false) = (watched, slot.lock().expect("watch").over) {
                    tracing::warn!(%registry, "cannot watch the pool's registry: {e}");
                    eprintln!(
                        "ipl-run: cannot watch the registry at {registry} for ranks that stop \
                         answering it ({e}); such a rank is not killed"
                    );
                }
            });
        if let Err(e) = spawned {
            eprintln!(
                "ipl-run: cannot start the registry watch ({e}); a rank that stops answering \
                 the registry is not killed"
            );
        }
        RemoteWatch { silent, conn }
    }
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        let mut c = self.conn.lock().expect("watch connection");
        c.over = true;
        if let Some(s) = c.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Connects to the registry of `cfg` as a watcher of `pool` and passes on what it hears until
/// the connection or `tx`'s receiver goes.
fn watch_registry(
    cfg: &crate::Config,
    pool: &str,
    slot: &Mutex<WatchConnection>,
    tx: &crossbeam_channel::Sender<(u32, Option<u32>)>,
) -> Result<()> {
    use crate::registry::proto::{read_frame, write_frame, FromRegistry, ToRegistry};
    let mut s = crate::pool::connect_registry(cfg)?;
    write_frame(
        &mut s,
        &ToRegistry::Watch {
            pool: pool.to_owned(),
        },
    )
    .map_err(|e| Error::io("registry watch", e))?;
    match read_frame::<FromRegistry>(&mut s) {
        Ok(FromRegistry::Watching) => {}
        Ok(FromRegistry::Refused(why)) => return Err(Error::Registry(why)),
        Ok(other) => {
            return Err(Error::Registry(format!(
                "unexpected answer to a watch: {other:?}"
            )))
        }
        Err(e) => {
            return Err(Error::Registry(format!(
                "no answer to a watch: {e} (a registry of an older version has no watchers)"
            )))
        }
    }
    s.set_read_timeout(None)
        .map_err(|e| Error::io("registry socket", e))?;
    {
        let mut c = slot.lock().expect("watch connection");
        if c.over {
            return Ok(());
        }
        c.stream = Some(s.try_clone().map_err(|e| Error::io("registry socket", e))?);
    }
    loop {
        match read_frame::<FromRegistry>(&mut s) {
            Ok(FromRegistry::Silent { rank, pid }) => {
                if tx.send((rank, pid)).is_err() {
                    return Ok(());
                }
            }
            Ok(_) => {}
            // The registry's end, or the launch's (which closes the connection).
            Err(_) => return Ok(()),
        }
    }
}

fn kill_all(launched: &Mutex<Launched>) {
    let mut l = launched.lock().expect("group list");
    l.stopping = true;
    for pgid in l.groups.iter().flatten() {
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
        let huge = |slots| Host {
            name: "n".into(),
            slots,
        };
        assert_eq!(total_slots(&[huge(u32::MAX), huge(2)]), MAX_NODES);
        assert_eq!(placement(&h, 6), ["n1", "n1", "n2", "10.0.0.3", "n1", "n1"]);
        for (text, line, what) in [
            ("n1\nn2 slots=0\n", 2, "slots"),
            ("n1 slots=2 slots=3\n", 1, "twice"),
            ("# only\n\nn1 cpus=4\n", 3, "cpus=4"),
            ("n1\nn$2\n", 2, "host name"),
            ("n1\n-Fconfig\n", 2, "host name"),
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
    fn launch_settings_the_ranks_cannot_run_with_are_refused_before_any_starts() {
        let launch = Launch {
            nodes: 2,
            clusters: 2,
            wan_latency: None,
            wan_bandwidth: None,
            // Fails at once: the launcher then waits the grace for the other rank.
            command: vec!["false".into()],
            env: Vec::new(),
            prefix_output: true,
        };
        let grace = RunOptions {
            grace: Duration::MAX,
            ..RunOptions::default()
        };
        let latency = Launch {
            wan_latency: Some(Duration::MAX),
            ..launch.clone()
        };
        let bandwidth = Launch {
            wan_bandwidth: Some(0),
            ..launch.clone()
        };
        let far = RunOptions {
            join: Some(Join {
                registry: "127.0.0.1:9".into(),
                pool: Named {
                    pool: "p".into(),
                    secret: "s".into(),
                },
                location: "x".repeat(crate::config::MAX_LOCATION + 1),
            }),
            ..RunOptions::default()
        };
        for (l, o, key) in [
            (&launch, &far, "--location"),
            (&launch, &grace, "--grace"),
            (&latency, &RunOptions::default(), "--wan-latency"),
            (&bandwidth, &RunOptions::default(), "--wan-bandwidth"),
        ] {
            let e = run_with(l, o).map(|code| format!("ran: status {code}"));
            let e = e.unwrap_or_else(|e| e.to_string());
            assert!(e.contains(key), "{key}: {e}");
        }
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
