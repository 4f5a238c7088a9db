//! The tree: how many children a node has, exactly as the UTS reference code computes it.
//!
//! A node's number of children is a function of its random value `h` (see
//! [`Descriptor::rand`]) and its depth. The reference code computes it in floating point:
//! `u = h / 2^31`, then for a binomial node `m` if `u < q`, else 0; for a geometric node
//! `floor(ln(1 - u) / ln(1 - p))` with `p = 1 / (1 + b_i)` and `b_i` the shape's mean at the
//! node's depth, converted to `int` and cut at [`MAX_CHILDREN`]. [`Tree::formula_children`]
//! is that computation, operation for operation (the same `libm` functions, the same order,
//! the x86-64 conversion of out-of-range values).
//!
//! The searches do not run it per node. Both rules are non-decreasing step functions of `h`
//! (`ln` and division by a negative constant are monotone in IEEE arithmetic, and so is
//! `floor`), so each is fully described by the values of `h` where it steps up: the binomial
//! rule by one threshold, a geometric level by at most 100. [`Tree`] finds those thresholds
//! by bisection over the 2^31 possible values of `h`, with the formula itself, the first time
//! a depth is reached; a node then costs a comparison or a short scan. The result is the
//! formula's, value for value, which `tests::thresholds_agree_with_the_formula` checks.

use std::sync::OnceLock;

use crate::descriptor::Descriptor;
use crate::params::{GeoShape, ParamError, TreeParams, TreeType, MAX_CHILDREN};

/// Depths up to which geometric levels keep their thresholds; deeper nodes (only an
/// exponential-decrease shape reaches them) use the formula.
const TABLE_DEPTHS: usize = 4096;

/// `2^31`: the number of random values, and the divisor that turns one into `u`.
const RAND_RANGE: u64 = 1 << 31;

/// A validated tree definition with the lookup tables of its child counts.
#[derive(Debug)]
pub struct Tree {
    params: TreeParams,
    /// Binomial nodes have children when `h < bin_threshold`.
    bin_threshold: u64,
    /// Geometric levels by depth, filled on first use.
    geo_levels: Box<[OnceLock<GeoLevel>]>,
    /// Depths below this are geometric in a hybrid tree (all of them for a geometric tree).
    geo_below: u64,
}

/// The child counts of the geometric nodes at one depth.
#[derive(Debug)]
struct GeoLevel {
    /// `steps[k]` is the least `h` with at least `k + 1` children.
    steps: Box<[u32]>,
}

impl GeoLevel {
    #[inline(always)]
    fn children(&self, h: u32) -> u32 {
        // Most nodes have few children: a scan from the bottom beats a bisection.
        self.steps.iter().take_while(|&&s| s <= h).count() as u32
    }
}

