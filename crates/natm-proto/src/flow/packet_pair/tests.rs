//! Tests of packet-pair control: the specs' fluid model, unclean samples, and a
//! closed loop against a simulated bottleneck.

use super::*;

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
    /// ACK arrival times (the bottleneck's departures, one delay later).
    acked: Vec<Instant>,
    /// At each pair's second ACK: the backlog (TPDUs) a TPDU sent then finds at
    /// the bottleneck, and the controller's n̂_b just after the ACK.
    backlog: Vec<(Instant, f64, f64)>,
    /// At every ACK: the backlog (TPDUs) a TPDU sent then finds at the bottleneck.
    queue: Vec<(Instant, f64)>,
    /// At each pair's second ACK: the pairs' estimate over the true μ, and μ̂ (that
    /// estimate as the delivery rate bounds it) over μ.
    mu_ratio: Vec<(Instant, f64, f64)>,
    /// Every this many pairs, the pair's two ACKs reach the sender 3 µs apart (the
    /// switch sent them back to back, or a host read them in one batch).
    compress_every: Option<u64>,
    /// Every pair's second ACK reaches the sender this many times sooner after the
    /// first than the bottleneck spaced them: something after the bottleneck (a
    /// user-space delay line on a loaded host) forwards frames late and together.
    compress_all: Option<f64>,
    /// With `compress_all`: the k-th pair is compressed (1 + k mod this) times more
    /// (the delay line's bunching varies, and so do the pairs' readings).
    compress_spread: u64,
    /// (period, length): the sender's process does not run for `length` out of each
    /// `period`; ACKs arriving meanwhile are handled at its end, 2 µs apart.
    stall: Option<(Duration, Duration)>,
    pairs: u64,
    /// A token-bucket shaper instead of the round-robin server: (depth, queue), bytes
    /// of tokens refilled at μ and TPDUs that may wait; a TPDU leaves at once while
    /// tokens last (a link 1,000 times faster), and a TPDU that finds the queue full
    /// is dropped (Linux's `tbf`).
    bucket: Option<(f64, usize)>,
    /// The shaper's tokens as of `free_at`.
    tokens: f64,
    /// TPDUs the shaper dropped.
    dropped: u64,
    /// The most TPDUs the sender holds in flight (its window).
    window: u32,
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
            acked: Vec::new(),
            backlog: Vec::new(),
            mu_ratio: Vec::new(),
            queue: Vec::new(),
            compress_every: None,
            compress_all: None,
            compress_spread: 1,
            stall: None,
            pairs: 0,
            bucket: None,
            tokens: 0.0,
            dropped: 0,
            window: 256,
        }
    }

    /// When the sender handles an ACK the bottleneck released at `at`: bunched as
    /// the `compress_every` and `stall` settings say, never before the ACK before.
    fn ack_time(&mut self, at: Instant, second: bool) -> Instant {
        let prev = self.acks.back().map(|a| a.0);
        let mut t = at;
        if second {
            self.pairs += 1;
            if let (Some(n), Some(p)) = (self.compress_every, prev) {
                if self.pairs.is_multiple_of(n) {
                    t = p + Duration::from_micros(3);
                }
            }
            if let (Some(k), Some(p)) = (self.compress_all, prev) {
                let k = k * (1 + self.pairs % self.compress_spread.max(1)) as f64;
                t = p + t.saturating_duration_since(p).div_f64(k);
            }
        }
        if let Some((period, length)) = self.stall {
            let ns = t.as_nanos();
            let (period, length) = (period.as_nanos() as u64, length.as_nanos() as u64);
            if ns % period < length {
                t = Instant::from_nanos(ns - ns % period + length);
            }
        }
        match prev {
            Some(p) if t <= p => p + Duration::from_micros(2),
            _ => t,
        }
    }

    fn send(&mut self, first: bool, second: bool) {
        let arrive = self.now + self.delay;
        let depart = match self.bucket {
            None => arrive.max(self.free_at) + Duration::from_secs_f64(1000.0 / self.mu),
            Some((depth, queue)) => {
                let waiting = self.acks.iter().filter(|a| a.4 > arrive).count();
                if waiting >= queue {
                    self.dropped += 1;
                    self.seq += 1;
                    self.pp.on_sent(self.now, 1000, false);
                    return;
                }
                let start = arrive.max(self.free_at);
                let refill = start.saturating_duration_since(self.free_at).as_secs_f64();
                let tokens = (self.tokens + refill * self.mu).min(depth);
                let wait = ((1000.0 - tokens) / self.mu).max(0.0);
                self.tokens = tokens + wait * self.mu - 1000.0;
                start + Duration::from_secs_f64(wait + 1000.0 / (1000.0 * self.mu))
            }
        };
        self.free_at = depart;
        let ack = self.ack_time(depart + self.delay, second);
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
                if in_flight >= self.window {
                    break;
                }
                match self.pp.poll_send(self.now, in_flight, 1000) {
                    Permit::Now => {
                        if self.pp.wants_pair() && in_flight + 1 < self.window {
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
                self.acked.push(t);
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
                    arrived: None,
                });
                let work = self.free_at.saturating_duration_since(t + self.delay);
                self.queue.push((t, work.as_secs_f64() * self.mu / 1000.0));
                if second {
                    let raw = self.pp.est.estimate().unwrap_or(0.0);
                    let mu = self.pp.bottleneck_bps().unwrap_or(0.0) / 8.0;
                    self.mu_ratio.push((t, raw / self.mu, mu / self.mu));
                    let work = self.free_at.saturating_duration_since(t + self.delay);
                    let truth = work.as_secs_f64() * self.mu / 1000.0;
                    self.backlog.push((t, truth, self.pp.backlog_tpdus()));
                }
            }
        }
    }

    /// From `from` on: the mean backlog and the largest error of n̂_b; and the
    /// peak backlog over the whole run.
    fn backlog(&self, from: Instant) -> (f64, f64, f64) {
        let q: Vec<_> = self.backlog.iter().filter(|x| x.0 >= from).collect();
        let mean = q.iter().map(|x| x.1).sum::<f64>() / q.len() as f64;
        let err = q.iter().map(|x| (x.1 - x.2).abs()).fold(0.0, f64::max);
        let peak = self.backlog.iter().map(|x| x.1).fold(0.0, f64::max);
        (mean, err, peak)
    }

    /// The mean backlog (TPDUs) TPDUs found at the bottleneck, at every ACK from
    /// `from` on.
    fn mean_queue(&self, from: Instant) -> f64 {
        let q: Vec<f64> = self
            .queue
            .iter()
            .filter(|x| x.0 >= from)
            .map(|x| x.1)
            .collect();
        q.iter().sum::<f64>() / q.len() as f64
    }

    /// TPDUs the bottleneck delivered in [from, to) (ACK arrival times).
    fn delivered(&self, from: Instant, to: Instant) -> usize {
        self.acked.iter().filter(|&&t| t >= from && t < to).count()
    }
}

