//! Isolation of a guaranteed VC (seed 000 §2, §5.1): on one pair of hosts, a
//! guaranteed VC sending back to back through its leaky bucket is measured alone, then
//! again while a best-effort VC floods (sends with `Wait::No` in a tight loop) and a reliable VC
//! transfers in bulk between the same hosts. What the guaranteed VC is delivered, as a
//! ratio to its reservation, says whether the others take from it.
//!
//! Every message of the guaranteed VC, and of a small-message probe VC of the same
//! class, carries the time it was handed to `send` (nanoseconds since the run started;
//! both hosts are in this process, so one clock): the receiver's delay per message is
//! `now − stamp`. On the guaranteed VC that includes waiting in its own send buffer
//! behind the bucket; on the probe VC, which stays under its rate, it is the transit.

use anyhow::Context as _;
use natm::ulib::Wait;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::experiment::{Experiment, OutputArgs};
use super::results;
use natm_cli::cli::table;

use super::stats::{median, Summary};
use natm::ulib::{Connection, Error, Host, HostConfig};

/// Longest wait for a connection to come up.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive poll.
const POLL: Duration = Duration::from_millis(20);
/// After the senders' deadline, receivers drain at most this long.
const DRAIN: Duration = Duration::from_secs(2);
/// Probe messages: size and period.
const PROBE_SIZE: usize = 64;
const PROBE_PERIOD: Duration = Duration::from_millis(5);

/// The kinds of VC in the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The guaranteed VC measured (blocking `send` in a loop).
    Guaranteed,
    /// Small timestamped messages on a guaranteed VC of its own, well under its rate.
    Probe,
    /// Best effort, sends with `Wait::No` in a tight loop.
    Flood,
    /// Reliable, blocking `send` in a loop.
    Bulk,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Guaranteed => "guaranteed",
            Kind::Probe => "probe",
            Kind::Flood => "best-effort",
            Kind::Bulk => "reliable",
        }
    }
}

/// One isolation experiment.
#[derive(Debug, Clone)]
pub(crate) struct IsolationConfig {
    /// QoS and message size of the guaranteed VC, and its reserved rate (bit/s).
    pub(crate) g_qos: String,
    pub(crate) g_size: usize,
    pub(crate) g_rate: f64,
    /// QoS of the probe VC.
    pub(crate) probe_qos: String,
    /// QoS and message size of the flooding best-effort VC.
    pub(crate) be_qos: String,
    pub(crate) be_size: usize,
    /// QoS and message size of the bulk reliable VC.
    pub(crate) rel_qos: String,
    pub(crate) rel_size: usize,
    pub(crate) warmup: Duration,
    pub(crate) time: Duration,
    /// Width of the bins of the rate-over-time figure.
    pub(crate) bin: Duration,
}

/// What one VC did in one run.
#[derive(Debug, Clone)]
pub(crate) struct VcRun {
    pub(crate) kind: Kind,
    /// Delivered payload bit/s over the measured interval.
    pub(crate) bps: f64,
    /// Bytes the sender's stack accepted over the measured interval, as bit/s.
    pub(crate) sent_bps: f64,
    /// Delivered bytes per bin from the start of the run.
    pub(crate) bins: Vec<u64>,
    /// Per-message delay (ns) over the measured interval, on stamped VCs.
    pub(crate) delays: Option<Summary>,
}

/// One run: alone (guaranteed and probe) or loaded (all four VCs).
#[derive(Debug, Clone)]
pub(crate) struct RunResult {
    pub(crate) loaded: bool,
    pub(crate) vcs: Vec<VcRun>,
}

fn err(e: Error) -> anyhow::Error {
    anyhow::Error::new(e)
}

fn pair(a: &Host, b: &Host, qos: &str) -> anyhow::Result<(Connection, Connection)> {
    let l = b.bind("127.0.0.1:0", qos).map_err(err)?;
    let addr = l.local_addr().map_err(err)?;
    let (a, qos2) = (a.clone(), qos.to_string());
    let t = thread::spawn(move || a.connect(addr, &qos2));
    let server = l.accept(Wait::For(ACCEPT_TIMEOUT)).map_err(err)?;
    let client = t
        .join()
        .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
        .with_context(|| format!("connect {qos}"))?;
    Ok((client, server))
}

