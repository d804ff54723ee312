//! One order for a database: every SCU is numbered once, whatever tables and shards it
//! touches, made durable in the database's SCU log (group commit), then applied to
//! every replica of every shard it touches, and only then published. A snapshot is one
//! number `X`: a read at `X` sees SCUs `1..=X` on every shard of every table.
//!
//! The log lives in `log/` of the data directory, in the framing of the store's
//! write-ahead log (`puffer_store::wal`: files named by their first SCU, records with a
//! length, its complement and a checksum, torn tails told from damage). A record's body
//! (after its SCU number and commit time) is `part_count u32`, then per table touched
//! `table_uid u64 | ops_len u32 | ops` with `ops` in the store's encoding
//! (`wal::encode_ops`). Table uids, not names, tie parts to tables, so a table dropped
//! and created again under its name never receives the old table's SCUs.
//!
//! Shards are fed by this log ([`puffer_store::ShardLog::Fed`]) and keep no log of
//! their own: after a crash, each replica gets the SCUs past its checkpoint replayed
//! from here, so an acknowledged SCU is whole on every shard and an SCU is never there
//! in part. Log files are removed once every replica holds their SCUs in segments.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;

use crate::catalog::Catalog;
use crate::message::{ReplicaRequest, ShardReplicas};
use puffer_store::clock::{Clock, SystemClock};
use puffer_store::fs::{Fs, RealFs};
use puffer_store::wal::{self, LogWriter, Op};
use puffer_store::{validate_ops, PreparedOps, ReadOptions, StoreError, WriteOp};

use crate::layout::shard_of;
use crate::shards::TableShards;
use puffer_query::{QueryError, Result};

/// Most SCUs made durable with one fsync.
const MAX_GROUP_SCUS: usize = 256;
/// A log file is closed and a new one started past this many bytes, so that files
/// whose SCUs every replica holds in segments can be removed.
const LOG_FILE_BYTES: u64 = 64 << 20;
/// Acknowledgement times kept for freshness decisions (the oldest are dropped first;
/// SCUs older than those kept count as acknowledged long ago).
const MAX_ACK_TIMES: usize = 65_536;

/// Limits of the write path.
#[derive(Clone, Copy, Debug)]
pub struct CommitOptions {
    /// SCUs that may wait for the committer; more are refused with `Overloaded`.
    pub queue_len: usize,
    /// Most operations in one SCU (over all its tables).
    pub max_ops_per_scu: usize,
}

/// One table's part of an SCU, validated and routed to its shards.
struct PreparedPart {
    table: Arc<TableShards>,
    /// (shard, its operations), shards ascending.
    shards: Vec<(u32, PreparedOps)>,
}

/// An SCU on its way to the committer thread.
struct PreparedScu {
    /// The log record's body (parts with their table uids).
    body: Vec<u8>,
    parts: Vec<PreparedPart>,
}

type Reply = mpsc::Sender<Result<u64>>;

struct Inner {
    log_dir: PathBuf,
    fs: Arc<dyn Fs>,
    clock: Arc<dyn Clock>,
    options: CommitOptions,
    /// Every SCU up to this is applied by every replica it touches (readers' newest
    /// snapshot). Fed shards read it to decide when they may freeze a log table.
    published: Arc<AtomicU64>,
    /// (SCU, commit time in microseconds) of recent SCUs, ascending and contiguous.
    acks: Mutex<VecDeque<(u64, u64)>>,
    /// Open tables by uid (for replay and for removing log files).
    tables: RwLock<HashMap<u64, Arc<TableShards>>>,
    /// Why the committer stopped (a failed log write or apply); it then refuses writes.
    stopped: Mutex<Option<String>>,
    queue: Mutex<Option<SyncSender<(PreparedScu, Reply)>>>,
    /// Where schemas changed by SCUs are recorded once applied.
    catalog: OnceLock<Arc<dyn Catalog>>,
}

/// The database's committer: numbers, logs, applies and publishes SCUs.
pub struct Committer {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Committer {
    /// A committer whose log is in `log_dir`; tables register, then [`Committer::start`]
    /// replays the log into them and starts the committer thread.
    pub fn new(log_dir: &Path, options: CommitOptions) -> Committer {
        Committer::with(log_dir, options, Arc::new(RealFs), Arc::new(SystemClock))
    }

