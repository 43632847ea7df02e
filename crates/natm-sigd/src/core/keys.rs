//! Per-call TPDU keys (issue 16, docs/decisions/0016-sealed-tpdus.md): the
//! caller's sigd puts an ephemeral X25519 share in SETUP's natm IE, the callee's sigd
//! answers with its own in CONNECT, and each derives the call's two traffic keys
//! (`wire::seal`), which it hands to its application in `Connected`/`Accepted`. The
//! private halves never leave sigd, the keys never leave the host.
//!
//! Who decides: the caller. It offers a share when the QoS says `encrypt=on`, or says
//! nothing and the peer is on another host; the callee answers any share it is
//! offered unless the QoS says `encrypt=off`. A peer that answers without a share
//! (Linux-ATM through a switch, natm before issue 16) gets clear TPDUs — unless the
//! caller asked for `encrypt=on`, whose call is then released.

use std::net::{IpAddr, SocketAddr};

use natm_proto::wire::qos::Qos;
use natm_proto::wire::seal::{KeyShare, PathKeys, SHARE_LEN};

/// A call's key exchange as sigd holds it.
#[derive(Debug, Default)]
pub(super) struct CallKeys {
    /// This side's ephemeral key, between the SETUP it sent and the CONNECT.
    pub(super) mine: Option<KeyShare>,
    /// The caller's share from SETUP, until this side answers.
    pub(super) offered: Option<[u8; SHARE_LEN]>,
    /// The call's traffic keys as this side uses them, once agreed.
    pub(super) agreed: Option<PathKeys>,
}

/// Whether a caller encrypts by default: the QoS's `encrypt=`, else whether the
/// peer (`peer`, the signalling peer's address) is on another host than this side's
/// data endpoint `own`. Bare AAL5 VCs have no TPDU to seal.
pub(super) fn wanted(qos: &Qos, peer: IpAddr, own: SocketAddr) -> bool {
    if qos.is_bare() {
        return false;
    }
    qos.transport()
        .encrypt
        .unwrap_or_else(|| !same_host(peer, own.ip()))
}

/// Whether `peer` is this host as far as sigd can tell: a loopback address, or the
/// address of this side's data endpoint.
pub(super) fn same_host(peer: IpAddr, own: IpAddr) -> bool {
    peer.is_loopback() || peer == own || peer.is_unspecified()
}

/// The QoS asks for encryption outright (`encrypt=on`).
pub(super) fn required(qos: &Qos) -> bool {
    qos.transport().encrypt == Some(true)
}

/// The QoS refuses encryption (`encrypt=off`).
pub(super) fn refused(qos: &Qos) -> bool {
    qos.transport().encrypt == Some(false)
}

/// Fresh randomness for key shares: the operating system's, never the core's
/// seeded id stream (which tests fix).
pub(super) fn share() -> Option<KeyShare> {
    KeyShare::generate(&aws_lc_rs::rand::SystemRandom::new()).ok()
}

/// Keys for a call between two applications of this host (`encrypt=on` only): both
/// drawn from the operating system; the callee's are the caller's reversed.
pub(super) fn local() -> Option<PathKeys> {
    PathKeys::random(&aws_lc_rs::rand::SystemRandom::new()).ok()
}
