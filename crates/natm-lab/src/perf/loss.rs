//! Goodput under random loss (seed 000 §5.3.3's claim that packet-pair flow control
//! with SMART keeps a transfer going where loss throttles window protocols): one bulk
//! transfer across a rate-limited link between two network namespaces this experiment
//! creates, at random loss of 0–10 %, for natm reliable with packet-pair and with
//! window flow control, TCP CUBIC, TCP BBR and QUIC.
//!
//! The network is built by [`super::netlab`] (shared/NETLAB.md): namespaces
//! `natm-loss-<pid>-a` and `-b` joined by a
//! veth pair with segmentation offloads off (when ethtool is there); `tbf` on a's end
//! sets the rate; an nftables rule on b's input, `numgen random mod 1000 < N drop`,
//! drops data (acknowledgements go back untouched). netem is not available. Each
//! transfer is two processes of this binary, `natm-lab perf loss-peer recv` in b and
//! `… send` in a, started with `ip netns exec`; the receiver reports the goodput it
//! saw after a warm-up. The namespaces go when the experiment ends, fails, or is
//! interrupted (Ctrl-C), and every child is killed by its process id.
//!
//! With `--rtt`, the path gets a round-trip time: a third namespace sits between a
//! and b, and a delay line there ([`super::delayline`]) holds every frame for half
//! the RTT each way (netem is not available). Every point of such a run goes through
//! the line, the zero RTT included (then it forwards at once), so the rows differ
//! only in the delay; the path's RTT as `ping` sees it is reported beside each.
//!
//! The drop rule sees IP datagrams after reassembly, so a natm TPDU of 4 KiB (three
//! link packets) is lost as a whole with the same probability as one TCP segment.
//! With `--loss-unit packet` it sits before reassembly instead and drops link packets
//! (IP fragments), so a TPDU is lost if any of its fragments is: the loss a bigger
//! TPDU pays for (issue 17's adaptive TPDU size).
//!
//! With `NATM_LOSS_COUNTERS` set in the environment, every natm sender's counters
//! (retransmissions by cause, timeouts, window stalls, its rate estimate) go to
//! stderr after each transfer: what explains a figure.

use anyhow::Context as _;
use natm::ulib::Wait;
use std::io::{self, BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use indicatif::ProgressBar;

use super::experiment::{Experiment, OutputArgs};
use super::netlab::{self, reap, Net};
use super::results;
use super::stack::{is_timeout, Endpoint, StackOptions};
use super::stats::median;
use crate::plot::{self, Axis, Line, Mark};
use natm_cli::cli::table;

/// The transfers compared: name, and how its peers are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// natm reliable with the given QoS text.
    Natm(&'static str),
    /// Kernel TCP with this congestion control.
    Tcp(&'static str),
    /// quinn.
    Quic,
}

/// Every stack this experiment knows.
pub(crate) const STACKS: &[(&str, Kind)] = &[
    ("natm-pp", Kind::Natm("reliable:flow=packet-pair")),
    ("natm-window", Kind::Natm("reliable:flow=window")),
    // Issue 30: the window in TPDUs, now that TPDUs are cut to the path MTU (a
    // 1,500-octet path carries 1,436 octets a TPDU, so 256 TPDUs are 0.37 MB).
    (
        "natm-pp-w1024",
        Kind::Natm("reliable:flow=packet-pair,window=1024"),
    ),
    (
        "natm-pp-w4096",
        Kind::Natm("reliable:flow=packet-pair,window=4096"),
    ),
    // Issue 17: the TPDU size, fixed at seed 000's 4 KiB, fixed at 32 KiB, or adapted
    // to the loss the sender sees (between 4 and 32 KiB).
    (
        "natm-pp-4k",
        Kind::Natm("reliable:flow=packet-pair,tpdu=4096"),
    ),
    (
        "natm-pp-32k",
        Kind::Natm("reliable:flow=packet-pair,tpdu=32768"),
    ),
    (
        "natm-pp-auto",
        Kind::Natm("reliable:flow=packet-pair,tpdu=auto"),
    ),
    ("tcp-cubic", Kind::Tcp("cubic")),
    ("tcp-bbr", Kind::Tcp("bbr")),
    ("quic", Kind::Quic),
];

fn kind(name: &str) -> anyhow::Result<Kind> {
    STACKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, k)| *k)
        .ok_or_else(|| {
            let names: Vec<&str> = STACKS.iter().map(|(n, _)| *n).collect();
            anyhow::anyhow!(
                "unknown stack \"{name}\" for loss; known: {}",
                names.join(", ")
            )
        })
}

