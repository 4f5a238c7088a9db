//! Searches over pools of 2 to 4 nodes (threads of the test process) over the in-process driver
//! and over tcp, with both stealing policies: the master gets the published counts, the other
//! nodes `None`, and work really moves between nodes.

mod common;

use std::time::{Duration, Instant};

use common::{bounded, expected, on_nodes, sample};
use satin::Steal;
use uts::parallel::{search_in_pool, SharedSearch, SplitPolicy};
use uts::Counts;

/// What one node saw: its result of each search, and the jobs it received from others.
struct NodeReport {
    results: Vec<Option<Counts>>,
    jobs_received: u64,
}

fn searches(ibis: ipl::Ibis, steal: Steal, trees: &[&str]) -> NodeReport {
    let runtime = satin::Runtime::in_pool(ibis).threads(1).steal(steal);
    let results = trees
        .iter()
        .map(|name| {
            let search = SharedSearch::new(sample(name).params(), u64::MAX, SplitPolicy::default())
                .expect("a valid tree");
            search_in_pool(&runtime, &search).expect("the search")
        })
        .collect();
    NodeReport {
        results,
        jobs_received: runtime.stats().jobs_received,
    }
}

fn check_pools(driver: ipl::Driver) {
    let trees = ["T1", "T3", "default"];
    let deadline = Instant::now() + Duration::from_secs(110);
    for nodes in 2..=4 {
        for steal in [Steal::Random, Steal::ClusterAware] {
            // Cluster-aware stealing with the nodes in two locations where there are enough.
            let clusters = if steal == Steal::ClusterAware && nodes > 2 {
                2
            } else {
                1
            };
            let reports = on_nodes(driver, nodes, clusters, deadline, move |ibis| {
                searches(ibis, steal, &trees)
            });
            for (i, name) in trees.iter().enumerate() {
                let found: Vec<Counts> = reports.iter().filter_map(|r| r.results[i]).collect();
                assert_eq!(
                    found,
                    [expected(name)],
                    "{name} on {nodes} nodes over {driver:?}, {steal:?}: one master, exact counts"
                );
            }
            let received: u64 = reports.iter().map(|r| r.jobs_received).sum();
            assert!(
                received > 0,
                "{nodes} nodes over {driver:?}, {steal:?}: no job moved between nodes"
            );
        }
    }
}

#[test]
fn pools_over_the_in_process_driver_give_the_published_counts() {
    bounded("the inproc pools", || check_pools(ipl::Driver::Inproc));
}

#[test]
fn pools_over_tcp_give_the_published_counts() {
    bounded("the tcp pools", || check_pools(ipl::Driver::Tcp));
}

#[test]
fn a_pool_stops_at_the_node_limit_everywhere() {
    bounded("the limited pool search", || {
        let params =
            uts::cli::parse_tree_args("-t 1 -a 3 -d 100000 -b 4".split_whitespace()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let outcomes = on_nodes(ipl::Driver::Inproc, 3, 1, deadline, move |ibis| {
            let runtime = satin::Runtime::in_pool(ibis).threads(1);
            let search = SharedSearch::new(params, 300_000, SplitPolicy::default()).unwrap();
            search_in_pool(&runtime, &search).map_err(|e| e.to_string())
        });
        let errors: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
        assert_eq!(
            errors.len(),
            1,
            "the master reports the limit: {outcomes:?}"
        );
        assert!(
            errors[0].contains("more than 300000 nodes"),
            "{}",
            errors[0]
        );
        assert!(outcomes.iter().filter(|o| matches!(o, Ok(None))).count() == 2);
    });
}
