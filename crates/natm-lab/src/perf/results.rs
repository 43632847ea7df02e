//! The JSON document of each experiment as a Rust type: what `--json` prints and
//! `--save` writes, and what `perf all` reads back to compute its headline ratios.
//!
//! Field names are those of the documents in docs/perf/ (the test at the end proves
//! that each of them still deserializes). Fields are declared in alphabetical order
//! because the documents were written that way (serde_json's map sorts its keys), so
//! a document is byte for byte what it was. A figure that cannot be computed (no
//! samples, a division by zero) is written as `null` by serde_json; the fields that
//! may hold one read it back as NaN ([`nan`]) or as `None`.

use serde::{Deserialize, Deserializer, Serialize};

use super::stack::Params;

/// `null` (what serde_json writes for NaN and ±∞) read back as NaN.
pub(crate) fn nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// [`nan`] for each element of a list.
fn nans<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect())
}

/// What the machine was: CPUs, kernel, load average at the end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Machine {
    /// CPUs this process could use.
    pub(crate) cpus: usize,
    /// `/proc/sys/kernel/osrelease`.
    pub(crate) kernel: Option<String>,
    /// The three load averages of `/proc/loadavg`.
    pub(crate) loadavg: Option<String>,
}

impl Machine {
    /// This machine, now.
    pub(crate) fn now() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .ok()
        };
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease"),
            loadavg: read("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
        }
    }
}

// ---------------------------------------------------------------------------------
// latency

/// `natm-lab perf latency --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latency {
    /// Most round trips per run.
    pub(crate) count_max: usize,
    /// `"latency"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    /// The stack the ratios are relative to.
    pub(crate) reference: String,
    /// One row per stack, in the order measured.
    pub(crate) results: Vec<LatencyRow>,
    pub(crate) runs: usize,
    /// Message size, each way.
    pub(crate) size: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One stack's round trips: medians over runs of each run's figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LatencyRow {
    pub(crate) lost: u64,
    #[serde(deserialize_with = "nan")]
    pub(crate) mean_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) median_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) min_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p50_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p999_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p99_us: f64,
    pub(crate) params: Params,
    pub(crate) per_run: Vec<LatencyRun>,
    /// Median over the reference stack's median.
    #[serde(deserialize_with = "nan")]
    pub(crate) ratio: f64,
    pub(crate) samples: usize,
    pub(crate) stack: String,
}

/// One run of one stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LatencyRun {
    pub(crate) lost: u64,
    pub(crate) max_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) min_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p999_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) samples: usize,
}

// ---------------------------------------------------------------------------------
// throughput

/// `natm-lab perf throughput --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Throughput {
    /// `"throughput"`.
    pub(crate) experiment: String,
    /// Seed 001's two-part fit per stack (stacks with too few sizes have none).
    pub(crate) fits: Vec<Fit>,
    pub(crate) machine: Machine,
    pub(crate) reference: String,
    /// One row per size and stack.
    pub(crate) results: Vec<ThroughputRow>,
    pub(crate) runs: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One stack at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ThroughputRow {
    /// Median delivered bit/s over runs.
    #[serde(deserialize_with = "nan")]
    pub(crate) bps: f64,
    /// Bytes received over bytes sent, whole runs.
    #[serde(deserialize_with = "nan")]
    pub(crate) delivered: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) gbps: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) msgs_per_s: f64,
    pub(crate) params: Params,
    pub(crate) per_run: Vec<ThroughputRun>,
    #[serde(deserialize_with = "nan")]
    pub(crate) ratio: f64,
    pub(crate) samples: usize,
    pub(crate) size: usize,
    pub(crate) stack: String,
}

/// One run of one stack at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ThroughputRun {
    pub(crate) bps: f64,
    pub(crate) bytes: u64,
    pub(crate) deliveries: u64,
    pub(crate) recv_bytes: u64,
    pub(crate) seconds: f64,
    pub(crate) sent_bytes: u64,
    /// CPU time of the sending thread over the whole run (absent, read as 0, in
    /// documents written before it was measured; left out again when 0, so they
    /// read back as written).
    #[serde(default, skip_serializing_if = "not_measured")]
    pub(crate) sender_cpu_s: f64,
}

/// A CPU time of 0: not measured.
fn not_measured(s: &f64) -> bool {
    *s <= 0.0
}

