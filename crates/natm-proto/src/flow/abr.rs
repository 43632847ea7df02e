//! ABR source behaviour (ATM Forum TM 4.0 §5.10.4, the explicit-rate subset): the
//! sender's allowed cell rate (ACR) moves between MCR and PCR on the feedback of RM
//! cells the network and the destination return.
//!
//! - TPDUs leave paced at ACR, counted in the cells of their AAL5 frames (a token
//!   bucket in cell units, [`LeakyBucket`] with cells for bytes).
//! - Source rule 3: the first cell after a start is a forward RM cell (FRM), and one
//!   follows every [`AbrConfig::nrm`] cells, or after [`AbrConfig::trm`] when at
//!   least [`AbrConfig::mrm`] cells went since the last one. An FRM carries CCR = ACR,
//!   ER = PCR, MCR; the PSB hands it out by [`FlowController::poll_rm`] and the
//!   engine sends it as an RM frame on the VC. FRMs are in-rate: each costs a cell of
//!   the bucket.
//! - Source rule 8, on a backward RM cell (BRM, [`FlowController::on_backward_rm`]):
//!   CI = 1 cuts ACR by ACR·RDF; else NI = 0 raises it by RIF·PCR; then ACR is held
//!   to at most ER and PCR and at least MCR.
//! - Rule 6: when [`AbrConfig::crm`] FRMs went without a BRM back, ACR is cut by
//!   ACR·CDF (not below MCR): feedback lost means slow down.
//! - Rule 5: after [`AbrConfig::adtf`] without sending, ACR goes back to ICR before
//!   the next FRM (a source that was idle does not keep an old, high rate).
//!
//! Losses do not change ACR (the network says what it wants through RM cells); SMART
//! retransmits as on any VC. Departures from TM 4.0: natm's unit of sending is a
//! TPDU, so an FRM goes before the first TPDU that would cross Nrm cells rather than
//! between cells; ICR defaults to PCR/16 (TM 4.0 negotiates it at setup and its
//! default is PCR) so a new VC does not start at a PCR the network may never give it,
//! and to [`DEFAULT_ICR_BPS`] when the QoS names no PCR;
//! CRM defaults to 16 rather than TBE/Nrm (≈ 500,000 with the default TBE: rule 6
//! would never fire); TCR, BN = 1 cells and use-it-or-lose-it (rule 13's options)
//! are not implemented.

use std::time::Duration;

use super::leaky_bucket::LeakyBucket;
use super::{AckSample, FlowController, Permit};
use crate::time::Instant;
use crate::wire::aal5;
use crate::wire::cell::PAYLOAD_LEN;
use crate::wire::rm::{Direction, Rate, RmCell};
use crate::wire::tpdu;

/// PCR of an ABR VC whose QoS names none: 10 Gbit/s of cell payload (no cap but
/// what the network's explicit rate says).
pub const DEFAULT_PCR: f64 = 10e9 / (PAYLOAD_LEN as f64 * 8.0);

/// ICR of an ABR VC whose QoS names no PCR, payload bit/s (at least its MCR).
pub const DEFAULT_ICR_BPS: u64 = 10_000_000;

/// An ABR source's parameters (TM 4.0 Table 5-6 names), rates in cells per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AbrConfig {
    /// Peak cell rate: ACR never exceeds it.
    pub pcr: f64,
    /// Minimum cell rate: ACR never goes below it.
    pub mcr: f64,
    /// Initial cell rate: ACR at the start and after an idle spell.
    pub icr: f64,
    /// Rate increase factor: a BRM without CI or NI raises ACR by RIF·PCR.
    pub rif: f64,
    /// Rate decrease factor: a BRM with CI cuts ACR by ACR·RDF.
    pub rdf: f64,
    /// Cells between forward RM cells.
    pub nrm: u32,
    /// Fewest cells between forward RM cells sent for [`AbrConfig::trm`].
    pub mrm: u32,
    /// Longest time between forward RM cells while sending.
    pub trm: Duration,
    /// Forward RM cells without a backward one before rule 6 cuts ACR.
    pub crm: u32,
    /// Cut-off decrease factor of rule 6.
    pub cdf: f64,
    /// ACR decrease time factor: idle this long, ACR returns to ICR.
    pub adtf: Duration,
}

