//! The two connections between processes and waiting on them without ever hanging.
//!
//! Every process has two receive ports. The *control* port is read by the process's own thread
//! while it waits in `sync` or a collective: round messages of the barrier and collectives, and
//! small data messages, arrive there with no hand-off between threads. The *data* port is
//! drained by the port library's upcall thread into memory as messages arrive, whatever the
//! process is doing; large data messages and large collective payloads travel there, so a send
//! of any size always completes (the receiver never stops reading it) and two processes sending
//! each other large messages cannot block each other. Control messages are small and each
//! process reads its control port whenever it waits, so they never fill the transport's
//! buffers for long.
//!
//! Waits are cut into slices ([`Options::wait_slice`]); after each slice the process asks the
//! pool whether every peer is still alive, so a dead peer ends the wait with an error naming it.

use crate::core::op;
use crate::error::{Error, Result};
use crate::inbox::InPart;
use crate::number::read_vec;
use crate::options::Options;
use crate::wire::{self, Header, FLAG_NOTICE, HEADER_LEN, KIND_BULK, KIND_DATA, KIND_ROUND};
use ipl::{Connection, Ibis, NodeId, PortType, ReadMessage, Receive, ReceivePort, SendPort};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the control receive port.
pub(crate) const CONTROL_PORT: &str = "bsp/control";
/// Name of the data receive port.
pub(crate) const DATA_PORT: &str = "bsp/data";

/// How long a waiting thread spins on the data mailbox before it sleeps.
const MAIL_SPIN: Duration = Duration::from_micros(30);
/// How long a wait polls the control port (yielding between polls) before it blocks.
const POLL_PHASE: Duration = Duration::from_millis(1);

/// Identifies a round message: (operation sequence number, round, sender).
pub(crate) type Key = (u64, u32, u32);

/// A round message or bulk payload waiting to be consumed.
pub(crate) struct Msg {
    pub hdr: Header,
    buf: Vec<u8>,
    at: usize,
}

impl Msg {
    pub(crate) fn payload(&self) -> &[u8] {
        &self.buf[self.at..]
    }

    /// Whether the payload's numbers must be byte-swapped here.
    pub(crate) fn swapped(&self) -> bool {
        wire::payload_swapped(self.hdr.flags)
    }
}

#[derive(Default)]
struct StepMail {
    parts: Vec<InPart>,
    via_control: u32,
    via_data: u32,
}

/// What arrived for this process and was not consumed yet.
#[derive(Default)]
struct Mail {
    steps: HashMap<u64, StepMail>,
    bulk: HashMap<Key, Msg>,
    failure: Option<(usize, String)>,
}

struct Shared {
    mail: Mutex<Mail>,
    arrived: Condvar,
    spare: Spare,
}

enum Parsed {
    Data { superstep: u64, part: InPart },
    Round(Key, Msg),
    Bulk(Key, Msg),
}

/// Buffers of packet streams read in earlier supersteps, kept for reuse: reading a large
/// stream into memory that was used before avoids the page faults of fresh memory.
#[derive(Default)]
struct Spare(Mutex<Vec<Vec<u8>>>);

impl Spare {
    /// A buffer of exactly `n` bytes (contents unspecified; the reader overwrites them).
    fn take(&self, n: usize) -> Vec<u8> {
        let mut v = if n == 0 {
            Vec::new()
        } else {
            let mut spare = self.0.lock();
            match spare.iter().position(|b| b.capacity() >= n) {
                Some(i) => spare.swap_remove(i),
                None => spare.pop().unwrap_or_default(),
            }
        };
        if v.len() >= n {
            v.truncate(n);
        } else {
            v.resize(n, 0);
        }
        v
    }

    /// Keeps `v` for reuse, up to `keep` buffers of at most `bytes` in all.
    fn give(&self, v: Vec<u8>, keep: usize, bytes: usize) {
        if v.capacity() > 0 {
            let mut spare = self.0.lock();
            let held: usize = spare.iter().map(Vec::capacity).sum();
            if spare.len() < keep && held + v.capacity() <= bytes {
                spare.push(v);
            }
        }
    }
}

