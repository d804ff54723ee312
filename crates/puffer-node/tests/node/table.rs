//! Sharded, replicated tables against a `BTreeMap` model: random puts, deletes and
//! schema growth, with gets, searches (with and without limits) and counts checked after
//! every step, on every replica, and across a reopen.

use std::collections::BTreeMap;

use puffer_node::serving::NodeConfig;
use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout, Wait};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn options() -> DatabaseOptions {
    DatabaseOptions {
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        ..DatabaseOptions::default()
    }
}

fn record(key: &str, city: &str, price: i64) -> Record {
    let mut record = Record::new(key.as_bytes().to_vec());
    record
        .values
        .insert("city".into(), Value::String(city.as_bytes().to_vec()));
    record.values.insert("price".into(), Value::Int(price));
    record
}

/// Key `id`, a string `city` and an int `price`.
fn city_price_schema() -> Schema {
    Schema::new(
        "id",
        vec![
            Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            },
            Attribute {
                name: "price".into(),
                attr_type: AttrType::Int,
            },
        ],
    )
    .unwrap()
}

/// The model's keys whose `city` is `city`, ascending: what an equality search answers.
fn keys_in_city(model: &BTreeMap<Vec<u8>, Record>, city: &str) -> Vec<Vec<u8>> {
    let wanted = Value::String(city.as_bytes().to_vec());
    model
        .values()
        .filter(|r| r.values.get("city") == Some(&wanted))
        .map(|r| r.key.clone())
        .collect()
}

/// A search for the records of `city` (all of them), and its answer from the model.
fn city_query(
    model: &BTreeMap<Vec<u8>, Record>,
    city: &str,
    read: ReadOptions,
) -> (Query, Vec<Vec<u8>>) {
    let query = Query {
        predicate: Predicate::Eq("city".into(), Value::String(city.as_bytes().to_vec())),
        projection: None,
        limit: None,
        read,
    };
    (query, keys_in_city(model, city))
}

fn keys_of(rows: &[Record]) -> Vec<Vec<u8>> {
    rows.iter().map(|r| r.key.clone()).collect()
}

#[test]
fn sharded_replicated_tables_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let layout = TableLayout {
        shards: 3,
        replicas: 2,
    };
    let schema = city_price_schema();
    let mut model: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
    let cities = ["oslo", "rome", "lima", "kyiv"];
    let mut rng = StdRng::seed_from_u64(7);
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.create_table_with("t", schema, layout).unwrap();
        let table = db.table("t").unwrap();
        assert_eq!(table.held_groups().len(), 3);
        assert!(table.held_groups().iter().all(|g| g.replicas().len() == 2));
        for step in 0..60 {
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(1..20) {
                let key = format!("k{:03}", rng.gen_range(0..200));
                if rng.gen_bool(0.2) {
                    model.remove(key.as_bytes());
                    ops.push(WriteOp::Delete(key.into_bytes()));
                } else {
                    let r = record(&key, cities[rng.gen_range(0..4)], rng.gen_range(0..100));
                    model.insert(r.key.clone(), r.clone());
                    ops.push(WriteOp::Put(r));
                }
            }
            table.write(ops).unwrap();
            if step % 20 == 19 {
                table.seal().unwrap();
            }
            let city = cities[step % 4];
            let (query, expected) = city_query(&model, city, ReadOptions::default());
            let predicate = query.predicate.clone();
            let found = table.search(&query).unwrap();
            assert_eq!(keys_of(&found.rows), expected, "step {step}");
            assert!(!found.truncated);
            let (count, _) = table.count(&predicate, ReadOptions::default()).unwrap();
            assert_eq!(count, expected.len() as u64);
            // A limit returns that many matches, in key order, flagged as cut.
            let limited = table
                .search(&Query {
                    limit: Some(3),
                    ..query
                })
                .unwrap();
            assert_eq!(limited.rows.len(), expected.len().min(3));
            assert!(limited.rows.iter().all(|r| expected.contains(&r.key)));
            assert_eq!(limited.truncated, expected.len() > 3);
            // Every replica of every shard holds exactly its shard's records.
            for group in table.held_groups() {
                let mut per_replica = Vec::new();
                for slot in group.replicas() {
                    let all = Query {
                        predicate: Predicate::All,
                        projection: Some(Vec::new()),
                        limit: None,
                        read: ReadOptions::default(),
                    };
                    per_replica.push(keys_of(&slot.pool().replica().search(&all).unwrap().rows));
                }
                let shard_keys: Vec<Vec<u8>> = model
                    .keys()
                    .filter(|k| puffer_node::table::shard_of(k, 3) == group.shard)
                    .cloned()
                    .collect();
                assert!(
                    per_replica.iter().all(|keys| *keys == shard_keys),
                    "step {step} shard {}",
                    group.shard
                );
            }
            for key in ["k000", "k050", "k199"] {
                let (got, _) = table.get(key.as_bytes(), ReadOptions::default()).unwrap();
                assert_eq!(
                    got.as_ref(),
                    model.get(key.as_bytes()),
                    "get {key} at step {step}"
                );
            }
        }
        // A schema change reaches every shard.
        let mut grown = record("k500", "oslo", 1);
        grown.values.insert("stars".into(), Value::Int(4));
        table
            .write(vec![
                WriteOp::AddAttribute(Attribute {
                    name: "stars".into(),
                    attr_type: AttrType::Int,
                }),
                WriteOp::Put(grown.clone()),
            ])
            .unwrap();
        model.insert(grown.key.clone(), grown);
        for group in table.held_groups() {
            for slot in group.replicas() {
                assert!(slot
                    .pool()
                    .replica()
                    .schema()
                    .attributes
                    .iter()
                    .any(|a| a.name == "stars"));
            }
        }
    }
    // Reopened: same layout, same records.
    let db = Database::open_with(dir.path(), options()).unwrap();
    let table = db.table("t").unwrap();
    assert_eq!(table.layout(), layout);
    let all = Query {
        predicate: Predicate::All,
        projection: None,
        limit: None,
        read: ReadOptions::default(),
    };
    let rows = table.search(&all).unwrap().rows;
    assert_eq!(rows, model.values().cloned().collect::<Vec<_>>());
    assert_eq!(db.node().status().replicas.len(), 6);
}

