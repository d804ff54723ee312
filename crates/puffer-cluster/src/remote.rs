//! The cluster's answer to the node crate's [`Remote`]: a node without data reads
//! through a [`Broker`] from the data nodes; a node that follows the log hands writes
//! and table changes to the ingest leader over gRPC.
//!
//! A node reads its own writes: after a write handed on through this node, its reads
//! through the broker are at that SCU's snapshot or a newer one (the broker waits, up
//! to its deadline, for data nodes that are behind). A read with a freshness bound
//! (`FRESHNESS`) is instead at least at the snapshot the ingest leader names as holding
//! every write it acknowledged longer than the bound ago (without a leader: the log's
//! committed tail).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use puffer_node::message::{ReadAnswer, ReadRequest};
use puffer_node::remote::{LeaderRequest, LeaderResponse, Remote};
use puffer_query::{QueryError, Result};
use puffer_store::{ReadOptions, StoreError};

use crate::broker::Broker;
use crate::etcd::{leader_of, members, Etcd, EtcdCatalog, Role};
use crate::rpc::client::NodeClient;
use crate::scu_log::committed_tail;

/// How long the ingest leader's address is used before it is looked up again.
pub const LEADER_TTL: Duration = Duration::from_secs(5);
/// Deadline of a leader request that may take long (building a subspace): below the
/// longest call a node serves ([`crate::rpc::server::MAX_CALL_TIME`]), so that the
/// caller hears the node's own answer when it runs out.
pub const LONG_LEAD_DEADLINE: Duration = Duration::from_secs(50);

/// Reads through a broker, writes to the leader.
pub struct ClusterRemote {
    etcd: Etcd,
    broker: Option<Broker>,
    /// Whether every read goes through the broker (this node holds no data).
    reads_elsewhere: bool,
    deadline: Duration,
    /// The ingest leader as last looked up: (node id, client, when).
    leader: Mutex<Option<(String, NodeClient, Instant)>>,
    /// The newest SCU written through this node.
    written: AtomicU64,
}

impl std::fmt::Debug for ClusterRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRemote")
            .field("broker", &self.broker)
            .field("written", &self.written)
            .finish()
    }
}

impl ClusterRemote {
    /// A remote over `etcd`; with `reads_elsewhere`, every read goes through a broker,
    /// with `reads_some_elsewhere` (a data node holding only the shards placed on it)
    /// the reads of shards not held here do. Every call has `deadline`.
    pub fn new(
        etcd: Etcd,
        reads_elsewhere: bool,
        reads_some_elsewhere: bool,
        deadline: Duration,
    ) -> ClusterRemote {
        let broker = (reads_elsewhere || reads_some_elsewhere)
            .then(|| Broker::new(Box::new(EtcdCatalog::new(etcd.clone())), deadline));
        ClusterRemote {
            etcd,
            broker,
            reads_elsewhere,
            deadline,
            leader: Mutex::new(None),
            written: AtomicU64::new(0),
        }
    }

    /// The broker, on a node that reads elsewhere.
    pub fn broker(&self) -> Option<&Broker> {
        self.broker.as_ref()
    }

    /// Routes the broker to the live data nodes, as membership lists them; while
    /// etcd does not answer, it keeps routing to those it had.
    pub fn refresh_data_nodes(&self) -> crate::Result<()> {
        let Some(broker) = &self.broker else {
            return Ok(());
        };
        let nodes: Vec<(String, String)> = members(&self.etcd)?
            .into_iter()
            .filter(|card| card.roles.contains(&Role::Data))
            .filter_map(|card| card.rpc_address.map(|address| (card.node_id, address)))
            .collect();
        broker.set_data_nodes(&nodes)?;
        Ok(())
    }

    /// Reads the routing table (the coordinator's placement) again.
    pub fn refresh_routing(&self) -> crate::Result<()> {
        if let Some(broker) = &self.broker {
            broker.set_placement(crate::placement::read_placement(&self.etcd)?);
        }
        Ok(())
    }

    /// Whether a read met a shard the routing table does not place (a new one): then
    /// the table is read again before its poll is due.
    pub fn wants_routing(&self) -> bool {
        self.broker.as_ref().is_some_and(Broker::wants_placement)
    }

    /// `request` at least at the snapshot it must see: the newest SCU written through
    /// here when it asks for the newest data (a node reads its own writes), the ingest
    /// leader's [`ClusterRemote::freshness_floor`] when it has a freshness bound. A
    /// read at a chosen snapshot had its floor applied in the choice.
    fn floored(&self, request: &ReadRequest) -> Result<ReadRequest> {
        let read = request.read_options();
        if read.at.is_some() {
            return Ok(request.clone());
        }
        let floor = match read.freshness {
            None => self.written.load(Ordering::Acquire),
            Some(bound) => self.freshness_floor(bound)?,
        };
        Ok(if floor > read.min_snapshot {
            request.at_least(floor)
        } else {
            request.clone()
        })
    }

