//! `natm-lab perf scale`: many concurrent connections in one process (issue 17's goal: 10,000
//! VCs, the per-VC cost flat as the count grows).
//!
//! Per step (a count of connections), this process opens a host and starts a second
//! process of this binary (`natm-lab perf scale-peer`, hidden) with a direct-mode listener
//! on loopback; this one connects `count` times with `--parallel` callers, so each
//! process holds one end of every connection (two simplex VCs, one UDP socket per end).
//! Two processes, not one: both ends in one would need two descriptors per connection
//! under one RLIMIT_NOFILE, and where the hard limit is 20,000 and the process may not
//! raise it, 10,000 connections would not fit. It measures the setup rate; resident
//! memory (`VmRSS`) and open descriptors of both processes per connection once all
//! are up; then every connection sends for `--time` after a warm-up (at least `--warmup`,
//! and until every connection was offered a message), round robin from
//! one thread here, received in the peer by one thread that waits on all of them
//! through wakers ([`Connection::poll_recv_chunk`]): the aggregate goodput, each
//! connection's own (min / median / max) and the CPU time of both processes per byte.
//! Bytes sent and not yet delivered are capped across all connections ([`IN_FLIGHT`];
//! the peer reports what it received every few milliseconds) so that the send buffers
//! of 10,000 VCs are not all filled at once. Last, every connection is closed and the
//! host dropped; the descriptors this process holds afterwards are reported beside
//! those it held before.
//!
//! RLIMIT_NOFILE is raised to the hard limit in both processes, and further where the
//! process may (CAP_SYS_RESOURCE), and reported.
//!
//! Each count runs again over kernel TCP right after natm's (`--stacks`, [`tcp`]): the
//! same processes, sender and cap, one TCP connection for each natm one, so that what
//! a byte costs at 10,000 connections against 100 has a reference measured beside it.

mod tcp;

use natm::ulib::Wait;
use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use natm::ulib::{Connection, Error, Host, HostConfig};

use super::experiment::{Experiment, OutputArgs};
use super::results;
use super::stats::{median, percentile};
use crate::plot::{self, Axis, Line, Mark};
use natm_cli::cli::table;

/// Bytes sent and not yet received, across all connections, that the sender allows.
const IN_FLIGHT: u64 = 16 << 20;

/// Refusals for a full listen backlog (cause 17) a caller tries again past.
const MAX_BUSY: u64 = 100_000;

/// Descriptors a process keeps beyond one per connection (listener, epoll, timers,
/// the harness's own).
const FD_MARGIN: u64 = 256;

/// How often the peer says how much it has received.
const REPORT: Duration = Duration::from_millis(5);

/// `natm-lab perf scale-peer` (hidden): the accepting and receiving end of `scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct PeerArgs {
    /// Connections to accept.
    #[arg(long)]
    count: usize,
    /// QoS of the listener.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// What the connections are.
    #[arg(long, value_enum, default_value_t = Stack::Natm)]
    stack: Stack,
}

/// What a step's connections are: natm's, or the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Stack {
    /// natm connections of `--qos` (direct mode on loopback).
    Natm,
    /// Kernel TCP connections (cubic, `TCP_NODELAY`) on loopback.
    Tcp,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Natm => "natm",
            Stack::Tcp => "tcp",
        }
    }
}

/// `natm-lab perf scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScaleArgs {
    /// Connection counts, comma-separated; each is a fresh pair of hosts.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    counts: Vec<usize>,
    /// QoS of every connection.
    #[arg(long, default_value = "reliable")]
    qos: String,
    /// Message size each connection sends.
    #[arg(long, default_value = "4KiB", value_parser = natm_cli::cli::units::bytes)]
    size: u64,
    /// Callers setting up connections at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Send on every connection for this long after the warm-up.
    #[arg(long, default_value = "2s", value_parser = natm_cli::cli::units::duration)]
    time: Duration,
    /// Sending before the measurement starts.
    #[arg(long, default_value = "500ms", value_parser = natm_cli::cli::units::duration)]
    warmup: Duration,
    /// Stacks measured at each count, in this order: natm, and kernel TCP beside it.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "natm,tcp")]
    stacks: Vec<Stack>,
    #[command(flatten)]
    to: OutputArgs,
}

// ---------------------------------------------------------------------------
// What /proc says about this process.

/// Open descriptors of this process.
pub(crate) fn open_fds() -> u64 {
    fds_of("self")
}