fn parse(m: &mut ReadMessage, spare: &Spare) -> std::result::Result<Parsed, String> {
    let src = m.origin().rank();
    let head = m.read_bytes().map_err(|e| e.to_string())?;
    let hdr = Header::decode(&head)?;
    let key = (hdr.epoch, hdr.round, src);
    match hdr.kind {
        KIND_DATA => {
            let codes = &head[HEADER_LEN..];
            // The packet stream's length is in the header, so that it can be read into a
            // recycled buffer instead of fresh memory.
            if hdr.aux > m.remaining() {
                return Err(format!(
                    "data message announces {} bytes of packets but has {} left",
                    hdr.aux,
                    m.remaining()
                ));
            }
            let mut packets = spare.take(hdr.aux as usize);
            m.read_bytes_into(&mut packets).map_err(|e| e.to_string())?;
            let drma = m.read_bytes().map_err(|e| e.to_string())?;
            let mut slices = VecDeque::with_capacity(codes.len());
            for &c in codes {
                slices.push_back(read_vec(c, m).map_err(|e| e.to_string())?);
            }
            let swap = wire::payload_swapped(hdr.flags);
            Ok(Parsed::Data {
                superstep: hdr.epoch,
                part: InPart::new(src as usize, hdr.round, packets, drma, slices, swap),
            })
        }
        KIND_ROUND => Ok(Parsed::Round(
            key,
            Msg {
                hdr,
                buf: head,
                at: HEADER_LEN,
            },
        )),
        KIND_BULK => {
            let payload = m.read_bytes().map_err(|e| e.to_string())?;
            Ok(Parsed::Bulk(
                key,
                Msg {
                    hdr,
                    buf: payload,
                    at: 0,
                },
            ))
        }
        k => Err(format!("unknown message kind {k}")),
    }
}

/// Runs on the port library's upcall thread for every message of the data port.
fn deliver(shared: &Shared, m: &mut ReadMessage) {
    let src = m.origin().rank() as usize;
    let parsed = parse(m, &shared.spare);
    let mut mail = shared.mail.lock();
    match parsed {
        Ok(Parsed::Data { superstep, part }) => {
            let st = mail.steps.entry(superstep).or_default();
            st.parts.push(part);
            st.via_data += 1;
        }
        Ok(Parsed::Bulk(key, msg)) => {
            mail.bulk.insert(key, msg);
        }
        Ok(Parsed::Round(..)) => {
            mail.failure
                .get_or_insert((src, "a round message on the data connection".into()));
        }
        Err(why) => {
            tracing::warn!(src, "undecodable message on the data port: {why}");
            mail.failure.get_or_insert((src, why));
        }
    }
    drop(mail);
    shared.arrived.notify_all();
}

/// Where an operation stands, for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub superstep: u64,
    pub op: &'static str,
    pub seq: u64,
}

impl Ctx {
    fn during(&self) -> String {
        format!("{} (operation #{})", self.op, self.seq)
    }
}

/// Counters of what this process sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Supersteps completed (calls of `sync`).
    pub supersteps: u64,
    /// Packets, slices, puts and gets issued (to any process, itself included).
    pub packets_sent: u64,
    /// Data messages sent to other processes: one per destination per superstep, plus the early
    /// ones forced by the memory budget.
    pub data_messages: u64,
    /// Data messages sent early because the memory budget was exceeded.
    pub early_flushes: u64,
    /// Messages of the barrier and of collectives sent (notices of bulk payloads included).
    pub round_messages: u64,
    /// Collective payloads too large for the control connection, sent on the data connection.
    pub bulk_payloads: u64,
    /// Payload bytes sent to other processes.
    pub bytes_sent: u64,
}

/// A wait in progress: when it started, and a departed peer being given its grace period.
struct Watch {
    started: Instant,
    last_check: Instant,
    gone: Option<(NodeId, bool, Instant)>,
}

impl Watch {
    fn new() -> Self {
        let now = Instant::now();
        Watch {
            started: now,
            last_check: now,
            gone: None,
        }
    }
}

/// The ports of one process and what arrived on them.
pub(crate) struct Net {
    pub ibis: Ibis,
    pub nodes: Vec<NodeId>,
    pub pid: usize,
    pub opts: Options,
    pub stats: Stats,
    control_ty: PortType,
    data_ty: PortType,
    control_rx: ReceivePort,
    _data_rx: ReceivePort,
    control_tx: Vec<Option<SendPort>>,
    data_tx: Vec<Option<SendPort>>,
    shared: Arc<Shared>,
    stash: HashMap<Key, Msg>,
    scratch: Vec<u8>,
    /// Membership events, to know which peer went first when several are gone.
    events: crossbeam_channel::Receiver<ipl::PoolEvent>,
    /// Peers gone so far, in the order the pool reported them (true: died).
    departed: Vec<(NodeId, bool)>,
}

