//! Pools of nodes as threads of the test process, over the in-process or the tcp driver.
#![allow(dead_code)]

use ipl::{Config, Driver, RegistryServer};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Longest any pool test may take.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Where the nodes of one test pool find each other.
pub struct Net {
    pub driver: Driver,
    pub pool: String,
    pub registry: Option<RegistryServer>,
    pub secret: String,
}

impl Net {
    pub fn new(driver: Driver) -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        let secret = "mw-test-secret".to_string();
        let registry = match driver {
            Driver::Inproc => None,
            _ => Some(RegistryServer::start("127.0.0.1:0", &secret).expect("start registry")),
        };
        Net {
            driver,
            pool: format!(
                "mw-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
            registry,
            secret,
        }
    }

    /// A node's configuration: a closed pool of `size`, or an open pool for `None`.
    pub fn config(&self, size: Option<u32>) -> Config {
        let mut c = match &self.registry {
            None => Config::inproc(&self.pool, 1),
            Some(r) => Config::tcp(&self.pool, 1, r.address().to_string(), &self.secret),
        };
        c.size = size;
        c.connect_timeout = Duration::from_secs(20);
        c.join_timeout = Duration::from_secs(30);
        // Many nodes share two cores in these tests: spin briefly, then park.
        c.spin = Duration::from_micros(20);
        c
    }
}

/// Runs `f` on a thread and returns its result, failing the test if it takes longer than
/// `limit` (the thread is then left behind; the test process ends with the failure).
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
}

pub const DRIVERS: [Driver; 2] = [Driver::Inproc, Driver::Tcp];
