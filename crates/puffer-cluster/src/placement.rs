//! Which data nodes hold each shard: the coordinator leader's placement, which brokers
//! route by.
//!
//! Every shard of every table (a segment, in Getafix's words) gets `replicas` holders
//! among the live data nodes ([`uniform_placement_keeping`]: current holders stay, a lost
//! node's replicas go to the least loaded nodes). The leader writes the placement to
//! `coordinated/placement` (fenced on its election) when it changes; brokers read it with
//! the members and send each shard's reads to one of its holders, or to any data node
//! when none of them is live. Popularity-driven replica counts (Getafix) will replace the
//! uniform policy here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use puffer_adapt::replication::uniform_placement_keeping;
use puffer_node::catalog::TableEntry;
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, Leadership};

/// How often the coordinator leader looks at the tables and the live data nodes.
pub const PLACEMENT_INTERVAL: Duration = Duration::from_secs(1);
/// Replicas of each shard by default.
pub const DEFAULT_SEGMENT_REPLICAS: usize = 2;
/// Most replicas of a shard.
pub const MAX_SEGMENT_REPLICAS: usize = 16;
/// The name of the placement under `coordinated/`.
pub const PLACEMENT_NAME: &str = "placement";

/// The holders of every shard: per table uid, per shard, the node ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlacement {
    /// Replicas each shard should have (fewer while there are fewer data nodes).
    pub replicas: usize,
    /// Per table uid, per shard, its holders (ascending).
    pub tables: BTreeMap<u64, Vec<Vec<String>>>,
}

impl ShardPlacement {
    /// The holders of shard `shard` of table `uid`, if placed.
    pub fn holders(&self, uid: u64, shard: u32) -> Option<&[String]> {
        self.tables
            .get(&uid)?
            .get(shard as usize)
            .map(Vec::as_slice)
    }

    /// Shards held per node.
    pub fn shards_per_node(&self) -> BTreeMap<String, usize> {
        let mut per_node = BTreeMap::new();
        for node in self.tables.values().flatten().flatten() {
            *per_node.entry(node.clone()).or_insert(0) += 1;
        }
        per_node
    }
}

/// The placement of `tables` on `data_nodes` with `replicas` per shard, keeping what
/// `current` places on nodes still there.
pub fn plan(
    tables: &[TableEntry],
    data_nodes: &[String],
    current: Option<&ShardPlacement>,
    replicas: usize,
) -> Result<ShardPlacement> {
    if !(1..=MAX_SEGMENT_REPLICAS).contains(&replicas) {
        return Err(ClusterError::Invalid(format!(
            "segment replicas is between 1 and {MAX_SEGMENT_REPLICAS}, got {replicas}"
        )));
    }
    let mut placement = ShardPlacement {
        replicas,
        tables: BTreeMap::new(),
    };
    if data_nodes.is_empty() {
        return Ok(placement);
    }
    let mut nodes: Vec<&String> = data_nodes.iter().collect();
    nodes.sort();
    nodes.dedup();
    // Segment ids: the position of (uid, shard) in ascending order.
    let shards: Vec<(u64, u32)> = {
        let mut all: Vec<(u64, u32)> = tables
            .iter()
            .flat_map(|t| (0..t.layout.shards).map(move |s| (t.uid, s)))
            .collect();
        all.sort();
        all
    };
    let segments: BTreeSet<u64> = (0..shards.len() as u64).collect();
    let held: Vec<BTreeSet<u64>> = nodes
        .iter()
        .map(|node| {
            shards
                .iter()
                .enumerate()
                .filter(|(_, &(uid, shard))| {
                    current
                        .and_then(|c| c.holders(uid, shard))
                        .is_some_and(|holders| holders.contains(node))
                })
                .map(|(segment, _)| segment as u64)
                .collect()
        })
        .collect();
    let placed = uniform_placement_keeping(&segments, &held, replicas)
        .map_err(|e| ClusterError::Invalid(e.to_string()))?;
    for table in tables {
        placement
            .tables
            .insert(table.uid, vec![Vec::new(); table.layout.shards as usize]);
    }
    for (node, segments) in placed.segments_by_node().iter().enumerate() {
        for &segment in segments {
            let (uid, shard) = shards[segment as usize];
            if let Some(table) = placement.tables.get_mut(&uid) {
                table[shard as usize].push(nodes[node].clone());
            }
        }
    }
    for holders in placement.tables.values_mut().flatten() {
        holders.sort();
    }
    Ok(placement)
}

