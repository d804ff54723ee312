//! JSON <-> records, values, predicates and snapshots, typed by the table's schema.

use std::ops::Bound;

use puffer_store::codec;
use puffer_store::schema::StoredRecord;
use puffer_store::timestamp::{format_timestamp_micros, parse_timestamp_micros};
use puffer_store::{AttrType, Predicate, RawRecord, Record, Schema, SnapshotInfo, Value};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value as Json};

use crate::error::ApiError;

/// Most nodes a JSON predicate may have.
pub const MAX_PREDICATE_NODES: usize = 1024;

/// `{"seq", "age_ms", "read_log"}`.
pub fn snapshot_json(info: &SnapshotInfo) -> Json {
    json!({
        "seq": info.snapshot,
        "age_ms": info.age.as_secs_f64() * 1000.0,
        "read_log": info.read_log,
    })
}

/// A value as JSON (timestamps as RFC 3339; non-UTF-8 strings lossily).
pub fn value_json(value: &Value) -> Json {
    serde_json::to_value(ValueJson(value)).expect("a value always serializes")
}

/// Serializes a value the way [`value_json`] shows it, without building a JSON tree.
pub struct ValueJson<'a>(pub &'a Value);

impl Serialize for ValueJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(bytes) => serializer.serialize_str(&String::from_utf8_lossy(bytes)),
            Value::Int(x) => serializer.serialize_i64(*x),
            Value::Float(x) => serializer.serialize_f64(*x),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Timestamp(micros) => serializer.serialize_str(&format_timestamp_micros(*micros)),
        }
    }
}

/// A record as a JSON object (the key column, then the present attributes), serialized
/// straight from the record: answers are written without a JSON tree per record.
pub struct RecordJson<'a> {
    /// The record.
    pub record: &'a Record,
    /// The name of the table's key column.
    pub key_column: &'a str,
}

impl Serialize for RecordJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = self
            .record
            .values
            .iter()
            .map(|(name, value)| (name.as_str(), value));
        write_record(serializer, self.key_column, &self.record.key, fields)
    }
}

/// Writes `{key_column: key, name: value, ...}` (the fields are walked twice: counted,
/// then written).
fn write_record<'v, S: Serializer>(
    serializer: S,
    key_column: &str,
    key: &[u8],
    fields: impl Iterator<Item = (&'v str, &'v Value)> + Clone,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(1 + fields.clone().count()))?;
    map.serialize_entry(key_column, &String::from_utf8_lossy(key))?;
    for (name, value) in fields {
        map.serialize_entry(name, &ValueJson(value))?;
    }
    map.end()
}

/// A stored record (values by attribute id) as the JSON object [`RecordJson`] writes,
/// named by `schema`, the attributes in schema order: a get's answer is written without
/// first building a map of attribute names.
pub struct StoredRecordJson<'a> {
    /// The record.
    pub record: &'a StoredRecord,
    /// The schema it was read with.
    pub schema: &'a Schema,
}

impl Serialize for StoredRecordJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let named = self.record.fields.iter().filter_map(|(id, value)| {
            let attribute = self.schema.attributes.get(*id as usize)?;
            Some((attribute.name.as_str(), value))
        });
        write_record(serializer, &self.schema.key, &self.record.key, named)
    }
}

/// A record as stored (a segment's text or a log table's values) as the JSON object
/// [`StoredRecordJson`] writes: a get's answer is written from the text itself, its
/// values decoded one by one (strings borrowed unless they hold escapes).
pub struct RawRecordJson<'a> {
    /// The record.
    pub record: &'a RawRecord,
    /// The schema it was checked to decode with.
    pub schema: &'a Schema,
}

impl Serialize for RawRecordJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let (key, text) = match self.record {
            RawRecord::Stored(record) => {
                return StoredRecordJson {
                    record,
                    schema: self.schema,
                }
                .serialize(serializer)
            }
            RawRecord::Text { key, text } => (key, text),
        };
        // The store checked that the text decodes; a failure here is a bug, not bad input.
        let spans = codec::field_spans(text).map_err(S::Error::custom)?;
        let named = || {
            spans.iter().filter_map(|span| {
                let attribute = self.schema.attributes.get(span.id as usize)?;
                Some((attribute, &text[span.value.clone()]))
            })
        };
        let mut map = serializer.serialize_map(Some(1 + named().count()))?;
        map.serialize_entry(&self.schema.key, &String::from_utf8_lossy(key))?;
        for (attribute, bytes) in named() {
            if attribute.attr_type == AttrType::String {
                let value = codec::decode_string(bytes).map_err(S::Error::custom)?;
                map.serialize_entry(&attribute.name, &String::from_utf8_lossy(&value))?;
            } else {
                let value =
                    codec::decode_value(attribute.attr_type, bytes).map_err(S::Error::custom)?;
                map.serialize_entry(&attribute.name, &ValueJson(&value))?;
            }
        }
        map.end()
    }
}

