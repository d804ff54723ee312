//! A data node holding only some shards, against a model: it lets shards go (reads of
//! them are refused, the others answer as the model does), takes one on from its
//! published snapshot and the log past it while writes go on (and one never published,
//! from the log alone), keeps what it holds across a restart, and never lets the last
//! shard of a table go.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use puffer_cluster::etcd::Etcd;
use puffer_cluster::holding::{ensure_held, take_on};
use puffer_cluster::scu_log::ClusterLog;
use puffer_cluster::segments::Publisher;
use puffer_cluster::DeepStorage;
use puffer_node::layout::shard_of;
use puffer_node::{Database, TableLayout};
use puffer_store::{AttrType, Attribute, Predicate, ReadOptions, Record, Value, WriteOp};
use rand::{Rng, SeedableRng};

const TTL: Duration = Duration::from_secs(2);
const SHARDS: u32 = 4;

type Model = BTreeMap<Vec<u8>, Record>;

/// A batch of 1..8 puts and deletes on table `t`, applied to the model too.
fn batch(rng: &mut rand::rngs::StdRng, model: &mut Model) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..rng.gen_range(1..8) {
        let key = format!("k{}", rng.gen_range(0..200)).into_bytes();
        if !seen.insert(key.clone()) {
            continue;
        }
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
    ops
}

/// `database` answers every key of the shards it holds as the model does (and those
/// of `expect_held` are held), and refuses the others as not held.
fn agrees(database: &Database, model: &Model, expect_held: &[u32], who: &str) {
    let table = database.table("t").unwrap();
    let held: Vec<u32> = (0..SHARDS).filter(|&s| table.holds(s)).collect();
    assert_eq!(held, expect_held, "{who}: shards held");
    let read = ReadOptions::default();
    for i in 0..200 {
        let key = format!("k{i}").into_bytes();
        let shard = shard_of(&key, SHARDS);
        let answer = table.get(&key, read);
        if held.contains(&shard) {
            assert_eq!(answer.unwrap().0.as_ref(), model.get(&key), "{who}: k{i}");
        } else {
            let error = answer.unwrap_err();
            assert!(
                puffer_node::shards::is_not_held(&error),
                "{who}: k{i} of shard {shard}: {error}"
            );
        }
    }
    // A read over every shard is refused whole, never answered in part.
    let all = table.count(&Predicate::All, read);
    if held.len() == SHARDS as usize {
        assert_eq!(all.unwrap().0, model.len() as u64, "{who}");
    } else {
        assert!(all.is_err(), "{who}: a count over shards not held");
    }
}

/// An etcd, deep storage in a directory and an elected ingest leader holding table `t`
/// (`SHARDS` shards, `replicas` replicas) with 40 batches written, as the model says.
struct Setup {
    _server: puffer_cluster::etcd::LocalEtcd,
    dir: tempfile::TempDir,
    etcd: Etcd,
    deep: DeepStorage,
    log: ClusterLog,
    leader: Database,
    _member: puffer_cluster::etcd::Membership,
    _leadership: puffer_cluster::etcd::Leadership,
    rng: rand::rngs::StdRng,
    model: Model,
}

impl Setup {
    /// `None` (after a loud skip) without an etcd binary.
    fn start(test: &str, replicas: u32, seed: u64) -> Option<Setup> {
        let (server, dir) = common::etcd_or_skip(test)?;
        let etcd = Etcd::connect(&server.config(&format!("holding-{seed}")).unwrap()).unwrap();
        let deep = DeepStorage::open(dir.path().join("deep").to_str().unwrap()).unwrap();
        let log = ClusterLog::new(etcd.clone(), deep.clone());
        let (leader, member, leadership) =
            common::ingest_leader(&etcd, &log, "ingest-1", TTL, &dir.path().join("leader"));
        let layout = TableLayout {
            shards: SHARDS,
            replicas,
        };
        leader
            .create_table_with("t", common::city_schema(), layout)
            .unwrap();
        let mut setup = Setup {
            _server: server,
            dir,
            etcd,
            deep,
            log,
            leader,
            _member: member,
            _leadership: leadership,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            model: Model::new(),
        };
        setup.write(40);
        Some(setup)
    }

