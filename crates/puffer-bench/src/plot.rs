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
