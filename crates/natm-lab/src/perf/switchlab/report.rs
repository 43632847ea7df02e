//! `natm-lab perf switchlab`'s tables and figure, from the result alone.

use std::path::Path;

use super::{Spread, SwitchlabResult, Violation};
use natm_cli::cli::table;

/// The median with `d` decimals.
fn s(x: &Spread, d: usize) -> String {
    format!("{:.d$}", x.median)
}

/// `min–max` with `d` decimals.
fn range(x: &Spread, d: usize) -> String {
    format!("{:.d$}–{:.d$}", x.min, x.max)
}

fn policing(r: &SwitchlabResult) -> String {
    let p = &r.policing_setup;
    let mut t = table::new(
        [
            "violation",
            "VC",
            "offered cells/s",
            "delivered cells/s",
            "of them CLP=0",
            "policing drops",
            "tagged",
        ],
        2,
    );
    for c in &r.policing {
        let mode = match c.violation {
            Violation::Discard => "discard",
            Violation::Tag => "tag",
        };
        for (who, v) in [("conforming", &c.conforming), ("violating", &c.violating)] {
            t.add_row(vec![
                mode.to_string(),
                who.to_string(),
                s(&v.offered_cells_per_s, 0),
                s(&v.delivered_cells_per_s, 0),
                s(&v.delivered_clp0_cells_per_s, 0),
                s(&v.policing_drops, 0),
                s(&v.tagged, 0),
            ]);
        }
    }
    let ranges: Vec<String> = r
        .policing
        .iter()
        .map(|c| {
            format!(
                "{}: violator delivered {} cells/s, conforming VC's policing drops {}",
                match c.violation {
                    Violation::Discard => "discard",
                    Violation::Tag => "tag",
                },
                range(&c.violating.delivered_cells_per_s, 0),
                range(&c.conforming.policing_drops, 0)
            )
        })
        .collect();
    format!(
        "1. Policing: two CBR VCs, each contracted at {} cells/s (CDVT {} ms); one shaped to it, one sending {}× it. The output line carries 100,000 cells/s.\n{}Ranges over runs: {}.\n",
        p.contract_cells_per_s,
        p.cdvt_us / 1000,
        p.violator_times_contract,
        table::render(&t),
        ranges.join("; ")
    )
}

fn discard(r: &SwitchlabResult) -> String {
    let p = &r.discard_setup;
    let mut t = table::new(
        [
            "discard",
            "offered cells/s",
            "whole frames/s",
            "goodput of line",
            "broken frames/s",
            "cells out/s",
            "queue-full drops",
            "PPD drops",
            "EPD drops",
        ],
        1,
    );
    for c in &r.discard {
        t.add_row(vec![
            c.discard.label().to_string(),
            s(&c.offered_cells_per_s, 0),
            s(&c.frames_per_s, 1),
            s(&c.goodput, 3),
            s(&c.broken_frames_per_s, 1),
            s(&c.cells_out_per_s, 0),
            s(&c.dropped_queue_full, 0),
            s(&c.dropped_ppd, 0),
            s(&c.dropped_epd, 0),
        ]);
    }
    let ranges: Vec<String> = r
        .discard
        .iter()
        .map(|c| format!("{} {}", c.discard.label(), range(&c.goodput, 3)))
        .collect();
    format!(
        "2. Frame discard: {} AAL5 VCs of {}-cell frames, cells interleaved, {}× a line of {} cells/s ({:.0} whole frames/s at most); fifo, 200-cell buffers, EPD at 150. Drops are cells per run.\n{}Goodput ranges over runs: {}.\n",
        p.vcs,
        p.frame_cells,
        p.load,
        p.line_cells_per_s,
        p.line_cells_per_s as f64 / p.frame_cells as f64,
        table::render(&t),
        ranges.join(", ")
    )
}

