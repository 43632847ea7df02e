//! sigd's event loop: one thread, one mio poll over the application socket, every
//! application connection, the UDP signalling socket and a signal pipe. Calls,
//! listeners, the directory, VCIs and reservations live here and nowhere else.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;
use tracing::{debug, info, warn};

use super::admission::{self, Demand, Grant, Resources, Way};
use super::app::{AppConn, ReadOutcome};
use super::config::{CallDirection, Config};
use super::directory::{Directory, Route};
use super::peer::{self, PeerLink};
use super::vci::VciPool;
use crate::sig::{CallAccept, CallEvent, CallId, CallParams, ClearedBy, Sap, SaalConfig, SigEvent};
use crate::wire::q2931::{Cause, ConnectionId, Location, NatmParams};
use crate::wire::addr::AtmAddr;
use crate::wire::ipc::{clip, Message};
use crate::wire::q2931::CauseValue;
use crate::wire::qos::{Qos, Rate, Service};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
const SIGNALLING: Token = Token(2);
const FIRST_APP: usize = 16;

/// UNI causes sigd uses.
mod cause {
    pub(super) const UNALLOCATED: u8 = 1;
    pub(super) const NO_ROUTE: u8 = 3;
    pub(super) const NORMAL: u8 = 16;
    pub(super) const NO_USER_RESPONDING: u8 = 18;
    pub(super) const CALL_REJECTED: u8 = 21;
    pub(super) const INVALID_NUMBER: u8 = 28;
    pub(super) const NO_VCI: u8 = 45;
    pub(super) const TEMPORARY_FAILURE: u8 = 41;
    pub(super) const RESOURCES: u8 = 47;
    pub(super) const UNSUPPORTED_TRAFFIC: u8 = 73;
    pub(super) const INVALID_CALL_REF: u8 = 81;
    pub(super) const INCOMPATIBLE_DESTINATION: u8 = 88;
    pub(super) const INVALID_IE: u8 = 100;
    pub(super) const WRONG_STATE: u8 = 101;
}

fn cause_text(c: u8) -> &'static str {
    CauseValue::from_raw(c).meaning()
}

/// A stop request: set by SIGTERM/SIGINT (or by a test) to end [`Daemon::run`].
#[derive(Debug, Clone, Default)]
pub struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    /// Ask the daemon to stop.
    pub fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Where a call's other end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Remote {
    /// Another call of this sigd (both applications on this host).
    Local(u64),
    /// A call of a peer sigd, over the signalling link to `link`; `call` is call
    /// control's id once the SETUP went out (or came in).
    Peer {
        link: SocketAddr,
        call: Option<CallId>,
    },
}

/// Where a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum State {
    /// Outgoing, waiting for the far end.
    Calling,
    /// Incoming, offered to a listener, waiting for Accept/Reject.
    Offered,
    /// Both ends told; the data path is the applications'.
    Active,
}

#[derive(Debug)]
struct Call {
    id: u64,
    owner: usize,
    state: State,
    remote: Remote,
    outgoing: bool,
    /// This side's address, and the other side's.
    local_addr: String,
    remote_addr: String,
    sap: String,
    /// QoS from this side's point of view (tx = this side sends).
    qos: Qos,
    /// This side's application data endpoint.
    data: Option<SocketAddr>,
    /// The other side's data endpoint, once known.
    peer_data: Option<SocketAddr>,
    listener: Option<u64>,
    cookie: u32,
    tx_vci: u16,
    rx_vci: u16,
    grant: Grant,
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Listening {
    id: u64,
    owner: usize,
    sap: String,
    addr: Option<AtmAddr>,
    qos: String,
}

/// Counters shown by `natm stat`.
#[derive(Debug, Default, Clone, Serialize)]
struct Counters {
    calls_setup: u64,
    calls_refused: u64,
    calls_released: u64,
    app_connections: u64,
    app_deaths_cleaned: u64,
    malformed_ipc: u64,
    malformed_signalling: u64,
    policy_rejections: u64,
    admission_refusals: u64,
}

/// The daemon.
#[derive(Debug)]
pub struct Daemon {
    cfg: Config,
    poll: Poll,
    listener: UnixListener,
    signalling: mio::net::UdpSocket,
    signals: Option<UnixStream>,
    apps: HashMap<usize, AppConn>,
    next_token: usize,
    calls: HashMap<u64, Call>,
    listeners: HashMap<u64, Listening>,
    dir: Directory,
    res: Resources,
    /// The VCIs this side receives on, per link (`None`: calls inside this host).
    vcis: HashMap<Option<SocketAddr>, VciPool>,
    id_next: u64,
    id_step: u64,
    counters: Counters,
    stop: Stop,
    socket_path: PathBuf,
    peers: HashMap<SocketAddr, PeerLink>,
    /// Links with input or operations since they were last serviced.
    dirty: Vec<SocketAddr>,
    saal_cfg: SaalConfig,
    epoch: Instant,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        use std::hash::{BuildHasher, RandomState};
        return RandomState::new().hash_one(Instant::now());
    }
    u64::from_be_bytes(b)
}

