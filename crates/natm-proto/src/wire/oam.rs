//! OAM F5 loopback cells (ITU-T I.610 §10.2.4; the subset natm implements), in their
//! cell form and their frame form.
//!
//! ```text
//! payload octet 1      OAM type 0001 (fault management) | function type 1000 (loopback)
//! octet 2              7 reserved bits | loopback indication (1 = to be looped back)
//! octets 3-6           correlation tag
//! octets 7-22          loopback location ID (all ones: the end point)
//! octets 23-38         source ID
//! octets 39-46         unused (0x6A); a natm end puts its call's cookie in 39-42
//!                      (`endpoint::host::CALL_MARK`)
//! octets 47-48         6 reserved bits | CRC-10 (x^10+x^9+x^5+x^4+x+1, `wire::crc`)
//! ```
//!
//! An F5 flow rides the VC it checks: PTI 100 is a *segment* flow (answered by the
//! end of the segment — in natm the first switch), PTI 101 an *end-to-end* flow
//! (answered by the far end of the connection). A loopback cell with the indication
//! set is answered by the end point it names, on the same VC in the other direction,
//! with the indication cleared and the CRC-10 recomputed; nothing else changes, so the
//! sender matches the answer by its correlation tag.
//!
//! **The frame form.** In frame mode (`wire::vcframe`) an OAM cell travels as a frame
//! of kind OAM whose SDU is the cell's 48-octet payload. The cell header's PTI has no
//! field of its own there: the frame header's `C` bit carries the PTI's last bit
//! (0: segment, PTI 100; 1: end-to-end, PTI 101) — an OAM cell has no EFCI bit, so
//! `C` is free on an OAM frame. A switch converting between frame and cell ports maps
//! one OAM frame to one OAM cell and back with this rule.
//!
//! Not implemented: F4 flows (VCI 3/4 of a VP), continuity check, AIS/RDI,
//! activation/deactivation; they are not parsed here ([`OamError::NotLoopback`]).

use thiserror::Error;

use super::cell::{Pti, PAYLOAD_LEN};
use super::crc::{crc10_field, crc10_oam, fill_crc10};
use super::vcframe::{FrameKind, Repr as FrameRepr};

/// OAM type and function type of a loopback cell (fault management, loopback).
pub const LOOPBACK_TYPE: u8 = 0x18;
/// Length of a loopback location or source ID.
pub const LOCATION_ID_LEN: usize = 16;
/// The location ID meaning "the end point of the segment or connection".
pub const END_POINT: [u8; LOCATION_ID_LEN] = [0xFF; LOCATION_ID_LEN];
/// What unused octets of an OAM cell hold (I.610).
pub const UNUSED: u8 = 0x6A;

mod field {
    use super::LOCATION_ID_LEN;
    pub(super) const TYPE: usize = 0;
    pub(super) const INDICATION: usize = 1;
    pub(super) const TAG: core::ops::Range<usize> = 2..6;
    pub(super) const LOCATION: core::ops::Range<usize> = 6..6 + LOCATION_ID_LEN;
    pub(super) const SOURCE: core::ops::Range<usize> = 6 + LOCATION_ID_LEN..6 + 2 * LOCATION_ID_LEN;
    pub(super) const UNUSED: core::ops::Range<usize> = 6 + 2 * LOCATION_ID_LEN..46;
}

/// Which F5 flow an OAM cell belongs to (its PTI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// PTI 100: answered at the end of the segment (the first switch).
    Segment,
    /// PTI 101: answered at the far end of the connection.
    EndToEnd,
}

impl Scope {
    /// The cell header's PTI of this flow.
    pub const fn pti(self) -> Pti {
        match self {
            Scope::Segment => Pti::SegmentOamF5,
            Scope::EndToEnd => Pti::EndToEndOamF5,
        }
    }

