//! One shard: a directory with a manifest, a write-ahead log and segments, plus the
//! in-memory stages. Writes go through one committer thread (group commit); a
//! background thread seals log tables into sorted batches and compacts them into
//! segments. Queries read one snapshot across the stages their freshness bound needs.
//!
//! Directory layout: `MANIFEST`, `wal/<first seq>.wal`, `seg-NNNNNN.{idx,meta,del-C,attr-A}`.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use puffer_index::BuildOptions;

use crate::aggregate::{index_group_counts, Aggregate, AggregateQuery, AggregateResult, Groups};
use crate::attr_layer::{AttributeDemand, AttributeRows};
use crate::clock::{Clock, SystemClock};
use crate::columns::{Column, ColumnOf, ColumnsResult, StageRead};
use crate::error::{Result, StoreError};
use crate::fs::{Fs, RealFs};
use crate::manifest::{Manifest, SegmentEntry};
use crate::memtable::MemTable;
use crate::query::{count_text, search_mem, search_text, Compiled, Predicate, Want};
use crate::record_cache::{RecordCache, RecordCacheStats};
use crate::schema::{display_key, AttrType, Attribute, Record, Schema, StoredRecord};
use crate::segment::{self, Segment};
use crate::sorted::SortedBatch;
use crate::stage::TextStage;
use crate::wal::{self, LogWriter, Op, Scu};

/// Tunables of a shard; the defaults suit a single node.
#[derive(Clone, Debug)]
pub struct ShardOptions {
    /// A log table is frozen (sealed) at this many records.
    pub log_table_max_records: usize,
    /// ... or at this many bytes of flattened text.
    pub log_table_max_bytes: usize,
    /// A non-empty log table older than this is sealed (background only).
    pub seal_interval: Duration,
    /// A lone sorted batch waits this long for company before it is compacted, so that
    /// bursts of writes are not slowed by compactions (two batches compact at once).
    pub compaction_delay: Duration,
    /// Frozen plus sorted batches allowed before writers get a back-pressure error.
    pub max_pending_batches: usize,
    /// Write requests that may wait for the committer.
    pub write_queue_len: usize,
    /// Most operations in one SCU.
    pub max_ops_per_scu: usize,
    /// Whether background threads seal and compact (tests drive them by hand).
    pub background: bool,
    /// Build options of segment indexes.
    pub index: BuildOptions,
    /// Bound of the cache of record texts extracted from segments (0: no cache). Hot
    /// records under skewed reads are then extracted once instead of on every read.
    pub record_cache_bytes: u64,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions {
            log_table_max_records: 50_000,
            log_table_max_bytes: 16 << 20,
            seal_interval: Duration::from_secs(1),
            compaction_delay: Duration::from_secs(1),
            max_pending_batches: 8,
            write_queue_len: 1024,
            max_ops_per_scu: 100_000,
            background: true,
            index: BuildOptions {
                threads: 1,
                ..BuildOptions::default()
            },
            record_cache_bytes: 4 << 20,
        }
    }
}

/// One write of an SCU, as callers give it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WriteOp {
    /// Insert or replace.
    Put(Record),
    /// Insert or replace, values by attribute id ([`Schema::id_of`]; ids are never
    /// reused, so ids resolved once stay valid while attributes are added). Spares a
    /// loader building a map of names per row and the shard looking every name up.
    PutFields(StoredRecord),
    /// Delete by key (a missing key is not an error).
    Delete(Vec<u8>),
    /// Add an attribute to the schema.
    AddAttribute(Attribute),
}

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Every SCU acknowledged more than this long ago must be visible; `None` = every
    /// acknowledged SCU (freshness 0).
    pub freshness: Option<Duration>,
    /// Read at least this snapshot (pass the last snapshot seen for monotonic reads).
    pub min_snapshot: u64,
    /// Read exactly this snapshot, chosen by whoever numbers the SCUs (the node, for a
    /// shard fed by its log): then `freshness` and `min_snapshot` were already applied
    /// in choosing it. A snapshot below what the replica has sealed meanwhile is
    /// refused with [`StoreError::SnapshotGone`] (choose again).
    pub at: Option<u64>,
}

/// Which snapshot a read saw.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// The snapshot: every SCU up to it is visible, none after it.
    pub snapshot: u64,
    /// Time since the oldest SCU not in the snapshot was acknowledged (zero if none).
    pub age: Duration,
    /// Whether the log stage was read.
    pub read_log: bool,
}

/// A search request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// Which records.
    pub predicate: Predicate,
    /// Attributes to return (`None`: all; empty: keys only).
    pub projection: Option<Vec<String>>,
    /// At most this many records (any that match; not ordered before the cut).
    pub limit: Option<usize>,
    /// Freshness.
    pub read: ReadOptions,
}

/// Most records one search returns.
pub const MAX_RESULT_ROWS: usize = 1_000_000;

/// Records found, sorted by key, and the snapshot read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Matching records (projected), ascending by key.
    pub rows: Vec<Record>,
    /// Whether the limit cut the answer.
    pub truncated: bool,
    /// The snapshot read.
    pub snapshot: SnapshotInfo,
}

/// Sequence numbers up to which each stage holds every SCU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermarks {
    /// Acknowledged and visible in the log stage.
    pub published: u64,
    /// In the sorted and compressed stages.
    pub sorted: u64,
    /// In the compressed stage (the manifest's checkpoint).
    pub compressed: u64,
}

/// Sizes of a shard, for benchmarks and the adaptivity layer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardStats {
    /// Bytes of all files in the shard directory.
    pub disk_bytes: u64,
    /// Bytes resident for serving (indexes, directories, in-memory stages).
    pub memory_bytes: u64,
    /// Bytes of the segments' key directories.
    pub key_directory_bytes: u64,
    /// Records in segments (deleted ones included).
    pub segment_records: u64,
    /// Segments, sorted batches, log tables.
    pub segments: usize,
    /// Sorted batches.
    pub sorted_batches: usize,
    /// Log tables (active and frozen).
    pub log_tables: usize,
    /// The record cache (all zero when it is off); its bytes count in `memory_bytes`.
    pub record_cache: RecordCacheStats,
    /// Rows that attribute predicates found in the segments since the shard opened
    /// (walked and from layers, over all attributes): the candidates searches read.
    #[serde(default)]
    pub rows_found: u64,
}

/// A record as found, before it is decoded.
enum Visible<'s> {
    /// A log table's (already parsed) record.
    Log(StoredRecord),
    /// Record number `.1` of a text stage.
    Stage(&'s dyn TextStage, u64),
}

/// A record as stored, for callers that read its fields without naming them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RawRecord {
    /// From a log table: values by attribute id.
    Stored(StoredRecord),
    /// From a sorted batch or segment: the flattened text (see [`crate::codec`]),
    /// checked to decode with the schema returned alongside.
    Text { key: Vec<u8>, text: Arc<[u8]> },
}

struct StageSet {
    active: Arc<MemTable>,
    frozen: Vec<Arc<MemTable>>,
    sorted: Vec<Arc<SortedBatch>>,
    segments: Vec<Arc<Segment>>,
    /// Every SCU up to this is in `sorted` and `segments`.
    sealed_seq: u64,
    /// Every SCU up to this is in the set (applied and acknowledged).
    published_seq: u64,
}

impl StageSet {
    fn with(&self) -> StageSet {
        StageSet {
            active: self.active.clone(),
            frozen: self.frozen.clone(),
            sorted: self.sorted.clone(),
            segments: self.segments.clone(),
            sealed_seq: self.sealed_seq,
            published_seq: self.published_seq,
        }
    }

    fn text_stages(&self) -> impl Iterator<Item = &dyn TextStage> {
        let sorted = self
            .sorted
            .iter()
            .rev()
            .map(|b| b.as_ref() as &dyn TextStage);
        let segments = self
            .segments
            .iter()
            .rev()
            .map(|s| s.as_ref() as &dyn TextStage);
        sorted.chain(segments)
    }

    fn log_tables(&self) -> impl Iterator<Item = &Arc<MemTable>> {
        std::iter::once(&self.active).chain(self.frozen.iter().rev())
    }
}

struct ManifestState {
    manifest: Manifest,
}

