//! Point-to-multipoint calls at their root (issue 19; Q.2971, seed 000's multicast
//! VCs): an application's `ConnectMultipoint` is a SETUP that says
//! point-to-multipoint and names party 0 (`peers::connect_peer`, with the forward
//! direction alone reserved, once for the call); `AddParty` puts a further leaf on
//! the call as ADD PARTY when the leaf's route takes the call's own signalling link
//! (its first hop, a switch port, replicates), and `DropParty` is DROP PARTY. The
//! parties are a [`PartyTable`] per call (endpoint references, T399 and T398); what
//! the network answers goes to the application as `PartyAdded`, `PartyRejected` and
//! `PartyDropped`. The last party gone releases the call.
//!
//! A leaf reached through another link is not this call's: `AddParty` is refused
//! with cause 63 and the application opens another multipoint call for it.

use natm_proto::sig::call::PartyRef;
use natm_proto::sig::party::{PartyConfig, PartyEvent, PartyOut, PartyTable};
use natm_proto::sig::{CallParams, Sap};
use natm_proto::wire::ipc::clip;

use super::link;
use super::*;
use crate::directory::Route;

/// The root's record of one point-to-multipoint call.
#[derive(Debug)]
pub(super) struct MpCall {
    /// The parties, by endpoint reference (0: the SETUP's leaf), with the address
    /// each was called by.
    parties: PartyTable<String>,
    /// The SETUP's parameters: each ADD PARTY carries them with its own called
    /// party and SAP (the same QoS, cookie and data endpoint: one VC).
    template: CallParams,
}

impl MpCall {
    /// A call whose SETUP (to `addr`, `sap`) is about to go out with `params`.
    pub(super) fn new(now: Instant, addr: &AtmAddr, sap: &str, params: &CallParams) -> MpCall {
        let mut parties = PartyTable::new(PartyConfig::default());
        let first = parties
            .add(now, called_text(addr, sap))
            .expect("an empty table takes a party");
        debug_assert_eq!(first, 0, "Q.2971 §9.1: the SETUP's party is 0");
        MpCall {
            parties,
            template: params.clone(),
        }
    }

    /// The SETUP was answered (CONNECT): party 0 is active.
    pub(super) fn first_connected(&mut self) {
        let _ = self.parties.on_ack(0);
        self.parties.drain_events();
    }
}

fn called_text(addr: &AtmAddr, sap: &str) -> String {
    if sap.is_empty() {
        addr.to_string()
    } else {
        format!("{addr}:{sap}")
    }
}

impl Core {
    /// The application's active multipoint call `call`: its link and call reference.
    fn mp_call(&self, t: AppId, call: u64) -> Result<(SocketAddr, CallId), (u8, String)> {
        if !self.owned(t, call, Some(CallState::Active)) {
            return Err((
                cause::INVALID_CALL_REF,
                "no active call with that id on this connection".into(),
            ));
        }
        if !self.multipoint.contains_key(&call) {
            return Err((
                cause::SERVICE_UNAVAILABLE,
                "the call is point-to-point: parties are added to a call opened with ConnectMultipoint".into(),
            ));
        }
        match self.calls.get(&call).map(|c| c.remote) {
            Some(Remote::Peer {
                link,
                call: Some(cid),
            }) => Ok((link, cid)),
            _ => Err((
                cause::WRONG_STATE,
                "the call has no signalling link now".into(),
            )),
        }
    }

