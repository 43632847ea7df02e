//! One ACK per receive batch in order, one per TPDU out of order (`recv::merges`).

use std::cell::RefCell;
use std::rc::Rc;

use super::*;
use crate::flow::build;

/// The ACKs the receiver sent, as (S, C), seen on the way back.
fn watch_acks(p: &mut Pair, lose_first: &'static [u32]) -> Rc<RefCell<Vec<(u32, u32)>>> {
    let acks = Rc::new(RefCell::new(Vec::new()));
    let seen_acks = Rc::clone(&acks);
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    p.fate = Box::new(move |t, fwd| {
        if !fwd && t.header.ty == TpduType::Ack {
            seen_acks.borrow_mut().push((t.header.seq, t.header.ack));
        }
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        let n = seen.entry(t.header.seq).or_default();
        *n += 1;
        u8::from(!(*n == 1 && lose_first.contains(&t.header.seq)))
    });
    acks
}

#[test]
fn a_batch_in_order_is_acknowledged_once() {
    // Every window arrives at one instant and is handled before the receiver is
    // polled, as one receive batch is in the engine.
    let cfg = small(TransportConfig::reliable());
    let mut p = Pair::new(cfg.clone(), cfg);
    let acks = watch_acks(&mut p, &[]);
    let m = msgs(&[1024; 256]);
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    let rx = p.rx.stats();
    assert!(
        rx.acks_sent + rx.acks_merged >= rx.tpdus_received,
        "every TPDU acknowledged, by its own ACK or a later one: {rx:?}"
    );
    assert_eq!(
        acks.borrow().len() as u64,
        rx.acks_sent,
        "merged ACKs never leave"
    );
    assert!(
        rx.acks_sent * 8 <= rx.tpdus_received,
        "{} ACKs for {} TPDUs in windows of 32",
        rx.acks_sent,
        rx.tpdus_received
    );
    assert!(acks.borrow().iter().all(|&(s, c)| s.wrapping_add(1) == c));
    let tx = p.tx.stats();
    assert_eq!(tx.retransmissions(), 0, "{tx:?}");
    assert_eq!(tx.timeouts, 0);
}

#[test]
fn every_tpdu_above_a_hole_keeps_its_own_ack() {
    let cfg = small(TransportConfig::reliable());
    let mut p = Pair::new(cfg.clone(), cfg);
    let acks = watch_acks(&mut p, &[3, 40]);
    let m = msgs(&[1024; 128]);
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    let acks = acks.borrow();
    let isn = acks
        .first()
        .map_or(0, |&(s, c)| c.wrapping_sub(s).wrapping_sub(1));
    // The first window, 0..32 less 3: 0, 1 and 2 as one ACK, then one per TPDU above
    // the hole, each with C still at 3; then the retransmitted 3 moves C past them.
    let first: Vec<_> = acks.iter().take(29).copied().collect();
    assert_eq!(first[0], (isn + 2, isn + 3));
    for (k, &(s, c)) in first[1..].iter().enumerate() {
        assert_eq!((s, c), (isn + 4 + k as u32, isn + 3), "{first:?}");
    }
    assert_eq!(acks[29], (isn + 3, isn + 32));
    let tx = p.tx.stats();
    assert_eq!(tx.retx_fast, 2, "both holes found by the ACKs above them");
    assert_eq!(tx.retx_head + tx.retx_timeout, 0, "{tx:?}");
}

#[test]
fn packet_pair_vcs_keep_an_ack_per_tpdu() {
    // The sender times pairs and trains by each member's ACK (seed 000 §5.3.3).
    let mut cfg = small(TransportConfig::reliable());
    cfg.flow = FlowKind::PacketPair;
    let mut p = Pair::with_flow(cfg.clone(), cfg.clone(), build(cfg.flow, &cfg));
    let m = msgs(&[1024; 64]);
    p.transfer(&m, Duration::from_secs(10));
    assert_eq!(p.messages(), m);
    let rx = p.rx.stats();
    assert_eq!(rx.acks_merged, 0);
    assert_eq!(rx.acks_sent, rx.tpdus_received);
}

#[test]
fn only_plain_acks_of_one_vc_merge() {
    let ack = |seq: u32, ack: u32| Header {
        seq,
        ack,
        cookie: 7,
        ..Header::new(TpduType::Ack)
    };
    assert!(recv::merges(&ack(4, 5), &ack(5, 6)));
    assert!(
        recv::merges(&ack(u32::MAX, 0), &ack(0, 1)),
        "across the wrap"
    );
    assert!(!recv::merges(&ack(4, 5), &ack(6, 5)), "S above C: a hole");
    assert!(
        !recv::merges(&ack(6, 5), &ack(7, 8)),
        "the queued one reports a hole"
    );
    let echo = Header {
        flags: crate::wire::tpdu::Flags::PAIR_ECHO,
        ..ack(5, 6)
    };
    assert!(!recv::merges(&ack(4, 5), &echo));
    let other = Header {
        cookie: 8,
        ..ack(5, 6)
    };
    assert!(!recv::merges(&ack(4, 5), &other));
    let update = Header::new(TpduType::SyncEcho);
    assert!(!recv::merges(&ack(4, 5), &update));
}
