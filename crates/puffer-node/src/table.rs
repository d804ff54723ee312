//! A table: its records spread over shards by key hash, each shard held by one or more
//! replicas (separate copies on this node, each serving reads from its own queue).
//!
//! On disk a table is `tables/<name>/` with `TABLE.json` (`{"format":2,"shards":S,
//! "replicas":R,"uid":U}`) and one shard directory per replica, `shard-<s>-replica-<r>/`.
//! A record with key `k` lives in shard `fnv1a64(k) mod S`. The uid ties the table's
//! parts of SCUs in the database's log to it (a table created again under a dropped
//! one's name has a new uid).
//!
//! Writes go through the database's committer ([`crate::commit`]): one SCU, one number,
//! durable in the database's log, applied to every replica of every shard it touches
//! before it is published, so a batch is atomic across shards (and tables) and any
//! replica answers a read at a published snapshot. Reads choose one snapshot for all
//! the shards they ask.
//!
//! Older layouts are converted when opened: format 1 (each replica with its own log)
//! and the layout before sharding (a `MANIFEST` directly in the table directory, which
//! stays the one replica's directory) have every replica compacted, so that nothing is
//! left in their own logs, and are then written as format 2.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::serving::{AdaptiveNode, NewReplica, ShardGroup};
use puffer_store::clock::SystemClock;
use puffer_store::fs::RealFs;
use puffer_store::{
    Predicate, Query, ReadOptions, Record, Schema, SearchResult, Shard, ShardLog, ShardOptions,
    ShardStats, SnapshotInfo, StoreError, Watermarks, WriteOp,
};
use serde::{Deserialize, Serialize};

use crate::commit::Committer;
use puffer_query::{QueryError, Result};

/// A record as stored (undecoded), the schema it decodes with, and the snapshot read.
pub type RawAnswer = (Option<puffer_store::RawRecord>, Arc<Schema>, SnapshotInfo);

/// Most shards of one table.
pub const MAX_SHARDS: u32 = 256;
/// Most replicas of one shard on a node.
pub const MAX_REPLICAS: u32 = 8;

/// How a table is laid out: shards and replicas per shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableLayout {
    /// Shards (records spread by key hash).
    pub shards: u32,
    /// Replicas of each shard on this node.
    pub replicas: u32,
}

impl Default for TableLayout {
    fn default() -> Self {
        TableLayout {
            shards: 1,
            replicas: 1,
        }
    }
}

impl TableLayout {
    /// Checks the counts.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(QueryError::Invalid(format!(
                "shards must be 1 to {MAX_SHARDS}, got {}",
                self.shards
            )));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(QueryError::Invalid(format!(
                "replicas must be 1 to {MAX_REPLICAS}, got {}",
                self.replicas
            )));
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct TableFile {
    format: u32,
    shards: u32,
    replicas: u32,
    /// Ties the table's parts of SCUs in the database's log to it (format 2).
    #[serde(default)]
    uid: u64,
    /// The one replica's directory is the table directory itself (a table from before
    /// sharding).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    single_directory: bool,
}

const TABLE_FILE: &str = "TABLE.json";
/// The table file format this version writes.
const TABLE_FORMAT: u32 = 2;
/// Tries of a read whose snapshot a replica sealed past meanwhile (each chooses anew).
const MAX_SNAPSHOT_TRIES: usize = 16;

/// A new table uid: random (seeded by the process's hash keys and the time), so uids of
/// dropped tables are not handed out again.
fn new_table_uid() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish().max(1)
}

/// The shard of `key` among `shards`: FNV-1a (64 bit) of the key bytes, modulo.
pub fn shard_of(key: &[u8], shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(shards.max(1))) as u32
}

/// A table's shards and their replicas, as the committer reaches them.
pub struct TableShards {
    /// The table's uid (see the module docs).
    pub uid: u64,
    /// The table's name.
    pub name: String,
    /// Number of shards.
    pub shards: u32,
    /// Each shard's replicas, registered with the node.
    pub groups: Vec<Arc<ShardGroup<Shard>>>,
    /// Held by a writer whose SCU changes the schema, until it is applied.
    pub(crate) schema_change: Mutex<()>,
}

