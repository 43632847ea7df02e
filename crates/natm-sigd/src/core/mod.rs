//! sigd's core: every piece of state and every decision of the signalling daemon —
//! applications' requests, calls, listeners (explicit and pre-authorised), the
//! directory, admission, VCIs, the signalling links to peer sigds and `natm stat` —
//! with no sockets, no threads and no clock reads (the quinn-proto sans-IO contract of
//! `natm_proto::transport::Psb`, docs/sigd.md "Signalling daemon").
//!
//! # Call order
//! 1. Feed what happened, each with the time: [`Core::app_connected`],
//!    [`Core::handle_app`], [`Core::app_malformed`], [`Core::app_closed`] for the
//!    applications' IPC connections; [`Core::handle_peer`] for each datagram read from
//!    the signalling socket; [`Core::handle_timeout`] when [`Core::poll_timeout`]'s
//!    instant has passed (calling it early does nothing); [`Core::shutdown`] to stop.
//! 2. Drain [`Core::poll_output`] until it returns `None`, carrying out each
//!    [`Output`] in order (messages to applications, datagrams to peers, closes).
//! 3. Sleep until [`Core::poll_timeout`] or the next input.
//!
//! The daemon (`crate::daemon`) does exactly this with mio; a switch can drive the
//! same core on its network side, and tests drive two cores back to back in virtual
//! time (`tests/core_*.rs`).
//!
//! seed 000 §4 splits the signalling entity into "signaling support" and "signaling
//! protocol" components so that the protocol can be replaced "without affecting the
//! part of the signaling entity that cleans up after an application crash": the
//! protocol is `natm_proto::sig` (SSCOP and Q.2931 call control), and this core is the
//! support around it — applications, resources, the directory, the call table.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use natm_proto::sig::{CallId, SaalConfig};
use natm_proto::time::Instant;
use natm_proto::wire::addr::AtmAddr;
use natm_proto::wire::ipc::{IpcError, Message};
use natm_proto::wire::q2931::{Cause, CauseValue, Location};
use natm_proto::wire::qos::Qos;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use crate::admission::{Grant, Resources};
use crate::config::Config;
use crate::directory::Directory;
use crate::vci::VciPool;

mod admin;
mod apps;
mod calls;
pub mod fair;
mod ilmi;
mod keys;
mod link;
mod listeners;
mod modify;
mod multipoint;
mod peers;
mod qos;
mod ratelog;
mod restart;
mod stat;
mod traffic;
mod users;

pub use ratelog::{untrusted, Bucket, UNTRUSTED_CHARS};
pub use stat::{CallRow, Counters, ListenerRow, PeerRow, Stat, TrafficRow};
pub(crate) use users::cause_resources;

use link::PeerLink;

/// Most stateless answers (admission challenges, authentication ACKs) sent per
/// second: a flood of spoofed first frames reflects at most this many datagrams.
const ANSWERS_PER_S: u32 = 256;

/// UNI causes sigd uses (Q.2931 §4.5.15, table 4-10).
pub(crate) mod cause {
    pub(crate) const UNALLOCATED: u8 = 1;
    pub(crate) const NO_ROUTE: u8 = 3;
    pub(crate) const NORMAL: u8 = 16;
    pub(crate) const USER_BUSY: u8 = 17;
    pub(crate) const NO_USER_RESPONDING: u8 = 18;
    pub(crate) const CALL_REJECTED: u8 = 21;
    pub(crate) const DESTINATION_OUT_OF_ORDER: u8 = 27;
    pub(crate) const INVALID_NUMBER: u8 = 28;
    pub(crate) const NO_VCI: u8 = 45;
    pub(crate) const NOT_AUTHORIZED: u8 = 57;
    pub(crate) const TEMPORARY_FAILURE: u8 = 41;
    pub(crate) const RESOURCES: u8 = 47;
    pub(crate) const UNSUPPORTED_TRAFFIC: u8 = 73;
    pub(crate) const INVALID_CALL_REF: u8 = 81;
    pub(crate) const INVALID_ENDPOINT_REF: u8 = 89;
    pub(crate) const SERVICE_UNAVAILABLE: u8 = 63;
    pub(crate) const INCOMPATIBLE_DESTINATION: u8 = 88;
    pub(crate) const INVALID_IE: u8 = 100;
    pub(crate) const WRONG_STATE: u8 = 101;
}