impl Tree {
    /// The tree of `params`.
    ///
    /// # Errors
    /// If the parameters are out of range ([`TreeParams::validate`]).
    pub fn new(params: TreeParams) -> Result<Tree, ParamError> {
        params.validate()?;
        // h / 2^31 < q exactly when h < q * 2^31, a product that is exact in binary.
        let scaled = params.nonleaf_prob * RAND_RANGE as f64;
        let bin_threshold = (scaled.ceil() as u64).min(RAND_RANGE);
        let geo_below = match params.tree_type {
            TreeType::Geometric => u64::MAX,
            TreeType::Hybrid => {
                // Depth i is geometric while (double) i < f * d.
                let limit = params.shift_depth * params.depth as f64;
                limit.ceil().max(0.0) as u64
            }
            TreeType::Binomial | TreeType::Balanced => 0,
        };
        // No node lies below the depth where a shape's mean reaches 0 for good.
        let deepest = match params.shape {
            GeoShape::Linear | GeoShape::Fixed => params.depth as u64 + 1,
            GeoShape::Cyclic => 5 * params.depth as u64 + 2,
            GeoShape::ExpDec => u64::MAX,
        };
        let levels = match params.tree_type {
            TreeType::Geometric | TreeType::Hybrid => {
                (TABLE_DEPTHS as u64).min(geo_below).min(deepest) as usize
            }
            TreeType::Binomial | TreeType::Balanced => 0,
        };
        Ok(Tree {
            params,
            bin_threshold,
            geo_levels: (0..levels).map(|_| OnceLock::new()).collect(),
            geo_below,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &TreeParams {
        &self.params
    }

    /// The root's descriptor.
    pub fn root(&self) -> Descriptor {
        Descriptor::root(self.params.root_seed)
    }

    /// The number of children of the node `d` at `depth` (the root has depth 0).
    #[inline(always)]
    pub fn children(&self, d: &Descriptor, depth: u32) -> u32 {
        let h = d.rand();
        match self.params.tree_type {
            TreeType::Binomial if depth > 0 => self.binomial(h),
            TreeType::Geometric => self.geometric(h, depth),
            TreeType::Hybrid if (depth as u64) < self.geo_below => self.geometric(h, depth),
            TreeType::Hybrid => self.binomial(h),
            _ => self.formula_children(h, depth),
        }
    }

    #[inline(always)]
    fn binomial(&self, h: u32) -> u32 {
        if (h as u64) < self.bin_threshold {
            self.params.nonleaf_children
        } else {
            0
        }
    }

    #[inline(always)]
    fn geometric(&self, h: u32, depth: u32) -> u32 {
        match self.geo_levels.get(depth as usize) {
            Some(level) => level.get_or_init(|| self.geo_level(depth)).children(h),
            None => self.formula_children(h, depth),
        }
    }

    /// The thresholds of depth `depth`, by bisection with the formula.
    #[cold]
    fn geo_level(&self, depth: u32) -> GeoLevel {
        let count = |h: u32| self.geo_formula(h, depth);
        let most = count((RAND_RANGE - 1) as u32);
        let mut steps = Vec::with_capacity(most as usize);
        let mut lo = 0u64;
        for k in 1..=most {
            // The least h in lo..2^31 with count(h) >= k; it exists since count(2^31 - 1) >= k.
            let mut hi = RAND_RANGE - 1;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if count(mid as u32) >= k {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            steps.push(lo as u32);
        }
        GeoLevel {
            steps: steps.into_boxed_slice(),
        }
    }

    /// The number of children of a node with random value `h` at `depth`, computed as the
    /// reference code does it (`uts_numChildren`), without lookup tables.
    pub fn formula_children(&self, h: u32, depth: u32) -> u32 {
        let p = &self.params;
        match p.tree_type {
            TreeType::Binomial if depth == 0 => {
                // floor(b) children, cut at ceil(b): the only node allowed over 100.
                p.root_branching.floor() as u32
            }
            TreeType::Binomial => {
                if to_prob(h) < p.nonleaf_prob {
                    p.nonleaf_children
                } else {
                    0
                }
            }
            TreeType::Geometric => self.geo_formula(h, depth),
            TreeType::Hybrid => {
                if (depth as f64) < p.shift_depth * p.depth as f64 {
                    self.geo_formula(h, depth)
                } else if to_prob(h) < p.nonleaf_prob {
                    p.nonleaf_children
                } else {
                    0
                }
            }
            TreeType::Balanced => {
                if depth < p.depth {
                    p.root_branching as u32
                } else {
                    0
                }
            }
        }
    }

    /// `uts_numChildren_geo` with the cut at [`MAX_CHILDREN`]; negative counts are leaves.
    fn geo_formula(&self, h: u32, depth: u32) -> u32 {
        let b_i = self.geo_mean(depth);
        let p = 1.0 / (1.0 + b_i);
        let u = to_prob(h);
        let n = c_int(((1.0 - u).ln() / (1.0 - p).ln()).floor());
        n.clamp(0, MAX_CHILDREN as i32) as u32
    }

    /// The target branching factor `b_i` of a geometric node at `depth`.
    pub fn geo_mean(&self, depth: u32) -> f64 {
        let p = &self.params;
        let b_0 = p.root_branching;
        if depth == 0 {
            return b_0;
        }
        let i = depth as f64;
        let d = p.depth as f64;
        match p.shape {
            GeoShape::ExpDec => b_0 * i.powf(-b_0.ln() / d.ln()),
            GeoShape::Cyclic => {
                if depth as u64 > 5 * p.depth as u64 {
                    0.0
                } else {
                    b_0.powf((2.0 * std::f64::consts::PI * i / d).sin())
                }
            }
            GeoShape::Fixed => {
                if depth < p.depth {
                    b_0
                } else {
                    0.0
                }
            }
            GeoShape::Linear => b_0 * (1.0 - i / d),
        }
    }
}

/// `rng_toProb`: a random value as a number in `[0, 1)`.
#[inline(always)]
fn to_prob(h: u32) -> f64 {
    h as f64 / RAND_RANGE as f64
}

/// The C conversion `(int) x` as x86-64 does it: truncation, and `INT_MIN` for NaN and for
/// values out of range (`cvttsd2si`), where Rust's `as` would saturate.
fn c_int(x: f64) -> i32 {
    if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
        x as i32
    } else {
        i32::MIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(args: &str) -> Tree {
        Tree::new(crate::cli::parse_tree_args(args.split_whitespace()).unwrap()).unwrap()
    }

    /// Random values spread over the range, plus every threshold and its neighbours.
    fn probes(t: &Tree, depth: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..4000u64)
            .map(|i| ((i * 2_654_435_761) % RAND_RANGE) as u32)
            .collect();
        v.extend([0, 1, (RAND_RANGE - 1) as u32]);
        if let Some(level) = t.geo_levels.get(depth as usize) {
            let level = level.get_or_init(|| t.geo_level(depth));
            for &s in level.steps.iter() {
                v.extend([s.saturating_sub(1), s, s.saturating_add(1)]);
            }
        }
        v.push(t.bin_threshold.saturating_sub(1) as u32);
        v.push(t.bin_threshold.min(RAND_RANGE - 1) as u32);
        v
    }

    #[test]
    fn thresholds_agree_with_the_formula() {
        for args in [
            "-t 1 -a 3 -d 10 -b 4 -r 19",
            "-t 1 -a 0 -d 20 -b 4 -r 34",
            "-t 1 -a 2 -d 16 -b 6 -r 502",
            "-t 1 -a 1 -d 20 -b 7",
            "-t 2 -a 0 -d 16 -b 6 -q 0.234375 -m 4",
            "-t 0 -b 2000 -q 0.124875 -m 8",
            "-t 1 -a 3 -d 5 -b 300",
        ] {
            let t = tree(args);
            for depth in [0, 1, 2, 5, 9, 10, 15, 16, 40, 81, 82, 200] {
                for h in probes(&t, depth) {
                    if depth == 0 && t.params.tree_type == TreeType::Binomial {
                        continue;
                    }
                    assert_eq!(
                        t.children(&Descriptor([0, 0, 0, 0, h]), depth),
                        t.formula_children(h, depth),
                        "{args}: h = {h}, depth {depth}"
                    );
                }
            }
        }
    }

    #[test]
    fn shapes_follow_the_reference_formulas() {
        let t = tree("-t 1 -a 0 -d 20 -b 4");
        assert_eq!(t.geo_mean(0), 4.0);
        assert_eq!(t.geo_mean(5), 3.0);
        assert_eq!(t.geo_mean(20), 0.0);
        // A mean of 0 gives leaves whatever the random value.
        assert_eq!(t.formula_children((RAND_RANGE - 1) as u32, 20), 0);
        let fixed = tree("-t 1 -a 3 -d 10 -b 4");
        assert_eq!((fixed.geo_mean(9), fixed.geo_mean(10)), (4.0, 0.0));
        let cyclic = tree("-t 1 -a 2 -d 16 -b 6");
        assert!((cyclic.geo_mean(4) - 6.0).abs() < 1e-12);
        assert_eq!(cyclic.geo_mean(81), 0.0);
        let expdec = tree("-t 1 -a 1 -d 16 -b 4");
        assert!((expdec.geo_mean(16) - 1.0).abs() < 1e-12);
        // The largest draws are cut at 100 children.
        let wide = tree("-t 1 -a 3 -d 5 -b 300");
        assert_eq!(
            wide.formula_children((RAND_RANGE - 1) as u32, 1),
            MAX_CHILDREN
        );
    }

    #[test]
    fn binomial_and_balanced_roots() {
        let t = tree("-t 0 -b 2000.7 -q 0.5 -m 3");
        assert_eq!(t.children(&Descriptor([0; 5]), 0), 2000);
        assert_eq!(t.children(&Descriptor([0; 5]), 1), 3);
        assert_eq!(t.children(&Descriptor([0, 0, 0, 0, 1 << 30]), 1), 0);
        let b = tree("-t 3 -b 3 -d 2");
        assert_eq!(b.children(&Descriptor([0; 5]), 1), 3);
        assert_eq!(b.children(&Descriptor([0; 5]), 2), 0);
        let q1 = tree("-t 0 -q 1 -m 2");
        assert_eq!(q1.children(&Descriptor([0, 0, 0, 0, u32::MAX]), 5), 2);
    }

    #[test]
    fn the_int_conversion_is_x86s() {
        assert_eq!(c_int(3.9), 3);
        assert_eq!(c_int(-0.0), 0);
        assert_eq!(c_int(f64::NAN), i32::MIN);
        assert_eq!(c_int(f64::INFINITY), i32::MIN);
        assert_eq!(c_int(3e9), i32::MIN);
        assert_eq!(c_int(-2_147_483_648.5), i32::MIN);
    }
}
