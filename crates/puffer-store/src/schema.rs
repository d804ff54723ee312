//! Tables: a key plus typed attributes. Records, values, and their validation.

use std::collections::BTreeMap;

use ahash::AHashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest string value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Most attributes a table can have (each gets one marker byte in the flattened text).
pub const MAX_ATTRIBUTES: usize = 240;
/// Longest attribute name, in bytes.
pub const MAX_ATTRIBUTE_NAME_BYTES: usize = 128;

/// The type of an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttrType {
    /// Arbitrary bytes (usually UTF-8 text).
    String,
    /// 64-bit signed integer.
    Int,
    /// 64-bit float, finite.
    Float,
    /// true or false.
    Bool,
    /// Microseconds since 1970-01-01T00:00:00Z.
    Timestamp,
}

impl AttrType {
    /// Lowercase name, as in schemas and error messages.
    pub fn name(self) -> &'static str {
        match self {
            AttrType::String => "string",
            AttrType::Int => "int",
            AttrType::Float => "float",
            AttrType::Bool => "bool",
            AttrType::Timestamp => "timestamp",
        }
    }
}

/// A typed value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// Any bytes, delimiters included.
    String(Vec<u8>),
    /// Integer.
    Int(i64),
    /// Finite float; -0.0 is stored as 0.0.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// Microseconds since the Unix epoch.
    Timestamp(i64),
}

impl Value {
    /// The type of this value.
    pub fn attr_type(&self) -> AttrType {
        match self {
            Value::String(_) => AttrType::String,
            Value::Int(_) => AttrType::Int,
            Value::Float(_) => AttrType::Float,
            Value::Bool(_) => AttrType::Bool,
            Value::Timestamp(_) => AttrType::Timestamp,
        }
    }

    /// A string value from text.
    pub fn str(s: &str) -> Value {
        Value::String(s.as_bytes().to_vec())
    }

    /// Total order within one type (floats by value; they are finite).
    pub fn cmp_same_type(&self, other: &Value) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
            (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

/// One attribute of a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    /// Name, unique in the table.
    pub name: String,
    /// Type of its values.
    #[serde(rename = "type")]
    pub attr_type: AttrType,
}

/// A table's schema: the key's name and the attributes, in the order they were added.
/// An attribute's position is its id in the flattened text; attributes are only appended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SchemaFields", into = "SchemaFields")]
pub struct Schema {
    /// Name of the key column (for display and for predicates on the key).
    pub key: String,
    /// Attributes; the index in this vector is the attribute id. Extend it only through
    /// [`Schema::add_attribute`], which keeps the name index in step.
    pub attributes: Vec<Attribute>,
    /// Attribute id by name (validation looks up every field of every record).
    ids_by_name: AHashMap<String, u16>,
}

/// The stored form of a schema (the name index is rebuilt on load).
#[derive(Clone, Serialize, Deserialize)]
struct SchemaFields {
    key: String,
    attributes: Vec<Attribute>,
}

impl From<SchemaFields> for Schema {
    fn from(fields: SchemaFields) -> Schema {
        let ids_by_name = fields
            .attributes
            .iter()
            .enumerate()
            .map(|(id, a)| (a.name.clone(), id as u16))
            .collect();
        Schema {
            key: fields.key,
            attributes: fields.attributes,
            ids_by_name,
        }
    }
}

impl From<Schema> for SchemaFields {
    fn from(schema: Schema) -> SchemaFields {
        SchemaFields {
            key: schema.key,
            attributes: schema.attributes,
        }
    }
}

/// A record as callers give it: a key and named values; omitted attributes are absent.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Record {
    /// The key (non-empty).
    pub key: Vec<u8>,
    /// Attribute values by name.
    pub values: BTreeMap<String, Value>,
}

