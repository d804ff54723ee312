//! The baselines Getafix is compared with (§5.1), as policies producing a [`Placement`].
//!
//! **Scarlett** (Ananthanarayanan et al., EuroSys 2011), as the Getafix paper describes the
//! version it implemented: the round-robin algorithm "counts the number of concurrent
//! accesses to a file to determine how many replicas to assign", under "a configurable
//! network budget parameter", which the paper left uncapped (and avoided the priority
//! variant, meant for files of different sizes). That description fixes neither the
//! replicas per access nor where replicas go, so this reading is documented here:
//! - a segment wants `ceil(concurrent accesses / accesses_per_replica)` replicas, at least
//!   `min_replicas` and at most one per node;
//! - the replicas beyond `min_replicas` come out of `extra_replica_budget` round-robin:
//!   each round gives one more replica to every segment still wanting one, the most
//!   accessed first (ties the lower segment id), until the budget runs out, so a tight
//!   budget is spread over the hot segments instead of going to the hottest alone;
//! - replicas are dealt to nodes round-robin (below), and each serves an equal share of
//!   its segment's queries.
//!
//! **Uniform**: every segment gets the same replication factor `k`, dealt round-robin.
//!
//! Dealing round-robin: segments in order (most accessed first for Scarlett, by id for
//! uniform), each segment's `r` replicas go to the `r` nodes after a cursor that moves on
//! by `r`, so replicas of one segment are on distinct nodes and every node gets the same
//! number of replicas, give or take one.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::placement::placement_unchecked;
use super::{check_node_count, check_segment_count, NodeIndex, Placement, SegmentId, Share};
use crate::{config_error, ConfigError};

/// Scarlett's settings, as read from the Getafix paper (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScarlettConfig {
    /// Concurrent accesses one replica is meant to absorb, at least 1.
    pub accesses_per_replica: u64,
    /// Replicas every segment keeps whatever its accesses, in `1..=nodes`.
    pub min_replicas: usize,
    /// Replicas beyond `min_replicas` handed out in one run; `None` for no cap (as in
    /// the Getafix evaluation).
    pub extra_replica_budget: Option<u64>,
}

impl Default for ScarlettConfig {
    /// One replica per concurrent access, at least one, no budget cap.
    fn default() -> ScarlettConfig {
        ScarlettConfig {
            accesses_per_replica: 1,
            min_replicas: 1,
            extra_replica_budget: None,
        }
    }
}

/// Scarlett's placement of the given segments on `nodes` nodes. Errors: `nodes` not in
/// `1..=`[`MAX_NODES`](super::MAX_NODES), more than
/// [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments, `accesses_per_replica` of 0 or
/// `min_replicas` not in `1..=nodes`.
pub fn scarlett_placement(
    concurrent_accesses_by_segment: &BTreeMap<SegmentId, u64>,
    nodes: usize,
    config: &ScarlettConfig,
) -> Result<Placement, ConfigError> {
    check_node_count("nodes", nodes)?;
    check_segment_count(
        "concurrent_accesses_by_segment",
        concurrent_accesses_by_segment.len(),
    )?;
    if config.accesses_per_replica == 0 {
        return Err(config_error("accesses_per_replica", "0 is not at least 1"));
    }
    check_replication_factor("min_replicas", config.min_replicas, nodes)?;

    // Most accessed first, ties to the lower segment id.
    let mut order: Vec<(SegmentId, u64)> = concurrent_accesses_by_segment
        .iter()
        .map(|(&segment, &accesses)| (segment, accesses))
        .collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let wanted_extra: Vec<usize> = order
        .iter()
        .map(|&(_, accesses)| {
            let wanted = accesses.div_ceil(config.accesses_per_replica);
            // Capped by nodes (<= MAX_NODES) before the cast, so nothing is lost.
            let wanted = wanted.min(nodes as u64) as usize;
            wanted.saturating_sub(config.min_replicas)
        })
        .collect();
    let extra = spend_round_robin(&wanted_extra, config.extra_replica_budget);
    let replicas: Vec<(SegmentId, usize)> = order
        .iter()
        .zip(extra)
        .map(|(&(segment, _), extra)| (segment, config.min_replicas + extra))
        .collect();
    Ok(deal_round_robin(&replicas, nodes))
}

/// Uniform replication: every segment on `replication_factor` nodes, dealt round-robin in
/// segment id order. Errors: `nodes` not in `1..=`[`MAX_NODES`](super::MAX_NODES), more
/// than [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments, `replication_factor` not in
/// `1..=nodes`.
pub fn uniform_placement(
    segments: &BTreeSet<SegmentId>,
    nodes: usize,
    replication_factor: usize,
) -> Result<Placement, ConfigError> {
    check_node_count("nodes", nodes)?;
    check_segment_count("segments", segments.len())?;
    check_replication_factor("replication_factor", replication_factor, nodes)?;
    let replicas: Vec<(SegmentId, usize)> = segments
        .iter()
        .map(|&segment| (segment, replication_factor))
        .collect();
    Ok(deal_round_robin(&replicas, nodes))
}

