//! Authenticated encryption of TPDUs (issue 16): a sealed TPDU, its per-direction
//! packet numbers, the receiver's replay window, and the per-call keys derived from
//! an X25519 exchange carried in signalling.
//!
//! Sans-IO: sealing and opening are pure functions of a key, a counter and a buffer.
//! Only [`KeyShare::generate`] needs randomness, which the caller supplies.
//!
//! ```text
//! +------------------------------+---------------------+-----------+-----------+
//! | TPDU header, 32 octets       | payload, encrypted  | packet    | tag,      |
//! | (flags has SEALED = 0x80)    | (n octets)          | number u64| 16 octets |
//! +------------------------------+---------------------+-----------+-----------+
//!   associated data (clear)        ciphertext            nonce       AES-256-GCM
//! ```
//!
//! The 32-octet TPDU header — type, flags, window, cookie, sequence numbers, clocks —
//! is the associated data: readable by a switch or a capture, but any change to it
//! fails the tag. The 4-octet VC header in front is not covered: a switch relabels the
//! VCI on every link and may set the congestion and CLP bits (docs/wire.md), so those
//! cannot be authenticated end to end; a frame moved onto another VC of the
//! connection still needs the right key and a fresh packet number. The packet number
//! is the GCM nonce (four zero octets, then the number, big-endian). Each direction of
//! a call has its own key, and a sender numbers every frame it seals from one counter
//! that never goes back — a SMART retransmission is sealed afresh under a new number —
//! so no nonce is ever used twice with a key.
//!
//! AES-256-GCM rather than ChaCha20-Poly1305: on the machines natm is measured on
//! (AES-NI, VAES, PCLMULQDQ) AES-GCM seals at several times ChaCha20's rate
//! (`cargo run --release -p natm-proto --example aead_choice`: 76 against 16 Gbit/s on
//! one core at 64 KiB); both are 256-bit AEADs with 16-octet tags.
//! The AEAD is AWS-LC's (`aws-lc-rs`), which seals from one buffer into another, so
//! a sender encrypts a payload from its send queue into the datagram in one pass
//! ([`Sealer::seal_from`]; docs/decisions/0030-aws-lc-aead.md).

use core::sync::atomic::{AtomicU64, Ordering};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use aws_lc_rs::rand::SecureRandom;
use thiserror::Error;

use super::tpdu;

/// The TPDU flag that marks a sealed TPDU (the header's flags octet; docs/wire.md).
pub const SEALED: u8 = 0x80;
/// Octets of the packet number.
pub const PN_LEN: usize = 8;
/// Octets of the authentication tag.
pub const TAG_LEN: usize = 16;
/// What sealing adds to a TPDU: the packet number and the tag.
pub const OVERHEAD: usize = PN_LEN + TAG_LEN;
/// Octets of a traffic key (AES-256).
pub const KEY_LEN: usize = 32;
/// Octets of an X25519 key share.
pub const SHARE_LEN: usize = 32;
/// Packet numbers the receiver remembers below the highest it has accepted: a frame
/// reordered by more than this is dropped as if replayed (SMART retransmits it).
pub const REPLAY_WINDOW: u64 = 1024;

/// Why a frame was not opened. Each is counted by the receiver and the frame dropped;
/// none changes the connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum OpenError {
    /// Shorter than a TPDU header, a packet number and a tag.
    #[error("sealed TPDU of {0} octets is shorter than header, packet number and tag")]
    Truncated(usize),
    /// The SEALED flag is clear on a VC whose TPDUs must all be sealed.
    #[error("clear-text TPDU on an encrypted VC")]
    NotSealed,
    /// The packet number was accepted before, or is below the replay window.
    #[error("packet number {0} was seen before or is too old")]
    Replayed(u64),
    /// The tag does not verify: forged, modified, or sealed under another key.
    #[error("authentication tag does not verify")]
    BadTag,
}

/// Why a frame could not be sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SealError {
    /// The buffer has no room for the header, the packet number and the tag.
    #[error("buffer of {0} octets cannot hold a sealed TPDU")]
    Short(usize),
    /// The direction's 2^64 packet numbers are spent (never in practice).
    #[error("packet numbers exhausted: the call must be set up again")]
    Exhausted,
}

fn nonce(pn: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn key(k: &[u8; KEY_LEN]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("AES-256 takes 32-octet keys"))
}

/// The sending side of one direction: its key and the next packet number. Shared by
/// every thread that sends on the direction (`&self`): the number is taken with one
/// atomic add, so no two frames ever get the same.
pub struct Sealer {
    key: LessSafeKey,
    next: AtomicU64,
}

