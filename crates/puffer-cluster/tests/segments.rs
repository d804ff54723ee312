//! Published segments against a model: a leader's shards compacted and published round
//! after round (puts, overwrites and deletes between), deep storage holding exactly the
//! objects the recorded snapshots name once superseded ones are collected; a fresh data
//! directory seeded from them answers as the model does; a dropped table's objects go.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use puffer_cluster::etcd::Etcd;
use puffer_cluster::scu_log::ClusterLog;
use puffer_cluster::segments::{published, seed_data_dir, Publisher};
use puffer_cluster::DeepStorage;
use puffer_node::{Database, DatabaseOptions, TableLayout};
use puffer_store::{AttrType, Attribute, Predicate, ReadOptions, Record, Schema, Value, WriteOp};
use rand::{Rng, SeedableRng};

const TTL: Duration = Duration::from_secs(2);

fn schema() -> Schema {
    let city = Attribute {
        name: "city".into(),
        attr_type: AttrType::String,
    };
    Schema::new("id", vec![city]).unwrap()
}

/// The segment objects in deep storage, and those the recorded snapshots name.
fn stored_and_named(deep: &DeepStorage, etcd: &Etcd) -> (BTreeSet<String>, BTreeSet<String>) {
    let stored = deep.list("segments").unwrap().into_iter().collect();
    let named = published(etcd)
        .unwrap()
        .into_values()
        .flat_map(|s| s.files.into_iter().map(|f| f.object))
        .collect();
    (stored, named)
}

fn agrees(database: &Database, model: &BTreeMap<Vec<u8>, Record>, who: &str) {
    let table = database.table("rooms").unwrap();
    let read = ReadOptions::default();
    let (count, _) = table.count(&Predicate::All, read).unwrap();
    assert_eq!(count, model.len() as u64, "{who}");
    for key in (0..300).map(|k| format!("k{k}").into_bytes()) {
        let (found, _) = table.get(&key, read).unwrap();
        assert_eq!(found.as_ref(), model.get(&key), "{who}: {key:?}");
    }
}

#[test]
fn published_segments_are_exactly_what_is_named_and_seed_a_fresh_node() {
    let test = "published_segments_are_exactly_what_is_named_and_seed_a_fresh_node";
    let Some((server, dir)) = common::etcd_or_skip(test) else {
        return;
    };
    let etcd = Etcd::connect(&server.config("segments").unwrap()).unwrap();
    let deep = DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
    let log = ClusterLog::new(etcd.clone(), deep.clone());
    let (leader, _member, _leadership) =
        common::ingest_leader(&etcd, &log, "a", TTL, &dir.path().join("leader"));
    let layout = TableLayout {
        shards: 3,
        replicas: 2,
    };
    leader.create_table_with("rooms", schema(), layout).unwrap();
    let mut publisher =
        Publisher::new(etcd.clone(), deep.clone(), "a", "run1").with_grace(Duration::ZERO);
    let mut model: BTreeMap<Vec<u8>, Record> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for round in 0..6 {
        for _ in 0..8 {
            let mut ops = Vec::new();
            for _ in 0..20 {
                let key = format!("k{}", rng.gen_range(0..300)).into_bytes();
                if rng.gen_bool(0.2) {
                    model.remove(&key);
                    ops.push(WriteOp::Delete(key));
                } else {
                    let mut record = Record::new(key.clone());
                    let city = ["Lisbon", "Porto", "Faro"][rng.gen_range(0..3)];
                    record
                        .values
                        .insert("city".into(), Value::String(city.into()));
                    model.insert(key, record.clone());
                    ops.push(WriteOp::Put(record));
                }
            }
            leader.write_batch(vec![("rooms".into(), ops)]).unwrap();
        }
        // Every other round compacted: the other rounds leave records past the
        // checkpoints, so `covers` stops at them.
        if round % 2 == 0 {
            leader.table("rooms").unwrap().compact_all().unwrap();
        }
        let done = publisher.round(&leader, true).unwrap();
        let (stored, named) = stored_and_named(&deep, &etcd);
        assert_eq!(stored, named, "round {round}: {done:?}");
        assert!(!named.is_empty(), "round {round}");
        if round >= 2 && round % 2 == 0 {
            assert!(
                done.deleted > 0,
                "round {round}: nothing superseded: {done:?}"
            );
        }
    }
    let shards = published(&etcd).unwrap();
    assert_eq!(shards.len(), 3);
    assert!(shards
        .values()
        .all(|s| s.covers >= s.checkpoint && s.checkpoint > 0));

    // A fresh directory seeded from them, then following the log, answers as the model.
    let seeded_dir = dir.path().join("seeded");
    let report = seed_data_dir(&etcd, &deep, &seeded_dir).unwrap().unwrap();
    assert_eq!((report.tables, report.shards), (1, 3));
    let lowest = shards.values().map(|s| s.covers).min().unwrap();
    assert_eq!(report.start_after, lowest);
    let seeded = Database::open_with(
        &seeded_dir,
        DatabaseOptions {
            following: true,
            ..common::node_options(&etcd)
        },
    )
    .unwrap();
    assert_eq!(seeded.published(), lowest);
    log.catch_up(&seeded).unwrap();
    assert_eq!(seeded.published(), leader.published());
    agrees(&seeded, &model, "seeded");
    agrees(&leader, &model, "leader");
    // Seeding is refused where a database is: nothing is overwritten.
    assert!(seed_data_dir(&etcd, &deep, &seeded_dir).unwrap().is_none());
    drop(seeded);

    // Another run of the publisher sweeps what the first left once nothing names it.
    let mut second =
        Publisher::new(etcd.clone(), deep.clone(), "a", "run2").with_grace(Duration::ZERO);
    second.round(&leader, true).unwrap();
    let (stored, named) = stored_and_named(&deep, &etcd);
    assert_eq!(stored, named);

    // The table dropped: its objects go at the next round.
    leader.drop_table("rooms").unwrap();
    assert!(published(&etcd).unwrap().is_empty());
    let done = second.round(&leader, true).unwrap();
    let _ = publisher.round(&leader, true).unwrap();
    let (stored, _) = stored_and_named(&deep, &etcd);
    assert!(
        stored.is_empty(),
        "left after the drop: {stored:?} ({done:?})"
    );
}
