//! The broker against a model: reads fanned out over three data nodes (followers of
//! an ingest leader, serving over gRPC) answer as a `BTreeMap` does, at one snapshot;
//! a killed data node costs no answer; with every data node gone, reads fail whole.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use puffer_cluster::broker::Broker;
use puffer_cluster::etcd::{Etcd, EtcdCatalog};
use puffer_cluster::rpc::server::RpcServer;
use puffer_cluster::scu_log::ClusterLog;
use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout};
use puffer_query::QueryError;
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, StoreError, Value, WriteOp,
};
use rand::{Rng, SeedableRng};

const CITIES: [&str; 3] = ["Lisbon", "Porto", "Faro"];

fn city(record: &Record) -> &[u8] {
    match record.values.get("city") {
        Some(Value::String(city)) => city,
        _ => b"",
    }
}

/// A random read and the model's answer to check it with.
fn check_read(broker: &Broker, model: &BTreeMap<Vec<u8>, Record>, rng: &mut impl Rng, step: usize) {
    let read = ReadOptions::default();
    let wanted = CITIES[rng.gen_range(0..CITIES.len())].as_bytes();
    match rng.gen_range(0..3) {
        0 => {
            let key = format!("k{}", rng.gen_range(0..250)).into_bytes();
            let answer = broker
                .read(
                    "rooms",
                    &ReadRequest::Get {
                        key: key.clone(),
                        read,
                    },
                )
                .unwrap();
            let ReadAnswer::Record { record, .. } = answer else {
                panic!("step {step}: {answer:?}")
            };
            assert_eq!(record.as_ref(), model.get(&key), "step {step}");
        }
        1 => {
            let predicate = Predicate::Eq("city".into(), Value::String(wanted.to_vec()));
            let answer = broker
                .read("rooms", &ReadRequest::Count { predicate, read })
                .unwrap();
            let ReadAnswer::Count { count, .. } = answer else {
                panic!("step {step}: {answer:?}")
            };
            let expected = model.values().filter(|r| city(r) == wanted).count() as u64;
            assert_eq!(count, expected, "step {step}");
        }
        _ => {
            let limit = [None, Some(3), Some(1000)][rng.gen_range(0..3)];
            let query = Query {
                predicate: Predicate::Contains("city".into(), wanted[1..3].to_vec()),
                projection: None,
                limit,
                read,
            };
            let answer = broker
                .read("rooms", &ReadRequest::Search { query })
                .unwrap();
            let ReadAnswer::Rows(result) = answer else {
                panic!("step {step}: {answer:?}")
            };
            let matching: Vec<&Record> = model.values().filter(|r| city(r) == wanted).collect();
            let expected_len = limit.map_or(matching.len(), |l| l.min(matching.len()));
            assert_eq!(result.rows.len(), expected_len, "step {step}");
            for row in &result.rows {
                assert_eq!(model.get(&row.key), Some(row), "step {step}");
            }
            assert!(
                result.rows.windows(2).all(|w| w[0].key < w[1].key),
                "step {step}"
            );
        }
    }
}

/// A connection to `server` as cluster `cluster`, its log in `dir`, and an elected
/// ingest leader (its membership and leadership held by the caller) holding table
/// `rooms`: a city for every key, 3 shards.
fn rooms_on_a_leader(
    server: &puffer_cluster::etcd::LocalEtcd,
    dir: &std::path::Path,
    cluster: &str,
) -> (
    Etcd,
    ClusterLog,
    Database,
    (
        puffer_cluster::etcd::Membership,
        puffer_cluster::etcd::Leadership,
    ),
) {
    let (etcd, _, log, leader, held) = common::leader_on_a_log(server, dir, cluster);
    let schema = Schema::new(
        "id",
        vec![Attribute {
            name: "city".into(),
            attr_type: AttrType::String,
        }],
    )
    .unwrap();
    let layout = TableLayout {
        shards: 3,
        replicas: 1,
    };
    leader.create_table_with("rooms", schema, layout).unwrap();
    (etcd, log, leader, held)
}

