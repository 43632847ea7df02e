//! Listeners and duplex connections.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::sigd::{Binding, Session};
use super::{Error, Resolved, WouldBlock};
use crate::adaptor::UdpDrops;
use crate::engine::{Conn, ConnEvent, Engine, Link, ListenerShared};
use crate::sync::{Level, OrderedMutex};
use natm_proto::endpoint::PsbStats;
use natm_proto::transport::{AbortReason, QosOutcome};

/// A listening endpoint: callers' connections queue here until accepted.
#[derive(Debug)]
pub struct Listener {
    eng: Arc<Engine>,
    kind: ListenerKind,
}

#[derive(Debug)]
enum ListenerKind {
    /// Direct mode: a UDP socket of our own.
    Direct(Arc<ListenerShared>),
    /// Through sigd: calls are offered over the IPC session the binding is under
    /// (bound again on a restarted sigd: `sigd::Binding`).
    Signalled {
        host: super::Host,
        binding: Arc<Binding>,
    },
}

/// A pre-authorised listener's pre-opened data sockets, by the endpoint sigd was given:
/// those sigd still holds and those of answered calls not yet taken. Their number is
/// the backlog; `accept` tops it up when it falls to half.
#[derive(Debug)]
pub(crate) struct AutoLinks {
    links: OrderedMutex<std::collections::HashMap<SocketAddr, Link>>,
    backlog: usize,
}

impl AutoLinks {
    pub(crate) fn new(links: Vec<Link>, backlog: usize) -> Result<Arc<AutoLinks>, Error> {
        let mut m = std::collections::HashMap::with_capacity(backlog);
        for l in links {
            m.insert(l.local_addr().map_err(Error::Io)?, l);
        }
        Ok(Arc::new(AutoLinks {
            links: OrderedMutex::new(Level::AutoLinks, m),
            backlog,
        }))
    }

    pub(crate) fn endpoints(&self) -> Vec<SocketAddr> {
        self.links.lock().keys().copied().collect()
    }

    fn take(&self, data: &SocketAddr) -> Option<Link> {
        self.links.lock().remove(data)
    }

    /// Open sockets up to the backlog once half are used, and hand them to sigd
    /// (best effort: a failure leaves the backlog shorter until the next call).
    fn refill(&self, host: &super::Host, session: &Session, listener: u64) {
        // In batches of up to 8 sockets: one message for several calls, and no burst
        // of socket creation long enough to show in the callers' setup times.
        let batch = (self.backlog / 2).clamp(1, 8);
        let held = self.links.lock().len();
        if held + batch > self.backlog {
            return;
        }
        let want = self.backlog - held;
        let mut fresh = Vec::with_capacity(want);
        for _ in 0..want {
            let Ok(l) = host.new_data_link() else { break };
            let Ok(a) = l.local_addr() else { continue };
            fresh.push((a, l));
        }
        if fresh.is_empty() {
            return;
        }
        let data: Vec<SocketAddr> = fresh.iter().map(|(a, _)| *a).collect();
        self.links.lock().extend(fresh);
        session.notify(|req| crate::wire::ipc::Message::Endpoints {
            req,
            listener,
            data,
        });
    }
}

/// A call offered to a listener through sigd: who calls and with what QoS, to accept
/// or reject before any connection exists (seed 004 §5.3). Dropping it unanswered
/// rejects it (cause 21).
pub struct IncomingCall {
    /// The caller's ATM address.
    pub caller: String,
    /// The QoS the caller asks for, from this side (tx = what this side sends).
    pub qos: String,
    call: u64,
    host: super::Host,
    session: Arc<Session>,
    answered: bool,
}

/// The call as its user sees it; the host and session are engine state, not the call's.
impl std::fmt::Debug for IncomingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingCall")
            .field("call", &self.call)
            .field("caller", &self.caller)
            .field("qos", &self.qos)
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl IncomingCall {
    /// Accept: sigd admits the call on this host too, then both ends open the data path.
    pub fn accept(mut self) -> Result<Connection, Error> {
        self.answered = true;
        let link = self.host.data_link()?;
        let data = link.local_addr().map_err(Error::Io)?;
        let call = self.call;
        let req = self
            .session
            .send_request(|req| crate::wire::ipc::Message::Accept { req, call, data })?;
        self.host.open_spare_link();
        self.session.answer(req)?;
        self.host.await_connected(&self.session, call, link, false)
    }

    /// Reject with a UNI cause (21 "call rejected" is the usual one); the caller's
    /// `connect` fails with [`Error::Refused`] carrying it.
    pub fn reject(mut self, cause: u8) -> Result<(), Error> {
        self.answered = true;
        let call = self.call;
        self.session.forget(call);
        self.session
            .request(|req| crate::wire::ipc::Message::Reject { req, call, cause })
            .map(|_| ())
    }
}

impl Drop for IncomingCall {
    fn drop(&mut self) {
        if !self.answered {
            let call = self.call;
            self.session.forget(call);
            self.session
                .notify(|req| crate::wire::ipc::Message::Reject {
                    req,
                    call,
                    cause: 21,
                });
        }
    }
}

impl Listener {
    pub(super) fn bind(eng: Arc<Engine>, addr: SocketAddr, r: Resolved) -> Result<Listener, Error> {
        let link = Link::bind(&eng.cfg, addr).map_err(Error::Io)?;
        let token = eng.token();
        let seed = u64::from(random_cookie()) << 32 | u64::from(random_cookie());
        let shared = Arc::new(ListenerShared::new(
            token,
            link,
            r.cfg.clone(),
            r.cfg,
            r.level,
            r.weight,
            seed,
        ));
        eng.register(shared.link.raw_fd(), token)
            .map_err(Error::Io)?;
        eng.listeners.lock().insert(token, shared.clone());
        Ok(Listener {
            eng,
            kind: ListenerKind::Direct(shared),
        })
    }

    pub(super) fn signalled(host: super::Host, binding: Arc<Binding>) -> Listener {
        Listener {
            eng: host.eng.clone(),
            kind: ListenerKind::Signalled { host, binding },
        }
    }

