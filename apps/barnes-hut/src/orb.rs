//! Orthogonal recursive bisection (ORB) with cost-based splits, for any number of processes.
//!
//! The ORB tree divides the bounding box of the system among `P` processes. A node owns a
//! contiguous range of process numbers and an axis-aligned region; a node with more than one
//! process is cut by a plane perpendicular to the longest edge of its region, into a lower
//! part for the first `ceil(P/2)` of its processes and an upper part for the other
//! `floor(P/2)`, at the coordinate where the cost (interaction count) of the bodies below
//! the plane is the lower part's share `ceil(P/2) / P` of the node's cost. Leaves hold one
//! process each: their regions tile the bounding box, and a body belongs to the process
//! whose region holds it ([`Orb::owner`]; points on a plane belong to the upper side).
//!
//! # Finding the splitting planes from partial histograms
//!
//! No process needs to see all bodies. [`OrbBuilder`] is a deterministic state machine that
//! every process runs identically. Each round it asks for cost histograms
//! ([`OrbBuilder::partial_histograms`]) of the *local* bodies over the open search interval
//! of every node still to be split; the element-wise sum of all processes' histograms
//! (integers, so the sum is exact and the same in any order) is fed to
//! [`OrbBuilder::advance`], which narrows each interval to the histogram bin where the
//! cumulative cost crosses the target, or places the plane once that bin holds at most one
//! body. With `B` bins a round gains `log2 B` bits of the coordinate, so a level takes a few
//! rounds, and all nodes of a level progress in the same rounds. A parallel program runs:
//!
//! ```text
//! let mut b = OrbBuilder::new(global_bounds, p);
//! while !b.is_done() {
//!     let mine = b.partial_histograms(local bodies as (position, cost));
//!     let all  = element-wise sum of `mine` over all processes;  // one exchange
//!     b.advance(&all)?;
//! }
//! let orb = b.finish()?;   // identical on every process; then migrate bodies
//! ```
//!
//! The sequential [`decompose`] is that loop with one process. [`OrbBuilder::rebalance`]
//! re-splits only chosen subtrees (see [`crate::balance::subtrees_to_rebalance`]), leaving the
//! rest of the decomposition, and the bodies there, in place.

use crate::body::Body;
use crate::geom::{Aabb, Vec3};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Histogram bins per round of the split search.
pub const DEFAULT_BINS: usize = 256;

/// The most histogram bins per round: every round all-reduces two histograms of this many
/// 8-byte counters (1 MiB at the bound; `--bins 1000000000000` aborted on allocating them).
pub const MAX_BINS: usize = 1 << 16;

/// Rounds after which a split search places its plane whatever the histogram says; the
/// interval has run out of floating-point resolution long before.
const MAX_ROUNDS: usize = 80;

/// A cut of an ORB node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Split {
    /// Axis perpendicular to the plane (0, 1, 2 for x, y, z).
    pub axis: usize,
    /// Coordinate of the plane; points below it go to `lower`.
    pub at: f64,
    /// Node index of the lower part.
    pub lower: usize,
    /// Node index of the upper part.
    pub upper: usize,
}

/// A node of the ORB tree.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrbNode {
    /// First process of the node.
    pub first_proc: usize,
    /// Number of processes of the node.
    pub nprocs: usize,
    /// The node's region.
    pub region: Aabb,
    /// The cut, for nodes of more than one process (absent while being searched).
    pub split: Option<Split>,
}

impl OrbNode {
    /// Processes of the lower part: the larger half, `ceil(nprocs / 2)`.
    pub fn lower_procs(&self) -> usize {
        self.nprocs.div_ceil(2)
    }
}

/// An ORB decomposition: the same on every process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Orb {
    nodes: Vec<OrbNode>,
    nprocs: usize,
}

impl Orb {
    /// Number of processes.
    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// The nodes; the root is node 0.
    pub fn nodes(&self) -> &[OrbNode] {
        &self.nodes
    }

    /// The bounding box the decomposition covers (the root's region).
    pub fn bounds(&self) -> Aabb {
        self.nodes[0].region
    }

