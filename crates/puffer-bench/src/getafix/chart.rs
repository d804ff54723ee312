//! The Getafix experiment's PNG charts: storage and latency against load (Figures 10,
//! 13 and 16), the storage-latency trade-off (Figure 12) and replicas over time.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One run as the charts see it.
pub struct Point {
    pub experiment: &'static str,
    pub nodes: usize,
    pub load: f64,
    pub policy: String,
    pub replicas_median: f64,
    pub replicas_p99: f64,
    pub latency_mean_ms: f64,
    pub latency_p99_ms: f64,
    /// (window end seconds, replicas, mean latency s, p99 latency s).
    pub series: Vec<(f64, usize, f64, f64)>,
}

type Line = (String, Vec<(f64, f64)>);

/// A panel of the by-load chart: its label and the figure it draws per run.
type Panel = (&'static str, fn(&Point) -> f64);

pub fn draw_all(dir: &Path, points: &[Point]) -> anyhow::Result<()> {
    crate::plot::register_font()?;
    let mut node_counts: Vec<usize> = points.iter().map(|p| p.nodes).collect();
    node_counts.sort_unstable();
    node_counts.dedup();

    // Against load: storage and latency per policy and node count.
    let by_load = |value: fn(&Point) -> f64| -> Vec<Line> {
        let mut lines = Vec::new();
        for &nodes in &node_counts {
            for experiment in ["scale", "same-storage"] {
                let mut policies: Vec<&str> = points
                    .iter()
                    .filter(|p| p.experiment == experiment && p.nodes == nodes)
                    .map(|p| {
                        if experiment == "same-storage" {
                            "uniform (same storage)"
                        } else {
                            p.policy.as_str()
                        }
                    })
                    .collect();
                policies.dedup();
                policies.sort_unstable();
                policies.dedup();
                for policy in policies {
                    let line: Vec<(f64, f64)> = points
                        .iter()
                        .filter(|p| {
                            p.experiment == experiment
                                && p.nodes == nodes
                                && (experiment == "same-storage" || p.policy == policy)
                        })
                        .map(|p| (p.load, value(p)))
                        .collect();
                    lines.push((format!("{policy}, {nodes} nodes"), line));
                }
            }
        }
        lines
    };
    let panels: [Panel; 4] = [
        ("replicas (median over time)", |p| p.replicas_median),
        ("replicas (p99 over time)", |p| p.replicas_p99),
        // Overloaded runs reach seconds: a log scale keeps the others readable.
        ("log10 of mean latency ms", |p| {
            p.latency_mean_ms.max(1e-3).log10()
        }),
        ("log10 of p99 latency ms", |p| {
            p.latency_p99_ms.max(1e-3).log10()
        }),
    ];
    let panel_lines: Vec<(&str, Vec<Line>)> = panels
        .iter()
        .map(|(label, f)| (*label, by_load(*f)))
        .collect();
    draw_panels(
        &dir.join("storage-latency-by-load.png"),
        "Getafix, Scarlett, random routing, uniform at the same storage (load = share of capacity)",
        "load",
        &panel_lines,
    )?;

    // Trade-off: uniform factors as a line, Getafix and Scarlett as points.
    let tradeoff: Vec<&Point> = points
        .iter()
        .filter(|p| p.experiment == "tradeoff")
        .collect();
    if let Some(first) = tradeoff.first() {
        let (nodes, load) = (first.nodes, first.load);
        let mut lines: Vec<Line> = vec![(
            "uniform, factor 1 up".into(),
            tradeoff
                .iter()
                .map(|p| (p.replicas_median, p.latency_mean_ms))
                .collect(),
        )];
        for policy in ["getafix", "scarlett", "getafix-random"] {
            if let Some(p) = points.iter().find(|p| {
                p.experiment == "scale" && p.nodes == nodes && p.load == load && p.policy == policy
            }) {
                lines.push((policy.into(), vec![(p.replicas_median, p.latency_mean_ms)]));
            }
        }
        draw_panels(
            &dir.join("tradeoff.png"),
            &format!("storage against mean latency, {nodes} nodes, load {load}"),
            "replicas (median over time)",
            &[("mean latency ms", lines)],
        )?;
    }

    // Replicas over time at the first node count and the tradeoff's load.
    let over_time: Vec<Line> = points
        .iter()
        .filter(|p| {
            tradeoff
                .first()
                .is_some_and(|t| p.nodes == t.nodes && p.load == t.load)
                && matches!(p.experiment, "scale" | "same-storage" | "joint")
        })
        .map(|p| {
            (
                format!("{} ({})", p.policy, p.experiment),
                p.series.iter().map(|s| (s.0, s.1 as f64)).collect(),
            )
        })
        .collect();
    draw_panels(
        &dir.join("replicas-over-time.png"),
        "replicas held, window by window",
        "seconds (compressed time)",
        &[("replicas", over_time)],
    )?;
    Ok(())
}

/// Side-by-side panels sharing an x axis label, each with its lines.
fn draw_panels(
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[(&str, Vec<Line>)],
) -> anyhow::Result<()> {
    let width = 520 * panels.len() as u32 + 40;
    let root = BitMapBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (title_area, body) = root.split_vertically(30);
    title_area
        .titled(title, ("sans-serif", 18))
        .map_err(|e| anyhow!("{e}"))?;
    let areas = body.split_evenly((1, panels.len()));
    for ((y_label, lines), area) in panels.iter().zip(areas.iter()) {
        let all = lines.iter().flat_map(|l| l.1.iter());
        let (mut x_min, mut x_max) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut y_min, mut y_max) = (0.0f64, 0.0f64);
        for &(x, y) in all {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            if y.is_finite() {
                y_min = y_min.min(y);
                y_max = y_max.max(y);
            }
        }
        if !x_min.is_finite() {
            continue;
        }
        let pad = ((x_max - x_min) * 0.05).max(0.01);
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (x_min - pad)..(x_max + pad),
                (y_min * 1.1)..(y_max * 1.1).max(1e-9),
            )
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(*y_label)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (index, (label, points)) in lines.iter().enumerate() {
            let color = Palette99::pick(index).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| anyhow!("{e}"))?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(|e| anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
