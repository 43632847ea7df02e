//! Receive livelock (seed 000 §6.2.2, Figures 7 and 8): a best-effort VC between two
//! hosts on loopback whose receiving application is the bottleneck — it "processes"
//! each message for a fixed CPU time (a busy loop), so its capacity C is known. The
//! sender offers multiples of C, pacing itself; the receiver counts what it is
//! delivered over a bounded interval after a warm-up. Each offered load is run with the
//! receiving host's watermarks on (the default engine) and off, interleaved.
//!
//! With watermarks the engine stops reading the VC's socket when undelivered data
//! passes the high watermark and the kernel drops the excess before any work is spent
//! on it; without, every datagram is read and reassembled and the excess is dropped
//! afterwards, which is the work the paper's Figure 7 shows being wasted.

use anyhow::Context as _;
use natm::ulib::Wait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::experiment::{Experiment, OutputArgs};
use super::results;
use natm_cli::cli::table;

use natm::ulib::{
    current_cpus, pin_current_thread, ConnStats, Connection, Error, Host, HostConfig, Watermarks,
};

/// Longest wait for the connection to come up.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive poll: how often an idle receiver looks at the clock.
const POLL: Duration = Duration::from_millis(20);
/// Longest a paced sender sleeps at once (it sends every message that fell due).
const PACE_TICK: Duration = Duration::from_millis(1);

/// One livelock experiment.
#[derive(Debug, Clone)]
pub(crate) struct LivelockConfig {
    /// QoS of the VC (best effort, several TPDUs per message).
    pub(crate) qos: String,
    /// Message size, bytes.
    pub(crate) size: usize,
    /// CPU time the receiving application spends on each message.
    pub(crate) work: Duration,
    /// Deliveries during this time after the sender starts are not counted.
    pub(crate) warmup: Duration,
    /// Length of the measured interval.
    pub(crate) time: Duration,
    /// Watermarks of the "on" case (the default engine's unless overridden).
    pub(crate) watermarks: Option<Watermarks>,
    /// Give the receiving host only this many CPUs: its driver and its application
    /// thread are pinned to the first `n` CPUs this process may use, the sending host's
    /// threads to the others. `None`: the kernel places every thread.
    pub(crate) cpus: Option<usize>,
}

/// Which CPUs each side runs on when the receiving host is given fewer than all.
#[derive(Debug, Clone, Default)]
struct Placement {
    rx: Option<Vec<usize>>,
    tx: Option<Vec<usize>>,
}

impl Placement {
    fn new(cpus: Option<usize>) -> anyhow::Result<Placement> {
        let Some(n) = cpus.filter(|&n| n > 0) else {
            return Ok(Placement::default());
        };
        let all = current_cpus().context("sched_getaffinity")?;
        if n == 0 || n >= all.len() {
            return Err(anyhow::anyhow!(
                "--cpus {n}: give the receiver between 1 and {} of this process's {} CPUs, \
                 so that the sender has the rest (or 0: let the kernel place every thread)",
                all.len().saturating_sub(1),
                all.len()
            ));
        }
        Ok(Placement {
            rx: Some(all[..n].to_vec()),
            tx: Some(all[n..].to_vec()),
        })
    }
}

/// Pin the calling thread to `cpus` (if given) until the guard drops.
struct Pinned(Option<Vec<usize>>);

impl Pinned {
    fn to(cpus: &Option<Vec<usize>>) -> anyhow::Result<Pinned> {
        let Some(cpus) = cpus else {
            return Ok(Pinned(None));
        };
        let before = current_cpus().context("sched_getaffinity")?;
        pin_current_thread(cpus).with_context(|| format!("sched_setaffinity {cpus:?}"))?;
        Ok(Pinned(Some(before)))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = pin_current_thread(before);
        }
    }
}

