//! Which data nodes hold each shard: the coordinator leader's placement, which brokers
//! route by.
//!
//! Every shard of every table (a segment, in Getafix's words) gets at least `replicas`
//! holders among the live data nodes, so that a lost node costs no answer: current
//! holders stay, a lost node's replicas go to the nodes holding the fewest. Once reads
//! have been counted ([`crate::popularity`]), every window the leader plans by
//! popularity as Getafix does (ModifiedBestFit, the bins matched onto the nodes with the
//! fewest transfers, at most one replica of a shard dropped per run, never below the
//! floor): a hot shard gets more holders, and each holder a share of the shard's reads
//! (`fractions`), which brokers route by. Between windows the placement is only
//! repaired (lost nodes, new shards). The leader writes the placement to
//! `coordinated/placement` (fenced on its election) when it changes; brokers read it with
//! the members and send each shard's reads to one of its holders, or to any data node
//! when none of them is live.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use puffer_adapt::replication::joint::{
    check_curve, joint_plan, JointChoice, JointConfig, LayerCost,
};
use puffer_adapt::replication::{
    collect_garbage, inherit_from_predecessors, lazy_transition, match_bins_to_nodes,
    modified_best_fit, placement_keeping, scarlett_placement, uniform_placement_keeping, GcConfig,
    NodeStorage, ScarlettConfig, MAX_SEGMENT_SIZE_BYTES,
};

use crate::popularity::NodeRoom;
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardPlacement {
    /// Replicas each shard should have (fewer while there are fewer data nodes).
    pub replicas: usize,
    /// Per table uid, per shard, its holders (ascending).
    pub tables: BTreeMap<u64, Vec<Vec<String>>>,
    /// Per table uid, per shard, the share of its reads each holder (in the order of
    /// `tables`) should serve, summing to 1; a shard absent or all zeros: its holders
    /// share its reads by their queue lengths alone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fractions: BTreeMap<u64, Vec<Vec<f64>>>,
    /// Per table uid, per shard, the holders the last popularity run no longer wants:
    /// they keep the shard (with no share of its reads) until the next run, which lets
    /// them go unless the shard is wanted there again (Getafix's lazy deletion).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropping: BTreeMap<u64, Vec<Vec<String>>>,
    /// Per table uid, per shard, the sample layers the joint planner chose for every
    /// replica (0: each holder's layer manager chooses, as with no joint plan).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layers: BTreeMap<u64, Vec<u32>>,
    /// What the joint planner chose in the last popularity run, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint: Option<JointReport>,
}

/// The joint planner's choice in one popularity run (issue 18, item 4): per shard,
/// more layers on its replicas or more replicas, whichever needs less memory for the
/// reads it gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JointReport {
    /// `"layers and replicas"` (a step per shard) or `"replicas alone at step K"` (the
    /// same layers everywhere: Getafix's plan on one step of the curves).
    pub chosen: String,
    /// Memory of every replica of every planned shard under the plan.
    pub memory_bytes: u64,
    /// Memory the best plan of replicas alone would take.
    pub replicas_alone_memory_bytes: u64,
    /// Whether even the plan leaves the nodes more work than their budget.
    pub overloaded: bool,
    /// Per shard read in the window: what it got and why.
    pub decisions: Vec<JointShardDecision>,
}

/// One shard's part of a [`JointReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JointShardDecision {
    /// The table's uid.
    pub table_uid: u64,
    /// The shard.
    pub shard: u32,
    /// Layers on each of its replicas.
    pub layers: u32,
    /// Its replicas in the plan.
    pub replicas: usize,
    /// The memory its replicas take.
    pub memory_bytes: u64,
    /// Why.
    pub reason: String,
}

/// How a window's run chooses each shard's replicas.
#[derive(Clone, Copy, Debug)]
pub enum Planner<'a> {
    /// Getafix: ModifiedBestFit on the aged popularity.
    Getafix,
    /// Getafix with layers: the joint plan, or Getafix where no curve is measured yet.
    Joint(JointInput<'a>),
    /// Scarlett, the baseline: per shard, one replica per read in flight on average
    /// over the last window (given here, rounded up), at least the floor, placed
    /// keeping the holders it has, each serving an equal share; then the same lazy
    /// drops and garbage collection as Getafix.
    Scarlett(&'a BTreeMap<(u64, u32), f64>),
}

/// What a popularity run needs to plan layers and replicas together.
#[derive(Clone, Copy, Debug)]
pub struct JointInput<'a> {
    /// Per shard, its storage-throughput curve as its holders measured it; a shard
    /// with none is planned at one step (replicas only), with the service time of the
    /// measured shards' shallowest steps (their median) and the footprint its holders
    /// reported.
    pub curves: &'a BTreeMap<(u64, u32), Vec<LayerCost>>,
    /// Reads per second that one unit of popularity stands for (popularity ages the
    /// windows' counts by halving, so a steady rate of `r` reads a second reads as
    /// about `2 r window`).
    pub reads_per_second_per_popularity: f64,
    /// The work a node takes on.
    pub config: JointConfig,
}

/// A joint plan over a run's segment numbers: its bins, the layers to set per segment,
/// and the report.
type JointRun = (
    puffer_adapt::replication::Plan,
    BTreeMap<u64, u32>,
    JointReport,
);

