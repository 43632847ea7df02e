//! Property tests for the cell layer: header and SAR round trips, no panic on any
//! input, and no corrupted frame delivered as good.

use natm_proto::wire::aal5::{
    cell_count, decode, encode, segment, Aal5Error, Reassembler, Segmenter, MAX_SDU_LEN,
};
use natm_proto::wire::cell::{
    HeaderFormat, HeaderRepr, HecReceiver, HecVerdict, Packet, Pti, CELL_LEN, HEADER_LEN,
};
use proptest::prelude::*;

/// Deterministic filler so that large SDUs cost one strategy draw, not one per octet.
fn sdu(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn header_repr() -> impl Strategy<Value = HeaderRepr> {
    let uni = (0u8..16, 0u16..256);
    let nni = (Just(0u8), 0u16..4096);
    (
        prop_oneof![
            uni.prop_map(|(g, v)| (HeaderFormat::Uni, g, v)),
            nni.prop_map(|(g, v)| (HeaderFormat::Nni, g, v))
        ],
        any::<u16>(),
        0u8..8,
        any::<bool>(),
    )
        .prop_map(|((format, gfc, vpi), vci, pti, clp)| HeaderRepr {
            format,
            gfc,
            vpi,
            vci,
            pti: Pti::from_bits(pti),
            clp,
        })
}

fn format() -> impl Strategy<Value = HeaderFormat> {
    prop_oneof![Just(HeaderFormat::Uni), Just(HeaderFormat::Nni)]
}

/// SDU lengths over the whole range, with the small and cell-boundary ones favoured.
fn sdu_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..=100,
        1usize..=MAX_SDU_LEN,
        30usize..=50,
        65_400usize..=65_535
    ]
}

