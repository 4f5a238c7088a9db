//! User code that panics while a job moves between nodes (a task's `Serialize` when it is
//! given away, an output's `Drop` once it was sent back) ends the run with an error on every
//! node, promptly, and the pool goes on.

mod common;

use std::time::{Duration, Instant};

use common::tasks::Fib;
use common::{fib, on_nodes_until, sized, Layout};
use ipl::Driver;
use satin::{Context, Error, Runtime, Steal, Task};
use serde::{Deserialize, Serialize, Serializer};

/// The run after the failed one.
const NEXT: u32 = sized(15, 8);

/// The whole test, pool start to both runs on every node, must end within this (under Miri,
/// which interprets every operation, within half an hour).
const LIMIT: Duration = Duration::from_secs(if cfg!(miri) { 1800 } else { 15 });

#[derive(Serialize, Deserialize)]
struct Nop;

impl Task for Nop {
    type Output = ();
    fn run(self, _cx: &mut Context) {}
}
satin::register!(Nop);

/// Keeps its worker busy until the run is cancelled, spawning all the while so that the jobs
/// waiting behind it stay visible to thieves.
fn busy_until_aborted(cx: &mut Context, what: &str) {
    let start = Instant::now();
    while !cx.is_aborted() {
        assert!(
            start.elapsed() < LIMIT,
            "{what}: the run was never cancelled"
        );
        cx.spawn(Nop);
        cx.sync();
    }
}

/// A task that cannot be serialized: its `Serialize` panics, which happens only when another
/// node steals it.
#[derive(Deserialize)]
struct Unsendable;

impl Serialize for Unsendable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("Unsendable cannot be serialized");
    }
}

impl Task for Unsendable {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        busy_until_aborted(cx, "Unsendable");
        0
    }
}
satin::register!(Unsendable);

/// Spawns several `Unsendable`s on a one-thread master: one runs there until the run is
/// cancelled, so the run can only end through a steal of another.
#[derive(Serialize, Deserialize)]
struct SpreadUnsendable;

impl Task for SpreadUnsendable {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let handles: Vec<_> = (0..4).map(|_| cx.spawn(Unsendable)).collect();
        cx.sync();
        handles.into_iter().map(|h| h.take()).sum()
    }
}
satin::register!(SpreadUnsendable);

/// What a node reports: the failing run, a run after it, the node's name and the master's.
type Report<T> = (
    Result<Option<T>, Error>,
    Result<Option<u64>, Error>,
    String,
    String,
);

/// Checks what every node saw: the failing run's error (naming `task` and `what` on the
/// master, the master on the others), and a normal run after it.
fn check<T: std::fmt::Debug>(reports: Vec<Report<T>>, task: &str, what: &str) {
    for (failed, next, me, master) in reports {
        let err = failed.expect_err("the run fails");
        let text = err.to_string();
        if me == master {
            assert!(text.contains(task), "{text}");
            assert!(text.contains(what), "{text}");
            assert_eq!(next.unwrap(), Some(fib(NEXT)));
        } else {
            assert!(
                matches!(&err, Error::RunFailed { master: m, .. } if m.contains(&master)),
                "{err:?}"
            );
            assert!(text.contains(task), "{text}");
            assert_eq!(next.unwrap(), None);
        }
    }
}

#[test]
fn a_task_whose_serialize_panics_in_a_steal_fails_the_run_on_every_node() {
    let deadline = Instant::now() + LIMIT;
    // Miri has no sockets or shared memory of other processes: the in-process driver alone.
    let drivers: &[Driver] = if cfg!(miri) {
        &[Driver::Inproc]
    } else {
        &[Driver::Inproc, Driver::Tcp, Driver::Shm]
    };
    for &driver in drivers {
        let reports = on_nodes_until(Layout::new(driver, 2, 1), deadline, |ibis| {
            let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
            let failed = rt.run(SpreadUnsendable);
            let next = rt.run(Fib(NEXT));
            (failed, next, rt.node().name(), rt.master().unwrap().name())
        });
        check(reports, "Unsendable", "Unsendable cannot be serialized");
    }
}

/// An output whose `Drop` panics, outside of unwinding (where a panic would abort the
/// process). The task that receives it takes it and forgets it; so only where the runtime
/// itself drops it, on the node that ran a stolen job once the output is sent, does it go off.
#[derive(Serialize, Deserialize)]
struct Grenade;

impl Drop for Grenade {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a Grenade went off in Drop");
        }
    }
}

/// Returns a `Grenade` after a little work.
#[derive(Serialize, Deserialize)]
struct Lob;

impl Task for Lob {
    type Output = Grenade;
    fn run(self, cx: &mut Context) -> Grenade {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(2) {
            cx.spawn(Nop);
            cx.sync();
        }
        Grenade
    }
}
satin::register!(Lob);

/// Spawns many `Lob`s on a one-thread master and keeps every output it gets, so the run ends
/// well only if no `Lob` ran elsewhere; the other node steals one within the first few.
#[derive(Serialize, Deserialize)]
struct ThrowLobs;

impl Task for ThrowLobs {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        // 2 ms each: the run lasts seconds unless a steal ends it.
        let handles: Vec<_> = (0..2000).map(|_| cx.spawn(Lob)).collect();
        cx.sync();
        for h in handles {
            std::mem::forget(h.take());
        }
        0
    }
}
satin::register!(ThrowLobs);

#[test]
fn an_output_whose_drop_panics_after_a_steal_fails_the_run_on_every_node() {
    let deadline = Instant::now() + LIMIT;
    let reports = on_nodes_until(Layout::new(Driver::Inproc, 2, 1), deadline, |ibis| {
        let rt = Runtime::in_pool(ibis).threads(1).steal(Steal::Random);
        let failed = rt.run(ThrowLobs);
        let next = rt.run(Fib(NEXT));
        (failed, next, rt.node().name(), rt.master().unwrap().name())
    });
    check(reports, "Lob", "a Grenade went off in Drop");
}