/// The joint plan of a run, over the run's segment numbers, with the report; `None`
/// when no shard has a curve yet (then Getafix plans replicas alone, on loads).
fn joint_run(
    input: &JointInput<'_>,
    shards: &[(u64, u32)],
    loads: &BTreeMap<u64, f64>,
    storage: Option<&BTreeMap<String, NodeRoom>>,
    nodes: usize,
) -> Result<Option<JointRun>> {
    let measured: BTreeMap<u64, &Vec<LayerCost>> = shards
        .iter()
        .enumerate()
        .filter_map(|(segment, key)| {
            // A bad curve (a node's measurement gone wrong) counts as none.
            let curve = input
                .curves
                .get(key)
                .filter(|c| check_curve(segment as u64, c).is_ok())?;
            Some((segment as u64, curve))
        })
        .collect();
    if measured.is_empty() {
        return Ok(None);
    }
    let mut shallowest: Vec<f64> = measured.values().map(|c| c[0].seconds_per_query).collect();
    shallowest.sort_by(f64::total_cmp);
    let typical_seconds = shallowest[shallowest.len() / 2];
    let mut curves: BTreeMap<u64, Vec<LayerCost>> = BTreeMap::new();
    let mut rates: BTreeMap<u64, f64> = BTreeMap::new();
    for (segment, key) in shards.iter().enumerate() {
        let segment = segment as u64;
        let curve = match measured.get(&segment) {
            Some(curve) => (*curve).clone(),
            None => vec![LayerCost {
                layers: 1,
                footprint_bytes: storage
                    .map_or(0, |rooms| largest_footprint(rooms, key))
                    .clamp(1, MAX_SEGMENT_SIZE_BYTES),
                seconds_per_query: typical_seconds,
            }],
        };
        curves.insert(segment, curve);
        let rate =
            loads.get(&segment).copied().unwrap_or(0.0) * input.reads_per_second_per_popularity;
        rates.insert(segment, if rate.is_finite() { rate.max(0.0) } else { 0.0 });
    }
    let invalid = |e: puffer_adapt::ConfigError| ClusterError::Invalid(e.to_string());
    let plan = joint_plan(&rates, &curves, nodes, &input.config).map_err(invalid)?;
    let layers: BTreeMap<u64, u32> = plan
        .layers_by_segment
        .iter()
        // Set only where the plan chose among steps it knows: a shard measured at one
        // layer count alone is left to its nodes' layer managers, which explore others
        // under load (pinned, it could never show what another count is worth).
        .filter(|(segment, _)| measured.get(segment).is_some_and(|c| c.len() >= 2))
        .filter(|(segment, _)| rates.get(segment).is_some_and(|&r| r > 0.0))
        .map(|(&segment, &layers)| (segment, layers))
        .collect();
    let report = JointReport {
        chosen: match plan.chosen {
            JointChoice::Joint => "layers and replicas".to_string(),
            JointChoice::ReplicasAlone { layers_step } => {
                format!("replicas alone at step {layers_step}")
            }
        },
        memory_bytes: plan.memory_bytes,
        replicas_alone_memory_bytes: plan.replicas_alone_memory_bytes,
        overloaded: plan.overloaded,
        decisions: plan
            .decisions
            .iter()
            .filter(|d| rates.get(&d.segment).is_some_and(|&r| r > 0.0))
            .map(|d| {
                let (table_uid, shard) = shards[d.segment as usize];
                JointShardDecision {
                    table_uid,
                    shard,
                    layers: d.layers,
                    replicas: d.replicas,
                    memory_bytes: d.memory_bytes,
                    reason: if measured.contains_key(&d.segment) {
                        d.reason.clone()
                    } else {
                        "no curve measured yet: replicas only".to_string()
                    },
                }
            })
            .collect(),
    };
    Ok(Some((plan.plan, layers, report)))
}

impl ShardPlacement {
    /// The holders of shard `shard` of table `uid`, if placed.
    pub fn holders(&self, uid: u64, shard: u32) -> Option<&[String]> {
        self.tables
            .get(&uid)?
            .get(shard as usize)
            .map(Vec::as_slice)
    }

    /// The layers the joint planner chose for shard `shard` of table `uid`'s replicas,
    /// if it chose any.
    pub fn planned_layers(&self, uid: u64, shard: u32) -> Option<u32> {
        self.layers
            .get(&uid)?
            .get(shard as usize)
            .copied()
            .filter(|&layers| layers > 0)
    }

    /// The shares of shard `shard` of table `uid`'s reads, one per holder, if planned.
    pub fn fractions(&self, uid: u64, shard: u32) -> Option<&[f64]> {
        self.fractions
            .get(&uid)?
            .get(shard as usize)
            .map(Vec::as_slice)
            .filter(|f| f.iter().any(|&x| x > 0.0))
    }

    /// The holders of shard `shard` of table `uid` that the next run lets go.
    pub fn dropping(&self, uid: u64, shard: u32) -> &[String] {
        self.dropping
            .get(&uid)
            .and_then(|t| t.get(shard as usize))
            .map_or(&[], Vec::as_slice)
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

/// What both planners start from: `replicas` checked, an empty placement, the live
/// data nodes (sorted, once each), every shard of `tables` as a segment (its position
/// in ascending (uid, shard) order), and the segments each node holds in `current`.
struct Start<'a> {
    placement: ShardPlacement,
    nodes: Vec<&'a String>,
    shards: Vec<(u64, u32)>,
    held: Vec<BTreeSet<u64>>,
}

fn start<'a>(
    tables: &[TableEntry],
    data_nodes: &'a [String],
    current: Option<&ShardPlacement>,
    replicas: usize,
) -> Result<Start<'a>> {
    if !(1..=MAX_SEGMENT_REPLICAS).contains(&replicas) {
        return Err(ClusterError::Invalid(format!(
            "segment replicas is between 1 and {MAX_SEGMENT_REPLICAS}, got {replicas}"
        )));
    }
    let mut nodes: Vec<&String> = data_nodes.iter().collect();
    nodes.sort();
    nodes.dedup();
    let mut shards: Vec<(u64, u32)> = tables
        .iter()
        .flat_map(|t| (0..t.layout.shards).map(move |s| (t.uid, s)))
        .collect();
    shards.sort();
    let held = nodes
        .iter()
        .map(|node| {
            (0..shards.len() as u64)
                .filter(|&segment| {
                    let (uid, shard) = shards[segment as usize];
                    current
                        .and_then(|c| c.holders(uid, shard))
                        .is_some_and(|holders| holders.contains(node))
                })
                .collect()
        })
        .collect();
    Ok(Start {
        placement: ShardPlacement {
            replicas,
            ..ShardPlacement::default()
        },
        nodes,
        shards,
        held,
    })
}

