//! Least-squares fits of measured costs and rates.
//!
//! - [`least_squares`]: weighted linear least squares with any number of regressors
//!   (the cost experiment's per-message + per-TPDU + per-byte model, seed 000 §6.3).
//! - [`two_part`]: seed 001 §8's "simple two-part least-squares fit" of throughput
//!   against message size, with the half-power point. Seed 001 fits throughput itself
//!   as a straight line in each part (`0.006239 · size + 4.25` Mbit/s below 8 KB,
//!   `4.5e-5 · size + 49.51` above), which has no meaning as a cost; we fit instead the
//!   time per message, `t = a + b · size`, in each part (a: per-message cost, b:
//!   per-byte cost), so throughput is `size / (a + b · size)` and tends to `1/b`. The
//!   split between the parts is the one that fits best, as the paper's 8 KB split was
//!   read off its figure.

/// Solve `Σ w (y − x·β)² → min` for β. `xs[i]` holds the regressors of point `i` (the
/// same number for all). `None` if there are fewer points than regressors or the
/// system is singular.
pub(crate) fn least_squares(xs: &[Vec<f64>], ys: &[f64], ws: &[f64]) -> Option<Vec<f64>> {
    let k = xs.first()?.len();
    if k == 0 || xs.len() < k || xs.len() != ys.len() || ys.len() != ws.len() {
        return None;
    }
    // Normal equations (XᵀWX) β = XᵀWy, solved by Gaussian elimination with pivoting.
    let mut m = vec![vec![0.0; k + 1]; k];
    for ((x, &y), &w) in xs.iter().zip(ys).zip(ws) {
        if x.len() != k {
            return None;
        }
        for r in 0..k {
            for c in 0..k {
                m[r][c] += w * x[r] * x[c];
            }
            m[r][k] += w * x[r] * y;
        }
    }
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        let scale = m.iter().map(|r| r[col].abs()).fold(0.0, f64::max);
        if m[pivot][col].abs() <= scale * 1e-12 || scale == 0.0 {
            return None;
        }
        m.swap(col, pivot);
        for r in 0..k {
            if r != col {
                let f = m[r][col] / m[col][col];
                let pivot_row = m[col].clone();
                for (x, p) in m[r].iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let beta: Vec<f64> = (0..k).map(|r| m[r][k] / m[r][r]).collect();
    beta.iter().all(|b| b.is_finite()).then_some(beta)
}

/// [`least_squares`] with every coefficient at least 0: the best fit among those
/// that set some coefficients to 0 and fit the rest freely. A cost cannot be
/// negative; an unconstrained fit of noisy timings can make one so (−0.17 µs per TPDU
/// was printed) by trading it against another. Exact for the few regressors used
/// here (2^k subsets). `None` as [`least_squares`].
pub(crate) fn non_negative_least_squares(
    xs: &[Vec<f64>],
    ys: &[f64],
    ws: &[f64],
) -> Option<Vec<f64>> {
    let full = least_squares(xs, ys, ws)?;
    if full.iter().all(|&b| b >= 0.0) {
        return Some(full);
    }
    let k = full.len();
    let residual = |beta: &[f64]| -> f64 {
        xs.iter()
            .zip(ys)
            .zip(ws)
            .map(|((x, &y), &w)| {
                let e = y - x.iter().zip(beta).map(|(a, b)| a * b).sum::<f64>();
                w * e * e
            })
            .sum()
    };
    let mut best: Option<(f64, Vec<f64>)> = None;
    // Every proper subset of the regressors kept free (bit set = free), the rest 0.
    for mask in 1..(1u32 << k) - 1 {
        let free: Vec<usize> = (0..k).filter(|&i| mask & (1 << i) != 0).collect();
        let sub: Vec<Vec<f64>> = xs
            .iter()
            .map(|x| free.iter().map(|&i| x[i]).collect())
            .collect();
        let Some(b) = least_squares(&sub, ys, ws) else {
            continue;
        };
        if b.iter().any(|&v| v < 0.0) {
            continue;
        }
        let mut beta = vec![0.0; k];
        for (&i, v) in free.iter().zip(b) {
            beta[i] = v;
        }
        let r = residual(&beta);
        if best.as_ref().is_none_or(|(br, _)| r < *br) {
            best = Some((r, beta));
        }
    }
    best.map(|(_, b)| b)
}

/// One part of a [`two_part`] fit: time per message `a + b · size` over a size range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Segment {
    /// Smallest message size fitted by this part, bytes.
    pub(crate) from: f64,
    /// Largest message size fitted by this part, bytes.
    pub(crate) to: f64,
    /// Per-message cost, seconds.
    pub(crate) a: f64,
    /// Per-byte cost, seconds per byte.
    pub(crate) b: f64,
}

impl Segment {
    /// Throughput this part predicts at `size`, bytes per second.
    pub(crate) fn rate(&self, size: f64) -> f64 {
        size / (self.a + self.b * size)
    }
}

/// Seed 001 §8's fit of throughput against message size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TwoPart {
    /// The parts, in order of size (one if there are too few points for two).
    pub(crate) parts: Vec<Segment>,
    /// The largest fitted throughput over the measured sizes, bytes per second.
    pub(crate) peak: f64,
    /// The message size whose fitted throughput is half of `peak`, bytes; below the
    /// smallest measured size it is extrapolated from the first part.
    pub(crate) half_power: Option<f64>,
    /// Root-mean-square relative error of the fitted throughput at the measured sizes.
    pub(crate) rms_rel_err: f64,
}

