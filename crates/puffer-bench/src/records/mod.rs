//! `puffer-bench records`: loads CSV / JSON-lines files as one table into a shard and
//! measures load speed, freshness lag per stage, footprint and query latencies. Every
//! answer is checked against a naive scan of the parsed rows kept in memory.
//!
//! This module holds the arguments, the run and the report; `table` reads and types
//! the inputs, `load` writes them and follows the watermarks, `queries` measures the
//! queries against the oracle.

mod load;
mod queries;
mod table;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use puffer_index::BuildOptions;
use puffer_store::{AttrType, Schema, Shard, ShardOptions};
use serde_json::json;

use crate::stats::{dataset_label, peak_rss_bytes, round};
use load::{compact, freshness, load, Compaction, LoadReport, WRITER_THREADS};
use queries::{measure_queries, KindLatency, Mismatches};
use table::{load_table, KeySource, Table};

#[derive(clap::Args)]
pub struct RecordsArgs {
    /// CSV or JSON-lines files (`.csv`, `.jsonl`, `.json`, each optionally `.gz`), loaded
    /// as one table whose columns are the union of theirs.
    #[arg(long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Column holding each record's key (not stored as an attribute).
    #[arg(
        long,
        required_unless_present = "key_row_number",
        conflicts_with = "key_row_number"
    )]
    key: Option<String>,
    /// Key each record by its 0-based row number over all inputs, in decimal.
    #[arg(long)]
    key_row_number: bool,
    /// Puts per SCU.
    #[arg(long, default_value_t = 1000)]
    batch_rows: usize,
    /// Queries per kind.
    #[arg(long, default_value_t = 500)]
    queries: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Shard directory, absent or empty, kept afterwards (default: a temporary directory,
    /// removed at the end).
    #[arg(long)]
    shard_dir: Option<PathBuf>,
    /// Densest SA sampling rate of segment indexes.
    #[arg(long, default_value_t = 32)]
    sa_rate: u64,
    /// Densest ISA sampling rate of segment indexes.
    #[arg(long, default_value_t = 32)]
    isa_rate: u64,
}

