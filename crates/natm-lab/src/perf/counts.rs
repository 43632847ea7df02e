//! `natm-lab perf counts`: the work behind the throughput and round-trip ratios —
//! system calls, wake-ups and ACKs per MB delivered and per round trip, natm beside
//! TCP and UDP in the same run (issue 30, "work per batch, not per TPDU").
//!
//! Each run is an ordinary `throughput` or `latency` run of one stack, built for that
//! run alone (no other stack's threads in the process); the kernel's counts for the
//! whole process ([`super::tally`]) are taken over exactly the run's measured interval,
//! and ACKs from the receiving end's own count (natm's PSB, TCP's `TCP_INFO`).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

use super::experiment::{Experiment, OutputArgs};
use super::latency::{self, LatencyConfig};
use super::results::Machine;
use super::stack::{Marks, StackOptions};
use super::stats::median;
use super::tally::{Interval, Tally};
use super::throughput::{self, ThroughputConfig};
use natm_cli::cli::{table, units};

/// `natm-lab perf counts`.
#[derive(Debug, Args)]
pub(crate) struct CountsArgs {
    /// Stacks measured in bulk (per MB delivered), comma-separated; empty for none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "natm-reliable,natm-reliable-zc,tcp-cubic,udp"
    )]
    bulk: Vec<String>,
    /// Stacks measured in round trips (per round trip), comma-separated; empty for none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "natm-be,natm-reliable,udp,tcp"
    )]
    rtt: Vec<String>,
    /// Message size in bulk.
    #[arg(long, default_value = "64KiB", value_parser = units::bytes)]
    size: u64,
    /// Message size of a round trip.
    #[arg(long, default_value = "32", value_parser = units::bytes)]
    rtt_size: u64,
    /// Repeat each measurement this many times, the stacks interleaved; the table
    /// gives the median of runs and the spread.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Not counted at the start of each run.
    #[arg(long, default_value = "300ms", value_parser = units::duration)]
    warmup: Duration,
    /// Counted for this long after the warm-up.
    #[arg(long, default_value = "2s", value_parser = units::duration)]
    time: Duration,
    #[command(flatten)]
    to: OutputArgs,
}

/// What `natm-lab perf counts` measured.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CountsResult {
    pub(crate) machine: Machine,
    pub(crate) bulk_size: usize,
    pub(crate) rtt_size: usize,
    pub(crate) bulk: Vec<StackCounts>,
    pub(crate) rtt: Vec<StackCounts>,
}

/// One stack's runs of one kind.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StackCounts {
    pub(crate) stack: String,
    pub(crate) runs: Vec<CountRun>,
}

/// One run: what it moved and what the kernel counted meanwhile.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CountRun {
    /// Bulk: MB (10⁶ octets) delivered; round trips: round trips completed.
    pub(crate) units: f64,
    /// Bulk: Gbit/s delivered; round trips: median round trip, µs.
    pub(crate) figure: f64,
    pub(crate) syscalls: u64,
    pub(crate) wakeups: u64,
    pub(crate) preempted: u64,
    /// ACKs the receiver sent (bulk only), if its stack counts them.
    pub(crate) acks: Option<u64>,
}

/// The interval's counters, opened and closed by the run's marks.
#[derive(Default)]
struct Counting {
    open: Mutex<Option<Interval>>,
    closed: Mutex<Option<anyhow::Result<Tally>>>,
}

impl Marks for Counting {
    fn start(&self) {
        match Interval::open() {
            Ok(iv) => *self.open.lock().expect("not poisoned") = Some(iv),
            Err(e) => *self.closed.lock().expect("not poisoned") = Some(Err(e)),
        }
    }

    fn end(&self) {
        if let Some(iv) = self.open.lock().expect("not poisoned").take() {
            *self.closed.lock().expect("not poisoned") = Some(iv.close());
        }
    }
}

impl Counting {
    fn tally(self) -> anyhow::Result<Tally> {
        self.closed
            .into_inner()
            .expect("not poisoned")
            .unwrap_or_else(|| Err(anyhow::anyhow!("the run measured no interval")))
    }
}

/// The stack named, built for one run.
fn build(name: &str) -> anyhow::Result<Box<dyn super::stack::Stack>> {
    let mut v = super::STACKS.resolve(&[name.to_string()], &StackOptions::default())?;
    Ok(v.remove(0))
}

impl CountsArgs {
    fn bulk_run(&self, name: &str) -> anyhow::Result<CountRun> {
        let stack = build(name)?;
        let cfg = ThroughputConfig {
            size: usize::try_from(self.size).context("--size")?,
            warmup: self.warmup,
            time: self.time,
            batch: 1,
        };
        let counting = Counting::default();
        let rate = throughput::run_marked(stack.as_ref(), &cfg, &counting)
            .with_context(|| format!("{name}: bulk"))?;
        let t = counting.tally()?;
        Ok(CountRun {
            units: rate.bytes as f64 / 1e6,
            figure: rate.bps / 1e9,
            syscalls: t.syscalls,
            wakeups: t.wakeups,
            preempted: t.preempted,
            acks: rate.acks,
        })
    }

    fn rtt_run(&self, name: &str) -> anyhow::Result<CountRun> {
        let stack = build(name)?;
        let cfg = LatencyConfig {
            size: usize::try_from(self.rtt_size).context("--rtt-size")?,
            warmup: self.warmup,
            time: self.time,
            count: usize::MAX,
            stages: false,
            placement: None,
        };
        let counting = Counting::default();
        let s = latency::run_marked(stack.as_ref(), &cfg, &counting)
            .with_context(|| format!("{name}: round trips"))?;
        let t = counting.tally()?;
        let rtts: Vec<f64> = s.rtt_ns.iter().map(|&n| n as f64 / 1e3).collect();
        Ok(CountRun {
            units: (s.rtt_ns.len() as u64 + s.lost) as f64,
            figure: median(&rtts).unwrap_or(f64::NAN),
            syscalls: t.syscalls,
            wakeups: t.wakeups,
            preempted: t.preempted,
            acks: None,
        })
    }
}

