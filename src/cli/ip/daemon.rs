//! The threads of `natm ip`: the TUN reader, one sender for every VC (behind one
//! bounded queue), a reader of their own for the first [`IP_READERS`] natm VCs, a
//! fixed pool receiving every other VC's frames and sending what found any VC full,
//! at most [`MAX_SETUPS`] call setups (a thread the system refuses is an error,
//! never a panic), the listeners for calls on SAP `ip` and B-LLI LLC, the ATMARP
//! client (and server), and the timer. No thread per VC (issue 31: a peer's calls
//! cannot grow the thread count past these). All protocol decisions are the sans-IO
//! [`Node`]'s; this file moves bytes and time in and out of it.

use natm::ulib::Wait;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Context as TaskCx, Waker};
use std::thread;
use std::time::Duration;

use super::tun::Tun;
use super::{pool, qos, IpConfig, ARP_SAP, IP_SAP, LLC_QOS, LLC_SAP};
use anyhow::{anyhow, Context};
use natm::time::Instant;
use natm::ulib::Bytes;
use natm::ulib::{Connection, Error, Host, HostConfig, Listener};
use natm::wire::addr::AtmAddr;
use natm_proto::ip::arp::{ArpServer, ServerOutcome, SERVER_AGE};
use natm_proto::ip::atmarp::{Op, Repr};
use natm_proto::ip::llc::{self, Payload};
use natm_proto::ip::node::{arp_frame, Action, Node, VcId, VcKind, CAUSE_INCOMPATIBLE};

/// Packets waiting for room on one VC (and frames for the ATMARP server's VC); past
/// it the interface drops, as a full device queue does (TCP sees a loss, nothing
/// blocks the other VCs).
const VC_QUEUE: usize = 512;
/// Bytes waiting for room on all VCs together.
const PENDING_BYTES: usize = 32 << 20;
/// Threads receiving the frames of every IP VC beyond the first [`IP_READERS`],
/// however many VCs there are.
const IP_WORKERS: usize = 1;
/// natm data VCs each received by a thread of its own: the thread waits in the VC's
/// socket, so a datagram wakes the thread that writes its packet to the interface
/// (one wake-up), not the engine's driver and then a pool worker (two). The first
/// VCs a host sets up or takes get them (those of its busiest peer, as a rule);
/// past these the pool receives, and the thread count stays bounded whatever peers
/// call (issue 31).
const IP_READERS: usize = 2;
/// Frames a VC's reader takes without waiting after the one it waited for, before
/// it writes their packets to the interface together.
const READ_BUDGET: usize = 64;
/// Call setups (each a thread waiting for sigd) at once; a VC the node wants beyond
/// them fails at once, as a refused setup does, and the node tries again later.
const MAX_SETUPS: usize = 16;
/// The longest the timer thread sleeps (it is woken earlier when the node's next
/// deadline moves closer).
const TICK: Duration = Duration::from_millis(200);
/// Time between attempts to reach the ATMARP server.
const ARP_RECONNECT: Duration = Duration::from_secs(1);
/// Most ATMARP server entries.
const ARP_SERVER_ENTRIES: usize = 4096;
/// Client VCs the ATMARP server serves at once; a caller beyond them is refused
/// (cause 47).
const ARP_MAX_CLIENTS: usize = 256;
/// Threads serving the ATMARP server's client VCs, however many there are.
const ARP_WORKERS: usize = 2;

/// State every thread shares.
struct Shared {
    node: Mutex<Node>,
    /// Wakes the timer thread when the node's next deadline comes before the one it
    /// sleeps until.
    wake: Condvar,
    /// When the timer thread wakes by itself (nanoseconds of the node's clock; read
    /// and written only under `node`'s lock, so a deadline moved earlier is never
    /// missed).
    timer_at: AtomicU64,
    /// The open VCs: packets are sent on them by the thread that has them.
    vcs: Mutex<HashMap<VcId, VcHandle>>,
    /// Receives the frames of every VC without a reader of its own, and sends what
    /// found any VC full.
    rx: pool::ConnPool<IpVc>,
    /// VCs with a reader of their own ([`IP_READERS`]).
    readers: AtomicUsize,
    server: Mutex<Option<SyncSender<Vec<u8>>>>,
    tun: Tun,
    host: Host,
    epoch: std::time::Instant,
    /// Packets dropped for want of room (the sender's queue, their VC's, or all
    /// VCs' together), as a full device queue drops.
    tun_drops: AtomicU64,
    /// Bytes of packets waiting for room, on every VC ([`PENDING_BYTES`]).
    pending_bytes: AtomicUsize,
    /// Call setups under way ([`MAX_SETUPS`]).
    setups: AtomicUsize,
    /// This host's ATMARP server, when it runs one: it also answers the requests
    /// that come on VCs as RFC 2225 makes them.
    arp_server: Option<Arc<ArpService>>,
    /// Refused calls: at most 10 lines a second, then one with how many were held
    /// (a peer that calls again and again floods nothing).
    refusals_log: Mutex<natm_sigd::core::Bucket>,
}

