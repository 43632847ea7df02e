//! Per-VC round robin: every backlogged VC sends one cell's worth per turn (deficit
//! round robin with a unit quantum), whatever it offers.
//!
//! seed 000 §5.3.3: "If the scheduling discipline at all the switches along the path
//! is round-robin like, feedback flow control is based on Packet-pair flow control";
//! with per-VC queues served in turn, a back-to-back pair leaves the bottleneck
//! spaced by the VC's fair share, which is what the probe measures.

use super::drr::Drr;
use crate::table::Slot;

/// Unweighted per-VC round robin.
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    drr: Drr,
}

impl RoundRobin {
    pub(crate) fn enqueued(&mut self, slot: Slot, was_empty: bool) {
        if was_empty {
            self.drr.enqueued(slot, 1);
        }
    }

    pub(crate) fn pick(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<Slot> {
        self.drr.pick(head)
    }

    pub(crate) fn sent(&mut self, slot: Slot, empty: bool) {
        self.drr.sent(slot, empty);
    }

    pub(crate) fn pick_run(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<(Slot, u64)> {
        self.drr.pick_run(head)
    }

    pub(crate) fn sent_run(&mut self, slot: Slot, n: u64, empty: bool) {
        self.drr.sent_run(slot, n, empty);
    }

    pub(crate) fn remove(&mut self, slot: Slot) {
        self.drr.remove(slot);
    }
}