fn cause_text(c: u8) -> &'static str {
    CauseValue::from_raw(c).meaning()
}

fn uni_cause(c: u8) -> Cause {
    Cause::new(Location::User, CauseValue::from_raw(c))
}

/// One application's IPC connection, named by the driver (the daemon uses its poll
/// token). Ids are never reused while the core knows the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AppId(pub u64);

impl fmt::Display for AppId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Who is on the other end of an application's socket (SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creds {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id (the process's primary group).
    pub gid: u32,
}

/// What the core asks its driver to do, in order.
// `ToApp` is most outputs and carries a typed `Qos` in several messages: boxing it
// would add an allocation to nearly every output to save bytes in a short queue.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Queue this IPC message for the application.
    ToApp(AppId, Message),
    /// Write what is queued for the application now, before the outputs that follow:
    /// it is blocked on that message (an offer, a call's `Connected`), and a loopback
    /// datagram sent first would put the kernel's delivery on the call's critical
    /// path (docs/sigd.md "Call setup fast path").
    Flush(AppId),
    /// Send this datagram (one SSCOP PDU in a UDP-adaptor signalling frame on VPI
    /// 0/VCI 5) to the peer sigd's signalling endpoint.
    ToPeer(SocketAddr, Bytes),
    /// Write what is queued for the application, then close its connection (a
    /// protocol error, or a connection over the limit); report the close with
    /// [`Core::app_closed`].
    CloseApp(AppId),
}

/// What the core needs to know about its host that only the I/O side can find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostFacts {
    /// The signalling endpoint actually bound (shown by `natm stat`).
    pub signalling: SocketAddr,
    /// Cost of one 4 KiB TPDU on the send path, ns (configured or measured).
    pub tpdu_cost_ns: u64,
    /// CPU cores guaranteed VCs may use a share of.
    pub cores: usize,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
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
    /// The application holding the call (`None`: an incoming call not yet offered).
    owner: Option<AppId>,
    state: CallState,
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
    /// When an offered call is cleared if its application has not answered.
    deadline: Option<Instant>,
    /// A pre-authorised call's `Accepted`, held until the caller's CONNECT
    /// ACKNOWLEDGE (or the call's end): the listener's work on it then does not take a
    /// CPU from the caller's side of the setup.
    announce: Option<Message>,
    /// Guaranteed bit/s charged to the caller's link while the call waits for the
    /// called application (`[peers] half_open`); 0 once answered.
    half_open: u64,
    /// The call's TPDU key exchange (`keys`).
    keys: keys::CallKeys,
    /// A point-to-multipoint call (Q.2971): this host is its root or a leaf, and its
    /// VC is one-way (`DataPath::multipoint`).
    multipoint: bool,
}

#[derive(Debug)]
struct Listening {
    id: u64,
    owner: AppId,
    sap: String,
    addr: Option<AtmAddr>,
    /// What callers get at most; a pre-authorised listener accepts calls within it
    /// without asking.
    qos: Qos,
    /// A pre-authorised listener's state (`None`: every call is offered).
    auto: Option<AutoAccept>,
}

/// A pre-authorised listener: sigd answers calls that fit `qos` itself, each on one
/// of the application's pre-opened data endpoints (see "Pre-authorised listeners" in
/// docs/sigd.md).
#[derive(Debug)]
struct AutoAccept {
    /// Pre-opened data endpoints not yet used, as the application gave them; each is
    /// one slot of the backlog.
    pool: Vec<SocketAddr>,
}

/// An application connection as the core sees it.
#[derive(Debug)]
struct App {
    creds: Option<Creds>,
    /// When it last sent a request (or connected): idle connections are closed.
    last_active: Instant,
    /// Listeners it holds.
    listeners: usize,
}

/// Ids and cookies: a ChaCha stream, seeded from the OS by the daemon and from a
/// constant by tests.
#[derive(Debug)]
struct Ids {
    rng: ChaCha20Rng,
    next: u64,
    step: u64,
}

