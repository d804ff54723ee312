//! One process as a cluster node: joins etcd, opens its database as a follower of the
//! cluster's log, and runs what its roles need.
//!
//! - every node with data (ingest, data) follows the log into its own database;
//! - `data` serves its shards over gRPC to brokers, and `ingest` serves writes
//!   handed on by the other nodes;
//! - a node that follows hands the writes and table changes it is sent to the
//!   ingest leader (over gRPC), so any node takes them;
//! - `ingest` stands for ingest leader; once elected it catches up with the log,
//!   then numbers and ships SCUs itself (writes sent to any other node are refused
//!   with a retryable error naming the need for the leader);
//! - `coordinator` stands for coordinator leader (placement and routing build on it);
//! - `indexer` follows the log too and publishes its shards' segments to deep storage
//!   ([`crate::segments`]; each shard by one of the live indexers), so that a node
//!   with a fresh data directory loads them ([`ClusterNode::seed`]) instead of
//!   replaying the whole log;
//! - `data` without `ingest` or `indexer` holds only the shards the coordinator placed
//!   on it ([`crate::holding`]): it follows the whole log but keeps only those, takes
//!   newly placed ones on from deep storage, and reads the others through its broker;
//! - `broker` without `data`: the node holds no data (it keeps the catalog's tables
//!   empty, for their schemas); its reads are fanned out to the data nodes through a
//!   [`crate::broker::Broker`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use puffer_node::commit::{LogShipper, ShipFailure};
use puffer_node::remote::Remote;
use puffer_node::{Database, DatabaseOptions};
use serde_json::json;

use crate::deep_storage::DeepStorage;
use crate::error::{ClusterError, Result};
use crate::etcd::membership::{check_lease_ttl, check_node_id};
use crate::etcd::{
    leader, leader_of, members, Candidate, Etcd, EtcdCatalog, EtcdConfig, Leadership, MemberCard,
    Membership, Role,
};
use crate::holding::{
    apply_planned_layers, ensure_held, hold_round, HoldingMemory, HoldingStatus, HOLDING_INTERVAL,
};
use crate::remote::ClusterRemote;
use crate::rpc::server::RpcServer;
use crate::scu_log::{ClusterLog, Follower, LeaderShipper};
use crate::segments::{seed_data_dir_for, PublishRound, Publisher, SeedReport};

/// How often a follower looks for new SCUs.
pub const DEFAULT_FOLLOW_INTERVAL: Duration = Duration::from_millis(20);
/// Deadline of a call to another node (a read through the broker, a write handed to
/// the leader).
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);
/// How often a broker looks up the live data nodes.
pub const DATA_NODES_INTERVAL: Duration = Duration::from_millis(500);
/// How often a node that follows no log (a broker) brings its tables up to date.
pub const TABLES_INTERVAL: Duration = Duration::from_secs(1);
/// How long a seeded node may take to follow the log past its furthest shard before
/// it serves (it gives up starting after that).
pub const SEEDED_CATCH_UP_DEADLINE: Duration = Duration::from_secs(600);

/// What a node needs to join a cluster.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// etcd and the cluster's name.
    pub etcd: EtcdConfig,
    /// Deep storage: a directory or `s3://bucket/prefix`.
    pub deep_storage: String,
    /// This node's id (unique among live nodes).
    pub node_id: String,
    /// Its roles.
    pub roles: Vec<Role>,
    /// Where its HTTP API listens.
    pub http_address: String,
    /// Where its gRPC service listens (data nodes).
    pub rpc_listen: SocketAddr,
    /// Membership lease TTL.
    pub lease_ttl: Duration,
    /// How often it looks for new SCUs.
    pub follow_interval: Duration,
    /// How often the ingest leader collects the log (groups every shard's published
    /// segments cover and every node has applied).
    pub log_gc_interval: Duration,
    /// Replicas of each shard the coordinator places on the data nodes.
    pub segment_replicas: usize,
    /// How often an indexer publishes new segments
    /// ([`crate::segments::PUBLISH_INTERVAL`] by default).
    pub publish_interval: Duration,
    /// How long a data node keeps a shard no longer placed on it
    /// ([`crate::holding::RELEASE_GRACE`] by default).
    pub release_grace: Duration,
    /// How often the coordinator leader collects read counts and plans replicas by
    /// popularity ([`crate::popularity::DEFAULT_WINDOW`] by default; zero: never).
    pub popularity_window: Duration,
    /// Seconds of query work a second each data node takes on in the joint plan of
    /// layers and replicas ([`DEFAULT_JOINT_WORK_BUDGET`]; 0: no joint plan, replicas
    /// by popularity alone and layers left to each node).
    pub joint_work_budget: f64,
    /// How the coordinator chooses replicas by popularity (Getafix by default).
    pub placement_policy: PlacementPolicy,
    /// How often a broker reads the routing table (the coordinator's placement) again
    /// ([`DEFAULT_ROUTING_POLL`] by default); sooner when a read meets a shard the
    /// table does not place.
    pub routing_poll: Duration,
    /// How much of etcd's history the ingest leader keeps: it compacts the revisions
    /// older than this ([`crate::etcd::history::DEFAULT_HISTORY_RETENTION`] by default;
    /// zero: never, for an etcd compacted by its operator).
    pub history_retention: Duration,
}

