//! The task farm without any platform code: the correctness oracle and the speedup baseline.

use crate::protocol::Job;

/// The number of jobs of `chunk` numbers that `0..n` splits into.
///
/// # Panics
/// When `chunk` is zero.
pub fn job_count(n: u64, chunk: u64) -> u64 {
    assert!(chunk > 0, "the job size must be positive");
    n.div_ceil(chunk)
}

/// Job `id` of the split of `0..n` into jobs of `chunk` numbers (the last one may be shorter).
///
/// # Panics
/// When `chunk` is zero.
pub fn job(id: u64, n: u64, chunk: u64) -> Job {
    assert!(chunk > 0, "the job size must be positive");
    Job {
        id,
        start: id.saturating_mul(chunk).min(n),
        end: id.saturating_add(1).saturating_mul(chunk).min(n),
    }
}

/// The jobs that split `0..n` into `chunk` numbers each, in order, made as they are needed
/// (a farm of two billion jobs takes no memory for its list).
///
/// # Panics
/// When `chunk` is zero.
pub fn jobs(n: u64, chunk: u64) -> impl Iterator<Item = Job> {
    (0..job_count(n, chunk)).map(move |id| job(id, n, chunk))
}

/// Runs every job of the farm in order on this thread and returns the number of primes below
/// `n`: the value the parallel farm must produce.
pub fn farm(n: u64, chunk: u64) -> u64 {
    jobs(n, chunk).map(|j| j.run().value).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primes::sieve_count;

    #[test]
    fn jobs_cover_the_range_exactly_once() {
        for (n, chunk) in [(0, 5), (1, 5), (10, 5), (11, 5), (100, 7), (5, 100)] {
            let mut next = 0;
            for (i, j) in jobs(n, chunk).enumerate() {
                assert_eq!(j.id, i as u64);
                assert_eq!(j.start, next);
                assert!(j.end > j.start && j.end - j.start <= chunk);
                next = j.end;
            }
            assert_eq!(next, n);
        }
        // The last job of a range ending near the top of u64 does not overflow.
        let last = job(job_count(u64::MAX, 1 << 62) - 1, u64::MAX, 1 << 62);
        assert_eq!((last.start, last.end), (3 << 62, u64::MAX));
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
