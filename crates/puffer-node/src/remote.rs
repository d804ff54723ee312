//! What a database does elsewhere, in a cluster: a node that holds no data reads
//! from the data nodes, and a node that does not number SCUs hands writes and table
//! changes to the one that does (the ingest leader). A single node has no remote
//! and does everything itself.
//!
//! A request handed on is served by [`crate::Database::lead`] on the leader, which
//! never hands it on again: a node that is no longer the leader refuses it (a
//! retryable error), so a request crosses at most one hop.

use puffer_store::{ReadOptions, Schema, WriteOp};
use serde::{Deserialize, Serialize};

use crate::layout::TableLayout;
use crate::message::{ReadAnswer, ReadRequest};
use puffer_query::Result;

/// One table's operations in a write handed to the leader.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WritePart {
    /// The table's name.
    pub table: String,
    /// Its uid as the sender knows it: a table dropped and made again meanwhile has
    /// another, and the write is refused rather than applied to the new one.
    pub uid: u64,
    /// The operations.
    pub ops: Vec<WriteOp>,
}

/// What only the node numbering SCUs does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LeaderRequest {
    /// One SCU over one or more tables.
    Write {
        /// Each table's operations.
        parts: Vec<WritePart>,
    },
    /// Creates a table.
    CreateTable {
        /// Its name.
        name: String,
        /// Its schema.
        schema: Schema,
        /// Its shards and replicas (a time-partitioned table's: each chunk's); `None`:
        /// the leader's default.
        layout: Option<TableLayout>,
        /// Its time partition, if it is time-partitioned.
        partition: Option<puffer_query::TimePartition>,
    },
    /// Drops a table.
    DropTable {
        /// Its name.
        name: String,
    },
    /// Adds a subspace to a table and builds it (see [`crate::Database::add_subspace`]);
    /// answered once it is ready.
    AddSubspace {
        /// The table.
        table: String,
        /// The subspace's attributes.
        attributes: Vec<String>,
        /// Its regions, at most.
        regions: u32,
    },
    /// Drops a table's subspace.
    DropSubspace {
        /// The table.
        table: String,
        /// The subspace's name.
        name: String,
    },
    /// Searches a node served since it last sent them, for the leader's profile (the
    /// configurator runs where every write passes).
    Searches {
        /// The table.
        table: String,
        /// Its uid as the sender knows it.
        uid: u64,
        /// Each shape with its count, at most [`MAX_SENT_SHAPES`].
        searches: Vec<ServedSearches>,
    },
    /// The oldest snapshot that holds every SCU the leader acknowledged longer than
    /// `bound` ago ([`crate::commit::Committer::freshness_floor`]): what a read with
    /// that freshness bound must see, wherever it reads.
    FreshnessFloor {
        /// The read's freshness bound.
        bound: std::time::Duration,
    },
}

/// Most search shapes one [`LeaderRequest::Searches`] carries (as many as the profiler
/// tracks).
pub const MAX_SENT_SHAPES: usize = 256;

/// Searches of one shape a node served.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServedSearches {
    /// Their shape.
    pub shape: puffer_adapt::hyperspace::SearchShape,
    /// How many.
    pub count: u64,
    /// The page the last one asked for (`None`: every row).
    pub page_rows: Option<u64>,
}

impl LeaderRequest {
    /// Whether the leader may take long over it (a subspace is built from a read of
    /// its whole table), so that the call waits longer than a write's.
    pub fn is_long(&self) -> bool {
        matches!(self, LeaderRequest::AddSubspace { .. })
    }
}

/// The leader's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaderResponse {
    /// The SCU's number: it is durable and published on the leader.
    Written {
        /// The SCU.
        seq: u64,
    },
    /// The table change is done (in the catalog).
    Done,
    /// The subspace is built and ready (in the catalog).
    SubspaceAdded {
        /// Its name.
        name: String,
    },
    /// A read with the freshness bound asked reads this snapshot or a newer one.
    FreshnessFloor {
        /// The snapshot.
        seq: u64,
    },
}

/// Where a cluster node sends what it does not do itself.
pub trait Remote: Send + Sync + std::fmt::Debug {
    /// Whether reads go to other nodes (this node holds no data).
    fn reads_elsewhere(&self) -> bool;

    /// Answers `request` on table `table` from the nodes that hold it, complete or
    /// not at all.
    fn read(&self, table: &str, request: &ReadRequest) -> Result<ReadAnswer>;

    /// Answers a search or count of subspace `subspace` from its regions `regions`
    /// only (see [`crate::subspace`]), on the nodes that hold them, complete or not at
    /// all, each row with the table's key (the region taken off before the regions'
    /// answers are merged).
    fn read_regions(
        &self,
        subspace: &str,
        request: &ReadRequest,
        regions: &[u32],
    ) -> Result<ReadAnswer>;

    /// The snapshot a read of several tables at once reads at (see
    /// [`crate::Database::choose_snapshot`]) where some reads go elsewhere: one that
    /// every data node holds, at least `read.min_snapshot` (and what was written
    /// through this node, for a read asking for the newest data). `None` where this
    /// node reads everything itself and chooses as a single node does.
    fn choose_snapshot(&self, read: ReadOptions) -> Option<Result<u64>>;

    /// Has the leader do `request`.
    fn lead(&self, request: LeaderRequest) -> Result<LeaderResponse>;
}