#[test]
fn fanned_out_reads_agree_with_a_model_and_survive_a_lost_node() {
    let Some((server, dir)) =
        common::etcd_or_skip("fanned_out_reads_agree_with_a_model_and_survive_a_lost_node")
    else {
        return;
    };
    let (etcd, log, leader, _leadership) = rooms_on_a_leader(&server, dir.path(), "broker");
    let mut model = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for _ in 0..20 {
        let ops: Vec<WriteOp> = (0..20)
            .map(|_| {
                let mut record = Record::new(format!("k{}", rng.gen_range(0..250)).into_bytes());
                let city = CITIES[rng.gen_range(0..CITIES.len())];
                record
                    .values
                    .insert("city".into(), Value::String(city.into()));
                model.insert(record.key.clone(), record.clone());
                WriteOp::Put(record)
            })
            .collect();
        leader.write_batch(vec![("rooms".into(), ops)]).unwrap();
    }

    // Three data nodes, each a follower serving its shards over gRPC.
    let mut nodes: Vec<(Arc<Database>, RpcServer)> = (0..3)
        .map(|i| {
            let database = Arc::new(
                Database::open_with(
                    dir.path().join(format!("data{i}")),
                    DatabaseOptions {
                        following: true,
                        ..common::node_options(&etcd)
                    },
                )
                .unwrap(),
            );
            log.catch_up(&database).unwrap();
            let rpc = RpcServer::start(database.clone(), "127.0.0.1:0".parse().unwrap()).unwrap();
            (database, rpc)
        })
        .collect();
    let broker = Broker::new(
        Box::new(EtcdCatalog::new(etcd.clone())),
        Duration::from_secs(5),
    );
    let addresses: Vec<(String, String)> = nodes
        .iter()
        .enumerate()
        .map(|(i, (_, rpc))| (format!("data{i}"), rpc.address().to_string()))
        .collect();
    broker.set_data_nodes(&addresses).unwrap();
    for step in 0..150 {
        check_read(&broker, &model, &mut rng, step);
    }
    // A data node dies: every read still succeeds and agrees.
    let (_, killed) = nodes.remove(1);
    drop(killed);
    for step in 150..300 {
        check_read(&broker, &model, &mut rng, step);
    }
    // Unknown tables are the caller's error, not a node's.
    let error = broker
        .read(
            "nope",
            &ReadRequest::Count {
                predicate: Predicate::All,
                read: ReadOptions::default(),
            },
        )
        .unwrap_err();
    assert!(matches!(error, QueryError::UnknownTable(_)), "{error}");
    // Every data node gone: the read fails whole, with why.
    nodes.clear();
    let error = broker
        .read(
            "rooms",
            &ReadRequest::Count {
                predicate: Predicate::All,
                read: ReadOptions::default(),
            },
        )
        .unwrap_err();
    assert!(
        matches!(error, QueryError::Store(StoreError::Unavailable(_))),
        "{error}"
    );
    assert!(error.to_string().contains("no data node"), "{error}");
}

