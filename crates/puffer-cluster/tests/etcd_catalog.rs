//! The etcd catalog passes the conformance suite every catalog passes, against a real
//! etcd, and stays consistent when several clients change it at once.

mod common;

use puffer_cluster::etcd::{Etcd, EtcdCatalog, LocalEtcd};
use puffer_node::catalog::conformance::{self, Harness};
use puffer_node::catalog::{Catalog, TableEntry};
use puffer_node::layout::TableLayout;
use puffer_store::Schema;

struct OnEtcd<'a> {
    etcd: &'a LocalEtcd,
    clusters: usize,
}

impl OnEtcd<'_> {
    fn connect(&self) -> Box<dyn Catalog> {
        let config = self
            .etcd
            .config(&format!("conformance-{}", self.clusters))
            .unwrap();
        Box::new(EtcdCatalog::new(Etcd::connect(&config).unwrap()))
    }
}

impl Harness for OnEtcd<'_> {
    fn fresh(&mut self) -> Box<dyn Catalog> {
        // A new cluster name is a new, empty catalog on the same etcd.
        self.clusters += 1;
        self.connect()
    }

    fn reopen(&mut self) -> Option<Box<dyn Catalog>> {
        // A new connection reads what the last one wrote.
        Some(self.connect())
    }
}

#[test]
fn etcd_catalog_passes_the_conformance_suite() {
    let Some((etcd, _dir)) = common::etcd_or_skip("etcd_catalog_passes_the_conformance_suite")
    else {
        return;
    };
    conformance::run(&mut OnEtcd {
        etcd: &etcd,
        clusters: 0,
    });
}

#[test]
fn concurrent_creates_take_each_name_and_uid_once() {
    let Some((etcd, _dir)) = common::etcd_or_skip("concurrent_creates_take_each_name_and_uid_once")
    else {
        return;
    };
    let config = etcd.config("race").unwrap();
    let schema = Schema::new("id", vec![]).unwrap();
    // Four clients race to create the same 10 names, each with its own uids; uid
    // 1000 + name is shared by all so that uids collide too.
    let winners: Vec<Vec<(String, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4u64)
            .map(|client| {
                let catalog = EtcdCatalog::new(Etcd::connect(&config).unwrap());
                let schema = schema.clone();
                scope.spawn(move || {
                    let mut won = Vec::new();
                    for n in 0..10u64 {
                        let entry = TableEntry {
                            name: format!("t{n}"),
                            uid: if n % 2 == 0 {
                                1000 + n
                            } else {
                                client * 100 + n + 1
                            },
                            layout: TableLayout {
                                shards: 1,
                                replicas: 1,
                            },
                            schema: schema.clone(),
                            partition: None,
                            chunk_of: None,
                            subspace_of: None,
                        };
                        if catalog.create_table(&entry).is_ok() {
                            won.push((entry.name, entry.uid));
                        }
                    }
                    won
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut won: Vec<(String, u64)> = winners.into_iter().flatten().collect();
    won.sort();
    // The oracle: every name was taken exactly once, and the catalog lists the winners.
    let names: Vec<String> = won.iter().map(|(n, _)| n.clone()).collect();
    let mut expected: Vec<String> = (0..10).map(|n| format!("t{n}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    let catalog = EtcdCatalog::new(Etcd::connect(&config).unwrap());
    let listed: Vec<(String, u64)> = catalog
        .tables()
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.uid))
        .collect();
    assert_eq!(listed, won);
}

#[test]
fn an_unreachable_etcd_is_a_clear_retryable_error() {
    let port = puffer_cluster::etcd::local::free_port().unwrap();
    let mut config =
        puffer_cluster::etcd::EtcdConfig::new(&format!("127.0.0.1:{port}"), "x").unwrap();
    config.request_timeout = std::time::Duration::from_millis(300);
    let error = Etcd::connect(&config).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, puffer_cluster::ClusterError::Unavailable(_)),
        "{message}"
    );
    assert!(message.contains(&port.to_string()), "{message}");
    // Bad configurations are refused before any connection.
    for (endpoints, cluster) in [("", "x"), ("127.0.0.1:1", "Bad/Name"), ("ftp://x", "x")] {
        assert!(
            puffer_cluster::etcd::EtcdConfig::new(endpoints, cluster).is_err(),
            "{endpoints:?} {cluster:?} was taken"
        );
    }
}