fn smoothing(r: &SwitchlabResult) -> String {
    let p = &r.smoothing_setup;
    let mut t = table::new(
        [
            "smoothing",
            "VC buffer",
            "offered cells/s",
            "cells/dgram sent (max)",
            "max queue",
            "mean queue",
            "delay p50 µs",
            "delay p99 µs",
            "cells lost",
        ],
        1,
    );
    for c in &r.smoothing {
        t.add_row(vec![
            format!("{:?}", c.smoothing).to_lowercase(),
            c.vc_buffer_cells.to_string(),
            s(&c.offered_cells_per_s, 0),
            format!(
                "{:.1} ({:.0})",
                c.mean_cells_per_datagram.median, c.max_cells_per_datagram.median
            ),
            s(&c.max_queue_cells, 0),
            s(&c.mean_queue_cells, 1),
            s(&c.delay_p50_us, 0),
            s(&c.delay_p99_us, 0),
            format!("{:.1}%", c.lost_fraction.median * 100.0),
        ]);
    }
    let ranges: Vec<String> = r
        .smoothing
        .iter()
        .map(|c| {
            format!(
                "{:?} ({}): max queue {}, mean queue {}, delay p99 {} µs",
                c.smoothing,
                c.vc_buffer_cells,
                range(&c.max_queue_cells, 0),
                range(&c.mean_queue_cells, 1),
                range(&c.delay_p99_us, 0)
            )
            .to_lowercase()
        })
        .collect();
    format!(
        "3. Smoothing (cell-level against packet-level): {} VCs, together {}× a line of {} cells/s, as evenly spaced cells or as {}-cell frames back to back; queue in cells at the output port (its buffer 4096), each VC's buffer deep or shorter than a frame.\n{}Ranges over runs: {}.\n",
        p.vcs,
        p.load,
        p.line_cells_per_s,
        p.frame_cells,
        table::render(&t),
        ranges.join("; ")
    )
}

fn smoothing_hosts(r: &SwitchlabResult) -> String {
    if r.smoothing_hosts.is_empty() {
        return String::new();
    }
    let p = &r.smoothing_setup;
    let mut t = table::new(
        [
            "smooth=",
            "VC buffer",
            "offered cells/s",
            "max queue",
            "mean queue",
            "cells lost",
            "of which at the queue",
            "frames whole",
            "cells late",
        ],
        1,
    );
    for c in &r.smoothing_hosts {
        t.add_row(vec![
            match c.smoothing {
                super::Smoothing::Cell => "cell",
                super::Smoothing::Packet => "frame",
            }
            .to_string(),
            c.vc_buffer_cells.to_string(),
            s(&c.offered_cells_per_s, 0),
            s(&c.max_queue_cells, 0),
            s(&c.mean_queue_cells, 1),
            format!("{:.1}%", c.lost_fraction.median * 100.0),
            format!("{:.1}%", c.queue_dropped_fraction.median * 100.0),
            format!("{:.1}%", c.good_frame_fraction.median * 100.0),
            format!("{:.1}%", c.late_fraction.median * 100.0),
        ]);
    }
    let ranges: Vec<String> = r
        .smoothing_hosts
        .iter()
        .map(|c| {
            format!(
                "{:?} ({}): max queue {}, lost {}",
                c.smoothing,
                c.vc_buffer_cells,
                range(&c.max_queue_cells, 0),
                range(&c.lost_fraction, 3)
            )
            .to_lowercase()
        })
        .collect();
    format!(
        "3b. The same on a natm host's VCs: {} bare CBR PVCs of {}-cell frames from one host (cell-mode links), smooth=cell (the engine's cell pacer) or smooth=frame (the contract's shaper alone), each through its own input port to the output port above.\n{}Ranges over runs: {}.\n",
        p.vcs,
        p.frame_cells,
        table::render(&t),
        ranges.join("; ")
    )
}

/// The three tables and the run's conditions.
pub(super) fn table(r: &SwitchlabResult) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{} s per measurement, medians over {} runs (ranges as noted); {} CPUs; load average {} at the start, {} at the end.\n",
        policing(r),
        discard(r),
        smoothing(r),
        smoothing_hosts(r),
        r.seconds,
        r.runs,
        r.machine.cpus,
        r.loadavg_start.as_deref().unwrap_or("?"),
        r.machine.loadavg.as_deref().unwrap_or("?"),
    )
}

/// Whole frames delivered under each discard mode, against the line's capacity.
pub(super) fn figure(r: &SwitchlabResult, path: &Path) -> anyhow::Result<()> {
    let rows: Vec<(String, Vec<f64>)> = r
        .discard
        .iter()
        .map(|c| {
            (
                c.discard.label().to_string(),
                vec![c.goodput.median * 100.0],
            )
        })
        .collect();
    crate::plot::both(path, |p| {
        crate::plot::stacked_bars(
            p,
            "Whole AAL5 frames through a port overloaded 2× (natm switch)",
            "goodput, % of the line's cells",
            &["whole frames"],
            &rows,
        )
    })
}
