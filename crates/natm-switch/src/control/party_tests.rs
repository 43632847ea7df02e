//! Point-to-multipoint calls through the control plane, in virtual time: scripted
//! hosts (bare `Saal`s, what a sigd drives) on host ports of one switch, or of two
//! switches joined by a trunk; each leaf host answers SETUP and ADD PARTY at once.

use std::net::SocketAddr;

use bytes::Bytes;
use natm_proto::sig::call::{PartyRef, MAX_PARTIES};
use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, Saal, SigEvent};
use natm_proto::wire::addr::{party, AtmAddr, HostsFile};
use natm_proto::wire::q2931::{ConnectionId, NatmParams};
use natm_proto::wire::vcframe;

use super::*;
use crate::{DropCause, PortConfig, Transmit, Verdict};

const MS: Duration = Duration::from_millis(1);
const PRESERVE: Duration = Duration::from_millis(100);

/// Host `h`'s address.
pub(super) fn addr(h: usize) -> AtmAddr {
    format!("47.0005.80ffe1000000f21a26d8.0020ea000e{:02x}.00", h + 1)
        .parse()
        .unwrap()
}

fn prefix(h: usize) -> Prefix {
    Prefix::parse(
        &format!("47.0005.80ffe1000000f21a26d8.0020ea000e{:02x}", h + 1),
        &HostsFile::default(),
    )
    .unwrap()
}

pub(super) fn sock(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Where a signalling link ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Host(usize),
    Switch(usize, PortId),
}

pub(super) struct Node {
    pub(super) sw: Switch,
    pub(super) ctl: Control,
    outputs: Vec<Output>,
}

/// Hosts and switches joined by signalling links. Host 0 is the root; every other
/// host answers a SETUP or ADD PARTY at once (unless `refuse` says otherwise).
pub(super) struct Net {
    pub(super) now: Instant,
    pub(super) nodes: Vec<Node>,
    pub(super) hosts: Vec<Saal>,
    alive: Vec<bool>,
    pub(super) events: Vec<Vec<CallEvent>>,
    /// (switch, port) ↔ the other end.
    links: Vec<((usize, PortId), End)>,
    /// Leaves that refuse with this cause instead of answering (0: a SETUP is left
    /// unanswered, an ADD PARTY answered).
    refuse: Vec<Option<u8>>,
    /// SETUPs each host was offered: its n-th call receives on label 100n + 100 + h.
    offers: Vec<u16>,
    /// The QoS each host answers a SETUP with (`None`: none, as offered).
    pub(super) answers: Vec<Option<Qos>>,
}

impl Net {
    /// One switch; host `h` on port `h`, each port's line `lines[h]` bit/s.
    pub(super) fn star(lines: &[u64]) -> Net {
        let mut sw = Switch::new();
        let ports: Vec<PortId> = lines
            .iter()
            .map(|&l| sw.add_port(PortConfig::new(l)).unwrap())
            .collect();
        let routes = ports
            .iter()
            .enumerate()
            .map(|(h, p)| (prefix(h), *p))
            .collect();
        let mut n = Net::empty(lines.len());
        n.add_switch(
            sw,
            routes,
            &ports
                .iter()
                .map(|p| (*p, PortRole::Host))
                .collect::<Vec<_>>(),
        );
        for (h, p) in ports.iter().enumerate() {
            n.links.push(((0, *p), End::Host(h)));
        }
        n.start()
    }

    /// Two switches: switch 0 has the root (host 0) on port 0, host 1 on port 1 and a
    /// trunk on port 2 to switch 1's port 0; hosts 2 and 3 are on switch 1's ports 1
    /// and 2.
    fn chain() -> Net {
        Net::chain_with(155_520_000, 155_520_000)
    }

