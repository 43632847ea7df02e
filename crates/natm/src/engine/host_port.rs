//! One UDP port for every VC of a host (issue 30, `EngineConfig::ports =
//! Ports::PerHost`): the host's ATM adaptor, as a seed host has one (seed 000 §5),
//! with VCs told apart by their VCI and cookie in user space instead of by a socket
//! each in the kernel.
//!
//! A [`HostPort`] is one UDP socket bound once per local address; each VC end (a
//! connection, a listener) holds a [`HostSub`] of it: its routes, a queue bounded in
//! octets like a socket's receive buffer, and a condition variable its reader waits on.
//! The driver reads the socket in batches and hands each datagram to the sub its route
//! names (`natm_proto::endpoint::HostRoutes`, sans-IO): a batch that is all one sub's
//! (a bulk transfer's GRO run) goes into its queue as it is, others are copied in
//! packed, and a reader takes the queue's front batch whole in exchange for its own, so
//! that a VC's bulk data is copied no more often than from a socket of its own (the
//! kernel's copy, then the application's). A sub the driver watches is then
//! drained by the driver as a readable socket would be, and a sub whose application
//! thread holds the read role has that thread woken. A call opens no socket: a host
//! holds one descriptor per local address however many VCs it carries.
//!
//! Sends go out of the one socket with the peer's address on each `sendmsg`. Each sub
//! reads the path MTU to its peer once, from a scratch socket connected to it, and
//! again whenever the kernel refuses a datagram as larger than the path.
//!
//! Frames no route takes are held a while (a signalled call's first frames may come
//! before its connection is opened), bounded in number and octets, then dropped and
//! counted by the port; a socket per VC would have counted them on the VC.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Weak};
use std::time::Duration;

use natm_proto::endpoint::{HostKey, HostRoutes, Route};
use rustix::event::PollFlags;

use super::link::UdpLink;
use super::Engine;
use crate::adaptor::{RecvBatch, SendBatch};
use crate::sync::{Condvar, Level, OrderedMutex as Mutex, OrderedRwLock as RwLock};

mod sub;
pub(crate) use sub::HostSub;
use sub::SubInner;

/// Octets each queued frame is charged beyond its length (as the kernel charges a
/// datagram's skb).
const FRAME_OVERHEAD: usize = crate::adaptor::mem::FRAME_OVERHEAD;

/// The host port's socket buffers: every VC of the host shares them, so they are
/// larger than one VC's (the kernel caps them at `net.core.rmem_max` unless the
/// process may exceed it).
const HOST_SOCKET_BUF: usize = 16 << 20;

/// A sub's queue limit, octets: what a VC's own socket would hold (the kernel doubles
/// `SO_RCVBUF` for its own overhead, and a VC's window is sized against that).
fn sub_limit(eng: &Engine) -> usize {
    eng.cfg.socket_rcvbuf.saturating_mul(2)
}

/// Frames a port holds for routes not yet made: a signalled call's first frames may
/// come before its connection is opened (the peer sends once sigd says connected; a
/// pre-authorised call's, before the application accepts it), which a socket of the
/// call's own would have queued. Oldest first out; a flood of strays only pushes out
/// strays and early frames, which their senders send again.
const PENDING_FRAMES: usize = 256;
/// The octets those frames may hold.
const PENDING_BYTES: usize = 1 << 20;

/// How long a port a busy poller led stays out of the driver's epoll set without
/// another lead before the driver takes it back ([`HostPort::lead`]): frames for
/// other VCs of the port wait at most this long while nobody reads.
const PORT_PARK_NS: u64 = 1_000_000;

/// Batches one read of a port takes at most (each up to a 64 KiB GRO run) before the
/// driver runs its timers: a flood at the port cannot hold the driver in one read.
const READS_PER_PUMP: usize = 64;

/// Emptied receive batches a port keeps for its subs' next frames (64 KiB each, so
/// 4 MiB a port): a burst queued whole takes one per batch, and its reader gives one
/// back per batch it takes, so that the steady state allocates nothing; an idle VC
/// end keeps none.
const SPARES: usize = 64;

/// A port batch whose frames are all one sub's is queued whole, not copied, if it
/// holds at least this share of its area (1/2): a queued batch keeps its whole area,
/// so memory stays within twice what the sub is charged. Smaller ones are copied.
fn whole_min(batch: &RecvBatch) -> usize {
    batch.area_len() / 2
}

