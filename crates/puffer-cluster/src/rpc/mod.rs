//! gRPC between nodes (`tonic`): the node crate's replica messages, carried to the
//! node that holds a shard ([`server`]) from a [`client::RemoteShard`], which
//! implements the node crate's `ShardReplicas`, so tables and the committer use a
//! remote shard exactly as a local one.
//!
//! Bounds: every call has a deadline; a message (either way) is at most
//! [`MAX_MESSAGE_BYTES`]; a search's answer comes in chunks of [`CHUNK_BYTES`], at
//! most [`MAX_STREAMED_ANSWER_BYTES`] in all; a server runs at most [`MAX_CALLS_IN_FLIGHT`] calls and
//! refuses more as overloaded.

pub mod client;
pub mod server;

use puffer_query::{ErrorCode, QueryError};
use puffer_store::StoreError;
use tonic::{Code, Status};

/// The generated service.
pub mod proto {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("puffer.replica.v1");
}

/// Largest message either way. A larger answer is refused with `limit_exceeded`
/// (ask for fewer records: LIMIT, or a narrower predicate).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Bytes of one chunk of a streamed answer.
pub const CHUNK_BYTES: usize = 4 << 20;
/// Largest streamed answer (all chunks together). A larger one is refused with
/// `limit_exceeded` (ask for fewer rows).
pub const MAX_STREAMED_ANSWER_BYTES: usize = 1 << 30;
/// Most calls one server runs at once.
pub const MAX_CALLS_IN_FLIGHT: usize = 256;
/// A message of the node crate as it crosses the wire: postcard, serde's compact
/// binary form (JSON spent most of a read's time on the wire spelling out bytes).
pub fn encode<T: serde::Serialize>(message: &T) -> std::result::Result<Vec<u8>, String> {
    postcard::to_allocvec(message).map_err(|e| e.to_string())
}

