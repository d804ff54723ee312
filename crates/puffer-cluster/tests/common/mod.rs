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

/// Options of a test node on `etcd`'s catalog (one worker per replica).
pub fn node_options(etcd: &puffer_cluster::etcd::Etcd) -> puffer_node::DatabaseOptions {
    puffer_node::DatabaseOptions {
        node: puffer_node::serving::NodeConfig {
            workers_per_replica: 1,
            ..Default::default()
        },
        catalog: Some(std::sync::Arc::new(puffer_cluster::etcd::EtcdCatalog::new(
            etcd.clone(),
        ))),
        ..Default::default()
    }
}

/// An elected ingest leader `node_id` with a database in `dir` shipping to `log`;
/// its membership (leave it, or drop it, to depose it) and leadership.
pub fn ingest_leader(
    etcd: &puffer_cluster::etcd::Etcd,
    log: &puffer_cluster::scu_log::ClusterLog,
    node_id: &str,
    ttl: std::time::Duration,
    dir: &std::path::Path,
) -> (
    puffer_node::Database,
    puffer_cluster::etcd::Membership,
    puffer_cluster::etcd::Leadership,
) {
    use puffer_cluster::etcd::{Candidate, MemberCard, Membership, Role};
    let card = MemberCard {
        node_id: node_id.into(),
        roles: vec![Role::Ingest],
        http_address: "127.0.0.1:1".into(),
        rpc_address: None,
        lease: 0,
    };
    let member = Membership::join(etcd, card, ttl).unwrap();
    let leadership =
        Candidate::stand_in(etcd, etcd.keys().ingest_election(), node_id, member.lease())
            .wait_elected(std::time::Duration::from_secs(10))
            .expect("the ingest leader is elected");
    let database = puffer_node::Database::open_with(
        dir,
        puffer_node::DatabaseOptions {
            shipper: Some(std::sync::Arc::new(
                puffer_cluster::scu_log::LeaderShipper::new(log.clone(), leadership.clone()),
            )),
            ..node_options(etcd)
        },
    )
    .unwrap();
    (database, member, leadership)
}

/// A follower (a data node's database) in `dir` on `etcd`'s catalog.
pub fn follower(etcd: &puffer_cluster::etcd::Etcd, dir: &std::path::Path) -> puffer_node::Database {
    puffer_node::Database::open_with(
        dir,
        puffer_node::DatabaseOptions {
            following: true,
            ..node_options(etcd)
        },
    )
    .unwrap()
}

/// A table keyed by `id` with one string attribute, `city`.
pub fn city_schema() -> puffer_store::Schema {
    puffer_store::Schema::new(
        "id",
        vec![puffer_store::Attribute {
            name: "city".into(),
            attr_type: puffer_store::AttrType::String,
        }],
    )
    .unwrap()
}

/// A connection to `server` as cluster `cluster`, deep storage and the log in `dir`,
/// and an elected ingest leader `ingest` with its database in `dir/leader`; its
/// membership and leadership (drop them to depose it).
pub fn leader_on_a_log(
    server: &LocalEtcd,
    dir: &std::path::Path,
    cluster: &str,
) -> (
    puffer_cluster::etcd::Etcd,
    puffer_cluster::DeepStorage,
    puffer_cluster::scu_log::ClusterLog,
    puffer_node::Database,
    (
        puffer_cluster::etcd::Membership,
        puffer_cluster::etcd::Leadership,
    ),
) {
    let etcd = puffer_cluster::etcd::Etcd::connect(&server.config(cluster).unwrap()).unwrap();
    let deep = puffer_cluster::DeepStorage::open(dir.join("deep").to_str().unwrap()).unwrap();
    let log = puffer_cluster::scu_log::ClusterLog::new(etcd.clone(), deep.clone());
    let (leader, member, leadership) = ingest_leader(
        &etcd,
        &log,
        "ingest",
        std::time::Duration::from_secs(5),
        &dir.join("leader"),
    );
    (etcd, deep, log, leader, (member, leadership))
}
