//! Fuzzes the UDP adaptor's VC header parser, and the TPDU parser behind it as the
//! receiving adaptor chains them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::tpdu;
use natm_proto::wire::vcframe::{FrameKind, Packet, Repr, HEADER_LEN, MAX_FRAME_LEN};

fuzz_target!(|data: &[u8]| {
    match Repr::parse_bytes(data) {
        Ok((r, sdu)) => {
            assert!(data.len() >= HEADER_LEN && data.len() <= MAX_FRAME_LEN);
            assert_eq!(sdu, &data[HEADER_LEN..]);
            assert_eq!(
                &r.to_bytes()[..],
                &data[..HEADER_LEN],
                "parse/emit identity"
            );
            let p = Packet::new_checked(data).expect("parsed, so checked");
            assert_eq!(
                (p.vpi(), p.vci(), p.ci(), p.clp()),
                (r.vpi, r.vci, r.ci, r.clp)
            );
            if r.kind == FrameKind::Data {
                if let Ok((h, payload)) = tpdu::Header::parse_bytes(sdu) {
                    assert_eq!(&h.to_bytes()[..], &sdu[..tpdu::HEADER_LEN]);
                    assert_eq!(payload.len(), sdu.len() - tpdu::HEADER_LEN);
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
