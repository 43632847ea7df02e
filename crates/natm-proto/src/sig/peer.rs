//! Who may talk signalling: the peer-control frames on VPI 0/VCI 31 beside the
//! signalling VC, and a stateless admission cookie for peers nobody configured.
//!
//! Departure: Q.2110/Q.2931 have no peer authentication (the UNI trusts the physical
//! link). Over UDP any sender may claim any source, so natm adds, outside SSCOP:
//!
//! - **Admission cookie** (the idea of SCTP's INIT/COOKIE-ECHO, RFC 9260 §5.1): a
//!   responder answers the first SSCOP PDU of an unknown source with a CHALLENGE
//!   carrying a cookie — a time and an HMAC-SHA256 of the source and the time under a
//!   secret only it knows — and the PDU itself. Only a sender that receives at that
//!   source can send the ECHO back; the responder checks the cookie's MAC and age and
//!   only then creates the link. Spoofed sources cost it one MAC and hold nothing.
//! - **Authenticated links**: the Noise frames ([`super::noise`]). Issue 16's
//!   pre-shared-key frames (HELLO, HELLO ACK, SEALED) still parse, so that an end
//!   can drop and count them, but nothing makes or opens them: a pre-shared key is
//!   mixed into the Noise handshake instead (issue 31).
//!
//! The layouts are in docs/wire.md "Peer control frames".

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use crate::time::Instant;
use crate::wire::vcframe::{FrameKind, Repr, HEADER_LEN};

type HmacSha256 = Hmac<Sha256>;

/// The VCI of peer-control frames (VPI 0; a signalling-kind frame).
pub const PEER_VCI: u16 = 31;
/// Octets of an admission cookie: a 4-octet time (seconds) and a 16-octet MAC.
pub const COOKIE_LEN: usize = 20;
/// Octets of a nonce.
pub const NONCE_LEN: usize = 16;
/// Octets of a SEALED frame's tag.
pub const TAG_LEN: usize = 16;
/// Largest SSCOP PDU a CHALLENGE or ECHO carries (a BGN is 8 octets plus its UU).
pub const MAX_ECHOED_PDU: usize = 128;
/// How long a cookie or a responder nonce stays valid, seconds.
pub const COOKIE_LIFETIME_S: u64 = 10;

const CHALLENGE: u8 = 1;
const ECHO: u8 = 2;
const HELLO: u8 = 3;
const HELLO_ACK: u8 = 4;
const SEALED: u8 = 5;
const NOISE_INIT: u8 = 6;
const NOISE_RESP: u8 = 7;
const NOISE_FINAL: u8 = 8;
const NOISE_DATA: u8 = 9;
/// Largest Noise handshake message a frame carries (XX's second is 96 octets).
pub const MAX_HANDSHAKE: usize = 128;
/// Octets of a Noise transport message's AEAD tag.
pub const AEAD_TAG_LEN: usize = 16;
/// SEALED flag: the sender sent the HELLO (it holds `ns`).
const FROM_INITIATOR: u8 = 1;

/// A nonce.
pub type Nonce = [u8; NONCE_LEN];

/// One peer-control frame, borrowed from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control<'a> {
    /// "Echo this cookie with your PDU": the answer to an unknown source's PDU.
    Challenge {
        /// The cookie.
        cookie: &'a [u8; COOKIE_LEN],
        /// The refused SSCOP PDU, sent back so the initiator holds nothing either.
        pdu: &'a [u8],
    },
    /// The cookie back, with the PDU to take now.
    Echo {
        /// The cookie.
        cookie: &'a [u8; COOKIE_LEN],
        /// The SSCOP PDU.
        pdu: &'a [u8],
    },
    /// An initiator's request for a link lifetime's keys.
    Hello {
        /// Its nonce.
        ns: &'a Nonce,
    },
    /// The responder's nonce and its proof of the key.
    HelloAck {
        /// The initiator's nonce.
        ns: &'a Nonce,
        /// The responder's.
        nr: &'a Nonce,
        /// HMAC(key, "ack" ‖ ns ‖ nr), truncated.
        proof: &'a [u8; TAG_LEN],
    },
    /// An authenticated SSCOP PDU.
    Sealed {
        /// The sender sent the HELLO.
        from_initiator: bool,
        /// The initiator's nonce.
        ns: &'a Nonce,
        /// The responder's.
        nr: &'a Nonce,
        /// The sender's counter, one per frame.
        counter: u64,
        /// The SSCOP PDU.
        pdu: &'a [u8],
        /// HMAC(direction key, counter ‖ pdu), truncated.
        tag: &'a [u8; TAG_LEN],
    },
    /// Noise XX's first message (`-> e`): the initiator's index and its ephemeral key.
    NoiseInit {
        /// The initiator's index for this handshake (names it in the answer).
        sender: u32,
        /// The Noise message.
        msg: &'a [u8],
    },
    /// Noise XX's second message (`<- e, ee, s, es`).
    NoiseResp {
        /// The responder's index.
        sender: u32,
        /// The initiator's index, from its `NoiseInit`.
        receiver: u32,
        /// The Noise message.
        msg: &'a [u8],
    },
    /// Noise XX's third message (`-> s, se`, and `psk` in XXpsk3).
    NoiseFinal {
        /// The responder's index.
        receiver: u32,
        /// The Noise message.
        msg: &'a [u8],
    },
    /// One SSCOP PDU in a Noise transport message.
    NoiseData {
        /// The receiving end's index for the session.
        receiver: u32,
        /// The sender's counter: the AEAD nonce, and the replay window's key.
        counter: u64,
        /// The encrypted PDU and its 16-octet tag.
        ciphertext: &'a [u8],
    },
}

