//! The crate's locks: `parking_lot` locks (no poisoning: a panic under a lock leaves
//! the data as it was, which every lock here tolerates) that belong to one lock
//! hierarchy, written here once and checked in debug builds.
//!
//! # The hierarchy
//! A thread holding a lock may take only locks of a *higher* [`Level`]; every lock of
//! one class (all connections' Tx ends, say) has the same level, so two of a class are
//! never held at once. Outermost first:
//!
//! | Level | Lock | Taken under it |
//! |---|---|---|
//! | `ListenerBinding` | a listener's binding through sigd, the session and id it is bound under | the session's state (`is_gone`) |
//! | `SigdClient` | `SigdClient::session`, the host's session slot | the session's state (`is_gone`); opening a session (its watch: the driver's sources) and dropping the old one (sigd's writer, the driver's sources) |
//! | `SigdReader` | `Session::reader`, the IPC read role (`try_lock`; by an application thread waiting for sigd, else by the engine's driver) | sigd state, writer; a `Released` ends a connection (aborts it, or closes its sending VC: its ends) |
//! | `SpareLink` | `Host::spare`, the next call's data link | a mem link's binding or drop (`MemPorts`) |
//! | `AutoLinks` | a pre-authorised listener's data links | as `SpareLink` |
//! | `Handshaking` | a direct listener's connections in handshake | their ends, the accept queue, the new connection's registration (`Conns`, the driver's thread id) |
//! | `Scheduler` | `Engine::sched` (the driver holds it while a round of tasks runs) | `Conns` (the task's connection), the ends |
//! | `Conns` | `Engine::conns` | `Engine::keep` |
//! | `TxEnd` | a connection's sending VC | `RxEnd`, timers, the send pool (a give), the adaptor's locks (a send), its OAM probes (a path MTU probe) |
//! | `RxEnd` | a connection's receiving VC | timers, the adaptor's locks |
//! | `HostPorts` | `Engine::host_ports`, the host's one-per-address UDP ports | a new sub's entry (`HostRoutes`) |
//! | `HostBatch` | a host port's receive batch (one reader at a time) | a cell port's reassembly, its routes, a sub's peer and queue (a delivery) |
//! | `HostRoutes` | a host port's routes (`natm_proto::endpoint::HostRoutes`) and the subs they name | what the port holds (a frame no route takes; a new route takes its own) |
//! | `MemPorts` | `MemNetwork`'s address map | `MemNextPort` |
//! | `OamProbes` | a connection's OAM loopback probes waiting for answers | a port's peer (a path probe's send) |
//! | `MemQueue` | a port's receive queue: a mem port's, a host sub's | the port's spare batches |
//! | `Leaf` | every lock that takes none under it: sigd's state and writer, `Engine::keep`, a connection's events, the timer heap, an accept queue, the listeners, the driver's sources and thread id, the pooled batches, a cell link's packer and reassembly, a host port's held frames and spare batches, `MemNetwork`'s next port, a port's peer, `Conn::on_gone`, the send pool's gate | — |
//!
//! The UDP socket layer's locks (crate `natm-udp`: a port's peer, the receive areas'
//! pool) are leaves outside this order: each is held only to copy a value in or out
//! and takes nothing under it, so it may be taken under any lock here (a payload's
//! last slice, dropped under whatever lock, sends its area home).
//!
//! Hence: the driver takes the scheduler and then an end, so an application thread
//! hands work to the scheduler ([`Engine::defer`](crate::engine)) only after dropping
//! its end; and sigd's reader may abort a connection, so nothing under an end talks
//! to sigd.
//!
//! # The check
//! In debug builds each thread keeps the levels it holds; taking a lock whose level is
//! not above every held one panics with both names, before it can deadlock. `try_lock`
//! cannot deadlock and is only recorded. In release builds the locks are bare
//! `parking_lot` locks: the level is not even stored.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// A lock class's place in the hierarchy (see the module doc); lower is taken first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    ListenerBinding,
    SigdClient,
    SigdReader,
    SpareLink,
    AutoLinks,
    Handshaking,
    Scheduler,
    Conns,
    TxEnd,
    RxEnd,
    HostPorts,
    HostBatch,
    HostRoutes,
    MemPorts,
    /// A connection's outstanding OAM loopback probes (`engine::oam`): taken alone,
    /// or under the Tx end (its path MTU probes, `engine::path_probe`).
    OamProbes,
    /// A port's receive queue (a mem port's, a host sub's).
    MemQueue,
    /// Every lock that takes no lock under it — held only to read or change its own
    /// value, then let go: sigd's state and writer, `Engine::keep`, a connection's
    /// events, the timer heap, an accept queue, the listeners, the driver's other
    /// sources and thread id, the pooled batches, a cell link's packer and
    /// reassembly, a host port's held frames and spare batches, `MemNetwork`'s next
    /// port, a port's peer, `Conn::on_gone`, the send pool's gate, the kept send buffers. Any lock may be
    /// held when one is taken; two are never held at once.
    Leaf,
}

