//! Usage parameter control: the traffic contract of a cross-connect and the GCRA that
//! polices its cells at the input port (specs.md §3, ITU-T I.371 / ATMF TM 4.0).
//!
//! CBR and UBR are policed with one GCRA(T, τ) on the CLP=0+1 flow, VBR with the dual
//! GCRA (PCR/CDVT and SCR/MBS). A non-conforming cell is tagged (CLP set to 1) or
//! discarded, as the contract says; its GCRA state is not updated (specs.md §3.2).
//! Departure from TM 4.0: the CLP=0 flow is not policed separately (natm's senders
//! shape CLP=0+1 only, specs.md §3.1).

use std::time::Duration;

use natm_proto::flow::gcra::cell_interval;
use natm_proto::flow::{Conformance, DualGcra, Gcra};
use natm_proto::time::Instant;
use natm_proto::wire::q2931::{CellRates, TrafficDescriptor};

use crate::error::SwitchError;

/// What happens to a cell that does not conform to its contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Violation {
    /// Discard it (I.371's default).
    #[default]
    Discard,
    /// Set its CLP to 1 and pass it on: it is dropped first under congestion
    /// (the tagging option of the traffic descriptor). A non-conforming cell that is
    /// already CLP = 1 is discarded: otherwise a sender could send at any rate by
    /// tagging its own cells.
    Tag,
}

/// Per-VC cells a queue may hold when the contract does not say.
pub const DEFAULT_VC_BUFFER_CELLS: u32 = 256;

/// The traffic contract of one direction of a cross-connect: the policing parameters
/// from the call's traffic descriptor, the reservation the scheduler honours, and the
/// queue it gets at the output port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Contract {
    /// Peak cell rate (cells/s, CLP=0+1); `None`: not policed (UBR without a PCR).
    pub pcr: Option<u64>,
    /// Cell delay variation tolerance τ of the PCR test.
    pub cdvt: Duration,
    /// Sustainable cell rate and maximum burst size (cells): a VBR contract.
    pub scr: Option<(u64, u32)>,
    /// What to do with a non-conforming cell.
    pub violation: Violation,
    /// Cells per second reserved at the output port (call admission's figure); the
    /// `wrr` scheduler weights the VC by it. 0: best effort.
    pub reserved: u64,
    /// Most cells the VC's output queue holds.
    pub buffer_cells: u32,
    /// Whether the VC carries AAL5 frames whose cells may be discarded frame by frame
    /// (EPD/PPD; the UNI 4.0 frame discard option).
    pub frame_discard: bool,
}

impl Default for Contract {
    fn default() -> Self {
        Contract::best_effort()
    }
}

impl Contract {
    /// UBR: not policed, nothing reserved, an AAL5 VC.
    pub const fn best_effort() -> Contract {
        Contract {
            pcr: None,
            cdvt: Duration::ZERO,
            scr: None,
            violation: Violation::Discard,
            reserved: 0,
            buffer_cells: DEFAULT_VC_BUFFER_CELLS,
            frame_discard: true,
        }
    }

    /// CBR: policed at `pcr` cells/s, which is also reserved.
    pub const fn cbr(pcr: u64) -> Contract {
        Contract {
            pcr: Some(pcr),
            reserved: pcr,
            ..Contract::best_effort()
        }
    }

    /// VBR: dual GCRA on `pcr` and `scr`/`mbs`; `scr` is reserved.
    pub const fn vbr(pcr: u64, scr: u64, mbs: u32) -> Contract {
        Contract {
            pcr: Some(pcr),
            scr: Some((scr, mbs)),
            reserved: scr,
            ..Contract::best_effort()
        }
    }

    /// The contract of one direction of a call's traffic descriptor (Q.2931 IE 0x59):
    /// PCR and SCR/MBS of the CLP=0+1 flow, tagging if the options ask for it in that
    /// direction, frame discard if they allow it. A best-effort descriptor reserves
    /// nothing; any other reserves its SCR, else its PCR.
    pub fn from_descriptor(td: &TrafficDescriptor, forward: bool) -> Contract {
        let rates: &CellRates = if forward { &td.fwd } else { &td.bwd };
        let opts = td.options.unwrap_or(0);
        let (tag, discard) = if forward {
            (
                TrafficDescriptor::TAG_FWD,
                TrafficDescriptor::FRAME_DISCARD_FWD,
            )
        } else {
            (
                TrafficDescriptor::TAG_BWD,
                TrafficDescriptor::FRAME_DISCARD_BWD,
            )
        };
        let pcr = rates.pcr01.map(u64::from);
        let scr = rates
            .scr01
            .map(|scr| (u64::from(scr), rates.mbs01.unwrap_or(1)));
        let reserved = if td.best_effort {
            0
        } else {
            scr.map(|s| s.0).or(pcr).unwrap_or(0)
        };
        Contract {
            pcr,
            scr,
            reserved,
            violation: if opts & tag != 0 {
                Violation::Tag
            } else {
                Violation::Discard
            },
            frame_discard: opts & discard != 0 || td.best_effort,
            ..Contract::best_effort()
        }
    }

    /// The same contract with cell delay variation tolerance `cdvt`.
    #[must_use]
    pub const fn with_cdvt(self, cdvt: Duration) -> Contract {
        Contract { cdvt, ..self }
    }

