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
    max_pending: u64,
    split: SplitPolicy,
}

/// The tree, node budget and split policy of one search, shared by its tasks (cloning is
/// cheap). Serializes as the parameters; a process decoding many tasks of one search builds
/// the tree's tables and its budget once.
#[derive(Clone)]
pub struct SharedSearch(Arc<SearchState>);

impl SharedSearch {
    /// A new search of the tree `params`, limited to `limit` nodes per process, with the
    /// pending limit [`walk::DEFAULT_MAX_PENDING`].
    ///
    /// # Errors
    /// If the parameters or the policy are out of range.
    pub fn new(
        params: TreeParams,
        limit: u64,
        split: SplitPolicy,
    ) -> Result<SharedSearch, ParamError> {
        Self::with_max_pending(params, limit, walk::DEFAULT_MAX_PENDING, split)
    }

    /// A new search of the tree `params`, limited to `limit` nodes per process, of which at
    /// most `max_pending` may be pending at once in a process.
    ///
    /// # Errors
    /// If the parameters or the policy are out of range.
    pub fn with_max_pending(
        params: TreeParams,
        limit: u64,
        max_pending: u64,
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
            max_pending,
            split,
        })
    }

    fn build(r: SearchRecipe) -> Result<SharedSearch, ParamError> {
        r.split.validate()?;
        Ok(SharedSearch(Arc::new(SearchState {
            id: r.id,
            tree: CachePadded::new(Tree::new(r.params)?),
            budget: CachePadded::new(Budget::with_max_pending(r.limit, r.max_pending)),
            split: r.split,
        })))
    }

    fn recipe(&self) -> SearchRecipe {
        SearchRecipe {
            id: self.0.id,
            params: *self.0.tree.params(),
            limit: self.0.budget.limit(),
            max_pending: self.0.budget.max_pending(),
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

/// The most nodes a [`Partial`] decoded from another process may count: 2^56, some 250,000
/// times the largest published tree (T1WL, 2.7 * 10^11 nodes), and more than a thousand
/// cores generating 10^8 nodes a second each make in a week. Below it, 256 parts must be
/// merged before a count can overflow.
pub const MAX_PARTIAL_NODES: u64 = 1 << 56;

/// The counts of part of a tree, and whether a limit cut it short.
///
/// A part decoded from another process (a task's result) is checked: it may count at most
/// [`MAX_PARTIAL_NODES`] nodes, no more leaves than nodes, and the pending limit only in a
/// part that stopped, as every part a search makes does. A forged or corrupt part is then
/// refused as it is decoded, where satin names the node that sent it, instead of overflowing
/// a count when its parent task merges it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PartialWire")]
pub struct Partial {
    /// Nodes generated.
    pub counts: Counts,
    /// The search stopped at the node limit or the pending limit: the counts are incomplete.
    pub stopped: bool,
    /// It was the pending limit (in some process).
    pub pending_limit: bool,
}

/// [`Partial`] as decoded, before its check.
#[derive(Deserialize)]
struct PartialWire {
    counts: Counts,
    stopped: bool,
    pending_limit: bool,
}

impl TryFrom<PartialWire> for Partial {
    type Error = String;

    fn try_from(w: PartialWire) -> Result<Partial, String> {
        let c = w.counts;
        if c.nodes > MAX_PARTIAL_NODES {
            return Err(format!(
                "a part of the tree counts {} nodes, more than the {MAX_PARTIAL_NODES} any search makes",
                c.nodes
            ));
        }
        if c.leaves > c.nodes {
            return Err(format!(
                "a part of the tree counts {} leaves among {} nodes",
                c.leaves, c.nodes
            ));
        }
        if w.pending_limit && !w.stopped {
            return Err("a part of the tree was cut by the pending limit but did not stop".into());
        }
        Ok(Partial {
            counts: c,
            stopped: w.stopped,
            pending_limit: w.pending_limit,
        })
    }
}

impl Partial {
    fn merge(&mut self, other: Partial) {
        self.counts.merge(other.counts);
        self.stopped |= other.stopped;
        self.pending_limit |= other.pending_limit;
    }

    /// An empty part that a budget spent already cut short.
    fn cut(budget: &Budget) -> Partial {
        Partial {
            counts: Counts::default(),
            stopped: true,
            pending_limit: budget.pending_exceeded(),
        }
    }
}

/// The satin task: walks the subtrees below some pending nodes, handing batches of them to
/// child tasks as the [`SplitPolicy`] says; its output covers every node below them.
///
/// A task decoded from another process is checked: every pending node must have the number of
/// children the tree gives its descriptor at its depth, so that a corrupt or forged task can
/// only describe nodes of some UTS tree, never a node with billions of children.
///
/// Its nodes count as held pending in its search's [`Budget`] for as long as the task lives,
/// in whatever process it lives: tasks waiting to run hold nodes as the walks' stacks do,
/// and a search that hands out work faster than it is done would otherwise pile them up
/// unseen by the pending limit.
#[derive(Debug, Serialize, Deserialize)]
#[serde(try_from = "SubtreesWire")]
pub struct Subtrees {
    search: SharedSearch,
    pending: Vec<Pending>,
}

impl Subtrees {
    /// A task of `search` below `pending` (nodes counted already).
    pub fn new(search: SharedSearch, pending: Vec<Pending>) -> Subtrees {
        search.budget().hold(pending.len() as i64);
        Subtrees { search, pending }
    }

    /// A task of nodes that a walk of this process handed out, which its share of the held
    /// nodes no longer includes.
    fn handed_out(search: SharedSearch, pending: Vec<Pending>) -> Subtrees {
        Subtrees { search, pending }
    }

    /// The search this task belongs to.
    pub fn search(&self) -> &SharedSearch {
        &self.search
    }

    /// The roots of the subtrees (counted already).
    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }
}

impl Drop for Subtrees {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.search.budget().hold(-(self.pending.len() as i64));
        }
    }
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
        Ok(Subtrees::new(w.search, w.pending))
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
    /// This walk's share of the budget's held nodes: its stack as last reported, less what
    /// it handed out since.
    held: i64,
    stopped: bool,
}

