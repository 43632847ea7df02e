//! Q.2931 / UNI 3.1 point-to-point call control, sans-IO, for either end of a call.
//!
//! [`CallControl`] runs above a message channel (SSCOP through SSCF-UNI, or any
//! assured in-order channel, specs.md §5.4) and knows nothing of it: it takes received
//! messages ([`CallControl::handle_message`]), the link state
//! ([`CallControl::link_up`], [`CallControl::link_down`]) and the time, and hands out
//! messages to send ([`CallControl::poll_message`]), deadlines and events.
//!
//! # States (Q.2931 §2.1; specs.md §4.4 numbering)
//! The user-side states U0–U12, which natm's peers use at both ends of a call (the
//! brief calls them N0–N12; the numbers are the same):
//!
//! | state | caller | callee |
//! |---|---|---|
//! | 0 null | — | — |
//! | 1 call initiated | SETUP sent, T303 | |
//! | 3 outgoing call proceeding | CALL PROCEEDING received, T310 | |
//! | 6 call present | | SETUP received ([`CallEvent::Incoming`]) |
//! | 9 incoming call proceeding | | [`CallControl::proceeding`] sent CALL PROCEEDING |
//! | 8 connect request | | [`CallControl::accept`] sent CONNECT, T313 |
//! | 10 active | CONNECT received, CONNECT ACK sent | CONNECT ACK received |
//! | 11 release request | RELEASE sent, T308 | RELEASE sent, T308 |
//! | 12 release indication | RELEASE received: answered at once with RELEASE COMPLETE, so never held | |
//!
//! Timers (Q.2931 §9 / UNI 3.1 Annex; specs.md §4.4): T303 4 s (SETUP sent once more,
//! then the call fails with cause 102 "303" and a RELEASE COMPLETE goes out), T310
//! 10 s, T313 4 s (both: RELEASE with cause 102), T308 30 s (RELEASE sent once more,
//! then the call reference is freed), T309 10 s (SAAL down, active calls wait for it),
//! T322 4 s (STATUS ENQUIRY, three tries, then RELEASE with cause 41).
//!
//! Departure: the called side also guards an incoming call that its application
//! leaves unanswered (`CallConfig::t_answer`, 18 s = 2 × T303 + T310), clearing it
//! with RELEASE COMPLETE cause 18 "no user responding" — the network side's T303/T310
//! duty (Q.2931 §5.2.5), which falls to the callee because natm peers signal user to
//! user. Without it, a SETUP repeated on T303 that crosses the callee's RELEASE
//! COMPLETE would leave a call present forever at the callee (found by the property
//! test of random interleavings).
//!
//! # Signalling link loss (decision; Q.2931 §5.6.9)
//! On [`CallControl::link_down`] every call that is not active is cleared at once
//! ([`ClearedBy::Link`], cause 41 temporary failure) and queued messages are dropped.
//! Active calls keep their VCs — the data path does not use the signalling link — and
//! T309 starts: if the link is back before T309 expires, each active call sends STATUS
//! ENQUIRY to check the peer still has it; otherwise the calls are cleared with cause
//! 27 (destination out of order) and the daemon tears their VCs down.
//!
//! A STATUS saying the peer has no such call (state 0) clears the call at once, as
//! Q.2931 §5.6.11 says; other state mismatches reported by STATUS are not acted on
//! (the peer's timers or ours resolve them).
//!
//! A resynchronised link ([`CallControl::link_reset`]) may have lost messages: calls
//! being set up are cleared with RELEASE cause 41, active ones send STATUS ENQUIRY.
//!
//! # Modification of an active call (Q.2963.1)
//! An active call's traffic descriptor may change while the call stays up:
//! [`CallControl::modify`] sends MODIFY REQUEST with the new ATM traffic descriptor
//! and starts T360 (30 s); the peer's call control reports
//! [`CallEvent::ModifyRequested`] and its daemon answers with
//! [`CallControl::modify_accept`] (MODIFY ACKNOWLEDGE) once its admission control has
//! reserved the new rate, or [`CallControl::modify_reject`] (MODIFY REJECT with the
//! cause, the old descriptor stays). The requester then sees [`CallEvent::Modified`]
//! or [`CallEvent::ModifyRefused`]. The call stays in state 10 throughout; the
//! modification is a sub-state of it ([`ModifyState`]): "modify request" at the side
//! that asked, "modify received" at the side that must answer.
//!
//! - One modification at a time per call: [`CallControl::modify`] while one is
//!   pending is refused ([`CallError::ModifyPending`]); a MODIFY REQUEST that arrives
//!   while one is pending (ours or theirs) gets MODIFY REJECT cause 101 (message not
//!   compatible with call state). Two that cross are thus both refused: each side
//!   keeps the old descriptor and may ask again (decision; Q.2963.1 leaves a collision
//!   to the users).
//! - A MODIFY REQUEST without a usable traffic descriptor gets MODIFY REJECT cause 96
//!   or 100 naming IE 0x59 (Q.2931 §5.6.7 applied to the request's mandatory IE).
//! - A peer without Q.2963.1 answers STATUS cause 97 (message type non-existent) or
//!   101 naming MODIFY REQUEST: the pending request is refused with that cause.
//! - T360 expiry: the peer's answer is lost and the two ends may now disagree on the
//!   reservation, so the call is released with cause 102 ("360"), as Q.2963.1 does.
//! - The Broadband report type IE (a request for CONNECTION AVAILABLE) is not sent;
//!   CONNECTION AVAILABLE is known to the codec only.
//!
//! # Errors (Q.2931 §5.6)
//! Undecodable headers are ignored; framing errors answer with the cause of
//! [`Q2931Error::cause`] (STATUS for a known call, RELEASE COMPLETE for a SETUP). A
//! message for an unknown call reference gets RELEASE COMPLETE cause 81 (§5.6.3.2),
//! STATUS ENQUIRY gets STATUS with state 0, RELEASE COMPLETE is ignored. A message that
//! does not fit the state gets STATUS cause 101 (§5.6.4), an unknown type cause 97.
//! Missing or bad mandatory IEs: SETUP is refused with RELEASE COMPLETE cause 96/100
//! (§5.6.7); other IEs follow their action indicator or, without one, are dropped and
//! reported with STATUS cause 100 (bad contents) or 99 (unknown IE) (§5.6.8).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::time::Instant;
use crate::wire::q2931::{
    CallRef, CallState, Cause, CauseValue, ConnectionId, IeAction, IeBody, IeError, IeId, Location,
    Message, MessageType, Packet, Q2931Error, RestartIndicator, TrafficDescriptor, HEADER_LEN,
};

mod params;
mod parties;

pub use params::{
    traffic_descriptor, CallAccept, CallParams, Sap, SapError, SapTextError, DEFAULT_AAL5_SDU,
};
pub use parties::{PartyRef, PartyState, MAX_PARTIES};