#[test]
fn bad_layouts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).unwrap();
    let schema = Schema::new("id", Vec::new()).unwrap();
    for layout in [
        TableLayout {
            shards: 0,
            replicas: 1,
        },
        TableLayout {
            shards: 1,
            replicas: 0,
        },
        TableLayout {
            shards: 1000,
            replicas: 1,
        },
    ] {
        let error = db
            .create_table_with("t", schema.clone(), layout)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("shards") || error.contains("replicas"),
            "{error}"
        );
    }
    assert!(db.table_names().is_empty());
}

#[test]
fn reads_that_must_not_wait_answer_like_reads_that_may() {
    let dir = tempfile::tempdir().unwrap();
    let schema = city_price_schema();
    let db = Database::open_with(dir.path(), options()).unwrap();
    let one_shard = TableLayout {
        shards: 1,
        replicas: 2,
    };
    db.create_table_with("t", schema.clone(), one_shard)
        .unwrap();
    db.create_table_with(
        "sharded",
        schema,
        TableLayout {
            shards: 3,
            replicas: 1,
        },
    )
    .unwrap();
    let table = db.table("t").unwrap();
    let sharded = db.table("sharded").unwrap();
    let cities = ["oslo", "rome", "lima"];
    let mut model: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(11);
    for step in 0..30 {
        let mut ops = Vec::new();
        for _ in 0..10 {
            let key = format!("k{:03}", rng.gen_range(0..100));
            let r = record(&key, cities[rng.gen_range(0..3)], rng.gen_range(0..100));
            model.insert(r.key.clone(), r.clone());
            ops.push(WriteOp::Put(r));
        }
        table.write(ops.clone()).unwrap();
        sharded.write(ops).unwrap();
        if step % 10 == 9 {
            table.seal().unwrap();
        }
        let read = ReadOptions::default();
        for key in ["k000", "k042", "k099"] {
            // Nothing else runs: a replica always has a free slot.
            let (got, _) = get_now(&table, key.as_bytes(), read).unwrap().unwrap();
            assert_eq!(got.as_ref(), model.get(key.as_bytes()), "get {key}");
            let (got, _) = get_now(&sharded, key.as_bytes(), read).unwrap().unwrap();
            assert_eq!(got.as_ref(), model.get(key.as_bytes()), "sharded get {key}");
        }
        let city = cities[step % 3];
        let (query, expected) = city_query(&model, city, read);
        let predicate = query.predicate.clone();
        let found = search_now(&table, &query).unwrap().unwrap();
        assert_eq!(keys_of(&found.rows), expected, "step {step}");
        let (count, _) = count_now(&table, &predicate, read).unwrap().unwrap();
        assert_eq!(count, expected.len() as u64);
        // A search over several shards needs their replicas at once: never run here.
        assert!(search_now(&sharded, &query).unwrap().is_none());
        assert!(count_now(&sharded, &predicate, read).unwrap().is_none());
    }
    // Every replica busy (one worker each): the reads give up instead of waiting.
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
    let mut blockers = Vec::new();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    for slot in table.held_groups()[0].replicas() {
        let (gate, started_tx) = (gate.clone(), started_tx.clone());
        blockers.push(
            slot.pool()
                .submit(move |_| {
                    started_tx.send(()).unwrap();
                    gate.lock().unwrap().recv().unwrap();
                })
                .unwrap(),
        );
    }
    for _ in 0..blockers.len() {
        started.recv().unwrap();
    }
    let read = ReadOptions::default();
    assert!(get_now(&table, b"k000", read).unwrap().is_none());
    let all = Query {
        predicate: Predicate::All,
        projection: None,
        limit: None,
        read,
    };
    assert!(search_now(&table, &all).unwrap().is_none());
    for _ in 0..blockers.len() {
        release.send(()).unwrap();
    }
    for blocker in blockers {
        blocker.recv().unwrap();
    }
    // Free again: the read that may wait and the one that may not agree with the model.
    let rows = table.search(&all).unwrap().rows;
    assert_eq!(rows, model.values().cloned().collect::<Vec<_>>());
    // A worker frees its slot just after it answers: retry until it has.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let now = loop {
        match search_now(&table, &all).unwrap() {
            Some(found) => break found,
            None if std::time::Instant::now() < deadline => std::thread::yield_now(),
            None => panic!("the replicas stayed busy with nothing running"),
        }
    };
    assert_eq!(now.rows, rows);
}