/// The stage set readers see, replaced whole by every SCU applied and every seal.
///
/// A lock around an `Arc`, not an `ArcSwap`: an `ArcSwap` store pays the readers'
/// outstanding debts by walking a slot list holding a node for every thread that ever
/// loaded any `ArcSwap` at the same time as others, and arc-swap never shrinks that
/// list. A process that once ran many regions' threads (a configuration of six
/// subspaces of 16 regions) paid for all of them on every write from then on: updates
/// alone ran 23 to 30 % slower ten minutes into the hyperspace benchmark than in its
/// first run, `Debt::pay_all` taking 16 % of the process's CPU (docs/subspaces.md,
/// "Measured", 2026-12-05 afternoon). A read lock and a reference count cost the same
/// whatever ran before.
struct PublishedStages(RwLock<Arc<StageSet>>);

impl PublishedStages {
    fn new(set: StageSet) -> PublishedStages {
        PublishedStages(RwLock::new(Arc::new(set)))
    }

    fn load(&self) -> Arc<StageSet> {
        self.0.read().expect("stages lock").clone()
    }

    fn store(&self, set: Arc<StageSet>) {
        let replaced = std::mem::replace(&mut *self.0.write().expect("stages lock"), set);
        // Dropped after the lock is released: the last reference to a replaced set frees
        // its memtables, which readers need not wait for.
        drop(replaced);
    }
}

struct Shared {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    clock: Arc<dyn Clock>,
    options: ShardOptions,
    schema: RwLock<Arc<Schema>>,
    stages: PublishedStages,
    /// Held while applying SCUs and while swapping stage sets.
    apply_lock: Mutex<()>,
    /// (seq, commit time) of SCUs not yet sealed, ascending. The commit time precedes
    /// the acknowledgement, so freshness decisions made with it are conservative.
    acks: Mutex<VecDeque<(u64, u64)>>,
    stopped: Mutex<Option<String>>,
    /// Why the last compaction could not write for want of space, until one succeeds.
    compaction_disk_full: Mutex<Option<String>>,
    manifest: Mutex<ManifestState>,
    compaction_lock: Mutex<()>,
    shutdown: AtomicBool,
    /// Wakes the background threads (indexed by [`BackgroundJob`]).
    wake: [(Mutex<bool>, Condvar); 2],
    /// The manifest's checkpoint (readable without waiting for a compaction).
    checkpoint: AtomicU64,
    /// Record texts extracted from the segments (shared by all of them).
    record_cache: Option<Arc<RecordCache>>,
    /// Rows that attribute predicates found in the segments, by walks and by layers.
    attribute_demand: AttributeDemand,
    /// Values that column reads took from the segments, extracted and from layers.
    column_demand: AttributeDemand,
    /// For a shard fed by an outside log: the highest SCU number that every shard of
    /// that log has applied. A log table is only frozen while the shard holds nothing
    /// past it, so sealed stages never hold an SCU that a reader cannot see whole yet.
    fed: Option<Arc<AtomicU64>>,
    /// Held while the shard is open, so that no second open writes the same files.
    _lock: std::fs::File,
}

/// Sorts record numbers below `records` and drops repeats: through a bitmap of the
/// records when they are many (one bit each, read in order: cheaper than comparing
/// thousands of numbers), by comparison otherwise.
fn sort_records(found: &mut Vec<u64>, records: u64) {
    if (found.len() as u64).saturating_mul(64) < records {
        found.sort_unstable();
        found.dedup();
        return;
    }
    let mut bits = vec![0u64; records.div_ceil(64) as usize];
    for &record in found.iter() {
        bits[(record / 64) as usize] |= 1 << (record % 64);
    }
    let mut at = 0;
    for (word_index, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            found[at] = word_index as u64 * 64 + u64::from(word.trailing_zeros());
            at += 1;
            word &= word - 1;
        }
    }
    found.truncate(at);
}

/// Where a shard's SCUs come from.
#[derive(Clone, Debug)]
pub enum ShardLog {
    /// Its own write-ahead log in `wal/`, written by [`Shard::write`].
    Own,
    /// A log outside the shard that numbers SCUs for many shards (the node's SCU log):
    /// SCUs arrive, already durable, through [`Shard::apply_logged`], and after a restart
    /// the log replays those past the shard's checkpoint. `published` is the highest
    /// number that every shard of that log has applied (readers' newest snapshot).
    Fed {
        /// The log's published SCU number.
        published: Arc<AtomicU64>,
    },
}

/// Operations validated against a schema, with the flattened text of each put, ready
/// to be applied by any replica whose schema they were validated against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreparedOps {
    /// The operations.
    pub ops: Vec<Op>,
    /// The flattened text of each put, in order.
    pub texts: Vec<Vec<u8>>,
}

impl PreparedOps {
    /// Flattens the puts of already validated operations.
    pub fn new(ops: Vec<Op>) -> PreparedOps {
        let texts = ops.iter().filter_map(put_text).collect();
        PreparedOps { ops, texts }
    }
}

/// Validates `ops` against `schema`, which schema changes among them update in place
/// (a failed operation leaves `schema` changed by those before it: pass a copy).
pub fn validate_ops(ops: Vec<WriteOp>, schema: &mut Schema) -> Result<Vec<Op>> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            WriteOp::AddAttribute(attribute) => {
                schema.add_attribute(attribute.clone())?;
                out.push(Op::AddAttribute(attribute));
            }
            other => out.extend(validate_records(vec![other], schema)?),
        }
    }
    Ok(out)
}

/// An SCU on its way to the committer.
enum Pending {
    /// Puts and deletes, already validated by the writer's thread, with each put's
    /// flattened text and the operations' log encoding (also made there). Attributes
    /// are only ever appended, so they stay valid whatever schema change commits first.
    Checked(Vec<Op>, Vec<Vec<u8>>, Vec<u8>),
    /// Operations that change the schema: validated by the committer, in commit order.
    Raw(Vec<WriteOp>),
}

enum Message {
    Write(Pending, mpsc::Sender<Result<u64>>),
    Seal(mpsc::Sender<Result<()>>),
}

/// An open shard. Dropping it stops its threads (acknowledged writes are already durable).
pub struct Shard {
    shared: Arc<Shared>,
    queue: Option<SyncSender<Message>>,
    threads: Vec<JoinHandle<()>>,
}

impl Shard {
    /// Opens (or creates, with `schema`) the shard in `dir` on the real file system.
    pub fn open(dir: impl AsRef<Path>, schema: Schema, options: ShardOptions) -> Result<Shard> {
        Self::open_with(
            dir.as_ref(),
            schema,
            options,
            Arc::new(RealFs),
            Arc::new(SystemClock),
        )
    }

    /// Opens with an explicit file system and clock (tests inject faults and time).
    /// An existing shard keeps its own schema; `schema` is used only to create one.
    pub fn open_with(
        dir: &Path,
        schema: Schema,
        options: ShardOptions,
        fs: Arc<dyn Fs>,
        clock: Arc<dyn Clock>,
    ) -> Result<Shard> {
        Self::open_logged(dir, schema, options, fs, clock, ShardLog::Own)
    }

