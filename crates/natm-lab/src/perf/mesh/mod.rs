//! `natm-lab perf mesh` (issue 33's "Show" item): a mesh of `natm switch` processes
//! with routing, each switch and each host in its own network namespace, trunks as
//! veth pairs with their own MTU and `tbf` rate — nothing over loopback. It measures
//! how long routing takes to converge, which host pairs can call each other and over
//! how many hops, setups per second for a burst of calls, and, after one trunk a call
//! uses is taken down, when that call is released and when a new call between the
//! same hosts is admitted over another path. `--delay` gives the trunks a one-way
//! delay each (a delay line in a namespace of its own per trunk, as `perf loss --rtt`
//! has one), so hellos, floods, setups and releases cross a path with a real RTT.
//!
//! [`topology`] says what the mesh is, [`lab`] builds and removes it, [`host`] runs
//! inside each host's namespace and places calls; this module drives the phases.

mod host;
mod lab;
mod topology;

pub(crate) use host::{run as host_run, HostArgs};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::experiment::{Experiment, OutputArgs};
use super::netlab::{interrupt_flag, which};
use host::HostPeer;
use lab::Lab;
use natm_cli::cli::{table, units};
use topology::Mesh;

/// How long routing may take to converge, or a host's link to come up.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(90);
/// How long the cut call may take to be released, and a new call to get through.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(30);
/// How long a switch's stat file may take to show a call.
const STAT_DEADLINE: Duration = Duration::from_secs(15);

/// `natm-lab perf mesh`.
#[derive(Debug, clap::Args)]
pub(crate) struct MeshArgs {
    /// Switches, in a ring with a chord from each to the one opposite.
    #[arg(long, default_value_t = 10)]
    switches: usize,
    /// Hosts, spread round the ring, each on its own switch.
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    /// Each trunk's rate, both ways (`tbf`), also the switch ports' line rate (host
    /// links run at the first). Several (comma-separated) are dealt to the trunks in
    /// turn, as are MTUs and delays, so trunks differ.
    #[arg(long, value_delimiter = ',', default_value = "100Mbps", value_parser = units::rate)]
    rate: Vec<u64>,
    /// Each trunk's MTU (several: in turn).
    #[arg(long, value_delimiter = ',', default_value = "1500")]
    mtu: Vec<u32>,
    /// Each trunk's one-way delay, both ways (several: in turn). 0: a plain veth
    /// pair, no delay line.
    #[arg(long, value_delimiter = ',', default_value = "0ms",
          value_parser = natm_cli::cli::units::duration)]
    delay: Vec<Duration>,
    /// Calls each host places in the setup burst (to the next host round the ring).
    #[arg(long, default_value_t = 50)]
    calls: usize,
    /// Calls each host has in progress at once during the burst.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[command(flatten)]
    to: OutputArgs,
}

/// A call between two hosts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PairRow {
    from: usize,
    to: usize,
    connected: bool,
    /// Trunks on the path the ingress switch would route it over.
    hops: Option<usize>,
}

/// What happened when a trunk a held call used went down.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CutRow {
    from: usize,
    to: usize,
    /// The trunk taken down: its two switches.
    trunk: (usize, usize),
    hops_before: Option<usize>,
    /// Since the cut: the ingress switch's routing saw the neighbour gone.
    neighbour_lost_ms: Option<f64>,
    /// Since the cut: the held call was released (`None`: it was not).
    released_ms: Option<f64>,
    /// Since the cut: a new call between the same hosts was connected.
    reconnected_ms: Option<f64>,
    /// Calls tried until one was connected.
    tries: u32,
    /// The new call's first trunk at the ingress switch (another than the cut one).
    new_first_hop: Option<usize>,
    hops_after: Option<usize>,
}

/// `natm-lab perf mesh`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MeshResult {
    experiment: String,
    switches: usize,
    hosts: usize,
    trunks: usize,
    /// Each trunk's rate, in trunk order.
    trunk_rate_bps: Vec<u64>,
    /// Each trunk's MTU, in trunk order.
    trunk_mtu: Vec<u32>,
    /// Each trunk's one-way delay, in trunk order (ms).
    trunk_delay_ms: Vec<f64>,
    /// From starting the switches until every switch's topology held every switch
    /// and each had all its trunks two-way.
    converge_ms: f64,
    pairs: Vec<PairRow>,
    burst_connected: usize,
    burst_attempted: usize,
    burst_secs: f64,
    setups_per_sec: f64,
    cut: CutRow,
}

impl Experiment for MeshArgs {
    type Result = MeshResult;
    type Figure = ();

    fn output(&self) -> &OutputArgs {
        &self.to
    }