impl LivelockConfig {
    /// The receiving application's nominal capacity C, payload bit/s: one message per
    /// `work` (what it could take if receiving cost nothing).
    pub(crate) fn capacity_bps(&self) -> f64 {
        self.size as f64 * 8.0 / self.work.as_secs_f64()
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// Offered load asked for, bit/s.
    pub(crate) offered_bps: f64,
    /// Rate the sender's stack accepted over the measured interval, bit/s.
    pub(crate) sent_bps: f64,
    /// Rate delivered to the receiving application over the measured interval, bit/s.
    pub(crate) delivered_bps: f64,
    /// Receiver counters over the measured interval (differences of `stats()`).
    pub(crate) tpdus_received: u64,
    pub(crate) drop_rcv_buf: u64,
    pub(crate) partial_messages_dropped: u64,
    pub(crate) gaps: u64,
    pub(crate) watermark_holds: u64,
    /// Datagrams the kernel dropped at the receiving socket (`/proc/net/udp`), over
    /// the measured interval; `None` where that is not readable.
    pub(crate) kernel_drops: Option<u64>,
    /// Share of the receiving host's CPUs its threads (driver and application) ran
    /// over the measured interval, 0–1; `None` where the host is not pinned or
    /// `/proc/self/task` is not readable.
    pub(crate) rx_cpu: Option<f64>,
}

/// Spend `d` of this thread's CPU time (the application's processing of one message).
/// CPU time, not wall-clock time: whatever else runs on the receiving CPU meanwhile —
/// the engine reading and reassembling what will be dropped, as seed 000 §6.2.2's
/// interrupt handler did — delays the message's processing, which is what livelock is.
/// A wall-clock burn would finish on time however much of it was stolen.
fn burn(d: Duration) {
    let t = super::cost::thread_cpu();
    while super::cost::thread_cpu().saturating_sub(t) < d {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// Drops the kernel counted on the IPv4 UDP socket bound to 127.0.0.1:`port`.
fn kernel_drops(port: u16) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/udp").ok()?;
    let local = format!("0100007F:{port:04X}");
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&local.as_str()))
            .then(|| f.last()?.parse().ok())
            .flatten()
    })
}

