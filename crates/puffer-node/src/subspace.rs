//! Hyperspace hashing, stored: a table's *subspaces* (HyperDex's secondary subspaces),
//! each a hidden table holding a full copy of every record, its shards the regions of a
//! grid over a few attributes ([`puffer_adapt::hyperspace::grid`]). A search that fixes
//! some of those attributes reads only the regions their values fall in.
//!
//! - **Names.** Subspace `n` (1 to [`MAX_SUBSPACES_PER_TABLE`]) of table `t` is the table
//!   `t__ss<n>`; its catalog entry says whose subspace it is, over which attributes, its
//!   grid (cuts taken from the data when it was built) and whether it is ready.
//! - **Keys.** A record is stored in a subspace under its key with the region in front
//!   ([`REGION_PREFIX_BYTES`] bytes, big-endian), and the subspace's shards are routed by
//!   that prefix, not by a hash of the key. So every operation names its region itself:
//!   the log replays to the same shards, and a record leaving region `a` for region `b`
//!   is a delete of `a·key` and a put of `b·key` in the same SCU as the change to the
//!   table itself: readers see it in one region or the other, never both, never neither.
//! - **Writes** ([`crate::Database::write_batch`]) to a table with subspaces read each
//!   touched key's current record (its region in every subspace) under a lock on the key,
//!   held until the SCU is published, so that two writes of one key are routed in the
//!   order they commit.
//! - **Reads**: a search or count goes to the subspace whose matching regions are the
//!   smallest share of its grid (the rule of [`puffer_adapt::hyperspace::route_search`],
//!   ties broken in its order too), the table itself when none prunes anything.
//! - **Building** a subspace ([`crate::Database::add_subspace`]) takes cuts from the
//!   records at one snapshot, makes the hidden table (writes maintain it from then on),
//!   copies every record of a later snapshot into it under the keys' locks, and only then
//!   marks it ready, in the catalog: the one switch. A subspace found unready when the
//!   database opens was cut short and is dropped.

use std::collections::BTreeSet;
use std::ops::Bound;

use puffer_adapt::hyperspace::dimension_parts;
use puffer_adapt::hyperspace::grid::{quantile_cuts, Condition, Coordinate, Dimension, Grid};
use puffer_query::{QueryError, Result};
use puffer_store::schema::StoredRecord;
use puffer_store::{AttrType, Predicate, Record, Schema, Value, WriteOp};
use serde::{Deserialize, Serialize};

use crate::layout::{MAX_SHARDS, MAX_TABLE_NAME_BYTES};

/// Most subspaces of one table besides its own key subspace: every write changes a copy
/// in each (the model's cap).
pub const MAX_SUBSPACES_PER_TABLE: usize = puffer_adapt::hyperspace::MAX_SUBSPACES;
/// Most attributes of one subspace.
pub const MAX_SUBSPACE_ATTRIBUTES: usize = puffer_adapt::hyperspace::MAX_SUBSPACE_ATTRIBUTES;
/// Bytes of the region in front of a key stored in a subspace.
pub const REGION_PREFIX_BYTES: usize = 2;
/// Longest key of a table with subspaces: the region prefix must fit the store's bound.
pub const MAX_KEY_BYTES_WITH_SUBSPACES: usize =
    puffer_store::schema::MAX_KEY_BYTES - REGION_PREFIX_BYTES;
/// What a subspace's name adds to its table's: `__ss` and one digit.
const NAME_SUFFIX: &str = "__ss";

/// Regions of a subspace added without a number.
pub const DEFAULT_REGIONS: u32 = 16;

/// A subspace as `DESCRIBE` and the admin API show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubspaceDescription {
    /// Its name (a hidden table's).
    pub name: String,
    /// Its attributes, one dimension each.
    pub attributes: Vec<String>,
    /// Parts of each dimension, in the attributes' order.
    pub parts: Vec<u32>,
    /// Its regions (shards): the product of the parts.
    pub regions: u32,
    /// Whether it holds every record (reads use it only then).
    pub ready: bool,
}

