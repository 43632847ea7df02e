//! The on-demand VC machine in virtual time: nodes, an ATMARP server and the calls
//! between them driven by hand, asserting on the actions that come out.

use super::*;
use crate::ip::arp::{ArpServer, SERVER_AGE};
use crate::ip::packet::tests::{tcp6, udp4};

const A: &str = "+4420001";
const B: &str = "+4420002";

fn atm(s: &str) -> AtmAddr {
    s.parse().expect("address")
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn policy() -> Policy {
    Policy::parse("udp dport 5004 -> cbr:pcr=20Mbps", "best-effort").expect("policy")
}

/// Host A at 10.0.0.1 / fd00::1 (the test packets' source).
fn node_a(t: Instant) -> Node {
    let mut cfg = NodeConfig::new(atm(A));
    cfg.ipv4 = Some("10.0.0.1".parse().expect("ip"));
    cfg.ipv6 = Some("fd00::1".parse().expect("ip"));
    cfg.idle = secs(10.0);
    Node::new(cfg, policy(), t)
}

/// A server that knows B at 10.0.0.2 and fd00::2.
fn server(t: Instant) -> ArpServer {
    let mut s = ArpServer::new(64, SERVER_AGE);
    s.add_permanent(t, "10.0.0.2".parse().expect("ip"), atm(B));
    s.add_permanent(t, "fd00::2".parse().expect("ip"), atm(B));
    s
}

fn drain(n: &mut Node) -> Vec<Action> {
    std::iter::from_fn(|| n.poll_action()).collect()
}

/// Hands A's ATMARP frames to the server and the answers back; returns the rest.
fn via_server(n: &mut Node, s: &mut ArpServer, t: Instant) -> Vec<Action> {
    let mut rest = Vec::new();
    while let Some(a) = n.poll_action() {
        match a {
            Action::ToServer(f) => {
                let (_, body) = llc::parse(&f).expect("LLC/SNAP");
                let req = Repr::parse(body).expect("ATMARP");
                if let (_, Some(reply)) = s.handle(t, atm(A), &req) {
                    n.handle_server_frame(t, &arp_frame(&reply.to_bytes().expect("encodable")));
                }
            }
            other => rest.push(other),
        }
    }
    rest
}

fn setups(actions: &[Action]) -> Vec<(VcId, AtmAddr, usize, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Setup {
                vc,
                peer,
                class,
                mtu,
                ..
            } => Some((*vc, *peer, *class, *mtu)),
            _ => None,
        })
        .collect()
}

