//! Importing CSV and JSON Lines files as one typed table: the shared reader of
//! `puffer load` and `puffer-bench records`.
//!
//! - **Files.** `.csv` (RFC 4180 with a header row; quoted fields may hold delimiters
//!   and newlines), `.jsonl` / `.json` (one JSON object per line; nested values are kept
//!   as their JSON text), each optionally gzip-compressed (`.gz`). Several files are
//!   read as one table whose columns are the union of theirs, in order of first
//!   appearance.
//! - **Absent values.** An empty cell, the text `NULL` and JSON `null` are absent.
//! - **Keys.** Taken from a named column ([`KeySource::Column`]; the column is not an
//!   attribute) or the 0-based row number over all inputs, in decimal
//!   ([`KeySource::RowNumber`], key column [`ROW_NUMBER_KEY`]). An empty key and a key
//!   repeated within one file are errors; a key an earlier file already had is skipped
//!   and counted ([`ImportedTable::duplicates_skipped`]), so several scrapes of one data
//!   set load as one table.
//! - **Types.** With [`Typing::Infer`] each column gets the narrowest type all its
//!   present values parse as: int, else float, else bool (`t`/`true`/`f`/`false`), else
//!   timestamp ([`parse_timestamp_micros`]), else string (a column without any value is
//!   a string column). With [`Typing::Existing`] values are parsed with an existing
//!   table's column types; a value that does not parse is an error naming the file, line
//!   and column, and so is a column the table lacks, unless [`NewColumns::Add`] asks for
//!   it to be added with its inferred type (the caller then writes
//!   `WriteOp::AddAttribute` for each of [`ImportedTable::added`] before the records).
//!
//! Errors are [`ImportError`]s whose messages name the file and, where there is one, the
//! line (`data.csv line 7: ...`); they convert into [`QueryError::Invalid`].
//!
//! The whole table is held in memory (the benchmark keeps it as its oracle).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use puffer_store::schema::{display_key, StoredRecord, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use puffer_store::timestamp::parse_timestamp_micros;
use puffer_store::{AttrType, Attribute, Record, Schema, Value};

use crate::error::QueryError;

/// The key column's name with [`KeySource::RowNumber`].
pub const ROW_NUMBER_KEY: &str = "row_number";

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
    /// [`ImportedTable::added`].
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

/// Where a row came from: an index into [`ImportedTable::files`] and a 1-based line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Values by attribute id of [`ImportedTable::schema`] (`None` = absent).
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
    /// being those of [`ImportedTable::schema`].
    ///
    /// [`WriteOp::PutFields`]: puffer_store::WriteOp::PutFields
    pub fn to_fields(&self) -> StoredRecord {
        let fields = (0u16..)
            .zip(&self.values)
            .filter_map(|(id, value)| value.as_ref().map(|v| (id, v.clone())))
            .collect();
        StoredRecord {
            key: self.key.clone(),
            fields,
        }
    }
}

/// The inputs as one typed table.
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

/// Reads `paths` as one table, typed as `typing` says.
pub fn read_table_with(
    paths: &[PathBuf],
    key: KeySource,
    typing: Typing<'_>,
) -> ImportResult<ImportedTable> {
    if let Typing::Existing { schema, .. } = typing {
        if schema.key != key.name() {
            return Err(ImportError::new(format!(
                "the table's key column is {:?}, not {:?}",
                schema.key,
                key.name()
            )));
        }
    }
    let text = read_text(paths)?;
    let keyed = extract_keys(text, &key)?;
    type_rows(keyed, typing)
}

/// The schema [`read_table`] would infer for `paths` (reads them all).
pub fn infer_schema(paths: &[PathBuf], key: KeySource) -> ImportResult<Schema> {
    Ok(read_table(paths, key)?.schema)
}

fn place(files: &[PathBuf], origin: Origin) -> String {
    format!("{} line {}", files[origin.file].display(), origin.line)
}

// ---------------------------------------------------------------------------------
// Reading the inputs: text cells, columns the union over files.

/// One input row: its present cells as (column id, text).
struct TextRow {
    origin: Origin,
    cells: Vec<(usize, String)>,
}

/// The inputs as text; columns in order of first appearance.
#[derive(Default)]
struct TextTable {
    files: Vec<PathBuf>,
    columns: Vec<String>,
    /// The file each column first appears in.
    column_files: Vec<usize>,
    column_ids: HashMap<String, usize>,
    rows: Vec<TextRow>,
    input_bytes: u64,
}

