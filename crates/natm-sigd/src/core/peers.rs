//! Calls to and from peer sigds over their signalling links: one `sig::Saal` (SSCOP
//! and Q.2931 call control, seed 004 §3–7) per peer endpoint, driven with the core's
//! time; what the links say becomes messages to applications.

use std::time::Duration;

use natm_proto::sig::{CallAccept, CallEvent, CallParams, ClearedBy, Sap, SigEvent};
use natm_proto::wire::ipc::DataPath;
use natm_proto::wire::q2931::{ConnectionId, NatmParams};
use natm_proto::wire::seal::Role;
use tracing::warn;

use natm_proto::sig::noise::{self, NoiseError, NoiseLink, Trust};
use natm_proto::sig::peer::{self, Control, MAX_ECHOED_PDU};
use natm_proto::wire::sscop::Pdu as SscopPdu;
use natm_proto::wire::vcframe;

use super::keys;
use super::link::{self, LinkAuth, PeerLink};
use super::qos::{demand, reverse};
use super::ratelog::Event;
use super::*;
use crate::admission::{Demand, Refusal};
use crate::config::CallDirection;

/// SSCOP and call control as sigd runs them (docs/sigd.md "Signalling links").
pub(super) fn saal_config(cfg: &Config) -> SaalConfig {
    let mut s = SaalConfig::default();
    // A burst of calls puts several SDs per call in flight each way; a window wider
    // than Q.2110's 128 SDs keeps credit (which returns in the STAT answering a POLL,
    // sent every MaxPD SDs) from throttling thousands of calls per second.
    s.sscop.window = 4096;
    s.sscop.max_buffered = 4096;
    s.calls.t303 = cfg.timers.t303;
    s.calls.t308 = cfg.timers.t308;
    s.calls.t310 = cfg.timers.t310;
    s.calls.t313 = cfg.timers.t313;
    // Active calls outlive a lost link to a peer sigd this long (`restart`); links to
    // a switch keep the network's T309 of 0 (`switch_saal_config`).
    s.calls.t309 = cfg.restart.preserve;
    s.calls.max_calls = cfg.max_calls;
    s.calls.link_cell_rate =
        u32::try_from(cfg.capacity_bps / natm_proto::wire::qos::BITS_PER_CELL).unwrap_or(u32::MAX);
    s
}

/// How often one link answers a first handshake message (a repeat of the same one
/// gets the same answer, computed once).
const ANSWER_EVERY: Duration = Duration::from_nanos(noise::ANSWER_EVERY_NS);

/// A link to a switch: sigd's window and call timers with the network's SSCOP
/// timers and T309 (`SaalConfig::network`), and the host link's Timer_NO_RESPONSE
/// (`SaalConfig::HOST_LINK_NO_RESPONSE`, as the switch's host port has it).
fn switch_saal_config(host: &SaalConfig) -> SaalConfig {
    let net = SaalConfig::network();
    let mut s = host.clone();
    let (window, buffered) = (s.sscop.window, s.sscop.max_buffered);
    s.sscop = net.sscop;
    s.sscop.window = window;
    s.sscop.max_buffered = buffered;
    s.calls.t309 = net.calls.t309;
    s.sscop.timer_no_response = SaalConfig::HOST_LINK_NO_RESPONSE;
    s.reestablish_after = net.reestablish_after;
    s
}

impl Core {
    /// Brings up the signalling link to every switch this host is attached to (a
    /// switch offers calls only over a link that is up). Call once, at start.
    pub fn start(&mut self, now: Instant) {
        self.tick(now);
        for peer in self.cfg.switches.clone() {
            if self.link(peer, true).is_some() {
                self.dirty.push(peer);
            }
        }
        self.ilmi_start();
    }

    /// The VCIs this side receives on from `link`: on a link to a switch, the user
    /// half only (`vci::USER_HALF`: through a switch every label is bidirectional, and
    /// the switch hands out the other half).
    pub(super) fn vci_pool(&mut self, link: SocketAddr) -> &mut VciPool {
        let switch = self.cfg.switches.contains(&link);
        self.vcis.entry(Some(link)).or_insert_with(|| {
            if switch {
                VciPool::range(natm_proto::sig::vci::USER_HALF)
            } else {
                VciPool::new()
            }
        })
    }

    /// A datagram from the signalling socket: a peer-control frame
    /// (`natm_proto::sig::peer`: admission cookie, Noise handshake and transport
    /// messages, a switch's PSK frames), or a clear SSCOP PDU from a peer configured
    /// clear. A link is created only for a configured peer, or for an unknown one
    /// that echoed a cookie (`[peers] accept_unknown`); a peer sigd's frames must
    /// be Noise-authenticated unless its `[[peer]]` says `clear = true`. Anything
    /// else is counted and dropped, holding nothing.
    pub fn handle_peer(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
        self.tick(now);
        let now = self.now;
        self.ilmi_touch(Some(peer));
        if let Some(pdu) = link::unframe(datagram) {
            return self.plain_pdu(peer, pdu);
        }
        // ILMI in the clear: only on a switch link configured clear.
        if let Some(m) = vcframe::ilmi_pdu(datagram) {
            let clear_switch = self
                .peers
                .get(&peer)
                .is_some_and(|l| l.switch && l.auth.is_clear());
            if clear_switch {
                return self.ilmi_input(peer, m);
            }
            // A forgery on a Noise link, as a clear SSCOP PDU there is.
            self.counters.auth_failures += 1;
            return self.drop_frame(peer, "a clear ILMI frame from no clear switch link");
        }
        match Control::parse(datagram) {
            Ok(Control::Echo { cookie, pdu }) => self.on_echo(peer, cookie, pdu),
            Ok(Control::Challenge { cookie, pdu }) => {
                // Only for a handshake this side is starting: echo at once (the peer
                // holds nothing until then).
                let opening = self
                    .peers
                    .get(&peer)
                    .is_some_and(|l| matches!(l.auth, LinkAuth::Noise(_)) && !l.auth.has_keys());
                if opening {
                    let echo = Control::Echo { cookie, pdu }.to_bytes();
                    self.out.push_back(Output::ToPeer(peer, Bytes::from(echo)));
                } else {
                    self.drop_frame(peer, "an admission challenge for no link being opened");
                }
            }
            // The pre-shared-key frames of issue 16: keyed links run Noise now, the
            // key mixed into its handshake (issue 31).
            Ok(Control::Hello { .. })
            | Ok(Control::HelloAck { .. })
            | Ok(Control::Sealed { .. }) => {
                self.counters.auth_failures += 1;
                self.drop_frame(peer, "a pre-shared-key frame: keyed links run Noise");
            }
            Ok(Control::NoiseInit { sender, msg })
                if !self.peers.contains_key(&peer) && !self.is_configured(&peer) =>
            {
                self.challenge(peer, &[&sender.to_be_bytes()[..], msg].concat())
            }
            Ok(
                Control::NoiseInit { .. }
                | Control::NoiseResp { .. }
                | Control::NoiseFinal { .. }
                | Control::NoiseData { .. },
            ) => self.noise_frame(now, peer, datagram),
            Err(_) => {
                self.counters.malformed_signalling += 1;
                debug!(%peer, len = datagram.len(), "not a signalling frame on VPI 0/VCI 5: dropped");
            }
        }
    }

    /// Whether `peer` is named by the configuration (a route, a switch, a `[[peer]]`).
    pub(super) fn is_configured(&self, peer: &SocketAddr) -> bool {
        self.cfg.routes.iter().any(|(_, p)| p == peer)
            || self.cfg.switches.contains(peer)
            || self.cfg.peers.entry(peer).is_some()
    }

