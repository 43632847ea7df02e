//! Signalling links to peer sigds: one [`Saal`] (SSCOP + Q.2931 call control) per
//! peer UDP endpoint, its PDUs carried one per datagram behind the UDP adaptor's VC
//! header as signalling frames on VPI 0/VCI 5 (so a capture is real UNI signalling).

use std::collections::HashMap;

use natm_proto::sig::noise::NoiseLink;
use natm_proto::sig::{CallId, CallParams, Saal, SaalConfig};
use natm_proto::time::Instant;

/// How a link's frames are authenticated.
#[derive(Debug)]
pub(super) enum LinkAuth {
    /// Not at all: a `[[peer]]` (a sigd's or a switch's) with `clear = true`.
    Clear,
    /// A peer sigd's or a switch's link (`natm_proto::sig::noise`): the default; a
    /// configured key is mixed into its handshake (`noise+psk`).
    Noise(Box<NoiseLink>),
}

impl LinkAuth {
    pub(super) fn is_clear(&self) -> bool {
        matches!(self, LinkAuth::Clear)
    }

    /// Its name in `natm stat`.
    pub(super) fn name(&self) -> &'static str {
        match self {
            LinkAuth::Clear => "clear",
            LinkAuth::Noise(n) if n.has_psk() => "noise+psk",
            LinkAuth::Noise(_) => "noise",
        }
    }

    pub(super) fn has_keys(&self) -> bool {
        match self {
            LinkAuth::Clear => false,
            LinkAuth::Noise(n) => n.has_keys(),
        }
    }
}

/// One peer's link.
#[derive(Debug)]
pub(super) struct PeerLink {
    pub(super) saal: Saal,
    /// Call control's ids → sigd's call ids.
    pub(super) calls: HashMap<CallId, u64>,
    /// Calls waiting for the link to come up: sigd call id and SETUP contents.
    pub(super) pending: Vec<(u64, CallParams)>,
    /// The peer is in the configuration (a route, a switch, a `[[peer]]`); else it
    /// was admitted by a cookie echo.
    pub(super) configured: bool,
    /// The peer is a switch: trusted for any caller, never expired.
    pub(super) switch: bool,
    /// How its frames are authenticated.
    pub(super) auth: LinkAuth,
    /// When a call last started or ended on the link (or the link was made): an idle
    /// link expires `[peers] idle_ms` after it.
    pub(super) last_used: Instant,
    /// When it last answered a first Noise handshake message.
    pub(super) last_answer: Option<Instant>,
    /// Guaranteed bit/s (the larger direction) held by this peer's calls that wait
    /// for the called application's answer.
    pub(super) half_open_bps: u64,
}

impl PeerLink {
    pub(super) fn new(cfg: SaalConfig, now: Instant) -> PeerLink {
        PeerLink {
            saal: Saal::new(cfg),
            calls: HashMap::new(),
            pending: Vec::new(),
            configured: false,
            switch: false,
            auth: LinkAuth::Clear,
            last_used: now,
            last_answer: None,
            half_open_bps: 0,
        }
    }

    /// Holds no call and waits for none.
    pub(super) fn is_idle(&self) -> bool {
        self.calls.is_empty() && self.pending.is_empty()
    }

    /// Malformed input seen on this link (SSCOP PDUs and Q.2931 messages).
    pub(super) fn malformed(&self) -> u64 {
        self.saal.sscop().stats().bad_pdus + self.saal.calls().stats().malformed
    }
}

pub(super) use natm_proto::wire::addr::{from_party as atm, party};
pub(super) use natm_proto::wire::vcframe::{signalling_frame as frame, signalling_pdu as unframe};