/// `message` encoded for a call, refused if it is larger than one message may be;
/// `what` names it in the error.
pub fn encode_call_message<T: serde::Serialize>(
    what: &str,
    message: &T,
) -> std::result::Result<Vec<u8>, StoreError> {
    let bytes = encode(message)
        .map_err(|e| StoreError::InvalidQuery(format!("cannot encode {what}: {e}")))?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(StoreError::InvalidQuery(format!(
            "{what} of {} bytes; at most {MAX_MESSAGE_BYTES} cross between nodes",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// A message of the node crate from the wire (see [`encode`]).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

/// The metadata key that carries an error's stable code.
pub const CODE_KEY: &str = "puffer-code";

/// `error` as a gRPC status: the gRPC code for generic clients, the stable code in
/// metadata for ours.
pub fn status_of(error: &QueryError) -> Status {
    let code = error.code();
    let grpc = match code {
        ErrorCode::UnknownTable | ErrorCode::UnknownReplica | ErrorCode::NotFound => Code::NotFound,
        ErrorCode::TableExists => Code::AlreadyExists,
        ErrorCode::LimitExceeded | ErrorCode::Overloaded | ErrorCode::DiskFull => {
            Code::ResourceExhausted
        }
        ErrorCode::Unavailable
        | ErrorCode::NotHeld
        | ErrorCode::SnapshotGone
        | ErrorCode::IoError => Code::Unavailable,
        ErrorCode::Corrupt | ErrorCode::IndexError => Code::DataLoss,
        ErrorCode::Internal => Code::Internal,
        _ => Code::InvalidArgument,
    };
    let mut status = Status::new(grpc, error.to_string());
    if let Ok(value) = code.as_str().parse() {
        status.metadata_mut().insert(CODE_KEY, value);
    }
    if let QueryError::Store(StoreError::SnapshotGone { asked, sealed }) = error {
        // The numbers, so that the caller can choose a snapshot the replica keeps.
        if let Ok(value) = format!("{asked} {sealed}").parse() {
            status.metadata_mut().insert(SNAPSHOT_GONE_KEY, value);
        }
    }
    status
}

/// The metadata key of a `snapshot_gone` status: the snapshot asked for and the SCU
/// sealed up to, as two decimal numbers.
pub const SNAPSHOT_GONE_KEY: &str = "puffer-snapshot-gone";

/// The snapshot asked for and the SCU sealed up to that a `snapshot_gone` status
/// carries.
fn snapshot_gone_of(status: &Status) -> Option<(u64, u64)> {
    let text = status.metadata().get(SNAPSHOT_GONE_KEY)?.to_str().ok()?;
    let (asked, sealed) = text.split_once(' ')?;
    Some((asked.parse().ok()?, sealed.parse().ok()?))
}

/// The error a status stands for, as near to the remote one as the shard's error
/// type allows; `who` says which node answered. A shard the node does not hold is
/// `NotHeld`, a table it does not know `Unavailable`: the caller's routing is stale,
/// and another node may answer.
pub fn error_of(status: &Status, who: &str) -> StoreError {
    let code = status
        .metadata()
        .get(CODE_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let message = format!("{who}: {}", status.message());
    match code {
        "overloaded" => StoreError::Overloaded(message),
        "not_held" => StoreError::NotHeld(message),
        "snapshot_gone" => match snapshot_gone_of(status) {
            Some((asked, sealed)) => StoreError::SnapshotGone { asked, sealed },
            None => StoreError::Unavailable(message),
        },
        "corrupt" | "index_error" => StoreError::Corrupt {
            path: who.into(),
            detail: status.message().to_string(),
        },
        "invalid_request" | "invalid_record" | "invalid_schema" | "invalid_setting"
        | "syntax_error" | "unsupported" | "limit_exceeded" | "not_found" => {
            StoreError::InvalidQuery(message)
        }
        // Transport failures (no code of ours): deadlines, refused connections, a
        // node gone. All are worth a retry elsewhere.
        "" if status.code() == Code::ResourceExhausted => StoreError::InvalidQuery(format!(
            "{message} (a request or an answer is at most {MAX_MESSAGE_BYTES} bytes: ask for \
             fewer records)"
        )),
        _ => StoreError::Unavailable(message),
    }
}

/// The error a status stands for, for a request whose errors the caller shows as
/// they are (a write or table change handed to the leader): the other node's code
/// and words where it gave a code of ours, else (transport failures, a node gone or
/// refusing) as [`error_of`], retryable.
pub fn query_error_of(status: &Status, who: &str) -> QueryError {
    let code = status
        .metadata()
        .get(CODE_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(ErrorCode::from_wire);
    match code {
        Some(code)
            if !matches!(
                code,
                ErrorCode::Unavailable
                    | ErrorCode::NotHeld
                    | ErrorCode::SnapshotGone
                    | ErrorCode::Overloaded
                    | ErrorCode::IoError
            ) =>
        {
            QueryError::Remote {
                code,
                message: status.message().to_string(),
            }
        }
        _ => error_of(status, who).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_node::remote::{LeaderRequest, WritePart};
    use puffer_node::{ReadRequest, ReplicaRequest, TableLayout};
    use puffer_store::{
        AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
    };
    use std::ops::Bound;
    use std::time::Duration;

    fn round_trip<T>(message: &T)
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = encode(message).unwrap();
        assert_eq!(&decode::<T>(&bytes).unwrap(), message);
        // Cut short, it is an error, never another message.
        if !bytes.is_empty() {
            assert!(decode::<T>(&bytes[..bytes.len() - 1]).is_err());
        }
    }

    #[test]
    fn every_kind_of_message_crosses_the_wire_unchanged() {
        let attributes = vec![
            Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            },
            Attribute {
                name: "price".into(),
                attr_type: AttrType::Float,
            },
        ];
        let schema = Schema::new("id", attributes.clone()).unwrap();
        let mut record = Record::new(b"k\x00\xff".to_vec());
        record
            .values
            .insert("city".into(), Value::String(b"Lis\x01bon".to_vec()));
        record.values.insert("price".into(), Value::Float(-2.5));
        let read = ReadOptions {
            freshness: Some(Duration::from_millis(1500)),
            min_snapshot: 7,
            at: Some(9),
        };
        let predicate = Predicate::And(vec![
            Predicate::Eq("city".into(), Value::String(b"Porto".to_vec())),
            Predicate::Not(Box::new(Predicate::Range {
                attribute: "price".into(),
                lower: Bound::Included(Value::Float(1.0)),
                upper: Bound::Unbounded,
            })),
            Predicate::Or(vec![
                Predicate::RecordContains(vec![0, 1, 2]),
                Predicate::All,
            ]),
        ]);
        round_trip(&ReplicaRequest::Read(ReadRequest::Search {
            query: Query {
                predicate: predicate.clone(),
                projection: Some(vec!["city".into()]),
                limit: Some(10),
                read,
            },
        }));
        round_trip(&ReplicaRequest::Read(ReadRequest::Aggregate {
            query: puffer_store::AggregateQuery {
                predicate: predicate.clone(),
                group_by: Some("seen".into()),
                bucket: Some(puffer_store::TimeBucket::Week),
                aggregates: vec![
                    puffer_store::Aggregate::Rows,
                    puffer_store::Aggregate::Avg("price".into()),
                    puffer_store::Aggregate::Max("seen".into()),
                ],
                max_rows: 2_000_000,
                read,
            },
        }));
        round_trip(&puffer_node::ReadAnswer::Aggregate(
            puffer_store::AggregateResult {
                groups: vec![
                    (
                        Some(Value::String(b"Porto".to_vec())),
                        vec![
                            puffer_store::AggregateState::Count(3),
                            puffer_store::AggregateState::Sum {
                                int: -(1 << 70),
                                float: 2.5,
                                values: 2,
                            },
                            puffer_store::AggregateState::Max(Some(Value::Timestamp(-7))),
                        ],
                    ),
                    (None, vec![puffer_store::AggregateState::Min(None)]),
                ],
                rows: 5,
                truncated: false,
                snapshot: puffer_store::SnapshotInfo {
                    snapshot: 9,
                    age: std::time::Duration::from_millis(3),
                    read_log: true,
                },
            },
        ));
        round_trip(&ReplicaRequest::Read(ReadRequest::Count {
            predicate,
            read,
        }));
        round_trip(&ReplicaRequest::SetLayers {
            layers: 3,
            dedicated: true,
        });
        round_trip(&LeaderRequest::Write {
            parts: vec![WritePart {
                table: "rooms".into(),
                uid: u64::MAX,
                ops: vec![
                    WriteOp::AddAttribute(attributes[0].clone()),
                    WriteOp::Put(record),
                    WriteOp::Delete(b"gone".to_vec()),
                ],
            }],
        });
        round_trip(&LeaderRequest::CreateTable {
            name: "rooms".into(),
            schema,
            layout: Some(TableLayout {
                shards: 4,
                replicas: 2,
            }),
            partition: Some(puffer_query::TimePartition {
                attribute: "ts".into(),
                granularity: puffer_query::Granularity::Day,
            }),
        });
    }

    #[test]
    fn errors_cross_the_wire_with_their_codes() {
        let cases: Vec<(QueryError, ErrorCode)> = vec![
            (StoreError::NotHeld("x".into()).into(), ErrorCode::NotHeld),
            (
                StoreError::Overloaded("x".into()).into(),
                ErrorCode::Overloaded,
            ),
            (
                StoreError::Unavailable("x".into()).into(),
                ErrorCode::Unavailable,
            ),
            (
                StoreError::SnapshotGone {
                    asked: 7,
                    sealed: 12,
                }
                .into(),
                ErrorCode::SnapshotGone,
            ),
            (
                StoreError::InvalidQuery("x".into()).into(),
                ErrorCode::InvalidRequest,
            ),
        ];
        for (error, code) in cases {
            let status = status_of(&error);
            let back = QueryError::from(error_of(&status, "node a"));
            // The kind a caller decides on: retry elsewhere, choose again, or give up.
            assert_eq!(back.code(), code, "{error} came back as {back}");
            assert_eq!(back.retryable(), error.retryable(), "{error}");
            assert_eq!(query_error_of(&status, "node a").code(), code);
        }
        // The numbers come back too: the caller reads at the sealed SCU or later.
        let gone = status_of(
            &StoreError::SnapshotGone {
                asked: 7,
                sealed: 12,
            }
            .into(),
        );
        assert!(matches!(
            error_of(&gone, "node a"),
            StoreError::SnapshotGone {
                asked: 7,
                sealed: 12
            }
        ));
        // A status without them (another version's) is still a retryable refusal.
        let mut bare = Status::unavailable("gone");
        bare.metadata_mut()
            .insert(CODE_KEY, "snapshot_gone".parse().unwrap());
        assert!(matches!(
            error_of(&bare, "node a"),
            StoreError::Unavailable(_)
        ));
    }
}
