//! The store's integration tests, one binary (crash.rs stays its own: it runs without
//! the test harness and starts itself as the child it kills).

mod common;
mod concurrent;
mod contains;
mod corruption;
mod faults;
mod keydir_bounds;
mod layer_files;
mod model;
mod projection;
mod record_cache_pages;
