//! Routing through control planes in virtual time (issue 33): four switches in a ring
//! (two paths between any two), a host behind each on port 0; switch i's port 1 is
//! a trunk to switch i+1's port 2. Hosts are bare `Saal`s that answer every call.

use std::net::SocketAddr;

use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, Saal, SigEvent};
use natm_proto::wire::addr::{party, AtmAddr, HostsFile};
use natm_proto::wire::q2931::{ConnectionId, NatmParams, NodeId};

use super::*;
use crate::routing::RoutingConfig;
use crate::PortConfig;

const MS: Duration = Duration::from_millis(1);

fn sock(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Host i's address: +44(i+1)0 and a digit.
fn host_addr(i: usize) -> AtmAddr {
    format!("+44{}01", i + 1).parse().unwrap()
}

struct Ring {
    now: Instant,
    sw: Vec<Switch>,
    ctl: Vec<Control>,
    hosts: Vec<Saal>,
    events: Vec<Vec<CallEvent>>,
    /// Trunk k joins switch k's port 1 and switch k+1's port 2; cut ones carry
    /// nothing.
    cut: Vec<bool>,
    label: u16,
}

impl Ring {
    /// `trunk_bps[k]`: trunk k's line rate (both ends).
    fn new(trunk_bps: [u64; 4], routing: bool) -> Ring {
        let n = 4;
        let now = Instant::from_nanos(1);
        let h = HostsFile::default();
        let mut sw = Vec::new();
        let mut ctl = Vec::new();
        for i in 0..n {
            let mut s = Switch::new();
            // As a switchd numbers them: trunks first (port 0 east, 1 west), so
            // that port 0 is a trunk in DTLs too.
            let p1 = s.add_port(PortConfig::new(trunk_bps[i])).unwrap();
            let p2 = s
                .add_port(PortConfig::new(trunk_bps[(i + n - 1) % n]))
                .unwrap();
            let host = s.add_port(PortConfig::new(155_520_000)).unwrap();
            let cfg = ControlConfig {
                name: format!("s{}", i + 1),
                routes: vec![(Prefix::parse(&format!("+44{}0", i + 1), &h).unwrap(), host)],
                routing: routing.then(|| RoutingConfig::lab(NodeId(i as u32 + 1))),
                ..ControlConfig::default()
            };
            let mut c = Control::new(cfg);
            for (p, role, vcis) in [
                (p1, PortRole::Switch, natm_proto::sig::vci::USER_HALF),
                (p2, PortRole::Switch, natm_proto::sig::vci::NETWORK_HALF),
                (host, PortRole::Host, natm_proto::sig::vci::NETWORK_HALF),
            ] {
                c.add_port(
                    now,
                    ControlPort {
                        port: p,
                        name: format!("s{}p{}", i + 1, p.0),
                        role,
                        data: sock(9000 + 10 * i as u16 + p.0),
                        vcis,
                        link_cells: 353_207,
                        preserve: None,
                        no_response: None,
                        screen_calling: true,
                        first_sq: None,
                    },
                );
            }
            sw.push(s);
            ctl.push(c);
        }
        let hosts = (0..n)
            .map(|_| {
                let mut s = Saal::new(ControlConfig::network_saal());
                s.start(now);
                s
            })
            .collect();
        let mut r = Ring {
            now,
            sw,
            ctl,
            hosts,
            events: vec![Vec::new(); n],
            cut: vec![false; n],
            label: 40,
        };
        r.run(300 * MS);
        r
    }

    /// Where (switch, port label) leads: (switch, port label, trunk).
    fn peer(&self, i: usize, p: u16) -> Option<(usize, u16, usize)> {
        match p {
            1 => Some(((i + 1) % 4, 2, i)),
            2 => Some(((i + 3) % 4, 1, (i + 3) % 4)),
            _ => None,
        }
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..200 {
                let mut moved = false;
                for i in 0..4 {
                    while let Some(pdu) = self.hosts[i].poll_transmit() {
                        moved = true;
                        self.ctl[i].handle_signal(self.now, pid(0), &pdu);
                    }
                    while let Some(e) = self.hosts[i].poll_event() {
                        if let SigEvent::Call(c) = e {
                            self.answer(i, &c);
                            self.events[i].push(c);
                        }
                    }
                    while let Some(o) = self.ctl[i].poll_output(&mut self.sw[i]) {
                        moved = true;
                        let (p, pdu, routing) = match o {
                            Output::Signal(p, pdu) => (p, pdu, false),
                            Output::Routing(p, f) => (p, f, true),
                            _ => continue,
                        };
                        if p == pid(0) {
                            self.hosts[i].handle_frame(self.now, &pdu);
                            continue;
                        }
                        let Some((j, q, k)) = self.peer(i, label(p)) else {
                            continue;
                        };
                        if self.cut[k] {
                            continue;
                        }
                        if routing {
                            self.ctl[j].handle_routing(self.now, pid(q), &pdu);
                        } else {
                            self.ctl[j].handle_signal(self.now, pid(q), &pdu);
                        }
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            for i in 0..4 {
                self.sw[i].handle_timeout(self.now);
                if self.hosts[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.hosts[i].handle_timeout(self.now);
                }
                if self.ctl[i].poll_timeout().is_some_and(|t| t <= self.now) {
                    self.ctl[i].handle_timeout(self.now);
                }
            }
        }
    }

    /// Hosts answer every call.
    fn answer(&mut self, i: usize, e: &CallEvent) {
        if let CallEvent::Incoming { call, .. } = e {
            let accept = CallAccept {
                qos: None,
                natm: NatmParams {
                    data_endpoint: Some(sock(6000 + i as u16)),
                    cookie: Some(77),
                    ..NatmParams::default()
                },
                conn_id: Some(ConnectionId::exclusive(0, self.label)),
            };
            self.label += 1;
            self.hosts[i].accept(self.now, *call, accept).unwrap();
        }
    }

    /// Host `from` calls host `to` with `qos`.
    fn call(&mut self, from: usize, to: usize, qos: &str) -> CallId {
        self.call_with(from, to, qos, false)
    }

    /// [`Ring::call`], point-to-multipoint if `multipoint`.
    fn call_with(&mut self, from: usize, to: usize, qos: &str, multipoint: bool) -> CallId {
        let q: Qos = qos.parse().unwrap();
        let params = CallParams {
            called: party(&host_addr(to)).unwrap(),
            calling: party(&host_addr(from)),
            sap: None,
            qos: q,
            natm: NatmParams {
                qos: Some(q.to_string()),
                data_endpoint: Some(sock(5000 + from as u16)),
                cookie: Some(77),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, self.label)),
            multipoint,
            dtl: None,
        };
        self.label += 1;
        self.hosts[from].setup(self.now, params).unwrap()
    }

    /// Whether host `i`'s call got CONNECT; its release cause if it ended.
    fn outcome(&self, i: usize, call: CallId) -> (bool, Option<u8>) {
        let connected = self.events[i]
            .iter()
            .any(|e| matches!(e, CallEvent::Connected { call: c, .. } if *c == call));
        let released = self.events[i].iter().find_map(|e| match e {
            CallEvent::Released { call: c, cause, .. } if *c == call => Some(cause.value.raw()),
            _ => None,
        });
        (connected, released)
    }

    /// The switches a call from host `from` crosses, by the trunks carrying calls
    /// (this ring's calls are one at a time or all alike).
    fn calls_on(&self, i: usize, port: u16) -> usize {
        self.ctl[i].calls_on(pid(port))
    }
}

const MBIT_100: u64 = 100_000_000;

/// The tests name ports by label: 0 the host, 1 east (to switch i+1), 2 west.
fn pid(label: u16) -> PortId {
    PortId([2, 0, 1][usize::from(label)])
}

fn label(p: PortId) -> u16 {
    [1, 2, 0][usize::from(p.0)]
}

#[test]
fn a_call_is_source_routed_over_the_ring() {
    let mut r = Ring::new([MBIT_100; 4], true);
    for c in &r.ctl {
        let row = c.routing().unwrap();
        assert_eq!(row.database.len(), 4, "{row:?}");
        assert_eq!(row.neighbours.len(), 2);
    }
    let a = r.call(0, 2, "cbr:pcr=10Mbps");
    r.run(20 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    // Node 1 → 2 → 3 (the tie goes to the lower node).
    assert_eq!(
        (r.calls_on(0, 1), r.calls_on(1, 1), r.calls_on(3, 1)),
        (1, 1, 0)
    );
    assert_eq!(r.calls_on(2, 0), 1, "delivered to host 3");
    // The reservation is advertised: node 1's view of node 2's link shrinks.
    r.run(50 * MS);
    let db = r.ctl[0].routing().unwrap().database;
    let n2 = db.iter().find(|d| d.origin == 2).unwrap();
    let to3 = n2.links.iter().find(|l| l.starts_with("1→3:2 ")).unwrap();
    let (avail, max) = to3
        .split_once(' ')
        .unwrap()
        .1
        .trim_end_matches(" cells/s")
        .split_once('/')
        .unwrap();
    let (avail, max): (u64, u64) = (avail.parse().unwrap(), max.parse().unwrap());
    assert!(avail < max && max - avail > 20_000, "{to3}");
}

#[test]
fn routing_off_keeps_static_routes() {
    let mut r = Ring::new([MBIT_100; 4], false);
    let a = r.call(0, 2, "cbr:pcr=10Mbps");
    r.run(20 * MS);
    assert_eq!(
        r.outcome(0, a),
        (false, Some(3)),
        "no static route to +4430"
    );
    assert!(r.ctl[0].routing().is_none());
}

#[test]
fn a_dead_trunk_releases_its_calls_and_new_calls_go_round_it() {
    let mut r = Ring::new([MBIT_100; 4], true);
    let a = r.call(0, 2, "cbr:pcr=10Mbps");
    r.run(20 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    let cut_at = r.now;
    r.cut[0] = true; // switch 1 ↔ switch 2
                     // The call on it is released at both ends with cause 27 once the trunk is
                     // noticed dead (hellos: 400 ms).
    let mut released = None;
    let mut rerouted = None;
    while r.now < cut_at + 1500 * MS {
        r.run(10 * MS);
        if released.is_none() && r.outcome(0, a).1.is_some() {
            released = Some(r.now);
        }
        if released.is_some() && rerouted.is_none() {
            let db = r.ctl[0].routing().unwrap();
            if db.neighbours.len() == 1
                && r.ctl[1]
                    .routing()
                    .unwrap()
                    .database
                    .iter()
                    .find(|d| d.origin == 1)
                    .is_some_and(|d| d.links.len() == 1)
            {
                rerouted = Some(r.now);
            }
        }
    }
    assert_eq!(r.outcome(0, a).1, Some(27));
    let took = released.unwrap().saturating_duration_since(cut_at);
    assert!(took <= 450 * MS, "released after {took:?}");
    let conv = rerouted.unwrap().saturating_duration_since(cut_at);
    assert!(conv <= 500 * MS, "converged after {conv:?}");
    eprintln!("trunk cut: call released after {took:?}, topology converged after {conv:?}");
    // A new call takes the other way: 1 → 4 → 3.
    let b = r.call(0, 2, "cbr:pcr=10Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, b), (true, None));
    assert_eq!((r.calls_on(0, 2), r.calls_on(3, 2)), (1, 1));
    assert_eq!(r.ctl[0].crankbacks(), 0, "the topology knew");
    // The trunk comes back and is used again.
    r.cut[0] = false;
    r.run(600 * MS);
    let c = r.call(0, 1, "cbr:pcr=10Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, c), (true, None));
    assert_eq!(r.calls_on(0, 1), 1);
}

#[test]
fn a_refusal_down_the_path_is_cranked_back_to_the_alternate_path() {
    // Trunk 1 (switch 2 → switch 3) is slow: two 6 Mbit/s calls fit the first hop
    // but only one the second. Both leave switch 1 before switch 2's reservation
    // is flooded, so the second is refused at switch 2 and cranked back.
    let mut r = Ring::new([MBIT_100, 10_000_000, MBIT_100, MBIT_100], true);
    let a = r.call(0, 2, "cbr:pcr=6Mbps");
    let b = r.call(0, 2, "cbr:pcr=6Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    assert_eq!(r.outcome(0, b), (true, None), "{:?}", r.events[0]);
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (1, 1));
    assert_eq!(r.ctl[1].refused(), 1, "switch 2 refused one");
}

#[test]
fn the_ingress_picks_a_path_with_room_for_the_contract() {
    let mut r = Ring::new([MBIT_100, 10_000_000, MBIT_100, MBIT_100], true);
    let a = r.call(0, 2, "cbr:pcr=6Mbps");
    r.run(100 * MS); // switch 2's smaller availability is flooded
    let b = r.call(0, 2, "cbr:pcr=6Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    assert_eq!(r.outcome(0, b), (true, None));
    assert_eq!(r.ctl[0].crankbacks(), 0, "no crankback needed");
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (1, 1));
    // A call with a minimum the slow trunk can take goes the short way, granted
    // between its minimum and target there (`wire::qos::grant`).
    let c = r.call(0, 2, "cbr:pcr=50Mbps,min_pcr=2Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, c), (true, None));
    assert_eq!(r.calls_on(1, 1), 2);
    // No path fits 200 Mbit/s: refused with cause 37.
    let d = r.call(0, 2, "cbr:pcr=200Mbps");
    r.run(30 * MS);
    assert_eq!(r.outcome(0, d), (false, Some(37)));
}

#[test]
fn every_host_reaches_every_other() {
    let mut r = Ring::new([MBIT_100; 4], true);
    let mut calls = Vec::new();
    for from in 0..4 {
        for to in 0..4 {
            if from != to {
                calls.push((from, r.call(from, to, "reliable")));
            }
        }
    }
    r.run(50 * MS);
    for (from, c) in calls {
        assert_eq!(r.outcome(from, c), (true, None), "from host {}", from + 1);
    }
}

#[test]
fn a_trunk_that_dies_under_a_setup_is_cranked_back() {
    let mut r = Ring::new([MBIT_100; 4], true);
    // Switch 2 → switch 3 goes dead just as the call leaves switch 1 on it: switch 2's
    // SETUP is lost, its trunk is declared dead (hellos, 400 ms), and it cranks the
    // call back naming its own link.
    r.cut[1] = true;
    let a = r.call(0, 2, "cbr:pcr=10Mbps");
    r.run(5 * MS);
    assert_eq!(r.calls_on(1, 1), 1, "the SETUP went on towards switch 3");
    r.run(1000 * MS);
    assert_eq!(r.outcome(0, a), (true, None), "{:?}", r.events[0]);
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!(
        (r.calls_on(0, 1), r.calls_on(0, 2), r.calls_on(3, 2)),
        (0, 1, 1)
    );
}

#[test]
fn a_multipoint_call_is_source_routed_on_the_topology() {
    let mut r = Ring::new([MBIT_100; 4], true);
    let a = r.call_with(0, 2, "cbr:pcr=10Mbps", true);
    r.run(30 * MS);
    assert_eq!(r.outcome(0, a), (true, None), "{:?}", r.events[0]);
    assert_eq!(
        (r.calls_on(0, 1), r.calls_on(1, 1), r.calls_on(2, 0)),
        (1, 1, 1)
    );
}

#[test]
fn a_multipoint_setup_refused_down_the_path_is_cranked_back() {
    // As for point-to-point calls: trunk 1 (switch 2 → 3) takes one 6 Mbit/s branch,
    // both calls leave switch 1 on it before switch 2's reservation is flooded, and
    // the second's branch, refused at switch 2, is routed again the other way.
    let mut r = Ring::new([MBIT_100, 10_000_000, MBIT_100, MBIT_100], true);
    let a = r.call_with(0, 2, "cbr:pcr=6Mbps", true);
    let b = r.call_with(0, 2, "cbr:pcr=6Mbps", true);
    r.run(30 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    assert_eq!(r.outcome(0, b), (true, None), "{:?}", r.events[0]);
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!(r.ctl[1].refused(), 1, "switch 2 refused one");
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (1, 1));
}

#[test]
fn a_trunk_that_dies_under_a_multipoint_setup_is_cranked_back() {
    let mut r = Ring::new([MBIT_100; 4], true);
    r.cut[1] = true;
    let a = r.call_with(0, 2, "cbr:pcr=10Mbps", true);
    r.run(5 * MS);
    assert_eq!(
        r.calls_on(1, 1),
        1,
        "the branch's SETUP went on towards switch 3"
    );
    r.run(1000 * MS);
    assert_eq!(r.outcome(0, a), (true, None), "{:?}", r.events[0]);
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!(
        (r.calls_on(0, 1), r.calls_on(0, 2), r.calls_on(3, 2)),
        (0, 1, 1)
    );
}

impl Ring {
    /// Host `from` adds host `to` as party `eref` of its multipoint call `call`.
    fn add_party(&mut self, from: usize, call: CallId, eref: u16, to: usize) {
        let q: Qos = "cbr:pcr=6Mbps".parse().unwrap();
        let params = CallParams {
            called: party(&host_addr(to)).unwrap(),
            calling: party(&host_addr(from)),
            sap: None,
            qos: q,
            natm: NatmParams {
                qos: Some(q.to_string()),
                data_endpoint: Some(sock(5000 + from as u16)),
                cookie: Some(77),
                ..NatmParams::default()
            },
            conn_id: None,
            multipoint: true,
            dtl: None,
        };
        self.hosts[from]
            .add_party(self.now, call, eref, &params)
            .unwrap();
    }

    /// The outcome of party `eref` of host `i`'s call: added, or its refusal cause.
    fn party_outcome(&self, i: usize, call: CallId, eref: u16) -> Option<Result<(), u8>> {
        self.events[i].iter().find_map(|e| match e {
            CallEvent::PartyAdded { call: c, party, .. } if *c == call && party.value == eref => {
                Some(Ok(()))
            }
            CallEvent::PartyRejected {
                call: c,
                party,
                cause,
            }
            | CallEvent::PartyDropped {
                call: c,
                party,
                cause,
                ..
            } if *c == call && party.value == eref => Some(Err(cause.value.raw())),
            _ => None,
        })
    }
}

#[test]
fn an_add_party_refused_down_the_path_is_cranked_back_to_the_alternate_path() {
    // Host 1 roots a 6 Mbit/s multipoint call with a leaf behind switch 2, then adds
    // one behind switch 3. Switch 1 routes the party over switch 2, on the branch it
    // has there; meanwhile a point-to-point call from switch 2's host has taken slow
    // trunk 1 (switch 2 → 3). Switch 2 refuses the party (ADD PARTY REJECT with a
    // crankback IE), and switch 1 routes it again by switch 4.
    let mut r = Ring::new([MBIT_100, 10_000_000, MBIT_100, MBIT_100], true);
    let root = r.call_with(0, 1, "cbr:pcr=6Mbps", true);
    r.run(200 * MS);
    assert_eq!(r.outcome(0, root), (true, None));
    let filler = r.call(1, 2, "cbr:pcr=6Mbps");
    r.add_party(0, root, 1, 2);
    r.run(50 * MS);
    assert_eq!(r.outcome(1, filler), (true, None));
    assert_eq!(
        r.party_outcome(0, root, 1),
        Some(Ok(())),
        "{:?}",
        r.events[0]
    );
    assert_eq!(r.ctl[1].refused(), 1, "switch 2 refused the party");
    assert_eq!(r.ctl[0].crankbacks(), 1);
    // Two branches at switch 1: east to switch 2's leaf, west to switch 3's by 4.
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (1, 1));
    assert_eq!(r.calls_on(3, 2), 1);
    // Once trunk 1's reservation is flooded the ingress routes such a party by
    // switch 4 at once: no refusal, no crankback.
    r.run(200 * MS);
    let again = r.call_with(0, 1, "cbr:pcr=6Mbps", true);
    r.run(50 * MS);
    assert_eq!(r.outcome(0, again), (true, None));
    r.add_party(0, again, 1, 2);
    r.run(50 * MS);
    assert_eq!(r.party_outcome(0, again, 1), Some(Ok(())));
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!(r.ctl[1].refused(), 1);
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (2, 2));
}

#[test]
fn no_room_backward_on_the_link_in_cranks_back_that_link() {
    // Slow trunk 1 (switch 2 ↔ 3); calls that want little forward and much backward:
    // the destination, switch 3, reserves the backward direction on its link in and
    // refuses the second call there, naming that link.
    let mut r = Ring::new([MBIT_100, 10_000_000, MBIT_100, MBIT_100], true);
    let q = "cbr:pcr=1Mbps,rx:pcr=6Mbps";
    let a = r.call(0, 2, q);
    let b = r.call(0, 2, q);
    r.run(30 * MS);
    assert_eq!(r.outcome(0, a), (true, None));
    assert_eq!(r.outcome(0, b), (true, None), "{:?}", r.events[0]);
    assert_eq!(r.ctl[2].refused(), 1, "switch 3 refused one");
    assert_eq!(r.ctl[0].crankbacks(), 1);
    assert_eq!((r.calls_on(0, 1), r.calls_on(0, 2)), (1, 1));
}
