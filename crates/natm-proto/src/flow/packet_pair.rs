//! Feedback flow control for round-robin networks: packet-pair rate control (seed 000
//! §5.3.3; Keshav, SIGCOMM 1991; specs §8).
//!
//! seed 000 §5.3.3: "all TPDUs are sent out in back to back pairs, and the
//! inter-acknowledgment spacing is measured to estimate the current bottleneck
//! capacity ... This time series of estimates is used to make a prediction of future
//! capacity, and a simple predictive control scheme is used to determine the source
//! sending rate." Losses never cut the rate: flow control is kept apart from error
//! control (seed 000 §3, §5.3.3).
//!
//! Units: rates are payload bytes per second inside, payload bit/s at the API; the
//! bottleneck backlog n_b and the set-point B are payload bytes (B is configured in
//! TPDUs). The specs write the model in packets; bytes are the same model for TPDUs of
//! unequal size (the last TPDU of a message is short).

use std::collections::VecDeque;
use std::time::Duration;

use super::aggregation::AckAggregation;
use super::delivery::{BoundConfig, DeliveryRate};
use super::estimator::{FuzzyEstimator, MedianFilter};
use super::{AckSample, FlowController, Permit};
use crate::time::Instant;

/// Knobs of [`PacketPair`]. Where the papers' constants were not available the
/// defaults are the specs digest's choices (specs §8, §10.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacketPairConfig {
    /// Gain α of the control law; 0 < α < 2 is stable, 1 is dead-beat (specs §8.2).
    /// Default 0.5, to tolerate estimation noise \[REC\].
    pub alpha: f64,
    /// Set-point B: this VC's TPDUs to keep queued at the bottleneck (specs §8.2:
    /// "e.g. 2–5 packets"). Default 4.
    pub setpoint_tpdus: f64,
    /// Payload bytes per TPDU (turns B into bytes). Default 4096.
    pub tpdu_size: u32,
    /// λ_min, payload bit/s: the floor of the law and the re-probing rate (specs §8.4).
    /// Default: 10 TPDUs per second.
    pub min_rate_bps: u64,
    /// Cap on λ, payload bit/s (0: none). [`FlowController::set_rate`] changes it.
    pub max_rate_bps: u64,
    /// Shortest control epoch: R in the law is `max(R_base, min_epoch)`, so that a
    /// microsecond LAN RTT does not turn estimation noise into huge rate steps.
    /// Default 1 ms.
    pub min_epoch: Duration,
    /// Ack spacings shorter than this are discarded (specs §8.1: "Δ ≤ 0 / below the
    /// local clock resolution"). Default 1 ns: only Δ > 0.
    pub min_gap: Duration,
    /// Consecutive retransmission timeouts without an ACK before falling back to λ_min
    /// and re-probing (specs §8.4: "several RTOs"). Default 3.
    pub reprobe_after: u32,
    /// Smoothing β of the estimator's relative error (specs §8.3). Default 0.75.
    pub beta: f64,
    /// The estimator is fed the median of the last this many pair samples, not each
    /// sample ([`MedianFilter`]: compressed ACK pairs through a real switch; 1: every
    /// sample, as specs §8.3). Default 9.
    pub median_of: usize,
    /// A pair whose first ACK arrived less than this fraction of one TPDU's service
    /// time at μ̂ after the ACK before it came in a bunch and is not a sample (0:
    /// keep every pair, as specs §8.1). Default 0.25.
    pub bunch_fraction: f64,
    /// Bound μ̂ by the rate the path delivered ([`DeliveryRate`]; false: the pairs'
    /// estimate alone, as seed 000 §5.3.3). Default true.
    pub delivery_bound: bool,
}