/// Call control timers and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallConfig {
    /// T303: SETUP → first answer (4 s; sent twice).
    pub t303: Duration,
    /// T310: CALL PROCEEDING → CONNECT or RELEASE (10 s).
    pub t310: Duration,
    /// T313: CONNECT → CONNECT ACKNOWLEDGE (4 s).
    pub t313: Duration,
    /// T308: RELEASE → RELEASE COMPLETE (30 s; sent twice).
    pub t308: Duration,
    /// T309: how long active calls survive a signalling link loss (10 s).
    pub t309: Duration,
    /// T322: STATUS ENQUIRY → STATUS (4 s; sent three times).
    pub t322: Duration,
    /// T360 (Q.2963.1): MODIFY REQUEST → MODIFY ACKNOWLEDGE or REJECT (30 s); on
    /// expiry the call is released with cause 102.
    pub t360: Duration,
    /// How long an incoming call may wait for `proceeding`/`accept`/`reject` before it
    /// is cleared with cause 18 (no user responding): 18 s = 2 × T303 + T310, the
    /// longest the caller can still be waiting (module docs).
    pub t_answer: Duration,
    /// Most calls at once (bounded memory); more SETUPs get cause 47.
    pub max_calls: usize,
    /// The location written into causes (user).
    pub location: Location,
    /// Cell rate that a QoS rate of `max` stands for (OC-3 payload, 353 207 cells/s).
    pub link_cell_rate: u32,
    /// Most messages waiting in `poll_message`; more are dropped and counted.
    pub max_out_queue: usize,
    /// Whether SETUP and CONNECT carry natm's private IE (transport parameters, data
    /// endpoint, QoS text). Off towards a peer that is not natm (a switch port to
    /// Linux's atmsigd): the messages are then plain UNI 3.1, which such a peer may
    /// refuse whole when it meets an IE it does not know, whatever its action bits.
    pub private_ie: bool,
}

impl Default for CallConfig {
    fn default() -> Self {
        CallConfig {
            t303: Duration::from_secs(4),
            t310: Duration::from_secs(10),
            t313: Duration::from_secs(4),
            t308: Duration::from_secs(30),
            t309: Duration::from_secs(10),
            t322: Duration::from_secs(4),
            t360: Duration::from_secs(30),
            t_answer: Duration::from_secs(18),
            max_calls: 1024,
            location: Location::User,
            link_cell_rate: 353_207,
            max_out_queue: 8192,
            private_ie: true,
        }
    }
}

/// An opaque call identifier, unique within one [`CallControl`] (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(u64);

impl CallId {
    /// The number (for logs and IPC).
    pub fn value(self) -> u64 {
        self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call#{}", self.0)
    }
}

/// Who ended a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearedBy {
    /// This side's application (release, reject).
    Local,
    /// The peer (RELEASE, RELEASE COMPLETE).
    Remote,
    /// A timer expired (T303, T308, T309, T310, T313, T322).
    Timer,
    /// The signalling link went down while the call was not active.
    Link,
}

/// What call control tells the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEvent {
    /// A SETUP arrived: answer with proceeding, accept or reject. Nothing exists yet
    /// but the offer, so the listener decides before any VC is made (seed 004: the
    /// manager presents the connect request and holds authority over it).
    Incoming {
        /// The new call.
        call: CallId,
        /// What the caller asks for.
        params: CallParams,
    },
    /// The peer sent CALL PROCEEDING.
    Proceeding {
        /// The call.
        call: CallId,
    },
    /// The peer accepted (CONNECT): the call is active at the caller.
    Connected {
        /// The call.
        call: CallId,
        /// What the called side granted.
        params: CallAccept,
    },
    /// The caller acknowledged our CONNECT: the call is active at the callee.
    Established {
        /// The call.
        call: CallId,
    },
    /// The peer asks to change the active call's traffic descriptor (MODIFY
    /// REQUEST, Q.2963.1): answer with [`CallControl::modify_accept`] or
    /// [`CallControl::modify_reject`].
    ModifyRequested {
        /// The call.
        call: CallId,
        /// The traffic descriptor asked for.
        traffic: TrafficDescriptor,
    },
    /// The peer acknowledged our MODIFY REQUEST: `traffic` is now in force.
    Modified {
        /// The call.
        call: CallId,
        /// The traffic descriptor now in force (the one [`CallControl::modify`] sent).
        traffic: TrafficDescriptor,
    },
    /// The peer refused our MODIFY REQUEST (MODIFY REJECT, or STATUS from a peer
    /// without Q.2963.1): the old traffic descriptor stays.
    ModifyRefused {
        /// The call.
        call: CallId,
        /// The peer's cause.
        cause: Cause,
    },
    /// The peer asks to add a party to this point-to-multipoint call (ADD PARTY,
    /// Q.2971): answer with [`CallControl::add_party_ack`] or
    /// [`CallControl::add_party_reject`].
    PartyAddRequested {
        /// The call.
        call: CallId,
        /// The party.
        party: PartyRef,
        /// The leaf asked for, as a SETUP would ask for it.
        params: CallParams,
    },
    /// The peer accepted our ADD PARTY (ADD PARTY ACKNOWLEDGE): the party is active.
    PartyAdded {
        /// The call.
        call: CallId,
        /// The party.
        party: PartyRef,
        /// What the leaf granted.
        params: CallAccept,
    },
    /// The peer refused our ADD PARTY (ADD PARTY REJECT): the party is gone.
    PartyRejected {
        /// The call.
        call: CallId,
        /// The party.
        party: PartyRef,
        /// The peer's cause.
        cause: Cause,
    },
    /// A party is gone: the peer dropped it (DROP PARTY, acknowledged here), or
    /// acknowledged our DROP PARTY.
    PartyDropped {
        /// The call.
        call: CallId,
        /// The party.
        party: PartyRef,
        /// The DROP PARTY's cause.
        cause: Cause,
        /// Whether the peer dropped it.
        by_peer: bool,
    },
    /// The call is over and its id is dead; sent exactly once per call.
    Released {
        /// The call.
        call: CallId,
        /// Why.
        cause: Cause,
        /// Who ended it.
        by: ClearedBy,
    },
}

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallError {
    /// `max_calls` calls exist.
    #[error("too many calls ({limit}); release some or raise max_calls")]
    TooManyCalls {
        /// The limit.
        limit: usize,
    },
    /// The id names no call (it was released, or never existed).
    #[error("{0} does not exist (released?)")]
    UnknownCall(CallId),
    /// The operation does not fit the call's state.
    #[error("{call} is in state {state}, where {op} is not possible")]
    WrongState {
        /// The call.
        call: CallId,
        /// Its state.
        state: CallState,
        /// The operation.
        op: &'static str,
    },
    /// The signalling link is down: wait for it to come up.
    #[error("signalling link is down; retry when it is up")]
    LinkDown,
    /// [`CallControl::adopt`]: the call reference is in use here, or not a valid
    /// value.
    #[error("call reference {0} is in use on this link or not a valid value")]
    CallRefInUse(u32),
    /// [`CallControl::modify`]: a modification of the call is already pending.
    #[error("{0} already has a modification pending; wait for its answer")]
    ModifyPending(CallId),
    /// The message could not be built from the parameters given.
    #[error("cannot encode the message: {0}")]
    Encode(#[from] Q2931Error),
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Messages received.
    pub messages_in: u64,
    /// Messages handed out.
    pub messages_out: u64,
    /// Messages that could not be decoded (ignored or answered with a cause).
    pub malformed: u64,
    /// Messages for unknown calls or out of state.
    pub unexpected: u64,
    /// SETUPs refused for lack of room.
    pub refused_full: u64,
    /// Messages dropped because the output queue was full.
    pub out_dropped: u64,
    /// Calls that reached the active state.
    pub calls_active: u64,
    /// STATUS ENQUIRYs for unknown call references left unanswered while
    /// [`CallControl::hold_unknown_enquiries`] held them.
    pub enquiries_held: u64,
    /// Active calls taken over with [`CallControl::adopt`].
    pub adopted: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// The called side's answer guard (`t_answer`).
    Answer,
    T303,
    T310,
    T313,
    T308,
    /// Q.2963.1: MODIFY REQUEST sent, answer awaited.
    T360,
}

/// Where an active call stands in a Q.2963.1 modification (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModifyState {
    /// None pending.
    #[default]
    Idle,
    /// This side sent MODIFY REQUEST for this traffic descriptor (T360 runs).
    Requested(TrafficDescriptor),
    /// The peer asked for this traffic descriptor; this side has not answered.
    Received(TrafficDescriptor),
}