impl TableShards {
    /// The schema (every replica has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.groups[0].replicas()[0].pool().replica().schema()
    }

    /// The highest sealed SCU over every replica (a snapshot read on all of them must
    /// not be older).
    fn max_sealed(&self) -> u64 {
        self.groups
            .iter()
            .flat_map(|g| g.replicas())
            .map(|slot| slot.pool().replica().watermarks().sorted)
            .max()
            .unwrap_or(0)
    }
}

/// A table's shards, registered with the node and with the database's committer.
pub struct Table {
    layout: TableLayout,
    shards: Arc<TableShards>,
    committer: Arc<Committer>,
}

impl Table {
    /// Creates the table's directories and opens it.
    pub(crate) fn create(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        name: &str,
        schema: Schema,
        layout: TableLayout,
        options: &ShardOptions,
    ) -> Result<Table> {
        layout.validate()?;
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let file = TableFile {
            format: TABLE_FORMAT,
            shards: layout.shards,
            replicas: layout.replicas,
            uid: new_table_uid(),
            single_directory: false,
        };
        write_table_file(dir, &file)?;
        Table::open_dirs(node, committer, dir, name, Some(schema), &file, options)
    }

    /// Opens an existing table directory (converting older layouts); `None` if it holds
    /// no finished table.
    pub(crate) fn open(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        name: &str,
        options: &ShardOptions,
    ) -> Result<Option<Table>> {
        let path = dir.join(TABLE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(&path, e).into()),
        };
        let file = match bytes {
            Some(bytes) => serde_json::from_slice::<TableFile>(&bytes)
                .map_err(|e| StoreError::corrupt(&path, e.to_string()))?,
            // The layout before sharding: the directory is the one shard.
            None if dir.join("MANIFEST").exists() => TableFile {
                format: 0,
                shards: 1,
                replicas: 1,
                uid: 0,
                single_directory: true,
            },
            None => return Ok(None),
        };
        let layout = TableLayout {
            shards: file.shards,
            replicas: file.replicas,
        };
        if file.format > TABLE_FORMAT
            || layout.validate().is_err()
            || (file.format == TABLE_FORMAT && file.uid == 0)
        {
            return Err(StoreError::corrupt(
                &path,
                format!(
                    "format {} with {} shards and {} replicas is not a table this version opens",
                    file.format, file.shards, file.replicas
                ),
            )
            .into());
        }
        if !(0..layout.shards).all(|s| {
            (0..layout.replicas).all(|r| replica_dir(dir, &file, s, r).join("MANIFEST").exists())
        }) {
            return Ok(None); // a creation that never finished
        }
        let file = if file.format < TABLE_FORMAT {
            convert_own_logs(dir, file, options)?
        } else {
            file
        };
        Table::open_dirs(node, committer, dir, name, None, &file, options).map(Some)
    }

    fn open_dirs(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        name: &str,
        schema: Option<Schema>,
        file: &TableFile,
        options: &ShardOptions,
    ) -> Result<Table> {
        let layout = TableLayout {
            shards: file.shards,
            replicas: file.replicas,
        };
        let mut groups = Vec::new();
        for s in 0..layout.shards {
            let mut replicas = Vec::new();
            for r in 0..layout.replicas {
                let schema = match &schema {
                    Some(schema) => schema.clone(),
                    None => placeholder_schema()?,
                };
                let shard = Shard::open_logged(
                    &replica_dir(dir, file, s, r),
                    schema,
                    options.clone(),
                    Arc::new(RealFs),
                    Arc::new(SystemClock),
                    ShardLog::Fed {
                        published: committer.published_counter(),
                    },
                )?;
                replicas.push(NewReplica {
                    replica: shard,
                    memory_limit_bytes: None,
                });
            }
            match node.add_shard(name, s, replicas) {
                Ok(group) => groups.push(group),
                Err(e) => {
                    node.remove_table(name);
                    return Err(e.into());
                }
            }
        }
        let shards = Arc::new(TableShards {
            uid: file.uid,
            name: name.to_string(),
            shards: layout.shards,
            groups,
            schema_change: Mutex::new(()),
        });
        committer.register(shards.clone());
        Ok(Table {
            layout,
            shards,
            committer: committer.clone(),
        })
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.shards.name
    }

    /// The table's uid.
    pub fn uid(&self) -> u64 {
        self.shards.uid
    }

    /// The shards as the committer reaches them (for batches over several tables).
    pub fn table_shards(&self) -> &Arc<TableShards> {
        &self.shards
    }

    /// Shards and replicas.
    pub fn layout(&self) -> TableLayout {
        self.layout
    }

    /// The shards, with their replicas.
    pub fn shards(&self) -> &[Arc<ShardGroup<Shard>>] {
        &self.shards.groups
    }

    /// The schema (every shard has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.shards.schema()
    }

    /// Writes `ops` as one SCU, atomic over every shard and replica it touches;
    /// returns its number once it is durable and published.
    pub fn write(&self, ops: Vec<WriteOp>) -> Result<u64> {
        self.committer.write(vec![(self.shards.clone(), ops)])
    }

    /// Runs `read_with` with `read` turned into one snapshot for every shard it asks,
    /// choosing again (a bounded number of times) if a replica sealed past it meanwhile.
    fn at_one_snapshot<T>(
        &self,
        read: ReadOptions,
        mut read_with: impl FnMut(ReadOptions) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            let at = self
                .committer
                .choose_snapshot(read, || self.shards.max_sealed())?;
            let chosen = ReadOptions {
                at: Some(at),
                ..read
            };
            match read_with(chosen) {
                Err(QueryError::Store(StoreError::SnapshotGone { .. }))
                    if tries + 1 < MAX_SNAPSHOT_TRIES =>
                {
                    tries += 1;
                }
                answer => return answer,
            }
        }
    }

    fn group_of(&self, key: &[u8]) -> &Arc<ShardGroup<Shard>> {
        &self.shards.groups[shard_of(key, self.layout.shards) as usize]
    }

    /// The record with `key`, read by a replica of its shard: on this thread when the
    /// replica has a free worker slot and nobody queued, otherwise through its queue.
    pub fn get(&self, key: &[u8], read: ReadOptions) -> Result<(Option<Record>, SnapshotInfo)> {
        let group = self.group_of(key);
        self.at_one_snapshot(read, |read| {
            let key = key.to_vec();
            Ok(group.execute(move |shard| shard.get(&key, read))??)
        })
    }

    /// [`Table::get`] for a thread that must not wait (an event loop): the answer if a
    /// replica of the key's shard can read it on this thread now, `None` if the read
    /// would have to wait in a queue.
    pub fn get_now(
        &self,
        key: &[u8],
        read: ReadOptions,
    ) -> Result<Option<(Option<Record>, SnapshotInfo)>> {
        let group = self.group_of(key);
        self.at_one_snapshot(read, |read| {
            match group.try_execute_here(|shard| shard.get(key, read))? {
                Ok(answer) => Ok(Some(answer?)),
                Err(_) => Ok(None),
            }
        })
    }

    /// [`Shard::get_raw`] on the key's shard (see [`Table::get`]).
    pub fn get_raw(&self, key: &[u8], read: ReadOptions) -> Result<RawAnswer> {
        let group = self.group_of(key);
        self.at_one_snapshot(read, |read| {
            let key = key.to_vec();
            Ok(group.execute(move |shard| shard.get_raw(&key, read))??)
        })
    }

    /// [`Table::get_raw`] for a thread that must not wait, as [`Table::get_now`].
    pub fn get_raw_now(&self, key: &[u8], read: ReadOptions) -> Result<Option<RawAnswer>> {
        let group = self.group_of(key);
        self.at_one_snapshot(read, |read| {
            match group.try_execute_here(|shard| shard.get_raw(key, read))? {
                Ok(answer) => Ok(Some(answer?)),
                Err(_) => Ok(None),
            }
        })
    }

    /// [`Table::search`] for a thread that must not wait: the answer if the table has
    /// one shard and a replica can run the search on this thread now, `None` otherwise.
    pub fn search_now(&self, query: &Query) -> Result<Option<SearchResult>> {
        let [group] = self.shards.groups.as_slice() else {
            return Ok(None);
        };
        self.at_one_snapshot(query.read, |read| {
            let query = Query {
                read,
                ..query.clone()
            };
            match group.try_execute_here(|shard| shard.search(&query))? {
                Ok(answer) => Ok(Some(answer?)),
                Err(_) => Ok(None),
            }
        })
    }

    /// [`Table::count`] for a thread that must not wait, as [`Table::search_now`].
    pub fn count_now(
        &self,
        predicate: &Predicate,
        read: ReadOptions,
    ) -> Result<Option<(u64, SnapshotInfo)>> {
        let [group] = self.shards.groups.as_slice() else {
            return Ok(None);
        };
        self.at_one_snapshot(read, |read| {
            match group.try_execute_here(|shard| shard.count(predicate, read))? {
                Ok(answer) => Ok(Some(answer?)),
                Err(_) => Ok(None),
            }
        })
    }

    /// Records matching the query over all shards, ascending by key, all read at one
    /// snapshot.
    pub fn search(&self, query: &Query) -> Result<SearchResult> {
        self.at_one_snapshot(query.read, |read| {
            let query = Query {
                read,
                ..query.clone()
            };
            self.search_at(&query)
        })
    }

    fn search_at(&self, query: &Query) -> Result<SearchResult> {
        // Every shard works at once (the last on this thread); answers are merged when
        // all are in.
        let (last, others) = self
            .shards
            .groups
            .split_last()
            .expect("a table has a shard");
        let pending = others
            .iter()
            .map(|group| {
                let query = query.clone();
                group.submit(move |shard| shard.search(&query))
            })
            .collect::<puffer_store::Result<Vec<_>>>()?;
        let query_here = query.clone();
        let here = last.execute(move |shard| shard.search(&query_here))?;
        let mut results = Vec::with_capacity(self.shards.groups.len());
        for answer in pending {
            results.push(answer.wait()??);
        }
        results.push(here?);
        if results.len() == 1 {
            return Ok(results.pop().expect("one result"));
        }
        let snapshot = combined(results.iter().map(|r| r.snapshot));
        let mut truncated = results.iter().any(|r| r.truncated);
        let mut rows: Vec<Record> = results.into_iter().flat_map(|r| r.rows).collect();
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        if let Some(limit) = query.limit {
            if rows.len() > limit {
                rows.truncate(limit);
                truncated = true;
            }
        }
        Ok(SearchResult {
            rows,
            truncated,
            snapshot,
        })
    }

    /// Records matching `predicate` over all shards, counted at one snapshot.
    pub fn count(&self, predicate: &Predicate, read: ReadOptions) -> Result<(u64, SnapshotInfo)> {
        self.at_one_snapshot(read, |read| self.count_at(predicate, read))
    }

    fn count_at(&self, predicate: &Predicate, read: ReadOptions) -> Result<(u64, SnapshotInfo)> {
        let (last, others) = self
            .shards
            .groups
            .split_last()
            .expect("a table has a shard");
        let pending = others
            .iter()
            .map(|group| {
                let predicate = predicate.clone();
                group.submit(move |shard| shard.count(&predicate, read))
            })
            .collect::<puffer_store::Result<Vec<_>>>()?;
        let predicate_here = predicate.clone();
        let here = last.execute(move |shard| shard.count(&predicate_here, read))?;
        let mut total = 0;
        let mut snapshots = Vec::new();
        for answer in pending {
            let (count, snapshot) = answer.wait()??;
            total += count;
            snapshots.push(snapshot);
        }
        let (count, snapshot) = here?;
        total += count;
        snapshots.push(snapshot);
        Ok((total, combined(snapshots.into_iter())))
    }

    /// Sizes: disk and memory of every replica, records of one replica per shard.
    pub fn stats(&self) -> Result<ShardStats> {
        let mut total = ShardStats::default();
        for group in &self.shards.groups {
            for slot in group.replicas() {
                let stats = slot.pool().replica().stats()?;
                total.disk_bytes += stats.disk_bytes;
                total.memory_bytes += stats.memory_bytes;
                total.key_directory_bytes += stats.key_directory_bytes;
                total.record_cache += stats.record_cache;
                if slot.replica == 0 {
                    total.segment_records += stats.segment_records;
                    total.segments += stats.segments;
                    total.sorted_batches += stats.sorted_batches;
                    total.log_tables += stats.log_tables;
                }
            }
        }
        Ok(total)
    }

    /// Watermarks: the database's published snapshot, and the lowest sealed and
    /// compressed SCU over the replicas.
    pub fn watermarks(&self) -> Watermarks {
        let all: Vec<Watermarks> = self
            .shards
            .groups
            .iter()
            .flat_map(|g| g.replicas())
            .map(|slot| slot.pool().replica().watermarks())
            .collect();
        Watermarks {
            published: self.committer.published(),
            sorted: all.iter().map(|w| w.sorted).min().unwrap_or(0),
            compressed: all.iter().map(|w| w.compressed).min().unwrap_or(0),
        }
    }

    /// Seals every replica's log stage into sorted batches.
    pub fn seal(&self) -> Result<()> {
        for group in &self.shards.groups {
            for slot in group.replicas() {
                slot.pool().replica().seal()?;
            }
        }
        Ok(())
    }

    /// Compacts every replica into segments.
    pub fn compact_all(&self) -> Result<()> {
        for group in &self.shards.groups {
            for slot in group.replicas() {
                slot.pool().replica().compact_all()?;
            }
        }
        Ok(())
    }

    /// Whether every replica is running.
    pub fn is_running(&self) -> bool {
        self.shards
            .groups
            .iter()
            .all(|g| g.replicas().iter().all(|s| s.pool().replica().is_running()))
    }
}

