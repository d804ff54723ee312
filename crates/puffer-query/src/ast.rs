//! The query model: every request (SQL or JSON) becomes one of these statements.

use std::time::Duration;

use puffer_store::{Predicate, Record, Schema};

/// A statement on a database.
#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    /// Read records or count them.
    Select(Select),
    /// Put records (insert or replace by key), as one SCU.
    Insert {
        /// Table name.
        table: String,
        /// Records to put.
        records: Vec<Record>,
    },
    /// Delete records by key, as one SCU.
    Delete {
        /// Table name.
        table: String,
        /// Keys to delete.
        keys: Vec<Vec<u8>>,
    },
    /// Create a table.
    CreateTable {
        /// Table name.
        name: String,
        /// Its key and attributes.
        schema: Schema,
    },
    /// Drop a table and its data.
    DropTable {
        /// Table name.
        name: String,
    },
    /// List the tables.
    ShowTables,
    /// Show a table's schema.
    Describe {
        /// Table name.
        table: String,
    },
}

/// A read.
#[derive(Clone, Debug, PartialEq)]
pub struct Select {
    /// Table name.
    pub table: String,
    /// What to return.
    pub output: Output,
    /// Which records (`Predicate::All` without a WHERE).
    pub predicate: Predicate,
    /// At most this many rows.
    pub limit: Option<usize>,
    /// Every SCU acknowledged more than this long ago must be visible (`None`: all).
    pub freshness: Option<Duration>,
}

/// What a select returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Every column.
    All,
    /// These columns (the key column may be among them).
    Columns(Vec<String>),
    /// The number of matching records.
    Count,
}
