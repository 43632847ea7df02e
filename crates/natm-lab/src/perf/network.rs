//! `natm-lab perf network`: issue 13's "Show" items through real processes — a
//! `natm switch` and a `natm sigd` per host on loopback ([`natm_cli::cli::loopnet`]),
//! three VCs crossing one bottleneck switch port (the port towards the sink host):
//!
//! - `rr`: three reliable VCs from two hosts through a round-robin port, with
//!   packet-pair flow control (asked for in the QoS text, `flow=packet-pair`: ulib
//!   takes an IP path for a FIFO network, so a host learns the network is round
//!   robin from the application). Each VC's goodput beside the fair share (the
//!   three VCs' total over three) and the total beside the line's payload rate.
//! - `fifo`: the same through a FIFO port, with the dynamic window ulib picks for
//!   `reliable`.
//! - `abr`: the same three VCs through a FIFO port with ABR (`reliable:flow=abr`):
//!   the port's ERICA gives each an explicit rate in the forward RM cells it passes
//!   (docs/decisions/0033-abr.md), beside packet-pair (`rr`) and the window (`fifo`)
//!   through the same port rate and buffer.
//! - `wrr`: a CBR VC (`cbr:pcr=…`, reserved at the switch) through a weighted
//!   round-robin port, alone and then while two best-effort VCs each offer the
//!   line rate to the same port: the guaranteed VC's delivered rate beside its reservation, in the same run.
//!
//! Measurements, not assertions: tests check only the shape of the result.

use natm::ulib::Wait;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use natm::ulib::{Connection, Error, Host};
use natm::wire::qos::Qos;
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::results::Machine;
use super::stats::median;
use natm_cli::cli::loopnet::{address, LoopNet, Topology};
use natm_cli::cli::traffic::{recv_loop, send_loop};
use natm_cli::cli::{table, units};

/// How long a call or an accept may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Message size of the guaranteed and best-effort VCs: one TPDU (4,096 octets),
/// so that a cell lost at the switch costs one message, not a larger one's worth.
const ONE_TPDU: usize = 4096;
/// Cells of the bottleneck port's buffer.
pub(super) const BUFFER_CELLS: u32 = 16_384;

/// `natm-lab perf network`.
#[derive(Debug, clap::Args)]
pub(crate) struct NetworkArgs {
    /// Line rate of the bottleneck switch port (towards the sink host).
    #[arg(long, default_value = "100Mbps", value_parser = units::rate)]
    line_rate: u64,
    /// Seconds each case is measured, after the warm-up.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Traffic before the measured interval, discarded.
    #[arg(long, default_value = "1s", value_parser = units::duration)]
    warmup: Duration,
    /// Runs of each case (cases interleaved); the table gives medians and ranges.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Cases, comma-separated: rr, fifo, abr, wrr, and rr-window (the window through
    /// the rr port, a reference for packet-pair).
    #[arg(long, value_delimiter = ',', default_value = "rr,fifo,abr,wrr")]
    cases: Vec<Case>,
    /// Peak cell rate reserved by the guaranteed VC of the wrr case (payload bits).
    #[arg(long, default_value = "20Mbps", value_parser = units::rate)]
    guaranteed: u64,
    /// Message size of the reliable VCs (the guaranteed and best-effort VCs send one
    /// TPDU per message).
    #[arg(long, default_value = "64KiB", value_parser = units::bytes)]
    size: u64,
    #[command(flatten)]
    to: OutputArgs,
}

/// A bottleneck scheduler and the traffic through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Case {
    /// Reliable VCs, packet-pair, round-robin port.
    Rr,
    /// Reliable VCs, dynamic window, FIFO port.
    Fifo,
    /// Reliable VCs, dynamic window, round-robin port: the `rr` case's flow control
    /// swapped, to tell what the port does from what packet-pair does.
    RrWindow,
    /// Reliable VCs, ABR (explicit rate from the port's ERICA), FIFO port.
    Abr,
    /// A guaranteed VC and best-effort floods, weighted round-robin port.
    Wrr,
}

impl Case {
    fn scheduler(self) -> &'static str {
        match self {
            Case::Rr | Case::RrWindow => "rr",
            Case::Fifo | Case::Abr => "fifo",
            Case::Wrr => "wrr",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Case::RrWindow => "rr-window",
            Case::Abr => "abr",
            other => other.scheduler(),
        }
    }

    /// What the case is judged by, and issue 13's goal for it.
    fn goal(self) -> &'static str {
        match self {
            Case::Rr => "max deviation from the fair share ≤ 5 %",
            Case::Fifo => "max deviation from the fair share ≤ 20 %",
            Case::RrWindow => "none (a reference for rr)",
            Case::Abr => "max deviation from the fair share ≤ 5 % (as rr)",
            Case::Wrr => "guaranteed delivered within 1 % of its reservation",
        }
    }
}

