//! Conversion between the cell mode and the frame mode on one VC (issue 13): AAL5
//! segmentation of a frame leaving on a cell port and reassembly of cells leaving on
//! a frame port (I.363.5; the cell and frame headers carry the same VPI, VCI, CLP and
//! EFCI, `wire::vcframe`).
//!
//! A frame bound for a cell port is cut into its CPCS-PDU's cells when it is queued,
//! so the cell port's scheduler interleaves them with other VCs' cells as a line
//! would. Cells bound for a frame port are gathered per VC in a [`FrameAssembly`]
//! and the frame is queued whole at its last cell, after the CRC-32 and Length
//! checks; a broken frame is dropped and counted ([`DropCause::Reassembly`]), as is a
//! partial frame older than the output port's reassembly timeout
//! ([`DropCause::ReassemblyTimeout`]). Memory per VC is bounded by the largest SDU
//! (65,535 octets); a frame that would pass it is dropped.
//!
//! A cell that is a frame by itself — an OAM F5 cell the switch does not answer
//! (PTI 100/101) or an ABR RM cell (PTI 110) — travels as one frame whose SDU is the
//! 48-octet cell payload: kind OAM with the flow in the `C` bit (segment 0,
//! end-to-end 1; `wire::oam`), or kind RM (`wire::rm`); and such a frame leaves a
//! cell port as one cell of the PTI `vcframe::Repr::single_cell_pti` gives, not as
//! AAL5. Other units with no form on the output port are dropped
//! ([`DropCause::Unconvertible`]).

use std::time::Duration;

use bytes::Bytes;
use natm_proto::time::Instant;
use natm_proto::wire::aal5::{Reassembler, Segmenter};
use natm_proto::wire::cell::{
    HeaderFormat, HeaderRepr, Pti, CELL_LEN, HEADER_LEN, PAYLOAD_LEN, VCI_SIGNALLING,
};
use natm_proto::wire::oam::Scope;
use natm_proto::wire::vcframe::{self, FrameKind};

use crate::queue::Transmit;
use crate::stats::DropCause;

/// What one cell did to its VC's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Assembled {
    /// Taken into the frame in progress.
    Partial,
    /// The frame is complete and good.
    Frame {
        /// Its VC header (VPI/VCI as received; the caller translates).
        header: vcframe::Repr,
        /// The SDU.
        sdu: Bytes,
    },
    /// The frame was dropped: why, and how many of its cells (this one included).
    Dropped(DropCause, u32),
}

/// The reassembly of one VC whose cells leave as frames.
#[derive(Debug)]
pub(crate) struct FrameAssembly {
    rx: Reassembler,
    /// A partial frame this much older than its first cell is dropped.
    timeout: Duration,
    started: Instant,
    clp: bool,
    efci: bool,
    /// Dropping the rest of a frame abandoned upstream, up to its last cell.
    skipping: bool,
}

impl FrameAssembly {
    pub(crate) fn new(timeout: Duration) -> FrameAssembly {
        FrameAssembly {
            rx: Reassembler::new(),
            timeout,
            started: Instant::ZERO,
            clp: false,
            efci: false,
            skipping: false,
        }
    }

    /// Cells of the frame in progress.
    pub(crate) fn buffered(&self) -> u32 {
        u32::try_from(self.rx.buffered_cells()).unwrap_or(u32::MAX)
    }

    /// Drops the frame in progress because one of its cells was dropped before it got
    /// here; the rest of it, up to its last cell, is dropped on arrival. Returns the
    /// cells it held.
    pub(crate) fn abandon(&mut self, end_of_frame: bool) -> u32 {
        let n = self.buffered();
        self.rx.reset();
        self.skipping = !end_of_frame;
        n
    }

    /// Drops the frame in progress if it began more than the timeout before `now`;
    /// returns the cells it held.
    pub(crate) fn expire(&mut self, now: Instant) -> u32 {
        let n = self.buffered();
        if n > 0 && now.saturating_duration_since(self.started) > self.timeout {
            self.rx.reset();
            n
        } else {
            0
        }
    }