/// Why a datagram is not a peer-control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ControlError {
    /// Not a signalling-kind frame on VPI 0/VCI 31.
    #[error("not a peer-control frame (signalling kind, VPI 0/VCI 31)")]
    NotControl,
    /// An unknown type octet.
    #[error("unknown peer-control frame type {0}")]
    UnknownType(u8),
    /// Shorter than its type needs, or an echoed PDU over 128 octets.
    #[error("peer-control frame of type {0} has a bad length")]
    BadLength(u8),
}

fn arr<const N: usize>(b: &[u8]) -> &[u8; N] {
    b.try_into().expect("length checked by the caller")
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(*arr(&b[at..at + 4]))
}

impl<'a> Control<'a> {
    /// Parse a whole datagram (VC header included).
    pub fn parse(datagram: &'a [u8]) -> Result<Control<'a>, ControlError> {
        let (r, body) = Repr::parse_bytes(datagram).map_err(|_| ControlError::NotControl)?;
        if r.kind != FrameKind::Signalling || r.vpi != 0 || r.vci != PEER_VCI {
            return Err(ControlError::NotControl);
        }
        let (&ty, rest) = body.split_first().ok_or(ControlError::NotControl)?;
        let bad = ControlError::BadLength(ty);
        match ty {
            CHALLENGE | ECHO => {
                if rest.len() < COOKIE_LEN || rest.len() > COOKIE_LEN + MAX_ECHOED_PDU {
                    return Err(bad);
                }
                let (cookie, pdu) = rest.split_at(COOKIE_LEN);
                let cookie = arr(cookie);
                Ok(if ty == CHALLENGE {
                    Control::Challenge { cookie, pdu }
                } else {
                    Control::Echo { cookie, pdu }
                })
            }
            HELLO if rest.len() == NONCE_LEN => Ok(Control::Hello { ns: arr(rest) }),
            HELLO_ACK if rest.len() == 2 * NONCE_LEN + TAG_LEN => Ok(Control::HelloAck {
                ns: arr(&rest[..NONCE_LEN]),
                nr: arr(&rest[NONCE_LEN..2 * NONCE_LEN]),
                proof: arr(&rest[2 * NONCE_LEN..]),
            }),
            SEALED if rest.len() >= 1 + 2 * NONCE_LEN + 8 + TAG_LEN => {
                let flags = rest[0];
                let ns = arr(&rest[1..1 + NONCE_LEN]);
                let nr = arr(&rest[1 + NONCE_LEN..1 + 2 * NONCE_LEN]);
                let c = 1 + 2 * NONCE_LEN;
                let counter = u64::from_be_bytes(*arr(&rest[c..c + 8]));
                let (pdu, tag) = rest[c + 8..].split_at(rest.len() - c - 8 - TAG_LEN);
                Ok(Control::Sealed {
                    from_initiator: flags & FROM_INITIATOR != 0,
                    ns,
                    nr,
                    counter,
                    pdu,
                    tag: arr(tag),
                })
            }
            NOISE_INIT if rest.len() > 4 && rest.len() <= 4 + MAX_HANDSHAKE => {
                Ok(Control::NoiseInit {
                    sender: u32_at(rest, 0),
                    msg: &rest[4..],
                })
            }
            NOISE_RESP if rest.len() > 8 && rest.len() <= 8 + MAX_HANDSHAKE => {
                Ok(Control::NoiseResp {
                    sender: u32_at(rest, 0),
                    receiver: u32_at(rest, 4),
                    msg: &rest[8..],
                })
            }
            NOISE_FINAL if rest.len() > 4 && rest.len() <= 4 + MAX_HANDSHAKE => {
                Ok(Control::NoiseFinal {
                    receiver: u32_at(rest, 0),
                    msg: &rest[4..],
                })
            }
            NOISE_DATA if rest.len() >= 12 + AEAD_TAG_LEN => Ok(Control::NoiseData {
                receiver: u32_at(rest, 0),
                counter: u64::from_be_bytes(*arr(&rest[4..12])),
                ciphertext: &rest[12..],
            }),
            HELLO | HELLO_ACK | SEALED | NOISE_INIT | NOISE_RESP | NOISE_FINAL | NOISE_DATA => {
                Err(bad)
            }
            other => Err(ControlError::UnknownType(other)),
        }
    }

    /// The datagram (VC header included).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + 64);
        v.extend_from_slice(&Repr::new(FrameKind::Signalling, 0, PEER_VCI).to_bytes());
        match *self {
            Control::Challenge { cookie, pdu } | Control::Echo { cookie, pdu } => {
                v.push(if matches!(self, Control::Challenge { .. }) {
                    CHALLENGE
                } else {
                    ECHO
                });
                v.extend_from_slice(cookie);
                v.extend_from_slice(&pdu[..pdu.len().min(MAX_ECHOED_PDU)]);
            }
            Control::Hello { ns } => {
                v.push(HELLO);
                v.extend_from_slice(ns);
            }
            Control::HelloAck { ns, nr, proof } => {
                v.push(HELLO_ACK);
                v.extend_from_slice(ns);
                v.extend_from_slice(nr);
                v.extend_from_slice(proof);
            }
            Control::Sealed {
                from_initiator,
                ns,
                nr,
                counter,
                pdu,
                tag,
            } => {
                v.push(SEALED);
                v.push(if from_initiator { FROM_INITIATOR } else { 0 });
                v.extend_from_slice(ns);
                v.extend_from_slice(nr);
                v.extend_from_slice(&counter.to_be_bytes());
                v.extend_from_slice(pdu);
                v.extend_from_slice(tag);
            }
            Control::NoiseInit { sender, msg } => {
                v.push(NOISE_INIT);
                v.extend_from_slice(&sender.to_be_bytes());
                v.extend_from_slice(&msg[..msg.len().min(MAX_HANDSHAKE)]);
            }
            Control::NoiseResp {
                sender,
                receiver,
                msg,
            } => {
                v.push(NOISE_RESP);
                v.extend_from_slice(&sender.to_be_bytes());
                v.extend_from_slice(&receiver.to_be_bytes());
                v.extend_from_slice(&msg[..msg.len().min(MAX_HANDSHAKE)]);
            }
            Control::NoiseFinal { receiver, msg } => {
                v.push(NOISE_FINAL);
                v.extend_from_slice(&receiver.to_be_bytes());
                v.extend_from_slice(&msg[..msg.len().min(MAX_HANDSHAKE)]);
            }
            Control::NoiseData {
                receiver,
                counter,
                ciphertext,
            } => {
                v.push(NOISE_DATA);
                v.extend_from_slice(&receiver.to_be_bytes());
                v.extend_from_slice(&counter.to_be_bytes());
                v.extend_from_slice(ciphertext);
            }
        }
        v
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn mac16(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let full = mac(key, parts);
    let mut t = [0; 16];
    t.copy_from_slice(&full[..16]);
    t
}

/// Compare in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn secs(now: Instant) -> u32 {
    // Wraps after 136 years of uptime; compared with wrapping arithmetic.
    (now.as_nanos() / 1_000_000_000) as u32
}

fn fresh(minted: u32, now: Instant) -> bool {
    u64::from(secs(now).wrapping_sub(minted)) <= COOKIE_LIFETIME_S
}

/// A cookie for the source `peer` (its address, encoded by the caller) at `now`.
pub fn mint_cookie(secret: &[u8; 32], peer: &[u8], now: Instant) -> [u8; COOKIE_LEN] {
    let t = secs(now).to_be_bytes();
    let m = mac16(secret, &[b"natm cookie", &t, peer]);
    let mut c = [0; COOKIE_LEN];
    c[..4].copy_from_slice(&t);
    c[4..].copy_from_slice(&m);
    c
}

/// Whether `cookie` was minted by this secret for `peer` no more than
/// [`COOKIE_LIFETIME_S`] ago.
pub fn check_cookie(
    secret: &[u8; 32],
    peer: &[u8],
    cookie: &[u8; COOKIE_LEN],
    now: Instant,
) -> bool {
    let t: [u8; 4] = cookie[..4].try_into().expect("4 octets");
    fresh(u32::from_be_bytes(t), now)
        && same(&mac16(secret, &[b"natm cookie", &t, peer]), &cookie[4..])
}

/// Counters already taken, for the 64 below the highest (IPsec's anti-replay window,
/// RFC 4303 §3.4.3).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReplayWindow {
    top: u64,
    seen: u64,
    any: bool,
}