/// Run once, alone or loaded. Bounded by `warmup + time` plus [`DRAIN`].
pub(crate) fn run(cfg: &IsolationConfig, loaded: bool) -> anyhow::Result<RunResult> {
    let a = Host::open(HostConfig::default()).map_err(err)?;
    let b = Host::open(HostConfig::default()).map_err(err)?;
    let mut kinds = vec![
        (Kind::Guaranteed, cfg.g_qos.as_str(), cfg.g_size),
        (Kind::Probe, cfg.probe_qos.as_str(), PROBE_SIZE),
    ];
    if loaded {
        kinds.push((Kind::Flood, cfg.be_qos.as_str(), cfg.be_size));
        kinds.push((Kind::Bulk, cfg.rel_qos.as_str(), cfg.rel_size));
    }
    let mut conns = Vec::new();
    for &(k, qos, size) in &kinds {
        let (c, s) = pair(&a, &b, qos)?;
        conns.push((k, size, c, s));
    }
    let start = Instant::now();
    let from = start + cfg.warmup;
    let until = from + cfg.time;
    let senders_left = AtomicUsize::new(conns.len());
    let left = &senders_left;

    thread::scope(|s| {
        let mut handles = Vec::new();
        for (kind, size, client, server) in &conns {
            let (kind, size) = (*kind, *size);
            let tx = s.spawn(move || -> anyhow::Result<u64> {
                let r = send_loop(kind, size, client, start, from, until);
                left.fetch_sub(1, Ordering::SeqCst);
                r
            });
            let rx = s.spawn(move || recv_loop(kind, server, cfg, start, from, until, left));
            handles.push((kind, tx, rx));
        }
        let secs = cfg.time.as_secs_f64();
        let mut vcs = Vec::new();
        for (kind, tx, rx) in handles {
            let sent = tx
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("sender panicked")));
            let got = rx
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("receiver panicked")));
            let (bytes, bins, mut delays) =
                got.with_context(|| format!("{} VC, receiver", kind.name()))?;
            let sent = sent.with_context(|| format!("{} VC, sender", kind.name()))?;
            vcs.push(VcRun {
                kind,
                bps: bytes as f64 * 8.0 / secs,
                sent_bps: sent as f64 * 8.0 / secs,
                bins,
                delays: Summary::of_nanos(&mut delays),
            });
        }
        Ok(RunResult { loaded, vcs })
    })
}

/// Send as the VC's kind does until `until`; the bytes accepted in [from, until).
fn send_loop(
    kind: Kind,
    size: usize,
    c: &Connection,
    start: Instant,
    from: Instant,
    until: Instant,
) -> anyhow::Result<u64> {
    let mut msg = vec![0x3c_u8; size];
    let mut counted = 0u64;
    let mut next_probe = start;
    loop {
        let now = Instant::now();
        if now >= until {
            return Ok(counted);
        }
        if kind == Kind::Probe {
            if now < next_probe {
                thread::sleep(next_probe - now);
                continue;
            }
            next_probe += PROBE_PERIOD;
        }
        if matches!(kind, Kind::Guaranteed | Kind::Probe) {
            let stamp = (Instant::now() - start).as_nanos() as u64;
            msg[..8].copy_from_slice(&stamp.to_le_bytes());
        }
        let r = if kind == Kind::Flood {
            c.send(&msg, Wait::No)
        } else {
            c.send(&msg, Wait::Block)
        };
        match r {
            Ok(()) if now >= from => counted += msg.len() as u64,
            Ok(()) | Err(Error::WouldBlock(_)) => {}
            Err(e) => return Err(anyhow::anyhow!("send: {e}")),
        }
    }
}

type Received = (u64, Vec<u64>, Vec<u64>);

/// Receive until every sender has stopped (at most [`DRAIN`] past `until`): bytes
/// delivered in [from, until), bytes per bin, and per-message delays in the interval.
fn recv_loop(
    kind: Kind,
    c: &Connection,
    cfg: &IsolationConfig,
    start: Instant,
    from: Instant,
    until: Instant,
    senders_left: &AtomicUsize,
) -> anyhow::Result<Received> {
    let n_bins = ((until - start).as_secs_f64() / cfg.bin.as_secs_f64()).ceil() as usize;
    let mut bins = vec![0u64; n_bins.max(1)];
    let mut bytes = 0u64;
    let mut delays = Vec::new();
    let stamped = matches!(kind, Kind::Guaranteed | Kind::Probe);
    loop {
        let now = Instant::now();
        if now >= until + DRAIN || (now >= until && senders_left.load(Ordering::SeqCst) == 0) {
            return Ok((bytes, bins, delays));
        }
        match c.recv(Wait::For(POLL)) {
            Ok(Some(m)) => {
                let now = Instant::now();
                let i = ((now - start).as_secs_f64() / cfg.bin.as_secs_f64()) as usize;
                if let Some(b) = bins.get_mut(i) {
                    *b += m.len() as u64;
                }
                if now >= from && now < until {
                    bytes += m.len() as u64;
                    if stamped && m.len() >= 8 {
                        let mut s = [0u8; 8];
                        s.copy_from_slice(&m[..8]);
                        let sent = u64::from_le_bytes(s);
                        let at = (now - start).as_nanos() as u64;
                        delays.push(at.saturating_sub(sent));
                    }
                }
            }
            Ok(None) => return Ok((bytes, bins, delays)),
            Err(Error::TimedOut) => {}
            Err(e) => return Err(anyhow::anyhow!("recv: {e}")),
        }
    }
}