/// CPU time, ns, that this process's threads allowed on exactly `cpus` (the
/// receiving host's driver and application thread) have run, from
/// `/proc/self/task/*/schedstat`. On a machine other processes load, the receiving
/// host gets only part of its CPU, and a different part in each run: delivered per
/// CPU-second it got is the shape Figure 8 is about, however busy the machine.
fn cpu_time_on(cpus: &[usize]) -> Option<u64> {
    use rustix::thread::CpuSet;
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Some(pid) = rustix::process::Pid::from_raw(tid) else {
            continue;
        };
        // A thread that ended since the directory was read is simply not counted.
        let Ok(set) = rustix::thread::sched_getaffinity(Some(pid)) else {
            continue;
        };
        if !(0..CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .eq(cpus.iter().copied())
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

fn err(e: Error) -> anyhow::Error {
    anyhow::Error::new(e)
}

/// Two hosts, the receiver's with or without watermarks; (sender, receiver).
fn connect(
    cfg: &LivelockConfig,
    watermarks: bool,
    place: &Placement,
) -> anyhow::Result<(Connection, Connection)> {
    let mut rx_cfg = HostConfig::default();
    rx_cfg.engine.watermarks = if watermarks { cfg.watermarks } else { None };
    rx_cfg.engine.driver_cpus = place.rx.clone();
    let mut tx_cfg = HostConfig::default();
    tx_cfg.engine.driver_cpus = place.tx.clone();
    let tx_host = Host::open(tx_cfg).map_err(err)?;
    let rx_host = Host::open(rx_cfg).map_err(err)?;
    let l = rx_host.bind("127.0.0.1:0", &cfg.qos).map_err(err)?;
    let addr = l.local_addr().map_err(err)?;
    let qos = cfg.qos.clone();
    let t = thread::spawn(move || tx_host.connect(addr, &qos));
    let server = l.accept(Wait::For(ACCEPT_TIMEOUT)).map_err(err)?;
    let client = t
        .join()
        .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
        .map_err(err)?;
    Ok((client, server))
}

/// The default engine's watermarks (the experiment's "on" case unless overridden).
pub(crate) fn default_watermarks() -> Option<Watermarks> {
    HostConfig::default().engine.watermarks
}

/// One run at `load` × C, watermarks on or off at the receiver. Bounded by
/// `warmup + time` plus the connection setup.
pub(crate) fn run(cfg: &LivelockConfig, load: f64, watermarks: bool) -> anyhow::Result<Sample> {
    let place = Placement::new(cfg.cpus)?;
    let (client, server) = connect(cfg, watermarks, &place)?;
    let place = &place;
    let offered_bps = load * cfg.capacity_bps();
    let interval = Duration::from_secs_f64(cfg.size as f64 * 8.0 / offered_bps);
    let start = Instant::now();
    let from = start + cfg.warmup;
    let until = from + cfg.time;
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    let port = server.local_addr().map_err(err)?.port();

    thread::scope(|s| {
        let sender = s.spawn(move || -> anyhow::Result<u64> {
            let _pin = Pinned::to(&place.tx)?;
            let msg = vec![0x5a_u8; cfg.size];
            let (mut n, mut in_window) = (0u32, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                let due = start + interval * n;
                if now < due {
                    thread::sleep((due - now).min(PACE_TICK));
                    continue;
                }
                match client.send(&msg, Wait::Block) {
                    Ok(()) => {}
                    Err(Error::WouldBlock(_)) => continue,
                    Err(e) => return Err(anyhow::anyhow!("send: {e}")),
                }
                n += 1;
                if now >= from {
                    in_window += msg.len() as u64;
                }
            }
            Ok(in_window)
        });

        let measured = Pinned::to(&place.rx)
            .and_then(|_pin| receive(&server, cfg, from, until, port, place.rx.as_deref()));
        stop.store(true, Ordering::Relaxed);
        let sent = sender
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("sender thread panicked")));
        let (bytes, before, after, kd, rx_cpu) = measured?;
        let secs = cfg.time.as_secs_f64();
        Ok(Sample {
            offered_bps,
            sent_bps: sent? as f64 * 8.0 / secs,
            delivered_bps: bytes as f64 * 8.0 / secs,
            tpdus_received: after.rx.tpdus_received - before.rx.tpdus_received,
            drop_rcv_buf: after.rx.drop_rcv_buf - before.rx.drop_rcv_buf,
            partial_messages_dropped: after.rx.partial_messages_dropped
                - before.rx.partial_messages_dropped,
            gaps: after.rx.gaps - before.rx.gaps,
            watermark_holds: after.watermark_holds - before.watermark_holds,
            kernel_drops: kd,
            rx_cpu,
        })
    })
}

type Received = (u64, ConnStats, ConnStats, Option<u64>, Option<f64>);

/// The receiving application: take messages, burn `work` on each, count the bytes
/// delivered in [from, until); the counters at both ends of that interval, and the
/// share of `rx_cpus` (if pinned) the receiving host's threads ran meanwhile.
fn receive(
    server: &Connection,
    cfg: &LivelockConfig,
    from: Instant,
    until: Instant,
    port: u16,
    rx_cpus: Option<&[usize]>,
) -> anyhow::Result<Received> {
    let mut bytes = 0u64;
    let mut before: Option<(ConnStats, Option<u64>, Option<u64>, Instant)> = None;
    loop {
        let now = Instant::now();
        if before.is_none() && now >= from {
            let cpu = rx_cpus.and_then(cpu_time_on);
            before = Some((server.stats(), kernel_drops(port), cpu, Instant::now()));
        }
        if now >= until {
            break;
        }
        match server.recv(Wait::For(POLL)) {
            Ok(Some(m)) => {
                if Instant::now() >= from {
                    bytes += m.len() as u64;
                }
                burn(cfg.work);
            }
            Ok(None) => return Err(anyhow::anyhow!("the sender closed early")),
            Err(Error::TimedOut) => {}
            Err(e) => return Err(anyhow::anyhow!("recv: {e}")),
        }
    }
    let after = server.stats();
    let kd_after = kernel_drops(port);
    let cpu_after = rx_cpus.and_then(cpu_time_on);
    let end = Instant::now();
    let (before, kd_before, cpu_before, start) =
        before.unwrap_or_else(|| (after.clone(), kd_after, cpu_after, end));
    let kd = kd_after.zip(kd_before).map(|(a, b)| a.saturating_sub(b));
    let wall = (end - start).as_nanos() as f64 * rx_cpus.map_or(1, <[usize]>::len) as f64;
    let rx_cpu = cpu_after
        .zip(cpu_before)
        .filter(|_| wall > 0.0)
        .map(|(a, b)| a.saturating_sub(b) as f64 / wall);
    Ok((bytes, before, after, kd, rx_cpu))
}

