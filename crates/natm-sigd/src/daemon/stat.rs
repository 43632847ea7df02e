//! `natm stat`: what sigd holds, as one JSON document.

use super::*;

impl Daemon {
    // ---- stat ------------------------------------------------------------------------

    pub(super) fn stat_json(&self) -> String {
        #[derive(Serialize)]
        struct CallRow<'a> {
            id: String,
            state: State,
            direction: &'static str,
            local: &'a str,
            remote: &'a str,
            sap: &'a str,
            qos: String,
            tx_vci: u16,
            rx_vci: u16,
            /// This side's data endpoint, once known.
            data: Option<String>,
            reserved_out_bps: u64,
            reserved_in_bps: u64,
            pid: Option<i32>,
        }
        #[derive(Serialize)]
        struct ListenerRow<'a> {
            id: String,
            sap: &'a str,
            address: Option<String>,
            qos: &'a str,
            /// Pre-authorised: data endpoints left for calls answered ahead.
            pre_authorised_free: Option<usize>,
            pid: Option<i32>,
        }
        #[derive(Serialize)]
        struct Stat<'a> {
            addresses: Vec<String>,
            signalling: String,
            capacity_bps: u64,
            free_out_bps: u64,
            free_in_bps: u64,
            tpdu_cost_ns: u64,
            cpu_budget_ns_per_s: u64,
            cpu_free_ns_per_s: u64,
            applications: usize,
            vcis_in_use: usize,
            calls: Vec<CallRow<'a>>,
            listeners: Vec<ListenerRow<'a>>,
            counters: Counters,
            peers: Vec<PeerRow>,
        }
        #[derive(Serialize)]
        struct PeerRow {
            peer: String,
            up: bool,
            calls: usize,
            malformed: u64,
        }
        let mut counters = self.counters.clone();
        counters.malformed_signalling += self.peers.values().map(|l| l.malformed()).sum::<u64>();
        let pid = |t: usize| self.apps.get(&t).and_then(|a| a.creds).map(|c| c.pid);
        let mut calls: Vec<CallRow> = self
            .calls
            .values()
            .map(|c| CallRow {
                id: format!("{:016x}", c.id),
                state: c.state,
                direction: if c.outgoing { "out" } else { "in" },
                local: &c.local_addr,
                remote: &c.remote_addr,
                sap: &c.sap,
                qos: c.qos.to_string(),
                tx_vci: c.tx_vci,
                rx_vci: c.rx_vci,
                data: c.data.map(|d| d.to_string()),
                reserved_out_bps: c.grant.out_bps,
                reserved_in_bps: c.grant.in_bps,
                pid: pid(c.owner),
            })
            .collect();
        calls.sort_by(|a, b| a.id.cmp(&b.id));
        let listeners = self
            .listeners
            .values()
            .map(|l| ListenerRow {
                id: format!("{:016x}", l.id),
                sap: &l.sap,
                address: l.addr.map(|a| a.to_string()),
                qos: &l.qos,
                pre_authorised_free: l.auto.as_ref().map(|a| a.pool.len()),
                pid: pid(l.owner),
            })
            .collect();
        let s = Stat {
            addresses: self
                .dir
                .local_addresses()
                .iter()
                .map(|a| a.to_string())
                .collect(),
            signalling: self
                .signalling
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
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
        };
        serde_json::to_string(&s).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