/// How the coordinator chooses each shard's replicas every popularity window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlacementPolicy {
    /// Getafix: ModifiedBestFit on popularity, with layers when the joint plan is on.
    #[default]
    Getafix,
    /// Scarlett, the baseline: a replica per read in flight (see
    /// [`crate::placement::Planner::Scarlett`]).
    Scarlett,
}

impl PlacementPolicy {
    /// The policy named `name` (`getafix` or `scarlett`).
    pub fn parse(name: &str) -> Result<PlacementPolicy> {
        match name {
            "getafix" => Ok(PlacementPolicy::Getafix),
            "scarlett" => Ok(PlacementPolicy::Scarlett),
            other => Err(ClusterError::Invalid(format!(
                "no placement policy {other:?}: getafix or scarlett"
            ))),
        }
    }
}

/// How often a broker reads the routing table by default (Getafix's brokers poll every
/// 20 s; a replica dropped lazily is kept a whole popularity window, 60 s by default,
/// so a table up to one poll old never routes to a dropped replica).
pub const DEFAULT_ROUTING_POLL: Duration = Duration::from_secs(20);
/// The soonest a broker reads the routing table again.
pub const MIN_ROUTING_POLL: Duration = DATA_NODES_INTERVAL;

/// The work a data node takes on in the joint plan by default: one thread busy all the
/// time.
pub const DEFAULT_JOINT_WORK_BUDGET: f64 = 1.0;
/// The most work a node may be planned for (threads busy all the time).
pub const MAX_JOINT_WORK_BUDGET: f64 = 1024.0;

impl ClusterConfig {
    /// Checks everything a node can check before it talks to anyone.
    pub fn validate(&self) -> Result<()> {
        self.etcd.validate()?;
        check_node_id(&self.node_id)?;
        check_lease_ttl(self.lease_ttl)?;
        if self.roles.is_empty() {
            return Err(ClusterError::Invalid(
                "give a node at least one role".into(),
            ));
        }
        if self.follow_interval.is_zero() || self.follow_interval > Duration::from_secs(10) {
            return Err(ClusterError::Invalid(
                "the follow interval is between 1 ms and 10 s".into(),
            ));
        }
        if !(1..=crate::placement::MAX_SEGMENT_REPLICAS).contains(&self.segment_replicas) {
            return Err(ClusterError::Invalid(format!(
                "segment replicas is between 1 and {}",
                crate::placement::MAX_SEGMENT_REPLICAS
            )));
        }
        if self.log_gc_interval < Duration::from_secs(1)
            || self.log_gc_interval > Duration::from_secs(86_400)
        {
            return Err(ClusterError::Invalid(
                "the log collection interval is between 1 s and 86400 s".into(),
            ));
        }
        if !(MIN_ROUTING_POLL..=Duration::from_secs(3600)).contains(&self.routing_poll) {
            return Err(ClusterError::Invalid(format!(
                "the routing poll is between {} s and 3600 s",
                MIN_ROUTING_POLL.as_secs_f64()
            )));
        }
        if self.popularity_window > Duration::from_secs(3600) {
            return Err(ClusterError::Invalid(
                "the popularity window is between 1 s and 3600 s, or 0 for none".into(),
            ));
        }
        if !(self.joint_work_budget.is_finite()
            && (0.0..=MAX_JOINT_WORK_BUDGET).contains(&self.joint_work_budget))
        {
            return Err(ClusterError::Invalid(format!(
                "the joint work budget is between 0 (no joint plan) and {MAX_JOINT_WORK_BUDGET} \
                 seconds of work a second"
            )));
        }
        if self.release_grace > Duration::from_secs(3600) {
            return Err(ClusterError::Invalid(
                "the release grace is between 0 s and 3600 s".into(),
            ));
        }
        let retention = self.history_retention;
        if (!retention.is_zero() && retention < Duration::from_secs(1))
            || retention > crate::etcd::history::MAX_HISTORY_RETENTION
        {
            return Err(ClusterError::Invalid(format!(
                "the etcd history retention is between 1 s and {} s, or 0 for no compaction",
                crate::etcd::history::MAX_HISTORY_RETENTION.as_secs()
            )));
        }
        if self.publish_interval < Duration::from_secs(1)
            || self.publish_interval > Duration::from_secs(3600)
        {
            return Err(ClusterError::Invalid(
                "the publish interval is between 1 s and 3600 s".into(),
            ));
        }
        Ok(())
    }

    fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// Whether a node with `roles` holds only the shards placed on it ([`crate::holding`]):
/// a data node that neither numbers SCUs (ingest) nor publishes them (indexer), which
/// hold every shard.
pub fn holds_only_placed(roles: &[Role]) -> bool {
    roles.contains(&Role::Data) && !roles.contains(&Role::Ingest) && !roles.contains(&Role::Indexer)
}

/// The shipper of a node that may become the ingest leader: ships only while it is.
#[derive(Debug)]
struct IngestShipper {
    log: ClusterLog,
    leading: Mutex<Option<LeaderShipper>>,
}

impl LogShipper for IngestShipper {
    fn ship(&self, first: u64, last: u64, records: &[u8]) -> std::result::Result<(), ShipFailure> {
        match &*self.leading.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(shipper) => shipper.ship(first, last, records),
            None => Err(ShipFailure::NotShipped(
                "this node is not the ingest leader".into(),
            )),
        }
    }
}

impl IngestShipper {
    fn lead(&self, leadership: Leadership) {
        *self.leading.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(LeaderShipper::new(self.log.clone(), leadership));
    }

