//! One order for a database, checked against a versioned `BTreeMap` model: random SCUs
//! over several tables (each spread over shards with replicas), seals, compactions and
//! reopenings, and reads at random freshness bounds and minimum snapshots, every answer
//! compared with the model at the snapshot it reports. Then LazyBase's consistency
//! experiment in one process: update pairs written as one SCU over two shards, readers
//! that must never see half of a pair nor a snapshot older than one they saw.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use puffer_node::serving::NodeConfig;
use puffer_node::table::shard_of;
use puffer_node::{Answer, Database, DatabaseOptions, TableLayout};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, ShardOptions, StoreError,
    Value, WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn options(background: bool) -> DatabaseOptions {
    DatabaseOptions {
        shard: ShardOptions {
            background,
            // Small log tables, so that freezes and seals happen inside the test.
            log_table_max_records: 40,
            ..ShardOptions::default()
        },
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        ..DatabaseOptions::default()
    }
}

fn schema() -> Schema {
    Schema::new(
        "id",
        vec![
            Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            },
            Attribute {
                name: "n".into(),
                attr_type: AttrType::Int,
            },
        ],
    )
    .unwrap()
}

fn record(key: &str, city: &str, n: i64) -> Record {
    Record::new(key.as_bytes().to_vec())
        .with("city", Value::String(city.as_bytes().to_vec()))
        .with("n", Value::Int(n))
}

/// Every version of every key of one table: key -> [(SCU, record or deleted)].
#[derive(Default)]
struct VersionedTable {
    versions: BTreeMap<Vec<u8>, Vec<(u64, Option<Record>)>>,
}

impl VersionedTable {
    fn write(&mut self, seq: u64, key: Vec<u8>, record: Option<Record>) {
        self.versions.entry(key).or_default().push((seq, record));
    }

    /// The table as it was after SCU `at`.
    fn at(&self, at: u64) -> BTreeMap<Vec<u8>, Record> {
        self.versions
            .iter()
            .filter_map(|(key, versions)| {
                let (_, record) = versions.iter().rev().find(|(seq, _)| *seq <= at)?;
                Some((key.clone(), record.clone()?))
            })
            .collect()
    }
}

const CITIES: [&str; 4] = ["oslo", "rome", "lima", "kyiv"];
const TABLES: [(&str, TableLayout); 2] = [
    (
        "t",
        TableLayout {
            shards: 4,
            replicas: 2,
        },
    ),
    (
        "u",
        TableLayout {
            shards: 1,
            replicas: 3,
        },
    ),
];

fn random_read(rng: &mut StdRng, last_snapshot: u64) -> ReadOptions {
    let freshness = match rng.gen_range(0..4) {
        0 => None,
        1 => Some(Duration::ZERO),
        2 => Some(Duration::from_millis(rng.gen_range(0..50))),
        _ => Some(Duration::from_secs(3600)),
    };
    ReadOptions {
        freshness,
        min_snapshot: if rng.gen_bool(0.5) { last_snapshot } else { 0 },
        at: None,
    }
}

/// Checks a reported snapshot: at least the minimum asked, at most the newest, and
/// holding every SCU acknowledged longer ago than the freshness bound.
fn check_snapshot(
    snapshot: u64,
    read: &ReadOptions,
    started: Instant,
    acks: &[(u64, Instant)],
    published: u64,
    context: &str,
) {
    assert!(
        snapshot >= read.min_snapshot,
        "{context}: {snapshot} < min {}",
        read.min_snapshot
    );
    assert!(
        snapshot <= published,
        "{context}: {snapshot} > newest {published}"
    );
    let bound = read.freshness.unwrap_or(Duration::ZERO);
    if let Some(due) = acks.iter().rev().find(|(_, acked)| {
        started
            .checked_duration_since(*acked)
            .is_some_and(|d| d >= bound)
    }) {
        assert!(
            snapshot >= due.0,
            "{context}: snapshot {snapshot} misses SCU {} acknowledged over {bound:?} ago",
            due.0
        );
    }
}

