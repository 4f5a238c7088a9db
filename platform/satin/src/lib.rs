//! A divide-and-conquer runtime after Satin: tasks spawn children and sync on them, and idle
//! workers steal the oldest pending jobs from busy ones.
//!
//! A program is a tree of [`Task`]s. [`Context::spawn`] pushes a child onto the worker's own
//! deque and returns a [`Handle`]; [`Context::sync`] waits for all children, usually by running
//! them right there, newest first (work-first: a spawn costs little more than a call). A worker
//! that runs out of work steals the *oldest* job of another worker, the root of the largest
//! untouched subtree, so steals are few. For speculative search, a task can take its children's
//! outputs as they arrive ([`Context::next_completed`]) and cancel the rest ([`Context::abort`]).
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Fib(u32);
//!
//! impl satin::Task for Fib {
//!     type Output = u64;
//!     fn run(self, cx: &mut satin::Context) -> u64 {
//!         if self.0 < 2 {
//!             return self.0 as u64;
//!         }
//!         let a = cx.spawn(Fib(self.0 - 1));
//!         let b = cx.spawn(Fib(self.0 - 2));
//!         cx.sync();
//!         a.take() + b.take()
//!     }
//! }
//! satin::register!(Fib); // makes the type decodable on every node
//!
//! fn main() -> Result<(), satin::Error> {
//!     let v: u64 = satin::Runtime::local().threads(4).run(Fib(20))?;
//!     assert_eq!(v, 6765);
//!     Ok(())
//! }
//! ```
//!
//! # Speculative search
//!
//! A task can look at its children's outputs as they arrive and cancel the rest once it has
//! what it needs. Cancelled jobs that have not started are dropped; running ones stop at their
//! next `spawn` or `sync` (or when they poll [`Context::is_aborted`]).
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Probe(u32);
//!
//! impl satin::Task for Probe {
//!     type Output = Option<u32>;
//!     fn run(self, _cx: &mut satin::Context) -> Option<u32> {
//!         (self.0 % 7 == 3).then_some(self.0)
//!     }
//! }
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct FindAny(u32);
//!
//! impl satin::Task for FindAny {
//!     type Output = Option<u32>;
//!     fn run(self, cx: &mut satin::Context) -> Option<u32> {
//!         let mut children: Vec<_> = (0..self.0).map(|i| cx.spawn(Probe(i))).collect();
//!         while let Some((_, found)) = cx.next_completed(&mut children) {
//!             if found.is_some() {
//!                 cx.abort(); // the others are no longer needed
//!                 return found;
//!             }
//!         }
//!         None
//!     }
//! }
//! satin::register!(Probe);
//! satin::register!(FindAny);
//!
//! let found = satin::Runtime::local().threads(2).run(FindAny(100))?;
//! assert_eq!(found.map(|v| v % 7), Some(3));
//! # Ok::<(), satin::Error>(())
//! ```
//!
//! # Scheduling
//!
//! Each worker keeps its spawned jobs in a deque. The newest jobs stay in a private part that
//! only the worker touches, so spawning and running a child at sync cost no atomic instruction;
//! older jobs sit in a crossbeam-deque where others can steal them. A spawn writes a job record
//! (the task, later its output) at the top of the worker's record stack and links it on top of
//! the private deque; sync pops the frame's children off that deque and runs them; a frame
//! counts only the children that left the private deque (published for thieves), so a child
//! that is never stolen costs no counting. An idle worker tries the other workers in turn from
//! a random one and takes the oldest published job; if a victim has published nothing, the thief
//! raises a flag and the victim publishes its private jobs at its next spawn or sync. A job
//! therefore becomes stealable no later than its parent's next spawn or sync. The flag shares
//! one word per worker with the abort generation, so that a spawn or sync checks both with one
//! comparison. A worker waiting at a sync for stolen children runs other jobs meanwhile. Idle
//! workers spin, then yield, then park; publishing work wakes a parked worker. While a run is
//! active, an idle worker yields for up to 2 ms before it parks, and a new root wakes every
//! worker: waking a parked thread can take milliseconds (measured: 3 to 4 ms on a 2-vCPU
//! virtual machine whose kernel queued the woken thread behind the busy one), while the next
//! job of a running computation usually comes within microseconds.
//!
//! Records need no freeing one by one, because nothing can refer to a record after its
//! parent's task has ended: the task's sync waits for every child wherever it runs, and a
//! [`Handle`] carries the lifetime of the task's [`Context`], so no handle can be kept beyond
//! it (see [`Handle`] for what does not compile). Tasks on one worker nest like calls, so the
//! records of a worker form a stack: a spawn takes the next bytes, and a task that queued
//! children gives all their records back when it ends. A stolen job's record stays where its
//! parent put it while the thief runs it.
//!
//! Deep in the tree, a spawn runs its child at once, like a call, while the worker already
//! has queued jobs that no thief has asked for ([`Inlining`]; the lazy scheduling of Tzannes
//! et al.). A task gets a frame (what its children link to) only if it queues children of its
//! own, aborts, or waits for completions, and a child run at once by a task without a frame
//! runs in that task's own context, so such a spawn costs little more than a call. Thieves
//! still find the large pieces, which are the oldest queued jobs, and a thief's publish
//! request empties the queue, so the next spawns are queued again. [`Inlining::OFF`] queues
//! every child, as Satin does.
//!
//! The same request lets a task split its work on demand: [`Context::work_wanted`] says that
//! an idle worker (of this process, or in a pool a steal request from another) asked this one
//! for work and nothing queued could serve it. A task holding divisible work (a stack of
//! pending nodes, a range) then spawns a piece, which is published before `spawn` returns; while
//! every worker is busy it spawns nothing at all. The UTS search on one process splits this way
//! (see its README for what it gains over splitting at fixed intervals).
//!
//! What this costs (`satin-bench` on 2 cores of an AMD EPYC that other work shared, load average 4
//! to 10; medians of seven runs, the README gives the ranges and says how to measure): fib(32) with
//! every call spawning both children runs in about 0.8 times the time of the same with
//! `rayon::join` on 2 threads with the default inlining, and in about 1.9 times with every spawn
//! queued where thieves can take it (about 1.5 times when one child is spawned and the other
//! called, the shape of `rayon::join`). A queued child still costs a record, a push and a pop, and
//! a call through its type's table to an executor that calls the task, where `rayon::join` pushes
//! one closure for two calls and calls both directly: 116 instructions per fib call against 71
//! (callgrind, one thread, 1.6 times; times on one thread gave 1.6 to 1.9 times). On one thread a
//! spawn costs about 3 to 6 ns over a plain call when it runs its child at once and 9 to 13 ns when
//! it queues it (a `rayon::join`, which covers two calls, 10 to 13 ns); fib(40) spawning above 20
//! runs about 2 times as fast on 2 threads as sequentially. On a faster machine with little
//! other work (`results/satin-bench-20261124-2211`) the same ratios were 0.53, 1.46 and 1.06,
//! and a queued spawn cost 5.8 ns against 7.6 ns for a `rayon::join`.
//!
//! A task that panics fails the whole run: every other job of it is cancelled and
//! [`Runtime::run`] returns [`Error::TaskPanicked`] naming the task. [`Runtime::stats`] counts
//! spawns, syncs, steals, aborts and idle time; with `SATIN_STATS=1` every run prints its own.
//!
//! # Across processes
//!
//! [`Runtime::in_pool`] spreads a run over the nodes of a pool of the port library (`ipl`):
//! processes started by `ipl-run`, or threads of one process over its in-process driver.
//! Every node calls [`run`](PoolRuntime::run) with the same root task; the master (the pool's
//! lowest live rank) runs it and gets `Some(output)`, the others serve and get `None`. Idle nodes steal the
//! oldest job of another node, as chosen by [`Steal`]: random stealing, or cluster-aware
//! stealing, which keeps one asynchronous request to another location in flight while it
//! steals synchronously inside its own. A stolen job travels serialized (which is why tasks
//! are registered by name), runs on the thief as a new root, and its output travels back to
//! the frame that spawned it. Aborting a frame cancels its children wherever they run. A node
//! other than the master that dies costs time only: the jobs it had stolen run again at their
//! owners, and the results of its own jobs that others computed are kept and reused (see
//! [`remote`]); the output is the same. Nodes may join a running pool and steal at once, or
//! leave it ([`PoolRuntime::leave`], or SIGTERM) once their work is home. Only the master's
//! death ends a run, on every node with [`Error::NodeFailed`] naming it.
//!
//! ```
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Fib(u32);
//!
//! impl satin::Task for Fib {
//!     type Output = u64;
//!     fn run(self, cx: &mut satin::Context) -> u64 {
//!         if self.0 < 2 {
//!             return self.0 as u64;
//!         }
//!         let a = cx.spawn(Fib(self.0 - 1));
//!         let b = cx.spawn(Fib(self.0 - 2));
//!         cx.sync();
//!         a.take() + b.take()
//!     }
//! }
//! satin::register!(Fib);
//!
//! // Two nodes as threads of this process, over the port library's in-process driver; under
//! // `ipl-run`, each process would join with `ipl::Config::from_env()` instead.
//! let pool = format!("satin-doc-{}", std::process::id());
//! let nodes: Vec<_> = (0..2)
//!     .map(|_| {
//!         let pool = pool.clone();
//!         std::thread::spawn(move || -> Result<Option<u64>, satin::Error> {
//!             let ibis = ipl::Ibis::join(ipl::Config::inproc(pool, 2)).expect("join");
//!             satin::Runtime::in_pool(ibis)
//!                 .threads(1)
//!                 .steal(satin::Steal::ClusterAware)
//!                 .run(Fib(20))
//!         })
//!     })
//!     .collect();
//! let results = nodes
//!     .into_iter()
//!     .map(|t| t.join().unwrap())
//!     .collect::<Result<Vec<Option<u64>>, _>>()?;
//! // The master returns the result, the other node None.
//! assert_eq!(results.iter().flatten().collect::<Vec<_>>(), [&6765]);
//! # Ok::<(), satin::Error>(())
//! ```
//!
//! The [`remote`] module holds the hooks this distributed layer is built on, for layers that
//! move work between processes in other ways.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod arena;
mod codec;
mod context;
mod deque;
mod distributed;
mod error;
mod handle;
mod inlining;
mod job;
mod refusal;
pub mod remote;
mod root;
mod runtime;
mod scheduler;
mod stats;
mod task;
mod trace;
mod worker;