    /// Its leadership while it leads.
    fn leadership(&self) -> Option<Leadership> {
        self.leading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|shipper| shipper.leadership().clone())
    }

    fn step_down(&self) {
        *self.leading.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// A node of a cluster.
pub struct ClusterNode {
    config: ClusterConfig,
    etcd: Etcd,
    log: ClusterLog,
    deep: DeepStorage,
    shipper: Arc<IngestShipper>,
    remote: Arc<ClusterRemote>,
    running: Mutex<Option<Running>>,
    leads_ingest: Arc<AtomicBool>,
    lost: Arc<Mutex<Option<String>>>,
    seeded: Mutex<Option<SeedReport>>,
    publishing: Arc<Mutex<PublishStatus>>,
    log_gc: Arc<Mutex<LogGcStatus>>,
    history: Arc<Mutex<HistoryStatus>>,
    placing: Arc<Mutex<Option<String>>>,
    holding: Arc<Mutex<HoldingStatus>>,
}

/// What the ingest leader's log collection did, for status.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct LogGcStatus {
    rounds: u64,
    /// The horizon the next round collects up to.
    horizon: u64,
    groups: usize,
    objects_left: usize,
    first_kept: u64,
    error: Option<String>,
}

/// What the ingest leader's compaction of etcd's history did, for status.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct HistoryStatus {
    /// Compactions this node made.
    compactions: u64,
    /// The revision it compacted up to last.
    compacted_to: i64,
    error: Option<String>,
}

/// What the indexer's publisher did last, for status.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct PublishStatus {
    rounds: u64,
    last: Option<PublishRound>,
    shards: usize,
    bytes: u64,
    error: Option<String>,
}

