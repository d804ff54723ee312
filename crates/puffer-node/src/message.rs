//! Replicas reached through request messages.
//!
//! Whoever uses a shard (a [`crate::Table`], the [`crate::commit::Committer`]) talks to
//! its replicas only in [`ReplicaRequest`]s and [`ReplicaResponse`]s: plain data that
//! serializes, so that a replica on another node can answer the same messages over
//! the network without any caller changing. [`ShardReplicas`] is the callers' view of
//! one shard's replicas; this node's implementation is the [`ShardGroup`] of the
//! adaptive node, whose replicas answer from their bounded request queues
//! ([`serve`] is the replica side of every message).

use std::sync::mpsc;
use std::sync::Arc;

use puffer_index::Construction;
use puffer_store::stage::TextStage;
use puffer_store::{
    AggregateQuery, AggregateResult, ColumnsResult, Predicate, PreparedOps, Query, RawRecord,
    ReadOptions, Record, Result, Schema, SearchResult, Shard, ShardStats, SnapshotInfo, StoreError,
    Watermarks,
};
use serde::{Deserialize, Serialize};

use crate::serving::{reconcile, LayerState, ShardGroup};

/// A read of one shard, answered by any replica that holds the snapshot it asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReadRequest {
    /// The record with this key.
    Get { key: Vec<u8>, read: ReadOptions },
    /// The record with this key as stored, with the schema that decodes it.
    GetRaw { key: Vec<u8>, read: ReadOptions },
    /// Records matching a query.
    Search { query: Query },
    /// The projected columns of the records matching a query (rows in no particular
    /// order; see `puffer_store::columns`).
    Columns { query: Query },
    /// How many records match a predicate.
    Count {
        predicate: Predicate,
        read: ReadOptions,
    },
    /// Aggregates (counts, sums, minima, maxima, averages) of the records matching a
    /// predicate, grouped by one attribute or not, as partial states that merge (see
    /// `puffer_store::aggregate`).
    Aggregate { query: AggregateQuery },
}

impl ReadRequest {
    /// The read's freshness and snapshot options.
    pub fn read_options(&self) -> ReadOptions {
        match self {
            ReadRequest::Get { read, .. }
            | ReadRequest::GetRaw { read, .. }
            | ReadRequest::Count { read, .. } => *read,
            ReadRequest::Search { query } | ReadRequest::Columns { query } => query.read,
            ReadRequest::Aggregate { query } => query.read,
        }
    }

    /// Which records it reads (`None` for a read of one key).
    pub fn predicate(&self) -> Option<&Predicate> {
        match self {
            ReadRequest::Get { .. } | ReadRequest::GetRaw { .. } => None,
            ReadRequest::Search { query } | ReadRequest::Columns { query } => {
                Some(&query.predicate)
            }
            ReadRequest::Aggregate { query } => Some(&query.predicate),
            ReadRequest::Count { predicate, .. } => Some(predicate),
        }
    }

    /// The same read at snapshot `min_snapshot` or a newer one.
    pub fn at_least(&self, min_snapshot: u64) -> ReadRequest {
        let mut request = self.clone();
        match &mut request {
            ReadRequest::Get { read, .. }
            | ReadRequest::GetRaw { read, .. }
            | ReadRequest::Count { read, .. } => {
                read.min_snapshot = read.min_snapshot.max(min_snapshot);
            }
            ReadRequest::Search { query } | ReadRequest::Columns { query } => {
                query.read.min_snapshot = query.read.min_snapshot.max(min_snapshot);
            }
            ReadRequest::Aggregate { query } => {
                query.read.min_snapshot = query.read.min_snapshot.max(min_snapshot);
            }
        }
        request
    }

    /// The same search or count under condition `predicate` (a get is unchanged).
    pub fn with_predicate(&self, predicate: Predicate) -> ReadRequest {
        let mut request = self.clone();
        match &mut request {
            ReadRequest::Get { .. } | ReadRequest::GetRaw { .. } => {}
            ReadRequest::Count { predicate: p, .. } => *p = predicate,
            ReadRequest::Search { query } | ReadRequest::Columns { query } => {
                query.predicate = predicate
            }
            ReadRequest::Aggregate { query } => query.predicate = predicate,
        }
        request
    }

