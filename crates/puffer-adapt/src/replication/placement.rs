//! Replicas on nodes: a plan's bins once matched to nodes, or a baseline's placement; and
//! where a new segment goes first.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{check_node_count, Matching, NodeIndex, Plan, SegmentId, Share};
use crate::{config_error, ConfigError};

/// The replicas each node should hold, and the share of each segment's queries each
/// replica serves: what the coordinator sets up and what the brokers route by.
/// Serialized as the list of nodes' replicas, and checked by [`Placement::new`] when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Vec<Share>>", into = "Vec<Vec<Share>>")]
pub struct Placement {
    nodes: Vec<Vec<Share>>,
}

impl Placement {
    /// A placement from each node's replicas. Errors: no node or more than
    /// [`MAX_NODES`](super::MAX_NODES), a segment twice on one node, a fraction not in
    /// (0, 1], or a segment whose fractions do not sum to 1 (within `1e-9`).
    pub fn new(nodes: Vec<Vec<Share>>) -> Result<Placement, ConfigError> {
        check_node_count("nodes", nodes.len())?;
        for (node, shares) in nodes.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for share in shares {
                if !seen.insert(share.segment) {
                    return Err(config_error(
                        "nodes",
                        format!("segment {} is twice on node {node}", share.segment),
                    ));
                }
                if !(share.fraction > 0.0 && share.fraction <= 1.0) {
                    return Err(config_error(
                        "nodes",
                        format!(
                            "segment {} on node {node} has fraction {}, not in (0, 1]",
                            share.segment, share.fraction
                        ),
                    ));
                }
            }
        }
        let placement = Placement { nodes };
        for (segment, replicas) in placement.routing_table() {
            let sum: f64 = replicas.iter().map(|&(_, fraction)| fraction).sum();
            if (sum - 1.0).abs() > 1e-9 {
                return Err(config_error(
                    "nodes",
                    format!("segment {segment}'s fractions sum to {sum}, not 1"),
                ));
            }
        }
        Ok(placement)
    }

    /// Each node holding the given segments, every holder of a segment serving an equal
    /// share of its queries: the placement of replicas with no plan behind them (what
    /// the nodes hold today, or a uniform replication).
    pub fn with_equal_shares(
        segments_by_node: &[BTreeSet<SegmentId>],
    ) -> Result<Placement, ConfigError> {
        let mut counts: BTreeMap<SegmentId, usize> = BTreeMap::new();
        for &segment in segments_by_node.iter().flatten() {
            *counts.entry(segment).or_insert(0) += 1;
        }
        Placement::new(
            segments_by_node
                .iter()
                .map(|segments| {
                    segments
                        .iter()
                        .map(|&segment| Share {
                            segment,
                            fraction: 1.0 / counts[&segment] as f64,
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Each node's replicas.
    pub fn nodes(&self) -> &[Vec<Share>] {
        &self.nodes
    }

    /// The segments each node should hold.
    pub fn segments_by_node(&self) -> Vec<BTreeSet<SegmentId>> {
        self.nodes
            .iter()
            .map(|shares| shares.iter().map(|share| share.segment).collect())
            .collect()
    }

    /// Replicas per segment.
    pub fn replica_counts(&self) -> BTreeMap<SegmentId, usize> {
        super::replica_counts(&self.nodes)
    }

    /// All replicas: the number of (segment, node) pairs.
    pub fn total_replicas(&self) -> usize {
        self.nodes.iter().map(Vec::len).sum()
    }

    /// The brokers' routing table (Getafix Table 2): for each segment, the nodes holding
    /// it and the fraction of its queries each should get, in increasing node order.
    pub fn routing_table(&self) -> BTreeMap<SegmentId, Vec<(NodeIndex, f64)>> {
        super::routing_table(&self.nodes)
    }
}

impl TryFrom<Vec<Vec<Share>>> for Placement {
    type Error = ConfigError;

    fn try_from(nodes: Vec<Vec<Share>>) -> Result<Placement, ConfigError> {
        Placement::new(nodes)
    }
}

impl From<Placement> for Vec<Vec<Share>> {
    fn from(placement: Placement) -> Vec<Vec<Share>> {
        placement.nodes
    }
}

impl Plan {
    /// The placement this plan becomes when bin `b` goes to node `matching.node_of_bin[b]`.
    /// Errors if the matching is not a permutation of this plan's bins.
    pub fn place(&self, matching: &Matching) -> Result<Placement, ConfigError> {
        let bins = self.bins();
        let mut nodes: Vec<Option<Vec<Share>>> = vec![None; bins.len()];
        if matching.node_of_bin.len() != bins.len() {
            return Err(config_error(
                "matching",
                format!(
                    "{} bins matched, the plan has {}",
                    matching.node_of_bin.len(),
                    bins.len()
                ),
            ));
        }
        for (bin, &node) in matching.node_of_bin.iter().enumerate() {
            match nodes.get_mut(node) {
                Some(slot @ None) => *slot = Some(bins[bin].clone()),
                _ => {
                    return Err(config_error(
                        "matching",
                        format!("node {node} is out of range or given two bins"),
                    ))
                }
            }
        }
        Ok(Placement {
            nodes: nodes.into_iter().map(Option::unwrap_or_default).collect(),
        })
    }
}

/// Builds a placement from parts already known to be consistent (the baselines).
pub(super) fn placement_unchecked(nodes: Vec<Vec<Share>>) -> Placement {
    debug_assert!(Placement::new(nodes.clone()).is_ok());
    Placement { nodes }
}

/// The node a new segment (or one garbage collected and asked for again) is loaded on at
/// once, before any popularity is known (Getafix §4.2): one of `node_count` nodes chosen
/// by `random_draw`, a uniform draw the caller makes, as `random_draw mod node_count`
/// (biased by at most `node_count / 2^64`). Errors if `node_count` is not in
/// `1..=`[`MAX_NODES`](super::MAX_NODES).
pub fn place_new_segment(node_count: usize, random_draw: u64) -> Result<NodeIndex, ConfigError> {
    check_node_count("node_count", node_count)?;
    // node_count <= MAX_NODES, so the remainder fits any usize.
    Ok((random_draw % node_count as u64) as NodeIndex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_segment_goes_where_the_draw_says() {
        assert_eq!(place_new_segment(5, 0), Ok(0));
        assert_eq!(place_new_segment(5, 13), Ok(3));
        assert_eq!(place_new_segment(1, u64::MAX), Ok(0));
        assert!(place_new_segment(0, 1).is_err());
        // Every node is reachable: draws 0..n cover 0..n.
        let reached: BTreeSet<NodeIndex> = (0..7)
            .map(|draw| place_new_segment(7, draw).unwrap())
            .collect();
        assert_eq!(reached, (0..7).collect());
    }

    #[test]
    fn placement_checks_its_fractions() {
        let share = |segment, fraction| Share { segment, fraction };
        assert!(Placement::new(vec![vec![share(1, 0.5)], vec![share(1, 0.5)]]).is_ok());
        assert!(Placement::new(vec![vec![share(1, 0.5)], vec![share(1, 0.4)]]).is_err());
        assert!(Placement::new(vec![vec![share(1, 0.5), share(1, 0.5)]]).is_err());
        assert!(Placement::new(vec![vec![share(1, 0.0)], vec![share(1, 1.0)]]).is_err());
        assert!(Placement::new(vec![]).is_err());
    }

    #[test]
    fn placement_is_checked_when_read() {
        let placement = Placement::new(vec![
            vec![Share {
                segment: 1,
                fraction: 0.25,
            }],
            vec![Share {
                segment: 1,
                fraction: 0.75,
            }],
        ])
        .unwrap();
        let json = serde_json::to_string(&placement).unwrap();
        assert_eq!(
            json,
            r#"[[{"segment":1,"fraction":0.25}],[{"segment":1,"fraction":0.75}]]"#
        );
        assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placement);
        let broken = r#"[[{"segment":1,"fraction":0.25}]]"#;
        assert!(serde_json::from_str::<Placement>(broken).is_err());
    }
}
