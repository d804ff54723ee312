//! `puffer load`: CSV / JSON Lines files into a table, through a running server (`--url`)
//! or the data directory directly (`--data`).
//!
//! The files are streamed, never held: `puffer_query::import::plan` reads them once to
//! check them and find the schema, then `ImportPlan::rows` reads them again, one row at
//! a time, into batches, each written (one SCU) before the next is read. So the loader's
//! memory is bounded whatever the size of the files, by [`MEMORY_BOUND_BYTES`] (30 MiB)
//! beyond the program itself:
//!
//! - the import's own: at most [`MAX_INPUT_COLUMNS`] columns with their type-inference
//!   counters, [`SORT_MEMORY_BYTES`] for the key check (beyond that it sorts in
//!   temporary files), and the record being read, at most [`MAX_RECORD_BYTES`] of text,
//!   held a few times over (as read, as cells, as values);
//! - one batch: at most `--batch-rows` (at most [`MAX_BATCH_ROWS`]) rows and
//!   [`MAX_BATCH_BYTES`] as encoded for the destination (a batch is written early when
//!   it reaches that), plus the row that reached it, held twice while a data directory
//!   takes it (the store gets a copy; the batch is kept for a retry).
//!
//! With `--data` the store's own memory comes on top (its log tables, and compactions,
//! which hold the records they merge).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use puffer_node::database::check_table_name;
use puffer_node::Database;
use puffer_query::import::{
    self, ImportPlan, ImportedRow, KeySource, NewColumns, Origin, Typing, KEY_ENTRY_BYTES,
    MAX_INPUT_COLUMNS, MAX_RECORD_BYTES, SORT_MEMORY_BYTES,
};
use puffer_query::QueryError;
use puffer_store::schema::StoredRecord;
use puffer_store::{Attribute, Schema, StoreError, Value, WriteOp};
use serde_json::{json, Value as Json};

/// Longest wait for an overloaded store to take one batch before giving up.
const MAX_OVERLOADED_WAIT: Duration = Duration::from_secs(600);
/// First and longest pause between retries of an overloaded batch (without Retry-After).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Most rows in one batch: an SCU takes at most 100,000 operations (the store's
/// `max_ops_per_scu` and the server's `max_batch_records` defaults).
pub const MAX_BATCH_ROWS: usize = 100_000;

/// A batch is written once its rows take this many bytes as encoded for the
/// destination (the JSON body, or the records in memory), even short of --batch-rows;
/// half the server's default body limit, so that wide rows do not meet it.
pub const MAX_BATCH_BYTES: usize = 8 << 20;

/// The loader's memory beyond the program, at most: the key check's (while reading,
/// and its list of skipped rows while writing), a few copies of one record, and one
/// batch (plus one row) held twice.
pub const MEMORY_BOUND_BYTES: usize =
    SORT_MEMORY_BYTES + 4 * MAX_RECORD_BYTES + 2 * (MAX_BATCH_BYTES + MAX_RECORD_BYTES);

/// The help's text after the options, with the limits of the code.
fn after_help() -> String {
    let mib = |bytes: usize| bytes >> 20;
    format!(
        "\
Files: .csv (with a header row), .jsonl or .json (one JSON object per line), each \
optionally .gz; several files load as one table whose columns are the union of theirs. \
An empty cell, NULL or JSON null is an absent value.

A missing table is created with each column's inferred type (int, float, bool, \
timestamp, else string); an existing table's column types are used instead.

The files are streamed, never held: they are read twice, first to check every row and \
key and find the column types (a bad row fails naming its file and line before anything \
is written), then row by row into batches, each written before the next is read. A \
record (a CSV row, or a JSON line) may be at most {record} MiB; a longer one is refused, \
naming its file and line, without being read whole. Memory is bounded whatever the size \
of the files, by: the type-inference state (a few counters for each of at most \
{columns} columns); at most {sort} MiB for the duplicate-key check with --key ({entry} \
bytes a row; beyond that it sorts in temporary files in $TMPDIR); the record being read \
(a few copies of at most {record} MiB); and one batch: at most --batch-rows rows (1 to \
{max_rows}) and {batch} MiB as encoded for the store (a batch is written early when it \
reaches that), held twice while a data directory takes it. In all about {total} MiB \
at most, beyond the program itself. With --data the store's own memory (its log tables, and \
compactions, which hold the records they merge) comes on top.

Resumable: records are put by key, so re-running the same load (after an error or an \
interruption) replaces the rows already written instead of duplicating them. With \
--key-row-number, keys are row numbers, so re-run it with the same files in the same \
order.

An overloaded store (HTTP 429) makes the batch wait and retry.",
        record = mib(MAX_RECORD_BYTES),
        columns = MAX_INPUT_COLUMNS,
        sort = mib(SORT_MEMORY_BYTES),
        max_rows = MAX_BATCH_ROWS,
        batch = mib(MAX_BATCH_BYTES),
        entry = KEY_ENTRY_BYTES,
        total = mib(MEMORY_BOUND_BYTES),
    )
}

