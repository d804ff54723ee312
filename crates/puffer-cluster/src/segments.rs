//! Segments in deep storage: indexer nodes publish each shard's compressed stage, and a
//! node with a fresh data directory loads them instead of replaying the whole log.
//!
//! A shard's directory holds its `MANIFEST` (the live segments and the checkpoint: every
//! SCU up to it is in them) and segment files that are never changed once the manifest
//! names them (`seg-NNNNNN.idx`, `.meta`, and `.del-C` deletions named by checkpoint).
//! Publishing a shard is uploading the files its manifest names, then recording the
//! snapshot in etcd (`catalog/published/<uid>/<shard>`): its files' objects, the
//! checkpoint, and `covers`, the SCU up to which every SCU that touches the shard is in
//! the files (the checkpoint, or later when no SCU since touched the shard, which keeps
//! an idle shard from holding everyone back).
//!
//! Seeding a fresh data directory ([`seed_data_dir`]) reads the tables and the published
//! shards at one etcd revision, downloads the files of every table whose shards are all
//! published, and starts the node's log after the lowest `covers`; following the log from
//! there, each shard skips the SCUs it holds. A table created after that read has all its
//! SCUs later than every `covers` read, so nothing is missed; a table not fully published
//! is made empty and filled from the log, which is then followed from its first kept SCU.
//!
//! The log is collected ([`log_horizon`], [`crate::scu_log::ClusterLog::collect`]) up
//! to an SCU that every shard's published snapshot covers and every live node that
//! follows has applied, as the previous collection round computed it, so a node seeding
//! meanwhile (which starts at or past that) finds the groups it needs.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use puffer_node::catalog::TableEntry;
use puffer_node::seed::{clear_interrupted, is_fresh, Seed};
use puffer_node::{Database, ReplicaRequest, ShardReplicas};
use puffer_query::{QueryError, Result};
use puffer_store::manifest::{Manifest, MANIFEST_FILE};
use serde::{Deserialize, Serialize};

use crate::deep_storage::DeepStorage;
use crate::error::ClusterError;
use crate::etcd::{members, Etcd, Role};

/// How often an indexer looks for shards to publish.
pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(5);
/// How long an object no snapshot names any more is kept before it is deleted: a node
/// that read an older snapshot may still be downloading it.
pub const SUPERSEDED_GRACE: Duration = Duration::from_secs(600);
/// Most files one published shard names (a manifest and three per segment).
pub const MAX_PUBLISHED_FILES: usize = 4 * 4096;

/// One file of a published shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedFile {
    /// Its name in the shard directory.
    pub name: String,
    /// Its object in deep storage.
    pub object: String,
    /// Its size.
    pub bytes: u64,
}

/// A shard's snapshot in deep storage, as recorded in etcd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedShard {
    /// The table's uid.
    pub table_uid: u64,
    /// The shard.
    pub shard: u32,
    /// The manifest's checkpoint: every SCU up to it is in the segments.
    pub checkpoint: u64,
    /// Every SCU up to this one that touches the shard is in the files (at least the
    /// checkpoint).
    pub covers: u64,
    /// The node that published it.
    pub node: String,
    /// The files: the manifest and what it names.
    pub files: Vec<PublishedFile>,
}

impl PublishedShard {
    /// Bytes of all its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| {
        ClusterError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            detail: e.to_string(),
        }
        .into()
    })
}

/// Every published shard, by (table uid, shard).
pub fn published(etcd: &Etcd) -> Result<HashMap<(u64, u32), PublishedShard>> {
    let prefix = etcd.keys().published();
    let answer = etcd.call(move |mut client| async move {
        client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
    })?;
    let mut all = HashMap::new();
    for kv in answer.kvs() {
        let shard: PublishedShard = decode(kv.key(), kv.value())?;
        all.insert((shard.table_uid, shard.shard), shard);
    }
    Ok(all)
}

/// The published snapshot of shard `shard` of table `uid`, if there is one.
pub fn published_shard(etcd: &Etcd, uid: u64, shard: u32) -> Result<Option<PublishedShard>> {
    let key = etcd.keys().published_shard(uid, shard);
    let answer = etcd.call(move |mut client| async move { client.get(key, None).await })?;
    answer
        .kvs()
        .first()
        .map(|kv| decode(kv.key(), kv.value()))
        .transpose()
}