/// Records as a JSON array of [`RecordJson`] objects.
pub struct RecordsJson<'a> {
    /// The records.
    pub records: &'a [Record],
    /// The name of the table's key column.
    pub key_column: &'a str,
}

impl Serialize for RecordsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.records.iter().map(|record| RecordJson {
            record,
            key_column: self.key_column,
        }))
    }
}

/// A record as a JSON object: the key column, then the present attributes.
pub fn record_json(record: &Record, schema: &Schema) -> Json {
    serde_json::to_value(RecordJson {
        record,
        key_column: &schema.key,
    })
    .expect("a record always serializes")
}

fn type_of_column(schema: &Schema, column: &str) -> Result<AttrType, ApiError> {
    if column == schema.key {
        return Ok(AttrType::String);
    }
    schema
        .id_of(column)
        .map(|id| schema.attributes[id as usize].attr_type)
        .ok_or_else(|| ApiError::invalid(format!("unknown column {column:?}")))
}

/// A JSON value as a value of `attr_type` (None for `null`).
pub fn value_from_json(
    json: &Json,
    attr_type: AttrType,
    column: &str,
) -> Result<Option<Value>, ApiError> {
    let wrong = || {
        ApiError::invalid(format!(
            "column {column:?} is a {}; {json} is not one",
            attr_type.name()
        ))
    };
    Ok(Some(match (attr_type, json) {
        (_, Json::Null) => return Ok(None),
        (AttrType::String, Json::String(s)) => Value::String(s.clone().into_bytes()),
        (AttrType::Int, Json::Number(n)) => Value::Int(n.as_i64().ok_or_else(wrong)?),
        (AttrType::Float, Json::Number(n)) => Value::Float(n.as_f64().ok_or_else(wrong)?),
        (AttrType::Bool, Json::Bool(b)) => Value::Bool(*b),
        (AttrType::Timestamp, Json::Number(n)) => Value::Timestamp(n.as_i64().ok_or_else(wrong)?),
        (AttrType::Timestamp, Json::String(s)) => {
            Value::Timestamp(parse_timestamp_micros(s).ok_or_else(wrong)?)
        }
        _ => return Err(wrong()),
    }))
}

/// A JSON object as a record of `schema` (the key column is required).
pub fn record_from_json(json: &Json, schema: &Schema) -> Result<Record, ApiError> {
    let object = json
        .as_object()
        .ok_or_else(|| ApiError::invalid(format!("a record must be a JSON object, not {json}")))?;
    let key = match object.get(&schema.key) {
        Some(Json::String(key)) => key.clone(),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "the key {:?} must be a string, not {other}",
                schema.key
            )))
        }
        None => {
            return Err(ApiError::invalid(format!(
                "a record is missing its key {:?}",
                schema.key
            )))
        }
    };
    let mut record = Record::new(key.into_bytes());
    for (column, value) in object {
        if *column == schema.key {
            continue;
        }
        let attr_type = type_of_column(schema, column)?;
        if let Some(value) = value_from_json(value, attr_type, column)? {
            record.values.insert(column.clone(), value);
        }
    }
    Ok(record)
}

fn single_entry<'j>(json: &'j Json, operator: &str) -> Result<(&'j String, &'j Json), ApiError> {
    let object = json.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        ApiError::invalid(format!(
            "{operator:?} takes an object with one column: {json}"
        ))
    })?;
    Ok(object.iter().next().expect("one entry"))
}

fn text_of(json: &Json, operator: &str) -> Result<Vec<u8>, ApiError> {
    json.as_str()
        .map(|s| s.as_bytes().to_vec())
        .ok_or_else(|| ApiError::invalid(format!("{operator:?} takes a string, not {json}")))
}

/// A JSON predicate (see docs/http.md) as a store predicate, typed by `schema`.
pub fn predicate_from_json(json: &Json, schema: &Schema) -> Result<Predicate, ApiError> {
    let mut budget = MAX_PREDICATE_NODES;
    predicate_node(json, schema, &mut budget)
}

