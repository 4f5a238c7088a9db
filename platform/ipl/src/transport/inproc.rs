//! The in-process driver: nodes are threads of one process, connections are bounded pipes.

use super::conn::{InConn, InStream, OutStream, Pipe};
use super::Outcome;
use crate::error::Result;
use crate::node::NodeId;
use crate::receive_port::PortTable;
use crate::wire::{ConnectReply, ConnectRequest};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

type Hub = Mutex<HashMap<(String, u32), Weak<PortTable>>>;

fn hub() -> &'static Hub {
    static H: OnceLock<Hub> = OnceLock::new();
    H.get_or_init(Default::default)
}

/// Makes a node's receive ports reachable by the other nodes of its pool.
pub(crate) fn register(node: &NodeId, ports: &Arc<PortTable>) {
    hub()
        .lock()
        .insert((node.pool().to_owned(), node.rank()), Arc::downgrade(ports));
}

/// Removes a node from the hub.
pub(crate) fn unregister(node: &NodeId) {
    hub().lock().remove(&(node.pool().to_owned(), node.rank()));
}

pub(crate) fn connect_once(node: &NodeId, req: &ConnectRequest) -> Result<Outcome> {
    let table = hub()
        .lock()
        .get(&(node.pool().to_owned(), node.rank()))
        .and_then(Weak::upgrade);
    let Some(port) = table.and_then(|t| t.lock().get(&req.port).cloned()) else {
        return Ok(Outcome::Reply(ConnectReply::NoSuchPort));
    };
    match port.admit(req) {
        ConnectReply::Accepted => {
            let pipe = Pipe::new(port.waker.clone());
            port.attach(InConn::new(
                InStream::Pipe(pipe.clone()),
                req.from.clone(),
                req.send_port,
                &[],
            ));
            Ok(Outcome::Connected(OutStream::Pipe(pipe), None))
        }
        other => Ok(Outcome::Reply(other)),
    }
}
