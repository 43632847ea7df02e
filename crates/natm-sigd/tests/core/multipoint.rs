//! Issue 19, point-to-multipoint calls through sigd: the root's application opens a
//! call with `ConnectMultipoint` (a SETUP that says point-to-multipoint, the forward
//! direction reserved once), adds leaves reached through the same first hop as ADD
//! PARTY on that call and is told what the network answers; a leaf's sigd offers the
//! multipoint SETUP to its listener as a one-way call. In virtual time: the root
//! against a hand-driven network side (call control with the network's timers), and
//! root and leaf sigds back to back.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::support::*;
use natm_proto::sig::call::PartyRef;
use natm_proto::sig::{CallAccept, CallEvent, CallId, Saal, SaalConfig, SigEvent};
use natm_proto::time::Instant;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::q2931::{Cause, CauseValue, ConnectionId, Location, NatmParams};
use natm_proto::wire::vcframe;
use natm_sigd::config::ConfigFile;
use natm_sigd::core::{AppId, Output};

/// Guaranteed at 10 Mbit/s, in the clear (the network replicates one copy).
const QOS: &str = "guaranteed:pcr=10Mbps,encrypt=off";
/// The switch port the root's host is attached to.
const PORT: &str = "10.0.0.9:5000";

/// The root's host: everything through its switch port, except +4430… through
/// another peer.
fn root_config() -> natm_sigd::Config {
    let text = format!(
        "addresses = [\"{A_ADDR}\"]\nsocket = \"/nonexistent/sigd.sock\"\nsignalling = \"{A_SIG}\"\n\
         [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\ncpu_share = 1.0\n\
         [[directory]]\nprefix = \"+4430\"\npeer = \"10.0.0.3:2905\"\n\
         [[directory]]\nprefix = \"*\"\npeer = \"{PORT}\"\nswitch = true\n\
         [[peer]]\naddress = \"{PORT}\"\nclear = true\n"
    );
    ConfigFile::parse(&text, Path::new("test.toml"))
        .unwrap()
        .check()
        .unwrap()
}

/// The root's sigd and, across its link, the network's side of the UNI driven by
/// the test.
struct Uni {
    now: Instant,
    root: Node,
    net: Saal,
    port: SocketAddr,
    net_events: Vec<CallEvent>,
    next_req: u64,
}

impl Uni {
    fn new() -> Uni {
        let now = Instant::from_nanos(1_000_000);
        let mut u = Uni {
            now,
            root: Node::with_config(root_config(), 1),
            net: Saal::new(SaalConfig::network()),
            port: PORT.parse().unwrap(),
            net_events: Vec::new(),
            next_req: 1,
        };
        u.root.core.start(now);
        u.run(Duration::from_millis(100));
        assert!(u.net.is_up(), "the root's link to its switch comes up");
        u
    }

    /// Shuttle frames both ways until quiet.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            while let Some(o) = self.root.core.poll_output() {
                moved = true;
                match o {
                    Output::ToApp(app, m) => self.root.inbox.entry(app).or_default().push_back(m),
                    Output::ToPeer(to, bytes) if to == self.port => {
                        if let Some(pdu) = vcframe::signalling_pdu(&bytes) {
                            self.net.handle_frame(self.now, pdu);
                        }
                    }
                    _ => {}
                }
            }
            while let Some(pdu) = self.net.poll_transmit() {
                moved = true;
                let f = vcframe::signalling_frame(&pdu);
                self.root.core.handle_peer(self.now, self.port, &f);
            }
            while let Some(e) = self.net.poll_event() {
                moved = true;
                if let SigEvent::Call(c) = e {
                    self.net_events.push(c);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the link never went quiet");
    }

    /// Run the clock forward by `d` in 1 ms steps.
    fn run(&mut self, d: Duration) {
        let until = self.now + d;
        while self.now < until {
            self.settle();
            self.now += Duration::from_millis(1);
            let now = self.now;
            self.root.core.handle_timeout(now);
            self.net.handle_timeout(now);
        }
        self.settle();
    }

    fn app(&mut self) -> AppId {
        let app = AppId(100);
        self.root.core.app_connected(self.now, app, None);
        app
    }

    fn send(&mut self, app: AppId, m: Message) {
        let now = self.now;
        self.root.core.handle_app(now, app, m);
        self.run(Duration::from_millis(5));
    }

    fn take(&mut self, app: AppId) -> Vec<Message> {
        self.root
            .inbox
            .get_mut(&app)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }

    fn req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    /// What reached the network's call control (CONNECT ACKNOWLEDGEs aside).
    fn net_events(&mut self) -> Vec<CallEvent> {
        let mut e = std::mem::take(&mut self.net_events);
        e.retain(|e| !matches!(e, CallEvent::Established { .. }));
        e
    }

    /// The root's reservation on its link, out and in.
    fn reserved(&mut self) -> (u64, u64) {
        let s = self.root.core.stat();
        (
            s.capacity_bps - s.free_out_bps,
            s.capacity_bps - s.free_in_bps,
        )
    }

    /// `AddParty` for `called`: the answer.
    fn add_party(&mut self, app: AppId, call: u64, called: &str) -> Message {
        let req = self.req();
        self.send(
            app,
            Message::AddParty {
                req,
                call,
                called: called.into(),
            },
        );
        let mut msgs = self.take(app);
        let at = msgs
            .iter()
            .position(|m| matches!(m, Message::Ack { req: r, .. } | Message::Refused { req: r, .. } if *r == req))
            .unwrap_or_else(|| panic!("no answer to AddParty in {msgs:?}"));
        let answer = msgs.remove(at);
        self.root.inbox.insert(app, msgs.into());
        answer
    }
}

