//! Pre-authorised listeners (`BindAuto`): sigd answers a fitting SETUP with CONNECT on
//! one of the application's pre-opened data endpoints, tells the application after
//! the caller's CONNECT ACKNOWLEDGE, refuses with cause 17 when the backlog is empty,
//! and offers calls that do not fit as for an explicit listener
//! (docs/sigd.md "Pre-authorised listeners").

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use crate::support::*;
use natm_proto::wire::ipc::{DataPath, Message};
use natm_proto::wire::q2931::MessageType as Q;
use natm_sigd::core::AppId;

fn endpoints(n: u16) -> Vec<SocketAddr> {
    (0..n).map(|i| data(60_000 + i)).collect()
}

/// The `Accepted` among `msgs`: listener, call, endpoint used, caller, path.
fn accepted(msgs: &[Message]) -> (u64, u64, SocketAddr, String, DataPath) {
    msgs.iter()
        .find_map(|m| match m {
            Message::Accepted {
                listener,
                call,
                data,
                caller,
                path,
            } => Some((*listener, *call, *data, caller.clone(), path.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Accepted in {msgs:?}"))
}

fn auto_listener(p: &mut Pair, backlog: u16, qos: &str) -> (AppId, u64) {
    let app = p.app(Side::B);
    let l = p.bind_auto(Side::B, app, "auto", qos, endpoints(backlog));
    (app, l)
}

#[test]
fn a_fitting_call_is_answered_by_sigd_on_a_pre_opened_endpoint() {
    let mut p = Pair::default();
    let (b_app, listener) = auto_listener(&mut p, 2, "reliable");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    let a = connected_of(&p.take(Side::A, a_app), a_call);
    let (l, b_call, endpoint, caller, b) = accepted(&p.take(Side::B, b_app));
    assert_eq!(l, listener);
    assert!(endpoints(2).contains(&endpoint));
    assert_eq!(
        a.peer, endpoint,
        "the caller is told the pre-opened endpoint"
    );
    assert_eq!(caller, A_ADDR);
    assert_eq!((a.tx_vci, a.rx_vci), (b.rx_vci, b.tx_vci));
    assert_eq!(a.cookie, b.cookie);
    // No offer, no CALL PROCEEDING: SETUP, CONNECT, CONNECT ACK.
    assert_eq!(p.sent_by(Side::B), vec![Q::Connect]);
    assert_eq!(p.sent_by(Side::A), vec![Q::Setup, Q::ConnectAck]);
    let s = p.stat(Side::B);
    assert_eq!(s.counters.calls_pre_accepted, 1);
    assert_eq!(s.listeners[0].pre_authorised_free, Some(1));
    assert_eq!(s.calls[0].id, format!("{b_call:016x}"));
}

#[test]
fn the_listener_hears_of_its_call_only_after_the_connect_acknowledge() {
    let mut p = Pair::default();
    let (b_app, _) = auto_listener(&mut p, 2, "reliable");
    // Hold everything from A back from its CONNECT ACKNOWLEDGE on, while `hold`.
    let hold = Rc::new(Cell::new(true));
    let from_ack = Rc::new(Cell::new(false));
    let a_sig = p.a.sig;
    {
        let (hold, from_ack) = (hold.clone(), from_ack.clone());
        p.lose = Box::new(move |d| {
            if d.q2931().is_some_and(|m| m.kind == Q::ConnectAck) {
                from_ack.set(true);
            }
            d.from == a_sig && from_ack.get() && hold.get()
        });
    }
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(
        p.take(Side::B, b_app),
        vec![],
        "held until CONNECT ACKNOWLEDGE"
    );
    // SSCOP's next POLL brings the retransmission.
    hold.set(false);
    p.advance(Duration::from_secs(2));
    accepted(&p.take(Side::B, b_app));

    // A second call that ends before its CONNECT ACKNOWLEDGE arrives: the
    // application learns which socket it took, then that it ended.
    hold.set(true);
    from_ack.set(false);
    let second = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    connected_of(&p.take(Side::A, a_app), second);
    assert_eq!(p.take(Side::B, b_app), vec![]);
    let now = p.now;
    p.b.core.shutdown(now);
    p.collect();
    let msgs = p.take(Side::B, b_app);
    let (_, b_call, ..) = accepted(&msgs);
    let accepted_at = msgs
        .iter()
        .position(|m| matches!(m, Message::Accepted { .. }));
    let released_at = msgs
        .iter()
        .position(|m| matches!(m, Message::Released { call, .. } if *call == b_call));
    assert!(
        accepted_at < released_at && accepted_at.is_some(),
        "{msgs:?}"
    );
}

#[test]
fn a_full_backlog_refuses_with_cause_17_until_endpoints_come_back() {
    let mut p = Pair::default();
    let (b_app, listener) = auto_listener(&mut p, 1, "reliable");
    let a_app = p.app(Side::A);
    let first = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    connected_of(&p.take(Side::A, a_app), first);
    let second = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    let (cause, _) = released_of(&p.take(Side::A, a_app), second);
    assert_eq!(cause, 17);
    assert_eq!(p.stat(Side::B).counters.backlog_refusals, 1);
    // The application takes its call and gives the socket's slot back.
    accepted(&p.take(Side::B, b_app));
    let req = p.req();
    p.send(
        Side::B,
        b_app,
        Message::Endpoints {
            req,
            listener,
            data: vec![data(61_000)],
        },
    );
    assert_eq!(ack_of(&p.take(Side::B, b_app), req), listener);
    let third = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    assert_eq!(
        connected_of(&p.take(Side::A, a_app), third).peer,
        data(61_000)
    );
}

#[test]
fn a_call_that_does_not_fit_the_bound_qos_is_offered_instead() {
    let mut p = Pair::default();
    let (b_app, listener) = auto_listener(&mut p, 4, "cbr:pcr=10Mbps");
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:auto", "cbr:pcr=20Mbps");
    match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming {
            listener: l, qos, ..
        }] => {
            assert_eq!(*l, listener);
            assert_eq!(
                qos.tx().pcr.and_then(|r| r.bits_per_sec()),
                Some(20_000_000),
                "{qos}"
            );
        }
        other => panic!("expected an offer, got {other:?}"),
    }
    assert_eq!(p.stat(Side::B).listeners[0].pre_authorised_free, Some(4));
}

#[test]
fn a_local_pre_authorised_call_is_announced_at_once() {
    let mut p = Pair::default();
    let listener_app = p.app(Side::A);
    p.bind_auto(Side::A, listener_app, "auto", "reliable", endpoints(1));
    let caller = p.app(Side::A);
    let call = p.connect(Side::A, caller, "+4420001:auto", "reliable");
    let c = connected_of(&p.take(Side::A, caller), call);
    let (_, _, endpoint, _, l) = accepted(&p.take(Side::A, listener_app));
    assert_eq!(c.peer, endpoint);
    assert_eq!((c.tx_vci, c.rx_vci), (l.rx_vci, l.tx_vci));
    assert!(p.trace.is_empty());
}

#[test]
fn a_pre_authorised_listener_that_dies_releases_its_accepted_calls() {
    let mut p = Pair::default();
    let (b_app, _) = auto_listener(&mut p, 2, "reliable");
    let a_app = p.app(Side::A);
    let call = p.connect(Side::A, a_app, "+4420002:auto", "reliable");
    connected_of(&p.take(Side::A, a_app), call);
    p.close(Side::B, b_app);
    assert_eq!(released_of(&p.take(Side::A, a_app), call).0, 41);
    let s = p.stat(Side::B);
    assert!(s.calls.is_empty() && s.listeners.is_empty());
}
