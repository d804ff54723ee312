//! Importing CSV and JSON Lines files as one typed table: the shared reader of
//! `puffer load` and `puffer-bench records`.
//!
//! - **Files.** `.csv` (RFC 4180 with a header row; quoted fields may hold delimiters
//!   and newlines), `.jsonl` / `.json` (one JSON object per line; nested values are kept
//!   as their JSON text), each optionally gzip-compressed (`.gz`). Several files are
//!   read as one table whose columns are the union of theirs, in order of first
//!   appearance. A record (a CSV row, its line ending included, or a JSON line) is at
//!   most [`MAX_RECORD_BYTES`] of the decompressed file; a longer one is refused, naming
//!   its file and line, without being read whole.
//! - **Absent values.** An empty cell, the text `NULL` and JSON `null` are absent.
//! - **Keys.** Taken from a named column ([`KeySource::Column`]; the column is not an
//!   attribute) or the 0-based row number over all inputs, in decimal
//!   ([`KeySource::RowNumber`], key column [`ROW_NUMBER_KEY`]). An empty key and a key
//!   repeated within one file are errors; a key an earlier file already had is skipped
//!   and counted ([`ImportPlan::duplicates_skipped`]), so several scrapes of one data
//!   set load as one table.
//! - **Types.** With [`Typing::Infer`] each column gets the narrowest type all its
//!   present values parse as: int, else float, else bool (`t`/`true`/`f`/`false`), else
//!   timestamp ([`parse_timestamp_micros`]), else string (a column without any value is
//!   a string column). With [`Typing::Existing`] values are parsed with an existing
//!   table's column types; a value that does not parse is an error naming the file, line
//!   and column, and so is a column the table lacks, unless [`NewColumns::Add`] asks for
//!   it to be added with its inferred type (the caller then writes
//!   `WriteOp::AddAttribute` for each of [`ImportPlan::added`] before the records).
//!
//! Errors are [`ImportError`]s whose messages name the file and, where there is one, the
//! line (`data.csv line 7: ...`); they convert into [`QueryError::Invalid`].
//!
//! **Streaming.** [`plan`] reads the files once to find the columns, infer or check the
//! types and check the keys (a second time, for the types only, when a later file
//! repeats keys of an earlier one), and reports every error before anything is
//! returned; [`ImportPlan::rows`] then reads them again, one typed row at a time. Neither
//! holds the files: memory is bounded by
//!
//! - the columns: at most [`MAX_INPUT_COLUMNS`] names of at most
//!   [`MAX_ATTRIBUTE_NAME_BYTES`], each with its type-inference state (a few counters);
//! - the record being read: at most [`MAX_RECORD_BYTES`] of text, held as read and as
//!   cells (for JSON Lines also as the parsed object), plus a [`READ_BUFFER_BYTES`]
//!   read buffer;
//! - the key check (with [`KeySource::Column`]): at most [`SORT_MEMORY_BYTES`], for the
//!   key hashes ([`KEY_ENTRY_BYTES`] a row) while the files are read, then for the list
//!   of rows to skip ([`ORIGIN_ENTRY_BYTES`] a row); beyond that, sorted runs are spilled
//!   to files under the system's temporary directory (`$TMPDIR`), about
//!   [`KEY_ENTRY_BYTES`] a row, removed when the plan is dropped.
//!
//! Keys are compared by a 128-bit keyed hash (SipHash-1-3 under two random keys): two
//! different keys are taken for the same one with a probability of about n²/2¹²⁹ for n
//! rows (below 10⁻²⁰ for a billion rows).
//!
//! [`read_table`] collects every row into an [`ImportedTable`] (the benchmark keeps the
//! table as its oracle); it is the only part that holds the whole table.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use puffer_store::schema::{
    display_key, StoredRecord, MAX_ATTRIBUTES, MAX_ATTRIBUTE_NAME_BYTES, MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
};
use puffer_store::timestamp::parse_timestamp_micros;
use puffer_store::{AttrType, Attribute, Record, Schema, Value};

use crate::error::QueryError;

/// The key column's name with [`KeySource::RowNumber`].
pub const ROW_NUMBER_KEY: &str = "row_number";

/// Longest record of an input file, in bytes of the decompressed file: a CSV row with its
/// line ending, or a JSON line without it. Sixteen values of the longest string a table
/// takes ([`MAX_VALUE_BYTES`]).
pub const MAX_RECORD_BYTES: usize = 16 * MAX_VALUE_BYTES;

/// Most columns the inputs may have together: a key and [`MAX_ATTRIBUTES`] attributes.
pub const MAX_INPUT_COLUMNS: usize = MAX_ATTRIBUTES + 1;

/// Bytes read from a file at a time.
pub const READ_BUFFER_BYTES: usize = 64 << 10;

/// Memory the key check sorts in before it spills sorted runs to temporary files.
pub const SORT_MEMORY_BYTES: usize = 8 << 20;

/// Bytes a row takes in the key check: a 128-bit key hash, a file index and a line.
pub const KEY_ENTRY_BYTES: usize = 16 + 4 + 8;

/// Bytes a skipped row (its key in an earlier file) takes: a file index and a line.
pub const ORIGIN_ENTRY_BYTES: usize = 4 + 8;

/// Most sorted runs merged at once (each with a [`MERGE_READ_BUFFER_BYTES`] buffer).
const MAX_MERGE_RUNS: usize = 16;
const MERGE_READ_BUFFER_BYTES: usize = 64 << 10;

/// A failed import; the message names the file and line where there is one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ImportError {
    message: String,
}

impl ImportError {
    fn new(message: impl Into<String>) -> ImportError {
        ImportError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ImportError> for QueryError {
    fn from(error: ImportError) -> QueryError {
        QueryError::Invalid(error.message)
    }
}

/// Result alias of this module.
pub type ImportResult<T> = std::result::Result<T, ImportError>;

/// Where each record's key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// This column (not stored as an attribute).
    Column(String),
    /// The 0-based row number over all inputs, in decimal; the key column is
    /// [`ROW_NUMBER_KEY`].
    RowNumber,
}

impl KeySource {
    /// The key column's name in the table.
    pub fn name(&self) -> &str {
        match self {
            KeySource::Column(name) => name,
            KeySource::RowNumber => ROW_NUMBER_KEY,
        }
    }
}

/// What to do with input columns an existing table lacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NewColumns {
    /// They are an error naming them.
    #[default]
    Refuse,
    /// They are appended to the schema with their inferred types and listed in
    /// [`ImportPlan::added`].
    Add,
}

/// How the columns get their types.
#[derive(Clone, Copy, Debug)]
pub enum Typing<'a> {
    /// Each column's type is inferred from its values.
    Infer,
    /// The columns are those of an existing table (its key column must be the key).
    Existing {
        /// The table's schema.
        schema: &'a Schema,
        /// Columns the table lacks.
        new_columns: NewColumns,
    },
}

/// Where a row came from: an index into the input files and a 1-based line. Ordered as
/// the rows are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// Index of the file.
    pub file: usize,
    /// Line the row starts on (1-based; the header of a CSV file is line 1).
    pub line: u64,
}

/// One typed row.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedRow {
    /// The key.
    pub key: Vec<u8>,
    /// Values by attribute id of the schema (`None` = absent).
    pub values: Vec<Option<Value>>,
    /// Where the row came from.
    pub origin: Origin,
}

impl ImportedRow {
    /// The row as a store record; `attributes` are the schema's, by id.
    pub fn to_record(&self, attributes: &[Attribute]) -> Record {
        let mut record = Record::new(self.key.clone());
        for (attribute, value) in attributes.iter().zip(&self.values) {
            if let Some(value) = value {
                record.values.insert(attribute.name.clone(), value.clone());
            }
        }
        record
    }

    /// The row as a store record by attribute id (for [`WriteOp::PutFields`]), ids
    /// being those of the schema.
    ///
    /// [`WriteOp::PutFields`]: puffer_store::WriteOp::PutFields
    pub fn to_fields(&self) -> StoredRecord {
        self.clone().into_fields()
    }

    /// [`ImportedRow::to_fields`], taking the row apart instead of copying it.
    pub fn into_fields(self) -> StoredRecord {
        let fields = (0u16..)
            .zip(self.values)
            .filter_map(|(id, value)| value.map(|v| (id, v)))
            .collect();
        StoredRecord {
            key: self.key,
            fields,
        }
    }

    /// Bytes the row takes in memory, allocations included (for bounding batches).
    pub fn memory_bytes(&self) -> usize {
        let strings: usize = self
            .values
            .iter()
            .map(|value| match value {
                Some(Value::String(bytes)) => bytes.capacity(),
                _ => 0,
            })
            .sum();
        std::mem::size_of::<ImportedRow>()
            + self.key.capacity()
            + self.values.capacity() * std::mem::size_of::<Option<Value>>()
            + strings
    }
}

/// The inputs as one typed table, every row in memory.
#[derive(Clone, Debug)]
pub struct ImportedTable {
    /// The input files, in the order read.
    pub files: Vec<PathBuf>,
    /// The table's schema: inferred, or the existing one (plus [`Self::added`]).
    pub schema: Schema,
    /// Attributes appended to an existing schema ([`NewColumns::Add`]), in order.
    pub added: Vec<Attribute>,
    /// The rows, in input order (rows with a key an earlier file had are left out).
    pub rows: Vec<ImportedRow>,
    /// Average text bytes of each attribute's present values, by attribute id (0 when
    /// the inputs have none).
    pub average_bytes: Vec<f64>,
    /// Bytes of the inputs, decompressed.
    pub input_bytes: u64,
    /// Rows left out because an earlier file had their key.
    pub duplicates_skipped: u64,
}

