//! An ATM network of real processes on loopback, for `natm-lab perf network` and
//! `natm demo --switch`: one `natm switch` and one `natm sigd` per host, each host on
//! a switch port of its own that runs UNI signalling, all spawned from the running
//! executable (`natm`, or `natm-lab`, whose hidden `switch`, `sigd` and `stat` are
//! natm's own). The last host's port is the bottleneck: its line rate and scheduler are
//! the experiment's; every other port runs at 1 Gbit/s.
//!
//! [`LoopNet`] owns the processes and their temporary directory: dropping it kills
//! every one and removes the directory, on every exit path.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use natm::ulib::{Host, HostConfig};

/// How long the processes get to bind and bring every signalling link up.
const LINKS_UP: Duration = Duration::from_secs(20);
/// Line rate of the ports that are not the bottleneck.
const FAST_LINE: u64 = 1_000_000_000;

/// The network to build.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Hosts, at least 2; host `i` has address `+44200{i+1:02}`, the last one is the
    /// sink behind the bottleneck port.
    pub hosts: usize,
    /// Line rate of the bottleneck port (towards the sink), bit/s.
    pub line_rate: u64,
    /// Its scheduler: `fifo`, `rr` or `wrr`.
    pub scheduler: String,
    /// Its output buffer, cells.
    pub buffer: u32,
}

/// A process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The running network. Field order matters: the processes die before the
/// directory holding their sockets and files is removed.
pub struct LoopNet {
    procs: Vec<Proc>,
    sockets: Vec<PathBuf>,
    stat: PathBuf,
    dir: PathBuf,
}

impl Drop for LoopNet {
    fn drop(&mut self) {
        self.procs.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port free for UDP and TCP a moment ago, for a daemon this process
/// is about to start and must name in other daemons' configurations first.
///
/// The port comes from outside the kernel's ephemeral range: a port the kernel
/// chose for a `bind(…:0)` goes out again to the next such bind in any process, so
/// a daemon told to bind it a moment later could find it taken ("Address already
/// in use" under load). Each process starts at its own place in the range above
/// (or, when there is no room above, below) the ephemeral ports, and this process
/// is never given the same port twice: a daemon that is killed and restarted at
/// its port must not find another one there.
pub fn free_port() -> anyhow::Result<SocketAddr> {
    static NEXT: Mutex<Option<u32>> = Mutex::new(None);
    let (first, count) = unclaimed_range();
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let start = *next.get_or_insert_with(|| std::process::id().wrapping_mul(2_654_435_761) % count);
    for i in 0..count {
        let n = (start + i) % count;
        let a = SocketAddr::from(([127, 0, 0, 1], (first + n) as u16));
        if UdpSocket::bind(a).is_ok() && std::net::TcpListener::bind(a).is_ok() {
            *next = Some((n + 1) % count);
            return Ok(a);
        }
    }
    anyhow::bail!("no free loopback port outside the ephemeral range")
}

/// The ports outside `ip_local_port_range`: (first, how many).
fn unclaimed_range() -> (u32, u32) {
    let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999));
    if 65_535u32.saturating_sub(hi) >= 1_000 {
        (hi + 1, 65_535 - hi)
    } else {
        (1_024, lo.saturating_sub(1_024).max(1))
    }
}

/// The ATM address of host `i`.
pub fn address(i: usize) -> String {
    format!("+44200{:02}", i + 1)
}

