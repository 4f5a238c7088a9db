//! The machine's BSP parameters as Bisseling's `bspbench` measures them (Parallel Scientific
//! Computation, chapter 1): the computing rate `r` from DAXPY loops, and the cost of an
//! h-relation `T(h) = g h + l` from a least-squares line through the measured times of
//! h = P..H, each process putting h single words into the other processes, spread evenly.

use std::time::Instant;

/// Length of the longest DAXPY pair, whose rate is `r`.
pub const DAXPY_LEN: usize = 1024;

/// The rate in flop/s of `iters` pairs of DAXPY loops of length `n` (4 flops per element
/// and iteration), as `bspbench` measures it.
pub fn daxpy_rate(n: usize, iters: u32) -> f64 {
    let (alpha, beta) = (1.0 / 3.0, 4.0 / 9.0);
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut y = x.clone();
    let mut z = x.clone();
    let t = Instant::now();
    for _ in 0..iters {
        for (yi, xi) in y.iter_mut().zip(&x) {
            *yi += alpha * xi;
        }
        for (zi, xi) in z.iter_mut().zip(&x) {
            *zi -= beta * xi;
        }
        // Keeps the loops from being folded into one or hoisted out.
        std::hint::black_box((&mut y, &mut z));
    }
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    std::hint::black_box(y[n - 1] + z[n - 1]);
    4.0 * n as f64 * f64::from(iters) / secs
}

/// Where word `i` of an h-relation of process `s` of `p` goes: (process, index in the
/// destination array of 2H + p words). Words go to the other processes in turn, each to a
/// place of its own.
pub fn destination(s: usize, p: usize, i: usize) -> (usize, usize) {
    if p == 1 {
        (0, i)
    } else {
        ((s + 1 + i % (p - 1)) % p, s + (i / (p - 1)) * p)
    }
}

/// The least-squares line `t = g h + l` through `(h, t[h])` for h in `h0..=h1`.
pub fn least_squares(t: &[f64], h0: usize, h1: usize) -> Option<(f64, f64)> {
    if h1 <= h0 || h1 >= t.len() {
        return None;
    }
    let n = (h1 - h0 + 1) as f64;
    let (mut sh, mut st, mut shh, mut sht) = (0.0, 0.0, 0.0, 0.0);
    for (h, &th) in t.iter().enumerate().take(h1 + 1).skip(h0) {
        let h = h as f64;
        sh += h;
        st += th;
        shh += h * h;
        sht += h * th;
    }
    let det = n * shh - sh * sh;
    if det == 0.0 {
        return None;
    }
    let g = (n * sht - sh * st) / det;
    let l = (st - g * sh) / n;
    Some((g, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_line() {
        let t: Vec<f64> = (0..=64).map(|h| 3.5 * h as f64 + 120.0).collect();
        let (g, l) = least_squares(&t, 4, 64).unwrap();
        assert!(
            (g - 3.5).abs() < 1e-9 && (l - 120.0).abs() < 1e-6,
            "{g} {l}"
        );
        assert!(least_squares(&t, 5, 5).is_none());
        assert!(least_squares(&t, 0, 65).is_none());
    }

    #[test]
    fn words_are_spread_over_the_other_processes() {
        for p in 1..6 {
            for s in 0..p {
                let mut c = vec![0; p];
                for i in 0..10 * p {
                    c[destination(s, p, i).0] += 1;
                }
                if p > 1 {
                    assert_eq!(c[s], 0);
                }
                assert_eq!(c.iter().sum::<usize>(), 10 * p);
                // No two words land on the same place.
                let mut places: Vec<_> = (0..10 * p).map(|i| destination(s, p, i)).collect();
                places.sort_unstable();
                places.dedup();
                assert_eq!(places.len(), 10 * p);
            }
        }
    }

    #[test]
    fn daxpy_has_a_positive_rate() {
        assert!(daxpy_rate(64, 10) > 0.0);
    }
}
