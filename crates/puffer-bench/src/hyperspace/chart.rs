//! The experiment's two charts, drawn from the rows of its CSV files:
//! - `model_accuracy.png` (the paper's Table 2 as points): for each workload, the
//!   measured throughput of each sampled configuration against the model's prediction,
//!   the diagonal marking a perfect prediction;
//! - `oracles.png` (the paper's Figures 8 and 9): for each workload, the throughput
//!   measured with the automatic choice and with each heuristic's.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use plotters::prelude::*;

const COLORS: [RGBColor; 6] = [
    BLUE,
    RED,
    GREEN,
    MAGENTA,
    RGBColor(230, 140, 0),
    RGBColor(90, 90, 90),
];

/// One sampled configuration of `model_accuracy.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct AccuracyPoint {
    pub workload: String,
    pub predicted_ops_per_s: f64,
    pub measured_ops_per_s: f64,
    /// Among the model's best (the rest were sampled at random).
    pub model_best: bool,
}

/// One measured oracle of `oracles.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct OracleBar {
    pub workload: String,
    pub oracle: String,
    pub measured_ops_per_s: f64,
}

/// A CSV row `workload,[before,]"label",after...`: the workload, the fields between it
/// and the quoted label, and those after it (labels hold commas, never quotes).
fn split_row(row: &str) -> anyhow::Result<(&str, Vec<&str>, Vec<&str>)> {
    let (open, close) = match (row.find('"'), row.rfind('"')) {
        (Some(open), Some(close)) if open < close => (open, close),
        _ => bail!("no quoted configuration in {row:?}"),
    };
    let mut before = row[..open].trim_end_matches(',').split(',');
    let workload = before.next().context("no workload")?;
    let after = row[close + 1..]
        .trim_start_matches(',')
        .split(',')
        .collect();
    Ok((workload, before.collect(), after))
}

fn number(field: Option<&&str>, row: &str) -> anyhow::Result<f64> {
    field
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("a number is missing in {row:?}"))
}

/// A row of `model_accuracy.csv` (`workload,"configuration",predicted,measured,kind`).
pub fn accuracy_point(row: &str) -> anyhow::Result<AccuracyPoint> {
    let (workload, _, after) = split_row(row)?;
    Ok(AccuracyPoint {
        workload: workload.to_string(),
        predicted_ops_per_s: number(after.first(), row)?,
        measured_ops_per_s: number(after.get(1), row)?,
        model_best: after.get(2) == Some(&"model-best"),
    })
}

/// A row of `oracles.csv` (`workload,oracle,"configuration",measured`).
pub fn oracle_bar(row: &str) -> anyhow::Result<OracleBar> {
    let (workload, before, after) = split_row(row)?;
    Ok(OracleBar {
        workload: workload.to_string(),
        oracle: before.first().context("no oracle")?.to_string(),
        measured_ops_per_s: number(after.first(), row)?,
    })
}

/// The workloads of `items`, in their first order.
fn workloads<'a>(items: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.iter().any(|w| w == item) {
            out.push(item.to_string());
        }
    }
    out
}

/// Draws one panel per workload (three to a row): measured against predicted.
pub fn draw_accuracy(path: &Path, points: &[AccuracyPoint]) -> anyhow::Result<()> {
    crate::plot::register_font()?;
    let names = workloads(points.iter().map(|p| p.workload.as_str()));
    let rows = names.len().div_ceil(3).max(1);
    let root = BitMapBackend::new(path, (1200, 360 * rows as u32 + 30)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (title, body) = root.split_vertically(30);
    title
        .titled(
            "model accuracy: measured (x) against predicted (y) ops/s; the model's 5 best red, 5 random blue; the diagonal is exact",
            ("sans-serif", 18),
        )
        .map_err(|e| anyhow!("{e}"))?;
    let panels = body.split_evenly((rows, 3));
    for (name, area) in names.iter().zip(&panels) {
        let mine: Vec<&AccuracyPoint> = points.iter().filter(|p| &p.workload == name).collect();
        let top = mine
            .iter()
            .map(|p| p.predicted_ops_per_s.max(p.measured_ops_per_s))
            .fold(1.0, f64::max)
            * 1.1;
        let mut chart = crate::plot::panel(area, name, top, top, None)?;
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, 0.0), (top, top)],
                BLACK.mix(0.4),
            ))
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .draw_series(mine.iter().map(|p| {
                // The model's best in red, the random others in blue.
                let color = if p.model_best { RED } else { BLUE };
                Circle::new(
                    (p.measured_ops_per_s, p.predicted_ops_per_s),
                    4,
                    color.mix(0.7).filled(),
                )
            }))
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

