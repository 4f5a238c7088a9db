//! Running a BSP program on P threads, over the in-process driver, tcp or shm, with a time bound.
#![allow(dead_code)]

pub mod checks;
pub mod program;

use bsp::{Bsp, Options};
use ipl::{Config, Ibis, RegistryServer};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest one pool of a test may take.
pub const LIMIT: Duration = Duration::from_secs(60);

/// How the processes of a test are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// Threads over ipl's in-process driver (`Bsp::local`).
    Local,
    /// Threads over ipl's tcp driver, with an in-process registry.
    Tcp,
    /// Threads over ipl's shared-memory driver, with an in-process registry. The host board's
    /// large collectives read each other's memory at every P (`Options::single_copy`), unless
    /// a test says otherwise: on the 2-core machines the tests run on, the default would take
    /// the bulk areas from 3 processes on.
    Shm,
    /// [`Net::Shm`] with the driver's single copy turned off (`IPL_SHM_SINGLE_COPY=0`): large
    /// collectives on the host board go through its bulk halves instead of reading each
    /// other's memory.
    ShmTwoCopies,
}

pub const NETS: [Net; 3] = [Net::Local, Net::Tcp, Net::Shm];

fn unique(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Options of test runs: a sync timeout so that a protocol bug fails instead of hanging.
pub fn opts() -> Options {
    Options {
        sync_timeout: Some(Duration::from_secs(40)),
        ..Options::default()
    }
}

/// Runs `f` on `p` processes; returns every process's result in pid order, or the error that
/// ended the run. Panics if the run takes longer than [`LIMIT`].
pub fn try_run<T, F>(net: Net, p: usize, opts: Options, f: F) -> bsp::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(&mut Bsp) -> bsp::Result<T> + Send + Sync + 'static,
{
    within_limit(net, p, move || match net {
        Net::Local => bsp::run_local_with(p, opts, f),
        _ => run_pool(net, p, opts, f),
    })
}

/// Like [`try_run`] over a pool (`Net::Tcp` or `Net::Shm`), with what each process returned,
/// by pid. Panics if the run takes longer than [`LIMIT`].
pub fn try_run_each<T, F>(net: Net, p: usize, opts: Options, f: F) -> Vec<bsp::Result<T>>
where
    T: Send + 'static,
    F: Fn(&mut Bsp) -> bsp::Result<T> + Send + Sync + 'static,
{
    assert!(
        net != Net::Local,
        "try_run_each runs pools; the local form reports one result"
    );
    within_limit(net, p, move || run_pool_each(net, p, opts, f))
}

/// What `run` returns, on a thread of its own; panics if it takes longer than [`LIMIT`].
fn within_limit<R: Send + 'static>(
    net: Net,
    p: usize,
    run: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run());
    });
    rx.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("{p} processes over {net:?} did not finish within {LIMIT:?}"))
}

/// Like [`try_run`], failing the test on an error.
pub fn run<T, F>(net: Net, p: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(&mut Bsp) -> bsp::Result<T> + Send + Sync + 'static,
{
    try_run(net, p, opts(), f).unwrap_or_else(|e| panic!("{p} processes over {net:?}: {e}"))
}

/// `p` threads, each a node of a pool over `net` whose registry runs in this process: what
/// each process returned, by pid.
pub fn run_pool_each<T, F>(net: Net, p: usize, opts: Options, f: F) -> Vec<bsp::Result<T>>
where
    T: Send + 'static,
    F: Fn(&mut Bsp) -> bsp::Result<T> + Send + Sync + 'static,
{
    let secret = "bsp-test";
    let registry = RegistryServer::start("127.0.0.1:0", secret).expect("registry");
    let pool = unique("bsp-tcp");
    let f = Arc::new(f);
    let handles: Vec<_> = (0..p)
        .map(|rank| {
            let mut cfg = Config::tcp(&pool, p as u32, registry.address().to_string(), secret);
            cfg.driver = match net {
                Net::Tcp => ipl::Driver::Tcp,
                _ => ipl::Driver::Shm,
            };
            cfg.shm_single_copy = net != Net::ShmTwoCopies;
            cfg.rank = Some(rank as u32);
            cfg.join_timeout = Duration::from_secs(30);
            let (f, mut opts) = (f.clone(), opts.clone());
            opts.single_copy = match net {
                Net::ShmTwoCopies => Some(false),
                _ => opts.single_copy.or(Some(true)),
            };
            std::thread::spawn(move || -> bsp::Result<T> {
                let ibis = Ibis::join(cfg).map_err(|source| bsp::Error::Ipl {
                    pid: rank,
                    superstep: 0,
                    what: "joining".into(),
                    source: Box::new(source),
                })?;
                let mut bsp = Bsp::with_options(ibis, opts)?;
                f(&mut bsp)
            })
        })
        .collect();
    let each = handles
        .into_iter()
        .map(|h| h.join().expect("process thread panicked"))
        .collect();
    drop(registry);
    each
}

/// [`run_pool_each`] as one result: the outputs, or the first error that is not a peer's
/// failure, else the first peer failure.
fn run_pool<T, F>(net: Net, p: usize, opts: Options, f: F) -> bsp::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(&mut Bsp) -> bsp::Result<T> + Send + Sync + 'static,
{
    let mut out = Vec::new();
    let mut first_err = None;
    let mut peer_err = None;
    for r in run_pool_each(net, p, opts, f) {
        match r {
            Ok(v) => out.push(v),
            Err(e) if e.is_peer_failure() => {
                peer_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err.or(peer_err) {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
