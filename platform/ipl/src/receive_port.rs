//! Receive ports: explicit receipt (`receive`, `receive_timeout`, `poll`) or upcalls.
//!
//! The receiving thread reads its connections itself: it first spins for a short while doing
//! non-blocking reads (a reply usually arrives within microseconds), then parks on the port's
//! own poller until data, a new connection or a deadline wakes it. A message holds the port until
//! it is finished, which gives one-message-at-a-time delivery and, for upcall ports, at most one
//! upcall running at a time, in order per connection.

use crate::error::{Error, Result};
use crate::message::ReadMessage;
use crate::node::NodeId;
use crate::pool::Pool;
use crate::port_type::{PortType, Receive};
use crate::transport::conn::{Fill, InConn, PortWaker, WAIT_SLICE};
use crate::wire::{ConnectReply, ConnectRequest, FrameKind, Header, HEADER_LEN};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Decides whether a sender may connect: `Err(reason)` refuses it.
pub type ConnectUpcall = Box<dyn Fn(&NodeId) -> std::result::Result<(), String> + Send + Sync>;
/// Told when a sender disconnects; the error is `Some` when the connection was lost rather than
/// closed.
pub type DisconnectUpcall = Box<dyn Fn(&NodeId, Option<&Error>) + Send + Sync>;
/// Handles one message of an upcall port.
pub type MessageUpcall = Box<dyn FnMut(ReadMessage) -> Result<()> + Send>;

/// The receive ports of one node, by name.
pub(crate) type PortTable = Mutex<HashMap<String, Arc<PortShared>>>;

/// The part of a port only the receiving thread touches.
pub(crate) struct PortRx {
    pub(crate) conns: Vec<InConn>,
    fds: Vec<libc::pollfd>,
    rr: usize,
    pool: Pool,
}

impl PortRx {
    /// A connection together with a check the read path polls while it waits, so that a dead
    /// sender ends the wait.
    pub(crate) fn conn_and_liveness(
        &mut self,
        conn: usize,
    ) -> (&mut InConn, impl Fn() -> bool + '_) {
        let PortRx { conns, pool, .. } = self;
        let c = &mut conns[conn];
        let rank = c.origin.rank();
        (c, move || pool.inner.is_gone_rank(rank))
    }
}

pub(crate) struct PortShared {
    pub(crate) name: String,
    pub(crate) ty: PortType,
    owner: NodeId,
    rx: Arc<Mutex<PortRx>>,
    pending: Mutex<Vec<InConn>>,
    pub(crate) waker: Arc<PortWaker>,
    closed: AtomicBool,
    senders: Mutex<Vec<(NodeId, u64)>>,
    on_connect: Option<ConnectUpcall>,
    on_disconnect: Option<DisconnectUpcall>,
    spin: Duration,
    stall: Duration,
    max_message: u64,
}

enum Ready {
    Message(usize, Header),
    Nothing { wake_at_ns: Option<u64> },
}

impl PortShared {
    /// Decides on a connection request (type, connection pattern, connection upcall).
    pub(crate) fn admit(&self, req: &ConnectRequest) -> ConnectReply {
        if self.closed.load(Ordering::SeqCst) {
            return ConnectReply::NoSuchPort;
        }
        if req.port_type != self.ty {
            return ConnectReply::TypeMismatch(self.ty);
        }
        let mut senders = self.senders.lock();
        if !self.ty.connection.many_senders() && !senders.is_empty() {
            return ConnectReply::Refused(format!(
                "port type {} allows one sender and {} is connected",
                self.ty, senders[0].0
            ));
        }
        if let Some(up) = &self.on_connect {
            if let Err(why) = up(&req.from) {
                return ConnectReply::Refused(why);
            }
        }
        senders.push((req.from.clone(), req.send_port));
        ConnectReply::Accepted
    }

    /// Hands an accepted connection to the receiving side.
    pub(crate) fn attach(&self, conn: InConn) {
        self.pending.lock().push(conn);
        self.waker.force();
    }

    fn adopt(&self, rx: &mut PortRx) {
        let mut p = self.pending.lock();
        if !p.is_empty() {
            rx.conns.append(&mut p);
        }
    }