    fn peer_key(&self, peer: &SocketAddr) -> Option<&[u8]> {
        self.cfg
            .peers
            .entry(peer)
            .and_then(|e| e.key.as_ref())
            .map(|k| k.0.as_slice())
    }

    /// Whether `peer` may signal in clear SSCOP PDUs: a `[[peer]]` (a sigd or a
    /// switch) with `clear = true`. Every other peer must prove its Noise key (or a
    /// keyed switch its pre-shared key).
    fn clear_allowed(&self, peer: &SocketAddr) -> bool {
        match self.peers.get(peer) {
            Some(l) => l.auth.is_clear(),
            None => self.cfg.peers.entry(peer).is_some_and(|e| e.clear),
        }
    }

    /// How a new link to `peer` is authenticated (docs/sigd.md "Signalling
    /// links"): by Noise unless configured clear, proving the configured or pinned
    /// key (or pinning the first one seen), with a configured pre-shared key mixed
    /// in on a link to a sigd; a switch's link with a pre-shared key by the PSK
    /// frames instead (issue 16).
    fn link_auth(&self, peer: &SocketAddr) -> LinkAuth {
        let entry = self.cfg.peers.entry(peer);
        if entry.is_some_and(|e| e.clear) {
            return LinkAuth::Clear;
        }
        let trust = match entry
            .and_then(|e| e.public_key)
            .or_else(|| self.known_peers.get(peer).copied())
        {
            Some(k) => Trust::Pinned(k),
            None => Trust::FirstUse,
        };
        // A configured key (a sigd's or a switch's) is mixed into the handshake.
        let psk = self
            .peer_key(peer)
            .map(natm_proto::sig::noise::psk_from_key);
        LinkAuth::Noise(Box::new(NoiseLink::new(self.noise_key, trust, psk)))
    }

    /// What a call's TPDU keys are bound to on `link` (`seal::KeyShare::agree_bound`):
    /// both sigds' Noise static keys, the caller's first, once the link's handshake
    /// proved the peer's; nothing on a clear link, nor on a switch's (whose key is
    /// the switch's, not the far sigd's: each end would bind another pair).
    fn link_identities(&self, link: SocketAddr, role: Role) -> Vec<u8> {
        let Some(theirs) = self.peers.get(&link).and_then(|l| match &l.auth {
            LinkAuth::Noise(n) if !l.switch => n.peer_key(),
            _ => None,
        }) else {
            return Vec::new();
        };
        let mine = self.public_key();
        match role {
            Role::Caller => [mine, theirs].concat(),
            Role::Callee => [theirs, mine].concat(),
        }
    }

    /// An unknown source's first handshake message (or a clear BGN): a stateless
    /// CHALLENGE with a cookie, carrying `echoed` back.
    fn challenge(&mut self, peer: SocketAddr, echoed: &[u8]) {
        let now = self.now;
        // seed 000 §4 leaves who may signal to the network; over UDP anyone can, so
        // an unknown source first proves it receives at its address.
        if !self.cfg.peers.accept_unknown {
            return self.drop_frame(
                peer,
                "not a configured peer ([peers] accept_unknown = false)",
            );
        }
        if echoed.len() > MAX_ECHOED_PDU || self.answers.allow(now).is_none() {
            return self.drop_frame(peer, "over the limit of admission challenges");
        }
        self.counters.peer_challenges += 1;
        let cookie = peer::mint_cookie(&self.secret, peer.to_string().as_bytes(), now);
        let ch = Control::Challenge {
            cookie: &cookie,
            pdu: echoed,
        };
        self.out
            .push_back(Output::ToPeer(peer, Bytes::from(ch.to_bytes())));
    }

    /// A Noise frame for a peer sigd's link: a handshake message or an SSCOP PDU.
    /// A link is made for a configured peer's first handshake message or transport
    /// message (this end forgot the link: it restarted, or let it expire), an
    /// unknown one's only by its cookie echo.
    fn noise_frame(&mut self, now: Instant, peer: SocketAddr, datagram: &[u8]) {
        let parsed = Control::parse(datagram);
        let init = matches!(parsed, Ok(Control::NoiseInit { .. }));
        let data = matches!(parsed, Ok(Control::NoiseData { .. }));
        if !init && !data && !self.peers.contains_key(&peer) {
            return self.drop_frame(peer, "a Noise handshake message for no link");
        }
        // A transport message naming a session this end forgot is answered by a
        // handshake of its own, limited like an answer.
        if init || (data && self.peers.get(&peer).is_none_or(|l| !l.auth.has_keys())) {
            // Each first message costs a responder two DH operations: a link
            // answers at most one per ANSWER_EVERY, and unknown peers' new links
            // share one budget.
            let last = self.peers.get(&peer).and_then(|l| l.last_answer);
            let ok = match last {
                Some(t) => now.saturating_duration_since(t) >= ANSWER_EVERY,
                // A configured peer's first is not starved by a flood from
                // spoofed sources.
                None if self.is_configured(&peer) => true,
                None => self.answers.allow(now).is_some(),
            };
            if !ok {
                return self.drop_frame(peer, "over the limit of handshake answers");
            }
        }
        let index = self.ids.rng.next_u32();
        let Some(l) = self.link(peer, false) else {
            return self.drop_frame(peer, "no link could be made");
        };
        if init {
            l.last_answer = Some(now);
        }
        let LinkAuth::Noise(n) = &mut l.auth else {
            return self.drop_frame(
                peer,
                "a Noise frame from a peer configured clear or a keyed switch",
            );
        };
        let got = n.receive(now, datagram, || index);
        let got = match got {
            // The peer holds a session this end forgot (it restarted; the link
            // was made again): a handshake of its own lets the peer's SSCOP hear
            // that there is no connection.
            Err(NoiseError::UnknownSession)
                if !n.has_keys()
                    && matches!(Control::parse(datagram), Ok(Control::NoiseData { .. })) =>
            {
                Ok(noise::Received::Send(
                    n.start(now, index).into_iter().collect(),
                ))
            }
            other => other,
        };
        let pin = n.take_new_pin();
        match got {
            // A switch's link seals whole VC frames: SSCOP on VCI 5, ILMI on VCI 16.
            Ok(noise::Received::Pdu(frame)) if l.switch => {
                if let Some(pdu) = link::unframe(&frame) {
                    l.saal.handle_frame(now, pdu);
                    self.dirty.push(peer);
                } else if let Some(m) = vcframe::ilmi_pdu(&frame) {
                    let m = m.to_vec();
                    self.ilmi_input(peer, &m);
                } else {
                    self.counters.auth_failures += 1;
                    self.drop_frame(peer, "a sealed frame on neither VCI 5 nor VCI 16");
                }
            }
            Ok(noise::Received::Pdu(pdu)) => {
                l.saal.handle_frame(now, &pdu);
                self.dirty.push(peer);
            }
            Ok(noise::Received::Send(frames)) => {
                for f in frames {
                    self.out.push_back(Output::ToPeer(peer, Bytes::from(f)));
                }
            }
            Err(NoiseError::WrongKey { seen, pinned }) => {
                self.counters.auth_failures += 1;
                self.counters.key_mismatches += 1;
                if let Some(suppressed) = self.remote_log(Event::Dropped) {
                    tracing::error!(
                        %peer,
                        suppressed,
                        seen = %noise::key_to_text(&seen),
                        pinned = %noise::key_to_text(&pinned),
                        "signalling peer proved a different Noise key than the one pinned or configured: link refused (if its key really changed, remove its line from [peers] known_peers_file or fix [[peer]] public_key)"
                    );
                }
            }
            Err(e) => {
                self.counters.auth_failures += 1;
                if let Some(suppressed) = self.remote_log(Event::Dropped) {
                    warn!(%peer, suppressed, error = %e, "signalling frame failed authentication: dropped");
                }
            }
        }
        if let Some(k) = pin {
            self.known_peers.insert(peer, k);
            self.new_pins.push((peer, k));
            info!(%peer, key = %noise::key_to_text(&k), "pinned a signalling peer's Noise key on first use");
        }
    }

