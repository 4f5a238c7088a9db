//! The host board: shared memory in which the processes of a machine that all run on one host
//! end a superstep, and combine small all-reduces, without messages.
//!
//! On one host, the cost of a superstep's barrier is not the transfer of a cache line from one
//! core to another (some 30 to 50 ns) but the software that a message passes through on both
//! sides. So when every process of the machine runs on this host, the whole machine's `sync`
//! (its per-destination message counts), and its `all_reduce`, `all_gather_slice`,
//! `reduce_scatter`, `reduce`, `scan` and `exscan` of up to [`VALUE_WORDS`] words of numbers
//! per process, do without messages, as MPI's shared-memory collectives do: each process
//! writes its contribution to its own row of a mapping that all of them share and reads the
//! rows it needs. So does an `all_to_all` whose vectors, with their lengths, fit every
//! process's row (a process whose vectors do not fit writes an empty row, and then every
//! process takes the messages), and a `scatter_slice` whose parts fit the root's row (when
//! they do not, the root writes an empty row and sends messages). Groups and larger inputs
//! keep their messages.
//!
//! Operations that wait for everyone anyway (sync, the all-reduces, all-gathers and
//! all-to-alls) read every row. The others read only what they need, as their messages would:
//! a reduce's root reads every row and the others none, a scan's process reads the rows of the
//! pids below it, a scatter's processes read the root's row. So the processes that need not
//! wait run ahead, up to a row's slots.
//!
//! ## Layout
//!
//! A line of words naming the layout (the magic word, the number of processes, a slot's payload
//! words, a row's slots, a bulk half's bytes and the layout's version, which `open` checks),
//! then one row per process: a line for waking sleepers, and `K` slots (16, or 4 for more than
//! 64 processes), used in turn by the board's operations (the `b`-th uses slot `b % K`). A slot
//! starts on a line with four words of header (stamp, sequence number, operation and length,
//! signature) and goes on with the payload words, the first four in the header's line: a sync
//! of up to four processes moves one line from each process to each other. The writer stores
//! payload and header first and the stamp, the operation's number `b`, last; a reader that
//! sees stamp `b` reads the rest.
//!
//! Every process writes its row of every operation, first, and reads what it needs of the
//! others' before it writes its next. So once a process has written operation `b - K + 1`, it
//! has finished reading `b - K`, whose slot `b` reuses: a process writes `b` only after every
//! process has written `b - K + 1` ([`Board::room_for`]). Where every operation reads every
//! row, that is always so already.
//!
//! ## Waiting
//!
//! A process waits for the rows of the others (or for room) by looking at their stamps, then,
//! after a while, sleeping on the row's futex word, which the writer bumps when it sees
//! sleepers. Between
//! looks it polls its control port as other waits do: a peer that called another operation (a
//! message with this sequence number), a peer that died, or a run past the time limit ends the
//! wait with an error, as it would with messages.
//!
//! Where the host's processes outnumber its processors, pid 0 writes its row of a sync that
//! ends a superstep with a collective *held*: the others, which read its row first, wait
//! until it has read every row and released its own. Pid 0 then goes on first, as the root of
//! MPI's barrier does. In a symmetric barrier the process that arrived last ends it and goes
//! on, while the others that share its processor wait for their turn; so what pid 0 writes
//! next (the root's parts of a scatter, the first part of a scan) came only after their
//! processor had switched to it. The release costs a switch more on pid 0's processor per
//! sync, since pid 0 must run before anyone leaves: back-to-back empty supersteps took 1.31x
//! the time with it (`results/README.md`, `crowded-release-against-0947035`), so a sync that
//! ends a superstep without a collective stays symmetric. A held row is a written row for
//! everything else: a process in another operation sees it as a mismatch.
//!
//! ## Setting up
//!
//! Pid 0 creates the mapping as an anonymous memory file (`memfd_create`), readable and
//! writable by this user only, whose size it seals (`F_SEAL_SHRINK`, `F_SEAL_GROW`), and sends
//! every process its name: the file's place among pid 0's descriptors (`/proc/PID/fd/N`), the
//! host's boot id and pid namespace that place is valid in, and a random token that pid 0 also
//! wrote into the board. Each process opens it, checks its host, seals, size, owner,
//! reservation, layout and token, and answers whether it could; pid 0 then closes its
//! descriptor and tells every process whether all could (see `Bsp::attach_board`).
//! - A process of another host (or another pid namespace) sees that the name is not for it,
//!   opens nothing, and then nobody uses the board.
//! - Nobody can shrink the file under the mappings: a store to a page past the end of a shrunk
//!   file would kill the process with SIGBUS. The kernel refuses any change of its size.
//! - Nothing is left behind: the memory goes with the last mapping, whenever and however the
//!   processes end (a file in `/dev/shm` outlived a pid 0 killed during the setup).
//! - The name is not a secret: only processes that may read pid 0's descriptors (this user's)
//!   can open it, as only they can reach the processes themselves.
//!
//! Pid 0 reserves the memory when it creates it (4 MiB for two processes, about 32 MiB from 16
//! on, 97 MiB for 1024): a store to a page of the mapping that the kernel has no memory for
//! would kill the process with SIGBUS. Where the reservation fails, there is no board and the
//! processes keep their messages. An anonymous memory file is not limited by the size of
//! `/dev/shm` (a container's 64 MiB, say), only by the memory the processes may use.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Words of a cache line.
const LINE: usize = 8;
/// Payload words a slot holds at least: the largest part of a process in an all-reduce,
/// all-gather, reduce-scatter, reduce or scan the board carries.
pub(crate) const VALUE_WORDS: usize = 8;
/// The most processes a board serves (its rows grow with the machine: P words of counts).
pub(crate) const MAX_PROCS: usize = 1024;
/// Names the layout in the board's first word.
const MAGIC: u64 = 0x6273_7062_6f61_7264; // "bspboard"
/// The version of the layout, in word [`VERSION_WORD`]: raised with every change of what the
/// words of a board mean, so that a process of another build, whose board has the same magic
/// word and sizes, refuses to open it rather than misread it. Boards of builds before the
/// version was written have 0 there (the file starts zeroed).
const LAYOUT_VERSION: u64 = 2;
/// The word of the first line that holds [`LAYOUT_VERSION`], after the magic word and the four
/// sizes.
const VERSION_WORD: usize = 5;
/// The two words of the first line that hold the board's token (see [`BoardName`]).
const TOKEN_WORDS: usize = 6;
/// The start of every board's name.
const PREFIX: &str = "bsp-board:";

