//! `SATIN_STATS` is `0` or `1`; any other value fails a run naming the variable, where it was
//! taken for `0` and printed nothing. Its own test binary: the variable is process-wide.

mod common;

use common::tasks::Fib;
use common::{bounded, fib};
use satin::{Error, Runtime};

#[test]
fn a_value_that_is_not_0_or_1_fails_the_run_naming_it() {
    bounded("SATIN_STATS", || {
        for bad in ["yes", "true", "2"] {
            std::env::set_var("SATIN_STATS", bad);
            let err = Runtime::local().threads(1).run(Fib(5)).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{err:?}");
            let text = err.to_string();
            assert!(text.contains("SATIN_STATS") && text.contains(bad), "{text}");

            let ibis = ipl::Ibis::join(ipl::Config::inproc(format!("stats-{bad}"), 1)).unwrap();
            let err = Runtime::in_pool(ibis).threads(1).run(Fib(5)).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{err:?}");
            assert!(err.to_string().contains("SATIN_STATS"), "{err}");
        }
        for good in ["0", "1", ""] {
            std::env::set_var("SATIN_STATS", good);
            assert_eq!(Runtime::local().threads(1).run(Fib(15)).unwrap(), fib(15));
            let ibis = ipl::Ibis::join(ipl::Config::inproc(format!("stats-ok{good}"), 1)).unwrap();
            let run = Runtime::in_pool(ibis).threads(1).run(Fib(15)).unwrap();
            assert_eq!(run, Some(fib(15)));
        }
        std::env::remove_var("SATIN_STATS");
    });
}
