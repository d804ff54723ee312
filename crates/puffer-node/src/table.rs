//! A table: its records spread over shards by key hash, each shard held by one or more
//! replicas (separate copies on this node, each serving reads from its own queue).
//!
//! On disk a table is `tables/<name>/` with `TABLE.json` (`{"format":2,"shards":S,
//! "replicas":R,"uid":U}`) and one shard directory per replica, `shard-<s>-replica-<r>/`.
//! A record with key `k` lives in shard `fnv1a64(k) mod S`. The uid ties the table's
//! parts of SCUs in the database's log to it (a table created again under a dropped
//! one's name has a new uid).
//!
//! Writes go through the database's committer ([`crate::commit`]): one SCU, one number,
//! durable in the database's log, applied to every replica of every shard it touches
//! before it is published, so a batch is atomic across shards (and tables) and any
//! replica answers a read at a published snapshot. Reads choose one snapshot for all
//! the shards they ask.
//!
//! Older layouts are converted when opened: format 1 (each replica with its own log)
//! and the layout before sharding (a `MANIFEST` directly in the table directory, which
//! stays the one replica's directory) have every replica compacted, so that nothing is
//! left in their own logs, and are then written as format 2.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::serving::{AdaptiveNode, NewReplica, ShardGroup};
use puffer_store::clock::SystemClock;
use puffer_store::fs::RealFs;
use puffer_store::{
    AggregateResult, ColumnsResult, Predicate, Query, ReadOptions, Record, Schema, SearchResult,
    Shard, ShardLog, ShardOptions, ShardStats, SnapshotInfo, StoreError, Watermarks, WriteOp,
};
use serde::{Deserialize, Serialize};

use crate::commit::Committer;
pub use crate::layout::{shard_of, TableLayout, MAX_REPLICAS, MAX_SHARDS};
use crate::message::{ReadAnswer, ReadRequest, ReplicaRequest, Reply, ShardReplicas, Wait};
use crate::shards::NotHeld;
pub use crate::shards::TableShards;
use puffer_query::{QueryError, Result};

/// Where a shard being taken on gets the SCUs it lacks: `fetch(after, upto)` gives the
/// records (in the log's framing) of the SCUs from `after+1` on, without a gap, up to
/// `upto` or fewer (it is called again for the rest).
pub type FetchScus = Arc<dyn Fn(u64, u64) -> Result<Vec<u8>> + Send + Sync>;

/// A record as stored (undecoded), the schema it decodes with, and the snapshot read.
pub type RawAnswer = (Option<puffer_store::RawRecord>, Arc<Schema>, SnapshotInfo);

#[derive(Clone, Serialize, Deserialize)]
pub(crate) struct TableFile {
    format: u32,
    shards: u32,
    replicas: u32,
    /// Ties the table's parts of SCUs in the database's log to it (format 2).
    #[serde(default)]
    uid: u64,
    /// The one replica's directory is the table directory itself (a table from before
    /// sharding).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    single_directory: bool,
    /// The shards held on this node, ascending (a cluster's data node holds those
    /// placed on it); absent: every shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    held: Option<Vec<u32>>,
}

impl TableFile {
    fn holds(&self, shard: u32) -> bool {
        self.held.as_ref().is_none_or(|held| held.contains(&shard))
    }
}

const TABLE_FILE: &str = "TABLE.json";
/// The table file format this version writes.
const TABLE_FORMAT: u32 = 2;
/// How long a shard being taken on from a snapshot ahead of this node waits for the
/// node to apply the SCUs up to it.
const MAX_WAIT_TO_REACH_SNAPSHOT: Duration = Duration::from_secs(30);
/// Tries of a read whose snapshot a replica sealed past meanwhile (each chooses anew).
const MAX_SNAPSHOT_TRIES: usize = 16;

/// A new table uid: random (seeded by the process's hash keys and the time), so uids of
/// dropped tables are not handed out again.
pub(crate) fn new_table_uid() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.finish().max(1)
}

/// A table's shards, registered with the node and with the database's committer.
pub struct Table {
    layout: TableLayout,
    /// The shards' replica groups on this node (the adaptive node serves them); `None`
    /// for a shard not held here.
    groups: RwLock<Vec<Option<Arc<ShardGroup<Shard>>>>>,
    shards: Arc<TableShards>,
    committer: Arc<Committer>,
    /// Each shard's replica directories.
    dirs: Vec<Vec<PathBuf>>,
    /// The table's directory.
    dir: PathBuf,
    /// Its table file as last written (shards are taken on and let go one at a time,
    /// under this lock).
    file: Mutex<TableFile>,
    /// How its shards are opened.
    options: ShardOptions,
    /// Its time partition, if it is time-partitioned (it then holds no record).
    partition: Option<crate::catalog::Partitioning>,
    /// The time-partitioned table it is a chunk of, if any.
    chunk_of: Option<crate::catalog::ChunkOf>,
    /// The table it is a subspace of, if any (marked ready once built).
    subspace_of: RwLock<Option<Arc<crate::subspace::SubspaceOf>>>,
}