fn predicate_node(json: &Json, schema: &Schema, budget: &mut usize) -> Result<Predicate, ApiError> {
    *budget = budget.checked_sub(1).ok_or_else(|| {
        ApiError::limit(format!(
            "a predicate has at most {MAX_PREDICATE_NODES} nodes"
        ))
    })?;
    let object = json.as_object().filter(|o| o.len() == 1).ok_or_else(|| {
        ApiError::invalid(format!(
            "a predicate is an object with one operator, not {json}"
        ))
    })?;
    let (operator, argument) = object.iter().next().expect("one entry");
    let typed = |column: &str, value: &Json| -> Result<Value, ApiError> {
        value_from_json(value, type_of_column(schema, column)?, column)?
            .ok_or_else(|| ApiError::invalid(format!("null cannot be compared ({column:?})")))
    };
    let children = |argument: &Json, budget: &mut usize| -> Result<Vec<Predicate>, ApiError> {
        argument
            .as_array()
            .ok_or_else(|| ApiError::invalid(format!("{operator:?} takes an array")))?
            .iter()
            .map(|child| predicate_node(child, schema, budget))
            .collect()
    };
    Ok(match operator.as_str() {
        "all" => Predicate::All,
        "and" => Predicate::And(children(argument, budget)?),
        "or" => Predicate::Or(children(argument, budget)?),
        "not" => Predicate::Not(Box::new(predicate_node(argument, schema, budget)?)),
        "exists" => Predicate::Exists(text_column(argument)?),
        "text_contains" => Predicate::RecordContains(text_of(argument, operator)?),
        "eq" => {
            let (column, value) = single_entry(argument, operator)?;
            Predicate::Eq(column.clone(), typed(column, value)?)
        }
        "in" => {
            let (column, values) = single_entry(argument, operator)?;
            let values = values
                .as_array()
                .ok_or_else(|| ApiError::invalid("\"in\" takes an array of values"))?;
            *budget = budget
                .checked_sub(values.len())
                .ok_or_else(|| ApiError::limit("too many values in \"in\""))?;
            let values = values
                .iter()
                .map(|v| typed(column, v))
                .collect::<Result<_, _>>()?;
            Predicate::In(column.clone(), values)
        }
        "prefix" | "suffix" | "contains" => {
            let (column, value) = single_entry(argument, operator)?;
            let bytes = text_of(value, operator)?;
            let column = column.clone();
            match operator.as_str() {
                "prefix" => Predicate::Prefix(column, bytes),
                "suffix" => Predicate::Suffix(column, bytes),
                _ => Predicate::Contains(column, bytes),
            }
        }
        "range" => {
            let (column, bounds) = single_entry(argument, operator)?;
            let bounds = bounds.as_object().ok_or_else(|| {
                ApiError::invalid("\"range\" takes {\"gt\"|\"gte\", \"lt\"|\"lte\"}")
            })?;
            let (mut lower, mut upper) = (Bound::Unbounded, Bound::Unbounded);
            for (name, value) in bounds {
                let value = typed(column, value)?;
                match name.as_str() {
                    "gt" => lower = Bound::Excluded(value),
                    "gte" => lower = Bound::Included(value),
                    "lt" => upper = Bound::Excluded(value),
                    "lte" => upper = Bound::Included(value),
                    other => {
                        return Err(ApiError::invalid(format!(
                            "unknown range bound {other:?} (gt, gte, lt, lte)"
                        )))
                    }
                }
            }
            Predicate::Range {
                attribute: column.clone(),
                lower,
                upper,
            }
        }
        other => {
            return Err(ApiError::invalid(format!(
                "unknown predicate operator {other:?}"
            )))
        }
    })
}

fn text_column(json: &Json) -> Result<String, ApiError> {
    json.as_str()
        .map(str::to_string)
        .ok_or_else(|| ApiError::invalid(format!("\"exists\" takes a column name, not {json}")))
}

/// A statement's answer as the JSON the API returns for it.
pub fn answer_json(answer: &puffer_node::Answer, schema: Option<&Schema>) -> Json {
    use puffer_node::Answer;
    match answer {
        Answer::Rows {
            columns,
            rows,
            truncated,
            snapshot,
        } => {
            let rows: Vec<Json> = match schema {
                Some(schema) => rows.iter().map(|r| record_json(r, schema)).collect(),
                None => Vec::new(),
            };
            json!({
                "columns": columns,
                "rows": rows,
                "truncated": truncated,
                "snapshot": snapshot_json(snapshot),
            })
        }
        Answer::Computed {
            columns,
            rows,
            truncated,
            snapshot,
        } => {
            let rows: Vec<Json> = rows
                .iter()
                .map(|row| {
                    let fields = columns.iter().zip(row).map(|(column, value)| {
                        let value = value.as_ref().map_or(Json::Null, value_json);
                        (column.clone(), value)
                    });
                    Json::Object(fields.collect())
                })
                .collect();
            json!({
                "columns": columns,
                "rows": rows,
                "truncated": truncated,
                "snapshot": snapshot_json(snapshot),
            })
        }
        Answer::Count { count, snapshot } => {
            json!({"count": count, "snapshot": snapshot_json(snapshot)})
        }
        Answer::Written { seq, operations } => json!({"seq": seq, "operations": operations}),
        Answer::Created(name) | Answer::Dropped(name) => json!({"ok": true, "name": name}),
        Answer::Tables(tables) => json!({"tables": tables}),
        Answer::Described { schema, subspaces } => {
            json!({"key": schema.key, "attributes": schema.attributes, "subspaces": subspaces})
        }
    }
}
