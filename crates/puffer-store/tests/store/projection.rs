//! Answers of a few columns read only those fields of records with long fields (the
//! long-field directory tells where the others are, and they are skipped): every answer
//! equals a projection of a `BTreeMap` model, over random predicates and column sets,
//! with and without attribute layers, from segments and log tables both.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::common;

use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
};

const NAMES: [&str; 5] = ["name", "bio", "n", "notes", "flag"];

fn schema() -> Schema {
    let attr = |name: &str, attr_type| Attribute {
        name: name.into(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attr("name", AttrType::String),
            attr("bio", AttrType::String),
            attr("n", AttrType::Int),
            attr("notes", AttrType::String),
            attr("flag", AttrType::Bool),
        ],
    )
    .unwrap()
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A record whose `bio` and `notes` are long (up to 300 bytes) or absent.
fn record(rng: &mut Rng, i: u64) -> Record {
    let mut record = Record::new(format!("k{i:04}"))
        .with("name", Value::str(&format!("n{}", rng.below(7))))
        .with("n", Value::Int(rng.below(20) as i64));
    for long in ["bio", "notes"] {
        if rng.below(4) > 0 {
            let len = rng.below(300) as usize;
            let text: String = (0..len)
                .map(|j| (b'a' + ((i as usize + j) % 26) as u8) as char)
                .collect();
            record = record.with(long, Value::str(&text));
        }
    }
    if rng.below(2) == 0 {
        record = record.with("flag", Value::Bool(rng.below(2) == 0));
    }
    record
}

#[test]
fn projected_answers_equal_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let shard = common::open_foreground(dir.path(), schema());
    let mut rng = Rng(11);
    let mut model: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
    let write = |rng: &mut Rng, from: u64, to: u64, model: &mut BTreeMap<Vec<u8>, Record>| {
        let records: Vec<Record> = (from..to).map(|i| record(rng, i)).collect();
        for r in &records {
            model.insert(r.key.clone(), r.clone());
        }
        shard
            .write(records.into_iter().map(WriteOp::Put).collect())
            .unwrap();
    };
    write(&mut rng, 0, 600, &mut model);
    shard.compact_all().unwrap();
    // Some replaced and some new ones in the log stage.
    write(&mut rng, 500, 700, &mut model);
    for round in 0..200 {
        if round == 100 {
            for segment in shard.segments() {
                let layer = segment.build_attribute_layer(2).unwrap();
                segment.add_attribute_layer(layer);
            }
        }
        let predicate = match rng.below(4) {
            0 => Predicate::All,
            1 => Predicate::Eq("n".into(), Value::Int(rng.below(20) as i64)),
            2 => Predicate::Range {
                attribute: "n".into(),
                lower: Bound::Included(Value::Int(rng.below(10) as i64)),
                upper: Bound::Excluded(Value::Int(10 + rng.below(10) as i64)),
            },
            _ => Predicate::Exists("bio".into()),
        };
        let columns: Vec<String> = NAMES
            .iter()
            .filter(|_| rng.below(2) == 0)
            .map(|s| s.to_string())
            .collect();
        let result = shard
            .search(&Query {
                predicate: predicate.clone(),
                projection: Some(columns.clone()),
                limit: None,
                read: ReadOptions::default(),
            })
            .unwrap();
        let matches = |r: &Record| match &predicate {
            Predicate::All => true,
            Predicate::Eq(_, v) => r.values.get("n") == Some(v),
            Predicate::Range { lower, upper, .. } => {
                let Some(Value::Int(n)) = r.values.get("n") else {
                    return false;
                };
                let (Bound::Included(Value::Int(lo)), Bound::Excluded(Value::Int(hi))) =
                    (lower, upper)
                else {
                    unreachable!()
                };
                lo <= n && n < hi
            }
            _ => r.values.contains_key("bio"),
        };
        let expected: Vec<Record> = model
            .values()
            .filter(|r| matches(r))
            .map(|r| {
                let mut r = r.clone();
                r.values.retain(|name, _| columns.contains(name));
                r
            })
            .collect();
        assert_eq!(
            result.rows, expected,
            "round {round}: {predicate:?} {columns:?}"
        );
    }
}
