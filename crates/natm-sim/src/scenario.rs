//! Whole experiments on the simulator: VCs from their own sender hosts through one
//! shared bottleneck to one receiver host, with a report per VC (what `natm sim` runs).
//!
//! ```text
//!  sender 0 ──access 0──┐                       ┌──► receiver (all sinks)
//!  sender 1 ──access 1──┼──► bottleneck ────────┘        │
//!  sender n ──access n──┘   rate, delay RTT/2,           │
//!        ▲                  queue FIFO or RR, loss       │
//!        └──────── return i ◄── back (delay RTT/2) ◄─────┘
//! ```

use std::time::Duration;

use super::endpoint::VcId;
use super::frame::FrameOverhead;
use super::link::LinkConfig;
use super::loss::{GilbertElliott, Impairments};
use super::psb_host::{goodput, App, PsbHost, Sink, Source};
use super::queue::QueueLimit;
use super::stats::LinkStats;
use super::topology::{HostId, LinkId};
use super::{Sim, SimError};
use natm_proto::time::Instant;
use natm_proto::transport::{FlowKind, Psb, PsbStats, Semantics, TransportConfig};

/// One VC of a scenario.
#[derive(Debug, Clone)]
pub struct VcSpec {
    /// A name for reports (e.g. the service class).
    pub label: String,
    /// The transport configuration of both ends.
    pub config: TransportConfig,
    /// Application bytes to send.
    pub bytes: u64,
    /// Message size (ignored for stream VCs).
    pub msg_size: u64,
    /// When the VC's application starts sending.
    pub start: Duration,
}

/// The network and the VCs of one run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Bottleneck rate, bit/s of frame bytes.
    pub rate_bps: u64,
    /// Round-trip propagation delay.
    pub rtt: Duration,
    /// Random loss on the bottleneck (data direction).
    pub loss: f64,
    /// Random loss on the return path (ACKs).
    pub ack_loss: f64,
    /// Bursty loss on the bottleneck.
    pub burst: Option<GilbertElliott>,
    /// Duplication probability on the bottleneck.
    pub duplicate: f64,
    /// Corruption probability on the bottleneck (caught by the AAL5 CRC).
    pub corrupt: f64,
    /// Bottleneck buffer in frames (per VC under round robin).
    pub queue_frames: u64,
    /// Bottleneck scheduling.
    pub round_robin: bool,
    /// The bottleneck rate changes to `.1` at `.0`.
    pub rate_change: Option<(Duration, u64)>,
    /// Access link rate (senders into the bottleneck).
    pub access_rate_bps: u64,
    /// Per-frame overhead on the wire.
    pub overhead: FrameOverhead,
    /// RNG seed.
    pub seed: u64,
    /// The VCs.
    pub vcs: Vec<VcSpec>,
    /// Give up after this much virtual time.
    pub time_limit: Duration,
    /// Record a time series every interval.
    pub series_interval: Option<Duration>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            rate_bps: 100_000_000,
            rtt: Duration::from_millis(1),
            loss: 0.0,
            ack_loss: 0.0,
            burst: None,
            duplicate: 0.0,
            corrupt: 0.0,
            queue_frames: 64,
            round_robin: true,
            rate_change: None,
            access_rate_bps: 1_000_000_000,
            overhead: FrameOverhead::Aal5Trailer,
            seed: 1,
            vcs: Vec::new(),
            time_limit: Duration::from_secs(600),
            series_interval: None,
        }
    }
}

/// What one VC achieved.
#[derive(Debug, Clone)]
pub struct VcReport {
    /// The VC's label.
    pub label: String,
    /// Flow control it ran.
    pub flow: FlowKind,
    /// Error control on.
    pub error_control: bool,
    /// Application bytes offered.
    pub bytes_offered: u64,
    /// Application bytes the PSB took.
    pub bytes_sent: u64,
    /// Application bytes delivered.
    pub bytes_delivered: u64,
    /// Whole messages delivered.
    pub messages_delivered: u64,
    /// Messages never delivered, as the receiving PSB counts them (`messages_lost`):
    /// lost whole or in part, each once, tail losses included once a later message or
    /// the CLOSE reveals them (0 on a VC with error control).
    pub messages_lost: u64,
    /// Every delivered byte matched what was sent.
    pub intact: bool,
    /// Messages delivered partial, twice, out of order or of the wrong size.
    pub bad_messages: u64,
    /// Goodput, bit/s: application bytes delivered over the time the VC ran, from its
    /// start until both ends finished (or the end of the run if they did not).
    pub goodput_bps: f64,
    /// Arrival rate from the first delivery to the last, bit/s (see
    /// [`Sink::steady_rate_bps`]).
    pub steady_rate_bps: Option<f64>,
    /// When the last byte arrived, from the start of the run.
    pub finished_at: Option<Duration>,
    /// Whether both ends finished in order.
    pub closed: bool,
    /// Sender counters.
    pub sender: PsbStats,
    /// Receiver counters.
    pub receiver: PsbStats,
    /// Smoothed RTT at the end; `None` if the VC never took an RTT sample (no ACKs:
    /// no error control), where the estimator would show its 1 s initial value.
    pub srtt: Option<Duration>,
}

