//! The cluster's SCU log against a model: an ingest leader ships every group to deep
//! storage and commits it in etcd; followers (data nodes) catch up and answer as the
//! model does, across new tables, schema changes, deletes, a table dropped and made
//! again under its name, and a follower's restart. One follower keeps its round's state
//! (it makes the catalog's tables only when they changed), the other starts afresh every
//! round. A deposed leader's group is refused and changes nothing.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use puffer_cluster::etcd::Etcd;
use puffer_cluster::scu_log::{ClusterLog, FollowState, LeaderShipper};
use puffer_cluster::DeepStorage;
use puffer_node::commit::{LogShipper, ShipFailure};
use puffer_node::{Database, TableLayout};
use puffer_store::{AttrType, Attribute, Predicate, ReadOptions, Record, Value, WriteOp};
use rand::{Rng, SeedableRng};

const TTL: Duration = Duration::from_secs(2);

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Record>>;

/// Every table of the model, every key, and per-city counts, read from `database`.
fn agrees(database: &Database, model: &Model, who: &str) {
    let read = ReadOptions::default();
    let mut names = database.table_names();
    names.sort();
    assert_eq!(names, model.keys().cloned().collect::<Vec<_>>(), "{who}");
    for (name, records) in model {
        let table = database.table(name).unwrap();
        let (count, _) = table.count(&Predicate::All, read).unwrap();
        assert_eq!(count, records.len() as u64, "{who}: {name}");
        for (key, record) in records {
            let (found, _) = table.get(key, read).unwrap();
            assert_eq!(found.as_ref(), Some(record), "{who}: {name}");
        }
        for city in ["Lisbon", "Porto"] {
            let wanted = Value::String(city.into());
            let expected = records
                .values()
                .filter(|r| r.values.get("city") == Some(&wanted))
                .count() as u64;
            let (count, _) = table
                .count(&Predicate::Eq("city".into(), wanted), read)
                .unwrap();
            assert_eq!(count, expected, "{who}: {name} {city}");
        }
    }
}

#[test]
fn followers_agree_with_the_leader_and_a_model() {
    let Some((server, dir)) = common::etcd_or_skip("followers_agree_with_the_leader_and_a_model")
    else {
        return;
    };
    let etcd = Etcd::connect(&server.config("log").unwrap()).unwrap();
    let deep = DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
    let log = ClusterLog::new(etcd.clone(), deep.clone());
    let (leader, member, leadership) =
        common::ingest_leader(&etcd, &log, "ingest-1", TTL, &dir.path().join("leader"));
    let mut followers = vec![
        common::follower(&etcd, &dir.path().join("f1")),
        common::follower(&etcd, &dir.path().join("f2")),
    ];
    // Follower 0 keeps its state across rounds; follower 1 catches up afresh.
    let mut kept = FollowState::default();
    let mut round = |i: usize, f: &Database| {
        if i == 0 {
            log.follow_round(f, &mut kept)
        } else {
            log.catch_up(f)
        }
    };

    let mut model: Model = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for step in 0..120 {
        if step == 0 || step == 60 {
            let name = format!("t{step}");
            let layout = TableLayout {
                shards: 2,
                replicas: 1 + (step / 60) as u32,
            };
            leader
                .create_table_with(&name, common::city_schema(), layout)
                .unwrap();
            model.insert(name, BTreeMap::new());
        }
        if step == 90 {
            // Dropped and made again: the same name and count, another uid.
            leader.drop_table("t60").unwrap();
            leader
                .create_table_with(
                    "t60",
                    common::city_schema(),
                    TableLayout {
                        shards: 2,
                        replicas: 2,
                    },
                )
                .unwrap();
            model.insert("t60".into(), BTreeMap::new());
        }
        if step == 30 {
            // A schema change travels in the log like any SCU.
            let attribute = Attribute {
                name: "stars".into(),
                attr_type: AttrType::Int,
            };
            leader
                .write_batch(vec![("t0".into(), vec![WriteOp::AddAttribute(attribute)])])
                .unwrap();
        }
        let mut parts = Vec::new();
        for (name, records) in model.iter_mut() {
            let mut ops = Vec::new();
            for _ in 0..rng.gen_range(1..6) {
                let key = format!("k{}", rng.gen_range(0..40)).into_bytes();
                if rng.gen_bool(0.2) {
                    records.remove(&key);
                    ops.push(WriteOp::Delete(key));
                } else {
                    let mut record = Record::new(key.clone());
                    let city = ["Lisbon", "Porto", "Faro"][rng.gen_range(0..3)];
                    record
                        .values
                        .insert("city".into(), Value::String(city.into()));
                    if name == "t0" && step > 30 {
                        record
                            .values
                            .insert("stars".into(), Value::Int(rng.gen_range(1..6)));
                    }
                    records.insert(key, record.clone());
                    ops.push(WriteOp::Put(record));
                }
            }
            parts.push((name.clone(), ops));
        }
        let seq = leader.write_batch(parts).unwrap();
        assert_eq!(
            log.tail().unwrap(),
            seq,
            "step {step}: acknowledged before committed"
        );
        if step % 25 == 24 {
            for (i, f) in followers.iter().enumerate() {
                assert_eq!(round(i, f).unwrap(), seq, "follower {i}");
                agrees(f, &model, &format!("follower {i} at step {step}"));
            }
        }
        if step == 70 {
            // A follower restarts: it replays its own log, then catches up from there.
            followers.pop();
            followers.push(common::follower(&etcd, &dir.path().join("f2")));
        }
    }
    agrees(&leader, &model, "leader");
    for (i, f) in followers.iter().enumerate() {
        round(i, f).unwrap();
        assert_eq!(f.published(), leader.published());
        agrees(f, &model, &format!("follower {i}"));
        // Followers take no writes and no table changes of their own.
        let refused = f.write_batch(vec![("t0".into(), vec![WriteOp::Delete(b"k1".to_vec())])]);
        assert!(refused.unwrap_err().to_string().contains("ingest leader"));
        assert!(f.create_table("x", common::city_schema()).is_err());
    }
    // A new follower starts from nothing and catches up whole.
    let late = common::follower(&etcd, &dir.path().join("f3"));
    log.catch_up(&late).unwrap();
    agrees(&late, &model, "a late follower");

    // The leader is deposed (its lease revoked, as when it expires): its next group is
    // not committed, the tail stays, and its committer stops taking writes.
    let tail = log.tail().unwrap();
    member.leave().unwrap();
    let stale = LeaderShipper::new(log.clone(), leadership);
    let refused = stale.ship(tail + 1, tail + 1, b"");
    assert!(
        matches!(refused, Err(ShipFailure::Unknown(_))),
        "{refused:?}"
    );
    let write = leader.write_batch(vec![("t0".into(), vec![WriteOp::Delete(b"k1".to_vec())])]);
    assert!(write.is_err(), "a deposed leader acknowledged a write");
    assert_eq!(log.tail().unwrap(), tail);
    drop(server);
}