#[derive(Debug)]
struct Call {
    /// The call reference value and whether this side allocated it.
    cref: u32,
    ours: bool,
    state: CallState,
    timer: Option<(Timer, Instant)>,
    /// Expiries of the running timer so far.
    expiries: u32,
    /// The SETUP, kept for the T303 retransmission.
    setup: Option<Bytes>,
    /// What the caller offered (callee side), for the CONNECT's AAL IE.
    offered: Option<crate::wire::qos::Qos>,
    /// The RELEASE's cause, kept for T308 and the final event.
    release_cause: Option<Cause>,
    cleared_by: ClearedBy,
    t309: Option<Instant>,
    t322: Option<(Instant, u32)>,
    /// Q.2963.1 modification sub-state (state 10 only).
    modify: ModifyState,
    /// Q.2971 parties (`parties`); a point-to-multipoint call's first party (the
    /// SETUP's, endpoint reference 0) is among them once the call is active.
    parties: parties::Parties,
    /// The SETUP said point-to-multipoint.
    multipoint: bool,
}

impl Call {
    fn call_ref(&self) -> CallRef {
        CallRef {
            value: self.cref,
            flag: !self.ours,
        }
    }
}

/// Q.2931 call control for all calls over one signalling link.
#[derive(Debug)]
pub struct CallControl {
    cfg: CallConfig,
    link_up: bool,
    calls: BTreeMap<CallId, Call>,
    /// (call reference value, allocated by this side) → call.
    by_cref: HashMap<(u32, bool), CallId>,
    next_id: u64,
    next_cref: u32,
    out: VecDeque<Bytes>,
    events: VecDeque<CallEvent>,
    stats: CallStats,
    /// Until when a STATUS ENQUIRY for an unknown call reference goes unanswered
    /// ([`CallControl::hold_unknown_enquiries`]).
    hold_unknown: Option<Instant>,
}

/// What the IE error procedures (Q.2931 §5.6.8) decide about a message.
#[derive(Debug, Default)]
struct Verdict {
    discard: bool,
    clear: Option<Cause>,
    report: Option<Cause>,
}

impl CallControl {
    /// Call control with no calls and the link down.
    pub fn new(cfg: CallConfig) -> CallControl {
        CallControl {
            cfg,
            link_up: false,
            calls: BTreeMap::new(),
            by_cref: HashMap::new(),
            next_id: 1,
            next_cref: 1,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: CallStats::default(),
            hold_unknown: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CallConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }

    /// Whether the signalling link is up.
    pub fn is_link_up(&self) -> bool {
        self.link_up
    }

    /// Calls that exist (any state but null).
    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// The state of a call (Q.2931 numbering), if it exists.
    pub fn state(&self, call: CallId) -> Option<CallState> {
        self.calls.get(&call).map(|c| c.state)
    }

    /// The call reference a call uses on the wire (flag as this side sends it).
    pub fn call_ref(&self, call: CallId) -> Option<CallRef> {
        self.calls.get(&call).map(Call::call_ref)
    }

    /// Every call and its state.
    pub fn calls(&self) -> impl Iterator<Item = (CallId, CallState)> + '_ {
        self.calls.iter().map(|(id, c)| (*id, c.state))
    }

    // ----- application operations -------------------------------------------------

