//! SYNC round-trip probes for VCs that carry no ACKs (seed 003: "a special packet
//! called a SYNC packet to periodically measure round-trip time on a transport
//! connection").
//!
//! A guaranteed or best-effort VC has no acknowledgements, so nothing else gives its
//! sender an RTT. The sender sends a SYNC every interval (the first as soon as the VC
//! is established); the receiver answers each with a SYNC-ECHO carrying the probe's
//! number and timestamp back. One probe is outstanding at a time: an echo for any
//! other number (a late one, or one a hostile sender made up) is dropped, so a
//! sender takes at most one RTT sample per interval. The receiver answers at most
//! one SYNC per [`TransportConfig::MIN_SYNC_INTERVAL`](super::TransportConfig), so a
//! flood of SYNCs costs it no more than the shortest interval a sender may use.

use std::time::Duration;

use crate::time::Instant;

/// The sender's side: when the next probe goes and which one is outstanding.
#[derive(Debug, Clone)]
pub(super) struct SyncProbe {
    interval: Option<Duration>,
    next_at: Option<Instant>,
    next_seq: u32,
    outstanding: Option<u32>,
}

impl SyncProbe {
    /// Probes every `interval` (`None`: never).
    pub(super) fn new(interval: Option<Duration>) -> SyncProbe {
        SyncProbe {
            interval,
            next_at: None,
            next_seq: 1,
            outstanding: None,
        }
    }

    /// The VC is established at `now`: the first probe is due at once.
    pub(super) fn start(&mut self, now: Instant) {
        if self.interval.is_some() && self.next_at.is_none() {
            self.next_at = Some(now);
        }
    }

    /// When the next probe is due.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.next_at
    }

    /// If a probe is due at `now`, its number (the previous probe, answered or not,
    /// is forgotten: its echo no longer counts).
    pub(super) fn due(&mut self, now: Instant) -> Option<u32> {
        let (interval, at) = (self.interval?, self.next_at?);
        if now < at {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.outstanding = Some(seq);
        self.next_at = Some(now + interval);
        Some(seq)
    }

    /// A SYNC-ECHO for probe `seq` arrived: whether it answers the outstanding probe
    /// (then it is no longer outstanding).
    pub(super) fn on_echo(&mut self, seq: u32) -> bool {
        if self.outstanding == Some(seq) {
            self.outstanding = None;
            true
        } else {
            false
        }
    }
}

/// The receiver's side: a limit on how often it answers.
#[derive(Debug, Clone, Default)]
pub(super) struct EchoLimiter {
    last: Option<Instant>,
}

impl EchoLimiter {
    /// Whether a SYNC arriving at `now` may be answered.
    pub(super) fn allow(&mut self, now: Instant, min_gap: Duration) -> bool {
        if self.last.is_some_and(|t| now < t + min_gap) {
            return false;
        }
        self.last = Some(now);
        true
    }
}
