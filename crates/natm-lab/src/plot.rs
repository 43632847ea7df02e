//! Figures with plotters, as SVG or PNG by the file's extension: time series of per-VC
//! rates and the bottleneck queue ([`stacked`]), and x–y charts with optional
//! logarithmic axes ([`xy`]) for `natm-lab perf`.
//!
//! PNG text is drawn with ab_glyph from the DejaVu Sans font the `dejavu` crate embeds,
//! so no system font or fontconfig is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One line of a panel.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A panel: a y-axis label and its lines.
pub(crate) struct Panel {
    pub(crate) y_label: String,
    pub(crate) series: Vec<Series>,
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// Register the embedded font once (plotters' ab_glyph text needs it for SVG layout
/// too).
fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            let _ = plotters::style::register_font("sans-serif", style, dejavu::sans::regular());
        }
    });
}

fn is_png(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"))
}

/// The PNG beside an SVG path: same name, extension `.png`.
pub(crate) fn png_beside(svg: &Path) -> PathBuf {
    svg.with_extension("png")
}

/// Draw a figure twice, into `svg` and into the PNG beside it.
pub(crate) fn both(svg: &Path, draw: impl Fn(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    draw(svg)?;
    if !is_png(svg) {
        draw(&png_beside(svg))?;
    }
    Ok(())
}

/// Draw panels stacked vertically, sharing the x axis (`x_label`), into an SVG or PNG
/// file (by its extension).
pub(crate) fn stacked(
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let height = 60 + 300 * panels.len() as u32;
    fonts();
    if is_png(path) {
        stacked_on(
            BitMapBackend::new(path, (900, height)).into_drawing_area(),
            path,
            title,
            x_label,
            panels,
        )
    } else {
        stacked_on(
            SVGBackend::new(path, (900, height)).into_drawing_area(),
            path,
            title,
            x_label,
            panels,
        )
    }
}

fn stacked_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len(), 1));
    let x_max = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    for (area, panel) in areas.iter().zip(panels) {
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|q| q.1))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(panel.y_label.as_str())
            .draw()
            .map_err(|e| err(&e))?;
        for (i, s) in panel.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(s.label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// How a line of an [`xy`] chart is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Measured points: a line through them with a dot on each.
    Measured,
    /// A fitted or reference curve: a thin line, no dots, no legend entry.
    Fit,
    /// A computed curve with a legend entry: a line, no dots.
    Curve,
    /// A reference level (e.g. a requested rate): a thin line, no legend entry, kept
    /// inside the plotted range.
    Reference,
}

/// Where the legend goes.
pub(crate) use plotters::chart::SeriesLabelPosition as Legend;

/// One line of an [`xy`] chart.
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
    /// Index into the palette; a fit takes its measurement's colour.
    pub(crate) colour: usize,
    pub(crate) mark: Mark,
}

/// How an axis of an [`xy`] chart is scaled and labelled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axis<'a> {
    pub(crate) label: &'a str,
    /// Logarithmic (base 10) instead of linear; values must be positive.
    pub(crate) log: bool,
    /// Start the axis at zero (linear axes only).
    pub(crate) from_zero: bool,
}

/// An x–y chart of lines into an SVG or PNG file (by its extension).
pub(crate) fn xy(
    path: &Path,
    title: &str,
    x: Axis<'_>,
    y: Axis<'_>,
    legend: Legend,
    lines: &[Line],
) -> anyhow::Result<()> {
    let size = (800, 500);
    fonts();
    if is_png(path) {
        xy_on(
            BitMapBackend::new(path, size).into_drawing_area(),
            path,
            title,
            (x, y),
            legend,
            lines,
        )
    } else {
        xy_on(
            SVGBackend::new(path, size).into_drawing_area(),
            path,
            title,
            (x, y),
            legend,
            lines,
        )
    }
}

/// The range of `values` on an axis (in log10 for a log axis), with a margin.
fn span(values: impl Iterator<Item = f64>, axis: Axis<'_>) -> (f64, f64) {
    let t = |v: f64| if axis.log { v.log10() } else { v };
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (!axis.log || *v > 0.0))
        .map(t)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let (lo, hi) = if hi - lo < 1e-9 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    };
    let pad = (hi - lo) * 0.05;
    if axis.log {
        (lo - pad, hi + pad)
    } else if axis.from_zero && lo >= 0.0 {
        (0.0, hi + pad)
    } else {
        (lo - pad, hi + pad)
    }
}

