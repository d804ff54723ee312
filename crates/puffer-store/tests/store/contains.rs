//! Substring predicates (contains, suffix, whole-record contains, and conjunctions of
//! them with each other, equality, ranges and existence) against a naive scan,
//! on records built to trip the occurrence placement: 40 attributes, so that attribute
//! bytes are also digits; integers, whose encodings are letters and digits; values with
//! escaped bytes and the letters that follow escapes; short fields and fields long enough
//! for the long-field directory. Checked in every stage: log table, sorted batch,
//! segment, a segment with a log on top, and a segment written without the directory;
//! with and without a limit.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use puffer_store::container::{decode_sections, encode_sections};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Shard, ShardOptions, Value,
    WriteOp,
};

const ATTRIBUTES: usize = 40;
const ALPHABET: &[u8] = b"0123456789@ABab~\x00\x01\x02";

/// xorshift64*: deterministic randomness from a seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
    fn bytes(&mut self, len: u64) -> Vec<u8> {
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
            .collect()
    }
}

fn name(attribute: usize) -> String {
    format!("a{attribute}")
}

fn is_int(attribute: usize) -> bool {
    attribute % 5 == 4
}

fn schema() -> Schema {
    let attributes = (0..ATTRIBUTES)
        .map(|a| Attribute {
            name: name(a),
            attr_type: if is_int(a) {
                AttrType::Int
            } else {
                AttrType::String
            },
        })
        .collect();
    Schema::new("id", attributes).unwrap()
}

fn random_record(rng: &mut Rng, key: u64) -> Record {
    let mut record = Record::new(format!("k{key:04}").into_bytes());
    for a in 0..ATTRIBUTES {
        if rng.below(100) < 55 {
            continue;
        }
        let value = if is_int(a) {
            Value::Int(rng.below(2_000_000) as i64 - 1_000_000)
        } else {
            let len = if rng.below(4) == 0 {
                20 + rng.below(70)
            } else {
                rng.below(7)
            };
            Value::String(rng.bytes(len))
        };
        record = record.with(&name(a), value);
    }
    record
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// The oracle, on the record as written.
fn holds(predicate: &Predicate, record: &Record) -> bool {
    let text = |attribute: &str| match record.values.get(attribute) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    match predicate {
        Predicate::Contains(a, p) => text(a).is_some_and(|s| contains(&s, p)),
        Predicate::Suffix(a, p) => text(a).is_some_and(|s| s.ends_with(p)),
        Predicate::RecordContains(p) => record.values.values().any(|v| match v {
            Value::String(s) => contains(s, p),
            _ => false,
        }),
        Predicate::Exists(a) => record.values.contains_key(a),
        Predicate::Eq(a, v) => record.values.get(a) == Some(v),
        Predicate::Range {
            attribute,
            lower,
            upper,
        } => match record.values.get(attribute) {
            Some(Value::Int(x)) => {
                let above = match lower {
                    Bound::Included(Value::Int(l)) => x >= l,
                    Bound::Excluded(Value::Int(l)) => x > l,
                    _ => true,
                };
                let below = match upper {
                    Bound::Included(Value::Int(u)) => x <= u,
                    Bound::Excluded(Value::Int(u)) => x < u,
                    _ => true,
                };
                above && below
            }
            _ => false,
        },
        Predicate::And(children) => children.iter().all(|c| holds(c, record)),
        other => unreachable!("not generated: {other:?}"),
    }
}

/// A substring condition, or (one time in two) a conjunction of two or three
/// conditions: substrings, an attribute's existence, equality with a stored value, an
/// integer range. Planned on one of them and the others checked on the decoded record,
/// or answered by intersecting what the index finds for each.
fn random_predicate(rng: &mut Rng, records: &BTreeMap<Vec<u8>, Record>) -> Predicate {
    let first = random_substring_predicate(rng, records);
    if rng.below(2) != 0 {
        return first;
    }
    let mut children = vec![first];
    for _ in 0..1 + rng.below(2) {
        children.push(match rng.below(4) {
            0 => random_substring_predicate(rng, records),
            1 => Predicate::Exists(name(rng.below(ATTRIBUTES as u64) as usize)),
            2 => random_equality(rng, records),
            _ => random_range(rng),
        });
    }
    Predicate::And(children)
}

/// An attribute equal to a value some record holds (or, without records, to nothing).
fn random_equality(rng: &mut Rng, records: &BTreeMap<Vec<u8>, Record>) -> Predicate {
    let attribute = name(rng.below(ATTRIBUTES as u64) as usize);
    let held: Vec<&Value> = records
        .values()
        .filter_map(|r| r.values.get(&attribute))
        .collect();
    match held.get(rng.below(held.len() as u64) as usize) {
        Some(&value) => Predicate::Eq(attribute, value.clone()),
        None => Predicate::Eq(attribute, Value::String(b"absent".to_vec())),
    }
}

/// An integer attribute within bounds that hold about a quarter to all of its values.
fn random_range(rng: &mut Rng) -> Predicate {
    let attribute = (rng.below((ATTRIBUTES / 5) as u64) as usize) * 5 + 4;
    let low = rng.below(2_000_000) as i64 - 1_000_000;
    let high = low + rng.below(2_000_000) as i64;
    let bound = |value: i64, rng: &mut Rng| match rng.below(3) {
        0 => Bound::Included(Value::Int(value)),
        1 => Bound::Excluded(Value::Int(value)),
        _ => Bound::Unbounded,
    };
    Predicate::Range {
        attribute: name(attribute),
        lower: bound(low, rng),
        upper: bound(high, rng),
    }
}

fn random_substring_predicate(rng: &mut Rng, records: &BTreeMap<Vec<u8>, Record>) -> Predicate {
    // Half the patterns are cut from stored values (so they match somewhere), half are
    // random (digits and letters also found in attribute bytes and integers).
    let pattern = if rng.below(2) == 0 && !records.is_empty() {
        let record = records
            .values()
            .nth(rng.below(records.len() as u64) as usize)
            .unwrap();
        let values: Vec<Vec<u8>> = record
            .values
            .values()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Int(x) => x.to_string().into_bytes(),
                _ => Vec::new(),
            })
            .collect();
        let value = values
            .get(rng.below(values.len() as u64) as usize)
            .cloned()
            .unwrap_or_default();
        let from = rng.below(value.len() as u64 + 1) as usize;
        let to = from + rng.below((value.len() - from).min(6) as u64 + 1) as usize;
        value[from..to].to_vec()
    } else {
        let len = 1 + rng.below(3);
        rng.bytes(len)
    };
    let mut attribute = rng.below(ATTRIBUTES as u64) as usize;
    if is_int(attribute) {
        attribute -= 1;
    }
    match rng.below(3) {
        0 => Predicate::Contains(name(attribute), pattern),
        1 => Predicate::Suffix(name(attribute), pattern),
        _ => Predicate::RecordContains(pattern),
    }
}