fn cause(v: u8) -> Cause {
    Cause::new(Location::PrivateLocal, CauseValue::from_raw(v))
}

/// The root's multipoint call to +4420002:tv, answered by the network: the app,
/// the call id, and the network's call.
fn active_call(u: &mut Uni) -> (AppId, u64, CallId) {
    let app = u.app();
    let req = u.req();
    u.send(
        app,
        Message::ConnectMultipoint {
            req,
            called: format!("{B_ADDR}:tv"),
            qos: QOS.parse().expect("test QoS"),
            data: data(40_000),
        },
    );
    let call = ack_of(&u.take(app), req);
    let (cid, params) = match u.net_events().as_slice() {
        [CallEvent::Incoming { call, params }] => (*call, params.clone()),
        other => panic!("expected the SETUP at the network, got {other:?}"),
    };
    assert!(params.multipoint, "the SETUP says point-to-multipoint");
    let answer = CallAccept {
        qos: Some(params.qos),
        natm: NatmParams {
            qos: params.natm.qos.clone(),
            data_endpoint: Some("10.0.0.9:6000".parse().unwrap()),
            cookie: params.natm.cookie,
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 40)),
    };
    let now = u.now;
    u.net.accept(now, cid, answer).unwrap();
    u.run(Duration::from_millis(5));
    connected_of(&u.take(app), call);
    (app, call, cid)
}

#[test]
fn leaves_through_the_first_hop_are_parties_of_one_call_with_one_reservation() {
    let mut u = Uni::new();
    let (app, call, cid) = active_call(&mut u);
    // One-way: the forward direction alone is reserved on the root's link.
    assert_eq!(u.reserved(), (10_000_000, 0));

    // A second leaf through the same switch port: ADD PARTY on the call, endpoint
    // reference 1, and no second reservation.
    let Message::Ack { id: 1, .. } = u.add_party(app, call, "+4420003:tv") else {
        panic!("the second leaf is party 1");
    };
    let (party, params) = match u.net_events().as_slice() {
        [CallEvent::PartyAddRequested {
            call: c,
            party,
            params,
        }] if *c == cid => (*party, params.clone()),
        other => panic!("expected ADD PARTY on the call, got {other:?}"),
    };
    assert_eq!(party.value, 1);
    assert_eq!(params.sap.map(|s| s.to_string()).as_deref(), Some("tv"));
    let now = u.now;
    u.net
        .add_party_ack(now, cid, party, &CallAccept::default())
        .unwrap();
    u.run(Duration::from_millis(5));
    assert_eq!(u.take(app), [Message::PartyAdded { call, party: 1 }]);
    assert_eq!(u.reserved(), (10_000_000, 0));

    // A leaf the network refuses: told with the cause, the call goes on.
    let Message::Ack { id: 2, .. } = u.add_party(app, call, "+4420004:tv") else {
        panic!("party 2");
    };
    let [CallEvent::PartyAddRequested { party: p2, .. }] = u.net_events()[..] else {
        panic!("ADD PARTY for party 2");
    };
    let now = u.now;
    u.net.add_party_reject(now, cid, p2, cause(37)).unwrap();
    u.run(Duration::from_millis(5));
    match u.take(app).as_slice() {
        [Message::PartyRejected {
            call: c,
            party: 2,
            cause: 37,
            ..
        }] if *c == call => {}
        other => panic!("expected PartyRejected, got {other:?}"),
    }

    // The network drops party 1 (its leaf died): the application hears it left.
    let now = u.now;
    let theirs = PartyRef {
        value: 1,
        ours: false,
    };
    u.net.drop_party(now, cid, theirs, cause(31)).unwrap();
    u.run(Duration::from_millis(5));
    match u.take(app).as_slice() {
        [Message::PartyDropped {
            call: c,
            party: 1,
            cause: 31,
            left: true,
            detail,
        }] if *c == call => assert!(detail.contains("+4420003"), "{detail}"),
        other => panic!("expected PartyDropped (left), got {other:?}"),
    }

    // Another leaf, then the root drops party 0: DROP PARTY, acknowledged.
    u.net_events();
    let Message::Ack { id: 3, .. } = u.add_party(app, call, "+4420005:tv") else {
        panic!("party 3");
    };
    let [CallEvent::PartyAddRequested { party: p3, .. }] = u.net_events()[..] else {
        panic!("ADD PARTY for party 3");
    };
    let now = u.now;
    u.net
        .add_party_ack(now, cid, p3, &CallAccept::default())
        .unwrap();
    u.run(Duration::from_millis(5));
    u.take(app);
    let req = u.req();
    u.send(
        app,
        Message::DropParty {
            req,
            call,
            party: 0,
            cause: 16,
        },
    );
    let msgs = u.take(app);
    assert_eq!(ack_of(&msgs, req), 0);
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            Message::PartyDropped {
                party: 0,
                left: false,
                ..
            }
        )),
        "{msgs:?}"
    );
    assert!(
        u.net_events().iter().any(|e| matches!(
            e,
            CallEvent::PartyDropped { party, by_peer: true, .. } if party.value == 0
        )),
        "the network saw DROP PARTY for party 0"
    );

    // The last party leaves: the call is released and its reservation returned.
    let now = u.now;
    u.net
        .drop_party(
            now,
            cid,
            PartyRef {
                value: 3,
                ours: false,
            },
            cause(31),
        )
        .unwrap();
    u.run(Duration::from_millis(5));
    let msgs = u.take(app);
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            Message::PartyDropped {
                party: 3,
                left: true,
                ..
            }
        )),
        "{msgs:?}"
    );
    released_of(&msgs, call);
    assert!(
        u.net_events()
            .iter()
            .any(|e| matches!(e, CallEvent::Released { call: c, .. } if *c == cid)),
        "the network saw the RELEASE"
    );
    assert_eq!(u.reserved(), (0, 0));
}