#[cfg(debug_assertions)]
mod check {
    use super::Level;
    use std::cell::RefCell;

    thread_local! {
        /// The levels this thread holds, in the order it took them.
        static HELD: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
    }

    /// Panic if `level` may not be taken now; else record it as held.
    pub(super) fn acquire(level: Level) {
        let worst = HELD.with(|h| h.borrow().iter().copied().filter(|&l| l >= level).max());
        if let Some(held) = worst {
            panic!("lock order: taking {level:?} while holding {held:?} (see natm::sync)");
        }
        held(level);
    }

    /// Record `level` as held without a check (a `try_lock` cannot deadlock).
    pub(super) fn held(level: Level) {
        HELD.with(|h| h.borrow_mut().push(level));
    }

    /// A guard of `level` went, in whatever order the guards are dropped.
    pub(super) fn release(level: Level) {
        // `try_with`: guards may drop while the thread's locals are being destroyed.
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&l| l == level) {
                h.remove(i);
            }
        });
    }
}

/// A mutex with a place in the lock hierarchy.
pub(crate) struct OrderedMutex<T> {
    #[cfg(debug_assertions)]
    level: Level,
    inner: parking_lot::Mutex<T>,
}

/// The guard of an [`OrderedMutex`].
pub(crate) struct MutexGuard<'a, T> {
    #[cfg(debug_assertions)]
    level: Level,
    inner: parking_lot::MutexGuard<'a, T>,
}

impl<T> OrderedMutex<T> {
    pub(crate) fn new(level: Level, value: T) -> Self {
        #[cfg(not(debug_assertions))]
        let _ = level;
        OrderedMutex {
            #[cfg(debug_assertions)]
            level,
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Lock, blocking; panics in debug builds if the hierarchy forbids it here.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(debug_assertions)]
        check::acquire(self.level);
        MutexGuard {
            #[cfg(debug_assertions)]
            level: self.level,
            inner: self.inner.lock(),
        }
    }

    /// Lock if no one holds it now.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        #[cfg(debug_assertions)]
        check::held(self.level);
        Some(MutexGuard {
            #[cfg(debug_assertions)]
            level: self.level,
            inner,
        })
    }
}

impl<T: fmt::Debug> fmt::Debug for OrderedMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

#[cfg(debug_assertions)]
impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.level);
    }
}

