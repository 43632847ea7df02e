//! `natm-lab perf multipoint`: a guaranteed point-to-multipoint VC through one `natm
//! switch` process and a `natm sigd` per host on loopback ([`natm_cli::cli::loopnet`]),
//! issue 19. Three cases, interleaved run by run, each on a fresh network:
//!
//! - `network`: one point-to-multipoint call (`encrypt=off`), its one VC replicated
//!   by the switch to every leaf's port (ADD PARTY per leaf);
//! - `own-calls`: the same leaves with `encrypt=on`, which the network cannot
//!   replicate (no group key), so each leaf has a sealed call of its own and the
//!   root's engine sends every message once per leaf;
//! - `point-to-point`: one guaranteed call at the same rate to the first leaf, the
//!   reference.
//!
//! For each case: every leaf's delivered rate over the measured interval, against the
//! reservation and against the point-to-point VC in the same run; how many copies of
//! the stream the root put on its link (its VCs' payload bytes over what a leaf
//! received: 1 when the network replicates, one per leaf with calls of their own);
//! and how long adding a leaf took. Measurements, not assertions.

use natm::ulib::Wait;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use natm::ulib::{Connection, Error, Host, Multipoint};
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::results::Machine;
use super::stats::median;
use natm_cli::cli::loopnet::{address, LoopNet, Topology};
use natm_cli::cli::traffic::recv_loop;
use natm_cli::cli::{table, units};

/// Message size: one TPDU, so that a cell lost at the switch costs one message.
const ONE_TPDU: usize = 4096;
/// How long a leaf may take to be bound, called and accepted.
const SETUP_TIMEOUT: Duration = Duration::from_secs(20);

/// `natm-lab perf multipoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct MultipointArgs {
    /// Leaves of the point-to-multipoint VC, each on its own host.
    #[arg(long, default_value_t = 3)]
    leaves: usize,
    /// The VC's reserved rate (`guaranteed:pcr=`).
    #[arg(long, default_value = "8Mbps", value_parser = units::rate)]
    rate: u64,
    /// Seconds each case is measured, after the warm-up.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Traffic before the measured interval, discarded.
    #[arg(long, default_value = "500ms", value_parser = units::duration)]
    warmup: Duration,
    /// Runs of each case (cases interleaved); the table gives medians and ranges.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[command(flatten)]
    to: OutputArgs,
}

/// One way of reaching the leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Case {
    Network,
    OwnCalls,
    PointToPoint,
}

impl Case {
    const ALL: [Case; 3] = [Case::Network, Case::OwnCalls, Case::PointToPoint];

    fn name(self) -> &'static str {
        match self {
            Case::Network => "network",
            Case::OwnCalls => "own-calls",
            Case::PointToPoint => "point-to-point",
        }
    }

    fn qos(self, rate: u64) -> String {
        let encrypt = if self == Case::OwnCalls { "on" } else { "off" };
        format!("guaranteed:pcr={rate}bps,encrypt={encrypt}")
    }
}

/// One run of one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunResult {
    /// Each leaf's delivered payload rate, bit/s (one for point-to-point).
    pub(crate) leaf_bps: Vec<f64>,
    /// Copies of the stream the root sent: payload bytes on its VCs over the whole
    /// transfer, over the payload bytes a leaf received (the leaves' mean).
    pub(crate) root_copies: f64,
    /// Milliseconds each leaf took to add (the first: the call's setup).
    pub(crate) add_ms: Vec<f64>,
    /// Leaves the network replicated to.
    pub(crate) replicated: usize,
}

/// One case over its runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CaseResult {
    pub(crate) case: Case,
    pub(crate) qos: String,
    pub(crate) runs: Vec<RunResult>,
    /// Median over runs and leaves of the leaves' rates, bit/s, and the range.
    pub(crate) leaf_bps: f64,
    pub(crate) leaf_min_bps: f64,
    pub(crate) leaf_max_bps: f64,
    /// `leaf_bps` over the reservation.
    pub(crate) of_reserved: f64,
    /// `leaf_bps` over the point-to-point VC's, same runs.
    pub(crate) of_p2p: Option<f64>,
    /// Median copies of the stream the root sent.
    pub(crate) root_copies: f64,
    /// Median time to add a leaf after the first, ms (the first's is the call's
    /// setup, reported apart).
    pub(crate) add_ms: Option<f64>,
    pub(crate) setup_ms: f64,
}

/// What `natm-lab perf multipoint` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MultipointResult {
    pub(crate) experiment: String,
    pub(crate) leaves: usize,
    pub(crate) rate_bps: u64,
    pub(crate) seconds: f64,
    pub(crate) warmup_s: f64,
    pub(crate) runs: usize,
    pub(crate) cases: Vec<CaseResult>,
    pub(crate) machine: Machine,
}

