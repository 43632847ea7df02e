//! The host's send buffer pool (seed 001 §6, "Send-side buffer pools"): every sending
//! VC of an engine draws the octets it queues from one bounded pool, on top of its own
//! send buffer's bound, and gives them back as its TPDUs are acknowledged (or, without
//! error control, sent). An application whose VCs together hold the whole pool waits,
//! or hears `WouldBlock::SendPool`, until one of them frees some: the seed's counting
//! semaphore, "put an application to sleep when no more pool buffers are available and
//! wake it up when buffers are released".
//!
//! Departures from the seed: the pool counts octets, not pages. The FreeBSD stack needed
//! page-aligned, physically contiguous buffers because its card took physical addresses;
//! natm's TPDUs leave by `sendmsg` from slices of the application's own buffer (or of
//! one copy per `send`), which the kernel copies, so alignment buys nothing here
//! (docs/decisions/0034-send-pool.md). And the pool is the engine's — every
//! connection of one `Host` — since natm's transport runs in the application's process
//! rather than in one kernel for the whole machine; sigd bounds the rest of the host's
//! resources.
//!
//! The pool is lock-free on the send path (one compare-and-swap to take, one subtraction
//! to give back); only a sender that found it empty takes its gate, to sleep on it, and
//! a give wakes sleepers only when some are counted (the two orders are sequentially
//! consistent, so a give either sees the sleeper or the sleeper sees the give).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use crate::sync::{Condvar, Level, OrderedMutex as Mutex};

/// The default bound: 64 MiB, as 32 VCs with full default send buffers (2 MiB each).
pub const DEFAULT_SEND_POOL: usize = 64 << 20;

/// What the pool shows (`Host::send_pool`, `natm stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendPoolStats {
    /// The bound, octets.
    pub limit: u64,
    /// Octets the engine's VCs hold now.
    pub used: u64,
    /// The most they have held at once.
    pub peak: u64,
    /// Sends the pool held back (it had less free than the send needed).
    pub held_back: u64,
    /// Octets of buffers kept between sends for large sends' copies
    /// (`engine::send_buffers`).
    pub spare: u64,
    /// Large sends whose copy went into a kept buffer, not a new allocation.
    pub reused: u64,
}

/// One engine's send buffer pool.
#[derive(Debug)]
pub(crate) struct SendPool {
    limit: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    held_back: AtomicU64,
    /// Threads asleep on `cv`, and async senders' wakers.
    sleepers: AtomicUsize,
    gate: Mutex<Vec<Waker>>,
    cv: Condvar,
}

impl SendPool {
    pub(crate) fn new(limit: usize) -> Arc<SendPool> {
        Arc::new(SendPool {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            held_back: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            gate: Mutex::new(Level::Leaf, Vec::new()),
            cv: Condvar::new(),
        })
    }

    /// The bound, octets.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Octets free now.
    pub(crate) fn free(&self) -> usize {
        self.limit.saturating_sub(self.used.load(SeqCst))
    }

    /// Take up to `want` octets; what was taken (0 when the pool is empty).
    fn take(&self, want: usize) -> usize {
        let mut used = self.used.load(SeqCst);
        loop {
            let n = want.min(self.limit.saturating_sub(used));
            if n == 0 {
                return 0;
            }
            match self
                .used
                .compare_exchange_weak(used, used + n, SeqCst, SeqCst)
            {
                Ok(_) => return n,
                Err(now) => used = now,
            }
        }
    }

    /// Take `n` octets whatever is free: what a VC queued without asking (a CLOSE's
    /// bookkeeping), so that the count stays the sum of what the VCs hold.
    fn force(&self, n: usize) {
        let now = self.used.fetch_add(n, SeqCst) + n;
        self.peak.fetch_max(now, SeqCst);
    }

    /// Give `n` octets back, waking whoever sleeps on the pool.
    fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.used.fetch_sub(n, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let wakers = std::mem::take(&mut *self.gate.lock());
            self.cv.notify_all();
            for w in wakers {
                self.sleepers.fetch_sub(1, SeqCst);
                w.wake();
            }
        }
    }

    /// Count a send the pool held back.
    pub(crate) fn note_held_back(&self) {
        self.held_back.fetch_add(1, SeqCst);
    }

    /// Sleep until at least `want` octets (at most the whole pool) are free, or
    /// `timeout` passes; whether they are. Call with no lock held.
    pub(crate) fn wait_free(&self, want: usize, timeout: Duration) -> bool {
        let want = want.clamp(1, self.limit.max(1));
        let mut gate = self.gate.lock();
        self.sleepers.fetch_add(1, SeqCst);
        if self.free() < want {
            self.cv.wait_for(&mut gate, timeout);
        }
        self.sleepers.fetch_sub(1, SeqCst);
        self.free() >= want
    }

    /// Have `waker` woken at the next give; whether `want` octets are free already
    /// (then the caller tries again at once rather than waiting).
    pub(crate) fn wake_on_free(&self, want: usize, waker: &Waker) -> bool {
        let want = want.clamp(1, self.limit.max(1));
        let mut gate = self.gate.lock();
        if !gate.iter().any(|w| w.will_wake(waker)) {
            gate.push(waker.clone());
            self.sleepers.fetch_add(1, SeqCst);
        }
        drop(gate);
        self.free() >= want
    }

    pub(crate) fn stats(&self) -> SendPoolStats {
        SendPoolStats {
            limit: self.limit as u64,
            used: self.used.load(SeqCst) as u64,
            peak: self.peak.load(SeqCst) as u64,
            held_back: self.held_back.load(SeqCst),
            ..SendPoolStats::default()
        }
    }
}

