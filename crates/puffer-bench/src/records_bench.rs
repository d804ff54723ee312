//! `puffer-bench records`: loads CSV / JSON-lines files as one table into a shard and
//! measures load speed, freshness lag per stage, footprint and query latencies. Every
//! answer is checked against a naive scan of the parsed rows kept in memory.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aho_corasick::AhoCorasick;
use anyhow::{bail, ensure, Context};
use puffer_index::BuildOptions;
use puffer_store::schema::display_key;
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, SearchResult, Shard,
    ShardOptions, ShardStats, StoreError, Value, WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::stats::{peak_rss_bytes, quantile_us, round};

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

const WRITER_THREADS: usize = 4;
const OVERLOAD_BACKOFF: Duration = Duration::from_millis(10);
const WATERMARK_POLL: Duration = Duration::from_millis(1);
/// How long after the last acknowledgement the monitor waits for the compressed stage.
const COMPRESSION_TIMEOUT: Duration = Duration::from_secs(120);
const SEARCH_LIMIT: usize = 10;
const RANGE_COUNT_QUERIES: usize = 50;
/// Equality queries skip free-text columns, whose values are (nearly) unique.
const EQ_MAX_AVERAGE_VALUE_BYTES: f64 = 40.0;
const ROW_NUMBER_KEY: &str = "row_number";
const MISMATCH_EXAMPLES: usize = 20;
const SLOWEST_SHOWN: usize = 3;

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
// Reading the inputs: text cells, columns the union over files.

/// Where a row came from, for error messages.
#[derive(Clone, Copy)]
struct Origin {
    file: usize,
    line: u64,
}

/// One input row: its present cells as (column id, text).
struct RawRow {
    origin: Origin,
    cells: Vec<(usize, String)>,
}

/// The inputs as text; columns in order of first appearance.
#[derive(Default)]
struct RawTable {
    files: Vec<String>,
    columns: Vec<String>,
    column_ids: HashMap<String, usize>,
    rows: Vec<RawRow>,
    input_bytes: u64,
}

impl RawTable {
    fn column_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.column_ids.get(name) {
            return id;
        }
        self.columns.push(name.to_string());
        self.column_ids
            .insert(name.to_string(), self.columns.len() - 1);
        self.columns.len() - 1
    }

    fn push_row(&mut self, origin: Origin, cells: impl IntoIterator<Item = (usize, String)>) {
        let cells = cells.into_iter().filter(|(_, text)| is_present(text));
        self.rows.push(RawRow {
            origin,
            cells: cells.collect(),
        });
    }

    fn place(&self, origin: Origin) -> String {
        format!("{} line {}", self.files[origin.file], origin.line)
    }
}

/// An empty cell or the literal `NULL` means the attribute is absent.
fn is_present(text: &str) -> bool {
    !text.is_empty() && text != "NULL"
}

enum Format {
    Csv,
    JsonLines,
}

fn format_of(path: &Path) -> anyhow::Result<Format> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    if name.ends_with(".csv") {
        Ok(Format::Csv)
    } else if name.ends_with(".jsonl") || name.ends_with(".json") {
        Ok(Format::JsonLines)
    } else {
        bail!(
            "{}: expected a .csv, .jsonl or .json file (optionally .gz)",
            path.display()
        )
    }
}

fn read_decompressed(path: &Path) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    let read = if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::MultiGzDecoder::new(file).read_to_end(&mut bytes)
    } else {
        std::io::BufReader::new(file).read_to_end(&mut bytes)
    };
    read.with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

fn read_inputs(paths: &[PathBuf]) -> anyhow::Result<RawTable> {
    let mut raw = RawTable::default();
    for (file, path) in paths.iter().enumerate() {
        let format = format_of(path)?;
        let bytes = read_decompressed(path)?;
        raw.input_bytes += bytes.len() as u64;
        raw.files.push(path.display().to_string());
        match format {
            Format::Csv => read_csv(&bytes, file, &mut raw),
            Format::JsonLines => read_json_lines(&bytes, file, &mut raw),
        }
        .with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(raw)
}

/// RFC 4180 CSV with a header row; quoted fields may hold delimiters and newlines.
fn read_csv(bytes: &[u8], file: usize, raw: &mut RawTable) -> anyhow::Result<()> {
    let mut reader = csv::ReaderBuilder::new().from_reader(bytes);
    let headers = reader.headers().context("reading the header row")?.clone();
    let mut ids = Vec::with_capacity(headers.len());
    for name in headers.iter() {
        let id = raw.column_id(name);
        ensure!(
            !ids.contains(&id),
            "column {name:?} appears twice in the header"
        );
        ids.push(id);
    }
    for record in reader.records() {
        let record = record?;
        let line = record.position().map_or(0, |p| p.line());
        let cells = ids
            .iter()
            .zip(record.iter())
            .map(|(&id, text)| (id, text.to_string()));
        raw.push_row(Origin { file, line }, cells);
    }
    Ok(())
}

/// One JSON object per line; nested values are kept as their JSON text.
fn read_json_lines(bytes: &[u8], file: usize, raw: &mut RawTable) -> anyhow::Result<()> {
    let text = std::str::from_utf8(bytes).context("the file is not UTF-8")?;
    for (index, line) in text.lines().enumerate() {
        let line_number = index as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("line {line_number}"))?;
        let serde_json::Value::Object(object) = parsed else {
            bail!("line {line_number}: expected a JSON object");
        };
        let cells: Vec<(usize, String)> = object
            .into_iter()
            .filter_map(|(name, value)| json_cell(value).map(|text| (raw.column_id(&name), text)))
            .collect();
        raw.push_row(
            Origin {
                file,
                line: line_number,
            },
            cells,
        );
    }
    Ok(())
}

