//! Time-partitioned tables against a model: records go to the chunk of their
//! timestamp (a key unique within a chunk), a get answers the newest chunk's record, a
//! delete removes the key everywhere; searches and counts with time conditions read
//! only the chunks they overlap (seen in the chunks' access counts) and answer as the
//! model does, before and after a restart; SQL makes such tables; bad writes are
//! refused whole.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use puffer_node::serving::NodeConfig;
use puffer_node::{Answer, Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout, Wait};
use puffer_query::{Granularity, TimePartition};
use puffer_store::timestamp::parse_timestamp_micros;
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const HOUR: i64 = 3_600_000_000;
const CITIES: [&str; 3] = ["Lisbon", "Porto", "Faro"];

fn options() -> DatabaseOptions {
    DatabaseOptions {
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
                name: "ts".into(),
                attr_type: AttrType::Timestamp,
            },
            Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            },
        ],
    )
    .unwrap()
}

fn record(key: &str, ts: i64, city: &str) -> Record {
    let mut record = Record::new(key.as_bytes().to_vec());
    record.values.insert("ts".into(), Value::Timestamp(ts));
    record
        .values
        .insert("city".into(), Value::String(city.as_bytes().to_vec()));
    record
}

/// The model: per (hour chunk start, key), the record.
type Model = BTreeMap<(i64, String), Record>;

fn ts_of(record: &Record) -> i64 {
    match record.values["ts"] {
        Value::Timestamp(t) => t,
        _ => unreachable!("every model record has a timestamp"),
    }
}

fn city_of(record: &Record) -> &[u8] {
    match &record.values["city"] {
        Value::String(s) => s,
        _ => unreachable!("every model record has a city"),
    }
}

/// The test's conditions: a time range [lo, hi) and maybe a city.
fn condition(lo: i64, hi: i64, city: Option<&str>) -> Predicate {
    let range = Predicate::Range {
        attribute: "ts".into(),
        lower: Bound::Included(Value::Timestamp(lo)),
        upper: Bound::Excluded(Value::Timestamp(hi)),
    };
    match city {
        None => range,
        Some(city) => Predicate::And(vec![
            range,
            Predicate::Eq("city".into(), Value::String(city.as_bytes().to_vec())),
        ]),
    }
}

fn expected(model: &Model, lo: i64, hi: i64, city: Option<&str>) -> Vec<(Vec<u8>, i64)> {
    let mut rows: Vec<(Vec<u8>, i64)> = model
        .values()
        .filter(|r| (lo..hi).contains(&ts_of(r)))
        .filter(|r| city.is_none_or(|c| city_of(r) == c.as_bytes()))
        .map(|r| (r.key.clone(), ts_of(r)))
        .collect();
    rows.sort();
    rows
}

fn search(db: &Database, lo: i64, hi: i64, city: Option<&str>) -> Vec<(Vec<u8>, i64)> {
    let request = ReadRequest::Search {
        query: Query {
            predicate: condition(lo, hi, city),
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        },
    };
    let Some(ReadAnswer::Rows(result)) = db.read("wiki", &request, Wait::Allowed).unwrap() else {
        panic!("a search answers rows");
    };
    let mut rows: Vec<(Vec<u8>, i64)> = result
        .rows
        .iter()
        .map(|r| (r.key.clone(), ts_of(r)))
        .collect();
    rows.sort();
    rows
}

fn count(db: &Database, lo: i64, hi: i64, city: Option<&str>) -> u64 {
    let request = ReadRequest::Count {
        predicate: condition(lo, hi, city),
        read: ReadOptions::default(),
    };
    match db.read("wiki", &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Count { count, .. }) => count,
        other => panic!("a count answers a count: {other:?}"),
    }
}

fn get(db: &Database, key: &str) -> Option<Record> {
    let request = ReadRequest::Get {
        key: key.as_bytes().to_vec(),
        read: ReadOptions::default(),
    };
    match db.read("wiki", &request, Wait::Allowed).unwrap() {
        Some(ReadAnswer::Record { record, .. }) => record,
        other => panic!("a get answers a record: {other:?}"),
    }
}

