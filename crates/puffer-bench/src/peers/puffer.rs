//! PufferDB, embedded: a `puffer_index::TextIndex` over a text corpus (saved, then
//! opened from its file as a server would), or a `puffer_store::Shard` of records.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use puffer_index::{BuildOptions, TextIndex};
use puffer_store::{Predicate, Query, ReadOptions, Schema, Shard, ShardOptions};
use serde_json::json;

use super::corpus::Corpus;
use super::lines::LineDirectory;
use super::measure::{current_rss_bytes, Answer, Engine, Planned, Sizes};
use super::records::{Condition, RecordQuery, RecordTable};

/// Records per write (SCU) while loading.
const LOAD_BATCH_ROWS: usize = 1000;

/// Build options of every index: the defaults (SA and ISA rate 32, 4 layers), built on
/// one thread like the peers' loads.
fn build_options() -> BuildOptions {
    BuildOptions {
        threads: 1,
        ..BuildOptions::default()
    }
}

// ---------------------------------------------------------------------------------
// Text corpus.

pub(super) struct PufferText {
    index: TextIndex,
    lines: LineDirectory,
    index_path: PathBuf,
    /// Resident set size just before the index file was opened.
    rss_before_open_bytes: u64,
}

/// Builds the index of the corpus and its line directory, saves the index into
/// `work_dir` and opens it from there; returns the engine and the load seconds (build
/// and save).
pub(super) fn load_text(corpus: &Corpus, work_dir: &Path) -> anyhow::Result<(PufferText, f64)> {
    let index_path = work_dir.join("corpus.pidx");
    let started = Instant::now();
    let built = TextIndex::build_with(&corpus.text, &build_options(), &mut |_, _| {})
        .context("building the text index")?;
    built
        .save(&index_path)
        .with_context(|| format!("saving {}", index_path.display()))?;
    drop(built);
    let lines = LineDirectory::new(&corpus.text);
    let load_seconds = started.elapsed().as_secs_f64();
    let rss_before_open_bytes = current_rss_bytes();
    let index = TextIndex::open(&index_path)
        .with_context(|| format!("opening {}", index_path.display()))?;
    Ok((
        PufferText {
            index,
            lines,
            index_path,
            rss_before_open_bytes,
        },
        load_seconds,
    ))
}

impl Engine<Vec<u8>> for PufferText {
    fn answer(&mut self, pattern: &Vec<u8>) -> anyhow::Result<Answer> {
        let offsets = self.index.search(pattern, None)?;
        let mut lines: Vec<u32> = offsets
            .iter()
            .map(|&offset| self.lines.line_of(offset))
            .collect();
        lines.sort_unstable();
        lines.dedup();
        Ok(Answer::Rows(lines))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        let file_bytes = std::fs::metadata(&self.index_path)
            .with_context(|| format!("reading {}", self.index_path.display()))?
            .len();
        let footprint = self.index.footprint().total_bytes();
        let directory = self.lines.bytes();
        let rss_delta = current_rss_bytes().saturating_sub(self.rss_before_open_bytes);
        Ok(Sizes {
            disk_bytes: file_bytes + directory,
            memory_bytes: footprint + directory,
            memory_note: "index footprint + line directory (all resident)".into(),
            details: json!({
                "index_file_bytes": file_bytes,
                "index_footprint_bytes": footprint,
                "line_directory_bytes": directory,
                "rss_delta_after_open_and_queries_bytes": rss_delta,
                "sa_rate": build_options().sa_rate,
                "isa_rate": build_options().isa_rate,
                "levels": build_options().levels,
            }),
        })
    }
}

// ---------------------------------------------------------------------------------
// Records.

pub(super) struct PufferRecords {
    shard: Shard,
    names: Vec<String>,
    /// The attribute layers bought, and what choosing and building them took.
    layers: Option<serde_json::Value>,
    _dir: tempfile::TempDir,
}

/// Memory budget the layer manager's policy buys attribute layers from: the server's
/// default (`[adapt] memory_budget_mb`).
const LAYER_BUDGET_BYTES: u64 = 4096 << 20;

