//! `natm stat`: what sigd holds, as one typed document (sent as JSON in `StatReply`).

use natm_proto::wire::ipc::VcCounters;
use serde::{Deserialize, Serialize};

use super::{CallState, Core};
use crate::admission::Way;

/// Counters shown by `natm stat`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Calls that reached the active state.
    pub calls_setup: u64,
    /// Calls that ended before they were active.
    pub calls_refused: u64,
    /// Active calls that ended.
    pub calls_released: u64,
    /// Application connections accepted.
    pub app_connections: u64,
    /// Applications that left calls or listeners behind when their connection closed.
    pub app_deaths_cleaned: u64,
    /// IPC protocol errors (the connection was closed).
    pub malformed_ipc: u64,
    /// Datagrams, SSCOP PDUs and Q.2931 messages refused.
    pub malformed_signalling: u64,
    /// Calls refused by `[[policy]]` (cause 21).
    pub policy_rejections: u64,
    /// Calls refused by admission control (cause 37 or 47).
    pub admission_refusals: u64,
    /// Calls a pre-authorised listener's sigd answered itself.
    pub calls_pre_accepted: u64,
    /// Calls refused because a pre-authorised listener's backlog was full.
    pub backlog_refusals: u64,
    /// Counters reports refused: the call was not the reporting connection's, or not
    /// active.
    #[serde(default)]
    pub counters_refused: u64,
    /// Calls ended by `natm release`.
    #[serde(default)]
    pub admin_releases: u64,
    /// `natm release` requests refused for want of permission.
    #[serde(default)]
    pub admin_refusals: u64,
    /// Signalling datagrams dropped because their source may not open a link (not
    /// configured and no valid cookie, over the unknown-peer limits).
    #[serde(default)]
    pub peer_refusals: u64,
    /// Admission challenges sent to unknown sources.
    #[serde(default)]
    pub peer_challenges: u64,
    /// Unknown peers admitted after echoing a cookie.
    #[serde(default)]
    pub peers_admitted: u64,
    /// Idle links released and forgotten.
    #[serde(default)]
    pub links_expired: u64,
    /// Frames from a keyed peer that were not authenticated, failed their tag or
    /// were replays.
    #[serde(default)]
    pub auth_failures: u64,
    /// Incoming calls refused because the peer may not claim the calling number.
    #[serde(default)]
    pub caller_refusals: u64,
    /// Incoming calls refused by the call limits (all calls, or one peer's share).
    #[serde(default)]
    pub peer_limit_refusals: u64,
    /// Offers cleared because they held a guaranteed reservation past
    /// `[timers] reserve_ms`.
    #[serde(default)]
    pub reserve_expiries: u64,
    /// Log lines about remote events not written (over `[peers] log_per_s`).
    #[serde(default)]
    pub log_suppressed: u64,
    /// Calls applications reclaimed after a sigd restart.
    #[serde(default)]
    pub calls_reclaimed: u64,
    /// Reclaims refused.
    #[serde(default)]
    pub reclaims_refused: u64,
}

/// One call's traffic, as its application's engine last reported it: the report's
/// counters (tx: the VC this side sends on; rx: the one it receives on), flattened
/// beside its age.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficRow {
    /// How long ago sigd got the report, ms.
    pub age_ms: u64,
    /// The report; a rate is the difference of two reports' counters over the
    /// difference of their `sampled_ms` (the application's own clock).
    #[serde(flatten)]
    pub counters: VcCounters,
}

/// One call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRow {
    /// The call's id, 16 hex digits.
    pub id: String,
    /// Where it is.
    pub state: CallState,
    /// "out" or "in".
    pub direction: String,
    /// This side's address.
    pub local: String,
    /// The other side's address.
    pub remote: String,
    /// The SAP.
    pub sap: String,
    /// QoS from this side's point of view.
    pub qos: String,
    /// The VCI this side sends on.
    pub tx_vci: u16,
    /// The VCI this side receives on.
    pub rx_vci: u16,
    /// This side's data endpoint, once known.
    pub data: Option<String>,
    /// Reserved out of the host, bit/s.
    pub reserved_out_bps: u64,
    /// Reserved into the host, bit/s.
    pub reserved_in_bps: u64,
    /// The owning application's process.
    pub pid: Option<i32>,
    /// The owning application's user.
    #[serde(default)]
    pub uid: Option<u32>,
    /// The call's traffic as its application last reported it (none yet: no report).
    #[serde(default)]
    pub traffic: Option<TrafficRow>,
    /// Its TPDUs are sealed (authenticated encryption, issue 16).
    #[serde(default)]
    pub encrypted: bool,
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRow {
    /// The listener's id, 16 hex digits.
    pub id: String,
    /// The SAP.
    pub sap: String,
    /// The address it is bound to (`None`: every address of the host).
    pub address: Option<String>,
    /// The QoS it was bound with.
    pub qos: String,
    /// Pre-authorised: data endpoints left for calls answered ahead.
    pub pre_authorised_free: Option<usize>,
    /// The owning application's process.
    pub pid: Option<i32>,
}