    /// Starts an outgoing call: SETUP, T303 (Q.2931 §5.1.1).
    pub fn setup(&mut self, now: Instant, params: CallParams) -> Result<CallId, CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        if self.calls.len() >= self.cfg.max_calls {
            return Err(CallError::TooManyCalls {
                limit: self.cfg.max_calls,
            });
        }
        let cref = self.alloc_cref();
        let mut msg = Message::new(MessageType::Setup, CallRef::new(cref));
        if params.multipoint {
            // Q.2971 §9.1: a point-to-multipoint SETUP names its first party.
            msg.push(parties::FIRST_PARTY);
        }
        params.setup_ies(&mut msg, self.cfg.link_cell_rate, self.cfg.private_ie);
        let bytes = Bytes::from(msg.to_bytes()?);
        let id = self.insert(cref, true, CallState::CALL_INITIATED);
        if let Some(c) = self.calls.get_mut(&id) {
            c.multipoint = params.multipoint;
            c.setup = Some(bytes.clone());
            c.timer = Some((Timer::T303, now + self.cfg.t303));
        }
        self.push_out(bytes);
        Ok(id)
    }

    /// Answers an incoming call with CALL PROCEEDING (state 6 → 9).
    pub fn proceeding(&mut self, call: CallId) -> Result<(), CallError> {
        self.proceeding_with(call, None)
    }

    /// CALL PROCEEDING carrying the VPCI/VCI the network assigns: UNI 3.1 §5.1.2 puts
    /// the connection identifier in the network's first answer to a user's SETUP that
    /// named none (what a switch tells a standard UNI user such as Linux's atmsigd).
    pub fn proceeding_with(
        &mut self,
        call: CallId,
        conn_id: Option<ConnectionId>,
    ) -> Result<(), CallError> {
        let c = self.get(call)?;
        if c.state != CallState::CALL_PRESENT {
            return Err(wrong(call, c.state, "proceeding"));
        }
        let cref = c.call_ref();
        if let Some(c) = self.calls.get_mut(&call) {
            c.state = CallState::INCOMING_CALL_PROCEEDING;
        }
        let mut msg = Message::new(MessageType::CallProceeding, cref);
        if let Some(c) = conn_id {
            msg.push(c);
        }
        self.send(msg);
        Ok(())
    }

    /// Accepts an incoming call with CONNECT and starts T313 (state 6/9 → 8).
    pub fn accept(
        &mut self,
        now: Instant,
        call: CallId,
        answer: CallAccept,
    ) -> Result<(), CallError> {
        let c = self.get(call)?;
        if !matches!(
            c.state,
            CallState::CALL_PRESENT | CallState::INCOMING_CALL_PROCEEDING
        ) {
            return Err(wrong(call, c.state, "accept"));
        }
        let offered = c.offered.unwrap_or_else(crate::wire::qos::Qos::best_effort);
        let mut msg = Message::new(MessageType::Connect, c.call_ref());
        answer.connect_ies(&mut msg, &offered, self.cfg.private_ie);
        let bytes = Bytes::from(msg.to_bytes()?);
        let t313 = now + self.cfg.t313;
        if let Some(c) = self.calls.get_mut(&call) {
            c.state = CallState::CONNECT_REQUEST;
            c.timer = Some((Timer::T313, t313));
            c.expiries = 0;
        }
        self.push_out(bytes);
        Ok(())
    }

    /// Refuses an incoming call with RELEASE COMPLETE and `cause` (state 6/9 → 0).
    pub fn reject(&mut self, call: CallId, cause: Cause) -> Result<(), CallError> {
        let c = self.get(call)?;
        if !matches!(
            c.state,
            CallState::CALL_PRESENT | CallState::INCOMING_CALL_PROCEEDING
        ) {
            return Err(wrong(call, c.state, "reject"));
        }
        let cref = c.call_ref();
        self.send(Message::new(MessageType::ReleaseComplete, cref).with_cause(cause.clone()));
        self.clear(call, cause, ClearedBy::Local);
        Ok(())
    }

    /// Clears a call with RELEASE and `cause`, T308 (Q.2931 §5.4.3). An incoming call
    /// not yet accepted is rejected instead; a call already releasing is left alone.
    pub fn release(&mut self, now: Instant, call: CallId, cause: Cause) -> Result<(), CallError> {
        let c = self.get(call)?;
        match c.state {
            CallState::CALL_PRESENT | CallState::INCOMING_CALL_PROCEEDING => {
                self.reject(call, cause)
            }
            CallState::RELEASE_REQUEST => Ok(()),
            _ => {
                self.start_release(now, call, cause, ClearedBy::Local);
                Ok(())
            }
        }
    }

    /// The call's Q.2963.1 modification sub-state.
    pub fn modify_state(&self, call: CallId) -> Option<&ModifyState> {
        self.calls.get(&call).map(|c| &c.modify)
    }

    /// Asks the peer to change an active call's traffic descriptor: MODIFY REQUEST,
    /// T360 (Q.2963.1). The answer comes as [`CallEvent::Modified`] or
    /// [`CallEvent::ModifyRefused`].
    pub fn modify(
        &mut self,
        now: Instant,
        call: CallId,
        traffic: TrafficDescriptor,
    ) -> Result<(), CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        let c = self.get(call)?;
        if c.state != CallState::ACTIVE {
            return Err(wrong(call, c.state, "modify"));
        }
        if c.modify != ModifyState::Idle {
            return Err(CallError::ModifyPending(call));
        }
        let msg = Message::new(MessageType::ModifyRequest, c.call_ref()).with(traffic.clone());
        let bytes = Bytes::from(msg.to_bytes()?);
        let t360 = now + self.cfg.t360;
        if let Some(c) = self.calls.get_mut(&call) {
            c.modify = ModifyState::Requested(traffic);
            c.timer = Some((Timer::T360, t360));
            c.expiries = 0;
        }
        self.push_out(bytes);
        Ok(())
    }

    /// Grants the peer's MODIFY REQUEST: MODIFY ACKNOWLEDGE. The caller has reserved
    /// the new traffic descriptor (returned) before calling this.
    pub fn modify_accept(&mut self, call: CallId) -> Result<TrafficDescriptor, CallError> {
        let (cref, traffic) = self.take_received(call, "modify_accept")?;
        self.send(Message::new(MessageType::ModifyAck, cref));
        Ok(traffic)
    }

    /// Refuses the peer's MODIFY REQUEST: MODIFY REJECT with `cause`; the old traffic
    /// descriptor stays.
    pub fn modify_reject(&mut self, call: CallId, cause: Cause) -> Result<(), CallError> {
        let (cref, _) = self.take_received(call, "modify_reject")?;
        self.send(Message::new(MessageType::ModifyReject, cref).with(cause));
        Ok(())
    }

    fn take_received(
        &mut self,
        call: CallId,
        op: &'static str,
    ) -> Result<(CallRef, TrafficDescriptor), CallError> {
        if !self.link_up {
            return Err(CallError::LinkDown);
        }
        let c = self.get(call)?;
        let ModifyState::Received(traffic) = &c.modify else {
            return Err(wrong(call, c.state, op));
        };
        let out = (c.call_ref(), traffic.clone());
        if let Some(c) = self.calls.get_mut(&call) {
            c.modify = ModifyState::Idle;
        }
        Ok(out)
    }

    /// Asks the peer for its view of a call (STATUS ENQUIRY, T322; Q.2931 §5.6.11).
    pub fn status_enquiry(&mut self, now: Instant, call: CallId) -> Result<(), CallError> {
        let c = self.get(call)?;
        let cref = c.call_ref();
        if let Some(c) = self.calls.get_mut(&call) {
            c.t322 = Some((now + self.cfg.t322, 1));
        }
        self.send(Message::new(MessageType::StatusEnquiry, cref));
        Ok(())
    }

    /// Takes over an active call that another instance of this side's call control
    /// held (a restarted daemon rebuilding its calls; docs/sigd.md "sigd
    /// restart"): call reference `cref`, allocated by this side if `ours`. The call
    /// is checked with the peer as a call that survived a link loss is: STATUS
    /// ENQUIRY at once if the link is up, else when it comes up — T309 runs
    /// meanwhile, for `wait` (a link whose calls are cleared at once when it drops,
    /// T309 = 0, still gives a call adopted before it first comes up that long). A
    /// STATUS with state 0 clears it ([`CallEvent::Released`]).
    ///
    /// Refused if the reference is in use or not a valid value, or at `max_calls`.
    pub fn adopt(
        &mut self,
        now: Instant,
        cref: u32,
        ours: bool,
        wait: Duration,
    ) -> Result<CallId, CallError> {
        if cref == 0 || cref >= CallRef::MAX || self.by_cref.contains_key(&(cref, ours)) {
            return Err(CallError::CallRefInUse(cref));
        }
        if self.calls.len() >= self.cfg.max_calls {
            return Err(CallError::TooManyCalls {
                limit: self.cfg.max_calls,
            });
        }
        let id = self.insert(cref, ours, CallState::ACTIVE);
        self.stats.adopted += 1;
        if self.link_up {
            let _ = self.status_enquiry(now, id);
        } else if let Some(c) = self.calls.get_mut(&id) {
            c.t309 = Some(now + wait);
        }
        Ok(id)
    }

    /// Leaves STATUS ENQUIRYs for call references this side does not know
    /// unanswered until `until`, instead of answering state 0 at once (Q.2931
    /// §5.6.11). A restarted daemon does this while its applications reclaim their
    /// calls: the peer repeats its enquiry on T322 (three tries, 4 s apart), and an
    /// answer of state 0 before the reclaim would clear a call both ends still use.
    pub fn hold_unknown_enquiries(&mut self, until: Instant) {
        self.hold_unknown = Some(until);
    }

    // ----- link -------------------------------------------------------------------

    /// The signalling link is up (AAL-ESTABLISH). Active calls that survived a link
    /// loss stop T309 and check their state with STATUS ENQUIRY.
    pub fn link_up(&mut self, now: Instant) {
        if self.link_up {
            return;
        }
        self.link_up = true;
        let waiting: Vec<(CallId, CallState)> = self
            .calls
            .iter()
            .filter(|(_, c)| c.t309.is_some())
            .map(|(id, c)| (*id, c.state))
            .collect();
        for (id, state) in waiting {
            if let Some(c) = self.calls.get_mut(&id) {
                c.t309 = None;
            }
            // A call released meanwhile has its RELEASE queued and T308 running.
            if state == CallState::ACTIVE {
                let _ = self.status_enquiry(now, id);
            }
        }
    }

    /// The signalling link was reset while up (SSCOP resynchronisation, which SSCF-UNI
    /// reports as a new AAL-ESTABLISH): messages may have been lost. As Q.931 §5.8.8
    /// "data link reset" has it, calls being set up are cleared with RELEASE cause 41,
    /// calls being cleared are left to T308, active calls check their state with
    /// STATUS ENQUIRY.
    pub fn link_reset(&mut self, now: Instant) {
        if !self.link_up {
            self.link_up(now);
            return;
        }
        self.out.clear();
        let ids: Vec<(CallId, CallState)> = self.calls().collect();
        for (id, state) in ids {
            match state {
                CallState::ACTIVE => {
                    let _ = self.status_enquiry(now, id);
                }
                CallState::RELEASE_REQUEST => {}
                _ => {
                    let cause = self.cause(CauseValue::TemporaryFailure);
                    self.start_release(now, id, cause, ClearedBy::Link);
                }
            }
        }
    }

    /// The signalling link is down (AAL-RELEASE): see the module docs.
    pub fn link_down(&mut self, now: Instant) {
        if !self.link_up {
            return;
        }
        self.link_up = false;
        self.out.clear();
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let active = self.calls.get(&id).map(|c| c.state) == Some(CallState::ACTIVE);
            if active {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.t309 = Some(now + self.cfg.t309);
                    c.t322 = None;
                }
            } else {
                let cause = Cause::new(self.cfg.location, CauseValue::TemporaryFailure);
                self.clear(id, cause, ClearedBy::Link);
            }
        }
    }

    // ----- sans-IO plumbing -------------------------------------------------------

    /// The next message to send (one SSCOP SD / SSCF-UNI AAL-DATA).
    pub fn poll_message(&mut self) -> Option<Bytes> {
        let m = self.out.pop_front();
        if m.is_some() {
            self.stats.messages_out += 1;
        }
        m
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CallEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.calls
            .values()
            .flat_map(|c| [c.timer.map(|t| t.1), c.t309, c.t322.map(|t| t.0)])
            .flatten()
            .min()
    }

    /// Runs the timers that expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, c)| {
                c.timer.is_some_and(|t| t.1 <= now)
                    || c.t309.is_some_and(|t| t <= now)
                    || c.t322.is_some_and(|t| t.0 <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.expire(now, id);
        }
    }

    /// Takes one received message (the payload of an SSCOP SD).
    pub fn handle_message(&mut self, now: Instant, bytes: &[u8]) {
        self.stats.messages_in += 1;
        let (msg, errors) = match Message::parse_lenient(bytes) {
            Ok(x) => x,
            Err(e) => {
                self.stats.malformed += 1;
                self.on_undecodable(bytes, &e);
                return;
            }
        };
        if msg.call_ref.is_global() {
            self.on_global(msg);
            return;
        }
        // flag = 1: sent to the side that allocated the value, i.e. to us.
        let key = (msg.call_ref.value, msg.call_ref.flag);
        match self.by_cref.get(&key).copied() {
            Some(id) => self.on_call_message(now, id, msg, &errors),
            None => self.on_unknown_call(now, msg, &errors),
        }
    }

    // ----- internals --------------------------------------------------------------

    fn get(&self, call: CallId) -> Result<&Call, CallError> {
        self.calls.get(&call).ok_or(CallError::UnknownCall(call))
    }

    fn alloc_cref(&mut self) -> u32 {
        // At most max_calls values are in use, so this ends within max_calls + 1 steps.
        loop {
            let v = self.next_cref;
            self.next_cref = if v >= CallRef::MAX - 1 { 1 } else { v + 1 };
            if !self.by_cref.contains_key(&(v, true)) {
                return v;
            }
        }
    }

    fn insert(&mut self, cref: u32, ours: bool, state: CallState) -> CallId {
        let id = CallId(self.next_id);
        self.next_id += 1;
        self.by_cref.insert((cref, ours), id);
        self.calls.insert(
            id,
            Call {
                cref,
                ours,
                state,
                timer: None,
                expiries: 0,
                setup: None,
                offered: None,
                release_cause: None,
                cleared_by: ClearedBy::Remote,
                t309: None,
                t322: None,
                modify: ModifyState::Idle,
                parties: parties::Parties::default(),
                multipoint: false,
            },
        );
        id
    }

    /// Removes a call and reports it released.
    fn clear(&mut self, id: CallId, cause: Cause, by: ClearedBy) {
        if let Some(c) = self.calls.remove(&id) {
            self.by_cref.remove(&(c.cref, c.ours));
            self.events.push_back(CallEvent::Released {
                call: id,
                cause,
                by,
            });
        }
    }

    fn push_out(&mut self, bytes: Bytes) {
        if self.out.len() >= self.cfg.max_out_queue {
            self.stats.out_dropped += 1;
        } else {
            self.out.push_back(bytes);
        }
    }

    /// Queues a message built here (cannot fail to encode: every IE is well-formed).
    fn send(&mut self, msg: Message) {
        match msg.to_bytes() {
            Ok(b) => self.push_out(Bytes::from(b)),
            Err(_) => self.stats.out_dropped += 1,
        }
    }

    fn cause(&self, value: CauseValue) -> Cause {
        Cause::new(self.cfg.location, value)
    }

    fn cause_diag(&self, value: CauseValue, diagnostics: Vec<u8>) -> Cause {
        Cause {
            location: self.cfg.location,
            value,
            diagnostics,
            crankback: None,
        }
    }

    fn status(&mut self, cref: CallRef, state: CallState, cause: Cause) {
        self.send(
            Message::new(MessageType::Status, cref)
                .with(cause)
                .with(state),
        );
    }

    fn start_release(&mut self, now: Instant, id: CallId, cause: Cause, by: ClearedBy) {
        let t308 = now + self.cfg.t308;
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        c.state = CallState::RELEASE_REQUEST;
        // A pending modification ends with the call (T308 replaces T360).
        c.modify = ModifyState::Idle;
        c.timer = Some((Timer::T308, t308));
        c.expiries = 0;
        c.t322 = None;
        c.release_cause = Some(cause.clone());
        c.cleared_by = by;
        let cref = c.call_ref();
        self.send(Message::new(MessageType::Release, cref).with_cause(cause));
    }

    fn expire(&mut self, now: Instant, id: CallId) {
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        let loc = self.cfg.location;
        if c.t309.is_some_and(|t| t <= now) {
            // T309: the link did not come back in time (module docs).
            let cause = Cause::new(loc, CauseValue::DestinationOutOfOrder);
            self.clear(id, cause, ClearedBy::Timer);
            return;
        }
        if let Some((_, n)) = c.t322.filter(|t| t.0 <= now) {
            if n < 3 {
                c.t322 = Some((now + self.cfg.t322, n + 1));
                let cref = c.call_ref();
                self.send(Message::new(MessageType::StatusEnquiry, cref));
            } else {
                c.t322 = None;
                let cause = Cause::new(loc, CauseValue::TemporaryFailure);
                self.start_release(now, id, cause, ClearedBy::Timer);
                return;
            }
        }
        let Some(c) = self.calls.get_mut(&id) else {
            return;
        };
        let Some((timer, _)) = c.timer.filter(|t| t.1 <= now) else {
            return;
        };
        c.expiries += 1;
        match timer {
            Timer::T303 if c.expiries < 2 => {
                // Q.2931 §5.1.1.1: SETUP once more.
                c.timer = Some((Timer::T303, now + self.cfg.t303));
                if let Some(s) = c.setup.clone() {
                    self.push_out(s);
                }
            }
            Timer::T303 => {
                let cref = c.call_ref();
                let cause = Cause::timer_expiry(loc, 303);
                self.send(
                    Message::new(MessageType::ReleaseComplete, cref).with_cause(cause.clone()),
                );
                self.clear(id, cause, ClearedBy::Timer);
            }
            Timer::T310 => {
                self.start_release(now, id, Cause::timer_expiry(loc, 310), ClearedBy::Timer)
            }
            Timer::T313 => {
                self.start_release(now, id, Cause::timer_expiry(loc, 313), ClearedBy::Timer)
            }
            Timer::T308 if c.expiries < 2 => {
                // Q.2931 §5.4.3: RELEASE once more.
                c.timer = Some((Timer::T308, now + self.cfg.t308));
                let cref = c.call_ref();
                let cause = c
                    .release_cause
                    .clone()
                    .unwrap_or_else(|| Cause::new(loc, CauseValue::NormalCallClearing));
                self.send(Message::new(MessageType::Release, cref).with_cause(cause));
            }
            Timer::T308 => {
                self.clear(id, Cause::timer_expiry(loc, 308), ClearedBy::Timer);
            }
            Timer::T360 => {
                // Q.2963.1: the answer is lost; the ends may disagree on the
                // reservation, so the call goes.
                c.modify = ModifyState::Idle;
                self.start_release(now, id, Cause::timer_expiry(loc, 360), ClearedBy::Timer)
            }
            Timer::Answer => {
                let cref = c.call_ref();
                let cause = Cause::new(loc, CauseValue::NoUserResponding);
                self.send(
                    Message::new(MessageType::ReleaseComplete, cref).with_cause(cause.clone()),
                );
                self.clear(id, cause, ClearedBy::Timer);
            }
        }
    }

    /// A message whose header or framing is bad (Q.2931 §5.6.1–5.6.2).
    fn on_undecodable(&mut self, bytes: &[u8], e: &Q2931Error) {
        let Some(cause) = e.cause() else {
            return; // Not ours, or no call reference to answer on: ignore.
        };
        if bytes.len() < HEADER_LEN {
            return;
        }
        let p = Packet::new_unchecked(bytes);
        if p.protocol_discriminator() != 0x09 || p.call_ref_len() != 3 {
            return;
        }
        let cr = p.call_ref();
        if cr.is_global() {
            return;
        }
        match self.by_cref.get(&(cr.value, cr.flag)).copied() {
            Some(id) => {
                if let Some(c) = self.calls.get(&id) {
                    let (cref, state) = (c.call_ref(), c.state);
                    self.status(cref, state, cause);
                }
            }
            None if p.message_type() == MessageType::Setup && !cr.flag => {
                self.send(Message::new(MessageType::ReleaseComplete, cr.reply()).with_cause(cause));
            }
            None => {}
        }
    }

    /// RESTART on the global call reference: clear every call, acknowledge.
    fn on_global(&mut self, msg: Message) {
        if msg.kind != MessageType::Restart {
            self.stats.unexpected += 1;
            return;
        }
        let Some(ri) = msg.find::<RestartIndicator>().copied() else {
            self.stats.unexpected += 1;
            return;
        };
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let cause = self.cause(CauseValue::TemporaryFailure);
            self.clear(id, cause, ClearedBy::Remote);
        }
        self.send(Message::new(MessageType::RestartAck, msg.call_ref.reply()).with(ri));
    }

    /// Q.2931 §5.6.8: what the IE errors and unknown IEs of a message ask for.
    fn verdict(&self, msg: &Message, errors: &[IeError]) -> Verdict {
        let mut v = Verdict::default();
        let bad = errors.iter().map(|e| {
            (
                e.id.raw(),
                e.flags.unwrap_or_default(),
                CauseValue::InvalidIeContents,
            )
        });
        let unknown = msg.ies.iter().filter_map(|ie| match &ie.body {
            IeBody::Unknown { id, .. } if matches!(IeId::from_raw(*id), IeId::Other(_)) => {
                Some((*id, ie.flags, CauseValue::IeNonExistent))
            }
            _ => None,
        });
        for (id, flags, value) in bad.chain(unknown) {
            let cause = self.cause_diag(value, vec![id]);
            if !flags.explicit {
                v.report.get_or_insert(cause);
                continue;
            }
            match flags.action {
                IeAction::ClearCall => {
                    v.clear.get_or_insert(cause);
                }
                IeAction::DiscardIe => {}
                IeAction::DiscardMessage => v.discard = true,
                IeAction::DiscardMessageReport => {
                    v.discard = true;
                    v.report.get_or_insert(cause);
                }
                _ => {
                    v.report.get_or_insert(cause);
                }
            }
        }
        v
    }

    fn on_unknown_call(&mut self, now: Instant, msg: Message, errors: &[IeError]) {
        let reply = msg.call_ref.reply();
        match msg.kind {
            MessageType::Setup if !msg.call_ref.flag => self.on_setup(now, msg, errors),
            MessageType::ReleaseComplete => {
                self.stats.unexpected += 1;
                if let Some(id) = self.misread_setup_ref(msg.call_ref) {
                    let cause = msg
                        .cause()
                        .cloned()
                        .unwrap_or_else(|| self.cause(CauseValue::ProtocolError));
                    self.clear(id, cause, ClearedBy::Remote);
                }
            }
            MessageType::Setup => self.stats.unexpected += 1,
            MessageType::StatusEnquiry if self.hold_unknown.is_some_and(|t| now < t) => {
                // Its call may still be reclaimed (`hold_unknown_enquiries`).
                self.stats.enquiries_held += 1;
            }
            MessageType::StatusEnquiry => {
                self.stats.unexpected += 1;
                let cause = self.cause(CauseValue::ResponseToStatusEnquiry);
                self.status(reply, CallState::NULL, cause);
            }
            MessageType::Status if msg.find::<CallState>() == Some(&CallState::NULL) => {
                self.stats.unexpected += 1;
            }
            _ => {
                // §5.6.3.2: unknown call reference → RELEASE COMPLETE cause 81.
                self.stats.unexpected += 1;
                let cause = self.cause(CauseValue::InvalidCallRef);
                self.send(Message::new(MessageType::ReleaseComplete, reply).with_cause(cause));
            }
        }
    }

    /// The call whose SETUP a peer refused under a misread call reference. Linux's
    /// atmsigd (atm-tools 2.5.1) answers a SETUP it cannot parse with RELEASE COMPLETE
    /// whose 3-octet call reference is the SETUP's shifted by one octet: its last two
    /// octets followed by the message type (0x05), e.g. `80 01 05` for `00 00 01`.
    /// Q.2931 §5.6.3.2 says to ignore a RELEASE COMPLETE for an unknown call, which
    /// left the caller waiting two T303 expiries for a refusal already sent; a call
    /// still waiting for its first answer whose reference matches is cleared instead.
    /// A departure for one known peer's defect: the match is exact and only for a
    /// call in state 1 (call initiated), so no other call can be hit.
    fn misread_setup_ref(&self, cr: CallRef) -> Option<CallId> {
        if !cr.flag {
            return None;
        }
        self.calls
            .iter()
            .filter(|(_, c)| c.ours && c.state == CallState::CALL_INITIATED)
            .find(|(_, c)| ((c.cref << 8) | 0x05) & CallRef::MAX == cr.value)
            .map(|(id, _)| *id)
    }

    fn on_setup(&mut self, now: Instant, msg: Message, errors: &[IeError]) {
        let reply = msg.call_ref.reply();
        // §5.6.7: mandatory IEs of SETUP (UNI 3.1 §5.3.1.7).
        let mandatory = [IeId::Traffic, IeId::Bearer, IeId::CalledNumber, IeId::Qos];
        let bad: Vec<u8> = mandatory
            .iter()
            .map(|i| i.raw())
            .filter(|i| errors.iter().any(|e| e.id.raw() == *i))
            .collect();
        let missing: Vec<u8> = mandatory
            .iter()
            .map(|i| i.raw())
            .filter(|i| !bad.contains(i) && !msg.ies.iter().any(|ie| ie.id() == *i))
            .collect();
        let refuse = if !missing.is_empty() {
            Some(self.cause_diag(CauseValue::MandatoryIeMissing, missing))
        } else if !bad.is_empty() {
            Some(self.cause_diag(CauseValue::InvalidIeContents, bad))
        } else {
            let v = self.verdict(&msg, errors);
            if v.discard {
                self.stats.malformed += 1;
                return;
            }
            v.clear
        };
        let params = match refuse {
            Some(_) => None,
            None => CallParams::from_setup(&msg),
        };
        let Some(params) = params else {
            self.stats.malformed += 1;
            let cause = refuse.unwrap_or_else(|| {
                self.cause_diag(CauseValue::InvalidIeContents, vec![IeId::Traffic.raw()])
            });
            self.send(Message::new(MessageType::ReleaseComplete, reply).with_cause(cause));
            return;
        };
        if self.calls.len() >= self.cfg.max_calls {
            self.stats.refused_full += 1;
            let cause = self.cause(CauseValue::ResourcesUnavailable);
            self.send(Message::new(MessageType::ReleaseComplete, reply).with_cause(cause));
            return;
        }
        let id = self.insert(msg.call_ref.value, false, CallState::CALL_PRESENT);
        let guard = now + self.cfg.t_answer;
        if let Some(c) = self.calls.get_mut(&id) {
            c.offered = Some(params.qos);
            c.multipoint = params.multipoint;
            c.timer = Some((Timer::Answer, guard));
        }
        self.events
            .push_back(CallEvent::Incoming { call: id, params });
    }

    fn on_call_message(&mut self, now: Instant, id: CallId, msg: Message, errors: &[IeError]) {
        let Some(c) = self.calls.get(&id) else {
            return;
        };
        let (state, cref) = (c.state, c.call_ref());
        let verdict = self.verdict(&msg, errors);
        if verdict.discard {
            if let Some(cause) = verdict.report {
                self.status(cref, state, cause);
            }
            return;
        }
        if let Some(cause) = verdict.clear.clone() {
            if !matches!(
                msg.kind,
                MessageType::Release | MessageType::ReleaseComplete
            ) {
                self.start_release(now, id, cause, ClearedBy::Local);
                return;
            }
        }
        let their_cause = || {
            msg.cause_with_crankback()
                .unwrap_or_else(|| Cause::new(Location::User, CauseValue::NormalUnspecified))
        };
        match msg.kind {
            MessageType::StatusEnquiry => {
                let cause = self.cause(CauseValue::ResponseToStatusEnquiry);
                self.status(cref, state, cause);
                return;
            }
            MessageType::Status => {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.t322 = None;
                }
                self.on_status_for_modify(id, &msg);
                // §5.6.11: the peer has no such call → clear ours without a message.
                if msg.find::<CallState>() == Some(&CallState::NULL) {
                    let cause = msg
                        .cause()
                        .cloned()
                        .unwrap_or_else(|| self.cause(CauseValue::MessageIncompatibleWithState));
                    self.clear(id, cause, ClearedBy::Remote);
                }
                return;
            }
            MessageType::Release => {
                let by = self.calls.get(&id).map(|c| c.cleared_by);
                if state == CallState::RELEASE_REQUEST {
                    // §5.4.5 clearing collision: both sent RELEASE; done, no answer.
                    let cause = self
                        .calls
                        .get(&id)
                        .and_then(|c| c.release_cause.clone())
                        .unwrap_or_else(their_cause);
                    self.clear(id, cause, by.unwrap_or(ClearedBy::Local));
                } else {
                    let mut rc = Message::new(MessageType::ReleaseComplete, cref);
                    if msg.cause().is_none() {
                        // §5.6.7.1: RELEASE without its cause is answered with cause 96.
                        rc.push(
                            self.cause_diag(
                                CauseValue::MandatoryIeMissing,
                                vec![IeId::Cause.raw()],
                            ),
                        );
                    }
                    self.send(rc);
                    self.clear(id, their_cause(), ClearedBy::Remote);
                }
                return;
            }
            MessageType::ReleaseComplete => {
                let c = self.calls.get(&id);
                match c.map(|c| (c.cleared_by, c.release_cause.clone())) {
                    Some((by, Some(cause))) if state == CallState::RELEASE_REQUEST => {
                        self.clear(id, cause, by);
                    }
                    _ => self.clear(id, their_cause(), ClearedBy::Remote),
                }
                return;
            }
            _ => {}
        }
        let ok = match (msg.kind, state) {
            (MessageType::CallProceeding, CallState::CALL_INITIATED) => {
                let t310 = now + self.cfg.t310;
                if let Some(c) = self.calls.get_mut(&id) {
                    c.state = CallState::OUTGOING_CALL_PROCEEDING;
                    c.timer = Some((Timer::T310, t310));
                    c.expiries = 0;
                    c.setup = None;
                }
                self.events.push_back(CallEvent::Proceeding { call: id });
                true
            }
            (
                MessageType::Connect,
                CallState::CALL_INITIATED | CallState::OUTGOING_CALL_PROCEEDING,
            ) => {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.state = CallState::ACTIVE;
                    c.timer = None;
                    c.setup = None;
                    c.first_party_active();
                }
                self.stats.calls_active += 1;
                self.send(Message::new(MessageType::ConnectAck, cref));
                self.events.push_back(CallEvent::Connected {
                    call: id,
                    params: CallAccept::from_connect(&msg),
                });
                true
            }
            (MessageType::ConnectAck, CallState::CONNECT_REQUEST) => {
                if let Some(c) = self.calls.get_mut(&id) {
                    c.state = CallState::ACTIVE;
                    c.timer = None;
                    c.first_party_active();
                }
                self.stats.calls_active += 1;
                self.events.push_back(CallEvent::Established { call: id });
                true
            }
            (kind, CallState::ACTIVE) if parties::is_party_message(kind) => {
                self.on_party_message(id, cref, &msg, errors);
                true
            }
            (MessageType::ModifyRequest, CallState::ACTIVE) => {
                self.on_modify_request(id, cref, &msg, errors);
                true
            }
            (MessageType::ModifyAck | MessageType::ModifyReject, CallState::ACTIVE)
                if matches!(
                    self.calls.get(&id).map(|c| &c.modify),
                    Some(ModifyState::Requested(_))
                ) =>
            {
                let traffic = self.finish_request(id);
                let event = if msg.kind == MessageType::ModifyAck {
                    CallEvent::Modified { call: id, traffic }
                } else {
                    CallEvent::ModifyRefused {
                        call: id,
                        cause: their_cause(),
                    }
                };
                self.events.push_back(event);
                true
            }
            // A repeated SETUP (our answer is on its way) and the optional
            // progress messages of UNI 3.1 are ignored.
            (MessageType::Setup, _) => true,
            (
                MessageType::Alerting | MessageType::Notify,
                CallState::CALL_INITIATED | CallState::OUTGOING_CALL_PROCEEDING,
            ) => true,
            (MessageType::Other(_), _) => {
                self.stats.unexpected += 1;
                let cause = self.cause(CauseValue::MessageTypeNonExistent);
                self.status(cref, state, cause);
                return;
            }
            _ => false,
        };
        if !ok {
            // §5.6.4: message not compatible with the call state.
            self.stats.unexpected += 1;
            let cause = self.cause_diag(
                CauseValue::MessageIncompatibleWithState,
                vec![msg.kind.raw()],
            );
            self.status(cref, state, cause);
            return;
        }
        if let Some(cause) = verdict.report {
            let state = self.calls.get(&id).map_or(CallState::NULL, |c| c.state);
            self.status(cref, state, cause);
        }
    }
}