/// What sends on an open VC: its connection and the packets that found it full.
struct VcOut {
    conn: Arc<Connection>,
    /// Oldest first, at most [`VC_QUEUE`]; the pool's worker sends them when the VC
    /// makes room (its task's waker, registered by the send that found no room).
    pending: Mutex<VecDeque<Bytes>>,
}

/// An open VC as the thread with a packet for it sees it.
#[derive(Clone)]
struct VcHandle {
    out: Arc<VcOut>,
    /// The VC's task in the receive pool.
    waker: Waker,
}

impl VcHandle {
    /// Send `frames` now, in order, as far as the VC has room and nothing waits
    /// before them, and queue the rest; returns how many were dropped (the VC's
    /// queue, or all of them, full). Several go to the VC together: their TPDUs
    /// leave in one GSO `sendmsg` per run of equal sizes (a TUN read's segment, cut
    /// at the MTU, is such a run), where one at a time is a `sendmsg` each.
    fn send(&self, frames: Vec<Vec<u8>>, pending_bytes: &AtomicUsize) -> usize {
        // Held by the VC's send queue as they are, not copied into it.
        let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
        let mut pending = lock(&self.out.pending);
        let mut sent = 0;
        if pending.is_empty() && frames.len() > 1 {
            // What does not fit now goes the single way below, which registers the
            // task's waker for the room it waits for.
            sent = self
                .out
                .conn
                .send_many_bytes(&frames, Wait::No)
                .unwrap_or(0);
        }
        let mut dropped = 0;
        for frame in frames.into_iter().skip(sent) {
            if pending.is_empty() {
                let mut cx = TaskCx::from_waker(&self.waker);
                // Ready: sent, or the VC has ended (its task forgets it).
                if self.out.conn.poll_send(&mut cx, frame.clone()).is_ready() {
                    continue;
                }
            }
            if pending.len() >= VC_QUEUE {
                dropped += 1;
                continue;
            }
            let len = frame.len();
            if pending_bytes.fetch_add(len, Ordering::AcqRel) + len > PENDING_BYTES {
                pending_bytes.fetch_sub(len, Ordering::AcqRel);
                dropped += 1;
                continue;
            }
            pending.push_back(frame);
        }
        dropped
    }
}

/// An open VC as the receive pool's workers (or its own reader) see it.
#[derive(Clone)]
struct IpVc {
    shared: Weak<Shared>,
    vc: VcId,
    kind: VcKind,
    peer: AtmAddr,
    out: Arc<VcOut>,
}

impl pool::TaskContext for IpVc {
    /// Send what found the VC full, in order, while it has room.
    fn turn(&self, conn: &Connection, cx: &mut TaskCx<'_>) {
        let mut pending = lock(&self.out.pending);
        let mut freed = 0;
        while let Some(frame) = pending.front() {
            if conn.poll_send(cx, frame.clone()).is_pending() {
                break;
            }
            freed += frame.len();
            pending.pop_front();
        }
        if let (true, Some(s)) = (freed > 0, self.shared.upgrade()) {
            s.pending_bytes.fetch_sub(freed, Ordering::AcqRel);
        }
    }

    /// The packets this turn's frames held go to the interface together.
    fn turn_done(&self) {
        if let Some(s) = self.shared.upgrade() {
            s.tun.flush();
        }
    }

    /// The VC ended: the peer closed it, it failed, or this end released it.
    fn ended(&self) {
        if let Some(s) = self.shared.upgrade() {
            lock(&s.vcs).remove(&self.vc);
            let dropped: usize = lock(&self.out.pending).drain(..).map(|f| f.len()).sum();
            s.pending_bytes.fetch_sub(dropped, Ordering::AcqRel);
            s.with_node(|n, now| n.handle_closed(now, self.vc));
        }
    }
}

