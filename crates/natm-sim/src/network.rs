//! Whole networks: many hosts on a tree of switches, with many VCs of a mix of
//! services between random pairs of hosts, run for a simulated interval (what
//! `natm sim --scenario FILE` runs).
//!
//! ```text
//!                         core
//!              ┌───────────┴───────────┐          uplinks of the aggregation level
//!           agg 0        …          agg A-1       (absent with one level of edge)
//!        ┌────┴────┐
//!     edge 0  …  edge E-1                         uplinks of the edge level
//!    ┌──┴──┐
//!  host … host                                    access links
//! ```
//!
//! Every link is a pair of simplex links (up and down) with its own queue; the
//! switches are the simulator's implicit store-and-forward points between the links
//! of a route. A VC from host `a` to host `b` climbs from `a` only as far as the
//! lowest switch above both and comes down to `b`; its ACKs take the mirror path.

use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::endpoint::VcId;
use super::frame::FrameOverhead;
use super::link::LinkConfig;
use super::psb_host::{goodput, App, PsbHost, Sink, Source};
use super::queue::QueueLimit;
use super::scenario::HostsDone;
use super::topology::{HostId, LinkId};
use super::{Sim, SimError};
use natm_proto::time::Instant;
use natm_proto::transport::{Psb, Semantics, TransportConfig};

/// One level of links in the tree (both directions alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelLinks {
    /// Rate, bit/s of frame bytes.
    pub rate_bps: u64,
    /// Propagation delay, one way.
    pub delay: Duration,
    /// Random loss, each direction.
    pub loss: f64,
}

/// The shape of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Hosts, at the leaves.
    pub hosts: u32,
    /// Hosts under each edge switch.
    pub hosts_per_edge: u32,
    /// Edge switches under each aggregation switch; 0 for a two-level tree (edge
    /// switches straight under the core).
    pub edges_per_agg: u32,
    /// Host to edge switch.
    pub access: LevelLinks,
    /// Edge switch to the level above.
    pub edge_uplink: LevelLinks,
    /// Aggregation switch to the core (three-level trees only).
    pub agg_uplink: LevelLinks,
    /// Every queue: per-VC round robin (seed 000 §5.4) or FIFO.
    pub round_robin: bool,
    /// Buffer of each queue in frames (per VC under round robin).
    pub queue_frames: u64,
}

/// A group of alike VCs.
#[derive(Debug, Clone)]
pub struct FlowGroup {
    /// A name for reports.
    pub label: String,
    /// How many VCs.
    pub count: u32,
    /// The transport configuration of both ends.
    pub config: TransportConfig,
    /// Application bytes each VC sends.
    pub bytes: u64,
    /// Message size (ignored for stream VCs).
    pub msg_size: u64,
    /// Each VC starts at a random time in `[0, start_within)`.
    pub start_within: Duration,
}

/// A network and the VCs of one run.
#[derive(Debug, Clone)]
pub struct NetScenario {
    /// The topology.
    pub tree: Tree,
    /// The VCs, group by group.
    pub groups: Vec<FlowGroup>,
    /// Simulated interval: the run stops then, or earlier if every VC has finished.
    pub duration: Duration,
    /// Per-frame overhead on every link.
    pub overhead: FrameOverhead,
    /// RNG seed (placement, start times, and every link's losses).
    pub seed: u64,
}

/// What one group of VCs achieved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupReport {
    /// The group's label.
    pub label: String,
    /// VCs in it.
    pub vcs: u64,
    /// VCs whose both ends finished (closed in order) within the run.
    pub finished: u64,
    /// VCs that had started by the end of the run.
    pub started: u64,
    /// Application bytes the VCs were to send.
    pub bytes_offered: u64,
    /// Application bytes the PSBs took.
    pub bytes_sent: u64,
    /// Application bytes delivered.
    pub bytes_delivered: u64,
    /// Whole messages delivered.
    pub messages_delivered: u64,
    /// Messages the receivers counted lost.
    pub messages_lost: u64,
    /// VCs on which some delivered byte was wrong or a message was bad.
    pub damaged: u64,
    /// Retransmitted TPDUs (fast, head and timeout).
    pub retransmits: u64,
    /// Sum over the VCs of their goodput (delivered bytes over the time each ran).
    pub goodput_bps: f64,
    /// Median time from a VC's start to both ends finished, over finished VCs.
    pub median_completion: Option<Duration>,
}

/// The outcome of a network run.
#[derive(Debug, Clone)]
pub struct NetReport {
    /// Hosts.
    pub hosts: u32,
    /// Switches (edge, aggregation and core).
    pub switches: u32,
    /// Simplex links.
    pub links: u32,
    /// VCs.
    pub vcs: u64,
    /// Per group, in the scenario's order.
    pub groups: Vec<GroupReport>,
    /// Virtual time the run took.
    pub sim_time: Duration,
    /// Events the simulator processed.
    pub events: u64,
    /// Frames dropped on all links (queue full, random, corrupt).
    pub link_drops: u64,
    /// Frames delivered across all links (a frame counts once per link it crossed).
    pub link_frames: u64,
}

