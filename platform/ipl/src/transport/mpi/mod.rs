//! The MPI driver (feature `mpi`): port connections over MPI point-to-point, for programs that
//! `mpirun` or `srun` started, so that they use the cluster's interconnect through the MPI
//! library's own transports (shared memory on one host, InfiniBand and the like between hosts).
//!
//! - MPI is initialised once per process, with `MPI_THREAD_MULTIPLE` (ports are used from any
//!   thread), when the node joins, and finalised when it leaves. The pool's ranks and size are
//!   MPI's: the node checks that the launcher's rank and size, which the registry uses, are the
//!   ones MPI gives. A pool on this driver is fixed when it starts: a second node in the same
//!   process, a node joining a running pool, or a pool growing (malleability) is refused with
//!   an error that says so.
//! - A connection is three tags between two ranks, numbered by the connecting side: frames go
//!   on the data tag (large bodies on the bulk tag), the receiver's confirmations of what it read
//!   come back on the back tag (see [`conn`]). A connect request goes to the peer's rank on
//!   [`TAG_CONNECT`]; the peer's progress thread hands it to the node's acceptor and answers on
//!   the back tag.
//! - The receiving thread reads its connections itself, through the receive each keeps posted
//!   (and matched probes for pieces of large frames), and spins before it parks as on the other
//!   drivers. MPI gives no descriptor to wait on, so a parked receiver's
//!   connections are watched by the progress thread, which probes for them (yielding at first,
//!   then sleeping 20 us between looks, longer as a wait goes on) and wakes the receiver when a
//!   message is there.
//! - Senders copy small frames into buffers of their own and send them with non-blocking sends
//!   over MPI point-to-point (a send never waits for its receiver to read, up to a window).
//!   Large parts the caller lends go from its memory while the receiver takes them as they
//!   come; a receiver that does not has its process take them when asked (see [`conn`]).
//!
//! The registry (membership, failures, elections) still runs in rank 0 over tcp, as on the
//! other drivers under a launcher. A rank that dies is reported through the registry as on the
//! other drivers; OpenMPI's runtime then ends the whole job (unless `mpirun --enable-recovery`),
//! as the repository's README describes.

mod conn;
mod raw;
mod words;

pub use words::WordChannel;

use self::conn::{Backoff, MpiSink, MpiStream, Outbox, SinkShared, Taken};
use self::raw::Live;
use super::{Acceptor, Dialed, Driver, Waker};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::node::NodeId;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::HashMap;
use std::io;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connect requests: the connecting side's number for the connection, then the request.
const TAG_CONNECT: c_int = 1;
/// Notices about a connection to the other side's process, told apart by their length: a
/// receiver that stopped reading tells the sender (4 bytes: the connection's number); a sender
/// whose sends from its caller's memory wait asks the receiving process to take the
/// connection's pieces into memory of its own (12 bytes: the connection's number and the bulk
/// byte up to which to take them, see `conn::sink::complete_direct`). One tag, so that the progress
/// thread looks for both with one probe.
const TAG_NOTICE: c_int = 2;
/// Tags from here on belong to connections, three each (see [`tags`]).
const FIRST_CONNECTION_TAG: c_int = 16;
/// The longest connect request a process takes: a request is a node's address, a port's name
/// and its type, a few hundred bytes; a longer one is discarded unread.
const MAX_CONNECT_REQUEST: usize = 64 * 1024;
/// Asks to take pieces a process keeps at most: an honest sender has at most one pending per
/// connection.
const MAX_TAKES: usize = 4096;
/// Longest a progress thread with nothing to watch sleeps before it looks for connect requests.
const NAP: Duration = Duration::from_millis(2);

/// The process's MPI, while a node uses it.
static WORLD: Mutex<Option<Arc<World>>> = Mutex::new(None);
/// Whether MPI was ever started in this process (it cannot be started twice).
static STARTED: AtomicBool = AtomicBool::new(false);

/// The process's MPI while it is initialised.
pub(crate) fn world() -> Option<Arc<World>> {
    WORLD.lock().clone()
}