    /// The address callers connect to (direct mode; a listener through sigd is reached
    /// by the host's ATM address and the SAP).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        match &self.kind {
            ListenerKind::Direct(shared) => shared.link.local_addr().map_err(Error::Io),
            ListenerKind::Signalled { .. } => Err(Error::NeedsSigd(
                "a listener through sigd has no socket address: callers use the host's ATM address and the SAP",
            )),
        }
    }

    /// The next call offered through sigd, before any connection exists: look at the
    /// caller and the QoS, then [`IncomingCall::accept`] or [`IncomingCall::reject`].
    /// `None` waits until one comes (or sigd goes away). A pre-authorised listener
    /// ([`super::Accept::Auto`]) is offered only the calls that do not fit its QoS;
    /// [`Listener::accept`] returns the others.
    pub fn next_call(&self, timeout: Option<Duration>) -> Result<IncomingCall, Error> {
        match &self.kind {
            ListenerKind::Direct(_) => Err(Error::NeedsSigd(
                "direct mode cannot show a call before it connects: bind a SAP through sigd",
            )),
            ListenerKind::Signalled { host, binding } => {
                let deadline = timeout.map(|t| std::time::Instant::now() + t);
                let (session, id) = binding.current(deadline)?;
                let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                let o = session.next_offer(id, left)?;
                session.watch_call(o.call);
                Ok(IncomingCall {
                    caller: o.caller,
                    qos: o.qos,
                    call: o.call,
                    host: host.clone(),
                    session,
                    answered: false,
                })
            }
        }
    }

    /// Wait for the next caller (through sigd: accept whoever calls).
    pub fn accept(&self) -> Result<Connection, Error> {
        self.accept_timeout(None)
    }

    /// Wait up to `timeout` for the next caller.
    pub fn accept_timeout(&self, timeout: Option<Duration>) -> Result<Connection, Error> {
        let shared = match &self.kind {
            ListenerKind::Direct(s) => s,
            ListenerKind::Signalled { host, binding } => match &binding.auto {
                None => return self.next_call(timeout)?.accept(),
                Some(links) => {
                    let deadline = timeout.map(|t| std::time::Instant::now() + t);
                    let (session, id) = binding.current(deadline)?;
                    let left =
                        deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                    return Self::accept_auto(host, &session, id, links, left);
                }
            },
        };
        let until = timeout.map(|t| std::time::Instant::now() + t);
        let mut q = shared.queue.lock();
        loop {
            if let Some(c) = q.pop_front() {
                return Ok(Connection::from_conn(self.eng.clone(), c));
            }
            let wait = match until {
                Some(u) => {
                    let left = u.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(Error::TimedOut);
                    }
                    left
                }
                None => Duration::from_secs(1),
            };
            shared.queue_cv.wait_for(&mut q, wait);
        }
    }

    /// A pre-authorised listener's next call: one sigd answered already (open its data
    /// path on the socket it took, give the backlog a socket back), or one offered
    /// because it does not fit (accept it as [`IncomingCall::accept`] does).
    fn accept_auto(
        host: &super::Host,
        session: &Arc<Session>,
        id: u64,
        links: &Arc<AutoLinks>,
        timeout: Option<Duration>,
    ) -> Result<Connection, Error> {
        let a = match session.next_for_listener(id, timeout)? {
            super::sigd::NextCall::Accepted(a) => a,
            super::sigd::NextCall::Offered(o) => {
                session.watch_call(o.call);
                return IncomingCall {
                    caller: o.caller,
                    qos: o.qos,
                    call: o.call,
                    host: host.clone(),
                    session: session.clone(),
                    answered: false,
                }
                .accept();
            }
        };
        let Some(link) = links.take(&a.data) else {
            // Not a socket this listener gave: end the call rather than guess.
            let call = a.call;
            session.forget(call);
            session.notify(|req| crate::wire::ipc::Message::Release {
                req,
                call,
                cause: 41,
            });
            return Err(Error::SigdGone);
        };
        let conn = host.open_signalled(session, a.call, link, a.connected, false);
        links.refill(host, session, id);
        conn
    }

    /// The next caller if one is waiting.
    pub fn try_accept(&self) -> Result<Connection, Error> {
        self.accept_timeout(Some(Duration::ZERO))
            .map_err(|_| Error::WouldBlock(WouldBlock::Empty))
    }

    /// Connection requests refused because the accept backlog was full (direct mode).
    pub fn backlog_drops(&self) -> u64 {
        match &self.kind {
            ListenerKind::Direct(s) => s.counters.backlog_full.load(Ordering::Relaxed),
            ListenerKind::Signalled { .. } => 0,
        }
    }

    /// Whether this listener takes no more calls for good: its sigd restarted and
    /// refused to bind it again (someone else bound the SAP meanwhile), or no sigd
    /// came back within 10 minutes. `accept` then fails with that error every time.
    /// A listener through sigd is otherwise bound again by itself after a restart.
    pub fn is_unbound(&self) -> bool {
        match &self.kind {
            ListenerKind::Direct(_) => false,
            ListenerKind::Signalled { binding, .. } => binding.is_lost(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &self.kind {
            ListenerKind::Direct(shared) => {
                let _ = self.eng.deregister(shared.link.raw_fd());
                self.eng.listeners.lock().remove(&shared.token);
                shared.close(&self.eng);
            }
            ListenerKind::Signalled { binding, .. } => {
                let (session, listener) = binding.bound();
                // Calls sigd answered for a pre-authorised listener and nobody took
                // end now (cause 41), as a TCP listen queue's do when it closes.
                for call in session.close_listener(listener) {
                    session.notify(|req| crate::wire::ipc::Message::Release {
                        req,
                        call,
                        cause: 41,
                    });
                }
                session.notify(|req| crate::wire::ipc::Message::Unbind { req, listener });
            }
        }
    }
}

/// What the network granted a connection set up through sigd (the FORE API's
/// returned QoS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// Reserved rate this side sends at, payload bit/s (0: nothing reserved — not a
    /// guaranteed VC).
    pub tx_bps: u64,
    /// The QoS in force, from this side (tx = what this side sends).
    pub qos: String,
}

/// A call held through sigd.
#[derive(Debug)]
struct SigCall {
    session: Arc<Session>,
    call: u64,
    granted: Granted,
    /// The sending rate the network holds for the call now, payload bit/s (the
    /// grant, then each confirmed change through the network).
    reserved: std::sync::atomic::AtomicU64,
    /// A change through the network is under way.
    modifying: std::sync::atomic::AtomicBool,
}

/// Counters of both VCs of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnStats {
    /// The sending VC.
    pub tx: PsbStats,
    /// The receiving VC.
    pub rx: PsbStats,
    /// Smoothed RTT of the sending VC, once it has a sample (VCs without ACKs never do).
    pub srtt: Option<Duration>,
    /// Flow controller's rate on the sending VC, bit/s, if it sets one.
    pub rate_bps: Option<u64>,
    /// Flow controller's window on the sending VC, TPDUs, if it keeps one.
    pub window: Option<u64>,
    /// Datagrams refused before reaching a VC: not natm, unknown VC.
    pub refused_frames: u64,
    /// Times the receive side stopped reading at its high watermark.
    pub watermark_holds: u64,
    /// Datagrams the socket failed to send.
    pub send_errors: u64,
    /// Frames the connection's receive queue dropped because it was full, before any
    /// work was spent on them (seed 000 §6.2.2): the mem port's own count, or the
    /// kernel's for the UDP socket (read from `/proc/net/udp`); `None` where unknown.
    pub queue_drops: Option<u64>,
    /// Bytes queued on the sending VC: not yet sent, or not yet acknowledged.
    pub send_queued: u64,
    /// Bytes held on the receiving VC: out of order, or not yet read.
    pub recv_queued: u64,
    /// The cell mode's counters (trains, cells, HEC corrections, reassembly drops,
    /// datagrams that were not trains); `None` in frame mode.
    pub cells: Option<crate::adaptor::CellStats>,
    /// The connection's UDP socket: datagrams and octets it handed to the kernel and
    /// took from it (VC headers or cell trains included), and the system calls that
    /// did it; `None` on an in-memory link.
    pub port: Option<crate::adaptor::PortStats>,
    /// A bare AAL5 VC pair's own counters (`transport=none`); `None` otherwise.
    pub bare: Option<BareStats>,
    /// The connection's OAM F5 loopback end point.
    pub oam: OamStats,
    /// What sealing did, for a connection whose TPDUs are encrypted (issue 16);
    /// `None`: clear TPDUs.
    pub seal: Option<SealStats>,
    /// The path MTU the kernel holds for the peer (octets, IP header included), which
    /// the sending VC's TPDUs are cut to fit (issue 30); `None` on a mem link or
    /// before the socket has a peer.
    pub path_mtu: Option<u32>,
    /// Datagrams the kernel refused as larger than the path MTU and that went out in
    /// IP fragments after all: TPDUs cut before the path shrank (their
    /// retransmissions keep their size). 0 while the path MTU holds.
    pub fragmented: u64,
}

