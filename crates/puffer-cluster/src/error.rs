//! The cluster's errors, and how they read to the node crate's callers.

use puffer_query::QueryError;
use puffer_store::StoreError;

/// What can go wrong talking to the cluster's infrastructure.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd (or another service) did not answer in time, or refused; retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// This process is no longer the leader it acted as; its write was refused.
    #[error("fenced: {0}")]
    Fenced(String),
    /// A stored value does not decode.
    #[error("corrupt metadata at {key}: {detail}")]
    Corrupt {
        /// The etcd key.
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// No such object or key.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller asked for something malformed.
    #[error("invalid: {0}")]
    Invalid(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, ClusterError>;

impl From<ClusterError> for QueryError {
    fn from(error: ClusterError) -> QueryError {
        match error {
            // Both are worth a retry: etcd comes back, another leader takes over.
            ClusterError::Unavailable(_) | ClusterError::Fenced(_) => {
                QueryError::Store(StoreError::Unavailable(error.to_string()))
            }
            ClusterError::Corrupt { key, detail } => QueryError::Store(StoreError::Corrupt {
                path: key.into(),
                detail,
            }),
            ClusterError::Invalid(message) => QueryError::Invalid(message),
            ClusterError::NotFound(what) => QueryError::Invalid(format!("not found: {what}")),
        }
    }
}

impl From<etcd_client::Error> for ClusterError {
    fn from(error: etcd_client::Error) -> ClusterError {
        ClusterError::Unavailable(format!("etcd: {error}"))
    }
}

impl From<std::io::Error> for ClusterError {
    fn from(error: std::io::Error) -> ClusterError {
        ClusterError::Unavailable(error.to_string())
    }
}