/// Seed 001's two-part fit of time per message against size, for one stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Fit {
    #[serde(deserialize_with = "nan")]
    pub(crate) half_power_bytes: f64,
    pub(crate) parts: Vec<FitPart>,
    #[serde(deserialize_with = "nan")]
    pub(crate) peak_bps: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) rms_rel_err: f64,
    pub(crate) stack: String,
}

/// One part of a [`Fit`]: `t = a + b·size` between two sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FitPart {
    /// `8 / b`; infinite (`null`) where the per-byte cost fitted to zero.
    #[serde(deserialize_with = "nan")]
    pub(crate) asymptote_bps: f64,
    pub(crate) from_size: f64,
    pub(crate) per_byte_ns: f64,
    pub(crate) per_message_us: f64,
    pub(crate) to_size: f64,
}

// ---------------------------------------------------------------------------------
// stages

/// `natm-lab perf stages --json` (`latency --stages`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Stages {
    /// The clock the timestamps come from.
    pub(crate) clock: String,
    /// `"latency-stages"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    pub(crate) results: Vec<StagesRow>,
    pub(crate) runs: usize,
    pub(crate) size: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// Where one stack's round trips went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StagesRow {
    /// Round trips whose every stage was found.
    pub(crate) matched: usize,
    /// The client's own median timing of the same round trips.
    #[serde(deserialize_with = "nan")]
    pub(crate) measured_p50_us: f64,
    pub(crate) rtt: Spread,
    pub(crate) segments: Vec<Segment>,
    pub(crate) sendmsg_call: SendmsgCall,
    pub(crate) stack: String,
    #[serde(deserialize_with = "nan")]
    pub(crate) sum_of_means_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) sum_of_medians_us: f64,
    pub(crate) unmatched: usize,
}

/// Median, p99 and mean of a duration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spread {
    #[serde(deserialize_with = "nan")]
    pub(crate) mean_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p50_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p99_us: f64,
}

/// One segment of the round trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Segment {
    #[serde(deserialize_with = "nan")]
    pub(crate) mean_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p50_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) p99_us: f64,
    /// Its name, `from → to`.
    pub(crate) segment: String,
}

/// The duration of the `sendmsg` call on each side, reported beside the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SendmsgCall {
    pub(crate) client: Spread,
    pub(crate) server: Spread,
}

// ---------------------------------------------------------------------------------
// guaranteed

/// `natm-lab perf guaranteed --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Guaranteed {
    /// `"guaranteed"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    pub(crate) results: Vec<GuaranteedRow>,
    pub(crate) runs: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One reserved rate at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GuaranteedRow {
    /// Median delivered bit/s.
    #[serde(deserialize_with = "nan")]
    pub(crate) bps: f64,
    #[serde(deserialize_with = "nans")]
    pub(crate) per_run_bps: Vec<f64>,
    pub(crate) qos: String,
    /// Delivered over requested.
    #[serde(deserialize_with = "nan")]
    pub(crate) ratio: f64,
    pub(crate) requested_bps: u64,
    pub(crate) size: usize,
}

// ---------------------------------------------------------------------------------
// cost

/// `natm-lab perf cost --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cost {
    pub(crate) clock: String,
    /// `"cost"`.
    pub(crate) experiment: String,
    /// One fit per send path.
    pub(crate) fits: Vec<CostFit>,
    pub(crate) machine: Machine,
    pub(crate) results: Vec<CostRow>,
    pub(crate) runs: usize,
    pub(crate) time_s: f64,
    pub(crate) tpdu: usize,
    pub(crate) warmup_s: f64,
}

/// One send path at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CostRow {
    #[serde(deserialize_with = "nan")]
    pub(crate) cpu_us: f64,
    pub(crate) path: String,
    #[serde(deserialize_with = "nans")]
    pub(crate) per_run_cpu_us: Vec<f64>,
    pub(crate) size: usize,
    pub(crate) tpdus: usize,
    #[serde(deserialize_with = "nan")]
    pub(crate) wall_us: f64,
}

/// `m + t·⌈size/TPDU⌉ + b·size` for one send path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CostFit {
    pub(crate) path: String,
    #[serde(deserialize_with = "nan")]
    pub(crate) per_byte_ns: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) per_message_us: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) per_tpdu_us: f64,
}