    /// The flow of a cell with `pti`; `None` if it is not an F5 OAM cell.
    pub const fn of_pti(pti: Pti) -> Option<Scope> {
        match pti {
            Pti::SegmentOamF5 => Some(Scope::Segment),
            Pti::EndToEndOamF5 => Some(Scope::EndToEnd),
            _ => None,
        }
    }

    /// The flow of an OAM frame (its `C` bit, see the module doc).
    pub const fn of_frame(header: &FrameRepr) -> Scope {
        if header.ci {
            Scope::EndToEnd
        } else {
            Scope::Segment
        }
    }

    /// The VC header of an OAM frame of this flow on `vpi`/`vci`.
    pub fn frame_header(self, vpi: u8, vci: u16) -> FrameRepr {
        FrameRepr {
            ci: self == Scope::EndToEnd,
            ..FrameRepr::new(FrameKind::Oam, vpi, vci)
        }
    }
}

impl core::fmt::Display for Scope {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Scope::Segment => "segment",
            Scope::EndToEnd => "end-to-end",
        })
    }
}

/// Why an OAM payload is not a loopback cell natm reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum OamError {
    /// An OAM cell payload is 48 octets.
    #[error("OAM payload of {0} octets is not the {PAYLOAD_LEN} of a cell")]
    Length(usize),
    /// Another OAM type or function (continuity check, AIS, ...).
    #[error("OAM type/function {0:#04x} is not loopback ({LOOPBACK_TYPE:#04x})")]
    NotLoopback(u8),
    /// The CRC-10 does not match the payload.
    #[error("OAM CRC-10 {field:#05x} does not match the payload's {computed:#05x}")]
    Crc {
        /// The CRC-10 field.
        field: u16,
        /// The CRC-10 of the payload.
        computed: u16,
    },
}

/// A loopback cell's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loopback {
    /// The loopback indication: true asks the addressed end point to loop it back.
    pub request: bool,
    /// The correlation tag the sender matches answers by.
    pub tag: u32,
    /// Who is to loop it back ([`END_POINT`]: the end of the segment or connection).
    pub location: [u8; LOCATION_ID_LEN],
    /// Who sent it (all ones: not said).
    pub source: [u8; LOCATION_ID_LEN],
}

/// The loopback cell in a frame's OAM payload: the first [`PAYLOAD_LEN`] octets when
/// the rest is zero padding (a path MTU probe, RFC 8899: a request padded to the
/// datagram size probed, in a UDP frame only), else the payload as it is (which
/// [`Loopback::parse`] then refuses unless it is one cell).
pub fn unpad(payload: &[u8]) -> &[u8] {
    match payload.split_at_checked(PAYLOAD_LEN) {
        Some((cell, pad)) if pad.iter().all(|&b| b == 0) => cell,
        _ => payload,
    }
}

impl Loopback {
    /// A request to the end point, from nobody in particular, with `tag`.
    pub const fn request(tag: u32) -> Loopback {
        Loopback {
            request: true,
            tag,
            location: END_POINT,
            source: END_POINT,
        }
    }

    /// Reads a loopback cell payload: 48 octets, loopback type, good CRC-10. The
    /// reserved bits and unused octets are not checked (I.610 receivers ignore them).
    pub fn parse(payload: &[u8]) -> Result<Loopback, OamError> {
        let p: &[u8; PAYLOAD_LEN] = payload
            .try_into()
            .map_err(|_| OamError::Length(payload.len()))?;
        if p[field::TYPE] != LOOPBACK_TYPE {
            return Err(OamError::NotLoopback(p[field::TYPE]));
        }
        let (computed, field) = (crc10_oam(p), crc10_field(p));
        if computed != field {
            return Err(OamError::Crc { field, computed });
        }
        let id = |r: core::ops::Range<usize>| {
            let mut a = [0u8; LOCATION_ID_LEN];
            a.copy_from_slice(&p[r]);
            a
        };
        Ok(Loopback {
            request: p[field::INDICATION] & 1 == 1,
            tag: u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
            location: id(field::LOCATION),
            source: id(field::SOURCE),
        })
    }