thread_local! {
    static DRIVER_READ: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The token of the port whose subs this thread (the driver) is draining now.
    static DEFERRING: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Frames of at most this many octets that a receiving half answers with (ACKs,
/// [`an_answer`]) and the driver sends while it drains a port's subs wait for the end
/// of the round, and leave together:
/// every VC to one peer shares its destination, so one GSO `sendmsg` carries the ACKs
/// of many VCs. (One `sendmsg` per VC's ACK made the system calls per second the
/// same at 100 and 10,000 connections, each carrying one ACK: `perf scale`.)
const DEFER_MAX: usize = 512;

/// Subs drained between two sends of the small frames held ([`DEFER_MAX`]).
const DEFER_SUBS: usize = 32;

/// Frames held for one destination at most: they leave as soon as there are this
/// many (a VC draining a long backlog makes an ACK every 32 frames, and each waited
/// for the other subs' drains with no more to gain than one `sendmsg` in 16).
const DEFER_FRAMES: usize = 16;

/// Whether a frame (VC header, TPDU header first) is one a receiving half sends: an
/// ACK or another answer. Only those are held ([`DEFER_MAX`]). A sending half's
/// frames keep their order with what the application thread sends inline meanwhile:
/// a message's short last TPDU, held, went after the next message's first ones, out
/// of order, and SMART's fast path marked it lost on a loss-free path.
fn an_answer(frame: &[u8]) -> bool {
    use natm_proto::endpoint::Dir;
    use natm_proto::wire::{tpdu::Header, vcframe};
    vcframe::Repr::parse_bytes(frame)
        .ok()
        .filter(|(vc, _)| vc.kind == vcframe::FrameKind::Data)
        .and_then(|(_, sdu)| Header::route_fields(sdu))
        .is_some_and(|(ty, _)| Dir::of(ty) == Some(Dir::Backward))
}

/// The driver is draining the subs of the port `token` (see [`DEFER_MAX`]).
struct Deferring;

impl Deferring {
    fn enter(token: usize) -> Deferring {
        DEFERRING.with(|d| d.set(token));
        Deferring
    }

    /// Whether this thread is draining the port `token`.
    fn on(token: usize) -> bool {
        DEFERRING.with(std::cell::Cell::get) == token
    }
}

impl Drop for Deferring {
    fn drop(&mut self) {
        DEFERRING.with(|d| d.set(usize::MAX));
    }
}

/// Small frames held for the end of a driver round ([`DEFER_MAX`]), a batch per
/// destination, each in the order its frames were sent.
#[derive(Debug, Default)]
struct Deferred {
    batches: Vec<(SocketAddr, SendBatch)>,
}

impl Deferred {
    /// Add `batch`'s frames to `to`'s; a batch they cannot join (another size) is
    /// handed to `send` first, so each destination's frames keep their order.
    fn add(
        &mut self,
        to: SocketAddr,
        batch: &SendBatch,
        mut send: impl FnMut(SocketAddr, &SendBatch),
    ) {
        for frame in batch.frames() {
            self.push(to, frame.len(), |o| o.copy_from_slice(frame), &mut send);
        }
    }

    /// As [`Deferred::add`], for frames written in two parts (`engine::gather`).
    fn add_gathered(
        &mut self,
        to: SocketAddr,
        batch: &crate::engine::gather::GatherBatch,
        mut send: impl FnMut(SocketAddr, &SendBatch),
    ) {
        for [head, body] in batch.frames() {
            let write = |o: &mut [u8]| {
                o[..head.len()].copy_from_slice(head);
                o[head.len()..].copy_from_slice(body);
            };
            self.push(to, head.len() + body.len(), write, &mut send);
        }
    }

    /// One frame of `len` octets for `to`, written by `write`.
    fn push(
        &mut self,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
        send: &mut impl FnMut(SocketAddr, &SendBatch),
    ) {
        let i = match self.batches.iter().position(|(d, _)| *d == to) {
            Some(i) => i,
            None => {
                self.batches.push((to, SendBatch::with_capacity(4096)));
                self.batches.len() - 1
            }
        };
        let out = &mut self.batches[i].1;
        if out.check(len).is_err() {
            send(to, out);
            out.clear();
        }
        let _ = out.push_with(len, write);
        if out.len() >= DEFER_FRAMES {
            send(to, out);
            out.clear();
        }
    }

    /// Hand every held batch to `send`, emptied after.
    fn flush(&mut self, mut send: impl FnMut(SocketAddr, &SendBatch)) {
        for (to, b) in &mut self.batches {
            if !b.is_empty() {
                send(*to, b);
                b.clear();
            }
        }
    }
}

/// The driver is draining the subs of a port it has just read to the end (or to
/// [`READS_PER_PUMP`], and reads on in its next round): a sub found empty then has
/// nothing more in the socket for it, and is not read for again. (A read there cost
/// a `recvmmsg` per drained VC, mostly empty, and woke the driver itself for the
/// frames it read for other VCs: twice the receive calls per MB of a socket per VC,
/// measured with `perf stat -e syscalls:sys_enter_recvmmsg` on `natm-lab perf scale`.)
struct DriverRead;

impl DriverRead {
    fn enter() -> DriverRead {
        DRIVER_READ.with(|d| d.set(true));
        DriverRead
    }

    fn active() -> bool {
        DRIVER_READ.with(std::cell::Cell::get)
    }
}

impl Drop for DriverRead {
    fn drop(&mut self) {
        DRIVER_READ.with(|d| d.set(false));
    }
}

/// One host port's counters (`Ports::PerHost`, `Host::ports`): the UDP socket every VC
/// of the host shares at one local address. What a socket per VC counted on the
/// connection (`ConnStats::refused_frames`, the kernel's drops) the port counts here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortStats {
    /// The port's address.
    pub local: SocketAddr,
    /// VC ends on the port now: connections' and listeners'.
    pub vc_ends: usize,
    /// Routes the port holds (each VC end has one or more).
    pub routes: usize,
    /// Datagrams read.
    pub datagrams: u64,
    /// Receive batches handed to one VC end whole, without a copy.
    pub whole_batches: u64,
    /// Datagrams no route took: a wrong cookie, an unknown VCI, or a call's frames
    /// come before its connection was opened (held for it a while).
    pub unrouted: u64,
    /// Unrouted datagrams held now (at most 256 and 1 MiB).
    pub held: usize,
    /// Unrouted datagrams dropped: pushed out of the held ones, or too large to hold.
    pub held_dropped: u64,
    /// Datagrams the kernel dropped because the socket's buffer was full (from
    /// `/proc/net/udp`; `None` where unknown).
    pub kernel_drops: Option<u64>,
    /// The socket's own counters (datagrams and octets each way, system calls), for
    /// all of its VCs: what `ConnStats::port` says of a socket per VC end.
    pub socket: crate::adaptor::PortStats,
}

/// The host's ports, one per local address bound (an engine's).
#[derive(Debug)]
pub(crate) struct HostPorts {
    ports: Mutex<Vec<Arc<HostPort>>>,
}

impl HostPorts {
    pub(crate) fn new() -> HostPorts {
        HostPorts {
            ports: Mutex::new(Level::HostPorts, Vec::new()),
        }
    }

    /// A sub of the host port at `addr`: the port bound there, or for port 0 any port
    /// of the same IP address; a new port (and socket) only if none fits. A listener's
    /// sub (`accept`) takes the port's calls, so for port 0 it looks for a port without
    /// a listener, and at a given port it fails with `AddrInUse` if another listener
    /// has it, as a second bind of that address would.
    pub(crate) fn sub(&self, eng: &Engine, addr: SocketAddr, accept: bool) -> io::Result<HostSub> {
        let mut ports = self.ports.lock();
        let found = ports.iter().find(|p| {
            let a = p.addr;
            if addr.port() == 0 {
                a.ip() == addr.ip() && !(accept && p.table.read().routes.has_acceptor())
            } else {
                a == addr
            }
        });
        if let Some(p) = found {
            let sub = HostSub::new(p.clone(), sub_limit(eng));
            if accept {
                sub.accept_calls()?;
            }
            return Ok(sub);
        }
        let link = UdpLink::bind(addr, HOST_SOCKET_BUF, HOST_SOCKET_BUF, eng.cfg.link_mode)?;
        let token = eng.token();
        let port = Arc::new(HostPort {
            addr: link.local_addr()?,
            link,
            token,
            table: RwLock::new(Level::HostRoutes, Table::default()),
            next_sub: AtomicUsize::new(0),
            batch: Mutex::new(Level::HostBatch, UdpLink::recv_batch()),
            unrouted: AtomicU64::new(0),
            received: AtomicU64::new(0),
            whole: AtomicU64::new(0),
            waker: eng.waker(),
            sleep_until: eng.sleep_until.clone(),
            held: Mutex::new(Level::Leaf, Held::default()),
            spares: Mutex::new(Level::Leaf, Vec::new()),
            more: AtomicBool::new(false),
            deferred: Mutex::new(Level::Leaf, Deferred::default()),
            leader: AtomicBool::new(false),
            registry: eng.registry.try_clone()?,
            out: AtomicBool::new(false),
            park_until: AtomicU64::new(0),
            base: std::time::Instant::now(),
            scratch: Mutex::new(
                Level::Leaf,
                natm_udp::UdpPort::bind(SocketAddr::new(addr.ip(), 0)).ok(),
            ),
        });
        eng.register(port.link.raw_fd(), token)?;
        ports.push(port.clone());
        let sub = HostSub::new(port, sub_limit(eng));
        if accept {
            sub.accept_calls()?;
        }
        Ok(sub)
    }

    /// Whether a port has work for the driver that no event of its epoll set will
    /// announce: subs another reader read frames for, or a read stopped at
    /// [`READS_PER_PUMP`]. The driver asks as it is about to sleep, after it said so
    /// ([`HostPort::wake_driver`] wakes it only then).
    pub(crate) fn due(&self) -> bool {
        self.ports
            .lock()
            .iter()
            .any(|p| p.more.load(SeqCst) || !p.held.lock().ready.is_empty())
    }

    /// How long until a parked port is due back with the driver, if any is parked.
    pub(crate) fn park_due(&self) -> Option<Duration> {
        self.ports.lock().iter().filter_map(|p| p.park_due()).min()
    }

    /// Put back the ports parked past their time ([`HostPort::lead`]).
    pub(crate) fn unpark_due(&self) {
        for p in self.all() {
            p.unpark_if_due();
        }
    }

    /// Every port's counters ([`PortStats`]).
    pub(crate) fn stats(&self) -> Vec<PortStats> {
        let drops = crate::adaptor::UdpDrops::read();
        self.ports.lock().iter().map(|p| p.stats(&drops)).collect()
    }

    /// The port the driver watches under `token`.
    pub(crate) fn by_token(&self, token: usize) -> Option<Arc<HostPort>> {
        self.ports.lock().iter().find(|p| p.token == token).cloned()
    }

    /// Every port (for the driver's round of subs that were watched again with frames
    /// queued).
    pub(crate) fn all(&self) -> Vec<Arc<HostPort>> {
        self.ports.lock().clone()
    }
}

/// One UDP socket and the routes of the VCs on it.
#[derive(Debug)]
pub(crate) struct HostPort {
    addr: SocketAddr,
    link: UdpLink,
    token: usize,
    table: RwLock<Table>,
    next_sub: AtomicUsize,
    /// The driver's batch for this socket.
    batch: Mutex<RecvBatch>,
    /// Datagrams no route took.
    unrouted: AtomicU64,
    /// Datagrams read.
    received: AtomicU64,
    /// Batches queued whole for one sub.
    whole: AtomicU64,
    /// The driver's waker (a reader that read for others hands it their frames).
    waker: Arc<mio::Waker>,
    /// When the driver sleeps until (ns, 0 while it runs): the engine's.
    sleep_until: Arc<std::sync::atomic::AtomicU64>,
    held: Mutex<Held>,
    /// Emptied receive batches for the subs' queues ([`HostPort::fresh`]).
    spares: Mutex<Vec<RecvBatch>>,
    /// A read stopped at [`READS_PER_PUMP`] with the socket not yet dry.
    more: AtomicBool,
    /// Small frames the driver sent while draining this port's subs ([`DEFER_MAX`]).
    deferred: Mutex<Deferred>,
    /// An application thread waiting for its frames reads the port for everyone (the
    /// port is out of the driver's epoll set meanwhile): only it reads then.
    leader: AtomicBool,
    /// The driver's epoll set, to take the port out while a thread leads.
    registry: mio::Registry,
    /// The port is out of the driver's epoll set (a thread leads, or it is parked).
    out: AtomicBool,
    /// Parked by a busy poller: when it goes back to the driver (ns since `base`;
    /// 0: not parked).
    park_until: AtomicU64,
    base: std::time::Instant,
    /// A socket of the port's address that is connected to a peer only to read the
    /// kernel's path MTU to it ([`HostPort::path_payload_to`]): opened with the port,
    /// so that a call, whose first send reads it, opens no socket even for a moment.
    scratch: Mutex<Option<natm_udp::UdpPort>>,
}

/// The routes of a port and the subs they name.
#[derive(Debug, Default)]
struct Table {
    routes: HostRoutes<usize>,
    subs: HashMap<usize, Weak<SubInner>>,
}

/// What a port holds for later: frames no route took yet ([`PENDING_FRAMES`]), and
/// watched subs with frames for the driver's next round ([`HostPort::run_ready`]).
#[derive(Debug, Default)]
struct Held {
    pending: VecDeque<HeldFrame>,
    pending_bytes: usize,
    /// Frames dropped unrouted: pushed out to make room, or too large to hold.
    dropped: u64,
    ready: Vec<Arc<SubInner>>,
}

/// A frame no route took yet, with the VCI it came on: a new route takes only frames
/// on its own VCIs, so a port holding many strays looks up no route for most of them.
#[derive(Debug)]
struct HeldFrame {
    from: SocketAddr,
    vci: u16,
    frame: Vec<u8>,
}

impl Held {
    /// Hold a frame no route took, the oldest making room. One without a VC header
    /// no route can ever take is dropped at once.
    fn hold(&mut self, from: SocketAddr, frame: &[u8]) {
        let vci = match natm_proto::wire::vcframe::Repr::parse_bytes(frame) {
            Ok((vc, _)) if frame.len() <= PENDING_BYTES => vc.vci,
            _ => {
                self.dropped += 1;
                return;
            }
        };
        while self.pending.len() >= PENDING_FRAMES
            || self.pending_bytes + frame.len() > PENDING_BYTES
        {
            match self.pending.pop_front() {
                Some(f) => {
                    self.pending_bytes -= f.frame.len();
                    self.dropped += 1;
                }
                None => break,
            }
        }
        self.pending_bytes += frame.len();
        self.pending.push_back(HeldFrame {
            from,
            vci,
            frame: frame.to_vec(),
        });
    }

    /// Take the held frames `routes` now gives to `id`, whose new routes are on
    /// `vcis`, in order. (Every route of an end names its VCI, so a frame on another
    /// VCI is not `id`'s: only frames on `vcis` are routed. Routing each of 256 strays
    /// on every new route was 4 % of a host's samples in `natm-lab perf calls`.)
    fn take_for(
        &mut self,
        routes: &HostRoutes<usize>,
        id: usize,
        vcis: &[u16],
    ) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut mine = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let f = &self.pending[i];
            if vcis.contains(&f.vci) && routes.route(&f.frame) == Some(id) {
                if let Some(f) = self.pending.remove(i) {
                    self.pending_bytes -= f.frame.len();
                    mine.push((f.from, f.frame));
                }
            } else {
                i += 1;
            }
        }
        mine
    }
}