impl ImportedTable {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `row` as a store record.
    pub fn record(&self, row: usize) -> Record {
        self.rows[row].to_record(&self.schema.attributes)
    }

    /// Every row as a store record, in order.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.rows
            .iter()
            .map(|row| row.to_record(&self.schema.attributes))
    }

    /// `file line N`, for messages.
    pub fn place(&self, origin: Origin) -> String {
        place(&self.files, origin)
    }
}

/// Reads `paths` as one table, inferring every column's type.
pub fn read_table(paths: &[PathBuf], key: KeySource) -> ImportResult<ImportedTable> {
    read_table_with(paths, key, Typing::Infer)
}

/// Reads `paths` as one table, typed as `typing` says: [`plan`], then every row of
/// [`ImportPlan::rows`] collected.
pub fn read_table_with(
    paths: &[PathBuf],
    key: KeySource,
    typing: Typing<'_>,
) -> ImportResult<ImportedTable> {
    let plan = plan(paths, key, typing)?;
    let rows = plan.rows()?.collect::<ImportResult<Vec<_>>>()?;
    Ok(ImportedTable {
        files: plan.files.clone(),
        schema: plan.schema.clone(),
        added: plan.added.clone(),
        rows,
        average_bytes: plan.average_bytes.clone(),
        input_bytes: plan.input_bytes,
        duplicates_skipped: plan.duplicates_skipped,
    })
}

/// The schema [`read_table`] would infer for `paths` (streams over them; no row is kept).
pub fn infer_schema(paths: &[PathBuf], key: KeySource) -> ImportResult<Schema> {
    Ok(plan(paths, key, Typing::Infer)?.schema)
}

fn place(files: &[PathBuf], origin: Origin) -> String {
    format!("{} line {}", files[origin.file].display(), origin.line)
}

/// Whether a cell holds a value: an empty cell or the literal `NULL` is absent.
pub fn is_present(text: &str) -> bool {
    !text.is_empty() && text != "NULL"
}

// ---------------------------------------------------------------------------------
// The plan: the files read once, every check done, the schema known.

/// The inputs checked and typed, ready to be read row by row with [`ImportPlan::rows`].
/// Holds no rows: see the module's memory bound.
#[derive(Debug)]
pub struct ImportPlan {
    files: Vec<PathBuf>,
    columns: Columns,
    /// The key's input column (`None` for row numbers).
    key_column: Option<usize>,
    /// The schema attribute id of each input column (`None` for the key column).
    attribute_ids: Vec<Option<usize>>,
    schema: Schema,
    added: Vec<Attribute>,
    /// Origins of the rows left out (their key in an earlier file), ascending.
    skipped: Sorted<ORIGIN_ENTRY_BYTES>,
    rows: u64,
    duplicates_skipped: u64,
    input_bytes: u64,
    average_bytes: Vec<f64>,
}

/// Reads `paths` once (twice when a later file repeats keys of an earlier one), checking
/// every row and key and inferring or checking the types, without keeping the rows.
/// Every error [`read_table_with`] reports is reported here, before any row is returned.
pub fn plan(paths: &[PathBuf], key: KeySource, typing: Typing<'_>) -> ImportResult<ImportPlan> {
    plan_with(paths, key, typing, SORT_MEMORY_BYTES)
}

impl ImportPlan {
    /// The input files, in the order read.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The table's schema: inferred, or the existing one (plus [`Self::added`]).
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Attributes appended to an existing schema ([`NewColumns::Add`]), in order.
    pub fn added(&self) -> &[Attribute] {
        &self.added
    }

    /// Number of rows [`Self::rows`] yields.
    pub fn len(&self) -> u64 {
        self.rows
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Rows left out because an earlier file had their key.
    pub fn duplicates_skipped(&self) -> u64 {
        self.duplicates_skipped
    }

    /// Bytes of the inputs, decompressed.
    pub fn input_bytes(&self) -> u64 {
        self.input_bytes
    }

    /// Average text bytes of each attribute's present values, by attribute id (0 when
    /// the inputs have none).
    pub fn average_bytes(&self) -> &[f64] {
        &self.average_bytes
    }

    /// `file line N`, for messages.
    pub fn place(&self, origin: Origin) -> String {
        place(&self.files, origin)
    }

    /// The rows, typed, in input order, read again from the files one at a time (rows
    /// whose key an earlier file had are left out). An error ends the iteration; one can
    /// only come from a file that changed since [`plan`] read it, or failed to read.
    pub fn rows(&self) -> ImportResult<ImportedRows<'_>> {
        Ok(ImportedRows {
            plan: self,
            text: TextRows::new(&self.files, self.columns.frozen(), 0),
            skipped: SkipCursor::new(&self.skipped)?,
            rows_read: 0,
            rows_yielded: 0,
            done: false,
        })
    }
}

/// The rows of an [`ImportPlan`], read from the files as they are asked for.
pub struct ImportedRows<'a> {
    plan: &'a ImportPlan,
    text: TextRows<'a>,
    skipped: SkipCursor<'a>,
    /// Rows read, skipped ones included (the row number of the next).
    rows_read: u64,
    rows_yielded: u64,
    done: bool,
}

impl Iterator for ImportedRows<'_> {
    type Item = ImportResult<ImportedRow>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_row().transpose();
        if !matches!(next, Some(Ok(_))) {
            self.done = true;
        }
        next
    }
}

impl ImportedRows<'_> {
    fn next_row(&mut self) -> ImportResult<Option<ImportedRow>> {
        let plan = self.plan;
        let changed = || {
            ImportError::new(
                "the files changed since they were checked; load them again once they stay \
                 put",
            )
        };
        loop {
            let Some(row) = self.text.next_row()? else {
                if self.rows_yielded != plan.rows {
                    return Err(changed());
                }
                return Ok(None);
            };
            let number = self.rows_read;
            self.rows_read += 1;
            if self.skipped.contains(row.origin)? {
                continue;
            }
            if self.rows_yielded == plan.rows {
                return Err(changed());
            }
            let mut cells = row.cells;
            let key = match plan.key_column {
                Some(column) => take_cell(&mut cells, column)
                    .map(String::into_bytes)
                    .ok_or_else(|| {
                        ImportError::new(format!(
                            "{}: the key {:?} is empty",
                            plan.place(row.origin),
                            plan.schema.key
                        ))
                    })?,
                None => number.to_string().into_bytes(),
            };
            if key.len() > MAX_KEY_BYTES {
                return Err(ImportError::new(format!(
                    "{}: the key is {} bytes; the limit is {MAX_KEY_BYTES}",
                    plan.place(row.origin),
                    key.len()
                )));
            }
            let mut values = vec![None; plan.schema.attributes.len()];
            for (column, text) in cells {
                let Some(id) = plan.attribute_ids[column] else {
                    continue;
                };
                let attribute = &plan.schema.attributes[id];
                let value = typed_value(&text, attribute.attr_type).map_err(|reason| {
                    ImportError::new(format!(
                        "{}: column {:?}: {reason}",
                        plan.place(row.origin),
                        attribute.name
                    ))
                })?;
                values[id] = Some(value);
            }
            self.rows_yielded += 1;
            return Ok(Some(ImportedRow {
                key,
                values,
                origin: row.origin,
            }));
        }
    }
}

/// The value of `text` in a column of type `attr_type`, or why a table cannot take it.
fn typed_value(text: &str, attr_type: AttrType) -> Result<Value, String> {
    let value = parse_value(text, attr_type)
        .ok_or_else(|| format!("{text:?} is not a valid {} value", attr_type.name()))?;
    if text.len() > MAX_VALUE_BYTES && attr_type == AttrType::String {
        return Err(format!(
            "the value is {} bytes; the limit is {MAX_VALUE_BYTES}",
            text.len()
        ));
    }
    Ok(value)
}

/// Removes and returns the cell of `column`, if present.
fn take_cell(cells: &mut Vec<(usize, String)>, column: usize) -> Option<String> {
    let at = cells.iter().position(|(id, _)| *id == column)?;
    Some(cells.swap_remove(at).1)
}