#[test]
fn a_leaf_through_another_peer_a_local_leaf_and_a_sealed_call_are_not_for_the_network() {
    let mut u = Uni::new();
    let (app, call, _) = active_call(&mut u);
    // Another first hop: not this call's; the application opens another call.
    match u.add_party(app, call, "+4430001:tv") {
        Message::Refused {
            cause: 63, detail, ..
        } => {
            assert!(detail.contains("another multipoint call"), "{detail}")
        }
        other => panic!("expected cause 63, got {other:?}"),
    }
    assert!(u.net_events().is_empty(), "nothing went to the network");
    // A point-to-point call has no parties.
    let req = u.req();
    u.send(
        app,
        Message::Connect {
            req,
            called: format!("{B_ADDR}:tv"),
            qos: QOS.parse().expect("test QoS"),
            data: data(40_001),
        },
    );
    let p2p = ack_of(&u.take(app), req);
    let [CallEvent::Incoming { call: cid2, .. }] = u.net_events()[..] else {
        panic!("SETUP");
    };
    let now = u.now;
    let answer = CallAccept {
        natm: NatmParams {
            data_endpoint: Some("10.0.0.9:6001".parse().unwrap()),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 41)),
        ..CallAccept::default()
    };
    u.net.accept(now, cid2, answer).unwrap();
    u.run(Duration::from_millis(5));
    u.take(app);
    match u.add_party(app, p2p, "+4420003:tv") {
        Message::Refused { cause: 63, .. } => {}
        other => panic!("expected cause 63, got {other:?}"),
    }
    // A call that would be sealed (the default across hosts) is refused, before
    // anything is reserved: each leaf then gets a sealed call of its own.
    let before = u.reserved();
    for (called, qos) in [
        (format!("{B_ADDR}:tv"), "guaranteed:pcr=10Mbps"),
        (format!("{A_ADDR}:tv"), QOS),
    ] {
        let req = u.req();
        u.send(
            app,
            Message::ConnectMultipoint {
                req,
                called,
                qos: qos.parse().expect("test QoS"),
                data: data(40_002),
            },
        );
        let msgs = u.take(app);
        assert!(
            matches!(msgs.as_slice(), [Message::Refused { cause: 63, .. }]),
            "{qos}: {msgs:?}"
        );
    }
    assert_eq!(u.reserved(), before);
    assert!(u.net_events().is_empty());
}