/// A read asking for a snapshot the data nodes do not hold yet (as a read after a
/// write through the same node does) waits until they hold it, or gives up at the
/// deadline; the broker counts every fan-out and, of them, those that waited and how
/// long, as the reads made here say.
#[test]
fn reads_ahead_of_the_data_nodes_wait_and_are_counted() {
    let Some((server, dir)) =
        common::etcd_or_skip("reads_ahead_of_the_data_nodes_wait_and_are_counted")
    else {
        return;
    };
    let (etcd, log, leader, _leadership) = rooms_on_a_leader(&server, dir.path(), "waits");
    let write = |from: usize| {
        let ops = (from..from + 10)
            .map(|i| {
                let mut record = Record::new(format!("k{i}").into_bytes());
                record
                    .values
                    .insert("city".into(), Value::String(b"Porto".to_vec()));
                WriteOp::Put(record)
            })
            .collect();
        leader.write_batch(vec![("rooms".into(), ops)]).unwrap();
    };
    write(0);
    let node = Arc::new(
        Database::open_with(
            dir.path().join("data"),
            DatabaseOptions {
                following: true,
                ..common::node_options(&etcd)
            },
        )
        .unwrap(),
    );
    log.catch_up(&node).unwrap();
    let rpc = RpcServer::start(node.clone(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let deadline = Duration::from_secs(1);
    let broker = Broker::new(Box::new(EtcdCatalog::new(etcd.clone())), deadline);
    broker
        .set_data_nodes(&[("data".into(), rpc.address().to_string())])
        .unwrap();
    let count_at_least = |snapshot: u64| {
        let read = ReadOptions {
            min_snapshot: snapshot,
            ..ReadOptions::default()
        };
        broker
            .read(
                "rooms",
                &ReadRequest::Count {
                    predicate: Predicate::All,
                    read,
                },
            )
            .map(|answer| match answer {
                ReadAnswer::Count { count, .. } => count,
                other => panic!("{other:?}"),
            })
    };
    // Held already: no wait.
    assert_eq!(count_at_least(leader.published()).unwrap(), 10);
    let first = broker.snapshot_waits();
    assert_eq!((first.fan_outs, first.waited), (1, 0), "{first:?}");
    // Written since: the read waits until the node has caught up, 300 ms on.
    write(10);
    let catching_up = {
        let (log, node) = (log.clone(), node.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            log.catch_up(&node).unwrap();
        })
    };
    assert_eq!(count_at_least(leader.published()).unwrap(), 20);
    catching_up.join().unwrap();
    let second = broker.snapshot_waits().since(&first);
    assert_eq!((second.fan_outs, second.waited), (1, 1), "{second:?}");
    assert!(
        (0.25..deadline.as_secs_f64()).contains(&second.waited_s),
        "{second:?}"
    );
    // Never written: it waits the whole deadline and fails, saying why.
    let error = count_at_least(leader.published() + 100).unwrap_err();
    assert!(error.to_string().contains("was asked for"), "{error}");
    let third = broker.snapshot_waits().since(&first);
    assert_eq!((third.fan_outs, third.waited), (2, 2), "{third:?}");
    assert!(third.waited_s >= second.waited_s + 0.95, "{third:?}");
}

/// A node answers a `Published` call that waits for a snapshot on the node's side: at
/// once when it holds it, as soon as it has caught up when it does not yet (not at
/// the wait's end), at the wait's end with what it holds when it never does; a wait
/// past the server's bound is refused saying so.
#[test]
fn nodes_wait_for_a_snapshot_on_their_side() {
    use puffer_cluster::rpc::client::{Held, NodeClient};
    use puffer_cluster::rpc::server::MAX_PUBLISHED_WAIT;
    use std::time::Instant;
    let Some((server, dir)) = common::etcd_or_skip("nodes_wait_for_a_snapshot_on_their_side")
    else {
        return;
    };
    let (etcd, log, leader, _leadership) = rooms_on_a_leader(&server, dir.path(), "wake");
    let write = |i: usize| {
        let mut record = Record::new(format!("k{i}").into_bytes());
        record
            .values
            .insert("city".into(), Value::String(b"Faro".to_vec()));
        leader
            .write_batch(vec![("rooms".into(), vec![WriteOp::Put(record)])])
            .unwrap()
    };
    let node = Arc::new(common::follower(&etcd, &dir.path().join("data")));
    let first = write(0);
    assert_eq!(log.catch_up(&node).unwrap(), first);
    let rpc = RpcServer::start(node.clone(), "127.0.0.1:0".parse().unwrap()).unwrap();
    // Waits are cut to half its 10 s deadline: 5 s.
    let client = NodeClient::new(&rpc.address().to_string(), Duration::from_secs(10)).unwrap();
    let held = node.published();
    let answer = |at_least: u64, wait: Duration| {
        client
            .published_at_least(at_least, wait)
            .recv_timeout(Duration::from_secs(30))
            .unwrap()
    };
    // Held: the answer at once, whatever the wait, and it says it did not wait.
    assert_eq!(
        answer(held, Duration::from_secs(5)).unwrap(),
        Held {
            published: held,
            waited: false
        }
    );
    // Not held yet: the node answers once it has caught up (after 300 ms), not at the
    // end of the 5 s wait.
    let ahead = write(100);
    let catching_up = {
        let (log, node) = (log.clone(), node.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            log.catch_up(&node).unwrap();
        })
    };
    let asked = Instant::now();
    let caught_up = answer(ahead, Duration::from_secs(5)).unwrap();
    let took = asked.elapsed();
    assert!(
        caught_up.published >= ahead && caught_up.waited,
        "{caught_up:?}"
    );
    catching_up.join().unwrap();
    assert!(
        (Duration::from_millis(250)..Duration::from_secs(3)).contains(&took),
        "{took:?}"
    );
    // Never held: what the node holds, at the wait's end.
    let asked = Instant::now();
    assert_eq!(
        answer(ahead + 100, Duration::from_millis(300)).unwrap(),
        Held {
            published: node.published(),
            waited: true
        }
    );
    assert!(
        asked.elapsed() >= Duration::from_millis(250),
        "{:?}",
        asked.elapsed()
    );
    // A wait past the bound is refused by the server (the client clamps its own).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = runtime.block_on(async {
        use puffer_cluster::rpc::proto::{replica_client::ReplicaClient, PublishedRequest};
        let mut raw = ReplicaClient::connect(format!("http://{}", rpc.address()))
            .await
            .unwrap();
        raw.published(PublishedRequest {
            at_least: ahead + 100,
            wait_ms: MAX_PUBLISHED_WAIT.as_millis() as u32 + 1,
        })
        .await
        .unwrap_err()
    });
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("at most"), "{refused:?}");
}
