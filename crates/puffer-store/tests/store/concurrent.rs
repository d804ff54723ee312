//! Readers racing a writer: keys that always exist are replaced over and over (with
//! background sealing and compaction on), while readers get and search them. Every
//! answer must show every key exactly once, with a value the writer wrote at or before
//! the snapshot the answer reports, also while attribute and column layers are added
//! and dropped;
//! and every answer's snapshot holds every SCU acknowledged before the read began.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Shard, ShardOptions, Value,
    WriteOp,
};

const KEYS: u64 = 20;

fn key(i: u64) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

/// Sets its flag when dropped, on a panic too.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn readers_never_miss_a_replaced_key() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new(
        "id",
        vec![Attribute {
            name: "round".into(),
            attr_type: AttrType::Int,
        }],
    )
    .unwrap();
    let options = ShardOptions {
        log_table_max_records: 50,
        seal_interval: Duration::from_millis(20),
        compaction_delay: Duration::from_millis(20),
        ..ShardOptions::default()
    };
    let shard = Shard::open(dir.path(), schema, options).unwrap();
    let put_round = |round: i64| {
        let ops = (0..KEYS)
            .map(|i| WriteOp::Put(Record::new(key(i)).with("round", Value::Int(round))))
            .collect();
        shard.write(ops).unwrap()
    };
    // SCU n (n >= 1) writes round n - 1 to every key.
    let acknowledged = AtomicU64::new(put_round(0));
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            // Set also when the writer panics, so that the readers stop and the panic
            // fails the test instead of hanging it.
            let _done = SetOnDrop(&done);
            for round in 1..400 {
                for i in 0..KEYS {
                    // Single-key SCUs interleave with the readers at a finer grain.
                    let record = Record::new(key(i)).with("round", Value::Int(round));
                    loop {
                        match shard.write(vec![WriteOp::Put(record.clone())]) {
                            Ok(seq) => {
                                acknowledged.fetch_max(seq, Ordering::SeqCst);
                                break;
                            }
                            Err(puffer_store::StoreError::Overloaded(_)) => {
                                std::thread::sleep(Duration::from_millis(5))
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
        });
        // Attribute and column layers of `round` come and go on every segment meanwhile: built here
        // and published, built on a thread of their own, or dropped.
        scope.spawn(|| {
            let mut step = 0u64;
            while !done.load(Ordering::SeqCst) {
                for segment in shard.segments() {
                    match step % 3 {
                        0 => {
                            let layer = segment.build_attribute_layer(0).unwrap();
                            segment.add_attribute_layer(layer);
                            segment.start_column_layer(0, vec![AttrType::Int]);
                        }
                        1 => {
                            segment.start_attribute_layer(0);
                            segment.drop_column_layer(0);
                        }
                        _ => {
                            segment.drop_attribute_layer(0);
                            let layer = segment.build_column_layer(0, &[AttrType::Int]).unwrap();
                            segment.add_column_layer(layer);
                        }
                    }
                    step += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        for reader in 0..2 {
            let (shard, done, acknowledged) = (&shard, &done, &acknowledged);
            scope.spawn(move || {
                let mut checks = 0u64;
                // Reads with the default freshness see every acknowledged SCU.
                let fresh = |snapshot: u64, before: u64, what: &str| {
                    assert!(
                        snapshot >= before,
                        "{what} read snapshot {snapshot}, SCU {before} was acknowledged before"
                    )
                };
                while !done.load(Ordering::SeqCst) || checks < 100 {
                    let i = (checks * 7 + reader) % KEYS;
                    let before = acknowledged.load(Ordering::SeqCst);
                    let (found, info) = shard.get(&key(i), ReadOptions::default()).unwrap();
                    fresh(info.snapshot, before, "get");
                    let record = found
                        .unwrap_or_else(|| panic!("k{i:02} missing at snapshot {}", info.snapshot));
                    assert!(matches!(record.values["round"], Value::Int(r) if r >= 0));
                    let before = acknowledged.load(Ordering::SeqCst);
                    let all = shard
                        .search(&Query {
                            predicate: Predicate::All,
                            projection: Some(Vec::new()),
                            limit: None,
                            read: ReadOptions::default(),
                        })
                        .unwrap();
                    fresh(all.snapshot.snapshot, before, "search");
                    let keys: Vec<Vec<u8>> = all.rows.into_iter().map(|r| r.key).collect();
                    let expected: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
                    assert_eq!(keys, expected, "snapshot {}", all.snapshot.snapshot);
                    // Through the attribute's entries (a layer's, where one is held now).
                    let rounds = shard
                        .search(&Query {
                            predicate: Predicate::Range {
                                attribute: "round".into(),
                                lower: std::ops::Bound::Included(Value::Int(0)),
                                upper: std::ops::Bound::Unbounded,
                            },
                            projection: Some(Vec::new()),
                            limit: None,
                            read: ReadOptions::default(),
                        })
                        .unwrap();
                    let keys: Vec<Vec<u8>> = rounds.rows.into_iter().map(|r| r.key).collect();
                    assert_eq!(
                        keys, expected,
                        "range, snapshot {}",
                        rounds.snapshot.snapshot
                    );
                    // A column read of `round` where at least 0 (from column layers where
                    // held, evaluated on them or found through the attribute's entries).
                    let before = acknowledged.load(Ordering::SeqCst);
                    let columns = shard
                        .columns(&Query {
                            projection: Some(vec!["id".into(), "round".into()]),
                            ..Query {
                                predicate: Predicate::Range {
                                    attribute: "round".into(),
                                    lower: std::ops::Bound::Included(Value::Int(0)),
                                    upper: std::ops::Bound::Unbounded,
                                },
                                projection: None,
                                limit: None,
                                read: ReadOptions::default(),
                            }
                        })
                        .unwrap();
                    fresh(columns.snapshot.snapshot, before, "columns");
                    let mut keys: Vec<Vec<u8>> = (0..columns.rows)
                        .map(|row| match columns.columns[0].value(row) {
                            Some(Value::String(key)) => key,
                            other => panic!("key {other:?}"),
                        })
                        .collect();
                    keys.sort();
                    assert_eq!(
                        keys, expected,
                        "columns, snapshot {}",
                        columns.snapshot.snapshot
                    );
                    checks += 1;
                }
            });
        }
        writer.join().unwrap();
    });
    let demand = shard.attribute_demand();
    assert!(
        demand.iter().any(|rows| rows.layered > 0) && demand.iter().any(|rows| rows.walked > 0),
        "reads went through attribute layers and walks both: {demand:?}"
    );
    let demand = shard.column_demand();
    assert!(
        demand.iter().any(|rows| rows.layered > 0) && demand.iter().any(|rows| rows.walked > 0),
        "column reads went through column layers and fields both: {demand:?}"
    );
}