/// Header words of a slot; the payload follows them.
const STAMP: usize = 0;
const SEQ: usize = 1;
/// The operation in the low byte, the payload's length in words above it.
const OP_LEN: usize = 2;
/// The bit of a slot's `OP_LEN` word that says that its writer holds the readers back until it
/// releases it (see "Waiting" above).
const HELD: u64 = 1 << 63;
const SIG: usize = 3;
const PAYLOAD: usize = 4;

/// Words of a row's waking line: the futex word (first half of word 0) and the sleepers.
const WAKE: usize = 0;
const SLEEPERS: usize = 1;
/// Words of a row's waking line that count the bytes written so far to its bulk halves 0 and 1.
const FILLED: usize = 2;
/// Words of a row's waking line that count the processes that have read what it exposed in
/// its memory for operations with even and odd numbers (see [`Board::ack`]).
const ACKED: usize = 4;
/// The word of a row's waking line that holds the newest operation whose readers have all
/// acknowledged what the process exposed (see [`Board::clear`]).
const CLEARED: usize = 6;
/// Words of a row's second line: the process's pid and the address and bytes of its probe,
/// for peers that read its memory (see `ipl::shared_memory::PeerMemory`).
const PEER: usize = LINE;
/// Words in front of a row's slots: the waking line and the peer line.
const ROW_HEAD: usize = 2 * LINE;

/// The bulk of a large operation is copied, and announced to its readers, in pieces of this
/// many bytes, so that a reader copies one piece out while the writer copies the next in.
const BULK_PIECE: usize = 16 << 10;
/// Bulks of at least this many bytes are written with streaming stores (see [`Board::fill`]).
/// Below it, ordinary stores cost less: a copy of 8 KiB through a half and out again took
/// 2.0 us with them and 3.4 us streamed (the reader then takes the lines from memory rather
/// than from the writer's cache), of 16 KiB 4.2 and 3.4 us, of 64 KiB 14 and 9 us.
const STREAM_FROM: usize = 16 << 10;

/// What a process found in another's row for an operation.
pub(crate) struct Entry {
    pub seq: u64,
    pub op: u8,
    pub sig: u64,
    /// Words of its payload.
    pub len: usize,
    /// Whether its writer holds the readers back (see [`Board::release`]).
    pub held: bool,
}

/// A mapping shared by the processes of the machine, see the module's documentation.
pub(crate) struct Board {
    base: NonNull<AtomicU64>,
    /// Words in the mapping.
    words: usize,
    p: usize,
    me: usize,
    /// Payload words of a slot.
    cap: usize,
    /// Slots of a row.
    slots: u64,
    /// Board operations this process has started.
    ops: AtomicU64,
    /// The newest operation this process knows it may write: every process has finished
    /// reading the one that last used its slot.
    room: AtomicU64,
}

// SAFETY: the mapping is memory of this process for the board's whole life (unmapped only on
// drop), and every access to it goes through atomics, from any thread.
unsafe impl Send for Board {}
// SAFETY: as above: shared access is atomic access.
unsafe impl Sync for Board {}

/// Payload words of a slot for `p` processes: the counts of a sync (`p` words), an
/// all-reduce's values, a scatter's part size and `p` one-word parts, or an all-to-all's
/// mark, `p` lengths and `p` addresses, in whole lines.
fn slot_cap(p: usize) -> usize {
    (2 * p + 1).max(VALUE_WORDS).div_ceil(LINE) * LINE
}

/// Words of a slot: header and payload, in whole lines.
fn slot_words(p: usize) -> usize {
    (PAYLOAD + slot_cap(p)).div_ceil(LINE) * LINE
}

/// Slots of a row for `p` processes: how many operations a process may run ahead of the
/// slowest reader (see the module's documentation). Fewer for large machines, whose slots are
/// large (a sync's `p` counts).
fn slots(p: usize) -> usize {
    if p <= 64 {
        16
    } else {
        4
    }
}

fn row_words(p: usize) -> usize {
    ROW_HEAD + slots(p) * slot_words(p)
}

/// Bytes of each of a row's two bulk halves for `p` processes: 1 MiB up to 16 processes, less
/// beyond (16 MiB in all for each half), at least 16 KiB. Reserved with the rest of the board,
/// used or not (see "Setting up" above).
fn bulk_bytes(p: usize) -> usize {
    ((16 << 20) / p).clamp(16 << 10, 1 << 20) & !4095
}

/// Where the bulk halves start, in words: after the rows.
fn bulk_start(p: usize) -> usize {
    LINE + p * row_words(p)
}

/// Bytes of a board for `p` processes.
fn board_bytes(p: usize) -> usize {
    bulk_start(p) * 8 + p * 2 * bulk_bytes(p)
}

impl Board {
    /// Creates the board of `p` processes (as pid 0); returns it and its memory file, whose
    /// name the other processes open while the file stays open. Fails where the kernel has no
    /// memory to reserve for it.
    pub(crate) fn create(p: usize) -> io::Result<(Board, BoardFile)> {
        if !(2..=MAX_PROCS).contains(&p) {
            return Err(io::Error::other(format!("no board for {p} processes")));
        }
        let len = board_bytes(p);
        // Sealed at its full length, which its reservation keeps to.
        let file = std::fs::File::from(ipl::shared_memory::sealed_memory_file(c"bsp-board", len)?);
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        reserve(&file, len)?;
        let board = Board::map(&file, len, p, 0)?;
        let name = BoardName::here(file.as_raw_fd())?;
        board.word(1).store(p as u64, Ordering::Relaxed);
        board.word(2).store(slot_cap(p) as u64, Ordering::Relaxed);
        board.word(3).store(slots(p) as u64, Ordering::Relaxed);
        board.word(4).store(bulk_bytes(p) as u64, Ordering::Relaxed);
        board
            .word(VERSION_WORD)
            .store(LAYOUT_VERSION, Ordering::Relaxed);
        board
            .word(TOKEN_WORDS)
            .store(name.token[0], Ordering::Relaxed);
        board
            .word(TOKEN_WORDS + 1)
            .store(name.token[1], Ordering::Relaxed);
        board.word(0).store(MAGIC, Ordering::Release);
        Ok((
            board,
            BoardFile {
                _file: file,
                name: name.to_string(),
            },
        ))
    }