/// One VC of a case.
pub(super) struct VcSpec {
    pub(super) label: String,
    /// Index of the sending host (the caller).
    pub(super) from: usize,
    pub(super) qos: String,
    pub(super) size: usize,
    /// Offered rate of a best-effort flood, bit/s (paced by the sender here); `None`:
    /// as fast as the VC's flow control lets it.
    pub(super) offered: Option<u64>,
}

/// What `natm-lab perf network` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NetworkResult {
    pub(crate) cases: Vec<CaseResult>,
    /// `"network"`.
    pub(crate) experiment: String,
    /// Line rate of the bottleneck port, bit/s.
    pub(crate) line_rate_bps: f64,
    pub(crate) machine: Machine,
    pub(crate) runs: usize,
    pub(crate) seconds: f64,
    pub(crate) size: usize,
    pub(crate) warmup_s: f64,
}

/// One case: per-VC medians over runs, and its headline figure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CaseResult {
    pub(crate) case: Case,
    /// Issue 13's goal, as text.
    pub(crate) goal: String,
    /// The headline: max |goodput − fair share| / fair share (rr, fifo), or the
    /// guaranteed VC's delivered rate over its reservation while loaded (wrr); median
    /// over runs, and the range.
    pub(crate) headline: f64,
    pub(crate) headline_max: f64,
    pub(crate) headline_min: f64,
    /// Every run's VCs.
    pub(crate) per_run: Vec<Vec<VcRun>>,
    /// The bottleneck port's scheduler.
    pub(crate) scheduler: String,
    /// Total goodput of the loaded VCs over the line's payload rate (48/53 of it).
    pub(crate) utilization: f64,
    pub(crate) vcs: Vec<VcResult>,
}

/// One VC, medians over runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VcResult {
    /// Flow control the sending host used (from the QoS, as ulib resolves it).
    pub(crate) flow: String,
    /// Sending host.
    pub(crate) from: String,
    pub(crate) goodput_bps: f64,
    pub(crate) goodput_max_bps: f64,
    pub(crate) goodput_min_bps: f64,
    pub(crate) label: String,
    pub(crate) qos: String,
    /// TPDUs the sender retransmitted, median over runs.
    pub(crate) retransmissions: f64,
    /// Goodput over its reference: the fair share (rr, fifo) or the reservation (wrr's
    /// guaranteed VC); `None` for best effort.
    pub(crate) ratio: Option<f64>,
}

/// One VC in one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VcRun {
    /// Message bytes delivered in the measured interval.
    pub(crate) bytes: u64,
    /// The sending flow controller's rate at the end, bit/s (packet-pair and leaky
    /// bucket set one).
    pub(crate) fc_rate_bps: Option<u64>,
    /// The sending flow controller's window at the end, TPDUs (the window sets one).
    pub(crate) fc_window: Option<u64>,
    pub(crate) goodput_bps: f64,
    pub(crate) label: String,
    /// TPDUs the sender retransmitted.
    pub(crate) retransmissions: u64,
    pub(crate) seconds: f64,
}

/// A VC's two ends and its counters while it runs.
pub(super) struct Running {
    pub(super) conn: Arc<Connection>,
    pub(super) delivered: Arc<AtomicU64>,
    pub(super) threads: Vec<thread::JoinHandle<()>>,
}

