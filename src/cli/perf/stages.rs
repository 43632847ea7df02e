//! `natm perf latency --stages`: where a round trip's time goes along the natm stack.
//! The hooks and the matching are `natm::stages`; this module pools the matched round
//! trips of every run of a stack and reports each segment's median, p99 and mean.
//! The means of the segments sum exactly to the mean round trip (each round trip's
//! segments sum to it); medians and p99s of segments do not add up in general.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use super::latency::{LatencyConfig, Samples};
use super::report::{human_size, machine};
use super::stats::percentile;
use crate::cli::plot;
use natm::stages::{RoundTrip, SEGMENTS};

/// The stacks `--stages` measures unless told otherwise: inline and scheduled sends,
/// best effort and reliable.
pub(crate) const DEFAULT_STACKS: [&str; 4] = [
    "natm-be",
    "natm-be-sched",
    "natm-reliable",
    "natm-reliable-sched",
];

/// One segment's statistics, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seg {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) mean: f64,
}

impl Seg {
    fn of(mut ns: Vec<u64>) -> Seg {
        ns.sort_unstable();
        let us = |v: Option<u64>| v.unwrap_or(0) as f64 / 1e3;
        let sum: u128 = ns.iter().map(|&v| u128::from(v)).sum();
        Seg {
            p50: us(percentile(&ns, 0.5)),
            p99: us(percentile(&ns, 0.99)),
            mean: sum as f64 / ns.len().max(1) as f64 / 1e3,
        }
    }
}

/// One stack's breakdown.
#[derive(Debug)]
pub(crate) struct StageRow {
    pub(crate) stack: String,
    /// Matched round trips, pooled over runs.
    pub(crate) matched: usize,
    /// Round trips whose records did not all match (lost, ring wrapped).
    pub(crate) unmatched: usize,
    /// The round trip as the hooks saw it (client send call to client recv return).
    pub(crate) rtt: Seg,
    /// The round trip as the latency client timed it (std `Instant` around send and
    /// recv), median over the same last round trips of each run as the hooks kept.
    pub(crate) measured_p50: f64,
    /// [`SEGMENTS`], in order.
    pub(crate) segments: Vec<Seg>,
    /// The client's and the server's `sendmsg` calls (inside the segment after the
    /// adaptor hand-off, not added to the sum).
    pub(crate) sendmsg: [Seg; 2],
}

/// Pool each stack's runs into one row; stacks without stage records (not natm)
/// are left out.
pub(crate) fn rows(names: &[&str], results: &[Vec<Samples>]) -> Vec<StageRow> {
    let mut out = Vec::new();
    for (name, runs) in names.iter().zip(results) {
        let mut trips: Vec<&RoundTrip> = Vec::new();
        let mut unmatched = 0;
        let mut measured: Vec<u64> = Vec::new();
        for s in runs {
            if let Some((t, missed)) = &s.stages {
                trips.extend(t.iter());
                unmatched += missed;
                // The ring holds the run's last round trips: compare with those.
                let kept = (t.len() + missed).min(s.rtt_ns.len());
                measured.extend(&s.rtt_ns[s.rtt_ns.len() - kept..]);
            }
        }
        if trips.is_empty() {
            continue;
        }
        measured.sort_unstable();
        let segments = (0..SEGMENTS.len())
            .map(|k| Seg::of(trips.iter().map(|t| t.segments[k]).collect()))
            .collect();
        out.push(StageRow {
            stack: name.to_string(),
            matched: trips.len(),
            unmatched,
            rtt: Seg::of(trips.iter().map(|t| t.rtt_ns).collect()),
            measured_p50: percentile(&measured, 0.5).unwrap_or(0) as f64 / 1e3,
            segments,
            sendmsg: [0, 1].map(|k| Seg::of(trips.iter().map(|t| t.sendmsg_ns[k]).collect())),
        });
    }
    out
}