    /// Writes `batches` random batches through the leader.
    fn write(&mut self, batches: usize) {
        for _ in 0..batches {
            let ops = batch(&mut self.rng, &mut self.model);
            self.leader.write_batch(vec![("t".into(), ops)]).unwrap();
        }
    }
}

#[test]
fn a_data_node_lets_shards_go_and_takes_them_on_from_segments_and_the_log() {
    let Some(setup) = Setup::start(
        "a_data_node_lets_shards_go_and_takes_them_on_from_segments_and_the_log",
        1,
        17,
    ) else {
        return;
    };
    let Setup {
        dir,
        etcd,
        deep,
        log,
        leader,
        mut rng,
        mut model,
        ..
    } = setup;
    let follower_dir = dir.path().join("data-1");
    let data = Arc::new(common::follower(&etcd, &follower_dir));
    log.catch_up(&data).unwrap();
    agrees(&data, &model, &[0, 1, 2, 3], "everything held");

    // Let every shard go: the table holds none here, and keeps its schema through a
    // schema change and a restart.
    for shard in [1, 2, 0, 3] {
        assert!(data.release_shard("t", shard).unwrap());
    }
    assert!(!data.release_shard("t", 2).unwrap(), "released twice");
    assert!(data.release_shard("t", SHARDS).is_err(), "no such shard");
    for step in 0..40 {
        if step == 20 {
            let attribute = Attribute {
                name: "stars".into(),
                attr_type: AttrType::Int,
            };
            leader
                .write_batch(vec![("t".into(), vec![WriteOp::AddAttribute(attribute)])])
                .unwrap();
        }
        leader
            .write_batch(vec![("t".into(), batch(&mut rng, &mut model))])
            .unwrap();
    }
    log.catch_up(&data).unwrap();
    agrees(&data, &model, &[], "every shard let go");
    let has_stars = |data: &Database| {
        let schema = data.table("t").unwrap().schema();
        schema.attributes.iter().any(|a| a.name == "stars")
    };
    assert!(
        has_stars(&data),
        "the schema change reached a table holding nothing"
    );
    assert!(
        !follower_dir.join("tables/t/shard-1-replica-0").exists(),
        "a shard let go leaves no files"
    );
    drop(Arc::try_unwrap(data).ok().expect("no other holder"));
    let data = Arc::new(common::follower(&etcd, &follower_dir));
    log.catch_up(&data).unwrap();
    agrees(&data, &model, &[], "every shard let go, after a restart");
    assert!(has_stars(&data));

    // Every shard is published (compacted on the leader first).
    leader.table("t").unwrap().compact_all().unwrap();
    let mut publisher =
        Publisher::new(etcd.clone(), deep.clone(), "ingest-1", "run1").with_grace(Duration::ZERO);
    let round = publisher.round(&leader, true).unwrap();
    assert_eq!(round.shards, SHARDS as usize, "{round:?}");
    for _ in 0..20 {
        leader
            .write_batch(vec![("t".into(), batch(&mut rng, &mut model))])
            .unwrap();
    }

    // Take shards 1 and 0 on while writes go on and the data node follows them.
    let model = Arc::new(Mutex::new(model));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (leader_model, stop) = (model.clone(), stop.clone());
        let leader = Arc::new(leader);
        let handle_leader = leader.clone();
        let handle = std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(18);
            let mut writes = 0;
            while !stop.load(Ordering::Acquire) || writes < 30 {
                let mut model = leader_model.lock().unwrap();
                let ops = batch(&mut rng, &mut model);
                handle_leader.write_batch(vec![("t".into(), ops)]).unwrap();
                drop(model);
                writes += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        (leader, handle)
    };
    let follow = {
        let (data, log, stop) = (data.clone(), log.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                log.catch_up(&data).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let taken = take_on(&etcd, &deep, &log, &data, "t", 1).unwrap();
    assert!(taken.bytes > 0, "shard 1 came from its snapshot: {taken:?}");
    let taken = take_on(&etcd, &deep, &log, &data, "t", 0).unwrap();
    assert!(taken.bytes > 0, "{taken:?}");
    stop.store(true, Ordering::Release);
    let (leader, writer) = writer;
    writer.join().unwrap();
    follow.join().unwrap();
    log.catch_up(&data).unwrap();
    let model = model.lock().unwrap().clone();
    agrees(&data, &model, &[0, 1], "shards 0 and 1 taken on");
    assert!(has_stars(&data));

    // What is held survives a restart, at the same answers.
    let data = Arc::try_unwrap(data).ok().expect("no other holder");
    drop(data);
    let data = common::follower(&etcd, &follower_dir);
    log.catch_up(&data).unwrap();
    agrees(&data, &model, &[0, 1], "after a restart");
    drop(leader);
}

#[test]
fn a_shard_never_published_is_taken_on_from_the_log_alone() {
    let Some(setup) = Setup::start(
        "a_shard_never_published_is_taken_on_from_the_log_alone",
        2,
        19,
    ) else {
        return;
    };
    let Setup {
        dir,
        etcd,
        deep,
        log,
        leader,
        mut rng,
        mut model,
        ..
    } = setup;
    let data = common::follower(&etcd, &dir.path().join("data-1"));
    log.catch_up(&data).unwrap();
    assert!(data.release_shard("t", 2).unwrap());
    for step in 0..30 {
        if step == 10 {
            // A schema change while the shard is not held reaches it when taken on.
            let attribute = Attribute {
                name: "stars".into(),
                attr_type: AttrType::Int,
            };
            leader
                .write_batch(vec![("t".into(), vec![WriteOp::AddAttribute(attribute)])])
                .unwrap();
        }
        leader
            .write_batch(vec![("t".into(), batch(&mut rng, &mut model))])
            .unwrap();
    }
    log.catch_up(&data).unwrap();
    agrees(&data, &model, &[0, 1, 3], "shard 2 let go");
    let taken = take_on(&etcd, &deep, &log, &data, "t", 2).unwrap();
    assert_eq!(taken.bytes, 0, "nothing was published: {taken:?}");
    assert_eq!(taken.covers, 0);
    agrees(
        &data,
        &model,
        &[0, 1, 2, 3],
        "shard 2 taken on from the log",
    );
    let schema = data.table("t").unwrap().schema();
    assert!(schema.attributes.iter().any(|a| a.name == "stars"));
    let again = take_on(&etcd, &deep, &log, &data, "t", 2).unwrap_err();
    assert!(again.to_string().contains("already"), "{again}");
}

#[test]
fn a_shard_held_by_no_live_node_is_taken_on_when_a_read_needs_it() {
    let Some(setup) = Setup::start(
        "a_shard_held_by_no_live_node_is_taken_on_when_a_read_needs_it",
        1,
        23,
    ) else {
        return;
    };
    let Setup {
        dir,
        etcd,
        deep,
        log,
        model,
        ..
    } = setup;
    // Two data nodes that take shards on when asked; neither holds shard 2.
    let mut nodes = Vec::new();
    let mut addresses = Vec::new();
    for id in ["d1", "d2"] {
        let data = Arc::new(common::follower(&etcd, &dir.path().join(id)));
        log.catch_up(&data).unwrap();
        assert!(data.release_shard("t", 2).unwrap());
        let taker: puffer_cluster::rpc::server::ShardTaker = {
            let (etcd, deep, log, data) = (etcd.clone(), deep.clone(), log.clone(), data.clone());
            Arc::new(move |table: &str, uid: u64, shard: u32| {
                ensure_held((&etcd, &deep, &log), &data, table, uid, shard)
            })
        };
        let rpc = puffer_cluster::rpc::server::RpcServer::start_with(
            data.clone(),
            "127.0.0.1:0".parse().unwrap(),
            Some(taker),
        )
        .unwrap();
        addresses.push((id.to_string(), rpc.address().to_string()));
        nodes.push((data, rpc));
    }
    let broker = puffer_cluster::broker::Broker::new(
        Box::new(puffer_cluster::etcd::EtcdCatalog::new(etcd.clone())),
        Duration::from_secs(5),
    );
    broker.set_data_nodes(&addresses).unwrap();
    // A count needs every shard: shard 2 is taken on by one node, then it answers.
    let request = puffer_node::ReadRequest::Count {
        predicate: Predicate::All,
        read: ReadOptions::default(),
    };
    match broker.read("t", &request).unwrap() {
        puffer_node::ReadAnswer::Count { count, .. } => assert_eq!(count, model.len() as u64),
        other => panic!("{other:?}"),
    }
    let holders: Vec<&str> = nodes
        .iter()
        .zip(["d1", "d2"])
        .filter(|((data, _), _)| data.table("t").unwrap().holds(2))
        .map(|(_, id)| id)
        .collect();
    assert_eq!(holders.len(), 1, "one node took shard 2 on: {holders:?}");
    // Every key through the broker, as the model says.
    for i in 0..200 {
        let key = format!("k{i}").into_bytes();
        let request = puffer_node::ReadRequest::Get {
            key: key.clone(),
            read: ReadOptions::default(),
        };
        match broker.read("t", &request).unwrap() {
            puffer_node::ReadAnswer::Record { record, .. } => {
                assert_eq!(record.as_ref(), model.get(&key), "k{i}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_fresh_data_only_node_loads_only_the_shards_placed_on_it() {
    let Some(setup) = Setup::start(
        "a_fresh_data_only_node_loads_only_the_shards_placed_on_it",
        1,
        29,
    ) else {
        return;
    };
    let Setup {
        dir,
        etcd,
        deep,
        log,
        leader,
        mut rng,
        mut model,
        ..
    } = setup;
    leader.table("t").unwrap().compact_all().unwrap();
    let mut publisher =
        Publisher::new(etcd.clone(), deep.clone(), "ingest-1", "run1").with_grace(Duration::ZERO);
    publisher.round(&leader, true).unwrap();
    for _ in 0..20 {
        leader
            .write_batch(vec![("t".into(), batch(&mut rng, &mut model))])
            .unwrap();
    }
    // The coordinator placed shards 1 and 3 on d9 (written here as it would).
    let uid = leader.table("t").unwrap().uid();
    let placement = puffer_cluster::placement::ShardPlacement {
        replicas: 1,
        tables: [(
            uid,
            vec![
                vec!["d8".to_string()],
                vec!["d9".to_string()],
                vec!["d8".to_string()],
                vec!["d9".to_string()],
            ],
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let key = format!(
        "{}{}",
        etcd.keys().coordinated(),
        puffer_cluster::placement::PLACEMENT_NAME
    );
    let value = serde_json::to_vec(&placement).unwrap();
    etcd.call(move |mut client| async move { client.put(key, value, None).await })
        .unwrap();

    let fresh = dir.path().join("d9");
    let report = puffer_cluster::segments::seed_data_dir_for(&etcd, &deep, &fresh, Some("d9"))
        .unwrap()
        .expect("published shards to load");
    assert_eq!(report.shards, 2, "{report:?}");
    let data = common::follower(&etcd, &fresh);
    log.catch_up(&data).unwrap();
    agrees(
        &data,
        &model,
        &[1, 3],
        "seeded with the shards placed on it",
    );
    // The others can be taken on later, from the same snapshots and the log.
    take_on(&etcd, &deep, &log, &data, "t", 0).unwrap();
    agrees(&data, &model, &[0, 1, 3], "shard 0 taken on after seeding");
}