impl Net {
    pub(crate) fn new(ibis: Ibis, opts: Options) -> Result<Net> {
        opts.validate().map_err(Error::Config)?;
        let pid = ibis.id().rank() as usize;
        let ipl_err = |what: &str, source: ipl::Error| Error::Ipl {
            pid,
            superstep: 0,
            what: what.to_string(),
            source: Box::new(source),
        };
        let events = ibis.pool().subscribe();
        let nodes = ibis
            .pool()
            .wait_closed()
            .map_err(|e| ipl_err("waiting for the pool to fill", e))?;
        for (i, n) in nodes.iter().enumerate() {
            if n.rank() as usize != i {
                return Err(Error::Config(format!(
                    "pool member {i} has rank {}; ranks must be 0..{}",
                    n.rank(),
                    nodes.len()
                )));
            }
        }
        let control_ty = PortType::builder()
            .connection(Connection::ManyToOne)
            .receive(Receive::Explicit)
            .build();
        let data_ty = PortType::builder()
            .connection(Connection::ManyToOne)
            .receive(Receive::Upcall)
            .build();
        let shared = Arc::new(Shared {
            mail: Mutex::new(Mail::default()),
            arrived: Condvar::new(),
            spare: Spare::default(),
        });
        let port_err = |e: ipl::Error| match e {
            ipl::Error::DuplicatePort(_) => Error::Config(format!(
                "pid {pid}: this node already has a Bsp (its ports exist)"
            )),
            e => ipl_err("creating the receive ports", e),
        };
        let control_rx = ibis
            .receive_port(&control_ty, CONTROL_PORT)
            .map_err(port_err)?;
        let sh = shared.clone();
        let data_rx = ibis
            .receive_port_with_upcall(&data_ty, DATA_PORT, move |mut m| {
                deliver(&sh, &mut m);
                Ok(())
            })
            .map_err(port_err)?;
        let p = nodes.len();
        Ok(Net {
            ibis,
            nodes,
            pid,
            opts,
            stats: Stats::default(),
            control_ty,
            data_ty,
            control_rx,
            _data_rx: data_rx,
            control_tx: (0..p).map(|_| None).collect(),
            data_tx: (0..p).map(|_| None).collect(),
            shared,
            stash: HashMap::new(),
            scratch: Vec::new(),
            events,
            departed: Vec::new(),
        })
    }

    /// The error for a failed port-library call, naming the peer when it is the peer that is
    /// gone.
    pub(crate) fn ipl_error(&self, ctx: &Ctx, what: String, e: ipl::Error) -> Error {
        let (n, died) = match e {
            ipl::Error::NodeDied(n) => (n, true),
            ipl::Error::NodeLeft(n) => (n, false),
            source => {
                return Error::Ipl {
                    pid: self.pid,
                    superstep: ctx.superstep,
                    what,
                    source: Box::new(source),
                }
            }
        };
        // Name the peer that went first, as `check` does: this one may only have followed it.
        let (n, died) = self.departed.first().cloned().unwrap_or((n, died));
        Error::PeerGone {
            pid: self.pid,
            superstep: ctx.superstep,
            peer: n.rank() as usize,
            node: n.to_string(),
            died,
            during: ctx.during(),
        }
    }

    /// The error for a failed connect or send to `d`. A peer on its way out may break the
    /// connection before the pool reports its departure; give the pool a few wait slices to
    /// say so, and then name the departure rather than the broken connection.
    fn peer_error(&mut self, d: usize, ctx: &Ctx, what: String, e: ipl::Error) -> Error {
        if matches!(e, ipl::Error::NodeDied(_) | ipl::Error::NodeLeft(_)) {
            return self.ipl_error(ctx, what, e);
        }
        let deadline = Instant::now() + self.opts.wait_slice * 4;
        loop {
            self.note_departures();
            if self.departed.iter().any(|(n, _)| n.rank() as usize == d) {
                // As in `check`: name the peer that went first, which `d` may only have
                // followed (it failed because of that departure and left in turn).
                let (n, died) = &self.departed[0];
                return Error::PeerGone {
                    pid: self.pid,
                    superstep: ctx.superstep,
                    peer: n.rank() as usize,
                    node: n.to_string(),
                    died: *died,
                    during: ctx.during(),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.ipl_error(ctx, what, e);
            }
            match self.events.recv_timeout(left) {
                Ok(ev) => self.note_event(ev),
                Err(_) => return self.ipl_error(ctx, what, e),
            }
        }
    }

    fn note_event(&mut self, ev: ipl::PoolEvent) {
        match ev {
            ipl::PoolEvent::Died(n) => self.departed.push((n, true)),
            ipl::PoolEvent::Left(n) => self.departed.push((n, false)),
            _ => {}
        }
    }

    /// Records the departures the pool has reported so far, in order.
    fn note_departures(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            self.note_event(ev);
        }
    }

