//! The SSCOP state machine (ITU-T Q.2110; specs.md §5.3), sans-IO.
//!
//! One [`Sscop`] is one end of the assured signalling connection on VPI 0/VCI 5. It
//! takes received PDUs ([`Sscop::handle_pdu`]) and the time, and hands out PDUs to send
//! ([`Sscop::poll_transmit`], one PDU = one AAL5 SDU), the next deadline
//! ([`Sscop::poll_timeout`]) and events ([`Sscop::poll_event`]), in the call order of
//! `transport::psb` (quinn-proto style). It never reads a clock.
//!
//! # What is implemented (Q.2110 clause references)
//! - Connection control (§7.2–7.4): BGN/BGAK/BGREJ with Timer_CC and MaxCC, N(SQ) for
//!   duplicate BGN detection, BGN collision (both ends establish at once), END/ENDAK
//!   release with Timer_CC, RS/RSAK resynchronisation. An incoming BGN is accepted at
//!   once: SSCF-UNI (Q.2130) always answers AA-ESTABLISH indications with a response.
//! - Assured data transfer (§7.5–7.6): SD with a transmission buffer, the window VT(MS)
//!   granted by the peer's N(MR), POLL on Timer_POLL while data is outstanding,
//!   and after every MaxPD SDs (VT(PD)) so that the window keeps opening under load,
//!   Timer_KEEPALIVE in the transient phase and Timer_IDLE when idle,
//!   Timer_NO_RESPONSE → link failure, STAT answering POLL with the gap list (at most
//!   MaxSTAT elements), USTAT once per new gap, selective retransmission of the listed
//!   gaps, in-order exactly-once delivery.
//! - Departures: ER is answered with ERAK and handled like RS (both buffers are
//!   cleared, [`SscopEvent::Resynchronised`]) instead of Q.2110's buffer-preserving
//!   recovery; this end never starts ER. A retransmission is sent only for an SD transmitted before the
//!   POLL a STAT answers (each buffered SD remembers VT(PS) at its last transmission),
//!   which keeps a late STAT from duplicating SDs already resent; Q.2110 reaches the
//!   same with its poll list. Timer_CC and Timer_NO_RESPONSE never run shorter than
//!   the measured round trip needs, and Timer_CC may back off ([`rtt`]).
//!
//! Sequence numbers are 24-bit ([`SeqNum`]) and every comparison is relative to a base
//! (VT(A) for the transmitter, VR(R) for the receiver), as Q.2110 §7.1 requires.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::time::Instant;
use crate::wire::sscop::{Pdu, SeqNum};

mod rtt;
use rtt::RoundTrip;

/// Timer_NO_RESPONSE's least value while no round trip has been measured (RFC 6298's
/// initial retransmission timeout).
const UNMEASURED: Duration = Duration::from_secs(1);

/// The most a backed-off Timer_CC grows: eight times its first interval.
const MAX_CC_BACKOFF: u32 = 8;

/// Largest SD information field (Q.2110 parameter k; specs.md §5.3: 4096 octets).
pub const MAX_SD_INFO: usize = 4096;

/// SSCOP timers and limits (Q.2110 §7.8; defaults are libunimsg's, specs.md §5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SscopConfig {
    /// Timer_CC: BGN, END and RS retransmission interval (1 s).
    pub timer_cc: Duration,
    /// Timer_POLL: POLL interval while SDs are outstanding (750 ms).
    pub timer_poll: Duration,
    /// Timer_KEEPALIVE: POLL interval in the transient phase after all SDs are
    /// acknowledged (2 s).
    pub timer_keepalive: Duration,
    /// Timer_NO_RESPONSE: longest time without a STAT while polling (7 s); then the
    /// link has failed.
    pub timer_no_response: Duration,
    /// Timer_IDLE: POLL interval when idle (15 s); Timer_NO_RESPONSE does not run then.
    pub timer_idle: Duration,
    /// MaxCC: BGN/END/RS transmissions before giving up (4).
    pub max_cc: u32,
    /// Double Timer_CC after each retransmission (at most eight times the first
    /// interval), so MaxCC tries span a path whose round trip is not yet known.
    /// Off by default (Q.2110's fixed interval); on for network links.
    pub cc_backoff: bool,
    /// MaxPD: a POLL goes out after this many SDs (25), besides Timer_POLL: without
    /// it a busy link would stall at one window (128 SDs) per Timer_POLL.
    pub max_pd: u32,
    /// MaxSTAT: most list elements in one STAT (67).
    pub max_stat: usize,
    /// The receive window granted to the peer, in SDs (VR(MR) − VR(R); 128).
    pub window: u32,
    /// Most SDs held for sending (queued + unacknowledged); `send` fails beyond it.
    pub max_buffered: usize,
    /// Most PDUs waiting in `poll_transmit`; more are dropped and counted (a caller
    /// that never polls cannot make memory grow).
    pub max_out_queue: usize,
}

