//! A lock whose release is a plain store, for state that one thread holds almost always alone
//! and releases on the path of a message (a port's receiving state, a send port's connections,
//! bsp's connections).
//!
//! Releasing a `parking_lot` mutex is an atomic read-modify-write, because it must see whether
//! a thread sleeps on the lock and wake it. On the path from a message's arrival to the answer
//! each such instruction costs about 4.7 ns (`results/rmw-cost-round-trip-20261125-0434`).
//! This lock is a ticket lock: a thread takes the next ticket and holds the lock when the
//! ticket is served, and the holder releases it by serving the next ticket, a plain store.
//! Nobody sleeps on the lock itself: a waiter spins, then yields, then sleeps in short naps and
//! looks again. Waiters are served in the order they came, so a thread that takes the lock again
//! and again cannot keep one that waits out; the price, paid only under contention, which these
//! locks rarely see, is that a waiter notices its turn up to a nap late ([`MAX_NAP`]). Timed
//! attempts take no ticket (a ticket cannot be given back): they take the lock when it is free
//! and nobody waits for it.
//!
//! The layers above use it for their own state of that kind:
//!
//! ```
//! use ipl::quick_lock::QuickMutex;
//!
//! let counter = QuickMutex::new(0u64);
//! *counter.lock() += 1;
//! assert_eq!(*counter.lock(), 1);
//! ```

use parking_lot::lock_api::{self, RawMutex as _};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Looks at a held lock before the waiter starts yielding.
const SPINS: u32 = 100;
/// How long a waiter yields before it naps.
const YIELDING: Duration = Duration::from_micros(50);
/// The first nap; each next one doubles, up to [`MAX_NAP`].
const FIRST_NAP: Duration = Duration::from_micros(5);
/// The longest nap between two looks at a held lock.
pub const MAX_NAP: Duration = Duration::from_micros(100);

/// The raw lock; use it through [`QuickMutex`].
pub struct RawQuickLock {
    /// The next ticket to hand out.
    next: AtomicU32,
    /// The ticket that holds the lock, or may take it; the lock is free when it equals `next`.
    /// Only the holder writes it.
    serving: AtomicU32,
}

/// A mutex on [`RawQuickLock`], with `parking_lot`'s guards (`lock_arc` and the others).
pub type QuickMutex<T> = lock_api::Mutex<RawQuickLock, T>;

/// The guard of a [`QuickMutex`].
pub type QuickMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawQuickLock, T>;

// SAFETY: a thread holds the lock from the moment `serving` equals its ticket, read with acquire
// ordering, until it stores the next ticket there with release ordering; tickets are unique (a
// read-modify-write hands each out once), so one thread at a time holds it, and each holder's
// accesses happen before the next holder's. `try_lock` takes the ticket being served only when
// nobody holds one after it (`next` equals `serving`), which means the lock is free: then no
// holder can change `serving` between the look and the taking.
unsafe impl lock_api::RawMutex for RawQuickLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawQuickLock {
        next: AtomicU32::new(0),
        serving: AtomicU32::new(0),
    };
    // As parking_lot's: a guard stays on the thread that took the lock.
    type GuardMarker = <parking_lot::RawMutex as lock_api::RawMutex>::GuardMarker;

    #[inline]
    fn lock(&self) {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        if self.serving.load(Ordering::Acquire) != ticket {
            self.wait_for(ticket);
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let serving = self.serving.load(Ordering::Acquire);
        self.next
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        let serving = self.serving.load(Ordering::Relaxed);
        self.serving
            .store(serving.wrapping_add(1), Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.next.load(Ordering::Relaxed) != self.serving.load(Ordering::Relaxed)
    }
}

// SAFETY: the timed forms return true only once `try_lock` succeeded.
unsafe impl lock_api::RawMutexTimed for RawQuickLock {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.try_lock() || self.try_until(Instant::now().checked_add(timeout))
    }

    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.try_lock() || self.try_until(Some(deadline))
    }
}

/// Spins, then yields, then naps, while `done` says to go on waiting; see the module
/// documentation. Returns false when `deadline` passed first.
fn wait_while(deadline: Option<Instant>, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..SPINS {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    let start = Instant::now();
    let mut nap = FIRST_NAP;
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return false;
        }
        if now.duration_since(start) < YIELDING {
            std::thread::yield_now();
            continue;
        }
        let left = deadline.map_or(nap, |d| d.saturating_duration_since(now));
        std::thread::sleep(nap.min(left));
        nap = (nap * 2).min(MAX_NAP);
    }
}

