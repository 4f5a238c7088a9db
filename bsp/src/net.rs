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
//! Both ports and the send ports to every process are an [`ipl::Mesh`], which also keeps the
//! order in which processes departed. Waits are cut into slices ([`Options::wait_slice`]);
//! after each slice the process asks the mesh whether every peer is still alive, so a dead peer
//! ends the wait with an error naming it.

use crate::board::Board;
use crate::error::{Error, Result};
use crate::inbox::InPart;
use crate::number::read_vec;
use crate::op;
use crate::options::Options;
use crate::wire::{self, Header, FLAG_NOTICE, HEADER_LEN, KIND_BULK, KIND_DATA, KIND_ROUND};
use ipl::{Departure, Ibis, Lane, Link, Mesh, MeshError, NodeId, ReadMessage, WriteMessage};
use parking_lot::{Condvar, Mutex};
// The maps here are looked up a few times per superstep and collective round, with keys of a
// few integers from members of the pool, who proved the pool's secret: a fast hash rather
// than SipHash, whose resistance to chosen keys costs about 6% of an empty superstep.
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Name of the mesh: its ports are `bsp/control` and `bsp/data`.
pub(crate) const MESH: &str = "bsp";

/// How long a waiting thread polls the data mailbox, yielding between polls, before it
/// sleeps: what it waits for comes from the port library's receiving thread, which a
/// spinning thread would keep from running where processes share cores.
const MAIL_SPIN: Duration = Duration::from_millis(1);
/// How long a wait polls the control port (yielding between polls) before it blocks.
const POLL_PHASE: Duration = Duration::from_millis(1);
/// Round messages and superstep data up to this many bytes may travel on the control connection,
/// instead of on the data connection (a round message as a notice on the control connection and its
/// payload on the data connection): the waiting thread then reads them itself, with no hand-off
/// from the data port's receiving thread. Only where the connection is sure to hold four such
/// messages for a receiver that does not read (see [`Link::unread_capacity`]): what one process
/// sends another before it must wait for that other is two supersteps' data or two operations'
/// round messages at most, so no send can then wait for a receiver that is itself sending.
/// Shared-memory connections hold their ring (256 KiB) and, where the kernel lets the receiver read
/// the sender's memory, 4 MiB of buffers; tcp promises nothing (what a send may leave unread is up
/// to the kernel's socket buffers), so large payloads keep to the data connection there.
pub(crate) const CONTROL_MAX: usize = crate::options::MAX_SMALL_MESSAGE;
/// Messages up to this size go on the control connection without a look at what it holds:
/// every connection holds that much for a receiver that is not reading (the default
/// `small_message`). A larger `small_message` sends larger messages there only where the
/// connection holds them; otherwise two processes sending to each other could both wait.
const SURE_CONTROL: usize = 16 << 10;

/// Identifies a round message: (group, operation sequence number, round, sender's pid in the
/// whole machine).
pub(crate) type Key = (u64, u64, u32, u32);

/// A round message or bulk payload waiting to be consumed.
pub(crate) struct Msg {
    pub hdr: Header,
    /// A round message's header and payload, or a bulk payload alone.
    buf: Vec<u8>,
    /// Where the buffer goes back once the message is consumed: the spare buffers, for a bulk
    /// payload (its next one of the same size is then read without touching fresh memory);
    /// the thread's small buffers otherwise.
    home: Option<Arc<Spare>>,
}

/// Round messages' buffers kept per thread (at most [`KEPT_BUFFERS`] of at most
/// [`KEPT_CAPACITY`] bytes) for the next ones: a collective's small messages then cost no
/// allocation.
const KEPT_BUFFERS: usize = 8;
const KEPT_CAPACITY: usize = 4096;
/// The largest buffer kept per thread for a large round message (one, see
/// [`CONTROL_MAX`]):
/// a collective that moves the same large payloads again and again would otherwise take fresh
/// memory from the kernel, page by page, for every message.
const KEPT_LARGE_CAPACITY: usize = 2 * CONTROL_MAX;

thread_local! {
    static ROUND_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> =
        const { std::cell::RefCell::new(Vec::new()) };
    static LARGE_ROUND_BUFFER: std::cell::RefCell<Vec<u8>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer for a message of `len` bytes, header and round payload: a kept one, or a new one.
#[inline(always)]
fn round_buffer(len: u64) -> Vec<u8> {
    if len > KEPT_CAPACITY as u64 {
        return large_round_buffer(len);
    }
    ROUND_BUFFERS
        .try_with(|b| b.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// [`round_buffer`] for a message larger than the small buffers: the thread's large buffer,
/// with room for the whole message if it is no larger than a buffer that is kept (a longer
/// one grows as its bytes arrive, so that a length field cannot claim memory by itself).
#[cold]
#[inline(never)]
fn large_round_buffer(len: u64) -> Vec<u8> {
    let mut buf = LARGE_ROUND_BUFFER
        .try_with(|b| b.try_borrow_mut().map(|mut b| std::mem::take(&mut *b)))
        .ok()
        .and_then(std::result::Result::ok)
        .unwrap_or_default();
    if len <= KEPT_LARGE_CAPACITY as u64 {
        buf.clear();
        buf.reserve(len as usize);
    }
    buf
}

/// Keeps `buf` for a later [`round_buffer`] if it is not too large and there is room.
fn keep_round_buffer(buf: Vec<u8>) {
    if buf.capacity() == 0 {
        return;
    }
    if buf.capacity() > KEPT_CAPACITY {
        keep_large_round_buffer(buf);
        return;
    }
    // A thread that is ending has no buffers left to keep: then `buf` is freed.
    let _ = ROUND_BUFFERS.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if b.len() < KEPT_BUFFERS {
                b.push(buf);
            }
        }
    });
}

/// [`keep_round_buffer`] for a large buffer: kept in place of the thread's large buffer if it
/// has more room (and not more than [`KEPT_LARGE_CAPACITY`]).
#[cold]
#[inline(never)]
fn keep_large_round_buffer(buf: Vec<u8>) {
    if buf.capacity() > KEPT_LARGE_CAPACITY {
        return;
    }
    let _ = LARGE_ROUND_BUFFER.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            if b.capacity() < buf.capacity() {
                *b = buf;
            }
        }
    });
}

impl Drop for Msg {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        match &self.home {
            Some(spare) => spare.give(buf),
            None => keep_round_buffer(buf),
        }
    }
}

