//! SSCOP state machine tests: connection control, assured data under loss, timers.

use super::*;
use crate::sig::testing::{Dir, Net};
use crate::wire::sscop::PduType;

fn t(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn drain(s: &mut Sscop) -> Vec<Pdu> {
    std::iter::from_fn(|| s.poll_transmit())
        .map(|b| Pdu::parse(&b).expect("emitted PDUs parse"))
        .collect()
}

fn events(s: &mut Sscop) -> Vec<SscopEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn data(evs: &[SscopEvent]) -> Vec<Bytes> {
    evs.iter()
        .filter_map(|e| match e {
            SscopEvent::Data(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// Two established ends, after the BGN/BGAK exchange.
fn established() -> (Sscop, Sscop) {
    let mut a = Sscop::new(SscopConfig::default());
    let mut b = Sscop::new(SscopConfig::default());
    a.establish(t(0));
    let bgn = a.poll_transmit().unwrap();
    assert_eq!(&bgn[..], &[0, 0, 0, 1, 0x01, 0, 0, 128]);
    b.handle_pdu(t(1), &bgn);
    let bgak = b.poll_transmit().unwrap();
    assert_eq!(&bgak[..], &[0, 0, 0, 0, 0x02, 0, 0, 128]);
    a.handle_pdu(t(2), &bgak);
    assert_eq!(events(&mut a), [SscopEvent::Established]);
    assert_eq!(events(&mut b), [SscopEvent::Established]);
    assert!(a.is_established() && b.is_established());
    (a, b)
}

#[test]
fn bgn_bgak_establishes_both_ends() {
    let (a, b) = established();
    assert_eq!(a.stats().establishments, 1);
    assert_eq!(b.stats().establishments, 1);
}

#[test]
fn send_before_established_is_refused() {
    let mut a = Sscop::new(SscopConfig::default());
    assert_eq!(
        a.send(t(0), Bytes::from_static(b"x")),
        Err(SscopError::NotEstablished)
    );
    let (mut a, _) = established();
    let big = Bytes::from(vec![0; MAX_SD_INFO + 1]);
    assert_eq!(
        a.send(t(3), big),
        Err(SscopError::TooLong {
            len: MAX_SD_INFO + 1
        })
    );
}

#[test]
fn bgn_is_retried_max_cc_times_then_released() {
    let mut a = Sscop::new(SscopConfig::default());
    a.establish(t(0));
    let mut bgns = drain(&mut a).len();
    let mut now = t(0);
    while let Some(d) = a.poll_timeout() {
        now = d;
        a.handle_timeout(now);
        let pdus = drain(&mut a);
        bgns += pdus.iter().filter(|p| p.pdu_type() == PduType::Bgn).count();
        if pdus.iter().any(|p| {
            matches!(
                p,
                Pdu::End {
                    source_sscop: true,
                    ..
                }
            )
        }) {
            break;
        }
    }
    assert_eq!(bgns, 4, "MaxCC = 4 BGNs");
    assert_eq!(now, t(4000), "Timer_CC = 1 s, four times");
    assert_eq!(
        events(&mut a),
        [SscopEvent::Released {
            by_peer: false,
            reason: ReleaseReason::NoAnswer
        }]
    );
    assert!(a.is_idle());
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn bgn_collision_establishes() {
    let mut a = Sscop::new(SscopConfig::default());
    let mut b = Sscop::new(SscopConfig::default());
    a.establish(t(0));
    b.establish(t(0));
    let bgn_a = a.poll_transmit().unwrap();
    let bgn_b = b.poll_transmit().unwrap();
    a.handle_pdu(t(1), &bgn_b);
    b.handle_pdu(t(1), &bgn_a);
    assert!(a.is_established() && b.is_established());
    // The BGAKs that cross are late duplicates.
    let ak_a = a.poll_transmit().unwrap();
    let ak_b = b.poll_transmit().unwrap();
    a.handle_pdu(t(2), &ak_b);
    b.handle_pdu(t(2), &ak_a);
    assert!(a.is_established() && b.is_established());
    assert_eq!(events(&mut a), [SscopEvent::Established]);
}

#[test]
fn lost_bgak_is_answered_again_without_reset() {
    let (_a, mut b) = established();
    // The BGAK was lost and a repeats its BGN (same N(SQ)): b answers BGAK again and
    // keeps its state.
    b.send(t(3), Bytes::from_static(b"kept")).unwrap();
    let _ = drain(&mut b);
    let bgn = Pdu::Bgn {
        nsq: 1,
        nmr: SeqNum::new(128).unwrap(),
        uu: vec![],
    };
    b.handle_pdu(t(4), &bgn.to_bytes());
    assert!(matches!(drain(&mut b)[..], [Pdu::Bgak { .. }]));
    assert_eq!(b.buffered(), 1, "state kept");
    assert!(events(&mut b).is_empty());
    // A BGN with a new N(SQ) is a restart: the old connection is released.
    let bgn2 = Pdu::Bgn {
        nsq: 2,
        nmr: SeqNum::new(128).unwrap(),
        uu: vec![],
    };
    b.handle_pdu(t(5), &bgn2.to_bytes());
    assert_eq!(
        events(&mut b),
        [
            SscopEvent::Released {
                by_peer: true,
                reason: ReleaseReason::PeerRestarted
            },
            SscopEvent::Established
        ]
    );
    assert_eq!(b.buffered(), 0);
}

#[test]
fn sd_in_order_and_stat_acknowledges() {
    let (mut a, mut b) = established();
    for m in [&b"one"[..], b"two", b"three"] {
        a.send(t(10), Bytes::copy_from_slice(m)).unwrap();
    }
    let sds = drain(&mut a);
    assert_eq!(sds.len(), 3);
    for sd in &sds {
        b.handle_pdu(t(11), &sd.to_bytes());
    }
    assert_eq!(
        data(&events(&mut b)),
        [&b"one"[..], b"two", b"three"].map(Bytes::from_static)
    );
    assert!(drain(&mut b).is_empty(), "no gap, no USTAT");
    // Timer_POLL → POLL → STAT acknowledges everything.
    assert_eq!(a.poll_timeout(), Some(t(10) + Duration::from_millis(750)));
    a.handle_timeout(t(760));
    let poll = drain(&mut a);
    assert_eq!(
        poll,
        [Pdu::Poll {
            nps: SeqNum::new(1).unwrap(),
            ns: SeqNum::new(3).unwrap()
        }]
    );
    b.handle_pdu(t(761), &poll[0].to_bytes());
    let stat = drain(&mut b);
    assert_eq!(
        stat,
        [Pdu::Stat {
            nps: SeqNum::new(1).unwrap(),
            nmr: SeqNum::new(131).unwrap(),
            nr: SeqNum::new(3).unwrap(),
            list: vec![]
        }]
    );
    a.handle_pdu(t(762), &stat[0].to_bytes());
    assert_eq!(a.buffered(), 0);
}

#[test]
fn gaps_give_ustat_then_stat_list_and_retransmission() {
    let (mut a, mut b) = established();
    for i in 0..5u8 {
        a.send(t(10), Bytes::from(vec![i])).unwrap();
    }
    let sds = drain(&mut a);
    // Deliver 0, 2, 4 only.
    b.handle_pdu(t(11), &sds[0].to_bytes());
    b.handle_pdu(t(11), &sds[2].to_bytes());
    let ustat = drain(&mut b);
    let s = |v| SeqNum::new(v).unwrap();
    assert_eq!(
        ustat,
        [Pdu::Ustat {
            nmr: s(129),
            nr: s(1),
            list: [s(1), s(2)]
        }]
    );
    b.handle_pdu(t(11), &sds[4].to_bytes());
    let ustat2 = drain(&mut b);
    assert_eq!(ustat2.len(), 1, "a second new gap: one more USTAT");
    b.handle_pdu(t(11), &sds[4].to_bytes());
    assert!(drain(&mut b).is_empty(), "a duplicate reports nothing");
    assert_eq!(b.stats().sd_dropped, 1);
    assert_eq!(data(&events(&mut b)), [Bytes::from(vec![0])]);
    // The POLL's STAT lists both gaps: [1,2) and [3,4).
    let poll = Pdu::Poll {
        nps: s(1),
        ns: s(5),
    };
    b.handle_pdu(t(12), &poll.to_bytes());
    let stat = drain(&mut b);
    assert_eq!(
        stat,
        [Pdu::Stat {
            nps: s(1),
            nmr: s(129),
            nr: s(1),
            list: vec![s(1), s(2), s(3), s(4)]
        }]
    );
    // a retransmits exactly the two missing SDs (they were sent before POLL 1, which
    // a has not sent yet in its own numbering: VT(PS) moves on its POLL).
    a.handle_timeout(t(760));
    let _poll = drain(&mut a);
    a.handle_pdu(t(770), &stat[0].to_bytes());
    let rtx = drain(&mut a);
    assert_eq!(
        rtx,
        [
            Pdu::Sd {
                ns: s(1),
                info: vec![1]
            },
            Pdu::Sd {
                ns: s(3),
                info: vec![3]
            }
        ]
    );
    for p in &rtx {
        b.handle_pdu(t(775), &p.to_bytes());
    }
    assert_eq!(
        data(&events(&mut b)),
        (1..5u8).map(|i| Bytes::from(vec![i])).collect::<Vec<_>>()
    );
    // The same STAT again retransmits nothing already resent after its POLL? It was
    // answering POLL 1 and the SDs were resent after POLL 1: nothing.
    a.handle_pdu(t(780), &stat[0].to_bytes());
    assert!(drain(&mut a).is_empty());
}

#[test]
fn window_limits_sds_in_flight() {
    let cfg = SscopConfig {
        window: 4,
        ..SscopConfig::default()
    };
    let mut a = Sscop::new(SscopConfig::default());
    let mut b = Sscop::new(cfg);
    a.establish(t(0));
    b.handle_pdu(t(0), &a.poll_transmit().unwrap());
    a.handle_pdu(t(0), &b.poll_transmit().unwrap());
    for i in 0..10u8 {
        a.send(t(1), Bytes::from(vec![i])).unwrap();
    }
    assert_eq!(drain(&mut a).len(), 4, "VT(MS) = 4");
    assert_eq!(a.buffered(), 10);
}

#[test]
fn buffer_full_is_an_error() {
    let (mut a, _b) = established();
    let limit = a.config().max_buffered;
    for _ in 0..limit {
        a.send(t(3), Bytes::from_static(b"m")).unwrap();
    }
    assert_eq!(
        a.send(t(3), Bytes::from_static(b"m")),
        Err(SscopError::BufferFull { limit })
    );
}

#[test]
fn release_end_endak() {
    let (mut a, mut b) = established();
    a.release(t(5), b"bye");
    let end = drain(&mut a);
    assert_eq!(
        end,
        [Pdu::End {
            source_sscop: false,
            uu: b"bye".to_vec()
        }]
    );
    assert!(!a.is_established());
    b.handle_pdu(t(6), &end[0].to_bytes());
    assert_eq!(
        events(&mut b),
        [SscopEvent::Released {
            by_peer: true,
            reason: ReleaseReason::User(b"bye".to_vec())
        }]
    );
    let endak = drain(&mut b);
    assert_eq!(endak, [Pdu::Endak]);
    a.handle_pdu(t(7), &endak[0].to_bytes());
    assert_eq!(
        events(&mut a),
        [SscopEvent::Released {
            by_peer: false,
            reason: ReleaseReason::User(b"bye".to_vec())
        }]
    );
    assert!(a.is_idle() && b.is_idle());
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn resync_rs_rsak() {
    let (mut a, mut b) = established();
    a.send(t(3), Bytes::from_static(b"lost")).unwrap();
    let _ = drain(&mut a);
    a.resync(t(4));
    let rs = drain(&mut a);
    assert!(matches!(rs[..], [Pdu::Rs { nsq: 2, .. }]));
    b.handle_pdu(t(5), &rs[0].to_bytes());
    assert_eq!(events(&mut b), [SscopEvent::Resynchronised]);
    let rsak = drain(&mut b);
    assert!(matches!(rsak[..], [Pdu::Rsak { .. }]));
    a.handle_pdu(t(6), &rsak[0].to_bytes());
    assert_eq!(events(&mut a), [SscopEvent::Resynchronised]);
    assert_eq!(a.buffered(), 0);
    // Numbering starts again at 0 on both sides.
    a.send(t(7), Bytes::from_static(b"new")).unwrap();
    let sd = drain(&mut a);
    assert!(matches!(&sd[..], [Pdu::Sd { ns, .. }] if ns.value() == 0));
    b.handle_pdu(t(8), &sd[0].to_bytes());
    assert_eq!(data(&events(&mut b)), [Bytes::from_static(b"new")]);
}

#[test]
fn silent_peer_is_a_link_failure() {
    let (mut a, _b) = established();
    a.send(t(10), Bytes::from_static(b"x")).unwrap();
    let _ = drain(&mut a);
    let mut now = t(10);
    let mut polls = 0;
    while !a.is_idle() {
        now = a.poll_timeout().expect("a timer runs while established");
        a.handle_timeout(now);
        polls += drain(&mut a)
            .iter()
            .filter(|p| p.pdu_type() == PduType::Poll)
            .count();
    }
    assert_eq!(now, t(10) + Duration::from_secs(7), "Timer_NO_RESPONSE");
    assert_eq!(polls, 9, "a POLL every 750 ms until then");
    assert_eq!(events(&mut a), [SscopEvent::LinkFailure]);
    assert_eq!(a.stats().link_failures, 1);
}

#[test]
fn idle_link_polls_on_timer_idle_and_stays_up() {
    let mut net = Net::new(
        Sscop::new(SscopConfig::default()),
        Sscop::new(SscopConfig::default()),
        1,
    );
    net.a.establish(net.now);
    net.run_for(Duration::from_secs(120));
    assert!(net.a.is_established() && net.b.is_established());
    // Idle: one POLL per Timer_IDLE (15 s) plus the keepalive, not one per 750 ms.
    let polls = net.a.stats().polls;
    assert!((6..=16).contains(&polls), "{polls} polls in 120 s");
}

#[test]
fn garbage_is_counted_and_dropped() {
    let (mut a, _b) = established();
    for g in [
        &[][..],
        &[1, 2, 3],
        &[0, 0, 0, 0],
        &[0xFF; 7],
        &[0, 0, 0, 0, 0x04, 0, 0],
    ] {
        a.handle_pdu(t(3), g);
    }
    assert_eq!(a.stats().bad_pdus, 5);
    assert!(a.is_established());
}

#[test]
fn idle_end_answers_data_pdus() {
    let mut a = Sscop::new(SscopConfig::default());
    let sd = Pdu::Sd {
        ns: SeqNum::default(),
        info: vec![1],
    };
    a.handle_pdu(t(0), &sd.to_bytes());
    assert_eq!(
        drain(&mut a),
        [Pdu::End {
            source_sscop: true,
            uu: vec![]
        }]
    );
    a.handle_pdu(
        t(0),
        &Pdu::End {
            source_sscop: false,
            uu: vec![],
        }
        .to_bytes(),
    );
    assert_eq!(drain(&mut a), [Pdu::Endak]);
    assert!(events(&mut a).is_empty());
}

#[test]
fn sequence_numbers_wrap_at_2_pow_24() {
    let (mut a, mut b) = established();
    let start = SeqNum::MAX.value() - 2;
    a.jump_seq(start);
    b.jump_seq(start);
    for i in 0..6u8 {
        a.send(t(3), Bytes::from(vec![i])).unwrap();
    }
    let sds = drain(&mut a);
    let ns: Vec<u32> = sds
        .iter()
        .map(|p| match p {
            Pdu::Sd { ns, .. } => ns.value(),
            _ => panic!("SD expected"),
        })
        .collect();
    assert_eq!(ns, [start, start + 1, start + 2, 0, 1, 2]);
    // Lose the one before the wrap and the first after it.
    for (i, sd) in sds.iter().enumerate() {
        if i != 2 && i != 3 {
            b.handle_pdu(t(4), &sd.to_bytes());
        }
    }
    a.handle_timeout(t(760));
    let poll = drain(&mut a);
    b.handle_pdu(t(761), &poll[0].to_bytes());
    let answers = drain(&mut b);
    let stat = answers.last().unwrap();
    assert!(
        matches!(stat, Pdu::Stat { list, .. } if list.iter().map(|s| s.value()).eq([start + 2, 1]))
    );
    a.handle_pdu(t(762), &stat.to_bytes());
    for p in drain(&mut a) {
        b.handle_pdu(t(763), &p.to_bytes());
    }
    assert_eq!(
        data(&events(&mut b)),
        (0..6u8).map(|i| Bytes::from(vec![i])).collect::<Vec<_>>()
    );
}

/// The loss simulation: every SD is delivered once, in order, at 0–30 % loss on both
/// directions (control PDUs included).
#[test]
fn assured_delivery_under_loss() {
    for (seed, loss) in [(1, 0.0), (2, 0.05), (3, 0.1), (4, 0.2), (5, 0.3)] {
        assured_delivery(seed, loss, Duration::ZERO);
    }
}

/// The same with frames overtaking each other (UDP underlays reorder): up to 20 ms of
/// jitter on a 5 ms wire.
#[test]
fn assured_delivery_under_loss_and_reordering() {
    for (seed, loss) in [(6, 0.0), (7, 0.1), (8, 0.3)] {
        assured_delivery(seed, loss, Duration::from_millis(20));
    }
}

fn assured_delivery(seed: u64, loss: f64, jitter: Duration) {
    {
        let mut net = Net::new(
            Sscop::new(SscopConfig::default()),
            Sscop::new(SscopConfig::default()),
            seed,
        );
        net.loss = loss;
        net.jitter = jitter;
        net.a.establish(net.now);
        assert!(
            net.run_until(Duration::from_secs(60), |n| n.a.is_established()
                && n.b.is_established()),
            "established at {loss}"
        );
        let _ = events(&mut net.a);
        let _ = events(&mut net.b);
        let total = 400u32;
        let mut sent = 0u32;
        let mut got: Vec<Bytes> = Vec::new();
        let deadline = net.now + Duration::from_secs(600);
        while (got.len() as u32) < total && net.now < deadline {
            while sent < total
                && net
                    .a
                    .send(net.now, Bytes::from(sent.to_be_bytes().to_vec()))
                    .is_ok()
            {
                sent += 1;
            }
            net.step(deadline);
            while let Some(e) = net.b.poll_event() {
                match e {
                    SscopEvent::Data(d) => got.push(d),
                    other => panic!("unexpected {other:?} at loss {loss}"),
                }
            }
        }
        let want: Vec<Bytes> = (0..total)
            .map(|i| Bytes::from(i.to_be_bytes().to_vec()))
            .collect();
        assert_eq!(got, want, "loss {loss}: in order, exactly once");
        assert!(net.a.is_established(), "no link failure at loss {loss}");
        if loss > 0.0 {
            assert!(net.a.stats().sd_retransmitted > 0);
        }
        let _ = Dir::AtoB;
    }
}

#[test]
fn bgrej_and_end_while_connecting_release() {
    let mut a = Sscop::new(SscopConfig::default());
    a.establish(t(0));
    let _ = drain(&mut a);
    a.handle_pdu(t(1), &Pdu::Bgrej { uu: b"no".to_vec() }.to_bytes());
    assert_eq!(
        events(&mut a),
        [SscopEvent::Released {
            by_peer: true,
            reason: ReleaseReason::Rejected(b"no".to_vec())
        }]
    );
    assert!(a.is_idle() && a.poll_timeout().is_none());
    a.establish(t(2));
    let bgn = drain(&mut a);
    assert!(matches!(bgn[..], [Pdu::Bgn { nsq: 2, .. }]), "a new N(SQ)");
    a.handle_pdu(
        t(3),
        &Pdu::End {
            source_sscop: true,
            uu: vec![],
        }
        .to_bytes(),
    );
    assert_eq!(drain(&mut a), [Pdu::Endak]);
    assert_eq!(
        events(&mut a),
        [SscopEvent::Released {
            by_peer: true,
            reason: ReleaseReason::PeerSscop
        }]
    );
}

#[test]
fn unanswered_end_gives_up_after_max_cc() {
    let (mut a, _b) = established();
    a.release(t(10), &[]);
    let mut ends = drain(&mut a).len();
    while let Some(d) = a.poll_timeout() {
        a.handle_timeout(d);
        ends += drain(&mut a).len();
    }
    assert_eq!(ends, 4);
    assert_eq!(
        events(&mut a),
        [SscopEvent::Released {
            by_peer: false,
            reason: ReleaseReason::User(vec![])
        }]
    );
    assert!(a.is_idle());
}

#[test]
fn stat_with_numbers_never_sent_is_dropped() {
    let (mut a, _b) = established();
    a.send(t(3), Bytes::from_static(b"x")).unwrap();
    let _ = drain(&mut a);
    let s = |v| SeqNum::new(v).unwrap();
    let bogus = Pdu::Stat {
        nps: s(1),
        nmr: s(200),
        nr: s(5),
        list: vec![],
    };
    a.handle_pdu(t(4), &bogus.to_bytes());
    assert_eq!(a.stats().unexpected_pdus, 1);
    assert_eq!(a.buffered(), 1, "nothing acknowledged");
    let bogus_list = Pdu::Ustat {
        nmr: s(200),
        nr: s(0),
        list: [s(0), s(9)],
    };
    a.handle_pdu(t(4), &bogus_list.to_bytes());
    assert!(
        drain(&mut a).is_empty(),
        "no retransmission of what was never sent"
    );
}

#[test]
fn max_pd_polls_keep_a_busy_window_open() {
    let (mut a, mut b) = established();
    for i in 0..100u32 {
        a.send(t(3), Bytes::from(i.to_be_bytes().to_vec())).unwrap();
    }
    let out = drain(&mut a);
    let polls = out.iter().filter(|p| p.pdu_type() == PduType::Poll).count();
    assert_eq!(polls, 4, "a POLL after every 25 SDs");
    assert!(matches!(out[25], Pdu::Poll { ns, .. } if ns.value() == 25));
    // No timer needs to run: 1000 messages cross in the time of one exchange loop.
    for p in out {
        b.handle_pdu(t(4), &p.to_bytes());
    }
    let mut sent = 100u32;
    let mut got = data(&events(&mut b)).len() as u32;
    for _ in 0..200 {
        for p in drain(&mut b) {
            a.handle_pdu(t(4), &p.to_bytes());
        }
        while sent < 1000
            && a.send(t(4), Bytes::from(sent.to_be_bytes().to_vec()))
                .is_ok()
        {
            sent += 1;
        }
        for p in drain(&mut a) {
            b.handle_pdu(t(4), &p.to_bytes());
        }
        got += data(&events(&mut b)).len() as u32;
    }
    assert_eq!(got, 1000, "far more than one window without Timer_POLL");
}

#[test]
fn an_rs_or_er_that_is_not_the_peers_next_resets_nothing() {
    // Issue 16: a blind forgery of RS or ER must not flush an established link. The
    // peer's next N(SQ) is 2 (its BGN had 1).
    let (mut a, mut b) = established();
    a.send(t(3), Bytes::from_static(b"kept")).unwrap();
    let sd = drain(&mut a);
    for forged in [
        Pdu::Rs {
            nsq: 77,
            nmr: SeqNum::new(128).unwrap(),
            uu: Vec::new(),
        },
        Pdu::Er {
            nsq: 78,
            nmr: SeqNum::new(128).unwrap(),
        },
    ] {
        b.handle_pdu(t(4), &forged.to_bytes());
    }
    assert!(events(&mut b).is_empty());
    assert_eq!(b.stats().unexpected_pdus, 2);
    // The SD sent before the forgeries is still taken in order.
    b.handle_pdu(t(5), &sd[0].to_bytes());
    assert_eq!(data(&events(&mut b)), [Bytes::from_static(b"kept")]);
    // The real next RS still resynchronises.
    a.resync(t(6));
    let rs = drain(&mut a);
    b.handle_pdu(t(7), &rs[0].to_bytes());
    assert_eq!(events(&mut b), [SscopEvent::Resynchronised]);
}

/// Network timers (Timer_CC 200 ms, Timer_NO_RESPONSE 400 ms) on a path whose round
/// trip is longer than both: both ends establish at once, the link comes up, stays up
/// with data flowing for a minute, and the measured round trip is the path's.
#[test]
fn network_timers_hold_a_link_whose_round_trip_outlasts_them() {
    for one_way_ms in [150u64, 300, 600] {
        let cfg = crate::sig::SaalConfig::network().sscop;
        let mut net = Net::new(Sscop::new(cfg.clone()), Sscop::new(cfg), 9);
        net.delay = Duration::from_millis(one_way_ms);
        net.a.establish(net.now);
        net.b.establish(net.now);
        assert!(
            net.run_until(Duration::from_secs(10), |n| n.a.is_established()
                && n.b.is_established()),
            "{one_way_ms} ms one way: established"
        );
        let _ = (events(&mut net.a), events(&mut net.b));
        let end = net.now + Duration::from_secs(60);
        let mut sent = 0u32;
        while net.now < end {
            if net
                .a
                .send(net.now, Bytes::from(sent.to_be_bytes().to_vec()))
                .is_ok()
            {
                sent += 1;
            }
            net.run_for(Duration::from_millis(50));
        }
        for e in events(&mut net.a).into_iter().chain(events(&mut net.b)) {
            assert!(
                matches!(e, SscopEvent::Data(_)),
                "{one_way_ms} ms one way: {e:?}"
            );
        }
        assert_eq!(net.a.stats().link_failures + net.b.stats().link_failures, 0);
        let rtt = net.a.round_trip().expect("measured").as_millis() as u64;
        assert!(
            rtt.abs_diff(2 * one_way_ms) <= 10,
            "{one_way_ms} ms one way: round trip {rtt} ms"
        );
        assert!(net.b.stats().sd_delivered >= u64::from(sent) - 100);
    }
}

/// With backoff (network links), the MaxCC BGNs to a silent peer go out at 0, 200,
/// 600 and 1,400 ms and the link gives up at 3 s; without, every Timer_CC.
#[test]
fn timer_cc_backs_off_on_network_links() {
    let cfg = crate::sig::SaalConfig::network().sscop;
    let mut a = Sscop::new(cfg);
    a.establish(t(0));
    let mut bgns = vec![0u64];
    drain(&mut a);
    let mut now = t(0);
    while let Some(at) = a.poll_timeout() {
        now = at;
        a.handle_timeout(now);
        if drain(&mut a).iter().any(|p| matches!(p, Pdu::Bgn { .. })) {
            bgns.push(now.as_nanos() / 1_000_000);
        }
    }
    assert_eq!(bgns, [0, 200, 600, 1400]);
    assert_eq!(now, t(3000));
    assert!(a.is_idle());
}