    /// The leaf node of process `proc`.
    ///
    /// # Panics
    /// When `proc` is not below [`Orb::nprocs`].
    pub fn leaf_of(&self, proc: usize) -> usize {
        assert!(proc < self.nprocs, "process {proc} out of range");
        let mut i = 0;
        while let Some(s) = self.nodes[i].split {
            i = if proc < self.nodes[i].first_proc + self.nodes[i].lower_procs() {
                s.lower
            } else {
                s.upper
            };
        }
        i
    }

    /// The region of process `proc`.
    pub fn region(&self, proc: usize) -> Aabb {
        self.nodes[self.leaf_of(proc)].region
    }

    /// The regions of all processes, by process number.
    pub fn regions(&self) -> Vec<Aabb> {
        (0..self.nprocs).map(|p| self.region(p)).collect()
    }

    /// The process owning position `pos`. Every position has exactly one owner, also
    /// positions outside [`Orb::bounds`] (they go to the process of the nearest side).
    pub fn owner(&self, pos: Vec3) -> usize {
        let mut i = 0;
        while let Some(s) = self.nodes[i].split {
            i = if pos[s.axis] < s.at { s.lower } else { s.upper };
        }
        self.nodes[i].first_proc
    }

    /// Moves the outer boundary to `bounds`, keeping every plane: the orb-tree update
    /// phase, after bodies moved. Regions touching the old boundary stretch or shrink
    /// with it; a plane outside the new bounds leaves an empty-volume region behind.
    pub fn set_bounds(&mut self, bounds: Aabb) {
        self.nodes[0].region = bounds;
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            if let Some(s) = self.nodes[i].split {
                let (lo, hi) = split_region(self.nodes[i].region, s.axis, s.at);
                self.nodes[s.lower].region = lo;
                self.nodes[s.upper].region = hi;
                stack.push(s.lower);
                stack.push(s.upper);
            }
        }
    }

    /// The owner of every body.
    pub fn assign(&self, bodies: &[Body]) -> Vec<usize> {
        bodies.iter().map(|b| self.owner(b.pos)).collect()
    }

    /// The cost of each process's bodies, from bodies of any process.
    pub fn loads(&self, bodies: &[Body]) -> Vec<u64> {
        let mut loads = vec![0u64; self.nprocs];
        for b in bodies {
            loads[self.owner(b.pos)] += b.weight();
        }
        loads
    }
}

/// The two parts of `region` on either side of the plane `axis = at`, each clamped so that
/// its minimum never exceeds its maximum.
fn split_region(region: Aabb, axis: usize, at: f64) -> (Aabb, Aabb) {
    let mut lower = region;
    let mut upper = region;
    lower.max[axis] = at.clamp(region.min[axis], region.max[axis].max(region.min[axis]));
    upper.min[axis] = lower.max[axis];
    (lower, upper)
}

/// An error in the ORB construction protocol.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OrbError {
    /// `advance` got a different number of histograms than there are open searches.
    #[error("expected histograms for {expected} open splits, got {found}")]
    HistogramCount {
        /// Open searches.
        expected: usize,
        /// Histograms given.
        found: usize,
    },
    /// A histogram has the wrong number of bins.
    #[error("histogram {index} has {found} slots, expected {expected}")]
    HistogramLength {
        /// Which histogram.
        index: usize,
        /// Slots expected (bins + 2).
        expected: usize,
        /// Slots found.
        found: usize,
    },
    /// `finish` was called while splits are still open.
    #[error("the decomposition is not finished: {0} splits are still open")]
    Unfinished(usize),
    /// Zero processes were asked for.
    #[error("a decomposition needs at least one process")]
    NoProcesses,
    /// A node index to rebalance does not exist.
    #[error("ORB node {0} does not exist")]
    NoSuchNode(usize),
}

/// Cost and count of bodies per bin over a search interval, plus the bodies below and above
/// it: slot 0 is below `lo`, slots `1..=bins` the bins, slot `bins + 1` at or above `hi`.
///
/// Partial histograms of different processes add up element-wise ([`Histogram::add`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Summed cost per slot.
    pub cost: Vec<u64>,
    /// Number of bodies per slot.
    pub count: Vec<u64>,
}

impl Histogram {
    /// An all-zero histogram of `bins` bins (and the two outer slots).
    pub fn zeros(bins: usize) -> Histogram {
        Histogram {
            cost: vec![0; bins + 2],
            count: vec![0; bins + 2],
        }
    }

