//! What `natm stat` shows of the traffic applications report (`Counters`), and
//! `natm release` (`AdminRelease`): who may report for a call, who may release one,
//! and what both ends hear.

use crate::support::*;
use natm_proto::wire::ipc::{Message, VcCounters};
use natm_proto::wire::q2931::MessageType as Q;
use natm_sigd::core::AppId;

fn counters(bytes: u64) -> VcCounters {
    VcCounters {
        sampled_ms: bytes,
        tx_bytes: bytes,
        tx_tpdus: bytes / 4096 + 1,
        srtt_us: Some(120),
        ..VcCounters::default()
    }
}

/// A call from A (run by `uid`) to B's listener on "echo", accepted: the apps and ids.
fn call_as(p: &mut Pair, uid: u32) -> (AppId, u64, AppId, u64) {
    let b_app = p.app_as(Side::B, uid);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app_as(Side::A, uid);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    connected_of(&p.take(Side::A, a_app), a_call);
    (a_app, a_call, b_app, b_call)
}

#[test]
fn the_owners_latest_report_shows_in_stat_and_one_entry_is_kept_per_call() {
    let mut p = Pair::default();
    let (a_app, a_call, _, _) = call_as(&mut p, 0);
    assert_eq!(p.stat(Side::A).calls[0].traffic, None, "no report yet");
    for i in 1..=1000 {
        p.send(
            Side::A,
            a_app,
            Message::Counters {
                req: 0,
                call: a_call,
                counters: Box::new(counters(i * 1000)),
            },
        );
    }
    assert!(p.take(Side::A, a_app).is_empty(), "req 0 hears nothing");
    assert_eq!(p.node(Side::A).core.traffic_entries(), 1);
    let t = p.stat(Side::A).calls[0]
        .traffic
        .clone()
        .expect("reported")
        .counters;
    assert_eq!((t.tx_bytes, t.sampled_ms), (1_000_000, 1_000_000));
    assert_eq!(t.srtt_us, Some(120));
    assert_eq!(t.queue_drops, None);
    // A tagged report is answered.
    let req = p.req();
    p.send(
        Side::A,
        a_app,
        Message::Counters {
            req,
            call: a_call,
            counters: Box::new(counters(5)),
        },
    );
    assert_eq!(ack_of(&p.take(Side::A, a_app), req), a_call);
}

#[test]
fn a_connection_cannot_report_for_a_call_it_does_not_hold() {
    let mut p = Pair::default();
    let (_, a_call, _, _) = call_as(&mut p, 0);
    let other = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        other,
        Message::Counters {
            req,
            call: a_call,
            counters: Box::new(counters(99)),
        },
    );
    match p.take(Side::A, other).as_slice() {
        [Message::Refused { req: r, cause, .. }] => assert_eq!((*r, *cause), (req, 81)),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(p.node(Side::A).core.traffic_entries(), 0);
    let s = p.stat(Side::A);
    assert_eq!(s.calls[0].traffic, None);
    assert_eq!(s.counters.counters_refused, 1);
}

#[test]
fn entries_of_ended_calls_go_so_the_table_stays_within_the_calls_held() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    for round in 0..50u64 {
        let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
        let b_call = match p.take(Side::B, b_app).as_slice() {
            [Message::Incoming { call, .. }] => *call,
            other => panic!("{other:?}"),
        };
        p.accept(Side::B, b_app, b_call);
        p.take(Side::A, a_app);
        p.send(
            Side::A,
            a_app,
            Message::Counters {
                req: 0,
                call,
                counters: Box::new(counters(round)),
            },
        );
        p.send(
            Side::A,
            a_app,
            Message::Release {
                req: 0,
                call,
                cause: 16,
            },
        );
        p.take(Side::B, b_app);
        assert!(p.node(Side::A).core.traffic_entries() <= 1, "round {round}");
    }
}

#[test]
fn root_releases_any_call_and_both_ends_hear_the_cause() {
    let mut p = Pair::default();
    let (a_app, a_call, b_app, b_call) = call_as(&mut p, 1000);
    let admin = p.app_as(Side::A, 0);
    let req = p.req();
    p.send(
        Side::A,
        admin,
        Message::AdminRelease {
            req,
            call: a_call,
            cause: 31,
        },
    );
    assert_eq!(ack_of(&p.take(Side::A, admin), req), a_call);
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 31);
    assert!(
        detail.contains("released by an administrator (uid 0"),
        "{detail}"
    );
    // The peer host hears a RELEASE with the cause, and tells its application.
    assert!(p.sent_by(Side::A).contains(&Q::Release));
    assert_eq!(released_of(&p.take(Side::B, b_app), b_call).0, 31);
    assert!(p.stat(Side::A).calls.is_empty());
    assert!(p.stat(Side::B).calls.is_empty());
    assert_eq!(p.stat(Side::A).counters.admin_releases, 1);
}

#[test]
fn the_owning_user_may_release_from_another_connection_and_others_may_not() {
    let mut p = Pair::default();
    let (a_app, a_call, _, _) = call_as(&mut p, 1000);
    let stranger = p.app_as(Side::A, 1001);
    let req = p.req();
    p.send(
        Side::A,
        stranger,
        Message::AdminRelease {
            req,
            call: a_call,
            cause: 16,
        },
    );
    match p.take(Side::A, stranger).as_slice() {
        [Message::Refused {
            req: r,
            cause,
            detail,
        }] => {
            assert_eq!((*r, *cause), (req, 57));
            assert!(
                detail.starts_with(&format!(
                    "permission denied: call {a_call:016x} belongs to uid 1000"
                )),
                "{detail}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(p.stat(Side::A).calls.len(), 1, "the call lives on");
    assert!(p.take(Side::A, a_app).is_empty());
    assert_eq!(p.stat(Side::A).counters.admin_refusals, 1);

    let same_user = p.app_as(Side::A, 1000);
    let req = p.req();
    p.send(
        Side::A,
        same_user,
        Message::AdminRelease {
            req,
            call: a_call,
            cause: 16,
        },
    );
    assert_eq!(ack_of(&p.take(Side::A, same_user), req), a_call);
    assert_eq!(released_of(&p.take(Side::A, a_app), a_call).0, 16);
}

#[test]
fn releasing_an_unknown_call_says_so() {
    let mut p = Pair::default();
    let admin = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        admin,
        Message::AdminRelease {
            req,
            call: 0x1234,
            cause: 16,
        },
    );
    match p.take(Side::A, admin).as_slice() {
        [Message::Refused { cause, detail, .. }] => {
            assert_eq!(*cause, 81);
            assert!(detail.contains("no call 0000000000001234"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_local_call_released_by_root_tells_both_applications() {
    let mut p = Pair::default();
    let callee = p.app_as(Side::A, 1000);
    p.bind(Side::A, callee, "echo", "reliable");
    let caller = p.app_as(Side::A, 1000);
    let call = p.connect(Side::A, caller, "+4420001:echo", "reliable");
    let offered = match p.take(Side::A, callee).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.accept(Side::A, callee, offered);
    p.take(Side::A, caller);
    let admin = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        admin,
        Message::AdminRelease {
            req,
            call: offered,
            cause: 41,
        },
    );
    ack_of(&p.take(Side::A, admin), req);
    assert_eq!(released_of(&p.take(Side::A, callee), offered).0, 41);
    let (cause, detail) = released_of(&p.take(Side::A, caller), call);
    assert_eq!(cause, 41);
    assert!(detail.contains("administrator"), "{detail}");
    assert!(p.stat(Side::A).calls.is_empty());
}