impl core::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sealer")
            .field("next", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

impl Sealer {
    /// A sealer whose first packet number is 0.
    pub fn new(k: &[u8; KEY_LEN]) -> Sealer {
        Sealer {
            key: key(k),
            next: AtomicU64::new(0),
        }
    }

    /// The packet number the next sealed frame takes (= frames sealed so far).
    pub fn next_pn(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Seal in place the TPDU in `frame`: a TPDU header and payload followed by
    /// [`OVERHEAD`] octets of room. Sets the SEALED flag, encrypts the payload, and
    /// writes the packet number and the tag into the room. Returns the number used.
    pub fn seal(&self, frame: &mut [u8]) -> Result<u64, SealError> {
        self.seal_with(frame, None)
    }

    /// Seal `payload` into `frame`, which holds a TPDU header followed by room for
    /// the payload and [`OVERHEAD`] octets (its length is the header's, the
    /// payload's and [`OVERHEAD`]): the payload is encrypted from where it lies into
    /// the frame, so a sender copies nothing before sealing (issue 30). Otherwise as
    /// [`Sealer::seal`].
    pub fn seal_from(&self, frame: &mut [u8], payload: &[u8]) -> Result<u64, SealError> {
        if frame.len() != tpdu::HEADER_LEN + payload.len() + OVERHEAD {
            return Err(SealError::Short(frame.len()));
        }
        self.seal_with(frame, Some(payload))
    }

    fn seal_with(&self, frame: &mut [u8], from: Option<&[u8]>) -> Result<u64, SealError> {
        let len = frame.len();
        if len < tpdu::HEADER_LEN + OVERHEAD {
            return Err(SealError::Short(len));
        }
        let pn = self.next.fetch_add(1, Ordering::Relaxed);
        if pn == u64::MAX {
            self.next.store(u64::MAX, Ordering::Relaxed);
            return Err(SealError::Exhausted);
        }
        frame[1] |= SEALED;
        let (head, rest) = frame.split_at_mut(tpdu::HEADER_LEN);
        let (body, trailer) = rest.split_at_mut(rest.len() - OVERHEAD);
        let (pn_at, tag_at) = trailer.split_at_mut(PN_LEN);
        let (n, aad) = (nonce(pn), Aad::from(&*head));
        match from {
            None => self
                .key
                .seal_in_place_separate_tag(n, aad, body)
                .map(|tag| tag_at.copy_from_slice(tag.as_ref())),
            Some(clear) => self
                .key
                .seal_out_of_place_scatter(n, aad, clear, body, &[], tag_at),
        }
        .map_err(|_| SealError::Short(len))?;
        pn_at.copy_from_slice(&pn.to_be_bytes());
        Ok(pn)
    }
}

/// The packet numbers a receiver has accepted: the highest, and a bitmap of the
/// [`REPLAY_WINDOW`] below it (as IPsec's anti-replay window, RFC 4303 §3.4.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// One more than the highest number accepted (0: none yet).
    top: u64,
    /// Bit i of word i/64: number `top - 1 - i` was accepted.
    seen: [u64; (REPLAY_WINDOW / 64) as usize],
}

impl ReplayWindow {
    /// Whether `pn` may still be accepted (not seen, not below the window). Cheap:
    /// checked before the tag, so a replay flood costs no decryption.
    pub fn fresh(&self, pn: u64) -> bool {
        if pn >= self.top {
            return true;
        }
        let back = self.top - 1 - pn;
        back < REPLAY_WINDOW && self.seen[(back / 64) as usize] & (1 << (back % 64)) == 0
    }

    /// Record `pn` as accepted (after its tag verified).
    pub fn accept(&mut self, pn: u64) {
        if pn >= self.top {
            let shift = pn + 1 - self.top;
            self.shift(shift);
            self.top = pn + 1;
            self.seen[0] |= 1;
        } else {
            let back = self.top - 1 - pn;
            if back < REPLAY_WINDOW {
                self.seen[(back / 64) as usize] |= 1 << (back % 64);
            }
        }
    }

    fn shift(&mut self, by: u64) {
        if by >= REPLAY_WINDOW {
            self.seen = Default::default();
            return;
        }
        let words = (by / 64) as usize;
        let bits = (by % 64) as u32;
        let n = self.seen.len();
        for i in (0..n).rev() {
            let src = i.checked_sub(words);
            let hi = src.map_or(0, |s| self.seen[s]);
            let lo = src
                .and_then(|s| s.checked_sub(1))
                .map_or(0, |s| self.seen[s]);
            self.seen[i] = if bits == 0 {
                hi
            } else {
                (hi << bits) | (lo >> (64 - bits))
            };
        }
    }
}

/// The receiving side of one direction: the peer's key and the replay window.
pub struct Opener {
    key: LessSafeKey,
    window: ReplayWindow,
}

impl core::fmt::Debug for Opener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Opener")
            .field("window", &self.window)
            .finish()
    }
}

