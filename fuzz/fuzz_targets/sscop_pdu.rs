//! Fuzzes the SSCOP PDU parser, and the Q.2931 parser on SD payloads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::q2931::Message;
use natm_proto::wire::sscop::Pdu;

fuzz_target!(|data: &[u8]| {
    if let Ok(pdu) = Pdu::parse(data) {
        let wire = pdu.to_bytes();
        assert_eq!(wire.len(), data.len(), "same length");
        assert_eq!(Pdu::parse(&wire).as_ref(), Ok(&pdu), "parse/emit/parse identity");
        if let Pdu::Sd { info, .. } = &pdu {
            if let Ok(msg) = Message::parse(info) {
                let again = msg.to_bytes().expect("a parsed message emits");
                assert_eq!(Message::parse(&again).as_ref(), Ok(&msg));
            }
        }
    }
});
