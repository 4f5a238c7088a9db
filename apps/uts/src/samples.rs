//! The sample trees of the UTS distribution's `sample_trees.sh`, with the counts published
//! there: what every search mode is checked against.

use crate::params::{counts, Counts, TreeParams};

/// A tree of the UTS distribution's `sample_trees.sh`, with the counts published there.
#[derive(Clone, Copy, Debug)]
pub struct SampleTree {
    /// The name in `sample_trees.sh` (`T1`, `T3L`, ...).
    pub name: &'static str,
    /// The flags.
    pub args: &'static str,
    /// The published counts (depth and leaves where published; 0 where not).
    pub expected: Counts,
}

impl SampleTree {
    /// The tree's parameters.
    ///
    /// # Panics
    /// Never for the trees of [`SAMPLE_TREES`] (a unit test parses them all).
    pub fn params(&self) -> TreeParams {
        crate::cli::parse_tree_args(self.args.split_whitespace())
            .unwrap_or_else(|e| panic!("sample tree {}: {e}", self.name))
    }

    /// The sample tree called `name` (case-insensitive).
    pub fn find(name: &str) -> Option<&'static SampleTree> {
        SAMPLE_TREES
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
    }
}

/// The sample trees of the UTS distribution (`sample_trees.sh`, UTS 2.1) up to the extra-large
/// ones, with their published sizes. T1XXL and T3XXL were published without leaf counts
/// (0 here), T3XXL also without its depth.
pub const SAMPLE_TREES: [SampleTree; 13] = [
    SampleTree {
        name: "default",
        args: "",
        expected: counts(1732, 1050, 6),
    },
    SampleTree {
        name: "T1",
        args: "-t 1 -a 3 -d 10 -b 4 -r 19",
        expected: counts(4_130_071, 3_305_118, 10),
    },
    SampleTree {
        name: "T5",
        args: "-t 1 -a 0 -d 20 -b 4 -r 34",
        expected: counts(4_147_582, 2_181_318, 20),
    },
    SampleTree {
        name: "T2",
        args: "-t 1 -a 2 -d 16 -b 6 -r 502",
        expected: counts(4_117_769, 2_342_762, 81),
    },
    SampleTree {
        name: "T3",
        args: "-t 0 -b 2000 -q 0.124875 -m 8 -r 42",
        expected: counts(4_112_897, 3_599_034, 1572),
    },
    SampleTree {
        name: "T4",
        args: "-t 2 -a 0 -d 16 -b 6 -r 1 -q 0.234375 -m 4",
        expected: counts(4_132_453, 3_108_986, 134),
    },
    SampleTree {
        name: "T1L",
        args: "-t 1 -a 3 -d 13 -b 4 -r 29",
        expected: counts(102_181_082, 81_746_377, 13),
    },
    SampleTree {
        name: "T2L",
        args: "-t 1 -a 2 -d 23 -b 7 -r 220",
        expected: counts(96_793_510, 53_791_152, 67),
    },
    SampleTree {
        name: "T3L",
        args: "-t 0 -b 2000 -q 0.200014 -m 5 -r 7",
        expected: counts(111_345_631, 89_076_904, 17844),
    },
    SampleTree {
        name: "T1XL",
        args: "-t 1 -a 3 -d 15 -b 4 -r 29",
        expected: counts(1_635_119_272, 1_308_100_063, 15),
    },
    SampleTree {
        name: "T1XXL",
        args: "-t 1 -a 3 -d 15 -b 4 -r 19",
        expected: counts(4_230_646_601, 0, 15),
    },
    SampleTree {
        name: "T3XXL",
        args: "-t 0 -b 2000 -q 0.499995 -m 2 -r 316",
        expected: counts(2_793_220_501, 0, 0),
    },
    SampleTree {
        name: "T2XXL",
        args: "-t 0 -b 2000 -q 0.499999995 -m 2 -r 0",
        expected: counts(10_612_052_303, 5_306_027_151, 216_370),
    },
];

impl TreeParams {
    /// The published sample tree with these parameters, if any.
    pub fn sample_name(&self) -> Option<&'static str> {
        SAMPLE_TREES
            .iter()
            .find(|s| s.params() == *self)
            .map(|s| s.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_tree_parses_and_is_valid() {
        for s in &SAMPLE_TREES {
            let p = s.params();
            p.validate().unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert_eq!(p.sample_name(), Some(s.name));
            // The flags written out give the same tree back.
            let again = crate::cli::parse_tree_args(p.to_args()).unwrap();
            assert_eq!(again, p, "{}", s.name);
        }
        assert_eq!(SampleTree::find("t3").unwrap().expected.max_depth, 1572);
        assert_eq!(TreeParams::default().sample_name(), Some("default"));
    }
}
