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

use std::time::Duration;

use super::estimator::FuzzyEstimator;
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
    est: FuzzyEstimator,
    /// No clean pair sample yet (start-up, or after a silent path): send a pair and
    /// wait for its ACKs (specs §8.4).
    probing: bool,
    /// λ, payload bytes/s; `None` while probing at start-up (no pacing).
    rate: Option<f64>,
    /// R_base: the smallest RTT seen.
    base_rtt: Option<Duration>,
    /// Earliest time of the next transmission (the pacer).
    next_send: Instant,
    /// The ACK of a pair's first TPDU: (sequence number, arrival, RTT).
    first_ack: Option<(u64, Instant, Duration)>,
    /// n_b measured since the last epoch, bytes.
    measured: Option<f64>,
    /// n̂_b predicted at the last epoch, bytes.
    predicted: f64,
    /// α·(B − n̂_b)/R from the last epoch, bytes/s: λ = μ̂ + this.
    correction: f64,
    epoch_start: Instant,
    epoch_sent: u64,
    timeouts: u32,
}

impl PacketPair {
    /// A controller that starts by probing.
    pub fn new(cfg: PacketPairConfig) -> Self {
        PacketPair {
            est: FuzzyEstimator::new(cfg.beta),
            cfg,
            probing: true,
            rate: None,
            base_rtt: None,
            next_send: Instant::ZERO,
            first_ack: None,
            measured: None,
            predicted: 0.0,
            correction: 0.0,
            epoch_start: Instant::ZERO,
            epoch_sent: 0,
            timeouts: 0,
        }
    }

    /// Whether it is waiting for a first clean pair sample.
    pub fn is_probing(&self) -> bool {
        self.probing
    }

    /// μ̂, the estimated bottleneck rate for this VC, payload bit/s.
    pub fn bottleneck_bps(&self) -> Option<f64> {
        self.est.estimate().map(|mu| mu * 8.0)
    }

    /// n̂_b, the predicted backlog at the bottleneck, in TPDUs.
    pub fn backlog_tpdus(&self) -> f64 {
        self.predicted / f64::from(self.cfg.tpdu_size)
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
        l
    }

    fn epoch(&self) -> Duration {
        self.base_rtt
            .unwrap_or(self.cfg.min_epoch)
            .max(self.cfg.min_epoch)
    }

    /// Once per epoch (specs §8.4: "once per R"): predict the backlog and apply the
    /// control law.
    fn control(&mut self, now: Instant) {
        if self.probing || now < self.epoch_start + self.epoch() {
            return;
        }
        let Some(mu) = self.est.estimate() else {
            return;
        };
        let elapsed = (now - self.epoch_start).as_secs_f64();
        // A fresh measurement replaces the chained prediction (the source learns n_b
        // one RTT late and predicts across that delay, specs §8.2).
        let nb = self.measured.take().unwrap_or(self.predicted);
        self.predicted = predict_backlog(nb, self.epoch_sent as f64, mu, elapsed);
        let setpoint = self.cfg.setpoint_tpdus * f64::from(self.cfg.tpdu_size);
        let r = self.epoch().as_secs_f64();
        let lambda = control_law(mu, self.predicted, setpoint, r, self.cfg.alpha);
        self.correction = lambda - mu;
        self.rate = Some(self.clamp(lambda));
        self.epoch_start = now;
        self.epoch_sent = 0;
    }

