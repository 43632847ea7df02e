//! No spurious retransmission on a loss-free path (issue 34): a VC paced well below
//! its path's rate sees a round trip of tens of microseconds on loopback, and a
//! receiver that runs a little late now and then (a shared CPU) must not make the
//! sender resend what arrived.

use super::*;
use crate::flow::build;
use crate::wire::qos::Qos;

/// A pair on `qos` over a loopback-like path (25 µs each way, no loss, no
/// reordering) whose every 40th ACK comes `late` late; the RTO floor `min_rto` if one
/// is given.
fn late_every_40th(qos: &str, min_rto: Option<Duration>, late: Duration) -> Pair {
    let q: Qos = qos.parse().unwrap();
    let mut cfg = TransportConfig::from_qos(&q, false).unwrap();
    if let Some(rto) = min_rto {
        cfg.rtt.min_rto = rto;
    }
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.delay = Duration::from_micros(25);
    let mut n = 0u32;
    p.back_extra = Box::new(move || {
        n += 1;
        if n.is_multiple_of(40) {
            late
        } else {
            Duration::ZERO
        }
    });
    p
}

/// 4 MB over `p`: the sender's stats, after asserting that every message arrived.
fn four_mb(mut p: Pair) -> PsbStats {
    let m = msgs(&[64 * 1024; 64]);
    p.transfer(&m, Duration::from_secs(60));
    assert_eq!(p.messages(), m, "messages lost");
    p.tx.stats().clone()
}

#[test]
fn a_paced_vc_does_not_retransmit_on_a_loss_free_path_with_late_acks() {
    for qos in [
        "cbr:pcr=40Mbps,ec=on",
        "reliable:flow=packet-pair,pcr=40Mbps",
    ] {
        let s = four_mb(late_every_40th(qos, None, Duration::from_micros(400)));
        assert_eq!(
            (s.retx_head, s.retx_fast, s.retx_timeout),
            (0, 0, 0),
            "{qos}: {} TPDUs, {} head checks",
            s.tpdus_sent,
            s.head_checks
        );
    }
}

/// The floor does not turn the head check off: on the same path, a lost last TPDU
/// (nothing after it to reveal the hole) is resent by the head check within a few
/// milliseconds, long before the 200 ms RTO.
#[test]
fn the_head_check_still_resends_a_lost_tail_within_milliseconds() {
    let q: Qos = "reliable:flow=packet-pair,pcr=40Mbps".parse().unwrap();
    let cfg = TransportConfig::from_qos(&q, false).unwrap();
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    p.delay = Duration::from_micros(25);
    let mut data = 0;
    p.fate = Box::new(move |t, fwd| {
        if fwd && t.kind == TransmitKind::Data {
            data += 1;
            // The 16th and last TPDU of the message, first transmission only.
            return u8::from(data != 16);
        }
        1
    });
    let m = msgs(&[64 * 1024]);
    let start = p.now;
    for c in &m {
        assert_eq!(p.tx.send(c, true), Ok(c.len()));
    }
    while p.messages().len() < m.len() && p.step() {}
    assert_eq!(p.messages(), m);
    let took = p.now - start;
    let s = p.tx.stats();
    assert_eq!((s.retx_head, s.timeouts), (1, 0), "{s:?}");
    assert!(took < Duration::from_millis(30), "recovered after {took:?}");
}

/// RFC 3522 on the head check: ACKs that come 8 ms late now and then (a receiver
/// descheduled past the head check's 2 ms) make the first head retransmission
/// spurious — the original's ACK then comes — and the check waits two of that ACK's
/// RTT from then on, so the later stalls cost no retransmission.
#[test]
fn a_head_retransmission_shown_spurious_stretches_the_head_check() {
    let s = four_mb(late_every_40th(
        "reliable:flow=packet-pair,pcr=40Mbps",
        None,
        Duration::from_millis(8),
    ));
    assert!(
        s.acks_received > 400,
        "{} ACKs: too few to be late",
        s.acks_received
    );
    assert!(
        s.retx_head_spurious >= 1,
        "no head retransmission found spurious: {s:?}"
    );
    assert!(
        s.retx_head <= 2 && s.retx_timeout == 0,
        "{} head retransmissions, {} on timeout, for {} late ACKs",
        s.retx_head,
        s.retx_timeout,
        s.acks_received / 40
    );
}

