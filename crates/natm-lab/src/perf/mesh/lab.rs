//! The mesh built for real: a network namespace per switch and per host, a veth pair
//! per trunk (its own MTU and `tbf` rate, both ways) and per host link, `natm switch`
//! with routing in each switch's namespace and `natm sigd` in each host's, each
//! addressing its peers by veth addresses. A trunk with a delay is two veth pairs
//! with a namespace of its own between them, where a delay line
//! ([`crate::perf::delayline`]) holds every frame for the trunk's one-way delay. Everything it created — processes,
//! namespaces, the scratch directory — goes when the [`Lab`] drops, on success, error
//! or interrupt. It measures nothing.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::topology::{self, Mesh, SIGD_UDP, SWITCH_UDP, UPLINK};
use crate::perf::delayline;
use crate::perf::netlab::{limit_rate, offloads_off, reap, sh, spawn_in};

/// How long a daemon may take to start.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The running mesh.
pub(super) struct Lab {
    pub(super) mesh: Mesh,
    /// Configurations, logs, stat files and sigd sockets.
    pub(super) dir: PathBuf,
    prefix: String,
    /// The namespaces created so far.
    namespaces: Vec<String>,
    /// The switches, sigds and delay lines started so far.
    daemons: Vec<Child>,
    pub(super) trunks: Trunks,
}

/// What each trunk is: rates, MTUs and one-way delays, each list dealt to the trunks
/// in turn (trunk `t` gets `list[t % len]`), so trunks may differ.
#[derive(Debug, Clone)]
pub(super) struct Trunks {
    pub(super) rates_bps: Vec<u64>,
    pub(super) mtus: Vec<u32>,
    pub(super) delays: Vec<Duration>,
}

impl Trunks {
    /// Trunk `t`'s rate (both ways, `tbf`; also its ports' line rate).
    pub(super) fn rate(&self, t: usize) -> u64 {
        dealt(&self.rates_bps, t, 100_000_000)
    }

    /// Trunk `t`'s MTU.
    pub(super) fn mtu(&self, t: usize) -> u32 {
        dealt(&self.mtus, t, 1500)
    }

    /// Trunk `t`'s one-way delay (0: a plain veth pair).
    pub(super) fn delay(&self, t: usize) -> Duration {
        dealt(&self.delays, t, Duration::ZERO)
    }
}

/// `list[t % len]`, or `none` for an empty list.
fn dealt<T: Copy>(list: &[T], t: usize, none: T) -> T {
    match list.len() {
        0 => none,
        n => list[t % n],
    }
}