    /// The same read at exactly snapshot `at`.
    pub fn at(&self, at: u64) -> ReadRequest {
        let mut request = self.clone();
        match &mut request {
            ReadRequest::Get { read, .. }
            | ReadRequest::GetRaw { read, .. }
            | ReadRequest::Count { read, .. } => read.at = Some(at),
            ReadRequest::Search { query } | ReadRequest::Columns { query } => {
                query.read.at = Some(at)
            }
            ReadRequest::Aggregate { query } => query.read.at = Some(at),
        }
        request
    }
}

/// A read's answer from one shard (or, from a table, merged over its shards).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReadAnswer {
    /// For [`ReadRequest::Get`].
    Record {
        record: Option<Record>,
        snapshot: SnapshotInfo,
    },
    /// For [`ReadRequest::GetRaw`].
    Raw {
        record: Option<RawRecord>,
        schema: Arc<Schema>,
        snapshot: SnapshotInfo,
    },
    /// For [`ReadRequest::Search`].
    Rows(SearchResult),
    /// For [`ReadRequest::Columns`].
    Columns(ColumnsResult),
    /// For [`ReadRequest::Count`].
    Count { count: u64, snapshot: SnapshotInfo },
    /// For [`ReadRequest::Aggregate`].
    Aggregate(AggregateResult),
}

impl ReadAnswer {
    /// The snapshot it was read at.
    pub fn snapshot(&self) -> &SnapshotInfo {
        match self {
            ReadAnswer::Record { snapshot, .. }
            | ReadAnswer::Raw { snapshot, .. }
            | ReadAnswer::Count { snapshot, .. } => snapshot,
            ReadAnswer::Rows(result) => &result.snapshot,
            ReadAnswer::Columns(result) => &result.snapshot,
            ReadAnswer::Aggregate(result) => &result.snapshot,
        }
    }
}

/// Everything a replica is asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplicaRequest {
    /// A read.
    Read(ReadRequest),
    /// Apply SCU `seq` (durable in the database's log) to this replica; `replaying`
    /// when the log is replayed after a restart.
    Apply {
        seq: u64,
        commit_micros: u64,
        ops: PreparedOps,
        replaying: bool,
    },
    /// Refuse (`Overloaded`) if the replica's write pipeline has no room for an SCU.
    CheckWriteRoom,
    /// Freeze the active log table if it is full (after an apply).
    FreezeWhenFull,
    /// The schema.
    Schema,
    /// Sizes.
    Stats,
    /// Sequence numbers up to which each stage holds every SCU.
    Watermarks,
    /// Seal the log stage into sorted batches.
    Seal,
    /// Compact everything into segments.
    CompactAll,
    /// Seal, then compact the sealed batches into segments, merging only the small
    /// recent segments (size-tiered) rather than every one.
    Compact,
    /// Whether the replica's background work runs.
    IsRunning,
    /// The replica's segments now.
    Segments,
    /// Move every index of the replica to `layers` sample layers (added in the
    /// background when `dedicated`, else filled by queries).
    SetLayers { layers: u32, dedicated: bool },
}

/// A replica's answer to a [`ReplicaRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplicaResponse {
    /// A read's answer.
    Read(ReadAnswer),
    /// The request was carried out.
    Done,
    /// For [`ReplicaRequest::Schema`].
    Schema(Arc<Schema>),
    /// For [`ReplicaRequest::Stats`].
    Stats(ShardStats),
    /// For [`ReplicaRequest::Watermarks`].
    Watermarks(Watermarks),
    /// For [`ReplicaRequest::IsRunning`].
    Running(bool),
    /// For [`ReplicaRequest::SetLayers`]: the layers now.
    Layers(LayerState),
    /// For [`ReplicaRequest::Segments`], ascending by id.
    Segments(Vec<SegmentFacts>),
}

/// One segment of a replica, as the segment registry records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentFacts {
    /// The segment's id within the replica.
    pub segment: u64,
    /// Records (deleted ones included).
    pub records: u64,
    /// Bytes of its files.
    pub file_bytes: u64,
}

fn unexpected(expected: &str, got: &ReplicaResponse) -> StoreError {
    StoreError::Unavailable(format!(
        "a replica answered {got:?} where {expected} was expected"
    ))
}

impl ReplicaResponse {
    /// The read answer.
    pub fn into_read(self) -> Result<ReadAnswer> {
        match self {
            ReplicaResponse::Read(answer) => Ok(answer),
            other => Err(unexpected("a read answer", &other)),
        }
    }