/// A condition variable for an [`OrderedMutex`]. The waiting thread keeps the lock's
/// level: it holds the lock again before it does anything else.
#[derive(Debug, Default)]
pub(crate) struct Condvar(parking_lot::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Self {
        Condvar(parking_lot::Condvar::new())
    }

    /// Release `guard`'s lock and wait for a notification or `timeout`; true if it
    /// timed out.
    pub(crate) fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
        self.0.wait_for(&mut guard.inner, timeout).timed_out()
    }

    /// Wait while `cond` holds, up to `timeout` in all.
    pub(crate) fn wait_while_for<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        cond: impl FnMut(&mut T) -> bool,
        timeout: Duration,
    ) {
        self.0.wait_while_for(&mut guard.inner, cond, timeout);
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// A reader-writer lock with a place in the lock hierarchy.
pub(crate) struct OrderedRwLock<T> {
    #[cfg(debug_assertions)]
    level: Level,
    inner: parking_lot::RwLock<T>,
}

/// A guard of an [`OrderedRwLock`], shared or exclusive.
pub(crate) struct RwGuard<G> {
    #[cfg(debug_assertions)]
    level: Level,
    inner: G,
}

impl<T> OrderedRwLock<T> {
    pub(crate) fn new(level: Level, value: T) -> Self {
        #[cfg(not(debug_assertions))]
        let _ = level;
        OrderedRwLock {
            #[cfg(debug_assertions)]
            level,
            inner: parking_lot::RwLock::new(value),
        }
    }

    fn guard<G>(&self, take: impl FnOnce() -> G) -> RwGuard<G> {
        #[cfg(debug_assertions)]
        check::acquire(self.level);
        RwGuard {
            #[cfg(debug_assertions)]
            level: self.level,
            inner: take(),
        }
    }

    /// Shared access; the same check as [`OrderedMutex::lock`].
    pub(crate) fn read(&self) -> RwGuard<parking_lot::RwLockReadGuard<'_, T>> {
        self.guard(|| self.inner.read())
    }

    /// Exclusive access; the same check as [`OrderedMutex::lock`].
    pub(crate) fn write(&self) -> RwGuard<parking_lot::RwLockWriteGuard<'_, T>> {
        self.guard(|| self.inner.write())
    }
}

impl<T: fmt::Debug> fmt::Debug for OrderedRwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<G: Deref> Deref for RwGuard<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.inner
    }
}

impl<G: DerefMut> DerefMut for RwGuard<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.inner
    }
}

#[cfg(debug_assertions)]
impl<G> Drop for RwGuard<G> {
    fn drop(&mut self) {
        check::release(self.level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_order_pass() {
        let (a, b, c) = (
            OrderedMutex::new(Level::Scheduler, 1),
            OrderedMutex::new(Level::TxEnd, 2),
            OrderedRwLock::new(Level::Leaf, 3),
        );
        let ga = a.lock();
        let gb = b.lock();
        let gc = c.read();
        assert_eq!(*ga + *gb + *gc, 6);
        drop((gc, gb, ga));
        // Everything released: any order may start again.
        drop(c.write());
        drop(a.lock());
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "taking Scheduler while holding TxEnd")
    )]
    fn a_lower_level_under_a_higher_one_panics() {
        let (sched, tx) = (
            OrderedMutex::new(Level::Scheduler, ()),
            OrderedMutex::new(Level::TxEnd, ()),
        );
        let _tx = tx.lock();
        // Release builds do not check; there this is simply two locks.
        let _sched = sched.lock();
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "taking TxEnd while holding TxEnd")
    )]
    fn two_locks_of_one_class_panic() {
        let (a, b) = (
            OrderedMutex::new(Level::TxEnd, ()),
            OrderedMutex::new(Level::TxEnd, ()),
        );
        let _a = a.lock();
        let _b = b.lock();
    }

    #[test]
    fn a_guard_dropped_out_of_order_is_forgotten_alone() {
        let (a, b, c) = (
            OrderedMutex::new(Level::Conns, ()),
            OrderedMutex::new(Level::TxEnd, ()),
            OrderedMutex::new(Level::RxEnd, ()),
        );
        let ga = a.lock();
        let gb = b.lock();
        drop(ga);
        // Still holding TxEnd: RxEnd is above it, Conns is free again.
        let gc = c.lock();
        drop(gb);
        drop(gc);
        drop(a.lock());
        drop(b.lock());
    }

    #[test]
    fn try_lock_is_recorded_and_a_condvar_wait_keeps_the_level() {
        let m = OrderedMutex::new(Level::SigdReader, 0);
        let cv = Condvar::new();
        let mut g = m.try_lock().expect("nobody else holds it");
        assert!(m.try_lock().is_none());
        assert!(cv.wait_for(&mut g, Duration::from_millis(1)));
        drop(g);
        drop(m.lock());
    }
}