/// Longest a receiver waits for its connection and first data.
const FIRST_DATA: Duration = Duration::from_secs(10);
/// How often a sending peer writes its stack's counters to stderr.
const COUNTERS_EVERY: Duration = Duration::from_secs(2);
/// Poll interval of the peers' receive loops.
const POLL: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------
// The peers (run inside the namespaces).

/// `natm-lab perf loss-peer` (hidden): one end of a loss transfer.
#[derive(Debug, clap::Args)]
pub(crate) struct PeerArgs {
    /// `recv` (listen on --addr, report goodput) or `send` (connect to --addr, send).
    #[arg(value_parser = ["recv", "send"])]
    role: String,
    /// Stack name (see `natm-lab perf loss --help`).
    #[arg(long)]
    stack: String,
    /// Address to listen on or connect to.
    #[arg(long)]
    addr: SocketAddr,
    /// Message size.
    #[arg(long, default_value = "65536")]
    size: usize,
    /// recv: measure this long after the warm-up; send: send for at most this long.
    #[arg(long, value_parser = natm_cli::cli::units::duration)]
    time: Duration,
    /// recv: discard deliveries during this long after the first.
    #[arg(long, default_value = "0s", value_parser = natm_cli::cli::units::duration)]
    warmup: Duration,
    /// QUIC certificate (DER): recv serves it, send trusts only it.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// QUIC private key (PKCS #8 DER), recv only.
    #[arg(long)]
    key: Option<PathBuf>,
}

/// A raw TCP byte stream as an [`Endpoint`]: deliveries are whatever one read returns.
struct TcpBytes {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Endpoint for TcpBytes {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.stream.write_all(msg)
    }
    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        match self.stream.read(&mut self.buf) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => Ok(Some(&self.buf[..n])),
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A natm connection and the host it lives on.
struct WithHost {
    _host: natm::ulib::Host,
    ep: Box<dyn Endpoint>,
}

impl Endpoint for WithHost {
    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.ep.send(msg)
    }
    fn recv(&mut self) -> io::Result<Option<&[u8]>> {
        self.ep.recv()
    }
    fn counters(&self) -> Option<String> {
        self.ep.counters()
    }
}

fn tcp_socket(addr: &SocketAddr, cc: &str) -> io::Result<Socket> {
    let s = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_tcp_congestion(cc.as_bytes())
        .map_err(|e| io::Error::new(e.kind(), format!("TCP congestion control {cc}: {e}")))?;
    Ok(s)
}