/// What a subspace table is: whose subspace, over which attributes, cut how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubspaceOf {
    /// The table it holds copies of.
    pub table: String,
    /// Its attributes, one dimension each, in the grid's order.
    pub attributes: Vec<String>,
    /// How each dimension is cut; the regions are the table's shards.
    pub grid: Grid,
    /// Whether every record is in it (reads use it only then).
    pub ready: bool,
    /// The first snapshot at which it holds every record (0 until it is ready): a read
    /// at an older one goes to the table. On a cluster, a node may read at a snapshot
    /// older than the one at which the build finished.
    #[serde(default)]
    pub ready_at: u64,
}

/// The name of subspace `number` of `table`.
pub fn subspace_name(table: &str, number: usize) -> String {
    format!("{table}{NAME_SUFFIX}{number}")
}

/// Checks that `table` may have subspaces by its name (room for the suffix).
pub fn check_table_name(table: &str) -> Result<()> {
    if table.len() + NAME_SUFFIX.len() + 1 > MAX_TABLE_NAME_BYTES {
        return Err(QueryError::Invalid(format!(
            "a table with subspaces has a name of at most {} bytes (its subspaces add {}); got {table:?}",
            MAX_TABLE_NAME_BYTES - NAME_SUFFIX.len() - 1,
            NAME_SUFFIX.len() + 1
        )));
    }
    Ok(())
}

/// Checks a new subspace of a table with `schema` over `attributes`, cut into at most
/// `regions` regions; gives the attributes' types.
pub fn check_subspace(
    schema: &Schema,
    attributes: &[String],
    regions: u32,
) -> Result<Vec<AttrType>> {
    if attributes.is_empty() || attributes.len() > MAX_SUBSPACE_ATTRIBUTES {
        return Err(QueryError::Invalid(format!(
            "a subspace has 1 to {MAX_SUBSPACE_ATTRIBUTES} attributes; got {}",
            attributes.len()
        )));
    }
    // A grid of one part per attribute prunes nothing but is a configuration the
    // model weighs (the hyperspace heuristic over many attributes): allowed.
    if !(1..=MAX_SHARDS).contains(&regions) {
        return Err(QueryError::Invalid(format!(
            "a subspace has 1 to {MAX_SHARDS} regions; got {regions}"
        )));
    }
    let mut seen = BTreeSet::new();
    let mut types = Vec::with_capacity(attributes.len());
    for name in attributes {
        if !seen.insert(name.as_str()) {
            return Err(QueryError::Invalid(format!(
                "attribute {name:?} is named twice in one subspace"
            )));
        }
        if *name == schema.key {
            return Err(QueryError::Invalid(format!(
                "{name:?} is the key: the table itself is the key's subspace"
            )));
        }
        let attribute = schema
            .attributes
            .iter()
            .find(|a| a.name == *name)
            .ok_or_else(|| QueryError::Invalid(format!("the table has no attribute {name:?}")))?;
        types.push(attribute.attr_type);
    }
    Ok(types)
}

/// The grid of a new subspace of a table with `schema` over `attributes`, cut into at
/// most `regions` regions: strings and booleans hashed, numbers and timestamps cut at
/// the quantiles of `sample` (the table's records), so that skewed values still spread
/// (hashed when the sample has none of the attribute's values).
pub fn plan_grid<'a>(
    schema: &Schema,
    attributes: &[String],
    regions: u32,
    sample: impl IntoIterator<Item = &'a Record>,
) -> Result<Grid> {
    let types = check_subspace(schema, attributes, regions)?;
    let parts = parts_in_listed_order(schema, attributes, regions);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); attributes.len()];
    for record in sample {
        for (i, name) in attributes.iter().enumerate() {
            if let Some(Coordinate::Number(x)) = record.values.get(name).map(coordinate) {
                samples[i].push(x);
            }
        }
    }
    let dimensions = types
        .iter()
        .zip(samples.iter_mut())
        .zip(parts)
        .map(|((attr_type, sample), parts)| match attr_type {
            AttrType::String | AttrType::Bool => Dimension::Hashed { parts },
            // No value to take cuts from (an empty table): hashed, so that equalities
            // still prune; a subspace added again once there is data cuts by order.
            AttrType::Int | AttrType::Float | AttrType::Timestamp if sample.is_empty() => {
                Dimension::Hashed { parts }
            }
            AttrType::Int | AttrType::Float | AttrType::Timestamp => Dimension::Ordered {
                cuts: quantile_cuts(sample, parts),
            },
        })
        .collect();
    Ok(Grid { dimensions })
}