proptest! {
    #[test]
    fn header_emit_then_parse_is_identity(repr in header_repr()) {
        let bytes = repr.to_bytes();
        prop_assert_eq!(HeaderRepr::parse_header(&bytes, repr.format), Ok(repr));
        let mut cell = [0u8; CELL_LEN];
        let mut packet = Packet::new_checked(&mut cell[..]).unwrap();
        repr.emit(&mut packet);
        prop_assert!(packet.hec_ok());
        prop_assert_eq!(packet.vpi(repr.format), repr.vpi);
        prop_assert_eq!(packet.vci(), repr.vci);
        prop_assert_eq!(packet.pti(), repr.pti);
        prop_assert_eq!(packet.clp(), repr.clp);
    }

    #[test]
    fn header_parse_then_emit_is_identity(word in any::<[u8; 4]>(), format in format()) {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&word);
        h[4] = natm_proto::wire::crc::hec(&word);
        let repr = HeaderRepr::parse_header(&h, format).unwrap();
        prop_assert_eq!(repr.to_bytes(), h);
    }

    #[test]
    fn any_single_bit_error_is_corrected(repr in header_repr(), bit in 0u8..40) {
        let good = repr.to_bytes();
        let mut h = good;
        h[usize::from(bit / 8)] ^= 0x80 >> (bit % 8);
        let mut rx = HecReceiver::new();
        prop_assert_eq!(rx.check(&mut h), HecVerdict::Corrected { bit });
        prop_assert_eq!(h, good);
    }

    #[test]
    fn segment_then_reassemble_is_identity(
        len in sdu_len(),
        seed in any::<u64>(),
        vpi in any::<u8>(),
        vci in any::<u16>(),
        uu in any::<u8>(),
    ) {
        let data = sdu(len, seed);
        let header = HeaderRepr::uni(vpi, vci, Pti::UserData);
        let cells: Vec<[u8; CELL_LEN]> = Segmenter::with_uu(&data, header, uu).unwrap().collect();
        prop_assert_eq!(cells.len(), cell_count(len));
        let mut rx = Reassembler::new();
        for (i, cell) in cells.iter().enumerate() {
            let p = Packet::new_checked(&cell[..]).unwrap();
            prop_assert!(p.hec_ok());
            prop_assert_eq!((p.vpi(HeaderFormat::Uni), p.vci()), (u16::from(vpi), vci));
            prop_assert_eq!(p.pti().is_end_of_sdu(), i + 1 == cells.len());
            let out = rx.push_cell(cell).unwrap();
            if i + 1 < cells.len() {
                prop_assert!(out.is_none());
            } else {
                prop_assert_eq!(out, Some(&data[..]));
            }
        }
        prop_assert_eq!(rx.last_uu(), uu);
        // The one-buffer path agrees with the cell path.
        let pdu = encode(&data, uu).unwrap();
        let joined: Vec<u8> = cells.iter().flat_map(|c| c[HEADER_LEN..].to_vec()).collect();
        prop_assert_eq!(&pdu, &joined);
        prop_assert_eq!(decode(&pdu, MAX_SDU_LEN).map(|r| r.0), Ok(&data[..]));
    }

    #[test]
    fn random_bytes_never_panic_the_cell_parsers(
        buf in proptest::collection::vec(any::<u8>(), 0..120),
        format in format(),
    ) {
        if let Ok(p) = Packet::new_checked(&buf[..]) {
            let _ = (p.gfc(), p.vpi(format), p.vci(), p.pti(), p.clp(), p.hec(), p.payload());
            prop_assert_eq!(HeaderRepr::parse(&p, format).is_ok(), p.hec_ok());
        } else {
            prop_assert_ne!(buf.len(), CELL_LEN);
        }
        if let Ok(mut h) = <[u8; HEADER_LEN]>::try_from(buf.get(..HEADER_LEN).unwrap_or(&[])) {
            let received = h;
            let verdict = HecReceiver::new().check(&mut h);
            if verdict.accepted() {
                prop_assert!(HeaderRepr::parse_header(&h, format).is_ok());
            } else {
                prop_assert_eq!(h, received);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic_the_aal5_parsers(
        buf in proptest::collection::vec(any::<u8>(), 0..400),
        max in 0usize..70_000,
    ) {
        match decode(&buf, max) {
            Ok((s, repr)) => {
                prop_assert!(!s.is_empty() && s.len() <= max.max(1));
                // Re-encoding gives the same PDU up to the pad, which the CRC covers but
                // the receiver ignores.
                let again = encode(s, repr.uu).unwrap();
                prop_assert_eq!(again.len(), buf.len());
                let t = buf.len() - 8;
                prop_assert_eq!(&again[t..t + 4], &buf[t..t + 4]);
            }
            Err(Aal5Error::BadPduLength { len }) => prop_assert!(len == 0 || len % 48 != 0),
            Err(_) => {}
        }
        let mut rx = Reassembler::with_max_sdu(max);
        for chunk in buf.chunks_exact(CELL_LEN) {
            let cell: &[u8; CELL_LEN] = chunk.try_into().unwrap();
            if let Ok(Some(s)) = rx.push_cell(cell) {
                prop_assert!(!s.is_empty() && s.len() <= rx.max_sdu());
            }
            prop_assert!(rx.capacity() <= rx.max_cells() * 48);
        }
    }

    #[test]
    fn a_dropped_or_corrupted_cell_is_never_delivered(
        lens in (1usize..=3000, 1usize..=3000, 1usize..=3000),
        seed in any::<u64>(),
        victim in any::<prop::sample::Index>(),
        kind in 0u8..3,
        bit in 0usize..(48 * 8),
    ) {
        // Three SDUs told apart by their first octet; A is damaged on the wire.
        let mut frames = [sdu(lens.0, seed), sdu(lens.1, seed ^ 1), sdu(lens.2, seed ^ 2)];
        for (i, f) in frames.iter_mut().enumerate() {
            f[0] = i as u8;
        }
        let [a, b, c] = &frames;
        let mut cells_a = segment(a, 0, 32).unwrap();
        let cells_a_len = cells_a.len();
        let i = victim.index(cells_a_len);
        match kind {
            0 => {
                cells_a.remove(i);
            }
            1 => cells_a[i][HEADER_LEN + bit / 8] ^= 0x80 >> (bit % 8),
            _ => cells_a[i][3] ^= 0x02, // the AUU bit
        }
        let wire = cells_a
            .iter()
            .chain(&segment(b, 0, 32).unwrap())
            .chain(&segment(c, 0, 32).unwrap())
            .copied()
            .collect::<Vec<_>>();
        let mut rx = Reassembler::new();
        let (mut delivered, mut errors) = (Vec::new(), 0);
        for cell in &wire {
            match rx.push_cell(cell) {
                Ok(Some(s)) => delivered.push(s.to_vec()),
                Ok(None) => {}
                Err(_) => errors += 1,
            }
        }
        // Losing the only cell of a frame leaves nothing to detect; any other damage
        // must be reported.
        let whole_frame_lost = kind == 0 && cells_a_len == 1;
        prop_assert!(errors >= 1 || whole_frame_lost, "the damage went unreported");
        prop_assert!(!delivered.iter().any(|s| s[0] == 0), "damaged frame A delivered");
        for s in &delivered {
            prop_assert!(s == b || s == c, "delivered an SDU that was never sent");
        }
        prop_assert_eq!(delivered.last(), Some(c), "no recovery on the next frame");
    }
}