    /// `AddParty`: ADD PARTY on the call for `called`, if its route is the call's
    /// own link.
    pub(super) fn add_party(&mut self, t: AppId, req: u64, call: u64, called: &str) {
        let (link, cid) = match self.mp_call(t, call) {
            Ok(x) => x,
            Err((c, why)) => return self.refuse(t, req, c, why),
        };
        let (addr_text, sap) = split_sap(called);
        let addr = match AtmAddr::parse_with_hosts(addr_text, &self.cfg.hosts) {
            Ok(a) => a,
            Err(e) => return self.refuse(t, req, cause::INVALID_NUMBER, e.render(addr_text)),
        };
        if !sap.is_empty() && Sap::parse(sap).is_err() {
            return self.refuse(
                t,
                req,
                cause::INVALID_NUMBER,
                format!("\"{sap}\" is not a SAP"),
            );
        }
        if self.refused_by_policy(t, req, &addr) {
            return;
        }
        match self.dir.route(&addr) {
            Some(Route::Peer(l)) if l == link => {}
            Some(_) => {
                return self.refuse(
                    t,
                    req,
                    cause::SERVICE_UNAVAILABLE,
                    format!(
                        "{addr} is not reached through this call's first hop ({link}): open another multipoint call for it"
                    ),
                )
            }
            None => {
                return self.refuse(
                    t,
                    req,
                    cause::NO_ROUTE,
                    format!("no directory entry covers {addr}"),
                )
            }
        }
        let Some(party) = link::party(&addr) else {
            return self.refuse(
                t,
                req,
                cause::INVALID_NUMBER,
                format!("{addr} is a PVC; call an NSAP or E.164 address"),
            );
        };
        let now = self.now;
        let mp = self.multipoint.get_mut(&call).expect("mp_call found it");
        let eref = match mp.parties.add(now, called_text(&addr, sap)) {
            Ok(e) => e,
            Err(e) => return self.refuse(t, req, e.cause().raw(), e.to_string()),
        };
        let mut params = mp.template.clone();
        params.called = party;
        params.sap = if sap.is_empty() {
            None
        } else {
            Sap::parse(sap).ok()
        };
        let sent = match self.peers.get_mut(&link) {
            Some(l) => l
                .saal
                .add_party(now, cid, eref, &params)
                .map_err(|e| e.to_string()),
            None => Err("the signalling link is gone".into()),
        };
        if let Err(why) = sent {
            if let Some(mp) = self.multipoint.get_mut(&call) {
                let _ = mp.parties.on_reject(eref, cause::TEMPORARY_FAILURE);
                mp.parties.drain_events();
            }
            return self.refuse(t, req, cause::TEMPORARY_FAILURE, why);
        }
        self.dirty.push(link);
        if let Some(suppressed) = self.app_log() {
            let sap = super::ratelog::untrusted(sap);
            info!(call, party = eref, to = %addr, %sap, via = %link, suppressed, "add party");
        }
        self.tell(
            t,
            Message::Ack {
                req,
                id: eref.into(),
            },
        );
    }

    /// `DropParty`: DROP PARTY for one party; the last party releases the call.
    pub(super) fn drop_party(&mut self, t: AppId, req: u64, call: u64, party: u16, c: u8) {
        let (link, cid) = match self.mp_call(t, call) {
            Ok(x) => x,
            Err((cause, why)) => return self.refuse(t, req, cause, why),
        };
        let now = self.now;
        let mp = self.multipoint.get_mut(&call).expect("mp_call found it");
        if mp.parties.addr(party).is_none() {
            return self.refuse(
                t,
                req,
                cause::INVALID_ENDPOINT_REF,
                format!("the call has no party {party}"),
            );
        }
        if mp.parties.len() == 1 {
            // Q.2971 §9.1.4: the last party goes with the call.
            self.tell(
                t,
                Message::Ack {
                    req,
                    id: party.into(),
                },
            );
            return self.end_call(call, c, "its last party was dropped", true);
        }
        if let Err(e) = mp.parties.drop_party(now, party, c) {
            return self.refuse(t, req, e.cause().raw(), e.to_string());
        }
        self.send_party_drops(call, link, cid);
        self.tell(
            t,
            Message::Ack {
                req,
                id: party.into(),
            },
        );
    }

    /// DROP PARTYs the call's table asks for (a drop, a T399 expiry).
    fn send_party_drops(&mut self, call: u64, link: SocketAddr, cid: CallId) {
        let Some(mp) = self.multipoint.get_mut(&call) else {
            return;
        };
        let now = self.now;
        for PartyOut::DropParty { eref, cause } in mp.parties.drain_out() {
            let party = PartyRef {
                value: eref.value,
                ours: true,
            };
            if let Some(l) = self.peers.get_mut(&link) {
                if let Err(e) = l.saal.drop_party(now, cid, party, uni_cause(cause)) {
                    debug!(call, party = eref.value, error = %e, "drop party refused by call control");
                }
            }
        }
        self.dirty.push(link);
    }

    /// Tell the call's application what happened to its parties; release the call
    /// once none is left.
    fn party_news(&mut self, call: u64, cause: u8, detail: &str) {
        let Some(mp) = self.multipoint.get_mut(&call) else {
            return;
        };
        let events = mp.parties.drain_events();
        let none_left = mp.parties.is_empty();
        let owner = self.calls.get(&call).and_then(|c| c.owner);
        for ev in events {
            let m = match ev {
                PartyEvent::Added(party) => Message::PartyAdded { call, party },
                PartyEvent::Refused { eref, cause } => Message::PartyRejected {
                    call,
                    party: eref,
                    cause,
                    detail: clip(detail).to_owned(),
                },
                PartyEvent::Left { eref, cause } => Message::PartyDropped {
                    call,
                    party: eref,
                    cause,
                    left: true,
                    detail: clip(detail).to_owned(),
                },
                PartyEvent::Dropped(party) => Message::PartyDropped {
                    call,
                    party,
                    cause,
                    left: false,
                    detail: clip(detail).to_owned(),
                },
            };
            if let Some(o) = owner {
                self.tell(o, m);
            }
        }
        if none_left {
            self.end_call(call, cause, "no party of the call is left", true);
        }
    }

