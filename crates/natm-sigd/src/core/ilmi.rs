//! ILMI on a host's links to its switches (issue 33; ATM Forum ILMI 4.0 §8): a sigd
//! with no address configured (`natm sigd --switch IP:PORT` alone) learns one from
//! each switch it is attached to. One [`UserSide`] per switch link, on VPI 0/VCI 16 of
//! that link — sealed by its Noise session as SSCOP is, whole VC frames so that the
//! switch tells the two apart. The address is the switch's prefix, an end system
//! identifier from this host's Noise public key (stable while its key file is, and
//! locally administered), and selector 0; it is this host's while the switch has it
//! (`Directory::learn`), and the calling number its calls carry.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use natm_proto::ilmi::user::{UserEvent, UserSide};
use natm_proto::time::Instant;
use natm_proto::wire::addr::{Aesa, AtmAddr};
use natm_proto::wire::vcframe;
use rand_chacha::rand_core::Rng;
use tracing::{info, warn};

use super::link::LinkAuth;
use super::{Core, Output};

/// ILMI on every switch link of a host without a configured address.
#[derive(Debug, Default)]
pub(super) struct HostIlmi {
    links: BTreeMap<SocketAddr, IlmiLink>,
    /// Input or a timer since the links were last followed.
    due: bool,
}

#[derive(Debug)]
struct IlmiLink {
    side: UserSide,
    /// The signalling link was up when last seen.
    was_up: bool,
}

/// The end system identifier this host registers: the first six octets of its Noise
/// public key, marked locally administered and unicast (IEEE 802's bits), as a MAC
/// address is.
fn esi(public: &[u8; 32]) -> [u8; 6] {
    let mut e = [0u8; 6];
    e.copy_from_slice(&public[..6]);
    e[0] = (e[0] & 0xfc) | 0x02;
    e
}

fn address(octets: [u8; natm_proto::ilmi::ADDRESS_LEN]) -> Option<AtmAddr> {
    Aesa::new(octets).map(AtmAddr::Aesa)
}

impl Core {
    /// Starts ILMI on each switch link if no address is configured.
    pub(super) fn ilmi_start(&mut self) {
        if !self.cfg.addresses.is_empty() {
            return;
        }
        let esi = esi(&self.noise_public);
        for sw in self.cfg.switches.clone() {
            let now = self.now;
            self.ilmi.links.entry(sw).or_insert_with(|| IlmiLink {
                side: UserSide::new(now, esi, 0),
                was_up: false,
            });
        }
        self.ilmi.due = true;
    }

    /// Whether ILMI has work ([`Core::run_ilmi`]); set by input and timers.
    pub(super) fn ilmi_due(&mut self) -> bool {
        std::mem::take(&mut self.ilmi.due)
    }

    /// Marks ILMI due after input from `peer` (one of its switches) or a timer.
    pub(super) fn ilmi_touch(&mut self, peer: Option<SocketAddr>) {
        if peer.is_none_or(|p| self.ilmi.links.contains_key(&p)) && !self.ilmi.links.is_empty() {
            self.ilmi.due = true;
        }
    }

    /// An ILMI message from switch link `peer`, already authenticated as its frames.
    pub(super) fn ilmi_input(&mut self, peer: SocketAddr, message: &[u8]) {
        let now = self.now;
        match self.ilmi.links.get_mut(&peer) {
            // A bad message is counted by the side and changes nothing.
            Some(l) => {
                if l.side.handle_message(now, message).is_err() {
                    self.counters.malformed_signalling += 1;
                }
                self.ilmi.due = true;
            }
            None => self.drop_frame(peer, "ILMI from a link this host runs no ILMI on"),
        }
    }

    /// Follows each switch link (up: ILMI starts; down: the address goes), the
    /// timers, and sends what ILMI has to send; the addresses the switches took
    /// become this host's.
    pub(super) fn run_ilmi(&mut self) {
        let now = self.now;
        let mut sends = Vec::new();
        let mut events = Vec::new();
        for (sw, l) in &mut self.ilmi.links {
            let up = self.peers.get(sw).is_some_and(|p| p.saal.is_up());
            if up != l.was_up {
                l.was_up = up;
                if up {
                    l.side.link_up(now);
                } else {
                    l.side.link_lost();
                }
            }
            l.side.handle_timeout(now);
            sends.extend(std::iter::from_fn(|| l.side.poll_transmit()).map(|m| (*sw, m)));
            events.extend(std::iter::from_fn(|| l.side.poll_event()).map(|e| (*sw, e)));
        }
        for (sw, m) in sends {
            self.send_ilmi(sw, &m);
        }
        for (sw, e) in events {
            match e {
                UserEvent::Registered(a) => {
                    if let Some(a) = address(a) {
                        info!(switch = %sw, address = %a, "ILMI: the switch took this host's address");
                        self.dir.learn(a);
                    }
                }
                UserEvent::Deregistered(a) => {
                    if let Some(a) = address(a) {
                        info!(switch = %sw, address = %a, "ILMI: the switch no longer has this host's address");
                        self.dir.unlearn(&a);
                    }
                }
                UserEvent::Refused(a, status) => {
                    let shown = address(a).map_or_else(|| hex::encode(a), |a| a.to_string());
                    warn!(switch = %sw, address = %shown, status, "ILMI: the switch refused this host's address (another port has it, or its prefix is not the switch's); configure an address, or fix the switch");
                }
            }
        }
    }

    /// Sends ILMI message `m` to switch `sw` on its link: sealed by the link's Noise
    /// session (none yet: nothing, ILMI tries again), or a clear frame.
    fn send_ilmi(&mut self, sw: SocketAddr, m: &[u8]) {
        let frame = vcframe::ilmi_frame(m);
        let now = self.now;
        let ids = &mut self.ids;
        let Some(l) = self.peers.get_mut(&sw) else {
            return;
        };
        let datagrams = match &mut l.auth {
            LinkAuth::Clear => vec![frame],
            LinkAuth::Noise(n) if n.has_keys() => n.seal(now, &frame, || ids.rng.next_u32()),
            LinkAuth::Noise(_) => return,
        };
        for d in datagrams {
            self.out.push_back(Output::ToPeer(sw, Bytes::from(d)));
        }
    }

    /// When ILMI's next timer is due.
    pub(super) fn ilmi_timeout(&self) -> Option<Instant> {
        self.ilmi
            .links
            .values()
            .filter_map(|l| l.side.poll_timeout())
            .min()
    }

    /// Switch link `sw`'s ILMI for `natm stat`: its state, and the address the switch
    /// took.
    pub(super) fn ilmi_row(&self, sw: &SocketAddr) -> Option<String> {
        let l = self.ilmi.links.get(sw)?;
        Some(match l.side.address().and_then(address) {
            Some(a) => format!("{} {a}", l.side.state_name()),
            None => l.side.state_name().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_esi_is_the_keys_first_octets_locally_administered_and_unicast() {
        let mut k = [0u8; 32];
        k[..6].copy_from_slice(&[0xff, 1, 2, 3, 4, 5]);
        assert_eq!(esi(&k), [0xfe, 1, 2, 3, 4, 5]);
        k[0] = 0;
        assert_eq!(esi(&k)[0], 0x02);
    }
}
