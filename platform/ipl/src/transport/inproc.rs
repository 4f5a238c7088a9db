//! The in-process driver: nodes are threads of one process, connections are [`Pipe`]s.

use super::pipe::Pipe;
use super::{Acceptor, Dialed, Driver};
use crate::error::{Error, Result};
use crate::node::NodeId;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

type Hub = Mutex<HashMap<(String, u32), Weak<dyn Acceptor>>>;

fn hub() -> &'static Hub {
    static H: OnceLock<Hub> = OnceLock::new();
    H.get_or_init(Default::default)
}

/// Makes a node reachable by the other nodes of its pool.
pub(crate) fn register(node: &NodeId, acceptor: &Arc<dyn Acceptor>) {
    hub().lock().insert(
        (node.pool().to_owned(), node.rank()),
        Arc::downgrade(acceptor),
    );
}

/// Removes a node from the hub.
pub(crate) fn unregister(node: &NodeId) {
    hub().lock().remove(&(node.pool().to_owned(), node.rank()));
}

/// Connects to nodes of this process.
pub(crate) struct InprocDriver;

impl Driver for InprocDriver {
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        let acceptor = hub()
            .lock()
            .get(&(peer.pool().to_owned(), peer.rank()))
            .and_then(Weak::upgrade);
        // A node that is a member but not (or no longer) in the hub is starting or leaving:
        // worth another try while it lives.
        let acceptor = acceptor.ok_or_else(|| Error::ConnectionLost {
            peer: peer.to_string(),
            reason: "the node is not serving connections".into(),
        })?;
        let admission = acceptor.admit(request);
        let sink = admission.inbox.map(|inbox| {
            let pipe = Pipe::new(inbox.waker());
            inbox.attach(Box::new(pipe.reader()));
            Box::new(pipe.writer()) as Box<dyn super::Sink>
        });
        Ok(Dialed {
            reply: admission.reply,
            sink,
            driver: "inproc",
        })
    }
}