fn plan_with(
    paths: &[PathBuf],
    key: KeySource,
    typing: Typing<'_>,
    sort_memory_bytes: usize,
) -> ImportResult<ImportPlan> {
    let existing = match typing {
        Typing::Existing { schema, .. } => Some(schema),
        Typing::Infer => None,
    };
    if let Some(schema) = existing {
        if schema.key != key.name() {
            return Err(ImportError::new(format!(
                "the table's key column is {:?}, not {:?}",
                schema.key,
                key.name()
            )));
        }
    }
    if paths.is_empty() {
        return Err(ImportError::new("no input files"));
    }
    if u32::try_from(paths.len()).is_err() {
        return Err(ImportError::new("too many input files"));
    }
    let first = survey(
        paths,
        &key,
        existing,
        Columns::default(),
        Scan::KeysAndTypes { sort_memory_bytes },
    )?;
    let columns = first.columns;
    let key_column = key_column(paths, &columns, &key)?;

    // Keys: the first error in input order, of those found while reading and the
    // repeats the sorted hashes show.
    let mut skipped = Sorted::Memory(Vec::new());
    let mut duplicates_skipped = 0;
    let mut key_error = first.first_key_error;
    if let Some(keys) = first.keys {
        // The skipped rows' list shares the memory with the keys being walked.
        let skipped_memory_bytes = sort_memory_bytes.saturating_sub(keys.memory_bytes());
        let check = check_keys(keys, skipped_memory_bytes)?;
        if let Some((later, earlier)) = check.first_repeat {
            if key_error.as_ref().is_none_or(|(origin, _)| later < *origin) {
                let shown = match key_column {
                    Some(column) => key_at(paths, &columns, column, later)?
                        .map_or_else(|| "(unreadable)".to_string(), |key| display_key(&key)),
                    None => String::new(),
                };
                let message = format!(
                    "{}: key {shown} repeats {}",
                    place(paths, later),
                    place(paths, earlier)
                );
                key_error = Some((later, message));
            }
        }
        skipped = check.skipped;
        duplicates_skipped = check.duplicates_skipped;
    }
    if let Some((_, message)) = key_error {
        return Err(ImportError::new(message));
    }

    // Rows left out must not type the columns: read the files again without them.
    let types = if duplicates_skipped > 0 {
        survey(
            paths,
            &key,
            existing,
            columns.frozen(),
            Scan::TypesWithout(&skipped),
        )?
        .types
    } else {
        first.types
    };
    let Mapping {
        schema,
        added,
        attribute_ids,
    } = map_columns(paths, &columns, key_column, key.name(), &types, typing)?;
    if let Some(message) = types.first_error(paths, &columns, &schema, &attribute_ids) {
        return Err(ImportError::new(message));
    }
    let mut average_bytes = vec![0.0; schema.attributes.len()];
    for (column, id) in attribute_ids.iter().enumerate() {
        if let Some(id) = id {
            average_bytes[*id] = types.profile(column).average_bytes();
        }
    }
    Ok(ImportPlan {
        files: paths.to_vec(),
        columns,
        key_column,
        attribute_ids,
        schema,
        added,
        skipped,
        rows: first.rows - duplicates_skipped,
        duplicates_skipped,
        input_bytes: first.input_bytes,
        average_bytes,
    })
}

/// The key's input column (`None` for row numbers).
fn key_column(
    paths: &[PathBuf],
    columns: &Columns,
    source: &KeySource,
) -> ImportResult<Option<usize>> {
    match source {
        KeySource::Column(name) => match columns.id(name) {
            Some(id) => Ok(Some(id)),
            None => Err(ImportError::new(format!(
                "no input has the key column {name:?}"
            ))),
        },
        KeySource::RowNumber => match columns.id(ROW_NUMBER_KEY) {
            Some(id) => Err(ImportError::new(format!(
                "{}: a column is named {ROW_NUMBER_KEY:?}, the key's name when keys are row \
                 numbers",
                paths[columns.first_files[id]].display()
            ))),
            None => Ok(None),
        },
    }
}

