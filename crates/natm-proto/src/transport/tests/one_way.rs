//! Point-to-multipoint VCs (`TransportConfig::one_way`, issue 19) on the `Pair`
//! harness in virtual time: nothing goes back from a leaf, the root's close needs no
//! answer, and a leaf added while the root sends joins the stream where it finds it.

use super::*;

fn one_way(cfg: TransportConfig) -> TransportConfig {
    TransportConfig {
        one_way: true,
        cookie: Some(0x4d50),
        isn: 1_000,
        ..small(cfg)
    }
}

#[test]
fn a_one_way_vc_sends_nothing_back_and_its_root_closes_without_an_answer() {
    let cfg = one_way(TransportConfig::guaranteed(8_000_000));
    let mut p = signalled_pair(cfg);
    // Nothing the leaf would send may reach the root: any frame back is a failure.
    p.fate = Box::new(|t, fwd| {
        assert!(fwd, "a leaf sent {:?}", t.header.ty);
        1
    });
    let m = msgs(&[100, 3000, 1024, 5000]);
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(p.messages(), m);
    assert!(p.tx.status().closed, "the root's close completes");
    assert!(p.rx.status().peer_closed, "the leaf sees the end");
    assert!(p.tx.is_finished());
    assert_eq!(p.tx.stats().syncs_sent, 0, "no SYNC: nothing can echo it");
    assert_eq!(
        p.tx.set_qos(p.now, 4_000_000),
        Err(QosChangeError::OneWay),
        "no leaf can answer a QOS"
    );
    // A leaf that closes before the end aborts only itself, silently.
    let mut q = signalled_pair(one_way(TransportConfig::best_effort()));
    q.fate = Box::new(|t, fwd| {
        assert!(fwd, "a leaf sent {:?}", t.header.ty);
        1
    });
    q.rx.close();
    q.drive(Duration::from_millis(100));
    assert!(q.rx.is_finished());
}

#[test]
fn a_leaf_added_mid_stream_joins_at_the_next_whole_message_and_counts_no_loss() {
    let cfg = one_way(TransportConfig::best_effort());
    let mut p = signalled_pair(cfg.clone());
    // The first 7 TPDUs went before the leaf was added: messages 0 (2 TPDUs), 1 (1)
    // and 2 (3 TPDUs), and the first TPDU of message 3 (3 TPDUs).
    let mut sent = 0;
    p.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        sent += 1;
        u8::from(sent > 7)
    });
    let m = msgs(&[2000, 1000, 3000, 3000, 1500, 10]);
    p.transfer(&m, Duration::from_secs(5));
    assert_eq!(
        p.messages(),
        m[4..].to_vec(),
        "whole messages from the first head"
    );
    let s = p.rx.stats();
    assert_eq!(
        s.drop_headless, 2,
        "message 3's tail, whose head went before"
    );
    assert_eq!(s.tpdus_lost, 0, "what went before the leaf is not its loss");
    assert_eq!(s.messages_lost, 0);
    assert!(p.rx.status().peer_closed);

    // A point-to-point VC counts the same start as loss.
    let mut q = signalled_pair(TransportConfig {
        one_way: false,
        ..cfg
    });
    let mut sent = 0;
    q.fate = Box::new(move |t, fwd| {
        if !fwd || t.header.ty != TpduType::Data {
            return 1;
        }
        sent += 1;
        u8::from(sent > 7)
    });
    q.transfer(&m, Duration::from_secs(5));
    assert_eq!(q.messages(), m[4..].to_vec());
    assert_eq!(q.rx.stats().tpdus_lost, 7);
    assert_eq!(q.rx.stats().messages_lost, 4);
}

#[test]
fn a_leaf_joins_a_stream_far_from_its_initial_sequence_number() {
    // Later than half the sequence space: an expansion around the ISN would take the
    // TPDU for an old one and drop it.
    let cfg = one_way(TransportConfig {
        semantics: Semantics::Stream,
        ..TransportConfig::best_effort()
    });
    let mut p = signalled_pair(cfg.clone());
    let h = Header {
        cookie: 0x4d50,
        seq: 1_000u32.wrapping_add(3 << 30),
        flags: crate::wire::tpdu::Flags::FIRST,
        ..Header::new(TpduType::Data)
    };
    let mut f = h.to_bytes().to_vec();
    f.extend_from_slice(b"late");
    p.rx.handle_frame(p.now, Bytes::from(f));
    p.pump();
    let got: Vec<u8> = p.delivered.iter().flat_map(|c| c.data.to_vec()).collect();
    assert_eq!(got, b"late");
    assert_eq!(p.rx.stats().drop_late, 0);
}

#[test]
fn acknowledged_service_cannot_be_one_way() {
    let cfg = TransportConfig {
        one_way: true,
        ..TransportConfig::reliable()
    };
    assert_eq!(
        cfg.validate(),
        Err(crate::transport::ConfigError::OneWayAcks)
    );
    assert!(one_way(TransportConfig::guaranteed(1_000_000))
        .validate()
        .is_ok());
}

#[test]
fn the_unused_direction_of_a_multipoint_call_is_shut_from_the_start() {
    let cfg = one_way(TransportConfig::best_effort());
    let mut p = signalled_pair(cfg);
    p.tx.shut();
    p.rx.shut();
    assert_eq!(p.tx.send(b"x", true), Err(SendError::Closed));
    assert!(p.tx.is_finished() && p.rx.is_finished());
    assert!(p.rx.status().peer_closed);
    p.tx.close();
    p.rx.close();
    assert!(p.tx.poll_transmit(p.now).is_none(), "nothing is sent");
    assert!(p.rx.poll_transmit(p.now).is_none(), "nothing is sent");
}