struct Running {
    membership: Arc<Membership>,
    follower: Arc<Mutex<Option<Follower>>>,
    _rpc: Option<RpcServer>,
    _coordinator: Option<Arc<Candidate>>,
    watcher: Option<std::thread::JoinHandle<()>>,
    publisher: Option<std::thread::JoinHandle<()>>,
    collector: Option<std::thread::JoinHandle<()>>,
    compactor: Option<std::thread::JoinHandle<()>>,
    placer: Option<std::thread::JoinHandle<()>>,
    holder: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl ClusterNode {
    /// Connects to etcd and deep storage (nothing is registered yet).
    pub fn connect(config: ClusterConfig) -> Result<ClusterNode> {
        config.validate()?;
        let etcd = Etcd::connect(&config.etcd)?;
        let deep = DeepStorage::open(&config.deep_storage)?;
        let log = ClusterLog::new(etcd.clone(), deep.clone());
        let reads_elsewhere = config.has(Role::Broker) && !config.has(Role::Data);
        let remote = Arc::new(ClusterRemote::new(
            etcd.clone(),
            reads_elsewhere,
            holds_only_placed(&config.roles),
            CALL_DEADLINE,
        ));
        Ok(ClusterNode {
            remote,
            shipper: Arc::new(IngestShipper {
                log: log.clone(),
                leading: Mutex::new(None),
            }),
            config,
            etcd,
            log,
            deep,
            running: Mutex::new(None),
            leads_ingest: Arc::new(AtomicBool::new(false)),
            lost: Arc::new(Mutex::new(None)),
            seeded: Mutex::new(None),
            publishing: Arc::default(),
            log_gc: Arc::default(),
            history: Arc::default(),
            placing: Arc::default(),
            holding: Arc::default(),
        })
    }

    /// Whether this node follows the log into its own database (data, ingest and
    /// indexer nodes do; a broker alone does not).
    pub fn follows_log(&self) -> bool {
        [Role::Data, Role::Ingest, Role::Indexer]
            .iter()
            .any(|role| self.config.has(*role))
    }

    /// Before the database is opened: a node that follows the log and has a fresh data
    /// directory `dir` loads the shards published in deep storage into it (a data-only
    /// node, those placed on it), so that it follows the log only from where they stand. `None` when nothing was loaded (the
    /// directory holds a database, nothing is published, or the node holds no data).
    pub fn seed(&self, dir: &std::path::Path) -> Result<Option<SeedReport>> {
        if !self.follows_log() {
            return Ok(None);
        }
        let placed_on =
            holds_only_placed(&self.config.roles).then_some(self.config.node_id.as_str());
        let report = seed_data_dir_for(&self.etcd, &self.deep, dir, placed_on)
            .map_err(|e| ClusterError::Unavailable(format!("loading published segments: {e}")))?;
        self.seeded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(&report);
        Ok(report)
    }

    /// `base` with this cluster's catalog, as a follower, with the ingest shipper on
    /// an ingest node, reading elsewhere on a broker without data.
    pub fn database_options(&self, base: DatabaseOptions) -> DatabaseOptions {
        DatabaseOptions {
            remote: Some(self.remote.clone() as Arc<dyn Remote>),
            catalog: Some(Arc::new(EtcdCatalog::for_node(
                self.etcd.clone(),
                &self.config.node_id,
            ))),
            following: true,
            shipper: self
                .config
                .has(Role::Ingest)
                .then(|| self.shipper.clone() as Arc<dyn LogShipper>),
            ..base
        }
    }

    /// Joins (membership on a lease) and starts what the roles need, over `database`
    /// (opened with [`ClusterNode::database_options`]).
    pub fn start(&self, database: Arc<Database>) -> Result<()> {
        let follows = self.follows_log();
        let serves_shards = self.config.has(Role::Data) || self.config.has(Role::Ingest);
        let seeded = self
            .seeded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(seeded) = seeded {
            // Its shards stand at different SCUs until it has followed past the
            // furthest: no read may see that.
            self.catch_up_to(&database, seeded.serve_from)?;
        } else if follows {
            // A node that was away while the log was collected past it can never catch
            // up: it says so instead of serving what it has. (etcd away: checked by
            // the follower later.)
            if let Ok(first) = self.log.first() {
                let held = database.published();
                if held + 1 < first {
                    return Err(ClusterError::Invalid(format!(
                        "this node holds the log up to SCU {held}, but the log keeps SCUs \
                         from {first} only: start it with an empty data directory, and it \
                         loads the published segments"
                    )));
                }
            }
        }
        let rpc = if serves_shards {
            // A node holding only the shards placed on it takes one on when a broker
            // finds it held by no live node.
            let taker = holds_only_placed(&self.config.roles).then(|| {
                let (etcd, deep, log) = (self.etcd.clone(), self.deep.clone(), self.log.clone());
                let database = database.clone();
                Arc::new(move |table: &str, uid: u64, shard: u32| {
                    ensure_held((&etcd, &deep, &log), &database, table, uid, shard)
                }) as crate::rpc::server::ShardTaker
            });
            Some(RpcServer::start_with(
                database.clone(),
                self.config.rpc_listen,
                taker,
            )?)
        } else {
            None
        };
        let card = MemberCard {
            node_id: self.config.node_id.clone(),
            roles: self.config.roles.clone(),
            http_address: self.config.http_address.clone(),
            rpc_address: rpc.as_ref().map(|r| r.address().to_string()),
            lease: 0,
        };
        let membership = Arc::new(Membership::join(&self.etcd, card, self.config.lease_ttl)?);
        let follower = Arc::new(Mutex::new(follows.then(|| {
            Follower::start(
                self.log.clone(),
                database.clone(),
                self.config.follow_interval,
            )
        })));
        // Failing (etcd away), the watch thread tries again every half second.
        let _ = self.remote.refresh_data_nodes();
        let _ = self.remote.refresh_routing();
        let coordinator = self.config.has(Role::Coordinator).then(|| {
            Arc::new(Candidate::stand(
                &self.etcd,
                &self.config.node_id,
                membership.lease(),
            ))
        });
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let ingest = self.config.has(Role::Ingest).then(|| {
                Candidate::stand_in(
                    &self.etcd,
                    self.etcd.keys().ingest_election(),
                    &self.config.node_id,
                    membership.lease(),
                )
            });
            let (membership, follower, stop) = (membership.clone(), follower.clone(), stop.clone());
            let (log, shipper) = (self.log.clone(), self.shipper.clone());
            let (leads, lost) = (self.leads_ingest.clone(), self.lost.clone());
            let (remote, database) = (self.remote.clone(), database.clone());
            let (etcd, node_id) = (self.etcd.clone(), self.config.node_id.clone());
            let routing_poll = self.config.routing_poll;
            std::thread::Builder::new()
                .name("puffer-cluster-watch".into())
                .spawn(move || {
                    watch(WatchParts {
                        database,
                        membership,
                        follower,
                        ingest,
                        log,
                        shipper,
                        leads,
                        lost,
                        stop,
                        remote,
                        holds_data: follows,
                        etcd,
                        node_id,
                        routing_poll,
                    })
                })
                .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?
        };
        let publisher = self.config.has(Role::Indexer).then(|| {
            let publisher = Publisher::new(
                self.etcd.clone(),
                self.deep.clone(),
                &self.config.node_id,
                &format!("{:016x}", membership.lease()),
            );
            let (database, stop, status) =
                (database.clone(), stop.clone(), self.publishing.clone());
            let interval = self.config.publish_interval;
            std::thread::Builder::new()
                .name("puffer-publish".into())
                .spawn(move || publish(publisher, &database, interval, &stop, &status))
        });
        let publisher = publisher
            .transpose()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?;
        let placer = coordinator.clone().map(|candidate| {
            let (etcd, stop) = (self.etcd.clone(), stop.clone());
            let (replicas, status) = (self.config.segment_replicas, self.placing.clone());
            let planning = (
                self.config.popularity_window,
                self.config.joint_work_budget,
                self.config.placement_policy,
            );
            std::thread::Builder::new()
                .name("puffer-placement".into())
                .spawn(move || place(&etcd, &candidate, replicas, planning, &stop, &status))
        });
        let placer = placer
            .transpose()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?;
        let collector = self.config.has(Role::Ingest).then(|| {
            let (etcd, log, shipper) = (self.etcd.clone(), self.log.clone(), self.shipper.clone());
            let (stop, status, interval) = (
                stop.clone(),
                self.log_gc.clone(),
                self.config.log_gc_interval,
            );
            std::thread::Builder::new()
                .name("puffer-log-gc".into())
                .spawn(move || collect_log(&etcd, &log, &shipper, interval, &stop, &status))
        });
        let collector = collector
            .transpose()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?;
        let retention = self.config.history_retention;
        let compactor = (self.config.has(Role::Ingest) && !retention.is_zero()).then(|| {
            let (etcd, shipper) = (self.etcd.clone(), self.shipper.clone());
            let (stop, status) = (stop.clone(), self.history.clone());
            std::thread::Builder::new()
                .name("puffer-etcd-history".into())
                .spawn(move || compact_history(&etcd, &shipper, retention, &stop, &status))
        });
        let compactor = compactor
            .transpose()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?;
        let holder = self.config.has(Role::Data).then(|| {
            let parts = (self.etcd.clone(), self.deep.clone(), self.log.clone());
            let (database, stop, status) = (database.clone(), stop.clone(), self.holding.clone());
            let (node_id, grace) = (self.config.node_id.clone(), self.config.release_grace);
            let only_placed = holds_only_placed(&self.config.roles);
            std::thread::Builder::new()
                .name("puffer-holding".into())
                .spawn(move || {
                    hold(
                        parts,
                        &database,
                        (&node_id, grace, only_placed),
                        &stop,
                        &status,
                    )
                })
        });
        let holder = holder
            .transpose()
            .map_err(|e| ClusterError::Unavailable(format!("cannot start a thread: {e}")))?;
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = Some(Running {
            membership,
            follower,
            _rpc: rpc,
            _coordinator: coordinator,
            watcher: Some(watcher),
            publisher,
            collector,
            compactor,
            placer,
            holder,
            stop,
        });
        Ok(())
    }

