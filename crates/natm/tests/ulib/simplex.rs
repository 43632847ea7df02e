//! Simplex connections (seed 000 §5.3: the transport's VCs are simplex; ulib makes
//! duplex from two): a QoS with `rx:none` opens a connection that only sends, one with
//! `tx:none` one that only receives. Data moves one way whole and in order (a
//! reliable simplex VC still gets its ACKs back on the backward VC), and the unused
//! direction refuses with a typed error instead of blocking forever.

use std::time::Duration;

use crate::support::assert_no_retransmissions;
use natm::ulib::{Error, Host, Wait};

fn host() -> Host {
    Host::open(crate::support::host_config()).unwrap()
}

/// Send 300 messages of 3,000 octets one way on `send_qos` to a listener bound
/// with `recv_qos`; the receiving side's result and the sender.
fn one_way(send_qos: &str, recv_qos: &str) {
    let (a, b) = (host(), host());
    let l = b.bind("127.0.0.1:0", recv_qos).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        // The receiving side cannot send.
        assert!(
            matches!(c.send(&b"back"[..], Wait::No), Err(Error::Simplex(_))),
            "a tx:none connection sent"
        );
        let mut got = Vec::new();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(20))).unwrap() {
            got.push(m);
        }
        (got, c)
    });
    let c = a.connect(addr, send_qos).unwrap();
    // The sending side cannot receive, and says so at once rather than waiting.
    match c.recv(Wait::Block) {
        Err(Error::Simplex(why)) => assert!(why.contains("rx:none"), "{why}"),
        other => panic!("{send_qos}: recv on an rx:none connection gave {other:?}"),
    }
    let msgs: Vec<Vec<u8>> = (0..300u32)
        .map(|i| (0..3_000u32).map(|j| (i * 31 + j) as u8).collect())
        .collect();
    for m in &msgs {
        c.send(&m[..], Wait::Block).unwrap();
    }
    c.close();
    c.flush(Wait::For(Duration::from_secs(20))).unwrap();
    let (got, receiver) = t.join().unwrap();
    assert_eq!(got, msgs, "{send_qos}");
    // The ACKs came back on the unused direction's VC.
    assert!(c.stats().tx.acks_received > 0, "{send_qos}");
    assert_no_retransmissions(send_qos, &c.stats(), &receiver.stats());
}

#[test]
fn a_reliable_simplex_vc_moves_data_one_way_whole_and_in_order() {
    one_way("reliable:rx:none", "reliable:tx:none");
}

#[test]
fn a_guaranteed_simplex_vc_moves_data_one_way_at_its_own_qos() {
    one_way(
        "cbr:pcr=50Mbps,ec=on,rx:none",
        "cbr:pcr=50Mbps,ec=on,tx:none",
    );
}

#[test]
fn a_duplex_connection_may_have_its_own_qos_each_way() {
    let (a, b) = (host(), host());
    let l = b
        .bind("127.0.0.1:0", "cbr:tx:pcr=2Mbps,rx:pcr=40Mbps")
        .unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        let m = c.recv(Wait::For(Duration::from_secs(10))).unwrap().unwrap();
        c.send(&m[..16], Wait::Block).unwrap();
        c.flush(Wait::For(Duration::from_secs(10))).unwrap();
        m.len()
    });
    let c = a.connect(addr, "cbr:tx:pcr=40Mbps,rx:pcr=2Mbps").unwrap();
    c.send(&[7u8; 20_000][..], Wait::Block).unwrap();
    let back = c.recv(Wait::For(Duration::from_secs(10))).unwrap().unwrap();
    assert_eq!(back, [7u8; 16]);
    assert_eq!(t.join().unwrap(), 20_000);
}
