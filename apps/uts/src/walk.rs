//! The depth-first walk every search shares: an explicit stack of nodes whose children are
//! still to be generated, so that no search recurses with the tree's depth.
//!
//! A child is counted, and its own number of children drawn, as soon as its parent generates
//! it; only children that have children of their own go on the stack. Most nodes of the
//! benchmark trees are leaves (80% of T1, 88% of T3), and those never touch the stack. The
//! parallel searches hand the oldest entries of the stack, the roots of the largest
//! unexplored subtrees, to other workers ([`Walk::split_oldest`]).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::descriptor::{ChildHasher, Descriptor};
use crate::params::Counts;
use crate::tree::Tree;

/// A node that has children, counted already, whose children are not generated yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The node's descriptor.
    pub desc: Descriptor,
    /// Its depth (the root's is 0).
    pub depth: u32,
    /// How many children it has (at least 1).
    pub children: u32,
}

/// The root's counts, and the root as a pending node if it has children.
pub fn start(tree: &Tree) -> (Counts, Option<Pending>) {
    let desc = tree.root();
    let children = tree.children(&desc, 0);
    let counts = Counts {
        nodes: 1,
        leaves: u64::from(children == 0),
        max_depth: 0,
    };
    let pending = (children > 0).then_some(Pending {
        desc,
        depth: 0,
        children,
    });
    (counts, pending)
}

/// A depth-first walk over the subtrees below some pending nodes.
pub struct Walk<'t> {
    tree: &'t Tree,
    stack: Vec<Pending>,
    counts: Counts,
    granularity: u32,
}

impl<'t> Walk<'t> {
    /// A walk that will generate every node below `pending` (those themselves are counted).
    pub fn new(tree: &'t Tree, pending: Vec<Pending>) -> Walk<'t> {
        Walk {
            tree,
            stack: pending,
            counts: Counts::default(),
            granularity: tree.params().granularity,
        }
    }

    /// The nodes generated so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Nodes waiting for their children to be generated.
    pub fn pending(&self) -> usize {
        self.stack.len()
    }

    /// Generates the children of the newest pending node; false once nothing is pending.
    #[inline(always)]
    pub fn step(&mut self) -> bool {
        match self.stack.pop() {
            Some(p) => {
                self.expand(p);
                true
            }
            None => false,
        }
    }

    #[inline(always)]
    fn expand(&mut self, p: Pending) {
        let depth = p.depth + 1;
        self.counts.nodes += u64::from(p.children);
        self.counts.max_depth = self.counts.max_depth.max(depth);
        let mut hasher = ChildHasher::new(&p.desc);
        let mut leaves = 0;
        if self.granularity == 1 {
            for i in 0..p.children {
                let desc = hasher.child(i);
                self.place(desc, depth, &mut leaves);
            }
        } else {
            for i in 0..p.children {
                let desc = hasher.child_rounds(i, self.granularity);
                self.place(desc, depth, &mut leaves);
            }
        }
        self.counts.leaves += leaves;
    }

    #[inline(always)]
    fn place(&mut self, desc: Descriptor, depth: u32, leaves: &mut u64) {
        let children = self.tree.children(&desc, depth);
        if children == 0 {
            *leaves += 1;
        } else {
            self.stack.push(Pending {
                desc,
                depth,
                children,
            });
        }
    }

    /// Takes the `n` oldest pending nodes (at most all of them) out of this walk.
    pub fn split_oldest(&mut self, n: usize) -> Vec<Pending> {
        let n = n.min(self.stack.len());
        self.stack.drain(..n).collect()
    }

    /// Drops whatever is still pending (a search that stops at the node limit).
    pub fn abandon(&mut self) {
        self.stack.clear();
    }
}

/// The pending limit when none is given: 2^22 nodes, 112 MiB of stack at 28 bytes a node.
///
/// The node limit alone does not bound memory: a tree whose every node has children (`-t 0
/// -b 2000 -q 1 -m 100`) keeps almost every node it generates pending, and 2^32 of them (the
/// default node limit) would take 112 GiB. The published trees stay far below this: a walk
/// holds the root's children and fewer than `m` siblings per level of its path, some 220,000
/// nodes for T2XXL (depth 216,370, `m` 2) and 72,000 for T3L.
pub const DEFAULT_MAX_PENDING: u64 = 1 << 22;

/// The limits of a search, and what is counted against them, shared by every worker of one
/// process: the nodes generated (the node limit), and the nodes held pending at once, on the
/// stacks of the walks and in tasks not yet run (the pending limit).
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    counted: AtomicU64,
    max_pending: u64,
    /// Signed: a walk reports the nodes it pushes every [`CHARGE_EVERY`] nodes, so nodes it
    /// hands out or drops before reporting them make its share dip below zero for a while.
    held: AtomicI64,
    over_pending: AtomicBool,
}