impl PacketPairConfig {
    /// Defaults for TPDUs of `tpdu_size` payload bytes.
    pub fn for_tpdu(tpdu_size: u32) -> Self {
        let tpdu = tpdu_size.max(1);
        PacketPairConfig {
            alpha: 0.5,
            setpoint_tpdus: 4.0,
            tpdu_size: tpdu,
            min_rate_bps: 10 * 8 * u64::from(tpdu),
            max_rate_bps: 0,
            min_epoch: Duration::from_millis(1),
            min_gap: Duration::from_nanos(1),
            reprobe_after: 3,
            beta: 0.75,
            median_of: 9,
            bunch_fraction: 0.25,
            delivery_bound: true,
        }
    }
}

impl Default for PacketPairConfig {
    /// [`PacketPairConfig::for_tpdu`] of 4096-byte TPDUs (seed 000 §5.3.1).
    fn default() -> Self {
        PacketPairConfig::for_tpdu(4096)
    }
}

/// specs §8.2, prediction across the feedback delay: the backlog one epoch on, from
/// the backlog `nb` now, `sent` units sent and a service rate `mu` over `elapsed`
/// seconds: `max(0, nb + sent − μ·elapsed)` (with `sent = λ·R` this is the specs'
/// `n̂_b + (λ − μ̂)·R`).
pub fn predict_backlog(nb: f64, sent: f64, mu: f64, elapsed: f64) -> f64 {
    (nb + sent - mu * elapsed).max(0.0)
}

/// specs §8.2, control law: `λ = max(0, μ̂ + α·(B − n̂_b)/R)`.
pub fn control_law(mu: f64, nb_pred: f64, setpoint: f64, r: f64, alpha: f64) -> f64 {
    (mu + alpha * (setpoint - nb_pred) / r).max(0.0)
}

/// Packet-pair rate control of one VC.
#[derive(Debug, Clone)]
pub struct PacketPair {
    cfg: PacketPairConfig,
    /// The pair samples' running median, which feeds `est`.
    filter: MedianFilter,
    est: FuzzyEstimator,
    /// No clean pair sample yet (start-up, or after a silent path): send a pair and
    /// wait for its ACKs (specs §8.4).
    probing: bool,
    /// λ, payload bytes/s; `None` while probing at start-up (no pacing).
    rate: Option<f64>,
    /// R_base: the smallest RTT seen.
    base_rtt: Option<Duration>,
    /// The smallest RTT of a pair's first TPDU less its own service time at μ̂: the
    /// path's delay without the bottleneck's service, which changes with μ.
    path_delay: Option<Duration>,
    /// The pacer: the bytes sent since `pace_from` are paid for at λ, so the next
    /// transmission is due at `pace_from + pace_bytes/λ` with the λ of the moment.
    pace_from: Instant,
    pace_bytes: f64,
    /// Payload bytes ever sent, and when (time, bytes sent before), to know what left
    /// after a measured TPDU.
    total_sent: u64,
    sent_log: VecDeque<(Instant, u64)>,
    /// How far back `sent_log` reaches.
    horizon: Duration,
    /// The ACK of a pair's first TPDU.
    first_ack: Option<FirstAck>,
    /// When the last ACK of any TPDU arrived, and the receiver's stamp in it.
    last_ack: Option<(Instant, Option<u32>)>,
    /// n̂_b, bytes, as of `backlog_at` when `total_sent` was `backlog_sent`.
    backlog: f64,
    backlog_at: Instant,
    backlog_sent: u64,
    /// α·(B − n̂_b)/R from the last epoch, bytes/s: λ = μ̂ + this.
    correction: f64,
    epoch_start: Instant,
    timeouts: u32,
    /// TPDUs per train: 2 (a pair), doubled while trains come back unspread.
    train: u32,
    /// Trains in a row that came back unspread.
    compressed: u32,
    /// What the path delivered, which bounds μ̂ ([`DeliveryRate`]).
    delivery: DeliveryRate,
    /// The bound on μ̂ from the delivery rate as of the last ACK, bytes/s.
    cap: Option<f64>,
    /// Whether the start-up's in-flight gate still holds ([`Start`]).
    start: Start,
    /// The size of the TPDUs being sent, payload bytes: the largest lately (a
    /// message's short last TPDU aside), forgotten an eighth at each transmission so
    /// that it follows a path that cut them smaller. The PSB counts what is in flight
    /// in TPDUs, and they are the path's size, not the configured one.
    sent_tpdu: f64,
    /// How far ACKs ran ahead of μ̂ lately: the in-flight bound's allowance for ACKs
    /// that come late and together ([`AckAggregation`]).
    aggregation: AckAggregation,
    /// TPDUs in flight at the last [`FlowController::poll_send`]: what the next
    /// transmission leaves behind it (the PSB polls before each transmission but a
    /// train's later members, which leave at once after the first).
    polled_in_flight: u32,
}