impl Ids {
    fn new(seed: [u8; 32]) -> Ids {
        let mut rng = ChaCha20Rng::from_seed(seed);
        let next = rng.next_u64() | 1;
        let step = rng.next_u64() | 1;
        Ids { rng, next, step }
    }

    /// A call or listener id. An odd step visits every u64 before repeating: ids are
    /// never reused, and guessing another connection's id is useless (ids are checked
    /// against the owning connection anyway; docs/sigd.md "IPC").
    fn id(&mut self) -> u64 {
        let id = self.next;
        self.next = self.next.wrapping_add(self.step);
        id
    }

    /// A call's cookie: the capability the TPDU header checks (seed 001 §4.2).
    fn cookie(&mut self) -> u32 {
        self.rng.next_u32()
    }

    /// Random octets: a secret, a nonce.
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0; N];
        self.rng.fill_bytes(&mut b);
        b
    }
}

/// sigd's state and decisions; see the module documentation for the call order.
#[derive(Debug)]
pub struct Core {
    cfg: Config,
    facts: HostFacts,
    apps: HashMap<AppId, App>,
    calls: HashMap<u64, Call>,
    listeners: HashMap<u64, Listening>,
    dir: Directory,
    res: Resources,
    /// The VCIs this side receives on, per link (`None`: calls inside this host).
    vcis: HashMap<Option<SocketAddr>, VciPool>,
    ids: Ids,
    counters: Counters,
    /// Each call's latest traffic counters, as its application reported them.
    traffic: traffic::Traffic,
    /// By address, so that timers and output run in the same order every time.
    peers: BTreeMap<SocketAddr, PeerLink>,
    /// Links with input or operations since they were last serviced.
    dirty: Vec<SocketAddr>,
    /// Incoming calls whose CALL PROCEEDING goes out at the given time unless the
    /// application answered first (see `peers::proceeding_delay`).
    proceeding_due: Vec<(Instant, SocketAddr, CallId)>,
    saal_cfg: SaalConfig,
    /// The latest time an input brought: the time of work done in `poll_output`.
    now: Instant,
    /// The request being handled wants no answer (see `apps::handle_app`).
    quiet: bool,
    /// Until when peers' STATUS ENQUIRYs about unknown calls wait for applications
    /// to reclaim them (`restart`; `[restart] reclaim_window_ms` after the first
    /// input, i.e. after start).
    reclaim_until: Option<Instant>,
    out: VecDeque<Output>,
    /// This sigd's secret for admission cookies and responder nonces
    /// (`natm_proto::sig::peer`); never leaves the process.
    secret: [u8; 32],
    /// The key resume tickets are sealed with (`restart`): the host's, from the
    /// ticket key file, so that a restarted sigd opens its predecessor's tickets.
    ticket_key: [u8; 32],
    /// This sigd's Noise static key (private): the host's, from its key file
    /// (`set_identity`), that signalling links to peer sigds prove.
    noise_key: [u8; 32],
    /// Its public half, derived once: a call binds its keys to it
    /// (`peers::link_identities`), and a scalar multiplication per call cost each
    /// sigd tens of microseconds of a call's setup.
    noise_public: natm_proto::sig::noise::PublicKey,
    /// Peers' Noise public keys pinned on first use, by signalling endpoint.
    known_peers: HashMap<SocketAddr, natm_proto::sig::noise::PublicKey>,
    /// Pins made since the caller last took them (`take_new_pins`).
    new_pins: Vec<(SocketAddr, natm_proto::sig::noise::PublicKey)>,
    /// The N(SQ) of the last BGN sent on each configured link, this instance's or
    /// (loaded by the caller) its predecessor's: a new link's first BGN counts on
    /// from it (`peers::prepare_restarted`).
    last_sq: HashMap<SocketAddr, u8>,
    /// `last_sq` changed since the caller last took it (`take_sq_record`).
    sq_changed: bool,
    /// This sigd instance's id, in every resume ticket it issues (random per start:
    /// from `secret`).
    instance: u64,
    /// When this core first saw the clock: its start.
    started: Option<Instant>,
    /// Resume tickets already used, by issuing instance and call: each reclaims
    /// once. Only tickets of the first `[restart] ticket_expiry_ms` are taken, so
    /// this holds at most the calls reclaimed then.
    tickets_used: std::collections::HashSet<(u64, u64)>,
    /// Halves of calls between two applications of this host reclaimed after a
    /// restart whose other half has not been reclaimed yet, and when each is
    /// released if it still has not (`restart`).
    unpaired: HashMap<u64, Instant>,
    /// Log lines about remote events, limited per kind.
    ratelog: ratelog::RateLog,
    /// Stateless answers to unadmitted sources (challenges, authentication ACKs).
    answers: ratelog::Window,
    /// Calls whose QoS change this sigd asked the network for (`modify`).
    modifies: HashMap<u64, modify::Pending>,
    /// The point-to-multipoint calls this host is the root of, by call id.
    multipoint: HashMap<u64, multipoint::MpCall>,
    /// ILMI on the switch links of a host with no configured address.
    ilmi: ilmi::HostIlmi,
}

