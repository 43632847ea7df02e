//! Who may talk signalling: the peer-control frames on VPI 0/VCI 31 beside the
//! signalling VC, a stateless admission cookie for peers nobody configured, and
//! pre-shared-key authentication of a signalling link ([`PeerAuth`]).
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
//! - **Authenticated links** (per peer, with a pre-shared key): the initiator sends a
//!   HELLO with a fresh nonce `ns`; the responder, holding nothing, answers with a
//!   nonce `nr` derived from `ns`, the time and its secret (so it can recheck it
//!   later) and a proof that it knows the key. From then on every SSCOP PDU goes in a
//!   SEALED frame naming `(ns, nr)`, with a per-direction counter and an HMAC-SHA256
//!   tag (16 octets) under keys derived from the key and both nonces. A link
//!   lifetime's keys are new each time, so a capture from an earlier lifetime never
//!   verifies; within one, a 64-counter window refuses replays. A forged SSCOP END,
//!   RS or ER without the key fails the tag and is dropped.
//!
//! The layouts are in docs/wire.md "Peer control frames".

use std::collections::VecDeque;

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

/// A responder's nonce for `ns` from `peer` at `now`: a time and a MAC, so it can be
/// rechecked later without having been stored.
fn responder_nonce(secret: &[u8; 32], peer: &[u8], ns: &Nonce, now: Instant) -> Nonce {
    let t = secs(now).to_be_bytes();
    let m = mac(secret, &[b"natm nr", &t, peer, ns]);
    let mut n = [0; NONCE_LEN];
    n[..4].copy_from_slice(&t);
    n[4..].copy_from_slice(&m[..NONCE_LEN - 4]);
    n
}

fn check_responder_nonce(
    secret: &[u8; 32],
    peer: &[u8],
    ns: &Nonce,
    nr: &Nonce,
    now: Instant,
) -> bool {
    let t: [u8; 4] = nr[..4].try_into().expect("4 octets");
    let m = mac(secret, &[b"natm nr", &t, peer, ns]);
    fresh(u32::from_be_bytes(t), now) && same(&m[..NONCE_LEN - 4], &nr[4..])
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

/// One link lifetime's keys.
#[derive(Debug, Clone)]
struct Session {
    ns: Nonce,
    nr: Nonce,
    /// This end sent the HELLO.
    initiator: bool,
    tx_key: [u8; 32],
    rx_key: [u8; 32],
    tx_counter: u64,
    rx: ReplayWindow,
}

impl Session {
    fn new(psk: &[u8], ns: Nonce, nr: Nonce, initiator: bool) -> Session {
        let k = mac(psk, &[b"natm link", &ns, &nr]);
        let i2r = mac(&k, &[b"initiator to responder"]);
        let r2i = mac(&k, &[b"responder to initiator"]);
        let (tx_key, rx_key) = if initiator { (i2r, r2i) } else { (r2i, i2r) };
        Session {
            ns,
            nr,
            initiator,
            tx_key,
            rx_key,
            tx_counter: 0,
            rx: ReplayWindow::default(),
        }
    }
}

/// Most link lifetimes kept at once (a new one from each end's HELLO, and the one
/// before while frames sealed under it are in flight).
const MAX_SESSIONS: usize = 4;
/// Most PDUs held while the keys are being agreed (SSCOP retransmits what is lost).
const MAX_HELD: usize = 64;
/// How often a HELLO is repeated while PDUs wait.
const HELLO_EVERY_NS: u64 = 250_000_000;

/// What [`PeerAuth::receive`] found in a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// An authenticated SSCOP PDU for the link.
    Pdu(Vec<u8>),
    /// Datagrams to send back to the peer (a HELLO ACK; PDUs released by new keys).
    Send(Vec<Vec<u8>>),
}

/// Why a datagram from the peer was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AuthError {
    /// Not a peer-control frame (plain SSCOP from a peer that must authenticate).
    #[error("not an authenticated frame: {0}")]
    Frame(#[from] ControlError),
    /// A proof or tag that does not verify, or keys this end never agreed to.
    #[error("authentication failed")]
    BadTag,
    /// A counter already taken or below the window.
    #[error("replayed frame")]
    Replay,
    /// A responder nonce older than the cookie lifetime for a lifetime not known.
    #[error("stale keys")]
    Stale,
    /// A frame this state does not take (an ACK for no HELLO).
    #[error("unexpected frame")]
    Unexpected,
}

