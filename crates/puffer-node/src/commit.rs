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
use std::time::Duration;

use crate::catalog::Catalog;
use crate::message::{ReplicaRequest, ShardReplicas};
use puffer_store::clock::{Clock, SystemClock};
use puffer_store::fs::{Fs, RealFs};
use puffer_store::wal::{self, LogWriter, Op};
use puffer_store::{validate_ops, PreparedOps, ReadOptions, StoreError, WriteOp};

use crate::layout::Routing;
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

/// What the committer thread is given.
enum Job {
    /// An SCU to number, log, apply and acknowledge (groups with its neighbours).
    Write(PreparedScu, Reply),
    /// Records numbered elsewhere (the cluster's log), to log, apply and publish in
    /// their order.
    Follow(Vec<u8>, Reply),
    /// Number from the published SCU again (after a group whose shipping had an
    /// unknown outcome; the shipped log then says whether it was committed).
    Resync(Reply),
    /// Work between two SCUs (taking a shard on or letting it go), given the published
    /// SCU: every SCU up to it is applied and none past it is.
    Exclusive(Exclusive, Reply),
}

/// Work run on the committer's thread between two SCUs (see [`Committer::run_exclusive`]).
type Exclusive = Box<dyn FnOnce(u64) -> Result<u64> + Send>;

/// Why SCUs could not be shipped.
#[derive(Debug)]
pub enum ShipFailure {
    /// They were not shipped (nothing of them is anywhere beyond this node): the
    /// writers get a retryable error and their numbers are used again.
    NotShipped(String),
    /// They may or may not have been shipped (a deadline passed, the node lost its
    /// right to write): the committer stops, and the node catches up from the
    /// shipped log before it writes again.
    Unknown(String),
}

/// Where a group of SCUs must be durable beyond this node before it is logged here,
/// applied or acknowledged: the cluster's log in deep storage. A single node has none.
pub trait LogShipper: Send + Sync + std::fmt::Debug {
    /// Ships SCUs `first..=last`, `records` in the log's framing
    /// (`wal::encode_record_parts`, back to back). Called on the committer thread.
    fn ship(&self, first: u64, last: u64, records: &[u8]) -> std::result::Result<(), ShipFailure>;
}

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
    queue: Mutex<Option<SyncSender<Job>>>,
    /// Where schemas changed by SCUs are recorded once applied.
    catalog: OnceLock<Arc<dyn Catalog>>,
    /// Where groups are shipped before they are logged here (cluster ingest nodes).
    shipper: OnceLock<Arc<dyn LogShipper>>,
    /// Whether SCUs come only from [`Committer::follow`] (cluster data nodes, and an
    /// ingest node catching up): local writes are refused.
    following: std::sync::atomic::AtomicBool,
    /// Whether the committer stopped because a group's shipping had an unknown
    /// outcome (the one stop it can come back from: see [`Committer::resume`]).
    ship_stopped: std::sync::atomic::AtomicBool,
    /// What readers here wait for ([`Committer::want_published`]), and the
    /// follower's wake-up when a reader asks.
    wants: Mutex<Wants>,
    wanted: std::sync::Condvar,
    /// Readers blocked in [`Committer::wait_published`]: a publication wakes them
    /// only when there are some, so the committer's path costs one atomic load
    /// otherwise.
    published_waiters: std::sync::atomic::AtomicUsize,
    /// Held to wake [`Committer::wait_published`]'s readers (it guards nothing: the
    /// published SCU is the atomic, checked under it).
    publication: Mutex<()>,
    published_changed: std::sync::Condvar,
}