/// Arguments of `puffer load`.
#[derive(Debug, clap::Args)]
#[command(after_help = after_help())]
pub struct LoadArgs {
    /// Table to load into (created if it does not exist).
    table: String,
    /// CSV or JSON Lines files (.csv, .jsonl, .json, each optionally .gz).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Column holding each record's key (not stored as an attribute).
    #[arg(
        long,
        value_name = "COLUMN",
        required_unless_present = "key_row_number",
        conflicts_with = "key_row_number"
    )]
    key: Option<String>,
    /// Key each record by its 0-based row number over all files, in decimal (key column
    /// `row_number`).
    #[arg(long)]
    key_row_number: bool,
    /// Records per write (1 to 100000); each write is one SCU (all or nothing).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    batch_rows: usize,
    /// Add columns an existing table lacks, with their inferred types, instead of
    /// refusing them (only with --data: the HTTP API cannot add columns).
    #[arg(long)]
    add_columns: bool,
    #[command(flatten)]
    target: Target,
}

/// Where the records go (the same options as `puffer sql`).
#[derive(Debug, clap::Args)]
struct Target {
    /// URL of a running server, e.g. http://127.0.0.1:7878.
    #[arg(long, conflicts_with = "data")]
    url: Option<String>,
    /// Data directory to open directly (default ./puffer-data) when no --url is given.
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Runs `puffer load`.
pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    if args.batch_rows == 0 {
        bail!("--batch-rows must be at least 1");
    }
    if args.batch_rows > MAX_BATCH_ROWS {
        bail!("--batch-rows must be at most {MAX_BATCH_ROWS} (the most operations of one SCU)");
    }
    check_table_name(&args.table)?;
    let key = match &args.key {
        Some(column) => KeySource::Column(column.clone()),
        None => KeySource::RowNumber,
    };
    let started = Instant::now();
    let destination = Destination::open(&args.target, &args.table)?;
    let existing = destination.schema()?;
    let typing = match &existing {
        Some(schema) => Typing::Existing {
            schema,
            new_columns: if args.add_columns {
                NewColumns::Add
            } else {
                NewColumns::Refuse
            },
        },
        None => Typing::Infer,
    };
    let spinner = stderr_is_terminal().then(|| {
        let spinner = ProgressBar::new_spinner();
        spinner.set_message("checking the files");
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    });
    let checked = import::plan(&args.files, key, typing);
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    let plan = match (checked, &existing) {
        (Ok(plan), _) => plan,
        (Err(e), None) => return Err(e.into()),
        (Err(e), Some(_)) => {
            return Err(e)
                .with_context(|| format!("loading into the existing table {:?}", args.table))
        }
    };
    if plan.is_empty() {
        bail!("the files hold no rows; nothing was loaded");
    }
    if existing.is_none() {
        destination.create(plan.schema())?;
    }
    if !plan.added().is_empty() {
        destination.add_attributes(plan.added())?;
    }
    destination.check_ids(plan.schema())?;
    let written = write_batches(&destination, &plan, args.batch_rows)?;
    let seconds = started.elapsed().as_secs_f64();
    let mut notes = vec![format!(
        "{} of at most {} rows",
        plural(written.batches as u64, "batch", "batches"),
        args.batch_rows
    )];
    if existing.is_none() {
        notes.push("table created".into());
    }
    if !plan.added().is_empty() {
        let names: Vec<&str> = plan.added().iter().map(|a| a.name.as_str()).collect();
        notes.push(format!("columns added: {}", names.join(", ")));
    }
    if plan.duplicates_skipped() > 0 {
        notes.push(format!(
            "{} skipped: an earlier file had their key",
            plural(plan.duplicates_skipped(), "row", "rows")
        ));
    }
    if written.overloaded_retries > 0 {
        notes.push(format!(
            "{} while overloaded",
            plural(written.overloaded_retries, "retry", "retries")
        ));
    }
    println!(
        "loaded {} rows into {} in {seconds:.2} s ({:.0} rows/s; {})",
        written.rows,
        args.table,
        written.rows as f64 / seconds.max(1e-9),
        notes.join("; ")
    );
    Ok(())
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

// ---------------------------------------------------------------------------------
// Writing.

struct Written {
    rows: u64,
    batches: usize,
    overloaded_retries: u64,
}

/// One batch, encoded for its destination as its rows arrive (the rows themselves are
/// not kept).
struct Batch {
    rows: usize,
    /// Where its first row came from.
    first: Option<Origin>,
    encoded: Encoded,
}

enum Encoded {
    /// The JSON array the HTTP API takes.
    Json(Vec<u8>),
    /// Records by attribute id, for a data directory.
    Records {
        records: Vec<StoredRecord>,
        bytes: usize,
    },
}

impl Batch {
    fn new(destination: &Destination) -> Batch {
        let encoded = match destination {
            Destination::Http { .. } => Encoded::Json(Vec::new()),
            Destination::Direct { .. } => Encoded::Records {
                records: Vec::new(),
                bytes: 0,
            },
        };
        Batch {
            rows: 0,
            first: None,
            encoded,
        }
    }

