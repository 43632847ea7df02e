//! `natm perf`: measure stacks side by side on this machine, in one run: round-trip
//! latency and single-connection throughput over loopback, each measurement repeated
//! with the stacks interleaved (ABAB…, so machine noise hits all alike), reported as
//! the median of runs in a table or one JSON document; and the other experiments of
//! seed 000 §6 and seed 001 §8 (guaranteed, cost, livelock, isolation, loss), each with
//! its own module, and `all`, which runs the suite and writes a report.
//!
//! Performance is measured here and only here; tests check the shape of the results,
//! never their size.

mod all;
mod calls;
mod cost;
mod fit;
mod framing;
mod guaranteed;
mod isolation;
mod latency;
mod livelock;
#[cfg(feature = "quic")]
mod loss;
mod natm;
#[cfg(feature = "quic")]
mod quic;
mod report;
mod sizes;
mod stack;
mod stages;
mod stats;
mod tcp;
mod throughput;
mod udp;

use anyhow::Context as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use super::units;
use super::CliResult;
use latency::LatencyConfig;
use stack::{Registry, Stack, StackOptions};
use throughput::ThroughputConfig;

/// Every stack `natm perf` can measure: each stack file's registry lines, put together
/// here so that the stack files depend on `stack` and `stack` on none of them.
const STACKS: Registry = Registry(&[
    natm::ENTRIES,
    udp::ENTRIES,
    tcp::ENTRIES,
    #[cfg(feature = "quic")]
    quic::ENTRIES,
]);

/// Largest message size accepted (buffers of this size are allocated per end).
const MAX_SIZE: u64 = 64 << 20;

/// `natm perf` experiments.
#[derive(Debug, Subcommand)]
pub(crate) enum PerfCmd {
    /// Round-trip latency: one message in flight, echoed by the server.
    Latency(LatencyArgs),
    /// Where a round trip's time goes along the natm stack: `latency --stages`.
    Stages(LatencyArgs),
    /// Single-connection throughput: messages sent back to back, rate as delivered.
    Throughput(ThroughputArgs),
    /// Receive livelock (seed 000 Figures 7–8): delivered against offered load on a
    /// best-effort VC whose receiver is the bottleneck, watermarks on and off.
    Livelock(LivelockArgs),
    /// Isolation of a guaranteed VC (seed 000 §2, §5.1): its rate alone, then while a
    /// best-effort VC floods and a reliable VC transfers in bulk.
    Isolation(IsolationArgs),
    /// Guaranteed service (seed 001 Fig. 5): delivered rate against message size at
    /// requested leaky-bucket rates.
    Guaranteed(guaranteed::GuaranteedArgs),
    /// Send-path cost (seed 000 Figs. 9–10): per-message, per-TPDU and per-byte CPU
    /// cost of `send`, from a fit over message sizes.
    Cost(cost::CostArgs),
    /// Goodput of one transfer against random loss between two network namespaces
    /// (seed 000 §5.3.3); needs root, ip, tc and nft.
    #[cfg(feature = "quic")]
    Loss(loss::LossArgs),
    /// One end of a `loss` transfer, run inside a namespace by `natm perf loss`.
    #[cfg(feature = "quic")]
    #[command(hide = true)]
    LossPeer(loss::PeerArgs),
    /// The whole suite within a bounded time: report.md, JSON and figures in --out.
    All(all::AllArgs),
    /// Call setup and release through two sigds on loopback, direct mode as reference.
    Calls(calls::CallsArgs),
    /// List the stacks that can be measured.
    Stacks,
}

/// Options shared by every experiment.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// Repeat each measurement this many times, interleaving the stacks; the report
    /// gives the median of runs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Discard what happens during this time at the start of each run.
    #[arg(long, default_value = "200ms", value_parser = units::duration)]
    warmup: Duration,
    /// Socket buffer size to ask for (SO_SNDBUF and SO_RCVBUF; Linux grants twice
    /// this, capped by net.core.[rw]mem_max). 0 keeps the kernel's default (for TCP,
    /// autotuning).
    #[arg(long, default_value = "4MiB", value_parser = units::bytes)]
    sockbuf: u64,
    /// Ratios are relative to this stack (default: the first of --stacks).
    #[arg(long)]
    reference: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to this file (the table still goes to stdout).
    #[arg(long)]
    save: Option<std::path::PathBuf>,
    /// Draw the figure into this SVG file, and the same as PNG beside it.
    #[arg(long)]
    figure: Option<std::path::PathBuf>,
}