fn transmits(actions: &[Action]) -> Vec<(VcId, Vec<u8>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Transmit { vc, frame } => Some((*vc, frame.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn registers_at_start_and_again_before_the_server_forgets() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    a.handle_timeout(t0);
    let regs: Vec<_> = drain(&mut a)
        .into_iter()
        .filter_map(|x| match x {
            Action::ToServer(f) => Repr::parse(&f[8..]).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(regs.len(), 2, "IPv4 and IPv6");
    for r in &regs {
        assert_eq!(r.op, Op::Request);
        assert_eq!(r.source_ip, r.target_ip, "a registration resolves itself");
        assert_eq!(r.source_atm, Some(atm(A)));
    }
    let t1 = t0 + CLIENT_AGE;
    assert!(a.poll_timeout().is_some_and(|t| t <= t1));
    a.handle_timeout(t1);
    assert_eq!(drain(&mut a).len(), 2, "registered again");
}

#[test]
fn the_first_packet_resolves_sets_up_and_then_goes() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.handle_timeout(t0);
    via_server(&mut a, &mut s, t0);
    let p = udp4(200, 80, true);
    a.handle_outbound(t0, p.clone());
    assert_eq!(a.waiting(), 1, "waits while its address is resolved");
    let acts = via_server(&mut a, &mut s, t0);
    let set = setups(&acts);
    assert_eq!(set.len(), 1);
    let (vc, peer, class, mtu) = set[0];
    assert_eq!(
        (peer, class, mtu),
        (atm(B), 1, DEFAULT_MTU),
        "best-effort class, RFC 2225 MTU"
    );
    assert_eq!(a.waiting(), 1, "waits while its VC is set up");
    let t1 = t0 + secs(0.002);
    a.handle_setup_done(t1, vc);
    let tx = transmits(&drain(&mut a));
    assert_eq!(tx, vec![(vc, frame(&p))]);
    assert_eq!(&tx[0].1[..8], &[0xAA, 0xAA, 0x03, 0, 0, 0, 0x08, 0x00]);
    assert_eq!(a.counters().last_setup_us, 2000);
    // The next packet goes at once, without resolution or setup.
    a.handle_outbound(t1, p.clone());
    assert_eq!(transmits(&drain(&mut a)), vec![(vc, frame(&p))]);
}

#[test]
fn each_policy_class_gets_its_own_vc_to_the_same_peer() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.handle_outbound(t0, udp4(1000, 5004, true));
    a.handle_outbound(t0, udp4(1000, 9, true));
    let mut set = setups(&via_server(&mut a, &mut s, t0));
    set.sort_by_key(|s| s.2);
    assert_eq!(set.len(), 2);
    assert_eq!(set.iter().map(|s| s.2).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(a.policy().qos(set[0].2), "cbr:pcr=20Mbps");
    assert_ne!(set[0].0, set[1].0);
    for (vc, ..) in &set {
        a.handle_setup_done(t0, *vc);
    }
    let tx = transmits(&drain(&mut a));
    assert_eq!(tx.len(), 2);
    for (vc, f) in tx {
        let dport = u16::from_be_bytes([f[8 + 22], f[8 + 23]]);
        let want = if dport == 5004 { set[0].0 } else { set[1].0 };
        assert_eq!(
            vc, want,
            "the video packet on the CBR VC, the other on best effort"
        );
    }
}

#[test]
fn idle_vcs_are_released_and_busy_ones_kept() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.handle_outbound(t0, udp4(100, 9, true));
    let vc = setups(&via_server(&mut a, &mut s, t0))[0].0;
    a.handle_setup_done(t0, vc);
    drain(&mut a);
    // Traffic every 6 s keeps a 10 s idle timer from firing.
    for i in 1..=3 {
        let t = t0 + secs(6.0 * f64::from(i));
        a.handle_timeout(t);
        a.handle_outbound(t, udp4(100, 9, true));
        assert!(!drain(&mut a)
            .iter()
            .any(|x| matches!(x, Action::Release { .. })));
    }
    let last = t0 + secs(18.0);
    let due = a.poll_timeout().expect("an idle timer");
    assert_eq!(due, last + secs(10.0));
    a.handle_timeout(due);
    assert_eq!(
        drain(&mut a),
        vec![Action::Release {
            vc,
            reason: ReleaseReason::Idle
        }]
    );
    assert_eq!(a.counters().idle_releases, 1);
    assert_eq!(a.vcs().count(), 0);
    // The next packet sets up a new VC (the address is still cached).
    a.handle_outbound(due, udp4(100, 9, true));
    assert_eq!(setups(&drain(&mut a)).len(), 1);
}

#[test]
fn waiting_packets_are_bounded_in_number_bytes_and_time() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    for _ in 0..100 {
        a.handle_outbound(t0, udp4(1000, 9, true));
    }
    assert_eq!(a.waiting(), 64);
    assert_eq!(a.counters().drop_queue, 36);
    let asks = drain(&mut a)
        .iter()
        .filter(|x| matches!(x, Action::ToServer(_)))
        .count();
    assert_eq!(asks, 1, "one resolution");
    // Bytes: 1 MiB over all destinations.
    for i in 0..2000u32 {
        let mut p = udp4(1000, 9, true);
        p[19] = (i % 250) as u8 + 3;
        p[18] = (i / 250) as u8 + 1;
        a.handle_outbound(t0, p);
    }
    assert!(a.waiting() * 1000 <= 1 << 20);
    // Nothing answers: after the wait every packet is dropped.
    a.handle_timeout(t0 + a.config().wait);
    assert_eq!(a.waiting(), 0);
    assert!(a.counters().drop_expired > 0);
}

#[test]
fn a_nak_drops_the_waiting_packets_and_holds_the_address() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    let mut p = udp4(100, 9, true);
    p[19] = 99; // 10.0.0.99: unknown to the server
    a.handle_outbound(t0, p.clone());
    via_server(&mut a, &mut s, t0);
    assert_eq!(
        (a.counters().arp_naks, a.counters().drop_unresolved),
        (1, 1)
    );
    a.handle_outbound(t0 + secs(1.0), p.clone());
    assert!(drain(&mut a).is_empty(), "not asked again while held");
    assert_eq!(a.counters().drop_unresolved, 2);
    a.handle_timeout(t0 + secs(3.0));
    a.handle_outbound(t0 + secs(3.0), p);
    assert!(!drain(&mut a).is_empty(), "asked again after the hold");
}

