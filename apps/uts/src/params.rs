//! The parameters that define a UTS tree (the reference code's `-t -b -m -q -d -a -r -f -g`),
//! their checks, and the published sample trees.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The most children a node may have below the root of a binomial tree, and anywhere in the
/// other random trees (`MAXNUMCHILDREN` of the reference code: larger draws are cut to it).
pub const MAX_CHILDREN: u32 = 100;

/// The largest root branching factor accepted: a binomial or balanced root materializes that
/// many children at once.
pub const MAX_ROOT_BRANCHING: f64 = 1_048_576.0;

/// The largest compute granularity accepted (SHA-1 evaluations per node).
pub const MAX_GRANULARITY: u32 = 1_000_000;

/// How the number of children of a node is drawn (`-t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TreeType {
    /// `-t 0`: the root has `floor(b)` children; every other node has `m` children with
    /// probability `q`, else none.
    Binomial,
    /// `-t 1`: a geometric number of children with a mean that depends on the depth (`-a`).
    Geometric,
    /// `-t 2`: geometric above depth `f * d`, binomial from there on.
    Hybrid,
    /// `-t 3`: `floor(b)` children for every node above depth `d`: no randomness.
    Balanced,
}

impl TreeType {
    /// The type of `-t N`.
    pub fn from_code(code: i64) -> Option<TreeType> {
        match code {
            0 => Some(TreeType::Binomial),
            1 => Some(TreeType::Geometric),
            2 => Some(TreeType::Hybrid),
            3 => Some(TreeType::Balanced),
            _ => None,
        }
    }

    /// The number `-t` takes.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The reference code's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            TreeType::Binomial => "binomial",
            TreeType::Geometric => "geometric",
            TreeType::Hybrid => "hybrid",
            TreeType::Balanced => "balanced",
        }
    }
}

/// How the mean branching factor of a geometric node falls with its depth `i` (`-a`); `b`
/// is the root's branching factor and `d` the depth parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GeoShape {
    /// `-a 0`: `b * (1 - i / d)`, nothing below depth `d`.
    Linear,
    /// `-a 1`: `b * i^(-ln b / ln d)`, a polynomial decrease.
    ExpDec,
    /// `-a 2`: `b^sin(2 pi i / d)`, nothing below depth `5 d`.
    Cyclic,
    /// `-a 3`: `b` above depth `d`, nothing below.
    Fixed,
}

impl GeoShape {
    /// The shape of `-a N`.
    pub fn from_code(code: i64) -> Option<GeoShape> {
        match code {
            0 => Some(GeoShape::Linear),
            1 => Some(GeoShape::ExpDec),
            2 => Some(GeoShape::Cyclic),
            3 => Some(GeoShape::Fixed),
            _ => None,
        }
    }

    /// The number `-a` takes.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            GeoShape::Linear => "linear",
            GeoShape::ExpDec => "expdec",
            GeoShape::Cyclic => "cyclic",
            GeoShape::Fixed => "fixed",
        }
    }
}

/// The parameters of a tree, with the reference code's defaults ([`TreeParams::default`]:
/// the geometric tree of 1732 nodes).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreeParams {
    /// `-t`: how children are drawn.
    pub tree_type: TreeType,
    /// `-b`: the root's branching factor (binomial, balanced: its number of children; geometric:
    /// the mean number of children at the root).
    pub root_branching: f64,
    /// `-r`: the root seed, in `0..2^31`.
    pub root_seed: i32,
    /// `-m`: children of a non-leaf binomial node.
    pub nonleaf_children: u32,
    /// `-q`: probability that a binomial node has children.
    pub nonleaf_prob: f64,
    /// `-d`: the depth parameter of the geometric shapes and of balanced trees.
    pub depth: u32,
    /// `-a`: the geometric shape.
    pub shape: GeoShape,
    /// `-f`: where a hybrid tree turns binomial, as a fraction of `-d`.
    pub shift_depth: f64,
    /// `-g`: SHA-1 evaluations per node (1: the benchmark's normal cost).
    pub granularity: u32,
}

