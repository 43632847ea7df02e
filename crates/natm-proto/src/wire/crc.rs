//! The CRCs of the cell layer: the header error control (HEC) octet, the AAL5 CRC-32
//! and the OAM cell's CRC-10.
//!
//! * HEC: CRC-8/I-432-1 — generator x^8+x^2+x+1 (0x07), init 0, MSB first, remainder
//!   XORed with the coset 0x55 (specs.md §1.2, ITU-T I.432.1).
//! * AAL5: CRC-32/BZIP2 — generator 0x04C11DB7, init 0xFFFFFFFF, MSB first, no
//!   reflection, final complement (specs.md §2.2, ITU-T I.363.5). Not zlib's CRC-32,
//!   which is the reflected variant.
//! * OAM: CRC-10 — generator x^10+x^9+x^5+x^4+x+1 (0x633), init 0, MSB first, over the
//!   48-octet cell payload with its own ten CRC bits taken as 0 (ITU-T I.610 §10.1;
//!   specs.md §1.4's vector gives 0x22A). Bit by bit: an OAM cell is rare.
//!
//! The CRC-32 runs on two engines chosen by measurement (`docs/PERFORMANCE.md`): the
//! `crc` crate's slice-by-16 table for short inputs, where a call's set-up dominates, and
//! the carry-less-multiply (PCLMULQDQ / VPCLMULQDQ) folding of `crc-fast` for longer
//! ones, where it is 6 to 12 times faster. Both engines share the raw register, so one
//! digest may mix them.

/// The coset added to the CRC-8 remainder to form the HEC (x^6+x^4+x^2+1).
pub const HEC_COSET: u8 = 0x55;

/// CRC-8 generator polynomial of the HEC, without the x^8 term.
const HEC_POLY: u8 = 0x07;

/// Byte-at-a-time table for the HEC CRC-8, built at compile time.
const HEC_TABLE: [u8; 256] = hec_table();

const fn hec_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ HEC_POLY
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// The CRC-8 remainder (poly 0x07, init 0, no coset) of the four header octets.
///
/// This is linear in its input, which is what the syndrome decoder relies on:
/// `crc8(a ^ b) == crc8(a) ^ crc8(b)`.
pub const fn crc8_i432(header4: &[u8; 4]) -> u8 {
    let mut crc = 0u8;
    let mut i = 0;
    while i < 4 {
        crc = HEC_TABLE[(crc ^ header4[i]) as usize];
        i += 1;
    }
    crc
}

/// The HEC octet for the four header octets GFC/VPI, VPI/VCI, VCI, VCI/PTI/CLP.
///
/// `hec(&[0, 0, 0, 1]) == 0x52` (the idle cell).
pub const fn hec(header4: &[u8; 4]) -> u8 {
    crc8_i432(header4) ^ HEC_COSET
}

/// The CRC-32/BZIP2 register preset and final complement.
const CRC32_INIT: u32 = 0xFFFF_FFFF;

/// The value the AAL5 CRC register holds after running over a whole good CPCS-PDU,
/// CRC field included, before the final complement (CRC-32/MPEG-2 residue).
pub const CRC32_AAL5_RESIDUE: u32 = 0xC704_DD7B;

/// Below this many octets the slice-by-16 table beats the carry-less-multiply path
/// (measured; see `docs/PERFORMANCE.md`).
const CLMUL_THRESHOLD: usize = 128;

/// The `crc` crate's CRC-32/BZIP2 parameters with no final complement, so that its
/// digest's result is the raw register and can be handed between engines.
const CRC32_RAW_ALGORITHM: crc::Algorithm<u32> = crc::Algorithm {
    width: 32,
    poly: 0x04C1_1DB7,
    init: CRC32_INIT,
    refin: false,
    refout: false,
    xorout: 0,
    check: 0x0376_E6E7,
    residue: 0,
};

static CRC32_TABLE16: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&CRC32_RAW_ALGORITHM);

/// Advances the raw (un-complemented) CRC-32/BZIP2 register over `data`.
#[inline]
fn crc32_update(register: u32, data: &[u8]) -> u32 {
    if data.len() < CLMUL_THRESHOLD {
        let mut digest = CRC32_TABLE16.digest_with_initial(register);
        digest.update(data);
        digest.finalize()
    } else if register == CRC32_INIT {
        // The update depends only on the register and the data, so a register at the
        // preset can take crc-fast's one-shot call, which skips its digest's set-up
        // (measured at about 18 ns a call).
        !(crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Bzip2, data) as u32)
    } else {
        let mut digest = crc_fast::Digest::new_with_init_state(
            crc_fast::CrcAlgorithm::Crc32Bzip2,
            u64::from(register),
        );
        digest.update(data);
        // The register of a 32-bit CRC lives in the low half of crc-fast's u64 state.
        digest.get_state() as u32
    }
}