#[test]
fn an_unanswered_resolution_is_retried_then_given_up() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    a.handle_timeout(t0);
    drain(&mut a);
    a.handle_outbound(t0, udp4(100, 9, true));
    let mut asked = drain(&mut a).len();
    let mut t = t0;
    while let Some(due) = a.poll_timeout().filter(|&d| d < t0 + secs(2.5)) {
        t = due;
        a.handle_timeout(t);
        asked += drain(&mut a).len();
    }
    assert_eq!(asked, 4, "arp_tries requests");
    assert_eq!(a.counters().drop_unresolved, 1);
    assert!(t < t0 + secs(2.5));
}

#[test]
fn multicast_is_dropped_without_asking_the_server() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let mut p = udp4(100, 9, true);
    p[16..20].copy_from_slice(&[224, 0, 0, 251]);
    a.handle_outbound(t0, p);
    assert!(drain(&mut a).is_empty());
    assert_eq!((a.counters().drop_multicast, a.waiting()), (1, 0));
}

#[test]
fn unsolicited_replies_leave_no_state() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let reply = Repr {
        op: Op::Reply,
        ipv6: false,
        source_atm: Some(atm("+666")),
        source_ip: Some("10.0.0.7".parse().expect("ip")),
        target_atm: Some(atm(A)),
        target_ip: Some("10.0.0.1".parse().expect("ip")),
    };
    a.handle_server_frame(t0, &arp_frame(&reply.to_bytes().expect("encodable")));
    assert!(a.table().is_empty());
    a.handle_server_frame(t0, b"\xAA\xAA\x03\0\0\0\x08\x06garbage");
    assert_eq!(a.counters().drop_malformed, 1);
}

#[test]
fn the_mtu_is_agreed_per_vc() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.cfg.mtu = 65000;
    a.handle_outbound(t0, udp4(100, 9, true));
    let (vc, _, _, mtu) = setups(&via_server(&mut a, &mut s, t0))[0];
    assert_eq!(mtu, 65000, "offers its own");
    // The callee's MTU is smaller: it refuses with cause 73, and the default follows.
    a.handle_setup_failed(t0, vc, Some(CAUSE_MTU));
    assert_eq!(setups(&drain(&mut a)), vec![(vc, atm(B), 1, DEFAULT_MTU)]);
    a.handle_setup_done(t0, vc);
    drain(&mut a);
    // Over the VC's MTU: DF set → ICMP fragmentation needed back to the sender ...
    a.handle_outbound(t0, udp4(20000, 9, true));
    let acts = drain(&mut a);
    let Some(Action::Deliver(icmp)) = acts.first() else {
        panic!("an ICMP error, got {acts:?}");
    };
    assert_eq!((icmp[20], icmp[21]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[26], icmp[27]]), 9180);
    // ... DF clear → fragments; IPv6 → packet too big.
    a.handle_outbound(t0, udp4(20000, 9, false));
    let tx = transmits(&drain(&mut a));
    assert_eq!(tx.len(), 3);
    assert!(tx.iter().all(|(v, f)| *v == vc && f.len() <= 9180 + 8));
    // IPv6 to the same host and class rides the same VC, once fd00::2 is resolved.
    a.handle_outbound(t0, tcp6(30000, 80));
    let acts = via_server(&mut a, &mut s, t0);
    assert!(
        matches!(&acts[..], [Action::Deliver(p)] if p[40] == 2),
        "{acts:?}"
    );
    assert_eq!(a.counters().icmp_too_big, 2);
    assert_eq!(a.counters().fragmented, 1);
}

#[test]
fn a_callee_takes_the_default_mtu_and_offers_up_to_its_own() {
    let t0 = Instant::ZERO;
    let mut b = node_a(t0);
    b.cfg.mtu = 1500;
    assert_eq!(
        b.handle_incoming(t0, atm(A), Some(1), Some(65000)),
        Err(CAUSE_MTU)
    );
    assert!(matches!(
        b.handle_incoming(t0, atm(A), Some(1), Some(DEFAULT_MTU)),
        Ok((_, 9180))
    ));
    assert!(matches!(
        b.handle_incoming(t0, atm(A), Some(1), Some(1400)),
        Ok((_, 1400))
    ));
    assert!(matches!(
        b.handle_incoming(t0, atm(A), None, None),
        Ok((_, 9180))
    ));
    // Up to the default it takes what it does not send itself: a member of the
    // subnet may send it packets of 9,180 (RFC 2225 §5).
    assert!(matches!(
        b.handle_incoming(t0, atm(A), Some(1), Some(9000)),
        Ok((_, 9000))
    ));
    assert_eq!(
        b.handle_incoming(t0, atm(A), Some(1), Some(9181)),
        Err(CAUSE_MTU)
    );
}