/// The start of a VC, until the delivery rate first bounds μ̂.
///
/// Departure from seed 000 §5.3.3, whose start paces at the first pair's estimate at
/// once. Through a token-bucket shaper with tokens to spare (Linux's `tbf`, a
/// provider's policer) the first pairs pass back to back and read as the link behind
/// it (measured: 20–45 Gbit/s on a 100 Mbit/s `tbf`), and until the delivery rate has
/// bounded μ̂ (two epochs of samples) nothing else holds the sender but its window:
/// 0.5–1.7 MB left in those milliseconds, into a shaper's queue of 650 KB. While the
/// gate holds, no more than it may be in flight; it opens by what each ACK delivered
/// (doubling a round trip, TCP's slow start, RFC 5681 §3.1) and goes when the bound
/// appears. On a path whose pairs are honest it stops binding within a few round trips
/// (λ paces below it).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Start {
    /// At most this many TPDUs in flight.
    Gated(f64),
    /// The delivery rate has bounded μ̂ once: λ alone paces.
    Over,
}

/// The start-up gate's first opening, TPDUs: TCP's initial window (RFC 6928).
const START_GATE: f64 = 10.0;

/// μ̂ may exceed the largest delivery rate the path set lately by this factor: room to
/// find a faster bottleneck (a quarter more per round trip, as BBR's probing gain).
const DELIVERY_GAIN: f64 = 1.25;

/// The delivery rates kept span this many round trips ...
const DELIVERY_WINDOW_ROUNDS: u64 = 8;
/// ... and bound μ̂ once they have run for this many epochs.
const DELIVERY_WARMUP_EPOCHS: u32 = 2;

/// What may be in flight once the start is over: this many times the path's
/// bandwidth-delay product at μ̂ and R_base ([`PacketPair::in_flight_cap`]), as BBR's
/// congestion window (its `cwnd_gain`, Cardwell et al., ACM Queue 2016).
const IN_FLIGHT_GAIN: f64 = 2.0;

/// The aggregation allowance is at most what μ̂ sends in this long (Linux BBR's
/// `bbr_extra_acked_max_us`).
const MAX_AGGREGATION: Duration = Duration::from_millis(100);

/// The longest train ([`PacketPair::train_len`]): 32 TPDUs of 1,436 octets outlast a
/// token bucket's burst of 45 KB.
pub const MAX_TRAIN: u32 = 32;

/// The ACK of a pair's first TPDU, kept until the second's.
#[derive(Debug, Clone, Copy)]
struct FirstAck {
    seq: u64,
    /// The train's members acknowledged so far, in order, end at this one.
    upto: u64,
    /// When the ACK reached the sender.
    at: Instant,
    /// When the TPDU reached the receiver (its stamp), if the ACK said.
    arrived: Option<u32>,
    rtt: Duration,
    bytes: u32,
    /// How long after the ACK before it this one came (by the receiver's stamps when
    /// both have one), if there was one.
    lead: Option<Duration>,
}

/// The time from stamp `a` to stamp `b` (receiver nanoseconds modulo 2³²), or `None`
/// if `b` is not after `a` within half the range.
fn stamp_gap(a: u32, b: u32) -> Option<Duration> {
    let d = b.wrapping_sub(a);
    (d < 1 << 31).then(|| Duration::from_nanos(u64::from(d)))
}

