//! `puffer load`: CSV / JSON Lines files into a table, through a running server (`--url`)
//! or the data directory directly (`--data`). The files are read and typed by
//! `puffer_query::import`, then written in batches, one SCU each.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use puffer_node::database::check_table_name;
use puffer_node::Database;
use puffer_query::import::{self, ImportedRow, ImportedTable, KeySource, NewColumns, Typing};
use puffer_query::QueryError;
use puffer_store::{Attribute, Schema, StoreError, Value, WriteOp};
use serde_json::{json, Value as Json};

/// Longest wait for an overloaded store to take one batch before giving up.
const MAX_OVERLOADED_WAIT: Duration = Duration::from_secs(600);
/// First and longest pause between retries of an overloaded batch (without Retry-After).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

const AFTER_HELP: &str = "\
Files: .csv (with a header row), .jsonl or .json (one JSON object per line), each \
optionally .gz; several files load as one table whose columns are the union of theirs. \
An empty cell, NULL or JSON null is an absent value.

A missing table is created with each column's inferred type (int, float, bool, \
timestamp, else string); an existing table's column types are used instead.

Resumable: records are put by key, so re-running the same load (after an error or an \
interruption) replaces the rows already written instead of duplicating them. With \
--key-row-number, keys are row numbers, so re-run it with the same files in the same \
order.

An overloaded store (HTTP 429) makes the batch wait and retry.";

/// Arguments of `puffer load`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
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
    /// Records per write; each write is one SCU (all or nothing).
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
        spinner.set_message("reading the files");
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    });
    let read = import::read_table_with(&args.files, key, typing);
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    let table = match (read, &existing) {
        (Ok(table), _) => table,
        (Err(e), None) => return Err(e.into()),
        (Err(e), Some(_)) => {
            return Err(e)
                .with_context(|| format!("loading into the existing table {:?}", args.table))
        }
    };
    if table.is_empty() {
        bail!("the files hold no rows; nothing was loaded");
    }
    if existing.is_none() {
        destination.create(&table.schema)?;
    }
    if !table.added.is_empty() {
        destination.add_attributes(&table.added)?;
    }
    destination.check_ids(&table.schema)?;
    let written = write_batches(&destination, &table, args.batch_rows)?;
    let seconds = started.elapsed().as_secs_f64();
    let mut notes = vec![format!(
        "{} of at most {} rows",
        plural(written.batches as u64, "batch", "batches"),
        args.batch_rows
    )];
    if existing.is_none() {
        notes.push("table created".into());
    }
    if !table.added.is_empty() {
        let names: Vec<&str> = table.added.iter().map(|a| a.name.as_str()).collect();
        notes.push(format!("columns added: {}", names.join(", ")));
    }
    if table.duplicates_skipped > 0 {
        notes.push(format!(
            "{} skipped: an earlier file had their key",
            plural(table.duplicates_skipped, "row", "rows")
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
        table.len(),
        args.table,
        table.len() as f64 / seconds.max(1e-9),
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
    batches: usize,
    overloaded_retries: u64,
}

/// Writes the rows in batches of `batch_rows`, each one SCU; an overloaded store makes
/// the batch wait and retry.
fn write_batches(
    destination: &Destination,
    table: &ImportedTable,
    batch_rows: usize,
) -> anyhow::Result<Written> {
    let bar = stderr_is_terminal().then(|| progress_bar(table.len() as u64));
    let mut written = Written {
        batches: 0,
        overloaded_retries: 0,
    };
    let result = (|| {
        for (index, batch) in table.rows.chunks(batch_rows).enumerate() {
            let first = index * batch_rows;
            write_one(destination, table, batch, &bar, &mut written).with_context(|| {
                format!(
                    "writing rows {first}..{} (from {}); the {first} rows before them are \
                     loaded, and running the same load again replaces them",
                    first + batch.len(),
                    table.place(batch[0].origin),
                )
            })?;
            written.batches += 1;
            if let Some(bar) = &bar {
                bar.inc(batch.len() as u64);
            }
        }
        Ok(())
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
    table: &ImportedTable,
    batch: &[ImportedRow],
    bar: &Option<ProgressBar>,
    written: &mut Written,
) -> anyhow::Result<()> {
    let mut backoff = FIRST_BACKOFF;
    let mut waited = Duration::ZERO;
    loop {
        let Some(overloaded) = destination.write(&table.schema, batch)? else {
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
        for group in db.table(table)?.shards() {
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
    fn write(&self, schema: &Schema, batch: &[ImportedRow]) -> anyhow::Result<Option<Overloaded>> {
        match self {
            Destination::Http { url, table } => {
                let records: Vec<Json> = batch.iter().map(|row| row_json(row, schema)).collect();
                let sent = ureq::post(&format!("{url}/v1/tables/{table}/records"))
                    .send_json(Json::Array(records));
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
            Destination::Direct { db, table } => {
                let ops = batch
                    .iter()
                    .map(|row| WriteOp::PutFields(row.to_fields()))
                    .collect();
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
