//! gRPC between nodes (`tonic`): the node crate's replica messages, carried to the
//! node that holds a shard ([`server`]) from a [`client::RemoteShard`], which
//! implements the node crate's `ShardReplicas`, so tables and the committer use a
//! remote shard exactly as a local one.
//!
//! Bounds: every call has a deadline; a message (either way) is at most
//! [`MAX_MESSAGE_BYTES`]; a server runs at most [`MAX_CALLS_IN_FLIGHT`] calls and
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
/// Most calls one server runs at once.
pub const MAX_CALLS_IN_FLIGHT: usize = 256;
/// The metadata key that carries an error's stable code.
pub const CODE_KEY: &str = "puffer-code";

/// `error` as a gRPC status: the gRPC code for generic clients, the stable code in
/// metadata for ours.
pub fn status_of(error: &QueryError) -> Status {
    let code = error.code();
    let grpc = match code {
        ErrorCode::UnknownTable | ErrorCode::UnknownReplica | ErrorCode::NotFound => Code::NotFound,
        ErrorCode::TableExists => Code::AlreadyExists,
        ErrorCode::LimitExceeded | ErrorCode::Overloaded => Code::ResourceExhausted,
        ErrorCode::Unavailable | ErrorCode::IoError => Code::Unavailable,
        ErrorCode::Corrupt | ErrorCode::IndexError => Code::DataLoss,
        ErrorCode::Internal => Code::Internal,
        _ => Code::InvalidArgument,
    };
    let mut status = Status::new(grpc, error.to_string());
    if let Ok(value) = code.as_str().parse() {
        status.metadata_mut().insert(CODE_KEY, value);
    }
    status
}

/// The error a status stands for, as near to the remote one as the shard's error
/// type allows; `who` says which node answered. A table or shard the node does not
/// hold is `Unavailable`: the caller's routing is stale, and another node may answer.
pub fn error_of(status: &Status, who: &str) -> StoreError {
    let code = status
        .metadata()
        .get(CODE_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let message = format!("{who}: {}", status.message());
    match code {
        "overloaded" => StoreError::Overloaded(message),
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
                ErrorCode::Unavailable | ErrorCode::Overloaded | ErrorCode::IoError
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