/// Per-load, per-setting medians of the runs.
pub(crate) struct Row {
    pub(crate) load: f64,
    pub(crate) watermarks: bool,
    pub(crate) runs: Vec<Sample>,
}

impl Row {
    pub(crate) fn med(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(f).collect();
        super::stats::median(&v).unwrap_or(f64::NAN)
    }

    /// Median of `f` over the runs where it is known; `None` if in none.
    fn med_known(&self, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.runs.iter().filter_map(f).collect();
        super::stats::median(&v)
    }

    /// The row as its document; `peak` is the highest delivered rate of its setting.
    fn result(&self, peak: f64) -> results::LivelockRow {
        let delivered = self.med(|s| s.delivered_bps);
        results::LivelockRow {
            delivered_bps: delivered,
            delivered_per_cpu_bps: self
                .med_known(|s| s.rx_cpu.filter(|&c| c > 0.0).map(|c| s.delivered_bps / c)),
            drop_rcv_buf: self.med(|s| s.drop_rcv_buf as f64),
            gaps: self.med(|s| s.gaps as f64),
            kernel_drops: self
                .runs
                .iter()
                .all(|s| s.kernel_drops.is_some())
                .then(|| self.med(|s| s.kernel_drops.unwrap_or(0) as f64)),
            load: self.load,
            of_peak: delivered / peak,
            offered_bps: self.med(|s| s.offered_bps),
            partial_messages_dropped: self.med(|s| s.partial_messages_dropped as f64),
            per_run: self
                .runs
                .iter()
                .map(|s| results::LivelockRun {
                    delivered_bps: s.delivered_bps,
                    drop_rcv_buf: s.drop_rcv_buf,
                    gaps: s.gaps,
                    kernel_drops: s.kernel_drops,
                    offered_bps: s.offered_bps,
                    partial_messages_dropped: s.partial_messages_dropped,
                    sent_bps: s.sent_bps,
                    tpdus_received: s.tpdus_received,
                    watermark_holds: s.watermark_holds,
                    rx_cpu: s.rx_cpu,
                })
                .collect(),
            rx_cpu: self.med_known(|s| s.rx_cpu),
            samples: self.runs.len(),
            sent_bps: self.med(|s| s.sent_bps),
            tpdus_received: self.med(|s| s.tpdus_received as f64),
            watermark_holds: self.med(|s| s.watermark_holds as f64),
            watermarks: self.watermarks,
        }
    }
}

/// Peak delivered rate (median over runs) among `rows` with `watermarks`.
fn peak(rows: &[Row], watermarks: bool) -> f64 {
    rows.iter()
        .filter(|r| r.watermarks == watermarks)
        .map(|r| r.med(|s| s.delivered_bps))
        .fold(0.0, f64::max)
}

/// The results as their document.
fn result(cfg: &LivelockConfig, runs: usize, rows: &[Row]) -> results::Livelock {
    let peaks = [peak(rows, true), peak(rows, false)];
    results::Livelock {
        capacity_bps: cfg.capacity_bps(),
        experiment: "livelock".into(),
        machine: results::Machine::now(),
        peak_bps: results::Peaks {
            no_watermarks: peaks[1],
            watermarks: peaks[0],
        },
        qos: cfg.qos.clone(),
        receiver_cpus: cfg.cpus,
        results: rows
            .iter()
            .map(|r| r.result(peaks[usize::from(!r.watermarks)]))
            .collect(),
        runs,
        size: cfg.size,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
        watermarks_on: cfg.watermarks.map(|w| results::WatermarksOn {
            high: w.high,
            low: w.low,
        }),
        work_us: cfg.work.as_secs_f64() * 1e6,
    }
}

