//! `natm-lab perf switchlab`: what a `natm switch` process does to traffic, measured
//! with real switch processes on loopback and host threads in this process that send
//! and receive cell trains (issue 13): policing of a VC above its contract, whole
//! frames delivered through an overloaded port with and without frame discard, and
//! the switch's queue under cell-level against packet-level smoothing (seed 001 §7).
//! Drops by cause come from each switch's stat file; every figure is a median over
//! runs, the experiments interleaved, beside the line's cell rate and the load
//! average at the start and end.

mod discard;
mod hosts;
mod lab;
mod policing;
mod report;
mod run;
mod smoothing;
mod traffic;

use std::path::Path;

use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::results::Machine;
pub(crate) use discard::{Discard, DiscardCase};
pub(crate) use hosts::HostSmoothingCase;
pub(crate) use policing::{PolicingCase, Violation};
pub(crate) use run::Spread;
pub(crate) use smoothing::{Smoothing, SmoothingCase};

/// `natm-lab perf switchlab`.
#[derive(Debug, clap::Args)]
pub(crate) struct SwitchlabArgs {
    /// Seconds each host sends in each measurement (nine measurements per run).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Runs of every measurement, interleaved; figures are medians over runs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    to: OutputArgs,
}

/// The setup of experiment 1, for the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PolicingSetup {
    pub(crate) contract_cells_per_s: u64,
    pub(crate) violator_times_contract: f64,
    pub(crate) cdvt_us: u64,
}

/// The setup of experiments 2 and 3: the output line and the load on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PortSetup {
    /// The output port's line, cells/s: what it could carry.
    pub(crate) line_cells_per_s: u64,
    /// Offered load, multiples of the line.
    pub(crate) load: f64,
    pub(crate) vcs: u16,
    pub(crate) frame_cells: usize,
}

/// What `natm-lab perf switchlab` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SwitchlabResult {
    /// `"switchlab"`.
    pub(crate) experiment: String,
    pub(crate) seconds: f64,
    pub(crate) runs: usize,
    /// The load average before the first measurement.
    pub(crate) loadavg_start: Option<String>,
    /// The machine after the last, with its load average then.
    pub(crate) machine: Machine,
    pub(crate) policing_setup: PolicingSetup,
    /// Discard, then tag.
    pub(crate) policing: Vec<PolicingCase>,
    pub(crate) discard_setup: PortSetup,
    /// Tail drop, PPD, EPD+PPD.
    pub(crate) discard: Vec<DiscardCase>,
    pub(crate) smoothing_setup: PortSetup,
    /// Cell-level, then packet-level, with deep VC buffers; then both with short.
    pub(crate) smoothing: Vec<SmoothingCase>,
    /// The same four on a natm host's own VCs (`smooth=cell` and `smooth=frame`
    /// bare PVCs through the switch), issue 34. Absent from runs made before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) smoothing_hosts: Vec<HostSmoothingCase>,
}

const VIOLATIONS: [Violation; 2] = [Violation::Discard, Violation::Tag];
const DISCARDS: [Discard; 3] = [Discard::TailDrop, Discard::Ppd, Discard::EpdPpd];
const SMOOTHINGS: [(Smoothing, u32); 4] = [
    (Smoothing::Cell, smoothing::DEEP_BUFFER),
    (Smoothing::Packet, smoothing::DEEP_BUFFER),
    (Smoothing::Cell, smoothing::SHORT_BUFFER),
    (Smoothing::Packet, smoothing::SHORT_BUFFER),
];
/// Measurements per run.
const PER_RUN: usize = VIOLATIONS.len() + DISCARDS.len() + 2 * SMOOTHINGS.len();

fn measure(a: &SwitchlabArgs, pb: &ProgressBar) -> anyhow::Result<SwitchlabResult> {
    anyhow::ensure!(
        (0.2..=60.0).contains(&a.seconds),
        "--seconds must be 0.2 to 60"
    );
    anyhow::ensure!((1..=20).contains(&a.runs), "--runs must be 1 to 20");
    let loadavg_start = Machine::now().loadavg;
    pb.set_length((a.runs * PER_RUN) as u64);
    let (mut pol, mut dis, mut smo, mut real) = (
        vec![Vec::new(); VIOLATIONS.len()],
        vec![Vec::new(); DISCARDS.len()],
        vec![Vec::new(); SMOOTHINGS.len()],
        vec![Vec::new(); SMOOTHINGS.len()],
    );
    for run in 0..a.runs {
        for (i, &v) in VIOLATIONS.iter().enumerate() {
            pb.set_message(format!("run {} policing, {v:?}", run + 1));
            pol[i].push(policing::run(v, a.seconds)?);
            pb.inc(1);
        }
        for (i, &d) in DISCARDS.iter().enumerate() {
            pb.set_message(format!("run {} {}", run + 1, d.label()));
            dis[i].push(discard::run(d, a.seconds)?);
            pb.inc(1);
        }
        for (i, &(s, buffer)) in SMOOTHINGS.iter().enumerate() {
            pb.set_message(format!(
                "run {} {s:?}-level smoothing, {buffer} cells",
                run + 1
            ));
            smo[i].push(smoothing::run(s, buffer, a.seconds)?);
            pb.inc(1);
        }
        for (i, &(s, buffer)) in SMOOTHINGS.iter().enumerate() {
            pb.set_message(format!(
                "run {} {s:?}-level smoothing on natm VCs, {buffer} cells",
                run + 1
            ));
            real[i].push(hosts::run(s, buffer, a.seconds)?);
            pb.inc(1);
        }
    }
    Ok(SwitchlabResult {
        experiment: "switchlab".into(),
        seconds: a.seconds,
        runs: a.runs,
        loadavg_start,
        machine: Machine::now(),
        policing_setup: PolicingSetup {
            contract_cells_per_s: policing::CONTRACT,
            violator_times_contract: policing::EXCESS,
            cdvt_us: policing::CDVT_US,
        },
        policing: VIOLATIONS
            .iter()
            .zip(&pol)
            .map(|(&v, r)| policing::summarize(v, r))
            .collect(),
        discard_setup: PortSetup {
            line_cells_per_s: discard::LINE,
            load: discard::OVERLOAD,
            vcs: discard::VCS,
            frame_cells: discard::FRAME_CELLS,
        },
        discard: DISCARDS
            .iter()
            .zip(&dis)
            .map(|(&d, r)| discard::summarize(d, r))
            .collect(),
        smoothing_setup: PortSetup {
            line_cells_per_s: smoothing::LINE,
            load: smoothing::LOAD,
            vcs: smoothing::VCS,
            frame_cells: smoothing::FRAME_CELLS,
        },
        smoothing: SMOOTHINGS
            .iter()
            .zip(&smo)
            .map(|(&(s, buffer), r)| smoothing::summarize(s, buffer, r))
            .collect(),
        smoothing_hosts: SMOOTHINGS
            .iter()
            .zip(&real)
            .map(|(&(s, buffer), r)| hosts::summarize(s, buffer, r))
            .collect(),
    })
}

impl Experiment for SwitchlabArgs {
    type Result = SwitchlabResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(SwitchlabResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &SwitchlabResult) -> String {
        report::table(r)
    }

    fn figure(r: &SwitchlabResult, (): &(), path: &Path) -> anyhow::Result<()> {
        report::figure(r, path)
    }
}
