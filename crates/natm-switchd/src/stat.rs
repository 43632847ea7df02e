//! The switch's counter snapshot, written as JSON for `natm stat --switch`.

use std::net::SocketAddr;

use natm_switch::control::{CallRow, LinkRow, RoutingRow};
use natm_switch::{PortStats, VcStats};
use serde::Serialize;

use crate::config::LinkMode;

/// A port: its link and the data plane's counters.
#[derive(Debug, Clone, Serialize)]
pub struct PortSnapshot {
    /// Its configured name.
    pub name: String,
    /// Local UDP endpoint.
    pub bind: SocketAddr,
    /// Peer UDP endpoint.
    pub peer: SocketAddr,
    /// Link mode.
    pub mode: LinkMode,
    /// The link's own counters.
    pub link: LinkCounters,
    /// The data plane's counters.
    pub stats: PortStats,
    /// How its signalling is authenticated: "noise", "noise+psk" or "clear" (absent on a
    /// port without signalling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// The Noise public key its host's sigd proved (base64), once a handshake
    /// completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_key: Option<String>,
    /// Signalling frames a Noise port refused: clear PDUs, bad tags, replays.
    #[serde(skip_serializing_if = "is_zero")]
    pub auth_failures: u64,
    /// Handshakes whose host proved another key than the pinned one.
    #[serde(skip_serializing_if = "is_zero")]
    pub key_mismatches: u64,
    /// An atmtcp port's TCP link (its `link` counts frames as datagrams).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atmtcp: Option<crate::AtmtcpSnapshot>,
    /// An atmtcp `uni` port's ILMI (`ilmi_prefix`): the prefix, the addresses its
    /// user registered, counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ilmi: Option<crate::IlmiSnapshot>,
}

/// What the UDP link of a port counts, beside the data plane.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LinkCounters {
    /// Datagrams received from the peer.
    pub datagrams_in: u64,
    /// Datagrams sent to the peer (after loss).
    pub datagrams_out: u64,
    /// Datagrams refused: wrong sender, not a cell train (cell mode) or no VC header
    /// (frame mode).
    pub bad_datagrams: u64,
    /// Datagrams dropped by the configured random loss.
    pub lost: u64,
    /// Units the data plane sent that the link cannot carry, dropped: in the other
    /// link mode (none if the configuration check holds), or an ABR RM frame
    /// towards an atmtcp port (atmtcp carries AAL5 SDUs only).
    pub mode_mismatch: u64,
    /// Datagrams the socket refused to send (buffer full).
    pub send_errors: u64,
    /// Receive system calls that brought datagrams (each `recvmmsg` may bring many,
    /// and each of its buffers several by GRO).
    pub recv_calls: u64,
    /// Send system calls (each a UDP GSO run of datagrams, or one datagram).
    pub send_calls: u64,
}

/// Everything `stat_json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Seconds since the switch started.
    pub uptime_s: f64,
    /// Ports in id order.
    pub ports: Vec<PortSnapshot>,
    /// Cross-connects in connection order.
    pub vcs: Vec<VcStats>,
    /// Signalling links (ports that run signalling).
    pub signalling: Vec<LinkRow>,
    /// Calls through the switch, oldest first.
    pub calls: Vec<CallRow>,
    /// Calls the switch refused.
    pub calls_refused: u64,
    /// Of those, SETUPs whose calling number was not their port's (screened).
    #[serde(default)]
    pub calls_screened: u64,
    /// Routing between switches: node, neighbours, topology database, crankbacks
    /// (absent without `[routing]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingRow>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