/// Tags of connection `id`: frames (small ones whole, large ones' headers), the receiver's
/// answers (the connect reply, then read confirmations), and the pieces of large frames.
fn tags(id: u32) -> (c_int, c_int, c_int) {
    let data = FIRST_CONNECTION_TAG + 3 * id as c_int;
    (data, data + 1, data + 2)
}

/// A parked receiver's connection, which the progress thread looks at for it.
pub(crate) struct Watch {
    source: c_int,
    bulk_tag: c_int,
    /// The stream's posted receive on its data tag.
    posted: Arc<conn::Posted>,
    /// Pieces the progress thread took for the stream.
    taken: Arc<Taken>,
    /// The stream waits for a piece on the bulk tag rather than its data tag.
    bulk: AtomicBool,
    armed: AtomicBool,
    listed: AtomicBool,
    waker: Arc<Waker>,
}

impl Watch {
    fn new(
        source: c_int,
        bulk_tag: c_int,
        posted: Arc<conn::Posted>,
        taken: Arc<Taken>,
        waker: Arc<Waker>,
    ) -> Self {
        Watch {
            source,
            bulk_tag,
            posted,
            taken,
            bulk: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            waker,
        }
    }

    /// Whether the stream has something to read.
    fn ready(&self, live: &Live<'_>, bulk: bool) -> bool {
        if bulk {
            self.taken.any() || matches!(raw::iprobe(live, self.source, self.bulk_tag), Ok(true))
        } else {
            match self.posted.lock().as_ref() {
                Some(r) => matches!(raw::peek_recv(live, r), Ok(true)),
                None => true,
            }
        }
    }
}

#[derive(Default)]
struct State {
    watches: Vec<Arc<Watch>>,
    /// Connections whose receiver stopped reading (source, data tag, bulk tag): their
    /// messages are discarded up to the end of the stream.
    drains: Vec<(c_int, c_int, c_int)>,
    /// Sinks by connection number, to tell them their receiver stopped reading.
    sinks: HashMap<u32, Weak<SinkShared>>,
    /// Streams by sending rank and connection number, to take pieces for them.
    streams: HashMap<(c_int, u32), Weak<Taken>>,
    /// Asks to take pieces for a stream whose pieces have not all come yet: (sending rank,
    /// connection, bulk byte to take up to).
    takes: Vec<(c_int, u32, u64)>,
    /// The progress thread sleeps until a watch is armed.
    napping: bool,
}

/// MPI in this process.
pub(crate) struct World {
    /// True while MPI is initialised: every MPI call holds it for reading (the [`Live`] it
    /// takes), finalising for writing, so that no call runs into a finalised library.
    live: RwLock<bool>,
    size: c_int,
    /// Largest connection number the tags can carry.
    max_id: u32,
    /// The word channel's communicator (see [`WordChannel`]), whose tags are the channel's.
    words: raw::Comm,
    /// The largest tag MPI allows (`MPI_TAG_UB`).
    tag_ub: c_int,
    /// Whether large pieces may be sent from the caller's memory, tying a send to its receiving
    /// process (see `conn::sink::complete_direct`): not where the job outlives a rank that dies
    /// (`mpirun --enable-recovery`), since a send to it would never complete.
    send_from_caller: bool,
    /// Whether connections start in step, and are tried in step again after a while of copies
    /// ([`MpiSends::Direct`](crate::MpiSends::Direct)).
    start_in_step: bool,
    next_id: AtomicU32,
    /// How long a connect waits for the peer's answer.
    reply_wait: Duration,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    /// A watch was armed since the progress thread last looked.
    fresh: AtomicBool,
    progress: Mutex<Option<JoinHandle<()>>>,
}

