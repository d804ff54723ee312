//! PufferDB's fuzz targets: each `harness` function takes the fuzzer's bytes, feeds them
//! to one reader or parser, and panics when an oracle is broken. The project's own tests
//! replay the checked-in corpora through the same functions (`harness.rs` is included
//! there by path), so a finding once added to a corpus stays a test on stable.

pub mod harness;
