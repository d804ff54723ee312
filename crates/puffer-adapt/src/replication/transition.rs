//! From what nodes hold to what a new placement wants, deleting lazily (Getafix §4.4).
//!
//! Every replica the placement wants and its node lacks is loaded. Replicas the placement
//! no longer wants are not all dropped at once: at most one replica of a segment is
//! dropped per run (the paper's rate limit, "currently set to 1"), the others stay until
//! later runs. Popularity fluctuates, and a replica kept is a transfer saved if its
//! segment becomes popular again.
//!
//! A drop never takes a segment's last replica held now: loads take time, and until the
//! new copy is there the old one still serves. A segment moving from one node to another
//! is therefore dropped at its old node in a later run, once the new node holds it. A
//! segment the placement does not want at all (popularity 0) keeps one replica; freeing
//! it is garbage collection's choice under storage pressure. When a segment has several
//! unwanted replicas, the one on the lowest-numbered node goes first.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{NodeIndex, Placement, SegmentId};
use crate::{config_error, ConfigError};

/// Replicas of one segment dropped per run at most.
pub const DROPS_PER_SEGMENT_PER_RUN: usize = 1;

/// What to do this run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// Replicas to load, as (node, segment), by node then segment.
    pub loads: Vec<(NodeIndex, SegmentId)>,
    /// Replicas to drop now, as (node, segment), by node then segment.
    pub drops: Vec<(NodeIndex, SegmentId)>,
    /// Replicas the placement no longer wants but kept this run, as (node, segment).
    pub deferred: Vec<(NodeIndex, SegmentId)>,
}

/// The loads and lazy drops that move `held_by_node` (what each node holds now, one entry
/// per node of the placement) towards `target`.
pub fn lazy_transition(
    held_by_node: &[BTreeSet<SegmentId>],
    target: &Placement,
) -> Result<Transition, ConfigError> {
    let wanted_by_node = target.segments_by_node();
    if held_by_node.len() != wanted_by_node.len() {
        return Err(config_error(
            "held_by_node",
            format!(
                "{} nodes for a placement over {}",
                held_by_node.len(),
                wanted_by_node.len()
            ),
        ));
    }
    let mut transition = Transition::default();
    let mut held_count: BTreeMap<SegmentId, usize> = BTreeMap::new();
    let mut unwanted: BTreeMap<SegmentId, Vec<NodeIndex>> = BTreeMap::new();
    for (node, (held, wanted)) in held_by_node.iter().zip(&wanted_by_node).enumerate() {
        for &segment in wanted.difference(held) {
            transition.loads.push((node, segment));
        }
        for &segment in held {
            *held_count.entry(segment).or_insert(0) += 1;
        }
        for &segment in held.difference(wanted) {
            unwanted.entry(segment).or_default().push(node);
        }
    }
    for (segment, nodes) in unwanted {
        // Nodes come in increasing order; the last replica held now always stays.
        let droppable = DROPS_PER_SEGMENT_PER_RUN.min(held_count[&segment] - 1);
        for (rank, node) in nodes.into_iter().enumerate() {
            if rank < droppable {
                transition.drops.push((node, segment));
            } else {
                transition.deferred.push((node, segment));
            }
        }
    }
    transition.drops.sort_unstable();
    transition.deferred.sort_unstable();
    Ok(transition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(nodes: &[&[SegmentId]]) -> Placement {
        Placement::with_equal_shares(&sets(nodes)).unwrap()
    }

    fn sets(nodes: &[&[SegmentId]]) -> Vec<BTreeSet<SegmentId>> {
        nodes.iter().map(|n| n.iter().copied().collect()).collect()
    }

    #[test]
    fn one_drop_per_segment_and_never_the_last() {
        // Segment 1 is on all three nodes and wanted on none: one drop now, two later.
        // Segment 2 moves from node 0 to node 2: loaded there, kept on node 0 for now.
        let held = sets(&[&[1, 2], &[1], &[1]]);
        let target = placement(&[&[3], &[3], &[2]]);
        let transition = lazy_transition(&held, &target).unwrap();
        assert_eq!(transition.loads, vec![(0, 3), (1, 3), (2, 2)]);
        assert_eq!(transition.drops, vec![(0, 1)]);
        assert_eq!(transition.deferred, vec![(0, 2), (1, 1), (2, 1)]);
        // Next run, with the drop and loads applied: one more drop of each.
        let held = sets(&[&[2, 3], &[1, 3], &[1, 2]]);
        let transition = lazy_transition(&held, &target).unwrap();
        assert!(transition.loads.is_empty());
        assert_eq!(transition.drops, vec![(0, 2), (1, 1)]);
        assert_eq!(transition.deferred, vec![(2, 1)]);
    }

    #[test]
    fn node_counts_must_agree() {
        assert!(lazy_transition(&sets(&[&[1]]), &placement(&[&[1], &[2]])).is_err());
    }
}
