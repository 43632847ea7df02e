//! Calls across a sigd crash and restart (docs/sigd.md "sigd restart").
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
use natm_proto::wire::resume::{qos_digest, ResumeTicket, TicketError, Via};

use super::*;
use crate::admission::Refusal;

impl Core {
    /// `path` with the resume ticket of call `id` for it.
    pub(super) fn with_ticket(&self, id: u64, mut path: DataPath) -> DataPath {
        path.resume = self.resume_ticket(id, &path);
        path
    }

    /// The resume ticket of call `id` for the data path it has now (after a QoS
    /// change: a ticket binds the QoS), empty if it has no peer data endpoint yet.
    pub(super) fn current_ticket(&self, id: u64) -> String {
        let Some(c) = self.calls.get(&id) else {
            return String::new();
        };
        // Inside one host the other end's data endpoint is the other half's own.
        let peer = c.peer_data.or_else(|| match c.remote {
            Remote::Local(pair) => self.calls.get(&pair).and_then(|o| o.data),
            Remote::Peer { .. } => None,
        });
        let Some(peer) = peer else {
            return String::new();
        };
        let path = DataPath {
            peer,
            cookie: c.cookie,
            tx_vci: c.tx_vci,
            rx_vci: c.rx_vci,
            granted_bps: c.grant.out_bps,
            qos: c.qos,
            resume: String::new(),
            keys: None,
            multipoint: c.multipoint,
        };
        self.resume_ticket(id, &path)
    }

    /// The resume ticket of an active call as this sigd knows it now, for the data
    /// path `path` its application is given: sealed under the host's ticket key,
    /// naming this sigd instance, bound to the application's uid and to the path's
    /// peer, cookie, VCIs and QoS (empty for a call call control does not have, or
    /// whose fields cannot be written in a ticket).
    pub(super) fn resume_ticket(&self, id: u64, path: &DataPath) -> String {
        let Some(c) = self.calls.get(&id) else {
            return String::new();
        };
        let via = match c.remote {
            Remote::Local(pair) => Via::Local { pair },
            Remote::Peer {
                link,
                call: Some(cid),
            } => {
                let Some(cr) = self
                    .peers
                    .get(&link)
                    .and_then(|l| l.saal.calls().call_ref(cid))
                else {
                    return String::new();
                };
                Via::Peer {
                    link,
                    cref: cr.value,
                    // The flag is set on messages to the side that allocated the value.
                    ours: !cr.flag,
                }
            }
            Remote::Peer { call: None, .. } => return String::new(),
        };
        let Some(owner) = c.owner else {
            return String::new();
        };
        ResumeTicket {
            call: id,
            via,
            outgoing: c.outgoing,
            local: c.local_addr.clone(),
            remote: c.remote_addr.clone(),
            sap: c.sap.clone(),
            uid: self.uid_of(owner),
            instance: self.instance,
            peer: path.peer,
            cookie: path.cookie,
            tx_vci: path.tx_vci,
            rx_vci: path.rx_vci,
            qos: qos_digest(&path.qos),
        }
        .seal(&self.ticket_key)
        .unwrap_or_default()
    }

