//! Subspaces (hyperspace hashing) against a model: random tables, subspace
//! configurations, writes (puts that move records between regions, deletes, schema
//! changes) and predicates; every search and count equals a naive scan of a `BTreeMap`
//! of the acknowledged records, every subspace holds each record exactly once in the
//! region its values fall in, searches that fix a subspace's attributes read only
//! matching regions, readers never see a moving record twice or not at all, and
//! subspaces survive a restart (an unfinished one is dropped).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use puffer_node::serving::NodeConfig;
use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout, Wait};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, ShardOptions, Value,
    WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CITIES: [&str; 5] = ["Lisbon", "Porto", "Faro", "Braga", "Evora"];
const ATTRIBUTES: [&str; 5] = ["city", "price", "rating", "pets", "ts"];

fn options() -> DatabaseOptions {
    DatabaseOptions {
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        shard: ShardOptions {
            // Small log tables: sealing and compaction run during the test.
            log_table_max_records: 64,
            ..ShardOptions::default()
        },
        ..DatabaseOptions::default()
    }
}

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
            attribute("pets", AttrType::Bool),
            attribute("ts", AttrType::Timestamp),
        ],
    )
    .unwrap()
}

/// A record with skewed prices, some attributes missing.
fn random_record(rng: &mut StdRng, key: u32) -> Record {
    let mut record = Record::new(format!("k{key:04}"));
    let city = Value::str(CITIES[rng.gen_range(0..CITIES.len())]);
    let price = Value::Int(if rng.gen_bool(0.7) {
        rng.gen_range(20..120)
    } else {
        rng.gen_range(120..5000)
    });
    let rating = Value::Float(f64::from(rng.gen_range(0..=50u32)) / 10.0);
    let pets = Value::Bool(rng.gen_bool(0.3));
    let ts = Value::Timestamp(rng.gen_range(0..1_000_000));
    for (name, value) in ATTRIBUTES.into_iter().zip([city, price, rating, pets, ts]) {
        if rng.gen_bool(0.9) {
            record.values.insert(name.into(), value);
        }
    }
    record
}

/// A value of attribute `name`, as a predicate would name it.
fn random_value(rng: &mut StdRng, name: &str) -> Value {
    match name {
        "city" => Value::str(CITIES[rng.gen_range(0..CITIES.len())]),
        "price" => Value::Int(rng.gen_range(0..5200)),
        "rating" => Value::Float(f64::from(rng.gen_range(0..=50u32)) / 10.0),
        "pets" => Value::Bool(rng.gen_bool(0.5)),
        _ => Value::Timestamp(rng.gen_range(0..1_000_000)),
    }
}

fn random_predicate(rng: &mut StdRng, depth: u32) -> Predicate {
    let name = ATTRIBUTES[rng.gen_range(0..ATTRIBUTES.len())].to_string();
    let choice = if depth == 0 {
        rng.gen_range(0..5)
    } else {
        rng.gen_range(0..9)
    };
    match choice {
        0 | 1 => Predicate::Eq(name.clone(), random_value(rng, &name)),
        2 => Predicate::In(
            name.clone(),
            (0..rng.gen_range(1..4))
                .map(|_| random_value(rng, &name))
                .collect(),
        ),
        3 => {
            let (a, b) = (random_value(rng, &name), random_value(rng, &name));
            let bound = |rng: &mut StdRng, v: Value| match rng.gen_range(0..3) {
                0 => Bound::Included(v),
                1 => Bound::Excluded(v),
                _ => Bound::Unbounded,
            };
            Predicate::Range {
                attribute: name,
                lower: bound(rng, a),
                upper: bound(rng, b),
            }
        }
        4 => Predicate::Eq(
            "id".into(),
            Value::str(&format!("k{:04}", rng.gen_range(0..300))),
        ),
        5 | 6 => Predicate::And(
            (0..rng.gen_range(1..4))
                .map(|_| random_predicate(rng, depth - 1))
                .collect(),
        ),
        7 => Predicate::Or(
            (0..rng.gen_range(1..3))
                .map(|_| random_predicate(rng, depth - 1))
                .collect(),
        ),
        _ => Predicate::Not(Box::new(random_predicate(rng, depth - 1))),
    }
}

