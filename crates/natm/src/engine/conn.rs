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
//!
//! The rest by concern: `receive` (drains and feeding the halves), `transmit`
//! (`after`: what a half has to send, its deadline, its waiters), `wait`
//! (application threads waiting on an end), `loopback` (OAM F5 and path MTU probes),
//! `park` (parked sockets), `rm` (ABR RM cells), `life` (open, dropped, forgotten).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;

mod coupled;
mod life;
mod loopback;
mod park;
mod read_role;
mod receive;
mod rm;
mod transmit;
mod wait;

pub(crate) use life::Life;
use life::LifeCell;
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
    /// Frames the end sends that are not gathered: control TPDUs and ACKs, sealed
    /// TPDUs, bare SDUs. Grown as used, not made room for up front: most ends send
    /// only small frames from it, and 64 KiB reserved for each of a connection's two
    /// ends was half its idle memory (37 → 19 KiB per connection at 10,000,
    /// `natm-lab perf scale`).
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
            out_batch: SendBatch::new(),
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
    /// Open, dropped by the application (its close finishing), or forgotten by the
    /// engine (`life`).
    life: LifeCell,
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
    crypt: Option<Box<Crypt>>,
    /// The receive areas lent to this connection (`natm_udp::areas`), against a
    /// budget of its VC's receive buffer.
    pub(crate) areas: natm_udp::AreaAccount,
    /// Receive batches that brought the receiving VC something: a send after one is
    /// a reply, which the sending VC never holds to coalesce
    /// (`natm_proto::transport::coalesce`, `TxHalf::note_reverse`).
    pub(crate) rx_epoch: AtomicU64,
    /// Aborts one half owes the other (`coupled`: natm-proto's coupling rule).
    coupled: coupled::Coupled,
    /// The late ACKs the sending VCs to the peer's host share (`late_path`); `None`
    /// for a sending VC without ACKs.
    late_path: Option<std::sync::Arc<super::late_path::LatePath>>,
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
        let (route, remote, mut tx, rx) = conn.into_parts();
        tx.lend_copy_buffers(eng.send_buffers.clone());
        let (vpi, bare) = (tx.vpi(), tx.is_bare());
        // Issue 30: RFC 8899's search starts at its base size, and TPDUs queued before
        // a probe confirms more keep it (a growth applies to data queued after), so a
        // call that sends at once sent its first window in 1.2 KB TPDUs. A loopback
        // path has no black hole to find: the kernel's MTU is the path's, and a
        // datagram over it is refused at the send, never dropped on the way. There the
        // TPDUs are cut to the kernel's path MTU from the first byte, without probes.
        let probes_path =
            !bare && tx.searches_path() && link.probes_path() && !remote.ip().is_loopback();
        let stamps = tx.exchanges_acks() || rx.exchanges_acks();
        if stamps {
            link.receive_for_acks();
        }
        let late_path = tx.exchanges_acks().then(|| eng.late_paths.to(remote.ip()));
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
            life: LifeCell::default(),
            on_gone: Mutex::new(sync::Level::Leaf, None),
            stamps,
            tx_deadline: AtomicU64::new(u64::MAX),
            rx_deadline: AtomicU64::new(u64::MAX),
            armed: AtomicU64::new(u64::MAX),
            level,
            weight,
            counters: LinkCounters::default(),
            areas: Default::default(),
            coupled: Default::default(),
            late_path,
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
            crypt: keys.filter(|_| !bare).map(|k| Box::new(Crypt::new(k))),
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

    /// The earliest timer of either end, nanoseconds of engine time.
    pub(crate) fn deadline(&self) -> u64 {
        if self.coupled.pending() {
            // An abort one half owes the other is due at once (`coupled`).
            return 0;
        }
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

    /// Where the connection is in its life.
    pub(crate) fn life(&self) -> Life {
        self.life.get()
    }

    /// The application dropped its handle; the engine forgets the connection once
    /// both VCs have finished.
    pub(crate) fn mark_dropped(&self, eng: &Engine) {
        self.life.drop_handle();
        if self.collectable() {
            eng.remove_conn(self.token);
        }
    }

    /// The engine removed the connection and ran its `on_gone`
    /// ([`super::Engine::remove_conn`], which removes only a collectable one).
    pub(crate) fn forget(&self) {
        let forgot = self.life.forget();
        debug_assert!(forgot, "forgot a connection that was not dropped");
    }

    /// Dropped by the application and finished in both directions.
    pub(crate) fn collectable(&self) -> bool {
        self.life.get() == Life::Dropped && lock(&self.tx).finished() && lock(&self.rx).finished()
    }

    /// End both VCs at once — the application aborted, or sigd released the call
    /// because the peer application or its host went away (`reason` = `Peer`): every
    /// waiter sees "aborted" with `reason`. Ends already finished stay as they ended.
    pub(crate) fn abort_both(&self, eng: &Engine, reason: AbortReason) {
        let now = eng.clock.now();
        // The receiving VC first: the peer's answer to the ABORT on our sending VC
        // (its receiving VC aborted by us, its coupling ends its sending one) would
        // otherwise race us to our receiving VC and mark it aborted by the peer. The
        // ABORT on our receiving VC ends only the peer's sending VC
        // (`coupling`'s hang-up row), which sends nothing back.
        {
            let (mut e, cv) = self.rx();
            self.abort_end(eng, Which::Rx, &mut e, cv, reason, now);
        }
        {
            let (mut e, cv) = self.tx();
            self.abort_end(eng, Which::Tx, &mut e, cv, reason, now);
        }
        self.stop_reading(eng);
    }

    /// Nothing more is read for this connection (both halves ended).
    pub(super) fn stop_reading(&self, eng: &Engine) {
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
