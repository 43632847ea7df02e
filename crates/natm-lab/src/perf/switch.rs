//! `natm-lab perf switch`: forwarding speed of one `natm switch` process beside a
//! minimal UDP relay (issue 13's goal: frame mode ≥ 0.8× the relay, cell mode ≥ 10 M
//! cells/s per core). Both are separate processes on loopback, one thread each, left
//! where the kernel puts them, with the same socket batching: an epoll wait, then
//! `recvmmsg` with UDP GRO until the socket is empty, and what was read sent on as UDP
//! GSO runs (natm's `UdpPort` in both). The hosts around them batch the same way (the
//! sender's trains leave as GSO runs, as the host engine sends them), so the ratio is
//! the cost of the switch's data plane. The runs are interleaved (switch, relay, next
//! configuration, ...) and each figure is a median over them with its range.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use natm::adaptor::{RecvBatch, UdpPort};
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::results::Machine;
use super::stats::median;
use natm_cli::cli::table;

/// `natm-lab perf switch`.
#[derive(Debug, clap::Args)]
pub(crate) struct SwitchArgs {
    /// Seconds each measurement runs.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Cells per datagram in cell mode (a train); several sizes, comma-separated, are
    /// measured in turn.
    #[arg(long, value_delimiter = ',', default_values_t = [32usize, 128])]
    train: Vec<usize>,
    /// SDU octets of each frame in frame mode.
    #[arg(long, default_value_t = 1500)]
    frame: usize,
    /// VCs the load is spread over, one PVC each: cells (cell mode) or frames (frame
    /// mode) take the VCs in turn, so the output port's scheduler serves several
    /// backlogged VCs instead of one (1..=1024).
    #[arg(long, default_value_t = 1)]
    vcs: usize,
    /// Interleaved runs of every measurement; the figures are medians over them.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    to: OutputArgs,
}

/// One forwarder in one link mode, one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rate {
    /// Datagrams the receiving host got per second.
    pub(crate) datagrams_per_s: f64,
    /// Cells per second (cells in trains, or AAL5 cells of the frames).
    pub(crate) cells_per_s: f64,
    /// Datagrams the sending host offered per second.
    pub(crate) offered_per_s: f64,
    /// CPU seconds the forwarder process used per second of the run (user + system,
    /// from /proc's schedstat; 1.0 is one core busy).
    pub(crate) cpu_per_s: f64,
    /// Distinct VCIs the receiving host saw (one unit of each datagram looked at).
    #[serde(default)]
    pub(crate) vcis_seen: usize,
}

impl Rate {
    /// Cells forwarded per CPU-second of the forwarder.
    fn cells_per_cpu_s(&self) -> f64 {
        self.cells_per_s / self.cpu_per_s.max(1e-3)
    }
}

/// One forwarder in one configuration, every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    /// `cell` or `frame`.
    pub(crate) mode: String,
    /// Cells per train (cell mode; 0 in frame mode).
    pub(crate) train: usize,
    /// `switch` or `relay`.
    pub(crate) forwarder: String,
    /// One per run, in order.
    pub(crate) runs: Vec<Rate>,
}

impl Row {
    fn median(&self, f: impl Fn(&Rate) -> f64) -> f64 {
        median(&self.runs.iter().map(&f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
    }

    fn range(&self, f: impl Fn(&Rate) -> f64) -> (f64, f64) {
        let v: Vec<f64> = self.runs.iter().map(f).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    }
}

/// What `natm-lab perf switch` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SwitchResult {
    /// Seconds per measurement.
    pub(crate) seconds: f64,
    /// SDU octets per frame.
    pub(crate) frame: usize,
    /// Runs of each measurement.
    pub(crate) runs: usize,
    /// VCs the load was spread over.
    #[serde(default = "one")]
    pub(crate) vcs: usize,
    /// The machine before the first run.
    pub(crate) machine_start: Machine,
    /// The machine after the last run (its load average covers the runs).
    pub(crate) machine: Machine,
    /// Switch and relay of each configuration: cell mode at each train size, then
    /// frame mode.
    pub(crate) rows: Vec<Row>,
}

fn one() -> usize {
    1
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds process `pid` has used: the run time of each of its threads from
/// /proc/PID/task/TID/schedstat (nanoseconds, user and system together), summed.
/// Precise where /proc/PID/stat's utime + stime count whole clock ticks of 10 ms: a
/// forwarder with a few per cent of a shared CPU uses only a few ticks in a run.
/// Falls back to the ticks where schedstat is missing.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let mut ns = 0u64;
    let mut any = false;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let Ok(st) = std::fs::read_to_string(t.path().join("schedstat")) else {
                continue;
            };
            if let Some(v) = st
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
            {
                ns += v;
                any = true;
            }
        }
    }
    if any {
        return Ok(ns as f64 / 1e9);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("odd /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> anyhow::Result<f64> {
        Ok(f.get(i).context("short /proc stat")?.parse::<f64>()? / 100.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Ok(tick(11)? + tick(12)?)
}

/// Lines the child prints, until `want` of them start with `prefix`.
fn read_lines(child: &mut Child, prefix: &str, want: usize) -> anyhow::Result<Vec<String>> {
    let out = child.stdout.take().context("child stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with(&prefix) && tx.send(line).is_err() {
                break;
            }
        }
    });
    (0..want)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .context("the forwarder did not start within 10 s")
        })
        .collect()
}