/// Closed loop against a bottleneck of 10 MB/s that halves at t = 2 s: λ tracks μ,
/// the bottleneck never idles, and the backlog settles at the set-point.
#[test]
fn closed_loop_tracks_the_bottleneck_and_holds_the_set_point() {
    let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 10e6);
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    // The probe pair's ACKs are back 10.2 ms after it left (t = 0).
    b.run_until(t(11));
    assert!(!b.pp.is_probing(), "the probe pair's ACKs are back");
    let first = b.pp.rate_bps().unwrap();
    assert!((first - 80e6).abs() < 1e3, "λ = μ̂ after the probe: {first}");
    b.run_until(t(2000));
    let lambda = b.pp.rate_bps().unwrap() / 8.0;
    assert!((lambda - 10e6).abs() / 10e6 < 0.02, "λ {lambda}");
    assert!((b.pp.bottleneck_bps().unwrap() / 8.0 - 10e6).abs() < 1.0);
    // The backlog is what the controller thinks, and at the set-point B = 4.
    let (q, err, _) = b.backlog(t(1000));
    assert!((q - 4.0).abs() < 0.25, "mean backlog {q} TPDUs");
    assert!(err < 0.05, "n̂_b off by {err} TPDUs");
    // Work-conserving: the bottleneck is busy ≥ 99.9 % of the time.
    assert!(b.delivered(t(1000), t(2000)) >= 9_990);
    b.mu = 5e6;
    b.run_until(t(4000));
    let lambda = b.pp.rate_bps().unwrap() / 8.0;
    assert!((lambda - 5e6).abs() / 5e6 < 0.02, "λ {lambda}");
    // The first slow ACK is back one RTT after the change: (λ − μ)·R = 50 TPDUs
    // pile up before the source can know, plus a little for the estimator's lag
    // (the median filter turns after five slow samples of nine).
    let (q, err, peak) = b.backlog(t(3000));
    assert!(peak <= 70.0, "peak backlog {peak}");
    assert!((q - 4.0).abs() < 0.25, "mean backlog {q} TPDUs");
    assert!(err < 0.05, "n̂_b off by {err} TPDUs");
    assert!(b.delivered(t(3000), t(4000)) >= 4_995);
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
        arrived: None,
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

