//! A sigd that dies and restarts, in virtual time (issue 16 item 6,
//! docs/ARCHITECTURE.md "sigd restart"): the survivor keeps its active calls while
//! the link is down (`[restart] preserve_ms`, T309) and re-establishes it; the
//! restarted sigd takes over the calls its applications reclaim; STATUS ENQUIRY
//! (Q.2931 §5.6.11) then keeps or releases each call at both ends alike.

mod support;

use natm_proto::wire::ipc::Message;
use natm_proto::wire::q2931::MessageType as Q;
use natm_sigd::core::CallState;
use support::*;

#[test]
fn a_reclaimed_call_survives_the_callee_sigds_restart_at_both_ends() {
    let mut p = Pair::default();
    let (a_path, b_path, (a_app, a_call, b_app, b_call)) = p.call_ab();
    assert!(
        a_path.resume.starts_with("natm-resume/1 "),
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
    p.advance(secs(40.0));
    // B's application comes back late and reclaims: taken, then cleared by the
    // STATUS that says A has no such call.
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
    // A call inside one host has no ticket and does not outlive its sigd.
    let mut local = b_path.clone();
    local.resume = String::new();
    let (_, m) = reclaim(&mut p, Side::B, b_call, local);
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