/// Counters of an encrypted connection's sealing ([`ConnStats::seal`]). The drops
/// happen before any VC sees the frame: none changes the connection's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SealStats {
    /// TPDUs sealed and sent.
    pub sealed: u64,
    /// TPDUs received whose tag verified.
    pub opened: u64,
    /// Frames with another cookie: dropped before any decryption.
    pub bad_cookie: u64,
    /// Frames whose tag did not verify (forged, modified, another key): dropped.
    pub bad_tag: u64,
    /// Frames replayed, too old for the replay window, or sent in clear: dropped
    /// before any decryption.
    pub replayed: u64,
}

/// Counters of a bare AAL5 VC pair (`transport=none`): SDUs and bytes each way, and
/// what was refused or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BareStats {
    /// The sending VC.
    pub tx: natm_proto::endpoint::VcCounters,
    /// The receiving VC.
    pub rx: natm_proto::endpoint::VcCounters,
}

/// What a connection's OAM F5 loopback end point counted ([`Connection::oam_loopback`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OamStats {
    /// Loopback probes this end sent.
    pub probes_sent: u64,
    /// Answers to them that came back in time.
    pub answers: u64,
    /// End-to-end loopback requests this end answered.
    pub looped: u64,
    /// Answers no probe waited for (late, duplicated, foreign): dropped.
    pub unmatched: u64,
    /// Requests not for this end point (a segment flow, another location): dropped.
    pub ignored: u64,
    /// OAM frames that were not loopback cells: dropped.
    pub malformed: u64,
    /// End-to-end requests not answered: over the connection's answer budget (100 a
    /// second after a burst of 16).
    pub rate_limited: u64,
}

/// A QoS change the peer accepted ([`Connection::set_qos`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosChange {
    /// The sending rate now in force, payload bit/s.
    pub rate_bps: u64,
    /// From the request to the peer's acceptance (the new rate applies from then).
    pub took: Duration,
}

/// seed 003's status flags of a connection ([`Connection::status`],
/// [`Connection::recv_with_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStatus {
    /// The data returned with this status starts a message (receive calls only).
    pub message_start: bool,
    /// The data returned with this status ends a message (receive calls only).
    pub message_end: bool,
    /// The peer closed its sending VC and everything it sent was delivered.
    pub peer_closed: bool,
    /// This end's close completed: the peer has everything.
    pub closed: bool,
    /// The connection was aborted (by the peer, a timeout or the network), and why.
    pub aborted: Option<AbortReason>,
    /// The last send found the window full.
    pub window_full: bool,
    /// The application is sending faster than its agreed rate.
    pub over_rate: bool,
    /// A QoS change of this end's sending VC waits for the peer's answer.
    pub qos_pending: bool,
    /// How this end's last QoS change ended.
    pub qos: Option<QosOutcome>,
    /// The sending VC's rate in force, payload bit/s (0: none).
    pub tx_rate_bps: u64,
    /// How the peer's last QoS change of the receiving VC ended (the receiver
    /// learns the new rate as the peer asks for it).
    pub peer_qos: Option<QosOutcome>,
    /// The receiving VC's rate as the peer last set it, payload bit/s (0: none).
    pub rx_rate_bps: u64,
}

/// The status flags of `conn`; `edge` is the message start/end of data just taken.
fn conn_status(conn: &Conn, edge: Option<(bool, bool)>) -> ConnStatus {
    let (t, r) = conn.status_parts();
    let (ts, th, trate, rs, rh, rrate) = (t.psb, t.half, t.rate_bps, r.psb, r.half, r.rate_bps);
    let (message_start, message_end) = edge.unwrap_or_default();
    let mut s = ConnStatus {
        message_start,
        message_end,
        peer_closed: rh.peer_closed,
        closed: th.closed,
        aborted: th.aborted.or(rh.aborted),
        window_full: ts.window_full,
        over_rate: ts.over_rate,
        qos_pending: ts.qos_pending,
        qos: th.qos,
        tx_rate_bps: trate,
        peer_qos: rh.qos,
        rx_rate_bps: rrate,
    };
    s.peer_closed |= rs.peer_closed;
    s
}

/// The new sending rate a `set_qos` text asks for.
/// The bounds a guaranteed call's sending rate may be renegotiated within, from the
/// QoS granted at setup (this side's view): `min_pcr` (0 without) up to `max_pcr`
/// (without it, the rate granted).
fn setup_bounds(granted_qos: &str, granted_bps: u64) -> (u64, u64) {
    let Ok(q) = granted_qos.parse::<crate::wire::qos::Qos>() else {
        return (0, granted_bps);
    };
    let p = q.tx();
    let min = p.min_pcr.and_then(|r| r.bits_per_sec()).unwrap_or(0);
    let max = match p.max_pcr {
        Some(r) => r.bits_per_sec().unwrap_or(u64::MAX),
        None => granted_bps,
    };
    (min, max.max(granted_bps))
}

fn qos_rate(text: &str) -> Result<u64, Error> {
    let q: crate::wire::qos::Qos = text
        .parse()
        .map_err(|e: crate::wire::qos::QosParseError| Error::Qos(e.render(text)))?;
    let cfg = crate::transport::TransportConfig::from_qos(&q, false).map_err(Error::Config)?;
    if cfg.rate == 0 {
        return Err(Error::QosNotNegotiable(format!(
            "{text:?} gives no transmit rate: a QoS change names the new rate (pcr, or scr for VBR)"
        )));
    }
    Ok(cfg.rate)
}

/// Why sigd ended a call: the UNI cause and sigd's sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// UNI cause value (16: normal clearing).
    pub cause: u8,
    /// What happened, e.g. "released by an administrator (uid 0, pid 4242)".
    pub detail: String,
}

/// Counters of both VCs of an engine connection (`Connection::stats`, and the
/// periodic report to sigd). The socket queue's drops are looked up in `tables` when
/// given (read once for many connections), else read for this connection alone.
pub(crate) fn conn_stats(conn: &Conn, tables: Option<&UdpDrops>) -> ConnStats {
    let p = conn.stats_parts();
    let c = &conn.counters;
    ConnStats {
        tx: p.tx,
        rx: p.rx,
        srtt: p.srtt,
        rate_bps: p.rate_bps,
        window: p.window,
        refused_frames: c.not_natm.load(Ordering::Relaxed) + c.unknown_vc.load(Ordering::Relaxed),
        watermark_holds: c.held_by_watermark.load(Ordering::Relaxed),
        send_errors: c.send_errors.load(Ordering::Relaxed),
        queue_drops: match tables {
            Some(t) => conn.link.queue_drops_in(t),
            None => conn.link.queue_drops(),
        },
        send_queued: p.send_queued,
        recv_queued: p.recv_queued,
        cells: conn.link.cell_stats(),
        port: conn.link.port_stats(),
        bare: p.bare.map(|(tx, rx)| BareStats { tx, rx }),
        oam: {
            let o = &c.oam;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            OamStats {
                probes_sent: n(&o.probes_sent),
                answers: n(&o.answers),
                looped: n(&o.looped),
                unmatched: n(&o.unmatched),
                ignored: n(&o.ignored),
                malformed: n(&o.malformed),
                rate_limited: n(&o.rate_limited),
            }
        },
        path_mtu: conn.link.path_mtu(),
        fragmented: conn.link.oversize_fallbacks(),
        seal: conn.encrypted().then(|| {
            let c = &c.seal;
            let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            SealStats {
                sealed: n(&c.sealed),
                opened: n(&c.opened),
                bad_cookie: n(&c.bad_cookie),
                bad_tag: n(&c.bad_tag),
                replayed: n(&c.replayed),
            }
        }),
    }
}

