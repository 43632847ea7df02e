//! The party messages of a point-to-multipoint call (ITU-T Q.2971 / UNI 3.1 §5.6,
//! issue 19): ADD PARTY, ADD PARTY ACKNOWLEDGE, ADD PARTY REJECT, DROP PARTY and
//! DROP PARTY ACKNOWLEDGE on an active call, each naming its party by endpoint
//! reference.
//!
//! Call control keeps the link-level state of each party of a call (Q.2971 §8: P1
//! add party initiated, P6 add party received, P7 active, P11 drop party
//! initiated) so that it answers what it can at once and reports the rest:
//!
//! - the first party is the one the SETUP placed: a point-to-multipoint SETUP
//!   ([`CallParams::multipoint`], the bearer's user-plane configuration) carries
//!   endpoint reference 0, and once the call is active party 0 is active and can be
//!   dropped with DROP PARTY like any other (the last party goes by releasing the
//!   call, which is the owner's decision); a point-to-point call has no parties;
//! - [`CallControl::add_party`] sends ADD PARTY (P1); the answer comes as
//!   [`CallEvent::PartyAdded`] (P7) or [`CallEvent::PartyRejected`] (P0);
//! - an ADD PARTY that arrives is [`CallEvent::PartyAddRequested`] (P6), answered
//!   with [`CallControl::add_party_ack`] or [`CallControl::add_party_reject`];
//! - [`CallControl::drop_party`] sends DROP PARTY (P11); a DROP PARTY that arrives
//!   is acknowledged at once; both end in [`CallEvent::PartyDropped`] (P0).
//!
//! An ADD PARTY for an endpoint reference in use, or one past [`MAX_PARTIES`]
//! parties of a call, is refused with ADD PARTY REJECT (cause 92 for too many) and
//! creates nothing; answers naming an endpoint reference this side does not know
//! are counted as unexpected and change nothing (a DROP PARTY of an unknown one is
//! acknowledged with cause 89, as Q.2971 §9.3 asks). Party messages outside the
//! active state are answered with STATUS (cause 101) by the state check of
//! `on_call_message`.
//!
//! Departures: natm's ADD PARTY carries the same IEs as its SETUP (traffic
//! descriptor, bearer, QoS and the private IE with the leaf's data endpoint), where
//! Q.2971 leaves the call's traffic descriptor to the SETUP: a switch that opens a
//! new branch for it needs them, and an ADD PARTY without them is still read. The
//! timers T399 and T398 are the party owner's (`sig::party::PartyTable`), not call
//! control's; the party state of a call is bounded by [`MAX_PARTIES`].

use std::collections::BTreeMap;

use super::{wrong, CallAccept, CallControl, CallError, CallEvent, CallId, CallParams};
use crate::wire::q2931::{
    CallRef, CallState, Cause, CauseValue, EndpointRef, IeError, IeId, Message, MessageType,
};

/// Parties a call keeps besides its first (the SETUP's); more are refused with
/// cause 92.
pub const MAX_PARTIES: usize = 256;

/// The link-level state of one party (Q.2971 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartyState {
    /// P1: this side sent ADD PARTY.
    AddInitiated,
    /// P6: the peer sent ADD PARTY; this side has not answered.
    AddReceived,
    /// P7: the party is active.
    Active,
    /// P11: this side sent DROP PARTY.
    DropInitiated,
}

/// A party as this side names it: its endpoint reference value and whether this
/// side allocated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartyRef {
    /// The 15-bit endpoint reference value.
    pub value: u16,
    /// Whether this side allocated the value (sent the ADD PARTY).
    pub ours: bool,
}

impl PartyRef {
    /// The endpoint reference IE this side sends for the party (flag set towards the
    /// side that allocated it).
    fn ie(self) -> EndpointRef {
        EndpointRef {
            flag: !self.ours,
            value: self.value,
        }
    }

