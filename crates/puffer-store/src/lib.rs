//! `puffer-store`: one PufferDB shard. Records are flattened into text and kept in
//! compressed segments (`puffer-index`), behind a staged write pipeline (log, sorted,
//! compressed) with self-consistent updates, a write-ahead log and snapshot reads.
//!
//! ```
//! use puffer_store::*;
//! let dir = tempfile::tempdir().unwrap();
//! let schema = Schema::new("id", vec![
//!     Attribute { name: "city".into(), attr_type: AttrType::String },
//!     Attribute { name: "price".into(), attr_type: AttrType::Int },
//! ]).unwrap();
//! let shard = Shard::open(dir.path(), schema, ShardOptions::default()).unwrap();
//! shard.write(vec![
//!     WriteOp::Put(Record::new("l1").with("city", Value::str("Boston")).with("price", Value::Int(120))),
//!     WriteOp::Put(Record::new("l2").with("city", Value::str("Dublin")).with("price", Value::Int(95))),
//! ]).unwrap();
//! shard.compact_all().unwrap(); // now in a compressed segment
//! let cheap = Predicate::Range {
//!     attribute: "price".into(),
//!     lower: std::ops::Bound::Unbounded,
//!     upper: std::ops::Bound::Excluded(Value::Int(100)),
//! };
//! let (count, _) = shard.count(&cheap, ReadOptions::default()).unwrap();
//! assert_eq!(count, 1);
//! let (found, _) = shard.get(b"l1", ReadOptions::default()).unwrap();
//! assert_eq!(found.unwrap().values["city"], Value::str("Boston"));
//! ```

pub mod aggregate;
pub mod attr_layer;
pub mod bounds;
pub mod clock;
pub mod codec;
pub mod column_layer;
pub mod columns;
pub mod container;
pub mod error;
pub mod fields;
pub mod fs;
pub mod keydir;
mod layer_shelf;
pub mod manifest;
pub mod memtable;
pub mod query;
pub mod record_cache;
pub mod schema;
pub mod segment;
pub mod shard;
pub mod sorted;
pub mod stage;
pub mod timestamp;
pub mod wal;

pub use aggregate::{Aggregate, AggregateQuery, AggregateResult, AggregateState, TimeBucket};
pub use columns::{Column, ColumnData, ColumnsResult};
pub use error::{Result, StoreError};
pub use query::Predicate;
pub use schema::{AttrType, Attribute, Record, Schema, Value};
pub use shard::{
    validate_ops, PreparedOps, Query, RawRecord, ReadOptions, SearchResult, Shard, ShardLog,
    ShardOptions, ShardStats, SnapshotInfo, Watermarks, WriteOp,
};
