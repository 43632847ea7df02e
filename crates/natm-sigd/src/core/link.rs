//! Signalling links to peer sigds: one [`Saal`] (SSCOP + Q.2931 call control) per
//! peer UDP endpoint, its PDUs carried one per datagram behind the UDP adaptor's VC
//! header as signalling frames on VPI 0/VCI 5 (so a capture is real UNI signalling).

use std::collections::HashMap;

use natm_proto::sig::{CallId, CallParams, Saal, SaalConfig};
use natm_proto::wire::vcframe::{self, FrameKind};

/// The signalling VC (ITU-T I.361: VPI 0/VCI 5).
pub(super) const SIGNALLING_VCI: u16 = 5;

/// Most peers sigd keeps links with (each costs a few KiB; a flood of forged sources
/// must not grow memory without bound).
pub(super) const MAX_PEERS: usize = 1024;

/// One peer's link.
#[derive(Debug)]
pub(super) struct PeerLink {
    pub(super) saal: Saal,
    /// Call control's ids → sigd's call ids.
    pub(super) calls: HashMap<CallId, u64>,
    /// Calls waiting for the link to come up: sigd call id and SETUP contents.
    pub(super) pending: Vec<(u64, CallParams)>,
}

impl PeerLink {
    pub(super) fn new(cfg: SaalConfig) -> PeerLink {
        PeerLink {
            saal: Saal::new(cfg),
            calls: HashMap::new(),
            pending: Vec::new(),
        }
    }

    /// Malformed input seen on this link (SSCOP PDUs and Q.2931 messages).
    pub(super) fn malformed(&self) -> u64 {
        self.saal.sscop().stats().bad_pdus + self.saal.calls().stats().malformed
    }
}

/// A datagram carrying one SSCOP PDU.
pub(super) fn frame(pdu: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(vcframe::HEADER_LEN + pdu.len());
    v.extend_from_slice(&vcframe::Repr::new(FrameKind::Signalling, 0, SIGNALLING_VCI).to_bytes());
    v.extend_from_slice(pdu);
    v
}

/// The SSCOP PDU in a datagram, if it is a signalling frame on VPI 0/VCI 5.
pub(super) fn unframe(d: &[u8]) -> Option<&[u8]> {
    match vcframe::Repr::parse_bytes(d) {
        Ok((r, pdu))
            if r.kind == FrameKind::Signalling && r.vpi == 0 && r.vci == SIGNALLING_VCI =>
        {
            Some(pdu)
        }
        _ => None,
    }
}

pub(super) use natm_proto::wire::addr::{from_party as atm, party};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_data_frames_are_not_signalling() {
        let d = frame(b"\x00\x00\x00\x00\x10\x00\x00\x00");
        assert_eq!(unframe(&d), Some(&b"\x00\x00\x00\x00\x10\x00\x00\x00"[..]));
        let mut data = vcframe::Repr::data(0, 5).to_bytes().to_vec();
        data.extend_from_slice(b"x");
        assert_eq!(unframe(&data), None);
        assert_eq!(unframe(b"junk"), None);
    }
}