#[test]
fn a_host_that_sends_less_than_the_default_offers_the_default() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.cfg.mtu = 8464;
    a.handle_outbound(t0, udp4(100, 9, true));
    let (vc, _, _, mtu) = setups(&via_server(&mut a, &mut s, t0))[0];
    assert_eq!(mtu, DEFAULT_MTU, "offers what every member takes");
    a.handle_setup_done(t0, vc);
    drain(&mut a);
    // What it sends is the interface's: a packet of its MTU goes whole.
    a.handle_outbound(t0, udp4(8464, 9, true));
    let tx = transmits(&drain(&mut a));
    assert_eq!(tx.len(), 1);
    assert_eq!(tx[0].1.len(), 8464 + 8);
}

#[test]
fn a_vc_the_peer_set_up_carries_the_replies_of_its_class() {
    let t0 = Instant::ZERO;
    let (mut b, mut s) = (node_a(t0), server(t0));
    // B's view: a call from +4420002 (whom the server knows as 10.0.0.2), class 1.
    let (vc, _) = b
        .handle_incoming(t0, atm(B), Some(1), None)
        .expect("accepted");
    b.handle_accepted(t0, vc);
    let inbound = frame(&udp4(100, 9, true));
    assert_eq!(b.handle_frame(t0, vc, &inbound), Some(&inbound[8..]));
    b.handle_outbound(t0, udp4(100, 7, true));
    let acts = via_server(&mut b, &mut s, t0);
    assert!(setups(&acts).is_empty(), "no second VC");
    assert_eq!(transmits(&acts).len(), 1);
    assert_eq!(transmits(&acts)[0].0, vc);
    // A packet of another class still gets its own VC.
    b.handle_outbound(t0, udp4(100, 5004, true));
    assert_eq!(setups(&drain(&mut b)).len(), 1);
    // The peer releases: the route goes with it.
    b.handle_closed(t0, vc);
    b.handle_outbound(t0, udp4(100, 7, true));
    assert_eq!(setups(&drain(&mut b)).len(), 1);
}

#[test]
fn inatmarp_finds_the_peer_on_a_pvc() {
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let mut bcfg = NodeConfig::new(atm(B));
    bcfg.ipv4 = Some("10.0.0.2".parse().expect("ip"));
    let mut b = Node::new(bcfg, policy(), t0);
    let pvc: AtmAddr = "0.0.100".parse().expect("pvc");
    let va = a.add_pvc(t0, pvc, DEFAULT_MTU);
    let vb = b.add_pvc(t0, pvc, DEFAULT_MTU);
    // A's InARP requests reach B, B's replies reach A (and the other way round).
    for _ in 0..2 {
        for (vc, f) in transmits(&drain(&mut a)) {
            assert_eq!(vc, va);
            assert_eq!(b.handle_frame(t0, vb, &f), None);
        }
        for (vc, f) in transmits(&drain(&mut b)) {
            assert_eq!(vc, vb);
            assert_eq!(a.handle_frame(t0, va, &f), None);
        }
    }
    assert_eq!(
        a.table().lookup(t0, "10.0.0.2".parse().expect("ip")),
        Some(pvc)
    );
    assert_eq!(
        b.table().lookup(t0, "10.0.0.1".parse().expect("ip")),
        Some(pvc)
    );
    a.handle_outbound(t0, udp4(100, 5004, true));
    let acts = drain(&mut a);
    assert!(setups(&acts).is_empty());
    assert_eq!(transmits(&acts)[0].0, va, "every class rides the PVC");
    // A PVC is never released for idleness.
    a.handle_timeout(t0 + secs(3600.0));
    assert!(!drain(&mut a)
        .iter()
        .any(|x| matches!(x, Action::Release { .. })));
}