/// Which switch each host hangs from, and the links of the tree.
struct Fabric {
    /// Per host: access link up, down.
    access: Vec<(LinkId, LinkId)>,
    /// Per edge switch: uplink up, down.
    edge: Vec<(LinkId, LinkId)>,
    /// Per aggregation switch: uplink up, down.
    agg: Vec<(LinkId, LinkId)>,
    hosts_per_edge: u32,
    edges_per_agg: u32,
}

impl Fabric {
    fn edge_of(&self, h: u32) -> u32 {
        h / self.hosts_per_edge
    }

    fn agg_of(&self, e: u32) -> Option<u32> {
        (self.edges_per_agg > 0).then(|| e / self.edges_per_agg)
    }

    /// The links from host `a` up to the lowest common switch and down to host `b`.
    fn path(&self, a: u32, b: u32) -> Vec<LinkId> {
        let (ea, eb) = (self.edge_of(a), self.edge_of(b));
        let mut up = vec![self.access[a as usize].0];
        let mut down = vec![self.access[b as usize].1];
        if ea != eb {
            up.push(self.edge[ea as usize].0);
            down.push(self.edge[eb as usize].1);
            if let (Some(ga), Some(gb)) = (self.agg_of(ea), self.agg_of(eb)) {
                if ga != gb {
                    up.push(self.agg[ga as usize].0);
                    down.push(self.agg[gb as usize].1);
                }
            }
        }
        up.extend(down.into_iter().rev());
        up
    }
}

fn add_pair(
    sim: &mut Sim<PsbHost>,
    t: &Tree,
    level: &LevelLinks,
    overhead: FrameOverhead,
    name: &str,
) -> Result<(LinkId, LinkId), SimError> {
    let cfg = |dir: &str| {
        let c = LinkConfig::new(level.rate_bps, level.delay)
            .name(format!("{name}-{dir}"))
            .overhead(overhead)
            .loss(level.loss);
        if t.round_robin {
            c.round_robin(QueueLimit::frames(t.queue_frames))
        } else {
            c.queue_limit(QueueLimit::frames(t.queue_frames))
        }
    };
    Ok((sim.add_link(cfg("up"))?, sim.add_link(cfg("down"))?))
}

struct Planned {
    group: usize,
    src: u32,
    dst: u32,
    start: Instant,
}

/// Check a scenario's shape before building it.
fn validate(s: &NetScenario) -> Result<(), SimError> {
    let t = &s.tree;
    let bad = |why: &str| Err(SimError::Scenario(why.to_string()));
    if t.hosts < 2 {
        return bad("a network needs at least 2 hosts");
    }
    if t.hosts_per_edge == 0 {
        return bad("hosts_per_edge must be at least 1");
    }
    let vcs: u64 = s.groups.iter().map(|g| u64::from(g.count)).sum();
    // VC ids start at 32 and must fit a u32 with room to spare.
    if vcs > 16_000_000 {
        return bad("at most 16,000,000 VCs");
    }
    for g in &s.groups {
        g.config
            .validate()
            .map_err(|e| SimError::Scenario(format!("group {}: {e}", g.label)))?;
    }
    Ok(())
}