/// One VC at one sample of the time series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VcPoint {
    /// Rate delivered to the application over the last interval, bit/s.
    pub rate_bps: f64,
    /// The flow controller's window, TPDUs, if it keeps one.
    pub window: Option<f64>,
    /// The flow controller's sending rate, bit/s, if it sets one.
    pub rate_set_bps: Option<f64>,
    /// Frames of this VC queued at the bottleneck.
    pub queue_frames: u64,
}

/// One row of the time series: time, bottleneck queue, and each VC.
#[derive(Debug, Clone)]
pub struct SeriesRow {
    /// Seconds since the start.
    pub t: f64,
    /// Frames queued at the bottleneck.
    pub queue_frames: u64,
    /// Per VC, in the scenario's order.
    pub vcs: Vec<VcPoint>,
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Per VC.
    pub vcs: Vec<VcReport>,
    /// Virtual time the run took.
    pub sim_time: Duration,
    /// Events the simulator processed.
    pub events: u64,
    /// The bottleneck's counters.
    pub bottleneck: LinkStats,
    /// The time series, if asked for.
    pub series: Vec<SeriesRow>,
}

struct Built {
    sim: Sim<PsbHost>,
    senders: Vec<HostId>,
    receiver: HostId,
    bottleneck: LinkId,
}

fn build(s: &Scenario) -> Result<Built, SimError> {
    let mut sim: Sim<PsbHost> = Sim::new(s.seed);
    let half = s.rtt / 2;
    let mut bl = LinkConfig::new(s.rate_bps, half)
        .name("bottleneck")
        .overhead(s.overhead)
        .impairments(Impairments {
            loss: s.loss,
            burst: s.burst,
            duplicate: s.duplicate,
            corrupt: s.corrupt,
        });
    bl = if s.round_robin {
        bl.round_robin(QueueLimit::frames(s.queue_frames))
    } else {
        bl.queue_limit(QueueLimit::frames(s.queue_frames))
    };
    if let Some((at, rate)) = s.rate_change {
        bl = bl.rate_change(Instant::ZERO + at, rate);
    }
    let bottleneck = sim.add_link(bl)?;
    let back = sim.add_link(
        LinkConfig::new(s.access_rate_bps, half)
            .name("back")
            .overhead(s.overhead)
            .loss(s.ack_loss),
    )?;
    let mut rx_host = PsbHost::new();
    let mut senders = Vec::new();
    let mut tx_hosts = Vec::new();
    for (i, spec) in s.vcs.iter().enumerate() {
        let id = VcId(32 + i as u32);
        let tag = i as u8;
        let mut cfg = spec.config.clone();
        cfg.cookie = Some(0x4E41_0000 | i as u32);
        let flow = natm_proto::flow::build(cfg.flow, &cfg);
        let start = Instant::ZERO + spec.start;
        let psb = Psb::connect(cfg.clone(), flow, start);
        let msg = if cfg.semantics == Semantics::Stream {
            u64::MAX
        } else {
            spec.msg_size
        };
        let mut h = PsbHost::new();
        h.add(
            id,
            psb,
            App::Source(Source::new(tag, spec.bytes, msg).starting_at(start)),
        );
        tx_hosts.push(h);
        let sink = if cfg.semantics == Semantics::Stream {
            Sink::new(tag)
        } else {
            Sink::new(tag).expecting(spec.msg_size, spec.bytes)
        };
        rx_host.add(id, Psb::listen(cfg), App::Sink(sink));
    }
    let receiver = sim.add_host(rx_host);
    for (i, h) in tx_hosts.into_iter().enumerate() {
        let id = VcId(32 + i as u32);
        let host = sim.add_host(h);
        let access = sim.add_link(
            LinkConfig::new(s.access_rate_bps, Duration::ZERO)
                .name(format!("access{i}"))
                .overhead(s.overhead),
        )?;
        let ret = sim.add_link(
            LinkConfig::new(s.access_rate_bps, Duration::ZERO)
                .name(format!("return{i}"))
                .overhead(s.overhead),
        )?;
        sim.add_route(host, id, receiver, &[access, bottleneck])?;
        sim.add_route(receiver, id, host, &[back, ret])?;
        senders.push(host);
    }
    if s.round_robin {
        for (i, w) in rr_weights(s).into_iter().enumerate() {
            sim.set_vc_weight(bottleneck, VcId(32 + i as u32), w)?;
        }
    }
    Ok(Built {
        sim,
        senders,
        receiver,
        bottleneck,
    })
}