impl Core {
    /// A core for `cfg` on a host described by `facts`; `seed` fixes every id and
    /// cookie it hands out (give it 32 bytes from the OS outside tests: cookies are
    /// capabilities).
    pub fn new(cfg: Config, facts: HostFacts, seed: [u8; 32]) -> Core {
        let res = Resources::new(
            cfg.capacity_bps,
            facts.tpdu_cost_ns,
            cfg.cpu_share,
            facts.cores,
        );
        let dir = Directory::new(cfg.routes.clone(), cfg.addresses.clone());
        let mut ids = Ids::new(seed);
        let secret = ids.bytes();
        let ticket_key = ids.bytes();
        let instance = {
            let d = aws_lc_rs::digest::digest(
                &aws_lc_rs::digest::SHA256,
                &[b"natm sigd instance".as_slice(), &secret].concat(),
            );
            let mut b = [0u8; 8];
            b.copy_from_slice(&d.as_ref()[..8]);
            u64::from_be_bytes(b)
        };
        // Deterministic per seed (tests); the daemon sets the host's key.
        let noise_key = {
            let d = aws_lc_rs::digest::digest(
                &aws_lc_rs::digest::SHA256,
                &[b"natm sigd noise key".as_slice(), &secret].concat(),
            );
            let mut k = [0u8; 32];
            k.copy_from_slice(d.as_ref());
            k
        };
        Core {
            instance,
            noise_key,
            noise_public: natm_proto::sig::noise::public_key(&noise_key),
            known_peers: HashMap::new(),
            new_pins: Vec::new(),
            last_sq: HashMap::new(),
            sq_changed: false,
            started: None,
            tickets_used: std::collections::HashSet::new(),
            secret,
            ticket_key,
            unpaired: HashMap::new(),
            ratelog: ratelog::RateLog::new(cfg.peers.log_per_s),
            answers: ratelog::Window::new(ANSWERS_PER_S),
            modifies: HashMap::new(),
            multipoint: HashMap::new(),
            ilmi: ilmi::HostIlmi::default(),
            saal_cfg: peers::saal_config(&cfg),
            cfg,
            facts,
            apps: HashMap::new(),
            calls: HashMap::new(),
            listeners: HashMap::new(),
            dir,
            res,
            vcis: HashMap::new(),
            ids,
            counters: Counters::default(),
            traffic: traffic::Traffic::default(),
            peers: BTreeMap::new(),
            dirty: Vec::new(),
            proceeding_due: Vec::new(),
            now: Instant::ZERO,
            quiet: false,
            reclaim_until: None,
            out: VecDeque::new(),
        }
    }

    /// Seal and open resume tickets with `key` (the host's ticket key file,
    /// docs/sigd.md "sigd restart"): a restarted sigd given the same key
    /// takes over the calls its predecessor's applications reclaim. Without it the
    /// key is random, and no ticket outlives this core.
    pub fn set_ticket_key(&mut self, key: [u8; 32]) {
        self.ticket_key = key;
    }

    /// Prove `key` (the host's Noise static key, from its key file) on signalling
    /// links to peer sigds, and hold peers to the keys `known` pinned before.
    pub fn set_identity(
        &mut self,
        key: [u8; 32],
        known: HashMap<SocketAddr, natm_proto::sig::noise::PublicKey>,
    ) {
        self.noise_key = key;
        self.noise_public = natm_proto::sig::noise::public_key(&key);
        self.known_peers = known;
    }

