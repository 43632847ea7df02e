//! The control plane between two host signalling links, in virtual time: each host
//! is a bare `Saal` (what a sigd drives), the switch a `Control` over a `Switch`.

use std::net::SocketAddr;

use bytes::Bytes;
use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, ClearedBy, Saal, SigEvent};
use natm_proto::wire::addr::{party, AtmAddr, HostsFile};
use natm_proto::wire::q2931::{ConnectionId, NatmParams};
use natm_proto::wire::vcframe;

use super::*;
use crate::{PortConfig, Transmit, Verdict};

const MS: Duration = Duration::from_millis(1);

fn addr(last: u8) -> AtmAddr {
    format!("47.0005.80ffe1000000f21a26d8.0020ea000e{last:02x}.00")
        .parse()
        .unwrap()
}

fn sock(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Two hosts (`a` on port 0, `b` on port 1) joined by one switch.
struct Net {
    now: Instant,
    sw: Switch,
    ctl: Control,
    hosts: [Saal; 2],
    /// Whether each host's link delivers (false: the host is dead).
    alive: [bool; 2],
    events: [Vec<SigEvent>; 2],
    outputs: Vec<Output>,
    /// The next label each host receives on (hosts' sigds hand out distinct ones).
    label: u16,
}

impl Net {
    fn new(line_bps: u64) -> Net {
        Net::with_preserve(line_bps, None)
    }

    /// Host ports with their own preservation time (`None`: the default).
    fn with_preserve(line_bps: u64, preserve: Option<Duration>) -> Net {
        let mut sw = Switch::new();
        let p0 = sw.add_port(PortConfig::new(line_bps)).unwrap();
        let p1 = sw.add_port(PortConfig::new(line_bps)).unwrap();
        let h = HostsFile::default();
        let cfg = ControlConfig {
            routes: vec![
                (
                    Prefix::parse("47.0005.80ffe1000000f21a26d8.0020ea000e01", &h).unwrap(),
                    p0,
                ),
                (
                    Prefix::parse("47.0005.80ffe1000000f21a26d8.0020ea000e02", &h).unwrap(),
                    p1,
                ),
            ],
            ..ControlConfig::default()
        };
        let mut ctl = Control::new(cfg);
        let now = Instant::from_nanos(1);
        for (p, data) in [(p0, sock(9100)), (p1, sock(9101))] {
            ctl.add_port(
                now,
                ControlPort {
                    port: p,
                    name: format!("p{}", p.0),
                    role: PortRole::Host,
                    data,
                    vcis: natm_proto::sig::vci::NETWORK_HALF,
                    link_cells: 353_207,
                    preserve,
                    no_response: None,
                    screen_calling: true,
                    first_sq: None,
                },
            );
        }
        let mut hosts = [
            Saal::new(ControlConfig::network_saal()),
            Saal::new(ControlConfig::network_saal()),
        ];
        for h in &mut hosts {
            h.start(now);
        }
        let mut n = Net {
            now,
            sw,
            ctl,
            hosts,
            alive: [true, true],
            events: [Vec::new(), Vec::new()],
            outputs: Vec::new(),
            label: 40,
        };
        n.run(50 * MS);
        assert!(n.ctl.is_up(PortId(0)) && n.ctl.is_up(PortId(1)));
        assert!(n.hosts[0].is_up() && n.hosts[1].is_up());
        n
    }

    /// Moves every PDU (no delay) and fires timers for `d` of virtual time, 1 ms steps.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..100 {
                let mut moved = false;
                for i in 0..2 {
                    while let Some(pdu) = self.hosts[i].poll_transmit() {
                        moved = true;
                        if self.alive[i] {
                            self.ctl.handle_signal(self.now, PortId(i as u16), &pdu);
                        }
                    }
                    while let Some(e) = self.hosts[i].poll_event() {
                        self.events[i].push(e);
                    }
                }
                while let Some(o) = self.ctl.poll_output(&mut self.sw) {
                    moved = true;
                    match o {
                        Output::Signal(p, pdu) => {
                            let i = usize::from(p.0);
                            if self.alive[i] {
                                self.hosts[i].handle_frame(self.now, &pdu);
                            }
                        }
                        other => self.outputs.push(other),
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            self.sw.handle_timeout(self.now);
            for h in &mut self.hosts {
                if h.poll_timeout().is_some_and(|t| t <= self.now) {
                    h.handle_timeout(self.now);
                }
            }
            if self.ctl.poll_timeout().is_some_and(|t| t <= self.now) {
                self.ctl.handle_timeout(self.now);
            }
        }
    }

    fn take_call_events(&mut self, i: usize) -> Vec<CallEvent> {
        std::mem::take(&mut self.events[i])
            .into_iter()
            .filter_map(|e| match e {
                SigEvent::Call(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Host a calls host b with `qos`; returns a's call id and b's incoming call.
    fn setup(&mut self, qos: &str) -> (CallId, Option<(CallId, CallParams)>) {
        let q: Qos = qos.parse().unwrap();
        let params = CallParams {
            dtl: None,
            called: party(&addr(2)).unwrap(),
            calling: party(&addr(1)),
            sap: None,
            qos: q,
            natm: NatmParams {
                qos: Some(q.to_string()),
                data_endpoint: Some(sock(5001)),
                cookie: Some(77),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, self.label)),
            multipoint: false,
        };
        let a = self.hosts[0].setup(self.now, params).unwrap();
        self.run(5 * MS);
        let incoming = self.take_call_events(1).into_iter().find_map(|e| match e {
            CallEvent::Incoming { call, params } => Some((call, params)),
            _ => None,
        });
        (a, incoming)
    }

    /// A whole call: a calls, b answers with VCI 50 at 127.0.0.1:5002.
    fn connect(&mut self, qos: &str) -> (CallId, CallId, CallAccept) {
        let (a, incoming) = self.setup(qos);
        let (b, offered) = incoming.expect("b is offered the call");
        assert_eq!(
            offered.natm.data_endpoint,
            Some(sock(9101)),
            "switch's port"
        );
        assert_eq!(
            offered.natm.cookie,
            Some(77),
            "the cookie passes end to end"
        );
        let accept = CallAccept {
            qos: None,
            natm: NatmParams {
                data_endpoint: Some(sock(5002)),
                cookie: Some(77),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, self.label + 10)),
        };
        self.label += 1;
        self.hosts[1].accept(self.now, b, accept).unwrap();
        self.run(5 * MS);
        let evs = self.take_call_events(0);
        let connected = evs
            .clone()
            .into_iter()
            .find_map(|e| match e {
                CallEvent::Connected { params, .. } => Some(params),
                _ => None,
            })
            .unwrap_or_else(|| panic!("a sees CONNECT: {:?} {evs:?}", self.ctl.calls()));
        (a, b, connected)
    }
}

fn frame_on(sw: &mut Switch, now: Instant, port: u16, vci: u16) -> Verdict {
    sw.handle_frame(
        now,
        PortId(port),
        vcframe::Repr::data(0, vci),
        Bytes::from_static(b"tpdu"),
    )
    .unwrap()
}

fn sent_vci(sw: &mut Switch, now: Instant, port: u16) -> Option<u16> {
    let at = sw.port_timeout(PortId(port)).unwrap_or(now).max(now);
    match sw.poll_transmit(at, PortId(port))? {
        Transmit::Frame { header, .. } => Some(header.vci),
        Transmit::Cell(_) => None,
    }
}

#[test]
fn a_call_crosses_the_switch_with_labels_translated_and_is_released() {
    let mut n = Net::new(155_520_000);
    let (a, _b, connected) = n.connect("cbr:pcr=10Mbps");
    assert_eq!(connected.natm.data_endpoint, Some(sock(9100)));
    let a_in = connected.conn_id.unwrap().vci;
    assert_ne!(a_in, 40, "never the label the caller receives on");
    // Forward: caller's frames on a_in leave port 1 with the callee's label 50.
    let now = n.now;
    assert_eq!(frame_on(&mut n.sw, now, 0, a_in), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, now, 1), Some(50));
    // Backward: the switch's label on port 1 (from the SETUP it sent) → 40 on port 0.
    let b_in = n.ctl.calls()[0].b.1.unwrap();
    assert!(a_in >= 32_768 && b_in >= 32_768, "the network's half");
    assert_eq!(frame_on(&mut n.sw, now, 1, b_in), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, now, 0), Some(40));
    // Each label is bidirectional: the callee's acknowledgements of the forward VC,
    // on its label 50, reach the caller on a_in; the caller's on 40 reach b_in.
    assert_eq!(frame_on(&mut n.sw, now, 1, 50), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, now, 0), Some(a_in));
    assert_eq!(frame_on(&mut n.sw, now, 0, 40), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, now, 1), Some(b_in));
    // The host ports learnt each VC's data endpoint.
    assert!(n.outputs.contains(&Output::Dest(
        VcAddr::new(PortId(1), 0, 50),
        Some(sock(5002))
    )));
    assert!(n.outputs.contains(&Output::Source(
        VcAddr::new(PortId(0), 0, a_in),
        Some(sock(5001))
    )));
    // A 10 Mbit/s reservation each way.
    let row = &n.ctl.calls()[0];
    assert!(row.reserved_cells.0 > 20_000 && row.reserved_cells.1 > 20_000);

    n.hosts[0]
        .release(n.now, a, net_cause(16))
        .expect("an active call");
    n.run(10 * MS);
    let released = n.take_call_events(1);
    assert!(
        released.iter().any(|e| matches!(e,
            CallEvent::Released { cause, by: ClearedBy::Remote, .. } if cause.value.raw() == 16)),
        "{released:?}"
    );
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.sw.stat().vcs.len(), 0, "cross-connects removed");
    assert!(n.ctl.links().iter().all(|l| l.reserved_cells == 0));
    assert_eq!(
        frame_on(&mut n.sw, n.now, 0, a_in),
        Verdict::Dropped(crate::DropCause::UnknownVc)
    );
}

