//! The cluster's SCU log: groups of SCUs in deep storage, indexed in etcd.
//!
//! The ingest leader ships each group before logging it locally: the group's records
//! go to deep storage as one immutable object (named by its SCUs and the leader's
//! lease, so a deposed leader's leftovers never collide with the new leader's), then
//! one etcd transaction, fenced on the leader's election key and on the log's tail
//! being the SCU before the group, moves the tail and adds the group's index entry.
//! That transaction is the commit point: an SCU is acknowledged only after it, and
//! its number can never be given twice. Data nodes follow: read the tail, fetch the
//! groups past what they hold, apply them in order.
//!
//! A follower makes the catalog's tables before it applies SCUs past what it holds (an
//! SCU may touch a table made since). It reads the catalog's tables only when they
//! changed: with the tail, in the same etcd transaction, it reads how many tables the
//! catalog lists and the newest revision that wrote one (`TablesMark`), and compares
//! them with what it read at its last sync. Why: a round used to read and decode every
//! table entry and take the database's table lock, at every follow interval (5 ms in
//! the benchmark), beside the searches the node serves, and a read's wait for its own
//! writes is the followers' round (docs/cluster.md, Reads: the calibration's 40 runs
//! on the loopback cluster went 21 % faster, the median wait from 6.2 to 4.2 ms).
//!
//! Between rounds a follower waits its interval, or less: a reader here waiting for a
//! snapshot the node does not hold yet (the `Published` call a broker makes for its own
//! writes) wakes it at once ([`Database::want_published`]), so a read of a write just
//! made waits for one round, not for the rest of an interval first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use puffer_node::commit::{LogShipper, ShipFailure};
use puffer_node::Database;
use serde::{Deserialize, Serialize};

use crate::deep_storage::DeepStorage;
use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, Leadership};

/// Most index entries read at once by a follower.
pub const MAX_ENTRIES_PER_READ: usize = 64;
/// Most SCUs in one group (the committer's group bound): the entry holding SCU `n`
/// starts at `n - MAX_GROUP_SCUS + 1` or later.
pub const MAX_GROUP_SCUS: u64 = 256;

/// Most groups one [`ClusterLog::collect`] removes.
pub const MAX_COLLECTED_GROUPS: usize = 1000;

/// What [`ClusterLog::collect`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogCollection {
    /// Groups removed from the index.
    pub groups: usize,
    /// Their objects that could not be deleted (garbage nothing names).
    pub objects_left: usize,
    /// The first SCU the log holds after.
    pub first_kept: u64,
}

/// A group of the log, as indexed in etcd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its first SCU.
    pub first: u64,
    /// Its last SCU.
    pub last: u64,
    /// The deep-storage object with its records.
    pub object: String,
}

/// The catalog's tables as one etcd revision saw them: how many, and the newest
/// revision that wrote one. Any change to the tables between two marks changes it: a
/// table entry written in between has a newer revision than every entry before, and
/// with none written, the change can only be entries removed, fewer of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TablesMark {
    /// Table entries listed.
    count: i64,
    /// The newest revision that wrote one of them (0 with none).
    newest_revision: i64,
}

/// What a follower keeps between its rounds ([`ClusterLog::follow_round`]): the
/// catalog's tables as of its last sync.
#[derive(Clone, Debug, Default)]
pub struct FollowState {
    tables_made: Option<TablesMark>,
}

/// The log of one cluster.
#[derive(Clone, Debug)]
pub struct ClusterLog {
    etcd: Etcd,
    deep: DeepStorage,
}

impl ClusterLog {
    /// The log of `etcd`'s cluster, its groups in `deep`.
    pub fn new(etcd: Etcd, deep: DeepStorage) -> ClusterLog {
        ClusterLog { etcd, deep }
    }

    /// The last SCU committed to the log (0 if none).
    pub fn tail(&self) -> Result<u64> {
        committed_tail(&self.etcd)
    }