    /// This sigd's Noise public key.
    pub fn public_key(&self) -> natm_proto::sig::noise::PublicKey {
        self.noise_public
    }

    /// Peers' keys pinned on first use since the last call: the caller stores them
    /// (the known-peers file).
    pub fn take_new_pins(&mut self) -> Vec<(SocketAddr, natm_proto::sig::noise::PublicKey)> {
        std::mem::take(&mut self.new_pins)
    }

    /// The N(SQ) of the last BGN the previous instance sent on each link (the
    /// caller's record, `take_sq_record`), before any link is made.
    pub fn set_last_sq(&mut self, last: HashMap<SocketAddr, u8>) {
        self.last_sq = last;
    }

    /// The whole record of last BGN N(SQ)s, if it changed since the last call: the
    /// caller stores it for the next instance (`set_last_sq`).
    pub fn take_sq_record(&mut self) -> Option<Vec<(SocketAddr, u8)>> {
        if !std::mem::take(&mut self.sq_changed) {
            return None;
        }
        let mut v: Vec<_> = self.last_sq.iter().map(|(a, s)| (*a, *s)).collect();
        v.sort();
        Some(v)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// This host's addresses, configured and registered.
    pub fn local_addresses(&self) -> Vec<AtmAddr> {
        self.dir.local_addresses()
    }

    /// The link rate admission control accounts, each way, bit/s.
    pub fn capacity_bps(&self) -> u64 {
        self.res.capacity_bps()
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.started.is_none() {
            self.started = Some(self.now);
        }
        if self.reclaim_until.is_none() {
            self.reclaim_until = Some(self.now + self.cfg.restart.reclaim_window);
        }
    }

    /// Timers that expired by `now`: deferred CALL PROCEEDINGs, every link's SSCOP
    /// and call-control timers, and offers left unanswered.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        let now = self.now;
        if self.proceeding_due.iter().any(|d| d.0 <= now) {
            let (due, later) = std::mem::take(&mut self.proceeding_due)
                .into_iter()
                .partition::<Vec<_>, _>(|d| d.0 <= now);
            self.proceeding_due = later;
            for (_, link, cid) in due {
                if let Some(l) = self.peers.get_mut(&link) {
                    // Refused if the call was answered or cleared meanwhile: then
                    // there is nothing to say.
                    if l.saal.proceeding(now, cid).is_ok() {
                        self.dirty.push(link);
                    }
                }
            }
        }
        if self.next_expiry().is_some_and(|d| d <= now) {
            self.expire_idle();
        }
        for (link, l) in self.peers.iter_mut() {
            if l.saal.poll_timeout().is_some_and(|d| d <= now) {
                l.saal.handle_timeout(now);
                self.dirty.push(*link);
            }
        }
        self.release_unpaired(now);
        self.party_timeouts(now);
        self.ilmi_touch(None);
        let mut due: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.deadline.is_some_and(|d| d <= now))
            .map(|c| c.id)
            .collect();
        due.sort_unstable();
        self.close_idle(now);
        for id in due {
            let reserved = self.calls.get(&id).is_some_and(|c| c.half_open > 0);
            if reserved && self.cfg.timers.reserve < self.cfg.timers.accept {
                self.counters.reserve_expiries += 1;
                let secs = self.cfg.timers.reserve.as_secs_f64();
                self.end_call(
                    id,
                    cause::NO_USER_RESPONDING,
                    &format!(
                        "the called application did not answer within {secs} s, as long as an unanswered call may hold a guaranteed reservation ([timers] reserve_ms)"
                    ),
                    true,
                );
                continue;
            }
            let secs = self.cfg.timers.accept.as_secs_f64();
            // The network side's duty in Q.2931 falls to the callee's sigd here: an
            // offer nobody answers is cleared (cause 18), docs/sigd.md
            // "Call timers".
            self.end_call(
                id,
                cause::NO_USER_RESPONDING,
                &format!("the called application did not accept or reject within {secs} s"),
                true,
            );
        }
    }

    /// The earliest instant [`Core::handle_timeout`] has work at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let calls = self.calls.values().filter_map(|c| c.deadline).min();
        let links = self
            .peers
            .values()
            .filter_map(|l| l.saal.poll_timeout())
            .min();
        let proceeding = self.proceeding_due.iter().map(|d| d.0).min();
        let unpaired = self.unpaired.values().copied().min();
        calls
            .into_iter()
            .chain(links)
            .chain(proceeding)
            .chain(unpaired)
            .chain(self.party_deadline())
            .chain(self.next_expiry())
            .chain(self.idle_deadline())
            .chain(self.ilmi_timeout())
            .min()
    }

    /// The next thing to do. Links with input are serviced here, so that several
    /// inputs fed together are answered together.
    pub fn poll_output(&mut self) -> Option<Output> {
        let mut rounds = 0;
        while self.out.is_empty() {
            let Some(link) = self.dirty.pop() else {
                // Links serviced: ILMI follows their states (and sends what it has).
                if self.ilmi_due() {
                    self.run_ilmi();
                    continue;
                }
                return None;
            };
            self.service_peer(link);
            rounds += 1;
            if rounds > 10_000 {
                tracing::warn!("signalling links keep producing work; deferring");
                self.dirty.clear();
            }
        }
        self.out.pop_front()
    }

    /// Stop: every call is released (RELEASE to peers, `Released` to applications).
    pub fn shutdown(&mut self, now: Instant) {
        self.tick(now);
        let mut ids: Vec<u64> = self.calls.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.end_call(
                id,
                cause::TEMPORARY_FAILURE,
                "the signalling daemon is stopping",
                true,
            );
        }
    }

    fn tell(&mut self, app: AppId, m: Message) {
        if self.quiet
            && matches!(
                m,
                Message::Ack { req: 0, .. } | Message::Refused { req: 0, .. }
            )
        {
            return;
        }
        if self.apps.contains_key(&app) {
            self.out.push_back(Output::ToApp(app, m));
        }
    }

    /// Send `m` to `app` and ask for it to be written before anything that follows.
    fn tell_now(&mut self, app: AppId, m: Message) {
        self.tell(app, m);
        if self.apps.contains_key(&app) {
            self.out.push_back(Output::Flush(app));
        }
    }

    /// A fresh call or listener id, never one in use (a reclaimed call keeps the id
    /// the previous sigd gave it).
    fn new_id(&mut self) -> u64 {
        loop {
            let id = self.ids.id();
            if !self.calls.contains_key(&id) && !self.listeners.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_cookie(&mut self) -> u32 {
        self.ids.cookie()
    }
}

/// A SAP: 1–8 characters of letters, digits, `-` and `_` (carried in the BHLI
/// user-specific information, 8 octets at most), or `@OUI.APPID` in hex for a
/// vendor-specific application (`Sap::parse`; what Linux's `ttcp_atm` uses).
fn valid_sap(s: &str) -> bool {
    natm_proto::sig::Sap::from_text(s).is_ok()
}

/// Split "address[:SAP]" at the last colon when what follows is a SAP.
fn split_sap(s: &str) -> (&str, &str) {
    match s.rsplit_once(':') {
        Some((a, sap)) if valid_sap(sap) => (a, sap),
        _ => (s, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sap_splits_only_at_a_valid_sap() {
        assert_eq!(split_sap("bob:echo"), ("bob", "echo"));
        assert_eq!(
            split_sap("bob:@0060d7.01000003"),
            ("bob", "@0060d7.01000003")
        );
        assert_eq!(split_sap("+4420"), ("+4420", ""));
        assert_eq!(split_sap("a:way-too-long-sap"), ("a:way-too-long-sap", ""));
    }

    #[test]
    fn ids_are_odd_stepped_and_seeded() {
        let mut a = Ids::new([7; 32]);
        let mut b = Ids::new([7; 32]);
        assert_eq!((a.id(), a.cookie()), (b.id(), b.cookie()));
        let (x, y) = (a.id(), a.id());
        assert_ne!(x, y);
        assert_eq!(y.wrapping_sub(x) & 1, 1);
    }
}