#[test]
fn a_refusal_by_the_callee_reaches_the_caller_with_its_cause() {
    let mut n = Net::new(155_520_000);
    let (_, incoming) = n.setup("ubr");
    let (b, _) = incoming.unwrap();
    n.hosts[1].reject(n.now, b, net_cause(17)).unwrap();
    n.run(5 * MS);
    let ev = n.take_call_events(0);
    assert!(
        ev.iter().any(|e| matches!(e, CallEvent::Proceeding { .. })),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 17)),
        "{ev:?}"
    );
    assert_eq!(n.ctl.call_count(), 0);
    assert!(n.ctl.links().iter().all(|l| l.reserved_cells == 0));
}

#[test]
fn admission_refuses_what_the_outgoing_link_cannot_carry() {
    // A 10 Mbit/s line: one 6 Mbit/s CBR call fits, a second does not (cause 37).
    let mut n = Net::new(10_000_000);
    n.connect("cbr:pcr=6Mbps");
    let (_, incoming) = n.setup("cbr:pcr=6Mbps");
    assert!(incoming.is_none(), "never offered to b");
    let ev = n.take_call_events(0);
    assert!(
        ev.iter()
            .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 37)),
        "{ev:?}"
    );
    // Best effort reserves nothing and still gets through.
    n.connect("ubr");
    assert_eq!(n.ctl.call_count(), 2);
    assert_eq!(n.ctl.refused(), 1);
}