impl Default for SscopConfig {
    fn default() -> Self {
        SscopConfig {
            timer_cc: Duration::from_secs(1),
            timer_poll: Duration::from_millis(750),
            timer_keepalive: Duration::from_secs(2),
            timer_no_response: Duration::from_secs(7),
            timer_idle: Duration::from_secs(15),
            max_cc: 4,
            cc_backoff: false,
            max_pd: 25,
            max_stat: 67,
            window: 128,
            max_buffered: 1024,
            max_out_queue: 4096,
        }
    }
}

/// Why `send` refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SscopError {
    /// The connection is not established: wait for [`SscopEvent::Established`].
    #[error("SSCOP connection is not established; establish it and wait for Established")]
    NotEstablished,
    /// The transmission buffer is full: poll the link and retry after acknowledgements.
    #[error("SSCOP transmit buffer full ({limit} SDs); drive the link and retry")]
    BufferFull {
        /// The configured limit.
        limit: usize,
    },
    /// The message is longer than an SD may be.
    #[error("message of {len} octets exceeds the SSCOP SD limit of {MAX_SD_INFO}")]
    TooLong {
        /// Octets given.
        len: usize,
    },
}

/// Why the connection was released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseReason {
    /// Released by a user (`release`, or the peer's END with S = 0); the SSCOP-UU.
    User(Vec<u8>),
    /// The peer's SSCOP released it (END with S = 1).
    PeerSscop,
    /// The peer rejected the connection (BGREJ); its SSCOP-UU.
    Rejected(Vec<u8>),
    /// No answer to MaxCC BGNs (or RSs).
    NoAnswer,
    /// The peer began a new connection while this one was established: the old one
    /// is gone (an `Established` follows).
    PeerRestarted,
}

/// What the connection tells its user (SSCF-UNI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SscopEvent {
    /// The connection is established (either end asked).
    Established,
    /// The connection is released; `by_peer` says which end did it.
    Released {
        /// Whether the peer released it.
        by_peer: bool,
        /// Why.
        reason: ReleaseReason,
    },
    /// A message arrived, in order, exactly once.
    Data(Bytes),
    /// Both ends reset their sequence numbers; buffered SDs were dropped.
    Resynchronised,
    /// Timer_NO_RESPONSE expired: the peer stopped answering POLLs; the connection is
    /// released (END with S = 1 is sent).
    LinkFailure,
}

/// Counters of one SSCOP connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SscopStats {
    /// PDUs received (all).
    pub pdus_in: u64,
    /// PDUs handed out by `poll_transmit`.
    pub pdus_out: u64,
    /// PDUs that did not parse (dropped).
    pub bad_pdus: u64,
    /// PDUs that parsed but made no sense in the state or carried numbers out of range
    /// (dropped, or answered as Q.2110 says).
    pub unexpected_pdus: u64,
    /// SDs sent for the first time.
    pub sd_sent: u64,
    /// SDs sent again.
    pub sd_retransmitted: u64,
    /// SDs delivered.
    pub sd_delivered: u64,
    /// SDs received twice or outside the window (dropped).
    pub sd_dropped: u64,
    /// POLLs sent.
    pub polls: u64,
    /// STATs sent.
    pub stats_sent: u64,
    /// USTATs sent.
    pub ustats_sent: u64,
    /// Times the connection became established.
    pub establishments: u64,
    /// Link failures (Timer_NO_RESPONSE).
    pub link_failures: u64,
    /// PDUs dropped because the output queue was full.
    pub out_dropped: u64,
}

/// Connection state (Q.2110 §7.1 states, the subset this end uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// State 1: idle.
    Idle,
    /// State 2: outgoing connection pending (BGN sent).
    OutConnPending,
    /// State 4: outgoing disconnection pending (END sent).
    OutDiscPending,
    /// State 5: outgoing resynchronisation pending (RS sent).
    OutResyncPending,
    /// State 10: data transfer ready.
    Ready,
}

/// Which timer drives POLLs in the data transfer ready state (Q.2110 §7.5 phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// SDs outstanding: Timer_POLL.
    Active,
    /// All acknowledged once: Timer_KEEPALIVE.
    Transient,
    /// Nothing to do: Timer_IDLE, no Timer_NO_RESPONSE.
    Idle,
}

/// One SD in the transmission buffer.
#[derive(Debug, Clone)]
struct TxSd {
    info: Bytes,
    /// VT(PS) when it was last transmitted.
    poll_stamp: SeqNum,
}

