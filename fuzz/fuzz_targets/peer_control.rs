//! Fuzzes the peer-control frames (`sig::peer`): the parser and the cookie check
//! (the Noise layer has its own target, `noise_link`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::sig::peer::{check_cookie, Control};
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
});
