//! Fuzzes the OAM loopback payload parser: no panic, and what parses emits back to
//! the same fields and answers to a parseable reply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::oam::{answer, Loopback};

fuzz_target!(|data: &[u8]| {
    match Loopback::parse(data) {
        Ok(l) => {
            assert_eq!(Loopback::parse(&l.to_bytes()), Ok(l), "emit/parse identity");
            let p: &[u8; 48] = data.try_into().expect("parsed, so 48 octets");
            let a = Loopback::parse(&answer(p)).expect("an answer parses");
            assert_eq!((a.request, a.tag, a.location), (false, l.tag, l.location));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
