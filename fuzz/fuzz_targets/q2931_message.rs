//! Fuzzes the Q.2931 message parser (strict and lenient).
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::q2931::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Message::parse(data) {
        // Spare bits are not kept, so compare typed values, not octets.
        let wire = msg.to_bytes().expect("a parsed message emits");
        assert_eq!(wire.len(), data.len(), "same length");
        assert_eq!(Message::parse(&wire).as_ref(), Ok(&msg), "parse/emit/parse identity");
    }
    if let Ok((msg, errors)) = Message::parse_lenient(data) {
        for e in &errors {
            let _ = e.to_string();
        }
        let wire = msg.to_bytes().expect("a leniently parsed message emits");
        assert_eq!(Message::parse(&wire).as_ref(), Ok(&msg), "lenient result is valid");
    }
});