/// The root's side of a case: how it sends, and its VCs' payload counters.
enum Root {
    Multi(Box<Multipoint>),
    One(Connection),
}

impl Root {
    fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        match self {
            Root::Multi(m) => m.send(msg).map(drop),
            Root::One(c) => c.send(msg, Wait::Block),
        }
    }

    /// Payload bytes sent on every VC the root sends on.
    fn bytes_sent(&self) -> u64 {
        match self {
            Root::One(c) => c.stats().tx.bytes_sent,
            Root::Multi(m) => {
                let leaves = m.leaves();
                let mut shared = false;
                let mut n = 0;
                for (l, _) in leaves {
                    let network = m.replicated_by_network(l) == Some(true);
                    if network && shared {
                        continue;
                    }
                    shared |= network;
                    n += m.branch(l).map_or(0, |c| c.stats().tx.bytes_sent);
                }
                n
            }
        }
    }

    fn replicated(&self) -> usize {
        match self {
            Root::One(_) => 0,
            Root::Multi(m) => m
                .leaves()
                .iter()
                .filter(|(l, _)| m.replicated_by_network(*l) == Some(true))
                .count(),
        }
    }
}

/// A leaf host: accepts one call on `mc` and counts what it delivers.
struct Leaf {
    delivered: Arc<AtomicU64>,
    thread: thread::JoinHandle<()>,
}

fn leaf(host: Host, stop: Arc<AtomicBool>) -> anyhow::Result<Leaf> {
    let l = host
        .bind("mc", "best-effort")
        .context("cannot bind a leaf's listener")?;
    let delivered = Arc::new(AtomicU64::new(0));
    let d = delivered.clone();
    let thread = thread::spawn(move || {
        let _host = host;
        if let Ok(c) = l.accept(Wait::For(SETUP_TIMEOUT)) {
            recv_loop(&c, &d, &stop);
        }
    });
    Ok(Leaf { delivered, thread })
}

