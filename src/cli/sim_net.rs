//! `natm sim --scenario FILE`: a whole network from a TOML scenario file — hosts on a
//! tree of switches, groups of VCs between random pairs of hosts — run for a
//! simulated interval, with what it cost (wall time per simulated second, events per
//! second, memory per VC).

use anyhow::Context as _;
use std::path::Path;
use std::time::{Duration, Instant as WallInstant};

use serde::Deserialize;
use serde_json::json;

use super::outln;
use super::units;
use natm::transport::TransportConfig;
use natm::wire::qos::Qos;
use natm_sim::network::{self, FlowGroup, LevelLinks, NetReport, NetScenario, Tree};
use natm_sim::FrameOverhead;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "one")]
    seed: u64,
    duration: String,
    #[serde(default)]
    cells: bool,
    tree: TreeFile,
    flows: Vec<FlowFile>,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeFile {
    hosts: u32,
    hosts_per_edge: u32,
    #[serde(default)]
    edges_per_agg: u32,
    #[serde(default = "yes")]
    round_robin: bool,
    #[serde(default = "sixty_four")]
    queue_frames: u64,
    access: LinkFile,
    edge_uplink: LinkFile,
    agg_uplink: Option<LinkFile>,
}

fn yes() -> bool {
    true
}

fn sixty_four() -> u64 {
    64
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    rate: String,
    delay: String,
    #[serde(default)]
    loss: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowFile {
    label: String,
    /// Linux-ATM QoS text, as `natm sim --qos`.
    qos: String,
    count: u32,
    bytes: String,
    msg_size: Option<String>,
    tpdu: Option<String>,
    window: Option<u32>,
    #[serde(default)]
    start_within: Option<String>,
}

fn level(l: &LinkFile) -> anyhow::Result<LevelLinks> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&l.loss),
        "loss {} is outside [0, 1]",
        l.loss
    );
    Ok(LevelLinks {
        rate_bps: units::rate(&l.rate)?,
        delay: units::duration(&l.delay)?,
        loss: l.loss,
    })
}

/// Reads a scenario file; `scale` multiplies every group's VC count.
pub(crate) fn load(path: &Path, scale: f64) -> anyhow::Result<NetScenario> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let f: File = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let t = &f.tree;
    let access = level(&t.access).context("tree.access")?;
    let edge_uplink = level(&t.edge_uplink).context("tree.edge_uplink")?;
    let agg_uplink = match &t.agg_uplink {
        Some(l) => level(l).context("tree.agg_uplink")?,
        None => edge_uplink,
    };
    anyhow::ensure!(
        t.edges_per_agg == 0 || t.agg_uplink.is_some(),
        "tree.edges_per_agg needs tree.agg_uplink"
    );
    anyhow::ensure!(scale > 0.0 && scale.is_finite(), "--scale must be above 0");
    let mut groups = Vec::new();
    for g in &f.flows {
        let ctx = || format!("flow group '{}'", g.label);
        let q: Qos = g.qos.parse().with_context(ctx)?;
        let mut cfg = TransportConfig::from_qos(&q, t.round_robin).with_context(ctx)?;
        if let Some(tp) = &g.tpdu {
            cfg.tpdu_size = u32::try_from(units::bytes(tp)?).context("tpdu too large")?;
        }
        if let Some(w) = g.window {
            cfg.window = w;
        }
        cfg.rcv_buf = cfg
            .rcv_buf
            .max(cfg.window as usize * cfg.tpdu_size as usize);
        cfg.snd_buf = cfg.snd_buf.max(2 * cfg.rcv_buf);
        cfg.validate().with_context(ctx)?;
        let bytes = units::bytes(&g.bytes).with_context(ctx)?;
        groups.push(FlowGroup {
            label: g.label.clone(),
            count: (f64::from(g.count) * scale).round() as u32,
            config: cfg,
            bytes,
            msg_size: match &g.msg_size {
                Some(m) => units::bytes(m).with_context(ctx)?,
                None => 64 * 1024,
            },
            start_within: match &g.start_within {
                Some(d) => units::duration(d).with_context(ctx)?,
                None => Duration::ZERO,
            },
        });
    }
    Ok(NetScenario {
        tree: Tree {
            hosts: t.hosts,
            hosts_per_edge: t.hosts_per_edge,
            edges_per_agg: t.edges_per_agg,
            access,
            edge_uplink,
            agg_uplink,
            round_robin: t.round_robin,
            queue_frames: t.queue_frames,
        },
        groups,
        duration: units::duration(&f.duration).context("duration")?,
        overhead: if f.cells {
            FrameOverhead::Cells
        } else {
            FrameOverhead::Aal5Trailer
        },
        seed: f.seed,
    })
}