    fn drop_conn(&self, rx: &mut PortRx, i: usize, why: Option<Error>) {
        let c = rx.conns.swap_remove(i);
        c.shutdown();
        self.senders
            .lock()
            .retain(|(n, id)| !(n == &c.origin && *id == c.send_port));
        match &why {
            Some(e) => {
                tracing::warn!(port = %self.name, "dropping connection from {}: {e}", c.origin)
            }
            None => tracing::debug!(port = %self.name, "{} disconnected", c.origin),
        }
        if let Some(up) = &self.on_disconnect {
            up(&c.origin, why.as_ref());
        }
    }

    /// Finds a connection with a deliverable message header, removing closed and corrupt ones.
    fn find_ready(&self, rx: &mut PortRx) -> Ready {
        let mut wake_at_ns = None;
        let mut now_ns = 0;
        let mut k = 0;
        while k < rx.conns.len() {
            let i = (rx.rr + k) % rx.conns.len();
            let c = &rx.conns[i];
            if c.buffered().len() >= HEADER_LEN {
                match Header::decode(c.buffered(), self.max_message) {
                    Err(why) => {
                        let origin = c.origin.to_string();
                        self.drop_conn(
                            rx,
                            i,
                            Some(Error::Decode {
                                origin,
                                reason: format!("bytes that do not decode: {why}"),
                            }),
                        );
                        continue;
                    }
                    Ok(h) if h.kind == FrameKind::Close => {
                        self.drop_conn(rx, i, None);
                        continue;
                    }
                    Ok(h) => {
                        if h.deliver_at_ns != 0 {
                            if now_ns == 0 {
                                now_ns = crate::wire::now_ns();
                            }
                            if h.deliver_at_ns > now_ns {
                                wake_at_ns = Some(
                                    wake_at_ns
                                        .map_or(h.deliver_at_ns, |w: u64| w.min(h.deliver_at_ns)),
                                );
                                k += 1;
                                continue;
                            }
                        }
                        rx.rr = i + 1;
                        return Ready::Message(i, h);
                    }
                }
            } else if c.eof {
                let why = (!c.buffered().is_empty()).then(|| Error::ConnectionLost {
                    peer: c.origin.to_string(),
                    reason: "stream ended inside a frame header".into(),
                });
                let why = why.or_else(|| {
                    Some(Error::ConnectionLost {
                        peer: c.origin.to_string(),
                        reason: "connection closed without a disconnect".into(),
                    })
                });
                self.drop_conn(rx, i, why);
                continue;
            }
            k += 1;
        }
        Ready::Nothing { wake_at_ns }
    }

    /// Reads whatever is available on every connection; true when anything changed.
    fn fill_all(&self, rx: &mut PortRx) -> bool {
        let mut progressed = false;
        let mut i = 0;
        while i < rx.conns.len() {
            let was_eof = rx.conns[i].eof;
            match rx.conns[i].fill() {
                Ok(Fill::Got(_)) => progressed = true,
                Ok(Fill::Eof) => progressed |= !was_eof,
                Ok(Fill::Empty) | Ok(Fill::Full) => {}
                Err(e) => {
                    let peer = rx.conns[i].origin.to_string();
                    self.drop_conn(
                        rx,
                        i,
                        Some(Error::ConnectionLost {
                            peer,
                            reason: e.to_string(),
                        }),
                    );
                    progressed = true;
                    continue;
                }
            }
            i += 1;
        }
        progressed
    }

