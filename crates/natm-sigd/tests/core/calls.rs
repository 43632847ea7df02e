//! Calls through sigd cores in virtual time: set-up inside one host and between two,
//! release from either side, and an application's death (seed 001 §4.5).

use std::time::Duration;

use crate::support::*;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::q2931::MessageType as Q;

#[test]
fn a_local_call_connects_two_applications_of_one_host() {
    let mut p = Pair::default();
    let callee = p.app(Side::A);
    let listener = p.bind(Side::A, callee, "echo", "reliable");
    let caller = p.app(Side::A);
    let call = p.connect(Side::A, caller, "+4420001:echo", "reliable");
    let offered = match p.take(Side::A, callee).as_slice() {
        [Message::Incoming {
            listener: l,
            call,
            caller,
            qos,
        }] => {
            assert_eq!(*l, listener);
            assert_eq!(caller, A_ADDR);
            assert_eq!(qos.to_string(), "reliable");
            *call
        }
        other => panic!("expected an offer, got {other:?}"),
    };
    let back = p.accept(Side::A, callee, offered);
    assert!(matches!(back[0], Message::Ack { id, .. } if id == offered));
    let callee_path = connected_of(&back, offered);
    let caller_path = connected_of(&p.take(Side::A, caller), call);
    // One pool for both directions, each end told the other's endpoint, one cookie.
    assert_eq!(caller_path.tx_vci, callee_path.rx_vci);
    assert_eq!(caller_path.rx_vci, callee_path.tx_vci);
    assert_ne!(caller_path.tx_vci, caller_path.rx_vci);
    assert!(caller_path.tx_vci >= 32 && caller_path.rx_vci >= 32);
    assert_eq!(caller_path.cookie, callee_path.cookie);
    assert_eq!(caller_path.peer, data(50_000 + callee.0 as u16));
    assert_eq!(callee_path.peer, data(40_000 + caller.0 as u16));
    // No signalling for a call inside the host.
    assert!(p.trace.is_empty(), "{:?}", p.trace);
}

#[test]
fn a_call_between_two_hosts_runs_setup_connect_and_connect_ack() {
    let mut p = Pair::default();
    let (a, b, _) = p.call_ab();
    assert_eq!(p.sent_by(Side::A), vec![Q::Setup, Q::ConnectAck]);
    assert_eq!(p.sent_by(Side::B), vec![Q::Connect]);
    // Downstream allocation: each side labels the VC it receives on.
    assert_eq!(a.tx_vci, b.rx_vci);
    assert_eq!(a.rx_vci, b.tx_vci);
    assert_ne!(a.tx_vci, a.rx_vci, "the two VCs share one data socket");
    assert_eq!(a.cookie, b.cookie);
    assert_eq!(a.qos.to_string(), "reliable");
    assert_eq!(b.qos.to_string(), "reliable");
}

#[test]
fn a_slow_callee_sends_call_proceeding_and_the_call_still_connects() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    // min(T303/4, 20 ms) without an answer: CALL PROCEEDING, well before T303.
    p.advance(Duration::from_millis(25));
    assert_eq!(p.sent_by(Side::B), vec![Q::CallProceeding]);
    p.accept(Side::B, b_app, b_call);
    connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(p.sent_by(Side::A), vec![Q::Setup, Q::ConnectAck]);
    assert_eq!(p.sent_by(Side::B), vec![Q::CallProceeding, Q::Connect]);
}

#[test]
fn the_caller_releasing_tells_the_callee_with_its_cause() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req,
            call: a_call,
            cause: 16,
        },
    );
    assert_eq!(ack_of(&p.take(Side::A, a_app), req), a_call);
    let (cause, _) = released_of(&p.take(Side::B, b_app), b_call);
    assert_eq!(cause, 16);
    assert!(p.sent_by(Side::A).ends_with(&[Q::Release]));
    assert!(p.sent_by(Side::B).ends_with(&[Q::ReleaseComplete]));
    assert_eq!(p.stat(Side::A).vcis_in_use, 0);
    assert_eq!(p.stat(Side::B).vcis_in_use, 0);
}

#[test]
fn the_callee_releasing_tells_the_caller() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    let req = p.req();
    p.send(
        Side::B,
        b_app,
        Message::Release {
            req,
            call: b_call,
            cause: 31,
        },
    );
    ack_of(&p.take(Side::B, b_app), req);
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 31);
    assert!(detail.contains("released by the called side"), "{detail}");
    assert_eq!(p.stat(Side::A).calls.len(), 0);
}

#[test]
fn a_release_with_tag_zero_gets_no_answer() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: a_call,
            cause: 16,
        },
    );
    assert_eq!(p.take(Side::A, a_app), vec![]);
    released_of(&p.take(Side::B, b_app), b_call);
}

