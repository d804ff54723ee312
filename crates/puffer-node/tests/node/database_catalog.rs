//! The database keeps its catalog true: tables, layouts and schemas as created,
//! changed and dropped; texts and tables of a data directory from before catalogs;
//! every replica's segments in the registry; a damaged catalog refused.

use std::sync::Arc;

use puffer_node::catalog::{Catalog, MemoryCatalog, SegmentEntry};
use puffer_node::{Database, DatabaseOptions, TableLayout};
use puffer_query::QueryError;
use puffer_store::{AttrType, Attribute, Record, Schema, ShardOptions, StoreError, Value, WriteOp};

fn schema() -> Schema {
    Schema::new(
        "id",
        vec![Attribute {
            name: "city".into(),
            attr_type: AttrType::String,
        }],
    )
    .unwrap()
}

fn options() -> DatabaseOptions {
    DatabaseOptions {
        shard: ShardOptions {
            background: false,
            ..ShardOptions::default()
        },
        ..DatabaseOptions::default()
    }
}

fn put(db: &Database, table: &str, keys: std::ops::Range<u32>) {
    let ops = keys
        .map(|k| WriteOp::Put(Record::new(format!("k{k:04}")).with("city", Value::str("Oslo"))))
        .collect();
    db.table(table).unwrap().write(ops).unwrap();
}

/// The registry's segments of a table, against what every replica holds (the oracle
/// asks the replicas directly).
fn check_registry(db: &Database, table: &str) -> usize {
    db.sync_segment_registry().unwrap();
    let table = db.table(table).unwrap();
    let mut expected = Vec::new();
    for group in table.held_groups() {
        for slot in group.replicas() {
            for segment in slot.pool().replica().segments() {
                expected.push(SegmentEntry {
                    table_uid: table.uid(),
                    shard: group.shard,
                    replica: slot.replica as u32,
                    segment: segment.id,
                    records: puffer_store::stage::TextStage::record_count(segment.as_ref()),
                    // The files as they are on disk.
                    file_bytes: ["idx", "meta"]
                        .iter()
                        .map(|ext| {
                            let file = db
                                .dir()
                                .join("tables")
                                .join(table.name())
                                .join(format!("shard-{}-replica-{}", group.shard, slot.replica))
                                .join(format!("seg-{:06}.{ext}", segment.id));
                            std::fs::metadata(&file).unwrap().len()
                        })
                        .sum(),
                });
            }
        }
    }
    expected.sort_by_key(|s| (s.shard, s.replica, s.segment));
    assert_eq!(db.catalog().segments(table.uid()).unwrap(), expected);
    expected.len()
}

#[test]
fn the_catalog_follows_tables_schemas_and_segments_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let layout = TableLayout {
        shards: 3,
        replicas: 2,
    };
    let uid = {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.create_table_with("t", schema(), layout).unwrap();
        db.create_table("gone", schema()).unwrap();
        let entry = db.catalog().table("t").unwrap().unwrap();
        assert_eq!((entry.layout, &entry.schema), (layout, &schema()));
        assert_eq!(entry.uid, db.table("t").unwrap().uid());
        // A schema change reaches the catalog once applied.
        let price = Attribute {
            name: "price".into(),
            attr_type: AttrType::Int,
        };
        db.table("t")
            .unwrap()
            .write(vec![WriteOp::AddAttribute(price)])
            .unwrap();
        assert_eq!(
            db.catalog().table("t").unwrap().unwrap().schema,
            *db.table("t").unwrap().schema()
        );
        assert_eq!(
            db.catalog()
                .table("t")
                .unwrap()
                .unwrap()
                .schema
                .attributes
                .len(),
            2
        );
        put(&db, "t", 0..300);
        assert_eq!(check_registry(&db, "t"), 0, "nothing compacted yet");
        db.table("t").unwrap().compact_all().unwrap();
        assert_eq!(check_registry(&db, "t"), 6, "one segment per replica");
        db.drop_table("gone").unwrap();
        let names: Vec<String> = db
            .catalog()
            .tables()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, vec!["t".to_string()]);
        db.table("t").unwrap().uid()
    };
    let db = Database::open_with(dir.path(), options()).unwrap();
    assert_eq!(db.table_names(), vec!["t".to_string()]);
    assert_eq!(db.table("t").unwrap().uid(), uid);
    assert_eq!(db.table("t").unwrap().schema().attributes.len(), 2);
    assert_eq!(check_registry(&db, "t"), 6);
    put(&db, "t", 300..400);
    db.table("t").unwrap().compact_all().unwrap();
    assert!(check_registry(&db, "t") >= 6);
    let (count, _) = db
        .table("t")
        .unwrap()
        .count(&puffer_store::Predicate::All, Default::default())
        .unwrap();
    assert_eq!(count, 400);
}

