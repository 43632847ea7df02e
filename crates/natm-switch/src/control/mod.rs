//! The switch's control plane, sans-IO (issue 13 part 4): the network side of UNI
//! signalling on every signalling port, call admission per outgoing link, routing
//! by ATM address prefix, VCI allocation per link, and the cross-connects of the
//! data plane ([`Switch`]) installed and removed as calls come and go.
//!
//! Each port's signalling runs the same `natm_proto::sig::Saal` (SSCOP and Q.2931
//! call control) that a host's sigd runs: the switch terminates the caller's call on
//! the incoming port and originates a call of its own on the outgoing port, and joins
//! the two (a "transit" call, seed 000 §4's signalling entity in a switch). Time is
//! an argument; output is pulled ([`Control::poll_output`]), as in sigd's core.
//!
//! # A call through the switch
//! 1. SETUP arrives on port A: the called address is routed (longest prefix), the
//!    traffic descriptor admitted on both outgoing links (cause 37 if it does not
//!    fit), a VCI allocated on port B for the backward VC, and CALL PROCEEDING goes
//!    back to A at once (Q.2931 §5.1.2: the network's answer).
//! 2. The SETUP goes out on B with the switch's VCI and, on a host port, the switch's
//!    own data endpoint on B in natm's private IE (the host sends its data there).
//! 3. CONNECT comes back on B with the callee's VCI: a VCI is allocated on A for the
//!    forward VC, both directions are cross-connected in the data plane, each policed
//!    against its direction of the traffic descriptor, and CONNECT goes to A with
//!    the switch's VCI and data endpoint on A.
//! 4. RELEASE on either side (or its link's loss: at once on a trunk or a standard
//!    UNI port, after [`ControlConfig::preserve`] on a host port whose sigd may be
//!    restarting) releases the other side with the
//!    same cause and removes the cross-connects' input labels at once. What is still
//!    queued towards a side leaves first ([`Switch::release`]): that side's RELEASE
//!    (and, on a host port, the end of its data endpoint) waits until the VCs towards
//!    it are empty, at most [`ControlConfig::drain`]. A slow output line thus
//!    delivers what the network accepted before the caller hung up, instead of
//!    flushing it under the RELEASE that overtakes it on the signalling VC.
//!
//! A point-to-multipoint SETUP (Q.2971) is a one-way multicast instead, whose
//! branches ADD PARTY and DROP PARTY open, ride and end (`party`).
//!
//! Labels: as natm's hosts do, each receiver labels the simplex VC it receives on
//! (the SETUP's connection identifier is the VCI the caller receives on, the
//! CONNECT's the VCI the callee receives on); the switch labels what it receives.
//! Each label is a bidirectional VC on its link, as a UNI VCC is: a simplex VC's
//! data flows one way and its acknowledgements (TPDUs on the same VCI, seed 000
//! §5.3) the other, so each call is four cross-connects, and the two ends of a link
//! draw their labels from disjoint halves (`natm_proto::sig::vci`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::Bytes;
use natm_proto::sig::call::traffic_descriptor;
use natm_proto::sig::vci::VciPool;
use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, Saal, SaalConfig, SigEvent};
use natm_proto::time::Instant;
use natm_proto::wire::addr::{from_party, Prefix};
use natm_proto::wire::q2931::{
    Blocked, Cause, CauseValue, ConnectionId, Crankback, Location, NetworkRefusal,
};
use natm_proto::wire::qos::{frame_cells, grant, Direction, Qos, BITS_PER_CELL};

use crate::routing::{Router, RoutingConfig};
use crate::{Contract, CrossConnect, PortId, Switch, VcAddr};

mod modify;
mod party;
mod routed;
mod stat;

use routed::{HopRefusal, NextHop, RouteState};

/// The most payload, bits/s, whose cells on the wire ([`Qos::wire_cells`], what the
/// SETUP signals and the switch reserves and polices) fit `cells` cells/s: what an
/// admission of `cells` free can grant a call of `qos`.
fn payload_bps(qos: &Qos, cells: u64) -> u64 {
    qos.payload_cells(cells).saturating_mul(BITS_PER_CELL)
}

/// A rate for a refusal's reason: "100 Mbit/s", "2.50 Mbit/s".
fn mbit(bps: u64) -> String {
    let m = bps as f64 / 1e6;
    if m >= 10.0 || m == m.round() {
        format!("{m:.0} Mbit/s")
    } else {
        format!("{m:.2} Mbit/s")
    }
}

/// The called address of a SETUP, as text.
fn called_text(params: &CallParams) -> String {
    from_party(&params.called).map_or_else(|| "the called party".into(), |c| c.to_string())
}

/// At most this many refusals a second come out of [`Control::poll_refused`].
pub const REFUSALS_LOGGED_PER_S: u32 = 10;

/// A call the switch refused, for its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The Q.2931 cause value.
    pub cause: u8,
    /// Where and why, as the caller is told.
    pub refusal: NetworkRefusal,
    /// Refusals not logged since the previous one (over the rate).
    pub suppressed: u64,
}

/// The cell delay variation a call's policer tolerates beyond its host's bucket: the
/// scheduling jitter of user-space hosts and switches on a loaded machine (measured:
/// a switch process descheduled for several ms reads a run of frames at once, and a
/// 2 ms tolerance policed conforming guaranteed VCs at load average 6 on 2 CPUs).
pub const DEFAULT_CDVT: Duration = Duration::from_millis(20);

/// The policer's contract for one direction of a signalled call, as the switch sets
/// it up ([`Control::contract`]): the traffic descriptor's rates as signalled (cells
/// on the wire, [`Qos::wire_cells`]), and a tolerance of the host's leaky bucket plus
/// one `tpdu_size`-byte TPDU (a bare VC's largest SDU) plus `cdvt`
/// ([`ControlConfig::cdvt`], [`DEFAULT_CDVT`]). Public so that what a host sends can
/// be checked against exactly what the switch polices.
pub fn call_contract(
    td: &natm_proto::wire::q2931::TrafficDescriptor,
    tpdu_size: u32,
    forward: bool,
    cdvt: Duration,
) -> Contract {
    // The descriptor's rates are cells on the wire already (`Qos::wire_cells`): the
    // switch polices exactly what it signals, with a tolerance for the host's bucket.
    let c = Contract::from_descriptor(td, forward);
    let tpdu_cells = frame_cells(tpdu_size);
    let tolerance = match c.pcr {
        Some(pcr) if pcr > 0 => {
            let depth = (4 * tpdu_cells).max(pcr * 2 / 1000);
            Duration::from_nanos((depth + tpdu_cells).saturating_mul(1_000_000_000) / pcr)
        }
        _ => Duration::ZERO,
    };
    c.with_cdvt(tolerance + cdvt).with_buffer(SVC_QUEUE_CELLS)
}

/// How long a released call's VCs may go on draining their queues
/// ([`ControlConfig::drain`]): a signalled VC's queue ([`SVC_QUEUE_CELLS`]) leaves a
/// 2 Mbit/s line in 0.9 s.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(1);

/// Each signalled VC's output queue, cells.
const SVC_QUEUE_CELLS: u32 = 4096;