impl HostPort {
    /// The socket is readable: read it (up to [`READS_PER_PUMP`] batches) and hand
    /// every datagram to its sub, then drain the watched subs that got some (with
    /// `buf`, the driver's batch) and wake the threads waiting on the others. What a
    /// flood leaves unread is read in the driver's next round, after its timers.
    pub(crate) fn pump(&self, eng: &Arc<Engine>, buf: &mut RecvBatch) {
        if self.leader.load(Acquire) {
            // A thread leads: it reads, and hands the driver what is the driver's.
            return;
        }
        let touched = self.read(None);
        let _read = DriverRead::enter();
        self.signal_all(eng, touched, buf);
    }

    /// Drain (or wake the readers of) the subs that got frames. Where there are
    /// several, their small frames leave together ([`DEFER_MAX`]), at least every
    /// [`DEFER_SUBS`] subs: one VC's ACKs are never held for another's drain, and a
    /// VC alone sends its own at once, as its drain makes them (holding them to the
    /// end of a long drain slowed one connection's bulk by a quarter).
    fn signal_all(&self, eng: &Arc<Engine>, subs: Vec<Arc<SubInner>>, buf: &mut RecvBatch) {
        if subs.len() < 2 {
            for sub in subs {
                sub.signal(eng, buf);
            }
            return;
        }
        let _defer = Deferring::enter(self.token);
        for (i, sub) in subs.into_iter().enumerate() {
            sub.signal(eng, buf);
            if (i + 1) % DEFER_SUBS == 0 {
                self.flush_deferred();
            }
        }
        self.flush_deferred();
    }

