//! Refusals, each with its UNI cause and a sentence that says why: nobody listening,
//! no route, policy, admission (seed 000 §5.2, with how much is free), limits, and
//! protocol errors from applications and peers.

use crate::support::*;
use natm_proto::wire::ipc::{IpcError, Message};
use natm_proto::wire::q2931::MessageType as Q;
use natm_sigd::core::{AppId, Output};

/// The `Refused` answering `req` among `msgs`: cause and detail.
fn refused_of(msgs: &[Message], req: u64) -> (u8, String) {
    msgs.iter()
        .find_map(|m| match m {
            Message::Refused {
                req: r,
                cause,
                detail,
            } if *r == req => Some((*cause, detail.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("request {req} not refused: {msgs:?}"))
}

/// Connect and expect a refusal at once.
fn connect_refused(p: &mut Pair, s: Side, app: AppId, called: &str, qos: &str) -> (u8, String) {
    let req = p.req();
    p.send(
        s,
        app,
        Message::Connect {
            req,
            called: called.into(),
            qos: qos.parse().expect("test QoS"),
            data: data(40_000),
        },
    );
    refused_of(&p.take(s, app), req)
}

#[test]
fn a_local_call_nobody_listens_for_is_refused_88() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let (cause, detail) = connect_refused(&mut p, Side::A, app, "+4420001:echo", "reliable");
    assert_eq!(cause, 88);
    assert!(
        detail.contains("nobody listens on SAP \"echo\""),
        "{detail}"
    );
}

#[test]
fn a_remote_call_nobody_listens_for_is_released_88_by_the_called_sigd() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let call = p.connect(Side::A, app, "+4420002:echo", "reliable");
    let (cause, detail) = released_of(&p.take(Side::A, app), call);
    assert_eq!(cause, 88);
    // The caller hears what the called sigd found, in the words its log uses.
    assert!(
        detail.starts_with("nobody listens on SAP \"echo\" at +4420002"),
        "{detail}"
    );
    assert_eq!(p.sent_by(Side::B), vec![Q::ReleaseComplete]);
    let s = p.stat(Side::A);
    assert_eq!(s.counters.calls_refused, 1);
    assert_eq!(s.vcis_in_use, 0);
}

#[test]
fn an_address_without_a_route_is_refused_3() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let (cause, detail) = connect_refused(&mut p, Side::A, app, "+1555:echo", "reliable");
    assert_eq!(cause, 3);
    assert!(detail.contains("[[directory]]"), "{detail}");
    assert!(p.trace.is_empty());
}

#[test]
fn outgoing_policy_refuses_21_before_any_signalling() {
    let policy =
        "[[policy]]\naction = \"reject\"\nprefix = \"+4420002\"\ndirection = \"outgoing\"\n";
    let mut p = Pair::new(policy, "");
    let app = p.app(Side::A);
    let (cause, detail) = connect_refused(&mut p, Side::A, app, "+4420002:echo", "reliable");
    assert_eq!(cause, 21);
    assert!(detail.contains("policy"), "{detail}");
    assert!(p.trace.is_empty());
    assert_eq!(p.stat(Side::A).counters.policy_rejections, 1);
}

#[test]
fn incoming_policy_at_the_called_host_releases_21() {
    let policy =
        "[[policy]]\naction = \"reject\"\nprefix = \"+4420001\"\ndirection = \"incoming\"\n";
    let mut p = Pair::new("", policy);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    assert_eq!(released_of(&p.take(Side::A, a_app), call).0, 21);
    assert_eq!(
        p.take(Side::B, b_app),
        vec![],
        "the listener never hears of it"
    );
    assert_eq!(p.stat(Side::B).counters.policy_rejections, 1);
}

#[test]
fn admission_refuses_37_and_says_how_much_is_free() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let (cause, detail) = connect_refused(&mut p, Side::A, app, "+4420002:echo", "cbr:pcr=150Mbps");
    assert_eq!(cause, 37);
    assert!(
        detail.contains("150 Mbit/s requested") && detail.contains("100 Mbit/s free"),
        "{detail}"
    );
    assert_eq!(p.stat(Side::A).counters.admission_refusals, 1);
}

#[test]
fn admission_grants_between_the_minimum_and_the_target_and_gives_it_back() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "cbr:pcr=100Mbps");
    let a_app = p.app(Side::A);
    // 60 of 100 Mbit/s out of A taken by a first call ...
    let first = p.connect(Side::A, a_app, "+4420002:echo", "cbr:pcr=60Mbps");
    let offer = |p: &mut Pair| match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    let b1 = offer(&mut p);
    p.accept(Side::B, b_app, b1);
    assert_eq!(
        connected_of(&p.take(Side::A, a_app), first).granted_bps,
        60_000_000
    );
    // ... so a second asking 80 with 20 acceptable gets the 40 left.
    let second = p.connect(
        Side::A,
        a_app,
        "+4420002:echo",
        "cbr:pcr=80Mbps,min_pcr=20Mbps",
    );
    let b2 = offer(&mut p);
    p.accept(Side::B, b_app, b2);
    assert_eq!(
        connected_of(&p.take(Side::A, a_app), second).granted_bps,
        40_000_000
    );
    let s = p.stat(Side::A);
    assert_eq!(s.free_out_bps, 0);
    // A third cannot have its minimum: 37, nothing free.
    let (cause, detail) =
        connect_refused(&mut p, Side::A, a_app, "+4420002:echo", "cbr:pcr=10Mbps");
    assert_eq!(cause, 37);
    assert!(detail.contains(" 0 Mbit/s free"), "{detail}");
    // Releases give it back.
    for call in [first, second] {
        let req = p.req();
        p.send(
            Side::A,
            a_app,
            Message::Release {
                req,
                call,
                cause: 16,
            },
        );
    }
    let s = p.stat(Side::A);
    assert_eq!((s.free_out_bps, s.free_in_bps), (100_000_000, 100_000_000));
    assert_eq!(p.stat(Side::B).free_in_bps, 100_000_000);
}

