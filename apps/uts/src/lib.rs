//! Unbalanced Tree Search (UTS): counts the nodes of the implicit random trees of the UTS
//! benchmark (Olivier, Huan, Liu, Prins, Dinan, Sadayappan, Tseng, "UTS: An Unbalanced Tree
//! Search Benchmark", LCPC 2006), sequentially, on satin (threads or processes) and on rayon.
//!
//! Every node of a UTS tree carries a SHA-1 digest; a child's digest is the hash of its
//! parent's and its index ([`descriptor`]), and a node's number of children is drawn from its
//! digest by the tree type ([`tree`]): binomial, geometric with four depth shapes, hybrid,
//! balanced, with the reference code's flags ([`cli`], [`TreeParams`]). A tree is therefore
//! the same in any search order, and its node count is an exact checksum: the published
//! sample trees ([`SAMPLE_TREES`]) come out with their published counts in every mode.
//!
//! The searches walk the tree depth first on an explicit stack ([`walk`]); the parallel ones
//! hand the oldest part of a worker's stack to other workers as tasks ([`parallel`]).
//!
//! ```
//! use uts::parallel::{search_satin, SplitPolicy};
//! use uts::{search_sequential, Budget, SampleTree, Tree};
//!
//! let t1 = SampleTree::find("T1").unwrap(); // geometric, depth 10, 4,130,071 nodes
//! let small = uts::cli::parse_tree_args("-t 1 -a 3 -d 6 -b 4 -r 19".split_whitespace())?;
//! assert_eq!(t1.params().root_seed, small.root_seed);
//!
//! let tree = Tree::new(small)?;
//! let sequential = search_sequential(&tree, &Budget::new(u64::MAX))?;
//! let runtime = satin::Runtime::local().threads(2);
//! let parallel = search_satin(&runtime, small, u64::MAX, SplitPolicy::default())?;
//! assert_eq!(parallel, sequential);
//! assert!(parallel.nodes > parallel.leaves);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod cli;
pub mod descriptor;
pub mod parallel;
pub mod params;
pub mod samples;
pub mod tree;
pub mod walk;

pub use params::{Counts, GeoShape, ParamError, TreeParams, TreeType};
pub use samples::{SampleTree, SAMPLE_TREES};
pub use tree::Tree;
pub use walk::{search_sequential, Budget, SearchError};