/// Parts of each of `attributes`' dimensions, in their listed order: the model's
/// [`dimension_parts`], which go by increasing attribute id (the schema's order), so that
/// the grid is the one the model predicts for whatever order the subspace was named in.
fn parts_in_listed_order(schema: &Schema, attributes: &[String], regions: u32) -> Vec<u32> {
    let ids: Vec<u16> = attributes
        .iter()
        .map(|name| schema.id_of(name).unwrap_or(u16::MAX))
        .collect();
    let mut by_id: Vec<usize> = (0..attributes.len()).collect();
    by_id.sort_by_key(|&listed| ids[listed]);
    let mut parts = vec![1; attributes.len()];
    for (listed, part) in by_id
        .into_iter()
        .zip(dimension_parts(regions, attributes.len()))
    {
        parts[listed] = part;
    }
    parts
}

/// A value as a grid coordinate: strings by their bytes, booleans as one byte, numbers
/// and timestamps as floats (which keeps their order; `-0.0` as `0.0`, as stored).
pub fn coordinate(value: &Value) -> Coordinate<'_> {
    match value {
        Value::String(bytes) => Coordinate::Bytes(bytes),
        Value::Bool(false) => Coordinate::Bytes(&[0]),
        Value::Bool(true) => Coordinate::Bytes(&[1]),
        Value::Int(i) => Coordinate::Number(*i as f64),
        Value::Float(x) => Coordinate::Number(*x + 0.0),
        Value::Timestamp(t) => Coordinate::Number(*t as f64),
    }
}

/// Whether `value` is of the kind `dimension` cuts (a predicate's value of another kind
/// cannot be placed, and then asks every part).
fn fits(dimension: &Dimension, value: &Value) -> bool {
    match (dimension, value) {
        (_, Value::Float(x)) => x.is_finite(),
        // Numbers are hashed where no cuts could be taken; a value of another type than
        // the attribute's is refused by the store anyway.
        (Dimension::Hashed { .. }, _) => true,
        (Dimension::Ordered { .. }, Value::Int(_) | Value::Timestamp(_)) => true,
        (Dimension::Ordered { .. }, Value::String(_) | Value::Bool(_)) => false,
    }
}

impl SubspaceOf {
    /// The region of a record whose attribute values `value_of` gives.
    fn region_with<'a>(&self, value_of: impl Fn(&str) -> Option<&'a Value>) -> u32 {
        let coordinates: Vec<Coordinate<'_>> = self
            .attributes
            .iter()
            .map(|name| value_of(name).map_or(Coordinate::Missing, coordinate))
            .collect();
        // Grids have at most MAX_SHARDS regions (checked when planned).
        self.grid.region_of(&coordinates) as u32
    }

    /// The region of `record`.
    pub fn region_of(&self, record: &Record) -> u32 {
        self.region_with(|name| record.values.get(name))
    }

    /// The region of `record` (values by attribute id of `schema`).
    pub fn region_of_fields(&self, record: &StoredRecord, schema: &Schema) -> u32 {
        self.region_with(|name| schema.id_of(name).and_then(|id| record.get(id)))
    }

    /// The regions a record matching `predicate` can be in, ascending; `None` if the
    /// predicate tests the key (`key_name`): stored keys carry the region, so only the
    /// table itself answers those.
    pub fn regions_for(&self, predicate: &Predicate, key_name: &str) -> Option<Vec<u32>> {
        if tests_key(predicate, key_name) {
            return None;
        }
        let all = || (0..self.grid.regions() as u32).collect::<Vec<u32>>();
        let on_attribute = |name: &str, condition: Condition<'_>| -> Vec<u32> {
            let Some(i) = self.attributes.iter().position(|a| a == name) else {
                return all();
            };
            let mut conditions = vec![Condition::Any; self.attributes.len()];
            conditions[i] = condition;
            self.grid
                .regions_matching(&conditions)
                .into_iter()
                .map(|r| r as u32)
                .collect()
        };
        let dimension = |name: &str| {
            let i = self.attributes.iter().position(|a| a == name)?;
            Some(&self.grid.dimensions[i])
        };
        let one_of = |name: &str, values: &[Value]| -> Vec<u32> {
            match dimension(name) {
                Some(d) if values.iter().all(|v| fits(d, v)) => on_attribute(
                    name,
                    Condition::OneOf(values.iter().map(coordinate).collect()),
                ),
                _ => all(),
            }
        };
        Some(match predicate {
            Predicate::Eq(name, value) => one_of(name, std::slice::from_ref(value)),
            Predicate::In(name, values) => one_of(name, values),
            Predicate::Range {
                attribute,
                lower,
                upper,
            } => {
                let number = |bound: &Bound<Value>| -> Option<Bound<f64>> {
                    Some(match bound {
                        Bound::Unbounded => Bound::Unbounded,
                        Bound::Included(v) | Bound::Excluded(v) => match coordinate(v) {
                            Coordinate::Number(x) if x.is_finite() => Bound::Included(x),
                            _ => return None,
                        },
                    })
                };
                match (dimension(attribute), number(lower), number(upper)) {
                    (Some(Dimension::Ordered { .. }), Some(lo), Some(hi)) => {
                        on_attribute(attribute, Condition::Between(lo, hi))
                    }
                    _ => all(),
                }
            }
            Predicate::And(parts) => {
                let mut regions = all();
                for part in parts {
                    let of_part = self.regions_for(part, key_name)?;
                    regions.retain(|r| of_part.binary_search(r).is_ok());
                }
                regions
            }
            Predicate::Or(parts) => {
                let mut regions = BTreeSet::new();
                for part in parts {
                    regions.extend(self.regions_for(part, key_name)?);
                }
                regions.into_iter().collect()
            }
            // Negations, prefixes and substrings, existence, every record: no pruning.
            _ => all(),
        })
    }
}