impl TwoPart {
    /// Fitted throughput at `size`, from the part whose range holds it (the first part
    /// below all, the last above all; parts meet halfway, geometrically, between their
    /// ranges).
    pub(crate) fn rate(&self, size: f64) -> f64 {
        self.part(size).rate(size)
    }

    fn part(&self, size: f64) -> &Segment {
        for w in self.parts.windows(2) {
            if size < (w[0].to * w[1].from).sqrt() {
                return &w[0];
            }
        }
        self.parts.last().unwrap_or(&self.parts[0])
    }
}

/// Fit time per message in one part; weights make the error relative, so small and
/// large messages count alike.
fn segment(points: &[(f64, f64)]) -> Option<(Segment, f64)> {
    let xs: Vec<Vec<f64>> = points.iter().map(|&(s, _)| vec![1.0, s]).collect();
    let ts: Vec<f64> = points.iter().map(|&(s, r)| s / r).collect();
    let ws: Vec<f64> = ts.iter().map(|t| 1.0 / (t * t)).collect();
    let beta = least_squares(&xs, &ts, &ws)?;
    // Costs are not negative: where noise makes one so, fit the other alone.
    let (a, b) = if beta[0] < 0.0 {
        let (mut num, mut den) = (0.0, 0.0);
        for ((&(s, _), t), w) in points.iter().zip(&ts).zip(&ws) {
            num += w * s * t;
            den += w * s * s;
        }
        let b = num / den;
        (0.0, b)
    } else if beta[1] < 0.0 {
        let a = ts.iter().zip(&ws).map(|(t, w)| w * t).sum::<f64>() / ws.iter().sum::<f64>();
        (a, 0.0)
    } else {
        (beta[0], beta[1])
    };
    let seg = Segment {
        from: points.first()?.0,
        to: points.last()?.0,
        a,
        b,
    };
    let sse = points
        .iter()
        .map(|&(s, r)| (seg.rate(s) / r - 1.0).powi(2))
        .sum();
    Some((seg, sse))
}