/// The placement of `tables` on `data_nodes` with `replicas` per shard, keeping what
/// `current` places on nodes still there.
pub fn plan(
    tables: &[TableEntry],
    data_nodes: &[String],
    current: Option<&ShardPlacement>,
    replicas: usize,
) -> Result<ShardPlacement> {
    let Start {
        mut placement,
        nodes,
        shards,
        held,
    } = start(tables, data_nodes, current, replicas)?;
    if nodes.is_empty() {
        return Ok(placement);
    }
    let segments: BTreeSet<u64> = (0..shards.len() as u64).collect();
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

/// Each node's room and the bytes of what it holds, as garbage collection takes them:
/// a shard a node has not reported yet (loaded this run) takes what its largest report
/// elsewhere says; a node that reported no room (or none at all) is never full.
/// The largest footprint any node reported for shard `key` (0 if none did).
fn largest_footprint(storage: &BTreeMap<String, NodeRoom>, key: &(u64, u32)) -> u64 {
    storage
        .values()
        .filter_map(|room| room.footprint_bytes_by_shard.get(key))
        .max()
        .copied()
        .unwrap_or(0)
}

fn rooms(
    nodes: &[&String],
    shards: &[(u64, u32)],
    held: &[BTreeSet<u64>],
    storage: &BTreeMap<String, NodeRoom>,
) -> Vec<NodeStorage> {
    nodes
        .iter()
        .zip(held)
        .map(|(node, held)| {
            let room = storage.get(*node);
            let size_bytes_by_segment = held
                .iter()
                .map(|&segment| {
                    let key = &shards[segment as usize];
                    let size = room
                        .and_then(|r| r.footprint_bytes_by_shard.get(key).copied())
                        .unwrap_or_else(|| largest_footprint(storage, key));
                    (segment, size.min(MAX_SEGMENT_SIZE_BYTES))
                })
                .collect();
            NodeStorage {
                capacity_bytes: room
                    .map(|r| r.capacity_bytes)
                    .filter(|&c| c > 0)
                    .unwrap_or(u64::MAX),
                size_bytes_by_segment,
            }
        })
        .collect()
}

/// Most replicas one popularity run loads (the hottest shards' first): a node that
/// comes back empty does not start a storm of transfers, and the next window goes on.
pub const MAX_LOADS_PER_RUN: usize = 32;

/// The placement by popularity (a window's run, `popularity` given) or the repair of
/// `current` between runs (`None`): every shard of `tables` on at least
/// `min(replicas, nodes)` of the live `data_nodes`.
///
/// A run packs the shards' popularity with ModifiedBestFit into one bin per node,
/// matches bins to nodes keeping the most of what they hold, loads at most
/// [`MAX_LOADS_PER_RUN`] replicas (hottest shards first) and drops at most one replica
/// of a shard (lazily, and never below the floor); each holder's fraction is its share
/// of the shard in the plan. With no popularity at all the placement is uniform
/// ([`plan`]). With `storage` (the nodes' rooms and what their shards take, as they
/// reported them), a run then collects garbage: a node above 80 % of its room drops
/// replicas, least popular first, never a shard's last nor below the floor. A repair
/// keeps the holders that are live and their fractions (renormalized), and gives every
/// shard short of the floor replicas on the nodes holding the fewest.
pub fn plan_by_popularity(
    tables: &[TableEntry],
    data_nodes: &[String],
    current: Option<&ShardPlacement>,
    replicas: usize,
    popularity: Option<&BTreeMap<(u64, u32), f64>>,
    storage: Option<&BTreeMap<String, NodeRoom>>,
    planner: &Planner<'_>,
) -> Result<ShardPlacement> {
    if let Some(popularity) = popularity {
        if popularity.values().all(|&p| p <= 0.0) {
            return plan(tables, data_nodes, current, replicas);
        }
    }
    let Start {
        mut placement,
        nodes,
        shards,
        mut held,
    } = start(tables, data_nodes, current, replicas)?;
    if nodes.is_empty() {
        return Ok(placement);
    }
    // share[segment][node]: the fraction of its reads node serves.
    let mut share: Vec<BTreeMap<usize, f64>> = vec![BTreeMap::new(); shards.len()];
    // The holders the last run marked to go, and those this run marks.
    let marked: Vec<BTreeSet<usize>> = shards
        .iter()
        .map(|&(uid, shard)| {
            let going = current.map_or(&[][..], |c| c.dropping(uid, shard));
            (0..nodes.len())
                .filter(|&n| going.contains(nodes[n]))
                .collect()
        })
        .collect();
    let mut dropping: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); shards.len()];
    match popularity {
        Some(popularity) => {
            let loads: BTreeMap<u64, f64> = shards
                .iter()
                .enumerate()
                .map(|(segment, key)| (segment as u64, popularity.get(key).copied().unwrap_or(0.0)))
                .collect();
            let invalid = |e: puffer_adapt::ConfigError| ClusterError::Invalid(e.to_string());
            // With measured curves, the bins are the joint plan's (works, not reads,
            // and layers chosen with the replicas); without, Getafix's on the loads.
            let jointly = match planner {
                Planner::Joint(input) => joint_run(input, &shards, &loads, storage, nodes.len())?,
                Planner::Getafix | Planner::Scarlett(_) => None,
            };
            let target = match (planner, jointly) {
                (Planner::Scarlett(in_flight), _) => {
                    // Scarlett decides counts alone: one replica per read in flight
                    // (rounded up), at least the floor; placed keeping holders.
                    let concurrent: BTreeMap<u64, u64> = shards
                        .iter()
                        .enumerate()
                        .map(|(segment, key)| {
                            // The cast saturates; Scarlett caps counts at the nodes.
                            let reads = in_flight.get(key).copied().unwrap_or(0.0);
                            let reads = if reads.is_finite() { reads } else { 0.0 };
                            (segment as u64, reads.max(0.0).ceil() as u64)
                        })
                        .collect();
                    let config = ScarlettConfig {
                        min_replicas: replicas.clamp(1, nodes.len()),
                        ..ScarlettConfig::default()
                    };
                    let counts = scarlett_placement(&concurrent, nodes.len(), &config)
                        .map_err(invalid)?
                        .replica_counts();
                    placement_keeping(&counts, &held).map_err(invalid)?
                }
                (_, Some((bins, layers, report))) => {
                    for (segment, layers) in layers {
                        let (uid, shard) = shards[segment as usize];
                        placement
                            .layers
                            .entry(uid)
                            .or_insert_with(|| vec![0; shard_count(tables, uid)])
                            [shard as usize] = layers;
                    }
                    placement.joint = Some(report);
                    let matching = match_bins_to_nodes(&bins, &held, None).map_err(invalid)?;
                    bins.place(&matching).map_err(invalid)?
                }
                (_, None) => {
                    let bins = modified_best_fit(&loads, nodes.len()).map_err(invalid)?;
                    let matching = match_bins_to_nodes(&bins, &held, None).map_err(invalid)?;
                    bins.place(&matching).map_err(invalid)?
                }
            };
            let transition = lazy_transition(&held, &target).map_err(invalid)?;
            let mut wanted = transition.loads.clone();
            wanted.sort_by(|a, b| {
                loads[&b.1]
                    .total_cmp(&loads[&a.1])
                    .then(a.1.cmp(&b.1))
                    .then(a.0.cmp(&b.0))
            });
            for &(node, segment) in wanted.iter().take(MAX_LOADS_PER_RUN) {
                held[node].insert(segment);
            }
            let floor = replicas.min(nodes.len());
            // What the last run marked goes now, unless the plan wants it there again;
            // what this run drops is marked, and keeps serving until the next run.
            // A replica goes only once another node has reported holding the shard
            // (loaded, not merely placed), so that a plan moving a shard never leaves it
            // with no node able to answer; until then it stays marked.
            let loaded_elsewhere = |node: usize, segment: u64| {
                storage.is_none_or(|rooms| {
                    rooms.iter().any(|(id, room)| {
                        id != nodes[node]
                            && room
                                .footprint_bytes_by_shard
                                .contains_key(&shards[segment as usize])
                    })
                })
            };
            let wanted_by_node = target.segments_by_node();
            for (segment, going) in marked.iter().enumerate() {
                let segment_id = segment as u64;
                for &node in going {
                    let holders = held.iter().filter(|h| h.contains(&segment_id)).count();
                    if !wanted_by_node[node].contains(&segment_id) && holders > floor {
                        if loaded_elsewhere(node, segment_id) {
                            held[node].remove(&segment_id);
                        } else {
                            dropping[segment].insert(node);
                        }
                    }
                }
            }
            for &(node, segment) in &transition.drops {
                // Only what can go: a shard at its floor keeps its holders.
                let holders = held.iter().filter(|h| h.contains(&segment)).count();
                let going = dropping[segment as usize].len();
                if held[node].contains(&segment) && holders > floor + going {
                    dropping[segment as usize].insert(node);
                }
            }
            if let Some(storage) = storage {
                let rooms = rooms(&nodes, &shards, &held, storage);
                let garbage =
                    collect_garbage(&rooms, &loads, &GcConfig::default()).map_err(invalid)?;
                for (node, segment) in garbage.drops {
                    let holders = held.iter().filter(|h| h.contains(&segment)).count();
                    if holders > floor && loaded_elsewhere(node, segment) {
                        held[node].remove(&segment);
                    }
                }
            }
            for (segment, shares) in target.routing_table() {
                for (node, fraction) in shares {
                    share[segment as usize].insert(node, fraction);
                }
            }
        }
        None => {
            // Between windows the joint plan's layers stand (for the tables there still).
            if let Some(c) = current {
                placement.layers = c
                    .layers
                    .iter()
                    .filter(|(uid, _)| tables.iter().any(|t| t.uid == **uid))
                    .map(|(&uid, layers)| (uid, layers.clone()))
                    .collect();
                placement.joint = c.joint.clone();
            }
            for (segment, going) in marked.iter().enumerate() {
                dropping[segment] = going
                    .iter()
                    .copied()
                    .filter(|&n| held[n].contains(&(segment as u64)))
                    .collect();
            }
            for (segment, &(uid, shard)) in shards.iter().enumerate() {
                let Some(c) = current else { continue };
                let (Some(holders), Some(fractions)) =
                    (c.holders(uid, shard), c.fractions(uid, shard))
                else {
                    continue;
                };
                for (holder, &fraction) in holders.iter().zip(fractions) {
                    if let Some(node) = nodes.iter().position(|n| *n == holder) {
                        share[segment].insert(node, fraction);
                    }
                }
            }
        }
    }
    // The floor: a shard short of holders gets them on the nodes holding the fewest.
    let floor = replicas.min(nodes.len());
    for segment in 0..shards.len() as u64 {
        while held.iter().filter(|h| h.contains(&segment)).count() < floor {
            let node = (0..nodes.len())
                .filter(|&n| !held[n].contains(&segment))
                .min_by_key(|&n| (held[n].len(), n))
                .expect("fewer holders than nodes");
            held[node].insert(segment);
        }
    }
    for table in tables {
        let shard_count = table.layout.shards as usize;
        placement
            .tables
            .insert(table.uid, vec![Vec::new(); shard_count]);
        placement
            .fractions
            .insert(table.uid, vec![Vec::new(); shard_count]);
    }
    for (segment, &(uid, shard)) in shards.iter().enumerate() {
        let holders: Vec<usize> = (0..nodes.len())
            .filter(|&n| held[n].contains(&(segment as u64)))
            .collect();
        // Only holders that hold it serve; their shares are scaled back to 1.
        let raw: Vec<f64> = holders
            .iter()
            .map(|n| share[segment].get(n).copied().unwrap_or(0.0))
            .collect();
        let total: f64 = raw.iter().sum();
        let fractions = if total > 0.0 {
            raw.iter().map(|f| f / total).collect()
        } else {
            vec![0.0; raw.len()]
        };
        if let Some(table) = placement.tables.get_mut(&uid) {
            table[shard as usize] = holders.iter().map(|&n| nodes[n].clone()).collect();
        }
        if let Some(table) = placement.fractions.get_mut(&uid) {
            table[shard as usize] = fractions;
        }
        let going: Vec<String> = dropping[segment]
            .iter()
            .filter(|&&n| held[n].contains(&(segment as u64)))
            .map(|&n| nodes[n].clone())
            .collect();
        if !going.is_empty() {
            placement
                .dropping
                .entry(uid)
                .or_insert_with(|| vec![Vec::new(); shard_count(tables, uid)])[shard as usize] =
                going;
        }
    }
    // Node ids ascend in `nodes`, so the holders are already in ascending order.
    Ok(placement)
}