impl World {
    /// The proof that MPI runs, which every MPI call takes (held for as long as it lives, and
    /// no longer than it must: finalising waits for it), or the error of a finalised MPI.
    #[inline]
    fn mpi(&self) -> io::Result<Live<'_>> {
        Live::check(&self.live)
    }

    /// Has the progress thread watch `w` for a parked receiver.
    fn arm(&self, w: &Arc<Watch>) {
        w.armed.store(true, Ordering::Release);
        let mut st = self.state.lock();
        if !w.listed.swap(true, Ordering::AcqRel) {
            st.watches.push(w.clone());
        }
        // The watcher looks often at first: what a receiver waits for is often close.
        self.fresh.store(true, Ordering::Release);
        if st.napping {
            self.wake.notify_one();
        }
    }

    /// Discards what `source` sends with `tag` and `bulk_tag` from now on, up to its end of
    /// stream.
    fn drain(&self, source: c_int, tag: c_int, bulk_tag: c_int) {
        self.state.lock().drains.push((source, tag, bulk_tag));
    }

    fn forget_sink(&self, id: u32) {
        self.state.lock().sinks.remove(&id);
    }

    /// Lets the progress thread take pieces for the stream of connection `id` from `source`.
    fn take_for(&self, source: c_int, id: u32, taken: &Arc<Taken>) {
        self.state
            .lock()
            .streams
            .insert((source, id), Arc::downgrade(taken));
    }

    fn forget_stream(&self, source: c_int, id: u32) {
        self.state.lock().streams.remove(&(source, id));
    }

    /// What a thread that waits for its own sends from its caller's memory does meanwhile:
    /// takes the pieces that other ranks asked this process to take. Where two ranks send to
    /// each other before either reads, each then takes the other's pieces at once, without
    /// waiting for its progress thread, which may sleep.
    fn take_for_others(&self, live: &Live<'_>) {
        let mut wake = Vec::new();
        {
            let mut st = self.state.lock();
            take_notices(live, &mut st, &mut wake);
        }
        for w in wake {
            w.notify();
        }
    }
}

/// Raw MPI messages to a process on this driver, for tests that speak to it as a peer that
/// sends garbage (see `crate::testing::mpi`). Not part of the library's interface.
pub mod raw_peer {
    use std::os::raw::c_int;

    /// The tag of connect requests.
    pub const CONNECT: c_int = super::TAG_CONNECT;
    /// The tag of notices about connections (a receiver gone, an ask to take pieces).
    pub const NOTICE: c_int = super::TAG_NOTICE;
    /// The tag of the word channel's messages that carry their words, on the channel's
    /// communicator (see [`send_words`]); tags from 1 on carry a word in the tag itself.
    pub const WORDS: c_int = super::words::TAG_BODY;

    /// The data, back and bulk tags of connection `id`, numbered by the process that opened
    /// it, from 0 in the order it connected.
    pub fn connection_tags(id: u32) -> (c_int, c_int, c_int) {
        super::tags(id)
    }

    /// Sends `bytes` to `rank` with `tag`; returns once MPI has taken them (at once within the
    /// transport's eager limit, else once the receiver has matched the message).
    pub fn send(rank: c_int, tag: c_int, bytes: &[u8]) -> crate::Result<()> {
        send_with(rank, |_, live| super::raw::send(live, rank, tag, bytes))
    }

    /// [`send`] on the word channel's communicator: `tag` [`WORDS`] for a message of words,
    /// from 1 on for one word (tag - 1) with no payload.
    pub fn send_words(rank: c_int, tag: c_int, bytes: &[u8]) -> crate::Result<()> {
        send_with(rank, |world, live| {
            super::raw::send_on(live, &world.words, rank, tag, bytes)
        })
    }

