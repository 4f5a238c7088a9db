//! What one copy of a large part costs on this host, the two ways the shm driver can move it:
//! the kernel's copy from a process's memory (`process_vm_readv`, what single copy does, here
//! reading this process's own memory through the same path) next to a plain copy in memory
//! (what each side does to move a part through the ring). Prints microseconds per copy and
//! their ratio for sizes from 4 KiB to 8 MiB (see `Config::shm_single_copy` and
//! `ReceivePortBuilder::single_copy`).
//!
//! ```text
//! cargo run --release -p ipl --example copy_cost [repetitions]
//! ```

use std::hint::black_box;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reps: u32 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .ok()
            .filter(|&r| (1..=1_000_000).contains(&r))
            .ok_or(format!(
                "'{a}' is not a number of repetitions from 1 to 1000000"
            ))?,
        None => 2000,
    };
    println!("size         kernel copy (us)   plain copy (us)   kernel / plain");
    for size in [4 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 8 << 20] {
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size];
        // Fewer repetitions of the large sizes, so that each size takes about as long.
        let n = (reps as usize * (64 << 10) / size).clamp(10, reps as usize);
        let kernel = time(n, || read_own_memory(&src, &mut dst))?;
        let plain = time(n, || {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
            Ok(())
        })?;
        println!(
            "{:>7} KiB {:>18.2} {:>17.2} {:>16.1}x",
            size >> 10,
            kernel,
            plain,
            kernel / plain
        );
    }
    Ok(())
}

/// Microseconds per call of `f`, the best of three runs of `n` calls.
fn time(n: usize, mut f: impl FnMut() -> std::io::Result<()>) -> std::io::Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            f()?;
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    Ok(best)
}

/// Copies `src` into `dst` (of the same length) with `process_vm_readv` on this process.
fn read_own_memory(src: &[u8], dst: &mut [u8]) -> std::io::Result<()> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr().cast_mut().cast(),
        iov_len: src.len(),
    };
    // SAFETY: both iovecs describe live buffers of their lengths; the kernel writes only into
    // `dst`, which this function borrows mutably, and reads `src`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    match n {
        -1 => Err(std::io::Error::last_os_error()),
        n if n as usize == dst.len() => Ok(()),
        n => Err(std::io::Error::other(format!(
            "process_vm_readv copied {n} of {} bytes",
            dst.len()
        ))),
    }
}