    /// [`Net::chain`] with the trunk's line `trunk` bit/s and the lines of switch 1's
    /// host ports `far`; the others are 155.52 Mbit/s.
    pub(super) fn chain_with(trunk: u64, far: u64) -> Net {
        let mut n = Net::empty(4);
        let line = 155_520_000;
        let mut s0 = Switch::new();
        let p: Vec<PortId> = [line, line, trunk]
            .iter()
            .map(|&l| s0.add_port(PortConfig::new(l)).unwrap())
            .collect();
        let routes0 = vec![
            (prefix(0), p[0]),
            (prefix(1), p[1]),
            (prefix(2), p[2]),
            (prefix(3), p[2]),
        ];
        n.add_switch(
            s0,
            routes0,
            &[
                (p[0], PortRole::Host),
                (p[1], PortRole::Host),
                (p[2], PortRole::Switch),
            ],
        );
        let mut s1 = Switch::new();
        let q: Vec<PortId> = [trunk, far, far]
            .iter()
            .map(|&l| s1.add_port(PortConfig::new(l)).unwrap())
            .collect();
        let routes1 = vec![
            (prefix(0), q[0]),
            (prefix(1), q[0]),
            (prefix(2), q[1]),
            (prefix(3), q[2]),
        ];
        n.add_switch(
            s1,
            routes1,
            &[
                (q[0], PortRole::Switch),
                (q[1], PortRole::Host),
                (q[2], PortRole::Host),
            ],
        );
        n.links.push(((0, p[0]), End::Host(0)));
        n.links.push(((0, p[1]), End::Host(1)));
        n.links.push(((0, p[2]), End::Switch(1, q[0])));
        n.links.push(((1, q[0]), End::Switch(0, p[2])));
        n.links.push(((1, q[1]), End::Host(2)));
        n.links.push(((1, q[2]), End::Host(3)));
        n.start()
    }

    fn empty(hosts: usize) -> Net {
        let now = Instant::from_nanos(1);
        Net {
            now,
            nodes: Vec::new(),
            hosts: (0..hosts)
                .map(|_| {
                    let mut s = Saal::new(ControlConfig::network_saal());
                    s.start(now);
                    s
                })
                .collect(),
            alive: vec![true; hosts],
            events: vec![Vec::new(); hosts],
            links: Vec::new(),
            refuse: vec![None; hosts],
            offers: vec![0; hosts],
            answers: vec![None; hosts],
        }
    }

    fn add_switch(
        &mut self,
        sw: Switch,
        routes: Vec<(Prefix, PortId)>,
        ports: &[(PortId, PortRole)],
    ) {
        let s = self.nodes.len() as u16;
        let mut ctl = Control::new(ControlConfig {
            name: format!("sw{s}"),
            routes,
            ..ControlConfig::default()
        });
        for (p, role) in ports {
            ctl.add_port(
                self.now,
                ControlPort {
                    port: *p,
                    name: format!("p{}", p.0),
                    role: *role,
                    data: sock(9000 + 100 * s + p.0),
                    // The lower switch takes the user's half on a trunk.
                    vcis: if *role == PortRole::Switch && s == 0 {
                        natm_proto::sig::vci::USER_HALF
                    } else {
                        natm_proto::sig::vci::NETWORK_HALF
                    },
                    link_cells: 353_207,
                    // A host's calls outlive its lost link for T309 (100 ms here).
                    preserve: Some(PRESERVE),
                    no_response: None,
                    screen_calling: true,
                    first_sq: None,
                },
            );
        }
        self.nodes.push(Node {
            sw,
            ctl,
            outputs: Vec::new(),
        });
    }

    fn start(mut self) -> Net {
        self.run(50 * MS);
        for n in &self.nodes {
            assert!(n.ctl.links().iter().all(|l| l.up), "links up");
        }
        self
    }

    fn host_port(&self, h: usize) -> (usize, PortId) {
        self.links
            .iter()
            .find(|(_, e)| *e == End::Host(h))
            .map(|(sp, _)| *sp)
            .unwrap()
    }

    fn deliver(&mut self, from: End, pdu: &[u8]) {
        let to = match from {
            End::Host(h) => {
                if !self.alive[h] {
                    return;
                }
                End::Switch(self.host_port(h).0, self.host_port(h).1)
            }
            End::Switch(s, p) => match self.links.iter().find(|(sp, _)| *sp == (s, p)) {
                Some((_, e)) => *e,
                None => return,
            },
        };
        match to {
            End::Host(h) if self.alive[h] => self.hosts[h].handle_frame(self.now, pdu),
            End::Host(_) => {}
            End::Switch(s, p) => self.nodes[s].ctl.handle_signal(self.now, p, pdu),
        }
    }

