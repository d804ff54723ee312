//! The one error type of the query layer, with the stable code each error maps to.

use puffer_store::StoreError;

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
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, QueryError>;

impl QueryError {
    /// A stable, machine-readable code (used by the HTTP API).
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::Syntax { .. } => "syntax_error",
            QueryError::Unsupported { .. } => "unsupported",
            QueryError::Limit(_) => "limit_exceeded",
            QueryError::UnknownTable(_) => "unknown_table",
            QueryError::TableExists(_) => "table_exists",
            QueryError::Invalid(_) => "invalid_request",
            QueryError::Store(e) => match e {
                StoreError::InvalidRecord { .. } => "invalid_record",
                StoreError::Schema(_) => "invalid_schema",
                StoreError::InvalidQuery(_) | StoreError::InvalidBatch(_) => "invalid_request",
                StoreError::Overloaded(_) => "overloaded",
                StoreError::Stopped(_)
                | StoreError::Unavailable(_)
                | StoreError::SnapshotGone { .. } => "unavailable",
                StoreError::InvalidSetting(_) => "invalid_setting",
                StoreError::InUse { .. } => "in_use",
                StoreError::Io { .. } => "io_error",
                StoreError::Corrupt { .. } => "corrupt",
                StoreError::Index(_) => "index_error",
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
                | QueryError::Store(StoreError::SnapshotGone { .. })
        )
    }
}