impl AbrConfig {
    /// TM 4.0's defaults (RIF = RDF = 1/16, Nrm = 32, Mrm = 2, Trm = 100 ms,
    /// CDF = 1/16, ADTF = 0.5 s) for `pcr` and `mcr`, with ICR = PCR/16 (at least
    /// MCR) and CRM = 16 (see the module doc).
    pub fn new(pcr: f64, mcr: f64) -> AbrConfig {
        let pcr = if pcr.is_finite() && pcr >= 1.0 {
            pcr
        } else {
            DEFAULT_PCR
        };
        let mcr = if mcr.is_finite() {
            mcr.clamp(0.0, pcr)
        } else {
            0.0
        };
        AbrConfig {
            pcr,
            mcr,
            icr: (pcr / 16.0).max(mcr),
            rif: 1.0 / 16.0,
            rdf: 1.0 / 16.0,
            nrm: 32,
            mrm: 2,
            trm: Duration::from_millis(100),
            crm: 16,
            cdf: 1.0 / 16.0,
            adtf: Duration::from_millis(500),
        }
    }
}

/// Cells of the AAL5 frame of a TPDU with `payload` octets.
pub fn tpdu_cells(payload: usize) -> u32 {
    u32::try_from(aal5::cell_count(payload + tpdu::HEADER_LEN)).unwrap_or(u32::MAX)
}

/// Cells per second of TPDUs of `tpdu_size` payload octets at `payload_bps`.
pub fn cells_per_s(payload_bps: u64, tpdu_size: u32) -> f64 {
    let tpdu = tpdu_size.max(1);
    payload_bps as f64 / (f64::from(tpdu) * 8.0) * f64::from(tpdu_cells(tpdu as usize))
}

/// Cell payload octets per second of `cells_per_s`: the leaky bucket's unit.
fn bucket_bps(cells_per_s: f64) -> u64 {
    (cells_per_s * (PAYLOAD_LEN as f64) * 8.0) as u64
}

/// An ABR source ([module doc](self)).
#[derive(Debug, Clone)]
pub struct Abr {
    cfg: AbrConfig,
    /// Payload octets of a full TPDU, to report ACR in payload bit/s.
    tpdu_size: u32,
    acr: f64,
    /// Paces cells at ACR: "bytes" are cells × 48.
    bucket: LeakyBucket,
    /// Cells sent since the last FRM; `None` before the first (rule 3: it is due).
    since_frm: Option<u32>,
    last_frm: Instant,
    /// FRMs sent since the last BRM came back (rule 6).
    unanswered: u32,
    /// When the last cell went (rule 5).
    last_sent: Option<Instant>,
    stats: AbrStats,
}

/// What an ABR source counted.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AbrStats {
    /// Forward RM cells sent.
    pub frm_sent: u64,
    /// Backward RM cells taken.
    pub brm_taken: u64,
    /// Of those, with CI set.
    pub brm_ci: u64,
    /// Times rule 6 cut ACR for missing feedback.
    pub missing_feedback: u64,
    /// The last explicit rate a BRM carried, cells/s.
    pub last_er: f64,
}

impl Abr {
    /// A source of `cfg` sending TPDUs of up to `tpdu_size` payload octets.
    pub fn new(cfg: AbrConfig, tpdu_size: u32) -> Abr {
        let depth = LeakyBucket::default_depth(bucket_bps(cfg.icr), Self::cell_octets(tpdu_size));
        Abr {
            cfg,
            tpdu_size: tpdu_size.max(1),
            acr: cfg.icr,
            bucket: LeakyBucket::new(bucket_bps(cfg.icr), depth),
            since_frm: None,
            last_frm: Instant::ZERO,
            unanswered: 0,
            last_sent: None,
            stats: AbrStats::default(),
        }
    }

    /// The parameters.
    pub fn config(&self) -> &AbrConfig {
        &self.cfg
    }

    /// The allowed cell rate, cells/s.
    pub fn acr(&self) -> f64 {
        self.acr
    }

