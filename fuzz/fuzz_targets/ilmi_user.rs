//! Fuzzes a host's end of ILMI (issue 33, `natm_proto::ilmi::user`): any SDU from the
//! switch is a typed error or a message; nothing panics; each message gets at most one
//! answer and one request of the host's own, every message sent is ILMI within the
//! size limit, and the only address ever registered is the host's under some prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::ilmi::user::{UserEvent, UserSide};
use natm_proto::ilmi::{decode, MAX_MESSAGE};
use natm_proto::time::Instant;

const ESI: [u8; 6] = [2, 0x11, 0x22, 0x33, 0x44, 0x55];

fuzz_target!(|data: &[u8]| {
    let mut u = UserSide::new(Instant::ZERO, ESI, 7);
    u.link_up(Instant::ZERO);
    while u.poll_transmit().is_some() {}
    // The input as several SDUs, split at 0xfe octets, so sequences are tried too.
    for sdu in data.split(|&b| b == 0xfe) {
        let decoded = decode(sdu);
        let r = u.handle_message(Instant::ZERO, sdu);
        assert_eq!(r.is_ok(), decoded.is_ok());
        let mut sent = 0;
        while let Some(m) = u.poll_transmit() {
            assert!(m.len() <= MAX_MESSAGE);
            assert!(decode(&m).is_ok(), "the host sends ILMI");
            sent += 1;
        }
        assert!(sent <= 2, "{sent} messages for one");
        while let Some(e) = u.poll_event() {
            if let UserEvent::Registered(a) = e {
                assert_eq!(a[13..19], ESI, "registered another host's address");
                assert_eq!(a[19], 7);
            }
        }
    }
});