// ---------------------------------------------------------------------------------
// livelock

/// `natm-lab perf livelock --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Livelock {
    /// The receiving application's capacity C.
    pub(crate) capacity_bps: f64,
    /// `"livelock"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    pub(crate) peak_bps: Peaks,
    pub(crate) qos: String,
    /// CPUs the receiving host was pinned to (`None`: not pinned).
    pub(crate) receiver_cpus: Option<usize>,
    pub(crate) results: Vec<LivelockRow>,
    pub(crate) runs: usize,
    pub(crate) size: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
    /// The watermarks of the "on" case (`None`: the engine's defaults are unknown).
    pub(crate) watermarks_on: Option<WatermarksOn>,
    pub(crate) work_us: f64,
}

/// The highest delivered rate over loads, per setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Peaks {
    #[serde(deserialize_with = "nan")]
    pub(crate) no_watermarks: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) watermarks: f64,
}

/// High and low watermarks, bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WatermarksOn {
    pub(crate) high: usize,
    pub(crate) low: usize,
}

/// One offered load with watermarks on or off: medians over runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LivelockRow {
    #[serde(deserialize_with = "nan")]
    pub(crate) delivered_bps: f64,
    /// Delivered per CPU-second the receiving host ran (delivered / `rx_cpu`), median
    /// over runs; `None` where the receiving host was not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delivered_per_cpu_bps: Option<f64>,
    #[serde(deserialize_with = "nan")]
    pub(crate) drop_rcv_buf: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) gaps: f64,
    /// The kernel's drops on the receiving socket, where it tells (`None`: not known).
    pub(crate) kernel_drops: Option<f64>,
    /// Offered load, multiples of C.
    pub(crate) load: f64,
    /// Delivered over the peak of the same setting.
    #[serde(deserialize_with = "nan")]
    pub(crate) of_peak: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) offered_bps: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) partial_messages_dropped: f64,
    pub(crate) per_run: Vec<LivelockRun>,
    /// Share of the receiving host's CPUs its threads ran, 0–1, median over runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rx_cpu: Option<f64>,
    pub(crate) samples: usize,
    #[serde(deserialize_with = "nan")]
    pub(crate) sent_bps: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) tpdus_received: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) watermark_holds: f64,
    pub(crate) watermarks: bool,
}

/// One run at one load and setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LivelockRun {
    pub(crate) delivered_bps: f64,
    pub(crate) drop_rcv_buf: u64,
    pub(crate) gaps: u64,
    pub(crate) kernel_drops: Option<u64>,
    pub(crate) offered_bps: f64,
    pub(crate) partial_messages_dropped: u64,
    pub(crate) sent_bps: f64,
    pub(crate) tpdus_received: u64,
    pub(crate) watermark_holds: u64,
    /// Share of the receiving host's CPUs its threads ran over the run, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rx_cpu: Option<f64>,
}

// ---------------------------------------------------------------------------------
// isolation

/// `natm-lab perf isolation --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Isolation {
    pub(crate) bin_s: f64,
    /// `"isolation"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    /// The guaranteed VC's reserved rate.
    pub(crate) reserved_bps: f64,
    /// One row per phase (alone, loaded) and VC.
    pub(crate) results: Vec<IsolationRow>,
    pub(crate) runs: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One VC in one phase: medians over runs. Delays are `None` where the VC carried no
/// timestamped message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IsolationRow {
    #[serde(deserialize_with = "nan")]
    pub(crate) bps: f64,
    pub(crate) delay_max_us: Option<f64>,
    pub(crate) delay_p50_us: Option<f64>,
    pub(crate) delay_p99_us: Option<f64>,
    pub(crate) per_run: Vec<IsolationRun>,
    /// `"alone"` or `"loaded"`.
    pub(crate) phase: String,
    pub(crate) qos: String,
    /// Delivered over reserved, for the guaranteed VC only.
    pub(crate) ratio_to_reserved: Option<f64>,
    pub(crate) samples: usize,
    #[serde(deserialize_with = "nan")]
    pub(crate) sent_bps: f64,
    pub(crate) size: usize,
    /// `guaranteed`, `best-effort` or `bulk`.
    pub(crate) vc: String,
}

