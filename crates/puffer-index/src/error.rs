//! The one error type of the index crate.

use std::path::PathBuf;

/// Everything that can go wrong building, loading or querying an index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A file could not be read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not a valid index: wrong magic, bad checksum, inconsistent section.
    #[error("corrupt index file {path}: section {section}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Which section failed (`header`, `meta`, `psi.stream`, `sa.layer0`, ...).
        section: String,
        /// What was wrong.
        detail: String,
    },
    /// A file written by an unknown format version.
    #[error("index file {path} has format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A caller-supplied argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A layer operation that the current layer state does not allow.
    #[error("layer operation refused: {0}")]
    Layer(String),
    /// The suffix array library failed.
    #[error("suffix array construction failed: {0}")]
    Build(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, IndexError>;
