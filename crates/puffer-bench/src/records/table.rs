//! The inputs as a typed table: CSV / JSON-lines files read as text cells (columns the
//! union over files), keys taken out, each column typed by the narrowest type all its
//! values parse as. The table is what the store is given and the oracle's data.

use puffer_store::timestamp::parse_timestamp_micros;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use puffer_store::schema::display_key;
use puffer_store::{AttrType, Attribute, Record, Value};

const ROW_NUMBER_KEY: &str = "row_number";

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

pub(super) enum KeySource {
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

pub(super) struct Row {
    pub(super) key: Vec<u8>,
    /// By attribute id.
    pub(super) values: Vec<Option<Value>>,
}

pub(super) struct Table {
    pub(super) key_name: String,
    pub(super) attributes: Vec<Attribute>,
    pub(super) average_bytes: Vec<f64>,
    pub(super) rows: Vec<Row>,
    pub(super) row_of_key: HashMap<Vec<u8>, u32>,
    pub(super) input_bytes: u64,
    pub(super) duplicates_skipped: u64,
}

impl Table {
    pub(super) fn record(&self, row: u32) -> Record {
        let row = &self.rows[row as usize];
        let mut record = Record::new(row.key.clone());
        for (attribute, value) in self.attributes.iter().zip(&row.values) {
            if let Some(value) = value {
                record.values.insert(attribute.name.clone(), value.clone());
            }
        }
        record
    }

    pub(super) fn value(&self, row: u32, column: usize) -> Option<&Value> {
        self.rows[row as usize].values[column].as_ref()
    }

    /// Rows whose value in `column` is present and passes `keep`.
    pub(super) fn rows_with(&self, column: usize, keep: impl Fn(&Value) -> bool) -> Vec<u32> {
        (0..self.rows.len() as u32)
            .filter(|&row| self.value(row, column).is_some_and(&keep))
            .collect()
    }
}

pub(super) fn load_table(paths: &[PathBuf], key_source: &KeySource) -> anyhow::Result<Table> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