/// Reads of every chunk table, from the access counts, by table name.
fn reads_by_chunk(db: &Database) -> BTreeMap<String, u64> {
    let mut reads = BTreeMap::new();
    for count in db.shard_reads() {
        *reads.entry(count.table).or_insert(0) += count.reads;
    }
    reads
}

fn agrees(db: &Database, model: &Model, rng: &mut StdRng, base: i64) {
    // Every key: the newest chunk's record.
    let keys: BTreeSet<&String> = model.keys().map(|(_, k)| k).collect();
    for key in keys {
        let newest = model
            .iter()
            .filter(|((_, k), _)| k == key)
            .max_by_key(|((start, _), _)| *start)
            .map(|(_, r)| r.clone());
        assert_eq!(get(db, key), newest, "get {key}");
    }
    assert_eq!(get(db, "absent"), None);
    for _ in 0..30 {
        let lo = base + rng.gen_range(-2..80) * HOUR / 2;
        let hi = lo + rng.gen_range(0..20) * HOUR / 3;
        let city = if rng.gen_bool(0.5) {
            Some(CITIES[rng.gen_range(0..3)])
        } else {
            None
        };
        let want = expected(model, lo, hi, city);
        assert_eq!(
            search(db, lo, hi, city),
            want,
            "search [{lo}, {hi}) {city:?}"
        );
        assert_eq!(
            count(db, lo, hi, city),
            want.len() as u64,
            "count [{lo}, {hi}) {city:?}"
        );
    }
}

#[test]
fn time_partitioned_tables_match_a_model_and_read_only_the_chunks_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let base = parse_timestamp_micros("2015-09-12T00:00:00Z").unwrap();
    let mut rng = StdRng::seed_from_u64(12);
    let mut model: Model = BTreeMap::new();
    // Every hour a put went to: its chunk exists from then on, deletes or not.
    let mut hours_put: BTreeSet<i64> = BTreeSet::new();
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        let partition = TimePartition {
            attribute: "ts".into(),
            granularity: Granularity::Hour,
        };
        let layout = TableLayout {
            shards: 2,
            replicas: 1,
        };
        db.create_table_partitioned("wiki", schema(), layout, Some(partition))
            .unwrap();
        for _ in 0..40 {
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(1..15) {
                let key = format!("k{}", rng.gen_range(0..60));
                if rng.gen_bool(0.1) {
                    model.retain(|(_, k), _| *k != key);
                    ops.push(WriteOp::Delete(key.into_bytes()));
                } else {
                    // Over 36 hours, so some keys live in several chunks.
                    let ts = base + rng.gen_range(0..36 * HOUR);
                    let r = record(&key, ts, CITIES[rng.gen_range(0..3)]);
                    hours_put.insert(ts - ts.rem_euclid(HOUR));
                    model.insert((ts - ts.rem_euclid(HOUR), key), r.clone());
                    ops.push(WriteOp::Put(r));
                }
            }
            db.write_batch(vec![("wiki".into(), ops)]).unwrap();
        }
        agrees(&db, &model, &mut rng, base);
        // One chunk per hour that got a put, named by its hour.
        let chunks: Vec<String> = db
            .chunks_of("wiki")
            .iter()
            .map(|(_, t)| t.name().to_string())
            .collect();
        let expected: Vec<String> = hours_put
            .iter()
            .map(|&h| puffer_node::partition::chunk_name("wiki", Granularity::Hour, h))
            .collect();
        assert_eq!(chunks, expected);
        // A search within one hour reads that hour's chunk and no other.
        let before = reads_by_chunk(&db);
        let hour = base + 5 * HOUR;
        search(&db, hour + 10, hour + HOUR - 10, None);
        let after = reads_by_chunk(&db);
        let read: Vec<&String> = after
            .iter()
            .filter(|(name, n)| before.get(*name) != Some(n))
            .map(|(name, _)| name)
            .collect();
        assert!(
            read.iter().all(|name| name.as_str() == "wiki__2015091205"),
            "read {read:?}"
        );

        // Bad writes are refused whole: a record without a timestamp, or one out of
        // range, and nothing of their batch is applied.
        let total = count(&db, i64::MIN + 1, i64::MAX, None);
        let mut untimed = Record::new(b"u".to_vec());
        untimed
            .values
            .insert("city".into(), Value::String(b"Evora".to_vec()));
        for bad in [untimed, record("far", i64::MAX - 1, "Evora")] {
            let batch = vec![
                WriteOp::Put(record("fine", base, "Evora")),
                WriteOp::Put(bad),
            ];
            assert!(db.write_batch(vec![("wiki".into(), batch)]).is_err());
        }
        assert_eq!(count(&db, i64::MIN + 1, i64::MAX, None), total);
        // A chunk is written through its table only.
        let direct = vec![WriteOp::Put(record("x", base, "Evora"))];
        assert!(db.write_batch(vec![(chunks[0].clone(), direct)]).is_err());
    }
    // Reopened: the table, its partition and its chunks are as they were.
    let db = Database::open_with(dir.path(), options()).unwrap();
    assert!(db.table("wiki").unwrap().partition().is_some());
    agrees(&db, &model, &mut rng, base);
    // Dropped: its chunks go with it.
    db.drop_table("wiki").unwrap();
    assert!(db.table_names().is_empty(), "{:?}", db.table_names());
}