/// A JSON value as cell text; `null` is absent.
fn json_cell(value: serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

// ---------------------------------------------------------------------------------
// Keys.

enum KeySource {
    Column(String),
    RowNumber,
}

/// Rows with their keys taken out; cells renumbered to attribute ids.
struct KeyedTable {
    key_name: String,
    attribute_names: Vec<String>,
    keys: Vec<Vec<u8>>,
    cells: Vec<Vec<(usize, String)>>,
    duplicates_skipped: u64,
}

/// The key's name and its column (None for row numbers).
fn key_column(raw: &RawTable, source: &KeySource) -> anyhow::Result<(String, Option<usize>)> {
    match source {
        KeySource::Column(name) => {
            let Some(&id) = raw.column_ids.get(name) else {
                bail!("no input has a column {name:?} (for --key)");
            };
            Ok((name.clone(), Some(id)))
        }
        KeySource::RowNumber => {
            ensure!(
                !raw.column_ids.contains_key(ROW_NUMBER_KEY),
                "an input has a column {ROW_NUMBER_KEY:?}, the key's name with --key-row-number"
            );
            Ok((ROW_NUMBER_KEY.to_string(), None))
        }
    }
}

/// Takes each row's key out of its cells. Empty keys and keys repeated within one file
/// are refused; a key an earlier file already had is skipped (and counted), so that
/// several scrapes can be loaded as one table.
fn extract_keys(mut raw: RawTable, source: &KeySource) -> anyhow::Result<KeyedTable> {
    let (key_name, key_column) = key_column(&raw, source)?;
    // Attribute ids are column ids with the key column left out.
    let attribute_id = |column: usize| match key_column {
        Some(key) if column > key => column - 1,
        _ => column,
    };
    let rows = std::mem::take(&mut raw.rows);
    let mut keyed = KeyedTable {
        attribute_names: (0..raw.columns.len())
            .filter(|&id| Some(id) != key_column)
            .map(|id| raw.columns[id].clone())
            .collect(),
        keys: Vec::with_capacity(rows.len()),
        cells: Vec::with_capacity(rows.len()),
        duplicates_skipped: 0,
        key_name,
    };
    let mut first_seen: HashMap<Vec<u8>, Origin> = HashMap::new();
    for (number, mut row) in rows.into_iter().enumerate() {
        let key = match key_column {
            Some(column) => take_cell(&mut row.cells, column)
                .map(String::into_bytes)
                .with_context(|| {
                    let place = raw.place(row.origin);
                    format!("{place}: the key {:?} is empty", keyed.key_name)
                })?,
            None => number.to_string().into_bytes(),
        };
        if let Some(earlier) = first_seen.get(&key) {
            ensure!(
                earlier.file != row.origin.file,
                "{}: key {} repeats {}",
                raw.place(row.origin),
                display_key(&key),
                raw.place(*earlier)
            );
            keyed.duplicates_skipped += 1;
            continue;
        }
        first_seen.insert(key.clone(), row.origin);
        keyed.keys.push(key);
        let cells = row.cells.into_iter();
        keyed
            .cells
            .push(cells.map(|(id, text)| (attribute_id(id), text)).collect());
    }
    Ok(keyed)
}

/// Removes and returns the cell of `column`, if present.
fn take_cell(cells: &mut Vec<(usize, String)>, column: usize) -> Option<String> {
    let at = cells.iter().position(|(id, _)| *id == column)?;
    Some(cells.swap_remove(at).1)
}

// ---------------------------------------------------------------------------------
// Types: each column gets the narrowest type all its present values parse as.

/// What the present values of one column parse as.
struct ColumnProfile {
    present: u64,
    text_bytes: u64,
    int: bool,
    float: bool,
    boolean: bool,
    timestamp: bool,
}

impl Default for ColumnProfile {
    fn default() -> Self {
        ColumnProfile {
            present: 0,
            text_bytes: 0,
            int: true,
            float: true,
            boolean: true,
            timestamp: true,
        }
    }
}

impl ColumnProfile {
    fn observe(&mut self, text: &str) {
        self.present += 1;
        self.text_bytes += text.len() as u64;
        self.int = self.int && text.parse::<i64>().is_ok();
        self.float = self.float && parse_float(text).is_some();
        self.boolean = self.boolean && parse_bool(text).is_some();
        self.timestamp = self.timestamp && parse_timestamp_micros(text).is_some();
    }

    /// Int, else float, else bool, else timestamp, else string; a column without any
    /// value is a string column.
    fn attr_type(&self) -> AttrType {
        match self {
            ColumnProfile { present: 0, .. } => AttrType::String,
            ColumnProfile { int: true, .. } => AttrType::Int,
            ColumnProfile { float: true, .. } => AttrType::Float,
            ColumnProfile { boolean: true, .. } => AttrType::Bool,
            ColumnProfile {
                timestamp: true, ..
            } => AttrType::Timestamp,
            _ => AttrType::String,
        }
    }

    fn average_bytes(&self) -> f64 {
        self.text_bytes as f64 / self.present.max(1) as f64
    }
}

/// A finite float; -0.0 becomes 0.0, as the store keeps it.
fn parse_float(text: &str) -> Option<f64> {
    let value = text.parse::<f64>().ok().filter(|f| f.is_finite())?;
    Some(if value == 0.0 { 0.0 } else { value })
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "t" | "true" => Some(true),
        "f" | "false" => Some(false),
        _ => None,
    }
}