    /// A leaf's answer to what it was offered.
    fn answer(&mut self, h: usize, ev: &CallEvent) {
        let nth = self.offers[h];
        if matches!(ev, CallEvent::Incoming { .. }) {
            self.offers[h] += 1;
        }
        let accept = CallAccept {
            qos: self.answers[h],
            natm: NatmParams {
                data_endpoint: Some(sock(6000 + h as u16)),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, 100 * nth + 100 + h as u16)),
        };
        let now = self.now;
        match (ev, self.refuse[h]) {
            (CallEvent::Incoming { .. }, Some(0)) => {}
            (CallEvent::Incoming { call, .. }, None) => {
                self.hosts[h].accept(now, *call, accept).unwrap()
            }
            (CallEvent::Incoming { call, .. }, Some(c)) => {
                self.hosts[h].reject(now, *call, net_cause(c)).unwrap()
            }
            (CallEvent::PartyAddRequested { call, party, .. }, None | Some(0)) => self.hosts[h]
                .add_party_ack(now, *call, *party, &accept)
                .unwrap(),
            (CallEvent::PartyAddRequested { call, party, .. }, Some(c)) => self.hosts[h]
                .add_party_reject(now, *call, *party, net_cause(c))
                .unwrap(),
            _ => {}
        }
    }

    /// Moves every PDU (no delay) and fires timers for `d` of virtual time, 1 ms steps.
    pub(super) fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..200 {
                let mut moved = false;
                for h in 0..self.hosts.len() {
                    while let Some(pdu) = self.hosts[h].poll_transmit() {
                        moved = true;
                        self.deliver(End::Host(h), &pdu);
                    }
                    while let Some(e) = self.hosts[h].poll_event() {
                        moved = true;
                        if let SigEvent::Call(c) = e {
                            if h != 0 {
                                self.answer(h, &c);
                            }
                            self.events[h].push(c);
                        }
                    }
                }
                for s in 0..self.nodes.len() {
                    let node = &mut self.nodes[s];
                    let mut pdus = Vec::new();
                    while let Some(o) = node.ctl.poll_output(&mut node.sw) {
                        match o {
                            Output::Signal(p, pdu) => pdus.push((p, pdu)),
                            other => node.outputs.push(other),
                        }
                    }
                    for (p, pdu) in pdus {
                        moved = true;
                        self.deliver(End::Switch(s, p), &pdu);
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            for n in &mut self.nodes {
                n.sw.handle_timeout(self.now);
                if n.ctl.poll_timeout().is_some_and(|t| t <= self.now) {
                    n.ctl.handle_timeout(self.now);
                }
            }
            for h in &mut self.hosts {
                if h.poll_timeout().is_some_and(|t| t <= self.now) {
                    h.handle_timeout(self.now);
                }
            }
        }
    }

    pub(super) fn take(&mut self, h: usize) -> Vec<CallEvent> {
        std::mem::take(&mut self.events[h])
    }

    fn leaf(&self, h: usize) -> CallParams {
        let q: Qos = "cbr:pcr=10Mbps".parse().unwrap();
        CallParams {
            dtl: None,
            called: party(&addr(h)).unwrap(),
            calling: party(&addr(0)),
            sap: None,
            qos: q,
            natm: NatmParams {
                qos: Some(q.to_string()),
                data_endpoint: Some(sock(5000)),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, 40)),
            multipoint: true,
        }
    }

    /// The root calls leaf `first`: its call and the label it sends on.
    fn open(&mut self, first: usize) -> (CallId, u16) {
        let p = self.leaf(first);
        let call = self.hosts[0].setup(self.now, p).unwrap();
        self.run(10 * MS);
        let evs = self.take(0);
        let label = evs
            .iter()
            .find_map(|e| match e {
                CallEvent::Connected { params, .. } => params.conn_id.map(|c| c.vci),
                _ => None,
            })
            .unwrap_or_else(|| panic!("the root is connected: {evs:?}"));
        (call, label)
    }

    /// The root adds leaf `h` as party `eref`; the root's events.
    fn add(&mut self, call: CallId, eref: u16, h: usize) -> Vec<CallEvent> {
        let p = self.leaf(h);
        self.hosts[0].add_party(self.now, call, eref, &p).unwrap();
        self.run(10 * MS);
        self.take(0)
    }
}

fn ours(value: u16) -> PartyRef {
    PartyRef { value, ours: true }
}

fn added(evs: &[CallEvent], eref: u16) -> bool {
    evs.iter()
        .any(|e| matches!(e, CallEvent::PartyAdded { party, .. } if *party == ours(eref)))
}

fn rejected(evs: &[CallEvent], eref: u16) -> Option<u8> {
    evs.iter().find_map(|e| match e {
        CallEvent::PartyRejected { party, cause, .. } if *party == ours(eref) => {
            Some(cause.value.raw())
        }
        _ => None,
    })
}

fn dropped(evs: &[CallEvent], value: u16, ours: bool) -> Option<u8> {
    evs.iter().find_map(|e| match e {
        CallEvent::PartyDropped { party, cause, .. } if *party == (PartyRef { value, ours }) => {
            Some(cause.value.raw())
        }
        _ => None,
    })
}

pub(super) fn released(evs: &[CallEvent]) -> Option<u8> {
    evs.iter().find_map(|e| match e {
        CallEvent::Released { cause, .. } => Some(cause.value.raw()),
        _ => None,
    })
}