    /// A remote event's log line may be written (see `ratelog`): `Some(suppressed)`.
    pub(super) fn remote_log(&mut self, e: Event) -> Option<u64> {
        let r = self.ratelog.allow(e, self.now);
        if r.is_none() {
            self.counters.log_suppressed += 1;
        }
        r
    }

    pub(super) fn drop_frame(&mut self, peer: SocketAddr, why: &str) {
        self.counters.peer_refusals += 1;
        if let Some(suppressed) = self.remote_log(Event::Dropped) {
            info!(%peer, suppressed, why, "signalling datagram dropped");
        }
    }

    /// A plain SSCOP PDU (VPI 0/VCI 5).
    fn plain_pdu(&mut self, peer: SocketAddr, pdu: &[u8]) {
        let now = self.now;
        if !self.peers.contains_key(&peer) && !self.is_configured(&peer) {
            // An unknown source is a peer sigd, which must prove its key.
            self.counters.auth_failures += 1;
            return self.drop_frame(
                peer,
                "a clear SSCOP PDU from an unknown source: peer sigds signal over Noise",
            );
        }
        if !self.clear_allowed(&peer) {
            self.counters.auth_failures += 1;
            if let Some(suppressed) = self.remote_log(Event::Dropped) {
                warn!(%peer, suppressed, "clear SSCOP PDU from a peer that must authenticate (Noise, or a switch's key): dropped");
            }
            return;
        }
        if !self.peers.contains_key(&peer) {
            // A configured peer: only a BGN makes a link. Anything else means the
            // peer thinks a link exists (this end forgot it, `[peers] idle_ms`): say
            // it does not, as SSCOP's idle state would (Q.2110 state 1: END S=1),
            // holding nothing.
            match SscopPdu::parse(pdu) {
                Ok(SscopPdu::Bgn { .. }) => {}
                Ok(SscopPdu::End { .. } | SscopPdu::Endak | SscopPdu::Bgrej { .. }) => {
                    return self.drop_frame(peer, "no link, and not a BGN");
                }
                Err(_) => {
                    self.counters.malformed_signalling += 1;
                    return;
                }
                Ok(_) => {
                    if self.answers.allow(now).is_some() {
                        let end = SscopPdu::End {
                            source_sscop: true,
                            uu: Vec::new(),
                        };
                        let d = link::frame(&end.to_bytes());
                        self.out.push_back(Output::ToPeer(peer, Bytes::from(d)));
                    }
                    return;
                }
            }
        }
        let Some(l) = self.link(peer, false) else {
            return self.drop_frame(peer, "no link could be made");
        };
        l.saal.handle_frame(now, pdu);
        self.dirty.push(peer);
    }

    /// An unknown peer's ECHO: a valid cookie admits it (within the unknown-peer
    /// limits), and the handshake message it carries is taken.
    fn on_echo(&mut self, peer: SocketAddr, cookie: &[u8; peer::COOKIE_LEN], pdu: &[u8]) {
        let now = self.now;
        if pdu.len() <= 4 {
            return self.drop_frame(peer, "an admission echo without a handshake message");
        }
        if !self.peers.contains_key(&peer) {
            if self.is_configured(&peer) || !self.cfg.peers.accept_unknown {
                return self.drop_frame(
                    peer,
                    "an admission echo from a configured or refused source",
                );
            }
            if !peer::check_cookie(&self.secret, peer.to_string().as_bytes(), cookie, now) {
                return self.drop_frame(peer, "an admission echo with a bad or stale cookie");
            }
            if !self.make_room_for_unknown(peer) {
                return self.drop_frame(peer, "over the limits of links to unknown peers");
            }
            let mut l = PeerLink::new(self.saal_cfg.clone(), now);
            l.configured = false;
            l.auth = self.link_auth(&peer);
            self.prepare_restarted(peer, &mut l);
            self.peers.insert(peer, l);
            self.counters.peers_admitted += 1;
            if let Some(suppressed) = self.remote_log(Event::Link) {
                info!(%peer, suppressed, "signalling link created for an unknown peer that echoed its cookie");
            }
        }
        let (sender, msg) = pdu.split_at(4);
        let init = Control::NoiseInit {
            sender: u32::from_be_bytes(sender.try_into().expect("split at 4")),
            msg,
        };
        self.noise_frame(now, peer, &init.to_bytes());
    }

    /// Whether another unknown peer's link may be made: within `[peers]
    /// max_unknown_per_ip` and `max_unknown_per_prefix`, and within `max_unknown`
    /// once the longest-idle unknown link without calls is released.
    fn make_room_for_unknown(&mut self, peer: SocketAddr) -> bool {
        let unknown = || self.peers.iter().filter(|(_, l)| !l.configured);
        let same_ip = unknown().filter(|(a, _)| a.ip() == peer.ip()).count();
        if same_ip >= self.cfg.peers.max_unknown_per_ip {
            return false;
        }
        let net = network_of(peer.ip());
        let same_net = unknown().filter(|(a, _)| network_of(a.ip()) == net).count();
        if same_net >= self.cfg.peers.max_unknown_per_prefix {
            return false;
        }
        if unknown().count() < self.cfg.peers.max_unknown {
            return true;
        }
        let victim = unknown()
            .filter(|(_, l)| l.is_idle())
            .min_by_key(|(_, l)| l.last_used)
            .map(|(a, _)| *a);
        match victim {
            Some(v) => {
                self.expire_link(v);
                true
            }
            None => false,
        }
    }

    /// Why a new call on unconfigured `link` would pass `[peers] calls_unknown` or
    /// `calls_per_unknown_prefix` (the calls of every unconfigured link, and of those
    /// in `link`'s /24 or /64), if it would.
    fn unknown_calls_full(&self, link: SocketAddr) -> Option<String> {
        let net = network_of(link.ip());
        let (mut all, mut same_net) = (0, 0);
        for (a, l) in self
            .peers
            .iter()
            .filter(|(_, l)| !l.configured && !l.switch)
        {
            all += l.calls.len();
            if network_of(a.ip()) == net {
                same_net += l.calls.len();
            }
        }
        let p = &self.cfg.peers;
        if same_net >= p.calls_per_unknown_prefix {
            Some(format!(
                "unconfigured peers of the caller's network hold their share of {} calls ([peers] calls_per_unknown_prefix)",
                p.calls_per_unknown_prefix
            ))
        } else if all >= p.calls_unknown {
            Some(format!(
                "unconfigured peers hold their share of {} calls ([peers] calls_unknown)",
                p.calls_unknown
            ))
        } else {
            None
        }
    }

