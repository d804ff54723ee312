//! `puffer-bench index`: footprint, build speed, count / locate / extract latency,
//! every query checked against a naive scan, and the storage-throughput curve over
//! layer configurations.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use aho_corasick::AhoCorasick;
use anyhow::{ensure, Context};
use puffer_index::{BuildOptions, Construction, TextIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::stats::{peak_rss_bytes, quantile_us, round};

#[derive(clap::Args)]
pub struct IndexArgs {
    /// Text file to index.
    #[arg(long)]
    input: PathBuf,
    /// Densest SA sampling rate.
    #[arg(long, default_value_t = 32)]
    sa_rate: u64,
    /// Densest ISA sampling rate.
    #[arg(long, default_value_t = 32)]
    isa_rate: u64,
    /// Layers, base included.
    #[arg(long, default_value_t = 4)]
    levels: u32,
    /// Psi entries per block.
    #[arg(long, default_value_t = BuildOptions::default().psi_block_len)]
    psi_block: u64,
    /// Count queries per pattern length.
    #[arg(long, default_value_t = 500)]
    count_queries: usize,
    /// Patterns (10 to 1000 occurrences each) for locate.
    #[arg(long, default_value_t = 100)]
    locate_patterns: usize,
    /// Random extracts of 64 bytes (4 KB extracts: a quarter of that).
    #[arg(long, default_value_t = 1000)]
    extracts: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Runs of the locate and 4 KB extract measurements; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Skip the layer curve (quicker runs while tuning; the curve is part of the full report).
    #[arg(long)]
    skip_curve: bool,
}

const COUNT_LENGTHS: [usize; 4] = [4, 8, 16, 32];

/// Occurrences of every pattern, by one overlapping Aho-Corasick scan of the text.
fn naive_occurrences(text: &[u8], patterns: &[Vec<u8>]) -> anyhow::Result<Vec<Vec<u64>>> {
    let automaton = AhoCorasick::new(patterns)?;
    let mut found = vec![Vec::new(); patterns.len()];
    for m in automaton.find_overlapping_iter(text) {
        found[m.pattern().as_usize()].push(m.start() as u64);
    }
    Ok(found)
}

fn sample_pattern(text: &[u8], len: usize, rng: &mut StdRng) -> Vec<u8> {
    let start = rng.gen_range(0..=text.len() - len);
    text[start..start + len].to_vec()
}

struct Locate {
    us_per_occurrence: f64,
    occurrences: u64,
}

fn measure_locate(
    index: &TextIndex,
    patterns: &[Vec<u8>],
    expected: &[Vec<u64>],
    mismatches: &mut u64,
) -> anyhow::Result<Locate> {
    let mut total = Duration::ZERO;
    let mut occurrences = 0u64;
    for (pattern, want) in patterns.iter().zip(expected) {
        let started = Instant::now();
        let got = index.search(pattern, None)?;
        total += started.elapsed();
        occurrences += got.len() as u64;
        if &got != want {
            *mismatches += 1;
        }
    }
    Ok(Locate {
        us_per_occurrence: total.as_secs_f64() * 1e6 / occurrences.max(1) as f64,
        occurrences,
    })
}

pub fn run(args: &IndexArgs) -> anyhow::Result<()> {
    let text =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    ensure!(
        text.len() >= 4096,
        "input must be at least 4096 bytes for meaningful samples"
    );
    let options = BuildOptions {
        sa_rate: args.sa_rate,
        isa_rate: args.isa_rate,
        levels: args.levels,
        psi_block_len: args.psi_block,
        threads: 0,
    };
    let rss_before = peak_rss_bytes();
    let started = Instant::now();
    let index = TextIndex::build_with(&text, &options, &mut |_, _| {})?;
    let build_seconds = started.elapsed().as_secs_f64();
    let peak_rss = peak_rss_bytes();
    let n = text.len() as f64;

    let tmp = std::env::temp_dir().join(format!("puffer-bench-{}.pidx", std::process::id()));
    index.save(&tmp)?;
    let file_bytes = std::fs::metadata(&tmp)?.len();
    let started = Instant::now();
    let index = TextIndex::open(&tmp)?;
    let open_seconds = started.elapsed().as_secs_f64();

    let footprint = index.footprint();
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut mismatches = 0u64;

    // Count, per pattern length.
    let mut count_patterns = Vec::new();
    for &len in &COUNT_LENGTHS {
        for _ in 0..args.count_queries {
            count_patterns.push(sample_pattern(&text, len, &mut rng));
        }
    }
    let mut count_expected: HashMap<Vec<u8>, u64> = HashMap::new();
    {
        let mut unique: Vec<Vec<u8>> = count_patterns.clone();
        unique.sort();
        unique.dedup();
        for (pattern, occ) in unique.iter().zip(naive_occurrences(&text, &unique)?) {
            count_expected.insert(pattern.clone(), occ.len() as u64);
        }
    }
    let mut count_stats = serde_json::Map::new();
    for (k, &len) in COUNT_LENGTHS.iter().enumerate() {
        let mut times = Vec::with_capacity(args.count_queries);
        for pattern in &count_patterns[k * args.count_queries..(k + 1) * args.count_queries] {
            let started = Instant::now();
            let got = index.count(pattern)?;
            times.push(started.elapsed());
            if got != count_expected[pattern] {
                mismatches += 1;
            }
        }
        count_stats.insert(
            format!("count_p50_us_len{len}"),
            json!(round(quantile_us(&mut times, 0.5), 2)),
        );
        count_stats.insert(
            format!("count_p99_us_len{len}"),
            json!(round(quantile_us(&mut times, 0.99), 2)),
        );
    }

    // Locate: patterns with 10..=1000 occurrences.
    let mut locate_patterns = Vec::new();
    let mut attempts = 0;
    while locate_patterns.len() < args.locate_patterns && attempts < args.locate_patterns * 200 {
        attempts += 1;
        let pattern = sample_pattern(&text, rng.gen_range(5..=12), &mut rng);
        let occ = index.count(&pattern)?;
        if (10..=1000).contains(&occ) && !locate_patterns.contains(&pattern) {
            locate_patterns.push(pattern);
        }
    }
    let locate_expected = naive_occurrences(&text, &locate_patterns)?;
    // Locate and 4 KB extracts are measured `repeats` times; the median run is reported
    // (the machines are shared, and single runs vary by tens of percent).
    let mut locate_runs = Vec::new();
    for _ in 0..args.repeats {
        locate_runs.push(measure_locate(
            &index,
            &locate_patterns,
            &locate_expected,
            &mut mismatches,
        )?);
    }
    locate_runs.sort_by(|a, b| a.us_per_occurrence.total_cmp(&b.us_per_occurrence));
    let locate = locate_runs.swap_remove(locate_runs.len() / 2);

    // Extract.
    let mut extract64 = Vec::with_capacity(args.extracts);
    for _ in 0..args.extracts {
        let offset = rng.gen_range(0..text.len() - 64) as u64;
        let started = Instant::now();
        let got = index.extract(offset, 64)?;
        extract64.push(started.elapsed());
        if got != text[offset as usize..offset as usize + 64] {
            mismatches += 1;
        }
    }
    let extracts4k = (args.extracts / 4).max(1);
    let offsets4k: Vec<u64> = (0..extracts4k)
        .map(|_| rng.gen_range(0..text.len() - 4096) as u64)
        .collect();
    let mut extract_4k_runs = Vec::new();
    for _ in 0..args.repeats {
        let mut total = Duration::ZERO;
        for &offset in &offsets4k {
            let started = Instant::now();
            let got = index.extract(offset, 4096)?;
            total += started.elapsed();
            if got != text[offset as usize..offset as usize + 4096] {
                mismatches += 1;
            }
        }
        extract_4k_runs.push((extracts4k * 4096) as f64 / 1e6 / total.as_secs_f64());
    }
    extract_4k_runs.sort_by(f64::total_cmp);
    let extract_4k_mb_per_s = extract_4k_runs[extract_4k_runs.len() / 2];

    // The curve: base only, then one dedicated layer at a time.
    let (curve, layer_add_seconds) = if args.skip_curve {
        (Vec::new(), Vec::new())
    } else {
        measure_curve(
            &index,
            &locate_patterns,
            &locate_expected,
            n,
            &mut mismatches,
        )?
    };
    let _ = std::fs::remove_file(&tmp);

    let psi = json!({
        "headers_bytes": footprint.psi_headers_bytes,
        "superblocks_bytes": footprint.psi_superblocks_bytes,
        "stream_bytes": footprint.psi_stream_bytes,
        "tables_bytes": footprint.psi_tables_bytes,
        "total_bytes": footprint.psi_bytes(),
        "bits_per_char": round(footprint.psi_bytes() as f64 * 8.0 / n, 3),
    });
    let layer_json = |layers: &[puffer_index::LayerFootprint]| -> Value {
        layers
            .iter()
            .map(|l| json!({"level": l.level, "rate": l.rate, "bytes": l.bytes}))
            .collect()
    };
    let base_bytes =
        footprint.psi_bytes() + footprint.sa_layers[0].bytes + footprint.isa_layers[0].bytes;
    let mut result = json!({
        "experiment": "index",
        "input": args.input.display().to_string(),
        "input_bytes": text.len(),
        "sa_rate": args.sa_rate,
        "isa_rate": args.isa_rate,
        "levels": args.levels,
        "psi_block_len": args.psi_block,
        "index_bytes": footprint.total_bytes(),
        "file_bytes": file_bytes,
        "ratio": round(footprint.total_bytes() as f64 / n, 4),
        "base_only_ratio": round(base_bytes as f64 / n, 4),
        "bits_per_char": round(footprint.total_bytes() as f64 * 8.0 / n, 3),
        "components": {
            "psi": psi,
            "sa_layers": layer_json(&footprint.sa_layers),
            "isa_layers": layer_json(&footprint.isa_layers),
        },
        "build_seconds": round(build_seconds, 3),
        "build_mb_per_s": round(n / 1e6 / build_seconds, 2),
        "build_peak_rss_bytes": peak_rss,
        "build_peak_rss_bytes_per_input_byte": round(peak_rss.saturating_sub(rss_before.min(peak_rss)) as f64 / n, 2),
        "open_seconds": round(open_seconds, 4),
        "locate_us_per_occurrence": round(locate.us_per_occurrence, 3),
        "repeats": args.repeats,
        "locate_patterns": locate_patterns.len(),
        "locate_occurrences": locate.occurrences,
        "extract_64_p50_us": round(quantile_us(&mut extract64, 0.5), 2),
        "extract_4k_mb_per_s": round(extract_4k_mb_per_s, 2),
        "layer_add_seconds": layer_add_seconds.first().copied().unwrap_or(0.0),
        "layer_add_seconds_each": layer_add_seconds,
        "curve": curve,
        "mismatches": mismatches,
    });
    let object = result.as_object_mut().expect("object");
    for (key, value) in count_stats {
        object.insert(key, value);
    }
    print_table(&result);
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// Locate speed and footprint for each layer configuration, from the base layer alone
/// up to all layers (added one at a time by dedicated construction, each timed).
fn measure_curve(
    index: &TextIndex,
    patterns: &[Vec<u8>],
    expected: &[Vec<u64>],
    n: f64,
    mismatches: &mut u64,
) -> anyhow::Result<(Vec<Value>, Vec<f64>)> {
    while index.layer_count() > 1 {
        index.drop_layer()?;
    }
    let mut curve = Vec::new();
    let mut layer_add_seconds = Vec::new();
    loop {
        let point = measure_locate(index, patterns, expected, mismatches)?;
        curve.push(json!({
            "layers": index.layer_count(),
            "sa_rate": footprint_rate(index, true),
            "isa_rate": footprint_rate(index, false),
            "index_bytes": index.footprint().total_bytes(),
            "ratio": round(index.footprint().total_bytes() as f64 / n, 4),
            "locate_us_per_occurrence": round(point.us_per_occurrence, 3),
        }));
        if index.layer_count() == index.max_layers() {
            return Ok((curve, layer_add_seconds));
        }
        let started = Instant::now();
        index.add_layer(Construction::Dedicated)?;
        index.wait_for_layer_build();
        layer_add_seconds.push(round(started.elapsed().as_secs_f64(), 3));
    }
}

fn footprint_rate(index: &TextIndex, sa: bool) -> u64 {
    let footprint = index.footprint();
    let layers = if sa {
        &footprint.sa_layers
    } else {
        &footprint.isa_layers
    };
    layers.iter().map(|l| l.rate).min().unwrap_or(0)
}

fn print_table(result: &Value) {
    let get = |k: &str| result.get(k).map(|v| v.to_string()).unwrap_or_default();
    println!("{:<38} {}", "input", get("input"));
    for key in [
        "input_bytes",
        "index_bytes",
        "ratio",
        "base_only_ratio",
        "bits_per_char",
        "build_seconds",
        "build_mb_per_s",
        "build_peak_rss_bytes_per_input_byte",
        "open_seconds",
        "count_p50_us_len4",
        "count_p99_us_len4",
        "count_p50_us_len8",
        "count_p99_us_len8",
        "count_p50_us_len16",
        "count_p99_us_len16",
        "count_p50_us_len32",
        "count_p99_us_len32",
        "locate_us_per_occurrence",
        "extract_64_p50_us",
        "extract_4k_mb_per_s",
        "layer_add_seconds",
        "mismatches",
    ] {
        println!("{:<38} {}", key, get(key));
    }
    println!(
        "{:<8} {:>8} {:>8} {:>14} {:>8} {:>12}",
        "layers", "sa_rate", "isa_rate", "index_bytes", "ratio", "locate_us/occ"
    );
    if let Some(curve) = result["curve"].as_array() {
        for point in curve {
            println!(
                "{:<8} {:>8} {:>8} {:>14} {:>8} {:>12}",
                point["layers"],
                point["sa_rate"],
                point["isa_rate"],
                point["index_bytes"],
                point["ratio"],
                point["locate_us_per_occurrence"]
            );
        }
    }
}
