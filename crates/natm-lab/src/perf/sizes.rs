//! Throughput against message size (seed 000 Fig. 6, seed 001 Figs. 3–4): per stack,
//! seed 001 §8's two-part least-squares fit ([`fit::two_part`]), its per-message and
//! per-byte costs, the half-power point, and the figure.

use std::path::Path;

use super::fit::{self, TwoPart};
use super::results;
use crate::plot::{self, Axis, Line, Mark};
use natm_cli::cli::table;

/// One stack's measured throughput at each size, and its fit.
pub(crate) struct Curve {
    /// Stack name.
    pub(crate) stack: String,
    /// (size in bytes, delivered bytes per second), ascending size.
    pub(crate) points: Vec<(f64, f64)>,
    /// The fit, if there are at least two sizes.
    pub(crate) fit: Option<TwoPart>,
}

/// Group `(stack, size, bits per second)` rows into one fitted curve per stack, in the
/// order the stacks first appear.
pub(crate) fn curves(rows: impl Iterator<Item = (String, usize, f64)>) -> Vec<Curve> {
    let mut out: Vec<Curve> = Vec::new();
    for (stack, size, bps) in rows {
        let point = (size as f64, bps / 8.0);
        match out.iter_mut().find(|c| c.stack == stack) {
            Some(c) => c.points.push(point),
            None => out.push(Curve {
                stack,
                points: vec![point],
                fit: None,
            }),
        }
    }
    for c in &mut out {
        c.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.fit = fit::two_part(&c.points);
    }
    out
}

/// The fits as their document: per stack, each part's per-message (µs) and per-byte
/// (ns) cost, the peak and the half-power point.
pub(crate) fn fits(curves: &[Curve]) -> Vec<results::Fit> {
    curves
        .iter()
        .filter_map(|c| {
            let f = c.fit.as_ref()?;
            Some(results::Fit {
                half_power_bytes: f.half_power.unwrap_or(f64::NAN),
                parts: f
                    .parts
                    .iter()
                    .map(|p| results::FitPart {
                        asymptote_bps: if p.b > 0.0 { 8.0 / p.b } else { f64::INFINITY },
                        from_size: p.from,
                        per_byte_ns: p.b * 1e9,
                        per_message_us: p.a * 1e6,
                        to_size: p.to,
                    })
                    .collect(),
                peak_bps: f.peak * 8.0,
                rms_rel_err: f.rms_rel_err,
                stack: c.stack.clone(),
            })
        })
        .collect()
}

/// The fits as a table under the throughput table (nothing without a fit).
pub(crate) fn table(fits: &[results::Fit]) -> String {
    if fits.is_empty() {
        return String::new();
    }
    let mut t = table::new(
        [
            "stack",
            "part (sizes)",
            "a µs",
            "b ns/B",
            "peak Gb/s",
            "half-power",
            "rms err",
        ],
        1,
    );
    for f in fits {
        for (i, p) in f.parts.iter().enumerate() {
            let range = format!("{}–{}", short(p.from_size), short(p.to_size));
            let mut row = vec![
                String::new(),
                range,
                format!("{:.2}", p.per_message_us),
                format!("{:.4}", p.per_byte_ns),
                String::new(),
                String::new(),
                String::new(),
            ];
            if i == 0 {
                row[0] = f.stack.clone();
                row[4] = format!("{:.3}", f.peak_bps / 1e9);
                row[5] = if f.half_power_bytes.is_finite() {
                    short(f.half_power_bytes)
                } else {
                    "-".into()
                };
                row[6] = format!("{:.1}%", f.rms_rel_err * 100.0);
            }
            t.add_row(row);
        }
    }
    format!(
        "two-part least-squares fit (seed 001 §8), time per message = a + b·size in each part:\n\
         {}half-power = message size reaching half the peak fitted throughput (seed 001: ~2200 B; - when the fit has no per-message cost)\n",
        table::render(&t)
    )
}

/// A size in bytes, briefly: `64`, `4K`, `1M`, `2.2K`.
fn short(s: f64) -> String {
    if s >= 1048576.0 {
        format!("{:.3}M", s / 1048576.0)
    } else if s >= 1024.0 {
        format!("{:.3}K", s / 1024.0)
    } else {
        format!("{s:.0}")
    }
    .replace(".000", "")
}

/// Throughput against message size, measured (dots) and fitted (thin lines), log x.
pub(crate) fn figure(path: &Path, title: &str, curves: &[Curve]) -> anyhow::Result<()> {
    let mut lines = Vec::new();
    for (i, c) in curves.iter().enumerate() {
        lines.push(Line {
            label: c.stack.clone(),
            points: c.points.iter().map(|&(s, r)| (s, r * 8.0 / 1e9)).collect(),
            colour: i,
            mark: Mark::Measured,
        });
        if let (Some(f), Some(lo), Some(hi)) = (&c.fit, c.points.first(), c.points.last()) {
            let n = 120;
            let pts = (0..=n)
                .map(|k| {
                    let s = lo.0 * (hi.0 / lo.0).powf(f64::from(k) / f64::from(n));
                    (s, f.rate(s) * 8.0 / 1e9)
                })
                .collect();
            lines.push(Line {
                label: format!("{} fit", c.stack),
                points: pts,
                colour: i,
                mark: Mark::Fit,
            });
        }
    }
    plot::both(path, |p| {
        plot::xy(
            p,
            title,
            Axis {
                label: "message size (bytes)",
                log: true,
                from_zero: false,
            },
            Axis {
                label: "throughput (Gbit/s)",
                log: false,
                from_zero: true,
            },
            plot::Legend::UpperLeft,
            &lines,
        )
    })
}