    /// [`Committer::new`] with an explicit file system and clock.
    pub fn with(
        log_dir: &Path,
        options: CommitOptions,
        fs: Arc<dyn Fs>,
        clock: Arc<dyn Clock>,
    ) -> Committer {
        Committer {
            inner: Arc::new(Inner {
                log_dir: log_dir.to_path_buf(),
                fs,
                clock,
                options,
                published: Arc::new(AtomicU64::new(0)),
                acks: Mutex::new(VecDeque::new()),
                tables: RwLock::new(HashMap::new()),
                stopped: Mutex::new(None),
                queue: Mutex::new(None),
                catalog: OnceLock::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// The published SCU number, shared with the shards this log feeds.
    pub fn published_counter(&self) -> Arc<AtomicU64> {
        self.inner.published.clone()
    }

    /// The newest snapshot: every SCU up to it is applied everywhere it goes.
    pub fn published(&self) -> u64 {
        self.inner.published.load(Ordering::SeqCst)
    }

    /// Records every schema an SCU changes in `catalog` once the SCU is applied (set
    /// once, before [`Committer::start`]).
    pub fn attach_catalog(&self, catalog: Arc<dyn Catalog>) {
        let _ = self.inner.catalog.set(catalog);
    }

    /// Makes a table's shards reachable by the log (replay, removal of log files).
    pub fn register(&self, table: Arc<TableShards>) {
        self.inner
            .tables
            .write()
            .expect("tables lock")
            .insert(table.uid, table);
    }

    /// Forgets a dropped table: its SCUs still in the log are skipped from now on.
    pub fn unregister(&self, uid: u64) {
        self.inner.tables.write().expect("tables lock").remove(&uid);
    }

    /// Replays the log into the registered tables (each replica takes the SCUs past its
    /// checkpoint) and starts the committer thread.
    pub fn start(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .fs
            .create_dir_all(&inner.log_dir)
            .map_err(|e| StoreError::io(&inner.log_dir, e))?;
        let checkpoints = inner.max_checkpoint()?;
        inner.published.store(checkpoints, Ordering::SeqCst);
        let records = wal::replay_with(&inner.log_dir, 0, |seq, commit_micros, body| {
            Ok((seq, commit_micros, decode_body(body)?))
        })?;
        let mut last_seq = 0;
        for (seq, commit_micros, parts) in records {
            let prepared = inner.route_logged(parts);
            let touched = inner.apply(seq, commit_micros, prepared, true)?;
            inner.published.fetch_max(seq, Ordering::SeqCst);
            freeze_full(&touched);
            last_seq = seq;
        }
        let files = wal::list_files(&inner.log_dir)?;
        let next_seq = (last_seq + 1)
            .max(checkpoints + 1)
            .max(files.last().map_or(1, |(first, _)| *first));
        inner.published.store(next_seq - 1, Ordering::SeqCst);
        let log = LogWriter::create(inner.fs.as_ref(), &inner.log_dir, next_seq)?;
        inner.remove_old_files()?;
        let (sender, receiver) = mpsc::sync_channel(inner.options.queue_len.max(1));
        *inner.queue.lock().expect("queue lock") = Some(sender);
        let thread_inner = inner.clone();
        let handle = std::thread::Builder::new()
            .name("puffer-db-commit".into())
            .spawn(move || thread_inner.run(receiver, log, next_seq))
            .map_err(|e| StoreError::io(&inner.log_dir, e))?;
        *self.thread.lock().expect("thread lock") = Some(handle);
        Ok(())
    }

    /// Writes one SCU over one or more tables (each at most once): all of it or nothing,
    /// on every shard and replica. Returns its number once it is durable in the log and
    /// published (visible to every read that starts afterwards).
    pub fn write(&self, parts: Vec<(Arc<TableShards>, Vec<WriteOp>)>) -> Result<u64> {
        let inner = &self.inner;
        inner.check_running()?;
        let total_ops: usize = parts.iter().map(|(_, ops)| ops.len()).sum();
        if total_ops == 0 {
            return Err(
                StoreError::InvalidBatch("an SCU needs at least one operation".into()).into(),
            );
        }
        if total_ops > inner.options.max_ops_per_scu {
            return Err(StoreError::InvalidBatch(format!(
                "an SCU has at most {} operations; got {total_ops}",
                inner.options.max_ops_per_scu
            ))
            .into());
        }
        let mut seen = std::collections::HashSet::new();
        for (table, _) in &parts {
            if !seen.insert(table.uid) {
                return Err(QueryError::Invalid(format!(
                    "table {:?} appears twice in one batch; give its operations once",
                    table.name
                )));
            }
        }
        // Schema changes validate in commit order: each changed table's schema lock is
        // held (in uid order, so two writers never wait on each other) until the SCU is
        // applied and the next schema change sees its result.
        let mut changing: Vec<Arc<TableShards>> = parts
            .iter()
            .filter(|(_, ops)| ops.iter().any(|op| matches!(op, WriteOp::AddAttribute(_))))
            .map(|(table, _)| table.clone())
            .collect();
        changing.sort_by_key(|t| t.uid);
        let _schema_guards: Vec<_> = changing
            .iter()
            .map(|t| t.schema_change.lock().expect("schema change lock"))
            .collect();
        let scu = prepare(parts)?;
        for part in &scu.parts {
            for (shard, _) in &part.shards {
                let replicas = &part.table.replicas[*shard as usize];
                for replica in 0..replicas.replica_count() {
                    replicas
                        .send_to(replica, ReplicaRequest::CheckWriteRoom)?
                        .into_done()?;
                }
            }
        }
        if scu.body.len() > wal::MAX_SCU_BYTES {
            return Err(StoreError::InvalidBatch(format!(
                "an SCU encodes to at most {} bytes; this one takes {}",
                wal::MAX_SCU_BYTES,
                scu.body.len()
            ))
            .into());
        }
        let queue = inner
            .queue
            .lock()
            .expect("queue lock")
            .clone()
            .ok_or_else(|| StoreError::Stopped("the database's committer is not running".into()))?;
        let (reply, answer) = mpsc::channel();
        match queue.try_send((scu, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(StoreError::Overloaded(format!(
                    "the write queue is full ({} SCUs waiting)",
                    inner.options.queue_len
                ))
                .into())
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(
                    StoreError::Stopped("the database's committer has stopped".into()).into(),
                )
            }
        }
        answer
            .recv()
            .map_err(|_| StoreError::Stopped("the database's committer has stopped".into()))?
    }

    /// The snapshot a read with `read`'s freshness and minimum reads at: the newest, or,
    /// with a freshness bound, the oldest snapshot that holds every SCU acknowledged
    /// longer ago than the bound and lies at or past every sealed stage of the replicas
    /// read (`max_sealed`), so that they can skip their log stage.
    pub fn choose_snapshot(
        &self,
        read: ReadOptions,
        max_sealed: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        let published = self.published();
        if read.min_snapshot > published {
            return Err(StoreError::InvalidQuery(format!(
                "snapshot {} was asked for; the newest is {published}",
                read.min_snapshot
            ))
            .into());
        }
        let bound = match read.freshness {
            Some(bound) if !bound.is_zero() => bound,
            _ => return Ok(published),
        };
        let now = self.inner.clock.now_micros();
        let cutoff = now.saturating_sub(bound.as_micros().min(u128::from(u64::MAX)) as u64);
        let acked_before_cutoff = self.inner.acked_by(cutoff, published);
        Ok(acked_before_cutoff
            .max(max_sealed()?)
            .max(read.min_snapshot)
            .min(published))
    }

    /// Why the committer stopped, if it did.
    pub fn stopped(&self) -> Option<String> {
        self.inner.stopped.lock().expect("stopped lock").clone()
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // Closing the queue lets the thread finish the SCUs already queued, then end.
        self.inner.queue.lock().expect("queue lock").take();
        if let Some(handle) = self.thread.lock().expect("thread lock").take() {
            let _ = handle.join();
        }
    }
}

/// Validates each table's operations against its schema, routes them to shards and
/// encodes the log record's body.
fn prepare(parts: Vec<(Arc<TableShards>, Vec<WriteOp>)>) -> Result<PreparedScu> {
    let mut body = Vec::new();
    let count = parts.iter().filter(|(_, ops)| !ops.is_empty()).count();
    body.extend_from_slice(&(count as u32).to_le_bytes());
    let mut prepared = Vec::with_capacity(count);
    for (table, ops) in parts {
        if ops.is_empty() {
            continue;
        }
        let mut schema = (*table.schema()).clone();
        let ops = validate_ops(ops, &mut schema)?;
        let encoded = wal::encode_ops(&ops);
        body.extend_from_slice(&table.uid.to_le_bytes());
        body.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
        body.extend_from_slice(&encoded);
        let shards = route(ops, table.shards);
        prepared.push(PreparedPart { table, shards });
    }
    Ok(PreparedScu {
        body,
        parts: prepared,
    })
}

/// Splits a table's operations by shard (a schema change goes to every shard, in the
/// same place among its operations) and flattens the puts.
fn route(ops: Vec<Op>, shards: u32) -> Vec<(u32, PreparedOps)> {
    if shards == 1 {
        return vec![(0, PreparedOps::new(ops))];
    }
    let mut per_shard: Vec<Vec<Op>> = (0..shards).map(|_| Vec::new()).collect();
    for op in ops {
        let key = match &op {
            Op::Put(record) => &record.key,
            Op::Delete(key) => key,
            Op::AddAttribute(_) => {
                for shard_ops in per_shard.iter_mut() {
                    shard_ops.push(op.clone());
                }
                continue;
            }
        };
        per_shard[shard_of(key, shards) as usize].push(op);
    }
    per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, ops)| !ops.is_empty())
        .map(|(shard, ops)| (shard as u32, PreparedOps::new(ops)))
        .collect()
}

/// Decodes a log record's body into (table uid, operations) parts.
fn decode_body(body: &[u8]) -> std::result::Result<Vec<(u64, Vec<Op>)>, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        let end = at
            .checked_add(n)
            .filter(|&end| end <= body.len())
            .ok_or_else(|| format!("body cut short at byte {at}"))?;
        let out = &body[at..end];
        at = end;
        Ok(out)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes"));
    let mut parts = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let uid = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
        parts.push((uid, wal::decode_ops(take(len)?)?));
    }
    if at != body.len() {
        return Err("trailing bytes after the last table's operations".into());
    }
    Ok(parts)
}

/// Freezes the full log tables of the shards an SCU touched.
fn freeze_full(touched: &[Arc<dyn ShardReplicas>]) {
    for replicas in touched {
        for replica in 0..replicas.replica_count() {
            // Best effort: a replica that misses it freezes at its next write, and a
            // full log table only refuses writes (`check_write_room`), it loses nothing.
            let _ = replicas.send_to(replica, ReplicaRequest::FreezeWhenFull);
        }
    }
}

impl Inner {
    fn check_running(&self) -> Result<()> {
        match &*self.stopped.lock().expect("stopped lock") {
            Some(reason) => Err(StoreError::Stopped(reason.clone()).into()),
            None => Ok(()),
        }
    }

