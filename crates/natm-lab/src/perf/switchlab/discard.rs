//! Experiment 2, frame discard: four AAL5 VCs of 20-cell frames overload one output
//! port twice over, their cells interleaved on the input link as a multiplexer would
//! send them; whole frames counted at the receiver (AAL5 length and CRC-32) with tail
//! drop only, with PPD, and with EPD+PPD (Romanow & Floyd 1994).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::run::{measure, Outcome, Setup, Spread, Vc};
use super::traffic::{Pacing, SendPlan, Source};

/// The output line, cells/s.
pub(crate) const LINE: u64 = 10_000;
/// Offered load, multiples of the line.
pub(crate) const OVERLOAD: f64 = 2.0;
pub(crate) const VCS: u16 = 4;
/// 952 octets and the AAL5 trailer: 20 cells.
pub(crate) const SDU: usize = 952;
pub(crate) const FRAME_CELLS: usize = 20;
/// The output port's buffer and each VC's, cells; EPD at three quarters.
const BUFFER: u32 = 200;

/// What the output port does with a congested frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Discard {
    /// Cells are dropped as the buffer overflows, nothing more.
    TailDrop,
    /// Partial packet discard.
    Ppd,
    /// Early and partial packet discard.
    EpdPpd,
}

impl Discard {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Discard::TailDrop => "tail drop",
            Discard::Ppd => "PPD",
            Discard::EpdPpd => "EPD+PPD",
        }
    }
}

/// One run.
#[derive(Debug, Clone, Copy)]
pub(super) struct DiscardRun {
    offered: f64,
    frames: f64,
    broken: f64,
    goodput: f64,
    cells_out: f64,
    queue_full: f64,
    ppd: f64,
    epd: f64,
}

/// One discard mode over runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DiscardCase {
    pub(crate) discard: Discard,
    /// Cells/s offered by all VCs.
    pub(crate) offered_cells_per_s: Spread,
    /// Whole frames/s delivered (length and CRC-32 right).
    pub(crate) frames_per_s: Spread,
    /// Frames/s that arrived broken.
    pub(crate) broken_frames_per_s: Spread,
    /// Cells of whole frames delivered, as a fraction of the line's cells.
    pub(crate) goodput: Spread,
    /// Cells/s the output port sent.
    pub(crate) cells_out_per_s: Spread,
    /// Cells the output port dropped per run, by cause.
    pub(crate) dropped_queue_full: Spread,
    pub(crate) dropped_ppd: Spread,
    pub(crate) dropped_epd: Spread,
}

/// Runs one discard mode once.
pub(super) fn run(discard: Discard, secs: f64) -> anyhow::Result<DiscardRun> {
    let per_vc = LINE as f64 * OVERLOAD / f64::from(VCS);
    let total = per_vc * f64::from(VCS);
    let vcs = (0..VCS)
        .map(|i| Vc {
            source: Source::frames(32 + i, SDU),
            // One cell each in turn: VC i's cells at i/total, (i+VCS)/total, …
            pacing: Pacing {
                cells_per_s: per_vc,
                burst: 1,
                phase: Duration::from_secs_f64(f64::from(i) / total),
            },
            pvc: format!("buffer = {BUFFER}\nframe_discard = true\n"),
        })
        .collect();
    let out = match discard {
        Discard::TailDrop => "ppd = false\n".to_string(),
        Discard::Ppd => "ppd = true\n".to_string(),
        Discard::EpdPpd => format!("ppd = true\nepd = {}\n", BUFFER / 4 * 3),
    };
    let o = measure(Setup {
        line: LINE,
        out: format!("scheduler = \"fifo\"\nbuffer = {BUFFER}\ntrain = 8\n{out}"),
        vcs,
        plan: SendPlan {
            secs,
            tick: Duration::from_millis(2),
            slack: Duration::from_millis(50),
        },
        sdu: Some(SDU),
        sample_ms: None,
    })?;
    Ok(discard_run(&o))
}

fn discard_run(o: &Outcome) -> DiscardRun {
    let t = o.sent.elapsed_s.max(1e-9);
    let good: u64 = o.got.iter().map(|g| g.good_frames).sum();
    let bad: u64 = o.got.iter().map(|g| g.bad_frames).sum();
    DiscardRun {
        offered: o.sent.cells.iter().sum::<u64>() as f64 / t,
        frames: good as f64 / t,
        broken: bad as f64 / t,
        goodput: (good * FRAME_CELLS as u64) as f64 / (LINE as f64 * t),
        cells_out: o.out_port(&["counters", "cells_out"]) as f64 / t,
        queue_full: o.out_port(&["counters", "dropped", "queue_full"]) as f64,
        ppd: o.out_port(&["counters", "dropped", "ppd"]) as f64,
        epd: o.out_port(&["counters", "dropped", "epd"]) as f64,
    }
}

/// Medians over runs.
pub(super) fn summarize(discard: Discard, r: &[DiscardRun]) -> DiscardCase {
    DiscardCase {
        discard,
        offered_cells_per_s: Spread::over(r, |x| x.offered),
        frames_per_s: Spread::over(r, |x| x.frames),
        broken_frames_per_s: Spread::over(r, |x| x.broken),
        goodput: Spread::over(r, |x| x.goodput),
        cells_out_per_s: Spread::over(r, |x| x.cells_out),
        dropped_queue_full: Spread::over(r, |x| x.queue_full),
        dropped_ppd: Spread::over(r, |x| x.ppd),
        dropped_epd: Spread::over(r, |x| x.epd),
    }
}
