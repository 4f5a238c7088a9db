//! A process of a bulk-synchronous program: packets, supersteps and the `sync` protocol.

use crate::board::{self, Board};
use crate::drma::{PendingGet, Slot};
use crate::error::{Error, Result};
use crate::inbox::{InPart, Incoming, Peek};
use crate::net::{Ctx, Msg, Net, RoundWait, Stats, StepWait};
use crate::number::Number;
use crate::op;
use crate::options::Options;
use crate::outbox::{packet_type_name, Outbox};
use crate::trace::StepTrace;
use crate::wire::Header;
use ipl::quick_lock::{QuickMutex, QuickMutexGuard};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

/// One process of a bulk-synchronous program.
///
/// A program is a sequence of supersteps. In a superstep a process computes and sends packets
/// ([`send`](Bsp::send), [`send_slice`](Bsp::send_slice), [`put`](Bsp::put),
/// [`get`](Bsp::get)); [`sync`](Bsp::sync) ends the superstep on every process, and the packets
/// sent in it are then readable with [`recv`](Bsp::recv) until the next `sync`. Collective
/// operations ([`all_reduce`](Bsp::all_reduce), [`broadcast`](Bsp::broadcast),
/// [`gather`](Bsp::gather), [`total_exchange`](Bsp::total_exchange)) must be called by every
/// process in the same order; they do not end the superstep.
///
/// After an error from `sync` or a collective the processes no longer agree on where they are:
/// the program should end (dropping the `Bsp` tells the others that this process left).
pub struct Bsp {
    /// The connections, shared by this process's handles of the whole machine and of groups.
    net: Arc<QuickMutex<Net>>,
    ibis: ipl::Ibis,
    pub(crate) opts: Options,
    /// The group (0: the whole machine).
    pub(crate) comm: u64,
    /// The pid in the whole machine of each pid of this group.
    pub(crate) members: Arc<[usize]>,
    /// The pid in this group of each pid of the whole machine (`u32::MAX`: not a member).
    pid_of: Arc<[u32]>,
    pub(crate) pid: usize,
    pub(crate) nprocs: usize,
    pub(crate) superstep: u64,
    pub(crate) seq: u64,
    /// The sequence number of this handle's last sync: a sync whose number follows it ends a
    /// superstep that called no collective (see the board's "Waiting").
    last_sync_seq: u64,
    /// An operation begun (see [`begin_op`](Bsp::begin_op)) that the connections have not been
    /// told of yet: they are told under the first lock the operation takes to send or receive,
    /// instead of under a lock of its own.
    unstarted: Cell<Option<u64>>,
    pub(crate) out: Vec<Outbox>,
    /// Bytes buffered for other processes in this superstep.
    buffered: usize,
    /// Data messages sent to each process in this superstep, by connection.
    via_control: Vec<u32>,
    via_data: Vec<u32>,
    /// The vector the next sync gathers those counts in (kept from sync to sync).
    counts: Vec<u64>,
    incoming: Incoming,
    pub(crate) regs: Vec<Option<Box<dyn Slot>>>,
    pub(crate) gets: Vec<PendingGet>,
    pub(crate) instance: u64,
    /// What this handle counted since the process's counters were last updated.
    uncounted: Uncounted,
    /// What a traced run records of this handle's supersteps.
    pub(crate) trace: Option<Box<StepTrace>>,
    /// The host board, on the whole machine's handle when every process runs on this host
    /// (see [`board`]).
    pub(crate) board: Option<Arc<Board>>,
    /// Reused by the board's operations for the rows they read.
    board_row: Vec<u64>,
    /// Whether the host board was set up (or found not to be wanted).
    board_checked: bool,
    /// The other processes of the host board whose memory this process reads directly, by
    /// pid (`None` for itself): large operations on the board then move each process's data
    /// in one copy, as MPI's shared-memory collectives do. Empty where not every process can
    /// read every other's memory (see [`Bsp::meet_peers`]).
    pub(crate) board_peers: Vec<Option<ipl::shared_memory::PeerMemory>>,
    /// Whether every large operation on the board reads from `board_peers`, or only those
    /// whose readers do not wait for one another (all-to-alls and scatters): where the
    /// processes outnumber the host's processors (see [`Options::single_copy`]).
    pub(crate) peers_everywhere: bool,
    /// Keeps `Bsp` from being `Sync` whatever its other fields: `net` takes the
    /// connections' lock with plain stores when no other handle shares them, which is sound
    /// only while no other thread can use this handle at the same time.
    _not_sync: PhantomData<Cell<()>>,
}

/// Counts a handle keeps until it next holds the connections' lock anyway (its next `sync`),
/// rather than take that lock for every packet and superstep.
#[derive(Default)]
struct Uncounted {
    /// Packets sent.
    packets: u64,
    /// Supersteps completed.
    supersteps: u64,
    /// Operations on the host board.
    board_operations: u64,
}

impl Uncounted {
    /// Adds these counts to the process's counters `stats`.
    fn add_to(&self, stats: &mut Stats) {
        stats.packets_sent += self.packets;
        stats.supersteps += self.supersteps;
        stats.board_operations += self.board_operations;
    }
}

impl std::fmt::Debug for Bsp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bsp")
            .field("pid", &self.pid)
            .field("nprocs", &self.nprocs)
            .field("superstep", &self.superstep)
            .finish_non_exhaustive()
    }
}

impl Drop for Bsp {
    fn drop(&mut self) {
        let mut net = self.net();
        // What this handle counted and did not pass on yet stays in the process's counters.
        self.uncounted.add_to(&mut net.stats);
        if self.comm != 0 {
            net.leave_comm(self.comm);
        }
    }
}

/// A wait on the host board polls the control port and looks at failures once every this many
/// looks at the board.
const BOARD_STEP: u32 = 64;
/// Where every process has a processor, a wait on the host board first only looks this many
/// times (some tens of microseconds), which is all most waits take: polling the control port
/// is a system call, and one under way when the row comes delays the process that waits.
/// What the polls look for (a peer in another operation, a failure, the time limit) is
/// found as well a little later.
const BOARD_LOOKS_FIRST: u32 = 2048;
/// Up to this many processes, each reads the others' memory directly where the system
/// allows it (a descriptor for each other process).
const PEERS_MAX: usize = 64;
/// How long a wait on the host board looks before it sleeps between looks.
const BOARD_SPIN: std::time::Duration = std::time::Duration::from_millis(1);

