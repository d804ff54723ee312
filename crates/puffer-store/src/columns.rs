//! Column reads: the records a predicate matches, answered as one typed array per asked
//! column rather than as records, for scans that aggregate (`puffer-analytics`).
//!
//! On a segment, a column comes from the attribute's column layer where the segment
//! holds one (`column_layer`: a packed read per record) and from the records' fields
//! otherwise (the asked fields only, extracted from the compressed text). Which records
//! match is found as a search finds them, except where the segment holds column layers
//! of every attribute the predicate reads and the index would find many candidates:
//! then the predicate is evaluated on the layers' values, without extracting a record.
//! Log tables and sorted batches answer from their records as searches do.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::attr_layer::AttributeDemand;
use crate::column_layer::ColumnLayer;
use crate::error::Result;
use crate::query::{candidate_entries, search_text, Compiled, Want};
use crate::schema::{AttrType, StoredRecord, Value};
use crate::shard::SnapshotInfo;
use crate::stage::TextStage;

/// One column of a column read: a value or its absence per row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// The attribute's name (or the key's).
    pub name: String,
    /// The values' type (strings for the key).
    pub attr_type: AttrType,
    /// Whether each row holds a value; the data of a row without one is a placeholder.
    pub valid: Vec<bool>,
    /// The values, one per row.
    pub data: ColumnData,
}

/// The values of a [`Column`], by type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ColumnData {
    /// Integers and timestamps (microseconds).
    Ints(Vec<i64>),
    /// Floats.
    Floats(Vec<f64>),
    /// Booleans.
    Bools(Vec<bool>),
    /// Strings: row `i` is `bytes[ends[i-1]..ends[i]]` (`ends[-1]` = 0).
    Bytes { ends: Vec<usize>, bytes: Vec<u8> },
}

impl Column {
    /// An empty column of `attr_type`.
    pub fn new(name: String, attr_type: AttrType) -> Column {
        let data = match attr_type {
            AttrType::Int | AttrType::Timestamp => ColumnData::Ints(Vec::new()),
            AttrType::Float => ColumnData::Floats(Vec::new()),
            AttrType::Bool => ColumnData::Bools(Vec::new()),
            AttrType::String => ColumnData::Bytes {
                ends: Vec::new(),
                bytes: Vec::new(),
            },
        };
        Column {
            name,
            attr_type,
            valid: Vec::new(),
            data,
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.valid.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }

    /// Appends a row. A value of another type than the column's is a store bug (values
    /// are checked against the schema when written); it reads as absent.
    pub fn push(&mut self, value: Option<&Value>) {
        let held = match (value, &mut self.data) {
            (Some(Value::Int(i) | Value::Timestamp(i)), ColumnData::Ints(out)) => {
                out.push(*i);
                true
            }
            (Some(Value::Float(f)), ColumnData::Floats(out)) => {
                out.push(*f);
                true
            }
            (Some(Value::Bool(b)), ColumnData::Bools(out)) => {
                out.push(*b);
                true
            }
            (Some(Value::String(s)), ColumnData::Bytes { ends, bytes }) => {
                bytes.extend_from_slice(s);
                ends.push(bytes.len());
                true
            }
            (value, data) => {
                debug_assert!(value.is_none(), "{value:?} pushed to a {data:?} column");
                match data {
                    ColumnData::Ints(out) => out.push(0),
                    ColumnData::Floats(out) => out.push(0.0),
                    ColumnData::Bools(out) => out.push(false),
                    ColumnData::Bytes { ends, bytes } => ends.push(bytes.len()),
                }
                false
            }
        };
        self.valid.push(held);
    }

    /// Appends a row holding `bytes` to a string column.
    pub fn push_string(&mut self, value: &[u8]) {
        match &mut self.data {
            ColumnData::Bytes { ends, bytes } => {
                bytes.extend_from_slice(value);
                ends.push(bytes.len());
                self.valid.push(true);
            }
            _ => self.push(None),
        }
    }

    /// The value of row `row`, if it holds one.
    pub fn value(&self, row: usize) -> Option<Value> {
        if !self.valid[row] {
            return None;
        }
        Some(match &self.data {
            ColumnData::Ints(v) if self.attr_type == AttrType::Timestamp => {
                Value::Timestamp(v[row])
            }
            ColumnData::Ints(v) => Value::Int(v[row]),
            ColumnData::Floats(v) => Value::Float(v[row]),
            ColumnData::Bools(v) => Value::Bool(v[row]),
            ColumnData::Bytes { ends, bytes } => {
                let start = if row == 0 { 0 } else { ends[row - 1] };
                Value::String(bytes[start..ends[row]].to_vec())
            }
        })
    }

    /// Appends `other`'s rows; refused (nothing appended) when `other` is another
    /// column or of another type.
    pub fn extend(&mut self, other: Column) -> std::result::Result<(), String> {
        if other.name != self.name || other.attr_type != self.attr_type {
            return Err(format!(
                "column {} ({}) cannot take the rows of column {} ({})",
                self.name,
                self.attr_type.name(),
                other.name,
                other.attr_type.name()
            ));
        }
        self.valid.extend(other.valid);
        match (&mut self.data, other.data) {
            (ColumnData::Ints(a), ColumnData::Ints(b)) => a.extend(b),
            (ColumnData::Floats(a), ColumnData::Floats(b)) => a.extend(b),
            (ColumnData::Bools(a), ColumnData::Bools(b)) => a.extend(b),
            (
                ColumnData::Bytes { ends, bytes },
                ColumnData::Bytes {
                    ends: more_ends,
                    bytes: more_bytes,
                },
            ) => {
                let base = bytes.len();
                bytes.extend(more_bytes);
                ends.extend(more_ends.into_iter().map(|e| e + base));
            }
            // Same type, so the same data variant (`Column::new`).
            (a, b) => unreachable!("columns of one type hold {a:?} and {b:?}"),
        }
        Ok(())
    }

    /// Keeps the first `rows` rows.
    pub fn truncate(&mut self, rows: usize) {
        self.valid.truncate(rows);
        match &mut self.data {
            ColumnData::Ints(v) => v.truncate(rows),
            ColumnData::Floats(v) => v.truncate(rows),
            ColumnData::Bools(v) => v.truncate(rows),
            ColumnData::Bytes { ends, bytes } => {
                ends.truncate(rows);
                bytes.truncate(ends.last().copied().unwrap_or(0));
            }
        }
    }
}

/// The answer of a column read: the asked columns, each with one row per matching
/// record (in no particular order, the same in every column), and the snapshot read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColumnsResult {
    /// The columns, in the order asked.
    pub columns: Vec<Column>,
    /// Rows (every column holds this many).
    pub rows: usize,
    /// Whether the limit cut the answer.
    pub truncated: bool,
    /// The snapshot read.
    pub snapshot: SnapshotInfo,
}

