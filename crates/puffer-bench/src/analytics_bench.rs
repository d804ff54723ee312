//! `puffer-bench analytics` (issue 22): analytics SQL (GROUP BY on low- and
//! high-cardinality attributes, top-k, full-scan aggregates, selective filters, a join
//! with a small dimension table, time buckets) on the hotel bookings and wikiticker,
//! PufferDB (DataFusion over the compressed store, `puffer-analytics`) without column
//! layers and with the column layers its layer manager buys, beside SQLite with B-tree
//! indexes on the filtered attributes. Every answer is compared across the engines;
//! they run each query in alternation, round after round, and the medians are reported
//! with each engine's size.
//!
//! The two PufferDB engines are two databases of the same tables. In the first, column
//! layers are pinned off (`drop`: the manager buys none); the second runs the suite
//! until its manager has bought column layers for what the suite scans and built them
//! (the warm-up, reported), and its layers stay the manager's through the measurement
//! (what it holds before and after is reported). Attribute layers are the manager's in
//! both.
//!
//! DuckDB runs in a Python process of its own (`duckdb_peer.py`, PyPI `duckdb`), loaded
//! from CSV files the benchmark writes of the same rows (timestamps as microseconds,
//! made `TIMESTAMP`s there); its times are taken inside that process (the query and the
//! fetch of its rows, without the pipe), and its answers compared like the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context};
use puffer_adapt::attributes::LayerKind;
use puffer_analytics::compare::{same_rows, sort_rows, Cell};
use puffer_analytics::{run as run_analytics, AnalyticsOptions};
use puffer_node::serving::AttributePin;
use puffer_node::{Answer, Database};
use puffer_query::import::{read_table, ImportedTable, KeySource};
use puffer_store::{AttrType, Attribute, Record, Schema, Value, WriteOp};
use rusqlite::types::{Value as SqlValue, ValueRef};
use serde_json::json;

use crate::stats::{quantile_us, round};

#[derive(clap::Args)]
pub struct AnalyticsArgs {
    /// The hotel bookings CSV (gzip allowed); keyed by row number.
    #[arg(long, default_value = "../shared/data/hotel_bookings.csv.gz")]
    bookings: PathBuf,
    /// The wikiticker JSON lines (gzip allowed); keyed by row number.
    #[arg(
        long,
        default_value = "../shared/data/wikiticker-2015-09-12-sampled.json.gz"
    )]
    wikiticker: PathBuf,
    /// Rounds; each runs every query once on each engine.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// The Python that runs DuckDB (`duckdb_peer.py`; needs `pip install duckdb`).
    /// Default: the test suite's virtualenv, `target/pyenv/bin/python`, where it exists,
    /// else `python3`.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Leave DuckDB out (say so in the output) instead of failing without it.
    #[arg(long)]
    skip_duckdb: bool,
}

/// One query of the suite: its text for PufferDB, for SQLite where the dialects differ
/// (time buckets), and whether its rows come in the query's order.
struct Case {
    name: &'static str,
    puffer: &'static str,
    sqlite: Option<&'static str>,
    ordered: bool,
}

const fn case(name: &'static str, puffer: &'static str, ordered: bool) -> Case {
    Case {
        name,
        puffer,
        sqlite: None,
        ordered,
    }
}