/// Host 0 calls host 1, claiming `calling` as its number.
fn call_claiming(n: &mut Net, calling: Option<AtmAddr>, label: u16) -> Vec<CallEvent> {
    let q: Qos = "ubr".parse().unwrap();
    let params = CallParams {
        dtl: None,
        called: party(&addr(2)).unwrap(),
        calling: calling.as_ref().and_then(party),
        sap: None,
        qos: q,
        natm: NatmParams {
            data_endpoint: Some(sock(5001)),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, label)),
        multipoint: false,
    };
    n.hosts[0].setup(n.now, params).unwrap();
    n.run(5 * MS);
    n.take_call_events(0)
}

#[test]
fn a_host_cannot_call_with_a_number_another_port_owns() {
    let mut n = Net::new(155_520_000);
    // Host 1's number, and one no route names: refused at the switch, cause 21,
    // host 1 never offered a call.
    for (claimed, label) in [(addr(2), 40), (addr(0x77), 41)] {
        let ev = call_claiming(&mut n, Some(claimed), label);
        assert!(
            ev.iter()
                .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 21)),
            "{ev:?}"
        );
    }
    assert_eq!(n.ctl.calls_screened(), 2);
    let offered = n.take_call_events(1);
    assert!(
        !offered
            .iter()
            .any(|e| matches!(e, CallEvent::Incoming { .. })),
        "{offered:?}"
    );
    // Its own number, or none, goes through.
    for (claimed, label) in [(Some(addr(1)), 42), (None, 43)] {
        let ev = call_claiming(&mut n, claimed, label);
        assert!(
            !ev.iter().any(|e| matches!(e, CallEvent::Released { .. })),
            "{ev:?}"
        );
    }
    assert_eq!(n.ctl.calls_screened(), 2);
    let offered = n.take_call_events(1);
    let incoming = offered
        .iter()
        .filter(|e| matches!(e, CallEvent::Incoming { .. }))
        .count();
    assert_eq!(incoming, 2, "{offered:?}");
}

