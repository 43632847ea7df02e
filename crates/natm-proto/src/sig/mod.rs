//! The signalling core: SSCOP and Q.2931 call control as sans-IO state machines
//! (seed 000 §4: the signalling entity; seed 004 §3–7; specs.md §4–5).
//!
//! - [`sscop::Sscop`]: Q.2110 assured data transfer on VPI 0/VCI 5.
//! - [`call::CallControl`]: Q.2931 / UNI 3.1 point-to-point calls over any assured,
//!   in-order message channel.
//! - [`Saal`]: the two composed as the daemon drives them, one per peer — SSCF-UNI
//!   (Q.2130) in between adds no header, so a Q.2931 message is an SD's payload
//!   (specs.md §5.1) and SSCOP's establish/release indications become
//!   `link_up`/`link_down` (specs.md §5.4's `SignallingLink` idea).
//!
//! seed 000 §4 splits the signalling entity into "signaling support" (the daemon:
//! IPC, crash cleanup, resources) and the "signaling protocol" component, so that
//! "SPANS ... could be replaced with Q.2931 without affecting" the rest: this module
//! is that protocol component, and `src/sigd` the support around it.
//!
//! Nothing here owns a socket, a thread or a clock: callers hand in frames and the
//! time, and take out frames, deadlines and events (the quinn-proto call order of
//! `transport::psb`).

use std::time::Duration;

use bytes::Bytes;

use crate::time::Instant;
use crate::wire::q2931::{Cause, ConnectionId};

pub mod call;
#[cfg(feature = "daemon")]
pub mod noise;
pub mod party;
#[cfg(feature = "daemon")]
pub mod peer;
pub mod sscop;
#[cfg(test)]
pub(crate) mod testing;
pub mod vci;

pub use call::{
    CallAccept, CallConfig, CallControl, CallError, CallEvent, CallId, CallParams, ClearedBy,
    ModifyState, PartyRef, PartyState, Sap, SapTextError,
};
pub use sscop::{ReleaseReason, Sscop, SscopConfig, SscopError, SscopEvent, SscopStats};

/// Configuration of one signalling link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaalConfig {
    /// SSCOP timers and limits.
    pub sscop: SscopConfig,
    /// Call control timers and limits.
    pub calls: CallConfig,
    /// After the link is lost, how long an end that called [`Saal::start`] waits
    /// before it tries to establish it again (SSCF-UNI leaves this to the layer
    /// management; 1 s).
    pub reestablish_after: Duration,
}

impl Default for SaalConfig {
    fn default() -> Self {
        SaalConfig {
            sscop: SscopConfig::default(),
            calls: CallConfig::default(),
            reestablish_after: Duration::from_secs(1),
        }
    }
}

impl SaalConfig {
    /// Timer_NO_RESPONSE on the link between a host's sigd and its switch (both
    /// ends): 2 s, not a trunk's 400 ms. The link shares the host's port with the
    /// data it carries, so a host whose CPU is taken for a moment (a loaded machine)
    /// or whose port is flooded by its own transfer loses several POLLs in a row, and
    /// at 400 ms a loaded CI run lost the link and, with T309 = 0, every call on it
    /// (cause 27; docs/decisions/0032-host-link-timer.md). A dead switch is still
    /// noticed within ~2 s; trunks keep 400 ms, which routing round a dead switch
    /// needs.
    pub const HOST_LINK_NO_RESPONSE: Duration = Duration::from_secs(2);

