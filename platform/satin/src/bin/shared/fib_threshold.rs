//! The task both satin benchmarks time: fib with a sequential threshold, and the plain
//! recursive fib it runs below the threshold (also the sequential reference).

use serde::{Deserialize, Serialize};

/// Fib that spawns above a threshold and recurses plainly below it.
#[derive(Serialize, Deserialize)]
pub struct FibThreshold {
    pub n: u32,
    pub threshold: u32,
}

impl satin::Task for FibThreshold {
    type Output = u64;
    fn run(self, cx: &mut satin::Context) -> u64 {
        let FibThreshold { n, threshold } = self;
        if n < threshold || n < 2 {
            return fib(n);
        }
        let a = cx.spawn(FibThreshold {
            n: n - 1,
            threshold,
        });
        let b = cx.spawn(FibThreshold {
            n: n - 2,
            threshold,
        });
        cx.sync();
        a.take() + b.take()
    }
}
satin::register!(FibThreshold);

pub fn fib(n: u32) -> u64 {
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}
