//! A port to a standard UNI user (Linux's `atmsigd`, issue 15), in virtual time: the
//! host on port 0 is a bare `Saal` (what a sigd drives); the user on port 1 is either
//! an SSCOP connection that sends the very SETUPs Linux's atmsigd sent
//! (`../shared/linuxatm/captures`, below) or a `Saal` configured as such a user (no
//! private IE, leaves the connection identifier to the network).

use std::net::SocketAddr;

use bytes::Bytes;
use natm_proto::sig::sscop::{Sscop, SscopConfig, SscopEvent};
use natm_proto::sig::{CallAccept, CallEvent, CallId, CallParams, Saal, SigEvent};
use natm_proto::wire::addr::{party, AtmAddr, HostsFile};
use natm_proto::wire::q2931::{
    ConnectionId, IeId, Message, MessageType, NatmParams, TrafficDescriptor,
};

use super::*;
use crate::PortConfig;
use natm_proto::wire::qos::Rate;

const MS: Duration = Duration::from_millis(1);

/// The SSCOP SD PDUs atmsigd 2.5.1 sent in user mode, one per line, per UNI variant
/// (`atmsigd -u uni30|uni31|uni40`): `svc_send` UBR, `svc_send cbr:pcr=1000`, and
/// `ttcp_atm` CBR 2000 cells/s with a vendor-specific B-HLI. Called party
/// 47.0005.80ffe1000000f21a26d8.0020ea000ee{1,2,3}.00.
const CAPTURES: [(&str, &str); 3] = [
    ("uni30", include_str!("testdata/setups-uni30.hex")),
    ("uni31", include_str!("testdata/setups-uni31.hex")),
    ("uni40", include_str!("testdata/setups-uni40.hex")),
];

