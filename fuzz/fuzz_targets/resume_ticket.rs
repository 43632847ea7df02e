//! Fuzzes the resume ticket (a restarted sigd reads what an application gives back
//! in `Reclaim`): no input panics; a ticket that parses writes out to text that
//! parses back to the same ticket; sealed under a key it opens to the same ticket,
//! and any change to the sealed text, or another key, makes it fail to open.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::resume::{ResumeTicket, TicketError};

const KEY: [u8; 32] = [0x42; 32];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Arbitrary text never opens under a key it was not sealed with, and never panics.
    if let Ok(t) = ResumeTicket::open(text, &KEY) {
        // Only a MAC collision could get here.
        panic!("unsealed input opened: {t:?}");
    }
    if let Ok(t) = ResumeTicket::parse(text) {
        let written = t.encode().expect("a ticket that parsed can be written");
        assert_eq!(ResumeTicket::parse(&written), Ok(t.clone()), "{text:?} wrote {written:?}");
        let sealed = t.seal(&KEY).expect("a ticket that encodes can be sealed");
        assert_eq!(ResumeTicket::open(&sealed, &KEY), Ok(t.clone()));
        assert_eq!(ResumeTicket::open(&sealed, &[0x43; 32]), Err(TicketError::Forged));
        // Change one octet the input chooses: never the same ticket any more.
        if let Some(&b) = data.first() {
            let mut bytes = sealed.clone().into_bytes();
            let at = usize::from(b) % bytes.len();
            bytes[at] = if bytes[at] == b'~' { b'!' } else { b'~' };
            if let Ok(s) = String::from_utf8(bytes) {
                assert!(ResumeTicket::open(&s, &KEY).is_err(), "{s:?} opened");
            }
        }
    }
});
