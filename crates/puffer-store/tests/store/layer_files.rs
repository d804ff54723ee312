//! Attribute layer files: a layer built for a segment is saved beside it and loaded,
//! not built, when it is wanted again after a reopen; loaded layers equal freshly built
//! ones and answers with them equal a scan of a `BTreeMap` model; a damaged file is
//! reported by the load and replaced by a build, never read as records; a segment's
//! layer files go with it; a layer's temporary file survives a running shard's
//! collection (it may be a save in flight) and is removed by an open.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{holds, random_predicate, random_record, schema, Rng};
use puffer_store::segment::{attribute_layer_file_name, Segment};
use puffer_store::{Query, ReadOptions, Record, Shard, StoreError, WriteOp};

/// Attributes of `common::schema`.
const ATTRIBUTES: u16 = 5;

fn open(dir: &Path) -> Shard {
    common::open_foreground(dir, schema())
}

fn write(shard: &Shard, rng: &mut Rng, model: &mut BTreeMap<Vec<u8>, Record>, count: usize) {
    let records: Vec<Record> = (0..count).map(|_| random_record(rng, 300)).collect();
    for record in &records {
        model.insert(record.key.clone(), record.clone());
    }
    shard
        .write(records.into_iter().map(WriteOp::Put).collect())
        .unwrap();
}

/// Starts every attribute's layer and waits until the segment holds them all.
fn hold_every_layer(segment: &Arc<Segment>) {
    for attribute in 0..ATTRIBUTES {
        segment.start_attribute_layer(attribute);
    }
    let started = Instant::now();
    while segment.attribute_layer_attributes().len() < ATTRIBUTES as usize {
        assert!(
            segment.attribute_layer_failures().is_empty(),
            "{:?}",
            segment.attribute_layer_failures()
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "layers not held after 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The held layer of `attribute` equals one built now, entry by entry.
fn assert_held_layer_is_built_one(segment: &Segment, attribute: u16) {
    let held = segment.attribute_layer(attribute).unwrap();
    let built = segment.build_attribute_layer(attribute).unwrap();
    assert_eq!(held.entries(), built.entries());
    for entry in built.entries() {
        assert_eq!(held.record(entry), built.record(entry), "entry {entry}");
    }
}

fn assert_answers_equal_the_model(shard: &Shard, model: &BTreeMap<Vec<u8>, Record>, rng: &mut Rng) {
    for _ in 0..150 {
        let predicate = random_predicate(rng, 2);
        let result = shard
            .search(&Query {
                predicate: predicate.clone(),
                projection: None,
                limit: None,
                read: ReadOptions::default(),
            })
            .unwrap();
        let expected: Vec<&Record> = model.values().filter(|r| holds(&predicate, r)).collect();
        let got: Vec<&Record> = result.rows.iter().collect();
        assert_eq!(got, expected, "{predicate:?}");
    }
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn layers_are_saved_loaded_after_a_reopen_and_rebuilt_when_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(2026);
    let mut model = BTreeMap::new();
    let shard = open(dir.path());
    write(&shard, &mut rng, &mut model, 400);
    shard.compact_all().unwrap();
    let segment = shard.segments()[0].clone();
    let id = segment.id;
    let file = |attribute| dir.path().join(attribute_layer_file_name(id, attribute));
    hold_every_layer(&segment);
    let mut inodes = Vec::new();
    for attribute in 0..ATTRIBUTES {
        assert!(file(attribute).is_file(), "layer {attribute} was not saved");
        inodes.push(inode(&file(attribute)));
        assert_held_layer_is_built_one(&segment, attribute);
    }
    drop(segment);
    drop(shard);

    // Reopened: nothing held until asked; then each layer comes from its file (the
    // same file, not a new one a build would have written).
    let shard = open(dir.path());
    let segment = shard.segments()[0].clone();
    assert_eq!(segment.id, id);
    assert!(segment.attribute_layer_attributes().is_empty());
    hold_every_layer(&segment);
    for attribute in 0..ATTRIBUTES {
        assert_eq!(inode(&file(attribute)), inodes[attribute as usize]);
        assert_held_layer_is_built_one(&segment, attribute);
    }
    assert_answers_equal_the_model(&shard, &model, &mut rng);

    // A damaged file is reported by a load and replaced by a build when next wanted.
    let damaged = file(2);
    let mut bytes = std::fs::read(&damaged).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&damaged, &bytes).unwrap();
    match segment.load_attribute_layer(2) {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("a damaged layer file loaded as {other:?}"),
    }
    assert!(segment.drop_attribute_layer(2));
    hold_every_layer(&segment);
    assert_held_layer_is_built_one(&segment, 2);
    assert!(segment.load_attribute_layer(2).unwrap().is_some());
    // A file of another attribute's layer under this name is not this layer.
    std::fs::copy(file(1), file(3)).unwrap();
    assert!(matches!(
        segment.load_attribute_layer(3),
        Err(StoreError::Corrupt { .. })
    ));
    assert_answers_equal_the_model(&shard, &model, &mut rng);

    // Compacted into a new segment: the old one's layer files go with it; the new
    // segment's survive a collection.
    drop(segment);
    write(&shard, &mut rng, &mut model, 200);
    shard.compact_all().unwrap();
    let segment = shard.segments()[0].clone();
    assert_ne!(segment.id, id);
    hold_every_layer(&segment);
    write(&shard, &mut rng, &mut model, 1);
    shard.seal().unwrap();
    shard.compact(false).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for attribute in 0..ATTRIBUTES {
        assert!(
            !names.contains(&attribute_layer_file_name(id, attribute)),
            "{names:?}"
        );
    }
    for live in shard.segments() {
        for attribute in live.attribute_layer_attributes() {
            assert!(
                names.contains(&attribute_layer_file_name(live.id, attribute)),
                "{names:?}"
            );
        }
    }
    assert_answers_equal_the_model(&shard, &model, &mut rng);
}

/// A temporary file in the shard's directory is a write in flight while the shard runs
/// (a layer being saved on its own thread): a compaction's collection leaves it. At an
/// open it can only be what a crash left half-written, and the open removes it.
#[test]
fn writes_in_flight_survive_a_collection_and_an_open_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x7e4f_0a11);
    let mut model = BTreeMap::new();
    let shard = open(dir.path());
    write(&shard, &mut rng, &mut model, 100);
    shard.compact_all().unwrap();
    let id = shard.segments()[0].id;
    let in_flight = dir
        .path()
        .join(format!(".{}.tmp", attribute_layer_file_name(id, 0)));
    std::fs::write(&in_flight, b"half a layer").unwrap();
    write(&shard, &mut rng, &mut model, 100);
    shard.compact_all().unwrap();
    assert_ne!(
        shard.segments()[0].id,
        id,
        "the compaction made a new segment"
    );
    assert!(
        in_flight.exists(),
        "a running shard removed a write in flight"
    );
    drop(shard);
    let shard = open(dir.path());
    assert!(!in_flight.exists(), "the open left a half-written file");
    assert_answers_equal_the_model(&shard, &model, &mut rng);
}
