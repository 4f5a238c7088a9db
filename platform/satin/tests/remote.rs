//! The hooks for a distributed layer, with a thread playing the other process.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{bounded, fib, sized};
use satin::remote::{registered_name, Remote, RemoteJob};
use satin::{Context, Error, Runtime, Task};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Leaf(u64);

impl Task for Leaf {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        self.0 * 2
    }
}
satin::register!(Leaf);

/// One flag per test: tests run concurrently, and tasks cannot carry shared state.
static TAKEN: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];

/// Spawns leaves until the remote side has taken one, then syncs; returns how many it
/// spawned and the sum of their outputs.
#[derive(Serialize, Deserialize)]
struct Producer {
    slot: usize,
    abort_after_taken: bool,
}

impl Task for Producer {
    type Output = (u64, u64);
    fn run(self, cx: &mut Context) -> (u64, u64) {
        let flag = &TAKEN[self.slot];
        let start = Instant::now();
        let mut handles = Vec::new();
        let mut i = 0;
        // Spawning is what lets the worker notice that work was asked for and expose it.
        while !flag.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no job was taken"
            );
            handles.push(cx.spawn(Leaf(i)));
            i += 1;
            if i % 64 == 0 {
                thread::yield_now();
            }
        }
        if self.abort_after_taken {
            cx.abort();
            cx.sync();
            return (i, 0);
        }
        cx.sync();
        (i, handles.into_iter().map(|h| h.take()).sum())
    }
}
satin::register!(Producer);

/// Plays the remote thief: asks until a job comes, marks the slot, and hands the job to `reply`.
fn thief(
    remote: Remote,
    slot: usize,
    reply: impl FnOnce(RemoteJob) + Send + 'static,
) -> thread::JoinHandle<Leaf> {
    thread::spawn(move || {
        let start = Instant::now();
        let job = loop {
            if let Some(job) = remote.steal_oldest().expect("steal") {
                break job;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "nothing to steal"
            );
            thread::yield_now();
        };
        TAKEN[slot].store(true, Ordering::SeqCst);
        assert_eq!(Some(job.type_name()), registered_name::<Leaf>().unwrap());
        let task: Leaf = postcard::from_bytes(job.task()).expect("task decodes");
        reply(job);
        task
    })
}

#[test]
fn a_job_taken_away_is_completed_from_its_serialized_output() {
    let (result, stolen, stats) = bounded("remote steal", || {
        let rt = Runtime::local().threads(1);
        let remote = rt.remote().unwrap();
        let t = thief(remote, 0, |job| {
            let task: Leaf = postcard::from_bytes(job.task()).unwrap();
            let out = postcard::to_allocvec(&(task.0 * 2)).unwrap();
            job.complete(&out).unwrap();
        });
        let r = rt.run(Producer {
            slot: 0,
            abort_after_taken: false,
        });
        (r, t.join().unwrap(), rt.stats())
    });
    let (count, sum) = result.unwrap();
    assert!(count >= 1);
    assert_eq!(sum, count * (count - 1), "sum of 2i for i < {count}");
    // With one worker, the oldest job is the first leaf spawned.
    assert_eq!(stolen, Leaf(0));
    assert_eq!(stats.jobs_sent, 1);
    assert!(stats.bytes_moved > 0);
}

#[test]
fn a_remote_failure_fails_the_run_with_its_error() {
    let result = bounded("remote failure", || {
        let rt = Runtime::local().threads(2);
        let t = thief(rt.remote().unwrap(), 1, |job| {
            job.fail(Error::Remote("node 3 died".into()));
        });
        let r = rt.run(Producer {
            slot: 1,
            abort_after_taken: false,
        });
        t.join().unwrap();
        r
    });
    match result {
        Err(Error::Remote(msg)) => assert_eq!(msg, "node 3 died"),
        other => panic!("expected the remote error, got {other:?}"),
    }
}