    /// Runs `send` while MPI runs, once `rank` is known to be one of the job's.
    fn send_with(
        rank: c_int,
        send: impl FnOnce(&super::World, &super::Live<'_>) -> std::io::Result<()>,
    ) -> crate::Result<()> {
        let Some(world) = super::world() else {
            return Err(crate::Error::config("IPL_DRIVER", "MPI is not running"));
        };
        let live = world
            .mpi()
            .map_err(|e| crate::Error::io("raw MPI send", e))?;
        if !(0..world.size).contains(&rank) {
            return Err(crate::Error::config(
                "rank",
                format!("{rank} is not one of the {} MPI ranks", world.size),
            ));
        }
        send(&world, &live).map_err(|e| crate::Error::io(format!("raw MPI send to rank {rank}"), e))
    }
}

/// Opens connections over MPI.
pub(crate) struct MpiDriver {
    world: Arc<World>,
}

/// The error every attempt to start a second node on MPI in one process gets.
fn once_only() -> Error {
    Error::config(
        "IPL_DRIVER",
        "mpi: this process has already joined a pool over MPI, and MPI starts once per process; \
         on the mpi driver the pool is MPI's ranks, fixed when the job starts: joins after start, \
         a node leaving and joining again, and malleability (a pool that grows or shrinks) are \
         not possible (use the shm or tcp driver for open pools)",
    )
}

/// Refuses a node that this process cannot start on MPI, before it starts anything else (a
/// registry, for rank 0).
pub(crate) fn precheck(cfg: &Config) -> Result<()> {
    if cfg.launcher.is_none() {
        return Err(Error::config(
            "IPL_DRIVER",
            "mpi needs a program started by mpirun or srun (no launcher's rank in the \
             environment): run it as `mpirun -n N program` or `srun -n N program`, or choose \
             another driver",
        ));
    }
    if STARTED.load(Ordering::SeqCst) {
        return Err(once_only());
    }
    Ok(())
}

/// Initialises MPI and starts the progress thread that takes connections in for `acceptor`;
/// returns the driver and the node's address (`mpi:<rank>`).
pub(crate) fn start(cfg: &Config, acceptor: Arc<dyn Acceptor>) -> Result<(MpiDriver, String)> {
    precheck(cfg)?;
    let launcher = cfg.launcher.as_ref().expect("checked");
    if STARTED.swap(true, Ordering::SeqCst) {
        return Err(once_only());
    }
    let Some((universe, level)) =
        mpi::initialize_with_threading(mpi::environment::Threading::Multiple)
    else {
        return Err(Error::config(
            "IPL_DRIVER",
            "mpi: MPI was initialised in this process by someone else; the mpi driver must \
             initialise it itself (with MPI_THREAD_MULTIPLE)",
        ));
    };
    // Finalised by `finish`, when the node leaves, not when this handle goes.
    std::mem::forget(universe);
    if level != mpi::environment::Threading::Multiple {
        return Err(Error::config(
            "IPL_DRIVER",
            format!(
                "mpi: the MPI library offers threads at level {level:?} only, and ipl's ports \
                 are used from many threads (MPI_THREAD_MULTIPLE); use an MPI built with \
                 thread support"
            ),
        ));
    }
    let (rank, size, tag_ub) =
        raw::setup_world().map_err(|e| Error::io("mpi: setting up MPI_COMM_WORLD", e))?;
    let words =
        raw::dup_world().map_err(|e| Error::io("mpi: the word channel's communicator", e))?;
    let (want_rank, want_size) = (cfg.rank, cfg.size);
    if want_rank != Some(rank as u32) || want_size != Some(size as u32) {
        return Err(Error::config(
            "IPL_DRIVER",
            format!(
                "mpi: MPI says this is rank {rank} of {size}, but {} gave rank {want_rank:?} of \
                 {want_size:?}; the pool must be MPI's ranks (run one program per rank, with no \
                 IPL_POOL_SIZE or IPL_RANK)",
                launcher.kind.name()
            ),
        ));
    }
    let world = Arc::new(World {
        live: RwLock::new(true),
        size,
        send_from_caller: cfg.mpi_sends != crate::MpiSends::Copied && !job_outlives_dead_ranks(),
        start_in_step: cfg.mpi_sends == crate::MpiSends::Direct,
        max_id: ((tag_ub - FIRST_CONNECTION_TAG - 2) / 3) as u32,
        words,
        tag_ub,
        next_id: AtomicU32::new(0),
        reply_wait: cfg
            .connect_timeout
            .clamp(Duration::from_secs(1), Duration::from_secs(60)),
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
        fresh: AtomicBool::new(false),
        progress: Mutex::new(None),
    });
    let w = world.clone();
    let handle = std::thread::Builder::new()
        .name("ipl-mpi".into())
        .spawn(move || progress(&w, &*acceptor))
        .map_err(|e| Error::io("mpi: starting the progress thread", e))?;
    *world.progress.lock() = Some(handle);
    *WORLD.lock() = Some(world.clone());
    tracing::debug!(rank, size, tag_ub, "MPI started");
    Ok((MpiDriver { world }, format!("mpi:{rank}")))
}

/// Whether the launcher keeps the job running when a rank dies (OpenMPI's `mpirun
/// --enable-recovery`, or its fault-tolerant MPI), which tells the ranks so in their
/// environment.
fn job_outlives_dead_ranks() -> bool {
    [
        "OMPI_MCA_orte_enable_recovery",
        "PRTE_MCA_prte_enable_recovery",
        "OMPI_MCA_mpi_ft_enable",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|x| matches!(x.trim(), "1" | "true" | "yes" | "enabled")))
}

