//! One duplex connection in the engine: a UDP socket carrying two simplex VCs (seed
//! 000 §5.3: "duplex service is provided by ulib, which opens and manages two simplex
//! transport connections"). The protocol is natm-proto's sans-IO
//! [`Connection`](natm_proto::endpoint::Connection), taken apart into its two halves so that
//! each direction has its own lock and condition variable: a sending thread and a
//! thread blocked in `recv` never contend (measured; see `endpoint::half`).
//!
//! Who reads the socket: whichever thread needs progress and can take the connection's
//! read role — the application thread blocked in `recv` (so a message crosses no more
//! thread hand-offs than raw UDP: the kernel wakes the application itself), or the
//! engine's driver thread when no application thread is reading. Frames for either VC
//! are processed by whoever read them.
//!
//! While an application thread holds the read role and waits on the socket, the
//! socket is out of the driver's epoll set ([`Conn::quiet_for_wait`]), and back in it
//! before the role is let go (or parked, `park`): one datagram then wakes one thread,
//! as on raw UDP, instead of the application's and the driver's (issue 17). The role,
//! the socket's place in the driver's set and what other threads ask of the reader
//! are `read_role`'s state machine.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;

mod park;
mod read_role;
mod rm;

pub(crate) use park::Parked;
use read_role::{Ask, Epoll, ReadSide, Reading, Watch};

use super::link::{vc_header_on, vc_of_on, Link, VC_HEADER_LEN};
use super::oam::{self, Action, Probes, TooManyProbes};
use super::rx_order;
use super::Engine;
use crate::adaptor::{RecvBatch, SendBatch};
use crate::sched::Level;
use crate::stages::{self, Stage};
use crate::sync::{self, Condvar, MutexGuard, OrderedMutex as Mutex};
use crate::time::Instant;
use crate::transport::AbortReason;
use crate::wire::oam::Scope;
use crate::wire::oam_auth::OamKeys;
use crate::wire::seal::{self, OpenError, Opener, PathKeys, Sealer};
use crate::wire::tpdu::Header;
use crate::wire::vcframe;
use natm_proto::endpoint::{Connection, Half, HalfStatus, Route, RxHalf, Side, Simplex, TxHalf};

/// Datagrams processed before the touched ends are flushed in the middle of a burst.
const FLUSH_EVERY: usize = 32;

/// Largest datagram the engine reads.
pub(crate) const MAX_DATAGRAM: usize = 65_535 + VC_HEADER_LEN;

/// One simplex VC end: its sans-IO half and what the I/O around it needs (the
/// application's waiters, the send batch). What the application waits for — up,
/// closed, aborted — is the half's own [`HalfStatus`], kept by natm-proto.
#[derive(Debug)]
pub(crate) struct End<H> {
    pub(crate) half: H,
    /// A message being gathered for `recv` (receiving end).
    pub(crate) partial: Vec<u8>,
    pub(crate) waker: Option<std::task::Waker>,
    /// Threads waiting on the end's condition variable (counted under the end's lock,
    /// so a flush with nobody waiting costs no futex wake-up).
    waiters: u32,
    out_batch: SendBatch,
    /// The frames of one send when the link gathers (`engine::gather`).
    out_gather: super::gather::GatherBatch,
    /// The path's cap on a TPDU's payload last handed to the half (`Link::tpdu_cap`).
    path_cap: usize,
    /// The sending VC's path MTU search (`engine::path_probe`); `None` on a receiving
    /// end, a bare VC, or a link without a path MTU to search.
    pub(crate) path: Option<super::path_probe::PathProbe>,
    /// The sending VC's share of the engine's send buffer pool (`engine::send_pool`);
    /// `None` on a receiving end.
    pub(crate) pool: Option<super::send_pool::PoolShare>,
    /// The sending VC's cell pacer (`smooth=cell` on a cell-mode link,
    /// `engine::smoother`); `None`: a frame's cells leave back to back.
    pub(crate) smoother: Option<super::smoother::CellSmoother>,
    /// This direction is `none` in the connection's QoS (a simplex connection, seed
    /// 000 §5.3): its VC carries the transport's control TPDUs but no data, and the
    /// application may neither send nor receive on it.
    pub(crate) unused: bool,
}

impl<H: Simplex> End<H> {
    pub(super) fn new(half: H) -> End<H> {
        End {
            half,
            partial: Vec::new(),
            waker: None,
            waiters: 0,
            out_batch: SendBatch::with_capacity(MAX_DATAGRAM),
            out_gather: Default::default(),
            path_cap: usize::MAX,
            path: None,
            pool: None,
            smoother: None,
            unused: false,
        }
    }

    /// A sending end drawing on `pool`.
    pub(super) fn with_pool(half: H, pool: &std::sync::Arc<super::send_pool::SendPool>) -> End<H> {
        End {
            pool: Some(super::send_pool::PoolShare::new(pool.clone())),
            ..End::new(half)
        }
    }

    /// Whether the end is finished, in order or not.
    pub(crate) fn finished(&self) -> bool {
        self.half.is_finished()
    }

    /// What the end has come to.
    pub(crate) fn status(&self) -> HalfStatus {
        self.half.status()
    }
}

/// What only the engine can count: frames the connection refused before any PSB saw
/// them, frames that did not go out, watermark holds. Datagrams in and out are the
/// adaptor's counters (`UdpPort::stats`, `MemPort::stats`), not kept again here.
#[derive(Debug, Default)]
pub(crate) struct LinkCounters {
    pub(crate) not_natm: AtomicU64,
    pub(crate) unknown_vc: AtomicU64,
    pub(crate) bad_source: AtomicU64,
    /// Frames: not built (no room in the batch) or not taken by the adaptor.
    pub(crate) send_errors: AtomicU64,
    pub(crate) held_by_watermark: AtomicU64,
    /// ACKs and retransmissions handled before data that came ahead of them in the
    /// same receive batch (seed 003's receive priority, `RxPriority`).
    pub(crate) rx_high_first: AtomicU64,
    pub(crate) oam: OamCounters,
    pub(crate) rm: rm::RmCounters,
    pub(crate) seal: SealCounters,
}

/// What the sealing of an encrypted connection's TPDUs did (`Conn::crypt`; issue 16).
/// Every drop is made before the frame reaches a PSB: no state of the VC changes.
#[derive(Debug, Default)]
pub(crate) struct SealCounters {
    /// Frames sealed and sent.
    pub(crate) sealed: AtomicU64,
    /// Frames whose tag verified and that went on to their VC.
    pub(crate) opened: AtomicU64,
    /// Frames with another call's cookie: dropped before any decryption.
    pub(crate) bad_cookie: AtomicU64,
    /// Frames whose tag did not verify (forged, modified, another key), or too short
    /// to carry one.
    pub(crate) bad_tag: AtomicU64,
    /// Frames whose packet number was accepted before or is below the replay window,
    /// and clear TPDUs: dropped before any decryption.
    pub(crate) replayed: AtomicU64,
}

/// The keys of an encrypted connection: the sealer of this end's direction (shared
/// by both ends' sends, which draw packet numbers from it) and the opener of the
/// peer's (used by the read role's holder).
#[derive(Debug)]
pub(crate) struct Crypt {
    sealer: Sealer,
    opener: parking_lot::Mutex<Opener>,
    /// Sign and check end-to-end OAM loopback (`wire::oam_auth`, issue 31).
    oam: OamKeys,
}

impl Crypt {
    pub(crate) fn new(keys: &PathKeys) -> Crypt {
        Crypt {
            sealer: Sealer::new(&keys.tx),
            opener: parking_lot::Mutex::new(Opener::new(&keys.rx)),
            oam: OamKeys::new(keys),
        }
    }
}

