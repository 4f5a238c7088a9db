//! Drivers that carry port connections: TCP (with the optional wide-area filter) and in-process.

pub(crate) mod conn;
pub(crate) mod inproc;
pub(crate) mod links;
pub(crate) mod tcp;

use crate::config::Driver;
use crate::error::Result;
use crate::ibis::IbisInner;
use crate::node::NodeId;
use crate::wire::{ConnectReply, ConnectRequest};
use conn::OutStream;

/// Result of one connection attempt.
pub(crate) enum Outcome {
    Connected(OutStream, Option<links::LinkHandle>),
    Reply(ConnectReply),
}

/// Tries once to connect `req` to `node`.
pub(crate) fn connect_once(
    ibis: &IbisInner,
    node: &NodeId,
    req: &ConnectRequest,
) -> Result<Outcome> {
    match ibis.cfg.driver {
        Driver::Inproc => inproc::connect_once(node, req),
        Driver::Tcp | Driver::Wan => tcp::connect_once(&ibis.cfg, &ibis.links, node, req),
    }
}