    /// Whether a batch `HostSub::send_batch` is sending now waits for the end of the
    /// driver's round ([`DEFER_MAX`]).
    fn defers(&self, batch: &SendBatch) -> bool {
        Deferring::on(self.token)
            && batch.segment_size().is_some_and(|s| s <= DEFER_MAX)
            && self.link.in_frames()
            && batch.frames().all(an_answer)
    }

    /// As [`HostPort::defers`], for a gathered batch.
    fn defers_gathered(&self, batch: &crate::engine::gather::GatherBatch) -> bool {
        Deferring::on(self.token)
            && batch.segment_size() <= DEFER_MAX
            && !batch.is_empty()
            && self.link.in_frames()
            && batch.frames().all(|[head, _]| an_answer(head))
    }

    /// Hold a gathered batch's frames for the end of the driver's round.
    fn defer_gathered(&self, to: SocketAddr, batch: &crate::engine::gather::GatherBatch) {
        self.deferred.lock().add_gathered(to, batch, |to, b| {
            let _ = self.link.send_batch(b, Some(to));
        });
    }

    /// Hold `batch`'s frames for the end of the driver's round.
    fn defer(&self, to: SocketAddr, batch: &SendBatch) {
        self.deferred.lock().add(to, batch, |to, b| {
            let _ = self.link.send_batch(b, Some(to));
        });
    }

