//! Noise on a signalling link between two sigds ([`NoiseLink`]): a Noise XX handshake
//! (`Noise_XX_25519_ChaChaPoly_BLAKE2s`, or `XXpsk3` where the operator configured a
//! pre-shared key) authenticates each end's static X25519 key, and every SSCOP PDU
//! then travels in a Noise transport message with an explicit counter.
//!
//! Departure: Q.2110/Q.2931 have no peer authentication (the UNI trusts its physical
//! link). Over UDP anyone can send from any source, so the link is authenticated as
//! WireGuard authenticates a tunnel: each datagram stands alone (snow's
//! `StatelessTransportState`, the counter in the frame as the AEAD nonce) and a
//! 64-counter sliding window refuses replays (RFC 4303 §3.4.3). Indices chosen by
//! each end name a session, as WireGuard's do, so a restarted peer's new handshake
//! and the frames of the old session can cross.
//!
//! Sans-IO: the caller passes the time and fresh indices. Frames are in
//! docs/wire.md "Peer control frames"; the choice of XX in
//! docs/decisions/0031-noise-signalling-links.md.

use std::collections::VecDeque;

use base64::Engine as _;
use snow::{Builder, HandshakeState, StatelessTransportState};
use thiserror::Error;

use super::peer::{Control, ControlError, ReplayWindow, AEAD_TAG_LEN, MAX_HANDSHAKE};
use crate::time::Instant;

/// The Noise protocol of a link without a pre-shared key.
pub const PATTERN: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
/// The Noise protocol of a link with one (`[[peer]] key`): the key mixed in after
/// the third message, so both ends must know it as well as their static keys.
pub const PATTERN_PSK: &str = "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s";
/// Binds the handshake to this use, so a transcript from another Noise protocol
/// never verifies here.
const PROLOGUE: &[u8] = b"natm signalling link 1";
/// Octets of a key.
pub const KEY_LEN: usize = 32;

/// The Noise psk (`XXpsk3`) of a link whose ends share a configured key (`[[peer]]
/// key`, a switch port's `key`): SHA-256 of a label and the key, since Noise's psk
/// is 32 octets and a configured key is at least 16 of any (both ends derive it so).
pub fn psk_from_key(key: &[u8]) -> [u8; KEY_LEN] {
    let d = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        &[b"natm noise psk".as_slice(), key].concat(),
    );
    let mut p = [0u8; KEY_LEN];
    p.copy_from_slice(d.as_ref());
    p
}
/// Most sessions kept at once (one from each end's handshake, and the one before
/// while frames sent under it are in flight).
const MAX_SESSIONS: usize = 4;
/// Most peer-started handshakes kept at once.
const MAX_RESPONDING: usize = 4;
/// Most PDUs held while a handshake runs (SSCOP retransmits what is dropped).
const MAX_HELD: usize = 64;
/// How often a handshake message is repeated while its answer is missing.
const RETRY_NS: u64 = 250_000_000;
/// How often one link answers a first handshake message, ns (each answer costs the
/// responder two DH operations; a repeat of the same message gets the same answer,
/// computed once). Every user of [`NoiseLink`] limits its answers so.
pub const ANSWER_EVERY_NS: u64 = 10_000_000;
/// Largest SSCOP PDU sealed (a transport message carries it and a tag).
const MAX_PDU: usize = 65_535 - AEAD_TAG_LEN;

/// An X25519 public key.
pub type PublicKey = [u8; KEY_LEN];

/// The public key of `private` (X25519, clamped as the DH function clamps it).
pub fn public_key(private: &[u8; KEY_LEN]) -> PublicKey {
    curve25519_dalek::MontgomeryPoint::mul_base_clamped(*private).to_bytes()
}

/// A key as configuration and `natm sigd --show-key` write it (standard base64).
pub fn key_to_text(key: &PublicKey) -> String {
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// A key from its base64 text.
pub fn key_from_text(text: &str) -> Option<PublicKey> {
    let v = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    v.try_into().ok()
}

/// A short name for a key in logs and `natm stat`: its first 8 octets' base64, as
/// WireGuard's tools abbreviate keys.
pub fn fingerprint(key: &PublicKey) -> String {
    let mut s = key_to_text(key);
    s.truncate(11);
    s
}

/// Which static key the peer must prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// This one (configured, or pinned on first use).
    Pinned(PublicKey),
    /// Any, the first time: the key seen is pinned ([`NoiseLink::take_new_pin`]).
    FirstUse,
}