/// Longest send history kept (entries), whatever the horizon.
const MAX_LOG: usize = 1 << 16;

impl PacketPair {
    /// A controller that starts by probing.
    pub fn new(cfg: PacketPairConfig) -> Self {
        PacketPair {
            est: FuzzyEstimator::new(cfg.beta),
            filter: MedianFilter::new(cfg.median_of),
            cfg,
            probing: true,
            rate: None,
            base_rtt: None,
            path_delay: None,
            pace_from: Instant::ZERO,
            pace_bytes: 0.0,
            total_sent: 0,
            sent_log: VecDeque::new(),
            horizon: Duration::from_secs(1),
            first_ack: None,
            last_ack: None,
            backlog: 0.0,
            backlog_at: Instant::ZERO,
            backlog_sent: 0,
            correction: 0.0,
            epoch_start: Instant::ZERO,
            timeouts: 0,
            train: 2,
            compressed: 0,
            delivery: DeliveryRate::new(),
            cap: None,
            start: Start::Gated(START_GATE),
            polled_in_flight: 0,
            aggregation: AckAggregation::new(),
            sent_tpdu: f64::from(cfg.tpdu_size),
        }
    }

    /// μ̂ as the law uses it: the estimate from pairs, bounded by what the path
    /// delivered (departure from seed 000 §5.3.3, see [`DeliveryRate`]).
    fn mu(&self) -> Option<f64> {
        let mu = self.est.estimate()?;
        match self.cap {
            Some(c) if self.cfg.delivery_bound => Some(mu.min(c)),
            _ => Some(mu),
        }
    }

    /// Whether it is waiting for a first clean pair sample.
    pub fn is_probing(&self) -> bool {
        self.probing
    }

    /// μ̂, the estimated bottleneck rate for this VC, payload bit/s (bounded by the
    /// delivery rate).
    pub fn bottleneck_bps(&self) -> Option<f64> {
        self.mu().map(|mu| mu * 8.0)
    }

    /// The bound the delivery rate puts on μ̂ now, payload bit/s, if any.
    pub fn delivery_bound_bps(&self) -> Option<f64> {
        self.cap.map(|c| c * 8.0)
    }

    /// n̂_b at the last estimate: the backlog a TPDU sent then would find at the
    /// bottleneck, in TPDUs.
    pub fn backlog_tpdus(&self) -> f64 {
        self.backlog / f64::from(self.cfg.tpdu_size)
    }

    /// R_base, the smallest RTT seen.
    pub fn base_rtt(&self) -> Option<Duration> {
        self.base_rtt
    }

    fn min_rate(&self) -> f64 {
        self.cfg.min_rate_bps as f64 / 8.0
    }

    fn clamp(&self, lambda: f64) -> f64 {
        let mut l = lambda.max(self.min_rate());
        if self.cfg.max_rate_bps > 0 {
            l = l.min(self.cfg.max_rate_bps as f64 / 8.0);
        }
        l.max(1.0)
    }

    fn epoch(&self) -> Duration {
        self.base_rtt
            .unwrap_or(self.cfg.min_epoch)
            .max(self.cfg.min_epoch)
    }

    /// The most TPDUs in flight once the start is over: [`IN_FLIGHT_GAIN`] times
    /// μ̂·R_base, plus the set-point B, one train, and the allowance for ACKs that
    /// came late and together lately ([`AckAggregation`], BBR's `extra_acked`).
    ///
    /// Departure from seed 000 §5.3.3, where λ alone holds the sender. A μ̂ too high
    /// for a while (the delivery rate bounds it by the largest sample of eight round
    /// trips, and a shaper's burst of tokens passes at the speed of the link behind
    /// it: measured 1.3–1.9 Gbit/s through a 100 Mbit/s `tbf`) lets λ burst whenever
    /// the prediction drains n̂_b at that μ̂, and the queue stayed full, dropping, for
    /// those eight round trips. What a VC needs in flight at λ = μ with B queued is
    /// μ·R_base + B, so the bound costs nothing while μ̂ is right and keeps the queue
    /// within a few bandwidth-delay products while it is not, as BBR's window does
    /// for its own windowed-maximum estimate. R_base is the smallest RTT seen, not
    /// the epoch's floor: on a LAN the floor is many times the path.
    pub fn in_flight_cap(&self) -> Option<f64> {
        let (mu, base) = (self.mu()?, self.base_rtt?);
        let bdp = mu * base.as_secs_f64() / self.sent_tpdu;
        let batch = self
            .aggregation
            .extra()
            .min(mu * MAX_AGGREGATION.as_secs_f64());
        Some(
            IN_FLIGHT_GAIN * bdp
                + self.cfg.setpoint_tpdus
                + f64::from(self.train)
                + batch / self.sent_tpdu,
        )
    }

