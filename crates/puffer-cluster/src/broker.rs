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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use puffer_node::catalog::{Catalog, TableEntry};
use puffer_node::layout::shard_of;
use puffer_node::message::ReplicaRequest;
use puffer_node::table::merged;
use puffer_node::{ReadAnswer, ReadRequest};
use puffer_query::{QueryError, Result};
use puffer_store::StoreError;

use crate::placement::ShardPlacement;
use crate::rpc::client::NodeClient;

/// How long a failed node is skipped.
pub const SUSPECT_FOR: Duration = Duration::from_secs(2);
/// How long a table's catalog entry is used before it is read again.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// Most tries of one read (each on nodes not yet failed in it).
pub const MAX_TRIES: usize = 4;
/// How soon a read that needs a newer snapshot than the data nodes hold asks again
/// when a node answered before holding it (the nodes wait on their side, so this is
/// for a node that does not).
const SNAPSHOT_POLL: Duration = Duration::from_millis(2);
/// Most data nodes a broker routes to.
pub const MAX_DATA_NODES: usize = 1024;

struct DataNode {
    node_id: String,
    client: NodeClient,
    /// Until when it is skipped after a failure, and the failure.
    suspect_until: Mutex<Option<(Instant, String)>>,
}

impl DataNode {
    fn usable(&self, now: Instant) -> bool {
        self.suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_none_or(|(until, _)| now >= *until)
    }

    fn suspect(&self, failure: String) {
        *self
            .suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now() + SUSPECT_FOR, failure));
    }

    /// The failure it was last skipped for.
    fn last_failure(&self) -> Option<String> {
        self.suspect_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, failure)| failure.clone())
    }
}

/// A broker over a cluster's data nodes.
pub struct Broker {
    catalog: Box<dyn Catalog>,
    nodes: RwLock<Vec<std::sync::Arc<DataNode>>>,
    entries: Mutex<HashMap<String, (Arc<TableEntry>, Instant)>>,
    next: AtomicUsize,
    deadline: Duration,
    /// The coordinator's placement: which data nodes hold each shard.
    placement: RwLock<Option<Arc<ShardPlacement>>>,
    /// Set when a read meets a shard the placement does not name (a new segment).
    placement_wanted: AtomicBool,
    /// Shards this broker had a node take on (held by no live node then), by (table
    /// uid, shard): reads go there while no live holder is placed (at most
    /// [`MAX_LOADED`] remembered).
    loaded: Mutex<HashMap<(u64, u32), String>>,
    /// Fan-outs of reads, and those that waited for their snapshot.
    waits: SnapshotWaitCounters,
}

/// Counts of a broker's fan-outs and of their waits for a snapshot the data nodes did
/// not hold yet (a read after a write through the same node, say).
#[derive(Debug, Default)]
struct SnapshotWaitCounters {
    fan_outs: AtomicU64,
    waited: AtomicU64,
    waited_us: AtomicU64,
}

/// A broker's fan-outs so far and their waits for a snapshot
/// ([`Broker::snapshot_waits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SnapshotWaits {
    /// Reads fanned out to data nodes (one read tried again on other nodes, or after
    /// a shard was taken on, is fanned out again).
    pub fan_outs: u64,
    /// Those that waited until the nodes held the snapshot asked for.
    pub waited: u64,
    /// Seconds they waited, all together: from asking the nodes to their answers
    /// (the round trip of the call included).
    pub waited_s: f64,
}

impl SnapshotWaits {
    /// What happened between `earlier` and these counts.
    pub fn since(&self, earlier: &SnapshotWaits) -> SnapshotWaits {
        SnapshotWaits {
            fan_outs: self.fan_outs.saturating_sub(earlier.fan_outs),
            waited: self.waited.saturating_sub(earlier.waited),
            waited_s: (self.waited_s - earlier.waited_s).max(0.0),
        }
    }
}

/// Most shards a broker remembers having had taken on.
pub const MAX_LOADED: usize = 65_536;

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
                | StoreError::NotHeld(_)
                | StoreError::Stopped(_)
                | StoreError::Overloaded(_)
        )
    )
}

