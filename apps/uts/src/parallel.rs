//! The parallel searches: on the satin runtime (threads of one process, or the processes of a
//! pool) and, for comparison, on rayon.
//!
//! Both run the walk of [`crate::walk`] and share out work the way the UTS reference code's
//! work-stealing searches do: now and then a worker moves the oldest entries of its stack,
//! the roots of the largest unexplored subtrees, into a task of their own
//! ([`SplitPolicy`]). An idle worker steals such a task (satin and rayon both take the oldest
//! job), so a steal yields a batch of subtrees rather than one node; in a binomial tree like
//! T3, seven in eight nodes are leaves, and stealing single nodes would mostly move leaves.
//!
//! On satin a task's children that nobody stole run at its end, on its worker's stack, one
//! frame deeper; a thread-local count of the task frames on the stack ([`MAX_NESTING`])
//! turns a task into a plain walk before that stack grows too deep, whatever the tree.
//!
//! ```
//! use uts::parallel::{search_satin, SplitPolicy};
//! use uts::{Budget, SampleTree, Tree};
//!
//! let t = SampleTree::find("default").unwrap();
//! let runtime = satin::Runtime::local().threads(2);
//! let counts = search_satin(&runtime, t.params(), u64::MAX, SplitPolicy::default())?;
//! assert_eq!(counts, t.expected);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::params::{Counts, ParamError, TreeParams};
use crate::tree::Tree;
use crate::walk::{self, Budget, Pending, SearchError, Walk, CHARGE_EVERY};

/// When a worker hands part of its stack to others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitPolicy {
    /// Nodes expanded between two hand-outs (unless `on_demand`).
    pub every: u32,
    /// The most pending nodes handed out at once (at most half of the stack goes).
    pub chunk: u32,
    /// Hand out work only when an idle worker asks for it, looking after every node, instead
    /// of every `every` nodes: satin alone can, through
    /// [`Context::work_wanted`](satin::Context::work_wanted).
    pub on_demand: bool,
}

impl Default for SplitPolicy {
    /// [`SplitPolicy::FIXED`].
    fn default() -> Self {
        SplitPolicy::FIXED
    }
}

impl SplitPolicy {
    /// Every 128 nodes, the 4 oldest: on 2 cores the best of the policies tried on T1 and T3
    /// (every 16 to 512 nodes, 1 to 64 nodes or half the stack), for satin and rayon alike;
    /// see the crate's README.
    pub const FIXED: SplitPolicy = SplitPolicy {
        every: 128,
        chunk: 4,
        on_demand: false,
    };

    /// Half of the stack, whenever an idle worker asks: satin's default (see the README).
    pub const ON_DEMAND: SplitPolicy = SplitPolicy {
        every: 128,
        chunk: u32::MAX,
        on_demand: true,
    };

    /// Checks that both numbers are at least 1.
    ///
    /// # Errors
    /// A zero, naming the flag.
    pub fn validate(&self) -> Result<(), ParamError> {
        for (flag, v) in [("--split-every", self.every), ("--chunk", self.chunk)] {
            if v == 0 {
                return Err(ParamError::OutOfRange {
                    flag,
                    value: v.to_string(),
                    why: "must be at least 1".into(),
                });
            }
        }
        Ok(())
    }
}

