//! Issue 19, QoS renegotiation through the network: an application's `Modify` runs
//! admission at its sigd, goes to the peer sigd as a Q.2963.1 MODIFY REQUEST, is
//! admitted there, and comes back as MODIFY ACKNOWLEDGE (or MODIFY REJECT with the
//! cause, every reservation back as it was) — two cores in virtual time.

use crate::support::*;
use natm_proto::wire::ipc::{DataPath, Message};
use natm_proto::wire::q2931::MessageType;
use natm_sigd::core::AppId;

/// Sent at 10 Mbit/s, renegotiable from 1 up to 40 Mbit/s.
const QOS: &str = "guaranteed:pcr=10Mbps,max_pcr=40Mbps,min_pcr=1Mbps";

/// A guaranteed call A→B with [`QOS`]: `(a_app, a_call, b_app, b_call)`.
fn guaranteed_call(p: &mut Pair) -> (AppId, u64, AppId, u64) {
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", QOS);
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", QOS);
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    connected_of(&p.take(Side::A, a_app), a_call);
    (a_app, a_call, b_app, b_call)
}

/// `app` asks to send at `qos`'s rate: the answer to its request and everything
/// else it was told.
fn modify(p: &mut Pair, s: Side, app: AppId, call: u64, qos: &str) -> (Message, Vec<Message>) {
    let req = p.req();
    p.send(
        s,
        app,
        Message::Modify {
            req,
            call,
            qos: qos.parse().expect("test QoS"),
        },
    );
    let msgs = p.take(s, app);
    let at = msgs
        .iter()
        .position(|m| matches!(m, Message::Ack { req: r, .. } | Message::Refused { req: r, .. } if *r == req))
        .unwrap_or_else(|| panic!("no answer to Modify in {msgs:?}"));
    let mut rest = msgs;
    let answer = rest.remove(at);
    (answer, rest)
}

/// Host `s`'s reservation for `call`, out and in.
fn reserved(p: &mut Pair, s: Side, call: u64) -> (u64, u64) {
    let st = p.stat(s);
    let row = st
        .calls
        .iter()
        .find(|r| r.id == format!("{call:016x}"))
        .unwrap_or_else(|| panic!("no row for {call:016x}"));
    (row.reserved_out_bps, row.reserved_in_bps)
}

fn qos_changed(msgs: &[Message], call: u64) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        Message::QosChanged { call: c, qos, .. } if *c == call => Some(qos.to_string()),
        _ => None,
    })
}

fn modifies_sent(p: &Pair) -> usize {
    p.trace
        .iter()
        .filter(|(_, k, _)| *k == MessageType::ModifyRequest)
        .count()
}

#[test]
fn a_raise_and_a_decrease_are_reserved_at_both_ends_and_both_applications_told() {
    let mut p = Pair::default();
    let (a_app, a_call, b_app, b_call) = guaranteed_call(&mut p);
    assert_eq!(reserved(&mut p, Side::A, a_call), (10_000_000, 10_000_000));

    let (answer, told) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=20Mbps");
    assert!(
        matches!(answer, Message::Ack { id, .. } if id == a_call),
        "{answer:?}"
    );
    let mine = qos_changed(&told, a_call).expect("the requester hears its new QoS");
    assert!(mine.contains("pcr=20Mbps"), "{mine}");
    assert_eq!(reserved(&mut p, Side::A, a_call), (20_000_000, 10_000_000));
    // B receives at 20 Mbit/s (cells round up to whole cells per second).
    let (out, inn) = reserved(&mut p, Side::B, b_call);
    assert_eq!(out, 10_000_000);
    assert!((20_000_000..20_000_384).contains(&inn), "{inn}");
    let theirs = qos_changed(&p.take(Side::B, b_app), b_call).expect("the peer is told");
    assert!(theirs.contains("max_pcr=40Mbps"), "{theirs}");
    let sent: Vec<_> = p.sent_by(Side::B);
    assert!(sent.contains(&MessageType::ModifyAck), "{sent:?}");

    // Down to 5: both ends give back what they held beyond it.
    let (answer, _) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=5Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    assert_eq!(reserved(&mut p, Side::A, a_call), (5_000_000, 10_000_000));
    assert_eq!(p.stat(Side::A).free_out_bps, 95_000_000);
    let (_, inn) = reserved(&mut p, Side::B, b_call);
    assert!((5_000_000..5_000_384).contains(&inn), "{inn}");
    assert!(p.stat(Side::B).free_in_bps > 94_999_000);
}