impl IpVc {
    /// A frame the VC brought: to the node, and the IP packet in it to the
    /// interface. On a VC as RFC 2225 makes them ([`VcKind::Llc`]) an ATMARP
    /// request goes to this host's ATMARP server, if it runs one: its answer is
    /// returned, for the pool to send back on the VC without waiting.
    fn frame(&self, chunk: &[u8]) -> Option<Vec<u8>> {
        let s = self.shared.upgrade()?;
        if let (VcKind::Llc, Some(server)) = (self.kind, &s.arp_server) {
            if let Some(reply) = server.answer(self.peer, chunk) {
                return Some(reply);
            }
        }
        s.with_node(|n, now| {
            if let Some(p) = n.handle_frame(now, self.vc, chunk) {
                // Written at the end of the VC's turn with the packets that came
                // with it ([`pool::TaskContext::turn_done`]).
                s.tun.queue(p);
            }
        });
        None
    }
}

/// Starts a thread named `name`; one the system refuses is an error, not a panic.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    thread::Builder::new().name(name.into()).spawn(f).map(drop)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Runs `f` on the node, then carries out what it asks (outside the lock).
    fn with_node<R>(self: &Arc<Self>, f: impl FnOnce(&mut Node, Instant) -> R) -> R {
        let (r, actions) = {
            let mut node = lock(&self.node);
            let now = self.now();
            let r = f(&mut node, now);
            let actions: Vec<_> = std::iter::from_fn(|| node.poll_action()).collect();
            // Only a deadline earlier than the timer thread's wakes it: a wake-up per
            // packet cost the TUN reader a fifth of its time (the futex wake and its
            // inter-processor interrupt).
            let earlier = node
                .poll_timeout()
                .is_some_and(|t| t.as_nanos() < self.timer_at.load(Ordering::Relaxed));
            if earlier {
                self.wake.notify_one();
            }
            (r, actions)
        };
        self.act_all(actions);
        r
    }

    /// Carries out the node's actions in order, the frames of consecutive
    /// transmissions on one VC together.
    fn act_all(self: &Arc<Self>, actions: Vec<Action>) {
        let mut run: Option<(VcId, Vec<Vec<u8>>)> = None;
        for a in actions {
            match (a, &mut run) {
                (Action::Transmit { vc, frame }, Some((on, frames))) if *on == vc => {
                    frames.push(frame);
                }
                (Action::Transmit { vc, frame }, _) => {
                    if let Some((on, frames)) = run.replace((vc, vec![frame])) {
                        self.transmit(on, frames);
                    }
                }
                (a, _) => {
                    if let Some((on, frames)) = run.take() {
                        self.transmit(on, frames);
                    }
                    self.act(a);
                }
            }
        }
        if let Some((on, frames)) = run {
            self.transmit(on, frames);
        }
    }

    /// Sends `frames` on VC `vc` from the thread that has them (the TUN reader),
    /// without a hop to another thread: `VcHandle::send` never waits for a VC, so no
    /// VC (a shaped one, one whose peer does not read) holds up another — what the
    /// VC cannot take at once waits in its queue.
    fn transmit(&self, vc: VcId, frames: Vec<Vec<u8>>) {
        let h = lock(&self.vcs).get(&vc).cloned();
        if let Some(h) = h {
            let dropped = h.send(frames, &self.pending_bytes);
            self.tun_drops.fetch_add(dropped as u64, Ordering::Relaxed);
        }
    }

    fn act(self: &Arc<Self>, a: Action) {
        match a {
            Action::Transmit { vc, frame } => self.transmit(vc, vec![frame]),
            Action::ToServer(frame) => {
                if let Some(tx) = lock(&self.server).as_ref() {
                    let _ = tx.try_send(frame);
                }
            }
            Action::Deliver(packet) => self.tun.write(&packet),
            Action::Setup {
                vc,
                peer,
                class,
                mtu,
                kind,
            } => {
                use Ordering::AcqRel;
                if self.setups.fetch_add(1, AcqRel) >= MAX_SETUPS {
                    self.setups.fetch_sub(1, AcqRel);
                    tracing::debug!(vc, %peer, "{MAX_SETUPS} setups under way: this one fails");
                    self.with_node(|n, now| n.handle_setup_failed(now, vc, None));
                    return;
                }
                let me = self.clone();
                let started = spawn("natm-ip-setup", move || {
                    me.clone().setup(vc, peer, class, mtu, kind);
                    me.setups.fetch_sub(1, AcqRel);
                });
                if let Err(e) = started {
                    self.setups.fetch_sub(1, AcqRel);
                    tracing::warn!(vc, %peer, "cannot start a setup thread: {e}");
                    self.with_node(|n, now| n.handle_setup_failed(now, vc, None));
                }
            }
            Action::Release { vc, .. } => {
                if let Some(h) = lock(&self.vcs).remove(&vc) {
                    tracing::info!(vc, "releasing idle VC");
                    h.out.conn.abort();
                }
            }
        }
    }

    /// Calls `peer` for VC `vc`: natm's SAP `ip` with class `class`'s QoS, or as
    /// RFC 2225 does ([`VcKind::Llc`]); on success the pool receives the VC.
    fn setup(self: Arc<Self>, vc: VcId, peer: AtmAddr, class: usize, mtu: u32, kind: VcKind) {
        let (sap, qos) = match kind {
            VcKind::Natm => (IP_SAP, {
                let node = lock(&self.node);
                qos::with_mtu(node.policy().qos(class), mtu)
            }),
            VcKind::Llc | VcKind::Pvc => (LLC_SAP, qos::with_mtu(LLC_QOS, mtu)),
        };
        let result = qos
            .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))
            .and_then(|q| {
                self.host
                    .connect(format!("{peer}:{sap}").as_str(), &q)
                    .map(|c| (c, q))
            });
        match result {
            Ok((conn, q)) => {
                tracing::info!(vc, %peer, qos = %q, ?kind, "VC up");
                self.start_vc(vc, conn, kind, peer);
                self.with_node(|n, now| n.handle_setup_done(now, vc));
            }
            Err(e) => {
                let cause = match &e {
                    Error::Refused { cause, .. } => Some(*cause),
                    _ => None,
                };
                if cause == Some(CAUSE_INCOMPATIBLE) && kind == VcKind::Natm {
                    tracing::info!(vc, %peer, "{peer} is not natm ({e}): calling as RFC 2225 does");
                } else {
                    tracing::warn!(vc, %peer, ?kind, "VC setup failed: {e}");
                }
                self.with_node(|n, now| n.handle_setup_failed(now, vc, cause));
            }
        }
    }

    /// An open VC: sent on from now, and received by the pool until it ends. On a
    /// VC as RFC 2225 makes them ([`VcKind::Llc`]) ATMARP requests go to this host's
    /// ATMARP server, if it runs one, and its answers back on the VC.
    fn start_vc(self: &Arc<Self>, vc: VcId, conn: Connection, kind: VcKind, peer: AtmAddr) {
        let out = Arc::new(VcOut {
            conn: Arc::new(conn),
            pending: Mutex::new(VecDeque::new()),
        });
        let ctx = IpVc {
            shared: Arc::downgrade(self),
            vc,
            kind,
            peer,
            out: out.clone(),
        };
        // Held across `add` so that a VC ending at once is forgotten after this.
        let mut vcs = lock(&self.vcs);
        if kind != VcKind::Natm || self.readers.fetch_add(1, Ordering::AcqRel) >= IP_READERS {
            if kind == VcKind::Natm {
                self.readers.fetch_sub(1, Ordering::AcqRel);
            }
            let waker = self.rx.add(out.conn.clone(), ctx);
            vcs.insert(vc, VcHandle { out, waker });
            return;
        }
        let (waker, task) = self.rx.add_sending(out.conn.clone(), ctx.clone());
        vcs.insert(vc, VcHandle { out, waker });
        drop(vcs);
        let me = self.clone();
        if let Err(e) = spawn("natm-ip-vc-rx", move || me.read_vc(&ctx, task)) {
            tracing::warn!(
                vc,
                "cannot start the VC's reader ({e}): the pool receives it"
            );
            self.readers.fetch_sub(1, Ordering::AcqRel);
            self.rx.receive(task);
        }
    }

    /// A natm data VC's own reader: waits for its frames in the VC's socket, and
    /// writes the packets of each frame and those that came with it together. The
    /// pool still sends what found the VC full; the reader ends its task with the VC.
    fn read_vc(self: Arc<Self>, ctx: &IpVc, task: pool::TaskId) {
        let conn = &ctx.out.conn;
        let mut frame = Vec::new();
        'vc: while let Ok(true) = conn.recv_into(&mut frame, Wait::Block) {
            // Only an LLC VC carries ATMARP requests that are answered on it.
            let _ = ctx.frame(&frame);
            for _ in 1..READ_BUDGET {
                match conn.recv_into(&mut frame, Wait::No) {
                    Ok(true) => {
                        let _ = ctx.frame(&frame);
                    }
                    Err(Error::WouldBlock(_)) => break,
                    Ok(false) | Err(_) => {
                        self.tun.flush();
                        break 'vc;
                    }
                }
            }
            self.tun.flush();
        }
        self.readers.fetch_sub(1, Ordering::AcqRel);
        self.rx.end(task);
    }

    /// Takes calls on SAP `ip` ([`VcKind::Natm`]) or on B-LLI LLC, as RFC 2225
    /// makes them ([`VcKind::Llc`]).
    fn listen(self: Arc<Self>, listener: Listener, kind: VcKind) {
        let sap = if kind == VcKind::Natm {
            IP_SAP
        } else {
            LLC_SAP
        };
        loop {
            let call = match listener.next_call(Wait::Block) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("listener on SAP {sap} failed: {e}");
                    std::process::exit(1);
                }
            };
            let Ok(caller) = call.caller.parse::<AtmAddr>() else {
                let _ = call.reject(21);
                continue;
            };
            let (class, offered) = {
                let node = lock(&self.node);
                qos::classify_call(node.policy(), &call.qos)
            };
            let decided = self.with_node(|n, now| match kind {
                VcKind::Natm => n.handle_incoming(now, caller, class, offered),
                VcKind::Llc | VcKind::Pvc => n.handle_incoming_llc(now, caller, offered),
            });
            match decided {
                Ok((vc, mtu)) => match call.accept() {
                    Ok(conn) => {
                        tracing::info!(vc, %caller, mtu, ?class, ?kind, "call taken");
                        self.start_vc(vc, conn, kind, caller);
                        self.with_node(|n, now| n.handle_accepted(now, vc));
                    }
                    Err(e) => {
                        tracing::warn!(%caller, "accepting failed: {e}");
                        self.with_node(|n, now| n.handle_closed(now, vc));
                    }
                },
                Err(cause) => {
                    if let Some(suppressed) = lock(&self.refusals_log).allow(self.now()) {
                        tracing::info!(%caller, cause, suppressed, "call refused");
                    }
                    let _ = call.reject(cause);
                }
            }
        }
    }

    /// Calls the ATMARP server: natm's SAP `atmarp`, or as RFC 2225 does when
    /// `llc` (a server that is not natm, Linux's `atmarpd`: bare AAL5, B-LLI LLC).
    fn call_server(&self, server: AtmAddr, llc: bool) -> Result<Connection, Error> {
        if llc {
            let q = qos::with_mtu(LLC_QOS, lock(&self.node).config().receive_mtu())
                .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
            self.host
                .connect(format!("{server}:{LLC_SAP}").as_str(), q.as_str())
        } else {
            self.host
                .connect(format!("{server}:{ARP_SAP}").as_str(), "reliable")
        }
    }

    /// Keeps a VC to the ATMARP server, feeding its answers to the node. A server
    /// that refuses natm's SAP `atmarp` with cause 88 is called again as RFC 2225
    /// does; each reconnection tries natm's SAP first, so a natm server that was not
    /// yet listening (starting, or restarting) is not taken for another stack.
    fn arp_client(self: Arc<Self>, server: AtmAddr) {
        loop {
            let mut llc = false;
            let mut called = self.call_server(server, llc);
            if let Err(Error::Refused { cause, .. }) = &called {
                if *cause == CAUSE_INCOMPATIBLE {
                    tracing::info!(%server, "the ATMARP server refused natm's SAP (cause 88): calling it as RFC 2225 does");
                    llc = true;
                    called = self.call_server(server, llc);
                }
            }
            match called {
                Ok(conn) => {
                    let conn = Arc::new(conn);
                    let (tx, rx) = sync_channel::<Vec<u8>>(VC_QUEUE);
                    *lock(&self.server) = Some(tx);
                    let sender = conn.clone();
                    let started = spawn("natm-ip-arp-tx", move || {
                        while let Ok(f) = rx.recv() {
                            if sender.send(&f, Wait::Block).is_err() {
                                break;
                            }
                        }
                    });
                    if let Err(e) = started {
                        tracing::warn!(%server, "cannot start the ATMARP VC's sender: {e}");
                        *lock(&self.server) = None;
                        conn.abort();
                        thread::sleep(ARP_RECONNECT);
                        continue;
                    }
                    tracing::info!(%server, llc, "ATMARP server VC up");
                    self.with_node(|n, now| n.handle_server_up(now));
                    while let Ok(Some(chunk)) = conn.recv(Wait::Block) {
                        let packet = self.with_node(|n, now| {
                            n.handle_server_frame(now, &chunk).map(<[u8]>::to_vec)
                        });
                        if let Some(p) = packet {
                            self.tun.write(&p);
                        }
                    }
                    *lock(&self.server) = None;
                    tracing::warn!(%server, "ATMARP server VC closed; calling again");
                }
                Err(e) => tracing::warn!(%server, "cannot reach the ATMARP server: {e}"),
            }
            thread::sleep(ARP_RECONNECT);
        }
    }

    /// Runs the node's timers.
    fn timers(self: Arc<Self>) {
        let mut node = lock(&self.node);
        loop {
            let now = self.now();
            let sleep = node
                .poll_timeout()
                .map_or(TICK, |t| t.saturating_duration_since(now).min(TICK));
            self.timer_at
                .store((now + sleep).as_nanos(), Ordering::Relaxed);
            node = self
                .wake
                .wait_timeout(node, sleep)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            let now = self.now();
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
                let actions: Vec<_> = std::iter::from_fn(|| node.poll_action()).collect();
                drop(node);
                self.act_all(actions);
                node = lock(&self.node);
            }
        }
    }
}