/// Why a parallel search failed.
#[derive(Debug, Error)]
pub enum ParallelError {
    /// The parameters describe no tree.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// The node limit.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// The satin runtime failed (a node died, a task panicked).
    #[error("satin: {0}")]
    Satin(#[from] satin::Error),
    /// rayon could not start its threads.
    #[error("rayon: {0}")]
    Rayon(#[from] rayon::ThreadPoolBuildError),
}

/// The most task frames one worker stack holds before a task stops handing out work and
/// walks its subtrees alone. A level (the task, the runtime's sync and job records) takes
/// about 560 bytes of stack (measured on x86-64), so 2048 levels stay near 1 MiB, far inside
/// satin's 16 MiB worker stacks; the published trees stay near a hundred levels
/// (`max_nesting` in the result line shows how deep a run went).
pub const MAX_NESTING: u32 = 2048;

thread_local! {
    static NESTING: Cell<u32> = const { Cell::new(0) };
}

/// The deepest task nesting seen in this process.
static NESTING_HIGH_WATER: AtomicU32 = AtomicU32::new(0);

/// The most task frames that were on one worker's stack at once, in this process.
pub fn nesting_high_water() -> u32 {
    NESTING_HIGH_WATER.load(Ordering::Relaxed)
}

/// A task frame on this thread's stack; leaving it (also by unwinding) counts it off.
struct Nesting(u32);

impl Nesting {
    fn enter() -> Nesting {
        let depth = NESTING.with(|n| {
            let d = n.get() + 1;
            n.set(d);
            d
        });
        // Every task passes here: a read first keeps the shared line clean on both cores
        // once the high-water mark stops moving.
        if depth > NESTING_HIGH_WATER.load(Ordering::Relaxed) {
            NESTING_HIGH_WATER.fetch_max(depth, Ordering::Relaxed);
        }
        Nesting(depth)
    }
}

impl Drop for Nesting {
    fn drop(&mut self) {
        NESTING.with(|n| n.set(n.get() - 1));
    }
}

/// What one search shares between its tasks in one process.
///
/// Every worker reads the tree's tables at every node, while the `Arc`'s reference count
/// changes at every spawn and every task's end and the budget's count every
/// [`CHARGE_EVERY`] nodes, on any core. Each sits in a cache line of its own, so those
/// writes do not take the tables' line away from the other cores.
struct SearchState {
    /// Tells the tasks of concurrent searches apart when they are decoded.
    id: u64,
    tree: CachePadded<Tree>,
    budget: CachePadded<Budget>,
    split: SplitPolicy,
}

/// The wire form of [`SharedSearch`]: what a process needs to rebuild the search state.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
struct SearchRecipe {
    id: u64,
    params: TreeParams,
    limit: u64,
    split: SplitPolicy,
}

/// The tree, node budget and split policy of one search, shared by its tasks (cloning is
/// cheap). Serializes as the parameters; a process decoding many tasks of one search builds
/// the tree's tables and its budget once.
#[derive(Clone)]
pub struct SharedSearch(Arc<SearchState>);

impl SharedSearch {
    /// A new search of the tree `params`, limited to `limit` nodes per process.
    ///
    /// # Errors
    /// If the parameters or the policy are out of range.
    pub fn new(
        params: TreeParams,
        limit: u64,
        split: SplitPolicy,
    ) -> Result<SharedSearch, ParamError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let id =
            nanos ^ (u64::from(std::process::id()) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed);
        Self::build(SearchRecipe {
            id,
            params,
            limit,
            split,
        })
    }

    fn build(r: SearchRecipe) -> Result<SharedSearch, ParamError> {
        r.split.validate()?;
        Ok(SharedSearch(Arc::new(SearchState {
            id: r.id,
            tree: CachePadded::new(Tree::new(r.params)?),
            budget: CachePadded::new(Budget::new(r.limit)),
            split: r.split,
        })))
    }

    fn recipe(&self) -> SearchRecipe {
        SearchRecipe {
            id: self.0.id,
            params: *self.0.tree.params(),
            limit: self.0.budget.limit(),
            split: self.0.split,
        }
    }

    /// The tree.
    pub fn tree(&self) -> &Tree {
        &self.0.tree
    }

    /// The node budget (nodes generated in this process so far).
    pub fn budget(&self) -> &Budget {
        &self.0.budget
    }

    /// [`SharedSearch::build`], reusing the state this process decoded last if it is the
    /// same search.
    fn decoded(r: SearchRecipe) -> Result<SharedSearch, ParamError> {
        static LAST: Mutex<Option<SharedSearch>> = Mutex::new(None);
        // A panic while building leaves at worst a stale entry behind.
        let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(s) = last.as_ref().filter(|s| s.recipe() == r) {
            return Ok(s.clone());
        }
        let s = SharedSearch::build(r)?;
        *last = Some(s.clone());
        Ok(s)
    }
}

impl std::fmt::Debug for SharedSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSearch")
            .field("id", &self.0.id)
            .field("params", self.0.tree.params())
            .finish()
    }
}

impl Serialize for SharedSearch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.recipe().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedSearch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SharedSearch, D::Error> {
        let r = SearchRecipe::deserialize(deserializer)?;
        SharedSearch::decoded(r).map_err(serde::de::Error::custom)
    }
}

/// The counts of part of a tree, and whether the node limit cut it short.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// Nodes generated.
    pub counts: Counts,
    /// The search stopped at the node limit: the counts are incomplete.
    pub stopped: bool,
}

impl Partial {
    fn merge(&mut self, other: Partial) {
        self.counts.merge(other.counts);
        self.stopped |= other.stopped;
    }
}

