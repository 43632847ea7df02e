//! Fuzzes a switch port's end of ILMI (issue 33, `natm_proto::ilmi`): any SDU on VCI
//! 16 is a typed error or a message; nothing panics; each message gets at most one
//! answer (and the prefix offer), every answer is an ILMI message within the size
//! limit, and nothing outside the port's prefix is ever registered.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::ilmi::network::{Event, NetworkSide, PortIdentity, MAX_ADDRESSES};
use natm_proto::ilmi::{decode, MAX_MESSAGE};
use natm_proto::time::Instant;

const PREFIX: [u8; 13] = [0x47, 0, 5, 0x80, 0xff, 0xe1, 0, 0, 0, 0xf2, 0x1a, 0x26, 0xd8];

fuzz_target!(|data: &[u8]| {
    let mut p = NetworkSide::new(
        Instant::ZERO,
        PortIdentity {
            port: 1,
            name: "fuzz".into(),
            system_id: [0; 6],
            description: "natm".into(),
        },
        PREFIX,
    );
    // The input as several SDUs, split at 0xfe octets, so sequences are tried too.
    for sdu in data.split(|&b| b == 0xfe) {
        let decoded = decode(sdu);
        let r = p.handle_message(Instant::ZERO, sdu, |_| true);
        assert_eq!(r.is_ok(), decoded.is_ok());
        let mut sent = 0;
        while let Some(m) = p.poll_transmit() {
            assert!(m.len() <= MAX_MESSAGE);
            assert!(decode(&m).is_ok(), "the switch sends ILMI");
            sent += 1;
        }
        assert!(sent <= 2, "{sent} messages for one");
        while let Some(e) = p.poll_event() {
            if let Event::Registered(a) = e {
                assert_eq!(a[..13], PREFIX, "registered outside the prefix");
            }
        }
        assert!(p.registered().count() <= MAX_ADDRESSES);
    }
});