/// Tells `budget` what `walk` generated and holds since it last did; false once over a limit.
/// Out of line and cold: it runs once every [`CHARGE_EVERY`] nodes, and inlined into the walk's
/// loop it cost the parallel searches some 4% of their speed.
#[cold]
#[inline(never)]
fn report(budget: &Budget, walk: &Walk<'_>, charged: &mut u64, held: &mut i64) -> bool {
    let nodes = walk.counts().nodes;
    let within = budget.charge(nodes - *charged);
    *charged = nodes;
    let stack = walk.pending() as i64;
    let room = budget.hold(stack - *held);
    *held = stack;
    within && room
}

impl<'s> Stretch<'s> {
    /// A walk below `pending`, which the budget holds already (the task's nodes become the
    /// walk's); it hands out work only if `may_split`.
    fn new(state: &'s SearchState, pending: Vec<Pending>, may_split: bool) -> Stretch<'s> {
        Stretch {
            held: pending.len() as i64,
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
        let mut held = self.held;
        let walk = &mut self.walk;
        let mut part = None;
        while walk.step() {
            since_split += 1;
            let due = if on_demand {
                wanted()
            } else {
                since_split >= every
            };
            // The limits come first: a walk that hands out work at every node (--split-every
            // 1) would otherwise never reach them.
            if walk.counts().nodes - charged >= CHARGE_EVERY
                && !report(self.budget, walk, &mut charged, &mut held)
            {
                self.stopped = true;
                walk.abandon();
            }
            if self.may_split && walk.pending() >= 2 && due {
                since_split = 0;
                let n = (walk.pending() / 2).min(chunk.try_into().unwrap_or(usize::MAX));
                let out = walk.split_oldest(n);
                held -= out.len() as i64;
                part = Some(out);
                break;
            }
        }
        self.since_split = since_split;
        self.charged = charged;
        self.held = held;
        part
    }

    /// Charges what the budget has not seen yet; the counts of the walk, and whether the node
    /// limit stopped it.
    fn finish(self) -> Partial {
        let counts = self.walk.counts();
        self.budget.charge(counts.nodes - self.charged);
        // The stack is empty: the walk ended, or a limit made it drop the rest.
        self.budget.hold(-self.held);
        Partial {
            counts,
            stopped: self.stopped,
            pending_limit: self.stopped && self.budget.pending_exceeded(),
        }
    }
}

/// Outstanding children a task keeps before it takes the outputs of finished ones.
const HARVEST_AT: usize = 64;

impl satin::Task for Subtrees {
    type Output = Partial;

    fn run(mut self, cx: &mut satin::Context) -> Partial {
        let state = &*self.search.0;
        let mut out = Partial::default();
        if state.budget.exhausted() {
            return Partial::cut(&state.budget);
        }
        // The walk takes the task's share of the held nodes with them: the task, left empty,
        // gives none back when it is dropped.
        let pending = std::mem::take(&mut self.pending);
        let nesting = Nesting::enter();
        let may_split = nesting.0 < MAX_NESTING;
        let mut stretch = Stretch::new(state, pending, may_split);
        let mut children: Vec<satin::Handle<Partial>> = Vec::new();
        while let Some(part) = stretch.next_part(&|| cx.work_wanted()) {
            children.push(cx.spawn(Subtrees::handed_out(self.search.clone(), part)));
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
        Subtrees::new(search.clone(), root.into_iter().collect()),
    )
}

fn finish(search: &SharedSearch, mut counts: Counts, p: Partial) -> Result<Counts, SearchError> {
    counts.merge(p.counts);
    let budget = search.budget();
    let limit = budget.limit();
    if p.pending_limit || budget.pending_exceeded() {
        return Err(SearchError::PendingLimit {
            limit: budget.max_pending(),
            counted: budget.counted().max(counts.nodes),
        });
    }
    if p.stopped || counts.nodes > limit {
        return Err(SearchError::NodeLimit {
            limit,
            counted: search.budget().counted().max(counts.nodes),
        });
    }
    Ok(counts)
}

/// Searches the tree on a local satin runtime. `limit` bounds the nodes generated, and
/// [`walk::DEFAULT_MAX_PENDING`] those pending at once.
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
/// The node limit, the pending limit, or what the runtime reports.
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
    let root: Vec<Pending> = root.into_iter().collect();
    search.budget().hold(root.len() as i64);
    let totals = Totals {
        nodes: AtomicU64::new(0),
        leaves: AtomicU64::new(0),
        max_depth: AtomicU32::new(0),
        stopped: AtomicBool::new(false),
    };
    let state = &*search.0;
    pool.scope(|s| rayon_walk(s, state, &totals, root));
    let p = Partial {
        counts: Counts {
            nodes: totals.nodes.into_inner(),
            leaves: totals.leaves.into_inner(),
            max_depth: totals.max_depth.into_inner(),
        },
        stopped: totals.stopped.into_inner(),
        pending_limit: false,
    };
    Ok(finish(search, counts, p)?)
}

/// Walks below `pending`, nodes the budget holds already, whose share this walk takes over.
fn rayon_walk<'s>(
    s: &rayon::Scope<'s>,
    state: &'s SearchState,
    totals: &'s Totals,
    pending: Vec<Pending>,
) {
    if state.budget.exhausted() {
        state.budget.hold(-(pending.len() as i64));
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
        let task = Subtrees::new(search.clone(), root.into_iter().collect());
        let bytes = postcard::to_allocvec(&task).unwrap();
        let back: Subtrees = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.pending, task.pending);
        // The same search in this process: one state, one budget.
        assert!(Arc::ptr_eq(&back.search.0, &search.0) || back.search.recipe() == search.recipe());
        assert_eq!(back.search.budget().limit(), 1000);
    }

