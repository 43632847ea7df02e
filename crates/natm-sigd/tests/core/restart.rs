//! A sigd that dies and restarts, in virtual time (issue 16 item 6,
//! docs/sigd.md "sigd restart"): the survivor keeps its active calls while
//! the link is down (`[restart] preserve_ms`, T309) and re-establishes it; the
//! restarted sigd takes over the calls its applications reclaim; STATUS ENQUIRY
//! (Q.2931 §5.6.11) then keeps or releases each call at both ends alike.

use crate::support::*;
use natm_proto::wire::ipc::{DataPath, Message};
use natm_proto::wire::q2931::MessageType as Q;
use natm_sigd::core::AppId;
use natm_sigd::core::CallState;

#[test]
fn a_reclaimed_call_survives_the_callee_sigds_restart_at_both_ends() {
    let mut p = Pair::default();
    let (a_path, b_path, (a_app, a_call, b_app, b_call)) = p.call_ab();
    assert!(
        a_path.resume.starts_with("natm-resume/3 "),
        "{}",
        a_path.resume
    );
    assert!(
        b_path.resume.contains("link=10.0.0.1:2905"),
        "{}",
        b_path.resume
    );
    // B's sigd dies and a new one starts; B's application reconnects at once.
    let old_b_app = b_app;
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(0.5));
    let (b_app, answer) = reclaim(&mut p, Side::B, b_call, b_path.clone());
    assert!(
        matches!(answer, Message::Ack { id, .. } if id == b_call),
        "{answer:?}"
    );
    // Well past the 10 s T309 of before, well inside the preservation time.
    p.advance(secs(60.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    assert_eq!(released(&p, Side::B, b_app, b_call), None);
    assert_eq!(released(&p, Side::B, old_b_app, b_call), None);
    // Each side asked the other about the call and heard it is active there.
    assert!(
        p.sent_by(Side::A).contains(&Q::StatusEnquiry),
        "{:?}",
        p.trace
    );
    assert!(p.sent_by(Side::B).contains(&Q::Status), "{:?}", p.trace);
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert_eq!(st.calls.len(), 1, "{s:?}: {st:?}");
        assert_eq!(st.calls[0].state, CallState::Active);
        assert!(st.peers[0].up, "{s:?}: the link is back");
    }
    let st = p.stat(Side::B);
    assert_eq!(st.counters.calls_reclaimed, 1);
    assert_eq!(
        (st.calls[0].tx_vci, st.calls[0].rx_vci),
        (b_path.tx_vci, b_path.rx_vci)
    );
    assert_eq!(st.vcis_in_use, 1, "the reclaimed VCI is held again");
    // A later release clears it at both ends.
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
    p.advance(secs(1.0));
    assert_eq!(released(&p, Side::B, b_app, b_call), Some(16));
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert!(st.calls.is_empty(), "{s:?}: {st:?}");
        assert_eq!(st.vcis_in_use, 0);
    }
}

#[test]
fn a_reclaimed_call_survives_the_caller_sigds_restart() {
    let mut p = Pair::default();
    let (a_path, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    p.a = Node::new(Side::A, "", 7);
    p.advance(secs(0.2));
    let (a_app2, answer) = reclaim(&mut p, Side::A, a_call, a_path);
    assert!(
        matches!(answer, Message::Ack { id, .. } if id == a_call),
        "{answer:?}"
    );
    p.advance(secs(60.0));
    assert_eq!(released(&p, Side::B, b_app, b_call), None);
    assert_eq!(released(&p, Side::A, a_app2, a_call), None);
    assert_eq!(p.stat(Side::B).calls.len(), 1);
    assert_eq!(p.stat(Side::A).calls.len(), 1);
    // The callee hangs up: the reclaiming application hears it.
    let req = p.req();
    p.send(
        Side::B,
        b_app,
        Message::Release {
            req,
            call: b_call,
            cause: 16,
        },
    );
    p.advance(secs(1.0));
    assert_eq!(released(&p, Side::A, a_app2, a_call), Some(16));
    let _ = a_app;
    assert!(p.stat(Side::A).calls.is_empty());
}

#[test]
fn a_call_nobody_reclaims_is_released_at_both_ends_after_the_window() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, ..)) = p.call_ab();
    // B restarts and its application never comes back.
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(60.0));
    let cause = released(&p, Side::A, a_app, a_call).expect("released at the survivor");
    // STATUS with state 0: "response to STATUS ENQUIRY" (30).
    assert_eq!(cause, 30);
    assert!(p.stat(Side::A).calls.is_empty());
    assert!(p.stat(Side::B).calls.is_empty());
}

