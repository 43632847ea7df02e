//! A port: its line (rate, header format), its I.432.1 header receiver, and its
//! output side (buffer, scheduler, the time the line is next free).

use std::collections::VecDeque;
use std::time::Duration;

use natm_proto::time::Instant;
use natm_proto::wire::cell::{HeaderFormat, HecReceiver, CELL_LEN, HEADER_LEN};

use crate::abr::Erica;
use crate::error::SwitchError;
use crate::queue::Transmit;
use crate::sched::{Scheduler, SchedulerKind};
use crate::stats::{AbrStats, Counters, PortStats};
use crate::table::{PortId, Slot};

/// Bits a cell takes on the line, header included.
pub const CELL_BITS: u64 = CELL_LEN as u64 * 8;

/// Cells a port buffers when the configuration does not say.
pub const DEFAULT_BUFFER_CELLS: u32 = 4096;

/// Units (OAM answers, the control plane's cells and frames) a port's control queue
/// holds before it refuses more; they go out ahead of the VCs.
const CONTROL_QUEUE_UNITS: usize = 1024;

/// What a port's line carries, for conversion between the two UDP link modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum PortUnit {
    /// Whatever arrives: a cell leaves as a cell and a frame as a frame (no
    /// conversion).
    #[default]
    Any,
    /// Cells: frames bound here are segmented into AAL5 cells (cell mode).
    Cells,
    /// Frames: cells bound here are reassembled per VC into AAL5 frames (frame mode).
    Frames,
}

/// How long a frame port waits for the rest of a frame being reassembled when the
/// configuration does not say.
pub const DEFAULT_REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(1);

/// A port's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// Line rate in bits per second, cell headers included: a cell takes
    /// 53·8/rate seconds, a frame of n AAL5 cells n times that.
    pub line_rate: u64,
    /// The output scheduler.
    pub scheduler: SchedulerKind,
    /// Cell header format on this link (UNI: 8-bit VPI; NNI: 12-bit, between
    /// switches).
    pub format: HeaderFormat,
    /// Cells the output queues of this port hold in all.
    pub buffer_cells: u32,
    /// Above this many queued cells, tagged (CLP = 1) cells are refused, so that
    /// they are dropped first (I.371 selective discard by buffer threshold).
    pub clp_threshold: u32,
    /// Early packet discard: a frame whose first cell finds this many cells queued at
    /// the port (or its VC's queue as full in proportion) is refused whole. `None`:
    /// no EPD.
    pub epd_threshold: Option<u32>,
    /// Partial packet discard: after a cell of a frame is dropped, drop the rest of it
    /// but its last cell.
    pub ppd: bool,
    /// What the line carries: a VC bound here converts to it.
    pub unit: PortUnit,
    /// A frame port drops a partial frame this much older than its first cell when
    /// the next cell of its VC arrives.
    pub reassembly_timeout: Duration,
    /// EFCI (TM 4.0 §5.10.6, I.371): a data cell or frame that finds more than this
    /// many cells queued at the port leaves with its EFCI bit (a frame's `C` bit)
    /// set. `None`: never marked.
    pub efci_threshold: Option<u32>,
}

impl PortConfig {
    /// A port of `line_rate` bits/s: round robin, UNI, a 4096-cell buffer, CLP
    /// threshold and EPD at three quarters of it, EFCI above half of it, PPD on.
    pub const fn new(line_rate: u64) -> PortConfig {
        PortConfig {
            line_rate,
            scheduler: SchedulerKind::RoundRobin,
            format: HeaderFormat::Uni,
            buffer_cells: DEFAULT_BUFFER_CELLS,
            clp_threshold: DEFAULT_BUFFER_CELLS / 4 * 3,
            epd_threshold: Some(DEFAULT_BUFFER_CELLS / 4 * 3),
            ppd: true,
            unit: PortUnit::Any,
            reassembly_timeout: DEFAULT_REASSEMBLY_TIMEOUT,
            efci_threshold: Some(DEFAULT_BUFFER_CELLS / 2),
        }
    }

    /// The same port carrying `unit`.
    #[must_use]
    pub const fn unit(self, unit: PortUnit) -> PortConfig {
        PortConfig { unit, ..self }
    }

    /// The same port with reassembly timeout `t`.
    #[must_use]
    pub const fn reassembly_timeout(self, t: Duration) -> PortConfig {
        PortConfig {
            reassembly_timeout: t,
            ..self
        }
    }

    /// The same port with scheduler `kind`.
    #[must_use]
    pub const fn scheduler(self, kind: SchedulerKind) -> PortConfig {
        PortConfig {
            scheduler: kind,
            ..self
        }
    }

