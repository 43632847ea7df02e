//! Guaranteed service against its reservation (seed 001 §8, Fig. 5): a guaranteed VC
//! (`cbr:pcr=R`, the leaky bucket of seed 000 §5.3.3) between two natm hosts on
//! loopback; the sender sends messages of one size back to back with a blocking `send`,
//! the receiver measures the delivered rate after a warm-up (the throughput
//! experiment's method). Seed 001: "the receive rate matches the requested rate for
//! message sizes larger than about 4–8 K (depending on the required rate)" — below
//! that, the per-message cost, not the bucket, sets the rate.

use anyhow::Context as _;
use std::path::Path;
use std::time::Duration;

use indicatif::ProgressBar;

use super::experiment::{Experiment, OutputArgs};
use super::natm;
use super::report::human_size;
use super::results;
use super::stack::StackOptions;
use super::stats::median;
use super::throughput::{self, ThroughputConfig};
use crate::plot::{self, Axis, Line, Mark};
use natm_cli::cli::table;

/// One guaranteed-service experiment.
#[derive(Debug, Clone)]
pub(crate) struct GuaranteedConfig {
    /// Requested rates, payload bit/s.
    pub(crate) rates: Vec<u64>,
    /// Message sizes, bytes.
    pub(crate) sizes: Vec<usize>,
    pub(crate) warmup: Duration,
    pub(crate) time: Duration,
    pub(crate) runs: usize,
}

/// One (rate, size) point: each run's delivered bit/s.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) rate: u64,
    pub(crate) size: usize,
    pub(crate) bps: Vec<f64>,
}

impl Point {
    /// Median delivered bit/s over runs.
    pub(crate) fn delivered(&self) -> f64 {
        median(&self.bps).unwrap_or(f64::NAN)
    }
    /// Delivered over requested.
    pub(crate) fn ratio(&self) -> f64 {
        self.delivered() / self.rate as f64
    }
}

/// QoS text for a requested rate: `cbr:pcr=…`.
pub(crate) fn qos(rate: u64) -> String {
    if rate.is_multiple_of(1_000_000) {
        format!("cbr:pcr={}Mbps", rate / 1_000_000)
    } else {
        format!("cbr:pcr={rate}bps")
    }
}

/// Measure every (rate, size) point (each over at least four message times) `runs` times, the points interleaved within a run;
/// `tick` is called after each measurement.
pub(crate) fn run(
    cfg: &GuaranteedConfig,
    mut tick: impl FnMut(&str),
) -> anyhow::Result<Vec<Point>> {
    let mut points: Vec<Point> = cfg
        .rates
        .iter()
        .flat_map(|&rate| {
            cfg.sizes.iter().map(move |&size| Point {
                rate,
                size,
                bps: Vec::new(),
            })
        })
        .collect();
    let opts = StackOptions::default();
    for _ in 0..cfg.runs {
        for p in &mut points {
            let q = qos(p.rate);
            let stack = natm::with_qos("natm-guaranteed", &q, &opts);
            // At a low rate, a large message takes long: warm up over two message
            // times and measure over four at least, so the rate is the bucket's.
            let interval = Duration::from_secs_f64(p.size as f64 * 8.0 / p.rate as f64);
            let tcfg = ThroughputConfig {
                size: p.size,
                warmup: cfg.warmup.max(2 * interval),
                time: cfg.time.max(4 * interval),
                batch: 1,
            };
            let r = throughput::run(stack.as_ref(), &tcfg)
                .with_context(|| format!("{q} at {} B", p.size))?;
            p.bps.push(r.bps);
            tick(&format!("guaranteed {q} {}", human_size(p.size)));
        }
    }
    Ok(points)
}

