//! Cost of the send path (seed 000 §6.3, Figs. 9–10): the CPU time of one `send` on a
//! best-effort VC against message size, split by a least-squares fit into a
//! per-message, a per-TPDU and a per-byte cost:
//!
//! `cost(size) = m + t · ⌈size / TPDU⌉ + b · size`
//!
//! The clock is the sending thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`: user and
//! system time of that thread only), read before and after a tight loop of `send`s, so
//! time blocked on a full queue and the other threads (the receiver, the engine's
//! driver) are not counted. With inline sends (`natm-be`) that thread runs the whole
//! path down to the UDP `sendmsg`; with every send through the scheduler
//! (`natm-be-sched`) it runs only the interface routine — the paper's `t_send` — and
//! the driver does the rest. Seed 000 measured `t_send` with a logic analyser on a
//! 66 MHz 486: 95 µs per message, 35 µs per TPDU.

use anyhow::Context as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rustix::time::{clock_gettime, ClockId};

use super::experiment::{Experiment, OutputArgs};
use super::fit::non_negative_least_squares;
use super::natm;
use super::results;
use super::stack::{is_timeout, StackOptions};
use super::stats::median;
use crate::plot::{self, Axis, Line, Mark};
use natm_cli::cli::table;

/// A natm send path to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendPath {
    /// Name in the results.
    pub(crate) name: &'static str,
    /// Build the stack.
    pub(crate) make: super::stack::MakeStack,
}

/// The send paths measured: inline and through the scheduler.
pub(crate) const PATHS: [SendPath; 2] = [
    SendPath {
        name: "natm-be",
        make: natm::best_effort,
    },
    SendPath {
        name: "natm-be-sched",
        make: natm::best_effort_sched,
    },
];

/// One cost experiment.
#[derive(Debug, Clone)]
pub(crate) struct CostConfig {
    pub(crate) sizes: Vec<usize>,
    /// TPDU size of the VC (best effort's default).
    pub(crate) tpdu: usize,
    /// Length of each tight loop.
    pub(crate) time: Duration,
    pub(crate) warmup: Duration,
    pub(crate) runs: usize,
}

/// One path at one size: per run, CPU and wall time per `send`, seconds.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) path: &'static str,
    pub(crate) size: usize,
    pub(crate) cpu: Vec<f64>,
    pub(crate) wall: Vec<f64>,
}

impl Point {
    fn cpu_s(&self) -> f64 {
        median(&self.cpu).unwrap_or(f64::NAN)
    }
    fn wall_s(&self) -> f64 {
        median(&self.wall).unwrap_or(f64::NAN)
    }
}

/// A path's fitted costs, seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Costs {
    pub(crate) per_message: f64,
    pub(crate) per_tpdu: f64,
    pub(crate) per_byte: f64,
}

impl Costs {
    fn at(&self, size: usize, tpdu: usize) -> f64 {
        self.per_message + self.per_tpdu * size.div_ceil(tpdu) as f64 + self.per_byte * size as f64
    }
}

/// CPU time the calling thread has run (user + system).
pub(crate) fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One tight loop of sends: (CPU seconds, wall seconds) per send.
fn measure(path: SendPath, size: usize, cfg: &CostConfig) -> anyhow::Result<(f64, f64)> {
    let stack = (path.make)(path.name, &StackOptions::default())?;
    let pair = stack.connect(size).context("connect")?;
    let (mut tx, mut rx) = (pair.client, pair.server);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The receiver drains, so the VC stays in its steady state.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if rx.recv().is_err() {
                    break;
                }
            }
        });
        let msg = vec![0x3c_u8; size];
        let mut send = |until: Instant| -> anyhow::Result<u64> {
            let mut n = 0;
            while Instant::now() < until {
                match tx.send(&msg) {
                    Ok(()) => n += 1,
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(anyhow::anyhow!("send: {e}")),
                }
            }
            Ok(n)
        };
        let r = send(Instant::now() + cfg.warmup).and_then(|_| {
            let (c0, w0) = (thread_cpu(), Instant::now());
            let n = send(w0 + cfg.time)?;
            let (c1, w1) = (thread_cpu(), Instant::now());
            if n == 0 {
                anyhow::bail!("no send completed");
            }
            Ok((
                (c1 - c0).as_secs_f64() / n as f64,
                (w1 - w0).as_secs_f64() / n as f64,
            ))
        });
        stop.store(true, Ordering::Relaxed);
        r
    })
}