    /// What a follower holding SCU `held` reads first in a round, in one transaction
    /// (at one revision): the log's tail, the catalog's `TablesMark`, and the index
    /// entries of the groups from SCU `held + 1` on (at most [`MAX_ENTRIES_PER_READ`]).
    /// A follower applies whole groups, so the next group usually starts right there;
    /// where it does not (a node that loaded segments stops mid-group), the entries
    /// start later and [`ClusterLog::entries_after`] looks further back.
    fn round_start(&self, held: u64) -> Result<(u64, TablesMark, Vec<LogEntry>)> {
        let keys = self.etcd.keys();
        let (tail_key, tables_prefix) = (keys.log_tail(), keys.tables());
        let (from, end) = (
            keys.log_entry(held.saturating_add(1)),
            format!("{}\u{7f}", keys.log_index()),
        );
        let newest_table = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(1);
        let next_entries = GetOptions::new()
            .with_range(end)
            .with_limit(MAX_ENTRIES_PER_READ as i64);
        let answer = self.etcd.call(move |mut client| async move {
            client
                .txn(Txn::new().and_then(vec![
                    TxnOp::get(tail_key, None),
                    TxnOp::get(tables_prefix, Some(newest_table)),
                    TxnOp::get(from, Some(next_entries)),
                ]))
                .await
        })?;
        match answer.op_responses().as_slice() {
            [TxnOpResponse::Get(tail), TxnOpResponse::Get(tables), TxnOpResponse::Get(entries)] => {
                let tail = match tail.kvs().first() {
                    None => 0,
                    Some(kv) => parse_number(kv.key(), kv.value())?,
                };
                let mark = TablesMark {
                    count: tables.count(),
                    newest_revision: tables.kvs().first().map_or(0, |kv| kv.mod_revision()),
                };
                Ok((tail, mark, decode_entries(entries.kvs())?))
            }
            other => Err(ClusterError::Unavailable(format!(
                "etcd answered a follower's three reads (the log's tail, the catalog's \
                 tables, the index) with {} answers of other kinds",
                other.len()
            ))),
        }
    }

    /// The index entries of the groups holding SCUs after `after`, up to `tail`, in
    /// order (at most [`MAX_ENTRIES_PER_READ`]).
    pub fn entries_after(&self, after: u64) -> Result<Vec<LogEntry>> {
        let keys = self.etcd.keys();
        let from = keys.log_entry((after + 1).saturating_sub(MAX_GROUP_SCUS - 1).max(1));
        let end = format!("{}\u{7f}", keys.log_index());
        let mut entries =
            self.index_range(from, end, MAX_ENTRIES_PER_READ + MAX_GROUP_SCUS as usize)?;
        entries.retain(|entry| entry.last > after);
        entries.truncate(MAX_ENTRIES_PER_READ);
        Ok(entries)
    }

    /// The index entries with keys in `[from, end)`, at most `limit`, in order.
    fn index_range(&self, from: String, end: String, limit: usize) -> Result<Vec<LogEntry>> {
        let answer = self.etcd.call(move |mut client| async move {
            client
                .get(
                    from,
                    Some(GetOptions::new().with_range(end).with_limit(limit as i64)),
                )
                .await
        })?;
        decode_entries(answer.kvs())
    }

    /// The records (back to back, in the log's framing) of the groups holding the SCUs
    /// after `after`, up to `upto` or fewer (at most [`MAX_ENTRIES_PER_READ`] groups);
    /// they may hold SCUs outside that range too. Empty when the log holds none.
    pub fn records_between(&self, after: u64, upto: u64) -> Result<Vec<u8>> {
        let mut records = Vec::new();
        for entry in self
            .entries_after(after)?
            .iter()
            .filter(|e| e.first <= upto)
        {
            records.extend_from_slice(&self.records(entry)?);
        }
        Ok(records)
    }

    /// The records of a group.
    pub fn records(&self, entry: &LogEntry) -> Result<Vec<u8>> {
        self.deep.get(&entry.object)
    }

    /// The first SCU the log still holds (1 until groups are collected).
    pub fn first(&self) -> Result<u64> {
        read_number(&self.etcd, self.etcd.keys().log_first(), 1)
    }