    /// Adds `other` element-wise (the reduction of partial histograms).
    ///
    /// # Panics
    /// When the histograms differ in length.
    pub fn add(&mut self, other: &Histogram) {
        assert_eq!(
            self.cost.len(),
            other.cost.len(),
            "histogram lengths differ"
        );
        for (a, b) in self.cost.iter_mut().zip(&other.cost) {
            *a += b;
        }
        for (a, b) in self.count.iter_mut().zip(&other.count) {
            *a += b;
        }
    }
}

/// Element-wise sum of each process's list of partial histograms (one list per process, as
/// returned by [`OrbBuilder::partial_histograms`]).
pub fn sum_partials(per_process: &[Vec<Histogram>]) -> Vec<Histogram> {
    let mut it = per_process.iter();
    let Some(first) = it.next() else {
        return Vec::new();
    };
    let mut sum = first.clone();
    for p in it {
        for (s, h) in sum.iter_mut().zip(p) {
            s.add(h);
        }
    }
    sum
}

/// The search for one splitting plane: narrows `[lo, hi)` until the plane is found.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitSearch {
    /// Axis searched along.
    pub axis: usize,
    /// Lower end of the current interval.
    pub lo: f64,
    /// Upper end of the current interval (exclusive).
    pub hi: f64,
    /// Processes of the lower part.
    pub lower_procs: usize,
    /// Processes of the node.
    pub nprocs: usize,
    /// Number of bins.
    pub bins: usize,
    /// Rounds done.
    pub rounds: usize,
}

/// What a round of a split search concluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SearchStep {
    /// The plane lies in the narrower interval; another round is needed.
    Narrowed,
    /// The plane is at this coordinate.
    Found(f64),
}

impl SplitSearch {
    /// A search across `region` along its longest axis, for a node of `nprocs` processes.
    pub fn new(region: Aabb, nprocs: usize, bins: usize) -> SplitSearch {
        let axis = region.longest_axis();
        SplitSearch {
            axis,
            lo: region.min[axis],
            // Just above the top so that bodies on the upper face fall inside the last bin.
            hi: next_up(region.max[axis]),
            lower_procs: nprocs.div_ceil(2),
            nprocs,
            bins,
            rounds: 0,
        }
    }

    /// Lower edge of bin `b` (`b == bins` gives `hi`).
    #[inline]
    pub fn edge(&self, b: usize) -> f64 {
        if b >= self.bins {
            self.hi
        } else {
            self.lo + (self.hi - self.lo) * (b as f64 / self.bins as f64)
        }
    }

    /// The histogram slot of coordinate `x`, consistent with [`SplitSearch::edge`]: slot
    /// `b + 1` holds exactly the `x` with `edge(b) <= x < edge(b + 1)`.
    #[inline]
    pub fn slot(&self, x: f64) -> usize {
        if x < self.lo || x.is_nan() {
            return 0;
        }
        if x >= self.hi {
            return self.bins + 1;
        }
        let guess = ((x - self.lo) / (self.hi - self.lo) * self.bins as f64) as usize;
        let mut b = guess.min(self.bins - 1);
        // Rounding in the guess can be off by one bin either way.
        while b > 0 && x < self.edge(b) {
            b -= 1;
        }
        while b + 1 < self.bins && x >= self.edge(b + 1) {
            b += 1;
        }
        b + 1
    }

    /// Adds a body at coordinate `x` (along [`SplitSearch::axis`]) with cost `cost`.
    #[inline]
    pub fn record(&self, hist: &mut Histogram, x: f64, cost: u64) {
        let s = self.slot(x);
        hist.cost[s] += cost;
        hist.count[s] += 1;
    }

    /// The local histogram of `items` (coordinate along the axis, cost).
    pub fn local_histogram<I: IntoIterator<Item = (f64, u64)>>(&self, items: I) -> Histogram {
        let mut h = Histogram::zeros(self.bins);
        for (x, c) in items {
            self.record(&mut h, x, c);
        }
        h
    }

