//! The task farm without any platform code: the correctness oracle and the speedup baseline.

use crate::protocol::Job;

/// Splits `0..n` into jobs of `chunk` numbers (the last one may be shorter), in order.
///
/// # Panics
/// When `chunk` is zero.
pub fn jobs(n: u64, chunk: u64) -> Vec<Job> {
    assert!(chunk > 0, "the job size must be positive");
    (0..n.div_ceil(chunk))
        .map(|id| Job {
            id,
            start: id * chunk,
            end: ((id + 1) * chunk).min(n),
        })
        .collect()
}

/// Runs every job of the farm in order on this thread and returns the number of primes below
/// `n`: the value the parallel farm must produce.
pub fn farm(n: u64, chunk: u64) -> u64 {
    jobs(n, chunk).iter().map(|j| j.run().value).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primes::sieve_count;

    #[test]
    fn jobs_cover_the_range_exactly_once() {
        for (n, chunk) in [(0, 5), (1, 5), (10, 5), (11, 5), (100, 7), (5, 100)] {
            let js = jobs(n, chunk);
            let mut next = 0;
            for (i, j) in js.iter().enumerate() {
                assert_eq!(j.id, i as u64);
                assert_eq!(j.start, next);
                assert!(j.end > j.start && j.end - j.start <= chunk);
                next = j.end;
            }
            assert_eq!(next, n);
        }
    }

    #[test]
    fn sequential_farm_matches_the_sieve() {
        for (n, chunk) in [
            (0, 3),
            (2, 1),
            (3, 1),
            (1000, 33),
            (20_000, 1000),
            (20_001, 999),
        ] {
            assert_eq!(farm(n, chunk), sieve_count(n), "n = {n}, chunk = {chunk}");
        }
    }
}