    /// The next message, or `None` once `deadline` has passed without one.
    pub(crate) fn receive_until(
        self: &Arc<Self>,
        deadline: Option<Instant>,
    ) -> Result<Option<ReadMessage>> {
        let mut rx = match deadline {
            None => self.rx.lock_arc(),
            Some(d) => match self.rx.try_lock_arc_until(d) {
                Some(rx) => rx,
                None => return Ok(None),
            },
        };
        let spin_until = Instant::now() + self.spin;
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(Error::Closed(format!("receive port '{}'", self.name)));
            }
            if let Some(why) = rx.pool.inner.cut_off() {
                return Err(Error::Registry(why));
            }
            self.adopt(&mut rx);
            let wake_at_ns = match self.find_ready(&mut rx) {
                Ready::Message(i, h) => {
                    let c = &mut rx.conns[i];
                    c.consume(HEADER_LEN);
                    c.small_reads = h.len >= crate::transport::conn::LARGE_MESSAGE;
                    return Ok(Some(ReadMessage::from_port(
                        rx,
                        i,
                        h.len,
                        h.big_endian,
                        self.stall,
                    )));
                }
                Ready::Nothing { wake_at_ns } => wake_at_ns,
            };
            if self.fill_all(&mut rx) {
                continue;
            }
            let now = Instant::now();
            if let Some(d) = deadline {
                if now >= d {
                    return Ok(None);
                }
            }
            if now < spin_until {
                // Yield while spinning: when the sender shares this core (oversubscribed, or
                // placed together by the scheduler) it runs at once, instead of both threads
                // taking turns spinning out their whole budget. Measured: spinning without
                // yielding for even 20 us before this made loaded round trips 4x slower.
                std::thread::yield_now();
                continue;
            }
            self.waker.set_parked(true);
            self.adopt(&mut rx);
            if self.fill_all(&mut rx) || !self.pending.lock().is_empty() {
                self.waker.set_parked(false);
                continue;
            }
            let mut wait = WAIT_SLICE;
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            if let Some(w) = wake_at_ns {
                wait = wait.min(Duration::from_nanos(
                    w.saturating_sub(crate::wire::now_ns()),
                ));
            }
            // Level-triggered poll(2) over the sockets and the waker: unlike an epoll set, it
            // adds no work to every arriving packet while the receiver is spinning instead.
            let PortRx { conns, fds, .. } = &mut *rx;
            fds.clear();
            fds.push(libc::pollfd {
                fd: self.waker.raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            fds.extend(
                conns
                    .iter()
                    .filter_map(|c| c.stream.raw_fd())
                    .map(|fd| libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    }),
            );
            let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: `fds` is a valid array of pollfd for the duration of the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            self.waker.set_parked(false);
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::io(format!("waiting on port '{}'", self.name), e));
                }
            }
            if fds[0].revents != 0 {
                self.waker.drain();
            }
        }
    }

    fn timeout(&self, waited: Duration) -> Error {
        Error::Timeout {
            what: format!("a message on port '{}' of {}", self.name, self.owner),
            waited,
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.waker.force();
    }
}

/// Builds a receive port with optional connection, disconnection and message upcalls.
pub struct ReceivePortBuilder<'a> {
    ibis: &'a crate::Ibis,
    ty: PortType,
    name: String,
    on_connect: Option<ConnectUpcall>,
    on_disconnect: Option<DisconnectUpcall>,
    upcall: Option<MessageUpcall>,
}

impl<'a> ReceivePortBuilder<'a> {
    pub(crate) fn new(ibis: &'a crate::Ibis, ty: &PortType, name: &str) -> Self {
        ReceivePortBuilder {
            ibis,
            ty: *ty,
            name: name.to_owned(),
            on_connect: None,
            on_disconnect: None,
            upcall: None,
        }
    }

    /// Called for each sender that connects; returning `Err(reason)` refuses the connection.
    /// Needs a port type with connection upcalls.
    pub fn on_connect(
        mut self,
        f: impl Fn(&NodeId) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.on_connect = Some(Box::new(f));
        self
    }

    /// Called when a sender disconnects (error `None`) or its connection is lost.
    /// Needs a port type with connection upcalls.
    pub fn on_disconnect(
        mut self,
        f: impl Fn(&NodeId, Option<&Error>) + Send + Sync + 'static,
    ) -> Self {
        self.on_disconnect = Some(Box::new(f));
        self
    }

    /// The message handler of an upcall port.
    pub fn upcall(mut self, f: impl FnMut(ReadMessage) -> Result<()> + Send + 'static) -> Self {
        self.upcall = Some(Box::new(f));
        self
    }

