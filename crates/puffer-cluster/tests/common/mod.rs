//! What the cluster tests share: an etcd of their own, or a loud skip.
#![allow(dead_code)] // each test file uses part of this module

use puffer_cluster::etcd::LocalEtcd;

/// Set (CI sets it) to make a missing service a failure rather than a skip.
pub const REQUIRE_SERVICES: &str = "PUFFER_REQUIRE_SERVICES";

/// A started etcd with its temporary directory, or `None` after saying loudly why
/// the test skips.
pub fn etcd_or_skip(test: &str) -> Option<(LocalEtcd, tempfile::TempDir)> {
    if LocalEtcd::binary().is_none() {
        if std::env::var_os(REQUIRE_SERVICES).is_some() {
            panic!("{test}: no etcd binary, and {REQUIRE_SERVICES} is set");
        }
        eprintln!(
            "\n*** SKIPPED {test}: no etcd binary (install Debian's etcd-server or set \
             PUFFER_ETCD_BIN) ***\n"
        );
        return None;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let etcd = LocalEtcd::start(&dir.path().join("etcd")).expect("etcd starts");
    Some((etcd, dir))
}

/// A started moto server, or `None` after saying loudly why the test skips.
pub fn moto_or_skip(test: &str) -> Option<puffer_cluster::local_s3::LocalS3> {
    if puffer_cluster::local_s3::LocalS3::binary().is_none() {
        if std::env::var_os(REQUIRE_SERVICES).is_some() {
            panic!("{test}: no moto_server, and {REQUIRE_SERVICES} is set");
        }
        eprintln!(
            "\n*** SKIPPED {test}: no moto_server (pip install 'moto[server]', or set \
             PUFFER_MOTO_BIN) ***\n"
        );
        return None;
    }
    Some(puffer_cluster::local_s3::LocalS3::start().expect("moto_server starts"))
}