/// The results as a table: one line per offered load, both settings side by side.
fn table(r: &results::Livelock) -> String {
    use super::report::human_size;
    let head = format!(
        "Receive livelock: {} messages of {}, receiver busy {:.0} µs per message \
         (C = {:.1} Mbit/s), {} s measured after {} s, median of {} run(s); \
         watermarks on = {}; receiving host on {}",
        r.qos,
        human_size(r.size),
        r.work_us,
        r.capacity_bps / 1e6,
        r.time_s,
        r.warmup_s,
        r.runs,
        r.watermarks_on.as_ref().map_or("none".into(), |w| format!(
            "high {} low {}",
            human_size(w.high),
            human_size(w.low)
        )),
        r.receiver_cpus.map_or("any CPU".into(), |n| format!(
            "{n} CPU(s), the sender on the others"
        )),
    );
    // One table per setting: side by side they would not fit in 100 columns.
    let setting = |on: bool| {
        let peak = if on {
            r.peak_bps.watermarks
        } else {
            r.peak_bps.no_watermarks
        };
        let dropped = if on { "holds" } else { "rcv_buf" };
        // Delivered per CPU-second the receiving host ran: its highest over loads.
        let cpu_peak = r
            .results
            .iter()
            .filter(|x| x.watermarks == on)
            .filter_map(|x| x.delivered_per_cpu_bps)
            .fold(0.0, f64::max);
        let mut t = table::new(
            [
                "load ×C",
                "offered",
                "sent",
                "delivered",
                "%peak",
                "rx CPU",
                "per CPU-s",
                "%peak",
                dropped,
                "partial",
                "kern.drop",
            ],
            0,
        );
        for x in r.results.iter().filter(|x| x.watermarks == on) {
            let mbps = |v: f64| format!("{:.1}", v / 1e6);
            t.add_row(vec![
                format!("{}×", x.load),
                mbps(x.offered_bps),
                mbps(x.sent_bps),
                mbps(x.delivered_bps),
                format!("{:.0}%", 100.0 * x.delivered_bps / peak),
                x.rx_cpu
                    .map_or("-".into(), |c| format!("{:.0}%", 100.0 * c)),
                x.delivered_per_cpu_bps.map_or("-".into(), mbps),
                x.delivered_per_cpu_bps
                    .filter(|_| cpu_peak > 0.0)
                    .map_or("-".into(), |v| format!("{:.0}%", 100.0 * v / cpu_peak)),
                format!(
                    "{:.0}",
                    if on {
                        x.watermark_holds
                    } else {
                        x.drop_rcv_buf
                    }
                ),
                format!("{:.0}", x.partial_messages_dropped),
                x.kernel_drops.map_or("-".into(), |v| format!("{v:.0}")),
            ]);
        }
        table::render(&t)
    };
    format!(
        "{head}\nwatermarks ON, Mbit/s:\n{}watermarks OFF, Mbit/s:\n{}\
         rx CPU: share of the receiving host's CPU(s) its driver and application ran; per \
         CPU-s: delivered per second of that CPU, Mbit/s (and its % of peak): the shape \
         whatever share other processes left. \
         holds: watermark holds; partial: messages discarded for a missing TPDU; rcv_buf: \
         TPDUs dropped after reading for want of receive buffer; kern.drop: datagrams the \
         kernel dropped at the receiving socket (never read). Counts are over the measured \
         interval.\n",
        setting(true),
        setting(false)
    )
}

