//! Fuzzes a signalling link's Noise machine (`sig::noise`): one `NoiseLink` fed
//! arbitrary datagrams (handshake and transport frames, `sig::peer` parses them),
//! PDUs to seal and time steps; a second, real end makes valid handshakes for the
//! fuzzer to mutate around.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::noise::{NoiseLink, Received, Trust};
use natm_proto::sig::peer::Control;
use natm_proto::time::Instant;

fuzz_target!(|data: &[u8]| {
    let mut link = NoiseLink::new([1; 32], Trust::FirstUse, None);
    let mut peer = NoiseLink::new([2; 32], Trust::FirstUse, None);
    let mut now = 1u64;
    let mut index = 0u32;
    let mut rest = data;
    // Records: op (1) | len (1) | len octets.
    while let [op, len, tail @ ..] = rest {
        let k = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(k);
        rest = next;
        let t = Instant::from_nanos(now);
        index = index.wrapping_add(1);
        match op % 5 {
            0 | 1 => match link.receive(t, body, || index) {
                Ok(Received::Pdu(p)) => assert!(p.len() <= body.len()),
                Ok(Received::Send(v)) => {
                    for d in v {
                        assert!(Control::parse(&d).is_ok(), "what it sends parses");
                        let _ = peer.receive(t, &d, || index ^ 0x8000_0000);
                    }
                }
                Err(_) => {}
            },
            2 => {
                for d in link.seal(t, body, || index) {
                    assert!(Control::parse(&d).is_ok(), "what it sends parses");
                }
            }
            3 => {
                // The real peer's frames, delivered to the link under test.
                for d in peer.seal(t, body, || index ^ 0x4000_0000) {
                    if let Ok(Received::Send(v)) = link.receive(t, &d, || index) {
                        for d in v {
                            let _ = peer.receive(t, &d, || index ^ 0x2000_0000);
                        }
                    }
                }
            }
            _ => now += u64::from(*len) * 100_000_000,
        }
    }
});