/// One run of one VC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IsolationRun {
    pub(crate) bps: f64,
    pub(crate) delay_p50_us: Option<f64>,
    pub(crate) delay_p99_us: Option<f64>,
    pub(crate) sent_bps: f64,
}

// ---------------------------------------------------------------------------------
// loss

/// `natm-lab perf loss --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Loss {
    /// Whether BBR was available (else `tcp-bbr` was left out).
    pub(crate) bbr: bool,
    /// `"loss"`.
    pub(crate) experiment: String,
    /// The tbf rate of the link.
    pub(crate) link_bps: u64,
    pub(crate) machine: Machine,
    /// Whether the veth's segmentation offloads could be turned off.
    pub(crate) offloads_off: bool,
    /// Per RTT the delay line added (`--rtt`), the RTT `ping` measured through the path;
    /// absent without a delay line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) path_rtts: Vec<PathRtt>,
    pub(crate) results: Vec<LossRow>,
    pub(crate) runs: usize,
    pub(crate) size: usize,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One stack at one loss rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LossRow {
    /// Median goodput.
    #[serde(deserialize_with = "nan")]
    pub(crate) bps: f64,
    pub(crate) loss_percent: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) of_link: f64,
    #[serde(deserialize_with = "nans")]
    pub(crate) per_run_bps: Vec<f64>,
    /// The RTT the delay line added, ms (absent: no delay line, a sub-millisecond path).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) rtt_ms: f64,
    pub(crate) stack: String,
}

/// One RTT of `natm-lab perf loss --rtt`: what was asked and what `ping` saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PathRtt {
    /// The RTT the delay line added (half each way), ms.
    pub(crate) added_ms: f64,
    /// Median of five pings from a to b, ms; `None` if ping failed.
    pub(crate) ping_ms: Option<f64>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

// ---------------------------------------------------------------------------------
// scale

/// `natm-lab perf scale --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Scale {
    /// `"scale"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    /// RLIMIT_NOFILE (soft) in force for the run.
    pub(crate) nofile_limit: u64,
    /// Callers setting up connections at once.
    pub(crate) parallel: usize,
    pub(crate) qos: String,
    pub(crate) size: usize,
    /// natm's steps, one per connection count.
    pub(crate) steps: Vec<ScaleStep>,
    /// The same counts over kernel TCP (`--stacks tcp`), the reference; its
    /// retransmission and TPDU fields are zero (natm's own counters).
    #[serde(default)]
    pub(crate) tcp_steps: Vec<ScaleStep>,
    pub(crate) time_s: f64,
    pub(crate) warmup_s: f64,
}

/// One connection count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ScaleStep {
    /// Goodput of all connections together, bit/s.
    pub(crate) aggregate_bps: f64,
    /// Connects refused because the listener's backlog was full, and tried again.
    pub(crate) busy_refusals: u64,
    pub(crate) connections: usize,
    /// Connections that delivered at least one byte during the measurement.
    pub(crate) connections_with_data: usize,
    /// CPU time of both processes per megabyte delivered (10⁶ B), ms.
    #[serde(deserialize_with = "nan")]
    pub(crate) cpu_ms_per_mb: f64,
    /// Open descriptors after every connection was closed and both hosts dropped.
    pub(crate) fds_after: u64,
    /// Open descriptors before the step's hosts were opened.
    pub(crate) fds_before: u64,
    /// Descriptors both processes gained per connection (one end each) once all were up.
    pub(crate) fds_per_connection: f64,
    pub(crate) per_connection_bps_max: f64,
    pub(crate) per_connection_bps_median: f64,
    pub(crate) per_connection_bps_min: f64,
    /// First percentile of the connections' goodputs.
    pub(crate) per_connection_bps_p1: f64,
    /// Resident memory both processes gained per connection once all were up, KiB.
    pub(crate) rss_kib_per_connection_idle: f64,
    /// Resident memory per connection at the end of the sending phase, KiB.
    pub(crate) rss_kib_per_connection_loaded: f64,
    /// Sends that failed with an error other than "would block".
    pub(crate) send_errors: u64,
    /// Time to set up every connection, s.
    pub(crate) setup_s: f64,
    pub(crate) setups_per_s: f64,
    /// Threads of both processes once all were up.
    pub(crate) threads: u64,
    /// Of the bytes the sending ends put on the wire from setup to the end of the
    /// measurement, the share that were retransmissions.
    #[serde(default)]
    pub(crate) retransmitted_share: f64,
    /// Retransmission timeouts of the sending ends, all connections together.
    #[serde(default)]
    pub(crate) retransmission_timeouts: u64,
    /// Median smoothed round trip of the sending ends at the end of the measurement, ms.
    #[serde(default)]
    pub(crate) median_srtt_ms: f64,
    /// TPDUs the sending ends retransmitted, by what queued them: a hole an ACK
    /// revealed (fast), the two-RTT head check, a retransmission timeout.
    #[serde(default)]
    pub(crate) retransmitted_tpdus_fast: u64,
    #[serde(default)]
    pub(crate) retransmitted_tpdus_head: u64,
    #[serde(default)]
    pub(crate) retransmitted_tpdus_timeout: u64,
    /// Of the head check's and the timeouts' retransmissions, those of TPDUs that had
    /// arrived (the ACK that came after showed it): on a loss-free path, all of them.
    #[serde(default)]
    pub(crate) spurious_tpdus_head: u64,
    #[serde(default)]
    pub(crate) spurious_tpdus_timeout: u64,
    /// Mean octets a TPDU the sending ends sent carried (what the path MTU search
    /// let them cut: a search that never finishes leaves TPDUs at its base).
    #[serde(default)]
    pub(crate) octets_per_tpdu: f64,
    /// How long the step's warm-up lasted, s: at least the run's, and until every
    /// connection had been offered a message.
    #[serde(default)]
    pub(crate) warmup_s: f64,
}