/// The authentication of one signalling link with a pre-shared key: seals what SSCOP
/// sends, opens what arrives, agrees keys per link lifetime. Sans-IO: the caller
/// passes the time, its local secret and fresh nonces.
#[derive(Debug)]
pub struct PeerAuth {
    psk: Vec<u8>,
    /// The peer's address as the caller encodes it (bound into responder nonces).
    peer: Vec<u8>,
    sessions: VecDeque<Session>,
    /// This end's outstanding HELLO: its nonce and when it went.
    hello: Option<(Nonce, Instant)>,
    held: VecDeque<Vec<u8>>,
}

impl PeerAuth {
    /// Authentication with the pre-shared key `psk` toward the peer named `peer`.
    pub fn new(psk: &[u8], peer: &[u8]) -> PeerAuth {
        PeerAuth {
            psk: psk.to_vec(),
            peer: peer.to_vec(),
            sessions: VecDeque::new(),
            hello: None,
            held: VecDeque::new(),
        }
    }

    /// Whether keys are agreed for the current link lifetime.
    pub fn has_keys(&self) -> bool {
        !self.sessions.is_empty()
    }

    /// Forget every key (the link is gone; the next PDU starts a new lifetime).
    pub fn reset(&mut self) {
        self.sessions.clear();
        self.hello = None;
        self.held.clear();
    }

    fn seal_with(s: &mut Session, pdu: &[u8]) -> Vec<u8> {
        let counter = s.tx_counter;
        s.tx_counter += 1;
        let tag = mac16(&s.tx_key, &[&counter.to_be_bytes(), pdu]);
        Control::Sealed {
            from_initiator: s.initiator,
            ns: &s.ns,
            nr: &s.nr,
            counter,
            pdu,
            tag: &tag,
        }
        .to_bytes()
    }

    /// The datagrams that carry `pdu` now: it sealed, or (no keys yet) a HELLO while
    /// it is held. `nonce` is called for a fresh nonce when a HELLO is due.
    pub fn seal(
        &mut self,
        now: Instant,
        pdu: &[u8],
        nonce: impl FnOnce() -> Nonce,
    ) -> Vec<Vec<u8>> {
        if let Some(s) = self.sessions.back_mut() {
            return vec![Self::seal_with(s, pdu)];
        }
        if self.held.len() >= MAX_HELD {
            self.held.pop_front();
        }
        self.held.push_back(pdu.to_vec());
        let due = self
            .hello
            .is_none_or(|(_, at)| now.as_nanos().saturating_sub(at.as_nanos()) >= HELLO_EVERY_NS);
        if !due {
            return Vec::new();
        }
        // A repeat keeps the nonce: an ACK to any HELLO of this round is taken.
        let ns = self.hello.map_or_else(nonce, |(ns, _)| ns);
        self.hello = Some((ns, now));
        vec![Control::Hello { ns: &ns }.to_bytes()]
    }

    fn install(&mut self, s: Session) {
        if self.sessions.iter().any(|o| o.ns == s.ns && o.nr == s.nr) {
            return;
        }
        if self.sessions.len() >= MAX_SESSIONS {
            self.sessions.pop_front();
        }
        self.sessions.push_back(s);
    }

    fn release_held(&mut self) -> Vec<Vec<u8>> {
        let held: Vec<Vec<u8>> = self.held.drain(..).collect();
        let s = self.sessions.back_mut().expect("called after install");
        held.iter().map(|p| Self::seal_with(s, p)).collect()
    }