    /// The party an endpoint reference IE received from the peer names.
    fn received(e: EndpointRef) -> PartyRef {
        PartyRef {
            value: e.value,
            ours: e.flag,
        }
    }
}

/// The endpoint reference IE of a point-to-multipoint SETUP: its first party, 0, as
/// the caller allocates it.
pub(super) const FIRST_PARTY: EndpointRef = EndpointRef {
    flag: false,
    value: 0,
};

impl super::Call {
    /// A point-to-multipoint call just became active: its first party (the SETUP's,
    /// endpoint reference 0, allocated by whoever sent the SETUP) is active too, so
    /// either side can drop it with DROP PARTY while other parties remain.
    pub(super) fn first_party_active(&mut self) {
        if self.multipoint {
            let first = PartyRef {
                value: 0,
                ours: self.ours,
            };
            self.parties.map.insert(first, PartyState::Active);
        }
    }
}

/// The parties of one call: a point-to-multipoint call's first once it is active,
/// and those added since.
#[derive(Debug, Default)]
pub(super) struct Parties {
    map: BTreeMap<PartyRef, PartyState>,
    /// The cause of each DROP PARTY this side sent, for its acknowledgement.
    dropping: BTreeMap<PartyRef, Cause>,
}

impl CallControl {
    /// The link-level state of party `party` of `call`, if it exists.
    pub fn party_state(&self, call: CallId, party: PartyRef) -> Option<PartyState> {
        self.calls.get(&call)?.parties.map.get(&party).copied()
    }