/// The breakdown as a table: one column per stack, one line per segment.
pub(crate) fn table(cfg: &LatencyConfig, runs: usize, rows: &[StageRow]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "where the round trip goes, {} messages, one in flight; {runs} run(s) of {} after a {} \
         warm-up; segment median / p99 / mean in µs, round trips pooled over runs",
        human_size(cfg.size),
        cfg.time.as_secs_f64(),
        cfg.warmup.as_secs_f64()
    );
    let _ = write!(t, "{:<30}", "segment");
    for r in rows {
        let _ = write!(t, " {:>24}", r.stack);
    }
    t.push('\n');
    let cell = |s: &Seg| format!("{:.1} / {:.1} / {:.1}", s.p50, s.p99, s.mean);
    for (k, name) in SEGMENTS.iter().enumerate() {
        let _ = write!(t, "{name:<30}");
        for r in rows {
            let _ = write!(t, " {:>24}", cell(&r.segments[k]));
        }
        t.push('\n');
    }
    for (k, side) in ["(client sendmsg call)", "(server sendmsg call)"]
        .iter()
        .enumerate()
    {
        let _ = write!(t, "{side:<30}");
        for r in rows {
            let _ = write!(t, " {:>24}", cell(&r.sendmsg[k]));
        }
        t.push('\n');
    }
    let _ = write!(t, "{:<30}", "round trip (hooks)");
    for r in rows {
        let _ = write!(t, " {:>24}", cell(&r.rtt));
    }
    t.push('\n');
    let _ = write!(t, "{:<30}", "sum of segment medians");
    for r in rows {
        let _ = write!(
            t,
            " {:>24.1}",
            r.segments.iter().map(|s| s.p50).sum::<f64>()
        );
    }
    t.push('\n');
    let _ = write!(t, "{:<30}", "round trip (client, median)");
    for r in rows {
        let _ = write!(t, " {:>24.1}", r.measured_p50);
    }
    t.push('\n');
    let _ = write!(t, "{:<30}", "matched / unmatched");
    for r in rows {
        let _ = write!(t, " {:>24}", format!("{} / {}", r.matched, r.unmatched));
    }
    t.push('\n');
    t
}

/// The breakdown as one JSON document.
pub(crate) fn json(cfg: &LatencyConfig, runs: usize, rows: &[StageRow]) -> String {
    let seg = |s: &Seg| json!({"p50_us": s.p50, "p99_us": s.p99, "mean_us": s.mean});
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let segments: Vec<Value> = SEGMENTS
                .iter()
                .zip(&r.segments)
                .map(|(name, s)| {
                    let mut v = seg(s);
                    v["segment"] = Value::from(*name);
                    v
                })
                .collect();
            json!({
                "stack": r.stack,
                "matched": r.matched,
                "unmatched": r.unmatched,
                "rtt": seg(&r.rtt),
                "measured_p50_us": r.measured_p50,
                "sum_of_medians_us": r.segments.iter().map(|s| s.p50).sum::<f64>(),
                "sum_of_means_us": r.segments.iter().map(|s| s.mean).sum::<f64>(),
                "segments": segments,
                "sendmsg_call": {"client": seg(&r.sendmsg[0]), "server": seg(&r.sendmsg[1])},
            })
        })
        .collect();
    let doc = json!({
        "experiment": "latency-stages",
        "size": cfg.size,
        "warmup_s": cfg.warmup.as_secs_f64(),
        "time_s": cfg.time.as_secs_f64(),
        "runs": runs,
        "clock": "CLOCK_MONOTONIC",
        "machine": machine(),
        "results": results,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

/// Stacked bars of the segments' means (which sum to the mean round trip), SVG and
/// the PNG beside it.
pub(crate) fn figure(path: &Path, cfg: &LatencyConfig, rows: &[StageRow]) -> anyhow::Result<()> {
    let bars: Vec<(String, Vec<f64>)> = rows
        .iter()
        .map(|r| (r.stack.clone(), r.segments.iter().map(|s| s.mean).collect()))
        .collect();
    let title = format!(
        "Where a {} round trip goes (mean µs per segment)",
        human_size(cfg.size)
    );
    plot::both(path, |p| {
        plot::stacked_bars(p, &title, "µs", &SEGMENTS, &bars)
    })
}