    /// Send the frames held for the end of the driver's round.
    fn flush_deferred(&self) {
        self.deferred.lock().flush(|to, b| {
            let _ = self.link.send_batch(b, Some(to));
        });
    }

    /// A reader found its sub's queue empty: read the socket itself (the driver may not
    /// have run since the datagram came; if it is reading now, wait for it to finish),
    /// keeping its own frames and handing the others on — the watched ones to the
    /// driver's next round. What was sent to the port before the call is in the queue
    /// after it, as with a socket of its own.
    fn pump_for(&self, me: &SubInner) {
        if self.leader.load(Acquire) {
            return;
        }
        self.hand_on(self.read(Some(me)), me);
    }

    /// Frames a reader read for others: the watched subs' to the driver's next round,
    /// the waiting readers woken. Whether `me` got some.
    fn hand_on(&self, touched: Vec<Arc<SubInner>>, me: &SubInner) -> bool {
        let mut wake = false;
        let mut mine = false;
        for sub in touched {
            if std::ptr::eq(Arc::as_ptr(&sub), me) {
                mine = true;
                continue;
            }
            if sub.watched.load(Relaxed) {
                self.held.lock().ready.push(sub);
                wake = true;
            } else {
                let _q = sub.queue.lock();
                sub.cv.notify_all();
            }
        }
        if wake {
            self.wake_driver();
        }
        mine
    }

    /// `me`'s thread waits for its frames and nobody else reads the port: it reads
    /// the port itself until a frame of its own comes or `until` (leader/follower),
    /// sleeping in `poll` between reads, or spinning (a busy-polling reader).
    /// The port leaves the driver's epoll set meanwhile, so an arrival wakes this
    /// thread alone (or no thread, while it spins), and comes back after: epoll
    /// reports what is queued then.
    fn lead(&self, me: &SubInner, until: std::time::Instant, spin: bool) {
        self.take_out();
        let got = loop {
            // What came before the lead (the driver may have been reading it) first.
            let mine = self.hand_on(self.read(Some(me)), me);
            if mine || me.shut.load(Relaxed) || !me.queue.lock().is_empty() {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= until {
                break false;
            }
            if spin {
                std::hint::spin_loop();
            } else if !matches!(self.link.wait(PollFlags::IN, until - now), Ok(true)) {
                break false;
            }
        };
        if spin && got {
            // A busy poller that got its frame is back in a moment (a round trip):
            // the port stays out of the driver's set for it, and the driver puts it
            // back once nobody has led for [`PORT_PARK_NS`] (two `epoll_ctl` calls per
            // lead were a third of a busy-polled round trip's system calls).
            let now = self.since_base();
            let was = self.park_until.swap(now + PORT_PARK_NS, AcqRel);
            self.leader.store(false, Release);
            if was <= now {
                // Newly parked (or the last deadline passed during the lead, which
                // the driver then left alone): its sleep must end by the deadline.
                // A deadline pushed on is found when the first one comes.
                self.wake_driver();
            }
        } else {
            self.put_back();
            self.leader.store(false, Release);
        }
    }

    /// Take the port out of the driver's epoll set (the leader, or the driver
    /// unparking it, holds the read role).
    fn take_out(&self) {
        if !self.out.swap(true, AcqRel) {
            let fd = self.link.raw_fd();
            let _ = self.registry.deregister(&mut mio::unix::SourceFd(&fd));
        }
    }

    /// Put the port back into the driver's epoll set: epoll reports what is queued.
    fn put_back(&self) {
        self.park_until.store(0, Release);
        if self.out.swap(false, AcqRel) {
            let fd = self.link.raw_fd();
            let _ = self.registry.register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(self.token),
                mio::Interest::READABLE,
            );
        }
    }

