//! `puffer-query`: the query model every interface shares, PufferDB's SQL subset (with
//! LazyBase's `FRESHNESS` clause), and a database of tables (spread over shards, each
//! with replicas served by the adaptive node) that runs statements.

pub mod ast;
pub mod commit;
pub mod database;
pub mod error;
pub mod import;
pub mod sql;
pub mod table;

pub use ast::{Output, Select, Statement};
pub use database::{Answer, Database, DatabaseOptions};
pub use error::{QueryError, Result};
pub use table::{RawAnswer, Table, TableLayout, TableShards};

impl sql::SchemaSource for Database {
    fn schema_of(&self, table: &str) -> Result<std::sync::Arc<puffer_store::Schema>> {
        Ok(self.table(table)?.schema())
    }
}

impl Database {
    /// Parses and runs one SQL statement.
    pub fn execute_sql(&self, text: &str) -> Result<Answer> {
        let statement = sql::parse(text, self)?;
        self.execute(statement)
    }
}
