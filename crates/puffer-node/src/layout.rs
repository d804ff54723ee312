//! How a table is laid out and named: shards, replicas, which shard a key lives in,
//! and the rules for names. The bottom of the node crate: the catalog, the committer
//! and tables all use it.

use puffer_query::{QueryError, Result};
use serde::{Deserialize, Serialize};

/// Most shards of one table.
pub const MAX_SHARDS: u32 = 256;
/// Most replicas of one shard on a node.
pub const MAX_REPLICAS: u32 = 8;

/// Longest table name, in bytes.
pub const MAX_TABLE_NAME_BYTES: usize = 64;

/// How a table is laid out: shards and replicas per shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableLayout {
    /// Shards (records spread by key hash).
    pub shards: u32,
    /// Replicas of each shard on this node.
    pub replicas: u32,
}

impl Default for TableLayout {
    fn default() -> Self {
        TableLayout {
            shards: 1,
            replicas: 1,
        }
    }
}

impl TableLayout {
    /// Checks the counts.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(QueryError::Invalid(format!(
                "shards must be 1 to {MAX_SHARDS}, got {}",
                self.shards
            )));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(QueryError::Invalid(format!(
                "replicas must be 1 to {MAX_REPLICAS}, got {}",
                self.replicas
            )));
        }
        Ok(())
    }
}

/// The shard of `key` among `shards`: FNV-1a (64 bit) of the key bytes, modulo.
pub fn shard_of(key: &[u8], shards: u32) -> u32 {
    (puffer_adapt::spread::fnv1a64(key) % u64::from(shards.max(1))) as u32
}

/// Checks a table name: 1 to 64 bytes of ASCII letters, digits and `_`, not starting
/// with a digit.
pub fn check_table_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TABLE_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if valid {
        Ok(())
    } else {
        Err(QueryError::Invalid(format!(
            "table names are 1 to {MAX_TABLE_NAME_BYTES} ASCII letters, digits or '_', \
             not starting with a digit; got {name:?}"
        )))
    }
}

/// How a table's records are spread over its shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// By a hash of the key ([`shard_of`]): every table but subspaces.
    KeyHash,
    /// By the region in front of the key: a subspace ([`crate::subspace`]).
    RegionPrefix,
}

impl Routing {
    /// The shard of `shards` that holds `key`.
    pub fn shard_of(self, key: &[u8], shards: u32) -> u32 {
        match self {
            Routing::KeyHash => shard_of(key, shards),
            Routing::RegionPrefix => crate::subspace::region_of_stored_key(key) % shards.max(1),
        }
    }
}