    /// A client of the ingest leader (looked up in etcd when not known or old).
    fn leader_client(&self) -> Result<NodeClient> {
        if let Some((_, client, at)) = &*self.leader.lock().unwrap_or_else(PoisonError::into_inner)
        {
            if at.elapsed() < LEADER_TTL {
                return Ok(client.clone());
            }
        }
        let unavailable = |why: String| QueryError::from(StoreError::Unavailable(why));
        let leader = leader_of(&self.etcd, self.etcd.keys().ingest_election())
            .map_err(|e| unavailable(format!("cannot look up the ingest leader: {e}")))?
            .ok_or_else(|| unavailable("the cluster has no ingest leader now".into()))?;
        let card = members(&self.etcd)
            .map_err(|e| unavailable(format!("cannot look up the ingest leader: {e}")))?
            .into_iter()
            .find(|card| card.node_id == leader.node_id)
            .ok_or_else(|| {
                unavailable(format!(
                    "the ingest leader {} is not a member now",
                    leader.node_id
                ))
            })?;
        let address = card.rpc_address.ok_or_else(|| {
            unavailable(format!(
                "the ingest leader {} serves no gRPC",
                leader.node_id
            ))
        })?;
        let client = NodeClient::new(&address, self.deadline)
            .map_err(|e| unavailable(format!("the ingest leader at {address}: {e}")))?;
        *self.leader.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((leader.node_id, client.clone(), Instant::now()));
        Ok(client)
    }

    /// What a read with freshness bound `bound` must see at least: the ingest leader
    /// acknowledged every write, so it alone knows which were acknowledged longer than
    /// `bound` ago (one round trip to it; a node's own writes do not tell, as other
    /// nodes write too). Without a leader to answer (gone, not elected yet, busy), the
    /// log's committed tail in etcd: every acknowledged SCU is at or below it, so the
    /// read is fresher than asked and may wait for lagging data nodes, but a lost
    /// leader costs it no answer.
    fn freshness_floor(&self, bound: Duration) -> Result<u64> {
        match self.lead(LeaderRequest::FreshnessFloor { bound }) {
            Ok(LeaderResponse::FreshnessFloor { seq }) => Ok(seq),
            Ok(other) => Err(StoreError::Unavailable(format!(
                "the ingest leader answered a freshness floor with {other:?}"
            ))
            .into()),
            Err(error) if error.retryable() => committed_tail(&self.etcd).map_err(|e| {
                StoreError::Unavailable(format!(
                    "no freshness floor: the ingest leader did not answer ({error}) and \
                     the log's tail cannot be read ({e})"
                ))
                .into()
            }),
            Err(error) => Err(error),
        }
    }
}

impl Remote for ClusterRemote {
    fn reads_elsewhere(&self) -> bool {
        self.reads_elsewhere
    }

    fn read(&self, table: &str, request: &ReadRequest) -> Result<ReadAnswer> {
        let broker = self.broker.as_ref().ok_or_else(|| {
            QueryError::from(StoreError::Unavailable(
                "this node holds every shard and reads its own data; it has no broker".into(),
            ))
        })?;
        broker.read(table, &self.floored(request)?)
    }

    fn choose_snapshot(&self, read: ReadOptions) -> Option<Result<u64>> {
        let broker = self.broker.as_ref()?;
        let floor = match read.freshness {
            None => Ok(self.written.load(Ordering::Acquire)),
            Some(bound) => self.freshness_floor(bound),
        };
        Some(floor.and_then(|floor| broker.common_snapshot(read.min_snapshot.max(floor))))
    }

    fn read_regions(
        &self,
        subspace: &str,
        request: &ReadRequest,
        regions: &[u32],
    ) -> Result<ReadAnswer> {
        let broker = self.broker.as_ref().ok_or_else(|| {
            QueryError::from(StoreError::Unavailable(
                "this node holds every shard and reads its own data; it has no broker".into(),
            ))
        })?;
        broker.read_regions(subspace, &self.floored(request)?, regions)
    }

    fn lead(&self, request: LeaderRequest) -> Result<LeaderResponse> {
        let client = self.leader_client()?;
        let client = if request.is_long() {
            NodeClient::new(client.address(), LONG_LEAD_DEADLINE).map_err(|e| {
                StoreError::Unavailable(format!("the ingest leader at {}: {e}", client.address()))
            })?
        } else {
            client
        };
        let answer = client.lead(&request);
        match &answer {
            Ok(LeaderResponse::Written { seq }) => {
                self.written.fetch_max(*seq, Ordering::AcqRel);
            }
            // Not the leader (any more), gone, late: look it up again next time. The
            // write is not tried again here, as its outcome may be unknown.
            Err(error) if error.retryable() => {
                *self.leader.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
            _ => {}
        }
        answer
    }
}
