//! IP over natm's sans-IO core: ATMARP client, VCs on demand, the policy, the MTU.
//!
//! seed 004 §6: the Cambridge stack's logical interface "resolves IP to ATM
//! addresses, opens VCs on demand" and closes them when idle. [`Node`] is that
//! logic without I/O, in quinn-proto's call order: feed it packets from the interface
//! ([`Node::handle_outbound`]), frames from VCs ([`Node::handle_frame`],
//! [`Node::handle_server_frame`]), the outcome of VC setups
//! ([`Node::handle_setup_done`], [`Node::handle_setup_failed`]), incoming calls
//! ([`Node::handle_incoming`], [`Node::handle_accepted`]), closed VCs ([`Node::handle_closed`]) and the time
//! ([`Node::handle_timeout`] at [`Node::poll_timeout`]); then drain
//! [`Node::poll_action`] for what to send, set up, release or deliver.
//!
//! A packet to a destination whose ATM address is unknown waits (bounded in packets
//! per destination and class, in bytes overall, and in time) while the ATMARP server
//! is asked; a packet whose VC is not yet up waits the same way while it is set up.
//! VCs are keyed by (peer ATM address, policy class): each class to a peer has its
//! own VC, and a VC the peer set up serves this host's packets of the same class.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::arp::{ArpTable, CLIENT_AGE};
use super::atmarp::{Op, Repr};
use super::llc::{self, Payload};
use super::packet::{fragment_v4, too_big, Flow};
use super::policy::Policy;
use crate::time::Instant;
use crate::wire::addr::AtmAddr;

/// RFC 2225 §5: the default MTU of IP over ATM, which every member of a logical IP
/// subnet supports (an AAL5 SDU of 9188 bytes with the LLC/SNAP header).
pub const DEFAULT_MTU: u32 = 9180;
/// The UNI cause a callee answers an MTU it cannot take with: 73, "unsupported
/// combination of traffic parameters" (the caller then tries [`DEFAULT_MTU`]).
pub const CAUSE_MTU: u8 = 73;
/// The UNI cause for "no VC left": 47, "resources unavailable, unspecified".
pub const CAUSE_NO_VC: u8 = 47;
/// The UNI cause 88, "incompatible destination": nobody at the callee listens on
/// natm's SAP `ip`, or the network cannot carry natm's transport to it (a switch
/// port towards a standard UNI user). The peer is not natm: the node calls again
/// as RFC 2225 does ([`VcKind::Llc`]).
pub const CAUSE_INCOMPATIBLE: u8 = 88;

/// The first wait before an InATMARP request on a PVC is sent again when the peer
/// has not answered; it doubles up to [`PVC_INARP_MAX`].
pub const PVC_INARP_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between InATMARP requests to a PVC peer that has not answered.
pub const PVC_INARP_MAX: Duration = Duration::from_secs(30);

/// A VC's id, chosen by the node.
pub type VcId = u64;

/// What a VC carries and how it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcKind {
    /// An SVC to or from another `natm ip`: natm's transport, SAP `ip`, the QoS of
    /// one policy class (seed 004 §6: a VC per class of traffic).
    Natm,
    /// An SVC as RFC 2225 makes them, for a peer that is not natm (Linux's
    /// `atmarpd`): bare AAL5 with LLC/SNAP, named by B-LLI (layer 2 LLC) alone. It
    /// carries every class, ATMARP as well as IP, and its peer's IP address is
    /// asked by InATMARP.
    Llc,
    /// A PVC: every class, its peer found by InATMARP, never released for idleness.
    Pvc,
}

impl VcKind {
    /// Whether the VC carries every class to its peer (not one policy class).
    fn every_class(self) -> bool {
        self != VcKind::Natm
    }
}

/// How a node runs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This host's ATM address (registered with the ATMARP server).
    pub atm: AtmAddr,
    /// This interface's IPv4 address.
    pub ipv4: Option<Ipv4Addr>,
    /// This interface's IPv6 address.
    pub ipv6: Option<Ipv6Addr>,
    /// The interface MTU: the largest packet this host sends. What it takes from a
    /// VC is [`NodeConfig::receive_mtu`], negotiated at setup.
    pub mtu: u32,
    /// A VC that carries nothing either way for this long is released.
    pub idle: Duration,
    /// Packets waiting per destination and class (the oldest goes first).
    pub queue_packets: usize,
    /// Bytes waiting over all destinations (a packet past it is dropped).
    pub queue_bytes: usize,
    /// Longest a packet waits for resolution and setup.
    pub wait: Duration,
    /// Life of a resolved entry (RFC 2225 §8.5: 15 minutes).
    pub arp_age: Duration,
    /// Time between ATMARP requests for one address.
    pub arp_retry: Duration,
    /// ATMARP requests for one address before giving up.
    pub arp_tries: u32,
    /// How long an address the server NAKed (or never answered) is not asked again.
    pub nak_hold: Duration,
    /// How often this host registers again with the server (RFC 2225 §8.5: at most
    /// 15 minutes apart, as the server ages entries in 20).
    pub register_every: Duration,
    /// Most ATMARP entries, addresses being resolved, and VCs.
    pub max_entries: usize,
    /// Whether there is an ATMARP server to register with and ask. Without one
    /// (PVCs only) addresses are learnt by InATMARP alone.
    pub server: bool,
    /// Most VCs with one peer ATM address, its calls and this host's together; a
    /// call beyond is refused with [`CAUSE_NO_VC`]. `None`: twice the policy's
    /// classes and two (a VC per class each way, an RFC 2225 VC and one in a race),
    /// so that one peer cannot take the VCs, and the threads that serve them, of all.
    pub per_peer: Option<usize>,
    /// How long a peer that refused natm's service, and is then served on one VC of
    /// every class as RFC 2225 calls, is left on it before a class's packets call it
    /// with natm's again (a natm host whose listener was not up yet gets its VCs per
    /// class back; a Linux host refuses once more, and stays on its VC).
    pub natm_retry: Duration,
}

