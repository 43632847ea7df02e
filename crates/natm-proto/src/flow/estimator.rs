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

#[cfg(test)]
mod tests {
    use super::*;

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
