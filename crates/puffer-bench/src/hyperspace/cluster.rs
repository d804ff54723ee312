//! The loopback cluster `puffer-bench hyperspace --cluster` runs on, every node in this
//! process talking over loopback TCP (as `puffer-bench cluster` does): an etcd started
//! here, deep storage in a directory, an ingest leader with its gRPC service (it holds
//! every record, builds subspaces and runs the configurator), data nodes following the
//! log and serving their shards and regions over gRPC, and a node without data (the
//! front) that the clients use: its searches fan out through its broker to the regions
//! they ask, its writes and subspace changes go to the leader.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use puffer_cluster::etcd::{Candidate, Etcd, EtcdCatalog, LocalEtcd, MemberCard, Membership, Role};
use puffer_cluster::remote::ClusterRemote;
use puffer_cluster::rpc::server::RpcServer;
use puffer_cluster::scu_log::{ClusterLog, Follower, LeaderShipper};
use puffer_cluster::DeepStorage;
use puffer_node::remote::Remote;
use puffer_node::{Database, DatabaseOptions};

/// How long the data nodes may take to apply what the leader published.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);
/// How often a data node looks for new SCUs.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(5);
/// Deadline of a call between nodes.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// The running cluster; dropping it stops every node.
pub struct Loopback {
    /// The node the clients use (no data).
    pub front: Arc<Database>,
    /// The ingest leader (every record).
    pub leader: Arc<Database>,
    /// The data nodes.
    pub data: Vec<Arc<Database>>,
    /// The front node's way to the others (its broker counts reads' waits).
    front_remote: Arc<ClusterRemote>,
    // Dropped in this order: the followers and services before the etcd they use.
    _followers: Vec<Follower>,
    _services: Vec<RpcServer>,
    _member: Membership,
    _candidate: Candidate,
    _etcd: LocalEtcd,
}

impl Loopback {
    /// Starts the cluster in `dir`, every database with `options` (its catalog etcd's),
    /// `data_nodes` of them serving data.
    pub fn start(
        dir: &Path,
        options: &DatabaseOptions,
        data_nodes: usize,
    ) -> anyhow::Result<Loopback> {
        if LocalEtcd::binary().is_none() {
            bail!("--cluster needs an etcd binary: install Debian's etcd-server (or set PUFFER_ETCD_BIN)");
        }
        if data_nodes == 0 {
            bail!("--data-nodes is at least 1");
        }
        let etcd_server = LocalEtcd::start(&dir.join("etcd"))?;
        let etcd = Etcd::connect(&etcd_server.config("hyperspace")?)?;
        let deep = DeepStorage::open(dir.join("deep").to_str().context("a UTF-8 path")?)?;
        let log = ClusterLog::new(etcd.clone(), deep);
        let with_catalog = || DatabaseOptions {
            catalog: Some(Arc::new(EtcdCatalog::new(etcd.clone()))),
            ..options.clone()
        };
        let leader_address = format!("127.0.0.1:{}", puffer_cluster::etcd::local::free_port()?);
        let card = MemberCard {
            node_id: "ingest".into(),
            roles: vec![Role::Ingest],
            http_address: "127.0.0.1:1".into(),
            rpc_address: Some(leader_address.clone()),
            lease: 0,
        };
        let member = Membership::join(&etcd, card, Duration::from_secs(10))?;
        let candidate = Candidate::stand_in(
            &etcd,
            etcd.keys().ingest_election(),
            "ingest",
            member.lease(),
        );
        let leadership = candidate
            .wait_elected(Duration::from_secs(10))
            .context("the ingest leader was not elected")?;
        let leader = Arc::new(Database::open_with(
            dir.join("leader"),
            DatabaseOptions {
                shipper: Some(Arc::new(LeaderShipper::new(log.clone(), leadership))),
                ..with_catalog()
            },
        )?);
        let mut services = vec![RpcServer::start(leader.clone(), leader_address.parse()?)?];
        let (mut data, mut followers, mut addresses) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..data_nodes {
            let database = Arc::new(Database::open_with(
                dir.join(format!("data{i}")),
                DatabaseOptions {
                    following: true,
                    ..with_catalog()
                },
            )?);
            let service = RpcServer::start(database.clone(), "127.0.0.1:0".parse()?)?;
            addresses.push((format!("data{i}"), service.address().to_string()));
            followers.push(Follower::start(
                log.clone(),
                database.clone(),
                FOLLOW_INTERVAL,
            ));
            services.push(service);
            data.push(database);
        }
        let remote = Arc::new(ClusterRemote::new(etcd.clone(), true, false, CALL_DEADLINE));
        let broker_remote = remote.clone();
        remote
            .broker()
            .context("a node reading elsewhere has a broker")?
            .set_data_nodes(&addresses)?;
        let front = Arc::new(Database::open_with(
            dir.join("front"),
            DatabaseOptions {
                following: true,
                remote: Some(remote as Arc<dyn Remote>),
                ..with_catalog()
            },
        )?);
        Ok(Loopback {
            front,
            leader,
            data,
            front_remote: broker_remote,
            _followers: followers,
            _services: services,
            _member: member,
            _candidate: candidate,
            _etcd: etcd_server,
        })
    }

    /// The front node's fan-outs so far, and their waits for a snapshot holding its own
    /// writes.
    pub fn snapshot_waits(&self) -> puffer_cluster::broker::SnapshotWaits {
        self.front_remote
            .broker()
            .map(|broker| broker.snapshot_waits())
            .unwrap_or_default()
    }

    /// Waits until every data node has applied what the leader published and holds
    /// the catalog's tables, and the front node knows them too.
    pub fn settle(&self) -> anyhow::Result<()> {
        let target = self.leader.published();
        let give_up = Instant::now() + SETTLE_DEADLINE;
        for node in &self.data {
            while node.published() < target {
                if Instant::now() > give_up {
                    bail!(
                        "a data node holds SCU {} after {SETTLE_DEADLINE:?}; the leader {target}",
                        node.published()
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            node.sync_tables()?;
        }
        self.front.sync_tables()?;
        Ok(())
    }

    /// Every database holding data: the leader and the data nodes.
    pub fn holders(&self) -> Vec<&Database> {
        std::iter::once(&*self.leader)
            .chain(self.data.iter().map(|d| &**d))
            .collect()
    }
}
