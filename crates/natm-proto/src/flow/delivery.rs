//! The rate at which the path delivered a VC's TPDUs, measured from its ACKs: a bound
//! on what a rate estimate from ACK spacing may claim.
//!
//! Departure from seed 000 §5.3.3. Packet-pair trusts that the path keeps the spacing
//! the bottleneck gave a pair. A round-robin ATM switch does; a process that forwards
//! frames late and together (a user-space delay line on a loaded host, a receiver
//! descheduled mid-train) does not, and a pair that arrives compressed reads as a
//! bottleneck many times faster than the link (measured: 1.0–1.9 Gbit/s estimated on a
//! 100 Mbit/s path). What the path delivered over a round trip cannot be compressed
//! that way. A sample counts only when the path, not the sender, set it: the sender
//! offered more than the path delivered in the same span (as BBR's delivery rate,
//! Cheng et al., draft-cheng-iccrg-delivery-rate-estimation, without its app-limited
//! bookkeeping: a sender that offered no more than was delivered says nothing about
//! the bottleneck).

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;

/// A sample is the path's when the sender offered at least this much more than the
/// path delivered over the same span.
const OFFERED_OVER_DELIVERED: f64 = 1.1;

/// A sample of a path that kept up counts when the sender offered at least this share
/// of the bound: the path carried what the bound let through, so the bound may grow.
const NEAR_BOUND: f64 = 0.8;

/// A bound no sample has confirmed for this many windows is forgotten.
const STALE_WINDOWS: u32 = 4;

/// Longest send history kept (entries), whatever the horizon.
const MAX_LOG: usize = 1 << 16;

/// One transmission, with what had been delivered when it left.
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    /// Payload bytes sent before it.
    sent_before: u64,
    /// Payload bytes delivered when it left, and when the last of those was acknowledged.
    delivered: u64,
    delivered_at: Option<Instant>,
    /// When the most recently acknowledged TPDU had left, as this one left.
    first_sent: Option<Instant>,
}

/// How [`DeliveryRate`] turns samples into a bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundConfig {
    /// The bound is this factor above the largest recent sample: room to find a faster
    /// bottleneck (a quarter more per round trip, as BBR's probing gain).
    pub gain: f64,
    /// Samples are kept this long.
    pub window: Duration,
    /// The first bound after a start waits until samples the path set have run this
    /// long (the first round trip after a burst delivers less than the path can).
    pub warmup: Duration,
}

/// Delivery-rate samples of one VC, and the bound they put on its rate.
///
/// The bound appears once the path has delivered less than the sender offered or less
/// than its rate allowed (the path, not the sender, set the delivery rate: a sender
/// that sends steadily below its rate is taken as bounded by the path too, as BBR's
/// samples are when not marked application-limited), follows the largest sample of the window, and
/// grows while the path keeps up with a sender that uses it; with no new sample it
/// stays for four windows, then goes (the estimate rules again). No sample spans a
/// pause in sending (its rate is the sender's).
#[derive(Debug, Clone, Default)]
pub struct DeliveryRate {
    total_sent: u64,
    delivered: u64,
    delivered_at: Option<Instant>,
    /// When the most recently acknowledged TPDU left.
    last_acked_sent: Option<Instant>,
    log: VecDeque<Sent>,
    /// Samples that count (when, bytes/s), decreasing in rate: a windowed maximum.
    max: VecDeque<(Instant, f64)>,
    /// When the path first set a sample since the last start.
    since: Option<Instant>,
    /// The bound, bytes/s, and when a sample last counted.
    bound: Option<f64>,
    counted_at: Option<Instant>,
    /// When the sender last started again after a pause: a span reaching back before
    /// it holds the pause, and its rate is the sender's, not the path's.
    restart: Option<Instant>,
}

impl DeliveryRate {
    /// A sampler with no history.
    pub fn new() -> Self {
        DeliveryRate::default()
    }

