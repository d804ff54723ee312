//! Model-based test: random SCUs (puts, deletes, replacements) interleaved with seals,
//! compactions, reopenings and queries with random predicates and freshness bounds.
//! Every answer is compared with a `BTreeMap` model at the snapshot the answer reports.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{holds, key, random_predicate, random_record, schema, Model, Rng};
use puffer_store::clock::ManualClock;
use puffer_store::codec;
use puffer_store::fs::RealFs;
use puffer_store::{
    Aggregate, AggregateQuery, AggregateState, Predicate, Query, RawRecord, ReadOptions, Record,
    Shard, ShardOptions, StoreError, Value, WriteOp,
};

const KEYS: u64 = 12;

fn options() -> ShardOptions {
    ShardOptions {
        log_table_max_records: 6,
        max_pending_batches: 1000,
        background: false,
        index: puffer_index::BuildOptions {
            sa_rate: 2,
            isa_rate: 2,
            levels: 2,
            psi_block_len: 4,
            threads: 1,
        },
        ..ShardOptions::default()
    }
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> Shard {
    open_caching(dir, clock, ShardOptions::default().record_cache_bytes)
}

/// Opens with a record cache of `record_cache_bytes` (0: none; small: constant eviction).
fn open_caching(dir: &std::path::Path, clock: &ManualClock, record_cache_bytes: u64) -> Shard {
    Shard::open_with(
        dir,
        schema(),
        ShardOptions {
            record_cache_bytes,
            ..options()
        },
        Arc::new(RealFs),
        Arc::new(clock.clone()),
    )
    .expect("open shard")
}

struct Run {
    rng: Rng,
    model: Model,
    /// Acknowledgement time of each SCU (index = seq).
    acked_micros: Vec<u64>,
    clock: ManualClock,
    last_snapshot: u64,
}

impl Run {
    fn write(&mut self, shard: &Shard) {
        let mut ops = Vec::new();
        let mut state = self.model.at(self.model.last_seq()).clone();
        for _ in 0..1 + self.rng.below(4) {
            if self.rng.chance(25) {
                let k = key(self.rng.below(KEYS));
                state.remove(&k);
                ops.push(WriteOp::Delete(k));
            } else {
                let record = random_record(&mut self.rng, KEYS);
                state.insert(record.key.clone(), record.clone());
                ops.push(WriteOp::Put(record));
            }
        }
        let seq = shard.write(ops).expect("write");
        assert_eq!(
            seq,
            self.model.last_seq() + 1,
            "SCUs are numbered without gaps"
        );
        self.model.states.push(state);
        self.acked_micros.push(self.clock.now_micros_for_test());
    }

    fn read_options(&mut self) -> ReadOptions {
        let freshness = match self.rng.below(4) {
            0 => None,
            1 => Some(Duration::ZERO),
            2 => Some(Duration::from_millis(self.rng.below(3000))),
            _ => Some(Duration::from_secs(3600)),
        };
        let min_snapshot = if self.rng.chance(50) {
            self.last_snapshot
        } else {
            0
        };
        ReadOptions {
            freshness,
            min_snapshot,
            at: None,
        }
    }

    /// Checks the snapshot an answer reports against the freshness asked for.
    fn check_snapshot(&mut self, read: &ReadOptions, snapshot: u64, context: &str) {
        assert!(
            snapshot <= self.model.last_seq(),
            "{context}: future snapshot"
        );
        assert!(
            snapshot >= read.min_snapshot,
            "{context}: snapshot {snapshot} below the asked minimum {}",
            read.min_snapshot
        );
        let now = self.clock.now_micros_for_test();
        let bound = read.freshness.map_or(0, |f| f.as_micros() as u64);
        for seq in 1..=self.model.last_seq() {
            if self.acked_micros[seq as usize] + bound <= now && read.freshness.is_some()
                || read.freshness.is_none()
            {
                assert!(
                    seq <= snapshot,
                    "{context}: SCU {seq} acknowledged long enough ago is not in snapshot {snapshot}"
                );
            }
        }
        self.last_snapshot = self.last_snapshot.max(snapshot);
    }

    fn query(&mut self, shard: &Shard) {
        let predicate = random_predicate(&mut self.rng, 2);
        let read = self.read_options();
        let context = format!("{predicate:?} {read:?}");
        match self.rng.below(4) {
            0 => {
                let (count, info) = shard.count(&predicate, read).expect("count");
                self.check_snapshot(&read, info.snapshot, &context);
                let expected = self
                    .model
                    .at(info.snapshot)
                    .values()
                    .filter(|r| holds(&predicate, r))
                    .count() as u64;
                assert_eq!(count, expected, "count {context} at {}", info.snapshot);
                self.check_aggregate(shard, &predicate, read, &context);
            }
            1 => {
                let k = key(self.rng.below(KEYS));
                let (found, info) = shard.get(&k, read).expect("get");
                self.check_snapshot(&read, info.snapshot, &context);
                assert_eq!(found.as_ref(), self.model.at(info.snapshot).get(&k), "get");
                // The undecoded form decodes to the same record.
                let (raw, schema, info) = shard.get_raw(&k, read).expect("get_raw");
                self.check_snapshot(&read, info.snapshot, &context);
                let types: Vec<_> = schema.attributes.iter().map(|a| a.attr_type).collect();
                let decoded = raw.map(|raw| match raw {
                    RawRecord::Stored(stored) => schema.to_record(&stored),
                    RawRecord::Text { key, text } => {
                        schema.to_record(&codec::decode_record(key, &text, &types).unwrap())
                    }
                });
                assert_eq!(
                    decoded.as_ref(),
                    self.model.at(info.snapshot).get(&k),
                    "raw"
                );
            }
            _ => {
                let limit = if self.rng.chance(30) {
                    Some(self.rng.below(4) as usize)
                } else {
                    None
                };
                // No projection, keys only, or a random subset of the attributes.
                let projection: Option<Vec<String>> = match self.rng.below(3) {
                    0 => None,
                    1 => Some(Vec::new()),
                    _ => Some(
                        ["name", "n", "x", "flag", "t"]
                            .into_iter()
                            .filter(|_| self.rng.chance(50))
                            .map(String::from)
                            .collect(),
                    ),
                };
                let query = Query {
                    predicate: predicate.clone(),
                    projection: projection.clone(),
                    limit,
                    read,
                };
                self.check_columns(shard, &query, &context);
                let result = shard.search(&query).expect("search");
                self.check_snapshot(&read, result.snapshot.snapshot, &context);
                let expected: Vec<Record> = self
                    .model
                    .at(result.snapshot.snapshot)
                    .values()
                    .filter(|r| holds(&predicate, r))
                    .map(|r| {
                        let mut r = r.clone();
                        if let Some(names) = &projection {
                            r.values.retain(|name, _| names.contains(name));
                        }
                        r
                    })
                    .collect();
                match limit {
                    None => assert_eq!(result.rows, expected, "search {context}"),
                    Some(k) => {
                        assert_eq!(result.rows.len(), k.min(expected.len()), "{context}");
                        assert_eq!(result.truncated, expected.len() > k, "{context}");
                        for row in &result.rows {
                            assert!(expected.contains(row), "{context}: {row:?} not expected");
                        }
                    }
                }
            }
        }
    }
}

impl Run {
    /// The same query as a column read (the key asked first, then the projection's
    /// attributes): its rows, as records, are the model's at the snapshot it reports.
    fn check_columns(&mut self, shard: &Shard, query: &Query, context: &str) {
        let attributes: Vec<String> = match &query.projection {
            Some(names) => names.clone(),
            None => ["name", "n", "x", "flag", "t"].map(String::from).to_vec(),
        };
        let mut asked = vec!["id".to_string()];
        asked.extend(attributes.iter().cloned());
        let columns = shard
            .columns(&Query {
                projection: Some(asked),
                ..query.clone()
            })
            .expect("columns");
        self.check_snapshot(&query.read, columns.snapshot.snapshot, context);
        let mut rows: Vec<Record> = (0..columns.rows)
            .map(|row| {
                let key = match columns.columns[0].value(row) {
                    Some(Value::String(key)) => key,
                    other => panic!("{context}: key {other:?}"),
                };
                let mut record = Record::new(key);
                for column in &columns.columns[1..] {
                    assert_eq!(column.len(), columns.rows, "{context}");
                    if let Some(value) = column.value(row) {
                        record.values.insert(column.name.clone(), value);
                    }
                }
                record
            })
            .collect();
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        let expected: Vec<Record> = self
            .model
            .at(columns.snapshot.snapshot)
            .values()
            .filter(|r| holds(&query.predicate, r))
            .map(|r| {
                let mut r = r.clone();
                r.values.retain(|name, _| attributes.contains(name));
                r
            })
            .collect();
        match query.limit {
            None => assert_eq!(rows, expected, "columns {context}"),
            Some(k) => {
                assert_eq!(rows.len(), k.min(expected.len()), "columns {context}");
                assert_eq!(columns.truncated, expected.len() > k, "columns {context}");
                for row in &rows {
                    assert!(expected.contains(row), "columns {context}: {row:?}");
                }
            }
        }
    }

    /// Aggregates grouped by a random attribute, against the model's records: half the
    /// time `COUNT(*)` alone over every record (counted from the suffix array of each
    /// segment and sorted batch), else COUNT, SUM, MIN and MAX under `predicate` (from
    /// column reads).
    fn check_aggregate(
        &mut self,
        shard: &Shard,
        predicate: &Predicate,
        read: ReadOptions,
        context: &str,
    ) {
        let group_by = ["name", "n", "flag", "t"][self.rng.below(4) as usize].to_string();
        let (predicate, aggregates) = if self.rng.chance(50) {
            (Predicate::All, vec![Aggregate::Rows])
        } else {
            let all = vec![
                Aggregate::Rows,
                Aggregate::Count("x".into()),
                Aggregate::Sum("n".into()),
                Aggregate::Min("name".into()),
                Aggregate::Max("t".into()),
            ];
            (predicate.clone(), all)
        };
        let query = AggregateQuery {
            predicate: predicate.clone(),
            group_by: Some(group_by.clone()),
            bucket: None,
            aggregates: aggregates.clone(),
            max_rows: 1_000_000,
            read,
        };
        let result = shard.aggregate(&query).expect("aggregate");
        self.check_snapshot(&read, result.snapshot.snapshot, context);
        assert!(!result.truncated, "{context}");
        // The model's groups: (value, records, values of x, sum of n and values of n,
        // least name, greatest t).
        type Expected = (
            Option<Value>,
            u64,
            u64,
            (i128, u64),
            Option<Value>,
            Option<Value>,
        );
        let mut expected: Vec<Expected> = Vec::new();
        for record in self.model.at(result.snapshot.snapshot).values() {
            if !holds(&predicate, record) {
                continue;
            }
            let value = record.values.get(&group_by).cloned();
            let at = match expected.iter().position(|g| g.0 == value) {
                Some(at) => at,
                None => {
                    expected.push((value, 0, 0, (0, 0), None, None));
                    expected.len() - 1
                }
            };
            let group = &mut expected[at];
            group.1 += 1;
            group.2 += u64::from(record.values.contains_key("x"));
            if let Some(Value::Int(n)) = record.values.get("n") {
                group.3 .0 += i128::from(*n);
                group.3 .1 += 1;
            }
            if let Some(name) = record.values.get("name") {
                if group
                    .4
                    .as_ref()
                    .is_none_or(|least| name.cmp_same_type(least) == Some(std::cmp::Ordering::Less))
                {
                    group.4 = Some(name.clone());
                }
            }
            if let Some(t) = record.values.get("t") {
                if group
                    .5
                    .as_ref()
                    .is_none_or(|most| t.cmp_same_type(most) == Some(std::cmp::Ordering::Greater))
                {
                    group.5 = Some(t.clone());
                }
            }
        }
        assert_eq!(
            result.groups.len(),
            expected.len(),
            "aggregate {context} by {group_by}: {:?}",
            result.groups
        );
        for (value, states) in &result.groups {
            let group = expected
                .iter()
                .find(|g| g.0 == *value)
                .unwrap_or_else(|| panic!("aggregate {context}: no group {value:?} in the model"));
            let mut want = vec![AggregateState::Count(group.1)];
            if aggregates.len() > 1 {
                want.push(AggregateState::Count(group.2));
                want.push(AggregateState::Sum {
                    int: group.3 .0,
                    float: 0.0,
                    values: group.3 .1,
                });
                want.push(AggregateState::Min(group.4.clone()));
                want.push(AggregateState::Max(group.5.clone()));
            }
            assert_eq!(
                *states, want,
                "aggregate {context} by {group_by}, group {value:?}"
            );
        }
    }

    /// Adds or drops attribute and column layers on random segments and attributes:
    /// answers must not change (queries take records from a layer where one covers
    /// their entries, and values from column layers).
    fn change_attribute_layers(&mut self, shard: &Shard) {
        for segment in shard.segments() {
            for attribute in 0..ATTRIBUTES {
                match self.rng.below(3) {
                    0 => {
                        let layer = segment
                            .build_attribute_layer(attribute)
                            .expect("build an attribute layer");
                        segment.add_attribute_layer(layer);
                    }
                    1 => {
                        segment.drop_attribute_layer(attribute);
                    }
                    _ => {}
                }
                match self.rng.below(3) {
                    0 => {
                        let types: Vec<_> =
                            schema().attributes.iter().map(|a| a.attr_type).collect();
                        let layer = segment
                            .build_column_layer(attribute, &types)
                            .expect("build a column layer");
                        segment.add_column_layer(layer);
                    }
                    1 => {
                        segment.drop_column_layer(attribute);
                    }
                    _ => {}
                }
            }
            // The decoded keys come and go with the attribute layers.
            assert_eq!(
                segment.decoded_key_bytes() > 0,
                !segment.attribute_layer_attributes().is_empty(),
                "segment {}: decoded keys of {} bytes with attribute layers {:?}",
                segment.id,
                segment.decoded_key_bytes(),
                segment.attribute_layer_attributes()
            );
        }
    }
}

/// Attributes of the test schema (`common::schema`).
const ATTRIBUTES: u16 = 5;

trait NowForTest {
    fn now_micros_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_micros_for_test(&self) -> u64 {
        use puffer_store::clock::Clock;
        self.now_micros()
    }
}

fn run_seed(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000_000);
    let mut run = Run {
        rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        model: Model::new(),
        acked_micros: vec![0],
        clock: clock.clone(),
        last_snapshot: 0,
    };
    // Reads through no cache, a cache that evicts all the time, and a roomy one.
    let cache_bytes = [0, 3_000, 4 << 20][seed as usize % 3];
    let mut shard = open_caching(dir.path(), &clock, cache_bytes);
    for _ in 0..steps {
        match run.rng.below(20) {
            0..=6 => run.write(&shard),
            7 => shard.seal().expect("seal"),
            8 => {
                let all = run.rng.chance(50);
                shard.compact(all).expect("compact");
            }
            9 => {
                drop(shard);
                shard = open_caching(dir.path(), &clock, cache_bytes);
            }
            10 => clock.advance_micros(run.rng.below(2_000_000)),
            11 => run.change_attribute_layers(&shard),
            _ => run.query(&shard),
        }
    }
    // Everything survives a final reopen.
    drop(shard);
    let shard = open(dir.path(), &clock);
    let result = shard
        .search(&Query {
            predicate: puffer_store::Predicate::All,
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        })
        .unwrap();
    let expected: Vec<Record> = run
        .model
        .at(run.model.last_seq())
        .values()
        .cloned()
        .collect();
    assert_eq!(result.rows, expected, "seed {seed}: final contents");
}

