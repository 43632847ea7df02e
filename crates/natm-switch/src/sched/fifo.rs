//! First come, first served across all VCs of a port: the per-VC queues are kept
//! (for their limits and counters) and the order of arrival decides. A VC that
//! floods the port takes the share it sends — why packet-pair needs round robin and
//! natm falls back to window flow control behind a FIFO (seed 000 §5.3.3).

use std::collections::VecDeque;

use crate::table::Slot;

/// The arrival order of the units waiting at a port, by VC.
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    order: VecDeque<Slot>,
}

impl Fifo {
    pub(crate) fn enqueued(&mut self, slot: Slot) {
        self.order.push_back(slot);
    }

    /// Each VC's queue is itself in arrival order, so the oldest unit of the port is
    /// the head of the VC at the front.
    pub(crate) fn pick(&self) -> Option<Slot> {
        self.order.front().copied()
    }

    pub(crate) fn sent(&mut self, slot: Slot) {
        if self.order.front() == Some(&slot) {
            self.order.pop_front();
        }
    }

    pub(crate) fn remove(&mut self, slot: Slot) {
        self.order.retain(|&s| s != slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_order_across_vcs() {
        let mut f = Fifo::default();
        for s in [1, 1, 2, 1, 3] {
            f.enqueued(Slot(s));
        }
        let mut out = Vec::new();
        while let Some(s) = f.pick() {
            out.push(s.0);
            f.sent(s);
        }
        assert_eq!(out, [1, 1, 2, 1, 3]);
        f.enqueued(Slot(4));
        f.enqueued(Slot(5));
        f.remove(Slot(4));
        assert_eq!(f.pick(), Some(Slot(5)));
    }
}
