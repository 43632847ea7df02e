//! Timers and link loss in virtual time: Q.2931's T303 and T310, the callee's accept
//! timer (cause 18), SSCOP link failure with Q.2931 §5.6.9's treatment of calls that
//! are and are not active, and SSCOP recovering lost datagrams. Nothing sleeps.

use std::time::Duration;

use crate::support::*;
use natm_proto::wire::ipc::Message;
use natm_proto::wire::q2931::MessageType as Q;

/// Whether `app` on `s` has been told that `call` was released (without taking it).
fn is_released(p: &Pair, s: Side, app: natm_sigd::core::AppId, call: u64) -> bool {
    let n = match s {
        Side::A => &p.a,
        Side::B => &p.b,
    };
    n.inbox.get(&app).is_some_and(|q| {
        q.iter()
            .any(|m| matches!(m, Message::Released { call: c, .. } if *c == call))
    })
}

#[test]
fn t303_resends_setup_once_then_clears_the_call_with_cause_102() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    // Every SETUP is lost; SSCOP itself keeps working.
    p.lose = Box::new(|d| d.q2931().is_some_and(|m| m.kind == Q::Setup));
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(secs(7.9));
    assert!(!is_released(&p, Side::A, a_app, call), "T303 is 4 s, twice");
    assert_eq!(p.sent_by(Side::A), vec![Q::Setup, Q::Setup]);
    p.advance(secs(0.2));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 102);
    assert!(detail.contains("no answer from the peer sigd"), "{detail}");
    assert_eq!(p.take(Side::B, b_app), vec![]);
    assert_eq!(p.stat(Side::A).vcis_in_use, 0);
}

#[test]
fn t310_clears_a_call_proceeding_that_never_connects() {
    let mut p = Pair::new(
        "[timers]\nt310_ms = 2000\n",
        "[timers]\naccept_ms = 60000\n",
    );
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.advance(secs(1.9));
    assert_eq!(p.sent_by(Side::B), vec![Q::CallProceeding]);
    assert!(!is_released(&p, Side::A, a_app, call));
    p.advance(secs(0.2));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 102, "{detail}");
    assert!(p.sent_by(Side::A).ends_with(&[Q::Release]));
    // The listener's offer is withdrawn.
    released_of(&p.take(Side::B, b_app), b_call);
}

#[test]
fn an_offer_left_unanswered_is_cleared_with_cause_18() {
    let mut p = Pair::new("", "[timers]\naccept_ms = 3000\n");
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    p.advance(secs(2.9));
    assert!(!is_released(&p, Side::B, b_app, b_call));
    p.advance(secs(0.2));
    let (cause, detail) = released_of(&p.take(Side::B, b_app), b_call);
    assert_eq!(cause, 18);
    assert!(detail.contains("within 3 s"), "{detail}");
    assert_eq!(released_of(&p.take(Side::A, a_app), call).0, 18);
    let s = p.stat(Side::B);
    assert!(s.calls.is_empty());
    assert_eq!(s.counters.calls_refused, 1);
}

#[test]
fn a_lost_link_keeps_active_calls_for_t309_then_clears_them_with_cause_27() {
    // T309 is `[restart] preserve_ms` on links to peer sigds.
    let t309 = "[restart]\npreserve_ms = 10000\n";
    let mut p = Pair::new(t309, t309);
    let (_, _, (a_app, a_call, b_app, b_call)) = p.call_ab();
    p.lose = Box::new(|_| true);
    // SSCOP notices within Timer_IDLE + Timer_NO_RESPONSE; the active call then waits
    // T309 (10 s) for the link to return.
    p.advance(secs(15.0));
    assert!(
        !is_released(&p, Side::A, a_app, a_call),
        "an active call outlives the link loss itself"
    );
    p.advance(secs(30.0));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    // T309 is call control's timer: cleared by timer, cause 27.
    assert_eq!(cause, 27, "{detail}");
    assert_eq!(released_of(&p.take(Side::B, b_app), b_call).0, 27);
    assert!(p.stat(Side::A).calls.is_empty());
}

#[test]
fn a_lost_link_clears_calls_not_yet_active_at_once_with_cause_41() {
    let mut p = Pair::new(
        "[timers]\nt310_ms = 60000\n",
        "[timers]\naccept_ms = 60000\n",
    );
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.take(Side::B, b_app);
    p.advance(secs(0.1));
    p.lose = Box::new(|_| true);
    p.advance(secs(25.0));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 41, "{detail}");
    assert!(detail.contains("was lost"), "{detail}");
}

#[test]
fn a_peer_that_never_answers_fails_the_waiting_call_with_cause_27() {
    let mut p = Pair::default();
    p.lose = Box::new(|_| true);
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    // Timer_CC 1 s × MaxCC 4 BGNs.
    p.advance(secs(3.5));
    assert!(!is_released(&p, Side::A, a_app, call));
    p.advance(secs(1.0));
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 27);
    assert!(detail.contains("is it running?"), "{detail}");
    assert!(p.trace.is_empty(), "no SETUP without a link");
    let s = p.stat(Side::A);
    assert_eq!(s.peers.len(), 1);
    assert!(!s.peers[0].up);
}

#[test]
fn sscop_recovers_lost_datagrams_and_the_call_still_connects() {
    let mut p = Pair::default();
    p.delay = Duration::from_millis(5);
    // Lose a fifth of the datagrams, whatever they carry (a fixed pseudo-random
    // pattern: a periodic one can fall in step with SSCOP's POLL/STAT/SD cycle and
    // lose the same SD every time).
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    p.lose = Box::new(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x.is_multiple_of(5)
    });
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    p.advance(secs(3.0));
    let b_call = p
        .take(Side::B, b_app)
        .iter()
        .find_map(|m| match m {
            Message::Incoming { call, .. } => Some(*call),
            _ => None,
        })
        .expect("the SETUP got through");
    p.accept(Side::B, b_app, b_call);
    p.advance(secs(3.0));
    let msgs = p.take(Side::A, a_app);
    let a = connected_of(&msgs, call);
    assert!(a.tx_vci >= 32);
    assert_eq!(
        p.stat(Side::B).calls[0].state,
        natm_sigd::core::CallState::Active
    );
}

#[test]
fn a_peer_sigd_that_restarts_loses_its_calls_and_the_survivor_clears_them() {
    let mut p = Pair::default();
    let (_, _, (a_app, a_call, ..)) = p.call_ab();
    // B's sigd restarts: a new core at the same endpoint that knows no calls.
    p.b = Node::new(Side::B, "", 9);
    p.advance(secs(40.0));
    // B's new SSCOP knows no connection, so A loses the link and establishes it again
    // (Q.2931 §5.6.9): the active call asks STATUS ENQUIRY once the link is back, and
    // B, which knows no such call, answers STATUS in state 0 — A clears the call.
    let (cause, detail) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 30, "{detail}");
    assert!(p.sent_by(Side::A).ends_with(&[Q::StatusEnquiry]));
    assert!(p.sent_by(Side::B).ends_with(&[Q::Status]));
    let s = p.stat(Side::A);
    assert!(s.calls.is_empty(), "{s:?}");
    assert_eq!(s.vcis_in_use, 0);
    assert!(s.peers[0].up, "the link is re-established for new calls");
}