/// The closed loop of the test above (10 MB/s, 1000-byte TPDUs, a pair every 200
/// µs at the set-point) with the ACK path of a real switch process: every fourth
/// pair's ACKs reach the sender 3 µs apart, and for 3 ms in every 50 ms the sender
/// does not run and then handles the ACKs that came meanwhile at once. Both happen
/// through `natm switch` on a loaded host, and each used to move μ̂ to tens of times
/// the bottleneck's rate (the fuzzy rules read the outliers as a rate change); the
/// median filter and the bunch test keep it on the rate.
#[test]
fn compressed_and_bunched_ack_pairs_do_not_derail_the_estimate() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let run = |cfg: PacketPairConfig| {
        let mut b = Bottleneck::new(cfg, 10e6);
        b.compress_every = Some(4);
        b.stall = Some((Duration::from_millis(50), Duration::from_millis(3)));
        b.run_until(t(2000));
        let after: Vec<_> = b.mu_ratio.iter().filter(|x| x.0 >= t(500)).collect();
        let farthest = |r: &mut dyn Iterator<Item = f64>| {
            r.fold(1.0, |w: f64, r| {
                if (r - 1.0).abs() > (w - 1.0).abs() {
                    r
                } else {
                    w
                }
            })
        };
        let worst = farthest(&mut after.iter().map(|x| x.1));
        let bounded = farthest(&mut after.iter().map(|x| x.2));
        let (q, _, peak) = b.backlog(t(500));
        (worst, bounded, b.delivered(t(500), t(2000)), q, peak)
    };
    let cfg = PacketPairConfig::for_tpdu(1000);
    let (worst, bounded, delivered, q, peak) = run(cfg);
    assert!((worst - 1.0).abs() < 0.1, "μ̂ / μ reached {worst}");
    assert!(
        (bounded - 1.0).abs() < 0.1,
        "bounded μ̂ / μ reached {bounded}"
    );
    // The bottleneck stays busy, and the backlog near the set-point of 4 TPDUs
    // (the stalls hold ACKs back, so n̂_b runs high for a moment each time).
    assert!(delivered >= 14_900, "{delivered} TPDUs in 1.5 s");
    assert!(q < 8.0 && peak < 40.0, "backlog mean {q}, peak {peak}");
    // Each defence alone is not enough to keep the pairs' estimate on the rate:
    // without the median, the lone compressed pairs; without the bunch test, the
    // runs of them a stall leaves. The delivery rate still bounds what the law uses.
    for (name, cfg) in [
        (
            "median",
            PacketPairConfig {
                median_of: 1,
                ..cfg
            },
        ),
        (
            "bunch test",
            PacketPairConfig {
                bunch_fraction: 0.0,
                ..cfg
            },
        ),
    ] {
        let (worst, bounded, delivered, ..) = run(cfg);
        assert!(worst > 3.0, "without the {name} μ̂ / μ only reached {worst}");
        assert!(
            bounded < 1.5,
            "without the {name} bounded μ̂ / μ reached {bounded}"
        );
        assert!(delivered >= 14_900, "without the {name}: {delivered} TPDUs");
    }
}