/// One sending VC's share of the pool: the octets it holds, given back as its queue
/// shrinks and all at once when it goes.
#[derive(Debug)]
pub(crate) struct PoolShare {
    pool: Arc<SendPool>,
    held: usize,
}

impl PoolShare {
    pub(crate) fn new(pool: Arc<SendPool>) -> PoolShare {
        PoolShare { pool, held: 0 }
    }

    pub(crate) fn pool(&self) -> &SendPool {
        &self.pool
    }

    /// Queue what `push` takes of at most `want` octets, drawn from the pool first:
    /// `push` is told how many it may take and says how many it took. `None` when the
    /// pool had none free, or less than `want` and `whole` (nothing was pushed).
    pub(crate) fn draw<E>(
        &mut self,
        want: usize,
        whole: bool,
        push: impl FnOnce(usize) -> Result<usize, E>,
    ) -> Option<Result<usize, E>> {
        let got = self.pool.take(want);
        if (got == 0 && want > 0) || (whole && got < want) {
            self.pool.give(got);
            return None;
        }
        let r = push(got);
        let took = *r.as_ref().unwrap_or(&0);
        self.held += took;
        self.pool.give(got - took.min(got));
        // The peak counts what the VCs hold, not a draw's passing overshoot.
        // A locked `fetch_max` only when the peak may move: a load costs nothing on
        // the send path, the read-modify-write did on every send.
        let used = self.pool.used.load(SeqCst);
        if used > self.pool.peak.load(SeqCst) {
            self.pool.peak.fetch_max(used, SeqCst);
        }
        Some(r)
    }

    /// Settle with the VC's queue as it is now (`queued` octets): what it freed goes
    /// back to the pool.
    pub(crate) fn settle(&mut self, queued: usize) {
        if queued < self.held {
            self.pool.give(self.held - queued);
        } else if queued > self.held {
            self.pool.force(queued - self.held);
        }
        self.held = queued;
    }
}

impl Drop for PoolShare {
    fn drop(&mut self) {
        self.pool.give(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Wake;

    #[test]
    fn shares_draw_at_most_the_bound_and_give_back_what_their_queues_free() {
        let pool = SendPool::new(10_000);
        let (mut a, mut b) = (PoolShare::new(pool.clone()), PoolShare::new(pool.clone()));
        assert_eq!(a.draw(8_000, false, Ok::<_, ()>), Some(Ok(8_000)));
        // b wants 5,000 and may take the 2,000 left; it takes 1,500 of them.
        let took = b.draw(5_000, false, |n| {
            assert_eq!(n, 2_000);
            Ok::<_, ()>(1_500)
        });
        assert_eq!(took, Some(Ok(1_500)));
        assert_eq!(pool.free(), 500);
        a.settle(3_000); // acknowledged: 5,000 back
        assert_eq!((pool.free(), pool.stats().peak), (5_500, 9_500));
        drop(b);
        assert_eq!(pool.free(), 7_000);
        a.settle(0);
        assert_eq!(pool.stats().used, 0);
    }

    #[test]
    fn an_empty_pool_takes_nothing_and_pushes_nothing() {
        let pool = SendPool::new(100);
        let mut a = PoolShare::new(pool.clone());
        assert_eq!(a.draw(100, false, Ok::<_, ()>), Some(Ok(100)));
        let mut b = PoolShare::new(pool.clone());
        assert_eq!(
            b.draw(1, false, |_| -> Result<usize, ()> { panic!("pushed") }),
            None
        );
        // A push that fails gives its draw back.
        a.settle(50);
        assert_eq!(
            b.draw(50, false, |_| Err::<usize, _>("closed")),
            Some(Err("closed"))
        );
        assert_eq!(pool.free(), 50);
    }

    #[test]
    fn a_sender_asleep_on_the_pool_wakes_when_another_vc_frees_octets() {
        let pool = SendPool::new(1_000);
        let mut a = PoolShare::new(pool.clone());
        a.draw(1_000, false, Ok::<_, ()>);
        let p = pool.clone();
        let sleeper = std::thread::spawn(move || p.wait_free(400, Duration::from_secs(60)));
        // Whether the give comes before or after it sleeps, it ends without the timeout.
        while pool.sleepers.load(SeqCst) == 0 && !sleeper.is_finished() {
            std::thread::yield_now();
        }
        a.settle(500);
        assert!(sleeper.join().unwrap());
    }

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, SeqCst);
        }
    }

    #[test]
    fn an_async_sender_is_woken_once_by_the_next_give() {
        let pool = SendPool::new(1_000);
        let mut a = PoolShare::new(pool.clone());
        a.draw(1_000, false, Ok::<_, ()>);
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        assert!(!pool.wake_on_free(10, &waker));
        assert!(!pool.wake_on_free(10, &waker)); // registered once
        a.settle(900);
        assert!(flag.0.load(SeqCst));
        assert_eq!(pool.sleepers.load(SeqCst), 0);
        assert!(pool.wake_on_free(10, &waker)); // free now: try again at once
    }
}