/// A tick label: the value itself, back from log10 on a log axis, where only whole
/// powers of ten are labelled if the axis `span`s two decades or more.
fn tick(v: f64, log: bool, span: f64) -> String {
    if log && span >= 2.0 && (v - v.round()).abs() > 1e-6 {
        return String::new();
    }
    let v = if log { 10f64.powf(v) } else { v };
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 0.01 {
        format!("{v:.0e}")
    } else if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn xy_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    path: &Path,
    title: &str,
    (x, y): (Axis<'_>, Axis<'_>),
    legend: Legend,
    lines: &[Line],
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", path.display());
    let tx = |v: f64| if x.log { v.log10() } else { v };
    let ty = |v: f64| if y.log { v.log10() } else { v };
    let ok = |&(a, b): &(f64, f64)| {
        a.is_finite() && b.is_finite() && (!x.log || a > 0.0) && (!y.log || b > 0.0)
    };
    let (x0, x1) = span(lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)), x);
    let (y0, y1) = span(
        lines
            .iter()
            .filter(|l| l.mark != Mark::Fit)
            .flat_map(|l| l.points.iter().map(|p| p.1)),
        y,
    );
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let (xl, yl) = (x.log, y.log);
    chart
        .configure_mesh()
        .x_desc(x.label)
        .y_desc(y.label)
        // No minor grid: it adds little to read and much to the PNG's size.
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| tick(*v, xl, x1 - x0))
        .y_label_formatter(&|v| tick(*v, yl, y1 - y0))
        .draw()
        .map_err(|e| err(&e))?;
    for l in lines {
        let colour = COLOURS[l.colour % COLOURS.len()];
        let pts: Vec<(f64, f64)> = l
            .points
            .iter()
            .filter(|p| ok(p))
            .map(|&(a, b)| (tx(a), ty(b)))
            // Keep a fit inside the plotted range.
            .filter(|&(_, b)| l.mark != Mark::Fit || (b >= y0 && b <= y1))
            .collect();
        match l.mark {
            Mark::Measured => {
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(l.label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                    .map_err(|e| err(&e))?;
            }
            Mark::Curve => {
                chart
                    .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(l.label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                    });
            }
            Mark::Fit | Mark::Reference => {
                chart
                    .draw_series(LineSeries::new(pts, colour.mix(0.6).stroke_width(1)))
                    .map_err(|e| err(&e))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Horizontal stacked bars, one per row (`rows[i].0` its label, `rows[i].1` its
/// segments in the order of `segments`), drawn into an SVG or PNG file by its
/// extension: where the time of each row goes.
pub(crate) fn stacked_bars(
    path: &Path,
    title: &str,
    x_label: &str,
    segments: &[&str],
    rows: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    fonts();
    let height = 160 + 60 * rows.len() as u32 + 22 * segments.len() as u32;
    if is_png(path) {
        let area = BitMapBackend::new(path, (1000, height)).into_drawing_area();
        bars_on(area, path, title, x_label, segments, rows)
    } else {
        let area = SVGBackend::new(path, (1000, height)).into_drawing_area();
        bars_on(area, path, title, x_label, segments, rows)
    }
}

/// More colours than [`COLOURS`]: one per segment of a round trip.
fn segment_colour(i: usize) -> RGBColor {
    const EXTRA: [RGBColor; 6] = [
        RGBColor(188, 189, 34),
        RGBColor(227, 119, 194),
        RGBColor(174, 199, 232),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
        RGBColor(197, 176, 213),
    ];
    if i < COLOURS.len() {
        COLOURS[i]
    } else {
        EXTRA[(i - COLOURS.len()) % EXTRA.len()]
    }
}

fn bars_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    path: &Path,
    title: &str,
    x_label: &str,
    segments: &[&str],
    rows: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let x_max = rows
        .iter()
        .map(|r| r.1.iter().sum::<f64>())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.6; // room on the right for the legend
    let n = rows.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..x_max, 0.0..n as f64)
        .map_err(|e| err(&e))?;
    let label_of = |y: &f64| {
        let i = (n as f64 - y - 0.5).round();
        rows.get(i as usize)
            .filter(|_| i >= 0.0 && (y.fract() - 0.5).abs() < 1e-6)
            .map_or(String::new(), |r| r.0.clone())
    };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_labels(2 * n + 1)
        .y_label_formatter(&label_of)
        .disable_y_mesh()
        .draw()
        .map_err(|e| err(&e))?;
    for (k, name) in segments.iter().enumerate() {
        let colour = segment_colour(k);
        let bars: Vec<Rectangle<(f64, f64)>> = rows
            .iter()
            .enumerate()
            .map(|(i, (_, v))| {
                let x0: f64 = v[..k].iter().sum();
                let y = (n - 1 - i) as f64;
                Rectangle::new([(x0, y + 0.2), (x0 + v[k], y + 0.8)], colour.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_and_png_are_written_without_system_fonts() {
        let dir = std::env::temp_dir().join(format!("natm-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("f.svg");
        let lines = [Line {
            label: "a".into(),
            points: vec![(64.0, 1e6), (1024.0, 1e7), (65536.0, 1e9)],
            colour: 0,
            mark: Mark::Measured,
        }];
        let ax = |label, log| Axis {
            label,
            log,
            from_zero: true,
        };
        both(&svg, |p| {
            xy(
                p,
                "t",
                ax("size", true),
                ax("bit/s", false),
                Legend::UpperLeft,
                &lines,
            )
        })
        .unwrap();
        let png = std::fs::read(png_beside(&svg)).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("size"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ticks_read_as_values() {
        assert_eq!(tick(3.0, true, 1.0), "1000");
        assert_eq!(tick(6.0, true, 3.0), "1M");
        assert_eq!(tick(-4.0, true, 3.0), "1e-4");
        assert_eq!(tick(2.5, true, 3.0), "");
        assert_eq!(tick(2.5, true, 1.0), "316");
        assert_eq!(tick(0.5, false, 1.0), "0.5");
        assert_eq!(tick(25_000.0, false, 1.0), "25k");
    }
}