/// What the connection's OAM F5 end point did (`engine::oam`).
#[derive(Debug, Default)]
pub(crate) struct OamCounters {
    /// Probes sent by this end.
    pub(crate) probes_sent: AtomicU64,
    /// Answers to this end's probes that came back in time.
    pub(crate) answers: AtomicU64,
    /// End-to-end loopback requests of the peer (or of a switch) answered here.
    pub(crate) looped: AtomicU64,
    /// The peer's path MTU probes (padded requests, `engine::path_probe`) answered
    /// here.
    pub(crate) path_probes_answered: AtomicU64,
    /// Answers no probe waited for (late, duplicated, foreign).
    pub(crate) unmatched: AtomicU64,
    /// Requests this end point does not answer (segment flow, another location).
    pub(crate) ignored: AtomicU64,
    /// OAM frames that were not loopback cells natm reads: dropped.
    pub(crate) malformed: AtomicU64,
    /// End-to-end requests not answered: over the answer budget
    /// (`oam::ANSWERS_PER_S`, `oam::ANSWER_BURST`).
    pub(crate) rate_limited: AtomicU64,
    /// On a sealed call, end-to-end requests and answers the peer did not sign.
    pub(crate) unauthenticated: AtomicU64,
    /// On a sealed call, signed requests whose tag was answered before (replays).
    pub(crate) replayed: AtomicU64,
}

/// A duplex connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) token: usize,
    pub(crate) link: Link,
    /// VCIs and cookie of the connection's frames (demultiplexing is natm-proto's).
    route: Route,
    /// VPI of the connection's frames: 0, but for a PVC.
    vpi: u8,
    /// The VCs carry bare AAL5 SDUs (`transport=none`): no TPDU header to parse.
    bare: bool,
    /// Where to send until the socket is connected (the client handshake calls the
    /// listener); from then on the link's connected peer is the one address.
    handshake_to: Option<SocketAddr>,
    sock_connected: AtomicBool,
    pub(crate) tx: Mutex<End<TxHalf>>,
    pub(crate) tx_cv: Condvar,
    pub(crate) rx: Mutex<End<RxHalf>>,
    pub(crate) rx_cv: Condvar,
    /// Who reads the link, whether the driver watches it, and what others asked of
    /// the reader (`read_role`). Shut by [`Conn::abort_both`]: after
    /// `shutdown(SHUT_RD)` a UDP socket reads as an endless run of empty datagrams,
    /// each filling the batch's one slot, so a drain would never end.
    read: ReadSide,
    dropped: AtomicBool,
    /// A VC of the connection exchanges ACKs: arrival stamps are worth reading.
    stamps: bool,
    tx_deadline: AtomicU64,
    rx_deadline: AtomicU64,
    /// The deadline the driver's timer heap holds an entry for (u64::MAX: none).
    armed: AtomicU64,
    pub(crate) level: Level,
    pub(crate) weight: u32,
    pub(crate) counters: LinkCounters,
    /// Run once when the engine forgets the connection (dropped and finished both
    /// ways): a signalled call's RELEASE, which must not overtake the data path's
    /// close (a switch tears the VCs down with it).
    pub(crate) on_gone: Mutex<Option<OnGone>>,
    /// The engine has forgotten the connection and run `on_gone`
    /// ([`super::Engine::remove_conn`]): its call's release is with sigd.
    pub(crate) forgotten: AtomicBool,
    /// sigd released the call this connection carries: its cause and sentence
    /// (`ulib::sigd`), what the application is told when the VCs end.
    pub(crate) released: OnceLock<(u8, String)>,
    /// Status changes for the application (`engine::events`).
    pub(crate) events: super::events::EventQueue,
    /// The receiving VC's EFCI state: whether its last data frame came marked
    /// congested (`rm`, TM 4.0 destination rule 2).
    efci: AtomicBool,
    /// OAM loopback probes of this end waiting for their answers, and their waiters.
    oam: Mutex<Probes>,
    oam_cv: Condvar,
    /// The call's TPDU keys: every TPDU either way is sealed (`wire::seal`); `None`:
    /// clear TPDUs, checked by the cookie alone.
    crypt: Option<Crypt>,
    /// The receive areas lent to this connection (`natm_udp::areas`), against a
    /// budget of its VC's receive buffer.
    pub(crate) areas: natm_udp::AreaAccount,
    /// Receive batches that brought the receiving VC something: a send after one is
    /// a reply, which the sending VC never holds to coalesce
    /// (`natm_proto::transport::coalesce`, `TxHalf::note_reverse`).
    pub(crate) rx_epoch: AtomicU64,
}

/// A task run when a connection is forgotten (see `Conn::on_gone`).
pub(crate) struct OnGone(pub(crate) Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for OnGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnGone")
    }
}

/// Which end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Tx,
    Rx,
}

fn lock<H>(m: &Mutex<End<H>>) -> MutexGuard<'_, End<H>> {
    m.lock()
}

impl Conn {
    /// The one place a connection of the engine is made: from natm-proto's
    /// [`Connection`], whichever way it was opened (`Connection::connect` for a
    /// caller, the listener's `Endpoint` for an accepted call, `Connection::signalled`
    /// for a call sigd set up). The socket is connected to the peer at once unless
    /// this side called directly: the accepting side answers from a socket of its own,
    /// whose address is learnt from the first valid answer.
    pub(crate) fn open(
        eng: &Engine,
        link: Link,
        conn: Connection,
        level: Level,
        weight: u32,
        keys: Option<&PathKeys>,
    ) -> std::io::Result<std::sync::Arc<Conn>> {
        let side = conn.side();
        let (route, remote, tx, rx) = conn.into_parts();
        let (vpi, bare) = (tx.vpi(), tx.is_bare());
        let probes_path = !bare && tx.searches_path() && link.probes_path();
        let stamps = tx.exchanges_acks() || rx.exchanges_acks();
        let peer = if side == Side::Client {
            Some(remote)
        } else {
            link.connect(remote)?;
            None
        };
        let conn = std::sync::Arc::new(Conn {
            token: eng.token(),
            link,
            route,
            vpi,
            bare,
            sock_connected: AtomicBool::new(peer.is_none()),
            handshake_to: peer,
            tx: Mutex::new(sync::Level::TxEnd, {
                let mut end = End::with_pool(tx, &eng.send_pool);
                if probes_path {
                    end.path = Some(Default::default());
                }
                end
            }),
            tx_cv: Condvar::new(),
            rx: Mutex::new(sync::Level::RxEnd, End::new(rx)),
            rx_cv: Condvar::new(),
            read: ReadSide::default(),
            dropped: AtomicBool::new(false),
            on_gone: Mutex::new(sync::Level::ConnGone, None),
            forgotten: AtomicBool::new(false),
            stamps,
            tx_deadline: AtomicU64::new(u64::MAX),
            rx_deadline: AtomicU64::new(u64::MAX),
            armed: AtomicU64::new(u64::MAX),
            level,
            weight,
            counters: LinkCounters::default(),
            areas: Default::default(),
            rx_epoch: AtomicU64::new(0),
            released: OnceLock::new(),
            events: super::events::EventQueue::new(),
            oam: Mutex::new(
                sync::Level::OamProbes,
                Probes::new(route.cookie.rotate_left(16)),
            ),
            oam_cv: Condvar::new(),
            efci: AtomicBool::new(false),
            // A bare VC has no TPDU to seal (sigd never gives it keys).
            crypt: keys.filter(|_| !bare).map(Crypt::new),
        });
        // On a host port the connection's frames find it by its route from now on.
        conn.link.route(route, bare)?;
        eng.add_conn(conn.clone())?;
        conn.flush_both(eng);
        Ok(conn)
    }

    /// Space the sending VC's cells at `cells_per_sec` from now on (`smooth=cell`,
    /// `engine::smoother`); nothing changes for `None` or unless the link is in cell
    /// mode (a frame-mode link has no cells to space: its frames are smoothed by the
    /// transport's shaper alone).
    pub(crate) fn smooth_cells(&self, eng: &Engine, cells_per_sec: Option<u64>) {
        let Some(rate) = cells_per_sec.filter(|_| self.link.is_cell()) else {
            return;
        };
        let (mut end, cv) = self.tx();
        end.smoother = Some(super::smoother::CellSmoother::new(rate));
        self.after(eng, Which::Tx, &mut end, cv, eng.clock.now(), usize::MAX);
    }

    /// Mark the directions the QoS says are `none`, `(tx, rx)` (seed 000 §5.3's
    /// simplex VCs): sends or receives on them fail with [`crate::Error::Simplex`].
    pub(crate) fn set_unused(&self, (tx, rx): (bool, bool)) {
        self.tx().0.unused = tx;
        self.rx().0.unused = rx;
    }

