//! The deadlines of many VC ends on one host: an indexed binary min-heap keyed by
//! (deadline, VC index), so a host with thousands of VCs finds its earliest timer in
//! O(1) and moves one VC's timer in O(log n), instead of scanning every VC after each
//! frame.
//!
//! Each index has at most one deadline; setting it again moves the entry (no stale
//! entries pile up when a retransmission timer is pushed back on every ACK).

use natm_proto::time::Instant;

const ABSENT: u32 = u32::MAX;

/// Deadlines by index, earliest first; ties broken by the lower index.
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    heap: Vec<(Instant, u32)>,
    /// Where each index sits in `heap`, or `ABSENT`.
    pos: Vec<u32>,
}

impl TimerHeap {
    /// Sets (or, with `None`, clears) the deadline of `idx`.
    pub(crate) fn set(&mut self, idx: usize, at: Option<Instant>) {
        if self.pos.len() <= idx {
            self.pos.resize(idx + 1, ABSENT);
        }
        let p = self.pos[idx];
        match (p == ABSENT, at) {
            (true, None) => {}
            (true, Some(t)) => {
                self.heap.push((t, idx as u32));
                let last = self.heap.len() - 1;
                self.pos[idx] = last as u32;
                self.up(last);
            }
            (false, Some(t)) => {
                let p = p as usize;
                let old = self.heap[p].0;
                self.heap[p].0 = t;
                if t < old {
                    self.up(p);
                } else {
                    self.down(p);
                }
            }
            (false, None) => {
                let p = p as usize;
                let last = self.heap.len() - 1;
                self.swap(p, last);
                self.heap.pop();
                self.pos[idx] = ABSENT;
                if p < self.heap.len() {
                    self.down(p);
                    self.up(p);
                }
            }
        }
    }

    /// The earliest deadline.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.heap.first().map(|e| e.0)
    }

    /// The indices whose deadline is at or before `now`, in ascending index order.
    /// Their deadlines stay set.
    pub(crate) fn due(&self, now: Instant, out: &mut Vec<usize>) {
        out.clear();
        // A child is never earlier than its parent: walk only the subtrees that are due,
        // breadth first, with `out` itself as the work list of heap positions (no
        // allocation per call: this runs on every poll of a host).
        if self.heap.first().is_some_and(|e| e.0 <= now) {
            out.push(0);
        }
        let mut i = 0;
        while i < out.len() {
            let p = out[i];
            for c in [2 * p + 1, 2 * p + 2] {
                if c < self.heap.len() && self.heap[c].0 <= now {
                    out.push(c);
                }
            }
            i += 1;
        }
        for p in out.iter_mut() {
            *p = self.heap[*p].1 as usize;
        }
        out.sort_unstable();
    }

    fn key(&self, p: usize) -> (Instant, u32) {
        self.heap[p]
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn up(&mut self, mut p: usize) {
        while p > 0 {
            let parent = (p - 1) / 2;
            if self.key(p) < self.key(parent) {
                self.swap(p, parent);
                p = parent;
            } else {
                break;
            }
        }
    }

    fn down(&mut self, mut p: usize) {
        loop {
            let (l, r) = (2 * p + 1, 2 * p + 2);
            let mut m = p;
            if l < self.heap.len() && self.key(l) < self.key(m) {
                m = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(m) {
                m = r;
            }
            if m == p {
                break;
            }
            self.swap(p, m);
            p = m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of sets and clears leaves the heap agreeing with a plain map.
        #[test]
        fn agrees_with_a_scan(ops in proptest::collection::vec((0usize..40, proptest::option::of(0u64..50)), 0..300), now in 0u64..50) {
            let mut h = TimerHeap::default();
            let mut model: Vec<Option<u64>> = vec![None; 40];
            for (i, t) in ops {
                h.set(i, t.map(Instant::from_nanos));
                model[i] = t;
            }
            let min = model.iter().flatten().min().copied();
            prop_assert_eq!(h.earliest(), min.map(Instant::from_nanos));
            let mut due = Vec::new();
            h.due(Instant::from_nanos(now), &mut due);
            let want: Vec<usize> = (0..40).filter(|&i| model[i].is_some_and(|t| t <= now)).collect();
            prop_assert_eq!(due, want);
        }
    }
}