pub use routed::{RoutingRow, MAX_CRANKBACKS};
pub use stat::{BranchRow, CallRow, LinkRow};

/// Causes the switch clears calls with (Q.2931 table 4-10).
mod cause {
    pub(super) const NO_ROUTE: u8 = 3;
    pub(super) const CALL_REJECTED: u8 = 21;
    pub(super) const INCOMPATIBLE_DESTINATION: u8 = 88;
    pub(super) const DESTINATION_OUT_OF_ORDER: u8 = 27;
    pub(super) const USER_CELL_RATE: u8 = 37;
    pub(super) const TEMPORARY_FAILURE: u8 = 41;
    pub(super) const NO_VCI: u8 = 45;
    pub(super) const INVALID_IE: u8 = 100;
}

fn net_cause(c: u8) -> Cause {
    Cause::new(Location::PrivateLocal, CauseValue::from_raw(c))
}

/// What is at the other end of a signalling port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRole {
    /// A host's sigd: each VC's data comes from and goes to the application's own
    /// data endpoint, named in natm's private IE.
    Host,
    /// Another switch: every VC's data goes to the port's peer.
    Switch,
    /// A standard UNI user that is not natm — Linux's `atmsigd` over an atmtcp link
    /// (issue 15). The switch speaks plain UNI 3.1 Q.2931 to it: no private IE, one
    /// bidirectional VCC per call whose VCI the network assigns (in the SETUP it
    /// sends, in the CALL PROCEEDING it answers the user's SETUP with), best-effort
    /// peak rates capped at the port's line; the VCC carries bare AAL5 SDUs, so the
    /// natm end of such a call must use `transport=none` (others are refused with
    /// cause 88, incompatible destination).
    Uni,
}

impl PortRole {
    /// Whether the peer is natm (reads natm's private IE, labels each direction).
    pub fn is_natm(self) -> bool {
        self != PortRole::Uni
    }
}

/// A port as the control plane sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPort {
    /// The data plane's port.
    pub port: PortId,
    /// Its name in refusals (empty: its number).
    pub name: String,
    /// Host or switch.
    pub role: PortRole,
    /// The switch's own UDP endpoint on this port: where hosts send their VCs' data.
    pub data: SocketAddr,
    /// The VCIs the switch hands out on this port: `vci::NETWORK_HALF` towards a
    /// host; on a trunk, the half the other switch does not use.
    pub vcis: RangeInclusive<u16>,
    /// The cell rate a best-effort SETUP's peak rate stands for on this port (the
    /// port's line, at most what the peer's interface takes: Linux's atmtcp
    /// interface refuses a PCR above OC-3's 353,207 cells/s with cause 88).
    pub link_cells: u32,
    /// How long this port's active calls outlive its lost signalling link (T309);
    /// `None`: [`ControlConfig::preserve`] on a host port, zero (cleared at once) on a
    /// trunk or a standard UNI port. See [`ControlConfig::preserve`].
    pub preserve: Option<Duration>,
    /// This port's SSCOP Timer_NO_RESPONSE; `None`: the one of
    /// [`ControlConfig::saal`] on trunks (400 ms),
    /// [`SaalConfig::HOST_LINK_NO_RESPONSE`] (2 s) on host ports, Q.2110's 7 s on a
    /// standard UNI port.
    pub no_response: Option<Duration>,
    /// Screen the calling number of a SETUP from this port (a host or UNI port):
    /// it must be one the routes send to this port, the reverse-path check of
    /// RFC 3704's strict mode applied to addresses, or the call is refused with
    /// cause 21. A number another port owns cannot be claimed from here; a SETUP
    /// without one passes. Ignored on a trunk (the neighbour screened its own).
    pub screen_calling: bool,
    /// The N(SQ) the port's SSCOP counts on from: the one its previous instance's
    /// last BGN carried (`natm_sigd::sscop_sq`), else a random one. A restarted
    /// switch whose first BGN repeated the last N(SQ) the peer saw would be taken
    /// for a retransmission (Q.2110 §7.2): the peer would keep its old sequence
    /// numbers and drop the new link's first PDUs. `None`: SSCOP's own start (tests).
    pub first_sq: Option<u8>,
}

/// Routes, timers and ports.
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The switch's name in the refusals it sends and logs.
    pub name: String,
    /// Address prefix → outgoing port; the longest match wins.
    pub routes: Vec<(Prefix, PortId)>,
    /// SSCOP and call control on every signalling link.
    pub saal: SaalConfig,
    /// Least cell delay variation tolerance of a call's policer (it also tolerates
    /// two of the call's TPDUs back to back, see [`Control::contract`]).
    pub cdvt: Duration,
    /// How long a released call's VCs go on sending what they hold before the rest
    /// is flushed; zero flushes at once.
    pub drain: Duration,
    /// How long a host port's active calls outlive the loss of its signalling link
    /// (Q.2931 T309; default [`DEFAULT_PRESERVE`], as a sigd's `[restart]
    /// preserve_ms`): the host's sigd may have died and be restarting, while the
    /// calls' data goes on between the applications and the switch's cross-connects
    /// (seed 004 §4). Meanwhile the far end is not released; when the link is back,
    /// each kept call is checked with STATUS ENQUIRY (Q.2931 §5.6.11) and the host's
    /// restarted sigd, once its applications have reclaimed their calls, keeps or
    /// clears each at both ends. Trunks and standard UNI ports (Linux's atmsigd,
    /// which runs T309 itself) keep T309 = 0 unless a port says otherwise.
    pub preserve: Duration,
    /// Routing between switches (issue 33: hellos, flooded topology, DTLs,
    /// crankback); `None`: static routes only, as before.
    pub routing: Option<RoutingConfig>,
}

/// How long a host port's active calls outlive its lost signalling link by default
/// ([`ControlConfig::preserve`]): 300 s, as sigd's `[restart] preserve_ms`.
pub const DEFAULT_PRESERVE: Duration = Duration::from_secs(300);

impl ControlConfig {
    /// [`SaalConfig::network`] with the switch's window and location.
    pub fn network_saal() -> SaalConfig {
        let mut s = SaalConfig::network();
        s.sscop.window = 1024;
        s.sscop.max_buffered = 4096;
        s.calls.location = Location::PrivateLocal;
        s
    }
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            name: "switch".into(),
            routes: Vec::new(),
            saal: ControlConfig::network_saal(),
            cdvt: DEFAULT_CDVT,
            drain: DEFAULT_DRAIN,
            preserve: DEFAULT_PRESERVE,
            routing: None,
        }
    }
}

/// What the control plane asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send this SSCOP PDU to the port's peer on VPI 0/VCI 5.
    Signal(PortId, Bytes),
    /// Accept data for VC (port, VPI, VCI) from `addr` (`None`: no longer).
    Source(VcAddr, Option<SocketAddr>),
    /// Send what leaves on VC (port, VPI, VCI) to `addr` (`None`: to the peer).
    Dest(VcAddr, Option<SocketAddr>),
    /// Send this routing frame to the trunk's peer on VPI 0/VCI 18 (issue 33).
    Routing(PortId, Bytes),
}