/// Fit `(size, throughput)` points (throughput in bytes per second, sizes distinct and
/// positive): two parts split where the fit is best, each with at least two points,
/// or one part if there are fewer than four points. `None` if nothing can be fitted.
pub(crate) fn two_part(points: &[(f64, f64)]) -> Option<TwoPart> {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(s, r)| s > 0.0 && r > 0.0 && s.is_finite() && r.is_finite())
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.dedup_by(|a, b| a.0 == b.0);
    if pts.len() < 2 {
        return None;
    }
    let mut best: Option<(Vec<Segment>, f64)> = segment(&pts).map(|(s, e)| (vec![s], e));
    for k in 2..=pts.len().saturating_sub(2) {
        if let (Some((lo, e1)), Some((hi, e2))) = (segment(&pts[..k]), segment(&pts[k..])) {
            if best.as_ref().is_none_or(|(_, e)| e1 + e2 < *e) {
                best = Some((vec![lo, hi], e1 + e2));
            }
        }
    }
    let (parts, sse) = best?;
    let mut fit = TwoPart {
        parts,
        peak: 0.0,
        half_power: None,
        rms_rel_err: (sse / pts.len() as f64).sqrt(),
    };
    let (lo, hi) = (pts[0].0, pts[pts.len() - 1].0);
    // The peak over the measured range, on a fine logarithmic grid.
    let steps = 400;
    let grid = |i: usize| lo * (hi / lo).powf(i as f64 / steps as f64);
    fit.peak = (0..=steps)
        .map(|i| fit.rate(grid(i)))
        .filter(|r| r.is_finite() && *r > 0.0)
        .fold(0.0, f64::max);
    if fit.peak <= 0.0 {
        return None;
    }
    let half = fit.peak / 2.0;
    fit.half_power = if fit.rate(lo) >= half {
        // Extrapolate the first part: s / (a + b s) = h  ⇔  s = a h / (1 − b h).
        let p = fit.parts[0];
        let s = p.a * half / (1.0 - p.b * half);
        (s > 0.0 && s.is_finite()).then_some(s)
    } else {
        // The first grid point at or over half the peak, refined by bisection.
        let i = (0..=steps).find(|&i| fit.rate(grid(i)) >= half)?;
        let (mut a, mut b) = (grid(i.saturating_sub(1)), grid(i));
        for _ in 0..60 {
            let m = (a * b).sqrt();
            if fit.rate(m) >= half {
                b = m;
            } else {
                a = m;
            }
        }
        Some(b)
    };
    Some(fit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn least_squares_recovers_exact_coefficients() {
        // y = 3 + 2 x1 − 0.5 x2 at points that are not collinear.
        let xs: Vec<Vec<f64>> = (0..8)
            .map(|i| vec![1.0, i as f64, ((i * i) % 5) as f64])
            .collect();
        let ys: Vec<f64> = xs.iter().map(|x| 3.0 + 2.0 * x[1] - 0.5 * x[2]).collect();
        let b = least_squares(&xs, &ys, &[1.0; 8]).unwrap();
        assert!(close(b[0], 3.0, 1e-9) && close(b[1], 2.0, 1e-9) && close(b[2], -0.5, 1e-9));
        // Collinear regressors or too few points: no answer, not a wrong one.
        let col: Vec<Vec<f64>> = (0..5)
            .map(|i| vec![1.0, i as f64, 2.0 * i as f64])
            .collect();
        assert_eq!(least_squares(&col, &[1.0; 5], &[1.0; 5]), None);
        assert_eq!(least_squares(&xs[..2], &ys[..2], &[1.0; 2]), None);
    }

    /// Timings whose free fit has a negative per-TPDU cost (the newcomer's −0.17 µs):
    /// the constrained fit reports 0 for it and still fits the rest.
    #[test]
    fn non_negative_fit_never_reports_a_negative_cost() {
        let tpdu = 4096.0;
        let sizes = [64.0, 4000.0, 4200.0, 8300.0, 12300.0, 16500.0];
        let xs: Vec<Vec<f64>> = sizes
            .iter()
            .map(|&s: &f64| vec![1.0, (s / tpdu).ceil(), s])
            .collect();
        // 2 µs + 0.5 ns/B, minus a little per TPDU: the free fit goes negative.
        let ys: Vec<f64> = xs
            .iter()
            .map(|x| 2e-6 - 0.17e-6 * x[1] + 0.5e-9 * x[2])
            .collect();
        let ws = [1.0; 6];
        assert!(least_squares(&xs, &ys, &ws).unwrap()[1] < 0.0);
        let b = non_negative_least_squares(&xs, &ys, &ws).unwrap();
        assert!(b.iter().all(|&v| v >= 0.0), "{b:?}");
        assert_eq!(b[1], 0.0);
        assert!(b[0] > 1e-6 && b[2] > 0.4e-9, "{b:?}");
        // A fit that is already non-negative is the free fit.
        let ys: Vec<f64> = xs
            .iter()
            .map(|x| 2e-6 + 1e-6 * x[1] + 0.5e-9 * x[2])
            .collect();
        let b = non_negative_least_squares(&xs, &ys, &ws).unwrap();
        assert!(close(b[1], 1e-6, 1e-6), "{b:?}");
    }

    /// Throughput from a per-message and per-byte cost that change at 8 KiB, as in
    /// seed 001 Fig. 3: the fit finds the split and both parts' costs.
    #[test]
    fn two_part_finds_the_knee_and_the_costs() {
        let (a1, b1) = (20e-6, 1e-9); // 20 µs + 1 ns/B below the knee
        let (a2, b2) = (60e-6, 0.5e-9); // 60 µs + 0.5 ns/B above
        let sizes = [
            64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
        ];
        let pts: Vec<(f64, f64)> = sizes
            .iter()
            .map(|&s| {
                let t = if s < 8192.0 { a1 + b1 * s } else { a2 + b2 * s };
                (s, s / t)
            })
            .collect();
        let fit = two_part(&pts).unwrap();
        assert_eq!(fit.parts.len(), 2);
        let (lo, hi) = (fit.parts[0], fit.parts[1]);
        assert_eq!((lo.from, lo.to, hi.from), (64.0, 4096.0, 16384.0));
        assert!(close(lo.a, a1, 1e-6) && close(lo.b, b1, 1e-6), "{lo:?}");
        assert!(close(hi.a, a2, 1e-6) && close(hi.b, b2, 1e-6), "{hi:?}");
        assert!(fit.rms_rel_err < 1e-9);
        // The peak is at the largest size; half of it is reached where the fitted
        // curve says so.
        assert!(close(fit.peak, 1048576.0 / (a2 + b2 * 1048576.0), 1e-6));
        let h = fit.half_power.unwrap();
        assert!(close(fit.rate(h), fit.peak / 2.0, 1e-6), "{h}");
        assert!(h > 4096.0 && h < 1048576.0, "{h}");
    }

    #[test]
    fn one_part_when_few_points_and_extrapolated_half_power() {
        // Throughput almost flat: half the peak lies below the smallest size.
        let (a, b) = (1e-6, 1e-9);
        let pts: Vec<(f64, f64)> = [4096.0, 65536.0, 1048576.0]
            .iter()
            .map(|&s| (s, s / (a + b * s)))
            .collect();
        let fit = two_part(&pts).unwrap();
        assert_eq!(fit.parts.len(), 1);
        assert!(close(fit.parts[0].a, a, 1e-6) && close(fit.parts[0].b, b, 1e-6));
        let h = fit.half_power.unwrap();
        assert!(h < 4096.0 && close(fit.parts[0].rate(h), fit.peak / 2.0, 1e-6));
        assert_eq!(two_part(&[(64.0, 1e6)]), None);
        // Throughput falling with size (noise) gives no negative per-byte cost.
        let fit = two_part(&[(64.0, 2e9), (128.0, 1.9e9), (256.0, 1.8e9)]).unwrap();
        assert!(
            fit.parts.iter().all(|p| p.a >= 0.0 && p.b >= 0.0),
            "{fit:?}"
        );
        assert_eq!(two_part(&[(64.0, f64::NAN), (128.0, 0.0)]), None);
    }
}
