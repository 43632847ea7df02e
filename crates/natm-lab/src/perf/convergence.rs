//! `natm-lab perf convergence`: issue 33's comparison of ABR, packet-pair and the
//! window when a VC joins and when it leaves, through real processes (a `natm switch`
//! and a `natm sigd` per host, [`natm_cli::cli::loopnet`]), the bottleneck port the
//! same for all three:
//!
//! - `packet-pair` through a round-robin port, `window` and `abr` through a FIFO port
//!   (each flow control where it is meant to run);
//! - two reliable VCs start; a third joins at `--join`, and leaves at `--leave`; the run
//!   ends at `--end`;
//! - every `--sample` the delivered bytes of each VC and the port's queue (the
//!   switch's stat file, rewritten every 100 ms) are read.
//!
//! Convergence time after an event: from the event to the first sample from which
//! every active VC's rate over the sample stays within `--band` of the fair share
//! (the active VCs' total over their number) until the next event. Utilisation is
//! the total over the line's payload rate (48/53 of it); the queue its median and its
//! largest sample in each phase. Measurements, not assertions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::network::{open_from, Running, VcSpec, BUFFER_CELLS};
use super::results::Machine;
use super::stats::median;
use natm_cli::cli::loopnet::{LoopNet, Topology};
use natm_cli::cli::{table, units};

/// `natm-lab perf convergence`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConvergenceArgs {
    /// Line rate of the bottleneck switch port (towards the sink host).
    #[arg(long, default_value = "100Mbps", value_parser = units::rate)]
    line_rate: u64,
    /// When the third VC joins.
    #[arg(long, default_value = "2s", value_parser = units::duration)]
    join: Duration,
    /// When it leaves.
    #[arg(long, default_value = "4s", value_parser = units::duration)]
    leave: Duration,
    /// When the run ends.
    #[arg(long, default_value = "6s", value_parser = units::duration)]
    end: Duration,
    /// How often rates and the queue are read.
    #[arg(long, default_value = "100ms", value_parser = units::duration)]
    sample: Duration,
    /// How close to the fair share counts as converged (0.2: within ±20 %).
    #[arg(long, default_value_t = 0.2)]
    band: f64,
    /// Message size of the reliable VCs.
    #[arg(long, default_value = "64KiB", value_parser = units::bytes)]
    size: u64,
    /// Flow controls to run, comma-separated: packet-pair, window, abr.
    #[arg(long, value_delimiter = ',', default_value = "packet-pair,window,abr")]
    flows: Vec<Flow>,
    #[command(flatten)]
    to: OutputArgs,
}

/// A flow control and the port it runs through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Flow {
    /// Packet-pair, round-robin port.
    PacketPair,
    /// The dynamic window, FIFO port.
    Window,
    /// ABR (the port's ERICA), FIFO port.
    Abr,
}

impl Flow {
    fn qos(self) -> &'static str {
        match self {
            Flow::PacketPair => "reliable:flow=packet-pair",
            Flow::Window => "reliable:flow=window",
            Flow::Abr => "reliable:flow=abr",
        }
    }

    fn scheduler(self) -> &'static str {
        match self {
            Flow::PacketPair => "rr",
            Flow::Window | Flow::Abr => "fifo",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Flow::PacketPair => "packet-pair",
            Flow::Window => "window",
            Flow::Abr => "abr",
        }
    }
}

/// What `natm-lab perf convergence` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConvergenceResult {
    /// `"convergence"`.
    pub(crate) experiment: String,
    pub(crate) flows: Vec<FlowResult>,
    pub(crate) join_s: f64,
    pub(crate) leave_s: f64,
    pub(crate) end_s: f64,
    pub(crate) sample_s: f64,
    pub(crate) band: f64,
    pub(crate) line_rate_bps: f64,
    pub(crate) machine: Machine,
}

/// One flow control's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FlowResult {
    pub(crate) flow: Flow,
    pub(crate) scheduler: String,
    /// Seconds from the join until every VC stayed within the band; `None`: never.
    pub(crate) join_converged_s: Option<f64>,
    /// Seconds from the leave until both remaining VCs stayed within the band.
    pub(crate) leave_converged_s: Option<f64>,
    /// Each phase (two VCs, three, two again): utilisation, worst deviation from the
    /// fair share over the phase's second half, queue.
    pub(crate) phases: Vec<Phase>,
    /// Every sample: seconds from the start, each VC's rate (bit/s; 0 while absent),
    /// the port's queue in cells.
    pub(crate) samples: Vec<Sample>,
    /// TPDUs the three senders retransmitted.
    pub(crate) retransmissions: u64,
}

/// One phase of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Phase {
    pub(crate) vcs: usize,
    pub(crate) utilization: f64,
    /// max |rate − fair share| / fair share, median over the phase's second half.
    pub(crate) deviation: f64,
    pub(crate) queue_median_cells: f64,
    pub(crate) queue_max_cells: f64,
}

