//! Negotiation at the switch, in virtual time (`party_tests`' network of scripted
//! hosts and switches; every host but 0 answers a SETUP at once): a call gets the
//! most each outgoing port has free between its minimum and its target, the SETUP
//! goes on with that grant, the CONNECT brings it back, and a release returns it.
//! A refusal says which switch, which link and the figures, and is counted and
//! logged there.

use natm_proto::sig::{CallEvent, CallParams};
use natm_proto::wire::addr::party;
use natm_proto::wire::q2931::{ConnectionId, NatmParams, NetworkRefusal};
use natm_proto::wire::qos::Rate;

use super::party_tests::{addr, released, sock, Net};
use super::*;

const MS: Duration = Duration::from_millis(1);
const MBPS: u64 = 1_000_000;

/// The line, bit/s, whose cells carry `payload` bit/s of 4 KiB TPDUs (each takes 87
/// cells, header and AAL5 trailer included), to within a cell's payload.
fn line_carrying(payload: u64) -> u64 {
    (payload / BITS_PER_CELL * 87 * 48).div_ceil(4096) * 53 * 8
}

/// Host 0 calls host `h` asking for `qos`.
fn call(n: &mut Net, h: usize, qos: &str) -> CallId {
    let q: Qos = qos.parse().unwrap();
    let params = CallParams {
        dtl: None,
        called: party(&addr(h)).unwrap(),
        calling: party(&addr(0)),
        sap: None,
        qos: q,
        natm: NatmParams {
            qos: Some(q.to_string()),
            data_endpoint: Some(sock(5000)),
            cookie: Some(7),
            ..NatmParams::default()
        },
        // A label of its own per call: calls are 10 ms of virtual time apart.
        conn_id: Some(ConnectionId::exclusive(
            0,
            40 + (n.now.as_nanos() / 1_000_000) as u16,
        )),
        multipoint: false,
    };
    let c = n.hosts[0].setup(n.now, params).unwrap();
    n.run(10 * MS);
    c
}

/// The QoS host `h` was offered last, and the one host 0's CONNECT granted.
fn offered(n: &mut Net, h: usize) -> Option<Qos> {
    n.take(h).into_iter().rev().find_map(|e| match e {
        CallEvent::Incoming { params, .. } => Some(params.qos),
        _ => None,
    })
}

fn connected(n: &mut Net) -> Option<Qos> {
    n.take(0).into_iter().find_map(|e| match e {
        CallEvent::Connected { params, .. } => params.qos,
        _ => None,
    })
}

fn pcr(q: &Qos, dir: Direction) -> u64 {
    let p = match dir {
        Direction::Tx => q.tx(),
        Direction::Rx => q.rx(),
    };
    p.pcr.and_then(Rate::bits_per_sec).unwrap()
}

/// All that a line carrying `bps` has, to within the rounding of two reservations
/// to whole cells.
fn about(got: u64, bps: u64) -> bool {
    got <= bps && got >= bps - 2 * BITS_PER_CELL
}

fn reserved(n: &Net, s: usize, port: u16) -> u64 {
    n.nodes[s]
        .ctl
        .links()
        .iter()
        .find(|l| l.port == port)
        .map_or(0, |l| l.reserved_cells)
}

#[test]
fn a_call_for_200_with_a_minimum_of_50_gets_the_100_its_port_has_free() {
    // Host 1's port carries 100 Mbit/s; host 0's is 1 Gbit/s.
    let mut n = Net::star(&[1_000_000_000, line_carrying(100 * MBPS)]);
    call(&mut n, 1, "cbr:pcr=200Mbps,min_pcr=50Mbps");
    // The callee is offered what the switch granted: 100 towards it, 200 back.
    let seen = offered(&mut n, 1).expect("host 1 is offered the call");
    assert!(about(pcr(&seen, Direction::Tx), 100 * MBPS), "{seen}");
    assert_eq!(pcr(&seen, Direction::Rx), 200 * MBPS, "{seen}");
    assert_eq!(seen.tx().min_pcr, Some(Rate::Bps(50 * MBPS)), "{seen}");
    // The caller's CONNECT says so too (host 1 answered without a QoS).
    let got = connected(&mut n).expect("host 0 is connected with a QoS");
    assert_eq!(got, seen);
    // The port is full: a call that needs even 1 Mbit/s more is refused.
    assert!(reserved(&n, 0, 1) <= line_carrying(100 * MBPS) / 424);
    call(&mut n, 1, "cbr:pcr=1Mbps");
    assert_eq!(released(&n.take(0)), Some(37));
    assert_eq!(n.nodes[0].ctl.call_count(), 1);
}