    /// When the pacer lets the next transmission go, at the current λ.
    fn due(&self) -> Option<Instant> {
        let rate = self.rate?;
        let secs = (self.pace_bytes / rate).min(3600.0);
        Some(self.pace_from + Duration::from_secs_f64(secs))
    }

    /// Payload bytes sent at or after `t` (two microseconds early: RTTs come from
    /// microsecond timestamps, and a pair's two TPDUs leave at the same instant).
    fn sent_since(&self, t: Instant) -> u64 {
        let t = t - Duration::from_micros(2);
        let i = self.sent_log.partition_point(|&(at, _)| at < t);
        self.sent_log
            .get(i)
            .map_or(0, |&(_, before)| self.total_sent - before)
    }

    /// The path delay is never above R_base, which holds it and one service time: a
    /// first pair that found a queue (the start-up's burst into a shaper's queue)
    /// would otherwise hide that much backlog from n̂_b for as long as the delivery
    /// rate bounds μ̂ (measured through a 100 Mbit/s `tbf`: 5.6 ms kept against an
    /// R_base of 20 µs, and the shaper's queue held full).
    fn path_delay_within_base(&mut self) {
        if let (Some(path), Some(base)) = (&mut self.path_delay, self.base_rtt) {
            *path = (*path).min(base);
        }
    }

    /// specs §8.2 prediction: carry n̂_b forward to `now` with what was sent since and
    /// what the bottleneck served meanwhile.
    fn advance_backlog(&mut self, now: Instant, mu: f64) -> f64 {
        let sent = (self.total_sent - self.backlog_sent) as f64;
        let elapsed = now.saturating_duration_since(self.backlog_at).as_secs_f64();
        self.backlog = predict_backlog(self.backlog, sent, mu, elapsed);
        self.backlog_at = now;
        self.backlog_sent = self.total_sent;
        self.backlog
    }

    /// specs §8.2 [REC]: a TPDU whose ACK came at `acked` after `rtt` found
    /// μ̂·(RTT − path delay) bytes ahead of it; it left one RTT ago, and carrying that
    /// forward with what was sent since (not the specs' one epoch of λ: at the
    /// set-point the RTT is longer than R) gives the backlog a TPDU sent at `now`
    /// will find.
    fn backlog_from_rtt(
        &mut self,
        now: Instant,
        acked: Instant,
        rtt: Duration,
        bytes: u32,
        path: Duration,
        mu: f64,
    ) {
        let ahead = (mu * rtt.saturating_sub(path).as_secs_f64() - f64::from(bytes)).max(0.0);
        let sent_at = acked - rtt;
        self.backlog = predict_backlog(
            ahead,
            self.sent_since(sent_at) as f64,
            mu,
            now.saturating_duration_since(sent_at).as_secs_f64(),
        );
        self.backlog_at = now;
        self.backlog_sent = self.total_sent;
    }

    /// Once per epoch (specs §8.4: "once per R"): apply the control law to the
    /// predicted backlog.
    fn control(&mut self, now: Instant) {
        if self.probing || now < self.epoch_start + self.epoch() {
            return;
        }
        let Some(mu) = self.mu() else {
            return;
        };
        let nb = self.advance_backlog(now, mu);
        let setpoint = self.cfg.setpoint_tpdus * f64::from(self.cfg.tpdu_size);
        let r = self.epoch().as_secs_f64();
        let lambda = control_law(mu, nb, setpoint, r, self.cfg.alpha);
        self.correction = lambda - mu;
        self.rate = Some(self.clamp(lambda));
        self.epoch_start = now;
    }