fn read_identity(a: &PeerArgs, need_key: bool) -> io::Result<super::quic::Identity> {
    let read = |p: &Option<PathBuf>, what: &str| {
        let p = p
            .as_ref()
            .ok_or_else(|| io::Error::other(format!("quic needs --{what}")))?;
        std::fs::read(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    Ok(super::quic::Identity {
        cert: read(&a.cert, "cert")?,
        key: if need_key {
            read(&a.key, "key")?
        } else {
            Vec::new()
        },
    })
}

/// Listen, say `ready` on stdout, accept one connection.
fn listen_accept(a: &PeerArgs, k: Kind) -> io::Result<Box<dyn Endpoint>> {
    let opts = StackOptions {
        poll: POLL,
        ..StackOptions::default()
    };
    let ready = || {
        println!("ready");
        io::stdout().flush()
    };
    match k {
        Kind::Tcp(cc) => {
            let s = tcp_socket(&a.addr, cc)?;
            s.set_reuse_address(true)?;
            s.bind(&a.addr.into())?;
            s.listen(1)?;
            let l: TcpListener = s.into();
            ready()?;
            let (stream, _) = l.accept()?;
            stream.set_read_timeout(Some(POLL))?;
            Ok(Box::new(TcpBytes {
                stream,
                buf: vec![0; 256 << 10],
            }))
        }
        Kind::Quic => {
            let id = read_identity(a, true)?;
            let rt = super::quic::runtime()?;
            let l = super::quic::Listener::bind(rt, a.addr, &id, &opts)?;
            ready()?;
            Ok(Box::new(l.accept(a.size, FIRST_DATA)?))
        }
        Kind::Natm(qos) => {
            let host = natm::ulib::Host::open(natm::ulib::HostConfig::default())
                .map_err(io::Error::from)?;
            let l = host.bind(a.addr, qos).map_err(io::Error::from)?;
            ready()?;
            let c = l.accept(Wait::For(FIRST_DATA)).map_err(io::Error::from)?;
            Ok(Box::new(WithHost {
                _host: host,
                ep: super::natm::endpoint(c, POLL, false),
            }))
        }
    }
}

/// Connect to the receiver.
fn dial(a: &PeerArgs, k: Kind) -> io::Result<Box<dyn Endpoint>> {
    let opts = StackOptions {
        poll: POLL,
        ..StackOptions::default()
    };
    match k {
        Kind::Tcp(cc) => {
            let s = tcp_socket(&a.addr, cc)?;
            s.connect_timeout(&a.addr.into(), FIRST_DATA)?;
            s.set_tcp_nodelay(true)?;
            let stream: TcpStream = s.into();
            stream.set_write_timeout(Some(Duration::from_secs(5)))?;
            Ok(Box::new(TcpBytes {
                stream,
                buf: Vec::new(),
            }))
        }
        Kind::Quic => {
            let id = read_identity(a, false)?;
            let rt = super::quic::runtime()?;
            Ok(Box::new(
                super::quic::dial(rt, a.addr, &id, &opts, a.size)?.0,
            ))
        }
        Kind::Natm(qos) => {
            let host = natm::ulib::Host::open(natm::ulib::HostConfig::default())
                .map_err(io::Error::from)?;
            let c = host.connect(a.addr, qos).map_err(io::Error::from)?;
            Ok(Box::new(WithHost {
                _host: host,
                ep: super::natm::endpoint(c, POLL, false),
            }))
        }
    }
}

/// Run one peer; the receiver prints one JSON line with what it measured.
pub(crate) fn peer(a: &PeerArgs) -> natm_cli::cli::CliResult {
    let k = kind(&a.stack)?;
    let fail =
        |e: io::Error| anyhow::Error::new(e).context(format!("loss-peer {} {}", a.role, a.stack));
    if a.role == "send" {
        let mut ep = dial(a, k).map_err(fail)?;
        let msg = vec![0x42u8; a.size];
        let until = Instant::now() + a.time;
        // The counters every few seconds on stderr: shown only if the transfer fails
        // (a receiver with no data), to tell a sender that stopped from one whose
        // data never arrived.
        let mut report_at = Instant::now() + COUNTERS_EVERY;
        while Instant::now() < until {
            if Instant::now() >= report_at {
                report_at += COUNTERS_EVERY;
                if let Some(c) = ep.counters() {
                    eprintln!("sender's counters: {c}");
                }
            }
            match ep.send(&msg) {
                Ok(()) => {}
                Err(e) if is_timeout(&e) => {}
                // The receiver leaves once it has measured; any other end is reported
                // (on stderr, which the experiment shows if the transfer failed).
                Err(e) => {
                    eprintln!("send ended: {e}");
                    break;
                }
            }
        }
        if let Some(c) = ep.counters() {
            eprintln!("sender's counters: {c}");
        }
        return Ok(());
    }
    let mut ep = listen_accept(a, k).map_err(fail)?;
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut from: Option<(Instant, u64)> = None;
    let mut total: u64 = 0;
    // The longest time between two deliveries after the warm-up (a path that stalls
    // the transfer, `scripts/black_hole.sh`).
    let mut last: Option<Instant> = None;
    let mut longest_gap = Duration::ZERO;
    loop {
        let now = Instant::now();
        match ep.recv().map_err(fail)? {
            Some(m) => {
                total += m.len() as u64;
                let t0 = *first.get_or_insert(now);
                if from.is_none() && now - t0 >= a.warmup {
                    from = Some((now, total));
                }
                if from.is_some() {
                    if let Some(l) = last {
                        longest_gap = longest_gap.max(now - l);
                    }
                    last = Some(now);
                }
            }
            None if first.is_none() && now - start > FIRST_DATA => {
                let counters = ep.counters().map(|c| format!(" ({c})")).unwrap_or_default();
                return Err(anyhow::anyhow!(
                    "loss-peer recv {}: no data{counters}",
                    a.stack
                ));
            }
            None => {}
        }
        if let Some((t, _)) = from {
            if now - t >= a.time {
                break;
            }
        }
    }
    let (t, b0) = from.unwrap_or((start, 0));
    let seconds = t.elapsed().as_secs_f64();
    let bytes = total - b0;
    // A stall still under way at the end counts to the end.
    if let Some(l) = last {
        longest_gap = longest_gap.max(l.elapsed());
    }
    let report = PeerReport {
        bps: bytes as f64 * 8.0 / seconds,
        bytes,
        seconds,
        longest_gap_ms: longest_gap.as_secs_f64() * 1e3,
    };
    println!(
        "{}",
        serde_json::to_string(&report).context("cannot write the report")?
    );
    Ok(())
}

/// What the receiving peer measured after its warm-up: one JSON line on its stdout.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PeerReport {
    /// Goodput, bit/s.
    bps: f64,
    bytes: u64,
    seconds: f64,
    /// The longest time between two deliveries after the warm-up, ms.
    longest_gap_ms: f64,
}

/// One transfer: start the receiver in b, wait for `ready`, start the sender in a,
/// wait for the receiver's report (at most `limit`), kill both.
fn transfer(
    net: &Net,
    stack: &str,
    cfg: &LossConfig,
    port: u16,
    certs: &Path,
    stop: &AtomicBool,
) -> anyhow::Result<f64> {
    let addr = format!("{}:{port}", net.addr_b);
    let common = |role: &str, time: Duration| -> Vec<String> {
        let mut v: Vec<String> = vec![
            "perf".into(),
            "loss-peer".into(),
            role.into(),
            "--stack".into(),
            stack.into(),
            "--addr".into(),
            addr.clone(),
            "--size".into(),
            cfg.size.to_string(),
            "--time".into(),
            format!("{}ms", time.as_millis()),
            "--cert".into(),
            certs.join("cert.der").display().to_string(),
        ];
        if role == "recv" {
            v.extend([
                "--warmup".into(),
                format!("{}ms", cfg.warmup.as_millis()),
                "--key".into(),
                certs.join("key.der").display().to_string(),
            ]);
        }
        v
    };
    let mut recv = net.spawn(&net.b, &common("recv", cfg.time))?;
    let out = recv.stdout.take().context("the receiver has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let limit = cfg.warmup + cfg.time + FIRST_DATA + Duration::from_secs(5);
    let deadline = Instant::now() + limit;
    let wait_line = |what: &str| -> anyhow::Result<String> {
        loop {
            if stop.load(Ordering::Relaxed) {
                anyhow::bail!("interrupted");
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => return Ok(l),
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => return Err(anyhow::anyhow!("no {what} from the receiver")),
            }
        }
    };
    let ready = wait_line("ready");
    if let Err(e) = ready.and_then(|l| {
        (l == "ready")
            .then_some(())
            .ok_or_else(|| anyhow::anyhow!("receiver said {l:?}"))
    }) {
        return Err(anyhow::anyhow!("{e:#}: {}", reap(recv)));
    }
    let send = match net.spawn(&net.a, &common("send", limit)) {
        Ok(s) => s,
        Err(e) => {
            reap(recv);
            return Err(e);
        }
    };
    let report = wait_line("report");
    let send_err = reap(send);
    let recv_err = reap(recv);
    if std::env::var_os("NATM_LOSS_COUNTERS").is_some() {
        eprintln!("{send_err}");
    }
    let line = report.map_err(|e| anyhow::anyhow!("{e:#}: {recv_err} {send_err}"))?;
    let report: PeerReport =
        serde_json::from_str(&line).with_context(|| format!("receiver report {line:?}"))?;
    Some(report.bps)
        .filter(|b| b.is_finite())
        .with_context(|| format!("receiver report without a finite rate: {line}"))
}

// ---------------------------------------------------------------------------
// The experiment.

/// One loss experiment.
#[derive(Debug, Clone)]
pub(crate) struct LossConfig {
    pub(crate) stacks: Vec<String>,
    /// Loss rates, percent.
    pub(crate) losses: Vec<f64>,
    /// Round-trip times the delay line adds; `[0]` alone: no delay line.
    pub(crate) rtts: Vec<Duration>,
    pub(crate) rate_bps: u64,
    pub(crate) size: usize,
    /// Loss strikes link packets (IP fragments) rather than whole datagrams.
    pub(crate) per_packet: bool,
    pub(crate) warmup: Duration,
    pub(crate) time: Duration,
    pub(crate) runs: usize,
}

/// One (RTT, stack, loss) point: each run's goodput, bit/s.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub(crate) rtt: Duration,
    pub(crate) stack: String,
    pub(crate) loss: f64,
    pub(crate) bps: Vec<f64>,
}

impl Point {
    pub(crate) fn goodput(&self) -> f64 {
        median(&self.bps).unwrap_or(f64::NAN)
    }
}

/// What the run found about the network, for the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct NetInfo {
    pub(crate) offloads_off: bool,
    pub(crate) bbr: bool,
    pub(crate) delay_line: bool,
    /// Per added RTT, the median RTT `ping` measured from a to b (ms), if it could.
    pub(crate) ping_ms: Vec<(Duration, Option<f64>)>,
}