/// What one publishing round did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PublishRound {
    /// Shards whose newer snapshot was recorded.
    pub shards: usize,
    /// Files uploaded (those uploaded before are not again).
    pub files: usize,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Objects deleted: no snapshot named them for the grace period.
    pub deleted: usize,
}

/// An indexer's publisher: remembers what it uploaded and recorded, so that a round
/// uploads only new files and records only newer snapshots.
#[derive(Debug)]
pub struct Publisher {
    etcd: Etcd,
    deep: DeepStorage,
    node_id: String,
    /// Names this process's objects apart from an earlier run's (a restarted node's
    /// shard directories may hold other bytes under the same file names).
    incarnation: String,
    uploaded: HashSet<String>,
    recorded: HashMap<(u64, u32), u64>,
    /// The objects of the snapshot this publisher last recorded, per shard.
    named: HashMap<(u64, u32), Vec<String>>,
    /// Objects no longer named (by this publisher), with when they stopped being.
    superseded: std::collections::VecDeque<(Instant, String)>,
    /// Shards whose deep-storage prefix was swept for other runs' leftovers.
    swept: HashSet<(u64, u32)>,
    grace: Duration,
}

impl Publisher {
    /// A publisher for node `node_id`; `incarnation` is unique to this run of it (its
    /// lease, say).
    pub fn new(etcd: Etcd, deep: DeepStorage, node_id: &str, incarnation: &str) -> Publisher {
        Publisher {
            etcd,
            deep,
            node_id: node_id.to_string(),
            incarnation: incarnation.to_string(),
            uploaded: HashSet::new(),
            recorded: HashMap::new(),
            named: HashMap::new(),
            superseded: std::collections::VecDeque::new(),
            swept: HashSet::new(),
            grace: SUPERSEDED_GRACE,
        }
    }

    /// The same, deleting unnamed objects after `grace` instead of [`SUPERSEDED_GRACE`].
    pub fn with_grace(mut self, grace: Duration) -> Publisher {
        self.grace = grace;
        self
    }

    /// Objects no longer named go to the deletion queue (once each).
    fn supersede(&mut self, objects: impl IntoIterator<Item = String>) {
        let now = Instant::now();
        for object in objects {
            self.uploaded.remove(&object);
            if !self.superseded.iter().any(|(_, o)| *o == object) {
                self.superseded.push_back((now, object));
            }
        }
    }

    /// Deletes the queued objects older than the grace period that no recorded
    /// snapshot (of any publisher) names now.
    fn delete_superseded(&mut self, round: &mut PublishRound) -> Result<()> {
        let due = self
            .superseded
            .iter()
            .take_while(|(at, _)| at.elapsed() >= self.grace)
            .count();
        if due == 0 {
            return Ok(());
        }
        let named: HashSet<String> = published(&self.etcd)?
            .into_values()
            .flat_map(|shard| shard.files.into_iter().map(|f| f.object))
            .collect();
        for (_, object) in self.superseded.drain(..due).collect::<Vec<_>>() {
            if named.contains(&object) {
                continue;
            }
            match self.deep.delete(&object) {
                Ok(()) => round.deleted += 1,
                // Tried again later.
                Err(_) => self.superseded.push_back((Instant::now(), object)),
            }
        }
        Ok(())
    }

    /// Once per shard and run: objects under the shard's prefix that other runs (this
    /// node's before a restart, or another indexer's) left and no snapshot names.
    fn sweep_leftovers(&mut self, uid: u64, shard: u32) -> Result<()> {
        if !self.swept.insert((uid, shard)) {
            return Ok(());
        }
        let ours = format!("segments/{uid:020}/{shard:010}/{}/", self.incarnation);
        let leftovers: Vec<String> = self
            .deep
            .list(&format!("segments/{uid:020}/{shard:010}"))?
            .into_iter()
            .filter(|name| !name.starts_with(&ours))
            .collect();
        // Named ones are skipped when due.
        self.supersede(leftovers);
        Ok(())
    }