/// Stops the progress thread and finalises MPI (the node leaves). Connections still open can
/// no longer send; their buffers in flight are kept for ever.
///
/// Where large pieces may go from their senders' memory, the progress thread first goes on
/// until every rank is leaving (a barrier of all, which `MPI_Finalize` would wait for anyway):
/// a sender that looked at this node just before it left may still send it a piece, which
/// MPI completes only once this process takes it, and the sender would otherwise wait for ever
/// (see `conn::sink::complete_direct`). Meanwhile the progress thread discards what comes for the
/// closed connections, as it does while the node runs.
pub(crate) fn finish() {
    let Some(world) = WORLD.lock().take() else {
        return;
    };
    if world.send_from_caller {
        wait_for_every_rank(&world);
    }
    world.stop.store(true, Ordering::SeqCst);
    world.wake.notify_all();
    if let Some(h) = world.progress.lock().take() {
        let _ = h.join();
    }
    let mut live = world.live.write();
    if *live {
        *live = false;
        // SAFETY: MPI was initialised by `start` and is finalised once (the write lock and
        // `live` keep every other call of this process out from now on).
        let rc = unsafe { mpi::ffi::MPI_Finalize() };
        tracing::debug!(rc, "MPI finalised");
    }
}

/// Waits until every rank is leaving too (see [`finish`]).
fn wait_for_every_rank(world: &World) {
    let started = {
        let Ok(live) = world.mpi() else {
            return;
        };
        raw::ibarrier_on(&live, &world.words)
    };
    let mut req = match started {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("mpi: waiting for every rank to leave: {e}");
            return;
        }
    };
    tracing::debug!("mpi: waiting for every rank to leave");
    let mut backoff = Backoff::default();
    loop {
        let done = {
            let Ok(live) = world.mpi() else {
                return;
            };
            raw::test(&live, &mut req)
        };
        match done {
            Ok(true) => return,
            Ok(false) => backoff.pause(),
            Err(e) => {
                tracing::warn!("mpi: waiting for every rank to leave: {e}");
                return;
            }
        }
    }
}

