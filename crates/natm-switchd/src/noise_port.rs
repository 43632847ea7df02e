//! Noise on a host port's signalling link (issue 31, docs/decisions/0031-noise-switch-links.md):
//! the switch end of the link a host's sigd authenticates with
//! `natm_proto::sig::noise` as it does its links to peer sigds. The same frames and
//! handshake (`NoiseLink`), and the same limits as sigd's: one handshake answer per
//! [`noise::ANSWER_EVERY_NS`], the first one at once (the port's peer is configured),
//! and a handshake of its own when the peer sends under a session this end forgot
//! (the switch restarted). A port has one peer address, so the port's `NoiseLink`
//! bounds what a spoofed source can make the switch hold, as sigd's does per link.
//!
//! A switch's links carry more than SSCOP — routing frames (VPI 0/VCI 18) on a trunk
//! (`signalling = "switch"`), ILMI (VPI 0/VCI 16) towards a host — so what is sealed
//! is the whole UDP-adaptor frame (VC header and payload, `wire::vcframe`), which says
//! which it is. (Between two sigds it is the SSCOP PDU alone.)
//!
//! Sans-IO: the caller passes the time and sends what comes back.

use natm_proto::sig::noise::{self, NoiseError, NoiseLink, PublicKey, Received, Trust};
use natm_proto::sig::peer::Control;
use natm_proto::time::Instant;
use natm_proto::wire::sscop::Pdu as SscopPdu;
use natm_proto::wire::vcframe;

/// Why a datagram from the port's peer address was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// A first handshake message (or a transport message for a forgotten session)
    /// within [`noise::ANSWER_EVERY_NS`] of the last answered.
    OverLimit,
    /// A clear SSCOP PDU, or another peer-control frame: the link is Noise's.
    NotNoise,
    /// The Noise layer refused it.
    Noise(NoiseError),
}

/// What an opened transport message carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inner {
    /// An SSCOP PDU.
    Signal(Vec<u8>),
    /// A routing frame (a trunk's).
    Routing(Vec<u8>),
    /// An ILMI message (a host's).
    Ilmi(Vec<u8>),
}

/// One signalling port's Noise link.
pub(crate) struct NoisePort {
    link: NoiseLink,
    /// When a first handshake message was last answered.
    last_answer: Option<Instant>,
    /// Index generator (SplitMix64 from an OS seed): indices name sessions, they
    /// guard nothing.
    index: u64,
    /// Frames refused (bad tags, replays, unknown sessions, clear PDUs).
    pub(crate) auth_failures: u64,
    /// Handshakes whose peer proved another key than the pinned one.
    pub(crate) key_mismatches: u64,
    /// When a wrong key was last logged (once a second at most).
    pub(crate) last_mismatch_log: Option<Instant>,
    /// Where keys pinned on first use are recorded.
    pub(crate) pins_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for NoisePort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoisePort")
            .field("link", &self.link)
            .field("auth_failures", &self.auth_failures)
            .finish_non_exhaustive()
    }
}

impl NoisePort {
    /// The port whose switch holds static key `private`, the peer to prove `trust`;
    /// `seed` starts the index sequence.
    pub(crate) fn new(
        private: [u8; noise::KEY_LEN],
        trust: Trust,
        psk: Option<[u8; noise::KEY_LEN]>,
        seed: u64,
    ) -> NoisePort {
        NoisePort {
            link: NoiseLink::new(private, trust, psk),
            last_answer: None,
            index: seed,
            auth_failures: 0,
            key_mismatches: 0,
            last_mismatch_log: None,
            pins_file: None,
        }
    }

