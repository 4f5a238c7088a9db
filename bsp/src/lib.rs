//! Bulk-synchronous supersteps with message combining, collectives and remote memory access, on
//! the port library `ipl`.
//!
//! After Green BSP and BSPlib: a program is a sequence of supersteps. In a superstep every
//! process computes and [`send`](Bsp::send)s typed packets; [`sync`](Bsp::sync) ends the
//! superstep everywhere, and the packets sent in superstep *s* are read with
//! [`recv`](Bsp::recv) in superstep *s + 1*. Processes are the nodes of a closed `ipl` pool
//! ([`Bsp::new`]: one per OS process, started for instance with `ipl-run -n P -- PROGRAM`), or
//! threads of one process ([`Bsp::local`], [`run_local`]) with the same semantics.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Packet {
//!     from: usize,
//!     value: f64,
//! }
//!
//! type AnyError = Box<dyn std::error::Error + Send + Sync>;
//!
//! fn process(ibis: ipl::Ibis) -> Result<f64, AnyError> {
//!     let mut bsp = bsp::Bsp::new(ibis)?; // or bsp::Bsp::local(p) for p threads in one process
//!     let (pid, p) = (bsp.pid(), bsp.nprocs());
//!     let dest = (pid + 1) % p;
//!     let packet = Packet { from: pid, value: pid as f64 * 1.5 };
//!     bsp.send(dest, &packet)?; // packet: serde::Serialize
//!     bsp.sync()?;
//!     let mut local_max = f64::MIN;
//!     while let Some((src, pkt)) = bsp.recv::<Packet>()? {
//!         // packets from the previous superstep
//!         assert_eq!((src, pkt.from), ((pid + p - 1) % p, src));
//!         local_max = local_max.max(pkt.value);
//!     }
//!     let m: f64 = bsp.all_reduce(local_max, bsp::Op::Max)?;
//!     Ok(m)
//! }
//!
//! fn main() -> Result<(), AnyError> {
//!     // Three nodes of an in-process pool, one per thread.
//!     let pool = format!("doc-{}", std::process::id());
//!     let threads: Vec<_> = (0..3u32)
//!         .map(|rank| {
//!             let pool = pool.clone();
//!             std::thread::spawn(move || -> Result<f64, AnyError> {
//!                 let mut cfg = ipl::Config::inproc(pool, 3);
//!                 cfg.rank = Some(rank);
//!                 process(ipl::Ibis::join(cfg)?)
//!             })
//!         })
//!         .collect();
//!     for t in threads {
//!         assert_eq!(t.join().unwrap()?, 3.0);
//!     }
//!
//!     // The same with the local form: a closure per thread, results in pid order.
//!     let sums = bsp::run_local(4, |bsp| {
//!         for d in 0..bsp.nprocs() {
//!             bsp.send(d, &(bsp.pid() as u64))?;
//!         }
//!         bsp.sync()?;
//!         let mut sum = 0;
//!         while let Some((_, v)) = bsp.recv::<u64>()? {
//!             sum += v;
//!         }
//!         Ok(sum)
//!     })?;
//!     assert_eq!(sums, vec![6; 4]);
//!     Ok(())
//! }
//! ```
//!
//! # Message combining
//!
//! Every packet for one destination in one superstep is appended to that destination's buffer
//! (serialized in `ipl`'s object layout, by an encoder that inlines into the caller, behind a two-byte entry header: a one-byte type
//! index and the length) and the whole buffer travels as **one message** at `sync`. Packets of
//! several types can be mixed: each message names its types once, and `recv::<T>()` of the
//! wrong type is an [`Error::TypeMismatch`] naming both, not garbage. Slices of numbers
//! ([`send_slice`](Bsp::send_slice), [`send_vec`](Bsp::send_vec)) travel as raw memory; large
//! ones are written from the vector's own memory and read straight into the vector that
//! [`recv_slice`](Bsp::recv_slice) returns. Packets a process sends itself never touch the
//! network: its buffer becomes its own input. A buffer is split only to bound memory: when the
//! packets buffered for other processes exceed [`Options::memory_budget`], the largest buffers
//! are sent at once, which a program cannot observe (they are still read after `sync`, in
//! order).
//!
//! # The `sync` protocol, and why it costs log P
//!
//! 1. Each process sends each destination it has packets for its combined message. Nothing at
//!    all goes to a process it has nothing for.
//! 2. The processes all-reduce (sum) the vector of per-destination message counts by
//!    recursive doubling: in round *k* a process exchanges one small message with the process
//!    whose (folded) rank differs in bit *k*. After log2(P) rounds (floor(log2 P) + 2 when P is
//!    not a power of two: the extra processes fold into a partner first and get the result
//!    back last) every process knows how many messages are addressed to it. The reduction is
//!    also the barrier: no process can finish it before every process has contributed, i.e.
//!    has finished sending.
//! 3. Each process waits until that many messages have arrived, then carries out the
//!    superstep's puts and gets ([`Bsp::put`], [`Bsp::get`]) and makes the packets readable.
//!
//! So a process sends log2(P) barrier messages (plus one data message per destination it
//! actually has packets for), never P - 1: a sparse superstep costs every process O(log P)
//! messages of P counts each, and a superstep with nothing for a peer costs that peer nothing
//! beyond those rounds. Each count is split in two halves, one per connection (below), so a
//! process knows exactly what to wait for on each.
//!
//! ## On one host: the host board
//!
//! When every process of the machine runs on one host over `ipl`'s shared-memory driver (the
//! default for the processes `ipl-run` starts), step 2 takes no messages: the processes share
//! a small mapping, the *host board*, in which each writes its counts to a row of its own and
//! reads the others' (one cache line from each process to each other for up to four
//! processes). The same goes for [`all_reduce`](Bsp::all_reduce),
//! [`all_reduce_slice`](Bsp::all_reduce_slice), [`all_gather_slice`](Bsp::all_gather_slice),
//! [`reduce_scatter`](Bsp::reduce_scatter), [`reduce`](Bsp::reduce),
//! [`reduce_slice`](Bsp::reduce_slice), [`scan`](Bsp::scan), [`exscan`](Bsp::exscan) and their
//! `_slice` forms, of up to 64 bytes of numbers per process (in all, for reduce_scatter),
//! combined along the same trees as the messages would, so with the same bits; for
//! [`all_to_all`](Bsp::all_to_all) when every process's vectors and their lengths fit its row
//! (P + the vectors' words at most max(P + 1, 8) words; where one process's do not, all take
//! the messages); and for [`scatter_slice`](Bsp::scatter_slice) when the root's parts fit its
//! row (a word for the part size and the parts' words at most max(P + 1, 8); otherwise the root
//! sends messages). On one host most of a barrier's cost is the software a message passes
//! through, not the move of a cache line between cores: the board takes that away, as MPI's
//! shared-memory collectives do. A process reads only the rows it needs, as it would wait only
//! for the messages it needs: a reduce's root reads every row and the others go on at once, a
//! scan's process reads the rows of the pids below it, a scatter's processes the root's. A
//! process runs ahead of the others by up to 16 operations (4 beyond 64 processes), the slots
//! of its row, and then waits until every process has read the oldest. The board is set up
//! with a few messages at the first sync (or collective that can use it), and only if pid 0
//! could reserve its memory (an anonymous memory file whose size is sealed: 4 MiB for two
//! processes, some 32 MiB from 16 on) and every process could open it; a wait on it looks at failures and at messages of other
//! operations as waits for messages do, so a peer that dies, leaves, or called another
//! operation is still an error, never a hang.
//!
//! Larger reductions, scans, all-gathers, scatters and all-to-alls of numbers go on the board
//! too, in one of two ways:
//! - **Through the bulk areas.** The writer copies its data to its row's bulk area (up to 1 MiB
//!   up to 16 processes) piece by piece, with stores that go to memory without first taking
//!   the lines back from the readers' caches, and the readers copy it out as it comes: two
//!   copies that overlap, and no writer waits for a reader. Reductions, scans and scatters
//!   below 16 KiB per writer take this way.
//! - **From each other's memory.** Each process writes the length of its data and where it
//!   lies in its memory to its row, and the processes that need the data read it from there
//!   directly (`process_vm_readv`, one copy, as MPI's shared-memory transport does) and tell
//!   the writer, which keeps its data until all have. All-gathers and all-to-alls, and
//!   reductions, scans and scatters from 16 KiB, take this way where the host has a processor
//!   for every process and reading another process's memory is allowed (see
//!   [`Options::single_copy`]); where the processes outnumber the processors, only
//!   all-to-alls and scatters do, whose readers do not wait for one another.
//!
//! Otherwise all-gathers take the bulk areas, and all-to-alls and data beyond an area take
//! messages. Groups, the local form, values of serde types and the broadcasts and gathers use
//! messages.
//! `BSP_HOST_BOARD=0` in the environment of every process turns the board off (to measure the
//! messages' cost on one host, say); [`Stats::board_operations`] counts what it carried. It and
//! `BSP_MPI_SYNC` (below) are `0` or `1` (unset or empty: `1`); any other value fails
//! [`Bsp::new`] with [`Error::Config`] naming the variable.
//!
//! On ipl's mpi driver (feature `mpi`, under `mpirun` or `srun`) the board's counterpart is MPI
//! itself: the whole machine's `sync` exchanges its message counts over the process's word channel
//! (`ipl::WordChannel`), one MPI message each way per round of the butterfly (one word between two
//! processes, in the message's tag when the superstep sent nothing), instead of round messages
//! through the ports; the superstep's data still goes through the ports. A wait there looks at
//! failures and at other operations' messages as a wait on the board does, and a process waiting
//! for messages looks at the channel, so that a peer that called another operation is an error on
//! both sides. Every process agrees to it at the first sync (with the board's setup);
//! `BSP_MPI_SYNC=0` in the environment of every process keeps the round messages. Groups use
//! messages.
//!
//! # Connections, flow control, failures
//!
//! A process has two receive ports, its side of an [`ipl::Mesh`]. Its own thread reads the
//! *control* port while it waits in `sync` or a collective: barrier rounds, collective rounds and
//! data messages up to [`Options::small_message`] arrive there without any hand-off between
//! threads, which keeps an empty superstep at one network latency per round. The *data* port is
//! drained continuously by `ipl`'s upcall thread into memory: large data messages, early sends and
//! large collective payloads travel there, so a send of any size always completes and two processes
//! sending each other large messages can never block each other. Superstep data and collective
//! payloads up to 256 KiB stay on the control connection where it is sure to hold four of them for
//! a receiver that is not reading ([`ipl::Link::unread_capacity`]: shared memory, not tcp), so that
//! the waiting thread reads them itself without a hand-off, and still no send waits for a process
//! that is itself sending. Every wait is cut into [`Options::wait_slice`]s; after each slice the
//! process asks the mesh whether all peers live, so a process that dies or leaves ends every other
//! process's `sync` with [`Error::PeerGone`] naming it (the first to go, when several did), within
//! the registry's detection time plus a short grace period, instead of a hang.
//!
//! # Collectives
//!
//! The MPI set, each in log2(P) rounds or with the best known algorithm for what it moves:
//!
//! | collective | MPI | algorithm |
//! |---|---|---|
//! | [`all_reduce`](Bsp::all_reduce), [`_slice`](Bsp::all_reduce_slice), [`_with`](Bsp::all_reduce_with) | `Allreduce` | recursive doubling (up to 64 bytes of numbers on one host: the host board) |
//! | [`reduce`](Bsp::reduce), [`_slice`](Bsp::reduce_slice), [`_with`](Bsp::reduce_with) | `Reduce` | binomial tree (up to 64 bytes of numbers on one host: the host board) |
//! | [`scan`](Bsp::scan), [`exscan`](Bsp::exscan) (and `_slice`, `_with`) | `Scan`, `Exscan` | recursive doubling; a chain up to 4 processes (up to 64 bytes of numbers on one host: the host board) |
//! | [`reduce_scatter`](Bsp::reduce_scatter), [`_with`](Bsp::reduce_scatter_with) | `Reduce_scatter` | recursive halving (up to 64 bytes of numbers in all on one host: the host board) |
//! | [`broadcast`](Bsp::broadcast) | `Bcast` | binomial tree |
//! | [`gather`](Bsp::gather) | `Gather` | binomial tree |
//! | [`scatter`](Bsp::scatter), [`scatter_slice`](Bsp::scatter_slice) | `Scatter` | binomial tree; direct up to 4 processes (numbers, on one host, when the root's parts fit its row: the host board) |
//! | [`all_gather`](Bsp::all_gather), [`all_gather_slice`](Bsp::all_gather_slice) | `Allgather` | Bruck (up to 64 bytes of numbers each on one host: the host board) |
//! | [`total_exchange`](Bsp::total_exchange) (the seed's TotalExchangeInt: [`total_exchange_int`](Bsp::total_exchange_int)) | `Alltoall` of one number | Bruck |
//! | [`all_to_all`](Bsp::all_to_all), [`all_to_all_into`](Bsp::all_to_all_into), [`all_to_all_with`](Bsp::all_to_all_with) | `Alltoallv` | direct, one round (on one host: the host board, read from each other's memory when the vectors do not fit the rows) |
//!
//! Numbers travel as raw memory; the `_with` forms take any serde type and, for reductions, any
//! associative function. Reductions and scans combine values in pid order, `f(lower pids,
//! higher pids)`, so an operation need not be commutative, and all-reduce results are
//! bit-identical on every process. Every process must call the same collectives in the same
//! order; collectives do not end the superstep (packets sent before one are still delivered by
//! the next `sync`). Calling different operations at the same point is an
//! [`Error::CollectiveMismatch`] where their messages meet.
//!
//! # Groups
//!
//! [`split(color, key)`](Bsp::split) (MPI's `Comm_split`) gives each process the handle of the
//! group of processes that passed the same color, ranked by key: a [`Bsp`] with its own pids,
//! supersteps, collectives and remote memory, which do not disturb other groups or the whole
//! machine. Groups nest. Operations of different groups called in crossing orders are reported
//! as errors where that can be told from a slow peer (see [`Bsp::split`]).
//!
//! # Remote memory
//!
//! After BSPlib: [`register`](Bsp::register) an array (every process in the same order),
//! [`put`](Bsp::put) into another process's part, written at the end of the superstep, and
//! [`get`](Bsp::get) from it, read at the end of the superstep before that superstep's puts.
//! See the `drma` rules on [`Bsp::get`].

#![warn(missing_docs)]

mod board;
mod codec;
mod collective;
mod drma;
mod error;
mod group;
mod inbox;
mod local;
#[cfg(feature = "mpi")]
mod mpi_sync;
#[cfg(feature = "mpi")]
mod mpi_words;
mod net;
mod number;
mod op;
mod options;
mod outbox;
mod superstep;
mod trace;
mod wire;

pub use crate::superstep::Bsp;
pub use drma::Reg;
pub use error::{Error, Result};
pub use inbox::Peek;
pub use local::{run_local, run_local_with, MAX_LOCAL_PROCS};
pub use net::Stats;
pub use number::{Number, Op};
pub use options::Options;