/// One end of an SSCOP connection.
#[derive(Debug)]
pub struct Sscop {
    cfg: SscopConfig,
    state: State,
    // Transmitter (Q.2110 §7.1.1).
    vt_s: SeqNum,
    vt_ps: SeqNum,
    vt_a: SeqNum,
    vt_ms: SeqNum,
    vt_sq: u8,
    /// VT(PD): SDs sent since the last POLL.
    vt_pd: u32,
    /// SDs VT(A)..VT(S), keyed by N(S).
    tx_buf: BTreeMap<u32, TxSd>,
    /// Messages not yet numbered (waiting for the window).
    tx_queue: VecDeque<Bytes>,
    /// N(S) values to retransmit, in order.
    rtx_queue: VecDeque<SeqNum>,
    // Receiver (Q.2110 §7.1.2).
    vr_r: SeqNum,
    vr_h: SeqNum,
    vr_mr: SeqNum,
    vr_sq: Option<u8>,
    /// Out-of-order SDs, keyed by N(S).
    rx_buf: BTreeMap<u32, Bytes>,
    // Timers.
    timer_cc: Option<Instant>,
    cc_count: u32,
    /// When the first BGN of the establishment awaiting its BGAK was sent. Its BGAK
    /// gives a round trip no shorter than the real one, even if it answers a
    /// retransmission (unlike Karn's rule): a timer that waits for an answer may be
    /// too long for a few round trips, never too short.
    bgn_sent: Option<Instant>,
    rtt: RoundTrip,
    timer_poll: Option<Instant>,
    timer_no_response: Option<Instant>,
    /// When Timer_NO_RESPONSE was last started: its deadline follows the round trip
    /// measured since.
    no_response_from: Instant,
    phase: Phase,
    /// UU of the BGN/END being retransmitted.
    pending_uu: Vec<u8>,
    out: VecDeque<Bytes>,
    events: VecDeque<SscopEvent>,
    stats: SscopStats,
}

impl Sscop {
    /// An idle connection end.
    pub fn new(cfg: SscopConfig) -> Sscop {
        Sscop {
            cfg,
            state: State::Idle,
            vt_s: SeqNum::default(),
            vt_ps: SeqNum::default(),
            vt_a: SeqNum::default(),
            vt_ms: SeqNum::default(),
            vt_sq: 0,
            vt_pd: 0,
            tx_buf: BTreeMap::new(),
            tx_queue: VecDeque::new(),
            rtx_queue: VecDeque::new(),
            vr_r: SeqNum::default(),
            vr_h: SeqNum::default(),
            vr_mr: SeqNum::default(),
            vr_sq: None,
            rx_buf: BTreeMap::new(),
            timer_cc: None,
            cc_count: 0,
            bgn_sent: None,
            rtt: RoundTrip::default(),
            timer_poll: None,
            timer_no_response: None,
            no_response_from: Instant::from_nanos(0),
            phase: Phase::Idle,
            pending_uu: Vec::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: SscopStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SscopConfig {
        &self.cfg
    }

    /// Whether data can be sent (data transfer ready, Q.2110 state 10).
    pub fn is_established(&self) -> bool {
        self.state == State::Ready
    }

    /// Whether the connection is idle (neither established nor in a transition).
    pub fn is_idle(&self) -> bool {
        self.state == State::Idle
    }

    /// The counters.
    pub fn stats(&self) -> &SscopStats {
        &self.stats
    }

    /// SDs queued or unacknowledged.
    pub fn buffered(&self) -> usize {
        self.tx_queue.len() + self.tx_buf.len()
    }

    /// Sets the connection sequence value the next BGN counts from (Q.2110 N(SQ)),
    /// before the first [`Sscop::establish`]. A peer compares a BGN's N(SQ) with the
    /// last one it accepted to tell a retransmitted BGN from a new connection; a
    /// restarted daemon whose SSCOP started from the same value as its previous
    /// instance would have its first BGN taken for a retransmission of the old one
    /// (answered by BGAK, with the old connection's sequence numbers kept at the
    /// peer). Seeding from a random value makes that a 1-in-256 chance.
    pub fn seed_sq(&mut self, sq: u8) {
        self.vt_sq = sq;
    }

    /// AA-ESTABLISH request (Q.2110 §7.2): sends BGN and retries on Timer_CC. Does
    /// nothing if the connection is established or being established.
    pub fn establish(&mut self, now: Instant) {
        match self.state {
            State::Ready | State::OutConnPending => {}
            State::Idle | State::OutDiscPending | State::OutResyncPending => {
                self.reset_data();
                self.pending_uu.clear();
                self.vt_sq = self.vt_sq.wrapping_add(1);
                self.state = State::OutConnPending;
                self.cc_count = 1;
                self.timer_cc = Some(now + self.cc_interval());
                self.bgn_sent = Some(now);
                self.send_bgn();
            }
        }
    }

    /// AA-RELEASE request (Q.2110 §7.3): sends END (S = 0) with `uu` and waits for
    /// ENDAK. [`SscopEvent::Released`] follows on ENDAK or after MaxCC tries.
    pub fn release(&mut self, now: Instant, uu: &[u8]) {
        if self.state == State::Idle {
            return;
        }
        self.reset_data();
        self.pending_uu = uu.to_vec();
        self.state = State::OutDiscPending;
        self.cc_count = 1;
        self.timer_cc = Some(now + self.cc_interval());
        self.push_out(Pdu::End {
            source_sscop: false,
            uu: self.pending_uu.clone(),
        });
    }

    /// AA-RESYNC request (Q.2110 §7.4): sends RS; both ends drop buffered data.
    pub fn resync(&mut self, now: Instant) {
        if self.state != State::Ready {
            return;
        }
        self.reset_data();
        self.vt_sq = self.vt_sq.wrapping_add(1);
        self.state = State::OutResyncPending;
        self.cc_count = 1;
        self.timer_cc = Some(now + self.cc_interval());
        self.send_rs();
    }

    /// AA-DATA request: queues one message (at most [`MAX_SD_INFO`] octets) as an SD.
    pub fn send(&mut self, now: Instant, msg: Bytes) -> Result<(), SscopError> {
        if msg.len() > MAX_SD_INFO {
            return Err(SscopError::TooLong { len: msg.len() });
        }
        if self.state != State::Ready {
            return Err(SscopError::NotEstablished);
        }
        if self.buffered() >= self.cfg.max_buffered {
            return Err(SscopError::BufferFull {
                limit: self.cfg.max_buffered,
            });
        }
        self.tx_queue.push_back(msg);
        self.pump_tx(now);
        Ok(())
    }

    /// Takes one received PDU. Bad PDUs are counted and dropped.
    pub fn handle_pdu(&mut self, now: Instant, bytes: &[u8]) {
        self.stats.pdus_in += 1;
        let pdu = match Pdu::parse(bytes) {
            Ok(p) => p,
            Err(_) => {
                self.stats.bad_pdus += 1;
                return;
            }
        };
        match self.state {
            State::Idle => self.on_idle(now, pdu),
            State::OutConnPending => self.on_conn_pending(now, pdu),
            State::OutDiscPending => self.on_disc_pending(pdu),
            State::OutResyncPending => self.on_resync_pending(now, pdu),
            State::Ready => self.on_ready(now, pdu),
        }
    }

    /// The next PDU to send (one AAL5 SDU on VPI 0/VCI 5).
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        let p = self.out.pop_front();
        if p.is_some() {
            self.stats.pdus_out += 1;
        }
        p
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<SscopEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline, if a timer runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.timer_cc, self.timer_poll, self.timer_no_response]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the timers that expired at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timer_cc.is_some_and(|t| t <= now) {
            self.timer_cc = None;
            self.on_timer_cc(now);
        }
        if self.timer_no_response.is_some_and(|t| t <= now) {
            // Q.2110 §7.5 Timer_NO_RESPONSE expiry: MAA-ERROR P, release (END S=1) —
            // unless a round trip measured since it started says to wait longer.
            let due = self.no_response_from + self.no_response();
            if due > now {
                self.timer_no_response = Some(due);
                return self.handle_timeout(now);
            }
            self.timer_no_response = None;
            self.stats.link_failures += 1;
            self.push_out(Pdu::End {
                source_sscop: true,
                uu: Vec::new(),
            });
            self.go_idle();
            self.events.push_back(SscopEvent::LinkFailure);
            return;
        }
        if self.timer_poll.is_some_and(|t| t <= now) {
            self.timer_poll = None;
            self.on_timer_poll(now);
        }
    }

