//! A page of search results is served from the record cache the second time: the
//! store finds one row beyond the page (to tell whether the answer was cut), and that
//! row must not push a page of the usual size out of the cache's reach. Answers are
//! checked against a naive scan of the records written.

use crate::common;

use common::schema;
use puffer_store::{Predicate, Query, ReadOptions, Record, Value, WriteOp};

/// Rows of a page, as a search client asks (the hyperspace benchmark's page).
const PAGE_ROWS: usize = 100;

#[test]
fn a_page_of_results_is_kept_in_the_record_cache() {
    let dir = tempfile::tempdir().unwrap();
    let shard = common::open_foreground(dir.path(), schema());
    let records: Vec<Record> = (0..1000u32)
        .map(|i| {
            Record::new(format!("k{i:04}"))
                .with(
                    "name",
                    Value::str(["ghent", "cork", "leith"][i as usize % 3]),
                )
                .with("n", Value::Int(i64::from(i % 7)))
        })
        .collect();
    shard
        .write(records.iter().cloned().map(WriteOp::Put).collect())
        .unwrap();
    shard.compact_all().unwrap();
    let query = Query {
        predicate: Predicate::Eq("name".into(), Value::str("cork")),
        projection: None,
        limit: Some(PAGE_ROWS),
        read: ReadOptions::default(),
    };
    let matching: Vec<&Record> = records
        .iter()
        .filter(|r| r.values.get("name") == Some(&Value::str("cork")))
        .collect();
    assert!(matching.len() > PAGE_ROWS, "the page must be cut");
    let first = shard.search(&query).unwrap();
    let after_first = shard.record_cache_stats();
    let second = shard.search(&query).unwrap();
    let after_second = shard.record_cache_stats();
    for answer in [&first, &second] {
        assert_eq!(answer.rows.len(), PAGE_ROWS);
        assert!(answer.truncated);
        for record in &answer.rows {
            assert!(
                matching.contains(&record),
                "{record:?} is not a matching record as written"
            );
        }
    }
    assert_eq!(first.rows, second.rows);
    assert!(
        after_first.entries >= PAGE_ROWS as u64,
        "the first page was not kept: {after_first:?}"
    );
    assert!(
        after_second.hits - after_first.hits >= PAGE_ROWS as u64,
        "the second page was not served from the cache: {after_first:?} then {after_second:?}"
    );
    assert_eq!(
        after_second.misses, after_first.misses,
        "the second page extracted records again"
    );
}
