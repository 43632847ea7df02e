//! Simplex calls through two sigds (seed 000 §5.3): the caller's QoS says `rx:none`,
//! sigd signals the unused direction as such, and the callee's connection only
//! receives (its QoS is the caller's reversed, `tx:none`). Data moves one way whole;
//! the unused direction refuses with a typed error.

use natm::ulib::{Error, Wait};
use std::time::Duration;

use crate::sigd_support::{pair, LINK};

fn simplex_call(qos: &str) {
    let (a, b) = pair(LINK, LINK);
    let hb = b.host();
    let l = hb.bind("sink", "any").unwrap();
    let t = std::thread::spawn(move || {
        let call = l.next_call(Wait::For(Duration::from_secs(10))).unwrap();
        let offered = call.qos;
        let c = call.accept().unwrap();
        let refused = matches!(c.send(&b"no"[..], Wait::No), Err(Error::Simplex(_)));
        let mut got = Vec::new();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            got.extend_from_slice(&m);
        }
        (offered, refused, got)
    });
    let ha = a.host();
    let c = ha.connect("+4420002:sink", qos).unwrap();
    assert!(
        matches!(c.recv(Wait::No), Err(Error::Simplex(_))),
        "{qos}: the sender received"
    );
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 253) as u8).collect();
    for m in data.chunks(6_000) {
        c.send(m, Wait::Block).unwrap();
    }
    c.close();
    c.flush(Wait::For(Duration::from_secs(20))).unwrap();
    drop(c);
    let (offered, refused, got) = t.join().unwrap();
    assert!(
        !offered.tx().is_used() && offered.rx().is_used(),
        "{qos}: the callee was offered {offered}"
    );
    assert!(refused, "{qos}: the receive-only callee sent");
    assert_eq!(got, data, "{qos}");
    a.wait_no_calls();
    b.wait_no_calls();
}

#[test]
fn a_reliable_simplex_call_moves_data_one_way_through_sigd() {
    simplex_call("reliable:rx:none");
}

#[test]
fn a_guaranteed_simplex_call_moves_data_one_way_through_sigd() {
    simplex_call("cbr:pcr=40Mbps,ec=on,rx:none");
}
