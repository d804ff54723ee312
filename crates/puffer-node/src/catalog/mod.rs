//! The catalog: what a database holds, apart from its data. Tables (name, uid,
//! layout, schema), text files, and the registry of every replica's segments.
//!
//! The catalog is the commit point of what it lists: a table exists once its entry
//! does (its directories are made first), and a dropped table stops existing when its
//! entry goes (its directories are removed after). [`FileCatalog`] keeps it in one
//! checksummed file of the data directory, [`MemoryCatalog`] in memory (tests, and
//! databases that live only as long as their process); the cluster's etcd catalog
//! implements the same trait. Every implementation passes [`conformance::run`].

pub mod conformance;
mod file;
mod memory;

pub use file::{CatalogFile, FileCatalog, CATALOG_FILE};
pub use memory::{CatalogState, MemoryCatalog, NoStorage, StateCatalog, Storage};

use puffer_query::Result;
use puffer_store::Schema;
use serde::{Deserialize, Serialize};

use crate::layout::TableLayout;

/// Most tables a catalog lists.
pub const MAX_CATALOG_TABLES: usize = 4096;
/// Most text files a catalog lists.
pub const MAX_CATALOG_TEXTS: usize = 4096;
/// Most segments registered for one replica.
pub const MAX_SEGMENTS_PER_REPLICA: usize = 65_536;

/// A table in the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableEntry {
    /// The table's name (unique among the catalog's tables).
    pub name: String,
    /// The table's uid: names its parts of SCUs in the log; a table created again
    /// under a dropped one's name has another.
    pub uid: u64,
    /// Shards and replicas per shard.
    pub layout: TableLayout,
    /// The schema, as of the last SCU that changed it.
    pub schema: Schema,
    /// How its records are spread over time chunks, if it is time-partitioned (it
    /// then holds none itself; see [`crate::partition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Partitioning>,
    /// The time-partitioned table this table is a chunk of, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_of: Option<ChunkOf>,
    /// The table this table is a subspace of, if it is one (see [`crate::subspace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subspace_of: Option<crate::subspace::SubspaceOf>,
}

/// How a time-partitioned table's chunks are made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitioning {
    /// The timestamp attribute records are partitioned by.
    pub attribute: String,
    /// The chunks' length.
    pub granularity: puffer_query::Granularity,
    /// Shards and replicas of each chunk.
    pub chunk_layout: TableLayout,
}

/// What a chunk is a chunk of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkOf {
    /// The time-partitioned table.
    pub table: String,
    /// The chunk's first microsecond.
    pub start_micros: i64,
}

/// A text file in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextEntry {
    /// The text's name (unique among the catalog's texts).
    pub name: String,
    /// Bytes of the original text.
    pub text_bytes: u64,
    /// Bytes of its compressed index file.
    pub index_bytes: u64,
}

/// One segment of one replica, as registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// The table's uid.
    pub table_uid: u64,
    /// The shard.
    pub shard: u32,
    /// The replica of the shard.
    pub replica: u32,
    /// The segment's id within its replica.
    pub segment: u64,
    /// Records in the segment (deleted ones included).
    pub records: u64,
    /// Bytes of the segment's file.
    pub file_bytes: u64,
}

/// Where a database's catalog lives. Every method is atomic: it changes all it says
/// or nothing. Errors: `UnknownTable`, `TableExists`, `Limit` and `Invalid` for what
/// the caller asked, `Store` for the catalog's own storage.
pub trait Catalog: Send + Sync + std::fmt::Debug {
    /// Every table, ascending by name.
    fn tables(&self) -> Result<Vec<TableEntry>>;

    /// The table called `name`, if any.
    fn table(&self, name: &str) -> Result<Option<TableEntry>>;

    /// Adds a table; `TableExists` if the name or the uid is taken.
    fn create_table(&self, entry: &TableEntry) -> Result<()>;

    /// Replaces the schema of table `name`, which must have uid `uid` (so that a
    /// late update of a dropped table never lands on a new one of the same name).
    fn set_schema(&self, name: &str, uid: u64, schema: &Schema) -> Result<()>;

    /// Replaces what subspace table `name`, which must have uid `uid` and be a subspace
    /// (`Invalid` otherwise), is a subspace of: marks it ready.
    fn set_subspace(
        &self,
        name: &str,
        uid: u64,
        subspace: &crate::subspace::SubspaceOf,
    ) -> Result<()>;

    /// Removes table `name` and its registered segments; returns its entry.
    fn drop_table(&self, name: &str) -> Result<TableEntry>;