/// The packet number of a sealed frame, read without opening it.
pub fn packet_number(frame: &[u8]) -> Result<u64, OpenError> {
    let len = frame.len();
    if len < tpdu::HEADER_LEN + OVERHEAD {
        return Err(OpenError::Truncated(len));
    }
    if frame[1] & SEALED == 0 {
        return Err(OpenError::NotSealed);
    }
    let at = len - OVERHEAD;
    let mut pn = [0u8; PN_LEN];
    pn.copy_from_slice(&frame[at..at + PN_LEN]);
    Ok(u64::from_be_bytes(pn))
}

impl Opener {
    /// An opener that has accepted nothing yet.
    pub fn new(k: &[u8; KEY_LEN]) -> Opener {
        Opener {
            key: key(k),
            window: ReplayWindow::default(),
        }
    }

    /// Whether a frame with this packet number would be refused as a replay (checked
    /// before any copy or decryption).
    pub fn check(&self, frame: &[u8]) -> Result<u64, OpenError> {
        let pn = packet_number(frame)?;
        if self.window.fresh(pn) {
            Ok(pn)
        } else {
            Err(OpenError::Replayed(pn))
        }
    }

    /// Open a sealed TPDU without changing it: the clear header (SEALED cleared) and
    /// the payload decrypted into a fresh allocation of its own length (what a
    /// receiver copies out of its receive buffer anyway). Errors as [`Opener::open`].
    pub fn open_detached(
        &mut self,
        frame: &[u8],
    ) -> Result<([u8; tpdu::HEADER_LEN], Vec<u8>), OpenError> {
        let pn = self.check(frame)?;
        let clear_len = frame.len() - OVERHEAD;
        let mut head = [0u8; tpdu::HEADER_LEN];
        head.copy_from_slice(&frame[..tpdu::HEADER_LEN]);
        let mut body = frame[tpdu::HEADER_LEN..clear_len].to_vec();
        let tag: [u8; TAG_LEN] = frame[clear_len + PN_LEN..]
            .try_into()
            .expect("the trailer is a packet number and a tag");
        self.key
            .open_in_place_separate_tag(nonce(pn), Aad::from(&head[..]), &tag, &mut body)
            .map_err(|_| OpenError::BadTag)?;
        self.window.accept(pn);
        head[1] &= !SEALED;
        Ok((head, body))
    }

    /// Open in place a sealed TPDU: verify the tag over the header and the
    /// ciphertext, decrypt, clear the SEALED flag, record the packet number. Returns
    /// the clear TPDU (header and payload), a prefix of `frame`. On any error the
    /// window is unchanged and the frame must be dropped (its payload octets may have
    /// been overwritten).
    pub fn open<'a>(&mut self, frame: &'a mut [u8]) -> Result<&'a mut [u8], OpenError> {
        let pn = self.check(frame)?;
        let len = frame.len();
        let clear_len = len - OVERHEAD;
        let (head, rest) = frame.split_at_mut(tpdu::HEADER_LEN);
        let (body, trailer) = rest.split_at_mut(clear_len - tpdu::HEADER_LEN);
        let tag: [u8; TAG_LEN] = trailer[PN_LEN..]
            .try_into()
            .expect("the trailer is a packet number and a tag");
        self.key
            .open_in_place_separate_tag(nonce(pn), Aad::from(&*head), &tag, body)
            .map_err(|_| OpenError::BadTag)?;
        self.window.accept(pn);
        head[1] &= !SEALED;
        Ok(&mut frame[..clear_len])
    }
}

/// The two traffic keys of a call as one end holds them: `tx` seals what this end
/// sends, `rx` opens what it receives.
#[derive(Clone, PartialEq, Eq)]
pub struct PathKeys {
    /// Key of this end's sending direction.
    pub tx: [u8; KEY_LEN],
    /// Key of the other end's sending direction.
    pub rx: [u8; KEY_LEN],
}

impl core::fmt::Debug for PathKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print key material.
        f.write_str("PathKeys(..)")
    }
}

impl PathKeys {
    /// The same keys seen from the other end.
    pub fn reversed(&self) -> PathKeys {
        PathKeys {
            tx: self.rx,
            rx: self.tx,
        }
    }

