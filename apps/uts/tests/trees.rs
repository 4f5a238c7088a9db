//! The published sample trees, searched sequentially, on satin with 1 to 4 threads and on
//! rayon: every search gives the counts published with the UTS distribution. The four-million
//! node trees run once per mode, smaller trees many times (with other split policies, which
//! change where work is handed out but never the counts).

mod common;

use common::{bounded, expected, sample};
use uts::parallel::{search_rayon, search_satin, SharedSearch, SplitPolicy};
use uts::{search_sequential, Budget, Counts, SearchError, Tree, TreeParams};

fn sequential(name: &str) -> Counts {
    let tree = Tree::new(sample(name).params()).unwrap();
    search_sequential(&tree, &Budget::new(u64::MAX)).unwrap()
}

#[test]
fn sequential_searches_give_the_published_counts() {
    bounded("the sequential searches", || {
        for name in ["default", "T1", "T2", "T3", "T4", "T5"] {
            assert_eq!(sequential(name), expected(name), "{name}");
        }
    });
}

#[test]
fn satin_on_one_to_four_threads_gives_the_published_counts() {
    bounded("the satin searches", || {
        for threads in 1..=4 {
            let runtime = satin::Runtime::local().threads(threads);
            for name in ["T1", "T3"] {
                for split in [SplitPolicy::FIXED, SplitPolicy::ON_DEMAND] {
                    let got =
                        search_satin(&runtime, sample(name).params(), u64::MAX, split).unwrap();
                    assert_eq!(
                        got,
                        expected(name),
                        "{name} on {threads} threads, {split:?}"
                    );
                }
            }
            assert!(
                runtime.stats().spawns > 100,
                "work was handed out: {:?}",
                runtime.stats()
            );
        }
    });
}

#[test]
fn rayon_on_one_to_four_threads_gives_the_published_counts() {
    bounded("the rayon searches", || {
        for threads in 1..=4 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for name in ["T1", "T3"] {
                let search =
                    SharedSearch::new(sample(name).params(), u64::MAX, SplitPolicy::default())
                        .unwrap();
                let got = search_rayon(&pool, &search).unwrap();
                assert_eq!(got, expected(name), "{name} on {threads} threads");
                assert_eq!(search.budget().counted(), got.nodes);
            }
        }
    });
}

/// Small trees of every type and shape, each checked against the sequential search with
/// split policies from "hand out one node after every node" to "rarely".
#[test]
fn small_trees_agree_across_modes_and_split_policies() {
    bounded("the small trees", || {
        let trees = [
            "",
            "-t 1 -a 3 -d 7 -b 4 -r 19",
            "-t 1 -a 0 -d 14 -b 4 -r 34",
            "-t 1 -a 2 -d 8 -b 5 -r 502",
            "-t 1 -a 1 -d 20 -b 4 -r 6",
            "-t 0 -b 200 -q 0.124875 -m 8 -r 42",
            "-t 0 -b 50 -q 0.2 -m 5 -r 7 -g 3",
            "-t 2 -a 0 -d 12 -b 5 -r 1 -q 0.234375 -m 4",
            "-t 3 -b 4 -d 6",
        ];
        let fixed = |every, chunk| SplitPolicy {
            every,
            chunk,
            on_demand: false,
        };
        let policies = [
            fixed(1, 1),
            fixed(3, 5),
            SplitPolicy::default(),
            fixed(1000, 100),
            SplitPolicy::ON_DEMAND,
            SplitPolicy {
                chunk: 1,
                ..SplitPolicy::ON_DEMAND
            },
        ];
        let runtimes: Vec<satin::Runtime> = [1, 2, 3]
            .iter()
            .map(|&t| satin::Runtime::local().threads(t))
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for args in trees {
            let params = uts::cli::parse_tree_args(args.split_whitespace()).unwrap();
            let tree = Tree::new(params).unwrap();
            let want = search_sequential(&tree, &Budget::new(u64::MAX)).unwrap();
            assert!(want.nodes > 1000, "{args}: a tree worth splitting");
            for split in policies {
                for rt in &runtimes {
                    let got = search_satin(rt, params, u64::MAX, split).unwrap();
                    assert_eq!(got, want, "{args}, {split:?}, {} threads", rt.num_threads());
                }
                let search = SharedSearch::new(params, u64::MAX, split).unwrap();
                match search_rayon(&pool, &search) {
                    Ok(got) => assert_eq!(got, want, "{args}, {split:?}"),
                    // rayon cannot tell when a thread wants work.
                    Err(e) => {
                        assert!(split.on_demand, "{args}, {split:?}: {e}");
                        assert!(e.to_string().contains("only satin splits on demand"), "{e}");
                    }
                }
            }
        }
    });
}

#[test]
fn every_search_stops_at_the_node_limit() {
    bounded("the limited searches", || {
        // Geometric with a fixed mean of 4 down to depth 100000: the tree never ends in practice.
        let params =
            uts::cli::parse_tree_args("-t 1 -a 3 -d 100000 -b 4".split_whitespace()).unwrap();
        let limit = 200_000;
        let tree = Tree::new(params).unwrap();
        let stopped = |e: SearchError| match e {
            SearchError::NodeLimit { limit: l, counted } => {
                assert_eq!(l, limit);
                assert!(counted > limit, "{counted}");
            }
            other => panic!("{other:?}"),
        };
        stopped(search_sequential(&tree, &Budget::new(limit)).unwrap_err());
        let runtime = satin::Runtime::local().threads(2);
        match search_satin(&runtime, params, limit, SplitPolicy::default()) {
            Err(uts::parallel::ParallelError::Search(e)) => stopped(e),
            other => panic!("satin: {other:?}"),
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let search = SharedSearch::new(params, limit, SplitPolicy::default()).unwrap();
        match search_rayon(&pool, &search) {
            Err(uts::parallel::ParallelError::Search(e)) => stopped(e),
            other => panic!("rayon's search ran past the limit: {other:?}"),
        }
        // Whatever the budget counted, the search stopped soon after the limit.
        assert!(search.budget().counted() < 20 * limit);
        // A tree just within the limit is searched in full.
        let small = TreeParams::default();
        assert_eq!(
            search_satin(&runtime, small, 1732, SplitPolicy::default()).unwrap(),
            expected("default")
        );
    });
}

/// The large sample trees (about 100 million nodes each): several seconds per search even
/// optimized, so not part of the default run. `cargo test --release -p uts --test trees --
/// --ignored`.
#[test]
#[ignore]
fn large_sample_trees() {
    let runtime = satin::Runtime::local().threads(2);
    for name in ["T1L", "T2L", "T3L"] {
        assert_eq!(sequential(name), expected(name), "{name} sequential");
        let got = search_satin(
            &runtime,
            sample(name).params(),
            u64::MAX,
            SplitPolicy::default(),
        )
        .unwrap();
        assert_eq!(got, expected(name), "{name} on satin");
    }
}