/// Uniform replication that keeps what is placed: every segment of `segments` on
/// `min(replication_factor, nodes)` nodes, where `current[n]` is what node `n` holds now.
/// Each segment keeps its current holders (those holding the fewest replicas first, when
/// it has more than it needs); a missing replica goes to the node holding the fewest
/// replicas at that point (the lower index on ties), segments taken in id order. So a
/// node that goes away costs only its own replicas, and a node that joins is given the
/// missing replicas first (of new segments, or of a node lost) but takes none away
/// from the others: nothing moves that need not. Segments not in `segments` are dropped.
/// Errors: `current` not in `1..=`[`MAX_NODES`](super::MAX_NODES) nodes, more than
/// [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments, `replication_factor` 0.
pub fn uniform_placement_keeping(
    segments: &BTreeSet<SegmentId>,
    current: &[BTreeSet<SegmentId>],
    replication_factor: usize,
) -> Result<Placement, ConfigError> {
    if replication_factor == 0 {
        return Err(config_error(
            "replication_factor",
            "a segment needs at least one replica".to_string(),
        ));
    }
    let counts = segments.iter().map(|&s| (s, replication_factor)).collect();
    placement_keeping(&counts, current)
}

/// Each segment of `counts` on its count of nodes (at most one replica a node), keeping
/// what `current` holds as [`uniform_placement_keeping`] does: a segment with too many
/// holders drops those holding the most replicas, a missing replica goes to the node
/// holding the fewest; every holder serves an equal share. How a policy that decides
/// counts alone (Scarlett) places them with few transfers. Segments not in `counts` are
/// dropped. Errors: `current` not in `1..=`[`MAX_NODES`](super::MAX_NODES) nodes, more
/// than [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments, a count of 0.
pub fn placement_keeping(
    counts: &BTreeMap<SegmentId, usize>,
    current: &[BTreeSet<SegmentId>],
) -> Result<Placement, ConfigError> {
    let nodes = current.len();
    check_node_count("current", nodes)?;
    check_segment_count("counts", counts.len())?;
    if let Some((segment, _)) = counts.iter().find(|(_, &count)| count == 0) {
        return Err(config_error(
            "counts",
            format!("segment {segment} has 0 replicas; a segment needs at least one"),
        ));
    }
    let wanted = |segment: &SegmentId| counts[segment].min(nodes);
    let mut holders: BTreeMap<SegmentId, Vec<NodeIndex>> = BTreeMap::new();
    for (node, held) in current.iter().enumerate() {
        for &segment in held.iter().filter(|s| counts.contains_key(s)) {
            holders.entry(segment).or_default().push(node);
        }
    }
    // Kept first: a segment with too many holders drops those holding the most.
    let mut load: Vec<usize> = vec![0; nodes];
    for kept in holders.values() {
        for &node in kept {
            load[node] += 1;
        }
    }
    for (segment, kept) in holders.iter_mut() {
        while kept.len() > wanted(segment) {
            let (at, &node) = kept
                .iter()
                .enumerate()
                .max_by_key(|&(_, &n)| (load[n], n))
                .expect("more holders than wanted, so some");
            load[node] -= 1;
            kept.remove(at);
        }
    }
    // Then the missing replicas, on the least loaded nodes.
    for segment in counts.keys() {
        let kept = holders.entry(*segment).or_default();
        while kept.len() < wanted(segment) {
            let node = (0..nodes)
                .filter(|n| !kept.contains(n))
                .min_by_key(|&n| (load[n], n))
                .expect("fewer holders than nodes, so a free node");
            load[node] += 1;
            kept.push(node);
        }
    }
    let mut placed: Vec<Vec<Share>> = vec![Vec::new(); nodes];
    for (&segment, kept) in &holders {
        let fraction = 1.0 / kept.len() as f64;
        for &node in kept {
            placed[node].push(Share { segment, fraction });
        }
    }
    Ok(placement_unchecked(placed))
}

fn check_replication_factor(
    setting: &'static str,
    replicas: usize,
    nodes: usize,
) -> Result<(), ConfigError> {
    if replicas == 0 || replicas > nodes {
        return Err(config_error(
            setting,
            format!("{replicas} replicas is not in 1..={nodes} (one per node at most)"),
        ));
    }
    Ok(())
}