/// The median of five pings from a to b through the path as it is now, ms.
fn ping(net: &Net) -> Option<f64> {
    let out = std::process::Command::new(netlab::which("ip")?)
        .args([
            "netns", "exec", &net.a, "ping", "-n", "-c", "5", "-i", "0.2", "-W", "2",
        ])
        .arg(net.addr_b.to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let times: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("time=")?.parse().ok())
        .collect();
    median(&times)
}

/// Run the experiment: build the network, measure every point, remove the network.
pub(crate) fn run(
    cfg: &LossConfig,
    mut tick: impl FnMut(&str),
) -> anyhow::Result<(Vec<Point>, NetInfo)> {
    netlab::check_prerequisites("natm-lab perf loss")?;
    for s in &cfg.stacks {
        kind(s)?;
    }
    let stop = netlab::interrupt_flag()?;
    let bbr = netlab::bbr_available();
    let stacks: Vec<&String> = cfg
        .stacks
        .iter()
        .filter(|s| bbr || kind(s).ok() != Some(Kind::Tcp("bbr")))
        .collect();
    let certs = std::env::temp_dir().join(format!("natm-loss-{}", std::process::id()));
    std::fs::create_dir_all(&certs)
        .with_context(|| format!("cannot create {}", certs.display()))?;
    let id = super::quic::Identity::generate()?;
    let written = std::fs::write(certs.join("cert.der"), &id.cert)
        .and_then(|()| std::fs::write(certs.join("key.der"), &id.key));
    let result = written
        .with_context(|| format!("cannot write the QUIC identity into {}", certs.display()))
        .and_then(|()| {
            let delay_line = cfg.rtts.iter().any(|r| !r.is_zero());
            let net = Net::create("loss", cfg.rate_bps, delay_line)?;
            let mut info = NetInfo {
                offloads_off: net.offloads_off,
                bbr,
                delay_line,
                ping_ms: Vec::new(),
            };
            for &rtt in &cfg.rtts {
                net.set_delay(rtt / 2)?;
                info.ping_ms.push((rtt, ping(&net)));
            }
            let mut points: Vec<Point> = cfg
                .rtts
                .iter()
                .flat_map(|&rtt| {
                    let stacks = &stacks;
                    cfg.losses.iter().flat_map(move |&loss| {
                        stacks.iter().map(move |s| Point {
                            rtt,
                            stack: (*s).clone(),
                            loss,
                            bps: Vec::new(),
                        })
                    })
                })
                .collect();
            let mut port = 20_000u16;
            for _ in 0..cfg.runs {
                let mut current = None;
                for p in &mut points {
                    if stop.load(Ordering::Relaxed) {
                        anyhow::bail!("interrupted; network namespaces removed");
                    }
                    net.set_delay(p.rtt / 2)?;
                    let per_mille = (p.loss * 10.0).round() as u32;
                    if current != Some(per_mille) {
                        net.set_loss(per_mille, cfg.per_packet)?;
                        current = Some(per_mille);
                    }
                    port = port.wrapping_add(1).max(20_000);
                    let bps = transfer(&net, &p.stack, cfg, port, &certs, &stop).map_err(|e| {
                        if stop.load(Ordering::Relaxed) {
                            anyhow::anyhow!("interrupted; network namespaces removed")
                        } else {
                            e.context(format!(
                                "{} at {} % loss, RTT + {} ms",
                                p.stack,
                                p.loss,
                                p.rtt.as_millis()
                            ))
                        }
                    })?;
                    p.bps.push(bps);
                    tick(&format!(
                        "loss {} {} % +{} ms",
                        p.stack,
                        p.loss,
                        p.rtt.as_millis()
                    ));
                }
            }
            Ok((points, info))
        });
    let _ = std::fs::remove_dir_all(&certs);
    result
}