impl ColumnsResult {
    /// Keeps the first `rows` rows.
    pub fn truncate(&mut self, rows: usize) {
        if rows < self.rows {
            for column in &mut self.columns {
                column.truncate(rows);
            }
            self.rows = rows;
            self.truncated = true;
        }
    }
}

/// What a column of a column read holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnOf {
    /// The records' keys.
    Key,
    /// An attribute, by id.
    Attribute(u16),
}

/// One column read of text stages: what is asked and where demand is counted.
pub(crate) struct StageRead<'a> {
    pub compiled: &'a Compiled,
    pub types: &'a [AttrType],
    pub snapshot: u64,
    pub of: &'a [ColumnOf],
    /// Rows attribute predicates found (what attribute layers are bought for).
    pub attribute_demand: &'a AttributeDemand,
    /// Values read per attribute, from column layers or extracted (what column layers
    /// are bought for).
    pub column_demand: &'a AttributeDemand,
}

/// An index plan that finds fewer candidates than this fraction of a stage's records
/// is used even where column layers could evaluate the predicate (1/8: a candidate
/// costs a walk of a few microseconds, a layer value tens of nanoseconds, but the plan
/// reads only the candidates).
const LAYER_FILTER_MIN_CANDIDATES_DIVISOR: u64 = 8;