    /// An application's `Reclaim`: take over an established call it held through this
    /// host's previous sigd (module docs). The ticket must carry this host's MAC and
    /// name the call and the requester's uid (root and sigd's own user may reclaim
    /// any); the call keeps its id, VCIs, cookie and reservation.
    pub(super) fn reclaim(
        &mut self,
        t: AppId,
        req: u64,
        call: u64,
        data: SocketAddr,
        path: DataPath,
    ) {
        let tk = match self.reclaim_check(t, call, &path) {
            Ok(tk) => tk,
            Err(r) => {
                self.counters.reclaims_refused += 1;
                return self.refuse(t, req, r.cause, r.detail);
            }
        };
        let qos = path.qos;
        // The user's [[access]] bounds hold for a reclaimed call as for a new one.
        if let Some(why) = self.rate_refusal(t, &qos) {
            self.counters.reclaims_refused += 1;
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::NOT_AUTHORIZED, why);
        }
        // A call inside the host is charged to its caller's half only.
        let charged = !matches!(tk.via, Via::Local { .. }) || tk.outgoing;
        let want = if charged { self.share_demand(&qos) } else { 0 };
        if let Some(why) = self.share_refusal(t, want, None) {
            self.counters.reclaims_refused += 1;
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::RESOURCES, why);
        }
        let done = match tk.via {
            Via::Peer { link, cref, ours } => {
                self.reclaim_peer(t, call, link, cref, ours, &tk, data, &path, qos)
            }
            Via::Local { pair } => self.reclaim_local(t, call, pair, &tk, data, &path, qos),
        };
        match done {
            Ok(()) => {
                // Single use: this ticket reclaims nothing more from this sigd.
                self.tickets_used.insert((tk.instance, tk.call));
                self.counters.calls_reclaimed += 1;
                self.tell(t, Message::Ack { req, id: call });
            }
            Err(r) => {
                self.counters.reclaims_refused += 1;
                self.refuse(t, req, r.cause, r.detail);
            }
        }
    }

    /// What every reclaim must pass before anything is held: a ticket this host's
    /// sigd wrote (MAC), for this call id, owned by the requester's uid; a free id;
    /// the call limits (`[limits]`).
    fn reclaim_check(&self, t: AppId, call: u64, path: &DataPath) -> Result<ResumeTicket, Refusal> {
        if path.resume.is_empty() {
            return Err(Refusal::new(
                cause::TEMPORARY_FAILURE,
                "the call has no resume ticket: it does not outlive its sigd",
            ));
        }
        let tk = match ResumeTicket::open(&path.resume, &self.ticket_key) {
            Ok(tk) => tk,
            Err(e @ TicketError::Unreadable(_)) => {
                return Err(Refusal::new(cause::INVALID_IE, e.to_string()))
            }
            Err(e @ TicketError::Forged) => {
                return Err(Refusal::new(cause::NOT_AUTHORIZED, e.to_string()))
            }
        };
        // Only a restart: a ticket this sigd issued itself resumes nothing (the call
        // is its own, or was released), and only in the first seconds after this
        // sigd started, while its applications come back.
        if tk.instance == self.instance {
            return Err(Refusal::new(
                cause::NOT_AUTHORIZED,
                "permission denied: the resume ticket was issued by this sigd, which has not \
                 restarted since; a call is reclaimed only from a sigd that died",
            ));
        }
        let expiry = self.cfg.restart.ticket_expiry;
        if self.started.is_some_and(|s| self.now > s + expiry) {
            return Err(Refusal::new(
                cause::NOT_AUTHORIZED,
                format!(
                    "permission denied: resume tickets expire {} ms after sigd starts \
                     ([restart] ticket_expiry_ms); this one came too late",
                    expiry.as_millis()
                ),
            ));
        }
        if self.tickets_used.contains(&(tk.instance, tk.call)) {
            return Err(Refusal::new(
                cause::INVALID_CALL_REF,
                "the resume ticket was used already: a ticket reclaims its call once",
            ));
        }
        if let Err(why) = tk.check_path(path) {
            return Err(Refusal::new(
                cause::NOT_AUTHORIZED,
                format!("permission denied: {why}"),
            ));
        }
        if tk.call != call {
            return Err(Refusal::new(
                cause::INVALID_CALL_REF,
                format!(
                    "the resume ticket is for call {:016x}, not {call:016x}",
                    tk.call
                ),
            ));
        }
        let uid = self.uid_of(t);
        if tk.uid != uid && !self.privileged(t) {
            return Err(Refusal::new(
                cause::NOT_AUTHORIZED,
                format!(
                    "permission denied: uid {uid} may not reclaim a call of uid {}",
                    tk.uid
                ),
            ));
        }
        if call == 0 || self.calls.contains_key(&call) {
            return Err(Refusal::new(
                cause::INVALID_CALL_REF,
                "this sigd already has a call with that id",
            ));
        }
        if self.calls.len() >= self.cfg.max_calls {
            return Err(Refusal::new(
                cause::RESOURCES,
                format!(
                    "sigd holds its limit of {} calls ([limits] calls)",
                    self.cfg.max_calls
                ),
            ));
        }
        if let Some(why) = self.call_limit(t) {
            return Err(Refusal::new(cause::RESOURCES, why));
        }
        Ok(tk)
    }

    /// Take over a call to a peer sigd: call control adopts its call reference and
    /// checks it with the peer, and a peer that no longer has it releases it here too.
    #[allow(clippy::too_many_arguments)]
    fn reclaim_peer(
        &mut self,
        t: AppId,
        call: u64,
        link: SocketAddr,
        cref: u32,
        ours: bool,
        tk: &ResumeTicket,
        data: SocketAddr,
        path: &DataPath,
        qos: Qos,
    ) -> Result<(), Refusal> {
        if !self.vci_pool(link).reserve(path.rx_vci) {
            return Err(Refusal::new(
                cause::NO_VCI,
                format!(
                    "VCI {} on the link to {link} is taken (or out of range)",
                    path.rx_vci
                ),
            ));
        }
        let free_vci = |this: &mut Core| {
            if let Some(p) = this.vcis.get_mut(&Some(link)) {
                p.free(path.rx_vci);
            }
        };
        // The reservation is charged again, as the previous sigd had it.
        let (grant, qos) = match self.admit_qos(&qos) {
            Ok(g) => g,
            Err(r) => {
                free_vci(self);
                return Err(r);
            }
        };
        let now = self.now;
        // A reclaim may come before the link is (re-)established: the call waits for
        // it as a kept call does, also on a link to a switch (whose T309 is 0 once
        // the link has been up; the switch keeps the call meanwhile, its own
        // `preserve_ms`).
        let wait = self.cfg.restart.preserve;
        let adopted = match self.link(link, true) {
            Some(l) => l
                .saal
                .adopt(now, cref, ours, wait)
                .map_err(|e| Refusal::new(cause::INVALID_CALL_REF, e.to_string())),
            // Only configured peers get a link on demand; an unknown peer's link
            // comes back only when it echoes a cookie (docs/SECURITY.md), so its
            // calls are not reclaimed and are cleared at both ends.
            None => Err(Refusal::new(
                cause::DESTINATION_OUT_OF_ORDER,
                "the peer is not a configured one: its calls do not outlive a restart",
            )),
        };
        let cid = match adopted {
            Ok(cid) => cid,
            Err(r) => {
                self.res.release(&grant);
                free_vci(self);
                return Err(r);
            }
        };
        if let Some(l) = self.peers.get_mut(&link) {
            l.calls.insert(cid, call);
        }
        let remote = Remote::Peer {
            link,
            call: Some(cid),
        };
        self.adopt_call(t, call, remote, tk, data, path, qos, grant);
        self.dirty.push(link);
        if let Some(suppressed) = self.app_log() {
            info!(call, %link, cref, suppressed, "call reclaimed after a sigd restart");
        }
        Ok(())
    }

    /// Take over one half of a call between two applications of this host. The first
    /// half to come holds both VCIs (from the host's own pool) and waits for the
    /// other until the reclaim window ends (or one window after it came, if later):
    /// the two halves must name each other and agree on cookie and VCIs. A half left
    /// alone is released then (`release_unpaired`). The reservation is charged to
    /// the caller's half, as at setup.
    #[allow(clippy::too_many_arguments)]
    fn reclaim_local(
        &mut self,
        t: AppId,
        call: u64,
        pair: u64,
        tk: &ResumeTicket,
        data: SocketAddr,
        path: &DataPath,
        qos: Qos,
    ) -> Result<(), Refusal> {
        let first = match self.calls.get(&pair) {
            None => true,
            Some(p) if self.unpaired.contains_key(&pair) && p.remote == Remote::Local(call) => {
                if p.outgoing == tk.outgoing
                    || p.cookie != path.cookie
                    || (p.tx_vci, p.rx_vci) != (path.rx_vci, path.tx_vci)
                {
                    return Err(Refusal::new(
                        cause::INVALID_CALL_REF,
                        format!(
                            "the call does not match its other half {pair:016x} (direction, cookie or VCIs)"
                        ),
                    ));
                }
                false
            }
            Some(_) => {
                return Err(Refusal::new(
                    cause::INVALID_CALL_REF,
                    format!("call {pair:016x} of this sigd is not this call's other half"),
                ))
            }
        };
        if first {
            let pool = self.vcis.entry(None).or_default();
            let (rx, tx) = (path.rx_vci, path.tx_vci);
            if rx == tx || !pool.reserve(rx) {
                return Err(Refusal::new(
                    cause::NO_VCI,
                    format!("VCI {rx} inside this host is taken (or out of range)"),
                ));
            }
            if !pool.reserve(tx) {
                pool.free(rx);
                return Err(Refusal::new(
                    cause::NO_VCI,
                    format!("VCI {tx} inside this host is taken (or out of range)"),
                ));
            }
        }
        let free_vcis = |this: &mut Core| {
            if let (true, Some(p)) = (first, this.vcis.get_mut(&None)) {
                p.free(path.rx_vci);
                p.free(path.tx_vci);
            }
        };
        // Charged once, at the caller's half, as `connect` did.
        let (grant, qos) = if tk.outgoing {
            match self.admit_qos(&qos) {
                Ok(g) => g,
                Err(r) => {
                    free_vcis(self);
                    return Err(r);
                }
            }
        } else {
            (Grant::default(), qos)
        };
        self.adopt_call(t, call, Remote::Local(pair), tk, data, path, qos, grant);
        if first {
            let window = self.cfg.restart.reclaim_window;
            let until = match self.reclaim_until {
                Some(u) if u > self.now => u,
                _ => self.now + window,
            };
            self.unpaired.insert(call, until);
            if let Some(suppressed) = self.app_log() {
                info!(
                    call,
                    pair,
                    suppressed,
                    "half of a call inside this host reclaimed; waiting for the other"
                );
            }
        } else {
            self.unpaired.remove(&pair);
            if let Some(suppressed) = self.app_log() {
                info!(
                    call,
                    pair,
                    suppressed,
                    "call inside this host reclaimed at both ends after a sigd restart"
                );
            }
        }
        Ok(())
    }

    /// File a reclaimed call as an active one of application `t`.
    #[allow(clippy::too_many_arguments)]
    fn adopt_call(
        &mut self,
        t: AppId,
        call: u64,
        remote: Remote,
        tk: &ResumeTicket,
        data: SocketAddr,
        path: &DataPath,
        qos: Qos,
        grant: Grant,
    ) {
        let data = self.data_endpoint(data);
        self.calls.insert(
            call,
            Call {
                id: call,
                owner: Some(t),
                state: CallState::Active,
                remote,
                outgoing: tk.outgoing,
                local_addr: tk.local.clone(),
                remote_addr: tk.remote.clone(),
                sap: tk.sap.clone(),
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
                multipoint: path.multipoint,
            },
        );
    }

    /// Release the reclaimed halves of calls inside this host whose other half did
    /// not come back in time (cause 41): nothing is left half-held.
    pub(super) fn release_unpaired(&mut self, now: Instant) {
        let mut due: Vec<u64> = self
            .unpaired
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        let secs = self.cfg.restart.reclaim_window.as_secs_f64();
        for id in due {
            info!(
                call = id,
                "the other half of a call inside this host was not reclaimed: released"
            );
            self.end_call(
                id,
                cause::TEMPORARY_FAILURE,
                &format!(
                    "sigd restarted and the other application of this call did not reclaim it within {secs} s ([restart] reclaim_window_ms)"
                ),
                true,
            );
        }
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