/// The satin task: walks the subtrees below some pending nodes, handing batches of them to
/// child tasks as the [`SplitPolicy`] says; its output covers every node below them.
///
/// A task decoded from another process is checked: every pending node must have the number of
/// children the tree gives its descriptor at its depth, so that a corrupt or forged task can
/// only describe nodes of some UTS tree, never a node with billions of children.
#[derive(Debug, Serialize, Deserialize)]
#[serde(try_from = "SubtreesWire")]
pub struct Subtrees {
    /// The search this task belongs to.
    pub search: SharedSearch,
    /// The roots of the subtrees (counted already).
    pub pending: Vec<Pending>,
}

/// [`Subtrees`] as decoded, before its check.
#[derive(Deserialize)]
struct SubtreesWire {
    search: SharedSearch,
    pending: Vec<Pending>,
}

impl TryFrom<SubtreesWire> for Subtrees {
    type Error = String;

    fn try_from(w: SubtreesWire) -> Result<Subtrees, String> {
        let tree = w.search.tree();
        if let Some(p) = w
            .pending
            .iter()
            .find(|p| p.children == 0 || p.children != tree.children(&p.desc, p.depth))
        {
            return Err(format!(
                "a pending node at depth {} claims {} children; the tree gives it {}",
                p.depth,
                p.children,
                tree.children(&p.desc, p.depth)
            ));
        }
        Ok(Subtrees {
            search: w.search,
            pending: w.pending,
        })
    }
}

/// The walk of one task between two hand-outs of work, as its [`SplitPolicy`] says, with
/// the node budget kept on the way.
///
/// The satin and the rayon tasks both drive their walk through [`Stretch::next_part`], which
/// is out of line: the two runtimes then run the very same machine code per node, and a
/// comparison of the two measures the runtimes rather than where the compiler placed two
/// copies of the loop.
struct Stretch<'s> {
    walk: Walk<'s>,
    budget: &'s Budget,
    split: SplitPolicy,
    may_split: bool,
    since_split: u32,
    charged: u64,
    stopped: bool,
}

impl<'s> Stretch<'s> {
    /// A walk below `pending`; it hands out work only if `may_split`.
    fn new(state: &'s SearchState, pending: Vec<Pending>, may_split: bool) -> Stretch<'s> {
        Stretch {
            walk: Walk::new(&state.tree, pending),
            budget: &state.budget,
            split: state.split,
            may_split,
            since_split: 0,
            charged: 0,
            stopped: false,
        }
    }

    /// Walks on until it is time to hand out work, and returns the oldest pending nodes to
    /// hand out; `None` once nothing is pending (or the node limit stopped the walk). With a
    /// policy `on_demand`, it is time when `wanted` says so.
    #[inline(never)]
    fn next_part(&mut self, wanted: &dyn Fn() -> bool) -> Option<Vec<Pending>> {
        let SplitPolicy {
            every,
            chunk,
            on_demand,
        } = self.split;
        // Locals, so that the loop keeps them in registers.
        let mut since_split = self.since_split;
        let mut charged = self.charged;
        let walk = &mut self.walk;
        let mut part = None;
        while walk.step() {
            since_split += 1;
            let due = if on_demand {
                wanted()
            } else {
                since_split >= every
            };
            if self.may_split && walk.pending() >= 2 && due {
                since_split = 0;
                let n = (walk.pending() / 2).min(chunk.try_into().unwrap_or(usize::MAX));
                part = Some(walk.split_oldest(n));
                break;
            }
            let nodes = walk.counts().nodes;
            if nodes - charged >= CHARGE_EVERY {
                let within = self.budget.charge(nodes - charged);
                charged = nodes;
                if !within {
                    self.stopped = true;
                    walk.abandon();
                }
            }
        }
        self.since_split = since_split;
        self.charged = charged;
        part
    }

    /// Charges what the budget has not seen yet; the counts of the walk, and whether the node
    /// limit stopped it.
    fn finish(self) -> Partial {
        let counts = self.walk.counts();
        self.budget.charge(counts.nodes - self.charged);
        Partial {
            counts,
            stopped: self.stopped,
        }
    }
}

/// Outstanding children a task keeps before it takes the outputs of finished ones.
const HARVEST_AT: usize = 64;

impl satin::Task for Subtrees {
    type Output = Partial;