    fn push(&mut self, row: ImportedRow, schema: &Schema, batch_rows: usize) -> anyhow::Result<()> {
        self.first.get_or_insert(row.origin);
        self.rows += 1;
        match &mut self.encoded {
            Encoded::Json(body) => {
                let json = serde_json::to_vec(&row_json(&row, schema))?;
                // '[' or ',' before the row, and room for the closing ']'.
                reserve_bounded(body, json.len() + 2, MAX_BATCH_BYTES);
                body.push(if body.is_empty() { b'[' } else { b',' });
                body.extend_from_slice(&json);
            }
            Encoded::Records { records, bytes } => {
                let record = row.into_fields();
                *bytes += record_heap_bytes(&record);
                reserve_bounded(records, 1, batch_rows);
                records.push(record);
            }
        }
        Ok(())
    }

    /// Bytes it takes in memory, as encoded.
    fn bytes(&self) -> usize {
        match &self.encoded {
            Encoded::Json(body) => body.capacity(),
            Encoded::Records { records, bytes } => {
                records.capacity() * std::mem::size_of::<StoredRecord>() + bytes
            }
        }
    }
}

/// Makes room for `extra` more items, doubling the capacity as a `Vec` does, but not
/// past `bound` unless the items need it.
fn reserve_bounded<T>(buffer: &mut Vec<T>, extra: usize, bound: usize) {
    let needed = buffer.len() + extra;
    if needed <= buffer.capacity() {
        return;
    }
    let doubled = (buffer.capacity() * 2).max(64);
    let target = doubled.min(bound).max(needed);
    buffer.reserve_exact(target - buffer.len());
}

/// Bytes a record's allocations take.
fn record_heap_bytes(record: &StoredRecord) -> usize {
    let strings: usize = record
        .fields
        .iter()
        .map(|(_, value)| match value {
            Value::String(bytes) => bytes.capacity(),
            _ => 0,
        })
        .sum();
    record.key.capacity() + record.fields.capacity() * std::mem::size_of::<(u16, Value)>() + strings
}

/// Reads the rows and writes them in batches of at most `batch_rows` rows and
/// [`MAX_BATCH_BYTES`], each one SCU, one batch in memory at a time; an overloaded store
/// makes the batch wait and retry.
fn write_batches(
    destination: &Destination,
    plan: &ImportPlan,
    batch_rows: usize,
) -> anyhow::Result<Written> {
    let bar = stderr_is_terminal().then(|| progress_bar(plan.len()));
    let mut written = Written {
        rows: 0,
        batches: 0,
        overloaded_retries: 0,
    };
    let result = (|| {
        let mut rows = plan.rows()?;
        loop {
            let mut batch = Batch::new(destination);
            while batch.rows < batch_rows && batch.bytes() < MAX_BATCH_BYTES {
                let Some(row) = rows.next() else {
                    break;
                };
                let row = row.with_context(|| {
                    format!(
                        "reading the files again to write them; the {} rows before are \
                         loaded, and running the same load again replaces them",
                        written.rows + batch.rows as u64
                    )
                })?;
                batch.push(row, plan.schema(), batch_rows)?;
            }
            let Some(first_origin) = batch.first else {
                return Ok(());
            };
            let first = written.rows;
            let rows_in_batch = batch.rows;
            write_one(destination, batch, &bar, &mut written).with_context(|| {
                format!(
                    "writing rows {first}..{} (from {}); the {first} rows before them are \
                     loaded, and running the same load again replaces them",
                    first + rows_in_batch as u64,
                    plan.place(first_origin),
                )
            })?;
            written.rows += rows_in_batch as u64;
            written.batches += 1;
            if let Some(bar) = &bar {
                bar.inc(rows_in_batch as u64);
            }
        }
    })();
    if let Some(bar) = &bar {
        match result {
            Ok(()) => bar.finish_and_clear(),
            Err(_) => bar.abandon(),
        }
    }
    result.map(|()| written)
}

fn write_one(
    destination: &Destination,
    mut batch: Batch,
    bar: &Option<ProgressBar>,
    written: &mut Written,
) -> anyhow::Result<()> {
    if let Encoded::Json(body) = &mut batch.encoded {
        body.push(b']');
    }
    let mut backoff = FIRST_BACKOFF;
    let mut waited = Duration::ZERO;
    loop {
        let Some(overloaded) = destination.write(&batch.encoded)? else {
            if let Some(bar) = bar {
                bar.set_message("writing");
            }
            return Ok(());
        };
        if waited >= MAX_OVERLOADED_WAIT {
            bail!(
                "the store is still overloaded after {} s of retries: {}",
                waited.as_secs(),
                overloaded.message
            );
        }
        let pause = overloaded
            .retry_after
            .unwrap_or(backoff)
            .min(MAX_BACKOFF * 5);
        if let Some(bar) = bar {
            bar.set_message("overloaded");
        }
        std::thread::sleep(pause);
        waited += pause;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        written.overloaded_retries += 1;
    }
}

fn progress_bar(rows: u64) -> ProgressBar {
    let bar = ProgressBar::new(rows);
    let style = ProgressStyle::with_template(
        "{spinner:.green} {msg:<11} [{bar:40.cyan/blue}] {pos}/{len} rows {rate} {elapsed_precise}",
    )
    .map(|style| {
        style.progress_chars("=> ").with_key(
            "rate",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} rows/s", state.per_sec());
            },
        )
    })
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message("writing");
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// A batch the store refused because it is overloaded.
struct Overloaded {
    retry_after: Option<Duration>,
    message: String,
}