/// Shards of the table of uid `uid` among `tables` (0 if it is not there).
fn shard_count(tables: &[TableEntry], uid: u64) -> usize {
    tables
        .iter()
        .find(|t| t.uid == uid)
        .map_or(0, |t| t.layout.shards as usize)
}

/// Gives each time-partitioned table's newest chunk, shard by shard, at least the
/// popularity of the chunk before it: queries ask for "the latest", and a new chunk
/// planned as cold would sit on one node with the hottest load until its own counts
/// caught up (`puffer-bench getafix` measured this, see the README).
pub fn newest_chunks_inherit(tables: &[TableEntry], popularity: &mut BTreeMap<(u64, u32), f64>) {
    let mut chunks: BTreeMap<&str, Vec<&TableEntry>> = BTreeMap::new();
    for table in tables {
        if let Some(of) = &table.chunk_of {
            chunks.entry(of.table.as_str()).or_default().push(table);
        }
    }
    let mut heirs = Vec::new();
    for list in chunks.values_mut() {
        list.sort_by_key(|t| t.chunk_of.as_ref().map(|c| c.start_micros));
        if let [.., before, newest] = list.as_slice() {
            for shard in 0..newest.layout.shards.min(before.layout.shards) {
                heirs.push(((newest.uid, shard), (before.uid, shard)));
            }
        }
    }
    inherit_from_predecessors(popularity, &heirs);
}

