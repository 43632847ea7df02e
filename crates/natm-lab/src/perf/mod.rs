//! `natm-lab perf`: measure stacks side by side on this machine, in one run: round-trip
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
mod calls_load;
mod convergence;
mod cost;
mod counts;
#[cfg(feature = "quic")]
mod delayline;
mod experiment;
mod fit;
mod framing;
mod guaranteed;
mod isolation;
mod latency;
mod livelock;
#[cfg(feature = "quic")]
mod loss;
#[cfg(feature = "quic")]
mod mesh;
mod multipoint;
mod natm;
mod natm_sig;
#[cfg(feature = "quic")]
mod netlab;
mod network;
mod overhead;
#[cfg(feature = "quic")]
mod quic;
mod report;
mod results;
mod scale;
mod sizes;
mod stack;
mod stages;
mod stats;
mod switch;
mod switchlab;
mod tally;
mod tcp;
#[cfg(feature = "quic")]
mod tcp_tls;
mod throughput;
mod udp;
mod udp_io;

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use natm_cli::cli::units;
use natm_cli::cli::CliResult;

use experiment::{drive, Experiment, OutputArgs};
use latency::LatencyConfig;
use stack::{Registry, Stack, StackOptions};
use throughput::ThroughputConfig;

/// `HostConfig::default()` with the ports `NATM_LAB_PORTS` names (`vc`, the default,
/// or `host`): how every experiment, child processes included, compares a UDP socket
/// per VC end with one per host (issue 30). An unknown value stops the run.
pub(crate) fn host_config() -> ::natm::ulib::HostConfig {
    let mut cfg = ::natm::ulib::HostConfig::default();
    if let Ok(v) = std::env::var("NATM_LAB_PORTS") {
        match v.parse() {
            Ok(p) => cfg.engine.ports = p,
            Err(e) => panic!("NATM_LAB_PORTS: {e}"),
        }
    }
    cfg
}

/// Every stack `natm-lab perf` can measure: each stack file's registry lines, put together
/// here so that the stack files depend on `stack` and `stack` on none of them.
const STACKS: Registry = Registry(&[
    natm::ENTRIES,
    natm_sig::ENTRIES,
    udp::ENTRIES,
    tcp::ENTRIES,
    #[cfg(feature = "quic")]
    quic::ENTRIES,
    #[cfg(feature = "quic")]
    tcp_tls::ENTRIES,
]);

/// Largest message size accepted (buffers of this size are allocated per end).
const MAX_SIZE: u64 = 64 << 20;

/// `natm-lab perf` experiments.
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
    /// One end of a `loss` transfer, run inside a namespace by `natm-lab perf loss`.
    #[cfg(feature = "quic")]
    #[command(hide = true)]
    LossPeer(loss::PeerArgs),
    /// Issue 33: a mesh of `natm switch` processes with routing, each switch and host
    /// in its own network namespace, trunks as rate-limited veth pairs: convergence,
    /// calls between every host pair, setups per second, failover after a trunk cut;
    /// needs root, ip and tc.
    #[cfg(feature = "quic")]
    Mesh(mesh::MeshArgs),
    /// A host of `natm-lab perf mesh`, run inside its namespace.
    #[cfg(feature = "quic")]
    #[command(hide = true)]
    MeshHost(mesh::HostArgs),
    /// The delay line of `natm-lab perf loss --rtt`, run in the middle namespace.
    #[cfg(feature = "quic")]
    #[command(hide = true)]
    DelayLine(delayline::DelayLineArgs),
    /// The whole suite within a bounded time: report.md, JSON and figures in --out.
    All(all::AllArgs),
    /// Call setup and release through two sigds on loopback, direct mode as reference.
    Calls(calls::CallsArgs),
    /// Seed 004 §7: call setup time through two sigds against competing CPU-bound
    /// pipelines, sigd at the default priority and raised; direct mode as reference.
    CallsLoad(calls_load::CallsLoadArgs),
    /// Many concurrent connections in one process: setup rate, memory and descriptors
    /// per connection, aggregate and per-connection goodput as the count grows.
    Scale(scale::ScaleArgs),
    /// The accepting, receiving end of `natm-lab perf scale`, run as its own process.
    #[command(hide = true)]
    ScalePeer(scale::PeerArgs),
    /// Forwarding speed of a `natm switch` process beside a minimal UDP relay, cell
    /// and frame mode, on loopback.
    Switch(switch::SwitchArgs),
    /// Issue 13 through real processes: fair shares through rr and fifo switch ports,
    /// a guaranteed VC through a flooded wrr port.
    Network(network::NetworkArgs),
    /// Issue 33 through real processes: packet-pair, the window and ABR when a third
    /// VC joins and leaves: convergence time, utilisation, the port's queue.
    Convergence(convergence::ConvergenceArgs),
    /// A guaranteed point-to-multipoint VC through a switch process: each leaf's rate
    /// with the switch replicating one VC, with a call per leaf, and beside a
    /// point-to-point VC at the same rate.
    Multipoint(multipoint::MultipointArgs),
    /// What `natm switch` processes do to traffic: policing, EPD/PPD goodput, and
    /// queues under cell-level against packet-level smoothing.
    Switchlab(switchlab::SwitchlabArgs),
    /// The reference relay of `natm-lab perf switch`, run as its own process.
    #[command(hide = true)]
    Relay(switch::RelayArgs),
    /// Seed 002's per-layer overhead table for natm: the bytes each layer adds (TPDU,
    /// AAL5, cells, VC header or train, UDP/IP, link), counted, and each layer's CPU
    /// time per message, for each message size, in frame and cell mode.
    Overhead(overhead::OverheadArgs),
    /// The work behind the ratios: system calls, wake-ups and ACKs per MB delivered
    /// and per round trip, natm beside TCP and UDP (every thread counted by the
    /// kernel; needs root for the syscall tracepoint).
    Counts(counts::CountsArgs),
    /// Issue 30: what the kernel's UDP path costs per method — send/recv, sendmmsg/
    /// recvmmsg, natm's UdpPort (GSO, GRO) and io_uring — datagrams/s, system calls and
    /// each thread's CPU per datagram, over loopback.
    UdpIo(udp_io::UdpIoArgs),
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
    #[command(flatten)]
    to: OutputArgs,
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
    #[command(flatten)]
    to: OutputArgs,
}

