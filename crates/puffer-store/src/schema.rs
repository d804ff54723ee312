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
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        self.check_key(&key)?;
        let mut fields = Vec::with_capacity(values.len());
        for (name, value) in values {
            let Some(id) = self.id_of(&name) else {
                return Err(StoreError::InvalidRecord {
                    key: display_key(&key),
                    field: name,
                    reason: format!(
                        "unknown attribute (the table has: {})",
                        self.attribute_names()
                    ),
                });
            };
            fields.push((id, self.check_value(&key, id, value)?));
        }
        fields.sort_by_key(|(id, _)| *id);
        Ok(StoredRecord { key, fields })
    }

    /// Validates a record whose values are already by attribute id (a loader that
    /// resolved the names once, with [`Schema::id_of`]): ids strictly ascending, each an
    /// attribute of this schema, values of its type, as [`Schema::validate`] checks them.
    pub fn validate_fields(&self, record: StoredRecord) -> Result<StoredRecord> {
        let StoredRecord { key, fields } = record;
        self.check_key(&key)?;
        let mut checked = Vec::with_capacity(fields.len());
        let mut previous: Option<u16> = None;
        for (id, value) in fields {
            if id as usize >= self.attributes.len() {
                return Err(StoreError::InvalidRecord {
                    key: display_key(&key),
                    field: format!("attribute id {id}"),
                    reason: format!(
                        "no such attribute (the table has ids 0 to {})",
                        self.attributes.len() as i64 - 1
                    ),
                });
            }
            if previous.is_some_and(|p| p >= id) {
                return Err(StoreError::InvalidRecord {
                    key: display_key(&key),
                    field: self.attributes[id as usize].name.clone(),
                    reason: "values by id must be in ascending id order, each id once".into(),
                });
            }
            previous = Some(id);
            checked.push((id, self.check_value(&key, id, value)?));
        }
        Ok(StoredRecord {
            key,
            fields: checked,
        })
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        let reason = if key.is_empty() {
            "the key is missing or empty".to_string()
        } else if key.len() > MAX_KEY_BYTES {
            format!(
                "the key is {} bytes; the limit is {MAX_KEY_BYTES}",
                key.len()
            )
        } else {
            return Ok(());
        };
        Err(StoreError::InvalidRecord {
            key: display_key(key),
            field: self.key.clone(),
            reason,
        })
    }

    /// `value` checked for attribute `id` (which exists): its type, its size, a finite
    /// float; -0.0 becomes 0.0 so that equal numbers encode equally.
    fn check_value(&self, key: &[u8], id: u16, value: Value) -> Result<Value> {
        let attribute = &self.attributes[id as usize];
        let invalid = |reason: String| StoreError::InvalidRecord {
            key: display_key(key),
            field: attribute.name.clone(),
            reason,
        };
        let expected = attribute.attr_type;
        if value.attr_type() != expected {
            return Err(invalid(format!(
                "expected a {} value, got a {}",
                expected.name(),
                value.attr_type().name()
            )));
        }
        Ok(match value {
            Value::String(bytes) if bytes.len() > MAX_VALUE_BYTES => {
                return Err(invalid(format!(
                    "the value is {} bytes; the limit is {MAX_VALUE_BYTES}",
                    bytes.len()
                )))
            }
            Value::Float(f) if !f.is_finite() => {
                return Err(invalid(format!("{f} is not a finite number")))
            }
            Value::Float(f) if f == 0.0 && f.is_sign_negative() => Value::Float(0.0),
            other => other,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn schema() -> Schema {
        let attribute = |name: &str, attr_type| Attribute {
            name: name.into(),
            attr_type,
        };
        Schema::new(
            "id",
            vec![
                attribute("city", AttrType::String),
                attribute("price", AttrType::Int),
                attribute("rating", AttrType::Float),
                attribute("open", AttrType::Bool),
            ],
        )
        .unwrap()
    }

    /// A value of the attribute's type, or (`wrong`) of another type.
    fn value_of(id: u16, seed: i64, wrong: bool) -> Value {
        match (id + u16::from(wrong)) % 4 {
            0 => Value::String(format!("c{seed}").into_bytes()),
            1 => Value::Int(seed),
            2 => Value::Float(if seed % 5 == 0 {
                -0.0
            } else {
                seed as f64 / 4.0
            }),
            _ => Value::Bool(seed % 2 == 0),
        }
    }

    proptest! {
        /// By id or by name, a record is accepted or refused alike, and stored alike.
        #[test]
        fn values_by_id_validate_as_values_by_name(
            present in prop::collection::vec(any::<bool>(), 4),
            wrong_type in prop::option::of(0u16..4),
            seeds in prop::collection::vec(-1000i64..1000, 4),
            empty_key in any::<bool>(),
        ) {
            let schema = schema();
            let key = if empty_key { Vec::new() } else { b"k1".to_vec() };
            let mut by_name = Record::new(key.clone());
            let mut fields = Vec::new();
            for id in 0..4u16 {
                if present[id as usize] {
                    let value = value_of(id, seeds[id as usize], wrong_type == Some(id));
                    by_name
                        .values
                        .insert(schema.attributes[id as usize].name.clone(), value.clone());
                    fields.push((id, value));
                }
            }
            let named = schema.validate(by_name);
            let direct = schema.validate_fields(StoredRecord { key, fields });
            match (named, direct) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "by name {:?}, by id {:?}", a, b),
            }
        }
    }

    #[test]
    fn values_by_id_must_name_attributes_in_ascending_order() {
        let schema = schema();
        let record = |fields: Vec<(u16, Value)>| StoredRecord {
            key: b"k".to_vec(),
            fields,
        };
        let unknown = schema
            .validate_fields(record(vec![(4, Value::Int(1))]))
            .unwrap_err();
        assert!(unknown.to_string().contains("attribute id 4"), "{unknown}");
        let unordered = schema
            .validate_fields(record(vec![(1, Value::Int(1)), (0, Value::str("a"))]))
            .unwrap_err();
        assert!(unordered.to_string().contains("ascending"), "{unordered}");
        let repeated = schema
            .validate_fields(record(vec![(1, Value::Int(1)), (1, Value::Int(2))]))
            .unwrap_err();
        assert!(repeated.to_string().contains("ascending"), "{repeated}");
        let nan = schema
            .validate_fields(record(vec![(2, Value::Float(f64::NAN))]))
            .unwrap_err();
        assert!(nan.to_string().contains("finite"), "{nan}");
    }
}