/// A frame from the root on its label, into switch `s`.
fn push(n: &mut Net, s: usize, port: PortId, vci: u16) -> Verdict {
    let now = n.now;
    n.nodes[s]
        .sw
        .handle_frame(
            now,
            port,
            vcframe::Repr::data(0, vci),
            Bytes::from_static(b"tpdu"),
        )
        .unwrap()
}

/// Every frame switch `s` sends on `port` now: their labels.
fn sent(n: &mut Net, s: usize, port: PortId) -> Vec<u16> {
    let mut v = Vec::new();
    let sw = &mut n.nodes[s].sw;
    let mut at = n.now;
    for _ in 0..64 {
        at = sw.port_timeout(port).unwrap_or(at).max(at);
        match sw.poll_transmit(at, port) {
            Some(Transmit::Frame { header, .. }) => v.push(header.vci),
            Some(Transmit::Cell(_)) => panic!("frame ports"),
            None => break,
        }
    }
    v
}

const GBPS: u64 = 1_000_000_000;

#[test]
fn a_root_and_three_leaves_on_host_ports_get_a_branch_each_and_every_frame_on_all() {
    let mut n = Net::star(&[GBPS; 4]);
    let (call, root_in) = n.open(1);
    assert!(added(&n.add(call, 1, 2), 1));
    assert!(added(&n.add(call, 2, 3), 2));
    // Each leaf was offered a multipoint SETUP of its own (a branch per host port).
    for h in 1..4 {
        assert!(
            n.take(h).iter().any(|e| matches!(e,
                CallEvent::Incoming { params, .. } if params.multipoint)),
            "leaf {h} offered a SETUP"
        );
    }
    let row = &n.nodes[0].ctl.calls()[0];
    assert_eq!(row.a.1, Some(root_in));
    let ports: Vec<u16> = row.branches.iter().map(|b| b.port).collect();
    assert_eq!(ports, vec![1, 2, 3]);
    let parties: Vec<Vec<u16>> = row.branches.iter().map(|b| b.parties.clone()).collect();
    assert_eq!(parties, vec![vec![0], vec![1], vec![2]]);
    assert!(row.branches.iter().all(|b| b.connected));
    assert_eq!(row.reserved_cells.0, 3 * row.branches[0].reserved_cells);
    // Each branch reserved on its own port only; nothing backward on the root's.
    let links = n.nodes[0].ctl.links();
    assert_eq!(links[0].reserved_cells, 0);
    assert!(links[1..].iter().all(|l| l.reserved_cells > 20_000));
    // Data: the root's frame leaves on every branch with that leaf's label.
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    for h in 1..4u16 {
        assert_eq!(sent(&mut n, 0, PortId(h)), vec![100 + h], "leaf {h}");
    }
    // One-way: a leaf's frame on its label reaches nobody.
    assert_eq!(
        push(&mut n, 0, PortId(2), 102),
        Verdict::Dropped(DropCause::UnknownVc)
    );
    // The host ports learnt where each leaf's copies go, and where the root sends from.
    let outs = &n.nodes[0].outputs;
    assert!(outs.contains(&Output::Source(
        VcAddr::new(PortId(0), 0, root_in),
        Some(sock(5000))
    )));
    for h in 1..4u16 {
        assert!(outs.contains(&Output::Dest(
            VcAddr::new(PortId(h), 0, 100 + h),
            Some(sock(6000 + h))
        )));
    }
}

