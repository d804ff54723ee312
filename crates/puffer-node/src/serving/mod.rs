//! Serving shard replicas from bounded request queues, with layers adapted to the load
//! (BlowFish on one node).
//!
//! - [`replica`]: what the runtime needs of a replica (its indexes) and reconciling them
//!   to a target layer count.
//! - [`pool`]: a replica's bounded request queue and its workers.
//! - [`node`]: the node: shards, replicas, routing, and the loop feeding the policies of
//!   `puffer-adapt` with measurements every `delta`.

pub mod node;
pub mod pool;
pub mod replica;

pub use node::{
    AdaptiveNode, AttributePin, NewReplica, NodeConfig, NodeStatus, Pending, ReplicaHistoryRow,
    ReplicaSlot, ReplicaStatus, ShardGroup,
};
pub use pool::{ReplicaPool, Response};
pub use replica::{reconcile, LayerState, LayeredReplica};
