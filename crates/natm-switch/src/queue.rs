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
    /// cell count of the SDU for a frame (1 for an OAM frame, the payload of one cell).
    pub fn cells(&self) -> u32 {
        match self {
            Transmit::Cell(_) => 1,
            Transmit::Frame { header, sdu } => frame_cells(header.kind, sdu.len()),
        }
    }
}

/// Cells a frame of `kind` with an SDU of `len` octets takes: its AAL5 cells (at
/// least 1), or 1 for an OAM frame of one cell payload.
pub(crate) fn frame_cells(kind: vcframe::FrameKind, len: usize) -> u32 {
    if kind == vcframe::FrameKind::Oam && len == natm_proto::wire::cell::PAYLOAD_LEN {
        return 1;
    }
    u32::try_from(cell_count(len).max(1)).unwrap_or(u32::MAX)
}

/// The queue of one VC at its output port.
#[derive(Debug, Default)]
pub(crate) struct VcQueue {
    units: VecDeque<Transmit>,
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
        self.units.front().map(Transmit::cells)
    }

    /// Appends a unit of `cells` cells (the caller has checked the limits).
    #[inline]
    pub(crate) fn push(&mut self, unit: Transmit, cells: u32) {
        self.units.push_back(unit);
        self.cells += cells;
        self.max_cells = self.max_cells.max(self.cells);
    }

    /// Removes the unit at the head.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Transmit> {
        let unit = self.units.pop_front()?;
        self.cells -= unit.cells();
        Some(unit)
    }

    /// Drops everything waiting; returns the cells and the units dropped.
    pub(crate) fn flush(&mut self) -> (u32, usize) {
        let dropped = (self.cells, self.units.len());
        self.units.clear();
        self.cells = 0;
        dropped
    }
}