pub use context::Context;
pub use distributed::{PoolRuntime, Steal};
pub use error::Error;
pub use handle::Handle;
pub use inlining::Inlining;
pub use runtime::{Runtime, MAX_STACK_SIZE, MAX_THREADS, MIN_STACK_SIZE};
pub use stats::Stats;
pub use task::Task;

/// Registers a task type under a stable name, so that serialized jobs of that type can be
/// decoded by any process running the same program. Use it at module level, once per type:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Leaf(u32);
/// impl satin::Task for Leaf {
///     type Output = u32;
///     fn run(self, _cx: &mut satin::Context) -> u32 { self.0 }
/// }
/// satin::register!(Leaf);                          // named after its module path
/// # mod other {
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # pub struct Node(pub u32);
/// # impl satin::Task for Node {
/// #     type Output = u32;
/// #     fn run(self, _cx: &mut satin::Context) -> u32 { self.0 }
/// # }
/// # }
/// satin::register!(other::Node, "example/node");   // or under an explicit name
/// ```
#[macro_export]
macro_rules! register {
    ($ty:ty) => {
        $crate::register!(
            $ty,
            ::core::concat!(::core::module_path!(), "::", ::core::stringify!($ty))
        );
    };
    ($ty:ty, $name:expr) => {
        $crate::__private::inventory::submit! {
            $crate::__private::Registration::new::<$ty>($name)
        }
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::codec::Registration;
    pub use inventory;
}
