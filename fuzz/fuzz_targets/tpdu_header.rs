//! Fuzzes the TPDU header and handshake-parameter parsers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::tpdu::{ConnParams, Header, HEADER_LEN, MAX_TPDU_LEN};

fuzz_target!(|data: &[u8]| {
    match Header::parse_bytes(data) {
        Ok((h, payload)) => {
            assert!(data.len() >= HEADER_LEN && data.len() <= MAX_TPDU_LEN);
            assert_eq!(payload.len(), data.len() - HEADER_LEN);
            assert_eq!(&h.to_bytes()[..], &data[..HEADER_LEN], "parse/emit identity");
        }
        Err(_) => {}
    }
    if let Ok(p) = ConnParams::parse(data) {
        assert_eq!(&p.to_bytes()[..], data, "parse/emit identity");
        assert!(p.window >= 1);
    }
});