impl TextTable {
    fn column_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.column_ids.get(name) {
            return id;
        }
        self.columns.push(name.to_string());
        self.column_files.push(self.files.len() - 1);
        self.column_ids
            .insert(name.to_string(), self.columns.len() - 1);
        self.columns.len() - 1
    }

    fn push_row(&mut self, origin: Origin, cells: impl IntoIterator<Item = (usize, String)>) {
        let cells = cells.into_iter().filter(|(_, text)| is_present(text));
        self.rows.push(TextRow {
            origin,
            cells: cells.collect(),
        });
    }
}

/// Whether a cell holds a value: an empty cell or the literal `NULL` is absent.
pub fn is_present(text: &str) -> bool {
    !text.is_empty() && text != "NULL"
}

enum Format {
    Csv,
    JsonLines,
}

fn format_of(path: &Path) -> ImportResult<Format> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    if name.ends_with(".csv") {
        Ok(Format::Csv)
    } else if name.ends_with(".jsonl") || name.ends_with(".json") {
        Ok(Format::JsonLines)
    } else {
        Err(ImportError::new(format!(
            "{}: expected a .csv, .jsonl or .json file (optionally .gz)",
            path.display()
        )))
    }
}

fn read_decompressed(path: &Path) -> ImportResult<Vec<u8>> {
    let file = std::fs::File::open(path)
        .map_err(|e| ImportError::new(format!("{}: cannot open: {e}", path.display())))?;
    let mut bytes = Vec::new();
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::MultiGzDecoder::new(file)
            .read_to_end(&mut bytes)
            .map_err(|e| {
                ImportError::new(format!(
                    "{}: cannot decompress (not valid gzip?): {e}",
                    path.display()
                ))
            })?;
    } else {
        std::io::BufReader::new(file)
            .read_to_end(&mut bytes)
            .map_err(|e| ImportError::new(format!("{}: cannot read: {e}", path.display())))?;
    }
    Ok(bytes)
}

fn read_text(paths: &[PathBuf]) -> ImportResult<TextTable> {
    if paths.is_empty() {
        return Err(ImportError::new("no input files"));
    }
    let mut text = TextTable::default();
    for (file, path) in paths.iter().enumerate() {
        let format = format_of(path)?;
        let bytes = read_decompressed(path)?;
        text.input_bytes += bytes.len() as u64;
        text.files.push(path.clone());
        match format {
            Format::Csv => read_csv(&bytes, file, &mut text),
            Format::JsonLines => read_json_lines(&bytes, file, &mut text),
        }
        .map_err(|message| ImportError::new(format!("{}{message}", path.display())))?;
    }
    Ok(text)
}

/// RFC 4180 CSV with a header row. Errors are the message after the file's name.
fn read_csv(bytes: &[u8], file: usize, text: &mut TextTable) -> Result<(), String> {
    let csv_error = |e: csv::Error| match (e.kind(), e.position()) {
        (
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            },
            Some(position),
        ) => format!(
            " line {}: {len} fields, but the header has {expected_len}",
            position.line()
        ),
        (_, Some(position)) => format!(" line {}: {e}", position.line()),
        (_, None) => format!(": {e}"),
    };
    let mut reader = csv::ReaderBuilder::new().from_reader(bytes);
    let headers = reader.headers().map_err(csv_error)?.clone();
    let mut ids = Vec::with_capacity(headers.len());
    for (index, name) in headers.iter().enumerate() {
        if name.is_empty() {
            return Err(format!(
                " line 1: column {} of the header has no name",
                index + 1
            ));
        }
        let id = text.column_id(name);
        if ids.contains(&id) {
            return Err(format!(
                " line 1: column {name:?} appears twice in the header"
            ));
        }
        ids.push(id);
    }
    for record in reader.records() {
        let record = record.map_err(csv_error)?;
        let line = record.position().map_or(0, |p| p.line());
        let cells = ids
            .iter()
            .zip(record.iter())
            .map(|(&id, text)| (id, text.to_string()));
        text.push_row(Origin { file, line }, cells);
    }
    Ok(())
}