impl Default for TreeParams {
    fn default() -> Self {
        TreeParams {
            tree_type: TreeType::Geometric,
            root_branching: 4.0,
            root_seed: 0,
            nonleaf_children: 4,
            nonleaf_prob: 15.0 / 64.0,
            depth: 6,
            shape: GeoShape::Linear,
            shift_depth: 0.5,
            granularity: 1,
        }
    }
}

/// Why a set of parameters describes no tree this program will search.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ParamError {
    /// `-t` is not 0, 1, 2 or 3.
    #[error("unknown tree type {0} (-t): expected 0 (binomial), 1 (geometric), 2 (hybrid) or 3 (balanced)")]
    UnknownTreeType(i64),
    /// `-a` is not 0, 1, 2 or 3.
    #[error("unknown geometric shape {0} (-a): expected 0 (linear), 1 (exponential decrease), 2 (cyclic) or 3 (fixed)")]
    UnknownShape(i64),
    /// A number outside the range the flag allows.
    #[error("{flag} {value}: {why}")]
    OutOfRange {
        /// The flag, e.g. `-b`.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What the flag accepts.
        why: String,
    },
}

/// A number as the command line would give it: its digits, or `1e300` rather than 301 of them.
fn shown(x: f64) -> String {
    if x.abs() < 1e16 {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

impl ParamError {
    fn range(flag: &'static str, value: impl fmt::Display, why: impl Into<String>) -> ParamError {
        ParamError::OutOfRange {
            flag,
            value: value.to_string(),
            why: why.into(),
        }
    }
}

impl TreeParams {
    /// Checks that the parameters describe a tree whose generation is well defined: every
    /// probability in `[0, 1]`, every branching factor positive and finite, depth parameters
    /// where a shape divides by them.
    ///
    /// # Errors
    /// The first parameter out of range, naming its flag.
    pub fn validate(&self) -> Result<(), ParamError> {
        let b = self.root_branching;
        if !(b.is_finite() && b > 0.0) {
            return Err(ParamError::range(
                "-b",
                shown(b),
                "the root branching factor must be a positive number",
            ));
        }
        if b > MAX_ROOT_BRANCHING {
            return Err(ParamError::range(
                "-b",
                shown(b),
                format!("the root branching factor must be at most {MAX_ROOT_BRANCHING}"),
            ));
        }
        if self.root_seed < 0 {
            return Err(ParamError::range(
                "-r",
                self.root_seed,
                "the root seed must be in 0..2147483648",
            ));
        }
        if !(0.0..=1.0).contains(&self.nonleaf_prob) {
            return Err(ParamError::range(
                "-q",
                self.nonleaf_prob,
                "a probability must be between 0 and 1",
            ));
        }
        if self.nonleaf_children > MAX_CHILDREN {
            return Err(ParamError::range(
                "-m",
                self.nonleaf_children,
                format!("a node has at most {MAX_CHILDREN} children"),
            ));
        }
        let uses_depth = matches!(self.tree_type, TreeType::Geometric | TreeType::Hybrid);
        if uses_depth && self.depth == 0 {
            return Err(ParamError::range(
                "-d",
                self.depth,
                "the geometric shapes need a depth of at least 1",
            ));
        }
        if self.depth > i32::MAX as u32 {
            return Err(ParamError::range(
                "-d",
                self.depth,
                format!("the depth must be at most {}", i32::MAX),
            ));
        }
        if !(self.shift_depth.is_finite() && self.shift_depth >= 0.0) {
            return Err(ParamError::range(
                "-f",
                self.shift_depth,
                "the hybrid shift depth must be a fraction of at least 0",
            ));
        }
        if !(1..=MAX_GRANULARITY).contains(&self.granularity) {
            return Err(ParamError::range(
                "-g",
                self.granularity,
                format!("the compute granularity must be between 1 and {MAX_GRANULARITY}"),
            ));
        }
        Ok(())
    }

    /// The flags that give these parameters (only those that differ from the defaults).
    pub fn to_args(&self) -> Vec<String> {
        let d = TreeParams::default();
        let mut v = Vec::new();
        let mut flag = |f: &str, value: String| {
            v.push(f.to_string());
            v.push(value);
        };
        if self.tree_type != d.tree_type {
            flag("-t", self.tree_type.code().to_string());
        }
        if self.shape != d.shape {
            flag("-a", self.shape.code().to_string());
        }
        if self.depth != d.depth {
            flag("-d", self.depth.to_string());
        }
        if self.root_branching != d.root_branching {
            flag("-b", self.root_branching.to_string());
        }
        if self.nonleaf_prob != d.nonleaf_prob {
            flag("-q", self.nonleaf_prob.to_string());
        }
        if self.nonleaf_children != d.nonleaf_children {
            flag("-m", self.nonleaf_children.to_string());
        }
        if self.root_seed != d.root_seed {
            flag("-r", self.root_seed.to_string());
        }
        if self.shift_depth != d.shift_depth {
            flag("-f", self.shift_depth.to_string());
        }
        if self.granularity != d.granularity {
            flag("-g", self.granularity.to_string());
        }
        v
    }
}

/// What a search of a whole tree finds; equal for every correct search of the same tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Counts {
    /// Nodes in the tree, the root included.
    pub nodes: u64,
    /// Nodes without children.
    pub leaves: u64,
    /// Depth of the deepest node (the root has depth 0).
    pub max_depth: u32,
}

impl Counts {
    /// Adds the counts of a disjoint part of the tree. A sum past `u64::MAX` stays there
    /// (above every node limit but `u64::MAX` itself): parts from other processes are checked
    /// one by one, and a parent task that merged enough forged ones must not panic for it.
    #[inline]
    pub fn merge(&mut self, other: Counts) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.leaves = self.leaves.saturating_add(other.leaves);
        self.max_depth = self.max_depth.max(other.max_depth);
    }

    /// The counts as one string, e.g. `4130071/3305118/10` (nodes/leaves/depth).
    pub fn checksum(&self) -> String {
        format!("{}/{}/{}", self.nodes, self.leaves, self.max_depth)
    }
}