    /// Creates the port; it accepts connections from now on.
    pub fn create(self) -> Result<ReceivePort> {
        let ty_str = self.ty.to_string();
        if (self.on_connect.is_some() || self.on_disconnect.is_some())
            && !self.ty.connection_upcalls
        {
            return Err(Error::NotAllowed {
                port_type: ty_str,
                what: "connection upcalls need a port type with connection_upcalls(true)".into(),
            });
        }
        match (self.ty.receive, self.upcall.is_some()) {
            (Receive::Upcall, false) => {
                return Err(Error::NotAllowed {
                    port_type: ty_str,
                    what: "an upcall port needs a message handler".into(),
                })
            }
            (Receive::Explicit, true) => {
                return Err(Error::NotAllowed {
                    port_type: ty_str,
                    what: "a message handler needs a port type with Receive::Upcall".into(),
                })
            }
            _ => {}
        }
        if self.name.is_empty() || self.name.len() > 1024 {
            return Err(Error::config("port name", "must be 1 to 1024 bytes"));
        }
        let inner = &self.ibis.inner;
        let waker = Arc::new(PortWaker::new().map_err(|e| Error::io("create waker", e))?);
        let cfg = &inner.cfg;
        let shared = Arc::new(PortShared {
            name: self.name.clone(),
            ty: self.ty,
            owner: inner.id.clone(),
            rx: Arc::new(Mutex::new(PortRx {
                conns: Vec::new(),
                fds: Vec::new(),
                rr: 0,
                pool: inner.pool.clone(),
            })),
            pending: Mutex::new(Vec::new()),
            waker,
            closed: AtomicBool::new(false),
            senders: Mutex::new(Vec::new()),
            on_connect: self.on_connect,
            on_disconnect: self.on_disconnect,
            spin: cfg.spin,
            stall: cfg.connect_timeout.max(cfg.death_timeout * 2),
            max_message: cfg.max_message,
        });
        {
            let mut table = inner.ports.lock();
            if table.contains_key(&self.name) {
                return Err(Error::DuplicatePort(self.name));
            }
            table.insert(self.name.clone(), shared.clone());
        }
        let dispatcher = match self.upcall {
            None => None,
            Some(mut handler) => {
                let s = shared.clone();
                let t = std::thread::Builder::new()
                    .name(format!("ipl-upcall-{}", self.name))
                    .spawn(move || loop {
                        match s.receive_until(None) {
                            Ok(None) => {}
                            Ok(Some(m)) => {
                                if let Err(e) = handler(m) {
                                    tracing::warn!(port = %s.name, "message upcall failed: {e}");
                                }
                            }
                            Err(Error::Closed(_)) => break,
                            Err(e @ Error::Registry(_)) => {
                                tracing::warn!(port = %s.name, "no more upcalls: {e}");
                                break;
                            }
                            Err(e) => tracing::warn!(port = %s.name, "receive failed: {e}"),
                        }
                    })
                    .map_err(|e| Error::io("spawn upcall thread", e))?;
                Some(t)
            }
        };
        Ok(ReceivePort {
            shared,
            dispatcher,
            table: inner.ports.clone(),
        })
    }
}

/// The receiving end of connections; created by `Ibis::receive_port` and friends. Dropping it
/// closes the port and every connection to it.
pub struct ReceivePort {
    shared: Arc<PortShared>,
    dispatcher: Option<JoinHandle<()>>,
    table: Arc<PortTable>,
}

impl ReceivePort {
    /// The port's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The port's type.
    pub fn port_type(&self) -> PortType {
        self.shared.ty
    }

    /// The send ports connected now, as (node, send port id).
    pub fn connected(&self) -> Vec<(NodeId, u64)> {
        self.shared.senders.lock().clone()
    }

    fn explicit(&self) -> Result<()> {
        if self.dispatcher.is_some() {
            return Err(Error::NotAllowed {
                port_type: self.shared.ty.to_string(),
                what: "explicit receive on an upcall port".into(),
            });
        }
        Ok(())
    }

    /// Waits for the next message. Returns an error only when the port is closed.
    pub fn receive(&self) -> Result<ReadMessage> {
        self.explicit()?;
        loop {
            if let Some(m) = self.shared.receive_until(None)? {
                return Ok(m);
            }
        }
    }

    /// Waits at most `d` for the next message; `Error::Timeout` when none came.
    pub fn receive_timeout(&self, d: Duration) -> Result<ReadMessage> {
        self.explicit()?;
        self.shared
            .receive_until(Some(Instant::now() + d))?
            .ok_or_else(|| self.shared.timeout(d))
    }

    /// The next message if one is available now, without waiting.
    pub fn poll(&self) -> Result<Option<ReadMessage>> {
        self.explicit()?;
        self.shared.receive_until(Some(Instant::now()))
    }

    /// Closes the port: connected senders get errors, an upcall thread finishes its current
    /// message and stops.
    pub fn close(self) {}
}

impl Drop for ReceivePort {
    fn drop(&mut self) {
        self.shared.close();
        self.table.lock().remove(&self.shared.name);
        if let Some(t) = self.dispatcher.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        if let Some(mut rx) = self.shared.rx.try_lock_for(Duration::from_secs(1)) {
            self.shared.adopt(&mut rx);
            for c in rx.conns.drain(..) {
                c.shutdown();
            }
        }
    }
}
