//! `natm sim`: one scenario through the deterministic simulator, one result line per VC
//! (or JSON), and optionally a CSV time series. Figures of a run are drawn by the lab
//! (`natm-lab sim-plot`, which runs the same scenario through [`run_one`]): the
//! operator binary links no plotting code (docs/decisions/0032-lab-crate.md).

use anyhow::Context as _;
use std::io::Write as _;
use std::time::{Duration, Instant as WallInstant};

use clap::{Args, ValueEnum};
use serde_json::json;

use super::units;
use super::{outln, CliResult};
use natm::transport::{FlowKind, Semantics, TransportConfig};
use natm::wire::qos::Qos;
use natm_sim::scenario::{self, Report, Scenario, VcSpec};
use natm_sim::{FrameOverhead, GilbertElliott};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ServiceArg {
    Reliable,
    Guaranteed,
    BestEffort,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FlowArg {
    None,
    LeakyBucket,
    PacketPair,
    Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SchedArg {
    Fifo,
    Rr,
}

/// Run one scenario: VCs from their own hosts through one shared bottleneck.
///
/// Rates in a QoS mean application payload bits per second; the bottleneck `--rate`
/// counts frame bytes on the wire (TPDU header and AAL5 trailer included). Goodput is
/// a VC's application bytes delivered over the time it ran: from its start until both
/// ends finished (or the end of the run); lost bytes take time and count for nothing.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Service class of each VC (repeat or comma-separate for several VCs). A
    /// guaranteed VC reserves --rate / VCs / 2 (50 Mbit/s alone on 100 Mbit/s; give
    /// --qos cbr:pcr=RATE for another); under rr the bottleneck weights it by that.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "reliable")]
    service: Vec<ServiceArg>,
    /// Number of VCs of the (single) service given.
    #[arg(long, default_value_t = 1)]
    vcs: usize,
    /// QoS of each VC in Linux-ATM text (overrides --service for that VC), e.g.
    /// 'cbr:pcr=20Mbps' or 'reliable:flow=window'. Repeat for several VCs.
    #[arg(long)]
    qos: Vec<String>,
    /// Flow control for every VC (default: from the service and the scheduler:
    /// guaranteed → leaky-bucket, reliable → packet-pair on rr, window on fifo).
    #[arg(long, value_enum)]
    flow: Option<FlowArg>,
    /// Bottleneck rate.
    #[arg(long, default_value = "100Mbps", value_parser = units::rate)]
    rate: u64,
    /// Round-trip propagation delay.
    #[arg(long, default_value = "1ms", value_parser = units::duration)]
    rtt: Duration,
    /// Random loss on the bottleneck (0.05 or 5%).
    #[arg(long, default_value = "0", value_parser = units::probability)]
    loss: f64,
    /// Random loss of ACKs on the return path.
    #[arg(long, default_value = "0", value_parser = units::probability)]
    ack_loss: f64,
    /// Bursty (Gilbert) loss: P(good→bad),P(bad→good), losing every frame while bad.
    #[arg(long)]
    burst: Option<String>,
    /// Duplication probability on the bottleneck.
    #[arg(long, default_value = "0", value_parser = units::probability)]
    dup: f64,
    /// Corruption probability on the bottleneck (caught by the AAL5 CRC).
    #[arg(long, default_value = "0", value_parser = units::probability)]
    corrupt: f64,
    /// Bottleneck buffer in frames (per VC under rr).
    #[arg(long, default_value_t = 64)]
    queue: u64,
    /// Bottleneck scheduling.
    #[arg(long, value_enum, default_value = "rr")]
    sched: SchedArg,
    /// Change the bottleneck rate at a time: TIME:RATE, e.g. 2s:50Mbps.
    #[arg(long)]
    rate_change: Option<String>,
    /// Application bytes per VC.
    #[arg(long, default_value = "100MB", value_parser = units::bytes)]
    bytes: u64,
    /// Message size.
    #[arg(long, default_value = "64KiB", value_parser = units::bytes)]
    msg_size: u64,
    /// Byte-stream semantics instead of messages.
    #[arg(long)]
    stream: bool,
    /// TPDU payload size.
    #[arg(long, default_value = "4096", value_parser = units::bytes)]
    tpdu: u64,
    /// Error-control window, TPDUs. Default: as the engine's (256, or a --qos
    /// text's own).
    #[arg(long)]
    window: Option<u32>,
    /// Detect lost retransmissions from ACK order (specs.md §7.2), as the engine
    /// does; `--refine false` is the paper's rule exactly.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    refine: bool,
    /// Carry frames as 53-byte cells (the cell tax) instead of AAL5 frames.
    #[arg(long)]
    cells: bool,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up after this much simulated time.
    #[arg(long, default_value = "600s", value_parser = units::duration)]
    time_limit: Duration,
    /// Write a time series (CSV) to this file.
    #[arg(long)]
    series: Option<std::path::PathBuf>,
    /// Sampling interval of the series.
    #[arg(long, default_value = "10ms", value_parser = units::duration)]
    interval: Duration,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Run a whole network from a TOML scenario file instead (hosts on a tree of
    /// switches, groups of VCs between random hosts; see docs/tools.md and
    /// scenarios/internet.toml); prints each group's results, wall time per simulated
    /// second, events per second and memory per VC. Only --json and --scale apply.
    #[arg(long)]
    scenario: Option<std::path::PathBuf>,
    /// With --scenario: multiply every group's VC count (0.01 runs 1 % of them).
    #[arg(long, default_value_t = 1.0, requires = "scenario")]
    scale: f64,
}

fn flow_kind(f: FlowArg) -> FlowKind {
    match f {
        FlowArg::None => FlowKind::None,
        FlowArg::LeakyBucket => FlowKind::LeakyBucket,
        FlowArg::PacketPair => FlowKind::PacketPair,
        FlowArg::Window => FlowKind::Window,
    }
}

fn config_for(a: &SimArgs, service: ServiceArg, rr: bool) -> TransportConfig {
    let share = a.rate / (a.vcs.max(a.service.len()).max(1) as u64) / 2;
    let mut cfg = match service {
        ServiceArg::Reliable => {
            let mut c = TransportConfig::reliable();
            c.flow = if rr {
                FlowKind::PacketPair
            } else {
                FlowKind::Window
            };
            c
        }
        ServiceArg::Guaranteed => TransportConfig::guaranteed(share),
        ServiceArg::BestEffort => TransportConfig::best_effort(),
    };
    if let Some(f) = a.flow {
        cfg.flow = flow_kind(f);
        if cfg.flow == FlowKind::LeakyBucket && cfg.rate == 0 {
            cfg.rate = share;
        }
    }
    cfg
}

fn specs(a: &SimArgs) -> anyhow::Result<Vec<VcSpec>> {
    let rr = a.sched == SchedArg::Rr;
    let mut out = Vec::new();
    if !a.qos.is_empty() {
        for text in &a.qos {
            let q: Qos = text.parse().with_context(|| format!("--qos '{text}'"))?;
            let cfg =
                TransportConfig::from_qos(&q, rr).with_context(|| format!("--qos '{text}'"))?;
            out.push((q.service().to_string(), cfg));
        }
    } else if a.service.len() > 1 {
        for &s in &a.service {
            out.push((service_label(s).to_string(), config_for(a, s, rr)));
        }
    } else {
        let s = a.service[0];
        for _ in 0..a.vcs.max(1) {
            out.push((service_label(s).to_string(), config_for(a, s, rr)));
        }
    }
    let mut specs = Vec::new();
    for (label, mut cfg) in out {
        cfg.tpdu_size = u32::try_from(a.tpdu).context("--tpdu too large")?;
        cfg.window = a.window.unwrap_or(cfg.window);
        cfg.rcv_buf = cfg.rcv_buf.max(cfg.window as usize * a.tpdu as usize);
        cfg.snd_buf = cfg.snd_buf.max(2 * cfg.rcv_buf);
        cfg.detect_lost_retx = a.refine;
        if a.stream {
            cfg.semantics = Semantics::Stream;
        }
        cfg.validate()?;
        specs.push(VcSpec {
            label,
            config: cfg,
            bytes: a.bytes,
            msg_size: a.msg_size,
            start: Duration::ZERO,
        });
    }
    Ok(specs)
}

fn service_label(s: ServiceArg) -> &'static str {
    match s {
        ServiceArg::Reliable => "reliable",
        ServiceArg::Guaranteed => "guaranteed",
        ServiceArg::BestEffort => "best-effort",
    }
}

fn flow_name(f: FlowKind) -> String {
    f.to_string()
}

fn parse_burst(s: &str) -> anyhow::Result<GilbertElliott> {
    let (a, b) = s
        .split_once(',')
        .with_context(|| format!("--burst '{s}': give P(good→bad),P(bad→good), e.g. 0.01,0.3"))?;
    let gb = units::probability(a)?;
    let bg = units::probability(b)?;
    Ok(GilbertElliott::new(gb, bg))
}

fn parse_rate_change(s: &str) -> anyhow::Result<(Duration, u64)> {
    let (t, r) = s
        .split_once(':')
        .with_context(|| format!("--rate-change '{s}': give TIME:RATE, e.g. 2s:50Mbps"))?;
    Ok((units::duration(t)?, units::rate(r)?))
}

pub(crate) fn run(a: SimArgs) -> CliResult {
    if let Some(path) = &a.scenario {
        return super::sim_net::run(path, a.scale, a.json);
    }
    run_one(&a, false).map(drop)
}

/// `natm sim` on the single-bottleneck scenario `a` describes (not a `--scenario`
/// file): runs it, writes `--series`, prints the results (text or `--json`), and
/// returns the scenario and its report. `sampled` samples the time series every
/// `--interval` even without `--series`, for a figure of the run.
pub fn run_one(a: &SimArgs, sampled: bool) -> anyhow::Result<(Scenario, Report)> {
    anyhow::ensure!(
        a.scenario.is_none(),
        "--scenario runs a whole network, which has no time series to draw"
    );
    let vcs = specs(a)?;
    let scenario = Scenario {
        rate_bps: a.rate,
        rtt: a.rtt,
        loss: a.loss,
        ack_loss: a.ack_loss,
        burst: a.burst.as_deref().map(parse_burst).transpose()?,
        duplicate: a.dup,
        corrupt: a.corrupt,
        queue_frames: a.queue,
        round_robin: a.sched == SchedArg::Rr,
        rate_change: a
            .rate_change
            .as_deref()
            .map(parse_rate_change)
            .transpose()?,
        access_rate_bps: a.rate.saturating_mul(10),
        overhead: if a.cells {
            FrameOverhead::Cells
        } else {
            FrameOverhead::Aal5Trailer
        },
        seed: a.seed,
        vcs,
        time_limit: a.time_limit,
        series_interval: (sampled || a.series.is_some()).then_some(a.interval),
    };
    let wall = WallInstant::now();
    let report = scenario::run(&scenario)?;
    let wall = wall.elapsed();
    if let Some(path) = &a.series {
        write_series(path, &report).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if a.json {
        outln!("{}", to_json(&scenario, &report, wall));
    } else {
        print_text(&scenario, &report, wall);
    }
    Ok((scenario, report))
}

fn to_json(s: &Scenario, r: &Report, wall: Duration) -> serde_json::Value {
    let vcs: Vec<_> = r
        .vcs
        .iter()
        .map(|v| {
            json!({
                "service": v.label,
                "flow": flow_name(v.flow),
                "error_control": v.error_control,
                "goodput_bps": v.goodput_bps,
                "bytes_sent": v.bytes_sent,
                "bytes_delivered": v.bytes_delivered,
                "messages_delivered": v.messages_delivered,
                "intact": v.intact,
                "closed": v.closed,
                "fast_retransmits": v.sender.retx_fast,
                "timeouts": v.sender.timeouts,
                "windows_lost": v.sender.windows_lost,
                "timeout_retransmits": v.sender.retx_timeout,
                "head_retransmits": v.sender.retx_head,
                "max_rcv_buffer": v.receiver.max_rcv_buffered,
                "srtt_us": v.srtt.map(|d| d.as_micros() as u64),
                "messages_lost": v.messages_lost,
                "finished_at_s": v.finished_at.map(|d| d.as_secs_f64()),
            })
        })
        .collect();
    let sum = |f: fn(&scenario::VcReport) -> u64| r.vcs.iter().map(f).sum::<u64>();
    json!({
        "rate_bps": s.rate_bps,
        "rtt_us": s.rtt.as_micros() as u64,
        "loss": s.loss,
        "seed": s.seed,
        "goodput_bps": r.vcs.iter().map(|v| v.goodput_bps).sum::<f64>(),
        "bytes_sent": sum(|v| v.bytes_sent),
        "bytes_delivered": sum(|v| v.bytes_delivered),
        "intact": r.vcs.iter().all(|v| v.intact),
        "fast_retransmits": sum(|v| v.sender.retx_fast),
        "timeouts": sum(|v| v.sender.timeouts),
        "windows_lost": sum(|v| v.sender.windows_lost),
        "head_retransmits": sum(|v| v.sender.retx_head),
        "max_rcv_buffer": r.vcs.iter().map(|v| v.receiver.max_rcv_buffered).max().unwrap_or(0),
        "bottleneck_drops": r.bottleneck.dropped(),
        "sim_time_s": r.sim_time.as_secs_f64(),
        "wall_time_s": wall.as_secs_f64(),
        "vcs": vcs,
    })
}

fn mbps(x: f64) -> f64 {
    x / 1e6
}

fn print_text(s: &Scenario, r: &Report, wall: Duration) {
    for (i, v) in r.vcs.iter().enumerate() {
        outln!(
            "vc{} {} flow={}{}: goodput {:.2} Mbit/s ({:.1}% of {:.0} Mbit/s), {}/{} bytes delivered, {}, \
             fast retx {}, timeouts {}, head retx {}, max rcv buffer {} B",
            32 + i,
            v.label,
            flow_name(v.flow),
            match s.vcs.get(i).map(|c| (c.config.flow, c.config.rate)) {
                Some((FlowKind::LeakyBucket, r)) if r > 0 =>
                    format!(" reserved {:.2} Mbit/s", mbps(r as f64)),
                _ => String::new(),
            },
            mbps(v.goodput_bps),
            100.0 * v.goodput_bps / s.rate_bps as f64,
            mbps(s.rate_bps as f64),
            v.bytes_delivered,
            v.bytes_sent,
            if v.intact { "intact" } else { "CORRUPTED" },
            v.sender.retx_fast,
            v.sender.timeouts,
            v.sender.retx_head,
            v.receiver.max_rcv_buffered,
        );
    }
    outln!(
        "bottleneck: {} frames out, {} dropped (queue {}, random {}, burst {}, corrupt {}); simulated {:.3} s in {:.3} s wall, {} events",
        r.bottleneck.frames_out,
        r.bottleneck.dropped(),
        r.bottleneck.dropped_queue_full,
        r.bottleneck.dropped_random,
        r.bottleneck.dropped_burst,
        r.bottleneck.dropped_corrupt,
        r.sim_time.as_secs_f64(),
        wall.as_secs_f64(),
        r.events
    );
}

fn write_series(path: &std::path::Path, r: &Report) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    write!(f, "time_s,queue_frames")?;
    for i in 0..r.vcs.len() {
        let n = 32 + i;
        write!(
            f,
            ",vc{n}_rate_bps,vc{n}_window,vc{n}_rate_est_bps,vc{n}_queue"
        )?;
    }
    writeln!(f)?;
    for row in &r.series {
        write!(f, "{:.6},{}", row.t, row.queue_frames)?;
        for v in &row.vcs {
            let opt = |x: Option<f64>| x.map(|v| format!("{v:.3}")).unwrap_or_default();
            let (rate, q) = (v.rate_bps, v.queue_frames);
            write!(
                f,
                ",{rate:.0},{},{},{q}",
                opt(v.window),
                opt(v.rate_set_bps)
            )?;
        }
        writeln!(f)?;
    }
    f.flush()
}