/// The results as a table: goodput in Mbit/s, one row per loss rate, one block per
/// RTT; with tcp-bbr and natm-pp both there, natm-pp's ratio to BBR and to the ideal
/// (1 − p) · C.
fn table(r: &results::Loss) -> String {
    let (mut stacks, mut losses, mut rtts): (Vec<&str>, Vec<f64>, Vec<f64>) =
        (Vec::new(), Vec::new(), Vec::new());
    for p in &r.results {
        if !stacks.contains(&p.stack.as_str()) {
            stacks.push(&p.stack);
        }
        if !losses.contains(&p.loss_percent) {
            losses.push(p.loss_percent);
        }
        if !rtts.contains(&p.rtt_ms) {
            rtts.push(p.rtt_ms);
        }
    }
    let find = |rtt: f64, loss: f64, s: &str| {
        r.results
            .iter()
            .find(|p| p.rtt_ms == rtt && p.loss_percent == loss && p.stack == s)
    };
    let ratios = stacks.contains(&"natm-pp") && stacks.contains(&"tcp-bbr");
    let mut header: Vec<String> = vec!["loss".into()];
    if !r.path_rtts.is_empty() {
        header.insert(0, "RTT".into());
    }
    header.extend(stacks.iter().map(|s| (*s).to_string()));
    if ratios {
        header.extend(["pp/bbr".into(), "pp/(1-p)C".into()]);
    }
    let mut t = table::new(header.iter().map(String::as_str), 0);
    for &rtt in &rtts {
        for &loss in &losses {
            let mut row = vec![format!("{loss}%")];
            if let Some(pr) = r.path_rtts.iter().find(|x| x.added_ms == rtt) {
                row.insert(
                    0,
                    match pr.ping_ms {
                        Some(ms) => format!("+{rtt} ms ({ms:.1})"),
                        None => format!("+{rtt} ms"),
                    },
                );
            }
            for s in &stacks {
                row.push(find(rtt, loss, s).map_or("-".into(), |p| format!("{:.2}", p.bps / 1e6)));
            }
            if ratios {
                let pp = find(rtt, loss, "natm-pp").map_or(f64::NAN, |p| p.bps);
                let bbr = find(rtt, loss, "tcp-bbr").map_or(f64::NAN, |p| p.bps);
                let ideal = (1.0 - loss / 100.0) * r.link_bps as f64;
                row.push(format!("{:.2}", pp / bbr));
                row.push(format!("{:.2}", pp / ideal));
            }
            t.add_row(row);
        }
    }
    let path = if r.path_rtts.is_empty() {
        String::new()
    } else {
        "; RTT: added by the delay line (ping's median through the path, ms)".into()
    };
    let mut out = format!(
        "goodput of one transfer ({} B messages) through a {} Mbit/s tbf link between two \
         namespaces, random loss on the data direction; {} run(s) of {} s after {} s; medians, \
         Mbit/s{path}\n{}",
        r.size,
        r.link_bps as f64 / 1e6,
        r.runs,
        r.time_s,
        r.warmup_s,
        table::render(&t)
    );
    if !r.bbr {
        out.push_str("tcp-bbr left out: the kernel has no BBR (modprobe tcp_bbr failed)\n");
    }
    if !r.offloads_off {
        out.push_str("note: segmentation offloads stayed on (no ethtool); tbf saw large packets\n");
    }
    out
}

