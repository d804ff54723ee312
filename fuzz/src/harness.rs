// The fuzz targets' bodies and oracles. Each function takes arbitrary bytes and panics
// only when an oracle is broken (or the code under test panics, which is the finding
// itself); it returns whether the input was accepted and its oracle ran (every valid
// seed must be). Included by path in `crates/puffer/tests/fuzz_corpora.rs`, which replays the
// checked-in corpora on stable, so it names its dependencies by crate and keeps its
// scratch files in one directory per thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use puffer_index::TextIndex;
use puffer_query::sql::{parse, SchemaSource};
use puffer_store::query::Compiled;
use puffer_store::schema::StoredRecord;
use puffer_store::{AttrType, Attribute, Predicate, Record, Schema, Value};

/// Largest text whose whole extract the index oracle compares (fuzzed files are small).
const MAX_CHECKED_TEXT: u64 = 1 << 16;

/// A directory of this thread's own, emptied before each use.
fn scratch(name: &str) -> PathBuf {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().expect("a scratch directory");
    }
    let dir = DIR.with(|dir| dir.path().join(name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch subdirectory");
    dir
}

/// Occurrences of `pattern` in `text`, by a scan.
fn naive_positions(text: &[u8], pattern: &[u8]) -> Vec<u64> {
    if pattern.is_empty() || pattern.len() > text.len() {
        return Vec::new();
    }
    (0..=text.len() - pattern.len())
        .filter(|&i| &text[i..i + pattern.len()] == pattern)
        .map(|i| i as u64)
        .collect()
}

/// An index file: opening never panics, and an index that opens answers counts and
/// searches that agree with a scan of its own extracted text. The index keeps its
/// checksums even in a fuzz build: its inner structures (Psi, samples) are trusted
/// once their checksums hold, and validating each decoded value would cost the index's
/// speed (docs/reliability.md).
pub fn index_file(data: &[u8]) -> bool {
    let dir = scratch("index");
    let path = dir.join("fuzz.pidx");
    std::fs::write(&path, data).expect("write the input");
    let Ok(index) = TextIndex::open(&path) else {
        return false;
    };
    let len = index.text_len();
    if len > MAX_CHECKED_TEXT {
        return false;
    }
    let Ok(text) = index.extract(0, len) else {
        return false;
    };
    // Patterns drawn from the text itself (so they occur), at a few places and lengths.
    for start in [
        0,
        text.len() / 3,
        text.len() / 2,
        text.len().saturating_sub(3),
    ] {
        for width in 1..=4 {
            let Some(pattern) = text.get(start..start + width) else {
                continue;
            };
            let expected = naive_positions(&text, pattern);
            let count = index.count(pattern);
            let found = index.search(pattern, Some(1024));
            if let Ok(count) = count {
                assert_eq!(count, expected.len() as u64, "count of {pattern:?}");
            }
            if let Ok(mut found) = found {
                found.sort_unstable();
                let expected: Vec<u64> = expected.into_iter().take(1024).collect();
                found.truncate(1024);
                assert_eq!(found, expected, "search for {pattern:?}");
            }
        }
    }
    true
}

/// The length-prefixed split of `data` into two files' contents.
fn two_parts(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<4>() else {
        return (data, &[]);
    };
    let first = (u32::from_le_bytes(*head) as usize).min(rest.len());
    rest.split_at(first)
}

/// A segment (index file and meta container, length-prefixed): opening never panics,
/// and a segment that opens reads its records, keys strictly ascending.
pub fn segment(data: &[u8]) -> bool {
    let (index, meta) = two_parts(data);
    let dir = scratch("segment");
    std::fs::write(dir.join(puffer_store::segment::index_file_name(1)), index)
        .expect("write the index");
    std::fs::write(dir.join(puffer_store::segment::meta_file_name(1)), meta)
        .expect("write the meta");
    let Ok(segment) = puffer_store::segment::Segment::open(&dir, 1, None) else {
        return false;
    };
    if segment.index().text_len() > MAX_CHECKED_TEXT {
        return false;
    }
    let Ok(records) = segment.live_records(u64::MAX) else {
        return false;
    };
    if !cfg!(fuzzing) {
        for pair in records.windows(2) {
            assert!(pair[0].0 < pair[1].0, "keys out of order: {pair:?}");
        }
    }
    true
}

/// Segment meta containers' magic and version (the container reader is generic).
const CONTAINER_MAGIC: [u8; 8] = *b"PUFFSEGM";
const CONTAINER_VERSION: u32 = 1;

/// A container: decoding never panics, and what decodes encodes to a container that
/// decodes to the same sections.
pub fn container(data: &[u8]) -> bool {
    use puffer_store::container::{decode_sections, encode_sections};
    let Ok(sections) = decode_sections(data, CONTAINER_MAGIC, CONTAINER_VERSION) else {
        return false;
    };
    let parts: Vec<(u32, &[u8])> = sections
        .iter()
        .map(|s| (s.kind, &data[s.range.clone()]))
        .collect();
    let again = encode_sections(CONTAINER_MAGIC, CONTAINER_VERSION, &parts);
    let decoded = decode_sections(&again, CONTAINER_MAGIC, CONTAINER_VERSION)
        .expect("a container just encoded decodes");
    let parts_again: Vec<(u32, &[u8])> = decoded
        .iter()
        .map(|s| (s.kind, &again[s.range.clone()]))
        .collect();
    assert_eq!(parts, parts_again);
    true
}

/// Log records and a log file: decoding never panics; decoded records encode back to
/// the same bytes; operations decode, encode and decode to the same operations; a log
/// file replays without panicking.
pub fn wal(data: &[u8]) -> bool {
    use puffer_store::wal::{decode_ops, decode_records, encode_ops, encode_record_parts, replay};
    let mut accepted = false;
    if let Ok(records) = decode_records(data) {
        accepted = true;
        let mut again = Vec::new();
        for record in &records {
            encode_record_parts(record.seq, record.commit_micros, record.body, &mut again);
        }
        // As records, not bytes: a fuzz build takes bad checksums as good, and encoding
        // writes good ones.
        let fields = |records: &[puffer_store::wal::LoggedRecord<'_>]| {
            records
                .iter()
                .map(|r| (r.seq, r.commit_micros, r.body.to_vec()))
                .collect::<Vec<_>>()
        };
        let decoded_again = decode_records(&again).expect("records just encoded decode");
        assert_eq!(
            fields(&decoded_again),
            fields(&records),
            "records re-encoded"
        );
        if !cfg!(fuzzing) {
            assert_eq!(again, data, "records re-encoded");
        }
    }
    if let Ok(ops) = decode_ops(data) {
        accepted = true;
        let encoded = encode_ops(&ops);
        let ops_again = decode_ops(&encoded).expect("operations just encoded decode");
        // Compared as bytes: a float NaN is not equal to itself.
        assert_eq!(encode_ops(&ops_again), encoded, "operations re-encoded");
    }
    let dir = scratch("wal");
    std::fs::write(dir.join(puffer_store::wal::file_name(1)), data).expect("write the log");
    accepted |= replay(&dir, 0).is_ok_and(|scus| !scus.is_empty());
    accepted
}

/// A manifest file: loading never panics, and a manifest that loads stores and loads
/// back equal.
pub fn manifest(data: &[u8]) -> bool {
    use puffer_store::manifest::{Manifest, MANIFEST_FILE};
    let dir = scratch("manifest");
    std::fs::write(dir.join(MANIFEST_FILE), data).expect("write the manifest");
    let Ok(Some(manifest)) = Manifest::load(&dir) else {
        return false;
    };
    let again = scratch("manifest-again");
    manifest
        .store(&puffer_store::fs::RealFs, &again)
        .expect("store a manifest");
    let loaded = Manifest::load(&again)
        .expect("load a manifest just stored")
        .expect("a manifest");
    assert_eq!(loaded, manifest);
    true
}

/// The schema of the fuzzed SQL's one table `t`, and of the JSON requests.
fn schema() -> Arc<Schema> {
    let attribute = |name: &str, attr_type| Attribute {
        name: name.into(),
        attr_type,
    };
    Arc::new(
        Schema::new(
            "id",
            vec![
                attribute("name", AttrType::String),
                attribute("n", AttrType::Int),
                attribute("price", AttrType::Float),
                attribute("ok", AttrType::Bool),
                attribute("ts", AttrType::Timestamp),
            ],
        )
        .expect("a valid schema"),
    )
}

struct OneTable;

impl SchemaSource for OneTable {
    fn schema_of(&self, table: &str) -> puffer_query::Result<Arc<Schema>> {
        if table == "t" {
            Ok(schema())
        } else {
            Err(puffer_query::QueryError::UnknownTable(table.into()))
        }
    }
}

/// SQL text: parsing and planning never panic, and a statement that sqlparser prints
/// and reads back unchanged plans the same printed as written.
pub fn sql(data: &[u8]) -> bool {
    use sqlparser::dialect::GenericDialect;
    use sqlparser::parser::Parser;
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let planned = parse(text, &OneTable);
    let accepted = planned.is_ok();
    // Only short texts go through sqlparser here: our own parse bounds size and nesting
    // before it hands text to sqlparser, and a deep text would overflow this stack.
    if text.len() > 2048
        || planned
            .as_ref()
            .is_err_and(|e| e.code() == "limit_exceeded")
    {
        return accepted;
    }
    let Ok(statements) = Parser::parse_sql(&GenericDialect {}, text) else {
        return accepted;
    };
    let [statement] = statements.as_slice() else {
        return accepted;
    };
    let printed = statement.to_string();
    let Ok(reread) = Parser::parse_sql(&GenericDialect {}, &printed) else {
        return accepted;
    };
    if reread.as_slice() != std::slice::from_ref(statement) {
        return accepted; // sqlparser's own round trip does not hold: not ours to judge
    }
    let planned_again = parse(&printed, &OneTable);
    match (&planned, &planned_again) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?} printed as {printed:?}"),
        (Err(a), Err(b)) => assert_eq!(a.code(), b.code(), "{text:?} printed as {printed:?}"),
        _ => {
            panic!("{text:?} planned {planned:?}, printed as {printed:?} planned {planned_again:?}")
        }
    }
    accepted
}