#[test]
fn no_route_is_cause_3() {
    let mut n = Net::new(155_520_000);
    let q: Qos = "ubr".parse().unwrap();
    let params = CallParams {
        dtl: None,
        called: party(&addr(9)).unwrap(),
        calling: None,
        sap: None,
        qos: q,
        natm: NatmParams {
            data_endpoint: Some(sock(5001)),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 40)),
        multipoint: false,
    };
    n.hosts[0].setup(n.now, params).unwrap();
    n.run(5 * MS);
    let ev = n.take_call_events(0);
    assert!(
        ev.iter()
            .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 3)),
        "{ev:?}"
    );
}

#[test]
fn a_dead_host_on_a_port_that_keeps_no_calls_is_released_at_the_other_end_when_its_link_fails() {
    let mut n = Net::with_preserve(155_520_000, Some(Duration::ZERO));
    n.connect("cbr:pcr=1Mbps");
    n.run(300 * MS);
    let before = n.now;
    n.alive[1] = false;
    let mut released = None;
    for _ in 0..300 {
        n.run(10 * MS);
        if n.take_call_events(0)
            .iter()
            .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 27))
        {
            released = Some(n.now);
            break;
        }
    }
    let at = released.expect("a sees RELEASE cause 27");
    // A host link's Timer_NO_RESPONSE, and a POLL's 100 ms.
    let after = at.saturating_duration_since(before);
    assert!(after >= SaalConfig::HOST_LINK_NO_RESPONSE, "{after:?}");
    assert!(
        after < SaalConfig::HOST_LINK_NO_RESPONSE + 500 * MS,
        "{after:?}"
    );
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.sw.stat().vcs.len(), 0);
}

#[test]
fn a_dead_caller_side_releases_the_callee_on_a_port_that_keeps_no_calls() {
    let mut n = Net::with_preserve(155_520_000, Some(Duration::ZERO));
    n.connect("ubr");
    n.run(300 * MS);
    n.alive[0] = false;
    let mut released = false;
    for _ in 0..300 {
        n.run(10 * MS);
        if n.take_call_events(1)
            .iter()
            .any(|e| matches!(e, CallEvent::Released { .. }))
        {
            released = true;
            break;
        }
    }
    assert!(released);
    assert_eq!(n.ctl.call_count(), 0);
    // The dead side's link keeps trying to come back, and nothing spins.
    n.run(2000 * MS);
}

/// Queues `n` one-cell frames from host a towards host b on the call's forward VC.
fn backlog_to_b(n: &mut Net, a_in: u16, frames: usize) {
    let now = n.now;
    for _ in 0..frames {
        assert_eq!(frame_on(&mut n.sw, now, 0, a_in), Verdict::Queued);
    }
}

fn released_b(n: &mut Net) -> bool {
    n.take_call_events(1)
        .iter()
        .any(|e| matches!(e, CallEvent::Released { cause, .. } if cause.value.raw() == 16))
}

/// The caller hangs up while its frames still wait for the callee's slow line: they
/// all still leave, and the callee's RELEASE (and the end of its data endpoint)
/// follows the last of them instead of overtaking and flushing them.
#[test]
fn a_release_waits_for_the_vcs_towards_the_far_side_to_drain() {
    let mut n = Net::new(2_000_000);
    let (a, _b, connected) = n.connect("ubr");
    let a_in = connected.conn_id.unwrap().vci;
    backlog_to_b(&mut n, a_in, 200);
    n.hosts[0].release(n.now, a, net_cause(16)).unwrap();
    // 10 ms of signalling with the data line stalled (200 cells take 42 ms at
    // 2 Mbit/s): the caller's side is done, the callee's waits.
    n.run(10 * MS);
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.ctl.draining(), 1);
    assert!(!released_b(&mut n), "b's RELEASE waits for the data");
    let b_gone = Output::Dest(VcAddr::new(PortId(1), 0, 50), None);
    assert!(!n.outputs.contains(&b_gone), "b's data endpoint still used");
    // Cells on the released input label are not taken any more.
    assert_eq!(
        frame_on(&mut n.sw, n.now, 0, a_in),
        Verdict::Dropped(crate::DropCause::UnknownVc)
    );
    let mut sent = 0;
    while let Some(vci) = sent_vci(&mut n.sw, n.now, 1) {
        assert_eq!(vci, 50);
        sent += 1;
    }
    assert_eq!(sent, 200, "everything queued before the RELEASE");
    n.run(5 * MS);
    assert!(released_b(&mut n), "then b is released");
    assert!(n.outputs.contains(&b_gone));
    assert_eq!(n.ctl.draining(), 0);
    let stat = n.sw.stat();
    assert!(stat.vcs.is_empty());
    assert_eq!(stat.ports[1].counters.dropped.flushed, 0);
}