    /// `Ok` if the request was carried out.
    pub fn into_done(self) -> Result<()> {
        match self {
            ReplicaResponse::Done => Ok(()),
            other => Err(unexpected("done", &other)),
        }
    }

    /// The schema.
    pub fn into_schema(self) -> Result<Arc<Schema>> {
        match self {
            ReplicaResponse::Schema(schema) => Ok(schema),
            other => Err(unexpected("a schema", &other)),
        }
    }

    /// The sizes.
    pub fn into_stats(self) -> Result<ShardStats> {
        match self {
            ReplicaResponse::Stats(stats) => Ok(stats),
            other => Err(unexpected("sizes", &other)),
        }
    }

    /// The watermarks.
    pub fn into_watermarks(self) -> Result<Watermarks> {
        match self {
            ReplicaResponse::Watermarks(marks) => Ok(marks),
            other => Err(unexpected("watermarks", &other)),
        }
    }

    /// The segments.
    pub fn into_segments(self) -> Result<Vec<SegmentFacts>> {
        match self {
            ReplicaResponse::Segments(segments) => Ok(segments),
            other => Err(unexpected("segments", &other)),
        }
    }

    /// Whether the replica runs.
    pub fn into_running(self) -> Result<bool> {
        match self {
            ReplicaResponse::Running(running) => Ok(running),
            other => Err(unexpected("a running flag", &other)),
        }
    }
}

/// The replica side of every message: what `shard` answers to `request`.
pub fn serve(shard: &Shard, request: ReplicaRequest) -> Result<ReplicaResponse> {
    Ok(match request {
        ReplicaRequest::Read(read) => ReplicaResponse::Read(match read {
            ReadRequest::Get { key, read } => {
                let (record, snapshot) = shard.get(&key, read)?;
                ReadAnswer::Record { record, snapshot }
            }
            ReadRequest::GetRaw { key, read } => {
                let (record, schema, snapshot) = shard.get_raw(&key, read)?;
                ReadAnswer::Raw {
                    record,
                    schema,
                    snapshot,
                }
            }
            ReadRequest::Search { query } => ReadAnswer::Rows(shard.search(&query)?),
            ReadRequest::Columns { query } => ReadAnswer::Columns(shard.columns(&query)?),
            ReadRequest::Aggregate { query } => ReadAnswer::Aggregate(shard.aggregate(&query)?),
            ReadRequest::Count { predicate, read } => {
                let (count, snapshot) = shard.count(&predicate, read)?;
                ReadAnswer::Count { count, snapshot }
            }
        }),
        ReplicaRequest::Apply {
            seq,
            commit_micros,
            ops,
            replaying,
        } => {
            shard.apply_logged(seq, commit_micros, ops, replaying)?;
            ReplicaResponse::Done
        }
        ReplicaRequest::CheckWriteRoom => {
            shard.check_write_room()?;
            ReplicaResponse::Done
        }
        ReplicaRequest::FreezeWhenFull => {
            shard.freeze_when_full();
            ReplicaResponse::Done
        }
        ReplicaRequest::Schema => ReplicaResponse::Schema(shard.schema()),
        ReplicaRequest::Stats => ReplicaResponse::Stats(shard.stats()?),
        ReplicaRequest::Watermarks => ReplicaResponse::Watermarks(shard.watermarks()),
        ReplicaRequest::Seal => {
            shard.seal()?;
            ReplicaResponse::Done
        }
        ReplicaRequest::CompactAll => {
            shard.compact_all()?;
            ReplicaResponse::Done
        }
        ReplicaRequest::Compact => {
            shard.seal()?;
            shard.compact(false)?;
            ReplicaResponse::Done
        }
        ReplicaRequest::IsRunning => ReplicaResponse::Running(shard.is_running()),
        ReplicaRequest::Segments => {
            let mut segments: Vec<SegmentFacts> = shard
                .segments()
                .iter()
                .map(|segment| SegmentFacts {
                    segment: segment.id,
                    records: segment.record_count(),
                    file_bytes: segment.file_bytes(),
                })
                .collect();
            segments.sort_by_key(|s| s.segment);
            ReplicaResponse::Segments(segments)
        }
        ReplicaRequest::SetLayers { layers, dedicated } => {
            let construction = if dedicated {
                Construction::Dedicated
            } else {
                Construction::Opportunistic
            };
            ReplicaResponse::Layers(reconcile(shard, layers, construction))
        }
    })
}

