//! `natm-lab perf latency --stages`: where a round trip's time goes along the natm stack.
//! The hooks and the matching are `natm::stages`; this module pools the matched round
//! trips of every run of a stack and reports each segment's median, p99 and mean.
//! The means of the segments sum exactly to the mean round trip (each round trip's
//! segments sum to it); medians and p99s of segments do not add up in general.

use std::path::Path;

use super::latency::{LatencyConfig, Samples};
use super::report::human_size;
use super::results;
use super::stats::percentile;
use crate::plot;
use natm::stages::{RoundTrip, SEGMENTS};
use natm_cli::cli::table;

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

/// The breakdown as its document.
pub(crate) fn result(cfg: &LatencyConfig, runs: usize, rows: &[StageRow]) -> results::Stages {
    let spread = |s: &Seg| results::Spread {
        mean_us: s.mean,
        p50_us: s.p50,
        p99_us: s.p99,
    };
    results::Stages {
        clock: "CLOCK_MONOTONIC".into(),
        experiment: "latency-stages".into(),
        machine: results::Machine::now(),
        results: rows
            .iter()
            .map(|r| results::StagesRow {
                matched: r.matched,
                measured_p50_us: r.measured_p50,
                rtt: spread(&r.rtt),
                segments: SEGMENTS
                    .iter()
                    .zip(&r.segments)
                    .map(|(name, s)| results::Segment {
                        mean_us: s.mean,
                        p50_us: s.p50,
                        p99_us: s.p99,
                        segment: (*name).to_string(),
                    })
                    .collect(),
                sendmsg_call: results::SendmsgCall {
                    client: spread(&r.sendmsg[0]),
                    server: spread(&r.sendmsg[1]),
                },
                stack: r.stack.clone(),
                sum_of_means_us: r.segments.iter().map(|s| s.mean).sum(),
                sum_of_medians_us: r.segments.iter().map(|s| s.p50).sum(),
                unmatched: r.unmatched,
            })
            .collect(),
        runs,
        size: cfg.size,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// Width of the longest segment name and the rows under them, with padding.
const SEGMENT_WIDTH: u16 = 30;

/// The breakdown as a table: one column per stack, one line per segment.
pub(crate) fn table(r: &results::Stages) -> String {
    let rows = &r.results;
    let mut t = table::new(
        std::iter::once("segment").chain(rows.iter().map(|x| x.stack.as_str())),
        1,
    );
    let cell = |s: &results::Spread| format!("{:.1}/{:.1}/{:.1}", s.p50_us, s.p99_us, s.mean_us);
    let names: Vec<&str> = rows
        .first()
        .map(|x| x.segments.iter().map(|s| s.segment.as_str()).collect())
        .unwrap_or_default();
    for (k, name) in names.iter().enumerate() {
        let mut line = vec![(*name).to_string()];
        line.extend(rows.iter().map(|x| {
            x.segments.get(k).map_or("-".into(), |s| {
                format!("{:.1}/{:.1}/{:.1}", s.p50_us, s.p99_us, s.mean_us)
            })
        }));
        t.add_row(line);
    }
    let mut add = |label: &str, f: &dyn Fn(&results::StagesRow) -> String| {
        let mut line = vec![label.to_string()];
        line.extend(rows.iter().map(f));
        t.add_row(line);
    };
    add("(client sendmsg call)", &|x| cell(&x.sendmsg_call.client));
    add("(server sendmsg call)", &|x| cell(&x.sendmsg_call.server));
    add("round trip (hooks)", &|x| cell(&x.rtt));
    add("sum of segment medians", &|x| {
        format!("{:.1}", x.sum_of_medians_us)
    });
    add("round trip (client, median)", &|x| {
        format!("{:.1}", x.measured_p50_us)
    });
    add("matched / unmatched", &|x| {
        format!("{} / {}", x.matched, x.unmatched)
    });
    // Segment names whole; the stacks' columns share the rest of the width.
    if let Some(c) = t.column_mut(0) {
        c.set_constraint(comfy_table::ColumnConstraint::LowerBoundary(
            comfy_table::Width::Fixed(SEGMENT_WIDTH),
        ));
    }
    format!(
        "where the round trip goes, {} messages, one in flight; {} run(s) of {} s after a {} s \
         warm-up; segment median/p99/mean in µs, round trips pooled over runs\n{}",
        human_size(r.size),
        r.runs,
        r.time_s,
        r.warmup_s,
        table::render(&t)
    )
}

/// Stacked bars of the segments' means (which sum to the mean round trip), SVG and
/// the PNG beside it.
pub(crate) fn figure(path: &Path, r: &results::Stages) -> anyhow::Result<()> {
    let bars: Vec<(String, Vec<f64>)> = r
        .results
        .iter()
        .map(|x| {
            (
                x.stack.clone(),
                x.segments.iter().map(|s| s.mean_us).collect(),
            )
        })
        .collect();
    let title = format!(
        "Where a {} round trip goes (mean µs per segment)",
        human_size(r.size)
    );
    plot::both(path, |p| {
        plot::stacked_bars(p, &title, "µs", &SEGMENTS, &bars)
    })
}