#[test]
fn a_data_directory_from_before_catalogs_gets_one_listing_its_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.create_table("a", schema()).unwrap();
        db.create_table_with(
            "b",
            schema(),
            TableLayout {
                shards: 2,
                replicas: 1,
            },
        )
        .unwrap();
        put(&db, "a", 0..10);
    }
    let before: Vec<_> = {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.catalog().tables().unwrap()
    };
    // A text index from before, too.
    let texts = dir.path().join("texts");
    std::fs::create_dir_all(&texts).unwrap();
    let index = puffer_index::TextIndex::build(b"the puffer fish blows up").unwrap();
    index.save(texts.join("book.pidx")).unwrap();
    std::fs::remove_file(dir.path().join("CATALOG")).unwrap();

    let db = Database::open_with(dir.path(), options()).unwrap();
    assert_eq!(db.catalog().tables().unwrap(), before);
    let listed = db.catalog().texts().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].text_bytes),
        ("book", 24)
    );
    assert_eq!(
        db.table("a")
            .unwrap()
            .count(&puffer_store::Predicate::All, Default::default())
            .unwrap()
            .0,
        10
    );
}

#[test]
fn a_damaged_or_untrue_catalog_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        db.create_table("a", schema()).unwrap();
    }
    let path = dir.path().join("CATALOG");
    let good = std::fs::read(&path).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 2;
    bad[last] ^= 0x01;
    std::fs::write(&path, &bad).unwrap();
    let error = Database::open_with(dir.path(), options())
        .err()
        .expect("refused");
    assert!(
        matches!(error, QueryError::Store(StoreError::Corrupt { .. })),
        "{error}"
    );
    // The catalog lists a table whose directory is gone.
    std::fs::write(&path, &good).unwrap();
    std::fs::remove_dir_all(dir.path().join("tables").join("a")).unwrap();
    let error = Database::open_with(dir.path(), options())
        .err()
        .expect("refused");
    assert!(
        error.to_string().contains("the catalog lists table \"a\""),
        "{error}"
    );
}

#[test]
fn a_database_on_a_memory_catalog_lists_its_tables_there() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(MemoryCatalog::new());
    let db = Database::open_with(
        dir.path(),
        DatabaseOptions {
            catalog: Some(catalog.clone()),
            ..options()
        },
    )
    .unwrap();
    db.create_table("m", schema()).unwrap();
    assert_eq!(catalog.tables().unwrap().len(), 1);
    assert!(!dir.path().join("CATALOG").exists());
    // A create that the catalog refuses leaves no table behind.
    catalog
        .create_table(&puffer_node::catalog::TableEntry {
            name: "taken".into(),
            uid: 424242,
            layout: TableLayout::default(),
            schema: schema(),
            partition: None,
            chunk_of: None,
            subspace_of: None,
        })
        .unwrap();
    assert!(db.create_table("taken", schema()).is_err());
    assert!(db.table("taken").is_err());
    db.drop_table("m").unwrap();
    assert_eq!(catalog.tables().unwrap().len(), 1);
}

#[test]
fn texts_are_listed_in_the_catalog_and_survive_a_reopen() {
    use puffer_node::texts::Added;
    let dir = tempfile::tempdir().unwrap();
    let text = b"the puffer fish puffs up; a puffer is no pufferfish".to_vec();
    let naive = |pattern: &[u8]| {
        text.windows(pattern.len())
            .filter(|w| *w == pattern)
            .count() as u64
    };
    {
        let db = Database::open_with(dir.path(), options()).unwrap();
        let Added::New(entry) = db.texts().add("fish", &text).unwrap() else {
            panic!("a new text");
        };
        assert_eq!(entry.text_bytes, text.len() as u64);
        assert_eq!(db.catalog().texts().unwrap(), vec![entry]);
        assert_eq!(db.texts().add("fish", b"other").unwrap(), Added::Exists);
        assert!(db.texts().add("no/slash", b"x").is_err());
        // A leftover index no entry names (an add that crashed before the catalog).
        std::fs::write(dir.path().join("texts").join("ghost.pidx"), b"junk").unwrap();
    }
    let db = Database::open_with(dir.path(), options()).unwrap();
    assert_eq!(db.texts().names(), vec!["fish".to_string()]);
    let index = db.texts().get("fish").unwrap();
    for pattern in [&b"puff"[..], b"fish", b"puffer", b"z"] {
        assert_eq!(index.count(pattern).unwrap(), naive(pattern), "{pattern:?}");
    }
    // The leftover is replaced by the next add of its name.
    assert!(matches!(
        db.texts().add("ghost", b"boo").unwrap(),
        Added::New(_)
    ));
    assert_eq!(db.texts().get("ghost").unwrap().count(b"o").unwrap(), 2);
}

#[test]
fn a_table_dropped_while_held_keeps_its_files_until_let_go_and_its_name_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), options()).unwrap();
    db.create_table("t", schema()).unwrap();
    put(&db, "t", 0..50);
    let held = db.table("t").unwrap();
    db.drop_table("t").unwrap();
    let path = dir.path().join("tables").join("t");
    assert!(path.exists(), "a held table's files stay while it is held");
    assert!(db.table("t").is_err(), "but the table is gone");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(held);
    });
    // Made again under the name: it waits for the old files to go, and starts empty.
    db.create_table("t", schema()).unwrap();
    release.join().unwrap();
    let table = db.table("t").unwrap();
    let (count, _) = table
        .count(
            &puffer_store::Predicate::All,
            puffer_store::ReadOptions::default(),
        )
        .unwrap();
    assert_eq!(count, 0);
    put(&db, "t", 0..5);
    drop(table);
    db.drop_table("t").unwrap();
    assert!(
        !path.exists(),
        "a table nobody holds loses its files at once"
    );
}
