//! Shared helpers for the store's tests: a small schema, random records, and an
//! independent predicate evaluator used as the oracle.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Bound;

use puffer_store::{AttrType, Attribute, Predicate, Record, Schema, Shard, ShardOptions, Value};

/// xorshift64*: deterministic randomness from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

pub fn schema() -> Schema {
    let attr = |name: &str, attr_type| Attribute {
        name: name.to_string(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attr("name", AttrType::String),
            attr("n", AttrType::Int),
            attr("x", AttrType::Float),
            attr("flag", AttrType::Bool),
            attr("t", AttrType::Timestamp),
        ],
    )
    .unwrap()
}

pub const NAMES: &[&[u8]] = &[
    b"a",
    b"ab",
    b"abc",
    b"b\x01",
    b"",
    b"ba",
    b"\x00\x02x",
    b"abab",
    b"c\xff",
];
pub const INTS: &[i64] = &[-100, -3, -1, 0, 1, 2, 10, 100, 1000, i64::MAX];
pub const FLOATS: &[f64] = &[-2.5, -1.0, 0.0, 0.1, 1.0, 2.5, 52.3676, 1e100];
pub const TIMES: &[i64] = &[0, 1_435_708_800_000_000, 1_435_708_800_000_001, -5];

pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

pub fn random_record(rng: &mut Rng, keys: u64) -> Record {
    let mut record = Record::new(key(rng.below(keys)));
    if rng.chance(80) {
        record = record.with("name", Value::String(rng.pick(NAMES).to_vec()));
    }
    if rng.chance(70) {
        record = record.with("n", Value::Int(*rng.pick(INTS)));
    }
    if rng.chance(60) {
        record = record.with("x", Value::Float(*rng.pick(FLOATS)));
    }
    if rng.chance(50) {
        record = record.with("flag", Value::Bool(rng.chance(50)));
    }
    if rng.chance(40) {
        record = record.with("t", Value::Timestamp(*rng.pick(TIMES)));
    }
    record
}

fn random_value(rng: &mut Rng, attribute: &str) -> Value {
    match attribute {
        "name" => Value::String(rng.pick(NAMES).to_vec()),
        "n" => Value::Int(*rng.pick(INTS)),
        "x" => Value::Float(*rng.pick(FLOATS)),
        "flag" => Value::Bool(rng.chance(50)),
        _ => Value::Timestamp(*rng.pick(TIMES)),
    }
}

fn random_bound(rng: &mut Rng, attribute: &str) -> Bound<Value> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(random_value(rng, attribute)),
        _ => Bound::Excluded(random_value(rng, attribute)),
    }
}

