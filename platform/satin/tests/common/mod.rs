//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod processes;
pub mod tasks;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Every test gives up after this long instead of hanging the suite (under Miri, which runs
/// them thousands of times slower, after an hour).
pub const LIMIT: Duration = Duration::from_secs(if cfg!(miri) { 3600 } else { 60 });

/// Keeps what the running task has queued on offer to thieves, publishing it whenever a steal
/// request is up, without running it, until `done` holds or the run is aborted; fails the
/// test with `what` after `limit`. Returns false if the run was aborted.
pub fn offer_until(
    cx: &satin::Context,
    limit: Duration,
    what: &str,
    done: impl Fn() -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    while !cx.is_aborted() && !done() {
        assert!(Instant::now() < deadline, "{what}");
        cx.work_wanted();
        thread::yield_now();
    }
    !cx.is_aborted()
}

/// Runs `f` on its own thread and returns its result, or fails the test if it takes longer
/// than [`LIMIT`]. A panic in `f` fails the test with the same message.
pub fn bounded<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = thread::Builder::new()
        .name(format!("bounded {what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn test thread");
    match rx.recv_timeout(LIMIT) {
        Ok(r) => {
            let _ = handle.join();
            r
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: did not finish within {LIMIT:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
    }
}

/// `normal`, or `small` under Miri, which interprets every operation and checks it against
/// Rust's rules: the same paths, on problems small enough to finish.
pub const fn sized(normal: u32, small: u32) -> u32 {
    if cfg!(miri) {
        small
    } else {
        normal
    }
}

/// The thread counts every computation is checked on.
pub const THREADS: [usize; 4] = [1, 2, 3, 4];

pub fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

/// Number of solutions of the n-queens problem, by plain backtracking.
pub fn queens_seq(n: u32, cols: u32, d1: u32, d2: u32) -> u64 {
    let all = (1u32 << n) - 1;
    if cols == all {
        return 1;
    }
    let mut free = all & !(cols | d1 | d2);
    let mut count = 0;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free &= free - 1;
        count += queens_seq(n, cols | bit, (d1 | bit) << 1, (d2 | bit) >> 1);
    }
    count
}

/// How a pool of nodes as threads of the test process is laid out.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub driver: ipl::Driver,
    pub nodes: u32,
    /// Locations the ranks are spread over in contiguous blocks, as `ipl-run --clusters` does.
    pub clusters: u32,
    /// Emulated one-way latency between locations (wan driver only).
    pub wan_latency: Duration,
}

impl Layout {
    pub fn new(driver: ipl::Driver, nodes: u32, clusters: u32) -> Layout {
        Layout {
            driver,
            nodes,
            clusters,
            wan_latency: Duration::ZERO,
        }
    }
}

fn unique_pool(what: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "satin-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `f` on every node of a pool of threads laid out as `layout`, each with its joined
/// node, and returns the results in rank order. Every node stays in the pool until all have
/// returned. Fails the test if the nodes do not all finish within [`LIMIT`].
pub fn on_nodes<T, F>(layout: Layout, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(ipl::Ibis) -> T + Send + Sync + 'static,
{
    on_nodes_until(layout, std::time::Instant::now() + LIMIT, f)
}

/// Like [`on_nodes`], failing the test if the nodes have not all finished by `deadline`
/// (for tests that run several pools within one time limit). Returns once every node has left
/// the pool and its thread has ended, so that nothing of one pool outlives its test (its
/// registry included, which would otherwise declare the nodes still in it dead).
pub fn on_nodes_until<T, F>(layout: Layout, deadline: std::time::Instant, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(ipl::Ibis) -> T + Send + Sync + 'static,
{
    log_from_env();
    let secret = "satin-test";
    let registry = match layout.driver {
        ipl::Driver::Inproc => None,
        _ => Some(ipl::RegistryServer::start("127.0.0.1:0", secret).expect("registry")),
    };
    let pool = unique_pool("nodes");
    let f = std::sync::Arc::new(f);
    let (results, collected) = mpsc::channel();
    let (release_tx, release) = crossbeam_channel::bounded::<()>(0);
    let (left_tx, left) = mpsc::channel::<()>();
    let mut threads = Vec::new();
    for rank in 0..layout.nodes {
        let mut cfg = match &registry {
            None => ipl::Config::inproc(&pool, layout.nodes),
            Some(r) => ipl::Config::tcp(&pool, layout.nodes, r.address().to_string(), secret),
        };
        cfg.driver = layout.driver;
        cfg.rank = Some(rank);
        cfg.location = format!("cluster{}", rank * layout.clusters / layout.nodes);
        cfg.wan.latency = layout.wan_latency;
        cfg.connect_timeout = Duration::from_secs(20);
        cfg.join_timeout = Duration::from_secs(30);
        let f = std::sync::Arc::clone(&f);
        let results = results.clone();
        let release = release.clone();
        let left_tx = left_tx.clone();
        let node = thread::Builder::new()
            .name(format!("node {rank}"))
            .spawn(move || {
                let ibis = ipl::Ibis::join(cfg).expect("join the pool");
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ibis.clone())));
                let _ = results.send((rank, r));
                // Stay in the pool until every node is done (the channel closes then).
                let _ = release.recv_timeout(LIMIT);
                drop(ibis);
                let _ = left_tx.send(());
            })
            .expect("spawn node thread");
        threads.push(node);
    }
    drop(results);
    drop(left_tx);
    let mut out: Vec<Option<T>> = (0..layout.nodes).map(|_| None).collect();
    for _ in 0..layout.nodes {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (rank, r) = collected
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{layout:?}: the nodes did not finish in time"));
        match r {
            Ok(v) => out[rank as usize] = Some(v),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
    drop(release_tx);
    // Leaving may wait for the others to see the end of the last run (at most 12 s).
    let leave_by = deadline.max(std::time::Instant::now() + Duration::from_secs(15));
    for _ in 0..layout.nodes {
        let left_in = leave_by.saturating_duration_since(std::time::Instant::now());
        left.recv_timeout(left_in)
            .unwrap_or_else(|_| panic!("{layout:?}: the nodes did not leave the pool in time"));
    }
    for node in threads {
        node.join().expect("a node thread ended");
    }
    out.into_iter()
        .map(|o| o.expect("every node reported"))
        .collect()
}

/// Logs to stderr as `RUST_LOG` says, if it is set.
pub fn log_from_env() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
}
