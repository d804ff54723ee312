//! One shard on another node, as the node crate's `ShardReplicas`: every request a
//! gRPC call with a deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use puffer_node::message::{
    PendingReply, ReadRequest, ReplicaRequest, ReplicaResponse, Reply, ShardReplicas, Wait,
};
use puffer_node::remote::{LeaderRequest, LeaderResponse};
use puffer_query::QueryError;
use puffer_store::{Result, StoreError};
use tonic::transport::{Channel, Endpoint};

use super::proto::replica_client::ReplicaClient;
use super::proto::{AccessCountsRequest, LeadCall, PublishedRequest, ReplicaCall, TakeOnCall};
use super::{error_of, query_error_of, MAX_MESSAGE_BYTES, MAX_STREAMED_ANSWER_BYTES};
use crate::error::ClusterError;
use crate::runtime::Bridge;

/// Default deadline of one call.
pub const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(10);
/// Deadline of a call asking a node to take a shard on (a download and a catch-up).
pub const TAKE_ON_DEADLINE: Duration = Duration::from_secs(60);

/// A node's answer to a `Published` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The newest snapshot the node had published when it answered.
    pub published: u64,
    /// Whether it held less than the snapshot asked for when the call came, and
    /// waited.
    pub waited: bool,
}

/// A connection to one node's replica service; cheap to clone.
#[derive(Clone, Debug)]
pub struct NodeClient {
    bridge: Bridge,
    client: ReplicaClient<Channel>,
    address: String,
    deadline: Duration,
    /// The queue length the node's last answer carried.
    queue_length: Arc<AtomicUsize>,
}

