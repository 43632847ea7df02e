//! OAM F5 loopback (ITU-T I.610 §10.2.4; cell layout as specs.md §1.4's vector).
//!
//! ```text
//! payload octet 1      OAM type 0001 (fault management) | function type 1000 (loopback)
//! octet 2              7 reserved bits | loopback indication (1 = to be looped back)
//! octets 3-6           correlation tag
//! octets 7-22          loopback location ID (all ones: the end point)
//! octets 23-38         source ID
//! octets 39-46         unused (0x6A)
//! octets 47-48         6 reserved bits | CRC-10 (x^10+x^9+x^5+x^4+x+1)
//! ```
//! The subset implemented: a loopback cell (PTI 100 segment or 101 end-to-end) with
//! the indication set, a good CRC-10, and a location ID that is all ones or this
//! switch's own is answered on the same VC out of the port it came in on, with the
//! indication cleared and the CRC-10 recomputed; nothing else of the cell changes.
//! Every other OAM cell (replies, continuity check, AIS/RDI, loopbacks for another
//! location) is switched along the VC like a user cell. F4 flows (VCI 3/4 of a VP)
//! and activation/deactivation are not implemented.

use natm_proto::wire::cell::{Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN};

/// OAM type and function type of a loopback cell (fault management, loopback).
pub const LOOPBACK_TYPE: u8 = 0x18;
/// Length of a loopback location or source ID.
pub const LOCATION_ID_LEN: usize = 16;
/// The location ID meaning "the end point of the segment or connection".
pub const END_POINT: [u8; LOCATION_ID_LEN] = [0xFF; LOCATION_ID_LEN];

const INDICATION: usize = 1;
const LOCATION: core::ops::Range<usize> = 6..6 + LOCATION_ID_LEN;
const CRC_HI: usize = PAYLOAD_LEN - 2;

/// CRC-10 of an OAM payload: the remainder of the 384-bit payload, its CRC bits
/// taken as 0, divided by x^10+x^9+x^5+x^4+x+1 (I.610; specs.md §1.4's vector gives
/// 0x22A).
pub fn crc10(payload: &[u8; PAYLOAD_LEN]) -> u16 {
    const G: u16 = 0x633;
    let mut reg: u16 = 0;
    for (i, &byte) in payload.iter().enumerate() {
        let byte = match i {
            CRC_HI => byte & 0xFC,
            _ if i == PAYLOAD_LEN - 1 => 0,
            _ => byte,
        };
        for bit in (0..8).rev() {
            reg = (reg << 1) | u16::from((byte >> bit) & 1);
            if reg & 0x400 != 0 {
                reg ^= G;
            }
        }
    }
    reg
}

/// The CRC-10 field of an OAM payload.
pub fn crc10_field(payload: &[u8; PAYLOAD_LEN]) -> u16 {
    (u16::from(payload[CRC_HI] & 0x03) << 8) | u16::from(payload[PAYLOAD_LEN - 1])
}

/// Writes the CRC-10 of `payload` into its last ten bits.
pub fn fill_crc10(payload: &mut [u8; PAYLOAD_LEN]) {
    let crc = crc10(payload);
    payload[CRC_HI] = (payload[CRC_HI] & 0xFC) | (crc >> 8) as u8;
    payload[PAYLOAD_LEN - 1] = crc as u8;
}

/// The payload of a cell (the caller has checked nothing but the length).
fn payload(cell: &[u8; CELL_LEN]) -> &[u8; PAYLOAD_LEN] {
    cell.last_chunk::<PAYLOAD_LEN>()
        .expect("a cell is 53 octets, its payload the last 48")
}

/// The answer to `cell` if it is a loopback cell this switch loops back (see the
/// module doc), else `None`. `location` is the switch's own location ID.
pub fn loopback_reply(
    cell: &[u8; CELL_LEN],
    location: &[u8; LOCATION_ID_LEN],
) -> Option<[u8; CELL_LEN]> {
    let pti = Pti::from_bits(cell[3] >> 1);
    let p = payload(cell);
    if !pti.is_oam_f5() || p[0] != LOOPBACK_TYPE || p[INDICATION] & 1 == 0 {
        return None;
    }
    if crc10(p) != crc10_field(p) {
        return None;
    }
    let target = &p[LOCATION];
    if target != END_POINT && target != location {
        return None;
    }
    let mut reply = *cell;
    let mut out = *p;
    out[INDICATION] &= !1;
    fill_crc10(&mut out);
    reply[HEADER_LEN..].copy_from_slice(&out);
    Some(reply)
}

/// A loopback cell's payload, for tests and for a host's OAM ping: correlation
/// `tag`, to `location`, indication set, CRC-10 filled.
pub fn loopback_payload(tag: u32, location: &[u8; LOCATION_ID_LEN]) -> [u8; PAYLOAD_LEN] {
    let mut p = [0x6A; PAYLOAD_LEN];
    p[0] = LOOPBACK_TYPE;
    p[INDICATION] = 0x01;
    p[2..6].copy_from_slice(&tag.to_be_bytes());
    p[LOCATION].copy_from_slice(location);
    p[22..38].fill(0xFF);
    p[CRC_HI..].fill(0);
    fill_crc10(&mut p);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// specs.md §1.4: VPI 1/VCI 32, PTI 5, `18 01 12 34 56 78 FF×32 6A×8 02 2A`.
    fn vector() -> [u8; CELL_LEN] {
        let mut c = [0u8; CELL_LEN];
        c[..5].copy_from_slice(&[0x00, 0x10, 0x02, 0x0A, 0xEB]);
        let p = &mut c[5..];
        p[..6].copy_from_slice(&[0x18, 0x01, 0x12, 0x34, 0x56, 0x78]);
        p[6..38].fill(0xFF);
        p[38..46].fill(0x6A);
        p[46..].copy_from_slice(&[0x02, 0x2A]);
        c
    }

    #[test]
    fn crc10_of_the_specs_vector() {
        let c = vector();
        assert_eq!(crc10(payload(&c)), 0x22A);
        assert_eq!(crc10_field(payload(&c)), 0x22A);
        assert_eq!(&loopback_payload(0x1234_5678, &END_POINT)[..], &c[5..]);
    }

    #[test]
    fn reply_clears_the_indication_and_only_that() {
        let c = vector();
        let r = loopback_reply(&c, &[0; 16]).unwrap();
        assert_eq!(r[..5], c[..5]);
        assert_eq!(r[5 + 1], 0x00);
        assert_eq!(crc10(payload(&r)), crc10_field(payload(&r)));
        assert_eq!(r[5 + 2..5 + 46], c[5 + 2..5 + 46]);
        // The reply itself is not looped again; a bad CRC or another location is not
        // answered.
        assert_eq!(loopback_reply(&r, &[0; 16]), None);
        let mut bad = c;
        bad[20] ^= 1;
        assert_eq!(loopback_reply(&bad, &[0; 16]), None);
        let mut elsewhere = c;
        elsewhere[5..].copy_from_slice(&loopback_payload(1, &[7; 16]));
        assert_eq!(loopback_reply(&elsewhere, &[0; 16]), None);
        assert!(loopback_reply(&elsewhere, &[7; 16]).is_some());
    }
}