    /// Nanoseconds since the port was made.
    fn since_base(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// How long until a parked port is due back with the driver, if one is parked.
    fn park_due(&self) -> Option<Duration> {
        if self.leader.load(Acquire) {
            // The lead ends by putting the port back, or parking it anew.
            return None;
        }
        match self.park_until.load(Acquire) {
            0 => None,
            t => Some(Duration::from_nanos(t.saturating_sub(self.since_base()))),
        }
    }

    /// The driver: a port parked by a busy poller that has not led again for
    /// [`PORT_PARK_NS`] goes back into the epoll set.
    fn unpark_if_due(&self) {
        let due = self.park_until.load(Acquire);
        if due == 0 || due > self.since_base() {
            return;
        }
        if self
            .leader
            .compare_exchange(false, true, AcqRel, Relaxed)
            .is_ok()
        {
            // Led again since, and parked again: due later.
            if self.park_until.load(Acquire) <= self.since_base() {
                self.put_back();
            }
            self.leader.store(false, Release);
        }
    }

    /// Read the socket into the subs' queues, until it is dry or [`READS_PER_PUMP`]
    /// batches were read (then the driver's next round reads on: the socket's readiness
    /// is an edge, and would not come again for what is left); the subs that took
    /// frames, each once. One thread reads at a time; the next waits for it and reads
    /// what came after. `me`: the sub of the application thread reading, if one is.
    fn read(&self, me: Option<&SubInner>) -> Vec<Arc<SubInner>> {
        let mut batch = self.batch.lock();
        let mut touched: Vec<Arc<SubInner>> = Vec::new();
        for reads in 0.. {
            if reads == READS_PER_PUMP {
                self.more.store(true, SeqCst);
                self.wake_driver();
                break;
            }
            if self.link.recv_now(&mut batch).is_err() {
                break;
            }
            let more = batch.may_have_more();
            self.received.fetch_add(batch.len() as u64, Relaxed);
            // One sub's whole batch goes to it as it is; else each frame is copied.
            // A small batch goes whole only to the reader's own sub, which takes it
            // at once (a busy poller's round trip: no run made, copied in and out).
            let large = natm_udp::areas::received(&batch) >= whole_min(&batch);
            let whole = (large || me.is_some())
                .then(|| self.whole(&batch))
                .flatten()
                .filter(|(sub, _)| large || me.is_some_and(|m| std::ptr::eq(Arc::as_ptr(sub), m)));
            if let Some((sub, from)) = whole {
                if sub.deliver_whole(self, &mut batch, from).is_some() {
                    self.whole.fetch_add(1, Relaxed);
                    if !sub.touched.swap(true, Relaxed) {
                        touched.push(sub);
                    }
                    if !more {
                        break;
                    }
                    continue;
                }
            }
            {
                let table = self.table.read();
                let end = |id: usize| table.subs.get(&id).and_then(Weak::upgrade);
                for (from, d) in batch.iter() {
                    let sub = match table.routes.route(d).and_then(end) {
                        // A CONN-REQ from another peer than the call its cookie names
                        // (two callers drew one cookie): a new call, for the listener
                        // to refuse.
                        Some(s) if !s.takes_from(from) => {
                            table.routes.acceptor_of(d).and_then(end).or(Some(s))
                        }
                        s => s,
                    };
                    let Some(sub) = sub else {
                        self.unrouted.fetch_add(1, Relaxed);
                        self.held.lock().hold(from, d);
                        continue;
                    };
                    if sub.deliver(from, d) && !sub.touched.swap(true, Relaxed) {
                        touched.push(sub);
                    }
                }
            }
            if !more {
                break;
            }
        }
        for t in &touched {
            t.touched.store(false, Relaxed);
        }
        touched
    }

    /// The sub every frame of `batch` is routed to, and the one source they all
    /// came from; `None` if they are not all one sub's from one source.
    fn whole(&self, batch: &RecvBatch) -> Option<(Arc<SubInner>, SocketAddr)> {
        let table = self.table.read();
        let mut one: Option<(usize, SocketAddr)> = None;
        for (from, d) in batch.iter() {
            let id = table.routes.route(d)?;
            match one {
                None => one = Some((id, from)),
                Some(o) if o != (id, from) => return None,
                Some(_) => {}
            }
        }
        let (id, from) = one?;
        Some((table.subs.get(&id)?.upgrade()?, from))
    }

    /// Subs that were watched again while frames waited in their queues, or got frames
    /// another reader read: the driver drains them now (a socket added to epoll with
    /// data queued raises an event).
    pub(crate) fn run_ready(&self, eng: &Arc<Engine>, buf: &mut RecvBatch) {
        let ready = std::mem::take(&mut self.held.lock().ready);
        let _read = DriverRead::enter();
        self.signal_all(eng, ready, buf);
    }

    /// Read on where a read stopped at [`READS_PER_PUMP`] (the driver calls it after
    /// its timers and tasks).
    pub(crate) fn read_on(&self, eng: &Arc<Engine>, buf: &mut RecvBatch) {
        if self.more.swap(false, SeqCst) {
            self.pump(eng, buf);
        }
    }

    fn stats(&self, drops: &crate::adaptor::UdpDrops) -> PortStats {
        let (vc_ends, routes) = {
            let t = self.table.read();
            (t.subs.len(), t.routes.len())
        };
        let (held, held_dropped) = {
            let h = self.held.lock();
            (h.pending.len(), h.dropped)
        };
        PortStats {
            local: self.addr,
            vc_ends,
            routes,
            datagrams: self.received.load(Relaxed),
            whole_batches: self.whole.load(Relaxed),
            unrouted: self.unrouted.load(Relaxed),
            held,
            held_dropped,
            kernel_drops: drops.of(self.link.raw_fd()),
            socket: self.link.port.stats(),
        }
    }

    /// An emptied batch to fill: a spare, or a new one.
    fn fresh(&self) -> RecvBatch {
        let mut b = self.spares.lock().pop().unwrap_or_else(UdpLink::recv_batch);
        b.clear();
        b
    }

    /// A batch a reader is done with, kept for [`HostPort::fresh`] (up to [`SPARES`]).
    fn give(&self, b: RecvBatch) {
        let mut spares = self.spares.lock();
        if spares.len() < SPARES {
            spares.push(b);
        }
    }

    /// Wake the driver for work it would not otherwise see, if it sleeps: awake, it
    /// looks for that work before it sleeps ([`HostPorts::due`]). (The driver itself
    /// stopping a read at [`READS_PER_PUMP`] wrote its own eventfd, as did every
    /// reader handing frames on while the driver ran anyway: 80,000 writes in 2 s of
    /// `natm-lab perf scale --counts 100`.)
    fn wake_driver(&self) {
        if self.sleep_until.load(SeqCst) != 0 {
            let _ = self.waker.wake();
        }
    }

    /// The path MTU the kernel holds for `peer`, less the IP and UDP headers: read
    /// from the port's scratch socket connected to it (the port's own has no peer).
    /// Each call connects it anew: a UDP socket may change its peer.
    fn path_payload_to(&self, peer: SocketAddr) -> Option<usize> {
        let scratch = self.scratch.lock();
        let scratch = scratch.as_ref()?;
        scratch.connect(peer).ok()?;
        let mtu = scratch.path_mtu().ok()?;
        Some(mtu.saturating_sub(scratch.ip_udp_overhead()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::tpdu::{Header, TpduType};
    use natm_proto::wire::vcframe;

    fn frame(vci: u16, cookie: u32, len: usize) -> Vec<u8> {
        frame_of(TpduType::Data, vci, cookie, len)
    }

    fn frame_of(ty: TpduType, vci: u16, cookie: u32, len: usize) -> Vec<u8> {
        let mut d = vcframe::Repr::data(0, vci).to_bytes().to_vec();
        let mut h = Header::new(ty);
        h.cookie = cookie;
        d.extend_from_slice(&h.to_bytes());
        d.resize(d.len() + len, 0);
        d
    }

    /// While the driver drains a port's subs, a receiving half's short answers are held
    /// to leave together; a sending half's short TPDU never is (held, a message's last
    /// TPDU went after the next message's first: out of order on a loss-free path).
    #[test]
    fn while_the_driver_drains_only_a_receivers_answers_are_held() {
        let eng = Engine::start(crate::engine::EngineConfig::default()).unwrap();
        let sub = eng
            .host_ports
            .sub(&eng, SocketAddr::from(([127, 0, 0, 1], 0)), false)
            .unwrap();
        let port = &sub.port;
        let batch_of = |ty| {
            let f = frame_of(ty, 40, 7, 20);
            let mut b = SendBatch::new();
            b.push_with(f.len(), |o| o.copy_from_slice(&f)).unwrap();
            b
        };
        let draining = Deferring::enter(port.token);
        for ty in [TpduType::Ack, TpduType::CloseAck, TpduType::ConnAccept] {
            assert!(port.defers(&batch_of(ty)), "{ty:?}");
        }
        for ty in [TpduType::Data, TpduType::Close, TpduType::Abort] {
            assert!(!port.defers(&batch_of(ty)), "{ty:?}");
        }
        drop(draining);
        assert!(
            !port.defers(&batch_of(TpduType::Ack)),
            "held only while draining"
        );
    }

    /// ACKs of many VCs to one peer, held for the end of a driver round, leave in
    /// one batch per destination and run of equal sizes, each destination's frames in
    /// the order they were sent.
    #[test]
    fn deferred_frames_leave_together_per_destination_in_order() {
        let (p, q) = (
            SocketAddr::from(([127, 0, 0, 1], 4000)),
            SocketAddr::from(([127, 0, 0, 2], 4000)),
        );
        let one = |tag: u8, len: usize| {
            let mut b = SendBatch::new();
            b.push_with(len, |o| o.fill(tag)).unwrap();
            b
        };
        let mut d = Deferred::default();
        let sent = std::cell::RefCell::new(Vec::<(SocketAddr, Vec<u8>)>::new());
        let send = |to: SocketAddr, b: &SendBatch| {
            sent.borrow_mut()
                .push((to, b.frames().map(|f| f[0]).collect()));
        };
        for tag in 0..10u8 {
            d.add(if tag % 2 == 0 { p } else { q }, &one(tag, 40), send);
        }
        // A larger frame cannot join a run of smaller ones: what was held for `p`
        // leaves first.
        d.add(p, &one(99, 60), send);
        d.flush(send);
        assert_eq!(
            sent.take(),
            [
                (p, vec![0, 2, 4, 6, 8]),
                (p, vec![99]),
                (q, vec![1, 3, 5, 7, 9]),
            ]
        );
        d.flush(send);
        assert!(sent.borrow().is_empty(), "flushed once");
    }

    #[test]
    fn frames_without_a_route_from_many_sources_stay_bounded_and_a_new_route_takes_its_own() {
        let mut held = Held::default();
        // A flood from 1,000 addresses, 10 strays each, then one early frame of a call.
        for i in 0..10_000u32 {
            let from = SocketAddr::from(([10, 0, (i % 250) as u8, (i / 250) as u8], 9000));
            held.hold(from, &frame(40 + (i % 7) as u16, i, 900));
            assert!(held.pending.len() <= PENDING_FRAMES);
            assert!(held.pending_bytes <= PENDING_BYTES);
        }
        let peer = SocketAddr::from(([127, 0, 0, 1], 4000));
        held.hold(peer, &frame(33, 0xC0FFEE, 100));
        // Nor is one without a VC header: no route could ever take it.
        let (held_now, dropped) = (held.pending.len(), held.dropped);
        held.hold(peer, &[0x5A]);
        assert_eq!((held.pending.len(), held.dropped), (held_now, dropped + 1));
        // A frame larger than the whole budget is not held at all.
        held.hold(peer, &frame(33, 0xC0FFEE, PENDING_BYTES));
        assert!(held.pending_bytes <= PENDING_BYTES);
        let mut routes = HostRoutes::new();
        let route = Route {
            tx_vci: 32,
            rx_vci: 33,
            cookie: 0xC0FFEE,
        };
        routes.insert(&HostKey::of(route, false), 7).unwrap();
        let before = held.pending.len();
        assert!(
            held.take_for(&routes, 7, &[40, 41]).is_empty(),
            "not on its VCIs"
        );
        let mine = held.take_for(&routes, 7, &[route.tx_vci, route.rx_vci]);
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].0, peer);
        assert_eq!(held.pending.len(), before - 1);
        assert!(
            held.take_for(&routes, 7, &[route.tx_vci, route.rx_vci])
                .is_empty(),
            "taken once"
        );
    }

    /// Frames come into a sub's queue copied (packed, a few at a time) or as a whole
    /// port batch; a reader takes them in arrival order either way, a whole batch
    /// without a copy (the reader gets the very area the kernel filled), and the
    /// queue's charge comes back to zero. A whole batch over the sub's limit, or not
    /// from its peer, is refused as it is, for the port to copy frame by frame.
    #[test]
    fn a_sub_takes_packed_frames_and_whole_batches_in_order_and_a_whole_batch_uncopied() {
        let eng = Engine::start(crate::engine::EngineConfig::default()).unwrap();
        let sub = eng
            .host_ports
            .sub(&eng, SocketAddr::from(([127, 0, 0, 1], 0)), false)
            .unwrap();
        let port = &sub.port;
        let peer = SocketAddr::from(([127, 0, 0, 1], 4000));
        let small = |n: u8| vec![n; 100];
        let mut whole = UdpLink::recv_batch();
        assert!(whole.push(peer, &vec![7u8; 40_000]));
        assert!(natm_udp::areas::received(&whole) >= whole_min(&whole));
        let area = whole.area().as_ptr();

        assert!(sub.inner.deliver(peer, &small(1)));
        assert!(sub.inner.deliver(peer, &small(2)));
        // Not the peer's: refused, the batch left as it was.
        sub.connect(peer);
        let stranger = SocketAddr::from(([127, 0, 0, 1], 4001));
        assert!(sub
            .inner
            .deliver_whole(port, &mut whole, stranger)
            .is_none());
        assert_eq!(whole.area().as_ptr(), area);
        assert!(sub.inner.deliver_whole(port, &mut whole, peer).is_some());
        assert_ne!(
            whole.area().as_ptr(),
            area,
            "the port reads into another batch next"
        );
        assert!(whole.is_empty());
        assert!(sub.inner.deliver(peer, &small(3)));

        let mut got = Vec::new();
        let mut batch = UdpLink::recv_batch();
        while let Ok(n) = sub.recv_now(&mut batch) {
            assert!(n > 0);
            if batch.iter().any(|(_, d)| d.len() == 40_000) {
                assert_eq!(batch.area().as_ptr(), area, "taken whole, not copied");
            }
            got.extend(batch.iter().map(|(from, d)| (from, d[0], d.len())));
        }
        assert_eq!(
            got,
            [
                (peer, 1, 100),
                (peer, 2, 100),
                (peer, 7, 40_000),
                (peer, 3, 100)
            ]
        );
        assert_eq!(sub.inner.queue.lock().charged, 0);

        // Over the limit: refused whole; the port then copies what fits, frame by frame.
        let mut big = UdpLink::recv_batch();
        assert!(big.push(peer, &vec![9u8; 60_000]));
        let fill = sub.inner.limit - 60_000;
        sub.inner.queue.lock().charged = fill;
        assert!(sub.inner.deliver_whole(port, &mut big, peer).is_none());
        assert_eq!(big.len(), 1);
        assert_eq!(sub.inner.queue.lock().charged, fill);
    }
}