impl NodeClient {
    /// A client of the node at `address` (`host:port`); connects on first use.
    pub fn new(address: &str, deadline: Duration) -> crate::Result<NodeClient> {
        if deadline.is_zero() || deadline > Duration::from_secs(600) {
            return Err(ClusterError::Invalid(
                "a call deadline is between 1 ms and 600 s".into(),
            ));
        }
        let bridge = Bridge::start("puffer-rpc-client")?;
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| ClusterError::Invalid(format!("bad node address {address:?}: {e}")))?
            .connect_timeout(deadline.min(Duration::from_secs(5)))
            .timeout(deadline)
            .tcp_nodelay(true);
        let channel = {
            let _entered = bridge.enter();
            endpoint.connect_lazy()
        };
        let client = ReplicaClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(NodeClient {
            bridge,
            client,
            address: address.to_string(),
            deadline,
            queue_length: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The node's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The queue length the node's last answer carried (0 before any).
    pub fn queue_length(&self) -> usize {
        self.queue_length.load(Ordering::Relaxed)
    }

    /// The call's answer; a search's comes in chunks (it may be larger than one
    /// message), joined up to [`MAX_STREAMED_ANSWER_BYTES`].
    fn call_future(
        &self,
        call: ReplicaCall,
        streamed: bool,
    ) -> impl std::future::Future<Output = Result<ReplicaResponse>> + Send + 'static {
        let mut client = self.client.clone();
        let who = format!("node {}", self.address);
        let queue_length = self.queue_length.clone();
        async move {
            let failed = |status: tonic::Status| error_of(&status, &who);
            let (bytes, queue) = if streamed {
                let mut chunks = client.call_stream(call).await.map_err(failed)?.into_inner();
                let (mut bytes, mut queue) = (Vec::new(), 0);
                while let Some(chunk) = chunks.message().await.map_err(failed)? {
                    if bytes.len() + chunk.part.len() > MAX_STREAMED_ANSWER_BYTES {
                        return Err(StoreError::InvalidQuery(format!(
                            "{who}: an answer of more than {MAX_STREAMED_ANSWER_BYTES} bytes \
                             (ask for fewer rows)"
                        )));
                    }
                    bytes.extend_from_slice(&chunk.part);
                    queue = chunk.queue_length;
                }
                (bytes, queue)
            } else {
                let answer = client.call(call).await.map_err(failed)?.into_inner();
                (answer.response, answer.queue_length)
            };
            queue_length.store(
                usize::try_from(queue).unwrap_or(usize::MAX),
                Ordering::Relaxed,
            );
            super::decode(&bytes).map_err(|e| StoreError::Corrupt {
                path: who.into(),
                detail: format!("an answer that does not decode: {e}"),
            })
        }
    }

    /// Sends `request` for shard `shard` of table `table` (uid `uid`) to replica
    /// `replica`, or to the one the node picks; waits at most the deadline.
    pub fn call(
        &self,
        table: &str,
        uid: u64,
        shard: u32,
        replica: Option<u32>,
        request: &ReplicaRequest,
    ) -> Result<ReplicaResponse> {
        let call = encode_call(table, uid, shard, replica, request)?;
        let future = self.call_future(call, streamed(request));
        // The channel's deadline answers first; the bridge's is a backstop.
        let outcome = self
            .bridge
            .call(self.deadline + Duration::from_secs(1), async move {
                Ok::<_, ClusterError>(future.await)
            });
        match outcome {
            Ok(answer) => answer,
            Err(late) => Err(StoreError::Unavailable(format!(
                "node {}: {late}",
                self.address
            ))),
        }
    }

    /// Has the node, the ingest leader, do `request` (it refuses, retryably, if it
    /// is not the leader); waits at most the deadline.
    pub fn lead(&self, request: &LeaderRequest) -> puffer_query::Result<LeaderResponse> {
        let request = super::encode_call_message("a leader request", request)?;
        let mut client = self.client.clone();
        let who = format!("node {}", self.address);
        let answer = self
            .bridge
            .call(self.deadline + Duration::from_secs(1), async move {
                let answer = match client.lead(LeadCall { request }).await {
                    Ok(answer) => answer.into_inner(),
                    Err(status) => return Ok(Err(query_error_of(&status, &who))),
                };
                Ok::<_, ClusterError>(super::decode::<LeaderResponse>(&answer.response).map_err(
                    |e| {
                        QueryError::from(StoreError::Corrupt {
                            path: who.into(),
                            detail: format!("an answer that does not decode: {e}"),
                        })
                    },
                ))
            });
        match answer {
            Ok(answer) => answer,
            Err(late) => Err(StoreError::Unavailable(format!(
                "node {}: {late}; the write may or may not have been applied",
                self.address
            ))
            .into()),
        }
    }

    /// Has the node take shard `shard` of table `table` (uid `uid`) on now; `Ok` once
    /// it holds it. Its deadline is [`TAKE_ON_DEADLINE`].
    pub fn take_on(&self, table: &str, uid: u64, shard: u32) -> puffer_query::Result<()> {
        let mut client = self.client.clone();
        let who = format!("node {}", self.address);
        let call = TakeOnCall {
            table: table.to_string(),
            table_uid: uid,
            shard,
        };
        let answer = self
            .bridge
            .call(TAKE_ON_DEADLINE + Duration::from_secs(1), async move {
                match tokio::time::timeout(TAKE_ON_DEADLINE, client.take_on(call)).await {
                    Ok(Ok(_)) => Ok::<_, ClusterError>(Ok(())),
                    Ok(Err(status)) => Ok(Err(query_error_of(&status, &who))),
                    Err(_) => Ok(Err(QueryError::from(StoreError::Unavailable(format!(
                        "{who} took no shard on within {} s",
                        TAKE_ON_DEADLINE.as_secs()
                    ))))),
                }
            });
        match answer {
            Ok(answer) => answer,
            Err(late) => {
                Err(StoreError::Unavailable(format!("node {}: {late}", self.address)).into())
            }
        }
    }

    /// The newest snapshot the node has published, asked in the background: the
    /// receiver gets it (or the error) within the deadline.
    pub fn published(&self) -> mpsc::Receiver<Result<Held>> {
        self.published_at_least(0, Duration::ZERO)
    }

    /// The newest snapshot the node has published once it is at least `at_least`, or
    /// after `wait`, whichever is first, and whether the node waited; asked in the
    /// background, the receiver gets it (or the error) within the deadline. The wait is
    /// cut to half the deadline (and to
    /// [`MAX_PUBLISHED_WAIT`](super::server::MAX_PUBLISHED_WAIT)): the connection's
    /// deadline bounds every call, a waiting one too, and the node must have time left
    /// to answer after its wait (a caller waiting longer asks again).
    pub fn published_at_least(
        &self,
        at_least: u64,
        wait: Duration,
    ) -> mpsc::Receiver<Result<Held>> {
        let mut client = self.client.clone();
        let who = format!("node {}", self.address);
        let wait = wait
            .min(self.deadline / 2)
            .min(super::server::MAX_PUBLISHED_WAIT);
        let deadline = self.deadline;
        let request = PublishedRequest {
            at_least,
            wait_ms: wait.as_millis() as u32,
        };
        let (sender, receiver) = mpsc::sync_channel(1);
        self.bridge.spawn(async move {
            let answer = match tokio::time::timeout(deadline, client.published(request)).await {
                Ok(Ok(answer)) => {
                    let answer = answer.into_inner();
                    Ok(Held {
                        published: answer.published,
                        waited: answer.waited,
                    })
                }
                Ok(Err(status)) => Err(error_of(&status, &who)),
                Err(_) => Err(StoreError::Unavailable(format!(
                    "{who} did not answer within {} ms",
                    deadline.as_millis()
                ))),
            };
            let _ = sender.send(answer);
        });
        receiver
    }

    /// The reads every shard held on the node has answered, as its counters stand, and
    /// the node's room; waits at most the deadline.
    pub fn access_counts(&self) -> Result<crate::popularity::AccessReport> {
        let mut client = self.client.clone();
        let who = format!("node {}", self.address);
        let answer = self.bridge.call(self.deadline, async move {
            let answer = match client.access_counts(AccessCountsRequest {}).await {
                Ok(answer) => answer.into_inner(),
                Err(status) => return Ok(Err(error_of(&status, &who))),
            };
            let budget = answer.memory_budget_bytes;
            Ok::<_, ClusterError>(
                super::decode(&answer.counts)
                    .map(|shards| crate::popularity::AccessReport {
                        shards,
                        memory_budget_bytes: budget,
                    })
                    .map_err(|e| StoreError::Corrupt {
                        path: who.into(),
                        detail: format!("access counts that do not decode: {e}"),
                    }),
            )
        });
        match answer {
            Ok(answer) => answer,
            Err(late) => Err(StoreError::Unavailable(format!(
                "node {}: {late}",
                self.address
            ))),
        }
    }

    /// Queues the call; its answer comes through the returned reply.
    pub fn submit(
        &self,
        table: &str,
        uid: u64,
        shard: u32,
        request: &ReplicaRequest,
    ) -> Result<PendingReply<'static>> {
        let call = encode_call(table, uid, shard, None, request)?;
        Ok(self.submit_call(call, streamed(request)))
    }