/// RFC 3522 on the retransmission timer, as on the head check: with the 20 ms RTO
/// floor the library sets, ACKs that come 50 ms late now and then (a receiver
/// descheduled that long on a shared CPU; `natm-lab perf scale` at 1,000
/// connections) time out the first time — the original's ACK then shows the
/// retransmission spurious — and the timer waits two of that ACK's RTT from then on,
/// so the later stalls cost no retransmission.
#[test]
fn a_timeout_shown_spurious_stretches_the_retransmission_timer() {
    let s = four_mb(late_every_40th(
        "reliable:flow=packet-pair,pcr=40Mbps",
        Some(Duration::from_millis(20)),
        Duration::from_millis(50),
    ));
    assert!(
        s.acks_received > 400,
        "{} ACKs: too few to be late",
        s.acks_received
    );
    assert!(
        s.timeouts <= 2,
        "{} timeouts ({} TPDUs resent, {} found spurious) for {} late ACKs",
        s.timeouts,
        s.retx_timeout,
        s.retx_timeout_spurious,
        s.acks_received / 40
    );
}

/// RFC 9040 on RFC 3522's response: a VC told the late ACKs that other VCs to the
/// same host learnt (`Psb::share_late_rtt`, the engine's `late_path`) waits for them
/// from its first TPDU, so the stalls that cost the previous test one spurious head
/// retransmission to learn cost this VC none.
#[test]
fn a_late_ack_shared_by_other_vcs_on_the_path_costs_no_retransmission() {
    let mut p = late_every_40th(
        "reliable:flow=packet-pair,pcr=40Mbps",
        Some(Duration::from_millis(20)),
        Duration::from_millis(8),
    );
    p.tx.share_late_rtt(Duration::from_millis(10));
    let m = msgs(&[64 * 1024; 64]);
    p.transfer(&m, Duration::from_secs(60));
    assert_eq!(p.messages(), m, "messages lost");
    let s = p.tx.stats();
    assert!(s.acks_received > 400, "{} ACKs", s.acks_received);
    assert_eq!(
        (s.retx_head, s.retx_timeout, s.retx_fast),
        (0, 0, 0),
        "{s:?}"
    );
    assert_eq!(p.tx.late_rtt(), Duration::ZERO, "nothing learnt of its own");
}

/// RFC 5682 (F-RTO): ACKs 50 ms late against a 20 ms RTO floor time out once, and
/// the timeout resends the head of the window alone; the late ACKs, caused by the
/// originals, then show the rest on its way. Resending every TPDU that had a whole
/// RTO instead resent five here, every one needless.
#[test]
fn a_timeout_from_late_acks_resends_the_head_alone() {
    let s = four_mb(late_every_40th(
        "reliable:flow=packet-pair,pcr=40Mbps",
        Some(Duration::from_millis(20)),
        Duration::from_millis(50),
    ));
    assert_eq!((s.timeouts, s.retx_timeout), (1, 1), "{s:?}");
    assert_eq!(s.retx_timeout_spurious, 1, "{s:?}");
}

/// RFC 8985 for what the head check leaves behind: the last 20 of 100 TPDUs lost on
/// their first transmission (a burst at the end: no later TPDU's ACK reveals them).
/// The ACK a head retransmission causes shows the rest, sent before it, lost too, and
/// they are resent at once: the last retransmission leaves 26 ms after the start (the
/// originals took 12), after two head checks. One head check at a time it took 20 of
/// them and 130 ms; with the window update's empty echo taken as a 1 s RTT sample
/// (fixed with this test), 1.2 s.
#[test]
fn a_lost_tail_is_resent_whole_on_the_head_retransmissions_ack() {
    let cfg = small(TransportConfig::reliable());
    let mut p = Pair::new(cfg.clone(), cfg);
    p.delay = Duration::from_millis(1);
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    let mut first_seq = None;
    p.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let k = t
            .header
            .seq
            .wrapping_sub(*first_seq.get_or_insert(t.header.seq));
        let n = seen.entry(k).or_default();
        *n += 1;
        u8::from(!(k >= 80 && *n == 1))
    });
    let t0 = p.now;
    let m: Vec<Vec<u8>> = (0..100).map(|i| vec![i as u8; 1000]).collect();
    p.transfer(&m, Duration::from_secs(20));
    assert_eq!(p.messages(), m);
    let s = p.tx.stats();
    assert_eq!(s.retransmissions(), 20, "each lost TPDU resent once: {s:?}");
    assert!(s.retx_head <= 2 && s.timeouts == 0, "{s:?}");
    let last = p.sent.last().expect("sent").0;
    assert!(
        last - t0 < Duration::from_millis(50),
        "the tail's last retransmission {:?} after the start",
        last - t0
    );
}