/// Whether `predicate` tests the key.
fn tests_key(predicate: &Predicate, key_name: &str) -> bool {
    match predicate {
        Predicate::All | Predicate::RecordContains(_) => false,
        Predicate::Eq(name, _)
        | Predicate::In(name, _)
        | Predicate::Prefix(name, _)
        | Predicate::Suffix(name, _)
        | Predicate::Contains(name, _)
        | Predicate::Exists(name)
        | Predicate::Range {
            attribute: name, ..
        } => name == key_name,
        Predicate::And(parts) | Predicate::Or(parts) => {
            parts.iter().any(|p| tests_key(p, key_name))
        }
        Predicate::Not(inner) => tests_key(inner, key_name),
    }
}

/// `key` as stored in region `region` of a subspace.
pub fn stored_key(region: u32, key: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(REGION_PREFIX_BYTES + key.len());
    stored.extend_from_slice(&(region as u16).to_be_bytes());
    stored.extend_from_slice(key);
    stored
}

/// The region a key stored in a subspace names (0 for a key too short to name one,
/// which no write makes).
pub fn region_of_stored_key(stored: &[u8]) -> u32 {
    match stored {
        [high, low, ..] => u32::from(u16::from_be_bytes([*high, *low])),
        _ => 0,
    }
}

/// The table's key of a key stored in a subspace.
pub fn key_of_stored(stored: &[u8]) -> &[u8] {
    stored.get(REGION_PREFIX_BYTES..).unwrap_or_default()
}

/// A region's answer with the table's keys in its rows (the region prefix taken off):
/// done to each region's answer before they are merged, so that a limited search keeps
/// the rows a read of the table would.
pub fn with_table_keys(mut answer: crate::message::ReadAnswer) -> crate::message::ReadAnswer {
    if let crate::message::ReadAnswer::Rows(result) = &mut answer {
        for row in &mut result.rows {
            row.key = key_of_stored(&row.key).to_vec();
        }
    }
    answer
}

/// A key's record before and after the operations of a batch so far.
pub type Current = std::collections::HashMap<Vec<u8>, Option<Record>>;