#[test]
fn scus_over_tables_shards_and_replicas_match_a_versioned_model() {
    for seed in 0..3u64 {
        run_model(seed);
    }
}

fn run_model(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut models: BTreeMap<&str, VersionedTable> = BTreeMap::new();
    let mut acks: Vec<(u64, Instant)> = Vec::new();
    let mut last_snapshot = 0;
    let background = seed.is_multiple_of(2);
    let mut db = Database::open_with(dir.path(), options(background)).unwrap();
    for (name, layout) in TABLES {
        db.create_table_with(name, schema(), layout).unwrap();
        models.insert(name, VersionedTable::default());
    }
    for step in 0..160 {
        // One SCU over one or both tables.
        let mut parts = Vec::new();
        let mut changes = Vec::new();
        for (name, _) in TABLES {
            if rng.gen_bool(0.35) && !(parts.is_empty() && name == "u") {
                continue;
            }
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(1..12) {
                let key = format!("k{:03}", rng.gen_range(0..120));
                if rng.gen_bool(0.2) {
                    changes.push((name, key.clone().into_bytes(), None));
                    ops.push(WriteOp::Delete(key.into_bytes()));
                } else {
                    let r = record(&key, CITIES[rng.gen_range(0..4)], rng.gen_range(-50..50));
                    changes.push((name, r.key.clone(), Some(r.clone())));
                    ops.push(WriteOp::Put(r));
                }
            }
            parts.push((name.to_string(), ops));
        }
        if parts.is_empty() {
            continue;
        }
        let seq = db.write_batch(parts).unwrap();
        let previous = acks.last().map_or(0, |(s, _)| *s);
        assert!(seq > previous, "SCU numbers grow: {seq} after {previous}");
        acks.push((seq, Instant::now()));
        for (name, key, record) in changes {
            models.get_mut(name).unwrap().write(seq, key, record);
        }
        match rng.gen_range(0..20) {
            0 => db.table("t").unwrap().seal().unwrap(),
            1 => db.table("u").unwrap().compact_all().unwrap(),
            2 if step % 40 == 39 => {
                drop(db);
                db = Database::open_with(dir.path(), options(background)).unwrap();
                assert_eq!(db.published(), seq, "reopened at the last acknowledged SCU");
            }
            _ => {}
        }
        for _ in 0..3 {
            let name = TABLES[rng.gen_range(0..2)].0;
            let table = db.table(name).unwrap();
            let read = random_read(&mut rng, last_snapshot);
            let started = Instant::now();
            let context = format!("seed {seed} step {step} table {name} read {read:?}");
            let snapshot = match rng.gen_range(0..3) {
                0 => {
                    let key = format!("k{:03}", rng.gen_range(0..120));
                    let (found, info) = table.get(key.as_bytes(), read).unwrap();
                    let expected = models[name].at(info.snapshot).remove(key.as_bytes());
                    assert_eq!(found, expected, "{context}: get {key} at {}", info.snapshot);
                    info.snapshot
                }
                1 => {
                    let city = CITIES[rng.gen_range(0..4)];
                    let query = Query {
                        predicate: Predicate::Eq("city".into(), Value::str(city)),
                        projection: None,
                        limit: None,
                        read,
                    };
                    let found = table.search(&query).unwrap();
                    let info = found.snapshot;
                    let expected: Vec<Record> = models[name]
                        .at(info.snapshot)
                        .into_values()
                        .filter(|r| r.values["city"] == Value::str(city))
                        .collect();
                    assert_eq!(
                        found.rows, expected,
                        "{context}: city {city} at {}",
                        info.snapshot
                    );
                    info.snapshot
                }
                _ => {
                    let predicate = Predicate::Range {
                        attribute: "n".into(),
                        lower: std::ops::Bound::Included(Value::Int(0)),
                        upper: std::ops::Bound::Unbounded,
                    };
                    let (count, info) = table.count(&predicate, read).unwrap();
                    let expected = models[name]
                        .at(info.snapshot)
                        .values()
                        .filter(|r| matches!(r.values["n"], Value::Int(n) if n >= 0))
                        .count() as u64;
                    assert_eq!(count, expected, "{context}: count at {}", info.snapshot);
                    info.snapshot
                }
            };
            check_snapshot(snapshot, &read, started, &acks, db.published(), &context);
            last_snapshot = last_snapshot.max(snapshot);
        }
    }
}