    /// The cell pacer's counters, if the sending VC is cell-smoothed.
    pub(crate) fn pacer_stats(&self) -> Option<natm_proto::flow::PacerStats> {
        self.tx().0.smoother.as_ref().map(|s| s.stats())
    }

    /// Send what both ends hold and arm their timers.
    pub(crate) fn flush_both(&self, eng: &Engine) {
        let now = eng.clock.now();
        let (mut tx, cv) = self.tx();
        self.after(eng, Which::Tx, &mut tx, cv, now, usize::MAX);
        drop(tx);
        let (mut rx, cv) = self.rx();
        self.after(eng, Which::Rx, &mut rx, cv, now, usize::MAX);
    }

    /// The sending end, locked, and its condition variable.
    pub(crate) fn tx(&self) -> (MutexGuard<'_, End<TxHalf>>, &Condvar) {
        (lock(&self.tx), &self.tx_cv)
    }

    /// The receiving end, locked, and its condition variable.
    pub(crate) fn rx(&self) -> (MutexGuard<'_, End<RxHalf>>, &Condvar) {
        (lock(&self.rx), &self.rx_cv)
    }

    /// Whether the connection's TPDUs are sealed.
    pub(crate) fn encrypted(&self) -> bool {
        self.crypt.is_some()
    }

    /// The status of one end.
    pub(crate) fn status(&self, w: Which) -> HalfStatus {
        match w {
            Which::Tx => lock(&self.tx).status(),
            Which::Rx => lock(&self.rx).status(),
        }
    }

    /// Threads waiting on one end's condition variable now, and whether a thread holds
    /// the read role (for tests of who waits where).
    #[cfg(test)]
    pub(crate) fn waiting(&self, w: Which) -> (u32, bool) {
        let waiters = match w {
            Which::Tx => lock(&self.tx).waiters,
            Which::Rx => lock(&self.rx).waiters,
        };
        (waiters, self.read.is_taken())
    }

    /// Hold the read role as a waiting application thread does — the socket out of the
    /// driver's epoll set — while `during` runs, then let it go the way such a thread
    /// does, without having read anything (the read slice ran out, or the thread was
    /// woken for another reason as a datagram came). Returns whether the socket was
    /// out of the set meanwhile; false, and `during` not run, if the role stayed taken
    /// for 5 s. The driver may hold the role for a moment (it reads the handshake's
    /// last frames, or a timer's): wait for it to let go.
    #[cfg(test)]
    pub(crate) fn hold_read_role_unread(&self, eng: &Engine, during: impl FnOnce()) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut role = loop {
            if let Some(role) = self.read.try_take() {
                break role;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        };
        self.quiet_for_wait(eng, &mut role);
        let quiet = role.watch() != Watch::Watched;
        during();
        self.go(eng, &mut role, Watch::rewatch);
        let mut batch = eng.take_buffer();
        self.release_read_role(eng, role, &mut batch);
        eng.give_buffer(batch);
        quiet
    }

    /// Whether the socket is in the driver's epoll set now.
    #[cfg(test)]
    pub(crate) fn driver_watches(&self) -> bool {
        self.read.watch() == Watch::Watched
    }

    /// The earliest timer of either end, nanoseconds of engine time.
    pub(crate) fn deadline(&self) -> u64 {
        self.tx_deadline
            .load(Ordering::Acquire)
            .min(self.rx_deadline.load(Ordering::Acquire))
    }

    /// Record `deadline` as armed if it is earlier than what is armed; true if the
    /// caller must add a heap entry for it.
    pub(crate) fn arm_earlier(&self, deadline: u64) -> bool {
        self.armed.fetch_min(deadline, Ordering::AcqRel) > deadline
    }

    /// The driver popped the heap entry for `deadline`.
    pub(crate) fn disarm(&self, deadline: u64) {
        let _ =
            self.armed
                .compare_exchange(deadline, u64::MAX, Ordering::AcqRel, Ordering::Acquire);
    }

    // ---- the read role ---------------------------------------------------------------

