//! The broker: answers a table read from the data nodes, never from data of its
//! own. A read of one key goes to one node holding its shard; a read of every shard
//! is fanned out, one node per shard (spread over the nodes), all at one snapshot
//! that every node asked has published, then merged as on one node (rows by key,
//! LIMIT after, counts added). A node that fails (gone, late, refusing) is skipped
//! for a while and the read is tried again on the others, so a lost node costs no
//! answer; with no node left, the read fails whole, never partly.
//!
//! Data nodes hold every shard today (each follows the whole log); the placement of
//! segments on fewer nodes (Getafix) narrows the candidates per shard later.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use puffer_node::catalog::{Catalog, TableEntry};
use puffer_node::layout::shard_of;
use puffer_node::message::ReplicaRequest;
use puffer_node::table::merged;
use puffer_node::{ReadAnswer, ReadRequest};
use puffer_query::{QueryError, Result};
use puffer_store::StoreError;

use crate::rpc::client::NodeClient;

/// How long a failed node is skipped.
pub const SUSPECT_FOR: Duration = Duration::from_secs(2);
/// How long a table's catalog entry is used before it is read again.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// Most tries of one read (each on nodes not yet failed in it).
pub const MAX_TRIES: usize = 4;
/// How often a read that needs a newer snapshot than the data nodes hold asks again.
const SNAPSHOT_POLL: Duration = Duration::from_millis(2);
/// Most data nodes a broker routes to.
pub const MAX_DATA_NODES: usize = 1024;

struct DataNode {
    node_id: String,
    client: NodeClient,
    /// Until when it is skipped after a failure.
    suspect_until: Mutex<Option<Instant>>,
}

impl DataNode {
    fn usable(&self, now: Instant) -> bool {
        self.suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none_or(|until| now >= until)
    }

    fn suspect(&self) {
        *self
            .suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + SUSPECT_FOR);
    }
}

/// A broker over a cluster's data nodes.
pub struct Broker {
    catalog: Box<dyn Catalog>,
    nodes: RwLock<Vec<std::sync::Arc<DataNode>>>,
    entries: Mutex<HashMap<String, (Arc<TableEntry>, Instant)>>,
    next: AtomicUsize,
    deadline: Duration,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("nodes", &self.node_ids())
            .finish()
    }
}

/// Whether an error is the node's (try another) rather than the request's.
fn is_node_failure(error: &QueryError) -> bool {
    matches!(
        error,
        QueryError::Store(
            StoreError::Unavailable(_)
                | StoreError::Stopped(_)
                | StoreError::Overloaded(_)
                | StoreError::SnapshotGone { .. }
        )
    )
}

impl Broker {
    /// A broker reading table entries from `catalog`; each call has `deadline`.
    pub fn new(catalog: Box<dyn Catalog>, deadline: Duration) -> Broker {
        Broker {
            catalog,
            nodes: RwLock::new(Vec::new()),
            entries: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
            deadline,
        }
    }

    /// Routes to these data nodes, `(node id, gRPC address)` (from membership);
    /// nodes already known keep their connections and suspicion.
    pub fn set_data_nodes(&self, nodes: &[(String, String)]) -> crate::Result<()> {
        if nodes.len() > MAX_DATA_NODES {
            return Err(crate::ClusterError::Invalid(format!(
                "a broker routes to at most {MAX_DATA_NODES} data nodes"
            )));
        }
        let mut current = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = Vec::with_capacity(nodes.len());
        for (node_id, address) in nodes {
            match current
                .iter()
                .find(|n| &n.node_id == node_id && n.client.address() == address)
            {
                Some(known) => next.push(known.clone()),
                None => next.push(std::sync::Arc::new(DataNode {
                    node_id: node_id.clone(),
                    client: NodeClient::new(address, self.deadline)?,
                    suspect_until: Mutex::new(None),
                })),
            }
        }
        *current = next;
        Ok(())
    }

