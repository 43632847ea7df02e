//! Requests from applications and the calls and listeners they make: checks,
//! admission, VCIs, offers to listeners, and the end of a call.

use super::*;

impl Daemon {
    // ---- requests --------------------------------------------------------------------

    pub(super) fn refuse(&mut self, t: usize, req: u64, cause: u8, detail: String) {
        debug!(conn = t, req, cause, %detail, "request refused");
        self.send(
            t,
            Message::Refused {
                req,
                cause,
                detail: clip(&detail).to_owned(),
            },
        );
    }

    pub(super) fn request(&mut self, t: usize, m: Message) {
        // A release-type request with tag 0 wants no answer (ulib's releases from
        // `Drop`, where nobody waits): its `Ack` or `Refused` would only wake the
        // application for nothing, once per call at each end.
        self.quiet = matches!(
            m,
            Message::Release { req: 0, .. }
                | Message::Reject { req: 0, .. }
                | Message::Unbind { req: 0, .. }
                | Message::Endpoints { req: 0, .. }
        );
        self.request_inner(t, m);
        self.quiet = false;
    }

    fn request_inner(&mut self, t: usize, m: Message) {
        match m {
            Message::Connect {
                req,
                called,
                qos,
                data,
            } => self.connect(t, req, &called, &qos, data),
            Message::Bind { req, sap, qos } => self.bind_sap(t, req, &sap, &qos, None),
            Message::BindAuto {
                req,
                sap,
                qos,
                data,
            } => self.bind_sap(t, req, &sap, &qos, Some(data)),
            Message::Endpoints {
                req,
                listener,
                data,
            } => self.add_endpoints(t, req, listener, data),
            Message::Unbind { req, listener } => match self.listeners.get(&listener) {
                Some(l) if l.owner == t => {
                    self.remove_listener(listener);
                    self.send(t, Message::Ack { req, id: listener });
                }
                _ => self.refuse(
                    t,
                    req,
                    cause::INVALID_CALL_REF,
                    "no such listener on this connection".into(),
                ),
            },
            Message::Accept { req, call, data } => self.accept_call(t, req, call, data),
            Message::Reject {
                req,
                call,
                cause: c,
            } => {
                if !self.owned(t, call, Some(State::Offered)) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call waiting for an answer with that id on this connection".into(),
                    );
                }
                self.send(t, Message::Ack { req, id: call });
                self.end_call(call, c, "rejected by the called application", false);
            }
            Message::Release {
                req,
                call,
                cause: c,
            } => {
                if !self.owned(t, call, None) {
                    return self.refuse(
                        t,
                        req,
                        cause::INVALID_CALL_REF,
                        "no call with that id on this connection".into(),
                    );
                }
                self.send(t, Message::Ack { req, id: call });
                let why = if c == cause::NORMAL {
                    "closed by the peer application"
                } else {
                    "released by the peer application"
                };
                self.end_call(call, c, why, false);
            }
            Message::Register { req, address } => {
                match AtmAddr::parse_with_hosts(&address, &self.cfg.hosts) {
                    Ok(a) if !matches!(a, AtmAddr::Pvc(_)) => {
                        self.dir.register(a, t as u64);
                        info!(address = %a, conn = t, "address registered");
                        self.send(t, Message::Ack { req, id: 0 });
                    }
                    Ok(_) => self.refuse(
                        t,
                        req,
                        cause::INVALID_NUMBER,
                        format!("\"{address}\" is a PVC; register an NSAP or E.164 address"),
                    ),
                    Err(e) => self.refuse(t, req, cause::INVALID_NUMBER, e.render(&address)),
                }
            }
            Message::Stat { req } => {
                let json = self.stat_json();
                self.send(t, Message::StatReply { req, json });
            }
            other => {
                // An answer-type message sent to sigd is a protocol error.
                self.counters.malformed_ipc += 1;
                if let Some(c) = self.apps.get_mut(&t) {
                    c.send(&Message::Error {
                        cause: cause::WRONG_STATE,
                        detail: format!(
                            "message type {:#04x} goes from sigd to applications, not back; closing this connection",
                            other.type_octet()
                        ),
                    });
                    c.closing = true;
                }
            }
        }
    }

    pub(super) fn owned(&self, t: usize, call: u64, state: Option<State>) -> bool {
        self.calls
            .get(&call)
            .is_some_and(|c| c.owner == t && state.is_none_or(|s| c.state == s))
    }

    pub(super) fn parse_qos(&self, text: &str) -> Result<Qos, String> {
        text.parse::<Qos>().map_err(|e| e.render(text))
    }

    pub(super) fn data_endpoint(&self, mut data: SocketAddr) -> SocketAddr {
        if data.ip().is_unspecified() {
            data.set_ip(self.cfg.data_ip);
        }
        data
    }

    pub(super) fn connect(
        &mut self,
        t: usize,
        req: u64,
        called: &str,
        qos_text: &str,
        data: SocketAddr,
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
        let qos = match self.parse_qos(qos_text) {
            Ok(q) => q,
            Err(e) => return self.refuse(t, req, cause::UNSUPPORTED_TRAFFIC, e),
        };
        if !self.cfg.policy_allows(&addr, CallDirection::Outgoing) {
            self.counters.policy_rejections += 1;
            return self.refuse(
                t,
                req,
                cause::CALL_REJECTED,
                format!("calls to {addr} are rejected by this host's sigd policy"),
            );
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
            Route::Local => {
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
                // A call between two applications of this host is charged once, at the
                // caller's end: it crosses the host's link neither way.
                let (grant, qos) = match self.admit_qos(&qos) {
                    Ok(g) => g,
                    Err(r) => return self.refuse(t, req, r.cause, r.detail),
                };
                let id = self.new_id();
                let peer_id = self.new_id();
                self.calls.insert(
                    id,
                    Call {
                        id,
                        owner: t,
                        state: State::Calling,
                        remote: Remote::Local(peer_id),
                        outgoing: true,
                        local_addr: local_addr.clone(),
                        remote_addr: addr.to_string(),
                        sap: sap.to_owned(),
                        qos,
                        data: Some(self.data_endpoint(data)),
                        peer_data: None,
                        listener: None,
                        cookie: random_u64() as u32,
                        tx_vci: 0,
                        rx_vci: 0,
                        grant,
                        deadline: None,
                        announce: None,
                    },
                );
                self.send(t, Message::Ack { req, id });
                info!(call = id, to = %addr, sap, "local call");
                self.calls.insert(
                    peer_id,
                    Call {
                        id: peer_id,
                        owner: 0,
                        state: State::Offered,
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
                    },
                );
                self.offer(peer_id, listener);
            }
            Route::Peer(link) => self.connect_peer(t, req, link, addr, sap, qos, local_addr, data),
        }
    }

    /// A listener for a call to `addr` on `sap`: one on that SAP bound to that address
    /// or to all of the host's (lowest connection first, so the choice is stable).
    pub(super) fn find_listener(&self, addr: &AtmAddr, sap: &str) -> Option<u64> {
        self.listeners
            .values()
            .filter(|l| l.sap == sap && l.addr.is_none_or(|a| a == *addr))
            .min_by_key(|l| (l.owner, l.id))
            .map(|l| l.id)
    }

    /// Offer an incoming call to a listener, or answer it at once if the listener is
    /// pre-authorised and the call fits its QoS.
    pub(super) fn offer(&mut self, call: u64, listener: u64) {
        let Some(l) = self.listeners.get(&listener) else {
            return;
        };
        let owner = l.owner;
        let capacity = self.res.capacity_bps();
        let fits = match (&l.auto, self.calls.get(&call)) {
            (Some(a), Some(c)) => qos_fits(&c.qos, &a.qos, capacity),
            _ => false,
        };
        if fits {
            return self.pre_accept(call, listener, owner);
        }
        let deadline = Instant::now() + self.cfg.timers.accept;
        let Some(c) = self.calls.get_mut(&call) else {
            return;
        };
        c.owner = owner;
        c.listener = Some(listener);
        c.deadline = Some(deadline);
        let m = Message::Incoming {
            listener,
            call,
            caller: c.remote_addr.clone(),
            qos: c.qos.to_string(),
        };
        self.send_now(owner, m);
    }

    /// A pre-authorised listener's call: answer it on one of the listener's
    /// pre-opened data endpoints and tell the application afterwards (the CONNECT is
    /// what the caller waits for; the application learns of the call in parallel).
    /// No endpoint left: the backlog is full, cause 17.
    fn pre_accept(&mut self, call: u64, listener: u64, owner: usize) {
        let given = self
            .listeners
            .get_mut(&listener)
            .and_then(|l| l.auto.as_mut())
            .and_then(|a| a.pool.pop());
        let Some(given) = given else {
            self.counters.backlog_refusals += 1;
            if let Some(c) = self.calls.get_mut(&call) {
                c.owner = 0;
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
            c.owner = owner;
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
                    _ => self.send(owner, m),
                }
            }
            Ok(_) => {}
            Err((c, detail)) => {
                debug!(call, cause = c, %detail, "pre-authorised answer failed");
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

    /// More pre-opened endpoints for a pre-authorised listener.
    pub(super) fn add_endpoints(
        &mut self,
        t: usize,
        req: u64,
        listener: u64,
        data: Vec<SocketAddr>,
    ) {
        let a = match self.listeners.get_mut(&listener) {
            Some(l) if l.owner == t => l.auto.as_mut(),
            _ => None,
        };
        let Some(a) = a else {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                "no pre-authorised listener with that id on this connection".into(),
            );
        };
        if a.pool.len() + data.len() > natm_proto::wire::ipc::MAX_ENDPOINTS {
            let max = natm_proto::wire::ipc::MAX_ENDPOINTS;
            return self.refuse(
                t,
                req,
                cause::RESOURCES,
                format!("a pre-authorised listener holds at most {max} data endpoints; give them back as calls are taken"),
            );
        }
        a.pool.extend(data);
        self.send(t, Message::Ack { req, id: listener });
    }

    /// Listen on a SAP; `auto`: pre-authorised, with these pre-opened data endpoints.
    pub(super) fn bind_sap(
        &mut self,
        t: usize,
        req: u64,
        sap_text: &str,
        qos: &str,
        auto: Option<Vec<SocketAddr>>,
    ) {
        let (addr_text, sap) = match sap_text.rsplit_once(':') {
            Some((a, s)) => (a, s),
            None => ("", sap_text),
        };
        if !(sap.is_empty() || valid_sap(sap)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_IE,
                format!("SAP \"{sap}\": use 1 to 8 letters, digits, - or _"),
            );
        }
        let addr = if addr_text.is_empty() {
            None
        } else {
            match AtmAddr::parse_with_hosts(addr_text, &self.cfg.hosts) {
                Ok(a) if self.dir.is_local(&a) => Some(a),
                Ok(a) => {
                    return self.refuse(
                        t,
                        req,
                        cause::UNALLOCATED,
                        format!("{a} is not an address of this host; give one of the sigd config's addresses, or none"),
                    )
                }
                Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(addr_text)),
            }
        };
        let parsed = match self.parse_qos(qos) {
            Ok(q) => q,
            Err(e) => return self.refuse(t, req, cause::UNSUPPORTED_TRAFFIC, e),
        };
        let auto = auto.map(|pool| AutoAccept { qos: parsed, pool });
        let id = self.new_id();
        self.listeners.insert(
            id,
            Listening {
                id,
                owner: t,
                sap: sap.to_owned(),
                addr,
                qos: qos.to_owned(),
                auto,
            },
        );
        info!(listener = id, sap, conn = t, "listening");
        self.send(t, Message::Ack { req, id });
    }

    pub(super) fn remove_listener(&mut self, id: u64) {
        let Some(l) = self.listeners.remove(&id) else {
            return;
        };
        // Calls offered to it go to another listener on the same SAP, or are refused.
        let waiting: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.listener == Some(id) && c.state == State::Offered)
            .map(|c| c.id)
            .collect();
        for call in waiting {
            let addr = self.calls[&call].local_addr.parse::<AtmAddr>().ok();
            let next = addr
                .and_then(|a| self.find_listener(&a, &l.sap))
                .or_else(|| {
                    self.listeners
                        .values()
                        .find(|o| o.sap == l.sap && o.addr.is_none())
                        .map(|o| o.id)
                });
            match next {
                Some(n) => {
                    info!(call, listener = n, "offered call moved to another listener");
                    self.offer(call, n);
                }
                None => self.end_call(
                    call,
                    cause::TEMPORARY_FAILURE,
                    "the listening application went away before answering, and no other listens on that SAP",
                    false,
                ),
            }
        }
    }

    pub(super) fn accept_call(&mut self, t: usize, req: u64, call: u64, data: SocketAddr) {
        if !self.owned(t, call, Some(State::Offered)) {
            return self.refuse(
                t,
                req,
                cause::INVALID_CALL_REF,
                "no call waiting for an answer with that id on this connection".into(),
            );
        }
        let data = self.data_endpoint(data);
        match self.answer_call(call, data) {
            Ok(m) => {
                self.send(t, Message::Ack { req, id: call });
                self.send(t, m);
            }
            Err((c, detail)) => self.refuse(t, req, c, detail),
        }
    }

    /// Answer an offered call on this side's data endpoint `data` (CONNECT to a peer
    /// sigd, or `Connected` to the local caller): the callee's `Connected`, or the
    /// cause and sentence it failed with (the call is then ended). Used for an
    /// application's `Accept` and for a pre-authorised listener's calls.
    pub(super) fn answer_call(
        &mut self,
        call: u64,
        data: SocketAddr,
    ) -> Result<Message, (u8, String)> {
        let Some(c) = self.calls.get(&call) else {
            return Err((cause::INVALID_CALL_REF, "the call is gone".into()));
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
    ) -> Result<Message, (u8, String)> {
        let qos = self.calls[&call].qos;
        let pool = self.vcis.entry(None).or_default();
        let (Some(v_fwd), Some(v_back)) = (pool.allocate(), pool.allocate()) else {
            self.end_call(call, cause::NO_VCI, "no VCI available", false);
            return Err((cause::NO_VCI, "every VCI on this link is in use".into()));
        };
        let (caller_owner, caller_data, cookie) = {
            let Some(o) = self.calls.get_mut(&other) else {
                self.end_call(call, cause::TEMPORARY_FAILURE, "the caller is gone", false);
                return Err((cause::TEMPORARY_FAILURE, "the caller is gone".into()));
            };
            o.state = State::Active;
            o.tx_vci = v_fwd;
            o.rx_vci = v_back;
            (o.owner, o.data, o.cookie)
        };
        let c = self.calls.get_mut(&call).expect("checked by the caller");
        c.state = State::Active;
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
            return Err((
                cause::TEMPORARY_FAILURE,
                "the caller has no data endpoint".into(),
            ));
        };
        self.counters.calls_setup += 1;
        let callee_msg = Message::Connected {
            call,
            path: DataPath {
                peer: caller_data,
                cookie,
                tx_vci: v_back,
                rx_vci: v_fwd,
                granted_bps: self.calls[&other].grant.in_bps,
                qos: qos.to_string(),
            },
        };
        let o = &self.calls[&other];
        let caller_msg = Message::Connected {
            call: other,
            path: DataPath {
                peer: data,
                cookie,
                tx_vci: v_fwd,
                rx_vci: v_back,
                granted_bps: o.grant.out_bps,
                qos: o.qos.to_string(),
            },
        };
        self.send(caller_owner, caller_msg);
        info!(
            call = other,
            callee = call,
            vci_fwd = v_fwd,
            vci_back = v_back,
            "call active"
        );
        Ok(callee_msg)
    }

    /// End a call: free what it holds, tell its application (`tell_self`) and the
    /// other end.
    pub(super) fn end_call(&mut self, id: u64, cause: u8, detail: &str, tell_self: bool) {
        let Some(mut c) = self.calls.remove(&id) else {
            return;
        };
        self.free_call(&c);
        // A pre-authorised call the application has not heard of yet: it learns of
        // the call (and which socket it took) before it learns of its end.
        if let Some(m) = c.announce.take() {
            self.send(c.owner, m);
        }
        if tell_self && c.owner != 0 {
            self.send(
                c.owner,
                Message::Released {
                    call: id,
                    cause,
                    detail: clip(detail).to_owned(),
                },
            );
        }
        match c.remote {
            Remote::Peer { link, call } => {
                let now = self.now();
                if let Some(l) = self.peers.get_mut(&link) {
                    match call {
                        // Call control still has it: RELEASE (or RELEASE COMPLETE for a
                        // call never answered).
                        Some(cid) if l.calls.remove(&cid).is_some() => {
                            let r = if c.state == State::Offered {
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
                    if o.owner != 0 {
                        let text = format!("{detail} (cause {cause}: {})", cause_text(cause));
                        self.send(
                            o.owner,
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
        if c.state == State::Active {
            self.counters.calls_released += 1;
        } else {
            self.counters.calls_refused += 1;
        }
        debug!(call = id, cause, detail, "call ended");
    }

    pub(super) fn free_call(&mut self, c: &Call) {
        self.res.release(&c.grant);
        if c.rx_vci == 0 {
            return;
        }
        match c.remote {
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