/// The oracle: a predicate on a record, by the rules written out (an attribute the
/// record lacks holds no condition on it).
fn holds(predicate: &Predicate, record: &Record) -> bool {
    let value = |name: &str| -> Option<Value> {
        if name == "id" {
            Some(Value::String(record.key.clone()))
        } else {
            record.values.get(name).cloned()
        }
    };
    let cmp = |a: &Value, b: &Value| a.cmp_same_type(b);
    match predicate {
        Predicate::All => true,
        Predicate::Eq(name, v) => {
            value(name).is_some_and(|x| cmp(&x, v).is_some_and(|o| o.is_eq()))
        }
        Predicate::In(name, vs) => {
            value(name).is_some_and(|x| vs.iter().any(|v| cmp(&x, v).is_some_and(|o| o.is_eq())))
        }
        Predicate::Range {
            attribute,
            lower,
            upper,
        } => value(attribute).is_some_and(|x| {
            let above = match lower {
                Bound::Included(v) => cmp(&x, v).is_some_and(|o| o.is_ge()),
                Bound::Excluded(v) => cmp(&x, v).is_some_and(|o| o.is_gt()),
                Bound::Unbounded => true,
            };
            let below = match upper {
                Bound::Included(v) => cmp(&x, v).is_some_and(|o| o.is_le()),
                Bound::Excluded(v) => cmp(&x, v).is_some_and(|o| o.is_lt()),
                Bound::Unbounded => true,
            };
            above && below
        }),
        Predicate::And(parts) => parts.iter().all(|p| holds(p, record)),
        Predicate::Or(parts) => parts.iter().any(|p| holds(p, record)),
        Predicate::Not(inner) => !holds(inner, record),
        other => panic!("the test makes no {other:?}"),
    }
}

fn search(db: &Database, table: &str, predicate: &Predicate) -> Vec<Record> {
    let request = ReadRequest::Search {
        query: Query {
            predicate: predicate.clone(),
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        },
    };
    match db.read(table, &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Rows(result)) => result.rows,
        other => panic!("a search answered {other:?}"),
    }
}

fn count(db: &Database, table: &str, predicate: &Predicate) -> u64 {
    let request = ReadRequest::Count {
        predicate: predicate.clone(),
        read: ReadOptions::default(),
    };
    match db.read(table, &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Count { count, .. }) => count,
        other => panic!("a count answered {other:?}"),
    }
}

/// Every subspace of `table` holds each record of the model exactly once, in the
/// region its values fall in (read from the subspace's shards directly).
fn check_copies(db: &Database, table: &str, model: &BTreeMap<Vec<u8>, Record>) {
    for copy in db.subspaces_of(table) {
        let of = copy.subspace_of().unwrap();
        let mut seen: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
        for region in 0..copy.layout().shards {
            let rows = copy
                .search(&Query {
                    predicate: Predicate::All,
                    projection: None,
                    limit: None,
                    read: ReadOptions::default(),
                })
                .unwrap()
                .rows;
            for row in rows
                .into_iter()
                .filter(|r| puffer_node::subspace::region_of_stored_key(&r.key) == region)
            {
                let key = puffer_node::subspace::key_of_stored(&row.key).to_vec();
                let record = Record {
                    key: key.clone(),
                    values: row.values,
                };
                assert_eq!(
                    of.region_of(&record),
                    region,
                    "{} holds {:?} in the wrong region",
                    copy.name(),
                    String::from_utf8_lossy(&key)
                );
                assert!(
                    seen.insert(key.clone(), record).is_none(),
                    "{} holds {:?} twice",
                    copy.name(),
                    String::from_utf8_lossy(&key)
                );
            }
        }
        assert_eq!(&seen, model, "{} differs from the table", copy.name());
    }
}

/// Writes one batch to `rooms`, again while the store refuses it as overloaded (its
/// small log tables make compaction fall behind under the tests' load; refusing is
/// its right).
fn write(db: &Database, ops: Vec<WriteOp>) {
    for _ in 0..2000 {
        match db.write_batch(vec![("rooms".into(), ops.clone())]) {
            Ok(_) => return,
            Err(puffer_query::QueryError::Store(puffer_store::StoreError::Overloaded(_))) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("a write failed: {e}"),
        }
    }
    panic!("the store stayed overloaded for 10 s");
}

