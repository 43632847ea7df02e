//! Deficit round robin (Shreedhar & Varghese, SIGCOMM 1995), the engine of both `rr`
//! and `wrr`: backlogged VCs take turns; each turn a VC earns its quantum of cells
//! and sends head units while their size fits its deficit. With cells (size 1) and a
//! quantum of 1 it is plain per-cell round robin; with frames of any size it keeps
//! the shares in cells rather than in frames.

use std::collections::VecDeque;

use crate::table::Slot;

#[derive(Debug, Clone, Copy, Default)]
struct VcTurn {
    /// Cells this VC may still send before its turn ends.
    deficit: u64,
    /// Cells earned per turn.
    quantum: u32,
    /// Whether the current turn's quantum has been added.
    credited: bool,
    /// Whether the VC is in the ring.
    active: bool,
}

/// The ring of backlogged VCs and their deficits.
#[derive(Debug, Default)]
pub(crate) struct Drr {
    ring: VecDeque<Slot>,
    turns: Vec<VcTurn>,
}

impl Drr {
    fn turn(&mut self, slot: Slot) -> &mut VcTurn {
        let i = slot.index();
        if self.turns.len() <= i {
            self.turns.resize(i + 1, VcTurn::default());
        }
        &mut self.turns[i]
    }

    /// A unit was queued for `slot`; a VC that was idle joins the back of the ring
    /// with `quantum` cells per turn.
    pub(crate) fn enqueued(&mut self, slot: Slot, quantum: u32) {
        let t = self.turn(slot);
        if !t.active {
            *t = VcTurn {
                deficit: 0,
                quantum: quantum.max(1),
                credited: false,
                active: true,
            };
            self.ring.push_back(slot);
        }
    }

