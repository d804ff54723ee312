//! One conformance suite for every [`Catalog`] implementation: fixed cases for each
//! rule, then random operations checked against a model (`BTreeMap`s), with the
//! catalog reopened from its storage now and then where it has storage.
//!
//! It panics on the first disagreement (it is for tests: `puffer-node`'s own, and the
//! cluster crate's for its etcd catalog).

use std::collections::BTreeMap;

use puffer_query::QueryError;
use puffer_store::{AttrType, Attribute, Schema};

use super::{Catalog, SegmentEntry, TableEntry, TextEntry};
use crate::layout::TableLayout;

/// How the suite gets catalogs of one implementation.
pub trait Harness {
    /// A new, empty catalog (every call a separate one).
    fn fresh(&mut self) -> Box<dyn Catalog>;
    /// The last catalog [`Harness::fresh`] made, opened again from its storage (as
    /// after a restart); `None` for an implementation without storage.
    fn reopen(&mut self) -> Option<Box<dyn Catalog>>;
}

fn schema(columns: usize) -> Schema {
    Schema::new(
        "id",
        (0..columns)
            .map(|c| Attribute {
                name: format!("c{c}"),
                attr_type: AttrType::Int,
            })
            .collect(),
    )
    .expect("a valid schema")
}

fn table(name: &str, uid: u64, shards: u32, replicas: u32) -> TableEntry {
    TableEntry {
        name: name.into(),
        uid,
        layout: TableLayout { shards, replicas },
        schema: schema(1),
        partition: None,
        chunk_of: None,
        subspace_of: None,
    }
}

fn segment(table_uid: u64, shard: u32, replica: u32, id: u64) -> SegmentEntry {
    SegmentEntry {
        table_uid,
        shard,
        replica,
        segment: id,
        records: id * 10,
        file_bytes: id * 1000,
    }
}

/// Runs the whole suite.
pub fn run(harness: &mut dyn Harness) {
    rules(harness);
    for seed in 1..=4 {
        random_operations(harness, seed);
    }
}

