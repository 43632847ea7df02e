//! Cell-level against packet-level smoothing (seed 001 §7), measured as queue
//! occupancy at the switch port that is the bottleneck.
//!
//! seed 001 §7: "for each AAL5 frame, we can ask the card to introduce pauses of
//! length X cells for every 16-X cells it transmits at the line speed (of 155 Mbps)
//! ... (upto a value of X=6)". Three hosts on 155.52 Mbit/s links each send 20-cell
//! frames at 30 % of a 42.4 Mbit/s output port, paced frame by frame (packet-level
//! smoothing); the cells of a frame go back to back (X = 0), with the card's pauses
//! (X = 6), or spread evenly at the VC's rate (ideal cell-level smoothing).

use std::time::Duration;

use crate::common::*;
use natm_proto::time::Instant;
use natm_switch::{Contract, CrossConnect, PortConfig, PortId, Switch, VcAddr};

const HOST_LINE: u64 = 155_520_000;
const OUT_LINE: u64 = 42_400_000;
const VCS: u16 = 3;
const FRAMES: u32 = 2000;
const SDU: usize = 952;

/// How the cells of a frame are spaced.
#[derive(Clone, Copy, Debug)]
enum Smoothing {
    /// Pauses of `x` cell times after every 16 − x cells at the host's line rate.
    Card { x: u32 },
    /// Every cell one VC interval after the previous one.
    Even,
}

/// The output port's largest queue, in cells.
fn max_queue(s: Smoothing) -> u32 {
    let mut sw = Switch::new();
    let inputs: Vec<PortId> = (0..VCS)
        .map(|_| sw.add_port(PortConfig::new(HOST_LINE)).unwrap())
        .collect();
    let out = sw.add_port(PortConfig::new(OUT_LINE)).unwrap();
    for (i, &p) in inputs.iter().enumerate() {
        let i = i as u16;
        sw.connect(
            CrossConnect::vc(VcAddr::new(p, 1, 32 + i), VcAddr::new(out, 1, 40 + i)),
            Contract::best_effort(),
        )
        .unwrap();
    }
    let host_cell = PortConfig::new(HOST_LINE).cell_time();
    // 30 % of 100,000 cells/s: a cell every 33.3 µs, a 20-cell frame every 667 µs.
    let vc_cell = Duration::from_nanos(33_333);
    let frame_gap = vc_cell * 20;
    let mut h = Harness::new(sw);
    for (i, &p) in inputs.iter().enumerate() {
        let cells = aal5_cells(
            p,
            1,
            32 + i as u16,
            Instant::ZERO,
            Duration::ZERO,
            FRAMES,
            SDU,
        );
        // Each VC starts at its own phase; frames leave the host every frame_gap.
        let phase =
            frame_gap.mul_f64(i as f64 / f64::from(VCS)) + Duration::from_nanos(317 * i as u64);
        let timed = cells.into_iter().enumerate().map(|(k, (_, port, input))| {
            let (frame, n) = ((k / 20) as u32, (k % 20) as u32);
            let within = match s {
                Smoothing::Card { x } => host_cell * (n + x * (n / (16 - x))),
                Smoothing::Even => vc_cell * n,
            };
            (
                Instant::ZERO + phase + frame_gap * frame + within,
                port,
                input,
            )
        });
        h.feed(timed.collect::<Vec<_>>());
    }
    h.drain();
    let s = h.sw.port_stats(out).unwrap();
    assert_eq!(s.counters.dropped.total(), 0);
    assert_eq!(
        s.counters.cells_out,
        u64::from(FRAMES) * 20 * u64::from(VCS)
    );
    s.max_queue_cells
}

#[test]
fn cell_level_smoothing_keeps_the_switch_queue_short() {
    let burst = max_queue(Smoothing::Card { x: 0 });
    let card = max_queue(Smoothing::Card { x: 6 });
    let even = max_queue(Smoothing::Even);
    eprintln!(
        "largest queue at the 42.4 Mbit/s port: back-to-back frames {burst} cells, \
         card pauses X=6 {card} cells, evenly spaced cells {even} cells"
    );
    // A frame arriving 3.67× faster than the port drains leaves ~20·(1 − 1/3.67)
    // ≈ 14.5 cells queued; with X = 6 a 20-cell frame gets one 6-cell pause, so it
    // takes 26 host cell times and leaves 20 − 26/3.67 ≈ 13. Pauses per 16 cells do
    // little for frames this short: smoothing at the VC's rate is what empties the
    // queue.
    assert!(burst >= 14, "{burst}");
    assert!(card < burst && card >= 10, "{card}");
    assert!(even <= 2, "{even}");
}