/// Whether a read may wait in a replica's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Wait for a worker if every one is busy (a thread that may block).
    Allowed,
    /// Answer only if a replica can run the request on this thread now (an event
    /// loop thread, which must not block).
    Never,
}

/// What [`ShardReplicas::read`] gives back.
#[derive(Debug)]
pub enum Reply {
    /// The replica's answer.
    Answered(ReplicaResponse),
    /// With [`Wait::Never`]: the request, untouched, because it would have waited.
    WouldWait(ReplicaRequest),
}

/// A request queued on a replica; [`PendingReply::wait`] gives its answer.
pub struct PendingReply<'a> {
    receiver: mpsc::Receiver<(Result<ReplicaResponse>, usize)>,
    on_answer: Box<dyn FnOnce(usize) + Send + 'a>,
    who: String,
}

impl PendingReply<'static> {
    /// A reply that arrives on `receiver` (with the answering replica's queue
    /// length), for implementations outside this crate; `who` names the replica in
    /// the error if the answer never comes.
    pub fn from_receiver(
        receiver: mpsc::Receiver<(Result<ReplicaResponse>, usize)>,
        who: String,
    ) -> PendingReply<'static> {
        PendingReply {
            receiver,
            on_answer: Box::new(|_| {}),
            who,
        }
    }
}

impl PendingReply<'_> {
    /// Waits for the answer.
    pub fn wait(self) -> Result<ReplicaResponse> {
        let (answer, queue_length) = self.receiver.recv().map_err(|_| {
            StoreError::Unavailable(format!("{} failed to answer the request", self.who))
        })?;
        (self.on_answer)(queue_length);
        answer
    }
}

/// One shard's replicas as their callers see them: requests in, responses out.
pub trait ShardReplicas: Send + Sync {
    /// How many replicas the shard has.
    fn replica_count(&self) -> u32;

    /// Whether the shard is held here (a cluster's data node holds only the shards
    /// placed on it; see [`crate::shards::NotHeld`]).
    fn is_held(&self) -> bool {
        true
    }

    /// Sends `request` to the replica the scheduler picks (reads, which any replica
    /// holding the snapshot can answer).
    fn read(&self, request: ReplicaRequest, wait: Wait) -> Result<Reply>;

    /// Queues `request` on the replica the scheduler picks, for several shards to work
    /// at once.
    fn submit(&self, request: ReplicaRequest) -> Result<PendingReply<'_>>;

    /// Sends `request` to replica `replica` (writes, control and sizes go to each
    /// replica by number).
    fn send_to(&self, replica: u32, request: ReplicaRequest) -> Result<ReplicaResponse>;
}

impl ShardReplicas for ShardGroup<Shard> {
    fn replica_count(&self) -> u32 {
        self.replicas().len() as u32
    }

    fn read(&self, request: ReplicaRequest, wait: Wait) -> Result<Reply> {
        let slot = self.route();
        let is_read = matches!(request, ReplicaRequest::Read(_));
        match wait {
            Wait::Allowed => {
                let response = slot.pool().execute(move |shard| serve(shard, request))?;
                self.report(slot.replica, response.queue_length);
                if is_read {
                    self.count_read();
                }
                Ok(Reply::Answered(response.value?))
            }
            Wait::Never => {
                // The job takes the request only if it runs, so that it can be given back.
                let mut request = Some(request);
                let ran = slot.pool().try_run_here(|shard| {
                    serve(shard, request.take().expect("the request is taken once"))
                })?;
                match ran {
                    Ok(response) => {
                        self.report(slot.replica, response.queue_length);
                        if is_read {
                            self.count_read();
                        }
                        Ok(Reply::Answered(response.value?))
                    }
                    Err(_job) => {
                        // The job never ran; it borrowed `request` and is gone now.
                        Ok(Reply::WouldWait(
                            request
                                .take()
                                .expect("a job that did not run left the request"),
                        ))
                    }
                }
            }
        }
    }

