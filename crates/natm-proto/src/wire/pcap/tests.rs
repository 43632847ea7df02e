//! The captures of specs.md §6.3 rebuilt record for record from typed values.

use super::*;
use crate::wire::q2931::tests::{setup_ubr, setup_vbr};
use crate::wire::sscop::{Pdu, SeqNum};

/// `natm_min_sunatm.pcap` and `natm_erf.pcap` of `shared/specs/`, written by
/// `build_pcaps.py` (copied here so the test does not depend on the specs folder).
const MIN_SUNATM: &[u8] = include_bytes!("../../../tests/data/natm_min_sunatm.pcap");
const ERF: &[u8] = include_bytes!("../../../tests/data/natm_erf.pcap");

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn sd(ns: u32, info: Vec<u8>) -> Vec<u8> {
    Pdu::Sd {
        ns: SeqNum::new(ns).unwrap(),
        info,
    }
    .to_bytes()
}

fn seq(n: usize) -> Vec<u8> {
    (0..n).map(|i| i as u8).collect()
}

#[test]
fn min_sunatm_capture_records_are_rebuilt_exactly() {
    let reference = parse_file(MIN_SUNATM).unwrap();
    assert_eq!(reference.linktype, LINKTYPE_SUNATM);
    assert_eq!(reference.records.len(), 2);

    let mut w = PcapWriter::new(Vec::new(), LINKTYPE_SUNATM, TsPrecision::Micros).unwrap();
    let setup = sd(0, setup_vbr().to_bytes().unwrap());
    w.write_sunatm(ms(1_000_000), &SunAtmHeader::new(true, 0, 5), &setup)
        .unwrap();
    w.write_sunatm(ms(1_000_001), &SunAtmHeader::new(true, 0, 100), &seq(100))
        .unwrap();
    let ours = w.into_inner().unwrap();
    let rebuilt = parse_file(&ours).unwrap();
    for (a, b) in rebuilt.records.iter().zip(&reference.records) {
        assert_eq!(a.data, b.data);
        assert_eq!(a.orig_len, b.orig_len);
    }
    assert_eq!(rebuilt.records[0].data.len(), 4 + 124);
    assert_eq!(&rebuilt.records[0].data[..4], &[0x80, 0, 0, 5]);
    // The timestamps were chosen to match too, so the whole file is identical.
    assert_eq!(ours, MIN_SUNATM);
}

#[test]
fn erf_capture_records_are_rebuilt_exactly() {
    let reference = parse_file(ERF).unwrap();
    assert_eq!(reference.linktype, LINKTYPE_ERF);
    let t = |i: u64| ms(2_000_000 + i);
    let bgn = Pdu::Bgn {
        nsq: 1,
        nmr: SeqNum::new(128).unwrap(),
        uu: vec![],
    }
    .to_bytes();
    let sdus: [(u8, u16, Vec<u8>); 5] = [
        (0, 5, bgn),
        (0, 5, sd(0, setup_vbr().to_bytes().unwrap())),
        (0, 100, seq(100)),
        (0, 5, sd(5, setup_ubr().to_bytes().unwrap())),
        (1, 32, b"123456789".to_vec()),
    ];
    let mut w = PcapWriter::new(Vec::new(), LINKTYPE_ERF, TsPrecision::Micros).unwrap();
    for (i, (vpi, vci, sdu)) in sdus.iter().enumerate() {
        w.write_erf_aal5(t(i as u64), 0, *vpi, *vci, sdu).unwrap();
    }
    // The abort form (Length 0) cannot be encoded as an SDU; write its PDU directly.
    let mut abort = vec![0u8; 48];
    let crc = crate::wire::crc::crc32_aal5(&abort[..44]);
    abort[44..].copy_from_slice(&crc.to_be_bytes());
    let rec = erf_aal5_record(t(5), 0, 1, 33, &abort).unwrap();
    w.write_record(t(5), &rec).unwrap();
    let cells = aal5::segment(b"123456789", 1, 32).unwrap();
    w.write_erf_cell(t(6), 0, &cells[0]).unwrap();
    let ours = w.into_inner().unwrap();
    let rebuilt = parse_file(&ours).unwrap();
    assert_eq!(rebuilt.records.len(), reference.records.len());
    for (i, (a, b)) in rebuilt.records.iter().zip(&reference.records).enumerate() {
        assert_eq!(a.data, b.data, "record {i}");
    }
    assert_eq!(ours, ERF);
}

