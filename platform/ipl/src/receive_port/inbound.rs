//! A receive port's inbound connections and the state only its receiving thread touches
//! ([`PortRx`]), and the hold on that state that a receive takes and a message keeps until it
//! is finished ([`RxGuard`]): what a [`ReadMessage`](crate::ReadMessage) reads through, below
//! the port that hands messages out.

use crate::node::NodeId;
use crate::pool::Pool;
use crate::quick_lock::RawQuickLock;
use crate::transport::reader::Reader;
use crate::transport::Stream;
use parking_lot::ArcMutexGuard;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// This thread's identity for [`RxGuard`]'s record of a port's holder: never 0, and never
/// reused in the process's life (a `ThreadId` has no stable number to store in an atomic).
#[inline]
pub(super) fn this_thread() -> u64 {
    thread_local! {
        static ID: Cell<u64> = const { Cell::new(0) };
    }
    #[cold]
    fn first(id: &Cell<u64>) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        id.set(v);
        v
    }
    ID.with(|id| match id.get() {
        0 => first(id),
        v => v,
    })
}

/// A port's receiving state, held by one thread from a receive until the message it hands out
/// is finished (or until the receive returns without one). It records its holder in the port's
/// `holder` while held, so that a receive that finds the state taken can tell whether the
/// taker is its own thread, which would wait for itself for ever.
///
/// The record is written only under the lock, by the holder: its identity on taking it (with
/// [`SHUT_ON_RELEASE`] added if it drops the port), 0 before giving it back, with relaxed
/// stores, which cost what plain stores do. A thread that reads its own identity there holds
/// the lock: a read sees the thread's own last store to it or a later one, and every later one
/// is another thread's identity or 0. The guard, like
/// `parking_lot`'s, stays on the thread that took it (a `ReadMessage` is not `Send`), so the
/// record cannot name a thread that gave the message away.
pub(crate) struct RxGuard(ArcMutexGuard<RawQuickLock, PortRx>);

/// Set in the holder record, beside the holder's identity, by a drop of the port on the
/// thread that holds it ([`ReceivePort`](crate::ReceivePort)'s drop): that drop cannot take
/// the state, which the thread gives back only after the drop returns, so the guard shuts the
/// port's connections down when it is released. Thread identities never reach this bit.
pub(super) const SHUT_ON_RELEASE: u64 = 1 << 63;

impl RxGuard {
    #[inline]
    pub(super) fn new(guard: ArcMutexGuard<RawQuickLock, PortRx>) -> Self {
        guard.holder.store(this_thread(), Ordering::Relaxed);
        RxGuard(guard)
    }
}

impl Deref for RxGuard {
    type Target = PortRx;

    #[inline]
    fn deref(&self) -> &PortRx {
        &self.0
    }
}

impl DerefMut for RxGuard {
    #[inline]
    fn deref_mut(&mut self) -> &mut PortRx {
        &mut self.0
    }
}

impl Drop for RxGuard {
    /// Clears the record while still holding the lock, which the guard's own drop then gives
    /// back; first shuts the connections down if the port was dropped meanwhile by this thread.
    /// The load costs next to nothing: the line is this thread's since it took the lock.
    #[inline]
    fn drop(&mut self) {
        if self.0.holder.load(Ordering::Relaxed) & SHUT_ON_RELEASE != 0 {
            self.0.shut_down();
        }
        self.0.holder.store(0, Ordering::Relaxed);
    }
}

/// One inbound connection of a receive port.
pub(crate) struct InConn {
    pub(crate) reader: Reader,
    pub(crate) origin: NodeId,
    pub(crate) send_port: u64,
}

impl InConn {
    pub(crate) fn new(stream: Box<dyn Stream>, origin: NodeId, send_port: u64) -> Self {
        InConn {
            reader: Reader::new(stream),
            origin,
            send_port,
        }
    }
}

/// The part of a port only the receiving thread touches.
pub(crate) struct PortRx {
    pub(crate) conns: Vec<InConn>,
    pub(super) fds: Vec<libc::pollfd>,
    /// Per connection, its range in `fds`.
    pub(super) spans: Vec<(usize, usize)>,
    /// Where the next look for a message starts (round robin over the connections).
    pub(super) rr: usize,
    pub(super) pool: Pool,
    /// The port's record of the thread that holds this state (see [`RxGuard`]).
    holder: Arc<AtomicU64>,
}

impl PortRx {
    /// The state of a port of `pool` without connections, whose holder `holder` records.
    pub(super) fn new(pool: Pool, holder: Arc<AtomicU64>) -> Self {
        PortRx {
            conns: Vec::new(),
            fds: Vec::new(),
            spans: Vec::new(),
            rr: 0,
            pool,
            holder,
        }
    }

    /// Shuts down every connection of a closed port, so that its senders see it gone.
    #[cold]
    #[inline(never)]
    pub(super) fn shut_down(&mut self) {
        for mut c in self.conns.drain(..) {
            c.reader.shutdown();
        }
    }

    /// A connection together with a check the read path polls while it waits, so that a dead
    /// sender ends the wait.
    pub(crate) fn conn_and_liveness(
        &mut self,
        conn: usize,
    ) -> (&mut Reader, impl Fn() -> bool + '_) {
        let PortRx { conns, pool, .. } = self;
        let c = &mut conns[conn];
        let rank = c.origin.rank();
        (&mut c.reader, move || pool.inner.is_gone_rank(rank))
    }
}
