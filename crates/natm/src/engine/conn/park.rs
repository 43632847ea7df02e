//! Parked sockets: between an application's `recv` calls on a VC that exchanges no
//! ACKs, its socket stays out of the driver's epoll set.
//!
//! A thread waiting in `recv` takes the socket out of the driver's set so that a
//! datagram wakes it alone ([`Conn::quiet_for_wait`]). Putting it back after every
//! wait and taking it out before the next cost two `epoll_ctl` calls per `recv`:
//! four of a best-effort round trip's eight system calls, against raw UDP's four
//! (`natm-lab perf counts`, issue 30). A best-effort VC needs nothing read promptly
//! while nobody waits — its data waits in the socket as raw UDP's does — so after a
//! wait that read something its socket is *parked*: left out of the set, for the next
//! `recv` to wait on without a system call. The engine hands a parked socket back to
//! the driver
//! - once it has stayed parked through a whole sweep period ([`PARK_SWEEP`]): what a
//!   VC cannot leave unread for long (the peer's CLOSE, an OAM loopback request) is
//!   read within two periods without any `recv`;
//! - at once when something needs the driver to read it: an async reader registers
//!   its waker, the application closes, it sends an OAM loopback probe.
//!
//! A VC that exchanges ACKs (error control, or a feedback flow controller) is never
//! parked: its sender's timers run on what the peer's ACKs say, and the driver must
//! read them as they come.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::read_role::{Ask, Reading, Watch};
use super::{lock, Conn};
use crate::adaptor::RecvBatch;
use crate::engine::Engine;

/// How often the engine looks for parked sockets that went idle; one parked through
/// a whole period goes back to the driver, so an idle VC's socket is watched again
/// at most two periods after its last `recv`.
pub(crate) const PARK_SWEEP: Duration = Duration::from_millis(10);

/// The sweep's schedule. The sweep looks through the engine's connections for
/// parked sockets, rather than keep a list of its own: it runs only while some socket
/// is parked, and a list would be one more lock on every park.
#[derive(Debug)]
pub(crate) struct Parked {
    /// Sweeps begun so far; a connection parks with this count plus one
    /// ([`Conn::park`]), so a sweep tells one parked since the sweep before it (still
    /// in use) from one parked before that (idle a whole period).
    sweeps: AtomicU64,
    /// When the next sweep is due (ns of engine time); 0: none.
    due: AtomicU64,
}

impl Parked {
    pub(crate) fn new() -> Parked {
        Parked {
            sweeps: AtomicU64::new(0),
            due: AtomicU64::new(0),
        }
    }

    /// When the next sweep is due (ns), if any socket is parked.
    pub(crate) fn due(&self) -> Option<u64> {
        match self.due.load(Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }
}

impl Engine {
    /// A socket was parked: sweep a [`PARK_SWEEP`] from now unless a sweep is due
    /// already. The driver is woken only if it would otherwise sleep past it.
    fn want_sweep(&self) {
        if self.parked.due.load(Ordering::Acquire) != 0 {
            // Due already: no clock read on every park.
            return;
        }
        let at = self.clock.now().as_nanos() + PARK_SWEEP.as_nanos() as u64;
        if self
            .parked
            .due
            .compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        self.wake_before(at);
    }

    /// The driver's sweep, if due by `now` (ns): every socket parked since before
    /// the previous sweep goes back to the driver; the rest stay parked for the next.
    pub(crate) fn run_sweep(&self, now: u64, buf: &mut RecvBatch) {
        let due = self.parked.due.load(Ordering::Acquire);
        if due == 0 || due > now {
            return;
        }
        if self
            .parked
            .due
            .compare_exchange(due, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let before = self.parked.sweeps.fetch_add(1, Ordering::SeqCst);
        let parked: Vec<_> = self
            .conns
            .lock()
            .values()
            .filter(|c| c.parked_since().is_some())
            .cloned()
            .collect();
        let mut again = false;
        for c in parked {
            if c.parked_since().is_some_and(|since| since <= before) {
                c.unpark_with(self, buf);
            }
            again |= c.parked_since().is_some();
        }
        if again {
            self.want_sweep();
        }
    }
}

impl Conn {
    /// The sweep the socket parked after, if it is parked.
    fn parked_since(&self) -> Option<u64> {
        match self.read.watch() {
            Watch::Parked { since } => Some(since),
            _ => None,
        }
    }