/// Open descriptors of process `pid` ("self" for this one).
fn fds_of(pid: &str) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// A field of /proc/self/status (VmRSS in kB, Threads…) as a number.
fn status_field(name: &str) -> u64 {
    status_of("self", name)
}

/// A field of /proc/<pid>/status as a number.
fn status_of(pid: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::to_owned))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time of this process (user + system, every thread), ns.
fn cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU time of process `pid`: utime + stime of /proc/<pid>/stat (USER_HZ = 100), ns.
fn cpu_ns_of(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let rest = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) * 10_000_000
}

/// Raise RLIMIT_NOFILE's soft limit to the hard one, and both to `need` if that is
/// higher and the process may (root); the soft limit in force after.
fn raise_nofile(need: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    let hard = cur.maximum.unwrap_or(u64::MAX);
    let want = if need > hard {
        Rlimit {
            current: Some(need),
            maximum: Some(need),
        }
    } else {
        Rlimit {
            current: Some(hard),
            maximum: cur.maximum,
        }
    };
    if setrlimit(Resource::Nofile, want).is_err() {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(hard),
                maximum: cur.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------
// Waiting on many connections at once.

/// Connections with something to receive, in the order their wakers fired.
#[derive(Default)]
struct Ready {
    queue: Mutex<(VecDeque<usize>, Vec<bool>)>,
    cv: Condvar,
}

impl Ready {
    fn with(n: usize) -> Arc<Self> {
        Arc::new(Ready {
            queue: Mutex::new(((0..n).collect(), vec![true; n])),
            cv: Condvar::new(),
        })
    }

    fn push(&self, i: usize) {
        let Ok(mut q) = self.queue.lock() else { return };
        if !std::mem::replace(&mut q.1[i], true) {
            q.0.push_back(i);
            self.cv.notify_one();
        }
    }

    /// The next ready connection, waiting at most `wait`.
    fn pop(&self, wait: Duration) -> Option<usize> {
        let mut q = self.queue.lock().ok()?;
        if q.0.is_empty() {
            q = self.cv.wait_timeout(q, wait).ok()?.0;
        }
        let i = q.0.pop_front()?;
        q.1[i] = false;
        Some(i)
    }
}

/// The waker of connection `i`: marks it ready.
struct Mark1 {
    i: usize,
    ready: Arc<Ready>,
}

impl Wake for Mark1 {
    fn wake(self: Arc<Self>) {
        self.ready.push(self.i);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.push(self.i);
    }
}

// ---------------------------------------------------------------------------
// One step.

/// What the table adds under one step of `stack`: a longer warm-up, connections that
/// carried nothing, busy refusals, send errors.
fn step_notes(stack: &str, s: &results::ScaleStep, warmup_s: f64) -> String {
    let mut out = String::new();
    let n = s.connections;
    if s.warmup_s > warmup_s + 0.05 {
        out += &format!(
            "{stack}, {n} connections: warmed up for {:.1} s, until every connection had \
             been sent to\n",
            s.warmup_s
        );
    }
    if s.connections_with_data < n {
        out += &format!(
            "{stack}, {n} connections: only {} carried data during the measurement\n",
            s.connections_with_data
        );
    }
    if s.busy_refusals > 0 {
        out += &format!(
            "{stack}, {n} connections: {} connects refused busy (listen backlog full) and \
             tried again\n",
            s.busy_refusals
        );
    }
    if s.send_errors > 0 {
        out += &format!("{stack}, {n} connections: {} send errors\n", s.send_errors);
    }
    if s.fds_after > s.fds_before {
        out += &format!(
            "{stack}, {n} connections: {} descriptors open before, {} after every \
             connection closed\n",
            s.fds_before, s.fds_after
        );
    }
    out
}

/// `x` with three significant digits (0.213, 4.01, 50.2, 5,015 → 5015).
fn three_digits(x: f64) -> String {
    let decimals = if x < 1.0 {
        3
    } else if x < 10.0 {
        2
    } else if x < 100.0 {
        1
    } else {
        0
    };
    format!("{x:.decimals$}")
}

/// What one step measured.
struct Step {
    count: usize,
    setup: Duration,
    fds_before: u64,
    fds_after: u64,
    /// Descriptors both processes gained for the connections.
    fds_added: u64,
    /// Resident memory both processes gained for the connections, KiB: once up, and
    /// at the end of the sending phase.
    rss_up_kib: u64,
    rss_loaded_kib: u64,
    threads: u64,
    /// Bytes each connection delivered during the measurement.
    per_conn: Vec<u64>,
    seconds: f64,
    cpu_ns: u64,
    send_errors: u64,
    busy: u64,
    /// The sending ends' bytes sent the first time, bytes retransmitted, retransmission timeouts and
    /// median smoothed round trip (ms), read at the end of the measurement.
    retx: (u64, u64, u64, f64),
    /// TPDUs retransmitted by a fast retransmission, the head check, a timeout; and
    /// of the last two, those found spurious.
    retx_kinds: [u64; 5],
    /// TPDUs the sending ends sent.
    tpdus: u64,
    /// How long the warm-up lasted (at least `--warmup`).
    warmup: Duration,
}

/// Set up `count` connections from `client` to `addr` with `parallel` callers; the
/// caller ends, and the refusals for a full backlog tried again.
fn connect_all(
    client: &Host,
    addr: std::net::SocketAddr,
    qos: &str,
    count: usize,
    parallel: usize,
) -> anyhow::Result<(Vec<Connection>, u64)> {
    let parallel = parallel.clamp(1, count.max(1));
    let callers: Vec<_> = (0..parallel)
        .map(|k| {
            let (h, q) = (client.clone(), qos.to_owned());
            let n = count / parallel + usize::from(k < count % parallel);
            thread::spawn(move || -> Result<(Vec<Connection>, u64), Error> {
                let mut busy = 0u64;
                let mut v = Vec::with_capacity(n);
                while v.len() < n {
                    match h.connect(addr, &q) {
                        Ok(c) => v.push(c),
                        // The listener's backlog is full: its accepting thread is
                        // behind; try again as a client of a busy server would.
                        Err(Error::Refused { cause: 17, .. }) if busy < MAX_BUSY => {
                            busy += 1;
                            thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((v, busy))
            })
        })
        .collect();
    let mut ends = Vec::with_capacity(count);
    let mut busy = 0;
    for c in callers {
        let (e, b) = c
            .join()
            .map_err(|_| anyhow::anyhow!("a caller thread panicked"))?
            .map_err(|e| anyhow::anyhow!("connect: {e}"))?;
        ends.extend(e);
        busy += b;
    }
    Ok((ends, busy))
}

/// Receive on every connection until `stop`, adding what arrives to its counter and to
/// `received`.
fn receive_all(ends: &[Connection], bytes: &[AtomicU64], received: &AtomicU64, stop: &AtomicBool) {
    let ready = Ready::with(ends.len());
    let wakers: Vec<Waker> = (0..ends.len())
        .map(|i| {
            Waker::from(Arc::new(Mark1 {
                i,
                ready: ready.clone(),
            }))
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let Some(i) = ready.pop(Duration::from_millis(20)) else {
            continue;
        };
        let mut cx = Context::from_waker(&wakers[i]);
        // A few chunks per turn, then the next connection: fair among them.
        let mut full_turn = true;
        for _ in 0..16 {
            match ends[i].poll_recv_chunk(&mut cx) {
                Poll::Ready(Ok(Some(c))) => {
                    let n = c.data.len() as u64;
                    bytes[i].fetch_add(n, Ordering::Relaxed);
                    received.fetch_add(n, Ordering::Relaxed);
                }
                Poll::Ready(_) | Poll::Pending => {
                    full_turn = false;
                    break;
                }
            }
        }
        // Pending registered the waker; after a full turn there may be more, so the
        // connection goes to the back of the queue.
        if full_turn {
            ready.push(i);
        }
    }
}

/// Snapshot of every counter.
fn snapshot(bytes: &[AtomicU64]) -> Vec<u64> {
    bytes.iter().map(|b| b.load(Ordering::Relaxed)).collect()
}

/// `natm-lab perf scale-peer`: say `ready <addr>`, accept `--count` connections, say
/// `up`, then receive on all of them, saying `rx <bytes>` every few milliseconds; on
/// `mark` from stdin note each connection's count, on `stop` print each one's bytes
/// since the mark (`bytes <n> <n> …`) and end.
pub(crate) fn peer(a: &PeerArgs) -> natm_cli::cli::CliResult {
    raise_nofile(a.count as u64 + FD_MARGIN + open_fds());
    let out = std::io::stdout();
    let until =
        Instant::now() + Duration::from_secs(60) + Duration::from_millis(a.count as u64 * 5);
    match a.stack {
        Stack::Natm => {
            let host = Host::open(HostConfig {
                sigd_socket: None,
                ..super::host_config()
            })?;
            let listener = host.bind("127.0.0.1:0", &a.qos)?;
            writeln!(out.lock(), "ready {}", listener.local_addr()?)?;
            let mut ends = Vec::with_capacity(a.count);
            while ends.len() < a.count {
                if Instant::now() > until {
                    anyhow::bail!("{} of {} connections accepted in time", ends.len(), a.count);
                }
                match listener.accept(Wait::For(Duration::from_millis(200))) {
                    Ok(c) => ends.push(c),
                    Err(Error::TimedOut) => {}
                    Err(e) => return Err(anyhow::anyhow!("accept: {e}")),
                }
            }
            serve(ends.len(), |bytes, received, stop| {
                receive_all(&ends, bytes, received, stop);
                Ok(())
            })?;
            for c in &ends {
                c.abort();
            }
        }
        Stack::Tcp => {
            let listener = tcp::listen()?;
            writeln!(out.lock(), "ready {}", listener.local_addr()?)?;
            let ends = tcp::accept_all(&listener, a.count, until)?;
            serve(ends.len(), |bytes, received, stop| {
                tcp::receive_all(&ends, bytes, received, stop).context("TCP receive")
            })?;
        }
    }
    Ok(())
}

/// The peer's part once its `count` connections are up: say `up`, run `receive` on a
/// thread of its own (it counts what each connection delivers, until told to stop),
/// and answer the experiment's commands (`mark`, `stop`) and report `rx` meanwhile.
fn serve(
    count: usize,
    receive: impl FnOnce(&[AtomicU64], &AtomicU64, &AtomicBool) -> anyhow::Result<()> + Send,
) -> natm_cli::cli::CliResult {
    let out = std::io::stdout();
    writeln!(out.lock(), "up")?;
    let bytes: Vec<AtomicU64> = (0..count).map(|_| AtomicU64::new(0)).collect();
    let received = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (cmd_tx, cmd_rx) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { break };
            if cmd_tx.send(l).is_err() {
                break;
            }
        }
    });
    thread::scope(|s| -> natm_cli::cli::CliResult {
        let receiver = s.spawn(|| receive(&bytes, &received, &stop));
        let mut mark = vec![0u64; count];
        let result = loop {
            match cmd_rx.recv_timeout(REPORT) {
                Ok(c) if c == "mark" => mark = snapshot(&bytes),
                Ok(c) if c == "stop" => {
                    let now = snapshot(&bytes);
                    let diff: Vec<String> = now
                        .iter()
                        .zip(&mark)
                        .map(|(n, m)| (n - m).to_string())
                        .collect();
                    break writeln!(out.lock(), "bytes {}", diff.join(" "));
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                // The experiment is gone: end.
                Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
            }
            if receiver.is_finished() {
                break Ok(());
            }
            if writeln!(out.lock(), "rx {}", received.load(Ordering::Relaxed)).is_err() {
                break Ok(());
            }
        };
        stop.store(true, Ordering::Relaxed);
        receiver
            .join()
            .map_err(|_| anyhow::anyhow!("the receiving thread panicked"))??;
        Ok(result?)
    })
}

/// The peer process of one step, killed by its id on drop.
struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
    received: Arc<AtomicU64>,
}

impl Peer {
    fn start(a: &ScaleArgs, count: usize, stack: Stack) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("own executable")?;
        let mut child = Command::new(exe)
            .args([
                "perf",
                "scale-peer",
                "--count",
                &count.to_string(),
                "--qos",
                &a.qos,
                "--stack",
                stack.name(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start natm-lab perf scale-peer")?;
        let out = child.stdout.take().context("the peer has no stdout")?;
        let (tx, lines) = mpsc::channel();
        let received = Arc::new(AtomicU64::new(0));
        let r = received.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(l) = line else { break };
                if let Some(n) = l.strip_prefix("rx ").and_then(|n| n.parse().ok()) {
                    r.store(n, Ordering::Relaxed);
                } else if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(Peer {
            child,
            lines,
            received,
        })
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The peer's next line other than `rx`, waiting at most `wait`.
    fn line(&self, wait: Duration) -> anyhow::Result<String> {
        self.lines
            .recv_timeout(wait)
            .map_err(|_| anyhow::anyhow!("no answer from natm-lab perf scale-peer"))
    }

    fn say(&mut self, what: &str) -> anyhow::Result<()> {
        let i = self.child.stdin.as_mut().context("the peer has no stdin")?;
        writeln!(i, "{what}")?;
        i.flush()?;
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Longest a step's warm-up waits for every connection to be offered a message.
const WARMUP_MOST: Duration = Duration::from_secs(60);

/// The sending ends of one step.
enum Senders {
    Natm { client: Host, ends: Vec<Connection> },
    Tcp(Vec<std::net::TcpStream>),
}

impl Senders {
    fn len(&self) -> usize {
        match self {
            Senders::Natm { ends, .. } => ends.len(),
            Senders::Tcp(ends) => ends.len(),
        }
    }

    /// Offer `msg` to connection `i` without waiting: the octets it took (0 when its
    /// buffer is full), `None` on a send error.
    fn offer(&self, i: usize, msg: &[u8]) -> Option<u64> {
        match self {
            Senders::Natm { ends, .. } => match ends[i].send(msg, Wait::No) {
                Ok(()) => Some(msg.len() as u64),
                Err(Error::WouldBlock(_)) => Some(0),
                Err(_) => None,
            },
            Senders::Tcp(ends) => tcp::offer(&ends[i], msg).ok(),
        }
    }

    /// The natm ends' retransmission figures ([`Step::retx`], [`Step::retx_kinds`],
    /// [`Step::tpdus`]); none for TCP's.
    fn retransmissions(&self) -> ((u64, u64, u64, f64), [u64; 5], u64) {
        let Senders::Natm { ends, .. } = self else {
            return ((0, 0, 0, 0.0), [0; 5], 0);
        };
        // One read of the socket table for all (`stats()` on each read it once per
        // connection: O(n²), minutes at 10,000, after the measurement).
        let stats = Connection::stats_of(ends);
        let mut rtts: Vec<f64> = stats
            .iter()
            .filter_map(|s| s.srtt.map(|d| d.as_secs_f64() * 1e3))
            .collect();
        rtts.sort_by(f64::total_cmp);
        let retx = (
            stats.iter().map(|s| s.tx.bytes_sent).sum(),
            stats.iter().map(|s| s.tx.bytes_retransmitted).sum(),
            stats.iter().map(|s| s.tx.timeouts).sum(),
            median(&rtts).unwrap_or(0.0),
        );
        let kinds = stats.iter().fold([0; 5], |k, s| {
            [
                k[0] + s.tx.retx_fast,
                k[1] + s.tx.retx_head,
                k[2] + s.tx.retx_timeout,
                k[3] + s.tx.retx_head_spurious,
                k[4] + s.tx.retx_timeout_spurious,
            ]
        });
        (retx, kinds, stats.iter().map(|s| s.tx.tpdus_sent).sum())
    }

    /// Close every connection; a natm host lingers until its ends are gone.
    fn close(self) {
        match self {
            Senders::Natm { client, ends } => {
                for c in &ends {
                    c.abort();
                }
                drop(ends);
                client.linger(Duration::from_secs(10));
            }
            Senders::Tcp(ends) => drop(ends),
        }
    }
}

fn one_step(a: &ScaleArgs, count: usize, stack: Stack) -> anyhow::Result<Step> {
    let fds_before = open_fds();
    let rss_before = status_field("VmRSS");
    let client = match stack {
        Stack::Natm => Some(Host::open(HostConfig {
            sigd_socket: None,
            ..super::host_config()
        })?),
        Stack::Tcp => None,
    };
    let mut peer = Peer::start(a, count, stack)?;
    let ready = peer.line(Duration::from_secs(10))?;
    let addr: std::net::SocketAddr = ready
        .strip_prefix("ready ")
        .and_then(|x| x.parse().ok())
        .with_context(|| format!("the peer said {ready:?}"))?;
    let pid = peer.pid();
    let (peer_fds0, peer_rss0) = (fds_of(&pid), status_of(&pid, "VmRSS"));
    let t0 = Instant::now();
    let (tx_ends, busy) = match client {
        Some(client) => {
            let (ends, busy) = connect_all(&client, addr, &a.qos, count, a.parallel)
                .with_context(|| format!("setting up {count} connections"))?;
            (Senders::Natm { client, ends }, busy)
        }
        None => (
            Senders::Tcp(
                tcp::connect_all(addr, count, a.parallel)
                    .with_context(|| format!("setting up {count} TCP connections"))?,
            ),
            0,
        ),
    };
    let up = peer.line(Duration::from_secs(60) + Duration::from_millis(count as u64 * 5))?;
    anyhow::ensure!(up == "up", "the peer said {up:?}");
    let setup = t0.elapsed();
    let fds_added = (open_fds() + fds_of(&pid)).saturating_sub(fds_before + peer_fds0);
    let rss = || status_field("VmRSS") + status_of(&pid, "VmRSS");
    let rss_up_kib = rss().saturating_sub(rss_before + peer_rss0);
    let threads = status_field("Threads") + status_of(&pid, "Threads");
    let peer_pid = peer.child.id();

    let msg = vec![0x5au8; a.size as usize];
    let start = Instant::now();
    // The warm-up lasts at least `--warmup`, and until every connection was offered a
    // message: what a connection's first data costs (its buffers' first touch, 11 %
    // of the samples at 100,000) stays out of the measurement. Bounded: a step whose
    // round never ends is measured after `WARMUP_MOST` all the same.
    let from = start + a.warmup;
    let mut to = None;
    let mut measured_from = None;
    let mut rounds = 0u64;
    let mut sent = 0u64;
    let mut send_errors = 0u64;
    let mut cpu0 = None;
    let mut i = 0usize;
    while to.is_none_or(|t| Instant::now() < t) {
        let now = Instant::now();
        if cpu0.is_none() && now >= from && (rounds > 0 || now >= from + WARMUP_MOST) {
            peer.say("mark")?;
            cpu0 = Some(cpu_ns() + cpu_ns_of(peer_pid));
            measured_from = Some(now);
            to = Some(now + a.time);
        }
        if sent.saturating_sub(peer.received.load(Ordering::Relaxed)) >= IN_FLIGHT {
            thread::sleep(Duration::from_micros(200));
            continue;
        }
        match tx_ends.offer(i, &msg) {
            Some(n) => sent += n,
            None => send_errors += 1,
        }
        i = (i + 1) % tx_ends.len();
        if i == 0 {
            rounds += 1;
        }
    }
    let warmup = measured_from.map_or(a.warmup, |m| m - start);
    peer.say("stop")?;
    let cpu_ns = (cpu_ns() + cpu_ns_of(peer_pid)).saturating_sub(cpu0.unwrap_or(0));
    let rss_loaded_kib = rss().saturating_sub(rss_before + peer_rss0);
    let counts = peer.line(Duration::from_secs(10))?;
    let per_conn: Vec<u64> = counts
        .strip_prefix("bytes")
        .with_context(|| format!("the peer said {counts:?}"))?
        .split_whitespace()
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    let (retx, retx_kinds, tpdus) = tx_ends.retransmissions();
    tx_ends.close();
    let _ = peer.child.wait();
    drop(peer);
    // The driver thread sees its engine gone at its next wake-up.
    let until = Instant::now() + Duration::from_secs(5);
    while open_fds() > fds_before && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
    Ok(Step {
        count,
        setup,
        fds_before,
        fds_after: open_fds(),
        fds_added,
        rss_up_kib,
        rss_loaded_kib,
        threads,
        per_conn,
        seconds: a.time.as_secs_f64(),
        warmup,
        cpu_ns,
        send_errors,
        busy,
        retx,
        retx_kinds,
        tpdus,
    })
}

fn row(s: &Step) -> results::ScaleStep {
    let n = s.count.max(1) as f64;
    let mut bps: Vec<f64> = s
        .per_conn
        .iter()
        .map(|&b| b as f64 * 8.0 / s.seconds)
        .collect();
    bps.sort_by(f64::total_cmp);
    let total: u64 = s.per_conn.iter().sum();
    results::ScaleStep {
        aggregate_bps: total as f64 * 8.0 / s.seconds,
        busy_refusals: s.busy,
        connections: s.count,
        connections_with_data: s.per_conn.iter().filter(|&&b| b > 0).count(),
        cpu_ms_per_mb: if total > 0 {
            s.cpu_ns as f64 / 1e6 / (total as f64 / 1e6)
        } else {
            f64::NAN
        },
        fds_after: s.fds_after,
        fds_before: s.fds_before,
        fds_per_connection: s.fds_added as f64 / n,
        per_connection_bps_max: bps.last().copied().unwrap_or(0.0),
        per_connection_bps_median: median(&bps).unwrap_or(0.0),
        per_connection_bps_min: bps.first().copied().unwrap_or(0.0),
        per_connection_bps_p1: percentile(&bps, 0.01).unwrap_or(0.0),
        rss_kib_per_connection_idle: s.rss_up_kib as f64 / n,
        rss_kib_per_connection_loaded: s.rss_loaded_kib as f64 / n,
        send_errors: s.send_errors,
        setup_s: s.setup.as_secs_f64(),
        setups_per_s: n / s.setup.as_secs_f64().max(1e-9),
        threads: s.threads,
        retransmitted_share: if s.retx.0 + s.retx.1 > 0 {
            s.retx.1 as f64 / (s.retx.0 + s.retx.1) as f64
        } else {
            0.0
        },
        retransmission_timeouts: s.retx.2,
        median_srtt_ms: s.retx.3,
        retransmitted_tpdus_fast: s.retx_kinds[0],
        retransmitted_tpdus_head: s.retx_kinds[1],
        retransmitted_tpdus_timeout: s.retx_kinds[2],
        spurious_tpdus_head: s.retx_kinds[3],
        spurious_tpdus_timeout: s.retx_kinds[4],
        octets_per_tpdu: s.retx.0 as f64 / s.tpdus.max(1) as f64,
        warmup_s: s.warmup.as_secs_f64(),
    }
}

impl Experiment for ScaleArgs {
    type Result = results::Scale;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, pb: &ProgressBar) -> anyhow::Result<(Self::Result, ())> {
        if self.counts.is_empty() || self.counts.contains(&0) {
            anyhow::bail!("--counts are positive connection counts");
        }
        if self.time.is_zero() || self.size == 0 {
            anyhow::bail!("--time and --size must be positive");
        }
        if self.stacks.is_empty() {
            anyhow::bail!("--stacks names natm, tcp or both");
        }
        let size = super::check_size(self.size)?;
        let most = *self.counts.iter().max().unwrap_or(&1) as u64;
        // A socket per VC end, or one port per host whatever the count; a TCP
        // connection's end is a socket.
        let per_vc = super::host_config().engine.ports_in_use() == natm::ulib::Ports::PerVc;
        let per_end = per_vc || self.stacks.contains(&Stack::Tcp);
        let need = if per_end { most } else { 0 } + FD_MARGIN + open_fds();
        let nofile = raise_nofile(need);
        if need > nofile {
            anyhow::bail!(
                "{most} connections need about {need} descriptors in each process (one per \
                 connection end); RLIMIT_NOFILE is {nofile} and cannot be raised further \
                 (CAP_SYS_RESOURCE, or raise the hard limit)"
            );
        }
        pb.set_length((self.counts.len() * self.stacks.len()) as u64);
        // A first small step, not reported: what the process opens once (lazily, on
        // its first host) is then open before every measured step.
        let mut first = ScaleArgs {
            counts: vec![2],
            qos: self.qos.clone(),
            size: self.size,
            parallel: 1,
            time: Duration::from_millis(50),
            warmup: Duration::ZERO,
            stacks: vec![Stack::Natm],
            to: OutputArgs::default(),
        };
        one_step(&first, 2, Stack::Natm).context("the first, unreported step")?;
        first.counts.clear();
        // Each count over every stack before the next count: natm and its reference
        // measured minutes apart at most, in the same load.
        let (mut steps, mut tcp_steps) = (Vec::new(), Vec::new());
        for &n in &self.counts {
            for &stack in &self.stacks {
                pb.set_message(format!("scale {n} {} connections", stack.name()));
                let step = row(&one_step(self, n, stack)?);
                match stack {
                    Stack::Natm => steps.push(step),
                    Stack::Tcp => tcp_steps.push(step),
                }
                pb.inc(1);
            }
        }
        Ok((
            results::Scale {
                experiment: "scale".into(),
                machine: results::Machine::now(),
                nofile_limit: nofile,
                parallel: self.parallel,
                qos: self.qos.clone(),
                size,
                steps,
                tcp_steps,
                time_s: self.time.as_secs_f64(),
                warmup_s: self.warmup.as_secs_f64(),
            },
            (),
        ))
    }

    fn table(r: &Self::Result) -> String {
        let mut t = table::new(
            [
                "stack",
                "conns",
                "setups/s",
                "fds",
                "KiB idle",
                "KiB busy",
                "Mbit/s",
                "each min/med/max",
                "ms/MB",
                "× fewest",
            ],
            2,
        );
        // Count by count, natm's row and then its reference's.
        let stacks = [("natm", &r.steps), ("tcp", &r.tcp_steps)];
        let mut rows: Vec<(&str, &results::ScaleStep, f64)> = stacks
            .iter()
            .flat_map(|(name, steps)| {
                let first = steps.first().map_or(f64::NAN, |s| s.cpu_ms_per_mb);
                steps
                    .iter()
                    .map(move |s| (*name, s, s.cpu_ms_per_mb / first))
            })
            .collect();
        rows.sort_by_key(|(_, s, _)| s.connections);
        for (name, s, rel) in rows {
            t.add_row(vec![
                name.to_owned(),
                s.connections.to_string(),
                format!("{:.0}", s.setups_per_s),
                format!("{:.2}", s.fds_per_connection),
                format!("{:.1}", s.rss_kib_per_connection_idle),
                format!("{:.1}", s.rss_kib_per_connection_loaded),
                format!("{:.0}", s.aggregate_bps / 1e6),
                format!(
                    "{}/{}/{}",
                    three_digits(s.per_connection_bps_min / 1e6),
                    three_digits(s.per_connection_bps_median / 1e6),
                    three_digits(s.per_connection_bps_max / 1e6)
                ),
                format!("{:.2}", s.cpu_ms_per_mb),
                format!("{rel:.2}"),
            ]);
        }
        let mut out = format!(
            "{} connections between two processes (one host each, direct mode on loopback), \
             qos {}, {} B messages round robin, {} s after {} s; setup with {} caller(s); \
             RLIMIT_NOFILE {}; tcp: the same over kernel TCP (cubic, TCP_NODELAY), whose \
             socket buffers are the kernel's, in no process's memory. Per connection: \
             descriptors, KiB resident idle and sending; Mbit/s of all connections and of \
             each; CPU of both processes per MB, and against the stack's fewest connections\n{}",
            r.steps
                .iter()
                .map(|s| s.connections.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            r.qos,
            r.size,
            r.time_s,
            r.warmup_s,
            r.parallel,
            r.nofile_limit,
            table::render(&t)
        );
        for (name, steps) in stacks {
            for s in steps {
                out += &step_notes(name, s, r.warmup_s);
            }
        }
        for s in &r.steps {
            out += &format!(
                "natm, {} connections: {:.1} % of the bytes sent were retransmissions, {} \
                 retransmission timeouts, median smoothed RTT {:.1} ms; TPDUs of {:.0} octets \
                 on average, retransmitted: {} fast, {} by the head check ({} spurious), {} \
                 by a timeout ({} spurious)\n",
                s.connections,
                s.retransmitted_share * 100.0,
                s.retransmission_timeouts,
                s.median_srtt_ms,
                s.octets_per_tpdu,
                s.retransmitted_tpdus_fast,
                s.retransmitted_tpdus_head,
                s.spurious_tpdus_head,
                s.retransmitted_tpdus_timeout,
                s.spurious_tpdus_timeout
            );
        }
        out
    }

    fn figure(r: &Self::Result, (): &(), path: &std::path::Path) -> anyhow::Result<()> {
        let pts = |f: &dyn Fn(&results::ScaleStep) -> f64| -> Vec<(f64, f64)> {
            r.steps
                .iter()
                .map(|s| (s.connections as f64, f(s)))
                .collect()
        };
        let tcp_cpu = r
            .tcp_steps
            .iter()
            .map(|s| (s.connections as f64, s.cpu_ms_per_mb * 100.0))
            .collect();
        let lines = vec![
            Line {
                label: "RSS per connection, idle (KiB)".into(),
                points: pts(&|s| s.rss_kib_per_connection_idle),
                colour: 0,
                mark: Mark::Measured,
            },
            Line {
                label: "RSS per connection, sending (KiB)".into(),
                points: pts(&|s| s.rss_kib_per_connection_loaded),
                colour: 1,
                mark: Mark::Measured,
            },
            Line {
                label: "CPU per MB (µs / 10)".into(),
                points: pts(&|s| s.cpu_ms_per_mb * 100.0),
                colour: 2,
                mark: Mark::Measured,
            },
            Line {
                label: "CPU per MB, kernel TCP (µs / 10)".into(),
                points: tcp_cpu,
                colour: 3,
                mark: Mark::Measured,
            },
        ];
        plot::both(path, |p| {
            plot::xy(
                p,
                "cost per connection against the number of connections",
                Axis {
                    label: "connections",
                    log: true,
                    from_zero: false,
                },
                Axis {
                    label: "per connection",
                    log: false,
                    from_zero: true,
                },
                plot::Legend::UpperRight,
                &lines,
            )
        })
    }
}