    /// Opens the board pid 0 created under `name`, as process `me` of `p`, after checking that
    /// the name is for this host, and that it is a memory file of this user whose size is
    /// sealed, of the size, reservation, layout and token `p` processes need.
    pub(crate) fn open(name: &str, p: usize, me: usize) -> io::Result<Board> {
        if !(2..=MAX_PROCS).contains(&p) || me >= p {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no board '{name}' for pid {me} of {p}"),
            ));
        }
        let named = BoardName::parse(name)?;
        let here = Host::this()?;
        if named.host != here {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "board '{name}' is of another host or pid namespace (this one is boot id \
                     {}, pid namespace {})",
                    here.boot_id, here.pid_ns
                ),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/fd/{}", named.pid, named.fd))?;
        if !ipl::shared_memory::size_sealed(file.as_fd()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("'{name}' is not a board: its size is not sealed"),
            ));
        }
        let len = board_bytes(p);
        let st = file.metadata()?;
        // SAFETY: no arguments, no failure.
        let uid = unsafe { libc::geteuid() };
        if !st.file_type().is_file()
            || st.uid() != uid
            || st.mode() & 0o077 != 0
            || st.len() != len as u64
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("'{name}' is not a board of this user for {p} processes"),
            ));
        }
        // The creator reserves every page (see `reserve`); a store to one that the kernel has
        // no memory for would kill this process with SIGBUS rather than fail.
        let reserved = st.blocks().saturating_mul(512);
        if reserved < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("'{name}' has {reserved} of its {len} bytes reserved"),
            ));
        }
        let board = Board::map(&file, len, p, me)?;
        let magic = board.word(0).load(Ordering::Acquire);
        let version = board.word(VERSION_WORD).load(Ordering::Relaxed);
        // The sizes below are those of this build's layout: compare them only on a board of
        // the same version.
        if magic == MAGIC && version != LAYOUT_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "'{name}' has board layout version {version}, but this build of bsp reads \
                     only version {LAYOUT_VERSION} (the machine's processes come from \
                     different builds)"
                ),
            ));
        }
        let layout = (
            magic,
            board.word(1).load(Ordering::Relaxed),
            board.word(2).load(Ordering::Relaxed),
            board.word(3).load(Ordering::Relaxed),
            board.word(4).load(Ordering::Relaxed),
        );
        let want = (
            MAGIC,
            p as u64,
            slot_cap(p) as u64,
            slots(p) as u64,
            bulk_bytes(p) as u64,
        );
        if layout != want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("'{name}' has another layout"),
            ));
        }
        let token = [
            board.word(TOKEN_WORDS).load(Ordering::Relaxed),
            board.word(TOKEN_WORDS + 1).load(Ordering::Relaxed),
        ];
        if token != named.token {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("'{name}' is another board (its token differs)"),
            ));
        }
        Ok(board)
    }

    fn map(file: &std::fs::File, len: usize, p: usize, me: usize) -> io::Result<Board> {
        // SAFETY: a new shared mapping of the whole file, which is `len` bytes long.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Board {
            base: NonNull::new(addr.cast()).expect("mmap gives no null mapping"),
            words: len / 8,
            p,
            me,
            cap: slot_cap(p),
            slots: slots(p) as u64,
            ops: AtomicU64::new(0),
            room: AtomicU64::new(slots(p) as u64),
        })
    }

    #[inline(always)]
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "board word {i} of {}", self.words);
        // SAFETY: within the mapping (checked above), which is aligned to a page and lives as
        // long as `self`; every access to it is atomic.
        unsafe { &*self.base.as_ptr().add(i) }
    }

    #[inline(always)]
    fn row(&self, pid: usize) -> usize {
        LINE + pid * row_words(self.p)
    }

    #[inline(always)]
    fn slot(&self, pid: usize, b: u64) -> usize {
        self.row(pid) + ROW_HEAD + (b % self.slots) as usize * slot_words(self.p)
    }

    /// The futex word of `pid`'s row: the first four bytes of its waking line.
    fn wake_word(&self, pid: usize) -> &AtomicU32 {
        let w = self.word(self.row(pid) + WAKE);
        // SAFETY: the first half of an 8-aligned word of the mapping is a 4-aligned 32-bit
        // word, alive as long as `self`; every process accesses it only atomically and only
        // as this 32-bit word (the 64-bit word is never read or written as such).
        unsafe { &*std::ptr::from_ref(w).cast::<AtomicU32>() }
    }

    /// Payload words of a slot: the machine's size, and at least [`VALUE_WORDS`].
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Starts the next board operation: writes `payload` with its sequence number, operation
    /// and signature to this process's row and wakes the processes sleeping on it. Returns the
    /// operation's number, for [`Board::arrived`] and [`Board::read`].
    /// The caller has made sure that there is room for it (see [`Board::room_for`]). A `held`
    /// row holds its readers back until this process [releases](Board::release) it.
    pub(crate) fn publish(&self, seq: u64, op: u8, sig: u64, payload: &[u64], held: bool) -> u64 {
        assert!(
            payload.len() <= self.cap,
            "a board payload of {} words",
            payload.len()
        );
        let b = self.ops.load(Ordering::Relaxed) + 1;
        assert!(
            b <= self.room.load(Ordering::Relaxed),
            "board operation {b} written before its slot was read"
        );
        self.ops.store(b, Ordering::Relaxed);
        let s = self.slot(self.me, b);
        for (i, &v) in payload.iter().enumerate() {
            self.word(s + PAYLOAD + i).store(v, Ordering::Relaxed);
        }
        self.word(s + SEQ).store(seq, Ordering::Relaxed);
        let op_len = u64::from(op) | (payload.len() as u64) << 8 | if held { HELD } else { 0 };
        self.word(s + OP_LEN).store(op_len, Ordering::Relaxed);
        self.word(s + SIG).store(sig, Ordering::Relaxed);
        // Sequentially consistent, as are the sleepers' announcement and their look at the
        // stamp after it: either the writer sees a sleeper, or the sleeper sees the stamp.
        self.word(s + STAMP).store(b, Ordering::SeqCst);
        self.wake_sleepers(self.me);
        b
    }

    /// Releases this process's row of operation `b`, written held (see [`Board::publish`]),
    /// and wakes the processes sleeping on it.
    pub(crate) fn release(&self, b: u64) {
        let w = self.word(self.slot(self.me, b) + OP_LEN);
        // Sequentially consistent, as the stamp's store in `publish`.
        w.store(w.load(Ordering::Relaxed) & !HELD, Ordering::SeqCst);
        self.wake_sleepers(self.me);
    }

    /// Whether `pid`'s row of operation `b`, which this process has read, is released.
    pub(crate) fn released(&self, pid: usize, b: u64) -> Result<bool, String> {
        let op_len = self
            .word(self.slot(pid, b) + OP_LEN)
            .load(Ordering::Acquire);
        // Its stamp cannot change before this process has read `b` and written `b + 1`.
        Ok(op_len & HELD == 0)
    }

    /// Wakes the processes sleeping on `pid`'s row, if any: after a sequentially consistent
    /// store they wait for (see [`Board::sleep_on`]).
    fn wake_sleepers(&self, pid: usize) {
        if self.word(self.row(pid) + SLEEPERS).load(Ordering::SeqCst) != 0 {
            let w = self.wake_word(pid);
            w.fetch_add(1, Ordering::SeqCst);
            futex_wake(w);
        }
    }

    /// Whether `pid` has written board operation `b`; an error when its row holds something
    /// no process of this machine writes there now.
    #[inline]
    pub(crate) fn arrived(&self, pid: usize, b: u64) -> Result<bool, String> {
        let stamp = self.word(self.slot(pid, b) + STAMP).load(Ordering::Acquire);
        if stamp == b {
            return Ok(true);
        }
        // Before it writes `b`, the slot holds `b - slots` (or nothing yet); it cannot write
        // `b + slots` before this process has read `b` and written `b + 1`.
        if stamp.wrapping_add(self.slots) == b || (stamp == 0 && b <= self.slots) {
            return Ok(false);
        }
        Err(format!(
            "its row of the host board holds operation {stamp} where this process waits for \
             {b} or the one {} before it",
            self.slots
        ))
    }

    /// Whether `pid` has written board operation `b` or a later one in the same slot (which
    /// it may have, when this process is not reading `b`). Asked only where every process has
    /// written `b - slots` (see [`Board::room_for`] and [`Board::known_reached`]).
    pub(crate) fn reached(&self, pid: usize, b: u64) -> Result<bool, String> {
        let stamp = self.word(self.slot(pid, b) + STAMP).load(Ordering::Acquire);
        let k = self.slots;
        match stamp.checked_sub(b) {
            Some(d) if d % k == 0 => Ok(true),
            // Before it writes `b`, the slot holds `b - slots`, which it has written (or
            // nothing yet): anything older is no state of a process of this machine.
            None if stamp.wrapping_add(k) == b || (stamp == 0 && b <= k) => Ok(false),
            _ => Err(format!(
                "its row of the host board holds operation {stamp} in the slot of {b}"
            )),
        }
    }

    /// The next operation this process writes.
    pub(crate) fn next_op(&self) -> u64 {
        self.ops.load(Ordering::Relaxed) + 1
    }

    /// For this process to write the next operation, `b`, every process must have finished
    /// reading the operation that last used `b`'s slot, `b - slots`: which it has once it has
    /// written the one after that, `b - slots + 1` (each process writes its row of an
    /// operation before it reads the others', and reads them before it writes its next).
    /// `None` when that is known already; otherwise the operation every process must have
    /// [`reached`](Board::reached).
    #[inline]
    pub(crate) fn room_for(&self) -> Option<u64> {
        let b = self.next_op();
        (b > self.room.load(Ordering::Relaxed)).then(|| b + 1 - self.slots)
    }

    /// Notes that every process has written operation `b`: this process may write up to
    /// `b + slots - 1`.
    #[inline]
    pub(crate) fn all_reached(&self, b: u64) {
        let room = b + self.slots - 1;
        if room > self.room.load(Ordering::Relaxed) {
            self.room.store(room, Ordering::Relaxed);
        }
    }

    /// What `pid` wrote for board operation `b` (which [`arrived`](Board::arrived)): its
    /// header, and its payload in `out`.
    pub(crate) fn read(&self, pid: usize, b: u64, out: &mut Vec<u64>) -> Result<Entry, String> {
        let s = self.slot(pid, b);
        let e = self.entry(s);
        let len = e.len;
        if len > self.cap {
            return Err(format!("a board payload of {len} words"));
        }
        out.clear();
        out.extend((0..len).map(|i| self.word(s + PAYLOAD + i).load(Ordering::Relaxed)));
        Ok(e)
    }

    /// The header of the slot at word `s`.
    fn entry(&self, s: usize) -> Entry {
        let op_len = self.word(s + OP_LEN).load(Ordering::Relaxed);
        Entry {
            seq: self.word(s + SEQ).load(Ordering::Relaxed),
            op: op_len as u8,
            sig: self.word(s + SIG).load(Ordering::Relaxed),
            len: usize::try_from((op_len & !HELD) >> 8).unwrap_or(usize::MAX),
            held: op_len & HELD != 0,
        }
    }

    /// Bytes of the bulk a large operation may write (see [`Board::fill`]).
    pub(crate) fn bulk_capacity(&self) -> usize {
        bulk_bytes(self.p)
    }

    /// Whether every process is known to have written operation `b`: to write the bulk of
    /// `b + 1`, whose half `b - 1` used last, every process must have finished reading that.
    pub(crate) fn known_reached(&self, b: u64) -> bool {
        b == 0 || self.room.load(Ordering::Relaxed) >= b + self.slots - 1
    }

    /// Starts the bulk of this process's next operation: nothing of it is written yet. Before
    /// the operation is published, so that a reader that sees it sees this too.
    pub(crate) fn begin_bulk(&self) {
        let b = self.next_op();
        self.word(self.row(self.me) + FILLED + (b % 2) as usize)
            .store(0, Ordering::Relaxed);
    }

    /// The start of `pid`'s bulk half for operation `b`, and its length in bytes.
    fn bulk_half(&self, pid: usize, b: u64) -> (*mut u8, usize) {
        let n = bulk_bytes(self.p);
        let at = bulk_start(self.p) * 8 + (pid * 2 + (b % 2) as usize) * n;
        debug_assert!(at + n <= self.words * 8);
        // SAFETY: `at + n` lies within the mapping (the board's size counts every half), which
        // lives as long as `self`; only the address is formed here.
        (unsafe { self.base.as_ptr().cast::<u8>().add(at) }, n)
    }

    /// Writes `parts`, one after another, as the bulk of this process's operation `b` (just
    /// published), piece by piece, telling readers after each piece how much is there and
    /// waking those asleep. The caller has made sure that every process finished reading the
    /// operation that last used the half (see [`Board::known_reached`]).
    pub(crate) fn fill(&self, b: u64, parts: &[&[u8]]) {
        let (half, cap) = self.bulk_half(self.me, b);
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(total <= cap, "a bulk of {total} bytes");
        let filled = self.word(self.row(self.me) + FILLED + (b % 2) as usize);
        let streaming = total >= STREAM_FROM;
        let mut done = 0;
        for piece in parts.iter().flat_map(|p| p.chunks(BULK_PIECE)) {
            // SAFETY: `done + piece.len() <= cap`: within this process's half, which only this
            // process writes, and no process reads before `filled` says the bytes are there.
            // Large bulks stream: the readers hold the half's lines from the operation that
            // last used it, and ordinary stores would take them back one by one (see
            // `copy_to_shared_streaming`, whose fence orders the bytes before `filled`).
            unsafe {
                if streaming {
                    ipl::shared_memory::copy_to_shared_streaming(half.add(done), piece);
                } else {
                    ipl::shared_memory::copy_to_shared(half.add(done), piece);
                }
            }
            done += piece.len();
            // Sequentially consistent, as in `publish`: a reader about to sleep either sees
            // the count or is seen among the sleepers.
            filled.store(done as u64, Ordering::SeqCst);
            self.wake_sleepers(self.me);
        }
    }

    /// Bytes of its bulk of operation `b` that `pid` has written so far (once `pid`'s row of
    /// `b` has [`arrived`](Board::arrived)).
    pub(crate) fn filled(&self, pid: usize, b: u64) -> u64 {
        self.word(self.row(pid) + FILLED + (b % 2) as usize)
            .load(Ordering::Acquire)
    }

    /// Copies bytes `at..at + dst.len()` of `pid`'s bulk of operation `b` into `dst`, once
    /// [`filled`](Board::filled) says they are there.
    pub(crate) fn read_bulk(
        &self,
        pid: usize,
        b: u64,
        at: usize,
        dst: &mut [u8],
    ) -> Result<(), String> {
        let (half, cap) = self.bulk_half(pid, b);
        if at.checked_add(dst.len()).map_or(true, |end| end > cap) {
            return Err(format!(
                "bytes {at} to {} of a bulk of {cap}",
                at.saturating_add(dst.len())
            ));
        }
        // SAFETY: `at + dst.len() <= cap`: within `pid`'s half of the live mapping, whose
        // words are all inside it; `pid` does not write these bytes again before this
        // process has written its next operation (and a misbehaving one changes only the
        // bytes we get).
        unsafe { ipl::shared_memory::copy_from_shared(dst, half.add(at)) };
        Ok(())
    }

    /// Writes where peers find this process's memory: its pid and its probe.
    pub(crate) fn announce(&self, pid: u32, probe_addr: u64, probe: &[u8; 16]) {
        let at = self.row(self.me) + PEER;
        self.word(at).store(u64::from(pid), Ordering::Relaxed);
        self.word(at + 1).store(probe_addr, Ordering::Relaxed);
        let (a, b) = probe.split_at(8);
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
        self.word(at + 2).store(word(a), Ordering::Relaxed);
        self.word(at + 3).store(word(b), Ordering::Relaxed);
    }

    /// What `pid` [announced](Board::announce) (read after an operation of the board that
    /// followed it): its pid, probe address and probe.
    pub(crate) fn announced(&self, pid: usize) -> (u64, u64, [u8; 16]) {
        let at = self.row(pid) + PEER;
        let w = |i| self.word(at + i).load(Ordering::Relaxed);
        let mut probe = [0u8; 16];
        probe[..8].copy_from_slice(&w(2).to_ne_bytes());
        probe[8..].copy_from_slice(&w(3).to_ne_bytes());
        (w(0), w(1), probe)
    }

    /// Starts this process's next operation, which exposes memory for others to read: none
    /// has read it yet. Before the operation is published. Every reader of the one before
    /// with the same parity has said so before that one ended. Returns the operation's
    /// number.
    pub(crate) fn begin_acks(&self) -> u64 {
        let b = self.next_op();
        self.word(self.row(self.me) + ACKED + (b % 2) as usize)
            .store(0, Ordering::Relaxed);
        b
    }

    /// Tells `pid` that this process has read what it exposed for operation `b`, waking it if
    /// it sleeps.
    pub(crate) fn ack(&self, pid: usize, b: u64) {
        self.word(self.row(pid) + ACKED + (b % 2) as usize)
            .fetch_add(1, Ordering::SeqCst);
        self.wake_sleepers(pid);
    }

    /// Notes that every reader of what this process exposed for operation `b` has said so
    /// ([`Board::ack`]), and wakes the processes sleeping on its row: a reader learns from it
    /// that this process was alive after its read (see `Bsp::confirm_reads`).
    pub(crate) fn clear(&self, b: u64) {
        // Sequentially consistent, as the stamp's store in `publish`.
        self.word(self.row(self.me) + CLEARED)
            .store(b, Ordering::SeqCst);
        self.wake_sleepers(self.me);
    }

    /// Whether `pid` has [cleared](Board::clear) operation `b` or a later one.
    pub(crate) fn cleared(&self, pid: usize, b: u64) -> bool {
        self.word(self.row(pid) + CLEARED).load(Ordering::Acquire) >= b
    }

    /// How many processes have read what this process exposed for operation `b`.
    pub(crate) fn acks(&self, b: u64) -> u64 {
        self.word(self.row(self.me) + ACKED + (b % 2) as usize)
            .load(Ordering::SeqCst)
    }

    /// Sleeps until `pid` writes its next operation or `limit` passes (or spuriously), unless
    /// `ready` (which looks at its row) says that it is there already.
    pub(crate) fn sleep_on(
        &self,
        pid: usize,
        limit: Duration,
        ready: impl Fn(&Board) -> Result<bool, String>,
    ) {
        let sleepers = self.word(self.row(pid) + SLEEPERS);
        let w = self.wake_word(pid);
        sleepers.fetch_add(1, Ordering::SeqCst);
        let seen = w.load(Ordering::SeqCst);
        if matches!(ready(self), Ok(false)) {
            futex_wait(w, seen, limit);
        }
        sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// The header `pid` wrote for this process's next operation, if it has written it: what a
    /// process that waits for messages looks at to see whether its peer went to the board
    /// instead. Written whole (the stamp last), and not written again before this process has
    /// written that operation.
    pub(crate) fn ahead(&self, pid: usize) -> Option<Entry> {
        let b = self.next_op();
        matches!(self.arrived(pid, b), Ok(true)).then(|| self.entry(self.slot(pid, b)))
    }
}