/// Locks `m` with plain stores instead of an atomic read-modify-write when it is free (see
/// [`RawQuickLock::lock_alone`]), for a caller that knows no other thread can reach it.
///
/// # Safety
/// No other thread may use `m` until the guard is dropped, and every access of the threads
/// that used it before must happen before this call.
pub unsafe fn lock_alone<T>(m: &QuickMutex<T>) -> QuickMutexGuard<'_, T> {
    // SAFETY: the caller vouches that no other thread uses the lock; `lock_alone` returns with
    // the lock held by this thread, which is what `make_guard_unchecked` needs.
    unsafe {
        m.raw().lock_alone();
        m.make_guard_unchecked()
    }
}

impl RawQuickLock {
    /// Takes the lock with plain stores when it is free; waits as [`lock`](lock_api::RawMutex::lock)
    /// does when it is held (by this very thread, which then waits forever, as with `lock`).
    ///
    /// # Safety
    /// No other thread may use the lock until this thread releases it, and every access of the
    /// threads that used it before must happen before this call.
    pub unsafe fn lock_alone(&self) {
        // Relaxed: as the caller vouches, nobody else touches the lock meanwhile, and what
        // others did before is ordered before this already.
        let next = self.next.load(Ordering::Relaxed);
        if next == self.serving.load(Ordering::Relaxed) {
            self.next.store(next.wrapping_add(1), Ordering::Relaxed);
        } else {
            self.lock();
        }
    }

    /// Waits until `ticket` is served: then this thread holds the lock.
    #[cold]
    fn wait_for(&self, ticket: u32) {
        wait_while(None, || self.serving.load(Ordering::Acquire) == ticket);
    }

    /// Takes the lock once it is free and nobody waits for it, until `deadline` (`None`: no
    /// end); false when the deadline passed first.
    #[cold]
    fn try_until(&self, deadline: Option<Instant>) -> bool {
        wait_while(deadline, || !self.is_locked() && self.try_lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_that_contend_each_get_the_lock_and_see_each_others_writes() {
        let m = Arc::new(QuickMutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let mut g = m.lock();
                        // A read and a write apart: a lost update shows in the total.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a counting thread");
        }
        assert_eq!(*m.lock(), 8000);
    }

    #[test]
    fn a_thread_that_releases_the_lock_cannot_take_it_again_before_one_that_waits() {
        let lock = Arc::new(RawQuickLock::INIT);
        lock.lock();
        let (done, checked) = std::sync::mpsc::channel::<()>();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                lock.lock();
                // Held until the main thread has tried, so that the try cannot come after a
                // release of this thread's turn.
                checked.recv().expect("the main thread's word");
                // SAFETY: taken just above.
                unsafe { lock.unlock() };
            })
        };
        // The waiter has its ticket once two are handed out.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock.next.load(Ordering::Relaxed) != 2 {
            assert!(
                Instant::now() < deadline,
                "the waiter never asked for the lock"
            );
            std::thread::yield_now();
        }
        // SAFETY: taken at the start of the test.
        unsafe { lock.unlock() };
        // The waiter's turn, whether or not it has noticed yet.
        assert!(!lock.try_lock());
        done.send(()).expect("the waiter");
        waiter.join().expect("the waiting thread");
        assert!(lock.try_lock());
    }

    #[test]
    fn a_lock_taken_alone_is_held_and_released_like_any_other() {
        let m = Arc::new(QuickMutex::new(1u32));
        {
            // SAFETY: no other thread has `m` yet.
            let mut g = unsafe { lock_alone(&m) };
            *g += 1;
            assert!(m.try_lock().is_none(), "held");
        }
        let other = {
            let m = m.clone();
            std::thread::spawn(move || *m.lock() + 1)
        };
        assert_eq!(other.join().expect("the other thread"), 3);
        // Once the other thread is gone (joined), this one is alone again.
        // SAFETY: the only other thread has ended; joining orders its accesses before this.
        let g = unsafe { lock_alone(&m) };
        assert_eq!(*g, 2);
    }

    #[test]
    fn a_timed_lock_gives_up_at_its_deadline_and_succeeds_once_released() {
        let m = Arc::new(QuickMutex::new(()));
        let held = m.lock_arc();
        let start = Instant::now();
        assert!(m.try_lock_for(Duration::from_millis(20)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(20));
        let waiter = {
            let m = m.clone();
            std::thread::spawn(move || m.try_lock_for(Duration::from_secs(10)).is_some())
        };
        drop(held);
        assert!(waiter.join().expect("the waiting thread"));
    }
}
