//! Fuzzes the cell parsers and the I.432.1 receiver with arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::cell::{
    hec_syndrome, HeaderFormat, HeaderRepr, HecReceiver, HecVerdict, Packet, CELL_LEN, HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    // Whole cells: a checked packet's accessors must agree with the header parser.
    match Packet::new_checked(data) {
        Ok(packet) => {
            for format in [HeaderFormat::Uni, HeaderFormat::Nni] {
                match HeaderRepr::parse(&packet, format) {
                    Ok(repr) => {
                        assert!(packet.hec_ok());
                        assert_eq!(repr.vpi, packet.vpi(format));
                        assert_eq!(repr.vci, packet.vci());
                        assert_eq!(repr.pti, packet.pti());
                        assert_eq!(repr.clp, packet.clp());
                        assert_eq!(repr.to_bytes(), packet.header(), "parse/emit identity");
                    }
                    Err(_) => assert!(!packet.hec_ok()),
                }
            }
            assert_eq!(packet.payload().len(), 48);
        }
        Err(_) => assert_ne!(data.len(), CELL_LEN),
    }

    // A stream of headers through one receiver: whatever it accepts parses, whatever
    // it corrects differs from what arrived in exactly the bit it names.
    let mut rx = HecReceiver::new();
    for chunk in data.chunks_exact(HEADER_LEN) {
        let received: [u8; HEADER_LEN] = chunk.try_into().unwrap();
        let mut header = received;
        let verdict = rx.check(&mut header);
        match verdict {
            HecVerdict::Valid => assert_eq!(header, received),
            HecVerdict::Corrected { bit } => {
                assert!(bit < 40);
                let mut flipped = received;
                flipped[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
                assert_eq!(header, flipped);
                assert_eq!(hec_syndrome(&header), 0);
            }
            HecVerdict::Discarded => assert_eq!(header, received),
        }
        if verdict.accepted() {
            assert!(HeaderRepr::parse_header(&header, HeaderFormat::Uni).is_ok());
        }
    }
});