/// The results as their document.
fn result(cfg: &LossConfig, info: &NetInfo, points: &[Point]) -> results::Loss {
    results::Loss {
        bbr: info.bbr,
        experiment: "loss".into(),
        link_bps: cfg.rate_bps,
        machine: results::Machine::now(),
        offloads_off: info.offloads_off,
        path_rtts: if info.delay_line {
            info.ping_ms
                .iter()
                .map(|&(rtt, ping_ms)| results::PathRtt {
                    added_ms: rtt.as_secs_f64() * 1e3,
                    ping_ms,
                })
                .collect()
        } else {
            Vec::new()
        },
        results: points
            .iter()
            .map(|p| results::LossRow {
                bps: p.goodput(),
                loss_percent: p.loss,
                of_link: p.goodput() / cfg.rate_bps as f64,
                per_run_bps: p.bps.clone(),
                rtt_ms: p.rtt.as_secs_f64() * 1e3,
                stack: p.stack.clone(),
            })
            .collect(),
        runs: cfg.runs,
        size: cfg.size,
        time_s: cfg.time.as_secs_f64(),
        warmup_s: cfg.warmup.as_secs_f64(),
    }
}

/// Goodput against loss, one line per stack.
fn figure(path: &Path, cfg: &LossConfig, points: &[Point]) -> anyhow::Result<()> {
    let mut names: Vec<(&str, Duration)> = Vec::new();
    for p in points {
        if !names.contains(&(p.stack.as_str(), p.rtt)) {
            names.push((&p.stack, p.rtt));
        }
    }
    let several = cfg.rtts.len() > 1 || cfg.rtts.iter().any(|r| !r.is_zero());
    let mut lines: Vec<Line> = names
        .iter()
        .enumerate()
        .map(|(i, (s, rtt))| Line {
            label: if several {
                format!("{s}, +{} ms", rtt.as_millis())
            } else {
                (*s).to_string()
            },
            points: points
                .iter()
                .filter(|p| p.stack == *s && p.rtt == *rtt)
                .map(|p| (p.loss, p.goodput() / 1e6))
                .collect(),
            colour: i,
            mark: Mark::Measured,
        })
        .collect();
    let (lo, hi) = cfg
        .losses
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &l| {
            (a.min(l), b.max(l))
        });
    lines.push(Line {
        label: "link rate".into(),
        points: vec![
            (lo, cfg.rate_bps as f64 / 1e6),
            (hi, cfg.rate_bps as f64 / 1e6),
        ],
        colour: 7,
        mark: Mark::Curve,
    });
    plot::both(path, |p| {
        plot::xy(
            p,
            "goodput of one transfer against random loss (seed 000 §5.3.3)",
            Axis {
                label: "random loss (%)",
                log: false,
                from_zero: true,
            },
            Axis {
                label: "goodput (Mbit/s)",
                log: false,
                from_zero: true,
            },
            plot::Legend::LowerLeft,
            &lines,
        )
    })
}