/// CRC-32/BZIP2 of `data` in one call: the AAL5 CRC when `data` is a CPCS-PDU without
/// its last four octets.
///
/// `crc32_aal5(b"123456789") == 0xFC89_1918`.
pub fn crc32_aal5(data: &[u8]) -> u32 {
    !crc32_update(CRC32_INIT, data)
}

/// An incremental CRC-32/BZIP2, so that segmentation and reassembly can run the AAL5
/// CRC piece by piece (cell by cell, or SDU then pad then trailer).
///
/// Feeding the pieces of a buffer in order gives the same result as [`crc32_aal5`] over
/// the whole buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32Aal5 {
    register: u32,
}

impl Crc32Aal5 {
    /// A digest over no data yet.
    pub const fn new() -> Self {
        Crc32Aal5 {
            register: CRC32_INIT,
        }
    }

    /// Runs the CRC over `data`, after everything fed before.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.register = crc32_update(self.register, data);
    }

    /// The CRC-32 of everything fed so far; the digest may go on being updated.
    #[inline]
    pub const fn finalize(&self) -> u32 {
        !self.register
    }

    /// The raw register (no final complement): [`CRC32_AAL5_RESIDUE`] after a whole
    /// good PDU including its CRC field.
    #[inline]
    pub const fn register(&self) -> u32 {
        self.register
    }

    /// Starts again over no data.
    pub fn reset(&mut self) {
        self.register = CRC32_INIT;
    }
}

impl Default for Crc32Aal5 {
    fn default() -> Self {
        Self::new()
    }
}

/// The CRC-10 generator of OAM cells (x^10+x^9+x^5+x^4+x+1) with its x^10 term.
const CRC10_POLY: u16 = 0x633;

/// CRC-10 of a 48-octet OAM cell payload: the remainder of its 384 bits, the last ten
/// (the CRC field) taken as 0, divided by x^10+x^9+x^5+x^4+x+1 (ITU-T I.610 §10.1).
pub fn crc10_oam(payload: &[u8; 48]) -> u16 {
    let mut reg: u16 = 0;
    for (i, &byte) in payload.iter().enumerate() {
        let byte = match i {
            46 => byte & 0xFC,
            47 => 0,
            _ => byte,
        };
        for bit in (0..8).rev() {
            reg = (reg << 1) | u16::from((byte >> bit) & 1);
            if reg & 0x400 != 0 {
                reg ^= CRC10_POLY;
            }
        }
    }
    reg
}

/// The CRC-10 field of an OAM payload (the low two bits of octet 47 and octet 48).
pub fn crc10_field(payload: &[u8; 48]) -> u16 {
    (u16::from(payload[46] & 0x03) << 8) | u16::from(payload[47])
}

