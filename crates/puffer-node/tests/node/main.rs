//! The node crate's integration tests, one binary: each file was its own test binary,
//! and every one of them linked the whole crate and its dependencies again.

mod catalog;
mod database_catalog;
mod hyperspace;
mod partition;
mod serving;
mod snapshots;
mod sql;
mod subspaces;
mod table;