    /// Adds a party to an active point-to-multipoint call: ADD PARTY with endpoint
    /// reference `eref` (1 to 32,767, allocated by the caller, e.g. by
    /// `sig::party::PartyTable`) and the new leaf's `params` (P1).
    pub fn add_party(
        &mut self,
        call: CallId,
        eref: u16,
        params: &CallParams,
    ) -> Result<(), CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        let c = self.get(call)?;
        let party = PartyRef {
            value: eref,
            ours: true,
        };
        if c.state != CallState::ACTIVE
            || eref == 0
            || eref > EndpointRef::MAX
            || c.parties.map.contains_key(&party)
            || c.parties.map.len() >= MAX_PARTIES
        {
            return Err(wrong(call, c.state, "add_party"));
        }
        let mut msg = Message::new(MessageType::AddParty, c.call_ref()).with(party.ie());
        params.setup_ies(&mut msg, self.cfg.link_cell_rate, self.cfg.private_ie);
        let bytes = bytes::Bytes::from(msg.to_bytes()?);
        if let Some(c) = self.calls.get_mut(&call) {
            c.parties.map.insert(party, PartyState::AddInitiated);
        }
        self.push_out(bytes);
        Ok(())
    }

    /// Accepts the peer's ADD PARTY (P6 → P7): ADD PARTY ACKNOWLEDGE with `answer`'s
    /// IEs.
    pub fn add_party_ack(
        &mut self,
        call: CallId,
        party: PartyRef,
        answer: &CallAccept,
    ) -> Result<(), CallError> {
        let cref = self.received_party(call, party, "add_party_ack")?;
        let offered = self.calls.get(&call).and_then(|c| c.offered);
        let offered = offered.unwrap_or_else(crate::wire::qos::Qos::best_effort);
        let mut msg = Message::new(MessageType::AddPartyAck, cref).with(party.ie());
        answer.connect_ies(&mut msg, &offered, self.cfg.private_ie);
        let bytes = bytes::Bytes::from(msg.to_bytes()?);
        if let Some(c) = self.calls.get_mut(&call) {
            c.parties.map.insert(party, PartyState::Active);
        }
        self.push_out(bytes);
        Ok(())
    }

    /// Refuses the peer's ADD PARTY (P6 → P0): ADD PARTY REJECT with `cause`.
    pub fn add_party_reject(
        &mut self,
        call: CallId,
        party: PartyRef,
        cause: Cause,
    ) -> Result<(), CallError> {
        let cref = self.received_party(call, party, "add_party_reject")?;
        if let Some(c) = self.calls.get_mut(&call) {
            c.parties.map.remove(&party);
        }
        self.send(
            Message::new(MessageType::AddPartyReject, cref)
                .with_cause(cause)
                .with(party.ie()),
        );
        Ok(())
    }

    /// Drops a party of the call (P1/P6/P7 → P11): DROP PARTY with `cause`; the
    /// peer's DROP PARTY ACKNOWLEDGE ends it ([`CallEvent::PartyDropped`]). A party
    /// this side has not answered is refused instead (ADD PARTY REJECT, P0 at once).
    pub fn drop_party(
        &mut self,
        call: CallId,
        party: PartyRef,
        cause: Cause,
    ) -> Result<(), CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        let c = self.get(call)?;
        match c.parties.map.get(&party) {
            Some(PartyState::AddReceived) => return self.add_party_reject(call, party, cause),
            Some(PartyState::AddInitiated | PartyState::Active) => {}
            Some(PartyState::DropInitiated) => return Ok(()),
            None => return Err(wrong(call, c.state, "drop_party")),
        }
        let cref = c.call_ref();
        if let Some(c) = self.calls.get_mut(&call) {
            c.parties.map.insert(party, PartyState::DropInitiated);
            c.parties.dropping.insert(party, cause.clone());
        }
        self.send(
            Message::new(MessageType::DropParty, cref)
                .with_cause(cause)
                .with(party.ie()),
        );
        Ok(())
    }

    /// The call reference to answer a received party with, if it waits for an
    /// answer.
    fn received_party(
        &self,
        call: CallId,
        party: PartyRef,
        op: &'static str,
    ) -> Result<CallRef, CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        let c = self.get(call)?;
        if c.parties.map.get(&party) != Some(&PartyState::AddReceived) {
            return Err(wrong(call, c.state, op));
        }
        Ok(c.call_ref())
    }

    /// A party message in the active state (`on_call_message`).
    pub(super) fn on_party_message(
        &mut self,
        id: CallId,
        cref: CallRef,
        msg: &Message,
        errors: &[IeError],
    ) {
        let eref_id = IeId::EndpointRef.raw();
        let Some(eref) = msg
            .find::<EndpointRef>()
            .copied()
            .filter(|_| !errors.iter().any(|e| e.id.raw() == eref_id))
        else {
            // Q.2971 §9.2: no usable endpoint reference names no party; an ADD PARTY
            // is refused, anything else reported.
            self.stats.malformed += 1;
            let missing = msg.find::<EndpointRef>().is_none();
            let value = if missing {
                CauseValue::MandatoryIeMissing
            } else {
                CauseValue::InvalidIeContents
            };
            let cause = self.cause_diag(value, vec![eref_id]);
            if msg.kind == MessageType::AddParty {
                self.send(Message::new(MessageType::AddPartyReject, cref).with(cause));
            } else {
                self.status(cref, CallState::ACTIVE, cause);
            }
            return;
        };
        let party = PartyRef::received(eref);
        let state = self
            .calls
            .get(&id)
            .and_then(|c| c.parties.map.get(&party).copied());
        let their_cause = || {
            msg.cause_with_crankback().unwrap_or_else(|| {
                Cause::new(
                    crate::wire::q2931::Location::User,
                    CauseValue::NormalUnspecified,
                )
            })
        };
        match (msg.kind, state) {
            (MessageType::AddParty, None) if !party.ours && party.value != 0 => {
                let count = self.calls.get(&id).map_or(0, |c| c.parties.map.len());
                let params = CallParams::from_setup(msg);
                let refuse = match params {
                    _ if count >= MAX_PARTIES => Some(self.cause(CauseValue::TooManyAddParty)),
                    None => Some(self.cause_diag(
                        CauseValue::MandatoryIeMissing,
                        vec![IeId::CalledNumber.raw()],
                    )),
                    Some(_) => None,
                };
                if let Some(cause) = refuse {
                    self.stats.unexpected += 1;
                    self.send(
                        Message::new(MessageType::AddPartyReject, cref)
                            .with(cause)
                            .with(party.ie()),
                    );
                    return;
                }
                let Some(params) = params else { return };
                if let Some(c) = self.calls.get_mut(&id) {
                    c.parties.map.insert(party, PartyState::AddReceived);
                }
                self.events.push_back(CallEvent::PartyAddRequested {
                    call: id,
                    party,
                    params,
                });
            }
            (MessageType::AddParty, _) => {
                // A reference in use (or 0, the SETUP's, or one of ours).
                self.stats.unexpected += 1;
                let cause = self.cause_diag(CauseValue::InvalidIeContents, vec![eref_id]);
                self.send(
                    Message::new(MessageType::AddPartyReject, cref)
                        .with(cause)
                        .with(party.ie()),
                );
            }
            (MessageType::AddPartyAck, Some(PartyState::AddInitiated)) => {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.parties.map.insert(party, PartyState::Active);
                }
                self.events.push_back(CallEvent::PartyAdded {
                    call: id,
                    party,
                    params: CallAccept::from_connect(msg),
                });
            }
            (MessageType::AddPartyReject, Some(PartyState::AddInitiated)) => {
                self.forget_party(id, party);
                self.events.push_back(CallEvent::PartyRejected {
                    call: id,
                    party,
                    cause: their_cause(),
                });
            }
            (MessageType::DropParty, Some(_)) => {
                self.forget_party(id, party);
                self.send(Message::new(MessageType::DropPartyAck, cref).with(party.ie()));
                self.events.push_back(CallEvent::PartyDropped {
                    call: id,
                    party,
                    cause: their_cause(),
                    by_peer: true,
                });
            }
            (MessageType::DropParty, None) => {
                self.stats.unexpected += 1;
                let cause = self.cause(CauseValue::InvalidEndpointRef);
                self.send(
                    Message::new(MessageType::DropPartyAck, cref)
                        .with(cause)
                        .with(party.ie()),
                );
            }
            (MessageType::DropPartyAck, Some(PartyState::DropInitiated)) => {
                let cause = self
                    .calls
                    .get_mut(&id)
                    .and_then(|c| c.parties.dropping.remove(&party))
                    .unwrap_or_else(their_cause);
                self.forget_party(id, party);
                self.events.push_back(CallEvent::PartyDropped {
                    call: id,
                    party,
                    cause,
                    by_peer: false,
                });
            }
            // Answers for parties not waiting for them change nothing.
            _ => self.stats.unexpected += 1,
        }
    }

    fn forget_party(&mut self, id: CallId, party: PartyRef) {
        if let Some(c) = self.calls.get_mut(&id) {
            c.parties.map.remove(&party);
            c.parties.dropping.remove(&party);
        }
    }
}