#[test]
fn without_a_server_pvc_peers_learn_each_other_by_inatmarp_alone() {
    let t0 = Instant::ZERO;
    let pvc: AtmAddr = "0.0.100".parse().expect("pvc");
    let mk = |ip: &str| {
        let mut cfg = NodeConfig::new(pvc);
        cfg.ipv4 = Some(ip.parse().expect("ip"));
        cfg.server = false;
        Node::new(cfg, policy(), t0)
    };
    let (mut a, mut b) = (mk("10.0.0.1"), mk("10.0.0.2"));
    let va = a.add_pvc(t0, pvc, DEFAULT_MTU);
    let vb = b.add_pvc(t0, pvc, DEFAULT_MTU);
    // The registration timer asks nothing of a server that is not there, and asks
    // the PVC's peer again.
    a.handle_timeout(t0);
    let acts = drain(&mut a);
    assert!(!acts.iter().any(|x| matches!(x, Action::ToServer(_))));
    assert_eq!(a.counters().arp_requests, 0);
    for (vc, f) in transmits(&acts) {
        assert_eq!(vc, va);
        assert_eq!(b.handle_frame(t0, vb, &f), None);
    }
    for (vc, f) in transmits(&drain(&mut b)) {
        assert_eq!(vc, vb);
        assert_eq!(a.handle_frame(t0, va, &f), None);
    }
    // A asked twice (at start and at the timer), B answered both; A learnt B.
    assert_eq!(a.counters().inarp_requests, 2);
    assert_eq!(b.counters().inarp_answered, 2);
    assert_eq!(a.counters().inarp_replies, 2);
    assert_eq!(
        a.table().lookup(t0, "10.0.0.2".parse().expect("ip")),
        Some(pvc)
    );
    // A packet to B goes on the PVC at once, with no call.
    drain(&mut a); // A's answer to B's request
    a.handle_outbound(t0, udp4(100, 7, true));
    let acts = drain(&mut a);
    assert!(setups(&acts).is_empty());
    assert_eq!(transmits(&acts).len(), 1);
}

#[test]
fn without_a_server_an_unknown_address_is_asked_of_the_pvcs_peers() {
    let t0 = Instant::ZERO;
    let pvc: AtmAddr = "0.0.100".parse().expect("pvc");
    let mut cfg = NodeConfig::new(pvc);
    cfg.ipv4 = Some("10.0.0.1".parse().expect("ip"));
    cfg.server = false;
    let mut a = Node::new(cfg, policy(), t0);
    let va = a.add_pvc(t0, pvc, DEFAULT_MTU);
    drain(&mut a); // the first request, lost: the peer was not up yet
    a.handle_outbound(t0, udp4(100, 7, true));
    let acts = drain(&mut a);
    let tx = transmits(&acts);
    assert_eq!(tx.len(), 1, "{acts:?}");
    let (_, body) = llc::parse(&tx[0].1).expect("LLC/SNAP");
    assert_eq!(Repr::parse(body).expect("InATMARP").op, Op::InRequest);
    assert_eq!(tx[0].0, va);
    // The peer's request names it: the packet that waited goes.
    let mut bcfg = NodeConfig::new(pvc);
    bcfg.ipv4 = Some("10.0.0.2".parse().expect("ip"));
    bcfg.server = false;
    let mut b = Node::new(bcfg, policy(), t0);
    b.add_pvc(t0, pvc, DEFAULT_MTU);
    let (_, req) = transmits(&drain(&mut b)).remove(0);
    assert_eq!(a.handle_frame(t0, va, &req), None);
    let tx = transmits(&drain(&mut a));
    assert!(
        tx.iter()
            .any(|(_, f)| llc::parse(f).is_ok_and(|(p, _)| p == Payload::Ipv4)),
        "the waiting packet went on the PVC: {tx:?}"
    );
}

/// InARP requests on a PVC, in order.
fn inarp_requests(acts: &[Action]) -> Vec<Vec<u8>> {
    transmits(acts)
        .into_iter()
        .filter(|(_, f)| {
            matches!(llc::parse(f), Ok((Payload::Arp, body))
                if Repr::parse(body).is_ok_and(|r| r.op == Op::InRequest))
        })
        .map(|(_, f)| f)
        .collect()
}

