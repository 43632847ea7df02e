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
use super::vci::VciPool;
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
        self.flush_all();
        let _ = std::fs::remove_file(&self.socket_path);
        info!("sigd stopped");
    }

    fn next_timeout(&self) -> Option<Duration> {
        let now = Instant::now();
        self.calls
            .values()
            .filter_map(|c| c.deadline)
            .min()
            .map(|d| d.saturating_duration_since(now) + Duration::from_millis(1))
    }

    fn run_timers(&mut self, now: Instant) {
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
            Route::Peer(peer) => self.refuse(
                t,
                req,
                cause::NO_ROUTE,
                format!("{addr} is behind the sigd at {peer}, and signalling to peers is not built yet"),
            ),
        }
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
        let Remote::Local(other) = c.remote;
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
        if c.rx_vci != 0 {
            // Local calls: both VCIs come from the same pool, freed by the callee.
            if !c.outgoing {
                if let Some(p) = self.vcis.get_mut(&None) {
                    p.free(c.rx_vci);
                    p.free(c.tx_vci);
                }
            }
        }
    }

    // ---- signalling ------------------------------------------------------------------

    fn read_signalling(&mut self) {
        let mut buf = [0u8; 9216];
        loop {
            match self.signalling.recv_from(&mut buf) {
                Ok((_n, from)) => {
                    self.counters.malformed_signalling += 1;
                    debug!(%from, "signalling datagram dropped: peer signalling not built yet");
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
        }
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
            counters: self.counters.clone(),
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
