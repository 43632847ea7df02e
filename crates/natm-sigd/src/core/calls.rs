//! Calls: an application's Connect (checks, policy, routing, admission), offers to
//! listeners (explicit or pre-authorised), answers, calls between two applications of
//! this host, and the end of a call with everything it held given back.

use natm_proto::wire::ipc::{clip, DataPath};

use super::keys;
use super::qos::{demand, granted_qos, qos_fits, reverse};
use super::*;
use crate::admission::Refusal;
use crate::config::CallDirection;
use crate::directory::Route;

impl Core {
    /// Whether this host's policy refuses outgoing calls to `addr`; if so the
    /// application's request `req` is refused with cause 21 (call rejected).
    pub(super) fn refused_by_policy(&mut self, t: AppId, req: u64, addr: &AtmAddr) -> bool {
        if self.cfg.policy_allows(addr, CallDirection::Outgoing) {
            return false;
        }
        self.counters.policy_rejections += 1;
        self.refuse(
            t,
            req,
            cause::CALL_REJECTED,
            format!("calls to {addr} are rejected by this host's sigd policy"),
        );
        true
    }

    /// An application's Connect: limits, the called party, QoS, policy (cause 21),
    /// route (cause 3), then a local call (listener first, admission once at the
    /// caller) or a call to a peer sigd (admission here, again at the callee).
    /// `multipoint`: the root of a point-to-multipoint call (`multipoint`), to a peer
    /// only.
    pub(super) fn connect(
        &mut self,
        t: AppId,
        req: u64,
        called: &str,
        qos: Qos,
        data: SocketAddr,
        multipoint: bool,
    ) {
        if self.calls.len() >= self.cfg.max_calls {
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!(
                    "sigd holds its limit of {} calls ([limits] calls)",
                    self.cfg.max_calls
                ),
            );
        }
        let (addr_text, sap) = split_sap(called);
        let addr = match AtmAddr::parse_with_hosts(addr_text, &self.cfg.hosts) {
            Ok(a) => a,
            Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(addr_text)),
        };
        if let Some(why) = self.call_limit(t) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::RESOURCES, why);
        }
        if let Some(why) = self.rate_refusal(t, &qos) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::NOT_AUTHORIZED, why);
        }
        if self.refused_by_policy(t, req, &addr) {
            return;
        }
        let route = match self.dir.route(&addr) {
            Some(r) => r,
            None => {
                return self.refuse(
                    t,
                    req,
                    cause::NO_ROUTE,
                    format!(
                        "no directory entry covers {addr}: add a [[directory]] prefix for it to the sigd config"
                    ),
                )
            }
        };
        let local_addr = self
            .dir
            .primary()
            .map_or_else(|| "local".to_owned(), |a| a.to_string());
        match route {
            Route::Local if multipoint => self.refuse(
                t,
                req,
                cause::SERVICE_UNAVAILABLE,
                format!(
                    "{addr} is on this host: no network replicates a point-to-multipoint call to it; call the leaf on its own"
                ),
            ),
            Route::Local => {
                //= seed 004 §2: "In the case where the connection is local, no
                //= association record is required and each of the two sockets
                //= corresponding to the endpoints of the connection contains a reference
                //= to the other." Here: two calls of this sigd naming each other
                //= (`Remote::Local`), switched without signalling.
                // Find the listener first: no resources are reserved for a call that
                // nobody will take.
                let Some(listener) = self.find_listener(&addr, sap) else {
                    return self.refuse(
                        t,
                        req,
                        cause::INCOMPATIBLE_DESTINATION,
                        format!("nobody listens on SAP \"{sap}\" at {addr}"),
                    );
                };
                if let Some(why) = self.share_refusal(t, self.share_demand(&qos), None) {
                    self.counters.access_refusals += 1;
                    return self.refuse(t, req, cause::RESOURCES, why);
                }
                // A call between two applications of this host is charged once, at the
                // caller's end: it crosses the host's link neither way.
                let (grant, qos) = match self.admit_qos(&qos) {
                    Ok(g) => g,
                    Err(r) => return self.refuse(t, req, r.cause, r.detail),
                };
                let id = self.new_id();
                let peer_id = self.new_id();
                let cookie = self.new_cookie();
                let data = self.data_endpoint(data);
                self.calls.insert(
                    id,
                    Call {
                        id,
                        owner: Some(t),
                        state: CallState::Calling,
                        remote: Remote::Local(peer_id),
                        outgoing: true,
                        local_addr: local_addr.clone(),
                        remote_addr: addr.to_string(),
                        sap: sap.to_owned(),
                        qos,
                        data: Some(data),
                        peer_data: None,
                        listener: None,
                        cookie,
                        tx_vci: 0,
                        rx_vci: 0,
                        grant,
                        deadline: None,
                        announce: None,
                        half_open: 0,
                        keys: Default::default(),
                        multipoint: false,
                    },
                );
                self.tell(t, Message::Ack { req, id });
                if let Some(suppressed) = self.app_log() {
                    let sap = super::ratelog::untrusted(sap);
                    info!(call = id, to = %addr, %sap, suppressed, "local call");
                }
                self.calls.insert(
                    peer_id,
                    Call {
                        id: peer_id,
                        owner: None,
                        state: CallState::Offered,
                        remote: Remote::Local(id),
                        outgoing: false,
                        local_addr: addr.to_string(),
                        remote_addr: local_addr,
                        sap: sap.to_owned(),
                        qos: reverse(&qos),
                        data: None,
                        peer_data: None,
                        listener: None,
                        cookie: 0,
                        tx_vci: 0,
                        rx_vci: 0,
                        grant: Grant::default(),
                        deadline: None,
                        announce: None,
                        half_open: 0,
                        keys: Default::default(),
                        multipoint: false,
                    },
                );
                self.offer(peer_id, listener);
            }
            Route::Peer(link) => {
                let to = super::peers::Called { addr, sap };
                self.connect_peer(t, req, link, to, qos, local_addr, data, multipoint)
            }
        }
    }

    /// Offer an incoming call to a listener, or answer it at once if the listener is
    /// pre-authorised and the call fits its QoS.
    ///
    //= seed 004 §5.3: the ATM protocol "allows the passive end of a connection to
    //= consider both the address of the peer and the quality of service requested
    //= before deciding to accept the connection" — `Incoming` carries both; a
    //= pre-authorised listener decided on the QoS at bind time (the departure is in
    //= docs/sigd.md "Pre-authorised listeners").
    pub(super) fn offer(&mut self, call: u64, listener: u64) {
        let Some(l) = self.listeners.get(&listener) else {
            return;
        };
        let owner = l.owner;
        let capacity = self.res.capacity_bps();
        let fits = match (&l.auto, self.calls.get(&call)) {
            (Some(_), Some(c)) => qos_fits(&c.qos, &l.qos, capacity),
            _ => false,
        };
        if fits {
            return self.pre_accept(call, listener, owner);
        }
        // An offer holding a guaranteed reservation for a peer's call waits only
        // `[timers] reserve_ms` (docs/SECURITY.md "Signalling peers").
        let reserved = self.calls.get(&call).is_some_and(|c| c.half_open > 0);
        let wait = if reserved {
            self.cfg.timers.accept.min(self.cfg.timers.reserve)
        } else {
            self.cfg.timers.accept
        };
        let deadline = self.now + wait;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        c.owner = Some(owner);
        c.listener = Some(listener);
        c.deadline = Some(deadline);
        let m = Message::Incoming {
            listener,
            call,
            caller: c.remote_addr.clone(),
            qos: c.qos,
        };
        self.tell_now(owner, m);
    }

    /// A pre-authorised listener's call: answer it on one of the listener's
    /// pre-opened data endpoints and tell the application afterwards (the CONNECT is
    /// what the caller waits for; the application learns of the call in parallel).
    /// No endpoint left: the backlog is full, cause 17.
    fn pre_accept(&mut self, call: u64, listener: u64, owner: AppId) {
        let given = self
            .listeners
            .get_mut(&listener)
            .and_then(|l| l.auto.as_mut())
            .and_then(|a| a.pool.pop());
        let Some(given) = given else {
            self.counters.backlog_refusals += 1;
            if let Some(c) = self.calls.get_mut(&call) {
                c.owner = None;
            }
            debug!(call, listener, "pre-authorised listener's backlog full");
            self.end_call(
                call,
                cause::USER_BUSY,
                "the called application's backlog of accepted calls is full: it does not take its calls as fast as they come",
                false,
            );
            return;
        };
        if let Some(c) = self.calls.get_mut(&call) {
            c.owner = Some(owner);
            c.listener = Some(listener);
        }
        let data = self.data_endpoint(given);
        match self.answer_call(call, data) {
            Ok(Message::Connected { call, path }) => {
                self.counters.calls_pre_accepted += 1;
                let caller = self
                    .calls
                    .get(&call)
                    .map(|c| c.remote_addr.clone())
                    .unwrap_or_default();
                let m = Message::Accepted {
                    listener,
                    call,
                    data: given,
                    caller,
                    path,
                };
                match self.calls.get_mut(&call) {
                    // From a peer: tell the application once the caller has its
                    // `Connected` (the CONNECT ACKNOWLEDGE says so), or when the
                    // call ends first.
                    Some(c) if matches!(c.remote, Remote::Peer { .. }) => c.announce = Some(m),
                    _ => self.tell(owner, m),
                }
            }
            Ok(_) => {}
            Err(r) => {
                debug!(call, cause = r.cause, detail = %r.detail, "pre-authorised answer failed");
                // The endpoint was not used: it stays in the backlog.
                if let Some(a) = self
                    .listeners
                    .get_mut(&listener)
                    .and_then(|l| l.auto.as_mut())
                {
                    a.pool.push(given);
                }
            }
        }
    }

    pub(super) fn accept_call(
        &mut self,
        t: AppId,
        req: u64,
        call: u64,
        data: SocketAddr,
        lower: Option<(u64, u64)>,
    ) {
        if !self.owned(t, call, Some(CallState::Offered)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                "no call waiting for an answer with that id on this connection".into(),
            );
        }
        // A counter-offer first, so that the user's limits see the lowered rates.
        if let Some((tx, rx)) = lower {
            if let Err(why) = self.lower_call(call, tx, rx) {
                self.refuse(t, req, cause::UNSUPPORTED_TRAFFIC, why.clone());
                return self.end_call(call, cause::UNSUPPORTED_TRAFFIC, &why, false);
            }
        }
        if let Some(why) = self.rate_refusal(t, &self.calls[&call].qos) {
            self.counters.access_refusals += 1;
            self.refuse(t, req, cause::NOT_AUTHORIZED, why.clone());
            return self.end_call(call, cause::NOT_AUTHORIZED, &why, false);
        }
        // What this side reserved for the call (nothing for the callee's half of a
        // call inside the host: the caller's half holds it) joins the user's share.
        let held = self.calls[&call].grant;
        if let Some(why) = self.share_refusal(t, held.out_bps.max(held.in_bps), Some(call)) {
            self.counters.access_refusals += 1;
            self.refuse(t, req, cause::RESOURCES, why.clone());
            return self.end_call(call, cause::RESOURCES, &why, false);
        }
        let data = self.data_endpoint(data);
        match self.answer_call(call, data) {
            Ok(m) => {
                self.tell(t, Message::Ack { req, id: call });
                self.tell(t, m);
            }
            Err(r) => self.refuse(t, req, r.cause, r.detail),
        }
    }

    /// The callee's counter-offer (issue 33; seed 003's callee may answer with less):
    /// call `call` (offered, this side's view) at `tx_bps` out and `rx_bps` in. Each
    /// used direction must stay between the caller's minimum and what was offered;
    /// only a guaranteed call has rates to lower. What is no longer needed is released
    /// at once — here, or, for a call inside this host, from the caller's half, which
    /// holds the reservation — and the CONNECT carries the lowered QoS, so that the
    /// caller's sigd and every switch on the path keep only that too.
    fn lower_call(&mut self, call: u64, tx_bps: u64, rx_bps: u64) -> Result<(), String> {
        let capacity = self.res.capacity_bps();
        let c = &self.calls[&call];
        let q = c.qos;
        if q.service() != natm_proto::wire::qos::Service::Guaranteed {
            return Err(format!(
                "only a guaranteed call's rates can be lowered; this one is {}",
                q
            ));
        }
        let mbps = |b: u64| format!("{} Mbit/s", b as f64 / 1e6);
        for (dir, asked, tx) in [("send", tx_bps, true), ("receive", rx_bps, false)] {
            let w = demand(&q, tx, capacity);
            if w.target_bps == 0 {
                continue;
            }
            if asked > w.target_bps || asked < w.min_bps {
                return Err(format!(
                    "a counter-offer to {dir} at {} is outside what the caller accepts: between {} and {}",
                    mbps(asked),
                    mbps(w.min_bps),
                    mbps(w.target_bps)
                ));
            }
        }
        let lowered = granted_qos(&q, tx_bps, rx_bps, capacity);
        let tpdu = demand(&q, true, capacity).tpdu_size;
        let exact = |b: u64| crate::admission::Demand {
            target_bps: b,
            min_bps: b,
            tpdu_size: tpdu,
        };
        let (out, inn) = (
            demand(&lowered, true, capacity).target_bps,
            demand(&lowered, false, capacity).target_bps,
        );
        let other = match c.remote {
            Remote::Local(other) => Some(other),
            Remote::Peer { .. } => None,
        };
        // The half that holds the reservation: this one, or the local caller's (whose
        // directions are the other way round).
        let (holder, out, inn) = match other {
            Some(o) => (o, inn, out),
            None => (call, out, inn),
        };
        if let Some(h) = self.calls.get_mut(&holder) {
            // Lower only: what is released is admitted again, so it fits.
            self.res.release(&h.grant);
            h.grant = self.res.admit(&exact(out), &exact(inn)).unwrap_or_default();
        }
        if let Some(o) = other.and_then(|o| self.calls.get_mut(&o)) {
            o.qos = reverse(&lowered);
        }
        if let Some(c) = self.calls.get_mut(&call) {
            c.qos = lowered;
        }
        Ok(())
    }

    /// Answer an offered call on this side's data endpoint `data` (CONNECT to a peer
    /// sigd, or `Connected` to the local caller): the callee's `Connected`, or the
    /// cause and sentence it failed with (the call is then ended). Used for an
    /// application's `Accept` and for a pre-authorised listener's calls.
    pub(super) fn answer_call(&mut self, call: u64, data: SocketAddr) -> Result<Message, Refusal> {
        let Some(c) = self.calls.get(&call) else {
            return Err(Refusal::new(cause::INVALID_CALL_REF, "the call is gone"));
        };
        match c.remote {
            Remote::Local(other) => self.answer_local(call, other, data),
            Remote::Peer { link, call: cid } => self.answer_peer(call, link, cid, data),
        }
    }

    /// Answer a call between two applications of this host.
    fn answer_local(
        &mut self,
        call: u64,
        other: u64,
        data: SocketAddr,
    ) -> Result<Message, Refusal> {
        let qos = self.calls[&call].qos;
        let pool = self.vcis.entry(None).or_default();
        let (Some(v_fwd), Some(v_back)) = (pool.allocate(), pool.allocate()) else {
            self.end_call(call, cause::NO_VCI, "no VCI available", false);
            return Err(Refusal::new(
                cause::NO_VCI,
                "every VCI on this link is in use",
            ));
        };
        let (caller_owner, caller_data, cookie) = {
            let Some(o) = self.calls.get_mut(&other) else {
                self.end_call(call, cause::TEMPORARY_FAILURE, "the caller is gone", false);
                return Err(Refusal::new(cause::TEMPORARY_FAILURE, "the caller is gone"));
            };
            o.state = CallState::Active;
            o.tx_vci = v_fwd;
            o.rx_vci = v_back;
            (o.owner, o.data, o.cookie)
        };
        let c = self
            .calls
            .get_mut(&call)
            .expect("answer_call found the call and nothing since removed it");
        c.state = CallState::Active;
        c.deadline = None;
        c.data = Some(data);
        c.cookie = cookie;
        c.tx_vci = v_back;
        c.rx_vci = v_fwd;
        let Some(caller_data) = caller_data else {
            self.end_call(
                call,
                cause::TEMPORARY_FAILURE,
                "the caller has no data endpoint",
                false,
            );
            return Err(Refusal::new(
                cause::TEMPORARY_FAILURE,
                "the caller has no data endpoint",
            ));
        };
        // Two applications of this host: keys only if the QoS asks (`keys`).
        let agreed = if keys::required(&qos) {
            let Some(k) = keys::local() else {
                self.end_call(
                    call,
                    cause::TEMPORARY_FAILURE,
                    "no randomness for the call's keys",
                    false,
                );
                return Err(Refusal::new(
                    cause::TEMPORARY_FAILURE,
                    "no randomness for the call's keys",
                ));
            };
            Some(k)
        } else {
            None
        };
        if let Some(c) = self.calls.get_mut(&call) {
            c.keys.agreed = agreed.clone();
        }
        if let Some(o) = self.calls.get_mut(&other) {
            o.keys.agreed = agreed.as_ref().map(|k| k.reversed());
        }
        self.counters.calls_setup += 1;
        let callee_msg = Message::Connected {
            call,
            path: self.with_ticket(
                call,
                DataPath {
                    peer: caller_data,
                    cookie,
                    tx_vci: v_back,
                    rx_vci: v_fwd,
                    granted_bps: self.calls[&other].grant.in_bps,
                    qos,
                    resume: String::new(),
                    keys: agreed.clone(),
                    multipoint: false,
                },
            ),
        };
        let o = &self.calls[&other];
        let caller_msg = Message::Connected {
            call: other,
            path: self.with_ticket(
                other,
                DataPath {
                    peer: data,
                    cookie,
                    tx_vci: v_fwd,
                    rx_vci: v_back,
                    granted_bps: o.grant.out_bps,
                    qos: o.qos,
                    resume: String::new(),
                    keys: agreed.map(|k| k.reversed()),
                    multipoint: false,
                },
            ),
        };
        if let Some(o) = caller_owner {
            self.tell(o, caller_msg);
        }
        if let Some(suppressed) = self.app_log() {
            info!(
                call = other,
                callee = call,
                vci_fwd = v_fwd,
                vci_back = v_back,
                suppressed,
                "call active"
            );
        }
        Ok(callee_msg)
    }

    /// End a call: free what it holds, tell its application (`tell_self`) and the
    /// other end.
    ///
    //= seed 004 §2 (again §6): "Final authority as to the state of a connection
    //= lies with the manager. It can unilaterally decide to terminate a connection
    //= at any time."
    pub(super) fn end_call(&mut self, id: u64, cause: u8, detail: &str, tell_self: bool) {
        self.settle_half_open(id);
        self.end_modify(id, cause);
        let Some(mut c) = self.calls.remove(&id) else {
            return;
        };
        self.multipoint.remove(&id);
        self.free_call(&c);
        // A pre-authorised call the application has not heard of yet: it learns of
        // the call (and which socket it took) before it learns of its end.
        if let (Some(m), Some(o)) = (c.announce.take(), c.owner) {
            self.tell(o, m);
        }
        if let (true, Some(o)) = (tell_self, c.owner) {
            self.tell(
                o,
                Message::Released {
                    call: id,
                    cause,
                    detail: clip(detail).to_owned(),
                },
            );
        }
        match c.remote {
            Remote::Peer { link, call } => {
                let now = self.now;
                if let Some(l) = self.peers.get_mut(&link) {
                    l.last_used = now;
                    match call {
                        // Call control still has it: RELEASE (or RELEASE COMPLETE for a
                        // call never answered).
                        Some(cid) if l.calls.remove(&cid).is_some() => {
                            let r = if c.state == CallState::Offered {
                                l.saal.reject(now, cid, uni_cause(cause))
                            } else {
                                l.saal.release(now, cid, uni_cause(cause))
                            };
                            if let Err(e) = r {
                                debug!(%cid, error = %e, "release refused by call control");
                            }
                            self.dirty.push(link);
                        }
                        Some(_) => {}
                        None => l.pending.retain(|(i, _)| *i != id),
                    }
                }
            }
            Remote::Local(other) => {
                if let Some(o) = self.calls.remove(&other) {
                    self.free_call(&o);
                    if let Some(owner) = o.owner {
                        let text = format!("{detail} (cause {cause}: {})", cause_text(cause));
                        self.tell(
                            owner,
                            Message::Released {
                                call: other,
                                cause,
                                detail: clip(&text).to_owned(),
                            },
                        );
                    }
                }
            }
        }
        if c.state == CallState::Active {
            self.counters.calls_released += 1;
        } else {
            self.counters.calls_refused += 1;
        }
        debug!(call = id, cause, detail, "call ended");
    }

    pub(super) fn free_call(&mut self, c: &Call) {
        self.res.release(&c.grant);
        let unpaired = self.unpaired.remove(&c.id).is_some();
        if c.rx_vci == 0 {
            return;
        }
        match c.remote {
            // A reclaimed half whose other half never came back holds both.
            Remote::Local(_) if unpaired => {
                if let Some(p) = self.vcis.get_mut(&None) {
                    p.free(c.rx_vci);
                    p.free(c.tx_vci);
                }
            }
            // Both VCIs of a local call come from one pool; the callee frees them.
            Remote::Local(_) if !c.outgoing => {
                if let Some(p) = self.vcis.get_mut(&None) {
                    p.free(c.rx_vci);
                    p.free(c.tx_vci);
                }
            }
            Remote::Local(_) => {}
            // Each side allocates the VCI it receives on.
            Remote::Peer { link, .. } => {
                if let Some(p) = self.vcis.get_mut(&Some(link)) {
                    p.free(c.rx_vci);
                }
            }
        }
    }
}