    fn run(&self, progress: &ProgressBar) -> anyhow::Result<(MeshResult, ())> {
        check_prerequisites()?;
        anyhow::ensure!(
            self.mtu.iter().all(|m| (68..=65_535).contains(m)),
            "--mtu must be 68 to 65535"
        );
        anyhow::ensure!(self.calls >= 1, "--calls must be at least 1");
        let mesh = Mesh::new(self.switches, self.hosts)?;
        let stop = interrupt_flag()?;
        progress.set_length(5);
        progress.set_message("building namespaces");
        let trunks = lab::Trunks {
            rates_bps: self.rate.clone(),
            mtus: self.mtu.clone(),
            delays: self.delay.clone(),
        };
        let mut lab = Lab::build(mesh, trunks)?;
        progress.inc(1);
        progress.set_message("converging");
        let t0 = Instant::now();
        lab.start_switches()?;
        poll(
            &stop,
            CONVERGE_DEADLINE,
            "routing to converge",
            &lab,
            || converged(&lab),
        )?;
        let converge_ms = ms(t0.elapsed());
        lab.start_sigds()?;
        let mut peers = (0..lab.mesh.host_switch.len())
            .map(|k| HostPeer::start(&lab.host_ns(k), &lab.sigd_socket(k)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for p in &mut peers {
            let secs = CONVERGE_DEADLINE.as_secs();
            expect_ok(&p.ask(&format!("up {secs}"), CONVERGE_DEADLINE)?, &lab)?;
        }
        progress.inc(1);
        progress.set_message("calls between every pair");
        let pairs = all_pairs(&lab, &mut peers, &stop)?;
        progress.inc(1);
        progress.set_message("setup burst");
        let (burst_connected, burst_secs) = self.burst(&mut peers)?;
        let burst_attempted = self.calls * peers.len();
        progress.inc(1);
        progress.set_message("cutting a trunk");
        let cut = cut_trunk(&lab, &mut peers, &pairs, &stop)?;
        progress.inc(1);
        let m = &lab.mesh;
        Ok((
            MeshResult {
                experiment: "mesh".into(),
                switches: m.switches,
                hosts: m.host_switch.len(),
                trunks: m.trunks.len(),
                trunk_rate_bps: (0..m.trunks.len()).map(|t| lab.trunks.rate(t)).collect(),
                trunk_mtu: (0..m.trunks.len()).map(|t| lab.trunks.mtu(t)).collect(),
                trunk_delay_ms: (0..m.trunks.len())
                    .map(|t| ms(lab.trunks.delay(t)))
                    .collect(),
                converge_ms,
                pairs,
                burst_connected,
                burst_attempted,
                burst_secs,
                setups_per_sec: burst_connected as f64 / burst_secs.max(1e-9),
                cut,
            },
            (),
        ))
    }

    fn table(r: &MeshResult) -> String {
        let mut t = table::new(["measure", "value"], 2);
        let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.0} ms"));
        let connected = r.pairs.iter().filter(|p| p.connected).count();
        let hops: Vec<String> = r
            .pairs
            .iter()
            .map(|p| {
                format!(
                    "{}→{}:{}",
                    p.from,
                    p.to,
                    p.hops.map_or("?".into(), |h| h.to_string())
                )
            })
            .collect();
        let c = &r.cut;
        for (k, v) in [
            (
                "mesh".to_string(),
                format!(
                    "{} switches, {} trunks ({} Mbit/s, MTU {}{}), {} hosts",
                    r.switches,
                    r.trunks,
                    range(
                        &r.trunk_rate_bps
                            .iter()
                            .map(|&b| b as f64 / 1e6)
                            .collect::<Vec<_>>()
                    ),
                    range(
                        &r.trunk_mtu
                            .iter()
                            .map(|&m| f64::from(m))
                            .collect::<Vec<_>>()
                    ),
                    delay_range(&r.trunk_delay_ms),
                    r.hosts
                ),
            ),
            (
                "routing converged".into(),
                format!("{:.0} ms", r.converge_ms),
            ),
            (
                "host pairs connected".into(),
                format!("{connected} / {}", r.pairs.len()),
            ),
            ("hops (trunks) per pair".into(), hops.join(" ")),
            (
                "setup burst".into(),
                format!(
                    "{} / {} connected in {:.2} s",
                    r.burst_connected, r.burst_attempted, r.burst_secs
                ),
            ),
            (
                "setups per second".into(),
                format!("{:.0}", r.setups_per_sec),
            ),
            (
                "trunk cut".into(),
                format!(
                    "s{}–s{} (host {} → host {}, {} hops)",
                    c.trunk.0,
                    c.trunk.1,
                    c.from,
                    c.to,
                    c.hops_before.map_or("?".into(), |h| h.to_string())
                ),
            ),
            ("ingress saw it down after".into(), opt(c.neighbour_lost_ms)),
            ("call over it released after".into(), opt(c.released_ms)),
            (
                "new call connected after".into(),
                format!(
                    "{} ({} tries, first trunk to s{}, {} hops)",
                    opt(c.reconnected_ms),
                    c.tries,
                    c.new_first_hop.map_or("?".into(), |s| s.to_string()),
                    c.hops_after.map_or("?".into(), |h| h.to_string())
                ),
            ),
        ] {
            t.add_row(vec![k, v]);
        }
        format!("{t}\n")
    }

    fn figure(_: &MeshResult, (): &(), _: &Path) -> anyhow::Result<()> {
        anyhow::bail!("perf mesh draws no figure")
    }
}

impl MeshArgs {
    /// Every host calls the next one round the ring `calls` times at once; the
    /// calls connected and the longest host's time.
    fn burst(&self, peers: &mut [HostPeer]) -> anyhow::Result<(usize, f64)> {
        let n = peers.len();
        for (k, p) in peers.iter_mut().enumerate() {
            p.send(&format!(
                "burst {} {} {}",
                topology::address((k + 1) % n),
                self.calls,
                self.concurrency
            ))?;
        }
        let wait = Duration::from_secs(20) * u32::try_from(self.calls).unwrap_or(u32::MAX);
        let (mut connected, mut secs) = (0, 0.0f64);
        for p in peers.iter_mut() {
            let a = p.answer(wait)?;
            let w: Vec<&str> = a.split_whitespace().collect();
            let ["ok", c, _, s] = w.as_slice() else {
                anyhow::bail!("burst: {a}");
            };
            connected += c.parse::<usize>()?;
            secs = secs.max(s.parse()?);
        }
        Ok((connected, secs))
    }
}

/// Root, `ip` and `tc`.
fn check_prerequisites() -> anyhow::Result<()> {
    anyhow::ensure!(
        rustix::process::geteuid().is_root(),
        "perf mesh needs root (it creates network namespaces, veth pairs and tbf \
         qdiscs): run it with sudo"
    );
    let missing: Vec<&str> = ["ip", "tc"]
        .into_iter()
        .filter(|t| which(t).is_none())
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "perf mesh needs {} (Debian: apt-get install iproute2)",
        missing.join(", ")
    );
    Ok(())
}