/// The progress thread: takes connect requests in, tells sinks that their receiver has gone,
/// wakes parked receivers whose connections have messages, and discards what is sent to
/// connections nobody reads.
fn progress(world: &Arc<World>, acceptor: &dyn Acceptor) {
    let mut replies = Outbox::default();
    let mut backoff = Backoff::default();
    let mut requests: Vec<(c_int, Vec<u8>)> = Vec::new();
    let mut wake: Vec<Arc<Waker>> = Vec::new();
    while !world.stop.load(Ordering::SeqCst) {
        let armed = {
            let Ok(live) = world.mpi() else {
                break;
            };
            let _ = replies.reap(world);
            while let Ok(Some(m)) = raw::improbe(&live, raw::any_source(), TAG_CONNECT) {
                let source = m.source;
                if m.len > MAX_CONNECT_REQUEST {
                    tracing::warn!(
                        source,
                        len = m.len,
                        "mpi: a connect request of more than {MAX_CONNECT_REQUEST} bytes, \
                         discarded"
                    );
                    m.discard(&live);
                    continue;
                }
                match m.receive_vec(&live) {
                    Ok(v) => requests.push((source, v)),
                    Err(e) => tracing::warn!("mpi: receiving a connect request: {e}"),
                }
            }
            let mut st = world.state.lock();
            take_notices(&live, &mut st, &mut wake);
            st.watches.retain(|w| Arc::strong_count(w) > 1);
            // Pieces still to take are looked for again soon.
            let mut armed = !st.takes.is_empty();
            for w in &st.watches {
                if w.armed.load(Ordering::Acquire) {
                    if w.ready(&live, w.bulk.load(Ordering::Acquire)) {
                        w.armed.store(false, Ordering::Release);
                        wake.push(w.waker.clone());
                    } else {
                        armed = true;
                    }
                }
            }
            discard_drained(&live, &mut st);
            armed
        };
        let busy = !requests.is_empty() || !wake.is_empty();
        for w in wake.drain(..) {
            w.notify();
        }
        for (source, request) in requests.drain(..) {
            accept(world, acceptor, source, &request, &mut replies);
        }
        if busy || world.fresh.swap(false, Ordering::AcqRel) {
            backoff = Backoff::default();
        } else if armed {
            backoff.pause();
        } else {
            let mut st = world.state.lock();
            let waiting = st.watches.iter().any(|w| w.armed.load(Ordering::Acquire));
            if !waiting && !world.stop.load(Ordering::SeqCst) {
                st.napping = true;
                world.wake.wait_for(&mut st, NAP);
                st.napping = false;
            }
            backoff = Backoff::default();
        }
    }
    // What reached connections nobody reads by now is discarded once more: a sender's send
    // from its caller's memory completes only once this process has taken it.
    if let Ok(live) = world.mpi() {
        discard_drained(&live, &mut world.state.lock());
    }
    replies.finish(world, Instant::now() + Duration::from_secs(1));
}

/// Acts on the notices that came ([`TAG_NOTICE`]): tells sinks whose receiver stopped reading,
/// and takes the pieces that senders asked this process to take for its streams, those asked
/// now and those whose pieces had not all come before. Streams that got pieces go to `wake`.
fn take_notices(live: &Live<'_>, st: &mut State, wake: &mut Vec<Arc<Waker>>) {
    while let Ok(Some(m)) = raw::improbe(live, raw::any_source(), TAG_NOTICE) {
        let (source, len) = (m.source, m.len);
        let mut b = [0u8; 12];
        if len != 4 && len != 12 {
            m.discard(live);
            continue;
        }
        if m.receive(live, &mut b[..len]).is_err() {
            continue;
        }
        let id = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
        if len == 4 {
            // A receiver stopped reading.
            if let Some(s) = st.sinks.get(&id).and_then(Weak::upgrade) {
                s.receiver_gone.store(true, Ordering::Release);
            }
        } else if st.takes.len() < MAX_TAKES {
            let until = u64::from_le_bytes(b[4..].try_into().expect("8 bytes"));
            st.takes.push((source, id, until));
        }
    }
    let State { takes, streams, .. } = st;
    takes.retain(|&(source, id, until)| {
        // A stream that is gone has its pieces discarded by its drain.
        let Some(t) = streams.get(&(source, id)).and_then(Weak::upgrade) else {
            return false;
        };
        let (done, took) = t.take_until(live, source, tags(id).2, until);
        if took {
            wake.push(t.waker.clone());
        }
        !done
    });
}

/// Discards what reached connections whose receiver stopped reading, and forgets those whose
/// end has come.
fn discard_drained(live: &Live<'_>, st: &mut State) {
    st.drains.retain(|&(source, tag, bulk_tag)| {
        let mut end = false;
        while let Ok(Some(m)) = raw::improbe(live, source, tag) {
            end |= m.len == 0;
            m.discard(live);
            if end {
                break;
            }
        }
        // Pieces sent before the end have arrived by the time it has (MPI keeps one sender's
        // messages in order on a communicator).
        while let Ok(Some(m)) = raw::improbe(live, source, bulk_tag) {
            m.discard(live);
        }
        !end
    });
}