impl LoopNet {
    /// Spawns the switch and the hosts' sigds and waits until every signalling link
    /// is up (at most 20 s).
    pub fn start(t: &Topology) -> anyhow::Result<LoopNet> {
        anyhow::ensure!(t.hosts >= 2, "a network needs at least two hosts");
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "natm-loopnet-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut net = LoopNet {
            procs: Vec::new(),
            sockets: Vec::new(),
            stat: dir.join("switch.json"),
            dir,
        };
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let host_ends = (0..t.hosts)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let switch_ends = (0..t.hosts)
            .map(|_| free_port())
            .collect::<anyhow::Result<Vec<_>>>()?;
        let cfg = net.dir.join("switch.toml");
        std::fs::write(&cfg, switch_toml(t, &net.stat, &host_ends, &switch_ends))
            .context("cannot write the switch's configuration")?;
        let log = |name: &str| -> anyhow::Result<Stdio> {
            Ok(Stdio::from(std::fs::File::create(
                net.dir.join(format!("{name}.log")),
            )?))
        };
        let switch = Command::new(&exe)
            .args(["switch", "--config"])
            .arg(&cfg)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log("switch")?)
            .spawn()
            .context("cannot start natm switch")?;
        net.procs.push(Proc(switch));
        for (i, (me, sw)) in host_ends.iter().zip(&switch_ends).enumerate() {
            let socket = net.dir.join(format!("h{}.sock", i + 1));
            let sigd = Command::new(&exe)
                .arg("sigd")
                .arg("--socket")
                .arg(&socket)
                .args(["--signalling", &me.to_string()])
                .args(["--address", &address(i)])
                .args(["--switch", &sw.to_string()])
                .args(["--capacity", "1Gbps", "--tpdu-cost-ns", "1000"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log(&format!("h{}", i + 1))?)
                .spawn()
                .context("cannot start natm sigd")?;
            net.procs.push(Proc(sigd));
            net.sockets.push(socket);
        }
        net.wait_links_up(&exe)?;
        Ok(net)
    }

    /// An application host on host `i`'s sigd.
    pub fn host(&self, i: usize) -> anyhow::Result<Host> {
        Host::open(HostConfig {
            sigd_socket: Some(self.sockets[i].clone()),
            ..HostConfig::default()
        })
        .with_context(|| format!("cannot open host {}", i + 1))
    }

    /// The switch's counters (its stat file, rewritten every 100 ms).
    pub fn switch_stat(&self) -> serde_json::Value {
        std::fs::read_to_string(&self.stat)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null)
    }

    /// What the processes logged, for an error message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for name in std::iter::once("switch".to_string())
            .chain((1..=self.sockets.len()).map(|i| format!("h{i}")))
        {
            let l =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            if !l.trim().is_empty() {
                out.push_str(&format!("--- {name}\n{l}"));
            }
        }
        out
    }

    fn wait_links_up(&mut self, exe: &Path) -> anyhow::Result<()> {
        let until = Instant::now() + LINKS_UP;
        let mut hosts_up = vec![false; self.sockets.len()];
        loop {
            for p in &mut self.procs {
                if let Ok(Some(status)) = p.0.try_wait() {
                    anyhow::bail!(
                        "a process of the network exited ({status})\n{}",
                        self.logs()
                    );
                }
            }
            let switch_up = self.switch_stat()["signalling"]
                .as_array()
                .is_some_and(|l| {
                    l.len() == self.sockets.len() && l.iter().all(|r| r["up"] == true)
                });
            if switch_up {
                for (up, socket) in hosts_up.iter_mut().zip(&self.sockets) {
                    *up = *up || sigd_link_up(exe, socket);
                }
                if hosts_up.iter().all(|&u| u) {
                    return Ok(());
                }
            }
            anyhow::ensure!(
                Instant::now() < until,
                "the signalling links did not come up within {LINKS_UP:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether the sigd at `socket` has its link to the switch up (`natm stat --json`).
fn sigd_link_up(exe: &Path, socket: &Path) -> bool {
    let Ok(out) = Command::new(exe)
        .args(["stat", "--json", "--socket"])
        .arg(socket)
        .stderr(Stdio::null())
        .output()
    else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .is_ok_and(|v| v["peers"][0]["up"] == true)
}

/// The switch: one host port per host, a route per host address.
fn switch_toml(
    t: &Topology,
    stat: &Path,
    host_ends: &[SocketAddr],
    switch_ends: &[SocketAddr],
) -> String {
    let mut s = format!(
        "stat_json = {:?}\nstat_interval_ms = 100\n",
        stat.display().to_string()
    );
    let last = host_ends.len() - 1;
    for (i, (peer, bind)) in host_ends.iter().zip(switch_ends).enumerate() {
        let (rate, sched, buffer) = if i == last {
            (t.line_rate, t.scheduler.as_str(), t.buffer)
        } else {
            (FAST_LINE, "rr", 16_384)
        };
        s.push_str(&format!(
            "[[port]]\nname = \"h{n}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\nline_rate = {rate}\nscheduler = \"{sched}\"\nbuffer = {buffer}\nsignalling = \"host\"\n",
            n = i + 1
        ));
    }
    for i in 0..host_ends.len() {
        s.push_str(&format!(
            "[[route]]\nprefix = \"{}\"\nport = \"h{}\"\n",
            address(i),
            i + 1
        ));
    }
    s
}
