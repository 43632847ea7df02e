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

mod calls;
mod signalling;
mod stat;
use natm_proto::sig::{
    CallAccept, CallEvent, CallId, CallParams, ClearedBy, SaalConfig, Sap, SigEvent,
};
use natm_proto::wire::addr::AtmAddr;
use natm_proto::wire::ipc::{clip, DataPath, Message};
use natm_proto::wire::q2931::CauseValue;
use natm_proto::wire::q2931::{Cause, ConnectionId, Location, NatmParams};
use natm_proto::wire::qos::{Qos, Rate, Service};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
const SIGNALLING: Token = Token(2);
const FIRST_APP: usize = 16;

/// UNI causes sigd uses.
mod cause {
    pub(super) const UNALLOCATED: u8 = 1;
    pub(super) const NO_ROUTE: u8 = 3;
    pub(super) const NORMAL: u8 = 16;
    pub(super) const USER_BUSY: u8 = 17;
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
    /// A pre-authorised call's `Accepted`, held until the caller's CONNECT
    /// ACKNOWLEDGE (or the call's end): the listener's work on it then does not take a
    /// CPU from the caller's side of the setup.
    announce: Option<Message>,
}

#[derive(Debug)]
struct Listening {
    id: u64,
    owner: usize,
    sap: String,
    addr: Option<AtmAddr>,
    qos: String,
    /// A pre-authorised listener's state (`None`: every call is offered).
    auto: Option<AutoAccept>,
}

/// A pre-authorised listener: sigd answers calls that fit `qos` itself, each on one
/// of the application's pre-opened data endpoints (see "Pre-authorised listeners" in
/// docs/ARCHITECTURE.md).
#[derive(Debug)]
struct AutoAccept {
    /// The listener's QoS, parsed: the bound of what is accepted without asking.
    qos: Qos,
    /// Pre-opened data endpoints not yet used, as the application gave them; each is
    /// one slot of the backlog.
    pool: Vec<SocketAddr>,
}

/// Whether a call asking for `call` (the callee's view) fits a listener bound with
/// `bound`: the same service, and for guaranteed service neither direction's target
/// rate above the listener's.
fn qos_fits(call: &Qos, bound: &Qos, capacity: u64) -> bool {
    if call.service() != bound.service() {
        return false;
    }
    if call.service() != Service::Guaranteed {
        return true;
    }
    [true, false]
        .iter()
        .all(|&tx| demand(call, tx, capacity).target_bps <= demand(bound, tx, capacity).target_bps)
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
    /// Calls a pre-authorised listener's sigd answered itself.
    calls_pre_accepted: u64,
    /// Calls refused because a pre-authorised listener's backlog was full.
    backlog_refusals: u64,
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
    /// Incoming calls whose CALL PROCEEDING goes out at the given time unless the
    /// application answered first (see `signalling::proceeding_delay`).
    proceeding_due: Vec<(Instant, SocketAddr, CallId)>,
    saal_cfg: SaalConfig,
    epoch: Instant,
    /// The request being handled wants no answer (see `calls::request`).
    quiet: bool,
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

impl Daemon {
    /// Reserve what `q` asks of this host (both directions, this side's view): the
    /// grant and the QoS lowered to it, or the refusal (counted) to answer with.
    fn admit_qos(&mut self, q: &Qos) -> Result<(Grant, Qos), admission::Refusal> {
        let capacity = self.res.capacity_bps();
        let grant = self
            .res
            .admit(&demand(q, true, capacity), &demand(q, false, capacity))
            .inspect_err(|_| self.counters.admission_refusals += 1)?;
        let granted = granted_qos(q, grant.out_bps, grant.in_bps, capacity);
        Ok((grant, granted))
    }
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
    // A burst of calls puts several SDs per call in flight each way; a window wider
    // than Q.2110's 128 SDs keeps credit (which returns in the STAT answering a POLL,
    // sent every MaxPD SDs) from throttling thousands of calls per second.
    s.sscop.window = 4096;
    s.sscop.max_buffered = 4096;
    s.calls.t303 = cfg.timers.t303;
    s.calls.t308 = cfg.timers.t308;
    s.calls.t310 = cfg.timers.t310;
    s.calls.t313 = cfg.timers.t313;
    s.calls.max_calls = cfg.max_calls;
    s.calls.link_cell_rate =
        u32::try_from(cfg.capacity_bps / natm_proto::wire::qos::BITS_PER_CELL).unwrap_or(u32::MAX);
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
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", path.display()),
            )
        })?;
        let mut signalling = mio::net::UdpSocket::bind(cfg.signalling).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot bind the signalling endpoint {}: {e}",
                    cfg.signalling
                ),
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
                info!(
                    tpdu_cost_ns = c,
                    "measured the PSB send path per 4 KiB TPDU"
                );
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
            proceeding_due: Vec::new(),
            saal_cfg: saal_config(&cfg),
            epoch: Instant::now(),
            quiet: false,
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
        let proceeding = self
            .proceeding_due
            .iter()
            .map(|d| d.0)
            .min()
            .map(|d| d.saturating_duration_since(now));
        calls.into_iter().chain(links).chain(proceeding).min()
    }

    fn run_timers(&mut self, now: Instant) {
        let t = self.now();
        if self.proceeding_due.iter().any(|d| d.0 <= now) {
            let (due, later) = std::mem::take(&mut self.proceeding_due)
                .into_iter()
                .partition::<Vec<_>, _>(|d| d.0 <= now);
            self.proceeding_due = later;
            for (_, link, cid) in due {
                if let Some(l) = self.peers.get_mut(&link) {
                    // Refused if the call was answered or cleared meanwhile: then
                    // there is nothing to say.
                    if l.saal.proceeding(t, cid).is_ok() {
                        self.dirty.push(link);
                    }
                }
            }
        }
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
        if self.quiet
            && matches!(
                m,
                Message::Ack { req: 0, .. } | Message::Refused { req: 0, .. }
            )
        {
            return;
        }
        let over = match self.apps.get_mut(&t) {
            Some(c) => !c.send(&m),
            None => return,
        };
        if over {
            warn!(
                conn = t,
                "application does not read its sigd socket: dropping it"
            );
            self.drop_app(t);
        }
    }

    /// Send `m` to application `t` and write it out now, ahead of the signalling
    /// frames this iteration still has to send: for the message the application is
    /// blocked on (an offer, a call's `Connected`), every frame sent first would put
    /// the kernel's loopback delivery on the call's critical path.
    fn send_now(&mut self, t: usize, m: Message) {
        self.send(t, m);
        self.flush_app(t);
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
        assert_eq!(g.tx().pcr.and_then(|r| r.bits_per_sec()), Some(35_000_000));
        let r: Qos = "reliable".parse().unwrap();
        assert_eq!(demand(&r, true, 1), Demand::default());
    }
}
