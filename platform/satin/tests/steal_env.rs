//! `SATIN_STEAL` names a stealing policy, and anything else is refused naming it. Its own test
//! binary: the variable is process-wide.

use satin::Steal;

#[test]
fn satin_steal_names_a_policy_or_is_refused() {
    std::env::remove_var("SATIN_STEAL");
    assert_eq!(Steal::from_env(), Ok(Steal::ClusterAware));
    for (value, policy) in [
        ("random", Steal::Random),
        ("cluster-aware", Steal::ClusterAware),
        (" random ", Steal::Random),
    ] {
        std::env::set_var("SATIN_STEAL", value);
        assert_eq!(Steal::from_env(), Ok(policy), "{value:?}");
    }
    // Any value but random once gave cluster-aware stealing without a word.
    for bad in ["Random", "rs", "crs", ""] {
        std::env::set_var("SATIN_STEAL", bad);
        let e = Steal::from_env().expect_err(bad);
        assert!(e.contains("SATIN_STEAL") && e.contains("random"), "{e}");
    }
}
