//! The packet-pair bottleneck-rate estimator: exponential averaging whose weight of
//! history is set by a three-rule fuzzy controller (specs §8.3).
//!
//! Keshav's papers replace an impractical Kalman filter with a fuzzy-logic estimator;
//! the exact membership functions were not available, so the breakpoints and rule
//! outputs below are the specs digest's choice \[REC\], reproduced exactly so that the
//! trace table in specs §8.3 is a regression test.

/// Weight of history when the smoothed relative error is LOW (noise: trust history).
pub const GAIN_LOW: f64 = 0.9;
/// Weight of history when the smoothed relative error is MEDIUM.
pub const GAIN_MEDIUM: f64 = 0.5;
/// Weight of history when the smoothed relative error is HIGH (the rate changed:
/// track the samples).
pub const GAIN_HIGH: f64 = 0.1;

/// The fuzzy exponential-averaging estimator of a rate (any unit: the caller's).
#[derive(Debug, Clone, PartialEq)]
pub struct FuzzyEstimator {
    estimate: Option<f64>,
    error: f64,
    beta: f64,
    last_gain: Option<f64>,
}

impl Default for FuzzyEstimator {
    fn default() -> Self {
        FuzzyEstimator::new(0.75)
    }
}

impl FuzzyEstimator {
    /// An estimator with no samples; `beta` smooths the relative prediction error
    /// (specs §8.3: β = 0.75, the [`Default`]).
    pub fn new(beta: f64) -> Self {
        FuzzyEstimator {
            estimate: None,
            error: 0.0,
            beta: beta.clamp(0.0, 1.0),
            last_gain: None,
        }
    }

    /// The weight of history `a` for a smoothed relative error `e`: memberships LOW
    /// (1 at 0, 0 at 0.2), MEDIUM (triangle 0 / 0.2 / 0.5), HIGH (0 at 0.2, 1 from
    /// 0.5), defuzzified as the weighted average of the rule outputs.
    pub fn gain(e: f64) -> f64 {
        let e = e.max(0.0);
        let low = ((0.2 - e) / 0.2).clamp(0.0, 1.0);
        let medium = if e < 0.5 {
            (e / 0.2).min((0.5 - e) / 0.3).max(0.0)
        } else {
            0.0
        };
        let high = ((e - 0.2) / 0.3).clamp(0.0, 1.0);
        let w = low + medium + high;
        (GAIN_LOW * low + GAIN_MEDIUM * medium + GAIN_HIGH * high) / w
    }

    /// Feed one sample; returns the new estimate. The first sample is taken as it is
    /// (specs §8.4: "μ̂ = first sample"). Non-finite or non-positive samples are
    /// ignored.
    pub fn update(&mut self, sample: f64) -> f64 {
        if !(sample.is_finite() && sample > 0.0) {
            return self.estimate.unwrap_or(0.0);
        }
        let Some(mu) = self.estimate else {
            self.estimate = Some(sample);
            return sample;
        };
        let err = (sample - mu).abs() / mu;
        self.error = self.beta * self.error + (1.0 - self.beta) * err;
        let a = Self::gain(self.error);
        let mu = a * mu + (1.0 - a) * sample;
        self.last_gain = Some(a);
        self.estimate = Some(mu);
        mu
    }

    /// The current estimate, once a sample has arrived.
    pub fn estimate(&self) -> Option<f64> {
        self.estimate
    }

    /// The smoothed relative prediction error `e`.
    pub fn error(&self) -> f64 {
        self.error
    }

    /// The weight of history used by the last update (none for the first sample).
    pub fn last_gain(&self) -> Option<f64> {
        self.last_gain
    }

    /// Forget everything (re-probing after the path went silent).
    pub fn reset(&mut self) {
        *self = FuzzyEstimator::new(self.beta);
    }
}

/// Most samples [`MedianFilter`] keeps, whatever it is configured to.
pub const MEDIAN_MAX: usize = 31;

/// A running median of the last `n` rate samples, ahead of [`FuzzyEstimator`].
///
/// Departure from specs §8.3, which feeds every clean sample to the fuzzy averager:
/// measured through a real `natm switch` process, 20–40 % of the pairs' ACK spacings
/// were compressed to a few microseconds (a late wake-up of the switch sends the
/// line slots it missed back to back; a busy host reads both ACKs in one batch), so
/// samples 10–1000× the true rate arrived in runs, and the fuzzy rules — which read
/// a large error as "the rate changed, track the samples" (gain 0.1) — moved μ̂ to
/// them at once. The sender's rate then jumped to gigabits per second, the port's
/// buffer overflowed, and the backlog estimate held every VC at λ_min in turn. The
/// median of the last few samples ignores any minority of such outliers, whichever
/// way they err, while a real change of the service rate (a VC joining or leaving)
/// becomes the median after ⌈n/2⌉ samples and then reaches the fuzzy rules as the
/// large persistent error they are meant to track. An even count takes the lower of
/// its two middle samples (the slower rate: the safe side while few samples are in).
/// Like the packet dispersion studies (Dovrolis, Ramanathan, Moore, INFOCOM 2001),
/// this treats a single pair's spacing as evidence, not as the rate.
#[derive(Debug, Clone, PartialEq)]
pub struct MedianFilter {
    window: std::collections::VecDeque<f64>,
    n: usize,
}

impl MedianFilter {
    /// The median of the last `n` samples (`n` is clamped to 1..=[`MEDIAN_MAX`]; 1
    /// passes every sample through).
    pub fn new(n: usize) -> Self {
        let n = n.clamp(1, MEDIAN_MAX);
        MedianFilter {
            window: std::collections::VecDeque::with_capacity(n),
            n,
        }
    }