/// A piece of a received message as it arrived, without a copy: the payload of one
/// TPDU, as the buffer it was received into ([`Connection::recv_chunk`]; quinn's
/// `read_chunk` shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The bytes (reference-counted: pass them on, or keep them, without copying).
    pub data: Bytes,
    /// This chunk ends its message (on a byte stream, every chunk does).
    pub end_of_message: bool,
}

/// A duplex connection: two simplex VCs.
#[derive(Debug)]
pub struct Connection {
    eng: Arc<Engine>,
    conn: Arc<Conn>,
    sig: Option<SigCall>,
}

impl Connection {
    /// The sigd session and call id behind a connection set up through sigd.
    pub(super) fn sig_call(&self) -> Option<(Arc<Session>, u64)> {
        self.sig.as_ref().map(|s| (s.session.clone(), s.call))
    }

    pub(super) fn from_conn(eng: Arc<Engine>, conn: Arc<Conn>) -> Connection {
        Connection {
            eng,
            conn,
            sig: None,
        }
    }

    /// A connection sigd set up: wait until both VCs are up.
    pub(super) fn signalled(
        eng: Arc<Engine>,
        conn: Arc<Conn>,
        session: Arc<Session>,
        call: u64,
        granted: Granted,
        timeout: Duration,
    ) -> Result<Connection, Error> {
        conn.wait_up(&eng, timeout)?;
        Ok(Connection {
            eng,
            conn,
            sig: Some(SigCall {
                session,
                call,
                reserved: std::sync::atomic::AtomicU64::new(granted.tx_bps),
                modifying: std::sync::atomic::AtomicBool::new(false),
                granted,
            }),
        })
    }

    /// What sigd granted (`None` in direct mode, where nothing is reserved).
    pub fn granted(&self) -> Option<&Granted> {
        self.sig.as_ref().map(|s| &s.granted)
    }

    pub(super) fn connect(
        eng: Arc<Engine>,
        (local, addr): (Option<SocketAddr>, SocketAddr),
        r: Resolved,
        timeout: Duration,
    ) -> Result<Connection, Error> {
        let conn = Conn::connect(
            &eng,
            (local, addr),
            r.cfg,
            (r.level, r.weight),
            (random_cookie(), random_cookie()),
            timeout,
        )?;
        Ok(Connection::from_conn(eng, conn))
    }

    /// Send one message, blocking while the window is full or the rate is exceeded.
    pub fn send(&self, msg: &[u8]) -> Result<(), Error> {
        self.conn.send_message(&self.eng, msg)
    }

    /// Send one message if it fits now, else [`Error::WouldBlock`] (window full or
    /// over rate) with nothing taken.
    pub fn try_send(&self, msg: &[u8]) -> Result<(), Error> {
        self.conn.try_send_message(&self.eng, msg, None)
    }

    /// Send one message, blocking as [`Connection::send`], taking ownership of its
    /// buffer instead of copying it: the sending VC's queue holds slices of `msg` as
    /// its TPDU payloads (retransmissions re-send the same slices), and the only copy
    /// of its octets is the kernel's into the socket (seed 000 §5.4). The buffer is
    /// released when the last of its TPDUs is acknowledged. The send buffer's bound
    /// counts these octets as it counts copied ones. For large messages the
    /// application has in a `Bytes` already (or fills one per message); cloning a
    /// `Bytes` to keep it is free.
    pub fn send_bytes(&self, msg: Bytes) -> Result<(), Error> {
        self.conn.send_message_bytes(&self.eng, &msg)
    }

    /// As [`Connection::send_bytes`] if the message fits now, else
    /// [`Error::WouldBlock`] with nothing taken (as [`Connection::try_send`]).
    pub fn try_send_bytes(&self, msg: Bytes) -> Result<(), Error> {
        self.conn.try_send_message_bytes(&self.eng, &msg, None)
    }

    /// Send several messages in one call, blocking while the window is full or the
    /// rate is exceeded. Each is its own message, delivered whole and in order (its
    /// own TPDU or TPDUs; a lost one is counted as one message lost); what the batch
    /// saves is system calls: the messages that fit are queued together and their
    /// TPDUs leave in one GSO `sendmsg` per run of equal sizes (up to the kernel's
    /// GSO segment limit), where [`Connection::send`] makes one per message. A
    /// guaranteed VC's leaky bucket still paces them: a burst within the bucket's
    /// depth leaves at once, the rest at the reserved rate.
    pub fn send_many<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<(), Error> {
        self.conn.send_messages(&self.eng, msgs)
    }

    /// As [`Connection::send_many`] without blocking: takes the messages, from the
    /// first, that fit whole now and returns how many; [`Error::WouldBlock`] if not
    /// even the first fits (nothing taken).
    pub fn try_send_many<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<usize, Error> {
        self.conn.try_send_messages(&self.eng, msgs)
    }

    /// Send one message if it fits now, as [`Connection::try_send`]; if it does not,
    /// nothing is taken and `cx`'s waker is woken once the sending VC has made room
    /// (or ended). For event loops outside Rust's async, e.g. the C API's descriptor
    /// to `poll()`: the waker is registered under the same lock as the attempt, so no
    /// wake-up falls between them.
    pub fn poll_send(
        &self,
        cx: &mut std::task::Context<'_>,
        msg: &[u8],
    ) -> std::task::Poll<Result<(), Error>> {
        match self.conn.try_send_message(&self.eng, msg, Some(cx.waker())) {
            Err(Error::WouldBlock(_)) => std::task::Poll::Pending,
            r => std::task::Poll::Ready(r),
        }
    }

    /// The next chunk of a message ([`Connection::recv_chunk`]) if one has arrived;
    /// else `cx`'s waker is woken when one does (or the connection ends). Checked and
    /// registered under the same lock, as [`Connection::poll_send`].
    pub fn poll_recv_chunk(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Option<Chunk>, Error>> {
        match self.conn.poll_recv_chunk(&self.eng, cx.waker()) {
            Some(r) => std::task::Poll::Ready(r),
            None => std::task::Poll::Pending,
        }
    }

    /// Receive the next whole message, blocking; `None` once the peer has closed and
    /// everything it sent has been delivered.
    pub fn recv(&self) -> Result<Option<Vec<u8>>, Error> {
        self.conn.recv_message(&self.eng, None)
    }

    /// As [`Connection::recv`], giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, Error> {
        self.conn.recv_message(&self.eng, Some(timeout))
    }

    /// The next whole message if one is complete now.
    pub fn try_recv(&self) -> Result<Option<Vec<u8>>, Error> {
        self.conn.try_recv_message(&self.eng)
    }

