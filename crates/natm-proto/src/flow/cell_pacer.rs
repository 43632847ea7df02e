//! Cell-level smoothing (seed 001 §7): a VC's cells leave one at a time, each at its
//! own slot of the VC's peak cell rate, instead of a frame's cells back to back.
//!
//! seed 001 §7 compares the two ways a host adaptor may pace a VC: *packet-level*
//! smoothing (each frame's cells leave together at the line's speed, frames spaced at
//! the VC's rate — what the transport's leaky bucket does to TPDUs) and *cell-level*
//! smoothing (every cell spaced at 1/PCR, as a SAR chip's per-VC cell scheduler
//! does). A [`CellPacer`] is the latter, sans-IO: the adaptor pushes the units a frame
//! was cut into (one cell each, in whatever datagram form the link sends a cell),
//! each gets its departure time from a GCRA shaper at the cell rate (specs §3.4:
//! `max(ready, TAT − L)`), and [`CellPacer::poll`] hands over those that are due.
//! A caller woken late gets every unit due by then at once; the GCRA's limit `L`
//! says how much earlier than its slot a unit may go after an idle gap (0: never).
//!
//! The queue is bounded ([`CellPacer::new`]'s `max_units`): a sender faster than
//! the cell rate — which the VC's contract shaper should never let happen, but a
//! frame shorter than the contract assumes takes more cells per octet — sheds the
//! frame that would overflow it, whole, and counts it ([`PacerStats::shed_frames`]),
//! as an adaptor's per-VC queue would. A policer downstream would drop those cells
//! anyway.

use std::collections::VecDeque;
use std::time::Duration;

use super::gcra::{cell_interval, Gcra};
use crate::time::Instant;

/// What a pacer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacerStats {
    /// Units (cells) handed over by [`CellPacer::poll`].
    pub units_sent: u64,
    /// Frames refused because the queue would overflow.
    pub shed_frames: u64,
    /// The most units ever queued at once.
    pub max_backlog: u64,
    /// Units handed over later than their slot by more than one cell interval (the
    /// caller was woken late; they left back to back).
    pub late_units: u64,
}

/// Paces opaque fixed-length units (one cell each) at a cell rate.
#[derive(Debug, Clone)]
pub struct CellPacer {
    gcra: Gcra,
    unit_len: usize,
    max_units: usize,
    /// The queued units, back to back.
    bytes: VecDeque<u8>,
    /// Each queued unit's departure time, in queue order.
    departs: VecDeque<Instant>,
    stats: PacerStats,
}

impl CellPacer {
    /// A pacer of units `unit_len` octets long at `cells_per_sec`, leaving up to
    /// `tolerance` ahead of their slot after a gap, queueing at most `max_units`.
    pub fn new(
        cells_per_sec: u64,
        tolerance: Duration,
        unit_len: usize,
        max_units: usize,
    ) -> CellPacer {
        CellPacer {
            gcra: Gcra::new(cell_interval(cells_per_sec), tolerance),
            unit_len: unit_len.max(1),
            max_units: max_units.max(1),
            bytes: VecDeque::new(),
            departs: VecDeque::new(),
            stats: PacerStats::default(),
        }
    }

    /// The interval between two cells' slots.
    pub fn interval(&self) -> Duration {
        self.gcra.increment()
    }

    /// Queue one frame's units (`units`, a whole number of units back to back) ready
    /// at `now`. Returns false, queueing nothing, if they would overflow the queue.
    pub fn push_frame(&mut self, now: Instant, units: &[u8]) -> bool {
        let n = units.len() / self.unit_len;
        if n == 0 {
            return true;
        }
        if self.departs.len() + n > self.max_units {
            self.stats.shed_frames += 1;
            return false;
        }
        for u in units.chunks_exact(self.unit_len) {
            let at = self.gcra.shape(now);
            self.departs.push_back(at);
            self.bytes.extend(u);
        }
        self.stats.max_backlog = self.stats.max_backlog.max(self.departs.len() as u64);
        true
    }