#[test]
fn a_lost_remote_job_fails_the_run_instead_of_hanging_it() {
    let result = bounded("lost job", || {
        let rt = Runtime::local().threads(1);
        let t = thief(rt.remote().unwrap(), 2, drop);
        let r = rt.run(Producer {
            slot: 2,
            abort_after_taken: false,
        });
        t.join().unwrap();
        r
    });
    let err = result.unwrap_err();
    assert!(err.to_string().contains("never completed"), "{err}");
}

#[test]
fn a_job_taken_away_learns_of_its_abort() {
    let result = bounded("remote abort", || {
        let rt = Runtime::local().threads(1);
        let (tx, rx) = mpsc::channel();
        let t = thief(rt.remote().unwrap(), 3, move |job| tx.send(job).unwrap());
        let waiter = thread::spawn(move || {
            let job: RemoteJob = rx.recv().unwrap();
            let start = Instant::now();
            while !job.is_aborted() {
                assert!(start.elapsed() < Duration::from_secs(30), "abort not seen");
                thread::yield_now();
            }
            // The output of an aborted job is ignored, whatever it is.
            job.complete(&[]).unwrap();
        });
        let r = rt.run(Producer {
            slot: 3,
            abort_after_taken: true,
        });
        t.join().unwrap();
        waiter.join().unwrap();
        r
    });
    assert!(result.unwrap().0 >= 1);
}

#[derive(Serialize, Deserialize)]
struct Fib(u32);

impl Task for Fib {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.0 < 2 {
            return self.0 as u64;
        }
        let a = cx.spawn(Fib(self.0 - 1));
        let b = cx.spawn(Fib(self.0 - 2));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Fib, "tests/fib");

#[test]
fn serialized_work_runs_as_a_new_root() {
    let out = bounded("serialized root", || {
        let rt = Runtime::local().threads(2);
        let remote = rt.remote().unwrap();
        let task = postcard::to_allocvec(&Fib(N)).unwrap();
        // Local work and received work share the workers; the runtime lives until both ended
        // (a run submitted after it is gone fails: see the next test).
        thread::scope(|s| {
            let local = s.spawn(|| rt.run(Fib(N + 1)).unwrap());
            let out = remote.run_serialized("tests/fib", &task).unwrap();
            (
                postcard::from_bytes::<u64>(&out).unwrap(),
                local.join().unwrap(),
            )
        })
    });
    assert_eq!(out, (fib(N), fib(N + 1)));
}

/// The size of the serialized root's and the local root's work.
const N: u32 = sized(20, 10);

#[test]
fn work_submitted_after_the_runtime_is_gone_fails_instead_of_waiting_forever() {
    let out = bounded("after shutdown", || {
        let rt = Runtime::local().threads(2);
        let remote = rt.remote().unwrap();
        assert_eq!(rt.run(Fib(10)).unwrap(), fib(10));
        drop(rt);
        let task = postcard::to_allocvec(&Fib(10)).unwrap();
        remote.run_serialized("tests/fib", &task)
    });
    assert!(matches!(out, Err(Error::ShutDown)), "got {out:?}");
}

