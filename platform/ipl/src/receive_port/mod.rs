//! Receive ports: explicit receipt (`receive`, `receive_timeout`, `poll`) or upcalls.
//!
//! The receiving thread reads its connections itself: it first spins for a short while doing
//! non-blocking reads (a reply usually arrives within microseconds), then parks on the port's
//! own poller until data, a new connection or a deadline wakes it. A message holds the port until
//! it is finished, which gives one-message-at-a-time delivery and, for upcall ports, at most one
//! upcall running at a time, in order per connection.

use crate::connect::{ConnectReply, ConnectRequest};
use crate::error::{panic_text, Error, Result};
use crate::message::ReadMessage;
use crate::node::NodeId;
use crate::port_type::{PortType, Receive};
use crate::quick_lock::QuickMutex;
use crate::transport::reader::Fill;
use crate::transport::{poll, Acceptor, Admission, Inbox, Stream, Waker, WAIT_SLICE};
use crate::wire::{FrameKind, Header, HEADER_LEN};
use inbound::{this_thread, SHUT_ON_RELEASE};
use inbound::{InConn, PortRx, RxGuard};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

pub(crate) mod inbound;

/// The receive ports of one node, by name.
pub(crate) type PortTable = Mutex<HashMap<String, Arc<PortShared>>>;

/// The longest name of a receive port, in bytes; a name is 1 to this many bytes.
pub const MAX_PORT_NAME: usize = 1024;

