//! Helpers for the tests that run `natm switch` processes: start one on a TOML text in
//! a scratch directory, wait until it has bound every port, read its stat file, stop
//! or kill it; killed and its directory removed on drop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a switch may take to start, and a stat file to show what a test waits for.
pub(crate) const DEADLINE: Duration = Duration::from_secs(20);

static N: AtomicUsize = AtomicUsize::new(0);

/// A running `natm switch`.
pub(crate) struct SwitchProc {
    child: Option<Child>,
    pub(crate) dir: PathBuf,
    /// The stat file (rewritten every 50 ms).
    pub(crate) stat: PathBuf,
    /// Each port's bound endpoint, by name.
    pub(crate) ports: HashMap<String, SocketAddr>,
}

/// A loopback port free for UDP and TCP, below the kernel's ephemeral range, so that
/// no socket another process binds to port 0 meanwhile can take it before the
/// process it is meant for binds it (a port from the ephemeral range, bound and
/// released, was: `natm call --pvc` once found its `--bind` address in use). Test
/// binaries run one after another; within one, each pick is a different port.
pub(crate) fn free_addr() -> SocketAddr {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32_768);
    let (first, span) = (10_000, low.saturating_sub(10_000).max(1_000));
    let base = std::process::id() as usize;
    for _ in 0..span {
        let port = first + (base + NEXT.fetch_add(1, Ordering::SeqCst)) % span;
        let a = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if UdpSocket::bind(a).is_ok() && std::net::TcpListener::bind(a).is_ok() {
            return a;
        }
    }
    panic!("no free loopback port below {low}")
}

/// Wait until some process has a UDP socket bound to `addr` (IPv4), as
/// `/proc/net/udp` lists it: a listener started in the background is ready.
pub(crate) fn wait_udp_bound(addr: SocketAddr) {
    let SocketAddr::V4(v4) = addr else {
        panic!("{addr}: IPv4 only")
    };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        if table
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        {
            return;
        }
        assert!(Instant::now() < until, "nothing bound {addr} within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl SwitchProc {
    /// Starts `natm switch` on `toml` (plus `stat_json` and a 50 ms stat interval) and
    /// waits until it has printed the endpoint of each of its `[[port]]`s.
    pub(crate) fn start(name: &str, toml: &str) -> SwitchProc {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "natm-switch-test-{}-{n}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("switch.toml");
        let stat = dir.join("stat.json");
        std::fs::write(
            &cfg,
            format!("stat_json = {stat:?}\nstat_interval_ms = 50\n{toml}"),
        )
        .unwrap();
        let mut sw = SwitchProc {
            child: None,
            dir,
            stat,
            ports: HashMap::new(),
        };
        sw.spawn(toml.matches("[[port]]").count());
        sw
    }

    /// Runs `natm switch` on the directory's `switch.toml` and waits until it has
    /// printed the endpoints of its `ports` ports.
    fn spawn(&mut self, ports: usize) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_natm"))
            .args(["switch", "--config"])
            .arg(self.dir.join("switch.toml"))
            .env("RUST_LOG", "natm=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("switch.log"))
                    .unwrap(),
            ))
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        self.child = Some(child);
        self.ports.clear();
        let end = Instant::now() + DEADLINE;
        while self.ports.len() < ports {
            let line = rx
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the switch did not print its ports: {}", self.log()));
            let mut w = line.split_whitespace();
            if w.next() == Some("port") {
                let name = w.next().unwrap().to_string();
                self.ports.insert(name, w.next().unwrap().parse().unwrap());
            }
        }
    }

    /// SIGKILL, and the same configuration (and key and pin files) started again.
    pub(crate) fn restart(&mut self) {
        let ports = self.ports.len();
        self.kill();
        let _ = std::fs::remove_file(&self.stat);
        self.spawn(ports);
    }

    /// The stat file as last written (`Null` before the first).
    pub(crate) fn stat(&self) -> serde_json::Value {
        let s = std::fs::read_to_string(&self.stat).unwrap_or_default();
        serde_json::from_str(&s).unwrap_or(serde_json::Value::Null)
    }

    /// The stat file once `f` holds of it; fails at [`DEADLINE`].
    pub(crate) fn stat_until(&self, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let v = self.stat();
            if !v.is_null() && f(&v) {
                return v;
            }
            assert!(
                Instant::now() < end,
                "stat never matched: {v}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The running switch's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Its log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("switch.log")).unwrap_or_default()
    }

    /// Sends `signal` to the running switch (SIGSTOP and SIGCONT stand for a machine
    /// that does not schedule it).
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let c = self.child.as_ref().expect("running");
        rustix::process::kill_process(rustix::process::Pid::from_child(c), signal).unwrap();
    }

    /// SIGTERM, and the exit status; fails if it does not stop in time.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_child(&c);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > end {
                let _ = c.kill();
                panic!("the switch did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SwitchProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
