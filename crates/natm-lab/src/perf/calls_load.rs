//! `natm-lab perf calls-load`: seed 004 §7's experiment on this machine — call setup
//! time through two sigds against competing CPU load, with sigd (the seed's
//! "manager") at the default priority and raised.
//!
//! seed 004 §7: "the system load was varied by running a number of CPU-bound
//! processes in competition with the manager … each consisted of a shell pipeline
//! which required both user space and kernel processing"; a client "repeatedly set up
//! a connection … and then tore down the connection", "with a random interval between
//! each", the manager at three priorities. Here the pipelines are the seed's own
//! (`echo $PATH | grep | sed`, written to a file), each bounded by `timeout`; the
//! priority is the two sigds' nice value (every thread of each). Departures: the seed
//! exchanged one message per call, these calls only set up and release (as `perf calls`
//! does); the reference is direct mode (the transport handshake alone, no sigd),
//! measured call for call interleaved with the sigd calls under the same load.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use indicatif::ProgressBar;
use natm::ulib::Host;
use natm_cli::cli::table;
use rustix::process::{kill_process_group, setpriority_process, Pid, Signal};

use super::calls::{host, serve, two_sigds};
use super::experiment::{Experiment, OutputArgs};
use super::results::{self, LoadCell, SetupTimes};
use super::stats::percentile;
use crate::plot::{self, Axis, Line, Mark};

/// seed 004 §7's competing pipeline (`$0` is the file it writes).
const PIPELINE: &str = r#"while :; do a=$(echo "$PATH" | grep -v natm-none | sed -e s/bin/foo/g); echo "$a" > "$0"; done"#;

/// `natm-lab perf calls-load`.
#[derive(Debug, Args)]
pub(crate) struct CallsLoadArgs {
    /// Calls per cell (one load, one priority) through the sigds, and as many in
    /// direct mode, interleaved.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Sweeps, every cell once per sweep (the priorities and loads interleaved, so a
    /// drift of the machine reaches them all); cells pool their calls and give the
    /// spread of the sweeps' means.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Competing CPU-bound shell pipelines, one cell per count.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8")]
    load: Vec<usize>,
    /// Nice values of both sigds, one sweep each (negative raises the priority and
    /// needs root or CAP_SYS_NICE; -20 is the highest).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,-10,-20",
        allow_hyphen_values = true,
        value_parser = clap::value_parser!(i32).range(-20..=19)
    )]
    nice: Vec<i32>,
    /// Longest pause before each call, drawn at random from zero to this.
    #[arg(long, default_value = "2ms", value_parser = natm_cli::cli::units::duration)]
    gap: Duration,
    /// QoS of the calls.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// The figure is mean setup time against load, one line per priority.
    #[command(flatten)]
    to: OutputArgs,
}

/// The competing pipelines, each in a process group of its own, bounded by `timeout`
/// and killed (with their children) on drop.
struct Load {
    groups: Vec<Child>,
    dir: PathBuf,
}

impl Load {
    fn start(n: usize, dir: &Path, bound: Duration) -> anyhow::Result<Load> {
        use std::os::unix::process::CommandExt as _;
        let mut load = Load {
            groups: Vec::with_capacity(n),
            dir: dir.to_owned(),
        };
        for i in 0..n {
            let child = Command::new("timeout")
                .arg(bound.as_secs().max(1).to_string())
                .args(["sh", "-c", PIPELINE])
                .arg(load.dir.join(format!("pipeline-{i}")))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .context("cannot start a competing pipeline (timeout, sh, grep, sed)")?;
            load.groups.push(child);
        }
        Ok(load)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.groups {
            if let Some(pid) = Pid::from_raw(c.id() as i32) {
                let _ = kill_process_group(pid, Signal::KILL);
            }
            let _ = c.wait();
        }
        for i in 0..self.groups.len() {
            let _ = std::fs::remove_file(self.dir.join(format!("pipeline-{i}")));
        }
    }
}

/// Set the nice value of every thread of every process in `pids`.
fn renice(pids: &[u32], nice: i32) -> anyhow::Result<()> {
    for pid in pids {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .with_context(|| format!("cannot list the threads of sigd {pid}"))?;
        for t in tasks.flatten() {
            let Some(tid) = t
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
                .and_then(Pid::from_raw)
            else {
                continue;
            };
            setpriority_process(Some(tid), nice).with_context(|| {
                format!(
                    "cannot set sigd's nice value to {nice} (negative needs root or CAP_SYS_NICE)"
                )
            })?;
        }
    }
    Ok(())
}