fn addr_of(line: &str) -> anyhow::Result<SocketAddr> {
    line.rsplit(' ')
        .next()
        .context("no address")?
        .parse()
        .context("bad address")
}

/// The first input VCI of the load (VPI 0); VC `i` of `--vcs` is `FIRST_VCI + i`.
const FIRST_VCI: u16 = 32;

/// Starts a switch with two ports, `a` from `src` and `b` to `dst`, and `vcs` PVCs
/// (a:0.32 → b:1.40, a:0.33 → b:1.41, ...); the address to send to.
fn start_switch(
    mode: &str,
    src: SocketAddr,
    dst: SocketAddr,
    train: usize,
    vcs: usize,
) -> anyhow::Result<(Proc, SocketAddr)> {
    let dir = std::env::temp_dir().join(format!("natm-perf-switch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join(format!("{mode}.toml"));
    // A line far above loopback's rate and deep buffers: the measure is the
    // forwarding loop, not pacing or drops.
    let port = |name: &str, peer: SocketAddr| {
        format!(
            "[[port]]\nname = \"{name}\"\nbind = \"127.0.0.1:0\"\npeer = \"{peer}\"\nmode = \"{mode}\"\nline_rate = 1000000000000\nbuffer = 1000000\ntrain = {train}\n"
        )
    };
    let mut toml = port("a", src) + &port("b", dst);
    for i in 0..vcs {
        let vci = usize::from(FIRST_VCI) + i;
        toml += &format!(
            "[[pvc]]\nfrom = \"a:0.{vci}\"\nto = \"b:1.{}\"\nbuffer = 1000000\nframe_discard = false\n",
            vci + 8
        );
    }
    std::fs::write(&cfg, toml)?;
    let child = Command::new(std::env::current_exe()?)
        .args(["switch", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start natm switch")?;
    let mut child = Proc(child);
    // The switch has read its config once it names its ports (or failed to start).
    let lines = read_lines(&mut child.0, "port a ", 1);
    let _ = std::fs::remove_dir_all(&dir);
    let lines = lines?;
    Ok((child, addr_of(&lines[0])?))
}

/// Starts `natm-lab perf relay` from `src` to `dst`; the address to send to.
fn start_relay(src: SocketAddr, dst: SocketAddr) -> anyhow::Result<(Proc, SocketAddr)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["perf", "relay", "--from"])
        .arg(src.to_string())
        .arg("--to")
        .arg(dst.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start natm-lab perf relay")?;
    let lines = read_lines(&mut child, "relay ", 1)?;
    Ok((Proc(child), addr_of(&lines[0])?))
}

/// What one measurement sends.
struct Load<'a> {
    /// A GSO run of datagrams of `len` octets, sent again and again.
    run: &'a [u8],
    len: usize,
    /// Cells per frame (frame mode).
    cells_per: f64,
    cell_mode: bool,
    secs: f64,
}

/// A loopback socket batched as the hosts' engines are (GSO, GRO), blocking.
fn host_port() -> anyhow::Result<UdpPort> {
    Ok(UdpPort::bind("127.0.0.1:0".parse()?)?)
}

/// Sends `run` through the forwarder at `to` for `secs` as fast as the socket takes
/// it, as GSO runs of datagrams of `len` octets, and counts what reaches `rx`.
fn blast(
    pid: u32,
    tx: &UdpPort,
    rx: UdpPort,
    to: SocketAddr,
    load: &Load<'_>,
) -> anyhow::Result<Rate> {
    let Load {
        run,
        len,
        cells_per,
        cell_mode,
        secs,
    } = *load;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let counter = std::thread::spawn(move || {
        let mut batch = rx.recv_batch(8);
        let (mut datagrams, mut cells) = (0u64, 0f64);
        let mut seen = vec![false; usize::from(u16::MAX) + 1];
        loop {
            match rx.recv(&mut batch) {
                Ok(_) => {
                    for (_, d) in batch.iter() {
                        if let Some(vci) = vci_in(d, cell_mode, datagrams) {
                            seen[usize::from(vci)] = true;
                        }
                        datagrams += 1;
                        cells += if cell_mode {
                            ((d.len() - 1) / 53) as f64
                        } else {
                            cells_per
                        };
                    }
                }
                Err(_) if stop2.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        (datagrams, cells, seen.iter().filter(|&&s| s).count())
    });
    let cpu0 = cpu_seconds(pid)?;
    let start = Instant::now();
    let dur = Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    while start.elapsed() < dur {
        // A full socket buffer sends part of a run, or none: the rest is not counted.
        if let Ok(n) = tx.send(Some(to), run, len) {
            sent += n as u64;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid)? - cpu0;
    stop.store(true, Ordering::Relaxed);
    let (datagrams, cells, vcis_seen) = counter
        .join()
        .map_err(|_| anyhow::anyhow!("counter thread panicked"))?;
    Ok(Rate {
        datagrams_per_s: datagrams as f64 / elapsed,
        cells_per_s: cells / elapsed,
        offered_per_s: sent as f64 / elapsed,
        cpu_per_s: cpu / elapsed,
        vcis_seen,
    })
}

/// The VCI of one unit of received datagram number `k`: in a train, cell `k` modulo
/// the train's length (over many datagrams every position is looked at, at the cost
/// of one cell per datagram), or the frame's.
fn vci_in(d: &[u8], cell_mode: bool, k: u64) -> Option<u16> {
    use natm::wire::cell::CELL_LEN;
    if cell_mode {
        let n = d.len().saturating_sub(1) / CELL_LEN;
        let i = usize::try_from(k).ok()? % n.max(1);
        let c = d.get(1 + i * CELL_LEN..1 + (i + 1) * CELL_LEN)?;
        Some((u16::from(c[1] & 0x0F) << 12) | (u16::from(c[2]) << 4) | u16::from(c[3] >> 4))
    } else {
        natm::wire::vcframe::Repr::parse_bytes(d)
            .ok()
            .map(|(r, _)| r.vci)
    }
}

/// Datagrams in one GSO run of the sending host.
const RUN_DATAGRAMS: usize = 64;

/// One configuration measured: a link mode and what its sender sends.
struct Config {
    mode: &'static str,
    train: usize,
    /// [`RUN_DATAGRAMS`] datagrams of `len` octets.
    run: Vec<u8>,
    len: usize,
    cells_per: f64,
}

/// The input VCI of unit `k` of a run: the VCs in turn.
fn vci_of(k: usize, vcs: usize) -> u16 {
    FIRST_VCI + u16::try_from(k % vcs).expect("--vcs is at most 1024")
}

fn measure(a: &SwitchArgs, pb: &ProgressBar) -> anyhow::Result<SwitchResult> {
    for &t in &a.train {
        anyhow::ensure!(
            (1..=natm_switchd::train::MAX_TRAIN_CELLS).contains(&t),
            "--train must be 1..={}",
            natm_switchd::train::MAX_TRAIN_CELLS
        );
    }
    anyhow::ensure!(a.frame <= 65_000, "--frame must be at most 65,000 octets");
    anyhow::ensure!(a.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!((1..=1024).contains(&a.vcs), "--vcs must be 1..=1024");
    let vcs = a.vcs;
    let mut configs: Vec<Config> = a
        .train
        .iter()
        .map(|&t| {
            let mut run = Vec::new();
            for d in 0..RUN_DATAGRAMS {
                run.push(natm_switchd::train::TRAIN_MAGIC);
                for c in 0..t {
                    let vci = vci_of(d * t + c, vcs);
                    let hdr = natm::wire::cell::HeaderRepr::uni(
                        0,
                        vci,
                        natm::wire::cell::Pti::UserDataEnd,
                    );
                    run.extend_from_slice(&hdr.to_bytes());
                    run.extend_from_slice(&[0x5A; 48]);
                }
            }
            Config {
                mode: "cell",
                train: t,
                len: 1 + t * natm::wire::cell::CELL_LEN,
                run,
                cells_per: t as f64,
            }
        })
        .collect();
    let len = natm::wire::vcframe::HEADER_LEN + a.frame;
    let mut run = Vec::new();
    for d in 0..RUN_DATAGRAMS {
        let start = run.len();
        run.extend_from_slice(&natm::wire::vcframe::Repr::data(0, vci_of(d, vcs)).to_bytes());
        run.resize(start + len, 0x5A);
    }
    configs.push(Config {
        mode: "frame",
        train: 0,
        run,
        len,
        cells_per: (a.frame + 8).div_ceil(48) as f64,
    });
    let mut rows: Vec<Row> = configs
        .iter()
        .flat_map(|c| {
            ["switch", "relay"].map(|f| Row {
                mode: c.mode.into(),
                train: c.train,
                forwarder: f.into(),
                runs: Vec::new(),
            })
        })
        .collect();
    pb.set_length(rows.len() as u64 * a.runs as u64);
    let machine_start = Machine::now();
    let one = |switch: bool, c: &Config| -> anyhow::Result<Rate> {
        let tx = host_port()?;
        let rx = host_port()?;
        let (src, dst) = (tx.local_addr()?, rx.local_addr()?);
        pb.set_message(format!(
            "{} {}{}",
            if switch { "switch" } else { "relay" },
            c.mode,
            if c.train > 0 {
                format!(" ×{}", c.train)
            } else {
                String::new()
            }
        ));
        let (p, to) = if switch {
            start_switch(c.mode, src, dst, c.train.max(1), vcs)?
        } else {
            start_relay(src, dst)?
        };
        let load = Load {
            run: &c.run,
            len: c.len,
            cells_per: c.cells_per,
            cell_mode: c.mode == "cell",
            secs: a.seconds,
        };
        let r = blast(p.0.id(), &tx, rx, to, &load);
        pb.inc(1);
        r
    };
    for _ in 0..a.runs {
        for (i, c) in configs.iter().enumerate() {
            rows[2 * i].runs.push(one(true, c)?);
            rows[2 * i + 1].runs.push(one(false, c)?);
        }
    }
    Ok(SwitchResult {
        seconds: a.seconds,
        frame: a.frame,
        runs: a.runs,
        vcs,
        machine_start,
        machine: Machine::now(),
        rows,
    })
}

/// The median in millions and the runs' spread: half the range, in percent of it.
fn millions(row: &Row, f: impl Fn(&Rate) -> f64 + Copy) -> String {
    let (lo, hi) = row.range(f);
    let m = row.median(f);
    format!(
        "{:.2}M ±{:.0}%",
        m / 1e6,
        (hi - lo) / 2.0 / m.max(1e-9) * 100.0
    )
}

impl Experiment for SwitchArgs {
    type Result = SwitchResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(SwitchResult, ())> {
        Ok((measure(self, pb)?, ()))
    }

    fn table(r: &SwitchResult) -> String {
        let mut t = table::new(
            [
                "mode",
                "train",
                "forwarder",
                "dgrams/s",
                "cells/s",
                "CPU",
                "cells/CPU-s",
                "× relay",
                "× relay/CPU",
            ],
            3,
        );
        for pair in r.rows.chunks(2) {
            let relay = pair.get(1);
            for x in pair {
                let vs = |f: fn(&Rate) -> f64| match relay {
                    Some(y) if x.forwarder == "switch" => {
                        format!("{:.2}", x.median(f) / y.median(f).max(1e-9))
                    }
                    _ => "1".into(),
                };
                t.add_row(vec![
                    x.mode.clone(),
                    if x.train > 0 {
                        x.train.to_string()
                    } else {
                        "-".into()
                    },
                    if x.forwarder == "switch" {
                        "natm switch".into()
                    } else {
                        "UDP relay".into()
                    },
                    format!("{:.0}", x.median(|y| y.datagrams_per_s)),
                    millions(x, |y| y.cells_per_s),
                    format!("{:.0}%", x.median(|y| y.cpu_per_s) * 100.0),
                    millions(x, Rate::cells_per_cpu_s),
                    vs(|y| y.cells_per_s),
                    vs(Rate::cells_per_cpu_s),
                ]);
            }
        }
        format!(
            "{}\nMedians of {} interleaved runs of {} s each on loopback (± half their range), {}-octet frames, {} through the switch, {} CPUs, load average {} before and {} after; one sending and one receiving host thread beside the forwarder, all batched alike (GSO runs, recvmmsg + GRO). CPU: the forwarder process's user + system time per second of the run; × relay: the switch's median cells/s against the relay's; × relay/CPU: the same for cells per CPU-second.\n",
            table::render(&t).trim_end(),
            r.runs,
            r.seconds,
            r.frame,
            if r.vcs == 1 {
                "one PVC".to_string()
            } else {
                format!("{} PVCs taken in turn", r.vcs)
            },
            r.machine.cpus,
            r.machine_start.loadavg.as_deref().unwrap_or("?"),
            r.machine.loadavg.as_deref().unwrap_or("?"),
        )
    }

    fn figure(r: &SwitchResult, (): &(), path: &Path) -> anyhow::Result<()> {
        let rows = r
            .rows
            .iter()
            .map(|x| {
                let label = if x.train > 0 {
                    format!("{}, cell ×{}", x.forwarder, x.train)
                } else {
                    format!("{}, frame", x.forwarder)
                };
                (label, vec![x.median(Rate::cells_per_cpu_s) / 1e6])
            })
            .collect::<Vec<_>>();
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(
                p,
                "Forwarding through natm switch and a UDP relay, loopback",
                "million cells per CPU-second",
                &["cells per CPU-second"],
                &rows,
            )
        })
    }
}

/// `natm-lab perf relay` (hidden): the reference forwarder — every datagram from `--from`
/// goes to `--to`, and back, one thread, batched as the switch is: a poll wait,
/// `recvmmsg` (4 buffers) + GRO until the socket is empty or about 64 KiB are in,
/// each datagram copied into a send buffer, which leaves as UDP GSO runs.
#[derive(Debug, clap::Args)]
pub(crate) struct RelayArgs {
    /// The sending host's endpoint.
    #[arg(long)]
    from: SocketAddr,
    /// The receiving host's endpoint.
    #[arg(long)]
    to: SocketAddr,
}

/// The relay's send buffer: datagrams back to back, one size but the last, one
/// destination (a GSO run).
struct Run {
    buf: Vec<u8>,
    to: Option<SocketAddr>,
    segment: usize,
    sealed: bool,
}

impl Run {
    fn flush(&mut self, s: &UdpPort) {
        if let (Some(to), false) = (self.to, self.buf.is_empty()) {
            // A full socket buffer drops the datagrams, as the switch's link does.
            let _ = s.send(Some(to), &self.buf, self.segment);
        }
        self.buf.clear();
        self.to = None;
        self.sealed = false;
    }

    fn push(&mut self, s: &UdpPort, d: &[u8], to: SocketAddr) {
        if !self.buf.is_empty()
            && (self.to != Some(to)
                || self.sealed
                || d.len() > self.segment
                || self.buf.len() / self.segment >= s.max_gso_segments()
                || self.buf.len() + d.len() > natm::adaptor::MAX_DATAGRAM)
        {
            self.flush(s);
        }
        if self.buf.is_empty() {
            self.segment = d.len().max(1);
        } else if d.len() < self.segment {
            self.sealed = true;
        }
        self.to = Some(to);
        self.buf.extend_from_slice(d);
    }
}

/// Runs the relay until killed; prints `relay ADDR` once bound.
pub(crate) fn relay(a: &RelayArgs) -> natm_cli::cli::CliResult {
    let s = UdpPort::bind("127.0.0.1:0".parse()?)?;
    s.set_nonblocking(true)?;
    natm_cli::outln!("relay {}", s.local_addr()?);
    // The switch's batching: 4 buffers per `recvmmsg`, about 64 KiB read before
    // sending.
    let mut batch: RecvBatch = s.recv_batch(4);
    let mut run = Run {
        buf: Vec::with_capacity(65_536),
        to: None,
        segment: 1,
        sealed: false,
    };
    loop {
        let mut fds = [rustix::event::PollFd::new(&s, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        // Read until the socket would block.
        let mut empty = false;
        while !empty {
            let mut read = 0;
            while read < 64 * 1024 {
                match s.recv(&mut batch) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        empty = true;
                        break;
                    }
                    Err(_) => continue,
                }
                for (peer, d) in batch.iter() {
                    let out = if peer == a.from {
                        a.to
                    } else if peer == a.to {
                        a.from
                    } else {
                        continue;
                    };
                    run.push(&s, d, out);
                }
                read += batch.iter().map(|(_, d)| d.len()).sum::<usize>().max(1);
                if !batch.may_have_more() {
                    empty = true;
                    break;
                }
            }
            run.flush(&s);
        }
    }
}
