//! ILMI on a UNI port (issue 33, `ilmi_prefix`): the sans-IO [`NetworkSide`] driven by
//! the port's link, an atmtcp `uni` port's TCP connection or a host port's signalling
//! link. SDUs on VPI 0/VCI 16 go to it; its messages go back there; a link that comes
//! up sends the switch's coldStart, a lost one ends the registrations; each
//! registration becomes a route to the port and a calling number it may use
//! ([`Control::register_address`]).

use natm_proto::ilmi::network::{Event, IlmiStats, NetworkSide, PortIdentity};
use natm_proto::ilmi::{ADDRESS_LEN, PREFIX_LEN};
use natm_proto::time::Instant;
use natm_switch::control::Control;
use natm_switch::PortId;
use serde::Serialize;
use tracing::{info, warn};

use crate::atmtcp_link::AtmtcpCounters;

/// One port's ILMI.
#[derive(Debug)]
pub(crate) struct IlmiPort {
    side: NetworkSide,
    /// The connection counters last seen: a change is a link up or down.
    connections_seen: u64,
    disconnects_seen: u64,
    /// A host port's signalling link was up when last seen.
    was_up: bool,
}

/// A port's ILMI in `natm stat --switch --json` (`ports[].ilmi`).
#[derive(Debug, Clone, Serialize)]
pub struct IlmiSnapshot {
    /// The network prefix handed to the user.
    pub prefix: String,
    /// Whether the user answered it.
    pub prefix_taken: bool,
    /// The addresses the user registered.
    pub registered: Vec<String>,
    /// Messages taken.
    pub received: u64,
    /// Messages dropped (malformed, too long, another version or community).
    pub dropped: u64,
    /// Requests answered.
    pub answered: u64,
    /// Registrations refused (outside the prefix, routed elsewhere, table full).
    pub refused: u64,
    /// The user's coldStarts.
    pub cold_starts: u64,
}

fn dotted(octets: &[u8]) -> String {
    let hex = hex::encode(octets);
    // The usual AESA grouping: AFI, then 4, 20, 12 and 2 digits.
    let mut out = String::new();
    for (i, c) in hex.chars().enumerate() {
        if matches!(i, 2 | 6 | 26 | 38) {
            out.push('.');
        }
        out.push(c);
    }
    out
}

impl IlmiPort {
    pub(crate) fn new(now: Instant, index: usize, name: &str, prefix: [u8; PREFIX_LEN]) -> Self {
        let n = u8::try_from(index).unwrap_or(u8::MAX);
        let identity = PortIdentity {
            port: u32::try_from(index + 1).unwrap_or(u32::MAX),
            name: name.to_owned(),
            // A locally administered identifier: "natm" and the port.
            system_id: [0x02, b'n', b'a', b't', b'm', n],
            description: format!("natm switch {}", env!("CARGO_PKG_VERSION")),
        };
        IlmiPort {
            side: NetworkSide::new(now, identity, prefix),
            connections_seen: 0,
            disconnects_seen: 0,
            was_up: false,
        }
    }

    /// An SDU the user sent on VCI 16.
    pub(crate) fn on_sdu(
        &mut self,
        now: Instant,
        port: PortId,
        sdu: &[u8],
        control: Option<&Control>,
    ) {
        let claimable = |a: &[u8; ADDRESS_LEN]| control.is_none_or(|c| c.may_register(port, a));
        // Counted in the stats; the SDU is the user's text, never logged.
        let _ = self.side.handle_message(now, sdu, claimable);
    }

    /// Follows a host port's signalling link (`up` now) and the timers.
    pub(crate) fn follow_link(&mut self, now: Instant, up: bool) {
        if up != self.was_up {
            self.was_up = up;
            if up {
                self.side.link_up(now);
            } else {
                self.side.link_lost();
            }
        }
        self.handle_timeout(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.side.poll_timeout().is_some_and(|t| t <= now) {
            self.side.handle_timeout(now);
        }
    }

    /// Follows an atmtcp port's connection (`connected` now, its counters) and the
    /// timers.
    pub(crate) fn tick(&mut self, now: Instant, counters: &AtmtcpCounters, connected: bool) {
        if counters.disconnects != self.disconnects_seen {
            self.disconnects_seen = counters.disconnects;
            self.side.link_lost();
        }
        if counters.connections != self.connections_seen && connected {
            self.connections_seen = counters.connections;
            self.side.link_up(now);
        }
        self.handle_timeout(now);
    }

    /// Sends what the side has to send (`send` on VCI 16) and hands its registrations
    /// to the control plane.
    pub(crate) fn flush(
        &mut self,
        port: PortId,
        name: &str,
        mut control: Option<&mut Control>,
        mut send: impl FnMut(&[u8]),
    ) {
        while let Some(m) = self.side.poll_transmit() {
            send(&m);
        }
        while let Some(e) = self.side.poll_event() {
            let Some(c) = control.as_deref_mut() else {
                continue;
            };
            match e {
                Event::Registered(a) => {
                    if c.register_address(port, &a) {
                        info!(port = name, address = %dotted(&a), "ILMI: address registered");
                    } else {
                        warn!(port = name, address = %dotted(&a), "ILMI: registration taken by another port since");
                    }
                }
                Event::Deregistered(a) => {
                    c.deregister_address(port, &a);
                    info!(port = name, address = %dotted(&a), "ILMI: registration ended");
                }
            }
        }
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.side.poll_timeout()
    }

    pub(crate) fn snapshot(&self) -> IlmiSnapshot {
        let IlmiStats {
            received,
            dropped,
            answered,
            refused,
            cold_starts,
        } = self.side.stats();
        IlmiSnapshot {
            prefix: dotted(&self.side.prefix()),
            prefix_taken: self.side.prefix_taken(),
            registered: self.side.registered().map(|a| dotted(a)).collect(),
            received,
            dropped,
            answered,
            refused,
            cold_starts,
        }
    }
}