fn random_attributes(rng: &mut StdRng) -> Vec<String> {
    let mut names: Vec<String> = ATTRIBUTES.iter().map(|s| s.to_string()).collect();
    let count = rng.gen_range(1..=3);
    let mut chosen = Vec::new();
    for _ in 0..count {
        chosen.push(names.remove(rng.gen_range(0..names.len())));
    }
    chosen
}

/// Random writes to `table` (puts of new and existing keys, deletes), applied to the
/// model as acknowledged.
fn random_writes(
    db: &Database,
    rng: &mut StdRng,
    model: &mut BTreeMap<Vec<u8>, Record>,
    batches: usize,
) {
    for _ in 0..batches {
        let mut ops = Vec::new();
        for _ in 0..rng.gen_range(1..40) {
            let key = rng.gen_range(0..300u32);
            if rng.gen_bool(0.15) {
                ops.push(WriteOp::Delete(format!("k{key:04}").into_bytes()));
            } else {
                ops.push(WriteOp::Put(random_record(rng, key)));
            }
        }
        write(db, ops.clone());
        for op in ops {
            match op {
                WriteOp::Put(record) => {
                    model.insert(record.key.clone(), record);
                }
                WriteOp::Delete(key) => {
                    model.remove(&key);
                }
                _ => unreachable!(),
            }
        }
    }
}

fn check_against_model(
    db: &Database,
    rng: &mut StdRng,
    model: &BTreeMap<Vec<u8>, Record>,
    predicates: usize,
) {
    for _ in 0..predicates {
        let predicate = random_predicate(rng, 2);
        let expected: Vec<&Record> = model.values().filter(|r| holds(&predicate, r)).collect();
        let got = search(db, "rooms", &predicate);
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            expected,
            "search {predicate:?}"
        );
        assert_eq!(
            count(db, "rooms", &predicate),
            expected.len() as u64,
            "count {predicate:?}"
        );
    }
}

#[test]
fn searches_over_random_subspaces_equal_a_naive_scan() {
    for seed in 0..12u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open_with(dir.path(), options()).unwrap();
        let layout = TableLayout {
            shards: rng.gen_range(1..=3),
            replicas: rng.gen_range(1..=2),
        };
        db.create_table_with("rooms", schema(), layout).unwrap();
        let mut model = BTreeMap::new();
        if seed % 3 == 0 {
            // Made on the empty table: numbers hashed, no cuts to take.
            let attributes = random_attributes(&mut rng);
            db.add_subspace("rooms", &attributes, 16).unwrap();
        }
        random_writes(&db, &mut rng, &mut model, 10);
        let subspaces = rng.gen_range(1..=3);
        for _ in 0..subspaces {
            let attributes = random_attributes(&mut rng);
            let regions = rng.gen_range(1u32 << attributes.len()..=64);
            match db.add_subspace("rooms", &attributes, regions) {
                Ok(_) => {}
                // The same attributes drawn twice.
                Err(e) if e.to_string().contains("already") => {}
                Err(e) => panic!("seed {seed}: add_subspace {attributes:?} {regions}: {e}"),
            }
        }
        check_copies(&db, "rooms", &model);
        check_against_model(&db, &mut rng, &model, 40);
        // Writes after: records move between regions.
        random_writes(&db, &mut rng, &mut model, 15);
        check_copies(&db, "rooms", &model);
        check_against_model(&db, &mut rng, &model, 40);
        // A subspace dropped: the rest still answer.
        if let Some(first) = db.subspaces_of("rooms").first() {
            db.drop_subspace("rooms", first.name()).unwrap();
        }
        random_writes(&db, &mut rng, &mut model, 3);
        check_copies(&db, "rooms", &model);
        check_against_model(&db, &mut rng, &model, 20);
        // Across a restart.
        let names: Vec<String> = db
            .subspaces_of("rooms")
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        drop(db);
        let db = Database::open_with(dir.path(), options()).unwrap();
        let reopened: Vec<String> = db
            .subspaces_of("rooms")
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        assert_eq!(reopened, names, "seed {seed}: subspaces after a restart");
        assert!(db
            .subspaces_of("rooms")
            .iter()
            .all(|t| t.subspace_of().unwrap().ready));
        check_copies(&db, "rooms", &model);
        check_against_model(&db, &mut rng, &model, 20);
    }
}