    fn connect(&mut self, d: usize, data: bool, ctx: &Ctx) -> Result<()> {
        let slot = if data {
            &self.data_tx[d]
        } else {
            &self.control_tx[d]
        };
        if slot.is_some() {
            return Ok(());
        }
        let (ty, name) = if data {
            (self.data_ty, DATA_PORT)
        } else {
            (self.control_ty, CONTROL_PORT)
        };
        let what = || format!("connecting to pid {d}'s {name} port");
        let sp = self
            .ibis
            .send_port(&ty)
            .map_err(|e| self.ipl_error(ctx, what(), e))?;
        if let Err(e) = sp.connect(&self.nodes[d], name) {
            return Err(self.peer_error(d, ctx, what(), e));
        }
        tracing::debug!(pid = self.pid, to = d, port = name, "connected");
        if data {
            self.data_tx[d] = Some(sp);
        } else {
            self.control_tx[d] = Some(sp);
        }
        Ok(())
    }

    /// Sends a round message of an operation to `d`: on the control connection when small,
    /// otherwise as a notice there and the payload on the data connection. `hdr.flags` carries
    /// the byte order of the payload (which a forwarded payload keeps).
    pub(crate) fn send_round(
        &mut self,
        d: usize,
        mut hdr: Header,
        payload: &[u8],
        ctx: &Ctx,
    ) -> Result<()> {
        hdr.kind = KIND_ROUND;
        let small = HEADER_LEN + payload.len() <= self.opts.small_message;
        if !small {
            hdr.flags |= FLAG_NOTICE;
        }
        self.connect(d, false, ctx)?;
        self.scratch.clear();
        hdr.encode(&mut self.scratch);
        if small {
            self.scratch.extend_from_slice(payload);
        }
        let port = self.control_tx[d].as_ref().expect("connected above");
        let mut w = port.message();
        w.write_bytes(&self.scratch);
        let sent = w.finish();
        if let Err(e) = sent {
            return Err(self.peer_error(d, ctx, format!("sending to pid {d}"), e));
        }
        self.stats.round_messages += 1;
        if small {
            self.stats.bytes_sent += payload.len() as u64;
            return Ok(());
        }
        self.connect(d, true, ctx)?;
        let mut head = Vec::with_capacity(HEADER_LEN);
        Header {
            kind: KIND_BULK,
            flags: hdr.flags & !FLAG_NOTICE,
            ..hdr
        }
        .encode(&mut head);
        let port = self.data_tx[d].as_ref().expect("connected above");
        let mut w = port.message();
        w.write_bytes(&head);
        w.write_bytes(payload);
        let sent = w.finish();
        if let Err(e) = sent {
            return Err(self.peer_error(d, ctx, format!("sending to pid {d}"), e));
        }
        self.stats.bytes_sent += payload.len() as u64;
        self.stats.bulk_payloads += 1;
        Ok(())
    }