/// A SAP: 1–8 characters of letters, digits, `-` and `_` (carried in the BHLI
/// user-specific information, 8 octets at most).
fn valid_sap(s: &str) -> bool {
    (1..=8).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Split "address[:SAP]" at the last colon when what follows is a SAP.
fn split_sap(s: &str) -> (&str, &str) {
    match s.rsplit_once(':') {
        Some((a, sap)) if valid_sap(sap) => (a, sap),
        _ => (s, ""),
    }
}

fn reverse(q: &Qos) -> Qos {
    let (aal, tx, rx, t) = q.into_parts();
    Qos::new(aal, rx, tx, t).unwrap_or(*q)
}

/// What a QoS asks of the resource manager, one direction (`tx`: this side sends).
fn demand(q: &Qos, tx: bool, capacity: u64) -> Demand {
    if q.service() != Service::Guaranteed {
        return Demand::default();
    }
    let p = if tx { q.tx() } else { q.rx() };
    if !p.is_used() {
        return Demand::default();
    }
    let bps = |r: Option<Rate>| r.map(|r| r.bits_per_sec().unwrap_or(capacity));
    let target = bps(p.scr).or(bps(p.pcr)).or(bps(p.max_pcr)).unwrap_or(0);
    let min = bps(p.min_pcr).unwrap_or(target).min(target);
    Demand {
        target_bps: target,
        min_bps: min,
        tpdu_size: q.resolved_transport(false).tpdu_size,
    }
}

/// The QoS with each direction's target rate lowered to what was granted.
fn granted_qos(q: &Qos, out_bps: u64, in_bps: u64, capacity: u64) -> Qos {
    if q.service() != Service::Guaranteed {
        return *q;
    }
    let (aal, mut tx, mut rx, t) = q.into_parts();
    for (p, g, d) in [
        (&mut tx, out_bps, demand(q, true, capacity)),
        (&mut rx, in_bps, demand(q, false, capacity)),
    ] {
        if d.target_bps == 0 || g >= d.target_bps {
            continue;
        }
        if p.scr.is_some() {
            p.scr = Some(Rate::Bps(g));
        } else if p.pcr.is_some() {
            p.pcr = Some(Rate::Bps(g));
        } else {
            p.max_pcr = Some(Rate::Bps(g));
        }
    }
    Qos::new(aal, tx, rx, t).unwrap_or(*q)
}

fn saal_config(cfg: &Config) -> SaalConfig {
    let mut s = SaalConfig::default();
    // SSCOP's credit comes back only in STATs, which answer POLLs; sigcore polls on
    // Timer_POLL alone (not every MaxPD SDs), so with Q.2110's 750 ms and a 128-SD
    // window a burst of calls stalls after ~40 calls. A wider window and a 100 ms
    // Timer_POLL keep credit ahead of thousands of calls per second (docs/ARCHITECTURE.md).
    s.sscop.window = 4096;
    s.sscop.max_buffered = 4096;
    s.sscop.timer_poll = Duration::from_millis(100);
    s.calls.t303 = cfg.timers.t303;
    s.calls.t308 = cfg.timers.t308;
    s.calls.t310 = cfg.timers.t310;
    s.calls.t313 = cfg.timers.t313;
    s.calls.max_calls = cfg.max_calls;
    s.calls.link_cell_rate =
        u32::try_from(cfg.capacity_bps / crate::wire::qos::BITS_PER_CELL).unwrap_or(u32::MAX);
    s
}

fn uni_cause(c: u8) -> Cause {
    Cause::new(Location::User, CauseValue::from_raw(c))
}

impl Daemon {
    /// Bind the application socket and the signalling socket, and measure the TPDU
    /// cost unless the configuration gives it.
    pub fn bind(cfg: Config) -> io::Result<Daemon> {
        let poll = Poll::new()?;
        let path = cfg.socket.clone();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        if path.exists() {
            // A live sigd answers on it; a dead one left a file behind.
            if StdUnixStream::connect(&path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "another sigd is serving {}; stop it, or give this one another --socket",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(&path)?;
        }
        let mut listener = UnixListener::bind(&path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot listen on {}: {e}", path.display()))
        })?;
        let mut signalling = mio::net::UdpSocket::bind(cfg.signalling).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot bind the signalling endpoint {}: {e}", cfg.signalling),
            )
        })?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        poll.registry()
            .register(&mut signalling, SIGNALLING, Interest::READABLE)?;
        let cost = match cfg.tpdu_cost_ns {
            Some(c) => c,
            None => {
                let c = admission::measure_tpdu_cost()?;
                info!(tpdu_cost_ns = c, "measured the PSB send path per 4 KiB TPDU");
                c
            }
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let res = Resources::new(cfg.capacity_bps, cost, cfg.cpu_share, cores);
        let dir = Directory::new(cfg.routes.clone(), cfg.addresses.clone());
        Ok(Daemon {
            poll,
            listener,
            signalling,
            signals: None,
            apps: HashMap::new(),
            next_token: FIRST_APP,
            calls: HashMap::new(),
            listeners: HashMap::new(),
            dir,
            res,
            vcis: HashMap::new(),
            id_next: random_u64() | 1,
            id_step: random_u64() | 1,
            counters: Counters::default(),
            stop: Stop::default(),
            socket_path: path,
            peers: HashMap::new(),
            dirty: Vec::new(),
            saal_cfg: saal_config(&cfg),
            epoch: Instant::now(),
            cfg,
        })
    }

    /// A handle that stops [`Daemon::run`].
    pub fn stopper(&self) -> Stop {
        self.stop.clone()
    }

    /// The signalling endpoint actually bound.
    pub fn signalling_addr(&self) -> io::Result<SocketAddr> {
        self.signalling.local_addr()
    }

    /// Stop on SIGTERM and SIGINT (the signals write to a pipe the loop watches).
    pub fn handle_signals(&mut self) -> io::Result<()> {
        let (rx, tx) = StdUnixStream::pair()?;
        rx.set_nonblocking(true)?;
        for s in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::low_level::pipe::register(s, tx.try_clone()?)?;
        }
        let mut rx = UnixStream::from_std(rx);
        self.poll
            .registry()
            .register(&mut rx, SIGNALS, Interest::READABLE)?;
        self.signals = Some(rx);
        Ok(())
    }

    fn new_id(&mut self) -> u64 {
        // An odd step visits every u64 before repeating: ids are never reused, and
        // guessing another connection's id is useless (ids are checked against the
        // owning connection anyway).
        let id = self.id_next;
        self.id_next = self.id_next.wrapping_add(self.id_step);
        id
    }

    /// Serve until stopped; then release every call and remove the socket file.
    pub fn run(mut self) -> io::Result<()> {
        info!(
            socket = %self.socket_path.display(),
            signalling = %self.signalling.local_addr()?,
            addresses = ?self.dir.local_addresses().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            capacity_bps = self.res.capacity_bps(),
            "sigd serving"
        );
        let mut events = Events::with_capacity(256);
        while !self.stop.stopped() {
            let timeout = self.next_timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_apps(),
                    SIGNALS => {
                        info!("signal received: stopping");
                        self.stop.stop();
                    }
                    SIGNALLING => self.read_signalling(),
                    Token(t) => {
                        if ev.is_readable() || ev.is_read_closed() {
                            self.read_app(t);
                        }
                        if ev.is_writable() {
                            self.flush_app(t);
                        }
                    }
                }
            }
            self.run_timers(Instant::now());
            self.service_dirty();
            self.flush_all();
        }
        self.shutdown();
        Ok(())
    }

    fn shutdown(&mut self) {
        let ids: Vec<u64> = self.calls.keys().copied().collect();
        for id in ids {
            self.end_call(
                id,
                cause::TEMPORARY_FAILURE,
                "the signalling daemon is stopping",
                true,
            );
        }
        self.service_dirty();
        self.flush_all();
        let _ = std::fs::remove_file(&self.socket_path);
        info!("sigd stopped");
    }

    fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        let calls = self
            .calls
            .values()
            .filter_map(|c| c.deadline)
            .min()
            .map(|d| d.saturating_duration_since(now) + Duration::from_millis(1));
        let t = self.now().as_nanos();
        let links = self
            .peers
            .values()
            .filter_map(|l| l.saal.poll_timeout())
            .min()
            .map(|d| Duration::from_nanos(d.as_nanos().saturating_sub(t)));
        calls.into_iter().chain(links).min()
    }

    fn run_timers(&mut self, now: Instant) {
        let t = self.now();
        for (link, l) in self.peers.iter_mut() {
            if l.saal.poll_timeout().is_some_and(|d| d <= t) {
                l.saal.handle_timeout(t);
                self.dirty.push(*link);
            }
        }
        let due: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.deadline.is_some_and(|d| d <= now))
            .map(|c| c.id)
            .collect();
        for id in due {
            let secs = self.cfg.timers.accept.as_secs_f64();
            self.end_call(
                id,
                cause::NO_USER_RESPONDING,
                &format!("the called application did not accept or reject within {secs} s"),
                true,
            );
        }
    }

    // ---- application connections ----------------------------------------------------

    fn accept_apps(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if self.apps.len() >= self.cfg.max_connections {
                        warn!(
                            limit = self.cfg.max_connections,
                            "application connection refused: limit reached"
                        );
                        let mut c = AppConn::new(stream);
                        c.send(&Message::Error {
                            cause: cause::RESOURCES,
                            detail: format!(
                                "sigd serves at most {} applications at once ([limits] connections)",
                                self.cfg.max_connections
                            ),
                        });
                        c.flush();
                        continue;
                    }
                    let t = self.next_token;
                    self.next_token += 1;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(t), Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    let c = AppConn::new(stream);
                    debug!(conn = t, creds = ?c.creds, "application connected");
                    self.counters.app_connections += 1;
                    self.apps.insert(t, c);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(error = %e, "accept on the application socket failed");
                    return;
                }
            }
        }
    }

    fn read_app(&mut self, t: usize) {
        let Some(c) = self.apps.get_mut(&t) else {
            return;
        };
        if c.closing {
            return;
        }
        match c.read() {
            ReadOutcome::Messages(ms) => {
                for m in ms {
                    self.request(t, m);
                }
            }
            ReadOutcome::Garbage(ms, e) => {
                for m in ms {
                    self.request(t, m);
                }
                self.counters.malformed_ipc += 1;
                warn!(conn = t, error = %e, "malformed IPC: closing that connection");
                if let Some(c) = self.apps.get_mut(&t) {
                    c.send(&Message::Error {
                        cause: e.cause(),
                        detail: clip(&format!("{e}; closing this connection")).to_owned(),
                    });
                    c.closing = true;
                }
                self.flush_app(t);
            }
            ReadOutcome::Closed(ms) => {
                for m in ms {
                    self.request(t, m);
                }
                self.drop_app(t);
            }
        }
    }

    fn send(&mut self, t: usize, m: Message) {
        let over = match self.apps.get_mut(&t) {
            Some(c) => !c.send(&m),
            None => return,
        };
        if over {
            warn!(conn = t, "application does not read its sigd socket: dropping it");
            self.drop_app(t);
        }
    }

    fn flush_app(&mut self, t: usize) {
        let Some(c) = self.apps.get_mut(&t) else {
            return;
        };
        let had = c.want_write;
        let ok = c.flush();
        if !ok || (c.closing && c.drained()) {
            self.drop_app(t);
            return;
        }
        if c.want_write != had {
            let interest = if c.want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self
                .poll
                .registry()
                .reregister(&mut c.stream, Token(t), interest);
        }
    }

    fn flush_all(&mut self) {
        let ts: Vec<usize> = self.apps.keys().copied().collect();
        for t in ts {
            self.flush_app(t);
        }
    }

    /// The application is gone (closed, crashed, or dropped): release its calls and
    /// listeners (seed 001 §4.5: abnormal-termination cleanup).
    fn drop_app(&mut self, t: usize) {
        let Some(mut c) = self.apps.remove(&t) else {
            return;
        };
        let _ = c.flush();
        let _ = self.poll.registry().deregister(&mut c.stream);
        let calls: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.owner == t)
            .map(|c| c.id)
            .collect();
        let ls: Vec<u64> = self
            .listeners
            .values()
            .filter(|l| l.owner == t)
            .map(|l| l.id)
            .collect();
        if !calls.is_empty() || !ls.is_empty() {
            self.counters.app_deaths_cleaned += 1;
            info!(
                conn = t,
                pid = c.creds.map(|c| c.pid),
                calls = calls.len(),
                listeners = ls.len(),
                "application gone: releasing its calls"
            );
        }
        for id in calls {
            self.end_call(
                id,
                cause::TEMPORARY_FAILURE,
                "the peer application exited without closing (its sigd connection closed)",
                false,
            );
        }
        for l in ls {
            self.remove_listener(l);
        }
        self.dir.unregister_owner(t as u64);
    }

    // ---- requests --------------------------------------------------------------------

    fn refuse(&mut self, t: usize, req: u64, cause: u8, detail: String) {
        debug!(conn = t, req, cause, %detail, "request refused");
        self.send(
            t,
            Message::Refused {
                req,
                cause,
                detail: clip(&detail).to_owned(),
            },
        );
    }

    fn request(&mut self, t: usize, m: Message) {
        match m {
            Message::Connect {
                req,
                called,
                qos,
                data,
            } => self.connect(t, req, &called, &qos, data),
            Message::Bind { req, sap, qos } => self.bind_sap(t, req, &sap, &qos),
            Message::Unbind { req, listener } => match self.listeners.get(&listener) {
                Some(l) if l.owner == t => {
                    self.remove_listener(listener);
                    self.send(t, Message::Ack { req, id: listener });
                }
                _ => self.refuse(
                    t,
                    req,
                    cause::INVALID_CALL_REF,
                    "no such listener on this connection".into(),
                ),
            },
            Message::Accept { req, call, data } => self.accept_call(t, req, call, data),
            Message::Reject { req, call, cause: c } => {
                if !self.owned(t, call, Some(State::Offered)) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call waiting for an answer with that id on this connection".into(),
                    );
                }
                self.send(t, Message::Ack { req, id: call });
                self.end_call(call, c, "rejected by the called application", false);
            }
            Message::Release { req, call, cause: c } => {
                if !self.owned(t, call, None) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call with that id on this connection".into(),
                    );
                }
                self.send(t, Message::Ack { req, id: call });
                let why = if c == cause::NORMAL {
                    "closed by the peer application"
                } else {
                    "released by the peer application"
                };
                self.end_call(call, c, why, false);
            }
            Message::Register { req, address } => {
                match AtmAddr::parse_with_hosts(&address, &self.cfg.hosts) {
                    Ok(a) if !matches!(a, AtmAddr::Pvc(_)) => {
                        self.dir.register(a, t as u64);
                        info!(address = %a, conn = t, "address registered");
                        self.send(t, Message::Ack { req, id: 0 });
                    }
                    Ok(_) => self.refuse(
                        t,
                        req,
                        cause::INVALID_NUMBER,
                        format!("\"{address}\" is a PVC; register an NSAP or E.164 address"),
                    ),
                    Err(e) => self.refuse(t, req, cause::INVALID_NUMBER, e.render(&address)),
                }
            }
            Message::Stat { req } => {
                let json = self.stat_json();
                self.send(t, Message::StatReply { req, json });
            }
            other => {
                // An answer-type message sent to sigd is a protocol error.
                self.counters.malformed_ipc += 1;
                if let Some(c) = self.apps.get_mut(&t) {
                    c.send(&Message::Error {
                        cause: cause::WRONG_STATE,
                        detail: format!(
                            "message type {:#04x} goes from sigd to applications, not back; closing this connection",
                            other.type_octet()
                        ),
                    });
                    c.closing = true;
                }
            }
        }
    }

    fn owned(&self, t: usize, call: u64, state: Option<State>) -> bool {
        self.calls
            .get(&call)
            .is_some_and(|c| c.owner == t && state.is_none_or(|s| c.state == s))
    }

    fn parse_qos(&self, text: &str) -> Result<Qos, String> {
        text.parse::<Qos>().map_err(|e| e.render(text))
    }

    fn data_endpoint(&self, mut data: SocketAddr) -> SocketAddr {
        if data.ip().is_unspecified() {
            data.set_ip(self.cfg.data_ip);
        }
        data
    }

    fn connect(&mut self, t: usize, req: u64, called: &str, qos_text: &str, data: SocketAddr) {
        if self.calls.len() >= self.cfg.max_calls {
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!(
                    "sigd holds its limit of {} calls ([limits] calls)",
                    self.cfg.max_calls
                ),
            );
        }
        let (addr_text, sap) = split_sap(called);
        let addr = match AtmAddr::parse_with_hosts(addr_text, &self.cfg.hosts) {
            Ok(a) => a,
            Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(addr_text)),
        };
        let qos = match self.parse_qos(qos_text) {
            Ok(q) => q,
            Err(e) => return self.refuse(t, req, cause::UNSUPPORTED_TRAFFIC, e),
        };
        if !self.cfg.policy_allows(&addr, CallDirection::Outgoing) {
            self.counters.policy_rejections += 1;
            return self.refuse(
                t,
                req,
                cause::CALL_REJECTED,
                format!("calls to {addr} are rejected by this host's sigd policy"),
            );
        }
        let route = match self.dir.route(&addr) {
            Some(r) => r,
            None => {
                return self.refuse(
                    t,
                    req,
                    cause::NO_ROUTE,
                    format!(
                        "no directory entry covers {addr}: add a [[directory]] prefix for it to the sigd config"
                    ),
                )
            }
        };
        let local_addr = self
            .dir
            .primary()
            .map_or_else(|| "local".to_owned(), |a| a.to_string());
        match route {
            Route::Local => {
                // Find the listener first: no resources are reserved for a call that
                // nobody will take.
                let Some(listener) = self.find_listener(&addr, sap) else {
                    return self.refuse(
                        t,
                        req,
                        cause::INCOMPATIBLE_DESTINATION,
                        format!("nobody listens on SAP \"{sap}\" at {addr}"),
                    );
                };
                // A call between two applications of this host is charged once, at the
                // caller's end: it crosses the host's link neither way.
                let capacity = self.res.capacity_bps();
                let grant = match self.res.admit(
                    &demand(&qos, true, capacity),
                    &demand(&qos, false, capacity),
                ) {
                    Ok(g) => g,
                    Err(r) => {
                        self.counters.admission_refusals += 1;
                        return self.refuse(t, req, r.cause, r.detail);
                    }
                };
                let qos = granted_qos(&qos, grant.out_bps, grant.in_bps, capacity);
                let id = self.new_id();
                let peer_id = self.new_id();
                self.calls.insert(
                    id,
                    Call {
                        id,
                        owner: t,
                        state: State::Calling,
                        remote: Remote::Local(peer_id),
                        outgoing: true,
                        local_addr: local_addr.clone(),
                        remote_addr: addr.to_string(),
                        sap: sap.to_owned(),
                        qos,
                        data: Some(self.data_endpoint(data)),
                        peer_data: None,
                        listener: None,
                        cookie: random_u64() as u32,
                        tx_vci: 0,
                        rx_vci: 0,
                        grant,
                        deadline: None,
                    },
                );
                self.send(t, Message::Ack { req, id });
                info!(call = id, to = %addr, sap, "local call");
                self.calls.insert(
                    peer_id,
                    Call {
                        id: peer_id,
                        owner: 0,
                        state: State::Offered,
                        remote: Remote::Local(id),
                        outgoing: false,
                        local_addr: addr.to_string(),
                        remote_addr: local_addr,
                        sap: sap.to_owned(),
                        qos: reverse(&qos),
                        data: None,
                        peer_data: None,
                        listener: None,
                        cookie: 0,
                        tx_vci: 0,
                        rx_vci: 0,
                        grant: Grant::default(),
                        deadline: None,
                    },
                );
                self.offer(peer_id, listener);
            }
            Route::Peer(link) => self.connect_peer(t, req, link, addr, sap, qos, local_addr, data),
        }
    }

    fn now(&self) -> crate::time::Instant {
        crate::time::Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64 + 1)
    }

    /// The link to `peer`, created (and started when `start`) if there is none.
    fn link(&mut self, peer: SocketAddr, start: bool) -> Option<&mut PeerLink> {
        if !self.peers.contains_key(&peer) {
            if self.peers.len() >= peer::MAX_PEERS {
                return None;
            }
            let mut l = PeerLink::new(self.saal_cfg.clone());
            if start {
                l.saal.start(self.now());
            }
            info!(%peer, "signalling link created");
            self.peers.insert(peer, l);
        } else if start {
            let now = self.now();
            let l = self.peers.get_mut(&peer)?;
            if !l.saal.is_up() && l.saal.sscop().is_idle() {
                l.saal.start(now);
            }
        }
        self.peers.get_mut(&peer)
    }

    #[allow(clippy::too_many_arguments)]
    fn connect_peer(
        &mut self,
        t: usize,
        req: u64,
        link: SocketAddr,
        addr: AtmAddr,
        sap: &str,
        qos: Qos,
        local_addr: String,
        data: SocketAddr,
    ) {
        let Some(called) = peer::party(&addr) else {
            return self.refuse(
                t,
                req,
                cause::INVALID_NUMBER,
                format!("{addr} is a PVC; call an NSAP or E.164 address"),
            );
        };
        let capacity = self.res.capacity_bps();
        let grant = match self.res.admit(
            &demand(&qos, true, capacity),
            &demand(&qos, false, capacity),
        ) {
            Ok(g) => g,
            Err(r) => {
                self.counters.admission_refusals += 1;
                return self.refuse(t, req, r.cause, r.detail);
            }
        };
        let qos = granted_qos(&qos, grant.out_bps, grant.in_bps, capacity);
        let Some(rx_vci) = self.vcis.entry(Some(link)).or_insert_with(VciPool::new).allocate()
        else {
            self.res.release(&grant);
            return self.refuse(
                t,
                req,
                cause::NO_VCI,
                format!("every VCI on the link to {link} is in use"),
            );
        };
        let data = self.data_endpoint(data);
        let cookie = random_u64() as u32;
        let params = CallParams {
            called,
            calling: self.dir.primary().and_then(peer::party),
            sap: if sap.is_empty() {
                None
            } else {
                Sap::new(sap.as_bytes()).ok()
            },
            qos,
            natm: NatmParams {
                qos: Some(qos.to_string()),
                data_endpoint: Some(data),
                cookie: Some(cookie),
                ..NatmParams::default()
            },
            // The VCI this side receives on (the backward VC).
            conn_id: Some(ConnectionId::exclusive(0, rx_vci)),
        };
        let id = self.new_id();
        self.calls.insert(
            id,
            Call {
                id,
                owner: t,
                state: State::Calling,
                remote: Remote::Peer { link, call: None },
                outgoing: true,
                local_addr,
                remote_addr: addr.to_string(),
                sap: sap.to_owned(),
                qos,
                data: Some(data),
                peer_data: None,
                listener: None,
                cookie,
                tx_vci: 0,
                rx_vci,
                grant,
                deadline: None,
            },
        );
        let Some(l) = self.link(link, true) else {
            self.calls.remove(&id);
            self.res.release(&grant);
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!("sigd keeps links to at most {} peers", peer::MAX_PEERS),
            );
        };
        l.pending.push((id, params));
        self.send(t, Message::Ack { req, id });
        info!(call = id, to = %addr, sap, via = %link, "call to a peer");
        self.dirty.push(link);
    }

    /// Service every link that has work: send what SSCOP has, act on its events.
    fn service_dirty(&mut self) {
        let mut rounds = 0;
        while let Some(link) = self.dirty.pop() {
            self.service_peer(link);
            rounds += 1;
            if rounds > 10_000 {
                warn!("signalling links keep producing work; deferring");
                break;
            }
        }
        self.dirty.clear();
    }

    fn service_peer(&mut self, link: SocketAddr) {
        let now = self.now();
        for _ in 0..64 {
            let Some(l) = self.peers.get_mut(&link) else {
                return;
            };
            let mut started = Vec::new();
            let mut failed = Vec::new();
            if l.saal.is_up() && !l.pending.is_empty() {
                for (id, params) in std::mem::take(&mut l.pending) {
                    match l.saal.setup(now, params) {
                        Ok(cid) => {
                            l.calls.insert(cid, id);
                            started.push((id, cid));
                        }
                        Err(e) => failed.push((id, e.to_string())),
                    }
                }
            }
            let mut out = Vec::new();
            while let Some(p) = l.saal.poll_transmit() {
                out.push(peer::frame(&p));
            }
            let mut evs = Vec::new();
            while let Some(e) = l.saal.poll_event() {
                evs.push(e);
            }
            if started.is_empty() && failed.is_empty() && out.is_empty() && evs.is_empty() {
                return;
            }
            for (id, cid) in started {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.remote = Remote::Peer {
                        link,
                        call: Some(cid),
                    };
                }
            }
            for d in out {
                if let Err(e) = self.signalling.send_to(&d, link) {
                    // SSCOP retransmits what is lost here.
                    debug!(%link, error = %e, "signalling send failed");
                }
            }
            for (id, why) in failed {
                self.end_call(id, cause::TEMPORARY_FAILURE, &why, true);
            }
            for e in evs {
                self.on_sig_event(link, e);
            }
        }
        // More work than one pass: come back to it.
        self.dirty.push(link);
    }

    fn on_sig_event(&mut self, link: SocketAddr, ev: SigEvent) {
        match ev {
            SigEvent::LinkUp => info!(%link, "signalling link up"),
            SigEvent::LinkDown { reason, failure } => {
                warn!(%link, ?reason, failure, "signalling link down");
                let pending: Vec<u64> = self
                    .peers
                    .get_mut(&link)
                    .map(|l| std::mem::take(&mut l.pending).into_iter().map(|(id, _)| id).collect())
                    .unwrap_or_default();
                for id in pending {
                    self.end_call(
                        id,
                        27,
                        &format!("no signalling link to the peer sigd at {link}: is it running?"),
                        true,
                    );
                }
            }
            SigEvent::Call(CallEvent::Incoming { call, params }) => {
                self.on_incoming(link, call, params)
            }
            SigEvent::Call(CallEvent::Connected { call, params }) => {
                self.on_connected(link, call, params)
            }
            SigEvent::Call(CallEvent::Proceeding { call }) => debug!(%call, "call proceeding"),
            SigEvent::Call(CallEvent::Established { call }) => debug!(%call, "call established"),
            SigEvent::Call(CallEvent::Released { call, cause, by }) => {
                let id = self
                    .peers
                    .get_mut(&link)
                    .and_then(|l| l.calls.remove(&call));
                if let Some(id) = id {
                    let c = cause.value.raw();
                    let detail = match by {
                        ClearedBy::Remote => format!(
                            "released by the called side at {link} (cause {c}: {})",
                            cause_text(c)
                        ),
                        ClearedBy::Timer => format!(
                            "no answer from the peer sigd at {link} in time (cause {c}: {})",
                            cause_text(c)
                        ),
                        ClearedBy::Link => format!(
                            "the signalling link to {link} was lost (cause {c}: {})",
                            cause_text(c)
                        ),
                        ClearedBy::Local => format!("released (cause {c}: {})", cause_text(c)),
                    };
                    self.end_call(id, c, &detail, true);
                }
            }
        }
    }

    fn on_incoming(&mut self, link: SocketAddr, cid: CallId, params: CallParams) {
        let refuse = |this: &mut Daemon, c: u8, why: &str| {
            info!(%link, %cid, cause = c, why, "incoming call refused");
            this.counters.calls_refused += 1;
            let now = this.now();
            if let Some(l) = this.peers.get_mut(&link) {
                let _ = l.saal.reject(now, cid, uni_cause(c));
            }
            this.dirty.push(link);
        };
        let Some(called) = peer::atm(&params.called).filter(|a| self.dir.is_local(a)) else {
            return refuse(self, cause::UNALLOCATED, "the called address is not this host's");
        };
        let caller = params.calling.as_ref().and_then(peer::atm);
        if let Some(a) = &caller {
            if !self.cfg.policy_allows(a, CallDirection::Incoming) {
                self.counters.policy_rejections += 1;
                return refuse(self, cause::CALL_REJECTED, "rejected by policy");
            }
        }
        let sap = params
            .sap
            .as_ref()
            .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned())
            .unwrap_or_default();
        let Some(listener) = self.find_listener(&called, &sap) else {
            return refuse(self, cause::INCOMPATIBLE_DESTINATION, "nobody listens on that SAP");
        };
        let (Some(peer_data), Some(cookie), Some(tx_vci)) = (
            params.natm.data_endpoint,
            params.natm.cookie,
            params.conn_id.map(|c| c.vci),
        ) else {
            return refuse(
                self,
                cause::INVALID_IE,
                "the SETUP lacks natm's data endpoint, cookie or connection identifier",
            );
        };
        let qos = params
            .natm
            .qos
            .as_deref()
            .and_then(|t| t.parse::<Qos>().ok())
            .unwrap_or(params.qos);
        // This side's view: what the caller receives, this side sends.
        let view = reverse(&qos);
        let capacity = self.res.capacity_bps();
        let grant = match self.res.admit(
            &demand(&view, true, capacity),
            &demand(&view, false, capacity),
        ) {
            Ok(g) => g,
            Err(r) => {
                self.counters.admission_refusals += 1;
                return refuse(self, r.cause, &r.detail);
            }
        };
        // Each side labels the VC it receives on (downstream allocation, from 32 up
        // per link); the two simplex VCs of a connection share one data socket, so
        // this side avoids the caller's label.
        let pool = self.vcis.entry(Some(link)).or_insert_with(VciPool::new);
        let rx_vci = match pool.allocate() {
            Some(v) if v == tx_vci => {
                let other = pool.allocate();
                pool.free(v);
                other
            }
            v => v,
        };
        let Some(rx_vci) = rx_vci else {
            self.res.release(&grant);
            return refuse(self, cause::NO_VCI, "no VCI free on the link");
        };
        let view = granted_qos(&view, grant.out_bps, grant.in_bps, capacity);
        let id = self.new_id();
        self.calls.insert(
            id,
            Call {
                id,
                owner: 0,
                state: State::Offered,
                remote: Remote::Peer {
                    link,
                    call: Some(cid),
                },
                outgoing: false,
                local_addr: called.to_string(),
                remote_addr: caller.map_or_else(|| "unknown".into(), |a| a.to_string()),
                sap,
                qos: view,
                data: None,
                peer_data: Some(peer_data),
                listener: None,
                cookie,
                tx_vci,
                rx_vci,
                grant,
                deadline: None,
            },
        );
        let now = self.now();
        if let Some(l) = self.peers.get_mut(&link) {
            l.calls.insert(cid, id);
            // CALL PROCEEDING at once: the caller's T303 stops while the application
            // decides.
            let _ = l.saal.proceeding(now, cid);
        }
        self.dirty.push(link);
        info!(call = id, %link, "incoming call offered");
        self.offer(id, listener);
    }

    fn on_connected(&mut self, link: SocketAddr, cid: CallId, params: CallAccept) {
        let Some(&id) = self.peers.get(&link).and_then(|l| l.calls.get(&cid)) else {
            return;
        };
        let (Some(peer_data), Some(tx_vci)) =
            (params.natm.data_endpoint, params.conn_id.map(|c| c.vci))
        else {
            self.end_call(
                id,
                cause::INVALID_IE,
                "the peer's CONNECT lacks natm's data endpoint or connection identifier",
                true,
            );
            return;
        };
        let capacity = self.res.capacity_bps();
        let granted = params
            .natm
            .qos
            .as_deref()
            .and_then(|t| t.parse::<Qos>().ok())
            .or(params.qos);
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        if let Some(q) = granted {
            // The called side may have granted less: keep only that reserved here.
            let out = demand(&q, true, capacity).target_bps.min(c.grant.out_bps);
            let inn = demand(&q, false, capacity).target_bps.min(c.grant.in_bps);
            if out < c.grant.out_bps || inn < c.grant.in_bps {
                let tpdu = demand(&q, true, capacity).tpdu_size;
                self.res.release(&c.grant);
                let exact = |b| Demand {
                    target_bps: b,
                    min_bps: b,
                    tpdu_size: tpdu,
                };
                c.grant = self.res.admit(&exact(out), &exact(inn)).unwrap_or_default();
            }
            c.qos = q;
        }
        c.state = State::Active;
        c.peer_data = Some(peer_data);
        c.tx_vci = tx_vci;
        self.counters.calls_setup += 1;
        let m = Message::Connected {
            call: id,
            peer: peer_data,
            cookie: c.cookie,
            tx_vci,
            rx_vci: c.rx_vci,
            granted_bps: c.grant.out_bps,
            qos: c.qos.to_string(),
        };
        let (owner, rx_vci) = (c.owner, c.rx_vci);
        info!(call = id, %link, tx_vci, rx_vci, "call active");
        self.send(owner, m);
    }

    fn find_listener(&self, addr: &AtmAddr, sap: &str) -> Option<u64> {
        self.find_listener_except(addr, sap, None)
    }

    fn find_listener_except(&self, addr: &AtmAddr, sap: &str, not: Option<u64>) -> Option<u64> {
        // The oldest listener (lowest... ids are not ordered; pick by owner then id for
        // determinism) whose SAP matches and whose address, if any, is the called one.
        self.listeners
            .values()
            .filter(|l| l.sap == sap && l.addr.is_none_or(|a| a == *addr) && Some(l.id) != not)
            .min_by_key(|l| (l.owner, l.id))
            .map(|l| l.id)
    }

    /// Offer an incoming call to a listener.
    fn offer(&mut self, call: u64, listener: u64) {
        let Some(l) = self.listeners.get(&listener) else {
            return;
        };
        let owner = l.owner;
        let deadline = Instant::now() + self.cfg.timers.accept;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        c.owner = owner;
        c.listener = Some(listener);
        c.deadline = Some(deadline);
        let m = Message::Incoming {
            listener,
            call,
            caller: c.remote_addr.clone(),
            qos: c.qos.to_string(),
        };
        self.send(owner, m);
    }

    fn bind_sap(&mut self, t: usize, req: u64, sap_text: &str, qos: &str) {
        let (addr_text, sap) = match sap_text.rsplit_once(':') {
            Some((a, s)) => (a, s),
            None => ("", sap_text),
        };
        if !(sap.is_empty() || valid_sap(sap)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_IE,
                format!("SAP \"{sap}\": use 1 to 8 letters, digits, - or _"),
            );
        }
        let addr = if addr_text.is_empty() {
            None
        } else {
            match AtmAddr::parse_with_hosts(addr_text, &self.cfg.hosts) {
                Ok(a) if self.dir.is_local(&a) => Some(a),
                Ok(a) => {
                    return self.refuse(
                        t,
                        req,
                        cause::UNALLOCATED,
                        format!("{a} is not an address of this host; give one of the sigd config's addresses, or none"),
                    )
                }
                Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(addr_text)),
            }
        };
        if let Err(e) = self.parse_qos(qos) {
            return self.refuse(t, req, cause::UNSUPPORTED_TRAFFIC, e);
        }
        let id = self.new_id();
        self.listeners.insert(
            id,
            Listening {
                id,
                owner: t,
                sap: sap.to_owned(),
                addr,
                qos: qos.to_owned(),
            },
        );
        info!(listener = id, sap, conn = t, "listening");
        self.send(t, Message::Ack { req, id });
    }

    fn remove_listener(&mut self, id: u64) {
        let Some(l) = self.listeners.remove(&id) else {
            return;
        };
        // Calls offered to it go to another listener on the same SAP, or are refused.
        let waiting: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.listener == Some(id) && c.state == State::Offered)
            .map(|c| c.id)
            .collect();
        for call in waiting {
            let addr = self.calls[&call].local_addr.parse::<AtmAddr>().ok();
            let next = addr.and_then(|a| self.find_listener(&a, &l.sap)).or_else(|| {
                self.listeners
                    .values()
                    .find(|o| o.sap == l.sap && o.addr.is_none())
                    .map(|o| o.id)
            });
            match next {
                Some(n) => {
                    info!(call, listener = n, "offered call moved to another listener");
                    self.offer(call, n);
                }
                None => self.end_call(
                    call,
                    cause::TEMPORARY_FAILURE,
                    "the listening application went away before answering, and no other listens on that SAP",
                    false,
                ),
            }
        }
    }

    fn accept_call(&mut self, t: usize, req: u64, call: u64, data: SocketAddr) {
        if !self.owned(t, call, Some(State::Offered)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                "no call waiting for an answer with that id on this connection".into(),
            );
        }
        let data = self.data_endpoint(data);
        let c = &self.calls[&call];
        let other = match c.remote {
            Remote::Local(other) => other,
            Remote::Peer { link, call: cid } => return self.accept_peer(t, req, call, link, cid, data),
        };
        let qos = c.qos;
        let pool = self.vcis.entry(None).or_insert_with(VciPool::new);
        let (Some(v_fwd), Some(v_back)) = (pool.allocate(), pool.allocate()) else {
            self.refuse(
                t,
                req,
                cause::NO_VCI,
                "every VCI on this link is in use".into(),
            );
            self.end_call(call, cause::NO_VCI, "no VCI available", false);
            return;
        };
        self.send(t, Message::Ack { req, id: call });
        let (caller_owner, caller_data, cookie) = {
            let Some(o) = self.calls.get_mut(&other) else {
                return;
            };
            o.state = State::Active;
            o.tx_vci = v_fwd;
            o.rx_vci = v_back;
            (o.owner, o.data, o.cookie)
        };
        let Some(caller_data) = caller_data else {
            return;
        };
        let c = self.calls.get_mut(&call).expect("checked above");
        c.state = State::Active;
        c.deadline = None;
        c.data = Some(data);
        c.cookie = cookie;
        c.tx_vci = v_back;
        c.rx_vci = v_fwd;
        self.counters.calls_setup += 1;
        let callee_msg = Message::Connected {
            call,
            peer: caller_data,
            cookie,
            tx_vci: v_back,
            rx_vci: v_fwd,
            granted_bps: self.calls[&other].grant.in_bps,
            qos: qos.to_string(),
        };
        let o = &self.calls[&other];
        let caller_msg = Message::Connected {
            call: other,
            peer: data,
            cookie,
            tx_vci: v_fwd,
            rx_vci: v_back,
            granted_bps: o.grant.out_bps,
            qos: o.qos.to_string(),
        };
        self.send(t, callee_msg);
        self.send(caller_owner, caller_msg);
        info!(call = other, callee = call, vci_fwd = v_fwd, vci_back = v_back, "call active");
    }

    fn accept_peer(
        &mut self,
        t: usize,
        req: u64,
        call: u64,
        link: SocketAddr,
        cid: Option<CallId>,
        data: SocketAddr,
    ) {
        let now = self.now();
        let c = self.calls.get_mut(&call).expect("checked by the caller");
        let caller_view = reverse(&c.qos);
        let answer = CallAccept {
            qos: Some(caller_view),
            natm: NatmParams {
                qos: Some(caller_view.to_string()),
                data_endpoint: Some(data),
                cookie: Some(c.cookie),
                ..NatmParams::default()
            },
            // The VCI this side receives on (the forward VC).
            conn_id: Some(ConnectionId::exclusive(0, c.rx_vci)),
        };
        let r = match (cid, self.peers.get_mut(&link)) {
            (Some(cid), Some(l)) => l.saal.accept(now, cid, answer).map_err(|e| e.to_string()),
            _ => Err("the call is no longer known to the signalling link".into()),
        };
        self.dirty.push(link);
        if let Err(e) = r {
            self.refuse(t, req, cause::TEMPORARY_FAILURE, e.clone());
            self.end_call(call, cause::TEMPORARY_FAILURE, &e, false);
            return;
        }
        let c = self.calls.get_mut(&call).expect("still there");
        c.state = State::Active;
        c.deadline = None;
        c.data = Some(data);
        self.counters.calls_setup += 1;
        let Some(peer) = c.peer_data else {
            return;
        };
        let m = Message::Connected {
            call,
            peer,
            cookie: c.cookie,
            tx_vci: c.tx_vci,
            rx_vci: c.rx_vci,
            granted_bps: c.grant.out_bps,
            qos: c.qos.to_string(),
        };
        self.send(t, Message::Ack { req, id: call });
        self.send(t, m);
        info!(call, %link, "incoming call accepted");
    }

    /// End a call: free what it holds, tell its application (`tell_self`) and the
    /// other end.
    fn end_call(&mut self, id: u64, cause: u8, detail: &str, tell_self: bool) {
        let Some(c) = self.calls.remove(&id) else {
            return;
        };
        self.free_call(&c);
        if tell_self && c.owner != 0 {
            self.send(
                c.owner,
                Message::Released {
                    call: id,
                    cause,
                    detail: clip(detail).to_owned(),
                },
            );
        }
        match c.remote {
            Remote::Peer { link, call } => {
                let now = self.now();
                if let Some(l) = self.peers.get_mut(&link) {
                    match call {
                        // Call control still has it: RELEASE (or RELEASE COMPLETE for a
                        // call never answered).
                        Some(cid) if l.calls.remove(&cid).is_some() => {
                            let r = if c.state == State::Offered {
                                l.saal.reject(now, cid, uni_cause(cause))
                            } else {
                                l.saal.release(now, cid, uni_cause(cause))
                            };
                            if let Err(e) = r {
                                debug!(%cid, error = %e, "release refused by call control");
                            }
                            self.dirty.push(link);
                        }
                        Some(_) => {}
                        None => l.pending.retain(|(i, _)| *i != id),
                    }
                }
            }
            Remote::Local(other) => {
                if let Some(o) = self.calls.remove(&other) {
                    self.free_call(&o);
                    if o.owner != 0 {
                        let text = format!("{detail} (cause {cause}: {})", cause_text(cause));
                        self.send(
                            o.owner,
                            Message::Released {
                                call: other,
                                cause,
                                detail: clip(&text).to_owned(),
                            },
                        );
                    }
                }
            }
        }
        if c.state == State::Active {
            self.counters.calls_released += 1;
        } else {
            self.counters.calls_refused += 1;
        }
        debug!(call = id, cause, detail, "call ended");
    }

    fn free_call(&mut self, c: &Call) {
        self.res.release(&c.grant);
        if c.rx_vci == 0 {
            return;
        }
        match c.remote {
            // Both VCIs of a local call come from one pool; the callee frees them.
            Remote::Local(_) if !c.outgoing => {
                if let Some(p) = self.vcis.get_mut(&None) {
                    p.free(c.rx_vci);
                    p.free(c.tx_vci);
                }
            }
            Remote::Local(_) => {}
            // Each side allocates the VCI it receives on.
            Remote::Peer { link, .. } => {
                if let Some(p) = self.vcis.get_mut(&Some(link)) {
                    p.free(c.rx_vci);
                }
            }
        }
    }

    // ---- signalling ------------------------------------------------------------------

    fn read_signalling(&mut self) {
        let mut buf = [0u8; 9216];
        loop {
            match self.signalling.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let Some(pdu) = peer::unframe(&buf[..n]) else {
                        self.counters.malformed_signalling += 1;
                        debug!(%from, len = n, "not a signalling frame on VPI 0/VCI 5: dropped");
                        continue;
                    };
                    let now = self.now();
                    match self.link(from, false) {
                        Some(l) => l.saal.handle_frame(now, pdu),
                        None => {
                            self.counters.malformed_signalling += 1;
                            continue;
                        }
                    }
                    self.dirty.push(from);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    // ---- stat ------------------------------------------------------------------------

    fn stat_json(&self) -> String {
        #[derive(Serialize)]
        struct CallRow<'a> {
            id: String,
            state: State,
            direction: &'static str,
            local: &'a str,
            remote: &'a str,
            sap: &'a str,
            qos: String,
            tx_vci: u16,
            rx_vci: u16,
            reserved_out_bps: u64,
            reserved_in_bps: u64,
            pid: Option<i32>,
        }
        #[derive(Serialize)]
        struct ListenerRow<'a> {
            id: String,
            sap: &'a str,
            address: Option<String>,
            qos: &'a str,
            pid: Option<i32>,
        }
        #[derive(Serialize)]
        struct Stat<'a> {
            addresses: Vec<String>,
            signalling: String,
            capacity_bps: u64,
            free_out_bps: u64,
            free_in_bps: u64,
            tpdu_cost_ns: u64,
            cpu_budget_ns_per_s: u64,
            cpu_free_ns_per_s: u64,
            applications: usize,
            vcis_in_use: usize,
            calls: Vec<CallRow<'a>>,
            listeners: Vec<ListenerRow<'a>>,
            counters: Counters,
            peers: Vec<PeerRow>,
        }
        #[derive(Serialize)]
        struct PeerRow {
            peer: String,
            up: bool,
            calls: usize,
            malformed: u64,
        }
        let mut counters = self.counters.clone();
        counters.malformed_signalling += self.peers.values().map(|l| l.malformed()).sum::<u64>();
        let pid = |t: usize| self.apps.get(&t).and_then(|a| a.creds).map(|c| c.pid);
        let mut calls: Vec<CallRow> = self
            .calls
            .values()
            .map(|c| CallRow {
                id: format!("{:016x}", c.id),
                state: c.state,
                direction: if c.outgoing { "out" } else { "in" },
                local: &c.local_addr,
                remote: &c.remote_addr,
                sap: &c.sap,
                qos: c.qos.to_string(),
                tx_vci: c.tx_vci,
                rx_vci: c.rx_vci,
                reserved_out_bps: c.grant.out_bps,
                reserved_in_bps: c.grant.in_bps,
                pid: pid(c.owner),
            })
            .collect();
        calls.sort_by(|a, b| a.id.cmp(&b.id));
        let listeners = self
            .listeners
            .values()
            .map(|l| ListenerRow {
                id: format!("{:016x}", l.id),
                sap: &l.sap,
                address: l.addr.map(|a| a.to_string()),
                qos: &l.qos,
                pid: pid(l.owner),
            })
            .collect();
        let s = Stat {
            addresses: self
                .dir
                .local_addresses()
                .iter()
                .map(|a| a.to_string())
                .collect(),
            signalling: self
                .signalling
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
            capacity_bps: self.res.capacity_bps(),
            free_out_bps: self.res.free_bps(Way::Out),
            free_in_bps: self.res.free_bps(Way::In),
            tpdu_cost_ns: self.res.tpdu_cost_ns(),
            cpu_budget_ns_per_s: self.res.cpu_budget(),
            cpu_free_ns_per_s: self.res.free_cpu(),
            applications: self.apps.len(),
            vcis_in_use: self.vcis.values().map(|p| p.in_use()).sum(),
            calls,
            listeners,
            counters,
            peers: self
                .peers
                .iter()
                .map(|(a, l)| PeerRow {
                    peer: a.to_string(),
                    up: l.saal.is_up(),
                    calls: l.calls.len(),
                    malformed: l.malformed(),
                })
                .collect(),
        };
        serde_json::to_string(&s).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sap_splits_only_at_a_valid_sap() {
        assert_eq!(split_sap("bob:echo"), ("bob", "echo"));
        assert_eq!(split_sap("+4420"), ("+4420", ""));
        assert_eq!(split_sap("a:way-too-long-sap"), ("a:way-too-long-sap", ""));
    }

    #[test]
    fn grants_lower_the_target_and_keep_the_qos_valid() {
        let q: Qos = "cbr:pcr=80Mbps,min_pcr=10Mbps".parse().unwrap();
        let d = demand(&q, true, 100_000_000);
        assert_eq!((d.target_bps, d.min_bps), (80_000_000, 10_000_000));
        let g = granted_qos(&q, 35_000_000, 35_000_000, 100_000_000);
        assert_eq!(
            g.tx().pcr.and_then(|r| r.bits_per_sec()),
            Some(35_000_000)
        );
        let r: Qos = "reliable".parse().unwrap();
        assert_eq!(demand(&r, true, 1), Demand::default());
    }
}