/// Reads of each shard of `table` so far.
fn reads_by_shard(db: &Database, table: &str) -> Vec<u64> {
    let mut reads: Vec<(u32, u64)> = db
        .shard_reads()
        .into_iter()
        .filter(|r| r.table == table)
        .map(|r| (r.shard, r.reads))
        .collect();
    reads.sort_unstable();
    reads.into_iter().map(|(_, n)| n).collect()
}

/// Table `rooms` (4 shards) in a database in `dir`, after 10 batches of random writes
/// seeded with `seed`, and the records it holds.
fn rooms_after_random_writes(
    dir: &std::path::Path,
    seed: u64,
) -> (Database, BTreeMap<Vec<u8>, Record>) {
    let db = Database::open_with(dir, options()).unwrap();
    db.create_table_with(
        "rooms",
        schema(),
        TableLayout {
            shards: 4,
            replicas: 1,
        },
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    random_writes(&db, &mut rng, &mut model, 10);
    (db, model)
}

#[test]
fn a_search_fixing_a_subspace_attribute_reads_only_its_regions() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = rooms_after_random_writes(dir.path(), 7);
    let name = db
        .add_subspace("rooms", &["city".into(), "price".into()], 16)
        .unwrap();
    let copy = db.table(&name).unwrap();
    assert_eq!(copy.layout().shards, 16, "4 parts of city times 4 of price");
    let table_before = reads_by_shard(&db, "rooms");
    let before = reads_by_shard(&db, &name);
    let predicate = Predicate::And(vec![
        Predicate::Eq("city".into(), Value::str("Porto")),
        Predicate::Range {
            attribute: "price".into(),
            lower: Bound::Included(Value::Int(5000)),
            upper: Bound::Unbounded,
        },
    ]);
    let expected = model.values().filter(|r| holds(&predicate, r)).count();
    assert_eq!(search(&db, "rooms", &predicate).len(), expected);
    let after = reads_by_shard(&db, &name);
    let read: Vec<usize> = (0..16).filter(|&s| after[s] > before[s]).collect();
    assert_eq!(
        read.len(),
        1,
        "one city and the top price part: one region read, got {read:?}"
    );
    assert_eq!(
        reads_by_shard(&db, "rooms"),
        table_before,
        "the table itself is not read"
    );
    // A condition on the key goes to the table.
    let by_key = Predicate::Eq("id".into(), Value::str("k0001"));
    let before = reads_by_shard(&db, &name);
    count(&db, "rooms", &by_key);
    assert_eq!(
        reads_by_shard(&db, &name),
        before,
        "a key condition reads the table"
    );
    // Five dimensions in 16 regions: 2 × 2 × 2 × 2 × 1 in the schema's order (the
    // model's `dimension_parts`), whatever order they are named in; not one region of
    // one part each. An equality on pets asks half of them, as the model routes.
    let backwards: Vec<String> = ATTRIBUTES.iter().rev().map(|a| a.to_string()).collect();
    let whole = db.add_subspace("rooms", &backwards, 16).unwrap();
    assert_eq!(db.table(&whole).unwrap().layout().shards, 16);
    let described = db
        .describe_subspaces("rooms")
        .into_iter()
        .find(|s| s.name == whole)
        .expect("the new subspace is described");
    assert_eq!(described.attributes, backwards);
    assert_eq!(
        described.parts,
        vec![1, 2, 2, 2, 2],
        "ts, pets, rating, price, city"
    );
    assert_eq!(described.regions, 16);
    let configuration = puffer_adapt::hyperspace::Configuration::new(
        vec![puffer_adapt::hyperspace::Subspace::new(0..5, 16).unwrap()],
        4,
        1,
    )
    .unwrap();
    let pets = puffer_adapt::hyperspace::SearchShape::equalities([3]);
    let route = puffer_adapt::hyperspace::route_search(&configuration, &pets).unwrap();
    assert_eq!(
        (
            route.subspace_index,
            route.regions_contacted,
            route.grid_regions
        ),
        (1, 8, 16)
    );
    let predicate = Predicate::Eq("pets".into(), Value::Bool(true));
    let (table_before, whole_before) = (reads_by_shard(&db, "rooms"), reads_by_shard(&db, &whole));
    let expected = model.values().filter(|r| holds(&predicate, r)).count();
    assert_eq!(search(&db, "rooms", &predicate).len(), expected);
    assert_eq!(reads_by_shard(&db, "rooms"), table_before, "not the table");
    let whole_after = reads_by_shard(&db, &whole);
    let read = (0..16)
        .filter(|&s| whole_after[s] > whole_before[s])
        .count();
    assert_eq!(read, 8, "the regions of one pets part");
}