/// `natm-lab perf loss`.
#[derive(Debug, clap::Args)]
pub(crate) struct LossArgs {
    /// Stacks, comma-separated: natm-pp, natm-window, tcp-cubic, tcp-bbr, quic; and
    /// natm-pp-4k, natm-pp-32k, natm-pp-auto (packet-pair with the TPDU size fixed at
    /// 4 or 32 KiB, or adaptive).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "natm-pp,natm-window,tcp-cubic,tcp-bbr,quic"
    )]
    stacks: Vec<String>,
    /// Random loss rates in percent, comma-separated (resolution 0.1 %).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,5,10")]
    losses: Vec<f64>,
    /// Round-trip times to add between the namespaces, comma-separated (e.g.
    /// `0,20ms`): a third namespace between them holds every frame for half of it each
    /// way (a delay line; no netem). With any non-zero RTT every point goes through
    /// the line, the zero one included. Default: no delay line.
    #[arg(long, value_delimiter = ',', default_value = "0", value_parser = natm_cli::cli::units::duration)]
    rtt: Vec<Duration>,
    /// Link rate (tbf).
    #[arg(long, default_value = "100Mbps", value_parser = natm_cli::cli::units::rate)]
    rate: u64,
    /// Message size the sender writes.
    #[arg(long, default_value = "64KiB", value_parser = natm_cli::cli::units::bytes)]
    size: u64,
    /// What the loss strikes: `datagram` (whole IP datagrams after reassembly: a natm
    /// TPDU of any size is one loss) or `packet` (each link packet, so a 32 KiB TPDU
    /// sent as 23 IP fragments is lost if any of them is).
    #[arg(long, default_value = "datagram", value_parser = ["datagram", "packet"])]
    loss_unit: String,
    #[command(flatten)]
    out: super::Output,
}