/// Measure every path at every size, `runs` times interleaved.
pub(crate) fn run(cfg: &CostConfig, mut tick: impl FnMut(&str)) -> anyhow::Result<Vec<Point>> {
    let mut points: Vec<Point> = PATHS
        .iter()
        .flat_map(|p| {
            cfg.sizes.iter().map(|&size| Point {
                path: p.name,
                size,
                cpu: Vec::new(),
                wall: Vec::new(),
            })
        })
        .collect();
    for _ in 0..cfg.runs {
        for pt in &mut points {
            let path = PATHS.iter().find(|p| p.name == pt.path).copied();
            let path = path.context("unknown path")?;
            let (c, w) = measure(path, pt.size, cfg)
                .with_context(|| format!("{} at {} B", pt.path, pt.size))?;
            pt.cpu.push(c);
            pt.wall.push(w);
            tick(&format!("cost {} {} B", pt.path, pt.size));
        }
    }
    Ok(points)
}

/// Fit one path's CPU cost per send.
pub(crate) fn fit(points: &[Point], path: &str, tpdu: usize) -> Option<Costs> {
    let pts: Vec<&Point> = points.iter().filter(|p| p.path == path).collect();
    let xs: Vec<Vec<f64>> = pts
        .iter()
        .map(|p| vec![1.0, p.size.div_ceil(tpdu) as f64, p.size as f64])
        .collect();
    let ys: Vec<f64> = pts.iter().map(|p| p.cpu_s()).collect();
    // Relative error: small and large messages count alike.
    let ws: Vec<f64> = ys.iter().map(|y| 1.0 / (y * y)).collect();
    // Costs are non-negative; a free fit of noisy timings can trade one against another.
    let b = non_negative_least_squares(&xs, &ys, &ws)?;
    Some(Costs {
        per_message: b[0],
        per_tpdu: b[1],
        per_byte: b[2],
    })
}

/// The results as a table.
fn table(r: &results::Cost) -> String {
    let mut sizes: Vec<usize> = Vec::new();
    for p in &r.results {
        if !sizes.contains(&p.size) {
            sizes.push(p.size);
        }
    }
    let mut header = vec!["size".to_string()];
    for p in PATHS {
        header.push(format!("{} µs", p.name));
        header.push("wall µs".into());
    }
    let mut t = table::new(header, 0);
    for &size in &sizes {
        let mut row = vec![size.to_string()];
        for p in PATHS {
            if let Some(pt) = r
                .results
                .iter()
                .find(|x| x.path == p.name && x.size == size)
            {
                row.push(format!("{:.2}", pt.cpu_us));
                row.push(format!("{:.2}", pt.wall_us));
            }
        }
        t.add_row(row);
    }
    let mut fits = table::new(["path", "per-message µs", "per-TPDU µs", "per-byte ns"], 1);
    for p in PATHS {
        match r.fits.iter().find(|f| f.path == p.name) {
            Some(c) => fits.add_row(vec![
                p.name.to_string(),
                format!("{:.2}", c.per_message_us),
                format!("{:.2}", c.per_tpdu_us),
                format!("{:.4}", c.per_byte_ns),
            ]),
            None => fits.add_row(vec![p.name.to_string(), "(too few sizes to fit)".into()]),
        };
    }
    format!(
        "send-path cost per message (sending thread's CPU clock), best effort, {} B TPDUs; \
         {} run(s) of {} s; medians\n{}\
         fit cost = per-message + per-TPDU·⌈size/TPDU⌉ + per-byte·size (seed 000: 95 µs, 35 µs, \
         on a 66 MHz 486):\n{}",
        r.tpdu,
        r.runs,
        r.time_s,
        table::render(&t),
        table::render(&fits)
    )
}

