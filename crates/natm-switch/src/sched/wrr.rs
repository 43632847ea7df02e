//! Weighted round robin: a VC with a reservation earns per turn a quantum in
//! proportion to its reserved rate; best-effort VCs earn one cell.
//!
//! seed 000 §5.1 (the host's task scheduler, applied here to a switch port): "we
//! give the highest priority to guaranteed-performance connections, with a weight
//! corresponding to their bandwidth allocation ... best-effort connections get the
//! lowest priority". Weights of a thousandth of the line rate make a guaranteed VC's
//! share of a congested port far above its reservation, so it is served as fast as
//! it arrives; what bounds it is policing at the input (`upc`), not the scheduler.

use super::drr::Drr;
use crate::table::Slot;

/// Quantum units per line rate: a VC reserving a fraction f of the line gets
/// ⌈f·1000⌉ cells per turn.
pub(crate) const WEIGHT_SCALE: u64 = 1000;

/// The quantum of a VC reserving `reserved` cells/s on a line of `line` cells/s: at
/// least 1 (a best-effort VC), rounded up so that rounding never costs a
/// guaranteed VC its rate.
pub(crate) fn weight(reserved: u64, line: u64) -> u32 {
    if reserved == 0 || line == 0 {
        return 1;
    }
    let w = (u128::from(reserved) * u128::from(WEIGHT_SCALE)).div_ceil(u128::from(line));
    u32::try_from(w).unwrap_or(u32::MAX).max(1)
}

/// Round robin weighted by reserved rate.
#[derive(Debug, Default)]
pub(crate) struct WeightedRoundRobin {
    drr: Drr,
}

impl WeightedRoundRobin {
    pub(crate) fn enqueued(&mut self, slot: Slot, was_empty: bool, weight: u32) {
        if was_empty {
            self.drr.enqueued(slot, weight);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_round_up_and_never_reach_zero() {
        assert_eq!(weight(0, 1000), 1);
        assert_eq!(weight(300, 1000), 300);
        assert_eq!(weight(1, 1_000_000), 1);
        assert_eq!(weight(3001, 10_000), 301);
        assert_eq!(weight(5, 0), 1);
    }
}