    /// Let the read role go, answering what other threads asked of it meanwhile
    /// (`read_role::ReadSide::let_go`).
    fn release_read_role<'a>(&'a self, eng: &Engine, role: Reading<'a>, buf: &mut RecvBatch) {
        self.read.let_go(role, |role, ask| match ask {
            Ask::Drain => self.drain(eng, role, buf),
            Ask::Release => {
                // The peer released the call: what the RELEASE followed is in the
                // socket by now; read it, then end the receiving VC.
                self.drain(eng, role, buf);
                self.end_rx_released(eng);
            }
            Ask::Rewatch => self.go(eng, role, Watch::rewatch),
        });
    }

    /// Make a transition of the link's [`Watch`] and do what it asks of the driver's
    /// epoll set. A link shut meanwhile ([`Conn::abort_both`] shuts, then takes it
    /// out) is taken out again if this added it after the abort's removal.
    fn go(&self, eng: &Engine, role: &mut Reading<'_>, t: impl FnOnce(&mut Watch) -> Epoll) {
        match role.go(t) {
            Epoll::Keep => {}
            Epoll::Add => {
                let _ = self.link.watch(eng, self.token);
                if self.read.is_shut() {
                    let _ = self.link.unwatch(eng);
                }
            }
            Epoll::Remove => {
                let _ = self.link.unwatch(eng);
            }
        }
    }

    /// Before the read role's holder waits on the socket itself: stop the driver being
    /// woken by it (`Watch::begin_wait`). A failure leaves the socket watched, which
    /// costs a wake-up and loses nothing.
    ///
    /// Out of the set, not only with another interest: a UDP socket's arrival wakes its
    /// wait queue with `EPOLLIN | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND`, so an
    /// `EPOLLPRI`-only registration still woke the driver inside `epoll_wait` once per
    /// datagram (no return, the same context switches; `perf record -e
    /// sched:sched_switch`).
    ///
    /// After the wait the socket goes back (`Watch::rewatch`, unless it parks): epoll
    /// checks a socket as it is added, so whatever arrived meanwhile and was not read
    /// raises an event at once; the driver, finding the role still held, asks for a
    /// drain ([`Ask::Drain`]) answered as the role is let go, or reads it itself once
    /// the role is free, so no datagram waits for a later one to be noticed.
    fn quiet_for_wait(&self, eng: &Engine, role: &mut Reading<'_>) {
        if role.go(Watch::begin_wait) == Epoll::Remove && self.link.unwatch(eng).is_err() {
            role.undo(Watch::Watched);
        }
    }

    /// Process whatever is queued on the socket now (the driver saw it readable, or
    /// an application thread needs progress); if another thread holds the read role,
    /// it drains once more as it lets the role go. The holder may have stopped at the
    /// high watermark, with the socket out of the driver's epoll set, before this
    /// caller took what it read: only a drain after that take ends the hold, and
    /// nothing else would ask for one.
    pub(crate) fn read_now(&self, eng: &Engine, buf: &mut RecvBatch) {
        if let Some(mut role) = self.read.take_or_ask(Ask::Drain) {
            self.drain(eng, &mut role, buf);
            self.release_read_role(eng, role, buf);
        }
    }

    /// Whether to stop reading the socket: the receive side went over its high
    /// watermark and has not yet come back under its low one (hysteresis), so the
    /// kernel sheds the excess before any work is spent on it (seed 000 §6.2.2).
    /// Called only by the read-role holder, which is what makes the hold's
    /// deregistration and re-registration with the driver's epoll race-free.
    fn over_watermark(&self, eng: &Engine, role: &mut Reading<'_>) -> bool {
        let Some(w) = eng.cfg.watermarks else {
            return false;
        };
        let (backlog, w) = {
            let rx = lock(&self.rx);
            let buf = rx.half.rcv_buf();
            let w = w.for_buffer(buf);
            // A reliable VC's window already holds its sender to the buffer (seed
            // 000 §6.2.1; the watermarks are §6.2.2's, for VCs whose sender nothing
            // holds back): it is held only if the sender overruns that. Held at the
            // high watermark, TPDUs its window let into flight waited unread in the
            // kernel until the sender's timer resent them (issue 34).
            let w = if rx.half.window_bounds_sender() {
                super::Watermarks { high: buf, ..w }
            } else {
                w
            };
            (rx.half.readable(), w)
        };
        if role.watch() == Watch::Held {
            if backlog <= w.low {
                // Watch the socket again; epoll reports what queued meanwhile. It is
                // in the set now, whatever a wait or a park had left.
                self.go(eng, role, Watch::end_hold);
                return false;
            }
            true
        } else if backlog > w.high {
            // Stop watching the socket too, not only reading it: every arrival would
            // otherwise still wake the driver (seed 000 §6.2.2's interrupt per packet),
            // and on a host with one CPU those wake-ups are the work that livelocks it.
            self.go(eng, role, Watch::hold);
            true
        } else {
            false
        }
    }

    /// Process every datagram queued on the socket now. Requires the read role.
    ///
    /// Frames are handed to their PSBs first and the ends flushed once per batch: the
    /// ACKs of a burst go out back to back, so the peer's engine wakes once for the
    /// burst rather than once per ACK (SMART still gets one ACK per TPDU).
    fn drain(&self, eng: &Engine, role: &mut Reading<'_>, batch: &mut RecvBatch) {
        let mut touched = [false; 2];
        self.drain_into(eng, role, batch, &mut touched);
        self.flush_touched(eng, touched);
    }

    /// Receive batches until the socket is empty or the watermarks say stop.
    fn drain_into(
        &self,
        eng: &Engine,
        role: &mut Reading<'_>,
        batch: &mut RecvBatch,
        touched: &mut [bool; 2],
    ) {
        // On a sealed VC a drain sends its ACKs after each quarter of the receive
        // buffer it takes (which bounds the peer's window), not only at its end: both
        // ends spend time on each octet (sealing, opening), and a receiver that took
        // the whole window before its first ACK would wait while the sender sealed
        // the next one — the two would take turns instead of overlapping. A clear
        // drain flushes at its end only: measured, ACKs in the middle of it made the
        // sender send in smaller runs and cost a clear VC a fifth of its throughput
        // (docs/decisions/0030-sealed-receive-in-place.md).
        let flush_at = match (&self.crypt, lock(&self.rx).half.rcv_buf() / 4) {
            (Some(_), n) if n > 0 => n,
            _ => usize::MAX,
        };
        let mut unflushed = 0;
        loop {
            if self.read.is_shut() {
                return;
            }
            if self.over_watermark(eng, role) {
                self.counters
                    .held_by_watermark
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            match self.link.recv_now(batch) {
                Ok(_) => {
                    // A batch that did not fill every buffer emptied the socket: a
                    // datagram arriving later is a new readiness edge for the driver.
                    let more = batch.may_have_more();
                    unflushed += natm_udp::areas::received(batch);
                    self.take_batch(eng, batch, touched);
                    if !more {
                        return;
                    }
                    if unflushed >= flush_at {
                        unflushed = 0;
                        self.flush_touched(eng, std::mem::take(touched));
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Hand every datagram of a received batch to its PSB, flushing the touched ends
    /// every [`FLUSH_EVERY`] datagrams so that the first ACKs of a long burst are not
    /// held back.
    fn take_batch(&self, eng: &Engine, batch: &mut RecvBatch, touched: &mut [bool; 2]) {
        // A sealed TPDU is opened where it arrived, so that what follows sees clear
        // TPDUs, lent or copied like any.
        let opened = self.crypt.as_ref().map(|c| self.open_in_place(c, batch));
        // A receive of some size is lent, not copied (`natm_udp::areas`): its
        // payloads go on as slices of the area.
        let area = if natm_udp::areas::received(batch) >= natm_udp::areas::LEND_MIN {
            let budget = lock(&self.rx).half.rcv_buf();
            eng.rx_areas.lend(&self.areas, batch, budget)
        } else {
            None
        };
        // One clock read for the datagrams one receive call brought (they arrived
        // together), not one each; read again after a flush, so the PSBs never see
        // time go back.
        let mut now = eng.clock.now();
        // The kernel stamps datagrams with the realtime clock; one read of it per
        // batch turns each stamp into the engine's clock. Only a VC that exchanges
        // ACKs uses the stamps (its ACKs carry them): others skip the read.
        let wall = self.stamps.then(natm_udp::wall_clock);
        let mut take = |n: usize, from, d: &[u8], opened, stamp, area: Option<&Bytes>| {
            let arrived = arrival(now, wall, stamp);
            if let Some(w) = self.take_datagram(eng, now, arrived, d, opened, Some(from), area) {
                touched[w as usize] = true;
            }
            if (n + 1).is_multiple_of(FLUSH_EVERY) {
                self.flush_touched(eng, std::mem::take(touched));
                now = eng.clock.now();
            }
        };
        let bytes: &[u8] = match &area {
            Some(a) => &a[..],
            None => batch.area(),
        };
        // seed 003: ACKs, NACKs and retransmissions first (`rx_order`).
        for (n, d) in rx_order::in_priority_order(batch, bytes, !self.bare).enumerate() {
            if d.jumped {
                self.counters.rx_high_first.fetch_add(1, Ordering::Relaxed);
            }
            let seal = match &opened {
                None => Sealed::Clear,
                Some(o) => sealed_at(o, d.span.start),
            };
            take(n, d.from, &bytes[d.span], seal, d.stamp, area.as_ref());
        }
    }

    fn flush_touched(&self, eng: &Engine, touched: [bool; 2]) {
        let now = eng.clock.now();
        if touched[Which::Tx as usize] {
            let (mut end, cv) = self.tx();
            self.after(eng, Which::Tx, &mut end, cv, now, usize::MAX);
        }
        if touched[Which::Rx as usize] {
            self.rx_epoch.fetch_add(1, Ordering::Relaxed);
            let (mut end, cv) = self.rx();
            self.after(eng, Which::Rx, &mut end, cv, now, usize::MAX);
        }
    }

    /// Whether the watermarks hold reading off (the socket out of the driver's epoll
    /// set): only a drain by a reader ends the hold.
    pub(crate) fn held_by_watermark(&self) -> bool {
        self.read.watch() == Watch::Held
    }

    /// The application dropped its handle; the engine forgets the connection once
    /// both VCs have finished.
    pub(crate) fn mark_dropped(&self, eng: &Engine) {
        self.dropped.store(true, Ordering::SeqCst);
        if self.collectable() {
            eng.remove_conn(self.token);
        }
    }

    /// Dropped by the application and finished in both directions.
    pub(crate) fn collectable(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
            && lock(&self.tx).finished()
            && lock(&self.rx).finished()
    }

    /// Read as an application thread: wait up to the read slice for the socket (or
    /// spin, in busy-poll mode), then take everything queued, a batch at a time.
    /// Returns false if another thread holds the read role.
    pub(crate) fn read_as_app(&self, eng: &Engine, batch: &mut RecvBatch) -> bool {
        if self.read.is_shut() {
            // Aborted: the caller finds the abort in the end, or waits on its
            // condition variable (never a spin on a shut socket).
            return false;
        }
        // If another thread reads, ask it to drain once more when it lets go: it may
        // have stopped at the high watermark just before this thread consumed enough
        // to go under the low one, and the socket's readiness edge is spent, so
        // without this nobody would read until the caller's read slice ran out.
        let Some(mut role) = self.read.take_or_ask(Ask::Drain) else {
            return false;
        };
        if !self.over_watermark(eng, &mut role) {
            let mut touched = [false; 2];
            self.quiet_for_wait(eng, &mut role);
            let first = if eng.cfg.busy_poll {
                let until = std::time::Instant::now() + super::link::READ_SLICE;
                self.link.recv_spin(batch, until)
            } else {
                self.link.recv_wait(batch)
            };
            if first.is_ok() {
                // A lone datagram (a small message, a ping) is answered at once, without
                // a last empty `recvmmsg` on the latency path; anything that arrived
                // with it raised its own readiness edge, so the driver reads it, or
                // finds this thread holding the role and asks it for a drain at the
                // release below. A GRO run means a burst: read on, as does a cell
                // link that read trains it has not handed over whole.
                let burst = batch.len() > 1 || batch.marked_more();
                self.take_batch(eng, batch, &mut touched);
                if burst {
                    self.drain_into(eng, &mut role, batch, &mut touched);
                }
            }
            self.end_wait(eng, &mut role, first.is_ok());
            self.flush_touched(eng, touched);
        }
        self.release_read_role(eng, role, batch);
        true
    }

    /// A TPDU the listener's endpoint routed to this connection (a repeated CONN-REQ).
    pub(crate) fn on_routed(&self, eng: &Engine, half: Half, tpdu: Bytes) {
        let now = eng.clock.now();
        match half {
            Half::Tx => {
                let (mut e, cv) = self.tx();
                e.half.handle_frame(now, tpdu);
                self.after(eng, Which::Tx, &mut e, cv, now, usize::MAX);
            }
            Half::Rx => {
                let (mut e, cv) = self.rx();
                e.half.handle_frame(now, tpdu);
                self.after(eng, Which::Rx, &mut e, cv, now, usize::MAX);
            }
        }
    }

    /// Hand a datagram to its VC's half without sending anything yet; returns the end
    /// it touched. The VC is found by natm-proto's [`Route`]; the half checks the
    /// cookie (and counts a wrong one).
    /// `d` is a slice of `area` when the receive was lent (its payload is sliced, not
    /// copied).
    #[allow(clippy::too_many_arguments)]
    fn take_datagram(
        &self,
        eng: &Engine,
        now: Instant,
        arrived: Instant,
        d: &[u8],
        seal: Sealed,
        from: Option<SocketAddr>,
        area: Option<&Bytes>,
    ) -> Option<Which> {
        stages::record(Stage::RxRead, self.stage_key());
        if seal == Sealed::Refused {
            return None;
        }
        let Some(vci) = vc_of_on(d, self.vpi) else {
            let Some(touched) = self.take_oam(eng, d, from) else {
                self.counters.not_natm.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            return touched;
        };
        let Some(half) = self.route.half_of(vci) else {
            self.counters.unknown_vc.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.note_efci(half, d);
        let tpdu = &d[VC_HEADER_LEN..];
        let bare = self.bare;
        let frame = match seal {
            Sealed::Clear => tpdu,
            Sealed::Opened(len) => &tpdu[..len],
            // The opening pass counted what it refused, and found a VC here for
            // every frame it looked at.
            Sealed::Refused | Sealed::Unopened => {
                self.counters.seal.bad_tag.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let connected = match half {
            Half::Tx => {
                let (mut end, _) = self.tx();
                feed(&mut end.half, now, arrived, frame, bare, area);
                end.status().connected
            }
            Half::Rx => {
                let (mut end, _) = self.rx();
                feed(&mut end.half, now, arrived, frame, bare, area);
                if stages::COMPILED && end.half.readable() > 0 {
                    stages::record(Stage::Deliver, self.stage_key());
                }
                end.status().connected
            }
        };
        // Client handshake: the accepting side answers from the connection's own
        // socket; once a valid answer (right cookie) arrives, pin the socket to it.
        if !self.sock_connected.load(Ordering::Acquire) && connected {
            if let Some(src) = from {
                if self.link.connect(src).is_ok() {
                    self.sock_connected.store(true, Ordering::Release);
                }
            } else {
                self.counters.bad_source.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(match half {
            Half::Tx => Which::Tx,
            Half::Rx => Which::Rx,
        })
    }

    /// Open in place every sealed TPDU of a batch on an encrypted connection, cheapest
    /// checks first (issue 16): the cookie (a compare), then the packet number against
    /// the replay window (a bitmap), and only then the tag (AES-GCM over the frame).
    /// Whatever fails is counted here and dropped before any PSB sees it. Frames that
    /// are not data on one of the connection's VCs (OAM, strangers) are left as they
    /// came, for `take_datagram` to route or count.
    fn open_in_place(&self, c: &Crypt, batch: &mut RecvBatch) -> Vec<(usize, Sealed)> {
        let n = &self.counters.seal;
        let cookie = self.route.cookie.to_be_bytes();
        let mut opener = c.opener.lock();
        let mut opened = Vec::with_capacity(batch.len());
        batch.for_each_mut(|span, d| {
            let known = vc_of_on(d, self.vpi).is_some_and(|vci| self.route.half_of(vci).is_some());
            if !known {
                return;
            }
            let tpdu = &mut d[VC_HEADER_LEN..];
            let seal = if tpdu.get(4..8) != Some(&cookie[..]) {
                n.bad_cookie.fetch_add(1, Ordering::Relaxed);
                Sealed::Refused
            } else {
                match opener.open(tpdu) {
                    Ok(clear) => {
                        n.opened.fetch_add(1, Ordering::Relaxed);
                        Sealed::Opened(clear.len())
                    }
                    Err(OpenError::BadTag | OpenError::Truncated(_)) => {
                        n.bad_tag.fetch_add(1, Ordering::Relaxed);
                        Sealed::Refused
                    }
                    Err(OpenError::Replayed(_) | OpenError::NotSealed) => {
                        n.replayed.fetch_add(1, Ordering::Relaxed);
                        Sealed::Refused
                    }
                }
            };
            opened.push((span.start, seal));
        });
        opened
    }

    /// An OAM frame on one of the connection's VCs (`engine::oam`): answered, handed
    /// to the probe waiting for it, or counted and dropped.
    /// `None` if `d` is not an OAM or RM frame; else the end it touched, if any (an
    /// answer to the sending VC's path MTU probe).
    fn take_oam(&self, eng: &Engine, d: &[u8], from: Option<SocketAddr>) -> Option<Option<Which>> {
        let Ok((h, sdu)) = vcframe::Repr::parse_bytes(d) else {
            return None;
        };
        if h.kind == vcframe::FrameKind::Rm && h.vpi == self.vpi {
            self.take_rm(eng, &h, sdu);
            return Some(None);
        }
        if h.kind != vcframe::FrameKind::Oam || h.vpi != 0 {
            return None;
        }
        if self.route.half_of(h.vci).is_none() {
            self.counters.unknown_vc.fetch_add(1, Ordering::Relaxed);
            return Some(None);
        }
        let c = &self.counters.oam;
        let keys = self.crypt.as_ref().map(|k| &k.oam);
        let action = oam::on_frame(Scope::of_frame(&h), sdu, keys);
        let refusal = match action {
            Action::Answer(_, tag) => self
                .oam
                .lock()
                .may_answer(
                    eng.clock.now(),
                    tag,
                    keys.is_some(),
                    sdu.len() > crate::wire::cell::PAYLOAD_LEN,
                )
                .err(),
            _ => None,
        };
        match (action, refusal) {
            (Action::Answer(..), Some(oam::Unanswered::RateLimited)) => {
                c.rate_limited.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Answer(..), Some(oam::Unanswered::Replayed)) => {
                c.replayed.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Answer(payload, _), None) => {
                // Back on the same VC, the way it came (`h` keeps VCI and flow).
                let mut batch = SendBatch::with_capacity(VC_HEADER_LEN + payload.len());
                let header = vcframe::Repr { clp: false, ..h }.to_bytes();
                if batch.push(&[&header, &payload]).is_ok() {
                    let peer = if self.sock_connected.load(Ordering::Acquire) {
                        None
                    } else {
                        from.or(self.handshake_to)
                    };
                    self.send_batch(&batch, peer);
                    // A padded request is the peer's path MTU probe.
                    let n = if sdu.len() > payload.len() {
                        &c.path_probes_answered
                    } else {
                        &c.looped
                    };
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Action::Answered(tag), _) => {
                let now = eng.clock.now();
                if self.oam.lock().answered(tag, now) {
                    if self.path_answered(tag, now) {
                        return Some(Some(Which::Tx));
                    }
                    c.answers.fetch_add(1, Ordering::Relaxed);
                    self.oam_cv.notify_all();
                } else {
                    c.unmatched.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Action::Ignored, _) => {
                c.ignored.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Malformed, _) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
            }
            (Action::Unauthenticated, _) => {
                c.unauthenticated.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(None)
    }

    /// Whether the OAM answer `tag` is the sending VC's path MTU probe (then its size
    /// is confirmed, and the VC may cut larger TPDUs).
    fn path_answered(&self, tag: u32, now: Instant) -> bool {
        let (mut end, _) = self.tx();
        let Some(p) = end.path.as_mut().filter(|p| p.tag() == Some(tag)) else {
            return false;
        };
        let rtt = self.oam.lock().take_answer(tag).unwrap_or_default();
        p.answered(now, tag, rtt)
    }

    /// Send one OAM F5 loopback request of flow `scope` on the sending VC and wait up
    /// to `timeout` for its answer: the round trip, or `None` if none came (the probe
    /// is then given up on, and a late answer counts as unmatched). Who reads the
    /// socket meanwhile is the read role's holder, as for any frame.
    pub(crate) fn oam_loopback(
        &self,
        eng: &Engine,
        scope: Scope,
        timeout: Duration,
    ) -> Result<Option<Duration>, TooManyProbes> {
        // The answer must be read as it comes, by the driver if nobody else.
        self.unpark(eng);
        let tag = self.oam.lock().start(eng.clock.now())?;
        let payload = self.loopback_request(scope, tag);
        let header = scope.frame_header(0, self.route.tx_vci).to_bytes();
        let mut batch = SendBatch::with_capacity(VC_HEADER_LEN + payload.len());
        if batch.push(&[&header, &payload]).is_ok() {
            let peer = if self.sock_connected.load(Ordering::Acquire) {
                None
            } else {
                self.handshake_to
            };
            self.send_batch(&batch, peer);
            self.counters
                .oam
                .probes_sent
                .fetch_add(1, Ordering::Relaxed);
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut probes = self.oam.lock();
        loop {
            if let Some(rtt) = probes.take_answer(tag) {
                return Ok(Some(rtt));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                probes.forget(tag);
                return Ok(None);
            }
            self.oam_cv.wait_for(&mut probes, left);
        }
    }

    /// An OAM loopback request of flow `scope` with correlation `tag`: a sealed call
    /// signs its end-to-end probes; a segment probe is for a switch, which holds no
    /// call keys.
    fn loopback_request(&self, scope: Scope, tag: u32) -> [u8; crate::wire::cell::PAYLOAD_LEN] {
        let request = crate::wire::oam::Loopback::request(tag);
        match &self.crypt {
            Some(k) if scope == Scope::EndToEnd => k.oam.sign(request),
            _ => request,
        }
        .to_bytes()
    }

    /// Run the sending VC's path MTU search (`engine::path_probe`) up to `now`: send
    /// the probe it asks for, forget one it gave up on. Returns the cap on a TPDU's
    /// payload that the confirmed size allows (`limit`: the largest TPDU payload the
    /// VC may send; `sending`: whether it has data queued, without which it does not
    /// probe; `overhead`: the seal's).
    fn probe_path(
        &self,
        p: &mut super::path_probe::PathProbe,
        (limit, sending): (usize, (bool, std::time::Duration)),
        overhead: usize,
        now: Instant,
        peer: Option<SocketAddr>,
        retx: impl Fn() -> u64,
    ) -> usize {
        let fixed = VC_HEADER_LEN + crate::wire::tpdu::HEADER_LEN + overhead;
        let full = limit.saturating_add(fixed);
        let step = p.step(now, (self.link.path_payload(), full), sending, retx);
        if let Some(tag) = step.lost {
            self.oam.lock().forget(tag);
        }
        if let Some(size) = step.probe {
            // The answer to a probe is an OAM answer like any other: the probe takes
            // a tag from the connection's loopback probes.
            if let Ok(tag) = self.oam.lock().start(now) {
                let request = self.loopback_request(Scope::EndToEnd, tag);
                let header = Scope::EndToEnd
                    .frame_header(0, self.route.tx_vci)
                    .to_bytes();
                let mut frame = vec![0; size.max(VC_HEADER_LEN + request.len())];
                super::path_probe::write_probe(&mut frame, &header, &request);
                p.sent(tag, size);
                // One the kernel refuses is never answered: the search counts it lost.
                let _ = self.link.send_probe(&frame, peer);
            }
        }
        p.plpmtu().saturating_sub(fixed).max(1)
    }

    /// After any input to an end: send what it has (up to `max` TPDUs), re-arm its
    /// timer, and wake whoever waits on it if it made progress. Returns TPDUs sent.
    /// (What the events mean is already in the half's status: natm-proto keeps it.)
    pub(crate) fn after<H: Simplex + Progress>(
        &self,
        eng: &Engine,
        which: Which,
        end: &mut End<H>,
        cv: &Condvar,
        now: Instant,
        max: usize,
    ) -> usize {
        let mut sent = 0;
        let peer = if self.sock_connected.load(Ordering::Acquire) {
            None
        } else {
            self.handshake_to
        };
        // Frames go out in batches: runs of equal sizes leave in one GSO sendmsg (a
        // burst of ACKs, or the full TPDUs of a message).
        let mut batch = std::mem::take(&mut end.out_batch);
        batch.clear();
        let header = vc_header_on(end.half.vpi(), end.half.vci());
        // A bare VC's frames are the VC header and the SDU itself (docs/wire.md).
        while self.bare && sent < max {
            let Some(sdu) = end.half.poll_sdu(now) else {
                break;
            };
            let len = VC_HEADER_LEN + sdu.len();
            if batch.check(len).is_err() {
                self.emit(&mut end.smoother, &batch, peer, now);
                batch.clear();
            }
            let pushed = batch.push_with(len, |out| {
                out[..VC_HEADER_LEN].copy_from_slice(&header);
                out[VC_HEADER_LEN..].copy_from_slice(&sdu);
            });
            if pushed.is_err() {
                self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            }
            sent += 1;
        }
        // An encrypted connection seals each TPDU in place in the batch, after its
        // header and payload are written: no copy beyond the one into the batch, and
        // every frame — a SMART retransmission too — takes a new packet number.
        let overhead = if self.crypt.is_some() {
            seal::OVERHEAD
        } else {
            0
        };
        // Issue 30: TPDUs cut to the path MTU (one relaxed load; the half is told
        // only when the link learnt a new MTU).
        if which == Which::Tx {
            let mut cap = self.link.tpdu_cap(overhead > 0);
            if let (Some(limit), true) = (end.half.tpdu_limit(), end.path.is_some()) {
                let sending = (end.half.send_queued() > 0, end.half.rto());
                let half = &end.half;
                let retx = || half.retransmitted();
                if let Some(p) = end.path.as_mut() {
                    cap = cap.min(self.probe_path(p, (limit, sending), overhead, now, peer, retx));
                }
            }
            if cap != end.path_cap {
                end.path_cap = cap;
                end.half.set_path_cap(cap);
            }
        }
        // A clear TPDU on a frame-mode UDP link is gathered: its headers written,
        // its payload sent from where the send queue holds it (`engine::gather`).
        if !self.bare && self.crypt.is_none() && self.link.gathers() {
            let mut run = std::mem::take(&mut end.out_gather);
            while sent < max {
                let Some(t) = end.half.poll_transmit(now) else {
                    break;
                };
                let len = VC_HEADER_LEN + t.len();
                if !run.fits(len) {
                    self.send_gathered(&run, peer);
                    run.clear();
                }
                run.push(&header, &t.header, t.payload);
                sent += 1;
            }
            if !run.is_empty() {
                self.send_gathered(&run, peer);
                run.clear();
            }
            end.out_gather = run;
        }
        while sent < max {
            let Some(t) = end.half.poll_transmit(now) else {
                break;
            };
            let len = VC_HEADER_LEN + t.len() + overhead;
            if batch.check(len).is_err() {
                self.emit(&mut end.smoother, &batch, peer, now);
                batch.clear();
            }
            // A TPDU whose seal fails (its packet numbers spent) is not added to the
            // batch: its payload, still clear, must not leave.
            let pushed = batch.try_push_with(len, |out| {
                out[..VC_HEADER_LEN].copy_from_slice(&header);
                t.header.emit_into(&mut out[VC_HEADER_LEN..]);
                let body = VC_HEADER_LEN + crate::wire::tpdu::HEADER_LEN;
                out[body..body + t.payload.len()].copy_from_slice(&t.payload);
                match &self.crypt {
                    Some(c) => c.sealer.seal(&mut out[VC_HEADER_LEN..]).is_ok(),
                    None => true,
                }
            });
            if pushed != Ok(true) {
                self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
            } else if overhead > 0 {
                self.counters.seal.sealed.fetch_add(1, Ordering::Relaxed);
            }
            sent += 1;
        }
        if !batch.is_empty() {
            self.emit(&mut end.smoother, &batch, peer, now);
        }
        end.out_batch = batch;
        if which == Which::Tx && !self.bare {
            self.send_due_rm(end, now);
        }
        // A cell-smoothed VC's cells whose slots came, with or without new frames.
        if let Some(s) = end.smoother.as_mut() {
            self.send_due(s, peer, now);
        }
        let mut woke = false;
        while let Some(ev) = end.half.poll_event() {
            woke = true;
            if let Some(ev) = super::events::ConnEvent::of(which == Which::Tx, ev) {
                self.events.push(ev);
            }
        }
        let deadline = end
            .half
            .poll_timeout()
            .into_iter()
            .chain(end.smoother.as_ref().and_then(|s| s.next()))
            .chain(end.path.as_ref().and_then(|p| p.deadline()))
            .min()
            .map_or(u64::MAX, |t| t.as_nanos());
        match which {
            Which::Tx => self.tx_deadline.store(deadline, Ordering::Release),
            Which::Rx => self.rx_deadline.store(deadline, Ordering::Release),
        }
        if deadline != u64::MAX {
            eng.arm(self, deadline);
        }
        // What the queue freed (acknowledged, or sent without error control) goes
        // back to the host's pool, waking senders of other VCs asleep on it.
        if let Some(p) = end.pool.as_mut() {
            p.settle(end.half.send_queued());
        }
        let progress = woke || end.half.has_progress();
        if progress && end.waiters > 0 {
            cv.notify_all();
        }
        if progress {
            if let Some(w) = end.waker.take() {
                w.wake();
            }
        }
        sent
    }

    fn send_gathered(&self, run: &super::gather::GatherBatch, peer: Option<SocketAddr>) {
        stages::record(Stage::TxStart, self.stage_key());
        let r = self.link.send_gathered(run, peer);
        stages::record(Stage::TxDone, self.stage_key());
        let unsent = run.len() - r.map_or(0, |n| n.min(run.len()));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    /// Send `batch` now, or hand its frames to the VC's cell pacer, which sends the
    /// cells whose slots have come.
    fn emit(
        &self,
        smoother: &mut Option<super::smoother::CellSmoother>,
        batch: &SendBatch,
        peer: Option<SocketAddr>,
        now: Instant,
    ) {
        match smoother {
            Some(s) => {
                s.push(now, batch);
                self.send_due(s, peer, now);
            }
            None => self.send_batch(batch, peer),
        }
    }

    /// Send the cells of `s` due at `now`.
    fn send_due(
        &self,
        s: &mut super::smoother::CellSmoother,
        peer: Option<SocketAddr>,
        now: Instant,
    ) {
        let (bytes, unit) = s.due(now);
        if bytes.is_empty() {
            return;
        }
        let n = bytes.len() / unit;
        let r = self.link.send_units(bytes, unit, peer);
        let unsent = n - r.map_or(0, |k| k.min(n));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    fn send_batch(&self, batch: &SendBatch, peer: Option<SocketAddr>) {
        stages::record(Stage::TxStart, self.stage_key());
        let r = self.link.send_batch(batch, peer);
        stages::record(Stage::TxDone, self.stage_key());
        let unsent = batch.len() - r.map_or(0, |n| n.min(batch.len()));
        if unsent > 0 {
            self.counters
                .send_errors
                .fetch_add(unsent as u64, Ordering::Relaxed);
        }
    }

    /// This connection's key in `natm::stages` records.
    pub(crate) fn stage_key(&self) -> u64 {
        self as *const Conn as u64
    }

    /// Timers: run the timers of each end that is due.
    pub(crate) fn on_timer(&self, eng: &Engine, now: Instant) {
        if self.tx_deadline.load(Ordering::Acquire) <= now.as_nanos() {
            let (mut end, cv) = self.tx();
            // The deadline may be a paced cell's slot rather than the half's own.
            if end.half.poll_timeout().is_some_and(|t| t <= now) {
                end.half.handle_timeout(now);
            }
            self.after(eng, Which::Tx, &mut end, cv, now, usize::MAX);
        }
        if self.rx_deadline.load(Ordering::Acquire) <= now.as_nanos() {
            let (mut end, cv) = self.rx();
            end.half.handle_timeout(now);
            self.after(eng, Which::Rx, &mut end, cv, now, usize::MAX);
        }
    }

    /// Send up to `max` TPDUs of deferred work (the scheduler's task). Returns the
    /// work done.
    pub(crate) fn task(&self, eng: &Engine, max: u32) -> u32 {
        stages::record(Stage::Sched, self.stage_key());
        let now = eng.clock.now();
        let mut done = {
            let (mut end, cv) = self.rx();
            self.after(eng, Which::Rx, &mut end, cv, now, max as usize) as u32
        };
        if done < max {
            let (mut end, cv) = self.tx();
            done += self.after(eng, Which::Tx, &mut end, cv, now, (max - done) as usize) as u32;
        }
        done
    }

    /// Wait (as an application thread) until `cond` holds for the sending end,
    /// reading the socket when no one else is. `None` timeout: forever.
    pub(crate) fn wait_tx<R>(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        cond: impl FnMut(&mut End<TxHalf>) -> Option<R>,
    ) -> Option<R> {
        // A sender held back by its leaky bucket waits for the bucket's timer,
        // which the driver runs, not for the socket: blocked in the socket's
        // receive it would sleep out the whole read slice (50 ms) while the driver
        // emptied its send buffer at the reserved rate, and a fast guaranteed VC
        // then idled most of the time (`natm-lab perf guaranteed`: 0.29 of 1 Gbit/s).
        // On the condition variable the driver's `after` wakes it as soon as the
        // timer made room.
        self.wait_on(eng, &self.tx, &self.tx_cv, timeout, cond, |e| {
            e.half.over_rate()
        })
    }

    /// As [`Conn::wait_tx`], for the receiving end.
    pub(crate) fn wait_rx<R>(
        &self,
        eng: &Engine,
        timeout: Option<Duration>,
        mut cond: impl FnMut(&mut End<RxHalf>) -> Option<R>,
    ) -> Option<R> {
        let taken = |end: &mut End<RxHalf>| {
            // Even when `cond` finds nothing whole yet: it may have taken part of a
            // message (`recv` gathers chunks), freeing the window all the same.
            let r = cond(end);
            self.send_read_control(eng, end);
            r
        };
        self.wait_on(eng, &self.rx, &self.rx_cv, timeout, taken, |_| false)
    }

    /// After the application took data: a read that reopened a shut window queued a
    /// window update, sent now — the sender has nothing in flight whose arrival would
    /// make this host look at the VC again, and would wait for its retransmission
    /// timer (issue 34).
    pub(crate) fn send_read_control(&self, eng: &Engine, end: &mut End<RxHalf>) {
        if end.half.has_control() {
            self.after(
                eng,
                Which::Rx,
                end,
                &self.rx_cv,
                eng.clock.now(),
                usize::MAX,
            );
        }
    }

    fn wait_on<H, R>(
        &self,
        eng: &Engine,
        m: &Mutex<End<H>>,
        cv: &Condvar,
        timeout: Option<Duration>,
        mut cond: impl FnMut(&mut End<H>) -> Option<R>,
        paced: impl Fn(&End<H>) -> bool,
    ) -> Option<R> {
        let mut until = None;
        let mut batch = eng.take_buffer();
        let out = loop {
            let paced = {
                let mut end = lock(m);
                if let Some(r) = cond(&mut end) {
                    break Some(r);
                }
                paced(&end)
            };
            // The deadline is set at the first miss: what is ready already costs no
            // clock read (a chunk at a time, that was one read per TPDU).
            let until =
                *until.get_or_insert_with(|| timeout.map(|t| std::time::Instant::now() + t));
            if until.is_some_and(|u| std::time::Instant::now() >= u) {
                // A thread that gives up leaves the socket to the driver, parked or
                // not.
                self.unpark(eng);
                break None;
            }
            if paced || !self.read_as_app(eng, &mut batch) {
                let mut end = lock(m);
                if let Some(r) = cond(&mut end) {
                    break Some(r);
                }
                let slice =
                    super::link::READ_SLICE.min(until.map_or(super::link::READ_SLICE, |u| {
                        u.saturating_duration_since(std::time::Instant::now())
                    }));
                end.waiters += 1;
                cv.wait_for(&mut end, slice);
                end.waiters -= 1;
            }
        };
        eng.give_buffer(batch);
        self.end_waits(eng);
        out
    }

    /// The peer's application released the call normally (cause 16): the receiving
    /// VC ends after what arrived, as if its close had come. A peer running this
    /// library releases only once its data path has closed, so the close came
    /// already and this changes nothing; a RELEASE that overtakes the close (an
    /// administrator's, or a peer that does not wait) must not leave the reader
    /// waiting for a close a switch on the path can no longer carry. The sending VC
    /// finishes, or times out, by itself.
    ///
    /// What already waits on the data socket is read first: the RELEASE comes by
    /// sigd's stream and the data by the socket, and nothing orders the two. A
    /// point-to-multipoint leaf depends on it — no CLOSE-ACK holds its root's release
    /// back, so the switch's last copies and its RELEASE reach this host together.
    ///
    /// Another thread may hold the read role with datagrams read and not yet fed (the
    /// driver, an application thread): then that holder ends the VC as it lets the
    /// role go (`release_read_role`), never before it has fed them.
    pub(crate) fn peer_released(&self, eng: &Engine) {
        self.read.ask(Ask::Release);
        if let Some(role) = self.read.try_take() {
            let mut buf = eng.take_buffer();
            self.release_read_role(eng, role, &mut buf);
            eng.give_buffer(buf);
        }
    }

    /// The receiving VC's end after the peer's release (`peer_released`).
    fn end_rx_released(&self, eng: &Engine) {
        let now = eng.clock.now();
        let (mut e, cv) = self.rx();
        if !e.finished() {
            e.half.peer_released(now);
            self.after(eng, Which::Rx, &mut e, cv, now, usize::MAX);
            cv.notify_all();
            if let Some(wk) = e.waker.take() {
                wk.wake();
            }
        }
    }

    /// End both VCs at once — the application aborted, or sigd released the call
    /// because the peer application or its host went away (`reason` = `Peer`): every
    /// waiter sees "aborted" with `reason`. Ends already finished stay as they ended.
    pub(crate) fn abort_both(&self, eng: &Engine, reason: AbortReason) {
        let now = eng.clock.now();
        {
            let (mut e, cv) = self.tx();
            if !e.finished() {
                // Cells still waiting for their slots go with the rest of the queue.
                if let Some(s) = e.smoother.as_mut() {
                    s.clear();
                }
                e.half.abort(reason);
                self.after(eng, Which::Tx, &mut e, cv, now, usize::MAX);
                cv.notify_all();
                if let Some(wk) = e.waker.take() {
                    wk.wake();
                }
            }
        }
        {
            let (mut e, cv) = self.rx();
            if !e.finished() {
                e.half.abort(reason);
                self.after(eng, Which::Rx, &mut e, cv, now, usize::MAX);
                cv.notify_all();
                if let Some(wk) = e.waker.take() {
                    wk.wake();
                }
            }
        }
        // A thread blocked in the socket's receive would see the abort only when its
        // read slice ran out (50 ms, most of issue 6's 100 ms budget for "peer
        // aborted"): shut the socket's read side to wake it at once. Nothing more is
        // read from this connection, so the driver stops watching it first: shut
        // first, so that a reader re-adding the socket meanwhile takes it out again
        // (`Conn::go`).
        self.read.shut();
        let _ = self.link.unwatch(eng);
        self.link.interrupt_reader();
    }
}

/// When a datagram the kernel stamped `stamp` reached the host, on the engine's
/// clock, given `now` and the realtime clock `wall` read together: `now` less the
/// time it waited (`natm_udp::stamp_age`), else (or without `wall`) `now` itself.
fn arrival(now: Instant, wall: Option<Duration>, stamp: Option<std::time::Duration>) -> Instant {
    wall.map_or(now, |wall| {
        now - natm_udp::stamp_age(wall, stamp).unwrap_or_default()
    })
}

/// What the opening pass of an encrypted connection did with one datagram
/// (`Conn::open_in_place`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sealed {
    /// A clear connection: nothing to open.
    Clear,
    /// Opened in place: its clear TPDU is the first this many octets after the VC
    /// header.
    Opened(usize),
    /// Counted and dropped (wrong cookie, replayed, bad tag).
    Refused,
    /// Not looked at: not a data frame of the connection's VCs (OAM, a stranger).
    Unopened,
}

/// Where the opening pass left the datagram at `start` (the pass meets the
/// datagrams in arrival order, so its list is sorted by it).
fn sealed_at(list: &[(usize, Sealed)], start: usize) -> Sealed {
    list.binary_search_by_key(&start, |&(s, _)| s)
        .map_or(Sealed::Unopened, |i| list[i].1)
}

/// Hand one clear TPDU (a sealed one already opened in place) to a half. The
/// payload is a slice of the receive area when the receive was lent (`area`, which
/// `tpdu` lies in; `natm_udp::areas`), else it is copied out of the receive batch on
/// its own (offset 0 of a fresh allocation), so `recv` can hand a message of one
/// TPDU to the application without a second copy either way. On a bare VC (`bare`)
/// the frame is the SDU, sliced or copied likewise.
///
/// `arrived` is when the datagram reached the host (the kernel's stamp, else `now`):
/// a receiver stamps its ACKs with it (`Psb::handle_tpdu_at`).
pub(super) fn feed<H: Simplex>(
    half: &mut H,
    now: Instant,
    arrived: Instant,
    tpdu: &[u8],
    bare: bool,
    area: Option<&Bytes>,
) {
    let own = |s: &[u8]| match area {
        Some(a) => a.slice_ref(s),
        None => Bytes::copy_from_slice(s),
    };
    if bare {
        return half.handle_frame(now, own(tpdu));
    }
    match Header::parse_bytes(tpdu) {
        Ok((h, payload)) => half.handle_tpdu_at(now, arrived, h, own(payload)),
        // Malformed: the PSB counts it.
        Err(_) => half.handle_frame(now, own(tpdu)),
    }
}

/// Whether an end can make progress for a waiting application (data to read, room to
/// write).
pub(crate) trait Progress {
    fn has_progress(&self) -> bool;
    /// The path carries at most `cap` payload octets per TPDU unfragmented (a
    /// sender cuts its TPDUs to it; a receiver has nothing to cut).
    fn set_path_cap(&mut self, cap: usize);
    /// Octets queued to send and not yet acknowledged (0 on a receiving end).
    fn send_queued(&self) -> usize;
    /// The largest TPDU payload the end may send whatever the path (`None` on a
    /// receiving end or a bare VC: nothing to search a path MTU for).
    fn tpdu_limit(&self) -> Option<usize>;
    /// TPDUs the end has sent again so far, for any reason (0 on a receiving end).
    fn retransmitted(&self) -> u64;
    /// The end's retransmission timeout now (0 without error control).
    fn rto(&self) -> std::time::Duration;
}

impl Progress for TxHalf {
    fn has_progress(&self) -> bool {
        self.capacity() > 0
    }
    fn set_path_cap(&mut self, cap: usize) {
        TxHalf::set_path_cap(self, cap);
    }
    fn send_queued(&self) -> usize {
        self.buffered()
    }
    fn tpdu_limit(&self) -> Option<usize> {
        TxHalf::tpdu_limit(self)
    }
    fn retransmitted(&self) -> u64 {
        let s = self.stats();
        s.retx_fast + s.retx_timeout + s.retx_head
    }
    fn rto(&self) -> std::time::Duration {
        self.psb()
            .map_or(std::time::Duration::ZERO, |p| p.rtt().rto())
    }
}

impl Progress for RxHalf {
    fn has_progress(&self) -> bool {
        self.readable() > 0
    }
    fn set_path_cap(&mut self, _cap: usize) {}
    fn send_queued(&self) -> usize {
        0
    }
    fn tpdu_limit(&self) -> Option<usize> {
        None
    }
    fn retransmitted(&self) -> u64 {
        0
    }
    fn rto(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