impl Experiment for LossArgs {
    type Result = results::Loss;
    type Figure = (LossConfig, Vec<Point>);

    fn output(&self) -> &OutputArgs {
        &self.out.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)> {
        let o = &self.out;
        if o.runs == 0 || o.time.is_zero() || self.rate == 0 {
            anyhow::bail!("--runs, --time and --rate must be positive");
        }
        if self.losses.is_empty() || self.losses.iter().any(|l| !(0.0..=100.0).contains(l)) {
            anyhow::bail!("--losses are percentages from 0 to 100");
        }
        let cfg = LossConfig {
            stacks: self.stacks.iter().map(|s| s.trim().to_string()).collect(),
            losses: self.losses.clone(),
            rtts: {
                let mut r = self.rtt.clone();
                r.dedup();
                r
            },
            rate_bps: self.rate,
            size: super::check_size(self.size)?,
            per_packet: self.loss_unit == "packet",
            warmup: o.warmup,
            time: o.time,
            runs: o.runs,
        };
        if self.rtt.is_empty() || self.rtt.iter().any(|r| *r > Duration::from_secs(1)) {
            anyhow::bail!("--rtt takes round-trip times from 0 to 1s");
        }
        pb.set_length((cfg.runs * cfg.rtts.len() * cfg.losses.len() * cfg.stacks.len()) as u64);
        let (points, info) = run(&cfg, |m| {
            pb.set_message(m.to_string());
            pb.inc(1);
        })?;
        Ok((result(&cfg, &info, &points), (cfg, points)))
    }

    fn table(r: &Self::Result) -> String {
        table(r)
    }

    fn figure(_: &Self::Result, (cfg, points): &Self::Figure, path: &Path) -> anyhow::Result<()> {
        figure(path, cfg, points)
    }
}