#[test]
fn nanosecond_files_and_both_byte_orders_read_back() {
    let mut w = PcapWriter::new(Vec::new(), LINKTYPE_SUNATM, TsPrecision::Nanos).unwrap();
    let ts = Duration::new(1_700_000_000, 123_456_789);
    w.write_sunatm(
        ts,
        &SunAtmHeader {
            traffic: 6,
            ..SunAtmHeader::new(false, 0, 99)
        },
        b"x",
    )
    .unwrap();
    let file = w.into_inner().unwrap();
    assert_eq!(&file[..4], &MAGIC_NANOS.to_le_bytes());
    let back = parse_file(&file).unwrap();
    assert_eq!(back.precision, TsPrecision::Nanos);
    assert_eq!(back.records[0].ts, ts);
    let h = SunAtmHeader::parse(back.records[0].data).unwrap();
    assert_eq!((h.tx, h.traffic, h.vpi, h.vci), (false, 6, 0, 99));

    // The same file big-endian.
    let mut be = Vec::new();
    for (i, chunk) in file[..24].chunks(4).enumerate() {
        if i == 1 {
            be.extend_from_slice(&[chunk[1], chunk[0], chunk[3], chunk[2]]);
        } else {
            be.extend(chunk.iter().rev());
        }
    }
    for chunk in file[24..40].chunks(4) {
        be.extend(chunk.iter().rev());
    }
    be.extend_from_slice(&file[40..]);
    assert_eq!(parse_file(&be).unwrap(), back);
}

#[test]
fn writer_and_reader_errors() {
    let mut w = PcapWriter::new(Vec::new(), LINKTYPE_SUNATM, TsPrecision::Micros).unwrap();
    assert!(matches!(
        w.write_erf_aal5(ms(0), 0, 0, 5, b"x"),
        Err(CaptureError::WrongLinkType {
            file: 123,
            record: 197
        })
    ));
    assert!(matches!(
        w.write_record(ms(0), &vec![0; 70_000]),
        Err(CaptureError::RecordTooLong { len: 70_000, .. })
    ));
    assert!(matches!(
        w.write_record(Duration::from_secs(1 << 33), b""),
        Err(CaptureError::Timestamp { .. })
    ));
    let mut e = PcapWriter::new(Vec::new(), LINKTYPE_ERF, TsPrecision::Micros).unwrap();
    assert!(matches!(
        e.write_erf_aal5(ms(0), 0, 0, 5, &[]),
        Err(CaptureError::Aal5(Aal5Error::EmptySdu))
    ));
    assert!(matches!(
        e.write_erf_aal5(ms(0), 0, 0, 5, &vec![1; 65_500]),
        Err(CaptureError::RecordTooLong { .. })
    ));
    assert!(matches!(
        parse_file(&[0; 10]),
        Err(CaptureError::Truncated { offset: 0 })
    ));
    assert!(matches!(
        parse_file(&[0; 24]),
        Err(CaptureError::BadMagic { magic: 0 })
    ));
    assert!(matches!(
        parse_file(&MIN_SUNATM[..MIN_SUNATM.len() - 1]),
        Err(CaptureError::Truncated { offset: 184 })
    ));
    assert!(matches!(
        parse_file(&MIN_SUNATM[..30]),
        Err(CaptureError::Truncated { offset: 24 })
    ));
}
