//! The catalog in etcd: the node crate's [`Catalog`] for a cluster, passing the same
//! conformance suite as the file and memory catalogs.
//!
//! One key per table, text and replica segment list (layout in [`super::keys`]). A
//! change is one etcd transaction that first compares what the change was checked
//! against: creates and drops compare a guard key that each of them rewrites, so two
//! nodes never both take a name, a uid or the last free place; schema and segment
//! updates compare the table's own key. A transaction whose compare fails changed
//! nothing and is tried again on fresh reads, a bounded number of times.

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse,
};
use puffer_node::catalog::{checks, Catalog, SegmentEntry, TableEntry, TextEntry};
use puffer_query::{QueryError, Result};
use puffer_store::Schema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Etcd;
use crate::error::ClusterError;

/// Most times one change is tried again after another writer got in first.
pub const MAX_CONFLICT_RETRIES: usize = 64;
/// Largest value the catalog writes: below etcd's default request bound (1.5 MiB),
/// with room for the rest of the transaction.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// The catalog of one cluster, in etcd.
#[derive(Debug, Clone)]
pub struct EtcdCatalog {
    etcd: Etcd,
    /// Whose segment lists [`Catalog::set_segments`] writes: every node holding a copy
    /// of a replica registers its own list, under its own key.
    registrant: String,
}

/// The registrant of a catalog made with [`EtcdCatalog::new`].
pub const SHARED_REGISTRANT: &str = "shared";

impl EtcdCatalog {
    /// The catalog under `etcd`'s cluster root, registering segments as
    /// [`SHARED_REGISTRANT`] (for readers and tools).
    pub fn new(etcd: Etcd) -> EtcdCatalog {
        EtcdCatalog::for_node(etcd, SHARED_REGISTRANT)
    }

    /// The catalog as node `node_id` uses it: the segments it registers are its own.
    pub fn for_node(etcd: Etcd, node_id: &str) -> EtcdCatalog {
        EtcdCatalog {
            etcd,
            registrant: node_id.to_string(),
        }
    }

    /// Runs `txn`; its answers, and whether its compares held.
    fn txn(&self, txn: Txn) -> Result<(bool, Vec<TxnOpResponse>)> {
        let response = self
            .etcd
            .call(move |mut client| async move { client.txn(txn).await })?;
        Ok((response.succeeded(), response.op_responses()))
    }

    /// Reads `ops` (gets only) at one revision.
    fn read(&self, ops: Vec<TxnOp>) -> Result<Vec<Vec<KeyValue>>> {
        let (_, answers) = self.txn(Txn::new().and_then(ops))?;
        Ok(answers
            .into_iter()
            .map(|answer| match answer {
                TxnOpResponse::Get(get) => get.kvs().to_vec(),
                _ => Vec::new(),
            })
            .collect())
    }

    fn get(key: String) -> TxnOp {
        TxnOp::get(key, None)
    }

    fn get_prefix(prefix: String) -> TxnOp {
        TxnOp::get(prefix, Some(GetOptions::new().with_prefix()))
    }

    /// Changes the entry of table `name`, which must have uid `uid`, by `change`: read,
    /// changed and written back unless another writer changed it meanwhile (then again,
    /// a bounded number of times).
    fn change_entry(
        &self,
        name: &str,
        uid: u64,
        what: &str,
        change: impl Fn(&mut TableEntry) -> Result<()>,
    ) -> Result<()> {
        let keys = self.etcd.keys();
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = self.read(vec![Self::get(keys.table(name))])?;
            let mut entry: TableEntry = match read[0].first() {
                Some(kv) => decode(kv)?,
                None => return Err(QueryError::UnknownTable(name.to_string())),
            };
            if entry.uid != uid {
                return Err(QueryError::UnknownTable(name.to_string()));
            }
            change(&mut entry)?;
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    keys.table(name),
                    CompareOp::Equal,
                    mod_revision(&read[0]),
                )])
                .and_then(vec![TxnOp::put(
                    keys.table(name),
                    encode(&entry, "a table entry")?,
                    None,
                )]);
            if self.txn(txn)?.0 {
                return Ok(());
            }
        }
        Err(Self::busy(what))
    }

    /// A change that keeps losing to other writers is refused as retryable.
    fn busy(what: &str) -> QueryError {
        ClusterError::Unavailable(format!(
            "the catalog changed under {what} {MAX_CONFLICT_RETRIES} times in a row; retry"
        ))
        .into()
    }
}