/// Round-robin weights (frames per turn) that give each rate-reserving VC at least
/// its reserved share of the bottleneck when every VC is backlogged: the others get 1
/// each, a reserving VC `r / R · W` of the turn's `W` frames, rounded up. An unweighted
/// round robin gives each of n VCs 1/n, which starves a reservation above that.
fn rr_weights(s: &Scenario) -> Vec<u32> {
    let reserved = |spec: &VcSpec| {
        (spec.config.flow == FlowKind::LeakyBucket && spec.config.rate > 0)
            .then(|| spec.config.rate as f64 / s.rate_bps.max(1) as f64)
    };
    let shares: Vec<Option<f64>> = s.vcs.iter().map(reserved).collect();
    let others = shares.iter().filter(|r| r.is_none()).count() as f64;
    // What the reservations leave to the others; overbooking still serves everyone.
    let left = (1.0 - shares.iter().flatten().sum::<f64>()).max(0.05);
    let smallest = shares
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    // Frames in one turn: the others' one each fill what is left; with no others, the
    // smallest reservation gets one frame.
    let turn = if others > 0.0 {
        others / left
    } else {
        1.0 / smallest
    };
    shares
        .iter()
        .map(|r| r.map_or(1, |r| ((r * turn).ceil() as u32).max(1)))
        .collect()
}

/// Which hosts have finished every VC end, kept up to date one step at a time (a
/// step changes at most one host), so that asking whether the run is over costs O(1)
/// however many hosts there are.
pub(crate) struct HostsDone {
    done: Vec<bool>,
    remaining: usize,
}

impl HostsDone {
    pub(crate) fn new(sim: &Sim<PsbHost>) -> Self {
        let done: Vec<bool> = sim.host_ids().map(|h| sim.host(h).finished()).collect();
        let remaining = done.iter().filter(|d| !**d).count();
        HostsDone { done, remaining }
    }

    pub(crate) fn after_step(&mut self, sim: &Sim<PsbHost>) {
        let Some(h) = sim.last_host() else {
            return;
        };
        let now = sim.host(h).finished();
        let was = &mut self.done[h.index()];
        if now != *was {
            *was = now;
            if now {
                self.remaining -= 1;
            } else {
                self.remaining += 1;
            }
        }
    }

    pub(crate) fn all_done(&self) -> bool {
        self.remaining == 0
    }
}

/// Run a scenario to completion (every VC closed) or its time limit.
pub fn run(s: &Scenario) -> Result<Report, SimError> {
    run_observed(s, |_| {})
}