/// The leader's log collection removes every group up to the horizon in one round,
/// however many (more than one call's [`MAX_COLLECTED_GROUPS`]), and keeps every group
/// past it, as a read of the whole index before says; deep storage keeps the objects
/// of the groups left and no others.
#[test]
fn a_collection_round_removes_every_group_up_to_the_horizon() {
    use puffer_cluster::scu_log::MAX_COLLECTED_GROUPS;
    let Some((server, dir)) =
        common::etcd_or_skip("a_collection_round_removes_every_group_up_to_the_horizon")
    else {
        return;
    };
    let (_etcd, deep, log, leader, (_member, leadership)) =
        common::leader_on_a_log(&server, dir.path(), "collect");
    let schema = puffer_store::Schema::new("id", Vec::new()).unwrap();
    let layout = TableLayout {
        shards: 1,
        replicas: 1,
    };
    leader.create_table_with("t", schema, layout).unwrap();
    // One write at a time: a group each.
    for i in 0..MAX_COLLECTED_GROUPS + 150 {
        let record = Record::new(format!("k{i}").into_bytes());
        leader
            .write_batch(vec![("t".into(), vec![WriteOp::Put(record)])])
            .unwrap();
    }
    let mut before = Vec::new();
    loop {
        let after = before
            .last()
            .map_or(0, |e: &puffer_cluster::scu_log::LogEntry| e.last);
        let page = log.entries_after(after).unwrap();
        if page.is_empty() {
            break;
        }
        before.extend(page);
    }
    assert!(
        before.len() > MAX_COLLECTED_GROUPS,
        "{} groups",
        before.len()
    );
    let horizon = before[before.len() - 100].last;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let collection = log.collect_all(&leadership, horizon, &stop).unwrap();
    let doomed = before.iter().filter(|e| e.last <= horizon).count();
    assert_eq!(collection.groups, doomed);
    assert_eq!(collection.objects_left, 0);
    let left: Vec<_> = before
        .iter()
        .filter(|e| e.last > horizon)
        .cloned()
        .collect();
    assert_eq!(
        log.entries_after(0).unwrap(),
        left[..left.len().min(64)].to_vec()
    );
    assert_eq!(log.first().unwrap(), horizon + 1);
    let stored: std::collections::BTreeSet<String> =
        deep.list("log").unwrap().into_iter().collect();
    let named: std::collections::BTreeSet<String> = left.into_iter().map(|e| e.object).collect();
    assert_eq!(stored, named);
}
