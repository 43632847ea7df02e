//! ACK aggregation: how far the ACKs of a VC ran ahead of its estimated rate lately,
//! the allowance a rate-based sender's in-flight bound needs so that ACKs which come
//! late and together do not stall it.
//!
//! Departure from seed 000 §5.3.3, where nothing but λ holds the sender. Once an
//! in-flight bound does ([`super::packet_pair::PacketPair::in_flight_cap`]), ACKs held
//! back and released in a batch (a receiver that acknowledges a batch of receives at
//! once, a host descheduled for a few hundred microseconds, a shaper's burst) hold the
//! sender at its bound while the path idles. On a short fast path the bound is a few
//! TPDUs and every such hiccup costs goodput. As BBR's `extra_acked` (Cardwell et al.,
//! draft-cardwell-iccrg-bbr-congestion-control §4.6.4.3): per aggregation epoch, the
//! bytes acknowledged beyond what the estimated rate would have delivered in it; the
//! allowance is the largest of the last [`WINDOW_ROUNDS`] round trips.

use std::collections::VecDeque;

use crate::time::Instant;

/// The allowance is the largest excess of this many round trips (BBR's
/// `BBRExtraAckedFilterLen`).
pub const WINDOW_ROUNDS: u64 = 10;

/// The excess of ACKs over a VC's rate, per aggregation epoch, and its windowed maximum.
#[derive(Debug, Clone, Default)]
pub struct AckAggregation {
    /// When the current epoch began (the ACK rate last fell to the estimate), and the
    /// bytes acknowledged since.
    epoch: Option<Instant>,
    acked: f64,
    /// (round, excess bytes), decreasing in excess: a windowed maximum.
    max: VecDeque<(u64, f64)>,
}

impl AckAggregation {
    /// No history.
    pub fn new() -> Self {
        AckAggregation::default()
    }

    /// An ACK at `now` covered `bytes` more payload, in round trip `round`; the VC's
    /// estimated rate is `rate` bytes/s. An excess is counted up to `limit` bytes (the
    /// in-flight bound, as BBR caps it by its window: an excess beyond what could be in
    /// flight is a measurement of something else).
    pub fn on_ack(&mut self, now: Instant, bytes: u64, rate: f64, round: u64, limit: f64) {
        let start = *self.epoch.get_or_insert(now);
        let mut expected = rate * now.saturating_duration_since(start).as_secs_f64();
        if self.acked <= expected {
            // The ACKs fell back to the rate: a new epoch starts with this one.
            self.epoch = Some(now);
            self.acked = 0.0;
            expected = 0.0;
        }
        self.acked += bytes as f64;
        let extra = (self.acked - expected).clamp(0.0, limit.max(0.0));
        while self
            .max
            .front()
            .is_some_and(|&(r, _)| r + WINDOW_ROUNDS <= round)
        {
            self.max.pop_front();
        }
        while self.max.back().is_some_and(|&(_, e)| e <= extra) {
            self.max.pop_back();
        }
        self.max.push_back((round, extra));
    }

    /// The allowance: the largest excess of the last [`WINDOW_ROUNDS`] round trips,
    /// bytes.
    pub fn extra(&self) -> f64 {
        self.max.front().map_or(0.0, |&(_, e)| e)
    }

    /// Forget everything (the path may have changed).
    pub fn reset(&mut self) {
        *self = AckAggregation::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1000)
    }

    /// 100 ACKs at the rate (1,000 bytes every 8 µs at 125 MB/s), then 25 held
    /// 200 µs and released 2 µs apart, all within round 0 and 1; the time after.
    fn batch(a: &mut AckAggregation, limit: f64) -> u64 {
        let mut t = 0;
        for _ in 0..100 {
            a.on_ack(at(t), 1000, 125e6, 0, limit);
            t += 8;
        }
        t += 200;
        for _ in 0..25 {
            a.on_ack(at(t), 1000, 125e6, 1, limit);
            t += 2;
        }
        t
    }

    #[test]
    fn acks_at_the_rate_leave_no_allowance() {
        let mut a = AckAggregation::new();
        for i in 0..1000 {
            a.on_ack(at(i * 8), 1000, 125e6, i / 10, 1e9);
        }
        assert!(a.extra() <= 1000.0, "{}", a.extra());
    }

    /// The batch less what the rate delivers over the batch's own 48 µs (the epoch
    /// starts again at its first ACK, which came after the rate's share) is the
    /// allowance, kept for ten round trips.
    #[test]
    fn a_batch_of_held_acks_is_the_allowance_for_ten_round_trips() {
        let mut a = AckAggregation::new();
        let mut t = batch(&mut a, 1e9);
        let extra = a.extra();
        assert!((18_000.0..=20_000.0).contains(&extra), "{extra}");
        // The ACKs fall behind the rate (one each 200 µs): each starts an epoch.
        for r in 2..=10 {
            t += 200;
            a.on_ack(at(t), 1000, 125e6, r, 1e9);
        }
        assert_eq!(a.extra(), extra, "kept through round 10");
        a.on_ack(at(t + 200), 1000, 125e6, 11, 1e9);
        assert!(a.extra() <= 1000.0, "gone in round 11: {}", a.extra());
    }

    #[test]
    fn the_allowance_stays_within_the_limit_and_goes_on_reset() {
        let mut a = AckAggregation::new();
        batch(&mut a, 5000.0);
        assert_eq!(a.extra(), 5000.0);
        a.reset();
        assert_eq!(a.extra(), 0.0);
    }
}