/// One run of `case` on a fresh network.
fn run_case(a: &MultipointArgs, case: Case) -> anyhow::Result<RunResult> {
    let net = LoopNet::start(&Topology {
        hosts: a.leaves + 1,
        line_rate: 1_000_000_000,
        scheduler: "rr".into(),
        buffer: 16_384,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let wanted = if case == Case::PointToPoint {
        1
    } else {
        a.leaves
    };
    let leaves = (1..=wanted)
        .map(|i| leaf(net.host(i)?, stop.clone()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let host = net.host(0)?;
    let qos = case.qos(a.rate);
    let called = |i: usize| format!("{}:mc", address(i));
    let mut add_ms = Vec::new();
    let t = Instant::now();
    let mut root = match case {
        Case::PointToPoint => Root::One(
            host.connect(called(1).as_str(), &qos)
                .with_context(|| format!("cannot call {}", called(1)))?,
        ),
        _ => Root::Multi(Box::new(
            host.connect_multipoint(called(1).as_str(), &qos)
                .with_context(|| format!("cannot call {}", called(1)))?,
        )),
    };
    add_ms.push(t.elapsed().as_secs_f64() * 1e3);
    if let Root::Multi(m) = &mut root {
        for i in 2..=wanted {
            let t = Instant::now();
            m.add_sink(called(i).as_str())
                .with_context(|| format!("cannot add {}", called(i)))?;
            add_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let replicated = root.replicated();
    let sending = Arc::new(AtomicBool::new(true));
    let s = sending.clone();
    let sender = thread::spawn(move || {
        let msg = vec![0x5Au8; ONE_TPDU];
        while s.load(Ordering::Relaxed) {
            if root.send(&msg).is_err() {
                break;
            }
        }
        root
    });
    thread::sleep(a.warmup);
    let snap = || -> Vec<u64> {
        leaves
            .iter()
            .map(|l| l.delivered.load(Ordering::Relaxed))
            .collect()
    };
    let before = snap();
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(a.seconds));
    let after = snap();
    let span = t0.elapsed().as_secs_f64();
    sending.store(false, Ordering::Relaxed);
    let root = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))?;
    // The root's counters over the whole transfer (warm-up included) against the
    // leaves' over the same whole: the ratio does not depend on the interval.
    let root_bytes = root.bytes_sent() as f64;
    stop.store(true, Ordering::Relaxed);
    drop(root);
    let mut total_leaf = 0u64;
    for l in leaves {
        let _ = l.thread.join();
        total_leaf += l.delivered.load(Ordering::Relaxed);
    }
    let leaf_bps = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 * 8.0 / span)
        .collect::<Vec<_>>();
    let mean_leaf = total_leaf as f64 / wanted as f64;
    Ok(RunResult {
        leaf_bps,
        root_copies: if mean_leaf > 0.0 {
            root_bytes / mean_leaf
        } else {
            f64::NAN
        },
        add_ms,
        replicated,
    })
}

fn measure(a: &MultipointArgs, pb: &ProgressBar) -> anyhow::Result<MultipointResult> {
    anyhow::ensure!(a.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(
        (1..=8).contains(&a.leaves),
        "--leaves must be 1 to 8 (each is a sigd process)"
    );
    anyhow::ensure!(a.rate > 0, "--rate must be above 0");
    pb.set_length((a.runs * Case::ALL.len()) as u64);
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::new(); Case::ALL.len()];
    for _ in 0..a.runs {
        for (k, case) in Case::ALL.into_iter().enumerate() {
            runs[k].push(run_case(a, case).with_context(|| format!("case {}", case.name()))?);
            pb.inc(1);
        }
    }
    let p2p: Vec<f64> = runs[2].iter().flat_map(|r| r.leaf_bps.clone()).collect();
    let p2p = median(&p2p);
    let cases = Case::ALL
        .into_iter()
        .zip(runs)
        .map(|(case, runs)| {
            let all: Vec<f64> = runs.iter().flat_map(|r| r.leaf_bps.clone()).collect();
            let leaf = median(&all).unwrap_or(f64::NAN);
            let adds: Vec<f64> = runs
                .iter()
                .flat_map(|r| r.add_ms.iter().skip(1).copied())
                .collect();
            let setups: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.add_ms.first().copied())
                .collect();
            let copies: Vec<f64> = runs.iter().map(|r| r.root_copies).collect();
            CaseResult {
                case,
                qos: case.qos(a.rate),
                leaf_bps: leaf,
                leaf_min_bps: all.iter().copied().fold(f64::INFINITY, f64::min),
                leaf_max_bps: all.iter().copied().fold(0.0, f64::max),
                of_reserved: leaf / a.rate as f64,
                of_p2p: p2p.map(|p| leaf / p),
                root_copies: median(&copies).unwrap_or(f64::NAN),
                add_ms: median(&adds),
                setup_ms: median(&setups).unwrap_or(f64::NAN),
                runs,
            }
        })
        .collect();
    Ok(MultipointResult {
        experiment: "multipoint".into(),
        leaves: a.leaves,
        rate_bps: a.rate,
        seconds: a.seconds,
        warmup_s: a.warmup.as_secs_f64(),
        runs: a.runs,
        cases,
        machine: Machine::now(),
    })
}

fn mbps(bps: f64) -> String {
    format!("{:.3}", bps / 1e6)
}

impl Experiment for MultipointArgs {
    type Result = MultipointResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(MultipointResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &MultipointResult) -> String {
        let mut t = table::new(
            [
                "case",
                "leaves",
                "by net",
                "Mbit/s/leaf",
                "min–max",
                "× resv",
                "× p2p",
                "root copies",
                "setup ms",
                "add ms",
            ],
            2,
        );
        for c in &r.cases {
            let leaves = c.runs.first().map_or(0, |x| x.leaf_bps.len());
            let by_net = c.runs.first().map_or(0, |x| x.replicated);
            t.add_row(vec![
                c.case.name().to_owned(),
                leaves.to_string(),
                by_net.to_string(),
                mbps(c.leaf_bps),
                format!("{}–{}", mbps(c.leaf_min_bps), mbps(c.leaf_max_bps)),
                format!("{:.3}", c.of_reserved),
                c.of_p2p.map_or("-".into(), |x| format!("{x:.3}")),
                format!("{:.2}", c.root_copies),
                format!("{:.1}", c.setup_ms),
                c.add_ms.map_or("-".into(), |x| format!("{x:.1}")),
            ]);
        }
        format!(
            "A guaranteed {} Mbit/s VC to {} leaves through a natm switch process, {} s measured after {} s, median of {} run(s) over runs and leaves\n\n{}\n{} CPUs, load average {}\n",
            r.rate_bps as f64 / 1e6,
            r.leaves,
            r.seconds,
            r.warmup_s,
            r.runs,
            table::render(&t),
            r.machine.cpus,
            r.machine.loadavg.as_deref().unwrap_or("?")
        )
    }

    fn figure(r: &MultipointResult, (): &(), path: &Path) -> anyhow::Result<()> {
        let rows: Vec<(String, Vec<f64>)> = r
            .cases
            .iter()
            .map(|c| (c.case.name().to_owned(), vec![c.leaf_bps / 1e6]))
            .collect();
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(
                p,
                "Per-leaf delivered rate of a guaranteed point-to-multipoint VC",
                "Mbit/s",
                &["per leaf"],
                &rows,
            )
        })
    }
}
