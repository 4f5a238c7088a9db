//! `RUST_LOG` that is not a log filter fails `trace::init` naming the variable, where the
//! default filter was used without a word. Its own test binary: the variable is process-wide,
//! and the subscriber is too.

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
    let _guard = ipl::trace::init("warn", None).unwrap();
}