    /// Timers for a link into an ATM network (a host's sigd and its switch, or two
    /// switches): a lost peer is noticed within Timer_IDLE + Timer_NO_RESPONSE
    /// (0.5 s) instead of Q.2110's 22 s, and its calls are cleared at once (T309 = 0:
    /// the data path crossed the peer that is gone), so every end of a call through
    /// a dead switch sees a RELEASE within a second (issue 13). The POLLs this costs
    /// are ten small PDUs a second per idle link. A host's link to its switch waits
    /// [`Self::HOST_LINK_NO_RESPONSE`] instead.
    pub fn network() -> SaalConfig {
        let mut s = SaalConfig::default();
        s.sscop.timer_cc = Duration::from_millis(200);
        s.sscop.cc_backoff = true;
        s.sscop.timer_poll = Duration::from_millis(100);
        s.sscop.timer_keepalive = Duration::from_millis(100);
        s.sscop.timer_idle = Duration::from_millis(100);
        s.sscop.timer_no_response = Duration::from_millis(400);
        s.calls.t309 = Duration::ZERO;
        s.reestablish_after = Duration::from_millis(200);
        s
    }
}

/// What a signalling link tells the daemon.
// Events are few (one per call step); boxing the large call variant would cost an
// allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigEvent {
    /// The SSCOP connection is established: calls can be made.
    LinkUp,
    /// The SSCOP connection is gone; `failure` if the peer stopped answering.
    LinkDown {
        /// Why, as SSCOP saw it (`None` for a link failure).
        reason: Option<ReleaseReason>,
        /// Timer_NO_RESPONSE expired.
        failure: bool,
    },
    /// A call event.
    Call(CallEvent),
}

/// The signalling AAL of one peer with call control on top: the object the daemon
/// drives per peer (frames are SSCOP PDUs, one per AAL5 SDU on VPI 0/VCI 5).
#[derive(Debug)]
pub struct Saal {
    sscop: Sscop,
    calls: CallControl,
    /// Whether this end keeps the link up (establishes and re-establishes).
    active: bool,
    reestablish_after: Duration,
    reestablish_at: Option<Instant>,
    events: std::collections::VecDeque<SigEvent>,
    /// Messages SSCOP refused (buffer full); they are kept and retried.
    pending: std::collections::VecDeque<Bytes>,
}

impl Saal {
    /// A link that is down and waits for the peer's BGN until [`Saal::start`].
    pub fn new(cfg: SaalConfig) -> Saal {
        Saal {
            sscop: Sscop::new(cfg.sscop),
            calls: CallControl::new(cfg.calls),
            active: false,
            reestablish_after: cfg.reestablish_after,
            reestablish_at: None,
            events: Default::default(),
            pending: Default::default(),
        }
    }

    /// Establishes the link now and again whenever it is lost.
    pub fn start(&mut self, now: Instant) {
        self.active = true;
        self.sscop.establish(now);
        self.pump(now);
    }

    /// The layer below the link is gone (see [`Sscop::lower_layer_failed`]): the
    /// link is lost now, its calls handled as on any link failure, and an active end
    /// re-establishes it as usual.
    pub fn lower_layer_failed(&mut self, now: Instant) {
        self.sscop.lower_layer_failed();
        self.pump(now);
    }

    /// Releases the link (END) and stops re-establishing it. Calls that are not
    /// active are cleared; active ones wait T309.
    pub fn stop(&mut self, now: Instant) {
        self.active = false;
        self.reestablish_at = None;
        self.sscop.release(now, &[]);
        self.pump(now);
    }

    /// Resynchronises the link (SSCOP RS, Q.2110 §7.4): both ends drop what is in
    /// flight, and call control on both sides resets as [`CallControl::link_reset`]
    /// says. A maintenance action; nothing in the core calls it.
    pub fn resync(&mut self, now: Instant) {
        self.sscop.resync(now);
        self.pump(now);
    }

    /// The SSCOP connection.
    pub fn sscop(&self) -> &Sscop {
        &self.sscop
    }

    /// Call control (read access: states, counters).
    pub fn calls(&self) -> &CallControl {
        &self.calls
    }

    /// Whether calls can be made.
    pub fn is_up(&self) -> bool {
        self.sscop.is_established()
    }