    /// As [`Connection::recv_timeout`] (`None`: no limit), receiving the message into
    /// `buf`, whose memory it reuses: a message of several TPDUs is gathered into
    /// `buf`'s allocation, so a loop passing the same `Vec` neither allocates nor grows
    /// it once it has held the largest message (as a `read` into one buffer would).
    /// `Ok(true)`: `buf` is the message; `Ok(false)`: the peer has closed and
    /// everything it sent has been delivered. On an error `buf`'s contents are
    /// unspecified.
    pub fn recv_into(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<bool, Error> {
        Ok(self
            .conn
            .recv_message_into(&self.eng, timeout, buf)?
            .is_some())
    }

    /// Receive the next piece of a message without copying it, blocking; `None` once
    /// the peer has closed and everything it sent has been delivered.
    ///
    /// Each chunk is the payload of one TPDU as it was received, where
    /// [`Connection::recv`] gathers a message of several TPDUs into one `Vec` (a copy
    /// of every octet). A message is the chunks up to and including the one with
    /// [`Chunk::end_of_message`]. Use it for large messages, or to pass payloads on
    /// without copying them; use `recv` when whole messages in one buffer are what is
    /// wanted. Mixing the two within one message: a `recv` after some of its chunks
    /// returns the rest of the message, and a `recv_chunk` after a `recv` that timed
    /// out returns what `recv` had gathered as one chunk.
    pub fn recv_chunk(&self) -> Result<Option<Chunk>, Error> {
        self.conn.recv_chunk(&self.eng, None)
    }

    /// As [`Connection::recv_chunk`], giving up after `timeout`.
    pub fn recv_chunk_timeout(&self, timeout: Duration) -> Result<Option<Chunk>, Error> {
        self.conn.recv_chunk(&self.eng, Some(timeout))
    }

    /// The next chunk if one has arrived ([`Connection::recv_chunk`]), else
    /// [`Error::WouldBlock`].
    pub fn try_recv_chunk(&self) -> Result<Option<Chunk>, Error> {
        self.conn.try_recv_chunk(&self.eng)
    }

    /// Close the sending VC in order: everything sent is still delivered. Receiving
    /// continues until the peer closes too.
    pub fn close(&self) {
        self.conn.close_tx(&self.eng);
    }

    /// Abort both VCs at once; the peer sees "aborted", and so does every thread of
    /// this application still waiting on the connection.
    pub fn abort(&self) {
        self.conn.abort_local(&self.eng);
    }

    /// Wait until the peer has everything sent before `close` (or `timeout`).
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        self.conn.flush_tx_wait(&self.eng, timeout)
    }

    /// Change this end's sending rate at once, within the bounds agreed at setup,
    /// *without telling the peer*: a local adjustment of the shaper. The peer learns
    /// nothing and nothing waits for its answer; [`Connection::set_qos`] is the
    /// change the peer is told of and confirms (seed 003 `setqos`).
    pub fn set_rate(&self, bps: u64) -> Result<(), Error> {
        self.conn.set_rate(bps)
    }

    /// Change the QoS of the sending VC within the bounds agreed at setup (seed 003
    /// `setqos`) and wait up to `timeout` for the peer's answer. `qos` is QoS text as
    /// at connect (`cbr:pcr=4Mbps`); its transmit rate (`scr`, else `pcr`, else
    /// `max_pcr`) is the new rate, which must lie between the agreed minimum
    /// (`min_pcr`) and the rate agreed at setup (sigd's grant through sigd). The peer
    /// is told with a QOS TPDU; while its answer is awaited [`ConnStatus::qos_pending`]
    /// is set and the old rate holds; once it accepts, the shaper takes the new rate
    /// and this returns it. A refusal (or no answer after the close attempts) is
    /// [`Error::QosRefused`] and the rate stays. Only the rate is renegotiated: the
    /// text's other parameters need a new call.
    ///
    /// A guaranteed call set up through sigd may go beyond its reservation, up to
    /// the `max_pcr` agreed at setup: the network is asked first (sigd's `Modify`, a
    /// Q.2963.1 MODIFY REQUEST through every switch to the peer's sigd, each
    /// re-running admission), and the peer is asked in band once every hop has
    /// reserved the rate. A decrease is made in band first, then given back to the
    /// network, so the policers never see the old rate above the new reservation.
    /// A refusal by the network is [`Error::Refused`] with its cause (37: the
    /// bandwidth is not there), and the rate stays; beyond `min_pcr`..`max_pcr`
    /// is [`Error::QosBounds`] at once, nothing asked.
    pub fn set_qos(&self, qos: &str, timeout: Duration) -> Result<QosChange, Error> {
        let started = std::time::Instant::now();
        let bps = qos_rate(qos)?;
        let Some(sig) = self.sig.as_ref().filter(|s| s.granted.tx_bps > 0) else {
            self.try_set_qos(qos)?;
            let rate_bps = self.conn.wait_qos(&self.eng, Some(timeout))?;
            return Ok(QosChange {
                rate_bps,
                took: started.elapsed(),
            });
        };
        use std::sync::atomic::Ordering;
        if sig.modifying.swap(true, Ordering::AcqRel) {
            return Err(Error::QosPending(bps));
        }
        let r = self.set_qos_through(sig, qos, bps, started, timeout);
        sig.modifying.store(false, Ordering::Release);
        r.map(|rate_bps| QosChange {
            rate_bps,
            took: started.elapsed(),
        })
    }

    /// [`Connection::set_qos`] of a guaranteed call through sigd.
    fn set_qos_through(
        &self,
        sig: &SigCall,
        qos: &str,
        bps: u64,
        started: std::time::Instant,
        timeout: Duration,
    ) -> Result<u64, Error> {
        use std::sync::atomic::Ordering;
        let (min, max) = setup_bounds(&sig.granted.qos, sig.granted.tx_bps);
        if bps < min || bps > max {
            return Err(Error::QosBounds(crate::transport::QosBoundsError {
                requested: bps,
                min,
                max,
            }));
        }
        let left = || timeout.saturating_sub(started.elapsed());
        let reserved = sig.reserved.load(Ordering::Acquire);
        if bps > reserved {
            sig.session.modify(sig.call, qos, left())?;
            sig.reserved.store(bps, Ordering::Release);
            // The peer's sigd told its application before it acknowledged; its
            // bound is normally raised long before this QOS arrives. If not, the
            // refusal is repeated a few times while the bound catches up.
            let mut tries = 0;
            loop {
                self.conn.start_qos(&self.eng, bps)?;
                match self.conn.wait_qos(&self.eng, Some(left())) {
                    Err(Error::QosRefused { .. }) if tries < 3 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    r => return r,
                }
            }
        }
        self.conn.start_qos(&self.eng, bps)?;
        let rate = self.conn.wait_qos(&self.eng, Some(left()))?;
        if bps < reserved {
            // The rate is in force; give back what it no longer needs.
            sig.session.modify(sig.call, qos, left())?;
            sig.reserved.store(bps, Ordering::Release);
        }
        Ok(rate)
    }

    /// As [`Connection::set_qos`] without waiting: the request goes out and the change
    /// is pending; [`Connection::status`] (or [`Connection::wait_qos`]) tells how it
    /// ended.
    pub fn try_set_qos(&self, qos: &str) -> Result<(), Error> {
        let bps = qos_rate(qos)?;
        self.conn.start_qos(&self.eng, bps)
    }

    /// Wait up to `timeout` for the pending QoS change's answer: the new rate, or
    /// [`Error::QosRefused`].
    pub fn wait_qos(&self, timeout: Duration) -> Result<u64, Error> {
        self.conn.wait_qos(&self.eng, Some(timeout))
    }

    /// The next change of the connection's status, oldest first, waiting up to
    /// `timeout` (`None`: until one comes) — `None` if none came. seed 003's status
    /// flags as events: a QoS change asked for, accepted or refused (this end's, and
    /// the peer's of the receiving VC), the peer's close, this end's close completing,
    /// an abort, sigd's release, and a non-blocking send held by the window or the
    /// rate. At most [`EVENT_QUEUE`](crate::ulib::EVENT_QUEUE) wait: beyond that the
    /// oldest are dropped ([`Connection::events_dropped`]). One consumer at a time.
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<ConnEvent> {
        self.conn.events.next(timeout)
    }

