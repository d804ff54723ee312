//! The three panels of the paper's Figures 6 to 10: storage footprint (as a ratio of the
//! base), request and response rate, and averaged queue length, over time.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::driver::SeriesRow;

const COLORS: [RGBColor; 4] = [BLUE, RED, GREEN, MAGENTA];

/// Draws the panels for `series` (one line per replica) into `path`.
pub fn draw(
    path: &Path,
    title: &str,
    series: &[SeriesRow],
    base_footprint_bytes: u64,
    replicas: usize,
) -> anyhow::Result<()> {
    crate::plot::register_font()?;
    let root = BitMapBackend::new(path, (1500, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (title_area, body) = root.split_vertically(30);
    title_area
        .titled(title, ("sans-serif", 20))
        .map_err(|e| anyhow!("{e}"))?;
    let panels = body.split_evenly((1, 3));
    let t_max = series.iter().map(|s| s.row.t_seconds).fold(1.0, f64::max);
    let per_replica = |r: usize| series.iter().filter(move |s| s.replica == r);

    let ratio = |s: &SeriesRow| s.row.footprint_bytes as f64 / base_footprint_bytes.max(1) as f64;
    let ratio_max = series.iter().map(ratio).fold(1.0, f64::max) * 1.1;
    panel(
        &panels[0],
        "storage footprint / base",
        t_max,
        ratio_max,
        |chart| {
            for r in 0..replicas {
                let line: Vec<(f64, f64)> = per_replica(r)
                    .map(|s| (s.row.t_seconds, ratio(s)))
                    .collect();
                replica_line(chart, r, line)?;
            }
            Ok(())
        },
    )?;

    let rate_max = (0..replicas)
        .flat_map(|r| {
            let request =
                smoothed(per_replica(r).map(|s| (s.row.t_seconds, s.row.request_per_second)));
            let response =
                smoothed(per_replica(r).map(|s| (s.row.t_seconds, s.row.response_per_second)));
            request.into_iter().chain(response).map(|(_, v)| v)
        })
        .fold(1.0, f64::max)
        * 1.15;
    panel(
        &panels[1],
        "ops/s, 1 s averages: request (dashed), response (solid)",
        t_max,
        rate_max,
        |chart| {
            for r in 0..replicas {
                let request =
                    smoothed(per_replica(r).map(|s| (s.row.t_seconds, s.row.request_per_second)));
                let response =
                    smoothed(per_replica(r).map(|s| (s.row.t_seconds, s.row.response_per_second)));
                chart
                    .draw_series(DashedLineSeries::new(
                        request,
                        6,
                        4,
                        COLORS[r % 4].mix(0.6).stroke_width(1),
                    ))
                    .map_err(|e| anyhow!("{e}"))?;
                replica_line(chart, r, response)?;
            }
            Ok(())
        },
    )?;

    let queue_max = series
        .iter()
        .map(|s| (s.row.queue_length as f64).max(s.row.averaged_queue))
        .fold(1.0, f64::max)
        * 1.1;
    panel(
        &panels[2],
        "queue length: averaged (solid), sampled (dots)",
        t_max,
        queue_max,
        |chart| {
            for r in 0..replicas {
                let averaged: Vec<(f64, f64)> = per_replica(r)
                    .map(|s| (s.row.t_seconds, s.row.averaged_queue))
                    .collect();
                let sampled = per_replica(r).map(|s| {
                    Circle::new(
                        (s.row.t_seconds, s.row.queue_length as f64),
                        1,
                        COLORS[r % 4].mix(0.4).filled(),
                    )
                });
                chart.draw_series(sampled).map_err(|e| anyhow!("{e}"))?;
                replica_line(chart, r, averaged)?;
            }
            Ok(())
        },
    )?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

type Chart<'a, 'b> = crate::plot::LinearChart<'a, 'b>;

fn panel<'b>(
    area: &DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    caption: &str,
    x_max: f64,
    y_max: f64,
    draw: impl FnOnce(&mut Chart<'_, 'b>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut chart = crate::plot::panel(area, caption, x_max, y_max, Some("time (s)"))?;
    draw(&mut chart)?;
    crate::plot::draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Averages of the last second at each point (per-tick rates over 100 ms are noisy).
fn smoothed(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let points: Vec<(f64, f64)> = points.collect();
    let mut out = Vec::with_capacity(points.len());
    let mut start = 0;
    let mut sum = 0.0;
    for (end, &(t, v)) in points.iter().enumerate() {
        sum += v;
        while points[start].0 < t - 1.0 && start < end {
            sum -= points[start].1;
            start += 1;
        }
        out.push((t, sum / (end - start + 1) as f64));
    }
    out
}

/// Draws replica `r`'s bold line, labelled for the legend.
fn replica_line(
    chart: &mut Chart<'_, '_>,
    r: usize,
    points: Vec<(f64, f64)>,
) -> anyhow::Result<()> {
    let color = COLORS[r % COLORS.len()];
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))
        .map_err(|e| anyhow!("{e}"))?
        .label(format!("replica {r}"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color));
    Ok(())
}
