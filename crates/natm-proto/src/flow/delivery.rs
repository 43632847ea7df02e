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
const STALE_WINDOWS: u64 = 4;

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
    /// Samples are kept this many round trips (packet-timed, as BBR's: a round ends
    /// when a TPDU sent after it began is acknowledged, so no round passes while the
    /// path delivers nothing, and a stall's one slow sample cannot push out the rate
    /// the path had before it).
    pub window_rounds: u64,
    /// The first bound after a start waits until samples the path set have run this
    /// long (the first round trip after a burst delivers less than the path can).
    pub warmup: Duration,
}

/// Delivery-rate samples of one VC, and the bound they put on its rate.
///
/// The bound appears once the path has delivered less than the sender offered or less
/// than its rate allowed (the path, not the sender, set the delivery rate: a sender
/// that sends steadily below its rate is taken as bounded by the path too, as BBR's
/// samples are when not marked application-limited), follows the largest sample of the
/// last [`BoundConfig::window_rounds`] round trips, and grows while the path keeps up
/// with a sender that uses it; with no sample that counts for four such windows it
/// goes (the estimate rules again). No sample spans a
/// pause in sending with nothing in flight (its rate is the sender's); a sender its
/// window holds while the path delivers what is in flight has not paused (as BBR marks
/// a sample application-limited only when the sender had nothing to send, not when its
/// window was full).
#[derive(Debug, Clone, Default)]
pub struct DeliveryRate {
    total_sent: u64,
    delivered: u64,
    delivered_at: Option<Instant>,
    /// When the most recently acknowledged TPDU left.
    last_acked_sent: Option<Instant>,
    log: VecDeque<Sent>,
    /// Samples that count (round, bytes/s), decreasing in rate: a windowed maximum.
    max: VecDeque<(u64, f64)>,
    /// Round trips so far, and what had been delivered when the current one began.
    round: u64,
    round_delivered: u64,
    /// When the path first set a sample since the last start.
    since: Option<Instant>,
    /// The bound, bytes/s, and the round in which a sample last counted.
    bound: Option<f64>,
    counted_round: Option<u64>,
    /// When the sender last started again after a pause: a span reaching back before
    /// it holds the pause, and its rate is the sender's, not the path's.
    restart: Option<Instant>,
}

impl DeliveryRate {
    /// A sampler with no history.
    pub fn new() -> Self {
        DeliveryRate::default()
    }

