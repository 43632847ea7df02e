//! `natm-lab perf overhead`: seed 002's Table 1 ("bandwidth available after protocol
//! overhead", after Cavanaugh) for natm, measured: for each message size, the bytes each
//! layer adds on top of the one above — TPDU headers, ACKs and retransmissions; the
//! AAL5 trailer and padding and the 5-octet cell headers where cells are on the path
//! (cell mode); the VC header or the cell train's octet; the UDP/IP underlay — and the
//! CPU time each layer's work costs.
//!
//! Bytes are counted, not computed from the formats: one transfer of N messages of
//! each size between two natm hosts, each in its own network namespace made for the
//! run (a private loopback whose counters see nothing but this transfer), and every
//! layer read from the counters of the code that produced it — the PSBs' TPDU, ACK and
//! retransmission counts, the cell reassembly's cell and frame counts, the UDP
//! sockets' datagram and octet counts, and the kernel's `lo` packet and octet counts
//! (`/proc/thread-self/net/dev`; `lo` counts each packet from its IP header on, after
//! taking off the Ethernet header it framed it with). UDP segmentation offload is turned off on that `lo`,
//! so each datagram is its own packet with its own headers, as on a wire; natm still
//! hands its datagrams to the kernel in GSO batches. Differences between adjacent
//! layers are what each layer added.
//!
//! CPU time per layer comes from microbenchmarks run by the command on the same codecs
//! the engine uses (the sending thread's CPU clock, median of runs): building the
//! TPDUs of a message (header and payload copy), AAL5 segmentation and reassembly
//! (CRC-32, HEC, cell trains), and `send(2)` of the message's datagrams on loopback;
//! beside them, the whole transfer's process CPU time per message (both ends, every
//! thread), so what the layers leave out (the engine, the PSBs, wake-ups, receives)
//! shows as the difference.
//!
//! Under a cell-mode transfer the table adds the physical layers seed 002 puts under
//! the cells, as rows labelled "(derived)": computed from the counted cells and the
//! line codes' standards (SONET STS-3c's 155.52 Mbit/s carrying 149.76 of cells, 27/26;
//! TAXI's start-of-cell and idle codes, 55 byte times per 53-byte cell, then 4b/5b's 5
//! bits per 4), not counted by a kernel: natm's own wire is UDP.

use natm::ulib::Wait;
use std::io::Read as _;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use indicatif::ProgressBar;
use rustix::time::{clock_gettime, ClockId};

use natm::ulib::{ConnStats, Host, HostConfig, LinkMode};
use natm_proto::wire::cell::{HeaderFormat, CELL_LEN};
use natm_proto::wire::sar::{CellReassembly, ReassemblyLimits};
use natm_proto::wire::tpdu::{Header, TpduType, HEADER_LEN};
use natm_proto::wire::train::TrainPacker;
use natm_proto::wire::vcframe;

use super::cost::thread_cpu;
use super::experiment::{Experiment, OutputArgs};
use super::results::{self, Machine, OverheadRow};
use super::stats::median;
use natm_cli::cli::{table, units};

/// `natm-lab perf overhead`.
#[derive(Debug, Args)]
pub(crate) struct OverheadArgs {
    /// Message sizes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = units::bytes,
        default_value = "64,1KiB,4KiB,64KiB,1MiB"
    )]
    sizes: Vec<u64>,
    /// Application bytes per transfer (the message count is this over the size, at
    /// least --min-count).
    #[arg(long, default_value = "4MiB", value_parser = units::bytes)]
    bytes: u64,
    /// Fewest messages per transfer.
    #[arg(long, default_value_t = 16)]
    min_count: u64,
    /// QoS of the VC.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// Link modes, comma-separated: frame (one TPDU per datagram), cell (AAL5 cells in
    /// trains).
    #[arg(long, value_delimiter = ',', default_value = "frame,cell")]
    modes: Vec<String>,
    /// Cells per train in cell mode.
    #[arg(long, default_value_t = natm::ulib::DEFAULT_TRAIN_CELLS)]
    train: u16,
    /// Repeat each transfer and microbenchmark this many times; CPU figures are medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Length of each microbenchmark loop.
    #[arg(long, default_value = "30ms", value_parser = units::duration)]
    bench_time: Duration,
    /// Do not make a network namespace per transfer (needs no privilege, but the
    /// kernel's counters then see other traffic and are left out).
    #[arg(long)]
    no_netns: bool,
    /// Measure nothing: print (and draw, with --figure) a document saved before with
    /// --save.
    #[arg(long)]
    from: Option<std::path::PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

