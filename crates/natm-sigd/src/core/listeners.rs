//! Listeners: explicit ones (every call offered with `Incoming`, seed 004 §5.3) and
//! pre-authorised ones (`BindAuto`: calls that fit the bound QoS answered by sigd on
//! pre-opened data endpoints), and where their waiting calls go when they leave.

use super::*;

impl Core {
    /// A listener for a call to `addr` on `sap`: one on that SAP bound to that address
    /// or to all of the host's (lowest connection first, so the choice is stable).
    pub(super) fn find_listener(&self, addr: &AtmAddr, sap: &str) -> Option<u64> {
        self.listeners
            .values()
            .filter(|l| l.sap == sap && l.addr.is_none_or(|a| a == *addr))
            .min_by_key(|l| (l.owner, l.id))
            .map(|l| l.id)
    }

    /// More pre-opened endpoints for a pre-authorised listener.
    pub(super) fn add_endpoints(
        &mut self,
        t: AppId,
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
        self.tell(t, Message::Ack { req, id: listener });
    }

    /// Listen on a SAP; `auto`: pre-authorised, with these pre-opened data endpoints.
    pub(super) fn bind_sap(
        &mut self,
        t: AppId,
        req: u64,
        sap_text: &str,
        qos: Qos,
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
                format!("SAP \"{sap}\": use 1 to 8 letters, digits, - or _, or @OUI.APPID in hex"),
            );
        }
        // One service, one name: `blli.cc` is `blli.llc`, `@0060D7.…` is `@0060d7.…`,
        // as the SAP of an incoming call is written (else an alias would bind beside
        // the service, squat checks and root_saps would miss it, and never see a call).
        let canonical = natm_proto::sig::Sap::from_text(sap).map(|s| s.to_string());
        let sap = canonical.as_deref().unwrap_or(sap);
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
        if let Some((c, why)) = self.bind_refusal(t, sap) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, c, why);
        }
        if let Some(why) = self.rate_refusal(t, &qos) {
            self.counters.access_refusals += 1;
            return self.refuse(t, req, cause::NOT_AUTHORIZED, why);
        }
        let auto = auto.map(|pool| AutoAccept { pool });
        let id = self.new_id();
        if let Some(a) = self.apps.get_mut(&t) {
            a.listeners += 1;
        }
        self.listeners.insert(
            id,
            Listening {
                id,
                owner: t,
                sap: sap.to_owned(),
                addr,
                qos,
                auto,
            },
        );
        if let Some(suppressed) = self.app_log() {
            let sap = super::ratelog::untrusted(sap);
            info!(listener = id, %sap, conn = %t, suppressed, "listening");
        }
        self.tell(t, Message::Ack { req, id });
    }

    pub(super) fn remove_listener(&mut self, id: u64) {
        let Some(l) = self.listeners.remove(&id) else {
            return;
        };
        if let Some(a) = self.apps.get_mut(&l.owner) {
            a.listeners = a.listeners.saturating_sub(1);
        }
        // Memory a flood of binds took goes back once they are gone.
        if self.listeners.capacity() > 64 && self.listeners.len() < self.listeners.capacity() / 4 {
            self.listeners.shrink_to_fit();
        }
        // Calls offered to it go to another listener on the same SAP, or are refused.
        let mut waiting: Vec<u64> = self
            .calls
            .values()
            .filter(|c| c.listener == Some(id) && c.state == CallState::Offered)
            .map(|c| c.id)
            .collect();
        waiting.sort_unstable();
        for call in waiting {
            // Ending one call can end its local other end: only calls still here.
            let Some(c) = self.calls.get(&call) else {
                continue;
            };
            let addr = c.local_addr.parse::<AtmAddr>().ok();
            let next = addr
                .and_then(|a| self.find_listener(&a, &l.sap))
                .or_else(|| {
                    self.listeners
                        .values()
                        .filter(|o| o.sap == l.sap && o.addr.is_none())
                        .min_by_key(|o| (o.owner, o.id))
                        .map(|o| o.id)
                });
            match next {
                Some(n) => {
                    if let Some(suppressed) = self.app_log() {
                        info!(call, listener = n, suppressed, "offered call moved to another listener");
                    }
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
}
