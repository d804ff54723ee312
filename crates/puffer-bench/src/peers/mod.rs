//! `puffer-bench peers` (issue 6): PufferDB side by side with SQLite FTS5 (trigram),
//! PostgreSQL `pg_trgm` and ripgrep on the same data and the same queries, each answer
//! checked against a brute-force scan.
//!
//! The input is a text corpus (one file; the documents are its lines) or a table of
//! records (CSV / JSON-lines files, optionally gzipped; the documents are the
//! records). Per engine it measures bytes on disk and resident memory relative to the
//! input, load time, and p50 / p99 latency per query class, single-threaded; it prints
//! a readable table, writes a PNG chart into `--out-dir`, and prints one JSON line
//! last. Any disagreement with the oracle is printed and fails the run.
//!
//! Modules: `corpus` (text preparation, lines, text oracle), `records` (table,
//! attributes, record queries and their oracle), `queries` (substring sampling, shared),
//! `measure` (engine trait, checks, timing), one module per engine (`puffer`, `lines`
//! for PufferDB's line directory, `sqlite`, `pg`, `ripgrep`), and `chart`.

mod chart;
mod corpus;
mod lines;
mod measure;
mod pg;
mod puffer;
mod queries;
mod records;
mod ripgrep;
mod sqlite;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::json;

use crate::stats::dataset_label;

use measure::{measure, Engine, EngineReport, Mismatches, Planned};

/// The engines, by the names `--skip` takes.
const ENGINES: [&str; 5] = [
    "pufferdb",
    "pufferdb-layers",
    "sqlite",
    "postgres",
    "ripgrep",
];
/// Most `--rounds`.
const MAX_ROUNDS: usize = 15;

#[derive(clap::Args)]
pub struct PeersArgs {
    /// A text corpus (one file, optionally `.gz`), or CSV / JSON-lines files of records
    /// (`.csv`, `.jsonl`, `.json`, each optionally `.gz`) read as one table.
    #[arg(long, required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Queries per class (the `frequent` class has at most 10).
    #[arg(long, default_value_t = 100)]
    queries: usize,
    /// Text corpora: keep only the whole lines within the first N bytes.
    #[arg(long)]
    limit_bytes: Option<u64>,
    /// Records: the column holding each record's key (default: the row number).
    #[arg(long)]
    key: Option<String>,
    /// Where the PNG chart goes.
    #[arg(long, default_value = "target/bench/peers")]
    out_dir: PathBuf,
    /// Random seed of the queries.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Engines to leave out, comma-separated: pufferdb, pufferdb-layers (records only),
    /// sqlite, postgres, ripgrep.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Query classes to run, comma-separated (default: all), e.g. `len3-limit100,eq`.
    #[arg(long, value_delimiter = ',')]
    classes: Vec<String>,
    /// Timed passes over the queries; a query's time is the median of its passes (a
    /// query over 100 ms is timed once).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

impl PeersArgs {
    fn wants(&self, engine: &str) -> bool {
        !self.skip.iter().any(|s| s == engine)
    }