/// One side of a transit call.
#[derive(Debug, Clone, Copy)]
struct Leg {
    port: PortId,
    /// Call control's id on the port (`None`: the SETUP has not gone out yet).
    call: Option<CallId>,
    /// The VCI the switch receives on from this side.
    vci_in: Option<u16>,
    /// The VCI this side receives on (the switch sends with it).
    vci_out: Option<u16>,
    /// The host's data endpoint (host ports only).
    data: Option<SocketAddr>,
}

#[derive(Debug)]
struct Transit {
    /// Caller's side.
    a: Leg,
    /// Callee's side.
    b: Leg,
    /// Cells/s reserved on port b's output (forward) and port a's (backward).
    fwd_cells: u64,
    bwd_cells: u64,
    fwd: Contract,
    bwd: Contract,
    /// Whether the QoS uses each direction.
    fwd_used: bool,
    bwd_used: bool,
    conns: Vec<crate::ConnId>,
    active: bool,
    /// How the call was routed, if on a DTL (issue 33).
    route: Option<Box<RouteState>>,
    called: String,
    /// The QoS as granted here, the caller's view (what the SETUP went on with).
    qos: Qos,
    since: Instant,
}

/// One side of a released call whose RELEASE waits for the VCs towards it to drain.
#[derive(Debug)]
struct Drain {
    port: PortId,
    /// The side's call (`None`: it never got one).
    call: Option<CallId>,
    cause: Cause,
    /// The connections towards this side still draining.
    conns: Vec<crate::ConnId>,
    /// When the switch flushes them at the latest.
    until: Instant,
    /// The data endpoint's end (host ports), issued once drained.
    outputs: Vec<Output>,
}

#[derive(Debug)]
struct Link {
    cfg: ControlPort,
    saal: Saal,
    /// Call control's ids → transit call and whether this port is its caller's side.
    calls: HashMap<CallId, (u64, bool)>,
    /// VCIs the switch hands out on this port.
    vcis: VciPool,
    /// Cells/s reserved on this port's output.
    reserved_cells: u64,
    /// Calls refused because of this link.
    refused: u64,
}

/// The control plane of one switch.
#[derive(Debug)]
pub struct Control {
    cfg: ControlConfig,
    links: BTreeMap<PortId, Link>,
    calls: HashMap<u64, Transit>,
    next_id: u64,
    dirty: Vec<PortId>,
    out: VecDeque<Output>,
    now: Instant,
    refused: u64,
    /// Refusals for the driver's log, and the rate limit on them: the current
    /// second's start and how many it logged, and how many went unlogged since.
    refusal_log: VecDeque<Refused>,
    log_window: (Instant, u32),
    log_suppressed: u64,
    /// Released calls' sides waiting for their VCs to drain.
    drains: Vec<Drain>,
    /// Transit calls with a modification forwarded and not yet answered.
    modifies: HashMap<u64, modify::Pending>,
    /// Point-to-multipoint transit calls (`party`), by the same ids as `calls`.
    multicasts: HashMap<u64, party::Multicast>,
    /// Routing between switches, if configured.
    router: Option<Router>,
    /// Calls this switch routed again after a crankback (its own refusal on the
    /// first hop, or one that came back).
    crankbacks: u64,
    /// SETUPs refused because their calling number is not the port's
    /// ([`ControlPort::screen_calling`]).
    calls_screened: u64,
    /// A signalling link was serviced since the router last heard the switch's own
    /// state (reservations and links may have changed).
    routing_stale: bool,
    /// Addresses registered by the users of UNI ports (ILMI), whole: routes of their
    /// own, and the calling numbers those ports may use.
    registered: Vec<(Prefix, PortId)>,
}

impl Control {
    /// A control plane with no signalling ports.
    pub fn new(cfg: ControlConfig) -> Control {
        let cfg_router = cfg.routing.clone().map(Router::new);
        Control {
            cfg,
            links: BTreeMap::new(),
            calls: HashMap::new(),
            next_id: 1,
            dirty: Vec::new(),
            out: VecDeque::new(),
            now: Instant::ZERO,
            refused: 0,
            refusal_log: VecDeque::new(),
            log_window: (Instant::ZERO, 0),
            log_suppressed: 0,
            drains: Vec::new(),
            modifies: HashMap::new(),
            multicasts: HashMap::new(),
            router: cfg_router,
            crankbacks: 0,
            calls_screened: 0,
            routing_stale: true,
            registered: Vec::new(),
        }
    }

    /// Whether `port`'s user may register `address` (ILMI): no route or registration
    /// sends it to another port, so a user cannot take another port's calls.
    pub fn may_register(&self, port: PortId, address: &[u8; 20]) -> bool {
        aesa_route(address).is_some_and(|(a, _)| self.route_of(&a).is_none_or(|p| p == port))
    }

    /// `port`'s user registered `address` (ILMI): calls to it go there, and the port
    /// may call from it. Refused (`false`) as [`Control::may_register`] says.
    pub fn register_address(&mut self, port: PortId, address: &[u8; 20]) -> bool {
        let Some((_, prefix)) = aesa_route(address) else {
            return false;
        };
        if !self.may_register(port, address) {
            return false;
        }
        if !self
            .registered
            .iter()
            .any(|(p, q)| *p == prefix && *q == port)
        {
            self.registered.push((prefix, port));
            self.routing_stale = true;
        }
        true
    }

    /// `port`'s registration of `address` ended.
    pub fn deregister_address(&mut self, port: PortId, address: &[u8; 20]) {
        if let Some((_, prefix)) = aesa_route(address) {
            self.registered
                .retain(|(p, q)| !(*p == prefix && *q == port));
            self.routing_stale = true;
        }
    }

    /// The addresses registered on `port`.
    pub fn registered(&self, port: PortId) -> impl Iterator<Item = &Prefix> {
        self.registered
            .iter()
            .filter(move |(_, q)| *q == port)
            .map(|(p, _)| p)
    }