/// Takes every page of `file`'s `len` bytes: a file's pages are otherwise taken at the first
/// store, and a store that finds no memory kills the process with SIGBUS rather than failing.
fn reserve(file: &std::fs::File, len: usize) -> io::Result<()> {
    let Ok(size) = libc::off_t::try_from(len) else {
        return Err(io::Error::other(format!("no board of {len} bytes")));
    };
    // A signal that arrives while the pages are taken undoes the reservation. A few tries,
    // not more: a timer of the program's might interrupt every one.
    let mut tries = 0;
    let err = loop {
        tries += 1;
        // SAFETY: `file` is an open descriptor for the whole call; posix_fallocate reads and
        // writes none of this process's memory.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size) } {
            0 => return Ok(()),
            libc::EINTR if tries < 8 => {}
            err => break io::Error::from_raw_os_error(err),
        }
    };
    tracing::warn!(
        bytes = len,
        "no memory for the host board ({err}): messages instead"
    );
    Err(io::Error::new(
        err.kind(),
        format!("reserving {len} bytes for the host board: {err}"),
    ))
}

/// Pid 0's memory file of a board, and the name under which the other processes open it while
/// it stays open (closed when dropped; the mappings keep the memory).
pub(crate) struct BoardFile {
    _file: std::fs::File,
    pub(crate) name: String,
}