    /// Whether the socket may stay out of the driver's set once this wait ends: it is
    /// out now, no hold or release is under way, both VCs are up and exchange no
    /// ACKs, nobody asked for the driver, and no async reader waits on the driver.
    pub(super) fn may_park(&self, role: &Reading<'_>) -> bool {
        if !self.may_stay_quiet(role) {
            return false;
        }
        let tx = lock(&self.tx);
        let s = tx.half.status();
        if tx.half.exchanges_acks() || !s.connected || s.closed || s.aborted.is_some() {
            return false;
        }
        drop(tx);
        let rx = lock(&self.rx);
        let s = rx.half.status();
        !(rx.half.exchanges_acks()
            || rx.waker.is_some()
            || !s.connected
            || s.peer_closed
            || s.aborted.is_some())
    }

    /// Whether the socket may stay out of the driver's set after a read: it is out
    /// for this wait (not held by the watermarks), and no release or request for the
    /// driver is under way.
    fn may_stay_quiet(&self, role: &Reading<'_>) -> bool {
        role.watch() == Watch::Waiting
            && !self.read.asked(Ask::Release)
            && !self.read.asked(Ask::Rewatch)
    }

    /// The end of one read by an application thread waiting on the socket
    /// (`Conn::read_as_app`). One that read something leaves the socket out of the
    /// driver's set: parked if the VC allows (see the module's documentation), else
    /// until the thread's wait ends ([`Conn::end_waits`]) — the thread reads again at
    /// once if what it read (an ACK, a part of a message) did not end its wait,
    /// without an `epoll_ctl` pair per read. One that read nothing gives the socket
    /// back to the driver.
    pub(super) fn end_wait(&self, eng: &Engine, role: &mut Reading<'_>, read: bool) {
        if !(read && self.may_stay_quiet(role)) {
            self.go(eng, role, Watch::rewatch);
        } else if self.may_park(role) {
            let since = eng.parked.sweeps.load(Ordering::SeqCst) + 1;
            self.go(eng, role, |w| w.park(since));
            eng.want_sweep();
        }
    }

    /// An application thread's wait ended: a socket it left out of the driver's set
    /// goes back, unless it is parked.
    pub(super) fn end_waits(&self, eng: &Engine) {
        if self.read.watch() == Watch::Waiting {
            self.rewatch_now(eng);
        }
    }

    /// Give a socket parked, or out for a wait, back to the driver now (nothing if it
    /// is watched or held). If another thread holds the read role, that thread does
    /// it as it lets the role go.
    pub(crate) fn unpark(&self, eng: &Engine) {
        if matches!(self.read.watch(), Watch::Parked { .. } | Watch::Waiting) {
            self.rewatch_now(eng);
        }
    }

    /// Put the socket back in the driver's set now, as the read role's holder (this
    /// thread, or the one that holds the role, as it lets it go).
    fn rewatch_now(&self, eng: &Engine) {
        let mut buf = eng.take_buffer();
        self.unpark_with(eng, &mut buf);
        eng.give_buffer(buf);
    }

    fn unpark_with(&self, eng: &Engine, buf: &mut RecvBatch) {
        self.read.ask(Ask::Rewatch);
        if let Some(role) = self.read.try_take() {
            self.release_read_role(eng, role, buf);
        }
    }

    /// Whether the socket is parked (for tests).
    #[cfg(test)]
    pub(crate) fn parked(&self) -> bool {
        self.parked_since().is_some()
    }
}