/// Two subspaces that ask as few regions of as large a grid: the search goes to the one
/// the model routes to (the first in its sorted order), whichever was built first.
#[test]
fn a_tie_between_subspaces_goes_where_the_model_routes() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = rooms_after_random_writes(dir.path(), 11);
    // (rating) first, so that its name sorts before (city)'s.
    let by_rating = db.add_subspace("rooms", &["rating".into()], 16).unwrap();
    let by_city = db.add_subspace("rooms", &["city".into()], 16).unwrap();
    assert!(by_rating < by_city, "{by_rating} is named before {by_city}");
    let schema = schema();
    assert_eq!(
        (schema.id_of("city"), schema.id_of("rating")),
        (Some(0), Some(2)),
        "the model's ids are the schema's"
    );
    let configuration = puffer_adapt::hyperspace::Configuration::new(
        vec![
            puffer_adapt::hyperspace::Subspace::new([2], 16).unwrap(),
            puffer_adapt::hyperspace::Subspace::new([0], 16).unwrap(),
        ],
        4,
        1,
    )
    .unwrap();
    let shape = puffer_adapt::hyperspace::SearchShape::equalities([0, 2]);
    let route = puffer_adapt::hyperspace::route_search(&configuration, &shape).unwrap();
    let routed = &configuration.subspaces()[route.subspace_index - 1];
    assert_eq!(routed.attributes(), &[0], "the model routes to (city)");
    let record = model
        .values()
        .find(|r| r.values.contains_key("city") && r.values.contains_key("rating"))
        .expect("a record with a city and a rating")
        .clone();
    let predicate = Predicate::And(vec![
        Predicate::Eq("city".into(), record.values["city"].clone()),
        Predicate::Eq("rating".into(), record.values["rating"].clone()),
    ]);
    let (city_before, rating_before) = (
        reads_by_shard(&db, &by_city),
        reads_by_shard(&db, &by_rating),
    );
    let expected = model.values().filter(|r| holds(&predicate, r)).count();
    assert!(expected >= 1);
    assert_eq!(search(&db, "rooms", &predicate).len(), expected);
    assert_eq!(
        reads_by_shard(&db, &by_rating),
        rating_before,
        "(rating) is not read"
    );
    let city_after = reads_by_shard(&db, &by_city);
    let read = (0..city_after.len())
        .filter(|&s| city_after[s] > city_before[s])
        .count();
    assert_eq!(read, 1, "one region of (city) is read");
}