impl NodeConfig {
    /// The largest packet this host takes from a VC, and offers in its calls: its
    /// interface MTU, and never less than RFC 2225's default, which every member of
    /// a logical IP subnet takes (§5). A host that sends smaller packets than the
    /// default (`natm ip`'s MTU that fills whole TPDUs) still takes the default's.
    pub fn receive_mtu(&self) -> u32 {
        self.mtu.max(DEFAULT_MTU)
    }

    /// A configuration with RFC 2225's timers and natm's defaults for the rest.
    pub fn new(atm: AtmAddr) -> NodeConfig {
        NodeConfig {
            atm,
            ipv4: None,
            ipv6: None,
            mtu: DEFAULT_MTU,
            idle: Duration::from_secs(60),
            queue_packets: 64,
            queue_bytes: 1 << 20,
            wait: Duration::from_secs(3),
            arp_age: CLIENT_AGE,
            arp_retry: Duration::from_millis(500),
            arp_tries: 4,
            nak_hold: Duration::from_secs(3),
            register_every: CLIENT_AGE,
            max_entries: 4096,
            server: true,
            per_peer: None,
            natm_retry: Duration::from_secs(300),
        }
    }
}

/// Why a VC is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// Nothing carried for the idle time.
    Idle,
}

/// What the node asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `frame` (LLC/SNAP header and packet) on `vc`.
    Transmit {
        /// The VC.
        vc: VcId,
        /// The AAL5 SDU.
        frame: Vec<u8>,
    },
    /// Send an ATMARP frame (with its LLC/SNAP header) to the ATMARP server.
    ToServer(Vec<u8>),
    /// Write this packet to the interface (an ICMP error the node made).
    Deliver(Vec<u8>),
    /// Call `peer` with class `class`'s QoS, offering `mtu`; answer with
    /// [`Node::handle_setup_done`] or [`Node::handle_setup_failed`].
    Setup {
        /// The VC's id.
        vc: VcId,
        /// Who to call.
        peer: AtmAddr,
        /// The policy class (its QoS is [`Policy::qos`]).
        class: usize,
        /// The MTU to offer.
        mtu: u32,
        /// [`VcKind::Natm`], or [`VcKind::Llc`] once the peer refused natm's
        /// service with [`CAUSE_INCOMPATIBLE`].
        kind: VcKind,
    },
    /// Release `vc`.
    Release {
        /// The VC.
        vc: VcId,
        /// Why.
        reason: ReleaseReason,
    },
}

/// What the node counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent on VCs (fragments count one each).
    pub tx_packets: u64,
    /// Packets received from VCs for the interface.
    pub rx_packets: u64,
    /// VCs set up by this host.
    pub setups: u64,
    /// Setups that failed.
    pub setup_failures: u64,
    /// Calls with natm's service again to a peer served as RFC 2225 calls since it
    /// refused natm's ([`NodeConfig::natm_retry`]).
    pub natm_retries: u64,
    /// Calls from peers taken.
    pub incoming: u64,
    /// Calls refused because their caller had its share of VCs already
    /// ([`NodeConfig::per_peer`]).
    pub refused_per_peer: u64,
    /// VCs released for idleness.
    pub idle_releases: u64,
    /// Setup time of the last VC this host set up, µs.
    pub last_setup_us: u64,
    /// ATMARP requests sent (resolutions and registrations).
    pub arp_requests: u64,
    /// ATMARP replies taken.
    pub arp_replies: u64,
    /// ATMARP NAKs received.
    pub arp_naks: u64,
    /// InATMARP requests sent on PVCs (RFC 2225 §8.3).
    pub inarp_requests: u64,
    /// InATMARP replies taken: a PVC's peer learnt.
    pub inarp_replies: u64,
    /// InATMARP requests from peers answered.
    pub inarp_answered: u64,
    /// IPv4 packets fragmented for a VC's smaller MTU.
    pub fragmented: u64,
    /// ICMP "fragmentation needed" / "packet too big" sent back.
    pub icmp_too_big: u64,
    /// Packets dropped: no ATM address (NAK or no answer).
    pub drop_unresolved: u64,
    /// Packets dropped: the wait queue was full.
    pub drop_queue: u64,
    /// Packets dropped: waited too long.
    pub drop_expired: u64,
    /// Packets dropped: their VC's setup failed.
    pub drop_setup: u64,
    /// Packets or frames dropped as malformed (bad IP header, LLC/SNAP or ATMARP).
    pub drop_malformed: u64,
    /// Multicast and broadcast packets dropped: RFC 2225 resolves unicast only
    /// (multicast over ATM is MARS, RFC 2022, which natm does not run).
    pub drop_multicast: u64,
}

