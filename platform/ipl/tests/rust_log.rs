//! `RUST_LOG` that is not a log filter fails `trace::init` naming the variable, where the
//! default filter was used without a word; so does an `IPL_TRACE_MESSAGES` that is not a byte
//! count, traced or not. Its own test binary: the variables are process-wide, and the
//! subscriber is too.

#[test]
fn a_rust_log_that_is_not_a_filter_is_refused_naming_it() {
    std::env::remove_var("IPL_TRACE");
    std::env::set_var("RUST_LOG", "ipl=degub");
    let e = ipl::trace::init("warn", None)
        .err()
        .expect("a bad RUST_LOG was accepted");
    let text = e.to_string();
    assert!(
        text.contains("RUST_LOG") && text.contains("degub"),
        "{text}"
    );

    std::env::set_var("RUST_LOG", "ipl=debug,warn");
    // Without a trace asked for, where it used to be read only when one was.
    std::env::set_var("IPL_TRACE_MESSAGES", "lots");
    let e = ipl::trace::init("warn", None)
        .err()
        .expect("a bad IPL_TRACE_MESSAGES was accepted");
    assert!(e.to_string().contains("IPL_TRACE_MESSAGES"), "{e}");

    // A byte count with a unit, as the other sizes take.
    std::env::set_var("IPL_TRACE_MESSAGES", "64Ki");
    let _guard = ipl::trace::init("warn", None).unwrap();
}