    fn next_index(state: &mut u64) -> u32 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as u32
    }

    /// Whether a session is agreed.
    #[cfg(test)]
    pub(crate) fn has_keys(&self) -> bool {
        self.link.has_keys()
    }

    /// Whether the port's pre-shared key is mixed into the handshake.
    pub(crate) fn has_psk(&self) -> bool {
        self.link.has_psk()
    }

    /// The key the peer proved.
    pub(crate) fn peer_key(&self) -> Option<PublicKey> {
        self.link.peer_key()
    }

    /// A key pinned on first use, for the caller to store.
    pub(crate) fn take_new_pin(&mut self) -> Option<PublicKey> {
        self.link.take_new_pin()
    }

    /// The datagrams that carry SSCOP PDU `pdu`. A BGN of a new SSCOP connection
    /// starts a link lifetime, so it starts new keys too (as sigd's links do).
    pub(crate) fn seal(&mut self, now: Instant, pdu: &[u8]) -> Vec<Vec<u8>> {
        if let Ok(SscopPdu::Bgn { nsq, .. }) = SscopPdu::parse(pdu) {
            self.link.bgn(nsq);
        }
        let state = &mut self.index;
        let f = vcframe::signalling_frame(pdu);
        self.link.seal(now, &f, || Self::next_index(state))
    }

    /// The datagrams that carry routing frame `frame` (a trunk's).
    pub(crate) fn seal_routing(&mut self, now: Instant, frame: &[u8]) -> Vec<Vec<u8>> {
        let state = &mut self.index;
        let f = vcframe::routing_frame(frame);
        self.link.seal(now, &f, || Self::next_index(state))
    }

    /// The datagrams that carry ILMI message `message` (towards a host).
    pub(crate) fn seal_ilmi(&mut self, now: Instant, message: &[u8]) -> Vec<Vec<u8>> {
        let state = &mut self.index;
        let f = vcframe::ilmi_frame(message);
        self.link.seal(now, &f, || Self::next_index(state))
    }

    /// What an opened transport message `plain` carries (`None`: not SSCOP, routing
    /// or ILMI, counted as an authentication failure).
    pub(crate) fn inner(&mut self, plain: Vec<u8>) -> Option<Inner> {
        let got = if let Some(p) = vcframe::signalling_pdu(&plain) {
            Some(Inner::Signal(p.to_vec()))
        } else if let Some(f) = vcframe::routing_pdu(&plain) {
            Some(Inner::Routing(f.to_vec()))
        } else {
            vcframe::ilmi_pdu(&plain).map(|m| Inner::Ilmi(m.to_vec()))
        };
        if got.is_none() {
            self.auth_failures += 1;
        }
        got
    }

    /// A signalling datagram from the port's peer address.
    pub(crate) fn receive(&mut self, now: Instant, datagram: &[u8]) -> Result<Received, Dropped> {
        let r = self.receive_inner(now, datagram);
        match r {
            Err(Dropped::Noise(NoiseError::WrongKey { .. })) => self.key_mismatches += 1,
            Err(Dropped::OverLimit) | Ok(_) => {}
            Err(_) => self.auth_failures += 1,
        }
        r
    }

    fn receive_inner(&mut self, now: Instant, datagram: &[u8]) -> Result<Received, Dropped> {
        let (init, data) = match Control::parse(datagram) {
            Ok(Control::NoiseInit { .. }) => (true, false),
            Ok(Control::NoiseData { .. }) => (false, true),
            Ok(Control::NoiseResp { .. } | Control::NoiseFinal { .. }) => (false, false),
            _ => return Err(Dropped::NotNoise),
        };
        if init || (data && !self.link.has_keys()) {
            // sigd's limit (`core::peers`): one answer per ANSWER_EVERY_NS, the
            // configured peer's first at once.
            if self.last_answer.is_some_and(|t| {
                now.as_nanos().saturating_sub(t.as_nanos()) < noise::ANSWER_EVERY_NS
            }) {
                return Err(Dropped::OverLimit);
            }
            if init {
                self.last_answer = Some(now);
            }
        }
        let state = &mut self.index;
        let index = Self::next_index(state);
        match self.link.receive(now, datagram, || index) {
            // The peer holds a session this end forgot (the switch restarted): a
            // handshake of its own lets the peer's SSCOP learn there is no link.
            Err(NoiseError::UnknownSession) if data && !self.link.has_keys() => Ok(Received::Send(
                self.link.start(now, index).into_iter().collect(),
            )),
            other => other.map_err(Dropped::Noise),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::vcframe;

    fn key(b: u8) -> [u8; 32] {
        [b; 32]
    }

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(1 + ms * 1_000_000)
    }

    /// Delivers every datagram of `out` to `to`, and its answers back, until quiet;
    /// the PDUs each side opened.
    fn exchange(
        now: Instant,
        sw: &mut NoisePort,
        host: &mut NoiseLink,
        mut to_switch: Vec<Vec<u8>>,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut at_sw, mut at_host) = (Vec::new(), Vec::new());
        let mut to_host = Vec::new();
        for _ in 0..8 {
            for d in std::mem::take(&mut to_switch) {
                match sw.receive(now, &d) {
                    Ok(Received::Pdu(p)) => at_sw.push(p),
                    Ok(Received::Send(v)) => to_host.extend(v),
                    Err(e) => panic!("{e:?}"),
                }
            }
            for d in std::mem::take(&mut to_host) {
                match host.receive(now, &d, || 77) {
                    Ok(Received::Pdu(p)) => at_host.push(p),
                    Ok(Received::Send(v)) => to_switch.extend(v),
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        (at_sw, at_host)
    }

    #[test]
    fn a_host_and_a_switch_agree_a_session_pin_on_first_use_and_refuse_clear_pdus() {
        let mut sw = NoisePort::new(key(1), Trust::FirstUse, None, 5);
        let mut host = NoiseLink::new(key(2), Trust::FirstUse, None);
        let first = host.seal(t(0), b"bgn", || 9);
        let (at_sw, _) = exchange(t(0), &mut sw, &mut host, first);
        assert_eq!(at_sw, vec![b"bgn".to_vec()]);
        assert!(sw.has_keys() && host.has_keys());
        assert_eq!(sw.take_new_pin(), Some(noise::public_key(&key(2))));
        assert_eq!(host.take_new_pin(), Some(noise::public_key(&key(1))));
        // The switch's PDUs reach the host sealed, as frames that say their VC.
        let out = sw.seal(t(1), b"stat");
        let got = host.receive(t(1), &out[0], || 0).unwrap();
        assert_eq!(got, Received::Pdu(vcframe::signalling_frame(b"stat")));
        let out = sw.seal_ilmi(t(1), b"snmp");
        let Received::Pdu(plain) = host.receive(t(1), &out[0], || 0).unwrap() else {
            panic!("a PDU");
        };
        assert_eq!(vcframe::ilmi_pdu(&plain), Some(&b"snmp"[..]));
        let to_sw = host.seal(t(1), &vcframe::ilmi_frame(b"reply"), || 0);
        let Ok(Received::Pdu(plain)) = sw.receive(t(1), &to_sw[0]) else {
            panic!("a PDU");
        };
        assert_eq!(sw.inner(plain), Some(Inner::Ilmi(b"reply".to_vec())));
        // A clear END from the host's address is refused and counted.
        let end = SscopPdu::End {
            source_sscop: false,
            uu: Vec::new(),
        };
        let clear = vcframe::signalling_frame(&end.to_bytes());
        assert_eq!(sw.receive(t(2), &clear), Err(Dropped::NotNoise));
        // A replay of a sealed frame is refused too.
        let again = host.seal(t(2), b"sd", || 0);
        assert!(matches!(sw.receive(t(2), &again[0]), Ok(Received::Pdu(_))));
        assert_eq!(
            sw.receive(t(2), &again[0]),
            Err(Dropped::Noise(NoiseError::Replay))
        );
        assert_eq!(sw.auth_failures, 2);
    }

    #[test]
    fn a_host_with_another_key_than_the_pinned_one_is_refused() {
        let pinned = noise::public_key(&key(2));
        let mut sw = NoisePort::new(key(1), Trust::Pinned(pinned), None, 5);
        let mut impostor = NoiseLink::new(key(3), Trust::FirstUse, None);
        let first = impostor.seal(t(0), b"bgn", || 9);
        let Ok(Received::Send(answer)) = sw.receive(t(0), &first[0]) else {
            panic!("no answer");
        };
        let Ok(Received::Send(fin)) = impostor.receive(t(0), &answer[0], || 0) else {
            panic!("no final message");
        };
        // The final message proves key 3: refused, no session, nothing delivered.
        assert!(matches!(
            sw.receive(t(0), &fin[0]),
            Err(Dropped::Noise(NoiseError::WrongKey { .. }))
        ));
        assert!(!sw.has_keys());
        assert_eq!(sw.key_mismatches, 1);
        for d in &fin[1..] {
            assert!(sw.receive(t(0), d).is_err());
        }
    }

    #[test]
    fn first_messages_are_answered_once_per_interval() {
        let mut sw = NoisePort::new(key(1), Trust::FirstUse, None, 5);
        let mut a = NoiseLink::new(key(2), Trust::FirstUse, None);
        let mut b = NoiseLink::new(key(3), Trust::FirstUse, None);
        let ia = a.seal(t(0), b"x", || 1);
        let ib = b.seal(t(0), b"x", || 2);
        assert!(sw.receive(t(0), &ia[0]).is_ok());
        assert_eq!(sw.receive(t(1), &ib[0]), Err(Dropped::OverLimit));
        assert!(sw.receive(t(11), &ib[0]).is_ok());
    }

    #[test]
    fn a_restarted_switch_answers_a_forgotten_session_with_a_handshake() {
        let mut sw = NoisePort::new(key(1), Trust::FirstUse, None, 5);
        let mut host = NoiseLink::new(key(2), Trust::FirstUse, None);
        let first = host.seal(t(0), b"bgn", || 9);
        exchange(t(0), &mut sw, &mut host, first);
        let pinned = sw.peer_key().unwrap();
        // The switch restarts (its pins kept): the host's next PDU names a session
        // the switch no longer holds, and gets a first handshake message back.
        let mut sw = NoisePort::new(key(1), Trust::Pinned(pinned), None, 6);
        let d = host.seal(t(20), b"sd", || 0);
        let Ok(Received::Send(v)) = sw.receive(t(20), &d[0]) else {
            panic!("no handshake");
        };
        assert!(matches!(
            Control::parse(&v[0]),
            Ok(Control::NoiseInit { .. })
        ));
        let Ok(Received::Send(resp)) = host.receive(t(20), &v[0], || 3) else {
            panic!("the host does not answer");
        };
        exchange(t(20), &mut sw, &mut host, resp);
        assert!(sw.has_keys());
        let d = host.seal(t(21), b"sd2", || 0);
        assert_eq!(
            sw.receive(t(21), d.last().unwrap()),
            Ok(Received::Pdu(b"sd2".to_vec()))
        );
    }

    #[test]
    fn a_trunk_seals_signalling_and_routing_and_tells_them_apart() {
        let mut a = NoisePort::new(key(1), Trust::FirstUse, None, 5);
        let mut b = NoisePort::new(key(2), Trust::FirstUse, None, 6);
        let mut to_b = a.seal_routing(t(0), b"hello");
        to_b.extend(a.seal(t(0), b"bgn"));
        let mut opened = Vec::new();
        for _ in 0..8 {
            let mut to_a = Vec::new();
            for d in std::mem::take(&mut to_b) {
                match b.receive(t(0), &d) {
                    Ok(Received::Pdu(p)) => opened.push(b.inner(p).unwrap()),
                    Ok(Received::Send(v)) => to_a.extend(v),
                    Err(e) => panic!("{e:?}"),
                }
            }
            for d in to_a {
                match a.receive(t(0), &d) {
                    Ok(Received::Send(v)) => to_b.extend(v),
                    other => panic!("{other:?}"),
                }
            }
        }
        assert_eq!(
            opened,
            [
                Inner::Routing(b"hello".to_vec()),
                Inner::Signal(b"bgn".to_vec())
            ]
        );
        // A clear routing frame from the trunk's peer address is refused.
        let clear = vcframe::routing_frame(b"forged");
        assert_eq!(b.receive(t(1), &clear), Err(Dropped::NotNoise));
    }

    /// What sealing and opening one SSCOP PDU costs (a measurement): `cargo test -p
    /// natm-switchd --release noise_pdu_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn noise_pdu_cost() {
        let mut sw = NoisePort::new(key(1), Trust::FirstUse, None, 5);
        let mut host = NoiseLink::new(key(2), Trust::FirstUse, None);
        let first = host.seal(t(0), b"bgn", || 9);
        exchange(t(0), &mut sw, &mut host, first);
        let pdu = [0x5au8; 64];
        let n = 200_000u32;
        let start = std::time::Instant::now();
        for i in 0..n {
            let now = t(1 + u64::from(i) / 1000);
            let d = host.seal(now, &pdu, || 0);
            assert!(matches!(
                sw.receive(now, d.last().unwrap()),
                Ok(Received::Pdu(_))
            ));
        }
        let per = start.elapsed() / n;
        println!("seal + open of a 64-octet PDU: {per:?}");
    }
}
