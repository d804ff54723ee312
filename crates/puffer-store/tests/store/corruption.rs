//! Corruption: a flipped byte in any file of a shard (manifest, segment index, segment
//! meta, deletions file, log) is detected at open or read with the file named, or (for
//! bytes no checksum covers, such as alignment padding) changes no answer.

use crate::common;

use std::path::{Path, PathBuf};

use common::{holds, random_predicate, random_record, schema, Model, Rng};
use puffer_store::{Predicate, Query, ReadOptions, Record, Shard, ShardOptions, WriteOp};

fn options() -> ShardOptions {
    ShardOptions {
        log_table_max_records: 100,
        background: false,
        ..ShardOptions::default()
    }
}

fn build(dir: &Path) -> Model {
    let shard = Shard::open(dir, schema(), options()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(99);
    let write = |model: &mut Model, ops: Vec<WriteOp>, state| {
        shard.write(ops).unwrap();
        model.states.push(state);
    };
    // A large first segment, so that the later small compaction leaves it in place and
    // writes a deletions file for it.
    for i in 0..150 {
        let mut state = model.at(model.last_seq()).clone();
        let mut record = random_record(&mut rng, 30);
        record.key = common::key(i);
        state.insert(record.key.clone(), record.clone());
        write(&mut model, vec![WriteOp::Put(record)], state);
    }
    shard.compact_all().unwrap();
    for round in 0..55 {
        let mut state = model.at(model.last_seq()).clone();
        let ops = if round % 3 == 2 {
            let key = common::key(rng.below(150));
            state.remove(&key);
            vec![WriteOp::Delete(key)]
        } else {
            let record = random_record(&mut rng, 30);
            state.insert(record.key.clone(), record.clone());
            vec![WriteOp::Put(record)]
        };
        write(&mut model, ops, state);
        if round == 40 {
            shard.seal().unwrap();
            shard.compact(false).unwrap();
        }
    }
    model
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Answers of the damaged shard: `Err(message)` on the first error.
fn answers(dir: &Path, predicates: &[Predicate]) -> Result<Vec<Vec<Record>>, String> {
    let shard = Shard::open(dir, schema(), options()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for predicate in predicates {
        let query = Query {
            predicate: predicate.clone(),
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        };
        out.push(shard.search(&query).map_err(|e| e.to_string())?.rows);
    }
    Ok(out)
}

#[test]
fn flipped_bytes_are_detected_or_harmless() {
    let base = tempfile::tempdir().unwrap();
    let model = build(base.path());
    let mut rng = Rng(7);
    let mut predicates = vec![Predicate::All];
    predicates.extend((0..10).map(|_| random_predicate(&mut rng, 1)));
    let last = model.at(model.last_seq());
    let expected: Vec<Vec<Record>> = predicates
        .iter()
        .map(|p| last.values().filter(|r| holds(p, r)).cloned().collect())
        .collect();
    assert_eq!(
        answers(base.path(), &predicates).unwrap(),
        expected,
        "intact shard"
    );

    let all_files = files(base.path());
    let names: Vec<String> = all_files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for kind in ["MANIFEST", ".idx", ".meta", ".del-", ".wal"] {
        assert!(
            names.iter().any(|n| n.contains(kind)),
            "no {kind} file in {names:?}"
        );
    }
    let (mut detected, mut harmless) = (0, 0);
    for file in &all_files {
        let relative = file.strip_prefix(base.path()).unwrap().to_path_buf();
        let len = std::fs::metadata(file).unwrap().len();
        let positions: Vec<u64> = if len <= 400 {
            (0..len).collect()
        } else {
            (0..400).map(|i| i * len / 400).collect()
        };
        for position in positions {
            let damaged = tempfile::tempdir().unwrap();
            copy_dir(base.path(), damaged.path());
            let target = damaged.path().join(&relative);
            let mut bytes = std::fs::read(&target).unwrap();
            bytes[position as usize] ^= 0xFF;
            std::fs::write(&target, &bytes).unwrap();
            match answers(damaged.path(), &predicates) {
                Err(message) => {
                    let name = relative.file_name().unwrap().to_string_lossy();
                    assert!(
                        message.contains(name.as_ref()),
                        "byte {position} of {relative:?}: the error does not name the file: {message}"
                    );
                    detected += 1;
                }
                Ok(got) => {
                    assert_eq!(
                        got, expected,
                        "byte {position} of {relative:?}: undetected damage changed answers"
                    );
                    harmless += 1;
                }
            }
        }
    }
    println!("{detected} flips detected, {harmless} harmless");
    assert!(
        detected > harmless * 4,
        "{detected} detected, {harmless} harmless"
    );
}