/// One sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sample {
    pub(crate) t_s: f64,
    pub(crate) rates_bps: Vec<f64>,
    pub(crate) queue_cells: Option<u64>,
}

fn spec(label: &str, from: usize, flow: Flow, size: usize) -> VcSpec {
    VcSpec {
        label: label.into(),
        from,
        qos: flow.qos().into(),
        size,
        offered: None,
    }
}

fn stop_all(running: Vec<Running>, stop: &AtomicBool) -> u64 {
    stop.store(true, Ordering::SeqCst);
    let mut retx = 0;
    for r in running {
        retx += r.conn.stats().tx.retransmissions();
        r.conn.abort();
        for t in r.threads {
            let _ = t.join();
        }
    }
    retx
}

/// The bottleneck port's queue (the last port, towards the sink host).
fn queue(net: &LoopNet) -> Option<u64> {
    net.switch_stat()["ports"][2]["stats"]["queue_cells"].as_u64()
}

fn run_flow(a: &ConvergenceArgs, flow: Flow, pb: &ProgressBar) -> anyhow::Result<FlowResult> {
    let net = LoopNet::start(&Topology {
        hosts: 3,
        line_rate: a.line_rate,
        scheduler: flow.scheduler().into(),
        buffer: BUFFER_CELLS,
    })?;
    let hosts = (0..3)
        .map(|i| net.host(i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let size = a.size as usize;
    let (stop, stop3) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let two = open_from(
        &hosts,
        2,
        &[spec("vc1", 0, flow, size), spec("vc2", 1, flow, size)],
        0,
        &stop,
    )?;
    let start = Instant::now();
    let mut third: Option<Vec<Running>> = None;
    let mut retx = 0;
    let mut last = [0u64; 3];
    let mut samples = Vec::new();
    let mut k = 1u32;
    loop {
        let due = start + a.sample * k;
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            thread::sleep(d);
        }
        let t = start.elapsed();
        if t >= a.end {
            break;
        }
        let joined = third.is_some();
        if !joined && t >= a.join && t < a.leave {
            third = Some(open_from(
                &hosts,
                2,
                &[spec("vc3", 0, flow, size)],
                2,
                &stop3,
            )?);
        } else if joined && t >= a.leave {
            retx += stop_all(third.take().unwrap_or_default(), &stop3);
            last[2] = 0;
        }
        let now: Vec<u64> = two
            .iter()
            .chain(third.iter().flatten())
            .map(|r| r.delivered.load(Ordering::Relaxed))
            .collect();
        let dt = a.sample.as_secs_f64();
        let mut rates = vec![0.0; 3];
        for (i, &b) in now.iter().enumerate() {
            rates[i] = b.saturating_sub(last[i]) as f64 * 8.0 / dt;
            last[i] = b;
        }
        samples.push(Sample {
            t_s: t.as_secs_f64(),
            rates_bps: rates,
            queue_cells: queue(&net),
        });
        k += 1;
    }
    if let Some(r) = third.take() {
        retx += stop_all(r, &stop3);
    }
    retx += stop_all(two, &stop);
    drop(hosts);
    drop(net);
    pb.inc(1);
    Ok(summarize(a, flow, samples, retx))
}

/// Whether every active VC of `s` is within `band` of their fair share.
fn within(s: &Sample, active: usize, band: f64) -> bool {
    let r = &s.rates_bps[..active];
    let fair = r.iter().sum::<f64>() / active as f64;
    fair > 0.0 && r.iter().all(|x| (x - fair).abs() <= band * fair)
}

/// Seconds from `from` to the first sample after which every sample before `to` is
/// within the band.
fn converged(samples: &[Sample], from: f64, to: f64, active: usize, band: f64) -> Option<f64> {
    let phase: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s > from && s.t_s < to)
        .collect();
    let mut first_good = None;
    for s in &phase {
        if within(s, active, band) {
            first_good.get_or_insert(s.t_s);
        } else {
            first_good = None;
        }
    }
    first_good.map(|t| t - from)
}

fn phase(a: &ConvergenceArgs, samples: &[Sample], from: f64, to: f64, active: usize) -> Phase {
    let ph: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s > from && s.t_s < to)
        .collect();
    let payload = a.line_rate as f64 * 48.0 / 53.0;
    let late: Vec<&Sample> = ph
        .iter()
        .copied()
        .filter(|s| s.t_s > (from + to) / 2.0)
        .collect();
    let util: Vec<f64> = late
        .iter()
        .map(|s| s.rates_bps.iter().sum::<f64>() / payload)
        .collect();
    let dev: Vec<f64> = late
        .iter()
        .map(|s| {
            let r = &s.rates_bps[..active];
            let fair = r.iter().sum::<f64>() / active as f64;
            r.iter()
                .map(|x| (x - fair).abs() / fair)
                .fold(0.0, f64::max)
        })
        .collect();
    let q: Vec<f64> = ph
        .iter()
        .filter_map(|s| s.queue_cells.map(|c| c as f64))
        .collect();
    Phase {
        vcs: active,
        utilization: median(&util).unwrap_or(f64::NAN),
        deviation: median(&dev).unwrap_or(f64::NAN),
        queue_median_cells: median(&q).unwrap_or(f64::NAN),
        queue_max_cells: q.iter().copied().fold(f64::NAN, f64::max),
    }
}