/// Delivered against offered, both settings, with the offered line for reference.
fn figure(path: &std::path::Path, r: &results::Livelock) -> anyhow::Result<()> {
    use crate::plot::{stacked, Panel, Series};
    let line = |wm: bool, label: &str| Series {
        label: label.into(),
        points: r
            .results
            .iter()
            .filter(|x| x.watermarks == wm)
            .map(|x| (x.offered_bps / 1e6, x.delivered_bps / 1e6))
            .collect(),
    };
    let max = r
        .results
        .iter()
        .map(|x| x.offered_bps / 1e6)
        .fold(0.0, f64::max);
    let cap = r.capacity_bps / 1e6;
    let panel = Panel {
        y_label: "delivered (Mbit/s)".into(),
        series: vec![
            line(true, "watermarks on"),
            line(false, "watermarks off"),
            Series {
                label: "capacity C".into(),
                points: vec![(0.0, cap), (max, cap)],
            },
        ],
    };
    stacked(
        path,
        &format!(
            "Receive livelock: {}, {} messages, {:.0} µs per message{}",
            r.qos,
            super::report::human_size(r.size),
            r.work_us,
            r.receiver_cpus
                .map_or(String::new(), |n| format!(", receiver on {n} CPU(s)"))
        ),
        "offered (Mbit/s)",
        &[panel],
    )
}

impl Experiment for super::LivelockArgs {
    type Result = results::Livelock;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.out.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        let o = &self.out;
        if o.runs == 0
            || self.loads.is_empty()
            || self.loads.iter().any(|&l| !(l > 0.0 && l.is_finite()))
        {
            anyhow::bail!("--runs must be at least 1 and --loads positive");
        }
        if self.work.is_zero() || o.time.is_zero() {
            anyhow::bail!("--work and --time must be positive");
        }
        let cfg = LivelockConfig {
            qos: self.qos.clone(),
            size: super::check_size(self.size)?,
            work: self.work,
            warmup: o.warmup,
            time: o.time,
            watermarks: match (self.high, self.low) {
                (Some(high), Some(low)) if low <= high => Some(Watermarks {
                    high: high as usize,
                    low: low as usize,
                }),
                (Some(_), Some(_)) => anyhow::bail!("--low must not exceed --high"),
                _ => default_watermarks(),
            },
            cpus: match self.cpus {
                Some(0) => None,
                Some(n) => Some(n),
                None => current_cpus().is_ok_and(|c| c.len() >= 2).then_some(1),
            },
        };
        pb.set_length((o.runs * self.loads.len() * 2) as u64);
        let mut rows: Vec<Row> = self
            .loads
            .iter()
            .flat_map(|&load| {
                [true, false].map(|watermarks| Row {
                    load,
                    watermarks,
                    runs: Vec::new(),
                })
            })
            .collect();
        for run_no in 0..o.runs {
            for row in &mut rows {
                let wm = if row.watermarks { "on" } else { "off" };
                pb.set_message(format!(
                    "livelock {}×C watermarks {wm} run {}/{}",
                    row.load,
                    run_no + 1,
                    o.runs
                ));
                let s = run(&cfg, row.load, row.watermarks)
                    .with_context(|| format!("{}×C, watermarks {wm}", row.load))?;
                row.runs.push(s);
                pb.inc(1);
            }
        }
        Ok((result(&cfg, o.runs, &rows), ()))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(r: &Self::Result, (): &(), path: &std::path::Path) -> anyhow::Result<()> {
        crate::plot::both(path, |p| figure(p, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_the_receiving_cpu_is_counted_in_its_run_time() {
        let all = current_cpus().expect("sched_getaffinity");
        let cpu = vec![all[0]];
        let _pin = Pinned::to(&Some(cpu.clone())).expect("pin to one CPU");
        let before = cpu_time_on(&cpu).expect("/proc/self/task is readable");
        // CPU time, so however busy the machine is, these 20 ms were run on `cpu`. The
        // kernel adds a running thread's time to schedstat at its ticks (every 4–10 ms),
        // so the count may miss the last tick's worth, never the rest.
        burn(Duration::from_millis(20));
        let after = cpu_time_on(&cpu).expect("/proc/self/task is readable");
        let counted = after.saturating_sub(before);
        assert!(
            counted >= 10_000_000,
            "counted {counted} ns of a 20 ms burn on the pinned CPU"
        );
        // A CPU set no thread is pinned to exactly counts nothing.
        assert_eq!(cpu_time_on(&[usize::MAX - 1]), Some(0));
    }
}