/// Every pair arrives ten times closer together than the bottleneck sent it, so the
/// pairs' estimate is ten times the bottleneck; what the path delivered bounds μ̂, and
/// the backlog stays near the set-point instead of filling the window.
#[test]
fn pairs_compressed_after_the_bottleneck_are_bounded_by_the_delivery_rate() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let run = |bound: bool| {
        let cfg = PacketPairConfig {
            delivery_bound: bound,
            ..PacketPairConfig::for_tpdu(1000)
        };
        let mut b = Bottleneck::new(cfg, 10e6);
        b.compress_all = Some(10.0);
        b.run_until(t(2000));
        let raw = b.pp.est.estimate().unwrap() / 10e6;
        let mu = b.pp.bottleneck_bps().unwrap() / 8.0 / 10e6;
        (raw, mu, b.delivered(t(500), t(2000)), b.mean_queue(t(500)))
    };
    let (raw, mu, delivered, queue) = run(true);
    let (raw0, _, delivered0, queue0) = run(false);
    assert!(raw > 5.0 && raw0 > 5.0, "the pairs read {raw} / {raw0} × μ");
    assert!(mu < 1.5, "bounded μ̂ / μ {mu}");
    // Both keep the bottleneck busy; without the bound only the window (256 TPDUs,
    // 100 of them the path's own delay) holds the sender back, and the queue is
    // what the window leaves; with it, the law holds the queue near the set-point
    // plus what the bound's headroom costs ((1.25 − 1)·μ·R/α = 50 TPDUs, measured as
    // the pairs' path delay allows).
    assert!(
        delivered >= 14_900 && delivered0 >= 14_900,
        "{delivered} / {delivered0} TPDUs in 1.5 s"
    );
    assert!(queue < 100.0, "queue {queue} TPDUs with the bound");
    assert!(queue0 > 140.0, "queue {queue0} TPDUs without");
}

/// The bunch test measures ACK spacing against μ̂, so a μ̂ far below the truth must
/// not lock itself in (every pair rejected as bunched): a bottleneck that gets 8×
/// faster is followed, with or without the ACK path's bunching.
#[test]
fn a_bottleneck_eight_times_faster_is_followed() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    for bunched in [false, true] {
        let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 2.5e6);
        if bunched {
            b.compress_every = Some(4);
            b.stall = Some((Duration::from_millis(50), Duration::from_millis(3)));
        }
        b.run_until(t(1000));
        let mu = b.pp.bottleneck_bps().unwrap() / 8.0;
        assert!((mu - 2.5e6).abs() / 2.5e6 < 0.02, "μ̂ {mu} before");
        b.mu = 20e6;
        b.run_until(t(2000));
        let mu = b.pp.bottleneck_bps().unwrap() / 8.0;
        assert!(
            (mu - 20e6).abs() / 20e6 < 0.02,
            "μ̂ {mu} after (bunched: {bunched})"
        );
        // Work-conserving again soon after the change.
        let n = b.delivered(t(1500), t(2000));
        assert!(n >= 9_900, "{n} TPDUs in 0.5 s (bunched: {bunched})");
    }
}

/// The probe pair finds 20 ms of other traffic queued at the bottleneck (a start-up
/// burst into a shaper's queue), and every later pair comes compressed, by a factor
/// that varies, so the estimate never settles and the delivery rate bounds μ̂. The
/// path delay the first pair measured holds that queue; R_base, measured once it has
/// drained, caps it, so n̂_b sees the queue this VC builds and the law holds it near
/// the set-point plus the bound's headroom (without the cap: 155 TPDUs, all the
/// window leaves).
#[test]
fn a_probe_that_found_a_queue_does_not_hide_the_backlog() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let cfg = PacketPairConfig {
        median_of: 1,
        ..PacketPairConfig::for_tpdu(1000)
    };
    let mut b = Bottleneck::new(cfg, 10e6);
    b.compress_all = Some(10.0);
    b.compress_spread = 4;
    b.free_at = t(0) + b.delay + Duration::from_millis(20);
    b.run_until(t(2000));
    let mean = b.mean_queue(t(500));
    assert!(mean < 100.0, "queue {mean} TPDUs");
    assert!(b.delivered(t(500), t(2000)) >= 14_900);
}