    /// The next status event if one is queued, else `None` at once.
    pub fn try_next_event(&self) -> Option<ConnEvent> {
        self.conn.events.next(Some(Duration::ZERO))
    }

    /// The next status event if one is queued; else `cx`'s waker is woken when one
    /// is (checked and registered under the same lock, as [`Connection::poll_send`];
    /// the C API's event descriptor).
    pub fn poll_next_event(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<ConnEvent> {
        match self.conn.events.poll(cx.waker()) {
            Some(ev) => std::task::Poll::Ready(ev),
            None => std::task::Poll::Pending,
        }
    }

    /// Status events dropped because the application left
    /// [`EVENT_QUEUE`](crate::ulib::EVENT_QUEUE) of them untaken.
    pub fn events_dropped(&self) -> u64 {
        self.conn.events.dropped()
    }

    /// seed 003's status flags of the connection, as they are now.
    pub fn status(&self) -> ConnStatus {
        conn_status(&self.conn, None)
    }

    /// As [`Connection::recv_timeout`], with the status flags as they were just after
    /// the message was taken (seed 003: "most user interface calls have a 32-bit
    /// status field"): a whole message both starts and ends it.
    pub fn recv_with_status(
        &self,
        timeout: Duration,
    ) -> Result<(Option<Vec<u8>>, ConnStatus), Error> {
        let m = self.conn.recv_message(&self.eng, Some(timeout))?;
        let edge = m.as_ref().map(|_| (true, true));
        Ok((m, conn_status(&self.conn, edge)))
    }

    /// As [`Connection::recv_chunk_timeout`], with the status flags: whether the
    /// chunk starts or ends its message, and the connection's flags.
    pub fn recv_chunk_with_status(
        &self,
        timeout: Duration,
    ) -> Result<(Option<Chunk>, ConnStatus), Error> {
        let c = self.conn.recv_chunk_edge(&self.eng, Some(timeout))?;
        let edge = c.as_ref().map(|(c, start)| (*start, c.end_of_message));
        Ok((c.map(|(c, _)| c), conn_status(&self.conn, edge)))
    }

    /// Counters of both VCs.
    pub fn stats(&self) -> ConnStats {
        conn_stats(&self.conn, None)
    }

    /// [`Connection::stats`] of many connections, reading the kernel's socket table
    /// (for each socket's queue drops) once for all of them rather than once each: that
    /// table is as long as the host's UDP sockets, so `stats` on each of 10,000
    /// connections reads it 10,000 times (minutes of CPU).
    pub fn stats_of(conns: &[Connection]) -> Vec<ConnStats> {
        let tables = UdpDrops::read();
        conns
            .iter()
            .map(|c| conn_stats(&c.conn, Some(&tables)))
            .collect()
    }

    /// Send one OAM F5 loopback probe (ITU-T I.610) of flow `scope` on the sending VC
    /// and wait up to `timeout` for its answer: the round trip, or `None` if no answer
    /// came — a [`Scope::Segment`](crate::wire::oam::Scope) probe is answered by the
    /// first switch on the path, an end-to-end one by the far end's engine (every
    /// natm end answers them). At most 16 probes of a connection wait at once
    /// ([`Error::TooManyProbes`]).
    pub fn oam_loopback(
        &self,
        scope: crate::wire::oam::Scope,
        timeout: Duration,
    ) -> Result<Option<Duration>, Error> {
        self.conn
            .oam_loopback(&self.eng, scope, timeout)
            .map_err(|_| Error::TooManyProbes(crate::engine::MAX_OAM_PROBES))
    }

    /// Whether sigd ended the call (the peer released it, an administrator did, or
    /// sigd stopped), with the cause: an error from `send` or `recv` after a release
    /// is explained by it. `None` in direct mode and while the call lives.
    pub fn released(&self) -> Option<Release> {
        self.conn.released.get().map(|(cause, detail)| Release {
            cause: *cause,
            detail: detail.clone(),
        })
    }

    /// This end's UDP address.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.conn.link.local_addr().map_err(Error::Io)
    }

    /// Whether the sending VC carries a byte stream.
    pub fn is_stream(&self) -> bool {
        self.conn.is_stream()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Dropping a connection closes it in order; the engine finishes the close
        // (retransmissions, CLOSE) and then forgets it.
        self.conn.close_all(&self.eng);
        if let Some(s) = self.sig.take() {
            // The VCs close in order on the data path, and sigd frees the call (cause
            // 16) once they have: a RELEASE sent now would overtake the close, and a
            // switch on the path tears the VCs down with it.
            let call = s.call;
            s.session.forget(call);
            let session = s.session.clone();
            *self.conn.on_gone.lock() = Some(crate::engine::OnGone(Box::new(move || {
                // To whichever sigd holds the call by then (one that restarted
                // took it over: `Session::current`).
                session
                    .current()
                    .notify(|req| crate::wire::ipc::Message::Release {
                        req,
                        call,
                        cause: 16,
                    });
            })));
        }
        self.conn.mark_dropped(&self.eng);
        // If it is still finishing, the engine must outlive this handle.
        crate::engine::Engine::linger(&self.eng);
    }
}

impl io::Write for &Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Read for &Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.conn
            .read_bytes(&self.eng, buf)
            .map_err(io::Error::from)
    }
}

/// A random 32-bit value (cookies, initial sequence numbers).
pub(super) fn random_cookie() -> u32 {
    let mut b = [0u8; 4];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(_) => u32::from_be_bytes(b),
        // No entropy available: still unique per process and call.
        Err(_) => {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(std::time::Instant::now()) as u32
        }
    }
}

/// Asynchronous calls: runtime-agnostic futures (the engine's driver thread wakes the
/// task when the VC can make progress), and tokio's `AsyncRead`/`AsyncWrite` behind
/// the `tokio` feature.
impl Connection {
    /// Send one message; the future completes when the whole message is queued.
    pub async fn send_async(&self, msg: &[u8]) -> Result<(), Error> {
        let mut off = 0;
        std::future::poll_fn(|cx| self.poll_send_part(cx, msg, &mut off)).await
    }

    fn poll_send_part(
        &self,
        cx: &mut std::task::Context<'_>,
        msg: &[u8],
        off: &mut usize,
    ) -> std::task::Poll<Result<(), Error>> {
        use std::task::Poll;
        match self
            .conn
            .write_some(&self.eng, &msg[*off..], true, cx.waker())
        {
            Ok(n) => *off += n,
            Err(e) => return Poll::Ready(Err(e)),
        }
        if *off == msg.len() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// Receive the next whole message; `None` at the end of data.
    pub async fn recv_async(&self) -> Result<Option<Vec<u8>>, Error> {
        std::future::poll_fn(|cx| self.poll_recv_msg(cx)).await
    }

    /// Receive the next piece of a message without copying it
    /// ([`Connection::recv_chunk`]); `None` at the end of data.
    pub async fn recv_chunk_async(&self) -> Result<Option<Chunk>, Error> {
        std::future::poll_fn(
            |cx| match self.conn.poll_recv_chunk(&self.eng, cx.waker()) {
                Some(r) => std::task::Poll::Ready(r),
                None => std::task::Poll::Pending,
            },
        )
        .await
    }

    fn poll_recv_msg(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<Option<Vec<u8>>, Error>> {
        match self.conn.poll_recv_message(&self.eng, cx.waker()) {
            Some(r) => std::task::Poll::Ready(r),
            None => std::task::Poll::Pending,
        }
    }
}

#[cfg(feature = "tokio")]
mod tokio_io {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::Connection;

    impl tokio::io::AsyncRead for Connection {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.into_ref().get_ref();
            match this
                .conn
                .poll_read_bytes(&this.eng, buf.initialize_unfilled(), cx.waker())
            {
                Some(Ok(n)) => {
                    buf.advance(n);
                    Poll::Ready(Ok(()))
                }
                Some(Err(e)) => Poll::Ready(Err(e.into())),
                None => Poll::Pending,
            }
        }
    }

    impl tokio::io::AsyncWrite for Connection {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.into_ref().get_ref();
            match this.conn.write_some(&this.eng, buf, false, cx.waker()) {
                Ok(n) if n > 0 || buf.is_empty() => Poll::Ready(Ok(n)),
                Ok(_) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e.into())),
            }
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.into_ref().get_ref().close();
            Poll::Ready(Ok(()))
        }
    }
}