    /// What it counted.
    pub fn stats(&self) -> AbrStats {
        self.stats
    }

    /// Cell octets (cells × 48) of a TPDU of `payload` octets: the bucket's cost.
    fn cell_octets(payload: u32) -> u32 {
        tpdu_cells(payload as usize).saturating_mul(PAYLOAD_LEN as u32)
    }

    fn set_acr(&mut self, acr: f64) {
        let acr = acr.min(self.cfg.pcr).max(self.cfg.mcr);
        if acr != self.acr {
            self.acr = acr;
            self.bucket.set_rate(bucket_bps(acr));
        }
    }

    fn count_cells(&mut self, now: Instant, cells: u32) {
        if let Some(n) = self.since_frm.as_mut() {
            *n = n.saturating_add(cells);
        }
        self.last_sent = Some(now);
    }

    /// Rule 3: whether an FRM is due before the next cells.
    fn frm_due(&self, now: Instant) -> bool {
        match self.since_frm {
            None => true,
            Some(n) => {
                n >= self.cfg.nrm
                    || (n >= self.cfg.mrm
                        && now.saturating_duration_since(self.last_frm) >= self.cfg.trm)
            }
        }
    }
}

impl FlowController for Abr {
    fn poll_send(&mut self, now: Instant, _in_flight: u32, bytes: usize) -> Permit {
        let cost = Self::cell_octets(u32::try_from(bytes).unwrap_or(u32::MAX));
        self.bucket.poll_send(now, 0, cost as usize)
    }

    fn on_sent(&mut self, now: Instant, bytes: usize, _retransmission: bool) {
        let cells = tpdu_cells(bytes);
        self.bucket.on_sent(
            now,
            cells.saturating_mul(PAYLOAD_LEN as u32) as usize,
            false,
        );
        self.count_cells(now, cells);
    }

    fn on_ack(&mut self, _sample: &AckSample) {}

    fn on_loss(&mut self, _now: Instant, _in_flight: u32, _next_seq: u64) {}

    fn on_timeout(&mut self, _now: Instant, _in_flight: u32) {}

    fn rate_bps(&self) -> Option<f64> {
        let per_tpdu = f64::from(tpdu_cells(self.tpdu_size as usize));
        Some(self.acr / per_tpdu * f64::from(self.tpdu_size) * 8.0)
    }

    fn poll_rm(&mut self, now: Instant) -> Option<RmCell> {
        if !self.frm_due(now) {
            return None;
        }
        // Rule 5: idle for ADTF, back to ICR.
        if self
            .last_sent
            .is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.adtf)
            && self.acr > self.cfg.icr
        {
            self.set_acr(self.cfg.icr);
        }
        // Rule 6: CRM FRMs without an answer, slow down.
        if self.unanswered >= self.cfg.crm {
            self.set_acr(self.acr - self.acr * self.cfg.cdf);
            self.stats.missing_feedback += 1;
        }
        let frm = RmCell::forward(
            Rate::from_cells(self.cfg.pcr),
            Rate::from_cells(self.acr),
            Rate::from_cells(self.cfg.mcr),
        );
        self.bucket.on_sent(now, PAYLOAD_LEN, false);
        self.since_frm = Some(0);
        self.count_cells(now, 0);
        self.last_frm = now;
        self.unanswered = self.unanswered.saturating_add(1);
        self.stats.frm_sent += 1;
        Some(frm)
    }

    fn on_backward_rm(&mut self, _now: Instant, cell: &RmCell) {
        if cell.dir != Direction::Backward {
            return;
        }
        self.stats.brm_taken += 1;
        self.unanswered = 0;
        let mut acr = self.acr;
        if cell.ci {
            self.stats.brm_ci += 1;
            acr -= acr * self.cfg.rdf;
        } else if !cell.ni {
            acr += self.cfg.rif * self.cfg.pcr;
        }
        let er = cell.er.cells();
        self.stats.last_er = er;
        self.set_acr(acr.min(er));
    }

    fn name(&self) -> &'static str {
        "abr"
    }
}

#[cfg(test)]
mod tests;