    /// Publishes every shard of `database` that this node publishes (all of them when
    /// `all`, else those that fall to it among the live indexers) and whose snapshot
    /// moved since it was last recorded.
    pub fn round(&mut self, database: &Database, all: bool) -> Result<PublishRound> {
        let indexers: Vec<String> = if all {
            Vec::new()
        } else {
            members(&self.etcd)?
                .into_iter()
                .filter(|m| m.roles.contains(&Role::Indexer))
                .map(|m| m.node_id)
                .collect()
        };
        let mut round = PublishRound::default();
        let mut live = HashSet::new();
        for name in database.table_names() {
            // Dropped meanwhile: nothing to publish.
            let Ok(table) = database.table(&name) else {
                continue;
            };
            live.insert(table.uid());
            for shard in 0..table.layout().shards {
                if !all && !falls_to(&indexers, &self.node_id, table.uid(), shard) {
                    continue;
                }
                self.sweep_leftovers(table.uid(), shard)?;
                self.publish_shard(database, &table, shard, &mut round)?;
            }
        }
        // A dropped table's objects go after the grace period.
        let dropped: Vec<(u64, u32)> = self
            .named
            .keys()
            .filter(|(uid, _)| !live.contains(uid))
            .copied()
            .collect();
        for key in dropped {
            self.recorded.remove(&key);
            let objects = self.named.remove(&key).unwrap_or_default();
            self.supersede(objects);
        }
        self.delete_superseded(&mut round)?;
        Ok(round)
    }

    fn publish_shard(
        &mut self,
        database: &Database,
        table: &puffer_node::Table,
        shard: u32,
        round: &mut PublishRound,
    ) -> Result<()> {
        let uid = table.uid();
        // Read before the watermarks: an SCU applied after them is numbered above it.
        let published = database.published();
        let Some(group) = table.shard_group(shard) else {
            return Ok(()); // not held here
        };
        let watermarks = group
            .send_to(0, ReplicaRequest::Watermarks)?
            .into_watermarks()?;
        let Some(dir) = table.replica_dir(shard, 0) else {
            return Ok(());
        };
        let Some(manifest) = Manifest::load(dir)? else {
            return Ok(());
        };
        if manifest.checkpoint != watermarks.compressed {
            return Ok(()); // compacted meanwhile: the next round takes the new one
        }
        let covers = if watermarks.published == watermarks.compressed {
            published.max(manifest.checkpoint)
        } else {
            manifest.checkpoint
        };
        if self
            .recorded
            .get(&(uid, shard))
            .is_some_and(|&c| c >= covers)
        {
            return Ok(());
        }
        let mut names = Vec::new();
        for segment in &manifest.segments {
            names.push(format!("seg-{:06}.idx", segment.id));
            names.push(format!("seg-{:06}.meta", segment.id));
            names.extend(segment.deletions.clone());
        }
        if names.len() + 1 > MAX_PUBLISHED_FILES {
            return Err(QueryError::Limit(format!(
                "shard {shard} of table {:?} has {} files; a published shard has at most \
                 {MAX_PUBLISHED_FILES}",
                table.name(),
                names.len() + 1
            )));
        }
        let prefix = format!("segments/{uid:020}/{shard:010}/{}", self.incarnation);
        let mut files = Vec::with_capacity(names.len() + 1);
        let mut new_uploads = Vec::new();
        for name in &names {
            let object = format!("{prefix}/{name}");
            let path = dir.join(name);
            let bytes = match std::fs::metadata(&path) {
                Ok(meta) => meta.len(),
                // Removed by a compaction since the manifest was read: next round.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(puffer_store::StoreError::io(&path, e).into()),
            };
            if !self.uploaded.contains(&object) {
                let payload = match std::fs::read(&path) {
                    Ok(payload) => payload,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(puffer_store::StoreError::io(&path, e).into()),
                };
                self.deep.put(&object, &payload)?;
                round.files += 1;
                round.bytes += payload.len() as u64;
                new_uploads.push(object.clone());
            }
            files.push(PublishedFile {
                name: name.clone(),
                object,
                bytes,
            });
        }
        // The manifest as read, under a name of its content (a compaction may keep the
        // checkpoint and change the segments).
        let manifest_bytes = manifest_file_bytes(dir)?;
        let manifest_object = format!(
            "{prefix}/MANIFEST-{:020}-{:08x}",
            manifest.checkpoint,
            crc32fast::hash(&manifest_bytes)
        );
        if Manifest::load(dir)?.as_ref() != Some(&manifest) {
            return Ok(()); // replaced meanwhile: next round
        }
        self.deep.put(&manifest_object, &manifest_bytes)?;
        round.bytes += manifest_bytes.len() as u64;
        files.push(PublishedFile {
            name: MANIFEST_FILE.to_string(),
            object: manifest_object,
            bytes: manifest_bytes.len() as u64,
        });
        self.uploaded.extend(new_uploads);
        let entry = PublishedShard {
            table_uid: uid,
            shard,
            checkpoint: manifest.checkpoint,
            covers,
            node: self.node_id.clone(),
            files,
        };
        let objects: Vec<String> = entry.files.iter().map(|f| f.object.clone()).collect();
        if record(&self.etcd, &entry)? {
            round.shards += 1;
            let before = self
                .named
                .insert((uid, shard), objects.clone())
                .unwrap_or_default();
            self.supersede(before.into_iter().filter(|o| !objects.contains(o)));
        } else {
            // Another snapshot covering as much was recorded: ours is named by none.
            let kept = self.named.get(&(uid, shard)).cloned().unwrap_or_default();
            self.supersede(objects.into_iter().filter(|o| !kept.contains(o)));
        }
        self.recorded.insert((uid, shard), covers);
        Ok(())
    }
}