    /// A TPDU of `bytes` payload left at `now`, with `in_flight` TPDUs unacknowledged
    /// before it; the log reaches back `horizon`. A sender silent for `pause` or
    /// longer with nothing in flight had paused (waiting for a probe's ACKs or for
    /// data): no sample spans the pause. Silent with TPDUs in flight it was held by
    /// its window while the path delivered them (under loss, a hole at the head holds
    /// the window for a round trip): samples across that are the path's.
    pub fn on_sent(
        &mut self,
        now: Instant,
        bytes: usize,
        horizon: Duration,
        pause: Duration,
        in_flight: u32,
    ) {
        if self
            .log
            .back()
            .is_none_or(|e| in_flight == 0 && now.saturating_duration_since(e.at) >= pause)
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
        let sample = self.sample(now, rtt);
        let round = self.round;
        while self
            .max
            .front()
            .is_some_and(|&(r, _)| r + cfg.window_rounds < round)
        {
            self.max.pop_front();
        }
        if let Some((sample, offered_more)) = sample {
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
                self.max.push_back((round, rate));
                self.counted_round = Some(round);
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
            .counted_round
            .is_some_and(|r| round > r + cfg.window_rounds * STALE_WINDOWS)
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
        if e.delivered >= self.round_delivered {
            // It left after the round began: the round is over.
            self.round += 1;
            self.round_delivered = self.delivered;
        }
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

    /// Round trips counted so far (packet-timed, see [`BoundConfig::window_rounds`]).
    pub fn round(&self) -> u64 {
        self.round
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
        window_rounds: 8,
        warmup: Duration::from_millis(20),
    };

    fn at(us: u64) -> Instant {
        Instant::from_nanos(1_000_000 + us * 1_000)
    }

    /// A sender that offers `offer` TPDUs of 1,000 bytes per millisecond into a path
    /// of `rtt` that delivers `path` per millisecond (a FIFO queue); the samples it
    /// keeps after `ms` milliseconds.
    fn run(offer: u64, path: u64, ms: u64) -> (DeliveryRate, Vec<f64>) {
        drive((0..ms * offer).map(|n| at(n * 1000 / offer)), path, true)
    }

    /// TPDUs of 1,000 bytes sent at `sends` into a path of 10 ms that delivers `path`
    /// per millisecond (a FIFO queue); the sampler is told what is in flight at each
    /// (`in_flight`), or nothing ever is. Returns the samples it keeps by the last.
    fn drive(
        sends: impl Iterator<Item = Instant>,
        path: u64,
        in_flight: bool,
    ) -> (DeliveryRate, Vec<f64>) {
        let mut d = DeliveryRate::new();
        let rtt = Duration::from_millis(10);
        let mut free = at(0);
        let mut acks = VecDeque::new();
        let mut samples = Vec::new();
        let mut ack_until = |d: &mut DeliveryRate, acks: &mut VecDeque<_>, t: Instant| {
            while acks.front().is_some_and(|&(a, _)| a <= t) {
                let (a, s): (Instant, Instant) = acks.pop_front().unwrap();
                d.on_ack(a, a - s, 1000, None, &CFG);
                if let Some(r) = d.max.front() {
                    samples.push(r.1);
                }
            }
        };
        for t in sends {
            ack_until(&mut d, &mut acks, t);
            let pipe = if in_flight { acks.len() as u32 } else { 0 };
            d.on_sent(
                t,
                1000,
                Duration::from_secs(1),
                Duration::from_millis(5),
                pipe,
            );
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

    /// A sender its window holds: every 9 ms a burst of 100 TPDUs at 50 a
    /// millisecond into a path that delivers 10, then 7 ms of silence with some still
    /// in flight (under loss a hole at the head holds the window for a round trip).
    /// The path delivered throughout, so its rate bounds the sender; the same
    /// silences with nothing in flight are pauses, and no sample spans one (before,
    /// window-held silences counted as pauses too: through a 100 Mbit/s `tbf` the
    /// bound went, packet-pair's compressed pairs paced at 20–30 Gbit/s, and the
    /// shaper dropped 8–64 thousand packets in 7 s).
    #[test]
    fn a_sender_its_window_holds_is_bounded_by_the_path() {
        let sends = || (0..20u64).flat_map(|b| (0..100).map(move |n| at(b * 9_000 + n * 20)));
        let (held, _) = drive(sends(), 10, true);
        let bound = held.bound().expect("a bound");
        assert!((bound / 1.25 - 10e6).abs() / 10e6 < 0.05, "bound {bound}");
        let (paused, samples) = drive(sends(), 10, false);
        assert_eq!(paused.bound(), None, "{samples:?}");
    }

    #[test]
    fn a_sender_the_path_keeps_up_with_is_not_bounded() {
        let (d, samples) = run(5, 10, 300);
        assert!(samples.is_empty(), "{samples:?}");
        assert_eq!(d.bound(), None);
    }

    /// 12 TPDUs a millisecond into a path of 10 for 200 ms (bounded), then 5 a
    /// millisecond: samples below the bound that the path did not set confirm
    /// nothing, and after four windows of round trips the bound goes.
    #[test]
    fn a_bound_nothing_confirms_goes_after_four_windows() {
        let sends = |slow_ms: u64| {
            let fast = (0..2_400u64).map(|n| at(n * 1000 / 12));
            let slow = (0..slow_ms * 5).map(|n| at(200_000 + n * 200));
            fast.chain(slow)
        };
        let (d, _) = drive(sends(0), 10, true);
        assert!(d.bound().is_some());
        // Ten round trips after the queue drained: kept.
        let (d, _) = drive(sends(150), 10, true);
        assert!(d.bound().is_some(), "round {}", d.round);
        // Forty: gone.
        let (d, _) = drive(sends(500), 10, true);
        assert_eq!(d.bound(), None, "round {}", d.round);
    }

    /// The path delivers nothing for 200 ms (a black hole: everything in flight is
    /// lost) and then one TPDU: its sample, spanning the stall, is far below the rate
    /// the path had, but no round passed meanwhile, so the bound stays (in time, the
    /// window of eight round trips had passed and the bound fell to 1/800 of the
    /// path's, pacing packet-pair at its floor for 150 ms after a hole).
    #[test]
    fn a_stall_does_not_take_the_bound_down() {
        let (mut d, _) = run(12, 10, 300);
        let before = d.bound().expect("a bound");
        let pause = Duration::from_millis(5);
        d.on_sent(at(300_100), 1000, Duration::from_secs(1), pause, 100);
        d.on_ack(
            at(500_000),
            Duration::from_millis(10),
            1000,
            Some(12e6),
            &CFG,
        );
        assert_eq!(d.bound(), Some(before));
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
