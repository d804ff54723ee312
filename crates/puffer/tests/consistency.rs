//! LazyBase's promises on the real server: one SCU is seen whole or not at all, across
//! shards, tables and replicas, and reads never go back, also across a restart; and
//! a server killed at random moments leaves every acknowledged batch whole and no
//! batch in part.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use common::ServeProcess;

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

/// POSTs JSON; the answer's status and JSON body (transport errors as status 0).
fn post(agent: &ureq::Agent, url: &str, body: &Value) -> (u16, Value) {
    let answer = agent
        .post(url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string());
    read_answer(answer)
}

fn get(agent: &ureq::Agent, url: &str) -> (u16, Value) {
    read_answer(agent.get(url).call())
}

fn read_answer(answer: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    match answer {
        Ok(response) => {
            let status = response.status();
            (status, response.into_json().unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(status, response)) => {
            (status, response.into_json().unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

fn create_table(base: &str, name: &str, shards: u32, replicas: u32) {
    let (status, body) = post(
        &agent(),
        &format!("{base}/v1/tables"),
        &json!({"name": name, "key": "id", "attributes": [{"name": "v", "type": "int"}],
                "shards": shards, "replicas": replicas}),
    );
    assert_eq!(status, 201, "{body}");
}

/// The batch that makes pair `i`: a = i and b = -i in `pairs` (different shards), and
/// counter c = i in `counter`, as one SCU.
fn pair_batch(i: i64) -> Value {
    json!({"operations": [
        {"table": "pairs", "put": {"id": "a", "v": i}},
        {"table": "pairs", "put": {"id": "b", "v": -i}},
        {"table": "counter", "put": {"id": "c", "v": i}},
    ]})
}

#[derive(Default)]
struct Tally {
    reads: u64,
    violations: Vec<String>,
}

/// One reader's view: what it saw last, which must never go back.
#[derive(Default, Clone, Copy)]
struct Seen {
    snapshot: u64,
    pair: i64,
    counter: i64,
}

/// Readers alternate an `IN` query over both rows of the pair and a GET of the counter
/// until `stop`; every answer is checked.
fn read_until(base: &str, stop: &AtomicBool, seen: &mut Seen, tally: &Mutex<Tally>) {
    let agent = agent();
    let sql = json!({"query": "SELECT id, v FROM pairs WHERE id IN ('a', 'b')"});
    let mut turn = 0u64;
    while !stop.load(Ordering::SeqCst) {
        turn += 1;
        let mut problems = Vec::new();
        let snapshot;
        if turn.is_multiple_of(2) {
            let (status, body) = post(&agent, &format!("{base}/v1/sql"), &sql);
            if status != 200 {
                continue; // the server is restarting
            }
            let rows = body["rows"].as_array().cloned().unwrap_or_default();
            let value = |key: &str| {
                rows.iter()
                    .find(|r| r["id"] == key)
                    .map_or(0, |r| r["v"].as_i64().expect("v is an int"))
            };
            let (a, b) = (value("a"), value("b"));
            snapshot = body["snapshot"]["seq"].as_u64().expect("a snapshot");
            if a + b != 0 {
                problems.push(format!("half a pair: a={a} b={b} at snapshot {snapshot}"));
            }
            if a < seen.pair {
                problems.push(format!("pair went back from {} to {a}", seen.pair));
            }
            seen.pair = a;
        } else {
            let (status, body) = get(&agent, &format!("{base}/v1/tables/counter/records/c"));
            if status != 200 && status != 404 {
                continue;
            }
            let value = body["record"]["v"].as_i64().unwrap_or(0);
            snapshot = body["snapshot"]["seq"].as_u64().expect("a snapshot");
            if value < seen.counter {
                problems.push(format!(
                    "counter went back from {} to {value}",
                    seen.counter
                ));
            }
            seen.counter = value;
        }
        if snapshot < seen.snapshot {
            problems.push(format!(
                "snapshot went back from {} to {snapshot}",
                seen.snapshot
            ));
        }
        seen.snapshot = snapshot;
        let mut tally = tally.lock().unwrap();
        tally.reads += 1;
        tally.violations.extend(problems);
    }
}

/// One phase of the experiment on a running server: a writer of pairs from `next`
/// and three readers, until the readers made `reads` reads.
fn run_phase(
    base: &str,
    next: &AtomicU64,
    seen: &mut [Seen; 3],
    tally: &Arc<Mutex<Tally>>,
    reads: u64,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let start_reads = tally.lock().unwrap().reads;
    thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let agent = agent();
            while !stop.load(Ordering::SeqCst) {
                let i = next.load(Ordering::SeqCst) as i64;
                let (status, body) = post(&agent, &format!("{base}/v1/batches"), &pair_batch(i));
                assert_eq!(status, 200, "{body}");
                next.fetch_add(1, Ordering::SeqCst);
            }
        });
        let readers: Vec<_> = seen
            .iter_mut()
            .map(|seen| {
                let (stop, tally) = (&stop, tally.clone());
                scope.spawn(move || read_until(base, stop, seen, &tally))
            })
            .collect();
        let started = Instant::now();
        while tally.lock().unwrap().reads - start_reads < reads
            && started.elapsed() < Duration::from_secs(120)
        {
            thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        for reader in readers {
            reader.join().unwrap();
        }
    });
}

#[test]
fn update_pairs_are_seen_whole_and_in_order_across_a_restart() {
    let data = TempDir::new().unwrap();
    let mut server = ServeProcess::start_on(data.path(), &[], &[]);
    create_table(&server.base, "pairs", 4, 2);
    create_table(&server.base, "counter", 1, 3);
    let next = AtomicU64::new(1);
    let mut seen = [Seen::default(); 3];
    let tally = Arc::new(Mutex::new(Tally::default()));
    run_phase(&server.base, &next, &mut seen, &tally, 5_000);
    // A restart in the middle (the process is killed: SIGKILL).
    drop(server);
    server = ServeProcess::start_on(data.path(), &[], &[]);
    run_phase(&server.base, &next, &mut seen, &tally, 5_000);
    let tally = tally.lock().unwrap();
    assert!(
        tally.violations.is_empty(),
        "{} violations in {} reads, e.g. {:?}",
        tally.violations.len(),
        tally.reads,
        &tally.violations[..tally.violations.len().min(5)]
    );
    assert!(tally.reads >= 10_000, "only {} reads", tally.reads);
    assert!(next.load(Ordering::SeqCst) > 20, "too few pairs written");
    drop(server);
}

/// A batch of the crash test: rows `<batch>-<j>` with v = batch, six in the 4-shard
/// table and two in the 1-shard table, as one SCU.
fn crash_batch(batch: u64) -> Value {
    let operations: Vec<Value> = (0..8)
        .map(|j| {
            let table = if j < 6 { "wide" } else { "narrow" };
            json!({"table": table, "put": {"id": format!("{batch}-{j}"), "v": batch}})
        })
        .collect();
    json!({ "operations": operations })
}

/// Rows per batch id of both tables, for batches from `first` on.
fn rows_per_batch(base: &str, first: u64) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for table in ["wide", "narrow"] {
        let query = json!({"query": format!("SELECT id, v FROM {table} WHERE v >= {first}")});
        let (status, body) = post(&agent(), &format!("{base}/v1/sql"), &query);
        assert_eq!(status, 200, "{body}");
        for row in body["rows"].as_array().expect("rows") {
            *counts.entry(row["v"].as_u64().expect("v")).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn a_killed_server_keeps_acknowledged_batches_whole_and_none_in_part() {
    let kills = common::count_from_env("PUFFER_CRASH_KILLS", 50);
    let data = TempDir::new().unwrap();
    let mut server = ServeProcess::start_on(data.path(), &[], &[]);
    create_table(&server.base, "wide", 4, 2);
    create_table(&server.base, "narrow", 1, 1);
    let next_batch = AtomicU64::new(1);
    let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut partial = Vec::new();
    for kill in 0..kills {
        let round_first = next_batch.load(Ordering::SeqCst);
        let acked = Mutex::new(Vec::new());
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let run_for = Duration::from_millis(20 + rng % 200);
        thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let agent = agent();
                    let started = Instant::now();
                    // Writes until the server is gone (then requests fail).
                    while started.elapsed() < run_for + Duration::from_secs(5) {
                        let batch = next_batch.fetch_add(1, Ordering::SeqCst);
                        let (status, body) = post(
                            &agent,
                            &format!("{}/v1/batches", server.base),
                            &crash_batch(batch),
                        );
                        match status {
                            200 => acked.lock().unwrap().push(batch),
                            0 => break,
                            429 | 503 => {}
                            other => panic!("batch {batch}: status {other}: {body}"),
                        }
                    }
                });
            }
            thread::sleep(run_for);
            server.kill();
        });
        drop(server);
        acknowledged.extend(acked.into_inner().unwrap());
        server = ServeProcess::start_on(data.path(), &[], &[]);
        let counts = rows_per_batch(&server.base, round_first);
        for (&batch, &rows) in &counts {
            if rows != 8 {
                partial.push(format!("kill {kill}: batch {batch} has {rows} of 8 rows"));
            }
        }
        for batch in acknowledged.range(round_first..) {
            if counts.get(batch) != Some(&8) {
                partial.push(format!("kill {kill}: acknowledged batch {batch} lost"));
            }
        }
    }
    assert!(partial.is_empty(), "{partial:?}");
    assert!(
        acknowledged.len() as u64 >= kills,
        "too few batches acknowledged ({}) for {kills} kills",
        acknowledged.len()
    );
    eprintln!(
        "{kills} kills, {} batches acknowledged, none lost or partial",
        acknowledged.len()
    );
}