    fn submit(&self, request: ReplicaRequest) -> Result<PendingReply<'_>> {
        let slot = self.route();
        if matches!(request, ReplicaRequest::Read(_)) {
            self.count_read();
        }
        let (sender, receiver) = mpsc::sync_channel(1);
        slot.pool().spawn(move |shard, queue_length| {
            let _ = sender.send((serve(shard, request), queue_length));
        })?;
        let replica = slot.replica;
        Ok(PendingReply {
            receiver,
            on_answer: Box::new(move |queue_length| self.report(replica, queue_length)),
            who: format!(
                "table {} shard {} replica {replica}",
                self.table, self.shard
            ),
        })
    }

    fn send_to(&self, replica: u32, request: ReplicaRequest) -> Result<ReplicaResponse> {
        let slot = self.replicas().get(replica as usize).ok_or_else(|| {
            StoreError::InvalidQuery(format!(
                "table {} shard {} has no replica {replica}",
                self.table, self.shard
            ))
        })?;
        // Writes, control and sizes run on the caller's thread, as a local call would:
        // they must not queue behind reads.
        serve(slot.pool().replica(), request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_store::{AttrType, Attribute, Value, WriteOp};
    use std::ops::Bound;
    use std::time::Duration;

    fn round_trip<T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: &T,
    ) {
        let text = serde_json::to_string(value).expect("serializes");
        let back: T = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(&back, value, "{text}");
    }

    fn schema() -> Schema {
        Schema::new(
            "id",
            vec![Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            }],
        )
        .unwrap()
    }

    /// Every message is plain data: it survives serialization unchanged, so a remote
    /// replica can be sent exactly what a local one is.
    #[test]
    fn messages_serialize_and_come_back_equal() {
        let read = ReadOptions {
            freshness: Some(Duration::from_millis(250)),
            min_snapshot: 3,
            at: Some(7),
        };
        let mut schema = schema();
        let ops = puffer_store::validate_ops(
            vec![
                WriteOp::Put(Record::new("k1").with("city", Value::str("Oslo"))),
                WriteOp::Delete(b"k2".to_vec()),
            ],
            &mut schema,
        )
        .unwrap();
        let requests = vec![
            ReplicaRequest::Read(ReadRequest::Get {
                key: b"k1".to_vec(),
                read,
            }),
            ReplicaRequest::Read(ReadRequest::GetRaw {
                key: vec![0, 255],
                read,
            }),
            ReplicaRequest::Read(ReadRequest::Search {
                query: Query {
                    predicate: Predicate::Range {
                        attribute: "city".into(),
                        lower: Bound::Included(Value::str("A")),
                        upper: Bound::Excluded(Value::str("P")),
                    },
                    projection: Some(vec!["city".into()]),
                    limit: Some(10),
                    read,
                },
            }),
            ReplicaRequest::Read(ReadRequest::Count {
                predicate: Predicate::Contains("city".into(), b"sl".to_vec()),
                read,
            }),
            ReplicaRequest::Apply {
                seq: 9,
                commit_micros: 1_700_000_000_000_000,
                ops: PreparedOps::new(ops),
                replaying: false,
            },
            ReplicaRequest::CheckWriteRoom,
            ReplicaRequest::SetLayers {
                layers: 3,
                dedicated: true,
            },
        ];
        for request in &requests {
            round_trip(request);
        }
        let snapshot = SnapshotInfo {
            snapshot: 7,
            age: Duration::from_micros(1500),
            read_log: true,
        };
        let responses = vec![
            ReplicaResponse::Read(ReadAnswer::Record {
                record: Some(Record::new("k1").with("city", Value::str("Oslo"))),
                snapshot,
            }),
            ReplicaResponse::Read(ReadAnswer::Raw {
                record: Some(RawRecord::Text {
                    key: b"k1".to_vec(),
                    text: Arc::from(&b"\x01Oslo"[..]),
                }),
                schema: Arc::new(schema.clone()),
                snapshot,
            }),
            ReplicaResponse::Read(ReadAnswer::Count { count: 4, snapshot }),
            ReplicaResponse::Schema(Arc::new(schema)),
            ReplicaResponse::Stats(ShardStats::default()),
            ReplicaResponse::Done,
        ];
        for response in &responses {
            round_trip(response);
        }
    }

    #[test]
    fn a_read_at_a_snapshot_changes_only_its_snapshot() {
        let request = ReadRequest::Count {
            predicate: Predicate::All,
            read: ReadOptions::default(),
        };
        let at = request.at(42);
        assert_eq!(at.read_options().at, Some(42));
        assert_eq!(
            ReadRequest::Count {
                predicate: Predicate::All,
                read: ReadOptions {
                    at: None,
                    ..at.read_options()
                }
            },
            request
        );
    }
}