    /// Why a call from `link`, if unconfigured, holding `want` guaranteed bit/s (its larger
    /// direction) would pass `[peers] bandwidth_per_unknown_prefix` or
    /// `bandwidth_unknown`, if it would: the bandwidth that the calls of unconfigured
    /// peers in `link`'s /24 or /64, and of all of them, hold (call `except` left
    /// out), as `unknown_calls_full` bounds their number. Calls this host made are
    /// its own users' and not counted.
    pub(super) fn unknown_bandwidth_full(
        &self,
        link: SocketAddr,
        want: u64,
        except: Option<u64>,
    ) -> Option<String> {
        let unknown = |a: &SocketAddr| {
            self.peers
                .get(a)
                .is_some_and(|l| !l.configured && !l.switch)
        };
        if want == 0 || !unknown(&link) {
            return None;
        }
        let net = network_of(link.ip());
        let (mut all, mut same_net) = (0u64, 0u64);
        for c in self.calls.values() {
            let super::Remote::Peer { link: a, .. } = c.remote else {
                continue;
            };
            if c.outgoing || Some(c.id) == except || !unknown(&a) {
                continue;
            }
            let held = c.grant.out_bps.max(c.grant.in_bps);
            all += held;
            if network_of(a.ip()) == net {
                same_net += held;
            }
        }
        let p = &self.cfg.peers;
        if same_net.saturating_add(want) > p.bandwidth_per_unknown_prefix_bps {
            Some(format!(
                "unconfigured peers of the caller's network hold {same_net} of their {} bit/s of guaranteed bandwidth ([peers] bandwidth_per_unknown_prefix); this asks {want}",
                p.bandwidth_per_unknown_prefix_bps
            ))
        } else if all.saturating_add(want) > p.bandwidth_unknown_bps {
            Some(format!(
                "unconfigured peers hold {all} of their {} bit/s of guaranteed bandwidth ([peers] bandwidth_unknown); this asks {want}",
                p.bandwidth_unknown_bps
            ))
        } else {
            None
        }
    }

    /// Readies a new link for a sigd that may have restarted: its first BGN must not
    /// look like its previous instance's (`Sscop::seed_sq`), and a peer's enquiries
    /// about calls not yet reclaimed wait (`restart`).
    fn prepare_restarted(&mut self, peer: SocketAddr, l: &mut PeerLink) {
        // The last N(SQ) this sigd (or the instance before it) sent the peer, when
        // recorded: the next BGN is one above it, never equal. Else a random one.
        let seed = match self.last_sq.get(&peer) {
            Some(sq) => *sq,
            None => self.ids.rng.next_u32() as u8,
        };
        l.saal.seed_sq(seed);
        if let Some(until) = self.reclaim_until {
            l.saal.hold_unknown_enquiries(until);
        }
    }

    /// The link to `peer`, created (and started when `start`) if there is none. Only
    /// for configured peers (and existing links): unknown ones are admitted by
    /// `on_echo`.
    pub(super) fn link(&mut self, peer: SocketAddr, start: bool) -> Option<&mut PeerLink> {
        if !self.peers.contains_key(&peer) {
            if !self.is_configured(&peer) {
                return None;
            }
            let switch = self.cfg.switches.contains(&peer);
            let cfg = if switch {
                switch_saal_config(&self.saal_cfg)
            } else {
                self.saal_cfg.clone()
            };
            let mut l = PeerLink::new(cfg, self.now);
            l.configured = true;
            l.switch = switch;
            l.auth = self.link_auth(&peer);
            self.prepare_restarted(peer, &mut l);
            if start {
                l.saal.start(self.now);
            }
            if let Some(suppressed) = self.remote_log(Event::Link) {
                info!(%peer, suppressed, "signalling link created");
            }
            self.peers.insert(peer, l);
        } else if start {
            let now = self.now;
            let l = self.peers.get_mut(&peer)?;
            if !l.saal.is_up() && l.saal.sscop().is_idle() {
                l.saal.start(now);
            }
        }
        self.peers.get_mut(&peer)
    }

