//! Calls the network negotiates or refuses (issue 33): two sigd cores attached to one
//! natm switch whose ports are slower than the hosts' links, in virtual time.

use crate::support::*;
use natm_proto::wire::ipc::Message;

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