fn manifest_file_bytes(dir: &Path) -> Result<Vec<u8>> {
    let path = dir.join(MANIFEST_FILE);
    std::fs::read(&path).map_err(|e| puffer_store::StoreError::io(&path, e).into())
}

/// Whether shard `shard` of table `uid` falls to `node` among `indexers` (a node not
/// among them, or none listed, publishes everything it holds).
fn falls_to(indexers: &[String], node: &str, uid: u64, shard: u32) -> bool {
    if indexers.is_empty() || !indexers.iter().any(|n| n == node) {
        return true;
    }
    let mut sorted: Vec<&String> = indexers.iter().collect();
    sorted.sort();
    // FNV-1a over the uid and the shard: a fixed spread, the same on every node.
    let mut bytes = [0u8; 12];
    bytes[..8].copy_from_slice(&uid.to_le_bytes());
    bytes[8..].copy_from_slice(&shard.to_le_bytes());
    let hash = puffer_adapt::spread::fnv1a64(&bytes);
    sorted[(hash % sorted.len() as u64) as usize] == node
}

/// Records `entry` unless a snapshot covering as much is recorded already, and only
/// while its table exists. Whether it was recorded.
fn record(etcd: &Etcd, entry: &PublishedShard) -> Result<bool> {
    let keys = etcd.keys();
    let key = keys.published_shard(entry.table_uid, entry.shard);
    let value = serde_json::to_vec(entry).expect("a published shard encodes");
    for _ in 0..8 {
        let read_key = key.clone();
        let answer =
            etcd.call(move |mut client| async move { client.get(read_key, None).await })?;
        let compare = match answer.kvs().first() {
            Some(kv) => {
                let existing: PublishedShard = decode(kv.key(), kv.value())?;
                if existing.covers >= entry.covers {
                    return Ok(false);
                }
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision())
            }
            None => Compare::version(key.clone(), CompareOp::Equal, 0),
        };
        let txn = Txn::new()
            .when(vec![
                compare,
                // The table is still there (a drop removes its published shards).
                Compare::version(keys.table_uid(entry.table_uid), CompareOp::Greater, 0),
            ])
            .and_then(vec![TxnOp::put(key.clone(), value.clone(), None)]);
        let answer = etcd.call(move |mut client| async move { client.txn(txn).await })?;
        if answer.succeeded() {
            return Ok(true);
        }
    }
    Err(ClusterError::Unavailable("recording a published shard kept conflicting".into()).into())
}