/// A far side that never takes its data (a stalled line) holds its RELEASE for at
/// most `ControlConfig::drain`; what is left then is flushed and counted.
#[test]
fn a_stalled_drain_ends_at_its_bound() {
    let mut n = Net::new(2_000_000);
    let (a, _b, connected) = n.connect("ubr");
    let a_in = connected.conn_id.unwrap().vci;
    backlog_to_b(&mut n, a_in, 200);
    let released_at = n.now;
    n.hosts[0].release(n.now, a, net_cause(16)).unwrap();
    n.run(DEFAULT_DRAIN - 20 * MS);
    assert!(!released_b(&mut n));
    n.run(40 * MS);
    assert!(released_b(&mut n), "released by the bound");
    assert!(n.now.saturating_duration_since(released_at) <= DEFAULT_DRAIN + 30 * MS);
    let stat = n.sw.stat();
    assert!(stat.vcs.is_empty());
    assert_eq!(stat.ports[1].counters.dropped.flushed, 200);
}

// ----- a host's sigd restarts (issue 16; docs/sigd.md "sigd restart") -------

const S: Duration = Duration::from_secs(1);

/// What a reclaiming host does (a restarted sigd with an application that reclaims
/// its call): `Some(after)` adopts the call `after` the new sigd starts.
struct Restart {
    down: Duration,
    reclaim_after: Option<Duration>,
}

/// Host `i`'s sigd dies (its link goes silent both ways) for `r.down`; a new one
/// starts with fresh SSCOP and call control, holding unknown enquiries for its 3 s
/// reclaim window as sigd does, and adopts `call` if `r` says so: the adopted id.
fn restart_host(n: &mut Net, i: usize, call: CallId, r: Restart) -> Option<CallId> {
    let cr = n.hosts[i]
        .calls()
        .call_ref(call)
        .expect("the host has the call");
    n.alive[i] = false;
    n.run(r.down);
    let mut h = Saal::new(ControlConfig::network_saal());
    h.seed_sq(0x5a);
    h.hold_unknown_enquiries(n.now + 3 * S);
    h.start(n.now);
    n.hosts[i] = h;
    n.events[i].clear();
    n.alive[i] = true;
    let after = r.reclaim_after?;
    n.run(after);
    let now = n.now;
    Some(
        n.hosts[i]
            .adopt(now, cr.value, !cr.flag, 300 * S)
            .expect("the call reference is free on the new sigd"),
    )
}

fn released_with(evs: &[CallEvent]) -> Option<u8> {
    evs.iter().find_map(|e| match e {
        CallEvent::Released { cause, .. } => Some(cause.value.raw()),
        _ => None,
    })
}

#[test]
fn a_host_port_keeps_its_calls_and_their_cross_connects_while_its_link_is_down() {
    let mut n = Net::new(155_520_000);
    let (a, _b, connected) = n.connect("ubr");
    let a_in = connected.conn_id.unwrap().vci;
    n.run(300 * MS);
    let cr = n.hosts[0].calls().call_ref(a).unwrap();
    n.alive[0] = false;
    n.run(20 * S);
    assert!(!n.ctl.is_up(PortId(0)), "the link is down");
    assert_eq!(n.ctl.call_count(), 1, "the call is kept");
    assert_eq!(n.ctl.links()[0].calls, 1);
    assert_eq!(
        released_with(&n.take_call_events(1)),
        None,
        "b keeps it too"
    );
    // The data path goes on through the cross-connects.
    let now = n.now;
    assert_eq!(frame_on(&mut n.sw, now, 0, a_in), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, now, 1), Some(50));
    assert!(n.ctl.calls()[0].active);
    assert!(cr.value > 0);
}