// ---------------------------------------------------------------------------------
// calls

/// `natm-lab perf calls --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Calls {
    pub(crate) calls_per_run: usize,
    /// Direct mode: the transport handshake alone, no sigd.
    pub(crate) direct: CallMode,
    /// `"calls"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    pub(crate) parallel: usize,
    pub(crate) qos: String,
    /// Median setup through sigd over direct mode's.
    pub(crate) ratio_median_setup: f64,
    /// The same for pre-authorised listeners, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ratio_median_setup_preauthorised: Option<f64>,
    pub(crate) runs: usize,
    /// Through two sigds, the listener accepting each call.
    pub(crate) sigd: CallMode,
    /// Through two sigds, the listener having pre-authorised its calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sigd_preauthorised: Option<CallMode>,
}

/// `natm-lab perf calls-load --json`: seed 004 §7, setup time against CPU load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallsLoad {
    pub(crate) calls_per_cell: usize,
    /// One per sigd nice value and pipeline count, in the order measured.
    pub(crate) cells: Vec<LoadCell>,
    /// `"calls-load"`.
    pub(crate) experiment: String,
    pub(crate) machine: Machine,
    /// The longest random pause before a call (µs).
    pub(crate) max_gap_us: u64,
    /// The competing shell pipeline, as run by `sh -c`.
    pub(crate) pipeline: String,
    pub(crate) qos: String,
    /// Sweeps over the grid; each cell pools its calls of every sweep.
    pub(crate) runs: usize,
}

/// One load and one sigd priority: setup through the sigds, and in direct mode
/// interleaved call for call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoadCell {
    /// The share of all CPUs' time not idle during the cell's calls (`/proc/stat`).
    pub(crate) cpu_busy: f64,
    pub(crate) direct: SetupTimes,
    pub(crate) pipelines: usize,
    pub(crate) sigd: SetupTimes,
    /// The nice value of every sigd thread.
    pub(crate) sigd_nice: i32,
}

/// Setup times of one path in one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SetupTimes {
    pub(crate) max_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) median_us: f64,
    pub(crate) p99_us: f64,
    /// Each sweep's mean (µs): the spread.
    pub(crate) run_means_us: Vec<f64>,
}

/// Setup and release through one path. The sigd CPU is absent in direct mode, the
/// backlog and refusals outside pre-authorised mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallMode {
    pub(crate) app_cpu_us_per_call: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) backlog: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) busy_refusals: Option<u64>,
    pub(crate) median_release_us: f64,
    pub(crate) median_setup_us: f64,
    pub(crate) p99_setup_us: f64,
    pub(crate) setups_per_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sigd_cpu_us_per_call: Option<f64>,
}

// ---------------------------------------------------------------------------------
// overhead