#[test]
fn a_batch_over_tables_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options(false)).unwrap();
    for (name, layout) in TABLES {
        db.create_table_with(name, schema(), layout).unwrap();
    }
    let before = db.published();
    // The second table's record is invalid (a string where an int goes): nothing of
    // the batch may be applied, on either table.
    let bad = Record::new("k1").with("n", Value::str("not a number"));
    let error = db
        .write_batch(vec![
            ("t".into(), vec![WriteOp::Put(record("k1", "oslo", 1))]),
            ("u".into(), vec![WriteOp::Put(bad)]),
        ])
        .unwrap_err();
    assert_eq!(error.code(), "invalid_record", "{error}");
    assert_eq!(db.published(), before, "a refused batch takes no number");
    for (name, _) in TABLES {
        let (found, _) = db
            .table(name)
            .unwrap()
            .get(b"k1", ReadOptions::default())
            .unwrap();
        assert_eq!(found, None, "table {name}");
    }
    let unknown = db
        .write_batch(vec![
            ("t".into(), vec![WriteOp::Put(record("k1", "oslo", 1))]),
            ("nope".into(), vec![WriteOp::Delete(b"k1".to_vec())]),
        ])
        .unwrap_err();
    assert_eq!(unknown.code(), "unknown_table", "{unknown}");
    let empty = db.write_batch(vec![("t".into(), vec![])]).unwrap_err();
    assert_eq!(empty.code(), "invalid_request", "{empty}");
    assert_eq!(db.published(), before);
}

#[test]
fn tables_from_before_the_database_log_are_converted_whole() {
    // A table written by a shard with its own log (format 1), as older versions left
    // it, opens with every record and then takes SCUs from the database's log.
    let dir = tempfile::tempdir().unwrap();
    let table_dir = dir.path().join("tables").join("old");
    std::fs::create_dir_all(&table_dir).unwrap();
    std::fs::write(
        table_dir.join("TABLE.json"),
        br#"{"format":1,"shards":2,"replicas":1}"#,
    )
    .unwrap();
    let mut expected = BTreeMap::new();
    for s in 0..2u32 {
        let shard = puffer_store::Shard::open(
            table_dir.join(format!("shard-{s}-replica-0")),
            schema(),
            ShardOptions::default(),
        )
        .unwrap();
        for i in 0..30 {
            let key = format!("old{i:02}");
            if shard_of(key.as_bytes(), 2) == s {
                let r = record(&key, "lima", i);
                shard.write(vec![WriteOp::Put(r.clone())]).unwrap();
                expected.insert(r.key.clone(), r);
            }
        }
        // Left in the shard's own log only (no compaction).
    }
    let db = Database::open_with(dir.path(), options(true)).unwrap();
    let table = db.table("old").unwrap();
    let all = Query {
        predicate: Predicate::Eq("city".into(), Value::str("lima")),
        projection: None,
        limit: None,
        read: ReadOptions::default(),
    };
    let found = table.search(&all).unwrap();
    assert_eq!(found.rows, expected.values().cloned().collect::<Vec<_>>());
    let seq = table
        .write(vec![WriteOp::Delete(b"old00".to_vec())])
        .unwrap();
    assert!(
        seq > 15,
        "numbering continues above the old checkpoints: {seq}"
    );
    drop(table);
    drop(db);
    let db = Database::open_with(dir.path(), options(true)).unwrap();
    let found = db.table("old").unwrap().search(&all).unwrap();
    expected.remove(b"old00".as_slice());
    assert_eq!(found.rows, expected.values().cloned().collect::<Vec<_>>());
}

