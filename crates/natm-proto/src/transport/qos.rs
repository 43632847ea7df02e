//! In-band QoS changes within the bounds agreed at setup (seed 003 `setqos`).
//!
//! seed 003: "Once these parameters have been agreed then the QoS may be dynamically
//! changed at the transport layer without going to the network once the change is
//! within the agreed bounds." The sender asks with a QOS TPDU naming the new rate;
//! the receiver checks it against the bounds it agreed (the handshake's or the
//! signalled QoS's minimum and target rate) and answers QOS-ACK, accepted or
//! refused. The sender's shaper takes the new rate only when the acceptance
//! arrives; until then the change is *pending* (seed 003's "QoS pending" flag).
//! A lost QOS or QOS-ACK is repeated on the retransmission timeout, at most
//! `attempts` times, after which the change counts as refused (the rate stays).

use crate::time::Instant;

/// A change the sender asked for and the receiver has not yet answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pending {
    /// The change's number (echoed in the QOS-ACK).
    pub seq: u32,
    /// The rate asked for, payload bit/s.
    pub rate: u64,
    /// QOS TPDUs sent so far.
    pub attempts: u32,
    /// When to repeat the QOS.
    pub deadline: Instant,
}

/// How the last change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosOutcome {
    /// The peer accepted: the new rate is in force.
    Changed {
        /// The rate now in force, payload bit/s.
        rate: u64,
    },
    /// The peer refused, or never answered: the rate stays.
    Refused {
        /// The rate that was asked for.
        rate: u64,
    },
}

/// The sender's changes.
#[derive(Debug, Clone, Default)]
pub(super) struct QosSender {
    next_seq: u32,
    pub pending: Option<Pending>,
    pub last: Option<QosOutcome>,
}

impl QosSender {
    /// Start a change to `rate`; returns its number.
    pub(super) fn begin(&mut self, rate: u64, deadline: Instant) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.pending = Some(Pending {
            seq: self.next_seq,
            rate,
            attempts: 1,
            deadline,
        });
        self.next_seq
    }

    /// A QOS-ACK for change `seq` of `rate`: the outcome if it answers the pending
    /// change, else `None` (stale, duplicate or forged).
    pub(super) fn on_ack(&mut self, seq: u32, rate: u64, accepted: bool) -> Option<QosOutcome> {
        let p = self.pending?;
        if p.seq != seq || p.rate != rate {
            return None;
        }
        self.pending = None;
        let out = if accepted {
            QosOutcome::Changed { rate }
        } else {
            QosOutcome::Refused { rate }
        };
        self.last = Some(out);
        Some(out)
    }

    /// Give up on the pending change (no answer in `attempts` tries).
    pub(super) fn give_up(&mut self) -> Option<QosOutcome> {
        let p = self.pending.take()?;
        let out = QosOutcome::Refused { rate: p.rate };
        self.last = Some(out);
        Some(out)
    }
}

/// The receiver's view: the last change it answered, so a repeated QOS (its answer
/// was lost) gets the same answer and is reported once.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct QosReceiver {
    pub last: Option<(u32, u64, bool)>,
}

impl QosReceiver {
    /// Answer change `seq` to `rate`, accepted if `within` the agreed bounds. Returns
    /// whether it was accepted and whether it is new (not a repeat).
    pub(super) fn answer(&mut self, seq: u32, rate: u64, within: bool) -> (bool, bool) {
        if let Some((s, r, acc)) = self.last {
            if s == seq && r == rate {
                return (acc, false);
            }
        }
        self.last = Some((seq, rate, within));
        (within, true)
    }
}