/// The highest SCU up to which the log may be collected: every shard of every table
/// is published covering it, and every live node that follows the log has applied it
/// (0 when some shard is not published or some such node has not reported yet).
pub fn log_horizon(etcd: &Etcd) -> Result<u64> {
    let keys = etcd.keys();
    let prefixes = [
        keys.tables(),
        keys.published(),
        keys.members(),
        keys.progress(),
    ];
    // One read, one revision.
    let answer = etcd.call(move |mut client| async move {
        client
            .txn(
                Txn::new().and_then(
                    prefixes
                        .into_iter()
                        .map(|p| TxnOp::get(p, Some(GetOptions::new().with_prefix())))
                        .collect::<Vec<_>>(),
                ),
            )
            .await
    })?;
    let reads: Vec<Vec<etcd_client::KeyValue>> = answer
        .op_responses()
        .into_iter()
        .map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let [tables, shards, cards, progress] = &reads[..] else {
        return Ok(0);
    };
    let mut published = HashMap::new();
    for kv in shards {
        let shard: PublishedShard = decode(kv.key(), kv.value())?;
        published.insert((shard.table_uid, shard.shard), shard.covers);
    }
    let mut horizon = u64::MAX;
    for kv in tables {
        let entry: TableEntry = decode(kv.key(), kv.value())?;
        for shard in 0..entry.layout.shards {
            match published.get(&(entry.uid, shard)) {
                Some(&covers) => horizon = horizon.min(covers),
                None => return Ok(0),
            }
        }
    }
    let mut applied = HashMap::new();
    for kv in progress {
        let node = kv
            .key()
            .strip_prefix(keys.progress().as_bytes())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let scu = crate::scu_log::parse_number(kv.key(), kv.value())?;
        applied.insert(node, scu);
    }
    for kv in cards {
        let card: crate::etcd::MemberCard = decode(kv.key(), kv.value())?;
        let follows = [Role::Data, Role::Ingest, Role::Indexer]
            .iter()
            .any(|r| card.roles.contains(r));
        if follows {
            match applied.get(&card.node_id) {
                Some(&scu) => horizon = horizon.min(scu),
                None => return Ok(0),
            }
        }
    }
    Ok(if horizon == u64::MAX { 0 } else { horizon })
}

/// The bytes of a published file, checked against the size recorded for it (deep
/// storage checks each object's checksum).
pub fn download(deep: &DeepStorage, file: &PublishedFile) -> Result<Vec<u8>> {
    let bytes = deep.get(&file.object)?;
    if bytes.len() as u64 != file.bytes {
        return Err(ClusterError::Corrupt {
            key: file.object.clone(),
            detail: format!(
                "{} bytes in deep storage, {} recorded",
                bytes.len(),
                file.bytes
            ),
        }
        .into());
    }
    Ok(bytes)
}

/// A table to seed: its entry, the shards held (`None`: every one), and their
/// published snapshots.
type ToSeed<'a> = (TableEntry, Option<Vec<u32>>, Vec<&'a PublishedShard>);

/// What seeding a data directory did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SeedReport {
    /// Tables seeded.
    pub tables: usize,
    /// Shards seeded.
    pub shards: usize,
    /// Bytes downloaded.
    pub bytes: u64,
    /// The node's log starts after this SCU.
    pub start_after: u64,
    /// Until the node has applied this SCU, some shard may be ahead of another: it
    /// serves nothing before.
    pub serve_from: u64,
    /// Time taken.
    pub millis: u64,
}

/// Seeds the fresh data directory `dir` from the shards published in deep storage;
/// `None` if `dir` holds a database already or nothing is published.
pub fn seed_data_dir(etcd: &Etcd, deep: &DeepStorage, dir: &Path) -> Result<Option<SeedReport>> {
    seed_data_dir_for(etcd, deep, dir, None)
}