/// A pause in `0..=max`, from the kernel's random numbers.
fn random_gap(max: Duration) -> Duration {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let ns = u64::from_le_bytes(b) % (max.as_nanos() as u64 + 1);
    Duration::from_nanos(ns)
}

/// One call to `target`: setup time (ns), then close and release.
fn one_call(h: &Host, target: &str, qos: &str) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    let c = h
        .connect(target, qos)
        .with_context(|| format!("call to {target}"))?;
    let ns = t0.elapsed().as_nanos() as u64;
    c.close();
    drop(c);
    Ok(ns)
}

fn mean_us(v: &[u64]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len().max(1) as f64 / 1e3
}

/// The times of every sweep's calls pooled, and each sweep's mean.
fn times(runs: &[Vec<u64>]) -> SetupTimes {
    let mut v: Vec<u64> = runs.concat();
    v.sort_unstable();
    let us = |ns: u64| ns as f64 / 1e3;
    SetupTimes {
        mean_us: mean_us(&v),
        median_us: us(percentile(&v, 0.5).unwrap_or(0)),
        p99_us: us(percentile(&v, 0.99).unwrap_or(0)),
        max_us: us(v.last().copied().unwrap_or(0)),
        run_means_us: runs.iter().map(|r| mean_us(r)).collect(),
    }
}

/// The machine's CPU time since boot from `/proc/stat` (clock ticks): (busy, total),
/// busy being all but idle and I/O wait.
fn cpu_ticks() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// One cell's calls in one sweep: (through the sigds, direct), setup times in ns.
type CellCalls = (Vec<u64>, Vec<u64>);