/// Build the tree, place the VCs and run for the scenario's interval.
pub fn run(s: &NetScenario) -> Result<NetReport, SimError> {
    validate(s)?;
    let t = &s.tree;
    let mut sim: Sim<PsbHost> = Sim::new(s.seed);
    // Placement and start times draw from a stream no link uses.
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    rng.set_stream(u64::MAX);

    let edges = t.hosts.div_ceil(t.hosts_per_edge);
    let aggs = if t.edges_per_agg == 0 {
        0
    } else {
        edges.div_ceil(t.edges_per_agg)
    };
    let mut fabric = Fabric {
        access: Vec::with_capacity(t.hosts as usize),
        edge: Vec::with_capacity(edges as usize),
        agg: Vec::with_capacity(aggs as usize),
        hosts_per_edge: t.hosts_per_edge,
        edges_per_agg: t.edges_per_agg,
    };
    for h in 0..t.hosts {
        fabric.access.push(add_pair(
            &mut sim,
            t,
            &t.access,
            s.overhead,
            &format!("host{h}"),
        )?);
    }
    for e in 0..edges {
        fabric.edge.push(add_pair(
            &mut sim,
            t,
            &t.edge_uplink,
            s.overhead,
            &format!("edge{e}"),
        )?);
    }
    for g in 0..aggs {
        fabric.agg.push(add_pair(
            &mut sim,
            t,
            &t.agg_uplink,
            s.overhead,
            &format!("agg{g}"),
        )?);
    }

    // Place every VC: a random sender, a random other receiver, a random start.
    let mut planned = Vec::new();
    for (gi, g) in s.groups.iter().enumerate() {
        for _ in 0..g.count {
            let src = rng.random_range(0..t.hosts);
            let mut dst = rng.random_range(0..t.hosts - 1);
            if dst >= src {
                dst += 1;
            }
            let within = g.start_within.as_nanos() as u64;
            let at = if within == 0 {
                0
            } else {
                rng.random_range(0..within)
            };
            planned.push(Planned {
                group: gi,
                src,
                dst,
                start: Instant::from_nanos(at),
            });
        }
    }

    let mut hosts: Vec<PsbHost> = (0..t.hosts).map(|_| PsbHost::new()).collect();
    for (i, p) in planned.iter().enumerate() {
        let g = &s.groups[p.group];
        let id = VcId(32 + i as u32);
        let tag = i as u8;
        let mut cfg = g.config.clone();
        cfg.cookie = Some(0x4E41_0000 ^ i as u32);
        let flow = natm_proto::flow::build(cfg.flow, &cfg);
        let stream = cfg.semantics == Semantics::Stream;
        let msg = if stream { u64::MAX } else { g.msg_size };
        hosts[p.src as usize].add(
            id,
            Psb::connect(cfg.clone(), flow, p.start),
            App::Source(Source::new(tag, g.bytes, msg).starting_at(p.start)),
        );
        let sink = if stream {
            Sink::new(tag)
        } else {
            Sink::new(tag).expecting(g.msg_size, g.bytes)
        };
        hosts[p.dst as usize].add(id, Psb::listen(cfg), App::Sink(sink));
    }
    let ids: Vec<HostId> = hosts.into_iter().map(|h| sim.add_host(h)).collect();
    for (i, p) in planned.iter().enumerate() {
        let id = VcId(32 + i as u32);
        let (a, b) = (ids[p.src as usize], ids[p.dst as usize]);
        sim.add_route(a, id, b, &fabric.path(p.src, p.dst))?;
        sim.add_route(b, id, a, &fabric.path(p.dst, p.src))?;
    }

    let deadline = Instant::ZERO + s.duration;
    let mut done = HostsDone::new(&sim);
    while !done.all_done() && sim.next_event_time().is_some_and(|t| t <= deadline) {
        sim.step();
        done.after_step(&sim);
    }
    let end = sim.now();

    let mut groups: Vec<GroupReport> = s
        .groups
        .iter()
        .map(|g| GroupReport {
            label: g.label.clone(),
            ..GroupReport::default()
        })
        .collect();
    let mut completions: Vec<Vec<Duration>> = vec![Vec::new(); s.groups.len()];
    for (i, p) in planned.iter().enumerate() {
        let id = VcId(32 + i as u32);
        let g = &s.groups[p.group];
        let r = &mut groups[p.group];
        r.vcs += 1;
        r.bytes_offered += g.bytes;
        let (Some(tx), Some(rx)) = (
            sim.host(ids[p.src as usize]).vc(id),
            sim.host(ids[p.dst as usize]).vc(id),
        ) else {
            continue;
        };
        let (App::Source(src), App::Sink(sink)) = (&tx.app, &rx.app) else {
            continue;
        };
        if src.started() {
            r.started += 1;
        }
        r.bytes_sent += src.queued();
        r.bytes_delivered += sink.delivered();
        r.messages_delivered += sink.messages();
        r.messages_lost += rx.psb.stats().messages_lost;
        if !sink.intact() || sink.bad_messages() > 0 {
            r.damaged += 1;
        }
        let st = tx.psb.stats();
        r.retransmits += st.retx_fast + st.retx_head + st.retx_timeout;
        let finished = tx.finished_at.zip(rx.finished_at).map(|(a, b)| a.max(b));
        if let Some(f) = finished {
            r.finished += 1;
            completions[p.group].push(f.saturating_duration_since(p.start));
        }
        if end > p.start {
            let ran = finished.unwrap_or(end).saturating_duration_since(p.start);
            r.goodput_bps += goodput(sink.delivered(), ran);
        }
    }
    for (r, mut c) in groups.iter_mut().zip(completions) {
        c.sort_unstable();
        r.median_completion = c.get(c.len() / 2).copied();
    }
    let (mut link_drops, mut link_frames) = (0, 0);
    for (_, l) in sim.links() {
        link_drops += l.stats().dropped();
        link_frames += l.stats().frames_delivered;
    }
    Ok(NetReport {
        hosts: t.hosts,
        switches: edges + aggs + 1,
        links: sim.links().count() as u32,
        vcs: planned.len() as u64,
        groups,
        sim_time: end - Instant::ZERO,
        events: sim.events_processed(),
        link_drops,
        link_frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(levels: u32) -> Tree {
        let l = |mbps: u64, us: u64| LevelLinks {
            rate_bps: mbps * 1_000_000,
            delay: Duration::from_micros(us),
            loss: 0.0,
        };
        Tree {
            hosts: 12,
            hosts_per_edge: 3,
            edges_per_agg: if levels == 3 { 2 } else { 0 },
            access: l(100, 10),
            edge_uplink: l(200, 50),
            agg_uplink: l(400, 200),
            round_robin: true,
            queue_frames: 32,
        }
    }

    #[test]
    fn paths_climb_only_as_far_as_they_must() {
        let t = tree(3);
        let mut sim: Sim<PsbHost> = Sim::new(1);
        let s = NetScenario {
            tree: t.clone(),
            groups: Vec::new(),
            duration: Duration::ZERO,
            overhead: FrameOverhead::None,
            seed: 1,
        };
        let mut f = Fabric {
            access: Vec::new(),
            edge: Vec::new(),
            agg: Vec::new(),
            hosts_per_edge: 3,
            edges_per_agg: 2,
        };
        for h in 0..12 {
            f.access
                .push(add_pair(&mut sim, &t, &t.access, s.overhead, &format!("h{h}")).unwrap());
        }
        for e in 0..4 {
            f.edge.push(
                add_pair(&mut sim, &t, &t.edge_uplink, s.overhead, &format!("e{e}")).unwrap(),
            );
        }
        for g in 0..2 {
            f.agg
                .push(add_pair(&mut sim, &t, &t.agg_uplink, s.overhead, &format!("g{g}")).unwrap());
        }
        // Same edge switch: up and down the access links only.
        assert_eq!(f.path(0, 2), vec![f.access[0].0, f.access[2].1]);
        // Same aggregation switch: through both edge uplinks.
        assert_eq!(f.path(0, 4).len(), 4);
        // Across the core: six links, symmetric in reverse.
        let p = f.path(1, 11);
        assert_eq!(
            p,
            vec![
                f.access[1].0,
                f.edge[0].0,
                f.agg[0].0,
                f.agg[1].1,
                f.edge[3].1,
                f.access[11].1
            ]
        );
    }

    fn mixed(levels: u32, loss: f64) -> NetScenario {
        let mut t = tree(levels);
        t.agg_uplink.loss = loss;
        t.edge_uplink.loss = loss;
        let group = |label: &str, count, config, bytes, msg_size| FlowGroup {
            label: label.into(),
            count,
            config,
            bytes,
            msg_size,
            start_within: Duration::from_millis(20),
        };
        NetScenario {
            tree: t,
            groups: vec![
                group("web", 40, TransportConfig::reliable(), 40_000, 16_384),
                group(
                    "cbr",
                    10,
                    TransportConfig::guaranteed(2_000_000),
                    20_480,
                    1024,
                ),
                group("ubr", 10, TransportConfig::best_effort(), 8192, 1024),
            ],
            duration: Duration::from_secs(30),
            overhead: FrameOverhead::Aal5Trailer,
            seed: 3,
        }
    }

    /// Every VC of every service gets its data across the tree: reliable VCs all of
    /// it despite loss on the uplinks; the others all of it but what the wire lost,
    /// whole messages at a time, and never a wrong byte.
    #[test]
    fn every_vc_delivers_and_bytes_are_conserved() {
        for levels in [2, 3] {
            let r = run(&mixed(levels, 0.01)).unwrap();
            assert_eq!(r.vcs, 60);
            for g in &r.groups {
                assert_eq!(
                    (g.finished, g.started, g.damaged),
                    (g.vcs, g.vcs, 0),
                    "{g:?}"
                );
                assert_eq!(g.bytes_sent, g.bytes_offered, "{g:?}");
                if g.label == "web" {
                    assert_eq!((g.bytes_delivered, g.messages_lost), (g.bytes_offered, 0));
                    assert!(g.retransmits > 0, "1 % loss on the uplinks: {g:?}");
                } else {
                    assert_eq!(
                        g.bytes_delivered + 1024 * g.messages_lost,
                        g.bytes_sent,
                        "{g:?}"
                    );
                }
            }
            assert!(
                r.link_drops > 0 && r.sim_time < Duration::from_secs(30),
                "{r:?}"
            );
        }
    }

    #[test]
    fn same_seed_same_run() {
        let a = run(&mixed(3, 0.02)).unwrap();
        let b = run(&mixed(3, 0.02)).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let mut other = mixed(3, 0.02);
        other.seed = 4;
        assert_ne!(format!("{a:?}"), format!("{:?}", run(&other).unwrap()));
    }
}