/// Microseconds since the epoch of `YYYY-MM-DD` (midnight UTC) or of an RFC 3339
/// date-time (`T`, `t` or a space between date and time; digits past microseconds cut).
fn parse_timestamp_micros(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let day_micros = parse_date_days(bytes.get(..10)?)? * 86_400_000_000;
    match bytes.get(10) {
        None => Some(day_micros),
        Some(b'T' | b't' | b' ') => {
            let (time_micros, offset_micros) = parse_time_and_offset(&bytes[11..])?;
            Some(day_micros + time_micros - offset_micros)
        }
        Some(_) => None,
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD`, if it is a real date.
fn parse_date_days(bytes: &[u8]) -> Option<i64> {
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let year = digits(&bytes[0..4])?;
    let month = digits(&bytes[5..7])?;
    let day = digits(&bytes[8..10])?;
    if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

/// `HH:MM:SS[.fraction]` then `Z` or `±HH:MM`: (microseconds into the day, offset).
fn parse_time_and_offset(bytes: &[u8]) -> Option<(i64, i64)> {
    if bytes.len() < 9 || bytes[2] != b':' || bytes[5] != b':' {
        return None;
    }
    let (hour, minute, second) = (
        digits(&bytes[0..2])?,
        digits(&bytes[3..5])?,
        digits(&bytes[6..8])?,
    );
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &bytes[8..];
    let mut fraction_micros = 0;
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let len = after_dot.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        for position in 0..6 {
            let digit = after_dot[..len].get(position).map_or(0, |c| c - b'0');
            fraction_micros = fraction_micros * 10 + i64::from(digit);
        }
        rest = &after_dot[len..];
    }
    let offset_micros = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (hours, minutes) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = (hours * 60 + minutes) * 60_000_000;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };
    let time_micros = ((hour * 60 + minute) * 60 + second) * 1_000_000 + fraction_micros;
    Some((time_micros, offset_micros))
}

/// A decimal number of ASCII digits only (no sign).
fn digits(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(bytes.iter().fold(0, |n, c| n * 10 + i64::from(c - b'0')))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// days_from_civil: years start in March so the leap day comes last).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The value of `text` in a column of type `attr_type`, which was inferred from it.
fn parse_value(text: &str, attr_type: AttrType) -> Value {
    let parsed = match attr_type {
        AttrType::String => Some(Value::str(text)),
        AttrType::Int => text.parse().ok().map(Value::Int),
        AttrType::Float => parse_float(text).map(Value::Float),
        AttrType::Bool => parse_bool(text).map(Value::Bool),
        AttrType::Timestamp => parse_timestamp_micros(text).map(Value::Timestamp),
    };
    parsed.expect("the column's type was inferred from its values")
}

// ---------------------------------------------------------------------------------
// The typed table: what the store is given, and the oracle's data.

struct Row {
    key: Vec<u8>,
    /// By attribute id.
    values: Vec<Option<Value>>,
}

struct Table {
    key_name: String,
    attributes: Vec<Attribute>,
    average_bytes: Vec<f64>,
    rows: Vec<Row>,
    row_of_key: HashMap<Vec<u8>, u32>,
    input_bytes: u64,
    duplicates_skipped: u64,
}

impl Table {
    fn record(&self, row: u32) -> Record {
        let row = &self.rows[row as usize];
        let mut record = Record::new(row.key.clone());
        for (attribute, value) in self.attributes.iter().zip(&row.values) {
            if let Some(value) = value {
                record.values.insert(attribute.name.clone(), value.clone());
            }
        }
        record
    }

    fn value(&self, row: u32, column: usize) -> Option<&Value> {
        self.rows[row as usize].values[column].as_ref()
    }

    /// Rows whose value in `column` is present and passes `keep`.
    fn rows_with(&self, column: usize, keep: impl Fn(&Value) -> bool) -> Vec<u32> {
        (0..self.rows.len() as u32)
            .filter(|&row| self.value(row, column).is_some_and(&keep))
            .collect()
    }
}

fn load_table(paths: &[PathBuf], key_source: &KeySource) -> anyhow::Result<Table> {
    let raw = read_inputs(paths)?;
    let input_bytes = raw.input_bytes;
    let keyed = extract_keys(raw, key_source)?;
    Ok(type_table(keyed, input_bytes))
}

fn type_table(keyed: KeyedTable, input_bytes: u64) -> Table {
    let mut profiles: Vec<ColumnProfile> = keyed
        .attribute_names
        .iter()
        .map(|_| ColumnProfile::default())
        .collect();
    for cells in &keyed.cells {
        for (id, text) in cells {
            profiles[*id].observe(text);
        }
    }
    let attributes: Vec<Attribute> = keyed
        .attribute_names
        .iter()
        .zip(&profiles)
        .map(|(name, profile)| Attribute {
            name: name.clone(),
            attr_type: profile.attr_type(),
        })
        .collect();
    let rows: Vec<Row> = keyed
        .keys
        .into_iter()
        .zip(keyed.cells)
        .map(|(key, cells)| {
            let mut values = vec![None; attributes.len()];
            for (id, text) in cells {
                values[id] = Some(parse_value(&text, attributes[id].attr_type));
            }
            Row { key, values }
        })
        .collect();
    let row_of_key = rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row.key.clone(), i as u32))
        .collect();
    Table {
        key_name: keyed.key_name,
        attributes,
        average_bytes: profiles.iter().map(ColumnProfile::average_bytes).collect(),
        rows,
        row_of_key,
        input_bytes,
        duplicates_skipped: keyed.duplicates_skipped,
    }
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
// Load: writer threads, and a monitor of the watermarks.

/// An SCU: the rows it puts, as operations built before the clock starts.
struct Batch {
    rows: Range<u32>,
    ops: Vec<WriteOp>,
}

fn put_ops(table: &Table, rows: Range<u32>) -> Vec<WriteOp> {
    rows.map(|row| WriteOp::Put(table.record(row))).collect()
}

/// One acknowledged SCU.
struct Ack {
    seq: u64,
    acked_at: Instant,
    /// Time from the acknowledgement until a read confirmed the SCU visible (None if it
    /// was not).
    log_lag: Option<Duration>,
}

#[derive(Default)]
struct WriterReport {
    acks: Vec<Ack>,
    overloaded_retries: u64,
    problems: Vec<String>,
}

/// When each watermark first showed each value, as polled.
#[derive(Default)]
struct WatermarkLog {
    sorted: Vec<(u64, Instant)>,
    compressed: Vec<(u64, Instant)>,
    slowest_poll: Duration,
    timed_out: bool,
}

struct LoadReport {
    /// Peak RSS once the rows are parsed and the SCUs built, before the first write:
    /// the benchmark's own share of `peak_rss_bytes`.
    peak_rss_before_writes_bytes: u64,
    /// From the first write until the last acknowledgement.
    elapsed: Duration,
    acks: Vec<Ack>,
    overloaded_retries: u64,
    problems: Vec<String>,
    watermarks: WatermarkLog,
}

/// Writes the rows in SCUs of `batch_rows` puts from WRITER_THREADS threads while a
/// monitor records the watermarks, until every SCU is in the compressed stage (or the
/// monitor gives up).
fn load(shard: &Shard, table: &Table, batch_rows: usize) -> anyhow::Result<LoadReport> {
    let per_writer = deal_batches(table, batch_rows);
    let peak_rss_before_writes_bytes = peak_rss_bytes();
    // u64::MAX: still loading; then the last SCU's seq (0 after a failure: stop now).
    let target = AtomicU64::new(u64::MAX);
    let started = Instant::now();
    let (reports, watermarks) = std::thread::scope(|scope| {
        let monitor = scope.spawn(|| watch_watermarks(shard, &target));
        let writers: Vec<_> = per_writer
            .into_iter()
            .map(|batches| scope.spawn(move || write_batches(shard, table, batches)))
            .collect();
        let reports: anyhow::Result<Vec<WriterReport>> = writers
            .into_iter()
            .map(|writer| writer.join().expect("a writer thread panicked"))
            .collect();
        let last_seq = reports.as_ref().ok().and_then(|reports| {
            let acks = reports.iter().flat_map(|r| &r.acks);
            acks.map(|ack| ack.seq).max()
        });
        target.store(last_seq.unwrap_or(0), Ordering::SeqCst);
        (
            reports,
            monitor.join().expect("the monitor thread panicked"),
        )
    });
    let mut load = LoadReport {
        peak_rss_before_writes_bytes,
        elapsed: Duration::ZERO,
        acks: Vec::new(),
        overloaded_retries: 0,
        problems: Vec::new(),
        watermarks,
    };
    for report in reports? {
        load.acks.extend(report.acks);
        load.overloaded_retries += report.overloaded_retries;
        load.problems.extend(report.problems);
    }
    let acked = load
        .acks
        .iter()
        .map(|ack| ack.acked_at.duration_since(started));
    load.elapsed = acked.max().unwrap_or_default();
    Ok(load)
}

/// The SCUs, dealt round-robin to the writers, each writer's in row order.
fn deal_batches(table: &Table, batch_rows: usize) -> Vec<Vec<Batch>> {
    let mut per_writer: Vec<Vec<Batch>> = (0..WRITER_THREADS).map(|_| Vec::new()).collect();
    let row_count = table.rows.len() as u32;
    for (i, start) in (0..row_count).step_by(batch_rows).enumerate() {
        let rows = start..row_count.min(start.saturating_add(batch_rows as u32));
        per_writer[i % WRITER_THREADS].push(Batch {
            ops: put_ops(table, rows.clone()),
            rows,
        });
    }
    per_writer
}

/// One writer: its batches in order, each retried after a pause while the store says
/// it is overloaded.
fn write_batches(
    shard: &Shard,
    table: &Table,
    batches: Vec<Batch>,
) -> anyhow::Result<WriterReport> {
    let mut report = WriterReport::default();
    for batch in batches {
        let first_row = batch.rows.start;
        let mut ops = batch.ops;
        let seq = loop {
            match shard.write(ops) {
                Ok(seq) => break seq,
                Err(StoreError::Overloaded(_)) => {
                    report.overloaded_retries += 1;
                    std::thread::sleep(OVERLOAD_BACKOFF);
                    // The failed write consumed the operations; rebuilding them only on a
                    // retry keeps copies out of the measured time otherwise.
                    ops = put_ops(table, batch.rows.clone());
                }
                Err(e) => return Err(e).with_context(|| format!("writing rows {:?}", batch.rows)),
            }
        };
        let acked_at = Instant::now();
        let log_lag = read_back(shard, table, first_row, seq, &mut report.problems)
            .then(|| acked_at.elapsed());
        report.acks.push(Ack {
            seq,
            acked_at,
            log_lag,
        });
    }
    Ok(report)
}

/// Reads an SCU's first record right after its acknowledgement: the read's snapshot
/// (the published watermark) must include the SCU and the record must be there.
fn read_back(shard: &Shard, table: &Table, row: u32, seq: u64, problems: &mut Vec<String>) -> bool {
    let key = &table.rows[row as usize].key;
    let problem = match shard.get(key, ReadOptions::default()) {
        Err(e) => Some(format!("read-back of SCU {seq}: {e}")),
        Ok((_, info)) if info.snapshot < seq => Some(format!(
            "read-back of SCU {seq}: the snapshot read was {}",
            info.snapshot
        )),
        Ok((found, _)) => check_get(table, row, found.as_ref())
            .map(|problem| format!("read-back of SCU {seq}: {problem}")),
    };
    match problem {
        Some(problem) => {
            problems.push(problem);
            false
        }
        None => true,
    }
}

/// Polls the watermarks every WATERMARK_POLL until the compressed stage holds SCU
/// `target` (set once the load is acknowledged), or COMPRESSION_TIMEOUT after that.
fn watch_watermarks(shard: &Shard, target: &AtomicU64) -> WatermarkLog {
    let mut log = WatermarkLog::default();
    let mut target_known_at: Option<Instant> = None;
    loop {
        let target_seq = target.load(Ordering::SeqCst);
        let started = Instant::now();
        let marks = shard.watermarks();
        let ended = Instant::now();
        log.slowest_poll = log.slowest_poll.max(ended - started);
        // watermarks() reads the stage set before it takes the manifest lock, which a
        // compaction holds while it builds a segment: the sorted watermark is as of the
        // poll's start, the compressed one as of its end.
        note_rise(&mut log.sorted, marks.sorted, started);
        note_rise(&mut log.compressed, marks.compressed, ended);
        if target_seq != u64::MAX {
            if marks.compressed >= target_seq {
                return log;
            }
            if started.duration_since(*target_known_at.get_or_insert(started)) > COMPRESSION_TIMEOUT
            {
                log.timed_out = true;
                return log;
            }
        }
        std::thread::sleep(WATERMARK_POLL);
    }
}

fn note_rise(history: &mut Vec<(u64, Instant)>, mark: u64, at: Instant) {
    if history.last().is_none_or(|(last, _)| mark > *last) {
        history.push((mark, at));
    }
}

/// Per SCU, the time from its acknowledgement until `history` first showed it (zero if
/// already then); None for SCUs it never showed.
fn stage_lags(acks: &[Ack], history: &[(u64, Instant)]) -> Vec<Option<Duration>> {
    acks.iter()
        .map(|ack| {
            let first = history.partition_point(|(mark, _)| *mark < ack.seq);
            history
                .get(first)
                .map(|(_, at)| at.saturating_duration_since(ack.acked_at))
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Compaction and footprint.

struct Compaction {
    seconds: f64,
    stats: ShardStats,
}

/// Compacts everything into one segment, then checks the record count.
fn compact(
    shard: &Shard,
    table: &Table,
    mismatches: &mut Mismatches,
) -> anyhow::Result<Compaction> {
    let started = Instant::now();
    shard.compact_all()?;
    let seconds = started.elapsed().as_secs_f64();
    let stats = shard.stats()?;
    let (count, _) = shard.count(&Predicate::All, ReadOptions::default())?;
    if count != table.rows.len() as u64 {
        mismatches.record(format!(
            "count(All) after compact_all: expected {}, got {count}",
            table.rows.len()
        ));
    }
    Ok(Compaction { seconds, stats })
}

// ---------------------------------------------------------------------------------
// Queries and their oracle.

/// A condition on one attribute.
#[derive(Clone)]
enum Condition {
    Eq(Value),
    Contains(Vec<u8>),
    Range(Bound<Value>, Bound<Value>),
}

#[derive(Clone)]
struct Case {
    column: usize,
    condition: Condition,
}

impl Case {
    fn predicate(&self, table: &Table) -> Predicate {
        let name = table.attributes[self.column].name.clone();
        match &self.condition {
            Condition::Eq(value) => Predicate::Eq(name, value.clone()),
            Condition::Contains(needle) => Predicate::Contains(name, needle.clone()),
            Condition::Range(lower, upper) => Predicate::Range {
                attribute: name,
                lower: lower.clone(),
                upper: upper.clone(),
            },
        }
    }

    fn label(&self, table: &Table) -> String {
        let name = &table.attributes[self.column].name;
        match &self.condition {
            Condition::Eq(value) => format!("{name} = {}", show(value)),
            Condition::Contains(needle) => {
                format!("{name} contains {:?}", String::from_utf8_lossy(needle))
            }
            Condition::Range(lower, upper) => {
                let (open, low) = match lower {
                    Bound::Included(v) => ("[", show(v)),
                    Bound::Excluded(v) => ("(", show(v)),
                    Bound::Unbounded => ("(", "-inf".into()),
                };
                let (close, high) = match upper {
                    Bound::Included(v) => ("]", show(v)),
                    Bound::Excluded(v) => (")", show(v)),
                    Bound::Unbounded => (")", "+inf".into()),
                };
                format!("{name} in {open}{low}, {high}{close}")
            }
        }
    }
}

/// A case with the oracle's answer (ascending row numbers), computed before timing.
struct Planned {
    case: Case,
    matches: Vec<u32>,
}

fn plan(table: &Table, cases: Vec<Case>) -> anyhow::Result<Vec<Planned>> {
    cases
        .into_iter()
        .map(|case| {
            let matches = oracle_matches(table, &case)?;
            Ok(Planned { case, matches })
        })
        .collect()
}

/// The rows satisfying `case`, by a scan of every row.
fn oracle_matches(table: &Table, case: &Case) -> anyhow::Result<Vec<u32>> {
    let finder = match &case.condition {
        Condition::Contains(needle) => Some(AhoCorasick::new([needle])?),
        _ => None,
    };
    let holds = |value: &Value| match (&case.condition, value) {
        // Floats are finite with -0.0 made 0.0, so `==` is the store's equality.
        (Condition::Eq(wanted), _) => value == wanted,
        (Condition::Contains(_), Value::String(bytes)) => {
            finder.as_ref().is_some_and(|f| f.is_match(bytes))
        }
        (Condition::Contains(_), _) => false,
        (Condition::Range(lower, upper), _) => within(value, lower, upper),
    };
    Ok(table.rows_with(case.column, holds))
}

/// Order of two values of one column.
fn order(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) | (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        // Finite, and -0.0 was made 0.0: total_cmp is the numeric order.
        (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        _ => panic!("values of one column have one type"),
    }
}

fn within(value: &Value, lower: &Bound<Value>, upper: &Bound<Value>) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    let above = match lower {
        Bound::Included(bound) => order(value, bound) != Less,
        Bound::Excluded(bound) => order(value, bound) == Greater,
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(bound) => order(value, bound) != Greater,
        Bound::Excluded(bound) => order(value, bound) == Less,
        Bound::Unbounded => true,
    };
    above && below
}

/// Columns eligible for a kind of query, each with the rows it can draw values from.
type Candidates = Vec<(usize, Vec<u32>)>;

/// Draws query cases from random rows.
struct Sampler<'t> {
    table: &'t Table,
    rng: StdRng,
    eq_columns: Candidates,
    contains_columns: Candidates,
    range_columns: Candidates,
}

impl<'t> Sampler<'t> {
    fn new(table: &'t Table, seed: u64) -> Sampler<'t> {
        let candidates = |eligible: &dyn Fn(usize) -> bool, keep: &dyn Fn(&Value) -> bool| {
            (0..table.attributes.len())
                .filter(|&column| eligible(column))
                .map(|column| (column, table.rows_with(column, keep)))
                .filter(|(_, rows)| !rows.is_empty())
                .collect()
        };
        let attr_type = |column: usize| table.attributes[column].attr_type;
        Sampler {
            table,
            rng: StdRng::seed_from_u64(seed),
            eq_columns: candidates(
                &|column| table.average_bytes[column] < EQ_MAX_AVERAGE_VALUE_BYTES,
                &|_| true,
            ),
            // A needle is 4 to 8 bytes cut from a value, so values need 4 bytes.
            contains_columns: candidates(
                &|column| attr_type(column) == AttrType::String,
                &|v| matches!(v, Value::String(bytes) if bytes.len() >= 4),
            ),
            range_columns: candidates(
                &|column| {
                    matches!(
                        attr_type(column),
                        AttrType::Int | AttrType::Float | AttrType::Timestamp
                    )
                },
                &|_| true,
            ),
        }
    }

    fn row(&mut self) -> u32 {
        self.rng.gen_range(0..self.table.rows.len() as u32)
    }

    fn eq_case(&mut self) -> Option<Case> {
        let (column, row) = pick(&mut self.rng, &self.eq_columns)?;
        let value = self.table.value(row, column)?.clone();
        Some(Case {
            column,
            condition: Condition::Eq(value),
        })
    }

    fn contains_case(&mut self) -> Option<Case> {
        // Cuts can fail on runs of multi-byte characters; a few draws always succeed
        // in practice.
        for _ in 0..100 {
            let (column, row) = pick(&mut self.rng, &self.contains_columns)?;
            let Some(Value::String(bytes)) = self.table.value(row, column) else {
                continue;
            };
            if let Some(needle) = cut_needle(bytes, &mut self.rng) {
                return Some(Case {
                    column,
                    condition: Condition::Contains(needle),
                });
            }
        }
        None
    }

    fn range_case(&mut self) -> Option<Case> {
        let (column, first) = pick(&mut self.rng, &self.range_columns)?;
        let (_, rows) = self.range_columns.iter().find(|(c, _)| *c == column)?;
        let second = rows[self.rng.gen_range(0..rows.len())];
        let a = self.table.value(first, column)?.clone();
        let b = self.table.value(second, column)?.clone();
        let (low, high) = if order(&a, &b).is_gt() {
            (b, a)
        } else {
            (a, b)
        };
        // Both kinds of bound, as they are found by different probes.
        let lower = random_bound(&mut self.rng, low);
        let upper = random_bound(&mut self.rng, high);
        Some(Case {
            column,
            condition: Condition::Range(lower, upper),
        })
    }
}

/// A random column of `candidates` and a random row with a value in it.
fn pick(rng: &mut StdRng, candidates: &Candidates) -> Option<(usize, u32)> {
    if candidates.is_empty() {
        return None;
    }
    let (column, rows) = &candidates[rng.gen_range(0..candidates.len())];
    Some((*column, rows[rng.gen_range(0..rows.len())]))
}

fn random_bound(rng: &mut StdRng, value: Value) -> Bound<Value> {
    if rng.gen_bool(0.5) {
        Bound::Included(value)
    } else {
        Bound::Excluded(value)
    }
}

/// 4 to 8 bytes of `text` on character boundaries (the length is cut back to the last
/// whole character), or None if the draw fell short of 4 bytes.
fn cut_needle(text: &[u8], rng: &mut StdRng) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    if text.len() < 4 {
        return None;
    }
    let len = rng.gen_range(4..=8).min(text.len());
    let mut start = rng.gen_range(0..=text.len() - len);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = start + len;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (end - start >= 4).then(|| text.as_bytes()[start..end].to_vec())
}

/// Disagreements between the store and the oracle; the first few described.
#[derive(Default)]
struct Mismatches {
    count: u64,
    examples: Vec<String>,
}

impl Mismatches {
    fn record(&mut self, what: String) {
        self.count += 1;
        if self.examples.len() < MISMATCH_EXAMPLES {
            eprintln!("mismatch: {what}");
            self.examples.push(what);
        }
    }
}

/// A value for messages: strings quoted and cut, timestamps in microseconds.
fn show(value: &Value) -> String {
    match value {
        Value::String(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            let cut: String = text.chars().take(48).collect();
            let more = if cut.len() < text.len() { "..." } else { "" };
            format!("{cut:?}{more}")
        }
        Value::Int(x) => x.to_string(),
        Value::Float(x) => format!("{x:?}"),
        Value::Bool(x) => x.to_string(),
        Value::Timestamp(micros) => format!("{micros}us"),
    }
}

fn show_present(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_string(), show)
}

/// What is wrong with `found` as the answer to a get of `row`'s key.
fn check_get(table: &Table, row: u32, found: Option<&Record>) -> Option<String> {
    let expected = &table.rows[row as usize];
    let key = display_key(&expected.key);
    let Some(record) = found else {
        return Some(format!("get {key}: not found"));
    };
    let mut differences: Vec<String> = table
        .attributes
        .iter()
        .zip(&expected.values)
        .filter(|(attribute, value)| record.values.get(&attribute.name) != value.as_ref())
        .map(|(attribute, value)| {
            format!(
                "{}: expected {}, got {}",
                attribute.name,
                show_present(value.as_ref()),
                show_present(record.values.get(&attribute.name))
            )
        })
        .collect();
    if record.key != expected.key {
        differences.insert(0, format!("came back as key {}", display_key(&record.key)));
    }
    (!differences.is_empty()).then(|| format!("get {key}: {}", differences.join("; ")))
}

/// What is wrong with `result` as a keys-only, first-SEARCH_LIMIT answer to `planned`.
fn check_first_ten(table: &Table, planned: &Planned, result: &SearchResult) -> Option<String> {
    let total = planned.matches.len();
    let (rows, truncated) = (total.min(SEARCH_LIMIT), total > SEARCH_LIMIT);
    if result.rows.len() != rows || result.truncated != truncated {
        return Some(format!(
            "expected {rows} rows (truncated {truncated}; {total} match), got {} (truncated {})",
            result.rows.len(),
            result.truncated
        ));
    }
    let mut seen = HashSet::new();
    for record in &result.rows {
        let key = display_key(&record.key);
        if !seen.insert(&record.key) {
            return Some(format!("key {key} returned twice"));
        }
        if !record.values.is_empty() {
            return Some(format!(
                "key {key} came with values; the projection was empty"
            ));
        }
        let Some(&row) = table.row_of_key.get(&record.key) else {
            return Some(format!("key {key} is not in the table"));
        };
        if planned.matches.binary_search(&row).is_err() {
            let value = show_present(table.value(row, planned.case.column));
            return Some(format!("key {key} does not match (its value: {value})"));
        }
    }
    None
}

/// Runs every case once to warm up (page faults, caches), then again timed. `run`
/// times only the store's call and describes any disagreement with the oracle.
fn measure<C>(
    cases: &[C],
    mismatches: &mut Mismatches,
    mut run: impl FnMut(&C) -> (Duration, Option<String>),
) -> Vec<Duration> {
    for case in cases {
        run(case);
    }
    cases
        .iter()
        .map(|case| {
            let (took, problem) = run(case);
            if let Some(problem) = problem {
                mismatches.record(problem);
            }
            took
        })
        .collect()
}

fn measure_gets(
    shard: &Shard,
    table: &Table,
    rows: &[u32],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(rows, mismatches, |&row| {
        let key = &table.rows[row as usize].key;
        let started = Instant::now();
        let answer = shard.get(key, ReadOptions::default());
        let took = started.elapsed();
        let problem = match answer {
            Ok((found, _)) => check_get(table, row, found.as_ref()),
            Err(e) => Some(format!("get {}: {e}", display_key(key))),
        };
        (took, problem)
    })
}

fn measure_first_ten(
    shard: &Shard,
    table: &Table,
    planned: &[Planned],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(planned, mismatches, |planned| {
        let query = Query {
            predicate: planned.case.predicate(table),
            projection: Some(Vec::new()),
            limit: Some(SEARCH_LIMIT),
            read: ReadOptions::default(),
        };
        let started = Instant::now();
        let answer = shard.search(&query);
        let took = started.elapsed();
        let problem = match answer {
            Ok(result) => check_first_ten(table, planned, &result),
            Err(e) => Some(e.to_string()),
        };
        let label = planned.case.label(table);
        (
            took,
            problem.map(|p| format!("search {label} limit {SEARCH_LIMIT}: {p}")),
        )
    })
}

fn measure_counts(
    shard: &Shard,
    table: &Table,
    planned: &[Planned],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(planned, mismatches, |planned| {
        let predicate = planned.case.predicate(table);
        let started = Instant::now();
        let answer = shard.count(&predicate, ReadOptions::default());
        let took = started.elapsed();
        let expected = planned.matches.len() as u64;
        let problem = match answer {
            Ok((got, _)) if got == expected => None,
            Ok((got, _)) => Some(format!("expected {expected}, got {got}")),
            Err(e) => Some(e.to_string()),
        };
        let label = planned.case.label(table);
        (took, problem.map(|p| format!("count {label}: {p}")))
    })
}

/// Latency figures of one kind of query.
struct KindLatency {
    name: &'static str,
    queries: usize,
    p50_us: f64,
    p99_us: f64,
    /// The slowest queries, for finding where the store is slow.
    slowest: serde_json::Value,
}

fn summarize(
    name: &'static str,
    mut times: Vec<Duration>,
    label: impl Fn(usize) -> String,
) -> KindLatency {
    let mut by_time: Vec<usize> = (0..times.len()).collect();
    by_time.sort_by_key(|&i| std::cmp::Reverse(times[i]));
    let slowest = by_time
        .iter()
        .take(SLOWEST_SHOWN)
        .map(|&i| json!({"query": label(i), "us": round(times[i].as_secs_f64() * 1e6, 1)}))
        .collect();
    KindLatency {
        name,
        queries: times.len(),
        p50_us: round(quantile_us(&mut times, 0.5), 2),
        p99_us: round(quantile_us(&mut times, 0.99), 2),
        slowest,
    }
}

/// Labels a planned case by its index, with its number of matches.
fn planned_label<'a>(table: &'a Table, planned: &'a [Planned]) -> impl Fn(usize) -> String + 'a {
    move |i| {
        let p = &planned[i];
        format!("{} ({} match)", p.case.label(table), p.matches.len())
    }
}

fn draw<T>(count: usize, mut next: impl FnMut() -> Option<T>) -> Vec<T> {
    (0..count).map_while(|_| next()).collect()
}

/// Every kind of query on the compacted shard, each checked against the oracle.
fn measure_queries(
    shard: &Shard,
    table: &Table,
    args: &RecordsArgs,
    mismatches: &mut Mismatches,
) -> anyhow::Result<Vec<KindLatency>> {
    let mut sampler = Sampler::new(table, args.seed);
    let n = args.queries;
    let get_rows = draw(n, || Some(sampler.row()));
    let eq_first = plan(table, draw(n, || sampler.eq_case()))?;
    let eq_count = plan(table, draw(n, || sampler.eq_case()))?;
    let contains = plan(table, draw(n, || sampler.contains_case()))?;
    let range_first = plan(table, draw(n, || sampler.range_case()))?;
    let range_count = plan(table, draw(RANGE_COUNT_QUERIES, || sampler.range_case()))?;

    let label_row =
        |i: usize| format!("get {}", display_key(&table.rows[get_rows[i] as usize].key));
    let label_of = |planned| planned_label(table, planned);
    Ok(vec![
        summarize(
            "get",
            measure_gets(shard, table, &get_rows, mismatches),
            label_row,
        ),
        summarize(
            "search_eq_first10",
            measure_first_ten(shard, table, &eq_first, mismatches),
            label_of(&eq_first),
        ),
        summarize(
            "count_eq",
            measure_counts(shard, table, &eq_count, mismatches),
            label_of(&eq_count),
        ),
        summarize(
            "search_contains",
            measure_first_ten(shard, table, &contains, mismatches),
            label_of(&contains),
        ),
        summarize(
            "search_range",
            measure_first_ten(shard, table, &range_first, mismatches),
            label_of(&range_first),
        ),
        summarize(
            "count_range",
            measure_counts(shard, table, &range_count, mismatches),
            label_of(&range_count),
        ),
    ])
}

// ---------------------------------------------------------------------------------
// Report.

fn dataset_label(paths: &[PathBuf]) -> String {
    let stem = |path: &Path| {
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

/// p50 and p99 of each stage's lag in milliseconds, and how many SCUs it never showed.
fn freshness(load: &LoadReport) -> serde_json::Value {
    let stages = [
        ("log", load.acks.iter().map(|ack| ack.log_lag).collect()),
        ("sorted", stage_lags(&load.acks, &load.watermarks.sorted)),
        (
            "compressed",
            stage_lags(&load.acks, &load.watermarks.compressed),
        ),
    ];
    let (mut p50, mut p99, mut unreached) = (json!({}), json!({}), json!({}));
    for (stage, lags) in stages {
        let mut reached: Vec<Duration> = lags.iter().flatten().copied().collect();
        unreached[stage] = json!(lags.len() - reached.len());
        p50[stage] = json!(round(quantile_us(&mut reached, 0.5) / 1e3, 3));
        p99[stage] = json!(round(quantile_us(&mut reached, 0.99) / 1e3, 3));
    }
    json!({
        "freshness_lag_p50_ms": p50,
        "freshness_lag_p99_ms": p99,
        "freshness_unreached_scus": unreached,
        "freshness_timed_out": load.watermarks.timed_out,
        "watermarks_poll_max_ms": round(load.watermarks.slowest_poll.as_secs_f64() * 1e3, 3),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_dates_and_rfc3339() {
        assert_eq!(parse_timestamp_micros("1970-01-01"), Some(0));
        assert_eq!(
            parse_timestamp_micros("2000-03-01"),
            Some(951_868_800_000_000)
        );
        assert_eq!(
            parse_timestamp_micros("2015-09-12T00:46:58.771Z"),
            Some(1_442_018_818_771_000)
        );
        assert_eq!(
            parse_timestamp_micros("2015-09-12T02:46:58+02:00"),
            parse_timestamp_micros("2015-09-12T00:46:58Z")
        );
        assert_eq!(parse_timestamp_micros("1969-12-31"), Some(-86_400_000_000));
        for bad in [
            "2015-02-29",
            "2015-13-01",
            "2015-9-12",
            "2015-09-12T25:00:00Z",
            "2015-09-12x",
            "2015-09-12T00:00:00",
        ] {
            assert_eq!(parse_timestamp_micros(bad), None, "{bad}");
        }
        assert!(parse_timestamp_micros("2016-02-29").is_some());
    }

    #[test]
    fn column_types_take_the_narrowest_fit() {
        let profile = |values: &[&str]| {
            let mut p = ColumnProfile::default();
            values.iter().for_each(|v| p.observe(v));
            p.attr_type()
        };
        assert_eq!(profile(&["1", "-2"]), AttrType::Int);
        assert_eq!(profile(&["1", "2.5"]), AttrType::Float);
        assert_eq!(profile(&["1", "inf"]), AttrType::String);
        assert_eq!(profile(&["t", "false"]), AttrType::Bool);
        assert_eq!(
            profile(&["2024-01-01", "2024-01-02T00:00:00Z"]),
            AttrType::Timestamp
        );
        assert_eq!(profile(&["$1,000.00"]), AttrType::String);
        assert_eq!(profile(&[]), AttrType::String);
    }

    #[test]
    fn needles_respect_character_boundaries() {
        let mut rng = StdRng::seed_from_u64(7);
        let text = "香港中文大學 über naïve".as_bytes();
        for _ in 0..1000 {
            if let Some(needle) = cut_needle(text, &mut rng) {
                assert!((4..=8).contains(&needle.len()));
                assert!(std::str::from_utf8(&needle).is_ok());
            }
        }
    }
}