/// Loads as [`load_records`], runs the query mix once, and holds the attribute layers
/// the node's policy (`puffer_adapt::attributes::decide`, default settings) buys for the
/// rows those queries found per attribute, within [`LAYER_BUDGET_BYTES`]; the layers are
/// built before the load time is taken.
pub(super) fn load_records_with_layers(
    table: &RecordTable,
    work_dir: &Path,
    planned: &[Planned<RecordQuery>],
) -> anyhow::Result<(PufferRecords, f64)> {
    use puffer_adapt::attributes::{
        decide, AttributeConfig, AttributeDecision, AttributeSample, LayerKind,
    };
    let (mut engine, load_seconds) = load_records(table, work_dir)?;
    let started = Instant::now();
    for query in planned {
        engine.answer(&query.query)?;
    }
    let mix_seconds = started.elapsed().as_secs_f64();
    let segments = engine.shard.segments();
    let mut samples = Vec::new();
    for rows in engine.shard.attribute_demand() {
        let mut bytes = 0;
        for segment in &segments {
            bytes += segment.attribute_layer_cost_bytes(rows.attribute)?;
        }
        samples.push(AttributeSample {
            replica: 0,
            attribute: rows.attribute,
            kind: LayerKind::Attribute,
            rows_per_second: (rows.walked + rows.layered) as f64 / mix_seconds,
            bytes,
            held: false,
            changed_at_seconds: None,
        });
    }
    let footprint = engine.shard.stats()?.memory_bytes;
    let free = LAYER_BUDGET_BYTES.saturating_sub(footprint) as i64;
    let decisions = decide(0.0, free, &samples, &AttributeConfig::default());
    let build_started = Instant::now();
    let mut bought = Vec::new();
    for decision in decisions {
        if let AttributeDecision::Buy { attribute, .. } = decision {
            for segment in &segments {
                segment.add_attribute_layer(segment.build_attribute_layer(attribute)?);
            }
            bought.push(attribute);
        }
    }
    let build_seconds = build_started.elapsed().as_secs_f64();
    // Issue 20 asks whether saving layers beats building them again on open: time a
    // save of every layer bought, and a load of each saved file (read, checksums, every
    // record number checked), beside the build above.
    let save_started = Instant::now();
    for segment in &segments {
        for &attribute in &bought {
            let layer = segment
                .attribute_layer(attribute)
                .context("a bought layer is not held")?;
            segment.save_attribute_layer(&layer)?;
        }
    }
    let save_seconds = save_started.elapsed().as_secs_f64();
    let load_started = Instant::now();
    for segment in &segments {
        for &attribute in &bought {
            let loaded = segment
                .load_attribute_layer(attribute)?
                .context("a saved layer has no file")?;
            let held = segment
                .attribute_layer(attribute)
                .context("a bought layer is not held")?;
            anyhow::ensure!(
                loaded.entries() == held.entries(),
                "the loaded layer of attribute {attribute} covers other entries"
            );
        }
    }
    let load_seconds_of_layers = load_started.elapsed().as_secs_f64();
    let layer_bytes: u64 = segments.iter().map(|s| s.attribute_layer_bytes()).sum();
    engine.layers = Some(json!({
        "bought": bought.iter().map(|&a| engine.names[a as usize].clone()).collect::<Vec<_>>(),
        "candidates": samples.iter().map(|s| json!({
            "attribute": engine.names[s.attribute as usize],
            "rows_per_second": s.rows_per_second,
            "layer_bytes": s.bytes,
        })).collect::<Vec<_>>(),
        "layer_bytes": layer_bytes,
        "query_mix_seconds": mix_seconds,
        "build_seconds": build_seconds,
        "save_seconds": save_seconds,
        "load_seconds": load_seconds_of_layers,
    }));
    eprintln!(
        "pufferdb-layers: bought {} attribute layers ({} bytes): built in {:.1} ms, saved in \
         {:.1} ms, loaded from their files in {:.2} ms",
        bought.len(),
        layer_bytes,
        build_seconds * 1e3,
        save_seconds * 1e3,
        load_seconds_of_layers * 1e3,
    );
    Ok((engine, load_seconds + build_seconds))
}

/// Loads the table into a fresh shard (one writer, SCUs of LOAD_BATCH_ROWS records)
/// and compacts it into one segment; returns the engine and the load seconds.
pub(super) fn load_records(
    table: &RecordTable,
    work_dir: &Path,
) -> anyhow::Result<(PufferRecords, f64)> {
    let dir = tempfile::Builder::new()
        .prefix("shard-")
        .tempdir_in(work_dir)?;
    let schema = Schema::new(
        &table.table.schema.key,
        table.table.schema.attributes.clone(),
    )?;
    let options = ShardOptions {
        index: build_options(),
        ..ShardOptions::default()
    };
    let shard = Shard::open(dir.path(), schema, options).context("opening the shard")?;
    let started = Instant::now();
    crate::loading::put_rows(&shard, &table.table, LOAD_BATCH_ROWS)?;
    shard.compact_all().context("compacting the shard")?;
    let load_seconds = started.elapsed().as_secs_f64();
    let names = table
        .table
        .schema
        .attributes
        .iter()
        .map(|a| a.name.clone())
        .collect();
    Ok((
        PufferRecords {
            shard,
            names,
            layers: None,
            _dir: dir,
        },
        load_seconds,
    ))
}

impl PufferRecords {
    fn predicate(&self, query: &RecordQuery) -> Predicate {
        let name = self.names[query.column].clone();
        match &query.condition {
            Condition::Eq(value) => Predicate::Eq(name, value.clone()),
            Condition::Contains(needle) => Predicate::Contains(name, needle.clone()),
            Condition::Range(lower, upper) => Predicate::Range {
                attribute: name,
                lower: lower.clone(),
                upper: upper.clone(),
            },
        }
    }
}

impl Engine<RecordQuery> for PufferRecords {
    fn answer(&mut self, query: &RecordQuery) -> anyhow::Result<Answer> {
        let limit = query.limit;
        let query = Query {
            predicate: self.predicate(query),
            projection: Some(Vec::new()),
            limit,
            read: ReadOptions::default(),
        };
        let result = self.shard.search(&query)?;
        anyhow::ensure!(
            limit.is_some() || !result.truncated,
            "the answer was cut at the store's result limit"
        );
        Ok(Answer::Keys(
            result.rows.into_iter().map(|record| record.key).collect(),
        ))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        let stats = self.shard.stats()?;
        Ok(Sizes {
            disk_bytes: stats.disk_bytes,
            memory_bytes: stats.memory_bytes,
            memory_note: "shard's serving memory: indexes, key directories (all resident)".into(),
            details: json!({
                "segments": stats.segments,
                "key_directory_bytes": stats.key_directory_bytes,
                "sa_rate": build_options().sa_rate,
                "isa_rate": build_options().isa_rate,
                "attribute_layers": self.layers,
            }),
        })
    }
}
