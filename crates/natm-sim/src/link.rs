//! One direction of a link: a queue, a transmitter of a given (possibly changing) rate,
//! a propagation delay, and a wire that may lose, duplicate or corrupt frames.
//!
//! A frame's timeline on a link: it is offered to the queue (or tail-dropped), waits its
//! turn, is serialized for `wire_bytes × 8 / rate` at the rate in force when its
//! serialization starts, then propagates for `delay`; its last bit reaches the far end
//! `serialization + delay` after it started.

use std::time::Duration;

use super::endpoint::VcId;
use super::error::SimError;
use super::frame::{FrameOverhead, Packet};
use super::loss::{GilbertElliott, Impairer, Impairments, SimRng};
use super::queue::{Discipline, LinkQueue, QueueLimit, SlotIdx};
use super::stats::{LinkStats, VcStats};
use super::topology::RouteIdx;
use natm_proto::time::Instant;

/// Everything that defines one direction of a link. Build with [`LinkConfig::new`] and
/// the chained setters; hand it to [`Sim::add_link`](super::Sim::add_link).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// A name for reports and [`Sim::link_by_name`](super::Sim::link_by_name).
    pub name: String,
    /// Transmit rate in bit/s from time zero.
    pub rate_bps: u64,
    /// Later rates: from each instant on, frames start serializing at the new rate.
    pub rate_changes: Vec<(Instant, u64)>,
    /// Propagation delay.
    pub delay: Duration,
    /// Bytes the transmitter adds to every frame (AAL5 padding, cell tax).
    pub overhead: FrameOverhead,
    /// Bound on the whole queue.
    pub queue_limit: QueueLimit,
    /// How the queue picks the next frame.
    pub discipline: Discipline,
    /// What the wire does to frames.
    pub impairments: Impairments,
}

impl LinkConfig {
    /// A clean FIFO link of `rate_bps` bit/s and `delay` propagation, unlimited queue.
    pub fn new(rate_bps: u64, delay: Duration) -> Self {
        LinkConfig {
            name: String::new(),
            rate_bps,
            rate_changes: Vec::new(),
            delay,
            overhead: FrameOverhead::None,
            queue_limit: QueueLimit::UNLIMITED,
            discipline: Discipline::Fifo,
            impairments: Impairments::NONE,
        }
    }

    /// Names the link.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the per-frame overhead.
    #[must_use]
    pub fn overhead(mut self, overhead: FrameOverhead) -> Self {
        self.overhead = overhead;
        self
    }

    /// Bounds the whole queue.
    #[must_use]
    pub fn queue_limit(mut self, limit: QueueLimit) -> Self {
        self.queue_limit = limit;
        self
    }

    /// Serves per-VC sub-queues in round robin, each bounded by `per_vc`.
    #[must_use]
    pub fn round_robin(mut self, per_vc: QueueLimit) -> Self {
        self.discipline = Discipline::RoundRobin { per_vc };
        self
    }

    /// Switches the rate to `rate_bps` at `at` (frames already on the wire finish at
    /// the old rate).
    #[must_use]
    pub fn rate_change(mut self, at: Instant, rate_bps: u64) -> Self {
        self.rate_changes.push((at, rate_bps));
        self
    }

    /// Sets all impairments at once.
    #[must_use]
    pub fn impairments(mut self, impairments: Impairments) -> Self {
        self.impairments = impairments;
        self
    }

    /// Loses each frame independently with probability `p`.
    #[must_use]
    pub fn loss(mut self, p: f64) -> Self {
        self.impairments.loss = p;
        self
    }

    /// Loses frames in bursts by the Gilbert–Elliott model.
    #[must_use]
    pub fn burst_loss(mut self, model: GilbertElliott) -> Self {
        self.impairments.burst = Some(model);
        self
    }

    /// Delivers each surviving frame twice with probability `p`.
    #[must_use]
    pub fn duplicate(mut self, p: f64) -> Self {
        self.impairments.duplicate = p;
        self
    }

    /// Flips a bit in each arriving copy with probability `p`.
    #[must_use]
    pub fn corrupt(mut self, p: f64) -> Self {
        self.impairments.corrupt = p;
        self
    }

    fn validate(&self) -> Result<(), SimError> {
        let rates = std::iter::once(self.rate_bps).chain(self.rate_changes.iter().map(|c| c.1));
        if let Some(index) = rates.into_iter().position(|r| r == 0) {
            return Err(SimError::ZeroRate { index });
        }
        self.impairments.validate()
    }
}

/// Time to serialize `wire_bytes` at `rate_bps`, rounded up to whole nanoseconds so that
/// a link never runs faster than its rate.
pub(crate) fn serialization_ns(wire_bytes: u64, rate_bps: u64) -> u64 {
    let ns = (u128::from(wire_bytes) * 8 * 1_000_000_000).div_ceil(u128::from(rate_bps));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The state of one direction of a link during a run.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    /// Index of the first rate change not yet in force.
    next_change: usize,
    rate_bps: u64,
    queue: LinkQueue,
    in_service: Option<(SlotIdx, Packet)>,
    impairer: Impairer,
    stats: LinkStats,
}

impl Link {
    pub(crate) fn new(mut cfg: LinkConfig, rng: SimRng) -> Result<Self, SimError> {
        cfg.validate()?;
        // Stable, so two changes at the same instant apply in the order given.
        cfg.rate_changes.sort_by_key(|c| c.0);
        Ok(Link {
            next_change: 0,
            rate_bps: cfg.rate_bps,
            queue: LinkQueue::new(cfg.discipline, cfg.queue_limit),
            in_service: None,
            impairer: Impairer::new(rng),
            stats: LinkStats::default(),
            cfg,
        })
    }