/// LazyBase's consistency experiment, in one process: rows A and B in different shards
/// of a replicated table; a writer sets (A, B) = (i, -i) in one SCU; readers read both
/// in one query and must see A + B = 0, and never a smaller snapshot or value than
/// they saw before.
#[test]
fn update_pairs_are_never_seen_in_half_nor_out_of_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options(true)).unwrap();
    let schema = Schema::new(
        "id",
        vec![Attribute {
            name: "v".into(),
            attr_type: AttrType::Int,
        }],
    )
    .unwrap();
    db.create_table_with(
        "pairs",
        schema,
        TableLayout {
            shards: 4,
            replicas: 2,
        },
    )
    .unwrap();
    let (a, b) = ("a", "b");
    assert_ne!(shard_of(a.as_bytes(), 4), shard_of(b.as_bytes(), 4));
    let db = Arc::new(db);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, stop, written) = (db.clone(), stop.clone(), written.clone());
        std::thread::spawn(move || {
            let mut i = 0i64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let pair = vec![
                    WriteOp::Put(Record::new(a).with("v", Value::Int(i))),
                    WriteOp::Put(Record::new(b).with("v", Value::Int(-i))),
                ];
                // Refused while sealing and compaction catch up: the store says to
                // retry later, as any writer does; the pair is then written whole.
                match db.table("pairs").unwrap().write(pair) {
                    Ok(_) => written.store(i as u64, Ordering::SeqCst),
                    Err(puffer_query::QueryError::Store(StoreError::Overloaded(_))) => {
                        i -= 1;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(error) => panic!("writing pair {i}: {error}"),
                }
            }
        })
    };
    let violations = Arc::new(Mutex::new(Vec::<String>::new()));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|reader| {
            let (db, stop, violations, reads) =
                (db.clone(), stop.clone(), violations.clone(), reads.clone());
            std::thread::spawn(move || {
                let (mut last_snapshot, mut last_value) = (0u64, 0i64);
                while !stop.load(Ordering::SeqCst) {
                    let answer = db
                        .execute_sql("SELECT id, v FROM pairs WHERE id IN ('a', 'b')")
                        .unwrap();
                    let Answer::Rows { rows, snapshot, .. } = answer else {
                        panic!("rows expected");
                    };
                    let value = |key: &str| {
                        rows.iter()
                            .find(|r| r.key == key.as_bytes())
                            .map(|r| match r.values["v"] {
                                Value::Int(v) => v,
                                ref other => panic!("{other:?}"),
                            })
                    };
                    let (va, vb) = (value("a"), value("b"));
                    let mut v = violations.lock().unwrap();
                    if va.unwrap_or(0) + vb.unwrap_or(0) != 0 {
                        v.push(format!("reader {reader}: a={va:?} b={vb:?} at {snapshot:?}"));
                    }
                    if snapshot.snapshot < last_snapshot || va.unwrap_or(0) < last_value {
                        v.push(format!(
                            "reader {reader}: went back from {last_snapshot}/{last_value} to {}/{va:?}",
                            snapshot.snapshot
                        ));
                    }
                    last_snapshot = snapshot.snapshot;
                    last_value = va.unwrap_or(0);
                    drop(v);
                    reads.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let started = Instant::now();
    while reads.load(Ordering::SeqCst) < 3000 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
    let violations = violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{} violations in {} reads, e.g. {:?}",
        violations.len(),
        reads.load(Ordering::SeqCst),
        &violations[..violations.len().min(5)]
    );
    assert!(reads.load(Ordering::SeqCst) >= 3000, "too few reads");
    assert!(written.load(Ordering::SeqCst) > 10, "too few pairs written");
}