#[test]
fn the_survivor_keeps_active_calls_through_a_long_outage_and_checks_them_after() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    // Two minutes without a datagram either way (a cable pulled, not a restart):
    // ten times the 10 s T309 both sides had before.
    p.lose = Box::new(|_| true);
    p.advance(secs(120.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    assert_eq!(released(&p, Side::B, b_app, b_call), None);
    p.lose = Box::new(|_| false);
    let before = p.trace.len();
    // Both ends re-establish the link (B too, though A brought it up first) and ask.
    p.advance(secs(10.0));
    let after: Vec<_> = p.trace[before..].iter().map(|t| (t.0, t.1)).collect();
    assert!(after.contains(&(Side::A, Q::StatusEnquiry)), "{after:?}");
    assert!(after.contains(&(Side::B, Q::StatusEnquiry)), "{after:?}");
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert_eq!(st.calls.len(), 1, "{s:?}");
        assert!(st.peers[0].up);
    }
}

#[test]
fn a_preserved_call_is_released_at_both_ends_when_the_preservation_time_ends() {
    let conf = "[restart]\npreserve_ms = 30000\n";
    let mut p = Pair::new(conf, conf);
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    p.lose = Box::new(|_| true);
    p.advance(secs(25.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    p.advance(secs(30.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), Some(27));
    assert_eq!(released(&p, Side::B, b_app, b_call), Some(27));
}

#[test]
fn a_call_its_peer_released_during_the_outage_is_released_on_reclaim() {
    let mut p = Pair::default();
    let (_, b_path, (a_app, a_call, _, b_call)) = p.call_ab();
    p.b = Node::new(Side::B, "", 9);
    // A's application hangs up while B's sigd is gone.
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
    p.advance(secs(1.0));
    // B's application comes back and reclaims: taken, then cleared by the STATUS
    // that says A has no such call.
    let (b_app, answer) = reclaim(&mut p, Side::B, b_call, b_path);
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    p.advance(secs(10.0));
    assert_eq!(released(&p, Side::B, b_app, b_call), Some(30));
    assert!(p.stat(Side::B).calls.is_empty());
    assert_eq!(p.stat(Side::B).vcis_in_use, 0);
    assert!(p.stat(Side::A).calls.is_empty());
}

#[test]
fn bad_or_duplicate_reclaims_are_refused_with_a_reason() {
    let mut p = Pair::default();
    let (_, b_path, (_, _, _, b_call)) = p.call_ab();
    p.b = Node::new(Side::B, "", 9);
    let refused = |m: &Message| match m {
        Message::Refused { cause, detail, .. } => (*cause, detail.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    };
    // A ticket that is not one.
    let mut bad = b_path.clone();
    bad.resume = "natm-resume/1 link=10.0.0.1:2905".into();
    let (_, m) = reclaim(&mut p, Side::B, b_call, bad);
    assert_eq!(refused(&m).0, 100, "{m:?}");
    // A call with no ticket does not outlive its sigd.
    let mut none = b_path.clone();
    none.resume = String::new();
    let (_, m) = reclaim(&mut p, Side::B, b_call, none);
    assert_eq!(refused(&m).0, 41, "{m:?}");
    // The first reclaim wins; the same call again is refused.
    let (_, m) = reclaim(&mut p, Side::B, b_call, b_path.clone());
    assert!(matches!(m, Message::Ack { .. }), "{m:?}");
    let (_, m) = reclaim(&mut p, Side::B, b_call, b_path.clone());
    assert_eq!(refused(&m).0, 81, "{m:?}");
    // Another id with the same call reference or VCI is refused too.
    let (_, m) = reclaim(&mut p, Side::B, b_call ^ 2, b_path);
    let (c, why) = refused(&m);
    assert!(c == 45 || c == 81, "{c}: {why}");
    assert_eq!(p.stat(Side::B).counters.reclaims_refused, 4);
}

#[test]
fn an_enquiry_that_comes_before_the_reclaim_waits_for_it() {
    let mut p = Pair::default();
    let (_, b_path, (a_app, a_call, _, b_call)) = p.call_ab();
    p.b = Node::new(Side::B, "", 9);
    let before = p.trace.len();
    // The survivor finds the new sigd and asks about its call before B's
    // application is back.
    let mut waited = 0.0;
    while !p.trace[before..]
        .iter()
        .any(|t| (t.0, t.1) == (Side::A, Q::StatusEnquiry))
    {
        p.advance(secs(0.05));
        waited += 0.05;
        assert!(waited < 60.0, "A never asked: {:?}", p.trace);
    }
    assert!(
        !p.trace[before..]
            .iter()
            .any(|t| t.0 == Side::B && t.1 == Q::Status),
        "B did not answer \"no such call\" at once"
    );
    p.advance(secs(1.0));
    let (b_app, answer) = reclaim(&mut p, Side::B, b_call, b_path);
    assert!(matches!(answer, Message::Ack { .. }), "{answer:?}");
    p.advance(secs(60.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), None);
    assert_eq!(released(&p, Side::B, b_app, b_call), None);
    assert_eq!(p.stat(Side::A).calls.len(), 1);
    assert_eq!(p.stat(Side::B).calls.len(), 1);
}

/// On host A: `uid_callee` listens on "echo", `uid_caller` calls it at A's own
/// address, the callee accepts. `(caller app, caller call, caller path, callee app,
/// callee call, callee path)`.
fn local_call(
    p: &mut Pair,
    qos: &str,
    uid_caller: u32,
    uid_callee: u32,
) -> (AppId, u64, DataPath, AppId, u64, DataPath) {
    let l_app = p.app_as(Side::A, uid_callee);
    let listener = p.bind(Side::A, l_app, "echo", qos);
    let c_app = p.app_as(Side::A, uid_caller);
    let c_call = p.connect(Side::A, c_app, "+4420001:echo", qos);
    let l_call = match p.take(Side::A, l_app).as_slice() {
        [Message::Incoming {
            listener: l, call, ..
        }] if *l == listener => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    let l_path = crate::support::connected_of(&p.accept(Side::A, l_app, l_call), l_call);
    let c_path = match p.take(Side::A, c_app).as_slice() {
        [Message::Connected { call, path }] if *call == c_call => path.clone(),
        other => panic!("expected the caller's Connected, got {other:?}"),
    };
    (c_app, c_call, c_path, l_app, l_call, l_path)
}

#[test]
fn a_call_inside_one_host_is_held_again_when_both_halves_reclaim_it() {
    let mut p = Pair::default();
    let (_, c_call, c_path, _, l_call, l_path) = local_call(&mut p, "cbr:pcr=20Mbps", 0, 0);
    // Each half has its own ticket, naming the other half.
    assert!(
        c_path.resume.contains(&format!("pair={l_call:016x}")),
        "{}",
        c_path.resume
    );
    assert!(
        l_path.resume.contains(&format!("pair={c_call:016x}")),
        "{}",
        l_path.resume
    );
    let before = p.stat(Side::A);
    assert_eq!(before.calls.len(), 2);
    assert!(
        before.free_out_bps < before.capacity_bps,
        "charged: {before:?}"
    );
    // A's sigd dies; a new one starts. The callee comes back first, the caller
    // 1 s later (inside the 3 s reclaim window).
    p.a = Node::new(Side::A, "", 7);
    p.advance(secs(0.3));
    let (l_app, m) = reclaim(&mut p, Side::A, l_call, l_path.clone());
    assert!(
        matches!(m, Message::Ack { id, .. } if id == l_call),
        "{m:?}"
    );
    p.advance(secs(1.0));
    let (c_app, m) = reclaim(&mut p, Side::A, c_call, c_path.clone());
    assert!(
        matches!(m, Message::Ack { id, .. } if id == c_call),
        "{m:?}"
    );
    // Well past the window: both halves are held, nobody was released.
    p.advance(secs(30.0));
    assert_eq!(released(&p, Side::A, l_app, l_call), None);
    assert_eq!(released(&p, Side::A, c_app, c_call), None);
    let st = p.stat(Side::A);
    assert_eq!(st.counters.calls_reclaimed, 2, "one per half");
    assert_eq!(st.calls.len(), 2);
    assert!(st.calls.iter().all(|c| c.state == CallState::Active));
    // The reservation, the VCIs and the rows are as before the restart.
    assert_eq!(
        (st.free_out_bps, st.free_in_bps, st.vcis_in_use),
        (before.free_out_bps, before.free_in_bps, before.vcis_in_use)
    );
    let row = |st: &natm_sigd::core::Stat, id: u64| {
        let r = st
            .calls
            .iter()
            .find(|c| c.id == format!("{id:016x}"))
            .unwrap_or_else(|| panic!("{id:016x} in {st:?}"))
            .clone();
        (r.direction, r.local, r.remote, r.sap, r.tx_vci, r.rx_vci)
    };
    assert_eq!(row(&st, c_call), row(&before, c_call));
    assert_eq!(row(&st, l_call), row(&before, l_call));
    // A release by either application still ends both halves.
    let req = p.req();
    p.send(
        Side::A,
        c_app,
        Message::Release {
            req,
            call: c_call,
            cause: 16,
        },
    );
    assert_eq!(released(&p, Side::A, l_app, l_call), Some(16));
    let st = p.stat(Side::A);
    assert!(st.calls.is_empty(), "{st:?}");
    assert_eq!(st.vcis_in_use, 0);
    assert_eq!(st.free_out_bps, st.capacity_bps);
}

#[test]
fn a_call_inside_one_host_only_one_half_reclaims_is_released_after_the_window() {
    for caller_comes_back in [true, false] {
        let mut p = Pair::default();
        let (_, c_call, c_path, _, l_call, l_path) = local_call(&mut p, "cbr:pcr=20Mbps", 0, 0);
        p.a = Node::new(Side::A, "", 7);
        p.advance(secs(0.5));
        let (call, path) = if caller_comes_back {
            (c_call, c_path)
        } else {
            (l_call, l_path)
        };
        let (app, m) = reclaim(&mut p, Side::A, call, path);
        assert!(matches!(m, Message::Ack { .. }), "{m:?}");
        // Held while the window lasts (3 s from the restarted sigd's start)...
        p.advance(secs(2.0));
        assert_eq!(released(&p, Side::A, app, call), None);
        assert_eq!(p.stat(Side::A).calls.len(), 1);
        // ...then released with cause 41 and a reason; nothing is left held.
        p.advance(secs(1.0));
        let (cause, detail) = crate::support::released_of(&p.take(Side::A, app), call);
        assert_eq!(cause, 41, "{detail}");
        assert!(detail.contains("did not reclaim"), "{detail}");
        let st = p.stat(Side::A);
        assert!(st.calls.is_empty(), "{st:?}");
        assert_eq!(st.vcis_in_use, 0);
        assert_eq!(
            (st.free_out_bps, st.free_in_bps),
            (st.capacity_bps, st.capacity_bps)
        );
        assert_eq!(st.counters.calls_released, 1);
    }
}

#[test]
fn halves_that_do_not_match_are_not_paired() {
    let mut p = Pair::default();
    let (_, c_call, c_path, _, l_call, l_path) = local_call(&mut p, "reliable", 0, 0);
    p.a = Node::new(Side::A, "", 7);
    p.advance(secs(0.2));
    let (_, m) = reclaim(&mut p, Side::A, c_call, c_path);
    assert!(matches!(m, Message::Ack { .. }), "{m:?}");
    // The callee's half with another cookie (or VCIs) is not the caller's other
    // half: its own ticket already says so.
    let mut wrong = l_path.clone();
    wrong.cookie ^= 1;
    let (_, m) = reclaim(&mut p, Side::A, l_call, wrong);
    assert!(
        matches!(&m, Message::Refused { cause: 57, detail, .. } if detail.contains("cookie")),
        "{m:?}"
    );
    let mut wrong = l_path.clone();
    std::mem::swap(&mut wrong.tx_vci, &mut wrong.rx_vci);
    let (_, m) = reclaim(&mut p, Side::A, l_call, wrong);
    assert!(
        matches!(&m, Message::Refused { cause: 57, detail, .. } if detail.contains("VCIs")),
        "{m:?}"
    );
    let (_, m) = reclaim(&mut p, Side::A, l_call, l_path);
    assert!(matches!(m, Message::Ack { .. }), "{m:?}");
    let st = p.stat(Side::A);
    assert_eq!(
        (st.counters.calls_reclaimed, st.counters.reclaims_refused),
        (2, 2)
    );
}

#[test]
fn a_reclaim_is_bound_to_the_uid_the_call_was_given_to() {
    let mut p = Pair::default();
    let (_, b_path, (_, _, _, b_call)) = p.call_ab_as(0, 1000);
    assert!(b_path.resume.contains(" uid=1000 "), "{}", b_path.resume);
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(0.2));
    let refused = |m: &Message| match m {
        Message::Refused { cause, detail, .. } => (*cause, detail.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    };
    // Another user who learned the whole ticket (call id, reference, VCIs, MAC).
    let (_, m) = reclaim_as(&mut p, Side::B, 1001, b_call, b_path.clone());
    let (c, why) = refused(&m);
    assert_eq!(c, 57, "{why}");
    assert!(
        why.contains("uid 1001 may not reclaim a call of uid 1000"),
        "{why}"
    );
    // ...who rewrites the owner in it: the MAC no longer verifies.
    let mut tampered = b_path.clone();
    tampered.resume = tampered.resume.replace(" uid=1000 ", " uid=1001 ");
    let (_, m) = reclaim_as(&mut p, Side::B, 1001, b_call, tampered);
    let (c, why) = refused(&m);
    assert_eq!(c, 57, "{why}");
    assert!(why.contains("MAC does not verify"), "{why}");
    // A ticket written by another host's sigd (another key) is forged here too.
    let mut elsewhere = b_path.clone();
    elsewhere.resume = natm_proto::wire::resume::ResumeTicket::open(
        &b_path.resume,
        &crate::support::ticket_key(B_SIG.parse().unwrap()),
    )
    .unwrap()
    .seal(&[0x11; 32])
    .unwrap();
    let (_, m) = reclaim_as(&mut p, Side::B, 1001, b_call, elsewhere);
    assert_eq!(refused(&m).0, 57, "{m:?}");
    // Another call's id with this ticket.
    let (_, m) = reclaim_as(&mut p, Side::B, 1000, b_call ^ 4, b_path.clone());
    assert_eq!(refused(&m).0, 81, "{m:?}");
    assert!(p.stat(Side::B).calls.is_empty(), "nothing held");
    // The owner's reclaim is taken.
    let (_, m) = reclaim_as(&mut p, Side::B, 1000, b_call, b_path);
    assert!(
        matches!(m, Message::Ack { id, .. } if id == b_call),
        "{m:?}"
    );
    let st = p.stat(Side::B);
    assert_eq!(
        (st.counters.calls_reclaimed, st.counters.reclaims_refused),
        (1, 4)
    );
    assert_eq!(st.calls[0].uid, Some(1000));
}

#[test]
fn root_may_reclaim_another_users_call() {
    let mut p = Pair::default();
    let (_, b_path, (_, _, _, b_call)) = p.call_ab_as(0, 1000);
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(0.2));
    let (_, m) = reclaim_as(&mut p, Side::B, 0, b_call, b_path);
    assert!(matches!(m, Message::Ack { .. }), "{m:?}");
}

#[test]
fn a_reclaim_counts_against_the_users_call_limit() {
    let conf = "[limits]\ncalls_per_user = 1\n";
    let mut p = Pair::new("", conf);
    let (_, b_path, (_, _, _, b_call)) = p.call_ab_as(0, 1000);
    p.b = Node::new(Side::B, conf, 9);
    p.advance(secs(0.2));
    // uid 1000 already holds a call on the restarted sigd (one inside host B).
    let l_app = p.app(Side::B);
    p.bind(Side::B, l_app, "other", "reliable");
    let b_app = p.app_as(Side::B, 1000);
    p.connect(Side::B, b_app, "+4420002:other", "reliable");
    let (_, m) = reclaim_as(&mut p, Side::B, 1000, b_call, b_path);
    assert!(
        matches!(m, Message::Refused { cause: 47, ref detail, .. } if detail.contains("calls_per_user")),
        "{m:?}"
    );
}

/// The `Refused` cause and detail of a reclaim's answer.
fn refusal(m: &Message) -> (u8, String) {
    match m {
        Message::Refused { cause, detail, .. } => (*cause, detail.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_ticket_replayed_without_a_restart_resumes_nothing() {
    // The audit's replay: the call is released, and its ticket presented to the
    // same sigd (no restart), with a QoS nine times the one granted.
    let mut p = Pair::default();
    let (_, b_path, (_, _, b_app, b_call)) = p.call_ab();
    let req = p.req();
    p.send(
        Side::B,
        b_app,
        Message::Release {
            req,
            call: b_call,
            cause: 16,
        },
    );
    p.advance(secs(1.0));
    for path in [
        b_path.clone(),
        DataPath {
            qos: "cbr:pcr=90Mbps".parse().unwrap(),
            ..b_path.clone()
        },
    ] {
        let (_, m) = reclaim(&mut p, Side::B, b_call, path);
        let (cause, detail) = refusal(&m);
        assert_eq!(cause, 57, "{detail}");
        assert!(detail.contains("issued by this sigd"), "{detail}");
    }
    let st = p.stat(Side::B);
    assert!(st.calls.is_empty(), "{st:?}");
    assert_eq!(st.counters.reclaims_refused, 2);
}

#[test]
fn a_ticket_reclaims_its_call_once() {
    let mut p = Pair::default();
    let (_, b_path, (_, _, _, b_call)) = p.call_ab();
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(0.2));
    let (b_app, m) = reclaim(&mut p, Side::B, b_call, b_path.clone());
    assert!(matches!(m, Message::Ack { .. }), "{m:?}");
    // The application ends the call; its ticket is spent with it.
    let req = p.req();
    p.send(
        Side::B,
        b_app,
        Message::Release {
            req,
            call: b_call,
            cause: 16,
        },
    );
    p.advance(secs(0.5));
    assert!(p.stat(Side::B).calls.is_empty());
    let (_, m) = reclaim(&mut p, Side::B, b_call, b_path);
    let (cause, detail) = refusal(&m);
    assert_eq!(cause, 81, "{detail}");
    assert!(detail.contains("used already"), "{detail}");
    assert!(p.stat(Side::B).calls.is_empty());
}

#[test]
fn a_ticket_expires_a_few_seconds_after_the_restart() {
    let mut p = Pair::default();
    let (_, b_path, (a_app, a_call, _, b_call)) = p.call_ab();
    // B's sigd restarts (the daemon starts its core at once).
    p.restart(Side::B, 9);
    // Default: the 3 s reclaim window and 2 s more.
    p.advance(secs(5.5));
    let (_, m) = reclaim(&mut p, Side::B, b_call, b_path);
    let (cause, detail) = refusal(&m);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("ticket_expiry_ms"), "{detail}");
    // The call nobody reclaimed in time is released at both ends.
    p.advance(secs(60.0));
    assert_eq!(released(&p, Side::A, a_app, a_call), Some(30));
    assert!(p.stat(Side::B).calls.is_empty());
}

#[test]
fn a_reclaim_keeps_to_the_tickets_qos_and_the_users_max_rate() {
    let mut p = Pair::default();
    let (_, c_call, c_path, _, _, _) = local_call(&mut p, "cbr:pcr=20Mbps", 1000, 1000);
    // sigd restarts with uid 1000 capped at 10 Mbit/s.
    let cap = "[[access]]\nuser = \"1000\"\nmax_rate = \"10Mbps\"\n";
    p.a = Node::new(Side::A, cap, 7);
    p.advance(secs(0.2));
    // Asking for more than the ticket was issued for: not this call's ticket.
    let faster = DataPath {
        qos: "cbr:pcr=90Mbps".parse().unwrap(),
        ..c_path.clone()
    };
    let (_, m) = reclaim_as(&mut p, Side::A, 1000, c_call, faster);
    let (cause, detail) = refusal(&m);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("QoS"), "{detail}");
    // The call as granted: above the user's cap now, refused naming it.
    let (_, m) = reclaim_as(&mut p, Side::A, 1000, c_call, c_path);
    let (cause, detail) = refusal(&m);
    assert_eq!(cause, 57, "{detail}");
    assert!(detail.contains("max_rate"), "{detail}");
    let st = p.stat(Side::A);
    assert!(st.calls.is_empty(), "{st:?}");
    assert_eq!(
        (st.free_out_bps, st.free_in_bps),
        (st.capacity_bps, st.capacity_bps),
        "nothing reserved"
    );
}
