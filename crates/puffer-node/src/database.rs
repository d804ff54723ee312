//! A database: a directory of tables (`tables/<name>/`, each spread over shards with
//! replicas, see [`crate::table`]), the log that orders every SCU over all of them
//! (`log/`, see [`crate::commit`]), the adaptive node serving their replicas, and the
//! execution of statements on them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::serving::{AdaptiveNode, NodeConfig, ReplicaSlot};
use puffer_store::{
    Query, ReadOptions, Record, Schema, SearchResult, Shard, ShardOptions, SnapshotInfo, WriteOp,
};

use crate::catalog::{Catalog, FileCatalog, SegmentEntry, TableEntry, TextEntry};
use crate::commit::{CommitOptions, Committer, LogShipper};
pub use crate::layout::{check_table_name, MAX_TABLE_NAME_BYTES};
use crate::message::{ReadAnswer, ReadRequest, Wait};
use crate::message::{ReplicaRequest, SegmentFacts};
use crate::remote::{LeaderRequest, LeaderResponse, Remote, WritePart};
use crate::table::{Table, TableLayout};
use crate::texts::Texts;
use puffer_query::ast::{Output, Select, Statement};
use puffer_query::{QueryError, Result};

mod hyperspace;
mod subspaces;

/// Longest a table's creation waits for the files of a dropped table of the same name
/// to be removed (once its replicas are let go by reads in flight, layers being built).
const MAX_WAIT_FOR_DROPPED_REPLICAS: Duration = Duration::from_secs(60);

/// Most tables in one database.
pub const MAX_TABLES: usize = 1024;

/// Longest a follower waits, after the leader wrote an SCU handed on to it, to have
/// applied it too (past it, the write is still acknowledged: it is durable).
pub const MAX_WAIT_FOR_OWN_WRITE: Duration = Duration::from_secs(2);
/// Most tries of a read of a time-partitioned table, each at a newer snapshot after a
/// chunk was sealed past the one chosen.
const MAX_PARTITIONED_TRIES: usize = 8;

/// What a statement returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Records (projected), ascending by key.
    Rows {
        /// Column names, key first.
        columns: Vec<String>,
        /// The records.
        rows: Vec<Record>,
        /// Whether the limit cut the answer.
        truncated: bool,
        /// The snapshot read.
        snapshot: SnapshotInfo,
    },
    /// A table computed by the analytics engine (aggregates, joins, ordered
    /// answers): named columns, and per row one value per column (`None`: NULL).
    Computed {
        /// Column names, as the query names them.
        columns: Vec<String>,
        /// The rows, in the query's order.
        rows: Vec<Vec<Option<puffer_store::Value>>>,
        /// Whether the answer was cut at the server's largest answer.
        truncated: bool,
        /// The one snapshot every table was read at.
        snapshot: SnapshotInfo,
    },
    /// A count.
    Count {
        /// Matching records.
        count: u64,
        /// The snapshot read.
        snapshot: SnapshotInfo,
    },
    /// Records written as one SCU.
    Written {
        /// The SCU's sequence number.
        seq: u64,
        /// Operations applied.
        operations: usize,
    },
    /// A table was created.
    Created(String),
    /// A table was dropped.
    Dropped(String),
    /// Table names.
    Tables(Vec<String>),
    /// A table's schema and subspaces.
    Described {
        /// The schema.
        schema: Schema,
        /// Its subspaces, by name.
        subspaces: Vec<crate::subspace::SubspaceDescription>,
    },
}

/// The reads one shard held on this node has answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardReads {
    /// The table's name.
    pub table: String,
    /// The table's uid.
    pub uid: u64,
    /// The shard.
    pub shard: u32,
    /// Reads answered since `counting_since`.
    pub reads: u64,
    /// When this count began (ms since the Unix epoch, and a number unique in the
    /// process): a shard let go and taken on again counts from 0 anew.
    pub counting_since: (u64, u64),
    /// Bytes the shard's replicas on this node take in memory: their segments
    /// (compressed indexes at their present layers, key directories, marks); records
    /// not yet compacted into a segment are not counted.
    #[serde(default)]
    pub footprint_bytes: u64,
    /// The shard's storage-throughput curve as this node measured it (see
    /// [`AdaptiveNode::measured_curve`]): what a planner across nodes weighs more
    /// layers against more replicas by.
    #[serde(default)]
    pub curve: Vec<puffer_adapt::replication::joint::LayerCost>,
}

/// What a table is besides a table, as its catalog entry says.
#[derive(Default)]
struct TableRoles {
    partition: Option<crate::catalog::Partitioning>,
    chunk_of: Option<crate::catalog::ChunkOf>,
    subspace_of: Option<crate::subspace::SubspaceOf>,
}

/// How a database opens its tables and serves them.
#[derive(Clone, Debug, Default)]
pub struct DatabaseOptions {
    /// Options of every shard replica.
    pub shard: ShardOptions,
    /// The adaptive node: queues, workers, layer manager.
    pub node: NodeConfig,
    /// Layout of tables created without one.
    pub default_layout: TableLayout,
    /// The catalog; `None`: the file catalog of the data directory (made from the
    /// directory's tables and texts if it has none yet).
    pub catalog: Option<Arc<dyn Catalog>>,
    /// Where SCUs are shipped before they are logged here (a cluster's ingest node).
    pub shipper: Option<Arc<dyn LogShipper>>,
    /// Whether SCUs come only from [`Database::follow`] (a cluster's data node): the
    /// database then takes no writes and no table changes of its own, and makes the
    /// tables its catalog lists but its directory lacks.
    pub following: bool,
    /// Where a cluster node reads when it holds no data, and sends writes and table
    /// changes while it follows; `None` (a single node): it does all itself.
    pub remote: Option<Arc<dyn Remote>>,
    /// How tables are profiled and their subspaces chosen.
    pub hyperspace: crate::hyperspace::HyperspaceOptions,
}

/// The tables of a data directory.
pub struct Database {
    dir: PathBuf,
    options: DatabaseOptions,
    node: AdaptiveNode<Shard>,
    committer: Arc<Committer>,
    catalog: Arc<dyn Catalog>,
    texts: Texts,
    tables: Arc<Tables>,
    registry: Arc<Registry>,
    registry_thread: Mutex<Option<JoinHandle<()>>>,
    /// Orders writes of one key of a table with subspaces, and writes against adding
    /// or dropping a subspace.
    key_locks: crate::subspace::KeyLocks,
    /// Profiles and the configurator's state (choosing subspaces).
    tuning: hyperspace::Tuning,
    /// Directories of dropped tables and their replicas: removed once no replica is
    /// held any more.
    dropping: Mutex<Vec<DroppedFiles>>,
}