fn med(runs: &[&VcRun], f: impl Fn(&VcRun) -> f64) -> f64 {
    let v: Vec<f64> = runs.iter().map(|r| f(r)).collect();
    median(&v).unwrap_or(f64::NAN)
}

/// The runs of one VC kind in one phase.
fn of(results: &[RunResult], loaded: bool, kind: Kind) -> Vec<&VcRun> {
    results
        .iter()
        .filter(|r| r.loaded == loaded)
        .flat_map(|r| r.vcs.iter().filter(|v| v.kind == kind))
        .collect()
}

const PHASES: [(bool, &str); 2] = [(false, "alone"), (true, "loaded")];
const KINDS: [Kind; 4] = [Kind::Guaranteed, Kind::Probe, Kind::Flood, Kind::Bulk];

fn qos_of(cfg: &IsolationConfig, k: Kind) -> &str {
    match k {
        Kind::Guaranteed => &cfg.g_qos,
        Kind::Probe => &cfg.probe_qos,
        Kind::Flood => &cfg.be_qos,
        Kind::Bulk => &cfg.rel_qos,
    }
}

fn size_of(cfg: &IsolationConfig, k: Kind) -> usize {
    match k {
        Kind::Guaranteed => cfg.g_size,
        Kind::Probe => PROBE_SIZE,
        Kind::Flood => cfg.be_size,
        Kind::Bulk => cfg.rel_size,
    }
}

