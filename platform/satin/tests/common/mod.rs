//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Every test gives up after this long instead of hanging the suite.
pub const LIMIT: Duration = Duration::from_secs(60);

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
