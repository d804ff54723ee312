//! Replays every checked-in fuzz corpus (`fuzz/corpus/<target>/`) through the fuzz
//! targets' own oracles, on stable: what a fuzzer found once stays a test. The coverage-
//! guided runs themselves are `scripts/fuzz.sh` (cargo fuzz, nightly).
//!
//! `PUFFER_WRITE_FUZZ_SEEDS=1 cargo test -p puffer --test fuzz_corpora` writes the valid
//! seeds each corpus starts from (index files, segments, log records, manifests, SQL,
//! JSON requests, CSV and JSON Lines), built by the project's own writers.

#[path = "../../../fuzz/src/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::{Path, PathBuf};

use puffer_store::fs::RealFs;
use puffer_store::schema::StoredRecord;
use puffer_store::wal::{encode_ops, encode_record_parts, Op};
use puffer_store::{AttrType, Attribute, Schema, Value};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[test]
fn every_corpus_input_keeps_its_oracles() {
    if std::env::var("PUFFER_WRITE_FUZZ_SEEDS").as_deref() == Ok("1") {
        write_seeds();
    }
    let mut replayed = 0;
    for (target, run) in harness::TARGETS {
        let dir = harness::corpus_dir(&fuzz_dir(), target);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("no corpus for {target} at {}: {e}", dir.display()))
            .map(|entry| entry.expect("a corpus entry").path())
            .collect();
        inputs.sort();
        assert!(
            inputs.len() >= 2,
            "the {target} corpus holds {} inputs",
            inputs.len()
        );
        for input in inputs {
            let data = std::fs::read(&input).expect("read a corpus input");
            let outcome = std::panic::catch_unwind(|| run(&data));
            let Ok(accepted) = outcome else {
                panic!("{target}: {} broke an oracle", input.display());
            };
            // The seeds are valid inputs written by the project's own writers: each must
            // be accepted, or the target tests nothing but refusals.
            let is_seed = input
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("seed-"));
            assert!(
                accepted || !is_seed,
                "{target}: seed {} was refused",
                input.display()
            );
            replayed += 1;
        }
    }
    eprintln!("{replayed} corpus inputs replayed");
}