impl Bsp {
    /// Makes this node of a closed pool a process of a bulk-synchronous program: its pid is its
    /// rank, `nprocs` the pool's size. Every member of the pool must call it.
    pub fn new(ibis: ipl::Ibis) -> Result<Bsp> {
        Bsp::with_options(ibis, Options::default())
    }

    /// Like [`Bsp::new`] with explicit [`Options`].
    pub fn with_options(ibis: ipl::Ibis, opts: Options) -> Result<Bsp> {
        let net = Net::new(ibis.clone(), opts.clone())?;
        let pid = net.pid;
        let p = net.nodes.len();
        tracing::debug!(pid, nprocs = p, "bsp process ready");
        let all: Vec<usize> = (0..p).collect();
        Ok(Bsp::handle(
            Arc::new(QuickMutex::new(net)),
            ibis,
            opts,
            0,
            all,
            pid,
        ))
    }

    /// The host board, set up first if this is the first time an operation could use it: at
    /// the whole machine's first sync, all-to-all, scatter of numbers, or small all-reduce,
    /// all-gather, reduce-scatter, reduce or scan, which every process reaches at the same
    /// point of the program. Not in the local form, whose processes are threads of one
    /// process, nor in a group.
    pub(crate) fn host_board(&mut self) -> Result<Option<Arc<Board>>> {
        if !self.board_checked {
            self.board_checked = true;
            if self.nprocs > 1 && self.ibis.config().driver != ipl::Driver::Inproc {
                self.attach_board()?;
            }
        }
        Ok(self.board.clone())
    }

    /// Sets up the host board (see [`board`]) when every process runs on this
    /// host over the shared-memory driver, and `BSP_HOST_BOARD` is not `0`: pid 0 creates it
    /// and sends its name to every process (round 0), each says whether it opened it (round
    /// 1), and pid 0 says whether all did (round 2). Every process takes part whatever it
    /// finds, so that all stay in step; the board is used only if every process opened it.
    fn attach_board(&mut self) -> Result<()> {
        let (p, pid) = (self.nprocs, self.pid);
        let switches = self.net().switches;
        let want = self.ibis.config().driver == ipl::Driver::Shm
            && switches.host_board
            && p <= board::MAX_PROCS;
        // The sync over MPI (see `mpi_sync`) is agreed in the same rounds.
        #[cfg(feature = "mpi")]
        let words = if self.ibis.config().driver == ipl::Driver::Mpi && switches.mpi_sync {
            let nodes = self.net().nodes.clone();
            crate::mpi_words::MpiSync::new(&self.ibis, &nodes)
        } else {
            None
        };
        #[cfg(not(feature = "mpi"))]
        let words: Option<()> = None;
        let has_words = words.is_some();
        let call = self.begin(op::HOST_BOARD, p as u64);
        let flags = crate::wire::native_flag();
        let not_wanted = |e: std::io::Error| tracing::debug!(pid, "no host board: {e}");
        let mut words_everywhere = false;
        let mine = if pid == 0 {
            let created = if want {
                Board::create(p).map_err(not_wanted).ok()
            } else {
                None
            };
            // Pid 0 keeps the board's file open, and so its name valid, until every process
            // has answered, or the setup fails.
            let name = created.as_ref().map_or(String::new(), |c| c.1.name.clone());
            for d in 1..p {
                self.send_bytes(&call, d, 0, name.as_bytes(), flags)?;
            }
            let mut all = created.is_some();
            let mut all_words = has_words;
            for d in 1..p {
                let msg = self.recv_msg(&call, d, 1)?;
                let said = msg.payload().first().copied().unwrap_or(0);
                all &= said & 1 != 0;
                all_words &= said & 2 != 0;
            }
            words_everywhere = all_words;
            created.map(|c| c.0).filter(|_| all)
        } else {
            let msg = self.recv_msg(&call, 0, 0)?;
            let name = String::from_utf8_lossy(msg.payload()).into_owned();
            let opened = if want && !name.is_empty() {
                Board::open(&name, p, pid).map_err(not_wanted).ok()
            } else {
                None
            };
            let said = u8::from(opened.is_some()) | u8::from(has_words) << 1;
            self.send_bytes(&call, 0, 1, &[said], flags)?;
            opened
        };
        let everyone = if pid == 0 {
            let all = mine.is_some();
            let said = u8::from(all) | u8::from(words_everywhere) << 1;
            for d in 1..p {
                self.send_bytes(&call, d, 2, &[said], flags)?;
            }
            all
        } else {
            let said = self.recv_msg(&call, 0, 2)?.payload().first().copied();
            let said = said.unwrap_or(0);
            words_everywhere = said & 2 != 0;
            said & 1 != 0
        };
        #[cfg(feature = "mpi")]
        if words_everywhere {
            tracing::debug!(pid, nprocs = p, "sync over MPI");
            self.net().words = words;
        }
        #[cfg(not(feature = "mpi"))]
        let _ = (words, words_everywhere);
        if let (true, Some(b)) = (everyone, mine) {
            tracing::debug!(pid, nprocs = p, "host board in use");
            let b = Arc::new(b);
            self.net().board = Some(b.clone());
            self.board = Some(b.clone());
            if p <= PEERS_MAX {
                // The setup's operations are not the program's.
                let counted = self.uncounted.board_operations;
                self.meet_peers(&b, &call)?;
                self.uncounted.board_operations = counted;
            }
        }
        Ok(())
    }