/// Print the table or the JSON document, and save the JSON if asked.
fn output(
    common: &Common,
    table: impl FnOnce() -> String,
    json: impl FnOnce() -> String,
) -> CliResult {
    output_to(common.json, common.save.as_deref(), table, json)
}

/// [`output`] for experiments without the stack options of [`Common`].
fn output_to(
    as_json: bool,
    save: Option<&std::path::Path>,
    table: impl FnOnce() -> String,
    json: impl FnOnce() -> String,
) -> CliResult {
    let doc = (as_json || save.is_some()).then(json);
    if let (Some(path), Some(doc)) = (save, &doc) {
        std::fs::write(path, format!("{doc}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    match doc {
        Some(doc) if as_json => println!("{doc}"),
        _ => print!("{}", table()),
    }
    Ok(())
}

/// Options of the experiments that build their own natm hosts.
#[derive(Debug, Args)]
pub(crate) struct Output {
    /// Repeat each measurement this many times, interleaved; the report gives the
    /// median of runs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Discard what happens during this time at the start of each run.
    #[arg(long, default_value = "500ms", value_parser = units::duration)]
    warmup: Duration,
    /// Measure each run for this long after the warm-up.
    #[arg(long, default_value = "2s", value_parser = units::duration)]
    time: Duration,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON document to this file (the table still goes to stdout).
    #[arg(long)]
    save: Option<std::path::PathBuf>,
    /// Draw the figure into this SVG file.
    #[arg(long)]
    figure: Option<std::path::PathBuf>,
}

/// `natm perf livelock`.
#[derive(Debug, Args)]
pub(crate) struct LivelockArgs {
    /// QoS of the VC: best effort, messages of several TPDUs.
    #[arg(long, default_value = "best-effort:tpdu=4096")]
    qos: String,
    /// Message size.
    #[arg(long, default_value = "16KiB", value_parser = units::bytes)]
    size: u64,
    /// CPU time the receiving application burns per message; sets its capacity C.
    #[arg(long, default_value = "200us", value_parser = units::duration)]
    work: Duration,
    /// Offered loads, multiples of C, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10")]
    loads: Vec<f64>,
    /// High watermark of the "on" case (default: the engine's default).
    #[arg(long, value_parser = units::bytes, requires = "low")]
    high: Option<u64>,
    /// Low watermark of the "on" case (default: the engine's default).
    #[arg(long, value_parser = units::bytes, requires = "high")]
    low: Option<u64>,
    /// Give the receiving host this many CPUs (its driver and application thread
    /// pinned there), the sender the rest: the wasted work of reading what is later
    /// dropped then competes with the application, as on the paper's one-CPU hosts.
    /// Default: 1 where this process may use two CPUs or more; 0: no pinning.
    #[arg(long)]
    cpus: Option<usize>,
    #[command(flatten)]
    out: Output,
}

/// `natm perf latency`.
#[derive(Debug, Args)]
pub(crate) struct LatencyArgs {
    /// Message size, each way.
    #[arg(long, default_value = "32", value_parser = units::bytes)]
    size: u64,
    /// Measure each run for this long after the warm-up…
    #[arg(long, default_value = "3s", value_parser = units::duration)]
    time: Duration,
    /// …or until this many round trips, whichever comes first.
    #[arg(long, default_value_t = 1_000_000)]
    count: usize,
    /// Stacks to measure, comma-separated (see `natm perf stacks`); default
    /// udp,tcp,udp-busy, or with --stages natm-be,natm-be-sched,natm-reliable,natm-reliable-sched.
    #[arg(long, value_delimiter = ',')]
    stacks: Vec<String>,
    /// Report where the time goes along the natm stack instead: timestamps at the send
    /// call, dispatch, adaptor, receive, delivery and recv return, per segment
    /// (natm stacks only; `--figure` draws stacked bars).
    #[arg(long)]
    stages: bool,
    #[command(flatten)]
    common: Common,
}

/// `natm perf throughput`.
#[derive(Debug, Args)]
pub(crate) struct ThroughputArgs {
    /// One message size (instead of --sizes).
    #[arg(long, value_parser = units::bytes, conflicts_with = "sizes")]
    size: Option<u64>,
    /// Message sizes, comma-separated (K and KiB are 1024 B, MiB 1024² B; M and MB
    /// are 10⁶ B).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = units::bytes,
        default_value = "64,256,1KiB,4KiB,16KiB,64KiB,256KiB,1MiB"
    )]
    sizes: Vec<u64>,
    /// Measure each run for this long after the warm-up, as the receiver sees it.
    #[arg(long, default_value = "2s", value_parser = units::duration)]
    time: Duration,
    /// Stacks to measure, comma-separated (see `natm perf stacks`).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp")]
    stacks: Vec<String>,
    #[command(flatten)]
    common: Common,
}

