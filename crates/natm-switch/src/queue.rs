//! A VC's output queue: cells (cell mode) or whole AAL5 frames (frame mode) waiting
//! for the port's scheduler, bounded in cells.

use std::collections::VecDeque;

use bytes::Bytes;
use natm_proto::wire::aal5::cell_count;
use natm_proto::wire::cell::CELL_LEN;
use natm_proto::wire::vcframe;

/// What a port sends: one cell, or one AAL5 frame as a datagram of the frame mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A 53-octet cell, header translated and HEC recomputed.
    Cell([u8; CELL_LEN]),
    /// An AAL5 CPCS-SDU behind its VC header (`wire::vcframe`), VPI/VCI translated.
    Frame {
        /// The VC header to send.
        header: vcframe::Repr,
        /// The SDU.
        sdu: Bytes,
    },
}

impl Transmit {
    /// Cells this unit occupies on the line and in a buffer: 1 for a cell, the AAL5
    /// cell count of the SDU for a frame (1 for an OAM or RM frame, the payload of one
    /// cell).
    pub fn cells(&self) -> u32 {
        match self {
            Transmit::Cell(_) => 1,
            Transmit::Frame { header, sdu } => frame_cells(header, sdu.len()),
        }
    }
}

/// Cells a frame with VC header `header` and an SDU of `len` octets takes: its AAL5
/// cells (at least 1), or 1 for a frame that is one cell in cell mode (OAM, RM:
/// `vcframe::Repr::single_cell_pti`) of one cell payload.
pub(crate) fn frame_cells(header: &vcframe::Repr, len: usize) -> u32 {
    if header.single_cell_pti().is_some() && len == natm_proto::wire::cell::PAYLOAD_LEN {
        return 1;
    }
    u32::try_from(cell_count(len).max(1)).unwrap_or(u32::MAX)
}

/// One entry of a VC's queue: a run of cells (kept in [`VcQueue`]'s cell ring, in
/// order) or one frame.
#[derive(Debug)]
enum Unit {
    /// This many cells, the next ones of the cell ring.
    Cells(u32),
    /// A frame of the frame mode.
    Frame { header: vcframe::Repr, sdu: Bytes },
}

/// The queue of one VC at its output port.
///
/// Cells are kept back to back in a ring of their own and the order of units as runs
/// of cells between frames, so that a cell costs one 53-octet copy in and one out,
/// and a run of cells can leave in one copy ([`VcQueue::pop_cells`]).
#[derive(Debug, Default)]
pub(crate) struct VcQueue {
    units: VecDeque<Unit>,
    cell_ring: VecDeque<[u8; CELL_LEN]>,
    cells: u32,
    max_cells: u32,
}

impl VcQueue {
    /// Cells waiting.
    #[inline]
    pub(crate) fn cells(&self) -> u32 {
        self.cells
    }

    /// The most cells that ever waited.
    pub(crate) fn max_cells(&self) -> u32 {
        self.max_cells
    }

    /// Whether nothing waits.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Cells the unit at the head takes, if any waits.
    #[inline]
    pub(crate) fn head_cells(&self) -> Option<u32> {
        match self.units.front()? {
            Unit::Cells(_) => Some(1),
            Unit::Frame { header, sdu } => Some(frame_cells(header, sdu.len())),
        }
    }

    /// Cells in the run of cells at the head (0 if a frame is at the head or nothing
    /// waits).
    #[inline]
    pub(crate) fn head_run(&self) -> u32 {
        match self.units.front() {
            Some(Unit::Cells(n)) => *n,
            _ => 0,
        }
    }

    /// Appends a unit of `cells` cells (the caller has checked the limits).
    #[inline]
    pub(crate) fn push(&mut self, unit: Transmit, cells: u32) {
        match unit {
            Transmit::Cell(c) => self.push_cell(c),
            Transmit::Frame { header, sdu } => {
                self.units.push_back(Unit::Frame { header, sdu });
                self.cells += cells;
                self.max_cells = self.max_cells.max(self.cells);
            }
        }
    }

    /// Appends one cell (the caller has checked the limits).
    #[inline(always)]
    pub(crate) fn push_cell(&mut self, cell: [u8; CELL_LEN]) {
        self.cell_ring.push_back(cell);
        match self.units.back_mut() {
            Some(Unit::Cells(n)) => *n += 1,
            _ => self.units.push_back(Unit::Cells(1)),
        }
        self.cells += 1;
        self.max_cells = self.max_cells.max(self.cells);
    }