/// [`Counts`] in a constant.
pub(crate) const fn counts(nodes: u64, leaves: u64, max_depth: u32) -> Counts {
    Counts {
        nodes,
        leaves,
        max_depth,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_parameters_name_their_flag() {
        let bad = [
            (
                TreeParams {
                    root_branching: -1.0,
                    ..Default::default()
                },
                "-b -1",
            ),
            (
                TreeParams {
                    root_branching: f64::NAN,
                    ..Default::default()
                },
                "-b NaN",
            ),
            (
                TreeParams {
                    nonleaf_prob: 2.0,
                    ..Default::default()
                },
                "-q 2",
            ),
            (
                TreeParams {
                    nonleaf_children: 101,
                    ..Default::default()
                },
                "-m 101",
            ),
            (
                TreeParams {
                    depth: 0,
                    ..Default::default()
                },
                "-d 0",
            ),
            (
                TreeParams {
                    granularity: 0,
                    ..Default::default()
                },
                "-g 0",
            ),
            (
                TreeParams {
                    root_seed: -3,
                    ..Default::default()
                },
                "-r -3",
            ),
        ];
        for (p, want) in bad {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        }
        // A balanced tree may have depth 0: only the root.
        TreeParams {
            tree_type: TreeType::Balanced,
            depth: 0,
            ..Default::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn checksums_and_merging() {
        let mut c = counts(10, 6, 3);
        c.merge(counts(5, 4, 7));
        assert_eq!(c.checksum(), "15/10/7");
    }

    #[test]
    fn merging_past_the_largest_count_stays_at_it() {
        let mut c = counts(u64::MAX - 1, u64::MAX - 2, 3);
        c.merge(counts(5, 4, 2));
        assert_eq!(c, counts(u64::MAX, u64::MAX, 3));
    }
}