/// Records the predicate oracle evaluates on.
fn sample_records(schema: &Schema) -> Vec<StoredRecord> {
    let mut records = Vec::new();
    for (i, name) in ["", "a", "abc", "zz"].iter().enumerate() {
        let mut record = Record::new(format!("k{i}").into_bytes())
            .with("name", Value::String(name.as_bytes().to_vec()));
        if i % 2 == 0 {
            record = record
                .with("n", Value::Int(i as i64 * 7 - 5))
                .with("price", Value::Float(i as f64 * 1.5));
        }
        if i != 3 {
            record = record
                .with("ok", Value::Bool(i == 1))
                .with("ts", Value::Timestamp(1_700_000_000_000_000 + i as i64));
        }
        records.push(schema.validate(record).expect("a sample record is valid"));
    }
    records
}

/// A JSON request body as a predicate, a record and a batch of records: never a panic; a
/// predicate that compiles obeys negation and conjunction on sample records; a record
/// that is accepted prints and reads back equal.
pub fn json_requests(data: &[u8]) -> bool {
    use puffer_server::values::{predicate_from_json, record_from_json, record_json};
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
        return false;
    };
    let schema = schema();
    let mut accepted = false;
    if let Ok(predicate) = predicate_from_json(&json, &schema) {
        if let Ok(compiled) = Compiled::new(&predicate, &schema) {
            accepted = true;
            // Either may pass the node limit the predicate itself kept within.
            let not = Compiled::new(&Predicate::Not(Box::new(predicate.clone())), &schema);
            let both = Compiled::new(
                &Predicate::And(vec![predicate.clone(), predicate.clone()]),
                &schema,
            );
            for record in sample_records(&schema) {
                let holds = compiled.matches(&record);
                if let Ok(not) = &not {
                    assert_eq!(not.matches(&record), !holds, "{predicate:?} negated");
                }
                if let Ok(both) = &both {
                    assert_eq!(both.matches(&record), holds, "{predicate:?} twice");
                }
            }
        }
    }
    // The value as one record, and as a batch: an array of records, or a
    // `POST /v1/batches` body whose operations put records.
    let mut candidates = vec![&json];
    if let Some(items) = json.as_array() {
        candidates.extend(items);
    }
    if let Some(operations) = json.get("operations").and_then(|o| o.as_array()) {
        candidates.extend(operations.iter().filter_map(|op| op.get("put")));
    }
    for candidate in candidates {
        let Ok(record) = record_from_json(candidate, &schema) else {
            continue;
        };
        accepted = true;
        let printed = record_json(&record, &schema);
        let again = record_from_json(&printed, &schema).expect("a printed record reads back");
        // Through the stored form: a float NaN is not equal to itself.
        assert_eq!(
            format!("{:?}", schema.validate(again)),
            format!("{:?}", schema.validate(record)),
            "record printed as {printed}"
        );
    }
    accepted
}

