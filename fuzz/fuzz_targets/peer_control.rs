//! Fuzzes the peer-control frames (`sig::peer`): the parser, and one `PeerAuth`
//! fed arbitrary datagrams, PDUs to seal and time steps.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::peer::{check_cookie, Control, PeerAuth, Received, NONCE_LEN};
use natm_proto::time::Instant;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Control::parse(data) {
        let wire = c.to_bytes();
        assert_eq!(Control::parse(&wire), Ok(c), "parse/emit/parse identity");
        assert_eq!(wire.len(), data.len(), "same length");
        if let Control::Echo { cookie, .. } = c {
            // Checking any cookie is total (no panic on any time or MAC).
            let _ = check_cookie(&[0x5a; 32], b"127.0.0.1:9", cookie, Instant::ZERO);
        }
    }
    let mut auth = PeerAuth::new(b"fuzz key 16 oct.", b"127.0.0.1:9");
    let mut now = 1u64;
    let mut n = 0u8;
    let mut rest = data;
    // Records: op (1) | len (1) | len octets.
    while let [op, len, tail @ ..] = rest {
        let k = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(k);
        rest = next;
        let t = Instant::from_nanos(now);
        match op % 4 {
            0 | 1 => match auth.receive(t, &[7; 32], body) {
                Ok(Received::Pdu(p)) => assert!(p.len() <= body.len()),
                Ok(Received::Send(v)) => {
                    for d in v {
                        assert!(Control::parse(&d).is_ok(), "what it sends parses");
                    }
                }
                Err(_) => {}
            },
            2 => {
                n = n.wrapping_add(1);
                for d in auth.seal(t, body, || [n; NONCE_LEN]) {
                    assert!(Control::parse(&d).is_ok(), "what it sends parses");
                }
            }
            _ => now += u64::from(*len) * 100_000_000,
        }
    }
});
