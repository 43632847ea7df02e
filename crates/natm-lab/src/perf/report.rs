//! Results of `natm-lab perf` as a table for people or one JSON document for programs.
//! Every figure is the median over runs of the per-run figure.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use super::latency::{LatencyConfig, Samples};
use super::results;
use super::stack::Params;
use super::stats::{median, percentile, Summary};
use super::throughput::Rate;
use natm_cli::cli::table;

/// One stack's latency runs, summarised.
pub(crate) struct LatencyRow {
    stack: String,
    /// Per run: its summary and its lost round trips.
    runs: Vec<(Summary, u64)>,
    params: Params,
    /// Every run's samples together, as (round trip µs, fraction of round trips
    /// slower): the tail of the distribution, for the figure.
    tail: Vec<(f64, f64)>,
}

impl LatencyRow {
    fn med(&self, f: impl Fn(&Summary) -> f64) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(|(s, _)| f(s)).collect();
        median(&v).unwrap_or(f64::NAN)
    }
    fn samples(&self) -> usize {
        self.runs.iter().map(|(s, _)| s.count).sum()
    }
    fn lost(&self) -> u64 {
        self.runs.iter().map(|(_, l)| l).sum()
    }
}

/// Summarise each stack's runs (`results[i]` belongs to `names[i]`).
pub(crate) fn latency_rows(names: &[&str], results: Vec<Vec<Samples>>) -> Vec<LatencyRow> {
    names
        .iter()
        .zip(results)
        .map(|(name, runs)| {
            let mut params = Params::new();
            let mut out = Vec::new();
            let mut all = Vec::new();
            for mut s in runs {
                if let Some(sum) = Summary::of_nanos(&mut s.rtt_ns) {
                    out.push((sum, s.lost));
                }
                all.extend_from_slice(&s.rtt_ns);
                params = s.params;
            }
            all.sort_unstable();
            LatencyRow {
                stack: name.to_string(),
                runs: out,
                params,
                tail: tail(&all),
            }
        })
        .collect()
}

/// Points of the complementary distribution of sorted samples (ns): at fractions
/// slower of 10^(−k/8), down to one sample.
fn tail(sorted_ns: &[u64]) -> Vec<(f64, f64)> {
    let n = sorted_ns.len() as f64;
    let mut v = Vec::new();
    for k in 0..=48 {
        let above = 10f64.powf(-f64::from(k) / 8.0);
        if above * n < 1.0 {
            break;
        }
        if let Some(x) = percentile(sorted_ns, 1.0 - above) {
            v.push((x as f64 / 1e3, above));
        }
    }
    v
}

/// The latency figure: for each stack, the fraction of round trips slower than a
/// time (log–log), so the median and the tail read off one chart.
pub(crate) fn latency_figure(
    path: &std::path::Path,
    cfg: &LatencyConfig,
    rows: &[LatencyRow],
) -> anyhow::Result<()> {
    use crate::plot::{self, Axis, Line, Mark};
    let lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| Line {
            label: r.stack.clone(),
            points: r.tail.clone(),
            colour: i,
            mark: Mark::Measured,
        })
        .collect();
    let title = format!(
        "round-trip latency, {} messages: fraction slower than",
        human_size(cfg.size)
    );
    plot::both(path, |p| {
        plot::xy(
            p,
            &title,
            Axis {
                label: "round trip (µs)",
                log: true,
                from_zero: false,
            },
            Axis {
                label: "fraction of round trips slower",
                log: true,
                from_zero: false,
            },
            plot::Legend::UpperRight,
            &lines,
        )
    })
}