/// The importer on a CSV and a JSON Lines file: never a panic, and every row it yields
/// is valid for the schema it inferred.
pub fn import(data: &[u8]) -> bool {
    use puffer_query::import::{read_table, KeySource};
    let dir = scratch("import");
    let mut accepted = false;
    for name in ["input.csv", "input.jsonl"] {
        let path: PathBuf = dir.join(name);
        std::fs::write(&path, data).expect("write the input");
        let Ok(table) = read_table(std::slice::from_ref(&path), KeySource::RowNumber) else {
            continue;
        };
        accepted = true;
        for row in table.records() {
            if let Err(e) = table.schema.validate(row.clone()) {
                panic!("{name}: row {row:?} is not valid for the inferred schema: {e}");
            }
        }
    }
    accepted
}

/// A target: takes the fuzzer's bytes, says whether they were accepted.
pub type Target = fn(&[u8]) -> bool;

/// Every target by name (the corpus replay walks `fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("index_file", index_file),
    ("segment", segment),
    ("container", container),
    ("wal", wal),
    ("manifest", manifest),
    ("sql", sql),
    ("json_requests", json_requests),
    ("import", import),
];

/// The corpus directory of `target` under the repository's `fuzz/`.
pub fn corpus_dir(fuzz_dir: &Path, target: &str) -> PathBuf {
    fuzz_dir.join("corpus").join(target)
}