    /// Finds out, with two operations of the new host board (`call`, the setup's), whether
    /// every process can read every other's memory directly: each announces its pid and a
    /// probe, opens the others' memory, and says whether it could. Every process takes part
    /// whatever it finds, so that all agree. Not where the shared-memory driver's single copy
    /// is turned off (`IPL_SHM_SINGLE_COPY=0`), nor where [`Options::single_copy`] says not
    /// to (by default: where the host has fewer processors than processes).
    fn meet_peers(&mut self, board: &Board, call: &crate::collective::Call) -> Result<()> {
        use ipl::shared_memory::PeerMemory;
        let (p, me) = (self.nprocs, self.pid);
        let (addr, probe) = PeerMemory::probe();
        board.announce(std::process::id(), addr, &probe);
        self.on_board(board, call, &[], |_, _| Ok(()))?;
        let want = self.ibis.config().shm_single_copy && self.opts.single_copy != Some(false);
        // Where the processes crowd the host, a reader may wait for a processor, and in an
        // operation whose readers wait for one another (a scan's chain, a reduction's tree)
        // every process waits with it: those keep the bulk halves there.
        let everywhere = self.opts.single_copy.unwrap_or(!self.ibis.pool().crowded());
        let peers: Vec<Option<PeerMemory>> = (0..p)
            .map(|j| {
                let (pid, addr, probe) = board.announced(j);
                let pid = i32::try_from(pid).ok()?;
                (want && j != me).then(|| PeerMemory::open(pid, addr, &probe))?
            })
            .collect();
        let able = want
            && peers
                .iter()
                .enumerate()
                .all(|(j, m)| j == me || m.is_some());
        let (mut all, mut all_everywhere) = (true, true);
        let mine = u64::from(able) | u64::from(everywhere) << 1;
        self.on_board(board, call, &[mine], |_, row| {
            all &= row[0] & 1 == 1;
            all_everywhere &= row[0] & 2 == 2;
            Ok(())
        })?;
        tracing::debug!(
            pid = me,
            single_copy = all,
            everywhere = all_everywhere,
            "host board peers"
        );
        if all {
            self.board_peers = peers;
            self.peers_everywhere = all_everywhere;
        }
        Ok(())
    }

    /// Waits until `n` processes have read what this process exposed for board operation `b`
    /// (`call`), so that it may change or free that memory; then [clears](Board::clear) it,
    /// which tells the readers that this process was alive after their reads.
    pub(crate) fn wait_acks(
        &self,
        board: &Board,
        call: &crate::collective::Call,
        b: u64,
        n: u64,
    ) -> Result<()> {
        if board.acks(b) < n {
            let mut wait = crate::net::BoardWait::new();
            let me = self.pid;
            self.board_wait(board, me, |bd| Ok(bd.acks(b) >= n), call, &mut wait)?;
        }
        board.clear(b);
        Ok(())
    }

    /// Whether this process's reads of the others' memory are confirmed by the writers'
    /// clearing ([`confirm_reads`](Bsp::confirm_reads)) rather than by asking the system,
    /// after each read, whether the writer had exited meanwhile (a system call, some 0.4 us).
    /// Where every process has a processor of its own, the clearing comes at about the time
    /// of the read and costs a look. Where the processes crowd the host, waiting for it
    /// holds every reader until each writer has seen each of its readers' acknowledgements,
    /// a round more of waits for processes that may not be running, which the system call
    /// spares: there, at P = 4 on 2 processors, a 64 KiB scatter took 0.68x [0.57, 0.99] of
    /// its time with the clearing, and all-to-alls were within the noise
    /// (`results/crowded-confirmed-reads-against-e5c7e72-20261129-1301`). The processes agree
    /// on `peers_everywhere` when they set the board up.
    fn reads_confirmed_by_clearing(&self) -> bool {
        self.peers_everywhere
    }

    /// Reads `dst.len()` bytes at `addr` of the memory `pid` exposed for board operation `b`
    /// straight into `dst`, and tells it so. The bytes are `pid`'s once
    /// [`confirm_reads`](Bsp::confirm_reads) for `pid` says so.
    pub(crate) fn pull(
        &self,
        board: &Board,
        (pid, b): (usize, u64),
        addr: u64,
        dst: &mut [u8],
    ) -> Result<()> {
        let peer = self.peer(pid)?;
        if self.reads_confirmed_by_clearing() {
            peer.read_exact_unconfirmed(dst, addr)
        } else {
            peer.read_exact(dst, addr)
        }
        .map_err(|e| self.board_error(pid, format!("reading its memory: {e}")))?;
        board.ack(pid, b);
        Ok(())
    }

    /// Appends the `n` numbers at `addr` of the memory `pid` exposed for board operation `b`
    /// to `out`, read straight into its spare room, and tells `pid` so. The numbers are
    /// `pid`'s once [`confirm_reads`](Bsp::confirm_reads) for `pid` says so.
    pub(crate) fn pull_append<T: crate::Number>(
        &self,
        board: &Board,
        (pid, b): (usize, u64),
        addr: u64,
        n: usize,
        out: &mut Vec<T>,
    ) -> Result<()> {
        let peer = self.peer(pid)?;
        if self.reads_confirmed_by_clearing() {
            peer.read_append_unconfirmed(out, n, addr)
        } else {
            peer.read_append(out, n, addr)
        }
        .map_err(|e| self.board_error(pid, format!("reading its memory: {e}")))?;
        board.ack(pid, b);
        Ok(())
    }

    /// Waits until every process of `pids`, whose memory this process read for board
    /// operation `b` (`call`; [`pull`](Bsp::pull), [`pull_append`](Bsp::pull_append)), has
    /// seen the acknowledgements of all its readers ([`wait_acks`](Bsp::wait_acks)). A
    /// process does that after this process's reads, so it had not exited when they ended,
    /// and they read its memory: a pid is given to another process only once the one it named
    /// has exited. Where it exited, the wait ends with an error as the board's waits do. This
    /// costs the readers a look at a word the writer stores anyway at about the time they read
    /// it, where asking the system whether the process is still there after every read (see
    /// `ipl::shared_memory::PeerMemory::read_append`) took a system call of some 0.4 us.
    pub(crate) fn confirm_reads(
        &self,
        board: &Board,
        call: &crate::collective::Call,
        b: u64,
        pids: impl IntoIterator<Item = usize>,
    ) -> Result<()> {
        if !self.reads_confirmed_by_clearing() {
            // Each read was confirmed as it was made.
            return Ok(());
        }
        let mut wait = crate::net::BoardWait::new();
        for pid in pids {
            if !board.cleared(pid, b) {
                self.board_wait(board, pid, |bd| Ok(bd.cleared(pid, b)), call, &mut wait)?;
            }
        }
        Ok(())
    }