/// The latency results as their document.
pub(crate) fn latency_result(
    cfg: &LatencyConfig,
    runs: usize,
    rows: &[LatencyRow],
    reference: usize,
) -> results::Latency {
    let ref_median = rows[reference].med(|s| s.p50);
    results::Latency {
        count_max: cfg.count,
        experiment: "latency".into(),
        machine: results::Machine::now(),
        reference: rows[reference].stack.clone(),
        results: rows
            .iter()
            .map(|r| {
                let median_us = r.med(|s| s.p50);
                results::LatencyRow {
                    lost: r.lost(),
                    mean_us: r.med(|s| s.mean),
                    median_us,
                    min_us: r.med(|s| s.min),
                    p50_us: median_us,
                    p999_us: r.med(|s| s.p999),
                    p99_us: r.med(|s| s.p99),
                    params: r.params.clone(),
                    per_run: r
                        .runs
                        .iter()
                        .map(|(s, lost)| results::LatencyRun {
                            lost: *lost,
                            max_us: s.max,
                            mean_us: s.mean,
                            min_us: s.min,
                            p50_us: s.p50,
                            p999_us: s.p999,
                            p99_us: s.p99,
                            samples: s.count,
                        })
                        .collect(),
                    ratio: median_us / ref_median,
                    samples: r.samples(),
                    stack: r.stack.clone(),
                }
            })
            .collect(),
        runs,
        size: cfg.size,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// The latency results as a table.
pub(crate) fn latency_table(r: &results::Latency) -> String {
    let mut t = table::new(
        [
            "stack".to_string(),
            "median µs".into(),
            "p99 µs".into(),
            "p99.9 µs".into(),
            "samples".into(),
            "lost".into(),
            format!("x {}", r.reference),
        ],
        1,
    );
    for x in &r.results {
        t.add_row(vec![
            x.stack.clone(),
            format!("{:.1}", x.median_us),
            format!("{:.1}", x.p99_us),
            format!("{:.1}", x.p999_us),
            x.samples.to_string(),
            x.lost.to_string(),
            format!("{:.2}", x.ratio),
        ]);
    }
    let mut out = format!(
        "round-trip latency, {} messages, one in flight; {} run(s) of {} after a {} warm-up, \
         stacks interleaved; medians of runs\n{}",
        human_size(r.size),
        r.runs,
        secs_f64(r.time_s),
        secs_f64(r.warmup_s),
        table::render(&t)
    );
    params_lines(
        &mut out,
        r.results.iter().map(|x| (x.stack.as_str(), &x.params)),
    );
    out
}

/// One stack's throughput runs at one message size.
pub(crate) struct ThroughputRow {
    stack: String,
    size: usize,
    runs: Vec<Rate>,
}

impl ThroughputRow {
    /// Collect one stack's runs at one size.
    pub(crate) fn new(stack: &str, size: usize, runs: Vec<Rate>) -> Self {
        Self {
            stack: stack.to_string(),
            size,
            runs,
        }
    }
    /// The stack measured.
    pub(crate) fn stack(&self) -> &str {
        &self.stack
    }
    /// The message size.
    pub(crate) fn size(&self) -> usize {
        self.size
    }
    /// Median delivered bits per second over runs.
    pub(crate) fn bps(&self) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(|r| r.bps).collect();
        median(&v).unwrap_or(f64::NAN)
    }
    /// Bytes delivered over bytes sent, all runs together.
    fn delivered(&self) -> f64 {
        let sent: u64 = self.runs.iter().map(|r| r.sent_bytes).sum();
        let got: u64 = self.runs.iter().map(|r| r.recv_bytes).sum();
        if sent == 0 {
            f64::NAN
        } else {
            got as f64 / sent as f64
        }
    }
    fn params(&self) -> Params {
        self.runs
            .last()
            .map(|r| r.params.clone())
            .unwrap_or_default()
    }
    /// This row's rate over the reference stack's at the same size.
    fn ratio(&self, rows: &[ThroughputRow], reference: &str) -> f64 {
        rows.iter()
            .find(|r| r.size == self.size && r.stack == reference)
            .map_or(f64::NAN, |r| self.bps() / r.bps())
    }
}

/// The throughput results as their document.
pub(crate) fn throughput_result(
    warmup: Duration,
    time: Duration,
    runs: usize,
    rows: &[ThroughputRow],
    reference: &str,
    fits: Vec<results::Fit>,
) -> results::Throughput {
    results::Throughput {
        experiment: "throughput".into(),
        fits,
        machine: results::Machine::now(),
        reference: reference.to_string(),
        results: rows
            .iter()
            .map(|r| {
                let bps = r.bps();
                results::ThroughputRow {
                    bps,
                    delivered: r.delivered(),
                    gbps: bps / 1e9,
                    msgs_per_s: bps / 8.0 / r.size as f64,
                    params: r.params(),
                    per_run: r
                        .runs
                        .iter()
                        .map(|x| results::ThroughputRun {
                            bps: x.bps,
                            bytes: x.bytes,
                            deliveries: x.deliveries,
                            recv_bytes: x.recv_bytes,
                            seconds: x.seconds,
                            sent_bytes: x.sent_bytes,
                            sender_cpu_s: x.sender_cpu_s,
                        })
                        .collect(),
                    ratio: r.ratio(rows, reference),
                    samples: r.runs.len(),
                    size: r.size,
                    stack: r.stack.clone(),
                }
            })
            .collect(),
        runs,
        time_s: time.as_secs_f64(),
        warmup_s: warmup.as_secs_f64(),
    }
}

/// The throughput results as a table, with the fits under it.
pub(crate) fn throughput_table(r: &results::Throughput) -> String {
    let mut t = table::new(
        [
            "stack".to_string(),
            "size".into(),
            "Gbit/s".into(),
            "msgs/s".into(),
            "delivered".into(),
            format!("x {}", r.reference),
            "sent/CPU-s".into(),
        ],
        1,
    );
    for x in &r.results {
        t.add_row(vec![
            x.stack.clone(),
            human_size(x.size),
            format!("{:.3}", x.gbps),
            si(x.msgs_per_s),
            format!("{:.1}%", x.delivered * 100.0),
            format!("{:.2}", x.ratio),
            sent_per_cpu(x).map_or_else(|| "-".into(), si),
        ]);
    }
    let mut out = format!(
        "single-connection throughput as delivered; {} run(s) of {} after a {} warm-up, \
         stacks interleaved; medians of runs\n{}",
        r.runs,
        secs_f64(r.time_s),
        secs_f64(r.warmup_s),
        table::render(&t)
    );
    let mut seen: Vec<&str> = Vec::new();
    let mut params = Vec::new();
    for x in &r.results {
        if !seen.contains(&x.stack.as_str()) {
            seen.push(&x.stack);
            params.push((x.stack.as_str(), &x.params));
        }
    }
    params_lines(&mut out, params.into_iter());
    let _ = writeln!(
        out,
        "msgs/s = delivered bytes / size (UDP delivers messages over {} B as datagrams); \
         delivered = bytes received / bytes sent, whole runs; sent/CPU-s = messages the \
         sender's stack took per second of the sending thread's CPU time (one core), \
         median of runs",
        super::udp::MAX_DATAGRAM
    );
    out + &super::sizes::table(&r.fits)
}

/// Messages the sender's stack took per CPU-second of the sending thread, median of
/// runs; `None` where no run measured the sender's CPU.
fn sent_per_cpu(x: &results::ThroughputRow) -> Option<f64> {
    let mut v: Vec<f64> = x
        .per_run
        .iter()
        .filter(|r| r.sender_cpu_s > 0.0 && x.size > 0)
        .map(|r| r.sent_bytes as f64 / x.size as f64 / r.sender_cpu_s)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// One line per stack with the settings it got.
fn params_lines<'a>(t: &mut String, stacks: impl Iterator<Item = (&'a str, &'a Params)>) {
    for (name, p) in stacks {
        let kv: Vec<String> = p
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k} {s}"),
                v => format!("{k} {v}"),
            })
            .collect();
        let _ = writeln!(t, "  {name}: {}", kv.join(", "));
    }
}

/// Bytes as `64 B`, `4 KiB`, `1 MiB` (exact binary multiples) or plain bytes.
pub(crate) fn human_size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// A count with an SI prefix: `950`, `12.3 k`, `4.56 M`.
fn si(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// [`secs`] of a number of seconds read from a document.
fn secs_f64(s: f64) -> String {
    secs(Duration::try_from_secs_f64(s).unwrap_or_default())
}

fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_well() {
        assert_eq!(human_size(64), "64 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1_000_000), "1000000 B");
        assert_eq!(si(950.0), "950");
        assert_eq!(si(12_345.0), "12.3 k");
        assert_eq!(si(4_560_000.0), "4.56 M");
    }
}