    /// The same port with header format `format`.
    #[must_use]
    pub const fn format(self, format: HeaderFormat) -> PortConfig {
        PortConfig { format, ..self }
    }

    /// The same port with a buffer of `cells`, its CLP and EPD thresholds (if EPD is
    /// on) moved to three quarters of it, its EFCI threshold (if on) to half.
    #[must_use]
    pub const fn buffer(self, cells: u32) -> PortConfig {
        let three_quarters = cells - cells / 4;
        PortConfig {
            buffer_cells: cells,
            clp_threshold: three_quarters,
            epd_threshold: match self.epd_threshold {
                Some(_) => Some(three_quarters),
                None => None,
            },
            efci_threshold: match self.efci_threshold {
                Some(_) => Some(cells / 2),
                None => None,
            },
            ..self
        }
    }

    /// The same port with EFCI marking above `threshold` queued cells, or off.
    #[must_use]
    pub const fn efci(self, threshold: Option<u32>) -> PortConfig {
        PortConfig {
            efci_threshold: threshold,
            ..self
        }
    }

    /// The same port with EPD at `threshold` cells, or off.
    #[must_use]
    pub const fn epd(self, threshold: Option<u32>) -> PortConfig {
        PortConfig {
            epd_threshold: threshold,
            ..self
        }
    }

    /// The same port with PPD on or off.
    #[must_use]
    pub const fn ppd(self, on: bool) -> PortConfig {
        PortConfig { ppd: on, ..self }
    }

    /// The same port with the CLP threshold at `cells`.
    #[must_use]
    pub const fn clp_threshold(self, cells: u32) -> PortConfig {
        PortConfig {
            clp_threshold: cells,
            ..self
        }
    }

    /// Cells per second the line carries (rounded down).
    pub const fn cells_per_sec(&self) -> u64 {
        self.line_rate / CELL_BITS
    }

    /// The time one cell takes on the line.
    pub fn cell_time(&self) -> Duration {
        Duration::from_nanos(cell_time_ps(self.line_rate) / 1000)
    }

    fn validate(&self) -> Result<(), SwitchError> {
        if self.line_rate < CELL_BITS {
            return Err(SwitchError::BadPortConfig(
                "line rate below one cell per second",
            ));
        }
        if self.buffer_cells == 0 {
            return Err(SwitchError::BadPortConfig("a buffer of 0 cells"));
        }
        Ok(())
    }
}

/// Picoseconds a cell takes at `rate` bits/s: kept in picoseconds so that the
/// rounding error of a long run is below 10⁻⁶ of the line rate.
const fn cell_time_ps(rate: u64) -> u64 {
    (CELL_BITS * 1_000_000_000_000) / rate
}

/// A port's state.
#[derive(Debug)]
pub(crate) struct Port {
    pub(crate) id: PortId,
    pub(crate) cfg: PortConfig,
    cell_ps: u64,
    pub(crate) hec: HecReceiver,
    /// The last header `hec` found valid, while it has found nothing else since.
    pub(crate) hec_memo: Option<[u8; HEADER_LEN]>,
    /// The last VPI/VCI looked up for a cell of this port and its table entry
    /// (cleared by every change of the table).
    pub(crate) lookup_memo: Option<(u16, u16, Slot)>,
    pub(crate) sched: Scheduler,
    /// OAM answers and the control plane's units, sent before any VC's.
    pub(crate) control: VecDeque<Transmit>,
    pub(crate) queue_cells: u32,
    pub(crate) max_queue_cells: u32,
    /// When the line finishes the unit it is sending, in picoseconds.
    next_free_ps: u64,
    pub(crate) counters: Counters,
    pub(crate) hec_corrected: u64,
    pub(crate) idle_cells: u64,
    pub(crate) oam_looped: u64,
    pub(crate) local_in: u64,
    pub(crate) local_out: u64,
    /// ERICA for the ABR VCs routed here.
    pub(crate) abr: Erica,
    /// Data cells marked EFCI here.
    pub(crate) efci_marked: u64,
}

impl Port {
    pub(crate) fn new(id: PortId, cfg: PortConfig) -> Result<Port, SwitchError> {
        cfg.validate()?;
        Ok(Port {
            id,
            cfg,
            cell_ps: cell_time_ps(cfg.line_rate),
            hec: HecReceiver::new(),
            hec_memo: None,
            lookup_memo: None,
            sched: Scheduler::new(cfg.scheduler),
            control: VecDeque::new(),
            local_in: 0,
            local_out: 0,
            queue_cells: 0,
            max_queue_cells: 0,
            next_free_ps: 0,
            counters: Counters::default(),
            hec_corrected: 0,
            idle_cells: 0,
            oam_looped: 0,
            abr: Erica::new(
                cfg.cells_per_sec(),
                Duration::from_nanos(cell_time_ps(cfg.line_rate) / 1000),
            ),
            efci_marked: 0,
        })
    }