    /// The VC whose head goes next (it stays at the front of the ring until its turn
    /// ends).
    pub(crate) fn pick(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<Slot> {
        // A lone backlogged VC has the port to itself, whatever its deficit: it is
        // served without the bookkeeping of turns (the state it leaves is one DRR
        // can be in, so a VC that joins later finds the round as it would).
        if self.ring.len() == 1 && head(self.ring[0]).is_some() {
            return Some(self.ring[0]);
        }
        let mut visits_without_send = 0usize;
        loop {
            let &slot = self.ring.front()?;
            let Some(cost) = head(slot) else {
                self.ring.pop_front();
                *self.turn(slot) = VcTurn::default();
                continue;
            };
            let t = self.turn(slot);
            // Only the VC at the front when `pick` is called can be in the middle of
            // its turn; every other one starts a turn when it comes to the front.
            let fresh = !t.credited;
            if fresh {
                t.deficit += u64::from(t.quantum);
                t.credited = true;
            }
            if u64::from(cost) <= t.deficit {
                t.deficit -= u64::from(cost);
                return Some(slot);
            }
            t.credited = false;
            self.ring.rotate_left(1);
            // A turn that ended is not a visit without a send: counting it would
            // make a lone VC with a quantum of one cell skip rounds on every other
            // cell. Fresh visits are consecutive ring entries, so n of them are the
            // whole ring.
            if fresh {
                visits_without_send += 1;
                if visits_without_send >= self.ring.len() {
                    self.skip_empty_rounds(&head);
                    visits_without_send = 0;
                }
            }
        }
    }

    /// The VC whose head goes next, as [`Drr::pick`], and how many cells it may send
    /// in a row if its head is a run of cells: what as many `pick`s, each followed by
    /// [`Drr::sent`] of one cell, would give — its whole backlog while it is alone,
    /// else this cell and the rest of its deficit. Report what went with
    /// [`Drr::sent_run`].
    pub(crate) fn pick_run(&mut self, head: impl Fn(Slot) -> Option<u32>) -> Option<(Slot, u64)> {
        let slot = self.pick(head)?;
        if self.ring.len() == 1 {
            return Some((slot, u64::MAX));
        }
        let deficit = self.turns.get(slot.index()).map_or(0, |t| t.deficit);
        Some((slot, 1 + deficit))
    }

    /// `n` single cells of the VC [`Drr::pick_run`] named were sent (at most what it
    /// allowed); its queue is now empty if `empty`.
    pub(crate) fn sent_run(&mut self, slot: Slot, n: u64, empty: bool) {
        // `pick_run` took the first cell from the deficit; a lone VC's is untouched.
        if n > 1 && self.ring.len() > 1 {
            let t = self.turn(slot);
            t.deficit = t.deficit.saturating_sub(n - 1);
        }
        self.sent(slot, empty);
    }

    /// Every VC in the ring was visited and none could send (large frames, small
    /// quanta): credit at once the whole rounds that would pass before the first of
    /// them can, less the one the next visit adds, instead of looping through them.
    fn skip_empty_rounds(&mut self, head: &impl Fn(Slot) -> Option<u32>) {
        let rounds = self
            .ring
            .iter()
            .filter_map(|&s| {
                let t = self.turns.get(s.index())?;
                let need = u64::from(head(s)?).saturating_sub(t.deficit);
                Some(need.div_ceil(u64::from(t.quantum.max(1))))
            })
            .min()
            .unwrap_or(0);
        if rounds > 1 {
            for &s in &self.ring {
                if let Some(t) = self.turns.get_mut(s.index()) {
                    t.deficit += (rounds - 1) * u64::from(t.quantum);
                }
            }
        }
    }

    /// The picked VC sent its head; an emptied VC leaves the ring and forfeits its
    /// deficit (DRR: an idle flow saves no credit).
    pub(crate) fn sent(&mut self, slot: Slot, empty: bool) {
        if empty {
            if self.ring.front() == Some(&slot) {
                self.ring.pop_front();
            } else {
                self.ring.retain(|&s| s != slot);
            }
            *self.turn(slot) = VcTurn::default();
        } else if self.ring.len() > 1
            && self.ring.front() == Some(&slot)
            && self.turn(slot).deficit == 0
        {
            // No unit costs less than a cell: the turn is over, and the next `pick`
            // starts the next VC's at once (with `rr`'s quantum of one cell, every
            // cell ends a turn).
            self.turn(slot).credited = false;
            self.ring.rotate_left(1);
        }
    }

    pub(crate) fn remove(&mut self, slot: Slot) {
        self.ring.retain(|&s| s != slot);
        *self.turn(slot) = VcTurn::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Runs `picks` picks over fixed backlogs of units of `size` cells (never
    /// emptied) and returns the cells each VC sent.
    fn share(vcs: &[(u32, u32, u32)], picks: usize) -> HashMap<u32, u64> {
        let mut d = Drr::default();
        let size: HashMap<u32, u32> = vcs.iter().map(|&(s, _, sz)| (s, sz)).collect();
        for &(s, q, _) in vcs {
            d.enqueued(Slot(s), q);
        }
        let mut sent = HashMap::new();
        for _ in 0..picks {
            let s = d.pick(|s| size.get(&s.0).copied()).unwrap();
            *sent.entry(s.0).or_insert(0) += u64::from(size[&s.0]);
            d.sent(s, false);
        }
        sent
    }

    #[test]
    fn equal_quanta_share_cells_not_frames() {
        // VC 1 sends 20-cell frames, VC 2 single cells: both get the same cells.
        let sent = share(&[(1, 1, 20), (2, 1, 1)], 2100);
        let (a, b) = (sent[&1] as f64, sent[&2] as f64);
        assert!((a / b - 1.0).abs() < 0.02, "{a} vs {b}");
    }

    #[test]
    fn quanta_weight_the_shares() {
        let sent = share(&[(1, 3, 1), (2, 1, 1)], 4000);
        assert_eq!((sent[&1], sent[&2]), (3000, 1000));
    }

    #[test]
    fn an_emptied_vc_leaves_the_ring() {
        let mut d = Drr::default();
        d.enqueued(Slot(0), 1);
        d.enqueued(Slot(1), 1);
        assert_eq!(d.pick(|_| Some(1)), Some(Slot(0)));
        d.sent(Slot(0), true);
        assert_eq!(d.pick(|_| Some(1)), Some(Slot(1)));
        d.sent(Slot(1), false);
        // Slot 0 is gone; slot 1's turn (quantum 1) is over but it is alone.
        assert_eq!(d.pick(|_| Some(1)), Some(Slot(1)));
        d.remove(Slot(1));
        assert_eq!(d.pick(|_| Some(1)), None);
    }
}
