//! Routing between natm switches in the spirit of PNNI 1.0 with one peer group
//! (issue 33), sans-IO: hellos on each trunk's routing channel (VPI 0/VCI 18) find the
//! neighbour and notice it die, each switch floods a topology state element (PTSE)
//! with its links' available cell rates and the address prefixes it reaches, and a
//! switch that takes a call from a host computes a path over the links with room for
//! the call's contract, as a designated transit list ([`Dtl`]).
//!
//! Driven as the control plane is: [`Router::handle_frame`] with what arrived on a
//! trunk's routing channel, [`Router::handle_timeout`] when [`Router::poll_timeout`]
//! is due, [`Router::poll_transmit`] for frames to send and [`Router::poll_event`] for
//! neighbours coming and going. The control plane feeds the switch's own state
//! ([`Router::set_local`]) and asks for paths ([`Router::path`]).
//!
//! Flooding is reliable: a PTSE sent to a neighbour is sent again until the neighbour
//! acknowledges it (or a newer instance), after the neighbour's retransmission
//! timeout: [`RoutingConfig::retransmit`] at least, RFC 6298's from the round trips
//! its acknowledgements measured (Karn's rule: only of PTSEs sent once), doubled for
//! each retransmission until the next sample — PNNI fixes the interval (5 s), and a
//! fixed 50 ms sent each PTSE a dozen times across a trunk of 300 ms. Every switch re-originates its own at least every
//! [`RoutingConfig::refresh`]; an instance not refreshed within its lifetime ages
//! out. A neighbour that becomes two-way is sent the whole database (PNNI's database
//! summary exchange, simplified to flooding it).

use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::transport::rtt::{RttConfig, RttEstimator};
use natm_proto::wire::addr::{AtmAddr, Prefix};
use natm_proto::wire::q2931::{Blocked, Dtl, DtlHop, NodeId};

use crate::PortId;

pub mod frame;

pub use frame::{Frame, FrameError, Hello, LinkAd, Ptse};

/// A port's logical port identifier in hellos, PTSEs, DTLs and crankbacks: its
/// number plus one, since a DTL entry's port 0 means "the destination" (PNNI: any
/// port) and a switch's ports are numbered from 0.
pub fn logical_port(p: PortId) -> u32 {
    u32::from(p.0) + 1
}

/// The port a logical port identifier names, if any.
pub fn port_of(logical: u32) -> Option<PortId> {
    logical
        .checked_sub(1)
        .and_then(|p| u16::try_from(p).ok())
        .map(PortId)
}

/// PNNI's default administrative weight of a link.
pub const DEFAULT_WEIGHT: u32 = 5040;

/// Timers and the node's identity.
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// This switch's node identifier (not 0).
    pub node: NodeId,
    /// How often a hello goes out on each trunk (PNNI: 15 s; a lab: 100 ms).
    pub hello: Duration,
    /// A neighbour not heard for this long is down (PNNI: 4 hello intervals).
    pub dead: Duration,
    /// The own PTSE is re-originated at least this often (PNNI: 30 min).
    pub refresh: Duration,
    /// The lifetime a PTSE is originated with (PNNI: 1 h); must exceed `refresh`.
    pub lifetime: Duration,
    /// An unacknowledged PTSE is sent again after this long at least, and before any
    /// round trip to the neighbour is measured (PNNI: 5 s).
    pub retransmit: Duration,
    /// Least time between two originations for a change in available cell rate (a
    /// change of neighbours originates at once).
    pub hold_down: Duration,
}

impl RoutingConfig {
    /// A lab's timers, PNNI's scaled down: hello 100 ms, dead 400 ms, refresh 1 s,
    /// lifetime 4 s, retransmit 50 ms, hold-down 20 ms.
    pub fn lab(node: NodeId) -> RoutingConfig {
        RoutingConfig {
            node,
            hello: Duration::from_millis(100),
            dead: Duration::from_millis(400),
            refresh: Duration::from_secs(1),
            lifetime: Duration::from_secs(4),
            retransmit: Duration::from_millis(50),
            hold_down: Duration::from_millis(20),
        }
    }
}

/// What the routing tells the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterEvent {
    /// Hellos both ways on `port`: the link to `node` is in use.
    Up {
        /// The trunk.
        port: PortId,
        /// The neighbour.
        node: NodeId,
    },
    /// `port`'s neighbour is no longer heard (or no longer hears this switch).
    Down {
        /// The trunk.
        port: PortId,
        /// The neighbour it had.
        node: NodeId,
    },
}