    /// Follows the log until `database` holds SCU `scu`, within
    /// [`SEEDED_CATCH_UP_DEADLINE`].
    fn catch_up_to(&self, database: &Database, scu: u64) -> Result<()> {
        let started = Instant::now();
        loop {
            match self.log.catch_up(database) {
                Ok(held) if held >= scu => return Ok(()),
                Ok(held) => {
                    return Err(ClusterError::Corrupt {
                        key: self.etcd.keys().log_tail(),
                        detail: format!(
                            "the log ends at SCU {held}, before SCU {scu} that a published \
                             shard covers"
                        ),
                    })
                }
                Err(e) if started.elapsed() >= SEEDED_CATCH_UP_DEADLINE => {
                    return Err(ClusterError::Unavailable(format!(
                        "following the log past the loaded segments (SCU {scu}): {e}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Why this node must stop (its lease is gone, so others may act on its data),
    /// if it must.
    pub fn lost(&self) -> Option<String> {
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether it is the ingest leader now.
    pub fn leads_ingest(&self) -> bool {
        self.leads_ingest.load(Ordering::Acquire)
    }

    /// Shard popularity and placement, for `GET /v1/admin/placement`: from the
    /// coordinator's last checkpoint and placement in etcd (any node can answer).
    pub fn placement_status(&self) -> serde_json::Value {
        let text = |e: ClusterError| json!({"error": e.to_string()});
        let placement = match crate::placement::read_placement(&self.etcd) {
            Ok(placement) => placement,
            Err(e) => return text(e),
        };
        let book = match crate::popularity::read_checkpoint(&self.etcd) {
            Ok(book) => book.unwrap_or_default(),
            Err(e) => return text(e),
        };
        let tables =
            match puffer_node::catalog::Catalog::tables(&EtcdCatalog::new(self.etcd.clone())) {
                Ok(tables) => tables,
                Err(e) => return json!({"error": e.to_string()}),
            };
        let popularity = book.popularity();
        let newest = book.newest_window();
        let mut shards = Vec::new();
        for table in &tables {
            for shard in 0..table.layout.shards {
                let key = (table.uid, shard);
                let holders = placement
                    .as_ref()
                    .and_then(|p| p.holders(table.uid, shard))
                    .unwrap_or_default();
                shards.push(json!({
                    "table": table.name,
                    "uid": table.uid,
                    "shard": shard,
                    "popularity": popularity.get(&key).copied().unwrap_or(0.0),
                    "reads_last_window": newest.get(&key).copied().unwrap_or(0),
                    "replicas": holders.len(),
                    "holders": holders,
                    "fractions": placement.as_ref().and_then(|p| p.fractions(table.uid, shard)),
                    "dropping": placement.as_ref().map(|p| p.dropping(table.uid, shard).to_vec()).unwrap_or_default(),
                    "planned_layers": placement.as_ref().and_then(|p| p.planned_layers(table.uid, shard)),
                }));
            }
        }
        json!({
            "mode": "cluster",
            "policy": match (self.config.popularity_window.is_zero(), self.config.placement_policy) {
                (true, _) => "uniform: every shard on --segment-replicas data nodes",
                (false, PlacementPolicy::Getafix) => "getafix: replicas and routing fractions by popularity, at least --segment-replicas each",
                (false, PlacementPolicy::Scarlett) => "scarlett: a replica per read in flight over the last window, at least --segment-replicas each",
            },
            "window_seconds": self.config.popularity_window.as_secs_f64(),
            "windows_recorded": book.windows_recorded,
            "windows_remembered": book.window_count(),
            "floor_replicas": placement.as_ref().map(|p| p.replicas),
            "shards": shards,
            "shards_per_node": placement.as_ref().map(crate::placement::ShardPlacement::shards_per_node),
            "rooms": book.rooms.iter().map(|(node, room)| json!({
                "node": node,
                "used_bytes": room.used_bytes,
                "capacity_bytes": room.capacity_bytes,
                "gc_threshold_bytes": (room.capacity_bytes as f64 * puffer_adapt::replication::GcConfig::default().threshold_fraction) as u64,
            })).collect::<Vec<_>>(),
            "joint_work_budget": self.config.joint_work_budget,
            "joint": placement.as_ref().and_then(|p| p.joint.clone()),
            "placement_error": self.placing.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        })
    }

    /// The cluster as this node sees it, for `GET /v1/admin/cluster`.
    pub fn status(&self, database: &Database) -> serde_json::Value {
        let published = database.published();
        let members = members(&self.etcd);
        let tail = self.log.tail();
        let ingest = leader_of(&self.etcd, self.etcd.keys().ingest_election());
        let coordinator = leader(&self.etcd);
        let follower_error = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(|r| {
                r.follower
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref()
                    .and_then(Follower::last_error)
            });
        let text = |e: ClusterError| json!({"error": e.to_string()});
        json!({
            "mode": "cluster",
            "cluster": self.config.etcd.cluster,
            "node_id": self.config.node_id,
            "roles": self.config.roles,
            "deep_storage": self.deep.location(),
            "published": published,
            "log_tail": tail.as_ref().map_or_else(|e| json!({"error": e.to_string()}), |t| json!(t)),
            "behind_log_by": tail.as_ref().ok().map(|t| t.saturating_sub(published)),
            "leads_ingest": self.leads_ingest(),
            "ingest_leader": ingest.map_or_else(text, |l| json!(l.map(|l| l.node_id))),
            "coordinator_leader": coordinator.map_or_else(text, |l| json!(l.map(|l| l.node_id))),
            "members": members.map_or_else(text, |m| json!(m)),
            "follower_error": follower_error,
            "reads": match self.remote.broker() {
                Some(broker) if holds_only_placed(&self.config.roles) => json!({
                    "from": "the shards placed here from this node's own copy, the others \
                             through this node's broker",
                    "data_nodes": broker.routing(),
                    "snapshot_waits": broker.snapshot_waits(),
                }),
                Some(broker) => json!({
                    "from": "data nodes, through this broker",
                    "data_nodes": broker.routing(),
                    "snapshot_waits": broker.snapshot_waits(),
                }),
                None => json!({"from": "this node's own copy"}),
            },
            "holding": holds_only_placed(&self.config.roles).then(|| {
                json!(self.holding.lock().unwrap_or_else(PoisonError::into_inner).clone())
            }),
            "lost": self.lost(),
            "seeded": self.seeded.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            "placement": crate::placement::read_placement(&self.etcd).map_or_else(
                |e| json!({"error": e.to_string()}),
                |p| json!(p.map(|p| json!({"replicas": p.replicas, "shards_per_node": p.shards_per_node()})))
            ),
            "placement_error": self.placing.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            "log_gc": self.config.has(Role::Ingest).then(|| {
                json!(self.log_gc.lock().unwrap_or_else(PoisonError::into_inner).clone())
            }),
            "etcd_history": self.config.has(Role::Ingest).then(|| {
                let status = self.history.lock().unwrap_or_else(PoisonError::into_inner).clone();
                json!({
                    "retention_s": self.config.history_retention.as_secs_f64(),
                    "compactions": status.compactions,
                    "compacted_to": status.compacted_to,
                    "error": status.error,
                })
            }),
            "publishing": self.config.has(Role::Indexer).then(|| {
                json!(self.publishing.lock().unwrap_or_else(PoisonError::into_inner).clone())
            }),
        })
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        if let Some(mut running) = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            running.stop.store(true, Ordering::Release);
            for thread in [
                running.watcher.take(),
                running.publisher.take(),
                running.collector.take(),
                running.compactor.take(),
                running.placer.take(),
                running.holder.take(),
            ]
            .into_iter()
            .flatten()
            {
                let _ = thread.join();
            }
            drop(
                running
                    .follower
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            let _ = running.membership;
        }
    }
}

struct WatchParts {
    database: Arc<Database>,
    membership: Arc<Membership>,
    follower: Arc<Mutex<Option<Follower>>>,
    ingest: Option<Candidate>,
    log: ClusterLog,
    shipper: Arc<IngestShipper>,
    leads: Arc<AtomicBool>,
    lost: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    remote: Arc<ClusterRemote>,
    holds_data: bool,
    etcd: Etcd,
    node_id: String,
    routing_poll: Duration,
}

/// How often a node that follows the log reports how far it has applied it.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Puts this node's progress (the last SCU applied) on its lease.
fn report_progress(etcd: &Etcd, node_id: &str, lease: i64, applied: u64) -> Result<()> {
    let key = etcd.keys().node_progress(node_id);
    etcd.call(move |mut client| async move {
        client
            .put(
                key,
                applied.to_string(),
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            )
            .await
    })?;
    Ok(())
}

/// Watches the lease and the ingest election: takes over as ingest leader once
/// elected, steps down and back after a group whose shipping had an unknown outcome
/// (etcd away, say), and reports a lost lease. On a broker, keeps the data nodes and
/// (with no log followed) the tables up to date.
fn watch(parts: WatchParts) {
    let mut data_nodes_at = Instant::now();
    let mut routing_at: Option<Instant> = None;
    let mut tables_at = Instant::now();
    let mut progress_at = Instant::now();
    let mut reported = None;
    let mut unfinished_subspaces = false;
    while !parts.stop.load(Ordering::Acquire) {
        if parts.holds_data && progress_at.elapsed() >= PROGRESS_INTERVAL {
            progress_at = Instant::now();
            let applied = parts.database.published();
            if reported != Some(applied) {
                // etcd away: reported at a later tick.
                let lease = parts.membership.lease();
                if report_progress(&parts.etcd, &parts.node_id, lease, applied).is_ok() {
                    reported = Some(applied);
                }
            }
        }
        if data_nodes_at.elapsed() >= DATA_NODES_INTERVAL {
            data_nodes_at = Instant::now();
            // etcd away: routing stays as it was.
            let _ = parts.remote.refresh_data_nodes();
            let due = routing_at.is_none_or(|at| {
                at.elapsed() >= parts.routing_poll || parts.remote.wants_routing()
            });
            if due && parts.remote.refresh_routing().is_ok() {
                routing_at = Some(Instant::now());
            }
        }
        if !parts.holds_data && tables_at.elapsed() >= TABLES_INTERVAL {
            tables_at = Instant::now();
            let _ = parts.database.sync_tables();
        }
        if parts.database.ship_stopped() {
            // Writes are refused (retryably) until the log says what was committed.
            parts.leads.store(false, Ordering::Release);
            parts.shipper.step_down();
            parts.database.set_following(true);
            let _ = parts.database.resume_writes();
        }
        if parts.membership.is_lost() {
            *parts.lost.lock().unwrap_or_else(PoisonError::into_inner) = Some(
                "this node's lease expired: others may have taken over its work; restart it".into(),
            );
            return;
        }
        let elected = parts.ingest.as_ref().and_then(Candidate::leadership);
        if let (Some(leadership), false) = (elected, parts.leads.load(Ordering::Acquire)) {
            // Stop following, hold every SCU the log has, then number new ones.
            drop(
                parts
                    .follower
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            // With etcd or deep storage away this fails: it is tried again at the
            // next tick, and writes are refused meanwhile.
            if parts.log.catch_up(&parts.database).is_ok() {
                parts.shipper.lead(leadership);
                parts.database.set_following(false);
                parts.leads.store(true, Ordering::Release);
                unfinished_subspaces = true;
            }
        }
        if unfinished_subspaces && parts.leads.load(Ordering::Acquire) {
            // A subspace build is the leader's and ended with the last one: what it
            // left unready goes (etcd away: tried again at the next tick).
            unfinished_subspaces = parts.database.drop_unfinished_subspaces().is_err();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The indexer's loop: a publishing round every `interval` until stopped.
fn publish(
    mut publisher: Publisher,
    database: &Database,
    interval: Duration,
    stop: &AtomicBool,
    status: &Mutex<PublishStatus>,
) {
    let mut last = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() < interval {
            continue;
        }
        last = Instant::now();
        let round = publisher.round(database, false);
        let mut status = status.lock().unwrap_or_else(PoisonError::into_inner);
        status.rounds += 1;
        match round {
            Ok(round) => {
                status.shards += round.shards;
                status.bytes += round.bytes;
                status.last = Some(round);
                status.error = None;
            }
            Err(e) => status.error = Some(e.to_string()),
        }
    }
}

/// The ingest node's log collection: every `interval`, while it leads, removes the
/// groups up to the horizon computed the round before (so that a node that read the
/// published segments meanwhile still finds the groups past them), then computes the
/// next.
fn collect_log(
    etcd: &Etcd,
    log: &ClusterLog,
    shipper: &IngestShipper,
    interval: Duration,
    stop: &AtomicBool,
    status: &Mutex<LogGcStatus>,
) {
    let mut last = Instant::now();
    let mut horizon = 0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last.elapsed() < interval {
            continue;
        }
        last = Instant::now();
        let Some(leadership) = shipper.leadership() else {
            horizon = 0; // a new leader starts its rounds afresh
            continue;
        };
        let collected = if horizon > 0 {
            log.collect_all(&leadership, horizon, stop).map(Some)
        } else {
            Ok(None)
        };
        let next = crate::segments::log_horizon(etcd);
        let mut status = status.lock().unwrap_or_else(PoisonError::into_inner);
        status.rounds += 1;
        status.error = None;
        match collected {
            Ok(Some(collection)) => {
                status.groups += collection.groups;
                status.objects_left += collection.objects_left;
                status.first_kept = collection.first_kept;
            }
            Ok(None) => {}
            Err(e) => status.error = Some(e.to_string()),
        }
        match next {
            Ok(next) => horizon = next,
            Err(e) => {
                horizon = 0;
                status.error = Some(e.to_string());
            }
        }
        status.horizon = horizon;
    }
}

/// The ingest leader's compaction of etcd's history ([`crate::etcd::history`]): while
/// it leads, it notes the revision every mark interval and compacts up to the newest
/// mark at least `retention` old. A new leader starts its marks afresh, so it compacts
/// only once it has led for the retention.
fn compact_history(
    etcd: &Etcd,
    shipper: &IngestShipper,
    retention: Duration,
    stop: &AtomicBool,
    status: &Mutex<HistoryStatus>,
) {
    use crate::etcd::history::{compact, current_revision, mark_interval, HistoryMarks};
    let mut marks = HistoryMarks::new(retention);
    let mut last: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last.is_some_and(|at| at.elapsed() < mark_interval(retention)) {
            continue;
        }
        last = Some(Instant::now());
        if shipper.leadership().is_none() {
            marks = HistoryMarks::new(retention);
            continue;
        }
        let round = current_revision(etcd).and_then(|revision| {
            match marks.note(Instant::now(), revision) {
                Some(target) => compact(etcd, target).map(|made| Some((target, made))),
                None => Ok(None),
            }
        });
        let mut status = status.lock().unwrap_or_else(PoisonError::into_inner);
        match round {
            Ok(Some((target, made))) => {
                marks.compacted(target);
                status.compactions += u64::from(made);
                status.compacted_to = target;
                status.error = None;
            }
            Ok(None) => status.error = None,
            // etcd away: the marks stay, and the next round compacts.
            Err(e) => status.error = Some(e.to_string()),
        }
    }
}

/// A data node's holding loop: every [`HOLDING_INTERVAL`], a node holding only what
/// is placed on it (`only_placed`) takes on the shards placed on it and lets go of
/// those no longer placed ([`crate::holding`]); every data node sets the layers the
/// joint planner chose for the shards it holds.
fn hold(
    (etcd, deep, log): (Etcd, DeepStorage, ClusterLog),
    database: &Database,
    (node_id, grace, only_placed): (&str, Duration, bool),
    stop: &AtomicBool,
    status: &Mutex<HoldingStatus>,
) {
    let mut memory = HoldingMemory::default();
    let mut last: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        if last.is_some_and(|at| at.elapsed() < HOLDING_INTERVAL) {
            continue;
        }
        last = Some(Instant::now());
        let mut current = status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let round = (|| -> puffer_query::Result<()> {
            let placement = crate::placement::read_placement(&etcd)?;
            // Both run every round, whatever the other did: a take-on that keeps
            // failing must not keep the planned layers from being set.
            let held = if only_placed {
                hold_round(
                    &etcd,
                    &deep,
                    &log,
                    database,
                    placement.as_ref(),
                    (node_id, grace),
                    &mut memory,
                    &mut current,
                )
            } else {
                Ok(())
            };
            let layered = match &placement {
                Some(placement) => {
                    apply_planned_layers(placement, database, &mut memory, &mut current)
                }
                None => Ok(()),
            };
            held.and(layered)
        })();
        current.error = round.err().map(|e| e.to_string());
        *status.lock().unwrap_or_else(PoisonError::into_inner) = current;
    }
}

/// The coordinator's placement loop: every [`crate::placement::PLACEMENT_INTERVAL`], while
/// it leads, places every shard on the live data nodes; every `window` (if not zero) it
/// first collects the data nodes' read counts and plans by popularity. The book of
/// counts is read from etcd's checkpoint when it starts leading and written back every
/// window. The last failure is kept for status.
fn place(
    etcd: &Etcd,
    candidate: &Candidate,
    replicas: usize,
    (window, joint_work_budget, policy): (Duration, f64, PlacementPolicy),
    stop: &AtomicBool,
    status: &Mutex<Option<String>>,
) {
    let catalog = EtcdCatalog::new(etcd.clone());
    let mut last: Option<Instant> = None;
    // While leading: the book and when its last window closed.
    let mut book: Option<(crate::popularity::AccessBook, Instant)> = None;
    let mut clients = crate::popularity::CountClients::default();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last.is_some_and(|at| at.elapsed() < crate::placement::PLACEMENT_INTERVAL) {
            continue;
        }
        last = Some(Instant::now());
        let Some(leadership) = candidate.leadership() else {
            book = None;
            continue;
        };
        let outcome = (|| -> Result<()> {
            if book.is_none() && !window.is_zero() {
                let checkpoint = crate::popularity::read_checkpoint(etcd)?;
                book = Some((checkpoint.unwrap_or_default(), Instant::now()));
            }
            let popularity = match book.as_mut() {
                Some((book, closed)) if closed.elapsed() >= window => {
                    *closed = Instant::now();
                    let members = crate::etcd::members(etcd)?;
                    let reports = clients.collect(&members);
                    let live: Vec<String> = members.into_iter().map(|m| m.node_id).collect();
                    book.forget_nodes_except(&live);
                    book.record_window(&reports)?;
                    crate::popularity::checkpoint(&leadership, book)?;
                    Some((
                        book.popularity(),
                        crate::popularity::storage_of(&reports),
                        crate::popularity::curves_of(&reports),
                        book.newest_window(),
                    ))
                }
                _ => None,
            };
            let in_flight;
            let planner = match (&popularity, policy) {
                (Some(p), PlacementPolicy::Scarlett) => {
                    in_flight = crate::popularity::reads_in_flight(&p.3, &p.2, window);
                    crate::placement::Planner::Scarlett(&in_flight)
                }
                (Some(p), PlacementPolicy::Getafix) if joint_work_budget > 0.0 => {
                    crate::placement::Planner::Joint(crate::placement::JointInput {
                        curves: &p.2,
                        reads_per_second_per_popularity: 1.0 / (2.0 * window.as_secs_f64()),
                        config: puffer_adapt::replication::joint::JointConfig {
                            work_budget_per_node: joint_work_budget,
                        },
                    })
                }
                _ => crate::placement::Planner::Getafix,
            };
            crate::placement::coordinate(
                etcd,
                &leadership,
                &catalog,
                replicas,
                popularity.as_ref().map(|p| &p.0),
                popularity.as_ref().map(|p| &p.1),
                &planner,
            )?;
            Ok(())
        })();
        *status.lock().unwrap_or_else(PoisonError::into_inner) =
            outcome.err().map(|e| e.to_string());
    }
}