/// `natm-lab perf livelock`.
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

/// `natm-lab perf latency`.
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
    /// Stacks to measure, comma-separated (see `natm-lab perf stacks`); default
    /// udp,tcp,udp-busy,natm-be,natm-reliable, or with --stages
    /// natm-be,natm-be-sched,natm-reliable,natm-reliable-sched.
    #[arg(long, value_delimiter = ',')]
    stacks: Vec<String>,
    /// Report where the time goes along the natm stack instead: timestamps at the send
    /// call, dispatch, adaptor, receive, delivery and recv return, per segment
    /// (natm stacks only; `--figure` draws stacked bars).
    #[arg(long)]
    stages: bool,
    /// Where the threads run, the same for every stack: `same` pins the client, the
    /// echo server and natm's engine driver to one CPU; `different` the client to
    /// one CPU and the server and the driver to another; `none` leaves them to the
    /// kernel. (QUIC's runtime threads are not pinned.)
    #[arg(long, value_enum, default_value_t = latency::Pin::None)]
    pin: latency::Pin,
    #[command(flatten)]
    common: Common,
}

/// `natm-lab perf throughput`.
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
    /// Stacks to measure, comma-separated (see `natm-lab perf stacks`).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp")]
    stacks: Vec<String>,
    /// Hand the sender's messages to the stack this many at a time: natm stacks take
    /// them in one `send_many` call (each still its own message), raw UDP sends them
    /// as one GSO call of equal datagrams, other stacks one by one. 1: one send per
    /// message.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: u16,
    #[command(flatten)]
    common: Common,
}

/// `natm-lab perf isolation`.
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