/// The results as their document.
fn result(cfg: &IsolationConfig, runs: usize, results: &[RunResult]) -> results::Isolation {
    let mut out = Vec::new();
    for (loaded, phase) in PHASES {
        for k in KINDS {
            let rs = of(results, loaded, k);
            if rs.is_empty() {
                continue;
            }
            let delay = |f: fn(&Summary) -> f64| {
                rs.iter()
                    .all(|r| r.delays.is_some())
                    .then(|| med(&rs, |r| r.delays.as_ref().map_or(f64::NAN, f)))
            };
            let bps = med(&rs, |r| r.bps);
            out.push(results::IsolationRow {
                bps,
                delay_max_us: delay(|d| d.max),
                delay_p50_us: delay(|d| d.p50),
                delay_p99_us: delay(|d| d.p99),
                per_run: rs
                    .iter()
                    .map(|r| results::IsolationRun {
                        bps: r.bps,
                        delay_p50_us: r.delays.as_ref().map(|d| d.p50),
                        delay_p99_us: r.delays.as_ref().map(|d| d.p99),
                        sent_bps: r.sent_bps,
                    })
                    .collect(),
                phase: phase.to_string(),
                qos: qos_of(cfg, k).to_string(),
                ratio_to_reserved: (k == Kind::Guaranteed).then(|| bps / cfg.g_rate),
                samples: rs.len(),
                sent_bps: med(&rs, |r| r.sent_bps),
                size: size_of(cfg, k),
                vc: k.name().to_string(),
            });
        }
    }
    results::Isolation {
        bin_s: cfg.bin.as_secs_f64(),
        experiment: "isolation".into(),
        machine: results::Machine::now(),
        reserved_bps: cfg.g_rate,
        results: out,
        runs,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// The results as a table.
fn table(r: &results::Isolation) -> String {
    use super::report::human_size;
    let vc = |name: &str| {
        r.results
            .iter()
            .find(|x| x.vc == name)
            .map_or(("?".to_string(), "?".to_string()), |x| {
                (x.qos.clone(), human_size(x.size))
            })
    };
    let ((g_qos, g_size), (be_qos, be_size), (rel_qos, rel_size)) = (
        vc(Kind::Guaranteed.name()),
        vc(Kind::Flood.name()),
        vc(Kind::Bulk.name()),
    );
    let mut t = table::new(
        [
            "phase",
            "VC",
            "QoS",
            "sent Mbit/s",
            "deliv Mbit/s",
            "/reserved",
            "delay p50",
            "delay p99",
        ],
        3,
    );
    let delay = |d: Option<f64>| {
        d.filter(|v| v.is_finite())
            .map_or("-".into(), |v| format!("{v:.0} µs"))
    };
    for x in &r.results {
        t.add_row(vec![
            x.phase.clone(),
            x.vc.clone(),
            x.qos.clone(),
            format!("{:.2}", x.sent_bps / 1e6),
            format!("{:.2}", x.bps / 1e6),
            x.ratio_to_reserved
                .map_or("-".into(), |v| format!("{v:.4}")),
            delay(x.delay_p50_us),
            delay(x.delay_p99_us),
        ]);
    }
    format!(
        "Isolation of {g_qos} ({g_size} messages, blocking send): alone, then with {be_qos} \
         flooding ({be_size} try_send) and {rel_qos} in bulk ({rel_size}); {} s measured after \
         {} s, median of {} run(s)\n{}\
         delay: from the call to send to delivery, per message (the guaranteed VC's includes \
         its own send queue behind the bucket; the probe sends {PROBE_SIZE} B every {} ms)\n",
        r.time_s,
        r.warmup_s,
        r.runs,
        table::render(&t),
        PROBE_PERIOD.as_millis()
    )
}

/// Rate over time per VC, from the last run of each phase: the guaranteed VC alone and
/// loaded, then the other VCs.
fn figure(
    path: &std::path::Path,
    cfg: &IsolationConfig,
    results: &[RunResult],
) -> anyhow::Result<()> {
    use crate::plot::{stacked, Panel, Series};
    let bin = cfg.bin.as_secs_f64();
    let series = |loaded: bool, k: Kind, label: String| {
        of(results, loaded, k).last().map(|r| Series {
            label,
            points: r
                .bins
                .iter()
                .enumerate()
                .map(|(i, &b)| ((i as f64 + 0.5) * bin, b as f64 * 8.0 / bin / 1e6))
                .collect(),
        })
    };
    let end = (cfg.warmup + cfg.time).as_secs_f64();
    let g = Panel {
        y_label: "guaranteed (Mbit/s)".into(),
        series: [
            series(false, Kind::Guaranteed, "guaranteed alone".into()),
            series(true, Kind::Guaranteed, "guaranteed, loaded".into()),
            Some(Series {
                label: "reserved".into(),
                points: vec![(0.0, cfg.g_rate / 1e6), (end, cfg.g_rate / 1e6)],
            }),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    let others = Panel {
        y_label: "others (Mbit/s)".into(),
        series: [
            series(true, Kind::Flood, format!("best effort ({})", cfg.be_qos)),
            series(true, Kind::Bulk, format!("reliable ({})", cfg.rel_qos)),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    stacked(
        path,
        &format!("Isolation of {}: delivered rate per VC", cfg.g_qos),
        "time since start (s)",
        &[g, others],
    )
}

impl Experiment for super::IsolationArgs {
    type Result = results::Isolation;
    /// The figure is the rate over time, from every run's bins.
    type Figure = (IsolationConfig, Vec<RunResult>);

    fn output(&self) -> &OutputArgs {
        &self.out.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)> {
        let o = &self.out;
        if o.runs == 0 || o.time.is_zero() || self.bin.is_zero() || self.pcr == 0 {
            anyhow::bail!("--runs, --time, --bin and --pcr must be positive");
        }
        let cfg = IsolationConfig {
            g_qos: if self.pcr.is_multiple_of(1_000_000) {
                format!("cbr:pcr={}Mbps", self.pcr / 1_000_000)
            } else {
                format!("cbr:pcr={}bps", self.pcr)
            },
            g_size: super::check_size(self.size)?.max(8),
            g_rate: self.pcr as f64,
            probe_qos: "cbr:pcr=1Mbps".into(),
            be_qos: self.flood_qos.clone(),
            be_size: super::check_size(self.load_size)?,
            rel_qos: self.bulk_qos.clone(),
            rel_size: super::check_size(self.load_size)?,
            warmup: o.warmup,
            time: o.time,
            bin: self.bin,
        };
        pb.set_length((o.runs * 2) as u64);
        let mut runs = Vec::new();
        for run_no in 0..o.runs {
            for loaded in [false, true] {
                let phase = if loaded { "loaded" } else { "alone" };
                pb.set_message(format!("isolation {phase} run {}/{}", run_no + 1, o.runs));
                runs.push(run(&cfg, loaded).with_context(|| format!("isolation {phase}"))?);
                pb.inc(1);
            }
        }
        Ok((result(&cfg, o.runs, &runs), (cfg, runs)))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(
        _: &Self::Result,
        (cfg, runs): &Self::Figure,
        path: &std::path::Path,
    ) -> anyhow::Result<()> {
        crate::plot::both(path, |p| figure(p, cfg, runs))
    }
}
