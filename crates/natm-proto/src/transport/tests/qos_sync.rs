//! seed 003's SYNC round-trip probes and in-band QoS changes, on the `Pair` harness
//! in virtual time.

use super::*;
use crate::flow::build;
use crate::wire::tpdu::Header;

fn best_effort() -> TransportConfig {
    small(TransportConfig::best_effort())
}

/// A guaranteed VC agreed at `max` with a floor of `min`, shaped by its leaky bucket.
fn guaranteed_pair(max: u64, min: u64) -> Pair {
    let mut cfg = small(TransportConfig::guaranteed(max));
    cfg.flow = FlowKind::LeakyBucket;
    cfg.min_rate = min;
    cfg.snd_buf = 256 * 1024;
    let flow = build(FlowKind::LeakyBucket, &cfg);
    Pair::with_flow(cfg.clone(), cfg, flow)
}

/// Keep the sender's buffer full for `d`; returns the payload bytes the receiver
/// got in that time.
fn saturate(p: &mut Pair, d: Duration) -> usize {
    let before: usize = p.delivered.iter().map(|c| c.data.len()).sum();
    let end = p.now + d;
    let block = vec![7u8; 1024];
    while p.now < end {
        while p.tx.send(&block, true).is_ok() {}
        if !p.advance(Some(Duration::from_millis(1))) {
            break;
        }
        p.pump();
    }
    p.delivered.iter().map(|c| c.data.len()).sum::<usize>() - before
}

fn frame(h: Header) -> Bytes {
    Bytes::from(h.to_bytes().to_vec())
}

#[test]
fn a_vc_without_acks_gets_its_rtt_from_sync() {
    let mut p = Pair::new(best_effort(), best_effort());
    p.delay = Duration::from_millis(2);
    p.drive(Duration::from_millis(50));
    assert!(p.tx.rtt().has_sample(), "no RTT sample from SYNC");
    let srtt = p.tx.rtt().srtt();
    assert!(
        srtt >= Duration::from_millis(4) && srtt < Duration::from_millis(6),
        "srtt {srtt:?} for a 4 ms round trip"
    );
    assert_eq!(p.tx.stats().sync_echoes, 1);
    assert_eq!(p.rx.stats().acks_sent, 0, "a best-effort VC sends no ACKs");
}

#[test]
fn sync_probes_once_per_interval() {
    let mut cfg = best_effort();
    cfg.sync_interval = Some(Duration::from_millis(100));
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_millis(1_050));
    // At the handshake, then every 100 ms: 11 in 1.05 s, each answered once.
    let s = p.tx.stats();
    assert!((10..=12).contains(&s.syncs_sent), "{} SYNCs", s.syncs_sent);
    // Every probe answered but the last, whose echo may still be on its way.
    assert!(
        s.sync_echoes + 1 >= s.syncs_sent,
        "{} echoes",
        s.sync_echoes
    );
}

#[test]
fn acknowledged_vcs_and_a_disabled_interval_send_no_sync() {
    let mut p = Pair::new(
        small(TransportConfig::reliable()),
        small(TransportConfig::reliable()),
    );
    p.drive(Duration::from_secs(3));
    assert_eq!(p.tx.stats().syncs_sent, 0);
    let mut cfg = best_effort();
    cfg.sync_interval = None;
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_secs(3));
    assert_eq!(p.tx.stats().syncs_sent, 0);
    assert!(!p.tx.rtt().has_sample());
}

#[test]
fn a_sync_interval_below_the_minimum_is_refused() {
    let mut cfg = best_effort();
    cfg.sync_interval = Some(Duration::from_millis(1));
    assert_eq!(
        cfg.validate(),
        Err(ConfigError::SyncInterval(Duration::from_millis(1)))
    );
}

#[test]
fn an_echo_of_no_outstanding_probe_is_no_sample() {
    let mut cfg = best_effort();
    cfg.sync_interval = Some(Duration::from_secs(10));
    let mut p = Pair::new(cfg.clone(), cfg);
    p.drive(Duration::from_millis(20));
    let samples = p.tx.stats().sync_echoes;
    let cookie = p.tx.cookie();
    // A forged echo (any number, an old timestamp) and a repeat of the real one.
    for seq in [1u32, 99] {
        let h = Header {
            cookie,
            seq,
            tsecr: 5,
            ..Header::new(TpduType::SyncEcho)
        };
        p.tx.handle_frame(p.now, frame(h));
    }
    assert_eq!(p.tx.stats().sync_echoes, samples);
    assert_eq!(p.tx.stats().sync_unmatched, 2);
}