    /// The spacing of cells arriving back to back on this line.
    pub(crate) fn cell_spacing(&self) -> Duration {
        Duration::from_nanos(self.cell_ps / 1000)
    }

    /// Whether anything waits to be sent.
    #[inline]
    pub(crate) fn backlogged(&self) -> bool {
        self.queue_cells > 0 || !self.control.is_empty()
    }

    /// Whether the line is free at `now`.
    #[inline]
    pub(crate) fn free_at(&self, now: Instant) -> bool {
        self.next_free_ps <= now.as_nanos().saturating_mul(1000)
    }

    /// How many cells in a row the line can start by `horizon` when the first takes
    /// it from `earliest` or from when it frees (the line free by `horizon`, so at
    /// least 1): what [`Port::free_at`] then [`Port::occupy`] of one cell, repeated,
    /// would allow.
    #[inline]
    pub(crate) fn cells_by(&self, earliest: Instant, horizon: Instant) -> u64 {
        let start = self
            .next_free_ps
            .max(earliest.as_nanos().saturating_mul(1000));
        let h = horizon.as_nanos().saturating_mul(1000);
        match (h.checked_sub(start), self.cell_ps) {
            (None, _) => 1,
            (Some(_), 0) => u64::MAX,
            (Some(d), ps) => 1 + d / ps,
        }
    }

    /// When the line is next free (rounded up to the nanosecond).
    pub(crate) fn next_free(&self) -> Instant {
        Instant::from_nanos(self.next_free_ps.div_ceil(1000))
    }

    /// Occupies the line from `now` (or from when it frees, if later) for `cells`.
    #[inline]
    pub(crate) fn occupy(&mut self, now: Instant, cells: u32) {
        let start = self.next_free_ps.max(now.as_nanos().saturating_mul(1000));
        self.next_free_ps = start.saturating_add(self.cell_ps.saturating_mul(u64::from(cells)));
    }

    /// Whether data leaving now is marked EFCI: the queue is above the threshold.
    #[inline]
    pub(crate) fn efci_congested(&self) -> bool {
        self.cfg
            .efci_threshold
            .is_some_and(|t| self.queue_cells > t)
    }

    /// Queues a unit ahead of the VCs; false if the control queue is full.
    pub(crate) fn push_control(&mut self, unit: Transmit) -> bool {
        if self.control.len() >= CONTROL_QUEUE_UNITS {
            return false;
        }
        self.control.push_back(unit);
        true
    }

    pub(crate) fn stats(&self) -> PortStats {
        PortStats {
            port: self.id,
            line_rate: self.cfg.line_rate,
            scheduler: self.cfg.scheduler,
            counters: self.counters,
            hec_corrected: self.hec_corrected,
            idle_cells: self.idle_cells,
            oam_looped: self.oam_looped,
            local_in: self.local_in,
            local_out: self.local_out,
            queue_cells: self.queue_cells,
            max_queue_cells: self.max_queue_cells,
            buffer_cells: self.cfg.buffer_cells,
            efci_threshold: self.cfg.efci_threshold,
            abr: AbrStats {
                efci_marked: self.efci_marked,
                ..self.abr.stats()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_time_in_picoseconds() {
        // 155.52 Mbit/s: 424 bits take 2.7263 µs.
        let cfg = PortConfig::new(155_520_000);
        assert_eq!(cfg.cell_time(), Duration::from_nanos(2726));
        let mut p = Port::new(PortId(0), PortConfig::new(424_000_000)).unwrap();
        assert!(p.free_at(Instant::ZERO));
        p.occupy(Instant::from_nanos(10), 3);
        assert_eq!(p.next_free(), Instant::from_nanos(3010));
        assert!(!p.free_at(Instant::from_nanos(3009)));
        // From 3010 on, one cell per µs: 3010, 4010, 5010 start by 5500.
        assert_eq!(p.cells_by(Instant::ZERO, Instant::from_nanos(5500)), 3);
        assert_eq!(
            p.cells_by(Instant::from_nanos(5000), Instant::from_nanos(5500)),
            1
        );
        assert_eq!(
            p.cells_by(Instant::from_nanos(9000), Instant::from_nanos(5500)),
            1
        );
        assert!(PortConfig::new(100).validate().is_err());
        assert_eq!(PortConfig::new(1).buffer(100).epd_threshold, Some(75));
        assert_eq!(PortConfig::new(1).epd(None).buffer(100).epd_threshold, None);
    }
}
