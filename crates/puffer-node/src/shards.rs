//! A table's shards as the committer and readers reach them: each shard's replicas
//! behind request messages, and the schema they share.
//!
//! A cluster's data node holds only the shards placed on it: the others are
//! [`NotHeld`], which take the SCUs that touch them keeping only schema changes, and
//! refuse reads. A shard is taken on or let go by swapping its [`ShardSlot`] on the
//! committer's thread, between two SCUs.

use std::sync::{Arc, Mutex, RwLock};

use puffer_query::Result;
use puffer_store::wal::Op;
use puffer_store::{PreparedOps, Schema, StoreError};

use crate::message::{PendingReply, ReplicaRequest, ReplicaResponse, Reply, ShardReplicas, Wait};

/// One shard of a table as this node has it: its replicas, or [`NotHeld`].
pub struct ShardSlot {
    current: RwLock<Arc<dyn ShardReplicas>>,
}

impl ShardSlot {
    /// A slot holding `replicas`.
    pub fn new(replicas: Arc<dyn ShardReplicas>) -> ShardSlot {
        ShardSlot {
            current: RwLock::new(replicas),
        }
    }

    /// The shard's replicas as they are now.
    pub fn get(&self) -> Arc<dyn ShardReplicas> {
        self.current.read().expect("shard slot lock").clone()
    }

    /// Puts `replicas` in the slot (on the committer's thread, between SCUs).
    pub(crate) fn set(&self, replicas: Arc<dyn ShardReplicas>) {
        *self.current.write().expect("shard slot lock") = replicas;
    }

    /// Whether this node holds the shard.
    pub fn is_held(&self) -> bool {
        self.get().is_held()
    }
}

/// A shard this node does not hold: SCUs that touch it are taken and dropped (another
/// node holds them), except schema changes, which it keeps so that a table holding no
/// shard here still has its schema; reads and everything else are refused as
/// unavailable here.
pub struct NotHeld {
    table: String,
    shard: u32,
    schema: RwLock<Arc<Schema>>,
}

impl NotHeld {
    /// Shard `shard` of `table`, not held here, its table's schema `schema`.
    pub fn new(table: &str, shard: u32, schema: Arc<Schema>) -> NotHeld {
        NotHeld {
            table: table.to_string(),
            shard,
            schema: RwLock::new(schema),
        }
    }

    fn refused(&self) -> StoreError {
        not_held(&self.table, self.shard)
    }

    /// Takes the attributes an SCU adds (those it has already are skipped: a schema
    /// from the catalog may be ahead of the log).
    fn take_schema_changes(&self, ops: &PreparedOps) -> puffer_store::Result<()> {
        let added: Vec<_> = ops
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::AddAttribute(attribute) => Some(attribute.clone()),
                _ => None,
            })
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        let mut current = self.schema.write().expect("schema lock");
        let mut schema = (**current).clone();
        for attribute in added {
            if schema.id_of(&attribute.name).is_none() {
                schema.add_attribute(attribute)?;
            }
        }
        *current = Arc::new(schema);
        Ok(())
    }
}

impl ShardReplicas for NotHeld {
    fn replica_count(&self) -> u32 {
        1
    }

    fn is_held(&self) -> bool {
        false
    }

    fn read(&self, _request: ReplicaRequest, _wait: Wait) -> puffer_store::Result<Reply> {
        Err(self.refused())
    }

    fn submit(&self, _request: ReplicaRequest) -> puffer_store::Result<PendingReply<'_>> {
        Err(self.refused())
    }

    fn send_to(
        &self,
        _replica: u32,
        request: ReplicaRequest,
    ) -> puffer_store::Result<ReplicaResponse> {
        match request {
            ReplicaRequest::Apply { ops, .. } => {
                self.take_schema_changes(&ops)?;
                Ok(ReplicaResponse::Done)
            }
            ReplicaRequest::CheckWriteRoom | ReplicaRequest::FreezeWhenFull => {
                Ok(ReplicaResponse::Done)
            }
            ReplicaRequest::Schema => Ok(ReplicaResponse::Schema(
                self.schema.read().expect("schema lock").clone(),
            )),
            _ => Err(self.refused()),
        }
    }
}

/// The error a read of shard `shard` of `table` gets on a node not holding it.
pub fn not_held(table: &str, shard: u32) -> StoreError {
    StoreError::NotHeld(format!("shard {shard} of table {table}"))
}

/// Whether `error` says a node does not hold a shard (a broker then asks another
/// holder, without taking the node for failed), here or, carried in a broker's
/// refusal, on every node asked.
pub fn is_not_held(error: &puffer_query::QueryError) -> bool {
    matches!(
        error,
        puffer_query::QueryError::Store(StoreError::NotHeld(_))
    )
}