#[test]
fn a_sync_flood_gets_one_echo_per_10_ms() {
    let mut p = Pair::new(best_effort(), best_effort());
    p.drive(Duration::from_millis(20));
    while p.rx.poll_transmit(p.now).is_some() {}
    let cookie = p.rx.cookie();
    for seq in 0..1000u32 {
        let h = Header {
            cookie,
            seq,
            ..Header::new(TpduType::Sync)
        };
        p.rx.handle_frame(p.now, frame(h));
    }
    let mut echoes = 0;
    while let Some(t) = p.rx.poll_transmit(p.now) {
        assert_eq!(t.header.ty, TpduType::SyncEcho);
        echoes += 1;
    }
    assert!(echoes <= 1, "{echoes} echoes for a flood at one instant");
    assert!(p.rx.stats().syncs_unanswered >= 999);
}

#[test]
fn sealed_types_round_trip_through_the_header_parser() {
    for ty in [
        TpduType::Sync,
        TpduType::SyncEcho,
        TpduType::Qos,
        TpduType::QosAck,
    ] {
        let h = Header {
            seq: 3,
            ack: 1,
            aux: 2,
            ..Header::new(ty)
        };
        let b = h.to_bytes();
        let (back, payload) = Header::parse_bytes(&b).unwrap();
        assert_eq!((back, payload.len()), (h, 0));
        let mut with_payload = b.to_vec();
        with_payload.push(0);
        assert!(
            Header::parse_bytes(&with_payload).is_err(),
            "{ty} took a payload"
        );
    }
}

#[test]
fn a_qos_change_is_pending_until_the_peer_accepts_it() {
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.delay = Duration::from_millis(5);
    p.drive(Duration::from_millis(20));
    p.events_tx.clear();
    let now = p.now;
    p.tx.set_qos(now, 2_000_000).unwrap();
    assert!(p.tx.status().qos_pending);
    assert_eq!(
        p.tx.set_qos(now, 3_000_000),
        Err(QosChangeError::Pending(2_000_000))
    );
    p.pump();
    // Sent, not yet answered: the shaper still runs at the old rate.
    assert_eq!(p.tx.flow().rate_bps(), Some(8e6));
    assert_eq!(p.tx.qos_rate(), 8_000_000);
    p.drive(Duration::from_millis(20));
    assert!(!p.tx.status().qos_pending);
    assert!(p.tx.status().qos_done);
    assert_eq!(p.tx.flow().rate_bps(), Some(2e6));
    assert_eq!(p.tx.qos_rate(), 2_000_000);
    assert!(p.events_tx.contains(&Event::QosChanged { rate: 2_000_000 }));
    // The receiver learnt the new rate.
    assert_eq!(p.rx.qos_rate(), 2_000_000);
    assert!(p.events_rx.contains(&Event::QosChanged { rate: 2_000_000 }));
    assert!(p.rx.status().qos_done);
}

#[test]
fn a_change_beyond_the_agreed_bounds_is_refused_and_the_rate_stays() {
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.drive(Duration::from_millis(20));
    let now = p.now;
    let e = p.tx.set_qos(now, 16_000_000).unwrap_err();
    assert_eq!(
        e,
        QosChangeError::OutOfBounds(QosBoundsError {
            requested: 16_000_000,
            min: 1_000_000,
            max: 8_000_000
        })
    );
    assert!(p.tx.set_qos(now, 500_000).is_err());
    assert!(!p.tx.status().qos_pending);
    assert_eq!(p.tx.flow().rate_bps(), Some(8e6));
    assert_eq!(p.rx.set_qos(now, 2_000_000), Err(QosChangeError::NotSender));
}

#[test]
fn the_receiver_refuses_a_rate_outside_what_it_agreed() {
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.drive(Duration::from_millis(20));
    while p.rx.poll_transmit(p.now).is_some() {}
    let rate: u64 = 64_000_000;
    let h = Header {
        cookie: p.rx.cookie(),
        seq: 7,
        ack: (rate >> 32) as u32,
        aux: rate as u32,
        ..Header::new(TpduType::Qos)
    };
    p.rx.handle_frame(p.now, frame(h));
    let t = p.rx.poll_transmit(p.now).expect("an answer");
    assert_eq!(
        (t.header.ty, t.header.seq, t.header.window),
        (TpduType::QosAck, 7, 0)
    );
    assert_eq!(p.rx.qos_rate(), 8_000_000);
    assert!(p.rx.status().qos_refused);
    // The sender had asked for nothing: the answer changes nothing there.
    p.tx.handle_frame(p.now, Bytes::from(t.to_vec()));
    assert_eq!(p.tx.flow().rate_bps(), Some(8e6));
}