/// Where a process of this host finds pid 0's board: `bsp-board:PID:FD:BOOT_ID:PID_NS:TOKEN`.
/// `/proc/PID/fd/FD` is pid 0's descriptor of the board's memory file only on the kernel
/// that booted with `BOOT_ID`, in the pid namespace `PID_NS`; the random `TOKEN` is also in
/// the board's first line, so that a descriptor that names something else by then (pid 0
/// gone, its number taken) is never used as the board.
#[derive(Debug, PartialEq, Eq)]
struct BoardName {
    pid: u32,
    fd: u32,
    host: Host,
    token: [u64; 2],
}

/// A kernel boot and pid namespace: where a process number names one process.
#[derive(Debug, PartialEq, Eq)]
struct Host {
    /// `/proc/sys/kernel/random/boot_id`: a UUID, new at every boot of every machine.
    boot_id: String,
    /// The inode number of `/proc/self/ns/pid`.
    pid_ns: u64,
}

impl Host {
    fn this() -> io::Result<Host> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
            .trim()
            .to_owned();
        let pid_ns = std::fs::metadata("/proc/self/ns/pid")?.ino();
        Ok(Host { boot_id, pid_ns })
    }
}

impl BoardName {
    /// The name of this process's descriptor `fd`, with a new token.
    fn here(fd: libc::c_int) -> io::Result<BoardName> {
        let mut r = [0u8; 16];
        // SAFETY: `r` is writable for its length.
        let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        if got != r.len() as isize {
            return Err(io::Error::last_os_error());
        }
        let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
        Ok(BoardName {
            pid: std::process::id(),
            fd: u32::try_from(fd).map_err(|_| io::Error::other("a negative descriptor"))?,
            host: Host::this()?,
            token: [word(0), word(8)],
        })
    }