    /// Runs signalling on a port and starts bringing its link up (both ends of a link
    /// may start it; SSCOP resolves the crossing BGNs).
    pub fn add_port(&mut self, now: Instant, port: ControlPort) {
        self.tick(now);
        let mut cfg = self.cfg.saal.clone();
        if !port.role.is_natm() {
            cfg.calls.private_ie = false;
            cfg.calls.link_cell_rate = port.link_cells;
            // A standard peer (Linux's atmsigd, often a guest on an emulated CPU) gets
            // Q.2110's Timer_NO_RESPONSE (7 s), not natm's 400 ms: a guest starved
            // for half a second lost its link and every call on it (cause 27). The
            // polling cadence stays natm's, so a dead peer is still noticed in ~7 s
            // (with Q.2110's idle timer of 15 s it could take 22 s).
            cfg.sscop.timer_no_response =
                natm_proto::sig::sscop::SscopConfig::default().timer_no_response;
        }
        // seed 004 §4: a host's calls outlive its sigd; the network's T309 of 0 stays
        // on trunks and standard UNI ports unless the port says otherwise.
        cfg.calls.t309 = port.preserve.unwrap_or(match port.role {
            PortRole::Host => self.cfg.preserve,
            PortRole::Switch | PortRole::Uni => Duration::ZERO,
        });
        if port.role == PortRole::Host {
            cfg.sscop.timer_no_response = SaalConfig::HOST_LINK_NO_RESPONSE;
        }
        if let Some(t) = port.no_response {
            cfg.sscop.timer_no_response = t;
        }
        let mut saal = Saal::new(cfg);
        if let Some(sq) = port.first_sq {
            saal.seed_sq(sq);
        }
        saal.start(self.now);
        let id = port.port;
        if let (Some(r), PortRole::Switch) = (self.router.as_mut(), port.role) {
            r.add_trunk(self.now, id);
        }
        self.links.insert(
            id,
            Link {
                vcis: VciPool::range(port.vcis.clone()),
                cfg: port,
                saal,
                calls: HashMap::new(),
                reserved_cells: 0,
                refused: 0,
            },
        );
        self.dirty.push(id);
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// An SSCOP PDU that arrived on `port`'s signalling VC.
    pub fn handle_signal(&mut self, now: Instant, port: PortId, pdu: &[u8]) {
        self.tick(now);
        if let Some(l) = self.links.get_mut(&port) {
            l.saal.handle_frame(self.now, pdu);
            self.dirty.push(port);
        }
    }

    /// A frame that arrived on `port`'s routing channel (VPI 0/VCI 18, issue 33).
    pub fn handle_routing(&mut self, now: Instant, port: PortId, frame: &[u8]) {
        self.tick(now);
        if let Some(r) = self.router.as_mut() {
            r.handle_frame(self.now, port, frame);
        }
    }

    /// `port`'s transport to its peer is gone (an atmtcp link's TCP connection
    /// closed): its signalling link fails now instead of after Timer_NO_RESPONSE,
    /// and its calls are handled as on any link failure — at once on a trunk or a
    /// standard UNI port, so a peer that comes back (a rebooted Linux host) finds
    /// its old calls' VCIs free.
    pub fn port_lost(&mut self, now: Instant, port: PortId) {
        self.tick(now);
        if let Some(l) = self.links.get_mut(&port) {
            l.saal.lower_layer_failed(self.now);
            self.dirty.push(port);
        }
    }

    /// Timers due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        for (p, l) in self.links.iter_mut() {
            if l.saal.poll_timeout().is_some_and(|d| d <= self.now) {
                l.saal.handle_timeout(self.now);
                self.dirty.push(*p);
            }
        }
        if let Some(r) = self.router.as_mut() {
            if r.poll_timeout().is_some_and(|d| d <= self.now) {
                r.handle_timeout(self.now);
            }
        }
    }

    /// The earliest instant [`Control::handle_timeout`] has work at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.links
            .values()
            .filter_map(|l| l.saal.poll_timeout())
            .chain(self.router.as_ref().and_then(Router::poll_timeout))
            .min()
    }

    /// The next thing to do; links with input are serviced here, with the data plane
    /// that calls are cross-connected in.
    pub fn poll_output(&mut self, sw: &mut Switch) -> Option<Output> {
        self.finish_drains(sw);
        while self.out.is_empty() {
            if let Some(port) = self.dirty.pop() {
                self.service(sw, port);
                continue;
            }
            if !self.service_routing(sw) {
                return None;
            }
        }
        self.out.pop_front()
    }

    /// Whether `port`'s signalling link is up.
    pub fn is_up(&self, port: PortId) -> bool {
        self.links.get(&port).is_some_and(|l| l.saal.is_up())
    }

    /// Calls through the switch (point-to-point and point-to-multipoint).
    pub fn call_count(&self) -> usize {
        self.calls.len() + self.multicasts.len()
    }

    fn service(&mut self, sw: &mut Switch, port: PortId) {
        self.routing_stale = true;
        loop {
            let Some(l) = self.links.get_mut(&port) else {
                return;
            };
            let mut busy = false;
            while let Some(p) = l.saal.poll_transmit() {
                self.out.push_back(Output::Signal(port, p));
                busy = true;
            }
            let Some(ev) = l.saal.poll_event() else {
                if !busy {
                    return;
                }
                continue;
            };
            self.on_event(sw, port, ev);
        }
    }

    fn on_event(&mut self, sw: &mut Switch, port: PortId, ev: SigEvent) {
        let mp = match &ev {
            SigEvent::Call(ce) => event_call(ce).and_then(|c| self.multicast_of(port, c)),
            _ => None,
        };
        match ev {
            SigEvent::Call(ce) if mp.is_some() => {
                let (id, root) = mp.expect("matched");
                self.on_multicast_event(sw, port, id, root, ce)
            }
            SigEvent::LinkUp | SigEvent::LinkDown { .. } => {}
            SigEvent::Call(CallEvent::Incoming { call, params }) => {
                self.on_setup(sw, port, call, params)
            }
            SigEvent::Call(CallEvent::Connected { call, params }) => {
                self.on_connect(sw, port, call, params)
            }
            SigEvent::Call(CallEvent::Proceeding { .. }) => {}
            SigEvent::Call(CallEvent::ModifyRequested { call, traffic }) => {
                self.on_modify_requested(sw, port, call, traffic)
            }
            SigEvent::Call(CallEvent::Modified { call, .. }) => self.on_modified(sw, port, call),
            SigEvent::Call(CallEvent::ModifyRefused { call, cause }) => {
                self.on_modify_refused(port, call, cause)
            }
            SigEvent::Call(CallEvent::PartyAddRequested { call, party, .. }) => {
                // Q.2971 ADD PARTY on a point-to-point call (multicasts are `party`'s):
                // cause 63, service or option not available.
                let now = self.now;
                if let Some(l) = self.links.get_mut(&port) {
                    let _ = l.saal.add_party_reject(now, call, party, net_cause(63));
                }
                self.dirty.push(port);
            }
            SigEvent::Call(
                CallEvent::PartyAdded { .. }
                | CallEvent::PartyRejected { .. }
                | CallEvent::PartyDropped { .. },
            ) => {}
            SigEvent::Call(CallEvent::Established { call }) => {
                if let Some(&(id, _)) = self.links.get(&port).and_then(|l| l.calls.get(&call)) {
                    if let Some(t) = self.calls.get_mut(&id) {
                        t.active = true;
                    }
                }
            }
            SigEvent::Call(CallEvent::Released { call, cause, .. }) => {
                let Some((id, caller_side)) = self
                    .links
                    .get_mut(&port)
                    .and_then(|l| l.calls.remove(&call))
                else {
                    return;
                };
                // A callee side refused before it connected may be cranked back
                // (issue 33): routed again around what blocked it.
                let cause = if caller_side {
                    Some(cause)
                } else {
                    self.crank_back(sw, port, id, cause)
                };
                if let Some(cause) = cause {
                    self.clear(sw, id, cause);
                }
            }
        }
    }

    /// Refuses the SETUP `call` that came in on `port` with cause `c`, because of
    /// link `at` (`reason` with the figures): counted on `at`, logged (at most
    /// [`REFUSALS_LOGGED_PER_S`] a second) and, towards a natm peer, carried in the
    /// cause's diagnostics ([`NetworkRefusal`]) so that the caller can say where and
    /// why.
    fn refuse(&mut self, port: PortId, call: CallId, c: u8, at: PortId, reason: String) {
        let natm = self.role(port).is_some_and(PortRole::is_natm);
        let cause = self.refusal(c, at, reason, natm);
        let now = self.now;
        if let Some(l) = self.links.get_mut(&port) {
            let _ = l.saal.reject(now, call, cause);
        }
        self.dirty.push(port);
    }

    /// The cause of a refusal by this switch with cause value `c` because of link
    /// `at`: counted (on `at` too), logged, and with the [`NetworkRefusal`] in its
    /// diagnostics if it goes to a natm peer (`natm`).
    fn refusal(&mut self, c: u8, at: PortId, reason: String, natm: bool) -> Cause {
        self.refused += 1;
        let refusal = NetworkRefusal {
            switch: self.cfg.name.clone(),
            link: self.port_name(at),
            reason,
        };
        if let Some(l) = self.links.get_mut(&at) {
            l.refused += 1;
        }
        let mut cause = net_cause(c);
        if natm {
            cause = cause.with_refusal(&refusal);
        }
        self.log_refusal(c, refusal);
        cause
    }

    /// A port's name for refusals (its number if it has none).
    fn port_name(&self, port: PortId) -> String {
        self.links
            .get(&port)
            .map(|l| l.cfg.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("port {}", port.0))
    }

    fn log_refusal(&mut self, cause: u8, refusal: NetworkRefusal) {
        if self.now.saturating_duration_since(self.log_window.0) >= Duration::from_secs(1) {
            self.log_window = (self.now, 0);
        }
        if self.log_window.1 >= REFUSALS_LOGGED_PER_S {
            self.log_suppressed += 1;
            return;
        }
        self.log_window.1 += 1;
        self.refusal_log.push_back(Refused {
            cause,
            refusal,
            suppressed: std::mem::take(&mut self.log_suppressed),
        });
    }

    /// The next refusal to log (the driver logs each once); at most
    /// [`REFUSALS_LOGGED_PER_S`] a second come out, the rest are counted in the next
    /// one's `suppressed` (and all in [`Control::refused`]).
    pub fn poll_refused(&mut self) -> Option<Refused> {
        self.refusal_log.pop_front()
    }

    /// The outgoing port for `params`'s called address.
    fn route(&self, params: &CallParams) -> Option<PortId> {
        self.route_of(&from_party(&params.called)?)
    }

    /// The port the longest matching route (or registered address) sends `addr` to.
    fn route_of(&self, addr: &natm_proto::wire::addr::AtmAddr) -> Option<PortId> {
        self.cfg
            .routes
            .iter()
            .chain(&self.registered)
            .filter(|(p, _)| p.matches(addr))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, port)| *port)
    }

    /// SETUPs refused because their calling number is not their port's.
    pub fn calls_screened(&self) -> u64 {
        self.calls_screened
    }

    /// A SETUP's calling number checked against the port it came in on (see
    /// [`ControlPort::screen_calling`]): `Err` with why, for the refusal.
    fn screen_calling(&self, a: PortId, params: &CallParams) -> Result<(), String> {
        let Some(link) = self.links.get(&a) else {
            return Ok(());
        };
        if link.cfg.role == PortRole::Switch || !link.cfg.screen_calling {
            return Ok(());
        }
        let Some(calling) = params.calling.as_ref().and_then(from_party) else {
            return Ok(());
        };
        match self.route_of(&calling) {
            Some(p) if p == a => Ok(()),
            _ => Err(format!(
                "calling number {calling} is not this port's (no route to it here): screened"
            )),
        }
    }

    /// The policer of one direction of a call, from the traffic descriptor its SETUP
    /// signals (TM 4.0 GCRA on CLP=0+1), whose rates are cells on the wire: the QoS's
    /// payload raised by the TPDU header and AAL5 trailer and pad a host adds to each
    /// TPDU ([`Qos::wire_cells`]), so a host sending exactly its rate conforms and the
    /// switch polices exactly what it signals. Adjusted to what a conforming natm
    /// host sends:
    /// - the tolerance covers the host's leaky bucket (`flow::leaky_bucket`: a depth
    ///   of 4 TPDUs or 2 ms of the rate) plus one TPDU arriving whole (a frame's cells
    ///   reach the switch back to back), plus `cfg.cdvt` for the jitter of the hosts'
    ///   and switches' scheduling ([`DEFAULT_CDVT`]).
    ///
    /// Departure from TM 4.0, which leaves CDVT to the network operator: natm's sources
    /// are frame-granular by design. Each VC's queue holds 4,096 cells (a reliable
    /// VC's window of 32 TPDUs of 4 KiB is 2,784).
    fn contract(&self, qos: &Qos, link_cells: u64, forward: bool) -> Contract {
        let td = traffic_descriptor(qos, u32::try_from(link_cells).unwrap_or(u32::MAX));
        self.contract_of(&td, qos.resolved_transport(false).tpdu_size, forward)
    }

    /// [`Control::contract`] from a traffic descriptor (cells on the wire) and the
    /// call's TPDU size.
    fn contract_of(
        &self,
        td: &natm_proto::wire::q2931::TrafficDescriptor,
        tpdu_size: u32,
        forward: bool,
    ) -> Contract {
        call_contract(td, tpdu_size, forward, self.cfg.cdvt)
    }

    /// A free label on `port`: from the switch's half, not used by a permanent VC in
    /// the data plane, not `avoid`.
    fn allocate_vci(&mut self, sw: &Switch, port: PortId, avoid: Option<u16>) -> Option<u16> {
        let l = self.links.get_mut(&port)?;
        let mut skipped = Vec::new();
        let got = loop {
            let Some(v) = l.vcis.allocate() else {
                break None;
            };
            if Some(v) != avoid
                && sw.lookup(port, 0, v).is_none()
                && !sw.is_draining_to(VcAddr::new(port, 0, v))
            {
                break Some(v);
            }
            skipped.push(v);
            if skipped.len() > 64 {
                break None;
            }
        };
        for v in skipped {
            l.vcis.free(v);
        }
        got
    }

    fn on_setup(&mut self, sw: &mut Switch, a: PortId, call: CallId, params: CallParams) {
        if let Err(why) = self.screen_calling(a, &params) {
            self.calls_screened += 1;
            return self.refuse(a, call, cause::CALL_REJECTED, a, why);
        }
        if params.multipoint {
            return self.on_multipoint_setup(sw, a, call, params);
        }
        self.route_setup(sw, a, call, params, Vec::new(), true, None);
    }

    /// Forwards the SETUP `call` from `a` to the hop routing picks: a static route,
    /// the next entry of its DTL, or a path this switch computes (issue 33). A hop
    /// of a path this switch computed that refuses at once (link down, no room, no
    /// VCI) is excluded and the next path tried, up to [`routed::MAX_CRANKBACKS`];
    /// `first`: CALL PROCEEDING has not gone back yet; `last`: the cause of the
    /// latest crankback, for the caller if no path is left.
    #[allow(clippy::too_many_arguments)]
    fn route_setup(
        &mut self,
        sw: &mut Switch,
        a: PortId,
        call: CallId,
        params: CallParams,
        mut blocked: Vec<Blocked>,
        first: bool,
        mut last: Option<u8>,
    ) {
        loop {
            let hop = match self.next_hop(sw, a, &params, &blocked, last) {
                Ok(h) => h,
                Err(r) => return self.refuse_hop(a, call, r),
            };
            let Err(r) = self.forward(sw, a, call, &params, &hop, &blocked, first) else {
                return;
            };
            // What blocked: the link out (its line, labels or signalling), or on a
            // transit the link in, whose backward direction this switch reserves.
            let blocking = if r.at == hop.b {
                hop.link
            } else if r.at == a {
                hop.back_link
            } else {
                None
            };
            match blocking {
                Some(link)
                    if hop.originated
                        && blocked.len() < routed::MAX_CRANKBACKS
                        && routed::crankable(r.cause) =>
                {
                    self.crankbacks += 1;
                    blocked.push(link);
                    last = Some(r.cause);
                }
                Some(link) if !hop.originated && routed::crankable(r.cause) => {
                    let cb = Crankback::new(link, r.cause);
                    return self.refuse_hop(a, call, r.with_crankback(cb));
                }
                _ => return self.refuse_hop(a, call, r),
            }
        }
    }

    /// Forwards the SETUP on `hop`: admission on both directions' outgoing links,
    /// a VCI, the SETUP out and CALL PROCEEDING back (if `first`); a refusal is
    /// returned for the caller to send (or to crank back from).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        sw: &mut Switch,
        a: PortId,
        call: CallId,
        params: &CallParams,
        hop: &NextHop,
        blocked: &[Blocked],
        first: bool,
    ) -> Result<(), HopRefusal> {
        let called = called_text(params);
        let b = hop.b;
        if b == a {
            return Err(HopRefusal::new(
                cause::NO_ROUTE,
                a,
                format!("no route to {called}"),
            ));
        }
        let Some(out) = self.links.get(&b) else {
            let why = format!("no route to {called}: its port runs no signalling");
            return Err(HopRefusal::new(cause::NO_ROUTE, b, why));
        };
        if !out.saal.is_up() {
            let why = format!("the signalling link towards {called} is down");
            return Err(HopRefusal::new(cause::DESTINATION_OUT_OF_ORDER, b, why));
        }
        let (Some(role_a), role_b) = (self.role(a), out.cfg.role) else {
            return Ok(());
        };
        let a_data = params.natm.data_endpoint;
        // A natm caller names the label it receives on; a standard UNI user leaves
        // the connection identifier to the network (UNI 3.1 §5.1.2).
        let a_named = params.conn_id.map(|c| c.vci);
        if (role_a.is_natm() && a_named.is_none()) || (role_a == PortRole::Host && a_data.is_none())
        {
            let why = "the SETUP lacks natm's connection identifier or data endpoint".into();
            return Err(HopRefusal::new(cause::INVALID_IE, a, why));
        }
        let qos = params.offered_qos();
        // A standard user's VCC carries bare AAL5 SDUs: natm's transport cannot run
        // end to end across it.
        if (!role_a.is_natm() || !role_b.is_natm()) && !qos.is_bare() {
            let (at, why) = if role_b.is_natm() {
                (
                    a,
                    "the caller is a standard UNI user, whose VCC carries bare AAL5",
                )
            } else {
                (
                    b,
                    "the callee is a standard UNI user: ask for transport=none",
                )
            };
            return Err(HopRefusal::new(
                cause::INCOMPATIBLE_DESTINATION,
                at,
                why.into(),
            ));
        }
        let cells = |p: PortId| sw.port_config(p).map_or(0, |c| c.cells_per_sec());
        let free = |this: &Control, p: PortId| {
            cells(p).saturating_sub(this.links.get(&p).map_or(0, |l| l.reserved_cells))
        };
        // Each direction gets the most between its minimum and its target that its
        // outgoing port has free (the rule sigd applies, `wire::qos::grant`); the
        // SETUP goes on with the grant, so later hops and the callee see it.
        let mut granted_bps = [0; 2];
        for (i, dir, out, line) in [(0, Direction::Tx, b, a), (1, Direction::Rx, a, b)] {
            let w = qos.want(dir, payload_bps(&qos, cells(line)));
            let free_bps = payload_bps(&qos, free(self, out));
            match grant(w.target_bps, w.min_bps, free_bps) {
                Some(g) => granted_bps[i] = g,
                None => {
                    let why = format!(
                        "{} {} asked (at least {}), {} free of {}",
                        ["forward", "backward"][i],
                        mbit(w.target_bps),
                        mbit(w.min_bps),
                        mbit(free_bps),
                        mbit(payload_bps(&qos, cells(out))),
                    );
                    return Err(HopRefusal::new(cause::USER_CELL_RATE, out, why));
                }
            }
        }
        // A grant at or above a direction's target leaves it as asked (`u64::MAX`: the
        // other direction, lowered on its own line's terms).
        let qos = qos
            .with_grant(granted_bps[0], u64::MAX, payload_bps(&qos, cells(a)))
            .with_grant(u64::MAX, granted_bps[1], payload_bps(&qos, cells(b)));
        let fwd = self.contract(&qos, cells(a), true);
        let bwd = self.contract(&qos, cells(b), false);
        for (name, need, out) in [("forward", fwd.reserved, b), ("backward", bwd.reserved, a)] {
            let has = free(self, out);
            if need > has {
                let why = format!("{name} {need} cells/s needed, {has} free");
                return Err(HopRefusal::new(cause::USER_CELL_RATE, out, why));
            }
        }
        // The label of the standard user's VCC, both directions.
        let a_vcc = if role_a.is_natm() {
            None
        } else {
            match self.allocate_vci(sw, a, None) {
                Some(v) => Some(v),
                None => {
                    return Err(HopRefusal::new(cause::NO_VCI, a, "no free VCI".into()));
                }
            }
        };
        let Some(b_in) = self.allocate_vci(sw, b, None) else {
            if let (Some(v), Some(l)) = (a_vcc, self.links.get_mut(&a)) {
                l.vcis.free(v);
            }
            return Err(HopRefusal::new(cause::NO_VCI, b, "no free VCI".into()));
        };
        let mut setup = params.clone();
        setup.dtl = hop.dtl.clone();
        setup.conn_id = Some(ConnectionId::exclusive(0, b_in));
        setup.qos = qos;
        setup.natm.qos = None;
        let b_link = self.links.get_mut(&b).expect("routed to a signalling port");
        setup.natm.data_endpoint = Some(b_link.cfg.data);
        let now = self.now;
        let b_call = match b_link.saal.setup(now, setup) {
            Ok(c) => c,
            Err(_) => {
                b_link.vcis.free(b_in);
                if let (Some(v), Some(l)) = (a_vcc, self.links.get_mut(&a)) {
                    l.vcis.free(v);
                }
                let why = "the SETUP could not go out (call control refused it)".into();
                return Err(HopRefusal::new(cause::TEMPORARY_FAILURE, b, why));
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        b_link.calls.insert(b_call, (id, false));
        b_link.reserved_cells += fwd.reserved;
        self.dirty.push(b);
        let a_link = self.links.get_mut(&a).expect("the SETUP came in on it");
        a_link.calls.insert(call, (id, true));
        a_link.reserved_cells += bwd.reserved;
        // The network answers a SETUP it forwards with CALL PROCEEDING (§5.1.2), with
        // the VCC's label if it chose one.
        if first {
            let _ = a_link.saal.proceeding_with(
                now,
                call,
                a_vcc.map(|v| ConnectionId::exclusive(0, v)),
            );
        }
        self.dirty.push(a);
        let route = hop.link.map(|link| {
            Box::new(RouteState {
                params: hop.originated.then(|| params.clone()),
                blocked: blocked.to_vec(),
                link,
            })
        });
        self.calls.insert(
            id,
            Transit {
                a: Leg {
                    port: a,
                    call: Some(call),
                    vci_in: a_vcc,
                    vci_out: a_named.or(a_vcc),
                    data: a_data,
                },
                b: Leg {
                    port: b,
                    call: Some(b_call),
                    vci_in: Some(b_in),
                    vci_out: None,
                    data: None,
                },
                fwd_cells: fwd.reserved,
                bwd_cells: bwd.reserved,
                fwd,
                bwd,
                fwd_used: qos.tx().is_used(),
                bwd_used: qos.rx().is_used(),
                conns: Vec::new(),
                active: false,
                route,
                called: from_party(&params.called).map_or_else(String::new, |c| c.to_string()),
                qos,
                since: now,
            },
        );
        Ok(())
    }

    fn on_connect(&mut self, sw: &mut Switch, b: PortId, call: CallId, params: CallAccept) {
        let Some(&(id, false)) = self.links.get(&b).and_then(|l| l.calls.get(&call)) else {
            return;
        };
        let Some(t) = self.calls.get(&id) else { return };
        let (a, a_out, a_vcc, b_in) = (t.a.port, t.a.vci_out, t.a.vci_in, t.b.vci_in);
        let (Some(role_a), Some(role_b)) = (self.role(a), self.role(b)) else {
            return;
        };
        let b_data = params.natm.data_endpoint;
        // A standard user's VCC is the label the switch gave it in the SETUP.
        let b_out = if role_b.is_natm() {
            params.conn_id.map(|c| c.vci)
        } else {
            b_in
        };
        let Some(b_out) = b_out.filter(|_| role_b != PortRole::Host || b_data.is_some()) else {
            return self.clear(sw, id, net_cause(cause::INVALID_IE));
        };
        let a_in = match a_vcc {
            Some(v) => v,
            None => match self.allocate_vci(sw, a, a_out) {
                Some(v) => v,
                None => return self.clear(sw, id, net_cause(cause::NO_VCI)),
            },
        };
        let granted = self.settle(sw, id, params.qos);
        let t = self.calls.get_mut(&id).expect("looked up above");
        t.a.vci_in = Some(a_in);
        t.b.vci_out = Some(b_out);
        t.b.data = b_data;
        let (a_leg, b_leg) = (t.a, t.b);
        let (Some(a_out), Some(b_in)) = (a_leg.vci_out, b_leg.vci_in) else {
            return self.clear(sw, id, net_cause(cause::INVALID_IE));
        };
        let (fa, fb) = (VcAddr::new(a, 0, a_in), VcAddr::new(b, 0, b_out));
        let (ba, bb) = (VcAddr::new(a, 0, a_out), VcAddr::new(b, 0, b_in));
        // Data each way under its direction's contract; between natm ends each VC's
        // acknowledgements back on its own labels, best effort. A standard user's
        // VCC is one label both ways and its bare SDUs are never acknowledged.
        let mut plan = Vec::new();
        let natm_ends = role_a.is_natm() && role_b.is_natm();
        // A bare call's unused direction (`svc_send` receives nothing) carries nothing.
        // Between natm ends an unused direction keeps its labels (its VC's control
        // TPDUs may cross) under a best-effort contract: its own one asks for nothing
        // (a PCR of 0), which the data plane refuses.
        let used = |used: bool, c: Contract| if used { c } else { Contract::best_effort() };
        if natm_ends || t.fwd_used {
            plan.push((CrossConnect::vc(fa, fb), used(t.fwd_used, t.fwd)));
        }
        if natm_ends || t.bwd_used {
            plan.push((CrossConnect::vc(bb, ba), used(t.bwd_used, t.bwd)));
        }
        if natm_ends {
            plan.push((CrossConnect::vc(fb, fa), Contract::best_effort()));
            plan.push((CrossConnect::vc(ba, bb), Contract::best_effort()));
        }
        let mut conns = Vec::new();
        for (xc, c) in plan {
            match sw.connect(xc, c) {
                Ok(cid) => conns.push(cid),
                Err(_) => {
                    for cid in conns {
                        let _ = sw.disconnect(cid);
                    }
                    return self.clear(sw, id, net_cause(cause::TEMPORARY_FAILURE));
                }
            }
        }
        t.conns = conns;
        for (leg, labels) in [(a_leg, [a_in, a_out]), (b_leg, [b_in, b_out])] {
            if leg.data.is_some() && self.role(leg.port) == Some(PortRole::Host) {
                for v in labels {
                    let vc = VcAddr::new(leg.port, 0, v);
                    self.out.push_back(Output::Source(vc, leg.data));
                    self.out.push_back(Output::Dest(vc, leg.data));
                }
            }
        }
        let mut accept = params;
        // The caller learns what the call got through the network, not only what the
        // callee said (a standard user says nothing).
        accept.qos = granted;
        // A standard user learnt its label from CALL PROCEEDING; a natm caller learns
        // the one it sends on here.
        accept.conn_id = role_a.is_natm().then(|| ConnectionId::exclusive(0, a_in));
        let a_link = self.links.get_mut(&a).expect("the call came in on it");
        accept.natm.data_endpoint = Some(a_link.cfg.data);
        let now = self.now;
        let a_call = a_leg.call.expect("an incoming call has its id");
        if a_link.saal.accept(now, a_call, accept).is_err() {
            return self.clear(sw, id, net_cause(cause::TEMPORARY_FAILURE));
        }
        self.dirty.push(a);
    }

    /// The QoS transit call `id` ends up with when its callee answers with
    /// `answer`: the answer if it is within what the switch granted each way (the
    /// reservations then shrink to it, as the caller's sigd's do), else the grant.
    fn settle(&mut self, sw: &Switch, id: u64, answer: Option<Qos>) -> Option<Qos> {
        let t = self.calls.get(&id)?;
        let Some(answer) = answer else {
            return Some(t.qos);
        };
        let cells = |p: PortId| sw.port_config(p).map_or(0, |c| c.cells_per_sec());
        let (a, b) = (t.a.port, t.b.port);
        // Another service than the one granted is no answer to it (a guaranteed call
        // answered as best effort would give its reservation away).
        let within = answer.service() == t.qos.service()
            && [(Direction::Tx, a), (Direction::Rx, b)]
                .iter()
                .all(|&(d, p)| {
                    let cap = payload_bps(&t.qos, cells(p));
                    answer.want(d, cap).target_bps <= t.qos.want(d, cap).target_bps
                });
        let fwd = self.contract(&answer, cells(a), true);
        let bwd = self.contract(&answer, cells(b), false);
        if !within || fwd.reserved > t.fwd_cells || bwd.reserved > t.bwd_cells {
            return Some(t.qos);
        }
        let (fwd_used, bwd_used) = (t.fwd_used, t.bwd_used);
        let t = self.calls.get_mut(&id)?;
        for (port, old, new) in [
            (b, t.fwd_cells, fwd.reserved),
            (a, t.bwd_cells, bwd.reserved),
        ] {
            if let Some(l) = self.links.get_mut(&port) {
                l.reserved_cells = l.reserved_cells.saturating_sub(old - new);
            }
        }
        t.fwd_cells = fwd.reserved;
        t.bwd_cells = bwd.reserved;
        if fwd_used {
            t.fwd = fwd;
        }
        if bwd_used {
            t.bwd = bwd;
        }
        t.qos = answer;
        Some(answer)
    }

    fn role(&self, port: PortId) -> Option<PortRole> {
        self.links.get(&port).map(|l| l.cfg.role)
    }

    /// Ends transit call `id`: both legs released (or refused) with `cause`, the
    /// cross-connects released (draining, see the module doc; flushed at once unless
    /// `drain`), VCIs and reservations returned.
    fn clear(&mut self, sw: &mut Switch, id: u64, cause: Cause) {
        self.end_call(sw, id, cause, true);
    }

    fn end_call(&mut self, sw: &mut Switch, id: u64, cause: Cause, drain: bool) {
        let Some(t) = self.calls.remove(&id) else {
            return;
        };
        // A pending modification ends with the call; what it held is in the
        // transit's reservation, returned below.
        self.modifies.remove(&id);
        let now = self.now;
        let within = if drain {
            self.cfg.drain
        } else {
            Duration::ZERO
        };
        for cid in &t.conns {
            let _ = sw.release(now, *cid, within);
        }
        for (leg, reserved) in [(t.a, t.bwd_cells), (t.b, t.fwd_cells)] {
            let Some(l) = self.links.get_mut(&leg.port) else {
                continue;
            };
            l.reserved_cells = l.reserved_cells.saturating_sub(reserved);
            if let Some(v) = leg.vci_in {
                l.vcis.free(v);
            }
            let call = leg.call.filter(|c| l.calls.remove(c).is_some());
            let mut outputs = Vec::new();
            if leg.data.is_some() && l.cfg.role == PortRole::Host {
                for v in [leg.vci_in, leg.vci_out].into_iter().flatten() {
                    let vc = VcAddr::new(leg.port, 0, v);
                    outputs.push(Output::Source(vc, None));
                    outputs.push(Output::Dest(vc, None));
                }
            }
            let draining: Vec<crate::ConnId> = t
                .conns
                .iter()
                .copied()
                .filter(|c| {
                    sw.vc_stats(*c)
                        .is_some_and(|v| v.xc.to().port() == leg.port)
                })
                .collect();
            let side = Drain {
                port: leg.port,
                call,
                cause: cause.clone(),
                conns: draining,
                until: now + within,
                outputs,
            };
            self.drain_side(side);
        }
    }

    /// Ends one side of an ended call once the VCs towards it have drained: at
    /// once if none is left to drain.
    fn drain_side(&mut self, side: Drain) {
        if side.conns.is_empty() {
            self.end_side(side);
        } else {
            self.drains.push(side);
        }
    }

    /// Releases (or refuses) one side of an ended call and ends its data endpoint.
    fn end_side(&mut self, side: Drain) {
        let now = self.now;
        if let (Some(call), Some(l)) = (side.call, self.links.get_mut(&side.port)) {
            // A standard peer gets only Q.2931's diagnostics, not natm's refusal.
            let mut cause = if l.cfg.role.is_natm() {
                side.cause
            } else {
                side.cause.plain()
            };
            // Crankback is for the switch that built the DTL, not for hosts.
            if l.cfg.role != PortRole::Switch {
                cause.crankback = None;
            }
            // Refused if still being set up, released if connected; an error means
            // call control already ended it.
            if l.saal.reject(now, call, cause.clone()).is_err() {
                let _ = l.saal.release(now, call, cause);
            }
        }
        self.dirty.push(side.port);
        self.out.extend(side.outputs);
    }

    /// Ends the sides whose VCs have drained (or whose time is up).
    fn finish_drains(&mut self, sw: &Switch) {
        if self.drains.is_empty() {
            return;
        }
        let now = self.now;
        let (done, wait): (Vec<Drain>, Vec<Drain>) = std::mem::take(&mut self.drains)
            .into_iter()
            .partition(|d| d.until <= now || d.conns.iter().all(|c| sw.vc_stats(*c).is_none()));
        self.drains = wait;
        for d in done {
            self.end_side(d);
        }
    }

    /// Sides of released calls whose RELEASE waits for their VCs to drain.
    pub fn draining(&self) -> usize {
        self.drains.len()
    }

    /// Releases every call (RELEASE cause 41 both ways) and the links: the switch is
    /// stopping.
    pub fn shutdown(&mut self, now: Instant, sw: &mut Switch) {
        self.tick(now);
        let mut ids: Vec<u64> = self.calls.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.end_call(sw, id, net_cause(cause::TEMPORARY_FAILURE), false);
        }
        let mut ids: Vec<u64> = self.multicasts.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.end_multicast_within(sw, id, net_cause(cause::TEMPORARY_FAILURE), false);
        }
        for d in std::mem::take(&mut self.drains) {
            self.end_side(d);
        }
        let ports: Vec<PortId> = self.links.keys().copied().collect();
        for p in ports {
            self.service(sw, p);
            if let Some(l) = self.links.get_mut(&p) {
                l.saal.stop(now);
            }
            self.dirty.push(p);
        }
    }
}