/// What [`NoiseLink::receive`] found in a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// An authenticated SSCOP PDU for the link.
    Pdu(Vec<u8>),
    /// Datagrams to send back to the peer (a handshake answer; PDUs released by a
    /// new session).
    Send(Vec<Vec<u8>>),
}

/// Why a datagram from the peer was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NoiseError {
    /// Not a Noise frame.
    #[error("not a Noise frame: {0}")]
    Frame(#[from] ControlError),
    /// A handshake message or transport message that does not decrypt.
    #[error("authentication failed")]
    BadTag,
    /// The handshake proved a static key other than the one pinned.
    #[error("the peer proved key {}, not the pinned {}", fingerprint(.seen), fingerprint(.pinned))]
    WrongKey {
        /// The key it proved.
        seen: PublicKey,
        /// The key it had to.
        pinned: PublicKey,
    },
    /// A counter already taken or below the window.
    #[error("replayed frame")]
    Replay,
    /// A frame naming no handshake or session this end holds.
    #[error("no such session")]
    UnknownSession,
    /// The handshake library refused (a bad key, a message too long).
    #[error("Noise: {0}")]
    Noise(&'static str),
}

fn noise_err(e: snow::Error) -> NoiseError {
    match e {
        snow::Error::Decrypt => NoiseError::BadTag,
        snow::Error::Input => NoiseError::Noise("bad input"),
        _ => NoiseError::Noise("handshake state"),
    }
}

/// One agreed session.
struct Session {
    local: u32,
    remote: u32,
    transport: StatelessTransportState,
    tx: u64,
    rx: ReplayWindow,
    /// This end sent the third message, and sends it again with data until the
    /// peer's first transport message shows it arrived.
    unconfirmed_final: Option<(Vec<u8>, Instant)>,
    /// A key seen on first use that is pinned only when the peer's first transport
    /// message opens under this session: with a psk, the initiator reads the
    /// responder's key in the second message, before anything proved the responder
    /// holds the psk (`XXpsk3` mixes it in at the third), so pinning there would let
    /// anyone without the psk poison the pin.
    pin_when_proved: Option<PublicKey>,
}

/// A handshake this end started: its index, the state, the first message and when
/// it last went.
struct Initiating {
    local: u32,
    hs: HandshakeState,
    msg: Vec<u8>,
    sent: Instant,
}

/// A handshake the peer started: the answer, kept to repeat for a repeated first
/// message.
struct Responding {
    local: u32,
    remote: u32,
    init: Vec<u8>,
    hs: HandshakeState,
    answer: Vec<u8>,
}

/// The Noise authentication of one signalling link: seals what SSCOP sends, opens
/// what arrives, runs a handshake when there is no session. Call order: `seal` for
/// each PDU out, `receive` for each Noise frame in, `reset` when the link is gone.
pub struct NoiseLink {
    private: [u8; KEY_LEN],
    psk: Option<[u8; KEY_LEN]>,
    trust: Trust,
    new_pin: Option<PublicKey>,
    peer_key: Option<PublicKey>,
    handshake_hash: Vec<u8>,
    initiating: Option<Initiating>,
    /// Handshakes peers started, newest last: a few, so that first messages
    /// spoofed from the peer's address do not at once evict the real one's.
    responding: VecDeque<Responding>,
    sessions: VecDeque<Session>,
    held: VecDeque<Vec<u8>>,
    /// N(SQ) of the SSCOP connection the sessions were made for ([`NoiseLink::bgn`]).
    connection_sq: Option<u8>,
}

impl std::fmt::Debug for NoiseLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoiseLink")
            .field("psk", &self.psk.is_some())
            .field("trust", &self.trust)
            .field("peer_key", &self.peer_key.as_ref().map(fingerprint))
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl NoiseLink {
    /// A link whose end holds the static key `private`, with the peer's key to be
    /// proved as `trust` says, and `psk` mixed in where the operator configured one.
    pub fn new(private: [u8; KEY_LEN], trust: Trust, psk: Option<[u8; KEY_LEN]>) -> NoiseLink {
        NoiseLink {
            private,
            psk,
            trust,
            new_pin: None,
            peer_key: None,
            handshake_hash: Vec::new(),
            initiating: None,
            responding: VecDeque::new(),
            sessions: VecDeque::new(),
            held: VecDeque::new(),
            connection_sq: None,
        }
    }

    /// Whether a session is agreed.
    pub fn has_keys(&self) -> bool {
        !self.sessions.is_empty()
    }

    /// The static key the peer proved in the latest handshake.
    pub fn peer_key(&self) -> Option<PublicKey> {
        self.peer_key
    }

    /// The latest handshake's hash (Noise §11.2: names the session for channel
    /// binding).
    pub fn handshake_hash(&self) -> &[u8] {
        &self.handshake_hash
    }

    /// Whether a pre-shared key is mixed in.
    pub fn has_psk(&self) -> bool {
        self.psk.is_some()
    }

    /// A key seen for the first time (under [`Trust::FirstUse`]), now pinned for this
    /// link; the caller stores it.
    pub fn take_new_pin(&mut self) -> Option<PublicKey> {
        self.new_pin.take()
    }

    /// Forget every session and handshake (the link is gone, or a new SSCOP
    /// connection starts a new session).
    pub fn reset(&mut self) {
        self.sessions.clear();
        self.initiating = None;
        self.responding.clear();
        self.held.clear();
    }

    /// This end sends a BGN with N(SQ) `nsq`. A new SSCOP connection (a new N(SQ))
    /// starts new keys, as a link lifetime should; a retransmitted BGN (the same
    /// N(SQ)) keeps the session its handshake made. Resetting on every BGN lost the
    /// session each time Timer_CC fired before the BGAK, and on a path whose round
    /// trip outlasts Timer_CC the link never came up.
    pub fn bgn(&mut self, nsq: u8) {
        if self.has_keys() && self.connection_sq != Some(nsq) {
            self.reset();
        }
        self.connection_sq = Some(nsq);
    }

    fn builder(&self) -> Result<Builder<'_>, NoiseError> {
        let pattern = if self.psk.is_some() {
            PATTERN_PSK
        } else {
            PATTERN
        };
        let params = pattern.parse().map_err(|_| NoiseError::Noise("pattern"))?;
        let mut b = Builder::new(params)
            .local_private_key(&self.private)
            .map_err(noise_err)?
            .prologue(PROLOGUE)
            .map_err(noise_err)?;
        if let Some(psk) = &self.psk {
            b = b.psk(3, psk).map_err(noise_err)?;
        }
        Ok(b)
    }

    /// Starts a handshake (unless one is under way and not due again): the datagram
    /// to send. For an end that sees the peer use a session it does not hold.
    pub fn start(&mut self, now: Instant, index: u32) -> Option<Vec<u8>> {
        self.initiate(now, || index)
    }

    /// Starts a handshake (unless one is under way and its message not yet due
    /// again): the datagram to send.
    fn initiate(&mut self, now: Instant, index: impl FnOnce() -> u32) -> Option<Vec<u8>> {
        if let Some(i) = self.initiating.as_mut() {
            if now.as_nanos().saturating_sub(i.sent.as_nanos()) < RETRY_NS {
                return None;
            }
            i.sent = now;
            return Some(
                Control::NoiseInit {
                    sender: i.local,
                    msg: &i.msg,
                }
                .to_bytes(),
            );
        }
        let mut hs = self.builder().ok()?.build_initiator().ok()?;
        let mut buf = [0u8; MAX_HANDSHAKE];
        let n = hs.write_message(&[], &mut buf).ok()?;
        let local = index();
        let msg = buf[..n].to_vec();
        let d = Control::NoiseInit {
            sender: local,
            msg: &msg,
        }
        .to_bytes();
        self.initiating = Some(Initiating {
            local,
            hs,
            msg,
            sent: now,
        });
        Some(d)
    }

    fn seal_with(s: &mut Session, now: Instant, pdu: &[u8], out: &mut Vec<Vec<u8>>) {
        if let Some((msg, sent)) = s.unconfirmed_final.as_mut() {
            if now.as_nanos().saturating_sub(sent.as_nanos()) >= RETRY_NS {
                *sent = now;
                out.push(
                    Control::NoiseFinal {
                        receiver: s.remote,
                        msg,
                    }
                    .to_bytes(),
                );
            }
        }
        let pdu = &pdu[..pdu.len().min(MAX_PDU)];
        let mut ct = vec![0u8; pdu.len() + AEAD_TAG_LEN];
        let counter = s.tx;
        s.tx += 1;
        // Only a nonce of u64::MAX, 2^64 PDUs into the session, refuses.
        if let Ok(n) = s.transport.write_message(counter, pdu, &mut ct) {
            ct.truncate(n);
            out.push(
                Control::NoiseData {
                    receiver: s.remote,
                    counter,
                    ciphertext: &ct,
                }
                .to_bytes(),
            );
        }
    }

    /// The datagrams that carry `pdu` now: it sealed, or (no session yet) the
    /// handshake's first message while it is held. `index` gives a fresh random
    /// index when a handshake starts.
    pub fn seal(&mut self, now: Instant, pdu: &[u8], index: impl FnOnce() -> u32) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if let Some(s) = self.sessions.back_mut() {
            Self::seal_with(s, now, pdu, &mut out);
            return out;
        }
        if self.held.len() >= MAX_HELD {
            self.held.pop_front();
        }
        self.held.push_back(pdu.to_vec());
        out.extend(self.initiate(now, index));
        out
    }

    /// The peer's key checked against the trust: with the key, and whether it is
    /// still to be pinned once the peer proves the session (`pin_when_proved`):
    /// under [`Trust::FirstUse`] a key is pinned at once only where the handshake
    /// already proved everything it will (`proved`).
    fn check_trust(
        &mut self,
        seen: Option<&[u8]>,
        proved: bool,
    ) -> Result<(PublicKey, Option<PublicKey>), NoiseError> {
        let seen: PublicKey = seen
            .and_then(|k| k.try_into().ok())
            .ok_or(NoiseError::Noise("no remote static key"))?;
        match self.trust {
            Trust::Pinned(pinned) if pinned != seen => Err(NoiseError::WrongKey { seen, pinned }),
            Trust::Pinned(_) => Ok((seen, None)),
            Trust::FirstUse if !proved => Ok((seen, Some(seen))),
            Trust::FirstUse => {
                self.pin(seen);
                Ok((seen, None))
            }
        }
    }

    fn pin(&mut self, key: PublicKey) {
        self.trust = Trust::Pinned(key);
        self.new_pin = Some(key);
    }

    fn install(&mut self, now: Instant, s: Session, hash: Vec<u8>, key: PublicKey) -> Vec<Vec<u8>> {
        self.sessions.retain(|o| o.local != s.local);
        if self.sessions.len() >= MAX_SESSIONS {
            self.sessions.pop_front();
        }
        self.sessions.push_back(s);
        self.peer_key = Some(key);
        self.handshake_hash = hash;
        // A session either end started serves both: a crossing one of this end's
        // is no longer needed.
        self.initiating = None;
        let held: Vec<Vec<u8>> = self.held.drain(..).collect();
        let mut out = Vec::new();
        let s = self.sessions.back_mut().expect("pushed above");
        for p in &held {
            Self::seal_with(s, now, p, &mut out);
        }
        out
    }

    /// A datagram from the peer's address. `index` gives a fresh random index if
    /// this end answers a handshake.
    pub fn receive(
        &mut self,
        now: Instant,
        datagram: &[u8],
        index: impl FnOnce() -> u32,
    ) -> Result<Received, NoiseError> {
        match Control::parse(datagram)? {
            Control::NoiseInit { sender, msg } => self.on_init(sender, msg, index),
            Control::NoiseResp {
                sender,
                receiver,
                msg,
            } => self.on_resp(now, sender, receiver, msg),
            Control::NoiseFinal { receiver, msg } => self.on_final(now, receiver, msg),
            Control::NoiseData {
                receiver,
                counter,
                ciphertext,
            } => self.on_data(receiver, counter, ciphertext),
            _ => Err(NoiseError::UnknownSession),
        }
    }

    /// A first message: answered, keeping the latest [`MAX_RESPONDING`]
    /// peer-started handshakes (the caller limits how often, and admits unknown
    /// sources by cookie first).
    fn on_init(
        &mut self,
        sender: u32,
        msg: &[u8],
        index: impl FnOnce() -> u32,
    ) -> Result<Received, NoiseError> {
        if let Some(r) = self
            .responding
            .iter()
            .find(|r| r.remote == sender && r.init == msg)
        {
            return Ok(Received::Send(vec![r.answer.clone()]));
        }
        let mut hs = self.builder()?.build_responder().map_err(noise_err)?;
        let mut buf = [0u8; MAX_HANDSHAKE];
        hs.read_message(msg, &mut buf).map_err(noise_err)?;
        let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
        let local = index();
        let answer = Control::NoiseResp {
            sender: local,
            receiver: sender,
            msg: &buf[..n],
        }
        .to_bytes();
        if self.responding.len() >= MAX_RESPONDING {
            self.responding.pop_front();
        }
        self.responding.push_back(Responding {
            local,
            remote: sender,
            init: msg.to_vec(),
            hs,
            answer: answer.clone(),
        });
        Ok(Received::Send(vec![answer]))
    }

    fn on_resp(
        &mut self,
        now: Instant,
        sender: u32,
        receiver: u32,
        msg: &[u8],
    ) -> Result<Received, NoiseError> {
        if self.initiating.as_ref().is_none_or(|i| i.local != receiver) {
            return Err(NoiseError::UnknownSession);
        }
        let mut i = self.initiating.take().expect("checked above");
        let mut buf = [0u8; MAX_HANDSHAKE];
        if let Err(e) = i.hs.read_message(msg, &mut buf) {
            // snow restores its state on a failed read: a forged answer does not
            // spoil the handshake for the real one.
            self.initiating = Some(i);
            return Err(noise_err(e));
        }
        // Without a psk the second message proves the responder's key; with one,
        // only its first transport message proves it also holds the psk.
        let (key, pin_when_proved) =
            self.check_trust(i.hs.get_remote_static(), self.psk.is_none())?;
        let n = i.hs.write_message(&[], &mut buf).map_err(noise_err)?;
        let fin = buf[..n].to_vec();
        let hash = i.hs.get_handshake_hash().to_vec();
        let transport = i.hs.into_stateless_transport_mode().map_err(noise_err)?;
        let mut out = vec![Control::NoiseFinal {
            receiver: sender,
            msg: &fin,
        }
        .to_bytes()];
        out.extend(self.install(
            now,
            Session {
                local: i.local,
                remote: sender,
                transport,
                tx: 0,
                rx: ReplayWindow::default(),
                unconfirmed_final: Some((fin, now)),
                pin_when_proved,
            },
            hash,
            key,
        ));
        Ok(Received::Send(out))
    }

    fn on_final(
        &mut self,
        now: Instant,
        receiver: u32,
        msg: &[u8],
    ) -> Result<Received, NoiseError> {
        let Some(at) = self.responding.iter().rposition(|r| r.local == receiver) else {
            // A repeat of the final message of a session already made.
            if self.sessions.iter().any(|s| s.local == receiver) {
                return Ok(Received::Send(Vec::new()));
            }
            return Err(NoiseError::UnknownSession);
        };
        let mut r = self.responding.remove(at).expect("index from position");
        let mut buf = [0u8; MAX_HANDSHAKE];
        if let Err(e) = r.hs.read_message(msg, &mut buf) {
            self.responding.insert(at, r);
            return Err(noise_err(e));
        }
        // The third message opened: the initiator's key and the psk are proved.
        let (key, _) = self.check_trust(r.hs.get_remote_static(), true)?;
        let hash = r.hs.get_handshake_hash().to_vec();
        let transport = r.hs.into_stateless_transport_mode().map_err(noise_err)?;
        let out = self.install(
            now,
            Session {
                local: r.local,
                remote: r.remote,
                transport,
                tx: 0,
                rx: ReplayWindow::default(),
                unconfirmed_final: None,
                pin_when_proved: None,
            },
            hash,
            key,
        );
        Ok(Received::Send(out))
    }

    fn on_data(
        &mut self,
        receiver: u32,
        counter: u64,
        ciphertext: &[u8],
    ) -> Result<Received, NoiseError> {
        let idx = self
            .sessions
            .iter()
            .position(|s| s.local == receiver)
            .ok_or(NoiseError::UnknownSession)?;
        let s = &mut self.sessions[idx];
        if !s.rx.fresh(counter) {
            return Err(NoiseError::Replay);
        }
        let mut pdu = vec![0u8; ciphertext.len()];
        let n = s
            .transport
            .read_message(counter, ciphertext, &mut pdu)
            .map_err(|_| NoiseError::BadTag)?;
        pdu.truncate(n);
        if let Some(seen) = s.pin_when_proved.take() {
            match self.trust {
                Trust::FirstUse => self.pin(seen),
                Trust::Pinned(pinned) if pinned != seen => {
                    // Another session proved another key first.
                    self.sessions.remove(idx);
                    return Err(NoiseError::WrongKey { seen, pinned });
                }
                Trust::Pinned(_) => {}
            }
        }
        let s = &mut self.sessions[idx];
        s.rx.take(counter);
        s.unconfirmed_final = None;
        // The session the peer sends with is the one to send with.
        let s = self.sessions.remove(idx).expect("index from position");
        self.sessions.push_back(s);
        Ok(Received::Pdu(pdu))
    }
}

#[cfg(test)]
mod tests;