/// A link mode of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Frame,
    Cell,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Frame => "frame",
            Mode::Cell => "cell",
        }
    }
}

/// The kernel counters of the private `lo`: packets and octets sent.
#[derive(Debug, Clone, Copy, Default)]
struct LoCounters {
    packets: u64,
    bytes: u64,
}

/// `lo`'s transmit counters in this thread's network namespace.
fn lo_counters() -> anyhow::Result<LoCounters> {
    let mut text = String::new();
    std::fs::File::open("/proc/thread-self/net/dev")
        .and_then(|mut f| f.read_to_string(&mut text))
        .context("cannot read /proc/thread-self/net/dev")?;
    parse_lo(&text).context("no lo in /proc/thread-self/net/dev")
}

/// `lo`'s transmit packets and octets from the text of `/proc/net/dev`.
fn parse_lo(text: &str) -> Option<LoCounters> {
    let line = text.lines().find(|l| l.trim_start().starts_with("lo:"))?;
    let fields: Vec<u64> = line
        .split_once(':')?
        .1
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
    Some(LoCounters {
        bytes: *fields.get(8)?,
        packets: *fields.get(9)?,
    })
}

/// Run `cmd args` (in this thread's network namespace: a child inherits it).
fn run_tool(cmd: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Move this thread into a new network namespace whose `lo` is up and segments UDP
/// GSO batches before counting them. The namespace is made with `ip netns add`, entered
/// with `setns(2)` and its name deleted at once: it lives as long as this thread and
/// its sockets, and nothing is left behind however the run ends.
fn private_netns() -> anyhow::Result<()> {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "natm-ovh-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    run_tool("ip", &["netns", "add", &name])
        .context("a network namespace (needs root; or --no-netns)")?;
    let entered = std::fs::File::open(format!("/run/netns/{name}"))
        .context("open the namespace")
        .and_then(|f| {
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&f),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .context("setns")
        });
    let deleted = run_tool("ip", &["netns", "delete", &name]);
    entered?;
    deleted?;
    run_tool("ip", &["link", "set", "lo", "up"])?;
    run_tool("ethtool", &["-K", "lo", "tx-udp-segmentation", "off"])?;
    Ok(())
}

/// What one transfer counted, as differences over the transfer.
#[derive(Debug, Clone, Default)]
struct Counted {
    messages: u64,
    app_bytes: u64,
    payload_bytes: u64,
    retx_bytes: u64,
    data_tpdus: u64,
    acks: u64,
    cells: Option<u64>,
    frames: Option<u64>,
    udp_bytes: u64,
    datagrams: u64,
    send_calls: u64,
    lo: Option<LoCounters>,
    cpu_s: f64,
    wall_s: f64,
}

fn port(s: &ConnStats) -> natm::adaptor::PortStats {
    s.port.unwrap_or_default()
}

/// The UDP sockets' counters of both ends (one host): each connection's own
/// socket's, or, on one port per host, the host's ports', which carry both.
fn sockets(host: &Host, c: &ConnStats, s: &ConnStats) -> natm::adaptor::PortStats {
    match (c.port, s.port) {
        (None, None) => {
            host.ports()
                .iter()
                .fold(Default::default(), |t, p| natm::adaptor::PortStats {
                    datagrams_sent: t.datagrams_sent + p.socket.datagrams_sent,
                    bytes_sent: t.bytes_sent + p.socket.bytes_sent,
                    send_calls: t.send_calls + p.socket.send_calls,
                    ..t
                })
        }
        _ => natm::adaptor::PortStats {
            datagrams_sent: port(c).datagrams_sent + port(s).datagrams_sent,
            bytes_sent: port(c).bytes_sent + port(s).bytes_sent,
            send_calls: port(c).send_calls + port(s).send_calls,
            ..Default::default()
        },
    }
}