/// The key of the row at `origin`, read again (for a message).
fn key_at(
    paths: &[PathBuf],
    columns: &Columns,
    key_column: usize,
    origin: Origin,
) -> ImportResult<Option<Vec<u8>>> {
    let mut text = TextRows::new(paths, columns.frozen(), origin.file);
    while let Some(mut row) = text.next_row()? {
        if row.origin >= origin {
            if row.origin > origin {
                return Ok(None);
            }
            return Ok(take_cell(&mut row.cells, key_column).map(String::into_bytes));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------
// Surveys: one read of the files, keeping counters, first errors and key hashes.

/// What a survey does besides reading every row.
enum Scan<'a> {
    /// Hashes the keys and types the columns (the first read).
    KeysAndTypes { sort_memory_bytes: usize },
    /// Types the columns from the rows not in this list (the second read).
    TypesWithout(&'a Sorted<ORIGIN_ENTRY_BYTES>),
}

/// What one read of the files found.
struct Survey {
    columns: Columns,
    rows: u64,
    input_bytes: u64,
    /// The first row with an empty or too long key, and the message.
    first_key_error: Option<(Origin, String)>,
    /// Every other row's key hash and origin, sorted (with [`KeySource::Column`]).
    keys: Option<Sorted<KEY_ENTRY_BYTES>>,
    types: TypeSurvey,
}

fn survey(
    paths: &[PathBuf],
    key: &KeySource,
    existing: Option<&Schema>,
    columns: Columns,
    scan: Scan<'_>,
) -> ImportResult<Survey> {
    let mut text = TextRows::new(paths, columns, 0);
    let (mut keys, mut skipped) = match (&scan, key) {
        (Scan::KeysAndTypes { sort_memory_bytes }, KeySource::Column(_)) => {
            // An eighth is left for the list of skipped rows the keys give.
            let keys_memory_bytes = sort_memory_bytes - sort_memory_bytes / 8;
            (Some(SpillSort::new(keys_memory_bytes)), None)
        }
        (Scan::KeysAndTypes { .. }, KeySource::RowNumber) => (None, None),
        (Scan::TypesWithout(skipped), _) => (None, Some(SkipCursor::new(skipped)?)),
    };
    let hasher = KeyHasher::new();
    let mut rows = 0;
    let mut first_key_error = None;
    let mut types = TypeSurvey::default();
    while let Some(row) = text.next_row()? {
        rows += 1;
        if let Some(skipped) = &mut skipped {
            if skipped.contains(row.origin)? {
                continue;
            }
        }
        let key_column = match key {
            KeySource::Column(name) => text.columns.id(name),
            KeySource::RowNumber => None,
        };
        if let (Some(keys), KeySource::Column(name)) = (&mut keys, key) {
            let cell = key_column.and_then(|c| row.cells.iter().find(|(id, _)| *id == c));
            let problem = match cell {
                None => Some(format!("the key {name:?} is empty")),
                Some((_, key)) if key.len() > MAX_KEY_BYTES => Some(format!(
                    "the key is {} bytes; the limit is {MAX_KEY_BYTES}",
                    key.len()
                )),
                Some((_, key)) => {
                    keys.push(key_entry(hasher.hash(key.as_bytes()), row.origin))?;
                    None
                }
            };
            if let (Some(problem), None) = (problem, &first_key_error) {
                let message = format!("{}: {problem}", place(paths, row.origin));
                first_key_error = Some((row.origin, message));
            }
        }
        for (column, cell) in &row.cells {
            if Some(*column) != key_column {
                types.observe(paths, &text.columns, existing, row.origin, *column, cell);
            }
        }
    }
    let input_bytes = text.input_bytes;
    Ok(Survey {
        columns: text.columns,
        rows,
        input_bytes,
        first_key_error,
        keys: keys.map(SpillSort::finish).transpose()?,
        types,
    })
}

/// The key hashes and their rows' origins.
struct KeyHasher {
    low: RandomState,
    high: RandomState,
}

impl KeyHasher {
    fn new() -> KeyHasher {
        // Two states of one thread have different keys (std increments one per state).
        KeyHasher {
            low: RandomState::new(),
            high: RandomState::new(),
        }
    }

    fn hash(&self, key: &[u8]) -> u128 {
        (u128::from(self.high.hash_one(key)) << 64) | u128::from(self.low.hash_one(key))
    }
}

/// A key check entry, ordered by hash, then origin.
fn key_entry(hash: u128, origin: Origin) -> [u8; KEY_ENTRY_BYTES] {
    let mut entry = [0; KEY_ENTRY_BYTES];
    entry[..16].copy_from_slice(&hash.to_be_bytes());
    entry[16..].copy_from_slice(&origin_entry(origin));
    entry
}

/// An origin as bytes ordered as origins are (the file index fits: see `plan_with`).
fn origin_entry(origin: Origin) -> [u8; ORIGIN_ENTRY_BYTES] {
    let mut entry = [0; ORIGIN_ENTRY_BYTES];
    entry[..4].copy_from_slice(&(origin.file as u32).to_be_bytes());
    entry[4..].copy_from_slice(&origin.line.to_be_bytes());
    entry
}

fn origin_of(entry: &[u8]) -> Origin {
    let file: [u8; 4] = entry[..4].try_into().expect("4 bytes");
    let line: [u8; 8] = entry[4..12].try_into().expect("8 bytes");
    Origin {
        file: u32::from_be_bytes(file) as usize,
        line: u64::from_be_bytes(line),
    }
}

/// What the sorted key hashes show.
struct KeyCheck {
    /// The first row (in input order) whose key an earlier row of its file had, and
    /// that earlier row.
    first_repeat: Option<(Origin, Origin)>,
    /// Rows whose key an earlier file had, ascending.
    skipped: Sorted<ORIGIN_ENTRY_BYTES>,
    duplicates_skipped: u64,
}

/// Walks the hashes in order: within one key's entries (by origin) the first is kept,
/// a later one in the same file is a repeat, one in a later file is skipped.
fn check_keys(keys: Sorted<KEY_ENTRY_BYTES>, sort_memory_bytes: usize) -> ImportResult<KeyCheck> {
    let mut skipped = SpillSort::new(sort_memory_bytes);
    let mut first_repeat: Option<(Origin, Origin)> = None;
    let mut duplicates_skipped = 0;
    let mut group: Option<([u8; 16], Origin)> = None;
    for entry in keys.iter()? {
        let entry = entry?;
        let hash: [u8; 16] = entry[..16].try_into().expect("16 bytes");
        let origin = origin_of(&entry[16..]);
        match group {
            Some((group_hash, first)) if group_hash == hash => {
                if origin.file == first.file {
                    if first_repeat.is_none_or(|(later, _)| origin < later) {
                        first_repeat = Some((origin, first));
                    }
                } else {
                    skipped.push(origin_entry(origin))?;
                    duplicates_skipped += 1;
                }
            }
            _ => group = Some((hash, origin)),
        }
    }
    Ok(KeyCheck {
        first_repeat,
        skipped: skipped.finish()?,
        duplicates_skipped,
    })
}

/// Walks a sorted list of origins along rows read in order.
struct SkipCursor<'a> {
    entries: SortedIter<'a, ORIGIN_ENTRY_BYTES>,
    next: Option<Origin>,
}

impl<'a> SkipCursor<'a> {
    fn new(skipped: &'a Sorted<ORIGIN_ENTRY_BYTES>) -> ImportResult<SkipCursor<'a>> {
        let mut entries = skipped.iter()?;
        let next = entries.next().transpose()?.map(|e| origin_of(&e));
        Ok(SkipCursor { entries, next })
    }

    /// Whether `origin` is in the list; origins must be asked for in ascending order.
    fn contains(&mut self, origin: Origin) -> ImportResult<bool> {
        while let Some(next) = self.next {
            if next >= origin {
                return Ok(next == origin);
            }
            self.next = self.entries.next().transpose()?.map(|e| origin_of(&e));
        }
        Ok(false)
    }
}

/// Per input column: type inference, text counters and the first errors.
#[derive(Default)]
struct TypeSurvey {
    /// By input column id.
    profiles: Vec<ColumnProfile>,
    /// By input column id: the first value longer than [`MAX_VALUE_BYTES`] of a column
    /// whose type is not known yet, and its length.
    first_long_values: Vec<Option<(Origin, usize)>>,
    /// The first value of an existing table's column that does not fit it, and the
    /// message.
    first_error: Option<(Origin, String)>,
}

impl TypeSurvey {
    fn observe(
        &mut self,
        paths: &[PathBuf],
        columns: &Columns,
        existing: Option<&Schema>,
        origin: Origin,
        column: usize,
        text: &str,
    ) {
        if self.profiles.len() <= column {
            self.profiles.resize(column + 1, ColumnProfile::default());
            self.first_long_values.resize(column + 1, None);
        }
        let name = &columns.names[column];
        let known = existing
            .and_then(|schema| schema.id_of(name).map(|id| &schema.attributes[id as usize]));
        let Some(attribute) = known else {
            self.profiles[column].observe(text);
            if text.len() > MAX_VALUE_BYTES && self.first_long_values[column].is_none() {
                self.first_long_values[column] = Some((origin, text.len()));
            }
            return;
        };
        self.profiles[column].count(text);
        if self.first_error.is_none() {
            if let Err(reason) = typed_value(text, attribute.attr_type) {
                let message = format!("{}: column {name:?}: {reason}", place(paths, origin));
                self.first_error = Some((origin, message));
            }
        }
    }

    /// The profile of a column (a column without any value has not got one yet).
    fn profile(&self, column: usize) -> ColumnProfile {
        self.profiles.get(column).cloned().unwrap_or_default()
    }

    /// The first value (in input order) that does not fit its column of `schema`.
    fn first_error(
        &self,
        paths: &[PathBuf],
        columns: &Columns,
        schema: &Schema,
        attribute_ids: &[Option<usize>],
    ) -> Option<String> {
        let long_strings =
            self.first_long_values
                .iter()
                .enumerate()
                .filter_map(|(column, long)| {
                    let (origin, bytes) = (*long)?;
                    let id = attribute_ids[column]?;
                    (schema.attributes[id].attr_type == AttrType::String).then(|| {
                        let message = format!(
                            "{}: column {:?}: the value is {bytes} bytes; the limit is \
                         {MAX_VALUE_BYTES}",
                            place(paths, origin),
                            columns.names[column]
                        );
                        (origin, message)
                    })
                });
        self.first_error
            .iter()
            .cloned()
            .chain(long_strings)
            .min_by_key(|(origin, _)| *origin)
            .map(|(_, message)| message)
    }
}

// ---------------------------------------------------------------------------------
// Reading the inputs: text cells, columns the union over files.

/// The input columns, in order of first appearance.
#[derive(Clone, Debug, Default)]
struct Columns {
    names: Vec<String>,
    /// The file each column first appears in.
    first_files: Vec<usize>,
    ids: HashMap<String, usize>,
    /// Whether a new column is an error (a second read of the files).
    frozen: bool,
}

impl Columns {
    fn id(&self, name: &str) -> Option<usize> {
        self.ids.get(name).copied()
    }

    /// The id of `name`, which is new unless frozen. Errors are the message after the
    /// file's name and line.
    fn register(&mut self, name: &str, file: usize) -> Result<usize, String> {
        if let Some(id) = self.id(name) {
            return Ok(id);
        }
        if self.frozen {
            return Err(format!(
                "the column {name:?} was not there when the file was first read; it \
                 changed since"
            ));
        }
        if name.len() > MAX_ATTRIBUTE_NAME_BYTES {
            return Err(format!(
                "the column name {} is {} bytes; names are at most \
                 {MAX_ATTRIBUTE_NAME_BYTES}",
                display_key(name.as_bytes()),
                name.len()
            ));
        }
        if self.names.len() >= MAX_INPUT_COLUMNS {
            return Err(format!(
                "the inputs' columns do not make a table: more than {MAX_INPUT_COLUMNS} \
                 (a key and at most {MAX_ATTRIBUTES} attributes); cannot add {name:?}"
            ));
        }
        self.names.push(name.to_string());
        self.first_files.push(file);
        self.ids.insert(name.to_string(), self.names.len() - 1);
        Ok(self.names.len() - 1)
    }

    fn frozen(&self) -> Columns {
        Columns {
            frozen: true,
            ..self.clone()
        }
    }
}

/// One input row: its present cells as (column id, text).
struct TextRow {
    origin: Origin,
    cells: Vec<(usize, String)>,
}

/// The input files read in order, one row at a time.
struct TextRows<'a> {
    files: &'a [PathBuf],
    columns: Columns,
    next_file: usize,
    /// The file being read and its index.
    reader: Option<(FileReader, usize)>,
    /// Bytes of the files finished, decompressed.
    input_bytes: u64,
}

impl<'a> TextRows<'a> {
    fn new(files: &'a [PathBuf], columns: Columns, first_file: usize) -> TextRows<'a> {
        TextRows {
            files,
            columns,
            next_file: first_file,
            reader: None,
            input_bytes: 0,
        }
    }

    fn next_row(&mut self) -> ImportResult<Option<TextRow>> {
        loop {
            let (reader, file) = match &mut self.reader {
                Some((reader, file)) => (reader, *file),
                None => {
                    let Some(path) = self.files.get(self.next_file) else {
                        return Ok(None);
                    };
                    let file = self.next_file;
                    self.next_file += 1;
                    let reader = FileReader::open(path, file, &mut self.columns)
                        .map_err(|message| file_error(path, &message))?;
                    let (reader, file) = self.reader.insert((reader, file));
                    (reader, *file)
                }
            };
            match reader.next_row(file, &mut self.columns) {
                Ok(Some(row)) => return Ok(Some(row)),
                Ok(None) => {
                    self.input_bytes += reader.input_bytes();
                    self.reader = None;
                }
                Err(message) => return Err(file_error(&self.files[file], &message)),
            }
        }
    }
}

/// `message` is what follows the file's name: ` line N: ...` or `: ...`.
fn file_error(path: &Path, message: &str) -> ImportError {
    ImportError::new(format!("{}{message}", path.display()))
}

enum Format {
    Csv,
    JsonLines,
}

fn format_of(path: &Path) -> Result<Format, String> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    if name.ends_with(".csv") {
        Ok(Format::Csv)
    } else if name.ends_with(".jsonl") || name.ends_with(".json") {
        Ok(Format::JsonLines)
    } else {
        Err(": expected a .csv, .jsonl or .json file (optionally .gz)".to_string())
    }
}

/// A file's decompressed bytes, counted, and cut off past `limit` (so that a record
/// cannot make the CSV reader buffer more than that).
struct Input {
    source: Box<dyn Read>,
    compressed: bool,
    delivered_bytes: u64,
    /// Bytes past which nothing more is delivered.
    limit_bytes: u64,
    /// Whether a read stopped at the limit.
    exceeded: bool,
    /// Why the source failed, for the message.
    failure: Option<String>,
}

impl Input {
    fn open(path: &Path) -> Result<Input, String> {
        let file = std::fs::File::open(path).map_err(|e| format!(": cannot open: {e}"))?;
        let compressed = path.extension().is_some_and(|e| e == "gz");
        let source: Box<dyn Read> = if compressed {
            let buffered = BufReader::with_capacity(READ_BUFFER_BYTES, file);
            Box::new(flate2::read::MultiGzDecoder::new(buffered))
        } else {
            Box::new(file)
        };
        Ok(Input {
            source,
            compressed,
            delivered_bytes: 0,
            limit_bytes: u64::MAX,
            exceeded: false,
            failure: None,
        })
    }

    /// The message after the file's name for a failed read, if the source failed.
    fn failure(&self) -> Option<String> {
        self.failure.as_ref().map(|e| format!(": {e}"))
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.limit_bytes.saturating_sub(self.delivered_bytes);
        if room == 0 {
            self.exceeded = true;
            return Err(std::io::Error::other("the record is too long"));
        }
        let wanted = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        loop {
            match self.source.read(&mut buf[..wanted]) {
                Ok(n) => {
                    self.delivered_bytes += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.failure = Some(if self.compressed {
                        format!("cannot decompress (not valid gzip?): {e}")
                    } else {
                        format!("cannot read: {e}")
                    });
                    return Err(e);
                }
            }
        }
    }
}

fn record_too_long(line: u64) -> String {
    format!(
        " line {line}: the record is longer than {MAX_RECORD_BYTES} bytes, the limit of one \
         input row; it was not read"
    )
}

/// One file being read.
enum FileReader {
    Csv {
        reader: Box<csv::Reader<Input>>,
        /// Column id of each field.
        ids: Vec<usize>,
        record: csv::StringRecord,
    },
    JsonLines {
        input: BufReader<Input>,
        line: Vec<u8>,
        line_number: u64,
    },
}

impl FileReader {
    /// Opens the file (and reads a CSV header). Errors are the message after its name.
    fn open(path: &Path, file: usize, columns: &mut Columns) -> Result<FileReader, String> {
        let format = format_of(path)?;
        let input = Input::open(path)?;
        match format {
            Format::Csv => open_csv(input, file, columns),
            Format::JsonLines => Ok(FileReader::JsonLines {
                input: BufReader::with_capacity(READ_BUFFER_BYTES, input),
                line: Vec::new(),
                line_number: 0,
            }),
        }
    }

    /// Bytes read so far, decompressed.
    fn input_bytes(&self) -> u64 {
        match self {
            FileReader::Csv { reader, .. } => reader.get_ref().delivered_bytes,
            FileReader::JsonLines { input, .. } => input.get_ref().delivered_bytes,
        }
    }

    /// The next row; errors are the message after the file's name.
    fn next_row(&mut self, file: usize, columns: &mut Columns) -> Result<Option<TextRow>, String> {
        match self {
            FileReader::Csv {
                reader,
                ids,
                record,
            } => next_csv_row(reader, ids, record, file),
            FileReader::JsonLines {
                input,
                line,
                line_number,
            } => next_json_row(input, line, line_number, file, columns),
        }
    }
}

/// The message after the file's name for a CSV error in the record starting at `line`.
fn csv_error(input: &Input, error: csv::Error, line: u64) -> String {
    if let Some(failure) = input.failure() {
        return failure;
    }
    if input.exceeded {
        return record_too_long(line);
    }
    match (error.kind(), error.position()) {
        (
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            },
            Some(position),
        ) => format!(
            " line {}: {len} fields, but the header has {expected_len}",
            position.line()
        ),
        (_, Some(position)) => format!(" line {}: {error}", position.line()),
        (_, None) => format!(": {error}"),
    }
}

/// Bytes the CSV reader may take past a record's start: the record and one read ahead.
const CSV_RECORD_READ_BYTES: u64 = (MAX_RECORD_BYTES + READ_BUFFER_BYTES) as u64;

/// RFC 4180 CSV with a header row.
fn open_csv(mut input: Input, file: usize, columns: &mut Columns) -> Result<FileReader, String> {
    input.limit_bytes = CSV_RECORD_READ_BYTES;
    let mut reader = csv::ReaderBuilder::new()
        .buffer_capacity(READ_BUFFER_BYTES)
        .from_reader(input);
    let headers = match reader.headers() {
        Ok(headers) => headers.clone(),
        Err(e) => return Err(csv_error(reader.get_ref(), e, 1)),
    };
    if reader.position().byte() > MAX_RECORD_BYTES as u64 {
        return Err(record_too_long(1));
    }
    let mut ids = Vec::with_capacity(headers.len());
    for (index, name) in headers.iter().enumerate() {
        if name.is_empty() {
            return Err(format!(
                " line 1: column {} of the header has no name",
                index + 1
            ));
        }
        let id = columns
            .register(name, file)
            .map_err(|message| format!(" line 1: {message}"))?;
        if ids.contains(&id) {
            return Err(format!(
                " line 1: column {name:?} appears twice in the header"
            ));
        }
        ids.push(id);
    }
    Ok(FileReader::Csv {
        reader: Box::new(reader),
        ids,
        record: csv::StringRecord::new(),
    })
}

fn next_csv_row(
    reader: &mut csv::Reader<Input>,
    ids: &[usize],
    record: &mut csv::StringRecord,
    file: usize,
) -> Result<Option<TextRow>, String> {
    let start = reader.position().clone();
    reader.get_mut().limit_bytes = start.byte() + CSV_RECORD_READ_BYTES;
    match reader.read_record(record) {
        Ok(false) => Ok(None),
        Ok(true) => {
            let begins = record.position().unwrap_or(&start);
            let line = begins.line();
            if reader.position().byte() - begins.byte() > MAX_RECORD_BYTES as u64 {
                return Err(record_too_long(line));
            }
            let cells = ids
                .iter()
                .zip(record.iter())
                .filter(|(_, text)| is_present(text))
                .map(|(&id, text)| (id, text.to_string()))
                .collect();
            Ok(Some(TextRow {
                origin: Origin { file, line },
                cells,
            }))
        }
        Err(e) => Err(csv_error(reader.get_ref(), e, start.line())),
    }
}

/// How a bounded line read ended.
enum LineRead {
    /// A line (without its `\n`) is in the buffer.
    Line,
    /// The input has no more lines.
    End,
    /// The line is longer than the bound (it was read only up to there).
    TooLong,
}

/// Reads one line into `line` (cleared first), without its `\n`, reading at most
/// `max_bytes + 1` bytes of it.
fn read_line_bounded(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    loop {
        let buffered = match input.fill_buf() {
            Ok(buffered) => buffered,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffered.is_empty() {
            return Ok(if line.is_empty() {
                LineRead::End
            } else {
                LineRead::Line
            });
        }
        let (taken, ends) = match buffered.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buffered.len(), false),
        };
        if line.len() + taken > max_bytes {
            return Ok(LineRead::TooLong);
        }
        line.extend_from_slice(&buffered[..taken]);
        input.consume(taken + usize::from(ends));
        if ends {
            return Ok(LineRead::Line);
        }
    }
}