fn sock(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn host_addr() -> AtmAddr {
    "47.0005.80ffe1000000f21a26d8.0020ea000ee1.00"
        .parse()
        .unwrap()
}

fn linux_addr() -> AtmAddr {
    "47.0005.80ffe1000000f21a26d8.0020ea000e99.00"
        .parse()
        .unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The Q.2931 message inside an SSCOP SD PDU: the trailer's top two bits are the pad
/// length (Q.2110 §7.1).
fn sd_payload(pdu: &[u8]) -> Bytes {
    let trailer = &pdu[pdu.len() - 4..];
    let pad = usize::from(trailer[0] >> 6);
    Bytes::copy_from_slice(&pdu[..pdu.len() - 4 - pad])
}

/// The standard user at port 1.
#[allow(clippy::large_enum_variant)] // one per test
enum User {
    /// Raw SSCOP: Q.2931 messages in and out as bytes.
    Raw(Sscop, Vec<Message>),
    /// Call control configured as a standard user.
    Saal(Saal, Vec<SigEvent>),
}

struct Net {
    now: Instant,
    sw: Switch,
    ctl: Control,
    host: Saal,
    host_events: Vec<SigEvent>,
    user: User,
    alive: bool,
}

/// What a standard UNI user's call control looks like: user side, no private IE.
fn user_saal() -> Saal {
    let mut cfg = ControlConfig::network_saal();
    cfg.calls.private_ie = false;
    cfg.calls.location = Location::User;
    Saal::new(cfg)
}

impl Net {
    fn new(user: User) -> Net {
        Net::with_no_response(user, None)
    }

    /// With the standard user's port's own SSCOP Timer_NO_RESPONSE.
    fn with_no_response(user: User, no_response: Option<Duration>) -> Net {
        let mut sw = Switch::new();
        let p0 = sw.add_port(PortConfig::new(100_000_000)).unwrap();
        let p1 = sw.add_port(PortConfig::new(155_520_000)).unwrap();
        let h = HostsFile::default();
        let cfg = ControlConfig {
            routes: vec![
                (
                    Prefix::parse("47.0005.80ffe1000000f21a26d8.0020ea000ee", &h).unwrap(),
                    p0,
                ),
                (
                    Prefix::parse("47.0005.80ffe1000000f21a26d8.0020ea000e99", &h).unwrap(),
                    p1,
                ),
                // The Linux guest whose SETUPs are captured in testdata/ calls as
                // ...ee0: its port owns that number (calling-number screening).
                (
                    Prefix::parse("47.0005.80ffe1000000f21a26d8.0020ea000ee0", &h).unwrap(),
                    p1,
                ),
            ],
            ..ControlConfig::default()
        };
        let mut ctl = Control::new(cfg);
        let now = Instant::from_nanos(1);
        for (p, role, data) in [
            (p0, PortRole::Host, sock(9100)),
            (p1, PortRole::Uni, sock(9101)),
        ] {
            let no_response = if role == PortRole::Uni {
                no_response
            } else {
                None
            };
            ctl.add_port(
                now,
                ControlPort {
                    port: p,
                    name: format!("p{}", p.0),
                    role,
                    data,
                    vcis: natm_proto::sig::vci::NETWORK_HALF,
                    link_cells: 353_207,
                    preserve: None,
                    no_response,
                    screen_calling: true,
                    first_sq: None,
                },
            );
        }
        let mut host = Saal::new(ControlConfig::network_saal());
        host.start(now);
        let mut n = Net {
            now,
            sw,
            ctl,
            host,
            host_events: Vec::new(),
            user,
            alive: true,
        };
        match &mut n.user {
            User::Raw(s, _) => s.establish(now),
            User::Saal(s, _) => s.start(now),
        }
        n.run(50 * MS);
        assert!(n.ctl.is_up(PortId(0)) && n.ctl.is_up(PortId(1)));
        n
    }

    fn raw() -> Net {
        Net::raw_with(None)
    }

    fn raw_with(no_response: Option<Duration>) -> Net {
        let cfg = SscopConfig {
            window: 30,
            ..SscopConfig::default()
        };
        Net::with_no_response(User::Raw(Sscop::new(cfg), Vec::new()), no_response)
    }

    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now <= end {
            for _ in 0..100 {
                let mut moved = false;
                while let Some(pdu) = self.host.poll_transmit() {
                    moved = true;
                    self.ctl.handle_signal(self.now, PortId(0), &pdu);
                }
                while let Some(e) = self.host.poll_event() {
                    self.host_events.push(e);
                }
                let user_pdus: Vec<Bytes> = match &mut self.user {
                    User::Raw(s, msgs) => {
                        while let Some(e) = s.poll_event() {
                            if let SscopEvent::Data(b) = e {
                                msgs.push(
                                    Message::parse(&b).expect("the switch sends valid Q.2931"),
                                );
                            }
                        }
                        std::iter::from_fn(|| s.poll_transmit()).collect()
                    }
                    User::Saal(s, evs) => {
                        while let Some(e) = s.poll_event() {
                            evs.push(e);
                        }
                        std::iter::from_fn(|| s.poll_transmit()).collect()
                    }
                };
                for pdu in user_pdus {
                    moved = true;
                    if self.alive {
                        self.ctl.handle_signal(self.now, PortId(1), &pdu);
                    }
                }
                while let Some(o) = self.ctl.poll_output(&mut self.sw) {
                    moved = true;
                    if let Output::Signal(p, pdu) = o {
                        if p == PortId(0) {
                            self.host.handle_frame(self.now, &pdu);
                        } else if self.alive {
                            match &mut self.user {
                                User::Raw(s, _) => s.handle_pdu(self.now, &pdu),
                                User::Saal(s, _) => s.handle_frame(self.now, &pdu),
                            }
                        }
                    }
                }
                if !moved {
                    break;
                }
            }
            self.now += MS;
            if self.host.poll_timeout().is_some_and(|t| t <= self.now) {
                self.host.handle_timeout(self.now);
            }
            match &mut self.user {
                User::Raw(s, _) => {
                    if s.poll_timeout().is_some_and(|t| t <= self.now) {
                        s.handle_timeout(self.now);
                    }
                }
                User::Saal(s, _) => {
                    if s.poll_timeout().is_some_and(|t| t <= self.now) {
                        s.handle_timeout(self.now);
                    }
                }
            }
            if self.ctl.poll_timeout().is_some_and(|t| t <= self.now) {
                self.ctl.handle_timeout(self.now);
            }
        }
    }

    fn host_calls(&mut self) -> Vec<CallEvent> {
        std::mem::take(&mut self.host_events)
            .into_iter()
            .filter_map(|e| match e {
                SigEvent::Call(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    fn user_messages(&mut self) -> Vec<Message> {
        match &mut self.user {
            User::Raw(_, m) => std::mem::take(m),
            User::Saal(..) => Vec::new(),
        }
    }

    fn user_calls(&mut self) -> Vec<CallEvent> {
        match &mut self.user {
            User::Saal(_, evs) => std::mem::take(evs)
                .into_iter()
                .filter_map(|e| match e {
                    SigEvent::Call(c) => Some(c),
                    _ => None,
                })
                .collect(),
            User::Raw(..) => Vec::new(),
        }
    }

    /// The host answers an incoming call, receiving on `vci` at 127.0.0.1:5002.
    fn host_accepts(&mut self, call: CallId, vci: u16) {
        let accept = CallAccept {
            qos: None,
            natm: NatmParams {
                data_endpoint: Some(sock(5002)),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, vci)),
        };
        self.host.accept(self.now, call, accept).unwrap();
        self.run(5 * MS);
    }
}

/// The natm host's call to the Linux user with `q`, receiving on VCI 40 at
/// 127.0.0.1:5001.
fn host_call(q: Qos) -> CallParams {
    CallParams {
        dtl: None,
        called: party(&linux_addr()).unwrap(),
        calling: party(&host_addr()),
        sap: None,
        qos: q,
        natm: NatmParams {
            qos: Some(q.to_string()),
            data_endpoint: Some(sock(5001)),
            ..NatmParams::default()
        },
        conn_id: Some(ConnectionId::exclusive(0, 40)),
        multipoint: false,
    }
}

fn incoming(evs: Vec<CallEvent>) -> Option<(CallId, CallParams)> {
    evs.into_iter().find_map(|e| match e {
        CallEvent::Incoming { call, params } => Some((call, params)),
        _ => None,
    })
}

/// Every SETUP Linux's atmsigd sent, in each UNI variant, reaches the natm host as a
/// bare AAL5 call with the QoS it asked for; the user learns its VCI from CALL
/// PROCEEDING, gets CONNECT without natm's private IE when the host answers, and the
/// data plane joins its one VCC to the host's two labels.
#[test]
fn linux_setups_reach_a_natm_host_as_bare_calls() {
    for (variant, text) in CAPTURES {
        for (i, line) in text.lines().filter(|l| !l.is_empty()).enumerate() {
            let mut net = Net::raw();
            let setup = sd_payload(&hex(line.trim()));
            let now = net.now;
            if let User::Raw(s, _) = &mut net.user {
                s.send(now, setup).unwrap();
            }
            net.run(5 * MS);
            let (call, params) = incoming(net.host_calls())
                .unwrap_or_else(|| panic!("{variant} SETUP {i}: the host is offered the call"));
            let what = format!("{variant} SETUP {i}");
            assert!(params.qos.is_bare(), "{what}: {}", params.qos);
            assert_eq!(params.natm.data_endpoint, Some(sock(9100)), "{what}");
            assert!(
                params.conn_id.is_some(),
                "{what}: the switch labels the host's VC"
            );
            match i {
                0 => {
                    assert_eq!(params.qos.class(), natm_proto::wire::qos::TrafficClass::Ubr);
                    assert_eq!(
                        params.sap.as_ref().map(|s| s.as_bytes().to_vec()),
                        Some(b"FORE_ATM".to_vec()),
                        "{what}: svc_send's B-HLI is the SAP"
                    );
                }
                1 => assert_eq!(
                    params.qos.to_string(),
                    "cbr:pcr=384kbps,transport=none",
                    "{what}"
                ),
                _ => assert_eq!(
                    params.qos.tx().pcr.and_then(|r| r.cells_per_sec()),
                    Some(2000),
                    "{what}"
                ),
            }
            let msgs = net.user_messages();
            let proceeding = msgs
                .iter()
                .find(|m| m.kind == MessageType::CallProceeding)
                .unwrap_or_else(|| panic!("{what}: CALL PROCEEDING"));
            let vcc = proceeding
                .find::<ConnectionId>()
                .unwrap_or_else(|| panic!("{what}: the network names the VCC"))
                .vci;
            assert!(natm_proto::sig::vci::NETWORK_HALF.contains(&vcc), "{what}");

            net.host_accepts(call, 40);
            let msgs = net.user_messages();
            let connect = msgs
                .iter()
                .find(|m| m.kind == MessageType::Connect)
                .unwrap_or_else(|| panic!("{what}: CONNECT"));
            assert!(
                connect.ies.iter().all(|ie| ie.id() != IeId::Natm.raw()),
                "{what}: no private IE towards Linux"
            );
            // Linux's data on its VCC reaches the host's receive label, and the host's
            // data (on the switch's label for it) reaches the VCC.
            let from_linux = net.sw.lookup(PortId(1), 0, vcc);
            assert!(from_linux.is_some(), "{what}: cross-connected");
            let host_tx = params.conn_id.unwrap().vci;
            assert_eq!(
                net.sw.lookup(PortId(0), 0, host_tx).is_some(),
                params.qos.rx().is_used(),
                "{what}: the host's sending label is joined if the user receives"
            );
            assert_eq!(net.ctl.call_count(), 1, "{what}");
        }
    }
}

/// A natm host calls a Linux user: the SETUP it gets is plain UNI 3.1 (no private
/// IE, the network's VCI, a best-effort peak rate within OC-3); the call connects
/// and clears both ways.
#[test]
fn a_natm_host_calls_a_standard_user() {
    let mut net = Net::new(User::Saal(user_saal(), Vec::new()));
    let params = host_call("ubr:transport=none".parse().unwrap());
    let a = net.host.setup(net.now, params).unwrap();
    net.run(5 * MS);
    let (b, offered) = incoming(net.user_calls()).expect("the user is offered the call");
    assert!(offered.qos.is_bare(), "no private IE: bare AAL5");
    assert_eq!(offered.natm, NatmParams::default(), "nothing of natm's");
    let vcc = offered.conn_id.expect("the network names the VCC").vci;
    if let User::Saal(s, _) = &mut net.user {
        s.accept(net.now, b, CallAccept::default()).unwrap();
    }
    net.run(5 * MS);
    let connected = net.host_calls().into_iter().find_map(|e| match e {
        CallEvent::Connected { call, params } if call == a => Some(params),
        _ => None,
    });
    let accept = connected.expect("the host's call connects");
    assert_eq!(
        accept.natm.data_endpoint,
        Some(sock(9100)),
        "the switch's port"
    );
    let host_tx = accept
        .conn_id
        .expect("the host learns its sending label")
        .vci;
    assert!(net.sw.lookup(PortId(0), 0, host_tx).is_some());
    assert!(net.sw.lookup(PortId(1), 0, vcc).is_some());
    // The user hangs up: the host hears it with the user's cause.
    if let User::Saal(s, _) = &mut net.user {
        s.release(net.now, b, net_cause(16)).unwrap();
    }
    net.run(10 * MS);
    assert!(net.host_calls().iter().any(|e| matches!(
        e,
        CallEvent::Released { call, cause, .. } if *call == a && cause.value.raw() == 16
    )));
    assert_eq!(net.ctl.call_count(), 0);
    assert!(net.sw.lookup(PortId(1), 0, vcc).is_none(), "VCC removed");
}

/// natm's transport cannot cross a standard user's VCC: such a call is refused at
/// once with cause 88 rather than timing out.
#[test]
fn natm_transport_towards_a_standard_user_is_refused_with_88() {
    let mut net = Net::new(User::Saal(user_saal(), Vec::new()));
    let params = host_call(Qos::reliable());
    let a = net.host.setup(net.now, params).unwrap();
    net.run(5 * MS);
    assert!(net.host_calls().iter().any(|e| matches!(
        e,
        CallEvent::Released { call, cause, .. } if *call == a && cause.value.raw() == 88
    )));
    assert!(
        incoming(net.user_calls()).is_none(),
        "nothing reaches the user"
    );
}

/// The best-effort peak rate towards a standard user is its line's, at most OC-3:
/// Linux refuses a larger one (cause 88).
#[test]
fn best_effort_peak_rate_towards_a_standard_user_fits_oc3() {
    let mut net = Net::raw();
    let params = host_call("ubr:transport=none".parse().unwrap());
    net.host.setup(net.now, params).unwrap();
    net.run(5 * MS);
    let msgs = net.user_messages();
    let setup = msgs
        .iter()
        .find(|m| m.kind == MessageType::Setup)
        .expect("SETUP reaches the user");
    let td = setup
        .find::<TrafficDescriptor>()
        .expect("traffic descriptor");
    assert!(td.best_effort);
    assert!(td.fwd.pcr01.is_some_and(|p| p <= 353_207), "{td:?}");
    assert!(setup.ies.iter().all(|ie| ie.id() != IeId::Natm.raw()));
    assert!(
        setup.find::<ConnectionId>().is_some(),
        "network → user SETUP names the VCC"
    );
}

/// A raw standard user's captured SETUP, accepted by the host: the host's call.
fn linux_call_accepted(net: &mut Net) -> CallId {
    let setup = sd_payload(&hex(CAPTURES[1].1.lines().next().unwrap().trim()));
    let now = net.now;
    if let User::Raw(s, _) = &mut net.user {
        s.send(now, setup).unwrap();
    }
    net.run(5 * MS);
    let (call, _) = incoming(net.host_calls()).expect("offered");
    net.host_accepts(call, 40);
    assert_eq!(net.ctl.call_count(), 1);
    call
}

/// The user's signalling link dies: the host's call through it is released (T309 is
/// zero in the switch) with a cause, nothing hangs.
#[test]
fn a_dead_standard_user_releases_the_host_side() {
    let mut net = Net::raw();
    let call = linux_call_accepted(&mut net);
    net.alive = false;
    // Q.2110's Timer_NO_RESPONSE (7 s) on a standard UNI port.
    net.run(Duration::from_millis(9000));
    assert!(net.host_calls().iter().any(|e| matches!(
        e,
        CallEvent::Released { call: c, .. } if *c == call
    )));
    assert_eq!(net.ctl.call_count(), 0);
}

/// A port's own Timer_NO_RESPONSE (`sscop_no_response_ms`): a standard user that
/// stops answering (here: every PDU lost both ways while data is outstanding) keeps
/// its call until that time has passed without a STAT, then the host side is
/// released — later than the default link's would be, not never.
#[test]
fn a_ports_own_no_response_time_decides_when_a_silent_user_is_dropped() {
    let released_after = |no_response: Option<Duration>| {
        let mut net = Net::raw_with(no_response);
        let call = linux_call_accepted(&mut net);
        net.alive = false;
        let dead = net.now;
        while net.ctl.call_count() == 1 && net.now < dead + Duration::from_secs(60) {
            net.run(100 * MS);
        }
        assert!(net.host_calls().iter().any(|e| matches!(
            e,
            CallEvent::Released { call: c, .. } if *c == call
        )));
        net.now - dead
    };
    let default = released_after(None);
    let long = released_after(Some(Duration::from_secs(20)));
    // Q.2110's 7 s towards a standard user (not the 400 ms of natm's links).
    assert!(
        default >= Duration::from_secs(6) && default < Duration::from_secs(9),
        "{default:?}"
    );
    assert!(
        long >= Duration::from_secs(19) && long < Duration::from_secs(22),
        "{long:?} (default {default:?})"
    );
}

/// The standard user's transport is gone (its atmtcp connection closed): the link
/// fails at once, not after Timer_NO_RESPONSE, and the host side of its call is
/// released — so a Linux host that reconnects finds its old calls gone.
#[test]
fn a_lost_transport_fails_the_link_and_releases_at_once() {
    let mut net = Net::raw();
    let call = linux_call_accepted(&mut net);
    net.alive = false;
    let now = net.now;
    net.ctl.port_lost(now, PortId(1));
    net.run(50 * MS);
    assert!(!net.ctl.is_up(PortId(1)));
    assert_eq!(net.ctl.call_count(), 0);
    assert!(net.host_calls().iter().any(|e| matches!(
        e,
        CallEvent::Released { call: c, .. } if *c == call
    )));
}

/// A refusal towards a standard user carries only what Q.2931 defines: natm's
/// account of where and why ([`NetworkRefusal`]) goes to natm peers only, and the
/// refusal is still counted.
#[test]
fn a_standard_user_is_refused_with_plain_q2931_diagnostics() {
    let mut net = Net::new(User::Saal(user_saal(), Vec::new()));
    let nowhere: AtmAddr = "47.0005.80ffe1000000f21a26d8.0020ea000e77.00"
        .parse()
        .unwrap();
    let params = CallParams {
        called: party(&nowhere).unwrap(),
        calling: party(&linux_addr()),
        sap: None,
        qos: "cbr:pcr=1Mbps,transport=none".parse().unwrap(),
        natm: NatmParams::default(),
        conn_id: None,
        multipoint: false,
        dtl: None,
    };
    let now = net.now;
    if let User::Saal(s, _) = &mut net.user {
        s.setup(now, params).unwrap();
    }
    net.run(5 * MS);
    let cause = net
        .user_calls()
        .into_iter()
        .find_map(|e| match e {
            CallEvent::Released { cause, .. } => Some(cause),
            _ => None,
        })
        .expect("the user's call is refused");
    assert_eq!(cause.value.raw(), 3);
    assert!(cause.diagnostics.is_empty(), "{cause}");
    assert_eq!(net.ctl.refused(), 1);
    assert_eq!(net.ctl.links()[1].refused, 1, "counted on the user's link");
}

/// The switch polices a call at exactly the traffic descriptor its SETUP gives the
/// standard user (issue 33: 10,621/5,311 cells/s policed against 10,417/5,209
/// signalled): both are the QoS's payload in cells on the wire, each SDU's overhead
/// and pad included (`Qos::wire_cells`).
#[test]
fn the_switch_polices_the_contract_it_signals_to_a_standard_user() {
    let mut net = Net::new(User::Saal(user_saal(), Vec::new()));
    let q: Qos = "vbr:pcr=4Mbps,scr=2Mbps,mbs=100,sdu=4096,transport=none"
        .parse()
        .unwrap();
    let a = net.host.setup(net.now, host_call(q)).unwrap();
    net.run(5 * MS);
    let (b, offered) = incoming(net.user_calls()).expect("the user is offered the call");
    let signalled = offered.qos.tx();
    let cells = |r: Option<Rate>| r.and_then(|r| r.cells_per_sec());
    assert_eq!(
        (cells(signalled.pcr), cells(signalled.scr)),
        (Some(10_621), Some(5_311))
    );
    if let User::Saal(s, _) = &mut net.user {
        s.accept(net.now, b, CallAccept::default()).unwrap();
    }
    net.run(5 * MS);
    assert!(net.host_calls().iter().any(|e| matches!(
        e,
        CallEvent::Connected { call, .. } if *call == a
    )));
    // The VC from the host (port 0) towards the user (port 1).
    let policed = net
        .sw
        .stat()
        .vcs
        .into_iter()
        .find(|v| v.xc.to().port() == PortId(1))
        .expect("the forward VC")
        .contract;
    assert_eq!(policed.pcr, Some(10_621));
    assert_eq!(policed.scr.map(|(scr, _)| scr), Some(5_311));
}

/// Classical IP over SVCs (RFC 2225): Linux's `atmarpd` names the service only by a
/// B-LLI (layer 2 LLC) and no B-HLI. Its SETUP — here Linux's first captured SETUP
/// with the B-HLI swapped for that B-LLI — reaches the natm host on SAP `blli.llc`,
/// and the host's call on that SAP reaches the standard user with the B-LLI.
#[test]
fn a_service_named_only_by_blli_crosses_the_uni_both_ways() {
    use natm_proto::wire::q2931::{Bhli, Blli, IeContent as _};
    let first = CAPTURES[1].1.lines().find(|l| !l.is_empty()).unwrap();
    let mut setup = Message::parse(&sd_payload(&hex(first.trim()))).unwrap();
    setup.ies.retain(|ie| Bhli::from_body(&ie.body).is_none());
    setup.push(Blli::llc());
    let mut net = Net::raw();
    let now = net.now;
    if let User::Raw(s, _) = &mut net.user {
        s.send(now, Bytes::from(setup.to_bytes().unwrap())).unwrap();
    }
    net.run(5 * MS);
    let (_, params) = incoming(net.host_calls()).expect("the host is offered the call");
    assert_eq!(params.sap, Some(natm_proto::sig::Sap::llc()));
    assert_eq!(params.sap.unwrap().to_string(), "blli.llc");

    let mut net = Net::new(User::Saal(user_saal(), Vec::new()));
    let params = CallParams {
        sap: Some(natm_proto::sig::Sap::llc()),
        ..host_call("ubr:transport=none".parse().unwrap())
    };
    net.host.setup(net.now, params).unwrap();
    net.run(5 * MS);
    let (_, offered) = incoming(net.user_calls()).expect("the user is offered the call");
    assert_eq!(offered.sap, Some(natm_proto::sig::Sap::llc()));
}