/// One JSON object per line; nested values are kept as their JSON text. Errors are the
/// message after the file's name.
fn read_json_lines(bytes: &[u8], file: usize, text: &mut TextTable) -> Result<(), String> {
    let lines = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!(" line {line}: not UTF-8")
    })?;
    for (index, line) in lines.lines().enumerate() {
        let line_number = index as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!(" line {line_number}: {e}"))?;
        let serde_json::Value::Object(object) = parsed else {
            return Err(format!(" line {line_number}: expected a JSON object"));
        };
        let cells: Vec<(usize, String)> = object
            .into_iter()
            .filter_map(|(name, value)| json_cell(value).map(|cell| (text.column_id(&name), cell)))
            .collect();
        let origin = Origin {
            file,
            line: line_number,
        };
        text.push_row(origin, cells);
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

/// Rows with their keys taken out; cells renumbered to input attribute ids (column ids
/// with the key column left out).
struct KeyedTable {
    files: Vec<PathBuf>,
    key_name: String,
    attribute_names: Vec<String>,
    /// The file each input attribute first appears in.
    attribute_files: Vec<usize>,
    rows: Vec<KeyedRow>,
    input_bytes: u64,
    duplicates_skipped: u64,
}

struct KeyedRow {
    key: Vec<u8>,
    origin: Origin,
    cells: Vec<(usize, String)>,
}

/// The key's name and its column (None for row numbers).
fn key_column(text: &TextTable, source: &KeySource) -> ImportResult<(String, Option<usize>)> {
    match source {
        KeySource::Column(name) => {
            let Some(&id) = text.column_ids.get(name) else {
                return Err(ImportError::new(format!(
                    "no input has the key column {name:?}"
                )));
            };
            Ok((name.clone(), Some(id)))
        }
        KeySource::RowNumber => {
            if let Some(&id) = text.column_ids.get(ROW_NUMBER_KEY) {
                return Err(ImportError::new(format!(
                    "{}: a column is named {ROW_NUMBER_KEY:?}, the key's name when keys \
                     are row numbers",
                    text.files[text.column_files[id]].display()
                )));
            }
            Ok((ROW_NUMBER_KEY.to_string(), None))
        }
    }
}

