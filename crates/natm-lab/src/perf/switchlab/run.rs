//! One measurement: a switch with an input port `in` (a fast line from the sending
//! host) and an output port `out` (the bottleneck, to the receiving host), one PVC
//! per source from `in:0.(32+i)` to `out:1.(40+i)`; the sender paces, the receiver
//! counts, and the switch's counters are read after it stops.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lab::{counter, Lab, Port};
use super::traffic::{self, Pacing, Received, SendPlan, Sent, Source};
use crate::perf::results::nan;

/// The input line: far above any load sent, so that the switch stamps cells with
/// their real arrival times (a slower input line would space them out itself).
const INPUT_CELLS_PER_S: u64 = 2_000_000;

/// The output port's VPI and first VCI.
pub(super) const OUT_VPI: u16 = 1;
pub(super) const OUT_VCI: u16 = 40;

/// One VC of a measurement.
pub(super) struct Vc {
    pub(super) source: Source,
    pub(super) pacing: Pacing,
    /// Further keys of its `[[pvc]]` section (contract, buffer, frame discard).
    pub(super) pvc: String,
}

/// A measurement's setup.
pub(super) struct Setup {
    /// The output line, cells/s.
    pub(super) line: u64,
    /// Further keys of the output port's section.
    pub(super) out: String,
    pub(super) vcs: Vec<Vc>,
    pub(super) plan: SendPlan,
    /// SDU octets of the AAL5 frames sent, or `None` for stamped cells.
    pub(super) sdu: Option<usize>,
    /// Sample the output port's queue from the stat file every this many ms (the
    /// switch then writes it as often); `None`: counters at the end only.
    pub(super) sample_ms: Option<u64>,
}

/// What one measurement gave.
pub(super) struct Outcome {
    pub(super) sent: Sent,
    /// By output VCI, in source order.
    pub(super) got: Vec<traffic::VcReceived>,
    /// The switch's last counters.
    pub(super) stat: Value,
    /// The output port's queue, cells, at each sample.
    pub(super) queue: Vec<u64>,
}

impl Outcome {
    /// Counter `path` of VC `i` (`["dropped", "policing"]`, `["tagged"]`, …).
    pub(super) fn vc(&self, i: usize, path: &[&str]) -> u64 {
        let i = i.to_string();
        let mut p = vec!["vcs", i.as_str(), "counters"];
        p.extend_from_slice(path);
        counter(&self.stat, &p)
    }

    /// Counter `path` of the output port's data-plane stats.
    pub(super) fn out_port(&self, path: &[&str]) -> u64 {
        let mut p = vec!["ports", "1", "stats"];
        p.extend_from_slice(path);
        counter(&self.stat, &p)
    }
}

/// Runs one measurement.
pub(super) fn measure(setup: Setup) -> anyhow::Result<Outcome> {
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let ports = [
        Port {
            name: "in",
            peer: tx.local_addr()?,
            cells_per_s: INPUT_CELLS_PER_S,
            extra: String::new(),
        },
        Port {
            name: "out",
            peer: rx.local_addr()?,
            cells_per_s: setup.line,
            extra: setup.out,
        },
    ];
    let mut pvcs = String::new();
    let mut sources = Vec::new();
    for (i, vc) in setup.vcs.into_iter().enumerate() {
        pvcs += &format!(
            "[[pvc]]\nfrom = \"in:0.{}\"\nto = \"out:{OUT_VPI}.{}\"\n{}\n",
            32 + i,
            usize::from(OUT_VCI) + i,
            vc.pvc
        );
        sources.push((vc.source, vc.pacing));
    }
    let n = sources.len();
    let lab = Lab::start(&ports, &pvcs, setup.sample_ms.unwrap_or(50))?;
    let to = lab.port("in")?;
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = traffic::receive(rx, base, setup.sdu, stop.clone());
    let (sent, queue) = std::thread::scope(|s| {
        let sampler = setup.sample_ms.map(|ms| {
            let (lab, stop) = (&lab, &stop);
            s.spawn(move || sample_queue(lab, stop, Duration::from_millis(ms), "1"))
        });
        let sent = traffic::send(&tx, to, base, sources, &setup.plan);
        stop.store(true, Ordering::Relaxed);
        let queue = sampler.map(|h| h.join().unwrap_or_default());
        (sent, queue.unwrap_or_default())
    });
    let got: Received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiving host panicked"))??;
    let stat = lab.finish()?;
    let got = (0..n)
        .map(|i| {
            got.get(&(OUT_VPI, OUT_VCI + i as u16))
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    Ok(Outcome {
        sent,
        got,
        stat,
        queue,
    })
}

/// Port `port`'s queue (its index in the stat file) in each new snapshot until
/// `stop`.
pub(super) fn sample_queue(lab: &Lab, stop: &AtomicBool, every: Duration, port: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut last_uptime = -1.0;
    while !stop.load(Ordering::Relaxed) {
        if let Some(v) = lab.snapshot() {
            let up = v["uptime_s"].as_f64().unwrap_or(0.0);
            if up > last_uptime {
                last_uptime = up;
                out.push(counter(&v, &["ports", port, "stats", "queue_cells"]));
            }
        }
        std::thread::sleep(every);
    }
    out
}

/// The median and range of one figure over runs (`null` in JSON where a run had
/// nothing to measure, read back as NaN).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Spread {
    #[serde(deserialize_with = "nan")]
    pub(crate) median: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) min: f64,
    #[serde(deserialize_with = "nan")]
    pub(crate) max: f64,
}

impl Spread {
    /// Of `f` over `runs`.
    pub(super) fn over<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Spread {
        let v: Vec<f64> = runs.iter().map(f).collect();
        Spread {
            median: crate::perf::stats::median(&v).unwrap_or(f64::NAN),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}