fn measure(a: &CallsLoadArgs, pb: &ProgressBar) -> anyhow::Result<results::CallsLoad> {
    if a.calls == 0 || a.runs == 0 || a.load.is_empty() || a.nice.is_empty() {
        anyhow::bail!("--calls and --runs must be at least 1, --load and --nice not empty");
    }
    let (d, sa, sb) = two_sigds("calls-load")?;
    let (ha, hb) = (host(&sa)?, host(&sb)?);
    let stop = Arc::new(AtomicBool::new(false));
    let via_sigd = hb.bind("perf", &a.qos)?;
    let direct = hb.bind("127.0.0.1:0", &a.qos)?;
    let targets = ["+4420002:perf".to_owned(), direct.local_addr()?.to_string()];
    let servers = [
        serve(via_sigd, stop.clone(), 2),
        serve(direct, stop.clone(), 2),
    ];
    // Warm up both paths (the signalling link comes up on the first call).
    for t in &targets {
        for _ in 0..20 {
            one_call(&ha, t, &a.qos)?;
        }
    }
    let pids = d.pids();
    let dir = d.dir().to_owned();
    // Every pipeline ends by itself after this, should this process be killed.
    let per_cell = Duration::from_millis(50) * a.calls as u32 + Duration::from_secs(60);
    let grid: Vec<(i32, usize)> = a
        .nice
        .iter()
        .flat_map(|&nice| a.load.iter().map(move |&n| (nice, n)))
        .collect();
    pb.set_length((grid.len() * a.runs) as u64);
    // Per cell of the grid, per sweep.
    let mut measured: Vec<Vec<CellCalls>> = vec![Vec::new(); grid.len()];
    // Busy and total CPU ticks of the machine during each cell, summed over sweeps.
    let mut ticks = vec![(0u64, 0u64); grid.len()];
    for _ in 0..a.runs {
        for (i, &(nice, n)) in grid.iter().enumerate() {
            renice(&pids, nice)?;
            let load = Load::start(n, &dir, per_cell)?;
            // Let the pipelines get going before the first call.
            thread::sleep(Duration::from_millis(200));
            let (mut via, mut direct) = (Vec::new(), Vec::new());
            let (b0, t0) = cpu_ticks();
            for _ in 0..a.calls {
                thread::sleep(random_gap(a.gap));
                via.push(one_call(&ha, &targets[0], &a.qos)?);
                thread::sleep(random_gap(a.gap));
                direct.push(one_call(&ha, &targets[1], &a.qos)?);
            }
            let (b1, t1) = cpu_ticks();
            ticks[i].0 += b1.saturating_sub(b0);
            ticks[i].1 += t1.saturating_sub(t0);
            drop(load);
            measured[i].push((via, direct));
            pb.inc(1);
        }
    }
    renice(&pids, 0).ok();
    let cells = grid
        .iter()
        .zip(measured)
        .zip(ticks)
        .map(|((&(nice, n), runs), (busy, total))| {
            let (via, direct): (Vec<_>, Vec<_>) = runs.into_iter().unzip();
            LoadCell {
                cpu_busy: busy as f64 / total.max(1) as f64,
                direct: times(&direct),
                pipelines: n,
                sigd: times(&via),
                sigd_nice: nice,
            }
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    for s in servers {
        let _ = s.join();
    }
    drop(d);
    Ok(results::CallsLoad {
        calls_per_cell: a.calls,
        runs: a.runs,
        cells,
        experiment: "calls-load".into(),
        max_gap_us: a.gap.as_micros() as u64,
        machine: results::Machine::now(),
        pipeline: PIPELINE.into(),
        qos: a.qos.clone(),
    })
}

impl Experiment for CallsLoadArgs {
    type Result = results::CallsLoad;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        pb.set_message("calls under load");
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &Self::Result) -> String {
        let us = |x: f64| format!("{x:.0} µs");
        let spread = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{lo:.0}–{hi:.0}")
            }
        };
        let mut t = table::new(
            [
                "sigd nice",
                "pipelines",
                "CPUs busy",
                "mean setup",
                "sweeps' means",
                "median",
                "p99",
                "direct mean",
                "direct median",
                "mean / direct",
            ],
            2,
        );
        for c in &r.cells {
            t.add_row(vec![
                c.sigd_nice.to_string(),
                c.pipelines.to_string(),
                format!("{:.0} %", c.cpu_busy * 100.0),
                us(c.sigd.mean_us),
                spread(&c.sigd.run_means_us),
                us(c.sigd.median_us),
                us(c.sigd.p99_us),
                us(c.direct.mean_us),
                us(c.direct.median_us),
                if c.direct.mean_us > 0.0 {
                    format!("{:.2}", c.sigd.mean_us / c.direct.mean_us)
                } else {
                    "-".into()
                },
            ]);
        }
        format!(
            "call setup through two sigds against competing CPU-bound pipelines (seed 004 §7), \
             {} calls per cell in each of {} sweeps and as many in direct mode, interleaved, a \
             random pause of up to {} µs before each, qos {}; CPUs busy: the share of all \
             CPUs' time not idle during the cell's calls\n{}",
            r.calls_per_cell,
            r.runs,
            r.max_gap_us,
            r.qos,
            table::render(&t)
        )
    }

    fn figure(r: &Self::Result, (): &(), path: &Path) -> anyhow::Result<()> {
        let mut nices: Vec<i32> = r.cells.iter().map(|c| c.sigd_nice).collect();
        nices.dedup();
        let mut lines: Vec<Line> = nices
            .iter()
            .enumerate()
            .map(|(i, &n)| Line {
                label: format!("through two sigds, nice {n}"),
                points: r
                    .cells
                    .iter()
                    .filter(|c| c.sigd_nice == n)
                    .map(|c| (c.pipelines as f64, c.sigd.mean_us))
                    .collect(),
                colour: i,
                mark: Mark::Measured,
            })
            .collect();
        lines.push(Line {
            label: "direct mode, no sigd (reference)".into(),
            points: r
                .cells
                .iter()
                .filter(|c| Some(&c.sigd_nice) == nices.first())
                .map(|c| (c.pipelines as f64, c.direct.mean_us))
                .collect(),
            colour: nices.len(),
            mark: Mark::Measured,
        });
        plot::both(path, |p| {
            plot::xy(
                p,
                "mean call setup time against system load (seed 004 §7)",
                Axis {
                    label: "competing CPU-bound pipelines",
                    log: false,
                    from_zero: true,
                },
                Axis {
                    label: "mean setup (µs)",
                    log: false,
                    from_zero: true,
                },
                plot::Legend::UpperLeft,
                &lines,
            )
        })
    }
}