/// Draws, per workload, a group of bars: each oracle's measured throughput.
pub fn draw_oracles(path: &Path, bars: &[OracleBar]) -> anyhow::Result<()> {
    crate::plot::register_font()?;
    let names = workloads(bars.iter().map(|b| b.workload.as_str()));
    let oracles = workloads(bars.iter().map(|b| b.oracle.as_str()));
    let root = BitMapBackend::new(path, (1400, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let top = bars
        .iter()
        .map(|b| b.measured_ops_per_s)
        .fold(1.0, f64::max)
        * 1.35;
    let groups = names.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "measured ops/s per workload: the automatic choice and each heuristic",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..groups, 0.0..top)
        .map_err(|e| anyhow!("{e}"))?;
    let labels = names.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len().max(1) * 2 + 1)
        .x_label_formatter(&|x| {
            // A group's label at its middle.
            let group = x.floor() as usize;
            match (x - x.floor() - 0.5).abs() < 0.01 {
                true => labels.get(group).cloned().unwrap_or_default(),
                false => String::new(),
            }
        })
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let width = 0.8 / oracles.len().max(1) as f64;
    for (o, oracle) in oracles.iter().enumerate() {
        let color = COLORS[o % COLORS.len()];
        let rectangles = names.iter().enumerate().filter_map(|(g, name)| {
            let bar = bars
                .iter()
                .find(|b| &b.workload == name && &b.oracle == oracle)?;
            let left = g as f64 + 0.1 + o as f64 * width;
            Some(Rectangle::new(
                [(left, 0.0), (left + width * 0.9, bar.measured_ops_per_s)],
                color.filled(),
            ))
        });
        chart
            .draw_series(rectangles)
            .map_err(|e| anyhow!("{e}"))?
            .label(oracle.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    crate::plot::draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_read_back_as_the_experiment_writes_them() {
        let (name, shown, p, t, kind) = (
            "A-90/10",
            "{city,price} x16, {stars}",
            812.5,
            790.25,
            "random",
        );
        let row = format!("{name},\"{shown}\",{p:.1},{t:.1},{kind}");
        assert_eq!(
            accuracy_point(&row).unwrap(),
            AccuracyPoint {
                workload: name.into(),
                predicted_ops_per_s: 812.5,
                measured_ops_per_s: 790.2,
                model_best: false,
            }
        );
        let row = format!("{name},dominant,\"{shown}\",{t:.1}");
        assert_eq!(
            oracle_bar(&row).unwrap(),
            OracleBar {
                workload: name.into(),
                oracle: "dominant".into(),
                measured_ops_per_s: 790.2,
            }
        );
        let best = format!("{name},\"{shown}\",{p:.1},{t:.1},model-best");
        assert!(accuracy_point(&best).unwrap().model_best);
        assert!(accuracy_point("A,no label,1,2").is_err());
        assert!(oracle_bar("A,automatic,\"x\",").is_err());
    }

    /// PNG files of the sizes drawn (their header says so), or a loud skip where no
    /// font is installed (CI installs one).
    #[test]
    fn charts_are_drawn_as_png_files() {
        if let Err(error) = crate::plot::register_font() {
            eprintln!("SKIPPED: charts cannot be drawn here: {error}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let workloads = ["A-90/10", "A-50/50", "B-90/10", "C-10/90"];
        let points: Vec<AccuracyPoint> = workloads
            .iter()
            .flat_map(|w| {
                (0..10).map(move |i| AccuracyPoint {
                    workload: w.to_string(),
                    predicted_ops_per_s: 100.0 * f64::from(i),
                    measured_ops_per_s: 95.0 * f64::from(i) + 7.0,
                    model_best: i < 5,
                })
            })
            .collect();
        let bars: Vec<OracleBar> = workloads
            .iter()
            .flat_map(|w| {
                ["automatic", "no-subspace", "dominant"]
                    .iter()
                    .enumerate()
                    .map(move |(i, o)| OracleBar {
                        workload: w.to_string(),
                        oracle: o.to_string(),
                        measured_ops_per_s: 500.0 + 100.0 * i as f64,
                    })
            })
            .collect();
        let accuracy = dir.path().join("model_accuracy.png");
        let oracles = dir.path().join("oracles.png");
        draw_accuracy(&accuracy, &points).unwrap();
        draw_oracles(&oracles, &bars).unwrap();
        // Two rows of three panels; the bars at their fixed size.
        for (path, width, height) in [(&accuracy, 1200u32, 2 * 360 + 30), (&oracles, 1400, 520)] {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
            let size = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
            assert_eq!((size(16), size(20)), (width, height), "{}", path.display());
            assert!(
                bytes.len() > 10_000,
                "{}: {} bytes",
                path.display(),
                bytes.len()
            );
        }
    }
}