/// The sending half of a connection (seed 000's simplex VC, as ulib hands it out).
#[derive(Debug, Clone)]
pub struct Sender(Arc<Connection>);

/// The receiving half of a connection.
#[derive(Debug, Clone)]
pub struct Receiver(Arc<Connection>);

impl Connection {
    /// Split into simplex halves that can move to different threads. The connection
    /// closes when both halves are dropped.
    pub fn split(self) -> (Sender, Receiver) {
        let c = Arc::new(self);
        (Sender(c.clone()), Receiver(c))
    }
}

impl Sender {
    /// See [`Connection::set_qos`].
    pub fn set_qos(&self, qos: &str, timeout: Duration) -> Result<QosChange, Error> {
        self.0.set_qos(qos, timeout)
    }
    /// See [`Connection::try_set_qos`].
    pub fn try_set_qos(&self, qos: &str) -> Result<(), Error> {
        self.0.try_set_qos(qos)
    }
    /// See [`Connection::status`].
    pub fn status(&self) -> ConnStatus {
        self.0.status()
    }
    /// See [`Connection::send`].
    pub fn send(&self, msg: &[u8]) -> Result<(), Error> {
        self.0.send(msg)
    }
    /// See [`Connection::try_send`].
    pub fn try_send(&self, msg: &[u8]) -> Result<(), Error> {
        self.0.try_send(msg)
    }
    /// See [`Connection::send_bytes`].
    pub fn send_bytes(&self, msg: Bytes) -> Result<(), Error> {
        self.0.send_bytes(msg)
    }
    /// See [`Connection::try_send_bytes`].
    pub fn try_send_bytes(&self, msg: Bytes) -> Result<(), Error> {
        self.0.try_send_bytes(msg)
    }
    /// See [`Connection::send_many`].
    pub fn send_many<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<(), Error> {
        self.0.send_many(msgs)
    }
    /// See [`Connection::try_send_many`].
    pub fn try_send_many<M: AsRef<[u8]>>(&self, msgs: &[M]) -> Result<usize, Error> {
        self.0.try_send_many(msgs)
    }
    /// See [`Connection::send_async`].
    pub async fn send_async(&self, msg: &[u8]) -> Result<(), Error> {
        self.0.send_async(msg).await
    }
    /// See [`Connection::close`].
    pub fn close(&self) {
        self.0.close()
    }
    /// See [`Connection::flush`].
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        self.0.flush(timeout)
    }
    /// See [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.0.stats()
    }
    /// See [`Connection::released`].
    pub fn released(&self) -> Option<Release> {
        self.0.released()
    }
}