/// "X" or "A–B": the values' range.
fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    if lo == hi || v.is_empty() {
        format!("{hi}")
    } else {
        format!("{lo}–{hi}")
    }
}

/// ", one-way delay D ms" or ", one-way delay A–B ms"; nothing without delay.
fn delay_range(ms: &[f64]) -> String {
    if ms.iter().all(|&d| d == 0.0) {
        String::new()
    } else {
        format!(", one-way delay {} ms", range(ms))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Poll `cond` every 20 ms until it holds; an error after `deadline` or on Ctrl-C.
fn poll(
    stop: &AtomicBool,
    deadline: Duration,
    what: &str,
    lab: &Lab,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let end = Instant::now() + deadline;
    while !cond() {
        anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
        anyhow::ensure!(
            Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}:\n{}",
            lab.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn expect_ok(answer: &str, lab: &Lab) -> anyhow::Result<()> {
    anyhow::ensure!(
        answer.starts_with("ok"),
        "a host said: {answer}\n{}",
        lab.logs()
    );
    Ok(())
}

/// Every switch's database holds every switch, and every trunk (its routing
/// neighbour and its signalling link) of every switch is up.
fn converged(lab: &Lab) -> bool {
    (0..lab.mesh.switches).all(|s| {
        lab.stat(s).is_some_and(|st| {
            let r = &st["routing"];
            r["database"]
                .as_array()
                .is_some_and(|d| d.len() == lab.mesh.switches)
                && r["neighbours"]
                    .as_array()
                    .is_some_and(|n| n.len() == lab.mesh.trunks_of(s).len())
                && st["signalling"].as_array().is_some_and(|l| {
                    l.iter()
                        .filter(|x| x["role"] == "switch")
                        .all(|x| x["up"] == true)
                })
        })
    })
}

/// Trunks on the path switch `from` would route a call to switch `to` over now.
fn hops(lab: &Lab, from: usize, to: usize) -> Option<usize> {
    if from == to {
        return Some(0);
    }
    let st = lab.stat(from)?;
    let want = u64::from(topology::node(to));
    st["routing"]["routes"].as_array()?.iter().find_map(|r| {
        (r[0].as_u64() == Some(want)).then(|| r[1].as_array().map(|p| p.len().saturating_sub(1)))?
    })
}

/// The switches at the far end of switch `s`'s trunks that carry calls now.
fn busy_trunks(lab: &Lab, s: usize) -> Vec<usize> {
    let Some(st) = lab.stat(s) else {
        return Vec::new();
    };
    let names: Vec<&str> = st["ports"]
        .as_array()
        .map(|p| p.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    st["signalling"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|x| x["role"] == "switch" && x["calls"].as_u64() > Some(0))
                .filter_map(|x| {
                    names
                        .get(usize::try_from(x["port"].as_u64()?).ok()?)
                        .copied()
                })
                .filter_map(|n| n.strip_prefix('t')?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// One call from every host to every other.
fn all_pairs(lab: &Lab, peers: &mut [HostPeer], stop: &AtomicBool) -> anyhow::Result<Vec<PairRow>> {
    let n = peers.len();
    let mut rows = Vec::new();
    for (from, peer) in peers.iter_mut().enumerate() {
        for to in (0..n).filter(|t| *t != from) {
            anyhow::ensure!(!stop.load(Ordering::Relaxed), "interrupted");
            let a = peer.ask(
                &format!("call {}", topology::address(to)),
                FAILOVER_DEADLINE,
            )?;
            rows.push(PairRow {
                from,
                to,
                connected: a == "ok",
                hops: hops(lab, lab.mesh.host_switch[from], lab.mesh.host_switch[to]),
            });
        }
    }
    Ok(rows)
}

/// Hold a call over the most hops, take down its first trunk at the ingress switch,
/// and time the release and a new call.
fn cut_trunk(
    lab: &Lab,
    peers: &mut [HostPeer],
    pairs: &[PairRow],
    stop: &AtomicBool,
) -> anyhow::Result<CutRow> {
    let pair = pairs
        .iter()
        .filter(|p| p.connected)
        .max_by_key(|p| p.hops.unwrap_or(0))
        .context("no host pair could call")?;
    let (from, to) = (pair.from, pair.to);
    let (ingress, egress) = (lab.mesh.host_switch[from], lab.mesh.host_switch[to]);
    let addr = topology::address(to);
    // The burst's calls are gone from the ingress's trunks before the held one.
    poll(stop, STAT_DEADLINE, "the burst's calls to end", lab, || {
        busy_trunks(lab, ingress).is_empty()
    })?;
    expect_ok(
        &peers[from].ask(&format!("hold {addr}"), FAILOVER_DEADLINE)?,
        lab,
    )?;
    let mut first = Vec::new();
    poll(
        stop,
        STAT_DEADLINE,
        "the held call in the stat file",
        lab,
        || {
            first = busy_trunks(lab, ingress);
            !first.is_empty()
        },
    )?;
    let other = first[0];
    let hops_before = hops(lab, ingress, egress);
    let degree = lab.mesh.trunks_of(ingress).len();
    expect_ok(&peers[from].ask("mark", FAILOVER_DEADLINE)?, lab)?;
    let cut_at = Instant::now();
    lab.cut(ingress, other)?;
    let secs = FAILOVER_DEADLINE.as_secs();
    peers[from].send(&format!("retry {addr} {secs}"))?;
    let mut neighbour_lost_ms = None;
    let _ = poll(
        stop,
        FAILOVER_DEADLINE,
        "the ingress to see the trunk down",
        lab,
        || {
            let gone = lab.stat(ingress).is_some_and(|st| {
                st["routing"]["neighbours"]
                    .as_array()
                    .is_some_and(|n| n.len() < degree)
            });
            if gone {
                neighbour_lost_ms = Some(ms(cut_at.elapsed()));
            }
            gone
        },
    );
    let retry = peers[from].answer(FAILOVER_DEADLINE)?;
    let w: Vec<&str> = retry.split_whitespace().collect();
    let (reconnected_ms, tries) = match w.as_slice() {
        ["ok", t, n] => (Some(t.parse()?), n.parse()?),
        _ => (None, 0),
    };
    let released = peers[from].ask(&format!("released {secs}"), FAILOVER_DEADLINE)?;
    let released_ms = released
        .strip_prefix("ok ")
        .and_then(|t| t.parse::<f64>().ok());
    let mut new_first_hop = None;
    if reconnected_ms.is_some() {
        let _ = poll(
            stop,
            STAT_DEADLINE,
            "the new call in the stat file",
            lab,
            || {
                new_first_hop = busy_trunks(lab, ingress).into_iter().find(|t| *t != other);
                new_first_hop.is_some()
            },
        );
    }
    let hops_after = hops(lab, ingress, egress);
    expect_ok(&peers[from].ask("drop", FAILOVER_DEADLINE)?, lab)?;
    Ok(CutRow {
        from,
        to,
        trunk: (ingress, other),
        hops_before,
        neighbour_lost_ms,
        released_ms,
        reconnected_ms,
        tries,
        new_first_hop,
        hops_after,
    })
}