impl Table {
    /// Creates the directories of table `entry` (its name, uid, layout and schema)
    /// and opens it.
    pub(crate) fn create(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        entry: &crate::catalog::TableEntry,
        options: &ShardOptions,
    ) -> Result<Table> {
        entry.layout.validate()?;
        let file = write_new_table_file(dir, entry, None)?;
        Ok(Table::open_dirs(
            node,
            committer,
            dir,
            &entry.name,
            Some(entry.schema.clone()),
            &file,
            options,
        )?
        .with_roles(entry))
    }

    /// Opens an existing table directory (converting older layouts); `None` if it holds
    /// no finished table. `known_schema` (the catalog's) is its schema if it holds no
    /// shard on this node.
    pub(crate) fn open(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        name: &str,
        options: &ShardOptions,
        known_schema: Option<&Schema>,
    ) -> Result<Option<Table>> {
        let path = dir.join(TABLE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(&path, e).into()),
        };
        let file = match bytes {
            Some(bytes) => serde_json::from_slice::<TableFile>(&bytes)
                .map_err(|e| StoreError::corrupt(&path, e.to_string()))?,
            // The layout before sharding: the directory is the one shard.
            None if dir.join("MANIFEST").exists() => TableFile {
                format: 0,
                shards: 1,
                replicas: 1,
                uid: 0,
                single_directory: true,
                held: None,
            },
            None => return Ok(None),
        };
        let layout = TableLayout {
            shards: file.shards,
            replicas: file.replicas,
        };
        let held_valid = file.held.as_ref().is_none_or(|held| {
            held.windows(2).all(|w| w[0] < w[1]) && held.iter().all(|&s| s < file.shards)
        });
        if file.format > TABLE_FORMAT
            || layout.validate().is_err()
            || (file.format == TABLE_FORMAT && file.uid == 0)
            || !held_valid
        {
            return Err(StoreError::corrupt(
                &path,
                format!(
                    "format {} with {} shards and {} replicas is not a table this version opens",
                    file.format, file.shards, file.replicas
                ),
            )
            .into());
        }
        if !(0..layout.shards).filter(|&s| file.holds(s)).all(|s| {
            (0..layout.replicas).all(|r| replica_dir(dir, &file, s, r).join("MANIFEST").exists())
        }) {
            return Ok(None); // a creation that never finished
        }
        // What a shard let go of, or taken on unfinished, left behind.
        for s in (0..layout.shards).filter(|&s| !file.holds(s)) {
            for r in 0..layout.replicas {
                remove_dir_if_there(&replica_dir(dir, &file, s, r))?;
            }
        }
        let file = if file.format < TABLE_FORMAT {
            convert_own_logs(dir, file, options)?
        } else {
            file
        };
        // A shard keeps its own schema: the one given only makes new shards.
        let schema = known_schema.cloned();
        Table::open_dirs(node, committer, dir, name, schema, &file, options).map(Some)
    }

    fn open_dirs(
        node: &AdaptiveNode<Shard>,
        committer: &Arc<Committer>,
        dir: &Path,
        name: &str,
        schema: Option<Schema>,
        file: &TableFile,
        options: &ShardOptions,
    ) -> Result<Table> {
        let layout = TableLayout {
            shards: file.shards,
            replicas: file.replicas,
        };
        let mut groups = Vec::new();
        for s in 0..layout.shards {
            if !file.holds(s) {
                groups.push(None);
                continue;
            }
            let dirs: Vec<PathBuf> = (0..layout.replicas)
                .map(|r| replica_dir(dir, file, s, r))
                .collect();
            let opened = open_replicas(&dirs, schema.as_ref(), options, committer)
                .and_then(|replicas| Ok(node.add_shard(name, s, replicas)?));
            match opened {
                Ok(group) => groups.push(Some(group)),
                Err(e) => {
                    node.remove_table(name);
                    return Err(e);
                }
            }
        }
        // Shards not held take the schema of those held (as of the same SCU), or, with
        // none held, the one given.
        let not_held_schema = match groups.iter().flatten().next() {
            Some(group) => Some(group.send_to(0, ReplicaRequest::Schema)?.into_schema()?),
            None => schema.map(Arc::new),
        };
        let mut replicas: Vec<Arc<dyn ShardReplicas>> = Vec::with_capacity(groups.len());
        for (s, group) in groups.iter().enumerate() {
            replicas.push(match (group, &not_held_schema) {
                (Some(group), _) => group.clone(),
                (None, Some(schema)) => Arc::new(NotHeld::new(name, s as u32, schema.clone())),
                (None, None) => {
                    node.remove_table(name);
                    return Err(StoreError::corrupt(
                        dir.join(TABLE_FILE),
                        format!("table {name} holds no shard here and its schema is not known"),
                    )
                    .into());
                }
            });
        }
        let shards = Arc::new(TableShards::new(file.uid, name, replicas)?);
        committer.register(shards.clone());
        let dirs = (0..layout.shards)
            .map(|s| {
                (0..layout.replicas)
                    .map(|r| replica_dir(dir, file, s, r))
                    .collect()
            })
            .collect();
        Ok(Table {
            layout,
            groups: RwLock::new(groups),
            shards,
            committer: committer.clone(),
            dirs,
            dir: dir.to_path_buf(),
            file: Mutex::new(file.clone()),
            options: options.clone(),
            partition: None,
            chunk_of: None,
            subspace_of: RwLock::new(None),
        })
    }

    /// The table with its catalog entry's roles: a time partition, a chunk, a subspace
    /// (the catalog keeps them; the table's own files do not). Before any SCU reaches
    /// it: a subspace's shards are routed by region from then on.
    pub(crate) fn with_roles(self, entry: &crate::catalog::TableEntry) -> Table {
        let mut table = self;
        table.partition = entry.partition.clone();
        table.chunk_of = entry.chunk_of.clone();
        if entry.subspace_of.is_some() {
            table.shards.route_by_region();
        }
        table.subspace_of = RwLock::new(entry.subspace_of.clone().map(Arc::new));
        table
    }

    /// The table it is a subspace of, if it is one (shared: every read and write asks).
    pub fn subspace_of(&self) -> Option<Arc<crate::subspace::SubspaceOf>> {
        self.subspace_of.read().expect("subspace lock").clone()
    }

    /// Marks a subspace ready from snapshot `ready_at` on (its catalog entry says so
    /// already).
    pub(crate) fn set_subspace_ready(&self, ready_at: u64) {
        let mut current = self.subspace_of.write().expect("subspace lock");
        if let Some(subspace) = current.as_ref() {
            *current = Some(Arc::new(crate::subspace::SubspaceOf {
                ready: true,
                ready_at,
                ..(**subspace).clone()
            }));
        }
    }

    /// Its time partition, if it is time-partitioned.
    pub fn partition(&self) -> Option<&crate::catalog::Partitioning> {
        self.partition.as_ref()
    }

    /// The time-partitioned table it is a chunk of, if any.
    pub fn chunk_of(&self) -> Option<&crate::catalog::ChunkOf> {
        self.chunk_of.as_ref()
    }

    /// The directory of replica `replica` of shard `shard` (its files are what a
    /// cluster's indexer publishes), if the table has it.
    pub fn replica_dir(&self, shard: u32, replica: u32) -> Option<&Path> {
        self.dirs
            .get(shard as usize)?
            .get(replica as usize)
            .map(PathBuf::as_path)
    }

    /// Lets shard `shard` go from this node (it is held elsewhere): from the next SCU
    /// on its parts are dropped here (schema changes are kept), reads of it are refused
    /// as unavailable, and its files are removed. Returns whether it was held.
    pub(crate) fn release_shard(&self, node: &AdaptiveNode<Shard>, shard: u32) -> Result<bool> {
        let mut file = self.file.lock().expect("table file lock");
        self.check_shard(shard)?;
        if !self.holds(shard) {
            return Ok(false);
        }
        let held: Vec<u32> = self
            .shards
            .held()
            .into_iter()
            .filter(|&s| s != shard)
            .collect();
        // The table file first: from here on a restart opens the shard as not held
        // (and removes what is left of it), whatever happens below.
        let next = TableFile {
            held: Some(held),
            ..file.clone()
        };
        write_table_file(&self.dir, &next)?;
        *file = next;
        let (shards, name) = (self.shards.clone(), self.name().to_string());
        self.committer.run_exclusive(move |published| {
            // Between SCUs: the schema is the last SCU's.
            let schema = shards.schema();
            shards
                .slot(shard as usize)
                .set(Arc::new(NotHeld::new(&name, shard, schema)));
            Ok(published)
        })?;
        let group = self.groups.write().expect("groups lock")[shard as usize].take();
        node.remove_shard(self.name(), shard);
        // Its replicas' threads stop once the last read holding them ends.
        drop(group);
        for dir in &self.dirs[shard as usize] {
            remove_dir_if_there(dir)?;
        }
        Ok(true)
    }

    /// The directories of shard `shard`'s replicas, emptied, for the shard to be taken
    /// on: put the files of a snapshot of the shard in each (or none, for a shard
    /// taken on empty), then call [`Table::adopt_shard`].
    pub fn prepare_adoption(&self, shard: u32) -> Result<Vec<PathBuf>> {
        let _file = self.file.lock().expect("table file lock");
        self.check_shard(shard)?;
        if self.holds(shard) {
            return Err(QueryError::Invalid(format!(
                "shard {shard} of table {} is held on this node already",
                self.name()
            )));
        }
        let dirs = self.dirs[shard as usize].clone();
        for dir in &dirs {
            remove_dir_if_there(dir)?;
            std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        Ok(dirs)
    }

    /// Takes shard `shard` on from the files put in its directories (see
    /// [`Table::prepare_adoption`]), which hold every SCU touching it up to `covers`.
    /// It is caught up with the SCUs after that from `fetch` (see [`FetchScus`]): first
    /// while SCUs go on being applied to the other shards, then, for the last few, on
    /// the committer's thread between two SCUs, where it takes its place. It is then
    /// compacted if it took SCUs past its snapshot (its checkpoint must pass every SCU
    /// it was caught up with, which this node's log may not hold) and written as held
    /// in the table file. Returns the SCU it was taken on at.
    pub(crate) fn adopt_shard(
        &self,
        node: &AdaptiveNode<Shard>,
        shard: u32,
        covers: u64,
        fetch: FetchScus,
    ) -> Result<u64> {
        let mut file = self.file.lock().expect("table file lock");
        self.check_shard(shard)?;
        if self.holds(shard) {
            return Err(QueryError::Invalid(format!(
                "shard {shard} of table {} is held on this node already",
                self.name()
            )));
        }
        let dirs = &self.dirs[shard as usize];
        let replicas = open_replicas(dirs, Some(&self.schema()), &self.options, &self.committer)?;
        let group = node.add_shard(self.name(), shard, replicas)?;
        let swapped = self.catch_up_and_swap(shard, covers, group.clone(), fetch);
        let (taken_on, applied) = match swapped {
            Ok(at) => at,
            Err(e) => {
                node.remove_shard(self.name(), shard);
                drop(group);
                for dir in dirs {
                    let _ = remove_dir_if_there(dir);
                }
                return Err(e);
            }
        };
        self.groups.write().expect("groups lock")[shard as usize] = Some(group.clone());
        for replica in 0..group.replica_count() {
            let marks = group
                .send_to(replica, ReplicaRequest::Watermarks)?
                .into_watermarks()?;
            if marks.compressed < applied {
                group
                    .send_to(replica, ReplicaRequest::Compact)?
                    .into_done()?;
            }
            let marks = group
                .send_to(replica, ReplicaRequest::Watermarks)?
                .into_watermarks()?;
            // SCUs past `taken_on` are in this node's log; those up to it that touch
            // the shard (the last is `applied`) must be in its segments.
            if marks.compressed < applied {
                return Err(QueryError::Store(StoreError::Unavailable(format!(
                    "shard {shard} of table {} was taken on holding SCUs up to {applied} \
                     but its segments hold SCUs up to {} only after compaction",
                    self.name(),
                    marks.compressed
                ))));
            }
        }
        let mut held = self.shards.held();
        held.sort_unstable();
        let next = TableFile {
            held: (held.len() < self.layout.shards as usize).then_some(held),
            ..file.clone()
        };
        write_table_file(&self.dir, &next)?;
        *file = next;
        Ok(taken_on)
    }

    /// Catches a shard being taken on up with the SCUs past `covers` and swaps it in
    /// between two SCUs; returns the SCU it was swapped in at and the last SCU its
    /// replicas had applied then (the last that touched it).
    fn catch_up_and_swap(
        &self,
        shard: u32,
        covers: u64,
        group: Arc<ShardGroup<Shard>>,
        fetch: FetchScus,
    ) -> Result<(u64, u64)> {
        let replicas: Arc<dyn ShardReplicas> = group;
        let (uid, shards) = (self.uid(), (self.layout.shards, self.shards.routing()));
        let catch_up = move |replicas: &Arc<dyn ShardReplicas>, mut after: u64, upto: u64| {
            while after < upto {
                let records = fetch(after, upto)?;
                let last = crate::commit::apply_to_shard(
                    uid, shards, shard, replicas, &records, after, upto,
                )?;
                if last == after {
                    return Err(QueryError::Store(StoreError::Unavailable(format!(
                        "no SCU after {after} was found to take shard {shard} on with"
                    ))));
                }
                after = last;
            }
            Ok(after)
        };
        // A snapshot ahead of this node would show SCUs its reads are not at yet.
        if !self
            .committer
            .wait_published(covers, MAX_WAIT_TO_REACH_SNAPSHOT)
        {
            return Err(QueryError::Store(StoreError::Unavailable(format!(
                "shard {shard}'s snapshot holds SCUs up to {covers}; this node has applied \
                 up to {} only",
                self.committer.published()
            ))));
        }
        // While SCUs go on being applied to the other shards...
        let caught_up = catch_up(&replicas, covers, self.committer.published())?;
        // ...then the few applied meanwhile, between two SCUs.
        let table = self.shards.clone();
        let applied = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let applied_there = applied.clone();
        let taken_on = self.committer.run_exclusive(move |now| {
            catch_up(&replicas, caught_up, now)?;
            let mut last = 0;
            for replica in 0..replicas.replica_count() {
                let marks = replicas
                    .send_to(replica, ReplicaRequest::Watermarks)?
                    .into_watermarks()?;
                last = last.max(marks.published);
            }
            applied_there.store(last, std::sync::atomic::Ordering::SeqCst);
            table.slot(shard as usize).set(replicas);
            Ok(now.max(caught_up))
        })?;
        Ok((taken_on, applied.load(std::sync::atomic::Ordering::SeqCst)))
    }

    fn check_shard(&self, shard: u32) -> Result<()> {
        if shard >= self.layout.shards {
            return Err(QueryError::Invalid(format!(
                "table {} has {} shards; there is no shard {shard}",
                self.name(),
                self.layout.shards
            )));
        }
        Ok(())
    }

    /// The table's catalog entry.
    pub fn entry(&self) -> crate::catalog::TableEntry {
        crate::catalog::TableEntry {
            name: self.name().to_string(),
            uid: self.uid(),
            layout: self.layout,
            schema: (*self.schema()).clone(),
            partition: self.partition.clone(),
            chunk_of: self.chunk_of.clone(),
            subspace_of: self.subspace_of().map(|s| (*s).clone()),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.shards.name
    }

    /// The table's uid.
    pub fn uid(&self) -> u64 {
        self.shards.uid
    }

    /// The shards as the committer reaches them (for batches over several tables).
    pub fn table_shards(&self) -> &Arc<TableShards> {
        &self.shards
    }

    /// Shards and replicas.
    pub fn layout(&self) -> TableLayout {
        self.layout
    }

    /// Shard `shard` with its replicas, if it is held here.
    pub fn shard_group(&self, shard: u32) -> Option<Arc<ShardGroup<Shard>>> {
        self.groups
            .read()
            .expect("groups lock")
            .get(shard as usize)?
            .clone()
    }

    /// The shards held here, with their replicas, ascending by shard.
    pub fn held_groups(&self) -> Vec<Arc<ShardGroup<Shard>>> {
        self.groups
            .read()
            .expect("groups lock")
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether shard `shard` is held here.
    pub fn holds(&self, shard: u32) -> bool {
        self.shard_group(shard).is_some()
    }

    /// Whether every shard is held here.
    pub fn holds_all(&self) -> bool {
        self.groups
            .read()
            .expect("groups lock")
            .iter()
            .all(Option::is_some)
    }

    /// Whether this node holds every shard `request` needs.
    pub fn holds_for(&self, request: &ReadRequest) -> bool {
        match request {
            ReadRequest::Get { key, .. } | ReadRequest::GetRaw { key, .. } => {
                self.holds(shard_of(key, self.layout.shards))
            }
            ReadRequest::Search { .. }
            | ReadRequest::Columns { .. }
            | ReadRequest::Aggregate { .. }
            | ReadRequest::Count { .. } => self.holds_all(),
        }
    }

    /// The schema (every shard has the same).
    pub fn schema(&self) -> Arc<Schema> {
        self.shards.schema()
    }

    /// Writes `ops` as one SCU, atomic over every shard and replica it touches;
    /// returns its number once it is durable and published.
    pub fn write(&self, ops: Vec<WriteOp>) -> Result<u64> {
        self.committer.write(vec![(self.shards.clone(), ops)])
    }

    /// Runs `read_with` at one snapshot for every shard it asks, chosen from
    /// `read`'s freshness, choosing again (a bounded number of times) if a replica
    /// sealed past it meanwhile. A snapshot the caller chose (`read.at`: one for
    /// several tables or time chunks read together) is read as it is; if a replica
    /// sealed past it, the caller chooses again.
    fn at_one_snapshot<T>(
        &self,
        read: ReadOptions,
        mut read_with: impl FnMut(u64) -> Result<T>,
    ) -> Result<T> {
        if let Some(at) = read.at {
            return read_with(at);
        }
        let mut tries = 0;
        loop {
            let at = self
                .committer
                .choose_snapshot(read, || self.shards.max_sealed())?;
            match read_with(at) {
                Err(QueryError::Store(StoreError::SnapshotGone { .. }))
                    if tries + 1 < MAX_SNAPSHOT_TRIES =>
                {
                    tries += 1;
                }
                answer => return answer,
            }
        }
    }

    /// The highest sealed SCU over this table's replicas held here (a snapshot read
    /// on them must not be older).
    pub(crate) fn max_sealed(&self) -> Result<u64> {
        self.shards.max_sealed()
    }

    /// The one read path: `request` answered at one snapshot over the shards it needs
    /// (a key's shard, or all of them, merged). With [`Wait::Never`], `None` if a
    /// replica would have to queue it, or if it needs several shards (which work at
    /// once on several threads); run it again with [`Wait::Allowed`] on a thread that
    /// may block.
    pub fn read(&self, request: &ReadRequest, wait: Wait) -> Result<Option<ReadAnswer>> {
        let shard = match request {
            ReadRequest::Get { key, .. } | ReadRequest::GetRaw { key, .. } => {
                Some(shard_of(key, self.layout.shards) as usize)
            }
            ReadRequest::Search { .. }
            | ReadRequest::Columns { .. }
            | ReadRequest::Aggregate { .. }
            | ReadRequest::Count { .. } => match self.layout.shards {
                1 => Some(0),
                _ if wait == Wait::Never => return Ok(None),
                _ => None,
            },
        };
        self.at_one_snapshot(request.read_options(), |at| {
            let request = request.at(at);
            match shard {
                Some(shard) => {
                    match self
                        .shards
                        .replica(shard)
                        .read(ReplicaRequest::Read(request), wait)?
                    {
                        Reply::Answered(response) => Ok(Some(response.into_read()?)),
                        Reply::WouldWait(_) => Ok(None),
                    }
                }
                None => self.read_all_shards(request).map(Some),
            }
        })
    }

    /// Every shard works at once (the last on this thread); answers are merged when
    /// all are in.
    fn read_all_shards(&self, request: ReadRequest) -> Result<ReadAnswer> {
        let answers = self.read_shards(&request, &self.shards.all_replicas())?;
        merged(&request, answers)
    }

    /// `request` answered by each of `shards` at once (the last on this thread).
    fn read_shards(
        &self,
        request: &ReadRequest,
        shards: &[Arc<dyn ShardReplicas>],
    ) -> Result<Vec<ReadAnswer>> {
        let (last, others) = shards.split_last().expect("a read asks a shard");
        let pending = others
            .iter()
            .map(|shard| shard.submit(ReplicaRequest::Read(request.clone())))
            .collect::<puffer_store::Result<Vec<_>>>()?;
        let here = last.read(ReplicaRequest::Read(request.clone()), Wait::Allowed);
        let mut answers = Vec::with_capacity(shards.len());
        for answer in pending {
            answers.push(answer.wait()?.into_read()?);
        }
        match here? {
            Reply::Answered(response) => answers.push(response.into_read()?),
            Reply::WouldWait(_) => unreachable!("a read allowed to wait was given back"),
        }
        Ok(answers)
    }

    /// A search or count of a subspace answered from regions `regions` (its shards;
    /// none: no record can match, and the first region answers so), at one snapshot,
    /// with each row's key as the table has it (the region taken off).
    pub(crate) fn read_regions(
        &self,
        request: &ReadRequest,
        regions: &[u32],
    ) -> Result<ReadAnswer> {
        let shards: Vec<Arc<dyn ShardReplicas>> = match regions {
            [] => vec![self.shards.replica(0)],
            _ => regions
                .iter()
                .map(|&r| self.shards.replica(r as usize))
                .collect(),
        };
        self.at_one_snapshot(request.read_options(), |at| {
            let request = request.at(at);
            let answers = self.read_shards(&request, &shards)?;
            let answers = answers
                .into_iter()
                .map(crate::subspace::with_table_keys)
                .collect();
            merged(&request, answers)
        })
    }

    /// The record with `key` (see [`Table::read`]).
    pub fn get(&self, key: &[u8], read: ReadOptions) -> Result<(Option<Record>, SnapshotInfo)> {
        let request = ReadRequest::Get {
            key: key.to_vec(),
            read,
        };
        match self.read(&request, Wait::Allowed)? {
            Some(ReadAnswer::Record { record, snapshot }) => Ok((record, snapshot)),
            other => Err(not_answered("a record", other)),
        }
    }

    /// The record with `key` as stored (see [`Table::read`]).
    pub fn get_raw(&self, key: &[u8], read: ReadOptions) -> Result<RawAnswer> {
        let request = ReadRequest::GetRaw {
            key: key.to_vec(),
            read,
        };
        match self.read(&request, Wait::Allowed)? {
            Some(ReadAnswer::Raw {
                record,
                schema,
                snapshot,
            }) => Ok((record, schema, snapshot)),
            other => Err(not_answered("a stored record", other)),
        }
    }

    /// Records matching the query over all shards, ascending by key, all read at one
    /// snapshot (see [`Table::read`]).
    pub fn search(&self, query: &Query) -> Result<SearchResult> {
        let request = ReadRequest::Search {
            query: query.clone(),
        };
        match self.read(&request, Wait::Allowed)? {
            Some(ReadAnswer::Rows(rows)) => Ok(rows),
            other => Err(not_answered("rows", other)),
        }
    }

    /// Records matching `predicate` over all shards, counted at one snapshot (see
    /// [`Table::read`]).
    pub fn count(&self, predicate: &Predicate, read: ReadOptions) -> Result<(u64, SnapshotInfo)> {
        let request = ReadRequest::Count {
            predicate: predicate.clone(),
            read,
        };
        match self.read(&request, Wait::Allowed)? {
            Some(ReadAnswer::Count { count, snapshot }) => Ok((count, snapshot)),
            other => Err(not_answered("a count", other)),
        }
    }

    /// Sizes: disk and memory of every replica, records of one replica per shard.
    pub fn stats(&self) -> Result<ShardStats> {
        let mut total = ShardStats::default();
        for shard in self.shards.all_replicas().iter().filter(|r| r.is_held()) {
            for replica in 0..shard.replica_count() {
                let stats = shard
                    .send_to(replica, ReplicaRequest::Stats)?
                    .into_stats()?;
                total.disk_bytes += stats.disk_bytes;
                total.memory_bytes += stats.memory_bytes;
                total.key_directory_bytes += stats.key_directory_bytes;
                total.record_cache += stats.record_cache;
                if replica == 0 {
                    total.segment_records += stats.segment_records;
                    total.segments += stats.segments;
                    total.sorted_batches += stats.sorted_batches;
                    total.log_tables += stats.log_tables;
                }
                total.rows_found += stats.rows_found;
            }
        }
        Ok(total)
    }

    /// Watermarks: the database's published snapshot, and the lowest sealed and
    /// compressed SCU over the replicas.
    pub fn watermarks(&self) -> Result<Watermarks> {
        let all = self
            .shards
            .to_every_replica(|| ReplicaRequest::Watermarks)?
            .into_iter()
            .map(|answer| answer.into_watermarks())
            .collect::<puffer_store::Result<Vec<_>>>()?;
        Ok(Watermarks {
            published: self.committer.published(),
            sorted: all.iter().map(|w| w.sorted).min().unwrap_or(0),
            compressed: all.iter().map(|w| w.compressed).min().unwrap_or(0),
        })
    }

    /// Seals every replica's log stage into sorted batches.
    pub fn seal(&self) -> Result<()> {
        for answer in self.shards.to_every_replica(|| ReplicaRequest::Seal)? {
            answer.into_done()?;
        }
        Ok(())
    }

    /// Compacts every replica into segments.
    pub fn compact_all(&self) -> Result<()> {
        for answer in self
            .shards
            .to_every_replica(|| ReplicaRequest::CompactAll)?
        {
            answer.into_done()?;
        }
        Ok(())
    }

    /// Whether every replica is running.
    pub fn is_running(&self) -> bool {
        self.shards
            .to_every_replica(|| ReplicaRequest::IsRunning)
            .is_ok_and(|answers| {
                answers
                    .into_iter()
                    .all(|answer| answer.into_running().unwrap_or(false))
            })
    }
}

fn not_answered(expected: &str, got: Option<ReadAnswer>) -> QueryError {
    QueryError::Store(StoreError::Unavailable(format!(
        "a read allowed to wait expected {expected} and got {got:?}"
    )))
}

/// One answer from the answers of every shard to `request`, all read at one
/// snapshot: rows by key (LIMIT applied after), counts added. Brokers merge with it too.
pub fn merged(request: &ReadRequest, answers: Vec<ReadAnswer>) -> Result<ReadAnswer> {
    let mut snapshots = Vec::with_capacity(answers.len());
    match request {
        ReadRequest::Search { query } => {
            let mut truncated = false;
            let mut rows: Vec<Record> = Vec::new();
            for answer in answers {
                let ReadAnswer::Rows(result) = answer else {
                    return Err(not_answered("rows", Some(answer)));
                };
                snapshots.push(result.snapshot);
                truncated |= result.truncated;
                rows.extend(result.rows);
            }
            rows.sort_by(|a, b| a.key.cmp(&b.key));
            if let Some(limit) = query.limit {
                if rows.len() > limit {
                    rows.truncate(limit);
                    truncated = true;
                }
            }
            Ok(ReadAnswer::Rows(SearchResult {
                rows,
                truncated,
                snapshot: combined(snapshots.into_iter()),
            }))
        }
        ReadRequest::Columns { query } => {
            let mut all: Option<ColumnsResult> = None;
            for answer in answers {
                let ReadAnswer::Columns(result) = answer else {
                    return Err(not_answered("columns", Some(answer)));
                };
                snapshots.push(result.snapshot);
                match &mut all {
                    None => all = Some(result),
                    Some(all) => {
                        all.truncated |= result.truncated;
                        all.rows += result.rows;
                        if all.columns.len() != result.columns.len() {
                            return Err(not_answered("the same columns", None));
                        }
                        for (column, more) in all.columns.iter_mut().zip(result.columns) {
                            column.extend(more).map_err(|why| {
                                QueryError::Store(StoreError::Unavailable(format!(
                                    "shards answered a column read differently: {why}"
                                )))
                            })?;
                        }
                    }
                }
            }
            let mut all = all.ok_or_else(|| not_answered("columns", None))?;
            if let Some(limit) = query.limit {
                all.truncate(limit);
            }
            all.snapshot = combined(snapshots.into_iter());
            Ok(ReadAnswer::Columns(all))
        }
        ReadRequest::Aggregate { .. } => {
            let mut all: Option<AggregateResult> = None;
            for answer in answers {
                let ReadAnswer::Aggregate(result) = answer else {
                    return Err(not_answered("aggregates", Some(answer)));
                };
                snapshots.push(result.snapshot);
                match &mut all {
                    None => all = Some(result),
                    Some(all) => all.merge(result).map_err(|why| {
                        QueryError::Store(StoreError::Unavailable(format!(
                            "shards answered an aggregate differently: {why}"
                        )))
                    })?,
                }
            }
            let mut all = all.ok_or_else(|| not_answered("aggregates", None))?;
            all.snapshot = combined(snapshots.into_iter());
            Ok(ReadAnswer::Aggregate(all))
        }
        ReadRequest::Count { .. } => {
            let mut total = 0;
            for answer in answers {
                let ReadAnswer::Count { count, snapshot } = answer else {
                    return Err(not_answered("a count", Some(answer)));
                };
                total += count;
                snapshots.push(snapshot);
            }
            Ok(ReadAnswer::Count {
                count: total,
                snapshot: combined(snapshots.into_iter()),
            })
        }
        ReadRequest::Get { .. } | ReadRequest::GetRaw { .. } => Err(QueryError::Invalid(
            "a read of one key is answered by its shard alone".into(),
        )),
    }
}

/// Several shards' answers at one snapshot: that snapshot, the largest age, and
/// whether any read its log stage.
fn combined(snapshots: impl Iterator<Item = SnapshotInfo>) -> SnapshotInfo {
    snapshots
        .reduce(|a, b| SnapshotInfo {
            snapshot: a.snapshot.max(b.snapshot),
            age: a.age.max(b.age),
            read_log: a.read_log || b.read_log,
        })
        .unwrap_or(SnapshotInfo {
            snapshot: 0,
            age: Duration::ZERO,
            read_log: false,
        })
}

fn replica_dir(dir: &Path, file: &TableFile, shard: u32, replica: u32) -> PathBuf {
    if file.single_directory {
        return dir.to_path_buf();
    }
    dir.join(format!("shard-{shard}-replica-{replica}"))
}

/// The replicas' directories of a new table in `dir` with `layout`, per shard.
pub(crate) fn replica_dirs(dir: &Path, layout: TableLayout) -> Vec<Vec<PathBuf>> {
    let file = TableFile {
        format: TABLE_FORMAT,
        shards: layout.shards,
        replicas: layout.replicas,
        uid: 0,
        single_directory: false,
        held: None,
    };
    (0..layout.shards)
        .map(|s| {
            (0..layout.replicas)
                .map(|r| replica_dir(dir, &file, s, r))
                .collect()
        })
        .collect()
}

/// Makes `dir` and writes the table file of a new table `entry` (current format),
/// holding the shards `held` (`None`: every shard).
pub(crate) fn write_new_table_file(
    dir: &Path,
    entry: &crate::catalog::TableEntry,
    held: Option<Vec<u32>>,
) -> Result<TableFile> {
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    let file = TableFile {
        format: TABLE_FORMAT,
        shards: entry.layout.shards,
        replicas: entry.layout.replicas,
        uid: entry.uid,
        single_directory: false,
        held,
    };
    write_table_file(dir, &file)?;
    Ok(file)
}

fn write_table_file(dir: &Path, file: &TableFile) -> Result<()> {
    let path = dir.join(TABLE_FILE);
    let bytes = serde_json::to_vec_pretty(file).expect("table file serializes");
    puffer_store::fs::write_file_atomic(&puffer_store::fs::RealFs, &path, &bytes)
        .map_err(|e| StoreError::io(&path, e))?;
    Ok(())
}

/// Converts a table whose replicas kept their own logs: each replica is opened with
/// its log (replaying it), compacted so that its segments hold everything, and closed;
/// then the table file is written in the current format, with a new uid. A crash
/// before that last write leaves the table as it was, to be converted again.
fn convert_own_logs(dir: &Path, file: TableFile, options: &ShardOptions) -> Result<TableFile> {
    for s in 0..file.shards {
        for r in 0..file.replicas {
            let shard = Shard::open(
                replica_dir(dir, &file, s, r),
                placeholder_schema()?,
                ShardOptions {
                    background: false,
                    ..options.clone()
                },
            )?;
            shard.compact_all()?;
            shard.close();
        }
    }
    let converted = TableFile {
        format: TABLE_FORMAT,
        uid: new_table_uid(),
        ..file
    };
    write_table_file(dir, &converted)?;
    Ok(converted)
}

/// Opens the replicas of one shard, fed by `committer`'s log (`schema` for a new shard).
fn open_replicas(
    dirs: &[PathBuf],
    schema: Option<&Schema>,
    options: &ShardOptions,
    committer: &Committer,
) -> Result<Vec<NewReplica<Shard>>> {
    let mut replicas = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let schema = match schema {
            Some(schema) => schema.clone(),
            None => placeholder_schema()?,
        };
        let shard = Shard::open_logged(
            dir,
            schema,
            options.clone(),
            Arc::new(RealFs),
            Arc::new(SystemClock),
            ShardLog::Fed {
                published: committer.published_counter(),
            },
        )?;
        replicas.push(NewReplica {
            replica: shard,
            memory_limit_bytes: None,
        });
    }
    Ok(replicas)
}

fn remove_dir_if_there(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(dir, e).into()),
    }
}

fn placeholder_schema() -> Result<Schema> {
    // A shard keeps its own schema; the one given at open is only used at creation.
    Ok(Schema::new("key", Vec::new())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_of_is_fnv1a_and_spreads_keys() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(
            shard_of(b"a", u32::MAX),
            (0xaf63_dc4c_8601_ec8cu64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(shard_of(b"anything", 1), 0);
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[shard_of(format!("key-{i}").as_bytes(), 4) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