/// The placement the coordinator leader last wrote, if any.
pub fn read_placement(etcd: &Etcd) -> Result<Option<ShardPlacement>> {
    let key = format!("{}{PLACEMENT_NAME}", etcd.keys().coordinated());
    let answer = etcd.call(move |mut client| async move { client.get(key, None).await })?;
    match answer.kvs().first() {
        None => Ok(None),
        Some(kv) => {
            serde_json::from_slice(kv.value())
                .map(Some)
                .map_err(|e| ClusterError::Corrupt {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    detail: e.to_string(),
                })
        }
    }
}

/// One round of the coordinator leader: plans from the catalog's tables and the live
/// data nodes, and writes the placement if it changed. Returns it.
pub fn coordinate(
    etcd: &Etcd,
    leadership: &Leadership,
    catalog: &dyn puffer_node::catalog::Catalog,
    replicas: usize,
) -> Result<ShardPlacement> {
    let tables = catalog
        .tables()
        .map_err(|e| ClusterError::Unavailable(format!("reading the tables: {e}")))?;
    let data_nodes: Vec<String> = crate::etcd::members(etcd)?
        .into_iter()
        .filter(|card| card.roles.contains(&crate::etcd::Role::Data))
        .map(|card| card.node_id)
        .collect();
    let current = read_placement(etcd)?;
    let next = plan(&tables, &data_nodes, current.as_ref(), replicas)?;
    if current.as_ref() != Some(&next) {
        let value = serde_json::to_vec(&next).expect("a placement encodes");
        leadership.put(PLACEMENT_NAME, value)?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_node::TableLayout;
    use puffer_store::Schema;

    fn table(uid: u64, shards: u32) -> TableEntry {
        TableEntry {
            name: format!("t{uid}"),
            uid,
            layout: TableLayout {
                shards,
                replicas: 1,
            },
            schema: Schema::new("id", Vec::new()).unwrap(),
        }
    }

    fn nodes(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_shard_gets_its_replicas_and_a_lost_node_moves_only_its_own() {
        let tables = [table(7, 4), table(3, 2)];
        let first = plan(&tables, &nodes(&["a", "b", "c"]), None, 2).unwrap();
        for table in &tables {
            for shard in 0..table.layout.shards {
                let holders = first.holders(table.uid, shard).unwrap();
                assert_eq!(holders.len(), 2, "{first:?}");
                assert_ne!(holders[0], holders[1]);
            }
        }
        // Six shards, twelve replicas, three nodes: four each.
        assert!(
            first.shards_per_node().values().all(|&n| n == 4),
            "{first:?}"
        );
        // Planned again with the same nodes: nothing moves.
        assert_eq!(
            plan(&tables, &nodes(&["c", "a", "b"]), Some(&first), 2).unwrap(),
            first
        );
        // b is lost: each of its shards keeps its other holder and gets one of a and c.
        let second = plan(&tables, &nodes(&["a", "c"]), Some(&first), 2).unwrap();
        for table in &tables {
            for shard in 0..table.layout.shards {
                let before = first.holders(table.uid, shard).unwrap();
                let after = second.holders(table.uid, shard).unwrap();
                assert_eq!(after, &nodes(&["a", "c"])[..], "{second:?}");
                for node in before.iter().filter(|n| *n != "b") {
                    assert!(after.contains(node));
                }
            }
        }
        // One node left: one replica each; none: nothing placed.
        let alone = plan(&tables, &nodes(&["c"]), Some(&second), 2).unwrap();
        assert!(alone.tables.values().flatten().all(|h| h == &nodes(&["c"])));
        assert!(plan(&tables, &[], None, 2).unwrap().tables.is_empty());
        assert!(plan(&tables, &nodes(&["a"]), None, 0).is_err());
    }
}