    /// Reads a name that [`BoardName`]'s `Display` wrote; anything else is an error that
    /// quotes it.
    fn parse(name: &str) -> io::Result<BoardName> {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{name}' is not a board's name"),
            )
        };
        let rest = name.strip_prefix(PREFIX).ok_or_else(bad)?;
        let f: Vec<&str> = rest.split(':').collect();
        let [pid, fd, boot_id, pid_ns, token] = f[..] else {
            return Err(bad());
        };
        let uuid =
            boot_id.len() == 36 && boot_id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        let hex = |s: &str| {
            (s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u64::from_str_radix(s, 16).ok())
                .flatten()
        };
        let digits = |s: &str, most: usize| {
            !s.is_empty() && s.len() <= most && s.bytes().all(|b| b.is_ascii_digit())
        };
        if !uuid
            || token.len() != 32
            || !token.is_ascii()
            || !digits(pid, 10)
            || !digits(fd, 10)
            || !digits(pid_ns, 20)
        {
            return Err(bad());
        }
        let (Some(t0), Some(t1)) = (hex(&token[..16]), hex(&token[16..])) else {
            return Err(bad());
        };
        Ok(BoardName {
            pid: pid.parse().map_err(|_| bad())?,
            fd: fd.parse().map_err(|_| bad())?,
            host: Host {
                boot_id: boot_id.to_owned(),
                pid_ns: pid_ns.parse().map_err(|_| bad())?,
            },
            token: [t0, t1],
        })
    }
}

impl std::fmt::Display for BoardName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX}{}:{}:{}:{}:{:016x}{:016x}",
            self.pid, self.fd, self.host.boot_id, self.host.pid_ns, self.token[0], self.token[1]
        )
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of this length, unmapped once; nothing refers to
        // it after the board is gone (the references `word` gives borrow the board).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.words * 8) };
    }
}

/// Sleeps while `*w == seen`, for at most `limit`. The board is shared between processes:
/// no FUTEX_PRIVATE_FLAG.
fn futex_wait(w: &AtomicU32, seen: u32, limit: Duration) {
    let ts = libc::timespec {
        tv_sec: limit.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: limit.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `w` is a valid 32-bit word of a shared mapping for the whole call; `ts` lives on
    // this stack. A failure (EAGAIN when the word changed, EINTR, ETIMEDOUT) is a wake-up.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        );
    }
}