/// The suite. Timestamps are microseconds in SQLite, so its buckets are arithmetic.
const CASES: &[Case] = &[
    case(
        "filter-avg",
        "SELECT COUNT(*), AVG(adr) FROM bookings WHERE country = 'PRT' AND hotel = 'City Hotel'",
        false,
    ),
    case(
        "group-low",
        "SELECT hotel, COUNT(*), AVG(adr) FROM bookings GROUP BY hotel",
        false,
    ),
    case(
        "group-high-top",
        "SELECT country, COUNT(*) AS n FROM bookings GROUP BY country ORDER BY n DESC, country LIMIT 10",
        true,
    ),
    case(
        "top-k",
        "SELECT row_number, adr FROM bookings ORDER BY adr DESC, row_number LIMIT 10",
        true,
    ),
    case(
        "scan-aggregates",
        "SELECT SUM(stays_in_week_nights), MAX(lead_time), AVG(adr) FROM bookings",
        false,
    ),
    case(
        "filter-group",
        "SELECT market_segment, COUNT(*) FROM bookings WHERE is_canceled = 1 AND arrival_date_year = 2016 GROUP BY market_segment",
        false,
    ),
    case(
        "count-distinct",
        "SELECT hotel, COUNT(DISTINCT country) FROM bookings GROUP BY hotel",
        false,
    ),
    case(
        "having",
        "SELECT country, AVG(adr) FROM bookings GROUP BY country HAVING COUNT(*) > 1000",
        false,
    ),
    case(
        "join-dimension",
        "SELECT h.region, COUNT(*), AVG(b.adr) FROM bookings b JOIN hotels h ON b.hotel = h.hotel WHERE b.market_segment = 'Groups' GROUP BY h.region",
        false,
    ),
    Case {
        name: "bucket-month",
        puffer: "SELECT date_trunc('month', reservation_status_date) AS m, COUNT(*) FROM bookings WHERE hotel = 'Resort Hotel' GROUP BY 1",
        sqlite: Some("SELECT CAST(strftime('%s', strftime('%Y-%m-01', reservation_status_date / 1000000, 'unixepoch')) AS INTEGER) * 1000000 AS m, COUNT(*) FROM bookings WHERE hotel = 'Resort Hotel' GROUP BY 1"),
        ordered: false,
    },
    Case {
        name: "wiki-bucket-hour",
        puffer: "SELECT date_trunc('hour', time) AS h, COUNT(*), SUM(added) FROM wiki GROUP BY 1",
        sqlite: Some("SELECT (time / 3600000000) * 3600000000 AS h, COUNT(*), SUM(added) FROM wiki GROUP BY 1"),
        ordered: false,
    },
    case(
        "wiki-group-top",
        "SELECT channel, COUNT(*) AS n FROM wiki GROUP BY channel ORDER BY n DESC, channel LIMIT 5",
        true,
    ),
    case(
        "wiki-filter-top",
        "SELECT page, SUM(delta) AS d FROM wiki WHERE countryName = 'France' GROUP BY page ORDER BY d DESC, page LIMIT 5",
        true,
    ),
    case(
        "wiki-robots",
        "SELECT isRobot, COUNT(*), AVG(delta) FROM wiki GROUP BY isRobot",
        false,
    ),
];

/// The attributes SQLite gets a B-tree index on: those the suite filters on.
const INDEXED: &[(&str, &str)] = &[
    ("bookings", "country"),
    ("bookings", "hotel"),
    ("bookings", "is_canceled"),
    ("bookings", "market_segment"),
    ("wiki", "countryName"),
];

/// The dimension table: each hotel's region (the data set's paper: the resort in the
/// Algarve, the city hotel in Lisbon).
const HOTELS: &[(&str, &str)] = &[("City Hotel", "Lisbon"), ("Resort Hotel", "Algarve")];