fn check(shard: &Shard, model: &BTreeMap<Vec<u8>, Record>, rng: &mut Rng, stage: &str) {
    for _ in 0..150 {
        let predicate = random_predicate(rng, model);
        let expected: Vec<Vec<u8>> = model
            .values()
            .filter(|r| holds(&predicate, r))
            .map(|r| r.key.clone())
            .collect();
        let query = Query {
            predicate: predicate.clone(),
            projection: Some(Vec::new()),
            limit: None,
            read: ReadOptions::default(),
        };
        let found: Vec<Vec<u8>> = shard
            .search(&query)
            .expect("search")
            .rows
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(found, expected, "{stage}: search {predicate:?}");
        // Under a limit, any that many of the matches (located spread over the entries,
        // occurrences in short fields placed last).
        let limit = [1, 3, 20, 100][rng.below(4) as usize];
        let limited = shard
            .search(&Query {
                limit: Some(limit),
                ..query
            })
            .expect("search with a limit");
        let keys: Vec<&Vec<u8>> = limited.rows.iter().map(|r| &r.key).collect();
        assert_eq!(
            keys.len(),
            limit.min(expected.len()),
            "{stage}: {predicate:?} limit {limit}"
        );
        assert_eq!(
            limited.truncated,
            expected.len() > limit,
            "{stage}: truncated"
        );
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "{stage}: sorted, no repeats"
        );
        assert!(
            keys.iter().all(|k| expected.contains(k)),
            "{stage}: {predicate:?} limit {limit}: a row that does not match"
        );
        let (count, _) = shard
            .count(&predicate, ReadOptions::default())
            .expect("count");
        assert_eq!(count, expected.len() as u64, "{stage}: count {predicate:?}");
    }
}

fn options() -> ShardOptions {
    ShardOptions {
        log_table_max_records: 100_000,
        background: false,
        index: puffer_index::BuildOptions {
            sa_rate: 4,
            isa_rate: 4,
            levels: 2,
            psi_block_len: 8,
            threads: 1,
        },
        ..ShardOptions::default()
    }
}

fn write(
    shard: &Shard,
    model: &mut BTreeMap<Vec<u8>, Record>,
    rng: &mut Rng,
    keys: std::ops::Range<u64>,
) {
    for chunk in keys.collect::<Vec<_>>().chunks(50) {
        let records: Vec<Record> = chunk.iter().map(|&k| random_record(rng, k)).collect();
        for record in &records {
            model.insert(record.key.clone(), record.clone());
        }
        shard
            .write(records.into_iter().map(WriteOp::Put).collect())
            .expect("write");
    }
}

/// Rewrites every segment's meta file without its long-field section, as segments
/// written before the directory existed were.
fn strip_long_fields(dir: &Path) -> usize {
    let mut stripped = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "meta") {
            let bytes = std::fs::read(&path).unwrap();
            let sections = decode_sections(&bytes, *b"PUFFSEGM", 1).unwrap();
            let kept: Vec<(u32, Vec<u8>)> = sections
                .iter()
                .filter(|s| s.kind != 4)
                .map(|s| (s.kind, bytes[s.range.clone()].to_vec()))
                .collect();
            assert!(kept.len() < sections.len(), "a long-field section to strip");
            let kept: Vec<(u32, &[u8])> = kept.iter().map(|(k, b)| (*k, b.as_slice())).collect();
            std::fs::write(&path, encode_sections(*b"PUFFSEGM", 1, &kept)).unwrap();
            stripped += 1;
        }
    }
    stripped
}

#[test]
fn substring_predicates_agree_with_a_scan_in_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5eed_c0de);
    let mut model = BTreeMap::new();
    let shard = Shard::open(dir.path(), schema(), options()).unwrap();

    write(&shard, &mut model, &mut rng, 0..300);
    check(&shard, &model, &mut rng, "log table");
    shard.seal().unwrap();
    check(&shard, &model, &mut rng, "sorted batch");
    shard.compact_all().unwrap();
    check(&shard, &model, &mut rng, "segment");

    // Replace some records and add others: a segment with deletions, plus a log.
    write(&shard, &mut model, &mut rng, 250..400);
    check(&shard, &model, &mut rng, "segment and log");
    shard.compact_all().unwrap();
    check(&shard, &model, &mut rng, "compacted segment");
    shard.close();

    assert_eq!(strip_long_fields(dir.path()), 1);
    let shard = Shard::open(dir.path(), schema(), options()).unwrap();
    check(
        &shard,
        &model,
        &mut rng,
        "segment without the long-field directory",
    );
}
