//! `puffer-store`: one PufferDB shard. Records are flattened into text and kept in
//! compressed segments (`puffer-index`), behind a staged write pipeline (log, sorted,
//! compressed) with self-consistent updates, a write-ahead log and snapshot reads.

pub mod bounds;
pub mod clock;
pub mod codec;
pub mod container;
pub mod error;
pub mod fs;
pub mod keydir;
pub mod manifest;
pub mod memtable;
pub mod query;
pub mod schema;
pub mod segment;
pub mod shard;
pub mod sorted;
pub mod stage;
pub mod wal;

pub use error::{Result, StoreError};
pub use query::Predicate;
pub use schema::{AttrType, Attribute, Record, Schema, Value};
pub use shard::{
    Query, ReadOptions, SearchResult, Shard, ShardOptions, ShardStats, SnapshotInfo, Watermarks,
    WriteOp,
};
