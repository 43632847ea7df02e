//! Figures as SVG (plotters): time series of per-VC rates and the bottleneck queue.

use std::path::Path;

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

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
];

/// Draw panels stacked vertically, sharing the x axis (`x_label`), into an SVG file.
pub(crate) fn stacked(
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> Result<(), String> {
    let height = 60 + 300 * panels.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
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