pub fn run(args: &AnalyticsArgs) -> anyhow::Result<()> {
    ensure!(args.rounds >= 1, "--rounds must be at least 1");
    for path in [&args.bookings, &args.wikiticker] {
        ensure!(path.is_file(), "input {} is not a file", path.display());
    }
    let read = |path: &Path| {
        read_table(&[path.to_path_buf()], KeySource::RowNumber)
            .map_err(|e| anyhow::anyhow!("reading {}: {}", path.display(), e.message()))
    };
    let tables = [
        ("bookings", read(&args.bookings)?),
        ("wiki", read(&args.wikiticker)?),
    ];
    let dir = tempfile::Builder::new()
        .prefix("puffer-bench-analytics-")
        .tempdir()?;

    let plain = open_puffer(&dir.path().join("puffer"), &tables)?;
    pin_column_layers(&plain, AttributePin::Drop)?;
    let layered = open_puffer(&dir.path().join("puffer-columns"), &tables)?;
    let options = AnalyticsOptions::default();
    // The same queries with DataFusion aggregating the scanned columns itself: what
    // pushing aggregates into the store saves.
    let in_datafusion = AnalyticsOptions {
        push_aggregates: false,
        ..AnalyticsOptions::default()
    };
    let warm_up = warm_up(&layered, &options)?;
    let held_before = column_layers_held(&layered);

    let sqlite_path = dir.path().join("sqlite.db");
    let sqlite = rusqlite::Connection::open(&sqlite_path)?;
    for (name, table) in &tables {
        load_sqlite(&sqlite, name, table)?;
    }
    sqlite.execute_batch("CREATE TABLE hotels (hotel TEXT PRIMARY KEY, region TEXT)")?;
    for (hotel, region) in HOTELS {
        sqlite.execute("INSERT INTO hotels VALUES (?1, ?2)", [hotel, region])?;
    }
    for (table, column) in INDEXED {
        sqlite.execute_batch(&format!(
            "CREATE INDEX \"{table}_{column}\" ON {table} (\"{column}\")"
        ))?;
    }
    sqlite.execute_batch("ANALYZE")?;
    let sqlite_bytes: i64 = sqlite.query_row(
        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        [],
        |row| row.get(0),
    )?;

    let mut duck = match args.skip_duckdb {
        true => None,
        false => Some(DuckPeer::start(
            args.python.as_deref(),
            &dir.path().join("duck"),
            &tables,
        )?),
    };
    let mut times = vec![std::array::from_fn::<Vec<_>, 5, _>(|_| Vec::new()); CASES.len()];
    let mut answers = vec![0usize; CASES.len()];
    for round in 0..args.rounds {
        for (c, case) in CASES.iter().enumerate() {
            let sqlite_text = case.sqlite.unwrap_or(case.puffer);
            let mut got: [Vec<_>; 5] = std::array::from_fn(|_| Vec::new());
            // Rotate which engine goes first, so none always finds caches warm.
            for k in 0..ENGINES.len() {
                let engine = (round + c + k) % ENGINES.len();
                let started = Instant::now();
                let (rows, took) = match (engine, &mut duck) {
                    (0, _) => (puffer_rows(&plain, case.puffer, &options), None),
                    (1, _) => (puffer_rows(&layered, case.puffer, &options), None),
                    (2, _) => (sqlite_rows(&sqlite, sqlite_text), None),
                    (3, Some(duck)) => match duck.query(case.puffer) {
                        Ok((rows, took)) => (Ok(rows), Some(took)),
                        Err(e) => (Err(e), None),
                    },
                    (3, None) => continue,
                    _ => (puffer_rows(&layered, case.puffer, &in_datafusion), None),
                };
                got[engine] =
                    rows.with_context(|| format!("{}, {}", ENGINES[engine], case.name))?;
                times[c][engine].push(took.unwrap_or_else(|| started.elapsed()));
            }
            for rows in &mut got {
                if !case.ordered {
                    sort_rows(rows);
                }
            }
            for engine in (0..ENGINES.len()).filter(|&e| e != 2 && (e != 3 || duck.is_some())) {
                ensure!(
                    same_rows(&got[engine], &got[2]),
                    "{}: the answers differ\n{}: {:?}\nSQLite:   {:?}",
                    case.name,
                    ENGINES[engine],
                    &got[engine][..got[engine].len().min(5)],
                    &got[2][..got[2].len().min(5)]
                );
            }
            answers[c] = got[2].len();
        }
    }
    let held_after = column_layers_held(&layered);
    // Sizes after the rounds: with the sample and attribute layers and record caches
    // the queries led the managers to hold.
    let plain_bytes = sizes(&plain)?;
    let layered_bytes = sizes(&layered)?;

    println!(
        "analytics: {} rounds; PufferDB {:.1} MB on disk, {:.1} MB in memory ({:.1} MB with column layers, of which layers {:.1} MB); SQLite {:.1} MB (with indexes)",
        args.rounds,
        plain_bytes.disk as f64 / 1e6,
        plain_bytes.memory as f64 / 1e6,
        layered_bytes.memory as f64 / 1e6,
        layered_bytes.column_layers as f64 / 1e6,
        sqlite_bytes as f64 / 1e6
    );
    println!(
        "warm-up: {} passes of the suite, {:.1} s, until the manager held column layers of {}",
        warm_up.passes,
        warm_up.seconds,
        held_before.join(", ")
    );
    if held_after != held_before {
        println!(
            "the manager changed column layers during the rounds: now {}",
            held_after.join(", ")
        );
    }
    let duck_size = match &mut duck {
        Some(duck) => Some(duck.size()?),
        None => {
            println!("DuckDB left out (--skip-duckdb)");
            None
        }
    };
    if let Some((file_bytes, memory)) = &duck_size {
        println!(
            "DuckDB {:.1} MB on disk, {memory} in memory (its own figure)",
            *file_bytes as f64 / 1e6
        );
    }
    println!(
        "{:<18} {:>6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "query",
        "rows",
        "pufferdb ms",
        "+columns ms",
        "no-push ms",
        "sqlite ms",
        "duckdb ms",
        "/sqlite",
        "/duckdb",
        "/no-push"
    );
    let mut rows = Vec::new();
    for (c, case) in CASES.iter().enumerate() {
        let p50 = |engine: usize| quantile_us(&mut times[c][engine].clone(), 0.5) / 1e3;
        let (plain_ms, layered_ms, sqlite_ms) = (p50(0), p50(1), p50(2));
        let (duck_ms, unpushed_ms) = (duck.as_ref().map(|_| p50(3)), p50(4));
        println!(
            "{:<18} {:>6} {:>12.2} {:>12.2} {:>12.2} {:>10.2} {:>10} {:>8.2} {:>8} {:>8.2}",
            case.name,
            answers[c],
            plain_ms,
            layered_ms,
            unpushed_ms,
            sqlite_ms,
            duck_ms.map_or("-".into(), |d| format!("{d:.2}")),
            layered_ms / sqlite_ms,
            duck_ms.map_or("-".into(), |d| format!("{:.2}", layered_ms / d)),
            layered_ms / unpushed_ms,
        );
        rows.push(json!({
            "query": case.name,
            "rows": answers[c],
            "pufferdb_p50_ms": round(plain_ms, 3),
            "pufferdb_columns_p50_ms": round(layered_ms, 3),
            "pufferdb_columns_aggregates_in_datafusion_p50_ms": round(unpushed_ms, 3),
            "sqlite_p50_ms": round(sqlite_ms, 3),
            "duckdb_p50_ms": duck_ms.map(|d| round(d, 3)),
        }));
    }
    let faster = rows
        .iter()
        .filter(|r| r["pufferdb_columns_p50_ms"].as_f64() < r["sqlite_p50_ms"].as_f64())
        .count();
    println!(
        "PufferDB with column layers faster than SQLite on {faster} of {} queries (ratio: with column layers / SQLite)",
        CASES.len()
    );
    println!(
        "{}",
        json!({
            "experiment": "analytics",
            "rounds": args.rounds,
            "datasets": [args.bookings.display().to_string(), args.wikiticker.display().to_string()],
            "pufferdb_disk_bytes": plain_bytes.disk,
            "pufferdb_memory_bytes": plain_bytes.memory,
            "pufferdb_columns_memory_bytes": layered_bytes.memory,
            "column_layer_bytes": layered_bytes.column_layers,
            "sqlite_bytes": sqlite_bytes,
            "duckdb_file_bytes": duck_size.as_ref().map(|(bytes, _)| bytes),
            "duckdb_memory": duck_size.as_ref().map(|(_, memory)| memory),
            "warm_up_passes": warm_up.passes,
            "warm_up_seconds": round(warm_up.seconds, 1),
            "column_layers_before": held_before,
            "column_layers_after": held_after,
            "pufferdb_columns_faster": faster,
            "queries": rows,
        })
    );
    Ok(())
}