fn summarize(a: &ConvergenceArgs, flow: Flow, samples: Vec<Sample>, retx: u64) -> FlowResult {
    let (j, l, e) = (
        a.join.as_secs_f64(),
        a.leave.as_secs_f64(),
        a.end.as_secs_f64(),
    );
    FlowResult {
        flow,
        scheduler: flow.scheduler().into(),
        join_converged_s: converged(&samples, j, l, 3, a.band),
        leave_converged_s: converged(&samples, l, e, 2, a.band),
        phases: vec![
            phase(a, &samples, 0.0, j, 2),
            phase(a, &samples, j, l, 3),
            phase(a, &samples, l, e, 2),
        ],
        samples,
        retransmissions: retx,
    }
}

fn measure(a: &ConvergenceArgs, pb: &ProgressBar) -> anyhow::Result<ConvergenceResult> {
    anyhow::ensure!(
        a.join < a.leave && a.leave < a.end && a.end <= Duration::from_secs(120),
        "--join < --leave < --end ≤ 120 s"
    );
    anyhow::ensure!(
        a.sample >= Duration::from_millis(10) && a.sample * 4 <= a.join,
        "--sample must be at least 10 ms and a quarter of --join at most"
    );
    anyhow::ensure!(a.band > 0.0 && a.band < 1.0, "--band must be in (0, 1)");
    anyhow::ensure!(
        (1..=super::MAX_SIZE).contains(&a.size),
        "--size must be 1 B to 64 MiB"
    );
    pb.set_length(a.flows.len() as u64);
    let flows = a
        .flows
        .iter()
        .map(|&f| run_flow(a, f, pb))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(ConvergenceResult {
        experiment: "convergence".into(),
        flows,
        join_s: a.join.as_secs_f64(),
        leave_s: a.leave.as_secs_f64(),
        end_s: a.end.as_secs_f64(),
        sample_s: a.sample.as_secs_f64(),
        band: a.band,
        line_rate_bps: a.line_rate as f64,
        machine: Machine::now(),
    })
}

impl Experiment for ConvergenceArgs {
    type Result = ConvergenceResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(ConvergenceResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &ConvergenceResult) -> String {
        let secs = |s: Option<f64>| s.map_or("never".into(), |s| format!("{s:.2}"));
        let mut t = table::new(
            [
                "flow (port)",
                "phase",
                "converged s",
                "util",
                "dev %",
                "queue med",
                "queue max",
                "retx",
            ],
            2,
        );
        for f in &r.flows {
            let names = ["2 VCs", "3rd joins", "3rd leaves"];
            let conv = [None, Some(f.join_converged_s), Some(f.leave_converged_s)];
            for (i, p) in f.phases.iter().enumerate() {
                t.add_row(vec![
                    if i == 0 {
                        format!("{} ({})", f.flow.name(), f.scheduler)
                    } else {
                        String::new()
                    },
                    names.get(i).copied().unwrap_or("").to_string(),
                    conv.get(i).copied().flatten().map_or("-".into(), secs),
                    format!("{:.2}", p.utilization),
                    format!("{:.1}", p.deviation * 100.0),
                    format!("{:.0}", p.queue_median_cells),
                    format!("{:.0}", p.queue_max_cells),
                    if i == 0 {
                        f.retransmissions.to_string()
                    } else {
                        String::new()
                    },
                ]);
            }
        }
        format!(
            "Through a natm switch process: bottleneck port {:.0} Mbit/s; two reliable VCs, a \
             third joins at {:.1} s and leaves at {:.1} s, end at {:.1} s; samples every {:.0} ms; \
             converged: from the event to the sample from which every VC stays within ±{:.0} % of \
             the fair share (to the sample); util, dev: medians over each phase's second half; \
             queue: the port's, cells\n{}{} CPUs, load average {}\n",
            r.line_rate_bps / 1e6,
            r.join_s,
            r.leave_s,
            r.end_s,
            r.sample_s * 1e3,
            r.band * 100.0,
            table::render(&t),
            r.machine.cpus,
            r.machine.loadavg.as_deref().unwrap_or("?")
        )
    }

    fn figure(_r: &ConvergenceResult, (): &(), _path: &std::path::Path) -> anyhow::Result<()> {
        anyhow::bail!("perf convergence draws no figure: its samples are in --json")
    }
}