#[test]
fn a_restarted_host_that_reclaims_its_call_keeps_it_at_both_ends() {
    for reclaim_after in [Duration::ZERO, 1500 * MS] {
        let mut n = Net::new(155_520_000);
        let (a, _b, connected) = n.connect("cbr:pcr=1Mbps");
        let a_in = connected.conn_id.unwrap().vci;
        n.run(300 * MS);
        let reserved = n.ctl.links()[0].reserved_cells;
        let adopted = restart_host(
            &mut n,
            0,
            a,
            Restart {
                down: 2 * S,
                reclaim_after: Some(reclaim_after),
            },
        )
        .unwrap();
        // Both sides ask (the switch on the link's return, the host on adopting);
        // the switch's enquiry before the reclaim waits for T322's next try. Well
        // past three T322 periods, nothing is released.
        n.run(15 * S);
        assert!(n.ctl.is_up(PortId(0)));
        assert_eq!(
            released_with(&n.take_call_events(0)),
            None,
            "{reclaim_after:?}"
        );
        assert_eq!(
            released_with(&n.take_call_events(1)),
            None,
            "{reclaim_after:?}"
        );
        assert_eq!(
            n.hosts[0].calls().state(adopted),
            Some(natm_proto::wire::q2931::CallState::ACTIVE)
        );
        assert_eq!(n.ctl.call_count(), 1);
        assert_eq!(n.ctl.links()[0].reserved_cells, reserved);
        let now = n.now;
        assert_eq!(frame_on(&mut n.sw, now, 0, a_in), Verdict::Queued);
        // The restarted host hangs up: released at both ends and in the switch.
        n.hosts[0].release(n.now, adopted, net_cause(16)).unwrap();
        n.run(2 * S);
        assert_eq!(released_with(&n.take_call_events(1)), Some(16));
        assert_eq!(n.ctl.call_count(), 0);
        assert_eq!(n.sw.stat().vcs.len(), 0);
        assert!(n.ctl.links().iter().all(|l| l.reserved_cells == 0));
    }
}

#[test]
fn a_call_nobody_reclaims_is_released_at_the_far_end_with_cause_30() {
    let mut n = Net::new(155_520_000);
    let (a, _b, _) = n.connect("ubr");
    n.run(300 * MS);
    restart_host(
        &mut n,
        0,
        a,
        Restart {
            down: S,
            reclaim_after: None,
        },
    );
    let back = n.now;
    let mut at = None;
    for _ in 0..200 {
        n.run(100 * MS);
        if let Some(c) = released_with(&n.take_call_events(1)) {
            at = Some((n.now.saturating_duration_since(back), c));
            break;
        }
    }
    let (after, cause) = at.expect("b is released");
    assert_eq!(cause, 30, "STATUS answered with state 0");
    // Not within the restarted host's reclaim window (3 s).
    assert!(after >= 3 * S, "{after:?}");
    n.run(2 * S);
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.sw.stat().vcs.len(), 0);
    assert!(n.ctl.links().iter().all(|l| l.reserved_cells == 0));
}

#[test]
fn a_kept_call_is_released_at_the_far_end_when_the_preservation_time_ends() {
    let mut n = Net::with_preserve(155_520_000, Some(2 * S));
    n.connect("ubr");
    n.run(300 * MS);
    let dead = n.now;
    n.alive[0] = false;
    let mut at = None;
    for _ in 0..100 {
        n.run(100 * MS);
        if let Some(c) = released_with(&n.take_call_events(1)) {
            at = Some((n.now.saturating_duration_since(dead), c));
            break;
        }
    }
    let (after, cause) = at.expect("b is released");
    assert_eq!(cause, 27, "destination out of order");
    // The loss is noticed after the host link's Timer_NO_RESPONSE (2 s), then
    // T309 = 2 s runs.
    let noticed = SaalConfig::HOST_LINK_NO_RESPONSE;
    assert!(
        after >= noticed + 2 * S && after < noticed + 3 * S,
        "{after:?}"
    );
    n.run(2 * S);
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.sw.stat().vcs.len(), 0);
}

