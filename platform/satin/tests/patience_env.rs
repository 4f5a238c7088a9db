//! `SATIN_ORPHAN_PATIENCE` and `SATIN_LEAVE_PATIENCE` set waits of a node of a pool; a value
//! that is not a duration is refused when the node starts. Its own test binary: the variables
//! are process-wide.

mod common;

use common::tasks::Fib;
use common::{fib, on_nodes, Layout};
use satin::{Error, Runtime};

/// A value that is not a duration, or one beyond 365 days, used to be replaced by the default
/// without a word when a run needed it (a leave or a failed member in the middle of a run);
/// now the first run of the node fails naming the variable and the value.
#[test]
fn a_patience_that_is_not_a_duration_is_refused() {
    for (key, value) in [
        ("SATIN_LEAVE_PATIENCE", "60"),
        ("SATIN_LEAVE_PATIENCE", "forever"),
        ("SATIN_ORPHAN_PATIENCE", "400 days"),
        ("SATIN_ORPHAN_PATIENCE", "-1s"),
    ] {
        std::env::set_var(key, value);
        let outcomes = on_nodes(Layout::new(ipl::Driver::Inproc, 1, 1), |ibis| {
            Runtime::in_pool(ibis).threads(1).run(Fib(10))
        });
        std::env::remove_var(key);
        let err = match &outcomes[0] {
            Err(e @ Error::Config(_)) => e.to_string(),
            other => panic!("{key}={value}: expected a config error, got {other:?}"),
        };
        assert!(err.contains(key) && err.contains(value), "{err}");
    }

    std::env::set_var("SATIN_LEAVE_PATIENCE", "2min");
    std::env::set_var("SATIN_ORPHAN_PATIENCE", "500ms");
    let outcomes = on_nodes(Layout::new(ipl::Driver::Inproc, 1, 1), |ibis| {
        Runtime::in_pool(ibis).threads(1).run(Fib(10))
    });
    std::env::remove_var("SATIN_LEAVE_PATIENCE");
    std::env::remove_var("SATIN_ORPHAN_PATIENCE");
    assert_eq!(outcomes[0].as_ref().unwrap(), &Some(fib(10)));
}
