//! Experiment 1, policing: two CBR VCs with the same contract through the switch; one
//! sender is shaped to its contract, the other sends twice as fast (an application
//! bypassing its bucket). GCRA at the switch's input cuts the violator to its
//! contract (discard) or marks its excess CLP = 1 (tag) and leaves the other alone.

use serde::{Deserialize, Serialize};

use super::run::{measure, Outcome, Setup, Spread, Vc};
use super::traffic::{Pacing, SendPlan, Source};
use std::time::Duration;

/// Each VC's contract, cells/s.
pub(crate) const CONTRACT: u64 = 2_000;
/// The violator's rate, as a multiple of the contract.
pub(crate) const EXCESS: f64 = 2.0;
/// Cell delay variation tolerance: the jitter a conforming VC may pick up between
/// its sender and the switch's input (sender and switch share two loaded CPUs, so a
/// process may be off its CPU for tens of ms) before policing takes its cells.
pub(crate) const CDVT_US: u64 = 100_000;
/// The output line: far above both VCs, so that only policing takes cells.
const LINE: u64 = 100_000;

/// What a violating cell gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Violation {
    Discard,
    Tag,
}

/// One VC of one run.
#[derive(Debug, Clone, Copy)]
pub(super) struct VcRun {
    offered: f64,
    delivered: f64,
    delivered_clp0: f64,
    policing_drops: f64,
    tagged: f64,
}

/// One VC over runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PolicedVc {
    /// Cells/s the sender sent.
    pub(crate) offered_cells_per_s: Spread,
    /// Cells/s that reached the receiver (CLP 0 or 1).
    pub(crate) delivered_cells_per_s: Spread,
    /// Of those, cells/s still CLP = 0.
    pub(crate) delivered_clp0_cells_per_s: Spread,
    /// Cells the switch discarded by policing, per run.
    pub(crate) policing_drops: Spread,
    /// Cells the switch tagged, per run.
    pub(crate) tagged: Spread,
}

/// One violation mode: both VCs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PolicingCase {
    pub(crate) violation: Violation,
    pub(crate) conforming: PolicedVc,
    pub(crate) violating: PolicedVc,
}

/// Runs both VCs once; [conforming, violating].
pub(super) fn run(violation: Violation, secs: f64) -> anyhow::Result<[VcRun; 2]> {
    let tag = violation == Violation::Tag;
    let pvc =
        format!("pcr = {CONTRACT}\ncdvt_us = {CDVT_US}\ntag = {tag}\nframe_discard = false\n");
    // Trains every 5 ms: 10 cells at the contract, 20 at twice it.
    let vc = |i: u16, rate: f64| Vc {
        source: Source::stamped(32 + i),
        pacing: Pacing {
            cells_per_s: rate,
            burst: (rate / 200.0).round() as usize,
            phase: Duration::ZERO,
        },
        pvc: pvc.clone(),
    };
    let o = measure(Setup {
        line: LINE,
        out: "train = 32\n".into(),
        vcs: vec![vc(0, CONTRACT as f64), vc(1, CONTRACT as f64 * EXCESS)],
        plan: SendPlan {
            secs,
            tick: Duration::from_millis(5),
            // A shaper that fell behind skips ahead rather than bursting.
            slack: Duration::from_millis(20),
        },
        sdu: None,
        sample_ms: None,
    })?;
    Ok([vc_run(&o, 0), vc_run(&o, 1)])
}

fn vc_run(o: &Outcome, i: usize) -> VcRun {
    let t = o.sent.elapsed_s.max(1e-9);
    let g = &o.got[i];
    VcRun {
        offered: o.sent.cells[i] as f64 / t,
        delivered: g.cells as f64 / t,
        delivered_clp0: (g.cells - g.tagged) as f64 / t,
        policing_drops: o.vc(i, &["dropped", "policing"]) as f64,
        tagged: o.vc(i, &["tagged"]) as f64,
    }
}

/// Medians over runs.
pub(super) fn summarize(violation: Violation, runs: &[[VcRun; 2]]) -> PolicingCase {
    let vc = |i: usize| {
        let r: Vec<VcRun> = runs.iter().map(|x| x[i]).collect();
        PolicedVc {
            offered_cells_per_s: Spread::over(&r, |x| x.offered),
            delivered_cells_per_s: Spread::over(&r, |x| x.delivered),
            delivered_clp0_cells_per_s: Spread::over(&r, |x| x.delivered_clp0),
            policing_drops: Spread::over(&r, |x| x.policing_drops),
            tagged: Spread::over(&r, |x| x.tagged),
        }
    };
    PolicingCase {
        violation,
        conforming: vc(0),
        violating: vc(1),
    }
}