    /// A TPDU of `bytes` payload left at `now`; the log reaches back `horizon`. A
    /// sender silent for `pause` or longer before it had paused (waiting for a probe's
    /// ACKs, for its window, or for data): no sample spans the pause.
    pub fn on_sent(&mut self, now: Instant, bytes: usize, horizon: Duration, pause: Duration) {
        if self
            .log
            .back()
            .is_none_or(|e| now.saturating_duration_since(e.at) >= pause)
        {
            self.restart = Some(now);
        }
        let floor = now - horizon;
        while self.log.len() >= MAX_LOG || self.log.front().is_some_and(|e| e.at < floor) {
            self.log.pop_front();
        }
        self.log.push_back(Sent {
            at: now,
            sent_before: self.total_sent,
            delivered: self.delivered,
            delivered_at: self.delivered_at,
            first_sent: self.last_acked_sent,
        });
        self.total_sent += bytes as u64;
    }

    /// Payload bytes sent before the first transmission at or after `t`.
    fn sent_before(&self, t: Instant) -> Option<u64> {
        let i = self.log.partition_point(|e| e.at < t);
        self.log.get(i).map(|e| e.sent_before)
    }

    /// An ACK at `now` covered `bytes` more payload; the TPDU that caused it had a
    /// round trip of `rtt`; the sender's rate is `rate` (bytes/s, if it has one).
    /// Returns the bound after it, bytes/s.
    pub fn on_ack(
        &mut self,
        now: Instant,
        rtt: Duration,
        bytes: u64,
        rate: Option<f64>,
        cfg: &BoundConfig,
    ) -> Option<f64> {
        self.delivered += bytes;
        self.delivered_at = Some(now);
        while self.max.front().is_some_and(|&(t, _)| t + cfg.window < now) {
            self.max.pop_front();
        }
        if let Some((sample, offered_more)) = self.sample(now, rtt) {
            // The path set the sample if it delivered less than the sender offered,
            // or less than the sender's rate while the sender did not pause (a window
            // that holds the sender makes it offer what comes back, but no more than
            // its rate would let it).
            let path_set =
                offered_more || rate.is_some_and(|r| sample * OFFERED_OVER_DELIVERED < r);
            let rate = sample;
            let near = |b: f64| rate * OFFERED_OVER_DELIVERED >= NEAR_BOUND * b;
            if path_set || self.bound.is_some_and(near) {
                while self.max.back().is_some_and(|&(_, r)| r <= rate) {
                    self.max.pop_back();
                }
                self.max.push_back((now, rate));
                self.counted_at = Some(now);
            }
            if path_set {
                self.since.get_or_insert(now);
            }
        }
        let warm = self
            .since
            .is_some_and(|t| now.saturating_duration_since(t) >= cfg.warmup);
        if let (true, Some(&(_, max))) = (warm, self.max.front()) {
            self.bound = Some(max * cfg.gain);
        }
        // A bound nothing has confirmed for a while may be stale (the VC was idle, or
        // sent below it): forget it, and the estimate rules again.
        if self
            .counted_at
            .is_some_and(|t| now.saturating_duration_since(t) > cfg.window * STALE_WINDOWS)
        {
            self.reset();
        }
        self.bound
    }