/// Run a `natm-lab perf` subcommand.
pub(crate) fn run(cmd: PerfCmd) -> CliResult {
    match cmd {
        PerfCmd::Latency(a) if a.stages => drive(&StagesOf(&a)),
        PerfCmd::Latency(a) => drive(&a),
        PerfCmd::Stages(mut a) => {
            a.stages = true;
            drive(&StagesOf(&a))
        }
        PerfCmd::Throughput(a) => drive(&a),
        PerfCmd::Livelock(a) => drive(&a),
        PerfCmd::Isolation(a) => drive(&a),
        PerfCmd::Guaranteed(a) => drive(&a),
        PerfCmd::Cost(a) => drive(&a),
        PerfCmd::All(a) => all::cmd(&a),
        #[cfg(feature = "quic")]
        PerfCmd::Loss(a) => drive(&a),
        #[cfg(feature = "quic")]
        PerfCmd::LossPeer(a) => loss::peer(&a),
        #[cfg(feature = "quic")]
        PerfCmd::DelayLine(a) => delayline::run(&a),
        #[cfg(feature = "quic")]
        PerfCmd::Mesh(a) => drive(&a),
        #[cfg(feature = "quic")]
        PerfCmd::MeshHost(a) => mesh::host_run(&a),
        PerfCmd::Calls(a) => drive(&a),
        PerfCmd::CallsLoad(a) => drive(&a),
        PerfCmd::Scale(a) => drive(&a),
        PerfCmd::ScalePeer(a) => scale::peer(&a),
        PerfCmd::Switch(a) => drive(&a),
        PerfCmd::Network(a) => drive(&a),
        PerfCmd::Convergence(a) => drive(&a),
        PerfCmd::Multipoint(a) => drive(&a),
        PerfCmd::Switchlab(a) => drive(&a),
        PerfCmd::Overhead(a) => drive(&a),
        PerfCmd::Counts(a) => drive(&a),
        PerfCmd::UdpIo(a) => drive(&a),
        PerfCmd::Relay(a) => switch::relay(&a),
        PerfCmd::Stacks => {
            let mut t = natm_cli::cli::table::new(["stack", "what it is"], 2);
            for e in STACKS.entries() {
                t.add_row(vec![e.name, e.about]);
            }
            natm_cli::outln!("{}", natm_cli::cli::table::render(&t).trim_end());
            Ok(())
        }
    }
}

/// The stacks asked for, built, and the index of the reference among them.
/// `driver_cpus` pins natm hosts' driver threads (`latency --pin`).
fn setup(
    names: &[String],
    common: &Common,
    driver_cpus: Option<Vec<usize>>,
) -> anyhow::Result<(Vec<Box<dyn Stack>>, usize)> {
    if common.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let opts = StackOptions {
        sockbuf: match common.sockbuf {
            0 => None,
            n => Some(usize::try_from(n).context("--sockbuf too large")?),
        },
        driver_cpus,
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

/// The round trips measured for `latency` and `stages`.
struct RoundTrips {
    cfg: LatencyConfig,
    runs: usize,
    names: Vec<String>,
    reference: usize,
    /// Per stack (in `names`' order), each run's samples.
    samples: Vec<Vec<latency::Samples>>,
}

/// Measure the round trips that `latency` and `stages` report.
fn round_trips(a: &LatencyArgs, pb: &ProgressBar) -> anyhow::Result<RoundTrips> {
    if a.stages && !::natm::stages::COMPILED {
        anyhow::bail!("--stages needs natm built with the `stages` feature (a default feature)");
    }
    let names: Vec<String> = match (a.stacks.is_empty(), a.stages) {
        (false, _) => a.stacks.clone(),
        (true, true) => stages::DEFAULT_STACKS.map(String::from).to_vec(),
        // The baselines and natm itself: a latency run that measures no natm stack
        // answers nothing about natm.
        (true, false) => ["udp", "tcp", "udp-busy", "natm-be", "natm-reliable"]
            .map(String::from)
            .to_vec(),
    };
    let placement = a.pin.placement()?;
    let driver_cpus = placement.as_ref().map(|p| vec![p.server]);
    let (stacks, reference) = setup(&names, &a.common, driver_cpus)?;
    let size = check_size(a.size)?;
    for s in &stacks {
        if let Some(max) = s.max_message().filter(|&m| size > m) {
            anyhow::bail!(
                "{}: carries at most {max} B in one message; use --size {max} or less, or leave {} out",
                s.name(),
                s.name()
            );
        }
    }
    let cfg = LatencyConfig {
        size,
        warmup: a.common.warmup,
        time: a.time,
        count: a.count.max(1),
        stages: a.stages,
        placement,
    };
    let runs = a.common.runs;
    pb.set_length((runs * stacks.len()) as u64);
    let mut samples: Vec<Vec<latency::Samples>> = stacks.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        for (i, s) in stacks.iter().enumerate() {
            pb.set_message(format!("latency {} run {}/{runs}", s.name(), run + 1));
            let got =
                latency::run(s.as_ref(), &cfg).with_context(|| format!("stack {}", s.name()))?;
            samples[i].push(got);
            pb.inc(1);
        }
    }
    Ok(RoundTrips {
        cfg,
        runs,
        names: stacks.iter().map(|s| s.name().to_string()).collect(),
        reference,
        samples,
    })
}

impl Experiment for LatencyArgs {
    type Result = results::Latency;
    /// The figure is the distribution of every sample, which the document leaves out.
    type Figure = (LatencyConfig, Vec<report::LatencyRow>);

    fn output(&self) -> &OutputArgs {
        &self.common.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)> {
        let m = round_trips(self, pb)?;
        let names: Vec<&str> = m.names.iter().map(String::as_str).collect();
        let rows = report::latency_rows(&names, m.samples);
        let result = report::latency_result(&m.cfg, m.runs, &rows, m.reference);
        Ok((result, (m.cfg, rows)))
    }

    fn table(r: &Self::Result) -> String {
        report::latency_table(r)
    }

    fn figure(_: &Self::Result, (cfg, rows): &Self::Figure, path: &Path) -> anyhow::Result<()> {
        report::latency_figure(path, cfg, rows)
    }
}

/// `latency --stages`: the same round trips, broken down along the natm stack.
struct StagesOf<'a>(&'a LatencyArgs);