#[test]
fn sql_makes_time_partitioned_tables_and_refuses_bad_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).unwrap();
    let run = |sql: &str| db.execute(puffer_query::sql::parse(sql, &db).unwrap());
    run("CREATE TABLE edits (id TEXT PRIMARY KEY, ts TIMESTAMP, page TEXT) PARTITION BY DAY(ts)")
        .unwrap();
    let table = db.table("edits").unwrap();
    let partition = table.partition().unwrap();
    assert_eq!(
        (partition.attribute.as_str(), partition.granularity),
        ("ts", Granularity::Day)
    );
    run(
        "INSERT INTO edits (id, ts, page) VALUES ('a', '2015-09-12T10:00:00Z', 'Rome'), \
         ('b', '2015-09-13T01:00:00Z', 'Oslo'), ('c', '2015-09-13T02:00:00Z', 'Rome')",
    )
    .unwrap();
    assert_eq!(db.chunks_of("edits").len(), 2);
    match run("SELECT COUNT(*) FROM edits WHERE page = 'Rome'").unwrap() {
        Answer::Count { count, .. } => assert_eq!(count, 2),
        other => panic!("{other:?}"),
    }
    match run("SELECT COUNT(*) FROM edits WHERE ts >= '2015-09-13' AND ts < '2015-09-14'").unwrap()
    {
        Answer::Count { count, .. } => assert_eq!(count, 2),
        other => panic!("{other:?}"),
    }
    for bad in [
        "CREATE TABLE t1 (id TEXT PRIMARY KEY, page TEXT) PARTITION BY DAY(page)",
        "CREATE TABLE t2 (id TEXT PRIMARY KEY, ts TIMESTAMP) PARTITION BY DAY(other)",
        "CREATE TABLE t3 (id TEXT PRIMARY KEY, ts TIMESTAMP) PARTITION BY WEEK(ts)",
        "CREATE TABLE t4 (id TEXT PRIMARY KEY, ts TIMESTAMP) PARTITION BY ts",
        "CREATE TABLE t__5 (id TEXT PRIMARY KEY, ts TIMESTAMP) PARTITION BY DAY(ts)",
    ] {
        let error = puffer_query::sql::parse(bad, &db)
            .map_err(|e| e.to_string())
            .and_then(|s| db.execute(s).map_err(|e| e.to_string()));
        assert!(error.is_err(), "{bad} was accepted");
    }
}