    /// A clean pair: both ACKs, consecutive, neither a retransmission.
    fn pair_sample(&mut self, s: &AckSample, t1: Instant, rtt1: Duration) {
        let gap = s.now.saturating_duration_since(t1);
        if gap.is_zero() || gap < self.cfg.min_gap {
            return;
        }
        // specs §8.1: "bytes: size_of_2nd_packet / (t_ack2 − t_ack1)".
        let sample = f64::from(s.bytes) / gap.as_secs_f64();
        let mu = self.est.update(sample);
        if !self.probing {
            // Departure from "once per R": λ follows μ̂ at every sample, and only the
            // set-point correction α(B − n̂_b)/R waits for the epoch. When the
            // bottleneck rate drops, this stops the backlog growing for up to one
            // more epoch at the old rate (it halves the overshoot in the tests).
            self.rate = Some(self.clamp(mu + self.correction));
        }
        // specs §8.2 [REC]: n̂_b = μ̂·(RTT − R_base), the queueing delay the pair's
        // first TPDU saw times the service rate.
        let base = self.base_rtt.unwrap_or(rtt1);
        self.measured = Some(mu * rtt1.saturating_sub(base).as_secs_f64());
        if self.probing {
            // specs §8.4 start-up: "μ̂ = first sample; R_base = first RTT; λ = μ̂".
            self.probing = false;
            self.rate = Some(self.clamp(mu));
            self.predicted = self.measured.unwrap_or(0.0);
            self.correction = 0.0;
            self.epoch_start = s.now;
            self.epoch_sent = 0;
            self.next_send = self.next_send.max(s.now);
        }
    }
}

impl FlowController for PacketPair {
    fn poll_send(&mut self, now: Instant, in_flight: u32, _bytes: usize) -> Permit {
        self.control(now);
        if self.rate.is_some() && now < self.next_send {
            return Permit::At(self.next_send);
        }
        if self.probing && in_flight > 0 {
            // The probe pair is out: wait for its ACKs (retransmissions still go).
            return Permit::Blocked;
        }
        Permit::Now
    }

    /// Paces every transmission, retransmissions included (they use the bottleneck
    /// too): after a pair of b₁ + b₂ bytes the next may go (b₁ + b₂)/λ later, the
    /// specs' "wait 2/λ" for equal TPDUs. No credit accrues while idle.
    fn on_sent(&mut self, now: Instant, bytes: usize, _retransmission: bool) {
        self.epoch_sent += bytes as u64;
        if let Some(rate) = self.rate {
            let secs = bytes as f64 / rate;
            let base = self.next_send.max(now);
            self.next_send = base + Duration::from_secs_f64(secs.min(3600.0));
        }
    }

    fn on_ack(&mut self, s: &AckSample) {
        self.timeouts = 0;
        // specs §8.4: "R_base = min(R_base, rtt)".
        if !s.rtt.is_zero() {
            self.base_rtt = Some(self.base_rtt.map_or(s.rtt, |b| b.min(s.rtt)));
        }
        let first = self.first_ack.take();
        // specs §8.1: discard samples from retransmissions, broken pairs and ACKs
        // that were not consecutive.
        if !s.retransmission {
            if s.pair_first {
                self.first_ack = Some((s.seq, s.now, s.rtt));
            } else if s.pair_second {
                if let Some((seq1, t1, rtt1)) = first {
                    if seq1 + 1 == s.seq {
                        self.pair_sample(s, t1, rtt1);
                    }
                }
            }
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
            self.first_ack = None;
            self.measured = None;
            self.predicted = 0.0;
            self.correction = 0.0;
            self.rate = Some(self.min_rate());
            self.next_send = self.next_send.min(now);
        }
    }

    fn wants_pair(&self) -> bool {
        true
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
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// specs §8.3 control-law check in the fluid model: μ = 1000 pkt/s, R = 20 ms,
    /// B = 5, λ(0) = 500, n_b(0) = 0; the source knows n_b(k) and λ(k) one epoch late.
    fn fluid(alpha: f64, epochs: usize) -> Vec<(f64, f64)> {
        let (mu, r, b) = (1000.0, 0.02, 5.0);
        let (mut lambda, mut nb) = (500.0, 0.0);
        let mut rows = vec![(lambda, nb)];
        for _ in 0..epochs {
            // With exact estimates the prediction is the plant: n_b(k+1).
            nb = predict_backlog(nb, lambda * r, mu, r);
            lambda = control_law(mu, nb, b, r, alpha);
            rows.push((lambda, nb));
        }
        rows
    }

    #[test]
    fn fluid_model_alpha_one_is_dead_beat() {
        let rows = fluid(1.0, 8);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(rows[1].0, 1250.0) && close(rows[2].0, 1000.0));
        assert!(close(rows[1].1, 0.0) && close(rows[2].1, 5.0), "{rows:?}");
        assert!(rows[2..]
            .iter()
            .all(|&(l, n)| close(l, 1000.0) && close(n, 5.0)));
    }