/// One signalling link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRow {
    /// The peer sigd's signalling endpoint.
    pub peer: String,
    /// Whether SSCOP is established.
    pub up: bool,
    /// Calls call control holds on it.
    pub calls: usize,
    /// Malformed SSCOP PDUs and Q.2931 messages seen on it.
    pub malformed: u64,
}

/// What sigd holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// This host's addresses.
    pub addresses: Vec<String>,
    /// The signalling endpoint.
    pub signalling: String,
    /// Link rate each way, bit/s.
    pub capacity_bps: u64,
    /// Unreserved out of the host, bit/s.
    pub free_out_bps: u64,
    /// Unreserved into the host, bit/s.
    pub free_in_bps: u64,
    /// Cost of one TPDU, ns.
    pub tpdu_cost_ns: u64,
    /// CPU for guaranteed VCs, ns per second.
    pub cpu_budget_ns_per_s: u64,
    /// Of which unreserved.
    pub cpu_free_ns_per_s: u64,
    /// Application connections.
    pub applications: usize,
    /// VCIs allocated, all links.
    pub vcis_in_use: usize,
    /// The calls, by id.
    pub calls: Vec<CallRow>,
    /// The listeners.
    pub listeners: Vec<ListenerRow>,
    /// The counters (link counters added in).
    pub counters: Counters,
    /// The signalling links.
    pub peers: Vec<PeerRow>,
}

impl Core {
    /// What `natm stat` shows.
    pub fn stat(&self) -> Stat {
        let mut counters = self.counters.clone();
        counters.malformed_signalling += self.peers.values().map(|l| l.malformed()).sum::<u64>();
        let creds = |t| self.apps.get(&t).and_then(|a| a.creds);
        let pid = |t| creds(t).map(|c: super::Creds| c.pid);
        let mut calls: Vec<CallRow> = self
            .calls
            .values()
            .map(|c| CallRow {
                id: format!("{:016x}", c.id),
                state: c.state,
                direction: if c.outgoing { "out" } else { "in" }.to_owned(),
                local: c.local_addr.clone(),
                remote: c.remote_addr.clone(),
                sap: c.sap.clone(),
                qos: c.qos.to_string(),
                tx_vci: c.tx_vci,
                rx_vci: c.rx_vci,
                data: c.data.map(|d| d.to_string()),
                reserved_out_bps: c.grant.out_bps,
                reserved_in_bps: c.grant.in_bps,
                pid: c.owner.and_then(pid),
                uid: c.owner.and_then(creds).map(|c| c.uid),
                encrypted: c.keys.agreed.is_some(),
                traffic: self.traffic.get(c.id).map(|(at, t)| {
                    let age = self.now.saturating_duration_since(*at).as_millis();
                    TrafficRow {
                        age_ms: u64::try_from(age).unwrap_or(u64::MAX),
                        counters: *t,
                    }
                }),
            })
            .collect();
        calls.sort_by(|a, b| a.id.cmp(&b.id));
        let mut listeners: Vec<ListenerRow> = self
            .listeners
            .values()
            .map(|l| ListenerRow {
                id: format!("{:016x}", l.id),
                sap: l.sap.clone(),
                address: l.addr.map(|a| a.to_string()),
                qos: l.qos.clone(),
                pre_authorised_free: l.auto.as_ref().map(|a| a.pool.len()),
                pid: pid(l.owner),
            })
            .collect();
        listeners.sort_by(|a, b| a.id.cmp(&b.id));
        Stat {
            addresses: self
                .dir
                .local_addresses()
                .iter()
                .map(|a| a.to_string())
                .collect(),
            signalling: self.facts.signalling.to_string(),
            capacity_bps: self.res.capacity_bps(),
            free_out_bps: self.res.free_bps(Way::Out),
            free_in_bps: self.res.free_bps(Way::In),
            tpdu_cost_ns: self.res.tpdu_cost_ns(),
            cpu_budget_ns_per_s: self.res.cpu_budget(),
            cpu_free_ns_per_s: self.res.free_cpu(),
            applications: self.apps.len(),
            vcis_in_use: self.vcis.values().map(|p| p.in_use()).sum(),
            calls,
            listeners,
            counters,
            peers: self
                .peers
                .iter()
                .map(|(a, l)| PeerRow {
                    peer: a.to_string(),
                    up: l.saal.is_up(),
                    calls: l.calls.len(),
                    malformed: l.malformed(),
                })
                .collect(),
        }
    }

    pub(super) fn stat_json(&self) -> String {
        serde_json::to_string(&self.stat()).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