#[test]
fn a_leaf_that_releases_becomes_drop_party_upstream_and_the_others_keep_receiving() {
    let mut n = Net::star(&[GBPS; 4]);
    let (call, root_in) = n.open(1);
    n.add(call, 1, 2);
    n.add(call, 2, 3);
    // Leaf 2 (party 1) hangs up.
    let leaf_call = n
        .take(2)
        .iter()
        .find_map(|e| match e {
            CallEvent::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .unwrap();
    n.hosts[2].release(n.now, leaf_call, net_cause(31)).unwrap();
    n.run(10 * MS);
    let evs = n.take(0);
    assert_eq!(dropped(&evs, 1, true), Some(31), "{evs:?}");
    assert_eq!(released(&evs), None);
    let row = &n.nodes[0].ctl.calls()[0];
    assert_eq!(
        row.branches.iter().map(|b| b.port).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(
        n.nodes[0].ctl.links()[2].reserved_cells,
        0,
        "its reservation back"
    );
    assert!(n.nodes[0]
        .outputs
        .contains(&Output::Dest(VcAddr::new(PortId(2), 0, 102), None)));
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![101]);
    assert_eq!(sent(&mut n, 0, PortId(2)), Vec::<u16>::new());
    assert_eq!(sent(&mut n, 0, PortId(3)), vec![103]);

    // The first leaf (party 0) dies: its sigd's link goes, the branch with it.
    n.alive[1] = false;
    n.nodes[0].ctl.port_lost(n.now, PortId(1));
    n.run(10 * MS);
    assert_eq!(dropped(&n.take(0), 0, true), None, "kept for T309");
    n.run(PRESERVE);
    let evs = n.take(0);
    assert_eq!(dropped(&evs, 0, true), Some(27), "party 0 dropped: {evs:?}");
    assert_eq!(released(&evs), None);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(3)), vec![103]);

    // The last leaf goes: the call is released upstream with its cause.
    let leaf_call = n
        .take(3)
        .iter()
        .find_map(|e| match e {
            CallEvent::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .unwrap();
    n.hosts[3].release(n.now, leaf_call, net_cause(16)).unwrap();
    n.run(10 * MS);
    assert_eq!(released(&n.take(0)), Some(16));
    assert_eq!(n.nodes[0].ctl.call_count(), 0);
    assert!(n.nodes[0]
        .ctl
        .links()
        .iter()
        .all(|l| l.reserved_cells == 0 && l.calls == 0));
    assert_eq!(n.nodes[0].sw.stat().vcs.len(), 0);
    assert_eq!(
        push(&mut n, 0, PortId(0), root_in),
        Verdict::Dropped(DropCause::UnknownVc)
    );
}

#[test]
fn a_branch_its_port_cannot_carry_is_refused_with_37_and_the_others_stay() {
    // Port 2's line is 5 Mbit/s: a 10 Mbit/s branch does not fit there.
    let mut n = Net::star(&[GBPS, GBPS, 5_000_000, GBPS]);
    let (call, root_in) = n.open(1);
    assert_eq!(rejected(&n.add(call, 1, 2), 1), Some(37));
    assert!(n.take(2).is_empty(), "never offered");
    assert!(added(&n.add(call, 2, 3), 2));
    let row = &n.nodes[0].ctl.calls()[0];
    assert_eq!(
        row.branches.iter().map(|b| b.port).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert_eq!(n.nodes[0].ctl.links()[2].reserved_cells, 0);
    // A leaf that refuses the branch itself: its cause upstream, the others stay.
    let mut m = Net::star(&[GBPS; 4]);
    m.refuse[2] = Some(21);
    let (mcall, mroot) = m.open(1);
    assert_eq!(rejected(&m.add(mcall, 1, 2), 1), Some(21));
    assert_eq!(m.nodes[0].ctl.links()[2].reserved_cells, 0);
    assert_eq!(m.nodes[0].ctl.links()[2].calls, 0);
    assert_eq!(push(&mut m, 0, PortId(0), mroot), Verdict::Queued);
    assert_eq!(sent(&mut m, 0, PortId(1)), vec![101]);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![101]);
    assert_eq!(sent(&mut n, 0, PortId(3)), vec![103]);
}

#[test]
fn the_roots_drop_party_releases_a_branch_and_its_release_clears_every_branch() {
    let mut n = Net::star(&[GBPS; 4]);
    let (call, root_in) = n.open(1);
    n.add(call, 1, 2);
    n.add(call, 2, 3);
    n.hosts[0]
        .drop_party(n.now, call, ours(2), net_cause(16))
        .unwrap();
    n.run(10 * MS);
    assert_eq!(dropped(&n.take(0), 2, true), Some(16));
    assert_eq!(released(&n.take(3)), Some(16), "leaf 3's branch released");
    assert_eq!(n.nodes[0].ctl.links()[3].reserved_cells, 0);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![101]);
    assert_eq!(sent(&mut n, 0, PortId(2)), vec![102]);
    assert_eq!(sent(&mut n, 0, PortId(3)), Vec::<u16>::new());

    n.hosts[0].release(n.now, call, net_cause(16)).unwrap();
    n.run(10 * MS);
    for h in [1, 2] {
        assert_eq!(released(&n.take(h)), Some(16), "leaf {h}");
    }
    assert_eq!(n.nodes[0].ctl.call_count(), 0);
    assert!(n.nodes[0]
        .ctl
        .links()
        .iter()
        .all(|l| l.reserved_cells == 0 && l.calls == 0));
    assert_eq!(n.nodes[0].sw.stat().vcs.len(), 0);
}

#[test]
fn leaves_behind_a_trunk_ride_one_branch_and_the_next_switch_branches() {
    let mut n = Net::chain();
    let (call, root_in) = n.open(1);
    assert!(added(&n.add(call, 1, 2), 1));
    assert!(added(&n.add(call, 2, 3), 2));
    // Switch 0: one branch to the trunk carrying parties 1 and 2.
    let row = &n.nodes[0].ctl.calls()[0];
    let b: Vec<(u16, Vec<u16>)> = row
        .branches
        .iter()
        .map(|b| (b.port, b.parties.clone()))
        .collect();
    assert_eq!(b, vec![(1, vec![0]), (2, vec![1, 2])]);
    assert_eq!(n.nodes[0].ctl.links()[2].calls, 1, "one call on the trunk");
    // Switch 1: the trunk's call is its root; a branch to each host.
    let row1 = &n.nodes[1].ctl.calls()[0];
    assert_eq!(
        row1.branches.iter().map(|b| b.port).collect::<Vec<_>>(),
        vec![1, 2]
    );
    // Data: switch 0 copies to leaf 1 and the trunk; switch 1 to leaves 2 and 3.
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![101]);
    let trunk = sent(&mut n, 0, PortId(2));
    assert_eq!(trunk.len(), 1);
    assert_eq!(trunk[0], row1.a.1.unwrap(), "switch 1's label");
    assert_eq!(push(&mut n, 1, PortId(0), trunk[0]), Verdict::Queued);
    assert_eq!(sent(&mut n, 1, PortId(1)), vec![102]);
    assert_eq!(sent(&mut n, 1, PortId(2)), vec![103]);

    // Leaf 3 hangs up: switch 1 drops its party on the trunk, switch 0 upstream; the
    // trunk's branch stays for leaf 2.
    let leaf_call = n
        .take(3)
        .iter()
        .find_map(|e| match e {
            CallEvent::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .unwrap();
    n.hosts[3].release(n.now, leaf_call, net_cause(31)).unwrap();
    n.run(10 * MS);
    let evs = n.take(0);
    assert_eq!(dropped(&evs, 2, true), Some(31), "{evs:?}");
    assert_eq!(released(&evs), None);
    assert_eq!(n.nodes[0].ctl.calls()[0].branches[1].parties, vec![1]);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(2)), trunk);
    assert_eq!(push(&mut n, 1, PortId(0), trunk[0]), Verdict::Queued);
    assert_eq!(sent(&mut n, 1, PortId(1)), vec![102]);
    assert_eq!(sent(&mut n, 1, PortId(2)), Vec::<u16>::new());

    // The root drops leaf 2: the trunk's last party, so its branch is released and
    // switch 1's call with it.
    n.hosts[0]
        .drop_party(n.now, call, ours(1), net_cause(16))
        .unwrap();
    n.run(10 * MS);
    assert_eq!(dropped(&n.take(0), 1, true), Some(16));
    assert_eq!(n.nodes[1].ctl.call_count(), 0);
    assert_eq!(n.nodes[0].ctl.links()[2].calls, 0);
    assert_eq!(n.nodes[0].ctl.calls()[0].branches.len(), 1);
    // The root releases: everything goes.
    n.hosts[0].release(n.now, call, net_cause(16)).unwrap();
    n.run(10 * MS);
    for node in &n.nodes {
        assert_eq!(node.ctl.call_count(), 0);
        assert!(node
            .ctl
            .links()
            .iter()
            .all(|l| l.reserved_cells == 0 && l.calls == 0));
    }
}