    #[test]
    fn fluid_model_alpha_half_converges() {
        let rows = fluid(0.5, 30);
        let nb: Vec<f64> = rows.iter().map(|r| r.1).collect();
        for (got, want) in nb.iter().zip([0.0, 0.0, 2.5, 3.75, 4.375, 4.6875]) {
            assert!((got - want).abs() < 1e-9, "{nb:?}");
        }
        assert!((rows[1].0 - 1125.0).abs() < 1e-9);
        assert!((nb[30] - 5.0).abs() < 5e-3);
        // Monotone approach, no overshoot.
        assert!(nb.windows(2).all(|w| w[1] >= w[0] && w[1] <= 5.0));
    }

    /// One FIFO bottleneck (a single conversation at a round-robin server), `delay`
    /// each way, every TPDU acked at once; the sender is backlogged with 1000-byte
    /// TPDUs and holds at most 256 in flight, like the PSB's window.
    struct Bottleneck {
        pp: PacketPair,
        now: Instant,
        mu: f64,
        delay: Duration,
        free_at: Instant,
        /// (ACK arrival, sequence, sent at, bottleneck arrival, departure, first, second)
        acks: VecDeque<(Instant, u64, Instant, Instant, Instant, bool, bool)>,
        seq: u64,
        min_rtt: Duration,
        queue_log: Vec<(Instant, usize)>,
    }

    impl Bottleneck {
        fn new(cfg: PacketPairConfig, mu: f64) -> Self {
            Bottleneck {
                pp: PacketPair::new(cfg),
                now: Instant::from_nanos(1_000_000),
                mu,
                delay: Duration::from_millis(5),
                free_at: Instant::ZERO,
                acks: VecDeque::new(),
                seq: 0,
                min_rtt: Duration::MAX,
                queue_log: Vec::new(),
            }
        }

        fn send(&mut self, first: bool, second: bool) {
            let arrive = self.now + self.delay;
            let depart = arrive.max(self.free_at) + Duration::from_secs_f64(1000.0 / self.mu);
            self.free_at = depart;
            let ack = depart + self.delay;
            self.acks
                .push_back((ack, self.seq, self.now, arrive, depart, first, second));
            self.seq += 1;
            self.pp.on_sent(self.now, 1000, false);
        }

        fn run_until(&mut self, end: Instant) {
            while self.now < end {
                let mut wake = None;
                loop {
                    let in_flight = self.acks.len() as u32;
                    if in_flight >= 256 {
                        break;
                    }
                    match self.pp.poll_send(self.now, in_flight, 1000) {
                        Permit::Now => {
                            if self.pp.wants_pair() && in_flight + 1 < 256 {
                                self.send(true, false);
                                self.send(false, true);
                            } else {
                                self.send(false, false);
                            }
                        }
                        Permit::At(t) => {
                            wake = Some(t);
                            break;
                        }
                        Permit::Blocked => break,
                    }
                }
                let next_ack = self.acks.front().map(|a| a.0);
                let next = [wake, next_ack]
                    .into_iter()
                    .flatten()
                    .min()
                    .expect("progress");
                self.now = next;
                while self.acks.front().is_some_and(|a| a.0 <= self.now) {
                    let (t, seq, sent, _, _, first, second) = self.acks.pop_front().unwrap();
                    let rtt = t - sent;
                    self.min_rtt = self.min_rtt.min(rtt);
                    let queued = self.acks.iter().filter(|a| a.3 <= t && a.4 > t).count();
                    self.queue_log.push((t, queued));
                    self.pp.on_ack(&AckSample {
                        now: t,
                        rtt,
                        min_rtt: self.min_rtt,
                        newly_acked: 1,
                        newly_acked_bytes: 1000,
                        seq,
                        cum_ack: seq + 1,
                        pair_first: first,
                        pair_second: second,
                        retransmission: false,
                        in_flight: self.acks.len() as u32,
                        bytes: 1000,
                    });
                }
            }
        }

