//! `natm stat` as the core answers it (`StatReply`, read back as the typed `Stat`):
//! calls with their VCIs and reservations, listeners, links, counters, and the
//! directory's registered addresses.

use crate::support::*;
use natm_proto::wire::ipc::Message;
use natm_sigd::core::CallState;

#[test]
fn stat_shows_both_ends_of_an_active_guaranteed_call() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "cbr:pcr=50Mbps");
    let a_app = p.app(Side::A);
    let a_call = p.connect(Side::A, a_app, "+4420002:echo", "cbr:pcr=20Mbps");
    let b_call = match p.take(Side::B, b_app).as_slice() {
        [Message::Incoming { call, .. }] => *call,
        other => panic!("{other:?}"),
    };
    let b_path = connected_of(&p.accept(Side::B, b_app, b_call), b_call);
    let a_path = connected_of(&p.take(Side::A, a_app), a_call);

    let a = p.stat(Side::A);
    assert_eq!(a.addresses, vec![A_ADDR.to_owned()]);
    assert_eq!(a.signalling, A_SIG);
    assert_eq!(a.capacity_bps, 100_000_000);
    assert_eq!((a.free_out_bps, a.free_in_bps), (80_000_000, 80_000_000));
    assert_eq!(a.tpdu_cost_ns, 1000);
    assert!(a.cpu_free_ns_per_s < a.cpu_budget_ns_per_s);
    assert_eq!(a.applications, 2, "the caller and stat's own connection");
    assert_eq!(a.vcis_in_use, 1, "A labels only the VC it receives on");
    assert_eq!(a.calls.len(), 1);
    let row = &a.calls[0];
    assert_eq!(row.id, format!("{a_call:016x}"));
    assert_eq!(row.state, CallState::Active);
    assert_eq!(row.direction, "out");
    assert_eq!((row.local.as_str(), row.remote.as_str()), (A_ADDR, B_ADDR));
    assert_eq!(row.sap, "echo");
    assert_eq!((row.tx_vci, row.rx_vci), (a_path.tx_vci, a_path.rx_vci));
    assert_eq!(row.data, Some(data(40_000 + a_app.0 as u16).to_string()));
    assert_eq!(
        (row.reserved_out_bps, row.reserved_in_bps),
        (20_000_000, 20_000_000)
    );
    assert_eq!(row.pid, Some(1000 + a_app.0 as i32));
    assert_eq!(a.peers.len(), 1);
    assert_eq!(a.peers[0].peer, B_SIG);
    assert!(a.peers[0].up);
    assert_eq!(a.peers[0].calls, 1);
    assert_eq!(a.counters.calls_setup, 1);
    assert_eq!(a.counters.app_connections, 2);

    let b = p.stat(Side::B);
    let row = &b.calls[0];
    assert_eq!(row.direction, "in");
    assert_eq!((row.local.as_str(), row.remote.as_str()), (B_ADDR, A_ADDR));
    assert_eq!((row.tx_vci, row.rx_vci), (b_path.tx_vci, b_path.rx_vci));
    assert_eq!(b.listeners.len(), 1);
    let l = &b.listeners[0];
    assert_eq!((l.sap.as_str(), l.qos.as_str()), ("echo", "cbr:pcr=50Mbps"));
    assert_eq!(l.address, None);
    assert_eq!(l.pre_authorised_free, None);
    assert_eq!(l.pid, Some(1000 + b_app.0 as i32));
}

#[test]
fn an_offered_call_shows_as_offered_and_stat_counts_refusals() {
    let mut p = Pair::default();
    let b_app = p.app(Side::B);
    p.bind(Side::B, b_app, "echo", "reliable");
    let a_app = p.app(Side::A);
    p.connect(Side::A, a_app, "+4420002:echo", "reliable");
    let b = p.stat(Side::B);
    assert_eq!(b.calls[0].state, CallState::Offered);
    assert_eq!(p.stat(Side::A).calls[0].state, CallState::Calling);
    p.connect(Side::A, a_app, "+4420002:nobody", "reliable");
    let a = p.stat(Side::A);
    assert_eq!(a.counters.calls_refused, 1);
    assert_eq!(a.calls.len(), 1);
}

#[test]
fn a_registered_address_is_local_until_its_application_leaves() {
    let mut p = Pair::default();
    let owner = p.app(Side::A);
    let req = p.req();
    p.send(
        Side::A,
        owner,
        Message::Register {
            req,
            address: "+4420009".into(),
        },
    );
    ack_of(&p.take(Side::A, owner), req);
    assert!(p.stat(Side::A).addresses.contains(&"+4420009".to_owned()));
    p.bind(Side::A, owner, "+4420009:svc", "reliable");
    let caller = p.app(Side::A);
    p.connect(Side::A, caller, "+4420009:svc", "reliable");
    assert!(matches!(
        p.take(Side::A, owner).as_slice(),
        [Message::Incoming { .. }]
    ));
    p.close(Side::A, owner);
    let s = p.stat(Side::A);
    assert_eq!(s.addresses, vec![A_ADDR.to_owned()]);
    assert!(s.listeners.is_empty() && s.calls.is_empty());
}