    /// Every text, ascending by name.
    fn texts(&self) -> Result<Vec<TextEntry>>;

    /// Adds or replaces a text.
    fn put_text(&self, entry: &TextEntry) -> Result<()>;

    /// Removes a text; whether it was there.
    fn remove_text(&self, name: &str) -> Result<bool>;

    /// The registered segments of table `uid`, ascending by (shard, replica, segment).
    /// A catalog shared by several nodes keeps each node's lists apart (each holds its
    /// own copies) and returns them all.
    fn segments(&self, table_uid: u64) -> Result<Vec<SegmentEntry>>;

    /// Replaces the registered segments (this node's, in a shared catalog) of one
    /// replica of one shard of table `uid`
    /// (which must be listed); every entry must name that table, shard and replica.
    fn set_segments(
        &self,
        table_uid: u64,
        shard: u32,
        replica: u32,
        segments: &[SegmentEntry],
    ) -> Result<()>;
}

/// The checks every implementation makes before a change, so that all refuse the same
/// requests with the same errors.
pub mod checks {
    use puffer_query::{QueryError, Result};

    use super::*;

    /// A new table, against the tables listed now: its name, layout and uid, both
    /// free, and room for one more.
    pub fn new_table(entry: &TableEntry, tables: &[&TableEntry]) -> Result<()> {
        crate::layout::check_table_name(&entry.name)?;
        entry.layout.validate()?;
        if entry.uid == 0 {
            return Err(QueryError::Invalid("a table's uid is never 0".into()));
        }
        if let Some(taken) = tables
            .iter()
            .find(|t| t.name == entry.name || t.uid == entry.uid)
        {
            return Err(QueryError::TableExists(taken.name.clone()));
        }
        if tables.len() >= MAX_CATALOG_TABLES {
            return Err(QueryError::Limit(format!(
                "a catalog lists at most {MAX_CATALOG_TABLES} tables"
            )));
        }
        Ok(())
    }

    /// Table `entry`'s subspace replaced by `subspace`: it must be a subspace, of the
    /// same table over the same attributes.
    pub fn subspace(entry: &TableEntry, subspace: &crate::subspace::SubspaceOf) -> Result<()> {
        match &entry.subspace_of {
            Some(current)
                if current.table == subspace.table && current.attributes == subspace.attributes =>
            {
                Ok(())
            }
            Some(_) => Err(QueryError::Invalid(format!(
                "table {:?} is a subspace of another table or over other attributes",
                entry.name
            ))),
            None => Err(QueryError::Invalid(format!(
                "table {:?} is not a subspace",
                entry.name
            ))),
        }
    }

    /// A text added (or `replacing` one of the same name) among `texts` listed now.
    pub fn text(entry: &TextEntry, texts: usize, replacing: bool) -> Result<()> {
        crate::layout::check_table_name(&entry.name).map_err(|_| {
            QueryError::Invalid(format!(
                "text names follow table-name rules; got {:?}",
                entry.name
            ))
        })?;
        if !replacing && texts >= MAX_CATALOG_TEXTS {
            return Err(QueryError::Limit(format!(
                "a catalog lists at most {MAX_CATALOG_TEXTS} texts"
            )));
        }
        Ok(())
    }

    /// A replica's new segment list: the shard and replica exist, every entry names
    /// them, ids are distinct, and the list is within bounds.
    pub fn segments(
        table: &TableEntry,
        shard: u32,
        replica: u32,
        segments: &[SegmentEntry],
    ) -> Result<()> {
        if shard >= table.layout.shards || replica >= table.layout.replicas {
            return Err(QueryError::Invalid(format!(
                "table {:?} has {} shards of {} replicas; there is no shard {shard} replica \
                 {replica}",
                table.name, table.layout.shards, table.layout.replicas
            )));
        }
        if segments.len() > MAX_SEGMENTS_PER_REPLICA {
            return Err(QueryError::Limit(format!(
                "a replica registers at most {MAX_SEGMENTS_PER_REPLICA} segments"
            )));
        }
        if let Some(stray) = segments
            .iter()
            .find(|s| s.table_uid != table.uid || s.shard != shard || s.replica != replica)
        {
            return Err(QueryError::Invalid(format!(
                "segment {} names table {} shard {} replica {}, not table {} shard {shard} \
                 replica {replica}",
                stray.segment, stray.table_uid, stray.shard, stray.replica, table.uid
            )));
        }
        let mut ids: Vec<u64> = segments.iter().map(|s| s.segment).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(QueryError::Invalid(
                "a replica's segments have distinct ids".into(),
            ));
        }
        Ok(())
    }
}