    /// Removes every group wholly at or below SCU `horizon`, [`ClusterLog::collect`]
    /// after [`ClusterLog::collect`] (each holding at most [`MAX_COLLECTED_GROUPS`] in
    /// memory) until none is left or `stop` is set. One call a round was too few: a
    /// leader writing 700 groups a second outran a collection of 1,000 a minute, and
    /// etcd grew without end.
    pub fn collect_all(
        &self,
        leadership: &Leadership,
        horizon: u64,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<LogCollection> {
        let mut all = LogCollection {
            groups: 0,
            objects_left: 0,
            first_kept: self.first()?,
        };
        loop {
            let one = self.collect(leadership, horizon)?;
            all.groups += one.groups;
            all.objects_left += one.objects_left;
            all.first_kept = all.first_kept.max(one.first_kept);
            if one.groups < MAX_COLLECTED_GROUPS || stop.load(std::sync::atomic::Ordering::Acquire)
            {
                return Ok(all);
            }
        }
    }

    /// Removes the groups wholly at or below SCU `horizon` (their index entries, by
    /// transactions fenced on `leadership`, then their objects), at most
    /// [`MAX_COLLECTED_GROUPS`] per call. The caller makes sure every SCU up to
    /// `horizon` is in published segments and applied by every node that follows.
    pub fn collect(&self, leadership: &Leadership, horizon: u64) -> Result<LogCollection> {
        let keys = self.etcd.keys();
        let (from, to) = (keys.log_entry(1), keys.log_entry(horizon.saturating_add(1)));
        let mut doomed = self.index_range(from, to, MAX_COLLECTED_GROUPS)?;
        doomed.retain(|entry| entry.last <= horizon);
        let mut collection = LogCollection {
            groups: 0,
            objects_left: 0,
            first_kept: self.first()?,
        };
        // One etcd transaction holds at most 128 operations.
        for chunk in doomed.chunks(100) {
            let first_kept = chunk.iter().map(|e| e.last + 1).max().unwrap_or(1);
            let mut ops: Vec<TxnOp> = chunk
                .iter()
                .map(|e| TxnOp::delete(keys.log_entry(e.first), None))
                .collect();
            ops.push(TxnOp::put(keys.log_first(), first_kept.to_string(), None));
            leadership.write(ops)?;
            collection.groups += chunk.len();
            collection.first_kept = collection.first_kept.max(first_kept);
            // No entry names them now; one left behind is garbage, never read.
            for entry in chunk {
                if self.deep.delete(&entry.object).is_err() {
                    collection.objects_left += 1;
                }
            }
        }
        Ok(collection)
    }

    /// Brings `database` (a follower) up to the log's tail: its tables first (from the
    /// catalog, which lists every table before any SCU touches it), then the groups
    /// past what it holds. Returns the SCU it holds after.
    pub fn catch_up(&self, database: &Database) -> puffer_query::Result<u64> {
        self.follow_round(database, &mut FollowState::default())
    }

    /// One round of a follower that keeps `state` between rounds: as
    /// [`ClusterLog::catch_up`], making the catalog's tables only when they changed
    /// since its last sync. `database`'s catalog must be the one in this log's etcd
    /// (as every node's is), whose tables the mark reads.
    pub fn follow_round(
        &self,
        database: &Database,
        state: &mut FollowState,
    ) -> puffer_query::Result<u64> {
        let mut held = database.published();
        let (tail, tables, next) = self.round_start(held)?;
        if tail <= held {
            return Ok(held);
        }
        // Read with the tail: every table its SCUs touch is in the catalog as of this
        // mark. Unchanged since the last sync, the tables made then are those (an entry
        // with the same revision was there, unchanged, all along).
        if state.tables_made != Some(tables) {
            state.tables_made = None;
            database.sync_tables()?;
            state.tables_made = Some(tables);
        }
        let mut entries = next;
        // Another caller may have applied some meanwhile (`follow` skips what is held).
        held = database.published();
        while held < tail {
            if entries.first().is_none_or(|e| e.first > held + 1) {
                entries = self.entries_after(held)?;
            }
            if entries.first().is_none_or(|e| e.first > held + 1) {
                let first = self.first()?;
                if held + 1 < first {
                    return Err(ClusterError::Invalid(format!(
                        "the log was collected past what this node holds (SCU {held}; the log \
                         keeps SCUs from {first}): give the node an empty data directory, \
                         and it loads the published segments"
                    ))
                    .into());
                }
            }
            if entries.is_empty() {
                return Err(ClusterError::Corrupt {
                    key: self.etcd.keys().log_index(),
                    detail: format!(
                        "the log's tail is {tail}, but no group holds SCU {}",
                        held + 1
                    ),
                }
                .into());
            }
            for entry in entries.iter().filter(|e| e.first <= tail) {
                if entry.last > held {
                    held = database.follow(self.records(entry)?)?;
                }
            }
            entries = Vec::new();
        }
        Ok(held)
    }
}

/// Index entries as etcd holds them.
fn decode_entries(kvs: &[etcd_client::KeyValue]) -> Result<Vec<LogEntry>> {
    kvs.iter()
        .map(|kv| {
            serde_json::from_slice(kv.value()).map_err(|e| ClusterError::Corrupt {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                detail: e.to_string(),
            })
        })
        .collect()
}

/// The last SCU committed to `etcd`'s cluster log (0 if none): an ingest leader
/// acknowledges an SCU only once it is there, so every acknowledged SCU is at or below
/// it (what a node without the leader still knows, from etcd alone).
pub fn committed_tail(etcd: &Etcd) -> Result<u64> {
    read_number(etcd, etcd.keys().log_tail(), 0)
}

/// The number stored at `key` ([`parse_number`]), `absent` when there is none.
fn read_number(etcd: &Etcd, key: String, absent: u64) -> Result<u64> {
    let answer = etcd.call(move |mut client| async move { client.get(key, None).await })?;
    match answer.kvs().first() {
        None => Ok(absent),
        Some(kv) => parse_number(kv.key(), kv.value()),
    }
}

/// A decimal number stored at `key` (the log's tail and first SCU, a node's progress).
pub fn parse_number(key: &[u8], value: &[u8]) -> Result<u64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ClusterError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            detail: format!("not a number: {:?}", String::from_utf8_lossy(value)),
        })
}