#[test]
fn a_call_the_far_end_released_meanwhile_is_released_on_reclaim() {
    let mut n = Net::new(155_520_000);
    let (a, b, _) = n.connect("ubr");
    n.run(300 * MS);
    let cr = n.hosts[0].calls().call_ref(a).unwrap();
    n.alive[0] = false;
    n.run(S);
    // b hangs up while a's sigd is down: b is done at once, the switch drops the
    // cross-connects and keeps the RELEASE for a.
    n.hosts[1].release(n.now, b, net_cause(16)).unwrap();
    n.run(2 * S);
    assert_eq!(n.ctl.call_count(), 0);
    assert_eq!(n.sw.stat().vcs.len(), 0);
    // a's new sigd reclaims the call: it learns it is gone and clears it.
    let mut h = Saal::new(ControlConfig::network_saal());
    h.seed_sq(0x5a);
    h.start(n.now);
    n.hosts[0] = h;
    n.events[0].clear();
    n.alive[0] = true;
    let adopted = n.hosts[0]
        .adopt(n.now, cr.value, !cr.flag, 300 * S)
        .unwrap();
    n.run(10 * S);
    let evs = n.take_call_events(0);
    assert!(
        evs.iter()
            .any(|e| matches!(e, CallEvent::Released { call, .. } if *call == adopted)),
        "{evs:?}"
    );
    assert_eq!(n.hosts[0].calls().state(adopted), None);
    assert!(n
        .ctl
        .links()
        .iter()
        .all(|l| l.calls == 0 && l.reserved_cells == 0));
}

// Q.2963.1 modification through the switch (issue 19, `control::modify`).

/// The traffic descriptor of `qos` as a host's sigd sends it in MODIFY REQUEST.
fn td(qos: &str) -> natm_proto::wire::q2931::TrafficDescriptor {
    traffic_descriptor(&qos.parse().unwrap(), 353_207)
}

/// The policed peak rate of the cross-connect carrying a's data (port 0 in).
fn forward_pcr(n: &Net) -> Option<u64> {
    let a_in = n.ctl.calls()[0].a.1?;
    n.sw.stat()
        .vcs
        .iter()
        .find(|v| v.xc.from() == crate::Endpoint::Vc(VcAddr::new(PortId(0), 0, a_in)))
        .and_then(|v| v.contract.pcr)
}

/// Host a asks for `qos`; b answers with `answer` (None: accept, Some(cause):
/// refuse) if it is asked at all: a's answer, and whether b was asked.
fn modify_through(n: &mut Net, a: CallId, qos: &str, answer: Option<u8>) -> (CallEvent, bool) {
    n.hosts[0].modify(n.now, a, td(qos)).unwrap();
    n.run(5 * MS);
    let asked = n.take_call_events(1).into_iter().find_map(|e| match e {
        CallEvent::ModifyRequested { call, .. } => Some(call),
        _ => None,
    });
    if let Some(b) = asked {
        match answer {
            None => drop(n.hosts[1].modify_accept(n.now, b).unwrap()),
            Some(c) => n.hosts[1].modify_reject(n.now, b, net_cause(c)).unwrap(),
        }
        n.run(5 * MS);
    }
    let ev = n
        .take_call_events(0)
        .into_iter()
        .find(|e| {
            matches!(
                e,
                CallEvent::Modified { .. } | CallEvent::ModifyRefused { .. }
            )
        })
        .expect("a hears an answer");
    (ev, asked.is_some())
}

#[test]
fn a_modification_is_admitted_forwarded_and_changes_the_policer_once_acknowledged() {
    let mut n = Net::new(155_520_000);
    let (a, _b, _) = n.connect("cbr:pcr=10Mbps");
    let (fwd0, bwd0) = n.ctl.calls()[0].reserved_cells;
    let pcr0 = forward_pcr(&n).unwrap();
    let (ev, asked) = modify_through(&mut n, a, "cbr:tx:pcr=20Mbps,rx:pcr=10Mbps", None);
    assert!(asked, "forwarded to b");
    assert!(matches!(ev, CallEvent::Modified { .. }), "{ev:?}");
    let (fwd, bwd) = n.ctl.calls()[0].reserved_cells;
    assert!(
        fwd > fwd0 * 19 / 10 && fwd < fwd0 * 21 / 10,
        "{fwd0} -> {fwd}"
    );
    assert_eq!(bwd, bwd0, "the backward direction did not change");
    let pcr = forward_pcr(&n).unwrap();
    assert!(pcr > pcr0 * 19 / 10, "policer {pcr0} -> {pcr}");
    let links = n.ctl.links();
    assert_eq!(
        links[1].reserved_cells, fwd,
        "b's output holds the forward rate"
    );
    // Down to 2: the policer and the reservation follow.
    let (ev, _) = modify_through(&mut n, a, "cbr:tx:pcr=2Mbps,rx:pcr=10Mbps", None);
    assert!(matches!(ev, CallEvent::Modified { .. }), "{ev:?}");
    assert!(n.ctl.calls()[0].reserved_cells.0 < fwd0 / 4);
    assert_eq!(n.ctl.calls()[0].reserved_cells.1, bwd0);
    assert!(forward_pcr(&n).unwrap() < pcr0 / 4);
}

