//! OAM F5 loopback at the switch (ITU-T I.610 §10.2.4, the subset of
//! `natm_proto::wire::oam`, which holds the cell codec and `wire::crc` its CRC-10).
//!
//! What the switch answers, the same on cell and frame ports: a loopback request
//! (indication set, good CRC-10)
//! * of the **segment** flow (PTI 100; an OAM frame with `C` clear) addressed to the
//!   end point (all ones) or to this switch's location ID — the switch is the end of
//!   the segment that starts at the port it came in on;
//! * of the **end-to-end** flow (PTI 101; `C` set) only if addressed to this switch's
//!   own location ID (I.610 lets an intermediate point loop an end-to-end cell that
//!   names it); one addressed to the end point travels on along the VC, and the far
//!   end answers.
//!
//! The answer leaves on the same VC out of the port the request came in on, with the
//! indication cleared and the CRC-10 recomputed; nothing else changes. Every other OAM
//! cell or frame (answers, continuity check, AIS/RDI, loopbacks for another location)
//! is switched along the VC like a user cell, converted one cell ↔ one OAM frame
//! between cell and frame ports. F4 flows (VCI 3/4 of a VP) and
//! activation/deactivation are not implemented.

use natm_proto::wire::cell::{Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN};
use natm_proto::wire::oam::{self as codec};
pub use natm_proto::wire::oam::{Loopback, Scope, END_POINT, LOCATION_ID_LEN};

/// The answer to the OAM payload `p` of flow `scope`, if this switch (location ID
/// `location`) loops it back (see the module doc).
pub fn loopback_answer(
    scope: Scope,
    p: &[u8],
    location: &[u8; LOCATION_ID_LEN],
) -> Option<[u8; PAYLOAD_LEN]> {
    let l = Loopback::parse(p).ok()?;
    let ours = match scope {
        Scope::Segment => l.location == END_POINT || l.location == *location,
        Scope::EndToEnd => l.location == *location,
    };
    if !l.request || !ours {
        return None;
    }
    Some(codec::answer(p.try_into().ok()?))
}

/// The answer to `cell` if it is a loopback cell this switch loops back, else `None`.
pub fn loopback_reply(
    cell: &[u8; CELL_LEN],
    location: &[u8; LOCATION_ID_LEN],
) -> Option<[u8; CELL_LEN]> {
    let scope = Scope::of_pti(Pti::from_bits(cell[3] >> 1))?;
    let answer = loopback_answer(scope, &cell[HEADER_LEN..], location)?;
    let mut reply = *cell;
    reply[HEADER_LEN..].copy_from_slice(&answer);
    Some(reply)
}

/// A loopback request's payload, for tests: correlation `tag`, to `location`.
pub fn loopback_payload(tag: u32, location: &[u8; LOCATION_ID_LEN]) -> [u8; PAYLOAD_LEN] {
    Loopback {
        location: *location,
        ..Loopback::request(tag)
    }
    .to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// specs.md §1.4: VPI 1/VCI 32, PTI 5, `18 01 12 34 56 78 FF×32 6A×8 02 2A`.
    fn vector(pti: Pti) -> [u8; CELL_LEN] {
        let mut c = [0u8; CELL_LEN];
        c[..5].copy_from_slice(&natm_proto::wire::cell::HeaderRepr::uni(1, 32, pti).to_bytes());
        c[5..].copy_from_slice(&loopback_payload(0x1234_5678, &END_POINT));
        c
    }

    #[test]
    fn segment_requests_are_answered_end_to_end_ones_travel_on() {
        let c = vector(Pti::SegmentOamF5);
        assert_eq!(
            c[..5],
            [0x00, 0x10, 0x02, 0x08, c[4]],
            "the specs header, PTI 4"
        );
        let r = loopback_reply(&c, &[0; 16]).unwrap();
        assert_eq!(r[..5], c[..5]);
        assert_eq!(r[5 + 1], 0x00);
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
        // End to end: the far end's to answer, unless it names this switch.
        let e2e = vector(Pti::EndToEndOamF5);
        assert_eq!(loopback_reply(&e2e, &[0; 16]), None);
        let mut named = e2e;
        named[5..].copy_from_slice(&loopback_payload(1, &[7; 16]));
        assert!(loopback_reply(&named, &[7; 16]).is_some());
    }
}