#[test]
fn inatmarp_on_a_pvc_is_repeated_until_the_peer_answers() {
    // The far end opens its side of the PVC late (Linux's atmarpd after natm ip): the
    // first request is lost, so A asks again at 1, 3, 7 s ... (doubling, at most 30 s
    // apart) until B answers, and a packet for B asks at once.
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let pvc: AtmAddr = "0.0.100".parse().expect("pvc");
    let va = a.add_pvc(t0, pvc, DEFAULT_MTU);
    assert_eq!(inarp_requests(&drain(&mut a)).len(), 2, "IPv4 and IPv6");
    // The registration at start asks every PVC too.
    a.handle_timeout(t0);
    drain(&mut a);
    let mut asked_at = Vec::new();
    let mut t = t0;
    while t < t0 + secs(200.0) {
        t += secs(0.25);
        if a.poll_timeout().is_some_and(|d| d <= t) {
            a.handle_timeout(t);
            if !inarp_requests(&drain(&mut a)).is_empty() {
                asked_at.push(t.saturating_duration_since(t0).as_secs_f64());
            }
        }
    }
    assert_eq!(asked_at[..5], [1.0, 3.0, 7.0, 15.0, 31.0]);
    assert!(asked_at.windows(2).all(|w| w[1] - w[0] <= 30.0));
    // A packet for B waits, and the silent PVC is asked at once.
    a.handle_outbound(t, udp4(100, 9, false));
    let acts = drain(&mut a);
    assert!(!inarp_requests(&acts).is_empty());
    assert_eq!(a.waiting(), 1);
    // B answers; the packet goes on the PVC and the retries stop.
    let mut bcfg = NodeConfig::new(atm(B));
    bcfg.ipv4 = Some("10.0.0.2".parse().expect("ip"));
    let mut b = Node::new(bcfg, policy(), t);
    let vb = b.add_pvc(t, pvc, DEFAULT_MTU);
    drain(&mut b);
    for f in inarp_requests(&acts) {
        b.handle_frame(t, vb, &f);
    }
    for (_, f) in transmits(&drain(&mut b)) {
        a.handle_frame(t, va, &f);
    }
    let sent = transmits(&drain(&mut a));
    assert_eq!(sent.len(), 1, "the waiting packet");
    assert_eq!(a.waiting(), 0);
    let later = t + secs(120.0);
    a.handle_timeout(later);
    assert!(inarp_requests(&drain(&mut a)).is_empty());
}

/// A UDP packet from 10.0.0.1 to 10.0.0.`last`.
fn udp4_to(last: u8, dport: u16) -> Vec<u8> {
    let mut p = udp4(100, dport, false);
    p[19] = last;
    p
}