// ---------------------------------------------------------------------------------
// Destinations.

/// The table's database: over HTTP, or opened directly.
enum Destination {
    Http { url: String, table: String },
    Direct { db: Box<Database>, table: String },
}

impl Destination {
    fn open(target: &Target, table: &str) -> anyhow::Result<Destination> {
        let table = table.to_string();
        if let Some(url) = &target.url {
            let url = url.trim_end_matches('/').to_string();
            return Ok(Destination::Http { url, table });
        }
        let dir = target
            .data
            .clone()
            .unwrap_or_else(|| PathBuf::from("puffer-data"));
        let db = Database::open(&dir, Default::default()).with_context(|| {
            format!(
                "opening the data directory {} (if a server runs on it, load with --url)",
                dir.display()
            )
        })?;
        Ok(Destination::Direct {
            db: Box::new(db),
            table,
        })
    }

    /// The table's schema, or `None` when there is no such table.
    fn schema(&self) -> anyhow::Result<Option<Schema>> {
        match self {
            Destination::Http { url, table } => {
                let answer = match ureq::get(&format!("{url}/v1/tables/{table}")).call() {
                    Ok(response) => response.into_json::<Json>()?,
                    Err(ureq::Error::Status(404, _)) => return Ok(None),
                    Err(e) => return Err(http_error(e, url)),
                };
                let key = answer["key"]
                    .as_str()
                    .context("the table description lacks its key")?;
                let attributes: Vec<Attribute> =
                    serde_json::from_value(answer["attributes"].clone())
                        .context("reading the table's attributes")?;
                Ok(Some(Schema::new(key, attributes)?))
            }
            Destination::Direct { db, table } => match db.table(table) {
                Ok(shard) => Ok(Some((*shard.schema()).clone())),
                Err(QueryError::UnknownTable(_)) => Ok(None),
                Err(e) => Err(e.into()),
            },
        }
    }

    fn create(&self, schema: &Schema) -> anyhow::Result<()> {
        let created = match self {
            Destination::Http { url, table } => {
                let body =
                    json!({"name": table, "key": schema.key, "attributes": schema.attributes});
                ureq::post(&format!("{url}/v1/tables"))
                    .send_json(body)
                    .map(drop)
                    .map_err(|e| http_error(e, url))
            }
            Destination::Direct { db, table } => db
                .create_table(table, schema.clone())
                .map_err(anyhow::Error::from),
        };
        created.with_context(|| format!("creating the table {:?}", self.table()))
    }

