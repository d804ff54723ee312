//! One snapshot for the whole query: while a writer moves units between two tables, one
//! SCU per move (taken from a record of `a`, given to a record of `b`), a query summing
//! both tables must always see the same total, and the snapshots it reports never go
//! back.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use puffer_analytics::{run, AnalyticsOptions};
use puffer_node::{Answer, Database, TableLayout};
use puffer_store::{AttrType, Attribute, ReadOptions, Record, Schema, Value, WriteOp};

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

/// Two tables `a` and `b` of `RECORDS` records of `START` units each, made on `db`.
fn two_tables(db: &Database) {
    let layout = TableLayout {
        shards: 3,
        replicas: 1,
    };
    for table in ["a", "b"] {
        db.create_table_with(table, schema(), layout).unwrap();
        let ops = (0..RECORDS).map(|k| put(k, START)).collect();
        db.write_batch(vec![(table.into(), ops)]).unwrap();
    }
}

/// While a writer moves units from `a` to `b` on `writes`, one SCU per move, queries on
/// `queries` sum both tables: every total is the same, and the snapshots the answers
/// report never go back. Returns them.
fn moves_keep_the_total(writes: &Arc<Database>, queries_on: &Arc<Database>) -> Vec<u64> {
    let done = Arc::new(AtomicBool::new(false));
    // Queries answered so far: the writer waits for one every `MOVES_PER_QUERY` moves, so
    // queries see the writes happen however the two threads are scheduled (on a loaded
    // machine the writer otherwise finished before the third query).
    let queries = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (db, done, queries) = (writes.clone(), done.clone(), queries.clone());
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
        // A writer that panicked ends the loop too; its join below fails the test.
        let finished = done.load(Ordering::SeqCst) || writer.is_finished();
        match run(queries_on, query, None, &AnalyticsOptions::default()).unwrap() {
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
    assert_eq!(*snapshots.last().unwrap(), writes.published());
    snapshots
}

#[test]
fn a_query_over_two_tables_reads_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Database::open(dir.path(), Default::default()).unwrap());
    two_tables(&db);
    moves_keep_the_total(&db, &db);
}

/// A cluster node's remote as a broker node has it, over one data node in this
/// process: snapshots chosen there, every read handed there. It records the snapshots
/// it chose and the snapshot each read asked.
struct ThroughDataNode {
    data: Arc<Database>,
    chosen: Mutex<Vec<u64>>,
    read_at: Mutex<Vec<Option<u64>>>,
}

impl std::fmt::Debug for ThroughDataNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThroughDataNode").finish_non_exhaustive()
    }
}

impl puffer_node::remote::Remote for ThroughDataNode {
    fn reads_elsewhere(&self) -> bool {
        true
    }

    fn read(
        &self,
        table: &str,
        request: &puffer_node::ReadRequest,
    ) -> puffer_query::Result<puffer_node::ReadAnswer> {
        self.read_at.lock().unwrap().push(request.read_options().at);
        Ok(self
            .data
            .read(table, request, puffer_node::Wait::Allowed)?
            .expect("a read allowed to wait answers"))
    }

    fn choose_snapshot(&self, read: ReadOptions) -> Option<puffer_query::Result<u64>> {
        let chosen = self.data.choose_snapshot(read);
        if let Ok(at) = &chosen {
            self.chosen.lock().unwrap().push(*at);
        }
        Some(chosen)
    }

    fn read_regions(
        &self,
        _subspace: &str,
        _request: &puffer_node::ReadRequest,
        _regions: &[u32],
    ) -> puffer_query::Result<puffer_node::ReadAnswer> {
        panic!("the test's tables have no subspaces, yet regions were read")
    }

    fn lead(
        &self,
        _request: puffer_node::remote::LeaderRequest,
    ) -> puffer_query::Result<puffer_node::remote::LeaderResponse> {
        panic!("an analytics query asked a cluster's leader")
    }
}

#[test]
fn a_node_reading_elsewhere_reads_every_table_at_one_snapshot_its_data_node_chose() {
    let dir = tempfile::tempdir().unwrap();
    let catalog: Arc<dyn puffer_node::catalog::Catalog> =
        Arc::new(puffer_node::catalog::MemoryCatalog::new());
    let data = Arc::new(
        Database::open_with(
            dir.path().join("data"),
            puffer_node::DatabaseOptions {
                catalog: Some(catalog.clone()),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    two_tables(&data);
    let remote = Arc::new(ThroughDataNode {
        data: data.clone(),
        chosen: Mutex::new(Vec::new()),
        read_at: Mutex::new(Vec::new()),
    });
    let broker = Arc::new(
        Database::open_with(
            dir.path().join("broker"),
            puffer_node::DatabaseOptions {
                catalog: Some(catalog),
                following: true,
                remote: Some(remote.clone()),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    broker.sync_tables().unwrap();
    let snapshots = moves_keep_the_total(&data, &broker);
    let chosen = remote.chosen.lock().unwrap().clone();
    assert_eq!(
        chosen, snapshots,
        "each query reads the snapshot chosen for it"
    );
    let read_at = remote.read_at.lock().unwrap().clone();
    assert_eq!(
        read_at.len(),
        2 * chosen.len(),
        "two tables per query: {read_at:?}"
    );
    for (i, at) in read_at.iter().enumerate() {
        assert_eq!(*at, Some(chosen[i / 2]), "read {i} of {read_at:?}");
    }
}
