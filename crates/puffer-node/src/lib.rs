//! `puffer-node`: one PufferDB node. A [`Database`] of tables, each spread over shards
//! by key hash with replicas on this node; one committer numbering every SCU of the
//! database; replicas served from bounded request queues and reached through request
//! messages ([`replica`]); the adaptive node spending a memory budget on sample layers
//! (BlowFish); the catalog of what the database holds.

pub mod catalog;
pub mod commit;
pub mod database;
pub mod hyperspace;
pub mod layout;
pub mod message;
pub mod partition;
pub mod remote;
pub mod seed;
pub mod serving;
pub mod shards;
pub mod subspace;
pub mod table;
pub mod texts;

pub use database::{Answer, Database, DatabaseOptions, ShardReads};
pub use message::{ReadAnswer, ReadRequest, ReplicaRequest, ReplicaResponse, ShardReplicas, Wait};
pub use table::{RawAnswer, Table, TableLayout, TableShards};

impl puffer_query::sql::SchemaSource for Database {
    fn schema_of(&self, table: &str) -> puffer_query::Result<std::sync::Arc<puffer_store::Schema>> {
        Ok(self.table(table)?.schema())
    }
}

impl Database {
    /// Parses and runs one SQL statement.
    pub fn execute_sql(&self, text: &str) -> puffer_query::Result<Answer> {
        let statement = puffer_query::sql::parse(text, self)?;
        self.execute(statement)
    }
}