#[test]
fn serialized_work_with_unknown_names_or_bad_bytes_is_refused() {
    let (unknown, bad) = bounded("refused", || {
        let rt = Runtime::local().threads(1);
        let remote = rt.remote().unwrap();
        (
            remote.run_serialized("no/such/task", &[1, 2, 3]),
            remote.run_serialized("tests/fib", &[]),
        )
    });
    match unknown {
        Err(Error::UnknownTaskName(name)) => assert_eq!(name, "no/such/task"),
        other => panic!("expected UnknownTaskName, got {other:?}"),
    }
    match bad {
        Err(Error::Decode { what, .. }) => assert_eq!(what, "task"),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// Runs until aborted.
#[derive(Serialize, Deserialize)]
struct Forever;

impl Task for Forever {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let start = Instant::now();
        loop {
            assert!(start.elapsed() < Duration::from_secs(30), "never aborted");
            let h = cx.spawn(Leaf(1));
            cx.sync();
            h.take();
        }
    }
}
satin::register!(Forever);

#[test]
fn a_serialized_root_can_be_aborted() {
    let result = bounded("abort serialized root", || {
        let rt = Runtime::local().threads(2);
        let remote = rt.remote().unwrap();
        let (tx, rx) = mpsc::channel();
        let name = registered_name::<Forever>().unwrap().unwrap();
        let root = remote
            .submit(name, &postcard::to_allocvec(&Forever).unwrap(), move |r| {
                tx.send(r).unwrap()
            })
            .unwrap();
        root.abort();
        let r = rx.recv().unwrap();
        assert!(root.is_finished());
        r
    });
    assert!(matches!(result, Err(Error::Aborted)), "{result:?}");
}

#[test]
fn idle_workers_call_the_idle_hook() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let calls = bounded("idle hook", || {
        let rt = Runtime::local().threads(2);
        let remote = rt.remote().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let counter = Arc::clone(&calls);
        remote.set_idle_hook(move |worker| {
            assert!(worker < 2);
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = tx.send(());
            }
        });
        // Both workers are idle now; waiting for the first call needs no timing guess.
        rx.recv_timeout(Duration::from_secs(30))
            .expect("hook called");
        remote.clear_idle_hook();
        // The runtime works as before once the hook is gone.
        assert_eq!(rt.run(Fib(sized(15, 8))).unwrap(), fib(sized(15, 8)));
        calls.load(Ordering::SeqCst)
    });
    assert!(calls >= 1);
}

/// Spawns `Leaf(5)` and `Leaf(6)` and returns their outputs.
#[derive(Serialize, Deserialize)]
struct TwoLeaves;

impl Task for TwoLeaves {
    type Output = (u64, u64);
    fn run(self, cx: &mut Context) -> (u64, u64) {
        let a = cx.spawn(Leaf(5));
        let b = cx.spawn(Leaf(6));
        cx.sync();
        (a.take(), b.take())
    }
}
satin::register!(TwoLeaves);

#[test]
fn a_kept_result_serves_a_queued_spawn_of_an_equal_task_once() {
    let out = bounded("kept result", || {
        let rt = Runtime::local().threads(1).inlining(satin::Inlining::OFF);
        let remote = rt.remote().unwrap();
        let name = registered_name::<Leaf>().unwrap().unwrap();
        let kept = postcard::to_allocvec(&999u64).unwrap();
        remote
            .keep_result(name, &postcard::to_allocvec(&Leaf(5)).unwrap(), kept)
            .unwrap();
        assert_eq!(remote.results_held(), 1);
        let first = rt.run(TwoLeaves).unwrap();
        // Used once: the table is empty again, and the next spawn runs its child.
        let held = remote.results_held();
        let second = rt.run(TwoLeaves).unwrap();
        (first, held, second, rt.stats().orphan_results_reused)
    });
    assert_eq!(out, ((999, 12), 0, (10, 12), 1));
}

/// Doubles its number; an output from elsewhere must at least be even.
#[derive(Serialize, Deserialize)]
struct Doubled(u64);

impl Task for Doubled {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        2 * self.0
    }

    const CHECKS_OUTPUT: bool = true;

    fn check_output(&self, output: &u64) -> Result<(), String> {
        if output % 2 != 0 {
            return Err(format!("{output} is odd"));
        }
        Ok(())
    }
}
satin::register!(Doubled);

/// Spawns `Doubled(5)` and `Doubled(6)` and returns their outputs.
#[derive(Serialize, Deserialize)]
struct TwoDoubled;

impl Task for TwoDoubled {
    type Output = (u64, u64);
    fn run(self, cx: &mut Context) -> (u64, u64) {
        let a = cx.spawn(Doubled(5));
        let b = cx.spawn(Doubled(6));
        cx.sync();
        (a.take(), b.take())
    }
}
satin::register!(TwoDoubled);