#[test]
fn the_called_host_s_admission_refuses_with_its_own_capacity() {
    let mut p = Pair::new("", "");
    // B's link is the same 100 Mbit/s; fill its receive side with a call from a
    // local application first.
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "cbr:pcr=100Mbps");
    let b_caller = p.app(Side::B);
    // A local call is charged once, at the caller: 90 Mbit/s each way (cbr is
    // symmetric) taken on B.
    p.connect(Side::B, b_caller, "+4420002:echo", "cbr:pcr=90Mbps");
    let local = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.accept(Side::B, b_app, local);
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "cbr:pcr=50Mbps");
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 37, "{detail}");
    assert_eq!(p.sent_by(Side::B), vec![Q::ReleaseComplete]);
    assert_eq!(
        p.stat(Side::A).free_out_bps,
        100_000_000,
        "A's reservation returned"
    );
}

#[test]
fn calls_over_the_limit_are_refused_47() {
    let mut p = Pair::new("[limits]\ncalls = 1\n", "");
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let app = p.app(Side::A);
    p.connect(Side::A, app, "+4420002:echo", "reliable");
    let (cause, detail) = connect_refused(&mut p, Side::A, app, "+4420002:echo", "reliable");
    assert_eq!(cause, 47);
    assert!(detail.contains("[limits] calls"), "{detail}");
}

#[test]
fn a_bad_sap_is_refused_100_and_the_connection_kept() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        app,
        Message::Bind {
            req,
            sap: "far-too-long-sap".into(),
            qos: "reliable".parse().unwrap(),
        },
    );
    assert_eq!(refused_of(&p.take(Side::A, app), req).0, 100);
    assert!(p.a.closed.is_empty());
    let (cause, _) = connect_refused(&mut p, Side::A, app, "+4420001:echo", "reliable");
    assert_eq!(cause, 88, "the same connection is still served");
}

/// QoS crosses the IPC typed: text that does not parse is no request sigd refuses but
/// a malformed message (ulib never sends one), told with the field and closed.
#[test]
fn qos_text_that_does_not_parse_is_malformed_ipc() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let now = p.now;
    let e = IpcError::BadQos {
        field: "qos",
        detail: "unknown traffic class \"warp\"".into(),
    };
    p.a.core.app_malformed(now, app, &e);
    p.collect();
    match p.take(Side::A, app).as_slice() {
        [Message::Error { cause: 100, detail }] => {
            assert!(
                detail.contains("qos") && detail.contains("warp"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.a.closed, vec![app]);
}

#[test]
fn an_answer_type_message_from_an_application_closes_its_connection() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let now = p.now;
    p.a.core
        .handle_app(now, app, Message::Ack { req: 1, id: 2 });
    p.collect();
    assert!(matches!(
        p.take(Side::A, app).as_slice(),
        [Message::Error { cause: 101, .. }]
    ));
    assert_eq!(p.a.closed, vec![app]);
    p.close(Side::A, app);
    assert_eq!(p.stat(Side::A).counters.malformed_ipc, 1);
}

#[test]
fn a_malformed_ipc_stream_is_told_and_closed() {
    let mut p = Pair::default();
    let app = p.app(Side::A);
    let now = p.now;
    let e = IpcError::Truncated { field: "qos" };
    p.a.core.app_malformed(now, app, &e);
    let out: Vec<Output> = std::iter::from_fn(|| p.a.core.poll_output()).collect();
    assert!(
        matches!(out.as_slice(), [Output::ToApp(a, Message::Error { cause, .. }), Output::CloseApp(b)]
            if *a == app && *b == app && *cause == e.cause()),
        "{out:?}"
    );
}

#[test]
fn applications_over_the_connection_limit_are_told_and_closed() {
    let mut p = Pair::new("[limits]\nconnections = 1\n", "");
    let first = p.app(Side::A);
    let second = p.app(Side::A);
    assert!(matches!(
        p.take(Side::A, second).as_slice(),
        [Message::Error { cause: 47, .. }]
    ));
    assert_eq!(p.a.closed, vec![second]);
    assert!(p.take(Side::A, first).is_empty());
    let now = p.now;
    p.a.core.app_closed(now, second);
    p.close(Side::A, first);
    assert_eq!(
        p.stat(Side::A).counters.app_connections,
        2,
        "first and the stat app"
    );
}

#[test]
fn datagrams_that_are_not_signalling_are_counted_and_dropped() {
    let mut p = Pair::default();
    let now = p.now;
    let b_sig = p.b.sig;
    p.a.core.handle_peer(now, b_sig, b"not a frame");
    assert!(p.a.core.poll_output().is_none());
    let s = p.stat(Side::A);
    assert_eq!(s.counters.malformed_signalling, 1);
    assert!(s.peers.is_empty(), "no link for garbage");
}
