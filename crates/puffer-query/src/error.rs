//! The one error type of the query layer, and the closed set of stable error codes the
//! HTTP API answers with (most of them come from [`QueryError`]).

use puffer_store::StoreError;

/// Defines [`ErrorCode`], its wire strings and [`ErrorCode::ALL`] from one list, so no
/// variant can be left out of `ALL` (which the documentation test walks).
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => $text:literal,)+) => {
        /// A stable, machine-readable error code: the `code` of an HTTP error answer.
        /// Clients match on these strings, so [`ErrorCode::as_str`] never changes for
        /// an existing code. The HTTP status of each is in `puffer-server`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The code as sent on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)+
                }
            }

            /// The code a wire string stands for.
            pub fn from_wire(text: &str) -> Option<ErrorCode> {
                match text {
                    $($text => Some(ErrorCode::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// The SQL text does not parse.
    SyntaxError => "syntax_error",
    /// The SQL uses a construct outside PufferDB's subset.
    Unsupported => "unsupported",
    /// A malformed request: a bad parameter, name, value or query.
    InvalidRequest => "invalid_request",
    /// A record is not valid for its table.
    InvalidRecord => "invalid_record",
    /// A schema is not allowed.
    InvalidSchema => "invalid_schema",
    /// A setting is out of range.
    InvalidSetting => "invalid_setting",
    /// The body is not the JSON expected.
    BadJson => "bad_json",
    /// A shard is already open elsewhere (its LOCK file is held).
    InUse => "in_use",
    /// No valid bearer token.
    Unauthorized => "unauthorized",
    /// The token does not give the role needed.
    Forbidden => "forbidden",
    /// No table of that name.
    UnknownTable => "unknown_table",
    /// No text of that name.
    UnknownText => "unknown_text",
    /// No replica of that id.
    UnknownReplica => "unknown_replica",
    /// No record of that key.
    NotFound => "not_found",
    /// No route serves the path.
    UnknownRoute => "unknown_route",
    /// The request's body did not arrive whole within the server's deadline.
    RequestTimeout => "request_timeout",
    /// The route does not take the method.
    MethodNotAllowed => "method_not_allowed",
    /// A table of that name exists already.
    TableExists => "table_exists",
    /// A text of that name exists already.
    TextExists => "text_exists",
    /// A configured limit was exceeded.
    LimitExceeded => "limit_exceeded",
    /// Too much work is queued; retry later.
    Overloaded => "overloaded",
    /// A shard or replica cannot answer now; retry later.
    Unavailable => "unavailable",
    /// The node asked does not hold the shard; another node may answer.
    NotHeld => "not_held",
    /// A read's snapshot is no longer kept apart (sealed or compacted past); read a
    /// newer one.
    SnapshotGone => "snapshot_gone",
    /// The disk is full: a write was refused whole; retry once space is freed.
    DiskFull => "disk_full",
    /// A file operation failed.
    IoError => "io_error",
    /// A file's content is damaged.
    Corrupt => "corrupt",
    /// The compressed index failed.
    IndexError => "index_error",
    /// A bug: the server failed in a way no other code names.
    Internal => "internal",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Serialized as its wire string, the one [`ErrorCode::as_str`] gives.
impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Compares with a wire string, so callers and tests may write `code == "unknown_table"`.
impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Everything that can go wrong parsing or running a statement.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The SQL text does not parse.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// What the parser expected or found.
        message: String,
        /// 1-based line (0 if unknown).
        line: u64,
        /// 1-based column (0 if unknown).
        column: u64,
    },
    /// The SQL parses but uses a construct outside PufferDB's subset.
    #[error("unsupported at line {line}, column {column}: {construct}")]
    Unsupported {
        /// The construct, as written or named.
        construct: String,
        /// 1-based line (0 if unknown).
        line: u64,
        /// 1-based column (0 if unknown).
        column: u64,
    },
    /// A request is too large or too deep.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// No table of that name.
    #[error("unknown table {0:?}")]
    UnknownTable(String),
    /// A table of that name exists already.
    #[error("table {0:?} already exists")]
    TableExists(String),
    /// A malformed request (bad name, bad value for a column, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another node of a cluster refused: its code and its words, as it gave them.
    #[error("{message}")]
    Remote {
        /// The other node's code.
        code: ErrorCode,
        /// What it said.
        message: String,
    },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, QueryError>;

impl QueryError {
    /// The stable code the HTTP API answers with.
    pub fn code(&self) -> ErrorCode {
        match self {
            QueryError::Syntax { .. } => ErrorCode::SyntaxError,
            QueryError::Unsupported { .. } => ErrorCode::Unsupported,
            QueryError::Limit(_) => ErrorCode::LimitExceeded,
            QueryError::UnknownTable(_) => ErrorCode::UnknownTable,
            QueryError::TableExists(_) => ErrorCode::TableExists,
            QueryError::Invalid(_) => ErrorCode::InvalidRequest,
            QueryError::Remote { code, .. } => *code,
            QueryError::Store(e) => match e {
                StoreError::InvalidRecord { .. } => ErrorCode::InvalidRecord,
                StoreError::Schema(_) => ErrorCode::InvalidSchema,
                StoreError::InvalidQuery(_) | StoreError::InvalidBatch(_) => {
                    ErrorCode::InvalidRequest
                }
                StoreError::Overloaded(_) => ErrorCode::Overloaded,
                StoreError::Stopped(_) | StoreError::Unavailable(_) => ErrorCode::Unavailable,
                StoreError::SnapshotGone { .. } => ErrorCode::SnapshotGone,
                StoreError::NotHeld(_) => ErrorCode::NotHeld,
                StoreError::InvalidSetting(_) => ErrorCode::InvalidSetting,
                StoreError::InUse { .. } => ErrorCode::InUse,
                StoreError::Io { .. } => ErrorCode::IoError,
                StoreError::DiskFull { .. } => ErrorCode::DiskFull,
                StoreError::Corrupt { .. } => ErrorCode::Corrupt,
                StoreError::Index(_) => ErrorCode::IndexError,
            },
        }
    }

    /// Whether the same request may succeed if retried later.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            QueryError::Store(StoreError::Overloaded(_))
                | QueryError::Store(StoreError::Stopped(_))
                | QueryError::Store(StoreError::Unavailable(_))
                | QueryError::Store(StoreError::NotHeld(_))
                | QueryError::Store(StoreError::SnapshotGone { .. })
                | QueryError::Store(StoreError::DiskFull { .. })
                | QueryError::Remote {
                    code: ErrorCode::Overloaded
                        | ErrorCode::Unavailable
                        | ErrorCode::NotHeld
                        | ErrorCode::SnapshotGone
                        | ErrorCode::DiskFull,
                    ..
                }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_distinct_wire_strings() {
        let mut seen = std::collections::BTreeSet::new();
        for &code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} is the string of two codes");
            assert!(
                !text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{text} is not snake_case"
            );
            assert_eq!(serde_json::to_value(code).unwrap(), text);
            assert_eq!(code.to_string(), text);
            assert_eq!(code, text);
        }
    }
}