    fn stop(&self, reason: String) {
        self.stopped
            .lock()
            .expect("stopped lock")
            .get_or_insert(reason);
    }

    /// The highest checkpoint of any registered replica: numbering continues above it
    /// (shards that kept their own log before have checkpoints in their own numbering).
    fn max_checkpoint(&self) -> Result<u64> {
        Ok(self
            .replicas_watermarks()?
            .iter()
            .map(|w| w.compressed)
            .max()
            .unwrap_or(0))
    }

    fn replicas_watermarks(&self) -> Result<Vec<puffer_store::Watermarks>> {
        let tables: Vec<Arc<TableShards>> = self
            .tables
            .read()
            .expect("tables lock")
            .values()
            .cloned()
            .collect();
        let mut all = Vec::new();
        for table in tables {
            for answer in table.to_every_replica(|| ReplicaRequest::Watermarks)? {
                all.push(answer.into_watermarks()?);
            }
        }
        Ok(all)
    }

    /// The highest SCU acknowledged at or before `cutoff_micros` (SCUs older than the
    /// kept times count as acknowledged long ago).
    fn acked_by(&self, cutoff_micros: u64, published: u64) -> u64 {
        let acks = self.acks.lock().expect("acks lock");
        let Some(&(first, _)) = acks.front() else {
            return published;
        };
        let older = acks.partition_point(|(_, micros)| *micros <= cutoff_micros);
        let acked = if older == 0 {
            first - 1
        } else {
            acks[older - 1].0
        };
        acked.min(published)
    }

