//! Fault injection: a file system that fails every operation after the first N. For many
//! N, a shard ingests SCUs (with seals and compactions) until a write fails; the error is
//! reported, later writes are refused, and after reopening on a healthy file system every
//! acknowledged SCU is present, nothing is partly applied, and nothing is corrupt.

mod common;

use std::sync::Arc;

use common::{schema, Model, Rng};
use puffer_store::clock::SystemClock;
use puffer_store::fs::{FaultyFs, RealFs};
use puffer_store::{Predicate, Query, ReadOptions, Record, Shard, ShardOptions, Value, WriteOp};

fn options() -> ShardOptions {
    ShardOptions {
        log_table_max_records: 8,
        max_pending_batches: 1000,
        background: false,
        ..ShardOptions::default()
    }
}

fn contents(shard: &Shard) -> Vec<Record> {
    shard
        .search(&Query {
            predicate: Predicate::All,
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        })
        .expect("scan")
        .rows
}

/// Runs one history with a fault after `budget` operations; returns whether it tripped.
fn run(budget: u64, seed: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyFs::new(budget);
    let mut model = Model::new();
    let mut rng = Rng(seed | 1);
    let mut in_flight = None;
    let opened = Shard::open_with(
        dir.path(),
        schema(),
        options(),
        Arc::new(faulty.clone()),
        Arc::new(SystemClock),
    );
    if let Ok(shard) = opened {
        for step in 0..200 {
            let outcome = match rng.below(10) {
                0 => shard.seal().map(|_| ()),
                1 => shard.compact(rng.chance(50)).map(|_| ()),
                _ => {
                    let mut state = model.at(model.last_seq()).clone();
                    let mut ops = Vec::new();
                    for _ in 0..1 + rng.below(3) {
                        let key = common::key(rng.below(20));
                        if rng.chance(20) {
                            state.remove(&key);
                            ops.push(WriteOp::Delete(key));
                        } else {
                            let record = Record::new(key.clone()).with("n", Value::Int(step));
                            state.insert(key, record.clone());
                            ops.push(WriteOp::Put(record));
                        }
                    }
                    match shard.write(ops) {
                        Ok(_) => {
                            model.states.push(state);
                            Ok(())
                        }
                        Err(e) => {
                            // Unacknowledged: it may or may not survive; both are allowed.
                            in_flight = Some(state);
                            Err(e)
                        }
                    }
                }
            };
            if let Err(error) = outcome {
                assert!(
                    faulty.tripped(),
                    "budget {budget}: unexpected error {error}"
                );
                let again = shard.write(vec![WriteOp::Delete(b"k00".to_vec())]);
                assert!(
                    again.is_err(),
                    "budget {budget}: the shard keeps accepting writes after {error}"
                );
                break;
            }
        }
    }
    let tripped = faulty.tripped();
    let reopened = Shard::open_with(
        dir.path(),
        schema(),
        options(),
        Arc::new(RealFs),
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| panic!("budget {budget}: reopen failed: {e}"));
    let acked = model.last_seq();
    let found = contents(&reopened);
    let published = reopened.watermarks().published;
    assert!(
        published >= acked,
        "budget {budget}: acknowledged SCU {acked} lost (reopened at {published})"
    );
    let expected: Vec<Record> = model.at(acked).values().cloned().collect();
    if published == acked {
        assert_eq!(found, expected, "budget {budget}: contents after reopen");
    } else {
        // The SCU in flight at the fault became durable although unacknowledged.
        assert_eq!(
            published,
            acked + 1,
            "budget {budget}: more than one unacknowledged SCU"
        );
        let state = in_flight.expect("an SCU was in flight");
        let expected: Vec<Record> = state.into_values().collect();
        assert_eq!(
            found, expected,
            "budget {budget}: contents with the in-flight SCU"
        );
    }
    tripped
}

#[test]
fn faults_lose_nothing_acknowledged() {
    let mut tripped = 0;
    for budget in (0..400).step_by(7) {
        if run(budget, budget * 31 + 7) {
            tripped += 1;
        }
    }
    assert!(tripped > 40, "faults were injected in {tripped} runs");
}
