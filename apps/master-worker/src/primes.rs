//! The farm's work: counting primes, by trial division (the jobs) and by a sieve (the oracle).

/// Whether `n` is prime, by trial division with the divisors 2, 3 and 6k +- 1 up to sqrt(n).
pub fn is_prime(n: u64) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n % 2 == 0 || n % 3 == 0 {
        return false;
    }
    let mut d = 5u64;
    while d.saturating_mul(d) <= n {
        if n % d == 0 || n % (d + 2) == 0 {
            return false;
        }
        d += 6;
    }
    true
}

/// The number of primes in `start..end` by trial division (what a farm job computes).
pub fn count_primes(start: u64, end: u64) -> u64 {
    (start..end).filter(|&n| is_prime(n)).count() as u64
}

/// The number of primes below `n` by the sieve of Eratosthenes: an algorithm independent of
/// [`count_primes`], used to check farm results. Needs `n` bytes of memory.
pub fn sieve_count(n: u64) -> u64 {
    let n = usize::try_from(n).expect("sieve size fits in memory");
    if n < 3 {
        return 0;
    }
    let mut composite = vec![false; n];
    let mut count = 0;
    for i in 2..n {
        if composite[i] {
            continue;
        }
        count += 1;
        let mut j = i.saturating_mul(i);
        while j < n {
            composite[j] = true;
            j += i;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_primes() {
        let first: Vec<u64> = (0..30).filter(|&n| is_prime(n)).collect();
        assert_eq!(first, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]);
        assert!(is_prime(1_000_003));
        assert!(!is_prime(1_000_001)); // 101 * 9901
        assert!(!is_prime(25) && !is_prime(49) && !is_prime(121));
    }

    #[test]
    fn trial_division_agrees_with_the_sieve() {
        for n in [0, 1, 2, 3, 4, 10, 100, 1000, 7919, 7920, 65_537] {
            assert_eq!(count_primes(0, n), sieve_count(n), "n = {n}");
        }
        assert_eq!(sieve_count(1_000_000), 78_498);
    }
}
