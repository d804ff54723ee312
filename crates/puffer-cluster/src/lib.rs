//! The cluster: what turns PufferDB nodes into one database across machines, on
//! well-kept infrastructure only. etcd holds the metadata (the catalog, membership by
//! leases, the coordinator's election); deep storage (a directory or S3, through
//! `object_store`) holds immutable segment files and the SCU log. No consensus,
//! membership or storage replication protocol is ours.
//!
//! A single node needs none of this: `puffer serve` without `--etcd` runs with the
//! node crate's file catalog, as before. Everything here implements the node crate's
//! traits (the [`puffer_node::catalog::Catalog`] first), so the tables, committer and
//! server run unchanged on either.

pub mod broker;
pub mod deep_storage;
pub mod error;
pub mod etcd;
pub mod holding;
pub mod local_s3;
pub mod node;
pub mod placement;
pub mod popularity;
pub mod remote;
pub mod rpc;
pub mod runtime;
pub mod scu_log;
pub mod segments;

pub use deep_storage::{DeepStorage, S3Settings};
pub use error::{ClusterError, Result};