    /// One round: from the histogram summed over all processes, either narrows the interval
    /// to the bin where the cost below the plane reaches the lower part's share, or places
    /// the plane.
    pub fn narrow(&mut self, summed: &Histogram) -> SearchStep {
        self.rounds += 1;
        let total: u64 = summed.cost.iter().sum();
        let bodies: u64 = summed.count.iter().sum();
        if bodies == 0 {
            return SearchStep::Found(0.5 * (self.lo + self.hi));
        }
        // Cost below the plane should be total * lower_procs / nprocs; compare in integers.
        let p = self.nprocs as u128;
        let need = total as u128 * self.lower_procs as u128;
        let mut below = 0u64;
        let mut slot = summed.cost.len() - 1;
        for (s, &c) in summed.cost.iter().enumerate() {
            if (below + c) as u128 * p >= need {
                slot = s;
                break;
            }
            below += c;
        }
        if slot == 0 {
            return SearchStep::Found(self.lo);
        }
        if slot == self.bins + 1 {
            return SearchStep::Found(self.hi);
        }
        let (e0, e1) = (self.edge(slot - 1), self.edge(slot));
        let exhausted = e1 <= e0 || (e0 == self.lo && e1 == self.hi) || self.rounds >= MAX_ROUNDS;
        if summed.count[slot] <= 1 || exhausted {
            let miss = |cost_below: u64| (cost_below as u128 * p).abs_diff(need);
            let at = if miss(below) <= miss(below + summed.cost[slot]) {
                e0
            } else {
                e1
            };
            return SearchStep::Found(at);
        }
        self.lo = e0;
        self.hi = e1;
        SearchStep::Narrowed
    }
}

/// The smallest `f64` above `x` (for finite `x`; infinities and NaN are returned as is).
fn next_up(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let bits = x.to_bits();
    f64::from_bits(if x > 0.0 { bits + 1 } else { bits - 1 })
}

/// The ORB construction protocol (see the module documentation).
#[derive(Clone, Debug)]
pub struct OrbBuilder {
    nodes: Vec<OrbNode>,
    nprocs: usize,
    /// Open searches with the node each belongs to, in node order.
    searches: Vec<(usize, SplitSearch)>,
    bins: usize,
    rounds: usize,
}

impl OrbBuilder {
    /// A decomposition of `bounds` among `nprocs` processes, with [`DEFAULT_BINS`] bins.
    pub fn new(bounds: Aabb, nprocs: usize) -> Result<OrbBuilder, OrbError> {
        OrbBuilder::with_bins(bounds, nprocs, DEFAULT_BINS)
    }

    /// A decomposition with `bins` histogram bins per round (at least 2).
    pub fn with_bins(bounds: Aabb, nprocs: usize, bins: usize) -> Result<OrbBuilder, OrbError> {
        if nprocs == 0 {
            return Err(OrbError::NoProcesses);
        }
        let mut b = OrbBuilder {
            nodes: Vec::new(),
            nprocs,
            searches: Vec::new(),
            bins: bins.max(2),
            rounds: 0,
        };
        b.open_node(0, nprocs, bounds);
        Ok(b)
    }

    /// Re-splits the subtrees rooted at `subtrees` of `orb` (their regions and process
    /// ranges stay; everything below is searched anew), keeping all other planes.
    pub fn rebalance(orb: &Orb, subtrees: &[usize], bins: usize) -> Result<OrbBuilder, OrbError> {
        if let Some(&bad) = subtrees.iter().find(|&&s| s >= orb.nodes.len()) {
            return Err(OrbError::NoSuchNode(bad));
        }
        let mut b = OrbBuilder {
            nodes: Vec::new(),
            nprocs: orb.nprocs,
            searches: Vec::new(),
            bins: bins.max(2),
            rounds: 0,
        };
        b.copy_node(orb, 0, subtrees);
        b.searches.sort_by_key(|&(node, _)| node);
        Ok(b)
    }

    fn copy_node(&mut self, orb: &Orb, from: usize, reopen: &[usize]) -> usize {
        let n = orb.nodes[from];
        match n.split {
            Some(s) if !reopen.contains(&from) => {
                let index = self.nodes.len();
                self.nodes.push(n);
                let lower = self.copy_node(orb, s.lower, reopen);
                let upper = self.copy_node(orb, s.upper, reopen);
                self.nodes[index].split = Some(Split { lower, upper, ..s });
                index
            }
            _ => self.open_node(n.first_proc, n.nprocs, n.region),
        }
    }