/// Refuses a name no receive port can have, for creating a port and connecting to one alike.
pub(crate) fn check_port_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_PORT_NAME {
        return Err(Error::config(
            "port name",
            format!(
                "a name of {} bytes; receive port names are 1 to {MAX_PORT_NAME} bytes",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// Messages at least this large switch their connection to small header reads.
const LARGE_MESSAGE: u64 = 32 * 1024;
/// How long a receiver checks its connections without giving up the processor, before it
/// spins yielding: a message in flight between two running processes arrives within a
/// microsecond, and a system call per check would add as much. Longer, the spin keeps other
/// threads of the process from the processor while nothing is in flight: bsp's receiving
/// thread spins while its program thread copies a large part to send. A 64 KiB `all_to_all`
/// between 2 processes on 2 cores took 1.2 to 1.7 times as long with 20 us as with 5 us (11
/// alternating runs of the `collective_cost` example), and 0.917 times as long with 1 us
/// (`results/collective-cost-hot-spin-20261124-1028`); round trips and supersteps did not
/// move (`shm-round-trip-hot-spin-*`, `bsp-superstep-hot-spin-*`).
const HOT_SPIN: Duration = Duration::from_micros(1);

/// Looks at the connections between two looks at the clock while spinning hot; a poll makes
/// this many before it gives up.
const HOT_LOOKS: u32 = 32;

/// [`HOT_LOOKS`] where processes outnumber processors (see `Pool::crowded`). There the
/// process a receiver waits for often shares its processor, and spinning only delays the
/// moment it yields to that process; when the sender runs on the other processor, a few looks
/// still catch its message without a switch. The empty superstep of 4 processes on 2 cores,
/// bound three to one core and one to the other: 9.8 us with 32 looks, 6.7 with 4, 6.5 with
/// 1; bound two to each core: 4.2, 3.6 and 4.5 (`scripts/compare-crowded` measures both
/// layouts).
const CROWDED_LOOKS: u32 = 4;

/// How long [`PortShared::receive_until`] waits for a message.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Until one comes.
    Forever,
    /// At most this long from the first look that finds nothing (the looks of a call take
    /// about a microsecond); a duration the clock cannot count waits forever.
    For(Duration),
    /// Not at all: the connections are looked at for a few turns, without a clock.
    Poll,
}

pub(crate) struct PortShared {
    pub(crate) name: String,
    pub(crate) ty: PortType,
    owner: NodeId,
    rx: Arc<QuickMutex<PortRx>>,
    /// The thread that holds `rx`, or 0 (see [`RxGuard`]); the same record as `PortRx`'s,
    /// which the holder reaches without another pointer to the port.
    holder: Arc<AtomicU64>,
    pending: Mutex<Vec<InConn>>,
    /// Whether `pending` may hold connections (so the receive loop locks it only then).
    has_pending: AtomicBool,
    pub(crate) waker: Arc<Waker>,
    closed: AtomicBool,
    senders: Mutex<Vec<(NodeId, u64)>>,
    on_connect: Option<ConnectUpcall>,
    on_disconnect: Option<DisconnectUpcall>,
    spin: Duration,
    stall: Duration,
    max_message: u64,
    /// Large parts sent over shared memory may be read from the sender's memory (see
    /// [`ReceivePortBuilder::single_copy`]).
    single_copy: bool,
}

enum Ready {
    Message(usize, Header),
    Nothing,
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
        let taken = |senders: &[(NodeId, u64)]| {
            (!self.ty.connection.many_senders() && !senders.is_empty()).then(|| {
                ConnectReply::Refused(format!(
                    "port type {} allows one sender and {} is connected",
                    self.ty, senders[0].0
                ))
            })
        };
        if let Some(refused) = taken(&self.senders.lock()) {
            return refused;
        }
        if let Some(up) = &self.on_connect {
            // Called without the lock on the senders: the upcall may ask the port who is
            // connected.
            // The upcall runs on the driver's listener thread (tcp, shm) or on the connecting
            // peer's thread (inproc): a panic must not end the one or reach the other.
            match catch_unwind(AssertUnwindSafe(|| up(&req.from))) {
                Ok(Ok(())) => {}
                Ok(Err(why)) => return ConnectReply::Refused(why),
                Err(payload) => {
                    let why = format!(
                        "the connection upcall of port '{}' panicked: {}",
                        self.name,
                        panic_text(payload)
                    );
                    tracing::warn!(port = %self.name, from = %req.from, "{why}");
                    return ConnectReply::Refused(why);
                }
            }
        }
        let mut senders = self.senders.lock();
        // Another sender may have been admitted while the upcall ran.
        if let Some(refused) = taken(&senders) {
            return refused;
        }
        senders.push((req.from.clone(), req.send_port));
        ConnectReply::Accepted {
            max_message: self.max_message,
        }
    }

    /// Forgets a sender admitted whose connection never came.
    pub(crate) fn forget_sender(&self, node: &NodeId, send_port: u64) {
        self.senders
            .lock()
            .retain(|(n, id)| !(n == node && *id == send_port));
    }

    /// Hands an accepted connection to the receiving side.
    pub(crate) fn attach(&self, conn: InConn) {
        self.pending.lock().push(conn);
        self.has_pending.store(true, Ordering::Release);
        self.waker.force();
    }

    /// Takes on the connections accepted since the last look. Inline: a receiver that spins
    /// asks at every look, and almost always finds none.
    #[inline]
    fn adopt(&self, rx: &mut PortRx) {
        if self.has_pending.load(Ordering::Acquire) {
            self.adopt_pending(rx);
        }
    }

    #[cold]
    #[inline(never)]
    fn adopt_pending(&self, rx: &mut PortRx) {
        let mut p = self.pending.lock();
        self.has_pending.store(false, Ordering::Relaxed);
        rx.conns.append(&mut p);
    }

    fn drop_conn(&self, rx: &mut PortRx, i: usize, why: Option<Error>) {
        let mut c = rx.conns.swap_remove(i);
        c.reader.shutdown();
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
            // Runs inside a receive, or on the upcall thread, which a panic would end.
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| up(&c.origin, why.as_ref()))) {
                tracing::warn!(
                    port = %self.name,
                    "the disconnection upcall for {} panicked: {}",
                    c.origin,
                    panic_text(payload)
                );
            }
        }
    }

    /// Finds a connection with a message header, removing closed and corrupt ones.
    fn find_ready(&self, rx: &mut PortRx) -> Ready {
        let mut k = 0;
        while k < rx.conns.len() {
            // Round robin from `rr` (which dropped connections may have left past the end),
            // without a division on every look.
            if rx.rr >= rx.conns.len() {
                rx.rr = 0;
            }
            let mut i = rx.rr + k;
            if i >= rx.conns.len() {
                i -= rx.conns.len();
            }
            let c = &rx.conns[i].reader;
            if c.buffered().len() >= HEADER_LEN {
                match Header::decode(c.buffered(), self.max_message) {
                    Err(why) => {
                        let origin = rx.conns[i].origin.to_string();
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
                        rx.rr = i + 1;
                        return Ready::Message(i, h);
                    }
                }
            } else if c.eof {
                let peer = rx.conns[i].origin.to_string();
                let reason = if c.buffered().is_empty() {
                    "connection closed without a disconnect"
                } else {
                    "stream ended inside a frame header"
                };
                self.drop_conn(
                    rx,
                    i,
                    Some(Error::ConnectionLost {
                        peer,
                        reason: reason.into(),
                    }),
                );
                continue;
            }
            k += 1;
        }
        Ready::Nothing
    }

    /// Reads whatever is available on every connection; true when anything changed.
    fn fill_all(&self, rx: &mut PortRx) -> bool {
        let mut progressed = false;
        let mut i = 0;
        while i < rx.conns.len() {
            let was_eof = rx.conns[i].reader.eof;
            match rx.conns[i].reader.fill() {
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

    /// The next message, or `None` once the wait is over without one.
    pub(crate) fn receive_until(self: &Arc<Self>, wait: Wait) -> Result<Option<ReadMessage>> {
        // A timed wait starts its clock only if the message is not there at once: a clock
        // read costs as much as a look at every connection.
        let mut deadline: Option<Instant> = None;
        let rx = match self.rx.try_lock_arc() {
            Some(rx) => rx,
            // Only a receive that finds the port taken asks by whom: the receive that gets it
            // at once pays for the record's two stores alone.
            None if self.holder.load(Ordering::Relaxed) & !SHUT_ON_RELEASE == this_thread() => {
                return Err(Error::HeldByCaller {
                    port: self.name.clone(),
                    node: self.owner.to_string(),
                })
            }
            None => match wait {
                Wait::Forever => self.rx.lock_arc(),
                Wait::Poll => return Ok(None),
                Wait::For(d) => {
                    deadline = Instant::now().checked_add(d);
                    match deadline {
                        Some(until) => match self.rx.try_lock_arc_until(until) {
                            Some(rx) => rx,
                            None => return Ok(None),
                        },
                        // Beyond what the clock can count: no end.
                        None => self.rx.lock_arc(),
                    }
                }
            },
        };
        let mut rx = RxGuard::new(rx);
        // When spinning ends, and when it starts yielding: found when first needed, as a
        // message that is there at once needs no clock.
        let mut phases: Option<(Instant, Instant)> = None;
        let mut hot = true;
        let looks = if rx.pool.inner.crowded() {
            CROWDED_LOOKS
        } else {
            HOT_LOOKS
        };
        let mut turns = 0u32;
        loop {
            if self.closed.load(Ordering::Relaxed) {
                return Err(Error::Closed(format!("receive port '{}'", self.name)));
            }
            if let Some(why) = rx.pool.inner.cut_off() {
                return Err(Error::Registry(why));
            }
            self.adopt(&mut rx);
            if let Ready::Message(i, h) = self.find_ready(&mut rx) {
                let c = &mut rx.conns[i].reader;
                c.consume(HEADER_LEN);
                c.small_reads = h.len >= LARGE_MESSAGE;
                return Ok(Some(ReadMessage::from_port(
                    rx,
                    i,
                    h.len,
                    h.big_endian,
                    self.stall,
                )));
            }
            if self.fill_all(&mut rx) {
                continue;
            }
            // While hot, look at the clock only now and then: reading it costs as much as a
            // look at every connection.
            turns += 1;
            if hot && turns < looks {
                // One pause per look: fewer leave the sender's stores fighting for the line
                // this loop reads; more (measured on a virtual machine) get the spinning
                // processor taken away.
                std::hint::spin_loop();
                continue;
            }
            turns = 0;
            if let Wait::Poll = wait {
                return Ok(None);
            }
            let now = Instant::now();
            if let (Wait::For(d), None) = (wait, deadline) {
                // None again when `d` is beyond what the clock can count: then no end.
                deadline = now.checked_add(d);
            }
            if let Some(d) = deadline {
                if now >= d {
                    return Ok(None);
                }
            }
            let (spin_until, hot_until) = *phases.get_or_insert_with(|| {
                let hot = if rx.pool.inner.crowded() {
                    Duration::ZERO
                } else {
                    HOT_SPIN.min(self.spin)
                };
                (now + self.spin, now + hot)
            });
            if now < hot_until {
                continue;
            }
            hot = false;
            if now < spin_until {
                // Yield while spinning: when the sender shares this core (oversubscribed, or
                // placed together by the scheduler) it runs at once, instead of both threads
                // taking turns spinning out their whole budget. Measured: spinning without
                // yielding for even 20 us before this made loaded round trips 4x slower.
                std::thread::yield_now();
                continue;
            }
            self.park(&mut rx, deadline, now)?;
        }
    }

    /// Waits in poll(2) until a connection or the waker has something, or a deadline (the
    /// caller's, a held-back frame's, or a slice of time to re-check for failures) passes.
    fn park(&self, rx: &mut PortRx, deadline: Option<Instant>, now: Instant) -> Result<()> {
        self.waker.set_parked(true);
        self.adopt(rx);
        let mut ready = false;
        for c in &mut rx.conns {
            ready |= !c.reader.stream.prepare_park();
        }
        if ready || self.fill_all(rx) || !self.pending.lock().is_empty() {
            self.waker.set_parked(false);
            return Ok(());
        }
        let mut wait = WAIT_SLICE;
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        let mut now_ns = 0;
        for c in &rx.conns {
            if let Some(at) = c.reader.stream.ready_at_ns() {
                if now_ns == 0 {
                    now_ns = crate::wire::now_ns();
                }
                wait = wait.min(Duration::from_nanos(at.saturating_sub(now_ns)));
            }
        }
        let PortRx {
            conns, fds, spans, ..
        } = rx;
        fds.clear();
        spans.clear();
        fds.push(poll::entry(self.waker.raw_fd(), libc::POLLIN));
        for c in conns.iter() {
            let from = fds.len();
            c.reader.stream.wait_fds(fds);
            spans.push((from, fds.len()));
        }
        let r = poll::wait(fds, wait);
        self.waker.set_parked(false);
        let r = r.map_err(|e| Error::io(format!("waiting on port '{}'", self.name), e))?;
        if r > 0 {
            if fds[0].revents != 0 {
                self.waker.drain();
            }
            for (c, &(from, to)) in conns.iter_mut().zip(spans.iter()) {
                if fds[from..to].iter().any(|f| f.revents != 0) {
                    c.reader.stream.woken();
                }
            }
        }
        Ok(())
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

/// The node's receive ports, as the drivers see them.
pub(crate) struct PortsAcceptor(pub(crate) Arc<PortTable>);

impl Acceptor for PortsAcceptor {
    fn admit(&self, request: &[u8]) -> Admission {
        let reject = |r: ConnectReply| Admission {
            reply: r.encode(),
            inbox: None,
            single_copy: false,
        };
        let req: ConnectRequest = match postcard::from_bytes(request) {
            Ok(r) => r,
            Err(e) => return reject(ConnectReply::Refused(format!("bad connect request: {e}"))),
        };
        let Some(port) = self.0.lock().get(&req.port).cloned() else {
            return reject(ConnectReply::NoSuchPort);
        };
        match port.admit(&req) {
            r @ ConnectReply::Accepted { .. } => Admission {
                reply: r.encode(),
                single_copy: port.single_copy,
                inbox: Some(Box::new(PortInbox {
                    port,
                    origin: req.from,
                    send_port: req.send_port,
                    attached: false,
                })),
            },
            other => reject(other),
        }
    }
}

/// Where an admitted connection goes: its receive port.
struct PortInbox {
    port: Arc<PortShared>,
    origin: NodeId,
    send_port: u64,
    attached: bool,
}

impl Inbox for PortInbox {
    fn waker(&self) -> Arc<Waker> {
        self.port.waker.clone()
    }

    fn attach(mut self: Box<Self>, stream: Box<dyn Stream>) {
        self.attached = true;
        self.port
            .attach(InConn::new(stream, self.origin.clone(), self.send_port));
    }
}

impl Drop for PortInbox {
    /// A connection admitted but never delivered (its driver failed to set it up) is no
    /// sender of the port.
    fn drop(&mut self) {
        if !self.attached {
            self.port.forget_sender(&self.origin, self.send_port);
        }
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
    single_copy: bool,
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
            single_copy: true,
        }
    }

    /// Whether large parts of messages that reach this port over shared memory (the `shm`
    /// driver) may be read straight from the sender's memory: one copy, but the send waits
    /// until this port's reader has taken them, or for a short patience after which it copies
    /// them into a buffer instead. Without it they go through the connection's ring, copied
    /// by both sides, and the send returns once they fit. Default `true`, and never more than
    /// the node's [`Config::shm_single_copy`](crate::Config::shm_single_copy) allows.
    ///
    /// Turn it off for a port whose reader also sends while data comes: a thread that sends
    /// before it receives (as in an exchange between two nodes) cannot take an offer meanwhile,
    /// and each offer to it would cost the sender that patience. A message that one waiting
    /// thread reads may also arrive sooner through the ring, which both sides copy at once,
    /// than from the sender's memory, where the kernel's copy is slow (64 KiB in 5.4 us against
    /// 0.7 us for a plain copy on the machines of `results/copy-cost-20261124-2029`).
    pub fn single_copy(mut self, on: bool) -> Self {
        self.single_copy = on;
        self
    }

    /// Called for each sender that connects; returning `Err(reason)` refuses the connection,
    /// and so does a panic, whose message the sender's error carries. It may call the port's
    /// own methods, such as [`ReceivePort::connected`], and may run for several senders at
    /// once. Needs a port type with connection upcalls.
    pub fn on_connect(
        mut self,
        f: impl Fn(&NodeId) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.on_connect = Some(Box::new(f));
        self
    }

    /// Called when a sender disconnects (error `None`) or its connection is lost. A panic is
    /// logged and the port goes on. Needs a port type with connection upcalls. It runs inside a
    /// receive of the port, so a receive of the same port from it returns
    /// [`Error::HeldByCaller`].
    pub fn on_disconnect(
        mut self,
        f: impl Fn(&NodeId, Option<&Error>) + Send + Sync + 'static,
    ) -> Self {
        self.on_disconnect = Some(Box::new(f));
        self
    }

    /// The message handler of an upcall port. An error it returns, or a panic, is logged, and
    /// the next message is delivered.
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
        check_port_name(&self.name)?;
        let inner = &self.ibis.inner;
        let waker = Arc::new(Waker::new().map_err(|e| Error::io("create waker", e))?);
        let cfg = &inner.cfg;
        let holder = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(PortShared {
            name: self.name.clone(),
            ty: self.ty,
            owner: inner.id.clone(),
            rx: Arc::new(QuickMutex::new(PortRx::new(
                inner.pool.clone(),
                holder.clone(),
            ))),
            holder,
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            waker,
            closed: AtomicBool::new(false),
            senders: Mutex::new(Vec::new()),
            on_connect: self.on_connect,
            on_disconnect: self.on_disconnect,
            spin: cfg.spin,
            stall: cfg.connect_timeout.max(cfg.death_timeout * 2),
            max_message: cfg.max_message,
            single_copy: self.single_copy,
        });
        {
            let mut table = self.ibis.ports.lock();
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
                        match s.receive_until(Wait::Forever) {
                            Ok(None) => {}
                            Ok(Some(m)) => {
                                // A panic would end this thread, and with it the port's
                                // delivery, while senders kept sending into it: it counts
                                // as a failed upcall. The message, dropped as the panic
                                // unwinds, is finished.
                                match catch_unwind(AssertUnwindSafe(|| handler(m))) {
                                    Ok(Ok(())) => {}
                                    Ok(Err(e)) => {
                                        tracing::warn!(port = %s.name, "message upcall failed: {e}")
                                    }
                                    Err(payload) => tracing::warn!(
                                        port = %s.name,
                                        "message upcall panicked: {}",
                                        panic_text(payload)
                                    ),
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
            table: self.ibis.ports.clone(),
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

    #[inline]
    fn explicit(&self) -> Result<()> {
        if self.dispatcher.is_some() {
            return Err(Error::NotAllowed {
                port_type: self.shared.ty.to_string(),
                what: "explicit receive on an upcall port".into(),
            });
        }
        Ok(())
    }

    /// Waits for the next message.
    ///
    /// The port hands out one message at a time: while another thread holds an unfinished
    /// [`ReadMessage`] of this port, this call waits until that thread finishes or drops it,
    /// then returns the next message. When the calling thread itself holds one (or the call
    /// comes from this port's [`on_disconnect`](ReceivePortBuilder::on_disconnect) upcall,
    /// which runs inside a receive), no message could ever come, and it returns
    /// [`Error::HeldByCaller`] at once: finish or drop that message first.
    ///
    /// # Errors
    /// [`Error::Closed`] when the port is closed, [`Error::Registry`] when the node was cut off
    /// from its pool, [`Error::HeldByCaller`] as above, [`Error::NotAllowed`] on an upcall port.
    pub fn receive(&self) -> Result<ReadMessage> {
        self.explicit()?;
        loop {
            if let Some(m) = self.shared.receive_until(Wait::Forever)? {
                return Ok(m);
            }
        }
    }

    /// Waits at most `d` for the next message; [`Error::Timeout`] when none came, which
    /// includes the time spent waiting for another thread to finish the port's message it holds.
    /// When the calling thread itself holds an unfinished message of this port (or is inside its
    /// disconnection upcall) it returns [`Error::HeldByCaller`] at once instead of waiting out
    /// `d`; otherwise its errors are those of [`ReceivePort::receive`].
    pub fn receive_timeout(&self, d: Duration) -> Result<ReadMessage> {
        self.explicit()?;
        self.shared
            .receive_until(Wait::For(d))?
            .ok_or_else(|| self.shared.timeout(d))
    }

    /// The next message if one is available now, without waiting: `None` also while another
    /// thread holds an unfinished message of this port. When the calling thread itself holds
    /// one (or is inside the port's disconnection upcall) it returns [`Error::HeldByCaller`], as
    /// a loop that polls until a message comes would never end; otherwise its errors are those
    /// of [`ReceivePort::receive`].
    #[inline]
    pub fn poll(&self) -> Result<Option<ReadMessage>> {
        self.explicit()?;
        self.shared.receive_until(Wait::Poll)
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
        let me = this_thread();
        if self.shared.holder.load(Ordering::Relaxed) == me {
            // This thread holds a message of the port (or runs inside its disconnection
            // upcall): the state comes free only after this drop returns, so waiting for it
            // would wait for itself. The message stays readable, as it holds the state and
            // its connections; releasing it shuts them down. The record is the holder's to
            // write, and the holder is this thread.
            self.shared
                .holder
                .store(me | SHUT_ON_RELEASE, Ordering::Relaxed);
            let pending = std::mem::take(&mut *self.shared.pending.lock());
            for mut c in pending {
                c.reader.shutdown();
            }
            return;
        }
        if let Some(mut rx) = self.shared.rx.try_lock_for(Duration::from_secs(1)) {
            self.shared.adopt(&mut rx);
            rx.shut_down();
        }
    }
}
