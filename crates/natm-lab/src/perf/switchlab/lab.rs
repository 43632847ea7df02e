//! One `natm switch` process for one measurement: its configuration written to a
//! scratch directory, its ports' endpoints read from its output, its counters read
//! from its stat file; killed when dropped, so no exit path leaves it running.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

/// How long the switch may take to start, or to stop and write its last counters.
const DEADLINE: Duration = Duration::from_secs(10);

/// One port of the lab's switch.
pub(super) struct Port<'a> {
    pub(super) name: &'a str,
    /// The host socket at the other end of the link.
    pub(super) peer: SocketAddr,
    /// Line rate, cells/s.
    pub(super) cells_per_s: u64,
    /// Further keys of the port's section (scheduler, buffer, epd, ppd, train).
    pub(super) extra: String,
}

/// A running switch.
pub(super) struct Lab {
    child: Child,
    dir: PathBuf,
    stat: PathBuf,
    /// Each port's bound endpoint, by name.
    pub(super) ports: HashMap<String, SocketAddr>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A scratch directory no other lab of this process uses.
fn scratch() -> anyhow::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "natm-switchlab-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

impl Lab {
    /// Starts a switch with `ports` (all in cell mode, bound to any loopback port) and
    /// the `[[pvc]]` sections `pvcs`, writing its counters every `stat_ms`.
    pub(super) fn start(ports: &[Port<'_>], pvcs: &str, stat_ms: u64) -> anyhow::Result<Lab> {
        let dir = scratch()?;
        let stat = dir.join("stat.json");
        let mut toml = format!(
            "stat_json = {:?}\nstat_interval_ms = {stat_ms}\n",
            stat.display().to_string()
        );
        for p in ports {
            toml += &format!(
                "[[port]]\nname = {:?}\nbind = \"127.0.0.1:0\"\npeer = \"{}\"\nmode = \"cell\"\nline_rate = {}\n{}\n",
                p.name,
                p.peer,
                p.cells_per_s * 53 * 8,
                p.extra
            );
        }
        toml += pvcs;
        let cfg = dir.join("switch.toml");
        std::fs::write(&cfg, toml)?;
        let child = Command::new(std::env::current_exe()?)
            .args(["switch", "--config"])
            .arg(&cfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start natm switch")?;
        let mut lab = Lab {
            child,
            dir,
            stat,
            ports: HashMap::new(),
        };
        lab.read_ports(ports.len())?;
        Ok(lab)
    }

    /// Reads `port NAME ADDR` lines until every port has its endpoint.
    fn read_ports(&mut self, n: usize) -> anyhow::Result<()> {
        let out = self.child.stdout.take().context("switch stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let end = Instant::now() + DEADLINE;
        while self.ports.len() < n {
            let line = rx
                .recv_timeout(end.saturating_duration_since(Instant::now()))
                .context("natm switch did not name its ports within 10 s")?;
            let mut w = line.split_whitespace();
            if w.next() == Some("port") {
                let (Some(name), Some(addr)) = (w.next(), w.next()) else {
                    continue;
                };
                self.ports.insert(name.to_string(), addr.parse()?);
            }
        }
        Ok(())
    }

    /// The port `name`'s endpoint.
    pub(super) fn port(&self, name: &str) -> anyhow::Result<SocketAddr> {
        self.ports
            .get(name)
            .copied()
            .with_context(|| format!("the switch has no port {name}"))
    }

    /// The latest counter snapshot, if one has been written.
    pub(super) fn snapshot(&self) -> Option<Value> {
        let text = std::fs::read_to_string(&self.stat).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Stops the switch with SIGTERM (it writes its counters at exit) and returns
    /// the final snapshot.
    pub(super) fn finish(mut self) -> anyhow::Result<Value> {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .context("cannot stop natm switch")?;
        let end = Instant::now() + DEADLINE;
        while self.child.try_wait()?.is_none() {
            anyhow::ensure!(Instant::now() < end, "natm switch did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
        self.snapshot()
            .context("natm switch left no readable stat file")
    }
}

/// Counter `path` (keys and indices, e.g. `["vcs", "0", "counters", "tagged"]`) of
/// a snapshot, 0 if absent.
pub(super) fn counter(v: &Value, path: &[&str]) -> u64 {
    let mut v = v;
    for k in path {
        v = match k.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[*k],
        };
    }
    v.as_u64().unwrap_or(0)
}