impl CallControl {
    /// A MODIFY REQUEST in state 10 (Q.2963.1; module docs).
    fn on_modify_request(&mut self, id: CallId, cref: CallRef, msg: &Message, errors: &[IeError]) {
        let traffic_id = IeId::Traffic.raw();
        let refuse = if errors.iter().any(|e| e.id.raw() == traffic_id) {
            Some(self.cause_diag(CauseValue::InvalidIeContents, vec![traffic_id]))
        } else if msg.find::<TrafficDescriptor>().is_none() {
            Some(self.cause_diag(CauseValue::MandatoryIeMissing, vec![traffic_id]))
        } else if self
            .calls
            .get(&id)
            .is_some_and(|c| c.modify != ModifyState::Idle)
        {
            Some(self.cause_diag(
                CauseValue::MessageIncompatibleWithState,
                vec![MessageType::ModifyRequest.raw()],
            ))
        } else {
            None
        };
        if let Some(cause) = refuse {
            self.stats.unexpected += 1;
            self.send(Message::new(MessageType::ModifyReject, cref).with(cause));
            return;
        }
        let Some(traffic) = msg.find::<TrafficDescriptor>().cloned() else {
            return;
        };
        if let Some(c) = self.calls.get_mut(&id) {
            c.modify = ModifyState::Received(traffic.clone());
        }
        self.events
            .push_back(CallEvent::ModifyRequested { call: id, traffic });
    }