/// The results as their document.
fn result(cfg: &GuaranteedConfig, points: &[Point]) -> results::Guaranteed {
    results::Guaranteed {
        experiment: "guaranteed".into(),
        machine: results::Machine::now(),
        results: points
            .iter()
            .map(|p| results::GuaranteedRow {
                bps: p.delivered(),
                per_run_bps: p.bps.clone(),
                qos: qos(p.rate),
                ratio: p.ratio(),
                requested_bps: p.rate,
                size: p.size,
            })
            .collect(),
        runs: cfg.runs,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// The distinct values of `f` over the rows, in the order measured.
fn distinct<T: PartialEq + Copy>(
    rows: &[results::GuaranteedRow],
    f: impl Fn(&results::GuaranteedRow) -> T,
) -> Vec<T> {
    let mut v = Vec::new();
    for r in rows {
        if !v.contains(&f(r)) {
            v.push(f(r));
        }
    }
    v
}

/// The results as a table: delivered over requested, one row per rate.
fn table(r: &results::Guaranteed) -> String {
    let sizes = distinct(&r.results, |p| p.size);
    let mut t = table::new(
        std::iter::once("R \\ size".to_string()).chain(sizes.iter().map(|&s| human_size(s))),
        0,
    );
    for rate in distinct(&r.results, |p| p.requested_bps) {
        let mut row = vec![rate_text(rate)];
        row.extend(
            r.results
                .iter()
                .filter(|p| p.requested_bps == rate)
                .map(|p| format!("{:.3}", p.ratio)),
        );
        t.add_row(row);
    }
    format!(
        "guaranteed VC (cbr:pcr=R), delivered rate / requested rate R; {} run(s) of {} s \
         after {} s; medians of runs\n{}\
         1.000 = the bucket delivers what was asked; below 1, the per-message cost limits the rate\n",
        r.runs,
        r.time_s,
        r.warmup_s,
        table::render(&t)
    )
}

fn rate_text(rate: u64) -> String {
    if rate >= 1_000_000_000 && rate.is_multiple_of(1_000_000_000) {
        format!("{} Gbit/s", rate / 1_000_000_000)
    } else if rate >= 1_000_000 && rate.is_multiple_of(1_000_000) {
        format!("{} Mbit/s", rate / 1_000_000)
    } else {
        format!("{rate} bit/s")
    }
}

/// Delivered rate against message size, one line per requested rate (log–log), each
/// with its requested rate as a thin horizontal line.
fn figure(path: &Path, r: &results::Guaranteed) -> anyhow::Result<()> {
    let sizes = distinct(&r.results, |p| p.size);
    let (lo, hi) = (
        sizes.iter().copied().min().unwrap_or(1) as f64,
        sizes.iter().copied().max().unwrap_or(1) as f64,
    );
    let mut lines = Vec::new();
    for (i, rate) in distinct(&r.results, |p| p.requested_bps)
        .into_iter()
        .enumerate()
    {
        lines.push(Line {
            label: format!("requested {}", rate_text(rate)),
            points: r
                .results
                .iter()
                .filter(|p| p.requested_bps == rate)
                .map(|p| (p.size as f64, p.bps / 1e6))
                .collect(),
            colour: i,
            mark: Mark::Measured,
        });
        lines.push(Line {
            label: String::new(),
            points: vec![(lo, rate as f64 / 1e6), (hi, rate as f64 / 1e6)],
            colour: i,
            mark: Mark::Reference,
        });
    }
    plot::both(path, |p| {
        plot::xy(
            p,
            "guaranteed VC: delivered rate against message size (seed 001 Fig. 5)",
            Axis {
                label: "message size (bytes)",
                log: true,
                from_zero: false,
            },
            Axis {
                label: "delivered (Mbit/s)",
                log: true,
                from_zero: false,
            },
            plot::Legend::LowerRight,
            &lines,
        )
    })
}

/// `natm-lab perf guaranteed`.
#[derive(Debug, clap::Args)]
pub(crate) struct GuaranteedArgs {
    /// Requested rates (payload bit/s), comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = natm_cli::cli::units::rate,
        default_value = "1Mbps,10Mbps,100Mbps,1Gbps"
    )]
    rates: Vec<u64>,
    /// Message sizes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = natm_cli::cli::units::bytes,
        default_value = "64,256,1KiB,4KiB,16KiB,64KiB"
    )]
    sizes: Vec<u64>,
    #[command(flatten)]
    out: super::Output,
}

impl Experiment for GuaranteedArgs {
    type Result = results::Guaranteed;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.out.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        let o = &self.out;
        if o.runs == 0 || o.time.is_zero() || self.rates.is_empty() || self.rates.contains(&0) {
            anyhow::bail!("--runs, --time and every --rates must be positive");
        }
        let cfg = GuaranteedConfig {
            rates: self.rates.clone(),
            sizes: self
                .sizes
                .iter()
                .map(|&s| super::check_size(s))
                .collect::<Result<_, _>>()?,
            warmup: o.warmup,
            time: o.time,
            runs: o.runs,
        };
        pb.set_length((cfg.runs * cfg.rates.len() * cfg.sizes.len()) as u64);
        let points = run(&cfg, |m| {
            pb.set_message(m.to_string());
            pb.inc(1);
        })?;
        Ok((result(&cfg, &points), ()))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(r: &Self::Result, (): &(), path: &Path) -> anyhow::Result<()> {
        figure(path, r)
    }
}