/// The engines, in the order of the measurements.
const ENGINES: [&str; 5] = [
    "PufferDB",
    "PufferDB with column layers",
    "SQLite",
    "DuckDB",
    "PufferDB with column layers, aggregates in DataFusion",
];

/// DuckDB in a Python process of its own (`duckdb_peer.py`), spoken to in JSON lines.
struct DuckPeer {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl DuckPeer {
    /// Starts the peer on a database file at `path` and loads `tables` (and the hotels
    /// dimension) into it through CSV files written next to it.
    fn start(
        python: Option<&Path>,
        path: &Path,
        tables: &[(&str, ImportedTable)],
    ) -> anyhow::Result<DuckPeer> {
        let python = match python {
            Some(python) => python.to_path_buf(),
            None if Path::new("target/pyenv/bin/python").is_file() => {
                PathBuf::from("target/pyenv/bin/python")
            }
            None => PathBuf::from("python3"),
        };
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("duckdb_peer.py");
        let mut child = std::process::Command::new(&python)
            .arg(&script)
            .arg(path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} {}", python.display(), script.display()))?;
        let mut peer = DuckPeer {
            input: child.stdin.take().context("the peer's stdin")?,
            output: std::io::BufReader::new(child.stdout.take().context("the peer's stdout")?),
            child,
        };
        let dir = path.parent().context("the peer's directory")?;
        for (name, table) in tables {
            let rows = table
                .rows
                .iter()
                .map(|row| (row.key.clone(), row.values.clone()));
            peer.load(dir, name, &table.schema, rows)?;
        }
        let region = Attribute {
            name: "region".into(),
            attr_type: AttrType::String,
        };
        let hotels = HOTELS.iter().map(|(hotel, region)| {
            (
                hotel.as_bytes().to_vec(),
                vec![Some(Value::String(region.as_bytes().to_vec()))],
            )
        });
        peer.load(dir, "hotels", &Schema::new("hotel", vec![region])?, hotels)?;
        Ok(peer)
    }

