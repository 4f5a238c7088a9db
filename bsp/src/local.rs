//! P processes as threads of this process, over the port library's in-process driver.

use crate::error::{Error, Result};
use crate::options::Options;
use crate::superstep::Bsp;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

fn pool_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "bsp-local-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The most processes of a local pool, each a thread of this process: a bound on the threads
/// and handles an absurd `p` would make before any could fail (`u32::MAX` handles were
/// allocated at once).
pub const MAX_LOCAL_PROCS: usize = 4096;

impl Bsp {
    /// `p` processes for `p` threads of this process, connected by the in-process driver (no
    /// network): handle `i` has pid `i`. Move each handle to its own thread; the semantics are
    /// those of [`Bsp::new`] on a pool of `p` nodes. In a traced run (see [`ipl::trace`]) the
    /// first superstep's compute time counts from the handle's creation ([`run_local`]: from
    /// the start of its thread). `p` is 1 to [`MAX_LOCAL_PROCS`].
    pub fn local(p: usize) -> Result<Vec<Bsp>> {
        Bsp::local_with(p, Options::default())
    }

    /// Like [`Bsp::local`] with explicit [`Options`].
    pub fn local_with(p: usize, opts: Options) -> Result<Vec<Bsp>> {
        if p == 0 || p > MAX_LOCAL_PROCS {
            return Err(Error::Config(format!(
                "a local pool needs 1 to {MAX_LOCAL_PROCS} processes, not {p}"
            )));
        }
        let name = pool_name();
        let mut nodes = Vec::with_capacity(p);
        for rank in 0..p {
            let mut cfg = ipl::Config::inproc(&name, p as u32);
            cfg.rank = Some(rank as u32);
            let ibis = ipl::Ibis::join(cfg).map_err(|source| Error::Ipl {
                pid: rank,
                superstep: 0,
                what: format!("joining the local pool '{name}'"),
                source: Box::new(source),
            })?;
            nodes.push(ibis);
        }
        nodes
            .into_iter()
            .map(|ibis| Bsp::with_options(ibis, opts.clone()))
            .collect()
    }
}

/// Runs `f` on `p` threads, each with its own process of a local pool (see [`Bsp::local`]), and
/// returns the results in pid order.
///
/// If one process fails (returns an error or panics), its handle is dropped, which ends every
/// other process's pending `sync` or collective with an error naming it; so `run_local` always
/// returns, and it returns the error that started it (a panic becomes [`Error::Panicked`]).
/// Set [`Options::sync_timeout`] with [`run_local_with`] to also bound waits for a process
/// that neither fails nor arrives.
pub fn run_local<T, F>(p: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Bsp) -> Result<T> + Sync,
{
    run_local_with(p, Options::default(), f)
}

/// Like [`run_local`] with explicit [`Options`].
pub fn run_local_with<T, F>(p: usize, opts: Options, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Bsp) -> Result<T> + Sync,
{
    let procs = Bsp::local_with(p, opts)?;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = procs
            .into_iter()
            .map(|bsp| {
                let f = &f;
                std::thread::Builder::new()
                    .name(format!("bsp-{}", bsp.pid()))
                    .spawn_scoped(s, move || {
                        let pid = bsp.pid();
                        // The handle moves into the closure, so a panic drops it while
                        // unwinding: the pool then reports this process dead, not departed.
                        let r = catch_unwind(AssertUnwindSafe(move || {
                            let mut bsp = bsp;
                            bsp.begin_compute();
                            f(&mut bsp)
                        }));
                        r.unwrap_or_else(|panic| {
                            let message = ipl::error::panic_message(&*panic);
                            Err(Error::Panicked { pid, message })
                        })
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(pid, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Panicked {
                        pid,
                        message: "the thread could not be joined".into(),
                    })
                }),
                Err(e) => Err(Error::Config(format!("cannot start thread {pid}: {e}"))),
            })
            .collect()
    });
    let mut primary: Option<Error> = None;
    let mut secondary: Option<Error> = None;
    let mut out = Vec::with_capacity(p);
    for r in results {
        match r {
            Ok(v) => out.push(v),
            Err(e) if e.is_peer_failure() => {
                secondary.get_or_insert(e);
            }
            Err(e) => {
                primary.get_or_insert(e);
            }
        }
    }
    match primary.or(secondary) {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