/// Several shards' answers at one snapshot: that snapshot, the largest age, and
/// whether any read its log stage.
fn combined(snapshots: impl Iterator<Item = SnapshotInfo>) -> SnapshotInfo {
    snapshots
        .reduce(|a, b| SnapshotInfo {
            snapshot: a.snapshot.max(b.snapshot),
            age: a.age.max(b.age),
            read_log: a.read_log || b.read_log,
        })
        .unwrap_or(SnapshotInfo {
            snapshot: 0,
            age: Duration::ZERO,
            read_log: false,
        })
}

fn replica_dir(dir: &Path, file: &TableFile, shard: u32, replica: u32) -> PathBuf {
    if file.single_directory {
        return dir.to_path_buf();
    }
    dir.join(format!("shard-{shard}-replica-{replica}"))
}

fn write_table_file(dir: &Path, file: &TableFile) -> Result<()> {
    let path = dir.join(TABLE_FILE);
    let bytes = serde_json::to_vec_pretty(file).expect("table file serializes");
    puffer_store::fs::write_file_atomic(&puffer_store::fs::RealFs, &path, &bytes)
        .map_err(|e| StoreError::io(&path, e))?;
    Ok(())
}

/// Converts a table whose replicas kept their own logs: each replica is opened with
/// its log (replaying it), compacted so that its segments hold everything, and closed;
/// then the table file is written in the current format, with a new uid. A crash
/// before that last write leaves the table as it was, to be converted again.
fn convert_own_logs(dir: &Path, file: TableFile, options: &ShardOptions) -> Result<TableFile> {
    for s in 0..file.shards {
        for r in 0..file.replicas {
            let shard = Shard::open(
                replica_dir(dir, &file, s, r),
                placeholder_schema()?,
                ShardOptions {
                    background: false,
                    ..options.clone()
                },
            )?;
            shard.compact_all()?;
            shard.close();
        }
    }
    let converted = TableFile {
        format: TABLE_FORMAT,
        uid: new_table_uid(),
        ..file
    };
    write_table_file(dir, &converted)?;
    Ok(converted)
}

fn placeholder_schema() -> Result<Schema> {
    // A shard keeps its own schema; the one given at open is only used at creation.
    Ok(Schema::new("key", Vec::new())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_of_is_fnv1a_and_spreads_keys() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(
            shard_of(b"a", u32::MAX),
            (0xaf63_dc4c_8601_ec8cu64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(shard_of(b"anything", 1), 0);
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[shard_of(format!("key-{i}").as_bytes(), 4) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