    /// The data nodes routed to.
    pub fn node_ids(&self) -> Vec<String> {
        self.nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|n| n.node_id.clone())
            .collect()
    }

    /// The table's entry: cached for [`ENTRY_TTL`], then read again; while the
    /// catalog does not answer (etcd away), the cached one serves on.
    fn entry(&self, table: &str) -> Result<Arc<TableEntry>> {
        let cached = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned();
        if let Some((entry, read_at)) = &cached {
            if read_at.elapsed() < ENTRY_TTL {
                return Ok(entry.clone());
            }
        }
        let entry = match self.catalog.table(table) {
            Ok(Some(entry)) => Arc::new(entry),
            Ok(None) => {
                self.entries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(table);
                return Err(QueryError::UnknownTable(table.to_string()));
            }
            Err(error) => match cached {
                Some((entry, _)) if error.retryable() => return Ok(entry),
                _ => return Err(error),
            },
        };
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(table.to_string(), (entry.clone(), Instant::now()));
        Ok(entry)
    }

    /// Answers `request` on table `table` from the data nodes.
    pub fn read(&self, table: &str, request: &ReadRequest) -> Result<ReadAnswer> {
        let entry = self.entry(table)?;
        let shards: Vec<u32> = match request {
            ReadRequest::Get { key, .. } | ReadRequest::GetRaw { key, .. } => {
                vec![shard_of(key, entry.layout.shards)]
            }
            _ => (0..entry.layout.shards).collect(),
        };
        let mut failed: Vec<String> = Vec::new();
        let mut last_error = None;
        for _ in 0..MAX_TRIES {
            let now = Instant::now();
            let candidates: Vec<std::sync::Arc<DataNode>> = self
                .nodes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|n| n.usable(now) && !failed.contains(&n.node_id))
                .cloned()
                .collect();
            if candidates.is_empty() {
                break;
            }
            let start = self.next.fetch_add(1, Ordering::Relaxed);
            // One node per shard, spread over the candidates.
            let chosen: Vec<std::sync::Arc<DataNode>> = (0..shards.len())
                .map(|i| candidates[(start + i) % candidates.len()].clone())
                .collect();
            match self.read_on(&entry, request, &shards, &chosen) {
                Ok(answer) => return Ok(answer),
                Err((node, error)) if is_node_failure(&error) => {
                    node.suspect();
                    failed.push(node.node_id.clone());
                    last_error = Some(error);
                }
                Err((_, error)) => return Err(error),
            }
        }
        Err(StoreError::Unavailable(format!(
            "no data node could answer a read of table {table:?} (tried {failed:?}); last \
             error: {}",
            last_error.map_or_else(|| "no data node is known".into(), |e| e.to_string())
        ))
        .into())
    }

    /// The newest snapshot every node of `nodes` has published; a failure names the
    /// node.
    fn common_published(
        &self,
        nodes: &[&std::sync::Arc<DataNode>],
    ) -> std::result::Result<u64, (std::sync::Arc<DataNode>, QueryError)> {
        let asked: Vec<_> = nodes.iter().map(|n| (n, n.client.published())).collect();
        let mut at = u64::MAX;
        for (node, answer) in asked {
            let published = answer
                .recv_timeout(self.deadline + Duration::from_secs(1))
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(format!(
                        "node {} did not answer",
                        node.node_id
                    )))
                })
                .map_err(|e| ((**node).clone(), QueryError::from(e)))?;
            at = at.min(published);
        }
        Ok(at)
    }

    /// One try: the snapshot, then every shard on its node, merged. A failure names the
    /// node it came from.
    fn read_on(
        &self,
        entry: &TableEntry,
        request: &ReadRequest,
        shards: &[u32],
        chosen: &[std::sync::Arc<DataNode>],
    ) -> std::result::Result<ReadAnswer, (std::sync::Arc<DataNode>, QueryError)> {
        let read = request.read_options();
        let request = if (shards.len() > 1 || read.min_snapshot > 0) && read.at.is_none() {
            // One snapshot for every shard: the newest that every chosen node holds,
            // waiting (until the deadline) for one at least as new as asked.
            let mut distinct: Vec<&std::sync::Arc<DataNode>> = Vec::new();
            for node in chosen {
                if !distinct.iter().any(|d| d.node_id == node.node_id) {
                    distinct.push(node);
                }
            }
            let give_up = Instant::now() + self.deadline;
            loop {
                let at = self.common_published(&distinct)?;
                if at >= read.min_snapshot {
                    break request.at(at);
                }
                if Instant::now() >= give_up {
                    return Err((
                        chosen[0].clone(),
                        StoreError::Unavailable(format!(
                            "the data nodes hold snapshot {at}; snapshot {} was asked for",
                            read.min_snapshot
                        ))
                        .into(),
                    ));
                }
                std::thread::sleep(SNAPSHOT_POLL);
            }
        } else {
            request.clone()
        };
        let pending: Vec<_> = shards
            .iter()
            .zip(chosen)
            .map(|(&shard, node)| {
                let reply = node.client.submit(
                    &entry.name,
                    entry.uid,
                    shard,
                    &ReplicaRequest::Read(request.clone()),
                );
                (node, reply)
            })
            .collect();
        let mut answers = Vec::with_capacity(pending.len());
        let mut failure = None;
        for (node, reply) in pending {
            let answer = reply
                .and_then(|r| r.wait())
                .and_then(|response| response.into_read());
            match answer {
                Ok(answer) => answers.push(answer),
                // Every reply is awaited (none is left running), the first failure kept.
                Err(error) => {
                    failure.get_or_insert(((*node).clone(), QueryError::from(error)));
                }
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        if answers.len() == 1 {
            return Ok(answers.pop().expect("one answer"));
        }
        merged(&request, answers).map_err(|e| (chosen[0].clone(), e))
    }
}