#[test]
fn a_lost_qos_is_repeated_and_an_unanswered_one_is_refused() {
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.drive(Duration::from_millis(20));
    // The first QOS is lost: the repeat gets through.
    let mut lost = 0;
    p.fate = Box::new(move |t, fwd| {
        if fwd && t.header.ty == TpduType::Qos && lost == 0 {
            lost += 1;
            return 0;
        }
        1
    });
    let now = p.now;
    p.tx.set_qos(now, 4_000_000).unwrap();
    p.drive(Duration::from_secs(1));
    assert_eq!(p.tx.flow().rate_bps(), Some(4e6));
    assert_eq!(p.rx.qos_rate(), 4_000_000);
    // Every answer lost: the change gives up, refused, the rate stays.
    p.fate = Box::new(|t, fwd| u8::from(fwd || t.header.ty != TpduType::QosAck));
    p.events_tx.clear();
    let now = p.now;
    p.tx.set_qos(now, 2_000_000).unwrap();
    p.drive(Duration::from_secs(30));
    assert!(!p.tx.status().qos_pending);
    assert!(p.tx.status().qos_refused);
    assert!(p.events_tx.contains(&Event::QosRefused { rate: 2_000_000 }));
    assert_eq!(p.tx.flow().rate_bps(), Some(4e6));
    // The receiver, which accepted each repeat once, reported it once.
    let changes = p
        .events_rx
        .iter()
        .filter(|e| **e == Event::QosChanged { rate: 2_000_000 })
        .count();
    assert_eq!(changes, 1);
}

#[test]
fn the_receiver_measures_the_rate_follow_each_change() {
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.drive(Duration::from_millis(20));
    let at = |p: &mut Pair| saturate(p, Duration::from_millis(500)) as f64 * 8.0 / 0.5;
    let full = at(&mut p);
    let now = p.now;
    p.tx.set_qos(now, 2_000_000).unwrap();
    let _settle = saturate(&mut p, Duration::from_millis(100));
    let low = at(&mut p);
    let now = p.now;
    p.tx.set_qos(now, 6_000_000).unwrap();
    let _settle = saturate(&mut p, Duration::from_millis(100));
    let high = at(&mut p);
    assert!(low < full * 0.5, "{low} after lowering from {full}");
    assert!(high > low * 2.0, "{high} after raising from {low}");
}

#[test]
fn a_shaped_vcs_queue_keeps_its_bound_in_time_when_its_rate_changes() {
    // 256 KiB at 8 Mbit/s is 262 ms of queue; at 2 Mbit/s the same bytes would be
    // over a second, so the queue shrinks with the rate (and grows back with it).
    let mut p = guaranteed_pair(8_000_000, 1_000_000);
    p.delay = Duration::from_millis(5);
    p.drive(Duration::from_millis(20));
    let at = |p: &Pair| p.tx.send_capacity() + p.tx.send_buffered();
    assert_eq!(at(&p), 256 * 1024);
    let now = p.now;
    p.tx.set_qos(now, 2_000_000).unwrap();
    p.pump();
    assert_eq!(at(&p), 256 * 1024, "unchanged until the peer accepts");
    p.drive(Duration::from_millis(20));
    assert_eq!(p.tx.qos_rate(), 2_000_000);
    assert_eq!(at(&p), 64 * 1024);
    // A full queue at the lower rate holds what it held in time before.
    while p.tx.send(&[1u8; 1024], true).is_ok() {}
    let held = p.tx.send_buffered() as f64 * 8.0 / 2e6;
    assert!(held <= 0.27, "{held} s of queue at 2 Mbit/s");
    // The local form follows the same rule.
    p.tx.set_rate(4_000_000).unwrap();
    assert_eq!(at(&p), 128 * 1024);
}

/// Issue 34: a guaranteed VC's SYNC is not queued behind the data its leaky bucket
/// holds back: with a full send buffer (hundreds of milliseconds at the rate) the
/// probe still reads the path's round trip, not the shaper's queue.
#[test]
fn a_shaped_vcs_sync_rtt_is_the_paths_not_its_queue() {
    let mut cfg = small(TransportConfig::guaranteed(10_000_000));
    cfg.flow = FlowKind::LeakyBucket;
    cfg.snd_buf = 256 * 1024;
    cfg.sync_interval = Some(Duration::from_millis(100));
    let flow = build(FlowKind::LeakyBucket, &cfg);
    let mut p = Pair::with_flow(cfg.clone(), cfg, flow);
    p.delay = Duration::from_millis(2);
    let got = saturate(&mut p, Duration::from_secs(1));
    assert!(got > 1_000_000, "the VC moved {got} bytes");
    let queued = p.tx.send_buffered();
    assert!(queued > 100_000, "the bucket held {queued} bytes back");
    let s = p.tx.stats();
    assert!(s.sync_echoes >= 5, "{} echoes", s.sync_echoes);
    assert_eq!(p.rx.stats().acks_sent, 0, "no ACKs: the RTT is the SYNCs'");
    let srtt = p.tx.rtt().srtt();
    assert!(
        srtt >= Duration::from_millis(4) && srtt < Duration::from_millis(6),
        "srtt {srtt:?} for a 4 ms round trip behind {queued} queued bytes"
    );
}