/// The results as their document.
fn result(cfg: &CostConfig, points: &[Point]) -> results::Cost {
    results::Cost {
        clock: "CLOCK_THREAD_CPUTIME_ID of the sending thread".into(),
        experiment: "cost".into(),
        fits: PATHS
            .iter()
            .filter_map(|p| {
                let c = fit(points, p.name, cfg.tpdu)?;
                Some(results::CostFit {
                    path: p.name.into(),
                    per_byte_ns: c.per_byte * 1e9,
                    per_message_us: c.per_message * 1e6,
                    per_tpdu_us: c.per_tpdu * 1e6,
                })
            })
            .collect(),
        machine: results::Machine::now(),
        results: points
            .iter()
            .map(|p| results::CostRow {
                cpu_us: p.cpu_s() * 1e6,
                path: p.path.to_string(),
                per_run_cpu_us: p.cpu.iter().map(|c| c * 1e6).collect(),
                size: p.size,
                tpdus: p.size.div_ceil(cfg.tpdu),
                wall_us: p.wall_s() * 1e6,
            })
            .collect(),
        runs: cfg.runs,
        time_s: cfg.time.as_secs_f64(),
        tpdu: cfg.tpdu,
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// One term of the fitted cost as a function of size, seconds.
type Component = Box<dyn Fn(usize) -> f64>;

/// Cost against size per path, measured and fitted, with the fit's three components
/// for the inline path (seed 000 Fig. 10).
fn figure(path: &Path, cfg: &CostConfig, points: &[Point]) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    let max = cfg.sizes.iter().copied().max().unwrap_or(1);
    let grid: Vec<usize> = (1..=200).map(|k| max * k / 200).collect();
    for (i, p) in PATHS.iter().enumerate() {
        lines.push(Line {
            label: format!("{} (CPU per send)", p.name),
            points: points
                .iter()
                .filter(|x| x.path == p.name)
                .map(|x| (x.size as f64, x.cpu_s() * 1e6))
                .collect(),
            colour: i,
            mark: Mark::Measured,
        });
        if let Some(c) = fit(points, p.name, cfg.tpdu) {
            lines.push(Line {
                label: String::new(),
                points: grid
                    .iter()
                    .map(|&s| (s as f64, c.at(s, cfg.tpdu) * 1e6))
                    .collect(),
                colour: i,
                mark: Mark::Fit,
            });
        }
    }
    if let Some(c) = fit(points, PATHS[0].name, cfg.tpdu) {
        let tpdu = cfg.tpdu;
        let parts: [(&str, Component); 3] = [
            ("per-message", Box::new(move |_| c.per_message)),
            (
                "per-TPDU",
                Box::new(move |s: usize| c.per_tpdu * s.div_ceil(tpdu) as f64),
            ),
            ("per-byte", Box::new(move |s: usize| c.per_byte * s as f64)),
        ];
        for (k, (name, f)) in parts.iter().enumerate() {
            lines.push(Line {
                label: format!("{} fit: {name}", PATHS[0].name),
                points: grid.iter().map(|&s| (s as f64, f(s) * 1e6)).collect(),
                colour: 3 + k,
                mark: Mark::Curve,
            });
        }
    }
    plot::both(path, |p| {
        plot::xy(
            p,
            "send-path CPU cost per message (seed 000 Figs. 9-10)",
            Axis {
                label: "message size (bytes)",
                log: false,
                from_zero: true,
            },
            Axis {
                label: "CPU time per send (µs)",
                log: false,
                from_zero: true,
            },
            plot::Legend::UpperLeft,
            &lines,
        )
    })
}

/// `natm-lab perf cost`.
#[derive(Debug, clap::Args)]
pub(crate) struct CostArgs {
    /// Message sizes, comma-separated; sizes just under and over multiples of the TPDU
    /// size let the fit tell per-TPDU from per-byte cost.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = natm_cli::cli::units::bytes,
        default_value = "64,1000,2000,4000,4200,6000,8100,8300,12300,16000,16500,24600,32768,33000,49200,65536"
    )]
    sizes: Vec<u64>,
    #[command(flatten)]
    out: super::Output,
}

impl Experiment for CostArgs {
    type Result = results::Cost;
    /// The figure draws the fit over a fine grid of sizes from every run's points.
    type Figure = (CostConfig, Vec<Point>);

    fn output(&self) -> &OutputArgs {
        &self.out.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)> {
        let o = &self.out;
        if o.runs == 0 || o.time.is_zero() {
            anyhow::bail!("--runs and --time must be positive");
        }
        let cfg = CostConfig {
            sizes: self
                .sizes
                .iter()
                .map(|&s| super::check_size(s))
                .collect::<Result<_, _>>()?,
            tpdu: 4096,
            time: o.time,
            warmup: o.warmup,
            runs: o.runs,
        };
        pb.set_length((cfg.runs * cfg.sizes.len() * PATHS.len()) as u64);
        let points = run(&cfg, |m| {
            pb.set_message(m.to_string());
            pb.inc(1);
        })?;
        Ok((result(&cfg, &points), (cfg, points)))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(_: &Self::Result, (cfg, points): &Self::Figure, path: &Path) -> anyhow::Result<()> {
        figure(path, cfg, points)
    }
}