#[test]
fn a_refusal_by_the_far_side_reaches_the_requester_and_restores_the_reservation() {
    let mut n = Net::new(155_520_000);
    let (a, _b, _) = n.connect("cbr:pcr=10Mbps");
    let before = n.ctl.calls()[0].reserved_cells;
    let pcr0 = forward_pcr(&n);
    let (ev, asked) = modify_through(&mut n, a, "cbr:pcr=40Mbps", Some(37));
    assert!(asked);
    assert!(
        matches!(&ev, CallEvent::ModifyRefused { cause, .. } if cause.value.raw() == 37),
        "{ev:?}"
    );
    assert_eq!(n.ctl.calls()[0].reserved_cells, before);
    assert_eq!(n.ctl.links()[1].reserved_cells, before.0);
    assert_eq!(forward_pcr(&n), pcr0, "the policer stays");
}

#[test]
fn a_raise_the_output_port_cannot_carry_is_refused_at_the_switch_with_cause_37() {
    // A 30 Mbit/s line: 10 + 15 reserved; raising the first to 20 does not fit.
    let mut n = Net::new(30_000_000);
    let (a, _, _) = n.connect("cbr:pcr=10Mbps");
    n.connect("cbr:pcr=15Mbps");
    let held = n.ctl.links()[1].reserved_cells;
    let (ev, asked) = modify_through(&mut n, a, "cbr:pcr=20Mbps", None);
    assert!(!asked, "never forwarded");
    assert!(
        matches!(&ev, CallEvent::ModifyRefused { cause, .. } if cause.value.raw() == 37),
        "{ev:?}"
    );
    assert_eq!(n.ctl.links()[1].reserved_cells, held);
    // A decrease frees what a new call then takes.
    let (ev, _) = modify_through(&mut n, a, "cbr:pcr=2Mbps", None);
    assert!(matches!(ev, CallEvent::Modified { .. }), "{ev:?}");
    n.connect("cbr:pcr=9Mbps");
    assert_eq!(n.ctl.call_count(), 3);
}

#[test]
fn a_release_while_a_modification_is_pending_returns_everything() {
    let mut n = Net::new(155_520_000);
    let (a, _b, _) = n.connect("cbr:pcr=10Mbps");
    n.hosts[0].modify(n.now, a, td("cbr:pcr=50Mbps")).unwrap();
    n.run(5 * MS);
    // b has not answered: the raise is held on b's output meanwhile.
    let (fwd, _) = n.ctl.calls()[0].reserved_cells;
    assert!(fwd > 100_000, "{fwd}");
    n.hosts[0].release(n.now, a, net_cause(16)).unwrap();
    n.run(10 * MS);
    assert_eq!(n.ctl.call_count(), 0);
    assert!(n.ctl.links().iter().all(|l| l.reserved_cells == 0));
    assert!(n.ctl.modifies.is_empty());
}

/// Q.2971 ADD PARTY on an active call through the switch: refused with cause 63
/// (each leaf is a call of its own), and the call and its VCs carry on.
#[test]
fn add_party_on_a_call_is_refused_and_the_call_goes_on() {
    let mut n = Net::new(155_520_000);
    let (a, _b, connected) = n.connect("ubr");
    let a_in = connected.conn_id.unwrap().vci;
    let leaf = CallParams {
        dtl: None,
        called: party(&addr(2)).unwrap(),
        calling: party(&addr(1)),
        sap: None,
        qos: "ubr".parse().unwrap(),
        natm: NatmParams {
            data_endpoint: Some(sock(5003)),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 70)),
        multipoint: false,
    };
    n.hosts[0].add_party(n.now, a, 1, &leaf).unwrap();
    n.run(5 * MS);
    let evs = n.take_call_events(0);
    assert!(
        evs.iter().any(|e| matches!(e,
            CallEvent::PartyRejected { call, party, cause }
                if *call == a && party.value == 1 && cause.value.raw() == 63)),
        "{evs:?}"
    );
    assert!(
        !n.take_call_events(1).iter().any(|e| matches!(
            e,
            CallEvent::PartyAddRequested { .. } | CallEvent::Released { .. }
        )),
        "nothing reaches the callee"
    );
    assert_eq!(n.ctl.call_count(), 1);
    assert_eq!(frame_on(&mut n.sw, n.now, 0, a_in), Verdict::Queued);
    assert_eq!(sent_vci(&mut n.sw, n.now, 1), Some(50));
}