/// Hands a connect request from `source` to the acceptor and answers it.
fn accept(
    world: &Arc<World>,
    acceptor: &dyn Acceptor,
    source: c_int,
    request: &[u8],
    replies: &mut Outbox,
) {
    let Some((id, request)) = request
        .split_first_chunk::<4>()
        .map(|(id, r)| (u32::from_le_bytes(*id), r))
        .filter(|(id, _)| *id <= world.max_id)
    else {
        tracing::warn!(source, "mpi: a connect request without a connection number");
        return;
    };
    let admission = acceptor.admit(request);
    let mut accepted = false;
    if let Some(inbox) = admission.inbox {
        match MpiStream::new(world.clone(), source, id, inbox.waker()) {
            Ok(stream) => {
                inbox.attach(Box::new(stream));
                accepted = true;
            }
            Err(e) => tracing::warn!(source, "mpi: posting a connection's receive: {e}"),
        }
    }
    let mut reply = Vec::with_capacity(1 + admission.reply.len());
    reply.push(u8::from(accepted));
    reply.extend_from_slice(&admission.reply);
    if let Err(e) = replies.push(world, source, tags(id).1, Bytes::from(reply)) {
        tracing::warn!(source, "mpi: answering a connect request: {e}");
    }
}

impl Driver for MpiDriver {
    fn connect(&self, peer: &NodeId, request: &[u8]) -> Result<Dialed> {
        let world = &self.world;
        let lost = |reason: String| Error::ConnectionLost {
            peer: peer.to_string(),
            reason,
        };
        let rank = peer
            .address()
            .strip_prefix("mpi:")
            .and_then(|r| r.parse::<c_int>().ok())
            .filter(|r| (0..world.size).contains(r))
            .ok_or_else(|| {
                lost(format!(
                    "'{}' is not the address of one of the {} MPI ranks",
                    peer.address(),
                    world.size
                ))
            })?;
        let id = world.next_id.fetch_add(1, Ordering::Relaxed);
        if id > world.max_id {
            return Err(lost(format!(
                "this process has opened all the {} connections that MPI's tags can number",
                world.max_id + 1
            )));
        }
        let mut outbox = Outbox::default();
        let mut message = Vec::with_capacity(4 + request.len());
        message.extend_from_slice(&id.to_le_bytes());
        message.extend_from_slice(request);
        outbox
            .push(world, rank, TAG_CONNECT, Bytes::from(message))
            .map_err(|e| lost(format!("sending the connect request to rank {rank}: {e}")))?;
        let deadline = Instant::now() + world.reply_wait;
        let mut backoff = Backoff::default();
        let reply = loop {
            let found = {
                let live = world.mpi().map_err(|e| lost(e.to_string()))?;
                raw::improbe(&live, rank, tags(id).1)
                    .and_then(|m| m.map(|m| m.receive_vec(&live)).transpose())
                    .map_err(|e| lost(format!("waiting for rank {rank}'s answer: {e}")))?
            };
            if let Some(r) = found {
                break r;
            }
            if Instant::now() > deadline {
                return Err(lost(format!(
                    "rank {rank} did not answer a connect request within {:?}",
                    world.reply_wait
                )));
            }
            backoff.pause();
        };
        let Some((&accepted, reply)) = reply.split_first() else {
            return Err(Error::Decode {
                origin: peer.to_string(),
                reason: "an empty answer to a connect request".into(),
            });
        };
        let sink = (accepted == 1).then(|| {
            let shared = Arc::new(SinkShared::default());
            world.state.lock().sinks.insert(id, Arc::downgrade(&shared));
            Box::new(MpiSink::new(world.clone(), rank, id, shared, outbox)) as Box<dyn super::Sink>
        });
        tracing::trace!(to = rank, id, accepted, "mpi connection");
        Ok(Dialed {
            reply: reply.to_vec(),
            sink,
            driver: "mpi",
        })
    }
}