/// [`seed_data_dir`] for data-only node `placed_on` (when given): of each table the
/// placement knows, only the shards placed on it are loaded and held (see
/// [`crate::holding`]); tables it does not know yet are loaded whole.
pub fn seed_data_dir_for(
    etcd: &Etcd,
    deep: &DeepStorage,
    dir: &Path,
    placed_on: Option<&str>,
) -> Result<Option<SeedReport>> {
    // An interrupted seeding left tables whose shards stand at different SCUs and no
    // log to say so: never opened as they are.
    clear_interrupted(dir)?;
    if !is_fresh(dir) {
        return Ok(None);
    }
    let started = Instant::now();
    let keys = etcd.keys();
    let (tables_prefix, published_prefix, log_first) =
        (keys.tables(), keys.published(), keys.log_first());
    // One read, one revision: tables, their published shards and where the log starts
    // as of one moment.
    let answer = etcd.call(move |mut client| async move {
        client
            .txn(Txn::new().and_then(vec![
                TxnOp::get(tables_prefix, Some(GetOptions::new().with_prefix())),
                TxnOp::get(published_prefix, Some(GetOptions::new().with_prefix())),
                TxnOp::get(log_first, None),
            ]))
            .await
    })?;
    let mut reads = answer.op_responses().into_iter().map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().to_vec(),
        _ => Vec::new(),
    });
    let (tables, shards) = (
        reads.next().unwrap_or_default(),
        reads.next().unwrap_or_default(),
    );
    let first_kept = match reads.next().unwrap_or_default().first() {
        Some(kv) => crate::scu_log::parse_number(kv.key(), kv.value())?,
        None => 1,
    };
    let mut published = HashMap::new();
    for kv in &shards {
        let shard: PublishedShard = decode(kv.key(), kv.value())?;
        published.insert((shard.table_uid, shard.shard), shard);
    }
    let placement = match placed_on {
        Some(_) => crate::placement::read_placement(etcd)?,
        None => None,
    };
    // Per table, the shards held: those placed on this node where the placement knows
    // the table, else every shard.
    let held_of = |entry: &TableEntry| -> Option<Vec<u32>> {
        let (node, placement) = (placed_on?, placement.as_ref()?);
        placement.tables.get(&entry.uid)?;
        Some(
            (0..entry.layout.shards)
                .filter(|&s| {
                    placement
                        .holders(entry.uid, s)
                        .is_some_and(|holders| holders.iter().any(|h| h == node))
                })
                .collect(),
        )
    };
    let mut seeded: Vec<ToSeed<'_>> = Vec::new();
    let mut all_published = true;
    for kv in &tables {
        let entry: TableEntry = decode(kv.key(), kv.value())?;
        let held = held_of(&entry);
        let shards: Option<Vec<&PublishedShard>> = (0..entry.layout.shards)
            .filter(|s| held.as_ref().is_none_or(|held| held.contains(s)))
            .map(|s| published.get(&(entry.uid, s)))
            .collect();
        match shards {
            Some(shards) => seeded.push((entry, held, shards)),
            None => all_published = false,
        }
    }
    if seeded.is_empty() && first_kept <= 1 {
        return Ok(None); // nothing to load: the log holds everything
    }
    let covers = seeded
        .iter()
        .flat_map(|(_, _, shards)| shards.iter().map(|s| s.covers));
    let lowest = covers.clone().min().unwrap_or(first_kept - 1);
    let start_after = if all_published {
        lowest
    } else {
        // A table made empty takes the log from where it starts: no group was
        // collected while the table was unpublished (collection waits for every shard),
        // so all its SCUs are still there.
        lowest.min(first_kept - 1)
    };
    let serve_from = covers.max().unwrap_or(0);
    let mut seed = Seed::begin(dir)?;
    let mut report = SeedReport {
        tables: seeded.len(),
        shards: 0,
        bytes: 0,
        start_after,
        serve_from,
        millis: 0,
    };
    for (entry, held, shards) in &seeded {
        seed.table_holding(entry, held.as_deref())?;
        for shard in shards {
            for file in &shard.files {
                let bytes = download(deep, file)?;
                seed.shard_file(&entry.name, shard.shard, &file.name, &bytes)?;
                report.bytes += bytes.len() as u64;
            }
            report.shards += 1;
        }
    }
    seed.finish(start_after)?;
    report.millis = started.elapsed().as_millis() as u64;
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_falls_to_exactly_one_indexer() {
        let indexers: Vec<String> = ["n1", "n3", "n2"].iter().map(|s| s.to_string()).collect();
        let mut per_node = HashMap::new();
        for uid in 1..40u64 {
            for shard in 0..8 {
                let takers: Vec<&String> = indexers
                    .iter()
                    .filter(|n| falls_to(&indexers, n, uid, shard))
                    .collect();
                assert_eq!(takers.len(), 1, "uid {uid} shard {shard}: {takers:?}");
                *per_node.entry(takers[0].clone()).or_insert(0) += 1;
            }
        }
        // Spread over all of them, not piled on one.
        assert_eq!(per_node.len(), 3, "{per_node:?}");
        assert!(per_node.values().all(|&n| n > 39 * 8 / 6), "{per_node:?}");
        // A node that is no indexer (or an empty list) publishes what it holds.
        assert!(falls_to(&indexers, "n9", 1, 0));
        assert!(falls_to(&[], "n1", 1, 0));
    }
}
