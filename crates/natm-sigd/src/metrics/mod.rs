//! `natm sigd --metrics ADDR` (issue 32): what `natm stat` counts, in the Prometheus
//! text format. [`render`] turns sigd's stat document into the exposition; [`http`]
//! serves it (natm-switchd's `--metrics` serves its own through the same responder),
//! [`text`] encodes it.

pub mod http;
pub mod text;

use crate::core::{CallState, Counters, Stat};
use text::{label, Exposition};

/// Each of sigd's counters: its metric's name (before `_total`), its help, its value.
type CounterRow = (&'static str, &'static str, fn(&Counters) -> u64);

/// `natm stat`'s counters, in its order. A unit test checks that every field of
/// [`Counters`] is here.
const COUNTERS: &[CounterRow] = &[
    ("calls_setup", "Calls that reached the active state", |c| {
        c.calls_setup
    }),
    (
        "calls_refused",
        "Calls that ended before they were active",
        |c| c.calls_refused,
    ),
    ("calls_released", "Active calls that ended", |c| {
        c.calls_released
    }),
    ("app_connections", "Application connections accepted", |c| {
        c.app_connections
    }),
    (
        "app_deaths_cleaned",
        "Applications that left calls or listeners behind when their connection closed",
        |c| c.app_deaths_cleaned,
    ),
    (
        "malformed_ipc",
        "IPC protocol errors (the connection was closed)",
        |c| c.malformed_ipc,
    ),
    (
        "malformed_signalling",
        "Datagrams, SSCOP PDUs and Q.2931 messages refused, all links",
        |c| c.malformed_signalling,
    ),
    (
        "policy_rejections",
        "Calls refused by [[policy]] (cause 21)",
        |c| c.policy_rejections,
    ),
    (
        "admission_refusals",
        "Calls refused by admission control (cause 37 or 47)",
        |c| c.admission_refusals,
    ),
    (
        "calls_pre_accepted",
        "Calls a pre-authorised listener's sigd answered itself",
        |c| c.calls_pre_accepted,
    ),
    (
        "backlog_refusals",
        "Calls refused because a pre-authorised listener's backlog was full",
        |c| c.backlog_refusals,
    ),
    (
        "counters_refused",
        "Traffic reports refused (not the reporting connection's call, or not active)",
        |c| c.counters_refused,
    ),
    ("admin_releases", "Calls ended by natm release", |c| {
        c.admin_releases
    }),
    (
        "admin_refusals",
        "natm release requests refused for want of permission",
        |c| c.admin_refusals,
    ),
    (
        "peer_refusals",
        "Signalling datagrams dropped because their source may not open a link",
        |c| c.peer_refusals,
    ),
    (
        "peer_challenges",
        "Admission challenges sent to unknown sources",
        |c| c.peer_challenges,
    ),
    (
        "peers_admitted",
        "Unknown peers admitted after echoing a cookie",
        |c| c.peers_admitted,
    ),
    ("links_expired", "Idle links released and forgotten", |c| {
        c.links_expired
    }),
    (
        "auth_failures",
        "Frames from a keyed peer not authenticated, failing their tag, or replayed",
        |c| c.auth_failures,
    ),
    (
        "key_mismatches",
        "Handshakes that proved a peer key other than the pinned or configured one",
        |c| c.key_mismatches,
    ),
    (
        "caller_refusals",
        "Incoming calls refused because the peer may not claim the calling number",
        |c| c.caller_refusals,
    ),
    (
        "peer_limit_refusals",
        "Incoming calls refused by the call limits (all calls, or one peer's share)",
        |c| c.peer_limit_refusals,
    ),
    (
        "reserve_expiries",
        "Offers cleared for holding a guaranteed reservation past [timers] reserve_ms",
        |c| c.reserve_expiries,
    ),
    (
        "log_suppressed",
        "Log lines about remote events not written (over [peers] log_per_s)",
        |c| c.log_suppressed,
    ),
    (
        "calls_reclaimed",
        "Calls applications reclaimed after a sigd restart",
        |c| c.calls_reclaimed,
    ),
    ("reclaims_refused", "Reclaims refused", |c| {
        c.reclaims_refused
    }),
    (
        "connections_refused",
        "Application connections refused (the total or the user's share was reached)",
        |c| c.connections_refused,
    ),
    (
        "idle_closed",
        "Idle connections closed ([limits] idle_close_ms)",
        |c| c.idle_closed,
    ),
    (
        "access_refusals",
        "Requests refused by the local-user policy ([[access]], SAPs, per-user limits)",
        |c| c.access_refusals,
    ),
];

/// The exposition of sigd's state: `stat` as [`crate::core::Core::stat_summary`]
/// returns it, with the calls held in each state and the listeners.
pub fn render(stat: &Stat, calls: &[(CallState, usize)], listeners: usize) -> String {
    let mut e = Exposition::new("natm_sigd");
    for (name, help, value) in COUNTERS {
        e.counter(name, help, value(&stat.counters));
    }
    let held = |s: CallState| {
        calls
            .iter()
            .filter(|(c, _)| *c == s)
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    e.gauges(
        "calls",
        "Calls held now, by state",
        [
            ("calling", CallState::Calling),
            ("offered", CallState::Offered),
            ("active", CallState::Active),
        ]
        .map(|(name, s)| (label("state", name), held(s) as u64)),
    );
    e.gauge("listeners", "Listeners bound now", listeners as u64);
    e.gauge(
        "applications",
        "Application connections open now",
        stat.applications as u64,
    );
    e.gauge(
        "vcis_in_use",
        "VCIs allocated now, all links",
        stat.vcis_in_use as u64,
    );
    e.gauge(
        "capacity_bps",
        "Link rate each way, bit/s",
        stat.capacity_bps,
    );
    e.gauges(
        "free_bps",
        "Bandwidth not reserved, bit/s, by direction",
        [
            (label("direction", "out"), stat.free_out_bps),
            (label("direction", "in"), stat.free_in_bps),
        ],
    );
    e.gauges(
        "peer_up",
        "Whether SSCOP is established on the signalling link to each peer sigd",
        stat.peers
            .iter()
            .map(|p| (label("peer", &p.peer), u64::from(p.up))),
    );
    e.gauges(
        "peer_calls",
        "Calls held on each signalling link",
        stat.peers
            .iter()
            .map(|p| (label("peer", &p.peer), p.calls as u64)),
    );
    e.counters(
        "peer_malformed",
        "Malformed SSCOP PDUs and Q.2931 messages seen on each signalling link",
        stat.peers
            .iter()
            .map(|p| (label("peer", &p.peer), p.malformed)),
    );
    e.render()
}

#[cfg(test)]
mod tests;