#[test]
fn readers_never_see_a_moving_record_twice_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open_with(dir.path(), options()).unwrap());
    db.create_table("rooms", schema()).unwrap();
    const RECORDS: u32 = 40;
    // Every record's city is Lisbon or Porto; writers move them between the two.
    let put = |key: u32, city: &str| {
        WriteOp::Put(
            Record::new(format!("k{key:04}"))
                .with("city", Value::str(city))
                .with("price", Value::Int(i64::from(key))),
        )
    };
    db.write_batch(vec![(
        "rooms".into(),
        (0..RECORDS).map(|k| put(k, "Lisbon")).collect(),
    )])
    .unwrap();
    let name = db.add_subspace("rooms", &["city".into()], 32).unwrap();
    // The two cities must leave some of the 32 regions out, or the table is read.
    let both = Predicate::In(
        "city".into(),
        vec![Value::str("Lisbon"), Value::str("Porto")],
    );
    let of = db.table(&name).unwrap().subspace_of().unwrap();
    let regions = of.regions_for(&both, "id").unwrap();
    assert!(regions.len() < 32, "Lisbon and Porto in {regions:?}");
    let stop = Arc::new(AtomicBool::new(false));
    // Two writers: the same keys are moved by both at once.
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(3 + w);
                let mut writes = 0;
                while !stop.load(Ordering::SeqCst) || writes < 200 {
                    let ops = (0..rng.gen_range(1..5))
                        .map(|_| {
                            let key = rng.gen_range(0..RECORDS);
                            put(key, if rng.gen_bool(0.5) { "Lisbon" } else { "Porto" })
                        })
                        .collect();
                    write(&db, ops);
                    writes += 1;
                }
                writes
            })
        })
        .collect();
    let before = reads_by_shard(&db, &name);
    for _ in 0..300 {
        let rows = search(&db, "rooms", &both);
        let keys: Vec<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
        let mut distinct = keys.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), keys.len(), "a record seen twice");
        assert_eq!(
            keys.len(),
            RECORDS as usize,
            "a record seen twice or missed"
        );
        assert_eq!(count(&db, "rooms", &both), u64::from(RECORDS));
    }
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        assert!(writer.join().unwrap() >= 200);
    }
    let model: BTreeMap<Vec<u8>, Record> = search(&db, "rooms", &Predicate::All)
        .into_iter()
        .map(|r| (r.key.clone(), r))
        .collect();
    assert_eq!(model.len(), RECORDS as usize);
    check_copies(&db, "rooms", &model);
    let after = reads_by_shard(&db, &name);
    assert!(
        after.iter().zip(&before).any(|(a, b)| a > b),
        "the searches went to the subspace"
    );
}

#[test]
fn a_subspace_built_during_writes_holds_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open_with(dir.path(), options()).unwrap());
    db.create_table_with(
        "rooms",
        schema(),
        TableLayout {
            shards: 2,
            replicas: 1,
        },
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut model = BTreeMap::new();
    for key in 0..2000u32 {
        model.insert(
            format!("k{key:04}").into_bytes(),
            random_record(&mut rng, key),
        );
    }
    let ops: Vec<WriteOp> = model.values().cloned().map(WriteOp::Put).collect();
    db.write_batch(vec![("rooms".into(), ops)]).unwrap();
    // A writer changes, adds and deletes records while the subspace is built; its
    // acknowledged writes are the model.
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(12);
            let mut model = model;
            for _ in 0..150 {
                let mut ops = Vec::new();
                for _ in 0..8 {
                    let key = rng.gen_range(0..2500u32);
                    if rng.gen_bool(0.2) {
                        ops.push(WriteOp::Delete(format!("k{key:04}").into_bytes()));
                    } else {
                        ops.push(WriteOp::Put(random_record(&mut rng, key)));
                    }
                }
                write(&db, ops.clone());
                for op in ops {
                    match op {
                        WriteOp::Put(record) => {
                            model.insert(record.key.clone(), record);
                        }
                        WriteOp::Delete(key) => {
                            model.remove(&key);
                        }
                        _ => unreachable!(),
                    }
                }
            }
            model
        })
    };
    db.add_subspace("rooms", &["price".into(), "city".into()], 25)
        .unwrap();
    let model = writer.join().unwrap();
    check_copies(&db, "rooms", &model);
    let mut rng = StdRng::seed_from_u64(13);
    check_against_model(&db, &mut rng, &model, 30);
}