#[test]
fn a_kept_result_its_task_refuses_is_computed_instead() {
    let out = bounded("refused kept result", || {
        let rt = Runtime::local().threads(1).inlining(satin::Inlining::OFF);
        let remote = rt.remote().unwrap();
        let name = registered_name::<Doubled>().unwrap().unwrap();
        for (n, kept) in [(5u64, 999u64), (6, 998)] {
            let task = postcard::to_allocvec(&Doubled(n)).unwrap();
            let kept = postcard::to_allocvec(&kept).unwrap();
            remote.keep_result(name, &task, kept).unwrap();
        }
        let got = rt.run(TwoDoubled).unwrap();
        (got, rt.stats().orphan_results_reused)
    });
    assert_eq!(out, ((10, 998), 1));
}

/// Spawns `child`, sets `queued`, and offers the child to remote thieves until its output
/// comes (`Some`) or the run is aborted (`None`).
fn offer<T: Task>(cx: &mut Context, child: T, queued: &AtomicBool) -> Option<T::Output> {
    let handle = cx.spawn(child);
    queued.store(true, Ordering::SeqCst);
    let came = common::offer_until(cx, Duration::from_secs(30), "no output came", || {
        handle.is_ready()
    });
    if !came {
        cx.sync();
        return None;
    }
    Some(handle.take())
}

/// Set once [`OfferLeaf`] has queued its leaf, so that a result kept afterwards is found by a
/// remote steal rather than by the spawn.
static LEAF_QUEUED: AtomicBool = AtomicBool::new(false);

/// Queues `Leaf(21)` and offers it to remote thieves until its output comes or the run fails.
#[derive(Serialize, Deserialize)]
struct OfferLeaf;

impl Task for OfferLeaf {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        offer(cx, Leaf(21), &LEAF_QUEUED).unwrap_or(0)
    }
}
satin::register!(OfferLeaf);

/// Runs `root`, which queues the task encoded as `task` and sets `queued`, while a thread
/// keeps `kept` as that task's result and then steals remotely until it gets a job, which it
/// completes with `answer` of the job's task bytes. The run's output, the stolen job's task
/// bytes, and the runtime's stats.
fn steal_meeting_kept<T: Task<Output = u64>>(
    root: T,
    queued: &'static AtomicBool,
    name: &'static str,
    task: Vec<u8>,
    kept: Vec<u8>,
    answer: fn(&[u8]) -> Vec<u8>,
) -> (Result<u64, Error>, Option<Vec<u8>>, satin::Stats) {
    let rt = Runtime::local().threads(1).inlining(satin::Inlining::OFF);
    let remote = rt.remote().unwrap();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let stop = std::sync::Arc::clone(&done);
    let t = thread::spawn(move || {
        let start = Instant::now();
        while !queued.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(30), "nothing queued");
            thread::yield_now();
        }
        remote.keep_result(name, &task, kept).unwrap();
        // The steal meets the kept result; the job must still be computed somewhere.
        while !stop.load(Ordering::SeqCst) {
            if let Some(job) = remote.steal_oldest().expect("steal") {
                let task = job.task().to_vec();
                job.complete(&answer(&task)).unwrap();
                return Some(task);
            }
            thread::yield_now();
        }
        None
    });
    let r = rt.run(root);
    done.store(true, Ordering::SeqCst);
    (r, t.join().unwrap(), rt.stats())
}

#[test]
fn a_kept_result_that_does_not_decode_is_not_what_a_remote_steal_completes_its_job_with() {
    let (result, thief_got, stats) = bounded("bad kept result met by a remote steal", || {
        let name = registered_name::<Leaf>().unwrap().unwrap();
        let task = postcard::to_allocvec(&Leaf(21)).unwrap();
        // Not a u64: postcard bytes end before the number does.
        steal_meeting_kept(OfferLeaf, &LEAF_QUEUED, name, task, Vec::new(), |task| {
            let task: Leaf = postcard::from_bytes(task).unwrap();
            postcard::to_allocvec(&(task.0 * 2)).unwrap()
        })
    });
    assert_eq!(result.unwrap(), 42);
    let thief_got: Option<Leaf> = thief_got.map(|t| postcard::from_bytes(&t).unwrap());
    assert_eq!(thief_got, Some(Leaf(21)));
    assert_eq!(stats.orphan_results_reused, 0);
}

