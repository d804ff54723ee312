//! One snapshot for the whole query: while a writer moves units between two tables, one
//! SCU per move (taken from a record of `a`, given to a record of `b`), a query summing
//! both tables must always see the same total, and the snapshots it reports never go
//! back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use puffer_analytics::{run, AnalyticsOptions};
use puffer_node::{Answer, Database, TableLayout};
use puffer_store::{AttrType, Attribute, Record, Schema, Value, WriteOp};

const RECORDS: i64 = 20;
const START: i64 = 10;
const MOVES: usize = 300;
const MOVES_PER_QUERY: usize = 25;

fn schema() -> Schema {
    let n = Attribute {
        name: "n".into(),
        attr_type: AttrType::Int,
    };
    Schema::new("id", vec![n]).unwrap()
}

fn put(key: i64, n: i64) -> WriteOp {
    let mut record = Record::new(format!("k{key:02}"));
    record.values.insert("n".into(), Value::Int(n));
    WriteOp::Put(record)
}

#[test]
fn a_query_over_two_tables_reads_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open(dir.path(), Default::default()).unwrap());
    let layout = TableLayout {
        shards: 3,
        replicas: 1,
    };
    for table in ["a", "b"] {
        db.create_table_with(table, schema(), layout).unwrap();
        let ops = (0..RECORDS).map(|k| put(k, START)).collect();
        db.write_batch(vec![(table.into(), ops)]).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    // Queries answered so far: the writer waits for one every `MOVES_PER_QUERY` moves, so
    // queries see the writes happen however the two threads are scheduled (on a loaded
    // machine the writer otherwise finished before the third query).
    let queries = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (db, done, queries) = (db.clone(), done.clone(), queries.clone());
        thread::spawn(move || {
            let (mut a, mut b) = (vec![START; RECORDS as usize], vec![START; RECORDS as usize]);
            for step in 0..MOVES {
                if step % MOVES_PER_QUERY == 0 {
                    let seen = queries.load(Ordering::SeqCst);
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while queries.load(Ordering::SeqCst) == seen && Instant::now() < deadline {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
                let (from, to) = (step * 7 % a.len(), step * 11 % b.len());
                a[from] -= 1;
                b[to] += 1;
                db.write_batch(vec![
                    ("a".into(), vec![put(from as i64, a[from])]),
                    ("b".into(), vec![put(to as i64, b[to])]),
                ])
                .unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let query = "SELECT SUM(n) AS total FROM (SELECT n FROM a UNION ALL SELECT n FROM b)";
    let mut snapshots = Vec::new();
    loop {
        let finished = done.load(Ordering::SeqCst);
        match run(&db, query, None, &AnalyticsOptions::default()).unwrap() {
            Answer::Computed { rows, snapshot, .. } => {
                assert_eq!(
                    rows,
                    vec![vec![Some(Value::Int(2 * RECORDS * START))]],
                    "at snapshot {}",
                    snapshot.snapshot
                );
                snapshots.push(snapshot.snapshot);
                queries.fetch_add(1, Ordering::SeqCst);
            }
            other => panic!("{other:?}"),
        }
        if finished {
            break;
        }
    }
    writer.join().unwrap();
    assert!(
        snapshots.windows(2).all(|w| w[0] <= w[1]),
        "snapshots went back: {snapshots:?}"
    );
    let distinct = snapshots.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        distinct >= 3,
        "the queries saw only {distinct} snapshot changes while the writer ran: {snapshots:?}"
    );
    assert_eq!(*snapshots.last().unwrap(), db.published());
}

/// A cluster node's remote that answers nothing: the analytics engine must not get as
/// far as asking it.
#[derive(Debug)]
struct Unreachable;

impl puffer_node::remote::Remote for Unreachable {
    fn reads_elsewhere(&self) -> bool {
        true
    }

    fn read(
        &self,
        _table: &str,
        _request: &puffer_node::ReadRequest,
    ) -> puffer_query::Result<puffer_node::ReadAnswer> {
        panic!("the analytics engine read through a cluster's broker")
    }

    fn lead(
        &self,
        _request: puffer_node::remote::LeaderRequest,
    ) -> puffer_query::Result<puffer_node::remote::LeaderResponse> {
        panic!("the analytics engine asked a cluster's leader")
    }
}

#[test]
fn a_cluster_node_refuses_analytics_queries_until_they_are_consistent_there() {
    let dir = tempfile::tempdir().unwrap();
    let options = puffer_node::DatabaseOptions {
        remote: Some(Arc::new(Unreachable)),
        ..Default::default()
    };
    let db = Arc::new(Database::open_with(dir.path(), options).unwrap());
    let error = run(&db, "SELECT 1 AS one", None, &AnalyticsOptions::default()).unwrap_err();
    assert_eq!(error.code(), "unsupported", "{error}");
    assert!(error.to_string().contains("cluster node"), "{error}");
}
