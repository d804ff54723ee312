//! Garbage collection of replicas under storage pressure (Getafix §4.4).
//!
//! A node whose segments take more than `threshold_fraction` of its storage (80 % in the
//! paper) drops replicas, its least popular segments first (ties: the lower segment id),
//! until it is at or below the threshold. It never drops a segment's last replica across
//! the cluster: the segment would have to be fetched from deep storage at the next query
//! (the paper reloads it then, at a latency cost); keeping it bounds that cost to the
//! nodes' spare capacity instead. A node that cannot get below the threshold that way is
//! reported. Nodes are handled from the most to the least full (by fraction of capacity,
//! ties the lower node), so when two full nodes share the only two replicas of a segment,
//! the fuller one is the one relieved.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    check_load, check_node_count, check_segment_count, check_segment_size, NodeIndex, SegmentId,
};
use crate::{config_error, ConfigError};

/// Garbage collection's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GcConfig {
    /// Fraction of a node's storage above which it drops replicas, in (0, 1].
    pub threshold_fraction: f64,
}

impl Default for GcConfig {
    /// The paper's 80 %.
    fn default() -> GcConfig {
        GcConfig {
            threshold_fraction: 0.8,
        }
    }
}

impl GcConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.threshold_fraction > 0.0 && self.threshold_fraction <= 1.0) {
            return Err(config_error(
                "threshold_fraction",
                format!("{} is not in (0, 1]", self.threshold_fraction),
            ));
        }
        Ok(())
    }
}

/// One node's storage: its capacity and the replicas it holds with their sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStorage {
    /// Storage for segments on this node.
    pub capacity_bytes: u64,
    /// The segments it holds, and each one's size.
    pub size_bytes_by_segment: BTreeMap<SegmentId, u64>,
}

/// What garbage collection decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcOutcome {
    /// Replicas to drop, as (node, segment), in the order chosen.
    pub drops: Vec<(NodeIndex, SegmentId)>,
    /// Nodes still above the threshold after the drops: everything left there is some
    /// segment's last replica.
    pub still_over: Vec<NodeIndex>,
}

/// The replicas to drop so that every node is at or below `config.threshold_fraction` of
/// its capacity, least popular first (`popularity_by_segment`; absent means 0), never a
/// segment's last replica. Errors: a bad threshold, no node or more than
/// [`MAX_NODES`](super::MAX_NODES), a node with more than
/// [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments or one larger than
/// [`MAX_SEGMENT_SIZE_BYTES`](super::MAX_SEGMENT_SIZE_BYTES), a popularity that is
/// negative or not finite.
pub fn collect_garbage(
    nodes: &[NodeStorage],
    popularity_by_segment: &BTreeMap<SegmentId, f64>,
    config: &GcConfig,
) -> Result<GcOutcome, ConfigError> {
    config.validate()?;
    check_node_count("nodes", nodes.len())?;
    for (&segment, &popularity) in popularity_by_segment {
        check_load("popularity_by_segment", segment, popularity)?;
    }
    let mut replicas: BTreeMap<SegmentId, usize> = BTreeMap::new();
    let mut used_bytes = Vec::with_capacity(nodes.len());
    for node in nodes {
        check_segment_count("nodes", node.size_bytes_by_segment.len())?;
        let mut used: u64 = 0;
        for (&segment, &size_bytes) in &node.size_bytes_by_segment {
            check_segment_size("nodes", segment, size_bytes)?;
            // At most 2^20 segments of at most 2^40 bytes: no overflow.
            used += size_bytes;
            *replicas.entry(segment).or_insert(0) += 1;
        }
        used_bytes.push(used);
    }
    let limit_bytes: Vec<u64> = nodes
        .iter()
        .map(|node| limit_bytes(node.capacity_bytes, config.threshold_fraction))
        .collect();

    let mut order: Vec<NodeIndex> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| {
        fullness(used_bytes[b], nodes[b].capacity_bytes)
            .total_cmp(&fullness(used_bytes[a], nodes[a].capacity_bytes))
            .then(a.cmp(&b))
    });
    let mut outcome = GcOutcome::default();
    for node in order {
        if used_bytes[node] <= limit_bytes[node] {
            continue;
        }
        let mut candidates: Vec<(f64, SegmentId)> = nodes[node]
            .size_bytes_by_segment
            .keys()
            .map(|&segment| {
                let popularity = popularity_by_segment.get(&segment).copied().unwrap_or(0.0);
                (popularity, segment)
            })
            .collect();
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, segment) in candidates {
            if used_bytes[node] <= limit_bytes[node] {
                break;
            }
            // Every held segment was counted above; a missing count would only mean
            // "keep it", the safe side.
            let Some(count) = replicas.get_mut(&segment).filter(|count| **count > 1) else {
                continue;
            };
            *count -= 1;
            used_bytes[node] -= nodes[node].size_bytes_by_segment[&segment];
            outcome.drops.push((node, segment));
        }
        if used_bytes[node] > limit_bytes[node] {
            outcome.still_over.push(node);
        }
    }
    outcome.still_over.sort_unstable();
    Ok(outcome)
}

/// The most a node may hold: `floor(threshold * capacity)` bytes.
fn limit_bytes(capacity_bytes: u64, threshold_fraction: f64) -> u64 {
    // threshold <= 1, so the product never exceeds the capacity; the cast saturates.
    (threshold_fraction * capacity_bytes as f64).floor() as u64
}

/// How full a node is, as a fraction of its capacity (a node with no capacity but some
/// data is infinitely full).
fn fullness(used_bytes: u64, capacity_bytes: u64) -> f64 {
    if capacity_bytes == 0 {
        if used_bytes == 0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        used_bytes as f64 / capacity_bytes as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(capacity_bytes: u64, segments: &[(SegmentId, u64)]) -> NodeStorage {
        NodeStorage {
            capacity_bytes,
            size_bytes_by_segment: segments.iter().copied().collect(),
        }
    }

    #[test]
    fn drops_least_popular_until_below_never_the_last_replica() {
        // Node 0: 90 of 100 bytes. Segment 3 (least popular) is only there, so it stays;
        // segment 2 goes next (10 bytes), bringing it to 80 = the threshold: stop.
        let nodes = [
            node(100, &[(1, 40), (2, 10), (3, 40)]),
            node(100, &[(1, 40), (2, 10)]),
        ];
        let popularity = BTreeMap::from([(1, 9.0), (2, 5.0), (3, 0.5)]);
        let outcome = collect_garbage(&nodes, &popularity, &GcConfig::default()).unwrap();
        assert_eq!(outcome.drops, vec![(0, 2)]);
        assert!(outcome.still_over.is_empty());
    }

    #[test]
    fn reports_a_node_it_cannot_relieve() {
        let nodes = [node(100, &[(1, 95)]), node(100, &[])];
        let outcome = collect_garbage(&nodes, &BTreeMap::new(), &GcConfig::default()).unwrap();
        assert!(outcome.drops.is_empty());
        assert_eq!(outcome.still_over, vec![0]);
    }

    #[test]
    fn rejects_bad_settings() {
        let nodes = [node(100, &[(1, 10)])];
        for threshold_fraction in [0.0, -0.1, 1.5, f64::NAN] {
            let config = GcConfig { threshold_fraction };
            assert!(collect_garbage(&nodes, &BTreeMap::new(), &config).is_err());
        }
        let bad = BTreeMap::from([(1, -1.0)]);
        assert!(collect_garbage(&nodes, &bad, &GcConfig::default()).is_err());
        assert!(collect_garbage(&[], &BTreeMap::new(), &GcConfig::default()).is_err());
    }
}