/// One JSON object per line; nested values are kept as their JSON text.
fn next_json_row(
    input: &mut BufReader<Input>,
    line: &mut Vec<u8>,
    line_number: &mut u64,
    file: usize,
    columns: &mut Columns,
) -> Result<Option<TextRow>, String> {
    loop {
        let read = read_line_bounded(input, line, MAX_RECORD_BYTES);
        let read = read.map_err(|e| {
            input
                .get_ref()
                .failure()
                .unwrap_or_else(|| format!(": cannot read: {e}"))
        })?;
        *line_number += 1;
        match read {
            LineRead::End => return Ok(None),
            LineRead::TooLong => return Err(record_too_long(*line_number)),
            LineRead::Line => {}
        }
        let text =
            std::str::from_utf8(line).map_err(|_| format!(" line {line_number}: not UTF-8"))?;
        if text.trim().is_empty() {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!(" line {line_number}: {e}"))?;
        let serde_json::Value::Object(object) = parsed else {
            return Err(format!(" line {line_number}: expected a JSON object"));
        };
        let mut cells = Vec::with_capacity(object.len());
        for (name, value) in object {
            let id = columns
                .register(&name, file)
                .map_err(|message| format!(" line {line_number}: {message}"))?;
            if let Some(cell) = json_cell(value).filter(|cell| is_present(cell)) {
                cells.push((id, cell));
            }
        }
        return Ok(Some(TextRow {
            origin: Origin {
                file,
                line: *line_number,
            },
            cells,
        }));
    }
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
// Sorting fixed-size entries in bounded memory, spilling sorted runs to files.

/// A temporary directory, removed with everything in it when dropped.
#[derive(Debug)]
struct SpillDir {
    path: PathBuf,
    files_created: usize,
}

impl SpillDir {
    fn create() -> ImportResult<SpillDir> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static CREATED: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        let mut last_error = None;
        for _ in 0..16 {
            let number = CREATED.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("puffer-import-{}-{number}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => {
                    return Ok(SpillDir {
                        path,
                        files_created: 0,
                    })
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(ImportError::new(format!(
            "cannot create a temporary directory in {} for the key check: {}",
            base.display(),
            last_error.map_or_else(String::new, |e| e.to_string())
        )))
    }

    fn new_file(&mut self) -> PathBuf {
        self.files_created += 1;
        self.path.join(format!("run-{}", self.files_created))
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn spill_error(path: &Path, e: std::io::Error) -> ImportError {
    ImportError::new(format!(
        "the key check's temporary file {}: {e} (beyond {SORT_MEMORY_BYTES} bytes of keys it \
         sorts on disk, in $TMPDIR)",
        path.display()
    ))
}

/// A sorted run in a file.
#[derive(Debug)]
struct Run {
    path: PathBuf,
    entries: u64,
}

/// Sorts entries of `N` bytes holding at most `memory_bytes` of them in memory.
struct SpillSort<const N: usize> {
    buffer: Vec<[u8; N]>,
    buffer_entries: usize,
    dir: Option<SpillDir>,
    runs: Vec<Run>,
}

impl<const N: usize> SpillSort<N> {
    fn new(memory_bytes: usize) -> SpillSort<N> {
        SpillSort {
            buffer: Vec::new(),
            buffer_entries: (memory_bytes / N).max(2),
            dir: None,
            runs: Vec::new(),
        }
    }

    fn push(&mut self, entry: [u8; N]) -> ImportResult<()> {
        if self.buffer.len() >= self.buffer_entries {
            self.spill()?;
        }
        if self.buffer.len() == self.buffer.capacity() {
            // Doubling, as push would, but never past the bound.
            let room = self.buffer_entries - self.buffer.len();
            self.buffer
                .reserve_exact(self.buffer.capacity().clamp(1024, 1 << 20).min(room));
        }
        self.buffer.push(entry);
        Ok(())
    }

    fn spill(&mut self) -> ImportResult<()> {
        self.buffer.sort_unstable();
        let dir = match &mut self.dir {
            Some(dir) => dir,
            None => self.dir.insert(SpillDir::create()?),
        };
        let path = dir.new_file();
        let entries = self.buffer.len() as u64;
        write_run(&path, self.buffer.drain(..).map(Ok))?;
        self.runs.push(Run { path, entries });
        Ok(())
    }

    fn finish(mut self) -> ImportResult<Sorted<N>> {
        if self.runs.is_empty() {
            self.buffer.sort_unstable();
            return Ok(Sorted::Memory(self.buffer));
        }
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        self.buffer = Vec::new();
        let mut dir = self.dir.take().expect("runs were spilled to a directory");
        let mut runs = self.runs;
        while runs.len() > MAX_MERGE_RUNS {
            let merged: Vec<Run> = runs.drain(..MAX_MERGE_RUNS).collect();
            let path = dir.new_file();
            let entries = merged.iter().map(|run| run.entries).sum();
            write_run(&path, Merge::<N>::new(&merged)?)?;
            for run in &merged {
                let _ = std::fs::remove_file(&run.path);
            }
            runs.push(Run { path, entries });
        }
        Ok(Sorted::Runs { _dir: dir, runs })
    }
}

fn write_run<const N: usize>(
    path: &Path,
    entries: impl Iterator<Item = ImportResult<[u8; N]>>,
) -> ImportResult<()> {
    let file = std::fs::File::create(path).map_err(|e| spill_error(path, e))?;
    let mut writer = BufWriter::with_capacity(MERGE_READ_BUFFER_BYTES, file);
    for entry in entries {
        writer
            .write_all(&entry?)
            .map_err(|e| spill_error(path, e))?;
    }
    writer.flush().map_err(|e| spill_error(path, e))
}

/// Entries sorted ascending: in memory, or in runs to merge.
#[derive(Debug)]
enum Sorted<const N: usize> {
    Memory(Vec<[u8; N]>),
    Runs { _dir: SpillDir, runs: Vec<Run> },
}

impl<const N: usize> Sorted<N> {
    /// Bytes it holds in memory, or takes to read (a buffer for each run merged).
    fn memory_bytes(&self) -> usize {
        match self {
            Sorted::Memory(entries) => entries.capacity() * N,
            Sorted::Runs { runs, .. } => runs.len() * MERGE_READ_BUFFER_BYTES,
        }
    }

    fn iter(&self) -> ImportResult<SortedIter<'_, N>> {
        Ok(match self {
            Sorted::Memory(entries) => SortedIter::Memory(entries.iter()),
            Sorted::Runs { runs, .. } => SortedIter::Merge(Merge::new(runs)?),
        })
    }
}

enum SortedIter<'a, const N: usize> {
    Memory(std::slice::Iter<'a, [u8; N]>),
    Merge(Merge<N>),
}

impl<const N: usize> Iterator for SortedIter<'_, N> {
    type Item = ImportResult<[u8; N]>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            SortedIter::Memory(entries) => entries.next().copied().map(Ok),
            SortedIter::Merge(merge) => merge.next(),
        }
    }
}

