//! `Context::work_wanted`: a task that spawns only when an idle worker asks for work still
//! feeds every worker, and what it queued earlier is handed out first.

mod common;

use std::hint;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::bounded;
use common::tasks::{Piece, SplitOnDemand, PIECES_RAN};
use satin::{Context, Inlining, Runtime, Task};

/// How long a test waits for the other worker before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// Queues one child first, then only asks `work_wanted` until the child ran: the request of
/// the idle worker is served from the queue, not with a new spawn.
#[derive(serde::Serialize, serde::Deserialize)]
struct QueueThenAsk {
    ran_before: u32,
}

impl Task for QueueThenAsk {
    type Output = (usize, usize);
    fn run(self, cx: &mut Context) -> (usize, usize) {
        let deadline = Instant::now() + PATIENCE;
        let child = cx.spawn(Piece(1));
        while PIECES_RAN.load(Ordering::SeqCst) < self.ran_before + 1 {
            assert!(
                Instant::now() < deadline,
                "the queued child was never handed out"
            );
            let _ = cx.work_wanted();
            hint::spin_loop();
        }
        cx.sync();
        (cx.worker_index(), child.take().1)
    }
}
satin::register!(QueueThenAsk);

/// Asks `work_wanted` `times` times on a runtime with no other worker: nobody ever asks.
#[derive(serde::Serialize, serde::Deserialize)]
struct AskAlone {
    times: u32,
}

impl Task for AskAlone {
    type Output = u32;
    fn run(self, cx: &mut Context) -> u32 {
        (0..self.times).filter(|_| cx.work_wanted()).count() as u32
    }
}
satin::register!(AskAlone);

// The tests share `PIECES_RAN`; one test function runs them in turn.
#[test]
fn work_handed_out_on_demand_reaches_the_idle_worker() {
    bounded("splitting on demand", || {
        let rt = Runtime::local().threads(2).inlining(Inlining::OFF);
        let before = PIECES_RAN.load(Ordering::SeqCst);
        let (me, theirs) = rt
            .run(SplitOnDemand {
                pieces: 20,
                ran_before: before,
            })
            .unwrap();
        assert_eq!(theirs.len(), 20);
        assert!(
            theirs.iter().all(|&(_, w)| w != me),
            "a piece ran on the worker that handed it out: {me} {theirs:?}"
        );

        let before = PIECES_RAN.load(Ordering::SeqCst);
        let (me, child) = rt.run(QueueThenAsk { ran_before: before }).unwrap();
        assert_ne!(
            me, child,
            "the queued child was not handed to the idle worker"
        );

        let alone = Runtime::local().threads(1);
        assert_eq!(alone.run(AskAlone { times: 100_000 }).unwrap(), 0);
    });
}
