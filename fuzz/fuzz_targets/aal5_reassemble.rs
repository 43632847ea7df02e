//! Fuzzes AAL5 reassembly and the one-buffer PDU parser with arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::aal5::{decode, Reassembler, Segmenter};
use natm_proto::wire::cell::{HeaderRepr, Pti, CELL_LEN};

fuzz_target!(|data: &[u8]| {
    // First two octets choose the maximum SDU, so that small limits get exercised.
    let (max, cells) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
        _ => return,
    };

    // The whole input as one PDU: anything accepted is within the limit and
    // re-segments to cells that reassemble to the same SDU.
    if let Ok((sdu, repr)) = decode(cells, max) {
        assert!(!sdu.is_empty() && sdu.len() <= max);
        assert_eq!(repr.sdu_len, sdu.len());
        check_round_trip(sdu, repr.uu);
    }

    // The input as a stream of cells on one VC.
    let mut rx = Reassembler::with_max_sdu(max);
    for chunk in cells.chunks_exact(CELL_LEN) {
        let cell: &[u8; CELL_LEN] = chunk.try_into().unwrap();
        let got = rx.push_cell(cell).map(|o| o.map(<[u8]>::to_vec));
        assert!(
            rx.capacity() <= rx.max_cells() * 48,
            "partial frame memory unbounded"
        );
        if let Ok(Some(sdu)) = got {
            assert!(!sdu.is_empty() && sdu.len() <= rx.max_sdu());
            check_round_trip(&sdu, rx.last_uu());
        }
    }
});

fn check_round_trip(sdu: &[u8], uu: u8) {
    let header = HeaderRepr::uni(0, 32, Pti::UserData);
    let mut rx = Reassembler::new();
    let mut out = None;
    for cell in Segmenter::with_uu(sdu, header, uu).unwrap() {
        assert!(out.is_none(), "SDU delivered before its last cell");
        out = rx.push_cell(&cell).unwrap().map(<[u8]>::to_vec);
    }
    assert_eq!(out.as_deref(), Some(sdu));
    assert_eq!(rx.last_uu(), uu);
}