    /// Takes one user-data cell (header already checked and parsed).
    pub(crate) fn push(
        &mut self,
        now: Instant,
        cell: &[u8; CELL_LEN],
        vpi: u8,
        vci: u16,
        pti: Pti,
        clp: bool,
    ) -> Assembled {
        let eof = pti.is_end_of_sdu();
        if self.skipping {
            self.skipping = !eof;
            return Assembled::Dropped(DropCause::Ppd, 1);
        }
        if self.rx.buffered_cells() == 0 {
            self.started = now;
            self.clp = false;
            self.efci = false;
        }
        self.clp |= clp;
        self.efci |= pti.congestion_experienced();
        let cells = self.buffered() + 1;
        match self.rx.push_cell(cell) {
            Ok(None) => Assembled::Partial,
            Ok(Some(sdu)) => Assembled::Frame {
                header: vcframe::Repr {
                    kind: if vci == VCI_SIGNALLING {
                        FrameKind::Signalling
                    } else {
                        FrameKind::Data
                    },
                    ci: self.efci,
                    clp: self.clp,
                    vpi,
                    vci,
                },
                sdu: Bytes::copy_from_slice(sdu),
            },
            // CRC-32, Length, pad or size: the frame is useless (I.363.5).
            Err(_) => Assembled::Dropped(DropCause::Reassembly, cells),
        }
    }
}

/// A cell that is a frame by itself (an OAM F5 or an RM cell) as its frame on
/// `vpi`/`vci` (already translated): its 48-octet payload is the SDU; an OAM cell's
/// flow (PTI 100/101) goes in the `C` bit (`wire::oam::Scope::frame_header`), an RM
/// frame's `C` is 0 (`wire::rm`). `None` for any other PTI.
pub(crate) fn single_cell_frame(
    cell: &[u8; CELL_LEN],
    vpi: u8,
    vci: u16,
    clp: bool,
) -> Option<Transmit> {
    let pti = Pti::from_bits(cell[3] >> 1);
    let header = match Scope::of_pti(pti) {
        Some(scope) => scope.frame_header(vpi, vci),
        None if pti == Pti::ResourceManagement => vcframe::Repr::new(FrameKind::Rm, vpi, vci),
        None => return None,
    };
    Some(Transmit::Frame {
        header: vcframe::Repr { clp, ..header },
        sdu: Bytes::copy_from_slice(&cell[HEADER_LEN..]),
    })
}

/// Cells a frame takes once converted for a cell port: its AAL5 cells, or one for a
/// frame that is one cell (OAM, RM); `None` if it has no cell form (an empty SDU, an
/// OAM or RM frame that is not one cell payload).
pub(crate) fn cell_form_len(header: &vcframe::Repr, sdu_len: usize) -> Option<u32> {
    match header.single_cell_pti() {
        Some(_) => (sdu_len == PAYLOAD_LEN).then_some(1),
        None if sdu_len == 0 || sdu_len > natm_proto::wire::aal5::MAX_SDU_LEN => None,
        None => u32::try_from(natm_proto::wire::aal5::cell_count(sdu_len)).ok(),
    }
}

/// Cuts a frame into the cells of a cell port with header `format`, on `vpi`/`vci`
/// (already translated), CLP and EFCI from the frame header, handing each to `out`.
/// The caller has checked [`cell_form_len`].
pub(crate) fn segment(
    header: &vcframe::Repr,
    sdu: &[u8],
    format: HeaderFormat,
    vpi: u16,
    vci: u16,
    mut out: impl FnMut([u8; CELL_LEN]),
) {
    let cell_header = |pti| HeaderRepr {
        format,
        gfc: 0,
        vpi,
        vci,
        pti,
        clp: header.clp,
    };
    if let Some(pti) = header.single_cell_pti() {
        // OAM or RM: one cell of its own PTI, the payload unchanged.
        let mut cell = [0u8; CELL_LEN];
        cell[..HEADER_LEN].copy_from_slice(&cell_header(pti).to_bytes());
        cell[HEADER_LEN..].copy_from_slice(sdu);
        out(cell);
        return;
    }
    let Ok(seg) = Segmenter::new(sdu, cell_header(Pti::UserData)) else {
        return;
    };
    let seg = if header.ci { seg.congested() } else { seg };
    for cell in seg {
        out(cell);
    }
}
