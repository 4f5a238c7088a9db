//! Helpers shared by the integration tests: bounded runs and pools of nodes as threads.

#![allow(dead_code)]

use std::sync::mpsc;
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use uts::{Counts, SampleTree};

/// Every test gives up after this long instead of hanging the suite.
pub const LIMIT: Duration = Duration::from_secs(120);

/// The published tree `name`.
pub fn sample(name: &str) -> &'static SampleTree {
    SampleTree::find(name).unwrap_or_else(|| panic!("no sample tree {name}"))
}

/// The counts the published tree `name` must give.
pub fn expected(name: &str) -> Counts {
    sample(name).expected
}

/// Runs `f` on its own thread and returns its result, or fails the test if it takes longer
/// than [`LIMIT`]. A panic in `f` fails the test with the same message.
pub fn bounded<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = tx.send(f());
    });
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

fn unique_pool() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "uts-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `f` on every node of a pool of `nodes` threads of this process over `driver`, the
/// ranks spread over `clusters` locations in blocks as `ipl-run --clusters` does, and returns
/// the results in rank order. Every node stays in the pool until all have returned; the test
/// fails if they have not all finished by `deadline`.
pub fn on_nodes<T, F>(
    driver: ipl::Driver,
    nodes: u32,
    clusters: u32,
    deadline: Instant,
    f: F,
) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(ipl::Ibis) -> T + Send + Sync + 'static,
{
    let secret = "uts-test";
    let registry = match driver {
        ipl::Driver::Inproc => None,
        _ => Some(ipl::RegistryServer::start("127.0.0.1:0", secret).expect("registry")),
    };
    let pool = unique_pool();
    let f = Arc::new(f);
    let (results, collected) = mpsc::channel();
    // Held until every node has reported: the nodes wait for it before they leave.
    let release = Arc::new(RwLock::new(()));
    let held = release.write().expect("the release lock");
    for rank in 0..nodes {
        let mut cfg = match &registry {
            None => ipl::Config::inproc(&pool, nodes),
            Some(r) => ipl::Config::tcp(&pool, nodes, r.address().to_string(), secret),
        };
        cfg.driver = driver;
        cfg.rank = Some(rank);
        cfg.location = format!("cluster{}", rank * clusters / nodes);
        cfg.connect_timeout = Duration::from_secs(20);
        cfg.join_timeout = Duration::from_secs(30);
        let f = Arc::clone(&f);
        let results = results.clone();
        let release = Arc::clone(&release);
        thread::spawn(move || {
            let ibis = ipl::Ibis::join(cfg).expect("join the pool");
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ibis.clone())));
            let _ = results.send((rank, r));
            drop(release.read());
            drop(ibis);
        });
    }
    drop(results);
    let mut out: Vec<Option<T>> = (0..nodes).map(|_| None).collect();
    for _ in 0..nodes {
        let left = deadline.saturating_duration_since(Instant::now());
        let (rank, r) = collected
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{nodes} nodes over {driver:?}: not finished in time"));
        match r {
            Ok(v) => out[rank as usize] = Some(v),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
    drop(held);
    out.into_iter()
        .map(|o| o.expect("every node reported"))
        .collect()
}