#[test]
fn a_call_whose_minimum_is_not_free_is_refused_and_reserves_nothing() {
    let mut n = Net::star(&[1_000_000_000, line_carrying(100 * MBPS)]);
    call(&mut n, 1, "cbr:pcr=200Mbps,min_pcr=150Mbps");
    assert_eq!(released(&n.take(0)), Some(37));
    assert_eq!(offered(&mut n, 1), None, "never offered to the callee");
    assert_eq!(n.nodes[0].ctl.call_count(), 0);
    assert!(n.nodes[0].ctl.links().iter().all(|l| l.reserved_cells == 0));
    // Without a minimum the target is the minimum.
    call(&mut n, 1, "cbr:pcr=101Mbps");
    assert_eq!(released(&n.take(0)), Some(37));
}

#[test]
fn two_hops_each_lower_the_grant_and_a_release_returns_exactly_it() {
    // Switch 0 → trunk of 100 Mbit/s → switch 1 → host 2's port of 70 Mbit/s.
    let mut n = Net::chain_with(line_carrying(100 * MBPS), line_carrying(70 * MBPS));
    // Something already on the trunk, to see that only the call's own share returns.
    let first = call(&mut n, 2, "cbr:pcr=10Mbps");
    assert!(connected(&mut n).is_some());
    let trunk_before = (reserved(&n, 0, 2), reserved(&n, 1, 0));
    let c = call(&mut n, 2, "cbr:pcr=200Mbps,min_pcr=50Mbps");
    let seen = offered(&mut n, 2).expect("host 2 is offered the call");
    // Forward: 90 left on the trunk, then 60 left on host 2's port; backward: host
    // 0's port has ~143 (155.52 Mbit/s), then 90 on the trunk back.
    assert!(about(pcr(&seen, Direction::Tx), 60 * MBPS), "{seen}");
    assert!(about(pcr(&seen, Direction::Rx), 90 * MBPS), "{seen}");
    let got = connected(&mut n).expect("host 0 is connected with a QoS");
    assert_eq!(got, seen, "the caller learns what the last hop granted");
    // Each switch holds what the call got, not what it granted first: switch 0's
    // trunk reservation is switch 1's towards host 2 (both 60 forward), switch 0's
    // towards host 0 is switch 1's on the trunk back (both 90).
    let row = |s: usize| {
        n.nodes[s]
            .ctl
            .calls()
            .into_iter()
            .find(|r| r.qos == seen.to_string())
            .unwrap()
            .reserved_cells
    };
    assert_eq!(row(0), row(1));
    // The release gives back exactly that: what the first call holds is left.
    n.hosts[0].release(n.now, c, net_cause(16)).unwrap();
    n.run(20 * MS);
    assert_eq!((reserved(&n, 0, 2), reserved(&n, 1, 0)), trunk_before);
    n.hosts[0].release(n.now, first, net_cause(16)).unwrap();
    n.run(20 * MS);
    for s in 0..2 {
        assert!(n.nodes[s].ctl.links().iter().all(|l| l.reserved_cells == 0));
    }
}

