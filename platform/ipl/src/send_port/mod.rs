//! Send ports: connect to receive ports and send messages to all of them.

use crate::connect::{ConnectReply, ConnectRequest};
use crate::error::{Error, Result};
use crate::message::WriteMessage;
use crate::node::NodeId;
use crate::node_state::IbisInner;
use crate::port_type::PortType;
use crate::quick_lock::QuickMutex;
use std::sync::Arc;

pub(crate) mod outbound;

use outbound::{OutConn, SendGuard, SendShared, SendState};
use std::time::{Duration, Instant};

/// The sending end of connections; created by `Ibis::send_port`.
pub struct SendPort {
    shared: Arc<SendShared>,
}

impl SendPort {
    pub(crate) fn new(ibis: Arc<IbisInner>, ty: PortType, id: u64) -> SendPort {
        SendPort {
            shared: Arc::new(SendShared {
                id,
                ty,
                ibis,
                state: QuickMutex::new(SendState {
                    conns: Vec::new(),
                    scratch: Vec::new(),
                }),
            }),
        }
    }

    /// This port's identifier, unique on its node.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The port's type.
    pub fn port_type(&self) -> PortType {
        self.shared.ty
    }

    /// Connects to the receive port `name` on `node`. A port that does not exist yet is retried
    /// until the connect timeout; type mismatches and refusals fail at once, and so does a
    /// name no receive port can have (empty, or longer than
    /// [`MAX_PORT_NAME`](crate::MAX_PORT_NAME)).
    pub fn connect(&self, node: &NodeId, name: &str) -> Result<()> {
        // Such a name would be retried until the timeout as a port not made yet, or, too long
        // for a connection's setup frame, as a connection cut short.
        crate::receive_port::check_port_name(name)?;
        let s = &self.shared;
        {
            let st = s.state.lock();
            if !s.ty.connection.multicast() && !st.conns.is_empty() {
                return Err(Error::NotAllowed {
                    port_type: s.ty.to_string(),
                    what: format!(
                        "a second connection (to '{name}' on {node}); already connected to '{}' on {}",
                        st.conns[0].port, st.conns[0].target
                    ),
                });
            }
            if st.conns.iter().any(|c| &c.target == node && c.port == name) {
                return Err(Error::NotAllowed {
                    port_type: s.ty.to_string(),
                    what: format!("connecting twice to '{name}' on {node}"),
                });
            }
        }
        let ibis = &s.ibis;
        let req = ConnectRequest {
            from: ibis.id.clone(),
            send_port: s.id,
            port: name.to_owned(),
            port_type: s.ty,
        }
        .encode();
        let timeout = ibis.cfg.connect_timeout;
        let start = Instant::now();
        let mut backoff = Duration::from_millis(2);
        let (sink, limit, driver) = loop {
            ibis.pool.check_alive(std::slice::from_ref(node))?;
            let attempt = ibis.endpoint.connect(node, &req);
            // A node that is leaving or dying breaks connections in odd ways (a handshake cut
            // short looks like a secret mismatch); name its departure instead where it is known.
            let dialed = match attempt {
                Err(e) => {
                    ibis.pool.check_alive(std::slice::from_ref(node))?;
                    // A handshake cut short by a live node (overloaded: it drops its oldest
                    // pending handshakes) is worth another try.
                    if matches!(e, Error::ConnectionLost { .. }) && start.elapsed() < timeout {
                        tracing::debug!(to = %node, port = name, "retrying: {e}");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_millis(200));
                        continue;
                    }
                    return Err(e);
                }
                Ok(d) => d,
            };
            let reply = ConnectReply::decode(&dialed.reply).map_err(|reason| Error::Decode {
                origin: node.to_string(),
                reason,
            })?;
            match (reply, dialed.sink) {
                (ConnectReply::Accepted { max_message }, Some(sink)) => {
                    break (sink, max_message, dialed.driver)
                }
                (ConnectReply::Accepted { .. }, None) => {
                    return Err(Error::Decode {
                        origin: node.to_string(),
                        reason: "an acceptance without a connection".into(),
                    })
                }
                (ConnectReply::NoSuchPort, _) => {
                    if start.elapsed() >= timeout {
                        return Err(Error::UnknownPort {
                            node: node.to_string(),
                            port: name.to_owned(),
                            waited: start.elapsed(),
                        });
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
                (ConnectReply::TypeMismatch(theirs), _) => {
                    return Err(Error::TypeMismatch {
                        node: node.to_string(),
                        port: name.to_owned(),
                        sender: s.ty.to_string(),
                        receiver: theirs.to_string(),
                    })
                }
                (ConnectReply::Refused(reason), _) => {
                    return Err(Error::Refused {
                        node: node.to_string(),
                        port: name.to_owned(),
                        reason,
                    })
                }
            }
        };
        let mut st = s.state.lock();
        if !s.ty.connection.multicast() && !st.conns.is_empty() {
            return Err(Error::NotAllowed {
                port_type: s.ty.to_string(),
                what: "a second connection made concurrently".into(),
            });
        }
        st.conns.push(OutConn {
            target: node.clone(),
            port: name.to_owned(),
            sink,
            max_message: limit,
            driver,
        });
        tracing::debug!(to = %node, port = name, "connected");
        Ok(())
    }

    /// Closes the connection to port `name` on `node`.
    pub fn disconnect(&self, node: &NodeId, name: &str) -> Result<()> {
        let mut st = self.shared.state.lock();
        match st
            .conns
            .iter()
            .position(|c| &c.target == node && c.port == name)
        {
            Some(i) => {
                st.conns.remove(i).close();
                Ok(())
            }
            None => Err(Error::NotAllowed {
                port_type: self.shared.ty.to_string(),
                what: format!("disconnecting from '{name}' on {node}, which is not connected"),
            }),
        }
    }

    /// The receive ports this port is connected to, with the driver that carries each
    /// connection (`inproc`, `tcp` or `shm`).
    pub fn connection_drivers(&self) -> Vec<(NodeId, String, &'static str)> {
        self.shared
            .state
            .lock()
            .conns
            .iter()
            .map(|c| (c.target.clone(), c.port.clone(), c.driver))
            .collect()
    }

    /// The receive ports this port is connected to, each with the bytes of messages its
    /// connection is sure to hold for a receiver that does not read before a send waits (0
    /// where that is up to the system, as with tcp's socket buffers): what a program may send
    /// to a node that is itself busy sending, without the two waiting for each other.
    pub fn unread_capacity(&self) -> Vec<(NodeId, String, u64)> {
        self.shared
            .state
            .lock()
            .conns
            .iter()
            .map(|c| (c.target.clone(), c.port.clone(), c.sink.unread_capacity()))
            .collect()
    }

    /// The receive ports this port is connected to.
    pub fn connected_to(&self) -> Vec<(NodeId, String)> {
        self.shared
            .state
            .lock()
            .conns
            .iter()
            .map(|c| (c.target.clone(), c.port.clone()))
            .collect()
    }

    /// Starts a message; the port sends nothing else until it is finished or dropped.
    #[inline]
    pub fn message(&self) -> WriteMessage<'_> {
        let s = &*self.shared;
        let mut guard = s.state.lock();
        let buf = std::mem::take(&mut guard.scratch);
        WriteMessage::for_port(
            SendGuard { guard, port: s },
            buf,
            s.ibis.cfg.byte_order.is_swapped(),
            s.ty.serialization,
        )
    }
}

impl Drop for SendPort {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        for c in st.conns.drain(..) {
            c.close();
        }
    }
}
