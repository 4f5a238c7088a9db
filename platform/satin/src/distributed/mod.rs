//! Work stealing between the processes of a pool of the port library (`ipl`), surviving
//! crashes and changes of the pool.
//!
//! Every node of the pool calls [`PoolRuntime::run`] with the same root task. The master (the
//! pool's lowest live rank when the runtime starts) runs the root; the others start idle. A
//! node whose workers find no local work asks other nodes for their oldest job ([`Steal`] says
//! whom), runs what it gets as a new local root and sends the output back to the job's owner,
//! whose waiting frame takes it like the output of a local child. When the root returns, the
//! master announces the end of the run and every node returns.
//!
//! A node that dies loses nothing but time: the jobs it had stolen run again at their owners,
//! and the results of its own jobs that others computed are kept and reused (`results`). Nodes
//! may join a running pool and start stealing, or leave it, finishing and returning their work
//! first (`lifecycle`). Only the master's death ends a run. The modules follow the seams of the
//! work: `setup`, `messages` (and their encoding, `proto`), `stealing`, `lifecycle`, `failures`
//! and `results`; `node` holds what they share. They reach the local runtime only through
//! [`remote`](crate::remote).
#![doc = include_str!("README.md")]

mod failures;
mod lifecycle;
mod messages;
mod node;
mod proto;
mod results;
mod setup;
mod stealing;

use std::sync::{Arc, Mutex as StdMutex, OnceLock, Weak};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use ipl::{Ibis, NodeId};
use parking_lot::Mutex;

use crate::{Error, Runtime, Stats, Task};
use node::Node;

/// Whom an idle node asks for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Steal {
    /// Random stealing (RS): ask one node chosen at random among all others and wait for its
    /// answer before asking again. Simple and good on one cluster; across a wide-area link
    /// every steal sent there stalls the thief for a round trip.
    Random,
    /// Cluster-aware random stealing (CRS): keep at most one *asynchronous* steal request in
    /// flight to a random node of another location, and meanwhile steal synchronously from
    /// random nodes of the own location. Wide-area latency is then hidden behind local work.
    /// With a single location it is the same as [`Steal::Random`].
    #[default]
    ClusterAware,
}

impl Steal {
    /// The policy `SATIN_STEAL` names: `random` or `cluster-aware`; the default
    /// ([`Steal::ClusterAware`]) when the variable is unset. For programs that let their users
    /// choose, as the fib and nqueens examples do.
    ///
    /// # Errors
    /// A message naming the variable and the value when it is neither.
    pub fn from_env() -> Result<Steal, String> {
        match std::env::var("SATIN_STEAL") {
            Err(std::env::VarError::NotPresent) => Ok(Steal::default()),
            Err(std::env::VarError::NotUnicode(v)) => {
                Err(format!("SATIN_STEAL={v:?} is not valid text"))
            }
            Ok(v) => match v.trim() {
                "cluster-aware" => Ok(Steal::ClusterAware),
                "random" => Ok(Steal::Random),
                _ => Err(format!(
                    "SATIN_STEAL={v:?}: expected random or cluster-aware"
                )),
            },
        }
    }
}

/// A runtime whose work is spread over the nodes of an `ipl` pool; from
/// [`Runtime::in_pool`].
///
/// Every node of the pool builds one and calls [`run`](PoolRuntime::run) with the same root
/// task, as many times as it likes but the same number of times on every node that is there
/// from the start. On the first run each node finds the master (the lowest live rank: rank 0 of
/// a closed pool), joins the mesh `satin` (ports `satin/control` and `satin/data`) and
/// starts watching the pool.
///
/// In an open pool, or when a process joins a closed pool after it filled (`ipl-run --join`),
/// a node's first run joins the master's current run (or its next, between runs) and starts
/// stealing at once; later runs follow the master's.
///
/// See the [crate documentation](crate#across-processes) for an example on a pool of threads.
pub struct PoolRuntime {
    // Dropped first: the distributed layer stops before the workers do.
    net: Mutex<Option<Net>>,
    master: OnceLock<NodeId>,
    local: Runtime,
    ibis: Ibis,
    steal: Steal,
    leave_on_sigterm: Option<bool>,
}