#[derive(Debug, Clone)]
struct Vc {
    peer: AtmAddr,
    /// `None`: a VC of every class ([`VcKind::every_class`]) or an incoming VC of
    /// a class this host lacks (receive only).
    class: Option<usize>,
    mtu: u32,
    open: bool,
    kind: VcKind,
    started: Instant,
    last: Instant,
    /// Whether the setup was tried again with RFC 2225's default MTU.
    retried: bool,
    /// When the peer last refused natm's service for this VC, which was then called
    /// as RFC 2225 does ([`NodeConfig::natm_retry`]).
    natm_refused: Option<Instant>,
}

#[derive(Debug)]
struct Waiting {
    since: Instant,
    packet: Vec<u8>,
}

/// The on-demand VC machine and ATMARP client (module docs).
#[derive(Debug)]
pub struct Node {
    cfg: NodeConfig,
    policy: Policy,
    table: ArpTable,
    vcs: HashMap<VcId, Vc>,
    routes: HashMap<(AtmAddr, usize), VcId>,
    /// A peer's VC that carries every class (a PVC or an RFC 2225 SVC).
    every_class: HashMap<AtmAddr, VcId>,
    waiting: HashMap<(IpAddr, usize), VecDeque<Waiting>>,
    waiting_bytes: usize,
    resolving: HashMap<IpAddr, (Instant, u32)>,
    negative: HashMap<IpAddr, Instant>,
    next_register: Option<Instant>,
    /// PVCs whose peer has not answered InATMARP yet: when to ask again, and the
    /// wait after that.
    inarp_due: HashMap<VcId, (Instant, Duration)>,
    next_id: VcId,
    actions: VecDeque<Action>,
    counters: Counters,
}