/// One subspace's operations for a table's operations `ops` (on a table with `schema`),
/// given `current`: every touched key's record before the batch (`None`: absent), which
/// is advanced through the batch. A put goes to its record's region and, if the key was
/// in another region, deletes it there; a delete deletes it from its region; a schema
/// change is the subspace's too.
pub fn subspace_ops(
    subspace: &SubspaceOf,
    schema: &Schema,
    ops: &[WriteOp],
    current: &mut Current,
) -> Result<Vec<WriteOp>> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        // A put: its key, its record (by names), its copy under the region's key.
        let (key, record, copy) = match op {
            WriteOp::Put(record) => {
                let region = subspace.region_of(record);
                let copy = WriteOp::Put(Record {
                    key: stored_key(region, &record.key),
                    values: record.values.clone(),
                });
                (&record.key, record.clone(), copy)
            }
            WriteOp::PutFields(fields) => {
                let region = subspace.region_of_fields(fields, schema);
                let copy = WriteOp::PutFields(StoredRecord {
                    key: stored_key(region, &fields.key),
                    fields: fields.fields.clone(),
                });
                (&fields.key, record_of_fields(fields, schema), copy)
            }
            WriteOp::Delete(key) => {
                if let Some(Some(old)) = current.get(key) {
                    out.push(WriteOp::Delete(stored_key(subspace.region_of(old), key)));
                }
                current.insert(key.clone(), None);
                continue;
            }
            WriteOp::AddAttribute(attribute) => {
                out.push(WriteOp::AddAttribute(attribute.clone()));
                continue;
            }
        };
        check_key(key)?;
        // A record that moves leaves its old region in the same SCU.
        if let Some(Some(old)) = current.get(key) {
            let old_region = subspace.region_of(old);
            if old_region != subspace.region_of(&record) {
                out.push(WriteOp::Delete(stored_key(old_region, key)));
            }
        }
        out.push(copy);
        current.insert(key.clone(), Some(record));
    }
    Ok(out)
}

/// A record given by attribute ids as one by names (ids the schema lacks are left out:
/// validation refuses them later).
pub(crate) fn record_of_fields(fields: &StoredRecord, schema: &Schema) -> Record {
    Record {
        key: fields.key.clone(),
        values: fields
            .fields
            .iter()
            .filter_map(|(id, value)| {
                let attribute = schema.attributes.get(usize::from(*id))?;
                Some((attribute.name.clone(), value.clone()))
            })
            .collect(),
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_BYTES_WITH_SUBSPACES {
        return Err(QueryError::Invalid(format!(
            "a table with subspaces takes keys of at most {MAX_KEY_BYTES_WITH_SUBSPACES} bytes \
             (each copy carries its region in front); this one has {}",
            key.len()
        )));
    }
    Ok(())
}

/// Locks stripes of keys of tables with subspaces, so that two writes of one key are
/// routed in the order they commit; and the database's subspace configuration, which
/// writes hold shared and adding or dropping a subspace holds alone.
pub struct KeyLocks {
    /// Held shared by every write, alone while a subspace is made or dropped.
    pub configuration: std::sync::RwLock<()>,
    stripes: Vec<std::sync::Mutex<()>>,
}

/// Stripes of [`KeyLocks`]: two writes of different keys rarely wait on each other.
const KEY_LOCK_STRIPES: usize = 1024;

impl Default for KeyLocks {
    fn default() -> KeyLocks {
        KeyLocks {
            configuration: std::sync::RwLock::new(()),
            stripes: (0..KEY_LOCK_STRIPES)
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
        }
    }
}

impl KeyLocks {
    /// Locks the stripes of `keys` of table `uid`, in ascending order (so two writers
    /// never wait on each other in a cycle), until the guards are dropped.
    pub fn lock<'a>(
        &self,
        uid: u64,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<std::sync::MutexGuard<'_, ()>> {
        let stripes: BTreeSet<usize> = keys
            .into_iter()
            .map(|key| {
                let mut bytes = uid.to_le_bytes().to_vec();
                bytes.extend_from_slice(key);
                (puffer_adapt::spread::fnv1a64(&bytes) % KEY_LOCK_STRIPES as u64) as usize
            })
            .collect();
        stripes
            .into_iter()
            .map(|s| {
                self.stripes[s]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect()
    }
}

/// The keys `ops` touch.
pub fn keys_of(ops: &[WriteOp]) -> impl Iterator<Item = &[u8]> {
    ops.iter().filter_map(|op| match op {
        WriteOp::Put(record) => Some(record.key.as_slice()),
        WriteOp::PutFields(fields) => Some(fields.key.as_slice()),
        WriteOp::Delete(key) => Some(key.as_slice()),
        WriteOp::AddAttribute(_) => None,
    })
}