/// A trunk's own state, from the control plane's admission ([`Router::set_local`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalLink {
    /// The line's cell rate.
    pub max_cells: u32,
    /// What calls may still reserve on it.
    pub avail_cells: u32,
}

/// Why no path was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoPath {
    /// No node advertises a prefix of the address.
    Unreachable,
    /// Nodes reach it, but no path has room for the contract (or every one is
    /// blocked).
    NoCapacity,
}

/// One row of the topology database, for `natm stat --switch`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DbRow {
    /// The origin's node number.
    pub origin: u32,
    /// Its sequence number.
    pub seq: u32,
    /// Ms left before it ages out.
    pub expires_in_ms: u64,
    /// Its links: "port→node:port avail/max".
    pub links: Vec<String>,
    /// Its prefixes.
    pub prefixes: Vec<String>,
}

/// Counters of the routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RoutingCounters {
    /// Hellos sent and received.
    pub hellos_out: u64,
    /// Hellos received.
    pub hellos_in: u64,
    /// PTSE transmissions (floods and retransmissions).
    pub ptses_out: u64,
    /// Of those, retransmissions.
    pub retransmits: u64,
    /// Newer PTSEs received and installed.
    pub ptses_installed: u64,
    /// Own PTSE originations.
    pub originated: u64,
    /// Routing frames that did not parse.
    pub bad_frames: u64,
    /// Neighbours declared dead (no hello within the dead interval).
    pub neighbours_lost: u64,
}

#[derive(Debug)]
struct Neighbour {
    /// The peer heard on this trunk: node and port.
    peer: Option<(NodeId, u32)>,
    two_way: bool,
    last_heard: Instant,
    next_hello: Instant,
    /// PTSEs sent and not acknowledged, by origin.
    unacked: BTreeMap<NodeId, Unacked>,
    /// PTSEs received to acknowledge.
    acks: Vec<(NodeId, u32)>,
    /// Round trips to the neighbour, and the retransmission timeout from them.
    rtt: RttEstimator,
}

/// A PTSE instance sent to a neighbour and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
struct Unacked {
    seq: u32,
    /// When to send it again.
    next: Instant,
    /// When it was first sent, if only once (Karn's rule: an acknowledgement of a
    /// retransmitted PTSE measures nothing).
    sent_once: Option<Instant>,
}

impl Neighbour {
    /// `seq` of `origin`'s PTSE sent now for the first time.
    fn sent(&mut self, origin: NodeId, seq: u32, now: Instant) {
        let next = now + self.rtt.rto();
        self.unacked.insert(
            origin,
            Unacked {
                seq,
                next,
                sent_once: Some(now),
            },
        );
    }