    /// The layer below is gone (the TCP connection of an atmtcp link closed): the
    /// connection fails now, as on Timer_NO_RESPONSE but with nothing sent (Q.2110
    /// §7.5's MAA-ERROR and AA-RELEASE indication), rather than after the timer.
    /// Nothing happens if the connection is idle.
    pub fn lower_layer_failed(&mut self) {
        if self.state == State::Idle {
            return;
        }
        self.stats.link_failures += 1;
        self.timer_poll = None;
        self.timer_no_response = None;
        self.phase = Phase::Idle;
        self.go_idle();
        self.events.push_back(SscopEvent::LinkFailure);
    }

    /// Moves both directions' numbering to `start` (tests of the 24-bit wrap).
    #[cfg(test)]
    pub(crate) fn jump_seq(&mut self, start: u32) {
        let s = SeqNum::wrapping(start);
        let ms = self.vt_ms.since(self.vt_a);
        self.vt_s = s;
        self.vt_a = s;
        self.vt_ms = s.add(ms);
        self.vr_r = s;
        self.vr_h = s;
        self.vr_mr = s.add(self.cfg.window);
    }

    // ----- internals -------------------------------------------------------------

    fn push_out(&mut self, pdu: Pdu) {
        if self.out.len() >= self.cfg.max_out_queue {
            self.stats.out_dropped += 1;
            return;
        }
        self.out.push_back(Bytes::from(pdu.to_bytes()));
    }

    /// VR(MR) to grant: VR(R) + window, never moving backwards.
    fn grant(&mut self) -> SeqNum {
        let want = self.vr_r.add(self.cfg.window);
        if want.since(self.vr_r) >= self.vr_mr.since(self.vr_r)
            || self.vr_mr.since(self.vr_r) > self.cfg.window
        {
            self.vr_mr = want;
        }
        self.vr_mr
    }

    fn send_bgn(&mut self) {
        let nmr = self.grant();
        self.push_out(Pdu::Bgn {
            nsq: self.vt_sq,
            nmr,
            uu: self.pending_uu.clone(),
        });
    }

    fn send_rs(&mut self) {
        let nmr = self.grant();
        self.push_out(Pdu::Rs {
            nsq: self.vt_sq,
            nmr,
            uu: Vec::new(),
        });
    }