pub(super) fn err(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Calls `sink:SAP` from each VC's host and starts its sender and receiver.
fn open(
    hosts: &[Host],
    sink: usize,
    vcs: &[VcSpec],
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<Running>> {
    open_from(hosts, sink, vcs, 0, stop)
}

/// [`open`], the VCs' SAPs numbered from `first` (`vc<first>`, …).
pub(super) fn open_from(
    hosts: &[Host],
    sink: usize,
    vcs: &[VcSpec],
    first: usize,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<Running>> {
    let mut out = Vec::new();
    for (i, vc) in vcs.iter().enumerate() {
        let sap = format!("vc{}", first + i);
        let l = hosts[sink].bind(sap.as_str(), &vc.qos).map_err(err)?;
        let target = format!("{}:{sap}", address(sink));
        let h = hosts[vc.from].clone();
        let q = vc.qos.clone();
        let caller = thread::spawn(move || h.connect(target.as_str(), &q));
        let callee = l
            .accept(Wait::For(CALL_TIMEOUT))
            .map_err(err)
            .with_context(|| format!("{}: no call arrived", vc.label))?;
        let conn = caller
            .join()
            .map_err(|_| anyhow::anyhow!("the caller panicked"))?
            .map_err(err)
            .with_context(|| format!("{}: call with {}", vc.label, vc.qos))?;
        let conn = Arc::new(conn);
        let delivered = Arc::new(AtomicU64::new(0));
        let (c, st, size, offered) = (conn.clone(), stop.clone(), vc.size, vc.offered);
        let tx = thread::spawn(move || send_loop(&c, size, offered, &st));
        let (d, st) = (delivered.clone(), stop.clone());
        let rx = thread::spawn(move || recv_loop(&callee, &d, &st));
        out.push(Running {
            conn,
            delivered,
            threads: vec![tx, rx],
        });
    }
    Ok(out)
}

/// Runs `vcs` through a fresh network: warm-up, then the measured interval.
fn run_vcs(
    a: &NetworkArgs,
    scheduler: &str,
    vcs: &[VcSpec],
    pb: &ProgressBar,
) -> anyhow::Result<Vec<VcRun>> {
    let net = LoopNet::start(&Topology {
        hosts: 3,
        line_rate: a.line_rate,
        scheduler: scheduler.into(),
        buffer: BUFFER_CELLS,
    })?;
    let hosts = (0..3)
        .map(|i| net.host(i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let running = match open(&hosts, 2, vcs, &stop) {
        Ok(r) => r,
        Err(e) => {
            // Senders and receivers already started see the flag and end.
            stop.store(true, Ordering::SeqCst);
            return Err(e);
        }
    };
    thread::sleep(a.warmup);
    let t0 = Instant::now();
    let b0: Vec<u64> = running
        .iter()
        .map(|r| r.delivered.load(Ordering::Relaxed))
        .collect();
    thread::sleep(Duration::from_secs_f64(a.seconds));
    let dt = t0.elapsed().as_secs_f64();
    let result = running
        .iter()
        .zip(vcs)
        .zip(b0)
        .map(|((r, vc), b0)| {
            let bytes = r.delivered.load(Ordering::Relaxed) - b0;
            let st = r.conn.stats();
            VcRun {
                bytes,
                fc_rate_bps: st.rate_bps,
                fc_window: st.window,
                goodput_bps: bytes as f64 * 8.0 / dt,
                label: vc.label.clone(),
                retransmissions: st.tx.retransmissions(),
                seconds: dt,
            }
        })
        .collect::<Vec<_>>();
    stop.store(true, Ordering::SeqCst);
    for r in running {
        r.conn.abort();
        for t in r.threads {
            let _ = t.join();
        }
    }
    drop(hosts);
    drop(net);
    pb.inc(1);
    Ok(result)
}

fn reliable_vcs(qos: &str, size: usize) -> Vec<VcSpec> {
    [(0, "reliable-1"), (0, "reliable-2"), (1, "reliable-3")]
        .into_iter()
        .map(|(from, label)| VcSpec {
            label: label.into(),
            from,
            qos: qos.into(),
            size,
            offered: None,
        })
        .collect()
}

fn guaranteed_qos(a: &NetworkArgs) -> String {
    let text = format!("cbr:pcr={}bps", a.guaranteed);
    text.parse::<Qos>().map_or(text, |q| q.to_string())
}

fn wrr_vcs(a: &NetworkArgs, loaded: bool) -> Vec<VcSpec> {
    let mut v = vec![VcSpec {
        label: if loaded {
            "guaranteed"
        } else {
            "guaranteed alone"
        }
        .into(),
        from: 0,
        qos: guaranteed_qos(a),
        size: ONE_TPDU,
        offered: None,
    }];
    if loaded {
        for n in 1..=2 {
            v.push(VcSpec {
                label: format!("best-effort-{n}"),
                from: 1,
                qos: "best-effort".into(),
                size: ONE_TPDU,
                offered: Some(a.line_rate),
            });
        }
    }
    v
}

/// The QoS of a case's reliable VCs: packet-pair asked for explicitly on a
/// round-robin network, ulib's default (the window) on a FIFO one.
fn reliable_qos(case: Case) -> &'static str {
    match case {
        Case::Rr => "reliable:flow=packet-pair",
        Case::Abr => "reliable:flow=abr",
        _ => "reliable",
    }
}

/// One run of one case: the VCs' runs (for wrr, the guaranteed VC alone first).
fn run_case(a: &NetworkArgs, case: Case, pb: &ProgressBar) -> anyhow::Result<Vec<VcRun>> {
    match case {
        Case::Rr | Case::Fifo | Case::RrWindow | Case::Abr => run_vcs(
            a,
            case.scheduler(),
            &reliable_vcs(reliable_qos(case), a.size as usize),
            pb,
        ),
        Case::Wrr => {
            let mut alone = run_vcs(a, "wrr", &wrr_vcs(a, false), pb)?;
            alone.extend(run_vcs(a, "wrr", &wrr_vcs(a, true), pb)?);
            Ok(alone)
        }
    }
}

fn flow_of(qos: &str) -> String {
    qos.parse::<Qos>()
        .map(|q| q.resolved_transport(false).flow.to_string())
        .unwrap_or_default()
}

/// The headline of one run and each VC's reference.
fn references(a: &NetworkArgs, case: Case, run: &[VcRun]) -> (f64, Vec<Option<f64>>) {
    match case {
        Case::Rr | Case::Fifo | Case::RrWindow | Case::Abr => {
            let fair = run.iter().map(|v| v.goodput_bps).sum::<f64>() / run.len().max(1) as f64;
            let dev = run
                .iter()
                .map(|v| (v.goodput_bps - fair).abs() / fair)
                .fold(0.0, f64::max);
            (dev, vec![Some(fair); run.len()])
        }
        Case::Wrr => {
            let reserved = a.guaranteed as f64;
            let mut refs = vec![None; run.len()];
            refs[0] = Some(reserved);
            if let Some(r) = refs.get_mut(1) {
                *r = Some(reserved);
            }
            let loaded = run.get(1).map_or(f64::NAN, |v| v.goodput_bps / reserved);
            (loaded, refs)
        }
    }
}

fn spread(values: &[f64]) -> (f64, f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(values).unwrap_or(f64::NAN), lo, hi)
}

fn summarize(a: &NetworkArgs, case: Case, runs: Vec<Vec<VcRun>>) -> CaseResult {
    let specs: Vec<(String, String, String)> = match case {
        Case::Rr | Case::Fifo | Case::RrWindow | Case::Abr => reliable_vcs(reliable_qos(case), 0),
        Case::Wrr => {
            let mut v = wrr_vcs(a, false);
            v.extend(wrr_vcs(a, true));
            v
        }
    }
    .into_iter()
    .map(|s| (s.label, s.qos, format!("h{}", s.from + 1)))
    .collect();
    let heads: Vec<f64> = runs.iter().map(|r| references(a, case, r).0).collect();
    let (headline, headline_min, headline_max) = spread(&heads);
    let vcs = specs
        .iter()
        .enumerate()
        .map(|(i, (label, qos, from))| {
            let g: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.get(i))
                .map(|v| v.goodput_bps)
                .collect();
            let ratios: Vec<f64> = runs
                .iter()
                .filter_map(|r| {
                    Some(r.get(i)?.goodput_bps / references(a, case, r).1.get(i).copied()??)
                })
                .collect();
            let (goodput_bps, goodput_min_bps, goodput_max_bps) = spread(&g);
            let retx: Vec<f64> = runs
                .iter()
                .filter_map(|r| Some(r.get(i)?.retransmissions as f64))
                .collect();
            VcResult {
                flow: flow_of(qos),
                from: from.clone(),
                goodput_bps,
                goodput_max_bps,
                goodput_min_bps,
                label: label.clone(),
                qos: qos.clone(),
                retransmissions: median(&retx).unwrap_or(f64::NAN),
                ratio: median(&ratios),
            }
        })
        .collect::<Vec<_>>();
    let payload = a.line_rate as f64 * 48.0 / 53.0;
    let loaded: Vec<f64> = runs
        .iter()
        .map(|r| {
            let skip = usize::from(case == Case::Wrr);
            r.iter().skip(skip).map(|v| v.goodput_bps).sum::<f64>() / payload
        })
        .collect();
    CaseResult {
        case,
        goal: case.goal().into(),
        headline,
        headline_max,
        headline_min,
        per_run: runs,
        scheduler: case.scheduler().into(),
        utilization: median(&loaded).unwrap_or(f64::NAN),
        vcs,
    }
}

fn measure(a: &NetworkArgs, pb: &ProgressBar) -> anyhow::Result<NetworkResult> {
    anyhow::ensure!(a.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        a.seconds > 0.0 && a.seconds <= 60.0,
        "--seconds must be in (0, 60]"
    );
    anyhow::ensure!(
        (1..=super::MAX_SIZE).contains(&a.size),
        "--size must be 1 B to 64 MiB"
    );
    anyhow::ensure!(
        a.line_rate >= 1_000_000,
        "--line-rate must be at least 1 Mbit/s"
    );
    let steps: usize = a
        .cases
        .iter()
        .map(|c| if *c == Case::Wrr { 2 } else { 1 })
        .sum();
    pb.set_length((steps * a.runs) as u64);
    let mut per_case: Vec<Vec<Vec<VcRun>>> = vec![Vec::new(); a.cases.len()];
    for _ in 0..a.runs {
        for (i, &case) in a.cases.iter().enumerate() {
            let run = run_case(a, case, pb).with_context(|| format!("case {}", case.name()))?;
            per_case[i].push(run);
        }
    }
    let cases = a
        .cases
        .iter()
        .zip(per_case)
        .map(|(&c, runs)| summarize(a, c, runs))
        .collect();
    Ok(NetworkResult {
        cases,
        experiment: "network".into(),
        line_rate_bps: a.line_rate as f64,
        machine: Machine::now(),
        runs: a.runs,
        seconds: a.seconds,
        size: a.size as usize,
        warmup_s: a.warmup.as_secs_f64(),
    })
}

fn mbps(bps: f64) -> String {
    format!("{:.2}", bps / 1e6)
}

impl Experiment for NetworkArgs {
    type Result = NetworkResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(NetworkResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &NetworkResult) -> String {
        let mut out = format!(
            "Through a natm switch process: bottleneck port {} Mbit/s, {} s measured after {} s, median of {} run(s) [min–max]\n\n",
            r.line_rate_bps / 1e6,
            r.seconds,
            r.warmup_s,
            r.runs
        );
        for c in &r.cases {
            let mut t = table::new(
                [
                    "VC",
                    "from",
                    "QoS",
                    "flow",
                    "Mbit/s",
                    "[min–max]",
                    "× ref",
                    "retx",
                ],
                4,
            );
            for v in &c.vcs {
                t.add_row(vec![
                    v.label.clone(),
                    v.from.clone(),
                    v.qos.clone(),
                    v.flow.clone(),
                    mbps(v.goodput_bps),
                    format!("{}–{}", mbps(v.goodput_min_bps), mbps(v.goodput_max_bps)),
                    v.ratio.map_or("-".into(), |x| format!("{x:.3}")),
                    format!("{:.0}", v.retransmissions),
                ]);
            }
            let head = match c.case {
                Case::Rr | Case::Fifo | Case::RrWindow | Case::Abr => format!(
                    "max deviation from the fair share {:.1} % [{:.1}–{:.1}]",
                    c.headline * 100.0,
                    c.headline_min * 100.0,
                    c.headline_max * 100.0
                ),
                Case::Wrr => format!(
                    "guaranteed delivered / reserved while flooded {:.4} [{:.4}–{:.4}]",
                    c.headline, c.headline_min, c.headline_max
                ),
            };
            out.push_str(&format!(
                "{}: {} port ({}; × ref: fair share, or reservation)\n{}{head}; the loaded VCs use {:.1} % of the line's payload rate\nGoal: {}\n\n",
                c.case.name(),
                c.scheduler,
                match c.case {
                    Case::Rr => "three reliable VCs, packet-pair",
                    Case::Fifo | Case::RrWindow => "three reliable VCs, dynamic window",
                    Case::Abr => "three reliable VCs, ABR (ERICA's explicit rate)",
                    Case::Wrr => "a guaranteed VC alone, then beside two best-effort floods",
                },
                table::render(&t),
                c.utilization * 100.0,
                c.goal
            ));
        }
        out.push_str(&format!(
            "{} CPUs, load average {}\n",
            r.machine.cpus,
            r.machine.loadavg.as_deref().unwrap_or("?")
        ));
        out
    }

    fn figure(r: &NetworkResult, (): &(), path: &Path) -> anyhow::Result<()> {
        let rows: Vec<(String, Vec<f64>)> = r
            .cases
            .iter()
            .flat_map(|c| {
                c.vcs.iter().map(|v| {
                    (
                        format!("{}: {}", c.case.name(), v.label),
                        vec![v.goodput_bps / 1e6],
                    )
                })
            })
            .collect();
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(
                p,
                "Goodput per VC through one natm switch port",
                "Mbit/s",
                &["goodput"],
                &rows,
            )
        })
    }
}
