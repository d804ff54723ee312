//! Replica messages over gRPC: a remote shard answers exactly as the local one does,
//! and both agree with a model (a `BTreeMap`); bad calls and a silent node are clear,
//! bounded errors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use puffer_cluster::rpc::client::{NodeClient, RemoteShard};
use puffer_cluster::rpc::server::RpcServer;
use puffer_node::message::Reply;
use puffer_node::serving::NodeConfig;
use puffer_node::{
    Database, DatabaseOptions, ReadAnswer, ReadRequest, ReplicaRequest, ShardReplicas, TableLayout,
    Wait,
};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, StoreError, Value, WriteOp,
};
use rand::{Rng, SeedableRng};

const CITIES: [&str; 4] = ["Lisbon", "Porto", "Faro", "Braga"];

fn schema() -> Schema {
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

fn record(key: &str, city: &str, price: i64) -> Record {
    let mut record = Record::new(key.as_bytes().to_vec());
    record
        .values
        .insert("city".into(), Value::String(city.as_bytes().to_vec()));
    record.values.insert("price".into(), Value::Int(price));
    record
}

/// The naive match of the predicates this test sends.
fn oracle(predicate: &Predicate, record: &Record) -> bool {
    let city = match record.values.get("city") {
        Some(Value::String(city)) => city.as_slice(),
        _ => return false,
    };
    match predicate {
        Predicate::All => true,
        Predicate::Eq(_, Value::String(wanted)) => city == wanted.as_slice(),
        Predicate::Contains(_, part) => city.windows(part.len()).any(|w| w == part.as_slice()),
        other => panic!("the oracle does not know {other:?}"),
    }
}

fn read_answer(reply: Reply) -> ReadAnswer {
    match reply {
        Reply::Answered(response) => response.into_read().unwrap(),
        Reply::WouldWait(_) => panic!("a waiting read came back unanswered"),
    }
}

/// The answer without what depends on when it was read: the age of the oldest SCU
/// outside the snapshot, and whether the log stage was read (compaction may move
/// rows out of it between two reads of the same snapshot).
fn timeless(answer: &ReadAnswer) -> ReadAnswer {
    let mut answer = answer.clone();
    let snapshot = match &mut answer {
        ReadAnswer::Record { snapshot, .. }
        | ReadAnswer::Raw { snapshot, .. }
        | ReadAnswer::Count { snapshot, .. } => snapshot,
        ReadAnswer::Rows(result) => &mut result.snapshot,
        ReadAnswer::Columns(result) => &mut result.snapshot,
        ReadAnswer::Aggregate(result) => &mut result.snapshot,
    };
    snapshot.age = Duration::ZERO;
    snapshot.read_log = false;
    answer
}

/// A database with table `rooms` (2 shards of 2 replicas) and its model.
fn database(dir: &std::path::Path) -> (Arc<Database>, BTreeMap<Vec<u8>, Record>) {
    let options = DatabaseOptions {
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        ..DatabaseOptions::default()
    };
    let database = Database::open_with(dir, options).unwrap();
    database
        .create_table_with(
            "rooms",
            schema(),
            TableLayout {
                shards: 2,
                replicas: 2,
            },
        )
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut model = BTreeMap::new();
    let ops: Vec<WriteOp> = (0..300)
        .map(|i| {
            let r = record(
                &format!("r{i:04}"),
                CITIES[rng.gen_range(0..CITIES.len())],
                rng.gen_range(10..500),
            );
            model.insert(r.key.clone(), r.clone());
            WriteOp::Put(r)
        })
        .collect();
    database.table("rooms").unwrap().write(ops).unwrap();
    (Arc::new(database), model)
}

#[test]
fn a_remote_shard_answers_as_the_local_one_and_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (database, model) = database(dir.path());
    let server = RpcServer::start(Arc::clone(&database), "127.0.0.1:0".parse().unwrap()).unwrap();
    let node = NodeClient::new(&server.address().to_string(), Duration::from_secs(10)).unwrap();
    let table = database.table("rooms").unwrap();
    let at = database.published();
    let read = ReadOptions {
        at: Some(at),
        ..ReadOptions::default()
    };
    let remote: Vec<RemoteShard> = (0..2)
        .map(|s| RemoteShard::new(node.clone(), "rooms", table.uid(), s, 2))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for step in 0..200 {
        let city = CITIES[rng.gen_range(0..CITIES.len())];
        let request = match rng.gen_range(0..5) {
            0 => ReadRequest::Get {
                key: format!("r{:04}", rng.gen_range(0..330)).into_bytes(),
                read,
            },
            1 => ReadRequest::Count {
                predicate: Predicate::Eq("city".into(), Value::String(city.into())),
                read,
            },
            2 => ReadRequest::Columns {
                query: Query {
                    predicate: Predicate::Eq("city".into(), Value::String(city.into())),
                    projection: Some(vec!["city".into()]),
                    limit: None,
                    read,
                },
            },
            3 => ReadRequest::Aggregate {
                query: puffer_store::AggregateQuery {
                    predicate: Predicate::Eq("city".into(), Value::String(city.into())),
                    group_by: Some("city".into()),
                    bucket: None,
                    aggregates: vec![puffer_store::Aggregate::Rows],
                    max_rows: 1000,
                    read,
                },
            },
            _ => ReadRequest::Search {
                query: Query {
                    predicate: Predicate::Contains("city".into(), city[1..3].into()),
                    projection: None,
                    limit: None,
                    read,
                },
            },
        };
        // Over all shards, remote and local agree; merged, they agree with the model.
        let mut found = Vec::new();
        let mut counted = 0;
        for (s, shard) in remote.iter().enumerate() {
            let wire = read_answer(
                shard
                    .read(ReplicaRequest::Read(request.clone()), Wait::Allowed)
                    .unwrap(),
            );
            let local = read_answer(
                table.held_groups()[s]
                    .read(ReplicaRequest::Read(request.clone()), Wait::Allowed)
                    .unwrap(),
            );
            assert_eq!(timeless(&wire), timeless(&local), "step {step} shard {s}");
            match wire {
                ReadAnswer::Record { record, .. } => found.extend(record),
                ReadAnswer::Rows(rows) => found.extend(rows.rows),
                ReadAnswer::Count { count, .. } => counted += count,
                ReadAnswer::Columns(columns) => {
                    // Every row is the asked city.
                    let column = &columns.columns[0];
                    for row in 0..columns.rows {
                        assert_eq!(column.value(row), Some(Value::String(city.into())));
                    }
                    counted += columns.rows as u64;
                }
                ReadAnswer::Aggregate(result) => {
                    // One group at most, the asked city's.
                    for (value, states) in result.groups {
                        assert_eq!(value, Some(Value::String(city.into())));
                        let [puffer_store::AggregateState::Count(n)] = states[..] else {
                            panic!("{states:?}");
                        };
                        counted += n;
                    }
                }
                ReadAnswer::Raw { .. } => unreachable!(),
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        let expected: Vec<Record> = match &request {
            ReadRequest::Get { key, .. } => model.get(key).cloned().into_iter().collect(),
            ReadRequest::Search { query } => model
                .values()
                .filter(|r| oracle(&query.predicate, r))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        assert_eq!(found, expected, "step {step}");
        if let ReadRequest::Count { predicate, .. }
        | ReadRequest::Columns {
            query: Query { predicate, .. },
        }
        | ReadRequest::Aggregate {
            query: puffer_store::AggregateQuery { predicate, .. },
        } = &request
        {
            let expected = model.values().filter(|r| oracle(predicate, r)).count() as u64;
            assert_eq!(counted, expected, "step {step}");
        }
    }
    // Queued reads (several shards at once) and requests to a replica by number.
    let pending: Vec<_> = remote
        .iter()
        .map(|s| {
            s.submit(ReplicaRequest::Read(ReadRequest::Count {
                predicate: Predicate::All,
                read,
            }))
            .unwrap()
        })
        .collect();
    let total: u64 = pending
        .into_iter()
        .map(|p| match p.wait().unwrap().into_read().unwrap() {
            ReadAnswer::Count { count, .. } => count,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, model.len() as u64);
    for (s, shard) in remote.iter().enumerate() {
        for replica in 0..2 {
            let wire = shard.send_to(replica, ReplicaRequest::Watermarks).unwrap();
            let local = table.held_groups()[s]
                .send_to(replica, ReplicaRequest::Watermarks)
                .unwrap();
            assert_eq!(wire, local);
        }
    }
}

#[test]
fn bad_calls_and_silent_nodes_are_clear_bounded_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = database(dir.path());
    let server = RpcServer::start(Arc::clone(&database), "127.0.0.1:0".parse().unwrap()).unwrap();
    let node = NodeClient::new(&server.address().to_string(), Duration::from_secs(5)).unwrap();
    let uid = database.table("rooms").unwrap().uid();
    let count = || {
        ReplicaRequest::Read(ReadRequest::Count {
            predicate: Predicate::All,
            read: ReadOptions::default(),
        })
    };
    let expect = |answer: puffer_store::Result<puffer_node::ReplicaResponse>, part: &str| {
        let error = answer.unwrap_err();
        assert!(error.to_string().contains(part), "{error}");
        error
    };
    // A table the node does not hold: stale routing, worth a retry elsewhere.
    let error = expect(node.call("nope", uid, 0, None, &count()), "unknown table");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
    let error = expect(node.call("rooms", uid + 1, 0, None, &count()), "uid");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
    // A shard or replica that does not exist: the caller's mistake.
    let error = expect(node.call("rooms", uid, 7, None, &count()), "no shard 7");
    assert!(matches!(error, StoreError::InvalidQuery(_)), "{error}");
    let error = expect(
        node.call("rooms", uid, 0, Some(9), &count()),
        "no replica 9",
    );
    assert!(matches!(error, StoreError::InvalidQuery(_)), "{error}");
    // Bad queries are refused as on one node.
    let bad = ReplicaRequest::Read(ReadRequest::Count {
        predicate: Predicate::Eq("nope".into(), Value::Int(1)),
        read: ReadOptions::default(),
    });
    let error = node.call("rooms", uid, 0, None, &bad).unwrap_err();
    assert!(matches!(error, StoreError::InvalidQuery(_)), "{error}");

    // A node that accepts connections and never answers: Unavailable by the deadline.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let deadline = Duration::from_millis(500);
    let node = NodeClient::new(&silent.local_addr().unwrap().to_string(), deadline).unwrap();
    // It comes back (the deadline ends the wait) with the node's failure.
    let error = node.call("rooms", uid, 0, None, &count()).unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
    // A node that is gone: Unavailable too.
    drop(server);
    let port = puffer_cluster::etcd::local::free_port().unwrap();
    let gone = NodeClient::new(&format!("127.0.0.1:{port}"), deadline).unwrap();
    let error = gone.call("rooms", uid, 0, None, &count()).unwrap_err();
    assert!(matches!(error, StoreError::Unavailable(_)), "{error}");
}

#[test]
fn an_answer_larger_than_a_chunk_comes_whole_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = database(dir.path());
    // Rows of about 20 KB: each shard's answer to a search for all of them is more
    // than one chunk.
    let big = |i: usize| -> String { format!("{i:05}").repeat(4000) };
    let rows = 3 * puffer_cluster::rpc::CHUNK_BYTES / 20_000;
    let ops: Vec<WriteOp> = (0..rows)
        .map(|i| WriteOp::Put(record(&format!("big{i:05}"), &big(i), i as i64)))
        .collect();
    let table = database.table("rooms").unwrap();
    table.write(ops).unwrap();
    let server = RpcServer::start(Arc::clone(&database), "127.0.0.1:0".parse().unwrap()).unwrap();
    let node = NodeClient::new(&server.address().to_string(), Duration::from_secs(30)).unwrap();
    let read = ReadOptions {
        at: Some(database.published()),
        ..ReadOptions::default()
    };
    let request = ReadRequest::Search {
        query: Query {
            predicate: Predicate::All,
            projection: None,
            limit: None,
            read,
        },
    };
    let mut found = 0;
    for s in 0..2 {
        let wire = RemoteShard::new(node.clone(), "rooms", table.uid(), s, 2)
            .read(ReplicaRequest::Read(request.clone()), Wait::Allowed)
            .map(read_answer)
            .unwrap();
        let local = table.held_groups()[s as usize]
            .read(ReplicaRequest::Read(request.clone()), Wait::Allowed)
            .map(read_answer)
            .unwrap();
        assert_eq!(timeless(&wire), timeless(&local), "shard {s}");
        let bytes = puffer_cluster::rpc::encode(&wire).unwrap().len();
        assert!(
            bytes > puffer_cluster::rpc::CHUNK_BYTES,
            "shard {s} answered {bytes} bytes, one chunk"
        );
        let ReadAnswer::Rows(rows) = wire else {
            panic!("a search answered {wire:?}")
        };
        found += rows.rows.len();
    }
    // The big rows and the 300 the table had.
    assert_eq!(found, rows + 300);
}