/// The network's refusal in host 0's `Released`, with its cause value.
fn refusal(n: &mut Net) -> (u8, NetworkRefusal) {
    let evs = n.take(0);
    evs.iter()
        .find_map(|e| match e {
            CallEvent::Released { cause, .. } => Some((cause.value.raw(), cause.refusal()?)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a refusal by the network: {evs:?}"))
}

#[test]
fn a_refusal_for_capacity_names_the_switch_the_link_and_the_figures() {
    let mut n = Net::star(&[1_000_000_000, line_carrying(100 * MBPS)]);
    call(&mut n, 1, "cbr:pcr=200Mbps,min_pcr=150Mbps");
    let (c, r) = refusal(&mut n);
    assert_eq!(c, 37);
    assert_eq!((r.switch.as_str(), r.link.as_str()), ("sw0", "p1"));
    assert_eq!(
        r.reason,
        "forward 200 Mbit/s asked (at least 150 Mbit/s), 100 Mbit/s free of 100 Mbit/s"
    );
    // Counted on the link it could not take, and logged once.
    let ctl = &mut n.nodes[0].ctl;
    assert_eq!(ctl.refused(), 1);
    let links = ctl.links();
    assert_eq!((links[0].refused, links[1].refused), (0, 1));
    let logged = ctl.poll_refused().expect("the refusal is logged");
    assert_eq!(
        (logged.cause, logged.refusal, logged.suppressed),
        (37, r, 0)
    );
    assert_eq!(ctl.poll_refused(), None, "once");
}

#[test]
fn a_refusal_two_hops_away_reaches_the_caller_naming_the_far_switch() {
    let mut n = Net::chain_with(155_520_000, line_carrying(70 * MBPS));
    call(&mut n, 2, "cbr:pcr=80Mbps");
    let (c, r) = refusal(&mut n);
    assert_eq!(c, 37);
    assert_eq!((r.switch.as_str(), r.link.as_str()), ("sw1", "p1"));
    assert!(
        r.reason
            .starts_with("forward 80 Mbit/s asked (at least 80 Mbit/s), 70 Mbit/s free"),
        "{}",
        r.reason
    );
    // Switch 0 relayed it: neither counted nor logged there, and nothing is held.
    assert_eq!(n.nodes[0].ctl.refused(), 0);
    assert_eq!(n.nodes[0].ctl.poll_refused(), None);
    assert_eq!(n.nodes[1].ctl.refused(), 1);
    for s in 0..2 {
        assert!(n.nodes[s].ctl.links().iter().all(|l| l.reserved_cells == 0));
    }
    // No route: the link is the one the call came in on.
    call(&mut n, 7, "ubr");
    let (c, r) = refusal(&mut n);
    assert_eq!(c, 3);
    assert_eq!((r.switch.as_str(), r.link.as_str()), ("sw0", "p0"));
    assert!(r.reason.starts_with("no route to "), "{}", r.reason);
}

#[test]
fn a_flood_of_refusals_is_logged_at_most_ten_a_second_and_all_counted() {
    let mut n = Net::star(&[1_000_000_000, line_carrying(10 * MBPS)]);
    for _ in 0..15 {
        call(&mut n, 1, "cbr:pcr=20Mbps");
    }
    // 15 calls 10 ms apart: ten logged in the first second, five counted.
    let ctl = &mut n.nodes[0].ctl;
    assert_eq!(ctl.refused(), 15);
    let mut logged = 0;
    while ctl.poll_refused().is_some() {
        logged += 1;
    }
    assert_eq!(logged, REFUSALS_LOGGED_PER_S);
    n.run(Duration::from_secs(1));
    call(&mut n, 1, "cbr:pcr=20Mbps");
    let next = n.nodes[0]
        .ctl
        .poll_refused()
        .expect("logged again a second later");
    assert_eq!(next.suppressed, 5);
}

#[test]
fn a_callee_granting_less_is_what_the_caller_learns_and_what_the_switch_keeps() {
    let mut n = Net::star(&[1_000_000_000, 1_000_000_000]);
    n.answers[1] = Some("cbr:pcr=30Mbps,min_pcr=10Mbps".parse().unwrap());
    call(&mut n, 1, "cbr:pcr=80Mbps,min_pcr=10Mbps");
    let got = connected(&mut n).expect("connected");
    assert_eq!(got.to_string(), "cbr:pcr=30Mbps,min_pcr=10Mbps");
    let held = n.nodes[0].ctl.calls()[0].reserved_cells;
    // As much as a call asking for 30 outright holds.
    let mut m = Net::star(&[1_000_000_000, 1_000_000_000]);
    call(&mut m, 1, "cbr:pcr=30Mbps,min_pcr=10Mbps");
    assert_eq!(held, m.nodes[0].ctl.calls()[0].reserved_cells);
    // An answer of another service is no answer: the caller learns the grant and the
    // switch keeps its reservation.
    let mut n = Net::star(&[1_000_000_000, 1_000_000_000]);
    n.answers[1] = Some("ubr".parse().unwrap());
    call(&mut n, 1, "cbr:pcr=80Mbps");
    assert_eq!(connected(&mut n).unwrap().to_string(), "cbr:pcr=80Mbps");
    assert!(n.nodes[0].ctl.calls()[0].reserved_cells.0 > 200_000);
}
