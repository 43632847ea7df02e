//! Experiment 3, cell-level against packet-level smoothing (seed 001 §7): the same
//! load from four VCs through one output port, sent either as cells spaced evenly or
//! as each frame's cells back to back at the input line's speed; the port's queue
//! (its peak, and its mean from the stat file sampled every few ms) and each cell's
//! delay through the switch measured at the receiver; then the same with VC buffers
//! shorter than a frame, where the seed expects bursts to lose cells.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::run::{measure, Outcome, Setup, Spread, Vc};
use super::traffic::{Pacing, SendPlan, Source};
use crate::perf::stats::percentile;

/// The output line, cells/s.
pub(crate) const LINE: u64 = 5_000;
/// Offered load, a fraction of the line.
pub(crate) const LOAD: f64 = 0.8;
pub(crate) const VCS: u16 = 4;
/// Cells per frame in packet-level smoothing.
pub(crate) const FRAME_CELLS: usize = 20;
/// Each VC's buffer, cells: deep enough for any burst, and shorter than a frame.
pub(crate) const DEEP_BUFFER: u32 = 4096;
pub(crate) const SHORT_BUFFER: u32 = 10;
/// How often the switch writes its counters and the queue is sampled, ms.
const SAMPLE_MS: u64 = 5;

/// How the senders space their cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Smoothing {
    /// Every cell on its own, evenly spaced.
    Cell,
    /// A frame's cells back to back, frames evenly spaced.
    Packet,
}

/// One run.
#[derive(Debug, Clone, Copy)]
pub(super) struct SmoothingRun {
    offered: f64,
    delivered: f64,
    mean_train: f64,
    max_train: f64,
    max_queue: f64,
    mean_queue: f64,
    delay_p50_us: f64,
    delay_p99_us: f64,
    lost: f64,
}

/// One smoothing over runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SmoothingCase {
    pub(crate) smoothing: Smoothing,
    /// Each VC's buffer at the output port, cells.
    pub(crate) vc_buffer_cells: u32,
    pub(crate) offered_cells_per_s: Spread,
    pub(crate) delivered_cells_per_s: Spread,
    /// Cells per datagram the sender sent, on average and at most (a late wake-up
    /// sends what fell due meanwhile together).
    pub(crate) mean_cells_per_datagram: Spread,
    pub(crate) max_cells_per_datagram: Spread,
    /// The output port's peak queue, cells (`max_queue_cells`).
    pub(crate) max_queue_cells: Spread,
    /// Its mean over the samples of the stat file.
    pub(crate) mean_queue_cells: Spread,
    /// Each cell's time from the send call to the receiver, median and 99th
    /// percentile, µs; their difference is the jitter.
    pub(crate) delay_p50_us: Spread,
    pub(crate) delay_p99_us: Spread,
    /// Fraction of the cells sent that did not arrive.
    pub(crate) lost_fraction: Spread,
}

/// A fixed pseudo-random phase in [0, 1) for VC `i` (SplitMix64), so that runs
/// repeat and the VCs' frames fall at unrelated times.
fn phase(i: u16) -> f64 {
    let mut z = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(i) + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as f64 / u64::MAX as f64
}

/// Runs one smoothing once.
pub(super) fn run(smoothing: Smoothing, buffer: u32, secs: f64) -> anyhow::Result<SmoothingRun> {
    let per_vc = LINE as f64 * LOAD / f64::from(VCS);
    let total = per_vc * f64::from(VCS);
    let vcs = (0..VCS)
        .map(|i| {
            let pacing = match smoothing {
                Smoothing::Cell => Pacing {
                    cells_per_s: per_vc,
                    burst: 1,
                    phase: Duration::from_secs_f64(f64::from(i) / total),
                },
                Smoothing::Packet => Pacing {
                    cells_per_s: per_vc,
                    burst: FRAME_CELLS,
                    phase: Duration::from_secs_f64(phase(i) * FRAME_CELLS as f64 / per_vc),
                },
            };
            Vc {
                source: Source::stamped(32 + i),
                pacing,
                pvc: format!("buffer = {buffer}\nframe_discard = false\n"),
            }
        })
        .collect();
    let o = measure(Setup {
        line: LINE,
        // One cell per datagram out, so that cells leave at their own line slots.
        out: format!("scheduler = \"fifo\"\nbuffer = {DEEP_BUFFER}\ntrain = 1\n"),
        vcs,
        plan: SendPlan {
            secs,
            tick: Duration::ZERO,
            slack: Duration::from_millis(20),
        },
        sdu: None,
        sample_ms: Some(SAMPLE_MS),
    })?;
    Ok(smoothing_run(&o))
}

fn smoothing_run(o: &Outcome) -> SmoothingRun {
    let t = o.sent.elapsed_s.max(1e-9);
    let sent: u64 = o.sent.cells.iter().sum();
    let mut delays: Vec<u64> = o.got.iter().flat_map(|g| g.delays_ns.clone()).collect();
    delays.sort_unstable();
    let us = |p: f64| percentile(&delays, p).map_or(f64::NAN, |d| d as f64 / 1e3);
    let mean_queue = if o.queue.is_empty() {
        f64::NAN
    } else {
        o.queue.iter().sum::<u64>() as f64 / o.queue.len() as f64
    };
    let delivered: u64 = o.got.iter().map(|g| g.cells).sum();
    SmoothingRun {
        offered: sent as f64 / t,
        delivered: delivered as f64 / t,
        lost: sent.saturating_sub(delivered) as f64 / sent.max(1) as f64,
        mean_train: sent as f64 / o.sent.datagrams.max(1) as f64,
        max_train: o.sent.max_train as f64,
        max_queue: o.out_port(&["max_queue_cells"]) as f64,
        mean_queue,
        delay_p50_us: us(0.5),
        delay_p99_us: us(0.99),
    }
}

/// Medians over runs.
pub(super) fn summarize(smoothing: Smoothing, buffer: u32, r: &[SmoothingRun]) -> SmoothingCase {
    SmoothingCase {
        smoothing,
        vc_buffer_cells: buffer,
        offered_cells_per_s: Spread::over(r, |x| x.offered),
        delivered_cells_per_s: Spread::over(r, |x| x.delivered),
        mean_cells_per_datagram: Spread::over(r, |x| x.mean_train),
        max_cells_per_datagram: Spread::over(r, |x| x.max_train),
        max_queue_cells: Spread::over(r, |x| x.max_queue),
        mean_queue_cells: Spread::over(r, |x| x.mean_queue),
        delay_p50_us: Spread::over(r, |x| x.delay_p50_us),
        delay_p99_us: Spread::over(r, |x| x.delay_p99_us),
        lost_fraction: Spread::over(r, |x| x.lost),
    }
}
