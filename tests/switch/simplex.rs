//! A simplex call through a `natm switch` (seed 000 §5.3): the caller's QoS says
//! `rx:none`; the switch carries the forward VC at its contract and the backward VC
//! only the transport's ACKs, and a reliable transfer arrives whole.

use natm::ulib::{Error, Wait};
use std::time::Duration;

use crate::multipoint::switched;

#[test]
fn a_reliable_guaranteed_simplex_call_crosses_a_switch_whole() {
    let n = switched(1);
    let hb = n.leaves[0].host();
    let l = hb.bind("sink", "any").unwrap();
    let t = std::thread::spawn(move || {
        let c = l.accept(Wait::Block).unwrap();
        let refused = matches!(c.send(&b"no"[..], Wait::No), Err(Error::Simplex(_)));
        let mut got = Vec::new();
        while let Some(m) = c.recv(Wait::For(Duration::from_secs(10))).unwrap() {
            got.extend_from_slice(&m);
        }
        (refused, got)
    });
    let ha = n.root.host();
    let c = ha
        .connect("+4420002:sink", "cbr:pcr=40Mbps,ec=on,encrypt=off,rx:none")
        .unwrap();
    let data: Vec<u8> = (0..400_000u32).map(|i| (i % 241) as u8).collect();
    for m in data.chunks(4_000) {
        c.send(m, Wait::Block).unwrap();
    }
    c.close();
    c.flush(Wait::For(Duration::from_secs(20))).unwrap();
    let s = c.stats();
    drop(c);
    let (refused, got) = t.join().unwrap();
    assert!(refused, "the receive-only callee sent");
    assert_eq!(got, data);
    // Every TPDU was acknowledged over the unreserved backward VC.
    assert!(s.tx.acks_received > 0, "{:?}", s.tx);
    n.root.wait_no_calls();
}