    /// Opens (or creates) the shard in `dir`, taking its SCUs from `log`. A shard fed by
    /// an outside log must hold nothing of its own log past its checkpoint (a shard that
    /// had its own log is compacted first); its `wal/` directory is then removed.
    pub fn open_logged(
        dir: &Path,
        schema: Schema,
        options: ShardOptions,
        fs: Arc<dyn Fs>,
        clock: Arc<dyn Clock>,
        log: ShardLog,
    ) -> Result<Shard> {
        options.index.validate()?;
        if options.log_table_max_records == 0 || options.max_pending_batches == 0 {
            return Err(StoreError::InvalidBatch(
                "log_table_max_records and max_pending_batches must be at least 1".into(),
            ));
        }
        let wal_dir = dir.join("wal");
        let fed = match log {
            ShardLog::Own => None,
            ShardLog::Fed { published } => Some(published),
        };
        let own_log = fed.is_none();
        let create_dir = if own_log { &wal_dir } else { dir };
        fs.create_dir_all(create_dir)
            .map_err(|e| StoreError::io(create_dir, e))?;
        let lock = lock_directory(dir)?;
        let manifest = match Manifest::load(dir)? {
            Some(m) => m,
            None => {
                let m = Manifest {
                    schema,
                    checkpoint: 0,
                    segments: Vec::new(),
                    next_segment_id: 1,
                };
                m.store(fs.as_ref(), dir)?;
                m
            }
        };
        let record_cache = RecordCache::new(options.record_cache_bytes);
        let mut segments = Vec::new();
        for entry in &manifest.segments {
            let segment = Segment::open(dir, entry.id, entry.deletions.as_deref())?;
            segments.push(Arc::new(
                segment
                    .with_record_cache(record_cache.clone())
                    .with_fs(fs.clone()),
            ));
        }
        let scus = if own_log || wal_dir.exists() {
            wal::replay(&wal_dir, manifest.checkpoint)?
        } else {
            Vec::new()
        };
        if !own_log {
            if let Some(first) = scus.first() {
                return Err(StoreError::corrupt(
                    &wal_dir,
                    format!(
                        "the shard's own log holds SCUs {}..={} past its checkpoint {}; \
                         open it with its own log and compact it before a node's log feeds it",
                        first.seq,
                        scus.last().map_or(first.seq, |s| s.seq),
                        manifest.checkpoint
                    ),
                ));
            }
            if wal_dir.exists() {
                std::fs::remove_dir_all(&wal_dir).map_err(|e| StoreError::io(&wal_dir, e))?;
                fs.sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
            }
        }
        if let Some(first) = scus.first() {
            if first.seq != manifest.checkpoint + 1 {
                return Err(StoreError::corrupt(
                    &wal_dir,
                    format!(
                        "the log starts at SCU {} but the manifest's checkpoint is {}",
                        first.seq, manifest.checkpoint
                    ),
                ));
            }
        }
        let checkpoint = manifest.checkpoint;
        let stages = StageSet {
            active: Arc::new(MemTable::new(checkpoint + 1)),
            frozen: Vec::new(),
            sorted: Vec::new(),
            segments,
            sealed_seq: checkpoint,
            published_seq: checkpoint,
        };
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            fs,
            clock,
            schema: RwLock::new(Arc::new(manifest.schema.clone())),
            stages: PublishedStages::new(stages),
            apply_lock: Mutex::new(()),
            acks: Mutex::new(VecDeque::new()),
            stopped: Mutex::new(None),
            manifest: Mutex::new(ManifestState { manifest }),
            compaction_disk_full: Mutex::new(None),
            compaction_lock: Mutex::new(()),
            shutdown: AtomicBool::new(false),
            wake: [
                (Mutex::new(false), Condvar::new()),
                (Mutex::new(false), Condvar::new()),
            ],
            checkpoint: AtomicU64::new(checkpoint),
            record_cache,
            attribute_demand: AttributeDemand::default(),
            column_demand: AttributeDemand::default(),
            fed,
            _lock: lock,
            options,
        });
        let mut next_seq = checkpoint + 1;
        for scu in scus {
            next_seq = scu.seq + 1;
            let texts = scu.ops.iter().filter_map(put_text).collect();
            shared.apply(scu, texts, true)?;
            if shared.active_full() {
                shared.freeze(next_seq);
            }
        }
        shared.collect_garbage(/* at_open */ true)?;
        let mut threads = Vec::new();
        let mut sender = None;
        if own_log {
            let log = LogWriter::create(shared.fs.as_ref(), &wal_dir, next_seq)?;
            let (queue, receiver) = mpsc::sync_channel(shared.options.write_queue_len);
            sender = Some(queue);
            let committer_shared = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("puffer-commit".into())
                    .spawn(move || committer_shared.run_committer(receiver, log, next_seq))
                    .map_err(|e| StoreError::io(dir, e))?,
            );
        }
        if shared.options.background {
            for job in [BackgroundJob::Seal, BackgroundJob::Compact] {
                let background_shared = shared.clone();
                let queue = sender.clone();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("puffer-{job:?}").to_lowercase())
                        .spawn(move || background_shared.run_background(job, queue))
                        .map_err(|e| StoreError::io(dir, e))?,
                );
            }
        }
        Ok(Shard {
            shared,
            queue: sender,
            threads,
        })
    }

    /// Applies an SCU numbered `seq` by the log that feeds this shard, already durable
    /// there; `ops` were validated against this shard's schema (see [`validate_ops`]).
    /// An SCU at or below what the shard holds is skipped (a replay after a restart
    /// offers every SCU past the oldest checkpoint of the log's shards). A failure
    /// stops the shard: it no longer matches the log.
    pub fn apply_logged(
        &self,
        seq: u64,
        commit_micros: u64,
        prepared: PreparedOps,
        replaying: bool,
    ) -> Result<()> {
        if self.shared.fed.is_none() {
            return Err(StoreError::InvalidBatch(
                "this shard keeps its own log; write to it with Shard::write".into(),
            ));
        }
        self.shared.check_running()?;
        if seq <= self.shared.stages.load().published_seq {
            return Ok(());
        }
        let scu = Scu {
            seq,
            commit_micros,
            ops: prepared.ops,
        };
        self.shared
            .apply(scu, prepared.texts, replaying)
            .inspect_err(|e| self.shared.stop(format!("applying SCU {seq} failed: {e}")))
    }

    /// For a fed shard: refuses more SCUs (`Overloaded`) while its log table is full and
    /// as many batches as allowed wait to be sorted or compacted.
    pub fn check_write_room(&self) -> Result<()> {
        self.shared.check_running()?;
        if self.shared.active_full()
            && self.shared.pending_batches() >= self.shared.options.max_pending_batches
        {
            let blocked = self
                .shared
                .compaction_disk_full
                .lock()
                .expect("compaction_disk_full lock")
                .clone();
            if let Some(why) = blocked {
                return Err(StoreError::disk_full(
                    &self.shared.dir,
                    format!(
                        "{} batches wait to be compacted, and compaction cannot write: {why}",
                        self.shared.options.max_pending_batches
                    ),
                ));
            }
            return Err(StoreError::Overloaded(format!(
                "{} batches wait to be sorted or compacted (the limit); retry later",
                self.shared.options.max_pending_batches
            )));
        }
        Ok(())
    }

    /// For a fed shard: freezes a full log table (if the sealed stages have room);
    /// the log calls this after publishing what it applied.
    pub fn freeze_when_full(&self) {
        if self.shared.active_full()
            && self.shared.pending_batches() < self.shared.options.max_pending_batches
        {
            self.shared.try_freeze_fed();
        }
    }

    /// Whether the shard accepts writes (false after a failed write or fsync).
    pub fn is_running(&self) -> bool {
        self.shared.check_running().is_ok()
    }

    /// The current schema.
    pub fn schema(&self) -> Arc<Schema> {
        self.shared.schema()
    }

    /// Applies `ops` atomically as one SCU; returns its sequence number once it is
    /// durable in the log and visible to queries.
    pub fn write(&self, ops: Vec<WriteOp>) -> Result<u64> {
        if ops.is_empty() {
            return Err(StoreError::InvalidBatch(
                "an SCU needs at least one operation".into(),
            ));
        }
        if ops.len() > self.shared.options.max_ops_per_scu {
            return Err(StoreError::InvalidBatch(format!(
                "an SCU has at most {} operations; got {}",
                self.shared.options.max_ops_per_scu,
                ops.len()
            )));
        }
        self.shared.check_running()?;
        let Some(queue) = self.queue.as_ref() else {
            return Err(StoreError::InvalidBatch(
                "this shard is fed by its node's log; write through its table".into(),
            ));
        };
        let changes_schema = ops.iter().any(|op| matches!(op, WriteOp::AddAttribute(_)));
        let pending = if changes_schema {
            Pending::Raw(ops)
        } else {
            // Validation runs here, in the writer's thread, to keep the committer lean.
            let ops = validate_records(ops, &self.schema())?;
            let texts = ops.iter().filter_map(put_text).collect();
            let encoded = wal::encode_ops(&ops);
            Pending::Checked(ops, texts, encoded)
        };
        let (reply, answer) = mpsc::channel();
        match queue.try_send(Message::Write(pending, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(StoreError::Overloaded(format!(
                    "the write queue is full ({} SCUs waiting)",
                    self.shared.options.write_queue_len
                )))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(StoreError::Stopped("the committer has stopped".into()))
            }
        }
        answer
            .recv()
            .map_err(|_| StoreError::Stopped("the committer has stopped".into()))?
    }

    /// Puts one record (an SCU of one operation).
    pub fn put(&self, record: Record) -> Result<u64> {
        self.write(vec![WriteOp::Put(record)])
    }

    /// Deletes one key (an SCU of one operation).
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<u64> {
        self.write(vec![WriteOp::Delete(key.into())])
    }

    /// Freezes the current log table (if non-empty) and waits until every frozen table
    /// is a sorted batch.
    pub fn seal(&self) -> Result<()> {
        let Some(queue) = self.queue.as_ref() else {
            // Fed: the log publishes what it applied within moments; wait for that.
            let deadline = std::time::Instant::now() + FED_SEAL_WAIT;
            while !self.shared.try_freeze_fed() {
                if std::time::Instant::now() >= deadline {
                    return Err(StoreError::Unavailable(format!(
                        "the log did not publish what this shard applied within {FED_SEAL_WAIT:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            while self.shared.seal_one()? {}
            return Ok(());
        };
        let (reply, answer) = mpsc::channel();
        queue
            .send(Message::Seal(reply))
            .map_err(|_| StoreError::Stopped("the committer has stopped".into()))?;
        answer
            .recv()
            .map_err(|_| StoreError::Stopped("the committer has stopped".into()))??;
        while self.shared.seal_one()? {}
        Ok(())
    }

    /// Merges sorted batches (and, with `all`, every segment) into a new segment.
    pub fn compact(&self, all: bool) -> Result<bool> {
        self.shared.compact(all)
    }

    /// Seals and compacts everything into one segment.
    pub fn compact_all(&self) -> Result<()> {
        self.seal()?;
        self.shared.compact(true)?;
        Ok(())
    }

    /// The record with `key`, if any, and the snapshot read.
    pub fn get(&self, key: &[u8], read: ReadOptions) -> Result<(Option<Record>, SnapshotInfo)> {
        let (mut records, info) = self.multi_get(&[key.to_vec()], read)?;
        Ok((records.pop().flatten(), info))
    }

    /// [`Shard::get`] without decoding or naming the fields: the record as a segment
    /// holds it (its text, known to decode) or as a log table holds it (values by
    /// attribute id), and the schema read with it, for callers that only serialize it.
    pub fn get_raw(
        &self,
        key: &[u8],
        read: ReadOptions,
    ) -> Result<(Option<RawRecord>, Arc<Schema>, SnapshotInfo)> {
        let (set, info) = self.shared.read_view(read)?;
        let schema = self.schema();
        let found = match self.shared.find_visible(&set, key, &info)? {
            None => None,
            Some(Visible::Log(record)) => Some(RawRecord::Stored(record)),
            Some(Visible::Stage(stage, record)) => Some(RawRecord::Text {
                key: stage.key(record)?,
                text: stage.checked_text(record, &types_of(&schema))?,
            }),
        };
        Ok((found, schema, info))
    }

    /// The records with these keys (in the same order), all from one snapshot.
    pub fn multi_get(
        &self,
        keys: &[Vec<u8>],
        read: ReadOptions,
    ) -> Result<(Vec<Option<Record>>, SnapshotInfo)> {
        if keys.len() > MAX_RESULT_ROWS {
            return Err(StoreError::InvalidQuery(format!(
                "multi_get takes at most {MAX_RESULT_ROWS} keys"
            )));
        }
        let (set, info) = self.shared.read_view(read)?;
        let schema = self.schema();
        let types = types_of(&schema);
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let found = match self.shared.find_visible(&set, key, &info)? {
                None => None,
                Some(Visible::Log(record)) => Some(record),
                Some(Visible::Stage(stage, record)) => Some(stage.record_kept(record, &types)?),
            };
            out.push(found.map(|r| schema.to_record(&r)));
        }
        Ok((out, info))
    }

    /// Records matching a query, sorted by key, from one snapshot.
    pub fn search(&self, query: &Query) -> Result<SearchResult> {
        let schema = self.schema();
        let compiled = Compiled::new(&query.predicate, &schema)?;
        let projection = match &query.projection {
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| schema.require(n))
                    .collect::<Result<Vec<u16>>>()?,
            ),
        };
        let want = match &projection {
            None => Want::Records,
            Some(ids) if ids.is_empty() => Want::Keys,
            Some(ids) => Want::Fields(ids),
        };
        let limit = query.limit.unwrap_or(MAX_RESULT_ROWS).min(MAX_RESULT_ROWS);
        let (set, info) = self.shared.read_view(query.read)?;
        let types = types_of(&schema);
        // One more than the limit tells whether the answer was cut.
        let wanted = limit.saturating_add(1);
        // Records are named (and projected) as they are found: records of log tables are
        // then copied once, not first as stored records and again with names.
        let name = |r: &StoredRecord| -> Record {
            let mut record = Record::new(r.key.clone());
            for (id, value) in &r.fields {
                if projection.as_ref().is_some_and(|ids| !ids.contains(id)) {
                    continue;
                }
                if let Some(attribute) = schema.attributes.get(*id as usize) {
                    record.values.insert(attribute.name.clone(), value.clone());
                }
            }
            record
        };
        let mut found: Vec<Record> = Vec::new();
        if info.read_log {
            for table in set.log_tables() {
                let left = wanted - found.len();
                search_mem(table, &compiled, info.snapshot, left, |record| {
                    found.push(name(record))
                });
            }
        }
        for stage in set.text_stages() {
            if found.len() >= wanted {
                break;
            }
            let left = wanted - found.len();
            let matching = search_text(
                stage,
                &compiled,
                &types,
                info.snapshot,
                left,
                want,
                &self.shared.attribute_demand,
            )?;
            // Rows without values need only keys: read in record order, each block of
            // the key directory decoded once.
            let mut keys_only: Vec<u64> = Vec::with_capacity(matching.len());
            for (record, decoded) in matching {
                match decoded {
                    Some(r) => found.push(name(&r)),
                    None => keys_only.push(record),
                }
            }
            sort_records(&mut keys_only, stage.record_count());
            found.extend(stage.keys(&keys_only)?.into_iter().map(Record::new));
        }
        let truncated = found.len() > limit;
        found.truncate(limit);
        found.sort_by(|a, b| a.key.cmp(&b.key));
        let rows = found;
        Ok(SearchResult {
            rows,
            truncated,
            snapshot: info,
        })
    }

    /// The asked columns of the records matching a query, from one snapshot (see
    /// [`crate::columns`]): `query.projection` names them, the key included where asked
    /// (`None`: the key and every attribute). Rows come in no particular order; the
    /// limit keeps any `limit` of them.
    pub fn columns(&self, query: &Query) -> Result<ColumnsResult> {
        let schema = self.schema();
        let compiled = Compiled::new(&query.predicate, &schema)?;
        let names: Vec<String> = match &query.projection {
            Some(names) => names.clone(),
            None => std::iter::once(schema.key.clone())
                .chain(schema.attributes.iter().map(|a| a.name.clone()))
                .collect(),
        };
        let limit = query.limit.unwrap_or(MAX_RESULT_ROWS).min(MAX_RESULT_ROWS);
        let (set, info) = self.shared.read_view(query.read)?;
        let stages: Vec<&dyn TextStage> = set.text_stages().collect();
        let mut result =
            self.read_columns(&schema, &compiled, &names, limit, &set, info, &stages)?;
        result.truncate(limit);
        Ok(result)
    }

    /// Columns `names` of the records matching `compiled` in view `set` (its log tables
    /// where `info` says the snapshot reads them, and `stages`), at most one past
    /// `limit` of them.
    #[allow(clippy::too_many_arguments)]
    fn read_columns(
        &self,
        schema: &Schema,
        compiled: &Compiled,
        names: &[String],
        limit: usize,
        set: &StageSet,
        info: SnapshotInfo,
        stages: &[&dyn TextStage],
    ) -> Result<ColumnsResult> {
        let mut of = Vec::with_capacity(names.len());
        let mut columns = Vec::with_capacity(names.len());
        for name in names {
            if *name == schema.key {
                of.push(ColumnOf::Key);
                columns.push(Column::new(name.clone(), AttrType::String));
            } else {
                let id = schema.require(name)?;
                of.push(ColumnOf::Attribute(id));
                columns.push(Column::new(
                    name.clone(),
                    schema.attributes[id as usize].attr_type,
                ));
            }
        }
        let types = types_of(schema);
        // One more than the limit tells whether the answer was cut.
        let wanted = limit.saturating_add(1);
        let mut rows = 0usize;
        if info.read_log {
            for table in set.log_tables() {
                rows += search_mem(table, compiled, info.snapshot, wanted - rows, |record| {
                    for (column, of) in columns.iter_mut().zip(&of) {
                        match of {
                            ColumnOf::Key => column.push_string(&record.key),
                            ColumnOf::Attribute(id) => column.push(record.get(*id)),
                        }
                    }
                });
            }
        }
        let read = StageRead {
            compiled,
            types: &types,
            snapshot: info.snapshot,
            of: &of,
            attribute_demand: &self.shared.attribute_demand,
            column_demand: &self.shared.column_demand,
        };
        for stage in stages {
            if rows >= wanted {
                break;
            }
            rows += read.read(*stage, wanted - rows, &mut columns)?;
        }
        Ok(ColumnsResult {
            columns,
            rows,
            truncated: false,
            snapshot: info,
        })
    }

    /// The aggregates of `query` over the records it matches, from one snapshot, as
    /// partial states other shards' answers merge with (see [`crate::aggregate`]).
    ///
    /// A `COUNT(*)` grouped by one attribute over every record is counted from the
    /// suffix array of each sorted stage (`aggregate::index_group_counts`: one locate and
    /// two backward searches per group, no record extracted) where the stage has few
    /// enough groups; the log tables and the other stages aggregate the columns of a
    /// column read.
    pub fn aggregate(&self, query: &AggregateQuery) -> Result<AggregateResult> {
        let schema = self.schema();
        query.check(&schema)?;
        let mut groups = Groups::new(query);
        let names = query.columns();
        if names.is_empty() {
            // COUNT(*) alone, ungrouped: a count, which extracts no record.
            let (count, snapshot) = self.count(&query.predicate, query.read)?;
            groups.add_counted(None, count)?;
            return Ok(groups.finish(0, false, snapshot));
        }
        let compiled = Compiled::new(&query.predicate, &schema)?;
        let (set, info) = self.shared.read_view(query.read)?;
        let types = types_of(&schema);
        let counted_group = match (&compiled, &query.group_by) {
            (Compiled::All, Some(group))
                if query.bucket.is_none()
                    && query.aggregates.iter().all(|a| *a == Aggregate::Rows) =>
            {
                Some(schema.require(group)?)
            }
            _ => None,
        };
        let mut rest: Vec<&dyn TextStage> = Vec::new();
        for stage in set.text_stages() {
            let counted = match counted_group {
                Some(id) => index_group_counts(stage, id, &types, info.snapshot)?,
                None => None,
            };
            match counted {
                Some(counts) => {
                    for (value, count) in counts {
                        groups.add_counted(value, count)?;
                    }
                }
                None => rest.push(stage),
            }
        }
        // One past the bound tells an aggregate that fits from one that does not; a
        // shard reads at most as many records as a search may answer.
        let max_rows = query.max_rows.min(MAX_RESULT_ROWS);
        let read = self.read_columns(&schema, &compiled, &names, max_rows, &set, info, &rest)?;
        let truncated = read.rows > max_rows;
        groups.add_columns(&read.columns, read.rows)?;
        Ok(groups.finish(read.rows, truncated, info))
    }

    /// Number of records matching `predicate` in one snapshot.
    pub fn count(&self, predicate: &Predicate, read: ReadOptions) -> Result<(u64, SnapshotInfo)> {
        let schema = self.schema();
        let compiled = Compiled::new(predicate, &schema)?;
        let (set, info) = self.shared.read_view(read)?;
        let types = types_of(&schema);
        let mut total = 0;
        if info.read_log {
            for table in set.log_tables() {
                total += search_mem(table, &compiled, info.snapshot, usize::MAX, |_| {}) as u64;
            }
        }
        for stage in set.text_stages() {
            total += count_text(
                stage,
                &compiled,
                &types,
                info.snapshot,
                &self.shared.attribute_demand,
            )?;
        }
        Ok((total, info))
    }

    /// Up to which SCU each stage holds everything.
    pub fn watermarks(&self) -> Watermarks {
        let set = self.shared.stages.load();
        let compressed = self.shared.checkpoint.load(Ordering::SeqCst);
        Watermarks {
            published: set.published_seq,
            sorted: set.sealed_seq,
            compressed,
        }
    }

    /// Sizes on disk and in memory.
    pub fn stats(&self) -> Result<ShardStats> {
        let set = self.shared.stages.load();
        let mut stats = ShardStats {
            disk_bytes: directory_bytes(&self.shared.dir)?,
            segments: set.segments.len(),
            sorted_batches: set.sorted.len(),
            log_tables: 1 + set.frozen.len(),
            ..ShardStats::default()
        };
        for segment in &set.segments {
            stats.memory_bytes += segment.memory_bytes();
            stats.key_directory_bytes += segment.key_directory_bytes();
            stats.segment_records += segment.record_count();
        }
        for batch in &set.sorted {
            stats.memory_bytes += batch.memory_bytes();
        }
        for table in set.log_tables() {
            stats.memory_bytes += table.memory_bytes();
        }
        stats.record_cache = self.record_cache_stats();
        stats.memory_bytes += stats.record_cache.bytes;
        stats.rows_found = self
            .attribute_demand()
            .iter()
            .map(|rows| rows.walked + rows.layered)
            .sum();
        Ok(stats)
    }

    /// Counters of the record cache (all zero when it is off).
    pub fn record_cache_stats(&self) -> RecordCacheStats {
        self.shared
            .record_cache
            .as_ref()
            .map(|c| c.stats())
            .unwrap_or_default()
    }

    /// Rows that attribute predicates found in this shard's segments since it opened,
    /// per attribute: by walks and from attribute layers (what the layer manager weighs).
    pub fn attribute_demand(&self) -> Vec<AttributeRows> {
        self.shared.attribute_demand.rows()
    }

    /// Values column reads took from the segments since the shard opened, per
    /// attribute: extracted from the text (`walked`) and from column layers (`layered`).
    pub fn column_demand(&self) -> Vec<AttributeRows> {
        self.shared.column_demand.rows()
    }

    /// The segments (for layer management).
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.shared.stages.load().segments.clone()
    }

    /// Stops the threads; waits for the committer to finish queued writes.
    pub fn close(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.queue = None;
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.notify_background();
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// The flattened text of a put.
fn put_text(op: &Op) -> Option<Vec<u8>> {
    match op {
        Op::Put(record) => {
            let mut text = Vec::new();
            crate::codec::push_record(&mut text, record);
            Some(text)
        }
        _ => None,
    }
}

/// Validates puts and deletes against `schema` (schema changes are not accepted here).
/// Nice value of the background threads (and of the index-building threads they start).
/// Sealing and compaction are deferrable: while writers and queries keep the cores busy
/// they get about a tenth of the CPU time a foreground thread gets, and they catch up
/// when the load eases; `max_pending_batches` bounds how far behind they may fall.
#[cfg(target_os = "linux")]
const BACKGROUND_NICE: libc::c_int = 10;

/// Lowers the calling thread's scheduling priority (Linux: priority is per thread).
/// Failure is harmless (the thread keeps the normal priority), so it is ignored.
fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread, with no pointers involved.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
    }
}