/// As [`run`], calling `observe` with each row of the time series as it is taken.
pub fn run_observed(s: &Scenario, mut observe: impl FnMut(&SeriesRow)) -> Result<Report, SimError> {
    let Built {
        mut sim,
        senders,
        receiver,
        bottleneck,
    } = build(s)?;
    let deadline = Instant::ZERO + s.time_limit;
    let mut hosts = HostsDone::new(&sim);
    let mut series = Vec::new();
    if let Some(iv) = s.series_interval {
        let n = s.vcs.len();
        let mut last = vec![0u64; n];
        let mut t = Instant::ZERO;
        while t <= deadline && !hosts.all_done() {
            while sim.next_event_time().is_some_and(|at| at <= t) {
                sim.step();
                hosts.after_step(&sim);
            }
            sim.run_until(t);
            let rx = sim.host(receiver);
            let mut vcs = Vec::with_capacity(n);
            for (i, &h) in senders.iter().enumerate() {
                let id = VcId(32 + i as u32);
                let delivered = match rx.vc(id).map(|v| &v.app) {
                    Some(App::Sink(k)) => k.delivered(),
                    _ => 0,
                };
                let rate = (delivered - last[i]) as f64 * 8.0 / iv.as_secs_f64();
                last[i] = delivered;
                let (w, r) = sim.host(h).vc(id).map_or((None, None), |v| {
                    (v.psb.flow().window(), v.psb.flow().rate_bps())
                });
                let q = sim
                    .link(bottleneck)
                    .vc_stats(id)
                    .map_or(0, |v| v.queue_frames);
                vcs.push(VcPoint {
                    rate_bps: rate,
                    window: w,
                    rate_set_bps: r,
                    queue_frames: q,
                });
            }
            let row = SeriesRow {
                t: t.as_secs_f64(),
                queue_frames: sim.link(bottleneck).queue_frames(),
                vcs,
            };
            observe(&row);
            series.push(row);
            t += iv;
        }
    } else {
        while sim.now() < deadline && !hosts.all_done() && sim.step() {
            hosts.after_step(&sim);
        }
    }
    let sim_time = sim.now() - Instant::ZERO;
    let mut vcs = Vec::new();
    for (i, (&h, spec)) in senders.iter().zip(&s.vcs).enumerate() {
        let id = VcId(32 + i as u32);
        let (Some(tx), Some(rx)) = (sim.host(h).vc(id), sim.host(receiver).vc(id)) else {
            continue;
        };
        let (sent, sink) = match (&tx.app, &rx.app) {
            (App::Source(src), App::Sink(k)) => (src.queued(), k),
            _ => continue,
        };
        let start = Instant::ZERO + spec.start;
        // Goodput is what arrived over the time the VC ran: to when both ends finished,
        // or to the end of the run. Not to its last delivery: a best-effort VC that
        // lost 98 % of its bytes would then show its early deliveries' rate.
        // Both ends finished: when the later of them did.
        let done_at = tx.finished_at.zip(rx.finished_at).map(|(a, b)| a.max(b));
        let end = done_at.unwrap_or(sim.now());
        let goodput_bps = goodput(sink.delivered(), end.saturating_duration_since(start));
        let finished_at = done_at
            .and(sink.span())
            .map(|(_, last)| last - Instant::ZERO);
        vcs.push(VcReport {
            label: spec.label.clone(),
            flow: spec.config.flow,
            error_control: spec.config.error_control,
            bytes_offered: spec.bytes,
            bytes_sent: sent,
            bytes_delivered: sink.delivered(),
            messages_delivered: sink.messages(),
            messages_lost: rx.psb.stats().messages_lost,
            intact: sink.intact(),
            bad_messages: sink.bad_messages(),
            goodput_bps,
            steady_rate_bps: sink.steady_rate_bps(),
            finished_at,
            closed: tx.psb.status().closed && rx.psb.status().peer_closed,
            sender: tx.psb.stats().clone(),
            receiver: rx.psb.stats().clone(),
            srtt: tx.psb.rtt().has_sample().then(|| tx.psb.rtt().srtt()),
        });
    }
    Ok(Report {
        vcs,
        sim_time,
        events: sim.events_processed(),
        bottleneck: sim.link(bottleneck).stats().clone(),
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(cfg: TransportConfig, bytes: u64, loss: f64) -> Report {
        let s = Scenario {
            loss,
            vcs: vec![VcSpec {
                label: "x".into(),
                config: cfg,
                bytes,
                msg_size: 65536,
                start: Duration::ZERO,
            }],
            ..Scenario::default()
        };
        run(&s).expect("scenario")
    }

    #[test]
    fn reliable_transfer_through_the_simulator_is_intact() {
        for loss in [0.0, 0.05] {
            let r = one(TransportConfig::reliable(), 5_000_000, loss);
            let v = &r.vcs[0];
            eprintln!("{loss}: {:?} {:.1} Mbit/s", v.sender, v.goodput_bps / 1e6);
            assert!(v.intact && v.closed);
            assert_eq!(v.bytes_delivered, 5_000_000);
        }
    }
}