/// A dropped table's directory and its replicas (which may still be held).
type DroppedFiles = (PathBuf, Vec<Weak<ReplicaSlot<Shard>>>);

impl Drop for Database {
    fn drop(&mut self) {
        *self.registry.stop.lock().expect("registry lock") = true;
        self.registry.wake.notify_all();
        if let Some(thread) = self.registry_thread.lock().expect("registry lock").take() {
            let _ = thread.join();
        }
        // Files of dropped tables still held are removed by the next creation of their
        // name (as a crash's leftovers are).
        let _ = self.remove_dropped_files();
    }
}

/// How often the registry thread brings the segment registry up to date.
pub const REGISTRY_INTERVAL: Duration = Duration::from_secs(1);

/// What the segment registry last recorded per (table uid, shard, replica).
#[derive(Default)]
struct Registry {
    known: Mutex<HashMap<(u64, u32, u32), Vec<SegmentFacts>>>,
    last_error: Mutex<Option<String>>,
    /// Set when the database closes; the registry thread then ends.
    stop: Mutex<bool>,
    wake: Condvar,
}

type Tables = RwLock<BTreeMap<String, Arc<Table>>>;

fn sync_registry(tables: &Tables, catalog: &dyn Catalog, registry: &Registry) -> Result<()> {
    let tables: Vec<Arc<Table>> = tables
        .read()
        .expect("tables lock")
        .values()
        .cloned()
        .collect();
    let mut known = registry.known.lock().expect("registry lock");
    for table in tables {
        for (shard, replicas) in table.table_shards().all_replicas().iter().enumerate() {
            if !replicas.is_held() {
                // Let go of here: its segments are no longer listed for this node.
                let gone: Vec<_> = known
                    .keys()
                    .filter(|(uid, s, _)| *uid == table.uid() && *s == shard as u32)
                    .copied()
                    .collect();
                for key in gone {
                    match catalog.set_segments(key.0, key.1, key.2, &[]) {
                        Ok(()) | Err(QueryError::UnknownTable(_)) => {
                            known.remove(&key);
                        }
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            for replica in 0..replicas.replica_count() {
                let facts = replicas
                    .send_to(replica, ReplicaRequest::Segments)?
                    .into_segments()?;
                let key = (table.uid(), shard as u32, replica);
                if known.get(&key) == Some(&facts) {
                    continue;
                }
                let entries: Vec<SegmentEntry> = facts
                    .iter()
                    .map(|f| SegmentEntry {
                        table_uid: table.uid(),
                        shard: shard as u32,
                        replica,
                        segment: f.segment,
                        records: f.records,
                        file_bytes: f.file_bytes,
                    })
                    .collect();
                match catalog.set_segments(table.uid(), shard as u32, replica, &entries) {
                    Ok(()) => {
                        known.insert(key, facts);
                    }
                    // Dropped meanwhile.
                    Err(QueryError::UnknownTable(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// The registry thread: brings the registry up to date every interval until the
/// database closes.
fn run_registry(tables: Arc<Tables>, catalog: Arc<dyn Catalog>, registry: Arc<Registry>) {
    loop {
        {
            let stop = registry.stop.lock().expect("registry lock");
            let (stop, _) = registry
                .wake
                .wait_timeout_while(stop, REGISTRY_INTERVAL, |stop| !*stop)
                .expect("registry lock");
            if *stop {
                return;
            }
        }
        let outcome = sync_registry(&tables, catalog.as_ref(), &registry);
        *registry.last_error.lock().expect("registry lock") = outcome.err().map(|e| e.to_string());
    }
}

/// Where a data directory keeps its text files' indexes.
pub const TEXTS_DIR: &str = "texts";

/// The text indexes in `dir` (`<name>.pidx`), for a catalog made from a data directory
/// that had none.
fn existing_texts(dir: &Path) -> Result<Vec<TextEntry>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(puffer_store::StoreError::io(dir, e).into()),
    };
    let mut texts = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| puffer_store::StoreError::io(dir, e))?
            .path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".pidx"))
        else {
            continue;
        };
        if check_table_name(name).is_err() {
            continue;
        }
        let index = puffer_index::TextIndex::open(&path).map_err(puffer_store::StoreError::from)?;
        let index_bytes = std::fs::metadata(&path)
            .map_err(|e| puffer_store::StoreError::io(&path, e))?
            .len();
        texts.push(TextEntry {
            name: name.to_string(),
            text_bytes: index.text_len(),
            index_bytes,
        });
    }
    Ok(texts)
}

impl Database {
    /// Opens the database in `dir` (created if missing) with default serving options.
    pub fn open(dir: impl AsRef<Path>, shard: ShardOptions) -> Result<Database> {
        Database::open_with(
            dir,
            DatabaseOptions {
                shard,
                ..DatabaseOptions::default()
            },
        )
    }

    /// Opens the database in `dir` (created if missing), opening every table.
    pub fn open_with(dir: impl AsRef<Path>, options: DatabaseOptions) -> Result<Database> {
        options.default_layout.validate()?;
        let hyperspace_options = options.hyperspace.clone();
        let node = AdaptiveNode::start(options.node.clone())?;
        let dir = dir.as_ref().to_path_buf();
        let committer = Arc::new(Committer::new(
            &dir.join("log"),
            CommitOptions {
                queue_len: options.shard.write_queue_len,
                max_ops_per_scu: options.shard.max_ops_per_scu,
            },
        ));
        if let Some(shipper) = &options.shipper {
            committer.attach_shipper(shipper.clone());
        }
        committer.set_following(options.following);
        let tables_dir = dir.join("tables");
        std::fs::create_dir_all(&tables_dir)
            .map_err(|e| puffer_store::StoreError::io(&tables_dir, e))?;
        let given = match &options.catalog {
            Some(catalog) => Some(catalog.clone()),
            None => FileCatalog::open(&dir)?.map(|c| Arc::new(c) as Arc<dyn Catalog>),
        };
        let mut tables = BTreeMap::new();
        let catalog = match given {
            Some(catalog) => {
                for entry in catalog.tables()? {
                    let path = tables_dir.join(&entry.name);
                    let opened = Table::open(
                        &node,
                        &committer,
                        &path,
                        &entry.name,
                        &options.shard,
                        Some(&entry.schema),
                    )?
                    .filter(|table| table.uid() == entry.uid)
                    .map(|table| table.with_roles(&entry));
                    let opened = match opened {
                        // A follower makes what the shared catalog lists; its SCUs
                        // come from the cluster's log.
                        None if options.following => Some(adopt(
                            &node,
                            &committer,
                            &tables_dir,
                            &entry,
                            &options.shard,
                        )?),
                        other => other,
                    };
                    let table = opened.ok_or_else(|| {
                        puffer_store::StoreError::corrupt(
                            &path,
                            format!(
                                "the catalog lists table {:?} with uid {}, which this \
                                     directory does not hold",
                                entry.name, entry.uid
                            ),
                        )
                    })?;
                    tables.insert(entry.name, Arc::new(table));
                }
                catalog
            }
            // A data directory from before catalogs: its tables are the finished ones
            // in `tables/`, its texts the indexes in `texts/`.
            None => {
                let entries = std::fs::read_dir(&tables_dir)
                    .map_err(|e| puffer_store::StoreError::io(&tables_dir, e))?;
                for entry in entries {
                    let entry = entry.map_err(|e| puffer_store::StoreError::io(&tables_dir, e))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if check_table_name(&name).is_err() {
                        continue; // not a table
                    }
                    // `None`: a creation that never finished.
                    let opened = Table::open(
                        &node,
                        &committer,
                        &entry.path(),
                        &name,
                        &options.shard,
                        None,
                    )?;
                    if let Some(table) = opened {
                        tables.insert(name, Arc::new(table));
                    }
                }
                let listed: Vec<TableEntry> = tables.values().map(|t| t.entry()).collect();
                let texts = existing_texts(&dir.join(TEXTS_DIR))?;
                Arc::new(FileCatalog::create_listing(
                    &dir,
                    Arc::new(puffer_store::fs::RealFs),
                    &listed,
                    &texts,
                )?)
            }
        };
        let texts = Texts::open(&dir.join(TEXTS_DIR), catalog.clone())?;
        committer.attach_catalog(catalog.clone());
        // Every table is registered: the log replays what their replicas lack.
        committer.start()?;
        // A schema change applied just before a crash may not have reached the catalog.
        for table in tables.values() {
            let schema = table.schema();
            if catalog.table(table.name())?.map(|e| e.schema) != Some((*schema).clone()) {
                catalog.set_schema(table.name(), table.uid(), &schema)?;
            }
        }
        let tables = Arc::new(RwLock::new(tables));
        let registry = Arc::new(Registry::default());
        sync_registry(&tables, catalog.as_ref(), &registry)?;
        let registry_thread = {
            let (tables, catalog, registry) = (tables.clone(), catalog.clone(), registry.clone());
            std::thread::Builder::new()
                .name("puffer-registry".into())
                .spawn(move || run_registry(tables, catalog, registry))
                .map_err(|e| puffer_store::StoreError::io(&dir, e))?
        };
        let database = Database {
            dir,
            options,
            node,
            committer,
            catalog,
            texts,
            tables,
            registry,
            registry_thread: Mutex::new(Some(registry_thread)),
            key_locks: Default::default(),
            tuning: hyperspace::Tuning::new(hyperspace_options),
            dropping: Mutex::new(Vec::new()),
        };
        database.drop_unfinished_subspaces()?;
        Ok(database)
    }

    /// The text files.
    pub fn texts(&self) -> &Texts {
        &self.texts
    }

    /// The catalog: tables, texts, and the registry of every replica's segments.
    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    /// Records every replica's segments in the catalog's registry where they changed
    /// since the last time. Runs at open, then every [`REGISTRY_INTERVAL`] on the
    /// database's registry thread (compactions replace segments in the background).
    pub fn sync_segment_registry(&self) -> Result<()> {
        sync_registry(&self.tables, self.catalog.as_ref(), &self.registry)
    }

    /// Why the last registry update failed, if it did (it is retried every interval).
    pub fn registry_error(&self) -> Option<String> {
        self.registry
            .last_error
            .lock()
            .expect("registry lock")
            .clone()
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Table names, ascending.
    pub fn table_names(&self) -> Vec<String> {
        self.tables
            .read()
            .expect("tables lock")
            .keys()
            .cloned()
            .collect()
    }

    /// Every open table, by name (a copy of the list: no lock is held while it is used).
    pub(crate) fn all_tables(&self) -> Vec<Arc<Table>> {
        self.tables
            .read()
            .expect("tables lock")
            .values()
            .cloned()
            .collect()
    }

    /// Every shard held here and the reads it has answered: what a cluster's
    /// coordinator collects as access counts.
    pub fn shard_reads(&self) -> Vec<ShardReads> {
        let mut counts = Vec::new();
        for table in self.all_tables() {
            for group in table.held_groups() {
                counts.push(ShardReads {
                    table: table.name().to_string(),
                    uid: table.uid(),
                    shard: group.shard,
                    reads: group.reads(),
                    counting_since: group.counting_since(),
                    footprint_bytes: group.footprint_bytes(),
                    curve: self.node.measured_curve(&group),
                });
            }
        }
        counts
    }

    /// Sets the layers of every replica of shard `shard` of `table` held here, as a
    /// planner across nodes chose (`Some`: pinned there, the layer manager leaves them),
    /// or hands them back to the layer manager (`None`). Returns whether the shard is
    /// held here.
    pub fn plan_layers(&self, table: &str, shard: u32, layers: Option<u32>) -> Result<bool> {
        let Some(group) = self.node.group(table, shard) else {
            return Ok(false);
        };
        for slot in group.replicas() {
            match layers {
                Some(layers) => {
                    self.node.set_layers(slot.id, layers)?;
                }
                None => self.node.unpin(slot.id)?,
            }
        }
        Ok(true)
    }

    /// The adaptive node serving the tables' replicas.
    pub fn node(&self) -> &AdaptiveNode<Shard> {
        &self.node
    }

    /// A table.
    ///
    /// A node that follows a shared catalog and lacks the table looks in the catalog
    /// once before it answers that it is unknown: a table just made through another
    /// node is usable here at once, not only after the next periodic sync.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        let known = || {
            self.tables
                .read()
                .expect("tables lock")
                .get(name)
                .cloned()
                .ok_or_else(|| QueryError::UnknownTable(name.to_string()))
        };
        match known() {
            Err(QueryError::UnknownTable(_)) if self.options.following => {
                self.sync_tables()?;
                known()
            }
            answer => answer,
        }
    }

    /// Creates a table with the default layout.
    pub fn create_table(&self, name: &str, schema: Schema) -> Result<()> {
        self.create_table_with(name, schema, self.options.default_layout)
    }

    /// Creates a table with `layout` shards and replicas (on a cluster node that
    /// follows, by the leader; the table is here when this returns).
    pub fn create_table_with(&self, name: &str, schema: Schema, layout: TableLayout) -> Result<()> {
        self.create_table_partitioned(name, schema, layout, None)
    }

    /// Creates a table, time-partitioned by `partition` if given (see
    /// [`crate::partition`]; `layout` is then each chunk's).
    pub fn create_table_partitioned(
        &self,
        name: &str,
        schema: Schema,
        layout: TableLayout,
        partition: Option<puffer_query::TimePartition>,
    ) -> Result<()> {
        check_table_name(name)?;
        layout.validate()?;
        if let Some(partition) = &partition {
            crate::partition::validate(name, &schema, partition)?;
        }
        if let Some(remote) = self.handing_on() {
            remote.lead(LeaderRequest::CreateTable {
                name: name.to_string(),
                schema,
                layout: Some(layout),
                partition,
            })?;
            return self.sync_tables();
        }
        match partition {
            None => self.create_table_here(name, schema, layout, TableRoles::default()),
            Some(time) => {
                let partitioning = crate::catalog::Partitioning {
                    attribute: time.attribute,
                    granularity: time.granularity,
                    chunk_layout: layout,
                };
                // The table itself holds no record: one shard, for its schema.
                self.create_table_here(
                    name,
                    schema,
                    TableLayout::default(),
                    TableRoles {
                        partition: Some(partitioning),
                        ..TableRoles::default()
                    },
                )
            }
        }
    }

    fn create_table_here(
        &self,
        name: &str,
        schema: Schema,
        layout: TableLayout,
        roles: TableRoles,
    ) -> Result<()> {
        self.check_not_following("create a table")?;
        check_table_name(name)?;
        layout.validate()?;
        let mut tables = self.tables.write().expect("tables lock");
        if tables.contains_key(name) {
            return Err(QueryError::TableExists(name.to_string()));
        }
        if tables.len() >= MAX_TABLES {
            return Err(QueryError::Limit(format!(
                "a database holds at most {MAX_TABLES} tables"
            )));
        }
        let path = self.dir.join("tables").join(name);
        self.wait_for_dropped_files(&path)?;
        if path.exists() {
            // Left by a creation that never finished (no manifest): start over.
            std::fs::remove_dir_all(&path).map_err(|e| puffer_store::StoreError::io(&path, e))?;
        }
        let entry = TableEntry {
            name: name.to_string(),
            uid: crate::table::new_table_uid(),
            layout,
            schema,
            partition: roles.partition,
            chunk_of: roles.chunk_of,
            subspace_of: roles.subspace_of,
        };
        let table = Table::create(
            &self.node,
            &self.committer,
            &path,
            &entry,
            &self.options.shard,
        )?;
        // The catalog entry is the commit point: until it is written, the table's
        // directories are the leftovers of a creation that never finished.
        if let Err(e) = self.catalog.create_table(&table.entry()) {
            self.committer.unregister(table.uid());
            self.node.remove_table(name);
            drop(table);
            let _ = std::fs::remove_dir_all(&path);
            return Err(e);
        }
        tables.insert(name.to_string(), Arc::new(table));
        Ok(())
    }

    /// Drops a table and deletes its data (on a cluster node that follows, by the
    /// leader; the table is gone here when this returns).
    pub fn drop_table(&self, name: &str) -> Result<()> {
        if let Some(remote) = self.handing_on() {
            self.table(name)?;
            remote.lead(LeaderRequest::DropTable {
                name: name.to_string(),
            })?;
            return self.sync_tables();
        }
        self.drop_table_here(name)
    }

    fn drop_table_here(&self, name: &str) -> Result<()> {
        self.check_not_following("drop a table")?;
        // A time-partitioned table's chunks and a table's subspaces go first: a drop
        // cut short leaves the table with fewer, and dropping it again finishes.
        // (By name: a drop waits for every holder of the table to let go.)
        let names = |tables: Vec<Arc<Table>>| -> Vec<String> {
            tables.iter().map(|t| t.name().to_string()).collect()
        };
        for chunk in names(self.chunks_of(name).into_iter().map(|(_, c)| c).collect()) {
            self.drop_table_here(&chunk)?;
        }
        if !self.subspaces_of(name).is_empty() {
            let _alone = self
                .key_locks
                .configuration
                .write()
                .expect("subspace configuration lock");
            for subspace in names(self.subspaces_of(name)) {
                self.drop_table_here(&subspace)?;
            }
        }
        let table = {
            let mut tables = self.tables.write().expect("tables lock");
            if !tables.contains_key(name) {
                return Err(QueryError::UnknownTable(name.to_string()));
            }
            // The commit point: once the entry is gone, so is the table, whatever
            // happens to its directories below.
            self.catalog.drop_table(name)?;
            tables.remove(name).expect("checked above")
        };
        self.committer.unregister(table.uid());
        self.node.remove_table(name);
        let replicas: Vec<Weak<ReplicaSlot<Shard>>> = table
            .held_groups()
            .iter()
            .flat_map(|group| group.replicas().iter().map(Arc::downgrade))
            .collect();
        // Stops its replicas' threads once the last query holding the table ends.
        drop(table);
        // Its files go once nothing can write them any more (a read or a layer being
        // built may still hold a replica): now, or when the last holder lets go.
        self.dropping
            .lock()
            .expect("dropping lock")
            .push((self.dir.join("tables").join(name), replicas));
        self.remove_dropped_files()
    }

    /// Removes the files of dropped tables whose replicas nobody holds any more.
    fn remove_dropped_files(&self) -> Result<()> {
        let mut dropping = self.dropping.lock().expect("dropping lock");
        let mut result = Ok(());
        dropping.retain(|(path, replicas)| {
            if replicas.iter().any(|r| r.strong_count() > 0) {
                return true;
            }
            if let Err(e) = std::fs::remove_dir_all(path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    result = Err(puffer_store::StoreError::io(path, e).into());
                }
            }
            false
        });
        result
    }

    /// Waits (a bounded time) until no dropped table's files wait for removal at `path`:
    /// a table made again under a dropped one's name must not find the old one's files
    /// appearing in its directory.
    fn wait_for_dropped_files(&self, path: &Path) -> Result<()> {
        let deadline = std::time::Instant::now() + MAX_WAIT_FOR_DROPPED_REPLICAS;
        loop {
            self.remove_dropped_files()?;
            let pending = self
                .dropping
                .lock()
                .expect("dropping lock")
                .iter()
                .any(|(p, _)| p == path);
            if !pending {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(QueryError::Store(puffer_store::StoreError::Unavailable(
                    format!(
                        "a table dropped under this name is still in use after {} s (a read or a \
                     handle holds it); try again once it is let go",
                        MAX_WAIT_FOR_DROPPED_REPLICAS.as_secs()
                    ),
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The remote to hand writes and table changes to: set, and this node follows.
    fn handing_on(&self) -> Option<&Arc<dyn Remote>> {
        self.options
            .remote
            .as_ref()
            .filter(|_| self.committer.is_following())
    }

    /// Does what only the leader does, here, never handing it on: a node that
    /// follows refuses it (retryably), so a request handed on crosses one hop at most.
    pub fn lead(&self, request: LeaderRequest) -> Result<LeaderResponse> {
        match request {
            LeaderRequest::Write { parts } => {
                let mut resolved = Vec::with_capacity(parts.len());
                for part in parts {
                    let table = self.table(&part.table)?;
                    if table.uid() != part.uid {
                        return Err(QueryError::UnknownTable(format!(
                            "{} with uid {} (it was dropped; the table of that name now \
                             has uid {})",
                            part.table,
                            part.uid,
                            table.uid()
                        )));
                    }
                    resolved.push((table, part.ops));
                }
                let seq = self.write_here(resolved)?;
                Ok(LeaderResponse::Written { seq })
            }
            LeaderRequest::CreateTable {
                name,
                schema,
                layout,
                partition,
            } => {
                let layout = layout.unwrap_or(self.options.default_layout);
                self.create_table_partitioned(&name, schema, layout, partition)?;
                Ok(LeaderResponse::Done)
            }
            LeaderRequest::DropTable { name } => {
                self.drop_table_here(&name)?;
                Ok(LeaderResponse::Done)
            }
            LeaderRequest::AddSubspace {
                table,
                attributes,
                regions,
            } => {
                self.check_not_following("add a subspace")?;
                let name = self.add_subspace(&table, &attributes, regions)?;
                Ok(LeaderResponse::SubspaceAdded { name })
            }
            LeaderRequest::DropSubspace { table, name } => {
                self.check_not_following("drop a subspace")?;
                self.drop_subspace(&table, &name)?;
                Ok(LeaderResponse::Done)
            }
            LeaderRequest::Searches {
                table,
                uid,
                searches,
            } => {
                self.check_not_following("take searches served elsewhere")?;
                self.take_served_searches(&table, uid, &searches)?;
                Ok(LeaderResponse::Done)
            }
            LeaderRequest::FreshnessFloor { bound } => {
                self.check_not_following("tell which SCUs were acknowledged when")?;
                Ok(LeaderResponse::FreshnessFloor {
                    seq: self.committer.freshness_floor(bound),
                })
            }
        }
    }

    fn check_not_following(&self, what: &str) -> Result<()> {
        if self.committer.is_following() {
            return Err(puffer_store::StoreError::Unavailable(format!(
                "this node follows the cluster's log and cannot {what}; ask the ingest leader"
            ))
            .into());
        }
        Ok(())
    }

    /// Whether SCUs come only from [`Database::follow`].
    pub fn is_following(&self) -> bool {
        self.committer.is_following()
    }

    /// Takes SCUs only from [`Database::follow`] (`true`), or numbers its own: a node
    /// that becomes the ingest leader follows until it has caught up, then switches.
    pub fn set_following(&self, following: bool) {
        self.committer.set_following(following);
    }

    /// Whether writes stopped because shipping SCUs had an unknown outcome (see
    /// [`Database::resume_writes`]).
    pub fn ship_stopped(&self) -> bool {
        self.committer.ship_stopped()
    }

    /// After a stop by a shipping failure, while following: takes SCUs again,
    /// numbering from the published one (catch up with the shipped log next).
    pub fn resume_writes(&self) -> Result<u64> {
        self.committer.resume()
    }

    /// Logs, applies and publishes SCUs numbered elsewhere (the cluster's log); call
    /// [`Database::sync_tables`] first, so that every table they touch is here.
    /// Returns the published SCU after.
    pub fn follow(&self, records: Vec<u8>) -> Result<u64> {
        self.committer.follow(records)
    }

    /// Makes the local tables those of the catalog: tables it lists that are not here
    /// are made (empty, to be filled by followed SCUs), tables here that it no longer
    /// lists (or lists with another uid) are dropped locally. For followers of a
    /// shared catalog.
    pub fn sync_tables(&self) -> Result<()> {
        let listed = self.catalog.tables()?;
        let mut tables = self.tables.write().expect("tables lock");
        let gone: Vec<String> = tables
            .iter()
            .filter(|(name, table)| {
                !listed
                    .iter()
                    .any(|e| &e.name == *name && e.uid == table.uid())
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            let table = tables.remove(&name).expect("listed above");
            self.committer.unregister(table.uid());
            self.node.remove_table(&name);
            drop(table);
            let path = self.dir.join("tables").join(&name);
            std::fs::remove_dir_all(&path).map_err(|e| puffer_store::StoreError::io(&path, e))?;
        }
        let tables_dir = self.dir.join("tables");
        for entry in listed {
            if let Some(here) = tables.get(&entry.name) {
                // A subspace built since: ready here too (the catalog is the switch).
                if let (Some(listed), Some(held)) = (&entry.subspace_of, here.subspace_of()) {
                    if listed.ready && !held.ready {
                        here.set_subspace_ready(listed.ready_at);
                    }
                }
                continue;
            }
            let table = adopt(
                &self.node,
                &self.committer,
                &tables_dir,
                &entry,
                &self.options.shard,
            )?;
            tables.insert(entry.name.clone(), Arc::new(table));
        }
        Ok(())
    }

    /// The newest snapshot: every SCU up to it is applied on every replica it touches.
    pub fn published(&self) -> u64 {
        self.committer.published()
    }

    /// Tells this node's follower that a reader waits for snapshot `seq` (see
    /// [`Committer::want_published`](crate::commit::Committer::want_published)).
    pub fn want_published(&self, seq: u64) {
        self.committer.want_published(seq);
    }

    /// Waits until snapshot `seq` is published here, at most `bound`, woken by the
    /// publication; whether it is (see
    /// [`Committer::wait_published`](crate::commit::Committer::wait_published)).
    pub fn wait_published(&self, seq: u64, bound: std::time::Duration) -> bool {
        self.committer.wait_published(seq, bound)
    }

    /// A follower's wait between rounds (see
    /// [`Committer::await_wanted`](crate::commit::Committer::await_wanted)).
    pub fn await_wanted(&self, seen: u64, timeout: std::time::Duration) -> u64 {
        self.committer.await_wanted(seen, timeout)
    }

    /// Writes one SCU over several tables: every table's operations, all applied or
    /// none, on every shard and replica, visible to reads at one snapshot. A table
    /// named twice has its operations joined in the order given. On a cluster node
    /// that follows, the leader writes it; this node then waits (a bounded time) until
    /// it has applied it too, so that its own reads see it.
    pub fn write_batch(&self, parts: Vec<(String, Vec<WriteOp>)>) -> Result<u64> {
        let mut joined: Vec<(Arc<Table>, Vec<WriteOp>)> = Vec::new();
        for (name, ops) in parts {
            let table = self.table(&name)?;
            match joined.iter_mut().find(|(t, _)| t.uid() == table.uid()) {
                Some((_, existing)) => existing.extend(ops),
                None => joined.push((table, ops)),
            }
        }
        let Some(remote) = self.handing_on() else {
            return self.write_here(joined);
        };
        let parts = joined
            .into_iter()
            .map(|(table, ops)| WritePart {
                table: table.name().to_string(),
                uid: table.uid(),
                ops,
            })
            .collect();
        let seq = match remote.lead(LeaderRequest::Write { parts })? {
            LeaderResponse::Written { seq } => seq,
            other => {
                return Err(QueryError::Store(puffer_store::StoreError::Unavailable(
                    format!("the leader answered a write with {other:?}"),
                )))
            }
        };
        if !remote.reads_elsewhere() {
            self.committer.wait_published(seq, MAX_WAIT_FOR_OWN_WRITE);
        }
        Ok(seq)
    }

    fn write_here(&self, joined: Vec<(Arc<Table>, Vec<WriteOp>)>) -> Result<u64> {
        let _configuration = self
            .key_locks
            .configuration
            .read()
            .expect("subspace configuration lock");
        let joined = self.routed_to_chunks(joined)?;
        // Held until the SCU is published: the next write of these keys reads its result.
        let (joined, _keys) = self.routed_to_subspaces(joined)?;
        let parts = joined
            .into_iter()
            .map(|(table, ops)| (table.table_shards().clone(), ops))
            .collect();
        self.committer.write(parts)
    }

    /// The chunks of time-partitioned table `table` here, by start (none for any other).
    pub fn chunks_of(&self, table: &str) -> Vec<(i64, Arc<Table>)> {
        let mut chunks: Vec<(i64, Arc<Table>)> = self
            .tables
            .read()
            .expect("tables lock")
            .values()
            .filter_map(|t| {
                let of = t.chunk_of()?;
                (of.table == table).then(|| (of.start_micros, t.clone()))
            })
            .collect();
        chunks.sort_by_key(|(start, _)| *start);
        chunks
    }

    /// A write's parts with every time-partitioned table's operations moved to its
    /// chunks (made first where missing): a put to the chunk of its timestamp, a delete
    /// to every chunk, a schema change to the table and every chunk.
    fn routed_to_chunks(
        &self,
        joined: Vec<(Arc<Table>, Vec<WriteOp>)>,
    ) -> Result<Vec<(Arc<Table>, Vec<WriteOp>)>> {
        let mut out: Vec<(Arc<Table>, Vec<WriteOp>)> = Vec::new();
        for (table, ops) in joined {
            if let Some(parent) = table.chunk_of() {
                return Err(QueryError::Invalid(format!(
                    "{} is a time chunk of table {}: write to {} instead",
                    table.name(),
                    parent.table,
                    parent.table
                )));
            }
            let Some(partitioning) = table.partition().cloned() else {
                out.push((table, ops));
                continue;
            };
            // Per chunk start, its operations in the order given.
            let mut by_chunk: BTreeMap<i64, Vec<WriteOp>> = self
                .chunks_of(table.name())
                .into_iter()
                .map(|(start, _)| (start, Vec::new()))
                .collect();
            let mut schema_changes: Vec<WriteOp> = Vec::new();
            let time_id = table.schema().id_of(&partitioning.attribute);
            for op in ops {
                let stamp = match &op {
                    WriteOp::Put(record) => {
                        Some((&record.key, record.values.get(&partitioning.attribute)))
                    }
                    WriteOp::PutFields(record) => {
                        Some((&record.key, time_id.and_then(|id| record.get(id))))
                    }
                    _ => None,
                };
                if let Some((key, stamp)) = stamp {
                    let Some(puffer_store::Value::Timestamp(micros)) = stamp else {
                        return Err(QueryError::Invalid(format!(
                            "record {:?} of time-partitioned table {} has no timestamp {:?}",
                            String::from_utf8_lossy(key),
                            table.name(),
                            partitioning.attribute
                        )));
                    };
                    let start = crate::partition::chunk_start(partitioning.granularity, *micros)?;
                    by_chunk
                        .entry(start)
                        .or_insert_with(|| schema_changes.clone())
                        .push(op);
                    continue;
                }
                match op {
                    // Routed to their chunk above.
                    WriteOp::Put(_) | WriteOp::PutFields(_) => {}
                    WriteOp::Delete(key) => {
                        for chunk_ops in by_chunk.values_mut() {
                            chunk_ops.push(WriteOp::Delete(key.clone()));
                        }
                    }
                    WriteOp::AddAttribute(attribute) => {
                        let change = WriteOp::AddAttribute(attribute);
                        for chunk_ops in by_chunk.values_mut() {
                            chunk_ops.push(change.clone());
                        }
                        schema_changes.push(change);
                    }
                }
            }
            if by_chunk.len() > crate::partition::MAX_CHUNKS {
                return Err(QueryError::Limit(format!(
                    "table {} would have {} time chunks; at most {} (choose a longer granularity)",
                    table.name(),
                    by_chunk.len(),
                    crate::partition::MAX_CHUNKS
                )));
            }
            for (start, chunk_ops) in by_chunk {
                if chunk_ops.is_empty() {
                    continue;
                }
                let chunk = self.chunk(&table, &partitioning, start)?;
                out.push((chunk, chunk_ops));
            }
            if !schema_changes.is_empty() {
                out.push((table, schema_changes));
            }
        }
        Ok(out)
    }

    /// The chunk of `table` starting at `start`, made (with the table's schema) if it
    /// is not there yet.
    fn chunk(
        &self,
        table: &Table,
        partitioning: &crate::catalog::Partitioning,
        start: i64,
    ) -> Result<Arc<Table>> {
        let name = crate::partition::chunk_name(table.name(), partitioning.granularity, start);
        if let Ok(chunk) = self.table(&name) {
            return Ok(chunk);
        }
        let chunk_of = crate::catalog::ChunkOf {
            table: table.name().to_string(),
            start_micros: start,
        };
        match self.create_table_here(
            &name,
            (*table.schema()).clone(),
            partitioning.chunk_layout,
            TableRoles {
                chunk_of: Some(chunk_of),
                ..TableRoles::default()
            },
        ) {
            // Made meanwhile by another write: it is as good.
            Ok(()) | Err(QueryError::TableExists(_)) => {}
            Err(e) => return Err(e),
        }
        let chunk = self.table(&name)?;
        if chunk.chunk_of().map(|c| c.table.as_str()) != Some(table.name()) {
            return Err(QueryError::Invalid(format!(
                "table {name} exists and is not a time chunk of {}; rename it to write to {} at that time",
                table.name(),
                table.name()
            )));
        }
        Ok(chunk)
    }

    /// A read of time-partitioned table `table`: a get from the newest chunk holding
    /// the key, a search or count over the chunks its time condition can match; every
    /// chunk at the snapshot the first one read. The table itself (empty) answers when
    /// no chunk is read.
    ///
    /// Chunks are read newest first: the newest is usually the one written last, so
    /// its snapshot is one the older chunks can still be read at. A chunk sealed past
    /// the snapshot chosen (written to since, or compacted) starts the read over at
    /// its sealed SCU or later, a bounded number of times.
    fn read_partitioned(
        &self,
        table: &Table,
        partitioning: &crate::catalog::Partitioning,
        request: &ReadRequest,
    ) -> Result<ReadAnswer> {
        if self.options.following {
            // The leader makes chunks; a node of a shared catalog learns of one made
            // since its last look only there, and a read must not miss it.
            self.sync_tables()?;
        }
        let chunks = self.chunks_of(table.name());
        let mut request = request.clone();
        let mut tries = 0;
        loop {
            match self.read_chunks(table, partitioning, &chunks, &request) {
                // (A snapshot the caller chose stays: the error goes back to it.)
                Err(QueryError::Store(puffer_store::StoreError::SnapshotGone {
                    sealed, ..
                })) if tries + 1 < MAX_PARTITIONED_TRIES && request.read_options().at.is_none() => {
                    tries += 1;
                    request = request.at_least(sealed);
                }
                answer => return answer,
            }
        }
    }

    /// One try of [`Database::read_partitioned`] over `chunks` (oldest first).
    fn read_chunks(
        &self,
        table: &Table,
        partitioning: &crate::catalog::Partitioning,
        chunks: &[(i64, Arc<Table>)],
        request: &ReadRequest,
    ) -> Result<ReadAnswer> {
        let mut snapshot: Option<u64> = None;
        let mut read = |table: &Table, request: &ReadRequest| -> Result<ReadAnswer> {
            let request = match snapshot {
                Some(at) => request.at(at),
                None => request.clone(),
            };
            let answer = self
                .read_one(table, &request, Wait::Allowed)?
                .ok_or_else(|| {
                    QueryError::Store(puffer_store::StoreError::Unavailable(
                        "a read allowed to wait for a replica got no answer".into(),
                    ))
                })?;
            snapshot.get_or_insert(answer.snapshot().snapshot);
            Ok(answer)
        };
        let predicate = match request.predicate() {
            Some(predicate) => predicate,
            // A read of one key: the newest chunk holding it answers.
            None => {
                let mut newest_miss = None;
                for (_, chunk) in chunks.iter().rev() {
                    let answer = read(chunk, request)?;
                    let found = match &answer {
                        ReadAnswer::Record { record, .. } => record.is_some(),
                        ReadAnswer::Raw { record, .. } => record.is_some(),
                        _ => false,
                    };
                    if found {
                        return Ok(answer);
                    }
                    newest_miss.get_or_insert(answer);
                }
                return match newest_miss {
                    Some(answer) => Ok(answer),
                    None => read(table, request),
                };
            }
        };
        let range = crate::partition::time_range(predicate, &partitioning.attribute);
        let mut answers = Vec::new();
        for (start, chunk) in chunks.iter().rev() {
            if crate::partition::overlaps(partitioning.granularity, *start, range) {
                let on_chunk = crate::partition::within_chunk(
                    predicate,
                    &partitioning.attribute,
                    partitioning.granularity,
                    *start,
                );
                answers.push(read(chunk, &request.with_predicate(on_chunk))?);
            }
        }
        // Oldest first again, as the merge has always seen them.
        answers.reverse();
        match answers.len() {
            0 => read(table, request),
            1 => Ok(answers.pop().expect("one answer")),
            _ => crate::table::merged(request, answers),
        }
    }

    /// Answers `request` on table `table` (see [`Table::read`]); on a cluster node
    /// that holds no data, from the data nodes (with [`Wait::Never`], `None`: the
    /// remote read blocks).
    pub fn read(
        &self,
        table: &str,
        request: &ReadRequest,
        wait: Wait,
    ) -> Result<Option<ReadAnswer>> {
        let here = self.table(table)?;
        if let Some(subspace) = here.subspace_of() {
            return Err(QueryError::Invalid(format!(
                "{table} is a subspace of table {}: read {} instead",
                subspace.table, subspace.table
            )));
        }
        self.profile_search(&here, request);
        if let Some((subspace, regions)) = self.subspace_route(&here, request) {
            // Several regions at once: on a thread that may wait.
            return match wait {
                Wait::Never => Ok(None),
                Wait::Allowed => self.read_regions(&subspace, request, &regions).map(Some),
            };
        }
        if let Some(partitioning) = here.partition() {
            // Several chunks, one after another: on a thread that may wait.
            return match wait {
                Wait::Never => Ok(None),
                Wait::Allowed => self
                    .read_partitioned(&here, partitioning, request)
                    .map(Some),
            };
        }
        self.read_one(&here, request, wait)
    }

    /// [`Database::read`] of one table, as it is stored.
    fn read_one(
        &self,
        here: &Table,
        request: &ReadRequest,
        wait: Wait,
    ) -> Result<Option<ReadAnswer>> {
        let elsewhere = |remote: &Arc<dyn Remote>| match wait {
            Wait::Never => Ok(None),
            Wait::Allowed => remote.read(here.name(), request).map(Some),
        };
        match &self.options.remote {
            Some(remote) if remote.reads_elsewhere() => elsewhere(remote),
            Some(remote) => {
                if here.holds_for(request) {
                    // A read at a snapshot chosen elsewhere (a time-partitioned table's
                    // later chunks) waits, a bounded time, for this follower to hold it.
                    if let Some(at) = request.read_options().at {
                        if wait == Wait::Allowed && at > self.published() {
                            self.committer.wait_published(at, MAX_WAIT_FOR_OWN_WRITE);
                        }
                    }
                    here.read(request, wait)
                } else {
                    // A data node holding only the shards placed on it reads the
                    // others where they are held.
                    elsewhere(remote)
                }
            }
            None => here.read(request, wait),
        }
    }

    /// Lets shard `shard` of table `table` go from this node (see
    /// [`Table::release_shard`]); whether it was held.
    pub fn release_shard(&self, table: &str, shard: u32) -> Result<bool> {
        self.table(table)?.release_shard(&self.node, shard)
    }

    /// Takes shard `shard` of table `table` on (see [`Table::adopt_shard`]): its files,
    /// holding every SCU touching it up to `covers`, are in the directories
    /// [`Table::prepare_adoption`] gave. Returns the SCU it was taken on at.
    pub fn adopt_shard(
        &self,
        table: &str,
        shard: u32,
        covers: u64,
        fetch: crate::table::FetchScus,
    ) -> Result<u64> {
        self.table(table)?
            .adopt_shard(&self.node, shard, covers, fetch)
    }

    /// Whether this database is a cluster node's (it has a [`Remote`]: a leader to
    /// write through, perhaps a broker to read through).
    pub fn in_cluster(&self) -> bool {
        self.options.remote.is_some()
    }

    /// The snapshot a read of several tables at once reads at, chosen from `read`'s
    /// freshness and minimum as a one-table read's is (see
    /// [`crate::commit::Committer::choose_snapshot`]), past every sealed stage of
    /// every table held here (on a cluster node that reads elsewhere: one every data
    /// node holds, [`Remote::choose_snapshot`]). Pass it as [`ReadOptions::at`] to each
    /// table's read; a [`puffer_store::StoreError::SnapshotGone`] answer means choose
    /// again, at least at the sealed snapshot it names.
    pub fn choose_snapshot(&self, read: ReadOptions) -> Result<u64> {
        // A node reading some shards elsewhere numbers SCUs as it follows the log,
        // but its data nodes are where the snapshot must be held.
        if let Some(chosen) = self
            .options
            .remote
            .as_ref()
            .and_then(|remote| remote.choose_snapshot(read))
        {
            return chosen;
        }
        self.committer.choose_snapshot(read, || {
            let mut max = 0;
            for table in self.all_tables() {
                max = max.max(table.max_sealed()?);
            }
            Ok(max)
        })
    }

    /// Runs one statement.
    pub fn execute(&self, statement: Statement) -> Result<Answer> {
        match statement {
            Statement::Select(select) => self.select(&select, Wait::Allowed)?.ok_or_else(|| {
                QueryError::Store(puffer_store::StoreError::Unavailable(
                    "a read allowed to wait for a replica got no answer".into(),
                ))
            }),
            Statement::Insert { table, records } => {
                let operations = records.len();
                let ops = records.into_iter().map(WriteOp::Put).collect();
                let seq = self.write_batch(vec![(table, ops)])?;
                Ok(Answer::Written { seq, operations })
            }
            Statement::Delete { table, keys } => {
                let operations = keys.len();
                let ops = keys.into_iter().map(WriteOp::Delete).collect();
                let seq = self.write_batch(vec![(table, ops)])?;
                Ok(Answer::Written { seq, operations })
            }
            Statement::CreateTable {
                name,
                schema,
                partition,
            } => {
                self.create_table_partitioned(
                    &name,
                    schema,
                    self.options.default_layout,
                    partition,
                )?;
                Ok(Answer::Created(name))
            }
            Statement::DropTable { name } => {
                self.drop_table(&name)?;
                Ok(Answer::Dropped(name))
            }
            Statement::ShowTables => Ok(Answer::Tables(self.table_names())),
            Statement::Describe { table } => Ok(Answer::Described {
                schema: (*self.table(&table)?.schema()).clone(),
                subspaces: self.describe_subspaces(&table),
            }),
            Statement::AddSubspace {
                table,
                attributes,
                regions,
            } => {
                let regions = regions.unwrap_or(crate::subspace::DEFAULT_REGIONS);
                self.add_subspace(&table, &attributes, regions)
                    .map(Answer::Created)
            }
            Statement::DropSubspace { table, name } => {
                self.drop_subspace(&table, &name)?;
                Ok(Answer::Dropped(name))
            }
        }
    }

    /// Runs a SELECT. With [`Wait::Never`] (a thread that must not block, such as an
    /// event loop's), `None` if it would have to wait for a replica: run it again with
    /// [`Wait::Allowed`] on a thread that may.
    pub fn select(&self, select: &Select, wait: Wait) -> Result<Option<Answer>> {
        let schema = self.table(&select.table)?.schema();
        let read = ReadOptions {
            freshness: select.freshness,
            min_snapshot: 0,
            at: None,
        };
        let projection = match &select.output {
            Output::Count => {
                let request = ReadRequest::Count {
                    predicate: select.predicate.clone(),
                    read,
                };
                return match self.read(&select.table, &request, wait)? {
                    Some(ReadAnswer::Count { count, snapshot }) => {
                        Ok(Some(Answer::Count { count, snapshot }))
                    }
                    None => Ok(None),
                    Some(other) => Err(unexpected_answer(other)),
                };
            }
            Output::All => None,
            Output::Columns(columns) => Some(
                columns
                    .iter()
                    .filter(|c| **c != schema.key)
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
        };
        let columns = match &select.output {
            Output::Columns(columns) => columns.clone(),
            _ => std::iter::once(schema.key.clone())
                .chain(schema.attributes.iter().map(|a| a.name.clone()))
                .collect(),
        };
        let query = Query {
            predicate: select.predicate.clone(),
            projection,
            limit: select.limit,
            read,
        };
        match self.read(&select.table, &ReadRequest::Search { query }, wait)? {
            Some(ReadAnswer::Rows(SearchResult {
                rows,
                truncated,
                snapshot,
            })) => Ok(Some(Answer::Rows {
                columns,
                rows,
                truncated,
                snapshot,
            })),
            None => Ok(None),
            Some(other) => Err(unexpected_answer(other)),
        }
    }
}

fn unexpected_answer(answer: ReadAnswer) -> QueryError {
    QueryError::Store(puffer_store::StoreError::Unavailable(format!(
        "a read got an answer of another kind: {answer:?}"
    )))
}

/// Makes a local copy of table `entry` of a shared catalog: its directories, empty,
/// with the catalog's uid, layout and schema (anything left under its name goes first).
fn adopt(
    node: &AdaptiveNode<Shard>,
    committer: &Arc<Committer>,
    tables_dir: &Path,
    entry: &TableEntry,
    options: &ShardOptions,
) -> Result<Table> {
    let path = tables_dir.join(&entry.name);
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| puffer_store::StoreError::io(&path, e))?;
    }
    Table::create(node, committer, &path, entry, options)
}
