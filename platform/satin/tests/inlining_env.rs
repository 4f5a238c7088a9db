//! `SATIN_INLINING` sets the inlining of runtimes that do not set it themselves. Its own test
//! binary: the variable is process-wide.

mod common;

use common::tasks::Fib;
use common::{bounded, fib};
use satin::{Error, Inlining, Runtime};

#[test]
fn the_environment_sets_inlining_and_a_bad_value_is_refused() {
    bounded("SATIN_INLINING", || {
        std::env::set_var("SATIN_INLINING", "off");
        let rt = Runtime::local().threads(1);
        assert_eq!(rt.run(Fib(15)).unwrap(), fib(15));
        assert_eq!(rt.stats().spawns_inlined, 0);

        // An explicit setting wins over the environment.
        let rt = Runtime::local().threads(1).inlining(Inlining {
            min_depth: 0,
            min_queued: 0,
        });
        assert_eq!(rt.run(Fib(15)).unwrap(), fib(15));
        assert_eq!(rt.stats().spawns_inlined, rt.stats().spawns);

        std::env::set_var("SATIN_INLINING", "deep");
        let err = Runtime::local().threads(1).run(Fib(5)).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("SATIN_INLINING") && text.contains("deep"),
            "{text}"
        );
        std::env::remove_var("SATIN_INLINING");
    });
}