/// A merge of sorted runs, each read through its own buffer.
struct Merge<const N: usize> {
    readers: Vec<(BufReader<std::fs::File>, u64, PathBuf)>,
    heap: BinaryHeap<Reverse<([u8; N], usize)>>,
    failed: bool,
}

impl<const N: usize> Merge<N> {
    fn new(runs: &[Run]) -> ImportResult<Merge<N>> {
        let mut merge = Merge {
            readers: Vec::with_capacity(runs.len()),
            heap: BinaryHeap::with_capacity(runs.len()),
            failed: false,
        };
        for (index, run) in runs.iter().enumerate() {
            let file = std::fs::File::open(&run.path).map_err(|e| spill_error(&run.path, e))?;
            let reader = BufReader::with_capacity(MERGE_READ_BUFFER_BYTES, file);
            merge.readers.push((reader, run.entries, run.path.clone()));
            merge.refill(index)?;
        }
        Ok(merge)
    }

    /// Moves run `index`'s next entry onto the heap.
    fn refill(&mut self, index: usize) -> ImportResult<()> {
        let (reader, left, path) = &mut self.readers[index];
        if *left == 0 {
            return Ok(());
        }
        let mut entry = [0; N];
        reader
            .read_exact(&mut entry)
            .map_err(|e| spill_error(path, e))?;
        *left -= 1;
        self.heap.push(Reverse((entry, index)));
        Ok(())
    }
}

impl<const N: usize> Iterator for Merge<N> {
    type Item = ImportResult<[u8; N]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let Reverse((entry, index)) = self.heap.pop()?;
        if let Err(e) = self.refill(index) {
            self.failed = true;
            return Some(Err(e));
        }
        Some(Ok(entry))
    }
}

// ---------------------------------------------------------------------------------
// Types: each column gets the narrowest type all its present values parse as.

/// What the present values of one column parse as; [`ColumnProfile::attr_type`] is the
/// inferred type.
#[derive(Clone, Debug)]
pub struct ColumnProfile {
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
    /// Takes one present value into account.
    pub fn observe(&mut self, text: &str) {
        self.present += 1;
        self.text_bytes += text.len() as u64;
        self.int = self.int && text.parse::<i64>().is_ok();
        self.float = self.float && parse_float(text).is_some();
        self.boolean = self.boolean && parse_bool(text).is_some();
        self.timestamp = self.timestamp && parse_timestamp_micros(text).is_some();
    }

    /// Counts one present value of a column whose type is known (for its average).
    fn count(&mut self, text: &str) {
        self.present += 1;
        self.text_bytes += text.len() as u64;
    }

