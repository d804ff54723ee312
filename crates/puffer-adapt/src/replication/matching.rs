//! Matching a plan's bins onto nodes so that the fewest segments move (Getafix §4.3).
//!
//! Bins are the expected configurations, nodes hold what they hold now. Giving bin `b` to
//! node `n` costs the transfers `n` needs to hold everything in `b`: the number of `b`'s
//! segments `n` lacks, or, when segment sizes are given, their total size in bytes (what
//! actually crosses the network). The assignment of bins to nodes with the least total
//! cost is a minimum-weight perfect matching, found by the Hungarian algorithm
//! (`pathfinding::kuhn_munkres`), in `O(nodes^3)`. Replicas a node holds but its bin does
//! not are not counted: dropping is free, and lazy anyway.

use std::collections::{BTreeMap, BTreeSet};

use pathfinding::kuhn_munkres::kuhn_munkres_min;
use pathfinding::matrix::Matrix;
use serde::{Deserialize, Serialize};

use super::{check_segment_size, NodeIndex, Plan, SegmentId};
use crate::{config_error, ConfigError};

/// Which node each bin of a plan goes to, and what that costs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matching {
    /// `node_of_bin[b]` is the node that takes bin `b`; a permutation of `0..bins`.
    pub node_of_bin: Vec<NodeIndex>,
    /// Total transfers: segments to load, or bytes to load when sizes were given.
    pub transfer_cost: u64,
}

/// The bins-to-nodes assignment needing the least transfers, given the segments each node
/// holds now (`held_by_node[n]`, one entry per bin of the plan).
///
/// With `sizes_bytes`, a transfer costs the segment's size, and every segment of the plan
/// must have a size of at most [`MAX_SEGMENT_SIZE_BYTES`](super::MAX_SEGMENT_SIZE_BYTES);
/// without, every transfer costs 1. Among assignments of equal cost the Hungarian
/// algorithm's own (deterministic) choice is returned.
pub fn match_bins_to_nodes(
    plan: &Plan,
    held_by_node: &[BTreeSet<SegmentId>],
    sizes_bytes: Option<&BTreeMap<SegmentId, u64>>,
) -> Result<Matching, ConfigError> {
    let bins = plan.bins();
    if held_by_node.len() != bins.len() {
        return Err(config_error(
            "held_by_node",
            format!(
                "{} nodes for a plan of {} bins; the plan has one bin per node",
                held_by_node.len(),
                bins.len()
            ),
        ));
    }
    let costs = transfer_costs(plan, held_by_node, sizes_bytes)?;
    let (total, node_of_bin) = kuhn_munkres_min(&costs);
    let transfer_cost = u64::try_from(total).map_err(|_| {
        config_error(
            "held_by_node",
            format!("negative total transfer cost {total}"),
        )
    })?;
    Ok(Matching {
        node_of_bin,
        transfer_cost,
    })
}

/// `costs[(b, n)]`: what node `n` must load to hold bin `b`.
fn transfer_costs(
    plan: &Plan,
    held_by_node: &[BTreeSet<SegmentId>],
    sizes_bytes: Option<&BTreeMap<SegmentId, u64>>,
) -> Result<Matrix<i64>, ConfigError> {
    let bins = plan.bins();
    let mut segment_cost: BTreeMap<SegmentId, i64> = BTreeMap::new();
    for share in bins.iter().flatten() {
        let cost = match sizes_bytes {
            None => 1,
            Some(sizes) => {
                let Some(&size_bytes) = sizes.get(&share.segment) else {
                    return Err(config_error(
                        "sizes_bytes",
                        format!("segment {} of the plan has no size", share.segment),
                    ));
                };
                check_segment_size("sizes_bytes", share.segment, size_bytes)?;
                // Bounded by MAX_SEGMENT_SIZE_BYTES (2^40), so it fits.
                size_bytes as i64
            }
        };
        segment_cost.insert(share.segment, cost);
    }
    // The Hungarian algorithm adds and subtracts potentials of the order of the largest
    // cost times the number of nodes, and panics on overflow: refuse costs that could
    // get there (petabytes per bin on a thousand nodes) instead.
    let largest_bin_cost: i64 = bins
        .iter()
        .map(|bin| {
            bin.iter()
                .map(|share| segment_cost[&share.segment])
                .sum::<i64>()
        })
        .max()
        .unwrap_or(0);
    let headroom = 4 * (bins.len() as i64 + 1);
    if largest_bin_cost.checked_mul(headroom).is_none() {
        return Err(config_error(
            "sizes_bytes",
            format!("a bin's transfer cost {largest_bin_cost} is too large to match exactly"),
        ));
    }
    Ok(Matrix::from_fn(bins.len(), bins.len(), |(bin, node)| {
        bins[bin]
            .iter()
            .filter(|share| !held_by_node[node].contains(&share.segment))
            .map(|share| segment_cost[&share.segment])
            .sum()
    }))
}
