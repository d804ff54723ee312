//! Segment replication across nodes, after Getafix (Ghosh et al.): how many replicas each
//! segment gets, on which nodes, and which share of its queries each replica serves.
//!
//! One run of the coordinator, all of it pure (measurements and random draws in,
//! decisions out):
//! 1. [`Popularity`] ages the per-window access counts: `sum_i C_ij / 2^(i-1)`, the newest
//!    window first (paper §4.1); [`inherit_from_predecessors`] gives a new time chunk
//!    the popularity of the chunk before it until its own counts catch up.
//! 2. [`modified_best_fit`] (Algorithm 1 with Best Fit, §3.2) packs the segments' loads
//!    into one balanced bin per node with as few (segment, bin) pairs as it can: a
//!    [`Plan`], whose pairs are the replicas and whose shares are the routing fractions.
//!    [`modified_fit`] also runs the First Fit and Largest Fit variants the paper compares.
//! 3. [`match_bins_to_nodes`] maps bins onto nodes so that the fewest segments (or bytes)
//!    move, by the Hungarian algorithm (§4.3); [`Plan::place`] gives the [`Placement`],
//!    whose [`Placement::routing_table`] is the brokers' table (Table 2).
//! 4. [`lazy_transition`] lists the loads and the drops, dropping at most one replica of
//!    a segment per run (§4.4).
//! 5. [`collect_garbage`] frees nodes above a storage threshold, least popular segments
//!    first, never a segment's last replica (§4.4).
//! 6. [`place_new_segment`] puts a fresh segment on one node drawn at random (§4.2).
//!
//! [`joint_plan`] adds BlowFish's sample layers to step 2: a layer count per segment
//! (more layers, a bigger replica that serves faster) chosen with the replicas
//! MODIFIEDBESTFIT gives, for the least memory serving the load within a work budget per
//! node, never more than [`replicas_alone`] (one layer count everywhere).
//!
//! The baselines of the paper's evaluation are policies too: [`scarlett_placement`]
//! (replicas by concurrent accesses, §5.1) and [`uniform_placement`] (factor `k`);
//! [`uniform_placement_keeping`] is uniform replication that moves only what it must when
//! nodes come and go (the cluster's placement until popularity drives it).
//!
//! Nodes are numbered `0..n` in the caller's order ([`NodeIndex`]); wherever a rule needs
//! a tie broken, the lower node index and then the lower segment id win, so the same
//! measurements always give the same decisions.

pub mod baselines;
pub mod fit;
pub mod gc;
pub mod joint;
pub mod matching;
pub mod placement;
pub mod popularity;
pub mod transition;

pub use baselines::{
    placement_keeping, scarlett_placement, uniform_placement, uniform_placement_keeping,
    ScarlettConfig,
};
pub use fit::{modified_best_fit, modified_fit, FitHeuristic, Plan};
pub use gc::{collect_garbage, GcConfig, GcOutcome, NodeStorage};
pub use joint::{
    joint_plan, replicas_alone, JointChoice, JointConfig, JointPlan, LayerCost, SegmentDecision,
};
pub use matching::{match_bins_to_nodes, Matching};
pub use placement::{place_new_segment, Placement};
pub use popularity::{inherit_from_predecessors, Popularity};
pub use transition::{lazy_transition, Transition};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{config_error, ConfigError};

/// Identifies a segment (the caller's numbering).
pub type SegmentId = u64;

/// A node's position in the caller's list of nodes, `0..n`.
pub type NodeIndex = usize;

/// Most nodes (bins) one run plans for: the matching is cubic in it (about 10^9 steps
/// at this bound).
pub const MAX_NODES: usize = 1024;

/// Most segments one run plans for (and one window counts).
pub const MAX_SEGMENTS: usize = 1 << 20;

/// Largest segment size the transfer and storage arithmetic accepts (1 TiB): sums over a
/// node's segments then stay far from `u64` and `i64` overflow.
pub const MAX_SEGMENT_SIZE_BYTES: u64 = 1 << 40;

/// One replica of a segment in a bin or on a node, and the share of the segment's
/// queries it serves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// The segment.
    pub segment: SegmentId,
    /// Fraction of the segment's queries routed to this replica, in (0, 1]; a segment's
    /// fractions sum to 1.
    pub fraction: f64,
}

/// Replicas per segment: how many bins or nodes hold it.
fn replica_counts(units: &[Vec<Share>]) -> BTreeMap<SegmentId, usize> {
    let mut counts = BTreeMap::new();
    for share in units.iter().flatten() {
        *counts.entry(share.segment).or_insert(0) += 1;
    }
    counts
}

/// Each segment's replicas as (bin or node, fraction), in increasing bin or node order.
fn routing_table(units: &[Vec<Share>]) -> BTreeMap<SegmentId, Vec<(NodeIndex, f64)>> {
    let mut table: BTreeMap<SegmentId, Vec<(NodeIndex, f64)>> = BTreeMap::new();
    for (unit, shares) in units.iter().enumerate() {
        for share in shares {
            table
                .entry(share.segment)
                .or_default()
                .push((unit, share.fraction));
        }
    }
    table
}

fn check_node_count(input: &'static str, nodes: usize) -> Result<(), ConfigError> {
    if nodes == 0 || nodes > MAX_NODES {
        return Err(config_error(
            input,
            format!("{nodes} nodes is not in 1..={MAX_NODES}"),
        ));
    }
    Ok(())
}

fn check_segment_count(input: &'static str, segments: usize) -> Result<(), ConfigError> {
    if segments > MAX_SEGMENTS {
        return Err(config_error(
            input,
            format!("{segments} segments is more than {MAX_SEGMENTS}"),
        ));
    }
    Ok(())
}

/// A popularity or load must be a finite, non-negative number.
fn check_load(input: &'static str, segment: SegmentId, load: f64) -> Result<(), ConfigError> {
    if !(load.is_finite() && load >= 0.0) {
        return Err(config_error(
            input,
            format!("segment {segment} has load {load}, not a finite non-negative number"),
        ));
    }
    Ok(())
}

fn check_segment_size(
    input: &'static str,
    segment: SegmentId,
    size_bytes: u64,
) -> Result<(), ConfigError> {
    if size_bytes > MAX_SEGMENT_SIZE_BYTES {
        return Err(config_error(
            input,
            format!("segment {segment} is {size_bytes} bytes, more than {MAX_SEGMENT_SIZE_BYTES}"),
        ));
    }
    Ok(())
}
