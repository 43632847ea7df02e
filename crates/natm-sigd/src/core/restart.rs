//! Calls across a sigd crash and restart (docs/ARCHITECTURE.md "sigd restart").
//!
//! seed 004 §4: the daemon's death must not break connections that are up — their
//! data path never touches sigd. Two halves:
//!
//! - The surviving side keeps an active call while its signalling link is down for
//!   `[restart] preserve_ms` (T309 on links to peer sigds, Q.2931 §5.6.9), and
//!   re-establishes the link itself meanwhile; when it is back, call control asks the
//!   peer about every such call with STATUS ENQUIRY (§5.6.11) and clears the ones
//!   the peer does not know.
//! - The restarted side rebuilds its call table from the applications that reconnect
//!   and reclaim their calls (`Message::Reclaim`, with the resume ticket sigd gave
//!   them in the call's data path). A reclaimed call is checked with the peer the
//!   same way. For `[restart] reclaim_window_ms` after start, a peer's enquiry
//!   about a call nobody has reclaimed yet is left unanswered (the peer repeats it
//!   on T322) instead of answered "no such call".
//!
//! The outcome is the same at both ends: a call that both sides still hold is kept;
//! one that either side lost (its application died or closed during the outage, or
//! never reclaimed) is released at both.

use natm_proto::wire::ipc::DataPath;
use natm_proto::wire::resume::ResumeTicket;

use super::*;

impl Core {
    /// The resume ticket of a call to a peer sigd as call control knows it now
    /// (empty for a call inside this host, or one call control does not have).
    pub(super) fn resume_ticket(&self, id: u64) -> String {
        let Some(c) = self.calls.get(&id) else {
            return String::new();
        };
        let Remote::Peer {
            link,
            call: Some(cid),
        } = c.remote
        else {
            return String::new();
        };
        let Some(cr) = self
            .peers
            .get(&link)
            .and_then(|l| l.saal.calls().call_ref(cid))
        else {
            return String::new();
        };
        ResumeTicket {
            link,
            cref: cr.value,
            // The flag is set on messages to the side that allocated the value.
            ours: !cr.flag,
            outgoing: c.outgoing,
            local: c.local_addr.clone(),
            remote: c.remote_addr.clone(),
            sap: c.sap.clone(),
        }
        .encode()
        .unwrap_or_default()
    }

    /// An application's `Reclaim`: take over an established call it held through this
    /// host's previous sigd (module docs). The call keeps its id, VCIs, cookie and
    /// reservation; call control adopts its call reference and checks it with the
    /// peer, and a peer that no longer has it releases it here too.
    pub(super) fn reclaim(
        &mut self,
        t: AppId,
        req: u64,
        call: u64,
        data: SocketAddr,
        path: DataPath,
    ) {
        let refused = |this: &mut Core, cause: u8, why: String| {
            this.counters.reclaims_refused += 1;
            this.refuse(t, req, cause, why);
        };
        if path.resume.is_empty() {
            return refused(
                self,
                cause::TEMPORARY_FAILURE,
                "a call between two applications of this host does not outlive its sigd".into(),
            );
        }
        let tk = match ResumeTicket::parse(&path.resume) {
            Ok(tk) => tk,
            Err(e) => return refused(self, cause::INVALID_IE, e),
        };
        if call == 0 || self.calls.contains_key(&call) {
            return refused(
                self,
                cause::INVALID_CALL_REF,
                "this sigd already has a call with that id".into(),
            );
        }
        let qos = match self.parse_qos(&path.qos) {
            Ok(q) => q,
            Err(e) => return refused(self, cause::INVALID_IE, e),
        };
        if !self.vci_pool(tk.link).reserve(path.rx_vci) {
            return refused(
                self,
                cause::NO_VCI,
                format!(
                    "VCI {} on the link to {} is taken (or out of range)",
                    path.rx_vci, tk.link
                ),
            );
        }
        let free_vci = |this: &mut Core| {
            if let Some(p) = this.vcis.get_mut(&Some(tk.link)) {
                p.free(path.rx_vci);
            }
        };
        // The reservation is charged again, as the previous sigd had it.
        let (grant, qos) = match self.admit_qos(&qos) {
            Ok(g) => g,
            Err(r) => {
                free_vci(self);
                return refused(self, r.cause, r.detail);
            }
        };
        let now = self.now;
        // A reclaim may come before the link is (re-)established: the call waits for
        // it as a kept call does, also on a link to a switch (whose T309 is 0 once
        // the link has been up; the switch keeps the call meanwhile, its own
        // `preserve_ms`).
        let wait = self.cfg.restart.preserve;
        let adopted = match self.link(tk.link, true) {
            Some(l) => l
                .saal
                .adopt(now, tk.cref, tk.ours, wait)
                .map_err(|e| (cause::INVALID_CALL_REF, e.to_string())),
            // Only configured peers get a link on demand; an unknown peer's link
            // comes back only when it echoes a cookie (docs/SECURITY.md), so its
            // calls are not reclaimed and are cleared at both ends.
            None => Err((
                cause::DESTINATION_OUT_OF_ORDER,
                "the peer is not a configured one: its calls do not outlive a restart".to_string(),
            )),
        };
        let cid = match adopted {
            Ok(cid) => cid,
            Err((c, why)) => {
                self.res.release(&grant);
                free_vci(self);
                return refused(self, c, why);
            }
        };
        if let Some(l) = self.peers.get_mut(&tk.link) {
            l.calls.insert(cid, call);
        }
        let data = self.data_endpoint(data);
        self.calls.insert(
            call,
            Call {
                id: call,
                owner: Some(t),
                state: CallState::Active,
                remote: Remote::Peer {
                    link: tk.link,
                    call: Some(cid),
                },
                outgoing: tk.outgoing,
                local_addr: tk.local,
                remote_addr: tk.remote,
                sap: tk.sap,
                qos,
                data: Some(data),
                peer_data: Some(path.peer),
                listener: None,
                cookie: path.cookie,
                tx_vci: path.tx_vci,
                rx_vci: path.rx_vci,
                grant,
                deadline: None,
                announce: None,
                half_open: 0,
                // The application keeps using the keys it had; sigd holds them
                // again only to hand them on (the peer is never asked again).
                keys: super::keys::CallKeys {
                    agreed: path.keys.clone(),
                    ..Default::default()
                },
            },
        );
        self.counters.calls_reclaimed += 1;
        self.dirty.push(tk.link);
        info!(call, link = %tk.link, cref = tk.cref, "call reclaimed after a sigd restart");
        self.tell(t, Message::Ack { req, id: call });
    }

    /// The signalling link to `link` went down: if call control keeps active calls
    /// on it (T309, `[restart] preserve_ms`), this side re-establishes the link
    /// itself, so that a restarted peer is found and the calls reconciled — even if
    /// the peer brought the link up before and nobody there calls out.
    pub(super) fn preserve_calls(&mut self, link: SocketAddr) {
        let preserved = self.peers.get(&link).is_some_and(|l| {
            l.saal
                .calls()
                .calls()
                .any(|(_, s)| s == natm_proto::wire::q2931::CallState::ACTIVE)
        });
        if preserved && !self.cfg.switches.contains(&link) {
            let n = self.peers.get(&link).map_or(0, |l| l.calls.len());
            info!(%link, calls = n, "signalling link lost: active calls kept while it is re-established");
            self.link(link, true);
        }
    }
}