impl Msg {
    pub(crate) fn payload(&self) -> &[u8] {
        // Bulk payloads come without their header, and only they have a home.
        let at = if self.home.is_some() { 0 } else { HEADER_LEN };
        &self.buf[at..]
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
    /// By (group, superstep).
    steps: HashMap<(u64, u64), StepMail>,
    bulk: HashMap<Key, Msg>,
    failure: Option<(usize, String)>,
}

struct Shared {
    mail: Mutex<Mail>,
    arrived: Condvar,
    spare: Arc<Spare>,
}

enum Parsed {
    Data { step: (u64, u64), part: InPart },
    Round(Key, Msg),
    Bulk(Key, Msg),
}

/// Buffers of packet streams read in earlier supersteps and of bulk payloads consumed, kept for
/// reuse: reading a large stream into memory that was used before avoids the page faults of
/// fresh memory, and the zeroing that a new vector gets before it is read into.
struct Spare {
    buffers: Mutex<Vec<Vec<u8>>>,
    /// At most this many buffers are kept (set once the number of processes is known)...
    keep: AtomicUsize,
    /// ...of at most this many bytes in all.
    bytes: usize,
}

impl Spare {
    fn new(bytes: usize) -> Spare {
        Spare {
            buffers: Mutex::new(Vec::new()),
            keep: AtomicUsize::new(2),
            bytes,
        }
    }

    /// Keeps at most `keep` buffers from now on.
    fn set_keep(&self, keep: usize) {
        self.keep.store(keep, Ordering::Relaxed);
    }

    /// The buffer given back last, or an empty one: for a payload whose length is not known
    /// before it is read (`ReadMessage::read_bytes_to` fits it).
    fn take_last(&self) -> Vec<u8> {
        self.buffers.lock().pop().unwrap_or_default()
    }

    /// A buffer of exactly `n` bytes (contents unspecified; the reader overwrites them).
    fn take(&self, n: usize) -> Vec<u8> {
        let mut v = if n == 0 {
            Vec::new()
        } else {
            let mut spare = self.buffers.lock();
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

    /// Keeps `v` for reuse, within the limits of the number of buffers and of bytes.
    fn give(&self, v: Vec<u8>) {
        if v.capacity() > 0 {
            let keep = self.keep.load(Ordering::Relaxed);
            let mut spare = self.buffers.lock();
            let held: usize = spare.iter().map(Vec::capacity).sum();
            if spare.len() < keep && held + v.capacity() <= self.bytes {
                spare.push(v);
            }
        }
    }
}

/// Writes a round message: its header (kind [`KIND_ROUND`]) and the payload carried inline,
/// one byte buffer.
fn write_round(w: &mut WriteMessage<'_>, hdr: &Header, inline: &[u8]) {
    w.write_bytes_from(HEADER_LEN + inline.len(), |b| {
        b.extend_from_slice(&hdr.to_bytes());
        b.extend_from_slice(inline);
    });
}

/// Writes a bulk payload on the data connection: `head`, its header's bytes (kind
/// [`KIND_BULK`]), then the payload.
fn write_bulk<'a>(w: &mut WriteMessage<'a>, head: &'a [u8], payload: &'a [u8]) {
    w.write_bytes(head);
    w.write_bytes(payload);
}

/// Writes a data message of a superstep: the header (kind [`KIND_DATA`]) and the slices' number
/// codes in one byte buffer, then the packets, the puts and gets, and the slices.
fn write_data<'a>(w: &mut WriteMessage<'a>, hdr: &Header, ob: &'a crate::outbox::Outbox) {
    w.write_bytes_from(HEADER_LEN + ob.slices.len(), |b| {
        b.extend_from_slice(&hdr.to_bytes());
        b.extend(ob.slices.iter().map(|s| s.code()));
    });
    w.write_bytes(&ob.packets);
    w.write_bytes(&ob.drma);
    for s in &ob.slices {
        s.write_to(w);
    }
}

/// Parses message `m` of the process with rank `src`.
// The receive path (`recv_round_step`, `pump`, `file`, `parse`) is inlined into one function:
// the message it finds travels up as a value, which every call boundary would copy again.
#[inline(always)]
fn parse(m: &mut ReadMessage, src: u32, spare: &Arc<Spare>) -> std::result::Result<Parsed, String> {
    let mut head = round_buffer(m.remaining());
    m.read_bytes_to(&mut head).map_err(|e| e.to_string())?;
    let hdr = match Header::decode(&head) {
        Ok(h) => h,
        Err(e) => {
            keep_round_buffer(head);
            return Err(e);
        }
    };
    let key = (hdr.comm, hdr.epoch, hdr.round, src);
    match hdr.kind {
        KIND_DATA => {
            let data = parse_data(m, spare, &hdr, &head[HEADER_LEN..], src);
            keep_round_buffer(head);
            data
        }
        KIND_ROUND => Ok(Parsed::Round(
            key,
            Msg {
                hdr,
                buf: head,
                home: None,
            },
        )),
        KIND_BULK => {
            keep_round_buffer(head);
            let mut msg = Msg {
                hdr,
                buf: spare.take_last(),
                home: Some(spare.clone()),
            };
            m.read_bytes_to(&mut msg.buf).map_err(|e| e.to_string())?;
            Ok(Parsed::Bulk(key, msg))
        }
        k => {
            keep_round_buffer(head);
            Err(format!("unknown message kind {k}"))
        }
    }
}

/// The rest of a data message whose header is `hdr` and whose slice codes are `codes`.
fn parse_data(
    m: &mut ReadMessage,
    spare: &Spare,
    hdr: &Header,
    codes: &[u8],
    src: u32,
) -> std::result::Result<Parsed, String> {
    // The packet stream's length is in the header, so that it can be read into a recycled
    // buffer instead of fresh memory.
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
        step: (hdr.comm, hdr.epoch),
        part: InPart::new(src as usize, hdr.round, packets, drma, slices, swap),
    })
}