fn validate_records(ops: Vec<WriteOp>, schema: &Schema) -> Result<Vec<Op>> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        out.push(match op {
            WriteOp::Put(record) => Op::Put(schema.validate(record)?),
            WriteOp::PutFields(record) => Op::Put(schema.validate_fields(record)?),
            WriteOp::Delete(key) => {
                if key.is_empty() || key.len() > crate::schema::MAX_KEY_BYTES {
                    return Err(StoreError::InvalidRecord {
                        key: display_key(&key),
                        field: schema.key.clone(),
                        reason: "a delete needs a key of 1 to 1024 bytes".into(),
                    });
                }
                Op::Delete(key)
            }
            WriteOp::AddAttribute(attribute) => {
                return Err(StoreError::Schema(format!(
                    "adding attribute {:?} must go through the committer",
                    attribute.name
                )))
            }
        });
    }
    Ok(out)
}

/// Takes the shard directory's exclusive lock (released when the file closes, also when
/// the process dies).
fn lock_directory(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::InUse {
            path: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::io(&path, e)),
    }
}

fn types_of(schema: &Schema) -> Vec<AttrType> {
    schema.attributes.iter().map(|a| a.attr_type).collect()
}

/// Bytes of the files under `dir`. A compaction may remove a file (or a directory)
/// between the listing and its size: it no longer counts.
fn directory_bytes(dir: &Path) -> Result<u64> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut total = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(0),
        Err(e) => return Err(StoreError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(StoreError::io(entry.path(), e)),
        };
        total += if meta.is_dir() {
            directory_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// How long [`Shard::seal`] on a fed shard waits for the log to publish what it applied.
const FED_SEAL_WAIT: Duration = Duration::from_secs(10);

/// Most SCUs committed with one fsync.
const MAX_GROUP_SCUS: usize = 256;
/// Pause before a background job tries again after the disk was full.
const DISK_FULL_RETRY: Duration = Duration::from_secs(1);

impl Shared {
    fn schema(&self) -> Arc<Schema> {
        self.schema.read().expect("schema lock").clone()
    }

    fn check_running(&self) -> Result<()> {
        match &*self.stopped.lock().expect("stopped lock") {
            Some(reason) => Err(StoreError::Stopped(reason.clone())),
            None => Ok(()),
        }
    }

    fn stop(&self, reason: String) {
        let mut stopped = self.stopped.lock().expect("stopped lock");
        if stopped.is_none() {
            *stopped = Some(reason);
        }
    }

    fn notify_background(&self) {
        for (flag, condvar) in &self.wake {
            *flag.lock().expect("wake lock") = true;
            condvar.notify_all();
        }
    }

    fn active_full(&self) -> bool {
        let active = &self.stages.load().active;
        active.len() as usize >= self.options.log_table_max_records
            || active.text_bytes() as usize >= self.options.log_table_max_bytes
    }

    fn pending_batches(&self) -> usize {
        let set = self.stages.load();
        set.frozen.len() + set.sorted.len()
    }

    fn run_committer(self: Arc<Self>, receiver: Receiver<Message>, log: LogWriter, next_seq: u64) {
        let mut log = log;
        let mut next_seq = next_seq;
        while let Ok(first) = receiver.recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP_SCUS {
                match receiver.try_recv() {
                    Ok(m) => group.push(m),
                    Err(_) => break,
                }
            }
            self.commit_group(group, &mut log, &mut next_seq);
        }
    }

    fn commit_group(&self, group: Vec<Message>, log: &mut LogWriter, next_seq: &mut u64) {
        let mut seal_replies = Vec::new();
        let mut writes = Vec::new();
        for message in group {
            match message {
                Message::Write(ops, reply) => writes.push((ops, reply)),
                Message::Seal(reply) => seal_replies.push(reply),
            }
        }
        if let Err(e) = self.check_running() {
            for (_, reply) in writes {
                let _ = reply.send(Err(StoreError::Stopped(e.to_string())));
            }
            for reply in seal_replies {
                let _ = reply.send(Err(StoreError::Stopped(e.to_string())));
            }
            return;
        }
        if !writes.is_empty() && self.active_full() {
            if self.pending_batches() >= self.options.max_pending_batches {
                for (_, reply) in writes.drain(..) {
                    let _ = reply.send(Err(StoreError::Overloaded(format!(
                        "{} batches wait to be sorted or compacted (the limit); retry later",
                        self.options.max_pending_batches
                    ))));
                }
            } else if let Err(e) = self.rotate(log, *next_seq) {
                self.fail_all(writes, seal_replies, e);
                return;
            }
        }
        // Schema changes validate against the schema as this group leaves it.
        let mut schema: Option<Schema> = None;
        let mut accepted = Vec::new();
        let mut encoded = Vec::new();
        let now = self.clock.now_micros();
        for (pending, reply) in writes {
            let checked = match pending {
                Pending::Checked(ops, texts, ops_bytes) => Ok((ops, texts, ops_bytes)),
                Pending::Raw(ops) => {
                    let current = schema.get_or_insert_with(|| (*self.schema()).clone());
                    let mut trial = current.clone();
                    validate_ops(ops, &mut trial)
                        .inspect(|_| *current = trial)
                        .map(|ops| {
                            let texts = ops.iter().filter_map(put_text).collect();
                            let ops_bytes = wal::encode_ops(&ops);
                            (ops, texts, ops_bytes)
                        })
                }
            };
            match checked {
                Ok((ops, texts, ops_bytes)) => {
                    let scu = Scu {
                        seq: *next_seq,
                        commit_micros: now,
                        ops,
                    };
                    *next_seq += 1;
                    wal::encode_record_parts(scu.seq, now, &ops_bytes, &mut encoded);
                    accepted.push((scu, texts, reply));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        if !accepted.is_empty() {
            if let Err(e) = log.append_durably(&encoded) {
                if let StoreError::DiskFull { path, source } = &e {
                    // Taken back from the log: refused, its numbers free again, and the
                    // shard writes on once space is freed.
                    *next_seq = accepted[0].0.seq;
                    let detail = source.to_string();
                    for (_, _, reply) in accepted {
                        let _ = reply.send(Err(StoreError::disk_full(path, detail.clone())));
                    }
                    for reply in seal_replies {
                        let _ = reply.send(Err(StoreError::disk_full(path, detail.clone())));
                    }
                    return;
                }
                let reason = format!("the log write failed: {e}");
                self.stop(reason.clone());
                for (_, _, reply) in accepted {
                    let _ = reply.send(Err(StoreError::Stopped(reason.clone())));
                }
                for reply in seal_replies {
                    let _ = reply.send(Err(StoreError::Stopped(reason.clone())));
                }
                return;
            }
            for (scu, texts, reply) in accepted {
                let seq = scu.seq;
                let result = self.apply(scu, texts, false).map(|()| seq);
                if let Err(e) = &result {
                    self.stop(format!("applying SCU {seq} failed: {e}"));
                }
                let _ = reply.send(result);
            }
        }
        for reply in seal_replies {
            let result = if self.stages.load().active.is_empty() {
                Ok(())
            } else {
                self.rotate(log, *next_seq)
            };
            let _ = reply.send(result);
        }
    }

    /// Stops the shard for `reason`, except when `error` is a full disk: a compaction
    /// that could not write changed nothing and is tried again later.
    fn stop_unless_disk_full(&self, reason: String, error: &StoreError) {
        if !error.is_disk_full() {
            self.stop(reason);
        }
    }

    fn fail_all(
        &self,
        writes: Vec<(Pending, mpsc::Sender<Result<u64>>)>,
        seals: Vec<mpsc::Sender<Result<()>>>,
        error: StoreError,
    ) {
        let reason = error.to_string();
        self.stop(reason.clone());
        for (_, reply) in writes {
            let _ = reply.send(Err(StoreError::Stopped(reason.clone())));
        }
        for reply in seals {
            let _ = reply.send(Err(StoreError::Stopped(reason.clone())));
        }
    }

    /// Starts a new log file at `next_seq` and freezes the active table.
    fn rotate(&self, log: &mut LogWriter, next_seq: u64) -> Result<()> {
        let wal_dir = self.dir.join("wal");
        *log = LogWriter::create(self.fs.as_ref(), &wal_dir, next_seq).inspect_err(|e| {
            self.stop(format!("creating a log file failed: {e}"));
        })?;
        self.freeze(next_seq);
        Ok(())
    }

    fn freeze(&self, next_seq: u64) {
        let _guard = self.apply_lock.lock().expect("apply lock");
        self.freeze_locked(next_seq);
    }

    /// For a fed shard: freezes the log table if the log has published every SCU it
    /// holds (so a sealed stage never holds an SCU readers cannot see yet); false if
    /// not yet. Nothing to freeze counts as done.
    fn try_freeze_fed(&self) -> bool {
        let Some(published) = &self.fed else {
            return true;
        };
        let _guard = self.apply_lock.lock().expect("apply lock");
        let current = self.stages.load();
        if current.active.is_empty() {
            return true;
        }
        if current.published_seq > published.load(Ordering::SeqCst) {
            return false;
        }
        let next_seq = current.published_seq + 1;
        drop(current);
        self.freeze_locked(next_seq);
        true
    }

    /// [`Shared::freeze`] with the apply lock held.
    fn freeze_locked(&self, next_seq: u64) {
        let current = self.stages.load();
        let mut set = current.with();
        set.frozen.push(set.active.clone());
        set.active = Arc::new(MemTable::new(next_seq));
        self.stages.store(Arc::new(set));
        self.notify_background();
    }

    /// Applies one SCU to the stages and publishes it.
    /// `texts` holds the flattened text of each put, in order.
    fn apply(&self, scu: Scu, texts: Vec<Vec<u8>>, replaying: bool) -> Result<()> {
        let mut texts = texts.into_iter();
        let _guard = self.apply_lock.lock().expect("apply lock");
        let set = self.stages.load();
        for op in scu.ops {
            match op {
                Op::AddAttribute(attribute) => {
                    let mut schema = self.schema.write().expect("schema lock");
                    let known = schema
                        .id_of(&attribute.name)
                        .map(|id| schema.attributes[id as usize].attr_type == attribute.attr_type);
                    match known {
                        Some(true) if replaying => {}
                        _ => {
                            let mut updated = (**schema).clone();
                            updated.add_attribute(attribute)?;
                            *schema = Arc::new(updated);
                        }
                    }
                }
                Op::Put(record) => {
                    self.mark_live_version(&set, &record.key, scu.seq)?;
                    let text = texts.next().expect("one text per put");
                    set.active.append(scu.seq, record, text);
                }
                Op::Delete(key) => self.mark_live_version(&set, &key, scu.seq)?,
            }
        }
        set.active.note_applied(scu.seq);
        let mut next = set.with();
        next.published_seq = scu.seq;
        // Published and acknowledged together: see `read_view`.
        let mut acks = self.acks.lock().expect("acks lock");
        self.stages.store(Arc::new(next));
        acks.push_back((scu.seq, scu.commit_micros));
        Ok(())
    }

    /// Marks the live version of `key` (in whichever stage holds it) deleted by `seq`.
    fn mark_live_version(&self, set: &StageSet, key: &[u8], seq: u64) -> Result<()> {
        for table in set.log_tables() {
            let found = table.read().keys.get(key).copied();
            if let Some(record) = found {
                if table.deletions.unmarked(record) {
                    table.deletions.mark(record, seq);
                    return Ok(());
                }
            }
        }
        for stage in set.text_stages() {
            if let Some(record) = stage.find_key(key)? {
                if stage.deletions().unmarked(record) {
                    stage.deletions().mark(record, seq);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Picks the snapshot for a read and the stage set to read it from.
    fn read_view(&self, read: ReadOptions) -> Result<(Arc<StageSet>, SnapshotInfo)> {
        // The set is loaded under the acks lock, which sealing and applying hold while
        // they publish, so the set and the acks describe the same moment.
        let acks = self.acks.lock().expect("acks lock");
        let set = self.stages.load();
        let now = self.clock.now_micros();
        if let Some(at) = read.at {
            let newest = match &self.fed {
                Some(published) => published.load(Ordering::SeqCst),
                None => set.published_seq,
            };
            if at > newest {
                return Err(StoreError::InvalidQuery(format!(
                    "snapshot {at} was asked for; the newest is {newest}"
                )));
            }
            if at < set.sealed_seq {
                return Err(StoreError::SnapshotGone {
                    asked: at,
                    sealed: set.sealed_seq,
                });
            }
            let read_log = at > set.sealed_seq
                && set
                    .log_tables()
                    .any(|table| !table.is_empty() && table.first_seq <= at);
            let age = acks
                .iter()
                .find(|(seq, _)| *seq > at)
                .map_or(Duration::ZERO, |(_, acked)| {
                    Duration::from_micros(now.saturating_sub(*acked))
                });
            return Ok((
                set,
                SnapshotInfo {
                    snapshot: at,
                    age,
                    read_log,
                },
            ));
        }
        let first_unsealed = acks.iter().find(|(seq, _)| *seq > set.sealed_seq).copied();
        drop(acks);
        if read.min_snapshot > set.published_seq {
            return Err(StoreError::InvalidQuery(format!(
                "snapshot {} was asked for; the newest is {}",
                read.min_snapshot, set.published_seq
            )));
        }
        let skip_log = match (read.freshness, first_unsealed) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(bound), Some((_, acked))) => {
                // The oldest unsealed SCU was acknowledged less than `bound` ago.
                now.saturating_sub(acked) < bound.as_micros() as u64
            }
        } && read.min_snapshot <= set.sealed_seq;
        let info = if skip_log {
            SnapshotInfo {
                snapshot: set.sealed_seq,
                age: first_unsealed.map_or(Duration::ZERO, |(_, acked)| {
                    Duration::from_micros(now.saturating_sub(acked))
                }),
                read_log: false,
            }
        } else {
            SnapshotInfo {
                snapshot: set.published_seq,
                age: Duration::ZERO,
                read_log: true,
            }
        };
        Ok((set, info))
    }

    /// The version of `key` visible at the snapshot: a log table's record, or a record
    /// of a text stage (left undecoded, so callers choose how to read it).
    fn find_visible<'s>(
        &self,
        set: &'s StageSet,
        key: &[u8],
        info: &SnapshotInfo,
    ) -> Result<Option<Visible<'s>>> {
        if info.read_log {
            for table in set.log_tables() {
                let inner = table.read();
                let Some(&newest) = inner.keys.get(key) else {
                    continue;
                };
                // Versions newer than the snapshot may have been appended since it was
                // taken: the version to read is this key's newest one within it.
                let within = (0..=newest as usize)
                    .rev()
                    .find(|&i| inner.seqs[i] <= info.snapshot && inner.records[i].key == key);
                if let Some(i) = within {
                    if table.deletions.live_at(i as u64, info.snapshot) {
                        return Ok(Some(Visible::Log(inner.records[i].clone())));
                    }
                }
            }
        }
        for stage in set.text_stages() {
            if let Some(record) = stage.find_key(key)? {
                if stage.deletions().live_at(record, info.snapshot) {
                    return Ok(Some(Visible::Stage(stage, record)));
                }
            }
        }
        Ok(None)
    }

    /// Turns the oldest frozen log table into a sorted batch; false if there was none.
    fn seal_one(&self) -> Result<bool> {
        let Some(table) = self.stages.load().frozen.first().cloned() else {
            return Ok(false);
        };
        let batch = Arc::new(SortedBatch::from_memtable(&table, self.clock.now_micros())?);
        let _guard = self.apply_lock.lock().expect("apply lock");
        let current = self.stages.load();
        if !current.frozen.iter().any(|t| Arc::ptr_eq(t, &table)) {
            return Ok(true); // another thread sealed it meanwhile
        }
        let mut set = current.with();
        set.frozen.retain(|t| !Arc::ptr_eq(t, &table));
        set.sealed_seq = set.sealed_seq.max(batch.last_seq).max(table.first_seq - 1);
        set.sorted.push(batch);
        let sealed = set.sealed_seq;
        // Published and forgotten together: a reader that saw the old set with the
        // pruned acks would find no unsealed SCU and read the old sealed snapshot,
        // missing acknowledged writes.
        let mut acks = self.acks.lock().expect("acks lock");
        self.stages.store(Arc::new(set));
        acks.retain(|(seq, _)| *seq > sealed);
        Ok(true)
    }

    fn compact(&self, all: bool) -> Result<bool> {
        let _one_at_a_time = self.compaction_lock.lock().expect("compaction lock");
        self.check_running()?;
        let set = self.stages.load();
        let batches = set.sorted.clone();
        let checkpoint = set.sealed_seq;
        let new_bytes: u64 = batches.iter().map(|b| b.text_bytes()).sum();
        let mut merged_segments = Vec::new();
        if all {
            merged_segments = set.segments.clone();
        } else {
            // Size-tiered: fold in recent segments while they are small next to the new data.
            let mut accumulated = new_bytes;
            for segment in set.segments.iter().rev() {
                let size = segment.index().text_len();
                let mostly_deleted = segment.deleted_count(checkpoint) * 4 > segment.record_count();
                if size <= accumulated.saturating_mul(2) || mostly_deleted {
                    accumulated += size;
                    merged_segments.push(segment.clone());
                } else {
                    break;
                }
            }
        }
        if batches.is_empty() && (merged_segments.len() < 2 && !all) {
            return Ok(false);
        }
        let mut records: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for batch in &batches {
            for record in 0..batch.record_count() {
                if batch.deletions().live_at(record, checkpoint) {
                    records.push((batch.key(record)?, batch.record_text(record)?));
                }
            }
        }
        for segment in &merged_segments {
            records.extend(segment.live_records(checkpoint)?);
        }
        records.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = records.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(StoreError::corrupt(
                &self.dir,
                format!(
                    "two live versions of key {} at snapshot {checkpoint}",
                    display_key(&pair[0].0)
                ),
            ));
        }
        let mut state = self.manifest.lock().expect("manifest lock");
        let id = state.manifest.next_segment_id;
        let built = if records.is_empty() {
            None
        } else {
            let segment = Segment::build(
                self.fs.as_ref(),
                &self.dir,
                id,
                &records,
                checkpoint,
                &self.options.index,
            )
            .inspect_err(|e| {
                // Its files would only hold on to space; the next try writes them anew.
                for name in [segment::index_file_name(id), segment::meta_file_name(id)] {
                    let _ = self.fs.remove(&self.dir.join(name));
                }
                self.stop_unless_disk_full(format!("writing segment {id} failed: {e}"), e)
            })?;
            Some(Arc::new(
                segment
                    .with_record_cache(self.record_cache.clone())
                    .with_fs(self.fs.clone()),
            ))
        };
        drop(records);
        let merged_ids: Vec<u64> = merged_segments.iter().map(|s| s.id).collect();
        let mut entries = Vec::new();
        for segment in set.segments.iter().filter(|s| !merged_ids.contains(&s.id)) {
            let deletions = segment
                .write_deletions(self.fs.as_ref(), checkpoint)
                .inspect_err(|e| {
                    self.stop_unless_disk_full(format!("writing deletions failed: {e}"), e)
                })?;
            entries.push(SegmentEntry {
                id: segment.id,
                deletions,
            });
        }
        if let Some(segment) = &built {
            entries.push(SegmentEntry {
                id: segment.id,
                deletions: None,
            });
        }
        let manifest = Manifest {
            schema: (*self.schema()).clone(),
            checkpoint,
            segments: entries,
            next_segment_id: id + 1,
        };
        manifest
            .store(self.fs.as_ref(), &self.dir)
            .inspect_err(|e| {
                self.stop_unless_disk_full(format!("writing the manifest failed: {e}"), e)
            })?;
        state.manifest = manifest;
        drop(state);

        // Swap: replace the inputs by the new segment, carrying over newer marks.
        {
            let _guard = self.apply_lock.lock().expect("apply lock");
            let current = self.stages.load();
            let mut next = current.with();
            next.sorted
                .retain(|b| !batches.iter().any(|m| Arc::ptr_eq(m, b)));
            next.segments.retain(|s| !merged_ids.contains(&s.id));
            let inputs = batches
                .iter()
                .map(|b| b.as_ref() as &dyn TextStage)
                .chain(merged_segments.iter().map(|s| s.as_ref() as &dyn TextStage));
            for input in inputs {
                for (record, seq) in input.deletions().marks_after(checkpoint) {
                    let key = input.key(record)?;
                    if let Some(segment) = &built {
                        if let Some(rank) = segment.find_key(&key)? {
                            segment.deletions().mark(rank, seq);
                        }
                    }
                }
            }
            if let Some(segment) = built {
                next.segments.push(segment);
            }
            self.stages.store(Arc::new(next));
        }
        self.checkpoint.store(checkpoint, Ordering::SeqCst);
        self.collect_garbage(/* at_open */ false)?;
        Ok(true)
    }

    /// Removes files the manifest no longer needs: old segments, superseded deletions
    /// files, log files wholly before the checkpoint, and (`at_open`) temporary files.
    /// While the shard runs, a temporary file may be a write in flight on another
    /// thread (a layer being saved), so only an open removes them: there they are what
    /// a crash left half-written.
    fn collect_garbage(&self, at_open: bool) -> Result<()> {
        let state = self.manifest.lock().expect("manifest lock");
        let manifest = &state.manifest;
        let mut live: Vec<String> = vec![crate::manifest::MANIFEST_FILE.to_string()];
        for entry in &manifest.segments {
            live.push(segment::index_file_name(entry.id));
            live.push(segment::meta_file_name(entry.id));
            live.extend(entry.deletions.clone());
        }
        let live_ids: Vec<u64> = manifest.segments.iter().map(|e| e.id).collect();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| StoreError::io(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&self.dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("seg-") || (at_open && name.starts_with('.'));
            // A live segment's layer files live with it.
            let live_layer = segment::attribute_layer_file_segment(&name)
                .is_some_and(|id| live_ids.contains(&id));
            if ours && !live_layer && !live.contains(&name) && entry.path().is_file() {
                remove_unless_gone(self.fs.as_ref(), &entry.path())?;
            }
        }
        if self.fed.is_some() {
            return Ok(()); // no log of its own
        }
        let wal_dir = self.dir.join("wal");
        let files = wal::list_files(&wal_dir)?;
        for pair in files.windows(2) {
            // The file holds SCUs first..next_first-1; all at or before the checkpoint.
            if pair[1].0 <= manifest.checkpoint + 1 {
                remove_unless_gone(self.fs.as_ref(), &pair[0].1)?;
            }
        }
        Ok(())
    }

    /// Waits until woken for `job`, or for a poll interval.
    fn wait_for_work(&self, job: BackgroundJob) {
        let (flag, condvar) = &self.wake[job as usize];
        let guard = flag.lock().expect("wake lock");
        let (mut guard, _) = condvar
            .wait_timeout_while(guard, Duration::from_millis(100), |woken| !*woken)
            .expect("wake lock");
        *guard = false;
    }

    /// One background thread: sealing (frozen tables become sorted batches, and log
    /// tables that waited `seal_interval` are frozen) or compaction. They are separate
    /// threads so that a long compaction does not hold back the sorted stage.
    fn run_background(self: Arc<Self>, job: BackgroundJob, queue: Option<SyncSender<Message>>) {
        lower_thread_priority();
        let mut active_since: Option<(usize, u64)> = None;
        while !self.shutdown.load(Ordering::SeqCst) {
            self.wait_for_work(job);
            if self.shutdown.load(Ordering::SeqCst) || self.check_running().is_err() {
                break;
            }
            let work = match job {
                BackgroundJob::Seal => (|| {
                    while self.seal_one()? {}
                    Ok(())
                })(),
                BackgroundJob::Compact if self.compaction_due() => self.compact(false).map(|_| ()),
                BackgroundJob::Compact => Ok(()),
            };
            let disk_full = match work {
                Ok(()) => None,
                Err(e) if e.is_disk_full() => Some(e.to_string()),
                Err(e) => {
                    self.stop(format!("background {job:?} failed: {e}"));
                    break;
                }
            };
            if job == BackgroundJob::Compact {
                let waiting = disk_full.is_some();
                *self
                    .compaction_disk_full
                    .lock()
                    .expect("compaction_disk_full lock") = disk_full;
                if waiting {
                    // Nothing changed: the inputs stay where they are and are read from
                    // there; try again once space may have been freed.
                    std::thread::sleep(DISK_FULL_RETRY);
                    continue;
                }
            }
            if job == BackgroundJob::Seal {
                active_since = self.request_seal_when_due(active_since, queue.as_ref());
            }
        }
    }

    /// Whether the sorted stage should be compacted now.
    fn compaction_due(&self) -> bool {
        let set = self.stages.load();
        match set.sorted.as_slice() {
            [] => false,
            [only] => {
                let waited = self.clock.now_micros().saturating_sub(only.sealed_micros);
                waited >= self.options.compaction_delay.as_micros() as u64
            }
            _ => true,
        }
    }

    /// Asks the committer to freeze a non-empty log table that has waited long enough;
    /// returns the (table, first seen) pair to remember.
    fn request_seal_when_due(
        &self,
        active_since: Option<(usize, u64)>,
        queue: Option<&SyncSender<Message>>,
    ) -> Option<(usize, u64)> {
        let set = self.stages.load();
        let identity = Arc::as_ptr(&set.active) as usize;
        let now = self.clock.now_micros();
        match active_since {
            Some((id, since)) if id == identity => {
                let waited = Duration::from_micros(now.saturating_sub(since));
                if waited >= self.options.seal_interval && !set.active.is_empty() {
                    match queue {
                        Some(queue) => {
                            let (reply, _answer) = mpsc::channel();
                            let _ = queue.try_send(Message::Seal(reply));
                        }
                        // Fed: frozen here once the log has published what it holds.
                        None if self.try_freeze_fed() => {}
                        None => return active_since,
                    }
                    return None;
                }
                active_since
            }
            _ => Some((identity, now)),
        }
    }
}

/// Removes the file at `path`; one already gone is no error (what was wanted is true).
fn remove_unless_gone(fs: &dyn Fs, path: &Path) -> Result<()> {
    match fs.remove(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StoreError::io(path, e)),
        _ => Ok(()),
    }
}

/// The two background threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BackgroundJob {
    Seal = 0,
    Compact = 1,
}

#[cfg(test)]
mod tests {
    use super::sort_records;

    #[test]
    fn record_numbers_sort_alike_by_bitmap_and_by_comparison() {
        let mut state = 7u64;
        for (count, records) in [(0, 10), (5, 1000), (40, 100), (900, 1000), (3000, 3000)] {
            let mut found: Vec<u64> = (0..count)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (state >> 33) % records
                })
                .collect();
            let mut expected = found.clone();
            expected.sort_unstable();
            expected.dedup();
            sort_records(&mut found, records);
            assert_eq!(found, expected, "{count} of {records}");
        }
    }
}