    fn submit_call(&self, call: ReplicaCall, streamed: bool) -> PendingReply<'static> {
        let future = self.call_future(call, streamed);
        let (sender, receiver) = mpsc::sync_channel(1);
        let deadline = self.deadline;
        let who = format!("node {}", self.address);
        let late = who.clone();
        let queue_length = self.queue_length.clone();
        self.bridge.spawn(async move {
            let answer = match tokio::time::timeout(deadline, future).await {
                Ok(answer) => answer,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "{late} did not answer within {} ms",
                    deadline.as_millis()
                ))),
            };
            let _ = sender.send((answer, queue_length.load(Ordering::Relaxed)));
        });
        PendingReply::from_receiver(receiver, who)
    }
}

/// Whether the request's answer comes in chunks: a search's, which may be larger
/// than one message.
fn streamed(request: &ReplicaRequest) -> bool {
    matches!(request, ReplicaRequest::Read(ReadRequest::Search { .. }))
}

fn encode_call(
    table: &str,
    uid: u64,
    shard: u32,
    replica: Option<u32>,
    request: &ReplicaRequest,
) -> Result<ReplicaCall> {
    let request = super::encode_call_message("a replica request", request)?;
    Ok(ReplicaCall {
        table: table.to_string(),
        table_uid: uid,
        shard,
        replica,
        request,
    })
}

/// One shard of a table on another node: the node crate's `ShardReplicas` over gRPC.
#[derive(Clone, Debug)]
pub struct RemoteShard {
    node: NodeClient,
    table: String,
    uid: u64,
    shard: u32,
    replicas: u32,
}

impl RemoteShard {
    /// Shard `shard` of table `table` (uid `uid`, `replicas` replicas) on `node`.
    pub fn new(node: NodeClient, table: &str, uid: u64, shard: u32, replicas: u32) -> RemoteShard {
        RemoteShard {
            node,
            table: table.to_string(),
            uid,
            shard,
            replicas,
        }
    }
}

impl ShardReplicas for RemoteShard {
    fn replica_count(&self) -> u32 {
        self.replicas
    }

    fn read(&self, request: ReplicaRequest, wait: Wait) -> Result<Reply> {
        match wait {
            // A remote answer always waits on the network: an event loop's caller
            // takes its blocking path instead.
            Wait::Never => Ok(Reply::WouldWait(request)),
            Wait::Allowed => self
                .node
                .call(&self.table, self.uid, self.shard, None, &request)
                .map(Reply::Answered),
        }
    }

    fn submit(&self, request: ReplicaRequest) -> Result<PendingReply<'_>> {
        self.node
            .submit(&self.table, self.uid, self.shard, &request)
    }

    fn send_to(&self, replica: u32, request: ReplicaRequest) -> Result<ReplicaResponse> {
        self.node
            .call(&self.table, self.uid, self.shard, Some(replica), &request)
    }
}
