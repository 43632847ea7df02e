//! Fuzzes the resume ticket parser (a restarted sigd reads what an application gives
//! back in `Reclaim`): no input panics, and a ticket that parses writes out to text
//! that parses back to the same ticket.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::resume::ResumeTicket;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = ResumeTicket::parse(text) {
        let written = t.encode().expect("a ticket that parsed can be written");
        assert_eq!(ResumeTicket::parse(&written), Ok(t), "{text:?} wrote {written:?}");
    }
});
