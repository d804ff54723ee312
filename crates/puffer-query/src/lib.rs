//! `puffer-query`: the query model every interface shares, PufferDB's SQL subset (with
//! LazyBase's `FRESHNESS` clause), and the importer that turns CSV and JSON files into
//! records. It runs nothing: `puffer-node` executes statements on its tables.

pub mod ast;
pub mod error;
pub mod import;
pub mod sql;

pub use ast::{Granularity, Output, Select, Statement, TimePartition};
pub use error::{ErrorCode, QueryError, Result};