pub fn run(args: &RecordsArgs) -> anyhow::Result<()> {
    ensure!(args.batch_rows >= 1, "--batch-rows must be at least 1");
    let key_source = match &args.key {
        Some(column) => KeySource::Column(column.clone()),
        None => KeySource::RowNumber,
    };
    let table = load_table(&args.input, &key_source)?;
    ensure!(!table.rows.is_empty(), "the inputs hold no rows");
    let dir = ShardDir::new(args.shard_dir.as_deref())?;
    let schema = Schema::new(&table.key_name, table.attributes.clone())?;
    let shard = Shard::open(dir.path(), schema, shard_options(args))?;

    let mut mismatches = Mismatches::default();
    let load = load(&shard, &table, args.batch_rows)?;
    for problem in &load.problems {
        mismatches.record(problem.clone());
    }
    let compaction = compact(&shard, &table, &mut mismatches)?;
    let queries = measure_queries(&shard, &table, args, &mut mismatches)?;
    drop(shard);
    drop(dir);

    let result = report(args, &table, &load, &compaction, queries, &mismatches);
    print_table(&result);
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

// ---------------------------------------------------------------------------------
// The shard.

/// The shard's directory: the caller's (kept) or a temporary one (removed on drop).
enum ShardDir {
    Kept(PathBuf),
    Temporary(tempfile::TempDir),
}

impl ShardDir {
    fn new(requested: Option<&Path>) -> anyhow::Result<ShardDir> {
        let Some(dir) = requested else {
            let temporary = tempfile::Builder::new()
                .prefix("puffer-bench-records-")
                .tempdir()?;
            return Ok(ShardDir::Temporary(temporary));
        };
        // An existing shard would be reopened with its old records, and the oracle
        // would disagree with every answer.
        let empty = match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        ensure!(empty, "--shard-dir {} is not empty", dir.display());
        Ok(ShardDir::Kept(dir.to_path_buf()))
    }

    fn path(&self) -> &Path {
        match self {
            ShardDir::Kept(dir) => dir,
            ShardDir::Temporary(dir) => dir.path(),
        }
    }
}

fn shard_options(args: &RecordsArgs) -> ShardOptions {
    ShardOptions {
        index: BuildOptions {
            sa_rate: args.sa_rate,
            isa_rate: args.isa_rate,
            threads: 1,
            ..BuildOptions::default()
        },
        ..ShardOptions::default()
    }
}

// ---------------------------------------------------------------------------------
// Report.

fn column_types(table: &Table) -> serde_json::Map<String, serde_json::Value> {
    let mut counts = serde_json::Map::new();
    for attr_type in [
        AttrType::Int,
        AttrType::Float,
        AttrType::Bool,
        AttrType::Timestamp,
        AttrType::String,
    ] {
        let n = table
            .attributes
            .iter()
            .filter(|a| a.attr_type == attr_type)
            .count();
        counts.insert(attr_type.name().into(), json!(n));
    }
    counts
}

fn report(
    args: &RecordsArgs,
    table: &Table,
    load: &LoadReport,
    compaction: &Compaction,
    queries: Vec<KindLatency>,
    mismatches: &Mismatches,
) -> serde_json::Value {
    let rows = table.rows.len() as f64;
    let stats = &compaction.stats;
    let mut result = json!({
        "experiment": "records",
        "dataset": dataset_label(&args.input),
        "inputs": args.input.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "key": table.key_name,
        "rows": table.rows.len(),
        "columns": table.attributes.len(),
        "column_types": column_types(table),
        "duplicate_keys_skipped": table.duplicates_skipped,
        "input_bytes": table.input_bytes,
        "batch_rows": args.batch_rows,
        "writer_threads": WRITER_THREADS,
        "scus": load.acks.len(),
        "load_seconds": round(load.elapsed.as_secs_f64(), 3),
        "load_rows_per_s": round(rows / load.elapsed.as_secs_f64(), 0),
        "overloaded_retries": load.overloaded_retries,
        "compact_all_seconds": round(compaction.seconds, 3),
        "segments": stats.segments,
        "store_bytes": stats.disk_bytes,
        "memory_bytes": stats.memory_bytes,
        "key_directory_bytes_per_key": round(stats.key_directory_bytes as f64 / rows, 2),
        "store_ratio": round(stats.disk_bytes as f64 / table.input_bytes as f64, 4),
        "sa_rate": args.sa_rate,
        "isa_rate": args.isa_rate,
        "seed": args.seed,
        "mismatches": mismatches.count,
        "mismatch_examples": mismatches.examples,
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_before_writes_bytes": load.peak_rss_before_writes_bytes,
    });
    let object = result.as_object_mut().expect("an object");
    if let serde_json::Value::Object(lags) = freshness(load) {
        object.extend(lags);
    }
    let mut slowest = serde_json::Map::new();
    let mut query_counts = serde_json::Map::new();
    for kind in queries {
        object.insert(format!("{}_p50_us", kind.name), json!(kind.p50_us));
        object.insert(format!("{}_p99_us", kind.name), json!(kind.p99_us));
        query_counts.insert(kind.name.into(), json!(kind.queries));
        slowest.insert(kind.name.into(), kind.slowest);
    }
    object.insert("queries".into(), query_counts.into());
    object.insert("slowest_queries".into(), slowest.into());
    result
}

fn print_table(result: &serde_json::Value) {
    let get = |k: &str| result.get(k).map(|v| v.to_string()).unwrap_or_default();
    for key in [
        "dataset",
        "key",
        "rows",
        "columns",
        "column_types",
        "duplicate_keys_skipped",
        "input_bytes",
        "store_bytes",
        "store_ratio",
        "memory_bytes",
        "key_directory_bytes_per_key",
        "load_rows_per_s",
        "overloaded_retries",
        "compact_all_seconds",
        "watermarks_poll_max_ms",
    ] {
        println!("{key:<30} {}", get(key));
    }
    println!("{:<30} {:>10} {:>10}", "freshness lag (ms)", "p50", "p99");
    for stage in ["log", "sorted", "compressed"] {
        println!(
            "{stage:<30} {:>10} {:>10}",
            result["freshness_lag_p50_ms"][stage], result["freshness_lag_p99_ms"][stage]
        );
    }
    println!(
        "{:<30} {:>10} {:>10} {:>8}",
        "query (us)", "p50", "p99", "queries"
    );
    for kind in [
        "get",
        "search_eq_first10",
        "count_eq",
        "search_contains",
        "search_range",
        "count_range",
    ] {
        println!(
            "{kind:<30} {:>10} {:>10} {:>8}",
            get(&format!("{kind}_p50_us")),
            get(&format!("{kind}_p99_us")),
            result["queries"][kind]
        );
    }
    for key in [
        "peak_rss_bytes",
        "peak_rss_before_writes_bytes",
        "mismatches",
    ] {
        println!("{key:<30} {}", get(key));
    }
}
