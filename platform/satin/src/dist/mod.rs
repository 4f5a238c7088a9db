//! Work stealing between the processes of a pool of the port library (`ipl`).
//!
//! Every node of the pool calls [`PoolRuntime::run`] with the same root task. The node that
//! wins the election `satin/master` runs the root; the others start idle. A node whose workers
//! find no local work asks other nodes for their oldest job ([`Steal`] says whom), runs what it
//! gets as a new local root and sends the output back to the job's owner, whose waiting frame
//! takes it like the output of a local child. When the root returns, the master announces the
//! end of the run and every node returns. The `proto` module describes the messages.

mod node;
mod proto;

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use ipl::{Ibis, NodeId, ReceivePort};
use parking_lot::Mutex;

use crate::worker::Worker;
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

/// A runtime whose work is spread over the nodes of an `ipl` pool; from
/// [`Runtime::in_pool`].
///
/// Every node of the (closed) pool builds one and calls [`run`](PoolRuntime::run) with the same
/// root task, as many times as it likes but the same number of times on every node. On the
/// first run the nodes elect a master (the election `satin/master`), open two ports named
/// `satin` and `satin/data` and connect to each other.
///
/// See the [crate documentation](crate#across-processes) for an example on a pool of threads.
pub struct PoolRuntime {
    // Dropped first: the distributed layer stops before the workers do.
    net: Mutex<Option<Net>>,
    master: OnceLock<NodeId>,
    local: Runtime,
    ibis: Ibis,
    steal: Steal,
}

/// The distributed layer of one node, set up by the first run.
struct Net {
    node: Arc<Node>,
    ports: Vec<ReceivePort>,
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
        // Closes the ports and waits for their upcall threads.
        self.ports.clear();
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
        }
    }
}

impl PoolRuntime {
    /// Sets the number of worker threads of this node (default: one per available core).
    pub fn threads(mut self, n: usize) -> PoolRuntime {
        self.local = self.local.threads(n);
        self
    }

    /// Sets the stack size of each worker thread of this node, in bytes.
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

    /// The master node, once the first run has elected it.
    pub fn master(&self) -> Option<NodeId> {
        self.master.get().cloned()
    }

    /// Runs `task` as the root of a task tree spread over the pool.
    ///
    /// Every node calls it with the same task. The master runs it and returns
    /// `Ok(Some(output))`; the others take part by stealing and return `Ok(None)` once the
    /// master announces the end. If a task panics anywhere, the master returns
    /// [`Error::TaskPanicked`] or [`Error::Remote`] (naming the node it happened on) and the
    /// others [`Error::RunFailed`]. If a node dies or leaves during the run, every other node
    /// returns [`Error::NodeFailed`] naming it. With `SATIN_STATS=1` each node prints its
    /// statistics of the run to stderr.
    pub fn run<T: Task>(&self, task: T) -> Result<Option<T::Output>, Error> {
        let sched = self.local.scheduler()?;
        if Worker::current().is_some_and(|w| Arc::ptr_eq(&w.sched, &sched)) {
            return Err(Error::NestedRun);
        }
        let mut net = self.net.lock();
        if net.is_none() {
            let remote = self.local.remote()?;
            let started = Node::start(&self.ibis, remote, self.steal)?;
            let _ = self
                .master
                .set(started.node.all[started.node.master].clone());
            *net = Some(Net {
                node: started.node,
                ports: started.ports,
                stop: Some(started.stop),
                watcher: Some(started.watcher),
            });
        }
        let node = Arc::clone(&net.as_ref().expect("set up above").node);
        let report = std::env::var_os("SATIN_STATS").is_some_and(|v| v == "1");
        let before = sched.stats();
        let result = node.run(task);
        if report {
            eprintln!("[{}] {}", node.me.name(), sched.stats().since(&before));
        }
        result
    }

    /// Everything this node's workers and its distributed layer have done so far.
    pub fn stats(&self) -> Stats {
        self.local.stats()
    }
}