    #[test]
    fn held_nodes_are_counted_back_to_zero_and_bounded() {
        let t3 = crate::SampleTree::find("T3").unwrap();
        for split in [SplitPolicy::FIXED, SplitPolicy::ON_DEMAND] {
            let search = SharedSearch::new(t3.params(), u64::MAX, split).unwrap();
            let runtime = satin_runtime(2);
            assert_eq!(search_satin_shared(&runtime, &search).unwrap(), t3.expected);
            assert_eq!(search.budget().held(), 0, "{split:?}");
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let search = SharedSearch::new(t3.params(), u64::MAX, SplitPolicy::FIXED).unwrap();
        assert_eq!(search_rayon(&pool, &search).unwrap(), t3.expected);
        assert_eq!(search.budget().held(), 0);

        // A task decoded holds its nodes until it runs or is dropped.
        let (_, root) = walk::start(search.tree());
        let bytes =
            postcard::to_allocvec(&Subtrees::new(search.clone(), vec![root.unwrap()])).unwrap();
        let task: Subtrees = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(task.search().budget().held(), 1);
        drop(task);

        // Work handed out at every node piles up in tasks, which the pending limit sees.
        let runaway =
            crate::cli::parse_tree_args("-t 0 -b 2000 -q 1 -m 100".split_whitespace()).unwrap();
        let every_node = SplitPolicy {
            every: 1,
            chunk: u32::MAX,
            on_demand: false,
        };
        let search =
            SharedSearch::with_max_pending(runaway, u64::MAX, 100_000, every_node).unwrap();
        match search_satin_shared(&satin_runtime(2), &search) {
            Err(ParallelError::Search(SearchError::PendingLimit { limit, .. })) => {
                assert_eq!(limit, 100_000)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(search.budget().held(), 0);
        let search =
            SharedSearch::with_max_pending(runaway, u64::MAX, 100_000, every_node).unwrap();
        assert!(matches!(
            search_rayon(&pool, &search),
            Err(ParallelError::Search(SearchError::PendingLimit { .. }))
        ));
        assert_eq!(search.budget().held(), 0);
    }

    #[test]
    fn a_forged_node_does_not_decode() {
        let search =
            SharedSearch::new(TreeParams::default(), u64::MAX, SplitPolicy::default()).unwrap();
        let (_, root) = walk::start(search.tree());
        let mut forged = root.unwrap();
        forged.children = 4_000_000_000;
        let task = Subtrees::new(search.clone(), vec![forged]);
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
    fn a_forged_partial_does_not_decode() {
        let counts = |nodes, leaves| Counts {
            nodes,
            leaves,
            max_depth: 3,
        };
        let wire = |counts: Counts, stopped: bool, pending_limit: bool| {
            postcard::to_allocvec(&(counts, stopped, pending_limit)).unwrap()
        };
        let genuine = Partial {
            counts: counts(10, 7),
            stopped: true,
            pending_limit: true,
        };
        let bytes = wire(genuine.counts, true, true);
        assert_eq!(postcard::from_bytes::<Partial>(&bytes).unwrap(), genuine);
        assert_eq!(bytes, postcard::to_allocvec(&genuine).unwrap());
        let most = counts(MAX_PARTIAL_NODES, MAX_PARTIAL_NODES);
        assert!(postcard::from_bytes::<Partial>(&wire(most, false, false)).is_ok());
        for (counts, stopped, pending_limit) in [
            // Merged with anything, it would overflow.
            (counts(u64::MAX, 0), false, false),
            (counts(MAX_PARTIAL_NODES + 1, 0), false, false),
            (counts(5, 6), false, false),
            (counts(10, 7), false, true),
        ] {
            let bytes = wire(counts, stopped, pending_limit);
            assert!(
                postcard::from_bytes::<Partial>(&bytes).is_err(),
                "{counts:?} {stopped} {pending_limit}"
            );
        }
        let e = Partial::try_from(PartialWire {
            counts: counts(5, 6),
            stopped: false,
            pending_limit: false,
        })
        .unwrap_err();
        assert!(e.contains("6 leaves among 5 nodes"), "{e}");
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