/// The distributed layer of one node, set up by the first run.
struct Net {
    node: Arc<Node>,
    stop: Option<Sender<()>>,
    watcher: Option<JoinHandle<()>>,
}

impl Drop for Net {
    fn drop(&mut self) {
        self.node.wait_for_acks();
        self.node.remote.clear_idle_hook();
        self.node.remote.clear_abort_hook();
        drop(self.stop.take());
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        self.node.wait_before_closing(true);
        // Stops the upcall threads.
        self.node.close_mesh();
    }
}

impl Runtime {
    /// A runtime spread over the pool `ibis` belongs to: the distributed counterpart of
    /// [`Runtime::local`]. Every node of the pool calls it; see [`PoolRuntime`].
    pub fn in_pool(ibis: Ibis) -> PoolRuntime {
        PoolRuntime {
            net: Mutex::new(None),
            master: OnceLock::new(),
            local: Runtime::local(),
            ibis,
            steal: Steal::default(),
            leave_on_sigterm: None,
        }
    }
}

impl PoolRuntime {
    /// Sets the number of worker threads of this node (default: one per available core).
    pub fn threads(mut self, n: usize) -> PoolRuntime {
        self.local = self.local.threads(n);
        self
    }

    /// Sets the stack size of each worker thread of this node, in bytes (at least
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE), as for [`Runtime::stack_size`]).
    pub fn stack_size(mut self, bytes: usize) -> PoolRuntime {
        self.local = self.local.stack_size(bytes);
        self
    }

    /// Sets when spawns on this node run their child at once instead of queueing it (see
    /// [`Inlining`](crate::Inlining); default as for [`Runtime::inlining`]).
    pub fn inlining(mut self, inlining: crate::Inlining) -> PoolRuntime {
        self.local = self.local.inlining(inlining);
        self
    }

    /// Sets how idle nodes look for work in other processes (default
    /// [`Steal::ClusterAware`]). Every node of a pool should use the same policy.
    pub fn steal(mut self, policy: Steal) -> PoolRuntime {
        self.steal = policy;
        self
    }

    /// Whether SIGTERM makes this node leave the pool gracefully (see
    /// [`leave`](PoolRuntime::leave)) instead of ending the process. Default: yes for pools of
    /// processes (tcp and wan drivers), no for pools of threads, whose process the signal
    /// concerns as a whole. SIGTERM to the master, which cannot leave, ends its process as
    /// usual.
    pub fn leave_on_sigterm(mut self, yes: bool) -> PoolRuntime {
        self.leave_on_sigterm = Some(yes);
        self
    }

    /// The configured number of worker threads of this node.
    pub fn num_threads(&self) -> usize {
        self.local.num_threads()
    }

    /// The configured stealing policy.
    pub fn steal_policy(&self) -> Steal {
        self.steal
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.ibis.id()
    }

    /// The master node, once the first run has found it.
    pub fn master(&self) -> Option<NodeId> {
        self.master.get().cloned()
    }

    /// Runs `task` as the root of a task tree spread over the pool.
    ///
    /// Every node calls it with the same task. The master runs it and returns
    /// `Ok(Some(output))`; the others take part by stealing and return `Ok(None)` once the
    /// master announces the end (or, on a node asked to [`leave`](PoolRuntime::leave), once it
    /// has finished its part and left). If a task panics anywhere, the master returns
    /// [`Error::TaskPanicked`] or [`Error::Remote`] (naming the node it happened on) and the
    /// others [`Error::RunFailed`]. A node other than the master that dies or leaves costs
    /// time only: its work is done again elsewhere and the output is the same. If the master
    /// dies, every other node returns [`Error::NodeFailed`] naming it. After this node has
    /// left, `run` returns [`Error::Left`]. With `SATIN_STATS=1` each node prints its
    /// statistics of the run to stderr; any value but `0` or `1` fails the run with
    /// [`Error::Config`].
    pub fn run<T: Task>(&self, task: T) -> Result<Option<T::Output>, Error> {
        if self.local.remote()?.on_own_worker() {
            return Err(Error::NestedRun);
        }
        let report = crate::runtime::stats_from_env()?;
        let node = self.node_started()?;
        let before = self.local.stats();
        let result = node.run(task);
        if report {
            eprintln!("[{}] {}", node.me.name(), self.local.stats().since(&before));
        }
        result
    }

    /// The distributed layer, set up on first use.
    fn node_started(&self) -> Result<Arc<Node>, Error> {
        let mut net = self.net.lock();
        if let Some(n) = net.as_ref() {
            return Ok(Arc::clone(&n.node));
        }
        let remote = self.local.remote()?;
        let started = Node::start(&self.ibis, remote, self.steal)?;
        let _ = self.master.set(started.node.master.clone());
        let processes = self.ibis.config().driver != ipl::Driver::Inproc;
        if self.leave_on_sigterm.unwrap_or(processes) {
            on_sigterm(&started.node)?;
        }
        let node = Arc::clone(&started.node);
        *net = Some(Net {
            node: started.node,
            stop: Some(started.stop),
            watcher: Some(started.watcher),
        });
        Ok(node)
    }

    /// Makes this node leave the pool: it stops asking for work and hands back jobs that
    /// reach it from now on, finishes the jobs it runs for others (which other nodes may
    /// steal parts of meanwhile) and sends their results home, so that nothing is computed
    /// again; then the run in progress returns `Ok(None)` on this node and the node leaves the
    /// pool. Its last message tells every member it sent anything that its results are all
    /// sent: a member takes it for gone only once that has come (or 2 s after the pool
    /// reported the leave), so a result still on its way is never taken for lost; a member it
    /// never sent anything learns of the leave from the pool. Between runs it waits for
    /// nobody that cannot be reached (a member leaving or closing its runtime at the same
    /// time). Callable from any thread, during
    /// a run or between runs. Past 60 s (or `SATIN_LEAVE_PATIENCE`) it leaves with its jobs
    /// unfinished, which their owners then run again. The master cannot leave: for it this
    /// returns an error.
    pub fn leave(&self) -> Result<(), Error> {
        self.node_started()?.leave()
    }

    /// True once this node has left the pool (see [`leave`](PoolRuntime::leave)).
    pub fn has_left(&self) -> bool {
        self.net
            .lock()
            .as_ref()
            .is_some_and(|n| n.node.left.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Everything this node's workers and its distributed layer have done so far.
    pub fn stats(&self) -> Stats {
        self.local.stats()
    }
}

/// Nodes of this process that leave the pool on SIGTERM.
fn leavers() -> &'static StdMutex<Vec<Weak<Node>>> {
    static LEAVERS: OnceLock<StdMutex<Vec<Weak<Node>>>> = OnceLock::new();
    LEAVERS.get_or_init(Default::default)
}