    /// Int, else float, else bool, else timestamp, else string; a column without any
    /// value is a string column.
    pub fn attr_type(&self) -> AttrType {
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

    /// Average text bytes of the values observed (0 for none).
    pub fn average_bytes(&self) -> f64 {
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

/// The value of a present cell in a column of type `attr_type`, or `None` when the text
/// is not one.
pub fn parse_value(text: &str, attr_type: AttrType) -> Option<Value> {
    match attr_type {
        AttrType::String => Some(Value::str(text)),
        AttrType::Int => text.parse().ok().map(Value::Int),
        AttrType::Float => parse_float(text).map(Value::Float),
        AttrType::Bool => parse_bool(text).map(Value::Bool),
        AttrType::Timestamp => parse_timestamp_micros(text).map(Value::Timestamp),
    }
}

/// The schema, and the schema attribute id of each input column (`None` for the key's).
struct Mapping {
    schema: Schema,
    added: Vec<Attribute>,
    attribute_ids: Vec<Option<usize>>,
}

fn schema_error(e: puffer_store::StoreError) -> ImportError {
    ImportError::new(format!("the inputs' columns do not make a table: {e}"))
}

fn map_columns(
    paths: &[PathBuf],
    columns: &Columns,
    key_column: Option<usize>,
    key_name: &str,
    types: &TypeSurvey,
    typing: Typing<'_>,
) -> ImportResult<Mapping> {
    // Attributes are the columns with the key column left out.
    let attribute_columns: Vec<usize> = (0..columns.names.len())
        .filter(|&column| Some(column) != key_column)
        .collect();
    let mut attribute_ids = vec![None; columns.names.len()];
    match typing {
        Typing::Infer => {
            let attributes = attribute_columns
                .iter()
                .map(|&column| Attribute {
                    name: columns.names[column].clone(),
                    attr_type: types.profile(column).attr_type(),
                })
                .collect();
            let schema = Schema::new(key_name, attributes).map_err(schema_error)?;
            for (id, &column) in attribute_columns.iter().enumerate() {
                attribute_ids[column] = Some(id);
            }
            Ok(Mapping {
                schema,
                added: Vec::new(),
                attribute_ids,
            })
        }
        Typing::Existing {
            schema,
            new_columns,
        } => {
            let known = |column: usize| schema.id_of(&columns.names[column]).is_some();
            let missing: Vec<usize> = attribute_columns
                .iter()
                .copied()
                .filter(|&column| !known(column))
                .collect();
            if !missing.is_empty() && new_columns == NewColumns::Refuse {
                let named: Vec<String> = missing
                    .iter()
                    .map(|&column| {
                        let file = &paths[columns.first_files[column]];
                        format!("{:?} (in {})", columns.names[column], file.display())
                    })
                    .collect();
                let has: Vec<&str> = schema.attributes.iter().map(|a| a.name.as_str()).collect();
                return Err(ImportError::new(format!(
                    "the table has no column {} (it has: {})",
                    named.join(", "),
                    if has.is_empty() {
                        "no attributes".to_string()
                    } else {
                        has.join(", ")
                    }
                )));
            }
            let mut extended = schema.clone();
            let mut added = Vec::new();
            for &column in &attribute_columns {
                let name = &columns.names[column];
                let schema_id = match schema.id_of(name) {
                    Some(schema_id) => schema_id,
                    None => {
                        let attribute = Attribute {
                            name: name.clone(),
                            attr_type: types.profile(column).attr_type(),
                        };
                        added.push(attribute.clone());
                        extended.add_attribute(attribute).map_err(schema_error)?
                    }
                };
                attribute_ids[column] = Some(schema_id as usize);
            }
            Ok(Mapping {
                schema: extended,
                added,
                attribute_ids,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Write;

    fn write(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn types(table: &ImportedTable) -> Vec<(&str, AttrType)> {
        let attributes = &table.schema.attributes;
        attributes
            .iter()
            .map(|a| (a.name.as_str(), a.attr_type))
            .collect()
    }

    fn error(result: ImportResult<ImportedTable>) -> String {
        result.expect_err("an error").message().to_string()
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
    fn values_parse_by_type() {
        assert_eq!(parse_value("42", AttrType::Int), Some(Value::Int(42)));
        assert_eq!(parse_value("4.5", AttrType::Int), None);
        assert_eq!(
            parse_value("-0.0", AttrType::Float),
            Some(Value::Float(0.0))
        );
        assert_eq!(parse_value("NaN", AttrType::Float), None);
        assert_eq!(parse_value("t", AttrType::Bool), Some(Value::Bool(true)));
        assert_eq!(parse_value("yes", AttrType::Bool), None);
        assert_eq!(
            parse_value("1970-01-01T00:00:01Z", AttrType::Timestamp),
            Some(Value::Timestamp(1_000_000))
        );
        assert_eq!(parse_value("soon", AttrType::Timestamp), None);
        assert_eq!(parse_value("x", AttrType::String), Some(Value::str("x")));
        assert!(!is_present("") && !is_present("NULL") && is_present("null"));
    }

    #[test]
    fn csv_and_json_lines_read_as_one_typed_table() {
        let dir = tempfile::tempdir().unwrap();
        let csv = write(
            dir.path(),
            "a.csv",
            b"id,price,ok,when,note\n\
              1,10,t,2024-01-01,\"hello, world\"\n\
              2,,f,2024-01-02T10:00:00Z,NULL\n",
        );
        let jsonl = write(
            dir.path(),
            "b.jsonl.gz",
            &gzip(
                b"{\"id\": \"3\", \"price\": 12.5, \"extra\": {\"a\": 1}, \"ok\": null}\n\
                  \n\
                  {\"id\": \"4\", \"note\": \"multi\\nline\"}\n",
            ),
        );
        let table = read_table(&[csv, jsonl], KeySource::Column("id".into())).unwrap();
        assert_eq!(table.schema.key, "id");
        assert_eq!(
            types(&table),
            [
                ("price", AttrType::Float),
                ("ok", AttrType::Bool),
                ("when", AttrType::Timestamp),
                ("note", AttrType::String),
                ("extra", AttrType::String),
            ]
        );
        assert_eq!(table.len(), 4);
        assert_eq!(table.duplicates_skipped, 0);
        let first = table.record(0);
        assert_eq!(first.key, b"1");
        assert_eq!(first.values["price"], Value::Float(10.0));
        assert_eq!(first.values["ok"], Value::Bool(true));
        assert_eq!(first.values["note"], Value::str("hello, world"));
        assert_eq!(
            first.values["when"],
            Value::Timestamp(parse_timestamp_micros("2024-01-01").unwrap())
        );
        // Empty and NULL cells are absent.
        let second = table.record(1);
        assert_eq!(
            second.values.keys().collect::<Vec<_>>(),
            ["ok", "when"].iter().collect::<Vec<_>>()
        );
        let third = table.record(2);
        assert_eq!(third.values["extra"], Value::str(r#"{"a":1}"#));
        assert!(!third.values.contains_key("ok"));
        assert_eq!(table.record(3).values["note"], Value::str("multi\nline"));
        // Origins: CSV lines count the header; JSON lines count blank lines.
        let origins: Vec<_> = table
            .rows
            .iter()
            .map(|r| (r.origin.file, r.origin.line))
            .collect();
        assert_eq!(origins, [(0, 2), (0, 3), (1, 1), (1, 3)]);
        assert!(table
            .place(table.rows[3].origin)
            .ends_with("b.jsonl.gz line 3"));
        assert_eq!(table.records().count(), 4);
        assert!(table.input_bytes > 100);
    }

    #[test]
    fn row_numbers_key_rows_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.csv", b"x\n1\n2\n");
        let b = write(dir.path(), "b.json", b"{\"x\": 3}\n");
        let table = read_table(&[a, b], KeySource::RowNumber).unwrap();
        assert_eq!(table.schema.key, ROW_NUMBER_KEY);
        let keys: Vec<_> = table.rows.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys, [b"0".to_vec(), b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(types(&table), [("x", AttrType::Int)]);

        let clash = write(dir.path(), "c.csv", b"row_number,y\n1,2\n");
        let message = error(read_table(&[clash], KeySource::RowNumber));
        assert!(
            message.contains("c.csv") && message.contains("row_number"),
            "{message}"
        );
    }

    #[test]
    fn duplicate_keys_are_refused_within_a_file_and_skipped_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.csv", b"id,v\nk1,1\nk2,2\n");
        let b = write(dir.path(), "b.csv", b"id,v\nk2,20\nk3,30\n");
        let table = read_table(&[a.clone(), b], KeySource::Column("id".into())).unwrap();
        assert_eq!(table.len(), 3);
        assert_eq!(table.duplicates_skipped, 1);
        assert_eq!(
            table.record(1).values["v"],
            Value::Int(2),
            "the first file wins"
        );

        let twice = write(dir.path(), "twice.csv", b"id,v\nk1,1\nk2,2\nk1,3\n");
        let message = error(read_table(&[twice], KeySource::Column("id".into())));
        assert!(
            message.contains("twice.csv line 4")
                && message.contains("repeats")
                && message.contains("twice.csv line 2"),
            "{message}"
        );
        let message = error(read_table(&[a], KeySource::Column("nope".into())));
        assert!(message.contains("\"nope\""), "{message}");
    }

    #[test]
    fn empty_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "keys.csv", b"id,v\nk1,1\n,2\n");
        let message = error(read_table(&[a], KeySource::Column("id".into())));
        assert!(message.contains("keys.csv line 3"), "{message}");
        assert!(message.contains("empty"), "{message}");
        let b = write(
            dir.path(),
            "keys.jsonl",
            b"{\"id\": \"x\"}\n{\"id\": null}\n",
        );
        let message = error(read_table(&[b], KeySource::Column("id".into())));
        assert!(message.contains("keys.jsonl line 2"), "{message}");
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = || KeySource::Column("id".into());

        let text = write(dir.path(), "data.txt", b"id\n1\n");
        let message = error(read_table(&[text], key()));
        assert!(
            message.contains("data.txt") && message.contains(".csv"),
            "{message}"
        );

        let bad_gzip = write(dir.path(), "data.csv.gz", b"id\n1\n");
        let message = error(read_table(&[bad_gzip], key()));
        assert!(
            message.contains("data.csv.gz") && message.contains("gzip"),
            "{message}"
        );

        let missing = dir.path().join("missing.csv");
        let message = error(read_table(&[missing], key()));
        assert!(message.contains("missing.csv"), "{message}");

        let ragged = write(dir.path(), "ragged.csv", b"id,a,b\n1,2,3\n4,5\n");
        let message = error(read_table(&[ragged], key()));
        assert!(
            message.contains("ragged.csv line 3") && message.contains("2 fields"),
            "{message}"
        );

        let bad_json = write(dir.path(), "bad.jsonl", b"{\"id\": \"1\"}\n{\"id\": \n");
        let message = error(read_table(&[bad_json], key()));
        assert!(message.contains("bad.jsonl line 2"), "{message}");

        let not_object = write(dir.path(), "array.json", b"[1, 2]\n");
        let message = error(read_table(&[not_object], key()));
        assert!(
            message.contains("array.json line 1") && message.contains("object"),
            "{message}"
        );

        let not_utf8 = write(
            dir.path(),
            "latin.jsonl",
            b"{\"id\": \"1\"}\n{\"id\": \"\xff\"}\n",
        );
        let message = error(read_table(&[not_utf8], key()));
        assert!(message.contains("latin.jsonl line 2"), "{message}");

        let repeated = write(dir.path(), "repeated.csv", b"id,a,a\n1,2,3\n");
        let message = error(read_table(&[repeated], key()));
        assert!(
            message.contains("repeated.csv") && message.contains("twice"),
            "{message}"
        );

        let message = error(read_table(&[], key()));
        assert!(message.contains("no input"), "{message}");

        let query_error: QueryError = ImportError::new("x.csv line 2: bad").into();
        assert!(matches!(query_error, QueryError::Invalid(m) if m == "x.csv line 2: bad"));
    }

    #[test]
    fn an_existing_schema_types_the_values() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new(
            "id",
            vec![
                Attribute {
                    name: "code".into(),
                    attr_type: AttrType::String,
                },
                Attribute {
                    name: "n".into(),
                    attr_type: AttrType::Float,
                },
                Attribute {
                    name: "unused".into(),
                    attr_type: AttrType::Bool,
                },
            ],
        )
        .unwrap();
        let existing = |new_columns| Typing::Existing {
            schema: &schema,
            new_columns,
        };
        let key = || KeySource::Column("id".into());

        // "007" stays a string and 3 becomes a float: the table's types, not inferred ones.
        let a = write(dir.path(), "a.csv", b"id,code,n\nx,007,3\n");
        let table = read_table_with(
            std::slice::from_ref(&a),
            key(),
            existing(NewColumns::Refuse),
        )
        .unwrap();
        assert_eq!(table.schema, schema);
        assert!(table.added.is_empty());
        assert_eq!(table.rows[0].values.len(), 3);
        let record = table.record(0);
        assert_eq!(record.values["code"], Value::str("007"));
        assert_eq!(record.values["n"], Value::Float(3.0));

        // A value of the wrong type names file, line and column.
        let b = write(dir.path(), "b.csv", b"id,n\nx,1\ny,lots\n");
        let message = error(read_table_with(&[b], key(), existing(NewColumns::Refuse)));
        assert!(
            message.contains("b.csv line 3")
                && message.contains("\"n\"")
                && message.contains("\"lots\""),
            "{message}"
        );

        // A column the table lacks: refused, naming it, or added with its inferred type.
        let c = write(
            dir.path(),
            "c.jsonl",
            b"{\"id\": \"z\", \"count\": 5, \"n\": 1}\n",
        );
        let message = error(read_table_with(
            std::slice::from_ref(&c),
            key(),
            existing(NewColumns::Refuse),
        ));
        assert!(
            message.contains("\"count\"") && message.contains("c.jsonl"),
            "{message}"
        );
        let table = read_table_with(&[c], key(), existing(NewColumns::Add)).unwrap();
        let count = Attribute {
            name: "count".into(),
            attr_type: AttrType::Int,
        };
        assert_eq!(table.added, std::slice::from_ref(&count));
        assert_eq!(table.schema.attributes.last(), Some(&count));
        assert_eq!(table.record(0).values["count"], Value::Int(5));

        // The key column must be the table's.
        let message = error(read_table_with(
            &[a],
            KeySource::RowNumber,
            existing(NewColumns::Add),
        ));
        assert!(
            message.contains("\"id\"") && message.contains("row_number"),
            "{message}"
        );
    }

    #[test]
    fn limits_are_checked_with_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        let a = write(dir.path(), "a.csv", format!("id\n{long_key}\n").as_bytes());
        let message = error(read_table(&[a], KeySource::Column("id".into())));
        assert!(
            message.contains("a.csv line 2") && message.contains("limit"),
            "{message}"
        );
        let long_value = "v".repeat(MAX_VALUE_BYTES + 1);
        let b = write(
            dir.path(),
            "b.csv",
            format!("id,s\nk,{long_value}\n").as_bytes(),
        );
        let message = error(read_table(&[b], KeySource::Column("id".into())));
        assert!(
            message.contains("b.csv line 2") && message.contains("\"s\""),
            "{message}"
        );
    }

    /// Every row of a plan, collected.
    fn rows_of(plan: &ImportPlan) -> Vec<ImportedRow> {
        plan.rows().unwrap().map(Result::unwrap).collect()
    }

    /// Temporary directories of the key check this process has now.
    fn spill_dirs() -> Vec<PathBuf> {
        let prefix = format!("puffer-import-{}-", std::process::id());
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect()
    }

    #[test]
    fn a_plan_streams_the_rows_read_table_collects() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.csv", b"id,n,s\nx,1,one\ny,2,two\n");
        let b = write(
            dir.path(),
            "b.jsonl",
            b"{\"id\": \"z\", \"n\": 3, \"t\": true}\n",
        );
        let paths = [a, b];
        let key = || KeySource::Column("id".into());
        let plan = plan(&paths, key(), Typing::Infer).unwrap();
        let table = read_table(&paths, key()).unwrap();
        assert_eq!(plan.schema(), &table.schema);
        assert_eq!(plan.len(), 3);
        assert!(!plan.is_empty());
        assert_eq!(plan.input_bytes(), table.input_bytes);
        assert_eq!(plan.average_bytes(), table.average_bytes.as_slice());
        // The rows can be read any number of times.
        assert_eq!(rows_of(&plan), table.rows);
        assert_eq!(rows_of(&plan), table.rows);
        assert_eq!(infer_schema(&paths, key()).unwrap(), table.schema);

        // A file that changed since the plan read it is an error, not a silent mix.
        std::fs::write(&paths[0], b"id,n,s\nx,1,one\ny,2,two\nw,4,four\n").unwrap();
        let last = plan.rows().unwrap().last().unwrap();
        let message = last.expect_err("the files changed").message().to_string();
        assert!(message.contains("changed"), "{message}");
    }

    #[test]
    fn the_key_check_spills_to_sorted_runs_with_the_same_answers() {
        let dir = tempfile::tempdir().unwrap();
        // b repeats half of a's keys, with values that are not ints: skipped rows must
        // not type the columns, and a's rows win.
        let mut a = String::from("id,n\n");
        let mut b = String::from("id,n,extra\n");
        for i in 0..100 {
            a += &format!("k{i},{i}\n");
        }
        for i in 50..150 {
            let n = if i < 100 {
                "many".to_string()
            } else {
                i.to_string()
            };
            b += &format!("k{i},{n},e{i}\n");
        }
        let paths = [
            write(dir.path(), "a.csv", a.as_bytes()),
            write(dir.path(), "b.csv", b.as_bytes()),
        ];
        let key = || KeySource::Column("id".into());
        let in_memory = plan(&paths, key(), Typing::Infer).unwrap();
        // Three entries per run: 67 runs for 200 keys, merged 16 at a time.
        let spilled = plan_with(&paths, key(), Typing::Infer, 3 * KEY_ENTRY_BYTES).unwrap();
        assert_eq!(spill_dirs().len(), 1, "the skipped rows are kept on disk");
        for plan in [&in_memory, &spilled] {
            assert_eq!(plan.duplicates_skipped(), 50);
            assert_eq!(plan.len(), 150);
            assert_eq!(
                plan.schema().attributes,
                [
                    Attribute {
                        name: "n".into(),
                        attr_type: AttrType::Int
                    },
                    Attribute {
                        name: "extra".into(),
                        attr_type: AttrType::String
                    },
                ]
            );
        }
        let rows = rows_of(&spilled);
        assert_eq!(rows, rows_of(&in_memory));
        let keys: Vec<String> = rows
            .iter()
            .map(|row| String::from_utf8(row.key.clone()).unwrap())
            .collect();
        let expected: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
        assert_eq!(keys, expected);
        assert_eq!(
            rows[60].values[0],
            Some(Value::Int(60)),
            "the first file wins"
        );
        drop(spilled);
        assert_eq!(spill_dirs(), Vec::<PathBuf>::new(), "removed with the plan");

        // A key repeated within a file, found among the sorted runs: the first repeat in
        // input order, with the key read back.
        let mut twice = String::from("id\n");
        for i in 0..60 {
            twice += &format!("k{}\n", i % 40);
        }
        let twice = write(dir.path(), "twice.csv", twice.as_bytes());
        let message = plan_with(&[twice], key(), Typing::Infer, 3 * KEY_ENTRY_BYTES)
            .expect_err("a repeated key")
            .message()
            .to_string();
        assert_eq!(
            message,
            format!(
                "{} line 42: key \"k0\" repeats {} line 2",
                dir.path().join("twice.csv").display(),
                dir.path().join("twice.csv").display()
            )
        );
        assert_eq!(spill_dirs(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_record_longer_than_the_limit_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let key = || KeySource::Column("id".into());
        let long = "v".repeat(MAX_RECORD_BYTES + 1);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "long.csv",
                format!("id,s\na,1\nb,{long}\nc,2\n").into_bytes(),
                "line 3",
            ),
            (
                "long.jsonl",
                format!("{{\"id\": \"a\"}}\n\n{{\"id\": \"b\", \"s\": \"{long}\"}}\n").into_bytes(),
                "line 3",
            ),
            (
                "long.csv.gz",
                gzip(format!("id,s\na,{long}\n").as_bytes()),
                "line 2",
            ),
            (
                "header.csv",
                format!("id,{long}\na,1\n").into_bytes(),
                "line 1",
            ),
            // Quoted newlines: the record starts on line 3 and spans many lines.
            (
                "quoted.csv",
                format!(
                    "id,s\na,1\nb,\"{}\"\n",
                    "x\n".repeat(MAX_RECORD_BYTES / 2 + 1)
                )
                .into_bytes(),
                "line 3",
            ),
        ];
        for (name, contents, line) in cases {
            let path = write(dir.path(), name, &contents);
            let message = error(read_table(&[path], key()));
            assert!(
                message.contains(&format!("{name} {line}:"))
                    && message.contains(&format!("longer than {MAX_RECORD_BYTES} bytes")),
                "{name}: {message}"
            );
        }
        // A record just within the limit loads (its value is then too long for a table).
        let within = format!("{}\n", "v".repeat(MAX_RECORD_BYTES - 4));
        let path = write(dir.path(), "within.csv", format!("id\n{within}").as_bytes());
        let message = error(read_table(&[path], key()));
        assert!(message.contains("the key is"), "{message}");
    }

    #[test]
    fn too_many_columns_are_refused_while_reading() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = String::new();
        for i in 0..MAX_INPUT_COLUMNS + 5 {
            lines += &format!("{{\"id\": \"k{i}\", \"c{i}\": 1}}\n");
        }
        let path = write(dir.path(), "wide.jsonl", lines.as_bytes());
        let message = error(read_table(&[path], KeySource::Column("id".into())));
        assert!(
            message.contains(&format!("wide.jsonl line {MAX_INPUT_COLUMNS}:"))
                && message.contains("do not make a table"),
            "{message}"
        );
        let long_name = "n".repeat(MAX_ATTRIBUTE_NAME_BYTES + 1);
        let path = write(
            dir.path(),
            "names.csv",
            format!("id,{long_name}\n").as_bytes(),
        );
        let message = error(read_table(&[path], KeySource::Column("id".into())));
        assert!(message.contains("names.csv line 1:"), "{message}");
    }

    #[test]
    fn bounded_lines_are_read_whole_or_refused() {
        let mut input = std::io::BufReader::with_capacity(4, &b"ab\n\ncdefg\nhi"[..]);
        let mut line = Vec::new();
        let mut seen = Vec::new();
        loop {
            match read_line_bounded(&mut input, &mut line, 4).unwrap() {
                LineRead::Line => seen.push(String::from_utf8(line.clone()).unwrap()),
                LineRead::TooLong => {
                    seen.push("too long".into());
                    break;
                }
                LineRead::End => break,
            }
        }
        assert_eq!(seen, ["ab", "", "too long"]);
        let mut input = std::io::BufReader::with_capacity(4, &b"abcd\nhi"[..]);
        assert!(matches!(
            read_line_bounded(&mut input, &mut line, 4).unwrap(),
            LineRead::Line
        ));
        assert_eq!(line, b"abcd");
        assert!(matches!(
            read_line_bounded(&mut input, &mut line, 4).unwrap(),
            LineRead::Line
        ));
        assert_eq!(line, b"hi");
        assert!(matches!(
            read_line_bounded(&mut input, &mut line, 4).unwrap(),
            LineRead::End
        ));
    }
}