/// A table's shards and their replicas, as the committer reaches them.
pub struct TableShards {
    /// The table's uid (see the module docs).
    pub uid: u64,
    /// The table's name.
    pub name: String,
    /// Number of shards.
    pub shards: u32,
    /// Each shard's replicas, reached by request messages (see [`TableShards::replica`]).
    slots: Vec<ShardSlot>,
    /// The schema every replica has, as of the last SCU applied.
    schema: RwLock<Arc<Schema>>,
    /// Held by a writer whose SCU changes the schema, until it is applied.
    pub(crate) schema_change: Mutex<()>,
    /// Whether its shards are routed by the region in front of each key (a subspace)
    /// rather than by the key's hash.
    region_prefixed: std::sync::atomic::AtomicBool,
}

impl TableShards {
    /// A table's shards (`replicas[s]` is shard `s`), its schema read from a held
    /// shard's replica (or, holding none, from a [`NotHeld`]).
    pub fn new(uid: u64, name: &str, replicas: Vec<Arc<dyn ShardReplicas>>) -> Result<TableShards> {
        let first = replicas
            .iter()
            .find(|r| r.is_held())
            .or(replicas.first())
            .ok_or_else(|| {
                puffer_query::QueryError::Invalid(format!("table {name:?} needs a shard"))
            })?;
        let schema = first.send_to(0, ReplicaRequest::Schema)?.into_schema()?;
        Ok(TableShards {
            uid,
            name: name.to_string(),
            shards: replicas.len() as u32,
            slots: replicas.into_iter().map(ShardSlot::new).collect(),
            schema: RwLock::new(schema),
            schema_change: Mutex::new(()),
            region_prefixed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// How its records are spread over its shards.
    pub fn routing(&self) -> crate::layout::Routing {
        if self
            .region_prefixed
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            crate::layout::Routing::RegionPrefix
        } else {
            crate::layout::Routing::KeyHash
        }
    }

    /// Routes its shards by region from now on (a subspace, before any SCU reaches it).
    pub(crate) fn route_by_region(&self) {
        self.region_prefixed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The schema (every replica has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.schema.read().expect("schema lock").clone()
    }

    /// Shard `shard`'s replicas as they are now (panics past the last shard, as an
    /// index would: callers route by [`crate::layout::shard_of`]).
    pub fn replica(&self, shard: usize) -> Arc<dyn ShardReplicas> {
        self.slots[shard].get()
    }

    /// Shard `shard`'s slot.
    pub(crate) fn slot(&self, shard: usize) -> &ShardSlot {
        &self.slots[shard]
    }

    /// Every shard's replicas as they are now, held or not.
    pub fn all_replicas(&self) -> Vec<Arc<dyn ShardReplicas>> {
        self.slots.iter().map(ShardSlot::get).collect()
    }

    /// The shards held on this node.
    pub fn held(&self) -> Vec<u32> {
        (0..self.shards)
            .filter(|&s| self.slots[s as usize].is_held())
            .collect()
    }

    /// Reads the schema again from a held replica (or, holding none, a [`NotHeld`]),
    /// after an SCU that changed it was applied.
    pub(crate) fn refresh_schema(&self) -> Result<()> {
        let all = self.all_replicas();
        let first = all.iter().find(|r| r.is_held()).unwrap_or(&all[0]);
        let schema = first.send_to(0, ReplicaRequest::Schema)?.into_schema()?;
        *self.schema.write().expect("schema lock") = schema;
        Ok(())
    }

    /// The highest sealed SCU over every replica held here (a snapshot read on all of
    /// them must not be older).
    pub(crate) fn max_sealed(&self) -> Result<u64> {
        let mut max = 0;
        for shard in self.all_replicas().iter().filter(|r| r.is_held()) {
            for replica in 0..shard.replica_count() {
                let marks = shard
                    .send_to(replica, ReplicaRequest::Watermarks)?
                    .into_watermarks()?;
                max = max.max(marks.sorted);
            }
        }
        Ok(max)
    }

    /// Sends `request` to every replica of every shard held here, in order.
    pub(crate) fn to_every_replica(
        &self,
        request: impl Fn() -> ReplicaRequest,
    ) -> Result<Vec<ReplicaResponse>> {
        let mut answers = Vec::new();
        for shard in self.all_replicas().iter().filter(|r| r.is_held()) {
            for replica in 0..shard.replica_count() {
                answers.push(shard.send_to(replica, request())?);
            }
        }
        Ok(answers)
    }
}