    /// When the next idle link expires (`[peers] idle_ms`; switch links never do).
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        let idle = self.cfg.peers.idle;
        self.peers
            .values()
            .filter(|l| !l.switch && l.is_idle())
            .map(|l| l.last_used + idle)
            .min()
    }

    /// Release (SSCOP END) and forget every link idle for `[peers] idle_ms`.
    pub(super) fn expire_idle(&mut self) {
        let idle = self.cfg.peers.idle;
        let now = self.now;
        let due: Vec<SocketAddr> = self
            .peers
            .iter()
            .filter(|(_, l)| !l.switch && l.is_idle() && l.last_used + idle <= now)
            .map(|(a, _)| *a)
            .collect();
        for link in due {
            self.expire_link(link);
        }
    }

    /// Release and forget `link`, which holds no calls: its END goes out, and its
    /// memory (SSCOP buffers, VCI pool, keys) returns.
    fn expire_link(&mut self, link: SocketAddr) {
        let now = self.now;
        let Some(mut l) = self.peers.remove(&link) else {
            return;
        };
        l.saal.stop(now);
        while let Some(p) = l.saal.poll_transmit() {
            for d in self.seal(link, &mut l, &p) {
                self.out.push_back(Output::ToPeer(link, Bytes::from(d)));
            }
        }
        self.vcis.remove(&Some(link));
        self.proceeding_due.retain(|(_, l, _)| *l != link);
        self.dirty.retain(|l| *l != link);
        self.counters.links_expired += 1;
        if let Some(suppressed) = self.remote_log(Event::Link) {
            info!(%link, suppressed, "idle signalling link released and forgotten");
        }
    }

    /// The datagrams that carry SSCOP PDU `p` on `l`: one clear signalling frame,
    /// Noise transport messages (or a handshake while it is held), or a keyed
    /// switch's sealed frames. A BGN starts a link lifetime, so it starts new keys
    /// too.
    fn seal(&mut self, peer: SocketAddr, l: &mut PeerLink, p: &[u8]) -> Vec<Vec<u8>> {
        let bgn = match SscopPdu::parse(p) {
            Ok(SscopPdu::Bgn { nsq, .. }) => {
                // Recorded for the next instance (`prepare_restarted`); configured
                // links only, so a flood of admitted peers cannot grow the record.
                if l.configured && self.last_sq.insert(peer, nsq) != Some(nsq) {
                    self.sq_changed = true;
                }
                Some(nsq)
            }
            _ => None,
        };
        let ids = &mut self.ids;
        match &mut l.auth {
            LinkAuth::Clear => vec![link::frame(p)],
            LinkAuth::Noise(n) => {
                if let Some(nsq) = bgn {
                    n.bgn(nsq);
                }
                // A switch's link seals whole VC frames (ILMI rides beside SSCOP).
                if l.switch {
                    return n.seal(self.now, &link::frame(p), || ids.rng.next_u32());
                }
                n.seal(self.now, p, || ids.rng.next_u32())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn connect_peer(
        &mut self,
        t: AppId,
        req: u64,
        link: SocketAddr,
        to: Called<'_>,
        qos: Qos,
        local_addr: String,
        data: SocketAddr,
        multipoint: bool,
    ) {
        let Called { addr, sap } = to;
        let Some(called) = link::party(&addr) else {
            return self.refuse(
                t,
                req,
                cause::INVALID_NUMBER,
                format!("{addr} is a PVC; call an NSAP or E.164 address"),
            );
        };
        let data = self.data_endpoint(data);
        // The caller's share of the call's TPDU keys (`keys`), before anything is
        // reserved.
        let sealed = keys::wanted(&qos, link.ip(), data);
        if multipoint && sealed {
            // One copy replicated by the network would need one key for every leaf;
            // a sealed call has a key per pair of sigds (docs/SECURITY.md).
            return self.refuse(
                t,
                req,
                cause::SERVICE_UNAVAILABLE,
                "the call would be sealed (encrypt=on, or the default across hosts) and the network cannot replicate a sealed call: call each leaf on its own, or ask for encrypt=off".into(),
            );
        }
        let share = if sealed {
            let Some(s) = keys::share() else {
                return self.refuse(
                    t,
                    req,
                    cause::TEMPORARY_FAILURE,
                    "no randomness for the call's key share".into(),
                );
            };
            Some(s)
        } else {
            None
        };
        // The user's calls together keep to its share (`[limits] bandwidth_per_user`).
        if let Some(why) = self.share_refusal(t, self.share_demand(&qos), None) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::RESOURCES, why);
        }
        // A point-to-multipoint call is one-way: the forward direction alone is
        // reserved, once for every leaf (the network replicates).
        let admitted = if multipoint {
            self.admit_one_way(&qos, true)
        } else {
            self.admit_qos(&qos)
        };
        let (grant, qos) = match admitted {
            Ok(g) => g,
            Err(r) => return self.refuse(t, req, r.cause, r.detail),
        };
        let Some(rx_vci) = self.vci_pool(link).allocate() else {
            self.res.release(&grant);
            return self.refuse(
                t,
                req,
                cause::NO_VCI,
                format!("every VCI on the link to {link} is in use"),
            );
        };
        let cookie = self.new_cookie();
        let mut params = CallParams {
            dtl: None,
            called,
            calling: self.dir.primary().and_then(link::party),
            sap: if sap.is_empty() {
                None
            } else {
                Sap::parse(sap).ok()
            },
            qos,
            natm: NatmParams {
                qos: Some(qos.to_string()),
                data_endpoint: Some(data),
                cookie: Some(cookie),
                ..NatmParams::default()
            },
            // The VCI this side receives on (the backward VC).
            conn_id: Some(ConnectionId::exclusive(0, rx_vci)),
            multipoint,
        };
        if let Some(sh) = &share {
            params.natm.set_key_share(sh.public());
        }
        let id = self.new_id();
        self.calls.insert(
            id,
            Call {
                id,
                owner: Some(t),
                state: CallState::Calling,
                remote: Remote::Peer { link, call: None },
                outgoing: true,
                local_addr,
                remote_addr: addr.to_string(),
                sap: sap.to_owned(),
                qos,
                data: Some(data),
                peer_data: None,
                listener: None,
                cookie,
                tx_vci: 0,
                rx_vci,
                grant,
                deadline: None,
                announce: None,
                half_open: 0,
                keys: keys::CallKeys {
                    mine: share,
                    ..Default::default()
                },
                multipoint,
            },
        );
        let now = self.now;
        if self.link(link, true).is_none() {
            self.calls.remove(&id);
            self.res.release(&grant);
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!("{link} is not a configured peer"),
            );
        }
        if multipoint {
            self.multipoint
                .insert(id, super::multipoint::MpCall::new(now, &addr, sap, &params));
        }
        let Some(l) = self.peers.get_mut(&link) else {
            return;
        };
        l.pending.push((id, params));
        l.last_used = now;
        self.tell(t, Message::Ack { req, id });
        info!(call = id, to = %addr, sap, via = %link, "call to a peer");
        self.dirty.push(link);
    }

    pub(super) fn service_peer(&mut self, link: SocketAddr) {
        let now = self.now;
        self.fail_unreachable(link);
        for _ in 0..64 {
            let Some(l) = self.peers.get_mut(&link) else {
                return;
            };
            let mut started = Vec::new();
            let mut failed = Vec::new();
            if l.saal.is_up() && !l.pending.is_empty() {
                for (id, params) in std::mem::take(&mut l.pending) {
                    match l.saal.setup(now, params) {
                        Ok(cid) => {
                            l.calls.insert(cid, id);
                            started.push((id, cid));
                        }
                        Err(e) => failed.push((id, e.to_string())),
                    }
                }
            }
            let mut pdus = Vec::new();
            while let Some(p) = l.saal.poll_transmit() {
                pdus.push(p);
            }
            let mut evs = Vec::new();
            while let Some(e) = l.saal.poll_event() {
                evs.push(e);
            }
            if started.is_empty() && failed.is_empty() && pdus.is_empty() && evs.is_empty() {
                return;
            }
            let mut out = Vec::new();
            if !pdus.is_empty() {
                let mut l = self.peers.remove(&link).expect("looked up above");
                for p in &pdus {
                    out.extend(self.seal(link, &mut l, p));
                }
                self.peers.insert(link, l);
            }
            for (id, cid) in started {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.remote = Remote::Peer {
                        link,
                        call: Some(cid),
                    };
                }
            }
            for (id, why) in failed {
                self.end_call(id, cause::TEMPORARY_FAILURE, &why, true);
            }
            // Events first: what they tell an application (an offer, `Connected`) is
            // written out at once (`Output::Flush`), ahead of this pass's frames (an SSCOP
            // STAT, a CONNECT ACKNOWLEDGE) that nobody is blocked on. Frames the
            // handlers cause go out on the next pass, after these, in SSCOP's order.
            for e in evs {
                self.on_sig_event(link, e);
            }
            for d in out {
                self.out.push_back(Output::ToPeer(link, Bytes::from(d)));
            }
        }
        // More work than one pass: come back to it.
        self.dirty.push(link);
    }

    /// Calls waiting for a link whose establishment failed are cleared with cause 27
    /// (docs/sigd.md "Signalling links": a link that fails, Timer_CC ×
    /// MaxCC, fails them). `Saal` reports `LinkDown` only for a link that was up, so
    /// a peer that never answered its BGNs left them waiting for ever; the sign of
    /// the failure is an SSCOP back to idle while calls wait.
    fn fail_unreachable(&mut self, link: SocketAddr) {
        let Some(l) = self.peers.get_mut(&link) else {
            return;
        };
        if l.pending.is_empty() || l.saal.is_up() || !l.saal.sscop().is_idle() {
            return;
        }
        warn!(%link, "signalling link could not be established");
        self.fail_pending(link);
    }

    /// Clear with cause 27 the calls waiting for `link` to send their SETUP.
    fn fail_pending(&mut self, link: SocketAddr) {
        let pending: Vec<u64> = self
            .peers
            .get_mut(&link)
            .map(|l| {
                std::mem::take(&mut l.pending)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect()
            })
            .unwrap_or_default();
        for id in pending {
            self.end_call(
                id,
                cause::DESTINATION_OUT_OF_ORDER,
                &format!("no signalling link to the peer sigd at {link}: is it running?"),
                true,
            );
        }
    }

    pub(super) fn on_sig_event(&mut self, link: SocketAddr, ev: SigEvent) {
        match ev {
            SigEvent::LinkUp => {
                if let Some(suppressed) = self.remote_log(Event::Link) {
                    info!(%link, suppressed, "signalling link up");
                }
            }
            SigEvent::LinkDown { reason, failure } => {
                // Q.2931 §5.6.9 as UNI 3.1 applies it: call control clears the calls
                // that are not active (their `Released` follows) and keeps active ones
                // for T309; calls that never got their SETUP out fail here.
                if let Some(suppressed) = self.remote_log(Event::Link) {
                    warn!(%link, ?reason, failure, suppressed, "signalling link down");
                }
                self.fail_pending(link);
                self.preserve_calls(link);
            }
            SigEvent::Call(CallEvent::Incoming { call, params }) => {
                self.on_incoming(link, call, params)
            }
            SigEvent::Call(CallEvent::Connected { call, params }) => {
                self.on_connected(link, call, params)
            }
            SigEvent::Call(CallEvent::Proceeding { call }) => debug!(%call, "call proceeding"),
            SigEvent::Call(CallEvent::ModifyRequested { call, traffic }) => {
                self.on_modify_requested(link, call, traffic)
            }
            SigEvent::Call(CallEvent::Modified { call, .. }) => self.on_modified(link, call),
            SigEvent::Call(CallEvent::ModifyRefused { call, cause }) => {
                self.on_modify_refused(link, call, cause.value.raw())
            }
            SigEvent::Call(CallEvent::PartyAddRequested { call, party, .. }) => {
                // Q.2971 ADD PARTY towards a leaf host: the call's data reaches one
                // data endpoint here (its first party's application), so a second
                // party on the same call — a second leaf on this host — is refused
                // with cause 63 (service or option not available); the root calls
                // it on its own (docs/multipoint.md "Point-to-multipoint VCs").
                debug!(%call, ?party, "add party refused");
                let now = self.now;
                if let Some(l) = self.peers.get_mut(&link) {
                    let _ = l.saal.add_party_reject(
                        now,
                        call,
                        party,
                        uni_cause(cause::SERVICE_UNAVAILABLE),
                    );
                }
                self.dirty.push(link);
            }
            SigEvent::Call(CallEvent::PartyAdded { call, party, .. }) => {
                self.on_party_added(link, call, party)
            }
            SigEvent::Call(CallEvent::PartyRejected { call, party, cause }) => {
                self.on_party_rejected(link, call, party, cause.value.raw())
            }
            SigEvent::Call(CallEvent::PartyDropped {
                call,
                party,
                cause,
                by_peer,
            }) => self.on_party_dropped(link, call, party, cause.value.raw(), by_peer),
            SigEvent::Call(CallEvent::Established { call }) => {
                debug!(%call, "call established");
                let id = self
                    .peers
                    .get(&link)
                    .and_then(|l| l.calls.get(&call))
                    .copied();
                let held = id.and_then(|id| self.calls.get_mut(&id)).and_then(|c| {
                    let m = c.announce.take()?;
                    Some((c.owner?, m))
                });
                if let Some((owner, m)) = held {
                    self.tell(owner, m);
                }
            }
            SigEvent::Call(CallEvent::Released { call, cause, by }) => {
                let id = self
                    .peers
                    .get_mut(&link)
                    .and_then(|l| l.calls.remove(&call));
                if let Some(id) = id {
                    let c = cause.value.raw();
                    let called = self
                        .calls
                        .get(&id)
                        .map(|c| (c.sap.clone(), c.remote_addr.clone(), c.outgoing));
                    let detail = match (by, called) {
                        // A switch on the way refused the call and said where and why
                        // (issue 33): the network, not the callee, refused it.
                        (ClearedBy::Remote, _) if cause.refusal().is_some() => format!(
                            "{} (cause {c}: {})",
                            cause.refusal().map(|r| r.to_string()).unwrap_or_default(),
                            cause_text(c)
                        ),
                        // The callee's sigd refuses a SAP nobody listens on with 88, whose
                        // standard text ("incompatible destination") would send the
                        // caller looking at its QoS; say what the callee's sigd saw.
                        (ClearedBy::Remote, Some((sap, addr, _)))
                            if c == cause::INCOMPATIBLE_DESTINATION =>
                        {
                            format!(
                                "nobody listens on SAP \"{sap}\" at {addr} (cause {c}: {})",
                                cause_text(c)
                            )
                        }
                        (ClearedBy::Remote, called) => format!(
                            "released by the {} side, via {link} (cause {c}: {})",
                            // Whoever placed the call hears from the called side.
                            if called.is_some_and(|(_, _, outgoing)| !outgoing) {
                                "calling"
                            } else {
                                "called"
                            },
                            cause_text(c)
                        ),
                        (ClearedBy::Timer, _) => format!(
                            "no answer from the peer sigd at {link} in time (cause {c}: {})",
                            cause_text(c)
                        ),
                        (ClearedBy::Link, _) => format!(
                            "the signalling link to {link} was lost (cause {c}: {})",
                            cause_text(c)
                        ),
                        (ClearedBy::Local, _) => format!("released (cause {c}: {})", cause_text(c)),
                    };
                    self.end_call(id, c, &detail, true);
                }
            }
        }
    }

    /// A SETUP from a peer sigd: the called address must be this host's, the caller
    /// pass policy, someone listen on the SAP, the SETUP carry natm's data endpoint,
    /// cookie and VCI, and admission (the caller's QoS reversed) fit; then the call is
    /// offered (or pre-accepted) with a VCI of this side's choosing.
    pub(super) fn on_incoming(&mut self, link: SocketAddr, cid: CallId, params: CallParams) {
        let refuse = |this: &mut Core, c: u8, why: &str| {
            if let Some(suppressed) = this.remote_log(Event::Refused) {
                info!(%link, %cid, cause = c, why, suppressed, "incoming call refused");
            }
            this.counters.calls_refused += 1;
            let now = this.now;
            if let Some(l) = this.peers.get_mut(&link) {
                let _ = l.saal.reject(now, cid, uni_cause(c));
            }
            this.dirty.push(link);
        };
        let (switch, configured, held) = match self.peers.get_mut(&link) {
            Some(l) => {
                l.last_used = self.now;
                (l.switch, l.configured, l.calls.len())
            }
            None => (false, false, 0),
        };
        // Incoming calls count in `[limits] calls` like outgoing ones, and one peer
        // (a switch carries everyone's calls) holds at most its share.
        if self.calls.len() >= self.cfg.max_calls {
            self.counters.peer_limit_refusals += 1;
            let why = format!("sigd holds its limit of {} calls", self.cfg.max_calls);
            return refuse(self, cause::RESOURCES, &why);
        }
        if !switch && held >= self.cfg.peers.calls_per_peer {
            self.counters.peer_limit_refusals += 1;
            let why = format!(
                "the peer holds its share of {} calls ([peers] calls_per_peer)",
                self.cfg.peers.calls_per_peer
            );
            return refuse(self, cause::RESOURCES, &why);
        }
        // Peers nobody configured share two bounds, so that one attacker's many
        // addresses (each its own link) cannot take what configured peers and this
        // host's own calls need: per network, and all of them together.
        if !configured && !switch {
            if let Some(why) = self.unknown_calls_full(link) {
                self.counters.peer_limit_refusals += 1;
                return refuse(self, cause::RESOURCES, &why);
            }
        }
        let Some(called) = link::atm(&params.called).filter(|a| self.dir.is_local(a)) else {
            return refuse(
                self,
                cause::UNALLOCATED,
                "the called address is not this host's",
            );
        };
        let caller = params.calling.as_ref().and_then(link::atm);
        // Caller identity: what the peer may claim (docs/SECURITY.md "Signalling
        // peers"). A number another peer (or this host) owns is refused with cause
        // 21, call rejected — the called side refuses the call, the number is not
        // malformed; one nobody owns is unverified, and policy gives it only what a
        // call without a number gets.
        let allowed = match self.caller_standing(link, switch, caller.as_ref()) {
            Standing::Spoofed => {
                self.counters.caller_refusals += 1;
                return refuse(
                    self,
                    cause::CALL_REJECTED,
                    "the peer may not claim the calling number",
                );
            }
            Standing::Verified => caller
                .as_ref()
                .is_none_or(|a| self.cfg.policy_allows(a, CallDirection::Incoming)),
            Standing::Unverified => self
                .cfg
                .policy_allows_unverified(caller.as_ref(), CallDirection::Incoming),
        };
        if !allowed {
            self.counters.policy_rejections += 1;
            return refuse(self, cause::CALL_REJECTED, "rejected by policy");
        }
        let sap = params.sap.as_ref().map(Sap::to_string).unwrap_or_default();
        let Some(listener) = self.find_listener(&called, &sap) else {
            let why = format!("nobody listens on SAP \"{sap}\" at {called}");
            return refuse(self, cause::INCOMPATIBLE_DESTINATION, &why);
        };
        let qos = params.offered_qos();
        // A bare AAL5 call has no handshake for a cookie to bind, and one from a
        // standard UNI user (through a switch) carries none: a local one stands in.
        let cookie = params
            .natm
            .cookie
            .or_else(|| qos.is_bare().then(|| self.new_cookie()));
        let (Some(peer_data), Some(cookie), Some(tx_vci)) = (
            params.natm.data_endpoint,
            cookie,
            params.conn_id.map(|c| c.vci),
        ) else {
            return refuse(
                self,
                cause::INVALID_IE,
                "the SETUP lacks natm's data endpoint, cookie or connection identifier",
            );
        };
        // This side's view: what the caller receives, this side sends.
        let view = reverse(&qos);
        // A leaf of a point-to-multipoint call only receives: its forward direction
        // alone is reserved here.
        let admitted = if params.multipoint {
            self.admit_one_way(&view, false)
        } else {
            self.admit_qos(&view)
        };
        let (grant, view) = match admitted {
            Ok(g) => g,
            Err(r) => return refuse(self, r.cause, &r.detail),
        };
        // A guaranteed reservation held while the called application decides is
        // charged to the caller's link, up to `[peers] half_open`.
        let half_open = grant.out_bps.max(grant.in_bps);
        // What unconfigured peers' calls hold once answered is bounded too, per
        // network and in all (issue 31: held bandwidth per source prefix).
        if !configured && !switch {
            if let Some(why) = self.unknown_bandwidth_full(link, half_open, None) {
                self.res.release(&grant);
                self.counters.peer_limit_refusals += 1;
                return refuse(self, cause::RESOURCES, &why);
            }
        }
        let share = if configured {
            self.cfg.peers.half_open_bps
        } else {
            self.cfg.peers.half_open_unknown_bps
        };
        if half_open > 0 && !switch {
            // Unconfigured peers of one network share one budget, as they share
            // their calls' (`unknown_calls_full`).
            let (held, key) = if configured {
                let held = self.peers.get(&link).map_or(0, |l| l.half_open_bps);
                (held, "half_open")
            } else {
                let net = network_of(link.ip());
                let held = self
                    .peers
                    .iter()
                    .filter(|(a, l)| !l.configured && network_of(a.ip()) == net)
                    .map(|(_, l)| l.half_open_bps)
                    .sum();
                (held, "half_open_unknown, per network")
            };
            if held + half_open > share {
                self.res.release(&grant);
                self.counters.peer_limit_refusals += 1;
                let why = format!(
                    "the peer's unanswered calls hold {held} of their {share} bit/s of guaranteed bandwidth ([peers] {key})"
                );
                return refuse(self, cause::RESOURCES, &why);
            }
        }
        // Each side labels the VC it receives on (downstream allocation, from 32 up
        // per link); the two simplex VCs of a connection share one data socket, so
        // this side avoids the caller's label.
        let pool = self.vci_pool(link);
        let rx_vci = match pool.allocate() {
            Some(v) if v == tx_vci => {
                let other = pool.allocate();
                pool.free(v);
                other
            }
            v => v,
        };
        let Some(rx_vci) = rx_vci else {
            self.res.release(&grant);
            return refuse(self, cause::NO_VCI, "no VCI free on the link");
        };
        let id = self.new_id();
        self.calls.insert(
            id,
            Call {
                id,
                owner: None,
                state: CallState::Offered,
                remote: Remote::Peer {
                    link,
                    call: Some(cid),
                },
                outgoing: false,
                local_addr: called.to_string(),
                remote_addr: caller.map_or_else(|| "unknown".into(), |a| a.to_string()),
                sap,
                qos: view,
                data: None,
                peer_data: Some(peer_data),
                listener: None,
                cookie,
                tx_vci,
                rx_vci,
                grant,
                deadline: None,
                announce: None,
                half_open: if switch { 0 } else { half_open },
                keys: keys::CallKeys {
                    offered: params.natm.key_share(),
                    ..Default::default()
                },
                multipoint: params.multipoint,
            },
        );
        if let Some(l) = self.peers.get_mut(&link) {
            l.calls.insert(cid, id);
            if !switch {
                l.half_open_bps += half_open;
            }
        }
        self.dirty.push(link);
        if let Some(suppressed) = self.remote_log(Event::Offered) {
            info!(call = id, %link, suppressed, "incoming call offered");
        }
        self.offer(id, listener);
        // CALL PROCEEDING only if the application has not answered soon: most answer
        // within a millisecond, and their CONNECT stops the caller's T303 as well, so
        // the message would cost a wake-up of both sigds per call and say nothing. A
        // slow application still gets it long before T303. A pre-authorised
        // listener's call is answered already.
        if self
            .calls
            .get(&id)
            .is_some_and(|c| c.state == CallState::Offered)
        {
            let due = self.now + proceeding_delay(self.cfg.timers.t303);
            self.proceeding_due.push((due, link, cid));
        }
    }

    pub(super) fn on_connected(&mut self, link: SocketAddr, cid: CallId, params: CallAccept) {
        let Some(&id) = self.peers.get(&link).and_then(|l| l.calls.get(&cid)) else {
            return;
        };
        let (Some(peer_data), Some(tx_vci)) =
            (params.natm.data_endpoint, params.conn_id.map(|c| c.vci))
        else {
            self.end_call(
                id,
                cause::INVALID_IE,
                "the peer's CONNECT lacks natm's data endpoint or connection identifier",
                true,
            );
            return;
        };
        // The call's TPDU keys: the callee's share completes the exchange.
        let bound = self.link_identities(link, Role::Caller);
        let (mine, cookie, required) = match self.calls.get_mut(&id) {
            Some(c) => (c.keys.mine.take(), c.cookie, keys::required(&c.qos)),
            None => return,
        };
        let agreed = match (mine, params.natm.key_share()) {
            (None, _) => None,
            (Some(mine), Some(theirs)) => {
                match mine.agree_bound(Role::Caller, &theirs, cookie, &bound) {
                    Ok(k) => Some(k),
                    Err(e) => {
                        self.end_call(
                            id,
                            cause::INVALID_IE,
                            &format!("the peer's CONNECT: {e}"),
                            true,
                        );
                        return;
                    }
                }
            }
            (Some(_), None) if required => {
                self.end_call(
                    id,
                    cause::SERVICE_UNAVAILABLE,
                    "the QoS asks for encrypt=on, but the peer answered without a key share: it cannot encrypt (a Linux-ATM host, or natm before issue 16)",
                    true,
                );
                return;
            }
            (Some(_), None) => None,
        };
        let capacity = self.res.capacity_bps();
        let granted = params
            .natm
            .qos
            .as_deref()
            .and_then(|t| t.parse::<Qos>().ok())
            .or(params.qos);
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        if let Some(q) = granted {
            // The called side may have granted less: keep only that reserved here.
            let out = demand(&q, true, capacity).target_bps.min(c.grant.out_bps);
            let inn = demand(&q, false, capacity).target_bps.min(c.grant.in_bps);
            if out < c.grant.out_bps || inn < c.grant.in_bps {
                let tpdu = demand(&q, true, capacity).tpdu_size;
                self.res.release(&c.grant);
                let exact = |b| Demand {
                    target_bps: b,
                    min_bps: b,
                    tpdu_size: tpdu,
                };
                c.grant = self.res.admit(&exact(out), &exact(inn)).unwrap_or_default();
            }
            c.qos = q;
        }
        c.state = CallState::Active;
        c.peer_data = Some(peer_data);
        c.tx_vci = tx_vci;
        if let Some(mp) = self.multipoint.get_mut(&id) {
            mp.first_connected();
        }
        c.keys.agreed = agreed.clone();
        self.counters.calls_setup += 1;
        let (owner, rx_vci, cookie, granted_bps, qos, multipoint) = (
            c.owner,
            c.rx_vci,
            c.cookie,
            c.grant.out_bps,
            c.qos,
            c.multipoint,
        );
        let m = Message::Connected {
            call: id,
            path: self.with_ticket(
                id,
                DataPath {
                    peer: peer_data,
                    cookie,
                    tx_vci,
                    rx_vci,
                    granted_bps,
                    qos,
                    resume: String::new(),
                    keys: agreed,
                    multipoint,
                },
            ),
        };
        info!(call = id, %link, tx_vci, rx_vci, "call active");
        // Before the CONNECT ACKNOWLEDGE: the caller is waiting for this.
        if let Some(owner) = owner {
            self.tell_now(owner, m);
        }
    }

    /// Answer a call from a peer sigd with CONNECT (see `answer_call`).
    pub(super) fn answer_peer(
        &mut self,
        call: u64,
        link: SocketAddr,
        cid: Option<CallId>,
        data: SocketAddr,
    ) -> Result<Message, Refusal> {
        let now = self.now;
        let bound = self.link_identities(link, Role::Callee);
        let c = self
            .calls
            .get_mut(&call)
            .expect("answer_call found the call and nothing since removed it");
        let caller_view = reverse(&c.qos);
        // Answer the caller's key share with this side's (`keys`).
        let exchange = match c.keys.offered.take() {
            Some(theirs) if !keys::refused(&c.qos) => Some(
                keys::share()
                    .ok_or_else(|| "no randomness for the call's key share".to_owned())
                    .and_then(|mine| {
                        let public = mine.public();
                        mine.agree_bound(Role::Callee, &theirs, c.cookie, &bound)
                            .map(|k| (public, k))
                            .map_err(|e| format!("the caller's SETUP: {e}"))
                    }),
            ),
            _ => None,
        };
        let (share, agreed) = match exchange {
            None => (None, None),
            Some(Ok((public, k))) => (Some(public), Some(k)),
            Some(Err(e)) => {
                self.end_call(call, cause::INVALID_IE, &e, true);
                return Err(Refusal::new(cause::INVALID_IE, e));
            }
        };
        let c = self
            .calls
            .get_mut(&call)
            .expect("answer_call found the call and nothing since removed it");
        let mut answer = CallAccept {
            qos: Some(caller_view),
            natm: NatmParams {
                qos: Some(caller_view.to_string()),
                data_endpoint: Some(data),
                cookie: Some(c.cookie),
                ..NatmParams::default()
            },
            // The VCI this side receives on (the forward VC).
            conn_id: Some(ConnectionId::exclusive(0, c.rx_vci)),
        };
        if let Some(public) = share {
            answer.natm.set_key_share(public);
        }
        let r = match (cid, self.peers.get_mut(&link)) {
            (Some(cid), Some(l)) => l.saal.accept(now, cid, answer).map_err(|e| e.to_string()),
            _ => Err("the call is no longer known to the signalling link".into()),
        };
        self.dirty.push(link);
        if let Err(e) = r {
            self.end_call(call, cause::TEMPORARY_FAILURE, &e, false);
            return Err(Refusal::new(cause::TEMPORARY_FAILURE, e));
        }
        // Answered: no CALL PROCEEDING is due any more.
        if let Some(cid) = cid {
            self.proceeding_due
                .retain(|(_, l, c)| !(*l == link && *c == cid));
        }
        self.settle_half_open(call);
        let c = self
            .calls
            .get_mut(&call)
            .expect("call control accepted, so the call was not ended");
        c.state = CallState::Active;
        c.deadline = None;
        c.data = Some(data);
        c.keys.agreed = agreed.clone();
        self.counters.calls_setup += 1;
        let Some(peer) = c.peer_data else {
            return Err(Refusal::new(
                cause::INVALID_IE,
                "the caller gave no data endpoint",
            ));
        };
        info!(call, %link, "incoming call accepted");
        let path = DataPath {
            peer,
            cookie: c.cookie,
            tx_vci: c.tx_vci,
            rx_vci: c.rx_vci,
            granted_bps: c.grant.out_bps,
            qos: c.qos,
            resume: String::new(),
            keys: agreed,
            multipoint: c.multipoint,
        };
        Ok(Message::Connected {
            call,
            path: self.with_ticket(call, path),
        })
    }
}

