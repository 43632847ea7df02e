//! Calls the network negotiates or refuses (issue 33): two sigd cores attached to one
//! natm switch whose ports are slower than the hosts' links, in virtual time.

use crate::support::*;
use natm_proto::wire::ipc::Message;
use natm_sigd::core::AppId;

/// A switch line carrying 45 Mbit/s of 4 KiB TPDUs (87 cells each on the wire).
const LINE: u64 = (45_000_000_u64 / 384 * 87 * 48).div_ceil(4096) * 424;

#[test]
fn a_refusal_by_a_switch_says_the_network_refused_where_and_why() {
    let mut p = Pair::switched_line(None, LINE);
    let a_app = p.app(Side::A);
    // A's own link (100 Mbit/s) grants 80; the switch's port towards B cannot.
    let call = p.connect(Side::A, a_app, "+4420002:tv", "cbr:pcr=80Mbps");
    let (cause, detail) = released_of(&p.take(Side::A, a_app), call);
    assert_eq!(cause, 37);
    assert!(
        detail.starts_with(
            "refused by the network at switch switch, link p1: forward 80 Mbit/s asked \
             (at least 80 Mbit/s), 45 Mbit/s free of 45 Mbit/s"
        ),
        "{detail}"
    );
    assert!(!detail.contains("called side"), "{detail}");
    // What A's sigd had reserved for it is back.
    let st = p.stat(Side::A);
    assert_eq!(st.free_out_bps, st.capacity_bps);
    assert_eq!(p.switch.as_ref().unwrap().ctl.refused(), 1);
}

#[test]
fn a_call_the_switch_lowers_is_connected_at_the_switchs_grant_at_both_hosts() {
    let mut p = Pair::switched_line(None, LINE);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "tv", "cbr:pcr=100Mbps");
    let a_app = p.app(Side::A);
    let a_call = p.connect(
        Side::A,
        a_app,
        "+4420002:tv",
        "cbr:pcr=80Mbps,min_pcr=10Mbps",
    );
    let (b_call, offered) = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, qos, .. }] => (*call, *qos),
        other => panic!("expected one Incoming, got {other:?}"),
    };
    // The callee is offered what the switch could give, 45 Mbit/s (to a cell).
    let pcr = offered.tx().pcr.and_then(|r| r.bits_per_sec());
    assert_eq!(pcr, Some(44_999_808), "{offered}");
    p.accept(Side::B, b_app, b_call);
    let a_path = connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(a_path.granted_bps, 44_999_808);
    // A's sigd keeps reserved only what the network granted.
    let st = p.stat(Side::A);
    assert_eq!(st.capacity_bps - st.free_out_bps, 44_999_808);
}

/// A asks 80 Mbit/s (at least 10) of B through the switch, which offers B 45: the
/// pair, A's application and call, B's application and offered call.
fn offered_through_the_switch() -> (Pair, AppId, u64, AppId, u64) {
    let mut p = Pair::switched_line(None, LINE);
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "tv", "cbr:pcr=100Mbps");
    let a_app = p.app(Side::A);
    let a_call = p.connect(
        Side::A,
        a_app,
        "+4420002:tv",
        "cbr:pcr=80Mbps,min_pcr=10Mbps",
    );
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("expected one Incoming, got {other:?}"),
    };
    (p, a_app, a_call, b_app, b_call)
}

/// B's application accepts `call` at `tx_bps` out and `rx_bps` in.
fn accept_at(p: &mut Pair, app: AppId, call: u64, tx_bps: u64, rx_bps: u64) {
    let req = p.req();
    p.send(
        Side::B,
        app,
        Message::AcceptAt {
            req,
            call,
            data: data(50_001),
            tx_bps,
            rx_bps,
        },
    );
}

/// The callee's counter-offer (issue 33): B accepts at 20 Mbit/s a call offered at the
/// switch's 45 (the caller's minimum is 10): the CONNECT carries 20, and both sigds
/// and the switch keep only that reserved.
#[test]
fn a_callee_that_accepts_at_a_lower_rate_lowers_the_call_at_both_hosts_and_the_switch() {
    let (mut p, a_app, a_call, b_app, b_call) = offered_through_the_switch();
    let switch_cells = |p: &Pair| {
        let calls = p.switch.as_ref().unwrap().ctl.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls[0].reserved_cells
    };
    let offered_cells = switch_cells(&p);
    accept_at(&mut p, b_app, b_call, 20_000_000, 20_000_000);
    let b_path = connected_of(&p.take(Side::B, b_app), b_call);
    let a_path = connected_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(a_path.granted_bps, 20_000_000);
    let pcr = |q: &natm_proto::wire::qos::Qos| q.tx().pcr.and_then(|r| r.bits_per_sec());
    assert_eq!(pcr(&a_path.qos), Some(20_000_000), "{}", a_path.qos);
    assert_eq!(
        b_path.qos.rx().pcr.and_then(|r| r.bits_per_sec()),
        Some(20_000_000)
    );
    // Each sigd holds 20 Mbit/s, and the switch less than it was offered.
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert_eq!(st.capacity_bps - st.free_out_bps, 20_000_000);
        assert_eq!(st.capacity_bps - st.free_in_bps, 20_000_000);
    }
    let now = switch_cells(&p);
    assert!(
        now.0 < offered_cells.0 && now.0 > 0 && now.1 < offered_cells.1,
        "{now:?} after {offered_cells:?}"
    );
}

/// A counter-offer below the caller's minimum is refused (cause 73) and the call is
/// released at both ends, with everything it held.
#[test]
fn a_counter_offer_below_the_callers_minimum_is_refused_and_the_call_released() {
    let (mut p, a_app, a_call, b_app, b_call) = offered_through_the_switch();
    accept_at(&mut p, b_app, b_call, 20_000_000, 5_000_000);
    let got = p.take(Side::B, b_app);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Message::Refused { cause: 73, detail, .. } if detail.contains("receive at 5 Mbit/s")
        )),
        "{got:?}"
    );
    let (cause, _) = released_of(&p.take(Side::A, a_app), a_call);
    assert_eq!(cause, 73);
    for s in [Side::A, Side::B] {
        let st = p.stat(s);
        assert_eq!(st.free_out_bps, st.capacity_bps);
        assert_eq!(st.free_in_bps, st.capacity_bps);
    }
    assert!(p.switch.as_ref().unwrap().ctl.calls().is_empty());
}