impl Lab {
    /// Create every namespace and link, each trunk as `trunks` says, and start the
    /// delay line of each trunk whose one-way delay is not zero; no daemon yet.
    pub(super) fn build(mesh: Mesh, trunks: Trunks) -> anyhow::Result<Lab> {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("natm-mesh-{pid}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {dir:?}"))?;
        let mut lab = Lab {
            mesh,
            dir,
            prefix: format!("natm-mesh-{pid}"),
            namespaces: Vec::new(),
            daemons: Vec::new(),
            trunks,
        };
        for s in 0..lab.mesh.switches {
            lab.add_namespace(lab.switch_ns(s))?;
        }
        for k in 0..lab.mesh.host_switch.len() {
            lab.add_namespace(lab.host_ns(k))?;
        }
        for t in 0..lab.mesh.trunks.len() {
            let k = lab.mesh.trunks[t];
            let (delay, mtu) = (lab.trunks.delay(t), lab.trunks.mtu(t).to_string());
            let rate_bps = lab.trunks.rate(t);
            let ends = [
                (lab.switch_ns(k.a), topology::trunk_if(k.b), k.a),
                (lab.switch_ns(k.b), topology::trunk_if(k.a), k.b),
            ];
            if delay.is_zero() {
                link(&ends[0].0, &ends[0].1, &ends[1].0, &ends[1].1)?;
            } else {
                let middle = lab.trunk_ns(t);
                lab.add_namespace(middle.clone())?;
                for ((ns, dev, _), mid) in ends.iter().zip(["dla", "dlb"]) {
                    link(ns, dev, &middle, mid)?;
                    sh(&["ip", "-n", &middle, "link", "set", "dev", mid, "mtu", &mtu])?;
                    sh(&[
                        "ip", "-n", &middle, "link", "set", "dev", mid, "promisc", "on",
                    ])?;
                    // Frames the line copies are not coalesced on the way in.
                    offloads_off(&middle, mid, &[]);
                }
            }
            for (ns, dev, s) in &ends {
                let ip = topology::trunk_ip(&lab.mesh, t, *s);
                sh(&["ip", "-n", ns, "link", "set", "dev", dev, "mtu", &mtu])?;
                address(ns, dev, &format!("{ip}/24"))?;
                // Through a delay line checksum offload goes too: a frame it copies
                // must carry a complete checksum (shared/NETLAB.md).
                let tx: &[&str] = if delay.is_zero() { &[] } else { &["tx", "off"] };
                let off = offloads_off(ns, dev, tx);
                anyhow::ensure!(
                    off || delay.is_zero(),
                    "a trunk delay needs checksum and segmentation offloads off on the \
                     veth ends (Debian: apt-get install ethtool)"
                );
                limit_rate(ns, dev, rate_bps, off)?;
            }
            if !delay.is_zero() {
                let line = delayline::start_in(&lab.trunk_ns(t), delay)
                    .with_context(|| format!("trunk {t}'s delay line"))?;
                lab.daemons.push(line);
            }
        }
        for k in 0..lab.mesh.host_switch.len() {
            let (sw_ip, host_ip) = topology::host_link_ips(k);
            let (sns, hns) = (lab.switch_ns(lab.mesh.host_switch[k]), lab.host_ns(k));
            let dev = topology::host_if(k);
            link(&sns, &dev, &hns, UPLINK)?;
            address(&sns, &dev, &format!("{sw_ip}/24"))?;
            address(&hns, UPLINK, &format!("{host_ip}/24"))?;
        }
        Ok(lab)
    }

    /// Switch `s`'s namespace.
    pub(super) fn switch_ns(&self, s: usize) -> String {
        format!("{}-s{s}", self.prefix)
    }

    /// The namespace of trunk `t`'s delay line.
    fn trunk_ns(&self, t: usize) -> String {
        format!("{}-t{t}", self.prefix)
    }

    /// Host `k`'s namespace.
    pub(super) fn host_ns(&self, k: usize) -> String {
        format!("{}-h{k}", self.prefix)
    }

    /// Host `k`'s sigd socket.
    pub(super) fn sigd_socket(&self, k: usize) -> PathBuf {
        self.dir.join(format!("h{k}.sock"))
    }

    /// Switch `s`'s stat file (rewritten every 50 ms).
    fn stat_path(&self, s: usize) -> PathBuf {
        self.dir.join(format!("s{s}.json"))
    }

    /// Switch `s`'s stat document, if it has written a whole one.
    pub(super) fn stat(&self, s: usize) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.stat_path(s)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Start every switch (routing on) in its namespace; returns once each has
    /// written its stat file.
    /// Host links run at the first trunk rate.
    pub(super) fn start_switches(&mut self) -> anyhow::Result<()> {
        for s in 0..self.mesh.switches {
            let cfg = self.dir.join(format!("s{s}.toml"));
            std::fs::write(&cfg, self.switch_config(s))
                .with_context(|| format!("cannot write {cfg:?}"))?;
            let args = ["switch".into(), "--config".into(), path_arg(&cfg)];
            self.start(&self.switch_ns(s), &args, &format!("s{s}"))?;
        }
        for s in 0..self.mesh.switches {
            self.wait_for(&format!("switch {s}"), |lab| lab.stat(s).is_some())?;
        }
        Ok(())
    }

    /// Start every host's sigd in its namespace; returns once each serves its socket.
    pub(super) fn start_sigds(&mut self) -> anyhow::Result<()> {
        for k in 0..self.mesh.host_switch.len() {
            let cfg = self.dir.join(format!("h{k}.toml"));
            std::fs::write(&cfg, self.sigd_config(k))
                .with_context(|| format!("cannot write {cfg:?}"))?;
            let args = ["sigd".into(), "--config".into(), path_arg(&cfg)];
            self.start(&self.host_ns(k), &args, &format!("h{k}"))?;
        }
        for k in 0..self.mesh.host_switch.len() {
            self.wait_for(&format!("host {k}'s sigd"), |lab| {
                std::os::unix::net::UnixStream::connect(lab.sigd_socket(k)).is_ok()
            })?;
        }
        Ok(())
    }

    /// Take trunk `t` down at switch `s`'s end (`ip link set … down`).
    pub(super) fn cut(&self, s: usize, other: usize) -> anyhow::Result<()> {
        let dev = topology::trunk_if(other);
        sh(&[
            "ip",
            "-n",
            &self.switch_ns(s),
            "link",
            "set",
            "dev",
            &dev,
            "down",
        ])
    }

    /// The last lines of every daemon's log, to explain a failure.
    pub(super) fn logs(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<String> = (0..self.mesh.switches).map(|s| format!("s{s}")).collect();
        names.extend((0..self.mesh.host_switch.len()).map(|k| format!("h{k}")));
        for n in names {
            let log =
                std::fs::read_to_string(self.dir.join(format!("{n}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            out += &format!("--- {n}\n");
            for l in tail.into_iter().rev() {
                out += l;
                out.push('\n');
            }
        }
        out
    }

    fn switch_config(&self, s: usize) -> String {
        let mut t = format!(
            "name = \"s{s}\"\nstat_json = {:?}\nstat_interval_ms = 50\n[routing]\nnode = {}\n",
            self.stat_path(s),
            topology::node(s)
        );
        for (i, other) in self.mesh.trunks_of(s) {
            t += &port(
                &topology::trunk_if(other),
                topology::trunk_endpoint(&self.mesh, i, s),
                topology::trunk_endpoint(&self.mesh, i, other),
                self.trunks.rate(i),
                "switch",
            );
        }
        let hosts = self.mesh.hosts_of(s);
        for &k in &hosts {
            let (sw_ip, host_ip) = topology::host_link_ips(k);
            t += &port(
                &topology::host_if(k),
                std::net::SocketAddrV4::new(sw_ip, SWITCH_UDP),
                std::net::SocketAddrV4::new(host_ip, SIGD_UDP),
                self.trunks.rate(0),
                "host",
            );
        }
        for &k in &hosts {
            t += &format!(
                "[[route]]\nprefix = \"{}\"\nport = \"{}\"\n",
                topology::address(k),
                topology::host_if(k)
            );
        }
        t
    }

    fn sigd_config(&self, k: usize) -> String {
        let (sw_ip, host_ip) = topology::host_link_ips(k);
        format!(
            "socket = {:?}\nsignalling = \"{host_ip}:{SIGD_UDP}\"\naddresses = [\"{}\"]\n\
             [link]\ncapacity = \"100Mbps\"\ntpdu_cost_ns = 1000\n\
             [[directory]]\nprefix = \"*\"\npeer = \"{sw_ip}:{SWITCH_UDP}\"\nswitch = true\n",
            self.sigd_socket(k),
            topology::address(k)
        )
    }

    fn add_namespace(&mut self, ns: String) -> anyhow::Result<()> {
        sh(&["ip", "netns", "add", &ns])?;
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        self.namespaces.push(ns);
        Ok(())
    }

    /// Start `args` in `ns`, its output into `<name>.log`.
    fn start(&mut self, ns: &str, args: &[String], name: &str) -> anyhow::Result<()> {
        let mut child = spawn_in(ns, args, Stdio::null())?;
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .context("cannot create a log file")?;
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let mut log = log.try_clone().context("cannot share a log file")?;
            std::thread::spawn(move || {
                let mut out = out;
                let _ = std::io::copy(&mut out, &mut log);
                let _ = log.flush();
            });
        }
        self.daemons.push(child);
        Ok(())
    }

    /// Poll `ready` until it holds, or fail after [`START_DEADLINE`] or if a daemon
    /// exited.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&Lab) -> bool) -> anyhow::Result<()> {
        let end = Instant::now() + START_DEADLINE;
        while !ready(self) {
            if let Some(i) = self
                .daemons
                .iter_mut()
                .position(|d| d.try_wait().ok().flatten().is_some())
            {
                anyhow::bail!(
                    "a daemon ({i}) exited while waiting for {what}:\n{}",
                    self.logs()
                );
            }
            anyhow::ensure!(
                Instant::now() < end,
                "{what} did not start within {START_DEADLINE:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for d in self.daemons.drain(..) {
            reap(d);
        }
        for ns in self.namespaces.drain(..).rev() {
            let _ = sh(&["ip", "netns", "del", &ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A veth pair: `a_dev` in `a`, `b_dev` in `b`, both up.
fn link(a: &str, a_dev: &str, b: &str, b_dev: &str) -> anyhow::Result<()> {
    sh(&[
        "ip", "link", "add", a_dev, "netns", a, "type", "veth", "peer", "name", b_dev, "netns", b,
    ])?;
    for (ns, dev) in [(a, a_dev), (b, b_dev)] {
        sh(&["ip", "-n", ns, "link", "set", "dev", dev, "up"])?;
    }
    Ok(())
}

fn address(ns: &str, dev: &str, cidr: &str) -> anyhow::Result<()> {
    sh(&["ip", "-n", ns, "addr", "add", cidr, "dev", dev])
}

fn path_arg(p: &Path) -> String {
    p.display().to_string()
}

/// One switch port in frame mode.
fn port(
    name: &str,
    bind: std::net::SocketAddrV4,
    peer: std::net::SocketAddrV4,
    rate_bps: u64,
    role: &str,
) -> String {
    format!(
        "[[port]]\nname = \"{name}\"\nbind = \"{bind}\"\npeer = \"{peer}\"\nmode = \"frame\"\n\
         line_rate = {rate_bps}\nbuffer = 16384\nsignalling = \"{role}\"\n"
    )
}