impl StageRead<'_> {
    /// Appends to `out` (one column per [`StageRead::of`]) the records of `stage` that
    /// match at the snapshot, at most `limit`; returns how many.
    pub fn read(&self, stage: &dyn TextStage, limit: usize, out: &mut [Column]) -> Result<usize> {
        let attributes: Vec<u16> = self
            .of
            .iter()
            .filter_map(|of| match of {
                ColumnOf::Attribute(a) => Some(*a),
                ColumnOf::Key => None,
            })
            .collect();
        let layers: Vec<(u16, Option<Arc<ColumnLayer>>)> = attributes
            .iter()
            .map(|&a| (a, stage.column_layer(a)))
            .collect();
        let missing: Vec<u16> = layers
            .iter()
            .filter(|(_, layer)| layer.is_none())
            .map(|(a, _)| *a)
            .collect();
        let mut rows = self.matching(stage, limit, &missing)?;
        // Record order: keys decode a directory block once, layers read in order.
        rows.sort_unstable_by_key(|(record, _)| *record);
        if !missing.is_empty() {
            for (record, decoded) in &mut rows {
                if decoded.is_none() {
                    *decoded = Some(stage.record_fields(*record, &missing, self.types)?);
                }
            }
        }
        let records: Vec<u64> = rows.iter().map(|(record, _)| *record).collect();
        let count = records.len() as u64;
        for (column, of) in out.iter_mut().zip(self.of) {
            match of {
                ColumnOf::Key => {
                    for key in stage.keys(&records)? {
                        column.push_string(&key);
                    }
                }
                ColumnOf::Attribute(attribute) => {
                    let layer = layers.iter().find(|(a, _)| a == attribute);
                    match layer.and_then(|(_, layer)| layer.as_ref()) {
                        Some(layer) => layer.append(&records, column),
                        None => {
                            for (_, decoded) in &rows {
                                column.push(decoded.as_ref().and_then(|d| d.get(*attribute)));
                            }
                        }
                    }
                    self.column_demand
                        .record(*attribute, count, !missing.contains(attribute));
                }
            }
        }
        Ok(records.len())
    }

    /// The live records of `stage` that match, at most `limit`, each with its decoded
    /// record where finding it decoded one (with at least the `missing` attributes).
    fn matching(
        &self,
        stage: &dyn TextStage,
        limit: usize,
        missing: &[u16],
    ) -> Result<Vec<(u64, Option<StoredRecord>)>> {
        let none_deleted = stage.deletions().none();
        let live = |record: u64| none_deleted || stage.deletions().live_at(record, self.snapshot);
        if matches!(self.compiled, Compiled::All) {
            return Ok((0..stage.record_count())
                .filter(|&r| live(r))
                .take(limit)
                .map(|r| (r, None))
                .collect());
        }
        if let Some(filter_layers) = self.filter_layers(stage)? {
            let mut out = Vec::new();
            for record in 0..stage.record_count() {
                if out.len() >= limit {
                    break;
                }
                if !live(record) {
                    continue;
                }
                let partial = StoredRecord {
                    key: Vec::new(),
                    fields: filter_layers
                        .iter()
                        .filter_map(|layer| Some((layer.attribute(), layer.value(record)?)))
                        .collect(),
                };
                if self.compiled.matches(&partial) {
                    out.push((record, None));
                }
            }
            for layer in &filter_layers {
                self.column_demand
                    .record(layer.attribute(), stage.record_count(), true);
            }
            return Ok(out);
        }
        let want = if missing.is_empty() {
            Want::Keys
        } else {
            Want::Fields(missing)
        };
        search_text(
            stage,
            self.compiled,
            self.types,
            self.snapshot,
            limit,
            want,
            self.attribute_demand,
        )
    }

    /// The column layers of every attribute the predicate reads (ascending), when the
    /// stage holds them all, the predicate reads nothing else, and the index would not
    /// find few candidates.
    fn filter_layers(&self, stage: &dyn TextStage) -> Result<Option<Vec<Arc<ColumnLayer>>>> {
        let Some(attributes) = self.compiled.attributes() else {
            return Ok(None);
        };
        // An index plan that finds few candidates reads only those: no layer needed.
        if let Some(entries) = candidate_entries(stage, self.compiled)? {
            if entries.saturating_mul(LAYER_FILTER_MIN_CANDIDATES_DIVISOR) < stage.record_count() {
                return Ok(None);
            }
        }
        let layers: Vec<Option<Arc<ColumnLayer>>> =
            attributes.iter().map(|&a| stage.column_layer(a)).collect();
        if layers.iter().any(Option::is_none) {
            // Every record is read for the predicate's attributes by extraction: what
            // layers of the missing ones would serve, and so what buys them.
            for (&a, layer) in attributes.iter().zip(&layers) {
                if layer.is_none() {
                    self.column_demand.record(a, stage.record_count(), false);
                }
            }
            return Ok(None);
        }
        Ok(Some(layers.into_iter().flatten().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_push_extend_and_truncate_alike() {
        let mut a = Column::new("s".into(), AttrType::String);
        a.push(Some(&Value::str("ab")));
        a.push(None);
        let mut b = Column::new("s".into(), AttrType::String);
        b.push(Some(&Value::str("c")));
        b.push(Some(&Value::str("")));
        a.extend(b).unwrap();
        let mut other = Column::new("s".into(), AttrType::Int);
        other.push(Some(&Value::Int(1)));
        assert!(a.extend(other).is_err(), "another type is refused");
        let values: Vec<Option<Value>> = (0..a.len()).map(|i| a.value(i)).collect();
        assert_eq!(
            values,
            vec![
                Some(Value::str("ab")),
                None,
                Some(Value::str("c")),
                Some(Value::str(""))
            ]
        );
        a.truncate(3);
        assert_eq!(a.len(), 3);
        assert_eq!(a.value(2), Some(Value::str("c")));
        let mut t = Column::new("t".into(), AttrType::Timestamp);
        t.push(Some(&Value::Timestamp(5)));
        assert_eq!(t.value(0), Some(Value::Timestamp(5)));
    }
}