    /// `pid`'s memory, for the board's single copy.
    fn peer(&self, pid: usize) -> Result<&ipl::shared_memory::PeerMemory> {
        self.board_peers
            .get(pid)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.board_error(pid, "no way to read its memory".into()))
    }

    /// Waits until `ready` says that `pid` has written what this process waits for (in an
    /// `op`): looks at its row, polling
    /// the control port and looking at failures every [`BOARD_STEP`] looks (see
    /// [`Net::board_step`](crate::net::Net::board_step)), and sleeps between looks once the
    /// wait has lasted [`BOARD_SPIN`]. Where the host's processes outnumber its processors, it
    /// yields between looks instead of spinning. Out of line: the rest of an operation on the
    /// board is counted without it (`scripts/count-instructions`).
    #[inline(never)]
    fn board_wait(
        &self,
        board: &Board,
        pid: usize,
        ready: impl Fn(&Board) -> std::result::Result<bool, String>,
        call: &crate::collective::Call,
        wait: &mut crate::net::BoardWait,
    ) -> Result<()> {
        let look = |this: &Self| match ready(board) {
            Ok(true) => Ok(Some(())),
            Ok(false) => Ok(None),
            Err(reason) => Err(this.board_error(pid, reason)),
        };
        let nap = || board.sleep_on(pid, self.opts.wait_slice, &ready);
        self.wait_looking(call, wait, None, look, nap)
    }

    /// Waits until `look` finds what this process waits for (in operation `call`, outside the
    /// messages: on the host board, or on the mpi driver's word channel): looks again and
    /// again, polling the control port and looking at failures every [`BOARD_STEP`] looks
    /// (see [`Net::board_step`](crate::net::Net::board_step)), and calls `nap` between looks
    /// once the wait has lasted [`BOARD_SPIN`]. Where the host's processes outnumber its
    /// processors, it yields between looks instead of spinning. `waiting_for` as in
    /// `board_step`.
    #[inline(always)]
    pub(crate) fn wait_looking<R>(
        &self,
        call: &crate::collective::Call,
        wait: &mut crate::net::BoardWait,
        waiting_for: Option<usize>,
        mut look: impl FnMut(&Self) -> Result<Option<R>>,
        nap: impl Fn(),
    ) -> Result<R> {
        let crowded = self.ibis.pool().crowded();
        let mut looks = 0u32;
        loop {
            if let Some(found) = look(self)? {
                return Ok(found);
            }
            looks = looks.wrapping_add(1);
            if looks % BOARD_STEP != 0 || (!crowded && looks < BOARD_LOOKS_FIRST) {
                if crowded {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let waited =
                self.net_for_op()
                    .board_step(wait, call.op, call.sig, &call.ctx, waiting_for)?;
            if waited >= BOARD_SPIN {
                nap();
            }
        }
    }

    /// The error for what pid `src` wrote to the host board that this process cannot use.
    pub(crate) fn board_error(&self, src: usize, reason: String) -> Error {
        Error::Decode {
            pid: self.pid,
            superstep: self.superstep,
            src,
            reason,
        }
    }

    /// Writes this process's row of operation `call` on the host board without waiting for
    /// the others, and returns its number: for an operation whose messages, which follow,
    /// wait for every process anyway (see `all_to_all_into`), or that reads the others' rows
    /// its own way ([`read_rows_as_they_come`](Bsp::read_rows_as_they_come)).
    pub(crate) fn post_on_board(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
    ) -> Result<u64> {
        self.publish_row(board, call, payload, false)
    }

    /// Writes this process's row of operation `call` on the host board, once there is room
    /// for it, and counts it; returns its number. A `held` row holds its readers back until
    /// this process releases it (see [`board`], "Waiting").
    fn publish_row(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
        held: bool,
    ) -> Result<u64> {
        self.board_room(board, call)?;
        let b = board.publish(call.seq, call.op, call.sig, payload, held);
        self.uncounted.board_operations += 1;
        Ok(b)
    }

    /// Waits, if need be, until this process may write its next operation on the host board
    /// (`call`): until every process has written the one after the operation that last used
    /// its slot, and so has finished reading that (see [`Board::room_for`]). Only a process
    /// that ran a row's slots ahead of another waits.
    fn board_room(&mut self, board: &Board, call: &crate::collective::Call) -> Result<()> {
        let Some(need) = board.room_for() else {
            return Ok(());
        };
        self.board_room_wait(board, call, need)
    }

    #[inline(never)]
    fn board_room_wait(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        need: u64,
    ) -> Result<()> {
        let mut wait = crate::net::BoardWait::new();
        for j in (0..self.nprocs).filter(|&j| j != self.pid) {
            match board.reached(j, need) {
                Ok(true) => {}
                Ok(false) => self.board_wait(board, j, |b| b.reached(j, need), call, &mut wait)?,
                Err(why) => return Err(self.board_error(j, why)),
            }
        }
        board.all_reached(need);
        Ok(())
    }

    /// Operation `call` of the whole machine on the host board:
    /// writes `payload` to this process's row, waits for every other process's, and gives
    /// `each` every process's payload in pid order (this process's own included).
    pub(crate) fn on_board(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
        each: impl FnMut(usize, &[u64]) -> std::result::Result<(), String>,
    ) -> Result<()> {
        self.on_board_rows(board, call, payload, 0..self.nprocs, each)
    }

    /// Operation `call` of the whole machine on the host board: writes `payload` to this
    /// process's row, waits for the rows of the pids in `rows` (in increasing order), and
    /// gives `each` their payloads, this process's own as it is if `rows` has it. A process
    /// that reads every row has room for its next `K - 1` operations (see
    /// [`Board::all_reached`]).
    pub(crate) fn on_board_rows(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
        rows: std::ops::Range<usize>,
        each: impl FnMut(usize, &[u64]) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let b = self.publish_row(board, call, payload, false)?;
        self.read_rows(board, call, b, payload, rows, each)
    }

    /// [`on_board_rows`](Bsp::on_board_rows) for an operation with a bulk: writes `payload`
    /// to this process's row and `bulk`, its parts one after another, to its bulk half (see
    /// [`Board::fill`]), which readers copy out as it comes ([`bulk_from`](Bsp::bulk_from)),
    /// then reads the rows of `rows`. Returns the operation's number on the board.
    pub(crate) fn on_board_bulk(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
        bulk: &[&[u8]],
        rows: std::ops::Range<usize>,
        each: impl FnMut(usize, &[u64]) -> std::result::Result<(), String>,
    ) -> Result<u64> {
        let b = self.publish_bulk(board, call, payload, bulk)?;
        self.read_rows(board, call, b, payload, rows, each)?;
        Ok(b)
    }

    /// The writing half of [`on_board_bulk`](Bsp::on_board_bulk): writes `payload` to this
    /// process's row and `bulk` to its bulk half, and returns the operation's number.
    pub(crate) fn publish_bulk(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        payload: &[u64],
        bulk: &[&[u8]],
    ) -> Result<u64> {
        // A row's two bulk halves take turns: the one this operation writes was written two
        // operations ago at the latest, which every process must have finished reading.
        let before = board.next_op() - 1;
        if !board.known_reached(before) {
            self.board_room_wait(board, call, before)?;
        }
        board.begin_bulk();
        let b = self.publish_row(board, call, payload, false)?;
        board.fill(b, bulk);
        Ok(b)
    }

    /// Copies bytes `at..at + dst.len()` of `pid`'s bulk of board operation `b` (whose row
    /// this process has read) into `dst`, piece by piece as `pid` writes them, waiting as for
    /// a row in between.
    pub(crate) fn bulk_from(
        &self,
        board: &Board,
        call: &crate::collective::Call,
        (pid, b): (usize, u64),
        at: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let mut done = 0;
        let mut wait = crate::net::BoardWait::new();
        while done < dst.len() {
            let there = usize::try_from(board.filled(pid, b)).unwrap_or(usize::MAX);
            let upto = there.saturating_sub(at).min(dst.len());
            if upto > done {
                board
                    .read_bulk(pid, b, at + done, &mut dst[done..upto])
                    .map_err(|why| self.board_error(pid, why))?;
                done = upto;
                continue;
            }
            let want = (at + done + 1) as u64;
            self.board_wait(
                board,
                pid,
                |bd| Ok(bd.filled(pid, b) >= want),
                call,
                &mut wait,
            )?;
        }
        Ok(())
    }

    /// Reads the rows of the pids in `rows` of board operation `b` (`call`), which this
    /// process has written (`payload`), as [`on_board_rows`](Bsp::on_board_rows) describes.
    pub(crate) fn read_rows(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        b: u64,
        payload: &[u64],
        rows: std::ops::Range<usize>,
        mut each: impl FnMut(usize, &[u64]) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let everyone = rows.len() == self.nprocs;
        let mut row = std::mem::take(&mut self.board_row);
        let mut wait = crate::net::BoardWait::new();
        let me = self.pid;
        for j in rows {
            if j == me {
                each(j, payload).map_err(|why| self.board_error(j, why))?;
                continue;
            }
            match board.arrived(j, b) {
                Ok(true) => {}
                Ok(false) => self.board_wait(board, j, |bd| bd.arrived(j, b), call, &mut wait)?,
                Err(why) => return Err(self.board_error(j, why)),
            }
            self.take_row(board, call, (j, b), &mut row, &mut wait)?;
            each(j, &row).map_err(|why| self.board_error(j, why))?;
        }
        self.board_row = row;
        if everyone {
            board.all_reached(b);
        }
        Ok(())
    }

    /// [`read_rows`](Bsp::read_rows) of every other process's row, in the order the rows
    /// come rather than in pid order, for an operation whose `each` may take the rows in any
    /// order (an all-to-all): where the processes crowd the host, the first to come is read
    /// (and acted on: `each` may read that writer's memory) while later ones wait for a
    /// processor, where in pid order one process not yet running holds up every row after
    /// its own. `each` gets this process too.
    pub(crate) fn read_rows_as_they_come(
        &mut self,
        board: &Board,
        call: &crate::collective::Call,
        b: u64,
        mut each: impl FnMut(&Self, usize, &[u64]) -> Result<()>,
    ) -> Result<()> {
        let mut row = std::mem::take(&mut self.board_row);
        let mut wait = crate::net::BoardWait::new();
        let me = self.pid;
        let mut left: smallvec::SmallVec<[usize; 8]> =
            (0..self.nprocs).filter(|&j| j != me).collect();
        while let Some(&first) = left.first() {
            let mut came = None;
            for (i, &j) in left.iter().enumerate() {
                match board.arrived(j, b) {
                    Ok(true) => {
                        came = Some(i);
                        break;
                    }
                    Ok(false) => {}
                    Err(why) => return Err(self.board_error(j, why)),
                }
            }
            let Some(i) = came else {
                // None has come: wait for any, napping (after the spin) on the first.
                let ready = |bd: &Board| -> std::result::Result<bool, String> {
                    for &j in &left {
                        if bd.arrived(j, b)? {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                };
                self.board_wait(board, first, ready, call, &mut wait)?;
                continue;
            };
            let j = left.remove(i);
            self.take_row(board, call, (j, b), &mut row, &mut wait)?;
            each(self, j, &row)?;
        }
        self.board_row = row;
        board.all_reached(b);
        Ok(())
    }

    /// Reads `pid`'s row of board operation `b`, which has arrived, into `row`, after
    /// checking that it is the same operation as `call`, and waits for its writer to release
    /// it if it is held.
    fn take_row(
        &self,
        board: &Board,
        call: &crate::collective::Call,
        (pid, b): (usize, u64),
        row: &mut Vec<u64>,
        wait: &mut crate::net::BoardWait,
    ) -> Result<()> {
        let (seq, op, sig) = (call.seq, call.op, call.sig);
        let e = board
            .read(pid, b, row)
            .map_err(|why| self.board_error(pid, why))?;
        if (e.seq, e.op, e.sig) != (seq, op, sig) {
            return Err(Error::CollectiveMismatch {
                pid: self.pid,
                seq,
                mine: op::describe_call(op, sig),
                peer: pid,
                theirs: format!(
                    "called {} (operation #{})",
                    op::describe_call(e.op, e.sig),
                    e.seq
                ),
            });
        }
        if e.held {
            self.board_wait(board, pid, |bd| bd.released(pid, b), call, wait)?;
        }
        Ok(())
    }

    /// Starts the traced compute phase of the current superstep now (see
    /// [`trace`](crate::trace)).
    pub(crate) fn begin_compute(&mut self) {
        if let Some(t) = self.trace.as_mut() {
            t.begin_compute();
        }
    }

    /// A handle of group `comm` (0: the whole machine) whose pids are `members`, this
    /// process's being `pid`.
    pub(crate) fn handle(
        net: Arc<QuickMutex<Net>>,
        ibis: ipl::Ibis,
        opts: Options,
        comm: u64,
        members: Vec<usize>,
        pid: usize,
    ) -> Bsp {
        static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let world = net.lock().nodes.len();
        let mut pid_of = vec![u32::MAX; world];
        for (i, &g) in members.iter().enumerate() {
            pid_of[g] = i as u32;
        }
        let p = members.len();
        Bsp {
            net,
            ibis,
            opts,
            comm,
            members: members.into(),
            pid_of: pid_of.into(),
            pid,
            nprocs: p,
            superstep: 0,
            seq: 0,
            last_sync_seq: u64::MAX,
            unstarted: Cell::new(None),
            out: (0..p).map(|_| Outbox::default()).collect(),
            buffered: 0,
            via_control: vec![0; p],
            via_data: vec![0; p],
            counts: Vec::with_capacity(p),
            incoming: Incoming::new(pid, 0, Vec::new()),
            regs: Vec::new(),
            gets: Vec::new(),
            instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            uncounted: Uncounted::default(),
            trace: StepTrace::new(),
            board: None,
            board_row: Vec::new(),
            // Groups have no board; the whole machine sets it up when first needed.
            board_checked: comm != 0,
            board_peers: Vec::new(),
            peers_everywhere: false,
            _not_sync: PhantomData,
        }
    }

    /// The connections, locked. While no other handle shares them (no group of this handle
    /// is alive), with plain stores rather than an atomic read-modify-write, which on the path
    /// of a superstep or a collective costs about 4.7 ns each time.
    #[inline(always)]
    pub(crate) fn net(&self) -> QuickMutexGuard<'_, Net> {
        // SAFETY: `self.net` is this handle's, which this thread is using.
        unsafe { Self::lock_own_net(&self.net) }
    }

    /// [`net`](Bsp::net) on the field alone, for a caller that borrows other fields
    /// of the handle meanwhile.
    ///
    /// # Safety
    /// `net` must be the `net` of a handle that this thread is using.
    #[inline(always)]
    unsafe fn lock_own_net(net: &Arc<QuickMutex<Net>>) -> QuickMutexGuard<'_, Net> {
        if Arc::strong_count(net) == 1 {
            // Pairs with the release decrement of the last other handle's reference.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: no other thread can reach the lock: the count is 1, so the handle this
            // thread uses (as the caller vouches) holds the only reference (no weak ones are
            // ever made), and the handles that shared it are gone, their accesses ordered
            // before this by the fence; a new reference is made only from the handle
            // (`shared_net`), which no other thread can use meanwhile (`Bsp` is not `Sync`,
            // see `_not_sync`).
            return unsafe { ipl::quick_lock::lock_alone(net) };
        }
        net.lock()
    }

    /// The connections, locked for a step of the operation in progress: tells them first of
    /// the operation's start, if it was not told yet (see [`begin_op`](Bsp::begin_op)).
    #[inline(always)]
    fn net_for_op(&self) -> QuickMutexGuard<'_, Net> {
        let mut net = self.net();
        if let Some(seq) = self.unstarted.take() {
            net.started(self.comm, seq);
        }
        net
    }

    /// The connections, shared, for a new handle.
    pub(crate) fn shared_net(&self) -> Arc<QuickMutex<Net>> {
        self.net.clone()
    }

    /// The pid in the whole machine of this group's pid `pid`.
    pub(crate) fn world_pid(&self, pid: usize) -> usize {
        self.members[pid]
    }

    /// Sends a round message of this group's operation to pid `d`.
    pub(crate) fn send_round(
        &self,
        d: usize,
        hdr: Header,
        payload: &[u8],
        ctx: &Ctx,
    ) -> Result<()> {
        let Some(trace) = &self.trace else {
            return self.send_round_on(&mut self.net_for_op(), d, hdr, payload, ctx);
        };
        let since = std::time::Instant::now();
        let sent = self.send_round_on(&mut self.net_for_op(), d, hdr, payload, ctx);
        trace.round(since);
        sent
    }

    /// [`send_round`](Bsp::send_round) on the connections `net` holds locked.
    pub(crate) fn send_round_on(
        &self,
        net: &mut Net,
        d: usize,
        mut hdr: Header,
        payload: &[u8],
        ctx: &Ctx,
    ) -> Result<()> {
        hdr.comm = self.comm;
        net.send_round(self.members[d], hdr, payload, ctx)
    }

    /// Receives a round message of this group's operation from pid `src`.
    // Inlined, as the receive path below it is (see `net::parse`).
    #[inline(always)]
    pub(crate) fn recv_round(
        &self,
        src: usize,
        seq: u64,
        round: u32,
        (op, sig): (u8, u64),
        ctx: &Ctx,
    ) -> Result<Msg> {
        let mut wait = RoundWait::new(self.members[src], self.comm, seq, round, (op, sig));
        let since = self.trace.as_ref().map(|_| std::time::Instant::now());
        // The connections are taken for one step at a time, so that handles of this process
        // on other threads get their turn.
        let received = loop {
            match self.net_for_op().recv_round_step(&mut wait, ctx) {
                Ok(Some(m)) => break Ok(m),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        if let (Some(trace), Some(since)) = (&self.trace, since) {
            trace.round(since);
        }
        received
    }

    /// This process's id, `0..nprocs()`.
    pub fn pid(&self) -> usize {
        self.pid
    }

    /// The number of processes.
    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// The current superstep: the number of `sync` calls completed.
    pub fn superstep(&self) -> u64 {
        self.superstep
    }

    /// The node this process runs on.
    pub fn ibis(&self) -> &ipl::Ibis {
        &self.ibis
    }

    /// The options this process runs with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Counters of what this process has sent so far, through this handle and every other
    /// handle of the process (the whole machine and its groups).
    pub fn stats(&self) -> Stats {
        let mut s = self.net().stats.clone();
        self.uncounted.add_to(&mut s);
        s
    }

    pub(crate) fn bad_pid(&self, what: &'static str, bad: usize) -> Error {
        Error::BadPid {
            pid: self.pid,
            what,
            bad,
            nprocs: self.nprocs,
        }
    }

    /// The next sequence number and its context for an operation all of whose sends and
    /// receives go through [`send_round`](Bsp::send_round) and
    /// [`recv_round`](Bsp::recv_round): the connections learn of its start under the first
    /// lock those take, which saves a lock per operation. An operation that took none (a group
    /// of one) is told of now, before the next one starts, so that they never lag behind.
    pub(crate) fn begin_op(&mut self, op: u8) -> (u64, Ctx) {
        let (seq, ctx) = self.take_seq(op);
        if self.unstarted.replace(Some(seq)).is_some() {
            drop(self.net_for_op());
        }
        (seq, ctx)
    }

    /// The next sequence number and its context, without telling the connections: for a
    /// caller that holds their lock and tells them itself (`Net::started`), or leaves that to
    /// [`begin_op`](Bsp::begin_op).
    fn take_seq(&mut self, op: u8) -> (u64, Ctx) {
        let seq = self.seq;
        self.seq += 1;
        if let Some(t) = &self.trace {
            if op != op::SYNC {
                t.collective();
            }
        }
        (seq, self.ctx(op::name(op), seq))
    }

    pub(crate) fn ctx(&self, op: &'static str, seq: u64) -> Ctx {
        Ctx {
            superstep: self.superstep,
            op,
            seq,
            comm: self.comm,
        }
    }

    /// Accounts `n` bytes just buffered for `dest`; sends buffers early when over budget.
    #[inline]
    pub(crate) fn buffered(&mut self, dest: usize, n: usize) -> Result<()> {
        self.uncounted.packets += 1;
        if dest != self.pid {
            self.buffered += n;
            if self.buffered > self.opts.memory_budget {
                self.flush_early()?;
            }
        }
        Ok(())
    }

    /// Sends the largest buffers now until at most half the budget is buffered.
    #[cold]
    fn flush_early(&mut self) -> Result<()> {
        let ctx = self.ctx("an early send (memory budget)", self.seq);
        let net = self.shared_net();
        let mut net = net.lock();
        while self.buffered > self.opts.memory_budget / 2 {
            let Some(d) = (0..self.nprocs)
                .filter(|&d| d != self.pid)
                .max_by_key(|&d| self.out[d].bytes())
            else {
                break;
            };
            let bytes = self.out[d].bytes();
            if bytes == 0 {
                break;
            }
            let part = self.via_control[d] + self.via_data[d];
            net.send_data(
                self.members[d],
                self.comm,
                self.superstep,
                part,
                &self.out[d],
                true,
                &ctx,
            )?;
            self.via_data[d] += 1;
            self.out[d].clear();
            self.buffered = self.buffered.saturating_sub(bytes);
            if let Some(t) = &mut self.trace {
                t.early_bytes += bytes as u64;
                t.early_messages += 1;
            }
            tracing::trace!(pid = self.pid, to = d, bytes, "sent early");
        }
        Ok(())
    }

    /// Buffers `packet` for process `dest`; it is readable there after the next
    /// [`sync`](Bsp::sync). Any serde type; packets of different types may be mixed.
    /// All packets for one destination in one superstep travel in one message.
    #[inline]
    pub fn send<T: Serialize + ?Sized>(&mut self, dest: usize, packet: &T) -> Result<()> {
        if dest >= self.nprocs {
            return Err(self.bad_pid("send", dest));
        }
        let n = match self.out[dest].push_packet(packet_type_name::<T>(), packet) {
            Ok(n) => n,
            Err(e) => {
                return Err(Error::Encode {
                    pid: self.pid,
                    superstep: self.superstep,
                    type_name: std::any::type_name::<T>(),
                    reason: e.0,
                })
            }
        };
        self.buffered(dest, n)
    }

    /// Buffers a copy of a slice of numbers for `dest`, as raw memory (no serialization). Read
    /// it with [`recv_slice`](Bsp::recv_slice).
    pub fn send_slice<T: Number>(&mut self, dest: usize, data: &[T]) -> Result<()> {
        if dest >= self.nprocs {
            return Err(self.bad_pid("send_slice", dest));
        }
        let n = self.out[dest].push_slice(data);
        self.buffered(dest, n)
    }

    /// Like [`send_slice`](Bsp::send_slice), taking the vector: a large one is not copied at
    /// all, it is written to the connection from its own memory and read at the destination
    /// straight into the vector [`recv_slice`](Bsp::recv_slice) returns.
    pub fn send_vec<T: Number>(&mut self, dest: usize, data: Vec<T>) -> Result<()> {
        if dest >= self.nprocs {
            return Err(self.bad_pid("send_vec", dest));
        }
        let n = self.out[dest].push_vec(data);
        self.buffered(dest, n)
    }

    /// The next packet of the previous superstep, with its sender: packets come in order of
    /// sender pid, and from each sender in the order it sent them. `None` when all are read.
    ///
    /// Asking for another type than the next packet has is an [`Error::TypeMismatch`] naming
    /// both types; the packet stays unread (see [`next_is`](Bsp::next_is) and
    /// [`peek`](Bsp::peek) for streams of mixed types). Types are compared by name with
    /// references removed, so `send(d, &x)` with `x: &T` is read as `T`.
    #[inline]
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<Option<(usize, T)>> {
        self.incoming.recv()
    }

    /// The next slice of numbers (sent with [`send_slice`](Bsp::send_slice) or
    /// [`send_vec`](Bsp::send_vec)), with its sender; an error if the next packet is something
    /// else.
    pub fn recv_slice<T: Number>(&mut self) -> Result<Option<(usize, Vec<T>)>> {
        self.incoming.recv_slice()
    }

    /// Whether the next packet is of type `T`.
    pub fn next_is<T: ?Sized>(&mut self) -> Result<bool> {
        self.incoming.next_is::<T>()
    }

    /// Sender and type of the next packet, without reading it.
    pub fn peek(&mut self) -> Result<Option<Peek>> {
        self.incoming.peek()
    }

    /// The number of packets and slices of the previous superstep not read yet.
    pub fn unread(&self) -> usize {
        self.incoming.unread()
    }

    /// Ends the superstep on every process: sends the combined packets, synchronizes, and
    /// makes the packets sent to this process in the superstep readable. Puts and gets of the
    /// superstep are carried out before it returns. Unread packets of the previous superstep
    /// are dropped.
    ///
    /// Costs one message per destination that has packets, plus the barrier: about log2(P)
    /// rounds of one small message per process, or, when every process runs on this host, one
    /// write and P - 1 reads of the host board (see the crate documentation).
    pub fn sync(&mut self) -> Result<()> {
        let board = self.host_board()?;
        let mut traced = self.trace_sync();
        let (seq, ctx) = self.take_seq(op::SYNC);
        let s = self.superstep;
        // The operation is started under the lock that the sending takes anyway.
        // SAFETY: this handle's connections, on the thread using it.
        let mut guard = unsafe { Self::lock_own_net(&self.net) };
        guard.started(self.comm, seq);
        std::mem::take(&mut self.uncounted).add_to(&mut guard.stats);
        for d in 0..self.nprocs {
            if d == self.pid || self.out[d].is_empty() {
                continue;
            }
            let part = self.via_control[d] + self.via_data[d];
            let via_control = guard.send_data(
                self.members[d],
                self.comm,
                s,
                part,
                &self.out[d],
                false,
                &ctx,
            )?;
            if via_control {
                self.via_control[d] += 1;
            } else {
                self.via_data[d] += 1;
            }
            self.out[d].clear();
        }
        self.buffered = 0;
        if let Some(t) = &mut traced {
            t.sent = Some(std::time::Instant::now());
        }
        // Each process learns how many data messages are on their way to it: the element-wise
        // sum of every process's per-destination counts, control connection in the high half.
        let mut counts = std::mem::take(&mut self.counts);
        counts.clear();
        // Read and reset in one pass: the next superstep counts from zero.
        counts.extend(
            self.via_control
                .iter_mut()
                .zip(&mut self.via_data)
                .map(|(c, d)| (u64::from(std::mem::take(c)) << 32) | u64::from(std::mem::take(d))),
        );
        // The barrier: a rank-ordered all-reduce of the per-destination message counts. Its
        // first message, when this process's first step sends, goes under the lock taken for
        // the data: one lock fewer per superstep.
        let p = self.nprocs;
        let call = crate::collective::Call {
            seq,
            op: op::SYNC,
            sig: p as u64,
            ctx,
        };
        let counts_sum = crate::collective::Numbers {
            op: crate::Op::Sum,
            n: p,
        };
        let mine = if let Some(board) = board {
            drop(guard);
            let (me, mut mine) = (self.pid, 0u64);
            // Where processes share processors, pid 0 releases the others after a superstep
            // that called a collective (see the `board` module, "Waiting").
            let worked = seq != self.last_sync_seq.wrapping_add(1);
            self.last_sync_seq = seq;
            let hold = me == 0 && worked && self.ibis.pool().crowded();
            let b = self.publish_row(&board, &call, &counts, hold)?;
            let read = self.read_rows(&board, &call, b, &counts, 0..p, |_, row| {
                let theirs = row
                    .get(me)
                    .ok_or_else(|| format!("counts for {} processes", row.len()))?;
                mine = mine.wrapping_add(*theirs);
                Ok(())
            });
            if hold {
                // Released on an error too: the others then find the error themselves.
                board.release(b);
            }
            read?;
            self.counts = counts;
            mine
        } else if self.mpi_sync_here(&guard) {
            drop(guard);
            #[cfg(feature = "mpi")]
            self.sum_over_channel(&call, &mut counts)?;
            let mine = counts[self.pid];
            self.counts = counts;
            mine
        } else {
            let sent_first = self.butterfly_send_first(&mut guard, &call, &counts, &counts_sum)?;
            drop(guard);
            let total = self.butterfly(&call, counts, &counts_sum, sent_first)?;
            let mine = total[self.pid];
            // The vector of sums serves the next sync's counts.
            self.counts = total;
            mine
        };
        let mut parts = if mine == 0 {
            // Nothing is on its way here: no look at the mailbox, and no lock.
            Vec::new()
        } else {
            let mut wait = StepWait::new(self.comm, s, (mine >> 32) as u32, mine as u32);
            loop {
                if let Some(parts) = self.net().superstep_step(&mut wait, &ctx)? {
                    break parts;
                }
            }
        };
        // Counted at the next lock taken anyway (the next sync's), and by `stats` meanwhile.
        self.uncounted.supersteps += 1;
        for part in &mut parts {
            match self.pid_of.get(part.src).copied() {
                Some(p) if p != u32::MAX => part.src = p as usize,
                _ => {
                    return Err(Error::Decode {
                        pid: self.pid,
                        superstep: s,
                        src: part.src,
                        reason: format!(
                            "data of a superstep {} from a process outside it",
                            self.net().describe(self.comm)
                        ),
                    })
                }
            }
        }
        // Packets to itself are handed over as they are; a superstep that sent itself nothing
        // adds no part (and leaves the buffer's memory where it is).
        if self.out[self.pid].is_empty() {
            self.out[self.pid].forget_types();
        } else {
            parts.push(InPart::from_outbox(self.pid, self.out[self.pid].take()));
        }
        parts.sort_by_key(|p| (p.src, p.seq));
        let drma = self.drma_phase(&parts, seq, &ctx);
        if tracing::enabled!(tracing::Level::DEBUG) {
            let unread = self.incoming.unread();
            if unread > 0 {
                tracing::debug!(
                    pid = self.pid,
                    superstep = s,
                    unread,
                    "dropping unread packets"
                );
            }
        }
        self.superstep += 1;
        let old = std::mem::replace(
            &mut self.incoming,
            Incoming::new(self.pid, self.superstep, parts),
        );
        if old.has_parts() {
            self.net().recycle(old.into_buffers());
        }
        if let Some(t) = traced {
            t.record(s, self.pid, self.comm);
        }
        self.begin_compute();
        drma
    }

    /// Whether this handle's sync goes over MPI (see the `mpi_sync` module): the
    /// whole machine's, where it was set up.
    #[inline(always)]
    fn mpi_sync_here(&self, net: &Net) -> bool {
        #[cfg(feature = "mpi")]
        return self.comm == 0 && net.words.is_some();
        #[cfg(not(feature = "mpi"))]
        {
            let _ = net;
            false
        }
    }

    /// What a traced `sync` records, from its start: ends the compute phase and counts what
    /// the superstep sent.
    fn trace_sync(&mut self) -> Option<crate::trace::SyncTrace> {
        let mut t = self.trace.as_mut()?.sync_begins();
        let others = (0..self.nprocs).filter(|&d| d != self.pid && !self.out[d].is_empty());
        for d in others {
            t.messages += 1;
            t.bytes += self.out[d].bytes() as u64;
        }
        t.packets = self.uncounted.packets;
        Some(t)
    }
}