    /// The payload: reserved bits 0, unused octets 0x6A, CRC-10 filled.
    pub fn to_bytes(&self) -> [u8; PAYLOAD_LEN] {
        let mut p = [0u8; PAYLOAD_LEN];
        p[field::TYPE] = LOOPBACK_TYPE;
        p[field::INDICATION] = u8::from(self.request);
        p[field::TAG].copy_from_slice(&self.tag.to_be_bytes());
        p[field::LOCATION].copy_from_slice(&self.location);
        p[field::SOURCE].copy_from_slice(&self.source);
        p[field::UNUSED].fill(UNUSED);
        fill_crc10(&mut p);
        p
    }
}

/// The answer to a loopback request `payload` (already parsed as one): the same
/// octets with the indication cleared and the CRC-10 recomputed (I.610: the looping
/// point changes nothing else, reserved bits included).
pub fn answer(payload: &[u8; PAYLOAD_LEN]) -> [u8; PAYLOAD_LEN] {
    let mut out = *payload;
    out[field::INDICATION] &= !1;
    fill_crc10(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// specs.md §1.4's loopback cell payload: `18 01 12 34 56 78 FF×32 6A×8 02 2A`.
    fn vector() -> [u8; PAYLOAD_LEN] {
        let mut p = [0u8; PAYLOAD_LEN];
        p[..6].copy_from_slice(&[0x18, 0x01, 0x12, 0x34, 0x56, 0x78]);
        p[6..38].fill(0xFF);
        p[38..46].fill(0x6A);
        p[46..].copy_from_slice(&[0x02, 0x2A]);
        p
    }

    #[test]
    fn the_specs_vector_parses_and_emits_byte_exact() {
        let l = Loopback::parse(&vector()).unwrap();
        assert_eq!(l, Loopback::request(0x1234_5678));
        assert_eq!(l.to_bytes(), vector());
    }

    #[test]
    fn the_answer_clears_the_indication_and_only_that() {
        let mut req = vector();
        req[1] |= 0x80; // a reserved bit the looping point must keep
        req[46] |= 0x40;
        fill_crc10(&mut req);
        let a = answer(&req);
        let l = Loopback::parse(&a).unwrap();
        assert!(!l.request);
        assert_eq!(l.tag, 0x1234_5678);
        assert_eq!(a[1], 0x80);
        assert_eq!(a[2..46], req[2..46]);
        assert_eq!(a[46] & 0xFC, req[46] & 0xFC);
    }

    #[test]
    fn malformed_payloads_are_typed_errors() {
        assert_eq!(Loopback::parse(&[0x18; 47]), Err(OamError::Length(47)));
        assert_eq!(Loopback::parse(&[0x18; 49]), Err(OamError::Length(49)));
        let mut cc = vector();
        cc[0] = 0x14; // continuity check
        fill_crc10(&mut cc);
        assert_eq!(Loopback::parse(&cc), Err(OamError::NotLoopback(0x14)));
        let mut bad = vector();
        bad[20] ^= 1;
        assert!(matches!(
            Loopback::parse(&bad),
            Err(OamError::Crc { field: 0x22A, .. })
        ));
    }

    #[test]
    fn the_frame_form_carries_the_scope_in_the_c_bit() {
        for scope in [Scope::Segment, Scope::EndToEnd] {
            let h = scope.frame_header(0, 33);
            assert_eq!(h.kind, FrameKind::Oam);
            let (back, _) = FrameRepr::parse_bytes(&h.to_bytes()).unwrap();
            assert_eq!(Scope::of_frame(&back), scope);
            assert_eq!(Scope::of_pti(scope.pti()), Some(scope));
        }
        assert_eq!(Scope::of_pti(Pti::UserData), None);
    }
}
