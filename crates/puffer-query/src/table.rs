//! A table: its records spread over shards by key hash, each shard held by one or more
//! replicas (separate copies on this node, each serving reads from its own queue).
//!
//! On disk a table is `tables/<name>/` with `TABLE.json` (`{"format":1,"shards":S,
//! "replicas":R}`) and one shard directory per replica, `shard-<s>-replica-<r>/`.
//! A record with key `k` lives in shard `fnv1a64(k) mod S`. A table directory holding a
//! `MANIFEST` directly (the layout before sharding) opens as one shard, one replica.
//!
//! Writes go to every replica of the shard, in the same order (serialized per shard when
//! it has several replicas), before they are acknowledged, so any replica answers a read
//! with every acknowledged write. A batch is atomic per shard: a batch spanning shards
//! is split into one SCU per shard. Puts and deletes are idempotent, so retrying a batch
//! that failed part way (one shard overloaded) converges.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use puffer_store::serving::{AdaptiveNode, NewReplica, ShardGroup};
use puffer_store::{
    Predicate, Query, ReadOptions, Record, Schema, SearchResult, Shard, ShardOptions, ShardStats,
    SnapshotInfo, StoreError, Watermarks, WriteOp,
};
use serde::{Deserialize, Serialize};

use crate::error::{QueryError, Result};

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
}

const TABLE_FILE: &str = "TABLE.json";

/// The shard of `key` among `shards`: FNV-1a (64 bit) of the key bytes, modulo.
pub fn shard_of(key: &[u8], shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(shards.max(1))) as u32
}

/// A table's shards, registered with the node.
pub struct Table {
    name: String,
    layout: TableLayout,
    groups: Vec<Arc<ShardGroup<Shard>>>,
    write_order: Vec<Mutex<()>>,
}

impl Table {
    /// Creates the table's directories and opens it.
    pub(crate) fn create(
        node: &AdaptiveNode<Shard>,
        dir: &Path,
        name: &str,
        schema: Schema,
        layout: TableLayout,
        options: &ShardOptions,
    ) -> Result<Table> {
        layout.validate()?;
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let file = TableFile {
            format: 1,
            shards: layout.shards,
            replicas: layout.replicas,
        };
        let path = dir.join(TABLE_FILE);
        let bytes = serde_json::to_vec_pretty(&file).expect("table file serializes");
        puffer_store::fs::write_file_atomic(&puffer_store::fs::RealFs, &path, &bytes)
            .map_err(|e| StoreError::io(&path, e))?;
        Table::open_dirs(node, dir, name, Some(schema), layout, options)
    }