pub fn random_predicate(rng: &mut Rng, depth: u32) -> Predicate {
    let attributes = ["name", "n", "x", "flag", "t"];
    let attribute = rng.pick(&attributes).to_string();
    let fragment = |rng: &mut Rng| {
        let name = rng.pick(NAMES);
        let from = rng.below(name.len() as u64 + 1) as usize;
        let to = from + rng.below((name.len() - from) as u64 + 1) as usize;
        name[from..to].to_vec()
    };
    match rng.below(if depth > 0 { 13 } else { 10 }) {
        0 => Predicate::All,
        1 | 2 => Predicate::Eq(attribute.clone(), random_value(rng, &attribute)),
        3 => Predicate::In(
            attribute.clone(),
            (0..1 + rng.below(3))
                .map(|_| random_value(rng, &attribute))
                .collect(),
        ),
        4 => Predicate::Prefix("name".into(), fragment(rng)),
        5 => Predicate::Suffix("name".into(), fragment(rng)),
        6 => Predicate::Contains("name".into(), fragment(rng)),
        7 => Predicate::Range {
            lower: random_bound(rng, &attribute),
            upper: random_bound(rng, &attribute),
            attribute,
        },
        8 => match rng.below(3) {
            0 => Predicate::Exists(attribute),
            1 => Predicate::RecordContains(fragment(rng)),
            _ => Predicate::Eq("id".into(), Value::String(key(rng.below(12)))),
        },
        9 => Predicate::In(
            "id".into(),
            (0..3).map(|_| Value::String(key(rng.below(12)))).collect(),
        ),
        12 => Predicate::Not(Box::new(random_predicate(rng, depth - 1))),
        10 => Predicate::And(
            (0..2 + rng.below(2))
                .map(|_| random_predicate(rng, depth - 1))
                .collect(),
        ),
        _ => Predicate::Or(
            (0..2 + rng.below(2))
                .map(|_| random_predicate(rng, depth - 1))
                .collect(),
        ),
    }
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Int(x), Value::Int(y)) | (Value::Timestamp(x), Value::Timestamp(y)) => {
            Some(x.cmp(y))
        }
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn within(value: &Value, lower: &Bound<Value>, upper: &Bound<Value>) -> bool {
    use std::cmp::Ordering::*;
    let above = match lower {
        Bound::Unbounded => true,
        Bound::Included(b) => matches!(compare(value, b), Some(Greater | Equal)),
        Bound::Excluded(b) => compare(value, b) == Some(Greater),
    };
    let below = match upper {
        Bound::Unbounded => true,
        Bound::Included(b) => matches!(compare(value, b), Some(Less | Equal)),
        Bound::Excluded(b) => compare(value, b) == Some(Less),
    };
    above && below
}

fn has(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// The oracle: does `record` satisfy `predicate`? (Written independently of the store.)
pub fn holds(predicate: &Predicate, record: &Record) -> bool {
    let value = |name: &str| -> Option<Value> {
        if name == "id" {
            Some(Value::String(record.key.clone()))
        } else {
            record.values.get(name).cloned()
        }
    };
    let text = |name: &str| match value(name) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    match predicate {
        Predicate::All => true,
        Predicate::Eq(a, v) => {
            value(a).is_some_and(|x| compare(&x, v) == Some(std::cmp::Ordering::Equal))
        }
        Predicate::In(a, vs) => value(a).is_some_and(|x| {
            vs.iter()
                .any(|v| compare(&x, v) == Some(std::cmp::Ordering::Equal))
        }),
        Predicate::Prefix(a, p) => text(a).is_some_and(|s| s.starts_with(p)),
        Predicate::Suffix(a, p) => text(a).is_some_and(|s| s.ends_with(p)),
        Predicate::Contains(a, p) => text(a).is_some_and(|s| has(&s, p)),
        Predicate::Range {
            attribute,
            lower,
            upper,
        } => value(attribute).is_some_and(|x| within(&x, lower, upper)),
        Predicate::Exists(a) => value(a).is_some(),
        Predicate::RecordContains(p) => record.values.values().any(|v| match v {
            Value::String(s) => has(s, p),
            _ => false,
        }),
        Predicate::And(children) => children.iter().all(|c| holds(c, record)),
        Predicate::Or(children) => children.iter().any(|c| holds(c, record)),
        Predicate::Not(inner) => !holds(inner, record),
    }
}

/// The model: table contents after each SCU (index = sequence number).
pub struct Model {
    pub states: Vec<BTreeMap<Vec<u8>, Record>>,
}

impl Model {
    pub fn new() -> Model {
        Model {
            states: vec![BTreeMap::new()],
        }
    }
    pub fn last_seq(&self) -> u64 {
        self.states.len() as u64 - 1
    }
    pub fn at(&self, seq: u64) -> &BTreeMap<Vec<u8>, Record> {
        &self.states[seq as usize]
    }
}

/// A shard in `dir` with the default options but no background work: a test decides
/// when batches are sorted and segments built.
pub fn open_foreground(dir: &std::path::Path, schema: Schema) -> Shard {
    let options = ShardOptions {
        background: false,
        ..ShardOptions::default()
    };
    Shard::open(dir, schema, options).unwrap()
}