/// A token-bucket shaper of 10 MB/s with 32 TPDUs of tokens and room for 100 more in
/// its queue, 0.1 ms away: with tokens to spare it passes pairs back to back, and the
/// first reads as the link behind it. The start-up gate holds what is in flight until
/// the delivery rate bounds μ̂, so the start does not overfill the queue, and the
/// shaper is kept busy after (without the gate the window's 256 TPDUs left at once
/// into the queue of 100, and this harness, which does not retransmit, lost 50,720
/// TPDUs in the second).
#[test]
fn a_shaper_with_tokens_to_spare_does_not_overfill_its_queue_at_the_start() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 10e6);
    b.delay = Duration::from_micros(50);
    b.bucket = Some((32_000.0, 100));
    b.tokens = 32_000.0;
    b.run_until(t(1000));
    let raw = b.mu_ratio[0].1;
    assert!(raw > 5.0, "the first pair read {raw} × μ");
    assert_eq!(b.dropped, 0, "dropped at the shaper");
    let n = b.delivered(t(100), t(1000));
    assert!(n >= 8_900, "{n} TPDUs in 0.9 s");
}

/// The same shaper as natm meets it through `tbf` on a veth (100 Mbit/s, 32 KB of
/// tokens, 50 ms of queue, 25 µs each way) with the window of a reliable VC, and the
/// receiver stamping a pair's TPDUs as it reads them, closer together than the shaper
/// spaced them (the harness's `compress_all`): the burst of tokens made the delivery
/// rate's first bound 58 × μ, and without the in-flight bound λ burst at each epoch
/// and held the queue full for the bound's eight round trips (2,431 TPDUs dropped,
/// 113 queued on average). With it nothing is dropped and the shaper never idles.
#[test]
fn a_bound_the_burst_inflated_does_not_keep_the_queue_full() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 12.5e6);
    b.delay = Duration::from_micros(25);
    b.bucket = Some((32_000.0, 600));
    b.tokens = 32_000.0;
    b.window = 2920;
    b.compress_all = Some(10.0);
    b.compress_spread = 4;
    b.run_until(t(2000));
    assert_eq!(b.dropped, 0, "dropped at the shaper");
    let mean = b.mean_queue(t(0));
    assert!(mean < 20.0, "queue {mean} TPDUs");
    let n = b.delivered(t(100), t(2000));
    assert!(n >= 23_700, "{n} TPDUs in 1.9 s");
}

/// A VC configured for 4 KiB TPDUs on a path that cut them to 1,000 bytes, 20 ms
/// round trip: the in-flight bound and the start's gate count the TPDUs the path
/// carries, not the configured ones. Counted in 4 KiB TPDUs the bound held 128 of
/// 1,000 bytes in flight, half the bottleneck's rate over 20 ms.
#[test]
fn tpdus_the_path_cut_smaller_are_counted_as_they_are() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(4096), 12.5e6);
    b.delay = Duration::from_millis(10);
    b.window = 2920;
    b.run_until(t(3000));
    let n = b.delivered(t(1000), t(3000));
    assert!(n >= 24_500, "{n} TPDUs in 2 s of 25,000");
    assert_eq!(b.pp.start, Start::Over);
}

/// A short fast path (1 Gbit/s of 1,000-byte TPDUs, 20 µs round trip) whose ACKs the
/// receiver sends late and together: it does not run 120 µs of every 400 µs. The
/// in-flight bound is a dozen TPDUs there, and each pause holds the sender at it while
/// the bottleneck drains; the allowance for ACKs that come together (BBR's
/// `extra_acked`) keeps the bottleneck busy.
#[test]
fn acks_that_come_late_and_together_do_not_idle_a_short_fast_path() {
    let t = |ms: u64| Instant::from_nanos(1_000_000 + ms * 1_000_000);
    let mut b = Bottleneck::new(PacketPairConfig::for_tpdu(1000), 125e6);
    b.delay = Duration::from_micros(10);
    b.window = 2920;
    b.stall = Some((Duration::from_micros(400), Duration::from_micros(120)));
    b.run_until(t(500));
    let n = b.delivered(t(100), t(500));
    // Without the allowance: 46,000 (the bound held 14.75 TPDUs).
    assert!(n >= 49_500, "{n} TPDUs in 400 ms of 50,000");
    // What the allowance lets in flight queues no more than a pause's worth.
    let q = b.mean_queue(t(100));
    assert!(q < 20.0, "queue {q} TPDUs");
}