/// Makes SIGTERM ask `node` to leave; starts, once per process, the thread that turns the
/// signal into leaves. A process whose nodes cannot leave (none left running, or a master
/// among them) ends as SIGTERM would have ended it.
fn on_sigterm(node: &Arc<Node>) -> Result<(), Error> {
    static WATCHING: OnceLock<Result<(), String>> = OnceLock::new();
    leavers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(node));
    WATCHING
        .get_or_init(|| {
            use signal_hook::consts::SIGTERM;
            let mut signals = signal_hook::iterator::Signals::new([SIGTERM])
                .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
            std::thread::Builder::new()
                .name("satin-sigterm".into())
                .spawn(move || {
                    for _ in signals.forever() {
                        let nodes: Vec<Arc<Node>> = leavers()
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .filter_map(Weak::upgrade)
                            .filter(|n| !n.left.load(std::sync::atomic::Ordering::Acquire))
                            .collect();
                        if nodes.is_empty() || nodes.iter().any(|n| n.is_master()) {
                            let _ = signal_hook::low_level::emulate_default_handler(SIGTERM);
                        }
                        for n in nodes {
                            if let Err(e) = n.leave() {
                                tracing::warn!("SIGTERM: {e}");
                            }
                        }
                    }
                })
                .map_err(|e| format!("cannot start the SIGTERM watcher: {e}"))?;
            Ok(())
        })
        .clone()
        .map_err(Error::Config)
}