impl Budget {
    /// A budget of `limit` nodes, with the pending limit [`DEFAULT_MAX_PENDING`].
    pub fn new(limit: u64) -> Budget {
        Budget::with_max_pending(limit, DEFAULT_MAX_PENDING)
    }

    /// A budget of `limit` nodes, of which at most `max_pending` may be pending at once.
    pub fn with_max_pending(limit: u64, max_pending: u64) -> Budget {
        Budget {
            limit,
            counted: AtomicU64::new(0),
            max_pending,
            held: AtomicI64::new(0),
            over_pending: AtomicBool::new(false),
        }
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The pending limit.
    pub fn max_pending(&self) -> u64 {
        self.max_pending
    }

    /// Adds `delta` to the nodes held pending; false, for good, once they were over the
    /// pending limit.
    pub fn hold(&self, delta: i64) -> bool {
        let held = self
            .held
            .fetch_add(delta, Ordering::Relaxed)
            .saturating_add(delta);
        if held > 0 && held as u64 > self.max_pending {
            self.over_pending.store(true, Ordering::Relaxed);
        }
        !self.pending_exceeded()
    }

    /// The nodes held pending in this process, as the walks last reported them (below the
    /// true count by at most [`CHARGE_EVERY`] a walk, and below zero at times); 0 once a
    /// search is over.
    pub fn held(&self) -> i64 {
        self.held.load(Ordering::Relaxed)
    }

    /// True once the nodes held pending were over the pending limit.
    pub fn pending_exceeded(&self) -> bool {
        self.over_pending.load(Ordering::Relaxed)
    }

    /// Counts `n` more nodes; false once the total is over the limit.
    pub fn charge(&self, n: u64) -> bool {
        self.counted
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n)
            <= self.limit
    }

    /// True once the total is over the limit, or the nodes held pending were.
    pub fn exhausted(&self) -> bool {
        self.counted.load(Ordering::Relaxed) > self.limit || self.pending_exceeded()
    }

    /// The nodes counted so far (in this process).
    pub fn counted(&self) -> u64 {
        self.counted.load(Ordering::Relaxed)
    }
}

/// Why a search gave no counts.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SearchError {
    /// The tree has more nodes than the search may generate.
    #[error(
        "the tree has more than {limit} nodes (the node limit, --max-nodes): stopped after \
         {counted} nodes; the tree may never end with these parameters"
    )]
    NodeLimit {
        /// The limit.
        limit: u64,
        /// Nodes generated when the search stopped (in the process that stopped first).
        counted: u64,
    },
    /// The search held more nodes pending at once than it may.
    #[error(
        "the search held more than {limit} nodes pending at once (the pending limit, \
         --max-pending): stopped after {counted} nodes; the tree may never end with these \
         parameters"
    )]
    PendingLimit {
        /// The pending limit.
        limit: u64,
        /// Nodes generated when the search stopped (in the process that stopped first).
        counted: u64,
    },
}

/// Nodes a search generates between two updates of the shared count (progress and limit).
pub const CHARGE_EVERY: u64 = 1 << 16;

