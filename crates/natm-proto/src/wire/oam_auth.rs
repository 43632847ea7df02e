//! Authenticated OAM F5 end-to-end loopback on a sealed call (issue 31: "OAM loopback
//! on a sealed call is authenticated or not answered").
//!
//! A loopback cell has no room beside its 48 standard octets, and a switch on a cell
//! port carries it as one cell, so the authenticator rides in a field I.610 already
//! has: the 16-octet **source ID**, optional and all ones when unused. On a sealed
//! call each end signs what it sends there — a request, and its answer — with
//! HMAC-SHA-256 truncated to 128 bits (RFC 2104; truncation as RFC 4868) over the
//! indication, the correlation tag and the location ID, under a key of its sending
//! direction. The receiving end checks it with the same direction's key; a request or
//! an answer that fails is not answered or matched, only counted. The keys are not
//! the traffic keys themselves (one key, one primitive): each is HKDF-SHA-256
//! (RFC 5869) of a direction's AES-256-GCM key with a label of its own.
//!
//! What it does not do: a segment flow ends at the first switch, which holds no call
//! keys, so segment answers stay unauthenticated (the switch is trusted as the network
//! is). Replays of a signed request are the caller's to refuse (`engine::oam` answers
//! each correlation tag at most once, newer than the last). The cell stays a valid
//! I.610 cell: a switch or Linux reads it as a loopback with a source ID.

use aws_lc_rs::{hkdf, hmac};

use super::oam::{Loopback, LOCATION_ID_LEN};
use super::seal::PathKeys;

/// The HKDF salt: this construction and its version.
const SALT: &[u8] = b"natm OAM F5 loopback v1";
/// The HKDF info: the key's one use.
const INFO: &[u8] = b"source ID authenticator";

/// The loopback keys of one end of a sealed call: `tx` signs what it sends, `rx`
/// checks what the other end sent.
pub struct OamKeys {
    tx: hmac::Key,
    rx: hmac::Key,
}

impl core::fmt::Debug for OamKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("OamKeys(..)")
    }
}

fn derive(traffic: &[u8]) -> hmac::Key {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(traffic);
    let okm = prk
        .expand(&[INFO], hmac::HMAC_SHA256)
        .expect("HMAC-SHA-256's key length is within HKDF's bound");
    hmac::Key::from(okm)
}

/// The authenticator of `l` under `key`: what its source ID must hold.
fn authenticator(key: &hmac::Key, l: &Loopback) -> [u8; LOCATION_ID_LEN] {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(&[u8::from(l.request)]);
    ctx.update(&l.tag.to_be_bytes());
    ctx.update(&l.location);
    let mut out = [0u8; LOCATION_ID_LEN];
    out.copy_from_slice(&ctx.sign().as_ref()[..LOCATION_ID_LEN]);
    out
}

/// Equality of two authenticators in time that does not depend on where they differ.
fn same(a: &[u8; LOCATION_ID_LEN], b: &[u8; LOCATION_ID_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl OamKeys {
    /// The loopback keys of the call whose traffic keys are `keys`.
    pub fn new(keys: &PathKeys) -> OamKeys {
        OamKeys {
            tx: derive(&keys.tx),
            rx: derive(&keys.rx),
        }
    }

    /// `l` with its source ID set to this end's authenticator.
    pub fn sign(&self, l: Loopback) -> Loopback {
        Loopback {
            source: authenticator(&self.tx, &l),
            ..l
        }
    }

    /// Whether `l`'s source ID is the other end's authenticator of it.
    pub fn verify(&self, l: &Loopback) -> bool {
        same(&authenticator(&self.rx, l), &l.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::oam::END_POINT;

    fn keys() -> PathKeys {
        PathKeys {
            tx: [1; 32],
            rx: [2; 32],
        }
    }

    #[test]
    fn what_one_end_signs_the_other_verifies_and_nothing_else_does() {
        let (a, b) = (OamKeys::new(&keys()), OamKeys::new(&keys().reversed()));
        let req = a.sign(Loopback::request(7));
        assert_ne!(req.source, END_POINT);
        assert!(b.verify(&req));
        // Its own end's check fails: a request reflected back is not an answer.
        assert!(!a.verify(&req));
        // The unsigned request, another tag, the indication flipped: refused.
        assert!(!b.verify(&Loopback::request(7)));
        assert!(!b.verify(&Loopback { tag: 8, ..req }));
        assert!(!b.verify(&Loopback {
            request: false,
            ..req
        }));
        // The answer, signed by the other end, verifies at the first.
        let ans = b.sign(Loopback {
            request: false,
            ..req
        });
        assert!(a.verify(&ans));
        // Another call's keys: refused.
        let other = OamKeys::new(&PathKeys {
            tx: [3; 32],
            rx: [4; 32],
        });
        assert!(!other.verify(&req));
    }

    #[test]
    fn a_signed_cell_round_trips_through_its_octets() {
        let a = OamKeys::new(&keys());
        let req = a.sign(Loopback::request(0xDEAD_BEEF));
        let parsed = Loopback::parse(&req.to_bytes()).unwrap();
        assert!(OamKeys::new(&keys().reversed()).verify(&parsed));
    }
}