impl Receiver {
    /// See [`Connection::next_event`].
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<ConnEvent> {
        self.0.next_event(timeout)
    }
    /// See [`Connection::recv_with_status`].
    pub fn recv_with_status(
        &self,
        timeout: Duration,
    ) -> Result<(Option<Vec<u8>>, ConnStatus), Error> {
        self.0.recv_with_status(timeout)
    }
    /// See [`Connection::status`].
    pub fn status(&self) -> ConnStatus {
        self.0.status()
    }
    /// See [`Connection::recv`].
    pub fn recv(&self) -> Result<Option<Vec<u8>>, Error> {
        self.0.recv()
    }
    /// See [`Connection::recv_timeout`].
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, Error> {
        self.0.recv_timeout(timeout)
    }
    /// See [`Connection::try_recv`].
    pub fn try_recv(&self) -> Result<Option<Vec<u8>>, Error> {
        self.0.try_recv()
    }
    /// See [`Connection::recv_async`].
    pub async fn recv_async(&self) -> Result<Option<Vec<u8>>, Error> {
        self.0.recv_async().await
    }
    /// See [`Connection::recv_chunk`].
    pub fn recv_chunk(&self) -> Result<Option<Chunk>, Error> {
        self.0.recv_chunk()
    }
    /// See [`Connection::recv_chunk_timeout`].
    pub fn recv_chunk_timeout(&self, timeout: Duration) -> Result<Option<Chunk>, Error> {
        self.0.recv_chunk_timeout(timeout)
    }
    /// See [`Connection::try_recv_chunk`].
    pub fn try_recv_chunk(&self) -> Result<Option<Chunk>, Error> {
        self.0.try_recv_chunk()
    }
    /// See [`Connection::recv_chunk_async`].
    pub async fn recv_chunk_async(&self) -> Result<Option<Chunk>, Error> {
        self.0.recv_chunk_async().await
    }
    /// See [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.0.stats()
    }
    /// See [`Connection::released`].
    pub fn released(&self) -> Option<Release> {
        self.0.released()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulib::{Host, HostConfig, MemNetwork, Network};

    #[test]
    fn a_listener_answers_a_frame_of_no_connection_with_abort_through_its_endpoint() {
        use crate::wire::tpdu::{Header, TpduType};
        use crate::wire::vcframe;
        let host = Host::open(HostConfig::default()).unwrap();
        let l = host.bind("127.0.0.1:0", "reliable").unwrap();
        let to = l.local_addr().unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut d = vcframe::Repr::data(0, 77).to_bytes().to_vec();
        d.extend_from_slice(
            &Header {
                cookie: 0x5EED,
                ..Header::new(TpduType::Data)
            }
            .to_bytes(),
        );
        sock.send_to(&d, to).unwrap();
        let mut buf = [0u8; 128];
        let (n, from) = sock.recv_from(&mut buf).unwrap();
        assert_eq!(from, to);
        let (vc, tpdu) = vcframe::Repr::parse_bytes(&buf[..n]).unwrap();
        let (h, _) = Header::parse_bytes(tpdu).unwrap();
        assert_eq!((vc.vci, h.ty, h.cookie), (77, TpduType::Abort, 0x5EED));
        // Nobody was accepted for it.
        assert!(matches!(l.try_accept(), Err(Error::WouldBlock(_))));
    }

    /// Both ends of a direct-mode connection over a memory network.
    fn mem_pair(qos: &str) -> (Connection, Connection) {
        let net = MemNetwork::new();
        let mut cfg = HostConfig::default();
        cfg.engine.network = Network::Mem(net.clone());
        let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
        let l = b.bind("10.0.0.2:7000", qos).unwrap();
        let addr = l.local_addr().unwrap();
        let q = qos.to_owned();
        let t = std::thread::spawn(move || a.connect(addr, &q).unwrap());
        let server = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
        (t.join().unwrap(), server)
    }

    fn events_until(c: &Connection, last: impl Fn(&ConnEvent) -> bool) -> Vec<ConnEvent> {
        let mut got = Vec::new();
        while let Some(e) = c.next_event(Some(Duration::from_secs(10))) {
            let done = last(&e);
            got.push(e);
            if done {
                return got;
            }
        }
        panic!("no more events after {got:?}");
    }

    #[test]
    fn qos_changes_and_closes_come_as_events_on_both_ends() {
        let (client, server) = mem_pair("cbr:pcr=8Mbps,min_pcr=1Mbps");
        assert_eq!(client.try_next_event(), None);
        let ch = client
            .set_qos("cbr:pcr=4Mbps", Duration::from_secs(5))
            .unwrap();
        assert_eq!(ch.rate_bps, 4_000_000);
        assert_eq!(
            events_until(&client, |e| matches!(e, ConnEvent::QosChanged { .. })),
            [
                ConnEvent::QosPending { rate: 4_000_000 },
                ConnEvent::QosChanged { rate: 4_000_000 }
            ]
        );
        assert_eq!(
            events_until(&server, |_| true),
            [ConnEvent::PeerQosChanged { rate: 4_000_000 }]
        );
        // Beyond the bounds: refused at once, nothing sent, no event.
        assert!(matches!(
            client.set_qos("cbr:pcr=16Mbps", Duration::from_secs(5)),
            Err(Error::QosBounds(_))
        ));
        assert_eq!(client.try_next_event(), None);
        client.close();
        assert_eq!(
            events_until(&server, |e| *e == ConnEvent::PeerClosed),
            [ConnEvent::PeerClosed]
        );
        assert_eq!(
            events_until(&client, |e| *e == ConnEvent::Closed),
            [ConnEvent::Closed]
        );
        // This end's own abort is an event too (a thread waiting on events learns it).
        server.abort();
        assert_eq!(
            server.next_event(Some(Duration::from_secs(1))),
            Some(ConnEvent::Aborted(AbortReason::Local))
        );
        assert_eq!(client.events_dropped() + server.events_dropped(), 0);
    }

    #[test]
    fn an_abort_is_an_event_on_both_ends_and_a_held_send_on_the_sender() {
        let (client, server) = mem_pair("cbr:pcr=1Mbps");
        let big = vec![1u8; 64 << 10];
        let mut held = false;
        for _ in 0..1000 {
            if matches!(client.try_send(&big), Err(Error::WouldBlock(_))) {
                held = true;
                break;
            }
        }
        assert!(held, "the 1 Mbit/s VC never held a send");
        let ev = client.try_next_event().unwrap();
        assert!(
            matches!(ev, ConnEvent::OverRate | ConnEvent::WindowFull),
            "{ev:?}"
        );
        // Further held sends are the same run: no new event.
        let _ = client.try_send(&big);
        assert_eq!(client.try_next_event(), None);
        client.abort();
        assert_eq!(
            events_until(&client, |_| true),
            [ConnEvent::Aborted(AbortReason::Local)]
        );
        assert_eq!(
            events_until(&server, |e| matches!(e, ConnEvent::Aborted(_))),
            [ConnEvent::Aborted(AbortReason::Peer)]
        );
        assert_eq!(server.next_event(Some(Duration::from_millis(200))), None);
    }

    #[test]
    fn a_sender_held_by_its_bucket_waits_for_the_driver_not_in_the_socket() {
        let net = MemNetwork::new();
        let mut cfg = HostConfig::default();
        cfg.engine.network = Network::Mem(net.clone());
        let (a, b) = (Host::open(cfg.clone()).unwrap(), Host::open(cfg).unwrap());
        let l = b.bind("10.0.0.2:7000", "cbr:pcr=1Mbps").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || a.connect(addr, "cbr:pcr=1Mbps").unwrap());
        let server = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
        let client = Arc::new(t.join().unwrap());
        // Far more than the send buffer holds at 1 Mbit/s: the send blocks behind the
        // bucket for many seconds.
        let c2 = client.clone();
        let sender = std::thread::spawn(move || c2.send(&vec![7u8; 8 << 20]));
        let mut seen = None;
        for _ in 0..1000 {
            let (waiters, reading) = client.conn.waiting(crate::engine::Which::Tx);
            if waiters > 0 {
                seen = Some(reading);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // The blocked sender sleeps on the end's condition variable, which the
        // driver's timer signals, and nobody sits in the socket's receive for it.
        assert_eq!(seen, Some(false), "the sender never waited on the condvar");
        assert!(client.stats().tx.tpdus_sent > 0);
        client.abort();
        assert!(sender.join().unwrap().is_err());
        drop(server);
    }

    /// A pair of best-effort connections between two hosts on loopback UDP.
    fn udp_pair() -> (Host, Host, Connection, Connection) {
        let (a, b) = (
            Host::open(HostConfig::default()).unwrap(),
            Host::open(HostConfig::default()).unwrap(),
        );
        let l = b.bind("127.0.0.1:0", "best-effort").unwrap();
        let addr = l.local_addr().unwrap();
        let client = a.connect(addr, "best-effort").unwrap();
        let server = l.accept_timeout(Some(Duration::from_secs(5))).unwrap();
        (a, b, client, server)
    }

    /// Wait up to 5 s, without any application thread reading, for the engine's driver
    /// to have delivered `n` TPDUs to `c`'s receiving VC.
    fn driver_delivers(c: &Connection, n: u64) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < until {
            if c.stats().rx.tpdus_received >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    #[test]
    fn a_datagram_after_a_reader_gave_up_is_read_by_the_driver() {
        let (_a, _b, client, server) = udp_pair();
        // Round trips while the server's application thread waits on the socket.
        for i in 0..20u8 {
            client.send(&[i; 32]).unwrap();
            assert_eq!(
                server.recv_timeout(Duration::from_secs(5)).unwrap(),
                Some(vec![i; 32])
            );
            assert!(server.conn.driver_watches(), "watched again after the wait");
        }
        // A reader that gives up (its wait ends with nothing read) leaves the socket
        // to the driver again: a datagram after it is read without any `recv`.
        assert!(matches!(
            server.recv_timeout(Duration::from_millis(1)),
            Err(Error::TimedOut)
        ));
        assert!(server.conn.driver_watches());
        let before = server.stats().rx.tpdus_received;
        client.send(b"after the wait").unwrap();
        assert!(
            driver_delivers(&server, before + 1),
            "nobody read the socket"
        );
        assert_eq!(server.try_recv().unwrap(), Some(b"after the wait".to_vec()));
    }

    #[test]
    fn a_datagram_the_waiting_reader_left_unread_is_not_lost() {
        let (_a, _b, client, server) = udp_pair();
        let before = server.stats().rx.tpdus_received;
        // The datagram arrives while an application thread holds the read role (the
        // socket out of the driver's epoll set), and that thread lets the role go
        // without reading it: the driver must be told, though no datagram follows.
        let quiet = server.conn.hold_read_role_unread(&server.eng, || {
            client.send(b"while held").unwrap();
            // On loopback the datagram is queued once `send` returns; let the
            // driver's (absent) wake-up have every chance to happen first.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(server.stats().rx.tpdus_received, before, "read while held");
        });
        assert!(
            quiet,
            "the socket stayed in the driver's epoll set during the hold"
        );
        assert!(
            driver_delivers(&server, before + 1),
            "the datagram was lost"
        );
        assert_eq!(server.try_recv().unwrap(), Some(b"while held".to_vec()));
        // And the socket is watched as before: the next datagram needs no reader.
        client.send(b"next").unwrap();
        assert!(driver_delivers(&server, before + 2));
        assert_eq!(server.try_recv().unwrap(), Some(b"next".to_vec()));
    }
}