    /// The planned queries of the classes asked; an error names a class nothing has.
    fn keep_classes<Q>(&self, planned: Vec<Planned<Q>>) -> anyhow::Result<Vec<Planned<Q>>> {
        if self.classes.is_empty() {
            return Ok(planned);
        }
        for class in &self.classes {
            if !planned.iter().any(|p| p.class == class.as_str()) {
                let mut known: Vec<&str> = planned.iter().map(|p| p.class).collect();
                known.dedup();
                bail!(
                    "--classes {class}: the classes planned are {}",
                    known.join(", ")
                );
            }
        }
        Ok(planned
            .into_iter()
            .filter(|p| self.classes.iter().any(|c| c == p.class))
            .collect())
    }
}

pub fn run(args: &PeersArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queries >= 1, "--queries must be at least 1");
    anyhow::ensure!(
        (1..=MAX_ROUNDS).contains(&args.rounds),
        "--rounds must be between 1 and {MAX_ROUNDS}, got {}",
        args.rounds
    );
    for engine in &args.skip {
        anyhow::ensure!(
            ENGINES.contains(&engine.as_str()),
            "--skip {engine}: the engines are {}",
            ENGINES.join(", ")
        );
    }
    for path in &args.input {
        anyhow::ensure!(path.is_file(), "input {} is not a file", path.display());
    }
    let work_dir = tempfile::Builder::new()
        .prefix("puffer-bench-peers-")
        .tempdir()
        .context("creating a work directory")?;
    let mut outcome = if is_records(&args.input[0]) {
        run_records(args, work_dir.path())?
    } else {
        anyhow::ensure!(
            args.input.len() == 1,
            "a text corpus is one file; records are .csv / .jsonl / .json files"
        );
        run_text(args, &args.input[0], work_dir.path())?
    };
    drop(work_dir);

    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let chart_path = args
        .out_dir
        .join(format!("peers-{}.png", file_safe(&outcome.dataset)));
    let title = format!("{}: PufferDB and its peers", outcome.dataset);
    let chart = match chart::draw(&chart_path, &title, &outcome.engines, outcome.input_bytes) {
        Ok(()) => json!(chart_path.display().to_string()),
        Err(e) => {
            eprintln!("chart: skipped, {e:#}");
            json!(null)
        }
    };
    outcome.summary["chart"] = chart;
    print_table(&outcome);
    println!("{}", serde_json::to_string(&outcome.summary)?);
    if outcome.mismatches > 0 {
        bail!(
            "{} answers disagreed with the oracle (see above)",
            outcome.mismatches
        );
    }
    Ok(())
}