fn rules(harness: &mut dyn Harness) {
    let catalog = harness.fresh();
    assert!(catalog.tables().unwrap().is_empty());
    assert!(catalog.texts().unwrap().is_empty());
    assert_eq!(catalog.table("t").unwrap(), None);

    let t = table("t", 7, 2, 2);
    catalog.create_table(&t).unwrap();
    assert_eq!(catalog.table("t").unwrap(), Some(t.clone()));
    // A name or a uid is taken once.
    assert!(matches!(
        catalog.create_table(&table("t", 8, 1, 1)),
        Err(QueryError::TableExists(_))
    ));
    assert!(matches!(
        catalog.create_table(&table("u", 7, 1, 1)),
        Err(QueryError::TableExists(_))
    ));
    // Bad entries are refused, and change nothing.
    for bad in [
        table("", 9, 1, 1),
        table("has space", 9, 1, 1),
        table("u", 0, 1, 1),
        table("u", 9, 0, 1),
        table("u", 9, 1, 0),
    ] {
        assert!(catalog.create_table(&bad).is_err(), "{bad:?} was taken");
    }
    assert_eq!(catalog.tables().unwrap(), vec![t.clone()]);

    // Schemas change under the table's uid only.
    catalog.set_schema("t", 7, &schema(3)).unwrap();
    assert_eq!(catalog.table("t").unwrap().unwrap().schema, schema(3));
    assert!(matches!(
        catalog.set_schema("t", 8, &schema(1)),
        Err(QueryError::UnknownTable(_))
    ));
    assert!(matches!(
        catalog.set_schema("nope", 7, &schema(1)),
        Err(QueryError::UnknownTable(_))
    ));

    // A subspace is marked ready under its uid; other tables and other subspaces are
    // refused.
    let unready = crate::subspace::SubspaceOf {
        table: "t".into(),
        attributes: vec!["c0".into()],
        grid: puffer_adapt::hyperspace::grid::Grid {
            dimensions: vec![puffer_adapt::hyperspace::grid::Dimension::Ordered {
                cuts: vec![-1.5, 0.25, 7.0],
            }],
        },
        ready: false,
        ready_at: 0,
    };
    let copy = TableEntry {
        subspace_of: Some(unready.clone()),
        ..table("t__ss1", 17, 4, 2)
    };
    catalog.create_table(&copy).unwrap();
    assert_eq!(catalog.table("t__ss1").unwrap(), Some(copy.clone()));
    let ready = crate::subspace::SubspaceOf {
        ready: true,
        ready_at: 42,
        ..unready.clone()
    };
    catalog.set_subspace("t__ss1", 17, &ready).unwrap();
    assert_eq!(
        catalog.table("t__ss1").unwrap().unwrap().subspace_of,
        Some(ready.clone())
    );
    assert!(matches!(
        catalog.set_subspace("t__ss1", 18, &unready),
        Err(QueryError::UnknownTable(_))
    ));
    assert!(matches!(
        catalog.set_subspace("t", 7, &ready),
        Err(QueryError::Invalid(_))
    ));
    let elsewhere = crate::subspace::SubspaceOf {
        attributes: vec!["c1".into()],
        ..ready.clone()
    };
    assert!(matches!(
        catalog.set_subspace("t__ss1", 17, &elsewhere),
        Err(QueryError::Invalid(_))
    ));
    catalog.drop_table("t__ss1").unwrap();

    // Segments: per replica, replaced whole, checked against the table's layout.
    let first = vec![segment(7, 1, 0, 3), segment(7, 1, 0, 1)];
    catalog.set_segments(7, 1, 0, &first).unwrap();
    catalog
        .set_segments(7, 0, 1, &[segment(7, 0, 1, 2)])
        .unwrap();
    assert_eq!(
        catalog.segments(7).unwrap(),
        vec![
            segment(7, 0, 1, 2),
            segment(7, 1, 0, 1),
            segment(7, 1, 0, 3)
        ]
    );
    catalog
        .set_segments(7, 1, 0, &[segment(7, 1, 0, 4)])
        .unwrap();
    assert_eq!(
        catalog.segments(7).unwrap(),
        vec![segment(7, 0, 1, 2), segment(7, 1, 0, 4)]
    );
    for (uid, shard, replica, entries) in [
        (99, 0, 0, vec![]),                      // no such table
        (7, 2, 0, vec![]),                       // no such shard
        (7, 0, 2, vec![]),                       // no such replica
        (7, 0, 0, vec![segment(7, 1, 0, 1)]),    // an entry of another shard
        (7, 0, 0, vec![segment(8, 0, 0, 1)]),    // an entry of another table
        (7, 0, 0, vec![segment(7, 0, 0, 1); 2]), // an id twice
    ] {
        assert!(
            catalog.set_segments(uid, shard, replica, &entries).is_err(),
            "set_segments({uid}, {shard}, {replica}, {entries:?}) was taken"
        );
    }
    assert_eq!(catalog.segments(7).unwrap().len(), 2);

    // Texts.
    let book = TextEntry {
        name: "book".into(),
        text_bytes: 100,
        index_bytes: 40,
    };
    catalog.put_text(&book).unwrap();
    let bigger = TextEntry {
        text_bytes: 200,
        ..book.clone()
    };
    catalog.put_text(&bigger).unwrap();
    assert_eq!(catalog.texts().unwrap(), vec![bigger.clone()]);
    assert!(catalog
        .put_text(&TextEntry {
            name: "a/b".into(),
            ..book.clone()
        })
        .is_err());

    // What is there survives a reopen.
    drop(catalog);
    let catalog = match harness.reopen() {
        Some(reopened) => reopened,
        None => {
            // Without storage the rest runs on a new catalog with the same content.
            let fresh = harness.fresh();
            let mut t = t.clone();
            t.schema = schema(3);
            fresh.create_table(&t).unwrap();
            fresh.set_segments(7, 0, 1, &[segment(7, 0, 1, 2)]).unwrap();
            fresh.set_segments(7, 1, 0, &[segment(7, 1, 0, 4)]).unwrap();
            fresh.put_text(&bigger).unwrap();
            fresh
        }
    };
    assert_eq!(catalog.table("t").unwrap().unwrap().schema, schema(3));
    assert_eq!(catalog.segments(7).unwrap().len(), 2);
    assert_eq!(catalog.texts().unwrap(), vec![bigger]);

    // Dropping a table drops its segments; its name and uid are free again.
    assert_eq!(catalog.drop_table("t").unwrap().uid, 7);
    assert!(matches!(
        catalog.drop_table("t"),
        Err(QueryError::UnknownTable(_))
    ));
    assert!(catalog.segments(7).unwrap().is_empty());
    catalog.create_table(&table("t", 7, 1, 1)).unwrap();
    assert!(catalog.segments(7).unwrap().is_empty());
    assert!(catalog.remove_text("book").unwrap());
    assert!(!catalog.remove_text("book").unwrap());
}

