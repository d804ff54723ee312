//! The cluster's key layout in etcd (documented in `docs/cluster-metadata.md`).
//! Every key lives under `/puffer/<cluster>/`; numbers are zero-padded so that a
//! key's byte order is the numbers' order.

use crate::error::{ClusterError, Result};

/// Longest cluster name.
pub const MAX_CLUSTER_NAME_BYTES: usize = 64;

/// The keys of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// The keys of cluster `cluster`.
    pub fn new(cluster: &str) -> Result<Keys> {
        Keys::check_cluster_name(cluster)?;
        Ok(Keys {
            root: format!("/puffer/{cluster}/"),
        })
    }

    /// A cluster name is 1 to 64 of `[a-z0-9_-]`.
    pub fn check_cluster_name(cluster: &str) -> Result<()> {
        let ok = !cluster.is_empty()
            && cluster.len() <= MAX_CLUSTER_NAME_BYTES
            && cluster
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(())
        } else {
            Err(ClusterError::Invalid(format!(
                "a cluster name is 1 to {MAX_CLUSTER_NAME_BYTES} of a-z, 0-9, _ and -; got \
                 {cluster:?}"
            )))
        }
    }

    /// `/puffer/<cluster>/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Prefix of the tables: `catalog/tables/<name>` holds a table's entry (JSON).
    pub fn tables(&self) -> String {
        format!("{}catalog/tables/", self.root)
    }

    /// A table's entry.
    pub fn table(&self, name: &str) -> String {
        format!("{}{name}", self.tables())
    }

    /// Changed with every table created or dropped, so that a create sees every
    /// table (names, uids, the count) as of one revision.
    pub fn tables_guard(&self) -> String {
        format!("{}catalog/tables.guard", self.root)
    }

    /// `catalog/uids/<uid>` holds the name of the table with that uid.
    pub fn table_uid(&self, uid: u64) -> String {
        format!("{}catalog/uids/{uid:020}", self.root)
    }

    /// Prefix of the texts: `catalog/texts/<name>` holds a text's entry (JSON).
    pub fn texts(&self) -> String {
        format!("{}catalog/texts/", self.root)
    }

    /// A text's entry.
    pub fn text(&self, name: &str) -> String {
        format!("{}{name}", self.texts())
    }

    /// Changed with every text added or removed (for the count limit).
    pub fn texts_guard(&self) -> String {
        format!("{}catalog/texts.guard", self.root)
    }

    /// Prefix of the segments of table `uid`.
    pub fn table_segments(&self, uid: u64) -> String {
        format!("{}catalog/segments/{uid:020}/", self.root)
    }

    /// The segment list (JSON) of one replica of one shard, as node `node` holds it
    /// (each node that holds a copy registers its own).
    pub fn replica_segments(&self, uid: u64, shard: u32, replica: u32, node: &str) -> String {
        format!(
            "{}{shard:010}/{replica:010}/{node}",
            self.table_segments(uid)
        )
    }

    /// Prefix of every table's published shards.
    pub fn published(&self) -> String {
        format!("{}catalog/published/", self.root)
    }

    /// Prefix of the published shards of table `uid`.
    pub fn table_published(&self, uid: u64) -> String {
        format!("{}{uid:020}/", self.published())
    }

    /// The newest published snapshot (JSON) of one shard in deep storage.
    pub fn published_shard(&self, uid: u64, shard: u32) -> String {
        format!("{}{shard:010}", self.table_published(uid))
    }

    /// Prefix of the nodes' progress: `progress/<node id>` holds the last SCU a node that
    /// follows the log has applied (decimal), on its lease.
    pub fn progress(&self) -> String {
        format!("{}progress/", self.root)
    }

    /// A node's progress.
    pub fn node_progress(&self, node_id: &str) -> String {
        format!("{}{node_id}", self.progress())
    }

    /// The first SCU the log still holds (decimal; absent: 1): groups wholly before it
    /// were collected, their SCUs being in published segments and past every node.
    pub fn log_first(&self) -> String {
        format!("{}log/first", self.root)
    }

    /// Prefix of the live nodes: `members/<node id>` holds a node's card (JSON),
    /// attached to the node's lease.
    pub fn members(&self) -> String {
        format!("{}members/", self.root)
    }

    /// A node's card.
    pub fn member(&self, node_id: &str) -> String {
        format!("{}{node_id}", self.members())
    }

    /// The election of the coordinator (etcd's election service keeps its candidates
    /// under this prefix, one key per candidate, attached to its lease).
    pub fn coordinator_election(&self) -> String {
        format!("{}election/coordinator", self.root)
    }

    /// The election of the ingest leader, the one node that numbers SCUs.
    pub fn ingest_election(&self) -> String {
        format!("{}election/ingest", self.root)
    }

    /// The last SCU of the cluster's log (decimal): moved only by the ingest leader,
    /// by a transaction that checks its leadership and the value it moves from.
    pub fn log_tail(&self) -> String {
        format!("{}log/tail", self.root)
    }

    /// Prefix of the log's index: `log/index/<first SCU>` holds a group's entry (its
    /// SCUs and the deep-storage object that holds them).
    pub fn log_index(&self) -> String {
        format!("{}log/index/", self.root)
    }

    /// The index entry of the group starting at SCU `first`.
    pub fn log_entry(&self, first: u64) -> String {
        format!("{}{first:020}", self.log_index())
    }

    /// Prefix of what the coordinator leader writes (placement, routing): only by a
    /// transaction that checks its leadership.
    pub fn coordinated(&self) -> String {
        format!("{}coordinated/", self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_are_checked() {
        for good in ["a", "prod-1", "x_y"] {
            Keys::new(good).unwrap();
        }
        for bad in ["", "A", "a/b", "a b", &"x".repeat(65)] {
            assert!(Keys::new(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn numbered_keys_sort_as_numbers() {
        let keys = Keys::new("c").unwrap();
        let mut by_key: Vec<(String, (u64, u32, u32))> = [
            (10, 2, 0),
            (9, 100, 1),
            (10, 10, 0),
            (10, 2, 1),
            (u64::MAX, 0, 0),
        ]
        .into_iter()
        .map(|(u, s, r)| (keys.replica_segments(u, s, r, "n1"), (u, s, r)))
        .collect();
        by_key.sort();
        let mut by_number: Vec<(u64, u32, u32)> = by_key.iter().map(|(_, n)| *n).collect();
        let in_key_order = by_number.clone();
        by_number.sort();
        assert_eq!(in_key_order, by_number);
    }
}