    /// The delivery rate the ACK at `now` measures, bytes/s, and whether the path set
    /// it (the sender offered more than it delivered); `None` if the ACK measures
    /// nothing (its span reaches into a pause, or no earlier ACK).
    fn sample(&mut self, now: Instant, rtt: Duration) -> Option<(f64, bool)> {
        if rtt.is_zero() {
            return None;
        }
        // The TPDU this ACK is for, found by its send time (two microseconds early:
        // RTTs come from microsecond timestamps, and a pair's two TPDUs leave at once).
        let sent_at = now - rtt;
        self.last_acked_sent = Some(sent_at);
        let i = self
            .log
            .partition_point(|e| e.at < sent_at - Duration::from_micros(2));
        let e = *self.log.get(i)?;
        let (delivered_at, first_sent) = (e.delivered_at?, e.first_sent?);
        if self.restart.is_some_and(|r| first_sent < r) {
            return None;
        }
        let acked = (self.delivered - e.delivered) as f64;
        let ack_span = now.saturating_duration_since(delivered_at).as_secs_f64();
        let send_span = e.at.saturating_duration_since(first_sent).as_secs_f64();
        if ack_span <= 0.0 || send_span <= 0.0 {
            return None;
        }
        let offered = (e.sent_before - self.sent_before(first_sent)?) as f64;
        let path_set = offered / send_span >= OFFERED_OVER_DELIVERED * acked / ack_span;
        Some((acked / ack_span.max(send_span), path_set))
    }

    /// The bound as of the last ACK, bytes/s.
    pub fn bound(&self) -> Option<f64> {
        self.bound
    }

    /// Forget every sample and the bound (the path may have changed).
    pub fn reset(&mut self) {
        self.max.clear();
        self.since = None;
        self.bound = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: BoundConfig = BoundConfig {
        gain: 1.25,
        window: Duration::from_millis(80),
        warmup: Duration::from_millis(20),
    };

    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1_000)
    }

    /// A sender that offers `offer` TPDUs of 1,000 bytes per millisecond into a path
    /// of `rtt` that delivers `path` per millisecond (a FIFO queue); the samples it
    /// keeps after `ms` milliseconds.
    fn run(offer: u64, path: u64, ms: u64) -> (DeliveryRate, Vec<f64>) {
        let mut d = DeliveryRate::new();
        let rtt = Duration::from_millis(10);
        let mut free = at(0);
        let mut acks = VecDeque::new();
        let mut samples = Vec::new();
        for n in 0..ms * offer {
            let t = at(n * 1000 / offer);
            while acks.front().is_some_and(|&(a, _)| a <= t) {
                let (a, s): (Instant, Instant) = acks.pop_front().unwrap();
                d.on_ack(a, a - s, 1000, None, &CFG);
                if let Some(r) = d.max.front() {
                    samples.push(r.1);
                }
            }
            d.on_sent(t, 1000, Duration::from_secs(1), Duration::from_millis(5));
            free = free.max(t) + Duration::from_micros(1000 / path);
            acks.push_back((free + rtt, t));
        }
        (d, samples)
    }

    #[test]
    fn a_sender_faster_than_the_path_is_bounded_near_the_path() {
        let (d, samples) = run(50, 10, 300);
        let bound = d.bound().unwrap();
        assert!((bound / 1.25 - 10e6).abs() / 10e6 < 0.05, "bound {bound}");
        assert!(!samples.is_empty());
    }

    #[test]
    fn a_sender_the_path_keeps_up_with_is_not_bounded() {
        let (d, samples) = run(5, 10, 300);
        assert!(samples.is_empty(), "{samples:?}");
        assert_eq!(d.bound(), None);
    }

    #[test]
    fn a_bound_nothing_confirms_goes_after_four_windows() {
        let (mut d, _) = run(50, 10, 300);
        assert!(d.bound().is_some());
        // A pause, then ACKs inside four windows of the last sample: kept.
        let pause = Duration::from_millis(5);
        d.on_sent(at(400_000), 1000, Duration::from_secs(1), pause);
        d.on_ack(at(410_000), Duration::from_millis(10), 1000, None, &CFG);
        assert!(d.bound().is_some());
        d.on_ack(at(700_000), Duration::from_millis(10), 1000, None, &CFG);
        assert_eq!(d.bound(), None);
    }

    #[test]
    fn no_bound_before_the_warmup() {
        let (d, _) = run(50, 10, 25);
        assert_eq!(
            d.bound(),
            None,
            "the first round trip is no measure of the path"
        );
    }
}