impl ReplayWindow {
    pub(crate) fn fresh(&self, c: u64) -> bool {
        if !self.any || c > self.top {
            return true;
        }
        let back = self.top - c;
        back < 64 && self.seen & (1 << back) == 0
    }

    pub(crate) fn take(&mut self, c: u64) {
        if !self.any {
            self.any = true;
            self.top = c;
            self.seen = 1;
        } else if c > self.top {
            let shift = c - self.top;
            self.seen = if shift >= 64 { 0 } else { self.seen << shift } | 1;
            self.top = c;
        } else {
            self.seen |= 1 << (self.top - c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> Instant {
        Instant::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn frames_round_trip_and_junk_is_refused() {
        let c = [7; COOKIE_LEN];
        let n = [1; NONCE_LEN];
        let tag = [9; TAG_LEN];
        for f in [
            Control::Challenge {
                cookie: &c,
                pdu: b"bgn.",
            },
            Control::Echo {
                cookie: &c,
                pdu: b"",
            },
            Control::Hello { ns: &n },
            Control::HelloAck {
                ns: &n,
                nr: &n,
                proof: &tag,
            },
            Control::Sealed {
                from_initiator: true,
                ns: &n,
                nr: &n,
                counter: 5,
                pdu: b"sd",
                tag: &tag,
            },
            Control::NoiseInit {
                sender: 7,
                msg: &[1; 32],
            },
            Control::NoiseResp {
                sender: 8,
                receiver: 7,
                msg: &[2; 96],
            },
            Control::NoiseFinal {
                receiver: 8,
                msg: &[3; 64],
            },
            Control::NoiseData {
                receiver: 8,
                counter: 9,
                ciphertext: &[4; 24],
            },
        ] {
            let b = f.to_bytes();
            assert_eq!(Control::parse(&b), Ok(f));
        }
        let hello = Control::Hello { ns: &n }.to_bytes();
        assert_eq!(
            Control::parse(&hello[..hello.len() - 1]),
            Err(ControlError::BadLength(HELLO))
        );
        let short = Control::NoiseData {
            receiver: 1,
            counter: 2,
            ciphertext: &[0; AEAD_TAG_LEN],
        }
        .to_bytes();
        assert_eq!(
            Control::parse(&short[..short.len() - 1]),
            Err(ControlError::BadLength(NOISE_DATA))
        );
        let mut odd = hello.clone();
        odd[HEADER_LEN] = 10;
        assert_eq!(Control::parse(&odd), Err(ControlError::UnknownType(10)));
        assert_eq!(
            Control::parse(&crate::wire::vcframe::signalling_frame(b"x")),
            Err(ControlError::NotControl)
        );
    }

    #[test]
    fn cookies_bind_source_and_expire() {
        let s = [3; 32];
        let c = mint_cookie(&s, b"10.0.0.9:1", t(100));
        assert!(check_cookie(&s, b"10.0.0.9:1", &c, t(105)));
        assert!(!check_cookie(&s, b"10.0.0.9:2", &c, t(105)));
        assert!(!check_cookie(&[4; 32], b"10.0.0.9:1", &c, t(105)));
        assert!(!check_cookie(
            &s,
            b"10.0.0.9:1",
            &c,
            t(100 + COOKIE_LIFETIME_S + 1)
        ));
    }

    /// Two ends, A initiating; returns A's and B's PDU inboxes after `pdus` from A.
    #[test]
    fn replay_window_takes_reordering_and_refuses_repeats() {
        let mut w = ReplayWindow::default();
        for c in [5, 3, 7, 4] {
            assert!(w.fresh(c));
            w.take(c);
        }
        assert!(!w.fresh(3) && !w.fresh(7) && w.fresh(6));
        w.take(200);
        assert!(!w.fresh(100) && w.fresh(199));
    }
}
