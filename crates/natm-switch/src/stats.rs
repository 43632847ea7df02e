//! Counters per port and per VC, and the typed snapshot [`crate::Switch::stat`]
//! returns.
//!
//! Where a cell is counted: a port counts what arrived on it (cells and frames in,
//! HEC errors, unknown VCs, policing, tagging) and what its output queue did (cells
//! and frames out, queue drops, EPD/PPD, depth); a VC counts all of it for itself.
//! Drops are in cells (a frame of the frame mode counts its AAL5 cells).

use crate::sched::SchedulerKind;
use crate::table::{ConnId, CrossConnect, PortId};
use crate::upc::Contract;

/// Why a cell (or a frame's cells) was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum DropCause {
    /// No cross-connect for its VPI/VCI on the port it came in on.
    UnknownVc,
    /// A header error the I.432.1 receiver would not correct.
    Hec,
    /// Non-conforming to its contract, which says discard.
    Policing,
    /// The VC's or the port's buffer was full.
    QueueFull,
    /// A tagged (CLP = 1) cell refused above the port's CLP threshold.
    Clp,
    /// Early packet discard: its frame was refused at the first cell.
    Epd,
    /// Partial packet discard: an earlier cell of its frame was dropped.
    Ppd,
    /// Still queued when its VC was disconnected.
    Flushed,
    /// Its frame failed AAL5 reassembly for a frame port (CRC-32, Length, or more
    /// cells than the largest SDU).
    Reassembly,
    /// Its frame was still incomplete at the output port's reassembly timeout.
    ReassemblyTimeout,
    /// It has no form on its output port (an empty frame or a malformed OAM frame
    /// bound for cells, a non-AAL5 cell bound for frames).
    Unconvertible,
}

/// Cells dropped, by cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Drops {
    /// [`DropCause::UnknownVc`].
    pub unknown_vc: u64,
    /// [`DropCause::Hec`].
    pub hec: u64,
    /// [`DropCause::Policing`].
    pub policing: u64,
    /// [`DropCause::QueueFull`].
    pub queue_full: u64,
    /// [`DropCause::Clp`].
    pub clp: u64,
    /// [`DropCause::Epd`].
    pub epd: u64,
    /// [`DropCause::Ppd`].
    pub ppd: u64,
    /// [`DropCause::Flushed`].
    pub flushed: u64,
    /// [`DropCause::Reassembly`].
    pub reassembly: u64,
    /// [`DropCause::ReassemblyTimeout`].
    pub reassembly_timeout: u64,
    /// [`DropCause::Unconvertible`].
    pub unconvertible: u64,
}

impl Drops {
    /// Adds `cells` to the counter of `cause`.
    #[inline]
    pub fn add(&mut self, cause: DropCause, cells: u64) {
        let c = match cause {
            DropCause::UnknownVc => &mut self.unknown_vc,
            DropCause::Hec => &mut self.hec,
            DropCause::Policing => &mut self.policing,
            DropCause::QueueFull => &mut self.queue_full,
            DropCause::Clp => &mut self.clp,
            DropCause::Epd => &mut self.epd,
            DropCause::Ppd => &mut self.ppd,
            DropCause::Flushed => &mut self.flushed,
            DropCause::Reassembly => &mut self.reassembly,
            DropCause::ReassemblyTimeout => &mut self.reassembly_timeout,
            DropCause::Unconvertible => &mut self.unconvertible,
        };
        *c += cells;
    }

    /// Every cell dropped, whatever the cause.
    pub fn total(&self) -> u64 {
        self.unknown_vc
            + self.hec
            + self.policing
            + self.queue_full
            + self.clp
            + self.epd
            + self.ppd
            + self.flushed
            + self.reassembly
            + self.reassembly_timeout
            + self.unconvertible
    }
}