/// The ingest leader's shipper: groups to deep storage, then the fenced commit.
#[derive(Debug)]
pub struct LeaderShipper {
    log: ClusterLog,
    leadership: Leadership,
    attempts: std::sync::atomic::AtomicU64,
}

impl LeaderShipper {
    /// Ships to `log` while `leadership` (of the ingest election) holds.
    pub fn new(log: ClusterLog, leadership: Leadership) -> LeaderShipper {
        LeaderShipper {
            log,
            leadership,
            attempts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The leadership it ships under.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }
}

impl LogShipper for LeaderShipper {
    fn ship(&self, first: u64, last: u64, records: &[u8]) -> std::result::Result<(), ShipFailure> {
        // Unique per attempt: an attempt whose commit failed leaves its object behind
        // (garbage no index entry names), and the retry of the same SCUs must not
        // collide with it.
        let attempt = self.attempts.fetch_add(1, Ordering::Relaxed);
        let object = format!(
            "log/{first:020}-{last:020}-{:016x}-{attempt}",
            self.leadership.lease()
        );
        self.log
            .deep
            .put(&object, records)
            .map_err(|e| ShipFailure::NotShipped(e.to_string()))?;
        let keys = self.log.etcd.keys();
        let entry = LogEntry {
            first,
            last,
            object,
        };
        let tail_before = if first == 1 {
            Compare::version(keys.log_tail(), CompareOp::Equal, 0)
        } else {
            Compare::value(keys.log_tail(), CompareOp::Equal, (first - 1).to_string())
        };
        self.leadership
            .write_when(
                vec![tail_before],
                vec![
                    TxnOp::put(keys.log_tail(), last.to_string(), None),
                    TxnOp::put(
                        keys.log_entry(first),
                        serde_json::to_vec(&entry).expect("an entry encodes"),
                        None,
                    ),
                ],
            )
            .map_err(|e| match e {
                // Definitely not committed: another leader, or a tail moved by one.
                ClusterError::Fenced(reason) => ShipFailure::Unknown(format!(
                    "not committed: {reason}; this node must catch up before it writes"
                )),
                other => ShipFailure::Unknown(other.to_string()),
            })
    }
}

/// How often a follower makes the catalog's new tables even when no SCU needs them.
pub const TABLE_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// A follower's loop: catches `database` up with the log every `interval` until
/// stopped; the last error, if the last round failed, is kept for status.
pub struct Follower {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    last_error: Arc<std::sync::Mutex<Option<String>>>,
}

impl Follower {
    /// Starts following. `database`'s catalog must be the one in `log`'s etcd (see
    /// [`ClusterLog::follow_round`]).
    pub fn start(log: ClusterLog, database: Arc<Database>, interval: Duration) -> Follower {
        let stop = Arc::new(AtomicBool::new(false));
        let last_error = Arc::new(std::sync::Mutex::new(None));
        let thread = {
            let (stop, last_error) = (stop.clone(), last_error.clone());
            std::thread::Builder::new()
                .name("puffer-follow".into())
                .spawn(move || {
                    let mut state = FollowState::default();
                    let mut tables_synced = std::time::Instant::now();
                    let mut wants_seen = 0;
                    while !stop.load(Ordering::Acquire) {
                        // Tables made without SCUs yet show up here too, within a second.
                        if tables_synced.elapsed() >= TABLE_SYNC_INTERVAL {
                            let _ = database.sync_tables();
                            tables_synced = std::time::Instant::now();
                        }
                        let round = log.follow_round(&database, &mut state);
                        *last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                            round.err().map(|e| e.to_string());
                        // Woken early by a reader waiting for a snapshot not yet held.
                        wants_seen = database.await_wanted(wants_seen, interval);
                    }
                })
                .expect("a thread starts")
        };
        Follower {
            stop,
            thread: Some(thread),
            last_error,
        }
    }

    /// Why the last round failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