/// This host's ATMARP server (RFC 2225 §8.5) and the log of what it refuses.
struct ArpService {
    server: Mutex<ArpServer>,
    /// Refused requests: at most 10 lines a second, then one with how many were held.
    log: Mutex<natm_sigd::core::Bucket>,
    epoch: std::time::Instant,
}

impl ArpService {
    fn new(server: ArpServer, own: Vec<(IpAddr, AtmAddr)>, epoch: std::time::Instant) -> Self {
        let s = ArpService {
            server: Mutex::new(server),
            log: Mutex::new(natm_sigd::core::Bucket::new(10)),
            epoch,
        };
        for (ip, atm) in own {
            lock(&s.server).add_permanent(s.now(), ip, atm);
        }
        s
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The reply (LLC/SNAP framed) to a client's ATMARP request from `caller` (the
    /// address sigd authenticated), if `chunk` is one the server answers. InATMARP
    /// and IP frames are not the server's: `None`.
    fn answer(&self, caller: AtmAddr, chunk: &[u8]) -> Option<Vec<u8>> {
        let Ok((Payload::Arp, body)) = llc::parse(chunk) else {
            return None;
        };
        let req = Repr::parse(body).ok()?;
        if matches!(req.op, Op::InRequest | Op::InReply) {
            return None;
        }
        let t = self.now();
        let (outcome, reply) = {
            let mut s = lock(&self.server);
            s.expire(t);
            s.handle(t, caller, &req)
        };
        if outcome == ServerOutcome::Refused {
            if let Some(suppressed) = lock(&self.log).allow(t) {
                tracing::warn!(%caller, ?req, suppressed, "ATMARP request refused");
            }
        }
        reply.and_then(|r| r.to_bytes().ok()).map(|b| arp_frame(&b))
    }
}

/// The ATMARP server: answers client VCs on SAP `atmarp`, at most
/// [`ARP_MAX_CLIENTS`] at once (a caller beyond them is refused with cause 47), with
/// [`ARP_WORKERS`] threads. (Clients that are not natm call as RFC 2225 does, on
/// B-LLI LLC: `natm ip`'s listener there hands their requests to the same server.)
fn serve_arp(
    host: Host,
    service: Arc<ArpService>,
) -> anyhow::Result<Arc<pool::ConnPool<ArpClient>>> {
    let listener = host.bind(ARP_SAP, "reliable").with_context(|| {
        format!("cannot listen on SAP {ARP_SAP} (is another ATMARP server running on this host?)")
    })?;
    let clients = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Every client VC's requests are served by ARP_WORKERS threads (`pool`), never a
    // thread per VC; a reply the client's VC has no room for is dropped and counted
    // (ATMARP clients ask again), so a client that does not read stalls no one.
    let serve = move |client: &ArpClient, chunk: &[u8]| -> Option<Vec<u8>> {
        service.answer(client.caller, chunk)
    };
    let pool = Arc::new(
        pool::ConnPool::start(ARP_WORKERS, "natm-atmarp", serve)
            .context("cannot start the ATMARP server's threads")?,
    );
    let clients_pool = pool.clone();
    let accepting = thread::Builder::new().name("natm-atmarp-accept".into());
    accepting
        .spawn(move || loop {
            let call = match listener.next_call(Wait::Block) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!("ATMARP listener failed: {e}");
                    std::process::exit(1);
                }
            };
            let Ok(caller) = call.caller.parse::<AtmAddr>() else {
                let _ = call.reject(21);
                continue;
            };
            use std::sync::atomic::Ordering::Relaxed;
            if clients.fetch_add(1, Relaxed) >= ARP_MAX_CLIENTS {
                clients.fetch_sub(1, Relaxed);
                let _ = call.reject(47); // resources unavailable
                continue;
            }
            // The slot is given back however the VC ends.
            let slot = ClientSlot(clients.clone());
            let Ok(conn) = call.accept() else {
                continue;
            };
            let _ = clients_pool.add(
                conn,
                ArpClient {
                    caller,
                    _slot: slot,
                },
            );
        })
        .context("cannot start the ATMARP server's thread")?;
    Ok(pool)
}