    /// Clears both directions' sequence state and buffers (new connection / resync).
    fn reset_data(&mut self) {
        self.vt_s = SeqNum::default();
        self.vt_ps = SeqNum::default();
        self.vt_a = SeqNum::default();
        self.vt_ms = SeqNum::default();
        self.vt_pd = 0;
        self.tx_buf.clear();
        self.tx_queue.clear();
        self.rtx_queue.clear();
        self.vr_r = SeqNum::default();
        self.vr_h = SeqNum::default();
        self.vr_mr = SeqNum::default();
        self.rx_buf.clear();
        self.timer_poll = None;
        self.timer_no_response = None;
        self.phase = Phase::Idle;
        self.rtt.forget_polls();
    }

    /// Timer_CC's interval now: never shorter than the round trip needs, and with
    /// [`SscopConfig::cc_backoff`] doubled for each retransmission so far.
    fn cc_interval(&self) -> Duration {
        let base = self.rtt.at_least(self.cfg.timer_cc, Duration::ZERO);
        if !self.cfg.cc_backoff {
            return base;
        }
        let doublings = self.cc_count.saturating_sub(1).min(MAX_CC_BACKOFF.ilog2());
        base * (1 << doublings)
    }

    /// Timer_NO_RESPONSE: never shorter than a POLL interval and a round trip (twice
    /// the smoothed one) for its STAT to come back, nor than [`UNMEASURED`] while no
    /// round trip is known (an end that accepted the peer's BGN has no sample until
    /// its first STAT).
    fn no_response(&self) -> Duration {
        match self.rtt.srtt() {
            None => self.cfg.timer_no_response.max(UNMEASURED),
            Some(_) => self
                .rtt
                .at_least(self.cfg.timer_no_response, self.cfg.timer_poll),
        }
    }

    /// Starts Timer_NO_RESPONSE.
    fn arm_no_response(&mut self, now: Instant) {
        self.no_response_from = now;
        self.timer_no_response = Some(now + self.no_response());
    }

