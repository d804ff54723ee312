//! PufferDB's adaptivity policies, as pure deterministic code: measurements in, decisions out.
//!
//! Nothing here does I/O, starts a thread or reads a clock; the caller samples its request
//! queues every `delta`, passes the samples and the time, and applies what comes back.
//! That is what lets the tests replay recorded and synthetic histories exactly.
//!
//! - [`averager`]: the exponentially averaged queue length (BlowFish equation 1).
//! - [`marks`]: high and low marks per layer count, with hysteresis between them.
//! - [`curve`]: each replica's storage-throughput curve, measured on the running system.
//! - [`attributes`]: which replicas hold attribute layers, by rows found per byte.
//! - [`manager`]: the layer manager, spending a node memory budget where the queues need it.
//! - [`scheduler`]: routing a shard's queries to its replicas in inverse proportion to their queues.
//! - [`planner`]: the storage needed for a load by layers versus by selective replication.
//! - [`replication`]: segment replicas across nodes after Getafix: aged popularity,
//!   MODIFIEDBESTFIT, bins matched onto nodes, lazy deletion, garbage collection, and the
//!   Scarlett and uniform baselines.
//! - [`spread`]: the one hash that spreads keys, shards and values over places.
//! - [`hyperspace`]: hyperspace-hashing subspaces after Diegues et al.: region pruning
//!   (equation 1), a windowed profiler, the query analyser, the throughput model
//!   (equations 2 to 5), the configurator's margin rule and the paper's heuristics.

pub mod attributes;
pub mod averager;
pub mod curve;
pub mod hyperspace;
pub mod manager;
pub mod marks;
pub mod planner;
pub mod replication;
pub mod scheduler;
pub mod spread;

pub use averager::QueueAverager;
pub use curve::ThroughputCurve;
pub use manager::{Decision, LayerManager, ManagerConfig, ReplicaId, ReplicaSample};
pub use marks::Marks;
pub use scheduler::ReplicaScheduler;

/// A configuration value or a policy's input out of its valid range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid adaptivity setting {setting}: {reason}")]
pub struct ConfigError {
    /// The setting's name, as it appears in the configuration file, or the input's
    /// parameter name.
    pub setting: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

pub(crate) fn config_error(setting: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        reason: reason.into(),
    }
}