    fn request(&mut self, request: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        use std::io::{BufRead, Write};
        writeln!(self.input, "{request}").context("writing to the DuckDB peer")?;
        self.input.flush()?;
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .context("reading the DuckDB peer")?;
        ensure!(!line.is_empty(), "the DuckDB peer ended");
        let answer: serde_json::Value = serde_json::from_str(&line)?;
        if let Some(error) = answer["error"].as_str() {
            anyhow::bail!(
                "DuckDB: {error} (install it with `pip install duckdb` into the Python given by --python, or pass --skip-duckdb)"
            );
        }
        Ok(answer)
    }

    /// Writes `rows` as CSV (keys and strings quoted, NULL an empty unquoted field,
    /// timestamps as microseconds) and loads them as table `name`.
    fn load(
        &mut self,
        dir: &Path,
        name: &str,
        schema: &Schema,
        rows: impl Iterator<Item = (Vec<u8>, Vec<Option<Value>>)>,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        let quoted = |bytes: &[u8]| {
            format!(
                "\"{}\"",
                String::from_utf8_lossy(bytes).replace('"', "\"\"")
            )
        };
        let csv = dir.join(format!("{name}.csv"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&csv)?);
        let header: Vec<String> = std::iter::once(&schema.key)
            .chain(schema.attributes.iter().map(|a| &a.name))
            .map(|n| quoted(n.as_bytes()))
            .collect();
        writeln!(out, "{}", header.join(","))?;
        for (key, values) in rows {
            let mut line = quoted(&key);
            for value in values {
                line.push(',');
                match value {
                    None => {}
                    Some(Value::String(s)) => line.push_str(&quoted(&s)),
                    Some(Value::Int(x) | Value::Timestamp(x)) => line.push_str(&x.to_string()),
                    Some(Value::Float(x)) => line.push_str(&x.to_string()),
                    Some(Value::Bool(b)) => line.push_str(if b { "true" } else { "false" }),
                }
            }
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        let columns: Vec<serde_json::Value> = std::iter::once(json!([schema.key, "string"]))
            .chain(
                schema
                    .attributes
                    .iter()
                    .map(|a| json!([a.name, a.attr_type.name()])),
            )
            .collect();
        self.request(json!({"load": {"table": name, "csv": csv, "columns": columns}}))?;
        Ok(())
    }

    /// The rows of `query` and the time DuckDB took to answer and fetch them.
    fn query(&mut self, query: &str) -> anyhow::Result<(Vec<Vec<Cell>>, std::time::Duration)> {
        let answer = self.request(json!({ "query": query }))?;
        let micros = answer["micros"].as_f64().context("no time in the answer")?;
        let rows = answer["rows"]
            .as_array()
            .context("no rows in the answer")?
            .iter()
            .map(|row| {
                row.as_array()
                    .map(|cells| {
                        cells
                            .iter()
                            .map(|cell| match cell {
                                serde_json::Value::Null => Cell::Null,
                                serde_json::Value::Number(n) => {
                                    Cell::Number(n.as_f64().unwrap_or(f64::NAN))
                                }
                                serde_json::Value::String(s) => Cell::Text(s.clone()),
                                other => Cell::Text(other.to_string()),
                            })
                            .collect()
                    })
                    .context("a row that is not a list")
            })
            .collect::<anyhow::Result<_>>()?;
        Ok((rows, std::time::Duration::from_secs_f64(micros / 1e6)))
    }

    /// The database file's bytes and DuckDB's own figure of its memory.
    fn size(&mut self) -> anyhow::Result<(u64, String)> {
        let answer = self.request(json!({"size": true}))?;
        Ok((
            answer["file_bytes"].as_u64().unwrap_or(0),
            answer["memory"].as_str().unwrap_or("?").to_string(),
        ))
    }
}

impl Drop for DuckPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A database of the suite's tables (and the hotels dimension), compacted.
fn open_puffer(dir: &Path, tables: &[(&str, ImportedTable)]) -> anyhow::Result<Arc<Database>> {
    let db = Arc::new(Database::open(dir, Default::default())?);
    for (name, table) in tables {
        load_puffer(&db, name, table)?;
    }
    let region = Attribute {
        name: "region".into(),
        attr_type: AttrType::String,
    };
    db.create_table("hotels", Schema::new("hotel", vec![region])?)?;
    let hotels = HOTELS
        .iter()
        .map(|(hotel, region)| {
            let mut record = Record::new(*hotel);
            record
                .values
                .insert("region".into(), Value::String(region.as_bytes().to_vec()));
            WriteOp::Put(record)
        })
        .collect();
    db.write_batch(vec![("hotels".into(), hotels)])?;
    for name in db.table_names() {
        db.table(&name)?.compact_all()?;
    }
    Ok(db)
}

/// A database's bytes: on disk, in memory, and of it in column layers.
struct Sizes {
    disk: u64,
    memory: u64,
    column_layers: u64,
}

fn sizes(db: &Database) -> anyhow::Result<Sizes> {
    let mut sizes = Sizes {
        disk: 0,
        memory: 0,
        column_layers: 0,
    };
    for name in db.table_names() {
        let stats = db.table(&name)?.stats()?;
        sizes.disk += stats.disk_bytes;
        sizes.memory += stats.memory_bytes;
    }
    for replica in db.node().status().replicas {
        sizes.column_layers += replica
            .column_layers
            .iter()
            .map(|c| c.layers.held_bytes)
            .sum::<u64>();
    }
    Ok(sizes)
}

/// Pins every attribute's column layers of every replica (`Drop`: none is bought).
fn pin_column_layers(db: &Database, pin: AttributePin) -> anyhow::Result<()> {
    let node = db.node();
    for replica in node.status().replicas {
        let schema = db.table(&replica.table)?.schema();
        for attribute in 0..schema.attributes.len() as u16 {
            node.pin_attribute(replica.id, LayerKind::Column, attribute, Some(pin))?;
        }
    }
    Ok(())
}

/// The column layers the manager holds whole (every segment), as `table.attribute`,
/// sorted.
fn column_layers_held(db: &Database) -> Vec<String> {
    let mut held = Vec::new();
    for replica in db.node().status().replicas {
        let Ok(table) = db.table(&replica.table) else {
            continue;
        };
        let schema = table.schema();
        for c in &replica.column_layers {
            if c.target && c.layers.segments_held == c.layers.segments {
                let name = schema
                    .attributes
                    .get(c.layers.attribute as usize)
                    .map_or("?", |a| a.name.as_str());
                held.push(format!("{}.{name}", replica.table));
            }
        }
    }
    held.sort();
    held.dedup();
    held
}

struct WarmUp {
    passes: usize,
    seconds: f64,
}

/// Most passes of the suite the warm-up runs before giving up on the manager settling.
const WARM_UP_PASSES_MAX: usize = 12;

/// Runs the suite on `db` until its layer manager (ticking in the background) holds,
/// whole, every column layer it has decided to buy and the set held did not change over
/// the last pass.
fn warm_up(db: &Arc<Database>, options: &AnalyticsOptions) -> anyhow::Result<WarmUp> {
    let started = Instant::now();
    let mut last = Vec::new();
    for pass in 1..=WARM_UP_PASSES_MAX {
        for case in CASES {
            puffer_rows(db, case.puffer, options)
                .with_context(|| format!("warm-up, {}", case.name))?;
        }
        let status = db.node().status();
        let settled = status.replicas.iter().all(|r| {
            r.column_layers.iter().all(|c| {
                !c.layers.building && (!c.target || c.layers.segments_held == c.layers.segments)
            })
        });
        let held = column_layers_held(db);
        if settled && !held.is_empty() && held == last {
            return Ok(WarmUp {
                passes: pass,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        last = held;
    }
    anyhow::bail!(
        "the layer manager did not settle on column layers in {WARM_UP_PASSES_MAX} passes (holding {})",
        last.join(", ")
    )
}

/// Creates table `name` with `table`'s schema and writes its rows.
fn load_puffer(db: &Database, name: &str, table: &ImportedTable) -> anyhow::Result<()> {
    db.create_table(name, table.schema.clone())?;
    for start in (0..table.len()).step_by(1000) {
        let ops = (start..(start + 1000).min(table.len()))
            .map(|row| WriteOp::Put(table.record(row)))
            .collect();
        db.write_batch(vec![(name.to_string(), ops)])?;
    }
    Ok(())
}

/// Creates table `name` in SQLite with the same columns (timestamps as microseconds,
/// booleans as 0 and 1) and inserts the rows in one transaction.
fn load_sqlite(
    sqlite: &rusqlite::Connection,
    name: &str,
    table: &ImportedTable,
) -> anyhow::Result<()> {
    let schema = &table.schema;
    let columns: Vec<String> = std::iter::once(format!("\"{}\" TEXT PRIMARY KEY", schema.key))
        .chain(schema.attributes.iter().map(|a| {
            let kind = match a.attr_type {
                AttrType::String => "TEXT",
                AttrType::Int | AttrType::Bool | AttrType::Timestamp => "INTEGER",
                AttrType::Float => "REAL",
            };
            format!("\"{}\" {kind}", a.name)
        }))
        .collect();
    sqlite.execute_batch(&format!("CREATE TABLE {name} ({})", columns.join(", ")))?;
    let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
    let transaction = sqlite.unchecked_transaction()?;
    {
        let mut insert =
            transaction.prepare(&format!("INSERT INTO {name} VALUES ({})", marks.join(", ")))?;
        for row in &table.rows {
            let values = std::iter::once(SqlValue::Text(String::from_utf8_lossy(&row.key).into()))
                .chain(row.values.iter().map(|v| match v {
                    None => SqlValue::Null,
                    Some(Value::String(s)) => SqlValue::Text(String::from_utf8_lossy(s).into()),
                    Some(Value::Int(x) | Value::Timestamp(x)) => SqlValue::Integer(*x),
                    Some(Value::Float(x)) => SqlValue::Real(*x),
                    Some(Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
                }));
            insert.execute(rusqlite::params_from_iter(values))?;
        }
    }
    transaction.commit()?;
    Ok(())
}

fn puffer_rows(
    db: &Arc<Database>,
    query: &str,
    options: &AnalyticsOptions,
) -> anyhow::Result<Vec<Vec<Cell>>> {
    let answer = run_analytics(db, query, None, options)?;
    let Answer::Computed {
        rows, truncated, ..
    } = answer
    else {
        anyhow::bail!("not a computed answer: {answer:?}");
    };
    ensure!(!truncated, "the answer was cut");
    Ok(rows
        .iter()
        .map(|row| row.iter().map(|v| Cell::of_value(v.as_ref())).collect())
        .collect())
}

fn sqlite_rows(sqlite: &rusqlite::Connection, query: &str) -> anyhow::Result<Vec<Vec<Cell>>> {
    let mut statement = sqlite.prepare_cached(query)?;
    let width = statement.column_count();
    let rows = statement.query_map([], |row| {
        (0..width)
            .map(|i| {
                Ok(match row.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(x) => Cell::Number(x as f64),
                    ValueRef::Real(x) => Cell::Number(x),
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        Cell::Text(String::from_utf8_lossy(t).into_owned())
                    }
                })
            })
            .collect::<rusqlite::Result<Vec<Cell>>>()
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