    /// Sends the combined data of one superstep (or part of it) to `d`; returns whether it went
    /// on the control connection.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_data(
        &mut self,
        d: usize,
        superstep: u64,
        part: u32,
        ob: &crate::outbox::Outbox,
        early: bool,
        ctx: &Ctx,
    ) -> Result<bool> {
        let mut head = Vec::with_capacity(HEADER_LEN + ob.slices.len());
        Header {
            kind: KIND_DATA,
            flags: wire::native_flag(),
            op: 0,
            round: part,
            epoch: superstep,
            aux: ob.packets.len() as u64,
        }
        .encode(&mut head);
        head.extend(ob.slices.iter().map(|s| s.code()));
        let bytes = ob.bytes();
        let via_control = !early && head.len() + bytes <= self.opts.small_message;
        self.connect(d, !via_control, ctx)?;
        let port = if via_control {
            self.control_tx[d].as_ref()
        } else {
            self.data_tx[d].as_ref()
        }
        .expect("connected above");
        let mut w = port.message();
        w.write_bytes(&head);
        w.write_bytes(&ob.packets);
        w.write_bytes(&ob.drma);
        for s in &ob.slices {
            s.write_to(&mut w);
        }
        let sent = w.finish();
        if let Err(e) = sent {
            return Err(self.peer_error(d, ctx, format!("sending data to pid {d}"), e));
        }
        self.stats.data_messages += 1;
        self.stats.bytes_sent += bytes as u64;
        if early {
            self.stats.early_flushes += 1;
        }
        Ok(via_control)
    }

    /// Files one message from the control port.
    fn file(&mut self, mut m: ReadMessage, ctx: &Ctx) -> Result<()> {
        let src = m.origin().rank() as usize;
        let parsed = parse(&mut m, &self.shared.spare);
        drop(m);
        match parsed {
            Ok(Parsed::Round(key, msg)) => {
                if self.stash.insert(key, msg).is_some() {
                    return Err(self.decode_error(
                        ctx,
                        src,
                        format!("round {} of operation #{} arrived twice", key.1, key.0),
                    ));
                }
            }
            Ok(Parsed::Data { superstep, part }) => {
                let mut mail = self.shared.mail.lock();
                let st = mail.steps.entry(superstep).or_default();
                st.parts.push(part);
                st.via_control += 1;
            }
            Ok(Parsed::Bulk(..)) => {
                return Err(self.decode_error(
                    ctx,
                    src,
                    "a bulk payload on the control connection".into(),
                ))
            }
            Err(why) => return Err(self.decode_error(ctx, src, why)),
        }
        Ok(())
    }

    fn decode_error(&self, ctx: &Ctx, src: usize, reason: String) -> Error {
        Error::Decode {
            pid: self.pid,
            superstep: ctx.superstep,
            src,
            reason,
        }
    }

    /// After a wait slice: fails when the data thread found bad data, the operation ran past its
    /// time limit, or a peer is gone (after its grace period).
    fn check(&mut self, w: &mut Watch, ctx: &Ctx) -> Result<()> {
        let now = Instant::now();
        w.last_check = now;
        if let Some((src, why)) = self.shared.mail.lock().failure.clone() {
            return Err(self.decode_error(ctx, src, why));
        }
        if let Some(limit) = self.opts.sync_timeout {
            if now.duration_since(w.started) > limit {
                return Err(Error::Timeout {
                    pid: self.pid,
                    superstep: ctx.superstep,
                    during: ctx.during(),
                    waited: now.duration_since(w.started),
                });
            }
        }
        let (n, died) = match self.ibis.pool().check_alive(&self.nodes) {
            Ok(()) => return Ok(()),
            Err(ipl::Error::NodeDied(n)) => (n, true),
            Err(ipl::Error::NodeLeft(n)) => (n, false),
            Err(e) => return Err(self.ipl_error(ctx, "checking the pool".into(), e)),
        };
        // Name the peer that went first: the others may only have followed it.
        self.note_departures();
        let (n, died) = self.departed.first().cloned().unwrap_or((n, died));
        match &w.gone {
            None => {
                let grace = if died {
                    self.opts.wait_slice * 2
                } else {
                    self.opts.departure_grace
                };
                tracing::debug!(pid = self.pid, peer = %n, died, "peer gone; waiting {grace:?} for what it sent");
                w.gone = Some((n, died, now + grace));
                Ok(())
            }
            Some((n, died, deadline)) if now >= *deadline => Err(Error::PeerGone {
                pid: self.pid,
                superstep: ctx.superstep,
                peer: n.rank() as usize,
                node: n.to_string(),
                died: *died,
                during: ctx.during(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Receives from the control port and files what came. For the first [`POLL_PHASE`] of a
    /// wait it polls, giving the processor away between polls (a peer that shares this core
    /// can then run and answer); after that it blocks for at most one wait slice.
    fn pump(&mut self, w: &mut Watch, ctx: &Ctx) -> Result<()> {
        if w.started.elapsed() < POLL_PHASE {
            return match self.control_rx.poll() {
                Ok(Some(m)) => self.file(m, ctx),
                Ok(None) => {
                    std::thread::yield_now();
                    Ok(())
                }
                Err(e) => Err(self.ipl_error(ctx, "receiving on the control port".into(), e)),
            };
        }
        match self.control_rx.receive_timeout(self.opts.wait_slice) {
            Ok(m) => {
                self.file(m, ctx)?;
                if w.last_check.elapsed() >= self.opts.wait_slice {
                    self.check(w, ctx)?;
                }
                Ok(())
            }
            Err(ipl::Error::Timeout { .. }) => self.check(w, ctx),
            Err(e) => Err(self.ipl_error(ctx, "receiving on the control port".into(), e)),
        }
    }

    /// Waits for round `round` of operation `seq` (an `op`) from `src`, and its bulk payload if
    /// it has one. A message of another operation with the same sequence number means the
    /// processes called different operations: an error rather than a wait that cannot end.
    pub(crate) fn recv_round(
        &mut self,
        src: usize,
        seq: u64,
        round: u32,
        op: u8,
        ctx: &Ctx,
    ) -> Result<Msg> {
        let key = (seq, round, src as u32);
        let mut w = Watch::new();
        let msg = loop {
            if let Some(m) = self.stash.remove(&key) {
                break m;
            }
            // Get replies belong to the sync whose sequence number they carry.
            let family = |o: u8| if o == op::GET_REPLY { op::SYNC } else { o };
            if let Some((k, m)) = self
                .stash
                .iter()
                .find(|(k, m)| k.0 == seq && family(m.hdr.op) != family(op))
            {
                return Err(Error::CollectiveMismatch {
                    pid: self.pid,
                    seq,
                    mine: op::name(op).to_string(),
                    peer: k.2 as usize,
                    theirs: format!("called {}", op::name(m.hdr.op)),
                });
            }
            self.pump(&mut w, ctx)?;
        };
        if msg.hdr.flags & FLAG_NOTICE == 0 {
            return Ok(msg);
        }
        let bulk = self.wait_mail(&mut w, ctx, |m| m.bulk.remove(&key))?;
        if bulk.hdr.op != msg.hdr.op {
            return Err(self.decode_error(ctx, src, "bulk payload of another operation".into()));
        }
        Ok(bulk)
    }

    /// Waits until `f` finds what it looks for in the data mailbox.
    fn wait_mail<R>(
        &mut self,
        w: &mut Watch,
        ctx: &Ctx,
        mut f: impl FnMut(&mut Mail) -> Option<R>,
    ) -> Result<R> {
        let spin_until = Instant::now() + MAIL_SPIN;
        loop {
            {
                let mut mail = self.shared.mail.lock();
                if let Some(r) = f(&mut mail) {
                    return Ok(r);
                }
                if Instant::now() >= spin_until {
                    let slice = self
                        .opts
                        .wait_slice
                        .saturating_sub(w.last_check.elapsed())
                        .max(Duration::from_millis(1));
                    self.shared.arrived.wait_for(&mut mail, slice);
                    if let Some(r) = f(&mut mail) {
                        return Ok(r);
                    }
                } else {
                    drop(mail);
                    std::hint::spin_loop();
                }
            }
            if w.last_check.elapsed() >= self.opts.wait_slice {
                self.check(w, ctx)?;
            }
        }
    }

    /// Keeps the packet buffers of a superstep that was read, for the messages of later ones
    /// (at most the memory budget's worth).
    pub(crate) fn recycle(&self, buffers: impl Iterator<Item = Vec<u8>>) {
        let keep = 2 * self.nodes.len() + 2;
        for b in buffers {
            self.shared.spare.give(b, keep, self.opts.memory_budget);
        }
    }

    /// Waits until the data of `superstep` is complete: `via_control` messages on the control
    /// connection and `via_data` on the data connection. Returns the messages.
    pub(crate) fn wait_step(
        &mut self,
        superstep: u64,
        via_control: u32,
        via_data: u32,
        ctx: &Ctx,
    ) -> Result<Vec<InPart>> {
        let mut w = Watch::new();
        loop {
            let have = {
                let mail = self.shared.mail.lock();
                mail.steps.get(&superstep).map_or(0, |s| s.via_control)
            };
            if have >= via_control {
                break;
            }
            self.pump(&mut w, ctx)?;
        }
        self.wait_mail(&mut w, ctx, |m| {
            let done = m
                .steps
                .get(&superstep)
                .map_or(via_data == 0, |s| s.via_data >= via_data);
            done.then(|| {
                m.steps
                    .remove(&superstep)
                    .map(|s| s.parts)
                    .unwrap_or_default()
            })
        })
    }
}