    /// A clean pair: both ACKs, consecutive, neither a retransmission; `lead` is how
    /// long after the ACK before it the pair's first ACK arrived.
    fn pair_sample(&mut self, s: &AckSample, first: FirstAck) {
        let FirstAck {
            at: t1,
            rtt: rtt1,
            bytes: bytes1,
            lead,
            ..
        } = first;
        // The spacing the path gave the pair, from the receiver's arrival stamps when
        // both ACKs carry one: the ACKs themselves may come back bunched (read in one
        // receive batch, or queued behind the receiver's own batch). Departure from
        // seed 000 §5.3.3, which times the ACKs at the sender; the two are the same
        // only when nothing after the bottleneck bunches them.
        let gap = match (first.arrived, s.arrived) {
            (Some(a1), Some(a2)) => match stamp_gap(a1, a2) {
                Some(g) => g,
                None => return,
            },
            _ => s.now.saturating_duration_since(t1),
        };
        if gap.is_zero() || gap < self.cfg.min_gap {
            // Arrived together: nothing after the sender spaced the train, as a
            // token-bucket shaper with a burst of tokens does (tbf lets a whole burst
            // through at line rate while it has tokens; a round-robin ATM switch,
            // seed 000's network, spaces every VC's cells). Departure from seed 000
            // §5.3.3: after two such trains the next is twice as long, so that it
            // outlasts the shaper's burst and its dispersion is the rate (packet
            // trains, Jain and Routhier 1986).
            self.compressed += 1;
            if self.compressed >= 2 {
                self.compressed = 0;
                self.train = (self.train * 2).min(MAX_TRAIN);
            }
            return;
        }
        self.compressed = 0;
        // specs §8.1 takes "immediate, unbunched acks" for granted; through real
        // processes they are not. At a round-robin bottleneck this VC's TPDUs leave at
        // least one service interval 1/μ apart while it is backlogged, and further
        // apart while it is not, so ACKs arriving much closer together than 1/μ̂
        // were bunched after the bottleneck: a process that was not running (the
        // sender, the receiver, or the switch catching up line slots) handled them
        // in one go. A pair whose first ACK came in such a bunch says nothing about
        // the bottleneck; the median filter takes care of lone compressed pairs.
        if let (Some(mu), Some(lead)) = (self.est.estimate(), lead) {
            if lead.as_secs_f64() * mu < f64::from(bytes1) * self.cfg.bunch_fraction {
                return;
            }
        }
        // specs §8.1: "bytes: size_of_2nd_packet / (t_ack2 − t_ack1)"; a longer
        // train's dispersion carries every member after the first (of the last's
        // size: a train's members are full TPDUs but for a message's end).
        let members = s.seq.saturating_sub(first.seq).max(1) as f64;
        let sample = members * f64::from(s.bytes) / gap.as_secs_f64();
        let Some(median) = self.filter.push(sample) else {
            return;
        };
        self.est.update(median);
        let Some(mu) = self.mu() else {
            return;
        };
        if !self.probing {
            // Departure from "once per R": λ follows μ̂ at every sample, and only the
            // set-point correction α(B − n̂_b)/R waits for the epoch. When the
            // bottleneck rate drops, this stops the backlog growing for up to one
            // more epoch at the old rate (it halves the overshoot in the tests).
            self.rate = Some(self.clamp(mu + self.correction));
        }
        // specs §8.2 [REC]: the pair's first TPDU found μ̂·(RTT − R_base) bytes ahead
        // of it. R_base holds one TPDU's service time at the rate of the moment it
        // was measured, so the path delay is kept apart from the service time at
        // today's μ̂ (otherwise a slower bottleneck reads as a longer queue).
        let service = f64::from(bytes1) / mu;
        let own = Duration::from_secs_f64(service.min(3600.0));
        let delay = rtt1.saturating_sub(own);
        let path = *self.path_delay.get_or_insert(delay);
        if self.est.error() < 0.05 && self.est.estimate() == Some(mu) {
            // Only while μ̂ is settled and the delivery rate does not bound it: a μ̂
            // below the bottleneck's would shrink this minimum for good.
            self.path_delay = Some(path.min(delay));
        }
        self.path_delay_within_base();
        let path = self.path_delay.unwrap_or(path);
        self.backlog_from_rtt(s.now, t1, rtt1, bytes1, path, mu);
        if self.probing {
            // specs §8.4 start-up: "μ̂ = first sample; R_base = first RTT; λ = μ̂".
            self.probing = false;
            self.rate = Some(self.clamp(mu));
            self.correction = 0.0;
            self.epoch_start = s.now;
            self.pace_from = s.now;
            self.pace_bytes = 0.0;
        }
    }
}

