use super::*;
use proptest::prelude::*;

#[test]
fn rates_encode_as_tm_4_0_writes_them() {
    // nz | e | m: 1 cell/s is 2^0 · (1 + 0/512).
    assert_eq!(Rate::from_cells(1.0).bits(), 0x4000);
    // TCR, 10 cells/s: 2^3 · (1 + 128/512).
    assert_eq!(Rate::from_cells(10.0).bits(), 0x4680);
    // OC-3c's payload rate, 353,207.5 cells/s: 2^18 · (1 + 177/512), rounded down.
    assert_eq!(Rate::from_cells(353_207.5).bits(), 0x64B1);
    assert_eq!(
        Rate::from_bits(0x64B1).cells(),
        262_144.0 * (1.0 + 177.0 / 512.0)
    );
    assert_eq!(Rate::from_cells(0.0), Rate::ZERO);
    assert_eq!(Rate::from_cells(0.5), Rate::ZERO);
    assert_eq!(Rate::from_cells(f64::NAN), Rate::ZERO);
    assert_eq!(Rate::from_cells(-3.0), Rate::ZERO);
    assert_eq!(Rate::ZERO.cells(), 0.0);
    assert_eq!(Rate::from_cells(1e12).cells(), MAX_RATE);
}

#[test]
fn an_rm_cell_reads_back_and_carries_its_crc() {
    let mut c = RmCell::forward(
        Rate::from_cells(235_849.0),
        Rate::from_cells(10_000.0),
        Rate::from_cells(1_000.0),
    );
    c.ql = 7;
    c.sn = 0xDEAD_BEEF;
    let p = c.to_bytes();
    assert_eq!(p[0], PROTOCOL_ABR);
    assert_eq!(p[1], 0, "a forward cell from a source has no flag set");
    assert!(p[16..46].iter().all(|&b| b == UNUSED));
    assert_eq!(RmCell::parse(&p), Ok(c));

    let back = c.turned_around(true);
    assert_eq!(back.dir, Direction::Backward);
    assert!(back.ci);
    assert_eq!(
        (back.er, back.ccr, back.mcr, back.sn),
        (c.er, c.ccr, c.mcr, c.sn)
    );
    assert_eq!(
        RmCell::parse(&back.to_bytes()).unwrap().to_bytes()[1],
        0x80 | 0x20
    );
    assert!(!c.turned_around(false).ci);
}

#[test]
fn bad_payloads_get_typed_errors() {
    let good = RmCell::forward(Rate::from_cells(100.0), Rate::ZERO, Rate::ZERO).to_bytes();
    assert_eq!(RmCell::parse(&good[..47]), Err(RmError::Length(47)));
    let mut other = good;
    other[0] = 2;
    assert_eq!(RmCell::parse(&other), Err(RmError::Protocol(2)));
    let mut flipped = good;
    flipped[3] ^= 1;
    assert!(matches!(RmCell::parse(&flipped), Err(RmError::Crc { .. })));
    // An OAM loopback cell is not an RM cell.
    let oam = crate::wire::oam::Loopback::request(1).to_bytes();
    assert!(matches!(RmCell::parse(&oam), Err(RmError::Protocol(0x18))));
}

#[test]
fn a_switch_lowers_er_and_sets_ci_in_place() {
    let c = RmCell::forward(
        Rate::from_cells(100_000.0),
        Rate::from_cells(5_000.0),
        Rate::ZERO,
    );
    let mut p = c.to_bytes();
    assert!(lower_er(&mut p, Rate::from_cells(20_000.0)));
    assert_eq!(RmCell::parse(&p).unwrap().er, Rate::from_cells(20_000.0));
    // Never raised.
    assert!(lower_er(&mut p, Rate::from_cells(50_000.0)));
    assert_eq!(RmCell::parse(&p).unwrap().er, Rate::from_cells(20_000.0));
    assert!(set_ci(&mut p));
    let read = RmCell::parse(&p).unwrap();
    assert!(read.ci);
    assert_eq!(read.ccr, c.ccr);
    let mut junk = [0u8; 48];
    assert!(!lower_er(&mut junk, Rate::ZERO));
    assert!(!set_ci(&mut junk));
    assert_eq!(junk, [0u8; 48]);
}

proptest! {
    #[test]
    fn encoding_rounds_down_within_one_part_in_512(r in 1.0f64..4.0e9) {
        let got = Rate::from_cells(r).cells();
        prop_assert!(got <= r, "{got} > {r}");
        prop_assert!(got >= r * (1.0 - 1.0 / 512.0) - 1e-9, "{got} ≪ {r}");
    }

    #[test]
    fn every_encoding_round_trips(bits in 0u16..0x8000) {
        let r = Rate::from_bits(bits);
        if bits & 0x4000 != 0 {
            prop_assert_eq!(Rate::from_cells(r.cells()), r);
        } else {
            prop_assert_eq!(r.cells(), 0.0);
        }
    }

    #[test]
    fn parse_never_panics_and_reencodes(p in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(c) = RmCell::parse(&p) {
            prop_assert_eq!(RmCell::parse(&c.to_bytes()), Ok(c));
        }
    }
}