/// `natm perf isolation`.
#[derive(Debug, Args)]
pub(crate) struct IsolationArgs {
    /// Peak cell rate of the guaranteed VC, payload bit/s (`cbr:pcr=…`).
    #[arg(long, default_value = "20Mbps", value_parser = units::rate)]
    pcr: u64,
    /// Message size on the guaranteed VC.
    #[arg(long, default_value = "8KiB", value_parser = units::bytes)]
    size: u64,
    /// QoS of the flooding VC.
    #[arg(long, default_value = "best-effort")]
    flood_qos: String,
    /// QoS of the bulk VC.
    #[arg(long, default_value = "reliable")]
    bulk_qos: String,
    /// Message size on the flooding and bulk VCs.
    #[arg(long, default_value = "64KiB", value_parser = units::bytes)]
    load_size: u64,
    /// Width of the bins of the rate-over-time figure.
    #[arg(long, default_value = "100ms", value_parser = units::duration)]
    bin: Duration,
    #[command(flatten)]
    out: Output,
}

/// Run a `natm perf` subcommand.
pub(crate) fn run(cmd: PerfCmd) -> CliResult {
    match cmd {
        PerfCmd::Latency(a) => run_latency(&a),
        PerfCmd::Stages(mut a) => {
            a.stages = true;
            run_latency(&a)
        }
        PerfCmd::Throughput(a) => run_throughput(&a),
        PerfCmd::Livelock(a) => run_livelock(&a),
        PerfCmd::Isolation(a) => run_isolation(&a),
        PerfCmd::Guaranteed(a) => guaranteed::cmd(&a),
        PerfCmd::Cost(a) => cost::cmd(&a),
        PerfCmd::All(a) => all::cmd(&a),
        #[cfg(feature = "quic")]
        PerfCmd::Loss(a) => loss::cmd(&a),
        #[cfg(feature = "quic")]
        PerfCmd::LossPeer(a) => loss::peer(&a),
        PerfCmd::Calls(a) => calls::run(&a),
        PerfCmd::Stacks => {
            let width = STACKS.entries().map(|e| e.name.len()).max().unwrap_or(0);
            for e in STACKS.entries() {
                println!("{:width$}  {}", e.name, e.about);
            }
            Ok(())
        }
    }
}

/// The stacks asked for, built, and the index of the reference among them.
fn setup(names: &[String], common: &Common) -> anyhow::Result<(Vec<Box<dyn Stack>>, usize)> {
    if common.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let opts = StackOptions {
        sockbuf: match common.sockbuf {
            0 => None,
            n => Some(usize::try_from(n).map_err(|_| anyhow::anyhow!("--sockbuf too large"))?),
        },
        ..StackOptions::default()
    };
    let stacks = STACKS.resolve(names, &opts)?;
    let reference = match &common.reference {
        None => 0,
        Some(r) => stacks.iter().position(|s| s.name() == r).ok_or_else(|| {
            let names: Vec<_> = stacks.iter().map(|s| s.name()).collect();
            anyhow::anyhow!(
                "--reference {r} is not among the stacks measured ({})",
                names.join(", ")
            )
        })?,
    };
    Ok((stacks, reference))
}

fn check_size(size: u64) -> anyhow::Result<usize> {
    if size == 0 || size > MAX_SIZE {
        return Err(anyhow::anyhow!(
            "message size {size} B is out of range: 1 B to {} MiB",
            MAX_SIZE >> 20
        ));
    }
    Ok(size as usize)
}