    /// Keys for a call between two ends of this host (no exchange needed): both
    /// directions' keys drawn from `rng`.
    pub fn random(rng: &dyn SecureRandom) -> Result<PathKeys, KeyError> {
        let mut k = PathKeys {
            tx: [0; KEY_LEN],
            rx: [0; KEY_LEN],
        };
        rng.fill(&mut k.tx).map_err(|_| KeyError::Random)?;
        rng.fill(&mut k.rx).map_err(|_| KeyError::Random)?;
        Ok(k)
    }
}

/// Why no keys came out of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum KeyError {
    /// The system's random source failed.
    #[error("no randomness for a key share")]
    Random,
    /// The peer's share is not a usable X25519 public key (a low-order point: the
    /// shared secret would be all zeros).
    #[error("the peer's key share is not a usable X25519 public key")]
    BadShare,
}

/// One end's ephemeral X25519 key: the private half stays in sigd until the peer's
/// share arrives; the public half travels in natm's signalling IE.
pub struct KeyShare {
    private: EphemeralPrivateKey,
    public: [u8; SHARE_LEN],
}

impl core::fmt::Debug for KeyShare {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyShare")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// Which end of a call derives keys: the caller sends on the forward direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that sent SETUP.
    Caller,
    /// The end that answered with CONNECT.
    Callee,
}

impl KeyShare {
    /// A fresh ephemeral key.
    pub fn generate(rng: &dyn SecureRandom) -> Result<KeyShare, KeyError> {
        let private = EphemeralPrivateKey::generate(&X25519, rng).map_err(|_| KeyError::Random)?;
        let public: [u8; SHARE_LEN] = private
            .compute_public_key()
            .map_err(|_| KeyError::Random)?
            .as_ref()
            .try_into()
            .map_err(|_| KeyError::Random)?;
        Ok(KeyShare { private, public })
    }

    /// The public half, for the signalling IE.
    pub fn public(&self) -> [u8; SHARE_LEN] {
        self.public
    }

    /// Complete the exchange with the peer's share: the call's two traffic keys as
    /// this end (`role`) uses them. HKDF-SHA256 (RFC 5869) extracts from the X25519
    /// secret with both shares (caller's first) and the call's cookie as salt, and
    /// expands one key per direction ("natm tpdu c>s" / "natm tpdu s>c").
    pub fn agree(self, role: Role, peer: &[u8], cookie: u32) -> Result<PathKeys, KeyError> {
        self.agree_bound(role, peer, cookie, &[])
    }

    /// The same, with `link` appended to the salt: what the signalling link that
    /// carried both shares authenticated (both sigds' Noise static keys, caller's
    /// first), so the call's keys are bound to the two hosts that agreed them. Empty
    /// on a clear link, which makes it `agree`.
    pub fn agree_bound(
        self,
        role: Role,
        peer: &[u8],
        cookie: u32,
        link: &[u8],
    ) -> Result<PathKeys, KeyError> {
        let mine = self.public;
        let (caller, callee) = match role {
            Role::Caller => (&mine[..], peer),
            Role::Callee => (peer, &mine[..]),
        };
        let mut salt = Vec::with_capacity(2 * SHARE_LEN + 4);
        salt.extend_from_slice(caller);
        salt.extend_from_slice(callee);
        salt.extend_from_slice(&cookie.to_be_bytes());
        salt.extend_from_slice(link);
        let (fwd, back) = agreement::agree_ephemeral(
            self.private,
            UnparsedPublicKey::new(&X25519, peer),
            KeyError::BadShare,
            |secret| Ok(derive(&salt, secret)),
        )?;
        Ok(match role {
            Role::Caller => PathKeys { tx: fwd, rx: back },
            Role::Callee => PathKeys { tx: back, rx: fwd },
        })
    }
}

struct KeyLen;

impl aws_lc_rs::hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        KEY_LEN
    }
}

fn expand(prk: &aws_lc_rs::hkdf::Prk, label: &[u8]) -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    prk.expand(&[label], KeyLen)
        .and_then(|okm| okm.fill(&mut k))
        .expect("HKDF-SHA256 expands 32 octets");
    k
}