/// `natm-lab perf overhead --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Overhead {
    /// Length of each microbenchmark loop.
    pub(crate) bench_time_s: f64,
    /// `"overhead"`.
    pub(crate) experiment: String,
    /// Where the kernel's counts come from, or why there are none.
    pub(crate) kernel_counters: String,
    pub(crate) machine: Machine,
    pub(crate) qos: String,
    /// One row per link mode and message size.
    pub(crate) results: Vec<OverheadRow>,
    pub(crate) runs: usize,
    /// TPDU payload size of the VC.
    pub(crate) tpdu: usize,
    /// Cells per train in cell mode.
    pub(crate) train: usize,
}

/// One transfer's bytes at each layer (counted over the whole transfer, both
/// directions) and the CPU per message of each layer's microbenchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OverheadRow {
    /// ACK TPDUs sent.
    pub(crate) acks: u64,
    /// AAL5 CPCS-PDU octets (cells × 48); `None` in frame mode.
    pub(crate) aal5_bytes: Option<u64>,
    /// Message bytes the receiving application got.
    pub(crate) app_bytes: u64,
    /// Cells reassembled at both ends; `None` in frame mode.
    pub(crate) cells: Option<u64>,
    /// AAL5 segmentation and reassembly, µs per message; `None` in frame mode.
    pub(crate) cpu_sar_us: Option<f64>,
    /// The whole transfer's process CPU per message, µs (median of runs).
    #[serde(deserialize_with = "nan")]
    pub(crate) cpu_total_us: f64,
    /// Building the message's TPDUs (header and payload copy), µs per message.
    #[serde(deserialize_with = "nan")]
    pub(crate) cpu_tpdu_us: f64,
    /// `send(2)` of the message's datagrams on loopback, µs per message.
    #[serde(deserialize_with = "nan")]
    pub(crate) cpu_udp_us: f64,
    /// DATA TPDUs sent, retransmissions included.
    pub(crate) data_tpdus: u64,
    /// UDP datagrams both ends handed to the kernel.
    pub(crate) datagrams: u64,
    /// AAL5 frames reassembled at both ends; `None` in frame mode.
    pub(crate) frames: Option<u64>,
    /// IP octets the private `lo` sent (headers included); `None` without the
    /// namespace.
    pub(crate) ip_bytes: Option<u64>,
    /// IP packets the private `lo` sent.
    pub(crate) ip_packets: Option<u64>,
    /// Messages received.
    pub(crate) messages: u64,
    /// `frame` or `cell`.
    pub(crate) mode: String,
    /// TPDU payload octets sent, retransmissions included.
    pub(crate) payload_bytes: u64,
    #[serde(deserialize_with = "nans")]
    pub(crate) per_run_cpu_total_us: Vec<f64>,
    /// Payload octets retransmitted.
    pub(crate) retx_bytes: u64,
    /// Send system calls both ends made.
    pub(crate) send_calls: u64,
    /// Message size.
    pub(crate) size: usize,
    /// TPDU octets: payload and 32-octet headers of DATA and ACK TPDUs.
    pub(crate) tpdu_bytes: u64,
    /// UDP payload octets both ends sent (VC headers or cell trains included).
    pub(crate) udp_bytes: u64,
    /// Wall time of the transfer per message, µs (median of runs).
    #[serde(deserialize_with = "nan")]
    pub(crate) wall_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each committed document deserializes into its type and serializes back to the
    /// same JSON value: the types are the schema of docs/perf/.
    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(name: &str) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/perf/");
        let text = std::fs::read_to_string(format!("{path}{name}.json"))
            .unwrap_or_else(|e| panic!("{name}.json: {e}"));
        let typed: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}.json: {e}"));
        let back = serde_json::to_value(&typed).expect("a result serializes");
        let orig: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back, orig, "{name}.json does not survive a round trip");
    }

    #[test]
    fn committed_documents_are_the_types() {
        round_trip::<Latency>("latency");
        round_trip::<Throughput>("throughput");
        round_trip::<Stages>("stages");
        round_trip::<Guaranteed>("guaranteed");
        round_trip::<Cost>("cost");
        round_trip::<Livelock>("livelock");
        round_trip::<Isolation>("isolation");
        round_trip::<Loss>("loss");
        round_trip::<Calls>("calls");
        round_trip::<super::super::switchlab::SwitchlabResult>("switchlab");
    }
}