/// Searches the whole tree on this thread: the sequential baseline. Stops with
/// [`SearchError::NodeLimit`] once more than `budget.limit()` nodes are generated, and with
/// [`SearchError::PendingLimit`] once more than `budget.max_pending()` are pending; the
/// budget's count follows the search (every [`CHARGE_EVERY`] nodes) for progress reports.
///
/// Both limits are looked at every [`CHARGE_EVERY`] nodes, so the stack holds at most that
/// many nodes (and the root's children) beyond the pending limit.
///
/// # Errors
/// The node limit or the pending limit.
pub fn search_sequential(tree: &Tree, budget: &Budget) -> Result<Counts, SearchError> {
    let (mut counts, root) = start(tree);
    budget.charge(counts.nodes);
    let mut walk = Walk::new(tree, root.into_iter().collect());
    let limit = budget.limit();
    let mut charged = 0;
    while walk.step() {
        let nodes = walk.counts.nodes;
        if nodes - charged >= CHARGE_EVERY {
            budget.charge(nodes - charged);
            charged = nodes;
            if counts.nodes + nodes > limit {
                return Err(SearchError::NodeLimit {
                    limit,
                    counted: counts.nodes + nodes,
                });
            }
            if walk.pending() as u64 > budget.max_pending() {
                return Err(SearchError::PendingLimit {
                    limit: budget.max_pending(),
                    counted: counts.nodes + nodes,
                });
            }
        }
    }
    budget.charge(walk.counts.nodes - charged);
    counts.merge(walk.counts);
    if counts.nodes > limit {
        return Err(SearchError::NodeLimit {
            limit,
            counted: counts.nodes,
        });
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::TreeParams;

    /// The tree counted by plain recursion over the formula, the reference code's way.
    fn recursive(tree: &Tree, d: Descriptor, depth: u32, c: &mut Counts) {
        c.nodes += 1;
        c.max_depth = c.max_depth.max(depth);
        let n = tree.formula_children(d.rand(), depth);
        if n == 0 {
            c.leaves += 1;
        }
        for i in 0..n {
            recursive(tree, d.child(i), depth + 1, c);
        }
    }

    #[test]
    fn the_walk_counts_what_recursion_counts() {
        for args in [
            "",
            "-t 1 -a 3 -d 6 -b 4 -r 19",
            "-t 1 -a 2 -d 5 -b 3 -r 5",
            "-t 1 -a 1 -d 4 -b 3 -r 2",
            "-t 2 -a 0 -d 8 -b 4 -r 1 -q 0.2 -m 4",
            "-t 0 -b 30 -q 0.2 -m 4 -r 3",
            "-t 3 -b 3 -d 5",
            "-t 1 -d 4 -g 3",
        ] {
            let tree =
                Tree::new(crate::cli::parse_tree_args(args.split_whitespace()).unwrap()).unwrap();
            let mut expected = Counts::default();
            recursive(&tree, tree.root(), 0, &mut expected);
            let budget = Budget::new(u64::MAX);
            assert_eq!(
                search_sequential(&tree, &budget).unwrap(),
                expected,
                "{args}"
            );
            assert_eq!(budget.counted(), expected.nodes);
        }
    }

    #[test]
    fn the_default_tree_is_the_published_one() {
        let tree = Tree::new(TreeParams::default()).unwrap();
        let c = search_sequential(&tree, &Budget::new(u64::MAX)).unwrap();
        assert_eq!((c.nodes, c.leaves, c.max_depth), (1732, 1050, 6));
    }

    #[test]
    fn the_node_limit_stops_a_search() {
        let tree = Tree::new(TreeParams::default()).unwrap();
        assert_eq!(
            search_sequential(&tree, &Budget::new(1000)),
            Err(SearchError::NodeLimit {
                limit: 1000,
                counted: 1732
            })
        );
        // Exactly the tree's size is within the limit.
        assert!(search_sequential(&tree, &Budget::new(1732)).is_ok());
    }

    #[test]
    fn the_pending_limit_stops_a_tree_that_keeps_its_nodes_pending() {
        // Every node but the root has 100 children: the stack grows by 99 nodes a node.
        let tree = Tree::new(
            crate::cli::parse_tree_args("-t 0 -b 2000 -q 1 -m 100".split_whitespace()).unwrap(),
        )
        .unwrap();
        let budget = Budget::with_max_pending(u64::MAX, 100_000);
        match search_sequential(&tree, &budget) {
            Err(SearchError::PendingLimit { limit, counted }) => {
                assert_eq!(limit, 100_000);
                // Stopped at the first look past the limit.
                assert!(counted < 100_000 + 2 * CHARGE_EVERY, "{counted}");
            }
            other => panic!("{other:?}"),
        }
        // The published trees stay far below the default.
        let t3 = crate::SampleTree::find("T3").unwrap();
        let tree = Tree::new(t3.params()).unwrap();
        let budget = Budget::with_max_pending(u64::MAX, 10_000);
        assert_eq!(search_sequential(&tree, &budget), Ok(t3.expected));
    }

    #[test]
    fn splitting_hands_out_the_oldest_nodes() {
        let tree = Tree::new(TreeParams::default()).unwrap();
        let (_, root) = start(&tree);
        let mut walk = Walk::new(&tree, vec![root.unwrap()]);
        walk.step();
        let before = walk.pending();
        assert!(
            before >= 2,
            "the default root has 2 or more children with children"
        );
        let oldest = walk.split_oldest(1);
        assert_eq!(oldest.len(), 1);
        assert_eq!(walk.pending(), before - 1);
        assert_eq!(walk.split_oldest(100).len(), before - 1);
    }
}