    /// ADD PARTY ACKNOWLEDGE.
    pub(super) fn on_party_added(&mut self, link: SocketAddr, cid: CallId, party: PartyRef) {
        let Some(call) = self.call_on(link, cid) else {
            return;
        };
        let Some(mp) = self.multipoint.get_mut(&call) else {
            return;
        };
        if let Err(e) = mp.parties.on_ack(party.value) {
            // Call control checked the reference; the table may have timed it out.
            debug!(call, party = party.value, error = %e, "late ADD PARTY ACKNOWLEDGE");
            return;
        }
        info!(call, party = party.value, "party added");
        self.party_news(call, cause::NORMAL, "");
    }

    /// ADD PARTY REJECT.
    pub(super) fn on_party_rejected(
        &mut self,
        link: SocketAddr,
        cid: CallId,
        party: PartyRef,
        c: u8,
    ) {
        let Some(call) = self.call_on(link, cid) else {
            return;
        };
        let Some(mp) = self.multipoint.get_mut(&call) else {
            return;
        };
        let who = mp.parties.addr(party.value).cloned().unwrap_or_default();
        if mp.parties.on_reject(party.value, c).is_err() {
            return;
        }
        let detail = format!(
            "the network or {who} refused the party (cause {c}: {})",
            cause_text(c)
        );
        self.party_news(call, c, &detail);
    }

    /// DROP PARTY (from the network: the leaf left) or its acknowledgement.
    pub(super) fn on_party_dropped(
        &mut self,
        link: SocketAddr,
        cid: CallId,
        party: PartyRef,
        c: u8,
        by_peer: bool,
    ) {
        let Some(call) = self.call_on(link, cid) else {
            return;
        };
        let Some(mp) = self.multipoint.get_mut(&call) else {
            // A leaf's call (this host received the SETUP) whose party the network
            // dropped: the leaf's call is over.
            if by_peer {
                self.end_call(
                    call,
                    c,
                    &format!(
                        "the network dropped this leaf, via {link} (cause {c}: {})",
                        cause_text(c)
                    ),
                    true,
                );
            }
            return;
        };
        let who = mp.parties.addr(party.value).cloned().unwrap_or_default();
        let r = if by_peer {
            mp.parties.on_drop(party.value, c)
        } else {
            mp.parties.on_drop_ack(party.value)
        };
        if r.is_err() {
            return;
        }
        let detail = if by_peer {
            format!(
                "{who} left the call: its application closed or died, or the network dropped it (cause {c}: {})",
                cause_text(c)
            )
        } else {
            format!("{who} dropped")
        };
        info!(
            call,
            party = party.value,
            cause = c,
            by_peer,
            "party dropped"
        );
        self.party_news(call, c, &detail);
    }

    /// Run the party timers (T399, T398) of active multipoint calls due by `now`.
    pub(super) fn party_timeouts(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .multipoint
            .iter()
            .filter(|(_, mp)| mp.parties.next_timeout().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .filter(|id| {
                self.calls
                    .get(id)
                    .is_some_and(|c| c.state == CallState::Active)
            })
            .collect();
        for call in due {
            let Some(mp) = self.multipoint.get_mut(&call) else {
                continue;
            };
            mp.parties.poll_timeout(now);
            if let Some(Remote::Peer {
                link,
                call: Some(cid),
            }) = self.calls.get(&call).map(|c| c.remote)
            {
                self.send_party_drops(call, link, cid);
            }
            let c = CauseValue::RecoveryOnTimerExpiry.raw();
            self.party_news(call, c, "no answer from the network in time (T399 or T398)");
        }
    }

    /// The earliest party timer of an active multipoint call.
    pub(super) fn party_deadline(&self) -> Option<Instant> {
        self.multipoint
            .iter()
            .filter(|(id, _)| {
                self.calls
                    .get(id)
                    .is_some_and(|c| c.state == CallState::Active)
            })
            .filter_map(|(_, mp)| mp.parties.next_timeout())
            .min()
    }
}
