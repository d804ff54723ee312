//! Shared setup for the PNG charts the experiments write (plotters, bitmap backend).
//!
//! plotters draws text with ab_glyph, which needs a TrueType font registered at run
//! time. We look for DejaVu Sans (Debian's `fonts-dejavu-core`) and fall back to any
//! `.ttf` under the usual font folders; without one, charts cannot be labelled and
//! `register_font` says so.

use std::sync::OnceLock;

use anyhow::{anyhow, Result};

/// Folders searched for a TrueType font, in order.
const FONT_DIRS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu",
    "/usr/share/fonts/truetype",
    "/usr/share/fonts",
];

/// Registers a sans-serif font with plotters once per process. Charts call this first.
pub fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let path = find_font().ok_or_else(|| {
                format!("no TrueType font found under {FONT_DIRS:?}; install fonts-dejavu-core to get labelled charts")
            })?;
            let bytes = std::fs::read(&path).map_err(|e| format!("reading font {}: {e}", path.display()))?;
            // plotters keeps a &'static reference to the font for the process's lifetime.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
                .map_err(|_| format!("font {} is not a usable TrueType font", path.display()))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn find_font() -> Option<std::path::PathBuf> {
    let preferred = std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    if preferred.is_file() {
        return Some(preferred.to_path_buf());
    }
    FONT_DIRS
        .iter()
        .find_map(|dir| first_ttf(std::path::Path::new(dir), 3))
}

fn first_ttf(dir: &std::path::Path, depth_left: u32) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in &entries {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("ttf"))
        {
            return Some(path.clone());
        }
    }
    if depth_left == 0 {
        return None;
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| first_ttf(p, depth_left - 1))
}

/// A chart on a bitmap with two linear axes.
pub type LinearChart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::BitMapBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// One panel of a chart of several: its caption, axes from 0 to `x_max` and `y_max`
/// (the x axis described by `x_desc`, if given), and a mesh without minor lines.
pub fn panel<'a, 'b>(
    area: &'a plotters::drawing::DrawingArea<
        plotters::backend::BitMapBackend<'b>,
        plotters::coord::Shift,
    >,
    caption: &str,
    x_max: f64,
    y_max: f64,
    x_desc: Option<&str>,
) -> Result<LinearChart<'a, 'b>> {
    use plotters::prelude::*;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| anyhow!("{e}"))?;
    let mut mesh = chart.configure_mesh();
    if let Some(x_desc) = x_desc {
        mesh.x_desc(x_desc);
    }
    mesh.light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(chart)
}

/// Draws the legend of `chart`'s labelled series, boxed, at `position`.
pub fn draw_legend<'a, DB, CT>(
    chart: &mut plotters::chart::ChartContext<'a, DB, CT>,
    position: plotters::chart::SeriesLabelPosition,
) -> Result<()>
where
    DB: plotters::backend::DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    use plotters::prelude::*;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