/// Takes each row's key out of its cells. Empty keys and keys repeated within one file
/// are refused; a key an earlier file already had is skipped (and counted).
fn extract_keys(mut text: TextTable, source: &KeySource) -> ImportResult<KeyedTable> {
    let (key_name, key_column) = key_column(&text, source)?;
    // Attribute ids are column ids with the key column left out.
    let attribute_id = |column: usize| match key_column {
        Some(key) if column > key => column - 1,
        _ => column,
    };
    let kept = |id: &usize| Some(*id) != key_column;
    let rows = std::mem::take(&mut text.rows);
    let mut keyed = KeyedTable {
        attribute_names: (0..text.columns.len())
            .filter(kept)
            .map(|id| text.columns[id].clone())
            .collect(),
        attribute_files: (0..text.columns.len())
            .filter(kept)
            .map(|id| text.column_files[id])
            .collect(),
        rows: Vec::with_capacity(rows.len()),
        input_bytes: text.input_bytes,
        duplicates_skipped: 0,
        key_name,
        files: text.files,
    };
    let mut first_seen: HashMap<Vec<u8>, Origin> = HashMap::new();
    for (number, mut row) in rows.into_iter().enumerate() {
        let key = match key_column {
            Some(column) => take_cell(&mut row.cells, column)
                .map(String::into_bytes)
                .ok_or_else(|| {
                    ImportError::new(format!(
                        "{}: the key {:?} is empty",
                        place(&keyed.files, row.origin),
                        keyed.key_name
                    ))
                })?,
            None => number.to_string().into_bytes(),
        };
        if key.len() > MAX_KEY_BYTES {
            return Err(ImportError::new(format!(
                "{}: the key is {} bytes; the limit is {MAX_KEY_BYTES}",
                place(&keyed.files, row.origin),
                key.len()
            )));
        }
        if let Some(earlier) = first_seen.get(&key) {
            if earlier.file == row.origin.file {
                return Err(ImportError::new(format!(
                    "{}: key {} repeats {}",
                    place(&keyed.files, row.origin),
                    display_key(&key),
                    place(&keyed.files, *earlier)
                )));
            }
            keyed.duplicates_skipped += 1;
            continue;
        }
        first_seen.insert(key.clone(), row.origin);
        let cells = row.cells.into_iter();
        keyed.rows.push(KeyedRow {
            key,
            origin: row.origin,
            cells: cells.map(|(id, text)| (attribute_id(id), text)).collect(),
        });
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

/// Profiles of the input attributes `wanted` says to profile.
fn profiles(keyed: &KeyedTable, wanted: impl Fn(usize) -> bool) -> Vec<ColumnProfile> {
    let mut profiles = vec![ColumnProfile::default(); keyed.attribute_names.len()];
    for row in &keyed.rows {
        for (id, text) in &row.cells {
            if wanted(*id) {
                profiles[*id].observe(text);
            }
        }
    }
    profiles
}

/// The schema, and the schema attribute id of each input attribute.
struct Mapping {
    schema: Schema,
    added: Vec<Attribute>,
    ids: Vec<usize>,
}

fn schema_error(e: puffer_store::StoreError) -> ImportError {
    ImportError::new(format!("the inputs' columns do not make a table: {e}"))
}

fn map_columns(keyed: &KeyedTable, typing: Typing<'_>) -> ImportResult<Mapping> {
    match typing {
        Typing::Infer => {
            let attributes = keyed
                .attribute_names
                .iter()
                .zip(profiles(keyed, |_| true))
                .map(|(name, profile)| Attribute {
                    name: name.clone(),
                    attr_type: profile.attr_type(),
                })
                .collect();
            let schema = Schema::new(&keyed.key_name, attributes).map_err(schema_error)?;
            Ok(Mapping {
                schema,
                added: Vec::new(),
                ids: (0..keyed.attribute_names.len()).collect(),
            })
        }
        Typing::Existing {
            schema,
            new_columns,
        } => {
            let known = |id: usize| schema.id_of(&keyed.attribute_names[id]).is_some();
            let missing: Vec<usize> = (0..keyed.attribute_names.len())
                .filter(|&id| !known(id))
                .collect();
            if !missing.is_empty() && new_columns == NewColumns::Refuse {
                let named: Vec<String> = missing
                    .iter()
                    .map(|&id| {
                        let file = &keyed.files[keyed.attribute_files[id]];
                        format!("{:?} (in {})", keyed.attribute_names[id], file.display())
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
            let profiles = profiles(keyed, |id| !known(id));
            let mut extended = schema.clone();
            let mut added = Vec::new();
            let mut ids = Vec::with_capacity(keyed.attribute_names.len());
            for (id, name) in keyed.attribute_names.iter().enumerate() {
                let schema_id = match schema.id_of(name) {
                    Some(schema_id) => schema_id,
                    None => {
                        let attribute = Attribute {
                            name: name.clone(),
                            attr_type: profiles[id].attr_type(),
                        };
                        added.push(attribute.clone());
                        extended.add_attribute(attribute).map_err(schema_error)?
                    }
                };
                ids.push(schema_id as usize);
            }
            Ok(Mapping {
                schema: extended,
                added,
                ids,
            })
        }
    }
}

fn type_rows(keyed: KeyedTable, typing: Typing<'_>) -> ImportResult<ImportedTable> {
    let Mapping { schema, added, ids } = map_columns(&keyed, typing)?;
    let width = schema.attributes.len();
    let mut text_bytes = vec![0u64; width];
    let mut present = vec![0u64; width];
    let mut rows = Vec::with_capacity(keyed.rows.len());
    for row in keyed.rows {
        let mut values = vec![None; width];
        for (input_id, text) in row.cells {
            let id = ids[input_id];
            let attribute = &schema.attributes[id];
            let wrong = |reason: String| {
                ImportError::new(format!(
                    "{}: column {:?}: {reason}",
                    place(&keyed.files, row.origin),
                    attribute.name
                ))
            };
            let value = parse_value(&text, attribute.attr_type).ok_or_else(|| {
                wrong(format!(
                    "{text:?} is not a valid {} value",
                    attribute.attr_type.name()
                ))
            })?;
            if text.len() > MAX_VALUE_BYTES && attribute.attr_type == AttrType::String {
                return Err(wrong(format!(
                    "the value is {} bytes; the limit is {MAX_VALUE_BYTES}",
                    text.len()
                )));
            }
            text_bytes[id] += text.len() as u64;
            present[id] += 1;
            values[id] = Some(value);
        }
        rows.push(ImportedRow {
            key: row.key,
            values,
            origin: row.origin,
        });
    }
    let average_bytes = text_bytes
        .iter()
        .zip(&present)
        .map(|(&bytes, &n)| bytes as f64 / n.max(1) as f64)
        .collect();
    Ok(ImportedTable {
        files: keyed.files,
        schema,
        added,
        rows,
        average_bytes,
        input_bytes: keyed.input_bytes,
        duplicates_skipped: keyed.duplicates_skipped,
    })
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
}
