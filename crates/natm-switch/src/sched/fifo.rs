//! First come, first served across all VCs of a port: the per-VC queues are kept
//! (for their limits and counters) and the order of arrival decides. A VC that
//! floods the port takes the share it sends — why packet-pair needs round robin and
//! natm falls back to window flow control behind a FIFO (seed 000 §5.3.3).

use std::collections::VecDeque;

use crate::table::Slot;

/// The arrival order of the units waiting at a port, by VC, as runs of units of
/// one VC (a train of one VC's cells is one entry).
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    order: VecDeque<(Slot, u32)>,
}

impl Fifo {
    pub(crate) fn enqueued(&mut self, slot: Slot) {
        match self.order.back_mut() {
            Some((s, n)) if *s == slot => *n += 1,
            _ => self.order.push_back((slot, 1)),
        }
    }

    /// Each VC's queue is itself in arrival order, so the oldest unit of the port is
    /// the head of the VC at the front.
    pub(crate) fn pick(&self) -> Option<Slot> {
        self.order.front().map(|&(s, _)| s)
    }

    /// The VC at the front and how many of the oldest units are its, in a row: what
    /// that many [`Fifo::pick`]s, each followed by [`Fifo::sent`], would give.
    pub(crate) fn pick_run(&self) -> Option<(Slot, u64)> {
        self.order.front().map(|&(s, n)| (s, u64::from(n)))
    }

    pub(crate) fn sent(&mut self, slot: Slot) {
        self.sent_run(slot, 1);
    }

    /// `n` units of the VC at the front were sent.
    pub(crate) fn sent_run(&mut self, slot: Slot, n: u32) {
        if let Some((s, m)) = self.order.front_mut() {
            if *s == slot {
                *m = m.saturating_sub(n);
                if *m == 0 {
                    self.order.pop_front();
                }
            }
        }
    }

    pub(crate) fn remove(&mut self, slot: Slot) {
        self.order.retain(|&(s, _)| s != slot);
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

    #[test]
    fn a_run_of_one_vc_is_one_pick() {
        let mut f = Fifo::default();
        for s in [1, 1, 1, 2, 1] {
            f.enqueued(Slot(s));
        }
        assert_eq!(f.pick_run(), Some((Slot(1), 3)));
        f.sent_run(Slot(1), 2);
        assert_eq!(f.pick_run(), Some((Slot(1), 1)));
        f.sent(Slot(1));
        assert_eq!(f.pick_run(), Some((Slot(2), 1)));
        f.remove(Slot(2));
        assert_eq!(f.pick_run(), Some((Slot(1), 1)));
    }
}