fn setup_kinds(actions: &[Action]) -> Vec<(VcId, VcKind)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Setup { vc, kind, .. } => Some((*vc, *kind)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_peer_that_is_not_natm_is_called_again_as_rfc_2225_does() {
    // B is Linux: its atmsigd (or the switch before it) refuses natm's SAP `ip` with
    // cause 88. A calls again on the same VC as RFC 2225 does, and that one VC then
    // carries every class to B.
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.handle_outbound(t0, udp4(1000, 5004, true));
    let acts = via_server(&mut a, &mut s, t0);
    let [(vc, VcKind::Natm)] = setup_kinds(&acts)[..] else {
        panic!("{acts:?}")
    };
    a.handle_setup_failed(t0, vc, Some(CAUSE_INCOMPATIBLE));
    let again = drain(&mut a);
    assert_eq!(setup_kinds(&again), vec![(vc, VcKind::Llc)]);
    assert_eq!(a.waiting(), 1, "the packet waits for the second setup");
    // Another class meanwhile waits for the same VC: no setup of its own.
    a.handle_outbound(t0, udp4(1000, 9, true));
    assert!(setups(&drain(&mut a)).is_empty());
    a.handle_setup_done(t0, vc);
    let tx = transmits(&drain(&mut a));
    assert_eq!(tx.len(), 2, "both classes' packets");
    assert!(tx.iter().all(|(v, _)| *v == vc));
    // B's IPv6 address, once resolved, is the same peer: the same VC.
    a.handle_outbound(t0, tcp6(1000, 80));
    let acts = via_server(&mut a, &mut s, t0);
    assert!(setups(&acts).is_empty());
    assert_eq!(
        transmits(&acts).iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![vc]
    );
    assert_eq!(a.counters().setup_failures, 0);
}

/// B refused natm's service once (its `natm ip` was not listening yet) and is served
/// on one RFC 2225 VC; A's node with B there, that VC open, and the retry time 5 s.
fn served_as_rfc_2225(t0: Instant) -> (Node, VcId) {
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.cfg.natm_retry = secs(5.0);
    a.handle_outbound(t0, udp4(1000, 5004, true));
    let [(vc, VcKind::Natm)] = setup_kinds(&via_server(&mut a, &mut s, t0))[..] else {
        panic!()
    };
    a.handle_setup_failed(t0, vc, Some(CAUSE_INCOMPATIBLE));
    drain(&mut a);
    a.handle_setup_done(t0, vc);
    drain(&mut a);
    (a, vc)
}

/// The VCs `a`'s packets went on, and the kinds of the calls it made, for one
/// packet to B on UDP port `dport` at `t`.
fn one_packet(a: &mut Node, t: Instant, dport: u16) -> (Vec<VcId>, Vec<(VcId, VcKind)>) {
    a.handle_outbound(t, udp4(1000, dport, true));
    let acts = drain(a);
    let on = transmits(&acts).iter().map(|x| x.0).collect();
    (on, setup_kinds(&acts))
}

#[test]
fn a_peer_that_refused_natm_is_called_with_natm_again_after_a_while() {
    let t0 = Instant::ZERO;
    let (mut a, llc) = served_as_rfc_2225(t0);
    // Before the retry time every class rides the one VC.
    assert_eq!(
        one_packet(&mut a, t0 + secs(4.0), 5004),
        (vec![llc], vec![])
    );
    // After it a class calls with natm's; its packets keep to the VC meanwhile, and
    // another class does not call too.
    let t1 = t0 + secs(6.0);
    let (on, calls) = one_packet(&mut a, t1, 5004);
    assert_eq!(on, vec![llc]);
    let [(natm, VcKind::Natm)] = calls[..] else {
        panic!("{calls:?}")
    };
    assert_eq!(one_packet(&mut a, t1, 9), (vec![llc], vec![]));
    // Once the natm VC is open the class has it; the other class stays.
    a.handle_setup_done(t1, natm);
    assert!(
        transmits(&drain(&mut a)).is_empty(),
        "nothing waited for it"
    );
    assert_eq!(one_packet(&mut a, t1, 5004), (vec![natm], vec![]));
    assert_eq!(one_packet(&mut a, t1, 9), (vec![llc], vec![]));
    assert_eq!(a.counters().natm_retries, 1);
}

#[test]
fn a_peer_that_refuses_natm_again_stays_on_its_rfc_2225_vc() {
    // Linux: the retry is refused with cause 88 as the first call was. No second RFC
    // 2225 VC, nothing waits, and the next try is a retry time after the refusal.
    let t0 = Instant::ZERO;
    let (mut a, llc) = served_as_rfc_2225(t0);
    let t1 = t0 + secs(6.0);
    let (_, calls) = one_packet(&mut a, t1, 5004);
    let [(natm, VcKind::Natm)] = calls[..] else {
        panic!("{calls:?}")
    };
    a.handle_setup_failed(t1, natm, Some(CAUSE_INCOMPATIBLE));
    assert!(drain(&mut a).is_empty(), "no call as RFC 2225 again");
    assert_eq!(a.waiting(), 0);
    assert_eq!(
        one_packet(&mut a, t1 + secs(4.0), 5004),
        (vec![llc], vec![])
    );
    let (on, calls) = one_packet(&mut a, t1 + secs(6.0), 5004);
    assert_eq!(on, vec![llc]);
    assert!(matches!(calls[..], [(_, VcKind::Natm)]), "{calls:?}");
    assert_eq!(a.counters().natm_retries, 2);
    assert_eq!(a.counters().setup_failures, 0);
}

#[test]
fn an_rfc_2225_call_is_refused_once_and_other_refusals_are_not_retried() {
    let t0 = Instant::ZERO;
    let (mut a, mut s) = (node_a(t0), server(t0));
    a.handle_outbound(t0, udp4(1000, 9, true));
    let [(vc, _)] = setup_kinds(&via_server(&mut a, &mut s, t0))[..] else {
        panic!()
    };
    a.handle_setup_failed(t0, vc, Some(CAUSE_INCOMPATIBLE));
    drain(&mut a);
    // The RFC 2225 call is refused too: the packets go, nothing is called again.
    a.handle_setup_failed(t0, vc, Some(CAUSE_INCOMPATIBLE));
    assert!(setups(&drain(&mut a)).is_empty());
    assert_eq!(a.waiting(), 0);
    assert_eq!(a.counters().drop_setup, 1);
    // A refusal for capacity from a natm peer is not a reason to call as RFC 2225.
    a.handle_outbound(t0, udp4(1000, 9, true));
    let [(vc, VcKind::Natm)] = setup_kinds(&drain(&mut a))[..] else {
        panic!()
    };
    a.handle_setup_failed(t0, vc, Some(37));
    assert!(setups(&drain(&mut a)).is_empty());
    assert_eq!(a.counters().setup_failures, 2);
}

#[test]
fn an_rfc_2225_caller_is_asked_its_address_and_its_vc_carries_the_replies() {
    // Linux calls A as RFC 2225 does. A asks who it is by InATMARP on the VC (RFC
    // 2225 §8.3), learns 10.0.0.9 from the reply, and sends to it on that VC,
    // every class, without asking the server or calling back.
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    a.handle_timeout(t0);
    drain(&mut a);
    let linux = atm("+4420009");
    let (vc, mtu) = a
        .handle_incoming_llc(t0, linux, Some(DEFAULT_MTU))
        .expect("taken");
    assert_eq!(mtu, DEFAULT_MTU);
    assert!(
        drain(&mut a).is_empty(),
        "nothing on the VC before it is accepted"
    );
    a.handle_accepted(t0, vc);
    let asked = inarp_requests(&drain(&mut a));
    assert_eq!(asked.len(), 2, "IPv4 and IPv6");
    let reply = Repr {
        op: Op::InReply,
        ipv6: false,
        source_atm: Some(linux),
        source_ip: Some("10.0.0.9".parse().expect("ip")),
        target_atm: Some(atm(A)),
        target_ip: Some("10.0.0.1".parse().expect("ip")),
    };
    let f = arp_frame(&reply.to_bytes().expect("encodable"));
    assert_eq!(a.handle_frame(t0, vc, &f), None);
    assert_eq!(
        a.table().lookup(t0, "10.0.0.9".parse().expect("ip")),
        Some(linux)
    );
    a.handle_outbound(t0, udp4_to(9, 5004));
    a.handle_outbound(t0, udp4_to(9, 80));
    let acts = drain(&mut a);
    assert!(setups(&acts).is_empty());
    assert!(!acts.iter().any(|x| matches!(x, Action::ToServer(_))));
    let tx = transmits(&acts);
    assert_eq!(tx.len(), 2);
    assert!(tx.iter().all(|(v, _)| *v == vc));
    // It answered, so it is not asked again but with the registrations.
    a.handle_timeout(t0 + secs(5.0));
    assert!(inarp_requests(&drain(&mut a)).is_empty());
    // An RFC 2225 SVC idles out as any SVC does.
    a.handle_timeout(t0 + secs(11.0));
    assert!(drain(&mut a)
        .iter()
        .any(|x| matches!(x, Action::Release { vc: v, .. } if *v == vc)));
}

#[test]
fn a_server_that_is_not_natm_is_answered_on_its_vc() {
    // Linux's atmarpd, as A's server, asks who A is by InATMARP on A's VC to it
    // (RFC 2225 §8.4.1); its host's IP packets to A come on that VC too.
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let ask = Repr {
        op: Op::InRequest,
        ipv6: false,
        source_atm: Some(atm(B)),
        source_ip: Some("10.0.0.2".parse().expect("ip")),
        target_atm: None,
        target_ip: None,
    };
    let f = arp_frame(&ask.to_bytes().expect("encodable"));
    assert_eq!(a.handle_server_frame(t0, &f), None);
    let to_server: Vec<_> = drain(&mut a)
        .into_iter()
        .filter_map(|x| match x {
            Action::ToServer(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(to_server.len(), 1);
    let (_, body) = llc::parse(&to_server[0]).expect("LLC/SNAP");
    let r = Repr::parse(body).expect("ATMARP");
    assert_eq!(r.op, Op::InReply);
    assert_eq!(r.source_ip, Some("10.0.0.1".parse().expect("ip")));
    assert_eq!(r.source_atm, Some(atm(A)));
    let p = udp4(100, 9, false);
    assert_eq!(a.handle_server_frame(t0, &frame(&p)), Some(&p[..]));
    assert_eq!(a.handle_server_frame(t0, &[1, 2, 3]), None);
    assert_eq!(a.counters().drop_malformed, 1);
}

#[test]
fn one_peer_gets_its_share_of_vcs_and_no_more() {
    // A peer that calls again and again (hostile, or broken) is refused with cause 47
    // past 2 × classes + 2 VCs; another peer still gets in, and a VC that goes frees
    // a place.
    let t0 = Instant::ZERO;
    let mut a = node_a(t0);
    let share = 2 * a.policy().classes() + 2;
    let mut taken = Vec::new();
    for _ in 0..share {
        let (vc, _) = a
            .handle_incoming(t0, atm(B), Some(1), None)
            .expect("within the share");
        taken.push(vc);
    }
    assert_eq!(
        a.handle_incoming(t0, atm(B), Some(1), None),
        Err(CAUSE_NO_VC)
    );
    assert_eq!(a.handle_incoming_llc(t0, atm(B), None), Err(CAUSE_NO_VC));
    assert_eq!(a.counters().refused_per_peer, 2);
    assert!(a
        .handle_incoming(t0, atm("+4420009"), Some(1), None)
        .is_ok());
    a.handle_closed(t0, taken[0]);
    assert!(a.handle_incoming(t0, atm(B), Some(1), None).is_ok());
}
