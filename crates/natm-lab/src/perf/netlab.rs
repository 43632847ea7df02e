//! The network lab of `natm-lab perf loss` (shared/NETLAB.md): two network namespaces
//! joined by a veth pair, a `tbf` rate limit on one end, an nftables rule that drops
//! a fraction of what arrives at the other, and processes started inside them; with
//! `delay_line`, a third namespace between them whose delay line
//! ([`super::delayline`]) gives the path its RTT. What it builds is removed when the [`Net`] drops — on success, on error, and after
//! Ctrl-C or SIGTERM, which only set the flag of [`interrupt_flag`] so that waiting
//! loops can return and let it drop. It measures nothing.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

/// A flag that SIGINT and SIGTERM set instead of ending the process, so that the
/// namespaces are removed on the way out.
pub(crate) fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot catch signals")?;
    }
    Ok(stop)
}

/// Whether the kernel has BBR, loading its module if need be.
pub(crate) fn bbr_available() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "bbr"))
        || sh(&["modprobe", "tcp_bbr"]).is_ok()
}

/// What building a [`Net`] needs: root and the tools; why not, if not. `who` names
/// the experiment in the message.
pub(crate) fn check_prerequisites(who: &str) -> anyhow::Result<()> {
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!(
            "{who} needs root (it creates network namespaces, a veth pair, tbf and \
             nftables rules): run it with sudo"
        );
    }
    let missing: Vec<&str> = ["ip", "tc", "nft"]
        .into_iter()
        .filter(|t| which(t).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(anyhow::anyhow!(
            "{who} needs {} (Debian: apt-get install iproute2 nftables)",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// Where `tool` is: on PATH, or in the sbin directories a sudo PATH may lack.
pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Run a command, failing with its stderr.
pub(crate) fn sh(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(which(args[0]).unwrap_or_else(|| args[0].into()))
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("`{}`", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a rate-limited veth pair, removed on drop.
pub(crate) struct Net {
    /// The sending side's namespace (`va`, with the rate limit).
    pub(crate) a: String,
    /// The receiving side's namespace (`vb`, with the loss rule).
    pub(crate) b: String,
    /// Receiver's address.
    pub(crate) addr_b: std::net::Ipv4Addr,
    /// Whether segmentation offloads could be turned off.
    pub(crate) offloads_off: bool,
    /// The middle namespace (`dla` towards a, `dlb` towards b), if the path has one.
    pub(crate) m: Option<String>,
    /// The delay line running in `m`, and its one-way delay.
    line: Mutex<Option<(Child, Duration)>>,
}

impl Net {
    /// Create the namespaces `natm-<name>-<pid>-a` and `-b`, the link, the rate limit
    /// and an empty loss table; with `delay_line`, also `-m` between them (a's `va`
    /// joined to m's `dla`, b's `vb` to m's `dlb`), where [`Net::set_delay`] runs the
    /// delay line. Without it, `va` and `vb` are one veth pair.
    pub(crate) fn create(name: &str, rate_bps: u64, delay_line: bool) -> anyhow::Result<Self> {
        let pid = std::process::id();
        let (a, b) = (
            format!("natm-{name}-{pid}-a"),
            format!("natm-{name}-{pid}-b"),
        );
        let sub = (pid % 250) as u8;
        sh(&["ip", "netns", "add", &a])?;
        // From here on, dropping `net` removes what exists.
        let mut net = Net {
            a: a.clone(),
            b: b.clone(),
            addr_b: std::net::Ipv4Addr::new(10, 213, sub, 2),
            offloads_off: false,
            m: None,
            line: Mutex::new(None),
        };
        let (a, b) = (a.as_str(), b.as_str());
        sh(&["ip", "netns", "add", b])?;
        let addr_a = format!("10.213.{sub}.1/24");
        let addr_b = format!("10.213.{sub}.2/24");
        let ethtool = which("ethtool").is_some();
        if delay_line {
            let m = format!("natm-{name}-{pid}-m");
            sh(&["ip", "netns", "add", &m])?;
            net.m = Some(m.clone());
            for (ns, end, mid) in [(a, "va", "dla"), (b, "vb", "dlb")] {
                sh(&[
                    "ip", "link", "add", end, "netns", ns, "type", "veth", "peer", "name", mid,
                    "netns", &m,
                ])?;
                sh(&[
                    "ip", "-n", &m, "link", "set", "dev", mid, "up", "promisc", "on",
                ])?;
                if ethtool {
                    // Frames the line copies are not coalesced on the way in.
                    let _ = sh(&[
                        "ip", "netns", "exec", &m, "ethtool", "-K", mid, "tso", "off", "gso",
                        "off", "gro", "off",
                    ]);
                }
            }
        } else {
            sh(&[
                "ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "vb",
                "netns", b,
            ])?;
        }
        sh(&["ip", "-n", a, "addr", "add", &addr_a, "dev", "va"])?;
        sh(&["ip", "-n", b, "addr", "add", &addr_b, "dev", "vb"])?;
        for (ns, dev) in [(a, "va"), (b, "vb")] {
            sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        // Through the delay line, checksum offload goes too: a frame it copies must
        // carry a complete checksum (shared/NETLAB.md).
        let tx: &[&str] = if delay_line { &["tx", "off"] } else { &[] };
        net.offloads_off = ethtool
            && [(a, "va"), (b, "vb")]
                .iter()
                .all(|(ns, dev)| offloads_off(ns, dev, tx));
        if delay_line && !net.offloads_off {
            anyhow::bail!(
                "a delay line needs checksum and segmentation offloads off on the veth ends \
                 (Debian: apt-get install ethtool)"
            );
        }
        limit_rate(a, "va", rate_bps, net.offloads_off)?;
        Ok(net)
    }

    /// Drop `per_mille` of the datagrams arriving in b (0 removes the rule); with
    /// `per_packet`, of the link packets instead: the rule sits before IP reassembly
    /// (prerouting, priority -500, ahead of defragmentation at -400), so each IP
    /// fragment of a large datagram is lost on its own, as on a lossy link.
    pub(crate) fn set_loss(&self, per_mille: u32, per_packet: bool) -> anyhow::Result<()> {
        let b = self.b.as_str();
        let _ = sh(&[
            "ip", "netns", "exec", b, "nft", "delete", "table", "inet", "natm",
        ]);
        if per_mille == 0 {
            return Ok(());
        }
        sh(&[
            "ip", "netns", "exec", b, "nft", "add", "table", "inet", "natm",
        ])?;
        sh(&[
            "ip",
            "netns",
            "exec",
            b,
            "nft",
            "add",
            "chain",
            "inet",
            "natm",
            "in",
            if per_packet {
                "{ type filter hook prerouting priority -500; }"
            } else {
                "{ type filter hook input priority 0; }"
            },
        ])?;
        sh(&[
            "ip",
            "netns",
            "exec",
            b,
            "nft",
            "add",
            "rule",
            "inet",
            "natm",
            "in",
            "numgen",
            "random",
            "mod",
            "1000",
            "<",
            &per_mille.to_string(),
            "drop",
        ])
    }

    /// Run the delay line in the middle namespace with this one-way delay (each way),
    /// replacing the one running; returns once it forwards. Without a middle
    /// namespace only a zero delay is possible, and it does nothing.
    pub(crate) fn set_delay(&self, one_way: Duration) -> anyhow::Result<()> {
        let mut line = self
            .line
            .lock()
            .map_err(|_| anyhow::anyhow!("delay line lock"))?;
        if line.as_ref().is_some_and(|(_, d)| *d == one_way) {
            return Ok(());
        }
        let Some(m) = &self.m else {
            if one_way.is_zero() {
                return Ok(());
            }
            anyhow::bail!("this network has no middle namespace for a delay line");
        };
        if let Some((old, _)) = line.take() {
            reap(old);
        }
        *line = Some((super::delayline::start_in(m, one_way)?, one_way));
        Ok(())
    }

    /// Start this binary with `args` inside namespace `ns`, stdout and stderr piped.
    pub(crate) fn spawn(&self, ns: &str, args: &[String]) -> anyhow::Result<Child> {
        spawn_in(ns, args, Stdio::null())
    }
}

/// Turn segmentation offloads (and the `extra` ones, e.g. `tx off`) off on `dev` in
/// `ns`, so that a qdisc sees real packet sizes; whether ethtool could.
pub(crate) fn offloads_off(ns: &str, dev: &str, extra: &[&str]) -> bool {
    let mut args = vec![
        "ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
    ];
    args.extend_from_slice(extra);
    which("ethtool").is_some() && sh(&args).is_ok()
}

/// A `tbf` rate limit of `rate_bps` on what leaves `dev` in `ns`.
pub(crate) fn limit_rate(
    ns: &str,
    dev: &str,
    rate_bps: u64,
    offloads_off: bool,
) -> anyhow::Result<()> {
    // With offloads on, the qdisc sees packets of up to 64 KiB; tbf drops any packet
    // larger than its bucket.
    let burst = if offloads_off { "32kbit" } else { "80kb" };
    sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "tc",
        "qdisc",
        "add",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        &format!("{rate_bps}bit"),
        "burst",
        burst,
        "latency",
        "50ms",
    ])
}

/// Start this binary with `args` inside namespace `ns`, stdout and stderr piped.
pub(crate) fn spawn_in(ns: &str, args: &[String], stdin: Stdio) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("own executable")?;
    Command::new(which("ip").unwrap_or_else(|| "ip".into()))
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start a peer in {ns}"))
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some((line, _)) = self.line.get_mut().ok().and_then(Option::take) {
            reap(line);
        }
        for ns in [Some(&self.a), Some(&self.b), self.m.as_ref()]
            .into_iter()
            .flatten()
        {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
    }
}

/// Kill a child we started, by its id, and reap it; what it said on stderr.
pub(crate) fn reap(mut c: Child) -> String {
    let _ = c.kill();
    let _ = c.wait();
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err.trim().to_string()
}
