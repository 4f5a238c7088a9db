//! Pools of nodes as threads of the test process, over each driver.
#![allow(dead_code)]

use ipl::{Config, Driver, Ibis, NodeId, RegistryServer};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest a pool test may take.
pub const LIMIT: Duration = Duration::from_secs(60);

pub fn unique(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Where nodes of a test pool find each other.
pub struct Net {
    pub driver: Driver,
    pub pool: String,
    pub size: u32,
    pub registry: Option<Arc<RegistryServer>>,
    pub secret: String,
}

impl Net {
    pub fn new(driver: Driver, size: u32) -> Net {
        let secret = "test-secret".to_string();
        let registry = match driver {
            Driver::Inproc => None,
            _ => Some(Arc::new(
                RegistryServer::start("127.0.0.1:0", &secret).unwrap(),
            )),
        };
        Net {
            driver,
            pool: unique("pool"),
            size,
            registry,
            secret,
        }
    }

    pub fn config(&self) -> Config {
        let mut c = match &self.registry {
            None => Config::inproc(&self.pool, self.size),
            Some(r) => Config::tcp(&self.pool, self.size, r.address().to_string(), &self.secret),
        };
        c.driver = self.driver;
        c.connect_timeout = Duration::from_secs(20);
        c.join_timeout = Duration::from_secs(30);
        c
    }

    /// The address of the pool's registry, for child processes to join; a pool over a
    /// network driver has one.
    pub fn registry_address(&self) -> String {
        self.registry
            .as_ref()
            .expect("a pool over a network driver has a registry")
            .address()
            .to_string()
    }
}

/// Runs `f` on `n` nodes (threads), each with its node handle and the closed pool in rank order;
/// returns their results in rank order. Fails the test if the pool does not finish in [`LIMIT`].
pub fn run_pool<T, F>(driver: Driver, n: u32, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Ibis, Vec<NodeId>) -> ipl::Result<T> + Send + Sync + 'static,
{
    run_pool_with(driver, n, |c| c, f)
}

/// Like [`run_pool`] with a per-node configuration tweak (given the index of the thread).
pub fn run_pool_with<T, F, C>(driver: Driver, n: u32, tweak: C, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Ibis, Vec<NodeId>) -> ipl::Result<T> + Send + Sync + 'static,
    C: Fn(Config) -> Config,
{
    let net = Net::new(driver, n);
    let f = Arc::new(f);
    // Every node stays in the pool until all are done, so none sees another leave early.
    let done = Arc::new(std::sync::Barrier::new(n as usize));
    let (tx, rx) = crossbeam_channel::unbounded();
    for i in 0..n {
        let mut cfg = net.config();
        cfg.rank = Some(i);
        let cfg = tweak(cfg);
        let f = f.clone();
        let tx = tx.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut keep = None;
            let r = (|| {
                let ibis = Ibis::join(cfg)?;
                keep = Some(ibis.clone());
                let all = ibis.pool().wait_closed()?;
                f(ibis, all)
            })();
            done.wait();
            drop(keep);
            let _ = tx.send((i, r));
        });
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let (i, r) = rx.recv_timeout(LIMIT).unwrap_or_else(|_| {
            panic!("pool of {n} over {driver:?} did not finish within {LIMIT:?}")
        });
        out[i as usize] =
            Some(r.unwrap_or_else(|e| panic!("node {i} over {driver:?} failed: {e}")));
    }
    drop(net);
    out.into_iter()
        .map(|o| o.expect("every node reported"))
        .collect()
}

pub const DRIVERS: [Driver; 3] = [Driver::Inproc, Driver::Tcp, Driver::Shm];