/// A client VC of the ATMARP server, as its pool's workers see it.
pub(super) struct ArpClient {
    /// The ATM address sigd authenticated for the call.
    caller: AtmAddr,
    _slot: ClientSlot,
}

impl pool::TaskContext for ArpClient {}

/// One of the ATMARP server's [`ARP_MAX_CLIENTS`] client VCs, given back when dropped.
struct ClientSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(super) fn run(cfg: IpConfig) -> super::super::CliResult {
    let tun = Tun::open(&cfg)?;
    let mut hc = HostConfig::default();
    if let Some(p) = &cfg.sigd {
        hc.sigd_socket = Some(p.clone());
    }
    if !cfg.signalled {
        // A PVC-only interface never talks to sigd.
        hc.sigd_socket = None;
    }
    let host = Host::open(hc).map_err(|e| anyhow!("cannot start natm's engine: {e}"))?;
    let epoch = std::time::Instant::now();
    let arp_clients = if cfg.arp_server {
        let own = [
            cfg.ipv4.map(|x| IpAddr::V4(x.0)),
            cfg.ipv6.map(|x| IpAddr::V6(x.0)),
        ]
        .into_iter()
        .flatten()
        .map(|ip| (ip, cfg.node.atm))
        .collect();
        let subnets = [
            cfg.ipv4.map(|(a, p)| (IpAddr::V4(a), p)),
            cfg.ipv6.map(|(a, p)| (IpAddr::V6(a), p)),
        ]
        .into_iter()
        .flatten();
        let server = ArpServer::new(ARP_SERVER_ENTRIES, SERVER_AGE).serving(subnets);
        let service = Arc::new(ArpService::new(server, own, epoch));
        Some((serve_arp(host.clone(), service.clone())?, service))
    } else {
        None
    };
    let listeners = if cfg.signalled {
        let taken = |sap: &str| {
            format!("cannot listen on SAP {sap} (is another `natm ip` running on this host?)")
        };
        vec![
            (
                host.bind(IP_SAP, "ubr").with_context(|| taken(IP_SAP))?,
                VcKind::Natm,
            ),
            (
                host.bind(LLC_SAP, LLC_QOS)
                    .with_context(|| taken(LLC_SAP))?,
                VcKind::Llc,
            ),
        ]
    } else {
        Vec::new()
    };
    let node = Node::new(
        cfg.node.clone(),
        cfg.policy.clone(),
        natm::time::Instant::ZERO,
    );
    let rx = pool::ConnPool::start(IP_WORKERS, "natm-ip-rx", |v: &IpVc, chunk: &[u8]| {
        v.frame(chunk)
    })
    .context("cannot start natm ip's receiving thread")?;
    let shared = Arc::new(Shared {
        node: Mutex::new(node),
        wake: Condvar::new(),
        timer_at: AtomicU64::new(0),
        vcs: Mutex::new(HashMap::new()),
        rx,
        readers: AtomicUsize::new(0),
        server: Mutex::new(None),
        tun,
        host: host.clone(),
        epoch,
        tun_drops: AtomicU64::new(0),
        pending_bytes: AtomicUsize::new(0),
        setups: AtomicUsize::new(0),
        arp_server: arp_clients.as_ref().map(|(_, s)| s.clone()),
        refusals_log: Mutex::new(natm_sigd::core::Bucket::new(10)),
    });
    if let Some((pvc, bind, via)) = cfg.pvc {
        let AtmAddr::Pvc(p) = pvc else {
            return Err(anyhow!("--pvc is not a PVC"));
        };
        let (natm::wire::addr::PvcPart::Num(vpi), natm::wire::addr::PvcPart::Num(vci)) =
            (p.vpi(), p.vci())
        else {
            return Err(anyhow!("--pvc needs a number for VPI and VCI"));
        };
        let vpi = u8::try_from(vpi).map_err(|_| anyhow!("--pvc: VPI {vpi} is over 255"))?;
        // The PVC's AAL5 SDUs are as large as the MTU this host takes and the
        // LLC/SNAP header (9188 by default, Linux CLIP's PVCs take the same).
        let pvc_qos = qos::with_mtu("ubr:transport=none", cfg.node.receive_mtu())?;
        let conn = host
            .open_pvc_from(bind, vpi, vci, via, &pvc_qos)
            .map_err(|e| anyhow!("opening PVC {vpi}.{vci}: {e}"))?;
        let vc = shared.with_node(|n, now| n.add_pvc(now, pvc, cfg.node.receive_mtu()));
        // The InARP request went before the VC's threads existed: ask again now.
        shared.start_vc(vc, conn, VcKind::Pvc, pvc);
        shared.with_node(|n, now| n.handle_server_up(now));
    }
    let cannot = |what: &str| format!("cannot start natm ip's {what} thread");
    {
        let s = shared.clone();
        spawn("natm-ip-timers", move || s.timers()).with_context(|| cannot("timer"))?;
        for (listener, kind) in listeners {
            let s = shared.clone();
            spawn("natm-ip-listen", move || s.listen(listener, kind))
                .with_context(|| cannot("listener"))?;
        }
        if let Some(server) = cfg.arp {
            let s = shared.clone();
            spawn("natm-ip-arp", move || s.arp_client(server))
                .with_context(|| cannot("ATMARP client"))?;
        }
    }
    if !cfg.report.is_zero() {
        let s = shared.clone();
        let every = cfg.report;
        spawn("natm-ip-report", move || loop {
            thread::sleep(every);
            let node = lock(&s.node);
            let c = node.counters();
            let vcs: Vec<String> = node
                .vcs()
                .map(|(id, peer, class, mtu)| {
                    format!(
                        "vc {id} to {peer} class {} mtu {mtu}",
                        class.map_or("-".to_owned(), |c| c.to_string())
                    )
                })
                .collect();
            let arp: Vec<String> = node
                .table()
                .iter()
                .map(|(ip, e)| format!("{ip} at {}", e.atm))
                .collect();
            let server = arp_clients.as_ref().map_or(String::new(), |(p, _)| {
                format!(
                    "; ATMARP server: {} client VCs, {} replies dropped (no room on the client's VC)",
                    p.len(),
                    p.replies_dropped()
                )
            });
            drop(node);
            let links: Vec<String> = lock(&s.vcs)
                .iter()
                .map(|(id, h)| {
                    let st = h.out.conn.stats();
                    format!(
                        "vc {id}: {} watermark holds, {} queue drops, {} B unread",
                        st.watermark_holds,
                        st.queue_drops.unwrap_or(0),
                        st.recv_queued
                    )
                })
                .collect();
            eprintln!(
                "natm ip: {c:?}; tun drops {}; {}; {}; arp {}{server}; {}",
                s.tun_drops.load(Ordering::Relaxed),
                s.tun.report(),
                vcs.join(", "),
                arp.join(", "),
                links.join(", ")
            );
        })
        .with_context(|| cannot("report"))?;
    }
    let resolution = match (cfg.arp, cfg.signalled) {
        (Some(arp), _) => format!(
            "ATM address {}, ATMARP server {arp}{}",
            cfg.node.atm,
            if cfg.arp_server { " (this host)" } else { "" }
        ),
        (None, true) => format!("ATM address {}, no ATMARP server", cfg.node.atm),
        (None, false) => "PVC only, no sigd".to_owned(),
    };
    eprintln!(
        "natm ip: {} up (mtu {}, {}{}{}), {resolution}{}",
        cfg.name,
        cfg.node.mtu,
        if shared.tun.offload() {
            "offloads on"
        } else {
            "no offloads"
        },
        cfg.ipv4
            .map_or(String::new(), |(a, p)| format!(", {a}/{p}")),
        cfg.ipv6
            .map_or(String::new(), |(a, p)| format!(", {a}/{p}")),
        cfg.pvc.map_or(String::new(), |(p, b, v)| format!(
            ", PVC {p} at {b} via {v}"
        )),
    );
    let mut reader = shared.tun.reader(cfg.node.mtu);
    loop {
        let packets = reader.read().context("reading the TUN interface")?;
        // The packets of one read (with offloads, a TCP segment of up to 64 KiB cut
        // at the MTU) go to the node at once, under one lock.
        shared.with_node(|node, now| {
            for p in packets {
                node.handle_outbound(now, p.to_vec());
            }
        });
    }
}
