//! A panicking task fails the run with an error that names it; nothing hangs.

mod common;

use common::{bounded, THREADS};
use satin::{Context, Error, Inlining, Runtime, Task};
use serde::{Deserialize, Serialize};

/// A tree in which exactly one leaf panics.
#[derive(Serialize, Deserialize)]
struct Faulty {
    depth: u32,
    /// Path of the leaf that panics, one bit per level.
    path: u32,
    here: u32,
}

impl Task for Faulty {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.depth == 0 {
            if self.here == self.path {
                panic!("leaf {} exploded", self.here);
            }
            return 1;
        }
        let child = |bit| Faulty {
            depth: self.depth - 1,
            path: self.path,
            here: self.here << 1 | bit,
        };
        let a = cx.spawn(child(0));
        let b = cx.spawn(child(1));
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(Faulty);

#[test]
fn a_panic_becomes_an_error_naming_the_task() {
    for threads in THREADS {
        for path in [0u32, 0b1011_0110, 0xff] {
            let result = bounded("panic", move || {
                let rt = Runtime::local().threads(threads);
                let r = rt.run(Faulty {
                    depth: 8,
                    path,
                    here: 0,
                });
                // The runtime stays usable after a failed run.
                let again = rt.run(Faulty {
                    depth: 4,
                    path: u32::MAX,
                    here: 0,
                });
                (r, again)
            });
            match result.0 {
                Err(Error::TaskPanicked { task, message }) => {
                    assert!(task.ends_with("Faulty"), "task {task}");
                    assert_eq!(message, format!("leaf {path} exploded"));
                }
                other => panic!("{threads} threads: expected a panic error, got {other:?}"),
            }
            assert_eq!(result.1.unwrap(), 16);
        }
    }
}

#[derive(Serialize, Deserialize)]
struct PanicsAtRoot;

impl Task for PanicsAtRoot {
    type Output = ();
    fn run(self, cx: &mut Context) {
        let _pending = cx.spawn(Faulty {
            depth: 6,
            path: u32::MAX,
            here: 0,
        });
        panic!("{}", String::from("root gave up"));
    }
}
satin::register!(PanicsAtRoot);

#[test]
fn a_panicking_root_with_children_outstanding_fails_cleanly() {
    for threads in THREADS {
        let err = bounded("root panic", move || {
            Runtime::local().threads(threads).run(PanicsAtRoot)
        })
        .unwrap_err();
        assert!(err.to_string().contains("root gave up"), "{err}");
        assert!(err.to_string().contains("PanicsAtRoot"), "{err}");
    }
}

#[derive(Serialize, Deserialize)]
struct Nested;

impl Task for Nested {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        0
    }
}
satin::register!(Nested);

#[derive(Serialize, Deserialize)]
struct RunsItsOwnRuntime;

impl Task for RunsItsOwnRuntime {
    type Output = String;
    fn run(self, _cx: &mut Context) -> String {
        // A separate runtime works from inside a task.
        let inner = Runtime::local().threads(1);
        assert_eq!(inner.run(Nested).unwrap(), 0);
        "ok".to_string()
    }
}
satin::register!(RunsItsOwnRuntime);

#[test]
fn a_task_may_use_another_runtime() {
    let r = bounded("nested runtime", || {
        Runtime::local().threads(2).run(RunsItsOwnRuntime)
    });
    assert_eq!(r.unwrap(), "ok");
}

static SHARED: std::sync::OnceLock<Runtime> = std::sync::OnceLock::new();

/// Calls `run` on the runtime it runs on, which would block one of its own workers.
#[derive(Serialize, Deserialize)]
struct RunsItsOwnRuntimeAgain;

impl Task for RunsItsOwnRuntimeAgain {
    type Output = bool;
    fn run(self, _cx: &mut Context) -> bool {
        matches!(
            SHARED.get().expect("runtime set").run(Nested),
            Err(Error::NestedRun)
        )
    }
}
satin::register!(RunsItsOwnRuntimeAgain);

#[test]
fn run_from_a_worker_of_the_same_runtime_is_refused() {
    let refused = bounded("nested run", || {
        let rt = SHARED.get_or_init(|| Runtime::local().threads(1));
        rt.run(RunsItsOwnRuntimeAgain)
    });
    assert!(refused.unwrap());
}

/// Like `Faulty`, but runs the second child with `call`.
#[derive(Serialize, Deserialize)]
struct FaultyCall {
    depth: u32,
    path: u32,
    here: u32,
}

impl Task for FaultyCall {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        if self.depth == 0 {
            if self.here == self.path {
                panic!("called leaf {} exploded", self.here);
            }
            return 1;
        }
        let child = |bit| FaultyCall {
            depth: self.depth - 1,
            path: self.path,
            here: self.here << 1 | bit,
        };
        let a = cx.spawn(child(0));
        let b = cx.call(child(1));
        cx.sync();
        a.take() + b
    }
}
satin::register!(FaultyCall);

