//! A table's shards as the committer and readers reach them: each shard's replicas
//! behind request messages, and the schema they share.

use std::sync::{Arc, Mutex, RwLock};

use puffer_query::Result;
use puffer_store::Schema;

use crate::message::{ReplicaRequest, ReplicaResponse, ShardReplicas};

/// A table's shards and their replicas, as the committer reaches them.
pub struct TableShards {
    /// The table's uid (see the module docs).
    pub uid: u64,
    /// The table's name.
    pub name: String,
    /// Number of shards.
    pub shards: u32,
    /// Each shard's replicas, reached by request messages.
    pub replicas: Vec<Arc<dyn ShardReplicas>>,
    /// The schema every replica has, as of the last SCU applied.
    schema: RwLock<Arc<Schema>>,
    /// Held by a writer whose SCU changes the schema, until it is applied.
    pub(crate) schema_change: Mutex<()>,
}

impl TableShards {
    /// A table's shards (`replicas[s]` is shard `s`), its schema read from a replica.
    pub fn new(uid: u64, name: &str, replicas: Vec<Arc<dyn ShardReplicas>>) -> Result<TableShards> {
        let first = replicas.first().ok_or_else(|| {
            puffer_query::QueryError::Invalid(format!("table {name:?} needs a shard"))
        })?;
        let schema = first.send_to(0, ReplicaRequest::Schema)?.into_schema()?;
        Ok(TableShards {
            uid,
            name: name.to_string(),
            shards: replicas.len() as u32,
            replicas,
            schema: RwLock::new(schema),
            schema_change: Mutex::new(()),
        })
    }

    /// The schema (every replica has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.schema.read().expect("schema lock").clone()
    }

    /// Reads the schema again from a replica, after an SCU that changed it was applied.
    pub(crate) fn refresh_schema(&self) -> Result<()> {
        let schema = self.replicas[0]
            .send_to(0, ReplicaRequest::Schema)?
            .into_schema()?;
        *self.schema.write().expect("schema lock") = schema;
        Ok(())
    }

    /// The highest sealed SCU over every replica (a snapshot read on all of them must
    /// not be older).
    pub(crate) fn max_sealed(&self) -> Result<u64> {
        let mut max = 0;
        for shard in &self.replicas {
            for replica in 0..shard.replica_count() {
                let marks = shard
                    .send_to(replica, ReplicaRequest::Watermarks)?
                    .into_watermarks()?;
                max = max.max(marks.sorted);
            }
        }
        Ok(max)
    }

    /// Sends `request` to every replica of every shard, in order.
    pub(crate) fn to_every_replica(
        &self,
        request: impl Fn() -> ReplicaRequest,
    ) -> Result<Vec<ReplicaResponse>> {
        let mut answers = Vec::new();
        for shard in &self.replicas {
            for replica in 0..shard.replica_count() {
                answers.push(shard.send_to(replica, request())?);
            }
        }
        Ok(answers)
    }
}