/// An output whose `Deserialize` panics on [`UNLUCKY`].
#[derive(Serialize, Debug, PartialEq)]
struct Fussy(u64);

/// The value [`Fussy`]'s `Deserialize` panics on.
const UNLUCKY: u64 = 13;

/// The value [`Fuss::check_output`] panics on.
const CHECKED_OUT: u64 = 15;

impl<'de> Deserialize<'de> for Fussy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Fussy, D::Error> {
        let v = u64::deserialize(d)?;
        assert_ne!(v, UNLUCKY, "{UNLUCKY} is unlucky");
        if v == BOOBY_TRAPPED {
            std::panic::panic_any(Bomb);
        }
        Ok(Fussy(v))
    }
}

/// The value [`Fussy`]'s `Deserialize` panics on with a [`Bomb`].
const BOOBY_TRAPPED: u64 = 17;

/// A panic payload whose `Drop` panics again.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the payload went off");
    }
}

/// Doubles its number into a [`Fussy`]; its `check_output` panics on [`CHECKED_OUT`].
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Fuss(u64);

impl Task for Fuss {
    type Output = Fussy;
    fn run(self, _cx: &mut Context) -> Fussy {
        Fussy(2 * self.0)
    }

    const CHECKS_OUTPUT: bool = true;

    fn check_output(&self, output: &Fussy) -> Result<(), String> {
        assert_ne!(output.0, CHECKED_OUT, "{CHECKED_OUT} is checked out");
        Ok(())
    }
}
satin::register!(Fuss);

/// Spawns `Fuss(5)` and `Fuss(6)` and returns their outputs.
#[derive(Serialize, Deserialize)]
struct TwoFusses;

impl Task for TwoFusses {
    type Output = (u64, u64);
    fn run(self, cx: &mut Context) -> (u64, u64) {
        let a = cx.spawn(Fuss(5));
        let b = cx.spawn(Fuss(6));
        cx.sync();
        (a.take().0, b.take().0)
    }
}
satin::register!(TwoFusses);

#[test]
fn a_kept_result_whose_decoding_or_check_panics_is_computed_by_the_spawn_instead() {
    let out = bounded("panicking kept results met by spawns", || {
        let rt = Runtime::local().threads(1).inlining(satin::Inlining::OFF);
        let remote = rt.remote().unwrap();
        let name = registered_name::<Fuss>().unwrap().unwrap();
        for (n, kept) in [(5u64, UNLUCKY), (6, CHECKED_OUT)] {
            let task = postcard::to_allocvec(&Fuss(n)).unwrap();
            let kept = postcard::to_allocvec(&kept).unwrap();
            remote.keep_result(name, &task, kept).unwrap();
        }
        let got = rt.run(TwoFusses).map_err(|e| e.to_string());
        (got, rt.stats().orphan_results_reused, remote.results_held())
    });
    assert_eq!(out, (Ok((10, 12)), 0, 0));
}

/// Set once [`OfferFuss`] has queued its child.
static FUSS_QUEUED: AtomicBool = AtomicBool::new(false);

/// Queues `Fuss(21)` and offers it to remote thieves until its output comes or the run fails.
#[derive(Serialize, Deserialize)]
struct OfferFuss;

impl Task for OfferFuss {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        offer(cx, Fuss(21), &FUSS_QUEUED).map_or(0, |f| f.0)
    }
}
satin::register!(OfferFuss);

#[test]
fn a_kept_result_whose_decoding_panics_is_not_what_a_remote_steal_completes_its_job_with() {
    let (result, thief_got, stats) = bounded("panicking kept result met by a remote steal", || {
        let name = registered_name::<Fuss>().unwrap().unwrap();
        let task = postcard::to_allocvec(&Fuss(21)).unwrap();
        let kept = postcard::to_allocvec(&UNLUCKY).unwrap();
        steal_meeting_kept(OfferFuss, &FUSS_QUEUED, name, task, kept, |task| {
            let task: Fuss = postcard::from_bytes(task).unwrap();
            postcard::to_allocvec(&Fussy(task.0 * 2)).unwrap()
        })
    });
    assert_eq!(result.map_err(|e| e.to_string()), Ok(42));
    let thief_got: Option<Fuss> = thief_got.map(|t| postcard::from_bytes(&t).unwrap());
    assert_eq!(thief_got, Some(Fuss(21)));
    assert_eq!(stats.orphan_results_reused, 0);
}