#[test]
fn hostile_party_messages_change_nothing_else() {
    let mut n = Net::star(&[GBPS; 4]);
    // ADD PARTY on a point-to-point call: cause 63, the call stays.
    let mut p2p = n.leaf(1);
    p2p.multipoint = false;
    let pcall = n.hosts[0].setup(n.now, p2p).unwrap();
    n.run(10 * MS);
    assert!(n
        .take(0)
        .iter()
        .any(|e| matches!(e, CallEvent::Connected { .. })));
    let evs = n.add(pcall, 1, 2);
    assert_eq!(rejected(&evs, 1), Some(63), "{evs:?}");
    assert_eq!(n.nodes[0].ctl.call_count(), 1);

    let (call, root_in) = n.open(1);
    n.add(call, 1, 2);
    // A party routed back to the root's own port: no route (cause 3).
    assert_eq!(rejected(&n.add(call, 9, 0), 9), Some(3));
    let before = n.nodes[0].ctl.calls();
    // DROP PARTY or ADD PARTY answers naming references the switch never used are
    // call control's to refuse (cause 89, counted): the control plane never sees them.
    // A leaf adding a party of its own: refused with 63, the call stays.
    let leaf_call = n
        .take(1)
        .iter()
        .find_map(|e| match e {
            CallEvent::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .unwrap();
    let p = n.leaf(3);
    n.hosts[1].add_party(n.now, leaf_call, 5, &p).unwrap();
    n.run(10 * MS);
    assert_eq!(rejected(&n.take(1), 5), Some(63));
    assert_eq!(n.nodes[0].ctl.calls(), before);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![201]);
    assert_eq!(sent(&mut n, 0, PortId(2)), vec![102]);

    // A flood of ADD PARTYs for leaves on port 2 past MAX_PARTIES: call control
    // refuses what is past its bound (cause 92); the switch holds at most that
    // many parties and the call carries on.
    for eref in 2..(MAX_PARTIES as u16 + 40) {
        let p = n.leaf(2);
        if n.hosts[0].add_party(n.now, call, eref, &p).is_err() {
            break;
        }
    }
    n.run(50 * MS);
    let rows = n.nodes[0].ctl.calls();
    let row = rows.iter().find(|r| !r.branches.is_empty()).unwrap();
    let parties: usize = row.branches.iter().map(|b| b.parties.len()).sum();
    assert!(
        parties > MAX_PARTIES / 2 && parties <= MAX_PARTIES + 1,
        "{parties}"
    );
    assert_eq!(row.branches.len(), 2, "ridden, not a branch per party");
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![201]);
    assert_eq!(sent(&mut n, 0, PortId(2)), vec![102]);
}