/// Runs on the port library's upcall thread for every message of the data port.
fn deliver(shared: &Shared, m: &mut ReadMessage) {
    let rank = m.origin().rank();
    let src = rank as usize;
    let parsed = parse(m, rank, &shared.spare);
    let mut mail = shared.mail.lock();
    match parsed {
        Ok(Parsed::Data { step, part }) => {
            let st = mail.steps.entry(step).or_default();
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
    /// The group (0: the whole machine).
    pub comm: u64,
}

impl Ctx {
    fn during(&self) -> String {
        let group = if self.comm == 0 { "" } else { " of a group" };
        format!("{}{group} (operation #{})", self.op, self.seq)
    }
}

/// What this process knows of a group it belongs to, for telling a wait that cannot end from
/// a slow peer.
struct CommInfo {
    /// The sequence number of the group's next operation that has not started here.
    next_seq: u64,
    /// Its members, as pids of the whole machine.
    members: Vec<usize>,
    /// The thread that started its last operation: its next one is taken to come from the
    /// same thread (none started yet: unknown).
    thread: Option<std::thread::ThreadId>,
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
    /// Data messages sent on the data connection (early ones, and those larger than the
    /// control connection takes); the others went on the control connection.
    pub data_on_data_connection: u64,
    /// Messages of the barrier and of collectives sent (notices of bulk payloads included).
    pub round_messages: u64,
    /// Collective payloads too large for the control connection, sent on the data connection.
    pub bulk_payloads: u64,
    /// Payload bytes sent to other processes.
    pub bytes_sent: u64,
    /// Operations of the whole machine that went through the host board (shared memory, when
    /// every process of the machine runs on this host; see the crate's documentation): syncs,
    /// and small all-reduces, all-gathers, reduce-scatters and all-to-alls. An all-to-all
    /// whose vectors did not all fit counts too: its processes agreed there to take messages.
    pub board_operations: u64,
}

/// The calling thread's id, kept per thread: `std::thread::current()` would take and drop a
/// reference to the thread's handle on every operation.
fn this_thread() -> std::thread::ThreadId {
    thread_local! {
        static ID: std::thread::ThreadId = std::thread::current().id();
    }
    ID.with(|id| *id)
}

/// A wait in progress: when it started, and a departed peer being given its grace period.
/// Its clocks start at the first look that finds nothing, so that a wait whose message is
/// already there reads no clock (a clock read costs about as much as the look).
struct Watch {
    started: Option<Instant>,
    last_check: Option<Instant>,
    gone: Option<(Departure, Instant)>,
    /// When it started waiting on the data mailbox.
    mail_since: Option<Instant>,
    /// The wait is for the host board (see [`Net::board_step`]).
    on_board: bool,
}

impl Watch {
    fn new() -> Self {
        Watch {
            started: None,
            last_check: None,
            gone: None,
            mail_since: None,
            on_board: false,
        }
    }

    /// Starts the wait's clocks if they have not started; returns when the wait started.
    fn start(&mut self) -> Instant {
        *self.started.get_or_insert_with(|| {
            let now = Instant::now();
            self.last_check = Some(now);
            now
        })
    }

    /// Time since the last look at failures (since the start at first).
    fn since_check(&mut self) -> Duration {
        self.start();
        self.last_check.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

/// A wait for the rows of the host board, carried out in steps between looks at the board (see
/// [`Net::board_step`]).
pub(crate) struct BoardWait {
    w: Watch,
}

impl BoardWait {
    pub(crate) fn new() -> Self {
        let mut w = Watch::new();
        w.on_board = true;
        BoardWait { w }
    }
}

/// A wait for a round message (and its bulk payload), carried out in steps: each step takes
/// the connections for at most one wait slice, so that handles of the process on other
/// threads get their turn in between.
pub(crate) struct RoundWait {
    key: Key,
    op: u8,
    /// The operation's signature (its arguments, as the messages' `aux` carries them).
    sig: u64,
    w: Watch,
    /// The notice of a bulk payload, once it came.
    notice: Option<Msg>,
    /// [`Net::checks`] when the stash was last looked through for a mismatch with this
    /// wait: it needs no second look until something is stashed or a group changes.
    checked: Option<u64>,
}

impl RoundWait {
    pub(crate) fn new(src: usize, comm: u64, seq: u64, round: u32, (op, sig): (u8, u64)) -> Self {
        RoundWait {
            key: (comm, seq, round, src as u32),
            op,
            sig,
            w: Watch::new(),
            notice: None,
            checked: None,
        }
    }
}

/// A wait for the data of a superstep, in steps (see [`RoundWait`]).
pub(crate) struct StepWait {
    step: (u64, u64),
    via_control: u32,
    via_data: u32,
    w: Watch,
}

impl StepWait {
    pub(crate) fn new(comm: u64, superstep: u64, via_control: u32, via_data: u32) -> Self {
        StepWait {
            step: (comm, superstep),
            via_control,
            via_data,
            w: Watch::new(),
        }
    }
}

/// The ports of one process and what arrived on them.
pub(crate) struct Net {
    pub mesh: Mesh,
    pub nodes: Vec<NodeId>,
    pub pid: usize,
    pub opts: Options,
    pub stats: Stats,
    /// Send ports by pid and lane (control, data), kept here so that a send looks nothing up.
    links: Vec<[Option<Link>; 2]>,
    /// By pid: the largest round or data message sent on the control connection (see
    /// [`CONTROL_MAX`]), known once connected.
    control_max: Vec<usize>,
    shared: Arc<Shared>,
    stash: HashMap<Key, Msg>,
    /// The groups this process belongs to now, the whole machine (0) included.
    comms: HashMap<u64, CommInfo>,
    /// Counts the changes that can make a wait a mismatch: a message stashed, a group joined,
    /// left or started (see [`RoundWait::checked`]).
    checks: u64,
    /// The host board of the whole machine, when all its processes share this host.
    pub board: Option<Arc<Board>>,
    /// The whole machine's sync over MPI, when it runs on ipl's mpi driver (see
    /// [`mpi_sync`](crate::mpi_sync)).
    #[cfg(feature = "mpi")]
    pub words: Option<crate::mpi_words::MpiSync>,
    /// What the environment asks of the host board and of the sync over MPI.
    pub switches: Switches,
}

/// The environment's switches, read once when a process is made: `BSP_HOST_BOARD` and
/// `BSP_MPI_SYNC`, each unset, empty or `1` (on) or `0` (off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Switches {
    /// Whether the host board may be used (see [`board`](crate::board)).
    pub host_board: bool,
    /// Whether the sync over MPI may be used (see `mpi_sync`, feature `mpi`).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub mpi_sync: bool,
}

impl Switches {
    /// The switches the environment names; a value other than `0` or `1` is refused naming
    /// the variable and the value.
    pub(crate) fn from_env() -> ipl::Result<Switches> {
        let on = |name: &str| Ok(ipl::config::switch_from_env(name)?.unwrap_or(true));
        Ok(Switches {
            host_board: on("BSP_HOST_BOARD")?,
            mpi_sync: on("BSP_MPI_SYNC")?,
        })
    }
}

impl Net {
    pub(crate) fn new(ibis: Ibis, opts: Options) -> Result<Net> {
        opts.validate().map_err(Error::Config)?;
        let switches = Switches::from_env().map_err(|e| Error::Config(e.to_string()))?;
        let pid = ibis.id().rank() as usize;
        let shared = Arc::new(Shared {
            mail: Mutex::new(Mail::default()),
            arrived: Condvar::new(),
            spare: Arc::new(Spare::new(opts.memory_budget)),
        });
        let sh = shared.clone();
        let mesh = Mesh::builder(&ibis, MESH)
            .data_upcall(move |mut m| {
                deliver(&sh, &mut m);
                Ok(())
            })
            .patience(opts.wait_slice * 4)
            .build()
            .map_err(|e| match e {
                MeshError::Ipl { source, .. }
                    if matches!(*source, ipl::Error::DuplicatePort(_)) =>
                {
                    Error::Config(format!(
                        "pid {pid}: this node already has a Bsp (its ports exist)"
                    ))
                }
                e => mesh_error(pid, 0, "setting up the connections", "setup", e),
            })?;
        let nodes = mesh.members();
        for (i, n) in nodes.iter().enumerate() {
            if n.rank() as usize != i {
                return Err(Error::Config(format!(
                    "pool member {i} has rank {}; ranks must be 0..{}",
                    n.rank(),
                    nodes.len()
                )));
            }
        }
        let p = nodes.len();
        shared.spare.set_keep(2 * p + 2);
        Ok(Net {
            mesh,
            nodes,
            pid,
            opts,
            stats: Stats::default(),
            links: (0..p).map(|_| [None, None]).collect(),
            control_max: vec![0; p],
            shared,
            stash: HashMap::default(),
            comms: HashMap::from_iter([(
                0,
                CommInfo {
                    next_seq: 0,
                    members: Vec::new(),
                    thread: None,
                },
            )]),
            checks: 0,
            board: None,
            #[cfg(feature = "mpi")]
            words: None,
            switches,
        })
    }

    /// Notes that this process belongs to group `comm` from now on.
    pub(crate) fn join_comm(&mut self, comm: u64, members: Vec<usize>) {
        self.checks += 1;
        self.comms.entry(comm).or_insert(CommInfo {
            next_seq: 0,
            members,
            thread: None,
        });
    }

    /// Names group `comm` in messages.
    pub(crate) fn describe(&self, comm: u64) -> String {
        if comm == 0 {
            return "of the whole machine".to_string();
        }
        match self.comms.get(&comm) {
            Some(c) => {
                const SHOWN: usize = 8;
                let mut pids: Vec<String> =
                    c.members.iter().take(SHOWN).map(usize::to_string).collect();
                if c.members.len() > SHOWN {
                    pids.push(format!("... ({} in all)", c.members.len()));
                }
                format!("in the group of pids {}", pids.join(", "))
            }
            None => format!("in group {comm:016x}"),
        }
    }

    /// Notes that this process no longer uses group `comm`.
    pub(crate) fn leave_comm(&mut self, comm: u64) {
        self.checks += 1;
        self.comms.remove(&comm);
    }

    /// Notes that operation `seq` of group `comm` has started here.
    pub(crate) fn started(&mut self, comm: u64, seq: u64) {
        self.checks += 1;
        if let Some(c) = self.comms.get_mut(&comm) {
            c.next_seq = c.next_seq.max(seq + 1);
            c.thread = Some(this_thread());
        }
    }

    /// The error for a failed port-library call.
    pub(crate) fn ipl_error(&self, ctx: &Ctx, what: String, e: ipl::Error) -> Error {
        match e {
            ipl::Error::NodeDied(_) | ipl::Error::NodeLeft(_) => {
                // Name the peer that went first, as `check` does: this one may only have
                // followed it.
                let gone = self.mesh.check().err().unwrap_or_else(|| {
                    let (n, died) = match e {
                        ipl::Error::NodeDied(n) => (n, true),
                        ipl::Error::NodeLeft(n) => (n, false),
                        _ => unreachable!("matched above"),
                    };
                    let d = Departure { node: n, died };
                    MeshError::Departed {
                        peer: d.clone(),
                        first: d,
                    }
                });
                self.mesh_error(ctx, what, gone)
            }
            source => Error::Ipl {
                pid: self.pid,
                superstep: ctx.superstep,
                what,
                source: Box::new(source),
            },
        }
    }

    fn mesh_error(&self, ctx: &Ctx, what: String, e: MeshError) -> Error {
        mesh_error(self.pid, ctx.superstep, &what, &ctx.during(), e)
    }

    /// The send port to `d` on `lane`, connected on first use.
    #[inline]
    fn link(&mut self, d: usize, lane: Lane, ctx: &Ctx) -> Result<&Link> {
        let i = match lane {
            Lane::Control => 0,
            Lane::Data => 1,
        };
        if self.links[d][i].is_none() {
            self.connect(d, lane, i, ctx)?;
        }
        Ok(self.links[d][i].as_ref().expect("set above"))
    }

    /// Connects the send port to `d` on `lane` (index `i` of its links): once per peer and
    /// lane, so out of the way of every later send.
    #[cold]
    #[inline(never)]
    fn connect(&mut self, d: usize, lane: Lane, i: usize, ctx: &Ctx) -> Result<()> {
        let link = self
            .mesh
            .link(&self.nodes[d], lane)
            .map_err(|e| self.mesh_error(ctx, format!("connecting to pid {d}"), e))?;
        let room = link.unread_capacity();
        tracing::debug!(pid = self.pid, to = d, ?lane, room, "connected");
        if lane == Lane::Control {
            let quarter = usize::try_from(room / 4).unwrap_or(usize::MAX);
            self.control_max[d] = quarter.min(CONTROL_MAX);
        }
        self.links[d][i] = Some(link);
        Ok(())
    }

    /// The error for a failed send to `d`: a peer on its way out may break the connection
    /// before the pool reports its departure, and then the departure is named, not the broken
    /// connection (see [`Mesh::send_error`]).
    fn send_error(&self, d: usize, ctx: &Ctx, what: String, e: ipl::Error) -> Error {
        let e = self.mesh.send_error(&self.nodes[d], what.clone(), e);
        self.mesh_error(ctx, what, e)
    }

    /// Whether a message of `len` bytes to `d` goes on the control connection: a small one
    /// always (up to `small_message`, but never more than every connection holds), a larger one
    /// up to [`CONTROL_MAX`] where that connection holds enough (connected first, to know).
    #[inline(always)]
    fn on_control(&mut self, d: usize, len: usize, ctx: &Ctx) -> Result<bool> {
        if len <= self.opts.small_message.min(SURE_CONTROL) {
            return Ok(true);
        }
        if len > CONTROL_MAX {
            return Ok(false);
        }
        self.link(d, Lane::Control, ctx)?;
        Ok(len <= self.control_max[d])
    }

    /// Sends a round message of an operation to `d`: on the control connection when small (or up to
    /// [`CONTROL_MAX`] where the connection holds enough), otherwise as a notice there and the
    /// payload on the data connection. `hdr.flags` carries the byte order of the payload (which a
    /// forwarded payload keeps).
    pub(crate) fn send_round(
        &mut self,
        d: usize,
        mut hdr: Header,
        payload: &[u8],
        ctx: &Ctx,
    ) -> Result<()> {
        hdr.kind = KIND_ROUND;
        let small = self.on_control(d, HEADER_LEN + payload.len(), ctx)?;
        if !small {
            hdr.flags |= FLAG_NOTICE;
        }
        let inline: &[u8] = if small { payload } else { &[] };
        let sent = self.link(d, Lane::Control, ctx).map(|port| {
            let mut w = port.message();
            write_round(&mut w, &hdr, inline);
            w.finish()
        });
        if let Err(e) = sent? {
            return Err(self.send_error(d, ctx, format!("sending to pid {d}"), e));
        }
        self.stats.round_messages += 1;
        if small {
            self.stats.bytes_sent += payload.len() as u64;
            return Ok(());
        }
        let head = Header {
            kind: KIND_BULK,
            flags: hdr.flags & !FLAG_NOTICE,
            ..hdr
        }
        .to_bytes();
        let port = self.link(d, Lane::Data, ctx)?;
        let mut w = port.message();
        write_bulk(&mut w, &head, payload);
        if let Err(e) = w.finish() {
            return Err(self.send_error(d, ctx, format!("sending to pid {d}"), e));
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
        comm: u64,
        superstep: u64,
        part: u32,
        ob: &crate::outbox::Outbox,
        early: bool,
        ctx: &Ctx,
    ) -> Result<bool> {
        let hdr = Header {
            kind: KIND_DATA,
            flags: wire::native_flag(),
            op: 0,
            round: part,
            epoch: superstep,
            aux: ob.packets.len() as u64,
            comm,
        };
        // The header and the slices' number codes, one byte buffer written in place.
        let head_len = HEADER_LEN + ob.slices.len();
        let bytes = ob.bytes();
        let via_control = !early && self.on_control(d, head_len + bytes, ctx)?;
        let lane = if via_control {
            Lane::Control
        } else {
            Lane::Data
        };
        let port = self.link(d, lane, ctx)?;
        let mut w = port.message();
        write_data(&mut w, &hdr, ob);
        if let Err(e) = w.finish() {
            return Err(self.send_error(d, ctx, format!("sending data to pid {d}"), e));
        }
        self.stats.data_messages += 1;
        if !via_control {
            self.stats.data_on_data_connection += 1;
        }
        self.stats.bytes_sent += bytes as u64;
        if early {
            self.stats.early_flushes += 1;
        }
        Ok(via_control)
    }

    /// Files one message from the control port; a round message under key `want` is handed
    /// back instead, to the wait that is looking for it.
    #[inline(always)]
    fn file(&mut self, mut m: ReadMessage, ctx: &Ctx, want: Option<Key>) -> Result<Option<Msg>> {
        let rank = m.origin().rank();
        let src = rank as usize;
        let parsed = parse(&mut m, rank, &self.shared.spare);
        drop(m);
        match parsed {
            Ok(Parsed::Round(key, msg)) if want == Some(key) => return Ok(Some(msg)),
            Ok(Parsed::Round(key, msg)) => {
                self.checks += 1;
                if self.stash.insert(key, msg).is_some() {
                    return Err(self.decode_error(
                        ctx,
                        src,
                        format!(
                            "round {} of operation #{} {} arrived twice",
                            key.2,
                            key.1,
                            self.describe(key.0)
                        ),
                    ));
                }
            }
            Ok(Parsed::Data { step, part }) => {
                let mut mail = self.shared.mail.lock();
                let st = mail.steps.entry(step).or_default();
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
        Ok(None)
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
        let started = w.start();
        let now = Instant::now();
        w.last_check = Some(now);
        if let Some((src, why)) = self.shared.mail.lock().failure.clone() {
            return Err(self.decode_error(ctx, src, why));
        }
        if !w.on_board {
            if let Some(e) = self.on_board_instead(ctx) {
                return Err(e);
            }
            #[cfg(feature = "mpi")]
            if let Some(e) = self.on_channel_instead(ctx) {
                return Err(e);
            }
        }
        if let Some(limit) = self.opts.sync_timeout {
            if now.duration_since(started) > limit {
                return Err(Error::Timeout {
                    pid: self.pid,
                    superstep: ctx.superstep,
                    during: ctx.during(),
                    waited: now.duration_since(started),
                });
            }
        }
        // The mesh names the peer that went first: the others may only have followed it.
        let first = match self.mesh.check() {
            Ok(()) => return Ok(()),
            Err(MeshError::Departed { first, .. }) => first,
            Err(e) => return Err(self.mesh_error(ctx, "checking the pool".into(), e)),
        };
        match &w.gone {
            None => {
                let grace = if first.died {
                    self.opts.wait_slice * 2
                } else {
                    self.opts.departure_grace
                };
                tracing::debug!(pid = self.pid, peer = %first.node, died = first.died, "peer gone; waiting {grace:?} for what it sent");
                w.gone = Some((first, now + grace));
                Ok(())
            }
            Some((first, deadline)) if now >= *deadline => Err(self.mesh_error(
                ctx,
                "waiting".into(),
                MeshError::Departed {
                    peer: first.clone(),
                    first: first.clone(),
                },
            )),
            Some(_) => Ok(()),
        }
    }

    /// Receives from the control port and files what came (see [`Net::file`] for `want`). For
    /// the first [`POLL_PHASE`] of a wait it polls, giving the processor away between polls (a
    /// peer that shares this core can then run and answer); after that it blocks for at most
    /// one wait slice.
    #[inline(always)]
    fn pump(&mut self, w: &mut Watch, ctx: &Ctx, want: Option<Key>) -> Result<Option<Msg>> {
        if w.started.map_or(true, |s| s.elapsed() < POLL_PHASE) {
            return match self.control().poll() {
                Ok(Some(m)) => self.file(m, ctx, want),
                Ok(None) => {
                    w.start();
                    std::thread::yield_now();
                    Ok(None)
                }
                Err(e) => Err(self.ipl_error(ctx, "receiving on the control port".into(), e)),
            };
        }
        match self.control().receive_timeout(self.opts.wait_slice) {
            Ok(m) => {
                let got = self.file(m, ctx, want)?;
                if w.since_check() >= self.opts.wait_slice {
                    self.check(w, ctx)?;
                }
                Ok(got)
            }
            Err(ipl::Error::Timeout { .. }) => self.check(w, ctx).map(|()| None),
            Err(e) => Err(self.ipl_error(ctx, "receiving on the control port".into(), e)),
        }
    }

    /// While this process waits for messages of operation `ctx.seq` of the whole machine: a
    /// peer that is in a sync of that number over MPI instead (see
    /// [`mpi_sync`](crate::mpi_sync)), which no message of this operation reaches.
    #[cfg(feature = "mpi")]
    fn on_channel_instead(&mut self, ctx: &Ctx) -> Option<Error> {
        if ctx.comm != 0 {
            return None;
        }
        let (me, m) = (self.pid, self.words.as_mut()?);
        for j in (0..m.ranks.len()).filter(|&j| j != me) {
            let Ok(Some(msg)) = m.chan.peek(m.ranks[j]) else {
                continue;
            };
            let Some(theirs) = crate::mpi_words::called_at(msg, ctx.seq) else {
                continue;
            };
            return Some(Error::CollectiveMismatch {
                pid: me,
                seq: ctx.seq,
                mine: ctx.op.to_string(),
                peer: j,
                theirs: format!("called {theirs}"),
            });
        }
        None
    }

    /// While this process waits for messages of operation `ctx.seq` of the whole machine: a
    /// peer that is in that operation on the host board instead, which no message of this one
    /// reaches (the processes called different operations).
    fn on_board_instead(&self, ctx: &Ctx) -> Option<Error> {
        let board = self.board.as_ref().filter(|_| ctx.comm == 0)?;
        (0..self.nodes.len())
            .filter(|&j| j != self.pid)
            .find_map(|j| {
                let e = board.ahead(j)?;
                // An all-to-all whose vectors do not all fit the board goes on with messages
                // after every process has written its row, and a scatter whose parts do not
                // fit the root's row after the root has written it empty: no mismatch. A
                // scatter's row with parts is one that nobody should take messages for.
                let same = ctx.op == op::name(e.op);
                let mixed = same && (e.op == op::ALL_TO_ALL || (e.op == op::SCATTER && e.len == 0));
                (e.seq == ctx.seq && !mixed).then(|| Error::CollectiveMismatch {
                    pid: self.pid,
                    seq: ctx.seq,
                    mine: ctx.op.to_string(),
                    peer: j,
                    theirs: format!("called {}", op::describe_call(e.op, e.sig)),
                })
            })
    }

    /// One step of a wait on the host board for operation `ctx.seq` (an `op`) of the whole
    /// machine, between looks at the board: polls the control port once, filing what came,
    /// and fails when a message shows a peer in another operation with this sequence number,
    /// or waiting in a group for this process (see [`Net::crossed`]); after each wait slice it
    /// looks at failures as other waits do. Returns how long the wait has lasted.
    ///
    /// `waiting_for`: the peer whose part this process waits for, where only it can tell (the
    /// mpi word channel's butterfly, in which a peer that is not a partner of this round may
    /// have finished the operation and gone on to the next, in a group, while this process
    /// still waits for its partner); `None` on the board, where a peer that has finished the
    /// operation has seen every process's row, so that this process's next look finds what it
    /// waits for and a peer in a group that waits for this one is a mismatch.
    pub(crate) fn board_step(
        &mut self,
        wait: &mut BoardWait,
        op: u8,
        sig: u64,
        ctx: &Ctx,
        waiting_for: Option<usize>,
    ) -> Result<Duration> {
        if !self.stash.is_empty() {
            let seq = ctx.seq;
            // An all-to-all's or a scatter's messages may come while this process still reads
            // the rows that tell it to take them (see `all_to_all_on_board` and
            // `scatter_on_board`), and another operation's of the same family (a sync's get
            // replies, see `op::family`) while it waits for the sync: not a mismatch.
            let mixed = |m: &Msg| {
                matches!(op, op::ALL_TO_ALL | op::SCATTER) && m.hdr.op == op && m.hdr.aux == sig
                    || m.hdr.op != op && op::family(m.hdr.op) == op::family(op)
            };
            if let Some((k, m)) = self
                .stash
                .iter()
                .find(|(k, m)| k.0 == 0 && k.1 == seq && !mixed(m))
            {
                return Err(Error::CollectiveMismatch {
                    pid: self.pid,
                    seq,
                    mine: op::name(op).to_string(),
                    peer: k.3 as usize,
                    theirs: format!("called {}", op::name(m.hdr.op)),
                });
            }
            if let Some(e) = self.unread_part(0, seq, op) {
                return Err(e);
            }
            let srcs: Vec<usize> = match waiting_for {
                Some(src) => vec![src],
                None => self.stash.keys().map(|k| k.3 as usize).collect(),
            };
            if let Some(e) = srcs
                .into_iter()
                .find_map(|src| self.crossed(src, 0, seq, op))
            {
                return Err(e);
            }
        }
        match self.control().poll() {
            Ok(Some(m)) => {
                self.file(m, ctx, None)?;
            }
            Ok(None) => {}
            Err(e) => return Err(self.ipl_error(ctx, "receiving on the control port".into(), e)),
        }
        if wait.w.since_check() >= self.opts.wait_slice {
            self.check(&mut wait.w, ctx)?;
        }
        Ok(wait.w.start().elapsed())
    }

    /// One step of waiting for round `round` of operation `seq` (an `op`) of group `comm` from
    /// `src`, and its bulk payload if it has one: the message, or `None` after at most one wait
    /// slice. Two cases of a wait that cannot end are errors instead: a message of another
    /// operation with the same sequence number (the processes called different operations),
    /// and a message of `src` that shows it waiting in another group for this process (see
    /// [`Net::crossed`]).
    #[inline(always)]
    pub(crate) fn recv_round_step(
        &mut self,
        wait: &mut RoundWait,
        ctx: &Ctx,
    ) -> Result<Option<Msg>> {
        let key = wait.key;
        let src = key.3 as usize;
        if wait.notice.is_none() {
            // Usually nothing is stashed, and then the key needs no hashing.
            let stashed = if self.stash.is_empty() {
                None
            } else {
                self.stash.remove(&key)
            };
            let msg = match stashed {
                Some(msg) => msg,
                None => match self.pump_for(wait, ctx)? {
                    Some(msg) => msg,
                    None => return Ok(None),
                },
            };
            if msg.hdr.flags & FLAG_NOTICE == 0 {
                return Ok(Some(msg));
            }
            wait.notice = Some(msg);
        }
        let Some(bulk) = self.mail_step(&mut wait.w, ctx, |m| m.bulk.remove(&key))? else {
            return Ok(None);
        };
        let notice = wait.notice.take().expect("checked above");
        if bulk.hdr.op != notice.hdr.op {
            return Err(self.decode_error(ctx, src, "bulk payload of another operation".into()));
        }
        Ok(Some(bulk))
    }

    /// The part of [`Net::recv_round_step`] that finds its message not stashed: fails on a
    /// mismatch the stash shows, else pumps, and returns the message if it is what came.
    fn pump_for(&mut self, wait: &mut RoundWait, ctx: &Ctx) -> Result<Option<Msg>> {
        let key = wait.key;
        let (comm, seq, src, op) = (key.0, key.1, key.3 as usize, wait.op);
        // Nothing stashed: nothing can be a mismatch. Nothing changed since the last look
        // through the stash: it found none, and would find none again.
        if self.stash.is_empty() || wait.checked == Some(self.checks) {
            return self.pump(&mut wait.w, ctx, Some(key));
        }
        if let Some((k, m)) = self
            .stash
            .iter()
            .find(|(k, m)| k.0 == comm && k.1 == seq && op::family(m.hdr.op) != op::family(op))
        {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: format!("{} {}", op::name(op), self.describe(comm)),
                peer: k.3 as usize,
                theirs: format!("called {}", op::name(m.hdr.op)),
            });
        }
        // Another process's part of this operation, called with other arguments (a root of
        // its own, say): the tree it follows is another, and the part awaited may never come.
        if let Some((k, m)) = self
            .stash
            .iter()
            .find(|(k, m)| k.0 == comm && k.1 == seq && m.hdr.op == op && m.hdr.aux != wait.sig)
        {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: format!(
                    "{} {} with {}",
                    op::name(op),
                    self.describe(comm),
                    op::describe(op, wait.sig)
                ),
                peer: k.3 as usize,
                theirs: format!("called it with {}", op::describe(op, m.hdr.aux)),
            });
        }
        if let Some(e) = self.unread_part(comm, seq, op) {
            return Err(e);
        }
        // Round messages of `src` come in the order it sent them, on its control connection
        // (the payload of a large one goes elsewhere, its notice there): one of a later
        // operation means that `src` went past this one without sending what this process
        // waits for, as when the processes name different roots. Waiting on would never end.
        if let Some((k, m)) = self
            .stash
            .iter()
            .find(|(k, _)| k.0 == comm && k.3 as usize == src && k.1 > seq)
        {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: format!("{} {}", op::name(op), self.describe(comm)),
                peer: src,
                theirs: format!(
                    "went on to {} (operation #{}) without sending this process its part of \
                     operation #{seq}",
                    op::name(m.hdr.op),
                    k.1
                ),
            });
        }
        if let Some(e) = self.crossed(src, comm, seq, op) {
            return Err(e);
        }
        wait.checked = Some(self.checks);
        self.pump(&mut wait.w, ctx, Some(key))
    }

    /// While this process is in operation `seq` (an `op`) of group `comm`: a part of an
    /// operation of the group it has ended, never read. Its sender followed another tree than
    /// this process did (the processes named different roots), and a process waiting for a
    /// part that went here instead would wait for ever. Get replies are left out: a refusal
    /// may come to a process that asked for nothing (see `drma`).
    fn unread_part(&self, comm: u64, seq: u64, op: u8) -> Option<Error> {
        let (k, m) = self.stash.iter().find(|(k, m)| {
            k.0 == comm && k.1 < seq && m.hdr.op != op::GET_REPLY && m.hdr.op != op::SYNC
        })?;
        Some(Error::CollectiveMismatch {
            pid: self.pid,
            seq,
            mine: format!("{} {}", op::name(op), self.describe(comm)),
            peer: k.3 as usize,
            theirs: format!(
                "sent this process a part of its {} (operation #{}), which this process ended \
                 without it",
                op::name(m.hdr.op),
                k.1
            ),
        })
    }

    /// While this process waits for `src` in operation `seq` of group `comm`: whether `src`
    /// has started an operation of another group of this process that this process has not
    /// started yet, and that cannot end without this process (every process contributes to
    /// its result). Then neither can go on: `src` reaches operation `seq` of `comm` only after
    /// that one, which waits for this process, which waits for `src`. That holds when this
    /// thread is the one that would start it; a group whose operations come from another
    /// thread (or have not started yet) may go on there.
    fn crossed(&self, src: usize, comm: u64, seq: u64, op: u8) -> Option<Error> {
        let here = this_thread();
        let (k, m) = self.stash.iter().find(|(k, m)| {
            k.3 as usize == src
                && k.0 != comm
                && op::needs_everyone(m.hdr.op)
                && self
                    .comms
                    .get(&k.0)
                    .is_some_and(|c| k.1 == c.next_seq && c.thread == Some(here))
        })?;
        Some(Error::CollectiveMismatch {
            pid: self.pid,
            seq,
            mine: format!("{} {}", op::name(op), self.describe(comm)),
            peer: src,
            theirs: format!(
                "called {} {} (operation #{}) first, which cannot end without this process",
                op::name(m.hdr.op),
                self.describe(k.0),
                k.1
            ),
        })
    }

    /// One step of waiting until `f` finds what it looks for in the data mailbox: for the
    /// first [`MAIL_SPIN`] of the wait it looks and yields, then it sleeps until mail arrives,
    /// for at most what is left of the wait slice.
    fn mail_step<R>(
        &mut self,
        w: &mut Watch,
        ctx: &Ctx,
        mut f: impl FnMut(&mut Mail) -> Option<R>,
    ) -> Result<Option<R>> {
        {
            let mut mail = self.shared.mail.lock();
            if let Some(r) = f(&mut mail) {
                w.mail_since = None;
                return Ok(Some(r));
            }
            // The spin starts at the first look that finds nothing.
            let since = *w.mail_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= MAIL_SPIN {
                let slice = self
                    .opts
                    .wait_slice
                    .saturating_sub(w.since_check())
                    .max(Duration::from_millis(1));
                self.shared.arrived.wait_for(&mut mail, slice);
                if let Some(r) = f(&mut mail) {
                    w.mail_since = None;
                    return Ok(Some(r));
                }
            } else {
                drop(mail);
                std::thread::yield_now();
            }
        }
        if w.since_check() >= self.opts.wait_slice {
            self.check(w, ctx)?;
        }
        Ok(None)
    }

    /// Keeps the packet buffers of a superstep that was read, for the messages of later ones
    /// (at most the memory budget's worth).
    pub(crate) fn recycle(&self, buffers: impl Iterator<Item = Vec<u8>>) {
        for b in buffers {
            self.shared.spare.give(b);
        }
    }

    /// One step of waiting until the data of a superstep is complete: `via_control` messages
    /// on the control connection and `via_data` on the data connection. Returns the messages,
    /// or `None` after at most one wait slice.
    pub(crate) fn superstep_step(
        &mut self,
        wait: &mut StepWait,
        ctx: &Ctx,
    ) -> Result<Option<Vec<InPart>>> {
        let step = wait.step;
        let have = {
            let mut mail = self.shared.mail.lock();
            // Usually all is there at the first look (always in a superstep that sent
            // nothing): then one lock and one lookup do.
            match mail.steps.get(&step) {
                None if wait.via_control == 0 && wait.via_data == 0 => {
                    return Ok(Some(Vec::new()));
                }
                Some(s) if s.via_control >= wait.via_control && s.via_data >= wait.via_data => {
                    let parts = mail.steps.remove(&step).map(|s| s.parts);
                    return Ok(Some(parts.unwrap_or_default()));
                }
                s => s.map_or(0, |s| s.via_control),
            }
        };
        if have < wait.via_control {
            self.pump(&mut wait.w, ctx, None)?;
            return Ok(None);
        }
        let via_data = wait.via_data;
        self.mail_step(&mut wait.w, ctx, |m| {
            let done = m
                .steps
                .get(&step)
                .map_or(via_data == 0, |s| s.via_data >= via_data);
            done.then(|| m.steps.remove(&step).map(|s| s.parts).unwrap_or_default())
        })
    }
}

