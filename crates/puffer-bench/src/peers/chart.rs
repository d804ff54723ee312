//! The PNG chart: bytes on disk relative to the input per engine (left), and p50 / p99
//! latency per query class and engine on a log scale (right).

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

use super::measure::EngineReport;

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 620;
/// One color per engine, in the order of [`super::ENGINES`] (then any other).
const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(127, 127, 127),
    RGBColor(148, 103, 189),
];

fn color_of(engine: &str) -> RGBColor {
    let position = super::ENGINES.iter().position(|e| *e == engine);
    COLORS[position.unwrap_or(COLORS.len() - 1)]
}

/// Draws the chart of `engines` into `path`.
pub(super) fn draw(
    path: &Path,
    title: &str,
    engines: &[EngineReport],
    input_bytes: u64,
) -> anyhow::Result<()> {
    crate::plot::register_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| anyhow!("{e}"))?;
    let (left, right) = root.split_horizontally(380);
    draw_sizes(&left, engines, input_bytes)?;
    draw_latencies(&right, engines)?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn draw_sizes(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    engines: &[EngineReport],
    input_bytes: u64,
) -> anyhow::Result<()> {
    let ratios: Vec<f64> = engines
        .iter()
        .map(|e| e.sizes.disk_bytes as f64 / input_bytes.max(1) as f64)
        .collect();
    let top = ratios.iter().copied().fold(0.0, f64::max).max(0.1) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption("bytes on disk / input", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..engines.len() as f64, 0f64..top)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, (engine, ratio)) in engines.iter().zip(&ratios).enumerate() {
        let color = color_of(engine.name);
        let x = i as f64;
        chart
            .draw_series([Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *ratio)],
                color.filled(),
            )])
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .draw_series([Text::new(
                format!("{ratio:.2}x"),
                (x + 0.3, ratio + top * 0.02),
                ("sans-serif", 14),
            )])
            .map_err(|e| anyhow!("{e}"))?;
        let at = below_axis(area, chart.backend_coord(&(x + 0.5, 0.0)), engine.name);
        area.draw(&Text::new(engine.name, at, ("sans-serif", 14)))
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// Where, in `area`'s own coordinates, a label centred below the axis point `pixel`
/// (in the backend's coordinates) starts.
fn below_axis(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    pixel: (i32, i32),
    label: &str,
) -> (i32, i32) {
    let (base_x, base_y) = area.get_base_pixel();
    let half_width = label.len() as i32 * 7 / 2;
    (pixel.0 - base_x - half_width, pixel.1 - base_y + 8)
}

fn draw_latencies(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    engines: &[EngineReport],
) -> anyhow::Result<()> {
    let mut classes: Vec<&'static str> = Vec::new();
    for engine in engines {
        for latency in &engine.latencies {
            if !classes.contains(&latency.class) {
                classes.push(latency.class);
            }
        }
    }
    let all_us = engines
        .iter()
        .flat_map(|e| &e.latencies)
        .filter(|l| l.queries > 0);
    let (low, high) = all_us.fold((f64::MAX, 0f64), |(lo, hi), l| {
        (lo.min(l.p50_us.max(0.1)), hi.max(l.p99_us))
    });
    let (low, high) = if high <= 0.0 {
        (1.0, 10.0)
    } else {
        (low / 2.0, high * 3.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            "latency per query class, us (solid: p50, light: p99)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..classes.len().max(1) as f64, (low..high).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let slot = 0.8 / engines.len().max(1) as f64;
    for (e, engine) in engines.iter().enumerate() {
        let color = color_of(engine.name);
        for latency in engine.latencies.iter().filter(|l| l.queries > 0) {
            let Some(c) = classes.iter().position(|c| *c == latency.class) else {
                continue;
            };
            let x = c as f64 + 0.1 + e as f64 * slot;
            let bars = [
                Rectangle::new(
                    [(x, low), (x + slot * 0.9, latency.p99_us.max(low))],
                    color.mix(0.35).filled(),
                ),
                Rectangle::new(
                    [(x, low), (x + slot * 0.9, latency.p50_us.max(low))],
                    color.filled(),
                ),
            ];
            chart.draw_series(bars).map_err(|e| anyhow!("{e}"))?;
        }
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(|e| anyhow!("{e}"))?
            .label(engine.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    for (c, class) in classes.iter().enumerate() {
        let at = below_axis(area, chart.backend_coord(&(c as f64 + 0.5, low)), class);
        area.draw(&Text::new(*class, at, ("sans-serif", 14)))
            .map_err(|e| anyhow!("{e}"))?;
    }
    crate::plot::draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}