#[test]
fn an_unanswered_add_party_is_refused_after_t399_and_the_network_told() {
    let mut u = Uni::new();
    let (app, call, cid) = active_call(&mut u);
    let Message::Ack { id: 1, .. } = u.add_party(app, call, "+4420003:tv") else {
        panic!("party 1");
    };
    u.net_events();
    u.run(Duration::from_secs(15));
    match u.take(app).as_slice() {
        [Message::PartyRejected {
            party: 1,
            cause: 102,
            ..
        }] => {}
        other => panic!("expected PartyRejected cause 102, got {other:?}"),
    }
    assert!(
        u.net_events().iter().any(|e| matches!(
            e,
            CallEvent::PartyDropped { call: c, party, .. } if *c == cid && party.value == 1
        )),
        "DROP PARTY went to the network"
    );
    // Party 0 is still there, and so is the call.
    assert_eq!(u.reserved(), (10_000_000, 0));
}

#[test]
fn a_leaf_sigd_offers_the_multipoint_setup_as_a_one_way_call() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "tv", QOS);
    let a_app = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::ConnectMultipoint {
            req,
            called: format!("{B_ADDR}:tv"),
            qos: QOS.parse().expect("test QoS"),
            data: data(40_000),
        },
    );
    let a_call = ack_of(&p.take(Side::A, a_app), req);
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, qos, .. }] => {
            assert_eq!(
                qos.tx().pcr.and_then(|r| r.bits_per_sec()),
                Some(10_000_000),
                "{qos}"
            );
            *call
        }
        other => panic!("expected one Incoming, got {other:?}"),
    };
    let b_path = connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    let a_path = connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(b_path.keys, None, "a multipoint call is in the clear");
    // Both applications are told the call is point-to-multipoint: their VC is
    // one-way.
    assert!(a_path.multipoint && b_path.multipoint);
    // Each end reserves the forward direction only: the root sends, the leaf
    // receives.
    let (a, b) = (p.stat(Side::A), p.stat(Side::B));
    assert_eq!(a.capacity_bps - a.free_out_bps, 10_000_000);
    assert_eq!(a.capacity_bps - a.free_in_bps, 0);
    assert_eq!(b.capacity_bps - b.free_out_bps, 0);
    assert!(b.capacity_bps - b.free_in_bps >= 10_000_000);
    // A second leaf on the leaf's host (ADD PARTY arriving there) is refused with
    // cause 63; the call goes on.
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::AddParty {
            req,
            call: a_call,
            called: format!("{B_ADDR}:tv"),
        },
    );
    let msgs = p.take(Side::A, a_app);
    assert_eq!(ack_of(&msgs, req), 1);
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            Message::PartyRejected {
                party: 1,
                cause: 63,
                ..
            }
        )),
        "{msgs:?}"
    );
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    // The leaf's application goes: its call is released like any other.
    p.close(Side::B, b_app);
    released_of(&p.take(Side::A, a_app), a_call);
    let a = p.stat(Side::A);
    assert_eq!(a.free_out_bps, a.capacity_bps);
}

#[test]
fn through_a_natm_switch_the_leaf_is_a_branch_and_its_departure_ends_the_call() {
    let mut p = Pair::switched(None);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "tv", QOS);
    let a_app = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::ConnectMultipoint {
            req,
            called: format!("{B_ADDR}:tv"),
            qos: QOS.parse().expect("test QoS"),
            data: data(40_000),
        },
    );
    let a_call = ack_of(&p.take(Side::A, a_app), req);
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected the branch's SETUP offered at B, got {other:?}"),
    };
    connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    let a_path = connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(a_path.keys, None);
    let (a, b) = (p.stat(Side::A), p.stat(Side::B));
    assert_eq!(a.capacity_bps - a.free_out_bps, 10_000_000);
    assert_eq!(a.capacity_bps - a.free_in_bps, 0);
    assert_eq!(b.capacity_bps - b.free_out_bps, 0);
    // A second leaf on B rides the branch to B's port: the switch forwards the ADD
    // PARTY, B's sigd refuses a second party on its call (63), and the root hears
    // it; the call goes on.
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::AddParty {
            req,
            call: a_call,
            called: format!("{B_ADDR}:tv"),
        },
    );
    let msgs = p.take(Side::A, a_app);
    assert_eq!(ack_of(&msgs, req), 1);
    assert!(
        msgs.iter().any(|m| matches!(
            m,
            Message::PartyRejected {
                party: 1,
                cause: 63,
                ..
            }
        )),
        "{msgs:?}"
    );
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    // The only leaf's application goes: its branch's release reaches the root as
    // the call's end (no party is left), and the reservation comes back.
    p.close(Side::B, b_app);
    p.advance(Duration::from_millis(50));
    let msgs = p.take(Side::A, a_app);
    assert!(
        msgs.iter()
            .all(|m| !matches!(m, Message::PartyDropped { left: false, .. })),
        "{msgs:?}"
    );
    released_of(&msgs, a_call);
    let a = p.stat(Side::A);
    assert_eq!(a.free_out_bps, a.capacity_bps);
}
