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
        /// Records go to time chunks by this timestamp attribute (`PARTITION BY`).
        partition: Option<TimePartition>,
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
    /// Add a subspace (hyperspace hashing) to a table:
    /// `ALTER TABLE t ADD SUBSPACE (a, b) [REGIONS n]`.
    AddSubspace {
        /// Table name.
        table: String,
        /// The subspace's attributes, one dimension each.
        attributes: Vec<String>,
        /// Regions it is cut into at most; `None`: the database's default.
        regions: Option<u32>,
    },
    /// Drop a table's subspace: `ALTER TABLE t DROP SUBSPACE t__ss1`.
    DropSubspace {
        /// Table name.
        table: String,
        /// The subspace's name.
        name: String,
    },
}

/// How long a time chunk of a time-partitioned table is (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// One hour.
    Hour,
    /// One day.
    Day,
    /// One calendar month.
    Month,
}

impl Granularity {
    /// Its name in SQL and JSON: `hour`, `day` or `month`.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::Hour => "hour",
            Granularity::Day => "day",
            Granularity::Month => "month",
        }
    }

    /// The granularity named `name` (any case).
    pub fn parse(name: &str) -> Option<Granularity> {
        match name.to_ascii_lowercase().as_str() {
            "hour" => Some(Granularity::Hour),
            "day" => Some(Granularity::Day),
            "month" => Some(Granularity::Month),
            _ => None,
        }
    }
}

/// A table partitioned by time, as Druid's: each record goes to the chunk of its
/// timestamp attribute, and each chunk is a unit of placement and replication.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimePartition {
    /// The timestamp attribute.
    pub attribute: String,
    /// The chunks' length.
    pub granularity: Granularity,
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