/// Whether `kind` is a party message.
pub(super) fn is_party_message(kind: MessageType) -> bool {
    matches!(
        kind,
        MessageType::AddParty
            | MessageType::AddPartyAck
            | MessageType::AddPartyReject
            | MessageType::DropParty
            | MessageType::DropPartyAck
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sig::call::CallConfig;
    use crate::sig::testing::aesa;
    use crate::time::Instant;
    use crate::wire::q2931::{ConnectionId, Location, NatmParams};

    fn t0() -> Instant {
        Instant::ZERO
    }

    fn up() -> CallControl {
        let mut c = CallControl::new(CallConfig::default());
        c.link_up(t0());
        c
    }

    fn leaf(n: u8) -> CallParams {
        CallParams {
            dtl: None,
            called: aesa(n),
            calling: Some(aesa(1)),
            sap: None,
            qos: "cbr:pcr=2Mbps".parse().unwrap(),
            natm: NatmParams {
                data_endpoint: Some(
                    format!("127.0.0.1:{}", 40_000 + u16::from(n))
                        .parse()
                        .unwrap(),
                ),
                ..NatmParams::default()
            },
            conn_id: Some(ConnectionId::exclusive(0, 100 + u16::from(n))),
            multipoint: false,
        }
    }

    fn exchange(a: &mut CallControl, b: &mut CallControl) {
        loop {
            let mut moved = false;
            while let Some(m) = a.poll_message() {
                b.handle_message(t0(), &m);
                moved = true;
            }
            while let Some(m) = b.poll_message() {
                a.handle_message(t0(), &m);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    fn events(c: &mut CallControl) -> Vec<CallEvent> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn msgs(c: &mut CallControl) -> Vec<Message> {
        std::iter::from_fn(|| c.poll_message())
            .map(|b| Message::parse(&b).unwrap())
            .collect()
    }

    /// An active call from `a` (the root) to `b` (the first leaf, through a switch).
    fn active() -> (CallControl, CallControl, CallId, CallId) {
        let (mut a, mut b) = (up(), up());
        let ca = a.setup(t0(), leaf(2)).unwrap();
        exchange(&mut a, &mut b);
        let Some(CallEvent::Incoming { call: cb, .. }) = b.poll_event() else {
            panic!("SETUP arrives");
        };
        b.accept(t0(), cb, CallAccept::default()).unwrap();
        exchange(&mut a, &mut b);
        events(&mut a);
        events(&mut b);
        (a, b, ca, cb)
    }

    fn cause(v: u8) -> Cause {
        Cause::new(Location::User, CauseValue::from_raw(v))
    }

    #[test]
    fn add_party_ack_and_drop_walk_both_sides_through_the_party_states() {
        let (mut a, mut b, ca, cb) = active();
        a.add_party(ca, 1, &leaf(3)).unwrap();
        let mine = PartyRef {
            value: 1,
            ours: true,
        };
        assert_eq!(a.party_state(ca, mine), Some(PartyState::AddInitiated));
        exchange(&mut a, &mut b);
        let [CallEvent::PartyAddRequested {
            call,
            party,
            params,
        }] = &events(&mut b)[..]
        else {
            panic!("ADD PARTY arrives");
        };
        assert_eq!((*call, party.value, party.ours), (cb, 1, false));
        // The leaf's params travel as a SETUP's would.
        assert_eq!(params.called, aesa(3));
        assert_eq!(params.natm.data_endpoint, leaf(3).natm.data_endpoint);
        assert_eq!(b.party_state(cb, *party), Some(PartyState::AddReceived));
        let answer = CallAccept {
            conn_id: Some(ConnectionId::exclusive(0, 77)),
            ..CallAccept::default()
        };
        b.add_party_ack(cb, *party, &answer).unwrap();
        let theirs = *party;
        exchange(&mut a, &mut b);
        let [CallEvent::PartyAdded {
            call,
            party,
            params,
        }] = &events(&mut a)[..]
        else {
            panic!("ADD PARTY ACK arrives");
        };
        assert_eq!((*call, *party), (ca, mine));
        assert_eq!(params.conn_id.map(|c| c.vci), Some(77));
        assert_eq!(a.party_state(ca, mine), Some(PartyState::Active));
        assert_eq!(b.party_state(cb, theirs), Some(PartyState::Active));
        // The root drops it: DROP PARTY, acknowledged; the call stays.
        a.drop_party(ca, mine, cause(16)).unwrap();
        assert_eq!(a.party_state(ca, mine), Some(PartyState::DropInitiated));
        exchange(&mut a, &mut b);
        assert!(matches!(
            &events(&mut b)[..],
            [CallEvent::PartyDropped { party, cause, by_peer: true, .. }]
                if *party == theirs && cause.value.raw() == 16
        ));
        assert!(matches!(
            &events(&mut a)[..],
            [CallEvent::PartyDropped { party, by_peer: false, .. }] if *party == mine
        ));
        assert_eq!(a.party_state(ca, mine), None);
        assert_eq!(b.party_state(cb, theirs), None);
        assert_eq!(a.state(ca), Some(CallState::ACTIVE));
        assert_eq!(b.state(cb), Some(CallState::ACTIVE));
    }

    #[test]
    fn a_multipoint_setup_names_party_zero_which_either_side_can_drop() {
        let (mut a, mut b) = (up(), up());
        let mut p = leaf(2);
        p.multipoint = true;
        let ca = a.setup(t0(), p).unwrap();
        let [setup] = &msgs(&mut a)[..] else {
            panic!("one SETUP");
        };
        assert_eq!(setup.find::<EndpointRef>(), Some(&FIRST_PARTY));
        assert_eq!(
            setup
                .find::<crate::wire::q2931::BearerCapability>()
                .map(|b| b.user_plane),
            Some(crate::wire::q2931::UserPlane::PointToMultipoint)
        );
        b.handle_message(t0(), &setup.to_bytes().unwrap());
        let Some(CallEvent::Incoming { call: cb, params }) = b.poll_event() else {
            panic!("SETUP arrives");
        };
        assert!(params.multipoint);
        b.accept(t0(), cb, CallAccept::default()).unwrap();
        exchange(&mut a, &mut b);
        events(&mut a);
        events(&mut b);
        let (zero_a, zero_b) = (
            PartyRef {
                value: 0,
                ours: true,
            },
            PartyRef {
                value: 0,
                ours: false,
            },
        );
        assert_eq!(a.party_state(ca, zero_a), Some(PartyState::Active));
        assert_eq!(b.party_state(cb, zero_b), Some(PartyState::Active));
        // A second party, then the leaf's side drops the first: the call stays.
        a.add_party(ca, 1, &leaf(3)).unwrap();
        exchange(&mut a, &mut b);
        let [CallEvent::PartyAddRequested { party, .. }] = &events(&mut b)[..] else {
            panic!("ADD PARTY arrives");
        };
        b.add_party_ack(cb, *party, &CallAccept::default()).unwrap();
        exchange(&mut a, &mut b);
        events(&mut a);
        b.drop_party(cb, zero_b, cause(31)).unwrap();
        exchange(&mut a, &mut b);
        assert!(matches!(
            &events(&mut a)[..],
            [CallEvent::PartyDropped { party, by_peer: true, .. }] if *party == zero_a
        ));
        assert_eq!(a.party_state(ca, zero_a), None);
        assert_eq!(a.state(ca), Some(CallState::ACTIVE));
        // A point-to-point call has no party to drop.
        let (mut c, mut d, cc, _) = active();
        assert!(c.drop_party(cc, zero_a, cause(16)).is_err());
        exchange(&mut c, &mut d);
    }

    #[test]
    fn a_rejected_party_leaves_the_call_and_its_other_parties_alone() {
        let (mut a, mut b, ca, cb) = active();
        a.add_party(ca, 1, &leaf(3)).unwrap();
        a.add_party(ca, 2, &leaf(4)).unwrap();
        exchange(&mut a, &mut b);
        let parties: Vec<PartyRef> = events(&mut b)
            .into_iter()
            .filter_map(|e| match e {
                CallEvent::PartyAddRequested { party, .. } => Some(party),
                _ => None,
            })
            .collect();
        assert_eq!(parties.len(), 2);
        b.add_party_reject(cb, parties[0], cause(37)).unwrap();
        b.add_party_ack(cb, parties[1], &CallAccept::default())
            .unwrap();
        exchange(&mut a, &mut b);
        let evs = events(&mut a);
        assert!(matches!(
            &evs[..],
            [
                CallEvent::PartyRejected { party: p1, cause, .. },
                CallEvent::PartyAdded { party: p2, .. },
            ] if p1.value == 1 && cause.value.raw() == 37 && p2.value == 2
        ));
        // The peer drops the remaining party: acknowledged at once.
        b.drop_party(cb, parties[1], cause(31)).unwrap();
        exchange(&mut a, &mut b);
        assert!(matches!(
            &events(&mut a)[..],
            [CallEvent::PartyDropped { party, by_peer: true, .. }] if party.value == 2
        ));
        assert_eq!(a.state(ca), Some(CallState::ACTIVE));
    }

    #[test]
    fn bad_and_unknown_party_messages_change_nothing() {
        let (mut a, mut b, ca, cb) = active();
        // Not ours to answer, not known, not allowed.
        let ghost = PartyRef {
            value: 9,
            ours: false,
        };
        assert!(b.add_party_ack(cb, ghost, &CallAccept::default()).is_err());
        assert!(b.drop_party(cb, ghost, cause(16)).is_err());
        assert!(a.add_party(ca, 0, &leaf(3)).is_err());
        a.add_party(ca, 5, &leaf(3)).unwrap();
        assert!(a.add_party(ca, 5, &leaf(3)).is_err(), "reference in use");
        msgs(&mut a);
        // A DROP PARTY for an unknown reference is acknowledged with cause 89.
        let cref = b.call_ref(cb).unwrap();
        let drop = Message::new(MessageType::DropParty, a.call_ref(ca).unwrap())
            .with(cause(16))
            .with(EndpointRef {
                flag: false,
                value: 300,
            });
        b.handle_message(t0(), &drop.to_bytes().unwrap());
        let m = msgs(&mut b);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].kind, MessageType::DropPartyAck);
        assert_eq!(m[0].call_ref, cref);
        assert_eq!(m[0].cause().map(|c| c.value.raw()), Some(89));
        // An ADD PARTY without an endpoint reference is refused (cause 96).
        let mut add = Message::new(MessageType::AddParty, a.call_ref(ca).unwrap());
        leaf(3).setup_ies(&mut add, 0, true);
        b.handle_message(t0(), &add.to_bytes().unwrap());
        let m = msgs(&mut b);
        assert_eq!(m[0].kind, MessageType::AddPartyReject);
        assert_eq!(m[0].cause().map(|c| c.value.raw()), Some(96));
        // An ACK for a party never added is ignored.
        let ack =
            Message::new(MessageType::AddPartyAck, b.call_ref(cb).unwrap()).with(EndpointRef {
                flag: true,
                value: 77,
            });
        a.handle_message(t0(), &ack.to_bytes().unwrap());
        assert!(msgs(&mut a).is_empty());
        assert!(events(&mut a).is_empty());
        assert!(events(&mut b).is_empty());
        assert_eq!(a.state(ca), Some(CallState::ACTIVE));
        assert_eq!(b.state(cb), Some(CallState::ACTIVE));
    }

    #[test]
    fn parties_of_a_call_are_bounded() {
        let (mut a, mut b, ca, cb) = active();
        for i in 1..=MAX_PARTIES as u16 {
            a.add_party(ca, i, &leaf(3)).unwrap();
        }
        assert!(a.add_party(ca, 999, &leaf(3)).is_err());
        exchange(&mut a, &mut b);
        assert_eq!(events(&mut b).len(), MAX_PARTIES);
        // One past the bound from a peer that ignores it: refused with cause 92.
        let mut add =
            Message::new(MessageType::AddParty, a.call_ref(ca).unwrap()).with(EndpointRef {
                flag: false,
                value: 999,
            });
        leaf(3).setup_ies(&mut add, 0, true);
        b.handle_message(t0(), &add.to_bytes().unwrap());
        let m = msgs(&mut b);
        assert_eq!(m[0].kind, MessageType::AddPartyReject);
        assert_eq!(m[0].cause().map(|c| c.value.raw()), Some(92));
        assert!(events(&mut b).is_empty());
        // The release of the call takes every party with it.
        b.release(t0(), cb, cause(16)).unwrap();
        exchange(&mut a, &mut b);
        assert_eq!(
            a.party_state(
                ca,
                PartyRef {
                    value: 1,
                    ours: true
                }
            ),
            None
        );
    }
}