    fn open_node(&mut self, first_proc: usize, nprocs: usize, region: Aabb) -> usize {
        let index = self.nodes.len();
        self.nodes.push(OrbNode {
            first_proc,
            nprocs,
            region,
            split: None,
        });
        if nprocs > 1 {
            self.searches
                .push((index, SplitSearch::new(region, nprocs, self.bins)));
        }
        index
    }

    /// True when every plane is placed.
    pub fn is_done(&self) -> bool {
        self.searches.is_empty()
    }

    /// Rounds (exchanges of histograms) so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The open searches, in the order of the histograms.
    pub fn searches(&self) -> impl Iterator<Item = &SplitSearch> {
        self.searches.iter().map(|(_, s)| s)
    }

    /// The local contribution to this round: one histogram per open search, over the local
    /// bodies `items` (position, cost) that lie in that search's node.
    pub fn partial_histograms<I: IntoIterator<Item = (Vec3, u64)>>(
        &self,
        items: I,
    ) -> Vec<Histogram> {
        let mut hists: Vec<Histogram> = self
            .searches
            .iter()
            .map(|_| Histogram::zeros(self.bins))
            .collect();
        // Open nodes map to their histogram; everything else to none.
        let mut slot_of_node = vec![usize::MAX; self.nodes.len()];
        for (k, &(node, _)) in self.searches.iter().enumerate() {
            slot_of_node[node] = k;
        }
        for (pos, cost) in items {
            let mut i = 0;
            while let Some(s) = self.nodes[i].split {
                i = if pos[s.axis] < s.at { s.lower } else { s.upper };
            }
            let k = slot_of_node[i];
            if k != usize::MAX {
                let search = &self.searches[k].1;
                search.record(&mut hists[k], pos[search.axis], cost);
            }
        }
        hists
    }

    /// Feeds the histograms summed over all processes; places the planes that are found and
    /// opens searches for the new nodes below them.
    pub fn advance(&mut self, summed: &[Histogram]) -> Result<(), OrbError> {
        if summed.len() != self.searches.len() {
            return Err(OrbError::HistogramCount {
                expected: self.searches.len(),
                found: summed.len(),
            });
        }
        for (index, h) in summed.iter().enumerate() {
            if h.cost.len() != self.bins + 2 || h.count.len() != self.bins + 2 {
                return Err(OrbError::HistogramLength {
                    index,
                    expected: self.bins + 2,
                    found: h.cost.len().min(h.count.len()),
                });
            }
        }
        self.rounds += 1;
        let searches = std::mem::take(&mut self.searches);
        let mut still_open = Vec::new();
        let mut placed = Vec::new();
        for ((node, mut search), h) in searches.into_iter().zip(summed) {
            match search.narrow(h) {
                SearchStep::Narrowed => still_open.push((node, search)),
                SearchStep::Found(at) => placed.push((node, search.axis, at)),
            }
        }
        self.searches = still_open;
        for (node, axis, at) in placed {
            let n = self.nodes[node];
            let (lo_region, hi_region) = split_region(n.region, axis, at);
            let lower_procs = n.lower_procs();
            let lower = self.open_node(n.first_proc, lower_procs, lo_region);
            let upper = self.open_node(
                n.first_proc + lower_procs,
                n.nprocs - lower_procs,
                hi_region,
            );
            self.nodes[node].split = Some(Split {
                axis,
                at,
                lower,
                upper,
            });
        }
        // Histograms are exchanged in node order; keep that order for the next round.
        self.searches.sort_by_key(|&(node, _)| node);
        Ok(())
    }

    /// The decomposition, once [`OrbBuilder::is_done`].
    pub fn finish(self) -> Result<Orb, OrbError> {
        if !self.searches.is_empty() {
            return Err(OrbError::Unfinished(self.searches.len()));
        }
        Ok(Orb {
            nodes: self.nodes,
            nprocs: self.nprocs,
        })
    }