#[test]
fn a_kept_result_that_does_not_decode_or_is_refused_is_not_taken() {
    let rt = Runtime::local().threads(1);
    let remote = rt.remote().unwrap();
    let doubled = registered_name::<Doubled>().unwrap().unwrap();
    let leaf = registered_name::<Leaf>().unwrap().unwrap();
    let odd = postcard::to_allocvec(&999u64).unwrap();
    let twelve = postcard::to_allocvec(&12u64).unwrap();
    let t5 = postcard::to_allocvec(&Doubled(5)).unwrap();
    let t6 = postcard::to_allocvec(&Doubled(6)).unwrap();
    let t3 = postcard::to_allocvec(&Leaf(3)).unwrap();
    remote.keep_result(doubled, &t5, odd).unwrap();
    remote.keep_result(doubled, &t6, twelve.clone()).unwrap();
    remote.keep_result(leaf, &t3, Vec::new()).unwrap();
    assert_eq!(
        remote.take_result(doubled, &t5),
        None,
        "refused by its task"
    );
    assert_eq!(remote.take_result(leaf, &t3), None, "does not decode");
    assert_eq!(remote.take_result(doubled, &t6), Some(twelve));
    let fuss = registered_name::<Fuss>().unwrap().unwrap();
    for (n, kept) in [(5u64, UNLUCKY), (6, CHECKED_OUT)] {
        let task = postcard::to_allocvec(&Fuss(n)).unwrap();
        let kept = postcard::to_allocvec(&kept).unwrap();
        remote.keep_result(fuss, &task, kept).unwrap();
        assert_eq!(
            remote.take_result(fuss, &task),
            None,
            "panics for Fuss({n})"
        );
    }
    assert_eq!(remote.results_held(), 0, "bad results are dropped");
}

/// Collects what a `tracing` subscriber writes.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_refused_kept_result_is_logged_with_the_node_that_sent_it() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let rt = Runtime::local().threads(1);
    let remote = rt.remote().unwrap();
    let doubled = registered_name::<Doubled>().unwrap().unwrap();
    let task = postcard::to_allocvec(&Doubled(7)).unwrap();
    let odd = postcard::to_allocvec(&13u64).unwrap();
    remote
        .keep_result_from(doubled, &task, odd, "node-x-4")
        .unwrap();
    let taken =
        tracing::subscriber::with_default(subscriber, || remote.take_result(doubled, &task));
    assert_eq!(taken, None);
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("node-x-4"), "the warning: {log}");
    assert!(log.contains("13 is odd"), "the warning: {log}");
}

#[test]
fn a_panic_whose_payload_panics_when_dropped_while_decoding_a_thiefs_output_fails_the_run() {
    let (result, completed) = bounded("a booby-trapped output from a thief", || {
        let rt = Runtime::local().threads(1).inlining(satin::Inlining::OFF);
        let remote = rt.remote().unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let stop = std::sync::Arc::clone(&done);
        let t = thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(job) = remote.steal_oldest().expect("steal") {
                    let trap = postcard::to_allocvec(&BOOBY_TRAPPED).unwrap();
                    return Some(job.complete_from(&trap, "node-b-1"));
                }
                thread::yield_now();
            }
            None
        });
        let r = rt.run(OfferFuss);
        done.store(true, Ordering::SeqCst);
        (r, t.join().expect("the thief's thread"))
    });
    let completed = completed.expect("the job was stolen");
    for e in [result.unwrap_err(), completed.unwrap_err()] {
        match &e {
            Error::TaskPanicked { task, message } => {
                assert!(task.ends_with("Fuss"), "{e}");
                assert!(message.contains("deserializing"), "{e}");
            }
            other => panic!("expected a panic of Fuss's output, got: {other}"),
        }
    }
}