fn derive(salt: &[u8], secret: &[u8]) -> ([u8; KEY_LEN], [u8; KEY_LEN]) {
    let prk = aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, salt).extract(secret);
    (
        expand(&prk, b"natm tpdu c>s"),
        expand(&prk, b"natm tpdu s>c"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;

    fn tpdu(payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; tpdu::HEADER_LEN];
        v[0] = 0x10;
        v[4..8].copy_from_slice(&0xdead_beef_u32.to_be_bytes());
        v.extend_from_slice(payload);
        v.extend_from_slice(&[0; OVERHEAD]);
        v
    }

    #[test]
    fn exchange_gives_both_ends_the_same_keys_crossed() {
        let rng = SystemRandom::new();
        let (a, b) = (
            KeyShare::generate(&rng).unwrap(),
            KeyShare::generate(&rng).unwrap(),
        );
        let (pa, pb) = (a.public(), b.public());
        let ka = a.agree(Role::Caller, &pb, 7).unwrap();
        let kb = b.agree(Role::Callee, &pa, 7).unwrap();
        assert_eq!(ka, kb.reversed());
        assert_ne!(ka.tx, ka.rx);
    }

    #[test]
    fn low_order_share_is_refused() {
        let rng = SystemRandom::new();
        let a = KeyShare::generate(&rng).unwrap();
        assert_eq!(
            a.agree(Role::Caller, &[0u8; 32], 1).unwrap_err(),
            KeyError::BadShare
        );
    }

    #[test]
    fn seal_open_round_trip_and_replay() {
        let k = [3u8; KEY_LEN];
        let (s, mut o) = (Sealer::new(&k), Opener::new(&k));
        let mut f = tpdu(b"hello");
        assert_eq!(s.seal(&mut f).unwrap(), 0);
        assert_ne!(&f[32..37], b"hello");
        let copy = f.clone();
        let clear = o.open(&mut f).unwrap();
        assert_eq!(&clear[32..], b"hello");
        assert_eq!(clear[1] & SEALED, 0);
        let mut again = copy.clone();
        assert_eq!(o.open(&mut again), Err(OpenError::Replayed(0)));
        let mut bent = copy.clone();
        bent[33] ^= 1;
        let mut o2 = Opener::new(&k);
        assert_eq!(o2.open(&mut bent), Err(OpenError::BadTag));
        let mut hdr = copy;
        hdr[9] ^= 1;
        assert_eq!(o2.open(&mut hdr), Err(OpenError::BadTag));
    }

    #[test]
    fn sealing_from_elsewhere_writes_the_frame_sealing_in_place_does() {
        let k = [5u8; KEY_LEN];
        let (inplace, from) = (Sealer::new(&k), Sealer::new(&k));
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let mut a = tpdu(&payload);
        let mut b = tpdu(&vec![0xee; payload.len()]);
        assert_eq!(inplace.seal(&mut a).unwrap(), 0);
        assert_eq!(from.seal_from(&mut b, &payload).unwrap(), 0);
        assert_eq!(a, b, "the same key and number give the same frame");
        let mut o = Opener::new(&k);
        assert_eq!(&o.open(&mut b).unwrap()[32..], &payload[..]);
        // A frame whose room does not match the payload is refused, and takes no
        // packet number.
        let mut short = tpdu(&payload[..10]);
        assert_eq!(
            from.seal_from(&mut short, &payload),
            Err(SealError::Short(short.len()))
        );
        assert_eq!(from.next_pn(), 1);
    }

    #[test]
    fn window_takes_reordering_and_refuses_old() {
        let mut w = ReplayWindow::default();
        for pn in [5, 3, 4, 0, 1100, 1000] {
            assert!(w.fresh(pn), "{pn}");
            w.accept(pn);
            assert!(!w.fresh(pn), "{pn}");
        }
        assert!(!w.fresh(5), "below the window");
        assert!(w.fresh(1099) && w.fresh(1050) && w.fresh(77));
        assert!(!w.fresh(76), "1100 - 1024 = 76 is just below the window");
    }

    #[test]
    fn keys_bound_to_a_link_agree_only_with_the_same_link() {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pair = || {
            let a = KeyShare::generate(&rng).unwrap();
            let b = KeyShare::generate(&rng).unwrap();
            let (pa, pb) = (a.public(), b.public());
            (a, b, pa, pb)
        };
        let (a, b, pa, pb) = pair();
        let ka = a.agree_bound(Role::Caller, &pb, 7, b"ab").unwrap();
        let kb = b.agree_bound(Role::Callee, &pa, 7, b"ab").unwrap();
        assert_eq!((ka.tx, ka.rx), (kb.rx, kb.tx));
        let (a, b, pa, pb) = pair();
        let ka = a.agree_bound(Role::Caller, &pb, 7, b"ab").unwrap();
        let kb = b.agree_bound(Role::Callee, &pa, 7, b"am").unwrap();
        assert_ne!(ka.tx, kb.rx);
        // Unbound is the clear link's agreement.
        let (a, b, pa, pb) = pair();
        let ka = a.agree_bound(Role::Caller, &pb, 7, &[]).unwrap();
        let kb = b.agree(Role::Callee, &pa, 7).unwrap();
        assert_eq!(ka.tx, kb.rx);
    }
}