#[test]
fn the_callee_may_change_its_own_sending_rate() {
    let mut p = Pair::default();
    let (a_app, a_call, b_app, b_call) = guaranteed_call(&mut p);
    let (answer, _) = modify(&mut p, Side::B, b_app, b_call, "guaranteed:pcr=30Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    assert_eq!(reserved(&mut p, Side::B, b_call), (30_000_000, 10_000_000));
    let (out, inn) = reserved(&mut p, Side::A, a_call);
    assert_eq!(out, 10_000_000);
    assert!((30_000_000..30_000_384).contains(&inn), "{inn}");
    assert!(qos_changed(&p.take(Side::A, a_app), a_call).is_some());
}

#[test]
fn a_raise_the_peer_cannot_admit_is_refused_with_its_cause_and_the_old_rate_stays() {
    let mut p = Pair::default();
    let (a_app, a_call, _, b_call) = guaranteed_call(&mut p);
    // Another call holds 75 Mbit/s into B (a call between two of B's applications
    // is charged both ways at B).
    let l = p.app(Side::B);
    p.bind(Side::B, l, "hog", "guaranteed:pcr=75Mbps");
    let hog = p.app(Side::B);
    p.connect(Side::B, hog, "+4420002:hog", "guaranteed:pcr=75Mbps");
    assert_eq!(p.stat(Side::B).free_in_bps, 15_000_000);

    let before = modifies_sent(&p);
    let (answer, told) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=40Mbps");
    match answer {
        Message::Refused { cause, detail, .. } => {
            assert_eq!(cause, 37, "{detail}");
            assert!(detail.contains("old rate stays"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(qos_changed(&told, a_call).is_none());
    assert_eq!(modifies_sent(&p), before + 1, "the network was asked");
    assert!(p.sent_by(Side::B).contains(&MessageType::ModifyReject));
    // Every reservation as it was.
    assert_eq!(reserved(&mut p, Side::A, a_call), (10_000_000, 10_000_000));
    assert_eq!(reserved(&mut p, Side::B, b_call), (10_000_000, 10_000_000));
    assert_eq!(p.stat(Side::A).free_out_bps, 90_000_000);
    assert_eq!(p.stat(Side::B).free_in_bps, 15_000_000);
    // What fits is still granted.
    let (answer, _) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=24Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
}

#[test]
fn beyond_the_bounds_is_refused_at_once_without_asking_the_network() {
    let mut p = Pair::default();
    let (a_app, a_call, _, _) = guaranteed_call(&mut p);
    let before = modifies_sent(&p);
    for (qos, what) in [
        ("guaranteed:pcr=41Mbps", "40 Mbit/s"),
        ("guaranteed:pcr=500kbps", "1 Mbit/s"),
    ] {
        match modify(&mut p, Side::A, a_app, a_call, qos).0 {
            Message::Refused { cause, detail, .. } => {
                assert_eq!(cause, 73, "{detail}");
                assert!(detail.contains(what), "{detail}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(modifies_sent(&p), before);
    assert_eq!(reserved(&mut p, Side::A, a_call), (10_000_000, 10_000_000));
    // A call without max_pcr cannot go above its setup rate.
    let b = p.app(Side::B);
    p.bind(Side::B, b, "plain", "guaranteed:pcr=5Mbps");
    let a = p.app(Side::A);
    let call = p.connect(Side::A, a, "+4420002:plain", "guaranteed:pcr=5Mbps");
    let offered = match p.take(Side::B, b).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.accept(Side::B, b, offered);
    p.take(Side::A, a);
    let (answer, _) = modify(&mut p, Side::A, a, call, "guaranteed:pcr=6Mbps");
    assert!(
        matches!(answer, Message::Refused { cause: 73, .. }),
        "{answer:?}"
    );
}

#[test]
fn one_change_at_a_time_and_a_release_ends_the_pending_one() {
    let mut p = Pair::default();
    let (a_app, a_call, _, b_call) = guaranteed_call(&mut p);
    // Nothing reaches B: the request stays pending.
    p.lose = Box::new(|_| true);
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::Modify {
            req,
            call: a_call,
            qos: "guaranteed:pcr=30Mbps".parse().unwrap(),
        },
    );
    assert!(p.take(Side::A, a_app).is_empty(), "no answer yet");
    // Held while pending: the larger of the old and new rate.
    assert_eq!(reserved(&mut p, Side::A, a_call), (30_000_000, 10_000_000));
    let (second, _) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=20Mbps");
    assert!(
        matches!(second, Message::Refused { cause: 101, ref detail, .. } if detail.contains("pending")),
        "{second:?}"
    );
    // The application releases the call: its pending change is answered and
    // everything is given back.
    p.send(
        Side::A,
        a_app,
        Message::Release {
            req: 0,
            call: a_call,
            cause: 16,
        },
    );
    let msgs = p.take(Side::A, a_app);
    assert!(
        msgs.iter()
            .any(|m| matches!(m, Message::Refused { req: r, cause: 16, .. } if *r == req)),
        "{msgs:?}"
    );
    let st = p.stat(Side::A);
    assert_eq!(
        (st.free_out_bps, st.free_in_bps),
        (100_000_000, 100_000_000)
    );
    let _ = b_call;
}

#[test]
fn a_modification_unanswered_for_t360_releases_the_call_and_answers_the_request() {
    let mut p = Pair::default();
    let (a_app, a_call, _, _) = guaranteed_call(&mut p);
    // B's sigd drops every MODIFY REQUEST (as a peer that never answers would).
    p.lose = Box::new(|d| {
        d.q2931()
            .is_some_and(|m| m.kind == MessageType::ModifyRequest)
    });
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::Modify {
            req,
            call: a_call,
            qos: "guaranteed:pcr=30Mbps".parse().unwrap(),
        },
    );
    p.advance(secs(200.0));
    let msgs = p.take(Side::A, a_app);
    assert!(
        msgs.iter()
            .any(|m| matches!(m, Message::Refused { req: r, cause: 102, .. } if *r == req)),
        "{msgs:?}"
    );
    assert_eq!(released_of(&msgs, a_call).0, 102);
    assert_eq!(p.stat(Side::A).free_out_bps, 100_000_000);
}

#[test]
fn a_call_between_two_applications_of_one_host_changes_at_once() {
    let mut p = Pair::default();
    let l = p.app(Side::A);
    p.bind(Side::A, l, "loc", QOS);
    let a = p.app(Side::A);
    let call = p.connect(Side::A, a, "+4420001:loc", QOS);
    let callee = match p.take(Side::A, l).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    let l_path = connected_of(&p.accept(Side::A, l, callee), callee);
    let a_path = connected_of(&p.take(Side::A, a), call);
    let (answer, told) = modify(&mut p, Side::A, a, call, "guaranteed:pcr=35Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    assert_eq!(reserved(&mut p, Side::A, call), (35_000_000, 10_000_000));
    let told_l = p.take(Side::A, l);
    let theirs = qos_changed(&told_l, callee).expect("the callee is told");
    assert!(theirs.contains("rx:"), "{theirs}");
    // Each half gets the ticket for its new QoS (a ticket binds the QoS).
    for (msgs, id, old) in [(&told, call, &a_path), (&told_l, callee, &l_path)] {
        let resume = msgs
            .iter()
            .find_map(|m| match m {
                Message::QosChanged { call, resume, .. } if *call == id => Some(resume.clone()),
                _ => None,
            })
            .expect("told");
        assert!(resume.starts_with("natm-resume/3 "), "{resume:?}");
        assert_ne!(&resume, &old.resume);
    }
    // The callee lowers its own direction, charged to the caller's half.
    let (answer, _) = modify(&mut p, Side::A, l, callee, "guaranteed:pcr=2Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    assert_eq!(reserved(&mut p, Side::A, call), (35_000_000, 2_000_000));
}

#[test]
fn through_a_switch_every_hop_reserves_the_new_rate() {
    let mut p = Pair::switched(None);
    let (a_app, a_call, b_app, b_call) = guaranteed_call(&mut p);
    let cells = |p: &Pair| p.switch.as_ref().unwrap().ctl.calls()[0].reserved_cells;
    let (fwd0, bwd0) = cells(&p);
    let (answer, _) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=30Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    let (fwd, bwd) = cells(&p);
    assert!(
        fwd > fwd0 * 29 / 10 && fwd < fwd0 * 31 / 10,
        "{fwd0} -> {fwd}"
    );
    assert_eq!(bwd, bwd0);
    assert_eq!(reserved(&mut p, Side::A, a_call).0, 30_000_000);
    assert!(reserved(&mut p, Side::B, b_call).1 >= 30_000_000);
    assert!(qos_changed(&p.take(Side::B, b_app), b_call).is_some());
    // Refused by B's admission, behind the switch: the switch gives its raise back.
    let l = p.app(Side::B);
    p.bind(Side::B, l, "hog", "guaranteed:pcr=65Mbps");
    let hog = p.app(Side::B);
    p.connect(Side::B, hog, "+4420002:hog", "guaranteed:pcr=65Mbps");
    let (answer, _) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=40Mbps");
    assert!(
        matches!(answer, Message::Refused { cause: 37, .. }),
        "{answer:?}"
    );
    assert_eq!(cells(&p), (fwd, bwd));
    assert_eq!(reserved(&mut p, Side::A, a_call).0, 30_000_000);
}

#[test]
fn a_changed_call_is_reclaimed_with_the_ticket_its_change_brought() {
    // A resume ticket binds the QoS it resumes: after a change, the application
    // holds a new QoS, and the QosChanged that told it so carries the ticket for it.
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", QOS);
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", QOS);
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    let a_path = match p.take(Side::A, a_app).as_slice() {
        [Message::Connected { call, path }] if *call == a_call => path.clone(),
        other => panic!("expected the caller's Connected, got {other:?}"),
    };
    let (answer, told) = modify(&mut p, Side::A, a_app, a_call, "guaranteed:pcr=20Mbps");
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    let (qos, resume) = told
        .iter()
        .find_map(|m| match m {
            Message::QosChanged { call, qos, resume } if *call == a_call => {
                Some((*qos, resume.clone()))
            }
            _ => None,
        })
        .expect("the requester hears its new QoS");
    assert!(
        !resume.is_empty() && resume != a_path.resume,
        "a new ticket: {resume}"
    );
    // ulib keeps the new QoS; with the old ticket it would resume nothing.
    let stale = DataPath {
        qos,
        ..a_path.clone()
    };
    let current = DataPath {
        qos,
        resume,
        ..a_path
    };
    p.restart(Side::A, 7);
    p.advance(secs(0.2));
    let (_, m) = reclaim(&mut p, Side::A, a_call, stale);
    assert!(
        matches!(&m, Message::Refused { cause: 57, detail, .. } if detail.contains("QoS")),
        "{m:?}"
    );
    let (_, m) = reclaim(&mut p, Side::A, a_call, current);
    assert!(
        matches!(m, Message::Ack { id, .. } if id == a_call),
        "{m:?}"
    );
    let st = p.stat(Side::A);
    assert_eq!(st.calls.len(), 1);
    assert_eq!(
        st.free_out_bps, 80_000_000,
        "reserved again at the new rate"
    );
}