/// A progress bar on stderr (drawn only when stderr is a terminal).
fn progress(total: usize) -> ProgressBar {
    let pb = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {elapsed} [{bar:30}] {pos}/{len} ~{eta} left  {msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    if !pb.is_hidden() {
        pb.enable_steady_tick(Duration::from_millis(250));
    }
    pb
}

fn run_latency(a: &LatencyArgs) -> CliResult {
    if a.stages && !::natm::stages::COMPILED {
        anyhow::bail!("--stages needs natm built with the `stages` feature (a default feature)");
    }
    let names: Vec<String> = match (a.stacks.is_empty(), a.stages) {
        (false, _) => a.stacks.clone(),
        (true, true) => stages::DEFAULT_STACKS.map(String::from).to_vec(),
        (true, false) => ["udp", "tcp", "udp-busy"].map(String::from).to_vec(),
    };
    let (stacks, reference) = setup(&names, &a.common)?;
    let size = check_size(a.size)?;
    for s in &stacks {
        if let Some(max) = s.max_message().filter(|&m| size > m) {
            return Err(anyhow::anyhow!(
                "{}: carries at most {max} B in one message; use --size {max} or less, or leave {} out",
                s.name(),
                s.name()
            ));
        }
    }
    let cfg = LatencyConfig {
        size,
        warmup: a.common.warmup,
        time: a.time,
        count: a.count.max(1),
        stages: a.stages,
    };
    let runs = a.common.runs;
    let pb = progress(runs * stacks.len());
    let mut results: Vec<Vec<latency::Samples>> = stacks.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        for (i, s) in stacks.iter().enumerate() {
            pb.set_message(format!("latency {} run {}/{runs}", s.name(), run + 1));
            let samples =
                latency::run(s.as_ref(), &cfg).with_context(|| format!("stack {}", s.name()))?;
            results[i].push(samples);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let names: Vec<&str> = stacks.iter().map(|s| s.name()).collect();
    if a.stages {
        let rows = stages::rows(&names, &results);
        if rows.is_empty() {
            anyhow::bail!("--stages: no round trip of a natm stack was matched");
        }
        if let Some(path) = &a.common.figure {
            stages::figure(path, &cfg, &rows)?;
        }
        return output(
            &a.common,
            || stages::table(&cfg, runs, &rows),
            || stages::json(&cfg, runs, &rows),
        );
    }
    let rows = report::latency_rows(&names, results);
    if let Some(path) = &a.common.figure {
        report::latency_figure(path, &cfg, &rows)?;
    }
    output(
        &a.common,
        || report::latency_table(&cfg, runs, &rows, reference),
        || report::latency_json(&cfg, runs, &rows, reference),
    )
}

fn run_throughput(a: &ThroughputArgs) -> CliResult {
    let (stacks, reference) = setup(&a.stacks, &a.common)?;
    let sizes = match a.size {
        Some(s) => vec![check_size(s)?],
        None => a
            .sizes
            .iter()
            .map(|&s| check_size(s))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let runs = a.common.runs;
    let pb = progress(sizes.len() * runs * stacks.len());
    let mut rows = Vec::new();
    for &size in &sizes {
        let cfg = ThroughputConfig {
            size,
            warmup: a.common.warmup,
            time: a.time,
        };
        let mut results: Vec<Vec<throughput::Rate>> = stacks.iter().map(|_| Vec::new()).collect();
        for run in 0..runs {
            for (i, s) in stacks.iter().enumerate() {
                pb.set_message(format!(
                    "throughput {} {} run {}/{runs}",
                    s.name(),
                    report::human_size(size),
                    run + 1
                ));
                let rate = throughput::run(s.as_ref(), &cfg)
                    .with_context(|| format!("{} at {size} B", s.name()))?;
                results[i].push(rate);
                pb.inc(1);
            }
        }
        for (s, r) in stacks.iter().zip(results) {
            rows.push(report::ThroughputRow::new(s.name(), size, r));
        }
    }
    pb.finish_and_clear();
    let reference = stacks[reference].name();
    let (warmup, time) = (a.common.warmup, a.time);
    let curves = sizes::curves(
        rows.iter()
            .map(|r| (r.stack().to_string(), r.size(), r.bps())),
    );
    if let Some(path) = &a.common.figure {
        sizes::figure(path, "throughput against message size, loopback", &curves)?;
    }
    output(
        &a.common,
        || report::throughput_table(warmup, time, runs, &rows, reference) + &sizes::table(&curves),
        || report::throughput_json(warmup, time, runs, &rows, reference, sizes::json(&curves)),
    )
}

fn run_livelock(a: &LivelockArgs) -> CliResult {
    let o = &a.out;
    if o.runs == 0 || a.loads.is_empty() || a.loads.iter().any(|&l| !(l > 0.0 && l.is_finite())) {
        anyhow::bail!("--runs must be at least 1 and --loads positive");
    }
    if a.work.is_zero() || o.time.is_zero() {
        anyhow::bail!("--work and --time must be positive");
    }
    let cfg = livelock::LivelockConfig {
        qos: a.qos.clone(),
        size: check_size(a.size)?,
        work: a.work,
        warmup: o.warmup,
        time: o.time,
        watermarks: match (a.high, a.low) {
            (Some(high), Some(low)) if low <= high => Some(::natm::ulib::Watermarks {
                high: high as usize,
                low: low as usize,
            }),
            (Some(_), Some(_)) => return Err(anyhow::anyhow!("--low must not exceed --high")),
            _ => livelock::default_watermarks(),
        },
        cpus: match a.cpus {
            Some(0) => None,
            Some(n) => Some(n),
            None => ::natm::ulib::current_cpus()
                .is_ok_and(|c| c.len() >= 2)
                .then_some(1),
        },
    };
    let pb = progress(o.runs * a.loads.len() * 2);
    let mut rows: Vec<livelock::Row> = a
        .loads
        .iter()
        .flat_map(|&load| {
            [true, false].map(|watermarks| livelock::Row {
                load,
                watermarks,
                runs: Vec::new(),
            })
        })
        .collect();
    for run in 0..o.runs {
        for row in &mut rows {
            let wm = if row.watermarks { "on" } else { "off" };
            pb.set_message(format!(
                "livelock {}×C watermarks {wm} run {}/{}",
                row.load,
                run + 1,
                o.runs
            ));
            let s = livelock::run(&cfg, row.load, row.watermarks)
                .with_context(|| format!("{}×C, watermarks {wm}", row.load))?;
            row.runs.push(s);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    if let Some(path) = &o.figure {
        crate::cli::plot::both(path, |p| livelock::figure(p, &cfg, &rows))?;
    }
    output_to(
        o.json,
        o.save.as_deref(),
        || livelock::table(&cfg, o.runs, &rows),
        || livelock::json_doc(&cfg, o.runs, &rows),
    )
}

fn run_isolation(a: &IsolationArgs) -> CliResult {
    let o = &a.out;
    if o.runs == 0 || o.time.is_zero() || a.bin.is_zero() || a.pcr == 0 {
        anyhow::bail!("--runs, --time, --bin and --pcr must be positive");
    }
    let cfg = isolation::IsolationConfig {
        g_qos: if a.pcr.is_multiple_of(1_000_000) {
            format!("cbr:pcr={}Mbps", a.pcr / 1_000_000)
        } else {
            format!("cbr:pcr={}bps", a.pcr)
        },
        g_size: check_size(a.size)?.max(8),
        g_rate: a.pcr as f64,
        probe_qos: "cbr:pcr=1Mbps".into(),
        be_qos: a.flood_qos.clone(),
        be_size: check_size(a.load_size)?,
        rel_qos: a.bulk_qos.clone(),
        rel_size: check_size(a.load_size)?,
        warmup: o.warmup,
        time: o.time,
        bin: a.bin,
    };
    let pb = progress(o.runs * 2);
    let mut results = Vec::new();
    for run in 0..o.runs {
        for loaded in [false, true] {
            let phase = if loaded { "loaded" } else { "alone" };
            pb.set_message(format!("isolation {phase} run {}/{}", run + 1, o.runs));
            results
                .push(isolation::run(&cfg, loaded).with_context(|| format!("isolation {phase}"))?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    if let Some(path) = &o.figure {
        crate::cli::plot::both(path, |p| isolation::figure(p, &cfg, &results))?;
    }
    output_to(
        o.json,
        o.save.as_deref(),
        || isolation::table(&cfg, o.runs, &results),
        || isolation::json_doc(&cfg, o.runs, &results),
    )
}