    /// A datagram from the peer's address. `secret` is this end's local secret.
    pub fn receive(
        &mut self,
        now: Instant,
        secret: &[u8; 32],
        datagram: &[u8],
    ) -> Result<Received, AuthError> {
        match Control::parse(datagram)? {
            Control::Hello { ns } => {
                // Stateless: the nonce is rederived when the first SEALED names it.
                let nr = responder_nonce(secret, &self.peer, ns, now);
                let proof = mac16(&self.psk, &[b"ack", ns, &nr]);
                Ok(Received::Send(vec![Control::HelloAck {
                    ns,
                    nr: &nr,
                    proof: &proof,
                }
                .to_bytes()]))
            }
            Control::HelloAck { ns, nr, proof } => {
                let Some((mine, _)) = self.hello else {
                    return Err(AuthError::Unexpected);
                };
                if &mine != ns {
                    return Err(AuthError::Unexpected);
                }
                if !same(&mac16(&self.psk, &[b"ack", ns, nr]), proof) {
                    return Err(AuthError::BadTag);
                }
                self.hello = None;
                self.install(Session::new(&self.psk, *ns, *nr, true));
                Ok(Received::Send(self.release_held()))
            }
            Control::Sealed {
                from_initiator,
                ns,
                nr,
                counter,
                pdu,
                tag,
            } => {
                // Our role is the other one.
                let initiator = !from_initiator;
                let known = self
                    .sessions
                    .iter()
                    .position(|s| s.initiator == initiator && &s.ns == ns && &s.nr == nr);
                let idx = match known {
                    Some(i) => i,
                    // A lifetime the peer started: its nonce must be one this end
                    // derived, recently (else any old capture would start a session).
                    None if !initiator => {
                        if !check_responder_nonce(secret, &self.peer, ns, nr, now) {
                            return Err(AuthError::Stale);
                        }
                        let s = Session::new(&self.psk, *ns, *nr, false);
                        if !same(&mac16(&s.rx_key, &[&counter.to_be_bytes(), pdu]), tag) {
                            return Err(AuthError::BadTag);
                        }
                        self.install(s);
                        self.sessions.len() - 1
                    }
                    None => return Err(AuthError::BadTag),
                };
                let s = &mut self.sessions[idx];
                if !same(&mac16(&s.rx_key, &[&counter.to_be_bytes(), pdu]), tag) {
                    return Err(AuthError::BadTag);
                }
                if !s.rx.fresh(counter) {
                    return Err(AuthError::Replay);
                }
                s.rx.take(counter);
                // The lifetime the peer uses is the one to send with.
                let s = self.sessions.remove(idx).expect("index from position");
                self.sessions.push_back(s);
                Ok(Received::Pdu(pdu.to_vec()))
            }
            _ => Err(AuthError::Unexpected),
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
    fn pair() -> (PeerAuth, PeerAuth) {
        (
            PeerAuth::new(b"shared", b"B"),
            PeerAuth::new(b"shared", b"A"),
        )
    }

    fn carry(
        from: Vec<Vec<u8>>,
        to: &mut PeerAuth,
        secret: &[u8; 32],
        now: Instant,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut pdus, mut back) = (Vec::new(), Vec::new());
        for d in from {
            match to.receive(now, secret, &d) {
                Ok(Received::Pdu(p)) => pdus.push(p),
                Ok(Received::Send(v)) => back.extend(v),
                Err(_) => {}
            }
        }
        (pdus, back)
    }

    #[test]
    fn keys_are_agreed_and_pdus_pass_sealed_once() {
        let (mut a, mut b) = pair();
        let (sa, sb) = ([1; 32], [2; 32]);
        let hello = a.seal(t(1), b"BGN", || [5; NONCE_LEN]);
        let (none, ack) = carry(hello, &mut b, &sb, t(1));
        assert!(none.is_empty());
        let (none, sealed) = carry(ack, &mut a, &sa, t(1));
        assert!(none.is_empty() && a.has_keys());
        let (pdus, _) = carry(sealed.clone(), &mut b, &sb, t(1));
        assert_eq!(pdus, vec![b"BGN".to_vec()]);
        // The same frame again is a replay.
        assert_eq!(b.receive(t(1), &sb, &sealed[0]), Err(AuthError::Replay));
        // And B answers under the same keys.
        let back = b.seal(t(1), b"BGAK", || unreachable!());
        let (pdus, _) = carry(back, &mut a, &sa, t(1));
        assert_eq!(pdus, vec![b"BGAK".to_vec()]);
    }

    #[test]
    fn forged_or_old_frames_fail() {
        let (mut a, mut b) = pair();
        let (sa, sb) = ([1; 32], [2; 32]);
        let hello = a.seal(t(1), b"BGN", || [5; NONCE_LEN]);
        let (_, ack) = carry(hello, &mut b, &sb, t(1));
        let (_, sealed) = carry(ack, &mut a, &sa, t(1));
        carry(sealed.clone(), &mut b, &sb, t(1));
        // A changed PDU fails the tag.
        let mut forged = a.seal(t(2), b"SD", || unreachable!()).remove(0);
        let n = forged.len();
        forged[n - TAG_LEN - 1] ^= 1;
        assert_eq!(b.receive(t(2), &sb, &forged), Err(AuthError::BadTag));
        // A wrong key fails the ACK's proof.
        let mut c = PeerAuth::new(b"other", b"B");
        let hello = c.seal(t(3), b"BGN", || [6; NONCE_LEN]);
        let (_, ack) = carry(hello, &mut b, &sb, t(3));
        assert_eq!(c.receive(t(3), &[0; 32], &ack[0]), Err(AuthError::BadTag));
        // A new lifetime at B (it forgot) refuses the old lifetime's frames once the
        // responder nonce is stale.
        b.reset();
        assert_eq!(
            b.receive(t(1 + COOKIE_LIFETIME_S + 1), &sb, &sealed[0]),
            Err(AuthError::Stale)
        );
    }

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
