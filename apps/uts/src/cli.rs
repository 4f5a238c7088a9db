//! The tree flags of the reference code (`-t -b -r -a -d -q -m -f -g`) as a `clap` argument
//! group, shared by the `uts` binary, the benchmark and the sample-tree table.

use clap::{Args, Parser};

use crate::params::{GeoShape, ParamError, TreeParams, TreeType, MAX_CHILDREN, MAX_GRANULARITY};

/// The tree parameters, with the reference code's flags and defaults.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct TreeArgs {
    /// Tree type: 0 binomial, 1 geometric, 2 hybrid (geometric, then binomial), 3 balanced.
    #[arg(
        short = 't',
        value_name = "TYPE",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub tree_type: i64,

    /// Root branching factor: the root's children (binomial, balanced) or their mean
    /// (geometric).
    #[arg(
        short = 'b',
        value_name = "B",
        default_value_t = 4.0,
        allow_negative_numbers = true
    )]
    pub root_branching: f64,

    /// Root seed, 0 <= r < 2^31.
    #[arg(
        short = 'r',
        value_name = "SEED",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub root_seed: i64,

    /// Geometric shape of the mean branching factor over depth: 0 linear decrease,
    /// 1 exponential decrease, 2 cyclic, 3 fixed.
    #[arg(
        short = 'a',
        value_name = "SHAPE",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub shape: i64,

    /// Depth parameter of the geometric shapes and of balanced trees.
    #[arg(
        short = 'd',
        value_name = "DEPTH",
        default_value_t = 6,
        allow_negative_numbers = true
    )]
    pub depth: i64,

    /// Binomial: probability that a node has children.
    #[arg(
        short = 'q',
        value_name = "Q",
        default_value_t = 0.234375,
        allow_negative_numbers = true
    )]
    pub nonleaf_prob: f64,

    /// Binomial: number of children of a node that has any (at most 100).
    #[arg(
        short = 'm',
        value_name = "M",
        default_value_t = 4,
        allow_negative_numbers = true
    )]
    pub nonleaf_children: i64,

    /// Hybrid: fraction of the depth parameter from which nodes are binomial.
    #[arg(
        short = 'f',
        value_name = "F",
        default_value_t = 0.5,
        allow_negative_numbers = true
    )]
    pub shift_depth: f64,

    /// Compute granularity: SHA-1 evaluations per node.
    #[arg(
        short = 'g',
        value_name = "G",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub granularity: i64,
}

impl TreeArgs {
    /// The tree these flags describe.
    ///
    /// # Errors
    /// A flag out of range, named in the error.
    pub fn params(&self) -> Result<TreeParams, ParamError> {
        let tree_type = TreeType::from_code(self.tree_type)
            .ok_or(ParamError::UnknownTreeType(self.tree_type))?;
        let shape = GeoShape::from_code(self.shape).ok_or(ParamError::UnknownShape(self.shape))?;
        let int = |flag: &'static str, v: i64, lo: i64, hi: i64, why: &str| {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(ParamError::OutOfRange {
                    flag,
                    value: v.to_string(),
                    why: why.to_string(),
                })
            }
        };
        let params = TreeParams {
            tree_type,
            root_branching: self.root_branching,
            root_seed: int(
                "-r",
                self.root_seed,
                0,
                i32::MAX as i64,
                "the root seed must be in 0..2147483648",
            )? as i32,
            nonleaf_children: int(
                "-m",
                self.nonleaf_children,
                0,
                MAX_CHILDREN as i64,
                "a node has 0 to 100 children",
            )? as u32,
            nonleaf_prob: self.nonleaf_prob,
            depth: int(
                "-d",
                self.depth,
                0,
                i32::MAX as i64,
                "the depth must be in 0..2147483648",
            )? as u32,
            shape,
            shift_depth: self.shift_depth,
            granularity: int(
                "-g",
                self.granularity,
                1,
                MAX_GRANULARITY as i64,
                "the compute granularity must be between 1 and 1000000",
            )? as u32,
        };
        params.validate()?;
        Ok(params)
    }
}

#[derive(Parser)]
#[command(no_binary_name = true, disable_help_flag = true)]
struct OnlyTree {
    #[command(flatten)]
    tree: TreeArgs,
}

/// Parses the tree flags alone, e.g. `"-t 1 -a 3 -d 10 -b 4 -r 19".split_whitespace()`.
///
/// # Errors
/// Unknown flags, values that are not numbers, or parameters out of range.
pub fn parse_tree_args<I, S>(args: I) -> Result<TreeParams, String>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let parsed = OnlyTree::try_parse_from(args).map_err(|e| e.to_string())?;
    parsed.tree.params().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_reference_codes() {
        let none: [&str; 0] = [];
        assert_eq!(parse_tree_args(none).unwrap(), TreeParams::default());
    }

    #[test]
    fn bad_flags_say_what_is_wrong() {
        for (args, want) in [
            ("-t 7", "unknown tree type 7"),
            ("-a 4", "unknown geometric shape 4"),
            (
                "-b -1",
                "-b -1: the root branching factor must be a positive number",
            ),
            ("-q 2", "-q 2: a probability must be between 0 and 1"),
            ("-m 101", "-m 101"),
            ("-r -1", "-r -1"),
            ("-d -5", "-d -5"),
            ("-g 0", "-g 0"),
            ("-x 3", "unexpected argument '-x'"),
            ("-b many", "invalid value 'many'"),
        ] {
            let e = parse_tree_args(args.split_whitespace()).unwrap_err();
            assert!(e.contains(want), "{args}: {e}");
        }
    }
}