/// The network an address counts in for per-prefix limits: its /24 (IPv4, or IPv4
/// mapped into IPv6) or its /64 (IPv6), as one host's or one site's share of
/// addresses usually is.
fn network_of(ip: std::net::IpAddr) -> u128 {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v) => u128::from(u32::from(v) >> 8),
        // Tagged apart from every IPv4 /24 (whose value is below 2^24).
        std::net::IpAddr::V6(v) => (u128::from(v) >> 64) | (1 << 127),
    }
}

/// Whom an application's call goes to: the address and the SAP.
pub(super) struct Called<'a> {
    pub(super) addr: AtmAddr,
    pub(super) sap: &'a str,
}

/// What a peer's claim of a calling number is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// The number is the peer's (a route or `[[peer]] callers`), or the link is a
    /// switch's (the network vouches).
    Verified,
    /// Nobody owns it, or there is none.
    Unverified,
    /// Another peer or this host owns it.
    Spoofed,
}

impl Core {
    fn caller_standing(
        &self,
        link: SocketAddr,
        switch: bool,
        caller: Option<&AtmAddr>,
    ) -> Standing {
        if switch {
            return Standing::Verified;
        }
        let Some(a) = caller else {
            return Standing::Unverified;
        };
        if self.dir.is_local(a) {
            return Standing::Spoofed;
        }
        let listed = self
            .cfg
            .peers
            .entry(&link)
            .is_some_and(|e| e.callers.iter().any(|p| p.matches(a)));
        if listed {
            return Standing::Verified;
        }
        // The longest non-default route owns the number; "*" claims nothing.
        let owner = self
            .dir
            .routes()
            .iter()
            .filter(|(p, _)| !p.is_empty() && p.matches(a))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, peer)| *peer);
        match owner {
            Some(p) if p == link => Standing::Verified,
            Some(_) => Standing::Spoofed,
            None => Standing::Unverified,
        }
    }

    /// The call no longer holds a half-open reservation on its link's account.
    pub(super) fn settle_half_open(&mut self, call: u64) {
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        let bps = std::mem::take(&mut c.half_open);
        if let (Remote::Peer { link, .. }, true) = (c.remote, bps > 0) {
            if let Some(l) = self.peers.get_mut(&link) {
                l.half_open_bps = l.half_open_bps.saturating_sub(bps);
            }
        }
    }
}

/// How long an offered call waits for the application's answer before CALL
/// PROCEEDING goes out: a quarter of T303 (the caller's wait for any answer to
/// SETUP), at most 20 ms.
///
/// Q.2931 lets the called side answer SETUP with CALL PROCEEDING or directly with
/// CONNECT; this sigd used to send CALL PROCEEDING at once. On a fast host the
/// application answers within this time and the CONNECT alone does the job.
pub(super) fn proceeding_delay(t303: Duration) -> Duration {
    (t303 / 4).min(Duration::from_millis(20))
}
