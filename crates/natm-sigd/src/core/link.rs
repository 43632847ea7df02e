//! Signalling links to peer sigds: one [`Saal`] (SSCOP + Q.2931 call control) per
//! peer UDP endpoint, its PDUs carried one per datagram behind the UDP adaptor's VC
//! header as signalling frames on VPI 0/VCI 5 (so a capture is real UNI signalling).

use std::collections::HashMap;

use natm_proto::sig::{CallId, CallParams, Saal, SaalConfig};

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

pub(super) use natm_proto::wire::addr::{from_party as atm, party};
pub(super) use natm_proto::wire::vcframe::{signalling_frame as frame, signalling_pdu as unframe};