// The read path for a thread that must not wait, as the server's event loop uses it.
fn get_now(
    table: &puffer_node::Table,
    key: &[u8],
    read: ReadOptions,
) -> puffer_query::Result<Option<(Option<Record>, puffer_store::SnapshotInfo)>> {
    let request = ReadRequest::Get {
        key: key.to_vec(),
        read,
    };
    Ok(table
        .read(&request, Wait::Never)?
        .map(|answer| match answer {
            ReadAnswer::Record { record, snapshot } => (record, snapshot),
            other => panic!("a get answered {other:?}"),
        }))
}

fn search_now(
    table: &puffer_node::Table,
    query: &Query,
) -> puffer_query::Result<Option<puffer_store::SearchResult>> {
    let request = ReadRequest::Search {
        query: query.clone(),
    };
    Ok(table
        .read(&request, Wait::Never)?
        .map(|answer| match answer {
            ReadAnswer::Rows(rows) => rows,
            other => panic!("a search answered {other:?}"),
        }))
}

fn count_now(
    table: &puffer_node::Table,
    predicate: &Predicate,
    read: ReadOptions,
) -> puffer_query::Result<Option<(u64, puffer_store::SnapshotInfo)>> {
    let request = ReadRequest::Count {
        predicate: predicate.clone(),
        read,
    };
    Ok(table
        .read(&request, Wait::Never)?
        .map(|answer| match answer {
            ReadAnswer::Count { count, snapshot } => (count, snapshot),
            other => panic!("a count answered {other:?}"),
        }))
}

/// Access counts (a cluster coordinator's popularity input) against a model: a get
/// counts one read on the key's shard, a search or count one on every shard, a write
/// none; every shard of the table is listed, with the table's uid.
#[test]
fn shards_count_the_reads_they_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).unwrap();
    let layout = TableLayout {
        shards: 4,
        replicas: 2,
    };
    db.create_table_with("t", city_price_schema(), layout)
        .unwrap();
    let table = db.table("t").unwrap();
    let ops = (0..40)
        .map(|i| WriteOp::Put(record(&format!("k{i:02}"), "Boston", i)))
        .collect();
    table.write(ops).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let mut expected = [0u64; 4];
    for _ in 0..200 {
        match rng.gen_range(0..3) {
            0 => {
                let key = format!("k{:02}", rng.gen_range(0..50));
                table.get(key.as_bytes(), ReadOptions::default()).unwrap();
                expected[puffer_node::table::shard_of(key.as_bytes(), 4) as usize] += 1;
            }
            1 => {
                let (query, _) = city_query(&BTreeMap::new(), "Boston", ReadOptions::default());
                table.search(&query).unwrap();
                expected.iter_mut().for_each(|n| *n += 1);
            }
            _ => {
                let predicate = Predicate::Eq("city".into(), Value::String(b"Boston".to_vec()));
                table.count(&predicate, ReadOptions::default()).unwrap();
                expected.iter_mut().for_each(|n| *n += 1);
            }
        }
        if rng.gen_bool(0.1) {
            table
                .write(vec![WriteOp::Put(record("k99", "Dublin", 1))])
                .unwrap();
        }
    }
    let mut counts = db.shard_reads();
    counts.sort_by_key(|c| c.shard);
    assert_eq!(counts.len(), 4, "{counts:?}");
    for (count, expected) in counts.iter().zip(expected) {
        assert_eq!((count.table.as_str(), count.uid), ("t", table.uid()));
        assert_eq!(count.reads, expected, "shard {}: {counts:?}", count.shard);
    }
    let since: std::collections::BTreeSet<_> = counts.iter().map(|c| c.counting_since.1).collect();
    assert_eq!(since.len(), 4, "each group counts under its own number");
    // Footprints are the segments' (compacted records); compaction makes them.
    table.compact_all().unwrap();
    let compacted = db.shard_reads();
    assert!(
        compacted.iter().all(|c| c.footprint_bytes > 0),
        "{compacted:?}"
    );
}