/// The placement the coordinator leader last wrote, if any.
pub fn read_placement(etcd: &Etcd) -> Result<Option<ShardPlacement>> {
    crate::etcd::read_coordinated(etcd, PLACEMENT_NAME)
}

/// One round of the coordinator leader: plans from the catalog's tables and the live
/// data nodes (by `popularity` in a window's run, see [`plan_by_popularity`]), and
/// writes the placement if it changed. Returns it.
pub fn coordinate(
    etcd: &Etcd,
    leadership: &Leadership,
    catalog: &dyn puffer_node::catalog::Catalog,
    replicas: usize,
    popularity: Option<&BTreeMap<(u64, u32), f64>>,
    storage: Option<&BTreeMap<String, NodeRoom>>,
    planner: &Planner<'_>,
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
    let popularity = popularity.map(|p| {
        let mut p = p.clone();
        newest_chunks_inherit(&tables, &mut p);
        p
    });
    let popularity = popularity.as_ref();
    let next = plan_by_popularity(
        &tables,
        &data_nodes,
        current.as_ref(),
        replicas,
        popularity,
        storage,
        planner,
    )?;
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
            partition: None,
            chunk_of: None,
            subspace_of: None,
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

    /// Getafix's plan with no storage reports and no joint planner.
    fn getafix(
        tables: &[TableEntry],
        nodes: &[String],
        current: Option<&ShardPlacement>,
        floor: usize,
        popularity: &BTreeMap<(u64, u32), f64>,
    ) -> ShardPlacement {
        plan_by_popularity(
            tables,
            nodes,
            current,
            floor,
            Some(popularity),
            None,
            &Planner::Getafix,
        )
        .unwrap()
    }

    fn holder_count(p: &ShardPlacement, uid: u64, shard: u32) -> usize {
        p.holders(uid, shard).unwrap().len()
    }

    #[test]
    fn popularity_gives_hot_shards_the_replicas_and_fractions_modified_best_fit_gives() {
        let tables = [table(7, 4)];
        let three = nodes(&["a", "b", "c"]);
        // Loads 6, 3, 2, 1 on 3 nodes: capacity 4 each; the paper's Figure 7 example.
        let popularity: BTreeMap<(u64, u32), f64> =
            [((7, 0), 6.0), ((7, 1), 3.0), ((7, 2), 2.0), ((7, 3), 1.0)].into();
        let placed = getafix(&tables, &three, None, 1, &popularity);
        // The oracle: ModifiedBestFit's replica counts on the same loads.
        let loads: BTreeMap<u64, f64> = (0..4).map(|s| (s, popularity[&(7, s as u32)])).collect();
        let oracle = modified_best_fit(&loads, 3).unwrap().replica_counts();
        for shard in 0..4u32 {
            assert_eq!(
                holder_count(&placed, 7, shard),
                oracle[&u64::from(shard)],
                "{placed:?}"
            );
            let fractions = placed.fractions(7, shard).unwrap();
            assert!(
                (fractions.iter().sum::<f64>() - 1.0).abs() < 1e-9,
                "{placed:?}"
            );
        }
        // Each node serves the same load: the shares times the loads, summed per node.
        let mut per_node: BTreeMap<&str, f64> = BTreeMap::new();
        for shard in 0..4u32 {
            let holders = placed.holders(7, shard).unwrap();
            for (holder, fraction) in holders.iter().zip(placed.fractions(7, shard).unwrap()) {
                *per_node.entry(holder.as_str()).or_insert(0.0) +=
                    fraction * popularity[&(7, shard)];
            }
        }
        assert!(
            per_node.values().all(|&load| (load - 4.0).abs() < 1e-9),
            "{per_node:?}"
        );

        // A floor of 2: every shard has two holders at least, the hot one more.
        let floored = getafix(&tables, &three, None, 2, &popularity);
        for shard in 0..4u32 {
            assert!(holder_count(&floored, 7, shard) >= 2, "{floored:?}");
        }
        assert!(holder_count(&floored, 7, 0) >= oracle[&0]);

        // No reads at all: the uniform placement.
        let cold: BTreeMap<(u64, u32), f64> = [((7, 0), 0.0)].into();
        assert_eq!(
            getafix(&tables, &three, None, 2, &cold),
            plan(&tables, &three, None, 2).unwrap()
        );
    }

    #[test]
    fn scarlett_gives_a_replica_per_read_in_flight_and_keeps_holders() {
        let tables = [table(7, 3)];
        let three = nodes(&["a", "b", "c"]);
        let popularity: BTreeMap<(u64, u32), f64> =
            [((7, 0), 100.0), ((7, 1), 10.0), ((7, 2), 1.0)].into();
        // 2.5 reads in flight want 3 replicas, 1.2 want 2, 0.1 the floor of 1.
        let in_flight: BTreeMap<(u64, u32), f64> =
            [((7, 0), 2.5), ((7, 1), 1.2), ((7, 2), 0.1)].into();
        let planner = Planner::Scarlett(&in_flight);
        let placed =
            plan_by_popularity(&tables, &three, None, 1, Some(&popularity), None, &planner)
                .unwrap();
        for (shard, wanted) in [(0, 3), (1, 2), (2, 1)] {
            assert_eq!(holder_count(&placed, 7, shard), wanted, "{placed:?}");
            let fractions = placed.fractions(7, shard).unwrap();
            assert!(
                fractions
                    .iter()
                    .all(|f| (f - 1.0 / wanted as f64).abs() < 1e-9),
                "{placed:?}"
            );
        }
        assert!(placed.layers.is_empty() && placed.joint.is_none());
        // The same reads again: nothing moves.
        let again = plan_by_popularity(
            &tables,
            &three,
            Some(&placed),
            1,
            Some(&popularity),
            None,
            &planner,
        )
        .unwrap();
        assert_eq!(again.tables, placed.tables);
        // With a floor of 2 the cold shard has two holders too.
        let floored =
            plan_by_popularity(&tables, &three, None, 2, Some(&popularity), None, &planner)
                .unwrap();
        assert_eq!(holder_count(&floored, 7, 2), 2, "{floored:?}");
    }

    #[test]
    fn measured_curves_let_the_joint_planner_buy_layers_for_a_shard_whose_layers_are_cheap() {
        let tables = [table(7, 2)];
        let three = nodes(&["a", "b", "c"]);
        // Both shards read 1,000 times a second. Shard 0 is ten times faster with a
        // second layer for 10 % more bytes; shard 1 barely faster for five times more.
        let popularity: BTreeMap<(u64, u32), f64> = [((7, 0), 1000.0), ((7, 1), 1000.0)].into();
        let step = |layers, footprint_bytes, seconds_per_query| LayerCost {
            layers,
            footprint_bytes,
            seconds_per_query,
        };
        let curves: BTreeMap<(u64, u32), Vec<LayerCost>> = [
            ((7, 0), vec![step(1, 1000, 0.01), step(2, 1100, 0.001)]),
            ((7, 1), vec![step(1, 1000, 0.002), step(2, 5000, 0.0019)]),
        ]
        .into();
        let input = JointInput {
            curves: &curves,
            reads_per_second_per_popularity: 1.0,
            config: JointConfig {
                work_budget_per_node: 4.0,
            },
        };
        // A run from nothing, floor 1, with the given curves.
        let jointly = |curves: &BTreeMap<(u64, u32), Vec<LayerCost>>| {
            let planner = Planner::Joint(JointInput { curves, ..input });
            plan_by_popularity(&tables, &three, None, 1, Some(&popularity), None, &planner).unwrap()
        };
        let placed = jointly(&curves);
        // The oracle: the pure joint planner on the same rates and curves.
        let rates: BTreeMap<u64, f64> = [(0, 1000.0), (1, 1000.0)].into();
        let by_segment: BTreeMap<u64, Vec<LayerCost>> =
            [(0, curves[&(7, 0)].clone()), (1, curves[&(7, 1)].clone())].into();
        let oracle = joint_plan(&rates, &by_segment, 3, &input.config).unwrap();
        let counts = oracle.plan.replica_counts();
        for shard in 0..2u32 {
            let segment = u64::from(shard);
            assert_eq!(
                placed.planned_layers(7, shard),
                Some(oracle.layers_by_segment[&segment]),
                "{placed:?}"
            );
            assert_eq!(
                holder_count(&placed, 7, shard),
                counts[&segment],
                "{placed:?}"
            );
        }
        // By hand: shard 0 takes its second layer and one replica; shard 1 stays at one.
        assert_eq!(placed.planned_layers(7, 0), Some(2));
        assert_eq!(placed.planned_layers(7, 1), Some(1));
        assert_eq!(holder_count(&placed, 7, 0), 1, "{placed:?}");
        let report = placed.joint.clone().expect("a joint report");
        assert_eq!(report.chosen, "layers and replicas");
        assert!(
            report.memory_bytes < report.replicas_alone_memory_bytes,
            "{report:?}"
        );
        assert_eq!(report.decisions.len(), 2);
        assert!(report.decisions.iter().all(|d| !d.reason.is_empty()));
        // Replicas alone (no curves) give the hot shard more holders than layers do.
        let alone = getafix(&tables, &three, None, 1, &popularity);
        assert!(holder_count(&alone, 7, 0) > 1, "{alone:?}");
        assert!(alone.layers.is_empty() && alone.joint.is_none());
        let unmeasured = BTreeMap::new();
        assert_eq!(jointly(&unmeasured), alone);
        // Between windows the plan's layers and report stand.
        let repaired = plan_by_popularity(
            &tables,
            &three,
            Some(&placed),
            1,
            None,
            None,
            &Planner::Getafix,
        )
        .unwrap();
        assert_eq!(repaired.layers, placed.layers);
        assert_eq!(repaired.joint, placed.joint);
        // A shard without a curve is planned with replicas only and gets no layers set.
        let half: BTreeMap<(u64, u32), Vec<LayerCost>> = [((7, 0), curves[&(7, 0)].clone())].into();
        let partly = jointly(&half);
        assert_eq!(partly.planned_layers(7, 1), None, "{partly:?}");
        let decision = |p: &ShardPlacement, shard: u32| {
            p.joint
                .as_ref()
                .unwrap()
                .decisions
                .iter()
                .find(|d| d.shard == shard)
                .unwrap()
                .reason
                .clone()
        };
        assert!(decision(&partly, 1).contains("no curve"), "{partly:?}");
        // A shard measured at one layer count only is left to its nodes.
        let one_step: BTreeMap<(u64, u32), Vec<LayerCost>> = [
            ((7, 0), curves[&(7, 0)].clone()),
            ((7, 1), curves[&(7, 1)][..1].to_vec()),
        ]
        .into();
        let short = jointly(&one_step);
        assert_eq!(short.planned_layers(7, 0), Some(2), "{short:?}");
        assert_eq!(short.planned_layers(7, 1), None, "{short:?}");
    }

    #[test]
    fn runs_drop_lazily_never_below_the_floor_and_repairs_keep_the_shares() {
        let tables = [table(7, 4)];
        let three = nodes(&["a", "b", "c"]);
        let hot_first: BTreeMap<(u64, u32), f64> =
            [((7, 0), 9.0), ((7, 1), 1.0), ((7, 2), 1.0), ((7, 3), 1.0)].into();
        let first = getafix(&tables, &three, None, 1, &hot_first);
        assert_eq!(holder_count(&first, 7, 0), 3, "{first:?}");
        // Popularity moves to shard 3: shard 0 loses at most one replica this run.
        let hot_last: BTreeMap<(u64, u32), f64> =
            [((7, 0), 1.0), ((7, 1), 1.0), ((7, 2), 1.0), ((7, 3), 9.0)].into();
        let second = getafix(&tables, &three, Some(&first), 1, &hot_last);
        // Lazily: the replica this run drops is marked and still held, with no share of
        // the reads; nothing was marked before, so nothing goes yet.
        assert_eq!(holder_count(&second, 7, 0), 3, "{second:?}");
        let marked = second.dropping(7, 0).to_vec();
        assert_eq!(marked.len(), 1, "{second:?}");
        let holders = second.holders(7, 0).unwrap();
        let at = holders.iter().position(|h| *h == marked[0]).unwrap();
        assert_eq!(second.fractions(7, 0).unwrap()[at], 0.0, "{second:?}");
        assert_eq!(holder_count(&second, 7, 3), 3, "{second:?}");
        // The next run lets the marked one go (the plan does not want it back) and
        // marks at most one more.
        let third = getafix(&tables, &three, Some(&second), 1, &hot_last);
        assert!(
            !third.holders(7, 0).unwrap().contains(&marked[0]),
            "{third:?}"
        );
        assert_eq!(holder_count(&third, 7, 0), 2, "{third:?}");
        assert!(third.dropping(7, 0).len() <= 1);
        // Node b is lost between runs: the repair keeps the live holders, gives shards
        // left with none a replica, and scales the shares of the others back to 1.
        let two = nodes(&["a", "c"]);
        let repaired = plan_by_popularity(
            &tables,
            &two,
            Some(&third),
            1,
            None,
            None,
            &Planner::Getafix,
        )
        .unwrap();
        for shard in 0..4u32 {
            let before: Vec<&String> = third
                .holders(7, shard)
                .unwrap()
                .iter()
                .filter(|h| *h != "b")
                .collect();
            let after = repaired.holders(7, shard).unwrap();
            assert!(before.iter().all(|h| after.contains(h)), "{repaired:?}");
            assert!(!after.is_empty() && !after.contains(&"b".to_string()));
            if let Some(fractions) = repaired.fractions(7, shard) {
                assert!((fractions.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            }
        }
        // A repair with nothing lost changes nothing.
        assert_eq!(
            plan_by_popularity(
                &tables,
                &three,
                Some(&third),
                1,
                None,
                None,
                &Planner::Getafix
            )
            .unwrap(),
            third
        );
    }

    #[test]
    fn a_node_over_its_room_drops_its_least_popular_replicas_never_below_the_floor() {
        let tables = [table(7, 4)];
        let two = nodes(&["a", "b"]);
        let popularity: BTreeMap<(u64, u32), f64> =
            [((7, 0), 8.0), ((7, 1), 4.0), ((7, 2), 2.0), ((7, 3), 1.0)].into();
        // Both nodes hold everything now: 4 shards of 100 bytes each.
        let everything = ShardPlacement {
            replicas: 1,
            tables: [(7, vec![nodes(&["a", "b"]); 4])].into(),
            ..ShardPlacement::default()
        };
        let room = |capacity_bytes: u64| NodeRoom {
            capacity_bytes,
            footprint_bytes_by_shard: (0..4).map(|s| ((7, s), 100)).collect(),
        };
        // a has room for 300 bytes (GC above 240), b for plenty.
        let storage: BTreeMap<String, NodeRoom> = [
            ("a".to_string(), room(300)),
            ("b".to_string(), room(1 << 30)),
        ]
        .into();
        let run = |floor: usize| {
            plan_by_popularity(
                &tables,
                &two,
                Some(&everything),
                floor,
                Some(&popularity),
                Some(&storage),
                &Planner::Getafix,
            )
            .unwrap()
        };
        let held_by = |p: &ShardPlacement, node: &str| -> Vec<u32> {
            (0..4)
                .filter(|&s| p.holders(7, s).unwrap().iter().any(|h| h == node))
                .collect()
        };
        let placed = run(1);
        // Every shard is still held; a is at or under 80 % of its room (240 bytes), or
        // everything left on it is a shard's last replica.
        for shard in 0..4u32 {
            assert!(!placed.holders(7, shard).unwrap().is_empty(), "{placed:?}");
        }
        let on_a = held_by(&placed, "a");
        let only_here = |s: &u32| placed.holders(7, *s).unwrap().len() == 1;
        assert!(
            on_a.len() * 100 <= 240 || on_a.iter().all(only_here),
            "{placed:?}"
        );
        // Without the rooms nothing is collected: a keeps more than its room allows.
        let unbounded = getafix(&tables, &two, Some(&everything), 1, &popularity);
        assert!(
            held_by(&unbounded, "a").len() >= on_a.len(),
            "{unbounded:?}"
        );
        // With a floor of 2 nothing may go: both nodes keep everything.
        let floored = run(2);
        assert_eq!(held_by(&floored, "a"), vec![0, 1, 2, 3], "{floored:?}");
    }

    #[test]
    fn a_marked_replica_goes_only_once_another_node_reports_holding_the_shard() {
        let tables = [table(7, 2)];
        let two = nodes(&["a", "b"]);
        // Shard 0 was on a and b, b marked to go; shard 1 is on b. Equal loads put one
        // shard on each node: 0 on a, 1 on b. a has not taken shard 0 on yet.
        let current = ShardPlacement {
            replicas: 1,
            tables: [(7, vec![nodes(&["a", "b"]), nodes(&["b"])])].into(),
            dropping: [(7, vec![nodes(&["b"]), Vec::new()])].into(),
            ..ShardPlacement::default()
        };
        let popularity: BTreeMap<(u64, u32), f64> = [((7, 0), 1.0), ((7, 1), 1.0)].into();
        let reported = |a_holds_shard_0: bool| -> BTreeMap<String, NodeRoom> {
            let room = |shards: Vec<u32>| NodeRoom {
                capacity_bytes: 0,
                footprint_bytes_by_shard: shards.into_iter().map(|s| ((7, s), 100)).collect(),
            };
            let on_a = if a_holds_shard_0 { vec![0] } else { Vec::new() };
            [
                ("a".to_string(), room(on_a)),
                ("b".to_string(), room(vec![0, 1])),
            ]
            .into()
        };
        let plan_with = |storage: &BTreeMap<String, NodeRoom>| {
            plan_by_popularity(
                &tables,
                &two,
                Some(&current),
                1,
                Some(&popularity),
                Some(storage),
                &Planner::Getafix,
            )
            .unwrap()
        };
        // Only b holds shard 0: b keeps it, still marked (no share of its reads).
        let waiting = plan_with(&reported(false));
        assert_eq!(
            waiting.holders(7, 0).unwrap(),
            &nodes(&["a", "b"])[..],
            "{waiting:?}"
        );
        assert_eq!(waiting.dropping(7, 0), &nodes(&["b"])[..], "{waiting:?}");
        assert_eq!(
            waiting.fractions(7, 0).unwrap(),
            &[1.0, 0.0][..],
            "{waiting:?}"
        );
        // a reports it too: b lets it go.
        let moved = plan_with(&reported(true));
        assert_eq!(
            moved.holders(7, 0).unwrap(),
            &nodes(&["a"])[..],
            "{moved:?}"
        );
        assert!(moved.dropping(7, 0).is_empty(), "{moved:?}");
    }

    #[test]
    fn rooms_take_reported_sizes_or_the_largest_elsewhere_and_no_room_is_never_full() {
        let shards = [(7, 0), (7, 1)];
        let (a, b) = ("a".to_string(), "b".to_string());
        let nodes = [&a, &b];
        let held: Vec<BTreeSet<u64>> = vec![[0, 1].into(), [0].into()];
        let storage: BTreeMap<String, NodeRoom> = [
            (
                a.clone(),
                NodeRoom {
                    capacity_bytes: 500,
                    footprint_bytes_by_shard: [((7, 0), 40)].into(),
                },
            ),
            (
                b.clone(),
                NodeRoom {
                    capacity_bytes: 0,
                    footprint_bytes_by_shard: [((7, 0), 70), ((7, 1), 90)].into(),
                },
            ),
        ]
        .into();
        let rooms = rooms(&nodes, &shards, &held, &storage);
        // a reported shard 0 (40); shard 1 it did not: the largest report elsewhere (90).
        assert_eq!(rooms[0].capacity_bytes, 500);
        assert_eq!(rooms[0].size_bytes_by_segment, [(0, 40), (1, 90)].into());
        // b reported no room: never full.
        assert_eq!(rooms[1].capacity_bytes, u64::MAX);
        assert_eq!(rooms[1].size_bytes_by_segment, [(0, 70)].into());
    }

    #[test]
    fn the_newest_chunk_inherits_its_predecessors_popularity_shard_by_shard() {
        let chunk = |uid: u64, start: i64| TableEntry {
            chunk_of: Some(puffer_node::catalog::ChunkOf {
                table: "wiki".into(),
                start_micros: start,
            }),
            ..table(uid, 2)
        };
        // Chunks 5 (oldest), 7, 6 (newest by time, not by uid); a plain table 9.
        let tables = [chunk(5, 100), chunk(7, 300), chunk(6, 200), table(9, 2)];
        let mut popularity: BTreeMap<(u64, u32), f64> = [
            ((6, 0), 10.0),
            ((6, 1), 4.0),
            ((7, 1), 6.0),
            ((5, 0), 50.0),
            ((9, 0), 3.0),
        ]
        .into();
        newest_chunks_inherit(&tables, &mut popularity);
        // 7 (newest) takes 6's shard 0 and keeps its own larger shard 1; nothing else moves.
        assert_eq!(
            popularity,
            [
                ((6, 0), 10.0),
                ((6, 1), 4.0),
                ((7, 0), 10.0),
                ((7, 1), 6.0),
                ((5, 0), 50.0),
                ((9, 0), 3.0)
            ]
            .into()
        );
    }
}