impl Experiment for StagesOf<'_> {
    type Result = results::Stages;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.0.common.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        let m = round_trips(self.0, pb)?;
        let names: Vec<&str> = m.names.iter().map(String::as_str).collect();
        let rows = stages::rows(&names, &m.samples);
        if rows.is_empty() {
            anyhow::bail!("--stages: no round trip of a natm stack was matched");
        }
        Ok((stages::result(&m.cfg, m.runs, &rows), ()))
    }

    fn table(r: &Self::Result) -> String {
        stages::table(r)
    }

    fn figure(r: &Self::Result, (): &(), path: &Path) -> anyhow::Result<()> {
        stages::figure(path, r)
    }
}

impl Experiment for ThroughputArgs {
    type Result = results::Throughput;
    /// The figure draws each fit over a fine grid of sizes.
    type Figure = Vec<sizes::Curve>;

    fn output(&self) -> &OutputArgs {
        &self.common.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)> {
        let (stacks, reference) = setup(&self.stacks, &self.common, None)?;
        let sizes = match self.size {
            Some(s) => vec![check_size(s)?],
            None => self
                .sizes
                .iter()
                .map(|&s| check_size(s))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let runs = self.common.runs;
        pb.set_length((sizes.len() * runs * stacks.len()) as u64);
        let mut rows = Vec::new();
        for &size in &sizes {
            let cfg = ThroughputConfig {
                size,
                warmup: self.common.warmup,
                time: self.time,
                batch: usize::from(self.batch),
            };
            let mut results: Vec<Vec<throughput::Rate>> =
                stacks.iter().map(|_| Vec::new()).collect();
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
        let reference = stacks[reference].name();
        let curves = sizes::curves(
            rows.iter()
                .map(|r| (r.stack().to_string(), r.size(), r.bps())),
        );
        let result = report::throughput_result(
            self.common.warmup,
            self.time,
            runs,
            &rows,
            reference,
            sizes::fits(&curves),
        );
        Ok((result, curves))
    }

    fn table(r: &Self::Result) -> String {
        report::throughput_table(r)
    }

    fn figure(_: &Self::Result, curves: &Self::Figure, path: &Path) -> anyhow::Result<()> {
        sizes::figure(path, "throughput against message size, loopback", curves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed document of docs/perf/ gives a table, and the same table again after
    /// a round trip through JSON: the table needs nothing but the typed result.
    fn same_table<E: Experiment>(name: &str) {
        let path = format!("{}/../../docs/perf/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("a committed document");
        let doc: E::Result = serde_json::from_str(&text).expect("the document is the type");
        let table = E::table(&doc);
        let again: E::Result =
            serde_json::from_str(&serde_json::to_string(&doc).expect("serializes"))
                .expect("deserializes");
        assert_eq!(table, E::table(&again), "{name}");
        assert!(table.lines().count() >= 3, "{name}: {table}");
    }

    #[test]
    fn every_experiment_tables_its_committed_document() {
        same_table::<LatencyArgs>("latency");
        same_table::<StagesOf<'static>>("stages");
        same_table::<ThroughputArgs>("throughput");
        same_table::<guaranteed::GuaranteedArgs>("guaranteed");
        same_table::<cost::CostArgs>("cost");
        same_table::<LivelockArgs>("livelock");
        same_table::<IsolationArgs>("isolation");
        #[cfg(feature = "quic")]
        same_table::<loss::LossArgs>("loss");
        same_table::<calls::CallsArgs>("calls");
        same_table::<calls_load::CallsLoadArgs>("calls-load");
        same_table::<overhead::OverheadArgs>("overhead");
        same_table::<counts::CountsArgs>("counts");
        same_table::<udp_io::UdpIoArgs>("udp-io");
    }
}