    fn run(self, cx: &mut satin::Context) -> Partial {
        let Subtrees { search, pending } = self;
        let state = &*search.0;
        let mut out = Partial::default();
        if state.budget.exhausted() {
            out.stopped = true;
            return out;
        }
        let nesting = Nesting::enter();
        let may_split = nesting.0 < MAX_NESTING;
        let mut stretch = Stretch::new(state, pending, may_split);
        let mut children: Vec<satin::Handle<Partial>> = Vec::new();
        while let Some(part) = stretch.next_part(&|| cx.work_wanted()) {
            children.push(cx.spawn(Subtrees {
                search: search.clone(),
                pending: part,
            }));
            if children.len() >= HARVEST_AT {
                harvest(&mut children, &mut out);
            }
        }
        out.merge(stretch.finish());
        cx.sync();
        for child in children {
            out.merge(child.take());
        }
        drop(nesting);
        out
    }
}

satin::register!(Subtrees, "uts::Subtrees");

/// Takes the outputs of the finished children out of `children`.
fn harvest(children: &mut Vec<satin::Handle<Partial>>, out: &mut Partial) {
    let mut i = 0;
    while i < children.len() {
        if children[i].is_ready() {
            out.merge(children.swap_remove(i).take());
        } else {
            i += 1;
        }
    }
}

/// The local satin runtime of the `uts` binary and benchmark: `threads` workers, every spawn
/// queued ([`satin::Inlining::OFF`]).
///
/// A search spawns once per hand-out, every few microseconds of work, so running a spawned
/// batch at once (satin's spawn inlining) saves nothing measurable, and it keeps the oldest
/// subtrees of a worker from thieves: T3 on 2 threads took 2.4% longer than with rayon with
/// inlining, 0.7% without (medians of 20 rounds).
pub fn satin_runtime(threads: usize) -> satin::Runtime {
    satin::Runtime::local()
        .threads(threads)
        .inlining(satin::Inlining::OFF)
}

/// The satin runtime of the `uts` binary over the processes of a pool: `threads` workers per
/// process, stealing between processes as `steal` says, every spawn queued (see
/// [`satin_runtime`]).
pub fn pool_runtime(ibis: ipl::Ibis, threads: usize, steal: satin::Steal) -> satin::PoolRuntime {
    satin::Runtime::in_pool(ibis)
        .threads(threads)
        .steal(steal)
        .inlining(satin::Inlining::OFF)
}

/// The root task of a search, and the counts of what it does not cover (the root itself).
fn root_task(search: &SharedSearch) -> (Counts, Subtrees) {
    let (counts, root) = walk::start(search.tree());
    search.budget().charge(counts.nodes);
    (
        counts,
        Subtrees {
            search: search.clone(),
            pending: root.into_iter().collect(),
        },
    )
}

fn finish(search: &SharedSearch, mut counts: Counts, p: Partial) -> Result<Counts, SearchError> {
    counts.merge(p.counts);
    let limit = search.budget().limit();
    if p.stopped || counts.nodes > limit {
        return Err(SearchError::NodeLimit {
            limit,
            counted: search.budget().counted().max(counts.nodes),
        });
    }
    Ok(counts)
}

/// Searches the tree on a local satin runtime. `limit` bounds the nodes generated.
///
/// # Errors
/// Parameters out of range, the node limit, or what the runtime reports.
pub fn search_satin(
    runtime: &satin::Runtime,
    params: TreeParams,
    limit: u64,
    split: SplitPolicy,
) -> Result<Counts, ParallelError> {
    let search = SharedSearch::new(params, limit, split)?;
    search_satin_shared(runtime, &search)
}

/// [`search_satin`] with a search built beforehand (its budget shows the progress).
///
/// # Errors
/// The node limit, or what the runtime reports.
pub fn search_satin_shared(
    runtime: &satin::Runtime,
    search: &SharedSearch,
) -> Result<Counts, ParallelError> {
    let (counts, task) = root_task(search);
    let p = runtime.run(task)?;
    Ok(finish(search, counts, p)?)
}

/// Searches the tree over the processes of a pool: every process calls this with the same
/// parameters; the master returns `Some(counts)`, the others `None` once the search is done.
/// The node limit applies to each process's share.
///
/// # Errors
/// The node limit (on the master), or what the runtime reports.
pub fn search_in_pool(
    runtime: &satin::PoolRuntime,
    search: &SharedSearch,
) -> Result<Option<Counts>, ParallelError> {
    let (counts, task) = root_task(search);
    match runtime.run(task)? {
        Some(p) => Ok(Some(finish(search, counts, p)?)),
        None => Ok(None),
    }
}

/// What the rayon tasks of one search add their counts to.
struct Totals {
    nodes: AtomicU64,
    leaves: AtomicU64,
    max_depth: AtomicU32,
    stopped: AtomicBool,
}

/// Searches the tree on a rayon thread pool with the same walk and split policy as the satin
/// search: tasks spawned into one `rayon::scope`, each adding its counts to shared totals.
///
/// # Errors
/// The node limit, or a policy `on_demand`: rayon does not tell a task that a thread wants
/// work.
pub fn search_rayon(
    pool: &rayon::ThreadPool,
    search: &SharedSearch,
) -> Result<Counts, ParallelError> {
    if search.0.split.on_demand {
        return Err(ParamError::OutOfRange {
            flag: "--split-on-demand",
            value: "with --rayon".into(),
            why: "rayon does not tell a task when a thread wants work; only satin splits on demand"
                .into(),
        }
        .into());
    }
    let (counts, root) = walk::start(search.tree());
    search.budget().charge(counts.nodes);
    let totals = Totals {
        nodes: AtomicU64::new(0),
        leaves: AtomicU64::new(0),
        max_depth: AtomicU32::new(0),
        stopped: AtomicBool::new(false),
    };
    let state = &*search.0;
    pool.scope(|s| rayon_walk(s, state, &totals, root.into_iter().collect()));
    let p = Partial {
        counts: Counts {
            nodes: totals.nodes.into_inner(),
            leaves: totals.leaves.into_inner(),
            max_depth: totals.max_depth.into_inner(),
        },
        stopped: totals.stopped.into_inner(),
    };
    Ok(finish(search, counts, p)?)
}

fn rayon_walk<'s>(
    s: &rayon::Scope<'s>,
    state: &'s SearchState,
    totals: &'s Totals,
    pending: Vec<Pending>,
) {
    if state.budget.exhausted() {
        totals.stopped.store(true, Ordering::Relaxed);
        return;
    }
    let mut stretch = Stretch::new(state, pending, true);
    while let Some(part) = stretch.next_part(&|| false) {
        s.spawn(move |s| rayon_walk(s, state, totals, part));
    }
    let p = stretch.finish();
    if p.stopped {
        totals.stopped.store(true, Ordering::Relaxed);
    }
    totals.nodes.fetch_add(p.counts.nodes, Ordering::Relaxed);
    totals.leaves.fetch_add(p.counts.leaves, Ordering::Relaxed);
    totals
        .max_depth
        .fetch_max(p.counts.max_depth, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_travels_as_its_recipe_and_nodes() {
        let search =
            SharedSearch::new(TreeParams::default(), 1000, SplitPolicy::default()).expect("valid");
        let (_, root) = walk::start(search.tree());
        let task = Subtrees {
            search: search.clone(),
            pending: root.into_iter().collect(),
        };
        let bytes = postcard::to_allocvec(&task).unwrap();
        let back: Subtrees = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.pending, task.pending);
        // The same search in this process: one state, one budget.
        assert!(Arc::ptr_eq(&back.search.0, &search.0) || back.search.recipe() == search.recipe());
        assert_eq!(back.search.budget().limit(), 1000);
    }

    #[test]
    fn a_forged_node_does_not_decode() {
        let search =
            SharedSearch::new(TreeParams::default(), u64::MAX, SplitPolicy::default()).unwrap();
        let (_, root) = walk::start(search.tree());
        let mut forged = root.unwrap();
        forged.children = 4_000_000_000;
        let task = Subtrees {
            search: search.clone(),
            pending: vec![forged],
        };
        let bytes = postcard::to_allocvec(&task).unwrap();
        assert!(postcard::from_bytes::<Subtrees>(&bytes).is_err());
        let e = Subtrees::try_from(SubtreesWire {
            search,
            pending: vec![forged],
        })
        .unwrap_err();
        assert!(e.contains("claims 4000000000 children"), "{e}");
    }

    #[test]
    fn a_bad_recipe_does_not_decode() {
        let search =
            SharedSearch::new(TreeParams::default(), u64::MAX, SplitPolicy::default()).unwrap();
        let mut recipe = search.recipe();
        recipe.params.nonleaf_prob = 3.0;
        let bytes = postcard::to_allocvec(&(recipe, Vec::<Pending>::new())).unwrap();
        assert!(postcard::from_bytes::<Subtrees>(&bytes).is_err());
        assert!(SplitPolicy {
            every: 0,
            ..SplitPolicy::FIXED
        }
        .validate()
        .is_err());
    }
}