/// Wakes every process sleeping on `w`.
fn futex_wake(w: &AtomicU32) {
    // SAFETY: `w` is a valid 32-bit word of a shared mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    #[test]
    fn two_processes_of_one_board_see_each_other() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        let mut out = Vec::new();
        for round in 1..=5u64 {
            assert_eq!(a.arrived(1, round), Ok(false));
            let n = a.publish(10 + round, 1, 7, &[round, 2 * round], false);
            assert_eq!(n, round);
            assert_eq!(b.arrived(0, round), Ok(true));
            let e = b.read(0, round, &mut out).expect("read");
            assert_eq!((e.seq, e.op, e.sig), (10 + round, 1, 7));
            assert_eq!(out, [round, 2 * round]);
            b.publish(10 + round, 1, 7, &[], false);
            assert_eq!(a.arrived(1, round), Ok(true));
        }
        assert!(a.ahead(1).is_none());
        b.publish(16, 2, 0, &[], false);
        assert_eq!(a.ahead(1).map(|e| (e.seq, e.op)), Some((16, 2)));
    }

    #[test]
    fn a_row_ahead_of_its_reader_is_an_error() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        let k = slots(2) as u64;
        for _ in 0..=k {
            assert_eq!(b.room_for(), None, "room for the first {k} operations");
            b.publish(0, 1, 0, &[], false);
            b.all_reached(b.next_op() - 1);
        }
        // Operation 1's slot now holds k + 1, which no well-behaved peer writes before this
        // process has read 1 and written 2.
        assert!(a.arrived(1, 1).is_err());
        assert_eq!(a.reached(1, 1), Ok(true));
        assert_eq!(a.reached(1, k + 2), Ok(false));
        assert_eq!(a.reached(1, 2 * k), Ok(false));
    }

    /// A slot that holds an operation older than the one its writer must have written there,
    /// or none, as a process that misbehaves might leave it: an error naming it, where the
    /// writer waiting for room took it for an operation not yet written and waited for ever
    /// (with no sync timeout).
    #[test]
    fn a_row_behind_what_its_writer_has_written_is_an_error() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        let k = slots(2) as u64;
        for _ in 0..=2 * k {
            b.publish(0, 1, 0, &[], false);
            b.all_reached(b.next_op() - 1);
        }
        // Pid 1 has written 1 to 2k + 1: operation 2's slot holds k + 2, which 2k + 2 reuses.
        assert_eq!(a.reached(1, 2 * k + 2), Ok(false));
        let stamp = a.word(a.slot(1, 2) + STAMP);
        for bogus in [0, 2] {
            stamp.store(bogus, Ordering::SeqCst);
            match a.reached(1, 2 * k + 2) {
                Err(e) => assert!(e.contains(&format!("operation {bogus} ")), "{e}"),
                Ok(r) => panic!("a slot of operation {bogus} read as reached: {r}"),
            }
        }
    }

    #[test]
    fn a_writer_waits_for_room_once_it_is_a_row_ahead() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        let k = slots(2) as u64;
        for n in 1..=k {
            assert_eq!(a.room_for(), None);
            assert_eq!(a.publish(n, 1, 0, &[n], false), n);
        }
        // Operation k + 1 reuses operation 1's slot: pid 1 must have written 2 first.
        assert_eq!(a.room_for(), Some(2));
        assert_eq!(a.reached(1, 2), Ok(false));
        b.publish(1, 1, 0, &[], false);
        b.publish(2, 1, 0, &[], false);
        assert_eq!(a.reached(1, 2), Ok(true));
        a.all_reached(2);
        assert_eq!(a.room_for(), None);
        assert_eq!(a.publish(k + 1, 1, 0, &[], false), k + 1);
    }

    /// A memory file of `len` bytes with `p` processes' layout in its first words, made as
    /// another build might make it: `reserved` (every page taken) or not, its size `sealed` or
    /// not. Returns it and its name.
    fn made_board(p: usize, reserved: bool, sealed: bool) -> (std::fs::File, String) {
        use std::os::unix::fs::FileExt;
        let len = board_bytes(p);
        let fd = if sealed {
            ipl::shared_memory::sealed_memory_file(c"bsp-board", len).expect("a memory file")
        } else {
            // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor
            // or -1.
            let fd = unsafe { libc::memfd_create(c"bsp-board".as_ptr(), libc::MFD_CLOEXEC) };
            assert!(fd >= 0, "a memory file: {}", io::Error::last_os_error());
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
        };
        let file = std::fs::File::from(fd);
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .expect("its mode");
        file.set_len(len as u64).expect("its length");
        if reserved {
            reserve(&file, len).expect("its pages");
        }
        let name = BoardName::here(file.as_raw_fd()).expect("a name");
        let layout = [
            MAGIC,
            p as u64,
            slot_cap(p) as u64,
            slots(p) as u64,
            bulk_bytes(p) as u64,
            LAYOUT_VERSION,
            name.token[0],
            name.token[1],
        ];
        let bytes: Vec<u8> = layout.iter().flat_map(|w| w.to_ne_bytes()).collect();
        file.write_all_at(&bytes, 0).expect("the layout");
        (file, name.to_string())
    }

    /// A board file of the right size, owner and layout whose memory was never reserved, as
    /// a creator that does not reserve it (another version) would leave: an error naming it,
    /// where it was mapped, and a store to a page that the kernel had no memory for would have
    /// killed the process with SIGBUS.
    #[test]
    fn opening_refuses_a_board_whose_memory_is_not_reserved() {
        let (_file, name) = made_board(2, false, true);
        match Board::open(&name, 2, 1) {
            Err(e) => assert!(e.to_string().contains("reserved"), "{e}"),
            Ok(_) => panic!("a board whose memory is not reserved was opened"),
        }
        let (_file, name) = made_board(2, true, true);
        assert!(Board::open(&name, 2, 1).is_ok(), "the same, reserved");
    }

    /// A board's size is sealed: no process, its own or another of this user, can shrink the
    /// memory under the others' mappings (a store past the end would kill them with SIGBUS)
    /// or grow it; and a file whose size is not sealed is refused, whatever it holds.
    #[test]
    fn a_boards_size_cannot_change_and_an_unsealed_one_is_refused() {
        let (_a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        let named = BoardName::parse(&file.name).expect("its name");
        let other = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/fd/{}", named.pid, named.fd))
            .expect("another descriptor of it");
        let len = board_bytes(2) as u64;
        for to in [0, len / 2, len + 4096] {
            let e = other.set_len(to).expect_err("the size of a board changed");
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
        }
        assert_eq!(other.metadata().expect("its size").len(), len);
        // Still usable at its full size.
        b.publish(1, 1, 0, &[7], false);
        let (_file, name) = made_board(2, true, false);
        match Board::open(&name, 2, 1) {
            Err(e) => assert!(e.to_string().contains("not sealed"), "{e}"),
            Ok(_) => panic!("a board whose size is not sealed was opened"),
        }
    }

    #[test]
    fn opening_checks_name_host_size_layout_and_token() {
        for bad in [
            "/etc/passwd",
            "bsp-board:",
            "bsp-board:1:2:3:4:5",
            "bsp-board:1:2:00000000-0000-0000-0000-000000000000:4:0123",
            "bsp-board:1:2:00000000-0000-0000-0000-000000000000:4:0123456789abcdef0123456789abcdeé",
            "bsp-board:-1:2:00000000-0000-0000-0000-000000000000:4:0123456789abcdef0123456789abcdef",
        ] {
            match Board::open(bad, 2, 1) {
                Err(e) => assert!(e.to_string().contains("not a board"), "{bad}: {e}"),
                Ok(_) => panic!("'{bad}' opened as a board"),
            }
        }
        let (_a, file) = Board::create(3).expect("create");
        let name = &file.name.clone();
        // Another machine size: another size of file.
        assert!(Board::open(name, 2, 1).is_err());
        assert!(Board::open(name, 3, 3).is_err());
        assert!(Board::open(name, 3, 2).is_ok());
        let mut named = BoardName::parse(name).expect("its name");
        assert_eq!(&named.to_string(), name, "a name reads back as written");
        // The same descriptor, seen from another boot or pid namespace, is not opened at all.
        let other_boot = "0".repeat(8) + &named.host.boot_id[8..];
        let here = std::mem::replace(&mut named.host.boot_id, other_boot);
        match Board::open(&named.to_string(), 3, 2) {
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
                assert!(e.to_string().contains("another host"), "{e}");
            }
            Ok(_) => panic!("a board of another boot was opened"),
        }
        named.host.boot_id = here;
        named.host.pid_ns += 1;
        assert!(Board::open(&named.to_string(), 3, 2).is_err());
        named.host.pid_ns -= 1;
        // Another token: the descriptor now names another board.
        named.token[1] ^= 1;
        match Board::open(&named.to_string(), 3, 2) {
            Err(e) => assert!(e.to_string().contains("token"), "{e}"),
            Ok(_) => panic!("a board of another token was opened"),
        }
        named.token[1] ^= 1;
        assert!(Board::open(&named.to_string(), 3, 2).is_ok());
        // Once pid 0 closes its descriptor, the name leads nowhere.
        drop(file);
        assert!(Board::open(name, 3, 2).is_err());
    }

    /// A board whose header names another layout version, as a process of another build would
    /// have made it (0: one made before the version was written): refused at open, naming both
    /// versions, though its magic word and sizes match.
    #[test]
    fn opening_refuses_a_board_of_another_layout_version() {
        let (a, file) = Board::create(2).expect("create");
        let name = &file.name;
        assert!(Board::open(name, 2, 1).is_ok());
        for other in [0, 1, LAYOUT_VERSION + 1] {
            a.word(VERSION_WORD).store(other, Ordering::Relaxed);
            match Board::open(name, 2, 1) {
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
                    let text = e.to_string();
                    assert!(
                        text.contains(&format!("layout version {other},"))
                            && text.contains(&format!("only version {LAYOUT_VERSION}")),
                        "{text}"
                    );
                }
                Ok(_) => panic!("a board of layout version {other} was opened"),
            }
        }
        a.word(VERSION_WORD)
            .store(LAYOUT_VERSION, Ordering::Relaxed);
        assert!(Board::open(name, 2, 1).is_ok());
    }

    #[test]
    fn a_sleeper_wakes_when_the_row_is_written() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let start = std::time::Instant::now();
                while !matches!(b.arrived(0, 1), Ok(true)) {
                    b.sleep_on(0, Duration::from_secs(5), |bd| bd.arrived(0, 1));
                }
                start.elapsed()
            });
            // Whether or not the sleeper is asleep yet, it must see the stamp.
            a.publish(1, 1, 0, &[], false);
            let waited = t.join().expect("sleeper");
            assert!(
                waited < Duration::from_secs(5),
                "woken by the write, not the limit"
            );
        });
    }

    #[test]
    fn a_reader_sees_the_operations_a_process_has_cleared() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        assert!(!b.cleared(0, 1));
        a.clear(1);
        assert!(b.cleared(0, 1));
        assert!(!b.cleared(0, 2));
        a.clear(5);
        assert!(b.cleared(0, 2) && b.cleared(0, 5) && !b.cleared(0, 6));
        assert!(!a.cleared(1, 1), "rows are cleared one by one");
    }

    #[test]
    fn a_held_row_is_written_for_its_readers_and_released_later() {
        let (a, file) = Board::create(2).expect("create");
        let b = Board::open(&file.name, 2, 1).expect("open");
        drop(file);
        let mut out = Vec::new();
        assert_eq!(a.publish(7, 1, 9, &[3, 4], true), 1);
        // Written: a reader sees what it is (and a process in another operation a mismatch).
        assert_eq!(b.arrived(0, 1), Ok(true));
        let e = b.read(0, 1, &mut out).expect("read");
        assert_eq!((e.seq, e.op, e.sig, e.len, e.held), (7, 1, 9, 2, true));
        assert_eq!(out, [3, 4]);
        assert_eq!(b.released(0, 1), Ok(false));
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let start = std::time::Instant::now();
                while b.released(0, 1) != Ok(true) {
                    b.sleep_on(0, Duration::from_secs(5), |bd| bd.released(0, 1));
                }
                start.elapsed()
            });
            a.release(1);
            let waited = t.join().expect("sleeper");
            assert!(
                waited < Duration::from_secs(5),
                "woken by the release, not the limit"
            );
        });
        let e = b.read(0, 1, &mut out).expect("read");
        assert_eq!((e.len, e.held), (2, false));
        // The next row of the same slot is written as it comes.
        let k = slots(2) as u64;
        b.publish(1, 1, 9, &[], false);
        for n in 2..=k {
            a.publish(n, 1, 9, &[], false);
            b.publish(n, 1, 9, &[], false);
        }
        a.all_reached(k);
        assert_eq!(a.publish(k + 1, 1, 9, &[], false), k + 1);
        let e = b.read(0, k + 1, &mut out).expect("read");
        assert!(!e.held);
    }
}
