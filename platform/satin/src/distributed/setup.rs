//! Joining the distributed runtime: who the members are, who the master is, the mesh, the
//! hooks into the local runtime, and the watcher thread.
//!
//! The master is the pool's lowest live rank when the runtime starts: rank 0 of a closed pool.
//! It wins the election `satin/master`, so that nodes joining later find it; a node of an open
//! pool stands in that election only if it is the lowest live rank itself, and otherwise waits
//! for a winner.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ipl::{Ibis, Mesh, NodeId, Serialization};

use super::node::{died, ipl_error, left, mesh_error, Members, Node, Patience};
use super::proto;
use super::Steal;
use crate::remote::Remote;
use crate::Error;

/// What `start` leaves to its caller to own: dropping `stop` ends the watcher.
pub(crate) struct Started {
    pub(super) node: Arc<Node>,
    pub(super) stop: Sender<()>,
    pub(super) watcher: JoinHandle<()>,
}

/// Polling interval while a node of an open pool waits for the master's election.
const ELECTION_POLL: Duration = Duration::from_millis(10);

impl Node {
    /// Joins the distributed runtime of the pool: finds the members and the master, builds
    /// this node's side of the mesh, greets the master if the pool is running already, and
    /// starts the watcher.
    pub(crate) fn start(ibis: &Ibis, remote: Remote, policy: Steal) -> Result<Started, Error> {
        let patience = Patience::from_env()?;
        let me = ibis.id();
        let pool = ibis.pool();
        // Subscribed first, so that no departure after the member list is missed.
        let events = pool.subscribe();
        let closed = pool.size().is_some();
        let mut initial = if closed {
            pool.wait_closed()
                .map_err(|e| ipl_error(&me, "waiting for the pool to fill", e))?
        } else {
            Vec::new()
        };
        // Nodes that joined the pool after it closed, or every node of an open pool.
        for n in pool.members() {
            if !initial.contains(&n) {
                initial.push(n);
            }
        }
        let master = if closed {
            closed_master(ibis, &initial)?
        } else {
            open_master(ibis)?
        };
        let mut members = Members::default();
        for n in initial.into_iter().filter(|n| pool.is_alive(n)) {
            members.add(n, &me);
        }
        members.add(master.clone(), &me);
        let node = Arc::new(Node::new(ibis, master, members, remote, policy, patience));
        tracing::debug!(node = %me, master = %node.master, ?policy, "joining the distributed runtime");

        let built = build_mesh(ibis, &node);
        let mesh = match built {
            Ok(mesh) => mesh,
            Err(e) => {
                node.mesh_failed();
                return Err(e);
            }
        };
        node.set_mesh(mesh);
        if !closed && !node.is_master() {
            let patience = ibis.config().connect_timeout;
            node.greet_master(patience)?;
        }

        // Cancel jobs given away as soon as an abort makes them unwanted, on the thread that
        // aborts: waking the watcher instead costs a scheduling delay, milliseconds on busy
        // cores, during which the thief goes on working for nothing.
        let count = Arc::clone(&node.given_count);
        let weak = Arc::downgrade(&node);
        // Jobs that this node runs after all (`run_here`) are aborted there too, unless the
        // watcher holds their list, and then at its next scan.
        node.remote.set_abort_hook(move || {
            let Some(node) = weak.upgrade() else {
                return;
            };
            if count.load(std::sync::atomic::Ordering::Acquire) > 0 {
                node.cancel_unwanted();
            }
            node.abort_unwanted_here(false);
        });
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let watched = Arc::clone(&node);
        let watcher = std::thread::Builder::new()
            .name(format!("satin-watch-{}", me.rank()))
            .spawn(move || watched.watch(events, stop_rx))
            .map_err(|e| Error::Pool {
                node: me.to_string(),
                what: "starting the watcher thread".into(),
                source: Arc::new(ipl::Error::io("spawn", e)),
            })?;
        Ok(Started {
            node,
            stop,
            watcher,
        })
    }
}

/// The master of a closed pool: its lowest rank, which must be alive. The master itself wins
/// the election, for nodes that join later.
fn closed_master(ibis: &Ibis, members: &[NodeId]) -> Result<NodeId, Error> {
    let me = ibis.id();
    let pool = ibis.pool();
    let master = members
        .iter()
        .min_by_key(|n| n.rank())
        .cloned()
        .unwrap_or_else(|| me.clone());
    if !pool.is_alive(&master) {
        return Err(if pool.dead().contains(&master) {
            died(&master)
        } else {
            left(&master)
        });
    }
    if master == me {
        let winner = pool
            .elect(proto::MASTER_ELECTION)
            .map_err(|e| ipl_error(&me, "electing the master", e))?;
        if winner != me {
            tracing::warn!(node = %me, %winner, "another node holds the master's election");
        }
    }
    Ok(master)
}

/// The master of an open pool: the winner of the election, for which this node stands only
/// while it is the lowest live rank itself.
fn open_master(ibis: &Ibis) -> Result<NodeId, Error> {
    let me = ibis.id();
    let pool = ibis.pool();
    let patience = ibis.config().join_timeout;
    let deadline = Instant::now() + patience;
    loop {
        let winner = pool
            .election(proto::MASTER_ELECTION)
            .map_err(|e| ipl_error(&me, "looking for the master", e))?;
        if let Some(w) = winner {
            return Ok(w);
        }
        let lowest = pool.members().into_iter().min_by_key(|n| n.rank());
        if lowest.as_ref().map_or(true, |l| *l == me) {
            return pool
                .elect(proto::MASTER_ELECTION)
                .map_err(|e| ipl_error(&me, "electing the master", e));
        }
        if Instant::now() >= deadline {
            return Err(Error::Pool {
                node: me.to_string(),
                what: "looking for the master".into(),
                source: Arc::new(ipl::Error::Timeout {
                    what: format!(
                        "the lowest rank of the pool ({}) to become the master",
                        lowest.map_or_else(String::new, |l| l.to_string())
                    ),
                    waited: patience,
                }),
            });
        }
        std::thread::sleep(ELECTION_POLL);
    }
}

/// This node's side of the mesh; its handlers hand every message to the node.
fn build_mesh(ibis: &Ibis, node: &Arc<Node>) -> Result<Mesh, Error> {
    let members: Vec<NodeId> = node.members.read().live.values().cloned().collect();
    let handler = |weak: Weak<Node>| {
        move |mut m: ipl::ReadMessage| -> ipl::Result<()> {
            if let Some(node) = weak.upgrade() {
                node.handle(&mut m);
            }
            Ok(())
        }
    };
    Mesh::builder(ibis, proto::MESH)
        .members(members)
        .serialization(Serialization::Data)
        .control_upcall(handler(Arc::downgrade(node)))
        .data_upcall(handler(Arc::downgrade(node)))
        .on_disconnect({
            let weak = Arc::downgrade(node);
            move |from: &NodeId, why: Option<&ipl::Error>| {
                if let Some(node) = weak.upgrade() {
                    node.connection_ended(from, why);
                }
            }
        })
        .build()
        .map_err(|e| mesh_error(&node.me, "opening the mesh's ports", e))
}