    /// The measured round trip, once there is one.
    pub fn round_trip(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    fn go_idle(&mut self) {
        self.reset_data();
        self.bgn_sent = None;
        self.state = State::Idle;
        self.timer_cc = None;
    }

    /// Enters data transfer ready with the peer's window `nmr` (Q.2110 §7.2: after
    /// BGN/BGAK; §7.4 after RS/RSAK).
    fn enter_ready(&mut self, now: Instant, nmr: SeqNum) {
        self.state = State::Ready;
        self.timer_cc = None;
        self.vt_ms = nmr;
        self.grant();
        self.phase = Phase::Idle;
        self.timer_poll = Some(now + self.cfg.timer_idle);
        self.timer_no_response = None;
    }

    fn on_idle(&mut self, now: Instant, pdu: Pdu) {
        match pdu {
            Pdu::Bgn { nsq, nmr, .. } => {
                // Q.2110 §7.2: AA-ESTABLISH indication; SSCF-UNI responds at once.
                self.accept_bgn(now, nsq, nmr);
            }
            Pdu::End { .. } => self.push_out(Pdu::Endak),
            Pdu::Endak | Pdu::Bgrej { .. } | Pdu::Bgak { .. } | Pdu::Ud { .. } | Pdu::Md { .. } => {
                self.stats.unexpected_pdus += 1;
            }
            _ => {
                // SD, POLL, STAT, USTAT, RS, RSAK, ER, ERAK: the peer thinks a
                // connection exists; tell it it does not (Q.2110 state 1: END S=1).
                self.stats.unexpected_pdus += 1;
                self.push_out(Pdu::End {
                    source_sscop: true,
                    uu: Vec::new(),
                });
            }
        }
    }

    /// Whether `nsq` is the N(SQ) of the peer's next BGN/RS/ER: one above the last
    /// one taken.
    fn is_next_sq(&self, nsq: u8) -> bool {
        self.vr_sq.is_none_or(|v| v.wrapping_add(1) == nsq)
    }

    fn accept_bgn(&mut self, now: Instant, nsq: u8, nmr: SeqNum) {
        self.reset_data();
        self.vr_sq = Some(nsq);
        let own = self.grant();
        self.push_out(Pdu::Bgak {
            nmr: own,
            uu: Vec::new(),
        });
        self.enter_ready(now, nmr);
        self.stats.establishments += 1;
        self.events.push_back(SscopEvent::Established);
    }

    fn on_conn_pending(&mut self, now: Instant, pdu: Pdu) {
        match pdu {
            Pdu::Bgak { nmr, .. } => {
                if let Some(sent) = self.bgn_sent.take() {
                    self.rtt.sample(now.saturating_duration_since(sent));
                }
                self.enter_ready(now, nmr);
                self.stats.establishments += 1;
                self.events.push_back(SscopEvent::Established);
            }
            Pdu::Bgn { nsq, nmr, .. } => {
                // Collision (Q.2110 §7.2, state 2 BGN): answer BGAK, connection is up.
                self.accept_bgn(now, nsq, nmr);
            }
            Pdu::Bgrej { uu } => {
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: true,
                    reason: ReleaseReason::Rejected(uu),
                });
            }
            Pdu::End { source_sscop, uu } => {
                self.push_out(Pdu::Endak);
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: true,
                    reason: end_reason(source_sscop, uu),
                });
            }
            _ => self.stats.unexpected_pdus += 1,
        }
    }

    fn on_disc_pending(&mut self, pdu: Pdu) {
        match pdu {
            Pdu::Endak | Pdu::End { .. } | Pdu::Bgrej { .. } => {
                if matches!(pdu, Pdu::End { .. }) {
                    self.push_out(Pdu::Endak);
                }
                let uu = core::mem::take(&mut self.pending_uu);
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: false,
                    reason: ReleaseReason::User(uu),
                });
            }
            Pdu::Bgn { .. } => {
                // Q.2110 state 4: a BGN while releasing is answered by the END again.
                self.stats.unexpected_pdus += 1;
            }
            _ => self.stats.unexpected_pdus += 1,
        }
    }

    fn on_resync_pending(&mut self, now: Instant, pdu: Pdu) {
        match pdu {
            Pdu::Rsak { nmr } => {
                self.enter_ready(now, nmr);
                self.events.push_back(SscopEvent::Resynchronised);
            }
            Pdu::Rs { nsq, nmr, .. } => {
                // Collision of RSs: answer and consider it done.
                self.vr_sq = Some(nsq);
                let own = self.grant();
                self.push_out(Pdu::Rsak { nmr: own });
                self.enter_ready(now, nmr);
                self.events.push_back(SscopEvent::Resynchronised);
            }
            Pdu::End { source_sscop, uu } => {
                self.push_out(Pdu::Endak);
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: true,
                    reason: end_reason(source_sscop, uu),
                });
            }
            Pdu::Bgn { nsq, nmr, .. } => {
                self.accept_bgn(now, nsq, nmr);
            }
            _ => self.stats.unexpected_pdus += 1,
        }
    }

    fn on_ready(&mut self, now: Instant, pdu: Pdu) {
        match pdu {
            Pdu::Sd { ns, info } => self.on_sd(ns, Bytes::from(info)),
            Pdu::Poll { nps, ns } => self.on_poll(nps, ns),
            Pdu::Stat { nps, nmr, nr, list } => self.on_stat(now, Some(nps), nmr, nr, &list),
            Pdu::Ustat { nmr, nr, list } => self.on_stat(now, None, nmr, nr, &list),
            Pdu::End { source_sscop, uu } => {
                self.push_out(Pdu::Endak);
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: true,
                    reason: end_reason(source_sscop, uu),
                });
            }
            Pdu::Bgn { nsq, nmr, .. } => {
                if self.vr_sq == Some(nsq) {
                    // Our BGAK was lost: the same BGN again (Q.2110 N(SQ) check).
                    let own = self.vr_mr;
                    self.push_out(Pdu::Bgak {
                        nmr: own,
                        uu: Vec::new(),
                    });
                } else {
                    // The peer started over: the old connection is gone.
                    self.events.push_back(SscopEvent::Released {
                        by_peer: true,
                        reason: ReleaseReason::PeerRestarted,
                    });
                    self.accept_bgn(now, nsq, nmr);
                }
            }
            Pdu::Rs { nsq, nmr, .. } => {
                if !self.is_next_sq(nsq) {
                    // A retransmission (N(SQ) = VR(SQ)) — or, any other value, not
                    // the peer's next (its VT(SQ) counts up by one per BGN/RS/ER,
                    // Q.2110 §7.4): answered, nothing reset, so a blind forgery
                    // cannot flush the link.
                    if self.vr_sq != Some(nsq) {
                        self.stats.unexpected_pdus += 1;
                    }
                    let own = self.vr_mr;
                    self.push_out(Pdu::Rsak { nmr: own });
                } else {
                    self.reset_data();
                    self.vr_sq = Some(nsq);
                    let own = self.grant();
                    self.push_out(Pdu::Rsak { nmr: own });
                    self.enter_ready(now, nmr);
                    self.events.push_back(SscopEvent::Resynchronised);
                }
            }
            Pdu::Er { nsq, nmr } => {
                // Departure (module docs): ER handled as a resynchronisation — only
                // for the peer's next N(SQ), as RS above.
                if self.vr_sq != Some(nsq) && !self.is_next_sq(nsq) {
                    self.stats.unexpected_pdus += 1;
                } else if self.vr_sq != Some(nsq) {
                    self.reset_data();
                    self.vr_sq = Some(nsq);
                    self.enter_ready(now, nmr);
                    self.events.push_back(SscopEvent::Resynchronised);
                }
                let own = self.grant();
                self.push_out(Pdu::Erak { nmr: own });
            }
            Pdu::Bgak { .. } if self.bgn_sent.is_some() => {
                // The answer to our BGN after a collision made the link: a sample.
                if let Some(sent) = self.bgn_sent.take() {
                    self.rtt.sample(now.saturating_duration_since(sent));
                }
            }
            Pdu::Bgak { .. } | Pdu::Rsak { .. } | Pdu::Erak { .. } => {
                // Late duplicates of answers already taken.
                self.stats.unexpected_pdus += 1;
            }
            Pdu::Bgrej { .. } | Pdu::Endak => self.stats.unexpected_pdus += 1,
            Pdu::Ud { .. } | Pdu::Md { .. } => self.stats.unexpected_pdus += 1,
        }
    }

    /// Numbers queued messages while the window allows, then sends retransmissions.
    fn pump_tx(&mut self, now: Instant) {
        while let Some(ns) = self.rtx_queue.pop_front() {
            if let Some(sd) = self.tx_buf.get_mut(&ns.value()) {
                sd.poll_stamp = self.vt_ps;
                let info = sd.info.to_vec();
                self.stats.sd_retransmitted += 1;
                self.push_out(Pdu::Sd { ns, info });
                self.count_sd(now);
            }
        }
        while !self.tx_queue.is_empty() && self.window_open() {
            let Some(info) = self.tx_queue.pop_front() else {
                break;
            };
            let ns = self.vt_s;
            self.vt_s = self.vt_s.add(1);
            self.push_out(Pdu::Sd {
                ns,
                info: info.to_vec(),
            });
            self.tx_buf.insert(
                ns.value(),
                TxSd {
                    info,
                    poll_stamp: self.vt_ps,
                },
            );
            self.stats.sd_sent += 1;
            self.count_sd(now);
        }
        if self.outstanding() && self.phase != Phase::Active {
            // Q.2110 §7.5: leaving the idle/transient phase starts Timer_POLL and,
            // from idle, Timer_NO_RESPONSE.
            if self.phase == Phase::Idle || self.timer_no_response.is_none() {
                self.arm_no_response(now);
            }
            self.phase = Phase::Active;
            self.timer_poll = Some(now + self.cfg.timer_poll);
        }
    }

    /// One more SD sent: after MaxPD of them, POLL now (Q.2110 §7.5, VT(PD)).
    fn count_sd(&mut self, now: Instant) {
        self.vt_pd += 1;
        if self.vt_pd >= self.cfg.max_pd.max(1) {
            self.send_poll(now);
            self.phase = Phase::Active;
            self.timer_poll = Some(now + self.cfg.timer_poll);
            if self.timer_no_response.is_none() {
                self.arm_no_response(now);
            }
        }
    }

    fn send_poll(&mut self, now: Instant) {
        self.vt_ps = self.vt_ps.add(1);
        self.rtt.poll_sent(self.vt_ps, now);
        self.vt_pd = 0;
        self.stats.polls += 1;
        self.push_out(Pdu::Poll {
            nps: self.vt_ps,
            ns: self.vt_s,
        });
    }

    /// VT(S) < VT(MS), relative to VT(A).
    fn window_open(&self) -> bool {
        let limit = self.vt_ms.since(self.vt_a);
        // A VT(MS) behind VT(A) (a confused peer) grants nothing.
        limit < SeqNum::MODULUS / 2 && self.vt_s.since(self.vt_a) < limit
    }

    fn outstanding(&self) -> bool {
        self.vt_a != self.vt_s || !self.tx_queue.is_empty()
    }

    fn on_timer_poll(&mut self, now: Instant) {
        if self.state != State::Ready {
            return;
        }
        self.send_poll(now);
        match self.phase {
            Phase::Active => self.timer_poll = Some(now + self.cfg.timer_poll),
            Phase::Transient => self.timer_poll = Some(now + self.cfg.timer_keepalive),
            Phase::Idle => {
                // Timer_IDLE expiry: poll and watch for the answer.
                self.phase = Phase::Transient;
                self.timer_poll = Some(now + self.cfg.timer_keepalive);
                self.arm_no_response(now);
            }
        }
    }

    fn on_timer_cc(&mut self, now: Instant) {
        if matches!(self.state, State::Idle | State::Ready) {
            return;
        }
        if self.cc_count >= self.cfg.max_cc {
            if self.state == State::OutDiscPending {
                let uu = core::mem::take(&mut self.pending_uu);
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: false,
                    reason: ReleaseReason::User(uu),
                });
            } else {
                // Q.2110 §7.2: MaxCC BGNs (or RSs) unanswered → END(S=1), release
                // indication.
                self.push_out(Pdu::End {
                    source_sscop: true,
                    uu: Vec::new(),
                });
                self.go_idle();
                self.events.push_back(SscopEvent::Released {
                    by_peer: false,
                    reason: ReleaseReason::NoAnswer,
                });
            }
            return;
        }
        // Not exhausted: count the retry, re-arm Timer_CC and send the PDU again.
        self.cc_count += 1;
        self.timer_cc = Some(now + self.cc_interval());
        match self.state {
            State::OutConnPending => self.send_bgn(),
            State::OutResyncPending => self.send_rs(),
            State::OutDiscPending => self.push_out(Pdu::End {
                source_sscop: false,
                uu: self.pending_uu.clone(),
            }),
            State::Idle | State::Ready => {}
        }
    }

    /// Receipt of an SD (Q.2110 §7.6).
    fn on_sd(&mut self, ns: SeqNum, info: Bytes) {
        let off = ns.since(self.vr_r);
        let grant = self.vr_mr.since(self.vr_r);
        if off >= grant || (off > 0 && self.rx_buf.contains_key(&ns.value())) {
            // Below VR(R) (a duplicate), at or beyond VR(MR), or already buffered.
            self.stats.sd_dropped += 1;
            return;
        }
        let h = self.vr_h.since(self.vr_r);
        if off == 0 {
            self.deliver(info);
            self.vr_r = self.vr_r.add(1);
            while let Some(next) = self.rx_buf.remove(&self.vr_r.value()) {
                self.deliver(next);
                self.vr_r = self.vr_r.add(1);
            }
            if off >= h {
                self.vr_h = ns.add(1);
            }
            if self.vr_h.since(self.vr_r) > grant {
                self.vr_h = self.vr_r;
            }
            self.grant();
        } else {
            self.rx_buf.insert(ns.value(), info);
            if off > h {
                // A new gap [VR(H), N(S)): report it once (USTAT).
                let nmr = self.grant();
                self.stats.ustats_sent += 1;
                self.push_out(Pdu::Ustat {
                    nmr,
                    nr: self.vr_r,
                    list: [self.vr_h, ns],
                });
                self.vr_h = ns.add(1);
            } else if off == h {
                self.vr_h = ns.add(1);
            }
        }
    }

    fn deliver(&mut self, info: Bytes) {
        self.stats.sd_delivered += 1;
        self.events.push_back(SscopEvent::Data(info));
    }

    /// Receipt of a POLL: answer STAT with the gaps in VR(R)..N(S) (Q.2110 §7.6).
    fn on_poll(&mut self, nps: SeqNum, ns: SeqNum) {
        let off = ns.since(self.vr_r);
        let grant = self.vr_mr.since(self.vr_r);
        if off > grant {
            // N(S) beyond anything granted: a protocol error; answer what we know.
            self.stats.unexpected_pdus += 1;
        } else if off > self.vr_h.since(self.vr_r) {
            self.vr_h = ns;
        }
        let mut list = Vec::new();
        let mut in_gap = false;
        for i in 0..self.vr_h.since(self.vr_r) {
            let s = self.vr_r.add(i);
            let have = i != 0 && self.rx_buf.contains_key(&s.value());
            if have == in_gap {
                list.push(s);
                in_gap = !in_gap;
            }
        }
        if in_gap {
            list.push(self.vr_h);
        }
        // At most MaxSTAT elements, whole pairs; later gaps wait for the next POLL.
        list.truncate((self.cfg.max_stat & !1).max(2));
        let nmr = self.grant();
        self.stats.stats_sent += 1;
        self.push_out(Pdu::Stat {
            nps,
            nmr,
            nr: self.vr_r,
            list,
        });
    }

    /// Receipt of a STAT (`nps` given) or USTAT: acknowledge, take the window, and
    /// retransmit the listed gaps.
    fn on_stat(
        &mut self,
        now: Instant,
        nps: Option<SeqNum>,
        nmr: SeqNum,
        nr: SeqNum,
        list: &[SeqNum],
    ) {
        let span = self.vt_s.since(self.vt_a);
        if nr.since(self.vt_a) > span || list.iter().any(|s| s.since(self.vt_a) > span) {
            // Numbers outside what was sent: Q.2110 would start error recovery; this
            // end drops the PDU and lets the next POLL sort it out.
            self.stats.unexpected_pdus += 1;
            return;
        }
        while self.vt_a != nr {
            self.tx_buf.remove(&self.vt_a.value());
            self.vt_a = self.vt_a.add(1);
        }
        self.vt_ms = nmr;
        for pair in list.chunks(2) {
            let (a, b) = match *pair {
                [a, b] => (a, b),
                [a] => (a, self.vt_s),
                _ => continue,
            };
            let n = b.since(a).min(span);
            for i in 0..n {
                let s = a.add(i);
                if let Some(sd) = self.tx_buf.get(&s.value()) {
                    // Only SDs sent before the POLL this STAT answers (module docs).
                    let stale = match nps {
                        Some(p) => p.since(sd.poll_stamp) != 0 && p.since(sd.poll_stamp) < 1 << 23,
                        None => true,
                    };
                    if stale && !self.rtx_queue.contains(&s) {
                        self.rtx_queue.push_back(s);
                    }
                }
            }
        }
        if let Some(p) = nps {
            self.rtt.stat(p, now);
            self.arm_no_response(now);
            if !self.outstanding() {
                match self.phase {
                    Phase::Active => {
                        self.phase = Phase::Transient;
                        self.timer_poll = Some(now + self.cfg.timer_keepalive);
                    }
                    Phase::Transient => {
                        self.phase = Phase::Idle;
                        self.timer_poll = Some(now + self.cfg.timer_idle);
                        self.timer_no_response = None;
                    }
                    Phase::Idle => self.timer_no_response = None,
                }
            }
        }
        self.pump_tx(now);
    }
}

fn end_reason(source_sscop: bool, uu: Vec<u8>) -> ReleaseReason {
    if source_sscop {
        ReleaseReason::PeerSscop
    } else {
        ReleaseReason::User(uu)
    }
}

#[cfg(test)]
mod tests;
