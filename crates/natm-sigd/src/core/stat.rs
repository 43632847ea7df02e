//! `natm stat`: what sigd holds, as one typed document (sent as JSON in `StatReply`).

use natm_proto::wire::ipc::VcCounters;
use serde::{Deserialize, Serialize};

use super::{AppId, CallState, Core};
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
    /// Of which handshakes that proved a peer key other than the pinned or
    /// configured one.
    #[serde(default)]
    pub key_mismatches: u64,
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
    /// Application connections refused (the total or the user's share was reached).
    #[serde(default)]
    pub connections_refused: u64,
    /// Idle connections closed (`[limits] idle_close_ms`).
    #[serde(default)]
    pub idle_closed: u64,
    /// Requests refused by the local-user policy (`[[access]]`, SAPs held by another
    /// user, per-user and per-connection limits).
    #[serde(default)]
    pub access_refusals: u64,
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
    /// The owning application's user.
    #[serde(default)]
    pub uid: Option<u32>,
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
    /// How its frames are authenticated: "noise", "noise+psk" (a pre-shared key
    /// mixed in) or "clear".
    #[serde(default)]
    pub auth: String,
    /// The Noise public key the peer proved (base64), once a handshake completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_key: Option<String>,
    /// A switch link's ILMI (a host without a configured address): its state, and
    /// the address the switch took ("registered 47.0005…").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ilmi: Option<String>,
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
    /// More rows follow: ask for the page at this offset (`StatPage`); absent on
    /// the last page. A user other than root is shown only its own calls and
    /// listeners, and the offset counts only those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// How much of a frame a stat page may fill: the frame limit less the reply's
/// header and a margin.
const PAGE_BUDGET: usize = natm_proto::wire::ipc::MAX_FRAME - 4096;

impl Core {
    fn call_row(&self, c: &super::Call) -> CallRow {
        let creds = |t| self.apps.get(&t).and_then(|a| a.creds);
        CallRow {
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
            pid: c.owner.and_then(creds).map(|c: super::Creds| c.pid),
            uid: c.owner.and_then(creds).map(|c| c.uid),
            encrypted: c.keys.agreed.is_some(),
            traffic: self.traffic.get(c.id).map(|(at, t)| {
                let age = self.now.saturating_duration_since(*at).as_millis();
                TrafficRow {
                    age_ms: u64::try_from(age).unwrap_or(u64::MAX),
                    counters: *t,
                }
            }),
        }
    }

    fn listener_row(&self, l: &super::Listening) -> ListenerRow {
        let creds = self.apps.get(&l.owner).and_then(|a| a.creds);
        ListenerRow {
            id: format!("{:016x}", l.id),
            sap: l.sap.clone(),
            address: l.addr.map(|a| a.to_string()),
            qos: l.qos.to_string(),
            pre_authorised_free: l.auto.as_ref().map(|a| a.pool.len()),
            pid: creds.map(|c| c.pid),
            uid: creds.map(|c| c.uid),
        }
    }

    /// The document without rows.
    fn stat_head(&self) -> Stat {
        let mut counters = self.counters.clone();
        counters.malformed_signalling += self.peers.values().map(|l| l.malformed()).sum::<u64>();
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
            calls: Vec::new(),
            listeners: Vec::new(),
            counters,
            peers: self
                .peers
                .iter()
                .map(|(a, l)| PeerRow {
                    peer: a.to_string(),
                    up: l.saal.is_up(),
                    calls: l.calls.len(),
                    malformed: l.malformed(),
                    auth: l.auth.name().to_owned(),
                    peer_key: match &l.auth {
                        super::link::LinkAuth::Noise(n) => n
                            .peer_key()
                            .map(|k| natm_proto::sig::noise::key_to_text(&k)),
                        _ => None,
                    },
                    ilmi: self.ilmi_row(a),
                })
                .collect(),
            next: None,
        }
    }

    /// Ids of the calls and listeners `viewer` may see (`None`: all), each by id.
    fn visible(&self, viewer: Option<u32>) -> (Vec<u64>, Vec<u64>) {
        let sees = |owner: Option<AppId>| {
            viewer.is_none_or(|v| {
                owner.is_some_and(|o| {
                    self.apps
                        .get(&o)
                        .and_then(|a| a.creds)
                        .is_some_and(|c| c.uid == v)
                })
            })
        };
        let mut calls: Vec<u64> = self
            .calls
            .values()
            .filter(|c| sees(c.owner))
            .map(|c| c.id)
            .collect();
        calls.sort_unstable();
        let mut ls: Vec<u64> = self
            .listeners
            .values()
            .filter(|l| sees(Some(l.owner)))
            .map(|l| l.id)
            .collect();
        ls.sort_unstable();
        (calls, ls)
    }

    /// What `--metrics` exposes: the document without rows, and how many calls sigd
    /// holds in each state and how many listeners (no row is built, however many
    /// calls sigd holds).
    pub fn stat_summary(&self) -> (Stat, Vec<(CallState, usize)>, usize) {
        let mut states: Vec<(CallState, usize)> = Vec::new();
        for c in self.calls.values() {
            match states.iter_mut().find(|(s, _)| *s == c.state) {
                Some((_, n)) => *n += 1,
                None => states.push((c.state, 1)),
            }
        }
        (self.stat_head(), states, self.listeners.len())
    }

    /// What `natm stat` shows, every row (what root sees, in one document however
    /// large; the IPC reply is paged by [`Core::stat_page`]).
    pub fn stat(&self) -> Stat {
        let (calls, ls) = self.visible(None);
        let mut s = self.stat_head();
        s.calls = calls
            .iter()
            .map(|id| self.call_row(&self.calls[id]))
            .collect();
        s.listeners = ls
            .iter()
            .map(|id| self.listener_row(&self.listeners[id]))
            .collect();
        s
    }

    /// One page of `natm stat` for connection `t`, as JSON: the rows from `offset`
    /// on that fit one IPC frame (a user other than root sees only its own).
    pub(super) fn stat_page(&self, t: AppId, offset: u64) -> String {
        let viewer = (!self.privileged(t)).then(|| self.uid_of(t));
        let (calls, ls) = self.visible(viewer);
        let mut s = self.stat_head();
        let head = serde_json::to_string(&s).map_or(0, |j| j.len());
        // Room for `"next":` and an offset.
        let mut used = head + 32;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let total = calls.len() + ls.len();
        let mut at = start.min(total);
        while at < total {
            let len = if at < calls.len() {
                let r = self.call_row(&self.calls[&calls[at]]);
                let len = serde_json::to_string(&r).map_or(0, |j| j.len()) + 1;
                if used + len > PAGE_BUDGET && at > start {
                    break;
                }
                s.calls.push(r);
                len
            } else {
                let r = self.listener_row(&self.listeners[&ls[at - calls.len()]]);
                let len = serde_json::to_string(&r).map_or(0, |j| j.len()) + 1;
                if used + len > PAGE_BUDGET && at > start {
                    break;
                }
                s.listeners.push(r);
                len
            };
            used += len;
            at += 1;
        }
        s.next = (at < total).then_some(at as u64);
        serde_json::to_string(&s).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