/// The traffic counters a port and a VC share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Cells received (a frame counts its AAL5 cells).
    pub cells_in: u64,
    /// Cells sent.
    pub cells_out: u64,
    /// AAL5 frames received: frame-mode datagrams, and cells with AUU = 1.
    pub frames_in: u64,
    /// AAL5 frames sent, counted the same way.
    pub frames_out: u64,
    /// Cells tagged CLP = 1 by policing.
    pub tagged: u64,
    /// Cells dropped, by cause.
    pub dropped: Drops,
}

/// ERICA's figures for one averaging interval of a port (`abr`'s module doc).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AbrInterval {
    /// Cells/s of ABR VCs that reached the port (RM cells included).
    pub input_rate: f64,
    /// Cells/s ERICA aims ABR at: 0.9 × (line − what non-ABR connections reserve).
    pub target: f64,
    /// The load factor z: input rate / target.
    pub load: f64,
    /// target / active ABR VCs, cells/s.
    pub fair_share: f64,
    /// ABR VCs with a cell in the interval.
    pub active_vcs: u32,
}

/// A port's ABR state: ERICA's last interval and what it did to RM cells, and EFCI.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AbrStats {
    /// The last full averaging interval; `None` before the first (RM cells pass
    /// untouched until then).
    pub interval: Option<AbrInterval>,
    /// Forward RM cells (and RM frames) routed to the port.
    pub rm_forward: u64,
    /// Backward RM cells routed to the port (never edited).
    pub rm_backward: u64,
    /// Forward RM cells whose ER the port lowered.
    pub rm_marked: u64,
    /// RM cells that are not ABR RM cells natm reads (length, protocol ID, CRC-10):
    /// passed on untouched.
    pub rm_invalid: u64,
    /// Data cells the port marked EFCI (a frame counts its AAL5 cells) because its
    /// queue was above the EFCI threshold.
    pub efci_marked: u64,
}

/// A port's counters and queue.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PortStats {
    /// The port.
    pub port: PortId,
    /// Line rate, bits per second.
    pub line_rate: u64,
    /// Its scheduler.
    pub scheduler: SchedulerKind,
    /// Traffic counters.
    pub counters: Counters,
    /// Headers with a single-bit error, corrected (I.432.1).
    pub hec_corrected: u64,
    /// Idle and unassigned cells (VPI 0, VCI 0) received and ignored.
    pub idle_cells: u64,
    /// OAM F5 loopback cells answered.
    pub oam_looped: u64,
    /// Cells and frames received on locally terminated VCs (for the control plane).
    pub local_in: u64,
    /// Cells and frames the control plane sent out of this port.
    pub local_out: u64,
    /// Cells waiting in the output queues now.
    pub queue_cells: u32,
    /// The most cells that ever waited.
    pub max_queue_cells: u32,
    /// The buffer, in cells.
    pub buffer_cells: u32,
    /// Above this many queued cells, data leaving the port is marked EFCI (`None`: off).
    pub efci_threshold: Option<u32>,
    /// ABR: ERICA and EFCI.
    pub abr: AbrStats,
}

/// A cross-connect's counters and queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VcStats {
    /// The connection.
    pub conn: ConnId,
    /// What it joins.
    pub xc: CrossConnect,
    /// Its contract.
    pub contract: Contract,
    /// Traffic counters.
    pub counters: Counters,
    /// OAM F5 loopback cells and frames answered on it.
    pub oam_looped: u64,
    /// OAM F5 cells and frames switched along it (not answered here: end-to-end
    /// loopbacks and their answers, other OAM functions).
    pub oam_forwarded: u64,
    /// RM cells and frames switched along it.
    pub rm_forwarded: u64,
    /// Whether it is an ABR VC: it has carried a forward RM cell.
    pub abr: bool,
    /// Cells waiting in its output queue now.
    pub queue_cells: u32,
    /// The most cells that ever waited.
    pub max_queue_cells: u32,
}

/// Everything [`crate::Switch::stat`] reports: ports in id order, VCs in connection
/// order.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SwitchStats {
    /// Every port.
    pub ports: Vec<PortStats>,
    /// Every cross-connect.
    pub vcs: Vec<VcStats>,
}