#[test]
fn a_panic_inside_a_called_task_names_it() {
    for threads in THREADS {
        // The last leaf is reached through calls only; the first through spawns only.
        for path in [0u32, 0x3f, 0b10_1010] {
            let result = bounded("panic in call", move || {
                Runtime::local().threads(threads).run(FaultyCall {
                    depth: 6,
                    path,
                    here: 0,
                })
            });
            match result {
                Err(Error::TaskPanicked { task, message }) => {
                    assert!(task.ends_with("FaultyCall"), "task {task}");
                    assert_eq!(message, format!("called leaf {path} exploded"));
                }
                other => panic!("{threads} threads: expected a panic error, got {other:?}"),
            }
        }
    }
}

/// An output whose `Drop` panics (outside of unwinding, where a panic would abort the process).
#[derive(Serialize, Deserialize)]
struct Grenade;

impl Drop for Grenade {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a Grenade went off in Drop");
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Lob;

impl Task for Lob {
    type Output = Grenade;
    fn run(self, _cx: &mut Context) -> Grenade {
        Grenade
    }
}
satin::register!(Lob);

/// Drops the handles of its children unread: right after spawning each (`after_sync` false),
/// so that the runtime drops the outputs of children still pending when they finish, or after
/// its sync, when every child has finished and each output drops with its handle.
#[derive(Serialize, Deserialize)]
struct IgnoreLobs {
    lobs: u32,
    after_sync: bool,
}

impl Task for IgnoreLobs {
    type Output = ();
    fn run(self, cx: &mut Context) {
        let mut kept = Vec::new();
        for _ in 0..self.lobs {
            let h = cx.spawn(Lob);
            if self.after_sync {
                kept.push(h);
            } else {
                drop(h);
            }
        }
        cx.sync();
        drop(kept);
    }
}
satin::register!(IgnoreLobs);

#[test]
fn an_unread_output_whose_drop_panics_fails_the_run() {
    for after_sync in [false, true] {
        for threads in THREADS {
            let result = bounded("unread output", move || {
                // Every spawn queued, whatever SATIN_INLINING says: no child then runs within
                // its spawn, so on 1 worker none has run before the sync.
                let rt = Runtime::local().threads(threads).inlining(Inlining::OFF);
                (
                    rt.run(IgnoreLobs {
                        lobs: 64,
                        after_sync,
                    }),
                    rt.run(Faulty {
                        depth: 4,
                        path: u32::MAX,
                        here: 0,
                    }),
                )
            });
            let case = format!("{threads} threads, handles dropped after sync: {after_sync}");
            match result.0 {
                Err(Error::TaskPanicked { task, message }) => {
                    // A child that has finished when its handle is dropped has its output
                    // dropped there, in the spawning task, which the error then names. One
                    // still pending has it dropped by the runtime when it finishes, and the
                    // error names the child. Alone, a worker runs no child before its sync;
                    // with more, a thief may finish a child before its handle is dropped.
                    let by_parent = task.ends_with("::IgnoreLobs");
                    let by_runtime = task.ends_with("::Lob");
                    match (after_sync, threads) {
                        (true, _) => assert!(by_parent, "{case}: task {task}"),
                        (false, 1) => assert!(by_runtime, "{case}: task {task}"),
                        (false, _) => assert!(by_parent || by_runtime, "{case}: task {task}"),
                    }
                    assert!(
                        message.contains("a Grenade went off in Drop"),
                        "{case}: {message}"
                    );
                }
                other => panic!("{case}: expected a panic error, got {other:?}"),
            }
            // Every worker survived.
            assert_eq!(result.1.unwrap(), 16, "{case}");
        }
    }
}

/// A task whose `Drop` panics; it never drops itself when it runs.
#[derive(Serialize, Deserialize)]
struct Fragile;

impl Drop for Fragile {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a Fragile task was dropped");
        }
    }
}

impl Task for Fragile {
    type Output = u64;
    fn run(self, _cx: &mut Context) -> u64 {
        std::mem::forget(self);
        1
    }
}
satin::register!(Fragile);

/// Aborts its `Fragile` children, which the runtime then drops unrun.
#[derive(Serialize, Deserialize)]
struct AbortFragile(u32);

impl Task for AbortFragile {
    type Output = ();
    fn run(self, cx: &mut Context) {
        let handles: Vec<_> = (0..self.0).map(|_| cx.spawn(Fragile)).collect();
        cx.abort();
        cx.sync();
        drop(handles);
    }
}
satin::register!(AbortFragile);

#[test]
fn a_task_whose_drop_panics_when_it_is_cancelled_fails_the_run() {
    for threads in THREADS {
        let result = bounded("cancelled task", move || {
            let rt = Runtime::local().threads(threads);
            (
                rt.run(AbortFragile(64)),
                rt.run(Faulty {
                    depth: 4,
                    path: u32::MAX,
                    here: 0,
                }),
            )
        });
        match result.0 {
            Err(Error::TaskPanicked { task, message }) => {
                assert!(task.ends_with("::Fragile"), "task {task}");
                assert!(message.contains("a Fragile task was dropped"), "{message}");
            }
            other => panic!("{threads} threads: expected a panic error, got {other:?}"),
        }
        assert_eq!(result.1.unwrap(), 16, "{threads} threads");
    }
}