/// Writes `bytes` as seed `name` of `target`.
fn seed(target: &str, name: &str, bytes: &[u8]) {
    let dir = harness::corpus_dir(&fuzz_dir(), target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write a seed");
}

const TEXTS: &[&[u8]] = &[
    b"abracadabra",
    b"the quick brown fox jumps over the lazy dog; the dog sleeps",
    b"\x00\x01\x02\xff\xfe binary \x00 bytes \x00",
];

fn write_seeds() {
    let scratch = tempfile::tempdir().expect("temp dir");
    // Index files.
    for (i, text) in TEXTS.iter().enumerate() {
        let path = scratch.path().join(format!("{i}.pidx"));
        puffer_index::TextIndex::build(text)
            .expect("build")
            .save(&path)
            .expect("save");
        seed(
            "index_file",
            &i.to_string(),
            &std::fs::read(&path).expect("read"),
        );
    }
    // Segments (index and meta, length-prefixed), and their meta containers.
    let schema = Schema::new(
        "id",
        vec![
            Attribute {
                name: "name".into(),
                attr_type: AttrType::String,
            },
            Attribute {
                name: "n".into(),
                attr_type: AttrType::Int,
            },
        ],
    )
    .expect("schema");
    for (i, count) in [1usize, 5, 40].iter().enumerate() {
        let dir = scratch.path().join(format!("segment-{i}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let records: Vec<(Vec<u8>, Vec<u8>)> = (0..*count)
            .map(|r| {
                let record = schema
                    .validate(
                        puffer_store::Record::new(format!("key{r:04}"))
                            .with("name", Value::String(format!("item {r}").into_bytes()))
                            .with("n", Value::Int(r as i64 - 3)),
                    )
                    .expect("a valid record");
                let mut text = Vec::new();
                puffer_store::codec::push_record(&mut text, &record);
                (record.key, text)
            })
            .collect();
        puffer_store::segment::Segment::build(&RealFs, &dir, 1, &records, 7, &Default::default())
            .expect("build a segment");
        let index =
            std::fs::read(dir.join(puffer_store::segment::index_file_name(1))).expect("index");
        let meta = std::fs::read(dir.join(puffer_store::segment::meta_file_name(1))).expect("meta");
        let mut both = (index.len() as u32).to_le_bytes().to_vec();
        both.extend_from_slice(&index);
        both.extend_from_slice(&meta);
        seed("segment", &i.to_string(), &both);
        seed("container", &i.to_string(), &meta);
    }
    // Log records: groups of SCUs, the operations alone, and a log file.
    let ops = vec![
        Op::Put(StoredRecord {
            key: b"k1".to_vec(),
            fields: vec![(0, Value::String(b"x".to_vec())), (1, Value::Int(-3))],
        }),
        Op::Delete(b"k0".to_vec()),
        Op::AddAttribute(Attribute {
            name: "price".into(),
            attr_type: AttrType::Float,
        }),
        Op::Put(StoredRecord {
            key: b"k2".to_vec(),
            fields: vec![(2, Value::Float(2.5))],
        }),
    ];
    let body = encode_ops(&ops);
    seed("wal", "ops", &body);
    let mut group = Vec::new();
    for seq in 1..=3 {
        encode_record_parts(seq, 1_000 * seq, &body, &mut group);
    }
    seed("wal", "group", &group);
    let log_dir = scratch.path().join("log");
    std::fs::create_dir_all(&log_dir).expect("dir");
    let mut log = puffer_store::wal::LogWriter::create(&RealFs, &log_dir, 1).expect("a log file");
    log.append_durably(&group).expect("append");
    drop(log);
    seed(
        "wal",
        "file",
        &std::fs::read(log_dir.join(puffer_store::wal::file_name(1))).expect("log file"),
    );
    // Manifests.
    for (i, segments) in [0u64, 2].iter().enumerate() {
        let dir = scratch.path().join(format!("manifest-{i}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let manifest = puffer_store::manifest::Manifest {
            schema: schema.clone(),
            checkpoint: 9,
            segments: (1..=*segments)
                .map(|id| puffer_store::manifest::SegmentEntry {
                    id,
                    deletions: (id == 2).then(|| "seg-000002.del-9".to_string()),
                })
                .collect(),
            next_segment_id: segments + 1,
        };
        manifest.store(&RealFs, &dir).expect("store");
        seed(
            "manifest",
            &i.to_string(),
            &std::fs::read(dir.join(puffer_store::manifest::MANIFEST_FILE)).expect("read"),
        );
    }
    // SQL.
    for (i, text) in [
        "SELECT * FROM t WHERE name = 'a' AND n > 3 LIMIT 10",
        "SELECT COUNT(*) FROM t WHERE name LIKE 'ab%' OR NOT (price <= 2.5)",
        "SELECT id, name FROM t WHERE n IN (1, 2, 3) AND ts >= '2026-01-01T00:00:00Z'",
        "INSERT INTO t (id, name, n) VALUES ('k', 'x', 1), ('l', NULL, 2)",
        "DELETE FROM t WHERE id = 'k'",
        "CREATE TABLE u (id TEXT PRIMARY KEY, v INT, w DOUBLE, b BOOLEAN, at TIMESTAMP)",
        "SELECT * FROM t WHERE name IS NOT NULL AND ok = true FRESHNESS 5",
        "DROP TABLE t",
    ]
    .iter()
    .enumerate()
    {
        seed("sql", &i.to_string(), text.as_bytes());
    }
    // JSON requests: predicates and records.
    for (i, text) in [
        r#"{"and": [{"eq": {"name": "a"}}, {"range": {"n": {"gte": 1, "lt": 9}}}]}"#,
        r#"{"or": [{"prefix": {"name": "ab"}}, {"not": {"exists": "price"}}]}"#,
        r#"{"in": {"n": [1, 2, 3]}}"#,
        r#"{"text_contains": "zz"}"#,
        r#"{"range": {"ts": {"gt": "2023-11-14T22:13:20Z"}}}"#,
        r#"{"id": "k1", "name": "x", "n": 3, "price": 1.5, "ok": true, "ts": "2026-01-01T00:00:00Z"}"#,
        r#"{"all": true}"#,
        r#"[{"id": "a", "n": 1}, {"id": "b", "name": "y", "ok": false}]"#,
        r#"{"operations": [{"table": "t", "put": {"id": "c", "price": -0.5}}, {"table": "t", "delete": "a"}]}"#,
    ]
    .iter()
    .enumerate()
    {
        seed("json_requests", &i.to_string(), text.as_bytes());
    }
    // Importer inputs.
    seed(
        "import",
        "csv",
        b"name,n,price,when\nalpha,1,2.5,2026-01-01T00:00:00Z\n\"be,ta\",2,,2026-01-02\ngamma,x,3,\n",
    );
    seed(
        "import",
        "jsonl",
        b"{\"name\": \"alpha\", \"n\": 1, \"tags\": {\"a\": true}}\n{\"name\": \"beta\", \"price\": 2.5}\n",
    );
}