    /// The neighbour has `origin`'s PTSE `seq` or newer: stop sending ours; an
    /// acknowledgement (`ack`) of one sent once measures the round trip.
    fn has(&mut self, origin: NodeId, seq: u32, ack: bool, now: Instant) {
        if let Some(u) = self.unacked.get(&origin).filter(|u| seq >= u.seq).copied() {
            self.unacked.remove(&origin);
            if let (true, Some(at)) = (ack, u.sent_once) {
                self.rtt.on_sample(now.saturating_duration_since(at));
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Stored {
    ptse: Ptse,
    expires: Instant,
}

/// The routing of one switch.
#[derive(Debug)]
pub struct Router {
    cfg: RoutingConfig,
    trunks: BTreeMap<PortId, Neighbour>,
    db: BTreeMap<NodeId, Stored>,
    seq: u32,
    local: BTreeMap<PortId, LocalLink>,
    prefixes: Vec<Prefix>,
    /// What the own PTSE last said (links and prefixes), to tell a change.
    advertised: Option<(Vec<LinkAd>, Vec<Prefix>)>,
    last_origination: Option<Instant>,
    /// A re-origination waiting for the hold-down.
    pending: Option<Instant>,
    next_refresh: Instant,
    out: VecDeque<(PortId, Bytes)>,
    events: VecDeque<RouterEvent>,
    counters: RoutingCounters,
    now: Instant,
}

impl Router {
    /// A router with no trunks.
    pub fn new(cfg: RoutingConfig) -> Router {
        Router {
            cfg,
            trunks: BTreeMap::new(),
            db: BTreeMap::new(),
            seq: 0,
            local: BTreeMap::new(),
            prefixes: Vec::new(),
            advertised: None,
            last_origination: None,
            pending: None,
            next_refresh: Instant::ZERO,
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: RoutingCounters::default(),
            now: Instant::ZERO,
        }
    }

    /// This switch's node.
    pub fn node(&self) -> NodeId {
        self.cfg.node
    }

    /// The counters.
    pub fn counters(&self) -> RoutingCounters {
        self.counters
    }

    /// Runs hellos on a trunk.
    pub fn add_trunk(&mut self, now: Instant, port: PortId) {
        self.tick(now);
        self.trunks.insert(
            port,
            Neighbour {
                peer: None,
                two_way: false,
                last_heard: now,
                next_hello: now,
                unacked: BTreeMap::new(),
                acks: Vec::new(),
                rtt: RttEstimator::new(RttConfig {
                    initial_rto: self.cfg.retransmit,
                    min_rto: self.cfg.retransmit,
                    max_rto: self.cfg.lifetime / 2,
                    ..RttConfig::default()
                }),
            },
        );
        self.pending.get_or_insert(now);
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// The switch's own trunks' capacity and the prefixes it reaches; a change is
    /// advertised (after the hold-down).
    pub fn set_local(
        &mut self,
        now: Instant,
        links: BTreeMap<PortId, LocalLink>,
        prefixes: Vec<Prefix>,
    ) {
        self.tick(now);
        self.local = links;
        self.prefixes = prefixes;
        if self.advertised.as_ref() != Some(&(self.own_links(), self.prefixes.clone())) {
            let at = self
                .last_origination
                .map_or(now, |t| (t + self.cfg.hold_down).max(now));
            self.pending = Some(self.pending.map_or(at, |p| p.min(at)));
        }
    }

    /// The links the own PTSE advertises: every two-way trunk.
    fn own_links(&self) -> Vec<LinkAd> {
        self.trunks
            .iter()
            .filter(|(_, n)| n.two_way)
            .filter_map(|(p, n)| {
                let (to, to_port) = n.peer?;
                let l = self.local.get(p).copied().unwrap_or_default();
                Some(LinkAd {
                    port: logical_port(*p),
                    to,
                    to_port,
                    max_cells: l.max_cells,
                    avail_cbr: l.avail_cells,
                    avail_vbr: l.avail_cells,
                    weight: DEFAULT_WEIGHT,
                })
            })
            .collect()
    }

    fn originate(&mut self) {
        let now = self.now;
        self.seq = self.seq.wrapping_add(1).max(1);
        let ptse = Ptse {
            origin: self.cfg.node,
            seq: self.seq,
            lifetime_ms: ms(self.cfg.lifetime),
            links: self.own_links(),
            prefixes: self.prefixes.clone(),
        };
        self.advertised = Some((ptse.links.clone(), ptse.prefixes.clone()));
        self.last_origination = Some(now);
        self.pending = None;
        self.next_refresh = now + self.cfg.refresh;
        self.counters.originated += 1;
        self.db.insert(
            self.cfg.node,
            Stored {
                ptse,
                expires: now + self.cfg.lifetime,
            },
        );
        self.flood(self.cfg.node, None);
    }

    /// Sends `origin`'s PTSE to every two-way neighbour but `except`, to be
    /// acknowledged.
    fn flood(&mut self, origin: NodeId, except: Option<PortId>) {
        let Some(seq) = self.db.get(&origin).map(|s| s.ptse.seq) else {
            return;
        };
        let ports: Vec<PortId> = self
            .trunks
            .iter()
            .filter(|(p, n)| n.two_way && Some(**p) != except)
            .map(|(p, _)| *p)
            .collect();
        let now = self.now;
        for p in ports {
            self.send_ptse(p, origin);
            if let Some(n) = self.trunks.get_mut(&p) {
                n.sent(origin, seq, now);
            }
        }
    }

    fn send_ptse(&mut self, port: PortId, origin: NodeId) {
        let Some(s) = self.db.get(&origin) else {
            return;
        };
        let mut p = s.ptse.clone();
        p.lifetime_ms = ms(s.expires.saturating_duration_since(self.now));
        self.counters.ptses_out += 1;
        self.out
            .push_back((port, Bytes::from(Frame::Ptse(p).emit())));
    }

    fn send_hello(&mut self, port: PortId) {
        let Some(n) = self.trunks.get_mut(&port) else {
            return;
        };
        let (rn, rp) = n.peer.unwrap_or((NodeId(0), 0));
        n.next_hello = self.now + self.cfg.hello;
        let h = Frame::Hello(Hello {
            node: self.cfg.node,
            port: logical_port(port),
            remote_node: rn,
            remote_port: rp,
        });
        self.counters.hellos_out += 1;
        self.out.push_back((port, Bytes::from(h.emit())));
    }

    /// A frame that arrived on `port`'s routing channel.
    pub fn handle_frame(&mut self, now: Instant, port: PortId, data: &[u8]) {
        self.tick(now);
        if !self.trunks.contains_key(&port) {
            return;
        }
        match Frame::parse(data) {
            Ok(Frame::Hello(h)) => self.on_hello(port, h),
            Ok(Frame::Ptse(p)) => self.on_ptse(port, p),
            Ok(Frame::Ack(v)) => {
                let now = self.now;
                if let Some(n) = self.trunks.get_mut(&port) {
                    for (o, s) in v {
                        n.has(o, s, true, now);
                    }
                }
            }
            Err(_) => self.counters.bad_frames += 1,
        }
    }

    fn on_hello(&mut self, port: PortId, h: Hello) {
        self.counters.hellos_in += 1;
        let now = self.now;
        let me = self.cfg.node;
        let Some(n) = self.trunks.get_mut(&port) else {
            return;
        };
        if h.node == me || h.node.0 == 0 {
            return; // a looped trunk, or nonsense
        }
        let old = n.peer;
        n.peer = Some((h.node, h.port));
        n.last_heard = now;
        let two_way = h.remote_node == me && h.remote_port == logical_port(port);
        let was = n.two_way;
        let changed_peer = old.is_some_and(|o| o != (h.node, h.port));
        let answer_now = old != n.peer || (two_way != was);
        if was && (!two_way || changed_peer) {
            n.two_way = false;
            n.unacked.clear();
            let node = old.map_or(h.node, |o| o.0);
            self.events.push_back(RouterEvent::Down { port, node });
            self.pending = Some(now);
        }
        let n = self.trunks.get_mut(&port).expect("looked up above");
        if two_way && !n.two_way {
            n.two_way = true;
            self.events
                .push_back(RouterEvent::Up { port, node: h.node });
            // Topology changed: originate now, then give the neighbour everything.
            self.originate();
            let origins: Vec<NodeId> = self.db.keys().copied().collect();
            for o in origins {
                if o == me {
                    continue; // flooded by `originate`
                }
                let seq = self.db[&o].ptse.seq;
                self.send_ptse(port, o);
                if let Some(n) = self.trunks.get_mut(&port) {
                    n.sent(o, seq, now);
                }
            }
        }
        if answer_now {
            self.send_hello(port);
        }
    }

    fn on_ptse(&mut self, port: PortId, p: Ptse) {
        let now = self.now;
        if let Some(n) = self.trunks.get_mut(&port) {
            n.acks.push((p.origin, p.seq));
        }
        if p.origin == self.cfg.node {
            // An instance of ours from before a restart: jump past it.
            if p.seq >= self.seq {
                self.seq = p.seq;
                self.originate();
            }
            return;
        }
        let newer = self.db.get(&p.origin).is_none_or(|s| p.seq > s.ptse.seq);
        if !newer {
            // The neighbour has this instance (or a newer one): no need to send it.
            if let Some(n) = self.trunks.get_mut(&port) {
                n.has(p.origin, p.seq, false, now);
            }
            return;
        }
        if p.lifetime_ms == 0 {
            self.db.remove(&p.origin);
            return;
        }
        let origin = p.origin;
        let expires = now + Duration::from_millis(u64::from(p.lifetime_ms));
        self.db.insert(origin, Stored { ptse: p, expires });
        self.counters.ptses_installed += 1;
        if let Some(n) = self.trunks.get_mut(&port) {
            n.unacked.remove(&origin);
        }
        self.flood(origin, Some(port));
    }

    /// Timers due by `now`: hellos, dead neighbours, retransmissions, ageing,
    /// origination.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        let now = self.now;
        let ports: Vec<PortId> = self.trunks.keys().copied().collect();
        for p in ports {
            let n = &self.trunks[&p];
            if n.peer.is_some() && now.saturating_duration_since(n.last_heard) >= self.cfg.dead {
                let n = self.trunks.get_mut(&p).expect("listed");
                let (node, _) = n.peer.take().expect("checked");
                let was = std::mem::take(&mut n.two_way);
                n.unacked.clear();
                n.acks.clear();
                self.counters.neighbours_lost += 1;
                if was {
                    self.events.push_back(RouterEvent::Down { port: p, node });
                    self.pending = Some(now);
                }
            }
            if self.trunks[&p].next_hello <= now {
                self.send_hello(p);
            }
            let due: Vec<NodeId> = self.trunks[&p]
                .unacked
                .iter()
                .filter(|(_, u)| u.next <= now)
                .map(|(o, _)| *o)
                .collect();
            if !due.is_empty() {
                // RFC 6298 §5.5: the timeout doubles until a fresh sample.
                if let Some(n) = self.trunks.get_mut(&p) {
                    n.rtt.on_timeout();
                }
            }
            for o in due {
                match self.db.get(&o).map(|s| s.ptse.seq) {
                    Some(seq) => {
                        self.send_ptse(p, o);
                        self.counters.retransmits += 1;
                        if let Some(n) = self.trunks.get_mut(&p) {
                            let next = now + n.rtt.rto();
                            n.unacked.insert(
                                o,
                                Unacked {
                                    seq,
                                    next,
                                    sent_once: None,
                                },
                            );
                        }
                    }
                    None => {
                        if let Some(n) = self.trunks.get_mut(&p) {
                            n.unacked.remove(&o);
                        }
                    }
                }
            }
        }
        let me = self.cfg.node;
        self.db.retain(|o, s| *o == me || s.expires > now);
        if self.pending.is_some_and(|t| t <= now) || (self.seq > 0 && self.next_refresh <= now) {
            self.originate();
        }
    }

    /// The earliest instant [`Router::handle_timeout`] has work at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.pending;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if self.seq > 0 {
            at(self.next_refresh);
        }
        for n in self.trunks.values() {
            at(n.next_hello);
            if n.peer.is_some() {
                at(n.last_heard + self.cfg.dead);
            }
            for u in n.unacked.values() {
                at(u.next);
            }
        }
        for (o, s) in &self.db {
            if *o != self.cfg.node {
                at(s.expires);
            }
        }
        t
    }

    /// The next frame to send: (trunk, frame for its VPI 0/VCI 18).
    pub fn poll_transmit(&mut self) -> Option<(PortId, Bytes)> {
        if self.out.is_empty() {
            let ports: Vec<PortId> = self.trunks.keys().copied().collect();
            for p in ports {
                let acks = std::mem::take(&mut self.trunks.get_mut(&p).expect("listed").acks);
                for chunk in acks.chunks(255) {
                    self.out
                        .push_back((p, Bytes::from(Frame::Ack(chunk.to_vec()).emit())));
                }
            }
        }
        self.out.pop_front()
    }

    /// The next neighbour change.
    pub fn poll_event(&mut self) -> Option<RouterEvent> {
        self.events.pop_front()
    }

    /// Whether `port`'s neighbour is two-way, and who it is.
    pub fn neighbour(&self, port: PortId) -> Option<NodeId> {
        self.trunks
            .get(&port)
            .filter(|n| n.two_way)
            .and_then(|n| n.peer.map(|p| p.0))
    }

    /// The database as rows, origin order.
    pub fn database(&self) -> Vec<DbRow> {
        self.db
            .iter()
            .map(|(o, s)| DbRow {
                origin: o.0,
                seq: s.ptse.seq,
                expires_in_ms: s.expires.saturating_duration_since(self.now).as_millis() as u64,
                links: s
                    .ptse
                    .links
                    .iter()
                    .map(|l| {
                        format!(
                            "{}→{}:{} {}/{} cells/s",
                            l.port, l.to.0, l.to_port, l.avail_cbr, l.max_cells
                        )
                    })
                    .collect(),
                prefixes: s.ptse.prefixes.iter().map(|p| p.to_string()).collect(),
            })
            .collect()
    }

    /// The nodes advertising the longest prefix of `called` (and its length).
    fn destinations(&self, called: &AtmAddr) -> Vec<NodeId> {
        let mut best = None;
        let mut nodes = Vec::new();
        for (o, s) in &self.db {
            let Some(len) = s
                .ptse
                .prefixes
                .iter()
                .filter(|p| p.matches(called))
                .map(Prefix::len)
                .max()
            else {
                continue;
            };
            match best {
                Some(b) if len < b => {}
                Some(b) if len == b => nodes.push(*o),
                _ => {
                    best = Some(len);
                    nodes = vec![*o];
                }
            }
        }
        nodes
    }

    /// Whether the longest prefix of `called` in the database is this switch's own.
    pub fn is_local(&self, called: &AtmAddr) -> bool {
        self.destinations(called).contains(&self.cfg.node)
    }

    /// The least-weight path from this switch to a node reaching `called`, over links
    /// advertised by both ends with `fwd` cells/s available forward and `bwd`
    /// backward, avoiding what `blocked` names; as a DTL whose first entry is this
    /// switch (pointer on it) and whose last is the destination with port 0.
    pub fn path(
        &self,
        called: &AtmAddr,
        fwd: u64,
        bwd: u64,
        blocked: &[Blocked],
    ) -> Result<Dtl, NoPath> {
        let dests = self.destinations(called);
        if dests.is_empty() {
            return Err(NoPath::Unreachable);
        }
        let dist = self.shortest(fwd, bwd, blocked);
        let Some(dest) = dests
            .iter()
            .filter_map(|n| dist.get(n).map(|&(d, _)| (d, *n)))
            .min()
            .map(|(_, n)| n)
        else {
            return Err(NoPath::NoCapacity);
        };
        Ok(Dtl {
            current: 0,
            hops: hops_to(&dist, dest),
        })
    }

    /// Least-weight paths from this switch over links both ends advertise with `fwd`
    /// and `bwd` cells/s free, avoiding `blocked`: each reached node's distance and
    /// the (node, port) it is reached from.
    fn shortest(&self, fwd: u64, bwd: u64, blocked: &[Blocked]) -> Tree {
        let me = self.cfg.node;
        // Dijkstra; ties go to the lower node number, so paths are deterministic.
        let mut dist: Tree = BTreeMap::new();
        let mut heap = BinaryHeap::new();
        dist.insert(me, (0, None));
        heap.push(std::cmp::Reverse((0u64, me)));
        while let Some(std::cmp::Reverse((d, u))) = heap.pop() {
            if dist.get(&u).is_some_and(|&(x, _)| x < d) {
                continue;
            }
            let Some(su) = self.db.get(&u) else { continue };
            for l in &su.ptse.links {
                let v = l.to;
                if blocked.iter().any(|b| match *b {
                    Blocked::Node(n) => n == v,
                    Blocked::Link { from, port, .. } => from == u && port == l.port,
                }) {
                    continue;
                }
                // Both ends must advertise the link: a dead node's old PTSE does not
                // make its links usable.
                let Some(back) = self.db.get(&v).and_then(|sv| {
                    sv.ptse
                        .links
                        .iter()
                        .find(|b| b.to == u && b.port == l.to_port && b.to_port == l.port)
                }) else {
                    continue;
                };
                if u64::from(l.avail_cbr) < fwd || u64::from(back.avail_cbr) < bwd {
                    continue;
                }
                let nd = d + u64::from(l.weight.max(1));
                if dist.get(&v).is_none_or(|&(x, _)| nd < x) {
                    dist.insert(v, (nd, Some((u, l.port))));
                    heap.push(std::cmp::Reverse((nd, v)));
                }
            }
        }
        dist
    }

    /// The route to every other node in the database that reaches a prefix, for
    /// best effort (no capacity asked): (node, the nodes on the way, ingress first),
    /// empty if it is unreachable now.
    pub fn routes(&self) -> Vec<(NodeId, Vec<NodeId>)> {
        let dist = self.shortest(0, 0, &[]);
        self.db
            .iter()
            .filter(|(o, s)| **o != self.cfg.node && !s.ptse.prefixes.is_empty())
            .map(|(o, _)| {
                let path = if dist.contains_key(o) {
                    hops_to(&dist, *o).iter().map(|h| h.node).collect()
                } else {
                    Vec::new()
                };
                (*o, path)
            })
            .collect()
    }
}

/// Each reached node's distance and the (node, port) it is reached from.
type Tree = BTreeMap<NodeId, (u64, Option<(NodeId, u32)>)>;

/// The DTL entries from the root of `dist` to `dest` (port 0 on `dest`).
fn hops_to(dist: &Tree, dest: NodeId) -> Vec<DtlHop> {
    let mut hops = vec![DtlHop {
        node: dest,
        port: 0,
    }];
    let mut at = dest;
    while let Some(&(_, Some((prev, port)))) = dist.get(&at) {
        hops.push(DtlHop { node: prev, port });
        at = prev;
    }
    hops.reverse();
    hops
}

fn ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