fn decode<T: DeserializeOwned>(kv: &KeyValue) -> Result<T> {
    serde_json::from_slice(kv.value()).map_err(|e| {
        ClusterError::Corrupt {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            detail: e.to_string(),
        }
        .into()
    })
}

fn encode<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| QueryError::Invalid(format!("cannot encode {what}: {e}")))?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(QueryError::Limit(format!(
            "{what} takes {} bytes in etcd, more than the {MAX_VALUE_BYTES} a catalog value \
             may",
            bytes.len()
        )));
    }
    Ok(bytes)
}

fn decode_all<T: DeserializeOwned>(kvs: &[KeyValue]) -> Result<Vec<T>> {
    kvs.iter().map(decode).collect()
}

/// The mod revision of the first key of `kvs`, 0 if there is none (as etcd compares a
/// missing key).
fn mod_revision(kvs: &[KeyValue]) -> i64 {
    kvs.first().map_or(0, KeyValue::mod_revision)
}

impl Catalog for EtcdCatalog {
    fn tables(&self) -> Result<Vec<TableEntry>> {
        let keys = self.etcd.keys();
        let read = self.read(vec![Self::get_prefix(keys.tables())])?;
        // Keys come back in byte order, which is the names' order.
        decode_all(&read[0])
    }

    fn table(&self, name: &str) -> Result<Option<TableEntry>> {
        let read = self.read(vec![Self::get(self.etcd.keys().table(name))])?;
        read[0].first().map(decode).transpose()
    }