    /// Ends this side's pending request (T360 stops); its traffic descriptor.
    fn finish_request(&mut self, id: CallId) -> TrafficDescriptor {
        let Some(c) = self.calls.get_mut(&id) else {
            return TrafficDescriptor::default();
        };
        if matches!(c.timer, Some((Timer::T360, _))) {
            c.timer = None;
        }
        match std::mem::take(&mut c.modify) {
            ModifyState::Requested(t) => t,
            other => {
                c.modify = other;
                TrafficDescriptor::default()
            }
        }
    }

    /// A STATUS saying the peer does not know MODIFY REQUEST (cause 97, or 101
    /// naming it) refuses our pending request with that cause.
    fn on_status_for_modify(&mut self, id: CallId, msg: &Message) {
        let pending = matches!(
            self.calls.get(&id).map(|c| &c.modify),
            Some(ModifyState::Requested(_))
        );
        let Some(cause) = msg.cause().filter(|_| pending) else {
            return;
        };
        let unknown = match cause.value {
            CauseValue::MessageTypeNonExistent => true,
            CauseValue::MessageIncompatibleWithState => {
                cause.diagnostics.first() == Some(&MessageType::ModifyRequest.raw())
            }
            _ => false,
        };
        if unknown {
            let cause = cause.clone();
            self.finish_request(id);
            self.events
                .push_back(CallEvent::ModifyRefused { call: id, cause });
        }
    }
}

fn wrong(call: CallId, state: CallState, op: &'static str) -> CallError {
    CallError::WrongState { call, state, op }
}

#[cfg(test)]
mod tests;
