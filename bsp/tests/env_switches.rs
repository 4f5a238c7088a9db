//! `BSP_HOST_BOARD` and `BSP_MPI_SYNC` are `0` or `1`; any other value fails `Bsp::new`
//! naming the variable, rather than leaving the board or the sync over MPI on. Its own test
//! binary: the variables are process-wide.

/// A pool of one node in this process, under a name of its own.
fn join() -> ipl::Ibis {
    static POOLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = POOLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ipl::Ibis::join(ipl::Config::inproc(format!("env-switches-{n}"), 1)).unwrap()
}

#[test]
fn a_switch_that_is_not_0_or_1_is_refused_naming_it() {
    for name in ["BSP_HOST_BOARD", "BSP_MPI_SYNC"] {
        for bad in ["off", "false", "2"] {
            std::env::set_var(name, bad);
            let err = bsp::Bsp::new(join()).expect_err("a bad switch was accepted");
            assert!(matches!(err, bsp::Error::Config(_)), "{err:?}");
            let text = err.to_string();
            assert!(text.contains(name) && text.contains(bad), "{text}");
        }
        for good in ["0", "1", ""] {
            std::env::set_var(name, good);
            let mut b = bsp::Bsp::new(join()).unwrap();
            b.sync().unwrap();
        }
        std::env::remove_var(name);
    }
}