    /// The link's name ("" if none was given).
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The configuration, with the impairments currently in force.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// The link's counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Frames waiting in the queue (the one being serialized is not counted).
    pub fn queue_frames(&self) -> u64 {
        self.stats.queue_frames
    }

    /// Bytes waiting in the queue.
    pub fn queue_bytes(&self) -> u64 {
        self.stats.queue_bytes
    }

    /// Counters of one VC on this link, if a route or weight put it there.
    pub fn vc_stats(&self, vc: VcId) -> Option<&VcStats> {
        self.queue.vc_stats(vc)
    }

    /// Every VC on this link with its counters, in the order the routes were added.
    pub fn vcs(&self) -> impl Iterator<Item = (VcId, &VcStats)> + '_ {
        self.queue.vcs()
    }

    /// Whether a frame is being serialized now.
    pub fn is_busy(&self) -> bool {
        self.in_service.is_some()
    }

    /// The rate in force at `t` by the configured schedule.
    pub fn rate_at(&self, t: Instant) -> u64 {
        self.cfg
            .rate_changes
            .iter()
            .take_while(|c| c.0 <= t)
            .last()
            .map_or(self.cfg.rate_bps, |c| c.1)
    }

    /// The route that carries `vc` over this link, if any.
    pub(crate) fn queue_owner(&self, vc: VcId) -> Option<RouteIdx> {
        self.queue.owner(vc)
    }

    pub(crate) fn queue_mut(&mut self) -> &mut LinkQueue {
        &mut self.queue
    }

    pub(crate) fn set_impairments(&mut self, impairments: Impairments) -> Result<(), SimError> {
        impairments.validate()?;
        self.cfg.impairments = impairments;
        Ok(())
    }

    /// Offers a frame to the queue; gives it back if tail-dropped.
    pub(crate) fn enqueue(&mut self, slot: SlotIdx, pkt: Packet) -> Result<(), Packet> {
        self.queue.enqueue(slot, pkt, &mut self.stats)
    }

    /// If idle and a frame waits, starts serializing it and returns when it will be done.
    pub(crate) fn start_next(&mut self, now: Instant) -> Option<Instant> {
        if self.in_service.is_some() {
            return None;
        }
        let (slot, pkt) = self.queue.dequeue(&mut self.stats)?;
        // Rate changes are looked up lazily: only a frame starting serialization cares.
        while let Some(&(at, rate)) = self.cfg.rate_changes.get(self.next_change) {
            if at > now {
                break;
            }
            self.rate_bps = rate;
            self.next_change += 1;
        }
        let wire = self.cfg.overhead.wire_bytes(pkt.bytes.len());
        let ns = serialization_ns(wire, self.rate_bps);
        self.stats.busy_ns += ns;
        self.stats.wire_bytes_out += wire;
        self.in_service = Some((slot, pkt));
        Some(now + Duration::from_nanos(ns))
    }

    /// Takes the frame whose serialization just ended and counts it as sent.
    pub(crate) fn finish(&mut self) -> (SlotIdx, Packet) {
        let (slot, pkt) = self
            .in_service
            .take()
            .expect("TxDone is only scheduled for a frame in service");
        let len = pkt.bytes.len() as u64;
        self.stats.frames_out += 1;
        self.stats.bytes_out += len;
        let v = self.queue.vc_stats_mut(slot);
        v.frames_out += 1;
        v.bytes_out += len;
        (slot, pkt)
    }

    /// The impairment settings and the random state to apply them with.
    pub(crate) fn wire(&mut self) -> (&Impairments, &mut Impairer) {
        (&self.cfg.impairments, &mut self.impairer)
    }

    pub(crate) fn delay(&self) -> Duration {
        self.cfg.delay
    }

    pub(crate) fn stats_mut(&mut self) -> &mut LinkStats {
        &mut self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::stream_rng;

    #[test]
    fn serialization_is_exact_and_rounds_up() {
        // 1000 bytes at 8 Mbit/s: exactly 1 ms.
        assert_eq!(serialization_ns(1000, 8_000_000), 1_000_000);
        // 1 byte at 3 bit/s: 8/3 s, rounded up.
        assert_eq!(serialization_ns(1, 3), 2_666_666_667);
        assert_eq!(serialization_ns(0, 1), 0);
        assert_eq!(serialization_ns(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn rate_schedule_applies_in_time_order() {
        let ms = |n| Instant::ZERO + Duration::from_millis(n);
        let cfg = LinkConfig::new(1_000, Duration::ZERO)
            .rate_change(ms(20), 3_000)
            .rate_change(ms(10), 2_000);
        let link = Link::new(cfg, stream_rng(0, 0)).unwrap();
        assert_eq!(link.rate_at(ms(0)), 1_000);
        assert_eq!(link.rate_at(ms(10)), 2_000);
        assert_eq!(link.rate_at(ms(19)), 2_000);
        assert_eq!(link.rate_at(ms(25)), 3_000);
    }

    #[test]
    fn zero_rates_and_bad_probabilities_are_refused() {
        let zero = LinkConfig::new(0, Duration::ZERO);
        assert_eq!(
            Link::new(zero, stream_rng(0, 0)).unwrap_err(),
            SimError::ZeroRate { index: 0 }
        );
        let later = LinkConfig::new(1, Duration::ZERO).rate_change(Instant::ZERO, 0);
        assert_eq!(
            Link::new(later, stream_rng(0, 0)).unwrap_err(),
            SimError::ZeroRate { index: 1 }
        );
        let lossy = LinkConfig::new(1, Duration::ZERO).duplicate(-0.1);
        assert!(matches!(
            Link::new(lossy, stream_rng(0, 0)),
            Err(SimError::BadProbability {
                what: "duplicate",
                ..
            })
        ));
    }
}