/// Writes the CRC-10 of `payload` into its last ten bits (the six reserved bits
/// before them are kept).
pub fn fill_crc10(payload: &mut [u8; 48]) {
    let crc = crc10_oam(payload);
    payload[46] = (payload[46] & 0xFC) | (crc >> 8) as u8;
    payload[47] = crc as u8;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time CRC-32/BZIP2, the specification's definition, to check the engines.
    fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut crc = CRC32_INIT;
        for &b in data {
            crc ^= u32::from(b) << 24;
            for _ in 0..8 {
                crc = if crc & 0x8000_0000 != 0 {
                    (crc << 1) ^ 0x04C1_1DB7
                } else {
                    crc << 1
                };
            }
        }
        !crc
    }

    /// Bit-at-a-time HEC, as the pseudocode in specs.md §1.2.
    fn hec_bitwise(h: &[u8; 4]) -> u8 {
        let mut crc = 0u8;
        for &b in h {
            crc ^= b;
            for _ in 0..8 {
                crc = if crc & 0x80 != 0 {
                    (crc << 1) ^ 0x07
                } else {
                    crc << 1
                };
            }
        }
        crc ^ 0x55
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
            .collect()
    }

    #[test]
    fn hec_catalogue_check_value() {
        // CRC-8/I-432-1 check("123456789") = 0xA1 is over 9 octets; run the table the
        // same way to pin the table against the catalogue.
        let mut crc = 0u8;
        for &b in b"123456789" {
            crc = HEC_TABLE[(crc ^ b) as usize];
        }
        assert_eq!(crc ^ HEC_COSET, 0xA1);
    }

    #[test]
    fn hec_standard_constants() {
        assert_eq!(hec(&[0, 0, 0, 1]), 0x52, "idle cell");
        assert_eq!(hec(&[0, 0, 0, 0]), 0x55, "unassigned cell");
        assert_eq!(hec(&[0xFF, 0xFF, 0xFF, 0xFF]), 0x8B);
        assert_eq!(hec(&[0x00, 0x10, 0x02, 0x02]), 0xD3);
    }

    #[test]
    fn hec_table_matches_bitwise() {
        for w in (0u32..=0xFFFF).map(|x| x.wrapping_mul(0x9E37_79B9)) {
            let h = w.to_be_bytes();
            assert_eq!(hec(&h), hec_bitwise(&h), "{h:02X?}");
        }
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32_aal5(b"123456789"), 0xFC89_1918);
    }

    #[test]
    fn crc32_engines_agree_around_threshold() {
        let data = pattern(70_000);
        for n in [
            0,
            1,
            47,
            48,
            CLMUL_THRESHOLD - 1,
            CLMUL_THRESHOLD,
            CLMUL_THRESHOLD + 1,
            1500,
            9180,
            65_535,
            70_000,
        ] {
            assert_eq!(crc32_aal5(&data[..n]), crc32_bitwise(&data[..n]), "n={n}");
        }
    }

    #[test]
    fn digest_split_anywhere_equals_one_shot() {
        let data = pattern(3000);
        let whole = crc32_aal5(&data);
        for split in [0, 1, 48, 127, 128, 129, 1000, 2999, 3000] {
            let mut d = Crc32Aal5::new();
            d.update(&data[..split]);
            d.update(&data[split..]);
            assert_eq!(d.finalize(), whole, "split={split}");
        }
        let mut d = Crc32Aal5::default();
        for cell in data.chunks(48) {
            d.update(cell);
        }
        assert_eq!(d.finalize(), whole);
        d.reset();
        assert_eq!(d, Crc32Aal5::new());
    }

    #[test]
    fn aal5_vectors_from_specs_2_3() {
        // (SDU, expected CRC) for the five rows of specs.md §2.3; the PDU body is
        // SDU + zero pad + UU 0 + CPI 0 + 16-bit length.
        let seq = |n: u8| (0..n).collect::<Vec<u8>>();
        let rows: [(Vec<u8>, u32); 5] = [
            (Vec::new(), 0x3866_24C1),
            (b"123456789".to_vec(), 0xFBB9_7124),
            (seq(100), 0x4066_0640),
            (seq(40), 0xA6AE_FA48),
            (seq(41), 0x4EB3_B0E7),
        ];
        for (sdu, want) in rows {
            let pad = (48 - (sdu.len() + 8) % 48) % 48;
            let mut body = sdu.clone();
            body.resize(sdu.len() + pad, 0);
            body.extend_from_slice(&[0, 0]);
            body.extend_from_slice(&(sdu.len() as u16).to_be_bytes());
            assert_eq!(crc32_aal5(&body), want, "len {}", sdu.len());
            // The residue check: run over the PDU including its CRC, no complement.
            let mut d = Crc32Aal5::new();
            d.update(&body);
            d.update(&want.to_be_bytes());
            assert_eq!(d.register(), CRC32_AAL5_RESIDUE);
        }
    }

    #[test]
    fn crc10_of_the_specs_1_4_loopback_cell() {
        // specs.md §1.4: 18 01 12 34 56 78, 32 × FF, 8 × 6A, then 02 2A.
        let mut p = [0u8; 48];
        p[..6].copy_from_slice(&[0x18, 0x01, 0x12, 0x34, 0x56, 0x78]);
        p[6..38].fill(0xFF);
        p[38..46].fill(0x6A);
        p[46..].copy_from_slice(&[0x02, 0x2A]);
        assert_eq!(crc10_oam(&p), 0x22A);
        assert_eq!(crc10_field(&p), 0x22A);
        // The field does not enter its own CRC; a flipped payload bit changes it.
        let mut q = p;
        q[46..].fill(0);
        assert_eq!(crc10_oam(&q), 0x22A);
        fill_crc10(&mut q);
        assert_eq!(q, p);
        q[10] ^= 0x10;
        assert_ne!(crc10_oam(&q), crc10_field(&q));
    }
}