    fn create_table(&self, entry: &TableEntry) -> Result<()> {
        let keys = self.etcd.keys();
        let value = encode(entry, "a table entry")?;
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = self.read(vec![
                Self::get_prefix(keys.tables()),
                Self::get(keys.tables_guard()),
            ])?;
            let tables: Vec<TableEntry> = decode_all(&read[0])?;
            checks::new_table(entry, &tables.iter().collect::<Vec<_>>())?;
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    keys.tables_guard(),
                    CompareOp::Equal,
                    mod_revision(&read[1]),
                )])
                .and_then(vec![
                    TxnOp::put(keys.table(&entry.name), value.clone(), None),
                    TxnOp::put(keys.table_uid(entry.uid), entry.name.clone(), None),
                    TxnOp::put(keys.tables_guard(), entry.name.clone(), None),
                ]);
            if self.txn(txn)?.0 {
                return Ok(());
            }
        }
        Err(Self::busy("create table"))
    }

    fn set_schema(&self, name: &str, uid: u64, schema: &Schema) -> Result<()> {
        self.change_entry(name, uid, "set schema", |entry| {
            entry.schema = schema.clone();
            Ok(())
        })
    }

    fn set_subspace(
        &self,
        name: &str,
        uid: u64,
        subspace: &puffer_node::subspace::SubspaceOf,
    ) -> Result<()> {
        self.change_entry(name, uid, "set subspace", |entry| {
            checks::subspace(entry, subspace)?;
            entry.subspace_of = Some(subspace.clone());
            Ok(())
        })
    }

    fn drop_table(&self, name: &str) -> Result<TableEntry> {
        let keys = self.etcd.keys();
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = self.read(vec![
                Self::get(keys.table(name)),
                Self::get(keys.tables_guard()),
            ])?;
            let entry: TableEntry = match read[0].first() {
                Some(kv) => decode(kv)?,
                None => return Err(QueryError::UnknownTable(name.to_string())),
            };
            let txn = Txn::new()
                .when(vec![
                    Compare::mod_revision(
                        keys.table(name),
                        CompareOp::Equal,
                        mod_revision(&read[0]),
                    ),
                    Compare::mod_revision(
                        keys.tables_guard(),
                        CompareOp::Equal,
                        mod_revision(&read[1]),
                    ),
                ])
                .and_then(vec![
                    TxnOp::delete(keys.table(name), None),
                    TxnOp::delete(keys.table_uid(entry.uid), None),
                    TxnOp::delete(
                        keys.table_segments(entry.uid),
                        Some(DeleteOptions::new().with_prefix()),
                    ),
                    TxnOp::delete(
                        keys.table_published(entry.uid),
                        Some(DeleteOptions::new().with_prefix()),
                    ),
                    TxnOp::put(keys.tables_guard(), name.to_string(), None),
                ]);
            if self.txn(txn)?.0 {
                return Ok(entry);
            }
        }
        Err(Self::busy("drop table"))
    }

    fn texts(&self) -> Result<Vec<TextEntry>> {
        let read = self.read(vec![Self::get_prefix(self.etcd.keys().texts())])?;
        decode_all(&read[0])
    }

    fn put_text(&self, entry: &TextEntry) -> Result<()> {
        let keys = self.etcd.keys();
        let value = encode(entry, "a text entry")?;
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = self.read(vec![
                // Keys only: the count and whether this name is among them.
                TxnOp::get(
                    keys.texts(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
                Self::get(keys.texts_guard()),
            ])?;
            let this = keys.text(&entry.name);
            let replacing = read[0].iter().any(|kv| kv.key() == this.as_bytes());
            checks::text(entry, read[0].len(), replacing)?;
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    keys.texts_guard(),
                    CompareOp::Equal,
                    mod_revision(&read[1]),
                )])
                .and_then(vec![
                    TxnOp::put(this, value.clone(), None),
                    TxnOp::put(keys.texts_guard(), entry.name.clone(), None),
                ]);
            if self.txn(txn)?.0 {
                return Ok(());
            }
        }
        Err(Self::busy("put text"))
    }

    fn remove_text(&self, name: &str) -> Result<bool> {
        let keys = self.etcd.keys();
        let txn = Txn::new().and_then(vec![
            TxnOp::delete(keys.text(name), None),
            TxnOp::put(keys.texts_guard(), name.to_string(), None),
        ]);
        let (_, answers) = self.txn(txn)?;
        Ok(matches!(answers.first(), Some(TxnOpResponse::Delete(d)) if d.deleted() > 0))
    }

    fn segments(&self, table_uid: u64) -> Result<Vec<SegmentEntry>> {
        let read = self.read(vec![Self::get_prefix(
            self.etcd.keys().table_segments(table_uid),
        )])?;
        let mut segments: Vec<SegmentEntry> = Vec::new();
        for kv in &read[0] {
            segments.extend(decode::<Vec<SegmentEntry>>(kv)?);
        }
        segments.sort_by_key(|s| (s.shard, s.replica, s.segment));
        Ok(segments)
    }

    fn set_segments(
        &self,
        table_uid: u64,
        shard: u32,
        replica: u32,
        segments: &[SegmentEntry],
    ) -> Result<()> {
        let keys = self.etcd.keys();
        let unknown = || QueryError::UnknownTable(format!("with uid {table_uid}"));
        for _ in 0..MAX_CONFLICT_RETRIES {
            let read = self.read(vec![Self::get(keys.table_uid(table_uid))])?;
            let Some(name) = read[0].first() else {
                return Err(unknown());
            };
            let name = String::from_utf8_lossy(name.value()).into_owned();
            let read = self.read(vec![Self::get(keys.table(&name))])?;
            let table: TableEntry = match read[0].first() {
                Some(kv) => decode(kv)?,
                None => continue, // dropped between the two reads
            };
            if table.uid != table_uid {
                return Err(unknown());
            }
            checks::segments(&table, shard, replica, segments)?;
            let key = keys.replica_segments(table_uid, shard, replica, &self.registrant);
            let write = if segments.is_empty() {
                TxnOp::delete(key, None)
            } else {
                TxnOp::put(key, encode(&segments, "a replica's segment list")?, None)
            };
            // The table is as read (not dropped, not made again under its name).
            let txn = Txn::new()
                .when(vec![Compare::mod_revision(
                    keys.table(&name),
                    CompareOp::Equal,
                    mod_revision(&read[0]),
                )])
                .and_then(vec![write]);
            if self.txn(txn)?.0 {
                return Ok(());
            }
        }
        Err(Self::busy("set segments"))
    }
}