impl Experiment for CountsArgs {
    type Result = CountsResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(CountsResult, ())> {
        if self.runs == 0 {
            anyhow::bail!("--runs must be at least 1");
        }
        pb.set_length((self.runs * (self.bulk.len() + self.rtt.len())) as u64);
        let mut bulk: Vec<StackCounts> = self
            .bulk
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| StackCounts {
                stack: s.trim().to_string(),
                runs: Vec::new(),
            })
            .collect();
        let mut rtt: Vec<StackCounts> = self
            .rtt
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| StackCounts {
                stack: s.trim().to_string(),
                runs: Vec::new(),
            })
            .collect();
        for _ in 0..self.runs {
            for s in &mut bulk {
                pb.set_message(format!("{} bulk", s.stack));
                s.runs.push(self.bulk_run(&s.stack)?);
                pb.inc(1);
            }
            for s in &mut rtt {
                pb.set_message(format!("{} round trips", s.stack));
                s.runs.push(self.rtt_run(&s.stack)?);
                pb.inc(1);
            }
        }
        Ok((
            CountsResult {
                machine: Machine::now(),
                bulk_size: self.size as usize,
                rtt_size: self.rtt_size as usize,
                bulk,
                rtt,
            },
            (),
        ))
    }

    fn table(r: &CountsResult) -> String {
        let mut out = String::new();
        let mut t = table::new(
            [
                "stack",
                "Gbit/s",
                "syscalls/MB",
                "wake-ups/MB",
                "preempted/MB",
                "ACKs/MB",
            ],
            1,
        );
        for s in &r.bulk {
            t.add_row(row(s, |x| format!("{x:.2}")));
        }
        out += &format!(
            "Bulk, {} B messages, per MB (10⁶ B) delivered; median of runs [min–max]:\n{}\n",
            r.bulk_size,
            table::render(&t)
        );
        let mut t = table::new(
            [
                "stack",
                "RTT µs",
                "syscalls/RT",
                "wake-ups/RT",
                "preempted/RT",
                "",
            ],
            1,
        );
        for s in &r.rtt {
            let mut cells = row(s, |x| format!("{x:.1}"));
            cells.pop();
            t.add_row(cells);
        }
        out += &format!(
            "Round trips of {} B, per round trip:\n{}",
            r.rtt_size,
            table::render(&t)
        );
        out += &format!(
            "\n{} CPUs, load {}; every thread of the process counted (the kernel's \
             raw_syscalls:sys_enter and voluntary context switches).\n",
            r.machine.cpus,
            r.machine.loadavg.as_deref().unwrap_or("?")
        );
        out
    }

    fn figure(r: &CountsResult, (): &(), path: &Path) -> anyhow::Result<()> {
        let med = |s: &StackCounts, f: fn(&CountRun) -> u64| {
            let v: Vec<f64> = s.runs.iter().map(|x| f(x) as f64 / x.units).collect();
            median(&v).unwrap_or(0.0)
        };
        let rows: Vec<(String, Vec<f64>)> = r
            .bulk
            .iter()
            .map(|s| {
                (
                    s.stack.clone(),
                    vec![med(s, |x| x.syscalls), med(s, |x| x.wakeups)],
                )
            })
            .collect();
        let title = format!(
            "Work per MB delivered, {} B messages (median of runs)",
            r.bulk_size
        );
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(p, &title, "per MB", &["system calls", "wake-ups"], &rows)
        })
    }
}

/// A table row: the stack, its figure, and each count per unit, as median [min–max].
fn row(s: &StackCounts, fig: impl Fn(f64) -> String) -> Vec<String> {
    let per = |f: &dyn Fn(&CountRun) -> Option<f64>| -> String {
        let v: Vec<f64> = s.runs.iter().filter_map(f).collect();
        spread(&v, |x| format!("{x:.1}"))
    };
    vec![
        s.stack.clone(),
        spread(&s.runs.iter().map(|r| r.figure).collect::<Vec<_>>(), &fig),
        per(&|r| Some(r.syscalls as f64 / r.units)),
        per(&|r| Some(r.wakeups as f64 / r.units)),
        per(&|r| Some(r.preempted as f64 / r.units)),
        per(&|r| r.acks.map(|a| a as f64 / r.units)),
    ]
}

/// `median [min–max]`, or `—` for no values.
pub(crate) fn spread(v: &[f64], f: impl Fn(f64) -> String) -> String {
    let Some(m) = median(v) else {
        return "—".into();
    };
    if v.len() < 2 {
        return f(m);
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} [{}–{}]", f(m), f(lo), f(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_gives_counts_per_unit_with_their_spread() {
        let run = |units, syscalls, acks| CountRun {
            units,
            figure: 1.0,
            syscalls,
            wakeups: 10,
            preempted: 0,
            acks,
        };
        let s = StackCounts {
            stack: "x".into(),
            runs: vec![run(10.0, 100, Some(5)), run(20.0, 100, None)],
        };
        let r = row(&s, |x| format!("{x:.2}"));
        assert_eq!(r[2], "7.5 [5.0–10.0]");
        assert_eq!(r[5], "0.5", "only the run that counted ACKs");
        let none = StackCounts {
            stack: "y".into(),
            runs: vec![run(1.0, 1, None)],
        };
        assert_eq!(row(&none, |x| format!("{x}"))[5], "—");
    }
}