impl FlowController for PacketPair {
    /// Paced by λ; the answer is never later than the end of the epoch, so that the
    /// law is applied again even when no ACK comes to wake the sender.
    fn poll_send(&mut self, now: Instant, in_flight: u32, _bytes: usize) -> Permit {
        self.polled_in_flight = in_flight;
        self.control(now);
        if let Some(due) = self.due().filter(|&d| now < d) {
            let at = if self.probing {
                due
            } else {
                due.min(self.epoch_start + self.epoch())
            };
            return Permit::At(at.max(now + Duration::from_nanos(1)));
        }
        if self.probing && in_flight > 0 {
            // The probe pair is out: wait for its ACKs (retransmissions still go).
            return Permit::Blocked;
        }
        let limit = match self.start {
            Start::Gated(gate) => Some(gate),
            Start::Over => self.in_flight_cap(),
        };
        if limit.is_some_and(|l| f64::from(in_flight) >= l) {
            return Permit::Blocked;
        }
        Permit::Now
    }

    /// Paces every transmission, retransmissions included (they use the bottleneck
    /// too): after a pair of b₁ + b₂ bytes the next may go (b₁ + b₂)/λ later, the
    /// specs' "wait 2/λ" for equal TPDUs. No credit accrues while idle.
    fn on_sent(&mut self, now: Instant, bytes: usize, _retransmission: bool) {
        let floor = now - self.horizon;
        while self.sent_log.len() >= MAX_LOG || self.sent_log.front().is_some_and(|e| e.0 < floor) {
            self.sent_log.pop_front();
        }
        self.sent_log.push_back((now, self.total_sent));
        self.total_sent += bytes as u64;
        self.sent_tpdu = (bytes as f64).max(self.sent_tpdu * 7.0 / 8.0).max(1.0);
        self.delivery.on_sent(
            now,
            bytes,
            self.horizon,
            self.epoch() / 2,
            self.polled_in_flight,
        );
        self.cap = self.delivery.bound();
        if self.due().is_some_and(|d| now >= d) {
            self.pace_from = now;
            self.pace_bytes = 0.0;
        }
        self.pace_bytes += bytes as f64;
    }