impl Net {
    /// The control port, which this process reads itself.
    fn control(&self) -> &ipl::ReceivePort {
        self.mesh
            .control_port()
            .expect("the mesh is built without a control handler")
    }
}

/// The layer's error for an error of the mesh: a departure names the process that went
/// first.
fn mesh_error(pid: usize, superstep: u64, what: &str, during: &str, e: MeshError) -> Error {
    match e {
        MeshError::Departed { first, .. } => Error::PeerGone {
            pid,
            superstep,
            peer: first.node.rank() as usize,
            node: first.node.to_string(),
            died: first.died,
            during: during.to_string(),
        },
        MeshError::Ipl { source, .. } => Error::Ipl {
            pid,
            superstep,
            what: what.to_string(),
            source,
        },
        e => Error::Config(format!("pid {pid}: {what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::Incoming;
    use crate::outbox::Outbox;

    /// One message of each kind a peer sends, as the bytes of an ipl message.
    fn valid_messages() -> Vec<Vec<u8>> {
        let header = |kind, aux| Header {
            kind,
            flags: wire::native_flag(),
            op: op::ALL_REDUCE,
            round: 1,
            epoch: 5,
            aux,
            comm: 0,
        };
        let mut round = WriteMessage::detached();
        write_round(&mut round, &header(KIND_ROUND, 2), &[7u8; 16]);
        let head = header(KIND_BULK, 2).to_bytes();
        let payload = [9u8; 40];
        let mut bulk = WriteMessage::detached();
        write_bulk(&mut bulk, &head, &payload);
        let mut ob = Outbox::default();
        ob.push_packet("u64", &77u64).expect("encodes");
        ob.push_packet("alloc::string::String", "text")
            .expect("encodes");
        ob.push_slice(&[1.5f64, 2.5]);
        ob.push_put(0, 1, &[3u32]);
        ob.push_get(0, 4, 0, 2);
        let mut data = WriteMessage::detached();
        write_data(&mut data, &header(KIND_DATA, ob.packets.len() as u64), &ob);
        [round, bulk, data]
            .into_iter()
            .map(|m| m.into_bytes().expect("a detached message"))
            .collect()
    }

    /// Parses `bytes` as a message from pid 1 and reads whatever it yields to its end; an error
    /// anywhere is fine, a panic is not.
    fn parse_and_read(bytes: Vec<u8>, spare: &Arc<Spare>) -> bool {
        let mut m = ReadMessage::from_bytes(bytes, false);
        match parse(&mut m, 1, spare) {
            Ok(Parsed::Data { part, .. }) => {
                let mut incoming = Incoming::new(0, 5, vec![part]);
                for _ in 0..16 {
                    match incoming.peek() {
                        Ok(Some(_)) => {
                            let read = match incoming.next_is::<u64>() {
                                Ok(true) => incoming.recv::<u64>().map(|_| ()),
                                Ok(false) => incoming.recv_slice::<f64>().map(|_| ()),
                                Err(e) => Err(e),
                            };
                            if read.is_err() {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
                true
            }
            Ok(Parsed::Round(_, msg) | Parsed::Bulk(_, msg)) => {
                let _ = (msg.payload().len(), msg.swapped());
                true
            }
            Err(_) => false,
        }
    }

    /// A peer's message, cut short anywhere or with any byte changed, and random bytes with or
    /// without a valid header in front: every one is parsed to a value or an error, never a
    /// panic, and the untouched messages parse.
    #[test]
    fn damaged_and_random_messages_are_errors_not_panics() {
        let spare = Arc::new(Spare::new(1 << 20));
        let valid = valid_messages();
        for v in &valid {
            assert!(
                parse_and_read(v.clone(), &spare),
                "an intact message parses"
            );
            for len in 0..v.len() {
                parse_and_read(v[..len].to_vec(), &spare);
            }
            for i in 0..v.len() {
                for b in [
                    0u8,
                    0xff,
                    v[i] ^ 0x80,
                    v[i].wrapping_add(1),
                    v[i].wrapping_sub(1),
                ] {
                    let mut w = v.clone();
                    w[i] = b;
                    parse_and_read(w, &spare);
                }
            }
        }
        // xorshift: the same bytes on every run.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..3000 {
            let len = (next() % 160) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if i % 2 == 1 {
                // Behind the first bytes of a valid message, so that decoding gets further.
                let v = &valid[i % valid.len()];
                let keep = (next() as usize) % v.len();
                bytes.splice(0..0, v[..keep].iter().copied());
            }
            parse_and_read(bytes, &spare);
        }
    }
}