impl Record {
    /// A record with a key and no values.
    pub fn new(key: impl Into<Vec<u8>>) -> Record {
        Record {
            key: key.into(),
            values: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a value.
    pub fn with(mut self, attribute: &str, value: Value) -> Record {
        self.values.insert(attribute.to_string(), value);
        self
    }
}

/// A validated record: values by attribute id, ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRecord {
    /// The key.
    pub key: Vec<u8>,
    /// (attribute id, value), ascending by id, each id at most once.
    pub fields: Vec<(u16, Value)>,
}

impl StoredRecord {
    /// The value of attribute `id`, if present.
    pub fn get(&self, id: u16) -> Option<&Value> {
        self.fields
            .binary_search_by_key(&id, |(i, _)| *i)
            .ok()
            .map(|at| &self.fields[at].1)
    }
}

/// Shows a key in error messages: UTF-8 if it is, hex otherwise, cut when long.
pub fn display_key(key: &[u8]) -> String {
    let shown = &key[..key.len().min(64)];
    let more = if key.len() > 64 { "..." } else { "" };
    match std::str::from_utf8(shown) {
        Ok(s) => format!("{s:?}{more}"),
        Err(_) => format!("0x{}{more}", hex_string(shown)),
    }
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Schema {
    /// A schema with a key and attributes; validates names and types.
    pub fn new(key: &str, attributes: Vec<Attribute>) -> Result<Schema> {
        let mut schema = Schema {
            key: key.to_string(),
            attributes: Vec::new(),
            ids_by_name: AHashMap::new(),
        };
        check_name(key)?;
        for attribute in attributes {
            schema.add_attribute(attribute)?;
        }
        Ok(schema)
    }

    /// Appends an attribute; refuses duplicates, the key's name and too many attributes.
    pub fn add_attribute(&mut self, attribute: Attribute) -> Result<u16> {
        check_name(&attribute.name)?;
        if attribute.name == self.key || self.id_of(&attribute.name).is_some() {
            return Err(StoreError::Schema(format!(
                "attribute {:?} already exists",
                attribute.name
            )));
        }
        if self.attributes.len() >= MAX_ATTRIBUTES {
            return Err(StoreError::Schema(format!(
                "a table has at most {MAX_ATTRIBUTES} attributes; cannot add {:?}",
                attribute.name
            )));
        }
        let id = self.attributes.len() as u16;
        self.ids_by_name.insert(attribute.name.clone(), id);
        self.attributes.push(attribute);
        Ok(id)
    }

    /// The id of a named attribute.
    pub fn id_of(&self, name: &str) -> Option<u16> {
        self.ids_by_name.get(name).copied()
    }

    /// The id of a named attribute, or an error naming it.
    pub fn require(&self, name: &str) -> Result<u16> {
        self.id_of(name).ok_or_else(|| {
            StoreError::InvalidQuery(format!(
                "unknown attribute {name:?} (the table has: {})",
                self.attribute_names()
            ))
        })
    }

    fn attribute_names(&self) -> String {
        let names: Vec<&str> = self.attributes.iter().map(|a| a.name.as_str()).collect();
        if names.is_empty() {
            "no attributes".to_string()
        } else {
            names.join(", ")
        }
    }

    /// Validates a caller's record against the schema and converts it (moving its values).
    pub fn validate(&self, record: Record) -> Result<StoredRecord> {
        let Record { key, values } = record;
        let invalid = |field: &str, reason: String| StoreError::InvalidRecord {
            key: display_key(&key),
            field: field.to_string(),
            reason,
        };
        if key.is_empty() {
            return Err(invalid(&self.key, "the key is missing or empty".into()));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(invalid(
                &self.key,
                format!(
                    "the key is {} bytes; the limit is {MAX_KEY_BYTES}",
                    key.len()
                ),
            ));
        }
        let mut fields = Vec::with_capacity(values.len());
        for (name, value) in values {
            let Some(id) = self.id_of(&name) else {
                return Err(invalid(
                    &name,
                    format!(
                        "unknown attribute (the table has: {})",
                        self.attribute_names()
                    ),
                ));
            };
            let expected = self.attributes[id as usize].attr_type;
            if value.attr_type() != expected {
                return Err(invalid(
                    &name,
                    format!(
                        "expected a {} value, got a {}",
                        expected.name(),
                        value.attr_type().name()
                    ),
                ));
            }
            let value = match value {
                Value::String(bytes) if bytes.len() > MAX_VALUE_BYTES => {
                    return Err(invalid(
                        &name,
                        format!(
                            "the value is {} bytes; the limit is {MAX_VALUE_BYTES}",
                            bytes.len()
                        ),
                    ))
                }
                Value::Float(f) if !f.is_finite() => {
                    return Err(invalid(&name, format!("{f} is not a finite number")))
                }
                Value::Float(f) if f == 0.0 && f.is_sign_negative() => Value::Float(0.0),
                other => other,
            };
            fields.push((id, value));
        }
        fields.sort_by_key(|(id, _)| *id);
        Ok(StoredRecord { key, fields })
    }

    /// Converts a stored record back to named values (for answers).
    pub fn to_record(&self, stored: &StoredRecord) -> Record {
        let mut record = Record::new(stored.key.clone());
        for (id, value) in &stored.fields {
            if let Some(attribute) = self.attributes.get(*id as usize) {
                record.values.insert(attribute.name.clone(), value.clone());
            }
        }
        record
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_ATTRIBUTE_NAME_BYTES {
        return Err(StoreError::Schema(format!(
            "attribute names are 1 to {MAX_ATTRIBUTE_NAME_BYTES} bytes; got {name:?}"
        )));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(StoreError::Schema(format!(
            "attribute name {name:?} contains a control character"
        )));
    }
    Ok(())
}