    /// Adds a sample (non-finite and non-positive ones are ignored) and returns the
    /// median of the window, `None` while it is empty.
    pub fn push(&mut self, sample: f64) -> Option<f64> {
        if sample.is_finite() && sample > 0.0 {
            if self.window.len() == self.n {
                self.window.pop_front();
            }
            self.window.push_back(sample);
        }
        self.median()
    }

    /// The median of the samples in the window (the lower middle one for an even
    /// count).
    pub fn median(&self) -> Option<f64> {
        let mut v = [0.0f64; MEDIAN_MAX];
        let k = self.window.len();
        if k == 0 {
            return None;
        }
        for (d, s) in v.iter_mut().zip(&self.window) {
            *d = *s;
        }
        let v = &mut v[..k];
        v.sort_unstable_by(f64::total_cmp);
        Some(v[(k - 1) / 2])
    }

    /// Samples in the window.
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// Whether no sample is in the window.
    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Forget every sample.
    pub fn clear(&mut self) {
        self.window.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_filter_ignores_a_minority_of_outliers_and_follows_a_change() {
        let mut m = MedianFilter::new(5);
        assert_eq!(m.median(), None);
        assert_eq!(m.push(100.0), Some(100.0));
        // Two samples: the lower one, whichever order they came in.
        assert_eq!(m.push(10_000.0), Some(100.0));
        assert_eq!(m.push(f64::NAN), Some(100.0));
        assert_eq!(m.push(-5.0), Some(100.0));
        assert_eq!(m.len(), 2);
        for s in [101.0, 99.0, 50_000.0] {
            m.push(s);
        }
        // 100, 10000, 101, 99, 50000: two outliers of five change nothing.
        assert_eq!(m.median(), Some(101.0));
        // The rate halves: the median follows on the third slow sample.
        assert_eq!(m.push(50.0), Some(101.0));
        assert_eq!(m.push(51.0), Some(99.0));
        assert_eq!(m.push(49.0), Some(51.0));
        // The window never exceeds its size, and 1 passes samples through.
        let mut one = MedianFilter::new(0);
        assert_eq!(one.push(3.0), Some(3.0));
        assert_eq!(one.push(7.0), Some(7.0));
        assert_eq!(one.len(), 1);
        let mut big = MedianFilter::new(1000);
        for i in 0..100 {
            big.push(f64::from(i) + 1.0);
        }
        assert_eq!(big.len(), MEDIAN_MAX);
        assert_eq!(big.median(), Some(85.0));
        big.clear();
        assert!(big.is_empty());
    }

    /// specs §8.3 trace: true rate 1000 pkt/s, then 500 pkt/s.
    #[test]
    fn reproduces_the_trace_table() {
        // (ack gap ms, sample, e, a, μ̂), rounded as printed.
        let rows: [(f64, f64, f64, Option<f64>, f64); 9] = [
            (1.00, 1000.0, 0.0, None, 1000.0),
            (1.05, 952.4, 0.0119, Some(0.876), 994.1),
            (0.95, 1052.6, 0.0236, Some(0.853), 1002.7),
            (1.00, 1000.0, 0.0184, Some(0.863), 1002.4),
            (2.00, 500.0, 0.1391, Some(0.622), 812.4),
            (2.00, 500.0, 0.2005, Some(0.499), 656.0),
            (2.05, 487.8, 0.2144, Some(0.481), 568.7),
            (2.00, 500.0, 0.1910, Some(0.518), 535.6),
            (2.00, 500.0, 0.1599, Some(0.580), 520.6),
        ];
        let mut est = FuzzyEstimator::default();
        for (i, (gap_ms, sample, e, a, mu)) in rows.into_iter().enumerate() {
            let s = 1000.0 / gap_ms;
            assert!((s - sample).abs() < 0.05, "row {i} sample {s}");
            let got = est.update(s);
            assert!((got - mu).abs() < 0.05, "row {i}: μ̂ {got} vs {mu}");
            assert!((est.error() - e).abs() < 5e-5, "row {i}: e {}", est.error());
            match (est.last_gain(), a) {
                (None, None) => {}
                (Some(g), Some(a)) => assert!((g - a).abs() < 5e-4, "row {i}: a {g}"),
                other => panic!("row {i}: gain {other:?}"),
            }
        }
    }

    #[test]
    fn gain_follows_the_rules_at_the_breakpoints() {
        assert_eq!(FuzzyEstimator::gain(0.0), GAIN_LOW);
        assert!((FuzzyEstimator::gain(0.2) - GAIN_MEDIUM).abs() < 1e-12);
        assert_eq!(FuzzyEstimator::gain(0.5), GAIN_HIGH);
        assert_eq!(FuzzyEstimator::gain(3.0), GAIN_HIGH);
        // Monotone: a larger error never trusts history more.
        let mut prev = 1.0;
        for k in 0..=100 {
            let g = FuzzyEstimator::gain(k as f64 / 100.0);
            assert!(g <= prev + 1e-12, "gain rose at e = {}", k as f64 / 100.0);
            prev = g;
        }
    }

    #[test]
    fn bad_samples_are_ignored_and_reset_forgets() {
        let mut est = FuzzyEstimator::default();
        assert_eq!(est.update(f64::INFINITY), 0.0);
        assert_eq!(est.update(-1.0), 0.0);
        assert_eq!(est.estimate(), None);
        est.update(100.0);
        est.update(0.0);
        assert_eq!(est.estimate(), Some(100.0));
        est.reset();
        assert_eq!(est.estimate(), None);
        assert_eq!(est.update(7.0), 7.0);
    }
}