    /// Takes one received SSCOP PDU (AAL5 SDU from VPI 0/VCI 5).
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        self.sscop.handle_pdu(now, frame);
        self.pump(now);
    }

    /// The next SSCOP PDU to send.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.sscop.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<SigEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline of SSCOP, call control and re-establishment.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.sscop.poll_timeout(),
            self.calls.poll_timeout(),
            self.reestablish_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the timers that expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sscop.handle_timeout(now);
        self.pump(now);
        self.calls.handle_timeout(now);
        if self.reestablish_at.is_some_and(|t| t <= now) {
            self.reestablish_at = None;
            if self.active && self.sscop.is_idle() {
                self.sscop.establish(now);
            }
        }
        self.pump(now);
    }

    /// Starts a call (see [`CallControl::setup`]).
    pub fn setup(&mut self, now: Instant, params: CallParams) -> Result<CallId, CallError> {
        let r = self.calls.setup(now, params);
        self.pump(now);
        r
    }

    /// Answers CALL PROCEEDING (see [`CallControl::proceeding`]).
    pub fn proceeding(&mut self, now: Instant, call: CallId) -> Result<(), CallError> {
        self.proceeding_with(now, call, None)
    }

    /// Answers CALL PROCEEDING with a connection identifier (see
    /// [`CallControl::proceeding_with`]).
    pub fn proceeding_with(
        &mut self,
        now: Instant,
        call: CallId,
        conn_id: Option<ConnectionId>,
    ) -> Result<(), CallError> {
        let r = self.calls.proceeding_with(call, conn_id);
        self.pump(now);
        r
    }

    /// Accepts a call (see [`CallControl::accept`]).
    pub fn accept(
        &mut self,
        now: Instant,
        call: CallId,
        answer: CallAccept,
    ) -> Result<(), CallError> {
        let r = self.calls.accept(now, call, answer);
        self.pump(now);
        r
    }

    /// Rejects a call (see [`CallControl::reject`]).
    pub fn reject(&mut self, now: Instant, call: CallId, cause: Cause) -> Result<(), CallError> {
        let r = self.calls.reject(call, cause);
        self.pump(now);
        r
    }

    /// Asks to change an active call's traffic descriptor (see
    /// [`CallControl::modify`]).
    pub fn modify(
        &mut self,
        now: Instant,
        call: CallId,
        traffic: crate::wire::q2931::TrafficDescriptor,
    ) -> Result<(), CallError> {
        let r = self.calls.modify(now, call, traffic);
        self.pump(now);
        r
    }

    /// Grants the peer's modification (see [`CallControl::modify_accept`]).
    pub fn modify_accept(
        &mut self,
        now: Instant,
        call: CallId,
    ) -> Result<crate::wire::q2931::TrafficDescriptor, CallError> {
        let r = self.calls.modify_accept(call);
        self.pump(now);
        r
    }

    /// Refuses the peer's modification (see [`CallControl::modify_reject`]).
    pub fn modify_reject(
        &mut self,
        now: Instant,
        call: CallId,
        cause: Cause,
    ) -> Result<(), CallError> {
        let r = self.calls.modify_reject(call, cause);
        self.pump(now);
        r
    }

    /// Adds a party to an active point-to-multipoint call (see
    /// [`CallControl::add_party`]).
    pub fn add_party(
        &mut self,
        now: Instant,
        call: CallId,
        eref: u16,
        params: &CallParams,
    ) -> Result<(), CallError> {
        let r = self.calls.add_party(call, eref, params);
        self.pump(now);
        r
    }

    /// Accepts the peer's ADD PARTY (see [`CallControl::add_party_ack`]).
    pub fn add_party_ack(
        &mut self,
        now: Instant,
        call: CallId,
        party: PartyRef,
        answer: &CallAccept,
    ) -> Result<(), CallError> {
        let r = self.calls.add_party_ack(call, party, answer);
        self.pump(now);
        r
    }

    /// Refuses the peer's ADD PARTY (see [`CallControl::add_party_reject`]).
    pub fn add_party_reject(
        &mut self,
        now: Instant,
        call: CallId,
        party: PartyRef,
        cause: Cause,
    ) -> Result<(), CallError> {
        let r = self.calls.add_party_reject(call, party, cause);
        self.pump(now);
        r
    }

    /// Drops a party of a call (see [`CallControl::drop_party`]).
    pub fn drop_party(
        &mut self,
        now: Instant,
        call: CallId,
        party: PartyRef,
        cause: Cause,
    ) -> Result<(), CallError> {
        let r = self.calls.drop_party(call, party, cause);
        self.pump(now);
        r
    }

    /// Releases a call (see [`CallControl::release`]).
    pub fn release(&mut self, now: Instant, call: CallId, cause: Cause) -> Result<(), CallError> {
        let r = self.calls.release(now, call, cause);
        self.pump(now);
        r
    }

    /// Takes over an active call (see [`CallControl::adopt`]).
    pub fn adopt(
        &mut self,
        now: Instant,
        cref: u32,
        ours: bool,
        wait: Duration,
    ) -> Result<CallId, CallError> {
        let r = self.calls.adopt(now, cref, ours, wait);
        self.pump(now);
        r
    }

    /// Holds STATUS ENQUIRYs for unknown calls (see
    /// [`CallControl::hold_unknown_enquiries`]).
    pub fn hold_unknown_enquiries(&mut self, until: Instant) {
        self.calls.hold_unknown_enquiries(until);
    }

    /// Seeds SSCOP's connection sequence value (see [`Sscop::seed_sq`]).
    pub fn seed_sq(&mut self, sq: u8) {
        self.sscop.seed_sq(sq);
    }

    /// Sends STATUS ENQUIRY for a call (see [`CallControl::status_enquiry`]).
    pub fn status_enquiry(&mut self, now: Instant, call: CallId) -> Result<(), CallError> {
        let r = self.calls.status_enquiry(now, call);
        self.pump(now);
        r
    }

    /// Moves SSCOP events into call control and call control's messages into SSCOP.
    fn pump(&mut self, now: Instant) {
        while let Some(ev) = self.sscop.poll_event() {
            match ev {
                SscopEvent::Established => {
                    self.reestablish_at = None;
                    if !self.calls.is_link_up() {
                        self.events.push_back(SigEvent::LinkUp);
                    }
                    self.calls.link_up(now);
                }
                SscopEvent::Resynchronised => {
                    // SSCOP dropped its buffers: whatever was in flight is lost.
                    self.pending.clear();
                    if !self.calls.is_link_up() {
                        self.events.push_back(SigEvent::LinkUp);
                    }
                    self.calls.link_reset(now);
                }
                SscopEvent::Data(msg) => self.calls.handle_message(now, &msg),
                SscopEvent::Released { reason, .. } => self.lost(now, Some(reason), false),
                SscopEvent::LinkFailure => self.lost(now, None, true),
            }
        }
        while let Some(ev) = self.calls.poll_event() {
            self.events.push_back(SigEvent::Call(ev));
        }
        if self.sscop.is_established() {
            while let Some(m) = self
                .pending
                .pop_front()
                .or_else(|| self.calls.poll_message())
            {
                if let Err(SscopError::BufferFull { .. }) = self.sscop.send(now, m.clone()) {
                    self.pending.push_front(m);
                    break;
                }
            }
        }
    }

    fn lost(&mut self, now: Instant, reason: Option<ReleaseReason>, failure: bool) {
        self.pending.clear();
        if self.calls.is_link_up() {
            self.events
                .push_back(SigEvent::LinkDown { reason, failure });
        }
        self.calls.link_down(now);
        if self.active && self.sscop.is_idle() {
            self.reestablish_at = Some(now + self.reestablish_after);
        }
        while let Some(ev) = self.calls.poll_event() {
            self.events.push_back(SigEvent::Call(ev));
        }
    }
}

#[cfg(test)]
mod tests;