#[test]
fn a_local_release_reaches_the_other_application() {
    let mut p = Pair::default();
    let callee = p.app(Side::A);
    p.bind(Side::A, callee, "echo", "reliable");
    let caller = p.app(Side::A);
    let call = p.connect(Side::A, caller, "+4420001:echo", "reliable");
    let offered = match p.take(Side::A, callee).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.accept(Side::A, callee, offered);
    p.take(Side::A, caller);
    let req = p.req();
    p.send(
        Side::A,
        callee,
        Message::Release {
            req,
            call: offered,
            cause: 16,
        },
    );
    let (cause, detail) = released_of(&p.take(Side::A, caller), call);
    assert_eq!(cause, 16);
    assert!(
        detail.contains("closed by the peer application"),
        "{detail}"
    );
    assert_eq!(p.stat(Side::A).vcis_in_use, 0);
}

#[test]
fn an_application_that_dies_has_its_calls_released_at_the_peer() {
    let mut p = Pair::default();
    let (_, _, (a_app, _, b_app, b_call)) = p.call_ab();
    p.close(Side::A, a_app);
    let (cause, _) = released_of(&p.take(Side::B, b_app), b_call);
    assert_eq!(cause, 41, "not 16: the peer's ulib aborts the VCs at once");
    let s = p.stat(Side::A);
    assert_eq!(s.counters.app_deaths_cleaned, 1);
    assert!(s.calls.is_empty());
    assert!(p.stat(Side::B).calls.is_empty());
}

#[test]
fn an_unbound_listener_s_offer_moves_to_another_listener_on_the_sap() {
    let mut p = Pair::default();
    let first = p.app(Side::B);
    let l1 = p.bind(Side::B, first, "echo", "reliable");
    let second = p.app(Side::B);
    let l2 = p.bind(Side::B, second, "echo", "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    // The lowest connection is offered first.
    assert!(matches!(
        p.take(Side::B, first).as_slice(),
        [Message::Incoming { .. }]
    ));
    let req = p.req();
    p.send(Side::B, first, Message::Unbind { req, listener: l1 });
    ack_of(&p.take(Side::B, first), req);
    let moved = match p.take(Side::B, second).as_slice() {
        [Message::Incoming { listener, call, .. }] if *listener == l2 => *call,
        other => panic!("expected the offer on the second listener, got {other:?}"),
    };
    p.accept(Side::B, second, moved);
    connected_of(&p.take(Side::A, a_app), a_call);
}

#[test]
fn a_listener_dying_with_nobody_else_on_the_sap_refuses_the_call() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.close(Side::B, b_app);
    let (cause, _) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 41);
    assert!(p.sent_by(Side::B).contains(&Q::ReleaseComplete));
}

#[test]
fn a_request_naming_another_application_s_call_is_refused_81() {
    let mut p = Pair::default();
    let (_, _, (_, a_call, _, _)) = p.call_ab();
    let intruder = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        intruder,
        Message::Release {
            req,
            call: a_call,
            cause: 16,
        },
    );
    assert!(matches!(
        p.take(Side::A, intruder).as_slice(),
        [Message::Refused { cause: 81, .. }]
    ));
    assert_eq!(p.stat(Side::A).calls.len(), 1);
}

#[test]
fn stopping_sigd_releases_calls_at_both_ends() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    let now = p.now;
    p.a.core.shutdown(now);
    p.drive();
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 41);
    assert!(detail.contains("stopping"), "{detail}");
    assert_eq!(released_of(&p.take(Side::B, b_app), b_call).0, 41);
}

#[test]
fn the_same_seeds_give_the_same_ids_and_cookies() {
    let run = || {
        let mut p = Pair::default();
        let (a, _, (_, a_call, _, b_call)) = p.call_ab();
        (a.cookie, a_call, b_call)
    };
    assert_eq!(run(), run());
}

/// A counter-offer on a call between two applications of one host: the caller's half,
/// which holds the reservation, keeps only the lowered rates, and both are told them.
#[test]
fn a_local_callee_that_accepts_at_a_lower_rate_lowers_the_callers_reservation() {
    let mut p = Pair::default();
    let callee = p.app(Side::A);
    p.bind(Side::A, callee, "tv", "cbr:pcr=50Mbps");
    let caller = p.app(Side::A);
    let call = p.connect(
        Side::A,
        caller,
        "+4420001:tv",
        "cbr:pcr=40Mbps,min_pcr=10Mbps",
    );
    let offered = match p.take(Side::A, callee).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected an offer, got {other:?}"),
    };
    let req = p.req();
    p.send(
        Side::A,
        callee,
        Message::AcceptAt {
            req,
            call: offered,
            data: data(50_001),
            tx_bps: 15_000_000,
            rx_bps: 15_000_000,
        },
    );
    let callee_path = connected_of(&p.take(Side::A, callee), offered);
    let caller_path = connected_of(&p.take(Side::A, caller), call);
    let pcr = |q: &natm_proto::wire::qos::Qos| q.tx().pcr.and_then(|r| r.bits_per_sec());
    assert_eq!(
        pcr(&caller_path.qos),
        Some(15_000_000),
        "{}",
        caller_path.qos
    );
    assert_eq!(
        pcr(&callee_path.qos),
        Some(15_000_000),
        "{}",
        callee_path.qos
    );
    assert_eq!(caller_path.granted_bps, 15_000_000);
    let st = p.stat(Side::A);
    assert_eq!(st.capacity_bps - st.free_out_bps, 15_000_000);
    assert_eq!(st.capacity_bps - st.free_in_bps, 15_000_000);
}