    /// The same contract, tagging instead of discarding.
    #[must_use]
    pub const fn tagging(self) -> Contract {
        Contract {
            violation: Violation::Tag,
            ..self
        }
    }

    /// The same contract with a per-VC queue of `cells`.
    #[must_use]
    pub const fn with_buffer(self, cells: u32) -> Contract {
        Contract {
            buffer_cells: cells,
            ..self
        }
    }

    /// The same contract with frame discard (EPD/PPD) allowed or not.
    #[must_use]
    pub const fn with_frame_discard(self, on: bool) -> Contract {
        Contract {
            frame_discard: on,
            ..self
        }
    }

    /// The same contract with `cells_per_sec` reserved.
    #[must_use]
    pub const fn with_reserved(self, cells_per_sec: u64) -> Contract {
        Contract {
            reserved: cells_per_sec,
            ..self
        }
    }

    pub(crate) fn validate(&self) -> Result<(), SwitchError> {
        if self.pcr == Some(0) {
            return Err(SwitchError::BadContract("PCR of 0 cells/s"));
        }
        if let Some((scr, mbs)) = self.scr {
            if scr == 0 || mbs == 0 {
                return Err(SwitchError::BadContract("SCR or MBS of 0"));
            }
            if self.pcr.is_none_or(|pcr| scr > pcr) {
                return Err(SwitchError::BadContract(
                    "SCR without a PCR at least as high",
                ));
            }
        }
        if self.buffer_cells == 0 {
            return Err(SwitchError::BadContract("a queue of 0 cells"));
        }
        Ok(())
    }
}

/// The GCRA(s) of one contract.
#[derive(Debug, Clone)]
pub(crate) enum Policer {
    /// Not policed.
    Off,
    /// GCRA(T, τ) on the PCR (CBR, UBR with a PCR).
    Peak(Gcra),
    /// The dual GCRA of VBR.
    Dual(DualGcra),
}

impl Policer {
    pub(crate) fn new(c: &Contract) -> Policer {
        match (c.pcr, c.scr) {
            (None, _) => Policer::Off,
            (Some(pcr), None) => Policer::Peak(Gcra::new(cell_interval(pcr), c.cdvt)),
            (Some(pcr), Some((scr, mbs))) => Policer::Dual(DualGcra::new(
                cell_interval(pcr),
                c.cdvt,
                cell_interval(scr),
                mbs,
                None,
            )),
        }
    }

    /// Whether the VC is unpoliced (every cell conforms, and nothing changes).
    #[inline]
    pub(crate) fn is_off(&self) -> bool {
        matches!(self, Policer::Off)
    }

    /// ITU-T I.371 GCRA: the verdict on one cell arriving at `t`; only a conforming
    /// cell moves the state on.
    #[inline]
    pub(crate) fn police(&mut self, t: Instant) -> bool {
        match self {
            Policer::Off => true,
            Policer::Peak(g) => g.conforms(t),
            Policer::Dual(g) => g.conforms(t),
        }
    }

    /// The verdict on a frame of `cells` cells that arrived back to back from `t`,
    /// one every `spacing` (the input line's cell time): it conforms only if every
    /// cell does, and a non-conforming frame leaves the state as it was, as a
    /// non-conforming cell does.
    pub(crate) fn police_frame(&mut self, t: Instant, cells: u32, spacing: Duration) -> bool {
        // An unpoliced VC's frame conforms without a trial of each of its cells.
        if matches!(self, Policer::Off) {
            return true;
        }
        let mut trial = self.clone();
        let mut at = t;
        for _ in 0..cells {
            if !trial.police(at) {
                return false;
            }
            at += spacing;
        }
        *self = trial;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_to_contract() {
        let mut td = TrafficDescriptor::best_effort(1000, 500);
        let c = Contract::from_descriptor(&td, true);
        assert_eq!((c.pcr, c.reserved, c.frame_discard), (Some(1000), 0, true));
        assert_eq!(Contract::from_descriptor(&td, false).pcr, Some(500));
        td.best_effort = false;
        td.fwd.scr01 = Some(400);
        td.fwd.mbs01 = Some(10);
        td.options = Some(TrafficDescriptor::TAG_FWD);
        let c = Contract::from_descriptor(&td, true);
        assert_eq!(c.scr, Some((400, 10)));
        assert_eq!(c.reserved, 400);
        assert_eq!(c.violation, Violation::Tag);
        assert!(!c.frame_discard);
        assert_eq!(
            Contract::from_descriptor(&td, false).violation,
            Violation::Discard
        );
        c.validate().unwrap();
        assert!(Contract::cbr(0).validate().is_err());
        assert!(Contract::vbr(10, 20, 1).validate().is_err());
    }

    #[test]
    fn a_frame_is_policed_as_its_cells_and_a_bad_one_changes_nothing() {
        // PCR 1000 cells/s (1 ms), τ = 0: cells spaced 1 ms conform, closer ones not.
        let mut p = Policer::new(&Contract::cbr(1000));
        let ms = Duration::from_millis(1);
        assert!(p.police_frame(Instant::ZERO, 5, ms));
        // The next conforming time is 5 ms; a 3-cell frame at 4 ms fails at once…
        assert!(!p.police_frame(Instant::ZERO + 4 * ms, 3, ms));
        // …and left the TAT at 5 ms.
        assert!(p.police_frame(Instant::ZERO + 5 * ms, 3, ms));
        assert!(!p.police(Instant::ZERO + 7 * ms));
    }
}