#[test]
fn a_multipoint_call_refuses_modification_with_63() {
    let mut n = Net::star(&[GBPS; 4]);
    let (call, _) = n.open(1);
    let td = natm_proto::sig::call::traffic_descriptor(&"cbr:pcr=20Mbps".parse().unwrap(), 353_207);
    n.hosts[0].modify(n.now, call, td).unwrap();
    n.run(10 * MS);
    let evs = n.take(0);
    assert!(
        evs.iter().any(|e| matches!(e,
            CallEvent::ModifyRefused { cause, .. } if cause.value.raw() == 63)),
        "{evs:?}"
    );
    assert_eq!(n.nodes[0].ctl.call_count(), 1);
}

#[test]
fn a_party_for_a_branch_still_being_set_up_waits_for_its_connect() {
    let mut n = Net::star(&[GBPS; 4]);
    // Host 2 holds its SETUP: the branch to port 2 is being set up.
    n.refuse[2] = Some(0);
    let (call, root_in) = n.open(1);
    assert!(n.add(call, 1, 2).is_empty());
    // A second leaf on host 2 waits for that branch instead of opening another.
    assert!(n.add(call, 2, 2).is_empty());
    let row = &n.nodes[0].ctl.calls()[0];
    assert_eq!(row.branches.len(), 2);
    assert!(!row.branches[1].connected);
    assert_eq!(row.branches[1].parties, vec![1, 2]);
    assert_eq!(n.nodes[0].ctl.links()[2].calls, 1, "one SETUP on port 2");
    // The root drops the party whose SETUP it was; the branch stays for party 2.
    n.hosts[0]
        .drop_party(n.now, call, ours(1), net_cause(16))
        .unwrap();
    n.run(10 * MS);
    assert_eq!(dropped(&n.take(0), 1, true), Some(16));
    // Host 2 answers now: party 2 rides the branch, and the branch's first party,
    // which no root party has any more, is dropped at host 2.
    let leaf = n
        .take(2)
        .iter()
        .find_map(|e| match e {
            CallEvent::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .unwrap();
    let accept = CallAccept {
        qos: None,
        natm: NatmParams {
            data_endpoint: Some(sock(6002)),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 102)),
    };
    n.hosts[2].accept(n.now, leaf, accept).unwrap();
    n.run(10 * MS);
    assert!(added(&n.take(0), 2));
    let evs = n.take(2);
    assert!(
        evs.iter()
            .any(|e| matches!(e, CallEvent::PartyAddRequested { .. })),
        "{evs:?}"
    );
    assert!(dropped(&evs, 0, false).is_some(), "{evs:?}");
    let row = &n.nodes[0].ctl.calls()[0];
    assert_eq!(row.branches[1].parties, vec![2]);
    assert!(row.branches[1].connected);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    assert_eq!(sent(&mut n, 0, PortId(1)), vec![101]);
    assert_eq!(sent(&mut n, 0, PortId(2)), vec![102]);
}

#[test]
fn a_stopping_switch_releases_every_branch_at_once_with_what_they_hold_flushed() {
    let mut n = Net::star(&[GBPS; 4]);
    let (call, root_in) = n.open(1);
    n.add(call, 1, 2);
    assert_eq!(push(&mut n, 0, PortId(0), root_in), Verdict::Queued);
    let now = n.now;
    let node = &mut n.nodes[0];
    node.ctl.shutdown(now, &mut node.sw);
    assert_eq!(node.ctl.draining(), 0, "nothing waits to drain");
    assert_eq!(node.ctl.call_count(), 0);
    assert_eq!(node.sw.stat().vcs.len(), 0);
    n.run(10 * MS);
    for h in 0..3 {
        assert_eq!(released(&n.take(h)), Some(41), "host {h}");
    }
}

/// A small deterministic generator for the random walk below (no new dependency).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_adds_drops_refusals_and_hang_ups_keep_reservations_and_branches_consistent() {
    // What the walk reached, so that it is known to exercise the paths.
    let (mut most_branches, mut most_parties, mut reopened) = (0, 0, 0);
    for seed in 1..=12u64 {
        let mut rng = Lcg(seed);
        // Port 3's line takes one of this call's 10 Mbit/s branches, not two.
        let mut n = Net::star(&[GBPS, GBPS, GBPS, 15_000_000]);
        let (mut call, _) = n.open(1);
        let mut open = true;
        for step in 0..60 {
            match rng.below(6) {
                0 | 1 if open => {
                    let eref = 1 + rng.below(12) as u16;
                    let leaf = 1 + rng.below(3) as usize;
                    let p = n.leaf(leaf);
                    let _ = n.hosts[0].add_party(n.now, call, eref, &p);
                }
                2 if open => {
                    let party = PartyRef {
                        value: rng.below(13) as u16,
                        ours: true,
                    };
                    let _ = n.hosts[0].drop_party(n.now, call, party, net_cause(16));
                }
                3 => {
                    // A leaf hangs up one of its calls.
                    let h = 1 + rng.below(3) as usize;
                    let calls: Vec<CallId> = n.hosts[h].calls().calls().map(|(c, _)| c).collect();
                    if let Some(c) = calls.first() {
                        let _ = n.hosts[h].release(n.now, *c, net_cause(31));
                    }
                }
                4 => {
                    let h = 1 + rng.below(3) as usize;
                    n.refuse[h] = [None, None, Some(21)][rng.below(3) as usize];
                }
                _ => {}
            }
            n.run(5 * MS);
            if released(&n.take(0)).is_some() {
                open = false;
            }
            let ctl = &n.nodes[0].ctl;
            let rows = ctl.calls();
            let links = ctl.links();
            assert!(rows.len() <= 1, "seed {seed} step {step}");
            for p in 1..4u16 {
                let want: u64 = rows
                    .iter()
                    .flat_map(|r| r.branches.iter())
                    .filter(|b| b.port == p)
                    .map(|b| b.reserved_cells)
                    .sum();
                assert_eq!(
                    links[usize::from(p)].reserved_cells,
                    want,
                    "seed {seed} step {step} port {p}: {rows:?}"
                );
                let line = n.nodes[0]
                    .sw
                    .port_config(PortId(p))
                    .unwrap()
                    .cells_per_sec();
                assert!(links[usize::from(p)].reserved_cells <= line, "admitted");
            }
            assert_eq!(links[0].reserved_cells, 0);
            let connected = rows
                .iter()
                .flat_map(|r| r.branches.iter())
                .filter(|b| b.connected)
                .count();
            assert_eq!(
                n.nodes[0].sw.stat().vcs.len(),
                connected,
                "seed {seed} step {step}"
            );
            for r in &rows {
                most_branches = most_branches.max(r.branches.len());
                most_parties = most_parties.max(r.branches.iter().map(|b| b.parties.len()).sum());
                assert!(!r.branches.is_empty());
                assert!(r.branches.iter().all(|b| !b.parties.is_empty()), "{r:?}");
            }
            if !open {
                assert!(rows.is_empty(), "seed {seed} step {step}: {rows:?}");
                n.refuse[1] = None;
                reopened += 1;
                let (c, _) = n.open(1);
                call = c;
                open = true;
            }
        }
        n.hosts[0].release(n.now, call, net_cause(16)).unwrap();
        n.run(10 * MS);
        let ctl = &n.nodes[0].ctl;
        assert_eq!(ctl.call_count(), 0, "seed {seed}");
        assert!(ctl
            .links()
            .iter()
            .all(|l| l.reserved_cells == 0 && l.calls == 0));
        assert_eq!(n.nodes[0].sw.stat().vcs.len(), 0);
    }
    assert!(
        most_branches == 3 && most_parties >= 5 && reopened >= 3,
        "{most_branches} {most_parties} {reopened}"
    );
}