/// Extra replicas per segment: rounds of one each, in the given order, while the budget
/// lasts (all of them without a budget).
fn spend_round_robin(wanted_extra: &[usize], budget: Option<u64>) -> Vec<usize> {
    let Some(mut budget) = budget else {
        return wanted_extra.to_vec();
    };
    let mut extra = vec![0; wanted_extra.len()];
    let mut wanting: Vec<usize> = (0..wanted_extra.len())
        .filter(|&i| wanted_extra[i] > 0)
        .collect();
    // Each pass grants one replica per segment visited, so the work is bounded by the
    // replicas granted plus one pass over the segments.
    while budget > 0 && !wanting.is_empty() {
        wanting.retain(|&i| {
            if budget == 0 {
                return true;
            }
            extra[i] += 1;
            budget -= 1;
            extra[i] < wanted_extra[i]
        });
    }
    extra
}

/// Each segment's replicas on the nodes after a moving cursor, equal shares each.
/// Replicas per segment are in `1..=nodes`.
fn deal_round_robin(replicas: &[(SegmentId, usize)], nodes: usize) -> Placement {
    let mut placed: Vec<Vec<Share>> = vec![Vec::new(); nodes];
    let mut cursor = 0;
    for &(segment, count) in replicas {
        let fraction = 1.0 / count as f64;
        for offset in 0..count {
            placed[(cursor + offset) % nodes].push(Share { segment, fraction });
        }
        cursor = (cursor + count) % nodes;
    }
    placement_unchecked(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_spends_the_budget_evenly() {
        assert_eq!(spend_round_robin(&[3, 2, 0, 1], None), vec![3, 2, 0, 1]);
        assert_eq!(spend_round_robin(&[3, 2, 0, 1], Some(4)), vec![2, 1, 0, 1]);
        assert_eq!(spend_round_robin(&[3, 2, 0, 1], Some(2)), vec![1, 1, 0, 0]);
        assert_eq!(spend_round_robin(&[3, 2, 0, 1], Some(0)), vec![0, 0, 0, 0]);
        assert_eq!(spend_round_robin(&[3, 2, 0, 1], Some(99)), vec![3, 2, 0, 1]);
    }

    #[test]
    fn scarlett_replicates_by_concurrent_accesses() {
        let accesses = BTreeMap::from([(10, 0), (11, 7), (12, 3), (13, 100)]);
        let config = ScarlettConfig {
            accesses_per_replica: 2,
            min_replicas: 1,
            extra_replica_budget: None,
        };
        let placement = scarlett_placement(&accesses, 5, &config).unwrap();
        // ceil(100/2) capped at 5 nodes, ceil(7/2), ceil(3/2), and the minimum.
        assert_eq!(
            placement.replica_counts(),
            BTreeMap::from([(10, 1), (11, 4), (12, 2), (13, 5)])
        );
        // Dealt most accessed first: 13 on 0..5, 11 on 0..4, 12 on 4 and 0, 10 on 1.
        assert_eq!(
            placement.segments_by_node(),
            vec![
                BTreeSet::from([11, 12, 13]),
                BTreeSet::from([10, 11, 13]),
                BTreeSet::from([11, 13]),
                BTreeSet::from([11, 13]),
                BTreeSet::from([12, 13]),
            ]
        );
        let budgeted = ScarlettConfig {
            extra_replica_budget: Some(3),
            ..config
        };
        let placement = scarlett_placement(&accesses, 5, &budgeted).unwrap();
        assert_eq!(
            placement.replica_counts(),
            BTreeMap::from([(10, 1), (11, 2), (12, 2), (13, 2)])
        );
    }

    #[test]
    fn uniform_gives_every_segment_k_replicas_spread_evenly() {
        let segments: BTreeSet<SegmentId> = (0..7).collect();
        let placement = uniform_placement(&segments, 4, 2).unwrap();
        assert!(placement.replica_counts().values().all(|&count| count == 2));
        let per_node: Vec<usize> = placement.nodes().iter().map(Vec::len).collect();
        assert_eq!(per_node, vec![4, 4, 3, 3]);
        assert!(uniform_placement(&segments, 4, 5).is_err());
        assert!(uniform_placement(&segments, 4, 0).is_err());
    }

    #[test]
    fn scarlett_rejects_bad_settings() {
        let accesses = BTreeMap::from([(1, 4)]);
        let zero = ScarlettConfig {
            accesses_per_replica: 0,
            ..ScarlettConfig::default()
        };
        assert!(scarlett_placement(&accesses, 3, &zero).is_err());
        let too_many = ScarlettConfig {
            min_replicas: 4,
            ..ScarlettConfig::default()
        };
        assert!(scarlett_placement(&accesses, 3, &too_many).is_err());
    }
}