    /// Opens an existing table directory; `None` if it holds no finished table.
    pub(crate) fn open(
        node: &AdaptiveNode<Shard>,
        dir: &Path,
        name: &str,
        options: &ShardOptions,
    ) -> Result<Option<Table>> {
        let path = dir.join(TABLE_FILE);
        if dir.join("MANIFEST").exists() {
            // The layout before sharding: the directory is the one shard.
            let shard = Shard::open(dir, placeholder_schema()?, options.clone())?;
            let group = node.add_shard(
                name,
                0,
                vec![NewReplica {
                    replica: shard,
                    memory_limit_bytes: None,
                }],
            )?;
            return Ok(Some(Table {
                name: name.to_string(),
                layout: TableLayout::default(),
                groups: vec![group],
                write_order: vec![Mutex::new(())],
            }));
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e).into()),
        };
        let file: TableFile = serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::corrupt(&path, e.to_string()))?;
        let layout = TableLayout {
            shards: file.shards,
            replicas: file.replicas,
        };
        if file.format != 1 || layout.validate().is_err() {
            return Err(StoreError::corrupt(
                &path,
                format!(
                    "format {} with {} shards and {} replicas is not a table this version opens",
                    file.format, file.shards, file.replicas
                ),
            )
            .into());
        }
        if !(0..layout.shards)
            .all(|s| (0..layout.replicas).all(|r| replica_dir(dir, s, r).join("MANIFEST").exists()))
        {
            return Ok(None); // a creation that never finished
        }
        Table::open_dirs(node, dir, name, None, layout, options).map(Some)
    }

    fn open_dirs(
        node: &AdaptiveNode<Shard>,
        dir: &Path,
        name: &str,
        schema: Option<Schema>,
        layout: TableLayout,
        options: &ShardOptions,
    ) -> Result<Table> {
        let mut groups = Vec::new();
        for s in 0..layout.shards {
            let mut replicas = Vec::new();
            for r in 0..layout.replicas {
                let schema = match &schema {
                    Some(schema) => schema.clone(),
                    None => placeholder_schema()?,
                };
                let shard = Shard::open(replica_dir(dir, s, r), schema, options.clone())?;
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
        Ok(Table {
            name: name.to_string(),
            layout,
            groups,
            write_order: (0..layout.shards).map(|_| Mutex::new(())).collect(),
        })
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Shards and replicas.
    pub fn layout(&self) -> TableLayout {
        self.layout
    }

    /// The shards, with their replicas.
    pub fn shards(&self) -> &[Arc<ShardGroup<Shard>>] {
        &self.groups
    }

    fn first(&self) -> &Shard {
        self.groups[0].replicas()[0].pool().replica()
    }

    /// The schema (every shard has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.first().schema()
    }

    /// Writes `ops`: one SCU per shard touched, applied to every replica; returns the
    /// highest sequence number assigned (per shard sequences are independent).
    pub fn write(&self, ops: Vec<WriteOp>) -> Result<u64> {
        let shards = self.layout.shards;
        let mut per_shard: Vec<Vec<WriteOp>> = (0..shards).map(|_| Vec::new()).collect();
        if shards == 1 {
            per_shard[0] = ops;
        } else {
            for op in ops {
                let key = match &op {
                    WriteOp::Put(record) => &record.key,
                    WriteOp::PutFields(record) => &record.key,
                    WriteOp::Delete(key) => key,
                    // A schema change applies to every shard, in the same place.
                    WriteOp::AddAttribute(_) => {
                        for shard_ops in per_shard.iter_mut() {
                            shard_ops.push(op.clone());
                        }
                        continue;
                    }
                };
                per_shard[shard_of(key, shards) as usize].push(op);
            }
        }
        let mut last_seq = 0;
        for (s, ops) in per_shard.into_iter().enumerate() {
            if ops.is_empty() && shards > 1 {
                continue;
            }
            let replicas = self.groups[s].replicas();
            if replicas.len() == 1 {
                last_seq = last_seq.max(replicas[0].pool().replica().write(ops)?);
                continue;
            }
            // Same order on every replica, so their snapshots correspond.
            let _order = self.write_order[s].lock().expect("write order poisoned");
            for slot in replicas {
                last_seq = last_seq.max(slot.pool().replica().write(ops.clone())?);
            }
        }
        Ok(last_seq)
    }

    /// The record with `key`, read by a replica of its shard: on this thread when the
    /// replica has a free worker slot and nobody queued, otherwise through its queue.
    pub fn get(&self, key: &[u8], read: ReadOptions) -> Result<(Option<Record>, SnapshotInfo)> {
        let group = &self.groups[shard_of(key, self.layout.shards) as usize];
        let key = key.to_vec();
        Ok(group.execute(move |shard| shard.get(&key, read))??)
    }

    /// [`Table::get`] for a thread that must not wait (an event loop): the answer if a
    /// replica of the key's shard can read it on this thread now, `None` if the read
    /// would have to wait in a queue.
    pub fn get_now(
        &self,
        key: &[u8],
        read: ReadOptions,
    ) -> Result<Option<(Option<Record>, SnapshotInfo)>> {
        let group = &self.groups[shard_of(key, self.layout.shards) as usize];
        match group.try_execute_here(|shard| shard.get(key, read))? {
            Ok(answer) => Ok(Some(answer?)),
            Err(_) => Ok(None),
        }
    }

    /// [`Shard::get_raw`] on the key's shard (see [`Table::get`]).
    pub fn get_raw(&self, key: &[u8], read: ReadOptions) -> Result<RawAnswer> {
        let group = &self.groups[shard_of(key, self.layout.shards) as usize];
        let key = key.to_vec();
        Ok(group.execute(move |shard| shard.get_raw(&key, read))??)
    }

    /// [`Table::get_raw`] for a thread that must not wait, as [`Table::get_now`].
    pub fn get_raw_now(&self, key: &[u8], read: ReadOptions) -> Result<Option<RawAnswer>> {
        let group = &self.groups[shard_of(key, self.layout.shards) as usize];
        match group.try_execute_here(|shard| shard.get_raw(key, read))? {
            Ok(answer) => Ok(Some(answer?)),
            Err(_) => Ok(None),
        }
    }

    /// [`Table::search`] for a thread that must not wait: the answer if the table has
    /// one shard and a replica can run the search on this thread now, `None` otherwise.
    pub fn search_now(&self, query: &Query) -> Result<Option<SearchResult>> {
        let [group] = self.groups.as_slice() else {
            return Ok(None);
        };
        match group.try_execute_here(|shard| shard.search(query))? {
            Ok(answer) => Ok(Some(answer?)),
            Err(_) => Ok(None),
        }
    }

    /// [`Table::count`] for a thread that must not wait, as [`Table::search_now`].
    pub fn count_now(
        &self,
        predicate: &Predicate,
        read: ReadOptions,
    ) -> Result<Option<(u64, SnapshotInfo)>> {
        let [group] = self.groups.as_slice() else {
            return Ok(None);
        };
        match group.try_execute_here(|shard| shard.count(predicate, read))? {
            Ok(answer) => Ok(Some(answer?)),
            Err(_) => Ok(None),
        }
    }

    /// Records matching the query over all shards, ascending by key.
    pub fn search(&self, query: &Query) -> Result<SearchResult> {
        // Every shard works at once (the last on this thread); answers are merged when
        // all are in.
        let (last, others) = self.groups.split_last().expect("a table has a shard");
        let pending = others
            .iter()
            .map(|group| {
                let query = query.clone();
                group.submit(move |shard| shard.search(&query))
            })
            .collect::<puffer_store::Result<Vec<_>>>()?;
        let query_here = query.clone();
        let here = last.execute(move |shard| shard.search(&query_here))?;
        let mut results = Vec::with_capacity(self.groups.len());
        for answer in pending {
            results.push(answer.wait()??);
        }
        results.push(here?);
        if results.len() == 1 {
            return Ok(results.pop().expect("one result"));
        }
        let snapshot = oldest(results.iter().map(|r| r.snapshot));
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

    /// Records matching `predicate` over all shards.
    pub fn count(&self, predicate: &Predicate, read: ReadOptions) -> Result<(u64, SnapshotInfo)> {
        let (last, others) = self.groups.split_last().expect("a table has a shard");
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
        Ok((total, oldest(snapshots.into_iter())))
    }

    /// Sizes: disk and memory of every replica, records of one replica per shard.
    pub fn stats(&self) -> Result<ShardStats> {
        let mut total = ShardStats::default();
        for group in &self.groups {
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

    /// Watermarks of the first shard's first replica when there is one shard; otherwise
    /// the lowest of each over the shards (sequence numbers are per shard).
    pub fn watermarks(&self) -> Watermarks {
        let all: Vec<Watermarks> = self
            .groups
            .iter()
            .map(|g| g.replicas()[0].pool().replica().watermarks())
            .collect();
        Watermarks {
            published: all.iter().map(|w| w.published).min().unwrap_or(0),
            sorted: all.iter().map(|w| w.sorted).min().unwrap_or(0),
            compressed: all.iter().map(|w| w.compressed).min().unwrap_or(0),
        }
    }

    /// Seals every replica's log stage into sorted batches.
    pub fn seal(&self) -> Result<()> {
        for group in &self.groups {
            for slot in group.replicas() {
                slot.pool().replica().seal()?;
            }
        }
        Ok(())
    }

    /// Compacts every replica into segments.
    pub fn compact_all(&self) -> Result<()> {
        for group in &self.groups {
            for slot in group.replicas() {
                slot.pool().replica().compact_all()?;
            }
        }
        Ok(())
    }

    /// Whether every replica is running.
    pub fn is_running(&self) -> bool {
        self.groups
            .iter()
            .all(|g| g.replicas().iter().all(|s| s.pool().replica().is_running()))
    }
}

/// The oldest of several shards' snapshots: lowest snapshot, largest age.
fn oldest(snapshots: impl Iterator<Item = SnapshotInfo>) -> SnapshotInfo {
    snapshots
        .reduce(|a, b| SnapshotInfo {
            snapshot: a.snapshot.min(b.snapshot),
            age: a.age.max(b.age),
            read_log: a.read_log && b.read_log,
        })
        .unwrap_or(SnapshotInfo {
            snapshot: 0,
            age: Duration::ZERO,
            read_log: true,
        })
}

fn replica_dir(dir: &Path, shard: u32, replica: u32) -> PathBuf {
    dir.join(format!("shard-{shard}-replica-{replica}"))
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