#[test]
fn random_histories_match_the_model() {
    let seeds: u64 = std::env::var("PUFFER_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    for seed in 0..seeds {
        run_seed(seed, 150);
    }
}

#[test]
fn invalid_batches_apply_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1);
    let shard = open(dir.path(), &clock);
    let good = Record::new("a").with("n", puffer_store::Value::Int(1));
    let bad_type = Record::new("b").with("n", puffer_store::Value::str("x"));
    let unknown = Record::new("c").with("nope", puffer_store::Value::Int(1));
    let no_key = Record::new("").with("n", puffer_store::Value::Int(1));
    for bad in [bad_type, unknown, no_key] {
        let error = shard
            .write(vec![WriteOp::Put(good.clone()), WriteOp::Put(bad.clone())])
            .unwrap_err();
        assert!(matches!(error, StoreError::InvalidRecord { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("field"), "{message}");
    }
    let (found, _) = shard.get(b"a", ReadOptions::default()).unwrap();
    assert_eq!(found, None, "nothing of a refused batch is applied");
    assert_eq!(shard.write(vec![WriteOp::Put(good)]).unwrap(), 1);
}

#[test]
fn the_schema_gains_attributes_durably() {
    use puffer_store::{AttrType, Attribute, Predicate, Value};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1);
    let shard = open(dir.path(), &clock);
    let color = Attribute {
        name: "color".into(),
        attr_type: AttrType::String,
    };
    let painted = Record::new("p").with("color", Value::str("red"));
    // An attribute can be added and used in one SCU.
    shard
        .write(vec![
            WriteOp::AddAttribute(color.clone()),
            WriteOp::Put(painted.clone()),
        ])
        .unwrap();
    let again = shard.write(vec![WriteOp::AddAttribute(color)]).unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");
    shard.compact_all().unwrap();
    drop(shard);
    let shard = open(dir.path(), &clock);
    assert_eq!(shard.schema().id_of("color"), Some(5));
    let red = Predicate::Eq("color".into(), Value::str("red"));
    let (count, _) = shard.count(&red, ReadOptions::default()).unwrap();
    assert_eq!(count, 1);
    let (found, _) = shard.get(b"p", ReadOptions::default()).unwrap();
    assert_eq!(found, Some(painted));
}

#[test]
fn a_shard_opens_once_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1);
    let first = open(dir.path(), &clock);
    let second = Shard::open_with(
        dir.path(),
        schema(),
        options(),
        Arc::new(RealFs),
        Arc::new(clock.clone()),
    );
    assert!(
        matches!(second, Err(StoreError::InUse { .. })),
        "a second open must be refused"
    );
    drop(first);
    let reopened = open(dir.path(), &clock);
    assert_eq!(reopened.watermarks().published, 0);
}