/// Whether the inputs are records (by their extension).
fn is_records(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    [".csv", ".jsonl", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// `name` for a file name: runs of anything but ASCII letters, digits and `.` become
/// one `-` ("airbnb (5 files)" becomes "airbnb-5-files").
fn file_safe(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// What a run produced.
struct Outcome {
    dataset: String,
    input_bytes: u64,
    documents: usize,
    documents_kind: &'static str,
    engines: Vec<EngineReport>,
    skipped: Vec<(&'static str, String)>,
    /// Median and largest answer size per class, in class order.
    answer_sizes: Vec<(&'static str, usize, usize, usize)>,
    mismatches: u64,
    summary: serde_json::Value,
}

/// Runs the engines one after the other, each loaded, measured and dropped before the
/// next (a PostgreSQL server is stopped before ripgrep runs).
struct Runner<'p, Q> {
    planned: &'p [Planned<Q>],
    row_of_key: Option<&'p HashMap<Vec<u8>, u32>>,
    rounds: usize,
    engines: Vec<EngineReport>,
    skipped: Vec<(&'static str, String)>,
    mismatches: Mismatches,
}

impl<'p, Q> Runner<'p, Q> {
    fn new(
        planned: &'p [Planned<Q>],
        row_of_key: Option<&'p HashMap<Vec<u8>, u32>>,
        rounds: usize,
    ) -> Self {
        Runner {
            planned,
            row_of_key,
            rounds,
            engines: Vec::new(),
            skipped: Vec::new(),
            mismatches: Mismatches::default(),
        }
    }

    fn skip(&mut self, name: &'static str, reason: String) {
        eprintln!("{name}: skipped, {reason}");
        self.skipped.push((name, reason));
    }

    /// Loads an engine (a failure skips it, saying why), runs every query and records
    /// its figures.
    fn run<E: Engine<Q>>(
        &mut self,
        name: &'static str,
        description: &str,
        load: impl FnOnce() -> anyhow::Result<(E, f64)>,
    ) -> anyhow::Result<()> {
        eprintln!("{name}: loading");
        let (mut engine, load_seconds) = match load() {
            Ok(loaded) => loaded,
            Err(e) => {
                self.skip(name, format!("{e:#}"));
                return Ok(());
            }
        };
        eprintln!("{name}: loaded in {load_seconds:.1} s; querying");
        crate::return_freed_memory();
        let before = self.mismatches.count;
        let latencies = measure(
            name,
            &mut engine,
            self.planned,
            self.row_of_key,
            self.rounds,
            &mut self.mismatches,
        );
        let sizes = engine
            .sizes()
            .with_context(|| format!("{name}: measuring sizes"))?;
        drop(engine);
        self.engines.push(EngineReport {
            name,
            description: description.to_string(),
            load_seconds,
            sizes,
            latencies,
            mismatches: self.mismatches.count - before,
        });
        Ok(())
    }
}

fn answer_sizes<Q>(planned: &[Planned<Q>]) -> Vec<(&'static str, usize, usize, usize)> {
    let mut classes: Vec<&'static str> = Vec::new();
    for query in planned {
        if !classes.contains(&query.class) {
            classes.push(query.class);
        }
    }
    classes
        .into_iter()
        .map(|class| {
            let mut sizes: Vec<usize> = planned
                .iter()
                .filter(|p| p.class == class)
                .map(|p| p.expected.len())
                .collect();
            sizes.sort_unstable();
            (
                class,
                sizes.len(),
                sizes[sizes.len() / 2],
                sizes[sizes.len() - 1],
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Text corpus.

fn run_text(args: &PeersArgs, path: &Path, work_dir: &Path) -> anyhow::Result<Outcome> {
    let corpus = corpus::read_corpus(path, args.limit_bytes)?;
    eprintln!(
        "corpus: {} bytes, {} lines; planning queries",
        corpus.text.len(),
        corpus.lines
    );
    let planned = args.keep_classes(queries::plan_text_queries(
        &corpus,
        args.queries,
        args.seed,
    )?)?;
    let corpus_file = work_dir.join("corpus.txt");
    std::fs::write(&corpus_file, &corpus.text)
        .with_context(|| format!("writing {}", corpus_file.display()))?;

    let mut runner = Runner::new(&planned, None, args.rounds);
    if args.wants("pufferdb") {
        runner.run(
            "pufferdb",
            "puffer-index TextIndex (SA/ISA rate 32, 4 layers) + line directory",
            || puffer::load_text(&corpus, work_dir),
        )?;
    }
    if args.wants("sqlite") {
        runner.run(
            "sqlite",
            "SQLite FTS5 trigram (case_sensitive 1), one row per line",
            || sqlite::load_text(&corpus, work_dir),
        )?;
    }
    if args.wants("postgres") {
        match pg::PgServer::start() {
            Err(e) => runner.skip("postgres", format!("{e:#}")),
            Ok(server) => {
                runner.run(
                    "postgres",
                    "PostgreSQL pg_trgm GIN index, LIKE '%q%', one row per line",
                    || pg::load_text(&server, &corpus),
                )?;
                drop(server);
            }
        }
    }
    if args.wants("ripgrep") {
        match ripgrep::find_ripgrep() {
            Err(e) => runner.skip("ripgrep", format!("{e:#}")),
            Ok(program) => runner.run(
                "ripgrep",
                "rg -F -c -j1 over the corpus file, one process per query",
                || Ok((ripgrep::text(program, corpus_file.clone()), 0.0)),
            )?,
        }
    }

    let dataset = dataset_label(&args.input);
    let input_bytes = corpus.text.len() as u64;
    let mut outcome = Outcome {
        dataset,
        input_bytes,
        documents: corpus.lines,
        documents_kind: "lines",
        answer_sizes: answer_sizes(&planned),
        mismatches: runner.mismatches.count,
        engines: runner.engines,
        skipped: runner.skipped,
        summary: json!(null),
    };
    outcome.summary = summary(args, &outcome, &runner.mismatches);
    let extra = json!({
        "file_bytes": corpus.file_bytes,
        "limit_bytes": args.limit_bytes,
        "replaced_chars": corpus.replaced,
        "line_breaks_inserted": corpus.breaks_inserted,
        "max_line_bytes": corpus::MAX_LINE_BYTES,
    });
    merge(&mut outcome.summary, extra);
    Ok(outcome)
}

// ---------------------------------------------------------------------------------
// Records.

fn run_records(args: &PeersArgs, work_dir: &Path) -> anyhow::Result<Outcome> {
    let table = records::read_records(&args.input, args.key.as_deref())?;
    eprintln!(
        "records: {} rows, {} attributes, {} bytes; planning queries",
        table.table.rows.len(),
        table.table.schema.attributes.len(),
        table.table.input_bytes
    );
    let planned = args.keep_classes(records::plan_record_queries(
        &table,
        args.queries,
        args.seed,
    )?)?;

    let mut runner = Runner::new(&planned, Some(&table.row_of_key), args.rounds);
    if args.wants("pufferdb") {
        runner.run("pufferdb", "puffer-store shard, one compacted segment (SA/ISA rate 32), every attribute searchable", || puffer::load_records(&table, work_dir))?;
    }
    if args.wants("pufferdb-layers") {
        runner.run("pufferdb-layers", "pufferdb plus the attribute layers the node's policy buys for the query mix (run once first)", || puffer::load_records_with_layers(&table, work_dir, &planned))?;
    }
    if args.wants("sqlite") {
        runner.run("sqlite", "SQLite table + B-tree indexes (eq, range attributes) + FTS5 trigram external-content index (contains attributes)", || sqlite::load_records(&table, work_dir))?;
    }
    if args.wants("postgres") {
        match pg::PgServer::start() {
            Err(e) => runner.skip("postgres", format!("{e:#}")),
            Ok(server) => {
                runner.run("postgres", "PostgreSQL table + B-tree indexes (eq, range attributes) + pg_trgm GIN indexes (contains attributes)", || pg::load_records(&server, &table))?;
                drop(server);
            }
        }
    }
    if args.wants("ripgrep") && !table.contains_columns.is_empty() {
        match ripgrep::find_ripgrep() {
            Err(e) => runner.skip("ripgrep", format!("{e:#}")),
            Ok(program) => runner.run(
                "ripgrep",
                "rg -F -c -j1 over one file per contains attribute (substring queries only)",
                || ripgrep::records(program, &table, work_dir),
            )?,
        }
    }

    let names = |columns: &[usize]| -> Vec<String> {
        columns
            .iter()
            .map(|&c| table.attribute_name(c).to_string())
            .collect()
    };
    let mut outcome = Outcome {
        dataset: dataset_label(&args.input),
        input_bytes: table.table.input_bytes,
        documents: table.table.rows.len(),
        documents_kind: "records",
        answer_sizes: answer_sizes(&planned),
        mismatches: runner.mismatches.count,
        engines: runner.engines,
        skipped: runner.skipped,
        summary: json!(null),
    };
    outcome.summary = summary(args, &outcome, &runner.mismatches);
    let extra = json!({
        "key": table.table.schema.key,
        "attributes": table.table.schema.attributes.len(),
        "duplicate_keys_skipped": table.table.duplicates_skipped,
        "eq_attributes": names(&table.eq_columns),
        "range_attributes": names(&table.range_columns),
        "contains_attributes": names(&table.contains_columns),
        "queried_attributes": table.queried_columns().len(),
        "type_of_attributes": table.queried_columns().iter().map(|&c| (table.attribute_name(c).to_string(), json!(table.attr_type(c).name()))).collect::<serde_json::Map<_, _>>(),
    });
    merge(&mut outcome.summary, extra);
    Ok(outcome)
}

// ---------------------------------------------------------------------------------
// Report.

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

fn summary(args: &PeersArgs, outcome: &Outcome, mismatches: &Mismatches) -> serde_json::Value {
    let answers: serde_json::Map<String, serde_json::Value> = outcome
        .answer_sizes
        .iter()
        .map(|(class, queries, median, max)| {
            (
                class.to_string(),
                json!({"queries": queries, "median_rows": median, "max_rows": max}),
            )
        })
        .collect();
    json!({
        "experiment": "peers",
        "kind": if outcome.documents_kind == "lines" { "text" } else { "records" },
        "dataset": outcome.dataset,
        "inputs": args.input.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "input_bytes": outcome.input_bytes,
        "documents": outcome.documents,
        "documents_kind": outcome.documents_kind,
        "seed": args.seed,
        "rounds": args.rounds,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "selective_max_rows": measure::SELECTIVE_MAX_ROWS,
        "query_classes": answers,
        "engines": outcome.engines.iter().map(|e| e.to_json(outcome.input_bytes)).collect::<Vec<_>>(),
        "skipped": outcome.skipped.iter().map(|(engine, reason)| json!({"engine": engine, "reason": reason})).collect::<Vec<_>>(),
        "mismatches": mismatches.count,
        "mismatch_examples": mismatches.examples,
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

fn print_table(outcome: &Outcome) {
    let input = outcome.input_bytes.max(1) as f64;
    println!(
        "dataset {}: {} bytes, {} {}",
        outcome.dataset, outcome.input_bytes, outcome.documents, outcome.documents_kind
    );
    println!(
        "{:<10} {:>10} {:>8} {:>11} {:>8} {:>8} {:>10}",
        "engine", "disk MiB", "disk/in", "memory MiB", "mem/in", "load s", "mismatches"
    );
    for engine in &outcome.engines {
        println!(
            "{:<10} {:>10} {:>8.3} {:>11} {:>8.3} {:>8.1} {:>10}",
            engine.name,
            mib(engine.sizes.disk_bytes),
            engine.sizes.disk_bytes as f64 / input,
            mib(engine.sizes.memory_bytes),
            engine.sizes.memory_bytes as f64 / input,
            engine.load_seconds,
            engine.mismatches
        );
    }
    for (name, reason) in &outcome.skipped {
        println!("{name:<10} skipped: {reason}");
    }
    println!("what each engine is, and what its memory figure means:");
    for engine in &outcome.engines {
        println!(
            "  {:<10} {}; memory: {}",
            engine.name, engine.description, engine.sizes.memory_note
        );
    }
    let mut header = format!("{:<22}", "latency us p50/p99");
    for (class, ..) in &outcome.answer_sizes {
        header.push_str(&format!(" {class:>17}"));
    }
    header.push_str(&format!(" {:>17}", "selective"));
    println!("{header}");
    let mut rows_line = format!("{:<22}", "  (median rows)");
    for (_, _, median, _) in &outcome.answer_sizes {
        rows_line.push_str(&format!(" {median:>17}"));
    }
    rows_line.push_str(&format!(
        " {:>17}",
        format!("<= {}", measure::SELECTIVE_MAX_ROWS)
    ));
    println!("{rows_line}");
    for engine in &outcome.engines {
        let mut line = format!("{:<22}", engine.name);
        let classes = outcome
            .answer_sizes
            .iter()
            .map(|(c, ..)| *c)
            .chain(["selective"]);
        for class in classes {
            let cell = match engine
                .latencies
                .iter()
                .find(|l| l.class == class && l.queries > 0)
            {
                Some(l) => format!("{}/{}", short_us(l.p50_us), short_us(l.p99_us)),
                None => "-".into(),
            };
            line.push_str(&format!(" {cell:>17}"));
        }
        println!("{line}");
    }
    println!("mismatches {}", outcome.mismatches);
}

/// Microseconds, short: 3 significant figures below 1000, whole numbers above.
fn short_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{us:.0}")
    } else if us >= 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_told_apart_and_named() {
        assert!(is_records(Path::new("a/boston-listings.csv.gz")));
        assert!(is_records(Path::new("events.jsonl")));
        assert!(!is_records(Path::new("english.40MB")));
        assert!(!is_records(Path::new("english.40MB.gz")));
        assert_eq!(file_safe("airbnb (5 files)"), "airbnb-5-files");
        assert_eq!(file_safe("english.40MB"), "english.40MB");
        let paths = [
            PathBuf::from("d/airbnb/a.csv.gz"),
            PathBuf::from("d/airbnb/b.csv.gz"),
        ];
        assert_eq!(dataset_label(&paths), "airbnb (2 files)");
        assert_eq!(dataset_label(&paths[..1]), "a");
    }
}
