//! Golden vectors of specs.md §5.2, both ways, and the SETUP-in-SD example.

use super::*;
use crate::wire::aal5;
use crate::wire::q2931::Message;

fn bytes(hex: &str) -> Vec<u8> {
    hex::decode(hex.split_whitespace().collect::<String>()).unwrap()
}

fn s(v: u32) -> SeqNum {
    SeqNum::new(v).unwrap()
}

/// Every vector of specs.md §5.2.
fn vectors() -> Vec<(Pdu, &'static str)> {
    vec![
        (
            Pdu::Bgn {
                nsq: 1,
                nmr: s(128),
                uu: vec![],
            },
            "00 00 00 01 01 00 00 80",
        ),
        (
            Pdu::Bgak {
                nmr: s(128),
                uu: vec![],
            },
            "00 00 00 00 02 00 00 80",
        ),
        (Pdu::Bgrej { uu: vec![] }, "00 00 00 00 07 00 00 00"),
        (
            Pdu::End {
                source_sscop: false,
                uu: vec![],
            },
            "00 00 00 00 03 00 00 00",
        ),
        (
            Pdu::End {
                source_sscop: true,
                uu: vec![],
            },
            "00 00 00 00 13 00 00 00",
        ),
        (Pdu::Endak, "00 00 00 00 04 00 00 00"),
        (
            Pdu::Rs {
                nsq: 2,
                nmr: s(130),
                uu: vec![],
            },
            "00 00 00 02 05 00 00 82",
        ),
        (Pdu::Rsak { nmr: s(130) }, "00 00 00 00 06 00 00 82"),
        (
            Pdu::Er {
                nsq: 3,
                nmr: s(131),
            },
            "00 00 00 03 09 00 00 83",
        ),
        (Pdu::Erak { nmr: s(131) }, "00 00 00 00 0F 00 00 83"),
        (
            Pdu::Poll {
                nps: s(1),
                ns: s(2),
            },
            "00 00 00 01 0A 00 00 02",
        ),
        (
            Pdu::Stat {
                nps: s(1),
                nmr: s(130),
                nr: s(2),
                list: vec![],
            },
            "00 00 00 01 00 00 00 82 0B 00 00 02",
        ),
        (
            Pdu::Stat {
                nps: s(7),
                nmr: s(140),
                nr: s(10),
                list: vec![s(12), s(14)],
            },
            "00 00 00 0C 00 00 00 0E 00 00 00 07 00 00 00 8C 0B 00 00 0A",
        ),
        (
            Pdu::Ustat {
                nmr: s(200),
                nr: s(5),
                list: [s(5), s(6)],
            },
            "00 00 00 05 00 00 00 06 00 00 00 C8 0C 00 00 05",
        ),
        (
            Pdu::Sd {
                ns: s(0),
                info: b"ABCDE".to_vec(),
            },
            "41 42 43 44 45 00 00 00 C8 00 00 00",
        ),
        (
            Pdu::Ud {
                info: b"ABCDE".to_vec(),
            },
            "41 42 43 44 45 00 00 00 CD 00 00 00",
        ),
        (
            Pdu::Md {
                info: b"ABCDE".to_vec(),
            },
            "41 42 43 44 45 00 00 00 CE 00 00 00",
        ),
        (
            Pdu::Bgn {
                nsq: 9,
                nmr: s(0xFF_FFFF),
                uu: b"uu".to_vec(),
            },
            "75 75 00 00 00 00 00 09 81 FF FF FF",
        ),
        (
            Pdu::End {
                source_sscop: true,
                uu: b"bye!".to_vec(),
            },
            "62 79 65 21 00 00 00 00 13 00 00 00",
        ),
    ]
}

#[test]
fn every_vector_of_specs_5_2_both_ways() {
    for (pdu, hex) in vectors() {
        let wire = bytes(hex);
        assert_eq!(pdu.to_bytes(), wire, "emit {pdu}");
        assert_eq!(pdu.buffer_len(), wire.len());
        assert_eq!(Pdu::parse(&wire), Ok(pdu.clone()), "parse {hex}");
        let p = Packet::new_checked(&wire[..]).unwrap();
        assert_eq!(p.pdu_type(), Some(pdu.pdu_type()));
    }
}