        fn mean_queue(&self, from: Instant) -> f64 {
            let q: Vec<usize> = self
                .queue_log
                .iter()
                .filter(|x| x.0 >= from)
                .map(|x| x.1)
                .collect();
            q.iter().sum::<usize>() as f64 / q.len() as f64
        }
    }

    /// Closed loop against a bottleneck of 10 MB/s that halves at t = 2 s: λ tracks μ,
    /// the bottleneck never idles, and the backlog settles near the set-point.
    #[test]
    fn closed_loop_tracks_the_bottleneck_and_holds_the_set_point() {
        let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 10e6);
        let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
        b.run_until(t(15));
        assert!(!b.pp.is_probing(), "the probe pair's ACKs are back");
        let first = b.pp.rate_bps().unwrap();
        assert!((first - 80e6).abs() < 1e3, "λ = μ̂ after the probe: {first}");
        b.run_until(t(2000));
        let lambda = b.pp.rate_bps().unwrap() / 8.0;
        assert!((lambda - 10e6).abs() / 10e6 < 0.02, "λ {lambda}");
        assert!((b.pp.bottleneck_bps().unwrap() / 8.0 - 10e6).abs() < 1.0);
        // Sampled at ACK arrivals the queue holds the B = 4 TPDUs ahead of a pair's
        // first plus part of the pair itself: B to B + 2.
        let q = b.mean_queue(t(1000));
        assert!((4.0..=6.0).contains(&q), "mean backlog {q} TPDUs");
        assert!((b.pp.backlog_tpdus() - 4.0).abs() < 1.0);
        let acked = |b: &Bottleneck, from, to| {
            b.queue_log
                .iter()
                .filter(|x| x.0 >= from && x.0 < to)
                .count()
        };
        // Work-conserving: the bottleneck is busy ≥ 99.9 % of the time.
        assert!(acked(&b, t(1000), t(2000)) >= 9_990);
        b.mu = 5e6;
        b.run_until(t(4000));
        let lambda = b.pp.rate_bps().unwrap() / 8.0;
        assert!((lambda - 5e6).abs() / 5e6 < 0.02, "λ {lambda}");
        // The first slow ACK is back one RTT after the change: (λ − μ)·R = 50 TPDUs
        // pile up before the source can know, plus a little for the estimator's lag.
        let peak = b.queue_log.iter().map(|x| x.1).max().unwrap();
        assert!(peak <= 65, "peak backlog {peak}");
        let q = b.mean_queue(t(3000));
        assert!((4.0..=6.0).contains(&q), "mean backlog {q} TPDUs");
        assert!(acked(&b, t(3000), t(4000)) >= 4_995);
        let r = b.pp.base_rtt().unwrap();
        assert!(r >= Duration::from_millis(10) && r < Duration::from_micros(10_200));
    }

    fn sample(now_us: u64, seq: u64, first: bool, second: bool, retx: bool) -> AckSample {
        AckSample {
            now: Instant::from_nanos(now_us * 1000),
            rtt: Duration::from_millis(10),
            min_rtt: Duration::from_millis(10),
            newly_acked: 1,
            newly_acked_bytes: 1000,
            seq,
            cum_ack: seq + 1,
            pair_first: first,
            pair_second: second,
            retransmission: retx,
            in_flight: 0,
            bytes: 1000,
        }
    }

    #[test]
    fn probing_sends_one_pair_and_discards_unclean_samples() {
        let mut pp = PacketPair::new(PacketPairConfig::for_tpdu(1000));
        let t0 = Instant::ZERO;
        assert!(pp.wants_pair());
        assert_eq!(pp.poll_send(t0, 0, 1000), Permit::Now);
        assert_eq!(pp.poll_send(t0, 2, 1000), Permit::Blocked);
        // A retransmitted second, a non-consecutive pair, an equal-time pair.
        pp.on_ack(&sample(100, 0, true, false, false));
        pp.on_ack(&sample(200, 1, false, true, true));
        pp.on_ack(&sample(300, 2, true, false, false));
        pp.on_ack(&sample(350, 7, false, false, false));
        pp.on_ack(&sample(400, 3, false, true, false));
        pp.on_ack(&sample(500, 4, true, false, false));
        pp.on_ack(&sample(500, 5, false, true, false));
        assert!(pp.is_probing());
        assert_eq!(pp.rate_bps(), None);
        // A clean pair 100 µs apart: 1000 B / 100 µs = 10 MB/s.
        pp.on_ack(&sample(600, 8, true, false, false));
        pp.on_ack(&sample(700, 9, false, true, false));
        assert!(!pp.is_probing());
        assert!((pp.rate_bps().unwrap() - 80e6).abs() < 1.0);
    }

    #[test]
    fn losses_keep_the_rate_timeouts_fall_back_and_reprobe() {
        let mut pp = PacketPair::new(PacketPairConfig::for_tpdu(1000));
        pp.on_ack(&sample(600, 0, true, false, false));
        pp.on_ack(&sample(700, 1, false, true, false));
        let now = Instant::from_nanos(700_000);
        let before = pp.rate_bps();
        pp.on_loss(now, 10, 20);
        pp.on_loss(now, 10, 20);
        assert_eq!(pp.rate_bps(), before);
        pp.on_timeout(now, 10);
        pp.on_timeout(now, 10);
        assert_eq!(pp.rate_bps(), before, "one or two timeouts keep λ");
        pp.on_timeout(now, 10);
        assert!(pp.is_probing());
        assert_eq!(pp.rate_bps(), Some(80_000.0), "λ_min = 10 TPDUs/s");
        // Re-probing is paced at λ_min: 1000 B at 10 kB/s = 100 ms apart.
        assert_eq!(pp.poll_send(now, 0, 1000), Permit::Now);
        pp.on_sent(now, 1000, true);
        assert_eq!(
            pp.poll_send(now, 1, 1000),
            Permit::At(now + Duration::from_millis(100))
        );
        let later = now + Duration::from_millis(100);
        assert_eq!(pp.poll_send(later, 1, 1000), Permit::Blocked);
    }

    #[test]
    fn pacing_spaces_pairs_and_the_cap_holds() {
        let mut cfg = PacketPairConfig::for_tpdu(1000);
        cfg.max_rate_bps = 40_000_000; // 5 MB/s
        let mut pp = PacketPair::new(cfg);
        pp.on_ack(&sample(600, 0, true, false, false));
        pp.on_ack(&sample(700, 1, false, true, false));
        assert_eq!(pp.rate_bps(), Some(40e6), "capped below μ̂ = 80 Mbit/s");
        let t = Instant::from_nanos(1_000_000);
        assert_eq!(pp.poll_send(t, 0, 1000), Permit::Now);
        pp.on_sent(t, 1000, false);
        pp.on_sent(t, 1000, false);
        // Two 1000-byte TPDUs at 5 MB/s: the next pair 400 µs later.
        assert_eq!(
            pp.poll_send(t, 2, 1000),
            Permit::At(t + Duration::from_micros(400))
        );
        pp.set_rate(8_000_000);
        assert_eq!(pp.rate_bps(), Some(8e6));
    }
}