    fn on_ack(&mut self, s: &AckSample) {
        self.timeouts = 0;
        // specs §8.4: "R_base = min(R_base, rtt)".
        if !s.rtt.is_zero() {
            self.base_rtt = Some(self.base_rtt.map_or(s.rtt, |b| b.min(s.rtt)));
            self.horizon = self.horizon.max(s.rtt.saturating_mul(4));
            self.path_delay_within_base();
        }
        let first = self.first_ack;
        let lead = self
            .last_ack
            .and_then(|(t, stamp)| match (stamp, s.arrived) {
                (Some(a), Some(b)) => stamp_gap(a, b),
                _ => Some(s.now.saturating_duration_since(t)),
            });
        self.last_ack = Some((s.now, s.arrived));
        let epoch = self.epoch();
        let bound = BoundConfig {
            gain: DELIVERY_GAIN,
            window_rounds: DELIVERY_WINDOW_ROUNDS,
            warmup: epoch * DELIVERY_WARMUP_EPOCHS,
        };
        self.cap = self
            .delivery
            .on_ack(s.now, s.rtt, s.newly_acked_bytes, self.rate, &bound);
        if let (Some(mu), Some(cap)) = (self.mu(), self.in_flight_cap()) {
            let round = self.delivery.round();
            let limit = cap * self.sent_tpdu;
            self.aggregation
                .on_ack(s.now, s.newly_acked_bytes, mu, round, limit);
        }
        self.start = match self.start {
            Start::Gated(_) if self.cap.is_some() => Start::Over,
            Start::Gated(gate) => Start::Gated(gate + s.newly_acked_bytes as f64 / self.sent_tpdu),
            Start::Over => Start::Over,
        };
        // While the delivery rate bounds μ̂ the pairs are not to be trusted, and a
        // sender its window holds sends none: every ACK's RTT gives the backlog.
        if let (Some(mu), Some(path), false) = (self.mu(), self.path_delay, s.retransmission) {
            if self.est.estimate() != Some(mu) && !s.rtt.is_zero() && !s.pair_second {
                self.backlog_from_rtt(s.now, s.now, s.rtt, s.bytes, path, mu);
            }
        }
        // specs §8.1: discard samples from retransmissions, broken trains and ACKs
        // that were not consecutive. A train's middle members are acknowledged
        // between its first and its last.
        // Each member's ACK must follow the one before (seq + 1): a lost or
        // reordered member breaks the train.
        let next = |f: &FirstAck| s.seq == f.upto + 1 && s.seq - f.seq < u64::from(MAX_TRAIN);
        if s.retransmission {
            self.first_ack = None;
        } else if s.pair_first {
            self.first_ack = Some(FirstAck {
                seq: s.seq,
                upto: s.seq,
                at: s.now,
                arrived: s.arrived,
                rtt: s.rtt,
                bytes: s.bytes,
                lead,
            });
        } else if s.pair_second {
            self.first_ack = None;
            if let Some(f) = first.filter(next) {
                self.pair_sample(s, f);
            }
        } else {
            self.first_ack = first.filter(next).map(|f| FirstAck { upto: s.seq, ..f });
        }
        self.control(s.now);
    }

    /// seed 000 §5.3.3: losses do not cut the rate (error control is SMART's job).
    fn on_loss(&mut self, _now: Instant, _in_flight: u32, _next_seq: u64) {}

    /// specs §8.4: keep λ; after several timeouts with no ACK at all, fall back to
    /// λ_min and re-probe (the bottleneck may be a different one now).
    fn on_timeout(&mut self, now: Instant, _in_flight: u32) {
        self.timeouts += 1;
        if self.timeouts >= self.cfg.reprobe_after.max(1) {
            self.probing = true;
            self.est.reset();
            self.filter.clear();
            self.first_ack = None;
            self.backlog = 0.0;
            self.correction = 0.0;
            self.delivery.reset();
            self.aggregation.reset();
            self.cap = None;
            self.start = Start::Gated(START_GATE);
            self.rate = Some(self.clamp(self.min_rate()));
            self.pace_from = now;
            self.pace_bytes = 0.0;
        }
    }

    fn wants_pair(&self) -> bool {
        true
    }

    fn train_len(&self) -> u32 {
        self.train
    }

    fn rate_bps(&self) -> Option<f64> {
        self.rate.map(|r| r * 8.0)
    }

    /// The cap on λ (0: none): the application's rate within its agreed bounds.
    fn set_rate(&mut self, bps: u64) {
        self.cfg.max_rate_bps = bps;
        if let Some(r) = self.rate {
            self.rate = Some(self.clamp(r));
        }
    }

    fn name(&self) -> &'static str {
        "packet-pair"
    }
}

#[cfg(test)]
mod tests;
