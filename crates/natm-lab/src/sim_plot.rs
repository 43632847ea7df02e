//! `natm-lab sim-plot`: `natm sim` with the same arguments (the same output: text or
//! `--json`, and `--series`), and the run drawn: per-VC rate, rate set or window, and
//! the bottleneck queue over time, SVG or PNG. The simulator is deterministic, so the
//! figure is the run `natm sim` prints; the operator binary draws nothing
//! (docs/decisions/0032-lab-crate.md).

use std::path::PathBuf;

use clap::Args;
use natm_cli::cli::sim::{run_one, SimArgs};
use natm_cli::cli::CliResult;
use natm_sim::scenario::{Report, Scenario, VcPoint};

/// Arguments of `natm-lab sim-plot`: where to draw, and `natm sim`'s own.
#[derive(Debug, Args)]
pub(crate) struct SimPlotArgs {
    /// Draw per-VC rate, rate estimate or window, and the bottleneck queue over time
    /// to this file (SVG; PNG when its name ends in .png).
    #[arg(long)]
    plot: PathBuf,
    #[command(flatten)]
    sim: SimArgs,
}

pub(crate) fn run(a: &SimPlotArgs) -> CliResult {
    let (scenario, report) = run_one(&a.sim, true)?;
    draw(&a.plot, &scenario, &report)
}

fn draw(path: &std::path::Path, s: &Scenario, r: &Report) -> CliResult {
    use crate::plot::{stacked, Panel, Series};
    let name = |i: usize| format!("vc{} {} ({})", 32 + i, r.vcs[i].label, r.vcs[i].flow);
    let per_vc = |f: &dyn Fn(&VcPoint) -> Option<f64>| {
        (0..r.vcs.len())
            .map(|i| Series {
                label: name(i),
                points: r
                    .series
                    .iter()
                    .filter_map(|row| f(&row.vcs[i]).map(|y| (row.t, y)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect::<Vec<_>>()
    };
    let mut panels = vec![Panel {
        y_label: "delivered, Mbit/s".into(),
        series: per_vc(&|v| Some(v.rate_bps / 1e6)),
    }];
    let est = per_vc(&|v| v.rate_set_bps.map(|x| x / 1e6));
    if !est.is_empty() {
        panels.push(Panel {
            y_label: "sending rate set, Mbit/s".into(),
            series: est,
        });
    }
    let win = per_vc(&|v| v.window);
    if !win.is_empty() {
        panels.push(Panel {
            y_label: "window, TPDUs".into(),
            series: win,
        });
    }
    let mut queue = per_vc(&|v| Some(v.queue_frames as f64));
    queue.push(Series {
        label: "total".into(),
        points: r
            .series
            .iter()
            .map(|row| (row.t, row.queue_frames as f64))
            .collect(),
    });
    panels.push(Panel {
        y_label: "bottleneck queue, frames".into(),
        series: queue,
    });
    let title = format!(
        "{} VC(s), {:.0} Mbit/s {} bottleneck, RTT {} ms, loss {:.1}%",
        r.vcs.len(),
        s.rate_bps as f64 / 1e6,
        if s.round_robin { "round-robin" } else { "FIFO" },
        s.rtt.as_secs_f64() * 1e3,
        s.loss * 100.0
    );
    stacked(path, &title, "time, s", &panels)
}