/// The call an event of call control is about (`None`: a new call's SETUP).
fn event_call(ev: &CallEvent) -> Option<CallId> {
    match ev {
        CallEvent::Incoming { .. } => None,
        CallEvent::Proceeding { call }
        | CallEvent::Connected { call, .. }
        | CallEvent::Established { call }
        | CallEvent::ModifyRequested { call, .. }
        | CallEvent::Modified { call, .. }
        | CallEvent::ModifyRefused { call, .. }
        | CallEvent::PartyAddRequested { call, .. }
        | CallEvent::PartyAdded { call, .. }
        | CallEvent::PartyRejected { call, .. }
        | CallEvent::PartyDropped { call, .. }
        | CallEvent::Released { call, .. } => Some(*call),
    }
}

#[cfg(test)]
mod grant_tests;
#[cfg(test)]
mod mesh_tests;
#[cfg(test)]
mod party_tests;
#[cfg(test)]
mod ring_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod uni_tests;

/// An ILMI-registered AESA as an address and the route that matches it alone.
fn aesa_route(address: &[u8; 20]) -> Option<(natm_proto::wire::addr::AtmAddr, Prefix)> {
    let aesa = natm_proto::wire::addr::Aesa::new(*address)?;
    let hex: String = address.iter().map(|b| format!("{b:02x}")).collect();
    let prefix = Prefix::from_key(&hex)?;
    Some((natm_proto::wire::addr::AtmAddr::Aesa(aesa), prefix))
}