#[test]
fn an_unfinished_subspace_is_dropped_on_open_and_bad_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.create_table("rooms", schema()).unwrap();
        let name = db.add_subspace("rooms", &["city".into()], 8).unwrap();
        // As a build cut short by a crash leaves it: listed, not ready.
        let copy = db.table(&name).unwrap();
        let mut of = (*copy.subspace_of().unwrap()).clone();
        of.ready = false;
        db.catalog().set_subspace(&name, copy.uid(), &of).unwrap();
        let refused = |result: puffer_query::Result<String>, says: &str| {
            let error = result.unwrap_err().to_string();
            assert!(error.contains(says), "{error:?} should say {says:?}");
        };
        refused(db.add_subspace("rooms", &[], 8), "1 to 8 attributes");
        refused(
            db.add_subspace("rooms", &["nope".into()], 8),
            "no attribute",
        );
        refused(db.add_subspace("rooms", &["id".into()], 8), "is the key");
        refused(
            db.add_subspace("rooms", &["city".into(), "city".into()], 8),
            "twice",
        );
        refused(db.add_subspace("rooms", &["price".into()], 0), "1 to 256");
        refused(db.add_subspace("rooms", &["price".into()], 257), "1 to 256");
        refused(db.add_subspace("rooms", &["city".into()], 8), "already");
        refused(db.add_subspace("nope", &["city".into()], 8), "nope");
        let write = db.write_batch(vec![(name.clone(), vec![WriteOp::Delete(b"k".to_vec())])]);
        assert!(write.unwrap_err().to_string().contains("is a subspace of"));
        let read = db.read(
            &name,
            &ReadRequest::Count {
                predicate: Predicate::All,
                read: ReadOptions::default(),
            },
            Wait::Allowed,
        );
        assert!(read.unwrap_err().to_string().contains("is a subspace of"));
        let long_key = vec![b'k'; puffer_store::schema::MAX_KEY_BYTES];
        let write = db.write_batch(vec![(
            "rooms".into(),
            vec![WriteOp::Put(Record::new(long_key))],
        )]);
        assert!(write.unwrap_err().to_string().contains("keys of at most"));
    }
    let db = Database::open_with(dir.path(), options()).unwrap();
    assert!(db.subspaces_of("rooms").is_empty());
    assert!(db.catalog().table("rooms__ss1").unwrap().is_none());
    assert!(!dir.path().join("tables").join("rooms__ss1").exists());
}

/// `set_subspaces` gives the table exactly the configuration asked, from any other,
/// up to the cap of subspaces per table (dropping first what is not wanted where
/// building first would pass it), the copies agreeing with the model throughout.
#[test]
fn set_subspaces_reaches_any_configuration_within_the_cap() {
    let mut rng = StdRng::seed_from_u64(7);
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).unwrap();
    let layout = TableLayout {
        shards: 2,
        replicas: 1,
    };
    db.create_table_with("rooms", schema(), layout).unwrap();
    let mut model = BTreeMap::new();
    random_writes(&db, &mut rng, &mut model, 10);
    let cap = puffer_node::subspace::MAX_SUBSPACES_PER_TABLE;
    // Every set of one or two attributes: two full configurations sharing one.
    let mut sets: Vec<Vec<String>> = Vec::new();
    for (i, a) in ATTRIBUTES.iter().enumerate() {
        sets.push(vec![a.to_string()]);
        for b in &ATTRIBUTES[i + 1..] {
            sets.push(vec![a.to_string(), b.to_string()]);
        }
    }
    assert_eq!(sets.len(), 2 * cap - 1);
    for step in 0..8 {
        // The two full configurations in turn, random ones between.
        let wanted: Vec<(Vec<String>, u32)> = if step % 2 == 0 {
            let start = if step % 4 == 0 { 0 } else { sets.len() - cap };
            sets[start..start + cap]
                .iter()
                .map(|s| (s.clone(), 4))
                .collect()
        } else {
            let mut shuffled = sets.clone();
            rand::seq::SliceRandom::shuffle(&mut shuffled[..], &mut rng);
            shuffled.truncate(rng.gen_range(0..=cap));
            shuffled.into_iter().map(|s| (s, 4)).collect()
        };
        db.set_subspaces("rooms", &wanted).unwrap();
        let now: std::collections::BTreeSet<Vec<String>> = db
            .describe_subspaces("rooms")
            .into_iter()
            .inspect(|s| assert!(s.ready, "step {step}: {s:?}"))
            .map(|s| s.attributes)
            .collect();
        let asked: std::collections::BTreeSet<Vec<String>> =
            wanted.iter().map(|(a, _)| a.clone()).collect();
        assert_eq!(now, asked, "step {step}");
        random_writes(&db, &mut rng, &mut model, 2);
        check_copies(&db, "rooms", &model);
    }
    // More than the cap is refused, and leaves a configuration the table can have.
    let too_many: Vec<(Vec<String>, u32)> = sets[..=cap].iter().map(|s| (s.clone(), 4)).collect();
    assert!(db.set_subspaces("rooms", &too_many).is_err());
    assert!(db.describe_subspaces("rooms").len() <= cap);
}