    /// Append to `out` every unit due at `now`, in order; returns how many.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<u8>) -> usize {
        let mut n = 0;
        let late = self.interval();
        while let Some(&at) = self.departs.front() {
            if at > now {
                break;
            }
            if now.saturating_duration_since(at) > late {
                self.stats.late_units += 1;
            }
            self.departs.pop_front();
            out.extend(self.bytes.drain(..self.unit_len));
            n += 1;
        }
        self.stats.units_sent += n as u64;
        n
    }

    /// When the next unit is due; `None` with nothing queued.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.departs.front().copied()
    }

    /// Drop every unit still queued (the VC was aborted: nothing of it may leave
    /// late). The cell clock keeps its state.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.departs.clear();
    }

    /// Units queued.
    pub fn backlog(&self) -> usize {
        self.departs.len()
    }

    /// The counters so far.
    pub fn stats(&self) -> PacerStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(us * 1_000)
    }

    /// Drive `p` from `from` µs, polling exactly at each due time: the departure
    /// times, µs.
    fn drain(p: &mut CellPacer, mut now: Instant) -> Vec<u64> {
        let mut out = Vec::new();
        let mut times = Vec::new();
        while let Some(t) = p.poll_timeout() {
            now = now.max(t);
            let n = p.poll(now, &mut out);
            times.extend(std::iter::repeat_n(now.as_nanos() / 1_000, n));
        }
        times
    }

    #[test]
    fn a_frames_cells_leave_one_per_slot_not_back_to_back() {
        // 10,000 cells/s: a slot every 100 µs. Two frames of 3 cells, the second
        // pushed 50 µs after the first, while the first is still leaving.
        let mut p = CellPacer::new(10_000, Duration::ZERO, 2, 64);
        assert!(p.push_frame(at(0), &[1, 1, 2, 2, 3, 3]));
        let mut out = Vec::new();
        assert_eq!(p.poll(at(0), &mut out), 1);
        assert_eq!(out, [1, 1]);
        assert!(p.push_frame(at(50), &[4, 4, 5, 5, 6, 6]));
        assert_eq!(p.poll_timeout(), Some(at(100)));
        let times = drain(&mut p, at(50));
        assert_eq!(times, [100, 200, 300, 400, 500]);
        assert_eq!(p.stats().units_sent, 6);
        assert_eq!(p.stats().late_units, 0);
    }

    #[test]
    fn after_an_idle_gap_the_next_cell_goes_at_once_and_not_earlier_than_its_slot() {
        let mut p = CellPacer::new(10_000, Duration::ZERO, 1, 64);
        assert!(p.push_frame(at(0), &[0, 0]));
        assert_eq!(drain(&mut p, at(0)), [0, 100]);
        // Idle until 1 ms: no credit saved up with a zero tolerance.
        assert!(p.push_frame(at(1_000), &[0, 0, 0]));
        assert_eq!(drain(&mut p, at(1_000)), [1_000, 1_100, 1_200]);
    }

    #[test]
    fn a_late_caller_gets_every_due_cell_and_they_are_counted_late() {
        let mut p = CellPacer::new(10_000, Duration::ZERO, 1, 64);
        assert!(p.push_frame(at(0), &[9; 5]));
        let mut out = Vec::new();
        // Woken 350 µs late: the cells of 0, 100, 200 and 300 µs go together.
        assert_eq!(p.poll(at(350), &mut out), 4);
        assert_eq!(p.stats().late_units, 3);
        assert_eq!(p.poll_timeout(), Some(at(400)));
    }

    #[test]
    fn a_frame_that_would_overflow_the_queue_is_shed_whole() {
        let mut p = CellPacer::new(1_000, Duration::ZERO, 1, 4);
        assert!(p.push_frame(at(0), &[1, 2, 3]));
        assert!(!p.push_frame(at(0), &[4, 5]));
        assert_eq!(p.backlog(), 3);
        assert_eq!(p.stats().shed_frames, 1);
        let mut out = Vec::new();
        p.poll(at(10_000), &mut out);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(p.stats().max_backlog, 3);
        assert!(p.push_frame(at(10_000), &[6, 7]));
        p.clear();
        assert_eq!((p.backlog(), p.poll_timeout()), (0, None));
    }
}
