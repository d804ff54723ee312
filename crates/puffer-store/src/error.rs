//! The one error type of the store crate.

use std::path::PathBuf;

/// Everything that can go wrong writing to or reading from a shard.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A record of a batch is not valid for the table; nothing of the batch was applied.
    #[error("invalid record (key {key}), field {field:?}: {reason}")]
    InvalidRecord {
        /// The record's key, printable.
        key: String,
        /// The attribute (or the key's name).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A schema change or schema definition is not allowed.
    #[error("schema error: {0}")]
    Schema(String),
    /// A query is malformed (unknown attribute, type mismatch, bad bound).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// A write batch is malformed or too large.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// The write pipeline is full; retry later.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// A file operation failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The device holding a file is full (or the user's quota is used up). A write
    /// refused so kept nothing of itself; it may succeed once space is freed.
    #[error(
        "no space left for {path}: {source}; nothing of this write was kept, free space and retry"
    )]
    DiskFull {
        /// The file that could not grow.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file's content is damaged (checksum or structure).
    #[error("corrupt file {path}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was found wrong.
        detail: String,
    },
    /// Another process (or another open in this one) holds the shard.
    #[error("shard {path} is already open (its LOCK file is held)")]
    InUse {
        /// The shard directory.
        path: PathBuf,
    },
    /// The shard stopped after a failed fsync or write; reopen it to recover.
    #[error("shard stopped: {0}; reopen it to recover from the log")]
    Stopped(String),
    /// A setting is out of range (names the setting).
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// A replica cannot answer: it is shut down, or the request failed inside it.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// This node does not hold the shard (a cluster's data node holds only those
    /// placed on it): another node may answer.
    #[error("not held here: {0}")]
    NotHeld(String),
    /// A read asked for a snapshot older than the replica keeps apart: it has sealed or
    /// compacted SCUs past it since the snapshot was chosen. Choose a newer one.
    #[error("snapshot {asked} is no longer readable on this replica (it holds SCUs up to {sealed} in sealed stages); read a newer one")]
    SnapshotGone {
        /// The snapshot asked for.
        asked: u64,
        /// Everything up to this is in the replica's sealed stages.
        sealed: u64,
    },
    /// The compressed index failed.
    #[error(transparent)]
    Index(#[from] puffer_index::IndexError),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// An I/O error on `path`: [`StoreError::DiskFull`] when the device is full.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StoreError {
        if is_disk_full(&source) {
            return StoreError::DiskFull {
                path: path.into(),
                source,
            };
        }
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether this is [`StoreError::DiskFull`].
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull { .. })
    }

    /// A [`StoreError::DiskFull`] on `path` saying `detail` (for the many refusals of one
    /// failed write: an `io::Error` cannot be cloned).
    pub fn disk_full(path: impl Into<PathBuf>, detail: impl Into<String>) -> StoreError {
        StoreError::DiskFull {
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, detail.into()),
        }
    }

    /// A corruption found in `path`.
    pub fn corrupt(path: impl Into<PathBuf>, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            path: path.into(),
            detail: detail.into(),
        }
    }
}

/// Whether an I/O error says the device is full or the quota used up. (Writers pass
/// their stream's error on whole, so that this sees its kind.)
pub fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}