/// Resident memory now and at its peak, bytes, from /proc/self/status (0 where
/// that file is missing).
fn rss() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// What running the scenario cost.
struct Cost {
    wall: Duration,
    /// Peak resident memory above what the process held before building the network.
    memory: u64,
}

pub(crate) fn run(path: &Path, scale: f64, json_out: bool) -> super::CliResult {
    let scenario = load(path, scale)?;
    let (before, _) = rss();
    let wall = WallInstant::now();
    let report = network::run(&scenario)?;
    let wall = wall.elapsed();
    let (_, peak) = rss();
    let cost = Cost {
        wall,
        memory: peak.saturating_sub(before),
    };
    if json_out {
        outln!("{}", to_json(&report, &cost));
    } else {
        print_text(&report, &cost);
    }
    Ok(())
}

fn per_vc_kib(r: &NetReport, c: &Cost) -> f64 {
    c.memory as f64 / 1024.0 / r.vcs.max(1) as f64
}

fn wall_per_sim_s(r: &NetReport, c: &Cost) -> f64 {
    c.wall.as_secs_f64() / r.sim_time.as_secs_f64().max(1e-9)
}

fn to_json(r: &NetReport, c: &Cost) -> serde_json::Value {
    let groups: Vec<_> = r
        .groups
        .iter()
        .map(|g| {
            json!({
                "label": g.label,
                "vcs": g.vcs,
                "started": g.started,
                "finished": g.finished,
                "bytes_offered": g.bytes_offered,
                "bytes_sent": g.bytes_sent,
                "bytes_delivered": g.bytes_delivered,
                "messages_delivered": g.messages_delivered,
                "messages_lost": g.messages_lost,
                "damaged": g.damaged,
                "retransmits": g.retransmits,
                "goodput_bps": g.goodput_bps,
                "median_completion_s": g.median_completion.map(|d| d.as_secs_f64()),
            })
        })
        .collect();
    json!({
        "hosts": r.hosts,
        "switches": r.switches,
        "links": r.links,
        "vcs": r.vcs,
        "sim_time_s": r.sim_time.as_secs_f64(),
        "events": r.events,
        "link_frames": r.link_frames,
        "link_drops": r.link_drops,
        "wall_time_s": c.wall.as_secs_f64(),
        "wall_per_sim_s": wall_per_sim_s(r, c),
        "events_per_s": r.events as f64 / c.wall.as_secs_f64().max(1e-9),
        "memory_bytes": c.memory,
        "memory_per_vc_kib": per_vc_kib(r, c),
        "groups": groups,
    })
}

fn print_text(r: &NetReport, c: &Cost) {
    outln!(
        "network: {} hosts, {} switches, {} simplex links, {} VCs",
        r.hosts,
        r.switches,
        r.links,
        r.vcs
    );
    for g in &r.groups {
        outln!(
            "{}: {} VCs, {} started, {} finished (median {}), {}/{}/{} bytes delivered/sent/offered, \
             {} messages ({} lost), {} retransmits, {} damaged, goodput sum {:.2} Mbit/s",
            g.label,
            g.vcs,
            g.started,
            g.finished,
            g.median_completion
                .map_or("-".to_string(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3)),
            g.bytes_delivered,
            g.bytes_sent,
            g.bytes_offered,
            g.messages_delivered,
            g.messages_lost,
            g.retransmits,
            g.damaged,
            g.goodput_bps / 1e6,
        );
    }
    outln!(
        "links: {} frames delivered, {} dropped; simulated {:.3} s in {:.2} s wall ({:.2} s wall per simulated s), \
         {} events ({:.0}/s), memory {:.1} MiB ({:.2} KiB per VC)",
        r.link_frames,
        r.link_drops,
        r.sim_time.as_secs_f64(),
        c.wall.as_secs_f64(),
        wall_per_sim_s(r, c),
        r.events,
        r.events as f64 / c.wall.as_secs_f64().max(1e-9),
        c.memory as f64 / (1024.0 * 1024.0),
        per_vc_kib(r, c),
    );
}