/// A small deterministic generator (the suite must not depend on a crate's RNG).
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

#[derive(Default)]
struct Model {
    tables: BTreeMap<String, TableEntry>,
    texts: BTreeMap<String, TextEntry>,
    segments: BTreeMap<(u64, u32, u32, u64), SegmentEntry>,
}

fn random_operations(harness: &mut dyn Harness, seed: u64) {
    let mut catalog = harness.fresh();
    let mut model = Model::default();
    let mut draw = Draw(seed);
    let names = ["a", "b", "c", "d"];
    let mut next_uid = 1;
    for step in 0..300 {
        let name = names[draw.below(names.len() as u64) as usize];
        match draw.below(8) {
            0 | 1 => {
                let entry = table(
                    name,
                    next_uid,
                    1 + draw.below(3) as u32,
                    1 + draw.below(2) as u32,
                );
                next_uid += 1;
                let taken = model.tables.contains_key(name);
                let answer = catalog.create_table(&entry);
                assert_eq!(
                    answer.is_ok(),
                    !taken,
                    "step {step}: create {name}: {answer:?}"
                );
                if !taken {
                    model.tables.insert(name.into(), entry);
                }
            }
            2 => {
                let answer = catalog.drop_table(name);
                match model.tables.remove(name) {
                    Some(entry) => {
                        assert_eq!(answer.unwrap(), entry, "step {step}");
                        model.segments.retain(|k, _| k.0 != entry.uid);
                    }
                    None => assert!(answer.is_err(), "step {step}: dropped a missing table"),
                }
            }
            3 => {
                let columns = draw.below(4) as usize;
                let uid = model.tables.get(name).map_or(12345, |t| t.uid);
                let answer = catalog.set_schema(name, uid, &schema(columns));
                match model.tables.get_mut(name) {
                    Some(entry) => {
                        answer.unwrap();
                        entry.schema = schema(columns);
                    }
                    None => assert!(answer.is_err(), "step {step}"),
                }
            }
            4 | 5 => {
                let Some(entry) = model.tables.get(name).cloned() else {
                    continue;
                };
                let shard = draw.below(u64::from(entry.layout.shards)) as u32;
                let replica = draw.below(u64::from(entry.layout.replicas)) as u32;
                let count = draw.below(4);
                let segments: Vec<SegmentEntry> = (0..count)
                    .map(|i| segment(entry.uid, shard, replica, i * 2 + draw.below(2)))
                    .collect();
                catalog
                    .set_segments(entry.uid, shard, replica, &segments)
                    .unwrap();
                model
                    .segments
                    .retain(|k, _| !(k.0 == entry.uid && k.1 == shard && k.2 == replica));
                for s in segments {
                    model
                        .segments
                        .insert((s.table_uid, s.shard, s.replica, s.segment), s);
                }
            }
            6 => {
                let entry = TextEntry {
                    name: name.into(),
                    text_bytes: draw.below(1000),
                    index_bytes: draw.below(1000),
                };
                catalog.put_text(&entry).unwrap();
                model.texts.insert(name.into(), entry);
            }
            _ => {
                let removed = catalog.remove_text(name).unwrap();
                assert_eq!(removed, model.texts.remove(name).is_some(), "step {step}");
            }
        }
        if step % 50 == 49 {
            if let Some(reopened) = harness.reopen() {
                catalog = reopened;
            }
        }
        assert_eq!(
            catalog.tables().unwrap(),
            model.tables.values().cloned().collect::<Vec<_>>(),
            "step {step}"
        );
        assert_eq!(
            catalog.texts().unwrap(),
            model.texts.values().cloned().collect::<Vec<_>>(),
            "step {step}"
        );
        for entry in model.tables.values() {
            let expected: Vec<SegmentEntry> = model
                .segments
                .range((entry.uid, 0, 0, 0)..=(entry.uid, u32::MAX, u32::MAX, u64::MAX))
                .map(|(_, s)| s.clone())
                .collect();
            assert_eq!(
                catalog.segments(entry.uid).unwrap(),
                expected,
                "step {step}"
            );
            assert_eq!(catalog.table(&entry.name).unwrap().as_ref(), Some(entry));
        }
    }
}