    fn add_attributes(&self, attributes: &[Attribute]) -> anyhow::Result<()> {
        let names: Vec<&str> = attributes.iter().map(|a| a.name.as_str()).collect();
        match self {
            Destination::Http { .. } => bail!(
                "--add-columns needs --data: the HTTP API cannot add the columns {}",
                names.join(", ")
            ),
            Destination::Direct { db, table } => {
                let ops = attributes
                    .iter()
                    .cloned()
                    .map(WriteOp::AddAttribute)
                    .collect();
                db.table(table)?
                    .write(ops)
                    .with_context(|| format!("adding the columns {}", names.join(", ")))?;
                Ok(())
            }
        }
    }

    /// Direct writes go by attribute id: the table's attributes must have the ids the
    /// import gave them (they do unless the table changed since it was read).
    fn check_ids(&self, schema: &Schema) -> anyhow::Result<()> {
        let Destination::Direct { db, table } = self else {
            return Ok(());
        };
        // Every replica of every shard: a schema change that reached only some of them
        // would give the same name different ids.
        for group in db.table(table)?.held_groups() {
            for slot in group.replicas() {
                let actual = slot.pool().replica().schema();
                for (id, attribute) in schema.attributes.iter().enumerate() {
                    let found = actual.attributes.get(id).map(|a| a.name.as_str());
                    ensure!(
                        found == Some(attribute.name.as_str()),
                        "table {table:?} shard {} replica {}: attribute {id} is {found:?}, \
                         expected {:?}; load through a server (by name) instead",
                        group.shard,
                        slot.replica,
                        attribute.name
                    );
                }
            }
        }
        Ok(())
    }

    /// Writes one batch as one SCU; `Some` when the store is overloaded (nothing written).
    fn write(&self, batch: &Encoded) -> anyhow::Result<Option<Overloaded>> {
        match (self, batch) {
            (Destination::Http { url, table }, Encoded::Json(body)) => {
                let sent = ureq::post(&format!("{url}/v1/tables/{table}/records"))
                    .set("Content-Type", "application/json")
                    .send_bytes(body);
                match sent {
                    Ok(_) => Ok(None),
                    Err(ureq::Error::Status(429, response)) => {
                        let retry_after = response
                            .header("Retry-After")
                            .and_then(|s| s.trim().parse::<u64>().ok())
                            .map(Duration::from_secs);
                        let error: Json = response.into_json().unwrap_or(Json::Null);
                        Ok(Some(Overloaded {
                            retry_after,
                            message: error["message"].as_str().unwrap_or("").to_string(),
                        }))
                    }
                    Err(e) => Err(http_error(e, url)),
                }
            }
            (Destination::Direct { db, table }, Encoded::Records { records, .. }) => {
                // A copy: an overloaded store takes nothing, and the batch is sent again.
                let ops = records.iter().cloned().map(WriteOp::PutFields).collect();
                match db.table(table)?.write(ops) {
                    Ok(_) => Ok(None),
                    Err(puffer_query::QueryError::Store(StoreError::Overloaded(message))) => {
                        Ok(Some(Overloaded {
                            retry_after: None,
                            message,
                        }))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            _ => bail!("a batch encoded for another destination"),
        }
    }

    fn table(&self) -> &str {
        match self {
            Destination::Http { table, .. } | Destination::Direct { table, .. } => table,
        }
    }
}

/// A row as the JSON record the API takes (timestamps as microseconds).
fn row_json(row: &ImportedRow, schema: &Schema) -> Json {
    let mut object = serde_json::Map::with_capacity(row.values.len() + 1);
    object.insert(
        schema.key.clone(),
        Json::String(String::from_utf8_lossy(&row.key).into_owned()),
    );
    for (attribute, value) in schema.attributes.iter().zip(&row.values) {
        if let Some(value) = value {
            object.insert(attribute.name.clone(), value_json(value));
        }
    }
    Json::Object(object)
}

fn value_json(value: &Value) -> Json {
    match value {
        Value::String(bytes) => Json::String(String::from_utf8_lossy(bytes).into_owned()),
        Value::Int(x) => json!(x),
        Value::Float(x) => json!(x),
        Value::Bool(b) => json!(b),
        Value::Timestamp(micros) => json!(micros),
    }
}

/// An HTTP failure: the API's `{code, message}` when it answered, else why it did not.
fn http_error(error: ureq::Error, url: &str) -> anyhow::Error {
    match error {
        ureq::Error::Status(status, response) => {
            let body: Json = response.into_json().unwrap_or(Json::Null);
            let hint = if status == 413 {
                " (a smaller --batch-rows may fit)"
            } else {
                ""
            };
            anyhow::anyhow!(
                "{status} {}: {}{hint}",
                body["code"].as_str().unwrap_or("error"),
                body["message"].as_str().unwrap_or("")
            )
        }
        other => anyhow::anyhow!("cannot reach {url}: {other}"),
    }
}