    /// Routes a replayed record's parts to the registered tables (parts of dropped
    /// tables are skipped).
    fn route_logged(&self, parts: Vec<(u64, Vec<Op>)>) -> Vec<PreparedPart> {
        let tables = self.tables.read().expect("tables lock");
        parts
            .into_iter()
            .filter_map(|(uid, ops)| {
                let table = tables.get(&uid)?.clone();
                let shards = route(ops, table.shards);
                Some(PreparedPart { table, shards })
            })
            .collect()
    }

    /// Applies SCU `seq` to every replica of every shard it touches (the last replica
    /// takes the operations, the others a copy); returns the shards touched.
    fn apply(
        &self,
        seq: u64,
        commit_micros: u64,
        parts: Vec<PreparedPart>,
        replaying: bool,
    ) -> Result<Vec<Arc<dyn ShardReplicas>>> {
        let mut touched = Vec::new();
        for part in parts {
            let mut changes_schema = false;
            for (shard, prepared) in part.shards {
                changes_schema |= prepared
                    .ops
                    .iter()
                    .any(|op| matches!(op, Op::AddAttribute(_)));
                let replicas = part.table.replicas[shard as usize].clone();
                let last = replicas.replica_count() - 1;
                let apply = |ops| ReplicaRequest::Apply {
                    seq,
                    commit_micros,
                    ops,
                    replaying,
                };
                for replica in 0..last {
                    replicas
                        .send_to(replica, apply(prepared.clone()))?
                        .into_done()?;
                }
                replicas.send_to(last, apply(prepared))?.into_done()?;
                touched.push(replicas);
            }
            if changes_schema {
                part.table.refresh_schema()?;
                if let Some(catalog) = self.catalog.get() {
                    let schema = part.table.schema();
                    match catalog.set_schema(&part.table.name, part.table.uid, &schema) {
                        // Dropped meanwhile: nothing left to record it for.
                        Ok(()) | Err(QueryError::UnknownTable(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(touched)
    }

    fn run(
        self: Arc<Self>,
        receiver: Receiver<(PreparedScu, Reply)>,
        log: LogWriter,
        next_seq: u64,
    ) {
        let mut log = log;
        let mut next_seq = next_seq;
        let mut log_bytes = 0u64;
        while let Ok(first) = receiver.recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP_SCUS {
                match receiver.try_recv() {
                    Ok(scu) => group.push(scu),
                    Err(_) => break,
                }
            }
            self.commit_group(group, &mut log, &mut next_seq, &mut log_bytes);
        }
    }

    fn commit_group(
        &self,
        group: Vec<(PreparedScu, Reply)>,
        log: &mut LogWriter,
        next_seq: &mut u64,
        log_bytes: &mut u64,
    ) {
        if let Err(e) = self.check_running() {
            for (_, reply) in group {
                let _ = reply.send(Err(StoreError::Stopped(e.to_string()).into()));
            }
            return;
        }
        let now = self.clock.now_micros();
        let mut encoded = Vec::new();
        let mut numbered = Vec::with_capacity(group.len());
        for (scu, reply) in group {
            let seq = *next_seq;
            *next_seq += 1;
            wal::encode_record_parts(seq, now, &scu.body, &mut encoded);
            numbered.push((seq, scu.parts, reply));
        }
        if let Err(e) = log.append_durably(&encoded) {
            let reason = format!("the database log write failed: {e}");
            self.stop(reason.clone());
            for (_, _, reply) in numbered {
                let _ = reply.send(Err(StoreError::Stopped(reason.clone()).into()));
            }
            return;
        }
        *log_bytes += encoded.len() as u64;
        let mut failed: Option<String> = None;
        for (seq, parts, reply) in numbered {
            if let Some(reason) = &failed {
                let _ = reply.send(Err(StoreError::Stopped(reason.clone()).into()));
                continue;
            }
            match self.apply(seq, now, parts, false) {
                Ok(touched) => {
                    {
                        let mut acks = self.acks.lock().expect("acks lock");
                        if acks.len() >= MAX_ACK_TIMES {
                            acks.pop_front();
                        }
                        acks.push_back((seq, now));
                    }
                    self.published.store(seq, Ordering::SeqCst);
                    freeze_full(&touched);
                    let _ = reply.send(Ok(seq));
                }
                Err(e) => {
                    // Durable but not applied everywhere: it stays unpublished (reads stay
                    // at the SCU before it) and a restart replays it to every replica.
                    let reason = format!(
                        "applying SCU {seq} failed: {e}; the database accepts no more writes \
                         until it is reopened (the SCU is in its log and is replayed then)"
                    );
                    self.stop(reason.clone());
                    let _ = reply.send(Err(StoreError::Stopped(reason.clone()).into()));
                    failed = Some(reason);
                }
            }
        }
        if *log_bytes >= LOG_FILE_BYTES {
            match LogWriter::create(self.fs.as_ref(), &self.log_dir, *next_seq) {
                Ok(new_log) => {
                    *log = new_log;
                    *log_bytes = 0;
                    if let Err(e) = self.remove_old_files() {
                        self.stop(format!("removing old log files failed: {e}"));
                    }
                }
                Err(e) => self.stop(format!("starting a new log file failed: {e}")),
            }
        }
    }

    /// Removes the log files all of whose SCUs every replica holds in segments. Called
    /// between groups, when every applied SCU is published.
    fn remove_old_files(&self) -> Result<()> {
        let published = self.published.load(Ordering::SeqCst);
        // A replica that holds nothing past its checkpoint holds every SCU so far that
        // touches it; otherwise only those up to its checkpoint.
        let durable = self
            .replicas_watermarks()?
            .into_iter()
            .map(|w| {
                if w.published == w.compressed {
                    published
                } else {
                    w.compressed
                }
            })
            .min()
            .unwrap_or(published);
        let files = wal::list_files(&self.log_dir)?;
        for pair in files.windows(2) {
            // The file holds SCUs first..next_first-1.
            if pair[1].0 <= durable + 1 {
                self.fs
                    .remove(&pair[0].1)
                    .map_err(|e| StoreError::io(&pair[0].1, e))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_store::schema::StoredRecord;
    use puffer_store::Value;

    #[test]
    fn bodies_round_trip_and_damage_is_refused() {
        let ops = vec![
            Op::Put(StoredRecord {
                key: b"k".to_vec(),
                fields: vec![(0, Value::Int(-3))],
            }),
            Op::Delete(b"gone".to_vec()),
        ];
        let encoded = wal::encode_ops(&ops);
        let mut body = 2u32.to_le_bytes().to_vec();
        for uid in [7u64, 9] {
            body.extend_from_slice(&uid.to_le_bytes());
            body.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
            body.extend_from_slice(&encoded);
        }
        let parts = decode_body(&body).unwrap();
        assert_eq!(parts, vec![(7, ops.clone()), (9, ops)]);
        assert!(decode_body(&body[..body.len() - 1]).is_err());
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(decode_body(&trailing).is_err());
    }

    #[test]
    fn routing_keeps_each_key_on_its_shard_and_schema_changes_everywhere() {
        let mut ops = Vec::new();
        for i in 0..50 {
            ops.push(Op::Delete(format!("key-{i}").into_bytes()));
        }
        ops.insert(
            10,
            Op::AddAttribute(puffer_store::Attribute {
                name: "x".into(),
                attr_type: puffer_store::AttrType::Int,
            }),
        );
        let routed = route(ops, 4);
        let mut deletes = 0;
        for (shard, prepared) in &routed {
            assert!(prepared
                .ops
                .iter()
                .any(|op| matches!(op, Op::AddAttribute(_))));
            for op in &prepared.ops {
                if let Op::Delete(key) = op {
                    assert_eq!(shard_of(key, 4), *shard);
                    deletes += 1;
                }
            }
        }
        assert_eq!(deletes, 50);
    }
}