/// specs.md §5.2: the SETUP of §4.5 in an SD PDU, then AAL5 on VPI 0/VCI 5.
#[test]
fn setup_in_sd_and_its_three_cells() {
    let setup = crate::wire::q2931::tests::setup_vbr().to_bytes().unwrap();
    assert_eq!(setup.len(), 119);
    let sd = Pdu::Sd {
        ns: s(0),
        info: setup.clone(),
    };
    let wire = sd.to_bytes();
    assert_eq!(wire.len(), 124);
    assert_eq!(&wire[119..], &bytes("00 48 00 00 00")[..]);
    assert_eq!(Pdu::parse(&wire), Ok(sd));
    let pdu = aal5::encode(&wire, 0).unwrap();
    assert_eq!(&pdu[pdu.len() - 8..], &bytes("00 00 00 7C 0C C5 64 9C")[..]);
    let cells = aal5::segment(&wire, 0, 5).unwrap();
    let headers: Vec<&[u8]> = cells.iter().map(|c| &c[..5]).collect();
    assert_eq!(
        headers,
        [
            &bytes("00 00 00 50 E2")[..],
            &bytes("00 00 00 50 E2")[..],
            &bytes("00 00 00 52 EC")[..]
        ]
    );
    // The three cells exactly as specs.md §5.2 prints them.
    let expected = [
        "00 00 00 50 E2 09 03 00 00 01 05 80 00 6E 58 80 00 09 05 8C 23 E4 81 23 E4 84 00 59
         80 00 18 84 00 27 10 85 00 27 10 90 00 0F A0 91 00 0F A0 B0 00 00 64 B1 00",
        "00 00 00 50 E2 00 64 5E 80 00 03 10 88 80 5F 80 00 01 CC 70 80 00 15 82 47 00 05 80
         FF E1 00 00 00 F2 1A 26 D8 00 20 48 1A 26 D8 00 6C 80 00 16 02 80 47 00 05",
        "00 00 00 52 EC 80 FF E1 00 00 00 F2 1A 26 D8 00 20 48 0A 0B 0C 00 5C 80 00 02 00 00
         00 48 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 7C 0C C5 64 9C",
    ];
    for (cell, hex) in cells.iter().zip(expected) {
        assert_eq!(&cell[..], &bytes(hex)[..]);
    }
    // And back: cells → SDU → SD → the typed SETUP.
    let mut rx = aal5::Reassembler::new();
    let mut sdu = None;
    for c in &cells {
        sdu = rx.push_cell(c).unwrap().map(<[u8]>::to_vec);
    }
    let Ok(Pdu::Sd { ns, info }) = Pdu::parse(&sdu.unwrap()) else {
        panic!("not an SD")
    };
    assert_eq!(ns, s(0));
    assert_eq!(
        Message::parse(&info).unwrap(),
        crate::wire::q2931::tests::setup_vbr()
    );
}

#[test]
fn length_errors_are_named() {
    assert_eq!(Pdu::parse(&[]), Err(SscopError::Truncated { len: 0 }));
    assert_eq!(Pdu::parse(&[0; 3]), Err(SscopError::Truncated { len: 3 }));
    assert_eq!(
        Pdu::parse(&[0; 6]),
        Err(SscopError::NotWordAligned { len: 6 })
    );
    assert_eq!(
        Pdu::parse(&[0; 8]),
        Err(SscopError::UnknownType { nibble: 0 })
    );
    assert_eq!(
        Pdu::parse(&bytes("00 00 00 00 00 00 00 01 0A 00 00 02")),
        Err(SscopError::WrongLength {
            pdu: PduType::Poll,
            len: 12,
            expected: 8
        })
    );
    assert_eq!(
        Pdu::parse(&bytes("00 00 00 82 0B 00 00 02")),
        Err(SscopError::TooShort {
            pdu: PduType::Stat,
            len: 8,
            min: 12
        })
    );
    assert_eq!(
        Pdu::parse(&bytes("01 00 00 80")),
        Err(SscopError::TooShort {
            pdu: PduType::Bgn,
            len: 4,
            min: 8
        })
    );
    assert_eq!(
        Pdu::parse(&bytes("C8 00 00 00")),
        Err(SscopError::PadTooLong {
            pdu: PduType::Sd,
            pad: 3,
            field: 0
        })
    );
    // Reserved bits, a stray S bit and pad contents are ignored.
    assert_eq!(
        Pdu::parse(&bytes("41 FF FF FF F8 00 00 07")),
        Ok(Pdu::Sd {
            ns: s(7),
            info: vec![0x41]
        })
    );
}

#[test]
fn sequence_numbers_wrap_at_2_24() {
    assert_eq!(SeqNum::new(1 << 24), None);
    assert_eq!(SeqNum::MAX.add(1), s(0));
    assert_eq!(s(2).since(SeqNum::MAX), 3);
    assert_eq!(SeqNum::wrapping(0x0100_0005), s(5));
}