/// One transfer of `count` messages of `size` bytes, client to server; `netns`: in a
/// private namespace with the kernel's counters.
fn transfer(
    mode: Mode,
    qos: &str,
    train: u16,
    size: usize,
    count: u64,
    netns: bool,
) -> anyhow::Result<Counted> {
    if netns {
        private_netns()?;
    }
    let mut cfg = HostConfig::default();
    cfg.engine.link_mode = match mode {
        Mode::Frame => LinkMode::Frame,
        Mode::Cell => LinkMode::Cell { train },
    };
    let host = Host::open(cfg).context("open the host")?;
    let l = host.bind("127.0.0.1:0", qos).context("bind")?;
    let addr = l.local_addr()?;
    let h2 = host.clone();
    let q = qos.to_string();
    let t = std::thread::spawn(move || h2.connect(addr, &q));
    let server = l
        .accept(Wait::For(Duration::from_secs(5)))
        .context("accept")?;
    let client = t
        .join()
        .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
        .context("connect")?;
    // A reliable VC confirms its path MTU with a probe once it has data to send (RFC
    // 8899, `natm::engine::path_probe`): one warm-up message, and the probe answered,
    // before the baseline, so that the counts are the transfer's alone.
    client
        .send(&[0x5a_u8][..], Wait::Block)
        .context("warm-up send")?;
    server
        .recv(Wait::For(Duration::from_secs(5)))
        .context("warm-up recv")?;
    let until = Instant::now() + Duration::from_secs(5);
    while client
        .stats()
        .plpmtud
        .is_some_and(|p| p.probes_acked + p.probes_lost < p.probes_sent.max(1))
    {
        anyhow::ensure!(
            Instant::now() < until,
            "the path MTU probe was never answered"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let the handshake's (and the warm-up's) last frames land before the baseline.
    std::thread::sleep(Duration::from_millis(20));
    let (c0, s0) = (client.stats(), server.stats());
    let k0 = sockets(&host, &c0, &s0);
    let lo0 = if netns { Some(lo_counters()?) } else { None };
    let (cpu0, wall0) = (process_cpu(), Instant::now());
    let received = std::thread::scope(|sc| -> anyhow::Result<(u64, u64)> {
        let sender = sc.spawn(|| -> anyhow::Result<()> {
            let msg = vec![0x5a_u8; size];
            for _ in 0..count {
                client.send(&msg, Wait::Block).context("send")?;
            }
            Ok(())
        });
        let (mut n, mut bytes) = (0u64, 0u64);
        let deadline = Instant::now() + Duration::from_secs(60);
        while n < count {
            if Instant::now() > deadline {
                anyhow::bail!("only {n} of {count} messages arrived within 60 s");
            }
            match server.recv(Wait::For(Duration::from_millis(200))) {
                Ok(Some(m)) => {
                    n += 1;
                    bytes += m.len() as u64;
                }
                Ok(None) => anyhow::bail!("the sender closed after {n} messages"),
                Err(natm::ulib::Error::TimedOut) => {}
                Err(e) => return Err(e).context("recv"),
            }
        }
        sender
            .join()
            .map_err(|_| anyhow::anyhow!("sender panicked"))??;
        Ok((n, bytes))
    })?;
    let (cpu1, wall1) = (process_cpu(), Instant::now());
    // The last ACKs: a reliable VC is quiet once everything is acknowledged.
    std::thread::sleep(Duration::from_millis(50));
    let (c1, s1) = (client.stats(), server.stats());
    let k1 = sockets(&host, &c1, &s1);
    let lo1 = if netns { Some(lo_counters()?) } else { None };
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let cells = |s: &ConnStats| s.cells.map(|c| (c.sar.cells, c.sar.frames));
    let (cells, frames) = match (cells(&c0), cells(&s0), cells(&c1), cells(&s1)) {
        (Some(a0), Some(b0), Some(a1), Some(b1)) => (
            Some(d(a0.0 + b0.0, a1.0 + b1.0)),
            Some(d(a0.1 + b0.1, a1.1 + b1.1)),
        ),
        _ => (None, None),
    };
    let retx = |s: &ConnStats| s.tx.retx_fast + s.tx.retx_timeout + s.tx.retx_head;
    let counted = Counted {
        messages: received.0,
        app_bytes: received.1,
        payload_bytes: d(
            c0.tx.bytes_sent + c0.tx.bytes_retransmitted,
            c1.tx.bytes_sent + c1.tx.bytes_retransmitted,
        ),
        retx_bytes: d(c0.tx.bytes_retransmitted, c1.tx.bytes_retransmitted),
        data_tpdus: d(c0.tx.tpdus_sent + retx(&c0), c1.tx.tpdus_sent + retx(&c1)),
        acks: d(s0.rx.acks_sent, s1.rx.acks_sent),
        cells,
        frames,
        udp_bytes: d(k0.bytes_sent, k1.bytes_sent),
        datagrams: d(k0.datagrams_sent, k1.datagrams_sent),
        send_calls: d(k0.send_calls, k1.send_calls),
        lo: lo0.zip(lo1).map(|(a, b)| LoCounters {
            packets: d(a.packets, b.packets),
            bytes: d(a.bytes, b.bytes),
        }),
        cpu_s: (cpu1 - cpu0).as_secs_f64(),
        wall_s: (wall1 - wall0).as_secs_f64(),
    };
    client.close();
    server.close();
    Ok(counted)
}

/// CPU time of the whole process (every thread, user and system).
fn process_cpu() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The TPDU payload sizes of one message of `size` bytes.
fn tpdu_payloads(size: usize, tpdu: usize) -> impl Iterator<Item = usize> {
    let n = size.div_ceil(tpdu).max(1);
    (0..n).map(move |i| (size - i * tpdu).min(tpdu))
}

/// Thread CPU seconds per call of `f`, over a loop of `time`.
fn per_call(time: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let (c0, w0) = (thread_cpu(), Instant::now());
    let mut n = 0u64;
    while n == 0 || w0.elapsed() < time {
        f();
        n += 1;
    }
    (thread_cpu() - c0).as_secs_f64() / n as f64
}

/// The TPDU layer's work for one message: each TPDU's header emitted and its payload
/// copied behind it into a frame buffer (the PSB's one copy).
fn bench_tpdu(size: usize, tpdu: usize, time: Duration) -> f64 {
    let msg = vec![0x5a_u8; size];
    let mut frame = vec![0u8; HEADER_LEN + tpdu];
    let mut seq = 0u32;
    per_call(time, || {
        let mut off = 0;
        for len in tpdu_payloads(size, tpdu) {
            let mut h = Header::new(TpduType::Data);
            h.seq = seq;
            h.aux = off as u32;
            h.emit_into(&mut frame[..HEADER_LEN]);
            frame[HEADER_LEN..HEADER_LEN + len].copy_from_slice(&msg[off..off + len]);
            std::hint::black_box(&frame);
            off += len;
            seq = seq.wrapping_add(1);
        }
    })
}

/// The AAL5 layer's work for one message: each TPDU segmented into cells (pad,
/// trailer, CRC-32, cell headers with HEC) in trains, and the cells reassembled (HEC
/// and CRC-32 checked).
fn bench_sar(size: usize, tpdu: usize, train: usize, time: Duration) -> anyhow::Result<f64> {
    let sdus: Vec<Vec<u8>> = tpdu_payloads(size, tpdu)
        .map(|len| vec![0x5a_u8; HEADER_LEN + len])
        .collect();
    let header = vcframe::Repr::data(0, 42);
    let mut packer = TrainPacker::new(train).context("train size")?;
    let mut rx: CellReassembly<()> =
        CellReassembly::new(HeaderFormat::Uni, ReassemblyLimits::default());
    let mut cell = [0u8; CELL_LEN];
    let mut err = None;
    let t = per_call(time, || {
        packer.clear();
        for sdu in &sdus {
            if let Err(e) = packer.push_frame(&header, sdu) {
                err = Some(e);
            }
        }
        for dgram in packer.datagrams() {
            for c in dgram[1..].chunks_exact(CELL_LEN) {
                cell.copy_from_slice(c);
                if let Ok(Some(f)) = rx.push(Duration::ZERO, (), &mut cell) {
                    std::hint::black_box(f.sdu.len());
                }
            }
        }
    });
    if let Some(e) = err {
        anyhow::bail!("segmentation: {e}");
    }
    if rx.counters().bad_frames > 0 {
        anyhow::bail!("reassembly refused frames it was given whole");
    }
    Ok(t)
}

/// The UDP/IP layer's work for one message: `send(2)` of each of its datagrams on a
/// connected loopback socket, a thread draining the receiver (not timed).
fn bench_udp(datagrams: &[usize], time: Duration) -> anyhow::Result<f64> {
    let rx = UdpSocket::bind("127.0.0.1:0").context("bind")?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    let tx = UdpSocket::bind("127.0.0.1:0").context("bind")?;
    tx.connect(rx.local_addr()?)?;
    let big = vec![0x5a_u8; datagrams.iter().copied().max().unwrap_or(1)];
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; 65_536];
            while !stop.load(Ordering::Relaxed) {
                let _ = rx.recv(&mut buf);
            }
        });
        let mut err = None;
        let t = per_call(time, || {
            for &len in datagrams {
                // A full receive buffer drops on loopback; the send still did its work.
                if let Err(e) = tx.send(&big[..len]) {
                    if e.kind() != std::io::ErrorKind::WouldBlock {
                        err = Some(e);
                    }
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
        match err {
            Some(e) => Err(anyhow::Error::from(e).context("send")),
            None => Ok(t),
        }
    })
}

/// The datagram sizes of one message in `mode` (data direction).
fn message_datagrams(mode: Mode, size: usize, tpdu: usize, train: usize) -> Vec<usize> {
    match mode {
        Mode::Frame => tpdu_payloads(size, tpdu)
            .map(|l| vcframe::HEADER_LEN + HEADER_LEN + l)
            .collect(),
        Mode::Cell => {
            let cells: usize = tpdu_payloads(size, tpdu)
                .map(|l| (HEADER_LEN + l + 8).div_ceil(48))
                .sum();
            let mut out = vec![1 + train * CELL_LEN; cells / train];
            if !cells.is_multiple_of(train) {
                out.push(1 + (cells % train) * CELL_LEN);
            }
            out
        }
    }
}

impl Experiment for OverheadArgs {
    type Result = results::Overhead;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.out
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        if let Some(path) = &self.from {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let doc = serde_json::from_str(&text)
                .with_context(|| format!("{} is not an overhead document", path.display()))?;
            return Ok((doc, ()));
        }
        if self.runs == 0 {
            anyhow::bail!("--runs must be at least 1");
        }
        let qos: natm_proto::wire::qos::Qos = self
            .qos
            .parse()
            .map_err(|e| anyhow::anyhow!("--qos {}: {e}", self.qos))?;
        let tpdu = qos.resolved_transport(false).tpdu_size as usize;
        let modes = self
            .modes
            .iter()
            .map(|m| match m.as_str() {
                "frame" => Ok(Mode::Frame),
                "cell" => Ok(Mode::Cell),
                other => Err(anyhow::anyhow!(
                    "--modes: {other} is neither frame nor cell"
                )),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let train = usize::from(self.train);
        TrainPacker::new(train).map_err(|e| anyhow::anyhow!("--train: {e}"))?;
        let sizes = self
            .sizes
            .iter()
            .map(|&s| super::check_size(s))
            .collect::<anyhow::Result<Vec<_>>>()?;
        pb.set_length((modes.len() * sizes.len() * self.runs) as u64);
        let netns = !self.no_netns;
        let mut rows = Vec::new();
        for &mode in &modes {
            for &size in &sizes {
                let count = (self.bytes / size as u64).max(self.min_count).max(1);
                let (mut first, mut cpu, mut wall) = (None, Vec::new(), Vec::new());
                let (mut t_tpdu, mut t_sar, mut t_udp) = (Vec::new(), Vec::new(), Vec::new());
                let dgrams = message_datagrams(mode, size, tpdu, train);
                for run in 0..self.runs {
                    pb.set_message(format!(
                        "overhead {} {size} B run {}/{}",
                        mode.name(),
                        run + 1,
                        self.runs
                    ));
                    let qos = self.qos.clone();
                    let tr = self.train;
                    // Its own thread: the namespace is the thread's and dies with it.
                    let c =
                        std::thread::spawn(move || transfer(mode, &qos, tr, size, count, netns))
                            .join()
                            .map_err(|_| anyhow::anyhow!("transfer thread panicked"))?
                            .with_context(|| format!("{} mode, {size} B messages", mode.name()))?;
                    cpu.push(c.cpu_s / c.messages as f64 * 1e6);
                    wall.push(c.wall_s / c.messages as f64 * 1e6);
                    first.get_or_insert(c);
                    t_tpdu.push(bench_tpdu(size, tpdu, self.bench_time) * 1e6);
                    if mode == Mode::Cell {
                        t_sar.push(bench_sar(size, tpdu, train, self.bench_time)? * 1e6);
                    }
                    t_udp.push(bench_udp(&dgrams, self.bench_time)? * 1e6);
                    pb.inc(1);
                }
                let c = first.context("no run")?;
                rows.push(OverheadRow {
                    acks: c.acks,
                    aal5_bytes: c.cells.map(|n| n * 48),
                    app_bytes: c.app_bytes,
                    cells: c.cells,
                    cpu_sar_us: median(&t_sar),
                    cpu_total_us: median(&cpu).unwrap_or(f64::NAN),
                    cpu_tpdu_us: median(&t_tpdu).unwrap_or(f64::NAN),
                    cpu_udp_us: median(&t_udp).unwrap_or(f64::NAN),
                    data_tpdus: c.data_tpdus,
                    datagrams: c.datagrams,
                    frames: c.frames,
                    ip_bytes: c.lo.map(|l| l.bytes),
                    ip_packets: c.lo.map(|l| l.packets),
                    messages: c.messages,
                    mode: mode.name().to_string(),
                    payload_bytes: c.payload_bytes,
                    per_run_cpu_total_us: cpu,
                    retx_bytes: c.retx_bytes,
                    send_calls: c.send_calls,
                    size,
                    tpdu_bytes: c.payload_bytes + HEADER_LEN as u64 * (c.data_tpdus + c.acks),
                    udp_bytes: c.udp_bytes,
                    wall_us: median(&wall).unwrap_or(f64::NAN),
                });
            }
        }
        Ok((
            results::Overhead {
                bench_time_s: self.bench_time.as_secs_f64(),
                experiment: "overhead".into(),
                kernel_counters: if netns {
                    "lo of a network namespace per transfer, UDP segmentation offload off".into()
                } else {
                    "none (--no-netns)".into()
                },
                machine: Machine::now(),
                qos: self.qos.clone(),
                results: rows,
                runs: self.runs,
                tpdu,
                train,
            },
            (),
        ))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(r: &Self::Result, (): &(), path: &Path) -> anyhow::Result<()> {
        let segments = LAYERS.map(|l| l.name);
        let rows: Vec<(String, Vec<f64>)> = r
            .results
            .iter()
            .map(|row| {
                // Per application byte, so that every size shows on one axis.
                let per_msg = |b: u64| b as f64 / row.app_bytes.max(1) as f64;
                let layers = layers(row);
                let mut above = 0u64;
                let v = layers
                    .iter()
                    .map(|l| match l {
                        Some(b) => {
                            let added = b.saturating_sub(above);
                            above = *b;
                            per_msg(added)
                        }
                        None => 0.0,
                    })
                    .collect();
                (
                    format!("{} {}", row.mode, super::report::human_size(row.size)),
                    v,
                )
            })
            .collect();
        let title = format!(
            "Bytes each layer carries per application byte, {} (TPDU {} B)",
            r.qos, r.tpdu
        );
        crate::plot::both(path, |p| {
            crate::plot::stacked_bars(
                p,
                &title,
                "bytes per application byte (application = 1)",
                &segments,
                &rows,
            )
        })
    }
}

/// A layer of the table: its name and what it adds.
struct Layer {
    name: &'static str,
    adds: &'static str,
}

/// The layers, top to bottom.
const LAYERS: [Layer; 6] = [
    Layer {
        name: "application",
        adds: "the messages",
    },
    Layer {
        name: "TPDU",
        adds: "32 B header per TPDU, ACKs, retransmissions",
    },
    Layer {
        name: "AAL5",
        adds: "8 B trailer, pad to 48 B",
    },
    Layer {
        name: "ATM cells",
        adds: "5 B header per cell",
    },
    Layer {
        name: "UDP payload",
        adds: "4 B VC header per frame / 1 B per cell train",
    },
    Layer {
        name: "IP (kernel)",
        adds: "8 B UDP + 20 B IPv4 header per datagram",
    },
];

/// Bytes counted at each of [`LAYERS`] (`None` where the layer is not on the path or
/// was not counted).
fn layers(r: &OverheadRow) -> [Option<u64>; 6] {
    [
        Some(r.app_bytes),
        Some(r.tpdu_bytes),
        r.aal5_bytes,
        r.cells.map(|c| c * CELL_LEN as u64),
        Some(r.udp_bytes),
        r.ip_bytes,
    ]
}

/// CPU µs per message of the microbenchmark that covers each of [`LAYERS`].
fn layer_cpu(r: &OverheadRow) -> [Option<f64>; 6] {
    [
        None,
        Some(r.cpu_tpdu_us),
        r.cpu_sar_us,
        None,
        None,
        Some(r.cpu_udp_us),
    ]
}

/// A physical layer under the cells, derived from its line code (seed 002 §4.3 and
/// Table 1, after Cavanaugh): no kernel counts these bytes, natm's wire being UDP.
struct Physical {
    name: &'static str,
    adds: &'static str,
    /// Line bytes per 53-byte cell, as a fraction (numerator, denominator).
    per_cell: (u64, u64),
    /// It codes the row above it (TAXI's framing), not the cells.
    on_previous: bool,
}

/// The physical layers, each as bytes on the line per cell sent.
const PHYSICAL: [Physical; 3] = [
    // 155.52 Mbit/s line rate carries 149.76 Mbit/s of cells: 90 columns of 3 section
    // and line overhead plus 1 of path overhead per 270 in STS-3c (9 + 1 of 270).
    Physical {
        name: "SONET STS-3c (derived)",
        adds: "on the cells: STS-3c overhead, 27/26 (149.76 of 155.52 Mbit/s)",
        per_cell: (53 * 27, 26),
        on_previous: false,
    },
    // A start-of-cell code (TT) before each cell and an idle code (JK) between cells:
    // 2 byte times per 53-byte cell, in symbols of the 4b/5b code.
    Physical {
        name: "TAXI framing (derived)",
        adds: "on the cells: start-of-cell and idle codes, 2 B per cell",
        per_cell: (55, 1),
        on_previous: false,
    },
    Physical {
        name: "TAXI line 4b/5b (derived)",
        adds: "on the TAXI framing: 5 line bits per 4 data bits",
        per_cell: (55 * 5, 4),
        on_previous: true,
    },
];

/// Line bytes `p` puts on the wire for `cells` cells, rounded to the nearest byte.
fn physical_bytes(p: &Physical, cells: u64) -> u64 {
    let (n, d) = p.per_cell;
    (cells * n + d / 2) / d
}

/// The results as one table per mode and size.
fn table(r: &results::Overhead) -> String {
    let mut out = format!(
        "Per-layer overhead (seed 002 Table 1, measured): {} VC, {} B TPDUs, cell trains of \
{}; bytes from the stack's and the kernel's counters ({}); CPU per message: layer \
microbenchmarks (sending thread's CPU clock) and the whole transfer (process CPU, both \
ends), median of {} run(s); load {}\n",
        r.qos,
        r.tpdu,
        r.train,
        r.kernel_counters,
        r.runs,
        r.machine.loadavg.as_deref().unwrap_or("?")
    );
    for row in &r.results {
        let n = row.messages.max(1) as f64;
        out.push_str(&format!(
            "\n{} mode, {} B messages × {}: {} data TPDUs, {} ACKs, {} retransmitted B, \
{} datagrams in {} send calls{}\n",
            row.mode,
            row.size,
            row.messages,
            row.data_tpdus,
            row.acks,
            row.retx_bytes,
            row.datagrams,
            row.send_calls,
            match row.cells {
                Some(c) => format!(", {c} cells"),
                None => String::new(),
            }
        ));
        let mut t = table::new(
            [
                "layer",
                "adds",
                "B/msg",
                "+B/msg",
                "app/layer",
                "CPU µs/msg",
            ],
            2,
        );
        let mut above: Option<u64> = None;
        for ((l, b), cpu) in LAYERS.iter().zip(layers(row)).zip(layer_cpu(row)) {
            let Some(b) = b else { continue };
            let cpu = cpu.map_or(String::new(), |c| format!("{c:.2}"));
            let adds = match (l.name, row.mode.as_str()) {
                ("UDP payload", "frame") => "4 B VC header per frame",
                ("UDP payload", _) => "1 B per cell train",
                _ => l.adds,
            };
            t.add_row(vec![
                l.name.to_string(),
                adds.to_string(),
                format!("{:.1}", b as f64 / n),
                above.map_or(String::new(), |a| {
                    format!("{:.1}", b.saturating_sub(a) as f64 / n)
                }),
                format!("{:.4}", row.app_bytes as f64 / b as f64),
                cpu,
            ]);
            above = Some(b);
        }
        // Where cells were counted, what a real ATM link would carry under them.
        if let Some(cells) = row.cells {
            let cell_bytes = cells * CELL_LEN as u64;
            let mut previous = cell_bytes;
            for p in &PHYSICAL {
                let b = physical_bytes(p, cells);
                let under = if p.on_previous { previous } else { cell_bytes };
                previous = b;
                t.add_row(vec![
                    p.name.to_string(),
                    p.adds.to_string(),
                    format!("{:.1}", b as f64 / n),
                    format!("{:.1}", b.saturating_sub(under) as f64 / n),
                    format!("{:.4}", row.app_bytes as f64 / b as f64),
                    String::new(),
                ]);
            }
        }
        t.add_row(vec![
            "whole stack".into(),
            "process CPU of the transfer, both ends".into(),
            String::new(),
            String::new(),
            String::new(),
            format!("{:.2}", row.cpu_total_us),
        ]);
        out.push_str(&table::render(&t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived physical rows give seed 002's Table 1 (multi-mode fiber, TAXI at
    /// 140 Mbit/s, after Cavanaugh) and §4.3's figures, and SONET's 149.76 of 155.52.
    #[test]
    fn physical_rows_give_seed_002s_rates() {
        // A multiple of 26 and of 4: every row comes out in whole bytes.
        let cells = 26_000_000u64;
        let cell_bytes = cells * CELL_LEN as u64;
        let [sonet, framed, line] = &PHYSICAL;
        // Rate at a layer = line rate × (layer bytes / line bytes), Mbit/s.
        let at = |line_rate: f64, layer: u64, wire: u64| line_rate * layer as f64 / wire as f64;
        let taxi = physical_bytes(framed, cells);
        // "Line rate 140.000 / To ATM 134.909 / To AAL 122.182" (Table 1).
        assert!((at(140.0, cell_bytes, taxi) - 134.909).abs() < 5e-4);
        assert!((at(140.0, cells * 48, taxi) - 122.182).abs() < 5e-4);
        // "At 100 Mbps, this overhead amounts to 3.636 Mbps, leaving 96.364" (§4.3).
        assert!((100.0 - at(100.0, cell_bytes, taxi) - 3.636).abs() < 5e-4);
        // 4b/5b: "a 125 or 175 Mbps line rate ... yielding rates of 100 or 140 Mbps".
        assert!((at(175.0, taxi, physical_bytes(line, cells)) - 140.0).abs() < 1e-9);
        assert!((at(125.0, taxi, physical_bytes(line, cells)) - 100.0).abs() < 1e-9);
        // STS-3c: 155.52 Mbit/s on the line, 149.76 of cells.
        assert!((at(155.52, cell_bytes, physical_bytes(sonet, cells)) - 149.76).abs() < 1e-6);
        // One cell rounds to whole bytes: 55.04 -> 55, 55, 68.75 -> 69.
        assert_eq!(PHYSICAL.map(|p| physical_bytes(&p, 1)), [55, 55, 69]);
    }

    /// The table shows the derived rows under a cell-mode transfer only, labelled as
    /// derived, with the bytes the line code gives.
    #[test]
    fn the_table_shows_derived_physical_rows_in_cell_mode() {
        let text = std::fs::read_to_string(format!(
            "{}/../../docs/perf/overhead.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let doc: results::Overhead = serde_json::from_str(&text).unwrap();
        let cell = doc
            .results
            .iter()
            .find(|r| r.cells.is_some())
            .expect("a cell-mode row in the committed document");
        let one = results::Overhead {
            results: vec![cell.clone()],
            ..doc.clone()
        };
        let out = table(&one);
        let cells = cell.cells.unwrap();
        let per_msg = |b: u64| format!("{:.1}", b as f64 / cell.messages.max(1) as f64);
        for p in &PHYSICAL {
            let line = out
                .lines()
                .find(|l| l.contains(p.name))
                .unwrap_or_else(|| panic!("no {} row in\n{out}", p.name));
            assert!(line.contains(&per_msg(physical_bytes(p, cells))), "{line}");
        }
        let frames: Vec<_> = doc
            .results
            .iter()
            .filter(|r| r.cells.is_none())
            .cloned()
            .collect();
        if !frames.is_empty() {
            let out = table(&results::Overhead {
                results: frames,
                ..doc.clone()
            });
            assert!(!out.contains("(derived)"), "{out}");
        }
    }

    #[test]
    fn lo_counters_come_from_the_transmit_columns() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:    4200      10    0    0    0     0          0         0     4300       11    0    0    0     0       0          0\n";
        let c = parse_lo(text).unwrap();
        assert_eq!((c.bytes, c.packets), (4300, 11));
        assert!(parse_lo("eth0: 1 2 3").is_none());
    }

    #[test]
    fn a_message_is_cut_into_tpdus_that_add_up_to_it() {
        let v: Vec<usize> = tpdu_payloads(10_000, 4096).collect();
        assert_eq!(v, [4096, 4096, 1808]);
        assert_eq!(tpdu_payloads(64, 4096).collect::<Vec<_>>(), [64]);
    }

    #[test]
    fn cell_mode_datagrams_carry_the_message_cells_in_trains() {
        // 10,000 B: TPDUs of 4128, 4128 and 1840 B with their headers; with the 8 B
        // trailer, 87 + 87 + 39 = 213 cells: six trains of 32 and one of 21.
        let d = message_datagrams(Mode::Cell, 10_000, 4096, 32);
        assert_eq!(d.len(), 7);
        assert_eq!(d[6], 1 + 21 * 53);
        let f = message_datagrams(Mode::Frame, 10_000, 4096, 32);
        assert_eq!(f, [4132, 4132, 1844]);
    }
}