    /// Runs the protocol to the end over bodies all held by this process.
    pub fn run_local<I>(mut self, items: I) -> Orb
    where
        I: IntoIterator<Item = (Vec3, u64)> + Clone,
    {
        while !self.is_done() {
            let h = self.partial_histograms(items.clone());
            self.advance(&h)
                .expect("histograms made by this builder fit it");
        }
        self.finish()
            .expect("the loop ends when every split is placed")
    }
}

/// ORB decomposition of `bodies` (weighted by [`Body::weight`]) among `nprocs` processes,
/// covering `bounds` (use the bounding box of the bodies).
pub fn decompose(bodies: &[Body], bounds: Aabb, nprocs: usize) -> Result<Orb, OrbError> {
    let builder = OrbBuilder::new(bounds, nprocs)?;
    Ok(builder.run_local(bodies.iter().map(|b| (b.pos, b.weight()))))
}

/// The bounding box of `bodies`' positions.
pub fn bounding_box(bodies: &[Body]) -> Aabb {
    Aabb::around(bodies.iter().map(|b| b.pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plummer;

    fn weighted(n: usize, seed: u64) -> Vec<Body> {
        let mut bodies = plummer::generate(n, seed);
        // Costs like those of a force phase: bodies in the dense core cost more.
        for b in &mut bodies {
            b.cost = 200 + (2000.0 / (1.0 + 4.0 * b.pos.norm2())) as u64;
        }
        bodies
    }

    #[test]
    fn every_body_has_one_owner_inside_its_region_and_costs_balance() {
        let bodies = weighted(2000, 5);
        let bounds = bounding_box(&bodies);
        for p in 1..=9 {
            let orb = decompose(&bodies, bounds, p).unwrap();
            assert_eq!(orb.regions().len(), p);
            let owners = orb.assign(&bodies);
            for (b, &o) in bodies.iter().zip(&owners) {
                assert!(o < p);
                assert!(orb.region(o).contains(b.pos), "body outside its region");
                let inside = (0..p).filter(|&q| {
                    let r = orb.region(q);
                    (0..3).all(|a| {
                        b.pos[a] >= r.min[a] && (b.pos[a] < r.max[a] || r.max[a] == bounds.max[a])
                    })
                });
                assert_eq!(inside.count(), 1, "regions overlap or leave a gap");
            }
            let loads = orb.loads(&bodies);
            let mean = loads.iter().sum::<u64>() as f64 / p as f64;
            let max_body = bodies.iter().map(|b| b.weight()).max().unwrap() as f64;
            for &l in &loads {
                // Each plane misses its target by at most one body's cost; errors add up
                // along the levels.
                assert!(
                    (l as f64 - mean).abs() <= 4.0 * max_body,
                    "p = {p}: load {l} vs mean {mean}"
                );
            }
        }
    }

    #[test]
    fn odd_process_counts_split_cost_in_proportion() {
        let bodies = weighted(3000, 6);
        let orb = decompose(&bodies, bounding_box(&bodies), 3).unwrap();
        let root = orb.nodes()[0];
        assert_eq!(root.lower_procs(), 2);
        let loads = orb.loads(&bodies);
        let total: u64 = loads.iter().sum();
        let lower = (loads[0] + loads[1]) as f64 / total as f64;
        assert!((lower - 2.0 / 3.0).abs() < 0.01, "lower share {lower}");
    }

    #[test]
    fn simulated_processes_reach_the_same_decomposition() {
        let bodies = weighted(2000, 7);
        let bounds = bounding_box(&bodies);
        for p in [2, 3, 4, 5] {
            let sequential = decompose(&bodies, bounds, p).unwrap();
            // P processes, each holding an arbitrary slice of the bodies.
            let slices: Vec<&[Body]> = bodies.chunks(bodies.len().div_ceil(p)).collect();
            let mut builders: Vec<OrbBuilder> = (0..p)
                .map(|_| OrbBuilder::new(bounds, p).unwrap())
                .collect();
            while !builders[0].is_done() {
                let partials: Vec<Vec<Histogram>> = builders
                    .iter()
                    .zip(&slices)
                    .map(|(b, s)| b.partial_histograms(s.iter().map(|b| (b.pos, b.weight()))))
                    .collect();
                let summed = sum_partials(&partials);
                for b in &mut builders {
                    b.advance(&summed).unwrap();
                }
            }
            assert!(builders[0].rounds() < 40);
            for b in builders {
                assert_eq!(b.finish().unwrap(), sequential);
            }
        }
    }

    #[test]
    fn split_search_finds_weighted_median_and_edges_match_slots() {
        // Ten bodies with cost 1 at x = 0..9: the two-process median lies between 4 and 5.
        let region = Aabb::new(Vec3::ZERO, Vec3::new(9.0, 1.0, 1.0));
        let mut s = SplitSearch::new(region, 2, 4);
        let xs: Vec<(f64, u64)> = (0..10).map(|i| (i as f64, 1)).collect();
        let at = loop {
            let h = s.local_histogram(xs.iter().copied());
            if let SearchStep::Found(at) = s.narrow(&h) {
                break at;
            }
        };
        let below = xs.iter().filter(|&&(x, _)| x < at).count();
        assert_eq!(below, 5, "plane at {at}");
        for i in 0..=s.bins {
            let e = s.edge(i);
            if e < s.hi {
                assert_eq!(s.slot(e), i + 1);
            }
        }
    }

    #[test]
    fn set_bounds_keeps_planes_and_stretches_outer_regions() {
        let bodies = weighted(500, 8);
        let bounds = bounding_box(&bodies);
        let mut orb = decompose(&bodies, bounds, 4).unwrap();
        let owners = orb.assign(&bodies);
        let mut wider = bounds;
        wider.min -= Vec3::new(1.0, 1.0, 1.0);
        wider.max += Vec3::new(1.0, 1.0, 1.0);
        orb.set_bounds(wider);
        assert_eq!(orb.assign(&bodies), owners);
        let union = orb.regions().into_iter().fold(Aabb::EMPTY, Aabb::union);
        assert_eq!(union, wider);
    }

    #[test]
    fn rebalancing_a_subtree_keeps_the_rest() {
        let bodies = weighted(2000, 9);
        let bounds = bounding_box(&bodies);
        let orb = decompose(&bodies, bounds, 4).unwrap();
        let root = orb.nodes()[0].split.unwrap();
        // Make the bodies of process 0 much more expensive, then re-split the lower half only.
        let mut heavy = bodies.clone();
        for b in &mut heavy {
            if orb.owner(b.pos) == 0 {
                b.cost *= 3;
            }
        }
        let rebuilt = OrbBuilder::rebalance(&orb, &[root.lower], DEFAULT_BINS)
            .unwrap()
            .run_local(heavy.iter().map(|b| (b.pos, b.weight())));
        let new_root = rebuilt.nodes()[0].split.unwrap();
        assert_eq!((new_root.axis, new_root.at), (root.axis, root.at));
        assert_eq!(rebuilt.region(2), orb.region(2));
        assert_eq!(rebuilt.region(3), orb.region(3));
        let loads = rebuilt.loads(&heavy);
        let (a, b) = (loads[0] as f64, loads[1] as f64);
        assert!((a - b).abs() / (a + b) < 0.01, "lower half loads {a} {b}");
        assert!(OrbBuilder::rebalance(&orb, &[99], 16).is_err());
    }

    #[test]
    fn protocol_errors_are_reported() {
        let bounds = Aabb::new(Vec3::ZERO, Vec3::new(1.0, 1.0, 1.0));
        assert_eq!(
            OrbBuilder::new(bounds, 0).unwrap_err(),
            OrbError::NoProcesses
        );
        let mut b = OrbBuilder::with_bins(bounds, 2, 8).unwrap();
        assert!(matches!(
            b.advance(&[]),
            Err(OrbError::HistogramCount { .. })
        ));
        assert!(matches!(
            b.advance(&[Histogram::zeros(3)]),
            Err(OrbError::HistogramLength { .. })
        ));
        assert_eq!(b.clone().finish().unwrap_err(), OrbError::Unfinished(1));
        // No bodies at all: the plane goes through the middle.
        b.advance(&[Histogram::zeros(8)]).unwrap();
        let orb = b.finish().unwrap();
        assert!((orb.nodes()[0].split.unwrap().at - 0.5).abs() < 1e-12);
        let single = decompose(&[], bounds, 1).unwrap();
        assert_eq!(single.owner(Vec3::new(5.0, 5.0, 5.0)), 0);
    }
}
