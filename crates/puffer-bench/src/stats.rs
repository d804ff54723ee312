//! Small helpers shared by the experiments: timing statistics, rounding, memory, labels.

use std::time::Duration;

/// The `q`-quantile (0..=1) of `samples` in microseconds; 0 for no samples.
pub fn quantile_us(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let rank = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[rank].as_secs_f64() * 1e6
}

/// Peak resident set size of this process, in bytes (Linux; 0 elsewhere).
pub fn peak_rss_bytes() -> u64 {
    status_kb_field_bytes("/proc/self/status", "VmHWM:")
}

/// A `kB` field (such as `VmRSS:`) of a `/proc/<pid>/status` file, in bytes; 0 when the
/// file or the field is missing (not Linux, or the process is gone).
pub fn status_kb_field_bytes(status_path: &str, field: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string(status_path) else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Rounds to `digits` decimals for readable JSON.
pub fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// A short name for a run's inputs: the file's stem (`.gz` and the format's extension
/// dropped), or `folder (N files)` for several.
pub fn dataset_label(paths: &[std::path::PathBuf]) -> String {
    let stem = |path: &std::path::Path| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let name = name.strip_suffix(".gz").unwrap_or(name);
        [".csv", ".jsonl", ".json"]
            .iter()
            .find_map(|ext| name.strip_suffix(ext))
            .unwrap_or(name)
            .to_string()
    };
    match paths {
        [only] => stem(only),
        _ => {
            let parent = paths[0].parent().and_then(|p| p.file_name());
            let folder = parent.map_or("inputs".into(), |p| p.to_string_lossy());
            format!("{folder} ({} files)", paths.len())
        }
    }
}

/// CPU time a process has used, user and system, from `/proc/<process>/stat`
/// (`process` a pid, or `self`); zero where there is none: then the figure reads 0.
pub fn cpu_time(process: &str) -> std::time::Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{process}/stat")) else {
        return std::time::Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces) ends with ')': user and
    // system time are the 12th and 13th, in clock ticks (100 a second on Linux).
    let Some(after_name) = stat.rsplit(')').next() else {
        return std::time::Duration::ZERO;
    };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    std::time::Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