/// Readers' waits for snapshots not yet published.
#[derive(Default)]
struct Wants {
    /// Wants so far: a follower runs a round for each new one (it passes the count it
    /// saw), so a want above anything the log holds (a bad `at_least`) costs one round
    /// and does not hold the wake-up off for the wants after it.
    count: u64,
    /// The highest SCU wanted: once it is published, every want is met.
    highest: u64,
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
                shipper: OnceLock::new(),
                following: std::sync::atomic::AtomicBool::new(false),
                ship_stopped: std::sync::atomic::AtomicBool::new(false),
                wants: Mutex::new(Wants::default()),
                wanted: std::sync::Condvar::new(),
                published_waiters: std::sync::atomic::AtomicUsize::new(0),
                publication: Mutex::new(()),
                published_changed: std::sync::Condvar::new(),
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

    /// Waits until SCU `seq` is published here, at most `bound`; whether it is. Woken
    /// by the publication itself (not polled: a poll every millisecond added half a
    /// millisecond to every read of a node's own write on a cluster).
    pub fn wait_published(&self, seq: u64, bound: Duration) -> bool {
        if self.published() >= seq {
            return true;
        }
        let deadline = std::time::Instant::now() + bound;
        self.want_published(seq);
        let inner = &self.inner;
        // Counted before the check under the lock: a publication either comes before
        // the check (seen there) or sees the count and wakes the wait.
        inner.published_waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = inner.publication.lock().unwrap_or_else(|e| e.into_inner());
        let reached = loop {
            if self.published() >= seq {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break false;
            }
            guard = inner
                .published_changed
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(guard);
        inner.published_waiters.fetch_sub(1, Ordering::SeqCst);
        reached
    }

    /// Tells a follower that a reader here waits for SCU `seq`: a follower waiting
    /// between rounds ([`Committer::await_wanted`]) starts its next one now rather than
    /// at the end of its interval. Without it, a read of the node's own write waited
    /// half a follow interval on average before the follower even looked.
    pub fn want_published(&self, seq: u64) {
        if seq <= self.published() {
            return;
        }
        let mut wants = self.inner.wants.lock().unwrap_or_else(|e| e.into_inner());
        wants.count += 1;
        wants.highest = wants.highest.max(seq);
        self.inner.wanted.notify_all();
    }

    /// A follower's wait between rounds: returns when a reader has wanted an SCU not
    /// yet published since the follower saw `seen` wants
    /// ([`Committer::want_published`]), or after `timeout`; gives the wants counted
    /// then, to pass as `seen` next time (so that a want the last round could not meet
    /// does not start rounds back to back).
    pub fn await_wanted(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = std::time::Instant::now() + timeout;
        let mut wants = self.inner.wants.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if wants.count != seen && wants.highest > self.published() {
                return wants.count;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return wants.count;
            }
            wants = self
                .inner
                .wanted
                .wait_timeout(wants, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
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

    /// Ships every group to `shipper` before logging it here (set before
    /// [`Committer::start`]; a second shipper is ignored).
    pub fn attach_shipper(&self, shipper: Arc<dyn LogShipper>) {
        let _ = self.inner.shipper.set(shipper);
    }

    /// Takes SCUs only from [`Committer::follow`] (`true`), or numbers its own
    /// (`false`, the default). A node that becomes the cluster's ingest leader catches
    /// up by following, then switches.
    pub fn set_following(&self, following: bool) {
        self.inner.following.store(following, Ordering::SeqCst);
    }

    /// Whether it takes SCUs only from [`Committer::follow`].
    pub fn is_following(&self) -> bool {
        self.inner.following.load(Ordering::SeqCst)
    }

    /// Logs, applies and publishes SCUs numbered elsewhere (`records` as
    /// [`LogShipper::ship`] got them). Those at or below the published SCU are skipped
    /// (already here); the rest must continue it without a gap. Returns the published
    /// SCU after.
    pub fn follow(&self, records: Vec<u8>) -> Result<u64> {
        let inner = &self.inner;
        inner.check_running()?;
        if !self.is_following() {
            return Err(QueryError::Invalid(
                "this node numbers its own SCUs; it takes none numbered elsewhere".into(),
            ));
        }
        wal::decode_records(&records)
            .map_err(|e| QueryError::Invalid(format!("shipped SCUs that do not decode: {e}")))?;
        self.run_job(|reply| Job::Follow(records, reply))
    }

    /// Hands a job to the committer thread (waiting for room in its bounded queue)
    /// and waits for its answer.
    fn run_job(&self, job: impl FnOnce(Reply) -> Job) -> Result<u64> {
        let queue = self
            .inner
            .queue
            .lock()
            .expect("queue lock")
            .clone()
            .ok_or_else(|| StoreError::Stopped("the database's committer is not running".into()))?;
        let (reply, answer) = mpsc::channel();
        queue
            .send(job(reply))
            .map_err(|_| StoreError::Stopped("the database's committer has stopped".into()))?;
        answer
            .recv()
            .map_err(|_| StoreError::Stopped("the database's committer has stopped".into()))?
    }

    /// Runs `work` on the committer's thread between two SCUs, given the published SCU
    /// (every SCU up to it is applied everywhere it goes, none past it is), and returns
    /// its answer. Jobs queued behind it wait: keep it short.
    pub fn run_exclusive(
        &self,
        work: impl FnOnce(u64) -> Result<u64> + Send + 'static,
    ) -> Result<u64> {
        self.inner.check_running()?;
        self.run_job(|reply| Job::Exclusive(Box::new(work), reply))
    }

    /// Whether the committer stopped because shipping a group had an unknown outcome.
    pub fn ship_stopped(&self) -> bool {
        self.inner.ship_stopped.load(Ordering::SeqCst)
    }

    /// Takes SCUs again after a stop by [`ShipFailure::Unknown`]: only while following
    /// (so that no local write can come in), it numbers from the published SCU again
    /// and clears the stop; the caller then catches up with the shipped log, which
    /// holds the group if it was committed, before it writes again. Returns the
    /// published SCU.
    pub fn resume(&self) -> Result<u64> {
        let inner = &self.inner;
        if !inner.ship_stopped.load(Ordering::SeqCst) {
            return Err(QueryError::Invalid(
                "the committer did not stop on a shipping failure".into(),
            ));
        }
        if !self.is_following() {
            return Err(QueryError::Invalid(
                "resume only while following: no write may come in meanwhile".into(),
            ));
        }
        let published = self.run_job(Job::Resync)?;
        *inner.stopped.lock().expect("stopped lock") = None;
        inner.ship_stopped.store(false, Ordering::SeqCst);
        Ok(published)
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
        let next_seq = match files.last() {
            // The log says where numbering stands. A seeded database's shards hold
            // different checkpoints, and its log starts past the lowest of what they
            // hold (`crate::seed`): the SCUs after it are taken again, and each shard
            // skips those it holds.
            Some((first, _)) => (last_seq + 1).max(*first),
            // No log yet: numbering continues above every checkpoint (shards that kept
            // their own log before have checkpoints in their own numbering).
            None => (last_seq + 1).max(checkpoints + 1),
        };
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
        if self.is_following() {
            return Err(StoreError::Unavailable(
                "this node follows the cluster's log and takes no writes; send them to the \
                 ingest leader"
                    .into(),
            )
            .into());
        }
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
                let replicas = part.table.replica(*shard as usize);
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
        match queue.try_send(Job::Write(scu, reply)) {
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
        Ok(self
            .freshness_floor(bound)
            .max(max_sealed()?)
            .max(read.min_snapshot)
            .min(published))
    }

    /// The oldest published snapshot that holds every SCU acknowledged here longer
    /// than `bound` ago: what a read with that freshness bound must see at least. On
    /// a cluster the ingest leader answers it for every node (it acknowledged the
    /// writes; a follower's clock saw them only as it applied them).
    pub fn freshness_floor(&self, bound: Duration) -> u64 {
        let published = self.published();
        let now = self.inner.clock.now_micros();
        let cutoff = now.saturating_sub(bound.as_micros().min(u128::from(u64::MAX)) as u64);
        self.inner.acked_by(cutoff, published)
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
        let shards = route(ops, table.shards, table.routing());
        prepared.push(PreparedPart { table, shards });
    }
    Ok(PreparedScu {
        body,
        parts: prepared,
    })
}

/// Splits a table's operations by shard (a schema change goes to every shard, in the
/// same place among its operations) and flattens the puts.
fn route(ops: Vec<Op>, shards: u32, routing: Routing) -> Vec<(u32, PreparedOps)> {
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
        per_shard[routing.shard_of(key, shards) as usize].push(op);
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

/// Applies to `replicas`, shard `shard` of the `shards` shards of table `uid` (a shard
/// being taken on, not reachable by the committer yet), the parts of the SCUs in
/// `records` (in the log's framing) numbered after `after` and up to `upto`, which
/// must follow on from `after` without a gap. Returns the last SCU applied (`after`
/// if the records hold none past it); SCUs the shard holds already are skipped by it.
pub fn apply_to_shard(
    uid: u64,
    (shards, routing): (u32, Routing),
    shard: u32,
    replicas: &Arc<dyn ShardReplicas>,
    records: &[u8],
    after: u64,
    upto: u64,
) -> Result<u64> {
    let records = wal::decode_records(records)
        .map_err(|e| QueryError::Invalid(format!("SCUs that do not decode: {e}")))?;
    let mut last = after;
    for record in records.iter().filter(|r| r.seq > after && r.seq <= upto) {
        if record.seq != last + 1 {
            return Err(StoreError::InvalidBatch(format!(
                "the SCUs to take shard {shard} on skip from {last} to {}",
                record.seq
            ))
            .into());
        }
        last = record.seq;
        let parts = decode_body(record.body).map_err(|e| {
            StoreError::InvalidBatch(format!("SCU {} does not decode: {e}", record.seq))
        })?;
        for (part_uid, ops) in parts {
            if part_uid != uid {
                continue;
            }
            for (s, prepared) in route(ops, shards, routing) {
                if s != shard {
                    continue;
                }
                send_apply(replicas, record.seq, record.commit_micros, prepared, true)?;
                freeze_full(std::slice::from_ref(replicas));
            }
        }
    }
    Ok(last)
}

/// Applies SCU `seq`'s operations on one shard to each of its replicas (the last takes
/// them, the others a copy).
fn send_apply(
    replicas: &Arc<dyn ShardReplicas>,
    seq: u64,
    commit_micros: u64,
    prepared: PreparedOps,
    replaying: bool,
) -> Result<()> {
    let apply = |ops| ReplicaRequest::Apply {
        seq,
        commit_micros,
        ops,
        replaying,
    };
    let last = replicas.replica_count() - 1;
    for replica in 0..last {
        replicas
            .send_to(replica, apply(prepared.clone()))?
            .into_done()?;
    }
    replicas.send_to(last, apply(prepared))?.into_done()?;
    Ok(())
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
    /// Publishes SCU `seq` (every SCU up to it applied everywhere it goes) and wakes
    /// the readers waiting for it ([`Committer::wait_published`]).
    fn publish(&self, seq: u64) {
        self.published.store(seq, Ordering::SeqCst);
        if self.published_waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.publication.lock().unwrap_or_else(|e| e.into_inner());
            self.published_changed.notify_all();
        }
    }

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
                let shards = route(ops, table.shards, table.routing());
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
                let replicas = part.table.replica(shard as usize);
                send_apply(&replicas, seq, commit_micros, prepared, replaying)?;
                touched.push(replicas);
            }
            if changes_schema {
                part.table.refresh_schema()?;
                // A follower's schema changes were recorded by the node that made them.
                let following = self.following.load(Ordering::SeqCst);
                if let Some(catalog) = self.catalog.get().filter(|_| !following) {
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

    fn run(self: Arc<Self>, receiver: Receiver<Job>, log: LogWriter, next_seq: u64) {
        let mut log = log;
        let mut next_seq = next_seq;
        let mut log_bytes = 0u64;
        let mut waiting: Option<Job> = None;
        loop {
            let job = match waiting.take() {
                Some(job) => job,
                None => match receiver.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
            };
            match job {
                Job::Write(scu, reply) => {
                    let mut group = vec![(scu, reply)];
                    while group.len() < MAX_GROUP_SCUS {
                        match receiver.try_recv() {
                            Ok(Job::Write(scu, reply)) => group.push((scu, reply)),
                            Ok(other) => {
                                waiting = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.commit_group(group, &mut log, &mut next_seq, &mut log_bytes);
                }
                Job::Resync(reply) => {
                    let published = self.published.load(Ordering::SeqCst);
                    next_seq = published + 1;
                    let _ = reply.send(Ok(published));
                }
                Job::Follow(records, reply) => {
                    let answer =
                        self.follow_records(&records, &mut log, &mut next_seq, &mut log_bytes);
                    let _ = reply.send(answer);
                }
                Job::Exclusive(work, reply) => {
                    let _ = reply.send(work(self.published.load(Ordering::SeqCst)));
                }
            }
            self.rotate_if_full(&mut log, next_seq, &mut log_bytes);
        }
    }

    /// Logs, applies and publishes records numbered elsewhere.
    fn follow_records(
        &self,
        records: &[u8],
        log: &mut LogWriter,
        next_seq: &mut u64,
        log_bytes: &mut u64,
    ) -> Result<u64> {
        self.check_running()?;
        let published = self.published.load(Ordering::SeqCst);
        let records = wal::decode_records(records)
            .map_err(|e| QueryError::Invalid(format!("shipped SCUs that do not decode: {e}")))?;
        let new: Vec<&wal::LoggedRecord<'_>> =
            records.iter().filter(|r| r.seq > published).collect();
        let Some(first) = new.first() else {
            return Ok(published);
        };
        if first.seq != published + 1 || first.seq != *next_seq {
            return Err(StoreError::InvalidBatch(format!(
                "shipped SCUs start at {}; this node holds every SCU up to {published} and \
                 needs {} next",
                first.seq,
                published + 1
            ))
            .into());
        }
        let mut encoded = Vec::new();
        let mut decoded = Vec::with_capacity(new.len());
        for record in &new {
            wal::encode_record_parts(record.seq, record.commit_micros, record.body, &mut encoded);
            let parts = decode_body(record.body).map_err(|e| {
                StoreError::InvalidBatch(format!("shipped SCU {} does not decode: {e}", record.seq))
            })?;
            decoded.push((record.seq, record.commit_micros, parts));
        }
        if let Err(e) = log.append_durably(&encoded) {
            let reason = format!("the database log write failed: {e}");
            self.stop(reason.clone());
            return Err(StoreError::Stopped(reason).into());
        }
        *log_bytes += encoded.len() as u64;
        for (seq, commit_micros, parts) in decoded {
            *next_seq = seq + 1;
            let prepared = self.route_logged(parts);
            // As a replay: a replica that holds the SCU already (a table adopted with a
            // schema newer than the SCU) takes it without complaint.
            match self.apply(seq, commit_micros, prepared, true) {
                Ok(touched) => {
                    self.record_ack(seq, commit_micros);
                    self.publish(seq);
                    freeze_full(&touched);
                }
                Err(e) => {
                    let reason = format!(
                        "applying shipped SCU {seq} failed: {e}; the database takes no more \
                         SCUs until it is reopened (the SCU is in its log and is replayed then)"
                    );
                    self.stop(reason.clone());
                    return Err(StoreError::Stopped(reason).into());
                }
            }
        }
        Ok(self.published.load(Ordering::SeqCst))
    }

    fn record_ack(&self, seq: u64, commit_micros: u64) {
        let mut acks = self.acks.lock().expect("acks lock");
        if acks.len() >= MAX_ACK_TIMES {
            acks.pop_front();
        }
        acks.push_back((seq, commit_micros));
    }

    /// Starts a new log file once the current one is full, and removes old ones.
    fn rotate_if_full(&self, log: &mut LogWriter, next_seq: u64, log_bytes: &mut u64) {
        if *log_bytes < LOG_FILE_BYTES {
            return;
        }
        match LogWriter::create(self.fs.as_ref(), &self.log_dir, next_seq) {
            Ok(new_log) => {
                *log = new_log;
                *log_bytes = 0;
                if let Err(e) = self.remove_old_files() {
                    self.stop(format!("removing old log files failed: {e}"));
                }
            }
            Err(e) if e.is_disk_full() => {
                // The current file goes on; the next group tries again. The new file's
                // start, if any, would hold a log of no SCU: removed.
                let _ = self.fs.remove(&self.log_dir.join(wal::file_name(next_seq)));
            }
            Err(e) => self.stop(format!("starting a new log file failed: {e}")),
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
        if self.following.load(Ordering::SeqCst) {
            for (_, reply) in group {
                let _ = reply.send(Err(StoreError::Unavailable(
                    "this node follows the cluster's log and takes no writes".into(),
                )
                .into()));
            }
            return;
        }
        let now = self.clock.now_micros();
        let first = *next_seq;
        let mut encoded = Vec::new();
        let mut numbered = Vec::with_capacity(group.len());
        for (scu, reply) in group {
            let seq = *next_seq;
            *next_seq += 1;
            wal::encode_record_parts(seq, now, &scu.body, &mut encoded);
            numbered.push((seq, scu.parts, reply));
        }
        if let Some(shipper) = self.shipper.get() {
            let failure = match shipper.ship(first, *next_seq - 1, &encoded) {
                Ok(()) => None,
                Err(ShipFailure::NotShipped(reason)) => {
                    // Nothing of the group is anywhere: its numbers are free again.
                    *next_seq = first;
                    Some((
                        false,
                        format!("the SCU could not be made durable in the cluster's log: {reason}"),
                    ))
                }
                Err(ShipFailure::Unknown(reason)) => {
                    self.ship_stopped.store(true, Ordering::SeqCst);
                    let reason = format!(
                        "shipping SCUs {first}..={} had an unknown outcome: {reason}; this \
                         node takes no writes until it has caught up with the cluster's log",
                        *next_seq - 1
                    );
                    self.stop(reason.clone());
                    Some((true, reason))
                }
            };
            if let Some((stopped, reason)) = failure {
                for (_, _, reply) in numbered {
                    let error = if stopped {
                        StoreError::Stopped(reason.clone())
                    } else {
                        StoreError::Unavailable(reason.clone())
                    };
                    let _ = reply.send(Err(error.into()));
                }
                return;
            }
        }
        if let Err(e) = log.append_durably(&encoded) {
            // A group already shipped to a cluster's log is there for every follower:
            // it cannot be refused any more, so a full disk stops this node as any
            // failed write does.
            if let (StoreError::DiskFull { path, source }, None) = (&e, self.shipper.get()) {
                // Taken back from the log: the group is refused, its numbers are free
                // again, and writes go on once space is freed.
                *next_seq = first;
                let detail = source.to_string();
                for (_, _, reply) in numbered {
                    let _ = reply.send(Err(StoreError::disk_full(path, detail.clone()).into()));
                }
                return;
            }
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
                    self.record_ack(seq, now);
                    self.publish(seq);
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
    use std::time::Duration;

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
        let routed = route(ops, 4, Routing::KeyHash);
        let mut deletes = 0;
        for (shard, prepared) in &routed {
            assert!(prepared
                .ops
                .iter()
                .any(|op| matches!(op, Op::AddAttribute(_))));
            for op in &prepared.ops {
                if let Op::Delete(key) = op {
                    assert_eq!(crate::layout::shard_of(key, 4), *shard);
                    deletes += 1;
                }
            }
        }
        assert_eq!(deletes, 50);
    }

    /// A committer with a short queue and small SCUs, not started (its waits and
    /// wants are tested without a log thread).
    fn small_committer(dir: &Path) -> Arc<Committer> {
        let options = CommitOptions {
            queue_len: 4,
            max_ops_per_scu: 4,
        };
        Arc::new(Committer::new(dir, options))
    }

    #[test]
    fn a_publication_wakes_the_readers_waiting_for_it_and_no_earlier_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let committer = small_committer(dir.path());
        committer.inner.publish(5);
        // Published already: no wait at all; not published: the bound runs out.
        assert!(committer.wait_published(5, Duration::ZERO));
        assert!(!committer.wait_published(7, Duration::from_millis(20)));
        assert_eq!(committer.inner.published_waiters.load(Ordering::SeqCst), 0);
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let committer = committer.clone();
                std::thread::spawn(move || {
                    let started = std::time::Instant::now();
                    let reached = committer.wait_published(8, Duration::from_secs(60));
                    (reached, committer.published(), started.elapsed())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        // SCU 7 is not what they wait for: they go on waiting.
        committer.inner.publish(7);
        std::thread::sleep(Duration::from_millis(20));
        assert!(readers.iter().all(|reader| !reader.is_finished()));
        committer.inner.publish(8);
        for reader in readers {
            let (reached, published, waited) = reader.join().unwrap();
            assert!(reached);
            assert_eq!(published, 8);
            assert!(waited < Duration::from_secs(30), "woken after {waited:?}");
        }
        // Nobody waits any more: a publication wakes no one.
        assert_eq!(committer.inner.published_waiters.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_want_above_the_published_snapshot_wakes_the_follower_and_no_other_does() {
        let dir = tempfile::tempdir().unwrap();
        let committer = small_committer(dir.path());
        committer.inner.published.store(5, Ordering::SeqCst);
        // Nothing wanted, or only what is published: the wait runs out, no want counted.
        assert_eq!(committer.await_wanted(0, Duration::from_millis(20)), 0);
        committer.want_published(4);
        committer.want_published(5);
        assert_eq!(committer.await_wanted(0, Duration::from_millis(20)), 0);
        // A reader wanting SCU 9 wakes a follower that would otherwise wait a minute.
        let waiting = {
            let committer = committer.clone();
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                (
                    committer.await_wanted(0, Duration::from_secs(60)),
                    started.elapsed(),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        committer.want_published(9);
        let (seen, waited) = waiting.join().unwrap();
        assert_eq!(seen, 1);
        assert!(waited < Duration::from_secs(30), "woken after {waited:?}");
        // Seen already and not yet met: the next wait is a whole one, not a spin.
        let started = std::time::Instant::now();
        assert_eq!(committer.await_wanted(seen, Duration::from_millis(50)), 1);
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Met by the follower's round: nothing is waited for any more.
        committer.inner.published.store(9, Ordering::SeqCst);
        assert_eq!(committer.await_wanted(0, Duration::from_millis(20)), 1);
        // A want the log cannot meet (far past its tail) costs one round and does not
        // stop a later, lower want from waking the follower.
        committer.want_published(1_000_000);
        assert_eq!(committer.await_wanted(1, Duration::from_millis(20)), 2);
        assert_eq!(committer.await_wanted(2, Duration::from_millis(20)), 2);
        committer.want_published(12);
        let started = std::time::Instant::now();
        assert_eq!(committer.await_wanted(2, Duration::from_secs(60)), 3);
        assert!(started.elapsed() < Duration::from_secs(30), "a whole wait");
    }
}
