//! Percentiles and medians of measured values.

/// The `p`-quantile (0 ≤ p ≤ 1) of values sorted ascending, by the nearest-rank
/// method: the smallest value with at least `p` of all values at or below it. `None` if
/// there are no values.
pub(crate) fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// The median of values in any order: the middle one, or the mean of the two middle
/// ones. `None` if there are none or one is NaN.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Summary of one run's round-trip times, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    /// Number of samples.
    pub(crate) count: usize,
    /// Fastest round trip.
    pub(crate) min: f64,
    /// Median (nearest rank).
    pub(crate) p50: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// 99.9th percentile.
    pub(crate) p999: f64,
    /// Slowest round trip.
    pub(crate) max: f64,
    /// Arithmetic mean.
    pub(crate) mean: f64,
}

impl Summary {
    /// Summarise samples given in nanoseconds (sorts them); `None` if there are none.
    pub(crate) fn of_nanos(samples: &mut [u64]) -> Option<Self> {
        samples.sort_unstable();
        let us = |ns: u64| ns as f64 / 1e3;
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Some(Self {
            count: samples.len(),
            min: us(*samples.first()?),
            p50: us(percentile(samples, 0.5)?),
            p99: us(percentile(samples, 0.99)?),
            p999: us(percentile(samples, 0.999)?),
            max: us(*samples.last()?),
            mean: sum as f64 / samples.len() as f64 / 1e3,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 0.5), Some(500));
        assert_eq!(percentile(&v, 0.99), Some(990));
        assert_eq!(percentile(&v, 0.999), Some(999));
        assert_eq!(percentile(&v, 1.0), Some(1000));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7u64], 0.999), Some(7));
        assert_eq!(percentile(&[1u64, 2], 0.5), Some(1));
        assert_eq!(percentile::<u64>(&[], 0.5), None);
        // A tail shorter than 1 % of the samples does not reach p99, but does reach p99.9.
        let mut w = vec![10u64; 995];
        w.extend([1000; 5]);
        assert_eq!(percentile(&w, 0.99), Some(10));
        assert_eq!(percentile(&w, 0.999), Some(1000));
    }

    #[test]
    fn medians_odd_even_and_unordered() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn summary_in_microseconds() {
        let mut ns: Vec<u64> = (1..=100).rev().map(|i| i * 1000).collect();
        let s = Summary::of_nanos(&mut ns).unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.p50, 50.0);
        assert_eq!(s.p99, 99.0);
        assert_eq!(s.p999, 100.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.mean, 50.5);
        assert_eq!(Summary::of_nanos(&mut []), None);
    }
}