impl Node {
    /// A node; it registers with the ATMARP server at the first [`Node::handle_timeout`].
    pub fn new(cfg: NodeConfig, policy: Policy, now: Instant) -> Node {
        let max = cfg.max_entries;
        Node {
            cfg,
            policy,
            table: ArpTable::new(max),
            vcs: HashMap::new(),
            routes: HashMap::new(),
            every_class: HashMap::new(),
            waiting: HashMap::new(),
            waiting_bytes: 0,
            resolving: HashMap::new(),
            negative: HashMap::new(),
            next_register: Some(now),
            inarp_due: HashMap::new(),
            next_id: 1,
            actions: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The ATMARP cache.
    pub fn table(&self) -> &ArpTable {
        &self.table
    }

    /// Open VCs: (id, peer, class, MTU).
    pub fn vcs(&self) -> impl Iterator<Item = (VcId, AtmAddr, Option<usize>, u32)> + '_ {
        self.vcs
            .iter()
            .filter(|(_, v)| v.open)
            .map(|(&id, v)| (id, v.peer, v.class, v.mtu))
    }

    /// Packets waiting for resolution or setup.
    pub fn waiting(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Node::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let resolve = self.resolving.values().map(|&(t, _)| t);
        let waits = self
            .waiting
            .values()
            .filter_map(|q| q.front().map(|w| w.since + self.cfg.wait));
        let idle = self
            .vcs
            .values()
            .filter(|v| v.open && v.kind != VcKind::Pvc)
            .map(|v| v.last + self.cfg.idle);
        let negative = self.negative.values().copied();
        resolve
            .chain(waits)
            .chain(idle)
            .chain(negative)
            .chain(self.next_register)
            .chain(self.inarp_due.values().map(|&(t, _)| t))
            .chain(self.table.next_expiry())
            .min()
    }

    /// The ATMARP server VC is (again) up: register at once (RFC 2225 §8.4.1).
    pub fn handle_server_up(&mut self, now: Instant) {
        self.next_register = Some(now);
        self.handle_timeout(now);
    }

    /// A packet from the interface.
    pub fn handle_outbound(&mut self, now: Instant, packet: Vec<u8>) {
        let flow = match Flow::parse(&packet) {
            Ok(f) => f,
            Err(_) => {
                self.counters.drop_malformed += 1;
                return;
            }
        };
        let multicast = match flow.dst {
            IpAddr::V4(a) => a.is_multicast() || a.is_broadcast() || a.is_unspecified(),
            IpAddr::V6(a) => a.is_multicast() || a.is_unspecified(),
        };
        if multicast {
            self.counters.drop_multicast += 1;
            return;
        }
        let class = self.policy.classify(&flow);
        self.route(now, flow.dst, class, packet);
    }

    fn route(&mut self, now: Instant, dst: IpAddr, class: usize, packet: Vec<u8>) {
        if self.negative.get(&dst).is_some_and(|&t| t > now) {
            self.counters.drop_unresolved += 1;
            return;
        }
        let Some(peer) = self.table.lookup(now, dst) else {
            self.enqueue(now, dst, class, packet);
            self.resolve(now, dst);
            return;
        };
        let is_open = |id: &VcId| self.vcs.get(id).is_some_and(|v| v.open);
        let own = self.routes.get(&(peer, class)).copied();
        // The class's own VC once open; else a VC of every class to the peer; else
        // the class's VC being set up.
        let vc = match (own, self.every_class.get(&peer).copied()) {
            (Some(id), _) if is_open(&id) => Some(id),
            (own, Some(all)) => {
                if own.is_none() {
                    self.retry_natm(now, peer, class, all);
                }
                Some(all)
            }
            (own, None) => own,
        };
        match vc {
            Some(id) if self.vcs.get(&id).is_some_and(|v| v.open) => self.send_on(now, id, packet),
            Some(_) => self.enqueue(now, dst, class, packet),
            None => {
                if self.vcs.len() >= self.cfg.max_entries {
                    self.counters.drop_setup += 1;
                    return;
                }
                self.enqueue(now, dst, class, packet);
                self.call(now, peer, class);
            }
        }
    }

    /// Calls `peer` for a natm VC of `class`.
    fn call(&mut self, now: Instant, peer: AtmAddr, class: usize) {
        let id = self.next_id;
        self.next_id += 1;
        self.vcs.insert(
            id,
            Vc {
                peer,
                class: Some(class),
                mtu: self.cfg.receive_mtu(),
                open: false,
                kind: VcKind::Natm,
                started: now,
                last: now,
                retried: false,
                natm_refused: None,
            },
        );
        self.routes.insert((peer, class), id);
        self.actions.push_back(Action::Setup {
            vc: id,
            peer,
            class,
            mtu: self.cfg.receive_mtu(),
            kind: VcKind::Natm,
        });
    }

    /// A packet of `class` goes on `all`, the VC of every class to `peer`: if that VC
    /// is there because `peer` refused natm's service longer than
    /// [`NodeConfig::natm_retry`] ago, the class calls with natm's again (its packets
    /// keep to `all` meanwhile).
    fn retry_natm(&mut self, now: Instant, peer: AtmAddr, class: usize, all: VcId) {
        let retry = self.cfg.natm_retry;
        let room = self.vcs.len() < self.cfg.max_entries;
        let Some(v) = self.vcs.get_mut(&all) else {
            return;
        };
        if room && v.open && v.natm_refused.is_some_and(|t| now >= t + retry) {
            v.natm_refused = Some(now);
            self.counters.natm_retries += 1;
            self.call(now, peer, class);
        }
    }

    fn send_on(&mut self, now: Instant, id: VcId, packet: Vec<u8>) {
        let Some(vc) = self.vcs.get_mut(&id) else {
            return;
        };
        vc.last = now;
        let mtu = vc.mtu;
        if packet.len() <= mtu as usize {
            self.counters.tx_packets += 1;
            self.actions.push_back(Action::Transmit {
                vc: id,
                frame: frame(&packet),
            });
            return;
        }
        // Larger than the VC's MTU (the peer agreed a smaller one than ours).
        if let Some(frags) = fragment_v4(&packet, mtu as usize) {
            self.counters.fragmented += 1;
            for f in frags {
                self.counters.tx_packets += 1;
                self.actions.push_back(Action::Transmit {
                    vc: id,
                    frame: frame(&f),
                });
            }
            return;
        }
        // From the destination, as if the hop that cannot take it answered: the
        // sender's kernel drops an ICMP error whose source is one of its own
        // addresses (a "martian" arriving on natm0). Departure from natm ip's earlier
        // choice of this interface's address.
        let from = Flow::parse(&packet).ok().map(|f| f.dst);
        if let Some(err) = from.and_then(|from| too_big(&packet, mtu, from)) {
            self.counters.icmp_too_big += 1;
            self.actions.push_back(Action::Deliver(err));
        }
    }

    fn enqueue(&mut self, now: Instant, dst: IpAddr, class: usize, packet: Vec<u8>) {
        if self.waiting_bytes + packet.len() > self.cfg.queue_bytes
            || (!self.waiting.contains_key(&(dst, class))
                && self.waiting.len() >= self.cfg.max_entries)
        {
            self.counters.drop_queue += 1;
            return;
        }
        let q = self.waiting.entry((dst, class)).or_default();
        if q.len() >= self.cfg.queue_packets {
            if let Some(old) = q.pop_front() {
                self.waiting_bytes -= old.packet.len();
                self.counters.drop_queue += 1;
            }
        }
        self.waiting_bytes += packet.len();
        q.push_back(Waiting { since: now, packet });
    }

    fn resolve(&mut self, now: Instant, dst: IpAddr) {
        if self.resolving.contains_key(&dst) || self.resolving.len() >= self.cfg.max_entries {
            return;
        }
        self.resolving.insert(dst, (now + self.cfg.arp_retry, 1));
        self.query(dst);
    }

    /// Asks where `dst` is: the ATMARP server, or without one every PVC's peer by
    /// InATMARP (RFC 2225 §8.3: a PVC's peer is learnt from its reply).
    fn query(&mut self, dst: IpAddr) {
        if self.cfg.server {
            self.ask(dst, dst);
            // The destination may be the peer of a PVC that has not answered
            // InATMARP (its end was not open when this one first asked): ask it now
            // rather than at its next retry.
            let silent: Vec<_> = self.inarp_due.keys().copied().collect();
            for vc in silent {
                self.inarp(vc);
            }
        } else {
            let peers: Vec<_> = self.every_class.values().copied().collect();
            for vc in peers {
                self.inarp(vc);
            }
        }
    }

    /// Sends an ARP_REQUEST for `target` (for itself: a registration).
    fn ask(&mut self, source_of_family: IpAddr, target: IpAddr) {
        if !self.cfg.server {
            return;
        }
        let source_ip = match source_of_family {
            IpAddr::V4(_) => self.cfg.ipv4.map(IpAddr::V4),
            IpAddr::V6(_) => self.cfg.ipv6.map(IpAddr::V6),
        };
        let req = Repr {
            op: Op::Request,
            ipv6: target.is_ipv6(),
            source_atm: Some(self.cfg.atm),
            source_ip,
            target_atm: None,
            target_ip: Some(target),
        };
        if let Ok(bytes) = req.to_bytes() {
            self.counters.arp_requests += 1;
            self.actions.push_back(Action::ToServer(arp_frame(&bytes)));
        }
    }

    /// Sends every waiting packet that can go now (after a resolution or a setup).
    fn flush(&mut self, now: Instant, matches: impl Fn(&(IpAddr, usize)) -> bool) {
        let keys: Vec<_> = self
            .waiting
            .keys()
            .filter(|k| matches(k))
            .copied()
            .collect();
        for key in keys {
            if let Some(q) = self.waiting.remove(&key) {
                for w in q {
                    self.waiting_bytes -= w.packet.len();
                    self.route(now, key.0, key.1, w.packet);
                }
            }
        }
    }

    fn drop_waiting(&mut self, matches: impl Fn(&(IpAddr, usize)) -> bool) -> u64 {
        let mut n = 0;
        let bytes = &mut self.waiting_bytes;
        self.waiting.retain(|k, q| {
            if matches(k) {
                for w in q.iter() {
                    *bytes -= w.packet.len();
                }
                n += q.len() as u64;
                false
            } else {
                true
            }
        });
        n
    }

    /// A frame from the ATMARP server's VC: the IP packet to write to the interface,
    /// if it is one. A server that is not natm (Linux's `atmarpd`, on a VC as RFC
    /// 2225 makes them) asks who this client is by InATMARP (RFC 2225 §8.4.1), and
    /// its host's own IP packets to this one may come on the same VC.
    pub fn handle_server_frame<'a>(&mut self, now: Instant, frame: &'a [u8]) -> Option<&'a [u8]> {
        let repr = match llc::parse(frame) {
            Ok((Payload::Arp, body)) => Repr::parse(body),
            Ok((Payload::Ipv4 | Payload::Ipv6, packet)) => {
                self.counters.rx_packets += 1;
                return Some(packet);
            }
            Err(_) => {
                self.counters.drop_malformed += 1;
                return None;
            }
        };
        let Ok(r) = repr else {
            self.counters.drop_malformed += 1;
            return None;
        };
        match r.op {
            Op::InRequest => {
                if let Some(reply) = self.inarp_reply(&r) {
                    self.actions.push_back(Action::ToServer(reply));
                }
            }
            Op::Reply => {
                self.counters.arp_replies += 1;
                let (Some(ip), Some(atm)) = (r.source_ip, r.source_atm) else {
                    return None;
                };
                if self.is_own(ip) {
                    return None; // our registration, acknowledged
                }
                if !self.resolving.contains_key(&ip) && self.table.lookup(now, ip).is_none() {
                    return None; // nobody asked: no state for an unsolicited reply
                }
                self.resolving.remove(&ip);
                self.negative.remove(&ip);
                self.table.insert(now, ip, atm, Some(self.cfg.arp_age));
                self.flush(now, |k| k.0 == ip);
            }
            Op::Nak => {
                self.counters.arp_naks += 1;
                let ip = r.target_ip?;
                if self.resolving.remove(&ip).is_some() {
                    self.negative.insert(ip, now + self.cfg.nak_hold);
                    self.counters.drop_unresolved += self.drop_waiting(|k| k.0 == ip);
                }
            }
            _ => {}
        }
        None
    }

    /// The LLC/SNAP-framed InATMARP reply to request `r`: this host's address of
    /// the request's family, if it has one.
    fn inarp_reply(&mut self, r: &Repr) -> Option<Vec<u8>> {
        let source_ip = match r.ipv6 {
            false => self.cfg.ipv4.map(IpAddr::V4),
            true => self.cfg.ipv6.map(IpAddr::V6),
        };
        let reply = Repr {
            op: Op::InReply,
            ipv6: r.ipv6,
            source_atm: Some(self.cfg.atm).filter(|a| !matches!(a, AtmAddr::Pvc(_))),
            source_ip,
            target_atm: r.source_atm,
            target_ip: r.source_ip,
        };
        let bytes = reply.to_bytes().ok().filter(|_| source_ip.is_some())?;
        self.counters.inarp_answered += 1;
        Some(arp_frame(&bytes))
    }

    fn is_own(&self, ip: IpAddr) -> bool {
        Some(ip) == self.cfg.ipv4.map(IpAddr::V4) || Some(ip) == self.cfg.ipv6.map(IpAddr::V6)
    }

    /// A frame from a data VC: the IP packet to write to the interface, if it is one.
    /// InATMARP requests are answered on the VC; InATMARP replies on a PVC fill the
    /// table (RFC 2225 §8.3).
    pub fn handle_frame<'a>(
        &mut self,
        now: Instant,
        vc: VcId,
        frame: &'a [u8],
    ) -> Option<&'a [u8]> {
        let v = self.vcs.get_mut(&vc)?;
        v.last = now;
        // A PVC's or an RFC 2225 SVC's peer is learnt by InATMARP.
        let (asks, peer) = (v.kind.every_class(), v.peer);
        match llc::parse(frame) {
            Ok((Payload::Ipv4 | Payload::Ipv6, packet)) => {
                self.counters.rx_packets += 1;
                Some(packet)
            }
            Ok((Payload::Arp, body)) => {
                match Repr::parse(body) {
                    Ok(r) if r.op == Op::InRequest => {
                        // The asker says who it is: on a PVC that is the peer
                        // (RFC 2390 §7: the responder may cache the requester).
                        if let (true, Some(ip)) = (asks, r.source_ip) {
                            self.learn_peer(now, vc, ip, peer);
                        }
                        if let Some(frame) = self.inarp_reply(&r) {
                            self.actions.push_back(Action::Transmit { vc, frame });
                        }
                    }
                    Ok(r) if r.op == Op::InReply && asks => {
                        if let Some(ip) = r.source_ip {
                            self.counters.inarp_replies += 1;
                            self.learn_peer(now, vc, ip, peer);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => self.counters.drop_malformed += 1,
                }
                None
            }
            Err(_) => {
                self.counters.drop_malformed += 1;
                None
            }
        }
    }

    /// `ip` is at the far end of `vc` (a PVC or an RFC 2225 SVC, to `peer`): cache
    /// it, stop asking, and send what waits for it.
    fn learn_peer(&mut self, now: Instant, vc: VcId, ip: IpAddr, peer: AtmAddr) {
        if self.is_own(ip) {
            return;
        }
        self.inarp_due.remove(&vc);
        self.resolving.remove(&ip);
        self.negative.remove(&ip);
        self.table.insert(now, ip, peer, Some(self.cfg.arp_age));
        self.flush(now, |k| k.0 == ip);
    }

    /// A VC this host asked for is up.
    pub fn handle_setup_done(&mut self, now: Instant, vc: VcId) {
        let Some(v) = self.vcs.get_mut(&vc) else {
            return;
        };
        v.open = true;
        v.last = now;
        self.counters.setups += 1;
        self.counters.last_setup_us =
            u64::try_from(now.saturating_duration_since(v.started).as_micros()).unwrap_or(u64::MAX);
        let (peer, class) = (v.peer, v.class);
        self.flush_for(now, peer, class);
    }

    fn flush_for(&mut self, now: Instant, peer: AtmAddr, class: Option<usize>) {
        let table = &self.table;
        let keys: Vec<_> = self
            .waiting
            .keys()
            .filter(|k| class.is_none_or(|c| c == k.1) && table.lookup(now, k.0) == Some(peer))
            .copied()
            .collect();
        self.flush(now, |k| keys.contains(k));
    }

    /// A VC this host asked for was refused with UNI cause `cause` (or failed without
    /// one). A callee that cannot take the offered MTU refuses with [`CAUSE_MTU`];
    /// the node then offers RFC 2225's default once. A peer that is not natm
    /// refuses natm's service with [`CAUSE_INCOMPATIBLE`]; the node then calls it
    /// once as RFC 2225 does, with a VC of every class ([`VcKind::Llc`]).
    pub fn handle_setup_failed(&mut self, now: Instant, vc: VcId, cause: Option<u8>) {
        let Some(v) = self.vcs.get_mut(&vc) else {
            return;
        };
        let again = if cause == Some(CAUSE_MTU) && v.mtu > DEFAULT_MTU && !v.retried {
            v.retried = true;
            v.mtu = DEFAULT_MTU;
            v.class
        } else if cause == Some(CAUSE_INCOMPATIBLE) && v.kind == VcKind::Natm {
            let peer = v.peer;
            if let Some(all) = self.every_class.get(&peer).copied() {
                // A class tried natm's again and was refused again: it stays on the
                // VC of every class, which waits `natm_retry` before the next try.
                if let Some(a) = self.vcs.get_mut(&all) {
                    a.natm_refused = Some(now);
                }
                self.forget(vc);
                return;
            }
            v.kind = VcKind::Llc;
            v.natm_refused = Some(now);
            let class = v.class.take();
            self.routes.retain(|_, id| *id != vc);
            self.every_class.insert(peer, vc);
            class
        } else {
            None
        };
        if let (Some(class), Some(v)) = (again, self.vcs.get(&vc)) {
            self.actions.push_back(Action::Setup {
                vc,
                peer: v.peer,
                class,
                mtu: v.mtu,
                kind: v.kind,
            });
            return;
        }
        let Some(v) = self.vcs.get(&vc) else {
            return;
        };
        let (peer, class) = (v.peer, v.class);
        self.forget(vc);
        self.counters.setup_failures += 1;
        let table = &self.table;
        let n = {
            let doomed: Vec<_> = self
                .waiting
                .keys()
                .filter(|k| class.is_none_or(|c| c == k.1) && table.lookup(now, k.0) == Some(peer))
                .copied()
                .collect();
            self.drop_waiting(|k| doomed.contains(k))
        };
        self.counters.drop_setup += n;
    }

    /// A call from `caller` (the address sigd authenticated) of policy class `class`
    /// (`None`: a QoS none of this host's classes has: the VC only receives),
    /// offering `offered_mtu` (none: RFC 2225's default). `Ok` with the VC's id and
    /// MTU to accept it (then [`Node::handle_accepted`]), `Err` with the UNI cause
    /// to reject it.
    ///
    /// The MTU rule ("9180 default; larger where both ends agree"): an offer up to
    /// [`NodeConfig::receive_mtu`] (the interface MTU, and at least the default,
    /// which every host takes) is taken as it is; a larger offer is refused with
    /// [`CAUSE_MTU`].
    pub fn handle_incoming(
        &mut self,
        now: Instant,
        caller: AtmAddr,
        class: Option<usize>,
        offered_mtu: Option<u32>,
    ) -> Result<(VcId, u32), u8> {
        self.incoming(now, caller, class, offered_mtu, VcKind::Natm)
    }

    /// A call as RFC 2225 makes them (bare AAL5, B-LLI LLC) from `caller`, a peer
    /// that is not natm (Linux's `atmarpd`), offering `offered_mtu`: as
    /// [`Node::handle_incoming`], but the VC carries every class, and the node asks
    /// the caller's IP address by InATMARP on it (RFC 2225 §8.3) until it answers.
    pub fn handle_incoming_llc(
        &mut self,
        now: Instant,
        caller: AtmAddr,
        offered_mtu: Option<u32>,
    ) -> Result<(VcId, u32), u8> {
        let (id, mtu) = self.incoming(now, caller, None, offered_mtu, VcKind::Llc)?;
        let taken = self
            .every_class
            .get(&caller)
            .is_some_and(|old| self.vcs.get(old).is_some_and(|v| v.open));
        if !taken {
            self.every_class.insert(caller, id);
        }
        Ok((id, mtu))
    }

    /// The driver accepted incoming VC `vc` and can send on it: what waits for its
    /// peer goes, and on an RFC 2225 VC the node asks who the caller is.
    pub fn handle_accepted(&mut self, now: Instant, vc: VcId) {
        let Some(v) = self.vcs.get_mut(&vc) else {
            return;
        };
        v.open = true;
        v.last = now;
        let (peer, class, kind) = (v.peer, v.class, v.kind);
        if kind == VcKind::Llc {
            self.inarp(vc);
            self.inarp_due
                .insert(vc, (now + PVC_INARP_FIRST, PVC_INARP_FIRST));
        }
        if class.is_some() || kind.every_class() {
            self.flush_for(now, peer, class);
        }
    }

    fn incoming(
        &mut self,
        now: Instant,
        caller: AtmAddr,
        class: Option<usize>,
        offered_mtu: Option<u32>,
        kind: VcKind,
    ) -> Result<(VcId, u32), u8> {
        let mtu = offered_mtu.unwrap_or(DEFAULT_MTU);
        if mtu > self.cfg.receive_mtu() {
            return Err(CAUSE_MTU);
        }
        if self.vcs.len() >= self.cfg.max_entries {
            return Err(CAUSE_NO_VC);
        }
        let per_peer = self.cfg.per_peer.unwrap_or(2 * self.policy.classes() + 2);
        if self.vcs.values().filter(|v| v.peer == caller).count() >= per_peer {
            self.counters.refused_per_peer += 1;
            return Err(CAUSE_NO_VC);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.vcs.insert(
            id,
            Vc {
                peer: caller,
                class,
                mtu,
                open: false,
                kind,
                started: now,
                last: now,
                retried: false,
                natm_refused: None,
            },
        );
        self.counters.incoming += 1;
        if let Some(c) = class {
            let key = (caller, c);
            let taken = self
                .routes
                .get(&key)
                .is_some_and(|old| self.vcs.get(old).is_some_and(|v| v.open));
            if !taken {
                // Ours may be still in setup: this one serves meanwhile (once
                // accepted); ours, once up, idles out.
                self.routes.insert(key, id);
            }
        }
        Ok((id, mtu))
    }

    /// A PVC to a peer whose IP address InATMARP finds (RFC 2225 §8.3): it carries
    /// every class and is never released for idleness. Returns its id.
    pub fn add_pvc(&mut self, now: Instant, pvc: AtmAddr, mtu: u32) -> VcId {
        let id = self.next_id;
        self.next_id += 1;
        self.vcs.insert(
            id,
            Vc {
                peer: pvc,
                class: None,
                mtu: mtu.min(self.cfg.receive_mtu()),
                open: true,
                kind: VcKind::Pvc,
                started: now,
                last: now,
                retried: false,
                natm_refused: None,
            },
        );
        self.every_class.insert(pvc, id);
        self.inarp(id);
        // RFC 2225 §8.3 leaves retries open. A request sent before the far end has
        // opened its side of the PVC is lost (Linux drops frames on a VC no socket
        // has open), so it is repeated, backing off, until the peer answers.
        self.inarp_due
            .insert(id, (now + PVC_INARP_FIRST, PVC_INARP_FIRST));
        id
    }

    /// Asks who is at the other end of PVC `vc`.
    fn inarp(&mut self, vc: VcId) {
        let own: Vec<IpAddr> = [self.cfg.ipv4.map(IpAddr::V4), self.cfg.ipv6.map(IpAddr::V6)]
            .into_iter()
            .flatten()
            .collect();
        for ip in own {
            let req = Repr {
                op: Op::InRequest,
                ipv6: ip.is_ipv6(),
                source_atm: Some(self.cfg.atm).filter(|a| !matches!(a, AtmAddr::Pvc(_))),
                source_ip: Some(ip),
                target_atm: None,
                target_ip: None,
            };
            if let Ok(bytes) = req.to_bytes() {
                self.counters.inarp_requests += 1;
                self.actions.push_back(Action::Transmit {
                    vc,
                    frame: arp_frame(&bytes),
                });
            }
        }
    }

    /// `vc` is gone (released by the peer or the network, or after this node's
    /// [`Action::Release`]).
    pub fn handle_closed(&mut self, _now: Instant, vc: VcId) {
        self.forget(vc);
    }

    fn forget(&mut self, vc: VcId) {
        if self.vcs.remove(&vc).is_some() {
            self.routes.retain(|_, id| *id != vc);
            self.every_class.retain(|_, id| *id != vc);
            self.inarp_due.remove(&vc);
        }
    }

    /// Timers: registration, ATMARP retries, waiting packets, idle VCs, ageing.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.next_register.is_some_and(|t| t <= now) {
            for ip in [self.cfg.ipv4.map(IpAddr::V4), self.cfg.ipv6.map(IpAddr::V6)]
                .into_iter()
                .flatten()
            {
                self.ask(ip, ip);
            }
            self.next_register = Some(now + self.cfg.register_every);
            // The peers of PVCs and RFC 2225 SVCs are asked again as often.
            let peers: Vec<_> = self.every_class.values().copied().collect();
            for vc in peers {
                self.inarp(vc);
            }
        }
        let silent: Vec<_> = self
            .inarp_due
            .iter()
            .filter(|(_, &(t, _))| t <= now)
            .map(|(&vc, &(_, wait))| (vc, wait))
            .collect();
        for (vc, wait) in silent {
            self.inarp(vc);
            let next = (wait * 2).min(PVC_INARP_MAX);
            self.inarp_due.insert(vc, (now + next, next));
        }
        let due: Vec<_> = self
            .resolving
            .iter()
            .filter(|(_, &(t, _))| t <= now)
            .map(|(&ip, &(_, n))| (ip, n))
            .collect();
        for (ip, tries) in due {
            if tries < self.cfg.arp_tries {
                self.resolving
                    .insert(ip, (now + self.cfg.arp_retry, tries + 1));
                self.query(ip);
            } else {
                self.resolving.remove(&ip);
                self.negative.insert(ip, now + self.cfg.nak_hold);
                self.counters.drop_unresolved += self.drop_waiting(|k| k.0 == ip);
            }
        }
        let wait = self.cfg.wait;
        let mut expired = 0;
        let bytes = &mut self.waiting_bytes;
        self.waiting.retain(|_, q| {
            while q.front().is_some_and(|w| w.since + wait <= now) {
                if let Some(w) = q.pop_front() {
                    *bytes -= w.packet.len();
                    expired += 1;
                }
            }
            !q.is_empty()
        });
        self.counters.drop_expired += expired;
        let idle: Vec<_> = self
            .vcs
            .iter()
            .filter(|(_, v)| v.open && v.kind != VcKind::Pvc && v.last + self.cfg.idle <= now)
            .map(|(&id, _)| id)
            .collect();
        for vc in idle {
            self.forget(vc);
            self.counters.idle_releases += 1;
            self.actions.push_back(Action::Release {
                vc,
                reason: ReleaseReason::Idle,
            });
        }
        self.negative.retain(|_, t| *t > now);
        self.table.expire(now);
    }
}

/// `packet` with its LLC/SNAP header.
pub fn frame(packet: &[u8]) -> Vec<u8> {
    let payload = if packet.first().is_some_and(|b| b >> 4 == 6) {
        Payload::Ipv6
    } else {
        Payload::Ipv4
    };
    let mut f = Vec::with_capacity(llc::HEADER_LEN + packet.len());
    f.extend_from_slice(&payload.header());
    f.extend_from_slice(packet);
    f
}

/// An ATMARP packet with its LLC/SNAP header.
pub fn arp_frame(body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(llc::HEADER_LEN + body.len());
    f.extend_from_slice(&Payload::Arp.header());
    f.extend_from_slice(body);
    f
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