/// One node for each of `shards` shards, among candidates whose answers last carried
/// queue lengths `queues`: each drawn (by `uniform`, in [0, 1)) with chances
/// inversely proportional to 1 + its queue, counting the shards of this read already
/// given to it as queued (BlowFish 3.3.2). Idle nodes share a read's shards; a busy
/// node gets fewer reads, and not none, so its queue length is heard again.
pub fn pick_nodes(queues: &[usize], shards: usize, uniform: impl FnMut() -> f64) -> Vec<usize> {
    let every: Vec<(usize, f64)> = (0..queues.len()).map(|i| (i, 0.0)).collect();
    pick_nodes_weighted(queues, &vec![every; shards], uniform)
}

/// [`pick_nodes`] where shard `i` may go only to the candidates `allowed[i]` (indices
/// into `queues`, at least one each: its holders), each with the share of the shard's
/// reads the placement gives it (Getafix's routing fractions): chances are
/// proportional to that share over 1 + its queue. A shard whose candidates all have
/// share 0 (no plan for it, or only holders the plan did not count on) is spread by
/// queues alone.
pub fn pick_nodes_weighted(
    queues: &[usize],
    allowed: &[Vec<(usize, f64)>],
    mut uniform: impl FnMut() -> f64,
) -> Vec<usize> {
    let mut load: Vec<f64> = queues.iter().map(|&q| 1.0 + q as f64).collect();
    allowed
        .iter()
        .map(|among| {
            let planned = among.iter().any(|&(_, share)| share > 0.0);
            let weight = |share: f64| if planned { share.max(0.0) } else { 1.0 };
            let total: f64 = among
                .iter()
                .map(|&(i, share)| weight(share) / load[i])
                .sum();
            let mut left = uniform() * total;
            let mut chosen = among.last().expect("a shard has a candidate").0;
            for &(i, share) in among {
                left -= weight(share) / load[i];
                if left < 0.0 {
                    chosen = i;
                    break;
                }
            }
            load[chosen] += 1.0;
            chosen
        })
        .collect()
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
            placement: RwLock::new(None),
            loaded: Mutex::new(HashMap::new()),
            placement_wanted: AtomicBool::new(false),
            waits: SnapshotWaitCounters::default(),
        }
    }

    /// Fan-outs of reads so far, and how many waited for their snapshot and how long.
    pub fn snapshot_waits(&self) -> SnapshotWaits {
        SnapshotWaits {
            fan_outs: self.waits.fan_outs.load(Ordering::Relaxed),
            waited: self.waits.waited.load(Ordering::Relaxed),
            waited_s: self.waits.waited_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }

    /// Counts a fan-out that waited since `waited` for its snapshot (`None`: it did not
    /// wait).
    fn count_wait(&self, waited: Option<Instant>) {
        if let Some(since) = waited {
            self.waits.waited.fetch_add(1, Ordering::Relaxed);
            let us = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.waits.waited_us.fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Routes each shard to its holders in `placement` (to any data node while none is
    /// given, or none of a shard's holders is known and usable).
    pub fn set_placement(&self, placement: Option<ShardPlacement>) {
        *self
            .placement
            .write()
            .unwrap_or_else(PoisonError::into_inner) = placement.map(Arc::new);
        self.placement_wanted.store(false, Ordering::Relaxed);
    }

    /// Whether a read met a shard the placement does not name since it was set.
    pub fn wants_placement(&self) -> bool {
        self.placement_wanted.load(Ordering::Relaxed)
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

    /// How it routes now: each data node with its address, the queue length its last
    /// answer carried, and whether it is skipped after a failure.
    pub fn routing(&self) -> Vec<serde_json::Value> {
        let now = Instant::now();
        self.nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|n| {
                serde_json::json!({
                    "node_id": n.node_id,
                    "rpc_address": n.client.address(),
                    "queue_length": n.client.queue_length(),
                    "skipped": !n.usable(now),
                    "last_failure": n.last_failure(),
                })
            })
            .collect()
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

    /// Answers `request` on table `table` from the data nodes. When the shards it needs
    /// are held by no live node (every node asked said it does not hold one), a live
    /// data node is asked to take them on from deep storage, and the read is tried
    /// again: answers are complete or refused, never partial.
    pub fn read(&self, table: &str, request: &ReadRequest) -> Result<ReadAnswer> {
        let entry = self.entry(table)?;
        let shards: Vec<u32> = match request {
            ReadRequest::Get { key, .. } | ReadRequest::GetRaw { key, .. } => {
                vec![shard_of(key, entry.layout.shards)]
            }
            _ => (0..entry.layout.shards).collect(),
        };
        match self.read_tries(&entry, request, &shards) {
            Err(error) if puffer_node::shards::is_not_held(&error) => {
                self.take_on_somewhere(&entry, &shards)?;
                self.read_tries(&entry, request, &shards)
            }
            answer => answer,
        }
    }

    /// Answers a search or count of subspace `subspace` from its regions `regions`
    /// (shards) only, as [`Broker::read`] does a table's, each row with the table's
    /// key.
    pub fn read_regions(
        &self,
        subspace: &str,
        request: &ReadRequest,
        regions: &[u32],
    ) -> Result<ReadAnswer> {
        let entry = self.entry(subspace)?;
        if entry.subspace_of.is_none() {
            return Err(QueryError::Invalid(format!(
                "{subspace} is not a subspace: it has no regions to read"
            )));
        }
        if matches!(
            request,
            ReadRequest::Get { .. } | ReadRequest::GetRaw { .. }
        ) {
            return Err(QueryError::Invalid(
                "a subspace's regions answer searches and counts, not gets".into(),
            ));
        }
        if regions.is_empty() || regions.iter().any(|&r| r >= entry.layout.shards) {
            return Err(QueryError::Invalid(format!(
                "regions {regions:?} asked of {subspace}, which has {} (0 to {})",
                entry.layout.shards,
                entry.layout.shards.saturating_sub(1)
            )));
        }
        match self.read_tries(&entry, request, regions) {
            Err(error) if puffer_node::shards::is_not_held(&error) => {
                self.take_on_somewhere(&entry, regions)?;
                self.read_tries(&entry, request, regions)
            }
            answer => answer,
        }
    }

    /// The data nodes to ask now, but those in `failed`: the ones not skipped after a
    /// failure, or, when each of them is, all of them. A suspicion orders the nodes,
    /// it does not condemn them: it is drawn from one failed call (a deadline missed
    /// on a busy machine, a replica stopped as its table was dropped), and refusing
    /// every read for `SUSPECT_FOR` because each node once failed turned a moment's
    /// failures into seconds without answers (a loopback cluster's searches failed
    /// while its subspaces were switched).
    fn nodes_to_ask(&self, failed: &[String]) -> Vec<Arc<DataNode>> {
        let now = Instant::now();
        let mut nodes: Vec<Arc<DataNode>> = self
            .nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|n| !failed.contains(&n.node_id))
            .cloned()
            .collect();
        if nodes.iter().any(|n| n.usable(now)) {
            nodes.retain(|n| n.usable(now));
        }
        nodes
    }

    /// Has a live data node take on each of `shards`, which the nodes asked did not
    /// hold: a holder the placement names first, else the first node to ask by id (the
    /// broker then sends that shard's reads there until the placement names a live
    /// holder).
    fn take_on_somewhere(&self, entry: &TableEntry, shards: &[u32]) -> Result<()> {
        let nodes = self.nodes_to_ask(&[]);
        let placement = self
            .placement
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for &shard in shards {
            // Called after the nodes asked answered that they do not hold the shard:
            // the holders the placement names may not have taken it on yet (a plan
            // that just moved it), so they are asked first to take it on now (a node
            // that holds it already says so at once), then any other.
            let placed: Vec<String> = placement
                .as_ref()
                .and_then(|p| p.holders(entry.uid, shard))
                .map(<[String]>::to_vec)
                .unwrap_or_default();
            let mut nodes = nodes.clone();
            nodes.sort_by_key(|n| !placed.contains(&n.node_id));
            let mut last_error = None;
            for node in &nodes {
                match node.client.take_on(&entry.name, entry.uid, shard) {
                    Ok(()) => {
                        let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
                        if loaded.len() >= MAX_LOADED {
                            loaded.clear();
                        }
                        loaded.insert((entry.uid, shard), node.node_id.clone());
                        last_error = None;
                        break;
                    }
                    Err(error) => last_error = Some(error),
                }
            }
            if let Some(error) = last_error {
                return Err(StoreError::Unavailable(format!(
                    "shard {shard} of table {} is held by no live node, and none could \
                     take it on: {error}",
                    entry.name
                ))
                .into());
            }
        }
        Ok(())
    }

    /// Up to [`MAX_TRIES`] tries of a read over `shards`, each on other nodes.
    fn read_tries(
        &self,
        entry: &Arc<TableEntry>,
        request: &ReadRequest,
        shards: &[u32],
    ) -> Result<ReadAnswer> {
        let table = entry.name.as_str();
        let mut failed: Vec<String> = Vec::new();
        let mut only_not_held = true;
        let mut last_error = None;
        let mut request = request.clone();
        for _ in 0..MAX_TRIES {
            let candidates = self.nodes_to_ask(&failed);
            if candidates.is_empty() {
                break;
            }
            // One holder per shard, fewer to those whose answers said they are busy.
            let queues: Vec<usize> = candidates.iter().map(|n| n.client.queue_length()).collect();
            let placement = self
                .placement
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let every: Vec<usize> = (0..candidates.len()).collect();
            let allowed: Vec<Vec<(usize, f64)>> = shards
                .iter()
                .map(|&shard| {
                    let holders = placement.as_ref().and_then(|p| p.holders(entry.uid, shard));
                    if holders.is_none() && placement.is_some() {
                        self.placement_wanted.store(true, Ordering::Relaxed);
                    }
                    let fractions = placement
                        .as_ref()
                        .and_then(|p| p.fractions(entry.uid, shard));
                    let mut among: Vec<(usize, f64)> = match holders {
                        Some(holders) => every
                            .iter()
                            .filter_map(|&i| {
                                let at =
                                    holders.iter().position(|h| *h == candidates[i].node_id)?;
                                Some((i, fractions.and_then(|f| f.get(at)).copied().unwrap_or(0.0)))
                            })
                            .collect(),
                        None => Vec::new(),
                    };
                    if among.is_empty() {
                        // A node asked to take the shard on holds it.
                        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Some(id) = loaded.get(&(entry.uid, shard)) {
                            among = every
                                .iter()
                                .filter(|&&i| &candidates[i].node_id == id)
                                .map(|&i| (i, 1.0))
                                .collect();
                        }
                    }
                    // No live holder known: any data node (those holding every shard,
                    // ingest and indexer nodes, answer; the others say they do not hold
                    // it and are passed over).
                    if among.is_empty() {
                        every.iter().map(|&i| (i, 1.0)).collect()
                    } else {
                        among
                    }
                })
                .collect();
            let chosen: Vec<std::sync::Arc<DataNode>> =
                pick_nodes_weighted(&queues, &allowed, || self.next_uniform())
                    .into_iter()
                    .map(|i| candidates[i].clone())
                    .collect();
            match self.read_on(entry, &request, shards, &chosen) {
                Ok(answer) => return Ok(answer),
                // A shard sealed past the snapshot this broker chose, between the
                // choice and the read: the node is well; choose again, at least that.
                // (A snapshot the caller chose goes back to it: it chooses again.)
                Err((_, QueryError::Store(StoreError::SnapshotGone { sealed, asked })))
                    if request.read_options().at.is_none() =>
                {
                    request = request.at_least(sealed);
                    only_not_held = false;
                    last_error = Some(StoreError::SnapshotGone { asked, sealed }.into());
                }
                Err((node, error)) if is_node_failure(&error) => {
                    // A node that does not hold a shard (yet, or any more) is fine for
                    // other reads: only this one passes it over.
                    let not_held = puffer_node::shards::is_not_held(&error);
                    if !not_held {
                        node.suspect(error.to_string());
                    }
                    only_not_held &= not_held;
                    failed.push(node.node_id.clone());
                    last_error = Some(error);
                }
                Err((_, error)) => return Err(error),
            }
        }
        let why = format!(
            "no data node could answer a read of table {table:?} (tried {failed:?}); last \
             error: {}",
            last_error
                .as_ref()
                .map_or_else(|| "no data node is known".into(), |e| e.to_string())
        );
        // Every node asked lacks a shard: it is held by none of them (see `read`).
        Err(if only_not_held && last_error.is_some() {
            StoreError::NotHeld(why)
        } else {
            StoreError::Unavailable(why)
        }
        .into())
    }

    /// A draw in [0, 1): splitmix64 over a shared counter (cheap, lock-free, good
    /// enough to spread load).
    fn next_uniform(&self) -> f64 {
        let mut z =
            (self.next.fetch_add(1, Ordering::Relaxed) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A snapshot for a read of several tables at once: the newest every usable data
    /// node has published, waiting (up to the deadline) until that is at least
    /// `floor`. A node that fails to answer is skipped, as in a read.
    pub fn common_snapshot(&self, floor: u64) -> Result<u64> {
        let give_up = Instant::now() + self.deadline;
        let mut failures = 0;
        loop {
            let now = Instant::now();
            let nodes = self.nodes_to_ask(&[]);
            if nodes.is_empty() {
                return Err(StoreError::Unavailable(
                    "no data node is known to choose a snapshot at".into(),
                )
                .into());
            }
            let asked: Vec<&Arc<DataNode>> = nodes.iter().collect();
            match self.common_published_at_least(&asked, floor, give_up) {
                Ok((at, _)) if at >= floor => return Ok(at),
                Ok((at, _)) if now >= give_up => {
                    return Err(StoreError::Unavailable(format!(
                        "the data nodes hold snapshot {at}; snapshot {floor} was asked for"
                    ))
                    .into())
                }
                // A node without the wait (or one that answered early): ask again.
                Ok(_) => std::thread::sleep(SNAPSHOT_POLL),
                Err((node, error)) => {
                    failures += 1;
                    if failures >= MAX_TRIES {
                        return Err(error);
                    }
                    node.suspect(error.to_string());
                }
            }
        }
    }

    /// The newest snapshot every node of `nodes` has published once every one holds
    /// `at_least`, or `give_up` has come (or half the deadline, the most one call
    /// waits): each node waits on its side (one call each, all at once) and answers as
    /// soon as it holds the snapshot; and whether any of them waited. A failure names
    /// the node.
    fn common_published_at_least(
        &self,
        nodes: &[&std::sync::Arc<DataNode>],
        at_least: u64,
        give_up: Instant,
    ) -> std::result::Result<(u64, bool), (std::sync::Arc<DataNode>, QueryError)> {
        let wait = give_up.saturating_duration_since(Instant::now());
        let asked: Vec<_> = nodes
            .iter()
            .map(|n| (n, n.client.published_at_least(at_least, wait)))
            .collect();
        let mut at = u64::MAX;
        let mut waited = false;
        for (node, answer) in asked {
            let held = answer
                .recv_timeout(self.deadline + Duration::from_secs(1))
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(format!(
                        "node {} did not answer",
                        node.node_id
                    )))
                })
                .map_err(|e| ((**node).clone(), QueryError::from(e)))?;
            at = at.min(held.published);
            waited |= held.waited;
        }
        Ok((at, waited))
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
        self.waits.fan_outs.fetch_add(1, Ordering::Relaxed);
        let read = request.read_options();
        // A read of several shards takes one snapshot every chosen node holds, at least
        // the one asked for; a read at a given snapshot (a time-partitioned table's
        // later chunks, at the snapshot its first chunk was read at) waits, as long as
        // the deadline allows, until the chosen nodes hold it.
        let choose = read.at.is_none() && (shards.len() > 1 || read.min_snapshot > 0);
        let needed = read.at.unwrap_or(read.min_snapshot);
        let request = if choose || read.at.is_some_and(|at| at > 0) {
            let mut distinct: Vec<&std::sync::Arc<DataNode>> = Vec::new();
            for node in chosen {
                if !distinct.iter().any(|d| d.node_id == node.node_id) {
                    distinct.push(node);
                }
            }
            let asked_at = Instant::now();
            let give_up = asked_at + self.deadline;
            // Asked with the wait at once (a node holding the snapshot answers without
            // one): asking first without it, to count only the reads that wait, cost a
            // second round trip to every read that did. The node says whether it waited.
            let mut waiting_since = None;
            // Every way out of the wait passes the one count below it.
            let held = loop {
                let at = match self.common_published_at_least(&distinct, needed, give_up) {
                    Ok((at, waited)) => {
                        if waited {
                            waiting_since.get_or_insert(asked_at);
                        }
                        if at >= needed {
                            break Ok(at);
                        }
                        at
                    }
                    Err(failed) => break Err(failed),
                };
                waiting_since.get_or_insert(asked_at);
                if Instant::now() >= give_up {
                    break Err((
                        chosen[0].clone(),
                        StoreError::Unavailable(format!(
                            "the data nodes hold snapshot {at}; snapshot {needed} was asked for"
                        ))
                        .into(),
                    ));
                }
                // A node that answered before it held the snapshot (its wait is cut to
                // half the deadline): ask again.
                std::thread::sleep(SNAPSHOT_POLL);
            };
            self.count_wait(waiting_since);
            let at = held?;
            if choose {
                request.at(at)
            } else {
                request.clone()
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
        if entry.subspace_of.is_some() {
            // Keys as the table has them before the merge, which orders by key.
            answers = answers
                .into_iter()
                .map(puffer_node::subspace::with_table_keys)
                .collect();
        }
        if answers.len() == 1 {
            return Ok(answers.pop().expect("one answer"));
        }
        merged(&request, answers).map_err(|e| (chosen[0].clone(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::{pick_nodes, pick_nodes_weighted, Broker};
    use std::time::Duration;

    /// Suspicion orders the nodes: the unsuspected are asked, all of them when each
    /// is suspected, never one the read already failed on (a model: the set of ids).
    #[test]
    fn suspected_nodes_are_asked_only_when_every_node_is() {
        let broker = Broker::new(
            Box::new(puffer_node::catalog::MemoryCatalog::new()),
            Duration::from_secs(1),
        );
        let addresses: Vec<(String, String)> = (0..3)
            .map(|i| (format!("n{i}"), format!("127.0.0.1:{}", 1 + i)))
            .collect();
        broker.set_data_nodes(&addresses).unwrap();
        let ids = |failed: &[&str]| -> Vec<String> {
            let failed: Vec<String> = failed.iter().map(|f| f.to_string()).collect();
            broker
                .nodes_to_ask(&failed)
                .iter()
                .map(|n| n.node_id.clone())
                .collect()
        };
        let suspect = |id: &str| {
            let nodes = broker.nodes.read().unwrap();
            nodes
                .iter()
                .find(|n| n.node_id == id)
                .unwrap()
                .suspect("test".into());
        };
        assert_eq!(ids(&[]), ["n0", "n1", "n2"]);
        suspect("n1");
        assert_eq!(ids(&[]), ["n0", "n2"]);
        assert_eq!(ids(&["n0"]), ["n2"]);
        // The only unsuspected node failed in this read: the suspect is asked.
        assert_eq!(ids(&["n0", "n2"]), ["n1"]);
        suspect("n0");
        suspect("n2");
        // Every node suspected: all are asked (before, a read failed at once).
        assert_eq!(ids(&[]), ["n0", "n1", "n2"]);
        assert_eq!(broker.nodes_to_ask(&[]).len(), 3);
        assert_eq!(ids(&["n0", "n1", "n2"]), Vec::<String>::new());
    }

    /// Draws from a fixed sequence (splitmix64), so the test is exact each run.
    fn draws(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed;
        move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// How often each node is picked for one-shard reads, as shares.
    fn shares(queues: &[usize], reads: usize) -> Vec<f64> {
        let mut uniform = draws(7);
        let mut counts = vec![0usize; queues.len()];
        for _ in 0..reads {
            for node in pick_nodes(queues, 1, &mut uniform) {
                counts[node] += 1;
            }
        }
        counts.iter().map(|&c| c as f64 / reads as f64).collect()
    }

    #[test]
    fn reads_go_to_nodes_inversely_to_their_queues() {
        for queues in [vec![0, 0, 0], vec![0, 3], vec![1, 4, 9, 0], vec![5]] {
            let inverse: Vec<f64> = queues.iter().map(|&q| 1.0 / (1.0 + q as f64)).collect();
            let total: f64 = inverse.iter().sum();
            let got = shares(&queues, 40_000);
            for (node, (share, weight)) in got.iter().zip(&inverse).enumerate() {
                let expected = weight / total;
                assert!(
                    (share - expected).abs() < 0.01,
                    "queues {queues:?}: node {node} got {share:.3}, expected {expected:.3}"
                );
            }
        }
    }

    #[test]
    fn shards_of_one_read_count_as_load() {
        // Three shards over three idle nodes: a node given one shard is half as
        // likely to get the next, so reads spread more evenly than independent draws.
        let mut uniform = draws(11);
        let (mut spread, reads) = (0, 10_000);
        for _ in 0..reads {
            let picked = pick_nodes(&[0, 0, 0], 3, &mut uniform);
            assert_eq!(picked.len(), 3);
            assert!(picked.iter().all(|&n| n < 3));
            let mut distinct = picked.clone();
            distinct.sort_unstable();
            distinct.dedup();
            spread += usize::from(distinct.len() == 3);
        }
        // Independent uniform draws put three shards on three nodes 2/9 of the time.
        let share = spread as f64 / reads as f64;
        assert!(share > 0.3, "three distinct nodes in {share:.3} of reads");
    }

    #[test]
    fn a_shard_goes_only_to_its_holders_inversely_to_their_queues() {
        // Shard 0 is on nodes 0 and 2, shard 1 on node 1 only.
        let (queues, allowed) = ([0, 5, 3], vec![vec![(0, 0.0), (2, 0.0)], vec![(1, 0.0)]]);
        let mut uniform = draws(3);
        let (mut on_zero, reads) = (0usize, 40_000);
        for _ in 0..reads {
            let picked = pick_nodes_weighted(&queues, &allowed, &mut uniform);
            assert!(
                (picked[0] == 0 || picked[0] == 2) && picked[1] == 1,
                "{picked:?}"
            );
            on_zero += usize::from(picked[0] == 0);
        }
        // 1 / (1 + 0) against 1 / (1 + 3): node 0 takes four fifths.
        let share = on_zero as f64 / reads as f64;
        assert!((share - 0.8).abs() < 0.01, "node 0 took {share:.3}");
    }

    #[test]
    fn planned_shares_weigh_against_queues_and_unplanned_shards_follow_queues() {
        // Shard 0: node 0 planned for 3/4, node 2 for 1/4; shard 1: no plan (all 0).
        let queues = [1, 0, 1];
        let allowed = vec![vec![(0, 0.75), (2, 0.25)], vec![(1, 0.0), (2, 0.0)]];
        let mut uniform = draws(11);
        let (mut zero, mut one, reads) = (0usize, 0usize, 60_000);
        for _ in 0..reads {
            let picked = pick_nodes_weighted(&queues, &allowed, &mut uniform);
            zero += usize::from(picked[0] == 0);
            one += usize::from(picked[1] == 1);
        }
        // Equal queues on 0 and 2: the planned shares, 3/4.
        let share = zero as f64 / reads as f64;
        assert!((share - 0.75).abs() < 0.01, "node 0 took {share:.3}");
        // Shard 1 by queues and the read's own load: node 1 has 1 / (1 + 0); node 2
        // has 1 / (1 + 1 + 1) when shard 0 went there too (1/4), else 1 / (1 + 1).
        let expected = 0.75 * (1.0 / (1.0 + 0.5)) + 0.25 * (1.0 / (1.0 + 1.0 / 3.0));
        let share = one as f64 / reads as f64;
        assert!(
            (share - expected).abs() < 0.01,
            "node 1 took {share:.3}, expected {expected:.3}"
        );
    }
}