    /// Removes the unit at the head.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Transmit> {
        match self.units.front_mut()? {
            Unit::Cells(n) => {
                *n -= 1;
                if *n == 0 {
                    self.units.pop_front();
                }
                self.cells -= 1;
                let c = self
                    .cell_ring
                    .pop_front()
                    .expect("a run of cells is in the cell ring");
                if self.cell_ring.is_empty() {
                    // As in `pop_cells`: start again at the front of the ring.
                    self.cell_ring.clear();
                }
                Some(Transmit::Cell(c))
            }
            Unit::Frame { .. } => match self.units.pop_front()? {
                Unit::Frame { header, sdu } => {
                    self.cells -= frame_cells(&header, sdu.len());
                    Some(Transmit::Frame { header, sdu })
                }
                Unit::Cells(_) => unreachable!("the head was a frame"),
            },
        }
    }

    /// Removes up to `max` cells of the run at the head and appends them to `out`
    /// back to back; returns how many (0 if a frame is at the head).
    #[inline]
    pub(crate) fn pop_cells(&mut self, max: u32, out: &mut Vec<u8>) -> u32 {
        let Some(Unit::Cells(n)) = self.units.front_mut() else {
            return 0;
        };
        let k = (*n).min(max);
        if k == 0 {
            return 0;
        }
        *n -= k;
        if *n == 0 {
            self.units.pop_front();
        }
        self.cells -= k;
        let k_us = k as usize;
        let (a, b) = self.cell_ring.as_slices();
        let from_a = k_us.min(a.len());
        out.extend_from_slice(a[..from_a].as_flattened());
        out.extend_from_slice(b[..k_us - from_a].as_flattened());
        if k_us == self.cell_ring.len() {
            // Emptied: the next cells are written from the start of the ring again
            // (`clear` resets its head), so a queue that fills and empties by the
            // burst keeps reusing the same memory, still in the CPU's caches,
            // instead of wrapping around all the capacity it ever grew to.
            self.cell_ring.clear();
        } else {
            self.cell_ring.drain(..k_us);
        }
        k
    }

    /// Drops everything waiting; returns the cells and the units dropped (a cell
    /// counts as a unit).
    pub(crate) fn flush(&mut self) -> (u32, usize) {
        let units = self
            .units
            .iter()
            .map(|u| match u {
                Unit::Cells(n) => *n as usize,
                Unit::Frame { .. } => 1,
            })
            .sum();
        let dropped = (self.cells, units);
        self.units.clear();
        self.cell_ring.clear();
        self.cells = 0;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(i: u8) -> [u8; CELL_LEN] {
        [i; CELL_LEN]
    }

    #[test]
    fn runs_of_cells_between_frames_keep_their_order() {
        let mut q = VcQueue::default();
        let frame = Transmit::Frame {
            header: vcframe::Repr {
                kind: vcframe::FrameKind::Data,
                ci: false,
                clp: false,
                vpi: 0,
                vci: 32,
            },
            sdu: Bytes::from_static(&[7; 100]),
        };
        for i in 0..3 {
            q.push(Transmit::Cell(cell(i)), 1);
        }
        q.push(frame.clone(), 3);
        q.push_cell(cell(3));
        assert_eq!((q.cells(), q.max_cells(), q.head_run()), (7, 7, 3));
        let mut out = Vec::new();
        assert_eq!(q.pop_cells(2, &mut out), 2);
        assert_eq!(out, [cell(0), cell(1)].as_flattened());
        assert_eq!(q.pop(), Some(Transmit::Cell(cell(2))));
        assert_eq!((q.head_run(), q.head_cells()), (0, Some(3)));
        assert_eq!(q.pop_cells(5, &mut out), 0);
        assert_eq!(q.pop(), Some(frame));
        assert_eq!(q.pop_cells(5, &mut out), 1);
        assert_eq!(&out[2 * CELL_LEN..], &cell(3));
        assert!(q.is_empty());
        assert_eq!(q.cells(), 0);
        q.push_cell(cell(9));
        q.push_cell(cell(9));
        assert_eq!(q.flush(), (2, 2));
        assert!(q.is_empty() && q.pop().is_none());
    }
}
